// Webhook intake against the real daemon: every example GitHub delivery (octokit's
// collection) signed with octokit's sign(), tampering, bad requests, duplicates, and that
// the secret never shows up anywhere the daemon writes.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Daemon, examples, rawExchange, workflowJob } from './lib/daemon.mjs';

describe('webhooks', () => {
  const d = new Daemon({ secret: 'It is a Secret to Everybody 7f3a' });
  before(() => d.start());
  after(async () => {
    const { code } = await d.stop();
    d.cleanup();
    assert.equal(code, 0, 'hatcheryd exits 0 on SIGTERM (and ASan found no leak)');
  });

  test('every workflow_job example is accepted and stored', async () => {
    const jobs = examples('workflow_job');
    assert.equal(jobs.length, 8);
    for (const [i, payload] of jobs.entries()) {
      const res = await d.post('workflow_job', payload);
      assert.equal(res.status, 202, `example ${i} (${payload.action}): ${res.body}`);
    }
    const stored = d.jobs();
    const ids = new Set(jobs.map((p) => p.workflow_job.id));
    for (const id of ids) {
      const row = stored.find((j) => j.id === id);
      assert.ok(row, `job ${id} stored`);
      // 64-bit ids survive the round trip exactly.
      assert.equal(row.id, id);
    }
    // Job 289782451 had queued, in_progress and completed deliveries: it ends completed.
    assert.equal(stored.find((j) => j.id === 289782451).status, 'completed');
    // The k8s job (labels self-hosted, k8s) matches pool k8s; ubuntu-latest matches none.
    assert.equal(stored.find((j) => j.id === 12877621891).pool, 'k8s');
    assert.equal(stored.find((j) => j.id === 289782451).pool, null);
  });

  test('ping examples get 200', async () => {
    for (const payload of examples('ping')) {
      const res = await d.post('ping', payload);
      assert.equal(res.status, 200, res.body);
    }
  });

  test('events Hatchery does not act on get 204', async () => {
    for (const name of ['push', 'pull_request', 'workflow_run', 'check_run', 'installation']) {
      const res = await d.post(name, examples(name)[0]);
      assert.equal(res.status, 204, `${name}: ${res.body}`);
    }
  });

  test('a changed byte, a wrong secret or no signature is 401 and stores nothing', async () => {
    const before = d.jobs().length;
    const payload = structuredClone(examples('workflow_job')[5]);
    payload.workflow_job.id = 7000000001;
    let res = await d.post('workflow_job', payload, {
      tamper: (body) => body.replace('7000000001', '7000000002'),
    });
    assert.equal(res.status, 401);
    assert.match(res.body, /signature does not match/);
    res = await d.post('workflow_job', payload, { secret: 'not the secret' });
    assert.equal(res.status, 401);
    res = await d.post('workflow_job', payload, { headers: { 'X-Hub-Signature-256': undefined } });
    assert.equal(res.status, 401);
    assert.match(res.body, /missing X-Hub-Signature-256/);
    res = await d.post('workflow_job', payload, { headers: { 'X-Hub-Signature-256': 'sha256=zz' } });
    assert.equal(res.status, 401);
    assert.equal(d.jobs().length, before);
    assert.ok(!d.jobs().some((j) => j.id === 7000000001 || j.id === 7000000002));
  });

  test('malformed JSON and missing fields are 400 with a reason', async () => {
    let res = await d.post('workflow_job', '{"action": "queued", ');
    assert.equal(res.status, 400);
    assert.match(JSON.parse(res.body).error, /malformed JSON/);
    res = await d.post('workflow_job', { action: 'queued', workflow_job: { id: 5, run_id: 6 } });
    assert.equal(res.status, 400);
    assert.match(JSON.parse(res.body).error, /missing field/);
    res = await d.post('workflow_job', examples('workflow_job')[5], { headers: { 'X-GitHub-Delivery': undefined } });
    assert.equal(res.status, 400);
    assert.match(res.body, /X-GitHub-Delivery/);
    // Too long is not "missing": the reason names the limit.
    const long = structuredClone(examples('workflow_job')[5]);
    long.repository.full_name = 'o/' + 'x'.repeat(600);
    res = await d.post('workflow_job', long);
    assert.equal(res.status, 400);
    assert.match(JSON.parse(res.body).error, /repository\.full_name is longer than 512 bytes/);
  });

  test('Content-Type is compared by its media type, not by a prefix', async () => {
    const job = (id) => { const p = structuredClone(examples('workflow_job')[5]); p.workflow_job.id = id; return p; };
    for (const type of ['application/jsonx', 'application/json-seq', 'text/plain', 'application/x-www-form-urlencoded']) {
      const res = await d.post('workflow_job', job(4100000001), { headers: { 'Content-Type': type } });
      assert.equal(res.status, 415, type);
    }
    assert.ok(!d.jobs().some((j) => j.id === 4100000001), 'nothing stored');
    for (const [i, type] of ['application/json; charset=utf-8', 'Application/JSON', ' application/json ;charset=UTF-8'].entries()) {
      const res = await d.post('workflow_job', job(4100000010 + i), { headers: { 'Content-Type': type } });
      assert.equal(res.status, 202, type);
    }
  });

  test('a redelivery has a single effect', async () => {
    const payload = structuredClone(examples('workflow_job')[5]);
    payload.workflow_job.id = 8000000001;
    const delivery = '11111111-2222-11ef-8000-000000000001';
    const first = await d.post('workflow_job', payload, { delivery });
    assert.equal(first.status, 202);
    const deliveriesMetric = async () => {
      const res = await fetch(`http://127.0.0.1:${d.port}/metrics`);
      const text = await res.text();
      return Number(text.match(/hatchery_webhook_deliveries_total\{result="stored"\} (\d+)/)[1]);
    };
    const stored = await deliveriesMetric();
    for (let i = 0; i < 3; i++) {
      const again = await d.post('workflow_job', payload, { delivery });
      assert.equal(again.status, 200);
      assert.match(again.body, /"duplicate":true/);
    }
    assert.equal(await deliveriesMetric(), stored, 'no second store effect');
    assert.equal(d.jobs().filter((j) => j.id === 8000000001).length, 1);
  });

  test('a captured delivery replayed under new delivery ids is a duplicate: deduplicated by its body', async () => {
    const payload = structuredClone(examples('workflow_job')[5]);
    payload.workflow_job.id = 8000000002;
    assert.equal((await d.post('workflow_job', payload)).status, 202);
    const completed = d.jobs().find((j) => j.id === 8000000002);
    // The job moves on; then the captured `queued` comes back, signed, under fresh ids.
    const done = structuredClone(payload);
    done.action = 'completed';
    done.workflow_job.status = 'completed';
    done.workflow_job.conclusion = 'success';
    assert.equal((await d.post('workflow_job', done)).status, 202);
    for (let i = 0; i < 3; i++) {
      const again = await d.post('workflow_job', payload); // a new random delivery id each time
      assert.equal(again.status, 200, again.body);
      assert.match(again.body, /"duplicate":true/);
    }
    const job = d.jobs().find((j) => j.id === 8000000002);
    assert.equal(job.status, 'completed');
    assert.ok(completed);
    // One byte of difference is another delivery (here, GitHub's next action).
    const progress = structuredClone(payload);
    progress.action = 'in_progress';
    progress.workflow_job.status = 'in_progress';
    assert.equal((await d.post('workflow_job', progress)).status, 202);
  });

  test('oversized body gets 413 before it is read', async () => {
    const big = JSON.stringify({ pad: 'x'.repeat(1024 * 1024 + 10) });
    const res = await rawExchange(d.port, [
      `POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-GitHub-Event: workflow_job\r\nContent-Length: ${big.length}\r\n\r\n`,
    ]);
    assert.match(res.data, /^HTTP\/1\.1 413 /);
    assert.ok(res.closed);
  });

  test('a truncated request stores nothing', async () => {
    const before = d.jobs().length;
    const payload = structuredClone(examples('workflow_job')[5]);
    payload.workflow_job.id = 9000000001;
    const body = JSON.stringify(payload);
    const sock = await rawExchange(d.port, [
      `POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: workflow_job\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 100)}`,
    ], { waitMs: 300 });
    assert.equal(sock.data, '');
    assert.equal(d.jobs().length, before);
  });

  test('the secret appears in no log line, metric or CLI answer', async () => {
    const leaks = [d.logs, await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text(),
      d.cli('jobs').stdout, d.cli('pools', '--json').stdout, d.cli('capacity', '--json').stdout];
    for (const text of leaks) {
      assert.ok(!text.includes(d.secret), 'secret leaked');
      assert.ok(!text.includes('Secret to Everybody'), 'part of the secret leaked');
    }
    assert.match(d.logs, /event=webhook.rejected .*status=401/, 'the log does show the rejections');
  });
});

// Anyone can send a delivery with a bad signature: each is counted, but one address gets
// one line in 10 s (the rest are counted in one line once its window has ended), and all
// addresses together no more than 10, so a flood of them cannot flood the journal.
describe('refused deliveries in a flood', () => {
  const d = new Daemon({ secret: 'flood secret 0b5e' });
  before(() => d.start());
  after(async () => { await d.stop(); d.cleanup(); });

  test('are all counted, logged once per address in 10 s, and the rest said in one line', { timeout: 60000 }, async () => {
    const payload = examples('workflow_job')[5];
    const refuse = async () => assert.equal((await d.post('workflow_job', payload, { secret: 'not the secret' })).status, 401);
    const t0 = Date.now();
    for (let i = 0; i < 40; i++) await refuse();
    assert.ok(Date.now() - t0 < 9000, 'the 40 were sent within one window');
    const metrics = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
    assert.match(metrics, /^hatchery_webhook_deliveries_total\{result="unauthorized"\} 40$/m);
    const lines = () => (d.logs.match(/event=webhook\.rejected /g) ?? []).length;
    assert.equal(lines(), 1);
    await new Promise((r) => setTimeout(r, 10000 - (Date.now() - t0) + 200));
    await refuse();
    await d.until('the unlogged ones said', () => /event=webhook\.rejected_unlogged address=127\.0\.0\.1 count=39 window_s=10/.test(d.logs), { ms: 5000 });
    assert.equal(lines(), 2);
  });
});

// Each bad signature costs an HMAC over the whole body: an address that sends more than
// http.max_bad_signatures_per_address of them in 10 s gets 429 before any HMAC, whatever it
// sends, until its window ends; other addresses are not held up by it.
describe('an address that keeps sending bad signatures', () => {
  const d = new Daemon({ secret: 'throttle secret 77c1', http: '  max_bad_signatures_per_address: 5\n' });
  before(() => d.start());
  after(async () => { await d.stop(); d.cleanup(); });

  test('is refused unhashed (429) past its limit, its good deliveries too, until its window ends', { timeout: 60000 }, async () => {
    const payload = examples('workflow_job')[5];
    const bad = async () => (await d.post('workflow_job', payload, { secret: 'not the secret' })).status;
    const t0 = Date.now();
    const statuses = [await bad()];
    // The window began when hatcheryd took the first one: before its answer came back.
    const windowBegunBy = Date.now();
    for (let i = 1; i < 7; i++) statuses.push(await bad());
    assert.deepEqual(statuses, [401, 401, 401, 401, 401, 429, 429]);
    const good = await d.post('workflow_job', payload);
    assert.equal(good.status, 429, 'the address is held for the rest of its window');
    assert.match(good.body, /too many bad signatures from this address/);
    const metrics = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
    assert.match(metrics, /^hatchery_webhook_deliveries_total\{result="unauthorized"\} 5$/m);
    assert.match(metrics, /^hatchery_webhook_deliveries_total\{result="throttled"\} 3$/m);
    assert.ok(Date.now() - t0 < 9000, 'within one window');
    // /healthz and the metrics are not deliveries: not held.
    assert.equal((await fetch(`http://127.0.0.1:${d.port}/healthz`)).status, 200);
    await new Promise((r) => setTimeout(r, 10000 - (Date.now() - windowBegunBy) + 300));
    assert.equal((await d.post('workflow_job', payload)).status, 202, 'a new window: the good delivery is taken');
  });
});

// Behind a reverse proxy on this host every delivery comes from 127.0.0.1: the client the
// proxy names (X-Forwarded-For's last address, or X-Real-IP) is the one held, so that
// anyone's bad signatures do not get GitHub's own deliveries refused.
describe('bad signatures through a proxy on this host', () => {
  const d = new Daemon({ secret: 'proxy secret 51a0', http: '  max_bad_signatures_per_address: 3\n' });
  before(() => d.start());
  after(async () => { await d.stop(); d.cleanup(); });

  test('hold the client the proxy names, not the proxy: GitHub\'s deliveries still pass', async () => {
    const payload = examples('workflow_job')[5];
    // Each good delivery a job of its own (the same body again is a duplicate, 200).
    let n = 0;
    const fresh = () => ({ ...payload, workflow_job: { ...payload.workflow_job, id: payload.workflow_job.id + ++n } });
    const via = (client, extra = {}) => ({ headers: { 'X-Forwarded-For': `198.51.100.23, ${client}`, ...extra } });
    const statuses = [];
    for (let i = 0; i < 5; i++)
      statuses.push((await d.post('workflow_job', payload, { secret: 'not the secret', ...via('203.0.113.7') })).status);
    assert.deepEqual(statuses, [401, 401, 401, 429, 429]);
    // GitHub, through the same proxy: taken.
    assert.equal((await d.post('workflow_job', fresh(), via('140.82.115.9'))).status, 202);
    // The first address of the header is the client's own claim: not the one held.
    assert.equal((await d.post('workflow_job', fresh(), { headers: { 'X-Forwarded-For': '203.0.113.7, 140.82.115.10' } })).status, 202);
    // X-Real-IP alone names it too; a name that is no address is not taken.
    assert.equal((await d.post('workflow_job', fresh(), { headers: { 'X-Real-IP': '203.0.113.7' } })).status, 429);
    assert.equal((await d.post('workflow_job', fresh(), { headers: { 'X-Forwarded-For': 'evil' } })).status, 202);
  });
});

// A pool may name 32 labels, and every pool implies `self-hosted`: a job naming all 33
// matches it; one more label cannot match any pool and is refused with the limit.
describe('a pool of 32 labels', () => {
  const labels = Array.from({ length: 32 }, (_, i) => `w${String(i + 1).padStart(2, '0')}`);
  const d = new Daemon({
    pools: `pools:
  - name: wide
    labels: [${labels.join(', ')}]
    arch: x86_64
    image: /var/lib/hatchery/images/x86_64.qcow2
    max_runners: 1
`,
  });
  before(() => d.start());
  after(async () => { await d.stop(); d.cleanup(); });

  test('matches a job of its 32 labels and self-hosted; 34 labels are refused', async () => {
    let res = await d.post('workflow_job', workflowJob('queued', 9100000001, ['self-hosted', ...labels]));
    assert.equal(res.status, 202, res.body);
    const job = d.jobs().find((j) => j.id === 9100000001);
    assert.equal(job?.pool, 'wide');
    res = await d.post('workflow_job', workflowJob('queued', 9100000002, ['self-hosted', ...labels, 'w33']));
    assert.equal(res.status, 400);
    assert.match(res.body, /workflow_job\.labels has more than 33 entries/);
  });
});
