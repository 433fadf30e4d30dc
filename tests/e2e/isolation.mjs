// What a hostile job probes, shared by the end-to-end tests on the test guest and on the
// production image: the host's own services (through QEMU's 10.0.2.2, which user-mode
// networking maps to the host's loopback, and through the host's address), a machine of
// the host's LAN (a private address behind the host, in a network namespace of its own),
// and "the internet" (an address that is not the host's nor private, in another).
// deploy/guest-firewall.sh must close the first two and leave the third open.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { networkInterfaces } from 'node:os';
import { fileURLToPath } from 'node:url';

export const firewall = fileURLToPath(new URL('../../deploy/guest-firewall.sh', import.meta.url));
// The test libvirtd runs QEMU in the group hatchery-qemu, gid 64057, known only inside its
// own namespace (tests/libvirt/libvirtd.sh): the firewall takes the number.
export const QEMU_GID = '64057';

// A machine behind this host: a network namespace behind a veth pair (`link`0 here,
// `link`1 there) at `peer`, with a TCP server on port 8080.
function machineBehind(name, link, hostCidr, peer) {
  const ns = `hatchery-${name}-${process.pid}`;
  const sh = (args) => spawnSync(args[0], args.slice(1), { encoding: 'utf8' });
  const run = (args) => {
    const r = sh(args);
    assert.equal(r.status, 0, `${args.join(' ')}: ${r.stderr}`);
  };
  sh(['ip', 'netns', 'del', ns]);
  sh(['ip', 'link', 'del', `${link}0`]);
  run(['ip', 'netns', 'add', ns]);
  run(['ip', 'link', 'add', `${link}0`, 'type', 'veth', 'peer', 'name', `${link}1`]);
  run(['ip', 'link', 'set', `${link}1`, 'netns', ns]);
  run(['ip', 'addr', 'add', hostCidr, 'dev', `${link}0`]);
  run(['ip', 'link', 'set', `${link}0`, 'up']);
  run(['ip', 'netns', 'exec', ns, 'ip', 'addr', 'add', `${peer}/30`, 'dev', `${link}1`]);
  run(['ip', 'netns', 'exec', ns, 'ip', 'link', 'set', `${link}1`, 'up']);
  run(['ip', 'netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up']);
  const server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e',
    `require('net').createServer((s) => s.end()).listen(8080, '${peer}')`], { stdio: 'ignore' });
  for (let i = 0; i < 50; i++) {
    if (sh(['timeout', '2', 'bash', '-c', `exec 3<>/dev/tcp/${peer}/8080`]).status === 0) break;
    spawnSync('sleep', ['0.1']);
  }
  return {
    target: `${peer}:8080`,
    close() {
      server.kill();
      sh(['ip', 'netns', 'del', ns]);
      sh(['ip', 'link', 'del', `${link}0`]);
    },
  };
}

// "The internet": 198.18.0.2:8080, an address of the benchmarking range, not this host's
// and in no range the guests are kept from: where a job's egress goes.
export const egressNetwork = () => machineBehind('egress', 'hegress', '198.18.0.1/30', '198.18.0.2');

// A machine of the host's LAN, at a private address (10.213.77.2:8080): another host, the
// controller, a database. Closed to the guests, as their nwfilter closes it on libvirt
// networks.
export const lanMachine = () => machineBehind('lan', 'hlan', '10.213.77.1/30', '10.213.77.2');

// Targets for a probe job: hatcheryd's port (`daemonPort`), a listener on the host's
// loopback and one on every address, each through 10.0.2.2 and the host's address, and
// the outside. `close()` ends the listeners and the outside.
export async function isolationTargets(daemonPort) {
  const servers = [];
  const listen = (host) => new Promise((res) => {
    const srv = createServer((sock) => sock.end()).listen(0, host, () => res(srv.address().port));
    servers.push(srv);
  });
  const loPort = await listen('127.0.0.1');
  const anyPort = await listen('0.0.0.0');
  const hostIp = Object.values(networkInterfaces()).flat().find((a) => a.family === 'IPv4' && !a.internal).address;
  const egress = egressNetwork();
  const lan = lanMachine();
  const targets = [`10.0.2.2:${daemonPort}`, `10.0.2.2:${loPort}`, `10.0.2.2:${anyPort}`, `${hostIp}:${anyPort}`, `${hostIp}:${daemonPort}`, lan.target, egress.target];
  return {
    targets,
    loPort,
    anyPort,
    hostIp,
    egress,
    lan,
    // What the probes must say with the firewall applied: only the outside opens.
    guarded: Object.fromEntries(targets.map((t) => [t, t === egress.target ? 'open' : 'closed'])),
    close() {
      egress.close();
      lan.close();
      for (const srv of servers) srv.close();
    },
  };
}
