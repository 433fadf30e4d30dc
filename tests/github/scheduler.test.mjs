// The scheduler against GitHub's misbehaviour, on libvirt's test driver (whose guests never
// run, so a runner stays `creating` until its boot timeout: what is measured here is only
// the GitHub side). GitHub is Prism behind the stateful double, which keeps the runners
// that GitHub would have registered: a runner name stays taken until deleted.
//  - a JIT answer that arrives after its runner was deleted must not touch the freed
//    runner (a use-after-free found by the scale benchmark), and the GitHub runner it
//    registered must be deleted, not left behind;
//  - 502 bursts, a 429 and an answer lost after GitHub registered the runner: one queued
//    job still ends with exactly one registered runner, never two;
//  - a late `queued` (a redelivery, or a replay) gets a runner only once GitHub says the
//    job is still queued;
//  - history older than history_retention_s is pruned, and runner ids are never reused.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import { Daemon, githubConfig, workflowJob } from '../integration/lib/daemon.mjs';

const api = process.env.GITHUB_DOUBLE_URL;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The pool's one host is test:///default, where its image path is the driver's; a host on
// this machine (a local qemu:///system URI, unused) is another pool's business: the image
// is not looked for on this machine (it was, and every job waited 'image missing'). Its
// socket is one that does not exist: on the tests' shared libvirtd this daemon (controller
// "it", like the e2e tests') would reap their guests as its own orphans.
const d = new Daemon({
  hostsExtra: `  - name: local-unused
    uri: qemu:///system?socket=/nonexistent/hatchery-github-scheduler/libvirt-sock
    vcpus: 2
    memory_mib: 2048
    max_guests: 1
`,
  pools: `pools:
  - name: sim
    labels: [sim]
    arch: s390x
    image: /default-pool/base.qcow2
    vcpus: 1
    memory_mib: 256
    network: none
    max_runners: 4
    boot_timeout_s: 600
    hosts: [host-a]
`,
  extra: githubConfig({ reconcileIntervalS: 60 }) + 'history_retention_s: 3600\n',
});

const fault = (list) => fetch(`${api}/__double/faults`, { method: 'POST', body: JSON.stringify(list) });
const registered = async () => (await fetch(`${api}/__double/runners`)).json();
const registrations = async () => (await (await fetch(`${api}/__double/registrations`)).json()).registrations;
const sql = (q) => {
  const r = spawnSync('sqlite3', [d.db, q], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
};
const live = () => d.cliJson('runners').runners.filter((r) => !['deleted', 'failed'].includes(r.state));

async function until(what, check, ms = 15000) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(50)) {
    const v = await check();
    if (v) return v;
  }
  assert.fail(`timed out waiting for ${what}\n${d.logs.split('\n').slice(-20).join('\n')}`);
}

before(async () => {
  await fetch(`${api}/__double/log`, { method: 'DELETE' });
  await fetch(`${api}/__double/stateful`, { method: 'POST' });
  await d.start();
});

after(async () => {
  const { code, signal } = await d.stop();
  d.cleanup();
  assert.equal(signal, null);
  assert.equal(code, 0); // ASan's reports end the daemon non-zero
});

test('a JIT answer arriving after its runner was deleted: the daemon lives and the late registration is deleted', async () => {
  await fault([{ method: 'POST', path: 'generate-jitconfig', delay_ms: 2000 }]);
  assert.equal((await d.post('workflow_job', workflowJob('queued', 8100000001, ['sim']))).status, 202);
  const [runner] = await until('a runner for the job', () => live().length === 1 && live());
  // Its JIT answer is held back: the guest is made (test driver) and boots meanwhile.
  assert.ok(['creating', 'booting'].includes(runner.state), runner.state);
  const del = d.cli('delete', runner.name);
  assert.equal(del.code, 0, del.stderr);
  await until('the deleted runner to be forgotten', () =>
    !live().some((r) => r.name === runner.name));
  // The job is still queued: a replacement is made. Its JIT answer comes back at once.
  const replacement = await until('a replacement runner registered', async () => {
    const names = (await registered()).map((r) => r.name);
    return names.length >= 1 && names.find((n) => n !== runner.name);
  });
  assert.notEqual(replacement, runner.name);
  await sleep(2500); // the late answer for the deleted runner arrives now
  assert.equal(d.proc.exitCode, null, `hatcheryd died:\n${d.logs.split('\n').slice(-30).join('\n')}`);
  assert.equal(d.proc.signalCode, null);
  await until('the late registration to be deleted', async () =>
    !(await registered()).some((r) => r.name === runner.name));
  assert.deepEqual((await registered()).map((r) => r.name), [replacement]);
  const stateful = await (await fetch(`${api}/__double/log`)).json();
  assert.deepEqual(stateful.violations, []);
  // Clean up for the next test: the job is done, its runner goes.
  assert.equal((await d.post('workflow_job', workflowJob('completed', 8100000001, ['sim'], null))).status, 202);
  d.cli('delete', replacement);
  await until('no live runner and no registration', async () => live().length === 0 && (await registered()).length === 0);
});

test('502 bursts, a 429 and a lost answer after registration: one job, exactly one registered runner', async () => {
  const before = await registrations();
  await fault([
    { method: 'POST', path: 'generate-jitconfig', status: 502, times: 3 },
    { method: 'POST', path: 'generate-jitconfig', status: 429, headers: { 'Retry-After': '1' } },
    // GitHub registers the runner, then the answer is lost: the retry finds the name taken.
    { method: 'POST', path: 'generate-jitconfig', lose_answer: true },
  ]);
  assert.equal((await d.post('workflow_job', workflowJob('queued', 8100000002, ['sim']))).status, 202);
  const runner = await until('a runner with its JIT config', () => {
    const rs = live();
    return rs.length === 1 && rs[0].github_runner_id && rs[0];
  }, 30000);
  // Let every retry settle, then look: one live runner here, one registration there.
  await sleep(2000);
  assert.deepEqual(live().map((r) => r.name), [runner.name]);
  const names = (await registered()).map((r) => r.name);
  assert.deepEqual(names, [runner.name], `registered: ${JSON.stringify(names)}`);
  // The lost answer's registration was replaced, not duplicated: two made, one left.
  assert.equal((await registrations()) - before, 2);
  assert.match(d.logs, /event=github.retry .*generate-jitconfig.*status=502/);
  const { violations } = await (await fetch(`${api}/__double/log`)).json();
  assert.deepEqual(violations, []);
});

test('a late queued delivery gets a runner only once GitHub says the job is still queued', async () => {
  // A job made two days ago: its `queued` is a redelivery or a captured delivery replayed.
  // GitHub has 8100000004 queued still, and 8100000003 long finished.
  const twoDays = { createdAgoMs: 2 * 24 * 3600 * 1000 };
  await fetch(`${api}/__double/queued`, { method: 'POST', body: JSON.stringify([{ id: 8100000004, run_id: 4, labels: ['sim'], hidden: true }]) });
  const before = live().length;
  const from = d.logs.length;
  assert.equal((await d.post('workflow_job', workflowJob('queued', 8100000003, ['sim'], null, twoDays))).status, 202);
  await d.until('the finished job retired', () => /event=webhook.late_job_retired job=8100000003 github_status=completed/.test(d.logs.slice(from)), { ms: 15000 });
  assert.equal(sql('SELECT status FROM jobs WHERE id = 8100000003'), 'completed');
  await sleep(1000);
  assert.equal(live().length, before, 'no runner for a job GitHub finished');
  assert.equal((await d.post('workflow_job', workflowJob('queued', 8100000004, ['sim'], null, twoDays))).status, 202);
  await d.until('the queued one verified', () => /event=webhook.late_job_verified job=8100000004 github_status=queued/.test(d.logs.slice(from)), { ms: 15000 });
  await until('a runner for it', () => live().length === before + 1);
  const metrics = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
  assert.match(metrics, /hatchery_reconcile_actions_total\{action="late_job_retired"\} 1/);
  assert.match(metrics, /hatchery_reconcile_actions_total\{action="late_job_verified"\} 1/);
  await fetch(`${api}/__double/dequeue`, { method: 'POST', body: JSON.stringify([8100000004]) });
  assert.equal((await d.post('workflow_job', workflowJob('completed', 8100000004, ['sim']))).status, 202);
});

test('runners filtered by pool and host, and one shown whole', () => {
  const all = d.cliJson('runners', '--all').runners;
  assert.ok(all.length >= 2);
  assert.deepEqual(d.cliJson('runners', '--all', '--pool', 'sim').runners.map((r) => r.name), all.map((r) => r.name));
  assert.deepEqual(d.cliJson('runners', '--all', '--pool', 'nope').runners, []);
  assert.deepEqual(d.cliJson('runners', '--all', '--host', 'host-a').runners.map((r) => r.name), all.filter((r) => r.host === 'host-a').map((r) => r.name));
  const one = all.find((r) => r.state === 'deleted') ?? all[all.length - 1]; // an ended one does not change
  const shown = d.cli('runners', 'show', one.name);
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, new RegExp(`^name +${one.name}$`, 'm'));
  assert.match(shown.stdout, new RegExp(`^state +${one.state}$`, 'm'));
  assert.match(shown.stdout, /^pool +sim$/m);
  assert.deepEqual(d.cliJson('runners', 'show', one.name).runners, [one]);
  const missing = d.cli('runners', 'show', 'hatchery-it-999999');
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /no runner of that name/);
  assert.equal(d.cli('runners', 'show').code, 2);
});

test('history older than history_retention_s is pruned at start, and runner ids are not reused', async () => {
  await d.stop();
  // Age every record: all runners ended long ago, and the completed job too.
  const maxId = Number(sql('SELECT max(id) FROM runners'));
  assert.ok(maxId >= 3);
  sql("UPDATE runners SET state = 'deleted', updated_at = 0; UPDATE jobs SET updated_at = 0;");
  await d.start();
  // Every aged record goes but the newest, which keeps the highest id given (in either
  // backend: PostgreSQL has no sequence of SQLite's to remember it).
  await until('the pruning', () => sql('SELECT count(*) FROM runners WHERE updated_at = 0') === '1');
  assert.equal(sql('SELECT id FROM runners WHERE updated_at = 0'), String(maxId));
  await until('the completed job pruned', () => sql('SELECT count(*) FROM jobs WHERE id = 8100000001') === '0');
  // A job still queued is not history: it stays, and is served.
  assert.equal(sql('SELECT status FROM jobs WHERE id = 8100000002'), 'queued');
  const [fresh] = await until('a new runner for the queued job', () => live().length === 1 && live());
  const id = Number(fresh.name.split('-').pop());
  assert.ok(id > maxId, `runner id ${id} reused (the pruned ones went up to ${maxId})`);
});
