// Two hatcheryd instances of one controller_id sharing a PostgreSQL store, as two controller
// machines would (docs/OPERATIONS.md, "Two controllers"): the server (a cluster of the
// test's own, tests/postgresql/cluster.sh), a controller instance, and the recording proxies
// that tell which instance called GitHub or libvirt, and when.
// Used by github.leadership (libvirt's test driver) and e2e.leadership_guests (real guests).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import { createServer as createTcpServer, connect } from 'node:net';
import { join } from 'node:path';
import { HATCHERYD, HATCHERY_CLI, ROOT_ARGS, freePort, postWebhook, tempDir } from './daemon.mjs';

const CLUSTER = new URL('../../postgresql/cluster.sh', import.meta.url).pathname;
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function cluster(...args) {
  const r = spawnSync(CLUSTER, args, { encoding: 'utf8' });
  assert.equal(r.status, 0, `cluster.sh ${args.join(' ')}: ${r.stderr}`);
  return r.stdout.trim();
}

export async function until(what, check, ms = 30000) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(50)) {
    const v = await check();
    if (v) return v;
  }
  throw new Error(`timed out waiting for ${what}`);
}

// GitHub through a proxy that records each call: {t, method, url}.
export async function githubProxy() {
  const target = new URL(process.env.GITHUB_DOUBLE_URL);
  const calls = [];
  const server = createServer((req, res) => {
    calls.push({ t: Date.now(), method: req.method, url: req.url });
    const up = httpRequest({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: { ...req.headers, host: target.host } }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on('error', () => { res.writeHead(502); res.end(); });
    req.pipe(up);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}`, calls, close: () => server.close() };
}

// A TCP proxy to PostgreSQL; cut() stops moving bytes either way and closes nothing.
export async function tcpProxy(port) {
  const pairs = [];
  let cut = false;
  const server = createTcpServer((c) => {
    if (cut) { c.pause(); pairs.push([c]); return; }
    const u = connect(port, '127.0.0.1');
    c.pipe(u);
    u.pipe(c);
    c.on('error', () => {});
    u.on('error', () => {});
    pairs.push([c, u]);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: server.address().port,
    cut() {
      cut = true;
      for (const [c, u] of pairs) {
        if (!u) continue;
        c.unpipe(u); u.unpipe(c); c.pause(); u.pause();
      }
    },
    close() { for (const p of pairs) for (const s of p) s.destroy(); server.close(); },
  };
}

// libvirt's RPC, as libvirt frames it (src/rpc/virnetprotocol.x): each packet is a 4-byte
// big-endian length (itself included), then the header: program, version, procedure,
// type, serial, status. The keepalive program's packets (pings and pongs, which libvirt's
// own event loop sends) are not calls.
export const LIBVIRT_KEEPALIVE_PROGRAM = 0x6b656570;
const LIBVIRT_TYPES = ['call', 'reply', 'message', 'stream', 'call_with_fds', 'reply_with_fds', 'stream_hole'];

// A unix-socket proxy in front of libvirtd's socket, for one client: every packet the
// client sends is recorded, {t, program, procedure, type}, in `packets`. A host URI names
// it with `?socket=` (qemu+unix:///system?socket=PATH).
export async function libvirtProxy(path, target = '/run/libvirt/libvirt-sock') {
  rmSync(path, { force: true });
  const packets = [];
  const socks = [];
  const server = createTcpServer((c) => {
    const u = connect(target);
    socks.push(c, u);
    let pending = Buffer.alloc(0);
    c.on('data', (chunk) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 28 && pending.length >= pending.readUInt32BE(0)) {
        const len = pending.readUInt32BE(0);
        if (len < 28) { c.destroy(); u.destroy(); return; } // not libvirt's: nothing to forward
        packets.push({ t: Date.now(), program: pending.readUInt32BE(4), procedure: pending.readUInt32BE(12), type: LIBVIRT_TYPES[pending.readUInt32BE(16)] ?? 'unknown' });
        pending = pending.subarray(len);
      }
    });
    c.pipe(u);
    u.pipe(c);
    c.on('error', () => u.destroy());
    u.on('error', () => c.destroy());
    c.on('close', () => u.destroy());
    u.on('close', () => c.destroy());
  });
  await new Promise((r) => server.listen(path, r));
  return {
    path,
    packets,
    // What the client asked of libvirt since `t`: its packets other than keepalives.
    callsSince: (t) => packets.filter((p) => p.t >= t && p.program !== LIBVIRT_KEEPALIVE_PROGRAM),
    close() { for (const s of socks) s.destroy(); server.close(); },
  };
}

// One hatcheryd instance of the controller `controllerId` (its guests' domains are
// hatchery-ID-N), its store the PostgreSQL `conninfo`, GitHub reached through `github` (a
// githubProxy). `body` is the config's hosts: and pools: sections.
export class Controller {
  constructor(name, { conninfo, github, leaseS, body, reconcileS = 5, controllerId = 'it' }) {
    Object.assign(this, { name, conninfo, github, leaseS, body, reconcileS, controllerId });
    this.dir = tempDir(`hatchery-lead-${name}-`);
    this.logFiles = []; // one per start
  }

  get socket() { return join(this.dir, 'admin.sock'); }
  get stateDir() { return join(this.dir, 'state'); }

  async start() {
    this.port ??= await freePort();
    const secretFile = join(this.dir, 'webhook-secret');
    writeFileSync(secretFile, 'test-webhook-secret\n', { mode: 0o600 });
    const config = join(this.dir, 'hatchery.yaml');
    writeFileSync(config, `controller_id: ${this.controllerId}
listen: 127.0.0.1:${this.port}
state_dir: ${this.stateDir}
admin_socket: ${this.socket}
webhook_secret_file: ${secretFile}
database:
  postgresql: "${this.conninfo}"
  lease_s: ${this.leaseS}
github:
  api_url: ${this.github.url}
  app_id: ${process.env.APP_ID}
  app_private_key_file: ${process.env.APP_KEY_FILE}
  runner_scopes:
    - repo: pytorch/pytorch
      runner_group_id: 1
reconcile_interval_s: ${this.reconcileS}
${this.body}`);
    // The log goes to a file, not a pipe: a pipe the test does not drain while it waits
    // for a synchronous call (psql, cluster.sh, the CLI) would hold hatcheryd up in its
    // next log line (seen: a leader held 10 s while PostgreSQL started).
    this.logFiles.push(join(this.dir, `hatcheryd.${this.logFiles.length + 1}.log`));
    const fd = openSync(this.logFiles.at(-1), 'a');
    this.proc = spawn(HATCHERYD, ['--config', config, ...ROOT_ARGS], { stdio: ['ignore', 'ignore', fd] });
    closeSync(fd);
    this.exited = new Promise((resolve) => this.proc.on('exit', (code, signal) => resolve({ code, signal })));
    await until(`${this.name} ready`, () => this.logs.includes('event=daemon.ready') || this.proc.exitCode !== null, 15000);
    assert.equal(this.proc.exitCode, null, `${this.name} exited:\n${this.logs}`);
    return this;
  }

  // This start's log, and every start's (for a failure's report).
  get logs() { return this.logFiles.length ? readFileSync(this.logFiles.at(-1), 'utf8') : ''; }
  get all() { return this.logFiles.map((f) => readFileSync(f, 'utf8')).join(''); }

  leads() { return this.logs.includes('event=lease.acquired'); }
  epoch() { return Number(/event=lease\.acquired epoch=(\d+)/.exec(this.logs)?.[1]); }

  cliJson(...args) {
    const r = spawnSync(HATCHERY_CLI, ['--socket', this.socket, '--json', ...args], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout);
  }

  leader() { return this.cliJson('leader'); }

  post(payload) { return postWebhook(this.port, 'test-webhook-secret', 'workflow_job', payload); }

  // For a failure's message: how this instance stands, and its last log lines.
  report() {
    const p = this.proc;
    const state = !p ? 'never started' : p.exitCode !== null ? `exited ${p.exitCode}` : p.signalCode ? `killed by ${p.signalCode}` : 'running';
    return `--- ${this.name} (pid ${p?.pid}): ${state}; its log's tail:\n${this.all.split('\n').slice(-40).join('\n')}`;
  }

  async stop() {
    if (this.proc && this.proc.exitCode === null && !this.proc.signalCode) this.proc.kill('SIGTERM');
    return this.exited;
  }

  // Stops it (a paused one continued first; SIGKILL after 30 s), keeps its log where
  // HATCHERY_TEST_KEEP_LOGS says, and removes its directory.
  async remove() {
    if (this.proc) {
      this.proc.kill('SIGCONT');
      if (!(await Promise.race([this.stop(), sleep(30000).then(() => null)]))) this.proc.kill('SIGKILL');
    }
    if (process.env.HATCHERY_TEST_KEEP_LOGS) writeFileSync(`${process.env.HATCHERY_TEST_KEEP_LOGS}/${this.name}.log`, this.all);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

// A test body whose failure says how each instance stands (one may have ended, and why is
// in its log): `instances` is called at the failure, for the instances of the moment.
export function reported(instances, body) {
  return async () => {
    try {
      await body();
    } catch (e) {
      e.message += `\n${instances().filter(Boolean).map((i) => i.report()).join('\n')}`;
      throw e;
    }
  };
}
