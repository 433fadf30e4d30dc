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
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "hatchery/limits.h"
#include "job.h"

#define STORE_SCHEMA_VERSION 8

struct config;
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
/* A zeroed array for the typed rows the caller makes from `rows` (a store_query answer),
 * one of `size` bytes per row; NULL when `rows` is NULL (`*err` -EIO) or out of memory
 * (-ENOMEM, `rows` released). */
void *store_rows_array(json_t *rows, size_t size, int *err);

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

/* ---- runners and hosts, by name (store_runners.c) ---------------------------------------- */

struct store_runner_new {
    int64_t id;
    const char *name, *pool, *host, *state;
    int64_t vcpus, memory_mib, created_ms;
    const char *image; /* the build of the image it boots (image_manifest_id), or "" */
};
int store_runner_insert(struct store *store, const struct store_runner_new *runner,
                        store_write_cb cb, void *data);
/* A runner's record after a move: 0 (or a negative exit code, or an empty reason) is
 * stored as NULL. */
struct store_runner_update {
    int64_t id;
    const char *state, *host;
    int64_t github_runner_id, job_id, exit_code;
    const char *reason;
    int64_t online_ms, busy_ms, finished_ms, updated_ms;
};
int store_runner_update(struct store *store, const struct store_runner_update *update,
                        store_write_cb cb, void *data);
/* A record nobody owns any more: deleted, keeping its first reason and end. */
int store_runner_mark_deleted(struct store *store, int64_t id, const char *reason, int64_t now_ms);
/* A runner's record as the store holds it: "" for a NULL text, 0 for a NULL id or time,
 * -1 for a NULL exit code. */
struct store_runner_row {
    int64_t id;
    char name[160], pool[CONFIG_MAX_NAME_BYTES + 1], host[CONFIG_MAX_NAME_BYTES + 1];
    char state[16];
    int64_t github_runner_id, job_id;
    int exit_code;
    char reason[256];
    int64_t created_ms, online_ms, busy_ms, finished_ms;
    char image[72]; /* "": recorded before schema 7 */
};
/* Records not deleted with ids below `first_id` (an earlier hatcheryd's): an array of
 * `*ret_n` rows into `*ret_rows` (free() it), or -errno. */
int store_runners_live_before(struct store *store, int64_t first_id,
                              struct store_runner_row **ret_rows, size_t *ret_n);
/* The newest 1,000 records (only live ones unless `include_ended`), as rows. */
json_t *store_runners_list(struct store *store, bool include_ended);
/* The id after every one ever given (deleted and pruned ones included). */
int64_t store_runner_next_id(struct store *store);
/* Deletes deleted runners' records last updated before `before_ms`. */
int store_runners_prune(struct store *store, int64_t before_ms);
/* Whether the host named `host` is marked drained (false when the store cannot say); and
 * a host's drained mark. */
bool store_host_drained(struct store *store, const char *host);
int store_host_drained_set(struct store *store, const char *host, bool drained);

/* ---- jobs, by name (store_jobs.c) --------------------------------------------------------- */

/* Each pool with a queued job, once: how many of its queued jobs are verified (not found
 * gone from GitHub), and when its oldest queued job was queued (ms since the epoch). */
int store_jobs_queue_each(struct store *store,
                          void (*cb)(void *data, const char *pool, int64_t verified,
                                     int64_t oldest_ms),
                          void *data);
/* The same, by the index of `c`'s pools (the scheduler's tick, /metrics): `ret` has an
 * entry for each of them, zero for a pool without a queued job. */
struct store_pool_queue {
    int64_t verified;
    int64_t oldest_ms;
};
int store_jobs_queue_by_pool(struct store *store, const struct config *c,
                             struct store_pool_queue *ret);
/* A job as the store's lists below give it: what each list selects, 0 or "" for the rest.
 * Each list is an array of `*ret_n` of them into `*ret_jobs` (free() it), or -errno. */
struct store_job_ref {
    int64_t id;
    int64_t queued_ms;
    char repository[WEBHOOK_MAX_NAME_BYTES + 1];
};
/* A pool's jobs in progress and not heard of since `before_ms`, oldest first (id,
 * repository). */
int store_jobs_stuck(struct store *store, const char *pool, int64_t before_ms, int limit,
                     struct store_job_ref **ret_jobs, size_t *ret_n);
/* A pool's queued jobs no runner came online for yet, oldest first (id, queued). */
int store_jobs_unsupplied(struct store *store, const char *pool, int limit,
                          struct store_job_ref **ret_jobs, size_t *ret_n);
int store_job_supplied(struct store *store, int64_t id, int64_t at_ms);
/* When the job was queued (ms), or -1 when the store does not know. */
int64_t store_job_queued_at(struct store *store, int64_t id);
/* A late delivery's job that GitHub says is still queued. */
int store_job_verified(struct store *store, int64_t id, store_write_cb cb, void *data);
/* Its updated_at moved to now: asked about again only later. */
int store_job_touch(struct store *store, int64_t id, int64_t now_ms);
/* A job GitHub says moved on (or forgot): its status raised, never lowered. */
int store_job_retire(struct store *store, int64_t id, enum job_status status,
                     const char *conclusion, int64_t now_ms, store_write_cb cb, void *data);
/* Queued jobs from late deliveries, not yet verified (id, repository). */
int store_jobs_unverified(struct store *store, int limit, struct store_job_ref **ret_jobs,
                          size_t *ret_n);
/* `repo`'s jobs queued and untouched since before `before_ms` that `listed` (a JSON array
 * of ids) does not name (id). */
int store_jobs_queued_unlisted(struct store *store, const char *repo, int64_t before_ms,
                               const char *listed, int limit, struct store_job_ref **ret_jobs,
                               size_t *ret_n);
/* The ids of `ids` (a JSON array) that the store has never seen (id). */
int store_job_ids_unknown(struct store *store, const char *ids, struct store_job_ref **ret_jobs,
                          size_t *ret_n);
/* Deletes completed jobs last updated before `before_ms`. */
int store_jobs_prune(struct store *store, int64_t before_ms);

/* ---- runner scale sets (store_scalesets.c) ------------------------------------------ */

/* What one message of a scale set's queue said: its jobs' news, as
 * [{job_id, state, runner_name?, result?, labels?}], and the message id, committed in one
 * transaction; `cb` runs once both are on disk (then the message may be deleted from the
 * service's queue). `jobs` is taken. */
int store_scaleset_message_commit(struct store *store, const char *name, int64_t scale_set_id,
                                  int64_t message_id, json_t *jobs, int64_t now_ms,
                                  store_write_cb cb, void *data);
/* The scale set's last committed message id (0: none), and its id (0: not known). */
int store_scaleset_cursor(struct store *store, const char *name, int64_t *ret_scale_set_id,
                          int64_t *ret_last_message_id);
/* Its jobs by state, newest first, at most `limit` (for the CLI). */
json_t *store_scaleset_jobs(struct store *store, const char *name, int limit);

#endif
