#!/usr/bin/env bash
# Builds the production runner guest image for ARCH (ppc64le or s390x): a qcow2 base image
# with a minimal Debian, podman (to build docker/Dockerfile_*), the GitHub runner built
# for that architecture, and hatchery-agent as a service that starts at boot.
#
# usage (as root, on a host of that architecture or with qemu-user-static):
#   images/runner/build-image.sh ARCH RUNNER_TARBALL OUTPUT.qcow2
#
# The GitHub runner: actions/runner is not released for ppc64le or s390x. Build it from
# source with .NET for the architecture, as IBM's action-runner-image-pz does (patches to
# the runner's build for linux-ppc64le / linux-s390x, .NET 8 from the distribution), and
# pass the resulting actions-runner-linux-ARCH-VERSION.tar.gz here. Its version is written
# to /opt/actions-runner/RUNNER_VERSION; check-runner-version.mjs warns before GitHub
# refuses it (30 days after each newer runner release), so rebuild at least monthly.
set -euo pipefail
arch=${1:?ARCH (ppc64le|s390x)}
tarball=${2:?RUNNER_TARBALL}
out=${3:?OUTPUT.qcow2}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
case "$arch" in
  ppc64le) deb_arch=ppc64el; kernel=linux-image-powerpc64le; triplet=powerpc64le-linux-gnu ;;
  s390x) deb_arch=s390x; kernel=linux-image-s390x; triplet=s390x-linux-gnu ;;
  *) echo "unknown arch $arch" >&2; exit 2 ;;
esac
version=$(basename "$tarball" | sed -n 's/^actions-runner-linux-[a-z0-9]*-\([0-9.]*\)\.tar\.gz$/\1/p')
[ -n "$version" ] || { echo "cannot read the runner version from $tarball" >&2; exit 2; }

work=$(mktemp -d)
trap 'umount -R "$work/root" 2>/dev/null || true; rm -rf "$work"' EXIT
rootfs="$work/root"

# 1. A minimal Debian for the architecture (second stage under qemu-user-static when
#    foreign).
if [ "$(dpkg --print-architecture)" = "$deb_arch" ]; then
  debootstrap --variant=minbase --include=systemd-sysv,udev,ca-certificates,"$kernel" bookworm "$rootfs"
else
  debootstrap --foreign --arch="$deb_arch" --variant=minbase \
    --include=systemd-sysv,udev,ca-certificates,"$kernel" bookworm "$rootfs"
  cp "/usr/bin/qemu-$([ "$arch" = ppc64le ] && echo ppc64le || echo s390x)-static" "$rootfs/usr/bin/"
  chroot "$rootfs" /debootstrap/debootstrap --second-stage
fi

# 2. The container engine, the runner's dependencies, a user for the runner.
chroot "$rootfs" apt-get install -y --no-install-recommends podman fuse-overlayfs uidmap \
  libicu72 libkrb5-3 zlib1g git curl
chroot "$rootfs" useradd --create-home --shell /bin/bash runner

# 3. The GitHub runner, with its version recorded for the compliance check.
mkdir -p "$rootfs/opt/actions-runner"
tar -xzf "$tarball" -C "$rootfs/opt/actions-runner"
echo "$version" > "$rootfs/opt/actions-runner/RUNNER_VERSION"
chroot "$rootfs" chown -R runner:runner /opt/actions-runner

# 4. hatchery-agent, static, as a service that starts at boot and powers off after.
"$triplet-gcc" -static -Os -s -std=gnu11 -I"$root/include" "$root/agent/hatchery-agent.c" \
  "/usr/lib/$triplet/libjansson.a" -o "$rootfs/usr/local/bin/hatchery-agent"
cp "$here/hatchery-agent.service" "$rootfs/etc/systemd/system/"
chroot "$rootfs" systemctl enable hatchery-agent.service

# 5. Into a qcow2 base image (what pools[].image names; guests get overlays on it).
virt-make-fs --format=qcow2 --type=ext4 --size=+8G --partition=gpt "$rootfs" "$out"
echo "built $out: Debian bookworm $arch, runner $version"
