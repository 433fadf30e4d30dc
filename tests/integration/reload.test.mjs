// Live reload: SIGHUP and `hatchery reload` re-read the config. A bad config is refused
// with its FILE:LINE errors and the running one stays; pools and hosts are added, removed
// and changed; keys that need a restart are named and keep their running value.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { DEFAULT_POOLS, Daemon, examples, request } from './lib/daemon.mjs';

const extraPool = `  - name: linux.ppc64le.big
    labels: [linux.ppc64le.big]
    arch: ppc64le
    image: /var/lib/hatchery/images/ppc64le.qcow2
    vcpus: 8
    max_runners: 1
`;
// A host nobody answers on: it is added, and stays down.
const hostB = `  - name: host-b
    uri: qemu+unix:///system?socket=/nonexistent/libvirt-sock
    vcpus: 8
    memory_mib: 16384
    max_guests: 4
`;

describe('reload', () => {
  const d = new Daemon();
  const rewrite = (opts) => d.rewrite(opts);
  const pools = () => d.cliJson('pools').pools.map((p) => p.name).sort();
  before(async () => { await d.start(); });
  after(async () => {
    const { code } = await d.stop();
    d.cleanup();
    assert.equal(code, 0);
  });

  test('nothing changed: the answer says so', () => {
    const r = d.cli('reload');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /nothing changed/);
  });

  test('a pool added, one changed and one removed; a host added: all live, and said', async () => {
    // A job of the pool about to go: its count stays in /metrics after the pool does.
    const job = structuredClone(examples('workflow_job')[5]);
    job.workflow_job.id = 6100000001;
    job.workflow_job.labels = ['k8s'];
    assert.equal((await d.post('workflow_job', job)).status, 202);
    rewrite({
      pools: DEFAULT_POOLS.replace('    max_runners: 2\n', '    max_runners: 5\n').replace(/  - name: k8s[\s\S]*$/, '') + extraPool,
      hostsExtra: hostB,
    });
    const r = d.cliJson('reload');
    assert.equal(r.ok, true);
    assert.deepEqual(r.changed.pools.added, ['linux.ppc64le.big']);
    assert.deepEqual(r.changed.pools.removed, ['k8s']);
    assert.deepEqual(r.changed.pools.changed, { 'linux.ppc64le': ['max_runners'] });
    assert.deepEqual(r.changed.hosts.added, ['host-b']);
    assert.deepEqual(r.changed.needs_restart, []);
    assert.deepEqual(pools(), ['linux.ppc64le', 'linux.ppc64le.big', 'linux.s390x']);
    assert.equal(d.cliJson('pools').pools.find((p) => p.name === 'linux.ppc64le').max_runners, 5);
    assert.ok(d.cliJson('hosts').hosts.some((h) => h.name === 'host-b'));
    await d.until('the reload in the log', () => /event=config.reloaded via=admin pools=3 hosts=2 /.test(d.logs), { ms: 10000 });
    const metrics = (await request(d.port, { path: '/metrics' })).body;
    assert.match(metrics, /^hatchery_jobs\{pool="k8s",status="queued"\} 1$/m);
    assert.doesNotMatch(metrics, /^hatchery_jobs\{pool="k8s",status="completed"\}/m, 'a pool no longer configured has only its rows');
    assert.match(metrics, /^hatchery_jobs\{pool="linux\.ppc64le\.big",status="completed"\} 0$/m);
    // The people's view of the same answer.
    rewrite({ pools: DEFAULT_POOLS, hostsExtra: hostB });
    const text = d.cli('reload');
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /pools added: k8s/);
    assert.match(text.stdout, /pools removed \(their runners finish their jobs\): linux\.ppc64le\.big/);
    assert.match(text.stdout, /pool linux\.ppc64le changed: max_runners/);
  });

  test('a bad config is refused with FILE:LINE, and the running config stays', async () => {
    const file = rewrite({ pools: DEFAULT_POOLS.replace('max_runners: 1\n', 'max_runners: lots\n'), hostsExtra: hostB });
    const before = pools();
    const r = d.cli('reload');
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:\\d+: .*max_runners`));
    assert.deepEqual(pools(), before);
    // SIGHUP: refused the same way, in the log.
    d.proc.kill('SIGHUP');
    await d.until('the refusal in the log', () => /event=config.reload_refused via=SIGHUP errors=1 /.test(d.logs), { ms: 10000 });
    assert.deepEqual(pools(), before);
    assert.equal(d.proc.exitCode, null);
  });

  test('SIGHUP applies a good config', async () => {
    rewrite({ pools: DEFAULT_POOLS + extraPool, hostsExtra: hostB });
    d.proc.kill('SIGHUP');
    await d.until('the reload in the log', () => /event=config.reloaded via=SIGHUP /.test(d.logs), { ms: 10000 });
    assert.ok(pools().includes('linux.ppc64le.big'));
  });

  test('listen, state_dir and controller_id need a restart: named, and the running values stay', async () => {
    const file = rewrite({ pools: DEFAULT_POOLS, hostsExtra: hostB });
    const text = readFileSync(file, 'utf8')
      .replace(/^listen: .*$/m, 'listen: 127.0.0.1:1')
      .replace(/^controller_id: it$/m, 'controller_id: other')
      .replace(/^state_dir: .*$/m, 'state_dir: /tmp/hatchery-elsewhere');
    writeFileSync(file, text);
    const r = d.cliJson('reload');
    assert.equal(r.ok, true);
    assert.deepEqual(r.changed.needs_restart.sort(), ['controller_id', 'listen', 'state_dir']);
    const health = d.cliJson('health');
    assert.equal(health.controller_id, 'it');
    // Still serving on the old port.
    const res = await fetch(`http://127.0.0.1:${d.port}/healthz`);
    assert.equal(res.status, 200);
    rewrite({ pools: DEFAULT_POOLS, hostsExtra: hostB });
    d.cli('reload');
  });
});
