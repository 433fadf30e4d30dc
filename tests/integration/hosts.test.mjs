// hatcheryd's libvirt hosts: connections opened at start (off the loop), `hatchery hosts`
// for people and scripts, /metrics, and a host that cannot be reached shown down with the
// reason while the daemon keeps serving.
import assert from 'node:assert/strict';
import {spawnSync} from 'node:child_process';
import {after, before, describe, test} from 'node:test';
import {Daemon} from './lib/daemon.mjs';

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
