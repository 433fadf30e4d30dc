// Writes a seed corpus for fuzz_webhook: every workflow_job, ping and push example from
// @octokit/webhooks-examples as a raw HTTP request, plus a few malformed ones.
// usage: node make-corpus.mjs DIR
import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const require = createRequire(import.meta.url);
const examples = require('@octokit/webhooks-examples');
const dir = process.argv[2];
mkdirSync(dir, { recursive: true });

function request(event, body, delivery) {
  return Buffer.concat([
    Buffer.from([1]), // flag: let the harness sign the body
    Buffer.from(
      'POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
        `X-GitHub-Event: ${event}\r\nX-GitHub-Delivery: ${delivery}\r\n` +
        'X-Hub-Signature-256: sha256=00\r\n' +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n` + body),
  ]);
}

let n = 0;
for (const name of ['workflow_job', 'ping', 'push']) {
  for (const payload of examples.find((e) => e.name === name).examples) {
    writeFileSync(join(dir, `seed-${n}`), request(name, JSON.stringify(payload), `d-${n}`));
    n++;
  }
}
writeFileSync(join(dir, `seed-${n++}`), request('workflow_job', '{"action":', 'bad-json'));
writeFileSync(join(dir, `seed-${n++}`),
  Buffer.from('\x00POST /webhook HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n'));
console.log(`wrote ${n} seeds to ${dir}`);
