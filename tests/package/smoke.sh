#!/usr/bin/env bash
# The controller's smoke test on its own architecture: hatcheryd and the CLI inside a
# Debian root of any architecture (a foreign one runs under qemu-user through binfmt),
# on a private loopback (a network namespace of its own).
#
#   1. `hatcheryd --check-config` accepts the config;
#   2. hatcheryd starts and answers /healthz;
#   3. a signed workflow_job (GitHub's example payload, tests/tools/send-workflow-job.mjs)
#      gets its 202, a badly signed one its 401;
#   4. the CLI reads the job back, and every job of an earlier run (--expect);
#   5. hatcheryd stops on SIGTERM with exit 0, starts again on the same store, and the
#      jobs are still there.
#
# usage: smoke.sh ROOT [--daemon PATH] [--cli PATH] [--user NAME] [--send JOB_ID]
#                 [--expect JOB_ID]...
# PATHs are inside ROOT. The config is the package's (debian/hatchery.yaml) at its place,
# /etc/hatchery/hatchery.yaml, with its secret in /etc/hatchery/webhook-secret.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root_dir=$(cd "$here/../.." && pwd)
target=${1:?usage: smoke.sh ROOT [options]}
shift
config=/etc/hatchery/hatchery.yaml
secret_file=$target/etc/hatchery/webhook-secret
socket=/run/hatchery/admin.sock
state_dir=/var/lib/hatchery
daemon=/usr/sbin/hatcheryd cli=/usr/bin/hatchery user=root send= expect=()
while [ $# -gt 0 ]; do
  case "$1" in
    --daemon) daemon=$2; shift 2 ;;
    --cli) cli=$2; shift 2 ;;
    --user) user=$2; shift 2 ;;
    --send) send=$2; shift 2 ;;
    --expect) expect+=("$2"); shift 2 ;;
    *) echo "smoke.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

# Into a network namespace of our own, once: 127.0.0.1:8080 is ours alone there.
if [ -z "${HATCHERY_SMOKE_NETNS:-}" ]; then
  exec unshare --net -- env HATCHERY_SMOKE_NETNS=1 "$0" "$target" --daemon "$daemon" \
    --cli "$cli" --user "$user" ${send:+--send "$send"} $(for j in "${expect[@]}"; do printf -- '--expect %s ' "$j"; done)
fi
ip link set lo up

label=$(chroot "$target" dpkg --print-architecture)
log() { echo "smoke($label): $*" >&2; }
fail() { log "FAILED: $*"; [ -f "$target/tmp/hatcheryd.log" ] && tail -n 20 "$target/tmp/hatcheryd.log" >&2; exit 1; }
in_root() { chroot --userspec="$user:$user" "$target" "$@"; }

# What systemd's StateDirectory= and RuntimeDirectory= would make.
chroot "$target" install -d -m 0700 -o "$user" -g "$user" "$state_dir"
chroot "$target" install -d -m 0750 -o "$user" -g "$user" "$(dirname "$socket")"

in_root "$daemon" --check-config "$config" >/dev/null || fail "--check-config refused $config"
log "--check-config: OK"

pid=
start() {
  # Not through in_root: $! must be hatcheryd itself, not a subshell.
  # hatcheryd refuses root unless told why.
  local root_args=()
  [ "$user" != root ] || root_args=(--allow-root "the smoke test runs it in a throwaway root")
  chroot --userspec="$user:$user" "$target" "$daemon" --config "$config" "${root_args[@]}" >>"$target/tmp/hatcheryd.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    curl -fsS -o /dev/null http://127.0.0.1:8080/healthz 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || fail "hatcheryd exited at start"
    sleep 0.1
  done
  fail "no /healthz in 60 s"
}
stop() {
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  [ "$rc" = 0 ] || fail "hatcheryd exited $rc on SIGTERM"
}
jobs_listed() { in_root "$cli" --socket "$socket" --json jobs | node -e '
  let s = ""; process.stdin.on("data", (d) => { s += d; }).on("end", () => {
    for (const j of JSON.parse(s).jobs) console.log(j.id);
  });'; }
expect_jobs() {
  local listed
  listed=$(jobs_listed) || fail "hatchery --json jobs failed"
  for j in "$@"; do
    grep -qx "$j" <<<"$listed" || fail "job $j is not in hatchery jobs (has: $(echo $listed))"
  done
}

start
log "hatcheryd $(in_root "$daemon" --version | cut -d' ' -f2) answers /healthz"
if [ -n "$send" ]; then
  export NODE_PATH=$root_dir/tests/node_modules
  answer=$(node "$root_dir/tests/tools/send-workflow-job.mjs" http://127.0.0.1:8080/webhook "$secret_file" \
             queued "$send" linux.ppc64le || true)
  [[ $answer == *"-> 202 "* ]] || fail "a signed workflow_job: $answer"
  bad=$(mktemp); echo not-the-secret >"$bad"
  answer=$(node "$root_dir/tests/tools/send-workflow-job.mjs" http://127.0.0.1:8080/webhook "$bad" \
             queued $((send + 1)) linux.ppc64le || true)
  rm -f "$bad"
  [[ $answer == *"-> 401 "* ]] || fail "a badly signed delivery: $answer"
  log "signed delivery: 202; badly signed: 401"
  expect+=("$send")
fi
expect_jobs "${expect[@]}"
log "the CLI reads back job(s) ${expect[*]}"
stop
start
expect_jobs "${expect[@]}"
stop
log "restarted on the same store: job(s) ${expect[*]} still there; exit 0 on SIGTERM"
