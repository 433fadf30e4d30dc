#!/usr/bin/env bash
# The JIT config wiped from a release build's memory: hatcheryd and hatchery from the Debian
# package package.native built (Debian's build flags: -O2, _FORTIFY_SOURCE, hardening=+all),
# GitHub over TLS through nginx in front of Prism and the double, once over HTTP/2 and once
# over HTTP/1.1, a real LXC container as the guest.
# usage: release-memory.sh PACKAGES_DIR   (the directory package.native writes native/ in)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
arch=$(dpkg --print-architecture)
deb=$(find "${1:?usage: release-memory.sh PACKAGES_DIR}/native" -maxdepth 1 -name "hatchery_*_$arch.deb" 2>/dev/null | head -n 1)
[ -n "$deb" ] || { echo "release-memory: no hatchery_*_$arch.deb in $1/native: package.native builds it" >&2; exit 1; }
work=$(mktemp -d /tmp/hatchery-release-XXXXXX)
trap 'rm -rf "$work"' EXIT
dpkg-deb -x "$deb" "$work/pkg"
export HATCHERYD=$work/pkg/usr/sbin/hatcheryd HATCHERY_CLI=$work/pkg/usr/bin/hatchery
echo "release-memory: $(basename "$deb"), hatcheryd built with: $(dpkg-buildflags --get CFLAGS)"

# A CA of the test's own, and a certificate for 127.0.0.1 that it signed.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=hatchery-test-ca \
  -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$work/tls.key" -out "$work/tls.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' > "$work/san"
openssl x509 -req -in "$work/tls.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
  -days 1 -extfile "$work/san" -out "$work/tls.pem" 2>/dev/null
export TLS_DIR=$work

"$root/tests/libvirt/libvirtd.sh" start >/dev/null
export ROOTFS
ROOTFS=$("$root/images/test-guest/build-rootfs.sh")
"$root/tests/github/with-prism.sh" node --test --test-reporter=spec "$here/release-memory.test.mjs"
