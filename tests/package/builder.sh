# shellcheck shell=bash
# Sourced: an operator's or a build daemon's build in a root, as Debian builds packages.
#
#   builder_setup ROOT CHECKOUT   makes the user `builder` in ROOT (proc, dev and dev/pts
#                                 mounted there: root-mounts.sh) and puts CHECKOUT's
#                                 tracked and new files at $builder_src
#                                 (/home/builder/src/hatchery), owned by it
#   as_builder ROOT COMMAND       runs COMMAND (sh -c) in ROOT as `builder`, in a network
#                                 namespace of its own (no interface but a loopback that
#                                 is down): no root, no network, as sbuild and Debian's
#                                 build daemons build (Rules-Requires-Root: no)
#
# builder_setup checks both, so that a build that could reach the network or run as root
# fails there, not silently.
builder_src=/home/builder/src/hatchery

builder_setup() {
  local root=$1 checkout=$2
  chroot "$root" useradd --create-home builder
  mkdir -p "$root$builder_src"
  (cd "$checkout" && git ls-files -co --exclude-standard -z | tar --null -cf - -T -) |
    tar -xf - -C "$root$builder_src"
  chroot "$root" chown -R builder:builder /home/builder/src
  [ "$(as_builder "$root" 'id -u')" != 0 ] || { echo "builder: the builder is root" >&2; return 1; }
  [ "$(as_builder "$root" 'readlink /proc/self/ns/net')" != "$(readlink /proc/self/ns/net)" ] ||
    { echo "builder: the builder shares this machine's network" >&2; return 1; }
}

as_builder() {
  chroot "$1" unshare --net runuser -u builder -- sh -c "$2"
}
