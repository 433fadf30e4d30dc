// Writes a seed corpus for one fuzz target. usage: node make-corpus.mjs TARGET DIR
//  - webhook: every workflow_job, ping and push example from @octokit/webhooks-examples as
//    a raw HTTP request, plus a few malformed ones;
//  - agent_channel: a guest's side of whole conversations (hello, started, heartbeats,
//    exited with a report; resumed), as the agent writes them;
//  - agent_parser: the controller's lines to the agent (config, resume, ack, shutdown);
//  - config: the example config and variations of it;
//  - admin: the CLI's requests.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const [target, dir] = process.argv.slice(2);
if (!dir) {
  console.error('usage: make-corpus.mjs webhook|agent_channel|agent_parser|config|admin|front_frames DIR');
  process.exit(2);
}
mkdirSync(dir, { recursive: true });
let n = 0;
const seed = (bytes) => writeFileSync(join(dir, `seed-${n++}`), bytes);
const lines = (...msgs) => msgs.map((m) => (typeof m === 'string' ? m : JSON.stringify(m)) + '\n').join('');

if (target === 'webhook') {
  const examples = require('@octokit/webhooks-examples');
  const request = (event, body, delivery) => Buffer.concat([
    Buffer.from([1]), // flag: let the harness sign the body
    Buffer.from(
      'POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
        `X-GitHub-Event: ${event}\r\nX-GitHub-Delivery: ${delivery}\r\n` +
        'X-Hub-Signature-256: sha256=00\r\n' +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n` + body),
  ]);
  for (const name of ['workflow_job', 'ping', 'push']) {
    for (const payload of examples.find((e) => e.name === name).examples) seed(request(name, JSON.stringify(payload), `d-${n}`));
  }
  seed(request('workflow_job', '{"action":', 'bad-json'));
  seed(Buffer.from('\x00POST /webhook HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n'));
} else if (target === 'agent_channel') {
  const hello = { v: 2, type: 'hello', version: '0.3.0', protocol: 2, arch: 'ppc64le', boot_id: 'b0', machine_id: 'm0', crng_ready: true, crng_wait_s: 0.1 };
  const exited = { v: 2, type: 'exited', code: 0, duration_s: 12.5, timed_out: false, relaunches: 0, meaning: 'success', jit_on_argv: false, argv_scans: 3, report: { output: 'x', probes: { '10.0.2.2:8080': 'closed' } } };
  const job = lines(hello, { v: 2, type: 'started', pid: 42, uid: 1000 }, { v: 2, type: 'heartbeat' }, exited);
  for (const flags of [0, 2]) seed(Buffer.concat([Buffer.from([flags]), Buffer.from(job)]));
  seed(Buffer.concat([Buffer.from([1]), Buffer.from(lines({ v: 2, type: 'resumed', state: 'running', runner_name: 'hatchery-fuzz-1', pid: 42, boot_id: 'b0' }, { v: 2, type: 'heartbeat' }, exited))]));
  seed(Buffer.concat([Buffer.from([1]), Buffer.from(lines({ v: 2, type: 'resumed', state: 'exited', runner_name: 'r', pid: 0, boot_id: 'b0' }, exited))]));
  seed(Buffer.concat([Buffer.from([2]), Buffer.from(lines({ ...hello, v: 1, protocol: 1 }, { v: 1, type: 'exited', code: 3 }))]));
  seed(Buffer.concat([Buffer.from([0]), Buffer.from(lines(exited, hello))])); // out of order
} else if (target === 'agent_parser') {
  seed(lines({ v: 2, type: 'config', runner_name: 'hatchery-p10-7', jit_config: 'eyJ0ZXN0IjoxfQ==', job_timeout_s: 3600, runner_command: ['/home/runner/run.sh', '--jitconfig'] }));
  seed(lines({ v: 1, type: 'config', runner_name: 'r', jit_config: 'x', runner_command: ['/bin/true'] }));
  seed(lines({ v: 2, type: 'resume' }));
  seed(lines({ v: 2, type: 'ack', of: 'exited' }));
  seed(lines({ v: 2, type: 'shutdown', reason: 'retired' }));
} else if (target === 'config') {
  const here = fileURLToPath(new URL('.', import.meta.url));
  const example = readFileSync(join(here, '../../deploy/hatchery.example.yaml'), 'utf8');
  seed(example);
  seed('controller_id: fuzz\nstate_dir: /tmp/x\nadmin_socket: /tmp/x.sock\nwebhook_secret_file: /tmp/s\n');
  seed(example.replace(/max_runners: \d+/g, 'max_runners: -1'));
  seed(example + '\nunknown_key: [1, {a: b}]\n');
  seed('pools: &a [*a]\n');
} else if (target === 'admin') {
  for (const r of [{ cmd: 'jobs', limit: 5 }, { cmd: 'runners', all: true }, { cmd: 'hosts' }, { cmd: 'capacity' }, { cmd: 'drain', host: 'p10-a' }, { cmd: 'logs', runner: 'hatchery-x-1' }, { cmd: 'reload' },
    { cmd: 'rotate', pool: 'linux.ppc64le' }, { cmd: 'runners', pol: 'x' }, { cmd: 'delete', runner: 'hatchery-x-2', force: true }]) {
    seed(JSON.stringify(r) + '\n');
  }
  seed('{"cmd":"jobs"');
  seed('not json\n');
} else if (target === 'front_frames') {
  // front_frame.h: four little-endian uint32s (type, id, meta length, body length), then
  // the meta fields (each a uint32 length and its bytes), then the body. The first byte of
  // a seed is the fuzz target's read size.
  const u32 = (n) => { const b = Buffer.alloc(4); b.writeUInt32LE(n); return b; };
  const frame = (type, id, fields, body = '') => {
    const meta = Buffer.concat(fields.map((f) => Buffer.concat([u32(Buffer.byteLength(f)), Buffer.from(f)])));
    return Buffer.concat([u32(type), u32(id), u32(meta.length), u32(Buffer.byteLength(body)), meta, Buffer.from(body)]);
  };
  const REQUEST = 3, REJECTED = 4, STATS = 5;
  const webhook = frame(REQUEST, 1, ['0', 'POST', '/webhook', '127.0.0.1:4711', 'Content-Type', 'application/json',
    'X-GitHub-Event', 'workflow_job', 'X-Hub-Signature-256', 'sha256=' + '0'.repeat(64)], '{"action":"queued"}');
  const healthz = frame(REQUEST, 2, ['1', 'GET', '/healthz', '[::1]:80']);
  seed(Buffer.concat([Buffer.from([255]), webhook, healthz]));
  seed(Buffer.concat([Buffer.from([0]), webhook]));
  seed(Buffer.concat([Buffer.from([7]), frame(REJECTED, 0, ['401', 'signature does not match', '10.0.0.1:1', '0.000012'])]));
  seed(Buffer.concat([Buffer.from([63]), frame(STATS, 0, [], 'x'.repeat(64)), frame(REQUEST, 3, ['2', 'HEAD', '/metrics', 'p'])]));
  seed(Buffer.concat([Buffer.from([31]), frame(REQUEST, 4, ['9', 'GET', '/', 'p', 'lonely-header'])]));
} else {
  console.error(`unknown target ${target}`);
  process.exit(2);
}
console.log(`wrote ${n} seeds to ${dir}`);
