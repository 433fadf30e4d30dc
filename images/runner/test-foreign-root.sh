#!/usr/bin/env bash
# The part of the runner image recipe that can run here: step 1 (a minimal Debian root for
# ppc64le, `debootstrap --foreign`, second stage under qemu-user-static through binfmt_misc),
# then the static agent and the RUNNER_VERSION record of steps 3-4, checked inside the
# foreign root by running them under emulation. Steps 2 (podman from the archive), 4's
# systemd enablement and 5 (virt-make-fs) need a Power or Z host and are documented.
#
# usage: images/runner/test-foreign-root.sh [ARCH]    (ppc64le by default)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
arch=${1:-ppc64le}
case "$arch" in
  ppc64le) deb_arch=ppc64el; qemu=qemu-ppc64le-static; magic="64-bit PowerPC" ;;
  s390x) deb_arch=s390x; qemu=qemu-s390x-static; magic="IBM S/390" ;;
  *) echo "unknown arch $arch" >&2; exit 2 ;;
esac
cache=${HATCHERY_IMAGE_CACHE:-$root/build-images}
rootfs="$cache/foreign-root-$arch"

# binfmt_misc lets the kernel hand foreign binaries to qemu-user-static.
[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
update-binfmts --enable "${qemu%-static}" >/dev/null 2>&1 || update-binfmts --enable >/dev/null 2>&1 || true

if [ ! -f "$rootfs/.complete" ]; then
  rm -rf "$rootfs"
  mkdir -p "$cache"
  debootstrap --foreign --arch="$deb_arch" --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
  cp "/usr/bin/$qemu" "$rootfs/usr/bin/"
  chroot "$rootfs" /debootstrap/debootstrap --second-stage >/dev/null
  touch "$rootfs/.complete"
fi
file -L "$rootfs/bin/bash" | grep -q "$magic" || { echo "not a $arch root"; exit 1; }
[ "$(chroot "$rootfs" uname -m)" = "$arch" ] || { echo "uname inside is not $arch"; exit 1; }
chroot "$rootfs" dpkg-query -W -f='${Status}\n' dpkg | grep -q "install ok installed" ||
  { echo "dpkg is not configured in the root"; exit 1; }

# Steps 3-4 in miniature: the static agent and the runner version record.
guest=$("$root/images/test-guest/build.sh" "$arch")
install -D -m 0755 "$guest/hatchery-agent" "$rootfs/usr/local/bin/hatchery-agent"
install -D -m 0644 /dev/stdin "$rootfs/opt/actions-runner/RUNNER_VERSION" <<<"2.323.0"
# The agent runs inside the foreign root (usage error: exit 2, proving it executes).
set +e
chroot "$rootfs" /usr/local/bin/hatchery-agent --bogus >/dev/null 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || { echo "the agent did not run in the $arch root (exit $rc)"; exit 1; }
echo "foreign $arch root: debootstrap both stages, dpkg configured, agent runs, RUNNER_VERSION $(cat "$rootfs/opt/actions-runner/RUNNER_VERSION")"
