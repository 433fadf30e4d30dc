#!/usr/bin/env bash
# Builds the production runner guest image for ARCH (ppc64le or s390x):
#   OUT           a qcow2 base image: Debian bookworm with systemd, podman (+ podman-docker,
#                 crun, fuse-overlayfs), git, curl, a C toolchain, the runner's libraries
#                 (ICU, krb5, zlib), an unprivileged `runner` user, the GitHub runner in
#                 /opt/actions-runner and hatchery-agent as a unit that starts at boot;
#                 one ext4 file system on the whole disk, no partition table
#   OUT.kernel    the image's kernel and initramfs, for direct kernel boot (see below)
#   OUT.initrd
#   OUT.json      the manifest hatcheryd reads for each pool: arch, Debian release, kernel,
#                 runner and agent versions, build time, the qcow2's sha256, how it boots
#
# usage (as root; on amd64 through qemu-user-static and binfmt, or natively on ppc64le
# or s390x):
#   hatchery-build-image [--preload ARCHIVE]... [--mirror URL] [--size-mib N]
#                        [--debian-cache DIR] ARCH RUNNER_TARBALL OUT.qcow2
# (the hatchery-image-tools package's name for it; images/runner/build-image.sh in a
# checkout, which builds the agent from the checkout when hatchery-guest-agent is not
# installed)
#
#   RUNNER_TARBALL  actions-runner-linux-ARCH-VERSION.tar.gz. actions/runner is not
#                   released for ppc64le or s390x: build it from source with .NET 8 from
#                   the distribution (IBM's patches to actions/runner for linux-ppc64le
#                   and linux-s390x). images/runner/stand-in/make-tarball.sh makes a
#                   stand-in in the same layout for the tests.
#   --debian-cache  a directory keeping the Debian stage (step 1) as a tar, keyed by the
#                   arch, mirror and package list, so a rebuild for a new agent or runner
#                   skips it; for test and development machines (security updates arrive
#                   only when the key changes or the cache is emptied).
#   --preload       an OCI archive (`podman save --format oci-archive`, `skopeo copy ...
#                   oci-archive:`) loaded into the image's container storage at build
#                   time, so jobs find their build image without a pull. Repeatable.
#
# Why direct kernel boot, not a bootloader in the image: the guests are single-use and
# the image is rebuilt for every kernel update anyway, so a bootloader buys nothing and
# costs a stage (SLOF's grub on pseries, zipl on s390x) on every boot. It also needs no
# partition table, no PReP partition, no grub-install or zipl against a block device,
# and so no loop device at build time: the disk is `mkfs.ext4 -d` on a plain file.
# libvirt boots it the same way under KVM on a Power or Z host as under TCG here.
#
# Clone hygiene: /etc/machine-id is empty (made at each boot), and there is no
# /var/lib/systemd/random-seed, no SSH host key and no runner credential in the image.
# The domain gives each guest a virtio-rng, and the agent waits for the CRNG.
set -euo pipefail
# Where its files are: beside it in a checkout (images/runner/), or where the package put
# them (/usr/lib/hatchery/image/runner/, reached through /usr/sbin/hatchery-build-image).
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
root=$(cd "$here/../.." && pwd)
die() { echo "build-image: $*" >&2; exit 1; }
usage() { echo "usage: $(basename "$0") [--preload ARCHIVE]... [--mirror URL] [--size-mib N] [--debian-cache DIR] ARCH RUNNER_TARBALL OUT.qcow2" >&2; exit 2; }

preloads=()
mirror=http://deb.debian.org/debian
free_mib=2048
debian_cache=
while [ $# -gt 0 ]; do
  case "$1" in
    --preload) [ $# -ge 2 ] || usage; preloads+=("$(realpath "$2")"); shift 2 ;;
    --mirror) [ $# -ge 2 ] || usage; mirror=$2; shift 2 ;;
    --size-mib) [ $# -ge 2 ] || usage; free_mib=$2; shift 2 ;;
    --debian-cache) [ $# -ge 2 ] || usage; debian_cache=$(realpath -m "$2"); shift 2 ;;
    --) shift; break ;;
    -*) usage ;;
    *) break ;;
  esac
done
[ $# -eq 3 ] || usage
arch=$1
tarball=$(realpath "$2")
out=$(realpath -m "$3")
case "$arch" in
  ppc64le) deb_arch=ppc64el; kernel_pkg=linux-image-powerpc64le; kernel_glob='vmlinux-*'; console=hvc0 ;;
  s390x)   deb_arch=s390x; kernel_pkg=linux-image-s390x; kernel_glob='vmlinuz-*'; console=ttysclp0 ;;
  *) echo "build-image: unknown arch '$arch' (ppc64le or s390x)" >&2; usage ;;
esac
[ "$(id -u)" -eq 0 ] || die "must run as root (it chroots into the new root)"
for tool in mmdebstrap mkfs.ext4 qemu-img sha256sum; do
  command -v "$tool" >/dev/null || die "$tool is missing (deploy/install-deps.sh installs it)"
done
[ -f "$tarball" ] || die "no runner tarball at $tarball"
[ -x "/usr/lib/hatchery/agent/$arch/hatchery-agent" ] || [ -x "$root/agent/build-static.sh" ] ||
  die "no agent for $arch guests: install hatchery-guest-agent:$deb_arch (on another architecture, first: dpkg --add-architecture $deb_arch)"
version=$(basename "$tarball" | sed -n "s/^actions-runner-linux-$arch-\([0-9][0-9.]*[0-9]\)\.tar\.gz\$/\1/p")
[ -n "$version" ] || die "$tarball is not named actions-runner-linux-$arch-VERSION.tar.gz"
listing=$(tar -tzf "$tarball") || die "$tarball is not a gzip tar archive"
grep -qE '^(\./)?bin/Runner\.Listener$' <<<"$listing" || die "$tarball has no bin/Runner.Listener"
grep -qE '^(\./)?run\.sh$' <<<"$listing" || die "$tarball has no run.sh"
# A tarball taken from a configured runner carries its registration: every guest would
# share it. A JIT runner is configured by its JIT config alone.
if grep -qE '^(\./)?\.(runner|credentials|credentials_rsaparams)$' <<<"$listing"; then
  die "$tarball holds a configured runner's credentials (.runner/.credentials): use a clean release tarball"
fi
[ "${#preloads[@]}" -eq 0 ] || command -v buildah >/dev/null ||
  die "buildah is missing: --preload needs it (deploy/install-deps.sh installs it)"
for p in "${preloads[@]}"; do
  [ -f "$p" ] || die "no preload archive at $p"
  tar -tf "$p" index.json >/dev/null 2>&1 || die "$p is not an OCI archive (no index.json)"
done
if [ "$(dpkg --print-architecture)" != "$deb_arch" ]; then
  command -v arch-test >/dev/null || die "arch-test is missing (deploy/install-deps.sh installs it)"
  "$here/../enable-binfmt.sh" "$deb_arch" ||
    die "this machine cannot run $deb_arch binaries (enable-binfmt.sh, above)"
fi
log() { echo "build-image($arch): $*" >&2; }

work=$(mktemp -d "${TMPDIR:-/var/tmp}/hatchery-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs="$work/root"
started=$(date +%s)

# 1. Debian bookworm for ARCH: mmdebstrap resolves with apt and runs the foreign
#    maintainer scripts under qemu-user. No recommends: every package is named here.
packages=(
  systemd-sysv systemd-resolved udev dbus dbus-user-session libpam-systemd "$kernel_pkg" initramfs-tools
  podman podman-docker crun fuse-overlayfs uidmap slirp4netns
  git curl ca-certificates gcc libc6-dev make iproute2 procps
  libicu72 libkrb5-3 zlib1g liblttng-ust1
)
mmdebstrap_args=(--mode=root --arch="$deb_arch" --variant=apt --format=directory
  --include="$(IFS=,; echo "${packages[*]}")"
  --aptopt='Apt::Install-Recommends "false"'
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
  --essential-hook="mkdir -p \"\$1/etc/initramfs-tools/conf.d\" \"\$1/etc/initramfs-tools/hooks\" && cp '$here/initramfs/hatchery.conf' \"\$1/etc/initramfs-tools/conf.d/hatchery\" && cp '$here/initramfs/hatchery-modules' \"\$1/etc/initramfs-tools/hooks/hatchery-modules\""
  bookworm "$rootfs" "$mirror")
debian_tar=
if [ -n "$debian_cache" ]; then
  debian_key=$( { printf '%s\n' "${mmdebstrap_args[@]}" | sed -e "s|$rootfs|ROOT|g" -e "s|$here|HERE|g"
                  cat "$here"/initramfs/*; } | sha256sum | cut -c1-16)
  debian_tar="$debian_cache/debian-$arch-$debian_key.tar"
fi
if [ -n "$debian_tar" ] && [ -f "$debian_tar" ]; then
  log "Debian root from the cache ($debian_tar)"
  mkdir -p "$rootfs"
  tar -C "$rootfs" --numeric-owner --xattrs --xattrs-include='*' -xpf "$debian_tar"
else
  log "Debian root (mmdebstrap)"
  mmdebstrap "${mmdebstrap_args[@]}" >"$work/mmdebstrap.log" 2>&1 ||
    { tail -n 30 "$work/mmdebstrap.log" >&2; die "mmdebstrap failed"; }
  if [ -n "$debian_tar" ]; then
    mkdir -p "$debian_cache"
    rm -f "$debian_cache/debian-$arch-"*.tar
    tar -C "$rootfs" --numeric-owner --xattrs --xattrs-include='*' -cf "$debian_tar.tmp" .
    mv "$debian_tar.tmp" "$debian_tar"
  fi
fi
kernel=$(cd "$rootfs/boot" && ls $kernel_glob | head -n 1)
kernel_version=${kernel#vmlinu?-}
[ -f "$rootfs/boot/initrd.img-$kernel_version" ] || die "the kernel package made no initramfs"

# 2. The runner's user: unprivileged, with subordinate ids for rootless podman, and a
#    lingering user manager (its runtime directory and bus) started at boot.
log "runner user, runner, agent, units"
chroot "$rootfs" useradd --create-home --uid 1000 --user-group --shell /bin/bash runner
grep -q '^runner:' "$rootfs/etc/subuid" ||
  chroot "$rootfs" usermod --add-subuids 100000-165535 --add-subgids 100000-165535 runner
mkdir -p "$rootfs/var/lib/systemd/linger"
touch "$rootfs/var/lib/systemd/linger/runner"

# 3. The GitHub runner, owned by its user (it updates itself in place), and its version.
mkdir -p "$rootfs/opt/actions-runner"
tar -xzf "$tarball" -C "$rootfs/opt/actions-runner" --no-same-owner
echo "$version" >"$rootfs/opt/actions-runner/RUNNER_VERSION"
chroot "$rootfs" chown -R runner:runner /opt/actions-runner

# 4. hatchery-agent, static, as a unit that starts at boot and powers off after the job.
#    The installed hatchery-guest-agent's (its version is the package's); in a checkout
#    without it, or with HATCHERY_AGENT_FROM_SOURCE set, built from the checkout.
agent_src=/usr/lib/hatchery/agent/$arch/hatchery-agent
if [ -x "$agent_src" ] && [ -z "${HATCHERY_AGENT_FROM_SOURCE:-}" ]; then
  install -m 0755 "$agent_src" "$rootfs/usr/local/bin/hatchery-agent"
  agent_version=$(dpkg-query -W -f '${source:Upstream-Version}' "hatchery-guest-agent:$deb_arch" 2>/dev/null) ||
    die "$agent_src belongs to no installed hatchery-guest-agent:$deb_arch"
elif [ -x "$root/agent/build-static.sh" ]; then
  "$root/agent/build-static.sh" "$arch" "$rootfs/usr/local/bin/hatchery-agent"
  agent_version=$("$root/agent/build-static.sh" --version)
else
  die "no agent for $arch guests: install hatchery-guest-agent:$deb_arch (on another architecture, first: dpkg --add-architecture $deb_arch)"
fi
install -m 0644 "$here/hatchery-agent.service" "$rootfs/etc/systemd/system/hatchery-agent.service"
chroot "$rootfs" systemctl enable hatchery-agent.service systemd-networkd.service \
  systemd-resolved.service >/dev/null 2>&1

# 5. Boot and network: the whole disk is the root file system, grown at boot to the
#    guest's disk size; DHCP on every wired interface, waited for at most 30 s (a pool
#    with network: none must not wait the default two minutes).
cat >"$rootfs/etc/fstab" <<'FSTAB'
/dev/vda / ext4 rw,discard,errors=remount-ro,x-systemd.growfs 0 1
FSTAB
cat >"$rootfs/etc/systemd/network/80-hatchery-dhcp.network" <<'NET'
[Match]
Name=en* eth*

[Network]
DHCP=yes
NET
mkdir -p "$rootfs/etc/systemd/system/systemd-networkd-wait-online.service.d"
cat >"$rootfs/etc/systemd/system/systemd-networkd-wait-online.service.d/timeout.conf" <<'WAIT'
[Service]
ExecStart=
ExecStart=/lib/systemd/systemd-networkd-wait-online --any --timeout=30
WAIT
ln -sf /run/systemd/resolve/stub-resolv.conf "$rootfs/etc/resolv.conf"
echo hatchery-runner >"$rootfs/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\thatchery-runner\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$rootfs/etc/hosts"
# Nothing logs in on the console, and no timer of a long-lived machine runs in a guest
# that lives for one job.
for unit in serial-getty@.service getty@.service console-getty.service apt-daily.timer \
    apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
    podman.service podman.socket podman-auto-update.service podman-auto-update.timer \
    podman-restart.service podman-kube@.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
ln -sf /lib/systemd/system/multi-user.target "$rootfs/etc/systemd/system/default.target"
# podman-docker's `docker` says on every call that it is podman, unless told not to.
mkdir -p "$rootfs/etc/containers"
touch "$rootfs/etc/containers/nodocker"

# 6. Build images baked in (mission: no pull per job), in a read-only store that every
#    user's podman reads as an additional image store, its files owned as the runner's
#    rootless podman sees them. Written by this machine's buildah (the same
#    containers/storage as the guest's podman), so no emulation is involved.
preloaded=()
if [ "${#preloads[@]}" -gt 0 ]; then
  log "preloading ${#preloads[@]} image archive(s)"
  store=/var/lib/containers/preload
  mkdir -p "$rootfs$store"
  for p in "${preloads[@]}"; do
    buildah --root "$rootfs$store" --runroot "$work/preload-run" --storage-driver overlay \
      pull -q "oci-archive:$p" >"$work/preload.log" 2>&1 ||
      { cat "$work/preload.log" >&2; die "cannot load $p"; }
  done
  mapfile -t preloaded < <(buildah --root "$rootfs$store" --runroot "$work/preload-run" \
    --storage-driver overlay images --noheading --format '{{.Name}}:{{.Tag}}' 2>/dev/null)
  rm -rf "$rootfs$store/mounts" "$rootfs$store/tmp"
  # The jobs' podman is the runner's, rootless: in its user namespace, container root is
  # the runner (uid 1000) and id N its subordinate 100000+N-1. Files left owned by this
  # machine's root would be nobody's there, and a RUN step or a `docker run` could not
  # write even /usr. So the layers' owners are shifted as the runner's own pull would
  # have left them (set-id bits kept; a link itself, not what it points at; ids past 65536
  # left as they are).
  find "$rootfs$store"/overlay/*/diff -print0 | perl -0 -MPOSIX -ne '
    chomp;
    sub shifted { my $id = shift; $id == 0 ? 1000 : $id <= 65536 ? 100000 + $id - 1 : $id }
    my @st = lstat($_) or die "lstat $_: $!\n";
    if (-l _) { POSIX::lchown(shifted($st[4]), shifted($st[5]), $_) or die "lchown $_: $!\n"; next }
    chown(shifted($st[4]), shifted($st[5]), $_) or die "chown $_: $!\n";
    chmod($st[2] & 07777, $_) or die "chmod $_: $!\n";' ||
    die "cannot give the preloaded images' files to the runner's user namespace"
  chmod -R a+rX "$rootfs$store"
  # Root's podman reads /etc/containers; a rootless podman reads only its user's file.
  mkdir -p "$rootfs/home/runner/.config/containers"
  for conf in "$rootfs/etc/containers/storage.conf" "$rootfs/home/runner/.config/containers/storage.conf"; do
    cat >"$conf" <<CONF
# The build images baked into this runner image (build-image.sh --preload): read-only,
# shared by every user's podman, so a job finds them without a pull.
[storage]
driver = "overlay"

[storage.options]
additionalimagestores = ["$store"]
CONF
  done
  chroot "$rootfs" chown -R runner:runner /home/runner/.config
fi

# 7. Clone hygiene: every guest made from this image is distinct and starts with no
#    secret. Checked below, not only done.
: >"$rootfs/etc/machine-id"
rm -f "$rootfs/var/lib/dbus/machine-id" "$rootfs/var/lib/systemd/random-seed" \
  "$rootfs"/etc/ssh/ssh_host_* "$rootfs/var/lib/systemd/credential.secret"
ln -sf /etc/machine-id "$rootfs/var/lib/dbus/machine-id"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
  "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/* "$rootfs"/root/.bash_history "$rootfs"/tmp/* \
  "$rootfs"/var/tmp/*
[ ! -s "$rootfs/etc/machine-id" ] || die "clone hygiene: /etc/machine-id is not empty"
[ ! -e "$rootfs/var/lib/systemd/random-seed" ] || die "clone hygiene: a random seed is left"
! ls "$rootfs"/etc/ssh/ssh_host_* >/dev/null 2>&1 || die "clone hygiene: SSH host keys are left"
! ls -a "$rootfs/opt/actions-runner" | grep -qE '^\.(runner|credentials)' ||
  die "clone hygiene: runner credentials are left"

# 8. The disk, without libguestfs or a loop device: ext4 made from the directory into a
#    sparse file, then qcow2. The guest's overlay is larger; x-systemd.growfs grows the
#    file system to it at boot.
log "disk"
cp "$rootfs/boot/$kernel" "$work/kernel"
cp "$rootfs/boot/initrd.img-$kernel_version" "$work/initrd"
used_mib=$(du -sm --apparent-size "$rootfs" | cut -f1)
size_mib=$((used_mib * 12 / 10 + free_mib))
truncate -s "${size_mib}M" "$work/root.raw"
mkfs.ext4 -q -F -L hatchery-root -E root_owner=0:0 -d "$rootfs" "$work/root.raw"
qemu-img convert -O qcow2 "$work/root.raw" "$work/image.qcow2"
sha=$(sha256sum "$work/image.qcow2" | cut -d' ' -f1)

preloaded_list=$(IFS=,; echo "${preloaded[*]:-}")
built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)
base=$(basename "$out")
cat >"$work/manifest.json" <<JSON
{
  "arch": "$arch",
  "debian": "bookworm",
  "kernel_version": "$kernel_version",
  "runner_version": "$version",
  "agent_version": "$agent_version",
  "built_at": "$built_at",
  "sha256": "$sha",
  "size_bytes": $(stat -c %s "$work/image.qcow2"),
  "preloaded": "$preloaded_list",
  "boot": {
    "kernel": "$base.kernel",
    "initrd": "$base.initrd",
    "cmdline": "root=/dev/vda rw console=$console"
  }
}
JSON
mkdir -p "$(dirname "$out")"
# The manifest goes last: a reader that sees it sees a complete image.
rm -f "$out.json"
mv "$work/image.qcow2" "$out"
mv "$work/kernel" "$out.kernel"
mv "$work/initrd" "$out.initrd"
mv "$work/manifest.json" "$out.json"
log "built $out in $(($(date +%s) - started)) s: Debian bookworm, kernel $kernel_version, runner $version, $(du -m "$out" | cut -f1) MiB"
