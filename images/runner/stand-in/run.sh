#!/bin/bash
# Stand-in for actions/runner's run.sh: runs run-helper.sh until it returns anything but
# 2, then exits 0 (as the real one does: the Listener's return code does not get out).
dir=$(cd "$(dirname "$0")" && pwd)
while :; do
  "$dir/run-helper.sh" "$@"
  code=$?
  if [ "$code" -eq 2 ]; then
    echo "Restarting runner..."
  else
    echo "Exiting runner..."
    exit 0
  fi
done
