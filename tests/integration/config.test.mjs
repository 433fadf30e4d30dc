// hatcheryd --check-config and start-up refusals, through the real binary.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, readFileSync, writeFileSync } from 'node:fs';
import { after, describe, test } from 'node:test';
import { HATCHERYD, tempDir, writeConfig } from './lib/daemon.mjs';

function check(file) {
  return spawnSync(HATCHERYD, ['--check-config', file], { encoding: 'utf8' });
}

describe('config', () => {
  const dir = tempDir();
  const good = writeConfig(dir, { port: 18999 });
  const text = readFileSync(good, 'utf8');
  after(() => spawnSync('rm', ['-rf', dir]));

  test('a valid config checks out with exit status 0', () => {
    const r = check(good);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /OK \(1 hosts, 3 pools\)/);
  });

  const cases = [
    ['unknown key', (t) => t + 'colour: blue\n', /:\d+: colour: unknown key/],
    ['bad arch', (t) => t.replace('arch: s390x', 'arch: sparc64'), /:\d+: pools\[1\]\.arch: 'sparc64' is not one of/],
    ['bad number', (t) => t.replace('max_runners: 2', 'max_runners: two'), /:\d+: pools\[0\]\.max_runners: expected an integer/],
    ['negative memory', (t) => t.replace('memory_mib: 32768', 'memory_mib: -5'), /:\d+: hosts\[0\]\.memory_mib: -5 is out of range/],
    ['missing key', (t) => t.replace(/^state_dir: .*$/m, ''), /state_dir: missing required key/],
    ['unknown host', (t) => t.replace('max_runners: 1\n', 'max_runners: 1\n    hosts: [nowhere]\n'), /unknown host 'nowhere'/],
    ['bad listen', (t) => t.replace(/^listen: .*$/m, 'listen: everywhere'), /listen: 'everywhere' is not/],
    ['YAML syntax', (t) => t + 'pools: [\n', /\(yaml\)/],
  ];
  for (const [name, edit, expected] of cases) {
    test(`${name}: exit status 1 and a message with the line`, () => {
      const file = `${dir}/bad.yaml`;
      writeFileSync(file, edit(text));
      const r = check(file);
      assert.equal(r.status, 1, r.stdout + r.stderr);
      assert.match(r.stderr, expected);
      assert.match(r.stderr, /bad\.yaml:\d+: /);
    });
  }

  test('the line number points at the offending key', () => {
    const lines = text.split('\n');
    const at = lines.findIndex((l) => l.includes('arch: ppc64le'));
    lines[at] = '    arch: power';
    const file = `${dir}/line.yaml`;
    writeFileSync(file, lines.join('\n'));
    const r = check(file);
    assert.match(r.stderr, new RegExp(`line\\.yaml:${at + 1}: pools\\[0\\]\\.arch`));
  });

  // Every error in one pass, whatever phase finds it (the parse, the checks between keys,
  // the files' modes, the GitHub credentials), each at its key's line, in line order.
  test('every error of a file at once, each at its line, in order', () => {
    const secret = `${dir}/open-secret`;
    writeFileSync(secret, 'test-webhook-secret\n');
    chmodSync(secret, 0o644);
    const key = `${dir}/open-app.pem`;
    writeFileSync(key, '-----BEGIN RSA PRIVATE KEY-----\n');
    chmodSync(key, 0o644);
    let t = text.replace(/^controller_id: .*\n/m, '')
      .replace(/^listen: .*$/m, 'listen: everywhere')
      .replace(/^webhook_secret_file: .*$/m, `webhook_secret_file: ${secret}`)
      .replace('max_runners: 2', 'max_runners: two');
    t += `max_runner: 3\ngithub:\n  app_id: 1\n  app_private_key_file: ${key}\n  runner_scopes:\n    - repo: pytorch/pytorch\n`;
    const file = `${dir}/all.yaml`;
    writeFileSync(file, t);
    const lineOf = (needle) => t.split('\n').findIndex((l) => l.includes(needle)) + 1;
    const r = check(file);
    assert.equal(r.status, 1, r.stdout + r.stderr);
    const want = [
      /^all\.yaml:1: controller_id: missing required key$/,
      new RegExp(`^all\\.yaml:${lineOf('listen: everywhere')}: listen: 'everywhere' is not IPV4:PORT or \\[IPV6\\]:PORT$`),
      new RegExp(`^all\\.yaml:${lineOf('webhook_secret_file:')}: webhook_secret_file: secret file .*open-secret has mode 644`),
      new RegExp(`^all\\.yaml:${lineOf('max_runners: two')}: pools\\[0\\]\\.max_runners: expected an integer`),
      new RegExp(`^all\\.yaml:${lineOf('max_runner: 3')}: max_runner: unknown key here \\(did you mean pools\\[\\]\\.max_runners\\?\\)$`),
      new RegExp(`^all\\.yaml:${lineOf('app_private_key_file:')}: github\\.app_private_key_file: secret file .*open-app\\.pem has mode 644`),
    ];
    const lines = r.stderr.trim().split('\n').map((l) => l.replace(`${dir}/`, ''));
    assert.equal(lines.length, want.length, r.stderr);
    want.forEach((re, i) => assert.match(lines[i], re));
  });

  test('a secret file readable by group or others is refused', () => {
    const secret = `${dir}/webhook-secret`;
    chmodSync(secret, 0o644);
    const r = check(good);
    chmodSync(secret, 0o600);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /webhook_secret_file: .*must not be accessible to group or others/);
    assert.ok(!r.stderr.includes('test-webhook-secret'));
  });

  test('a TLS key readable by group is refused by --check-config, as the start refuses it', () => {
    const key = `${dir}/tls.key`;
    writeFileSync(key, '-----BEGIN PRIVATE KEY-----\n');
    chmodSync(key, 0o640);
    const file = `${dir}/tls.yaml`;
    writeFileSync(file, text.replace(/^http:\n/m, '') + `http:\n  tls_cert_file: ${dir}/tls.crt\n  tls_key_file: ${key}\n`);
    let r = check(file);
    assert.equal(r.status, 1, r.stdout + r.stderr);
    const keyLine = readFileSync(file, 'utf8').split('\n').findIndex((l) => l.includes('tls_key_file:')) + 1;
    assert.match(r.stderr, new RegExp(`tls\\.yaml:${keyLine}: http\\.tls_key_file: secret file .*tls\\.key has mode 640: it must not be accessible to group or others`));
    chmodSync(key, 0o600);
    r = check(file);
    assert.equal(r.status, 0, r.stderr);
  });

  test('a config that never ends (a FIFO fed for ever) is refused at its bound, not read for ever', () => {
    const fifo = `${dir}/endless.yaml`;
    assert.equal(spawnSync('mkfifo', [fifo]).status, 0);
    // The writer is killed with the check, whatever happens.
    const r = spawnSync('sh', ['-c', `yes 'colour: blue' > ${fifo} & w=$!; timeout 20 "$0" --check-config ${fifo}; s=$?; kill $w 2>/dev/null; exit $s`, HATCHERYD], { encoding: 'utf8' });
    assert.equal(r.status, 1, r.stdout + r.stderr);
    assert.match(r.stderr, /endless\.yaml:0: \(file\): larger than 1048576 bytes/);
  });

  test('a secret file owned by another user is refused, whatever its mode', () => {
    const secret = `${dir}/webhook-secret`;
    chownSync(secret, 65534, 65534);
    const r = check(good);
    chownSync(secret, process.getuid(), process.getgid());
    assert.equal(r.status, 1, r.stdout + r.stderr);
    assert.match(r.stderr, /webhook_secret_file: secret file .* is owned by uid 65534: it must be owned by hatcheryd's user/);
    assert.equal(check(good).status, 0);
  });

  test('usage errors exit 2', () => {
    assert.equal(spawnSync(HATCHERYD, [], { encoding: 'utf8' }).status, 2);
    assert.equal(spawnSync(HATCHERYD, ['--bogus'], { encoding: 'utf8' }).status, 2);
    // A reason is words, not nothing.
    const empty = spawnSync(HATCHERYD, ['--config', '/nonexistent.yaml', '--allow-root', ' '], { encoding: 'utf8' });
    assert.equal(empty.status, 2);
    assert.match(empty.stderr, /--allow-root needs a reason/);
  });

  test('root is refused unless an operator says why (--allow-root REASON)', { skip: process.getuid() !== 0 && 'needs root' }, () => {
    const dir = tempDir();
    const config = writeConfig(dir, { port: 1, secret: 's' });
    const r = spawnSync(HATCHERYD, ['--config', config], { encoding: 'utf8', timeout: 10000 });
    assert.equal(r.status, 1);
    assert.match(r.stderr, /refusing to run as root: run it as a user of its own .*--allow-root REASON/);
    assert.doesNotMatch(r.stderr, /event=daemon/, 'refused before it did anything');
    // Checking a config as root is not running: allowed.
    assert.equal(check(config).status, 0, check(config).stderr);
    spawnSync('rm', ['-rf', dir]);
  });
});

test('deploy/hatchery.example.yaml checks out', () => {
  const dir = tempDir();
  const secret = `${dir}/secret`;
  writeFileSync(secret, 'x\n', { mode: 0o600 });
  const key = `${dir}/app.pem`;
  assert.equal(spawnSync('openssl', ['genrsa', '-out', key, '2048']).status, 0);
  chmodSync(key, 0o600);
  const example = readFileSync(new URL('../../deploy/hatchery.example.yaml', import.meta.url), 'utf8')
    .replace('/etc/hatchery/webhook-secret', secret)
    .replace('/etc/hatchery/github-app.pem', key);
  writeFileSync(`${dir}/example.yaml`, example);
  const r = check(`${dir}/example.yaml`);
  // Its trusted pool without its scope would fall into the first, whose default group pull
  // requests may use: refused.
  const lines = example.split('\n');
  const last = lines.lastIndexOf('    github_scope: pytorch');
  assert.ok(last > 0);
  writeFileSync(`${dir}/implicit.yaml`, lines.filter((_, i) => i !== last).join('\n'));
  const implicit = check(`${dir}/implicit.yaml`);
  writeFileSync(`${dir}/default-group.yaml`, example.replace('runner_group_id: 42', 'runner_group_id: 1'));
  const defaultGroup = check(`${dir}/default-group.yaml`);
  spawnSync('rm', ['-rf', dir]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /OK \(2 hosts, 2 pools\)/);
  assert.equal(implicit.status, 1);
  assert.match(implicit.stderr, /implicit\.yaml:\d+: pools\[\]\.github_scope: pool 'linux\.ppc64le\.publisher' names no github_scope, and github\.runner_scopes has 2/);
  assert.equal(defaultGroup.status, 1);
  assert.match(defaultGroup.stderr, /pools\[\]\.trusted: trusted pool 'linux\.ppc64le\.publisher' registers in scope 'pytorch', whose runner_group_id 1 is the default group/);
});
