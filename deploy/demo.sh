#!/usr/bin/env bash
# The demo: a `ciflow/ppc64le` job, served by a fresh, single-use IBM Power guest.
#
# On this machine (no Power hardware, no GitHub) it runs everything for real except the
# two things it cannot: the Power host is QEMU emulating ppc64le (TCG) under a real
# libvirtd, and GitHub is played by Prism serving GitHub's own OpenAPI description behind
# the test double (tests/github/). hatcheryd receives a signed `workflow_job` queued for
# `linux.ppc64le`, asks "GitHub" for a JIT runner config, boots the guest, hands the config
# to the in-guest agent, which starts the (stand-in) runner; the job runs and completes,
# and the guest and its disk vanish. `hatchery capacity` is shown before, during, after.
# It installs what it needs and cleans up after itself. About two minutes here.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [ "${1:-}" != --inside ]; then
  printf '\033[1m==> installing dependencies, building hatcheryd and the ppc64le test guest\033[0m\n'
  ./deploy/install-deps.sh
  [ -d tests/node_modules/@stoplight/prism-cli ] || (cd tests && npm ci --no-audit --no-fund --loglevel=error)
  cmake -S . -B build -DHATCHERY_TESTS=OFF >/dev/null
  cmake --build build -j"$(nproc)" >/dev/null
  export GUEST_DIR
  GUEST_DIR=$(images/test-guest/build.sh ppc64le)
  printf '\033[1m==> starting libvirtd, and GitHub played by Prism (GitHub'"'"'s OpenAPI description)\033[0m\n'
  tests/libvirt/libvirtd.sh start
  exec tests/github/with-prism.sh "$0" --inside
fi

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
work=$(mktemp -d /tmp/hatchery-demo-XXXXXX)
pool_name="hatchery-demo-$$"
cleanup() {
  [ -n "${watch_pid:-}" ] && kill "$watch_pid" 2>/dev/null
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  virsh -c qemu:///system pool-destroy "$pool_name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

port=$(node -e 's=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > "$work/webhook-secret"
chmod 600 "$work/webhook-secret"
cat > "$work/hatchery.yaml" <<YAML
controller_id: demo
listen: 127.0.0.1:$port
state_dir: $work/state
admin_socket: $work/admin.sock
webhook_secret_file: $work/webhook-secret
reconcile_interval_s: 10
github:
  api_url: $GITHUB_DOUBLE_URL
  app_id: $APP_ID
  app_private_key_file: $APP_KEY_FILE
  runner_scopes:
    - repo: pytorch/pytorch
hosts:
  - name: p10-emulated
    uri: qemu:///system
    vcpus: 2
    memory_mib: 2048
    max_guests: 2
    storage_pool: $pool_name
    storage_dir: $work/volumes
pools:
  - name: linux.ppc64le
    labels: [linux.ppc64le]
    arch: ppc64le
    image: $GUEST_DIR/base.qcow2
    kernel: $GUEST_DIR/kernel
    initrd: $GUEST_DIR/initrd
    cmdline: "console=hvc0 quiet"
    firmware: vof
    network: none
    disk_mib: 64
    vcpus: 1
    memory_mib: 512
    max_runners: 2
    boot_timeout_s: 120
    runner_command: [/usr/bin/fake-runner]
YAML
# The stand-in runner in the guest "runs the job" for 6 seconds.
curl -sf -X POST --data 'sleep=6 exit=0' "$GITHUB_DOUBLE_URL/__double/jit" >/dev/null

step "starting hatcheryd"
# hatcheryd refuses root unless told why.
root_args=()
[ "$(id -u)" != 0 ] || root_args=(--allow-root "the demo runs as root to drive this machine's libvirtd")
build/hatcheryd --config "$work/hatchery.yaml" "${root_args[@]}" 2>"$work/hatcheryd.log" &
pid=$!
for _ in $(seq 100); do grep -q 'event=host.up' "$work/hatcheryd.log" 2>/dev/null && break; sleep 0.1; done
cli() { build/hatchery --socket "$work/admin.sock" "$@"; }

# Narrate what hatcheryd does, as it happens.
tail -n +1 -F "$work/hatcheryd.log" 2>/dev/null | while IFS= read -r line; do
  case "$line" in
    *event=webhook.stored*) echo "    [hatcheryd] webhook stored: ${line##*event=webhook.stored }" ;;
    *event=runner.created*) echo "    [hatcheryd] demand > supply: new runner ${line##*event=runner.created }" ;;
    *event=guest.created*) echo "    [libvirt]   ppc64le guest created (overlay disk, domain started): ${line##*event=guest.created }" ;;
    *event=guest.hello*) echo "    [agent]     the guest booted and the agent said hello: ${line##*event=guest.hello }" ;;
    *"to=configured"*) echo "    [agent]     JIT runner config delivered over virtio-serial (never on a command line)" ;;
    *event=guest.runner_started*) echo "    [agent]     runner started in the guest: ${line##*event=guest.runner_started }" ;;
    *"to=busy"*) echo "    [hatcheryd] GitHub gave the job to this runner (in_progress)" ;;
    *event=guest.runner_exited*) echo "    [agent]     job finished: ${line##*event=guest.runner_exited }" ;;
    *event=guest.gone*) echo "    [libvirt]   guest destroyed and its disk deleted: ${line##*event=guest.gone }" ;;
    *"to=deleted"*) echo "    [hatcheryd] GitHub runner removed; the runner is gone" ;;
    *level=error*|*level=warn*) echo "    [hatcheryd] ${line}" ;;
  esac
done &
watch_pid=$!

step "hatchery hosts / capacity (before)"
cli hosts
cli capacity

step "GitHub sends workflow_job queued (runs-on: linux.ppc64le)"
printf '    '
node tests/tools/send-workflow-job.mjs "http://127.0.0.1:$port/webhook" "$work/webhook-secret" queued 24100000001 linux.ppc64le

runner=
for _ in $(seq 600); do
  runner=$(cli --json runners | node -e 'let j=JSON.parse(require("fs").readFileSync(0));const r=j.runners.find(r=>r.state==="idle");console.log(r?r.name:"")')
  [ -n "$runner" ] && break
  sleep 0.2
done
[ -n "$runner" ] || { echo "no runner came online"; tail -n 30 "$work/hatcheryd.log"; exit 1; }

step "GitHub hands the job to $runner (workflow_job in_progress)"
printf '    '
node tests/tools/send-workflow-job.mjs "http://127.0.0.1:$port/webhook" "$work/webhook-secret" in_progress 24100000001 linux.ppc64le "$runner"
sleep 1
step "hatchery capacity / runners (during)"
cli capacity
cli runners
virsh -c qemu:///system list | sed 's/^/    /'

for _ in $(seq 600); do
  state=$(cli --json runners --all | node -e 'let j=JSON.parse(require("fs").readFileSync(0));const r=j.runners.find(r=>r.name===process.argv[1]);console.log(r?r.state:"")' "$runner")
  [ "$state" = deleted ] && break
  sleep 0.2
done
step "GitHub reports the job completed"
printf '    '
node tests/tools/send-workflow-job.mjs "http://127.0.0.1:$port/webhook" "$work/webhook-secret" completed 24100000001 linux.ppc64le "$runner"
sleep 0.5

step "hatchery capacity / runners / jobs (after)"
cli capacity
cli runners --all
cli jobs
printf '    libvirt domains left: %s\n' "$(virsh -c qemu:///system list --name | grep -c hatchery-demo || true)"

step "hatchery logs $runner (the guest's console, kept after teardown)"
cli logs "$runner" | sed 's/^/    /' | tail -n 8
step "done: stopping hatcheryd and cleaning up"
