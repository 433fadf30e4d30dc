// A trusted pool gets runners only while GitHub says its runner group is restricted to
// pinned workflows. GitHub is Prism (its own example group: restricted to one workflow at
// refs/heads/main) behind the double, which lays a test's policy over that example as an
// organization owner would change it, or fails the request. The pool's one host is
// libvirt's test driver: what is measured is whether a runner is made at all.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Daemon, githubConfig, workflowJob } from '../integration/lib/daemon.mjs';

const api = process.env.GITHUB_DOUBLE_URL;
const GROUP = 42;

const d = new Daemon({
  pools: `pools:
  - name: nightly
    labels: [nightly-s390x]
    arch: s390x
    image: /default-pool/base.qcow2
    vcpus: 1
    memory_mib: 256
    network: none
    trusted: true
    github_scope: pytorch
    max_runners: 4
    boot_timeout_s: 600
    hosts: [host-a]
`,
  extra: githubConfig({ reconcileIntervalS: 1, runnerGroupId: GROUP, org: 'pytorch' }),
});

const policy = (fields) => fetch(`${api}/__double/runner-group`, { method: 'POST', body: JSON.stringify({ id: GROUP, ...fields }) });
const fault = (list) => fetch(`${api}/__double/faults`, { method: 'POST', body: JSON.stringify(list) });
const registrations = async () => (await (await fetch(`${api}/__double/registrations`)).json()).registrations;
const pool = () => d.cliJson('capacity').pools.find((p) => p.pool === 'nightly');
const live = () => d.cliJson('runners').runners.filter((r) => !['deleted', 'failed'].includes(r.state));
const groupAsks = async () => (await (await fetch(`${api}/__double/log`)).json()).log
  .filter((e) => e.url.startsWith(`/orgs/pytorch/actions/runner-groups/${GROUP}`)).length;

before(async () => {
  await fetch(`${api}/__double/log`, { method: 'DELETE' });
  await fetch(`${api}/__double/stateful`, { method: 'POST' });
  // The owner opened the group to every workflow before hatcheryd ever asked.
  await policy({ restricted_to_workflows: false });
  await d.start();
});

after(async () => {
  const { code, signal } = await d.stop();
  d.cleanup();
  assert.equal(signal, null);
  assert.equal(code, 0);
  const { violations } = await (await fetch(`${api}/__double/log`)).json();
  assert.deepEqual(violations, []);
});

test('an open group: the job waits, says why, and the journal is told at warning level', async () => {
  assert.equal((await d.post('workflow_job', workflowJob('queued', 8200000001, ['self-hosted', 'nightly-s390x']))).status, 202);
  const p = await d.until('the pool to say its group is open', () => {
    const p = pool();
    return p?.waiting?.includes('is open') && p;
  }, { ms: 15000 });
  assert.match(p.waiting, /runner group 42 of pytorch is open: it is not restricted to selected workflows/);
  assert.equal(p.runner_group.verdict, 'open');
  // The log is read as the daemon writes it: waited for, not assumed there yet.
  await d.until('the warning in the log', () => /level=warn event=github.runner_group_open org=pytorch runner_group_id=42/.test(d.logs), { ms: 15000 });
  // Passes go by (one a second), GitHub is asked again each time, and still nothing is made.
  const asked = await groupAsks();
  await d.until('two more questions to GitHub', async () => (await groupAsks()) >= asked + 2, { ms: 15000 });
  assert.equal(await registrations(), 0);
  assert.deepEqual(live(), []);
  // Told once, not once a pass.
  assert.equal(d.logs.match(/event=github.runner_group_open/g).length, 1);
});

test('a group that selects a pull request\'s ref is open too', async () => {
  await policy({ restricted_to_workflows: true, selected_workflows: ['pytorch/pytorch/.github/workflows/nightly.yml@refs/pull/1/merge'] });
  await d.until('the reason to name the workflow', () => pool()?.waiting?.includes('refs/pull/1/merge'), { ms: 15000 });
  assert.equal(await registrations(), 0);
});

test('restricted to a pinned workflow: the runner is made; GitHub failing keeps the last verdict', async () => {
  await policy({ restricted_to_workflows: true, selected_workflows: ['pytorch/pytorch/.github/workflows/nightly.yml@refs/heads/main'] });
  const [runner] = await d.until('a runner for the queued job', () => live().length === 1 && live(), { ms: 15000 });
  assert.equal(runner.pool, 'nightly');
  await d.until('the verdict in the log', () => /event=github.runner_group_restricted org=pytorch runner_group_id=42/.test(d.logs), { ms: 15000 });
  assert.equal(pool().runner_group.verdict, 'restricted');
  // GitHub answers 500s, then a 403 (the App lost its permission): what GitHub said last
  // stands, and the failure is shown.
  await fault([{ method: 'GET', path: 'runner-groups', status: 403, body: { message: 'Resource not accessible by integration' }, times: 50 }]);
  await d.until('the failure to be logged', () => /event=github.runner_group_unchecked .*status=403.*verdict=restricted/.test(d.logs), { ms: 15000 });
  assert.equal(pool().runner_group.verdict, 'restricted');
  assert.equal(live().length, 1);
  await fetch(`${api}/__double/log`, { method: 'DELETE' }); // the faults go too
});

test('opened again while the runner exists: no new runner, the reason is back', async () => {
  await policy({ restricted_to_workflows: false });
  await d.until('the pool to say its group is open again', () => pool()?.waiting?.includes('is open'), { ms: 15000 });
  await d.until('the second warning in the log', () => d.logs.match(/event=github.runner_group_open/g).length === 2, { ms: 15000 });
  // A second queued job gets nothing.
  assert.equal((await d.post('workflow_job', workflowJob('queued', 8200000002, ['self-hosted', 'nightly-s390x']))).status, 202);
  const asked = await groupAsks();
  await d.until('two more questions to GitHub', async () => (await groupAsks()) >= asked + 2, { ms: 15000 });
  assert.equal(live().length, 1);
});
