#!/bin/sh
# Keeps guests off the host: run on every libvirt host, as root, before libvirtd starts
# guests (deploy/hatchery-guest-firewall.service does).
#
# A VM pool's default network is QEMU's user-mode networking (SLIRP): the guest's
# connections are made by the QEMU process on the host, and 10.0.2.2 is the host's own
# 127.0.0.1. Without this, a job can reach every service listening on the host's
# loopback or its addresses (hatcheryd's listener, libvirtd's TCP port, databases), and
# every machine of the host's LAN. With it, the host refuses every connection a QEMU
# process opens to what hatcheryd's nwfilter keeps guests on libvirt networks off: an
# address of the host itself (loopback included), and every private, shared, link-local,
# multicast or reserved range (IPv4: 0/8, 10/8, 100.64/10, 169.254/16, 172.16/12,
# 192.0.0/24, 192.168/16, 224/4, 240/4; IPv6: fc00::/7, fe80::/10, ff00::/8 and the
# IPv4-mapped ::ffff:0:0/96), except DNS to the resolvers /etc/resolv.conf names (SLIRP
# forwards the guest's queries there, on loopback or on the LAN) and what --allow opens.
# Everything else, GitHub and package mirrors included, goes out as before. Guests cannot
# reach each other: each has its own user-mode network, and nothing is forwarded to them.
#
# QEMU's sockets are matched by its group (qemu.conf `group`, Debian's libvirt-qemu),
# which hatcheryd compares with the group libvirt reports QEMU's guests run in. Nothing
# else on the host should run in that group.
#
# IPv4 and IPv6 (where the kernel has it) alike, each applied in one iptables-restore
# transaction; where IPv6 is up and ip6tables cannot be used, apply fails rather than
# leave IPv6 open. apply leaves a record for this boot in /run/hatchery-guest-firewall
# (the group, its gid and every rule of both families), and hatcheryd starts networked
# guests on this host only while it is there and names QEMU's group; remove deletes it
# first. Stopping the service does not remove the rules: guests may still run.
#
# usage: guest-firewall.sh apply|remove|status|check [--group GROUP] [--allow CIDR[:PORT]]...
#                          [--deny CIDR]...
#   --allow CIDR[:PORT]  let guests reach this network (of a range refused by default: a
#                        LAN mirror, a proxy), on one TCP and UDP port when PORT is given
#                        (IPv6: [CIDR]:PORT); repeatable
#   --deny CIDR          also refuse this network; repeatable
# status exits 0 when the rules are in place as apply left them (both families, this
# boot, every rule), 1 when not. check (hatchery-guest-firewall-check.timer, every minute)
# is status for a record that exists: rules changed since apply (a flush by another tool,
# a hand edit) remove the record, so that hatcheryd starts no networked guest, and, under
# systemd, hatchery-guest-firewall.service is restarted to apply them again.
set -eu
action=${1:-}
[ $# -gt 0 ] && shift
group=libvirt-qemu
deny=
allow=
while [ $# -gt 0 ]; do
  case "$1" in
    --group) group=${2:?--group needs a group}; shift 2 ;;
    --deny) deny="$deny ${2:?--deny needs a CIDR}"; shift 2 ;;
    --allow) allow="$allow ${2:?--allow needs a CIDR}"; shift 2 ;;
    *) echo "guest-firewall.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
chain=HATCHERY-GUESTS
case "$action" in
  apply | remove | status | check) ;;
  *)
    echo "usage: guest-firewall.sh apply|remove|status|check [--group GROUP] [--allow CIDR[:PORT]]... [--deny CIDR]..." >&2
    exit 2
    ;;
esac
# A name must exist; a numeric gid needs no entry. The record names both.
case "$group" in
  *[!0-9]*)
    gid=$(getent group "$group" 2>/dev/null | cut -d : -f 3)
    [ -n "$gid" ] || { echo "guest-firewall.sh: no group $group (set --group to qemu.conf's group)" >&2; exit 2; }
    ;;
  '') echo "guest-firewall.sh: --group needs a group" >&2; exit 2 ;;
  *) gid=$group ;;
esac

# What the nwfilter refuses guests on libvirt networks, for one family (4 or 6); the
# host's own addresses are matched by type, whatever they are.
refused_ranges() {
  if [ "$1" = 4 ]; then
    echo 0.0.0.0/8 10.0.0.0/8 100.64.0.0/10 169.254.0.0/16 172.16.0.0/12 192.0.0.0/24 \
      192.168.0.0/16 224.0.0.0/4 240.0.0.0/4
  else
    echo fc00::/7 fe80::/10 ff00::/8 ::ffff:0:0/96
  fi
}

family_of() { case "$1" in *:*) echo 6 ;; *) echo 4 ;; esac; }

# The resolvers /etc/resolv.conf names, of one family.
resolvers() {
  awk '$1 == "nameserver" {print $2}' /etc/resolv.conf 2>/dev/null | while read -r ns; do
    ns=${ns%%%*} # an IPv6 zone (fe80::1%eth0)
    [ "$(family_of "$ns")" = "$1" ] && echo "$ns"
  done
}

# The chain's rules for one family (4 or 6), as iptables-restore input: DNS to the
# resolvers and the allowed networks first, then the host and the refused ranges.
chain_rules() {
  for ns in $(resolvers "$1"); do
    echo "-A $chain -d $ns -p udp --dport 53 -j RETURN"
    echo "-A $chain -d $ns -p tcp --dport 53 -j RETURN"
  done
  for a in $allow; do
    port=
    case "$a" in
      \[*\]:*) port=${a##*]:}; a=${a#[}; a=${a%%]*} ;;
      *:*:*) ;; # IPv6 without a port
      *:*) port=${a##*:}; a=${a%:*} ;;
    esac
    [ "$(family_of "$a")" = "$1" ] || continue
    if [ -n "$port" ]; then
      echo "-A $chain -d $a -p tcp --dport $port -j RETURN"
      echo "-A $chain -d $a -p udp --dport $port -j RETURN"
    else
      echo "-A $chain -d $a -j RETURN"
    fi
  done
  echo "-A $chain -m addrtype --dst-type LOCAL -p tcp -j REJECT --reject-with tcp-reset"
  echo "-A $chain -m addrtype --dst-type LOCAL -j REJECT"
  for cidr in $(refused_ranges "$1") $deny; do
    [ "$(family_of "$cidr")" = "$1" ] || continue
    echo "-A $chain -d $cidr -p tcp -j REJECT --reject-with tcp-reset"
    echo "-A $chain -d $cidr -j REJECT"
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
# IPv6 up: an address on any interface (loopback's ::1 counts: SLIRP reaches the host's
# [::1] services through it).
ipv6_up() { [ -s /proc/net/if_inet6 ]; }

# What is in place now, as the record keeps it: the boot, the group, and each family's
# jump and chain as iptables prints them. Fails when a family's jump is missing.
state() {
  echo "boot_id $(cat /proc/sys/kernel/random/boot_id)"
  echo "group $group"
  echo "gid $gid"
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
    # IPv6 too, where the kernel has it; where it is up, ip6tables must work.
    if ipv6_up && ! have_ipv6; then
      echo "guest-firewall: IPv6 is up here but ip6tables cannot be used: nothing applied (install iptables' ip6tables, or disable IPv6)" >&2
      exit 1
    fi
    apply_family iptables 4
    if have_ipv6; then apply_family ip6tables 6; fi
    tmp=$(mktemp "$record.XXXXXX")
    if ! state >"$tmp"; then
      rm -f "$tmp"
      echo "guest-firewall: the rules are not in place after apply" >&2
      exit 1
    fi
    chmod 0644 "$tmp"
    mv -f "$tmp" "$record"
    echo "guest-firewall: QEMU (group $group, gid $gid) cannot reach this host's addresses, nor private, shared, link-local, multicast or reserved ranges${deny:+, nor$deny}${allow:+ (allowed:$allow)}"
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
