#!/usr/bin/env bash
# Installs the `hatchery` package as an operator would, in a clean Debian RELEASE root of
# ARCH (a foreign one runs under qemu-user), then upgrades it and purges it. The package
# must be built on RELEASE (tests/package/build-debs.sh on this machine's, cross.sh). The
# root is RELEASE's main alone, as the cross build's (cross.sh says why):
#
#   1. `apt-get install` the previous build: the hatchery user and its webhook secret are
#      made (the user in the libvirt group); both units pass `systemd-analyze verify`; the
#      smoke test (smoke.sh) runs the daemon as the hatchery user with the packaged config
#      and leaves a job in the store.
#   2. `apt-get install` this build over it, with the guest agent and the image tools
#      (hatchery-build-image's usage, man page and first errors): the config and the
#      secret are kept as they were, the store is opened (and migrated when its schema is
#      older) and still holds the job; the smoke test runs again.
#   3. `apt-get purge --autoremove`: nothing is left, compared file by file with the root
#      before step 1 (its dependencies go too, but for those that apt keeps by its own
#      rules: each must still be marked automatic, and is purged before the comparison).
#
# The previous build is this build with its version lowered (VERSION~prev): the project has
# no earlier release to upgrade from. Once one is out, pass its .deb as PREVIOUS_DEB.
#
# usage: tests/package/install-test.sh ARCH DEB_DIR [RELEASE]   (default: bookworm)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
arch=${1:?usage: install-test.sh ARCH DEB_DIR [RELEASE]}
debs=$(cd "${2:?usage: install-test.sh ARCH DEB_DIR [RELEASE]}" && pwd)
release=${3:-bookworm}
log() { echo "install-test($arch, $release): $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }
# shellcheck source=tests/package/root-mounts.sh
. "$here/root-mounts.sh"
[ "$arch" = "$(dpkg --print-architecture)" ] || "$here/../../images/enable-binfmt.sh" "$arch" ||
  fail "cannot run $arch binaries here"
deb=$(ls "$debs"/hatchery_*_"$arch".deb | head -n 1)
agents=$(ls "$debs"/hatchery-guest-agent_*_"$arch".deb 2>/dev/null | head -n 1 || true)
# The image tools (arch: all) come with the native build.
tools=$(ls "$debs"/hatchery-image-tools_*_all.deb 2>/dev/null | head -n 1 || true)
version=$(dpkg-deb -f "$deb" Version)

work=$(mktemp -d)
r=$work/root
cleanup() {
  root_unmount "$r"
  rm -rf "$work"
}
trap cleanup EXIT

t0=$SECONDS
"$here/cached-root.sh" "install-$release-$arch" "$r" --variant=apt --architectures="$arch" \
  --aptopt='Apt::Install-Recommends "false"' --include=systemd,adduser,man-db \
  "$release" "deb http://deb.debian.org/debian $release main"
log "a clean $release $arch root in $((SECONDS - t0)) s"
root_mount "$r"
cp /etc/resolv.conf "$r/etc/resolv.conf"
in_root() { chroot "$r" env DEBIAN_FRONTEND=noninteractive "$@"; }
in_root apt-get update -qq
# The libvirt group, as libvirt-daemon-system makes it on a host that runs guests: the
# package must put its user in it (and leave the group to its owner on purge).
in_root addgroup --quiet --system libvirt
# iptables, a dependency (the guest firewall), is there before, as on most hosts: its own
# dependencies' conffiles (netbase's /etc/hosts) are not the package's to purge.
in_root apt-get install -y -qq --no-install-recommends iptables >/dev/null
# So is e2fsprogs (hatchery-image-tools' mkfs.ext4), Priority: important on every Debian
# host, which autoremove never takes away.
in_root apt-get install -y -qq --no-install-recommends e2fsprogs >/dev/null

# Every file outside the package manager's own state, with its mode and owner; and the
# account files' contents. Taken before the install and after the purge.
snapshot() {
  (cd "$r" && find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./tmp -o -path ./run \
      -o -path ./var/cache -o -path ./var/lib/apt -o -path ./var/lib/dpkg -o -path ./var/log \
      -o -path ./etc/ld.so.cache -o -path ./etc/passwd- -o -path ./etc/group- -o -path ./etc/shadow- \
      -o -path ./etc/gshadow- \) -prune -o -printf '%p %m %U %G\n' | sort
   sha256sum etc/passwd etc/group etc/shadow etc/gshadow)
}
snapshot >"$work/before"
packages() { in_root dpkg-query -W -f '${Package}:${Architecture}\n' | sort; }
packages >"$work/packages-before"
[ -f "$r/var/log/hatchery" ] && fail "the clean root already has /var/log/hatchery"

# 1. The previous build.
prev=${PREVIOUS_DEB:-}
if [ -z "$prev" ]; then
  dpkg-deb -R "$deb" "$work/prev"
  sed -i "s/^Version: .*/Version: $version~prev/" "$work/prev/DEBIAN/control"
  prev=$work/hatchery_${version}~prev_$arch.deb
  dpkg-deb -Zxz -b "$work/prev" "$prev" >/dev/null
fi
mkdir -p "$r/tmp/debs"
cp "$prev" "$deb" ${agents:+"$agents"} ${tools:+"$tools"} "$r/tmp/debs/"
t0=$SECONDS
in_root apt-get install -y -qq "/tmp/debs/$(basename "$prev")" >/dev/null
log "installed $(dpkg-deb -f "$prev" Version) with apt in $((SECONDS - t0)) s"

in_root getent passwd hatchery | grep -q ':/var/lib/hatchery:/usr/sbin/nologin$' ||
  fail "no hatchery system user with home /var/lib/hatchery"
in_root id -nG hatchery | tr ' ' '\n' | grep -qx libvirt || fail "the hatchery user is not in the libvirt group"
secret_stat=$(in_root stat -c '%a %U' /etc/hatchery/webhook-secret)
[ "$secret_stat" = "600 hatchery" ] || fail "webhook-secret is $secret_stat, not 600 hatchery"
[ "$(wc -c <"$r/etc/hatchery/webhook-secret")" = 64 ] || fail "webhook-secret is not 32 random bytes in hex"
for unit in hatcheryd.service hatchery-guest-firewall.service hatchery-guest-firewall-check.service \
  hatchery-guest-firewall-check.timer; do
  out=$(in_root systemd-analyze verify "/lib/systemd/system/$unit" 2>&1) ||
    fail "systemd-analyze verify $unit: $out"
  [ -z "$out" ] || fail "systemd-analyze verify $unit says: $out"
done
log "systemd-analyze verify: every unit clean"
[ -L "$r/etc/systemd/system/multi-user.target.wants/hatcheryd.service" ] || fail "hatcheryd.service is not enabled"
[ -L "$r/etc/systemd/system/multi-user.target.wants/hatchery-guest-firewall.service" ] ||
  fail "the guest firewall is not enabled by the install (hatcheryd starts no networked guest without it)"
[ -L "$r/etc/systemd/system/timers.target.wants/hatchery-guest-firewall-check.timer" ] ||
  fail "the guest firewall's check timer is not enabled by the install"
dpkg-deb -f "$deb" Depends | tr "," "\n" | grep -qx " *iptables" || fail "the package does not depend on iptables (guest-firewall.sh needs it)"
chroot --userspec=hatchery:hatchery "$r" hatcheryd --check-config /etc/hatchery/hatchery.yaml ||
  fail "--check-config as the hatchery user"
"$here/smoke.sh" "$r" --user hatchery --send 9001
schema_before=$(sqlite3 "$r/var/lib/hatchery/hatchery.db" 'PRAGMA user_version')
config_sum=$(sha256sum <"$r/etc/hatchery/hatchery.yaml")
secret_sum=$(sha256sum <"$r/etc/hatchery/webhook-secret")

# 2. The upgrade.
t0=$SECONDS
in_root apt-get install -y -qq "/tmp/debs/$(basename "$deb")" ${agents:+"/tmp/debs/$(basename "$agents")"} \
  ${tools:+"/tmp/debs/$(basename "$tools")"} >/dev/null
log "upgraded to $version with apt in $((SECONDS - t0)) s"
[ "$(in_root dpkg-query -W -f '${Version}' hatchery)" = "$version" ] || fail "hatchery is not at $version"
[ "$(sha256sum <"$r/etc/hatchery/hatchery.yaml")" = "$config_sum" ] || fail "the upgrade changed the config"
[ "$(sha256sum <"$r/etc/hatchery/webhook-secret")" = "$secret_sum" ] || fail "the upgrade changed the secret"
"$here/smoke.sh" "$r" --user hatchery --expect 9001 --send 9003
schema_after=$(sqlite3 "$r/var/lib/hatchery/hatchery.db" 'PRAGMA user_version')
[ "$schema_after" -ge "$schema_before" ] || fail "store schema went from $schema_before to $schema_after"
log "the store: schema $schema_before before the upgrade, $schema_after after; job 9001 kept"
if [ -n "$agents" ]; then
  case "$arch" in ppc64el) guest=ppc64le ;; *) guest=$arch ;; esac
  file -b "$r/usr/lib/hatchery/agent/$guest/hatchery-agent" | grep -q 'statically linked' ||
    fail "no static agent for $guest"
  log "the agent for $guest: static, $(stat -c %s "$r/usr/lib/hatchery/agent/$guest/hatchery-agent") bytes"
fi

if [ -n "$tools" ]; then
  # The image recipe as the package installs it: its own name, its man page, and the
  # errors an operator meets first (the building itself: stock_host.trixie).
  out=$(in_root hatchery-build-image 2>&1) && fail "hatchery-build-image without arguments succeeded"
  grep -q '^usage: hatchery-build-image ' <<<"$out" || fail "hatchery-build-image's usage: $out"
  out=$(in_root runuser -u nobody -- hatchery-build-image s390x /tmp/none.tar.gz /tmp/x.qcow2 2>&1) &&
    fail "hatchery-build-image ran as nobody"
  grep -q 'must run as root' <<<"$out" || fail "hatchery-build-image as nobody: $out"
  out=$(in_root hatchery-build-image s390x /tmp/none.tar.gz /tmp/x.qcow2 2>&1) &&
    fail "hatchery-build-image built from no tarball"
  grep -q 'no runner tarball at /tmp/none.tar.gz' <<<"$out" || fail "hatchery-build-image without a tarball: $out"
  in_root man -w hatchery-build-image >/dev/null || fail "no man page hatchery-build-image(8)"
  [ -x "$r/usr/lib/hatchery/image/enable-binfmt.sh" ] || fail "no enable-binfmt.sh beside the recipe"
  log "hatchery-image-tools: hatchery-build-image and its man page installed, its first errors clear"
fi

# The man pages give installed paths (docs/man/doc-sections.lua maps the checkout's to
# them): each path of the package's own that a page names is there.
named=0
for page in 8/hatcheryd 1/hatchery 5/hatchery.yaml ${tools:+8/hatchery-build-image}; do
  text=$(in_root env MANWIDTH=2000 MANPAGER=cat man "${page%%/*}" "${page#*/}" 2>/dev/null) ||
    fail "man ${page#*/} does not render"
  for path in $(grep -oE '/usr/(lib|share/doc)/hatchery/[A-Za-z0-9_./-]*' <<<"$text" | sed -e 's/[.)]*$//' | sort -u); do
    case "$path" in *ARCH*) continue ;; esac
    [ -e "$r$path" ] || fail "man ${page#*/} names $path, which the package does not install"
    named=$((named + 1))
  done
done
[ "$named" -ge 4 ] || fail "the man pages name only $named installed paths"
log "the man pages: $named installed paths named, each one there"

# 3. The purge. An operator's image where the example config keeps them must outlive it.
mkdir -p "$r/var/lib/hatchery/images"
echo "an operator's image" >"$r/var/lib/hatchery/images/runner-ppc64le.qcow2"
in_root apt-get purge --autoremove -y -qq hatchery ${agents:+hatchery-guest-agent} \
  ${tools:+hatchery-image-tools} >/dev/null
[ -f "$r/var/lib/hatchery/images/runner-ppc64le.qcow2" ] || fail "purge deleted an operator's image"
[ ! -e "$r/var/lib/hatchery/hatchery.db" ] || fail "purge left the store"
# Nothing else of hatcheryd's is left there: a directory it made would belong to the uid
# of the user just deleted, which the next system account to take that uid would own.
left=$(cd "$r/var/lib/hatchery" && find . -mindepth 1 ! -path ./images ! -path ./images/runner-ppc64le.qcow2 | sort | tr '\n' ' ')
[ -z "$left" ] || fail "purge left in /var/lib/hatchery: $left"
rm -rf "$r/var/lib/hatchery"
# What apt keeps by its own rules although only our install brought it: what a package
# that stays recommends or suggests, and what is of Priority required (on trixie: tzdata,
# libidn2-0 for libc6's Recommends, libp11-kit0 for libsystemd-shared's Suggests, perl).
# Debian's packages, not ours, and each must still be marked as installed for a
# dependency: purged here, so that the comparison below finds anything else.
kept=$(packages | comm -13 "$work/packages-before" -)
if [ -n "$kept" ]; then
  for p in $kept; do
    in_root apt-mark showauto "$p" | grep -qx "${p%:*}" ||
      fail "$p, which the install brought, is marked as installed by hand after the purge"
  done
  log "apt kept, by its own rules, what the install brought: ${kept//$'\n'/ }"
  # shellcheck disable=SC2086
  in_root apt-get purge -y -qq $kept >/dev/null
fi
in_root getent passwd hatchery >/dev/null && fail "the hatchery user is left after purge"
in_root getent group hatchery >/dev/null && fail "the hatchery group is left after purge"
snapshot >"$work/after"
if ! diff -u "$work/before" "$work/after" >"$work/diff"; then
  cat "$work/diff" >&2
  fail "apt purge left a trace (above)"
fi
[ ! -e "$r/var/log/hatchery" ] || fail "/var/log/hatchery is left after purge"
log "purged: the root is as it was before the install, file by file"
