// Sends N signed workflow_job `queued` deliveries (GitHub's example, relabelled), 50 at a
// time, for load tests. usage: node send-burst.mjs URL SECRET_FILE N LABEL [FIRST_ID]
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { sign } from '@octokit/webhooks-methods';

const require = createRequire(import.meta.url);
const [url, secretFile, n, label, first = '8800000000'] = process.argv.slice(2);
const secret = readFileSync(secretFile, 'utf8').replace(/\r?\n$/, '');
const example = require('@octokit/webhooks-examples').find((e) => e.name === 'workflow_job').examples.find((e) => e.action === 'queued');
for (let i = 0; i < Number(n); i += 50) {
  await Promise.all(Array.from({ length: Math.min(50, Number(n) - i) }, async (_, k) => {
    const p = structuredClone(example);
    p.workflow_job.id = Number(first) + i + k;
    p.workflow_job.labels = [label];
    p.workflow_job.created_at = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'); // fresh, as GitHub sends it
    const body = JSON.stringify(p);
    const r = await fetch(url, { method: 'POST', body, headers: {
      'Content-Type': 'application/json', 'X-GitHub-Event': 'workflow_job',
      'X-GitHub-Delivery': `burst-${first}-${i + k}`, 'X-Hub-Signature-256': await sign(secret, body) } });
    if (r.status !== 202) throw new Error(`delivery ${i + k}: status ${r.status}`);
  }));
}
