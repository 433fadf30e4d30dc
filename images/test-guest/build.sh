#!/usr/bin/env bash
# Builds the Hatchery test guest for ARCH (ppc64le or s390x): Debian's kernel for that
# architecture, and an initramfs with busybox-static, the virtio modules, the cross-built
# static hatchery-agent and a stand-in runner. It boots under QEMU TCG in seconds.
#
# usage: images/test-guest/build.sh ARCH [CACHE_DIR]
# Prints the directory holding `kernel`, `initrd` and `hatchery-agent`. The result is
# cached under CACHE_DIR (default $HATCHERY_TEST_GUEST_CACHE, which tests/run.sh sets to
# /var/cache/hatchery/test-guests, or else build-images/) by a hash of every input (this script,
# the init, the stand-in runner, the agent's sources and the Debian package versions),
# so it is rebuilt exactly when an input changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
arch=${1:?usage: build.sh ppc64le|s390x [CACHE_DIR]}
cache=${2:-${HATCHERY_TEST_GUEST_CACHE:-$root/build-images}}
case "$arch" in
  ppc64le) deb_arch=ppc64el; flavour=powerpc64le; kernel_glob='boot/vmlinux-*'
           modules="virtio virtio_ring virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_console failover net_failover virtio_net" ;;
  s390x)   deb_arch=s390x; flavour=s390x; kernel_glob='boot/vmlinuz-*'
           modules="virtio_console failover net_failover virtio_net" ;;
  *) echo "build.sh: unknown arch $arch (ppc64le or s390x)" >&2; exit 2 ;;
esac
log() { echo "test-guest($arch): $*" >&2; }

if ! dpkg --print-foreign-architectures | grep -qx "$deb_arch"; then
  dpkg --add-architecture "$deb_arch"
  apt-get update -qq >/dev/null 2>&1 || true
fi
kernel_pkg=$(apt-cache depends "linux-image-$flavour:$deb_arch" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
if [ -z "$kernel_pkg" ]; then
  apt-get update -qq >/dev/null 2>&1 || true
  kernel_pkg=$(apt-cache depends "linux-image-$flavour:$deb_arch" | awk '/Depends: linux-image-/ {print $2; exit}')
fi
kernel_pkg=${kernel_pkg%%:*}
pkgs=("$kernel_pkg:$deb_arch" "busybox-static:$deb_arch" "libjansson-dev:$deb_arch")
versions=$(for p in "${pkgs[@]}"; do echo "$p=$(apt-cache policy "$p" | awk '/Candidate:/ {print $2}')"; done)
key=$( { cat "$here/build.sh" "$here/init" "$here/fake-runner" "$root/agent/hatchery-agent.c" "$root/agent/confine.c" "$root/agent/confine.h" "$root/agent/build-static.sh" \
         "$root/include/hatchery/agent_protocol.h" "$root/include/hatchery/hex.h" "$root/include/hatchery/version.h.in"; "$root/agent/build-static.sh" --version
         echo "$versions"; echo "$modules"; } | sha256sum | cut -c1-16)
out="$cache/test-guest-$arch-$key"
if [ -f "$out/initrd" ] && [ -f "$out/kernel" ]; then
  echo "$out"; exit 0
fi
log "building ($key)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache/debs" "$work/x"
# The versions the key names, exactly (a cache that outlives a point release keeps the
# older .deb beside the new one): apt-get download's file name, the epoch's colon as %3a.
deb_of() { local v; v=$(sed -n "s/^$1=//p" <<<"$versions"); echo "$cache/debs/${1%%:*}_${v//:/%3a}_$deb_arch.deb"; }
(cd "$cache/debs" && for p in "${pkgs[@]}"; do
   [ -f "$(deb_of "$p")" ] || apt-get download -qq "$p" 2>/dev/null; done)
for p in "${pkgs[@]}"; do
  [ -f "$(deb_of "$p")" ] || { log "no $(basename "$(deb_of "$p")") after apt-get download"; exit 1; }
  dpkg-deb -x "$(deb_of "$p")" "$work/x"
done

# The agent, cross-built static.
"$root/agent/build-static.sh" "$arch" "$work/hatchery-agent"

r="$work/root"
mkdir -p "$r/bin" "$r/usr/bin" "$r/proc" "$r/sys" "$r/dev" "$r/etc" "$r/lib/modules"
cp "$work/x/bin/busybox" "$r/bin/busybox"
cp "$here/init" "$r/init"
cp "$here/fake-runner" "$r/usr/bin/fake-runner"
cp "$work/hatchery-agent" "$r/usr/bin/hatchery-agent"
chmod 755 "$r/init" "$r/usr/bin/fake-runner" "$r/usr/bin/hatchery-agent"
for m in $modules; do
  f=$(find "$work/x/lib/modules" -name "$m.ko" | head -n 1)
  [ -n "$f" ] || { log "module $m not found"; exit 1; }
  cp "$f" "$r/lib/modules/"
done
echo "$modules" | tr ' ' '\n' > "$r/etc/hatchery-modules"
mkdir -p "$out.tmp"
(cd "$r" && find . | cpio -o -H newc --quiet | gzip -1) > "$out.tmp/initrd"
cp $work/x/$kernel_glob "$out.tmp/kernel"
cp "$work/hatchery-agent" "$out.tmp/hatchery-agent"
qemu-img create -q -f qcow2 "$out.tmp/base.qcow2" 64M
# The manifest hatcheryd checks each VM pool's image against (see images/runner/).
agent_version=$("$root/agent/build-static.sh" --version)
kernel_version=$(basename "$(ls $work/x/$kernel_glob | head -n 1)" | sed 's/^vmlinu[xz]-//')
cat > "$out.tmp/base.qcow2.json" <<JSON
{
  "arch": "$arch",
  "debian": "bookworm",
  "kernel_version": "$kernel_version",
  "runner_version": "stand-in",
  "agent_version": "$agent_version",
  "built_at": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "sha256": "$(sha256sum "$out.tmp/base.qcow2" | cut -d' ' -f1)",
  "boot": {"kernel": "kernel", "initrd": "initrd"}
}
JSON
rm -rf "$out"
mv "$out.tmp" "$out"
log "built: agent $(stat -c %s "$out/hatchery-agent") bytes, initrd $(stat -c %s "$out/initrd") bytes"
echo "$out"
