// Day one on a stock Debian host (run.sh made it, built our package in it and booted it):
// the package installed with apt, configured by the blocks of docs/OPERATIONS.md marked
// `runbook:` run as they are written, then real jobs served on the production image by
// QEMU running as libvirt-qemu under Debian's own libvirt configuration, through the guest
// firewall the package enabled. GitHub is the double in front of Prism, on this machine's
// loopback, which the host shares.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { isolationTargets } from '../e2e/isolation.mjs';
import { freePort, postWebhook, workflowJob } from '../integration/lib/daemon.mjs';

const here = new URL('.', import.meta.url).pathname;
const machineSh = `${here}machine.sh`;
const M = process.env.STOCK_HOST_MACHINE;
// The remote host (the runbook's p10-b): a second machine with its own libvirtd, on a
// network of its own, reached from the first only over SSH.
const R = process.env.STOCK_HOST_REMOTE;
const remoteAddress = process.env.STOCK_HOST_REMOTE_ADDRESS;
const release = process.env.STOCK_HOST_RELEASE;
const images = process.env.STOCK_HOST_IMAGES.split(' ');
const imageFile = (arch) => images.find((i) => i.startsWith(`runner-${arch}-`));
const imageOf = (arch) => `/var/lib/hatchery/images/${imageFile(arch)}`;
// The remote host's copy: where QEMU (libvirt-qemu) may read it and no other user there
// may. hatcheryd, on the other machine, must find it through libvirt.
const remoteImages = '/srv/hatchery-remote-images';
const remoteImageOf = (arch) => `${remoteImages}/${imageFile(arch)}`;
const api = process.env.GITHUB_DOUBLE_URL;
const JIT = 'jit-stock-host-5b1f0e9c2d7a4e3f8b6c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6';

// A command in the machine, as root: its output, or the test fails with what it said.
function onMachine(dir, command, { cwd = '/root', ok = true, input = '' } = {}) {
  const r = spawnSync(machineSh, ['run', dir, 'bash', '-c', `cd ${cwd} && ${command}`], { encoding: 'utf8', input });
  if (ok) assert.equal(r.status, 0, `${command}\n${r.stdout}\n${r.stderr}`);
  return r;
}
const machine = (command, options) => onMachine(M, command, options);
const remote = (command, options) => onMachine(R, command, options);

// The block of docs/OPERATIONS.md marked <!-- runbook: NAME -->, as written there.
function runbook(name) {
  const doc = readFileSync(`${here}../../docs/OPERATIONS.md`, 'utf8');
  const m = new RegExp(`<!-- runbook: ${name} -->\\n( *)\`\`\`sh\\n([\\s\\S]*?)\\n *\`\`\``).exec(doc);
  assert.ok(m, `docs/OPERATIONS.md has no block marked runbook: ${name}`);
  return m[2].split('\n').map((l) => l.slice(m[1].length)).join('\n');
}
// A block run as written; `fill` may put this machine's values in place of its examples
// (addresses, ids, sizes, paths) and nothing else: every line keeps its key, and every
// example it means to replace must be there (the runbook and the test cannot drift).
// `answers`: what the operator types at the block's prompts (apt's "Continue? [Y/n]");
// `on`: the machine it is run on (this one, or `remote`).
function runRunbook(name, cwd, { env = {}, fill = (block) => block, answers = '', on = machine } = {}) {
  const written = runbook(name);
  const filled = fill(written);
  assert.deepEqual(keysOf(filled), keysOf(written), `runbook ${name}: the test changed more than values`);
  return on(`${Object.entries(env).map(([k, v]) => `export ${k}=${v}\n`).join('')}set -euxo pipefail\n${filled}`, { cwd, input: answers });
}

// Each example value replaced wherever it stands; one that is not there fails the test.
function fillIn(text, example, value) {
  assert.match(text, example, `no ${example} to fill in`);
  return text.replace(new RegExp(example.source, `${example.flags.replace('g', '')}g`), value);
}
// Only values changed: every line keeps its key (and its comment's place); an absolute
// path is a value wherever it stands (a command's argument too).
const keysOf = (text) => text.split('\n').map((l) => l
  .replace(/(^|[\s'"=])\/[\w.@+-]+(?:\/[\w.@+-]*)*/g, '$1PATH')
  .replace(/^(\s*(?:- )?[^:#]*:?).*$/, '$1').replace(/#.*/, ''));

// A hatcheryd on the machine, as its operator reaches it: the CLI on its admin socket, its
// unit's journal, and its webhook listener (`port`, set once its config is written).
function controller(unit, socket = null) {
  const hatchery = socket ? `hatchery --socket ${socket}` : 'hatchery';
  const c = {
    port: null,
    cli: (...args) => JSON.parse(machine(`${hatchery} --json ${args.join(' ')}`).stdout),
    runners: () => c.cli('runners', '--all').runners,
    logs: (runner) => machine(`${hatchery} logs ${runner}`).stdout,
    journal: () => machine(`journalctl -u ${unit} -o cat --no-pager`).stdout,
    async post(payload) {
      const r = await postWebhook(c.port, secret, 'workflow_job', payload);
      assert.equal(r.status, 202, r.body);
    },
  };
  return c;
}
// The package's hatcheryd, which the runbook configures.
const daemon = controller('hatcheryd');
// A second hatcheryd beside it, on CONFIG: the transient unit hatcheryd-SUFFIX, with state
// and runtime directories of its own (hatchery-SUFFIX: its admin socket is
// /run/hatchery-SUFFIX/admin.sock). `hostsUp(count)` waits for its hosts; `stop()` ends it
// and removes its config and state.
function secondController(suffix, config) {
  const unit = `hatcheryd-${suffix}`;
  const dirs = `hatchery-${suffix}`;
  machine(`systemd-run --unit=${unit} --uid=hatchery --gid=hatchery -p StateDirectory=${dirs} ` +
    `-p StateDirectoryMode=0711 -p RuntimeDirectory=${dirs} /usr/sbin/hatcheryd --config ${config}`);
  const c = controller(unit, `/run/${dirs}/admin.sock`);
  c.hostsUp = (count) => {
    let said = '';
    return until(`the ${count} host(s) of ${unit} up`, () => {
      if (machine(`systemctl is-failed --quiet ${unit}`, { ok: false }).status === 0) throw new Error(`${unit} failed`);
      const r = machine(`hatchery --socket /run/${dirs}/admin.sock --json hosts`, { ok: false });
      said = r.stdout + r.stderr;
      const all = r.status === 0 ? JSON.parse(r.stdout).hosts : [];
      return all.length === count && all.every((h) => h.state === 'up') && all;
    }, 120000).catch((e) => {
      const status = machine(`systemctl status --no-pager ${unit}; journalctl -u ${unit} -o cat --no-pager | tail -n 60`, { ok: false });
      throw new Error(`${e.message.split('\n')[0]}\nthe CLI said: ${said}\n${status.stdout}${status.stderr}`);
    });
  };
  c.stop = () => {
    machine(`systemctl stop ${unit}`, { ok: false });
    machine(`rm -rf ${config} /var/lib/${dirs}`, { ok: false });
  };
  return c;
}
const { cli, runners, journal, post } = daemon;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, predicate, ms = 1500000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = predicate();
    if (v) return v;
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}\n${journal().split('\n').slice(-60).join('\n')}`);
    }
    await sleep(2000);
  }
}

// The image hatchery-build-image (hatchery-image-tools) makes on this host.
const builtImage = '/var/lib/hatchery/images/runner-ppc64le-built-here.qcow2';
let buildOutput;
let secret;

// Seconds from guest.created to guest.hello for a runner, from hatcheryd's journal.
function createToHello(name) {
  const at = (event) => {
    const m = new RegExp(`^ts=(\\S+) level=\\w+ event=${event.replace('.', '\\.')} guest=${name} `, 'm').exec(journal());
    assert.ok(m, `${event} of ${name}`);
    return Date.parse(m[1]);
  };
  return (at('guest.hello') - at('guest.created')) / 1000;
}

let nextJob = 9400000000;
let coldPpc;
// Plays GitHub for one job: queued, in_progress to the pool's new idle runner, completed
// once the runner is gone; returns the runner's name.
// `whileQueued(id)` runs once the job is queued, before a runner is waited for; `by`: the
// hatcheryd the pool is in; `on`: the machine whose libvirt runs the pool's guests.
async function serve(label, poolName, taken, { whileQueued, by = daemon, on = machine } = {}) {
  const id = nextJob++;
  await by.post(workflowJob('queued', id, [label]));
  if (whileQueued) await whileQueued(id);
  const r = await until(`an idle runner in ${poolName}`, () =>
    by.runners().find((x) => x.pool === poolName && x.state === 'idle' && !taken.has(x.name)));
  taken.add(r.name);
  // QEMU runs as Debian's libvirt-qemu, not root: the stock configuration.
  const qemuUids = on(`ps -o uid= -C qemu-system-ppc64le,qemu-system-s390x || true`).stdout.trim().split(/\s+/);
  const libvirtQemu = on('id -u libvirt-qemu').stdout.trim();
  assert.ok(qemuUids.length > 0 && qemuUids.every((u) => u === libvirtQemu), `QEMU's uids: ${qemuUids}`);
  await by.post(workflowJob('in_progress', id, [label], r.name));
  await until(`${r.name} to finish`, () => by.runners().find((x) => x.name === r.name)?.state === 'deleted');
  await by.post(workflowJob('completed', id, [label], r.name));
  return r.name;
}

// `on`: the machine whose libvirt held its guest, and so its overlay (storage_dir there);
// `by`: the hatcheryd that made it.
function assertServed(name, arch, on = machine, by = daemon) {
  const r = by.runners().find((x) => x.name === name);
  assert.equal(r.exit_code, 0, `${name}: ${r.reason}`);
  const logs = by.logs(name);
  const m = /hatchery: job report: (\{.*\})/.exec(logs);
  assert.ok(m, `${name}: a job report in its log (through the console stream)\n${logs.slice(-3000)}`);
  const rep = JSON.parse(m[1]);
  assert.equal(rep.result, 'succeeded', `${JSON.stringify(rep)}\n${logs.slice(-4000)}`);
  assert.match(rep.output, new RegExp(`built in a container on ${arch}`));
  assert.ok(!on('ls /var/lib/hatchery/volumes').stdout.includes(name), 'overlay deleted');
  assert.ok(!logs.includes(JIT) && !by.journal().includes(JIT), 'the JIT config is in no log');
}

describe(`day one on a stock Debian ${release} host`, () => {
  const taken = new Set();
  before(async () => {
    await fetch(`${api}/__double/jit`, { method: 'POST', body: JIT });
    // The host has none of the build's libraries (the build had a root of its own): the
    // package's Depends must bring them. These two only hatcheryd needs; the others
    // (jansson, libuv, curl, SQLite) a standard trixie host has for nftables, BIND's tools
    // and apt.
    const ownLibs = ['libhttp-parser2.9', 'libyaml-0-2'];
    const installed = (p) => machine(`dpkg-query -W -f='\${Status}' ${p} 2>/dev/null`, { ok: false }).stdout === 'install ok installed';
    for (const lib of ownLibs) assert.ok(!installed(lib), `${lib} is on the host before the install`);
    assert.ok(installed('nftables'), 'the host has nftables (Priority important)');
    // apt as Debian configures it: Recommends on (the root's packages came with theirs).
    assert.match(machine('apt-config dump --format "%v%n" APT::Install-Recommends').stdout.trim(), /^(1|true)$/);
    assert.ok(installed('qemu-system-gui'), 'qemu-system-ppc\'s Recommends are on the host');
    // Its package lists, as an operator's host has them (the root keeps those of its
    // making; an index that fails to update keeps its old list).
    const updated = machine('apt-get update -qq 2>&1', { ok: false });
    if (updated.status !== 0) console.log(`stock host: apt-get update said: ${updated.stdout.trim()}`);
    // 1. Install, as the runbook says, where the packages were put.
    runRunbook('install', '/home/builder/src', { answers: 'y\n' });
    for (const lib of ownLibs) assert.ok(installed(lib), `the install did not bring ${lib}`);
    // 2. The App's key and the images, brought to the host.
    copyFileSync(process.env.APP_KEY_FILE, `${M}/root/rollout/github-app.private-key.pem`);
    runRunbook('app-key', '/root/rollout');
    runRunbook('images', '/root/rollout');
    // An image built here by the packaged recipe, with the packaged agent, for the NAT pool.
    runRunbook('image-tools', '/root/rollout', { env: { GUEST_ARCH: 'ppc64el' }, answers: 'y\n' });
    // Its Recommends brought trixie's qemu-user, whose qemu-user-binfmt registers it.
    for (const p of ['qemu-user-static', 'qemu-user-binfmt']) assert.ok(installed(p), `the install did not bring ${p}`);
    // Built with the host's own binfmt registration (own-binfmt.sh: the host's
    // systemd-binfmt, in a binfmt_misc of its own), as the host would have it after a boot.
    buildOutput = machine(`/root/own-binfmt.sh hatchery-build-image --debian-cache /var/cache/hatchery-image ppc64le actions-runner-linux-ppc64le-*.tar.gz ${builtImage} 2>&1`, { cwd: '/root/rollout' }).stdout;
    // The remote host, as "Add a remote host" says: our package installed there too (its
    // guest firewall; its own hatcheryd turned off by remote-login), the controller's key
    // copied to it and its login made, its host key trusted here.
    // Its network is this machine's NAT (run.sh): the archive is reached through it.
    const resolved = remote('getent hosts deb.debian.org', { ok: false });
    assert.equal(resolved.status, 0, 'the remote machine resolves the archive through this machine\'s NAT (run.sh: forwarding, masquerade)');
    remote('apt-get update -qq 2>&1', { ok: false });
    runRunbook('install', '/root/rollout', { answers: 'y\n', on: remote });
    runRunbook('remote-key', '/root/rollout');
    copyFileSync(`${M}/root/rollout/hatchery-controller.pub`, `${R}/root/rollout/hatchery-controller.pub`);
    runRunbook('remote-login', '/root/rollout', { on: remote });
    assert.equal(remote('systemctl is-active hatcheryd', { ok: false }).stdout.trim(), 'inactive');
    assert.equal(remote('/usr/lib/hatchery/guest-firewall.sh status', { ok: false }).status, 0, 'the remote host\'s guest firewall');
    runRunbook('remote-trust', '/root/rollout', { env: { REMOTE_HOST: remoteAddress } });
    remote(`install -d -m 0750 -o root -g libvirt-qemu ${remoteImages}`);
    // libvirt's NAT network, for a pool that uses it instead of user-mode networking.
    runRunbook('nat-network', '/root');
    // 3. The config: the package's, with the runbook's block added, its example values
    // replaced by this machine's (the only change the test makes: checked key by key).
    daemon.port = await freePort();
    secret = readFileSync(`${M}/etc/hatchery/webhook-secret`, 'utf8').trim();
    const config = `${M}/etc/hatchery/hatchery.yaml`;
    writeFileSync(config, readFileSync(config, 'utf8').replace(/^listen: .*$/m, `listen: 127.0.0.1:${daemon.port}`));
    runRunbook('config', '/root', { fill: (block) => {
      // One pool's lines, from its name to the next pool's or the block's end.
      const inPool = (text, name, change) => fillIn(text,
        new RegExp(`( *- name: ${name}\\n[\\s\\S]*?)(?=\\n *- name: |\\nEOF)`), (lines) => change(lines));
      let b = block;
      for (const [example, value] of [
        [/api_url: https:\/\/api\.github\.com/, `api_url: ${api}`],
        [/app_id: 123456/, `app_id: ${process.env.APP_ID}`],
        [/hatchery-remote@p10-b\.example\.com\//, `hatchery-remote@${remoteAddress}/`],
        [/vcpus: 48/, 'vcpus: 4'],
        [/memory_mib: 196608/, 'memory_mib: 8192'],
        [/max_guests: 10/, 'max_guests: 3'],
        [/max_runners: 8/, 'max_runners: 1'],
        [/boot_timeout_s: 300/, 'boot_timeout_s: 900'],
      ]) b = fillIn(b, example, value);
      for (const [name, arch, image] of [
        ['prod-ppc64le', 'ppc64le', imageOf('ppc64le')],
        ['prod-s390x', 's390x', imageOf('s390x')],
        ['prod-ppc64le-tpl', 'ppc64le', imageOf('ppc64le')],
        ['prod-s390x-remote', 's390x', remoteImageOf('s390x')],
        ['prod-ppc64le-nat', 'ppc64le', builtImage],
      ]) {
        b = inPool(b, name, (lines) => [
          [/image: \S+/, `image: ${image}`],
          [/vcpus: \d+/, 'vcpus: 1'],
          [/memory_mib: \d+/, `memory_mib: ${arch === 'ppc64le' ? 2048 : 1536}`],
        ].reduce((text, [example, value]) => fillIn(text, example, value), lines));
      }
      return b;
    } });
    // 4. Check it and start.
    runRunbook('start', '/root');
    await until('the host up', () => cli('hosts').hosts.find((h) => h.name === 'local' && h.state === 'up'));
  });
  after(() => {
    machine('journalctl -u hatcheryd -o cat --no-pager -p warning | tail -n 40', { ok: false });
  });

  test('the package installed as on a host: its user in libvirt, both units running, state_dir passable', () => {
    assert.equal(machine('systemctl is-active hatcheryd hatchery-guest-firewall hatchery-guest-firewall-check.timer').stdout,
      'active\nactive\nactive\n');
    assert.match(machine('id -nG hatchery').stdout, /\blibvirt\b/);
    // What the unit sets, read from the kernel rather than inferred: hatcheryd runs as
    // `hatchery`, with no capability in any set, no_new_privs, and a seccomp filter
    // (SystemCallFilter=).
    const status = machine('grep -E "^(Uid|Gid|Cap[A-Za-z]+|NoNewPrivs|Seccomp):" /proc/$(systemctl show -p MainPID --value hatcheryd)/status').stdout;
    const field = (name) => new RegExp(`^${name}:\\s*(.*)$`, 'm').exec(status)?.[1].trim().split(/\s+/);
    const uid = machine('id -u hatchery').stdout.trim();
    assert.deepEqual(field('Uid'), [uid, uid, uid, uid], status);
    for (const set of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'])
      assert.deepEqual(field(set), ['0000000000000000'], `${set}: ${status}`);
    assert.deepEqual(field('NoNewPrivs'), ['1'], status);
    assert.deepEqual(field('Seccomp'), ['2'], status); // 2: a filter
    assert.equal(machine('stat -c %a /var/lib/hatchery').stdout.trim(), '711');
    assert.equal(machine('stat -c "%a %U" /var/lib/hatchery/hatchery.db').stdout.trim(), '640 hatchery');
    // libvirt as Debian ships it: qemu.conf and the daemon's config untouched.
    assert.equal(machine('dpkg --verify libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-daemon-config-network 2>/dev/null || true').stdout, '');
    assert.doesNotMatch(machine('cat /etc/libvirt/qemu.conf').stdout, /^\s*(user|group|dynamic_ownership|security_driver)\s*=/m);
    const version = machine('virsh -c qemu:///system version').stdout;
    console.log(version.trim().split('\n').join('; '));
    const qemu = /Running hypervisor: QEMU (\d+)\.(\d+)/.exec(version);
    assert.ok(qemu && Number(qemu[1]) * 100 + Number(qemu[2]) >= 802, version);
  });

  test('an image built on the host by the packaged recipe, with the packaged agent', () => {
    // Its foreign binaries ran through the host's own registration, not through the
    // kernel's that the machines share: a ppc64el binary did not run before it.
    assert.match(buildOutput, /^before registering: ppc64el: not supported/m, buildOutput.slice(0, 2000));
    assert.match(buildOutput, /^registered qemu-ppc64le: enabled interpreter \/usr\/libexec\/qemu-binfmt\/ppc64le-binfmt-P flags: POF /m);
    assert.match(machine('dpkg -S /usr/lib/binfmt.d/qemu-ppc64le.conf').stdout, /^qemu-user-binfmt(:amd64)?: /);
    // Its Debian stage: mmdebstrap, here, in the week's first run (run.sh keeps it); the
    // later runs take that stage from hatchery-build-image's own cache.
    const stage = process.env.STOCK_HOST_IMAGE_STAGE;
    assert.match(buildOutput, stage === 'mmdebstrap' ? /Debian root \(mmdebstrap\)/ : /Debian root from the cache/);
    assert.equal(machine('test -e /usr/lib/hatchery/image/runner/build-image.sh && ! test -e /root/src', { ok: false }).status, 0);
    const manifest = JSON.parse(machine(`cat ${builtImage}.json`).stdout);
    assert.equal(manifest.arch, 'ppc64le');
    assert.equal(manifest.runner_version, '2.330.0');
    assert.equal(manifest.agent_version, machine("dpkg-query -W -f '${source:Upstream-Version}' hatchery-guest-agent:ppc64el").stdout);
    assert.equal(manifest.sha256, machine(`sha256sum ${builtImage}`).stdout.split(' ')[0]);
    // The agent in it is the package's, byte for byte.
    machine(`qemu-img convert -O raw ${builtImage} /var/tmp/built.raw && debugfs -R 'dump /usr/local/bin/hatchery-agent /var/tmp/agent' /var/tmp/built.raw && rm /var/tmp/built.raw`);
    assert.equal(machine('cmp /var/tmp/agent /usr/lib/hatchery/agent/ppc64le/hatchery-agent', { ok: false }).status, 0);
  });

  test('the runbook\'s check: the host is up through streams, its guest firewall in place', () => {
    const out = runRunbook('check', '/root').stdout;
    assert.match(out, /^local\s+up\s+qemu:\/\/\/system\s+stream\b.*\bin_place\b/m, out);
    const host = cli('hosts').hosts.find((h) => h.name === 'local');
    assert.equal(host.transport, 'stream');
    assert.equal(host.guest_isolation, 'in_place');
    assert.match(journal(), /event=host\.transport host=local transport=stream qemu_uid=\d+/);
  });

  // The remote host's job runs beside the first pair: its guest is on a host of its own,
  // and most of its time is emulation, which the three guests share. Started with the
  // pair, reported by its own test.
  let remoteJob;
  async function serveOnRemote() {
    const host = await until('the remote host up', () =>
      cli('hosts').hosts.find((h) => h.name === 'remote' && h.state === 'up'), 120000);
    assert.equal(host.transport, 'stream');
    assert.equal(host.guest_isolation, 'unchecked');
    const image = remoteImageOf('s390x');
    const metric = async () => /^hatchery_host_image_ready\{host="remote",pool="prod-s390x-remote"\} (\d)$/m
      .exec(await (await fetch(`http://127.0.0.1:${daemon.port}/metrics`)).text())?.[1];
    const whileQueued = async (id) => {
      // Not on the host yet: the job waits, and every view says why.
      const job = await until('the job waiting for the image on the remote host', () =>
        cli('jobs').jobs.find((j) => String(j.id) === String(id) && /missing on the host/.test(j.waiting ?? '')), 120000);
      assert.equal(job.waiting, `host remote: image ${image} missing on the host`);
      const pool = cli('pools').pools.find((p) => p.name === 'prod-s390x-remote');
      assert.equal(pool.image_error, job.waiting);
      assert.deepEqual(pool.image_hosts.map((h) => [h.host, h.state]), [['remote', 'missing']]);
      assert.match(machine('hatchery pools').stdout, /^prod-s390x-remote .*error: host remote: image \S+ missing on the host/m);
      assert.equal(await metric(), '0');
      assert.doesNotMatch(journal(), /event=guest\.created guest=\S+ host=remote /);
      // Put there by the operator (copied to the other machine), where only QEMU may read it.
      const put = spawnSync('sh', ['-c', `cp --reflink=auto ${M}${imageOf('s390x')}* ${R}${remoteImages}/`], { encoding: 'utf8' });
      assert.equal(put.status, 0, put.stderr);
      assert.notEqual(remote(`runuser -u hatchery -- test -r ${image}`, { ok: false }).status, 0, 'the remote host\'s hatchery user can read the image');
    };
    const name = await serve('linux.s390x.prod.remote', 'prod-s390x-remote', taken, { whileQueued });
    assert.match(journal(), new RegExp(`event=image\\.found_on_host host=remote pool=prod-s390x-remote image=${image} arch=s390x `));
    assert.match(journal(), new RegExp(`event=guest\\.created guest=${name} host=remote `));
    // Its domain was the other machine's libvirtd's (its QEMU log is there), never this one's.
    remote(`test -s /var/log/libvirt/qemu/${name}.log`);
    machine(`test ! -e /var/log/libvirt/qemu/${name}.log`);
    assert.equal(await metric(), '1');
    return name;
  }

  test('a ppc64le and an s390x job on the production image, QEMU as libvirt-qemu', { timeout: 3000000 }, async () => {
    const t0 = Date.now();
    remoteJob = serveOnRemote();
    remoteJob.catch(() => {}); // awaited, and reported, by its own test
    const [ppc, s390] = await Promise.all([
      serve('linux.ppc64le.prod', 'prod-ppc64le', taken),
      serve('linux.s390x.prod', 'prod-s390x', taken),
    ]);
    assertServed(ppc, 'ppc64le');
    assertServed(s390, 's390x');
    coldPpc = ppc;
    console.log(`both jobs served in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  });

  test('a job on a pool whose one host is reached only as qemu+ssh://, its image found there through libvirt', { timeout: 1800000 }, async () => {
    const name = await remoteJob;
    assertServed(name, 's390x', remote);
  });

  test('a ppc64le job from a warm template (QEMU 8.2 or later keeps the pseries decrementer)', { timeout: 3000000 }, async () => {
    const tpl = await until('the ppc64le template ready', () =>
      cli('hosts').hosts.find((h) => h.name === 'local').templates.find((t) => t.pool === 'prod-ppc64le-tpl' && t.state === 'ready'));
    console.log(`ppc64le template ${tpl.name}: ${(tpl.file_bytes / 1e6).toFixed(0)} MB`);
    const name = await serve('linux.ppc64le.prod.tpl', 'prod-ppc64le-tpl', taken);
    assert.match(journal(), new RegExp(`event=template\\.restored guest=${name} `));
    assertServed(name, 'ppc64le');
    // A figure, not a check (this machine is noisy): restore against the cold boot of the
    // same image in the same run.
    const cold = createToHello(coldPpc);
    const warm = createToHello(name);
    console.log(`ppc64le production image, create to hello: cold ${cold.toFixed(1)} s, from the template ${warm.toFixed(2)} s, ratio ${(warm / cold).toFixed(3)}`);
  });

  test('a hostile job reaches the outside and nothing of its host, through the firewall the package enabled', { timeout: 1800000 }, async () => {
    // The stand-in's hostile job (job/probe.sh, as uid 1000) instead of the podman build;
    // the listeners are on this machine's network, which the stock host shares.
    const { targets, guarded, close } = await isolationTargets(daemon.port);
    try {
      await fetch(`${api}/__double/jit`, { method: 'POST', body: `${JIT} probe=${targets.join('+')}` });
      const name = await serve('linux.s390x.prod', 'prod-s390x', taken);
      const m = /hatchery: job report: (\{.*\})/.exec(machine(`hatchery logs ${name}`).stdout);
      assert.ok(m, `${name}: a job report`);
      const rep = JSON.parse(m[1]);
      assert.equal(rep.uid, 1000);
      assert.deepEqual(rep.probes, guarded);
      console.log(`stock host, isolation probes: ${JSON.stringify(rep.probes)}`);
    } finally {
      close();
      await fetch(`${api}/__double/jit`, { method: 'POST', body: JIT });
    }
  });

  test('a hostile job on libvirt\'s NAT network reaches the outside only, through hatcheryd\'s nwfilter, on the image built here', { timeout: 1800000 }, async () => {
    // Defined by hatcheryd when it connected: the host is in place for the NAT pool too.
    assert.match(journal(), /event=host\.guest_filter host=local filter=hatchery-guest-isolation state=defined/);
    // The remote host's libvirtd got it too, over SSH. (A second connection to a libvirtd
    // that has it already, which must replace it under its UUID, is the shipped example's
    // p10-a below.)
    assert.match(journal(), /event=host\.guest_filter host=remote filter=hatchery-guest-isolation state=defined/);
    assert.match(remote('virsh -c qemu:///system nwfilter-list').stdout, /hatchery-guest-isolation/);
    assert.equal(cli('hosts').hosts.find((h) => h.name === 'local').guest_isolation, 'in_place');
    // Taken away behind hatcheryd's back (no guest uses it yet): put back at the next create.
    machine('virsh -c qemu:///system nwfilter-undefine hatchery-guest-isolation');
    const { anyPort, hostIp, egress, lan, close } = await isolationTargets(daemon.port);
    // The host on the network's bridge, the host at its own address (here a documentation
    // range, which is no private one: HOST_IP drops it), a machine of its LAN, and the
    // outside.
    const gateway = /ip address='([0-9.]+)'/.exec(machine('virsh -c qemu:///system net-dumpxml default').stdout)[1];
    const targets = [`${gateway}:${anyPort}`, `${gateway}:${daemon.port}`, `${hostIp}:${anyPort}`, lan.target, egress.target];
    try {
      // The network's rules are in the kernel's nf_tables: libvirt 11.3 as Debian builds it
      // tries its iptables backend first, and iptables (the package's own Depends, for the
      // guest firewall) is iptables-nft on trixie; nftables, Priority important, is there.
      assert.match(machine('iptables -V').stdout, /nf_tables/);
      assert.match(machine('nft list chain ip nat LIBVIRT_PRT').stdout, /masquerade/);
      await fetch(`${api}/__double/jit`, { method: 'POST', body: `${JIT} probe=${targets.join('+')}` });
      const name = await serve('linux.ppc64le.prod.nat', 'prod-ppc64le-nat', taken);
      assert.match(journal(), new RegExp(`event=host\\.guest_filter_restored host=local filter=hatchery-guest-isolation guest=${name}`));
      const m = /hatchery: job report: (\{.*\})/.exec(machine(`hatchery logs ${name}`).stdout);
      assert.ok(m, `${name}: a job report`);
      const rep = JSON.parse(m[1]);
      assert.equal(rep.uid, 1000);
      assert.deepEqual(rep.probes, Object.fromEntries(targets.map((t) => [t, t === egress.target ? 'open' : 'closed'])));
      console.log(`stock host, NAT network, isolation probes: ${JSON.stringify(rep.probes)}`);
    } finally {
      close();
      await fetch(`${api}/__double/jit`, { method: 'POST', body: JIT });
    }
  });

  test('rules changed behind the firewall\'s back are found by its check and applied again', () => {
    // What another tool's flush or a hand edit does: a rule of the chain gone.
    machine('iptables -D HATCHERY-GUESTS -m addrtype --dst-type LOCAL -j REJECT');
    assert.equal(machine('/usr/lib/hatchery/guest-firewall.sh status', { ok: false }).status, 1);
    // The timer's service, now rather than within the minute.
    machine('systemctl start hatchery-guest-firewall-check.service', { ok: false });
    const said = machine('journalctl -u hatchery-guest-firewall-check -o cat --no-pager').stdout;
    assert.match(said, /changed since apply: record removed/);
    assert.match(said, /applied again by hatchery-guest-firewall\.service/);
    assert.equal(machine('/usr/lib/hatchery/guest-firewall.sh status', { ok: false }).status, 0);
    assert.equal(cli('hosts').hosts.find((h) => h.name === 'local').guest_isolation, 'in_place');
  });

  test('with the guest firewall removed, the host is unsafe and no guest starts', { timeout: 600000 }, async () => {
    const warnings = () => machine('journalctl -u hatcheryd -o cat --no-pager -p warning').stdout
      .split('\n').filter((l) => /event=host\.unsafe host=local /.test(l));
    const earlier = warnings().length; // an earlier test took the rules away for a moment
    machine('/usr/lib/hatchery/guest-firewall.sh remove');
    const id = nextJob++;
    const before = runners().length;
    await post(workflowJob('queued', id, ['linux.s390x.prod']));
    const job = await until('the job to wait for isolation', () =>
      cli('jobs').jobs.find((j) => j.id === id && /host local unsafe/.test(j.waiting ?? '')), 120000);
    assert.match(job.waiting, /guest firewall/);
    assert.equal(cli('hosts').hosts.find((h) => h.name === 'local').guest_isolation, 'missing');
    // Where the runbook's troubleshooting starts: the journal's warnings say why, once.
    await until('the host.unsafe warning in the journal', () => warnings().length > earlier, 60000);
    assert.match(warnings()[earlier], /guest_isolation=missing reason=".*the guest firewall is not applied/);
    await sleep(15000);
    assert.equal(warnings().length, earlier + 1, 'said once, not at every tick');
    assert.equal(runners().length, before, 'no runner was made');
    await post(workflowJob('completed', id, ['linux.s390x.prod']));
    machine('systemctl restart hatchery-guest-firewall');
    assert.equal(machine('/usr/lib/hatchery/guest-firewall.sh status', { ok: false }).status, 0);
    await until('host.isolation in the journal', () => /event=host\.isolation host=local guest_isolation=in_place/.test(journal()), 60000);
  });

  test('the shipped example config, with only addresses, paths and ids filled in: both its hosts come up', { timeout: 300000 }, async () => {
    // /usr/share/doc/hatchery/examples/hatchery.example.yaml as the package ships it: its
    // two hosts are this machine (p10-a) and, over SSH as the runbook's hatchery-remote,
    // the remote machine (p10-b). A second hatcheryd runs it beside the first, so its
    // listeners, state and socket are its own; min_idle 0, so that it starts no guest. Its
    // p10-a finds the nwfilter the first one defined in the same libvirtd and must replace
    // it under its UUID (libvirt refuses the name under a new one), not count as a host
    // without isolation.
    const shipped = machine('zcat -f /usr/share/doc/hatchery/examples/hatchery.example.yaml*').stdout;
    const [webPort, metricsPort] = [await freePort(), await freePort()];
    let filled = shipped;
    for (const [example, value] of [
      [/listen: 127\.0\.0\.1:8080/, `listen: 127.0.0.1:${webPort}`],
      [/metrics_listen: 127\.0\.0\.1:9464/, `metrics_listen: 127.0.0.1:${metricsPort}`],
      [/state_dir: \/var\/lib\/hatchery$/m, 'state_dir: /var/lib/hatchery-example'],
      [/admin_socket: \/run\/hatchery\/admin\.sock/, 'admin_socket: /run/hatchery-example/admin.sock'],
      [/app_id: 123456/, `app_id: ${process.env.APP_ID}`],
      [/p10-b\.example\.com\//, `${remoteAddress}/`],
      [/\/var\/lib\/hatchery\/images\/runner-ppc64le\.qcow2/, imageOf('ppc64le')],
      [/min_idle: 1/, 'min_idle: 0'],
    ]) filled = fillIn(filled, example, value);
    assert.deepEqual(keysOf(filled), keysOf(shipped), 'the test changed more than values');
    writeFileSync(`${M}/etc/hatchery/example.yaml`, filled);
    machine('chmod 0644 /etc/hatchery/example.yaml && runuser -u hatchery -- hatcheryd --check-config /etc/hatchery/example.yaml');
    const example = secondController('example', '/etc/hatchery/example.yaml');
    try {
      const hosts = await example.hostsUp(2);
      assert.deepEqual(hosts.map((h) => [h.name, h.transport, h.guest_isolation]),
        [['p10-a', 'stream', 'in_place'], ['p10-b', 'stream', 'unchecked']]);
      assert.deepEqual(example.cli('pools').pools.map((p) => p.name), ['linux.ppc64le', 'linux.ppc64le.publisher']);
    } finally {
      example.stop();
    }
  });

  test('a controller with no guests of its own: the runbook\'s remote-only config serves a job on the remote machine', { timeout: 1800000 }, async () => {
    // The block as written, its values filled in; the test's one departure is where it
    // runs: a second hatcheryd on this machine (which keeps its own), with a config file,
    // state, socket and listener of its own, as the shipped example's above.
    const webPort = await freePort();
    const socket = '/run/hatchery-remote-only/admin.sock';
    runRunbook('remote-only-config', '/root', { fill: (block) => [
      [/\/etc\/hatchery\/hatchery\.yaml/, '/etc/hatchery/remote-only.yaml'],
      [/listen: 127\.0\.0\.1:8080/, `listen: 127.0.0.1:${webPort}`],
      [/state_dir: \/var\/lib\/hatchery$/m, 'state_dir: /var/lib/hatchery-remote-only'],
      [/admin_socket: \/run\/hatchery\/admin\.sock/, `admin_socket: ${socket}`],
      [/api_url: https:\/\/api\.github\.com/, `api_url: ${api}`],
      [/app_id: 123456/, `app_id: ${process.env.APP_ID}`],
      [/p10-b\.example\.com\//, `${remoteAddress}/`],
      [/image: \S+/, `image: ${remoteImageOf('s390x')}`],
      [/vcpus: 4$/m, 'vcpus: 1'],
      [/vcpus: 48/, 'vcpus: 4'],
      [/memory_mib: 8192/, 'memory_mib: 1536'],
      [/memory_mib: 196608/, 'memory_mib: 8192'],
      [/max_guests: 10/, 'max_guests: 3'],
      [/max_runners: 8/, 'max_runners: 1'],
      [/boot_timeout_s: 300/, 'boot_timeout_s: 900'],
    ].reduce((text, [example, value]) => fillIn(text, example, value), block) });
    const lab = secondController('remote-only', '/etc/hatchery/remote-only.yaml');
    lab.port = webPort;
    try {
      const hosts = await lab.hostsUp(1);
      // p10-b alone: no local host.
      assert.deepEqual(hosts.map((h) => [h.name, h.uri, h.transport, h.guest_isolation]),
        [['p10-b', `qemu+ssh://hatchery-remote@${remoteAddress}/system`, 'stream', 'unchecked']]);
      const name = await serve('linux.s390x.lab', 'lab-s390x', taken, { by: lab, on: remote });
      assert.match(name, /^hatchery-lab-controller-/);
      assertServed(name, 's390x', remote, lab);
      assert.match(lab.journal(), new RegExp(`event=guest\\.created guest=${name} host=p10-b `));
      // Its QEMU was the remote machine's, never this one's.
      remote(`test -s /var/log/libvirt/qemu/${name}.log`);
      machine(`test ! -e /var/log/libvirt/qemu/${name}.log`);
    } finally {
      lab.stop();
    }
  });

  test('removing the package with guests up: refused while a job runs, then each guest, its disk and GitHub runner, the pools and the filter gone', { timeout: 900000 }, async () => {
    // Two runners, their guests frozen (virsh suspend) so that nothing in them moves on:
    // one GitHub gives a job once its config is sent (a frozen guest cannot end that job;
    // its silence would make hatcheryd judge it hung after heartbeat_timeout_s, 60 s,
    // where the removal below comes within seconds), one frozen while it boots.
    const frozen = async (label, poolName, states) => {
      const id = nextJob++;
      await post(workflowJob('queued', id, [label]));
      const r = await until(`a runner in ${poolName}`, () =>
        runners().find((x) => x.pool === poolName && !taken.has(x.name) && states.includes(x.state)));
      taken.add(r.name);
      await until(`${r.name}'s domain running`, () =>
        machine(`virsh -c qemu:///system domstate ${r.name}`, { ok: false }).stdout.trim() === 'running');
      machine(`virsh -c qemu:///system suspend ${r.name}`);
      return { id, label, name: r.name };
    };
    const idle = await frozen('linux.ppc64le.prod', 'prod-ppc64le', ['booting']);
    const busy = await frozen('linux.s390x.prod', 'prod-s390x', ['configured', 'idle']);
    await post(workflowJob('in_progress', busy.id, [busy.label], busy.name));
    await until(`${busy.name} busy`, () => runners().find((x) => x.name === busy.name)?.state === 'busy');
    await until(`${idle.name}'s GitHub runner`, () => runners().find((x) => x.name === idle.name)?.github_runner_id);
    const idleGithubId = runners().find((x) => x.name === idle.name).github_runner_id;

    // A job still runs: the removal is refused, with why, and the hosts are drained.
    let r = machine('apt-get remove -y -q hatchery 2>&1', { ok: false });
    assert.notEqual(r.status, 0, r.stdout);
    assert.match(r.stdout, new RegExp(`hatchery: not removed: jobs still run on these runners' guests: ${busy.name}\\.`));
    assert.equal(machine('systemctl is-active hatcheryd').stdout, 'active\n');
    assert.equal(machine("dpkg-query -W -f '${Status}' hatchery").stdout, 'install ok installed');
    assert.ok(cli('hosts').hosts.every((h) => h.drained), 'every host drained');
    assert.ok(runners().find((x) => x.name === idle.name), `${idle.name} kept while the removal is refused`);

    // The operator ends that job, as the refusal says; the purge then ends the other.
    machine(`hatchery delete ${busy.name}`, { ok: false });
    await until(`${busy.name} gone`, () => !cli('runners').runners.some((x) => x.name === busy.name));
    r = machine('apt-get purge -y -q hatchery 2>&1', { ok: false });
    assert.equal(r.status, 0, r.stdout);
    assert.match(r.stdout, /hatchery: deleted [1-9]\d* runner\(s\) that had no job/);
    // Nothing of hatchery's left running in libvirt, and nothing it made there.
    const domains = machine('virsh -q -c qemu:///system list --all --name').stdout.split('\n').filter(Boolean);
    for (const dom of domains) {
      assert.notEqual(machine(`virsh -q -c qemu:///system metadata ${dom} https://hatchery.dev/xmlns/runner/1`, { ok: false }).status, 0,
        `${dom} is hatchery's and outlived the purge`);
    }
    assert.deepEqual(machine('virsh -q -c qemu:///system pool-list --all --name').stdout.split('\n')
      .filter((p) => p === 'hatchery' || p.startsWith('hatchery-image-')), []);
    assert.notEqual(machine('virsh -q -c qemu:///system nwfilter-dumpxml hatchery-guest-isolation', { ok: false }).status, 0,
      'the guest filter outlived the purge');
    assert.equal(machine('test -e /var/lib/hatchery/volumes', { ok: false }).status, 1, 'the volumes outlived the purge');
    assert.equal(machine('ps -o pid=,args= -C qemu-system-ppc64le,qemu-system-s390x', { ok: false }).stdout, '', 'a QEMU outlived the purge');
    // Nor on the remote host: its guests went with their runners.
    assert.equal(remote('ps -o pid=,args= -C qemu-system-ppc64le,qemu-system-s390x', { ok: false }).stdout, '', 'a QEMU on the remote host outlived the purge');
    // The idle runner's GitHub registration went with it.
    const log = await (await fetch(`${api}/__double/log`)).json();
    assert.ok(log.log.some((e) => e.method === 'DELETE' && e.url.endsWith(`/actions/runners/${idleGithubId}`)),
      `no DELETE of ${idle.name}'s GitHub runner ${idleGithubId}`);
  });
});
