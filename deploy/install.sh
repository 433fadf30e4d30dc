#!/usr/bin/env bash
# Installs hatcheryd on a Power (or Z) host: packages, the binaries, a `hatchery` user in
# the `libvirt` group, /etc/hatchery with an example config, and the systemd unit.
# It never overwrites an existing config or secret. Run as root from a checkout:
#   sudo ./deploy/install.sh            then edit /etc/hatchery/hatchery.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "install.sh: run as root" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive

if command -v apt-get >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends build-essential cmake pkg-config \
    libuv1-dev libhttp-parser-dev libssl-dev libjansson-dev libsqlite3-dev libpq-dev libyaml-dev \
    libcurl4-openssl-dev libvirt-dev libxml2-dev libsystemd-dev libseccomp-dev libacl1-dev libyajl-dev libvirt-daemon-system qemu-utils >/dev/null
  case "$(uname -m)" in
    ppc64le) apt-get install -y -qq --no-install-recommends qemu-system-ppc >/dev/null ;;
    s390x) apt-get install -y -qq --no-install-recommends qemu-system-misc >/dev/null ;;
  esac
elif command -v dnf >/dev/null; then
  dnf install -y gcc make cmake pkgconf-pkg-config libuv-devel http-parser-devel openssl-devel \
    jansson-devel sqlite-devel libpq-devel libyaml-devel libcurl-devel libvirt-devel libxml2-devel systemd-devel \
    libvirt-daemon-kvm qemu-img
fi

cmake -S . -B build-install -DCMAKE_BUILD_TYPE=Release -DHATCHERY_TESTS=OFF >/dev/null
cmake --build build-install -j"$(nproc)" >/dev/null
install -m 0755 build-install/hatcheryd build-install/hatchery /usr/local/bin/
install -D -m 0644 deploy/completion/hatchery.bash /usr/share/bash-completion/completions/hatchery
install -D -m 0644 deploy/completion/_hatchery /usr/share/zsh/vendor-completions/_hatchery
install -D -m 0644 deploy/completion/hatchery.fish /usr/share/fish/vendor_completions.d/hatchery.fish

getent group libvirt >/dev/null || groupadd --system libvirt
id hatchery >/dev/null 2>&1 ||
  useradd --system --home-dir /var/lib/hatchery --shell /usr/sbin/nologin --groups libvirt hatchery
install -d -m 0750 -o root -g hatchery /etc/hatchery
[ -f /etc/hatchery/hatchery.yaml ] ||
  sed -e 's#/etc/hatchery/webhook-secret#/run/credentials/hatcheryd.service/webhook-secret#' \
      -e 's#/etc/hatchery/github-app.pem#/run/credentials/hatcheryd.service/github-app.pem#' \
      deploy/hatchery.example.yaml > /etc/hatchery/hatchery.yaml
if [ ! -f /etc/hatchery/webhook-secret ]; then
  (umask 077; openssl rand -hex 32 > /etc/hatchery/webhook-secret)
  echo "install.sh: a webhook secret was generated in /etc/hatchery/webhook-secret: give it to the GitHub App"
fi
install -m 0644 deploy/hatcheryd.service /etc/systemd/system/hatcheryd.service
# Guests must not reach this host's own services (see deploy/guest-firewall.sh); on every
# libvirt host, this one included when it runs guests.
install -d /usr/local/lib/hatchery
install -m 0755 deploy/guest-firewall.sh /usr/local/lib/hatchery/guest-firewall.sh
install -m 0644 deploy/hatchery-guest-firewall.service deploy/hatchery-guest-firewall-check.service \
  deploy/hatchery-guest-firewall-check.timer /etc/systemd/system/
systemctl daemon-reload 2>/dev/null || true
systemctl enable --now hatchery-guest-firewall.service hatchery-guest-firewall-check.timer 2>/dev/null ||
  echo "install.sh: enable hatchery-guest-firewall.service and hatchery-guest-firewall-check.timer on each libvirt host (docs/POWER-HOST.md: "Security model")"
cat <<MSG
install.sh: done. Next:
  1. create the GitHub App from deploy/github-app-manifest.json (docs/POWER-HOST.md: "Create the GitHub App")
     and save its private key as /etc/hatchery/github-app.pem (chmod 600)
  2. edit /etc/hatchery/hatchery.yaml: app_id, runner_scopes, hosts, pools
  3. hatcheryd --check-config /etc/hatchery/hatchery.yaml && systemctl enable --now hatcheryd
MSG
