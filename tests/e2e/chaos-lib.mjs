// What both chaos tests (chaos.test.mjs: webhooks; chaos-scaleset.test.mjs: a runner scale
// set) read of hatcheryd and libvirt while the daemon is killed and restarted: each answer
// is null while the daemon is down.
import { spawnSync } from 'node:child_process';

// Ended runners by name, with their exit and reason.
export function endedRunners(d) {
  const r = d.cli('--json', 'runners', '--all');
  if (r.code !== 0) return null;
  return new Map(JSON.parse(r.stdout).runners.filter((x) => x.state === 'deleted').map((x) => [x.name, x]));
}

export function hostUp(d, name = 'lxc') {
  const r = d.cli('--json', 'hosts');
  return r.code === 0 && JSON.parse(r.stdout).hosts.some((h) => h.name === name && h.state === 'up');
}

export function liveRunners(d) {
  const r = d.cli('--json', 'runners');
  if (r.code !== 0) return null;
  return JSON.parse(r.stdout).runners.filter((x) => !['deleted', 'failed'].includes(x.state));
}

// Supply, as the scheduler counts it: runners that have or can take a job. Runners being
// torn down and records awaiting repair after a restart are not supply.
export function supply(runners) {
  return runners.filter((x) => ['pending', 'creating', 'booting', 'configured', 'idle', 'busy'].includes(x.state)).length;
}

export const ourContainers = () => spawnSync('virsh', ['-c', 'lxc:///', 'list', '--all', '--name'], { encoding: 'utf8' })
  .stdout.split('\n').filter((n) => n.startsWith('hatchery-it-'));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const after = ([min, span]) => Date.now() + min + Math.random() * span;

// Kills hatcheryd (SIGKILL) `times` times at random moments, the first `firstMs` ([least,
// spread]) from now and each next `gapMs` after a restart, and starts it again after a
// pause of 0.3–1 s. `due()` does it when its moment has come, and says whether it did.
export function killer(d, times, { firstMs = [1000, 1500], gapMs = [800, 1500] } = {}) {
  const k = {
    kills: 0,
    next: after(firstMs),
    async due() {
      if (k.kills >= times || Date.now() <= k.next) return false;
      await d.kill9();
      k.kills++;
      await sleep(300 + Math.random() * 700);
      await d.start();
      k.next = after(gapMs);
      return true;
    },
  };
  return k;
}

// What is left once the teardowns and the reconciler have had their time: `snapshot()`
// (async) until `empty(it)`, at most `tries` times `everyMs` apart; the last snapshot.
export async function settle(snapshot, empty, { tries = 100, everyMs = 300 } = {}) {
  let left = null;
  for (let i = 0; i < tries; i++) {
    left = await snapshot();
    if (empty(left)) break;
    await sleep(everyMs);
  }
  return left;
}
