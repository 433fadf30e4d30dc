// The reconciler against GitHub's misbehaviour (Prism behind the stateful double), with a
// pass every second and no runner ever made (max_runners 0), so that only the
// reconciler talks to GitHub:
//  - an orphan GitHub runner whose delete GitHub keeps failing is retried with back-off,
//    not on every pass;
//  - while a rate-limit wait holds the last pass's lists back, no new lists are started;
//  - a job stored as queued whose `completed` never came is asked about and retired, and
//    one that GitHub still has queued (hidden from the queued list) is kept;
//  - so is a job in progress past its pool's time limit, and one GitHub still runs is kept.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import { Daemon, githubConfig, workflowJob } from '../integration/lib/daemon.mjs';

const api = process.env.GITHUB_DOUBLE_URL;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// One pool that never gets a runner: only the reconciler talks to GitHub.
const pools = `pools:
  - name: sim
    labels: [sim]
    arch: s390x
    image: /default-pool/base.qcow2
    max_runners: 0
`;

const d = new Daemon({
  pools,
  extra: githubConfig({ reconcileIntervalS: 1 }),
});

const fault = (list) => fetch(`${api}/__double/faults`, { method: 'POST', body: JSON.stringify(list) });
const log = async () => (await (await fetch(`${api}/__double/log`)).json()).log;
const registered = async () => (await fetch(`${api}/__double/runners`)).json();
const sql = (q) => {
  const r = spawnSync('sqlite3', ['-cmd', '.timeout 5000', d.db, q], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
};

before(async () => {
  await fetch(`${api}/__double/log`, { method: 'DELETE' });
  await fetch(`${api}/__double/stateful`, { method: 'POST' });
  await d.start();
  await d.until('the first reconciler pass', () => /event=github.scope_ok/.test(d.logs), { ms: 15000 });
});

after(async () => {
  const { code } = await d.stop();
  d.cleanup();
  assert.equal(code, 0);
});

test('an orphan runner whose delete GitHub keeps failing is retried with back-off, then deleted', async () => {
  // A runner of ours that GitHub knows and no record owns (left by a lost answer).
  const res = await fetch(`${api}/repos/pytorch/pytorch/actions/runners/generate-jitconfig`, {
    method: 'POST',
    headers: { 'x-double-static-token': '1', 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'hatchery-it-424242', runner_group_id: 1, labels: ['sim'], work_folder: '_work' }),
  });
  assert.equal(res.status, 201);
  const { runner } = await res.json();
  await fault([{ method: 'DELETE', path: `/actions/runners/${runner.id}$`, status: 500, times: 1000 }]);
  const deletes = async () => (await log()).filter((e) => e.method === 'DELETE' && e.url.endsWith(`/actions/runners/${runner.id}`)).length;
  const before = await deletes();
  const t0 = Date.now();
  // Each attempt takes the client's own retries of the 500s (about 10 s; longer on a
  // loaded machine), then waits 2, 4, 8 s before the next: waited for as events, with
  // the passes (one a second) counted meanwhile.
  const failed = (n) => new RegExp(`event=reconcile\\.orphan_delete_failed github_runner_id=\\d+ attempts=${n} retry_in_s=(\\d+)`).exec(d.logs);
  await d.until('the second delete attempt to fail', () => failed(2), { ms: 120000 });
  const seconds = (Date.now() - t0) / 1000;
  const orphanLines = () => d.logs.split('\n').filter((l) => l.includes('orphan')).join('\n');
  const tries = (d.logs.match(/event=reconcile.orphan_github_runner runner=hatchery-it-424242 /g) ?? []).length;
  // Backed off: the wait grows with each failure, and in that time a delete per pass
  // would have been one a second.
  assert.ok(Number(failed(2)[1]) > Number(failed(1)[1]), `the waits: ${orphanLines()}`);
  assert.ok(tries <= 3 && tries < seconds / 4, `${tries} delete attempts in ${seconds.toFixed(0)} s of 1 s passes:\n${orphanLines()}`);
  console.log(`orphan deletes: ${tries} attempts (${(await deletes()) - before} DELETE requests with the client's retries) in ${seconds.toFixed(0)} s of 1 s passes`);
  await fetch(`${api}/__double/log`, { method: 'DELETE' }); // GitHub recovers (faults cleared)
  await d.until('the orphan deleted', async () => !(await registered()).some((r) => r.name === 'hatchery-it-424242'), { ms: 40000 });
});

test('a rate-limit wait: the passes meanwhile start no new GitHub lists', async () => {
  await fetch(`${api}/__double/log`, { method: 'DELETE' });
  const from = d.logs.length;
  await fault([{ method: 'GET', path: '/actions/runners(\\?|$)', status: 429, headers: { 'Retry-After': '6' } }]);
  await sleep(9000);
  const lists = (await log()).filter((e) => e.method === 'GET' && /\/actions\/runners(\?|$)/.test(e.url)).length;
  const skipped = (d.logs.slice(from).match(/event=reconcile.github_skipped/g) ?? []).length;
  assert.ok(skipped >= 3, `${skipped} passes skipped their lists`);
  // Without the skip, each of the ~9 passes would have queued its own list behind the wait.
  assert.ok(lists <= 5, `${lists} runner lists in 9 s`);
  console.log(`rate-limit wait of 6 s: ${skipped} passes skipped, ${lists} runner lists sent in 9 s`);
});

test('a phantom queued job is asked about and retired; one GitHub still has queued is kept', async () => {
  const [phantom, hidden] = [8300000001, 8300000002];
  for (const id of [phantom, hidden]) {
    const p = workflowJob('queued', id, ['sim']);
    p.repository.full_name = 'pytorch/pytorch'; // the configured scope's repository
    assert.equal((await d.post('workflow_job', p)).status, 202);
  }
  // GitHub still has `hidden` queued (in a run that is in progress, so the queued-runs
  // list does not show it); `phantom` completed, and its webhook was lost.
  await fetch(`${api}/__double/queued`, { method: 'POST', body: JSON.stringify([{ id: hidden, run_id: 1, labels: ['sim'], hidden: true }]) });
  const old = Date.now() - 11 * 60 * 1000;
  sql(`UPDATE jobs SET queued_at = ${old}, updated_at = ${old} WHERE id IN (${phantom}, ${hidden})`);
  await d.until('the phantom retired', () => d.jobs().find((j) => j.id === phantom)?.status === 'completed', { ms: 20000 });
  // The log line comes through a pipe: it may follow the store's answer by a moment.
  const retired = new RegExp(`event=reconcile.phantom_job job=${phantom} github_status=completed action=retire`);
  await d.until('the retire in the log', () => retired.test(d.logs), { ms: 5000 });
  await sleep(2000);
  assert.equal(d.jobs().find((j) => j.id === hidden).status, 'queued');
  // Asked once, then left alone for another 10 minutes.
  const asked = (await log()).filter((e) => e.url.endsWith(`/actions/jobs/${hidden}`)).length;
  assert.equal(asked, 1);
  const metrics = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
  assert.match(metrics, /hatchery_reconcile_actions_total\{action="phantom_job_retired"\} 1/);
});

test('a job in progress past its pool\'s time limit is asked about and retired; one GitHub still runs is kept', async () => {
  const [stuck, running] = [8300000011, 8300000012];
  for (const id of [stuck, running]) {
    for (const status of ['queued', 'in_progress']) {
      const p = workflowJob(status, id, ['sim'], status === 'in_progress' ? `somebody-${id}` : null);
      p.repository.full_name = 'pytorch/pytorch';
      assert.equal((await d.post('workflow_job', p)).status, 202);
    }
  }
  // GitHub still runs `running`; `stuck` completed and its webhook was lost. Both were last
  // heard of 7 hours ago, past the pool's job_timeout_s (6 h) and the reconciler's grace.
  await fetch(`${api}/__double/queued`, { method: 'POST', body: JSON.stringify([{ id: running, run_id: 2, labels: ['sim'], hidden: true, status: 'in_progress' }]) });
  const old = Date.now() - 7 * 3600 * 1000;
  sql(`UPDATE jobs SET updated_at = ${old} WHERE id IN (${stuck}, ${running})`);
  await d.until('the stuck job retired', () => d.jobs().find((j) => j.id === stuck)?.status === 'completed', { ms: 20000 });
  const retired = new RegExp(`event=reconcile.stuck_job job=${stuck} github_status=completed action=retire`);
  await d.until('the retire in the log', () => retired.test(d.logs), { ms: 5000 });
  await sleep(2000);
  assert.equal(d.jobs().find((j) => j.id === running).status, 'in_progress');
  // Asked once, then left alone until it is past the limit again.
  const asked = (await log()).filter((e) => e.url.endsWith(`/actions/jobs/${running}`)).length;
  assert.equal(asked, 1);
  const metrics = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
  assert.match(metrics, /hatchery_reconcile_actions_total\{action="stuck_job_retired"\} 1/);
  // A job in progress within its limit is not asked about.
  const fresh = 8300000013;
  for (const status of ['queued', 'in_progress']) {
    const p = workflowJob(status, fresh, ['sim'], status === 'in_progress' ? 'somebody-else' : null);
    p.repository.full_name = 'pytorch/pytorch';
    assert.equal((await d.post('workflow_job', p)).status, 202);
  }
  await sleep(3000);
  assert.equal((await log()).filter((e) => e.url.endsWith(`/actions/jobs/${fresh}`)).length, 0);
  assert.equal(d.jobs().find((j) => j.id === fresh).status, 'in_progress');
});

test('an org scope: lost jobs are found across the installation\'s repositories of that org', async () => {
  const org = new Daemon({
    pools,
    extra: githubConfig({ reconcileIntervalS: 1 }).replace('    - repo: pytorch/pytorch', '    - org: pytorch'),
  });
  // The installation reaches three repositories, one of another owner.
  await fetch(`${api}/__double/repos`, { method: 'POST', body: JSON.stringify(['pytorch/vision', 'pytorch/audio', 'someone/else']) });
  const jobs = [
    { id: 8400000001, run_id: 71, labels: ['sim'], repo: 'pytorch/vision' },
    { id: 8400000002, run_id: 72, labels: ['sim'], repo: 'pytorch/audio' },
    { id: 8400000003, run_id: 73, labels: ['sim'], repo: 'someone/else' },
  ];
  await fetch(`${api}/__double/queued`, { method: 'POST', body: JSON.stringify(jobs) });
  await org.start();
  try {
    await org.until('both org jobs found', () => {
      const found = org.jobs().filter((j) => j.id >= 8400000001 && j.id <= 8400000003);
      return found.length >= 2 && found;
    }, { ms: 20000 });
    await sleep(3000);
    const found = org.jobs().filter((j) => j.id >= 8400000001 && j.id <= 8400000003);
    assert.deepEqual(found.map((j) => [j.id, j.repository]).sort(), [[8400000001, 'pytorch/vision'], [8400000002, 'pytorch/audio']]);
    assert.match(org.logs, /event=reconcile.org_repos org=pytorch repositories=2/);
    // Not the other owner's repository, whose job is not ours to serve.
    const listed = (await log()).filter((e) => /\/repos\/someone\/else\//.test(e.url));
    assert.deepEqual(listed, []);
  } finally {
    await fetch(`${api}/__double/dequeue`, { method: 'POST', body: JSON.stringify(jobs.map((j) => j.id)) });
    const { code } = await org.stop();
    org.cleanup();
    assert.equal(code, 0);
  }
});
