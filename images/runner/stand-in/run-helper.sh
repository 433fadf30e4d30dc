#!/bin/bash
# Stand-in for actions/runner's run-helper.sh: the same checks and the same handling of
# the Listener's return codes, for operators who set runner_command to run.sh.
user_id=$(id -u)
if [ "$user_id" -eq 0 ] && [ -z "${RUNNER_ALLOW_RUNASROOT:-}" ]; then
  echo "Must not run interactively with sudo"
  exit 1
fi
dir=$(cd "$(dirname "$0")" && pwd)
"$dir/bin/Runner.Listener" run "$@"
code=$?
case "$code" in
  0) echo "Runner listener exit with 0 return code, stop the service, no retry needed."; exit 0 ;;
  1) echo "Runner listener exit with terminated error, stop the service, no retry needed."; exit 0 ;;
  2) echo "Runner listener exit with retryable error, re-launch runner in 5 seconds."; sleep 5; exit 2 ;;
  3|4) echo "Runner listener exit because of updating, re-launch runner after successful update"; exit 2 ;;
  5) echo "Runner listener exit with Session Conflict error, stop the service, no retry needed."; exit 0 ;;
  *) echo "Exiting with unknown error code: $code"; exit 0 ;;
esac
