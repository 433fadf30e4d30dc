// Sends one signed workflow_job delivery, built from GitHub's own example payload
// (@octokit/webhooks-examples) and signed with octokit's sign(), as GitHub would.
// usage: node send-workflow-job.mjs URL SECRET_FILE ACTION JOB_ID LABEL[,LABEL...] [RUNNER]
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';
import { sign } from '@octokit/webhooks-methods';

const require = createRequire(import.meta.url);
const [url, secretFile, action, jobId, labels, runner] = process.argv.slice(2);
if (!labels) {
  console.error('usage: send-workflow-job.mjs URL SECRET_FILE ACTION JOB_ID LABELS [RUNNER]');
  process.exit(2);
}
const secret = readFileSync(secretFile, 'utf8').replace(/\r?\n$/, '');
const examples = require('@octokit/webhooks-examples').find((e) => e.name === 'workflow_job').examples;
const payload = structuredClone(examples.find((e) => e.action === action) ?? examples[0]);
payload.action = action;
payload.workflow_job.status = action === 'waiting' ? 'waiting' : action;
payload.workflow_job.id = Number(jobId);
payload.workflow_job.labels = labels.split(',');
payload.workflow_job.runner_name = runner ?? null;
// Made now, as GitHub sends it: a queued job made long ago is checked with GitHub first.
payload.workflow_job.created_at = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
payload.repository.full_name = 'pytorch/pytorch';
const body = JSON.stringify(payload);
const res = await fetch(url, {
  method: 'POST',
  body,
  headers: {
    'Content-Type': 'application/json',
    'User-Agent': 'GitHub-Hookshot/hatchery-demo',
    'X-GitHub-Event': 'workflow_job',
    'X-GitHub-Delivery': randomUUID(),
    'X-Hub-Signature-256': await sign(secret, body),
  },
});
console.log(`POST ${new URL(url).pathname} workflow_job ${action} job=${jobId} -> ${res.status} ${(await res.text()).trim()}`);
process.exit(res.status >= 200 && res.status < 300 ? 0 : 1);
