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
