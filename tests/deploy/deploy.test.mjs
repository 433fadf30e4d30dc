// The deployment files, checked by tools Hatchery did not write: the workflows by GitHub's
// own workflow parser (@actions/workflow-parser), the Dockerfiles by dockerfile-utils, the
// systemd unit by systemd-analyze verify, the Grafana dashboard by Grafana's own dashboard
// types (@grafana/schema, through the TypeScript compiler), the App manifest and probot
// snippet for the fields GitHub reads.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync, writeFileSync, mkdtempSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseWorkflow, convertWorkflowTemplate, NoOperationTraceWriter } from '@actions/workflow-parser';
import ts from 'typescript';
import { Evaluator, Lexer, Parser, data as expressionData } from '@actions/expressions';
import { parse as parseYaml } from 'yaml';
import { examples } from '../integration/lib/daemon.mjs';

const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = (name) => join(root, 'tests/node_modules/.bin', name);

async function workflowErrors(name, content) {
  const parsed = parseWorkflow({ name, content }, new NoOperationTraceWriter());
  const errors = parsed.context.errors.getErrors().map((e) => e.message);
  if (parsed.value) {
    const template = await convertWorkflowTemplate(parsed.context, parsed.value);
    errors.push(...(template.errors ?? []).map((e) => e.Message ?? e.message));
  }
  return errors;
}

test('the workflows pass GitHub\'s own workflow parser', async () => {
  const dir = join(root, 'deploy/github/workflows');
  const files = readdirSync(dir).filter((f) => f.endsWith('.yml'));
  assert.ok(files.length >= 3);
  for (const f of files) {
    const content = readFileSync(join(dir, f), 'utf8');
    assert.deepEqual(await workflowErrors(f, content), [], f);
  }
  const ppc = readFileSync(join(dir, 'ciflow-ppc64le.yml'), 'utf8');
  assert.match(ppc, /runs-on: linux\.ppc64le\n/);
  assert.match(ppc, /- ciflow\/ppc64le\/\*/);
  assert.ok(!/secrets\./.test(ppc), 'the tester workflow uses no secrets');
});

// The CRCR downstream workflow's expressions, evaluated by GitHub's own evaluator
// (@actions/expressions) on the event the relay sends: GitHub's example
// repository_dispatch, of type `pull_request` or `push`, whose client_payload carries
// GitHub's example payload of that event (@octokit/webhooks-examples).
function relayEvent(eventType, payload) {
  const dispatch = structuredClone(examples('repository_dispatch')[0]);
  dispatch.action = eventType;
  dispatch.client_payload = { event_type: eventType, payload };
  return dispatch;
}

function evaluate(expression, contexts) {
  const lexed = new Lexer(expression).lex();
  const parsed = new Parser(lexed.tokens, Object.keys(contexts), []).parse();
  const data = JSON.parse(JSON.stringify(contexts), expressionData.reviver);
  return new Evaluator(parsed, data).evaluate();
}

// A value as the runner sees it: each ${{ }} replaced by its result as a string.
const template = (text, contexts) => text.replace(/\$\{\{(.*?)\}\}/gs, (_, e) => evaluate(e, contexts).coerceString());

test('the CRCR downstream workflow: run name, concurrency group, checkout ref and the closed case, on the relay\'s payloads', () => {
  const wf = parseYaml(readFileSync(join(root, 'deploy/github/workflows/crcr-downstream-ppc64le.yml'), 'utf8'));
  assert.deepEqual(wf.on.repository_dispatch.types, ['pull_request', 'push']);
  const job = wf.jobs['build-and-test'];
  assert.equal(job['runs-on'], 'pytorch-ppc64le');
  const checkout = job.steps.find((st) => st.with?.repository === 'pytorch/pytorch');
  assert.equal(checkout.with['persist-credentials'], false);
  const text = readFileSync(join(root, 'deploy/github/workflows/crcr-downstream-ppc64le.yml'), 'utf8');
  assert.ok(!/secrets\./.test(text), 'no secrets: it runs PR code');

  const pulls = examples('pull_request');
  const opened = pulls.find((e) => e.action === 'opened');
  const closed = pulls.find((e) => e.action === 'closed');
  const synchronize = pulls.find((e) => e.action === 'synchronize');
  const push = examples('push')[0];
  const run = (eventType, payload) => {
    const github = { event: relayEvent(eventType, payload), sha: 'f'.repeat(40), workflow: wf.name };
    const env = { PYTORCH_SHA: template(job.env.PYTORCH_SHA, { github }) };
    return {
      name: template(wf['run-name'], { github }),
      group: template(wf.concurrency.group, { github }),
      cancels: template(wf.concurrency['cancel-in-progress'], { github }),
      // `if:` by the evaluator's own truthiness (&& and || return an operand).
      runs: evaluate(`(${job.if}) && 'yes' || 'no'`, { github }).coerceString() === 'yes',
      ref: template(checkout.with.ref, { github, env }),
    };
  };

  const pr = run('pull_request', opened);
  const n = opened.pull_request.number;
  assert.equal(pr.name, `PR #${n} opened at ${opened.pull_request.head.sha}`);
  assert.equal(pr.group, `pytorch-ppc64le-pr-${n}`);
  assert.equal(pr.cancels, 'true');
  assert.equal(pr.runs, true);
  assert.equal(pr.ref, opened.pull_request.head.sha);

  // A new push to the same PR: the same group, so it cancels the run before it.
  const again = run('pull_request', { ...synchronize, pull_request: { ...synchronize.pull_request, number: n } });
  assert.equal(again.group, pr.group);
  assert.equal(again.ref, synchronize.pull_request.head.sha);

  // Closed: the same group (the run in progress is cancelled) and no job runs.
  const done = run('pull_request', { ...closed, pull_request: { ...closed.pull_request, number: n } });
  assert.equal(done.group, pr.group);
  assert.equal(done.runs, false);
  assert.match(done.name, new RegExp(`^PR #${n} closed at `));

  // A push: the pushed commit, grouped by ref, never cancelled.
  const pushed = run('push', push);
  assert.equal(pushed.name, `push ${push.ref} at ${push.after}`);
  assert.equal(pushed.group, `pytorch-ppc64le-${push.ref}`);
  assert.equal(pushed.cancels, 'false');
  assert.equal(pushed.runs, true);
  assert.equal(pushed.ref, push.after);

  // The check can fail: an event the workflow does not expect runs nothing.
  assert.equal(run('release', push).runs, false);
});

test('the workflow check can fail: a broken workflow is refused', async () => {
  const errors = await workflowErrors('bad.yml', 'on: push\njobs:\n  x:\n    runs-on: linux.ppc64le\n    steps:\n      - uses: a/b@v1\n        run: echo both\n    timeout-minutes: soon\n');
  assert.ok(errors.length > 0);
});

test('the Dockerfiles pass dockerfile-utils lint, and a broken one does not', () => {
  for (const f of ['Dockerfile_ppc64le', 'Dockerfile_s390x']) {
    const r = spawnSync(bin('dockerfile-utils'), ['lint', join(root, 'docker', f)], { encoding: 'utf8' });
    assert.equal(r.status, 0, f + r.stdout + r.stderr);
    const text = readFileSync(join(root, 'docker', f), 'utf8');
    assert.match(text, /ARG GCC_TOOLSET=13/);
    assert.match(text, /ubi9/);
  }
  // The runner stand-in's job builds a Dockerfile that starts as the real ones do: the
  // same base argument, so `--build-arg UBI_IMAGE=` switches both to a local base.
  const job = join(root, 'images/runner/stand-in/job/Dockerfile');
  const r = spawnSync(bin('dockerfile-utils'), ['lint', job], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const head = (f) => readFileSync(f, 'utf8').split('\n').filter((l) => /^(ARG UBI_IMAGE|FROM)\b/.test(l)).slice(0, 2);
  for (const f of ['Dockerfile_ppc64le', 'Dockerfile_s390x'])
    assert.deepEqual(head(job), head(join(root, 'docker', f)), f);
  const dir = mkdtempSync(join(tmpdir(), 'df-'));
  writeFileSync(join(dir, 'Dockerfile'), 'FROM x\nFOO bar\n');
  assert.notEqual(spawnSync(bin('dockerfile-utils'), ['lint', join(dir, 'Dockerfile')]).status, 0);
});

test('the probot snippet enables both labels', () => {
  const text = readFileSync(join(root, 'deploy/github/pytorch-probot.yml'), 'utf8');
  assert.match(text, /ciflow_push_tags:\n  - ciflow\/ppc64le\n  - ciflow\/s390x/);
});

test('systemd-analyze verify accepts the unit', () => {
  const dir = mkdtempSync(join(tmpdir(), 'unit-'));
  const hatcheryd = process.env.HATCHERYD;
  assert.ok(hatcheryd, 'HATCHERYD is set by ctest');
  // Point it at the binary that exists here; everything else as shipped.
  const cli = process.env.HATCHERY_CLI;
  assert.ok(cli, 'HATCHERY_CLI is set by ctest');
  const unit = readFileSync(join(root, 'deploy/hatcheryd.service'), 'utf8')
    .replaceAll('/usr/local/bin/hatcheryd', hatcheryd).replaceAll('/usr/local/bin/hatchery ', `${cli} `);
  for (const want of ['Type=notify', 'ExecReload=', 'WatchdogSec=', 'NoNewPrivileges=yes', 'ProtectSystem=strict', 'StateDirectory=hatchery', 'RuntimeDirectory=hatchery', 'LoadCredential=', 'SupplementaryGroups=libvirt']) {
    assert.ok(unit.includes(want), want);
  }
  writeFileSync(join(dir, 'hatcheryd.service'), unit);
  // --man=no: the man pages it names are not installed here; tests/package verifies the
  // packaged unit where they are.
  const r = spawnSync('systemd-analyze', ['verify', '--man=no', join(dir, 'hatcheryd.service')], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  writeFileSync(join(dir, 'broken.service'), '[Service]\nType=notify\nExecStart=relative/path\n');
  assert.notEqual(spawnSync('systemd-analyze', ['verify', join(dir, 'broken.service')]).status, 0);
});

test('the guest firewall: its unit verifies, and the script refuses what it cannot do', () => {
  const dir = mkdtempSync(join(tmpdir(), 'unit-'));
  const script = join(root, 'deploy/guest-firewall.sh');
  const unit = readFileSync(join(root, 'deploy/hatchery-guest-firewall.service'), 'utf8')
    .replaceAll('/usr/local/lib/hatchery/guest-firewall.sh', script);
  for (const want of ['Type=oneshot', 'RemainAfterExit=yes', 'Before=libvirtd.service', ' apply ', 'ExecCondition='])
    assert.ok(unit.includes(want), want);
  // Stopping the unit (an upgrade, a stop) must not open the host while guests run.
  assert.doesNotMatch(unit, /^ExecStop=/m);
  writeFileSync(join(dir, 'hatchery-guest-firewall.service'), unit);
  const r = spawnSync('systemd-analyze', ['verify', '--man=no', join(dir, 'hatchery-guest-firewall.service')], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  // Usage errors and a group that does not exist change nothing and say why.
  const bad = spawnSync(script, ['open-everything'], { encoding: 'utf8' });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /usage: guest-firewall.sh apply\|remove\|status\|check/);
  const nogroup = spawnSync(script, ['apply', '--group', 'no-such-group-hatchery'], { encoding: 'utf8' });
  assert.equal(nogroup.status, 2);
  assert.match(nogroup.stderr, /no group no-such-group-hatchery/);
  // install.sh installs and enables it, and the timer of its check.
  const install = readFileSync(join(root, 'deploy/install.sh'), 'utf8');
  assert.match(install, /hatchery-guest-firewall\.service/);
  assert.match(install, /enable --now .*hatchery-guest-firewall-check\.timer/);
});

test('the guest firewall\'s check: a service and its timer that verify, every minute', () => {
  const dir = mkdtempSync(join(tmpdir(), 'unit-'));
  const script = join(root, 'deploy/guest-firewall.sh');
  for (const name of ['hatchery-guest-firewall-check.service', 'hatchery-guest-firewall-check.timer']) {
    writeFileSync(join(dir, name), readFileSync(join(root, 'deploy', name), 'utf8')
      .replaceAll('/usr/local/lib/hatchery/guest-firewall.sh', script));
  }
  const timer = readFileSync(join(dir, 'hatchery-guest-firewall-check.timer'), 'utf8');
  assert.match(timer, /^OnUnitActiveSec=1min$/m);
  assert.match(timer, /^WantedBy=timers\.target$/m);
  const service = readFileSync(join(dir, 'hatchery-guest-firewall-check.service'), 'utf8');
  assert.match(service, /^ExecStart=\S+guest-firewall\.sh check --group libvirt-qemu$/m);
  assert.match(service, /^ConditionPathExists=\/run\/hatchery-guest-firewall$/m);
  const r = spawnSync('systemd-analyze', ['verify', '--man=no', join(dir, 'hatchery-guest-firewall-check.timer')], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

test('the alert rules pass promtool check rules and their own unit tests; a broken rule is refused', () => {
  const dir = join(root, 'deploy/monitoring');
  const check = spawnSync('promtool', ['check', 'rules', join(dir, 'hatchery-alerts.yml')], { encoding: 'utf8' });
  assert.equal(check.status, 0, check.stdout + check.stderr);
  assert.match(check.stdout, /SUCCESS: 22 rules found/);
  const unit = spawnSync('promtool', ['test', 'rules', 'hatchery-alerts.test.yml'], { cwd: dir, encoding: 'utf8' });
  assert.equal(unit.status, 0, unit.stdout + unit.stderr);
  const tmp = mkdtempSync(join(tmpdir(), 'hatchery-rules-'));
  writeFileSync(join(tmp, 'broken.yml'), readFileSync(join(dir, 'hatchery-alerts.yml'), 'utf8').replace('> 1800', '> > 1800'));
  assert.notEqual(spawnSync('promtool', ['check', 'rules', join(tmp, 'broken.yml')]).status, 0);
});

// The dashboard as a TypeScript object literal that must satisfy @grafana/schema's
// Dashboard: a misspelt key, a wrong type or a field Grafana does not have is an error.
function dashboardTypeErrors(dashboard) {
  const dir = join(root, 'tests/node_modules/.cache/hatchery-dashboard');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, 'dashboard-check.ts');
  writeFileSync(file, `import type { Dashboard } from '@grafana/schema';\n` +
    `export const dashboard = ${JSON.stringify(dashboard, null, 2)} satisfies Dashboard;\n`);
  const program = ts.createProgram([file], {
    noEmit: true, strict: true, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022, skipLibCheck: true, types: [],
  });
  return ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
}

test('the dashboard is a Grafana dashboard by Grafana\'s own types, filtered by instance and pool', () => {
  const dash = JSON.parse(readFileSync(join(root, 'deploy/monitoring/hatchery-dashboard.json'), 'utf8'));
  assert.equal(dash.uid, 'hatchery');
  assert.deepEqual(dashboardTypeErrors(dash), []);
  // Bad on purpose: each of these is refused.
  const broken = [
    (d) => { d.panels[0].gridPos.w = 'twelve'; },
    (d) => { d.schemaVersion = undefined; delete d.schemaVersion; },
    (d) => { d.templating.list[2].hide = 'yes'; },
    (d) => { d.panels[0].targets = 'up'; },
  ];
  for (const mutate of broken) {
    const d = structuredClone(dash);
    mutate(d);
    assert.notDeepEqual(dashboardTypeErrors(d), [], mutate.toString());
  }
  // Every panel queries; every variable a query uses is defined.
  const vars = new Set(dash.templating.list.map((v) => v.name));
  assert.deepEqual([...vars], ['datasource', 'instance', 'pool']);
  assert.ok(dash.panels.length >= 20);
  for (const p of dash.panels) {
    assert.ok(p.targets.length > 0 && p.targets.every((t) => t.expr), p.title);
    for (const t of p.targets)
      for (const [, name] of t.expr.matchAll(/\$(\w+)/g)) assert.ok(vars.has(name), `${p.title}: $${name}`);
  }
  // Series with a pool label are filtered by the pool variable, and quantiles are per pool
  // (a quantile summed over pools says nothing of any pool).
  const pooled = /^hatchery_(jobs|runners|pool_\w+|job_start_seconds_bucket|runner_online_seconds_bucket|runners_\w+_total|jobs_lost_total|templates|template_\w+_total)$/;
  for (const p of dash.panels)
    for (const t of p.targets) {
      for (const [, name, sel] of t.expr.matchAll(/\b(hatchery_\w+)\{([^}]*)\}/g))
        if (pooled.test(name)) assert.match(sel, /pool=~"\$pool"/, `${p.title}: ${name}`);
      if (/histogram_quantile/.test(t.expr) && /pool/.test(t.expr)) assert.match(t.expr, /sum by \(le, pool\)/, p.title);
    }
  const titles = dash.panels.map((p) => p.title).join('\n');
  for (const want of [/failures by pool and reason/, /Jobs lost/, /no pool matches/, /templates/i])
    assert.match(titles, want);
});

test('the GitHub App manifest asks for exactly what Hatchery needs', () => {
  const m = JSON.parse(readFileSync(join(root, 'deploy/github-app-manifest.json'), 'utf8'));
  assert.deepEqual(m.default_events, ['workflow_job']);
  assert.deepEqual(m.default_permissions, {
    administration: 'write', // repository self-hosted runners
    organization_self_hosted_runners: 'write',
    actions: 'read', // queued runs and jobs, for lost webhooks
    metadata: 'read',
  });
  assert.equal(m.public, false);
  assert.match(m.hook_attributes.url, /\/webhook$/);
});

test('the runner-version check (hatchery image-check, no daemon, no Node), on a fixture of GitHub\'s releases', () => {
  const noReleases = join(mkdtempSync(join(tmpdir(), 'releases-')), 'none.json');
  writeFileSync(noReleases, '[]');
  const check = (now, image = 'image', releases = join(root, 'tests/deploy/fixtures/runner-releases.json')) =>
    spawnSync(process.env.HATCHERY_CLI, ['image-check', join(root, 'tests/deploy/fixtures', image), releases, '--now', now], { encoding: 'utf8' });
  // 2.321.0 vs 2.322.0 published 2025-01-27: accepted until 2025-02-26.
  let r = check('2025-02-01T00:00:00Z');
  assert.equal(r.status, 0, r.stdout);
  assert.match(r.stdout, /behind 2\.323\.0, accepted until 2025-02-26/);
  r = check('2025-02-22T00:00:00Z');
  assert.equal(r.status, 1);
  assert.match(r.stdout, /WARNING: GitHub refuses it from 2025-02-26 \(4 days/);
  r = check('2025-03-01T00:00:00Z');
  assert.equal(r.status, 2);
  assert.match(r.stdout, /OUT OF COMPLIANCE/);
  r = check('2025-03-01T00:00:00Z', 'no-such-image');
  assert.equal(r.status, 3);
  // GitHub's absolute floor (2.329.0, enforced from 2026-09-25): 2.321.0 is refused
  // whatever the releases say (none newer, here), with a week's warning; the earlier of the
  // two rules counts.
  r = check('2026-09-01T00:00:00Z', 'image', noReleases);
  assert.equal(r.status, 0, r.stdout);
  assert.match(r.stdout, /below 2\.329\.0, which GitHub enforces from 2026-09-25 \(24 days\)/);
  r = check('2026-09-20T00:00:00Z', 'image', noReleases);
  assert.equal(r.status, 1, r.stdout);
  assert.match(r.stdout, /registers no runner older than 2\.329\.0 from 2026-09-25 \(5 days/);
  r = check('2026-10-01T00:00:00Z', 'image', noReleases);
  assert.equal(r.status, 2, r.stdout);
  assert.match(r.stdout, /OUT OF COMPLIANCE: GitHub registers no runner older than 2\.329\.0/);
  r = check('2026-09-20T00:00:00Z'); // refused by the 30 days after 2.322.0 long before
  assert.equal(r.status, 2, r.stdout);
  assert.match(r.stdout, /OUT OF COMPLIANCE since 2025-02-26/);
  // An image's manifest is read as well as a mounted root.
  const dir = mkdtempSync(join(tmpdir(), 'manifest-'));
  writeFileSync(join(dir, 'runner.qcow2.json'), JSON.stringify({ arch: 'ppc64le', runner_version: '2.321.0' }));
  const releases = join(root, 'tests/deploy/fixtures/runner-releases.json');
  const cli = (...args) => spawnSync(process.env.HATCHERY_CLI, ['image-check', ...args], { encoding: 'utf8' });
  r = cli(join(dir, 'runner.qcow2.json'), releases, '--now', '2025-02-01T00:00:00Z');
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /runner 2\.321\.0: behind 2\.323\.0/);
  // Bad input, each said and exit 3: a manifest without a version, a version that is not
  // one, releases that are not GitHub's list, a bad --now, a missing argument.
  writeFileSync(join(dir, 'none.json'), JSON.stringify({ arch: 'ppc64le' }));
  r = cli(join(dir, 'none.json'), releases);
  assert.equal(r.status, 3);
  assert.match(r.stderr, /no runner_version in the manifest/);
  writeFileSync(join(dir, 'stand-in.json'), JSON.stringify({ runner_version: '2.321.0-stand-in' }));
  r = cli(join(dir, 'stand-in.json'), releases);
  assert.equal(r.status, 3);
  assert.match(r.stderr, /not a runner version: 2\.321\.0-stand-in/);
  writeFileSync(join(dir, 'object.json'), JSON.stringify({ message: 'Not Found' }));
  r = cli(join(dir, 'runner.qcow2.json'), join(dir, 'object.json'));
  assert.equal(r.status, 3);
  assert.match(r.stderr, /not GitHub's list of releases/);
  r = cli(join(dir, 'runner.qcow2.json'), releases, '--now', 'yesterday');
  assert.equal(r.status, 3);
  assert.match(r.stderr, /--now takes a UTC time/);
  r = cli(join(dir, 'runner.qcow2.json'));
  assert.equal(r.status, 3);
  assert.match(r.stderr, /usage: hatchery image-check/);
  // Bad input is 3 here whatever is wrong, an unknown option included: 2 means refused.
  r = cli(join(dir, 'runner.qcow2.json'), releases, '--bogus');
  assert.equal(r.status, 3);
  assert.match(r.stderr, /unknown option --bogus/);
  r = cli(join(dir, 'runner.qcow2.json'), releases, '--status', 'queued');
  assert.equal(r.status, 3);
  assert.match(r.stderr, /image-check takes no --status/);
  // A runner newer than every release is current.
  writeFileSync(join(dir, 'new.json'), JSON.stringify({ runner_version: '9.0.0' }));
  r = cli(join(dir, 'new.json'), releases, '--now', '2025-02-01T00:00:00Z');
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^runner 9\.0\.0: current$/m);
});

test('the runner image recipe is well-formed and records the runner version', () => {
  const script = join(root, 'images/runner/build-image.sh');
  assert.equal(spawnSync('bash', ['-n', script]).status, 0);
  const text = readFileSync(script, 'utf8');
  assert.match(text, /RUNNER_VERSION/);
  assert.match(text, /hatchery-agent\.service/);
  // Wrong arguments are refused before anything is touched.
  const r = spawnSync('bash', [script, 'sparc', '/nonexistent.tar.gz', '/tmp/x.qcow2'], { encoding: 'utf8' });
  assert.equal(r.status, 2);
  const unit = join(root, 'images/runner/hatchery-agent.service');
  const dir = mkdtempSync(join(tmpdir(), 'unit-'));
  writeFileSync(join(dir, 'hatchery-agent.service'), readFileSync(unit, 'utf8').replace('/usr/local/bin/hatchery-agent', '/bin/true'));
  const v = spawnSync('systemd-analyze', ['verify', join(dir, 'hatchery-agent.service')], { encoding: 'utf8' });
  assert.equal(v.status, 0, v.stdout + v.stderr);
});
