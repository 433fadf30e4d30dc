#!/usr/bin/env python3
"""The floor under a durable webhook answer: one delivery's rows committed to SQLite the
way hatcheryd's store commits them (WAL, synchronous=FULL, its own schema with every index
and trigger, copied from a store hatcheryd made), one commit at a time, timed. No HTTP, no
event loop, no thread.

usage: durable_commit.py STORE DIR SECONDS
  STORE: a hatchery.db whose schema to copy; the commits go to a new database in DIR.
  Prints {"commits_per_s", "p50_ms", "p99_ms"} as JSON.
"""
import json
import os
import sqlite3
import sys
import time

store, directory, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
schema = [row[0] for row in sqlite3.connect(f"file:{store}?mode=ro", uri=True).execute(
    "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
    "ORDER BY type = 'trigger', rowid")]
db = sqlite3.connect(os.path.join(directory, "floor.db"), isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=FULL")
db.execute("PRAGMA temp_store=MEMORY")
for sql in schema:
    db.execute(sql)
times = []
end = time.monotonic() + seconds
i = 0
while time.monotonic() < end:
    i += 1
    now = int(time.time() * 1000)
    t0 = time.perf_counter()
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO deliveries VALUES (?, 'workflow_job', ?, ?)",
               (f"floor-{i}", now // 1000, os.urandom(32).hex()))
    db.execute("INSERT INTO jobs(id, run_id, repository, labels, pool, status, status_rank, "
               "queued_at, updated_at) VALUES (?, 1, 'octo/repo', '[\"linux.ppc64le\"]', "
               "'linux.ppc64le', 'queued', 1, ?, ?)", (i, now, now))
    db.execute("COMMIT")
    times.append((time.perf_counter() - t0) * 1000)
times.sort()
print(json.dumps({"commits_per_s": round(len(times) / seconds, 1),
                  "p50_ms": round(times[len(times) // 2], 3),
                  "p99_ms": round(times[len(times) * 99 // 100], 3)}))
