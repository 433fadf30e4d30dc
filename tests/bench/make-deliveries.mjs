// Pre-signs workflow_job deliveries for the benchmark, so the load generator (wrk, whose Lua
// has no HMAC) sends real signed requests with unique job and delivery ids.
// usage: node make-deliveries.mjs OUTDIR SECRET THREADS PER_THREAD
import { createHmac } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { sign, verify } from '@octokit/webhooks-methods';

const require = createRequire(import.meta.url);
const [outdir, secret, threads, perThread] = process.argv.slice(2);
mkdirSync(outdir, { recursive: true });
const payload = structuredClone(require('@octokit/webhooks-examples').find((e) => e.name === 'workflow_job').examples[5]);
payload.workflow_job.labels = ['self-hosted', 'linux.ppc64le'];
payload.workflow_job.id = '__ID__';
const [prefix, suffix] = JSON.stringify(payload).split('"__ID__"');
writeFileSync(`${outdir}/prefix`, prefix);
writeFileSync(`${outdir}/suffix`, suffix);
// One check against octokit's own sign(): our fast path must produce the same value.
const probe = prefix + '1' + suffix;
const mine = 'sha256=' + createHmac('sha256', secret).update(probe).digest('hex');
if (mine !== (await sign(secret, probe)) || !(await verify(secret, probe, mine))) throw new Error('signature mismatch');
for (let t = 0; t < Number(threads); t++) {
  const lines = [];
  for (let i = 0; i < Number(perThread); i++) {
    const id = 5000000000 + t * 10000000 + i;
    lines.push(`${id} ${createHmac('sha256', secret).update(prefix + id + suffix).digest('hex')}`);
  }
  writeFileSync(`${outdir}/sigs-${t}`, lines.join('\n') + '\n');
}
console.log(`body ${Buffer.byteLength(probe)} bytes, ${threads} x ${perThread} deliveries`);
