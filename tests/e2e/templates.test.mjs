// Warm templates end to end (pools with `start: template`), on real emulated guests, with
// GitHub played by Prism behind the GitHub double, as in e2e.test.mjs: hatcheryd builds an
// s390x pool's template, serves jobs from clones of it (each with its own identity), keeps
// a busy clone through a SIGKILL of hatcheryd, boots cold when the template is corrupt and
// rebuilds it when the image changes. A ppc64le pool's templates are refused here (QEMU
// 7.2's pseries under TCG loses its timers on a restore): its jobs are served cold.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { openSync, closeSync, writeSync, statSync, utimesSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { Daemon, githubConfig, workflowJob } from '../integration/lib/daemon.mjs';
import { testGuestHost, testGuestPool } from './test-guest-pool.mjs';

const api = process.env.GITHUB_DOUBLE_URL;
const g = { ppc64le: process.env.GUEST_ppc64le, s390x: process.env.GUEST_s390x };
const volumes = `/tmp/hatchery-e2e-tpl-volumes-${process.pid}`;

const pool = (name, arch) => testGuestPool(name, arch, g[arch], ['max_runners: 1', 'boot_timeout_s: 120', 'start: template']);

const d = new Daemon({
  hostsExtra: testGuestHost(`hatchery-e2e-tpl-${process.pid}`, volumes, 4),
  pools: 'pools:\n' + pool('tpl.s390x', 's390x') + pool('tpl.ppc64le', 'ppc64le'),
  extra: githubConfig({ reconcileIntervalS: 5 }),
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const until = (what, predicate, ms = 180000) => d.until(what, predicate, { ms });
const runners = () => d.cliJson('runners', '--all').runners;
const templates = () => d.cliJson('hosts').hosts.find((h) => h.name === 'local').templates;
const template = (poolName) => templates().find((t) => t.pool === poolName);
const domains = () => spawnSync('virsh', ['-c', 'qemu:///system', 'list', '--name'], { encoding: 'utf8' })
  .stdout.split('\n').filter((n) => n.startsWith('hatchery-'));
let nextJob = 9300000000;

// Plays GitHub for one job: queued, then in_progress to the pool's new idle runner, then
// completed once it finished. Returns the runner's record.
async function serve(poolName, taken) {
  const id = nextJob++;
  assert.equal((await d.post('workflow_job', workflowJob('queued', id, [poolName]))).status, 202);
  const runner = await until(`an idle runner in ${poolName}`, () =>
    runners().find((r) => r.pool === poolName && r.state === 'idle' && !taken.has(r.name)));
  taken.add(runner.name);
  assert.equal((await d.post('workflow_job', workflowJob('in_progress', id, [poolName], runner.name))).status, 202);
  await until(`${runner.name} to finish`, () => runners().find((r) => r.name === runner.name)?.state === 'deleted');
  assert.equal((await d.post('workflow_job', workflowJob('completed', id, [poolName], runner.name))).status, 202);
  const r = runners().find((x) => x.name === runner.name);
  assert.equal(r.exit_code, 0);
  return { id, runner: r };
}

// The runner's hello as hatcheryd logged it: machine-id and nonce.
function helloOf(name) {
  const m = new RegExp(`event=guest.hello guest=${name} [^\\n]*machine_id=([0-9a-f]+) nonce=([0-9a-f]+)`).exec(d.logs);
  assert.ok(m, `a hello of ${name} in the log`);
  return { machineId: m[1], nonce: m[2] };
}

describe('warm templates on real guests', () => {
  const taken = new Set();
  before(async () => {
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=2 exit=0' });
    await d.start();
  });
  after(async () => {
    const { code } = await d.stop();
    for (const name of domains().filter((n) => n.includes('-it-')))
      spawnSync('virsh', ['-c', 'qemu:///system', 'destroy', name]);
    spawnSync('virsh', ['-c', 'qemu:///system', 'pool-destroy', `hatchery-e2e-tpl-${process.pid}`]);
    spawnSync('rm', ['-rf', volumes]);
    d.cleanup();
    assert.equal(code, 0);
  });

  test('the s390x pool gets its template: built, saved, listed with its file', async () => {
    const t = await until('a ready s390x template', () => template('tpl.s390x')?.state === 'ready' && template('tpl.s390x'));
    assert.equal(t.name, 'hatchery-tpl-it-tpl.s390x-0');
    assert.ok(t.file_bytes > 1e6, `its file: ${t.file_bytes} bytes`);
    assert.ok(statSync(`${volumes}/${t.name}.save`).size === t.file_bytes);
    assert.ok(!domains().includes(t.name), 'saved: no domain runs');
    const text = d.cli('hosts').stdout;
    assert.match(text, /TEMPLATE +HOST +POOL +STATE +FILE_MB +RESTORES +REASON/);
    assert.match(text, /hatchery-tpl-it-tpl\.s390x-0 +local +tpl\.s390x +ready +\d+\.\d/);
    // For scripts, the hosts alone: no blank line, no template row.
    const hosts = d.cliJson('hosts').hosts.map((h) => h.name);
    assert.ok(hosts.includes('local'));
    for (const flags of [['--no-headers'], ['-o', 'name']]) {
      const lines = d.cli('hosts', ...flags).stdout.split('\n').slice(0, -1);
      assert.deepEqual(lines.map((l) => l.split(/ +/)[0]), hosts, `hatchery hosts ${flags.join(' ')}`);
    }
  });

  test('the ppc64le pool is refused templates here, with the reason, and serves cold', async () => {
    const t = await until('the ppc64le template slot', () => template('tpl.ppc64le'));
    assert.equal(t.state, 'disabled');
    assert.match(t.reason, /pseries under TCG loses its timers on a restore before QEMU 8.2/);
    const { runner } = await serve('tpl.ppc64le', taken);
    assert.doesNotMatch(d.logs, new RegExp(`event=template.restored guest=${runner.name} `));
  });

  test('two jobs from the one template: restored clones, each with its own identity', async () => {
    const a = await serve('tpl.s390x', taken);
    const b = await serve('tpl.s390x', taken);
    for (const r of [a.runner, b.runner])
      assert.match(d.logs, new RegExp(`event=template.restored guest=${r.name} template=hatchery-tpl-it-tpl.s390x-0`));
    const ha = helloOf(a.runner.name), hb = helloOf(b.runner.name);
    assert.notEqual(ha.machineId, hb.machineId);
    assert.notEqual(ha.nonce, hb.nonce);
    assert.equal(template('tpl.s390x').restores, 2);
    assert.equal(template('tpl.s390x').state, 'ready', 'the template stays for the next runner');
  });

  test('hatcheryd killed under a busy clone: the next one adopts it through its template\'s domain', async () => {
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=20 exit=0' });
    const id = nextJob++;
    assert.equal((await d.post('workflow_job', workflowJob('queued', id, ['tpl.s390x']))).status, 202);
    const runner = await until('an idle clone', () =>
      runners().find((r) => r.pool === 'tpl.s390x' && r.state === 'idle' && !taken.has(r.name)));
    taken.add(runner.name);
    assert.equal((await d.post('workflow_job', workflowJob('in_progress', id, ['tpl.s390x'], runner.name))).status, 202);
    await until(`${runner.name} busy`, () => runners().find((r) => r.name === runner.name).state === 'busy');
    assert.ok(domains().includes('hatchery-tpl-it-tpl.s390x-0'), 'the clone runs under its template\'s name');
    const logFrom = d.logs.length;
    await d.kill9();
    await sleep(1000);
    await d.start();
    await until(`${runner.name} adopted`, () => d.logs.indexOf(`event=runner.adopted runner=${runner.name} `, logFrom) >= 0, 60000);
    // The reconciler must not take the clone (or its overlay) for an orphan meanwhile.
    await until(`${runner.name} to finish`, () => runners().find((r) => r.name === runner.name).state === 'deleted', 120000);
    const r = runners().find((x) => x.name === runner.name);
    assert.equal(r.exit_code, 0);
    assert.equal(r.reason, null);
    assert.equal((await d.post('workflow_job', workflowJob('completed', id, ['tpl.s390x'], runner.name))).status, 202);
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=2 exit=0' });
    const text = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
    assert.doesNotMatch(text, /^hatchery_jobs_lost_total\{[^}]*\} [1-9]/m);
    assert.match(text, /^hatchery_jobs_lost_total\{pool="[^"]+",reason="not_adopted"\} 0$/m);
  });

  test('a corrupt template: the runner boots cold, the template is marked broken', async () => {
    const t = await until('a ready template', () => template('tpl.s390x')?.state === 'ready' && template('tpl.s390x'));
    const file = `${volumes}/${t.name}.save`;
    const fd = openSync(file, 'r+');
    writeSync(fd, Buffer.alloc(1 << 20, 0x5a), 0, 1 << 20, Math.floor(t.file_bytes / 2));
    closeSync(fd);
    const { runner } = await serve('tpl.s390x', taken);
    assert.match(d.logs, new RegExp(`event=template.fallback guest=${runner.name} template=${t.name} reason="[^"]*restore from template[^"]*" action="booted cold"`));
    const after = template('tpl.s390x');
    assert.equal(after.fallbacks, 1);
    assert.ok(['broken', 'checking', 'building', 'ready', 'unknown'].includes(after.state));
  });

  test('a changed image makes the template stale: it is rebuilt', async () => {
    const logFrom = d.logs.length;
    const now = new Date();
    utimesSync(`${g.s390x}/base.qcow2`, now, now);
    await until('the template found stale', () => d.logs.indexOf('event=template.stale template=hatchery-tpl-it-tpl.s390x-0', logFrom) >= 0, 60000);
    await until('the template rebuilt', () => d.logs.indexOf('event=template.saved template=hatchery-tpl-it-tpl.s390x-0', logFrom) >= 0, 120000);
    await until('ready again', () => template('tpl.s390x')?.state === 'ready');
    const { runner } = await serve('tpl.s390x', taken);
    assert.match(d.logs.slice(logFrom), new RegExp(`event=template.restored guest=${runner.name} `));
  });
});
