#!/usr/bin/env bash
# A stock Debian host in a directory, booted with systemd as its PID 1 (systemd-nspawn
# --boot, the root's own nspawn): libvirt-daemon-system with its configuration untouched
# (QEMU as libvirt-qemu, dynamic ownership, virtlogd, socket activation), on this
# machine's network (the guest firewall's rules are then this machine's), or on a network
# of its own (boot's VETH).
#
#   machine.sh root RELEASE CACHE_DIR   makes (or reuses) a clean RELEASE host root as a
#                                       tarball in CACHE_DIR (tests/package/cached-root.sh:
#                                       keyed by the package list and the ISO week); prints
#                                       its path
#   machine.sh build-root RELEASE CACHE_DIR   the same for the build root: RELEASE with our
#                                       build dependencies and nothing else, as sbuild's
#   machine.sh boot DIR [HOSTNAME [VETH]]   boots the root extracted at DIR; returns once
#                                       systemd says it is up. With VETH, on a network of its
#                                       own: a veth pair, VETH here and host0 there
#   machine.sh run DIR COMMAND...       runs COMMAND in it (all its namespaces, as root)
#   machine.sh halt DIR                 powers it off (and kills it if it will not go)
#
# What differs from a host, because this is a container on a machine that is one itself,
# and what boot does about it:
#   - nspawn mounts the cgroup v1 controllers read-only: libvirt could not make the guests'
#     cgroups ("Failed to create v1 controller cpu"). They are remounted read-write.
#   - nspawn gives the container a boot id of its own, which a unit with
#     ProtectKernelTunables= (hatcheryd's) does not see: it sees the kernel's. A host has
#     one. The container's is unmounted, so that the guest firewall's record and hatcheryd
#     agree as on a host.
#   - nspawn drops CAP_NET_ADMIN when the network is shared: it is given back (the guest
#     firewall needs it).
#   - nspawn's "host" is the root itself (it runs from it), so its copy of the host's
#     /etc/resolv.conf copied the file onto itself and left it empty (seen with the
#     standard variant's root: "Temporary failure resolving"): --resolv-conf=off, and boot
#     writes this machine's resolver there first.
#   - binfmt_misc is the kernel's, shared with this machine and every other container
#     (the kernel keeps one per user namespace, and nspawn makes none here). The host's
#     systemd-binfmt.service would register its qemu-user-binfmt interpreters there over
#     this machine's and unregister them all when it stops, under the other tests that run
#     foreign binaries: boot masks it (a host's boot would start it). The image build that
#     needs the host's own registrations makes them in a binfmt_misc of its own
#     (own-binfmt.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log() { echo "machine: $*" >&2; }

# The host: what every Debian host has (Priority required, important and standard:
# mmdebstrap's `standard` variant; nftables among them, though libvirt takes iptables-nft
# while iptables is there: docs/LIBVIRT-HERE.md), and what a Power host running Hatchery
# has from Debian (libvirt, QEMU for both guest architectures, sudo for the runbook, SSH
# for a controller of remote hosts, what hatchery-image-tools depends on to build an image
# of another architecture), each with its Recommends, as apt installs them on a host (QEMU's
# bring a desktop's libraries, exim4, LVM and open-iscsi: a root twice the size). None of
# our build dependencies: the package's own Depends must bring every library it needs.
host_packages=(
  systemd systemd-sysv systemd-container dbus adduser sudo iptables nftables ca-certificates
  libvirt-daemon-system qemu-system-ppc qemu-system-s390x qemu-utils
  sqlite3 file procps openssh-server openssh-client
  e2fsprogs mmdebstrap arch-test
)
# The build root: debian/control's Build-Depends, in a root of the release's required
# packages and apt, as Debian's build daemons have; and passwd for the user the build runs
# as (useradd: not Priority required on trixie).
build_deps=(
  passwd
  build-essential debhelper cmake pkg-config pandoc file libuv1-dev libhttp-parser-dev libssl-dev
  libjansson-dev libsqlite3-dev libpq-dev libyaml-dev libcurl4-openssl-dev libvirt-dev libxml2-dev
  libsystemd-dev libseccomp-dev libacl1-dev libyajl-dev libcmocka-dev
)

pid_of() { cat "$1.pid" 2>/dev/null; }

case "${1:-}" in
root|build-root)
  what=$1
  release=${2:?usage: machine.sh root|build-root RELEASE CACHE_DIR}
  cache=${3:?usage: machine.sh root|build-root RELEASE CACHE_DIR}
  if [ "$what" = root ]; then
    # The package lists of the root's making stay, as on a host that has run apt update.
    # Recommends on, and apt's configuration left as Debian's (mmdebstrap writes its
    # --aptopt into the root): the runbook's apt install brings what a host's would.
    options=(--variant=standard --skip=cleanup/apt/lists --include="$(IFS=,; echo "${host_packages[*]}")"
      --aptopt='Apt::Install-Recommends "true"'
      --customize-hook='rm "$1/etc/apt/apt.conf.d/99mmdebstrap"')
  else
    grep -q "^ *libcmocka-dev <!nocheck>,$" "$here/../../debian/control" ||
      { log "debian/control's Build-Depends changed: update build_deps in $0"; exit 1; }
    # Build dependencies without their Recommends, as Debian's build daemons install them.
    options=(--variant=apt --include="$(IFS=,; echo "${build_deps[*]}")"
      --aptopt='Apt::Install-Recommends "false"')
  fi
  HATCHERY_ROOT_CACHE=$cache "$here/../package/cached-root.sh" --tarball "$release-$what" \
    "${options[@]}" \
    "$release" "deb http://deb.debian.org/debian $release main" \
    "deb http://deb.debian.org/debian $release-updates main" \
    "deb http://deb.debian.org/debian-security $release-security main" ;;

boot)
  dir=$(cd "${2:?usage: machine.sh boot DIR [HOSTNAME [VETH]]}" && pwd)
  name=${3:-stockhost}
  # With VETH, a network of its own: a veth pair, VETH on this machine and host0 in it,
  # which the caller addresses.
  network=
  if [ -n "${4:-}" ]; then
    network="--private-network --network-veth-extra=$4:host0"
    # nspawn derives the veth's MAC addresses from the machine id: "Failed to generate
    # predictable MAC address … No medium found" without one. A host has one.
    od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$dir/etc/machine-id"
  fi
  # A hostname it can resolve (sudo asks), and the machine's resolver.
  echo "$name" >"$dir/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$name" >"$dir/etc/hosts"
  cp /etc/resolv.conf "$dir/etc/resolv.conf"
  mkdir -p "$dir/var/lib/machines/host"
  # binfmt_misc is this machine's (the header says why): the host's registrations stay out.
  ln -sf /dev/null "$dir/etc/systemd/system/systemd-binfmt.service"
  rm -f "$dir.pid"
  # nspawn runs from the root itself (this machine may have none, or an older one): in a
  # mount namespace of its own, the root is bound on itself, made the root, and booted.
  # shellcheck disable=SC2016
  setsid unshare --mount --propagation private bash -c '
    dir=$1 network=$2
    mount --bind "$dir" "$dir"
    mount -t proc proc "$dir/proc"
    mount --rbind /sys "$dir/sys"
    mount --rbind /dev "$dir/dev"
    mount -t tmpfs tmpfs "$dir/run"
    mount -t tmpfs tmpfs "$dir/tmp"
    mount --bind "$dir" "$dir/var/lib/machines/host"
    cd "$dir" && mkdir -p oldroot && pivot_root . oldroot
    exec chroot . bash -c "umount -l /oldroot; rmdir /oldroot; exec env SYSTEMD_NSPAWN_API_VFS_WRITABLE=1 \
      systemd-nspawn -D /var/lib/machines/host --boot --register=no --keep-unit \
      --console=passive --link-journal=no --resolv-conf=off --capability=CAP_NET_ADMIN $network"
  ' boot "$dir" "$network" >"$dir.console" 2>&1 </dev/null &
  # The exec chain keeps one pid: $! is nspawn's, and the container's PID 1 its child.
  nspawn=$!
  for _ in $(seq 300); do
    p=$(pgrep -P "$nspawn" -x systemd || true)
    [ -n "$p" ] && { echo "$p" >"$dir.pid"; break; }
    kill -0 "$nspawn" 2>/dev/null || break
    sleep 0.2
  done
  [ -s "$dir.pid" ] || { tail -n 20 "$dir.console" >&2; log "no systemd came up in $dir"; exit 1; }
  state=
  for _ in $(seq 300); do
    state=$(nsenter -t "$(pid_of "$dir")" -a systemctl is-system-running 2>/dev/null || true)
    case "$state" in running|degraded) break ;; esac
    sleep 0.2
  done
  case "$state" in running|degraded) ;; *) tail -n 20 "$dir.console" >&2; log "systemd is '$state'"; exit 1 ;; esac
  pid=$(pid_of "$dir")
  nsenter -t "$pid" -a umount /proc/sys/kernel/random/boot_id 2>/dev/null || true
  for c in $(nsenter -t "$pid" -a awk '$5 ~ /^\/sys\/fs\/cgroup\/[a-z_,]+$/ && $6 ~ /^ro/ {print $5}' /proc/self/mountinfo); do
    nsenter -t "$pid" -a mount -o remount,rw,bind "$c"
  done
  log "booted $dir (systemd $state, pid $pid)" ;;

run)
  dir=$(cd "${2:?usage: machine.sh run DIR COMMAND...}" && pwd)
  shift 2
  pid=$(pid_of "$dir")
  [ -n "$pid" ] || { log "$dir is not booted"; exit 1; }
  exec nsenter -t "$pid" -a env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@" ;;

halt)
  dir=$(cd "${2:?usage: machine.sh halt DIR}" && pwd)
  pid=$(pid_of "$dir")
  [ -n "$pid" ] || exit 0
  kill -RTMIN+4 "$pid" 2>/dev/null || true # systemd's poweroff
  for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir.pid" ;;

*) echo "usage: machine.sh root|build-root|boot|run|halt ..." >&2; exit 2 ;;
esac
