// Two hatcheryd instances of one controller_id sharing a PostgreSQL store (a server of the
// test's own: tests/postgresql/cluster.sh), as two controller machines: one leads by the
// lease (lease.h), the other takes webhooks and answers the CLI, and takes over when the
// leader is killed, paused or cut from the database; the leader that lost its lease makes
// no GitHub call after it. Each instance reaches GitHub (the stateful double in front of
// Prism) through a recording proxy of its own, so that every call is known by who made
// it and when; the first instance reaches PostgreSQL through a TCP proxy that can stop
// answering without closing anything, as a dead network does.
//
// Each instance's guests are libvirt's test driver's, inside its own process: what is
// measured is the lease, the fence and the store; a shared libvirtd is the e2e tests'.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { HATCHERY_CLI, freePort, tempDir, workflowJob } from '../integration/lib/daemon.mjs';
import { Controller, cluster, githubProxy, reported as reportedBy, sleep, tcpProxy, until } from '../integration/lib/controllers.mjs';

// The default lease: its margins (a leader stops after 3/5 of it without a renewal) are
// what a loaded machine needs, and a takeover still comes well within 20 s.
const LEASE_S = 10;
// 200 jobs, and a pause of 60 s; the ThreadSanitizer pass (tests/tsan/run.sh), whose
// subject is the threads' interleaving, not the load or the length, runs fewer and shorter.
const JOBS = Number(process.env.LEADERSHIP_JOBS ?? 200);
const PAUSE_S = Number(process.env.LEADERSHIP_PAUSE_S ?? 60);

// The hosts and pools of both instances: one host of libvirt's test driver each.
const BODY = `hosts:
  - name: host-a
    uri: test:///default
    vcpus: 512
    memory_mib: 1048576
    max_guests: ${JOBS}
pools:
  - name: sim
    labels: [sim]
    arch: s390x
    image: /default-pool/base.qcow2
    vcpus: 1
    memory_mib: 64
    disk_mib: 64
    network: none
    max_runners: ${JOBS}
    boot_timeout_s: 600
    hosts: [host-a]
`;

describe('two controllers sharing PostgreSQL: one leads by the lease, the other takes over', () => {
  const pgDir = tempDir('hatchery-lead-pg-');
  let pgPort, direct, proxy, ghA, ghB, a, b;
  let nextJob = 9100000;
  const reported = (body) => reportedBy(() => [a, b], body);

  before(async () => {
    pgPort = await freePort();
    cluster('start', pgDir, String(pgPort));
    direct = `host=127.0.0.1 port=${pgPort} user=hatchery dbname=hatchery`;
    proxy = await tcpProxy(pgPort);
    ghA = await githubProxy();
    ghB = await githubProxy();
    a = new Controller('a', { conninfo: `host=127.0.0.1 port=${proxy.port} user=hatchery dbname=hatchery`, github: ghA, leaseS: LEASE_S, body: BODY });
    b = new Controller('b', { conninfo: direct, github: ghB, leaseS: LEASE_S, body: BODY });
  });
  after(async () => {
    await Promise.all([a?.remove(), b?.remove()]);
    proxy?.close(); ghA?.close(); ghB?.close();
    cluster('stop', pgDir);
  });

  test('one leads, the other follows; both store webhooks; only the leader calls GitHub', reported(async () => {
    await a.start();
    await until('a to lead', () => a.leads());
    await b.start();
    await until('b to follow', () => b.logs.includes('event=lease.following'));
    assert.ok(!b.leads(), `b took the lease a holds:\n${b.logs}`);
    const view = b.leader();
    assert.equal(view.leader.epoch, a.epoch());
    assert.match(view.leader.instance, new RegExp(`/${a.proc.pid}$`));
    assert.equal(view.instances.length, 2, JSON.stringify(view));
    assert.ok(view.instances.some((i) => i.this && !i.leading), 'b says it follows');
    // A follower reloads its config without touching a host (it connects to none).
    const reload = spawnSync(HATCHERY_CLI, ['--socket', b.socket, 'reload'], { encoding: 'utf8' });
    assert.equal(reload.status, 0, reload.stderr);
    // Two lease attempts later (a host's connection would have been tried at once).
    const renewals = b.leader().lease.renewals;
    await until('two more lease attempts of b', () => b.proc.exitCode !== null || b.leader().lease.renewals >= renewals + 2);
    assert.equal(b.proc.exitCode, null, b.logs.slice(-2000));
    assert.doesNotMatch(b.logs, /event=host\./, 'a follower connected to a host');
    // Half the jobs to each: a load balancer's spread. Every one is stored.
    const statuses = [];
    for (let i = 0; i < JOBS; i++) {
      const r = await (i % 2 ? b : a).post(workflowJob('queued', nextJob++, ['sim']));
      statuses.push(r.status);
    }
    assert.deepEqual([...new Set(statuses)], [202]);
    const jobs = spawnSync('psql', [direct, '-qAt', '-c', "SELECT count(*) FROM jobs WHERE status = 'queued'"], { encoding: 'utf8' }).stdout.trim();
    assert.equal(Number(jobs), JOBS);
    // The leader serves both halves: a runner registered for each.
    await until(`${JOBS} runners registered by a`, () => ghA.calls.filter((c) => c.url.includes('generate-jitconfig')).length >= JOBS, 240000);
    assert.equal(ghB.calls.length, 0, `a follower called GitHub: ${JSON.stringify(ghB.calls.slice(0, 3))}`);
  }));

  test('a renewal held up past the time between attempts: the leader says so, with its margin, and keeps the lease', reported(async () => {
    const metric = async (name) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(await (await fetch(`http://127.0.0.1:${a.port}/metrics`)).text())?.[1]);
    const slowBefore = await metric('hatchery_lease_slow_renewals_total');
    const epoch = a.epoch();
    // A session of the test's own holds the lease's row: every attempt waits for it.
    const holder = spawn('psql', [direct, '-qAtX'], { stdio: ['pipe', 'pipe', 'inherit'] });
    let out = '';
    holder.stdout.on('data', (c) => { out += c; });
    holder.stdin.write("BEGIN;\nSELECT 'locked' FROM leases FOR UPDATE;\n");
    await until('the row held', () => out.includes('locked'));
    // Both instances' attempts wait on it (a's among them), as PostgreSQL shows ...
    const waiting = () => Number(spawnSync('psql', [direct, '-qAtX', '-c',
      "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO leases%'"], { encoding: 'utf8' }).stdout.trim());
    await until('both instances waiting for the lease', () => waiting() >= 2);
    // ... for longer than the time between attempts (a fifth of the lease), well inside
    // the leader's margin (three fifths).
    await sleep(LEASE_S * 1000 / 5 + 200);
    holder.stdin.end('COMMIT;\n');
    await new Promise((r) => holder.on('exit', r));
    await until("a's slow renewal in its log", () => /event=lease\.renewal_slow leading=yes took_ms=\d+ margin_ms=\d+/.test(a.logs));
    const [, took, margin] = /event=lease\.renewal_slow leading=yes took_ms=(\d+) margin_ms=(\d+)/.exec(a.logs).map(Number);
    console.log(`a renewal held up: answered after ${took} ms, ${margin} ms before the leader's deadline`);
    assert.ok(took > LEASE_S * 1000 / 5 && margin > 0 && margin < LEASE_S * 1000 * 4 / 5);
    assert.ok(await metric('hatchery_lease_slow_renewals_total') > slowBefore);
    // It keeps leading, at its epoch.
    assert.equal(a.proc.exitCode, null, a.logs.slice(-2000));
    assert.equal(b.leader().leader.epoch, epoch);
    assert.doesNotMatch(a.logs, /event=lease\.lost/);
  }));

  test('kill -9 of the leader: the follower leads within 20 s, at the next epoch', reported(async () => {
    const epoch = a.epoch();
    const t0 = Date.now();
    a.proc.kill('SIGKILL');
    await a.exited;
    await until('b to lead', () => b.leads(), 20000);
    const took = Date.now() - t0;
    console.log(`takeover after kill -9: ${took} ms (lease ${LEASE_S} s)`);
    assert.equal(b.epoch(), epoch + 1);
    assert.ok(took < 20000);
    await until('b to call GitHub as the leader', () => ghB.calls.length > 0);
  }));

  test(`SIGSTOP of the leader for ${PAUSE_S} s: the other leads; continued, the old leader ends before any call`, reported(async () => {
    ghA.calls.length = 0;
    await a.start(); // a follower again (its database connection through the proxy)
    await until('a to follow', () => a.logs.includes('event=lease.following'));
    const epoch = b.epoch();
    const stopped = Date.now();
    b.proc.kill('SIGSTOP');
    await until('a to lead', () => a.leads(), 20000);
    console.log(`takeover after SIGSTOP: ${Date.now() - stopped} ms`);
    assert.equal(a.epoch(), epoch + 1);
    await sleep(Math.max(0, PAUSE_S * 1000 - (Date.now() - stopped)));
    const continued = Date.now();
    const callsBefore = ghB.calls.filter((c) => c.t >= stopped).length;
    assert.equal(callsBefore, 0);
    b.proc.kill('SIGCONT');
    const ended = await Promise.race([b.exited, sleep(20000).then(() => null)]);
    const late = () => ghB.calls.filter((c) => c.t >= stopped);
    assert.ok(ended, `the continued leader still runs 20 s on; its GitHub calls since it was stopped: ${JSON.stringify(late().slice(0, 5))} (${late().length})`);
    const { code } = ended;
    assert.equal(code, 75, `b exited ${code}:\n${b.logs.slice(-3000)}`);
    assert.match(b.logs, /event=lease\.lost/);
    assert.deepEqual(late(), [], `the paused leader called GitHub after its lease (continued at ${continued})`);
    await until('a to call GitHub as the leader', () => ghA.calls.length > 0);
  }));

  test('the leader cut from the database: it stops by its own clock, the other leads within 20 s', reported(async () => {
    await b.start();
    await until('b to follow', () => b.logs.includes('event=lease.following'));
    const epoch = a.epoch();
    const t0 = Date.now();
    proxy.cut();
    const ended = await Promise.race([a.exited, sleep(20000).then(() => null)]);
    assert.ok(ended, `the leader cut from the database still runs 20 s on; its GitHub calls since: ${ghA.calls.filter((c) => c.t > t0).length}`);
    const { code } = ended;
    const stoppedAt = Date.now();
    assert.equal(code, 75, a.logs.slice(-3000));
    await until('b to lead', () => b.leads(), 20000);
    console.log(`leader cut off: it ended after ${stoppedAt - t0} ms, takeover after ${Date.now() - t0} ms`);
    assert.equal(b.epoch(), epoch + 1);
    assert.ok(Date.now() - t0 < 20000);
    assert.deepEqual(ghA.calls.filter((c) => c.t > stoppedAt), []);
  }));

  test('PostgreSQL restarted: a leader again within 20 s of its return, every job kept', reported(async () => {
    cluster('stop-server', pgDir);
    await sleep(1000);
    cluster('start', pgDir, String(pgPort));
    const back = Date.now();
    // A leader whose lease ran out meanwhile ends (75), now or soon: its supervisor (systemd's
    // Restart=) starts it again, and it takes the lease as a follower would.
    let leader = null;
    for (const end = Date.now() + 20000; !leader && Date.now() < end;) {
      if (b.proc.exitCode !== null) {
        assert.equal(b.proc.exitCode, 75, b.logs.slice(-3000));
        await b.start();
      }
      try { leader = b.leader().leader; } catch { leader = null; }
      if (!leader) await sleep(100);
    }
    assert.ok(leader, `no leader 20 s after the server's return:\n${b.logs.slice(-3000)}`);
    console.log(`a leader ${Date.now() - back} ms after the server's return`);
    const jobs = spawnSync('psql', [direct, '-qAt', '-c', 'SELECT count(*) FROM jobs'], { encoding: 'utf8' }).stdout.trim();
    assert.equal(Number(jobs), JOBS);
  }));
});
