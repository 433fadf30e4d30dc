// The agent's side of the runner's contract, on this machine: the native hatchery-agent
// talks to this test over a unix socket (as in a container) and runs stand-in runners.
// Every return code of the Listener, the drop to an unprivileged user, the JIT config in
// the environment and never on an argv, and the job's report, hostile ones included.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';

const agentBin = process.env.HATCHERY_AGENT;
const dir = mkdtempSync(join(tmpdir(), 'hatchery-agent-test-'));
chmodSync(dir, 0o777); // the unprivileged runner of some tests writes here
const JIT = 'jit-config-agent-test-5b1e0c9d7f3a4e2b8c6d1f0a9e8b7c6d5a4f3e2d1c0b9a8f';

// One conversation: the agent says hello, gets `config`, and the test collects every
// message until `exited` (or the agent hangs up).
function converse({ command, user, timeoutS = 60 }) {
  const sock = join(dir, `agent-${Math.random().toString(16).slice(2)}.sock`);
  return new Promise((resolve, reject) => {
    const messages = [];
    const server = net.createServer((c) => {
      let buf = '';
      c.on('data', (d) => {
        buf += d;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const msg = JSON.parse(buf.slice(0, nl));
          buf = buf.slice(nl + 1);
          messages.push(msg);
          if (msg.type === 'hello')
            c.write(JSON.stringify({ v: 1, type: 'config', runner_name: 'hatchery-test-1', jit_config: JIT,
              job_timeout_s: timeoutS, runner_command: command }) + '\n');
        }
      });
    });
    server.listen(sock, () => {
      const state = join(dir, `state-${Math.random().toString(16).slice(2)}`);
      const args = ['--socket', sock, '--state-dir', state, ...(user ? ['--user', user] : [])];
      const agent = spawn(agentBin, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH } });
      let stderr = '';
      agent.stderr.on('data', (d) => { stderr += d; });
      const timer = setTimeout(() => { agent.kill('SIGKILL'); reject(new Error(`agent hung:\n${stderr}`)); }, 120000);
      agent.on('exit', (code) => {
        clearTimeout(timer);
        server.close();
        resolve({ code, messages, stderr, exited: messages.find((m) => m.type === 'exited') });
      });
    });
  });
}

function script(name, body) {
  const p = join(dir, name);
  writeFileSync(p, `#!/bin/sh\n${body}\n`);
  chmodSync(p, 0o755);
  return p;
}

after(() => rmSync(dir, { recursive: true, force: true }));

// Each test below is a conversation of its own (its own socket, state and scripts), so
// they run side by side: the re-launches' real 5 s waits overlap instead of adding up.
describe('the Listener return codes', { concurrency: true }, () => {
  const meanings = {
    0: /^success/, 1: /^terminated error/, 5: /^session conflict/, 6: /^runner configuration refreshed/,
    9: /^unknown return code/,
  };
  for (const [code, meaning] of Object.entries(meanings)) {
    test(`code ${code} ends the job and is reported with its meaning`, async () => {
      const r = await converse({ command: [script(`exit${code}`, `exit ${code}`)] });
      assert.equal(r.exited?.code, Number(code), r.stderr);
      assert.match(r.exited.meaning, meaning);
      assert.equal(r.exited.relaunches, 0);
    });
  }
  for (const code of [2, 3, 4]) {
    test(`code ${code} re-launches the Listener, as run.sh does, up to 3 times`, { timeout: 60000 }, async () => {
      const count = join(dir, `count${code}`);
      writeFileSync(count, '');
      const r = await converse({ command: [script(`relaunch${code}`, `echo x >> ${count}; exit ${code}`)] });
      assert.equal(r.exited?.code, code, r.stderr);
      assert.equal(r.exited.relaunches, 3);
      assert.equal(readFileSync(count, 'utf8').trim().split('\n').length, 4, 'first run and 3 re-launches');
      assert.match(r.stderr, /re-launching in 5 s/);
    });
  }
  test('a retryable error that then succeeds ends with 0', { timeout: 30000 }, async () => {
    const flag = join(dir, 'second-time');
    const r = await converse({ command: [script('flaky', `[ -e ${flag} ] && exit 0; touch ${flag}; exit 2`)] });
    assert.equal(r.exited?.code, 0, r.stderr);
    assert.equal(r.exited.relaunches, 1);
  });
  test('a runner that is not there: 127, "could not be started", and never `started`', async () => {
    const r = await converse({ command: [join(dir, 'no-such-runner')] });
    assert.equal(r.exited?.code, 127);
    assert.match(r.exited.meaning, /could not be started/);
    // hatcheryd counts an image fault only without `started`: after it, a job may forge any exit.
    assert.deepEqual(r.messages.map((m) => m.type).filter((t) => t !== 'heartbeat'), ['hello', 'exited']);
  });
  test('a runner that ran and exits 127 itself is reported after `started`', async () => {
    const r = await converse({ command: [script('exit127-after-start', 'exit 127')] });
    assert.equal(r.exited?.code, 127);
    assert.deepEqual(r.messages.map((m) => m.type).filter((t) => t !== 'heartbeat'), ['hello', 'started', 'exited']);
  });
});

describe('how the runner is started', () => {
  test('as the --user account, never root, with a clean environment and HOME', async () => {
    const out = join(dir, 'whoami');
    const r = await converse({
      user: 'nobody',
      command: [script('whoami', `id -u > ${out}.tmp; id -G >> ${out}.tmp; echo "$HOME" >> ${out}.tmp; env | sort >> ${out}.tmp; mv ${out}.tmp ${out}`)],
    });
    assert.equal(r.exited?.code, 0, r.stderr);
    const [uid, groups, home, ...env] = readFileSync(out, 'utf8').trim().split('\n');
    const nobody = spawnSync('id', ['-u', 'nobody'], { encoding: 'utf8' }).stdout.trim();
    assert.equal(uid, nobody);
    assert.ok(!groups.split(' ').includes('0'), `no root group: ${groups}`);
    assert.equal(home, spawnSync('sh', ['-c', 'getent passwd nobody | cut -d: -f6'], { encoding: 'utf8' }).stdout.trim());
    const names = env.map((l) => l.split('=')[0]);
    assert.ok(names.includes('ACTIONS_RUNNER_INPUT_JITCONFIG'), 'the JIT config is in the environment');
    assert.ok(!names.some((n) => n.startsWith('NODE') || n === 'INVOCATION_ID'), `clean environment: ${names}`);
    assert.equal(r.messages.find((m) => m.type === 'started').uid, Number(nobody));
  });
  // Each of these succeeds for `nobody` on this machine without the agent's filter (a user
  // namespace gives its creator every capability inside it); root's `unshare -n` and
  // `nsenter` (setns into its own network namespace) too.
  const namespaceProbes = {
    userns: 'unshare -Ur true',
    netdev: 'unshare -Urn ip link add v0 type veth peer name v1',
    mount: 'unshare -Urm sh -c "mount -t tmpfs probe /mnt"',
    setns: 'nsenter -t $$ -n true',
    netns: 'unshare -n true',
  };
  const probeScript = (out) => `{ grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\\t';
${Object.entries(namespaceProbes).map(([k, cmd]) => `  if ${cmd} 2>/dev/null; then echo ${k}=made; else echo ${k}=refused; fi`).join('\n')}
  (true) && echo child=ran; } > ${out}.tmp; mv ${out}.tmp ${out}`;
  for (const user of ['nobody', null]) {
    test(`in a container the runner (${user ?? 'root'}) has no_new_privs and makes no namespace; its own processes still run`, async () => {
      const out = join(dir, `namespaces-${user ?? 'root'}`);
      const r = await converse({ user, command: [script(`namespaces-${user ?? 'root'}`, probeScript(out))] });
      assert.equal(r.exited?.code, 0, r.stderr);
      const seen = Object.fromEntries(readFileSync(out, 'utf8').trim().split('\n').map((l) => l.split(/[:=]/)));
      assert.deepEqual(seen, {
        NoNewPrivs: '1', Seccomp: '2', child: 'ran',
        ...Object.fromEntries(Object.keys(namespaceProbes).map((k) => [k, 'refused'])),
      });
      assert.match(r.stderr, /started \(pid \d+, uid \d+, no new namespaces\)/);
    });
  }
  test('--user root is refused', async () => {
    const r = spawnSync(agentBin, ['--socket', join(dir, 'none.sock'), '--user', 'root'], { encoding: 'utf8', timeout: 10000 });
    assert.equal(r.status, 1);
    assert.match(r.stderr, /that user is root/);
  });
  test('the JIT config is on no command line, and a trailing --jitconfig is dropped', async () => {
    const seen = join(dir, 'argv');
    const r = await converse({
      command: [script('argv', `echo "$#:$*" > ${seen}; sleep 6`), '--jitconfig'],
    });
    assert.equal(r.exited?.code, 0, r.stderr);
    assert.equal(readFileSync(seen, 'utf8').trim(), '0:');
    assert.equal(r.exited.jit_on_argv, false);
    assert.ok(r.exited.argv_scans >= 1);
  });
  test('a job that puts the JIT config on an argv is caught by the agent', async () => {
    const r = await converse({
      command: [script('leak', 'exec sh -c "sleep 7; exit 0" "$ACTIONS_RUNNER_INPUT_JITCONFIG"')],
    });
    assert.equal(r.exited?.jit_on_argv, true, r.stderr);
  });
  test('the agent waited for the CRNG and says hello with boot and machine ids and a nonce of its own', async () => {
    const r = await converse({ command: [script('ok', 'exit 0')] });
    const hello = r.messages.find((m) => m.type === 'hello');
    assert.equal(hello.crng_ready, true);
    assert.match(hello.boot_id, /^[0-9a-f-]{36}$/);
    assert.equal(typeof hello.machine_id, 'string');
    assert.equal(hello.version, readFileSync(new URL('../../CMakeLists.txt', import.meta.url), 'utf8').match(/project\(hatchery VERSION ([0-9.]+)/)[1]);
    // 16 bytes from the CRNG, drawn per agent: the same machine and boot, another nonce.
    assert.match(hello.nonce, /^[0-9a-f]{32}$/);
    const again = (await converse({ command: [script('ok', 'exit 0')] })).messages.find((m) => m.type === 'hello');
    assert.equal(again.boot_id, hello.boot_id);
    assert.notEqual(again.nonce, hello.nonce);
  });
});

describe("the job's report", () => {
  test('a JSON object the job wrote is sent with the exit', async () => {
    const r = await converse({ command: [script('report', 'printf \'{"result":"succeeded","n":1}\' > "$HATCHERY_REPORT_FILE"')] });
    assert.deepEqual(r.exited?.report, { result: 'succeeded', n: 1 });
  });
  test('a report that is not an object, too large, or a link to a file of root is not sent', async () => {
    const secret = join(dir, 'root-secret.json');
    writeFileSync(secret, '{"secret":"of root"}');
    for (const body of [
      'echo "[1,2,3]" > "$HATCHERY_REPORT_FILE"',
      `head -c 5000 /dev/zero | tr '\\0' ' ' > "$HATCHERY_REPORT_FILE"`,
      `ln -s ${secret} "$HATCHERY_REPORT_FILE"`,
      'echo "{not json" > "$HATCHERY_REPORT_FILE"',
    ]) {
      const r = await converse({ user: 'nobody', command: [script(`bad-${Math.random()}`, body)] });
      assert.equal(r.exited?.code, 0, r.stderr);
      assert.equal(r.exited.report, undefined, body);
    }
  });
});

// Protocol version 2: the agent outlives its controller. This test plays a controller that
// goes away and a new one that comes back on the same socket, as hatcheryd does across a
// restart (a container's agent reconnects; a VM's port reopens).
function lineReader(sock, onMessage) {
  let buf = '';
  sock.on('data', (d) => {
    buf += d;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      onMessage(JSON.parse(line));
    }
  });
}

// Listens on `path` until one agent connects; resolves with the connection and a queue of
// its messages (`next(type)` waits for the next message of that type).
function controllerAt(path) {
  return new Promise((resolve) => {
    const server = net.createServer((c) => {
      const messages = [];
      const waiters = [];
      lineReader(c, (msg) => {
        messages.push(msg);
        for (const w of waiters.splice(0)) w();
      });
      const next = (type, ms = 30000) => new Promise((res, rej) => {
        const deadline = setTimeout(() => rej(new Error(`no ${type} in ${ms} ms: ${JSON.stringify(messages)}`)), ms);
        const look = () => {
          const i = messages.findIndex((m) => m.type === type);
          if (i >= 0) { clearTimeout(deadline); res(messages.splice(0, i + 1).pop()); } else waiters.push(look);
        };
        look();
      });
      const send = (msg) => c.write(JSON.stringify({ v: 2, ...msg }) + '\n');
      resolve({ server, conn: c, next, send, messages });
    });
    server.listen(path);
  });
}

function startAgent(sock) {
  const state = join(dir, `state-${Math.random().toString(16).slice(2)}`);
  const agent = spawn(agentBin, ['--socket', sock, '--state-dir', state], { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH } });
  agent.stderrText = '';
  agent.stderr.on('data', (d) => { agent.stderrText += d; });
  agent.exited = new Promise((res) => agent.on('exit', (code) => res(code)));
  return agent;
}

const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
const config = (command) => ({ type: 'config', runner_name: 'hatchery-test-7', jit_config: JIT, job_timeout_s: 60, runner_command: command });

// An agent whose controller gave it a runner, then died: connection and socket gone.
async function runnerWithoutController(sock, command) {
  const firstP = controllerAt(sock);
  const agent = startAgent(sock);
  const first = await firstP;
  const hello = await first.next('hello');
  first.send(config([command]));
  const started = await first.next('started');
  first.conn.destroy();
  first.server.close();
  rmSync(sock, { force: true });
  return { agent, started, hello };
}

describe('protocol version 2: resuming after the controller went away', () => {
  test('hello says protocol 2, and the exit is kept until the controller acknowledges it', async () => {
    const sock = join(dir, 'v2-ack.sock');
    const ctl = controllerAt(sock);
    const agent = startAgent(sock);
    const c = await ctl;
    const hello = await c.next('hello');
    assert.equal(hello.protocol, 2);
    c.send(config([script('v2ok', 'exit 0')]));
    const exited = await c.next('exited');
    assert.equal(exited.code, 0);
    assert.equal(exited.v, 2);
    // No ack yet: the agent waits.
    const early = await Promise.race([agent.exited, sleep(2500).then(() => 'still waiting')]);
    assert.equal(early, 'still waiting', agent.stderrText);
    c.send({ type: 'ack', of: 'exited' });
    assert.equal(await agent.exited, 0, agent.stderrText);
    c.server.close();
  });

  test('the controller dies mid-run and the runner exits meanwhile: the next controller gets the exit on resume', async () => {
    const sock = join(dir, 'v2-resume-exited.sock');
    const { agent, started } = await runnerWithoutController(sock, script('v2sleep', 'sleep 2; exit 0'));
    assert.ok(started.pid > 0);
    await sleep(4000); // the runner exits while nobody listens
    assert.equal(agent.exitCode, null, `the agent must wait for a controller:\n${agent.stderrText}`);
    const second = await controllerAt(sock);
    second.send({ type: 'resume' });
    const resumed = await second.next('resumed');
    assert.equal(resumed.state, 'exited');
    assert.equal(resumed.runner_name, 'hatchery-test-7');
    const exited = await second.next('exited');
    assert.equal(exited.code, 0);
    assert.ok(exited.duration_s >= 2);
    second.send({ type: 'ack', of: 'exited' });
    assert.equal(await agent.exited, 0, agent.stderrText);
    assert.match(agent.stderrText, /the controller hung up/);
    assert.ok(!agent.stderrText.includes(JIT), 'no JIT config in the agent log');
    second.server.close();
  });

  test('the controller comes back while the runner runs: resumed says running, with heartbeats after', async () => {
    const sock = join(dir, 'v2-resume-running.sock');
    const { agent, started, hello } = await runnerWithoutController(sock, script('v2long', 'sleep 9; exit 3'));
    await sleep(1500);
    const second = await controllerAt(sock);
    second.send({ type: 'resume' });
    const resumed = await second.next('resumed');
    assert.equal(resumed.state, 'running');
    assert.equal(resumed.pid, started.pid);
    // Its identity as its hello gave it, for the new controller's clone check.
    assert.match(resumed.nonce, /^[0-9a-f]{32}$/);
    assert.equal(resumed.nonce, hello.nonce);
    assert.equal(resumed.machine_id, hello.machine_id);
    await second.next('heartbeat', 15000);
    second.send({ type: 'shutdown', reason: 'test over' });
    const exited = await second.next('exited', 30000);
    assert.ok(exited.signal || exited.code !== undefined);
    second.send({ type: 'ack', of: 'exited' });
    await agent.exited;
    second.server.close();
  });

  test('a version 1 controller is still served as before: no ack needed', async () => {
    const r = await converse({ command: [script('v1ok', 'exit 0')] });
    assert.equal(r.exited?.code, 0, r.stderr);
    assert.equal(r.exited.v, 1);
    assert.equal(r.code, 0);
  });
});

// A restored guest (a warm template): the agent takes the host's seed into the kernel's
// pool, reseeds the CRNG, makes a new machine-id and says hello again. Run in a mount
// namespace of its own whose /etc is a scratch directory: the agent rewrites
// /etc/machine-id, and this machine's must stay. No `time_ms`: the agent would set the
// clock (the real-guest test covers that).
describe('restore: a clone takes a new identity before any config', () => {
  function startRestorableAgent(sock, etc) {
    const state = join(dir, `state-${Math.random().toString(16).slice(2)}`);
    const agent = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c',
      'mount --bind "$1" /etc && exec "$2" --socket "$3" --state-dir "$4"', 'sh', etc, agentBin, sock, state],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH } });
    agent.stderrText = '';
    agent.stderr.on('data', (d) => { agent.stderrText += d; });
    agent.exited = new Promise((res) => agent.on('exit', (code) => res(code)));
    return agent;
  }
  const seed = () => Buffer.from(Array.from({ length: 64 }, () => Math.floor(Math.random() * 256))).toString('hex');

  test('hello says it can be restored; after restore, a new nonce, machine-id and RNG sample', async () => {
    const etc = mkdtempSync(join(tmpdir(), 'hatchery-agent-etc-'));
    const templateId = '0123456789abcdef0123456789abcdef';
    writeFileSync(join(etc, 'machine-id'), templateId + '\n');
    const sock = join(dir, 'restore.sock');
    const ctl = controllerAt(sock);
    const agent = startRestorableAgent(sock, etc);
    const c = await ctl;
    const first = await c.next('hello');
    assert.equal(first.restore, true);
    assert.equal(first.restored, undefined);
    assert.equal(first.machine_id, templateId);
    c.send({ type: 'restore', seed: seed() });
    const second = await c.next('hello');
    assert.equal(second.restored, true, agent.stderrText);
    assert.match(second.nonce, /^[0-9a-f]{32}$/);
    assert.notEqual(second.nonce, first.nonce);
    assert.match(second.rng_sample, /^[0-9a-f]{64}$/);
    assert.match(second.machine_id, /^[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}$/, 'a v4 id, as systemd makes');
    assert.notEqual(second.machine_id, templateId);
    assert.equal(readFileSync(join(etc, 'machine-id'), 'utf8'), second.machine_id + '\n');
    assert.equal(second.boot_id, first.boot_id, "the kernel's boot id cannot change");
    // A second restore of the same image would say another sample again.
    c.send({ type: 'restore', seed: seed() });
    const third = await c.next('hello');
    assert.notEqual(third.rng_sample, second.rng_sample);
    assert.notEqual(third.machine_id, second.machine_id);
    c.send({ type: 'shutdown', reason: 'test over' });
    assert.equal(await agent.exited, 1, agent.stderrText);
    assert.ok(!agent.stderrText.includes(second.rng_sample), 'the sample is not logged');
    c.server.close();
    rmSync(etc, { recursive: true, force: true });
  });

  // Not hex at all, and hex with a sign or a space in it (which scanf's %x would take).
  for (const [what, bad] of [['not hex', 'zz'.repeat(64)], ['a sign', `-1${'ab'.repeat(63)}`], ['a space', ` f${'ab'.repeat(63)}`]]) {
    test(`a seed that is not 64 bytes of hex (${what}): the clone says so and ends, with no hello`, async () => {
      const etc = mkdtempSync(join(tmpdir(), 'hatchery-agent-etc-'));
      const sock = join(dir, `restore-bad-${what.replace(/\W/g, '')}.sock`);
      const ctl = controllerAt(sock);
      const agent = startRestorableAgent(sock, etc);
      const c = await ctl;
      await c.next('hello');
      c.send({ type: 'restore', seed: bad });
      await agent.exited;
      assert.match(agent.stderrText, /cannot take a new identity after the restore/);
      assert.equal(c.messages.filter((m) => m.type === 'hello').length, 0, 'no second hello');
      c.server.close();
      rmSync(etc, { recursive: true, force: true });
    });
  }
});
