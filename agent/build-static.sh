#!/usr/bin/env bash
# Builds hatchery-agent static for ARCH (ppc64le, s390x or x86_64): cross-compiled on
# another architecture against the foreign libjansson.a from Debian's archive, natively
# otherwise. The guest images (images/test-guest, images/runner) take it from here.
#
# usage: agent/build-static.sh ARCH OUT [CACHE_DIR]
# CACHE_DIR (default build-images/) keeps the downloaded foreign .debs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
arch=${1:?usage: build-static.sh ARCH OUT [CACHE_DIR]}
out=${2:?usage: build-static.sh ARCH OUT [CACHE_DIR]}
cache=${3:-$root/build-images}
case "$arch" in
  ppc64le) deb_arch=ppc64el; triplet=powerpc64le-linux-gnu ;;
  s390x)   deb_arch=s390x; triplet=s390x-linux-gnu ;;
  x86_64)  deb_arch=amd64; triplet=x86_64-linux-gnu ;;
  *) echo "build-static: unknown arch $arch (ppc64le, s390x or x86_64)" >&2; exit 2 ;;
esac
flags=(-static -Os -s -std=gnu11 -Wall -Wextra -Werror -I"$root/include")
if [ "$(dpkg --print-architecture)" = "$deb_arch" ]; then
  [ -f "/usr/lib/$triplet/libjansson.a" ] || { echo "build-static: install libjansson-dev" >&2; exit 1; }
  gcc "${flags[@]}" "$root/agent/hatchery-agent.c" "/usr/lib/$triplet/libjansson.a" -o "$out"
  exit 0
fi
command -v "$triplet-gcc" >/dev/null ||
  { echo "build-static: $triplet-gcc is missing (deploy/install-deps.sh installs it)" >&2; exit 1; }
if ! dpkg --print-foreign-architectures | grep -qx "$deb_arch"; then
  dpkg --add-architecture "$deb_arch"
  apt-get update -qq >/dev/null 2>&1 || true
fi
mkdir -p "$cache/debs"
deb=$(ls -t "$cache/debs/"libjansson-dev_*_"$deb_arch".deb 2>/dev/null | head -n 1 || true)
if [ -z "$deb" ]; then
  (cd "$cache/debs" && { apt-get download -qq "libjansson-dev:$deb_arch" 2>/dev/null ||
     { apt-get update -qq >/dev/null 2>&1 || true; apt-get download -qq "libjansson-dev:$deb_arch"; }; })
  deb=$(ls -t "$cache/debs/"libjansson-dev_*_"$deb_arch".deb | head -n 1)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb -x "$deb" "$work"
"$triplet-gcc" "${flags[@]}" -I"$work/usr/include" "$root/agent/hatchery-agent.c" \
  "$work/usr/lib/$triplet/libjansson.a" -o "$out"
