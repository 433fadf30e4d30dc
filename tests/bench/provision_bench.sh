#!/usr/bin/env bash
# Runs the provisioner benchmarks (see provision_bench.c) on a release build.
# usage: tests/bench/provision_bench.sh [CYCLES]
set -euo pipefail
cd "$(dirname "$0")/../.."
./deploy/install-deps.sh >/dev/null
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DHATCHERY_TESTS=OFF -DHATCHERY_BENCH=ON >/dev/null
cmake --build build-bench -j"$(nproc)" --target provision_bench >/dev/null
build-bench/provision_bench overhead "${1:-300}"
tests/libvirt/libvirtd.sh start >/dev/null
for arch in ppc64le s390x; do
  build-bench/provision_bench boot "$arch" "$(images/test-guest/build.sh "$arch")"
done
# Warm templates: built, then restore beside cold boot (ppc64le under TCG needs QEMU 8.2);
# also on the production image, where e2e.production_image has built one
# (HATCHERY_IMAGE_CACHE, default /var/cache/hatchery/test-images).
for arch in s390x ppc64le; do
  build-bench/provision_bench template "$arch" "$(images/test-guest/build.sh "$arch")" || true
done
for image in $(ls -t "${HATCHERY_IMAGE_CACHE:-/var/cache/hatchery/test-images}"/runner-s390x-*.qcow2 2>/dev/null | head -1); do
  build-bench/provision_bench template s390x "$image" || true
done
