/* The durable store: one SQLite file (WAL) in the state directory holding deliveries (for
 * deduplication), jobs and, later, runners and hosts.
 *
 * Writes are group-committed off the loop: every write submitted during one loop iteration
 * joins one transaction, committed with synchronous=FULL on a libuv worker; each write's
 * callback runs on the loop only after that commit is on disk. So an answer that depends
 * on a write (a webhook's 202) is never sent before the write is durable, and one fsync
 * serves many requests. Reads run off the loop too, on a worker, through a second
 * connection (WAL lets it read while the writer commits); their answers come back to the
 * loop in the order they were asked. The loop thread never waits for the database: only
 * start-up (before the loop serves anything) reads synchronously. */
#ifndef HATCHERY_STORE_H
#define HATCHERY_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "hatchery/limits.h"
#include "job.h"

#define STORE_SCHEMA_VERSION 9

struct config;
struct store;

enum store_result {
    STORE_APPLIED = 0,   /* the write changed the store */
    STORE_DUPLICATE = 1, /* the delivery was seen before: no second effect */
};

/* `result` is enum store_result or a negative errno. */
typedef void (*store_write_cb)(void *data, int result);

/* Where the store is: SQLite's `dir`/hatchery.db, or, when `postgresql` is set (a
 * postgresql:// URI or libpq's keywords), a PostgreSQL database, connected to with
 * `password` (NULL: libpq's own sources, PGPASSFILE or ~/.pgpass). */
struct store_location {
    const char *dir;
    const char *postgresql;
    const char *password;
};
/* Opens the store (creating and migrating its schema as needed). `loop` may be NULL for
 * synchronous use (tests, fuzzing): then writes apply with the *_sync calls, and reads
 * are answered before they return. */
int store_open_at(uv_loop_t *loop, const struct store_location *where, struct store **ret_store,
                  char *err, size_t err_size);
/* The same for SQLite in `dir`. */
int store_open(uv_loop_t *loop, const char *dir, struct store **ret_store, char *err,
               size_t err_size);
/* The leader's fence (lease.h), for controllers sharing a PostgreSQL store: from now on,
 * each commit that holds a leader's write (anything but a job event, which every instance
 * records) first reads the epoch of `controller_id`'s lease, locking its row for the
 * transaction; the leader's writes are refused with -ESTALE when it is not `epoch`, and
 * with -EPERM when `epoch` is 0 (a follower). Without it (a SQLite store) nothing is
 * fenced. */
int store_fence_set(struct store *store, const char *controller_id, int64_t epoch);
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
/* Several writes as one, in the next group commit: `statements` (taken) is an array of
 * [sql, params] pairs, applied in order, all of them or (when one fails) none. */
int store_sql_group_submit(struct store *store, json_t *statements, store_write_cb cb, void *data);
/* The same, now, on the calling thread (start-up, tests). */
int store_sql_apply_sync(struct store *store, const char *sql, json_t *params);
/* store_sql_group_submit's, now, in a transaction of its own. */
int store_sql_group_apply_sync(struct store *store, json_t *statements);

/* Copies every record of `source` (a SQLite site's store) into `target` (an empty
 * PostgreSQL one), both opened without a loop: deliveries, jobs, runners, hosts and scale
 * sets, a page of rows per transaction, each table's count checked on both sides after,
 * and the runners' next id kept. `*ret_counts`: rows copied by table, and the next runner
 * id. Refuses (-EEXIST) a target that holds any record. */
int store_import(struct store *target, struct store *source, json_t **ret_counts, char *err,
                 size_t err_size);

/* ---- reads --------------------------------------------------------------------------------
 * A read runs off the loop, on a worker with the store's reader; `cb` gets its answer on
 * the loop: rows as objects keyed by column name (borrowed: incref to keep), or NULL when
 * the read failed or the store closed before it ran. `params` (a JSON array, taken) bind to
 * ?1…. Answers come in the order reads were asked. `owner` is whoever must outlive the
 * answer: store_reads_forget(owner) drops the answers still to come for it, so an object
 * that asked calls it before it is freed. Without a loop (store_open(NULL, ...)), a read is
 * answered before it returns. Returns 0, or -EAGAIN (STORE_MAX_PENDING_READS waiting, or
 * closing) or -ENOMEM, and then `cb` is not called. */
typedef void (*store_rows_cb)(void *data, json_t *rows);
int store_read(struct store *store, const void *owner, const char *sql, json_t *params,
               store_rows_cb cb, void *data);
void store_reads_forget(struct store *store, const void *owner);
/* For the store's typed reads: `adapt` turns the rows into `cb`'s own arguments. */
typedef void (*store_read_adapter)(json_t *rows, void (*cb)(void), void *data);
int store_read_as(struct store *store, const void *owner, const char *sql, json_t *params,
                  store_read_adapter adapt, void (*cb)(void), void *data);
/* A read now, on the calling thread: for start-up, before the loop serves anything, and
 * for tests. Rows as store_read gives them (caller decrefs), or NULL. */
json_t *store_query_sync(struct store *store, const char *sql, json_t *params);
/* A zeroed array for the typed rows the caller makes from `rows` (a read's answer), one of
 * `size` bytes per row; NULL when `rows` is NULL (`*err` -EIO) or out of memory
 * (-ENOMEM). */
void *store_rows_array(json_t *rows, size_t size, int *err);

/* Deletes delivery records older than `max_age_s`, in the next group commit. */
void store_deliveries_prune(struct store *store, int64_t max_age_s);

/* The newest jobs (`status_filter` NULL: any), at most `limit` (0: ADMIN_MAX_LIST_ROWS), as
 * the CLI shows them. */
int store_jobs_list(struct store *store, const void *owner, const char *status_filter, int limit,
                    store_rows_cb cb, void *data);
/* Jobs counted by pool and status: rows {pool (NULL for unmatched jobs), status, n}. */
int store_job_counts(struct store *store, const void *owner, store_rows_cb cb, void *data);
/* How many deliveries are kept for deduplication: rows [{n}]. */
int store_deliveries_count(struct store *store, const void *owner, store_rows_cb cb, void *data);

struct store_stats {
    uint64_t commits;
    uint64_t commit_ns; /* time spent applying and committing batches */
    uint64_t writes_committed;
    uint64_t commit_errors;
    uint64_t writes_rejected; /* -EAGAIN: queue full */
    uint64_t writes_fenced;   /* the leader's writes refused: -EPERM or -ESTALE */
    size_t writes_pending;
    uint64_t reads;          /* answered, failed ones included */
    uint64_t read_batches;   /* trips to the worker */
    uint64_t read_ns;        /* time the worker spent reading */
    uint64_t read_errors;    /* answered with no rows */
    uint64_t reads_rejected; /* -EAGAIN */
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
/* Records not deleted with ids below `first_id` (an earlier hatcheryd's): `cb` gets `n`
 * rows (borrowed), or a negative errno. */
typedef void (*store_runner_rows_cb)(void *data, int err, const struct store_runner_row *rows,
                                     size_t n);
int store_runners_live_before(struct store *store, const void *owner, int64_t first_id,
                              store_runner_rows_cb cb, void *data);
/* The newest 1,000 records (only live ones unless `include_ended`), as rows. */
int store_runners_list(struct store *store, const void *owner, bool include_ended, store_rows_cb cb,
                       void *data);
/* The id after every one ever given (deleted and pruned ones included). Start-up only. */
int64_t store_runner_next_id_sync(struct store *store);
/* Deletes deleted runners' records last updated before `before_ms`. */
int store_runners_prune(struct store *store, int64_t before_ms);
/* Whether the host named `host` is marked drained (false when the store cannot say), at
 * start-up; and a host's drained mark. */
bool store_host_drained_sync(struct store *store, const char *host);
int store_host_drained_set(struct store *store, const char *host, bool drained);

/* ---- jobs, by name (store_jobs.c) --------------------------------------------------------- */

/* Each pool with a queued job, once: rows {pool, verified (how many of its queued jobs
 * are not found gone from GitHub), oldest_ms (when its oldest queued job was queued)}. */
int store_jobs_queue_read(struct store *store, const void *owner, store_rows_cb cb, void *data);
/* The jobs given to this controller's live runners (configured, idle or busy), as the
 * store holds them: rows {id, status, runner_name} of those in progress, and of those
 * completed after `since_ms`. With a shared store, another instance may have taken their
 * webhooks; the leader learns of them here. */
int store_jobs_of_live_runners(struct store *store, const void *owner, int64_t since_ms,
                               store_rows_cb cb, void *data);
/* Those rows by the index of `c`'s pools (the scheduler's tick, /metrics): `ret` has an
 * entry for each of them, zero for a pool without a queued job. -EIO when `rows` is NULL. */
struct store_pool_queue {
    int64_t verified;
    int64_t oldest_ms;
};
int store_jobs_queue_by_pool(json_t *rows, const struct config *c, struct store_pool_queue *ret);
/* A job as the store's lists below give it: what each list selects, 0 or "" for the rest.
 * Each list's `cb` gets `n` of them (borrowed), or a negative errno. */
struct store_job_ref {
    int64_t id;
    int64_t queued_ms;
    char repository[WEBHOOK_MAX_NAME_BYTES + 1];
};
typedef void (*store_job_refs_cb)(void *data, int err, const struct store_job_ref *jobs, size_t n);
/* A pool's jobs in progress and not heard of since `before_ms`, oldest first (id,
 * repository). */
int store_jobs_stuck(struct store *store, const void *owner, const char *pool, int64_t before_ms,
                     int limit, store_job_refs_cb cb, void *data);
/* A pool's queued jobs no runner came online for yet, oldest first (id, queued). */
int store_jobs_unsupplied(struct store *store, const void *owner, const char *pool, int limit,
                          store_job_refs_cb cb, void *data);
int store_job_supplied(struct store *store, int64_t id, int64_t at_ms);
/* When the job was queued (ms), or -1 when the store does not know. */
int store_job_queued_at(struct store *store, const void *owner, int64_t id,
                        void (*cb)(void *data, int64_t queued_ms), void *data);
/* A late delivery's job that GitHub says is still queued. */
int store_job_verified(struct store *store, int64_t id, store_write_cb cb, void *data);
/* Its updated_at moved to now: asked about again only later. */
int store_job_touch(struct store *store, int64_t id, int64_t now_ms);
/* A job GitHub says moved on (or forgot): its status raised, never lowered. */
int store_job_retire(struct store *store, int64_t id, enum job_status status,
                     const char *conclusion, int64_t now_ms, store_write_cb cb, void *data);
/* Queued jobs from late deliveries, not yet verified (id, repository). */
int store_jobs_unverified(struct store *store, const void *owner, int limit, store_job_refs_cb cb,
                          void *data);
/* `repo`'s jobs queued and untouched since before `before_ms` that `listed` (a JSON array
 * of ids) does not name (id). */
int store_jobs_queued_unlisted(struct store *store, const void *owner, const char *repo,
                               int64_t before_ms, const char *listed, int limit,
                               store_job_refs_cb cb, void *data);
/* The ids of `ids` (a JSON array) that the store has never seen (id). */
int store_job_ids_unknown(struct store *store, const void *owner, const char *ids,
                          store_job_refs_cb cb, void *data);
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
/* The scale set's last committed message id (0: none), and its id (0: not known): `cb`
 * gets them, or a negative errno. */
typedef void (*store_scaleset_cursor_cb)(void *data, int err, int64_t scale_set_id,
                                         int64_t last_message_id);
int store_scaleset_cursor(struct store *store, const void *owner, const char *name,
                          store_scaleset_cursor_cb cb, void *data);
/* The same now, at start-up. */
int store_scaleset_cursor_sync(struct store *store, const char *name, int64_t *ret_scale_set_id,
                               int64_t *ret_last_message_id);

#endif
