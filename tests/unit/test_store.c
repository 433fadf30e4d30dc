/* The store on a real SQLite file, or (HATCHERY_TEST_POSTGRESQL: a conninfo, from
 * tests/postgresql/cluster.sh) on a real PostgreSQL server: migrations, dedup by delivery
 * id, status only moving forward, group commit through a real libuv loop, reads off the
 * loop, and refusing a newer schema. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sqlite3.h>
#include <errno.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"
#include "store_backend.h"

static char dir[64];
/* The PostgreSQL server's conninfo, or NULL: SQLite. */
static const char *pg;

/* A store of the test's own, by `name`: SQLite in `dir`/`name` ("main": `dir` itself), or
 * a PostgreSQL database made afresh the first time the name is used in this run. */
static int open_store(uv_loop_t *loop, const char *name, struct store **s, char *err,
                      size_t err_size)
{
    char where[512];
    if (!pg) {
        if (strcmp(name, "main") == 0)
            snprintf(where, sizeof(where), "%s", dir);
        else
            snprintf(where, sizeof(where), "%s/%s", dir, name);
        if (mkdir(where, 0700) < 0 && errno != EEXIST)
            return -errno;
        return store_open(loop, where, s, err, err_size);
    }
    static char made[16][32];
    bool fresh = true;
    for (size_t i = 0; i < 16 && made[i][0]; i++)
        fresh = fresh && strcmp(made[i], name) != 0;
    if (fresh) {
        PGconn *c = PQconnectdb(pg);
        assert_int_equal(PQstatus(c), CONNECTION_OK);
        char sql[128];
        snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS hatchery_test_%s", name);
        PQclear(PQexec(c, sql));
        snprintf(sql, sizeof(sql), "CREATE DATABASE hatchery_test_%s", name);
        PGresult *res = PQexec(c, sql);
        assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
        PQclear(res);
        PQfinish(c);
        for (size_t i = 0; i < 16; i++)
            if (!made[i][0]) {
                snprintf(made[i], sizeof(made[i]), "%s", name);
                break;
            }
    }
    snprintf(where, sizeof(where), "%s dbname=hatchery_test_%s", pg, name);
    const struct store_location at = {.postgresql = where};
    return store_open_at(loop, &at, s, err, err_size);
}

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
    assert_int_equal(open_store(NULL, "main", &s, err, sizeof(err)), 0);
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
    assert_int_equal(open_store(NULL, "main", &s, err, sizeof(err)), 0);
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
    assert_int_equal(open_store(&loop, "main", &s, err, sizeof(err)), 0);
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
    assert_int_equal(open_store(NULL, "main", &s, err, sizeof(err)), 0);
    json_t *jobs = NULL;
    assert_int_equal(store_jobs_list(s, NULL, "queued", 0, keep_rows, &jobs), 0);
    assert_true(json_array_size(jobs) >= 2);
    json_decref(jobs);
    store_close(s);
}

static void test_schema_version_and_wal(void **state)
{
    (void)state;
    struct store *s = NULL;
    char err[256];
    if (pg) {
        /* PostgreSQL keeps its schema version in a table of its own. */
        assert_int_equal(open_store(NULL, "main", &s, err, sizeof(err)), 0);
        json_t *rows = store_query_sync(s, "SELECT version FROM hatchery_schema", json_array());
        assert_int_equal(json_array_size(rows), 1);
        assert_int_equal(json_integer_value(json_object_get(json_array_get(rows, 0), "version")),
                         STORE_SCHEMA_VERSION);
        json_decref(rows);
        assert_int_equal(
            store_sql_apply_sync(s, "UPDATE hatchery_schema SET version = 99", json_array()),
            STORE_APPLIED);
        store_close(s);
    } else {
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
        sqlite3_exec(db, "PRAGMA user_version=99", NULL, NULL, NULL);
        sqlite3_close(db);
    }
    /* A store from a newer hatcheryd is refused, not rewritten. */
    assert_int_equal(open_store(NULL, "main", &s, err, sizeof(err)), -EPROTO);
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
static void assert_counts_match(struct store *s)
{
    char kept[512] = "", grouped[512] = "";
    read_counts(s, kept);
    json_t *rows = store_query_sync(s,
                                    "SELECT nullif(coalesce(pool, ''), '') AS pool, status, "
                                    "count(*) AS n FROM jobs GROUP BY coalesce(pool, ''), status "
                                    "ORDER BY coalesce(pool, ''), status",
                                    json_array());
    assert_non_null(rows);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        count_row(grouped, json_string_value(json_object_get(row, "pool")),
                  json_string_value(json_object_get(row, "status")),
                  json_integer_value(json_object_get(row, "n")));
    }
    json_decref(rows);
    assert_string_equal(kept, grouped);
}

static void sql_now(struct store *s, const char *sql)
{
    assert_int_equal(store_sql_apply_sync(s, sql, json_array()), STORE_APPLIED);
}

static void test_job_counts_follow_jobs(void **state)
{
    (void)state;
    struct store *s = NULL;
    char err[256], path[128];
    assert_int_equal(open_store(NULL, "counts", &s, err, sizeof(err)), 0);
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
    assert_counts_match(s);
    /* A pool renamed under a job, a job forgotten (history pruning), and a status write
     * that changes nothing. */
    sql_now(s, "UPDATE jobs SET pool = 'other' WHERE id = 1");
    sql_now(s, "DELETE FROM jobs WHERE id = 2");
    sql_now(s, "UPDATE jobs SET status = status WHERE id = 3");
    assert_counts_match(s);
    store_close(s);
    if (pg)
        return; /* PostgreSQL's first schema is version 8: it has no older one to migrate */

    /* A store from before the counts (schema 3) gets them from the jobs it holds. */
    snprintf(path, sizeof(path), "%s/counts/hatchery.db", dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "DROP INDEX jobs_unverified; DROP INDEX deliveries_body_sha256;"
                                  "DROP INDEX jobs_queued; DROP INDEX jobs_in_progress;"
                                  "ALTER TABLE jobs DROP COLUMN unverified;"
                                  "ALTER TABLE deliveries DROP COLUMN body_sha256;"
                                  "ALTER TABLE runners DROP COLUMN image;"
                                  "DROP TABLE scale_sets; DROP TABLE scale_set_jobs;"
                                  "DROP TABLE leases; DROP TABLE lease_fences;"
                                  "DROP TABLE lease_members;"
                                  "DROP TRIGGER job_counts_insert; DROP TRIGGER job_counts_delete;"
                                  "DROP TRIGGER job_counts_update; DROP TABLE job_counts;"
                                  "PRAGMA user_version=3;"
                                  "UPDATE jobs SET status = 'completed' WHERE id = 1;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(open_store(NULL, "counts", &s, err, sizeof(err)), 0);
    assert_counts_match(s);
    kept[0] = 0;
    read_counts(s, kept);
    assert_string_equal(kept, "-/queued=1;other/completed=1;");
    store_close(s);
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
    char err[256];
    assert_int_equal(open_store(NULL, "queue", &s, err, sizeof(err)), 0);
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
    sql_now(s, "UPDATE jobs SET unverified = 1 WHERE id = 11");
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
    if (pg)
        skip(); /* store.c's own machinery, the same for both backends: shown on SQLite */
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

/* ---- every typed call, on whichever backend runs this ------------------------------------ */

struct typed {
    int err;
    size_t n;
    int64_t ids[8];
    char repos[8][WEBHOOK_MAX_NAME_BYTES + 1];
    struct store_runner_row rows[4];
    int64_t value, value2;
    json_t *json;
};

static void on_refs(void *data, int err, const struct store_job_ref *jobs, size_t n)
{
    struct typed *t = data;
    t->err = err;
    t->n = n;
    for (size_t i = 0; i < n && i < 8; i++) {
        t->ids[i] = jobs[i].id;
        snprintf(t->repos[i], sizeof(t->repos[i]), "%s", jobs[i].repository);
    }
}

static void on_runner_rows(void *data, int err, const struct store_runner_row *rows, size_t n)
{
    struct typed *t = data;
    t->err = err;
    t->n = n;
    memcpy(t->rows, rows, (n < 4 ? n : 4) * sizeof(*rows));
}

static void on_queued_at(void *data, int64_t ms)
{
    ((struct typed *)data)->value = ms;
}

static void on_cursor(void *data, int err, int64_t id, int64_t last)
{
    struct typed *t = data;
    t->err = err;
    t->value = id;
    t->value2 = last;
}

static void on_json(void *data, json_t *rows)
{
    struct typed *t = data;
    json_decref(t->json);
    t->json = json_incref(rows);
}

static void on_written(void *data, int result)
{
    *(int *)data = result;
}

static void test_typed_calls(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct store *s = NULL;
    char err[256];
    assert_int_equal(open_store(&loop, "typed", &s, err, sizeof(err)), 0);
    struct typed t = {0};
    int64_t big = INT64_C(29679449589); /* past 32 bits, as GitHub's job ids are */
    int64_t now = INT64_C(1764460800000);

    /* Jobs: three queued, one in progress, one from a late delivery. */
    struct job_event *evs[] = {
        event("t1", big + 1, JOB_QUEUED, NULL),
        event("t2", big + 2, JOB_QUEUED, NULL),
        event("t3", big + 3, JOB_IN_PROGRESS, "r3"),
        event("t4", big + 4, JOB_QUEUED, NULL),
    };
    evs[3]->unverified = true;
    int results[4] = {-1, -1, -1, -1};
    for (int i = 0; i < 4; i++)
        assert_int_equal(store_job_event_submit(s, evs[i], on_written, &results[i]), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    for (int i = 0; i < 4; i++)
        assert_int_equal(results[i], STORE_APPLIED);

    assert_int_equal(store_jobs_unverified(s, NULL, 10, on_refs, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.err, 0);
    assert_int_equal(t.n, 1);
    assert_true(t.ids[0] == big + 4);
    assert_string_equal(t.repos[0], "pytorch/pytorch");
    assert_int_equal(store_job_verified(s, big + 4, NULL, NULL), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(store_job_queued_at(s, NULL, big + 1, on_queued_at, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(t.value == 1000 + big + 1);
    assert_int_equal(store_job_queued_at(s, NULL, 1, on_queued_at, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(t.value == -1);

    /* The queue: the three verified ones now, oldest first; one supplied. */
    assert_int_equal(store_jobs_unsupplied(s, NULL, "ppc", 10, on_refs, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.n, 3);
    assert_true(t.ids[0] == big + 1 && t.ids[2] == big + 4);
    assert_int_equal(store_job_supplied(s, big + 1, now), 0);
    uv_run(&loop, UV_RUN_DEFAULT); /* a read sees what is committed when it runs */
    assert_int_equal(store_jobs_unsupplied(s, NULL, "ppc", 10, on_refs, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.n, 2);

    /* Stuck in progress, and retired: a status never lowered. */
    assert_int_equal(store_jobs_stuck(s, NULL, "ppc", now, 10, on_refs, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.n, 1);
    assert_true(t.ids[0] == big + 3);
    int retired = -1;
    assert_int_equal(
        store_job_retire(s, big + 3, JOB_COMPLETED, "success", now, on_written, &retired), 0);
    assert_int_equal(store_job_retire(s, big + 3, JOB_QUEUED, NULL, now, NULL, NULL), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(retired, STORE_APPLIED);
    assert_int_equal(store_jobs_list(s, NULL, "completed", 0, on_json, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(json_array_size(t.json), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(t.json, 0), "conclusion")),
                        "success");

    /* GitHub's list against the store: which it never saw, which it no longer lists. */
    char ids[128];
    snprintf(ids, sizeof(ids), "[%lld, %lld, 7, 8]", (long long)(big + 1), (long long)(big + 2));
    assert_int_equal(store_job_ids_unknown(s, NULL, ids, on_refs, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.err, 0);
    assert_int_equal(t.n, 2);
    assert_true(t.ids[0] + t.ids[1] == 15);
    assert_int_equal(store_job_ids_unknown(s, NULL, "[]", on_refs, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.n, 0);
    snprintf(ids, sizeof(ids), "[%lld]", (long long)(big + 1));
    assert_int_equal(
        store_jobs_queued_unlisted(s, NULL, "pytorch/pytorch", now, ids, 10, on_refs, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.n, 2); /* big + 2 and big + 4 */
    assert_int_equal(
        store_jobs_queued_unlisted(s, NULL, "pytorch/pytorch", now, "[]", 10, on_refs, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.n, 3);
    assert_int_equal(store_job_touch(s, big + 2, now + 1), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(
        store_jobs_queued_unlisted(s, NULL, "pytorch/pytorch", now, ids, 10, on_refs, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.n, 1); /* touched after the cut-off: not asked about yet */

    /* Runners: made, moved, listed, one of an earlier process adopted or failed. */
    assert_int_equal(store_runner_next_id_sync(s), 1);
    const struct store_runner_new r1 = {.id = 1,
                                        .name = "hatchery-t-1",
                                        .pool = "ppc",
                                        .host = "h",
                                        .state = "pending",
                                        .vcpus = 2,
                                        .memory_mib = 4096,
                                        .created_ms = now,
                                        .image = "b1"};
    const struct store_runner_new r2 = {.id = 2,
                                        .name = "hatchery-t-2",
                                        .pool = "ppc",
                                        .host = "h",
                                        .state = "pending",
                                        .vcpus = 2,
                                        .memory_mib = 4096,
                                        .created_ms = now};
    int inserted = -1;
    assert_int_equal(store_runner_insert(s, &r1, on_written, &inserted), 0);
    assert_int_equal(store_runner_insert(s, &r2, NULL, NULL), 0);
    const struct store_runner_update u = {.id = 1,
                                          .state = "busy",
                                          .host = "h",
                                          .github_runner_id = big,
                                          .job_id = big + 2,
                                          .exit_code = -1,
                                          .online_ms = now,
                                          .busy_ms = now,
                                          .updated_ms = now};
    assert_int_equal(store_runner_update(s, &u, NULL, NULL), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(inserted, STORE_APPLIED);
    assert_int_equal(store_runners_live_before(s, NULL, 3, on_runner_rows, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.n, 2);
    const struct store_runner_row *row = t.rows[0].id == 1 ? &t.rows[0] : &t.rows[1];
    assert_string_equal(row->state, "busy");
    assert_true(row->github_runner_id == big && row->job_id == big + 2);
    assert_int_equal(row->exit_code, -1);
    assert_string_equal(row->image, "b1");

    /* The jobs of the live runners, as another instance of the controller stored them:
     * hatchery-t-1 (busy) has one in progress; hatchery-t-2 (pending) is not live yet. */
    struct job_event *given[] = {
        event("t5", big + 5, JOB_IN_PROGRESS, "hatchery-t-1"),
        event("t6", big + 6, JOB_IN_PROGRESS, "hatchery-t-2"),
    };
    for (int i = 0; i < 2; i++)
        assert_int_equal(store_job_event_submit(s, given[i], NULL, NULL), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(store_jobs_of_live_runners(s, NULL, now, on_json, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(json_array_size(t.json), 1);
    json_t *job = json_array_get(t.json, 0);
    assert_true(json_integer_value(json_object_get(job, "id")) == big + 5);
    assert_string_equal(json_string_value(json_object_get(job, "status")), "in_progress");
    assert_string_equal(json_string_value(json_object_get(job, "runner_name")), "hatchery-t-1");
    /* Its end: news after `since_ms`, not before. */
    assert_int_equal(store_job_retire(s, big + 5, JOB_COMPLETED, "success", now, NULL, NULL), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(store_jobs_of_live_runners(s, NULL, now - 1, on_json, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(json_array_size(t.json), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(t.json, 0), "status")),
                        "completed");
    assert_int_equal(store_jobs_of_live_runners(s, NULL, now, on_json, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(json_array_size(t.json), 0);

    assert_int_equal(store_runner_mark_deleted(s, 2, "gone", now), 0);
    assert_int_equal(store_runner_mark_deleted(s, 1, "gone", now), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(store_runners_list(s, NULL, false, on_json, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(json_array_size(t.json), 0);
    assert_int_equal(store_runners_list(s, NULL, true, on_json, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(json_array_size(t.json), 2);
    /* Pruning keeps the newest record, so no id is ever given twice. */
    assert_int_equal(store_runners_prune(s, now + 1), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(store_runners_list(s, NULL, true, on_json, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(json_array_size(t.json), 1);
    assert_int_equal(store_runner_next_id_sync(s), 3);

    /* Hosts drained, and undrained. */
    assert_false(store_host_drained_sync(s, "h"));
    assert_int_equal(store_host_drained_set(s, "h", true), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(store_host_drained_sync(s, "h"));
    assert_int_equal(store_host_drained_set(s, "h", false), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_false(store_host_drained_sync(s, "h"));

    /* A scale set's message: one job told twice in it (the later state wins, the runner's
     * name stays), then the cursor, which never moves back for the same scale set. */
    int committed = -1;
    json_t *news = json_pack("[{s:s, s:s}, {s:s, s:s, s:s}, {s:s, s:s}]", "job_id", "j1", "state",
                             "assigned", "job_id", "j1", "state", "started", "runner_name",
                             "hatchery-t-1", "job_id", "j1", "state", "completed");
    assert_int_equal(
        store_scaleset_message_commit(s, "ss", 7, 41, news, now, on_written, &committed), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(committed, STORE_APPLIED);
    json_t *jobs = store_query_sync(
        s, "SELECT state, runner_name FROM scale_set_jobs WHERE scale_set = 'ss'", json_array());
    assert_int_equal(json_array_size(jobs), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(jobs, 0), "state")),
                        "completed");
    assert_string_equal(json_string_value(json_object_get(json_array_get(jobs, 0), "runner_name")),
                        "hatchery-t-1");
    json_decref(jobs);
    assert_int_equal(store_scaleset_message_commit(s, "ss", 7, 40, json_array(), now, NULL, NULL),
                     0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(store_scaleset_cursor(s, NULL, "ss", on_cursor, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(t.err, 0);
    assert_true(t.value == 7 && t.value2 == 41);
    /* A new scale set of the same name starts its queue anew. */
    assert_int_equal(store_scaleset_message_commit(s, "ss", 8, 3, json_array(), now, NULL, NULL),
                     0);
    uv_run(&loop, UV_RUN_DEFAULT);
    int64_t id = 0, last = 0;
    assert_int_equal(store_scaleset_cursor_sync(s, "ss", &id, &last), 0);
    assert_true(id == 8 && last == 3);
    /* A message whose news cannot be kept leaves the cursor where it was. */
    committed = -1;
    news = json_pack("[{s:s, s:s}]", "job_id", "j2", "state", "assigned");
    assert_int_equal(store_sql_submit(s, "DROP TABLE scale_set_jobs", json_array(), NULL, NULL), 0);
    assert_int_equal(
        store_scaleset_message_commit(s, "ss", 8, 4, news, now, on_written, &committed), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(committed, -EIO);
    assert_int_equal(store_scaleset_cursor_sync(s, "ss", &id, &last), 0);
    assert_true(last == 3);

    /* Old history goes. */
    assert_int_equal(store_jobs_prune(s, now + 1), 0);
    store_deliveries_prune(s, -3600);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(store_jobs_list(s, NULL, "completed", 0, on_json, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(json_array_size(t.json), 0);
    assert_int_equal(store_deliveries_count(s, NULL, on_json, &t), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(t.json, 0), "n")), 0);
    json_decref(t.json);
    store_close(s);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A statement on a connection of the test's own (another instance, or a takeover). */
static void pg_run(const char *name, const char *sql)
{
    char where[512];
    snprintf(where, sizeof(where), "%s dbname=hatchery_test_%s", pg, name);
    PGconn *c = PQconnectdb(where);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    PGresult *res = PQexec(c, sql);
    assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
    PQclear(res);
    PQfinish(c);
}

/* The leader's fence (store_fence_set): a follower's writes of the leader's kind refused
 * (-EPERM), a job event taken from anyone; the leader's taken at the epoch lease_fences
 * holds, refused (-ESTALE) once a takeover has moved it on, and counted. */
static void test_fence(void **state)
{
    (void)state;
    if (!pg)
        skip(); /* a SQLite store has one controller: nothing to fence */
    char err[256];
    struct store *s = NULL;
    assert_int_equal(open_store(NULL, "fence", &s, err, sizeof(err)), 0);
    const char *drain = "INSERT INTO hosts(name, drained) VALUES (?1, 1) "
                        "ON CONFLICT (name) DO UPDATE SET drained = 1";
    /* Not fenced yet: one controller, as with SQLite. */
    assert_int_equal(store_sql_apply_sync(s, drain, json_pack("[s]", "h0")), STORE_APPLIED);
    assert_int_equal(store_fence_set(s, "it", 0), 0);
    assert_int_equal(store_sql_apply_sync(s, drain, json_pack("[s]", "h1")), -EPERM);
    apply(s, event("fence-d1", 7001, JOB_QUEUED, NULL), STORE_APPLIED);
    /* Epoch 3 leads. */
    pg_run("fence", "INSERT INTO lease_fences VALUES ('it', 3)");
    assert_int_equal(store_fence_set(s, "it", 3), 0);
    assert_int_equal(store_sql_apply_sync(s, drain, json_pack("[s]", "h2")), STORE_APPLIED);
    /* Another instance took over. */
    pg_run("fence", "UPDATE lease_fences SET epoch = 4 WHERE controller_id = 'it'");
    assert_int_equal(store_sql_apply_sync(s, drain, json_pack("[s]", "h3")), -ESTALE);
    json_t *group = json_pack("[[s, [s]]]", drain, "h4");
    assert_int_equal(store_sql_group_apply_sync(s, group), -ESTALE);
    apply(s, event("fence-d2", 7001, JOB_IN_PROGRESS, "r"), STORE_APPLIED);
    json_t *rows = store_query_sync(s, "SELECT name FROM hosts ORDER BY name", json_array());
    assert_int_equal(json_array_size(rows), 2); /* h0, h2 */
    assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 1), "name")), "h2");
    json_decref(rows);
    struct store_stats st;
    store_stats_get(s, &st);
    assert_int_equal(st.writes_fenced, 3);
    store_close(s);
}

int main(void)
{
    pg = getenv("HATCHERY_TEST_POSTGRESQL");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_by_pool),
        cmocka_unit_test(test_out_of_order_and_duplicates),
        cmocka_unit_test(test_forward_progress_fills_fields),
        cmocka_unit_test(test_group_commit_on_loop),
        cmocka_unit_test(test_schema_version_and_wal),
        cmocka_unit_test(test_job_counts_follow_jobs),
        cmocka_unit_test(test_reads_off_the_loop),
        cmocka_unit_test(test_typed_calls),
        cmocka_unit_test(test_fence),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
