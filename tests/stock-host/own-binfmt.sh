#!/bin/sh
# Runs COMMAND with this host's own binfmt_misc registrations, as a host has them after its
# boot: in a user namespace (every uid and gid mapped to itself, so files keep their
# owners) with a binfmt_misc instance of its own, in which this host's systemd-binfmt
# registers what its packages put in binfmt.d (on trixie, qemu-user-binfmt's interpreters).
# Runs inside a stock-host machine (machine.sh run), whose boot keeps systemd-binfmt from
# the kernel's instance, which the machine shares with the machine that runs it.
#
# The kernel looks up a foreign binary's interpreter in the instance of the nearest user
# namespace that has one (Linux 6.7 and later): once this one is mounted, the outer
# registrations no longer count. Before registering, it checks that: a ppc64el binary must
# not run in the empty instance.
#
# Prints, before COMMAND's output, "before registering: " and arch-test's verdict, then the
# instance's qemu-ppc64le entry.
#
# usage (as root, in the machine): own-binfmt.sh COMMAND...
set -eu
[ $# -gt 0 ] || { echo "usage: own-binfmt.sh COMMAND..." >&2; exit 2; }
if [ "${OWN_BINFMT_INSIDE:-}" != yes ]; then
  OWN_BINFMT_INSIDE=yes exec unshare --user --map-users=0:0:4294967295 \
    --map-groups=0:0:4294967295 --mount --propagation private -- "$0" "$@"
fi
dir=/proc/sys/fs/binfmt_misc
mount -t binfmt_misc binfmt_misc "$dir"
echo "before registering: $(arch-test ppc64el 2>&1 || true)"
/usr/lib/systemd/systemd-binfmt
[ -e "$dir/qemu-ppc64le" ] ||
  { echo "own-binfmt: systemd-binfmt registered no qemu-ppc64le (no qemu-user-binfmt?)" >&2; exit 1; }
echo "registered qemu-ppc64le: $(tr '\n' ' ' <"$dir/qemu-ppc64le")"
exec "$@"
