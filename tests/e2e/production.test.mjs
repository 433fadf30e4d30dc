// The day-one path on the production runner image, for ppc64le and s390x: hatcheryd on
// the real libvirtd boots the image built by images/runner/build-image.sh through the
// production domain XML (direct kernel boot from the image's manifest; TCG here instead
// of KVM), the agent starts under systemd and says hello, the runner stand-in runs its
// job as the `runner` user (podman builds an image from a Dockerfile that starts like
// docker/Dockerfile_ARCH, compiling in a RUN step, and runs it), the job's report comes
// back through the agent, the guest powers off and its overlay is deleted. A hostile job
// on the same image probes its host and the outside through deploy/guest-firewall.sh.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { Daemon, githubConfig, workflowJob } from '../integration/lib/daemon.mjs';
import { QEMU_GID, firewall, isolationTargets } from './isolation.mjs';

const api = process.env.GITHUB_DOUBLE_URL;
const image = { ppc64le: process.env.IMAGE_ppc64le, s390x: process.env.IMAGE_s390x };
const testGuest = process.env.GUEST_ppc64le;
// What generate-jitconfig answers: distinctive, so that finding it anywhere is a leak.
const JIT = 'jit-production-e2e-91c4d2f7a3b54e6f8a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d';
const storagePool = `hatchery-prod-${process.pid}`;

function pool(arch, { max = 2, template = false } = {}) {
  return `  - name: prod-${arch}${template ? '-tpl' : ''}
    labels: [linux.${arch}.prod${template ? '.tpl' : ''}]${template ? '\n    start: template' : ''}
    arch: ${arch}
    image: ${image[arch]}
    network: user
    disk_mib: 8192
    vcpus: 1
    memory_mib: ${arch === 'ppc64le' ? 2048 : 1536}
    max_runners: ${max}
    boot_timeout_s: 900
    job_timeout_s: 3600
    hosts: [local]
`;
}

const d = new Daemon({
  hostsExtra: `  - name: local
    uri: qemu:///system
    vcpus: 4
    memory_mib: 8192
    max_guests: 4
    storage_pool: ${storagePool}
    storage_dir: /tmp/${storagePool}
`,
  pools: 'pools:\n' + pool('ppc64le') + pool('s390x', { max: 1 }) + pool('s390x', { max: 1, template: true }) +
    `  - name: test-ppc64le
    labels: [linux.ppc64le.test]
    arch: ppc64le
    image: ${testGuest}/base.qcow2
    cmdline: "console=hvc0 quiet"
    network: none
    disk_mib: 64
    vcpus: 1
    memory_mib: 512
    max_runners: 1
    boot_timeout_s: 300
    runner_command: [/usr/bin/fake-runner]
    hosts: [local]
`,
  extra: githubConfig({ reconcileIntervalS: 10 }),
});
let nextJob = 9300000000;
const hostArgvLeaks = new Set();

const until = (what, predicate, ms = 1500000) => d.until(what, predicate, { ms, everyMs: 500, tail: 60 });

// The host side of "the JIT config is on no argv": every process's command line, looked
// at while the guests run (QEMU's included).
function scanHostArgv() {
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'latin1').includes(JIT)) hostArgvLeaks.add(pid);
    } catch { /* gone */ }
  }
}

const runners = () => d.cliJson('runners', '--all').runners;
const volumes = () => spawnSync('virsh', ['-c', 'qemu:///system', 'vol-list', storagePool], { encoding: 'utf8' }).stdout;
const domains = () => spawnSync('virsh', ['-c', 'qemu:///system', 'list', '--name'], { encoding: 'utf8' })
  .stdout.split('\n').filter((n) => n.startsWith('hatchery-it-'));
const hello = (name) => {
  const m = new RegExp(`event=guest\\.hello guest=${name} .*boot_id=(\\S+) machine_id=(\\S+)`).exec(d.logs);
  return m && { boot: m[1], machine: m[2] };
};
const eventMs = (event, name) => {
  const m = new RegExp(`^ts=(\\S+) level=\\w+ event=${event.replace('.', '\\.')} guest=${name} `, 'm').exec(d.logs);
  return m && Date.parse(m[1]);
};
const createToHello = (name) => (eventMs('guest.hello', name) - eventMs('guest.created', name)) / 1000;
const report = (name) => {
  const m = /hatchery: job report: (\{.*\})/.exec(d.cli('logs', name).stdout);
  return m && JSON.parse(m[1]);
};

// What the double's generate-jitconfig answers from now on. Set once before jobs served
// side by side: two requests racing on the double's keep-alive connection can lose one,
// and a POST on a keep-alive connection the double closed as idle fails at once; once more.
const setJit = async (jit) => {
  for (let attempt = 1; ; attempt++) {
    try {
      const r = await fetch(`${api}/__double/jit`, { method: 'POST', body: jit });
      assert.ok(r.ok);
      return;
    } catch (e) {
      if (attempt >= 3) throw e;
    }
  }
};

// Plays GitHub for one job: queued, in_progress to the pool's new idle runner, completed
// once the runner is done; returns the runner's name.
async function serve(arch, jit, taken, { label = `linux.${arch}.prod`, poolName = `prod-${arch}` } = {}) {
  const id = nextJob++;
  if (jit) await setJit(jit);
  assert.equal((await d.post('workflow_job', workflowJob('queued', id, [label]))).status, 202);
  const r = await until(`an idle runner in ${poolName}`, () => {
    scanHostArgv();
    return runners().find((x) => x.pool === poolName && x.state === 'idle' && !taken.has(x.name));
  });
  taken.add(r.name);
  assert.equal((await d.post('workflow_job', workflowJob('in_progress', id, [label], r.name))).status, 202);
  await until(`${r.name} to finish`, () => {
    scanHostArgv();
    return runners().find((x) => x.name === r.name)?.state === 'deleted';
  });
  assert.equal((await d.post('workflow_job', workflowJob('completed', id, [label], r.name))).status, 202);
  return r.name;
}

describe('the production runner image, booted and serving jobs', () => {
  const taken = new Set();
  const served = {}; // by arch: the cold runners of the podman test
  let fromTemplate = null; // the runner restored from the s390x template
  before(async () => {
    await fetch(`${api}/__double/log`, { method: 'DELETE' });
    // Its pools are on the user network: hatcheryd starts their guests only with the
    // guest firewall in place, as on a real host.
    const applied = spawnSync(firewall, ['apply', '--group', QEMU_GID], { encoding: 'utf8' });
    assert.equal(applied.status, 0, applied.stderr);
    await d.start();
  });
  after(async () => {
    spawnSync(firewall, ['remove', '--group', QEMU_GID]);
    const { code } = await d.stop();
    spawnSync('virsh', ['-c', 'qemu:///system', 'pool-destroy', storagePool]);
    // The templates' disks and memory files (about 240 MB) are kept by design in the pool's
    // directory: the test's to remove, or every run leaves them in /tmp.
    rmSync(`/tmp/${storagePool}`, { recursive: true, force: true });
    d.cleanup();
    assert.equal(code, 0);
  });

  test('the images carry their manifests, and hatcheryd shows them', () => {
    for (const arch of ['ppc64le', 's390x']) {
      const m = JSON.parse(readFileSync(`${image[arch]}.json`, 'utf8'));
      assert.equal(m.arch, arch);
      assert.equal(m.debian, 'bookworm');
      assert.match(m.kernel_version, /^6\.1\./);
      assert.match(m.sha256, /^[0-9a-f]{64}$/);
      const sha = spawnSync('sha256sum', [image[arch]], { encoding: 'utf8' }).stdout.split(' ')[0];
      assert.equal(sha, m.sha256, 'the manifest names this qcow2');
      assert.match(m.preloaded, new RegExp(`hatchery-preload-test:${arch}`));
      const p = d.cliJson('pools').pools.find((x) => x.name === `prod-${arch}`);
      assert.equal(p.image_manifest?.arch, arch);
      assert.equal(p.image_manifest?.sha256, m.sha256);
    }
  });

  // First, while the template is fresh: a clone restored 5 minutes after its template was
  // saved once gave no hello within 20 s in a full run here, and one restored 0.7 s after
  // the save none within 60 s in a loaded CI run (not understood yet; see
  // docs/LIBVIRT-HERE.md): its job was served by a cold runner instead.
  test('an s390x job from a warm template of the production image: restored, reseeded, its job built with podman', { timeout: 3000000 }, async () => {
    const tpl = 'hatchery-tpl-it-prod-s390x-tpl-0';
    const ready = await until('the production s390x template', () =>
      d.cliJson('hosts').hosts.find((h) => h.name === 'local').templates.find((t) => t.name === tpl && t.state === 'ready'));
    console.log(`production s390x template: ${(ready.file_bytes / 1e6).toFixed(0)} MB`);
    await setJit(JIT);
    const restored = (n) => new RegExp(`event=template\\.restored guest=${n} template=${tpl}`).test(d.logs);
    let name = await serve('s390x', null, taken, { label: 'linux.s390x.prod.tpl', poolName: 'prod-s390x-tpl' });
    if (!restored(name)) {
      // The open finding of docs/LIBVIRT-HERE.md: a first clone that gives no hello (seen
      // again in a loaded CI run, restored 0.7 s after the save). The product's answer
      // is the designed one: that runner fails before any config, the template is broken
      // and rebuilt, the job is served cold. Only that failure is let through, once: the
      // next job must come from a clone of the rebuilt template.
      assert.match(d.logs, new RegExp(`event=template\\.broken template=${tpl} .*reason="no hello from the restored agent`),
        d.logs.split('\n').filter((l) => l.includes(name) || l.includes('template')).join('\n'));
      console.log(`production s390x template: its first clone gave no hello (the open finding); ${name} served the job cold; serving the next from the rebuilt template`);
      await until('the rebuilt production s390x template', () =>
        d.cliJson('hosts').hosts.find((h) => h.name === 'local').templates.find((t) => t.name === tpl && t.state === 'ready'));
      await setJit(JIT);
      name = await serve('s390x', null, taken, { label: 'linux.s390x.prod.tpl', poolName: 'prod-s390x-tpl' });
    }
    assert.ok(restored(name),
      d.logs.split('\n').filter((l) => l.includes(name) || l.includes('template')).join('\n'));
    const r = runners().find((x) => x.name === name);
    assert.equal(r.exit_code, 0, `${name}: ${r.reason}`);
    const rep = report(name);
    assert.ok(rep, `${name}: a job report in its log\n${d.cli('logs', name).stdout.slice(-3000)}`);
    assert.equal(rep.result, 'succeeded', `${JSON.stringify(rep)}\n${d.cli('logs', name).stdout.slice(-4000)}`);
    assert.equal(rep.uid, 1000);
    assert.equal(rep.output, 'hatchery-hello: built in a container on s390x (big-endian)');
    // The clone took an identity of its own: not the template's machine-id.
    const built = new RegExp(`event=guest\\.hello guest=${tpl} .*machine_id=(\\S+)`).exec(d.logs);
    assert.ok(built, 'the template said hello when it was built');
    assert.notEqual(hello(name).machine, built[1]);
    assert.match(d.cli('logs', name).stdout, /restored: reseeded, new machine-id and nonce, hello sent again/);
    assert.ok(!volumes().includes(name), 'overlay deleted');
    assert.deepEqual([...hostArgvLeaks], []);
    fromTemplate = name;
  });

  test('a ppc64le and an s390x job, each built with podman inside its guest', { timeout: 3000000 }, async () => {
    const t0 = Date.now();
    await setJit(JIT);
    const [ppc, z] = await Promise.all([serve('ppc64le', null, taken), serve('s390x', null, taken)]);
    served.ppc64le = ppc;
    served.s390x = z;
    console.log(`both jobs served in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
    for (const [arch, name] of Object.entries(served)) {
      const r = runners().find((x) => x.name === name);
      assert.equal(r.exit_code, 0, `${name}: ${r.reason}`);
      const rep = report(name);
      assert.ok(rep, `${name}: a job report in its log\n${d.cli('logs', name).stdout.slice(-3000)}`);
      assert.equal(rep.result, 'succeeded', `${JSON.stringify(rep)}\n${d.cli('logs', name).stdout.slice(-4000)}`);
      assert.notEqual(rep.uid, 0, 'the runner is not root');
      assert.equal(rep.uid, 1000);
      assert.match(rep.image_digest, /^sha256:[0-9a-f]{64}$/, 'an image was built in the guest');
      const order = arch === 'ppc64le' ? 'little-endian' : 'big-endian';
      assert.equal(rep.output, `hatchery-hello: built in a container on ${arch} (${order})`);
      assert.match(rep.preloaded, new RegExp(`localhost/hatchery-preload-test:${arch}`), 'preloaded, not pulled');
      // The agent looked for the JIT config on every command line in the guest.
      assert.match(d.logs, new RegExp(`event=guest\\.runner_exited guest=${name} code=0 .*jit_on_argv=0 argv_scans=[1-9]`));
      const log = d.cli('logs', name).stdout;
      // systemd started the unit, and the agent's lines reach the console through the
      // journal (identifier[pid]:), as a unit's do.
      assert.ok(/Started .*hatchery-agent\.ser/.test(log), `${name}: systemd started hatchery-agent.service`);
      assert.ok(/hatchery-agent\[\d+\]: hatchery-agent: hello sent/.test(log), `${name}: the agent's hello, through the journal`);
      assert.ok(!log.includes(JIT), 'no JIT config in the console');
      assert.ok(!domains().includes(name), 'domain gone');
      assert.ok(!volumes().includes(name), 'overlay deleted');
    }
    assert.deepEqual([...hostArgvLeaks], [], 'the JIT config on a host argv');
    assert.ok(!d.logs.includes(JIT), 'no JIT config in hatcheryd\'s log');
  });

  test('a hostile job on the production image reaches the outside, and nothing of its host (guest-firewall.sh)', { timeout: 1800000 }, async () => {
    // The stand-in's hostile job (job/probe.sh, as uid 1000) instead of the podman build.
    const { targets, guarded, close } = await isolationTargets(d.port);
    try {
      const name = await serve('ppc64le', `${JIT} probe=${targets.join('+')}`, taken);
      const rep = report(name);
      assert.ok(rep, `${name}: a job report in its log\n${d.cli('logs', name).stdout.slice(-3000)}`);
      assert.equal(rep.uid, 1000);
      assert.deepEqual(rep.probes, guarded);
      console.log(`production image, isolation probes with guest-firewall.sh: ${JSON.stringify(rep.probes)}`);
    } finally {
      close();
      await setJit(JIT);
    }
  });

  test('two guests from one image have different machine-ids and boot ids', { timeout: 1800000 }, async () => {
    // A second ppc64le runner whose stand-in returns at once (exit=0): only its identity
    // matters here.
    const second = await serve('ppc64le', `${JIT} exit=0`, taken);
    const a = hello(served.ppc64le);
    const b = hello(second);
    assert.ok(a && b, 'both said hello');
    assert.match(a.machine, /^[0-9a-f]{32}$/);
    assert.match(b.machine, /^[0-9a-f]{32}$/);
    assert.notEqual(a.machine, b.machine);
    assert.notEqual(a.boot, b.boot);
    assert.deepEqual([...hostArgvLeaks], []);
  });

  test('create to hello: the production image beside the busybox test guest, in this run', { timeout: 600000 }, async () => {
    const t = await serve('ppc64le', 'sleep=1 exit=0', taken, { label: 'linux.ppc64le.test', poolName: 'test-ppc64le' });
    const rows = [
      ['production ppc64le (Debian, systemd, SLOF)', createToHello(served.ppc64le)],
      ['production s390x (Debian, systemd)', createToHello(served.s390x)],
      ['test guest ppc64le (busybox initramfs, SLOF)', createToHello(t)],
      ...(fromTemplate ? [['production s390x from its warm template (restore)', createToHello(fromTemplate)]] : []),
    ];
    for (const [what, s] of rows) {
      assert.ok(Number.isFinite(s) && s > 0, `${what}: ${s}`);
      console.log(`create to hello: ${what}: ${s.toFixed(1)} s`);
    }
    console.log(`ratio production/test (ppc64le): ${(rows[0][1] / rows[2][1]).toFixed(1)}`);
    if (rows[3]) console.log(`ratio production s390x, template/cold: ${(rows[3][1] / rows[1][1]).toFixed(3)} (goal <= 0.2)`);
  });
});
