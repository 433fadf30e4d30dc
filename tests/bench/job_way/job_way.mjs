// One job's way through hatcheryd, for tests/bench/job_way.sh: one webhook pool of the
// s390x test guest (a cold boot), one job from `queued` to its runner deleted, with
// hatcheryd tracing every function it enters (tracer.c). Writes the window the job took
// (wall clock, ns) to $JOB_WAY_WINDOW; the analysis is analyze.py's.
import { writeFileSync } from 'node:fs';
import { Daemon, githubConfig, workflowJob } from '../../integration/lib/daemon.mjs';
import { testGuestHost, testGuestPool } from '../../e2e/test-guest-pool.mjs';

const volumes = `/tmp/hatchery-job-way-${process.pid}`;
const name = 'way';
const d = new Daemon({
  hostsExtra: testGuestHost(`hatchery-job-way-${process.pid}`, volumes, 2),
  pools: 'pools:\n' + testGuestPool(name, 's390x', process.env.GUEST_s390x, ['max_runners: 1', 'boot_timeout_s: 300']),
  // The reconciler's passes are periodic, not the job's: once an hour, after the first.
  extra: githubConfig({ reconcileIntervalS: 3600 }),
  env: { HATCHERY_TRACE: process.env.JOB_WAY_TRACE }, // hatcheryd's, not the CLI's
});
const lines = [];
const lineAfter = (re, what) => d.until(what, () => lines.find((l) => re.test(l)), { ms: 600000, everyMs: 50 });
const runners = () => d.cliJson('runners', '--all').runners;
const nowNs = () => BigInt(Date.now()) * 1000000n;

await fetch(`${process.env.GITHUB_DOUBLE_URL}/__double/jit`, { method: 'POST', body: 'sleep=3 exit=0' });
await d.start();
let partial = '';
d.proc.stderr.on('data', (chunk) => {
  const parts = (partial + chunk.toString()).split('\n');
  partial = parts.pop();
  lines.push(...parts);
});
try {
  // Past the first reconciler pass (and so the hosts' first connections).
  // (/metrics, asked every half second: the front limits how often one address may ask.)
  const reconciled = async () => {
    try {
      return /^hatchery_reconcile_ticks_total [1-9]/m.test(
        await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text());
    } catch {
      return false;
    }
  };
  for (let i = 0; i < 120 && !(await reconciled()); i++) await new Promise((r) => setTimeout(r, 500));
  const job = 9500000001;
  const from = nowNs();
  const r = await d.post('workflow_job', workflowJob('queued', job, [name]));
  if (r.status !== 202) throw new Error(`queued: ${r.status}`);
  const created = await lineAfter(/event=runner\.created runner=(\S+) pool=way /, 'the runner');
  const runner = /runner=(\S+)/.exec(created)[1];
  await lineAfter(new RegExp(`event=guest\\.runner_started guest=${runner} `), `${runner} online`);
  await d.post('workflow_job', workflowJob('in_progress', job, [name], runner));
  await d.until(`${runner} done`, () => ['deleting', 'deleted'].includes(runners().find((x) => x.name === runner)?.state), { ms: 300000 });
  await d.post('workflow_job', workflowJob('completed', job, [name], runner));
  await d.until(`${runner} deleted`, () => runners().find((x) => x.name === runner)?.state === 'deleted', { ms: 300000 });
  writeFileSync(process.env.JOB_WAY_WINDOW, `${from} ${nowNs()}\n`);
} catch (e) {
  process.stderr.write(`hatcheryd's log (tail):\n${d.logs.slice(-4000)}\n`);
  throw e;
} finally {
  await d.stop();
  d.cleanup();
}
