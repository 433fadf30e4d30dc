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
# IPv4 and IPv6 (where the kernel has it) alike, each applied in one iptables-restore
# transaction. apply leaves a record for this boot in /run/hatchery-guest-firewall, and
# hatcheryd starts networked guests on this host only while it is there; remove deletes
# it first. Stopping the service does not remove the rules: guests may still run.
#
# usage: guest-firewall.sh apply|remove|status|check [--group GROUP] [--deny CIDR]...
#   --deny CIDR  also refuse this network (e.g. 10.0.0.0/8 for an internal network
#                the jobs must not see); repeatable
# status exits 0 when the rules are in place as apply left them (both families, this
# boot), 1 when not. check (hatchery-guest-firewall-check.timer, every minute) is status
# for a record that exists: rules changed since apply (a flush by another tool, a hand
# edit) remove the record, so that hatcheryd starts no networked guest, and, under
# systemd, hatchery-guest-firewall.service is restarted to apply them again.
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
  apply | remove | status | check) ;;
  *)
    echo "usage: guest-firewall.sh apply|remove|status|check [--group GROUP] [--deny CIDR]..." >&2
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

# The chain's rules for one family (4 or 6), as iptables-restore input.
chain_rules() {
  for ns in $(loopback_resolvers "$1"); do
    echo "-A $chain -d $ns -p udp --dport 53 -j RETURN"
    echo "-A $chain -d $ns -p tcp --dport 53 -j RETURN"
  done
  echo "-A $chain -m addrtype --dst-type LOCAL -p tcp -j REJECT --reject-with tcp-reset"
  echo "-A $chain -m addrtype --dst-type LOCAL -j REJECT"
  if [ "$1" = 4 ]; then echo "-A $chain -d 169.254.0.0/16 -j REJECT"; else echo "-A $chain -d fe80::/10 -j REJECT"; fi
  for cidr in $deny; do
    family=4
    case "$cidr" in *:*) family=6 ;; esac
    if [ "$family" = "$1" ]; then echo "-A $chain -d $cidr -j REJECT"; fi
  done
}

# One transaction per family: the chain is made or flushed and refilled, and QEMU's jump
# to it added, all at once (iptables-restore --noflush touches nothing else). A re-apply
# never leaves a moment without the rules.
apply_family() { # iptables|ip6tables 4|6
  ipt=$1
  {
    echo "*filter"
    echo ":$chain - [0:0]"
    chain_rules "$2"
    $ipt -w -C OUTPUT -m owner --gid-owner "$group" -j "$chain" 2>/dev/null ||
      echo "-I OUTPUT 1 -m owner --gid-owner $group -j $chain"
    echo "COMMIT"
  } | "$ipt-restore" -w --noflush
}

remove_family() {
  ipt=$1
  while $ipt -w -D OUTPUT -m owner --gid-owner "$group" -j "$chain" 2>/dev/null; do :; done
  $ipt -w -F "$chain" 2>/dev/null || true
  $ipt -w -X "$chain" 2>/dev/null || true
}

have_ipv6() { ip6tables -w -L OUTPUT >/dev/null 2>&1; }

# What is in place now, as the record keeps it: the boot, the group, and each family's
# jump and chain as iptables prints them. Fails when a family's jump is missing.
state() {
  echo "boot_id $(cat /proc/sys/kernel/random/boot_id)"
  echo "group $group"
  families=4
  if have_ipv6; then families="4 6"; fi
  echo "families $families"
  for f in $families; do
    ipt=iptables
    [ "$f" = 4 ] || ipt=ip6tables
    $ipt -w -C OUTPUT -m owner --gid-owner "$group" -j "$chain" 2>/dev/null || return 1
    echo "-- ipv$f"
    $ipt -w -S "$chain" || return 1
  done
}

# hatcheryd starts networked guests on this host only while this record says the rules
# are in place for this boot (controller/guest_isolation.h); root's, mode 0644.
record=/run/hatchery-guest-firewall

# In place: every family's jump and chain are what apply recorded, for this boot. Leaves
# the state it saw in $now.
as_recorded() {
  now=$(state 2>/dev/null) || now=
  [ -n "$now" ] && [ -f "$record" ] && [ "$now" = "$(cat "$record")" ]
}

case "$action" in
  apply)
    apply_family iptables 4
    # IPv6 too, where the kernel has it.
    if have_ipv6; then apply_family ip6tables 6; fi
    tmp=$(mktemp "$record.XXXXXX")
    if ! state >"$tmp"; then
      rm -f "$tmp"
      echo "guest-firewall: the rules are not in place after apply" >&2
      exit 1
    fi
    chmod 0644 "$tmp"
    mv -f "$tmp" "$record"
    echo "guest-firewall: QEMU (group $group) cannot reach this host's addresses or link-local ones${deny:+, nor$deny}"
    ;;
  remove)
    # The record first: hatcheryd starts no networked guest from here on.
    rm -f "$record"
    remove_family iptables
    if have_ipv6; then remove_family ip6tables; fi
    echo "guest-firewall: removed (hatcheryd starts no networked guest here until apply)"
    ;;
  status)
    if as_recorded; then
      printf '%s\n' "$now"
      exit 0
    fi
    echo "guest-firewall: not in place for group $group (apply it again)"
    exit 1
    ;;
  check)
    # Nothing recorded (never applied, or removed on purpose): nothing to keep.
    [ -f "$record" ] || exit 0
    as_recorded && exit 0
    rm -f "$record"
    echo "guest-firewall: the rules for group $group changed since apply: record removed, hatcheryd starts no networked guest until they are applied again" >&2
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
      systemctl restart hatchery-guest-firewall.service &&
        echo "guest-firewall: applied again by hatchery-guest-firewall.service" >&2
    fi
    exit 1
    ;;
esac
