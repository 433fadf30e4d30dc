#!/usr/bin/env bash
# Day one on a stock host: a clean Debian RELEASE root (default trixie, the current
# stable) that looks installed (Priority standard, nftables, Recommends), booted under its
# own systemd with libvirt as Debian configures it; our packages built from this checkout
# in a build root of that release (with their unit tests, on its libraries) and installed
# on the host with apt, which brings their runtime libraries; then configured by the
# runbook's own blocks and serving real jobs on the production image (stock-host.test.mjs).
#
# Two steps, two ctest tests (tests/CMakeLists.txt):
#   run.sh --prepare RELEASE OUT   the build root (made or found), and our packages built
#                                  in a copy of it as Debian builds them: an unprivileged
#                                  user, no network, dpkg-buildpackage with the unit tests;
#                                  then installed, upgraded and purged in a clean RELEASE
#                                  root (tests/package/install-test.sh); and the host root
#                                  made or found. Boots nothing; the packages and the build
#                                  log go to OUT.
#   run.sh RELEASE OUT             the machine: a fresh copy of the host root, booted, with
#                                  OUT's packages where the operator put them; then the
#                                  test. Prepares first when OUT has no packages.
#
# The roots are cached as tarballs under $HATCHERY_STOCK_CACHE (default
# /var/cache/hatchery/stock-host), keyed by their package lists and the ISO week
# (machine.sh root and build-root), beside the week's Debian stage of the image the test
# builds (image-stage-WEEK, below); the images are production-image.sh's.
#
# usage: tests/stock-host/run.sh [--prepare] [RELEASE [OUT]]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
prepare=
[ "${1:-}" = --prepare ] && { prepare=yes; shift; }
release=${1:-trixie}
out=${2:-$root/build-test/stock-host}
cache=${HATCHERY_STOCK_CACHE:-/var/cache/hatchery/stock-host}
log() { echo "stock-host($release): $*" >&2; }
# shellcheck source=tests/package/builder.sh
. "$root/tests/package/builder.sh"
# shellcheck source=tests/package/root-mounts.sh
. "$root/tests/package/root-mounts.sh"
timed() { local t0=$SECONDS; "$@"; log "$(basename "$1") ${2:-}: $((SECONDS - t0)) s"; }
debs=$out/$release

# The operator's build: this checkout, built in RELEASE's build root by an unprivileged
# user (Rules-Requires-Root: no), without the network, the unit tests included.
b=
build_cleanup() {
  [ -n "$b" ] || return 0
  root_unmount "$b"
  rm -rf --one-file-system "$b"
}
build_packages() {
  local t0=$SECONDS
  local tarball
  tarball=$("$here/machine.sh" build-root "$release" "$cache")
  b=$(mktemp -d /var/tmp/hatchery-stock-build-XXXXXX)
  trap build_cleanup EXIT
  tar -xpf "$tarball" --numeric-owner -C "$b"
  log "root ready in $((SECONDS - t0)) s"
  root_mount "$b"
  builder_setup "$b" "$root"
  local t1=$SECONDS
  rm -rf "$debs"
  mkdir -p "$debs"
  if ! as_builder "$b" "cd $builder_src && dpkg-buildpackage -b -us -uc >../build.log 2>&1"; then
    cp "$b/home/builder/src/build.log" "$out/build-$release.log" || true
    tail -n 60 "$b/home/builder/src/build.log" >&2
    log "dpkg-buildpackage failed in $release"
    exit 1
  fi
  cp "$b/home/builder/src/build.log" "$out/build-$release.log"
  grep -E 'tests passed' "$b/home/builder/src/build.log" | sed "s/^/stock-host($release): unit tests: /" >&2 || true
  cp "$b"/home/builder/src/*.deb "$debs/"
  log "built $(cd "$debs" && ls ./*.deb | tr '\n' ' ')in $((SECONDS - t1)) s"
}

if [ -n "$prepare" ]; then
  build_packages
  # The packages installed, upgraded and purged in a clean root of RELEASE, as on bookworm
  # (package.native): what the host test cannot see, on a root with nothing else.
  "$root/tests/package/install-test.sh" "$(dpkg --print-architecture)" "$debs" "$release"
  # The host's root too, so that the test finds it made.
  t0=$SECONDS
  "$here/machine.sh" root "$release" "$cache" >/dev/null
  log "host root ready in $((SECONDS - t0)) s"
  exit 0
fi
ls "$debs"/hatchery_*.deb >/dev/null 2>&1 || { log "no packages in $debs: preparing first"; (build_packages); }

t0=$SECONDS
tarball=$("$here/machine.sh" root "$release" "$cache")
image_ppc64le=$("$root/tests/e2e/production-image.sh" ppc64le)
image_s390x=$("$root/tests/e2e/production-image.sh" s390x)
log "root and images ready in $((SECONDS - t0)) s"

work=$(mktemp -d /var/tmp/hatchery-stock-host-XXXXXX)
m=$work/host
# The remote host: a second machine, on a network of its own.
r=$work/remote
remote_net=10.213.78
veth=hsb-$$
masquerade=(POSTROUTING -s "$remote_net.0/24" ! -d "$remote_net.0/24" -j MASQUERADE)
cleanup() {
  [ -f "$r.pid" ] && "$here/machine.sh" halt "$r"
  iptables -t nat -D "${masquerade[@]}" 2>/dev/null || true
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
# The operator's build (prepared above, in the build root): its packages where the operator
# put them.
chroot "$m" useradd --create-home builder
mkdir -p "$m/home/builder/src"
cp "$debs"/*.deb "$m/home/builder/src/"
chroot "$m" chown -R builder:builder /home/builder/src
# What the operator brings to the host: the images (each with its .kernel, .initrd and
# .json) and the App's private key, in the directory the runbook's blocks run in.
mkdir -p "$m/root/rollout"
for image in "$image_ppc64le" "$image_s390x"; do
  for f in "$image" "$image".*; do cp --reflink=auto "$f" "$m/root/rollout/"; done
done
# To build an image there with hatchery-image-tools: the runner tarball and the ppc64el
# guest agent package (package.ppc64el's, built the Debian way, or built now). The build's
# Debian stage (mmdebstrap of a ppc64el root under qemu-user, through the host's own
# binfmt registration: own-binfmt.sh) takes five minutes: the machine makes it in the
# first run of each ISO week (and on a new machine), and this week's is kept for the next
# runs, which take it from hatchery-build-image's own cache (--debian-cache).
image_cache=${HATCHERY_IMAGE_CACHE:-/var/cache/hatchery/test-images}
agent_debs=${HATCHERY_AGENT_DEBS:-$root/build-test/packages/ppc64el}
if ! ls "$agent_debs"/hatchery-guest-agent_*_ppc64el.deb >/dev/null 2>&1; then
  log "no hatchery-guest-agent_*_ppc64el.deb in $agent_debs: cross-building it"
  "$root/tests/package/cross.sh" ppc64el "$agent_debs" >&2
fi
cp "$(ls -t "$agent_debs"/hatchery-guest-agent_*_ppc64el.deb | head -n 1)" "$m/root/rollout/"
cp "$image_cache"/stand-in/actions-runner-linux-ppc64le-*.tar.gz "$m/root/rollout/"
mkdir -p "$m/var/cache/hatchery-image"
image_stage=$cache/image-stage-$(date -u +%G-W%V)
if ls "$image_stage"/debian-ppc64le-*.tar >/dev/null 2>&1; then
  cp --reflink=auto "$image_stage"/debian-ppc64le-*.tar "$m/var/cache/hatchery-image/"
  export STOCK_HOST_IMAGE_STAGE=cached
else
  log "no Debian stage made here this week: the image build runs mmdebstrap (about 5 min)"
  export STOCK_HOST_IMAGE_STAGE=mmdebstrap
fi
cp "$here/own-binfmt.sh" "$m/root/own-binfmt.sh"

timed "$here/machine.sh" boot "$m"
cp "$m"/home/builder/src/hatchery-image-tools_*_all.deb "$m/root/rollout/"

# The remote host of the runbook (p10-b): a second machine from the same root, with a
# libvirtd of its own, on a network of its own (a veth pair, this machine the router with
# NAT to the archive, as a lab network has one), which the first reaches only over SSH.
# The operator brings it our package, as to the first.
mkdir -p "$r/root/rollout"
tar -xpf "$tarball" --numeric-owner -C "$r"
cp "$debs"/hatchery_*.deb "$r/root/rollout/"
timed "$here/machine.sh" boot "$r" p10-b "$veth"
ip addr add "$remote_net.1/24" dev "$veth"
ip link set "$veth" up
"$here/machine.sh" run "$r" sh -c "ip addr add $remote_net.2/24 dev host0 && ip link set host0 up &&
  ip route add default via $remote_net.1"
iptables -t nat -I "${masquerade[@]}"
# A router forwards: this machine may not yet (a new machine does not; libvirt turns it on
# when a NAT network starts, the host's later in the test, and leaves it on, as this does:
# turning it off again could cut a NAT network another test has started meanwhile). Without
# it the remote's packets to the archive are dropped here ("Temporary failure resolving").
sysctl -q -w net.ipv4.ip_forward=1

export STOCK_HOST_MACHINE=$m STOCK_HOST_RELEASE=$release
export STOCK_HOST_REMOTE=$r STOCK_HOST_REMOTE_ADDRESS=$remote_net.2
export STOCK_HOST_IMAGES="$(basename "$image_ppc64le") $(basename "$image_s390x")"
"$root/tests/github/with-prism.sh" node --test --test-reporter=spec "$here/stock-host.test.mjs"
if [ "$STOCK_HOST_IMAGE_STAGE" = mmdebstrap ]; then
  # The stage the passing test made: this week's, for the next runs.
  mkdir -p "$image_stage.new"
  cp "$m"/var/cache/hatchery-image/debian-ppc64le-*.tar "$image_stage.new/"
  find "$cache" -maxdepth 1 -name 'image-stage-*' ! -name "$(basename "$image_stage").new" -exec rm -rf {} +
  mv "$image_stage.new" "$image_stage"
fi
