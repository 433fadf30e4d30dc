#!/usr/bin/env bash
# Uninitialised memory and lost blocks, found by a tool: Valgrind's memcheck over a build
# without sanitizers (build dir $1, made by tests/run.sh as build-memcheck), on the paths
# that read what an operator or a client wrote:
#   - the config, its checks and the image manifests (unit.config's tests), the guest
#     isolation checks, libvirt's capabilities and network definitions, the webhook parser;
#   - hatcheryd itself: started on a config whose pools have manifests with and without
#     boot files, every CLI view asked in both forms (the admin socket's handlers and the
#     CLI's printing), a webhook delivery, and a stop.
# Any memcheck error (an uninitialised value used, a bad read or write, a block definitely
# lost) fails the test, with memcheck's report.
set -euo pipefail
build=$(realpath "${1:?usage: run.sh BUILD_DIR}")
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
pid=
cleanup() { [ -z "$pid" ] || kill -9 "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
vg=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
    --show-leak-kinds=definite --track-origins=yes --num-callers=40
    --suppressions="$here/suppressions.supp")

rc=0
for t in test_config test_guest_isolation test_host_caps test_network_kind test_webhook; do
  echo "== memcheck: $t"
  TEST_DATA="$root/tests/unit/data" HATCHERY_SOURCE_DIR="$root" HATCHERY_MAN_DIR="$build/man" \
    "${vg[@]}" "$build/tests/$t" >"$work/$t.log" 2>&1 || { rc=1; cat "$work/$t.log"; echo "memcheck: $t failed"; }
done

echo "== memcheck: hatcheryd, its admin socket and the CLI"
mkdir -p "$work/state"
printf 'memcheck-webhook-secret-5d1e\n' >"$work/secret"
chmod 600 "$work/secret"
touch "$work/with-boot.qcow2" "$work/without-boot.qcow2" "$work/with-boot.qcow2.kernel"
printf '{"arch": "ppc64le", "runner_version": "2.330.0", "agent_version": "0.3.0", "boot": {"kernel": "with-boot.qcow2.kernel", "cmdline": "console=hvc0"}}\n' >"$work/with-boot.qcow2.json"
printf '{"arch": "s390x", "runner_version": "2.330.0", "agent_version": "0.3.0"}\n' >"$work/without-boot.qcow2.json"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/hatchery.yaml" <<CONF
controller_id: memcheck
listen: 127.0.0.1:$port
state_dir: $work/state
admin_socket: $work/admin.sock
webhook_secret_file: $work/secret
hosts:
  - name: host-a
    uri: test:///default
    vcpus: 16
    memory_mib: 32768
    max_guests: 8
pools:
  - name: ppc
    labels: [linux.ppc64le]
    arch: ppc64le
    image: $work/with-boot.qcow2
    max_runners: 1
    hosts: [host-a]
  - name: z
    labels: [linux.s390x]
    arch: s390x
    image: $work/without-boot.qcow2
    network: user
    max_runners: 1
    hosts: [host-a]
CONF
"$build/hatcheryd" --check-config "$work/hatchery.yaml" >/dev/null
"${vg[@]}" --log-file="$work/hatcheryd.vg" "$build/hatcheryd" --config "$work/hatchery.yaml" \
  --allow-root memcheck >"$work/hatcheryd.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  grep -q 'event=daemon.ready' "$work/hatcheryd.log" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
grep -q 'event=daemon.ready' "$work/hatcheryd.log" || { cat "$work/hatcheryd.log" "$work/hatcheryd.vg"; echo "memcheck: hatcheryd did not start"; exit 1; }
cli() { "${vg[@]}" "$build/hatchery" --socket "$work/admin.sock" "$@" >>"$work/cli.log" 2>&1 || { rc=1; echo "memcheck: hatchery $* failed"; tail -n 40 "$work/cli.log"; }; }
for view in pools hosts jobs "runners --all" capacity github; do
  # shellcheck disable=SC2086
  cli $view
  # shellcheck disable=SC2086
  cli --json $view
done
# A signed delivery and a badly signed one, through the front to the core.
body='{"action":"queued","workflow_job":{"id":77,"run_id":1,"labels":["linux.s390x"]},"repository":{"full_name":"pytorch/pytorch"}}'
sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "memcheck-webhook-secret-5d1e" -r | cut -d ' ' -f 1)
curl -s -o /dev/null -w '%{http_code}\n' -H 'X-GitHub-Event: workflow_job' -H 'X-GitHub-Delivery: 11111111-2222-3333-4444-555555555555' \
  -H "X-Hub-Signature-256: sha256=$sig" -H 'Content-Type: application/json' --data "$body" "http://127.0.0.1:$port/webhook" >>"$work/cli.log"
curl -s -o /dev/null -w '%{http_code}\n' -H 'X-GitHub-Event: workflow_job' -H 'X-GitHub-Delivery: 11111111-2222-3333-4444-555555555556' \
  -H 'X-Hub-Signature-256: sha256=00' --data "$body" "http://127.0.0.1:$port/webhook" >>"$work/cli.log"
cli jobs
cli --json jobs
kill -TERM "$pid"
code=0
wait "$pid" || code=$?
pid=
# (Its log also holds memcheck's notes on the seccomp call it does not know, for the front:
# the exit code says whether there was an error.)
if [ "$code" -ne 0 ]; then
  echo "memcheck: hatcheryd exited $code"
  cat "$work/hatcheryd.vg"
  tail -n 20 "$work/hatcheryd.log"
  rc=1
fi
grep -q '^202$' "$work/cli.log" || { echo "memcheck: the signed delivery was not taken"; rc=1; }
[ "$rc" -eq 0 ] && echo "memcheck: no error"
exit "$rc"
