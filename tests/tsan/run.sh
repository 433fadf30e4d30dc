#!/usr/bin/env bash
# The integration and GitHub tests again, against hatcheryd built with ThreadSanitizer
# (build dir $1, made by tests/run.sh with -DHATCHERY_TSAN=ON): libuv's workers and
# libvirt's threads against the loop. A race makes hatcheryd exit 66 at its stop, which
# every test checks, and its report is printed here.
set -euo pipefail
build=$(realpath "$1")
reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
# glib (under libvirt) hands its slices between threads through per-thread magazines TSan
# cannot see into: every hand-over would be reported. Plain malloc there, which it sees.
export G_SLICE=always-malloc
# suppressions.txt: reports that are not races, each with its reason.
export TSAN_OPTIONS="log_path=$reports/tsan second_deadlock_stack=1 suppressions=$(dirname "$(realpath "$0")")/suppressions.txt"
# github.leadership's 200 jobs and 60 s pause are the ASan pass's: here 50 jobs and 25 s
# (past a takeover's 10 to 12 s) give the lease's thread the same interleavings.
export LEADERSHIP_JOBS=50 LEADERSHIP_PAUSE_S=25
rc=0
ctest --test-dir "$build" -R '^(integration|github)\.' --output-on-failure -j1 || rc=$?
if ls "$reports"/tsan.* >/dev/null 2>&1; then
  echo "ThreadSanitizer reports:"
  cat "$reports"/tsan.*
  rc=1
fi
exit $rc
