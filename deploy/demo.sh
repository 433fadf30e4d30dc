#!/usr/bin/env bash
# The demo: hatcheryd receives a signed `workflow_job` for `linux.ppc64le` and records the
# job's life (queued -> in_progress -> completed), while `hatchery capacity` shows the pool.
# Guest provisioning (a ppc64le VM per job) lands with the provisioner; until then this
# demo stops at intake. It installs what it needs, runs on loopback and cleans up.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "installing dependencies and building"
./deploy/install-deps.sh
[ -d tests/node_modules/@octokit/webhooks-examples ] || (cd tests && npm ci --no-audit --no-fund --loglevel=error)
cmake -S . -B build -DHATCHERY_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null

work=$(mktemp -d /tmp/hatchery-demo-XXXXXX)
cleanup() {
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

port=$(node -e 's=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > "$work/webhook-secret"
chmod 600 "$work/webhook-secret"
sed -e "s#127.0.0.1:8080#127.0.0.1:$port#" \
    -e "s#/var/lib/hatchery\$#$work/state#" \
    -e "s#/run/hatchery/admin.sock#$work/admin.sock#" \
    -e "s#/etc/hatchery/webhook-secret#$work/webhook-secret#" \
    -e '/^github:/,/^$/d' \
    deploy/hatchery.example.yaml > "$work/hatchery.yaml"

step "checking the configuration (deploy/hatchery.example.yaml: paths moved to $work, no github section: GitHub cannot be reached from here)"
build/hatcheryd --check-config "$work/hatchery.yaml"

step "starting hatcheryd on 127.0.0.1:$port"
build/hatcheryd --config "$work/hatchery.yaml" 2> >(sed -u 's/^/    hatcheryd: /' >&2) &
pid=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
cli() { build/hatchery --socket "$work/admin.sock" "$@"; }

step "hatchery capacity (before)"
cli capacity

# GitHub's own example delivery, relabelled for the ppc64le pool and signed the way GitHub
# signs (octokit's sign()).
send() { # action [runner]
  printf '    '
  node tests/tools/send-workflow-job.mjs "http://127.0.0.1:$port/webhook" "$work/webhook-secret" \
    "$1" 24100000001 linux.ppc64le ${2:+"$2"}
}

step "GitHub sends workflow_job queued (runs-on: linux.ppc64le)"
send queued
cli capacity
step "a tampered delivery is refused"
curl -s -o /dev/null -w '    POST /webhook with a bad signature -> %{http_code}\n' -X POST \
  -H 'X-GitHub-Event: workflow_job' -H 'X-GitHub-Delivery: forged' \
  -H 'X-Hub-Signature-256: sha256=0000000000000000000000000000000000000000000000000000000000000000' \
  --data '{"action":"queued"}' "http://127.0.0.1:$port/webhook"

step "the runner takes the job: workflow_job in_progress"
send in_progress p10-ci-linux.ppc64le-1
cli jobs

step "the job ends: workflow_job completed"
send completed p10-ci-linux.ppc64le-1
cli jobs
step "hatchery capacity (after)"
cli capacity

step "metrics (excerpt)"
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^hatchery_(webhook_deliveries_total|jobs)' | sed 's/^/    /'
step "done: stopping hatcheryd and removing $work"
