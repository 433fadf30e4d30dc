#!/usr/bin/env bash
# Scale benchmark: 1,000 queued jobs over 20 libvirt test-driver hosts. Measures the time
# until every job has a runner (created: JIT config fetched, guest defined and started),
# hatcheryd's CPU time and RSS, and the reconcile tick's duration; beside the raw libvirt
# create+destroy rate measured in the same run (provision_bench overhead), as a ratio.
# GitHub is played by Prism behind the double. It prints figures; it asserts nothing.
# With `scaleset`, the jobs come through one runner scale set instead of webhooks: queued
# at once on the double's Actions-service stand-in, long-polled by hatcheryd in messages of
# at most 50, each committed and acknowledged, and every JIT config asked of the service.
# With HATCHERY_BENCH_STORE=postgresql the store is a PostgreSQL server of the benchmark's
# own (tests/postgresql/cluster.sh, fsync on), not SQLite in state_dir.
# usage: tests/bench/scale_bench.sh [JOBS] [HOSTS] [webhook|scaleset]
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
jobs=${1:-1000}
hosts=${2:-20}
via=${3:-webhook}
case $via in webhook|scaleset) ;; *) echo "scale_bench: the third argument is webhook or scaleset, not '$via'" >&2; exit 2 ;; esac
if [ -z "${GITHUB_DOUBLE_URL:-}" ]; then
  ./deploy/install-deps.sh >/dev/null
  cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DHATCHERY_TESTS=OFF -DHATCHERY_BENCH=ON >/dev/null
  cmake --build build-bench -j"$(nproc)" >/dev/null
  exec tests/github/with-prism.sh "$0" "$jobs" "$hosts" "$via"
fi
work=$(mktemp -d /tmp/hatchery-scale-XXXXXX)
cleanup() {
  set +e # every step runs, whatever the one before it (hatcheryd may be dead already)
  [ -z "${pid:-}" ] || kill "$pid" 2>/dev/null
  wait 2>/dev/null
  [ "${HATCHERY_BENCH_STORE:-sqlite}" != postgresql ] || tests/postgresql/cluster.sh stop "$work/pg"
  [ -n "${SCALE_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > "$work/secret"
chmod 600 "$work/secret"
port=$(node -e 's=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
{
  echo "controller_id: scale"
  echo "listen: 127.0.0.1:$port"
  echo "state_dir: $work/state"
  echo "admin_socket: $work/admin.sock"
  [ "$via" = scaleset ] || echo "webhook_secret_file: $work/secret"
  echo "reconcile_interval_s: 5"
  # GitHub delivers from many addresses; this one sender stands for all of them, so the
  # per-address connection limit (32 by default) is lifted here, not in the product.
  echo "http:"
  echo "  max_connections_per_address: 0"
  echo "github:"
  echo "  api_url: $GITHUB_DOUBLE_URL"
  echo "  app_id: $APP_ID"
  echo "  app_private_key_file: $APP_KEY_FILE"
  echo "  runner_scopes: [{repo: pytorch/pytorch}]"
  echo "hosts:"
  for i in $(seq "$hosts"); do
    echo "  - {name: h$i, uri: 'test://$work/h$i.xml', vcpus: 4096, memory_mib: 4194304, max_guests: 4096, storage_pool: default-pool}"
  done
  echo "pools:"
  scale_set=
  [ "$via" = webhook ] || scale_set="scale_set: scale, "
  echo "  - {name: scale, labels: [scale], ${scale_set}arch: s390x, image: /default-pool/base.qcow2, vcpus: 1, memory_mib: 64, disk_mib: 64, network: none, max_runners: $jobs, boot_timeout_s: 3600}"
} > "$work/hatchery.yaml"
if [ "${HATCHERY_BENCH_STORE:-sqlite}" = postgresql ]; then
  chmod 711 "$work"
  printf 'database:\n  postgresql: "%s"\n' "$(tests/postgresql/cluster.sh start "$work/pg")" >>"$work/hatchery.yaml"
fi
echo "store: ${HATCHERY_BENCH_STORE:-sqlite}"
# test:///default is one instance per process, shared by every connection to it; a
# test driver given a file is private to its connection: 20 files are 20 hosts.
for i in $(seq "$hosts"); do
  cat > "$work/h$i.xml" <<EOF
<node>
  <cpu><nodes>1</nodes><sockets>1</sockets><cores>64</cores><threads>1</threads><active>64</active><mhz>4000</mhz><model>host</model></cpu>
  <memory>4294967296</memory>
  <pool type='dir'>
    <name>default-pool</name>
    <capacity unit='bytes'>1099511627776</capacity>
    <allocation unit='bytes'>0</allocation>
    <available unit='bytes'>1099511627776</available>
    <target><path>/default-pool</path></target>
  </pool>
</node>
EOF
done
curl -sf -X POST "$GITHUB_DOUBLE_URL/__double/stateful" >/dev/null
# hatcheryd refuses root unless told why.
root_args=()
[ "$(id -u)" != 0 ] || root_args=(--allow-root "the benchmark runs as root on a test machine")
"${HATCHERYD_BIN:-build-bench/hatcheryd}" --config "$work/hatchery.yaml" "${root_args[@]}" 2>"$work/log" &
pid=$!
for _ in $(seq 100); do [ "$(grep -c 'event=host.up' "$work/log" 2>/dev/null)" = "$hosts" ] && break; sleep 0.1; done
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
rss0=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
cpu0=$(cpu)
polling() {
  build-bench/hatchery --socket "$work/admin.sock" --json github 2>/dev/null |
    node -e 'process.exit(JSON.parse(require("fs").readFileSync(0)).scale_sets[0]?.state === "polling" ? 0 : 1)'
}
if [ "$via" = scaleset ]; then
  for _ in $(seq 600); do polling && break; sleep 0.1; done
  polling || { echo "the scale set is not polling after 60 s; the end of hatcheryd's log:"; tail -n 60 "$work/log"; exit 1; }
fi
t0=$(date +%s.%N)
if [ "$via" = scaleset ]; then
  curl -sf -X POST "$GITHUB_DOUBLE_URL/__scaleset/jobs" -d "{\"count\": $jobs, \"scaleSet\": \"scale\"}" >/dev/null
else
  node tests/tools/send-burst.mjs "http://127.0.0.1:$port/webhook" "$work/secret" "$jobs" scale
fi
while :; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "hatcheryd died; the end of its log:"; tail -n 60 "$work/log"; exit 1
  fi
  if ! answer=$(build-bench/hatchery --socket "$work/admin.sock" --json capacity); then
    sleep 1; kill -0 "$pid" 2>/dev/null || continue
    echo "hatchery capacity failed; the end of hatcheryd's log:"; tail -n 60 "$work/log"; exit 1
  fi
  # A runner counts once its guest is defined and started (its JIT config fetched): booting
  # on, as the test driver's guests never say hello. A record still pending or creating
  # does not.
  have=$(node -e 'const s = JSON.parse(require("fs").readFileSync(0)).pools[0].runners_by_state ?? {};
    console.log(["booting", "configured", "idle", "busy"].reduce((n, k) => n + (s[k] ?? 0), 0))' <<<"$answer")
  [ "$have" -ge "$jobs" ] && break
  sleep 0.2
done
t1=$(date +%s.%N)
cpu1=$(cpu)
rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
sleep 6 # one reconcile pass over all of it
tick=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^hatchery_reconcile_last_tick_seconds/ {print $2}')
hz=$(getconf CLK_TCK)
raw=$(build-bench/provision_bench overhead 300 | awk '/raw libvirt loop/ {print $4}')
# The test driver runs inside hatcheryd and keeps its domains there: what it holds for as
# many domains, measured apart, is libvirt's part of hatcheryd's RSS (on a real host it is
# libvirtd's, in another process).
libvirt_kib=$(build-bench/provision_bench footprint "$jobs" "$hosts" | awk '{print $(NF-1)}')
VIA=$via node -e '
  const [jobs, hosts, t0, t1, cpu0, cpu1, hz, rss, tick, raw, rss0, libvirt] = process.argv.slice(1).map(Number);
  const secs = t1 - t0, rate = jobs / secs;
  console.log(`${jobs} queued jobs ${process.env.VIA === "scaleset" ? "through one runner scale set" : "by webhook"} over ${hosts} test-driver hosts (one private test:/// instance each)`);
  console.log(`  all have runners after      ${secs.toFixed(1)} s  (${(rate * 60).toFixed(0)} runners/min; GARM users report ~200/min)`);
  console.log(`  hatcheryd CPU               ${((cpu1 - cpu0) / hz).toFixed(1)} s`);
  console.log(`  hatcheryd RSS               ${(rss / 1024).toFixed(1)} MiB (goal < 64 MiB at 1,000 jobs, < 128 at 10,000); ${(rss0 / 1024).toFixed(1)} MiB before the burst`);
  console.log(`    of it the libvirt test driver ${(libvirt / 1024).toFixed(1)} MiB (provision_bench footprint: as many domains, alone)`);
  console.log(`    the rest, Hatchery          ${((rss - libvirt) / 1024).toFixed(1)} MiB: ${((rss - libvirt - rss0) / jobs).toFixed(2)} KiB a job over the ${(rss0 / 1024).toFixed(1)} MiB before`);
  console.log(`  reconcile pass              ${(tick * 1000).toFixed(2)} ms on the loop, its callbacks included (goal < 20 ms)`);
  console.log(`  raw libvirt cycles/s        ${raw.toFixed(0)}  -> ratio ${(rate / raw).toFixed(3)} (runner creations/s over raw create+destroy/s)`);
' "$jobs" "$hosts" "$t0" "$t1" "$cpu0" "$cpu1" "$hz" "$rss" "$tick" "$raw" "$rss0" "$libvirt_kib"
