#!/usr/bin/env bash
# Starts (or stops) a real libvirtd for the tests, with the workarounds these machines need
# (see docs/LIBVIRT-HERE.md), without touching the machine's own configuration:
#  - a private mount namespace, where our own /etc/libvirt (qemu.conf running guests as
#    root in the group hatchery-qemu, no security driver) and a passwd/group that have the
#    `libvirt-qemu` user the QEMU driver insists on are bind-mounted. The group is what a
#    host firewall can match QEMU's own sockets by (deploy/guest-firewall.sh): user-mode
#    networking connects from the QEMU process, and root's uid matches everything;
#  - the cgroup v2 mount at /sys/fs/cgroup/unified hidden, so LXC domains start;
#  - tini -s as a child subreaper, so destroyed guests are reaped at once;
#  - virtlogd beside it, writing the guests' console files with a size bound;
#  - libvirtd restarted when it dies, as systemd's Restart=on-failure does on a host:
#    libvirtd 9.0 has been seen to segfault here when clients die mid-call (the chaos test
#    kills hatcheryd), and a host whose libvirtd is gone for good has nothing to test.
#    `stop` signals the whole group (tini -g): the loop ends with libvirtd.
# The sockets stay in the shared /run/libvirt, so qemu:///system and lxc:/// work from
# outside the namespace.
#
# usage: libvirtd.sh start|stop|status
set -euo pipefail
state=/run/hatchery-test-libvirtd
case "${1:-}" in
start)
  # A daemon started with another version of this script is restarted.
  me=$(sha256sum "$0" | cut -c1-16)
  if [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null && virsh -c qemu:///system list >/dev/null 2>&1; then
    if [ "$(cat "$state/script" 2>/dev/null)" = "$me" ]; then
      echo "libvirtd: already running"; exit 0
    fi
    kill "$(cat "$state/pid")" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$(cat "$state/pid")" 2>/dev/null || break; sleep 0.1; done
  fi
  mkdir -p "$state/etc-libvirt" /run/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt
  echo "$me" > "$state/script"
  cat > "$state/etc-libvirt/libvirtd.conf" <<'CONF'
unix_sock_group = "root"
unix_sock_rw_perms = "0770"
auth_unix_rw = "none"
auth_unix_ro = "none"
keepalive_interval = 5
keepalive_count = 5
CONF
  cat > "$state/etc-libvirt/qemu.conf" <<'CONF'
user = "root"
group = "hatchery-qemu"
dynamic_ownership = 0
security_driver = "none"
remember_owner = 0
stdio_handler = "logd"
CONF
  # virtlogd writes the guests' file consoles (stdio_handler = "logd", Debian's default
  # on a host), and rolls a console over at max_size, keeping max_backups: what bounds a
  # local guest's console log. Small here, so a test can flood past it within seconds.
  cat > "$state/etc-libvirt/virtlogd.conf" <<'CONF'
max_size = 131072
max_backups = 2
CONF
  cat > "$state/etc-libvirt/lxc.conf" <<'CONF'
security_driver = "none"
CONF
  cp /etc/libvirt/libvirt.conf "$state/etc-libvirt/" 2>/dev/null || true
  cp /etc/passwd "$state/passwd"
  cp /etc/group "$state/group"
  grep -q '^libvirt-qemu:' "$state/passwd" || echo 'libvirt-qemu:x:64055:64055:Libvirt Qemu,,,:/var/lib/libvirt:/usr/sbin/nologin' >> "$state/passwd"
  grep -q '^libvirt-qemu:' "$state/group" || echo 'libvirt-qemu:x:64055:' >> "$state/group"
  grep -q '^kvm:' "$state/group" || echo 'kvm:x:64056:' >> "$state/group"
  grep -q '^hatchery-qemu:' "$state/group" || echo 'hatchery-qemu:x:64057:' >> "$state/group"
  rm -f "$state/pid"
  (
    # A daemon keeps no descriptor of whoever started it: an inherited pipe (a test's
    # `2> >(tee …)`) would stay open as long as libvirtd lives, and its reader, and the
    # test runner reading that, would wait for ever.
    for fd in /proc/self/fd/*; do
      n=${fd##*/}
      [ "$n" -gt 2 ] && eval "exec $n>&-" 2>/dev/null
    done
    exec unshare --mount --propagation private -- bash -c "
      mount --bind '$state/etc-libvirt' /etc/libvirt
      mount --bind '$state/passwd' /etc/passwd
      mount --bind '$state/group' /etc/group
      umount -l /sys/fs/cgroup/unified 2>/dev/null || true
      exec tini -s -g -- bash -c '
        (while :; do /usr/sbin/virtlogd; echo \"virtlogd exited \$?: restarted\" >&2; sleep 0.5; done) &
        while :; do /usr/sbin/libvirtd; echo \"libvirtd exited \$?: restarted\" >&2; sleep 0.5; done'
    "
  ) </dev/null >"$state/libvirtd.log" 2>&1 &
  echo $! > "$state/pid"
  for _ in $(seq 100); do
    virsh -c qemu:///system list >/dev/null 2>&1 && virsh -c lxc:/// list >/dev/null 2>&1 && { echo "libvirtd: started"; exit 0; }
    sleep 0.1
  done
  echo "libvirtd did not start:"; tail -n 20 "$state/libvirtd.log"; exit 1
  ;;
stop)
  if [ -f "$state/pid" ]; then kill "$(cat "$state/pid")" 2>/dev/null || true; rm -f "$state/pid"; fi
  ;;
status)
  virsh -c qemu:///system list
  ;;
*)
  echo "usage: $0 start|stop|status" >&2; exit 2
  ;;
esac
