// Two controllers (hatcheryd instances of one controller_id sharing a PostgreSQL store) on
// one shared libvirt host with real emulated s390x guests: the leader is killed, or paused
// for 60 s, while its guests run their jobs. The other takes the lease, adopts the guests
// (their agents through libvirt streams, as on a host of another machine), and sees their
// jobs to the end. Counted: every job served (its runner's exit 0), no job given a second
// guest or runner, nothing left behind (domains, volumes, GitHub registrations), and no
// libvirt call of the paused leader after its lease ended, read from libvirt's side: each
// instance reaches libvirtd through a proxy of its own that records every RPC packet it
// sends (controllers.mjs, libvirtProxy).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { freePort, tempDir, workflowJob } from '../integration/lib/daemon.mjs';
import { Controller, cluster, githubProxy, libvirtProxy, reported as reportedBy, sleep, until } from '../integration/lib/controllers.mjs';
import { testGuestPool } from './test-guest-pool.mjs';

const api = process.env.GITHUB_DOUBLE_URL;
const LEASE_S = 10;
const LABEL = 'lead.s390x';
// Its own controller_id: its domains (hatchery-lead-N) are told from any other test's.
const ID = 'lead';
const storagePool = `hatchery-lead-${process.pid}`;
const storageDir = `/tmp/hatchery-lead-volumes-${process.pid}`;

// The shared host, reached through `socket` (the instance's libvirt proxy), with the
// agents' channels and consoles as streams over the connection: what a host of another
// machine gets (qemu+ssh://), for either instance to reach any guest.
const body = (socket) => `hosts:
  - name: local
    uri: qemu+unix:///system?socket=${socket}
    agent_transport: stream
    vcpus: 4
    memory_mib: 4096
    max_guests: 4
    storage_pool: ${storagePool}
    storage_dir: ${storageDir}
pools:
${testGuestPool(LABEL, 's390x', process.env.GUEST_s390x, ['max_runners: 2', 'boot_timeout_s: 180'])}`;

const virsh = (...args) => spawnSync('virsh', ['-c', 'qemu:///system', ...args], { encoding: 'utf8' });
const domains = () => virsh('list', '--all', '--name').stdout.split('\n').filter((n) => n.startsWith(`hatchery-${ID}-`));

describe('two controllers on one libvirt host: the leader killed or paused under running guests', () => {
  const pgDir = tempDir('hatchery-lead-pg-');
  let direct, ghA, ghB, lvA, lvB, a, b;
  let nextJob = 9200000;
  const served = []; // {id, runner}
  const reported = (fn) => reportedBy(() => [a, b], fn);

  before(async () => {
    const pgPort = await freePort();
    cluster('start', pgDir, String(pgPort));
    direct = `host=127.0.0.1 port=${pgPort} user=hatchery dbname=hatchery`;
    ghA = await githubProxy();
    ghB = await githubProxy();
    lvA = await libvirtProxy(join(pgDir, 'libvirt-a.sock'));
    lvB = await libvirtProxy(join(pgDir, 'libvirt-b.sock'));
    a = new Controller('a', { conninfo: direct, github: ghA, leaseS: LEASE_S, body: body(lvA.path), controllerId: ID });
    b = new Controller('b', { conninfo: direct, github: ghB, leaseS: LEASE_S, body: body(lvB.path), controllerId: ID });
    await fetch(`${api}/__double/log`, { method: 'DELETE' });
    // Each runner outlives the takeover: the takeover comes within a lease and a fifth of
    // it after the fault, and the fault comes as soon as the runners are busy.
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=40 exit=0' });
  });
  after(async () => {
    await Promise.all([a?.remove(), b?.remove()]);
    ghA?.close(); ghB?.close(); lvA?.close(); lvB?.close();
    // What a failed test left: not to be found by the next.
    for (const name of domains()) { virsh('destroy', name); virsh('undefine', name, '--nvram'); }
    virsh('pool-destroy', storagePool);
    rmSync(storageDir, { recursive: true, force: true });
    cluster('stop', pgDir);
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=4 exit=0' });
  });

  // The runners of the store, from any instance (a follower reads the same rows).
  const runners = (via) => via.cliJson('runners', '--all').runners.filter((r) => r.pool === LABEL);

  // Plays GitHub up to two busy runners: two jobs queued (through `via`, a follower, as a
  // load balancer may pick), an idle runner for each, each job given to its runner.
  async function twoBusyRunners(leader, via) {
    const before = new Set(runners(via).map((r) => r.name));
    const ids = [nextJob++, nextJob++];
    for (const id of ids) assert.equal((await via.post(workflowJob('queued', id, [LABEL]))).status, 202);
    const idle = await until('two idle runners', () => {
      const r = runners(via).filter((x) => x.state === 'idle' && !before.has(x.name));
      return r.length >= 2 && r;
    }, 240000);
    const jobs = ids.map((id, i) => ({ id, runner: idle[i].name }));
    for (const j of jobs) assert.equal((await via.post(workflowJob('in_progress', j.id, [LABEL], j.runner))).status, 202);
    await until('both runners busy', () => jobs.every((j) => runners(via).find((r) => r.name === j.runner)?.state === 'busy'), 60000);
    // Each domain records the epoch of the leader that made it.
    for (const j of jobs) assert.match(virsh('dumpxml', j.runner).stdout, new RegExp(`<hatchery:epoch>${leader.epoch()}</hatchery:epoch>`));
    return jobs;
  }

  // The jobs' runners end as a served job's do (exit 0, no reason); GitHub says completed.
  async function endWell(jobs, via) {
    for (const j of jobs) {
      const r = await until(`${j.runner} to end`, () => {
        const x = runners(via).find((y) => y.name === j.runner);
        return x?.state === 'deleted' && x;
      }, 180000);
      assert.equal(r.exit_code, 0, `${j.runner}: ${r.reason}`);
      assert.equal(r.reason, null);
      assert.equal((await via.post(workflowJob('completed', j.id, [LABEL], j.runner))).status, 202);
      served.push(j);
    }
  }

  test('kill -9 of the leader under two busy guests: the other leads within 20 s, adopts both, and their jobs end well', reported(async () => {
    await a.start();
    await until('a to lead', () => a.leads());
    await b.start();
    await until('b to follow', () => b.logs.includes('event=lease.following'));
    const jobs = await twoBusyRunners(a, b);
    const t0 = Date.now();
    a.proc.kill('SIGKILL');
    await a.exited;
    await until('b to lead', () => b.leads(), 20000);
    console.log(`takeover under running guests after kill -9: ${Date.now() - t0} ms`);
    for (const j of jobs) await until(`${j.runner} adopted by b`, () => b.logs.includes(`event=runner.adopted runner=${j.runner} `), 60000);
    await endWell(jobs, b);
  }));

  test('SIGSTOP of the leader for 60 s under two busy guests: the other adopts them; continued, the old leader sends libvirt and GitHub nothing', reported(async () => {
    await a.start();
    await until('a to follow', () => a.logs.includes('event=lease.following'));
    const jobs = await twoBusyRunners(b, a);
    const stopped = Date.now();
    b.proc.kill('SIGSTOP');
    await until('a to lead', () => a.leads(), 20000);
    console.log(`takeover under running guests after SIGSTOP: ${Date.now() - stopped} ms`);
    for (const j of jobs) await until(`${j.runner} adopted by a`, () => a.logs.includes(`event=runner.adopted runner=${j.runner} `), 60000);
    await endWell(jobs, a);
    await sleep(Math.max(0, 60000 - (Date.now() - stopped)));
    const continued = Date.now();
    b.proc.kill('SIGCONT');
    const ended = await Promise.race([b.exited, sleep(20000).then(() => null)]);
    // From libvirt's side: no packet of the old leader's but keepalives since it went on.
    const late = lvB.callsSince(continued);
    assert.ok(ended, `the continued leader still runs 20 s on; since it went on it sent libvirt ${late.length} calls and GitHub ${ghB.calls.filter((c) => c.t >= continued).length}`);
    assert.equal(ended.code, 75);
    assert.match(b.logs, /event=lease\.lost/);
    console.log(`after SIGCONT, the old leader sent libvirt ${late.length} calls and ${lvB.packets.filter((p) => p.t >= continued).length - late.length} keepalives; GitHub ${ghB.calls.filter((c) => c.t >= continued).length} calls`);
    assert.deepEqual(late, []);
    assert.deepEqual(ghB.calls.filter((c) => c.t >= continued), []);
  }));

  test('afterwards: every job served once, one guest and one registration each, nothing left', reported(async () => {
    assert.equal(served.length, 4);
    const all = runners(a);
    assert.equal(all.length, 4, `runners made for 4 jobs: ${all.map((r) => `${r.name} ${r.state}`).join(', ')}`);
    assert.deepEqual(all.map((r) => r.name).sort(), served.map((j) => j.runner).sort());
    await until('no domain left', () => domains().length === 0, 60000);
    assert.deepEqual(readdirSync(storageDir).filter((f) => f.startsWith(`hatchery-${ID}-`)), []);
    // One registration per runner, each deleted again, whichever instance led then.
    const calls = [...ghA.calls, ...ghB.calls];
    assert.equal(calls.filter((c) => c.method === 'POST' && c.url.endsWith('/generate-jitconfig')).length, 4);
    await until('every registration deleted', () => [...ghA.calls, ...ghB.calls].filter((c) => c.method === 'DELETE' && /\/actions\/runners\/\d+$/.test(c.url)).length >= 4, 60000);
    const { violations } = await (await fetch(`${api}/__double/log`)).json();
    assert.deepEqual(violations, []);
  }));
});
