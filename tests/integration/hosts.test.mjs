// hatcheryd's libvirt hosts: connections opened at start (off the loop), `hatchery hosts`
// for people and scripts, /metrics, and a host that cannot be reached shown down with the
// reason while the daemon keeps serving.
import assert from 'node:assert/strict';
import {spawnSync} from 'node:child_process';
import {createServer} from 'node:net';
import {join} from 'node:path';
import {after, before, describe, test} from 'node:test';
import {Daemon, tempDir, workflowJob} from './lib/daemon.mjs';

const hosts = `  - name: down-host
    uri: qemu+unix:///system?socket=/nonexistent/libvirt-sock
    vcpus: 4
    memory_mib: 4096
    max_guests: 2
`;

describe('hosts', () => {
    const d = new Daemon({extra : '', pools : '', hostsExtra : hosts});
    before(async () => {
        await d.start();
        for (let i = 0; i < 100 && !(/event=host.up host=host-a/.test(d.logs) &&
                                     /event=host.connect_failed host=down-host/.test(d.logs));
             i++) {
            await new Promise((r) => setTimeout(r, 50));
        }
    });
    after(async () => {
        const {code} = await d.stop();
        d.cleanup();
        assert.equal(code, 0);
    });

    test('hatchery hosts shows the test host up and the unreachable one down, with why', () => {
        const json = d.cliJson('hosts');
        const a = json.hosts.find((h) => h.name === 'host-a');
        const down = json.hosts.find((h) => h.name === 'down-host');
        assert.equal(a.state, 'up');
        assert.equal(a.transport, 'socket');
        assert.equal(a.error, null);
        assert.equal(a.vcpus, 16);
        assert.equal(a.guests, 0);
        assert.equal(down.state, 'down');
        assert.match(down.error, /nonexistent|No such file|Failed to connect/);
        const table = d.cli('hosts');
        assert.equal(table.code, 0);
        assert.match(table.stdout, /^HOST\s+STATE\s+URI/);
        assert.match(table.stdout, /^host-a\s+up\s+test:\/\/\/default\s+socket\s+0\/16\s+0\/32768\s+0\/8/m);
        assert.match(table.stdout, /^down-host\s+down\s+/m);
    });

    test('drain: the host shows drained in its STATE until undrained; an unknown host is an error', () => {
        assert.equal(d.cli('drain', 'host-a').code, 0);
        assert.equal(d.cliJson('hosts').hosts.find((h) => h.name === 'host-a').drained, true);
        assert.match(d.cli('hosts').stdout, /^host-a\s+up,drained\s+test:\/\/\/default\s/m);
        const nowhere = d.cli('drain', 'nowhere');
        assert.notEqual(nowhere.code, 0);
        assert.match(nowhere.stderr, /no such host/);
        assert.equal(d.cli('undrain', 'host-a').code, 0);
        assert.match(d.cli('hosts').stdout, /^host-a\s+up\s+test:\/\/\/default\s/m);
    });

    test('/metrics reports each host', async () => {
        const text = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
        assert.match(text, /^hatchery_host_up\{host="host-a"\} 1$/m);
        assert.match(text, /^hatchery_host_up\{host="down-host"\} 0$/m);
        const check =
            spawnSync('promtool', [ 'check', 'metrics' ], {input : text, encoding : 'utf8'});
        assert.equal(check.status, 0, check.stdout + check.stderr);
        assert.equal((await fetch(`http://127.0.0.1:${d.port}/healthz`)).status, 200);
    });
});

// Hosts whose libvirt never answers (a hung libvirtd, a network that drops packets):
// opening their connections blocks for good. Four of them once held every thread that
// libvirt calls and the store's commits shared, so no delivery was acknowledged and the
// stop never ended. Each host's calls now run on threads of its own, and a stop gives
// them DAEMON_STOP_TIMEOUT_MS (10 s).
describe('hosts that never answer', () => {
    const dir = tempDir();
    const sockets = [ 1, 2, 3, 4 ].map((i) => join(dir, `silent-${i}.sock`));
    const held = [];
    const servers = [];
    const hostsExtra = sockets
                           .map((path, i) => `  - name: silent-${i + 1}
    uri: qemu+unix:///system?socket=${path}
    vcpus: 4
    memory_mib: 4096
    max_guests: 2
`).join('');
    const d = new Daemon({dir, extra : '', hostsExtra});
    before(async () => {
        for (const path of sockets) {
            // Accepts, reads nothing, answers nothing.
            const server = createServer((c) => held.push(c));
            await new Promise((resolve) => server.listen(path, resolve));
            servers.push(server);
        }
        await d.start();
        await d.until('every silent host is being connected to', () => held.length >= 4,
                      {ms : 10000});
    });
    after(() => {
        for (const c of held)
            c.destroy();
        for (const server of servers)
            server.close();
        d.cleanup();
    });

    test('deliveries are acknowledged and stored while four hosts hang', async () => {
        for (let i = 0; i < 3; i++) {
            const answer = await Promise.race([
                d.post('workflow_job', workflowJob('queued', 91000 + i, [ 'linux.ppc64le' ])),
                new Promise((resolve) => setTimeout(() => resolve({status : 'no answer in 5 s'}), 5000)),
            ]);
            assert.equal(answer.status, 202);
        }
        assert.deepEqual(d.jobs().map((j) => j.id).filter((id) => id >= 91000).sort(),
                         [ 91000, 91001, 91002 ]);
        const hosts = d.cliJson('hosts').hosts;
        assert.equal(hosts.find((h) => h.name === 'host-a').state, 'up');
        for (let i = 1; i <= 4; i++)
            assert.equal(hosts.find((h) => h.name === `silent-${i}`).state, 'connecting');
    });

    test('a stop names the hosts it waits for and ends after 10 s without them', async () => {
        const t0 = Date.now();
        const {code} = await d.stop();
        const waited = Date.now() - t0;
        assert.equal(code, 0);
        assert.ok(waited >= 9000 && waited < 20000, `stopped after ${waited} ms`);
        for (let i = 1; i <= 4; i++)
            assert.match(d.logs, new RegExp(`event=host.calls_pending host=silent-${i} calls=1 `));
        assert.match(d.logs, /event=daemon.stop_abandoned waited_ms=10000 /);
        assert.match(d.logs, /event=daemon.stopped /);
    });
});
