#!/usr/bin/env bash
# A clean Debian root made by mmdebstrap, unpacked into DIR, from a tarball cached under
# $HATCHERY_ROOT_CACHE (default /var/cache/hatchery/package-roots) so that the next run
# unpacks it in seconds instead of resolving and unpacking a few hundred packages again.
#
# The tarball is keyed by NAME, mmdebstrap's arguments and the ISO week: a change to the
# package list makes a new one, and the archive's updates reach the roots within a week.
# NAME's older tarballs are deleted when a new one is made. A new machine (empty cache)
# runs mmdebstrap once, as before.
#
# usage: tests/package/cached-root.sh NAME DIR MMDEBSTRAP_ARGS...
#        tests/package/cached-root.sh --tarball NAME MMDEBSTRAP_ARGS...
#   MMDEBSTRAP_ARGS: its options (each --name=value), the suite and the mirrors; the
#   format and the target are this script's. E.g.
#   --variant=apt --architectures=ppc64el --include=systemd bookworm "deb http://… main"
#   With --tarball, the root is made (or found) and the tarball's path printed, not unpacked.
set -euo pipefail
usage="usage: cached-root.sh NAME DIR MMDEBSTRAP_ARGS... | --tarball NAME MMDEBSTRAP_ARGS..."
if [ "${1:-}" = --tarball ]; then
  name=${2:?$usage}
  dir=
  shift 2
else
  name=${1:?$usage}
  dir=${2:?$usage}
  shift 2
fi
[ $# -gt 0 ] || { echo "cached-root.sh: no mmdebstrap arguments" >&2; exit 2; }
cache=${HATCHERY_ROOT_CACHE:-/var/cache/hatchery/package-roots}
mkdir -p "$cache"
key=$( { printf '%s\n' "$@"; date -u +%G-W%V; } | sha256sum | cut -c1-16)
tarball=$cache/$name-$key.tar
if [ ! -f "$tarball" ]; then
  t0=$SECONDS
  # mmdebstrap [OPTIONS...] SUITE TARGET [MIRROR...]: the target goes after the suite.
  options=()
  while [ $# -gt 0 ] && [[ $1 == --* ]]; do options+=("$1"); shift; done
  suite=${1:?cached-root.sh: no suite after the options}
  shift
  # Its output goes to stderr: with --tarball, stdout is the path alone.
  mmdebstrap --quiet --mode=root --format=tar "${options[@]}" "$suite" "$tarball.new.$$" "$@" >&2 ||
    { rm -f "$tarball.new.$$"; exit 1; }
  mv "$tarball.new.$$" "$tarball"
  find "$cache" -maxdepth 1 -name "$name-*.tar" ! -name "$(basename "$tarball")" -delete
  echo "cached-root: a clean $name root in $((SECONDS - t0)) s ($(du -h "$tarball" | cut -f1))" >&2
fi
if [ -z "$dir" ]; then
  echo "$tarball"
  exit 0
fi
mkdir -p "$dir"
tar -xpf "$tarball" --numeric-owner -C "$dir"
