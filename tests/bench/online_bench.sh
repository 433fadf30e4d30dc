#!/usr/bin/env bash
# Queued -> runner online through a runner scale set beside the same through a webhook, on
# real emulated guests (tests/bench/online_bench.mjs says what it measures). A Release
# build of hatcheryd, the test libvirtd, the test guests, and GitHub played by Prism behind
# the GitHub double, whose Actions-service stand-in serves the scale sets. Prints figures;
# asserts nothing.
# usage: tests/bench/online_bench.sh [ROUNDS] [LATENCY_MS]   (default 5 and 50)
#        ONLINE_BENCH_ARCHES=s390x tests/bench/online_bench.sh   (s390x only: no ppc64le boots)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
./deploy/install-deps.sh >/dev/null
if ! cmp -s tests/package-lock.json tests/node_modules/.package-lock.json 2>/dev/null; then
  (cd tests && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DHATCHERY_TESTS=OFF -DHATCHERY_BENCH=ON >/dev/null
cmake --build build-bench -j"$(nproc)" --target hatcheryd hatchery >/dev/null
tests/libvirt/libvirtd.sh start >/dev/null
export GUEST_ppc64le GUEST_s390x HATCHERYD="$root/build-bench/hatcheryd" HATCHERY_CLI="$root/build-bench/hatchery"
GUEST_ppc64le=$(images/test-guest/build.sh ppc64le)
GUEST_s390x=$(images/test-guest/build.sh s390x)
exec tests/github/with-prism.sh node "$here/online_bench.mjs" "$@"
