// hatcheryd with its store in PostgreSQL (database.postgresql): a server of the test's own
// (tests/postgresql/cluster.sh, Debian's package), the config's checks, webhooks stored
// and kept across a restart, and a server that goes away and comes back: the webhooks
// meanwhile are answered 500 (GitHub sends them again), none is stored half, and the
// redeliveries are stored once the server is back. And a SQLite site moved into it with
// one command, every record kept.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Daemon, HATCHERYD, ROOT_ARGS, request, tempDir, workflowJob, writeConfig } from './lib/daemon.mjs';

function sqlite(db, sql) {
  const r = spawnSync('sqlite3', [db, sql], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
}

const CLUSTER = new URL('../postgresql/cluster.sh', import.meta.url).pathname;

function cluster(...args) {
  const r = spawnSync(CLUSTER, args, { encoding: 'utf8' });
  assert.equal(r.status, 0, `cluster.sh ${args.join(' ')}: ${r.stderr}`);
  return r.stdout.trim();
}

function psql(conninfo, sql) {
  const r = spawnSync('psql', [conninfo, '-qAt', '-c', sql], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
}

function checkConfig(dir, extra) {
  const file = writeConfig(dir, { port: 1, extra });
  return spawnSync(HATCHERYD, ['--check-config', file, ...ROOT_ARGS], { encoding: 'utf8' });
}

describe('the store in PostgreSQL', () => {
  const pgDir = tempDir('hatchery-it-pg-');
  let conninfo;
  let d;
  before(() => {
    conninfo = cluster('start', pgDir);
    // The longest lease: this test's subject is the store through an outage, which a leader
    // would not outlast at the default lease (it stops after 3/5 of it: github.leadership).
    d = new Daemon({ extra: `database:\n  postgresql: "${conninfo}"\n  lease_s: 300\n` });
  });
  after(async () => {
    if (d) {
      await d.stop();
      d.cleanup();
    }
    cluster('stop', pgDir);
  });

  test('--check-config reaches the database, and says why when it cannot', () => {
    const dir = tempDir();
    let r = checkConfig(dir, `database:\n  postgresql: "${conninfo}"\n`);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(psql(conninfo, "SELECT count(*) FROM pg_tables WHERE tablename = 'jobs'"), '0', 'a check changes nothing');

    r = checkConfig(dir, `database:\n  postgresql: "host=${dir} user=hatchery dbname=hatchery connect_timeout=2"\n`);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /hatchery\.yaml:\d+: database: cannot connect to PostgreSQL: .*No such file or directory/);

    r = checkConfig(dir, 'database:\n  postgresql: "postgresql://hatchery:hunter2@db.example/hatchery"\n');
    assert.equal(r.status, 1);
    assert.match(r.stderr, /database\.postgresql: holds a password: keep it out of the config/);
    assert.doesNotMatch(r.stderr, /hunter2/);

    r = checkConfig(dir, 'database:\n  postgresql: "host=x nosuchoption=1"\n');
    assert.equal(r.status, 1);
    assert.match(r.stderr, /database\.postgresql: not a postgresql:\/\/ URI or libpq keywords: invalid connection option "nosuchoption"/);

    const passwordFile = join(dir, 'db-password');
    writeFileSync(passwordFile, 'sesame\n');
    chmodSync(passwordFile, 0o644);
    r = checkConfig(dir, `database:\n  postgresql: "${conninfo}"\n  password_file: ${passwordFile}\n`);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /database: database\.password_file: .*(group|others)/);

    r = checkConfig(dir, `database:\n  password_file: ${passwordFile}\n`);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /database\.password_file: is the password of database\.postgresql, which is not set/);
  });

  test('webhooks are stored in PostgreSQL, once each, and kept across a restart', async () => {
    await d.start();
    assert.match(d.logs, /event=daemon\.store_opened backend=postgresql/);
    assert.match((await request(d.port, { path: '/metrics' })).body, /^hatchery_store_backend_info\{backend="postgresql"\} 1$/m);
    const payload = workflowJob('queued', 5000000001, ['linux.ppc64le']);
    const first = await d.post('workflow_job', payload, { delivery: 'pg-1' });
    assert.equal(first.status, 202, first.body);
    const again = await d.post('workflow_job', payload, { delivery: 'pg-1' });
    assert.equal(again.status, 200);
    assert.match(again.body, /"duplicate":true/);
    assert.equal(psql(conninfo, 'SELECT status FROM jobs WHERE id = 5000000001'), 'queued');
    assert.equal(psql(conninfo, "SELECT n FROM job_counts WHERE pool = 'linux.ppc64le' AND status = 'queued'"), '1');
    const capacity = d.cliJson('capacity');
    assert.equal(capacity.pools.find((p) => p.pool === 'linux.ppc64le').jobs.queued, 1);
    const { code } = await d.stop();
    assert.equal(code, 0);
    await d.start();
    assert.deepEqual(d.jobs().map((j) => [j.id, j.status]), [[5000000001, 'queued']]);
    assert.match((await d.post('workflow_job', workflowJob('in_progress', 5000000001, ['linux.ppc64le'], 'r1'))).status.toString(), /^202$/);
    assert.equal(d.jobs()[0].status, 'in_progress');
  });

  test('a database that goes away: 500s, nothing half-stored, and the redeliveries stored once it is back', async () => {
    cluster('stop-server', pgDir);
    const lost = workflowJob('queued', 5000000002, ['linux.ppc64le']);
    const res = await d.post('workflow_job', lost, { delivery: 'pg-2' });
    assert.equal(res.status, 500, res.body);
    assert.match(res.body, /store failed/);
    assert.match(d.logs, /event=store\.(begin_failed|write_failed|reconnecting)/);
    // The CLI says the store could not be read, and hatcheryd goes on.
    const jobs = d.cli('--json', 'jobs');
    assert.notEqual(jobs.code, 0);
    assert.match(jobs.stderr + jobs.stdout, /store read failed/);
    assert.equal((await d.post('workflow_job', lost, { delivery: 'pg-2' })).status, 500);

    // Back: the first statement on each connection finds it lost, makes it again and runs
    // once more (outside a transaction), so the first redelivery is stored, and the first
    // read answers.
    cluster('start', pgDir);
    const back = await d.post('workflow_job', lost, { delivery: 'pg-2' });
    assert.equal(back.status, 202, back.body);
    assert.match(d.logs, /event=store\.reconnecting backend=postgresql/);
    assert.equal(psql(conninfo, 'SELECT count(*) FROM jobs WHERE id = 5000000002'), '1');
    assert.equal(psql(conninfo, "SELECT count(*) FROM deliveries WHERE id = 'pg-2'"), '1');
    assert.deepEqual(d.jobs().map((j) => j.id).sort(), [5000000001, 5000000002]);
    const { code } = await d.stop();
    assert.equal(code, 0);
  });

  test('a SQLite site moves into PostgreSQL with one command, every job and runner kept', async () => {
    const site = new Daemon();
    await site.start();
    for (const [i, action] of [[1, 'queued'], [2, 'queued'], [3, 'completed']])
      assert.equal((await site.post('workflow_job', workflowJob(action, 6000000000 + i, ['linux.ppc64le']))).status, 202);
    const siteJobs = site.jobs().map((j) => [j.id, j.status]).sort();
    const state = join(site.dir, 'state');
    const moved = `${conninfo.replace(/dbname=\S+/, '')} dbname=moved`;
    psql(conninfo, 'CREATE DATABASE moved');
    const config = writeConfig(tempDir(), { port: 1, extra: `database:\n  postgresql: "${moved}"\n` });
    const importSqlite = () => spawnSync(HATCHERYD, ['--config', config, '--import-sqlite', state], { encoding: 'utf8' });

    let r = importSqlite();
    assert.equal(r.status, 1, 'an import beside a running hatcheryd');
    assert.match(r.stderr, /a hatcheryd is running on it: stop it first/);
    assert.equal((await site.stop()).code, 0);
    // Runner records as an earlier run left them: two ended, and the sequence at 5 (the
    // records of ids 3 to 5 pruned since).
    const now = Date.now();
    sqlite(site.db, `INSERT INTO runners(id, name, pool, host, state, vcpus, memory_mib, created_at, updated_at, reason)
      VALUES (1, 'hatchery-it-1', 'linux.ppc64le', 'host-a', 'deleted', 2, 4096, ${now}, ${now}, 'idle too long'),
             (2, 'hatchery-it-2', 'linux.ppc64le', 'host-a', 'failed', 2, 4096, ${now}, ${now}, 'boot timeout');
      UPDATE sqlite_sequence SET seq = 5 WHERE name = 'runners';`);

    r = importSqlite();
    assert.equal(r.status, 0, r.stderr);
    const counts = JSON.parse(/: (\{.*\})$/m.exec(r.stdout)[1]);
    assert.deepEqual(counts, { deliveries: 3, hosts: 0, jobs: 3, next_runner_id: 6, runners: 2, scale_set_jobs: 0, scale_sets: 0 });
    r = importSqlite();
    assert.equal(r.status, 1, 'a second import into the same database');
    assert.match(r.stderr, /the target already holds deliveries: refusing to mix two sites' records/);

    // hatcheryd on the moved store: the same jobs, counted, and the runner records.
    const pgSite = new Daemon({ dir: site.dir, extra: `database:\n  postgresql: "${moved}"\n` });
    await pgSite.start();
    try {
      assert.deepEqual(pgSite.jobs().map((j) => [j.id, j.status]).sort(), siteJobs);
      assert.equal(pgSite.cliJson('capacity').pools.find((p) => p.pool === 'linux.ppc64le').jobs.queued, 2);
      // Each record with its state and reason; the reconciler's recovery of an earlier run's
      // records may already have marked the failed one deleted, keeping its reason.
      const runners = pgSite.cliJson('runners', '--all').runners.map((x) => [x.name, x.state, x.reason ?? null]).sort();
      assert.deepEqual(runners.map(([name]) => name), ['hatchery-import-5', 'hatchery-it-1', 'hatchery-it-2']);
      assert.deepEqual(runners[1].slice(1), ['deleted', 'idle too long']);
      assert.ok(['failed', 'deleted'].includes(runners[2][1]), JSON.stringify(runners[2]));
      assert.equal(runners[2][2], 'boot timeout');
      assert.equal(runners[0][1], 'deleted');
      // The same delivery again is still a duplicate: the deliveries came too.
      assert.equal(psql(moved, 'SELECT count(*) FROM deliveries'), '3');
    } finally {
      assert.equal((await pgSite.stop()).code, 0);
      pgSite.cleanup();
    }
  });
});
