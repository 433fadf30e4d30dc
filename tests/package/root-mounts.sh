# shellcheck shell=bash
# Sourced: what a command run by chroot in a Debian root needs of the kernel's file systems
# (apt, dpkg, the maintainer scripts and the tests: /proc, and this machine's /dev and
# /dev/pts).
#
#   root_mount ROOT     mounts them in ROOT
#   root_unmount ROOT   unmounts those of them still mounted there, lazily (a process may
#                       still hold one): for an EXIT trap
root_mount() {
  mount -t proc proc "$1/proc"
  mount --bind /dev "$1/dev"
  mount --bind /dev/pts "$1/dev/pts"
}

root_unmount() {
  local m
  for m in dev/pts dev proc; do
    if mountpoint -q "$1/$m"; then umount -l "$1/$m"; fi
  done
}
