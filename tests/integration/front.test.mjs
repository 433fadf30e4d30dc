// The privilege-separated HTTP front (controller/front.c), seen from outside as an operator
// or an attacker would: its own process, confined by seccomp with no_new_privs, holding no
// descriptor of the core's (the store, libvirt), ignoring signals meant for the core, and
// taking the core down with it when it dies, so that systemd restarts both.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readlinkSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { Daemon, examples, frontPid, memoryHolds, processStatus, request } from './lib/daemon.mjs';

const statusOf = processStatus;
const frontOf = (d) => frontPid(d.proc.pid);

describe('the HTTP front', () => {
  const d = new Daemon();
  let front;
  before(async () => {
    await d.start();
    front = frontOf(d);
  });
  after(() => d.cleanup());

  test('is a process of its own, under seccomp with no_new_privs, and says so', async () => {
    const st = statusOf(front);
    assert.equal(st.Seccomp, '2', 'seccomp filter mode');
    assert.equal(st.NoNewPrivs, '1');
    assert.match(d.logs, new RegExp(`event=daemon\\.ready .*front_pid=${front} front=sandboxed`));
    const metrics = (await request(d.port, { path: '/metrics' })).body;
    assert.match(metrics, /^hatchery_http_front_sandboxed 1$/m);
    // The core itself is not confined: it must reach libvirt, the store and GitHub.
    assert.equal(statusOf(d.proc.pid).Seccomp, '0');
  });

  test('started by a core that runs as root (--allow-root), it is nobody, with no way back', { skip: process.getuid() !== 0 && 'needs root' }, () => {
    const st = statusOf(front);
    const nobody = spawnSync('id', ['-u', 'nobody'], { encoding: 'utf8' }).stdout.trim();
    assert.deepEqual(st.Uid.split(/\s+/), [nobody, nobody, nobody, nobody], 'real, effective, saved and fs uid');
    const nogroup = spawnSync('id', ['-g', 'nobody'], { encoding: 'utf8' }).stdout.trim();
    assert.deepEqual(st.Gid.split(/\s+/), [nogroup, nogroup, nogroup, nogroup], 'real, effective, saved and fs gid');
    assert.equal(st.Groups.trim(), '', 'no supplementary groups');
    assert.equal(st.CapEff, '0000000000000000');
    assert.equal(statusOf(d.proc.pid).Uid.split(/\s+/)[1], '0', 'the core is root');
    assert.match(d.logs, /event=daemon\.running_as_root reason="the tests run as root on a throwaway machine" front_user=nobody/);
  });

  test('holds no descriptor of the core: not the store, not libvirt, not the admin socket', async () => {
    // Beyond stdio (node makes stderr a socketpair of its own).
    const fdsOf = (pid) => readdirSync(`/proc/${pid}/fd`).filter((fd) => Number(fd) > 2).map((fd) => {
      try { return readlinkSync(`/proc/${pid}/fd/${fd}`); } catch { return '(gone)'; }
    });
    // Once the earlier tests' connections are closed: the listener and the socketpair.
    let fds = fdsOf(front);
    for (let i = 0; i < 50 && fds.filter((l) => l.startsWith('socket:')).length > 2; i++) {
      await new Promise((r) => setTimeout(r, 100));
      fds = fdsOf(front);
    }
    assert.equal(fds.filter((l) => l.startsWith('socket:')).length, 2, `the listener and the socketpair: ${fds}`);
    // Files: /dev/null only (libuv keeps one open for running out of descriptors). The rest
    // is libuv's own too (epoll, its signal pipes, an eventfd).
    assert.deepEqual(fds.filter((l) => l.startsWith('/') && l !== '/dev/null'), [], `files open in the front: ${fds}`);
    assert.ok(fds.length <= 16, `few descriptors: ${fds}`);
    assert.ok(fdsOf(d.proc.pid).some((l) => l.endsWith('hatchery.db')), 'the core holds the store (the check can fail)');
  });

  test('cannot speak for the core: its stdin is /dev/null, its stdout and stderr its own pipe to the core', () => {
    const link = (pid, fd) => readlinkSync(`/proc/${pid}/fd/${fd}`);
    const core = d.proc.pid;
    assert.equal(link(front, 0), '/dev/null');
    // The core's stdout is its journal stream under systemd (here node's pipe): the front's
    // lines reach it only through the core's relay, which quotes and throttles them.
    assert.notEqual(link(front, 1), link(core, 1), 'the front writes to the core\'s stdout');
    assert.notEqual(link(front, 2), link(core, 2), 'the front writes to the core\'s stderr');
    assert.equal(link(front, 1), link(front, 2), 'stdout and stderr: the one pipe the core relays');
    assert.match(link(front, 1), /^pipe:/);
    const coreFds = readdirSync(`/proc/${core}/fd`).map((fd) => { try { return link(core, fd); } catch { return ''; } });
    assert.ok(coreFds.includes(link(front, 1)), 'the pipe\'s other end is the core\'s');
  });

  // The front holds no webhook secret to sign with: the core checks every delivery. The
  // secret is a string the scan can find in the core, and must not find in the front.
  test('holds no webhook secret: the core checks the signature, and the refusal is counted', async () => {
    const payload = examples('workflow_job')[0];
    const res = await d.post('workflow_job', payload, { secret: 'wrong' });
    assert.equal(res.status, 401);
    assert.equal(JSON.parse(res.body).error, 'signature does not match');
    const metrics = (await request(d.port, { path: '/metrics' })).body;
    assert.match(metrics, /^hatchery_webhook_deliveries_total\{result="unauthorized"\} 1$/m);
    assert.match(d.logs, /event=webhook\.rejected peer=127\.0\.0\.1:\d+ status=401 reason="signature does not match"/);
    assert.ok(memoryHolds(d.proc.pid, d.secret).found.length > 0, 'the scan finds the secret in the core (the check can fail)');
    assert.deepEqual(memoryHolds(front, d.secret).found, [], 'the webhook secret is in the front\'s memory');
  });

  test('a signed delivery passes through the front and is stored before its 202', async () => {
    const payload = structuredClone(examples('workflow_job')[0]);
    payload.action = 'queued';
    payload.workflow_job.id = 777000111;
    payload.workflow_job.labels = ['linux.ppc64le'];
    const res = await d.post('workflow_job', payload);
    assert.equal(res.status, 202);
    assert.ok(d.jobs().some((j) => j.id === 777000111), 'the job is in the store at the 202');
  });

  test('ignores SIGTERM: its end is the core\'s to decide', async () => {
    process.kill(front, 'SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    assert.equal((await request(d.port, { path: '/healthz' })).status, 200);
    assert.equal(frontOf(d), front);
  });

  test('its death stops the core with exit 1, for the supervisor to restart both', async () => {
    process.kill(front, 'SIGKILL');
    const { code } = await d.exited;
    assert.equal(code, 1);
    assert.match(d.logs, /event=daemon\.front_gone reason="the HTTP front exited"/);
  });
});

describe('the core stopping', () => {
  test('ends the front too, and frees the port for the next start', async () => {
    const d = new Daemon();
    await d.start();
    const front = frontOf(d);
    const { code } = await d.stop();
    assert.equal(code, 0);
    await new Promise((r) => setTimeout(r, 200));
    assert.throws(() => statusOf(front), /ENOENT/, 'the front is gone');
    await d.start();
    assert.equal((await request(d.port, { path: '/healthz' })).status, 200);
    assert.equal((await d.stop()).code, 0);
    d.cleanup();
  });

  test('a port already taken is a clear error at start, from the front', async () => {
    const a = new Daemon();
    await a.start();
    const b = new Daemon();
    b.port = a.port;
    await assert.rejects(b.start(), /event=daemon\.listen_failed listen=127\.0\.0\.1:\d+ .*error="listen: .*(in use|EADDRINUSE)/i);
    assert.equal((await b.exited).code, 1);
    await a.stop();
    a.cleanup();
    b.cleanup();
  });
});
