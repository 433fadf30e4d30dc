// deploy/monitoring against a running hatcheryd: every metric the Grafana dashboard and the
// alert rules query must be on its /metrics (with GitHub configured, a host, and a
// rate-limit answer seen), so that a renamed metric cannot leave a panel or an alert
// silently empty.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import YAML from 'yaml'; // in tests/package-lock.json (a dependency of the workflow parser)
import { Daemon, githubConfig } from '../integration/lib/daemon.mjs';

const api = process.env.GITHUB_DOUBLE_URL;
const dir = new URL('../../deploy/monitoring/', import.meta.url);
const d = new Daemon({ extra: githubConfig({ reconcileIntervalS: 1 }) });

before(async () => {
  await fetch(`${api}/__double/log`, { method: 'DELETE' });
  // GitHub's rate-limit headers on the runner lists, as GitHub sends them on every answer.
  const reset = Math.floor(Date.now() / 1000) + 3600;
  await fetch(`${api}/__double/faults`, {
    method: 'POST',
    body: JSON.stringify([{ method: 'GET', path: '/actions/runners', times: 1000, ratelimit: { 'X-RateLimit-Remaining': '4990', 'X-RateLimit-Reset': String(reset) } }]),
  });
  await d.start();
});

after(async () => {
  await fetch(`${api}/__double/log`, { method: 'DELETE' });
  const { code } = await d.stop();
  d.cleanup();
  assert.equal(code, 0);
});

// Metric names in a PromQL expression: hatchery's and the process family.
const names = (expr) => [...expr.matchAll(/\b((?:hatchery|process)_[a-z0-9_]+)\b/g)].map((m) => m[1]);

test('every metric the dashboard and the alert rules query is on /metrics', async () => {
  const metrics = await d.until('the rate-limit budget on /metrics', async () => {
    const text = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
    return /^hatchery_github_ratelimit_remaining 4990$/m.test(text) && text;
  }, { ms: 20000 });
  const families = new Set([...metrics.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => m[1]));
  const known = (n) => families.has(n) || families.has(n.replace(/_(bucket|sum|count)$/, ''));
  const dashboard = JSON.parse(readFileSync(new URL('hatchery-dashboard.json', dir), 'utf8'));
  const queried = dashboard.panels.flatMap((p) => p.targets.flatMap((t) => names(t.expr)));
  const rules = YAML.parse(readFileSync(new URL('hatchery-alerts.yml', dir), 'utf8'));
  const alerted = rules.groups.flatMap((g) => g.rules.flatMap((r) => names(r.expr)));
  assert.ok(queried.length >= 20 && alerted.length >= 6, `${queried.length} dashboard and ${alerted.length} alert metrics`);
  const missing = [...new Set([...queried, ...alerted])].filter((n) => !known(n));
  assert.deepEqual(missing, [], `not on /metrics: ${missing.join(', ')}`);
  // And the check can fail: a name that is not there is caught.
  assert.equal(known('hatchery_no_such_metric'), false);
});
