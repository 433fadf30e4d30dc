#!/usr/bin/env bash
# The one test command: installs what is missing, builds (ASan+UBSan, -Werror), builds the
# fuzz targets with clang, and runs every unit, integration and fuzz-smoke test with ctest.
# Also builds with ThreadSanitizer and runs the integration and GitHub tests on that build
# (tsan.integration_github), and without sanitizers for Valgrind's memcheck
# (memcheck.paths). Ends with ctest's summary and a timing summary by phase;
# exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc 2>/dev/null || echo 2)

# Per-phase timing, printed at the end whatever the outcome.
phases=()
phase_start=$SECONDS
run_start=$SECONDS
phase_done() { phases+=("$(printf '%-28s %6d s' "$1" $((SECONDS - phase_start)))"); phase_start=$SECONDS; }
# The budget the suite is held to (a figure to read, not a pass/fail on time: the machines
# are noisy): 45 minutes on a new machine, 25 on one whose caches are filled. A run is
# "new" when the production images' cache had no image when it started.
cache_root=/var/cache/hatchery
if ls "$cache_root"/test-images/runner-*.json >/dev/null 2>&1; then
  run_kind=warm budget_s=1500
else
  run_kind="new machine" budget_s=2700
fi
timing_summary() {
  echo
  echo "== timing by phase =="
  printf '%s\n' "${phases[@]}"
  local log="$root/build-test/Testing/Temporary/LastTest.log"
  [ -f "$log" ] || log=$log.tmp # ctest was stopped before its end
  if [ -n "${ctest_ran:-}" ] && [ -f "$log" ]; then
    # The tests by group (the part of their name before the first dot), from ctest's log.
    awk '/^[0-9]+\/[0-9]+ Test: / {name=$3}
         /^Test time = / {split(name, p, "."); t[p[1]] += $4}
         END {for (g in t) printf "  ctest %-20s %6d s (test time, summed)\n", g, t[g]}' \
      "$log" | sort -k3 -nr
    echo "== the five longest tests =="
    awk '/^[0-9]+\/[0-9]+ Test: / {name=$3}
         /^Test time = / {printf "  %-32s %6d s\n", name, $4}' "$log" | sort -k2 -nr | head -n 5
  fi
  local whole=$((SECONDS - run_start))
  printf '%-28s %6d s  (budget for a %s run: %d s, %d%% of it)\n' "whole run" "$whole" \
    "$run_kind" "$budget_s" $((whole * 100 / budget_s))
}
trap timing_summary EXIT

./deploy/install-deps.sh
# Foreign binaries (package cross tests, image builds) run through binfmt_misc, which a new
# machine has not mounted: prepared once, here, for every test.
./images/enable-binfmt.sh
# The guests' architectures' packages (kernels, busybox, libjansson for the static agent)
# are fetched by several tests that run side by side: dpkg learns the architectures and
# apt's lists are read here, once, so that no test updates them under another.
for arch in ppc64el s390x; do
  dpkg --print-foreign-architectures | grep -qx "$arch" || { dpkg --add-architecture "$arch"; foreign_added=yes; }
done
if [ -n "${foreign_added:-}" ] || ! apt-cache show libjansson-dev:s390x >/dev/null 2>&1; then
  # A mirror mid-sync fails one index of many (seen: bookworm-security's ppc64el); apt
  # keeps the rest. What the tests fetch must resolve, or the run stops here, saying so.
  apt-get update -qq || echo "run.sh: apt-get update reported errors (above); going on with the lists it has"
  for p in libjansson-dev:ppc64el libjansson-dev:s390x busybox-static:ppc64el busybox-static:s390x; do
    apt-cache show "$p" >/dev/null 2>&1 || { echo "run.sh: apt cannot find $p: the guests' packages cannot be fetched" >&2; exit 1; }
  done
fi
# The static agent's foreign libjansson.a, installed beside the native one (Multi-Arch:
# same), so that no build downloads it.
for p in libjansson-dev:ppc64el libjansson-dev:s390x; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >/dev/null ||
    { echo "run.sh: cannot install $p (the static agent is built against it)" >&2; exit 1; }
done
phase_done "dependencies"

# GitHub's own definitions the tests are judged by (pinned in tests/package-lock.json).
if [ ! -d tests/node_modules/@octokit/webhooks-examples ] ||
   ! cmp -s tests/package-lock.json tests/node_modules/.package-lock.json 2>/dev/null; then
  (cd tests && npm ci --no-audit --no-fund --loglevel=error)
fi
phase_done "npm packages"

# Fuzz targets: clang + libFuzzer, built apart from the sanitizer build.
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DHATCHERY_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$jobs" >/dev/null
phase_done "build: fuzz (clang)"

# ThreadSanitizer: a third build, whose integration and GitHub tests run as one test.
cmake -S . -B build-tsan -DHATCHERY_TSAN=ON -DHATCHERY_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-tsan -j"$jobs" >/dev/null
phase_done "build: ThreadSanitizer"

# Memcheck: a fourth build, without sanitizers (valgrind cannot run theirs), of what
# memcheck.paths runs under valgrind: the config, manifest and admin paths.
cmake -S . -B build-memcheck -DHATCHERY_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-memcheck -j"$jobs" --target hatcheryd hatchery test_config test_guest_isolation \
  test_host_caps test_network_kind test_webhook man >/dev/null
phase_done "build: memcheck"

cmake -S . -B build-test -DHATCHERY_SANITIZE=ON -DHATCHERY_WERROR=ON -DCMAKE_BUILD_TYPE=Debug \
  -DHATCHERY_FUZZ_DIR="$root/build-fuzz/tests/fuzz" -DHATCHERY_TSAN_DIR="$root/build-tsan" \
  -DHATCHERY_MEMCHECK_DIR="$root/build-memcheck" >/dev/null
cmake --build build-test -j"$jobs"
phase_done "build: ASan+UBSan"

# The test guests (Debian's kernels, busybox and the static agent), cached by their inputs
# outside the checkout, as the images are, so a fresh clone finds them: the guest tests
# and the production images' agent share their downloads, made here before those tests
# run side by side.
export HATCHERY_TEST_GUEST_CACHE=$cache_root/test-guests
for arch in ppc64le s390x; do ./images/test-guest/build.sh "$arch" >/dev/null; done
phase_done "test guests"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd build-test
status=0
ctest_ran=yes
ctest --output-on-failure -j"$jobs" || status=$?
phase_done "ctest"
exit "$status"
