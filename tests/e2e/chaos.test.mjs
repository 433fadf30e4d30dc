// Chaos: many jobs while hatcheryd is killed with SIGKILL at random moments, on real LXC
// containers (whose leaks survive the daemon, unlike test:///default's) with real agents,
// and GitHub played by Prism behind the stateful double. The test plays GitHub's side: it
// queues the jobs, hands each to an idle runner (in_progress), completes it once that
// runner is gone, and redelivers any webhook that could not be delivered while the
// daemon was down. On top, GitHub misbehaves: 30% of the `queued` webhooks are never
// sent (the reconciler must find those jobs through the API), and generate-jitconfig
// answers with bursts of 502s and 429s; and libvirtd itself is restarted twice under the
// running containers. Afterwards: every job served, no container and no
// GitHub runner left, and never more live runners than outstanding jobs plus min_idle.
// As GitHub would, the test fails a job whose runner vanished while busy: a job counts as
// served only when its runner reported exit 0; any other end is a lost job. Restarts of
// hatcheryd must lose none: its runners are adopted by the next one.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Daemon, githubConfig, workflowJob } from '../integration/lib/daemon.mjs';
import { containerPool, lxcHost } from './containers.mjs';
import { endedRunners as chaosEnded, hostUp as chaosHostUp, killer, liveRunners, ourContainers, settle, supply } from './chaos-lib.mjs';

const api = process.env.GITHUB_DOUBLE_URL;
const JOBS = Number(process.env.CHAOS_JOBS ?? 200);
const KILLS = Number(process.env.CHAOS_KILLS ?? 5);
const RESTARTS = Number(process.env.CHAOS_LIBVIRTD_RESTARTS ?? 2);
const libvirtd = fileURLToPath(new URL('../libvirt/libvirtd.sh', import.meta.url));
const MAX = 6;
const DROP = 0.3;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const d = new Daemon({
  hostsExtra: lxcHost({ vcpus: 16, guests: 12 }),
  pools: containerPool('chaos', { max: MAX }),
  extra: githubConfig({ reconcileIntervalS: 2, runnerGroupId: 3, org: 'pytorch' }),
});

const payload = (action, id, runner = null) => workflowJob(action, id, ['chaos'], runner);

async function deliver(action, id, runner) {
  try {
    const r = await d.post('workflow_job', payload(action, id, runner));
    return r.status >= 200 && r.status < 300;
  } catch {
    return false; // the daemon is down: GitHub's redelivery is this test's retry
  }
}

const endedRunners = () => chaosEnded(d);
const hostUp = () => chaosHostUp(d);
const live = () => liveRunners(d);

before(async () => {
  await fetch(`${api}/__double/log`, { method: 'DELETE' });
  await fetch(`${api}/__double/stateful`, { method: 'POST' });
  await fetch(`${api}/__double/jit`, { method: 'POST', body: 'sleep=1 exit=0' });
  // The pool's org scope finds lost jobs through the installation's repositories.
  await fetch(`${api}/__double/repos`, { method: 'POST', body: JSON.stringify(['pytorch/pytorch']) });
  await d.start();
});

after(async () => {
  await d.stop();
  // The daemon's log across every restart, to read after a failure.
  writeFileSync(join(tmpdir(), 'hatchery-chaos-daemon.log'), d.logs);
  d.cleanup();
});

test(`${JOBS} jobs, hatcheryd killed ${KILLS} times: all served, nothing leaked`, { timeout: 1200000 }, async () => {
  const jobs = Array.from({ length: JOBS }, (_, i) => ({ id: 9700000000 + i, run: 5300000000 + Math.floor(i / 4), queued: false, dropped: Math.random() < DROP, runner: null, started: false, done: false }));
  // GitHub knows every job as queued, whether or not its webhook arrives.
  await fetch(`${api}/__double/queued`, { method: 'POST', body: JSON.stringify(jobs.map((j) => ({ id: j.id, run_id: j.run, labels: ['chaos'] }))) });
  let nextFault = Date.now() + 3000;
  let faults = 0;
  const taken = new Set();
  const kill = killer(d, KILLS);
  let worst = -Infinity;
  const lost = [];
  let restarts = 0;
  let nextRestart = Date.now() + 15000;
  const deadline = Date.now() + 15 * 60 * 1000;
  while (jobs.some((j) => !j.done) || kill.kills < KILLS || restarts < RESTARTS) {
    assert.ok(Date.now() < deadline, `timed out: ${jobs.filter((j) => !j.done).length} jobs not served\n${d.logs.split('\n').slice(-30).join('\n')}`);
    await kill.due();
    // libvirtd itself restarts (an upgrade) under running containers, once the kills are
    // over, so that the daemon that saw them go is the one that sees them back.
    // The next only once hatcheryd is back on the last one. And only while the daemon holds
    // a connection: one that never connected has no guests to see again, and would say
    // nothing (a restart right after the last kill did just that).
    const reinventoried = (d.logs.match(/event=host.reinventoried/g) ?? []).length;
    if (restarts < RESTARTS && kill.kills === KILLS && Date.now() > nextRestart && reinventoried >= restarts && hostUp()) {
      assert.equal(spawnSync(libvirtd, ['stop']).status, 0);
      await sleep(500 + Math.random() * 1000);
      assert.equal(spawnSync(libvirtd, ['start']).status, 0);
      restarts++;
      nextRestart = Date.now() + 10000 + Math.random() * 10000;
    }
    if (Date.now() > nextFault) {
      await fetch(`${api}/__double/faults`, { method: 'POST', body: JSON.stringify([
        { method: 'POST', path: 'generate-jitconfig', status: 502, times: 3 },
        { method: 'POST', path: 'generate-jitconfig', status: 429, headers: { 'Retry-After': '1' } },
      ]) });
      faults++;
      nextFault = Date.now() + 4000 + Math.random() * 4000;
    }
    for (const j of jobs.filter((x) => !x.queued).slice(0, 50)) j.queued = j.dropped || await deliver('queued', j.id);
    const runners = live();
    if (!runners) {
      await sleep(100);
      continue;
    }
    const outstanding = jobs.filter((j) => !j.done).length;
    worst = Math.max(worst, supply(runners) - outstanding);
    const names = new Set(runners.map((r) => r.name));
    for (const r of runners.filter((x) => x.state === 'idle' && !taken.has(x.name))) {
      const j = jobs.find((x) => x.queued && !x.runner);
      if (!j) break;
      taken.add(r.name);
      j.runner = r.name;
    }
    for (const j of jobs.filter((x) => x.runner && !x.started)) {
      j.started = await deliver('in_progress', j.id, j.runner);
      if (j.started) await fetch(`${api}/__double/dequeue`, { method: 'POST', body: JSON.stringify([j.id]) });
    }
    // A runner that is gone finished its job, or lost it: GitHub reports it completed
    // either way (a lost one as failed), and the test keeps the score.
    const gone = jobs.filter((x) => x.started && !x.done && !names.has(x.runner));
    const ended = gone.length ? endedRunners() : null;
    for (const j of gone) {
      const r = ended?.get(j.runner);
      if (!r) continue; // the record is not final yet (or the daemon is down)
      j.done = await deliver('completed', j.id, j.runner);
      if (j.done && r.exit_code !== 0) lost.push(`${j.id} on ${j.runner}: ${r.state}, exit ${r.exit_code}, ${r.reason}`);
    }
    await sleep(150);
  }
  assert.equal(kill.kills, KILLS);
  assert.equal(restarts, RESTARTS);
  const reinventories = (d.logs.match(/event=host.reinventoried/g) ?? []).length;
  assert.ok(reinventories >= RESTARTS, `${reinventories} re-inventories for ${RESTARTS} libvirtd restarts:\n` +
    d.logs.split('\n').filter((l) => /event=(host\.|daemon\.)/.test(l)).join('\n'));
  assert.ok(worst <= 0, `at some moment ${worst} more runners than outstanding jobs (min_idle 0)`);
  // Let the reconciler and the teardowns finish, then nothing may be left anywhere.
  const left = await settle(async () => {
    const github = await (await fetch(`${api}/__double/runners`)).json();
    return { runners: (live() ?? []).length, containers: ourContainers(), github: github.filter((r) => r.name.startsWith('hatchery-it-')) };
  }, (l) => !l.runners && !l.containers.length && !l.github.length);
  assert.deepEqual(left, { runners: 0, containers: [], github: [] });
  const { violations } = await (await fetch(`${api}/__double/log`)).json();
  assert.deepEqual(violations, []);
  const { registrations } = await (await fetch(`${api}/__double/registrations`)).json();
  const dropped = jobs.filter((j) => j.dropped).length;
  const adopted = (d.logs.match(/event=runner.adopted /g) ?? []).length;
  console.log(`chaos: ${JOBS} jobs, ${JOBS - lost.length} served and ${lost.length} lost (${(lost.length / KILLS).toFixed(2)} per SIGKILL), ${adopted} runners adopted across restarts, ${dropped} queued webhooks never sent, ${kill.kills} SIGKILLs, ${restarts} libvirtd restarts (${reinventories} re-inventories), ${faults} GitHub fault bursts (3x502 + 429), ${registrations} GitHub runners registered for ${taken.size} jobs taken, worst surplus ${worst}`);
  assert.deepEqual(lost, [], 'jobs lost (GitHub would fail them)');
  // Lost webhooks were found: jobs whose queued webhook never came were served too, and
  // the reconciler says it stored them (in the daemon that found them).
  assert.ok(dropped > 0);
  assert.ok(faults > 0);
});
