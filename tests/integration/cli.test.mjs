// The hatchery CLI against a running daemon (tables and --json), against no daemon, and
// systemd's notify protocol.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { appendFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { Daemon, HATCHERY_CLI, examples, request, tempDir } from './lib/daemon.mjs';

// One request to the admin socket as a script would send it, without the CLI: its answer.
const askAdmin = (socket, req) => new Promise((resolve, reject) => {
  const c = net.connect(socket);
  let text = '';
  c.on('data', (b) => { text += b; });
  c.on('end', () => resolve(JSON.parse(text)));
  c.on('error', reject);
  c.end(`${JSON.stringify(req)}\n`);
});

describe('hatchery CLI', () => {
  const d = new Daemon();
  before(async () => {
    await d.start();
    for (const [i, labels] of [['linux.ppc64le'], ['linux.ppc64le'], ['linux.s390x'], ['windows']].entries()) {
      const payload = structuredClone(examples('workflow_job')[5]);
      payload.workflow_job.id = 3000000000 + i;
      payload.workflow_job.labels = labels;
      assert.equal((await d.post('workflow_job', payload)).status, 202);
    }
  });
  after(async () => {
    const { code } = await d.stop();
    d.cleanup();
    assert.equal(code, 0);
  });

  test('capacity shows per pool the max, runners and queued jobs, and the unmatched', () => {
    const r = d.cli('capacity');
    assert.equal(r.code, 0, r.stderr);
    const rows = r.stdout.trim().split('\n').map((l) => l.split(/\s+/));
    assert.deepEqual(rows[0], ['POOL', 'ARCH', 'MAX', 'MIN_IDLE', 'RUNNERS', 'QUEUED', 'IN_PROGRESS', 'WAITING', 'WHY_QUEUED_JOBS_WAIT']);
    assert.deepEqual(rows.find((x) => x[0] === 'linux.ppc64le').slice(0, 8), ['linux.ppc64le', 'ppc64le', '2', '0', '0', '2', '0', '0']);
    assert.deepEqual(rows.find((x) => x[0] === 'linux.s390x').slice(0, 8), ['linux.s390x', 's390x', '1', '0', '0', '1', '0', '0']);
    assert.deepEqual(rows.find((x) => x[0] === '(unmatched)').slice(5), ['1', '0', '0', 'no', 'matching', 'pool']);
    // Without a github section no runner can register: the reason says so.
    assert.match(r.stdout, /^linux\.ppc64le .* GitHub is not configured$/m);
    const json = d.cliJson('capacity');
    assert.equal(json.pools.find((p) => p.pool === 'linux.ppc64le').jobs.queued, 2);
    // The log says whose job matched no pool, and with which labels.
    assert.match(d.logs, /event=webhook\.stored .*job=3000000003 status=queued pool=\(unmatched\) repo=Codertocat\/Hello-World labels="\[\\"windows\\"\]"/);
    assert.match(d.logs, /event=webhook\.stored .*job=3000000000 status=queued pool=linux\.ppc64le repo=Codertocat\/Hello-World\n/);
  });

  test('jobs lists them, filters by status, and --json carries 64-bit ids', () => {
    const r = d.cli('jobs');
    assert.equal(r.code, 0);
    assert.match(r.stdout, /^JOB\s+STATUS\s+POOL\s+REPOSITORY\s+RUN\s+LABELS\s+RUNNER\s+UPDATED\s+WHY_IT_WAITS$/m);
    assert.match(r.stdout, /3000000003\s+queued\s+\(unmatched\)/);
    // The column the help promises: why each queued job waits (it was built and dropped).
    assert.match(r.stdout, /^3000000003 .* no matching pool$/m);
    assert.match(r.stdout, /^3000000000 .*linux\.ppc64le.* GitHub is not configured$/m);
    const queued = d.cliJson('jobs', '--status', 'queued').jobs;
    assert.equal(queued.length, 4);
    assert.ok(queued.some((j) => j.id === 3000000002 && j.pool === 'linux.s390x'));
    assert.equal(d.cliJson('jobs', '--status', 'completed').jobs.length, 0);
    // A status that does not exist is a usage error, said in one line, before any daemon.
    const bad = d.cli('jobs', '--status', 'sleeping');
    assert.equal(bad.code, 2);
    assert.equal(bad.stderr, "hatchery: jobs: --status must be waiting, queued, in_progress or completed, not 'sleeping' (hatchery --help)\n");
  });

  test('options go anywhere on the line, as --opt value or --opt=value; a usage error is one line and exit 2', () => {
    const run = (...args) => spawnSync(HATCHERY_CLI, args, { encoding: 'utf8' });
    // The same answer whichever way the options come.
    const base = run('--socket', d.socket, '--json', 'jobs', '--status', 'queued');
    assert.equal(base.status, 0, base.stderr);
    for (const args of [
      ['jobs', '--status=queued', '--json', `--socket=${d.socket}`],
      ['jobs', '--json', '--socket', d.socket, '--status', 'queued'],
    ]) {
      const r = run(...args);
      assert.equal(r.status, 0, `${args.join(' ')}: ${r.stderr}`);
      assert.deepEqual(JSON.parse(r.stdout).jobs.map((j) => j.id), JSON.parse(base.stdout).jobs.map((j) => j.id));
    }
    assert.equal(run('health', '--socket', d.socket).status, 0);
    assert.equal(run('runners', '--pool=linux.ppc64le', '--all', `--socket=${d.socket}`).status, 0);
    // Usage errors: exit 2, one line naming what is wrong and where the help is.
    for (const [args, said] of [
      [['--bogus', 'jobs'], 'hatchery: unknown option --bogus (hatchery --help)\n'],
      [['jobs', '--status'], 'hatchery: --status needs a value (hatchery --help)\n'],
      [['pools', '--status', 'queued'], 'hatchery: pools takes no --status (hatchery --help)\n'],
      [['drain'], 'hatchery: drain needs a HOST (hatchery --help)\n'],
      [['drain', 'a', 'b'], 'hatchery: drain: unexpected argument b (hatchery --help)\n'],
      [['runners', 'show'], 'hatchery: runners show needs a RUNNER (hatchery --help)\n'],
      [['frobnicate'], "hatchery: unknown command 'frobnicate' (hatchery --help)\n"],
      [[], 'hatchery: which command? (hatchery --help)\n'],
      [['jobs', '--limit', '0'], 'hatchery: --limit takes 1..10000 (hatchery --help)\n'],
    ]) {
      const r = run('--socket', d.socket, ...args);
      assert.equal(r.status, 2, `${args.join(' ')}: exit ${r.status}`);
      assert.equal(r.stderr, said, args.join(' '));
      assert.equal(r.stdout, '');
    }
  });

  test('pools lists the configuration', () => {
    const pools = d.cliJson('pools').pools;
    assert.deepEqual(pools.map((p) => p.name), ['linux.ppc64le', 'linux.s390x', 'k8s']);
    assert.match(d.cli('pools').stdout, /linux\.s390x\s+s390x\s+vm/);
    // No image here: each VM pool says why its image cannot be used, and the start said so.
    assert.match(pools[0].image_error, /ppc64le\.qcow2\.json: missing/);
    assert.match(d.cli('pools').stdout, /error: image manifest \/var\/lib\/hatchery\/images\/ppc64le\.qcow2\.json: missing/);
    assert.match(d.logs, /level=warn event=image\.manifest_unreadable pool=linux\.ppc64le/);
  });

  test('values from GitHub cannot drive the operator\'s terminal: control characters print as ?', async () => {
    const payload = structuredClone(examples('workflow_job')[5]);
    payload.workflow_job.id = 3000000099;
    payload.workflow_job.labels = ['evil\u001b[2J\u001b[31mred\u0007', 'c1\u009bx'];
    assert.equal((await d.post('workflow_job', payload)).status, 202);
    const out = d.cli('jobs').stdout;
    assert.match(out, /evil\?\[2J\?\[31mred\?,c1\?x/);
    assert.ok(!/[\u0000-\u0008\u000b-\u001f\u007f\u0080-\u009f]/.test(out), JSON.stringify(out));
    // --json gives the exact value, escaped by JSON.
    assert.ok(d.cliJson('jobs').jobs.find((j) => j.id === 3000000099).labels.includes('evil\u001b[2J\u001b[31mred\u0007'));
  });

  test('logs reads a console log across the files virtlogd rolled it into, oldest first', () => {
    const logs = join(d.dir, 'state', 'logs');
    mkdirSync(logs, { recursive: true });
    const base = join(logs, 'hatchery-it-rolled.console.log');
    writeFileSync(`${base}.1`, 'boot: oldest\n');
    writeFileSync(`${base}.0`, 'agent: hello sent\n');
    writeFileSync(base, 'agent: the controller has the exit\n');
    const r = d.cli('logs', 'hatchery-it-rolled');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'boot: oldest\nagent: hello sent\nagent: the controller has the exit');
    // Past LOGS_MAX_BYTES only the end is read, from wherever it starts.
    writeFileSync(`${base}.1`, 'x'.repeat(2 * 1024 * 1024));
    const tail = d.cliJson('logs', 'hatchery-it-rolled');
    assert.equal(tail.truncated, true);
    assert.equal(tail.log.length, 1024 * 1024);
    assert.ok(tail.log.endsWith('agent: hello sent\nagent: the controller has the exit\n'));
    assert.equal(d.cli('logs', 'hatchery-it-missing').code, 1);
  });

  test('--version names the same version as hatcheryd and its /healthz, without a daemon', async () => {
    const cli = spawnSync(HATCHERY_CLI, ['--version'], { encoding: 'utf8', env: { ...process.env, HATCHERY_SOCKET: '/nonexistent' } });
    assert.equal(cli.status, 0);
    const [, version] = /^hatchery (\d+\.\d+\.\d+)\n$/.exec(cli.stdout) ?? [];
    assert.ok(version, cli.stdout);
    assert.equal(spawnSync(process.env.HATCHERYD, ['--version'], { encoding: 'utf8' }).stdout.trim(), `hatcheryd ${version}`);
    assert.equal(JSON.parse((await request(d.port, { path: '/healthz' })).body).version, version);
  });

  test('bash completion: commands, options, and host and pool names from the running daemon', () => {
    const completion = new URL('../../deploy/completion/hatchery.bash', import.meta.url).pathname;
    const complete = (...words) => {
      const script = `source ${completion}
COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}
_hatchery; printf '%s\\n' "\${COMPREPLY[@]}"`;
      const r = spawnSync('bash', ['-c', script], { encoding: 'utf8', env: { ...process.env, PATH: `${dirname(HATCHERY_CLI)}:${process.env.PATH}` } });
      assert.equal(r.status, 0, r.stderr);
      return r.stdout.split('\n').filter(Boolean).sort();
    };
    assert.deepEqual(complete('hatchery', 'dr'), ['drain']);
    assert.deepEqual(complete('hatchery', '--socket', d.socket, 'run'), ['runners']);
    assert.deepEqual(complete('hatchery', '--socket', d.socket, 'drain', ''), ['--json', 'host-a']);
    assert.deepEqual(complete('hatchery', '--socket', d.socket, 'runners', '--pool', 'linux.'), ['linux.ppc64le', 'linux.s390x']);
    assert.deepEqual(complete('hatchery', 'jobs', '--status', 'q'), ['queued']);
    // No daemon: no names, and no error on the terminal.
    assert.deepEqual(complete('hatchery', '--socket', '/nonexistent', 'drain', 'h'), []);
  });

  test('-o name, -o wide, -o json and --no-headers: for scripts and for people', () => {
    // The names alone, one a line: hosts from the host table only (no header, no template).
    assert.equal(d.cli('hosts', '-o', 'name').stdout, 'host-a\n');
    assert.equal(d.cli('-o', 'name', 'pools').stdout.split('\n').filter(Boolean).sort().join(' '),
      d.cliJson('pools').pools.map((p) => p.name).sort().join(' '));
    assert.deepEqual(d.cli('jobs', '--output=name').stdout.split('\n').filter(Boolean).sort(),
      d.jobs().map((j) => String(j.id)).sort());
    // Wide: more columns than the table; no headers: the same rows without the header line.
    const table = d.cli('jobs').stdout.split('\n');
    assert.match(table[0], /^JOB +STATUS .*WHY_IT_WAITS$/);
    assert.match(d.cli('jobs', '-o', 'wide').stdout.split('\n')[0], /WHY_IT_WAITS +QUEUED +STARTED$/);
    assert.match(d.cli('runners', '-o', 'wide', '--all').stdout.split('\n')[0], /REASON +GITHUB_ID +ONLINE +BUSY +FINISHED$/);
    // (Ages tick between the two calls, and may widen their column: compared without them.)
    const ageless = (lines) => lines.map((l) => l.replace(/\b\d+[smhd]\b/g, 'AGE').replace(/ +/g, ' '));
    assert.deepEqual(ageless(d.cli('jobs', '--no-headers').stdout.split('\n')), ageless(table.slice(1)));
    // -o json is --json.
    assert.deepEqual(JSON.parse(d.cli('-o', 'json', 'hosts').stdout), d.cliJson('hosts'));
    // Bad: an unknown format, and a format a command that is not a listing has no use for.
    for (const [args, err] of [
      [['-o', 'yaml', 'jobs'], "hatchery: -o takes table, wide, name or json, not 'yaml' (hatchery --help)\n"],
      [['health', '-o', 'name'], 'hatchery: health takes no -o name (only the listings jobs, pools, hosts and runners) (hatchery --help)\n'],
      [['capacity', '--no-headers'], 'hatchery: capacity takes no --no-headers (only the listings jobs, pools, hosts and runners) (hatchery --help)\n'],
      [['logs', 'x', '-f', '--json'], 'hatchery: logs: -f prints the log as it comes, not as JSON (hatchery --help)\n'],
    ]) {
      const r = d.cli(...args);
      assert.equal(r.code, 2, args.join(' '));
      assert.equal(r.stderr, err);
    }
  });

  test('logs -f prints the log and what it gains, and ends once the runner has ended', async () => {
    // A runner of this controller's that ended long ago, whose console log is still kept.
    const name = 'hatchery-it-linux-ppc64le-9';
    const log = join(d.dir, 'state', 'logs', `${name}.console.log`);
    mkdirSync(dirname(log), { recursive: true });
    writeFileSync(log, 'booted\r\nfirst line\n');
    const p = spawn(HATCHERY_CLI, ['--socket', d.socket, 'logs', '-f', name], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const exited = new Promise((resolve) => p.on('exit', (code) => resolve(code)));
    await new Promise((resolve) => p.stdout.on('data', (b) => { out += b; if (out.includes('first line')) resolve(); }));
    // Within the second before it asks again: what the log gains is printed too.
    appendFileSync(log, 'second line\n');
    assert.equal(await exited, 0);
    assert.equal(out, 'booted\nfirst line\nsecond line\n');
    // The admin API's part: bytes after an offset of the whole log, and where it ends.
    const ask = (req) => askAdmin(d.socket, req);
    const tail = await ask({ cmd: 'logs', runner: name, since: 17 });
    assert.equal(tail.log, 'e\nsecond line\n');
    assert.equal(tail.end, 31);
    assert.equal(tail.live, false);
    assert.equal((await ask({ cmd: 'logs', runner: name, since: 31 })).log, '');
    assert.deepEqual(await ask({ cmd: 'logs', runner: name, since: -1 }), { ok: false, error: 'since must be a byte offset' });
    assert.equal((await ask({ cmd: 'logs', runner: name, since: 1000 })).log, '', 'a log that shrank: nothing new');
  });

  test('delete --force: what is left of a runner that ended or is unknown, idempotently', async () => {
    const name = 'hatchery-it-linux-ppc64le-77';
    const plain = d.cli('delete', name);
    assert.equal(plain.code, 1);
    assert.match(plain.stderr, /no such live runner \(one that ended or is unknown here: delete --force removes what is left of it\)/);
    for (let i = 0; i < 2; i++) {
      const forced = JSON.parse(d.cli('--json', 'delete', '--force', name).stdout);
      assert.deepEqual(forced, { ok: true, runner: name, forced: true, hosts_asked: 1 });
    }
    await d.until('the purge logged', () => new RegExp(`event=runner\\.purge runner=${name} hosts=1`).test(d.logs), { ms: 10000 });
    // Never a name of another controller's, or one a path could be made of.
    for (const bad of ['hatchery-other-x-1', 'hatchery-it-../../etc', 'runner']) {
      const r = d.cli('delete', '--force', bad);
      assert.equal(r.code, 1, bad);
      assert.match(r.stderr, /not a runner name of this controller/);
    }
  });

  test('rotate: idle runners of a replaced image; a pool that is not configured is refused', () => {
    // This daemon makes no runner (no GitHub): nothing to retire, said so.
    let r = d.cli('rotate');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'no idle runner of a replaced image\n');
    assert.deepEqual(JSON.parse(d.cli('--json', 'rotate', '--pool', 'linux.ppc64le').stdout), { ok: true, retired: [] });
    r = d.cli('rotate', '--pool=nosuch');
    assert.equal(r.code, 1);
    assert.match(r.stderr, /no such pool/);
    r = d.cli('rotate', 'linux.ppc64le');
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^hatchery: rotate: unexpected argument linux.ppc64le \(hatchery --help\)\n$/);
    assert.equal(d.cli('rotate', '--all').code, 2);
  });

  test('usage errors exit 2', () => {
    assert.equal(d.cli('frobnicate').code, 2);
    assert.equal(d.cli('jobs', '--limit', 'lots').code, 2);
    assert.equal(spawnSync(HATCHERY_CLI, [], { encoding: 'utf8' }).status, 2);
  });

  test('the admin socket is mode 0660', () => {
    const st = spawnSync('stat', ['-c', '%a', d.socket], { encoding: 'utf8' });
    assert.equal(st.stdout.trim(), '660');
  });

  test('hatcheryd can leave no core file (no secret in one): its core size limit is 0', () => {
    const limits = readFileSync(`/proc/${d.proc.pid}/limits`, 'utf8');
    assert.match(limits, /^Max core file size\s+0\s+0\s+bytes/m);
  });
});

test('--help names every command docs/RUNNING.md documents', () => {
  const r = spawnSync(HATCHERY_CLI, ['--help'], { encoding: 'utf8' });
  assert.equal(r.status, 0);
  const reference = readFileSync(new URL('../../docs/RUNNING.md', import.meta.url), 'utf8');
  const block = /hatchery \[--socket PATH\] \[--json \| -o FORMAT\] \[--no-headers\] COMMAND \[ARGS\]\n([\s\S]*?)```/.exec(reference)[1];
  const documented = [...block.matchAll(/^ {2}([a-z-]+)/gm)].map((m) => m[1]);
  assert.ok(documented.length >= 10, `documented commands: ${documented}`);
  for (const cmd of [...documented, 'undrain']) assert.match(r.stdout, new RegExp(`\\b${cmd}\\b`), `--help lacks ${cmd}`);
  // ...and the reference documents every command --help offers.
  const offered = [...r.stdout.matchAll(/^ {2}([a-z][a-z-]*)/gm)].map((m) => m[1]);
  for (const cmd of offered) assert.ok(documented.includes(cmd) || cmd === 'undrain', `docs/RUNNING.md lacks ${cmd}`);
  // And each is a command the CLI accepts: without a daemon it fails to connect (3), not on
  // usage (2); image-check needs no daemon, and says what it lacks (its own 3, bad input).
  const offline = spawnSync(HATCHERY_CLI, ['--socket', '/nonexistent/admin.sock', 'image-check'], { encoding: 'utf8' });
  assert.equal(offline.status, 3);
  assert.match(offline.stderr, /usage: hatchery image-check IMAGE RELEASES/);
  for (const cmd of documented.filter((c) => c !== 'image-check')) {
    const args = ['drain', 'undrain', 'delete', 'logs'].includes(cmd) ? [cmd, 'x'] : [cmd];
    const c = spawnSync(HATCHERY_CLI, ['--socket', '/nonexistent/admin.sock', ...args], { encoding: 'utf8' });
    assert.equal(c.status, 3, `${cmd}: ${c.stderr}`);
  }
});

// The man pages (made by pandoc from the documentation's sections, docs/man/) as man shows them.
function manPage(page) {
  const file = join(process.env.HATCHERY_MAN_DIR, page);
  const r = spawnSync('man', ['-l', file], { encoding: 'utf8', env: { ...process.env, MANWIDTH: '100', MANPAGER: 'cat', LC_ALL: 'C.UTF-8' } });
  assert.equal(r.status, 0, `man -l ${file}: ${r.stderr}`);
  return r.stdout;
}

test('hatchery(1) names every command and option of --help; hatcheryd(8) every option of its own', () => {
  const cli = manPage('hatchery.1');
  assert.match(cli, /^NAME\n\s+hatchery - /m);
  const help = spawnSync(HATCHERY_CLI, ['--help'], { encoding: 'utf8' }).stdout;
  const commands = [...help.matchAll(/^ {2}([a-z]+)\b/gm)].map((m) => m[1]);
  const options = [...new Set([...help.matchAll(/(--[a-z-]+)/g)].map((m) => m[1]))];
  assert.ok(commands.length >= 10 && options.length >= 5, `parsed from --help: ${commands} ${options}`);
  for (const word of [...commands, ...options]) {
    assert.match(cli, new RegExp(`(^|[^a-z-])${word}([^a-z-]|$)`, 'm'), `hatchery(1) lacks ${word}`);
  }
  const daemon = manPage('hatcheryd.8');
  const dhelp = spawnSync(process.env.HATCHERYD, ['--help'], { encoding: 'utf8' });
  const doptions = [...new Set([...`${dhelp.stdout}${dhelp.stderr}`.matchAll(/(--[a-z-]+|-[a-zA-Z]\b)/g)].map((m) => m[1]))];
  assert.ok(doptions.length >= 6, `parsed from hatcheryd --help: ${doptions}`);
  for (const option of doptions) assert.ok(daemon.includes(option), `hatcheryd(8) lacks ${option}`);
  // The sections it is made of, and no raw markdown left in it.
  for (const heading of ['HTTP endpoints', 'Logs', 'Metrics']) assert.match(daemon, new RegExp(`^ *${heading}$`, 'm'));
  // Each cross-reference resolves: `see "X"` names a section or paragraph of the same
  // page, or says which of our pages has it (`see "X" in hatchery-build-image(8)`).
  const pages = { 'hatchery(1)': cli, 'hatcheryd(8)': daemon, 'hatchery.yaml(5)': manPage('hatchery.yaml.5'), 'hatchery-build-image(8)': manPage('hatchery-build-image.8') };
  for (const [name, page] of Object.entries(pages)) {
    const flat = page.replace(/\s+/g, ' ');
    for (const [, title, other] of flat.matchAll(/[sS]ee "([^"]+)"(?: in ([a-z.-]+\([1-8]\)))?/g)) {
      const home = other ? pages[other] : page;
      assert.ok(home, `${name}: see "${title}" in ${other}: no such page`);
      const found = home.replace(/\s+/g, ' ').split(title).length - 1 - (other ? 0 : 1);
      assert.ok(found >= 1, `${name}: see "${title}"${other ? ` in ${other}` : ''}: not there`);
    }
  }
  // Paths as an installed system has them: a checkout's path that the package installs
  // elsewhere is given where it is installed (the package test checks that each such path
  // exists), and one only a checkout has says so.
  // (man breaks a line after a hyphen inside a path: joined again here)
  const unwrapped = (page) => page.replace(/-\n\s+/g, '-').replace(/\s+/g, ' ');
  for (const [name, page] of Object.entries(pages)) {
    const flat = unwrapped(page);
    for (const path of ['deploy/guest-firewall.sh', 'deploy/hatchery.example.yaml', 'deploy/monitoring/', 'docs/OPERATIONS.md', 'images/enable-binfmt.sh'])
      assert.ok(!flat.includes(path), `${name} names ${path}, a checkout's path`);
    for (const m of flat.matchAll(/(\S+ \S+ )?(?<![\w/.-])((?:deploy|docs|tests|controller|debian|include)\/[\w./-]+)/g))
      assert.match(m[1] ?? '', /source tree's $/, `${name}: ${m[2]} is not said to be the source tree's`);
  }
  assert.ok(unwrapped(pages['hatchery.yaml(5)']).includes('/usr/lib/hatchery/guest-firewall.sh'), 'hatchery.yaml(5) names the installed guest-firewall.sh');
  // Each section once: a section listed beside the one it is part of came twice.
  for (const page of [cli, daemon, manPage('hatchery.yaml.5')]) {
    const headings = [...page.matchAll(/^( {0,3})([A-Z][^\n]*)$/gm)].map((m) => m[1] + m[2]);
    const twice = headings.filter((h, i) => headings.indexOf(h) !== i);
    assert.deepEqual(twice, [], `headings twice: ${twice}`);
  }
  assert.doesNotMatch(daemon, /\]\(|^#+ /m);
  // The check can fail: a command the page does not have is found missing.
  assert.doesNotMatch(cli, /(^|[^a-z-])frobnicate([^a-z-]|$)/m);
});

test('a daemon that hangs up: a clear message and exit status 3, never death by SIGPIPE', async () => {
  const dir = tempDir();
  const sock = join(dir, 'slam.sock');
  const server = net.createServer((c) => c.destroy());
  await new Promise((r) => server.listen(sock, r));
  try {
    // The hang-up may come before the request is written (EPIPE) or after (no answer):
    // each run must end the same way.
    for (let i = 0; i < 20; i++) {
      const r = await new Promise((resolve) => {
        const p = spawn(HATCHERY_CLI, ['--socket', sock, 'jobs'], { stdio: ['ignore', 'pipe', 'pipe'] });
        let stderr = '';
        p.stderr.on('data', (b) => { stderr += b; });
        p.on('exit', (code, signal) => resolve({ code, signal, stderr }));
      });
      assert.equal(r.signal, null, 'not killed by a signal');
      assert.equal(r.code, 3, r.stderr);
      assert.match(r.stderr, /the daemon closed the connection/);
    }
  } finally {
    server.close();
  }
});

test('no daemon: a clear message and exit status 3', () => {
  const r = spawnSync(HATCHERY_CLI, ['--socket', '/nonexistent/admin.sock', 'capacity'], { encoding: 'utf8' });
  assert.equal(r.status, 3);
  assert.match(r.stderr, /cannot reach hatcheryd at \/nonexistent\/admin.sock/);
  assert.match(r.stderr, /is the daemon running\?/);
  assert.equal(r.stdout, '');
  // Under --json the error is JSON too, with the exit status in it.
  const j = spawnSync(HATCHERY_CLI, ['--socket', '/nonexistent/admin.sock', '--json', 'capacity'], { encoding: 'utf8' });
  assert.equal(j.status, 3);
  assert.deepEqual(JSON.parse(j.stdout), { ok: false, error: 'cannot reach hatcheryd at /nonexistent/admin.sock: No such file or directory', exit: 3 });
});

test('systemd: READY=1 once listening, WATCHDOG=1 pings, STOPPING=1 on SIGTERM', async () => {
  const dir = tempDir();
  const sock = join(dir, 'notify.sock');
  // A datagram listener, as systemd would hold it.
  const listener = spawn('python3', ['-u', '-c', `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("LISTENING", flush=True)
while True:
    print(s.recv(4096).decode(), flush=True)
`, sock]);
  let got = '';
  listener.stdout.on('data', (b) => { got += b.toString(); });
  await new Promise((resolve) => { const t = setInterval(() => { if (got.includes('LISTENING')) { clearInterval(t); resolve(); } }, 20); });
  const d = new Daemon({ env: { NOTIFY_SOCKET: sock, WATCHDOG_USEC: '200000' } });
  await d.start();
  await new Promise((r) => setTimeout(r, 600));
  const { code } = await d.stop();
  await new Promise((r) => setTimeout(r, 100));
  listener.kill();
  d.cleanup();
  assert.equal(code, 0);
  assert.match(got, /READY=1/);
  assert.ok((got.match(/WATCHDOG=1/g) ?? []).length >= 3, got);
  assert.match(got, /STOPPING=1/);
});

describe('a pool image with its manifest', () => {
  const dir = tempDir('hatchery-image-');
  const image = join(dir, 'runner-ppc64le.qcow2');
  writeFileSync(image, '');
  writeFileSync(`${image}.json`, JSON.stringify({
    arch: 'ppc64le', debian: 'bookworm', kernel_version: '6.1.0-50-powerpc64le', runner_version: '2.328.0',
    agent_version: '0.2.0', built_at: '2026-11-26T00:00:00Z', sha256: 'a'.repeat(64), preloaded: '',
    boot: { kernel: 'runner-ppc64le.qcow2.kernel', initrd: 'runner-ppc64le.qcow2.initrd', cmdline: 'root=/dev/vda rw console=hvc0' },
  }));
  const d = new Daemon({ pools: `pools:
  - name: p
    labels: [p]
    arch: ppc64le
    image: ${image}
    max_runners: 1
` });
  before(async () => { await d.start(); });
  after(async () => {
    const { code } = await d.stop();
    d.cleanup();
    rmSync(dir, { recursive: true, force: true });
    assert.equal(code, 0);
  });

  test('is shown by pools and /metrics, and a runner below GitHub\'s floor is warned about at start', async () => {
    const p = d.cliJson('pools').pools[0];
    assert.equal(p.image_manifest.runner_version, '2.328.0');
    assert.equal(p.image_manifest.kernel, `${dir}/runner-ppc64le.qcow2.kernel`);
    assert.equal(p.image_error, undefined);
    assert.match(d.cli('pools').stdout, /runner 2\.328\.0, kernel 6\.1\.0-50-powerpc64le, agent 0\.2\.0, built 2026-11-26T00:00:00Z/);
    assert.match(d.logs, /level=warn event=image\.runner_below_floor pool=p runner=2\.328\.0 floor=2\.329\.0/);
    const text = await (await fetch(`http://127.0.0.1:${d.port}/metrics`)).text();
    assert.match(text, /^hatchery_pool_image_info\{pool="p",arch="ppc64le",debian="bookworm",kernel="6\.1\.0-50-powerpc64le",runner="2\.328\.0",agent="0\.2\.0",sha256="a{64}"\} 1$/m);
    assert.equal(spawnSync('promtool', ['check', 'metrics'], { input: text }).status, 0);
  });
});

// Completion asks the daemon for names and takes each answer's "name" fields: a host's
// templates (nested in its row, and printed below the host table by `hatchery hosts`)
// are not hosts. The daemon here has no GitHub and keeps no template, so a socket that
// answers in the admin protocol's shape stands in for one that does; it also records
// what was asked.
test('completion takes host names from the answer, not its templates; each shell completes the same', async () => {
  const dir = tempDir();
  const sock = join(dir, 'admin.sock');
  const asked = [];
  const answers = {
    hosts: { ok: true, hosts: [{ name: 'p10-a', state: 'up', templates: [{ name: 'hatchery-tpl-it-prod-0', pool: 'prod' }] }] },
    runners: { ok: true, runners: [{ name: 'hatchery-it-prod-1' }, { name: 'hatchery-it-prod-2' }] },
    pools: { ok: true, pools: [{ name: 'prod' }, { name: 'pr' }] },
  };
  const server = net.createServer((c) => {
    let text = '';
    c.on('data', (b) => {
      text += b;
      if (!text.includes('\n')) return;
      const req = JSON.parse(text);
      asked.push(req);
      c.end(`${JSON.stringify(answers[req.cmd] ?? { ok: false, error: 'unknown command' })}\n`);
    });
  });
  await new Promise((r) => server.listen(sock, r));
  const env = { ...process.env, PATH: `${dirname(HATCHERY_CLI)}:${process.env.PATH}`, HATCHERY_SOCKET: sock };
  // Each shell's answer for the words typed so far, the last one being completed.
  const run = (cmd, args) => new Promise((resolve) => {
    const p = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', (b) => { out += b; });
    p.stderr.on('data', (b) => { err += b; });
    p.on('exit', (code) => resolve({ code, out, err }));
  });
  const lines = (r) => { assert.equal(r.code, 0, r.err); return r.out.split('\n').filter(Boolean).sort(); };
  const bash = async (...words) => lines(await run('bash', ['-c', `source ${new URL('../../deploy/completion/hatchery.bash', import.meta.url).pathname}
COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}
_hatchery; printf '%s\\n' "\${COMPREPLY[@]}"`]));
  // fish completes a command line as typed; a completion's description follows a tab.
  const fish = async (line) => lines(await run('fish', ['--no-config', '-c', `source ${new URL('../../deploy/completion/hatchery.fish', import.meta.url).pathname}; complete -C'${line}'`])).map((l) => l.split('\t')[0]);
  try {
    for (const [words, want] of [
      [['hatchery', 'drain', ''], ['--json', 'p10-a']],
      [['hatchery', 'runners', 'show', 'hatchery-it-prod-'], ['hatchery-it-prod-1', 'hatchery-it-prod-2']],
      [['hatchery', 'runners', '--pool', 'pr'], ['pr', 'prod']],
      [['hatchery', 'un'], ['undrain']],
      [['hatchery', 'runners', '-o', ''], ['json', 'name', 'table', 'wide']],
      [['hatchery', 'hosts', '--no'], ['--no-headers']],
      [['hatchery', 'logs', 'x', '--f'], ['--follow']],
    ]) {
      assert.deepEqual(await bash(...words), want, `bash: ${words.join(' ')}`);
      assert.deepEqual(await fish(words.join(' ')), want, `fish: ${words.join(' ')}`);
    }
    assert.ok(asked.some((r) => r.cmd === 'runners' && r.all === true), 'runner names include ended ones');
    // zsh: the script is valid zsh; its candidates are the same `hatchery __complete` lines.
    assert.equal((await run('zsh', ['-n', new URL('../../deploy/completion/_hatchery', import.meta.url).pathname])).code, 0);
    // A file operand: the shells are asked for file names.
    assert.deepEqual(lines(await run(HATCHERY_CLI, ['__complete', 'image-check', ''])), ['--now', '--warn-days', ':files']);
  } finally {
    server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the admin API refuses a key its command does not take, instead of answering for everything', async () => {
  const d = new Daemon();
  await d.start();
  try {
    const ask = (req) => askAdmin(d.socket, req);
    assert.deepEqual(await ask({ cmd: 'runners', pol: 'linux.ppc64le' }), { ok: false, error: 'runners takes no key "pol"' });
    assert.deepEqual(await ask({ cmd: 'health', host: 'x' }), { ok: false, error: 'health takes no key "host"' });
    // Every key a form of the command sends is taken.
    assert.equal((await ask({ cmd: 'runners', all: true, pool: 'linux.ppc64le', host: 'host-a' })).ok, true);
    assert.doesNotMatch((await ask({ cmd: 'runners', all: true, name: 'x' })).error ?? '', /takes no key/);
    assert.equal((await ask({ cmd: 'jobs', status: 'queued', limit: 5 })).ok, true);
  } finally {
    const { code } = await d.stop();
    d.cleanup();
    assert.equal(code, 0);
  }
});
