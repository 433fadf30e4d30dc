// What a job can reach and change from inside a real LXC container, probed from inside it as
// a hostile job would (images/test-guest/fake-runner, `inspect=1`), two containers at once:
// its user (not root) and whom its root is on this machine (no one: a range of its own),
// its capabilities and its agent's (no CAP_SYS_ADMIN), its network (loopback only with
// `network: none`: not the host's loopback, not the host's address, not the outside), the
// host's processes and files, the other container, the agent's socket, the root directory,
// mounts, and namespaces of its own (a user namespace, a network device, a mount in one).
// tests/e2e/e2e.test.mjs runs the same probes in a VM.
import assert from 'node:assert/strict';
import { readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { Daemon, githubConfig, workflowJob } from '../integration/lib/daemon.mjs';
import { containerPool, lxcHost } from './containers.mjs';
import { isolationTargets } from './isolation.mjs';

const api = process.env.GITHUB_DOUBLE_URL;
const d = new Daemon({
  hostsExtra: lxcHost({ vcpus: 4, guests: 4 }),
  pools: containerPool('ct', { max: 2 }),
  extra: githubConfig({ reconcileIntervalS: 5, runnerGroupId: 3, org: 'pytorch' }),
});

const runners = () => d.cliJson('runners', '--all').runners;
const until = (what, predicate, ms = 120000) => d.until(what, predicate, { ms });
const CAP_SYS_ADMIN = 21n;
// The agent's bounding set: chown (0), dac_read_search (2), kill (5), setgid (6), setuid
// (7), and nothing else.
const AGENT_CAPABILITIES = (1n << 0n) | (1n << 2n) | (1n << 5n) | (1n << 6n) | (1n << 7n);

before(async () => {
  await fetch(`${api}/__double/log`, { method: 'DELETE' });
  await d.start();
});

after(async () => {
  await d.stop();
  // The daemon's log, to read after a failure.
  writeFileSync(join(tmpdir(), 'hatchery-containers-daemon.log'), d.logs);
  d.cleanup();
});

test('a job in a container: its own users and network, no CAP_SYS_ADMIN, nothing of the host or the other container', async () => {
  const { loPort, anyPort, hostIp, egress, close } = await isolationTargets(d.port);
  // A file of the host's anyone there may read: the job must not see it.
  const hostFile = join(d.dir, 'host-file');
  writeFileSync(hostFile, 'the host\n', { mode: 0o644 });
  const targets = [`127.0.0.1:${loPort}`, `127.0.0.1:${d.port}`, `${hostIp}:${anyPort}`, `${hostIp}:${d.port}`, egress.target];
  try {
    // Both jobs run at once (sleep), so that each looks for the other.
    await fetch(`${api}/__double/jit`, { method: 'POST', body: `inspect=1 hostfile=${hostFile} probe=${targets.join('+')} sleep=6 exit=0` });
    const ids = [9800000001, 9800000002];
    for (const id of ids) assert.equal((await d.post('workflow_job', workflowJob('queued', id, ['ct']))).status, 202);
    const idle = await until('two idle containers', () => {
      const r = runners().filter((x) => x.pool === 'ct' && x.state === 'idle');
      return r.length === 2 && r;
    });
    for (const [i, id] of ids.entries())
      assert.equal((await d.post('workflow_job', workflowJob('in_progress', id, ['ct'], idle[i].name))).status, 202);
    for (const r of idle)
      await until(`${r.name} to end`, () => runners().find((x) => x.name === r.name)?.state === 'deleted');
    const ends = runners().filter((x) => idle.some((r) => r.name === x.name));
    assert.deepEqual(ends.map((r) => [r.exit_code, r.reason]), [[0, null], [0, null]]);

    const roots = new Set();
    const hostProcesses = readdirSync('/proc').filter((n) => /^[0-9]+$/.test(n)).length;
    for (const r of idle) {
      const logs = d.cli('logs', r.name).stdout;
      const m = /hatchery: job report: (\{.*\})/.exec(logs);
      assert.ok(m, `no report in ${r.name}'s log:\n${logs.slice(-2000)}`);
      const seen = JSON.parse(m[1]);
      console.log(`from inside ${r.name}: ${JSON.stringify(seen)}`);
      // Its user is the pool's runner_user, and its root is a range of its own here.
      assert.equal(seen.uid, '1000');
      const root = Number(seen.host_uid_of_root);
      assert.ok(root >= 0x70000000 && (root - 0x70000000) % 65536 === 0, `its root is uid ${seen.host_uid_of_root} here`);
      roots.add(root);
      // No CAP_SYS_ADMIN, for the job or its agent, nor any capability the agent does not need.
      assert.equal((BigInt(`0x${seen.capabilities}`) >> CAP_SYS_ADMIN) & 1n, 0n);
      assert.equal(BigInt(`0x${seen.agent_capabilities}`), AGENT_CAPABILITIES);
      assert.equal(seen.mount, 'no');
      // Nor by a namespace of its own: the agent's no_new_privs and seccomp filter
      // (agent/confine.h) refuse them, where a user namespace would give it every capability.
      assert.equal(seen.no_new_privs, '1');
      assert.equal(seen.seccomp, '2');
      assert.deepEqual([seen.userns, seen.netdev, seen.userns_mount], ['refused', 'refused', 'refused']);
      // A network of its own: loopback only; nothing of the host's, nor the outside.
      assert.equal(seen.interfaces, 'lo');
      assert.deepEqual(seen.probes, Object.fromEntries(targets.map((t) => [t, 'closed'])));
      // The host's processes and the other container's agent are out of sight.
      assert.equal(seen.host_processes, 'none');
      assert.equal(seen.agents, '1');
      // Its agent, the runner's shell and the probe's own pipeline; the host has hundreds.
      assert.ok(Number(seen.processes) < 20, `it sees ${seen.processes} processes`);
      assert.ok(hostProcesses > 40, `the host has ${hostProcesses} processes`);
      // Nor the host's files; its root directory is read-only, its agent's socket closed.
      assert.equal(seen.host_file, 'unreadable');
      assert.equal(seen.root_writable, 'no');
      assert.equal(seen.agent_channel, 'closed');
    }
    assert.equal(roots.size, 2, 'the two containers share a range of uids');
  } finally {
    close();
    await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=1 exit=0' });
  }
});
