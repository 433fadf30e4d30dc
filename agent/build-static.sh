#!/usr/bin/env bash
# Builds hatchery-agent static for ARCH (ppc64le, s390x or x86_64): cross-compiled on
# another architecture against the foreign libjansson.a from Debian's archive, natively
# otherwise. The guest images (images/test-guest, images/runner) take it from here.
#
# usage: agent/build-static.sh ARCH OUT [CACHE_DIR]
#        agent/build-static.sh --version     (prints the version the agent is built with)
# CACHE_DIR (default build-images/) keeps the downloaded foreign .debs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# The version comes from project(hatchery VERSION ...) in CMakeLists.txt, as for CMake's
# builds, and fills in the same template (include/hatchery/version.h.in).
version=$(sed -n 's/^project(hatchery VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
[ -n "$version" ] || { echo "build-static: no project(hatchery VERSION ...) in CMakeLists.txt" >&2; exit 1; }
if [ "${1:-}" = --version ]; then echo "$version"; exit 0; fi
arch=${1:?usage: build-static.sh ARCH OUT [CACHE_DIR]}
out=${2:?usage: build-static.sh ARCH OUT [CACHE_DIR]}
cache=${3:-$root/build-images}
case "$arch" in
  ppc64le) deb_arch=ppc64el; triplet=powerpc64le-linux-gnu ;;
  s390x)   deb_arch=s390x; triplet=s390x-linux-gnu ;;
  x86_64)  deb_arch=amd64; triplet=x86_64-linux-gnu ;;
  *) echo "build-static: unknown arch $arch (ppc64le, s390x or x86_64)" >&2; exit 2 ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/generated/hatchery"
sed "s/@PROJECT_VERSION@/$version/" "$root/include/hatchery/version.h.in" >"$work/generated/hatchery/version.h"
flags=(-static -Os -s -std=gnu11 -Wall -Wextra -Werror -I"$root/include" -I"$work/generated")
if [ "$(dpkg --print-architecture)" = "$deb_arch" ]; then
  [ -f "/usr/lib/$triplet/libjansson.a" ] || { echo "build-static: install libjansson-dev" >&2; exit 1; }
  gcc "${flags[@]}" "$root/agent/hatchery-agent.c" "$root/agent/confine.c" "/usr/lib/$triplet/libjansson.a" -o "$out"
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
dpkg-deb -x "$deb" "$work/jansson"
"$triplet-gcc" "${flags[@]}" -I"$work/jansson/usr/include" "$root/agent/hatchery-agent.c" "$root/agent/confine.c" \
  "$work/jansson/usr/lib/$triplet/libjansson.a" -o "$out"
