#!/usr/bin/env bash
# The one test command: installs what is missing, builds (ASan+UBSan, -Werror), builds the
# fuzz targets with clang, and runs every unit, integration and fuzz-smoke test with ctest.
# Also builds with ThreadSanitizer and runs the integration and GitHub tests on that build
# (tsan.integration_github). Ends with ctest's summary; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc 2>/dev/null || echo 2)

./deploy/install-deps.sh

# GitHub's own definitions the tests are judged by (pinned in tests/package-lock.json).
if [ ! -d tests/node_modules/@octokit/webhooks-examples ] ||
   ! cmp -s tests/package-lock.json tests/node_modules/.package-lock.json 2>/dev/null; then
  (cd tests && npm ci --no-audit --no-fund --loglevel=error)
fi

# Fuzz targets: clang + libFuzzer, built apart from the sanitizer build.
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DHATCHERY_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$jobs" >/dev/null

# ThreadSanitizer: a third build, whose integration and GitHub tests run as one test.
cmake -S . -B build-tsan -DHATCHERY_TSAN=ON -DHATCHERY_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-tsan -j"$jobs" >/dev/null

cmake -S . -B build-test -DHATCHERY_SANITIZE=ON -DHATCHERY_WERROR=ON -DCMAKE_BUILD_TYPE=Debug \
  -DHATCHERY_FUZZ_DIR="$root/build-fuzz/tests/fuzz" -DHATCHERY_TSAN_DIR="$root/build-tsan" >/dev/null
cmake --build build-test -j"$jobs"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd build-test
ctest --output-on-failure -j"$jobs"
