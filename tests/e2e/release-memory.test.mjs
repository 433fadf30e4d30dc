// A release build's memory after a job (tests/e2e/release-memory.sh): hatcheryd from the
// Debian package, GitHub over TLS through nginx, once over HTTP/2 and once over HTTP/1.1.
// Every copy of the JIT config hatcheryd made (curl's and OpenSSL's buffers, the parsed
// JSON, the runner record, the channel message) must be wiped by then, freed blocks
// included: the scan reads all of the core's writable memory, where glibc keeps what it
// freed. It finds the webhook secret, which the core must hold, so it can find the mark.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { Daemon, freePort, githubConfig, memoryHolds, workflowJob } from '../integration/lib/daemon.mjs';
import { containerPool, lxcHost } from './containers.mjs';

const api = process.env.GITHUB_DOUBLE_URL;
const tls = process.env.TLS_DIR;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let nginx;
const ports = {};

// nginx in front of the double: one server speaks HTTP/2 (ALPN h2, which libcurl asks for
// first), the other HTTP/1.1 only. Its log says which protocol each request came in.
before(async () => {
  ports.h2 = await freePort();
  ports.h1 = await freePort();
  const server = (port, h2) => `  server {
    listen 127.0.0.1:${port} ssl${h2 ? ' http2' : ''};
    ssl_certificate ${tls}/tls.pem;
    ssl_certificate_key ${tls}/tls.key;
    location / { proxy_pass ${api}; proxy_set_header Host $host; }
  }`;
  writeFileSync(join(tls, 'nginx.conf'), `worker_processes 1;
pid ${tls}/nginx.pid;
error_log ${tls}/nginx-error.log;
events { worker_connections 256; }
http {
  log_format proto '$server_port $server_protocol $request_method $uri $status';
  access_log ${tls}/access.log proto;
  client_body_temp_path ${tls}/body;
  proxy_temp_path ${tls}/proxy;
${server(ports.h2, true)}
${server(ports.h1, false)}
}
`);
  const r = spawnSync('nginx', ['-c', join(tls, 'nginx.conf')], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  nginx = Number(readFileSync(join(tls, 'nginx.pid'), 'utf8'));
});

after(() => {
  if (nginx) process.kill(nginx);
});

for (const [proto, key] of [['HTTP/2.0', 'h2'], ['HTTP/1.1', 'h1']]) {
  test(`the JIT config is wiped from a release build's memory after its job, GitHub over TLS and ${proto}`, async () => {
    const url = `https://127.0.0.1:${ports[key]}`;
    const d = new Daemon({
      hostsExtra: lxcHost({ vcpus: 2, guests: 2 }),
      pools: containerPool('ct', { max: 1 }),
      extra: githubConfig({ reconcileIntervalS: 5, runnerGroupId: 3, org: 'pytorch' })
        .replace(`api_url: ${api}\n`, `api_url: ${url}\n  ca_file: ${tls}/ca.pem\n`),
    });
    await d.start();
    try {
      const mark = `jitmark-${randomBytes(12).toString('hex')}`;
      await fetch(`${api}/__double/jit`, { method: 'POST', body: `sleep=1 exit=0 ${mark}` });
      const id = 9900000000 + (key === 'h2' ? 1 : 2);
      assert.equal((await d.post('workflow_job', workflowJob('queued', id, ['ct']))).status, 202);
      const runner = await d.until('an idle container', () =>
        d.cliJson('runners').runners.find((r) => r.pool === 'ct' && r.state === 'idle'), { ms: 60000 });
      assert.equal((await d.post('workflow_job', workflowJob('in_progress', id, ['ct'], runner.name))).status, 202);
      await d.until(`${runner.name} to end`, () =>
        d.cliJson('runners', '--all').runners.find((r) => r.name === runner.name)?.state === 'deleted', { ms: 60000 });
      assert.equal((await d.post('workflow_job', workflowJob('completed', id, ['ct'], runner.name))).status, 202);
      const ended = d.cliJson('runners', '--all').runners.find((r) => r.name === runner.name);
      assert.equal(ended.exit_code, 0);
      await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=1 exit=0' });
      // Nothing waits to send a config: no copy is legitimate any more.
      await d.until('no runner waiting for its config', () =>
        !d.cliJson('runners').runners.some((r) => ['pending', 'creating', 'booting'].includes(r.state)));
      await sleep(500);

      // The config came through nginx, in the protocol asked for.
      const log = readFileSync(join(tls, 'access.log'), 'utf8').split('\n');
      const jit = log.filter((l) => l.startsWith(`${ports[key]} `) && l.includes('/generate-jitconfig'));
      assert.ok(jit.length > 0, `no generate-jitconfig through nginx on ${url}:\n${log.slice(-10).join('\n')}`);
      for (const l of jit) assert.equal(l.split(' ')[1], proto, l);

      const held = memoryHolds(d.proc.pid, d.secret);
      assert.ok(held.found.length > 0, `the scan works: the webhook secret is found (${held.scanned} bytes read)`);
      const leaked = memoryHolds(d.proc.pid, mark);
      console.log(`release build over ${proto}: ${leaked.scanned} bytes of hatcheryd's memory read, the JIT config in ${leaked.found.length} regions`);
      assert.deepEqual(leaked.found, [], 'the JIT config is wiped from the release build\'s memory');
    } finally {
      await d.stop();
      d.cleanup();
    }
  });
}
