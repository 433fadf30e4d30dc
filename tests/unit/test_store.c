/* The store on a real SQLite file: migrations, dedup by delivery id, status only moving
 * forward, group commit through a real libuv loop, reads off the loop, and refusing a newer
 * schema. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sqlite3.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/hatchery-store-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd);
}

static struct job_event *event(const char *delivery, int64_t job, enum job_status status,
                               const char *runner)
{
    struct job_event *ev = calloc(1, sizeof(*ev));
    ev->delivery_id = strdup(delivery);
    ev->job_id = job;
    ev->run_id = 42;
    ev->status = status;
    ev->repository = strdup("pytorch/pytorch");
    ev->labels_json = strdup("[\"linux.ppc64le\"]");
    ev->pool = strdup("ppc");
    ev->runner_name = runner ? strdup(runner) : NULL;
    ev->received_at_ms = 1000 + job;
    return ev;
}

/* A read's rows, kept (a store without a loop answers before the read returns). */
static void keep_rows(void *data, json_t *rows)
{
    *(json_t **)data = json_incref(rows);
}

static json_t *only_job(struct store *s)
{
    json_t *jobs = NULL;
    assert_int_equal(store_jobs_list(s, NULL, NULL, 0, keep_rows, &jobs), 0);
    assert_non_null(jobs);
    assert_int_equal(json_array_size(jobs), 1);
    json_t *job = json_incref(json_array_get(jobs, 0));
    json_decref(jobs);
    return job;
}

static void apply(struct store *s, struct job_event *ev, int expect)
{
    assert_int_equal(store_job_event_apply_sync(s, ev), expect);
    job_event_free(ev);
}

static void test_out_of_order_and_duplicates(void **state)
{
    (void)state;
    struct store *s = NULL;
    char err[256];
    assert_int_equal(store_open(NULL, dir, &s, err, sizeof(err)), 0);
    int64_t big = INT64_C(29679449589);

    apply(s, event("d-completed", big, JOB_COMPLETED, "hatchery-p10-7"), STORE_APPLIED);
    /* The queued that was sent first arrives last: the job stays completed. */
    apply(s, event("d-queued", big, JOB_QUEUED, NULL), STORE_APPLIED);
    apply(s, event("d-progress", big, JOB_IN_PROGRESS, NULL), STORE_APPLIED);
    json_t *job = only_job(s);
    assert_string_equal(json_string_value(json_object_get(job, "status")), "completed");
    assert_true(json_integer_value(json_object_get(job, "id")) == big);
    assert_string_equal(json_string_value(json_object_get(job, "runner_name")), "hatchery-p10-7");
    json_decref(job);

    /* A redelivery has no second effect. */
    apply(s, event("d-queued", big, JOB_QUEUED, NULL), STORE_DUPLICATE);
    json_t *deliveries = NULL;
    assert_int_equal(store_deliveries_count(s, NULL, keep_rows, &deliveries), 0);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(deliveries, 0), "n")), 3);
    json_decref(deliveries);
    store_close(s);
}

static void test_forward_progress_fills_fields(void **state)
{
    (void)state;
    struct store *s = NULL;
    char err[256];
    assert_int_equal(store_open(NULL, dir, &s, err, sizeof(err)), 0);
    apply(s, event("f1", 7, JOB_QUEUED, NULL), STORE_APPLIED);
    apply(s, event("f2", 7, JOB_IN_PROGRESS, "runner-a"), STORE_APPLIED);
    json_t *jobs = NULL;
    assert_int_equal(store_jobs_list(s, NULL, "in_progress", 0, keep_rows, &jobs), 0);
    assert_int_equal(json_array_size(jobs), 1);
    json_t *job = json_array_get(jobs, 0);
    assert_string_equal(json_string_value(json_object_get(job, "runner_name")), "runner-a");
    assert_true(json_is_integer(json_object_get(job, "queued_at")));
    assert_true(json_is_integer(json_object_get(job, "started_at")));
    assert_true(json_is_null(json_object_get(job, "completed_at")));
    json_decref(jobs);
    store_close(s);
}

struct cb_log {
    int results[8];
    int n;
};

static void record(void *data, int result)
{
    struct cb_log *log = data;
    log->results[log->n++] = result;
}

static void test_group_commit_on_loop(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct store *s = NULL;
    char err[256];
    assert_int_equal(store_open(&loop, dir, &s, err, sizeof(err)), 0);
    struct cb_log log = {.n = 0};
    assert_int_equal(store_job_event_submit(s, event("g1", 100, JOB_QUEUED, NULL), record, &log),
                     0);
    assert_int_equal(store_job_event_submit(s, event("g2", 101, JOB_QUEUED, NULL), record, &log),
                     0);
    assert_int_equal(store_job_event_submit(s, event("g1", 100, JOB_QUEUED, NULL), record, &log),
                     0);
    /* Nothing is acknowledged before the commit. */
    assert_int_equal(log.n, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(log.n, 3);
    assert_int_equal(log.results[0], STORE_APPLIED);
    assert_int_equal(log.results[1], STORE_APPLIED);
    assert_int_equal(log.results[2], STORE_DUPLICATE);
    struct store_stats st;
    store_stats_get(s, &st);
    assert_int_equal(st.commits, 1); /* three writes, one transaction */
    assert_int_equal(st.writes_committed, 3);
    store_close(s);
    assert_int_equal(uv_loop_close(&loop), 0);

    /* Durable: a fresh open sees both jobs. */
    assert_int_equal(store_open(NULL, dir, &s, err, sizeof(err)), 0);
    json_t *jobs = NULL;
    assert_int_equal(store_jobs_list(s, NULL, "queued", 0, keep_rows, &jobs), 0);
    assert_true(json_array_size(jobs) >= 2);
    json_decref(jobs);
    store_close(s);
}

static void test_schema_version_and_wal(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof(path), "%s/hatchery.db", dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), STORE_SCHEMA_VERSION);
    sqlite3_finalize(st);
    /* A store from a newer hatcheryd is refused, not rewritten. */
    sqlite3_exec(db, "PRAGMA user_version=99", NULL, NULL, NULL);
    sqlite3_close(db);
    struct store *s = NULL;
    char err[256];
    assert_int_equal(store_open(NULL, dir, &s, err, sizeof(err)), -EPROTO);
    assert_non_null(strstr(err, "schema version 99 is newer"));
}

static void count_row(void *data, const char *pool, const char *status, int64_t count)
{
    char *out = data;
    size_t used = strlen(out);
    snprintf(out + used, 512 - used, "%s/%s=%lld;", pool ? pool : "-", status, (long long)count);
}

/* store_job_counts's rows, as count_row writes them into `out`. */
static void read_counts(struct store *s, char *out)
{
    json_t *rows = NULL;
    assert_int_equal(store_job_counts(s, NULL, keep_rows, &rows), 0);
    assert_non_null(rows);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        count_row(out, json_string_value(json_object_get(row, "pool")),
                  json_string_value(json_object_get(row, "status")),
                  json_integer_value(json_object_get(row, "n")));
    }
    json_decref(rows);
}

/* The counts store_job_counts() keeps, beside a GROUP BY over every job. */
static void assert_counts_match(struct store *s, sqlite3 *db)
{
    char kept[512] = "", grouped[512] = "";
    read_counts(s, kept);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT pool, status, count(*) FROM jobs GROUP BY "
                                        "coalesce(pool, ''), status ORDER BY coalesce(pool, ''), "
                                        "status",
                                        -1, &st, NULL),
                     SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW)
        count_row(grouped, (const char *)sqlite3_column_text(st, 0),
                  (const char *)sqlite3_column_text(st, 1), sqlite3_column_int64(st, 2));
    sqlite3_finalize(st);
    assert_string_equal(kept, grouped);
}

static void test_job_counts_follow_jobs(void **state)
{
    (void)state;
    struct store *s = NULL;
    char err[256], path[128], counts_dir[96];
    snprintf(counts_dir, sizeof(counts_dir), "%s/counts", dir); /* a store of its own */
    assert_int_equal(mkdir(counts_dir, 0700), 0);
    assert_int_equal(store_open(NULL, counts_dir, &s, err, sizeof(err)), 0);
    snprintf(path, sizeof(path), "%s/hatchery.db", counts_dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    apply(s, event("c1", 1, JOB_QUEUED, NULL), STORE_APPLIED);
    apply(s, event("c2", 2, JOB_QUEUED, NULL), STORE_APPLIED);
    apply(s, event("c3", 2, JOB_IN_PROGRESS, "r"), STORE_APPLIED);
    struct job_event *unmatched = event("c4", 3, JOB_QUEUED, NULL);
    free(unmatched->pool);
    unmatched->pool = NULL;
    apply(s, unmatched, STORE_APPLIED);
    char kept[512] = "";
    read_counts(s, kept);
    assert_string_equal(kept, "-/queued=1;ppc/in_progress=1;ppc/queued=1;");
    assert_counts_match(s, db);
    /* A pool renamed under a job, a job forgotten (history pruning), and a status write
     * that changes nothing. */
    assert_int_equal(sqlite3_exec(db,
                                  "UPDATE jobs SET pool = 'other' WHERE id = 1;"
                                  "DELETE FROM jobs WHERE id = 2;"
                                  "UPDATE jobs SET status = status WHERE id = 3;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_counts_match(s, db);
    store_close(s);

    /* A store from before the counts (schema 3) gets them from the jobs it holds. */
    assert_int_equal(sqlite3_exec(db,
                                  "DROP INDEX jobs_unverified; DROP INDEX deliveries_body_sha256;"
                                  "DROP INDEX jobs_queued; DROP INDEX jobs_in_progress;"
                                  "ALTER TABLE jobs DROP COLUMN unverified;"
                                  "ALTER TABLE deliveries DROP COLUMN body_sha256;"
                                  "ALTER TABLE runners DROP COLUMN image;"
                                  "DROP TABLE scale_sets; DROP TABLE scale_set_jobs;"
                                  "DROP TRIGGER job_counts_insert; DROP TRIGGER job_counts_delete;"
                                  "DROP TRIGGER job_counts_update; DROP TABLE job_counts;"
                                  "PRAGMA user_version=3;"
                                  "UPDATE jobs SET status = 'completed' WHERE id = 1;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(store_open(NULL, counts_dir, &s, err, sizeof(err)), 0);
    assert_counts_match(s, db);
    kept[0] = 0;
    read_counts(s, kept);
    assert_string_equal(kept, "-/queued=1;other/completed=1;");
    store_close(s);
    sqlite3_close(db);
}

/* store_jobs_queue_read's rows as "pool:verified@oldest;" each. */
static void read_queue(struct store *s, char *out)
{
    json_t *rows = NULL;
    assert_int_equal(store_jobs_queue_read(s, NULL, keep_rows, &rows), 0);
    assert_non_null(rows);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        size_t used = strlen(out);
        snprintf(out + used, 512 - used, "%s:%lld@%lld;",
                 json_string_value(json_object_get(row, "pool")),
                 (long long)json_integer_value(json_object_get(row, "verified")),
                 (long long)json_integer_value(json_object_get(row, "oldest_ms")));
    }
    json_decref(rows);
}

/* The scheduler's and /metrics' read of the queue, as C values: per pool with a queued job,
 * the verified ones counted and the oldest queued time, unverified ones included. */
static void test_queue_by_pool(void **state)
{
    (void)state;
    struct store *s = NULL;
    char err[256], path[128], queue_dir[96];
    snprintf(queue_dir, sizeof(queue_dir), "%s/queue", dir);
    assert_int_equal(mkdir(queue_dir, 0700), 0);
    assert_int_equal(store_open(NULL, queue_dir, &s, err, sizeof(err)), 0);
    char rows[512] = "";
    read_queue(s, rows);
    assert_string_equal(rows, "");
    apply(s, event("q1", 11, JOB_QUEUED, NULL), STORE_APPLIED);
    apply(s, event("q2", 12, JOB_QUEUED, NULL), STORE_APPLIED);
    apply(s, event("q3", 13, JOB_IN_PROGRESS, "r"), STORE_APPLIED);
    struct job_event *other = event("q4", 14, JOB_QUEUED, NULL);
    free(other->pool);
    other->pool = strdup("s390x");
    apply(s, other, STORE_APPLIED);
    struct job_event *unmatched = event("q5", 15, JOB_QUEUED, NULL);
    free(unmatched->pool);
    unmatched->pool = NULL;
    apply(s, unmatched, STORE_APPLIED);
    snprintf(path, sizeof(path), "%s/hatchery.db", queue_dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db, "UPDATE jobs SET unverified = 1 WHERE id = 11", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    rows[0] = 0;
    read_queue(s, rows);
    assert_string_equal(rows, "ppc:1@1011;s390x:1@1014;");
    store_close(s);
}

/* ---- reads off the loop ------------------------------------------------------------------
 * Every SQLite connection of this process gets gate(): it wakes the loop (`entered`) and
 * returns 1 once the loop has answered by opening the gate. A read on the loop thread would
 * wait for a loop that cannot run, and give 0 after GATE_WAIT_S. It says which thread ran
 * it. */
#define GATE_WAIT_S 30
static sem_t gate;
static pthread_t gate_thread;
static uv_async_t entered;

static void gate_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    (void)argv;
    gate_thread = pthread_self();
    uv_async_send(&entered);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += GATE_WAIT_S;
    sqlite3_result_int(ctx, sem_timedwait(&gate, &until) == 0);
}

static int gate_register(sqlite3 *db, char **err, const void *api)
{
    (void)err;
    (void)api;
    return sqlite3_create_function(db, "gate", 0, SQLITE_UTF8, NULL, gate_fn, NULL, NULL);
}

struct read_log {
    bool gate_opened;
    bool gate_opened_before_answer;
    int n;
    char order[64];
    json_t *gate_rows;
};

static void on_entered(uv_async_t *a)
{
    struct read_log *log = a->data;
    log->gate_opened = true;
    uv_close((uv_handle_t *)a, NULL);
    sem_post(&gate);
}

static void logged(struct read_log *log, char c)
{
    if (log->n < (int)sizeof(log->order) - 1)
        log->order[log->n] = c;
    log->n++;
}

static void on_gate_rows(void *data, json_t *rows)
{
    struct read_log *log = data;
    log->gate_opened_before_answer = log->gate_opened;
    log->gate_rows = json_incref(rows);
    logged(log, 'g');
}

static void on_rows_a(void *data, json_t *rows)
{
    logged(data, rows ? 'a' : 'A');
}

static void on_rows_b(void *data, json_t *rows)
{
    logged(data, rows ? 'b' : 'B');
}

static void test_reads_off_the_loop(void **state)
{
    (void)state;
    char gate_dir[96], err[256];
    snprintf(gate_dir, sizeof(gate_dir), "%s/gate", dir);
    assert_int_equal(mkdir(gate_dir, 0700), 0);
    assert_int_equal(sem_init(&gate, 0, 0), 0);
    assert_int_equal(sqlite3_auto_extension((void (*)(void))gate_register), SQLITE_OK);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct store *s = NULL;
    assert_int_equal(store_open(&loop, gate_dir, &s, err, sizeof(err)), 0);
    struct read_log log = {0};
    int owner_a, owner_b;
    /* Asked in this order, answered in this order; one forgotten, none answered yet. */
    assert_int_equal(
        store_read(s, &owner_a, "SELECT gate() AS open", json_array(), on_gate_rows, &log), 0);
    assert_int_equal(store_read(s, &owner_a, "SELECT 1 AS one", json_array(), on_rows_a, &log), 0);
    assert_int_equal(store_read(s, &owner_b, "SELECT 2 AS two", json_array(), on_rows_b, &log), 0);
    assert_int_equal(
        store_read(s, &owner_b, "SELECT nonsense FROM nowhere", json_array(), on_rows_b, &log), 0);
    assert_int_equal(store_read(s, &owner_a, "SELECT 3", json_array(), on_rows_a, &log), 0);
    store_reads_forget(s, &owner_a);
    assert_int_equal(store_read(s, &owner_a, "SELECT 4", json_array(), on_rows_a, &log), 0);
    assert_int_equal(log.n, 0);
    uv_async_init(&loop, &entered, on_entered);
    entered.data = &log;
    uv_run(&loop, UV_RUN_DEFAULT);
    /* The forgotten ones (g, a, 3) said nothing; a bad read answers NULL (B). */
    assert_string_equal(log.order, "bBa");
    assert_null(log.gate_rows);
    store_close(s);
    assert_int_equal(uv_loop_close(&loop), 0);

    /* Again, not forgotten: the gate opened by the loop while the read waited on another
     * thread. */
    uv_loop_init(&loop);
    assert_int_equal(store_open(&loop, gate_dir, &s, err, sizeof(err)), 0);
    memset(&log, 0, sizeof(log));
    assert_int_equal(
        store_read(s, &owner_a, "SELECT gate() AS open", json_array(), on_gate_rows, &log), 0);
    uv_async_init(&loop, &entered, on_entered);
    entered.data = &log;
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(log.gate_opened_before_answer);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(log.gate_rows, 0), "open")),
                     1);
    assert_false(pthread_equal(gate_thread, pthread_self()));
    json_decref(log.gate_rows);
    struct store_stats st;
    store_stats_get(s, &st);
    assert_int_equal(st.reads, 1);
    assert_int_equal(st.read_batches, 1);

    /* A full queue refuses (and never answers) the read past its limit; a close answers
     * the ones waiting with NULL. */
    memset(&log, 0, sizeof(log));
    for (int i = 0; i < STORE_MAX_PENDING_READS; i++)
        assert_int_equal(store_read(s, &owner_b, "SELECT 1", json_array(), on_rows_a, &log), 0);
    assert_int_equal(store_read(s, &owner_b, "SELECT 1", json_array(), on_rows_b, &log), -EAGAIN);
    store_stats_get(s, &st);
    assert_int_equal(st.reads_rejected, 1);
    store_close(s);
    assert_int_equal(log.n, STORE_MAX_PENDING_READS);
    assert_int_equal(log.order[0], 'A');
    assert_int_equal(uv_loop_close(&loop), 0);
    sqlite3_reset_auto_extension();
    sem_destroy(&gate);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_by_pool),
        cmocka_unit_test(test_out_of_order_and_duplicates),
        cmocka_unit_test(test_forward_progress_fills_fields),
        cmocka_unit_test(test_group_commit_on_loop),
        cmocka_unit_test(test_schema_version_and_wal),
        cmocka_unit_test(test_job_counts_follow_jobs),
        cmocka_unit_test(test_reads_off_the_loop),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
