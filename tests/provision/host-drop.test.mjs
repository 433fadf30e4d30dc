// A host that drops: hatcheryd connected to the test libvirtd sees it go away (libvirt's
// close callback on the loop), shows it down with the reason, keeps serving, and
// reconnects with backoff when libvirtd returns.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Daemon } from '../integration/lib/daemon.mjs';

const libvirtd = fileURLToPath(new URL('../libvirt/libvirtd.sh', import.meta.url));
const hostsExtra = `  - name: real
    uri: qemu:///system
    vcpus: 2
    memory_mib: 2048
    max_guests: 2
`;
const d = new Daemon({ pools: '', hostsExtra });

async function until(predicate, what, ms = 30000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (predicate()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`timed out waiting for ${what}\n${d.logs}`);
}

const real = () => d.cliJson('hosts').hosts.find((h) => h.name === 'real');

before(() => d.start());
after(async () => {
  spawnSync(libvirtd, ['start']);
  const { code } = await d.stop();
  d.cleanup();
  assert.equal(code, 0);
});

test('libvirtd goes away: the host is down, with why; it comes back: up again', async () => {
  await until(() => real().state === 'up', 'the host to come up');
  assert.equal(spawnSync(libvirtd, ['stop']).status, 0);
  await until(() => real().state === 'down', 'the host to go down');
  await until(() => /event=host.down host=real /.test(d.logs), 'the host.down log line');
  assert.ok(real().error);
  assert.equal((await fetch(`http://127.0.0.1:${d.port}/healthz`)).status, 200, 'still serving');
  assert.equal(spawnSync(libvirtd, ['start']).status, 0);
  await until(() => real().state === 'up', 'the host to come back', 60000);
  assert.equal(real().reconnects, 1);
});
