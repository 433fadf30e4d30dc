#!/usr/bin/env bash
# Builds hatchery-agent static for ARCH (ppc64le, s390x or x86_64): cross-compiled on
# another architecture against that architecture's libjansson.a, natively otherwise. The
# guest images (images/test-guest, images/runner) take it from here. It downloads
# nothing: the foreign libjansson-dev is installed beside the native one (Multi-Arch:
# same; tests/run.sh installs both guest architectures').
#
# usage: agent/build-static.sh ARCH OUT
#        agent/build-static.sh --version     (prints the version the agent is built with)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# The version comes from project(hatchery VERSION ...) in CMakeLists.txt, as for CMake's
# builds, and fills in the same template (include/hatchery/version.h.in).
version=$(sed -n 's/^project(hatchery VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
[ -n "$version" ] || { echo "build-static: no project(hatchery VERSION ...) in CMakeLists.txt" >&2; exit 1; }
if [ "${1:-}" = --version ]; then echo "$version"; exit 0; fi
arch=${1:?usage: build-static.sh ARCH OUT}
out=${2:?usage: build-static.sh ARCH OUT}
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
jansson=/usr/lib/$triplet/libjansson.a
if [ ! -f "$jansson" ]; then
  echo "build-static: $jansson is missing: install libjansson-dev:$deb_arch" \
    "(on another architecture: dpkg --add-architecture $deb_arch, apt-get update first)" >&2
  exit 1
fi
if [ "$(dpkg --print-architecture)" = "$deb_arch" ]; then
  gcc "${flags[@]}" "$root/agent/hatchery-agent.c" "$root/agent/confine.c" "$jansson" -o "$out"
  exit 0
fi
command -v "$triplet-gcc" >/dev/null ||
  { echo "build-static: $triplet-gcc is missing (deploy/install-deps.sh installs it)" >&2; exit 1; }
# The headers are the native package's (the same version: Multi-Arch: same requires it).
"$triplet-gcc" "${flags[@]}" "$root/agent/hatchery-agent.c" "$root/agent/confine.c" "$jansson" -o "$out"
