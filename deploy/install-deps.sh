#!/usr/bin/env bash
# Installs every Debian package that Hatchery's build, tests, benchmarks and demo need.
# Idempotent and non-interactive: it installs only what is missing, and runs
# apt-get update at most once per call.
set -euo pipefail

packages=(
  # build
  build-essential cmake pkg-config clang clang-format libclang-rt-14-dev
  libuv1-dev libhttp-parser-dev libssl-dev libjansson-dev libsqlite3-dev libpq-dev
  libyaml-dev libcurl4-openssl-dev libvirt-dev libcmocka-dev libxml2-dev libsystemd-dev libseccomp-dev libacl1-dev libyajl-dev
  # man pages (docs/man: pandoc makes them from the docs) and the Debian packages
  pandoc debhelper lintian
  # provisioner: a real libvirtd, emulated ppc64le and s390x guests, LXC
  libvirt-daemon libvirt-daemon-driver-qemu libvirt-daemon-driver-lxc libvirt-clients
  qemu-system-ppc qemu-system-misc qemu-utils tini
  # guest images: cross compilers, foreign Debian packages, initramfs
  gcc-powerpc64le-linux-gnu gcc-s390x-linux-gnu libc6-dev-ppc64el-cross libc6-dev-s390x-cross
  cpio busybox-static file
  # the runner image recipe's testable part: a foreign Debian root
  debootstrap qemu-user-static binfmt-support
  # the production runner image: a foreign Debian root by mmdebstrap, a disk without
  # libguestfs or loop devices (mkfs.ext4 -d, qemu-img)
  mmdebstrap arch-test e2fsprogs
  # its test: a small OCI archive to preload, made without a container engine
  buildah
  # guest isolation (deploy/guest-firewall.sh) and its test's network namespace
  iptables iproute2
  # the stock-host test (tests/stock-host): its machine's PID 1 found with pgrep
  procps
  # tests (zsh and fish: the CLI's completion in each shell; valgrind: memcheck.paths)
  zsh fish sqlite3 curl openssl ca-certificates nodejs npm prometheus python3 systemd valgrind
  # the store's second backend: a PostgreSQL server the tests start (tests/postgresql)
  postgresql
  # benchmarks (nginx also the TLS and HTTP/2 front of GitHub's double in e2e.release_memory)
  wrk nginx-light
)

# Installed for this machine's architecture (or for all): a package may also be installed
# for a guest's architecture beside it (libjansson-dev:ppc64el, tests/run.sh).
native=$(dpkg --print-architecture)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status} ${Architecture}\n' "$p" 2>/dev/null |
    grep -qE "^install ok installed ($native|all)\$" || missing+=("$p")
done

# node and npm may come from outside Debian (the machine image ships them): accept those.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do
    case "$p" in nodejs|npm) ;; *) filtered+=("$p") ;; esac
  done
  missing=("${filtered[@]}")
fi

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# A mirror mid-sync fails one index of many (seen: bookworm-security's ppc64el); apt keeps
# the rest, and what is missing is then said by the install itself.
apt-get update -qq || echo "install-deps: apt-get update reported errors (above); going on with the lists it has"
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
