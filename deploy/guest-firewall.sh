#!/bin/sh
# Keeps guests off the host: run on every libvirt host, as root, before libvirtd starts
# guests (deploy/hatchery-guest-firewall.service does).
#
# A VM pool's default network is QEMU's user-mode networking (SLIRP): the guest's
# connections are made by the QEMU process on the host, and 10.0.2.2 is the host's own
# 127.0.0.1. Without this, a job can reach every service listening on the host's
# loopback or its addresses: hatcheryd's listener, libvirtd's TCP port, databases.
# With it, the host drops every connection a QEMU process opens to an address of the
# host itself (loopback included) or to a link-local address (cloud metadata services),
# except DNS to the resolvers /etc/resolv.conf names on loopback (SLIRP forwards the
# guest's queries there). Everything else, GitHub and package mirrors included, goes out
# as before. Guests cannot reach each other: each has its own user-mode network, and
# nothing is forwarded to them.
#
# QEMU's sockets are matched by its group (qemu.conf `group`, Debian's libvirt-qemu).
# Nothing else on the host should run in that group.
#
# usage: guest-firewall.sh apply|remove|status [--group GROUP] [--deny CIDR]...
#   --deny CIDR  also refuse this network (e.g. 10.0.0.0/8 for an internal network
#                the jobs must not see); repeatable
# status exits 0 when the rules are in place, 1 when not.
set -eu
action=${1:-}
[ $# -gt 0 ] && shift
group=libvirt-qemu
deny=
while [ $# -gt 0 ]; do
  case "$1" in
    --group) group=${2:?--group needs a group}; shift 2 ;;
    --deny) deny="$deny ${2:?--deny needs a CIDR}"; shift 2 ;;
    *) echo "guest-firewall.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
chain=HATCHERY-GUESTS
case "$action" in
  apply | remove | status) ;;
  *)
    echo "usage: guest-firewall.sh apply|remove|status [--group GROUP] [--deny CIDR]..." >&2
    exit 2
    ;;
esac
# A name must exist; a numeric gid needs no entry.
if ! getent group "$group" >/dev/null 2>&1 && [ -n "$(printf '%s' "$group" | tr -d 0-9)" ]; then
  echo "guest-firewall.sh: no group $group (set --group to qemu.conf's group)" >&2
  exit 2
fi

# The resolvers on loopback, of one family (4 or 6).
loopback_resolvers() {
  awk '$1 == "nameserver" {print $2}' /etc/resolv.conf 2>/dev/null | while read -r ns; do
    case "$1:$ns" in
      4:127.*) echo "$ns" ;;
      6:::1) echo "$ns" ;;
    esac
  done
}

apply_family() { # iptables|ip6tables 4|6
  ipt=$1
  $ipt -w -N "$chain" 2>/dev/null || $ipt -w -F "$chain"
  for ns in $(loopback_resolvers "$2"); do
    $ipt -w -A "$chain" -d "$ns" -p udp --dport 53 -j RETURN
    $ipt -w -A "$chain" -d "$ns" -p tcp --dport 53 -j RETURN
  done
  $ipt -w -A "$chain" -m addrtype --dst-type LOCAL -p tcp -j REJECT --reject-with tcp-reset
  $ipt -w -A "$chain" -m addrtype --dst-type LOCAL -j REJECT
  if [ "$2" = 4 ]; then
    $ipt -w -A "$chain" -d 169.254.0.0/16 -j REJECT
    for cidr in $deny; do
      case "$cidr" in *:*) ;; *) $ipt -w -A "$chain" -d "$cidr" -j REJECT ;; esac
    done
  else
    $ipt -w -A "$chain" -d fe80::/10 -j REJECT
    for cidr in $deny; do
      case "$cidr" in *:*) $ipt -w -A "$chain" -d "$cidr" -j REJECT ;; esac
    done
  fi
  $ipt -w -C OUTPUT -m owner --gid-owner "$group" -j "$chain" 2>/dev/null ||
    $ipt -w -I OUTPUT -m owner --gid-owner "$group" -j "$chain"
}

remove_family() {
  ipt=$1
  while $ipt -w -D OUTPUT -m owner --gid-owner "$group" -j "$chain" 2>/dev/null; do :; done
  $ipt -w -F "$chain" 2>/dev/null || true
  $ipt -w -X "$chain" 2>/dev/null || true
}

case "$action" in
  apply)
    apply_family iptables 4
    # IPv6 too, where the kernel has it.
    if ip6tables -w -L OUTPUT >/dev/null 2>&1; then apply_family ip6tables 6; fi
    echo "guest-firewall: QEMU (group $group) cannot reach this host's addresses or link-local ones${deny:+, nor$deny}"
    ;;
  remove)
    remove_family iptables
    if ip6tables -w -L OUTPUT >/dev/null 2>&1; then remove_family ip6tables; fi
    echo "guest-firewall: removed"
    ;;
  status)
    if iptables -w -C OUTPUT -m owner --gid-owner "$group" -j "$chain" 2>/dev/null; then
      iptables -w -S "$chain"
      exit 0
    fi
    echo "guest-firewall: not in place for group $group"
    exit 1
    ;;
  *)
    echo "usage: guest-firewall.sh apply|remove|status [--group GROUP] [--deny CIDR]..." >&2
    exit 2
    ;;
esac
