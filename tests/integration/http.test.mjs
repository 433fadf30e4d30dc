// The HTTP listener's limits and protocol behaviour, over real sockets: timeouts, the
// connection limit, keep-alive and pipelining, /healthz, /metrics checked by promtool, TLS.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from 'node:net';
import { networkInterfaces } from 'node:os';
import { after, before, describe, test } from 'node:test';
import { Daemon, examples, freePort, rawExchange, request, tempDir } from './lib/daemon.mjs';

// A connection to `port`, once open, that ignores its errors (the tests hold or drop it).
const opened = (port) => new Promise((resolve) => { const s = connect(port, '127.0.0.1', () => resolve(s)); s.on('error', () => {}); });

describe('http listener', () => {
  const d = new Daemon({
    http: '  read_timeout_ms: 400\n  idle_timeout_ms: 1500\n  max_connections: 8\n  max_headers: 16\n',
  });
  before(() => d.start());
  after(async () => {
    const { code } = await d.stop();
    d.cleanup();
    assert.equal(code, 0);
  });

  test('/healthz answers', async () => {
    const res = await request(d.port, { path: '/healthz' });
    assert.equal(res.status, 200);
    assert.equal(JSON.parse(res.body).status, 'ok');
  });

  test('unknown paths are 404 and wrong methods 405', async () => {
    assert.equal((await request(d.port, { path: '/nope' })).status, 404);
    assert.equal((await request(d.port, { path: '/webhook' })).status, 405);
    assert.equal((await request(d.port, { method: 'POST', path: '/metrics', body: '' })).status, 405);
  });

  test('a stalled request is answered 408 and closed by the read timeout', async () => {
    const res = await rawExchange(d.port, ['POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{"a'], { waitMs: 5000 });
    assert.ok(res.closed, 'closed by the server');
    assert.match(res.data, /^HTTP\/1\.1 408 /);
    assert.ok(res.ms >= 350 && res.ms < 3000, `closed after ${res.ms} ms`);
  });

  test('a slow-loris client sending a byte at a time is cut off too', async () => {
    const head = 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(40);
    const res = await rawExchange(d.port, head.split(''), { waitMs: 5000, gapMs: 50 });
    assert.ok(res.closed);
    assert.match(res.data, /^HTTP\/1\.1 408 /);
  });

  test('an idle kept-alive connection is closed after idle_timeout_ms', async () => {
    const res = await rawExchange(d.port, ['GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'], { waitMs: 6000 });
    assert.match(res.data, /^HTTP\/1\.1 200 /);
    assert.ok(res.closed);
    assert.ok(res.ms >= 1400, `closed after ${res.ms} ms`);
  });

  test('too many headers is 431', async () => {
    let head = 'GET /healthz HTTP/1.1\r\n';
    for (let i = 0; i < 20; i++) head += `X-H${i}: v\r\n`;
    const res = await rawExchange(d.port, [head + '\r\n']);
    assert.match(res.data, /^HTTP\/1\.1 431 /);
    const big = await rawExchange(d.port, [`GET /healthz HTTP/1.1\r\nX-Big: ${'b'.repeat(20000)}\r\n\r\n`]);
    assert.match(big.data, /^HTTP\/1\.1 431 /);
  });

  test('garbage is 400', async () => {
    const res = await rawExchange(d.port, ['\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n']);
    assert.match(res.data, /^HTTP\/1\.1 400 /);
    assert.ok(res.closed);
  });

  test('keep-alive and pipelining: answers come back in order on one connection', async () => {
    const payload = structuredClone(examples('workflow_job')[5]);
    payload.workflow_job.id = 6100000001;
    payload.workflow_job.labels = ['self-hosted', 'Linux.PPC64LE'];
    const body = JSON.stringify(payload);
    const { sign } = await import('@octokit/webhooks-methods');
    const sig = await sign(d.secret, body);
    const webhook = `POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-GitHub-Event: workflow_job\r\nX-GitHub-Delivery: pipe-1\r\nX-Hub-Signature-256: ${sig}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const res = await rawExchange(d.port, [
      'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n' + webhook + 'GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
    ]);
    const statuses = [...res.data.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
    assert.deepEqual(statuses, [200, 202, 404]);
    assert.ok(res.closed, 'Connection: close honoured');
  });

  test('HEAD gets the head GET would get, and no body', async () => {
    const res = await rawExchange(d.port, ['HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n']);
    const end = res.data.indexOf('\r\n\r\n');
    assert.match(res.data.slice(0, end), /^HTTP\/1\.1 200 [^]*\r\nContent-Length: [1-9]/);
    // The next bytes are the GET's answer: the HEAD's body was never sent.
    assert.ok(res.data.slice(end + 4).startsWith('HTTP/1.1 200 '), JSON.stringify(res.data));
    assert.match(res.data, /"status":"ok"/);
  });

  test('whitespace before a header\'s colon is a 400, not a body read as the next request', async () => {
    const smuggled = 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n';
    const res = await rawExchange(d.port, [`POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length : ${smuggled.length}\r\n\r\n${smuggled}`]);
    const statuses = [...res.data.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
    assert.deepEqual(statuses, [400], res.data);
    assert.match(res.data, /whitespace between a header name and its colon/);
    assert.ok(res.closed);
  });

  test('keep-alive: requests sent one after another on one connection are all answered', async () => {
    const { sign } = await import('@octokit/webhooks-methods');
    // Made before the connection: its read timeout runs from the accept (a signing that took
    // longer than read_timeout_ms under load was answered 408).
    const requests = [];
    for (let i = 0; i < 3; i++) {
      const payload = structuredClone(examples('workflow_job')[5]);
      payload.workflow_job.id = 6200000000 + i;
      const body = JSON.stringify(payload);
      requests.push(`POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: workflow_job\r\nX-GitHub-Delivery: ka-${i}\r\nX-Hub-Signature-256: ${await sign(d.secret, body)}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    }
    const sock = connect(d.port, '127.0.0.1');
    let data = '';
    sock.on('data', (b) => { data += b.toString(); });
    await new Promise((r) => sock.on('connect', r));
    const waitFor = (n) => new Promise((resolve, reject) => {
      const t = setInterval(() => {
        if ((data.match(/HTTP\/1\.1 /g) ?? []).length >= n) { clearInterval(t); resolve(); }
      }, 5);
      // Generous: each 202 waits for an fsync, which a busy disk can hold for seconds.
      setTimeout(() => { clearInterval(t); reject(new Error('no answer: ' + data)); }, 15000);
    });
    for (let i = 0; i < 3; i++) {
      sock.write(requests[i]);
      await waitFor(i + 1);
    }
    sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    await waitFor(4);
    sock.destroy();
    assert.deepEqual([...data.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1])), [202, 202, 202, 200]);
  });

  test('connections beyond max_connections get 503, and the daemon keeps serving', async () => {
    const held = [];
    for (let i = 0; i < 8; i++) {
      held.push(await opened(d.port));
    }
    await new Promise((r) => setTimeout(r, 100));
    const res = await rawExchange(d.port, ['GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n']);
    assert.match(res.data, /^HTTP\/1\.1 503 /);
    for (const s of held) s.destroy();
    await new Promise((r) => setTimeout(r, 100));
    assert.equal((await request(d.port, { path: '/healthz' })).status, 200);
  });

  test('/metrics passes promtool check metrics', async () => {
    const res = await request(d.port, { path: '/metrics' });
    assert.equal(res.status, 200);
    assert.match(res.headers['content-type'], /^text\/plain; version=0\.0\.4/);
    const check = spawnSync('promtool', ['check', 'metrics'], { input: res.body, encoding: 'utf8' });
    assert.equal(check.status, 0, check.stdout + check.stderr);
    assert.match(res.body, /hatchery_http_timeouts_total [1-9]/);
    assert.match(res.body, /hatchery_http_connections_rejected_total [1-9]/);
    assert.match(res.body, /hatchery_pool_max_runners\{pool="linux.ppc64le"\} 2/);
    assert.match(res.body, /hatchery_jobs\{pool="linux.ppc64le",status="queued"\} 1/);
    // Every configured pool has every reason's series, at 0 until it happens.
    const pools = [...res.body.matchAll(/^hatchery_pool_max_runners\{pool="([^"]+)"\}/gm)].map((m) => m[1]);
    assert.ok(pools.length >= 2, pools.join());
    for (const pool of pools) {
      assert.match(res.body, new RegExp(`^hatchery_runners_created_total\\{pool="${pool}"\\} \\d+$`, 'm'));
      for (const name of ['hatchery_runners_failed_total', 'hatchery_jobs_lost_total'])
        for (const reason of ['boot_timeout', 'guest', 'agent', 'github', 'store', 'hung', 'idle_max_age',
          'job_timeout', 'not_adopted', 'restart', 'operator'])
          assert.match(res.body, new RegExp(`^${name}\\{pool="${pool}",reason="${reason}"\\} \\d+$`, 'm'), `${name} ${pool} ${reason}`);
    }
    // Answers by status code, the conventional label.
    assert.match(res.body, /^hatchery_http_responses_total\{code="200"\} [1-9]\d*$/m);
    assert.match(res.body, /^hatchery_http_responses_total\{code="404"\} [1-9]\d*$/m);
    assert.match(res.body, /^hatchery_http_responses_total\{code="408"\} [1-9]\d*$/m);
    // Prometheus's process family, from /proc/self.
    for (const name of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'process_virtual_memory_bytes',
      'process_open_fds', 'process_max_fds', 'process_start_time_seconds']) {
      assert.match(res.body, new RegExp(`^${name} [0-9.e+]+$`, 'm'), name);
    }
    const fds = Number(/^process_open_fds (\d+)$/m.exec(res.body)[1]);
    assert.ok(fds > 3 && fds < 200, `${fds} open fds`);
    // Each host's capacity beside its use, from the config.
    assert.match(res.body, /^hatchery_host_vcpus\{host="host-a"\} 16$/m);
    assert.match(res.body, /^hatchery_host_memory_bytes\{host="host-a"\} 34359738368$/m);
    assert.match(res.body, /^hatchery_host_max_guests\{host="host-a"\} 8$/m);
    assert.match(res.body, /^hatchery_host_memory_used_bytes\{host="host-a"\} 0$/m);
    // The queued ppc64le job has waited; the pool with nothing queued says 0.
    const age = Number(/^hatchery_pool_oldest_queued_job_seconds\{pool="linux.ppc64le"\} ([0-9.]+)$/m.exec(res.body)?.[1]);
    assert.ok(age > 0 && age < 600, `oldest queued: ${age} s`);
    assert.match(res.body, /^hatchery_pool_oldest_queued_job_seconds\{pool="k8s"\} 0\.000$/m);
    // Every configured pool and every status has its series, zeros included, so that a
    // query sees 0 rather than a gap; so has every status of the unmatched jobs.
    for (const pool of ['linux.ppc64le', 'linux.s390x', 'k8s'])
      for (const status of ['waiting', 'queued', 'in_progress', 'completed'])
        assert.match(res.body, new RegExp(`^hatchery_jobs\\{pool="${pool.replace('.', '\\.')}",status="${status}"\\} \\d+$`, 'm'), `${pool} ${status}`);
    assert.match(res.body, /^hatchery_jobs\{pool="k8s",status="waiting"\} 0$/m);
    for (const status of ['waiting', 'queued', 'in_progress', 'completed'])
      assert.match(res.body, new RegExp(`^hatchery_jobs_unmatched\\{status="${status}"\\} \\d+$`, 'm'));
  });

  test('an unmatched job counts once as a job and once per delivery, as the names say', async () => {
    const count = async (re) => Number(re.exec((await request(d.port, { path: '/metrics' })).body)?.[1] ?? 0);
    const deliveries = /^hatchery_webhook_unmatched_deliveries_total (\d+)$/m;
    const jobsQueued = /^hatchery_jobs_unmatched\{status="queued"\} (\d+)$/m;
    const jobsRunning = /^hatchery_jobs_unmatched\{status="in_progress"\} (\d+)$/m;
    const [d0, q0, r0] = [await count(deliveries), await count(jobsQueued), await count(jobsRunning)];
    const payload = structuredClone(examples('workflow_job')[5]);
    payload.workflow_job.id = 5100000001;
    payload.workflow_job.labels = ['no-pool-has-this'];
    assert.equal((await d.post('workflow_job', payload)).status, 202);
    payload.action = 'in_progress';
    payload.workflow_job.status = 'in_progress';
    assert.equal((await d.post('workflow_job', payload)).status, 202);
    assert.equal(await count(deliveries), d0 + 2);
    assert.equal((await count(jobsQueued)) + (await count(jobsRunning)), q0 + r0 + 1);
  });
});

describe('TLS listener', () => {
  const dir = tempDir();
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert,
    '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { encoding: 'utf8' });
  chmodSync(key, 0o600);
  const d = new Daemon({ dir, http: `  tls_cert_file: ${cert}\n  tls_key_file: ${key}\n  max_connections_per_address: 4\n` });
  before(() => { assert.equal(made.status, 0, made.stderr); return d.start(); });
  after(async () => {
    const { code } = await d.stop();
    d.cleanup();
    assert.equal(code, 0);
  });

  test('a signed delivery over TLS is accepted, and the certificate is verified by the client', async () => {
    const { sign } = await import('@octokit/webhooks-methods');
    const body = JSON.stringify(examples('workflow_job')[6]);
    const res = await request(d.port, {
      method: 'POST', path: '/webhook', body,
      tls: { ca: (await import('node:fs')).readFileSync(cert), servername: undefined },
      headers: { 'Content-Type': 'application/json', 'X-GitHub-Event': 'workflow_job', 'X-GitHub-Delivery': 'tls-1', 'X-Hub-Signature-256': await sign(d.secret, body) },
    });
    assert.equal(res.status, 202, res.body);
    assert.equal(d.jobs().length, 1);
  });

  test('over TLS too, a connection over the limit gets its 503 after the handshake, then the close', async () => {
    const held = [];
    for (let i = 0; i < 4; i++) {
      held.push(await opened(d.port));
    }
    await new Promise((r) => setTimeout(r, 100));
    const res = await request(d.port, { path: '/healthz', tls: { ca: readFileSync(cert) } });
    assert.equal(res.status, 503);
    assert.match(res.body, /too many connections from this address/);
    assert.equal(res.headers.connection, 'close');
    for (const s of held) s.destroy();
    await new Promise((r) => setTimeout(r, 100));
    assert.equal((await request(d.port, { path: '/healthz', tls: { ca: readFileSync(cert) } })).status, 200);
  });

  test('plain HTTP to the TLS port gets no answer and counts a handshake failure', async () => {
    const res = await rawExchange(d.port, ['GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'], { waitMs: 2000 });
    assert.ok(!res.data.includes('HTTP/1.1 200'));
    const metrics = await request(d.port, { path: '/metrics', tls: { ca: (await import('node:fs')).readFileSync(cert) } });
    assert.match(metrics.body, /hatchery_http_tls_handshake_failures_total [1-9]/);
  });
});

// The listener against a client that means harm: more connections from one address than it
// may hold, pipelined requests whose answers are never read, and a flood of /metrics
// scrapes over a store of 300,000 jobs while a health check must still get through.
describe('http listener under abuse', () => {
  const d = new Daemon({
    http: '  read_timeout_ms: 3000\n  max_connections: 64\n  max_connections_per_address: 6\n',
    // ASan keeps freed memory in a quarantine on purpose (256 MiB by default): without it,
    // RSS is what hatcheryd itself holds.
    env: { ASAN_OPTIONS: `${process.env.ASAN_OPTIONS ?? 'detect_leaks=1'}:quarantine_size_mb=0:thread_local_quarantine_size_kb=0` },
  });
  before(async () => {
    // The jobs are written straight into the store while hatcheryd is stopped, as a year
    // of history would be; its triggers keep the counts /metrics reads.
    await d.start();
    await d.stop();
    const now = Date.now();
    const fill = spawnSync('sqlite3', [d.db, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)
      INSERT INTO jobs (id, run_id, repository, labels, pool, status, status_rank, conclusion, updated_at)
      SELECT 8000000000 + i, i, 'pytorch/pytorch', '["linux.ppc64le"]',
             CASE i % 3 WHEN 0 THEN 'linux.ppc64le' WHEN 1 THEN 'linux.s390x' ELSE NULL END,
             'completed', 3, 'success', ${now} FROM n;`], { encoding: 'utf8' });
    assert.equal(fill.status, 0, fill.stderr);
    await d.start();
  });
  after(async () => {
    const { code } = await d.stop();
    d.cleanup();
    assert.equal(code, 0);
  });

  const rssKiB = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${d.proc.pid}/status`, 'utf8'))[1]);
  const metric = async (name) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec((await request(d.port, { path: '/metrics' })).body)?.[1]);

  test('the 300,000 jobs are counted by /metrics', async () => {
    const body = (await request(d.port, { path: '/metrics' })).body;
    assert.match(body, /^hatchery_jobs\{pool="linux.ppc64le",status="completed"\} 100000$/m);
    assert.match(body, /^hatchery_jobs_unmatched\{status="completed"\} 100000$/m);
  });

  test('one address gets max_connections_per_address connections, the next a 503 it can read', async () => {
    const held = [];
    for (let i = 0; i < 6; i++) held.push(await opened(d.port));
    await new Promise((r) => setTimeout(r, 100));
    const res = await rawExchange(d.port, ['GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n']);
    assert.match(res.data, /^HTTP\/1\.1 503 /);
    assert.match(res.data, /too many connections from this address/);
    for (const s of held) s.destroy();
    await new Promise((r) => setTimeout(r, 100));
    assert.equal((await request(d.port, { path: '/healthz' })).status, 200);
  });

  test('pipelined requests whose answers are never read stop being read: memory stays bounded', async () => {
    const stalls = await metric('hatchery_http_backpressure_stalls_total');
    const before = rssKiB();
    const sock = await opened(d.port);
    sock.pause(); // never read an answer
    const packet = Buffer.from('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(1000));
    let sent = 0;
    for (const end = Date.now() + 5000; Date.now() < end;) {
      if (sock.write(packet)) sent += packet.length;
      else await Promise.race([new Promise((r) => sock.once('drain', r)), new Promise((r) => setTimeout(r, 200))]);
    }
    const grownMiB = (rssKiB() - before) / 1024;
    // Still serving others meanwhile.
    assert.equal((await request(d.port, { path: '/healthz' })).status, 200);
    sock.destroy();
    console.log(`# pipelined no-read: ${(sent / 1048576).toFixed(1)} MiB of requests accepted by the kernel, RSS grew ${grownMiB.toFixed(1)} MiB`);
    assert.ok(grownMiB < 64, `hatcheryd grew ${grownMiB.toFixed(1)} MiB`);
    assert.ok(await metric('hatchery_http_backpressure_stalls_total') > stalls);
  });

  test('/healthz answers within 100 ms while /metrics is scraped without pause', async () => {
    const hammers = [];
    let stop = false;
    for (let i = 0; i < 4; i++) {
      hammers.push((async () => {
        const sock = await opened(d.port);
        sock.on('data', () => {});
        const packet = 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(200);
        while (!stop && !sock.destroyed) {
          if (!sock.write(packet)) await Promise.race([new Promise((r) => sock.once('drain', r)), new Promise((r) => setTimeout(r, 100))]);
          else await new Promise((r) => setImmediate(r));
        }
        sock.destroy();
      })());
    }
    await new Promise((r) => setTimeout(r, 500));
    const ms = [];
    for (let i = 0; i < 20; i++) {
      const t0 = process.hrtime.bigint();
      const res = await request(d.port, { path: '/healthz' });
      ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
      assert.equal(res.status, 200);
      await new Promise((r) => setTimeout(r, 50));
    }
    stop = true;
    await Promise.all(hammers);
    ms.sort((a, b) => a - b);
    console.log(`# /healthz under a /metrics flood: median ${ms[10].toFixed(1)} ms, max ${ms[19].toFixed(1)} ms`);
    assert.ok(ms[10] < 100, `median ${ms[10]} ms`);
    assert.ok(ms[19] < 1000, `slowest ${ms[19]} ms`);
  });
});

describe('/metrics on the public listener', () => {
  // Listening on every address; asked through this machine's own address, the peer is not
  // loopback, as a client on the network would not be.
  const d = new Daemon({ listenHost: '0.0.0.0' });
  const hostIp = Object.values(networkInterfaces()).flat().find((a) => a.family === 'IPv4' && !a.internal)?.address;
  before(() => d.start());
  after(async () => {
    await d.stop();
    d.cleanup();
  });

  test('is served to this machine\'s loopback only, unless metrics_listen says where', { skip: !hostIp && 'no address but loopback' }, async () => {
    const away = await request(d.port, { path: '/metrics', host: hostIp });
    assert.equal(away.status, 404);
    assert.doesNotMatch(away.body, /hatchery_/);
    assert.equal((await request(d.port, { path: '/healthz', host: hostIp })).status, 200);
    const local = await request(d.port, { path: '/metrics' });
    assert.equal(local.status, 200);
    assert.match(local.body, /^hatchery_build_info/m);
  });

  test('is not served through a proxy on this machine: its peer is loopback, its client anyone', async () => {
    for (const headers of [{ 'X-Forwarded-For': '203.0.113.7' }, { 'X-Real-IP': '203.0.113.7' },
      { Forwarded: 'for=203.0.113.7' }, { 'X-Forwarded-Host': 'ci.example.org' }]) {
      const res = await request(d.port, { path: '/metrics', headers });
      assert.equal(res.status, 404, JSON.stringify(headers));
      assert.doesNotMatch(res.body, /hatchery_/);
    }
  });
});

describe('metrics_listen', () => {
  const dir = tempDir();
  let metricsPort;
  const d = new Daemon({ dir });
  before(async () => {
    metricsPort = await freePort();
    d.opts.extra = `metrics_listen: 127.0.0.1:${metricsPort}\n`;
    await d.start();
  });
  after(async () => {
    const { code } = await d.stop();
    d.cleanup();
    assert.equal(code, 0);
  });

  test('/metrics moves to its own listener, which takes no webhook', async () => {
    assert.equal((await request(d.port, { path: '/metrics' })).status, 404);
    assert.equal((await request(d.port, { path: '/healthz' })).status, 200);
    const m = await request(metricsPort, { path: '/metrics' });
    assert.equal(m.status, 200);
    assert.match(m.body, /^hatchery_build_info/m);
    assert.equal((await request(metricsPort, { path: '/healthz' })).status, 200);
    assert.equal((await request(metricsPort, { method: 'POST', path: '/webhook', body: '{}' })).status, 404);
  });
});
