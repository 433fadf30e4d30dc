#!/usr/bin/env bash
# Day one on a stock host: a clean Debian RELEASE root (default trixie, the current
# stable), booted under its own systemd with libvirt as Debian configures it, our packages
# built there from this checkout (with their unit tests, on that release's libraries) and
# installed with apt, then configured by the runbook's own blocks and serving real jobs on
# the production image (stock-host.test.mjs).
#
# The root is cached as a tarball under $HATCHERY_STOCK_CACHE (default
# /var/cache/hatchery/stock-host), keyed by its package list and the ISO week (machine.sh
# root); the images are production-image.sh's.
#
# usage: tests/stock-host/run.sh [RELEASE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
release=${1:-trixie}
cache=${HATCHERY_STOCK_CACHE:-/var/cache/hatchery/stock-host}
log() { echo "stock-host($release): $*" >&2; }
timed() { local t0=$SECONDS; "$@"; log "$(basename "$1") ${2:-}: $((SECONDS - t0)) s"; }

t0=$SECONDS
tarball=$("$here/machine.sh" root "$release" "$cache")
image_ppc64le=$("$root/tests/e2e/production-image.sh" ppc64le)
image_s390x=$("$root/tests/e2e/production-image.sh" s390x)
log "root and images ready in $((SECONDS - t0)) s"

work=$(mktemp -d /var/tmp/hatchery-stock-host-XXXXXX)
m=$work/host
cleanup() {
  if [ -f "$m.pid" ]; then
    # Its rules are in this machine's tables (the network is shared): taken away.
    "$here/machine.sh" run "$m" /usr/lib/hatchery/guest-firewall.sh remove >/dev/null 2>&1 || true
    # So are libvirt's NAT network's (its bridge and rules), which stopping it removes.
    "$here/machine.sh" run "$m" virsh -c qemu:///system net-destroy default >/dev/null 2>&1 || true
    "$here/machine.sh" halt "$m" || true
  fi
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

mkdir -p "$m"
tar -xpf "$tarball" --numeric-owner -C "$m"
# The operator's checkout, built by an unprivileged user (Rules-Requires-Root: no).
chroot "$m" useradd --create-home builder
mkdir -p "$m/home/builder/src/hatchery"
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -cf - -T -) |
  tar -xf - -C "$m/home/builder/src/hatchery"
chroot "$m" chown -R builder:builder /home/builder/src
# What the operator brings to the host: the images (each with its .kernel, .initrd and
# .json) and the App's private key, in the directory the runbook's blocks run in.
mkdir -p "$m/root/rollout"
for image in "$image_ppc64le" "$image_s390x"; do
  for f in "$image" "$image".*; do cp --reflink=auto "$f" "$m/root/rollout/"; done
done
# To build an image there with hatchery-image-tools: the runner tarball, the ppc64el guest
# agent package (package.ppc64el's, built the Debian way, or built now), and the Debian
# stage of the same recipe from the image cache, so that the build takes seconds.
image_cache=${HATCHERY_IMAGE_CACHE:-/var/cache/hatchery/test-images}
agent_debs=${HATCHERY_AGENT_DEBS:-$root/build-test/packages/ppc64el}
if ! ls "$agent_debs"/hatchery-guest-agent_*_ppc64el.deb >/dev/null 2>&1; then
  log "no hatchery-guest-agent_*_ppc64el.deb in $agent_debs: cross-building it"
  "$root/tests/package/cross.sh" ppc64el "$agent_debs" >&2
fi
cp "$(ls -t "$agent_debs"/hatchery-guest-agent_*_ppc64el.deb | head -n 1)" "$m/root/rollout/"
cp "$image_cache"/stand-in/actions-runner-linux-ppc64le-*.tar.gz "$m/root/rollout/"
mkdir -p "$m/var/cache/hatchery-image"
cp --reflink=auto "$image_cache"/debian/debian-ppc64le-*.tar "$m/var/cache/hatchery-image/"

timed "$here/machine.sh" boot "$m"
# Built without the network, this architecture's packages (on amd64: hatchery and the
# arch-all hatchery-image-tools; the guest agent is a package of ppc64el and s390x, which
# tests/package builds).
t1=$SECONDS
if ! "$here/machine.sh" run "$m" unshare --net runuser -u builder -- \
     sh -c 'cd ~/src/hatchery && dpkg-buildpackage -b -us -uc >../build.log 2>&1'; then
  tail -n 60 "$m/home/builder/src/build.log" >&2
  log "dpkg-buildpackage failed in $release"
  exit 1
fi
grep -E 'tests passed' "$m/home/builder/src/build.log" | sed "s/^/stock-host($release): unit tests: /" >&2 || true
log "built $(cd "$m/home/builder/src" && ls hatchery*.deb | tr '\n' ' ')in $((SECONDS - t1)) s"
cp "$m"/home/builder/src/hatchery-image-tools_*_all.deb "$m/root/rollout/"

export STOCK_HOST_MACHINE=$m STOCK_HOST_RELEASE=$release
export STOCK_HOST_IMAGES="$(basename "$image_ppc64le") $(basename "$image_s390x")"
"$root/tests/github/with-prism.sh" node --test --test-reporter=spec "$here/stock-host.test.mjs"
