#!/usr/bin/env bash
# The way of one job through hatcheryd, measured: how many steps (what runs for one wake-up
# of the loop or of a worker), which files each enters, how many file crossings, whether a
# step goes back and forth between two files, and the tick's widest step. hatcheryd is
# built with -finstrument-functions and tests/bench/job_way/tracer.c, and serves one
# webhook job on the s390x test guest (a cold boot) against the GitHub double; the figures
# are tests/bench/job_way/analyze.py's. REV builds another revision's hatcheryd (a git
# worktree) with this tree's tracer and driver, for a before-and-after. Asserts nothing.
# usage: tests/bench/job_way.sh [REV]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
rev=${1:-}
./deploy/install-deps.sh >/dev/null
if ! cmp -s tests/package-lock.json tests/node_modules/.package-lock.json 2>/dev/null; then
  (cd tests && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
work=$(mktemp -d /tmp/hatchery-job-way.XXXXXX)
trap 'rm -rf "$work"; [ -z "$rev" ] || git worktree remove --force "$work/src" 2>/dev/null || true' EXIT
src=$root
if [ -n "$rev" ]; then
  git worktree add --detach "$work/src" "$rev" >/dev/null 2>&1
  src=$work/src
fi
cc -O2 -g -c -o "$work/tracer.o" "$here/job_way/tracer.c"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHATCHERY_TESTS=OFF \
  -DCMAKE_C_FLAGS="-finstrument-functions -finstrument-functions-exclude-file-list=.h" \
  -DCMAKE_EXE_LINKER_FLAGS="$work/tracer.o" >/dev/null
cmake --build "$work/build" -j"$(nproc)" --target hatcheryd hatchery >/dev/null
tests/libvirt/libvirtd.sh start >/dev/null
export GUEST_s390x HATCHERYD="$work/build/hatcheryd" HATCHERY_CLI="$work/build/hatchery"
export JOB_WAY_TRACE="$work/trace" JOB_WAY_WINDOW="$work/window"
GUEST_s390x=$(images/test-guest/build.sh s390x)
tests/github/with-prism.sh node "$here/job_way/job_way.mjs"
echo "hatcheryd at $(git -C "$src" rev-parse --short HEAD)$([ -n "$rev" ] || { git diff --quiet HEAD || echo ' (and uncommitted changes)'; })"
python3 "$here/job_way/analyze.py" "$HATCHERYD" "$JOB_WAY_WINDOW" "$work"/trace.*
