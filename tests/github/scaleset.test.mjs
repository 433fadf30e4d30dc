// A pool served by a runner scale set: no webhook reaches hatcheryd; it long-polls the
// Actions service. The service is the stand-in written from actions/scaleset's source
// (actions-service.mjs), served by the GitHub double in front of Prism, which checks the
// REST half of the auth chain (the registration token) against GitHub's description. The
// pool's one host is libvirt's test driver: what is measured is the protocol and the
// runners hatcheryd registers and removes, not guests.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import { Daemon, githubConfig, workflowJob } from '../integration/lib/daemon.mjs';

const api = process.env.GITHUB_DOUBLE_URL;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const SET = 'p10-ppc64le';

const pools = `pools:
  - name: power
    labels: [${SET}]
    arch: ppc64le
    image: /default-pool/base.qcow2
    vcpus: 1
    memory_mib: 256
    network: none
    max_runners: 4
    boot_timeout_s: 600
    scale_set: ${SET}
    github_scope: pytorch
    hosts: [host-a]
`;
const github = githubConfig({ reconcileIntervalS: 60, org: 'pytorch', maxRetries: 1 });
// No webhook pool: no webhook secret either.
const d = new Daemon({ pools, extra: github, webhooks: false });

const control = async (path, body) => {
  const r = await fetch(`${api}/__scaleset/${path}`, { method: 'POST', body: JSON.stringify(body ?? {}) });
  const out = await r.json();
  assert.equal(r.status, 200, `${path}: ${JSON.stringify(out)}`);
  return out;
};
const state = async () => (await fetch(`${api}/__scaleset/state`)).json();
const scaleSet = (daemon = d) => daemon.cliJson('github').scale_sets.find((s) => s.name === SET);
const live = (daemon = d) => daemon.cliJson('runners').runners.filter((r) => !['deleted', 'failed'].includes(r.state));
const sql = (daemon, q) => {
  const r = spawnSync('sqlite3', [daemon.db, q], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
};

before(async () => {
  await fetch(`${api}/__double/log`, { method: 'DELETE' });
  // Long polls held for a second, not 50: the tests wait for events, and a stop's poll in
  // flight ends soon.
  await control('settings', { pollMs: 1000 });
  await d.start();
});

after(async () => {
  const { code, signal } = await d.stop();
  d.cleanup();
  assert.equal(signal, null);
  assert.equal(code, 0);
});

test('the scale set is made with the pool\'s labels, and one session polls it', async () => {
  const s = await d.until('a session', async () => {
    const st = await state();
    return st.sessions.length === 1 && st.scaleSets.length === 1 && st;
  }, { ms: 20000 });
  assert.equal(s.scaleSets[0].name, SET);
  assert.deepEqual(s.scaleSets[0].labels, [{ name: SET, type: 'System' }]);
  assert.equal(s.scaleSets[0].runnerGroupId, 1);
  assert.equal(s.sessions[0].ownerName, 'it');
  const view = await d.until('hatchery github to show it polling', () => scaleSet()?.state === 'polling' && scaleSet(), { ms: 20000 });
  assert.equal(view.id, s.scaleSets[0].id);
  assert.equal(view.session_id, s.sessions[0].sessionId);
  assert.match(d.cli('github').stdout, new RegExp(`^scale sets +${SET} \\(pool power, id ${view.id}\\): polling, session ${view.session_id}, last message \\d+`, 'm'));
  // No webhook is taken (there is no secret to check one with), and none was needed: the
  // auth chain went through the REST registration token.
  const hook = await d.post('workflow_job', workflowJob('queued', 8600000001, [SET]));
  assert.equal(hook.status, 404);
  const { log, violations } = await (await fetch(`${api}/__double/log`)).json();
  assert.ok(log.some((e) => e.url === '/orgs/pytorch/actions/runners/registration-token'));
  assert.ok(log.some((e) => e.url === '/actions/runner-registration'));
  assert.deepEqual(violations, []);
});

test('jobs assigned to the scale set get runners with JIT configs from it; messages are deleted once committed', async () => {
  const { jobs } = await control('jobs', { count: 2 });
  const runners = await d.until('two runners', () => live().length === 2 && live(), { ms: 20000 });
  assert.deepEqual(runners.map((r) => r.pool), ['power', 'power']);
  const st = await d.until('both registered through the scale set', async () => {
    const s = await state();
    return s.runners.length === 2 && s.scaleSets[0].messages === 0 && s;
  }, { ms: 20000 });
  assert.deepEqual(st.runners.map((r) => r.name).sort(), runners.map((r) => r.name).sort());
  // The cursor is on disk, and the jobs as the queue told them.
  assert.ok(Number(sql(d, `SELECT last_message_id FROM scale_sets WHERE name = '${SET}'`)) >= 1);
  assert.equal(sql(d, `SELECT count(*) FROM scale_set_jobs WHERE state = 'assigned'`), '2');
  assert.equal(scaleSet().assigned_jobs, 2);

  // A runner takes a job (JobStarted), then finishes it (JobCompleted): both are
  // committed and passed on by runner name (the test driver's guests never boot, so the
  // runner cannot turn busy here: e2e.scaleset does that on a real guest); the statistics
  // drop to one job, and no runner is made for the finished one.
  const [first] = runners;
  await control('start', { jobId: jobs[0], runnerName: first.name });
  await d.until('the start committed', () => sql(d, `SELECT state FROM scale_set_jobs WHERE job_id = '${jobs[0]}'`) === 'running', { ms: 20000 });
  await control('complete', { jobId: jobs[0], result: 'succeeded' });
  await d.until('the completion committed', () => sql(d, `SELECT state || ' ' || result || ' ' || runner_name FROM scale_set_jobs WHERE job_id = '${jobs[0]}'`) === `completed succeeded ${first.name}`, { ms: 20000 });
  await d.until('the statistics to say one', () => scaleSet().assigned_jobs === 1, { ms: 20000 });
  await d.until('the start ignored in the log', () => new RegExp(`event=runner.job_event_ignored runner=${first.name} state=\\w+ cause=job_in_progress`).test(d.logs), { ms: 20000 });
  assert.equal(live().length, 2);
  assert.deepEqual(scaleSet().messages_by_type, { JobAvailable: 0, JobAssigned: 2, JobStarted: 1, JobCompleted: 1 });
  // /metrics says the same, and passes promtool.
  const metrics = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
  assert.equal(spawnSync('promtool', ['check', 'metrics'], { input: metrics, encoding: 'utf8' }).status, 0);
  assert.match(metrics, new RegExp(`^hatchery_scaleset_messages_total\\{scale_set="${SET}",pool="power",type="JobAssigned"\\} 2$`, 'm'));
  assert.match(metrics, new RegExp(`^hatchery_scaleset_assigned_jobs\\{scale_set="${SET}",pool="power"\\} 1$`, 'm'));
  assert.match(metrics, new RegExp(`^hatchery_scaleset_without_session_seconds\\{scale_set="${SET}",pool="power"\\} 0$`, 'm'));
  // The other job is cancelled before any runner took it: nothing is assigned any more.
  await control('complete', { jobId: jobs[1], result: 'canceled' });
  await d.until('the statistics to say none', () => scaleSet().assigned_jobs === 0, { ms: 20000 });
  const { violations } = await (await fetch(`${api}/__double/log`)).json();
  assert.deepEqual(violations, []);
});

test('GHES: a job the service offers (JobAvailable) is acquired once committed, then assigned and served', async () => {
  await control('settings', { acquire: true });
  const before = live().length;
  const mark = (await state()).log.length;
  const { jobs: [job] } = await control('jobs', { count: 1 });
  const st = await d.until('the job acquired and assigned', async () => {
    const s = await state();
    return s.jobs.find((j) => j.jobId === job)?.state === 'assigned' && s;
  }, { ms: 20000 });
  const acquire = st.log.slice(mark).find((e) => e.method === 'POST' && e.path.endsWith('/acquirejobs'));
  assert.ok(acquire, 'acquirejobs was called');
  // Now assigned, it counts: served by a runner not yet busy (the test driver's stay
  // booting), so none is added.
  await d.until('the statistics to count it', () => scaleSet().assigned_jobs === 1, { ms: 20000 });
  assert.equal(live().length, before);
  assert.ok(scaleSet().messages_by_type.JobAvailable >= 1);
  await control('settings', { acquire: false });
  await control('complete', { jobId: job, result: 'canceled' });
  await d.until('nothing assigned again', () => scaleSet().assigned_jobs === 0, { ms: 20000 });
});

test('a second controller on the same scale set waits (409) and takes over once the first stops cleanly', async () => {
  // (Both have the controller id "it" and stores of their own; with nothing assigned, the
  // second makes no runner that its removal would leave behind.)
  const other = new Daemon({ pools, extra: github, webhooks: false });
  await other.start();
  try {
    await other.until('a session conflict', () => (scaleSet(other)?.conflicts ?? 0) >= 1, { ms: 20000 });
    assert.match(scaleSet(other).why, /another session holds the scale set \(409\)/);
    await other.until('the conflict in the log', () => /level=warn event=scaleset.session_conflict/.test(other.logs), { ms: 20000 });
    assert.equal((await state()).sessions.length, 1);
    // The first stops: its session is deleted, so the second need not wait out a linger.
    const { code } = await d.stop();
    assert.equal(code, 0);
    await d.until('the session deleted in the log', () => /event=scaleset.session_deleted pool=power/.test(d.logs), { ms: 20000 });
    await other.until('the second polling', () => scaleSet(other)?.state === 'polling', { ms: 30000 });
    // The first's runner stays: the second adopts nothing of the first's (another
    // controller id would; this one shares it), and the assigned job still wants one.
  } finally {
    const { code } = await other.stop();
    other.cleanup();
    assert.equal(code, 0);
  }
  await d.start();
  await d.until('the first polling again', () => scaleSet()?.state === 'polling', { ms: 30000 });
});

test('the service\'s faults: an expired queue token, an evicted session, a vanished scale set, an admin token near its end', async () => {
  const before = scaleSet();
  // The queue token lives 1.5 s: polls answer 401 and the session is refreshed.
  await control('settings', { queueTtlMs: 1500 });
  await control('evict'); // a new session, with the short-lived token
  await d.until('a session refresh after a 401', async () => {
    const st = await state();
    return st.log.some((e) => e.method === 'PATCH' && /\/sessions\//.test(e.path));
  }, { ms: 30000 });
  await control('settings', { queueTtlMs: 3600_000 });
  await d.until('polling again', () => scaleSet()?.state === 'polling', { ms: 30000 });

  // GitHub deleted the scale set: it is made again, its queue starts anew.
  const oldId = (await state()).scaleSets[0].id;
  await control('vanish');
  await control('evict');
  const remade = await d.until('the scale set made again', async () => {
    const st = await state();
    return st.scaleSets.length === 1 && st.scaleSets[0].id !== oldId && st.sessions.length === 1 && st;
  }, { ms: 30000 });
  assert.equal(remade.scaleSets[0].name, SET);
  await d.until('the scale set made again in the log', () => /event=scaleset.vanished|event=scaleset.create/.test(d.logs), { ms: 20000 });

  // The admin token revoked (401): renewed, once. The new one lives 61 s: past its first
  // second it is under the library's 60 s margin, so the next call renews it first.
  await control('settings', { adminTtlS: 61 });
  const refreshes = scaleSet().token_refreshes;
  await control('revoke');
  await control('evict');
  await d.until('the revoked admin token renewed', () => scaleSet().token_refreshes >= refreshes + 1, { ms: 30000 });
  await d.until('a token near its end renewed', async () => {
    await control('evict'); // makes admin calls (a new session)
    return scaleSet().token_refreshes >= refreshes + 2;
  }, { ms: 30000, everyMs: 500 });
  await control('settings', { adminTtlS: 3600 });
  assert.ok(scaleSet().token_refreshes > before.token_refreshes);

  // A delete of a committed message fails (500, past the client's one retry): it is
  // deleted before the next poll.
  const next = (await state()).scaleSets[0].nextMessageId;
  await fetch(`${api}/__scaleset/faults`, { method: 'POST', body: JSON.stringify([{ method: 'DELETE', path: `/messages/${next}$`, status: 500, times: 3 }]) });
  const { jobs: [extra] } = await control('jobs', { count: 1 });
  await d.until('the failed delete done again', () => new RegExp(`event=scaleset.redelete pool=power scale_set=${SET} message=${next}\n`).test(d.logs), { ms: 60000 });
  await d.until('no message left in the queue', async () => (await state()).scaleSets[0].messages === 0, { ms: 60000 });
  await control('complete', { jobId: extra, result: 'canceled' });

  // Injected 5xx on the poll and a 200 with an empty body: still polling afterwards.
  await fetch(`${api}/__scaleset/faults`, { method: 'POST', body: JSON.stringify([{ method: 'GET', path: '/messages', status: 503, times: 2 }, { method: 'GET', path: '/messages', emptyBody: true, times: 1 }]) });
  await d.until('polling after the faults', async () => scaleSet()?.state === 'polling' && scaleSet().polls > before.polls + 3, { ms: 30000 });
  const { violations } = await (await fetch(`${api}/__double/log`)).json();
  assert.deepEqual(violations, []);
});

test('kill -9 between the commit and the delete: the lingering session is waited out, the message deleted, nothing lost, doubled or leaked', async () => {
  await control('settings', { lingerMs: 3000 });
  const before = await state();
  const mark = before.log.length;
  const assignedBefore = before.scaleSets[0].statistics.totalAssignedJobs;
  // The delete of the next message never answers: hatcheryd is killed while it waits.
  const next = before.scaleSets[0].nextMessageId;
  await fetch(`${api}/__scaleset/faults`, { method: 'POST', body: JSON.stringify([{ method: 'DELETE', path: `/messages/${next}$`, hang: true }]) });
  const { jobs: [job] } = await control('jobs', { count: 1 });
  await d.until('the job committed', () => sql(d, `SELECT count(*) FROM scale_set_jobs WHERE job_id = '${job}'`) === '1', { ms: 20000 });
  const committed = Number(sql(d, `SELECT last_message_id FROM scale_sets WHERE name = '${SET}'`));
  // Killed once its delete has reached the service (and hangs there).
  await d.until('the delete sent', async () => (await state()).log.slice(mark).some((e) => e.method === 'DELETE' && e.path.endsWith(`/messages/${committed}`)), { ms: 20000 });
  await d.kill9();
  assert.equal((await state()).scaleSets[0].messages, 1, 'the message is still in the queue');
  await d.start();
  // The dead one's session lingers: 409 first, then a session of its own.
  await d.until('a session after the linger', () => { const v = scaleSet(); return v?.state === 'polling' && v.conflicts >= 1; }, { ms: 30000 });
  // The message it committed and never deleted, deleted by the next process.
  await d.until('the committed message deleted again', () => new RegExp(`event=scaleset.redelete pool=power scale_set=${SET} message=${committed}`).test(d.logs), { ms: 30000 });
  const after = await d.until('the message deleted and the runners settled', async () => {
    const st = await state();
    const want = st.scaleSets[0].statistics.totalAssignedJobs;
    return st.scaleSets[0].messages === 0 && live().length === want && st.runners.length === want && st;
  }, { ms: 30000 });
  // One more job than before, one runner each, and every registration is a live runner's:
  // the killed process's are removed through the scale set, none doubled.
  assert.equal(after.scaleSets[0].statistics.totalAssignedJobs, assignedBefore + 1);
  assert.deepEqual(after.runners.map((r) => r.name).sort(), live().map((r) => r.name).sort());
  assert.equal(sql(d, `SELECT count(*) FROM scale_set_jobs WHERE job_id = '${job}'`), '1');
  const { violations } = await (await fetch(`${api}/__double/log`)).json();
  assert.deepEqual(violations, []);
});

// Last: it leaves a second scale set in the stand-in, which the tests above take as the only one.
test('an enterprise scope: the installation, the registration token and the config URL are the enterprise\'s', async () => {
  const ENT = 'ent-s390x';
  const other = new Daemon({
    pools: pools.replace(`labels: [${SET}]`, `labels: [${ENT}]`).replace(`scale_set: ${SET}`, `scale_set: ${ENT}`)
      .replace('github_scope: pytorch', 'github_scope: octo-corp'),
    extra: githubConfig({ reconcileIntervalS: 60, enterprise: 'octo-corp', maxRetries: 1 }),
    webhooks: false,
  });
  const mark = (await (await fetch(`${api}/__double/log`)).json()).log.length;
  await other.start();
  try {
    const view = await other.until('the enterprise\'s scale set polling', () => {
      const v = other.cliJson('github').scale_sets.find((x) => x.name === ENT);
      return v?.state === 'polling' && v;
    }, { ms: 20000 });
    assert.deepEqual(other.cliJson('github').scopes, [{ kind: 'enterprise', name: 'octo-corp', runner_group_id: 1 }]);
    const { jobs: [job] } = await control('jobs', { count: 1, scaleSet: ENT });
    const runner = await other.until('a runner for the enterprise\'s job', () => live(other)[0], { ms: 20000 });
    assert.equal(runner.pool, 'power');
    const st = await state();
    assert.ok(st.runners.some((r) => r.name === runner.name && r.runnerScaleSetId === view.id), 'its JIT config came from the scale set');
    const { log, violations } = await (await fetch(`${api}/__double/log`)).json();
    const mine = log.slice(mark);
    assert.ok(mine.some((e) => e.method === 'GET' && e.url === '/enterprises/octo-corp/installation'));
    assert.ok(mine.some((e) => e.method === 'POST' && e.url === '/enterprises/octo-corp/actions/runners/registration-token'));
    const registration = mine.find((e) => e.url === '/actions/runner-registration');
    assert.equal(JSON.parse(registration.body).url, `${api}/enterprises/octo-corp`);
    assert.deepEqual(violations, []);
    await control('complete', { jobId: job, result: 'canceled' });
  } finally {
    const { code } = await other.stop();
    other.cleanup();
    assert.equal(code, 0);
  }
});
