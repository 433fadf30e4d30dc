// Queued -> runner online, the figure a user feels: from the moment GitHub has a job for
// a pool to the moment the guest's agent reports the runner started (hatcheryd's
// `guest.runner_started`), through a runner scale set beside the same through a webhook,
// in one run, at one latency for every answer from GitHub and the Actions service and for
// every webhook delivery. Real
// emulated guests on the test libvirtd: s390x from a cold boot and from a warm template,
// ppc64le from a cold boot (QEMU 7.2 here refuses ppc64le templates; Debian 13's QEMU does
// them: tests/bench/template_bench.sh). Rounds alternate the two paths so that both see the
// same machine. Prints figures; asserts nothing. Run it with tests/bench/online_bench.sh.
//
// Each figure is split where the paths differ and where they do not:
//   delivered  queued -> hatcheryd made the runner's record (`runner.created`): the webhook
//              delivery, or the long poll's message, its commit and the next demand pass;
//   started    -> the guest is defined and started (`guest.created`): the JIT config and
//              libvirt;
//   online     -> the runner started in the guest (`guest.runner_started`): the boot or the
//              restore, the agent, the hand-over.
import { spawnSync } from 'node:child_process';
import { Daemon, githubConfig, workflowJob } from '../integration/lib/daemon.mjs';
import { testGuestHost, testGuestPool } from '../e2e/test-guest-pool.mjs';

const rounds = Number(process.argv[2] ?? 5);
const latencyMs = Number(process.argv[3] ?? 50);
const arches = (process.env.ONLINE_BENCH_ARCHES ?? 's390x,ppc64le').split(',');
const api = process.env.GITHUB_DOUBLE_URL;
const g = { ppc64le: process.env.GUEST_ppc64le, s390x: process.env.GUEST_s390x };
const volumes = `/tmp/hatchery-online-bench-${process.pid}`;

// The cases: each a webhook pool and a scale-set pool, alike but for how jobs arrive.
const cases = arches.flatMap((arch) => [
  { arch, start: 'cold' },
  ...(arch === 's390x' ? [{ arch, start: 'template' }] : []),
]).map((c) => ({ ...c, key: `${c.arch}.${c.start}` }));

const pool = (name, arch, start, scaleSet) => testGuestPool(name, arch, g[arch],
  [...(scaleSet ? [`scale_set: ${name}`] : []), 'max_runners: 1', 'boot_timeout_s: 300', `start: ${start}`]);
const poolName = (c, path) => `${path}.${c.key}`;

const d = new Daemon({
  hostsExtra: testGuestHost(`hatchery-online-bench-${process.pid}`, volumes, 8),
  pools: 'pools:\n' + cases.map((c) => pool(poolName(c, 'webhook'), c.arch, c.start, false) +
    pool(poolName(c, 'scaleset'), c.arch, c.start, true)).join(''),
  extra: githubConfig({ reconcileIntervalS: 5 }),
});

// Every line of hatcheryd's log as it is read, with the time it was read.
const seen = []; // {at, line}
let partial = '';
const control = async (path, body) => {
  const r = await fetch(`${api}/__scaleset/${path}`, { method: 'POST', body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`__scaleset/${path}: ${r.status} ${await r.text()}`);
  return r.json();
};
const post = (path, body) => fetch(`${api}${path}`, { method: 'POST', body });
const runners = () => d.cliJson('runners', '--all').runners;
const templates = () => d.cliJson('hosts').hosts.find((h) => h.name === 'local').templates;

// Resolves with the time of the first line matching `re` read at or after `from`.
function lineAfter(from, re, what, ms = 600000) {
  return d.until(what, () => seen.find((s) => s.index >= from && re.test(s.line)), { ms, everyMs: 20 });
}

let nextJob = 9400000000;
const taken = new Set();

// One job on one path: queued on GitHub, then the times at which hatcheryd made its
// runner, started its guest and heard the runner start; then GitHub gives it the job and
// it finishes, so the next round starts from an empty pool.
async function one(c, path) {
  const name = poolName(c, path);
  const from = seen.length;
  const t0 = performance.now();
  let job;
  if (path === 'webhook') {
    job = nextJob++;
    // GitHub's delivery crosses the same network as the long poll's answer. (What GitHub
    // itself takes to send a webhook, or to hand a job to the service, is not modelled.)
    await sleep(latencyMs);
    const r = await d.post('workflow_job', workflowJob('queued', job, [name]));
    if (r.status !== 202) throw new Error(`queued: ${r.status}`);
  } else {
    [job] = (await control('jobs', { count: 1, scaleSet: name })).jobs;
  }
  const created = await lineAfter(from, new RegExp(`event=runner\\.created runner=(\\S+) pool=${name.replace(/\./g, '\\.')} `), `${name}'s runner`);
  const runner = /runner=(\S+)/.exec(created.line)[1];
  const started = await lineAfter(from, new RegExp(`event=guest\\.created guest=${runner} `), `${runner}'s guest`);
  const online = await lineAfter(from, new RegExp(`event=guest\\.runner_started guest=${runner} `), `${runner} online`);
  taken.add(runner);
  // GitHub gives the job to the runner, which then does it and leaves.
  if (path === 'webhook') {
    await d.post('workflow_job', workflowJob('in_progress', job, [name], runner));
    await d.until(`${runner} done`, () => ['deleting', 'deleted'].includes(runners().find((r) => r.name === runner)?.state), { ms: 300000 });
    await d.post('workflow_job', workflowJob('completed', job, [name], runner));
  } else {
    await control('start', { jobId: job, runnerName: runner });
    await d.until(`${runner} done`, () => ['finishing', 'deleting', 'deleted'].includes(runners().find((r) => r.name === runner)?.state), { ms: 300000 });
    await control('complete', { jobId: job, result: 'succeeded' });
  }
  await d.until(`${runner} deleted`, () => runners().find((r) => r.name === runner)?.state === 'deleted', { ms: 300000 });
  return { delivered: created.at - t0, started: started.at - created.at, online: online.at - started.at, total: online.at - t0 };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const fmt = (ms) => (ms / 1000).toFixed(2).padStart(7);

async function main() {
  // The runner in the guest exits 3 s after it starts: long enough for GitHub's
  // in_progress to reach hatcheryd first.
  await post('/__double/jit', 'sleep=3 exit=0');
  await control('settings', { jitExtra: 'sleep=3 exit=0' });
  await post('/__double/latency', String(latencyMs));
  await d.start();
  d.proc.stderr.on('data', (chunk) => {
    const at = performance.now();
    const lines = (partial + chunk.toString()).split('\n');
    partial = lines.pop();
    for (const line of lines) seen.push({ at, line, index: seen.length });
  });
  try {
    for (const c of cases.filter((x) => x.start === 'template')) {
      for (const path of ['webhook', 'scaleset']) {
        const want = poolName(c, path);
        await d.until(`${want}'s template`, () => templates().find((t) => t.pool === want)?.state === 'ready', { ms: 600000 });
      }
    }
    await d.until('every scale set polling', () => {
      const sets = d.cliJson('github').scale_sets ?? [];
      return cases.every((c) => sets.find((s) => s.name === poolName(c, 'scaleset'))?.state === 'polling');
    }, { ms: 120000 });
    const results = new Map(cases.map((c) => [c.key, { webhook: [], scaleset: [] }]));
    for (let i = 0; i < rounds; i++) {
      for (const c of cases) {
        // Alternate which path goes first in each round.
        for (const path of i % 2 ? ['scaleset', 'webhook'] : ['webhook', 'scaleset'])
          results.get(c.key)[path].push(await one(c, path));
      }
      process.stderr.write(`round ${i + 1}/${rounds} done\n`);
    }
    const qemu = spawnSync('qemu-system-s390x', ['--version'], { encoding: 'utf8' }).stdout.match(/version (\S+)/)?.[1];
    console.log(`queued -> runner online: ${rounds} rounds a case, ${latencyMs} ms added to every answer from GitHub and the service and to each delivery, QEMU ${qemu} TCG, medians in s`);
    console.log(`${'case'.padEnd(20)}${'path'.padEnd(10)}${'delivered'.padStart(10)}${'started'.padStart(8)}${'online'.padStart(8)}${'total'.padStart(8)}   ratio`);
    for (const c of cases) {
      const r = results.get(c.key);
      const row = (path) => {
        const m = Object.fromEntries(['delivered', 'started', 'online', 'total'].map((k) => [k, median(r[path].map((x) => x[k]))]));
        return m;
      };
      const w = row('webhook');
      const s = row('scaleset');
      for (const [path, m] of [['webhook', w], ['scaleset', s]])
        console.log(`${c.key.padEnd(20)}${path.padEnd(10)}${fmt(m.delivered).padStart(10)}${fmt(m.started).padStart(8)}${fmt(m.online).padStart(8)}${fmt(m.total).padStart(8)}${path === 'scaleset' ? `   ${(s.total / w.total).toFixed(2)} (scale set / webhook)` : ''}`);
    }
  } finally {
    await d.stop();
    spawnSync('virsh', ['-c', 'qemu:///system', 'pool-destroy', `hatchery-online-bench-${process.pid}`]);
    spawnSync('rm', ['-rf', volumes]);
    d.cleanup();
  }
}

await main();
