/* The durable store: one SQLite file (WAL) in the state directory holding deliveries (for
 * deduplication), jobs and, later, runners and hosts.
 *
 * Writes are group-committed off the loop: every write submitted during one loop iteration
 * joins one transaction, committed with synchronous=FULL on a libuv worker; each write's
 * callback runs on the loop only after that commit is on disk. So an answer that depends
 * on a write (a webhook's 202) is never sent before the write is durable, and one fsync
 * serves many requests. Reads run on the loop thread through a second connection, which
 * WAL lets read while the writer commits. */
#ifndef HATCHERY_STORE_H
#define HATCHERY_STORE_H

#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "job.h"

#define STORE_SCHEMA_VERSION 5

struct store;

enum store_result {
    STORE_APPLIED = 0,   /* the write changed the store */
    STORE_DUPLICATE = 1, /* the delivery was seen before: no second effect */
};

/* `result` is enum store_result or a negative errno. */
typedef void (*store_write_cb)(void *data, int result);

/* Opens (creating and migrating as needed) `dir`/hatchery.db. `loop` may be NULL for
 * synchronous use (tests, fuzzing): then only the *_sync calls may be used. */
int store_open(uv_loop_t *loop, const char *dir, struct store **ret_store, char *err,
               size_t err_size);
/* Waits for a commit in flight, then closes. */
void store_close(struct store *store);

/* Queues a job event for the next group commit. Takes ownership of `event`.
 * Returns -EAGAIN when STORE_MAX_PENDING_WRITES are already waiting. */
int store_job_event_submit(struct store *store, struct job_event *event, store_write_cb cb,
                           void *data);
/* Applies one job event in its own transaction, on the calling thread. */
int store_job_event_apply_sync(struct store *store, const struct job_event *event);

/* Any write, in the next group commit: `params` (a JSON array, taken over) bind to ?1…. */
int store_sql_submit(struct store *store, const char *sql, json_t *params, store_write_cb cb,
                     void *data);
/* The same, now, on the calling thread (start-up, tests). */
int store_sql_apply_sync(struct store *store, const char *sql, json_t *params);
/* A read on the loop thread: rows as objects keyed by column name (caller decrefs), or NULL.
 * `params` is taken over. */
json_t *store_query(struct store *store, const char *sql, json_t *params);

/* Deletes delivery records older than `max_age_s`, in the next group commit. */
void store_deliveries_prune(struct store *store, int64_t max_age_s);

/* Reads (loop thread). */
int store_jobs_list(struct store *store, const char *status_filter, int limit, json_t **ret_jobs);
/* Calls `cb` once per (pool, status) with its count; pool is NULL for unmatched jobs. */
int store_job_counts(struct store *store,
                     void (*cb)(void *data, const char *pool, const char *status, int64_t count),
                     void *data);
int64_t store_deliveries_count(struct store *store);

struct store_stats {
    uint64_t commits;
    uint64_t commit_ns; /* time spent applying and committing batches */
    uint64_t writes_committed;
    uint64_t commit_errors;
    uint64_t writes_rejected; /* -EAGAIN: queue full */
    size_t writes_pending;
};
void store_stats_get(const struct store *store, struct store_stats *ret_stats);

#endif
