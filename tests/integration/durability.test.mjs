// A 202 means durable: kill -9 the daemon right after it answers, restart it, and every
// acknowledged job is there.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { Daemon, examples } from './lib/daemon.mjs';

describe('durability', () => {
  const d = new Daemon();
  after(() => d.cleanup());

  test('jobs acknowledged with 202 survive kill -9', async () => {
    const acknowledged = new Set();
    for (let round = 0; round < 5; round++) {
      await d.start();
      // A burst in flight, then SIGKILL the moment the last 202 arrives.
      const burst = [];
      for (let i = 0; i < 20; i++) {
        const payload = structuredClone(examples('workflow_job')[5]);
        payload.workflow_job.id = 4000000000 + round * 100 + i;
        payload.workflow_job.labels = ['linux.ppc64le'];
        burst.push(d.post('workflow_job', payload).then((res) => {
          if (res.status === 202) acknowledged.add(payload.workflow_job.id);
          return res.status;
        }));
      }
      const statuses = await Promise.all(burst);
      await d.kill9();
      assert.deepEqual(statuses, Array(20).fill(202));
    }
    await d.start();
    const stored = new Set(d.jobs().map((j) => j.id));
    for (const id of acknowledged) assert.ok(stored.has(id), `job ${id} was acknowledged but lost`);
    assert.equal(acknowledged.size, 100);
    const { code } = await d.stop();
    assert.equal(code, 0);
  });

  test('a second daemon on the same state directory is refused', async () => {
    await d.start();
    const other = new Daemon({ dir: d.dir });
    other.port = d.port + 1;
    await assert.rejects(other.start(), /another hatcheryd uses this state directory/);
    await d.stop();
  });
});
