// From queued job to destroyed guest, on real emulated guests. The test plays GitHub's
// side that no description can: it sends the webhooks (signed like GitHub) and, when a
// runner is online, tells hatcheryd a job went to it (in_progress), as GitHub would.
// Last, libvirtd is restarted under running guests.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { Daemon, githubConfig, memoryHolds, workflowJob } from '../integration/lib/daemon.mjs';
import { QEMU_GID, firewall, isolationTargets } from './isolation.mjs';

const api = process.env.GITHUB_DOUBLE_URL;
// ctest runs this file as two tests (tests/CMakeLists.txt): e2e.isolation (E2E_PART=
// isolation) runs the one test that changes this machine's firewall and egress network,
// under the host_network lock; e2e.real_guests (E2E_PART=guests) the others, which need
// only the test libvirtd and so run beside the stock host. Without E2E_PART, all of them.
const part = process.env.E2E_PART ?? 'all';
const inPart = (isolation) => ({ skip: part !== 'all' && (part === 'isolation') !== isolation && `run by the other part (E2E_PART=${part})` });
const libvirtd = fileURLToPath(new URL('../libvirt/libvirtd.sh', import.meta.url));
const g = { ppc64le: process.env.GUEST_ppc64le, s390x: process.env.GUEST_s390x };

// A copy of the ppc64le test guest whose manifest the tests break on purpose.
const badDir = mkdtempSync(join(tmpdir(), 'hatchery-e2e-image-'));
for (const f of ['base.qcow2', 'base.qcow2.json', 'kernel', 'initrd']) copyFileSync(join(g.ppc64le, f), join(badDir, f));
const badManifest = join(badDir, 'base.qcow2.json');
const goodManifest = readFileSync(badManifest, 'utf8');

function pool(name, label, arch, { max = 2, minIdle = 0, dir = g[arch], command = '/usr/bin/fake-runner', network = 'none', scaleSet = null } = {}) {
  const ppc = arch === 'ppc64le';
  return `  - name: ${name}
    labels: [${label}]${scaleSet ? `\n    scale_set: ${scaleSet}` : ''}
    arch: ${arch}
    image: ${dir}/base.qcow2
    kernel: ${dir}/kernel
    initrd: ${dir}/initrd
    cmdline: "${ppc ? 'console=hvc0' : 'console=ttysclp0'} quiet"
    firmware: ${ppc ? 'vof' : 'default'}
    network: ${network}
    disk_mib: 64
    vcpus: 1
    memory_mib: 512
    min_idle: ${minIdle}
    max_runners: ${max}
    boot_timeout_s: 120
    runner_command: [${command}]
    hosts: [local]
`;
}

const localHost = (guests) => `  - name: local
    uri: qemu:///system
    vcpus: ${guests}
    memory_mib: ${guests * 1024}
    max_guests: ${guests}
    storage_pool: hatchery-e2e-${process.pid}
    storage_dir: /tmp/hatchery-e2e-volumes-${process.pid}
`;
const otherPools = (s390xMax) =>
  pool('linux.s390x', 'linux.s390x', 's390x', { max: s390xMax }) +
  pool('linux.s390x.warm', 'linux.s390x.warm', 's390x', { max: 1, minIdle: 1 }) +
  pool('image.checked', 'image.checked', 'ppc64le', { max: 1, dir: badDir }) +
  pool('no.runner', 'no.runner', 'ppc64le', { max: 1, command: '/opt/actions-runner/bin/Runner.Listener' }) +
  pool('net.ppc64le', 'net.ppc64le', 'ppc64le', { max: 1, network: 'user' }) +
  pool('power.scaleset', 'e2e-ppc64le', 'ppc64le', { max: 1, scaleSet: 'e2e-ppc64le' });
const config = {
  hostsExtra: localHost(4),
  pools: 'pools:\n' + pool('linux.ppc64le', 'linux.ppc64le', 'ppc64le') + otherPools(1),
  extra: githubConfig({ reconcileIntervalS: 5 }),
};

const d = new Daemon(config);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let nextJob = 9100000000;

const until = (what, predicate, ms = 180000) => d.until(what, predicate, { ms });

const payload = (action, id, label, runner = null) => workflowJob(action, id, [label], runner);

const runners = () => d.cliJson('runners', '--all').runners;
const domains = () => spawnSync('virsh', ['-c', 'qemu:///system', 'list', '--name'], { encoding: 'utf8' })
  .stdout.split('\n').filter((n) => n.startsWith('hatchery-it-'));

// Plays GitHub for one job: queued, then in_progress to whichever idle runner of the pool
// is free, then completed once that runner has finished.
// The runners are asked for without blocking node (the CLI as a child it waits for, not
// spawnSync): while several serve at once, a blocked node would hold another's webhook
// between its connection and its bytes past hatcheryd's read timeout (seen: 408 under load).
async function serve(label, poolName, taken) {
  const id = nextJob++;
  const all = async () => (await d.cliJsonAsync('runners', '--all')).runners;
  assert.equal((await d.post('workflow_job', payload('queued', id, label))).status, 202);
  const runner = await until(`an idle runner in ${poolName}`, async () =>
    (await all()).find((r) => r.pool === poolName && r.state === 'idle' && !taken.has(r.name)));
  taken.add(runner.name);
  assert.equal((await d.post('workflow_job', payload('in_progress', id, label, runner.name))).status, 202);
  await until(`${runner.name} to finish`, async () => ['deleting', 'deleted'].includes((await all()).find((r) => r.name === runner.name)?.state));
  assert.equal((await d.post('workflow_job', payload('completed', id, label, runner.name))).status, 202);
  return { id, runner: runner.name };
}

// Waits for a runner's end, which must be a job's success: exit 0 and no reason.
async function endsCleanly(name) {
  await until(`${name} to finish`, () => runners().find((r) => r.name === name).state === 'deleted', 120000);
  const r = runners().find((x) => x.name === name);
  assert.equal(r.exit_code, 0);
  assert.equal(r.reason, null);
}

// Plays GitHub up to a busy runner: a job queued, a new idle runner of the pool, and the
// job given to it.
async function busyRunner(pool) {
  const before = new Set(runners().map((r) => r.name));
  const id = nextJob++;
  assert.equal((await d.post('workflow_job', payload('queued', id, pool))).status, 202);
  const runner = await until(`an idle runner in ${pool}`, () =>
    runners().find((r) => r.pool === pool && r.state === 'idle' && !before.has(r.name)));
  assert.equal((await d.post('workflow_job', payload('in_progress', id, pool, runner.name))).status, 202);
  await until(`${runner.name} busy`, () => runners().find((r) => r.name === runner.name).state === 'busy');
  return { id, runner };
}

describe('end to end on real guests', () => {
  const taken = new Set();
  before(async () => {
    await fetch(`${api}/__double/log`, { method: 'DELETE' });
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=4 exit=0' });
    await d.start();
  });
  after(async () => {
    const { code } = await d.stop();
    // Guests outlive hatcheryd by design (the next one adopts them): the warm pool's idle
    // runner is still up. Ours go with the test.
    const left = spawnSync('virsh', ['-c', 'qemu:///system', 'list', '--name'], { encoding: 'utf8' }).stdout
      .split('\n').filter((n) => n.startsWith('hatchery-it-'));
    for (const name of left) spawnSync('virsh', ['-c', 'qemu:///system', 'destroy', name]);
    spawnSync('virsh', ['-c', 'qemu:///system', 'pool-destroy', `hatchery-e2e-${process.pid}`]);
    d.cleanup();
    rmSync(badDir, { recursive: true, force: true });
    assert.equal(code, 0);
  });

  test('one ppc64le job: a fresh Power guest serves it and is gone afterwards', inPart(false), async () => {
    // This job's JIT config carries a mark no other byte in hatcheryd has.
    const mark = `jitmark-${randomBytes(12).toString('hex')}`;
    await fetch(`${api}/__double/jit`, { method: 'POST', body: `sleep=4 exit=0 ${mark}` });
    const { runner } = await serve('linux.ppc64le', 'linux.ppc64le', taken);
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=4 exit=0' });
    await until(`${runner} deleted`, () => runners().find((r) => r.name === runner).state === 'deleted');
    // Sent once, then wiped everywhere it passed: GitHub's answer in curl's buffer and
    // ours, the parsed JSON, the runner record, the channel message. The scan finds what
    // hatcheryd must hold (the webhook secret), so it can find the mark.
    // A runner made meanwhile (the warm pool's min_idle) holds its config, marked too,
    // until its agent says hello: that copy is legitimate until then.
    await until('no runner waiting to send its config', () =>
      !runners().some((r) => ['pending', 'creating', 'booting'].includes(r.state)));
    const held = memoryHolds(d.proc.pid, d.secret);
    assert.ok(held.found.length > 0, `the scan works: the webhook secret is found (${held.scanned} bytes read)`);
    const leaked = memoryHolds(d.proc.pid, mark);
    console.log(`memory scan of hatcheryd after the job: ${leaked.scanned} bytes read, the JIT config in ${leaked.found.length} regions`);
    assert.deepEqual(leaked.found, [], 'the JIT config is wiped from hatcheryd\'s memory');
    const r = runners().find((x) => x.name === runner);
    assert.equal(r.exit_code, 0);
    assert.ok(!domains().includes(runner), 'domain gone');
    const { log, violations } = await (await fetch(`${api}/__double/log`)).json();
    assert.deepEqual(violations, []);
    assert.ok(log.some((e) => e.method === 'POST' && e.url.endsWith('/generate-jitconfig') && JSON.parse(e.body).name === runner));
    assert.ok(log.some((e) => e.method === 'DELETE' && /\/actions\/runners\/\d+$/.test(e.url)), 'GitHub runner deleted');
    const logs = d.cli('logs', runner);
    assert.equal(logs.code, 0);
    assert.match(logs.stdout, /hatchery-agent: runner .* started/);
    assert.ok(!logs.stdout.includes('sleep=4'), 'no JIT config in the console log');
    // The job's wait for a runner online, and for its start, are observed, in its pool's
    // series; the guest's boot in buckets from 0.5 s, the job's wait in buckets up to 4 h.
    const text = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
    const count = (name) => Number(new RegExp(`^${name}_count\\{pool="linux.ppc64le"\\} (\\d+)$`, 'm').exec(text)?.[1]);
    assert.equal(count('hatchery_job_runner_online_seconds'), 1);
    assert.equal(count('hatchery_job_start_seconds'), 1);
    assert.ok(count('hatchery_guest_boot_seconds') >= 1);
    assert.match(text, /^hatchery_guest_boot_seconds_bucket\{pool="linux.ppc64le",le="0.5"\} \d+$/m);
    assert.match(text, /^hatchery_job_start_seconds_bucket\{pool="linux.ppc64le",le="14400"\} 1$/m);
  });

  test('one s390x job', inPart(false), async () => {
    const { runner } = await serve('linux.s390x', 'linux.s390x', taken);
    await until(`${runner} deleted`, () => runners().find((r) => r.name === runner).state === 'deleted');
    assert.ok(!domains().includes(runner));
  });

  test('one ppc64le job through a runner scale set: no webhook, a fresh guest serves it, and it, its registration and its JIT config are gone after', inPart(false), async () => {
    const control = (path, body) => fetch(`${api}/__scaleset/${path}`, { method: 'POST', body: JSON.stringify(body) }).then((r) => r.json());
    const mark = `jitmark-${randomBytes(12).toString('hex')}`;
    await control('settings', { jitExtra: `sleep=4 exit=0 ${mark}` });
    const before = new Set(runners().map((r) => r.name));
    const { jobs: [job] } = await control('jobs', { count: 1, scaleSet: 'e2e-ppc64le' });
    const runner = await until('an idle runner of the scale set', () =>
      runners().find((r) => r.pool === 'power.scaleset' && r.state === 'idle' && !before.has(r.name)));
    // GitHub gives the job to that runner: JobStarted, from the queue.
    assert.deepEqual(await control('start', { jobId: job, runnerName: runner.name }), {});
    await until(`${runner.name} busy`, () => runners().find((r) => r.name === runner.name).state === 'busy');
    await until(`${runner.name} to finish`, () => ['finishing', 'deleting', 'deleted'].includes(runners().find((r) => r.name === runner.name).state));
    assert.deepEqual(await control('complete', { jobId: job, result: 'succeeded' }), {});
    await endsCleanly(runner.name);
    assert.ok(!domains().includes(runner.name), 'domain gone');
    const st = await (await fetch(`${api}/__scaleset/state`)).json();
    const set = st.scaleSets.find((x) => x.name === 'e2e-ppc64le');
    assert.equal(set.messages, 0, 'every message deleted from the queue');
    assert.equal(set.statistics.totalAssignedJobs, 0);
    assert.deepEqual(st.runners.filter((r) => r.runnerScaleSetId === set.id), [], 'the registration is gone');
    assert.deepEqual(st.violations, []);
    await control('settings', { jitExtra: '' });
    const leaked = memoryHolds(d.proc.pid, mark);
    assert.deepEqual(leaked.found, [], 'the scale set\'s JIT config is wiped from hatcheryd\'s memory');
    const logs = d.cli('logs', runner.name);
    assert.match(logs.stdout, /hatchery-agent: runner .* started/);
    assert.ok(!logs.stdout.includes(mark), 'no JIT config in the console log');
  });

  test('a burst of 4 jobs into a pool with max_runners 2: all served, never more than 2 guests', inPart(false), async () => {
    let most = 0;
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        // Asked without blocking node: the jobs' webhooks go out meanwhile.
        const all = (await d.cliJsonAsync('runners', '--all')).runners;
        const live = all.filter((r) => r.pool === 'linux.ppc64le' && !['deleted', 'failed'].includes(r.state)).length;
        most = Math.max(most, live);
        await sleep(100);
      }
    })();
    const served = await Promise.all([0, 1, 2, 3].map(() => serve('linux.ppc64le', 'linux.ppc64le', taken)));
    watching = false;
    await watcher;
    assert.equal(new Set(served.map((s) => s.id)).size, 4);
    assert.ok(most <= 2, `at most 2 at once, saw ${most}`);
    const jobs = d.cliJson('jobs', '--status', 'completed').jobs.filter((j) => served.some((s) => s.id === j.id));
    assert.equal(jobs.length, 4);
  });

  test('min_idle 1 keeps one registered runner waiting', inPart(false), async () => {
    // The stand-in runner ends after its `sleep=4` even without a job, so the warm runner is
    // replaced every few seconds and is idle for about four: the CLI and /metrics are read
    // together until both show it (once, read a moment apart, the metric missed it).
    const text = await until('a warm runner, idle in the CLI, in capacity and on /metrics', async () => {
      const t = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
      const idle = runners().some((r) => r.pool === 'linux.s390x.warm' && r.state === 'idle');
      const cap = d.cliJson('capacity').pools.find((p) => p.pool === 'linux.s390x.warm');
      return idle && cap.runners >= 1 &&
        t.includes('\nhatchery_runners{pool="linux.s390x.warm",state="idle"} 1\n') ? t : null;
    });
    assert.equal(spawnSync('promtool', ['check', 'metrics'], { input: text }).status, 0);
  });

  test('without the guest firewall no networked guest starts; with it a hostile job reaches the internet, and nothing of its host', inPart(true), async () => {
    const { targets, loPort, egress, guarded: want, close } = await isolationTargets(d.port);
    try {
      // Beside the network, what the job sees of its host, as e2e.containers asks in a
      // container: a file of the host's anyone there may read, and the host's processes.
      const hostFile = join(d.dir, 'host-file');
      writeFileSync(hostFile, 'the host\n', { mode: 0o644 });
      await fetch(`${api}/__double/jit`, { method: 'POST', body: `inspect=1 hostfile=${hostFile} probe=${targets.join('+')} exit=0` });
      // No firewall: the job waits, with the reason, and the host shows it.
      assert.equal(spawnSync(firewall, ['remove', '--group', QEMU_GID]).status, 0);
      const before = new Set(runners().map((r) => r.name));
      const id = nextJob++;
      assert.equal((await d.post('workflow_job', payload('queued', id, 'net.ppc64le'))).status, 202);
      const why = () => d.jobs().find((j) => j.id === id)?.waiting ?? '';
      await until('the unsafe-host reason', () => /unsafe: the guest firewall is not applied/.test(why()), 30000);
      const host = d.cliJson('hosts').hosts.find((h) => h.guest_isolation === 'missing');
      assert.ok(host, 'a host shown without guest isolation');
      assert.match(host.unsafe, /guest firewall is not applied/);
      assert.match(d.cli('hosts').stdout, /missing/);
      const metrics = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
      assert.match(metrics, new RegExp(`hatchery_host_guest_isolation\\{host="${host.name}",state="missing"\\} 1`));
      // Applied for another group than the one QEMU runs in (its DAC label, gid 64057):
      // its rules keep nothing off the host, and the host stays unsafe, saying why.
      const wrong = String(Number(QEMU_GID) + 1);
      const misapplied = spawnSync(firewall, ['apply', '--group', wrong], { encoding: 'utf8' });
      assert.equal(misapplied.status, 0, misapplied.stderr);
      await until('the wrong-group reason', () =>
        why().includes(`the guest firewall matches gid ${wrong}, but QEMU runs in gid ${QEMU_GID} here`), 30000);
      assert.equal(spawnSync(firewall, ['remove', '--group', wrong]).status, 0);
      await new Promise((r) => setTimeout(r, 3000));
      assert.equal(runners().filter((r) => r.pool === 'net.ppc64le' && !before.has(r.name)).length, 0,
        'a networked guest started on a host without its firewall');
      // The firewall applied: the same job is served, and its probes reach only the outside.
      const applied = spawnSync(firewall, ['apply', '--group', QEMU_GID], { encoding: 'utf8' });
      assert.equal(applied.status, 0, applied.stderr);
      const runner = await until('an idle runner in net.ppc64le', () =>
        runners().find((r) => r.pool === 'net.ppc64le' && r.state === 'idle' && !before.has(r.name)));
      assert.equal(d.cliJson('hosts').hosts.find((h) => h.name === host.name).guest_isolation, 'in_place');
      assert.equal((await d.post('workflow_job', payload('in_progress', id, 'net.ppc64le', runner.name))).status, 202);
      await until(`${runner.name} to finish`, () => ['deleting', 'deleted'].includes(runners().find((r) => r.name === runner.name)?.state));
      assert.equal((await d.post('workflow_job', payload('completed', id, 'net.ppc64le', runner.name))).status, 202);
      const logs = d.cli('logs', runner.name);
      const report = /hatchery: job report: (\{.*\})/.exec(logs.stdout);
      assert.ok(report, `no report in ${runner.name}'s log:\n${logs.stdout.slice(-2000)}`);
      const seen = JSON.parse(report[1]);
      const guarded = seen.probes;
      assert.deepEqual(guarded, want);
      // A kernel of its own: none of the host's processes, files or interfaces.
      assert.equal(seen.host_processes, 'none');
      assert.equal(seen.host_file, 'unreadable');
      assert.equal(seen.agents, '1');
      assert.ok(!seen.interfaces.split(' ').includes('hegress0'), `interfaces: ${seen.interfaces}`);
      console.log(`from inside a VM (the test guest, its runner as root): ${JSON.stringify(seen)}`);
      assert.equal(guarded[egress.target], 'open');
      assert.notEqual(guarded[`10.0.2.2:${loPort}`], 'open');
      console.log(`isolation probes with guest-firewall.sh: ${JSON.stringify(guarded)}`);
    } finally {
      spawnSync(firewall, ['remove', '--group', QEMU_GID]);
      close();
      await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=4 exit=0' });
    }
  });

  test('an image built for another arch, or without a manifest, gets no runner, with the reason', inPart(false), async () => {
    const id = nextJob++;
    writeFileSync(badManifest, goodManifest.replace('"arch": "ppc64le"', '"arch": "s390x"'));
    assert.equal((await d.post('workflow_job', payload('queued', id, 'image.checked'))).status, 202);
    const why = () => d.jobs().find((j) => j.id === id)?.waiting;
    await until('the wrong-arch reason', () => /image is built for s390x, the pool is ppc64le/.test(why() ?? ''), 30000);
    let p = d.cliJson('pools').pools.find((x) => x.name === 'image.checked');
    assert.match(p.image_error, /built for s390x/);
    assert.match(d.cli('pools').stdout, /error: image is built for s390x/);
    unlinkSync(badManifest);
    await until('the missing-manifest reason', () => /base\.qcow2\.json: missing/.test(why() ?? ''), 30000);
    p = d.cliJson('pools').pools.find((x) => x.name === 'image.checked');
    assert.match(p.image_error, /missing/);
    assert.ok(!runners().some((r) => r.pool === 'image.checked'), 'no runner was made');
    // Restored, the pool serves again.
    writeFileSync(badManifest, goodManifest);
    await until('a runner once the manifest is back', () => runners().find((r) => r.pool === 'image.checked' && r.state === 'idle'), 120000);
    p = d.cliJson('pools').pools.find((x) => x.name === 'image.checked');
    assert.equal(p.image_manifest.arch, 'ppc64le');
    assert.equal(p.image_error, undefined);
    const text = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
    assert.match(text, /hatchery_pool_image_info\{pool="image.checked",arch="ppc64le",debian="bookworm",.*runner="stand-in".*\} 1/);
    assert.equal((await d.post('workflow_job', payload('completed', id, 'image.checked'))).status, 202);
  });

  test('an image without its runner: the runner fails with exit 127 and its meaning, and nothing is left', inPart(false), async () => {
    const id = nextJob++;
    assert.equal((await d.post('workflow_job', payload('queued', id, 'no.runner'))).status, 202);
    // Several may come and go meanwhile: look for one that has ended.
    const r = await until('the runner to fail', () =>
      runners().find((y) => y.pool === 'no.runner' && ['failed', 'deleting', 'deleted'].includes(y.state) && y.reason));
    assert.match(r.reason, /runner exited 127: the runner could not be started/);
    // An image fault backs the pool off instead of boot-looping.
    await until('the pool to back off', () => /runner\(s\) failed in a row: retrying in/.test(d.jobs().find((j) => j.id === id)?.waiting ?? ''), 60000);
    assert.equal((await d.post('workflow_job', payload('completed', id, 'no.runner'))).status, 202);
    await until(`${r.name} deleted`, () => runners().find((x) => x.name === r.name).state === 'deleted', 60000);
    assert.ok(!domains().includes(r.name));
  });

  test('a Listener return code is the runner\'s reason: 5, session conflict', inPart(false), async () => {
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=3 exit=5' });
    const { runner } = await serve('linux.ppc64le', 'linux.ppc64le', taken);
    await until(`${runner} deleted`, () => runners().find((r) => r.name === runner).state === 'deleted');
    const r = runners().find((x) => x.name === runner);
    assert.equal(r.exit_code, 5);
    assert.match(r.reason, /runner exited 5: session conflict/);
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=4 exit=0' });
  });

  test('hatcheryd killed (SIGKILL) under a busy ppc64le runner: the next hatcheryd adopts it and its job finishes', inPart(false), async () => {
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=30 exit=0' });
    const { id, runner } = await busyRunner('linux.ppc64le');
    const logFrom = d.logs.length;
    await d.kill9();
    await sleep(2000);
    assert.ok(domains().includes(runner.name), 'the guest outlives hatcheryd');
    const t0 = Date.now();
    await d.start();
    await until(`${runner.name} adopted`, () => d.logs.indexOf(`event=runner.adopted runner=${runner.name} `, logFrom) >= 0, 60000);
    const adoptMs = Date.now() - t0;
    assert.equal(runners().find((r) => r.name === runner.name).state, 'busy');
    // The job runs on to its end, and its exit reaches the new hatcheryd.
    await endsCleanly(runner.name);
    assert.equal((await d.post('workflow_job', payload('completed', id, 'linux.ppc64le', runner.name))).status, 202);
    assert.ok(!domains().includes(runner.name));
    const text = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
    assert.match(text, /^hatchery_runners_adopted_total [1-9]/m);
    assert.doesNotMatch(text, /^hatchery_jobs_lost_total\{[^}]*\} [1-9]/m);
    assert.match(text, /^hatchery_jobs_lost_total\{pool="[^"]+",reason="not_adopted"\} 0$/m);
    assert.match(text, /^hatchery_runner_transitions_refused_total 0$/m);
    assert.doesNotMatch(text, /^hatchery_guest_transitions_refused_total\{[^}]*\} [1-9]/m);
    assert.match(text, /^hatchery_guest_transitions_refused_total\{host="[^"]+"\} 0$/m);
    console.log(`adoption: ${adoptMs} ms from the restart to the agent's resumed (${/event=runner.adopted [^\n]*seconds=([0-9.]+)/.exec(d.logs.slice(logFrom))?.[1]} s by hatcheryd's clock)`);
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=4 exit=0' });
  });

  test('a job that ends while hatcheryd is down is reported at the restart', inPart(false), async () => {
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=8 exit=0' });
    const { id, runner } = await busyRunner('linux.ppc64le');
    const logFrom = d.logs.length;
    await d.kill9();
    // The runner exits while nobody listens (the agent says so on the guest's console, a
    // file of the host's); the agent keeps its exit and its guest up.
    const consoleLog = join(d.dir, 'state', 'logs', `${runner.name}.console.log`);
    await until(`${runner.name}'s runner to exit, on its console`, () => {
      try { return /hatchery-agent: runner exited 0/.test(readFileSync(consoleLog, 'utf8')); } catch { return false; }
    }, 120000);
    await sleep(2000); // what the agent does next, were it to power off (it must not)
    assert.ok(domains().includes(runner.name), 'the guest waits for a controller to take its exit');
    await d.start();
    await endsCleanly(runner.name);
    assert.match(d.logs.slice(logFrom), new RegExp(`event=guest.resumed guest=${runner.name} agent_state=exited`));
    assert.equal((await d.post('workflow_job', payload('completed', id, 'linux.ppc64le', runner.name))).status, 202);
    assert.ok(!domains().includes(runner.name));
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=4 exit=0' });
  });

  test('libvirtd restarted mid-run: a guest that kept running goes on, one that died meanwhile is failed and replaced', inPart(false), async () => {
    // Runners that outlive the restart: the stand-in runner waits 90 s before exiting (40 s
    // was seen to run out once, at 53 s from the keeper's start to its check, with the
    // warm s390x replacement booting on a loaded machine).
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=90 exit=0' });
    const before = new Set(runners().map((r) => r.name));
    const id = nextJob++;
    assert.equal((await d.post('workflow_job', payload('queued', id, 'linux.ppc64le'))).status, 202);
    const keeper = await until('an idle ppc64le runner', () =>
      runners().find((r) => r.pool === 'linux.ppc64le' && r.state === 'idle' && !before.has(r.name)));
    const victim = await until('a new warm s390x runner', () =>
      runners().find((r) => r.pool === 'linux.s390x.warm' && r.state === 'idle' && !before.has(r.name)));
    const host = () => d.cliJson('hosts').hosts.find((h) => h.name === 'local');
    const reconnects = host().reconnects;

    assert.equal(spawnSync(libvirtd, ['stop']).status, 0);
    await until('the host to go down', () => host().state === 'down', 30000);
    // While libvirtd is away, one guest dies; libvirt cannot tell hatcheryd.
    const pid = Number(readFileSync(`/run/libvirt/qemu/${victim.name}.pid`, 'utf8'));
    process.kill(pid, 'SIGKILL');
    await sleep(1000);
    assert.equal(spawnSync(libvirtd, ['start']).status, 0);
    await until('the host to come back', () => host().state === 'up', 60000);
    assert.equal(host().reconnects, reconnects + 1);
    await until('the re-inventory', () => /event=host.reinventoried host=local /.test(d.logs), 30000);
    // The keeper's domain was found running after the restart.
    const [, running] = /event=host.reinventoried host=local guests_running=(\d+)/.exec(d.logs);
    assert.ok(Number(running) >= 1, d.logs.split('\n').slice(-20).join('\n'));
    // The one that kept running was not touched: same runner, still idle, domain alive,
    // and it is given its job now, while its runner (90 s) still waits for one: the
    // victim's replacement below may take long on a loaded machine.
    const kept = runners().find((r) => r.name === keeper.name);
    assert.equal(kept.state, 'idle', `${keeper.name}: ${kept.state}, ${kept.reason ?? 'no reason'}, exit ${kept.exit_code}`);
    assert.ok(domains().includes(keeper.name));
    assert.equal((await d.post('workflow_job', payload('in_progress', id, 'linux.ppc64le', keeper.name))).status, 202);

    const dead = await until(`${victim.name} failed`, () => {
      const r = runners().find((x) => x.name === victim.name);
      return ['failed', 'deleted'].includes(r.state) && r.reason && r;
    });
    // Its agent channel closed with QEMU (seen without libvirtd), or, had it not, the
    // re-inventory finds its domain stopped.
    assert.match(dead.reason, /agent channel: the guest closed the channel|while the host was unreachable/);
    await until('a replacement warm runner', () =>
      runners().find((r) => r.pool === 'linux.s390x.warm' && r.state === 'idle' && r.name !== victim.name && !before.has(r.name)));
    await until(`${victim.name}'s domain gone`, () => !domains().includes(victim.name), 30000);

    // The keeper serves its job to the end.
    await until(`${keeper.name} to finish`, () => runners().find((r) => r.name === keeper.name).state === 'deleted', 120000);
    assert.equal(runners().find((r) => r.name === keeper.name).exit_code, 0);
    assert.equal((await d.post('workflow_job', payload('completed', id, 'linux.ppc64le', keeper.name))).status, 202);
    assert.ok(!domains().includes(keeper.name));
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=4 exit=0' });
  });
  test('SIGHUP raises max_runners, adds a pool and removes one whose runner is busy: that runner finishes and is not replaced', inPart(false), async () => {
    // A busy runner in linux.ppc64le, the pool about to be removed.
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=40 exit=0' });
    const before = new Set(runners().map((r) => r.name));
    const busyJob = nextJob++;
    assert.equal((await d.post('workflow_job', payload('queued', busyJob, 'linux.ppc64le'))).status, 202);
    const doomed = await until('an idle ppc64le runner', () =>
      runners().find((r) => r.pool === 'linux.ppc64le' && r.state === 'idle' && !before.has(r.name)));
    assert.equal((await d.post('workflow_job', payload('in_progress', busyJob, 'linux.ppc64le', doomed.name))).status, 202);
    await until(`${doomed.name} busy`, () => runners().find((r) => r.name === doomed.name).state === 'busy');
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=4 exit=0' });
    // Two s390x jobs in a pool of max_runners 1: the second waits.
    const [x, y] = [nextJob++, nextJob++];
    for (const id of [x, y]) assert.equal((await d.post('workflow_job', payload('queued', id, 'linux.s390x'))).status, 202);
    await until('the second s390x job to wait for max_runners', () =>
      /pool at max_runners \(1\)/.test(d.jobs().find((j) => j.id === y)?.waiting ?? ''), 60000);

    const logFrom = d.logs.length;
    d.rewrite({
      hostsExtra: localHost(6),
      pools: 'pools:\n' + pool('linux.ppc64le.added', 'linux.ppc64le.added', 'ppc64le') + otherPools(2),
    });
    d.proc.kill('SIGHUP');
    await until('the reload', () => d.logs.indexOf('event=config.reloaded via=SIGHUP', logFrom) >= 0, 10000);
    const line = d.logs.slice(logFrom).split('\n').find((l) => l.includes('event=config.reloaded'));
    // The changes are one logfmt value: JSON, quoted and escaped.
    const changes = JSON.parse(JSON.parse(`"${/ changes="(.*)"$/.exec(line)[1]}"`));
    assert.deepEqual(changes.pools.added, ['linux.ppc64le.added']);
    assert.deepEqual(changes.pools.removed, ['linux.ppc64le']);
    assert.deepEqual(changes.pools.changed['linux.s390x'], ['max_runners']);

    // Raised max_runners: a second s390x runner, for the job that waited.
    await until('two s390x runners', () =>
      runners().filter((r) => r.pool === 'linux.s390x' && ['idle', 'busy'].includes(r.state)).length === 2);
    // The added pool serves its label.
    const z = nextJob++;
    assert.equal((await d.post('workflow_job', payload('queued', z, 'linux.ppc64le.added'))).status, 202);
    const added = await until('an idle runner in the added pool', () =>
      runners().find((r) => r.pool === 'linux.ppc64le.added' && r.state === 'idle'));
    // The removed pool's busy runner finishes its job, and is not replaced.
    await endsCleanly(doomed.name);
    assert.equal((await d.post('workflow_job', payload('completed', busyJob, 'linux.ppc64le', doomed.name))).status, 202);
    await sleep(3000);
    assert.deepEqual(runners().filter((x2) => x2.pool === 'linux.ppc64le' && !before.has(x2.name) && x2.name !== doomed.name), []);

    // The other jobs end (the stand-in runners exit 4 s after they start), and so do
    // their runners.
    for (const [id, label] of [[x, 'linux.s390x'], [y, 'linux.s390x'], [z, 'linux.ppc64le.added']])
      assert.equal((await d.post('workflow_job', payload('completed', id, label))).status, 202);
    await until('the new runners to end', () => runners()
      .filter((x2) => !before.has(x2.name) && x2.pool !== 'linux.s390x.warm')
      .every((x2) => x2.state === 'deleted'), 120000);
    assert.ok(added.name);
    assert.ok(!/event=runner.transition_refused/.test(d.logs.slice(logFrom)));
  });
});
