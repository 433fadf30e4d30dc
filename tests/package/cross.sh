#!/usr/bin/env bash
# Cross-builds the `hatchery` and `hatchery-guest-agent` packages for ppc64el or s390x on a
# Debian RELEASE (default bookworm), as Debian builds them, and runs the unit tests under
# qemu-user.
#
# How: Debian's multiarch cross build. A clean RELEASE root (amd64) gets the target's -dev
# packages beside its own (`apt` resolves them as ARCH packages) and the cross compiler:
# that is the build root, made once with the network as sbuild makes its chroot, and cached
# (tests/package/cached-root.sh). In a copy of it an unprivileged user, with no network
# (a network namespace of its own), runs `dpkg-buildpackage -a ARCH`
# (Rules-Requires-Root: no). Why not a native build in a foreign root: every compiler run
# would be emulated, several times slower, for the same result; multiarch resolves all of
# Hatchery's build dependencies. (A root of its own also keeps the foreign packages at
# the versions of the native ones, which this machine's own may not be.) The root is
# RELEASE's main alone, its last point release: multiarch needs a package at the same
# version on both architectures, and -updates and -security add indices a mirror may be
# mid-sync on for one architecture only (seen for trixie's ppc64el: "File has unexpected
# size ... Mirror sync in progress?").
# The unit tests are the build's own test binaries, run by ctest through binfmt_misc
# (qemu-user-static), with the target's libraries from the same root, by the same user
# and without the network.
#
# usage: tests/package/cross.sh ARCH OUT_DIR [RELEASE]   (ARCH: ppc64el or s390x;
#        RELEASE: bookworm, the default, or trixie)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
arch=${1:?usage: cross.sh ARCH OUT_DIR [RELEASE]}
out=${2:?usage: cross.sh ARCH OUT_DIR [RELEASE]}
release=${3:-bookworm}
case "$arch" in
  ppc64el) triplet=powerpc64le-linux-gnu qemu=ppc64le ;;
  s390x) triplet=s390x-linux-gnu qemu=s390x ;;
  *) echo "cross.sh: ARCH is ppc64el or s390x" >&2; exit 2 ;;
esac
log() { echo "cross($arch, $release): $*" >&2; }
# shellcheck source=tests/package/builder.sh
. "$here/builder.sh"
# shellcheck source=tests/package/root-mounts.sh
. "$here/root-mounts.sh"
"$root/images/enable-binfmt.sh" "$qemu" || { log "cannot run $arch binaries here"; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

work=$(mktemp -d)
chroot_dir=$work/root
cleanup() {
  root_unmount "$chroot_dir"
  rm -rf "$work"
}
trap cleanup EXIT

# The build dependencies, from debian/control, for the target.
deps=(build-essential debhelper cmake pandoc file "crossbuild-essential-$arch" "pkg-config:$arch")
for d in libuv1-dev libhttp-parser-dev libssl-dev libjansson-dev libsqlite3-dev libpq-dev libyaml-dev \
         libcurl4-openssl-dev libvirt-dev libxml2-dev libsystemd-dev libseccomp-dev libacl1-dev libyajl-dev libcmocka-dev; do
  deps+=("$d:$arch")
done
grep -q "^ *libcmocka-dev <!nocheck>,$" "$root/debian/control" ||
  { log "debian/control's Build-Depends changed: update the list in $0"; exit 1; }
t0=$SECONDS
"$here/cached-root.sh" "cross-$release-$arch" "$chroot_dir" --variant=apt --architectures="amd64,$arch" \
  --aptopt='Apt::Install-Recommends "false"' --include="$(IFS=,; echo "${deps[*]}")" \
  "$release" "deb http://deb.debian.org/debian $release main"
log "build root (amd64 with $arch's build dependencies) in $((SECONDS - t0)) s"

root_mount "$chroot_dir"
# The builder: an unprivileged user in a network namespace of its own (builder.sh).
builder_setup "$chroot_dir" "$root"
src=$builder_src

t0=$SECONDS
if ! as_builder "$chroot_dir" "cd $src && dpkg-buildpackage -a $arch -B -us -uc" >"$out/build-$arch.log" 2>&1; then
  grep -E -B2 -A8 "CMake Error|error:" "$out/build-$arch.log" | head -n 60 >&2
  log "dpkg-buildpackage -a $arch FAILED (all of it: $out/build-$arch.log)"
  exit 1
fi
log "dpkg-buildpackage -a $arch -B in $((SECONDS - t0)) s"
rm -f "$out"/*.deb
cp "$chroot_dir"/home/builder/src/hatchery_*_"$arch".deb "$chroot_dir"/home/builder/src/hatchery-guest-agent_*_"$arch".deb "$out/"
deb=$(ls "$out"/hatchery_*_"$arch".deb)
agent_deb=$(ls "$out"/hatchery-guest-agent_*_"$arch".deb)
file -b "$chroot_dir$src/obj-$triplet/hatcheryd" | tee "$out/hatcheryd-$arch.file" >&2
log "$(basename "$deb"): $(stat -c %s "$deb") bytes, installed $(dpkg-deb -f "$deb" Installed-Size) KiB"
# The agent: static for this architecture's guests, from the build dependencies'
# libjansson.a (no download), with the sources it carries named.
file -b "$chroot_dir$src/obj-$triplet/agent-static/hatchery-agent" | tee "$out/agent-$arch.file" >&2
grep -q 'statically linked' "$out/agent-$arch.file" || { log "the agent is not static"; exit 1; }
dpkg-deb -f "$agent_deb" Built-Using | grep -q 'jansson (= ' ||
  { log "$(basename "$agent_deb") names no Built-Using jansson"; exit 1; }
# It goes into every guest image: at most 1 MiB, as packaged (stripped by dh_strip).
agent_bytes=$(dpkg-deb --fsys-tarfile "$agent_deb" | tar -xOf - --wildcards './usr/lib/hatchery/agent/*/hatchery-agent' | wc -c)
[ "$agent_bytes" -gt 0 ] && [ "$agent_bytes" -le 1048576 ] ||
  { log "the packaged agent is $agent_bytes bytes: over 1 MiB (1048576)"; exit 1; }
log "$(basename "$agent_deb"): $(stat -c %s "$agent_deb") bytes, the agent $agent_bytes bytes, Built-Using: $(dpkg-deb -f "$agent_deb" Built-Using)"
lintian --fail-on error,warning "$deb" "$agent_deb" | tee "$out/lintian-$arch.txt" >&2 ||
  { log "lintian: errors or warnings (above)"; exit 1; }

# The unit tests, as built for ARCH, under qemu-user (the store's on SQLite: a PostgreSQL
# server is not in the build root).
t0=$SECONDS
if ! as_builder "$chroot_dir" "cd $src/obj-$triplet && ctest --output-on-failure -R '^unit\\.' -E '^unit\\.store_postgresql\$'" \
     >"$out/unit-tests-$arch.txt" 2>&1; then
  grep -E "Failed|FAILED|ERROR|error" "$out/unit-tests-$arch.txt" | head -n 40 >&2
  log "unit tests FAILED under qemu-$qemu (all of it: $out/unit-tests-$arch.txt)"
  exit 1
fi
grep -E "tests passed|Total Test time" "$out/unit-tests-$arch.txt" | sed "s/^/cross($arch, $release): /" >&2
log "unit tests under qemu-$qemu in $((SECONDS - t0)) s"
