// Test harness: runs the real hatcheryd binary on loopback with a temporary config, state
// directory and secret, and talks to it with node's own HTTP client and the real CLI.
import { execFile, spawn, spawnSync } from 'node:child_process';
import { chmodSync, closeSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sign } from '@octokit/webhooks-methods';

export const HATCHERYD = process.env.HATCHERYD;
export const HATCHERY_CLI = process.env.HATCHERY_CLI;
// hatcheryd refuses root unless told why: the tests run as root on a machine of their own.
export const ROOT_ARGS = process.getuid() === 0 ? ['--allow-root', 'the tests run as root on a throwaway machine'] : [];
if (!HATCHERYD || !HATCHERY_CLI) throw new Error('HATCHERYD and HATCHERY_CLI must be set (ctest does)');

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

// Others may pass through (not list), as through /var/lib on a host: a container's root, no
// one on this machine, reaches its socket directory under state_dir/containers.
export function tempDir(prefix = 'hatchery-it-') {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  chmodSync(dir, 0o711);
  return dir;
}

export const DEFAULT_POOLS = `pools:
  - name: linux.ppc64le
    labels: [linux.ppc64le]
    arch: ppc64le
    image: /var/lib/hatchery/images/ppc64le.qcow2
    max_runners: 2
  - name: linux.s390x
    labels: [linux.s390x]
    arch: s390x
    image: /var/lib/hatchery/images/s390x.qcow2
    max_runners: 1
  - name: k8s
    labels: [k8s]
    arch: x86_64
    image: /var/lib/hatchery/images/x86_64.qcow2
    max_runners: 1
`;

// `webhooks: false` leaves webhook_secret_file out (a config whose every pool is a scale
// set's).
export function writeConfig(dir, { port, secret = 'test-webhook-secret', http = '', extra = '', pools = DEFAULT_POOLS, hostsExtra = '', listenHost = '127.0.0.1', webhooks = true } = {}) {
  const secretFile = join(dir, 'webhook-secret');
  writeFileSync(secretFile, secret + '\n', { mode: 0o600 });
  chmodSync(secretFile, 0o600);
  const configFile = join(dir, 'hatchery.yaml');
  writeFileSync(configFile, `controller_id: it
listen: ${listenHost}:${port}
state_dir: ${join(dir, 'state')}
admin_socket: ${join(dir, 'admin.sock')}
${webhooks ? `webhook_secret_file: ${secretFile}\n` : ''}
${http ? 'http:\n' + http : ''}
hosts:
  - name: host-a
    uri: test:///default
    vcpus: 16
    memory_mib: 32768
    max_guests: 8
${hostsExtra}${pools}${extra}`);
  return configFile;
}

export class Daemon {
  constructor(opts = {}) {
    this.opts = opts;
    this.dir = opts.dir ?? tempDir();
    this.secret = opts.secret ?? 'test-webhook-secret';
    this.logs = '';
  }

  get socket() { return join(this.dir, 'admin.sock'); }
  get db() { return join(this.dir, 'state', 'hatchery.db'); }

  async start() {
    if (!this.port) this.port = await freePort();
    this.config = writeConfig(this.dir, { ...this.opts, port: this.port, secret: this.secret });
    this.proc = spawn(HATCHERYD, ['--config', this.config, ...ROOT_ARGS], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, ...(this.opts.env ?? {}) },
    });
    this.exited = new Promise((resolve) => this.proc.on('exit', (code, signal) => resolve({ code, signal })));
    await new Promise((resolve, reject) => {
      const from = this.logs.length;
      const timer = setTimeout(() => reject(new Error('hatcheryd did not become ready:\n' + this.logs)), 15000);
      this.proc.stderr.on('data', (d) => {
        this.logs += d.toString();
        // This start's readiness: the log runs on across restarts.
        if (this.logs.indexOf('event=daemon.ready', from) >= 0) { clearTimeout(timer); resolve(); }
      });
      this.exited.then(({ code, signal }) => { clearTimeout(timer); reject(new Error(`hatcheryd exited ${code ?? signal}:\n${this.logs}`)); });
    });
    return this;
  }

  // Rewrites the config file with `opts` over the current ones (for a reload).
  rewrite(opts = {}) {
    this.opts = { ...this.opts, ...opts };
    this.config = writeConfig(this.dir, { ...this.opts, port: this.port, secret: this.secret });
    return this.config;
  }

  // Graceful stop; resolves with the exit status (0 expected, and ASan reports leaks as non-zero).
  async stop() {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode) return this.exited;
    this.proc.kill('SIGTERM');
    return this.exited;
  }

  async kill9() {
    this.proc.kill('SIGKILL');
    return this.exited;
  }

  cleanup() { rmSync(this.dir, { recursive: true, force: true }); }

  cli(...args) {
    const r = spawnSync(HATCHERY_CLI, ['--socket', this.socket, ...args], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    return { code: r.status, stdout: r.stdout, stderr: r.stderr };
  }

  cliJson(...args) {
    const r = this.cli('--json', ...args);
    if (r.code !== 0) throw new Error(`hatchery ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
    return JSON.parse(r.stdout);
  }

  // The same without blocking node's loop meanwhile: for a watcher polling while the test
  // sends requests (a blocking call holds them back, and a slow answer then makes them
  // late).
  cliJsonAsync(...args) {
    return new Promise((resolve, reject) => {
      execFile(HATCHERY_CLI, ['--socket', this.socket, '--json', ...args], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
        if (err) reject(new Error(`hatchery ${args.join(' ')} exited ${err.code}: ${stderr}`));
        else resolve(JSON.parse(stdout));
      });
    });
  }

  jobs() { return this.cliJson('jobs', '--limit', '10000').jobs; }

  // Polls `predicate` (sync or async) until it returns something truthy, and returns it;
  // past `ms`, fails with `what` and the end of this daemon's log.
  async until(what, predicate, { ms = 180000, everyMs = 200, tail = 40 } = {}) {
    for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, everyMs))) {
      const v = await predicate();
      if (v) return v;
    }
    throw new Error(`timed out waiting for ${what}\n${this.logs.split('\n').slice(-tail).join('\n')}`);
  }

  post(event, payload, { secret = this.secret, ...options } = {}) {
    return postWebhook(this.port, secret, event, payload, options);
  }
}

// A delivery as GitHub sends it, signed with `secret` by @octokit/webhooks-methods, to a
// hatcheryd on 127.0.0.1:`port` (one the tests started, or one on a stock host).
export async function postWebhook(port, secret, event, payload, { delivery = randomDelivery(), headers = {}, tamper = null, path = '/webhook' } = {}) {
  const body = typeof payload === 'string' ? payload : JSON.stringify(payload);
  const signature = await sign(secret, body);
  const sent = tamper ? tamper(body) : body;
  return request(port, {
    method: 'POST', path, body: sent,
    headers: {
      'Content-Type': 'application/json',
      'User-Agent': 'GitHub-Hookshot/044aadd',
      'X-GitHub-Event': event,
      'X-GitHub-Delivery': delivery,
      'X-GitHub-Hook-ID': '292430182',
      'X-Hub-Signature-256': signature,
      ...headers,
    },
  });
}

let deliveryCounter = 0;
export function randomDelivery() {
  deliveryCounter++;
  const hex = (n, w) => n.toString(16).padStart(w, '0');
  return `${hex(Date.now() & 0xffffffff, 8)}-${hex(process.pid & 0xffff, 4)}-11ef-8000-${hex(deliveryCounter, 12)}`;
}

export function request(port, { method = 'GET', path = '/', headers = {}, body = null, tls = null, host = '127.0.0.1' } = {}) {
  // A header set to undefined is left out (to test missing headers).
  headers = Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== undefined));
  return new Promise((resolve, reject) => {
    const fn = tls ? httpsRequest : httpRequest;
    const req = fn({ host, port, method, path, headers, agent: false, ...(tls ?? {}) }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    if (body !== null) req.write(body);
    req.end();
  });
}

// Sends raw bytes on a fresh TCP connection and collects everything until the server closes
// (or `waitMs` passes).
export function rawExchange(port, chunks, { waitMs = 5000, gapMs = 0 } = {}) {
  return new Promise((resolve) => {
    const sock = connect(port, '127.0.0.1');
    let data = '';
    let closed = false;
    const started = Date.now();
    const timer = setTimeout(() => { sock.destroy(); resolve({ data, closed, ms: Date.now() - started }); }, waitMs);
    sock.on('data', (d) => { data += d.toString(); });
    sock.on('close', () => { closed = true; clearTimeout(timer); resolve({ data, closed, ms: Date.now() - started }); });
    sock.on('error', () => {});
    sock.on('connect', async () => {
      for (const c of chunks) {
        if (sock.destroyed) break;
        sock.write(c);
        if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
      }
    });
  });
}

export function examples(name) {
  // createRequire keeps the JSON import simple across node versions.
  return JSON.parse(readFileSync(new URL(import.meta.resolve('@octokit/webhooks-examples')), 'utf8'))
    .find((e) => e.name === name).examples;
}

// The `github` section for a daemon talking to the GitHub double (tests/github/with-prism.sh
// exports its URL and the App's key).
// runnerGroupId: the scope's group (a trusted pool's must not be the default group, 1).
// One runner scope: the repository pytorch/pytorch, or with `org` that organization (a
// trusted pool needs an org scope: runner groups exist for organizations only), or with
// `enterprise` that enterprise. maxRetries: the client's (its default without).
export function githubConfig({ reconcileIntervalS = 5, runnerGroupId = 1, org = null, enterprise = null, maxRetries = null } = {}) {
  const scope = org ? `org: ${org}` : enterprise ? `enterprise: ${enterprise}` : 'repo: pytorch/pytorch';
  return `github:
  api_url: ${process.env.GITHUB_DOUBLE_URL}
  app_id: ${process.env.APP_ID}
  app_private_key_file: ${process.env.APP_KEY_FILE}${maxRetries === null ? '' : `\n  max_retries: ${maxRetries}`}
  runner_scopes:
    - ${scope}
      runner_group_id: ${runnerGroupId}
reconcile_interval_s: ${reconcileIntervalS}
`;
}

// GitHub's own example workflow_job delivery for `action`, with our job id, labels and
// runner name, made `createdAgoMs` ago (GitHub sends `queued` within seconds of that; an
// old one is a redelivery or a replay, checked with GitHub before a runner is made).
export function workflowJob(action, id, labels, runner = null, { createdAgoMs = 0 } = {}) {
  const all = examples('workflow_job');
  const p = structuredClone(all.find((e) => e.action === action) ?? all[5]);
  p.action = action;
  p.workflow_job.id = id;
  p.workflow_job.status = action;
  p.workflow_job.labels = labels;
  p.workflow_job.runner_name = runner;
  p.workflow_job.created_at = new Date(Date.now() - createdAgoMs).toISOString().replace(/\.\d{3}Z$/, 'Z');
  return p;
}

// /proc/PID/status as an object (Name, Seccomp, NoNewPrivs…).
export function processStatus(pid) {
  return Object.fromEntries(readFileSync(`/proc/${pid}/status`, 'utf8').trim().split('\n').map((l) => l.split(/:\s*/, 2)));
}

// The pid of hatcheryd's HTTP front (controller/front.c): its one child named hatcheryd-front.
export function frontPid(daemonPid) {
  const children = readFileSync(`/proc/${daemonPid}/task/${daemonPid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  const fronts = children.filter((p) => processStatus(p).Name === 'hatcheryd-front');
  if (fronts.length !== 1) throw new Error(`hatcheryd ${daemonPid} has ${fronts.length} fronts among children ${children}`);
  return fronts[0];
}

// Where in a live process's writable memory `needle` is: the /proc/PID/maps lines of the
// regions holding it (empty when nowhere), and how many bytes were read. Regions over
// 1 GiB are skipped: they are ASan's reserved shadow, not data. Freed blocks count too:
// ASan keeps them in its quarantine unwiped, so a secret freed without a wipe is found.
export function memoryHolds(pid, needle) {
  const want = Buffer.from(needle);
  const fd = openSync(`/proc/${pid}/mem`, 'r');
  const found = [];
  let scanned = 0;
  const chunk = 8n << 20n;
  try {
    for (const line of readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n')) {
      const m = /^([0-9a-f]+)-([0-9a-f]+) rw/.exec(line);
      if (!m) continue;
      const [start, end] = [BigInt('0x' + m[1]), BigInt('0x' + m[2])];
      if (end - start > 1n << 30n) continue;
      for (let at = start; at < end; at += chunk) {
        // Overlapping reads, so a needle across two chunks is seen.
        const len = Number((end - at < chunk ? end - at : chunk)) + (at + chunk < end ? want.length : 0);
        const buf = Buffer.alloc(len);
        let got = 0;
        try { got = readSync(fd, buf, 0, len, at); } catch { break; }
        scanned += got;
        const hit = buf.subarray(0, got).indexOf(want);
        if (hit >= 0) {
          found.push(line);
          break;
        }
      }
    }
  } finally {
    closeSync(fd);
  }
  return { found, scanned };
}

