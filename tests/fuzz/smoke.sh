#!/usr/bin/env bash
# A short fuzz run as a test: seeds from make-corpus.mjs for the target (GitHub's example
# payloads for the webhook), then libFuzzer for FUZZ_SECONDS (default 30). Any crash, leak
# or sanitizer report fails it.
# usage: smoke.sh FUZZER TARGET   (TARGET: webhook, agent_channel, agent_parser, config, admin,
#                                   front_frames)
# The long run the README describes is the same binary with -max_total_time=600.
set -euo pipefail
fuzzer=$(realpath "$1")
target=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
NODE_PATH="$here/../node_modules" node "$here/make-corpus.mjs" "$target" "$work/corpus"
cd "$work"
rc=0
"$fuzzer" -max_total_time="${FUZZ_SECONDS:-30}" -max_len=65536 -rss_limit_mb=2048 \
  -print_final_stats=1 corpus >fuzz.log 2>&1 || rc=$?
grep -E 'stat::number_of_executed_units|stat::peak_rss|ERROR|SUMMARY|^Done' fuzz.log || true
if [ "$rc" -ne 0 ]; then
  echo "fuzz_$target exited with $rc:"; tail -n 40 fuzz.log
  exit 1
fi
# libFuzzer leaves crash-* / leak-* / timeout-* files behind on a finding.
if ls crash-* leak-* timeout-* oom-* >/dev/null 2>&1; then
  echo "fuzz_$target found a problem:"; ls crash-* leak-* timeout-* oom-* 2>/dev/null
  exit 1
fi
echo "fuzz smoke: no findings"
