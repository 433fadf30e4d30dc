#!/usr/bin/env bash
# Warm templates on ppc64le, on the production image, where they can run: Debian 13's
# QEMU 10.0 (this machine's bookworm QEMU 7.2 loses the pseries decrementer on a restore).
# Boots the stock trixie root of tests/stock-host (libvirt as Debian ships it, QEMU as
# libvirt-qemu) and runs `provision_bench template ppc64le IMAGE` there: the template's
# build time and size, then create to hello cold beside restore to hello from the
# template, alternating, as a ratio (goal <= 0.2). Prints figures, asserts nothing.
#
# usage: tests/bench/template_bench.sh [ARCH]   (default ppc64le; s390x works too)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
arch=${1:-ppc64le}
cd "$root"
./deploy/install-deps.sh >/dev/null
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DHATCHERY_TESTS=OFF -DHATCHERY_BENCH=ON >/dev/null
cmake --build build-bench -j"$(nproc)" --target provision_bench >/dev/null
tarball=$(tests/stock-host/machine.sh root trixie "${HATCHERY_STOCK_CACHE:-/var/cache/hatchery/stock-host}")
image=$(tests/e2e/production-image.sh "$arch")

work=$(mktemp -d /var/tmp/hatchery-template-bench-XXXXXX)
m=$work/host
cleanup() {
  [ -f "$m.pid" ] && tests/stock-host/machine.sh halt "$m" || true
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
mkdir -p "$m"
tar -xpf "$tarball" --numeric-owner -C "$m"
# Where libvirt-qemu may read them (not under /root).
install -d -m 0755 "$m/var/lib/hatchery-bench"
for f in "$image" "$image".*; do cp --reflink=auto "$f" "$m/var/lib/hatchery-bench/"; done
install -m 0755 build-bench/provision_bench "$m/usr/local/bin/provision_bench"
tests/stock-host/machine.sh boot "$m" >&2
tests/stock-host/machine.sh run "$m" sh -c 'echo "QEMU $(virsh -c qemu:///system version | sed -n "s/^Running hypervisor: QEMU //p"), libvirt $(virsh -c qemu:///system version | sed -n "s/^Using library: libvirt //p")"'
tests/stock-host/machine.sh run "$m" provision_bench template "$arch" "/var/lib/hatchery-bench/$(basename "$image")"
