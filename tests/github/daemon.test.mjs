// hatcheryd with a `github` section, against Prism behind the GitHub double (run through
// with-prism.sh): the start-up probe proves the App's credentials, `hatchery github` shows
// the auth mode, installation and rate-limit budget, /metrics carries them, and neither
// the installation token nor the key reaches the log; GitHub's runner releases judge each
// pool's image by the 30-day rule.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createPrivateKey } from 'node:crypto';
import { DEFAULT_POOLS, Daemon, HATCHERYD, frontPid, memoryHolds, tempDir, writeConfig } from '../integration/lib/daemon.mjs';

const api = process.env.GITHUB_DOUBLE_URL;
const github = `github:
  api_url: ${api}
  app_id: ${process.env.APP_ID}
  app_private_key_file: ${process.env.APP_KEY_FILE}
  timeout_ms: 3000
  runner_scopes:
    - repo: pytorch/pytorch
      runner_group_id: 1
    - org: pytorch
      runner_group_id: 7
`;

// Two scopes: each pool names the one its runners register in.
const pools = DEFAULT_POOLS.replace(/(max_runners: \d+)/g, '$1\n    github_scope: pytorch/pytorch');

// Node's server closes a keep-alive connection idle for 5 s, and fetch may reuse it just
// then ("other side closed"): asked once more, on a new connection (the closed one has
// left fetch's pool).
async function doubleLog() {
  try {
    return await (await fetch(`${api}/__double/log`)).json();
  } catch {
    return (await fetch(`${api}/__double/log`)).json();
  }
}

describe('hatcheryd with GitHub', () => {
  const d = new Daemon({ extra: github, pools });
  before(async () => {
    await fetch(`${api}/__double/log`, { method: 'DELETE' });
    await fetch(`${api}/__double/faults`, {
      method: 'POST',
      body: JSON.stringify([{ method: 'GET', path: '/orgs/pytorch/actions/runners', ratelimit: { 'X-RateLimit-Remaining': '4999', 'X-RateLimit-Reset': String(Math.floor(Date.now() / 1000) + 3000) } }]),
    });
    await d.start();
    for (let i = 0; i < 100 && (d.logs.match(/event=github.scope_ok/g) ?? []).length < 2; i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
  });
  after(async () => {
    const { code } = await d.stop();
    d.cleanup();
    assert.equal(code, 0);
  });

  test('the start-up probe lists each scope with the installation token', async () => {
    assert.match(d.logs, /event=github.installation_found installation=\d+/);
    assert.match(d.logs, /event=github.scope_ok repo=pytorch\/pytorch runners=2/);
    assert.match(d.logs, /event=github.scope_ok org=pytorch runners=2/);
    const { log, violations } = await doubleLog();
    assert.deepEqual(violations, []);
    assert.ok(log.some((e) => e.url === '/repos/pytorch/pytorch/installation'));
  });

  test('the HTTP front holds no copy of the App key; the core holds it parsed, not its PEM text', () => {
    // OpenSSL keeps a BIGNUM as little-endian limbs: a prime's low bytes, in that order.
    const jwk = createPrivateKey(readFileSync(process.env.APP_KEY_FILE)).export({ format: 'jwk' });
    const prime = Buffer.from(jwk.p, 'base64url').reverse().subarray(0, 32);
    const pemLine = readFileSync(process.env.APP_KEY_FILE, 'utf8').split('\n')[1];
    assert.ok(memoryHolds(d.proc.pid, prime).found.length > 0, 'the scan finds the key in the core');
    // The core holds the parsed key, not the file's text: its copy is wiped once read.
    assert.deepEqual(memoryHolds(d.proc.pid, pemLine).found, [], 'the key\'s PEM text is in the core');
    const front = frontPid(d.proc.pid);
    const scan = memoryHolds(front, prime);
    assert.ok(scan.scanned > 1 << 20, `the front's memory was read (${scan.scanned} bytes)`);
    assert.deepEqual(scan.found, [], 'the key\'s prime is in the front');
    assert.deepEqual(memoryHolds(front, pemLine).found, [], 'the key\'s PEM is in the front');
  });

  test('hatchery github shows auth, installation, budget and scopes', () => {
    const json = d.cliJson('github');
    assert.equal(json.auth, 'app');
    assert.equal(json.app_id, Number(process.env.APP_ID));
    assert.ok(json.installation_id > 0);
    assert.ok(json.token_expires_in_s > 3000);
    assert.equal(json.ratelimit_remaining, 4999);
    assert.ok(json.ratelimit_reset_in_s > 2900);
    assert.equal(json.last_error, null);
    assert.deepEqual(json.scopes.map((s) => `${s.kind}:${s.name}:${s.runner_group_id}`), ['repo:pytorch/pytorch:1', 'org:pytorch:7']);
    const table = d.cli('github');
    assert.equal(table.code, 0);
    assert.match(table.stdout, /^auth +app \(app 424242, installation \d+\)$/m);
    assert.match(table.stdout, /^rate limit +4999 requests left, resets in \d+s$/m);
  });

  test('/metrics carries the GitHub budget and passes promtool', async () => {
    // Every request hatcheryd counts is one the double saw (its log was cleared before the
    // daemon started): read at a quiet moment, with the same count on either side and no
    // request of hatcheryd's in flight. The double logs a request when it arrives, so a
    // request can be seen on both sides while hatcheryd still waits for its answer
    // (sending 1): that is not yet the quiet moment, and is waited out, not asserted.
    const gauge = (text, name) => Number(new RegExp(`^hatchery_github_requests_${name} (\\d+)$`, 'm').exec(text)?.[1]);
    let text, seen;
    for (let i = 0; i < 200; i++) {
      const before = (await doubleLog()).log.length;
      text = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
      const after = (await doubleLog()).log.length;
      seen = { before, after, counted: gauge(text, 'total'), sending: gauge(text, 'sending'), queued: gauge(text, 'queued') };
      if (before === after && seen.counted === after && seen.sending === 0 && seen.queued === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(seen.counted >= 4 && seen.counted === seen.after && seen.before === seen.after, JSON.stringify(seen));
    assert.equal(seen.sending, 0, JSON.stringify(seen));
    assert.equal(seen.queued, 0, JSON.stringify(seen));
    assert.match(text, /^hatchery_github_ratelimit_remaining 4999$/m);
    const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    assert.equal(check.status, 0, check.stdout + check.stderr);
  });

  test('no token, JWT or key material in the log', async () => {
    const { log } = await doubleLog();
    const issued = log.filter((e) => e.issued).map((e) => e.issued);
    assert.ok(issued.length >= 1);
    for (const t of issued) assert.ok(!d.logs.includes(t.slice(4)), 'installation token leaked');
    assert.ok(!/Bearer|eyJhbGci|BEGIN .*PRIVATE KEY/.test(d.logs));
    const key = readFileSync(process.env.APP_KEY_FILE, 'utf8').split('\n')[1];
    assert.ok(!d.logs.includes(key));
  });
});

describe('GitHub config checks', () => {
  test('a group-readable App key fails --check-config', () => {
    const dir = tempDir();
    const file = writeConfig(dir, { port: 1, extra: github, pools });
    chmodSync(process.env.APP_KEY_FILE, 0o640);
    const r = spawnSync(HATCHERYD, ['--check-config', file], { encoding: 'utf8' });
    chmodSync(process.env.APP_KEY_FILE, 0o600);
    spawnSync('rm', ['-rf', dir]);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /hatchery\.yaml:\d+: github\.app_private_key_file: secret file .* must not be accessible to group or others/);
  });

  test('App and token together, or a scope naming both repo and org, are errors', () => {
    const dir = tempDir();
    const bad = github.replace('  timeout_ms: 3000\n', '  timeout_ms: 3000\n  token_file: /etc/passwd\n')
      .replace('    - org: pytorch\n', '    - org: pytorch\n      repo: a/b\n');
    const file = writeConfig(dir, { port: 1, extra: bad, pools });
    const r = spawnSync(HATCHERYD, ['--check-config', file], { encoding: 'utf8' });
    spawnSync('rm', ['-rf', dir]);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /github: give either app_id with app_private_key_file .* or token_file, not both/);
    assert.match(r.stderr, /:\d+: github\.runner_scopes\[\]: each scope names exactly one of repo/);
  });

  test('with two scopes, a pool that names none is refused at its line', () => {
    const dir = tempDir();
    const file = writeConfig(dir, { port: 1, extra: github });
    const r = spawnSync(HATCHERYD, ['--check-config', file], { encoding: 'utf8' });
    spawnSync('rm', ['-rf', dir]);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /:\d+: pools\[\]\.github_scope: pool 'linux\.ppc64le' names no github_scope, and github\.runner_scopes has 2/);
  });
});

// GitHub's runner releases, fetched by hatcheryd itself (GET /repos/actions/runner/releases
// through Prism, GitHub's example release with the test's versions and dates laid over it),
// judge each pool's image: the first release newer than the image's runner starts GitHub's
// 30 days, and a week before they end hatcheryd warns, in the log, /metrics and `pools`.
describe('the runner of a pool\'s image, judged by GitHub\'s releases', () => {
  const day = 86400 * 1000;
  const iso = (ms) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
  const dir = tempDir('hatchery-releases-');
  const image = join(dir, 'runner.qcow2');
  writeFileSync(image, '');
  writeFileSync(`${image}.json`, JSON.stringify({ arch: 'ppc64le', runner_version: '2.330.0', agent_version: '0.2.0', built_at: '2026-11-20T08:00:00Z' }));
  const poolOf = `pools:
  - name: p
    labels: [p]
    arch: ppc64le
    image: ${image}
    max_runners: 1
    github_scope: pytorch/pytorch
`;
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('a newer release 25 days old: warned of, refused in 5 days', async () => {
    const now = Date.now();
    const newer = Math.floor((now - 25 * day) / 1000) * 1000;
    await fetch(`${api}/__double/log`, { method: 'DELETE' });
    await fetch(`${api}/__double/releases`, {
      method: 'POST',
      body: JSON.stringify([
        { tag_name: 'v2.332.0-beta', published_at: iso(now - day), prerelease: true }, // ignored
        { tag_name: 'v2.331.0', published_at: iso(newer) },
        { tag_name: 'v2.330.0', published_at: iso(now - 60 * day) },
      ]),
    });
    const d = new Daemon({ extra: github, pools: poolOf });
    try {
      await d.start();
      await d.until('the releases fetched', () => /event=runner_releases\.fetched releases=3 newest=2\.331\.0/.test(d.logs), { ms: 15000 });
      await d.until('runner_expiring', () => /level=warn event=image\.runner_expiring pool=p runner=2\.330\.0 /.test(d.logs), { ms: 5000 });
      const refusedAt = newer / 1000 + 30 * 86400;
      assert.match(d.logs, new RegExp(`event=image\\.runner_expiring pool=p runner=2\\.330\\.0 refused_at=${iso(refusedAt * 1000)} days=5\\.0 rule="30 days after a newer release"`));
      const text = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
      assert.match(text, new RegExp(`^hatchery_pool_image_runner_refused_timestamp_seconds\\{pool="p"\\} ${refusedAt}$`, 'm'));
      assert.match(text, /^hatchery_runner_releases_fetched_timestamp_seconds \d/m);
      assert.match(text, /^hatchery_pool_image_built_timestamp_seconds\{pool="p"\} 1795161600$/m);
      assert.equal(spawnSync('promtool', ['check', 'metrics'], { input: text }).status, 0);
      assert.equal(d.cliJson('pools').pools[0].runner_refused_at, refusedAt);
      const { log, violations } = await doubleLog();
      assert.deepEqual(violations, []);
      assert.ok(log.some((e) => e.method === 'GET' && e.url === '/repos/actions/runner/releases?per_page=100'));
    } finally {
      await fetch(`${api}/__double/releases`, { method: 'POST', body: 'null' });
      await d.stop();
      d.cleanup();
    }
  });

  test('a list that is not GitHub\'s, or none (an Enterprise Server): the floor alone judges', async () => {
    await fetch(`${api}/__double/log`, { method: 'DELETE' });
    await fetch(`${api}/__double/faults`, {
      method: 'POST',
      body: JSON.stringify([{ method: 'GET', path: '/repos/actions/runner/releases', status: 200, body: { tag_name: 'v9.9.9' } }]),
    });
    let d = new Daemon({ extra: github, pools: poolOf });
    try {
      await d.start();
      await d.until('fetch_failed', () => /level=warn event=runner_releases\.fetch_failed reason="the releases are not GitHub's list of releases \(an array\)" retry_s=600/.test(d.logs), { ms: 15000 });
      const text = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
      assert.doesNotMatch(text, /hatchery_pool_image_runner_refused_timestamp_seconds\{/); // 2.330.0: above the floor
      assert.doesNotMatch(text, /^hatchery_runner_releases_fetched_timestamp_seconds /m);
      assert.doesNotMatch(d.logs, /event=image\.runner_expiring/);
    } finally {
      await d.stop();
      d.cleanup();
    }
    await fetch(`${api}/__double/faults`, {
      method: 'POST',
      body: JSON.stringify([{ method: 'GET', path: '/repos/actions/runner/releases', status: 404, body: { message: 'Not Found' } }]),
    });
    d = new Daemon({ extra: github, pools: poolOf });
    try {
      await d.start();
      await d.until('unavailable', () => /level=info event=runner_releases\.unavailable .*action="judging images by the runner floor alone"/.test(d.logs), { ms: 15000 });
      assert.doesNotMatch(d.logs, /event=runner_releases\.fetch_failed/);
    } finally {
      await d.stop();
      d.cleanup();
    }
  });
});
