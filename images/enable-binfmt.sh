#!/bin/sh
# Lets this machine run ppc64le and s390x binaries through qemu-user (binfmt_misc), for
# building a foreign Debian root (images/runner/build-image.sh) or running a cross-built
# package's tests (tests/package). Every script that needs foreign binaries calls this one.
#
# A new machine has qemu-user-static and binfmt-support installed and still runs nothing
# foreign: /proc/sys/fs/binfmt_misc is not mounted (no systemd mounts it), so the
# package's registration never happened. This mounts it, registers what binfmt-support
# knows (update-binfmts --enable) and checks that each architecture asked for really runs.
#
# usage (as root): enable-binfmt.sh [ARCH...]   ARCH: ppc64le, ppc64el, s390x (default: both)
set -eu
die() { echo "enable-binfmt: $*" >&2; exit 1; }
[ $# -gt 0 ] || set -- ppc64le s390x
dir=/proc/sys/fs/binfmt_misc
if [ ! -e "$dir/register" ]; then
  [ "$(id -u)" = 0 ] || die "$dir is not mounted, and mounting it needs root"
  mount -t binfmt_misc binfmt_misc "$dir" || die "cannot mount binfmt_misc on $dir"
fi
command -v update-binfmts >/dev/null || die "update-binfmts is missing: install binfmt-support"
for arch in "$@"; do
  case "$arch" in
    ppc64le | ppc64el) qemu=ppc64le deb=ppc64el ;;
    s390x) qemu=s390x deb=s390x ;;
    *) die "unknown architecture $arch (ppc64le or s390x)" ;;
  esac
  [ -x "/usr/bin/qemu-$qemu-static" ] || [ -x "/usr/bin/qemu-$qemu" ] ||
    die "no qemu-$qemu: install qemu-user-static"
  if [ ! -e "$dir/qemu-$qemu" ] || ! grep -qx enabled "$dir/qemu-$qemu"; then
    update-binfmts --enable "qemu-$qemu" >/dev/null 2>&1 || true
  fi
  grep -qx enabled "$dir/qemu-$qemu" 2>/dev/null ||
    die "binfmt_misc has no enabled qemu-$qemu after update-binfmts --enable qemu-$qemu"
  # Registered is not enough: the interpreter must start (arch-test runs a tiny binary).
  if command -v arch-test >/dev/null; then
    arch-test "$deb" >/dev/null 2>&1 || die "$deb binaries do not run here (arch-test $deb)"
  fi
done
