#!/bin/sh
# Lets this machine run ppc64le and s390x binaries through qemu-user (binfmt_misc), for
# building a foreign Debian root (hatchery-build-image, images/runner/build-image.sh) or
# running a cross-built package's tests (tests/package). Every script that needs foreign
# binaries calls this one.
#
# A new machine has qemu-user-static installed and may still run nothing foreign:
# /proc/sys/fs/binfmt_misc is not mounted where no systemd mounts it, so the package's
# registration never happened. This mounts it, registers what the system knows
# (binfmt-support's update-binfmts on Debian 12, systemd-binfmt's /usr/lib/binfmt.d on
# Debian 13) and checks that each architecture asked for really runs. In a container that
# shares the kernel's registrations but may not mount binfmt_misc (systemd-nspawn), a
# binary that already runs is enough.
#
# usage (as root): enable-binfmt.sh [ARCH...]   ARCH: ppc64le, ppc64el, s390x (default: both)
set -eu
die() { echo "enable-binfmt: $*" >&2; exit 1; }
[ $# -gt 0 ] || set -- ppc64le s390x
dir=/proc/sys/fs/binfmt_misc
# Registered is not enough: the interpreter must start (arch-test runs a tiny binary).
runs() { command -v arch-test >/dev/null && arch-test "$1" >/dev/null 2>&1; }
for arch in "$@"; do
  case "$arch" in
    ppc64le | ppc64el) qemu=ppc64le deb=ppc64el ;;
    s390x) qemu=s390x deb=s390x ;;
    *) die "unknown architecture $arch (ppc64le or s390x)" ;;
  esac
  runs "$deb" && continue
  [ -x "/usr/bin/qemu-$qemu-static" ] || [ -x "/usr/bin/qemu-$qemu" ] ||
    die "no qemu-$qemu: install qemu-user-static"
  if [ ! -e "$dir/register" ]; then
    [ "$(id -u)" = 0 ] || die "$dir is not mounted, and mounting it needs root"
    mount -t binfmt_misc binfmt_misc "$dir" || die "cannot mount binfmt_misc on $dir"
  fi
  if [ ! -e "$dir/qemu-$qemu" ] || ! grep -qx enabled "$dir/qemu-$qemu"; then
    if command -v update-binfmts >/dev/null; then
      update-binfmts --enable "qemu-$qemu" >/dev/null 2>&1 || true
    elif [ -x /usr/lib/systemd/systemd-binfmt ] && [ -f "/usr/lib/binfmt.d/qemu-$qemu.conf" ]; then
      /usr/lib/systemd/systemd-binfmt "/usr/lib/binfmt.d/qemu-$qemu.conf" || true
    else
      die "nothing registers qemu-$qemu here: install binfmt-support (Debian 12) or qemu-user-binfmt (Debian 13)"
    fi
  fi
  grep -qx enabled "$dir/qemu-$qemu" 2>/dev/null ||
    die "binfmt_misc has no enabled qemu-$qemu after registering it"
  if command -v arch-test >/dev/null; then
    runs "$deb" || die "$deb binaries do not run here (arch-test $deb)"
  fi
done
