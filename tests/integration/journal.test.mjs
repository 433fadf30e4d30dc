// hatcheryd under systemd: its log goes to the journal with each line's priority, and with
// the runner, pool, host and job it names as fields journalctl can match. The journal is a
// real systemd-journald, started here in a mount namespace of its own (a private /run and
// /var/log), so the test needs no systemd on the machine and leaves nothing behind.
// hatcheryd's stderr is a stream into that journal (systemd-cat), and JOURNAL_STREAM names
// the stream as systemd names it for a service.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { Daemon, HATCHERYD, ROOT_ARGS, freePort, writeConfig, workflowJob } from './lib/daemon.mjs';

const JOURNALD = '/lib/systemd/systemd-journald';
let journald;
const inJournal = (...cmd) => spawnSync('nsenter', ['-t', String(journald.pid), '-m', '--', ...cmd], { encoding: 'utf8' });
const entries = (...matches) => {
  const r = inJournal('journalctl', '--no-pager', '-o', 'json', ...matches);
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l));
};

let d, proc;
before(async () => {
  assert.ok(existsSync(JOURNALD), `${JOURNALD} (Debian's systemd) is needed`);
  journald = spawn('unshare', ['-m', '--propagation', 'private', '--', 'sh', '-c',
    'mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/log && mkdir -p /run/systemd/journal && exec ' + JOURNALD],
  { stdio: 'ignore' });
  for (let i = 0; inJournal('test', '-S', '/run/systemd/journal/socket').status !== 0; i++) {
    assert.ok(i < 100, 'journald did not open its socket');
    await new Promise((r) => setTimeout(r, 100));
  }
  d = new Daemon();
  d.port = await freePort();
  d.config = writeConfig(d.dir, { port: d.port, secret: d.secret });
  proc = spawn('nsenter', ['-t', String(journald.pid), '-m', '--', 'systemd-cat', '-t', 'hatcheryd', 'sh', '-c',
    'JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) exec "$0" --config "$@"', HATCHERYD, d.config, ...ROOT_ARGS],
  { stdio: 'ignore' });
  d.proc = proc;
  d.exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  for (let i = 0; entries('HATCHERY_EVENT=daemon.ready').length === 0; i++) {
    assert.ok(i < 150, 'no daemon.ready in the journal');
    await new Promise((r) => setTimeout(r, 100));
  }
});

after(async () => {
  if (proc && proc.exitCode === null) {
    proc.kill('SIGTERM');
    await d.exited;
  }
  journald?.kill('SIGTERM');
  d?.cleanup();
});

test('each entry has its priority, and the job, pool and host as fields of their own', async () => {
  const r = await d.post('workflow_job', workflowJob('queued', 424242, ['linux.ppc64le']));
  assert.equal(r.status, 202);
  const bad = await d.post('workflow_job', workflowJob('queued', 424243, ['linux.ppc64le']), { secret: 'not-it' });
  assert.equal(bad.status, 401);
  await d.until('the host connected', () => entries('HATCHERY_HOST=host-a').length > 0, { ms: 15000 });

  const stored = entries('HATCHERY_JOB=424242', 'HATCHERY_EVENT=webhook.stored');
  assert.equal(stored.length, 1);
  assert.equal(stored[0].HATCHERY_POOL, 'linux.ppc64le');
  assert.equal(stored[0].PRIORITY, '6');
  assert.equal(stored[0].SYSLOG_IDENTIFIER, 'hatcheryd');
  assert.equal(stored[0]._TRANSPORT, 'journal', 'by the native protocol, not the stream');
  assert.match(stored[0].MESSAGE, /^ts=\S+ level=info event=webhook\.stored .*job=424242/);
  assert.doesNotMatch(stored[0].MESSAGE, /^</, 'no <N> prefix in a native entry');

  // journalctl -p warning: the rejected delivery, and nothing at info.
  const warnings = entries('-p', 'warning');
  assert.ok(warnings.some((e) => e.HATCHERY_EVENT === 'webhook.rejected' && e.PRIORITY === '4'));
  assert.ok(!warnings.some((e) => Number(e.PRIORITY) > 4), 'an info line passed -p warning');

  // A pool no line names matches nothing: the match is a field's value, not a substring.
  assert.equal(entries('HATCHERY_POOL=linux.ppc').length, 0);
  // Everything hatcheryd wrote went by the native protocol: none through the stream.
  assert.equal(entries('SYSLOG_IDENTIFIER=hatcheryd', '_TRANSPORT=stdout').length, 0);
});

test('on SIGTERM it stops with exit 0, logging its stop to the journal', async () => {
  proc.kill('SIGTERM');
  const { code } = await d.exited;
  assert.equal(code, 0);
  assert.ok(entries('SYSLOG_IDENTIFIER=hatcheryd').some((e) => /stop/.test(e.HATCHERY_EVENT)));
});
