#!/usr/bin/env bash
# Builds Hatchery's Debian packages for this machine's architecture (and the arch:all
# guest agents) from a clean copy of the checkout, checks them with lintian, and prints
# their sizes. The build runs debian/rules as dpkg-buildpackage does; the unit tests are
# ctest's (DEB_BUILD_OPTIONS=nocheck unless CHECK=1).
#
# usage: tests/package/build-debs.sh OUT_DIR
# Fails when lintian reports an error or a warning; every override is explained in
# debian/*.lintian-overrides.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: build-debs.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
log() { echo "build-debs: $*" >&2; }

# The version in debian/changelog is CMake's project version (the one place it is set).
cmake_version=$("$root/agent/build-static.sh" --version)
deb_version=$(cd "$root" && dpkg-parsechangelog -S Version)
[ "${deb_version%%[-~+]*}" = "$cmake_version" ] ||
  { log "debian/changelog says $deb_version, CMakeLists.txt says $cmake_version"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# What git tracks, plus what is new and not ignored: no build trees, no caches.
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -cf - -T -) |
  tar -xf - -C "$work" --one-top-level=src
options=nocheck
[ -n "${CHECK:-}" ] && options=
log "dpkg-buildpackage -b (version $deb_version${options:+, $options})"
t0=$SECONDS
if ! (cd "$work/src" && DEB_BUILD_OPTIONS=$options dpkg-buildpackage -b -us -uc >"$work/build.log" 2>&1); then
  tail -n 40 "$work/build.log" >&2
  exit 1
fi
log "built in $((SECONDS - t0)) s"
cp "$work"/*.deb "$work"/*.changes "$work"/*.buildinfo "$out/"
changes=$(ls "$out"/hatchery_"$deb_version"_*.changes)
lintian --pedantic --fail-on error,warning "$changes" | tee "$out/lintian.txt" >&2 ||
  { log "lintian: errors or warnings (above)"; exit 1; }
log "lintian: $(grep -c . "$out/lintian.txt" || true) tag(s), none an error or a warning"
for deb in "$out"/*.deb; do
  log "$(basename "$deb"): $(stat -c %s "$deb") bytes, installed $(dpkg-deb -f "$deb" Installed-Size) KiB"
done
