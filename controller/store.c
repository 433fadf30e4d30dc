/* SQLite store with group commit on a libuv worker; see store.h. */
#include "store.h"

#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "hatchery/limits.h"
#include "log.h"
#include "wall_clock.h"

enum write_kind {
    WRITE_JOB_EVENT,
    WRITE_PRUNE_DELIVERIES,
    WRITE_SQL,
    WRITE_KIND_MAX,
};

struct pending_write {
    enum write_kind kind;
    struct job_event *event;
    int64_t prune_max_age_s;
    char *sql;      /* WRITE_SQL */
    json_t *params; /* WRITE_SQL: positional parameters */
    store_write_cb cb;
    void *data;
    int result;
    struct pending_write *next;
};

/* A read waiting for, or on, the store's reader. `cb` NULL: its owner forgot it. */
struct pending_read {
    const void *owner;
    char *sql;
    json_t *params;
    store_read_adapter adapt;
    void (*cb)(void);
    void *data;
    json_t *rows; /* the answer, made on the worker; NULL: the read failed */
    struct pending_read *next;
};

struct store {
    uv_loop_t *loop;
    sqlite3 *writer; /* used by one thread at a time: a worker during a batch, else none */
    sqlite3 *reader; /* likewise: a worker during a batch of reads, or a start-up read */
    sqlite3_stmt *insert_delivery;
    sqlite3_stmt *upsert_job;
    sqlite3_stmt *prune_deliveries;

    struct pending_write *queue_head, *queue_tail;
    size_t queue_len;
    struct pending_write *batch; /* in flight on a worker */
    bool in_flight;
    bool closing;
    uv_idle_t flush_idle;
    uv_work_t work;
    uint64_t batch_ns; /* written by the worker, read after it in batch_after_cb */
    struct store_stats stats;

    struct pending_read *reads_head, *reads_tail;
    size_t reads_len;
    struct pending_read *read_batch; /* on a worker */
    bool reads_in_flight;
    uv_work_t read_work;
    uint64_t read_batch_ns;
};

/* Schema migrations, applied in order; user_version records how many ran. */
static const char *const migrations[] = {
    /* 1 */
    "CREATE TABLE deliveries ("
    "  id TEXT PRIMARY KEY,"
    "  event TEXT NOT NULL,"
    "  received_at INTEGER NOT NULL"
    ");"
    "CREATE INDEX deliveries_received_at ON deliveries(received_at);"
    "CREATE TABLE jobs ("
    "  id INTEGER PRIMARY KEY,"
    "  run_id INTEGER NOT NULL,"
    "  installation_id INTEGER,"
    "  repository TEXT NOT NULL,"
    "  workflow TEXT,"
    "  name TEXT,"
    "  labels TEXT NOT NULL,"
    "  pool TEXT,"
    "  status TEXT NOT NULL,"
    "  status_rank INTEGER NOT NULL,"
    "  conclusion TEXT,"
    "  runner_name TEXT,"
    "  queued_at INTEGER,"
    "  started_at INTEGER,"
    "  completed_at INTEGER,"
    "  updated_at INTEGER NOT NULL"
    ");"
    "CREATE INDEX jobs_pool_status ON jobs(pool, status);"
    "CREATE INDEX jobs_updated_at ON jobs(updated_at);",
    /* 2: runners and hosts */
    "CREATE TABLE runners ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  name TEXT UNIQUE NOT NULL,"
    "  pool TEXT NOT NULL,"
    "  host TEXT,"
    "  state TEXT NOT NULL,"
    "  vcpus INTEGER NOT NULL,"
    "  memory_mib INTEGER NOT NULL,"
    "  github_runner_id INTEGER,"
    "  job_id INTEGER,"
    "  exit_code INTEGER,"
    "  reason TEXT,"
    "  created_at INTEGER NOT NULL,"
    "  online_at INTEGER,"
    "  busy_at INTEGER,"
    "  finished_at INTEGER,"
    "  updated_at INTEGER NOT NULL"
    ");"
    "CREATE INDEX runners_state ON runners(state);"
    "CREATE TABLE hosts ("
    "  name TEXT PRIMARY KEY,"
    "  drained INTEGER NOT NULL DEFAULT 0"
    ");",
    /* 3: when a runner came online for a queued job (demand-based: the pool's oldest) */
    "ALTER TABLE jobs ADD COLUMN supplied_at INTEGER;",
    /* 4: jobs counted by pool and status as they change, so /metrics and `hatchery
     * capacity` read a few rows instead of grouping every job on each call. An unmatched
     * job's pool is '' here (NULL would not be one key). */
    "CREATE TABLE job_counts ("
    "  pool TEXT NOT NULL,"
    "  status TEXT NOT NULL,"
    "  n INTEGER NOT NULL,"
    "  PRIMARY KEY (pool, status)"
    ") WITHOUT ROWID;"
    "INSERT INTO job_counts SELECT coalesce(pool, ''), status, count(*) FROM jobs GROUP BY 1, 2;"
    "CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs BEGIN"
    "  INSERT INTO job_counts VALUES (coalesce(NEW.pool, ''), NEW.status, 1)"
    "    ON CONFLICT (pool, status) DO UPDATE SET n = n + 1;"
    "END;"
    "CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs BEGIN"
    "  UPDATE job_counts SET n = n - 1 WHERE pool = coalesce(OLD.pool, '') AND status = OLD.status;"
    "END;"
    "CREATE TRIGGER job_counts_update AFTER UPDATE OF pool, status ON jobs"
    "  WHEN coalesce(OLD.pool, '') != coalesce(NEW.pool, '') OR OLD.status != NEW.status BEGIN"
    "  UPDATE job_counts SET n = n - 1 WHERE pool = coalesce(OLD.pool, '') AND status = OLD.status;"
    "  INSERT INTO job_counts VALUES (coalesce(NEW.pool, ''), NEW.status, 1)"
    "    ON CONFLICT (pool, status) DO UPDATE SET n = n + 1;"
    "END;",
    /* 5: replays. A delivery is known by its body's hash too, so a captured delivery sent
     * again under a new id is a duplicate; a late queued job waits for GitHub's word. */
    "ALTER TABLE deliveries ADD COLUMN body_sha256 TEXT;"
    "CREATE UNIQUE INDEX deliveries_body_sha256 ON deliveries(body_sha256);"
    "ALTER TABLE jobs ADD COLUMN unverified INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX jobs_unverified ON jobs(id) WHERE unverified = 1;"
    /* The oldest queued job of each pool (/metrics), read without the finished ones. */
    "CREATE INDEX jobs_queued ON jobs(pool, queued_at) WHERE status = 'queued';",
    /* 6: jobs in progress past their pool's time limit (the reconciler asks about them),
     * read without the finished ones. */
    "CREATE INDEX jobs_in_progress ON jobs(pool, updated_at) WHERE status = 'in_progress';",
    /* 7: the build of the image each runner booted, so that idle runners of a replaced
     * image are rotated out, after a restart too. */
    "ALTER TABLE runners ADD COLUMN image TEXT;",
    /* 8: runner scale sets: where each one's message queue was read up to (a message is
     * deleted from the queue only once what it says is here), and its jobs as the service
     * last told them. */
    "CREATE TABLE scale_sets ("
    "  name TEXT PRIMARY KEY,"
    "  scale_set_id INTEGER NOT NULL,"
    "  last_message_id INTEGER NOT NULL DEFAULT 0,"
    "  updated_at INTEGER NOT NULL"
    ");"
    "CREATE TABLE scale_set_jobs ("
    "  scale_set TEXT NOT NULL,"
    "  job_id TEXT NOT NULL,"
    "  state TEXT NOT NULL,"
    "  runner_name TEXT,"
    "  result TEXT,"
    "  labels TEXT,"
    "  updated_at INTEGER NOT NULL,"
    "  PRIMARY KEY (scale_set, job_id)"
    ") WITHOUT ROWID;",
};

static int exec_sql(sqlite3 *db, const char *sql, char *err, size_t err_size)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(err, err_size, "%s", msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        return -EIO;
    }
    return 0;
}

static int open_db(const char *path, sqlite3 **ret_db, char *err, size_t err_size)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(
        path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, err_size, "cannot open %s: %s", path,
                 db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return -EIO;
    }
    sqlite3_busy_timeout(db, 5000);
    sqlite3_extended_result_codes(db, 1);
    *ret_db = db;
    return 0;
}

static int migrate(sqlite3 *db, const char *path, char *err, size_t err_size)
{
    char msg[512];
    if (exec_sql(db, "PRAGMA journal_mode=WAL;", msg, sizeof(msg)) < 0) {
        snprintf(err, err_size, "%s: cannot enable WAL: %s", path, msg);
        return -EIO;
    }
    sqlite3_stmt *st = NULL;
    int version = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    const int latest = (int)(sizeof(migrations) / sizeof(migrations[0]));
    if (version < 0) {
        snprintf(err, err_size, "%s: cannot read schema version: %s", path, sqlite3_errmsg(db));
        return -EIO;
    }
    if (version > latest) {
        snprintf(err, err_size,
                 "%s: schema version %d is newer than this hatcheryd knows (%d): refusing to "
                 "touch it",
                 path, version, latest);
        return -EPROTO;
    }
    for (int v = version; v < latest; v++) {
        char sql[64];
        snprintf(sql, sizeof(sql), "PRAGMA user_version=%d;", v + 1);
        if (exec_sql(db, "BEGIN IMMEDIATE;", msg, sizeof(msg)) < 0 ||
            exec_sql(db, migrations[v], msg, sizeof(msg)) < 0 ||
            exec_sql(db, sql, msg, sizeof(msg)) < 0 ||
            exec_sql(db, "COMMIT;", msg, sizeof(msg)) < 0) {
            exec_sql(db, "ROLLBACK;", sql, sizeof(sql));
            snprintf(err, err_size, "%s: migration to schema version %d failed: %s", path, v + 1,
                     msg);
            return -EIO;
        }
        log_info("store.migrated", "path=%s version=%d", path, v + 1);
    }
    return 0;
}

static int prepare(sqlite3 *db, const char *sql, sqlite3_stmt **ret, char *err, size_t err_size)
{
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, ret, NULL) != SQLITE_OK) {
        snprintf(err, err_size, "cannot prepare statement: %s", sqlite3_errmsg(db));
        return -EIO;
    }
    return 0;
}

static void flush_idle_cb(uv_idle_t *idle);

int store_open(uv_loop_t *loop, const char *dir, struct store **ret_store, char *err,
               size_t err_size)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof(path), "%s/hatchery.db", dir) >= sizeof(path)) {
        snprintf(err, err_size, "state directory path too long");
        return -ENAMETOOLONG;
    }
    struct store *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    s->loop = loop;
    int r = open_db(path, &s->writer, err, err_size);
    if (r < 0)
        goto fail;
    r = migrate(s->writer, path, err, err_size);
    if (r < 0)
        goto fail;
    char msg[256];
    /* FULL: with WAL this fsyncs the log at every commit, so an acknowledged write survives
     * power loss, not only a crash. Group commit pays for it once per batch. temp_store:
     * each write's savepoint journal stays in memory (in a temporary file, its pages were a
     * third of a commit's writes). */
    if (exec_sql(s->writer,
                 "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;", msg,
                 sizeof(msg)) < 0) {
        snprintf(err, err_size, "%s: %s", path, msg);
        r = -EIO;
        goto fail;
    }
    r = open_db(path, &s->reader, err, err_size);
    if (r < 0)
        goto fail;
    r = prepare(s->writer,
                "INSERT OR IGNORE INTO deliveries(id, event, received_at, body_sha256) "
                "VALUES(?1, ?2, ?3, ?4)",
                &s->insert_delivery, err, err_size);
    if (r < 0)
        goto fail;
    r = prepare(s->writer,
                "INSERT INTO jobs(id, run_id, installation_id, repository, workflow, name, "
                "labels, pool, status, status_rank, conclusion, runner_name, queued_at, "
                "started_at, completed_at, updated_at, unverified) "
                "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
                "CASE WHEN ?10 = 1 THEN ?13 END, CASE WHEN ?10 = 2 THEN ?13 END, "
                "CASE WHEN ?10 = 3 THEN ?13 END, ?13, ?14) "
                "ON CONFLICT(id) DO UPDATE SET "
                "status = excluded.status, status_rank = excluded.status_rank, "
                "installation_id = COALESCE(jobs.installation_id, excluded.installation_id), "
                "workflow = COALESCE(jobs.workflow, excluded.workflow), "
                "name = COALESCE(jobs.name, excluded.name), "
                "runner_name = COALESCE(excluded.runner_name, jobs.runner_name), "
                "conclusion = COALESCE(excluded.conclusion, jobs.conclusion), "
                "queued_at = COALESCE(jobs.queued_at, excluded.queued_at), "
                "started_at = COALESCE(jobs.started_at, excluded.started_at), "
                "completed_at = COALESCE(jobs.completed_at, excluded.completed_at), "
                "updated_at = excluded.updated_at "
                "WHERE excluded.status_rank > jobs.status_rank",
                &s->upsert_job, err, err_size);
    if (r < 0)
        goto fail;
    r = prepare(s->writer, "DELETE FROM deliveries WHERE received_at < ?1", &s->prune_deliveries,
                err, err_size);
    if (r < 0)
        goto fail;
    if (loop) {
        /* Started only while writes wait, so it keeps the loop alive exactly then. */
        uv_idle_init(loop, &s->flush_idle);
    }
    *ret_store = s;
    return 0;
fail:
    sqlite3_finalize(s->insert_delivery);
    sqlite3_finalize(s->upsert_job);
    sqlite3_finalize(s->prune_deliveries);
    sqlite3_close(s->reader);
    sqlite3_close(s->writer);
    free(s);
    return r;
}

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static json_t *column_json(sqlite3_stmt *st, int i);

static void bind_json_params(sqlite3_stmt *st, json_t *params)
{
    size_t i;
    json_t *v;
    json_array_foreach(params, i, v)
    {
        int at = (int)i + 1;
        if (json_is_integer(v))
            sqlite3_bind_int64(st, at, json_integer_value(v));
        else if (json_is_string(v))
            sqlite3_bind_text(st, at, json_string_value(v), -1, SQLITE_TRANSIENT);
        else if (json_is_real(v))
            sqlite3_bind_double(st, at, json_real_value(v));
        else
            sqlite3_bind_null(st, at);
    }
}

/* Inside a transaction. Returns enum store_result or -EIO. */
static int apply_job_event(struct store *s, const struct job_event *ev)
{
    sqlite3_stmt *st = s->insert_delivery;
    sqlite3_reset(st);
    sqlite3_bind_text(st, 1, ev->delivery_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, "workflow_job", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, ev->received_at_ms / 1000);
    bind_text_or_null(st, 4, ev->body_sha256[0] ? ev->body_sha256 : NULL);
    if (sqlite3_step(st) != SQLITE_DONE) {
        log_error("store.write_failed", "what=delivery error=\"%s\"", sqlite3_errmsg(s->writer));
        return -EIO;
    }
    if (sqlite3_changes(s->writer) == 0)
        return STORE_DUPLICATE;

    st = s->upsert_job;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, ev->job_id);
    sqlite3_bind_int64(st, 2, ev->run_id);
    if (ev->installation_id)
        sqlite3_bind_int64(st, 3, ev->installation_id);
    else
        sqlite3_bind_null(st, 3);
    sqlite3_bind_text(st, 4, ev->repository, -1, SQLITE_STATIC);
    bind_text_or_null(st, 5, ev->workflow);
    bind_text_or_null(st, 6, ev->job_name);
    sqlite3_bind_text(st, 7, ev->labels_json, -1, SQLITE_STATIC);
    bind_text_or_null(st, 8, ev->pool);
    sqlite3_bind_text(st, 9, job_status_names[ev->status], -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 10, (int)ev->status);
    bind_text_or_null(st, 11, ev->conclusion);
    bind_text_or_null(st, 12, ev->runner_name);
    sqlite3_bind_int64(st, 13, ev->received_at_ms);
    sqlite3_bind_int(st, 14, ev->unverified);
    if (sqlite3_step(st) != SQLITE_DONE) {
        log_error("store.write_failed", "what=job job=%lld error=\"%s\"", (long long)ev->job_id,
                  sqlite3_errmsg(s->writer));
        return -EIO;
    }
    return STORE_APPLIED;
}

static int apply_write(struct store *s, struct pending_write *w)
{
    switch (w->kind) {
    case WRITE_JOB_EVENT:
        return apply_job_event(s, w->event);
    case WRITE_PRUNE_DELIVERIES: {
        sqlite3_stmt *st = s->prune_deliveries;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, wall_clock_ms() / 1000 - w->prune_max_age_s);
        if (sqlite3_step(st) != SQLITE_DONE)
            return -EIO;
        int n = sqlite3_changes(s->writer);
        if (n > 0)
            log_info("store.deliveries_pruned", "count=%d", n);
        return STORE_APPLIED;
    }
    case WRITE_SQL: {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(s->writer, w->sql, -1, &st, NULL) != SQLITE_OK) {
            log_error("store.write_failed", "what=sql error=\"%s\"", sqlite3_errmsg(s->writer));
            return -EIO;
        }
        bind_json_params(st, w->params);
        int rc = sqlite3_step(st);
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
            log_error("store.write_failed", "what=sql error=\"%s\"", sqlite3_errmsg(s->writer));
            return -EIO;
        }
        return STORE_APPLIED;
    }
    case WRITE_KIND_MAX:
        break;
    }
    return -EINVAL;
}

/* One transaction for the whole batch; a savepoint per write keeps one bad write from
 * sinking the others. */
static void apply_batch(struct store *s, struct pending_write *batch)
{
    char msg[256];
    if (exec_sql(s->writer, "BEGIN IMMEDIATE;", msg, sizeof(msg)) < 0) {
        log_error("store.begin_failed", "error=\"%s\"", msg);
        for (struct pending_write *w = batch; w; w = w->next)
            w->result = -EIO;
        return;
    }
    for (struct pending_write *w = batch; w; w = w->next) {
        exec_sql(s->writer, "SAVEPOINT w;", msg, sizeof(msg));
        w->result = apply_write(s, w);
        if (w->result < 0)
            exec_sql(s->writer, "ROLLBACK TO w;", msg, sizeof(msg));
        exec_sql(s->writer, "RELEASE w;", msg, sizeof(msg));
    }
    if (exec_sql(s->writer, "COMMIT;", msg, sizeof(msg)) < 0) {
        log_error("store.commit_failed", "error=\"%s\"", msg);
        exec_sql(s->writer, "ROLLBACK;", msg, sizeof(msg));
        for (struct pending_write *w = batch; w; w = w->next)
            w->result = -EIO;
    }
}

static void batch_work_cb(uv_work_t *work)
{
    struct store *s = work->data;
    uint64_t started = uv_hrtime();
    apply_batch(s, s->batch);
    s->batch_ns = uv_hrtime() - started;
}

static void start_batch(struct store *s);

static void batch_after_cb(uv_work_t *work, int status)
{
    struct store *s = work->data;
    struct pending_write *batch = s->batch;
    s->batch = NULL;
    s->in_flight = false;
    s->stats.commits++;
    s->stats.commit_ns += s->batch_ns;
    for (struct pending_write *w = batch; w;) {
        struct pending_write *next = w->next;
        if (status < 0)
            w->result = status;
        if (w->result < 0)
            s->stats.commit_errors++;
        else
            s->stats.writes_committed++;
        if (w->cb)
            w->cb(w->data, w->result);
        job_event_free(w->event);
        free(w->sql);
        json_decref(w->params);
        free(w);
        w = next;
    }
    if (s->queue_head && !s->closing)
        start_batch(s);
}

static void start_batch(struct store *s)
{
    s->batch = s->queue_head;
    s->queue_head = s->queue_tail = NULL;
    s->queue_len = 0;
    s->in_flight = true;
    s->work.data = s;
    int r = uv_queue_work(s->loop, &s->work, batch_work_cb, batch_after_cb);
    if (r < 0) {
        /* Cannot happen with a live loop; keep the writes' promise by failing them. */
        log_error("store.queue_work_failed", "error=\"%s\"", uv_strerror(r));
        batch_after_cb(&s->work, -EIO);
    }
}

/* Runs at the start of the next loop iteration: everything submitted by the requests the
 * previous iteration read goes into one commit. */
static void start_reads(struct store *s);

static void flush_idle_cb(uv_idle_t *idle)
{
    struct store *s = idle->data;
    uv_idle_stop(idle);
    if (!s->in_flight && s->queue_head)
        start_batch(s);
    if (!s->reads_in_flight && s->reads_head)
        start_reads(s);
}

static int submit(struct store *s, struct pending_write *w)
{
    if (s->queue_len >= STORE_MAX_PENDING_WRITES || s->closing) {
        s->stats.writes_rejected++;
        return -EAGAIN;
    }
    if (s->queue_tail)
        s->queue_tail->next = w;
    else
        s->queue_head = w;
    s->queue_tail = w;
    s->queue_len++;
    if (!s->in_flight) {
        s->flush_idle.data = s;
        uv_idle_start(&s->flush_idle, flush_idle_cb);
    }
    return 0;
}

int store_job_event_submit(struct store *s, struct job_event *event, store_write_cb cb, void *data)
{
    struct pending_write *w = calloc(1, sizeof(*w));
    if (!w) {
        job_event_free(event);
        return -ENOMEM;
    }
    w->kind = WRITE_JOB_EVENT;
    w->event = event;
    w->cb = cb;
    w->data = data;
    int r = submit(s, w);
    if (r < 0) {
        job_event_free(event);
        free(w);
    }
    return r;
}

int store_sql_submit(struct store *s, const char *sql, json_t *params, store_write_cb cb,
                     void *data)
{
    struct pending_write *w = calloc(1, sizeof(*w));
    if (!w) {
        json_decref(params);
        return -ENOMEM;
    }
    w->kind = WRITE_SQL;
    w->sql = strdup(sql);
    w->params = params;
    w->cb = cb;
    w->data = data;
    int r = w->sql ? submit(s, w) : -ENOMEM;
    if (r < 0) {
        free(w->sql);
        json_decref(w->params);
        free(w);
    }
    return r;
}

int store_sql_apply_sync(struct store *s, const char *sql, json_t *params)
{
    struct pending_write w = {.kind = WRITE_SQL, .sql = (char *)sql, .params = params};
    apply_batch(s, &w);
    json_decref(params);
    return w.result;
}

/* A read on `db`, on the calling thread: rows as objects keyed by column name, or NULL. */
static json_t *run_query(sqlite3 *db, const char *sql, json_t *params)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        log_error("store.query_failed", "error=\"%s\"", sqlite3_errmsg(db));
        return NULL;
    }
    bind_json_params(st, params);
    json_t *rows = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *row = json_object();
        for (int i = 0; i < sqlite3_column_count(st); i++)
            json_object_set_new(row, sqlite3_column_name(st, i), column_json(st, i));
        json_array_append_new(rows, row);
    }
    if (rc != SQLITE_DONE) {
        log_error("store.query_failed", "error=\"%s\"", sqlite3_errmsg(db));
        json_decref(rows);
        rows = NULL;
    }
    sqlite3_finalize(st);
    return rows;
}

json_t *store_query_sync(struct store *s, const char *sql, json_t *params)
{
    json_t *rows = run_query(s->reader, sql, params);
    json_decref(params);
    return rows;
}

static void pending_read_answer(struct pending_read *r)
{
    if (r->cb) {
        if (r->adapt)
            r->adapt(r->rows, r->cb, r->data);
        else
            ((store_rows_cb)r->cb)(r->data, r->rows);
    }
    json_decref(r->rows);
    json_decref(r->params);
    free(r->sql);
    free(r);
}

static void reads_work_cb(uv_work_t *work)
{
    struct store *s = work->data;
    uint64_t started = uv_hrtime();
    for (struct pending_read *r = s->read_batch; r; r = r->next)
        r->rows = run_query(s->reader, r->sql, r->params);
    s->read_batch_ns = uv_hrtime() - started;
}

static void reads_after_cb(uv_work_t *work, int status)
{
    struct store *s = work->data;
    struct pending_read *batch = s->read_batch;
    s->read_batch = NULL;
    s->reads_in_flight = false;
    s->stats.read_batches++;
    s->stats.read_ns += s->read_batch_ns;
    for (struct pending_read *r = batch; r;) {
        struct pending_read *next = r->next;
        if (status < 0) {
            json_decref(r->rows);
            r->rows = NULL;
        }
        if (!r->rows)
            s->stats.read_errors++;
        s->stats.reads++;
        pending_read_answer(r);
        r = next;
    }
    if (s->reads_head && !s->closing)
        start_reads(s);
}

static void start_reads(struct store *s)
{
    s->read_batch = s->reads_head;
    s->reads_head = s->reads_tail = NULL;
    s->reads_len = 0;
    s->reads_in_flight = true;
    s->read_work.data = s;
    int r = uv_queue_work(s->loop, &s->read_work, reads_work_cb, reads_after_cb);
    if (r < 0) {
        log_error("store.queue_work_failed", "error=\"%s\"", uv_strerror(r));
        reads_after_cb(&s->read_work, -EIO);
    }
}

int store_read_as(struct store *s, const void *owner, const char *sql, json_t *params,
                  store_read_adapter adapt, void (*cb)(void), void *data)
{
    if (s->closing || s->reads_len >= STORE_MAX_PENDING_READS) {
        json_decref(params);
        s->stats.reads_rejected++;
        return -EAGAIN;
    }
    struct pending_read *r = calloc(1, sizeof(*r));
    if (!r || !(r->sql = strdup(sql))) {
        free(r);
        json_decref(params);
        return -ENOMEM;
    }
    r->owner = owner;
    r->params = params;
    r->adapt = adapt;
    r->cb = cb;
    r->data = data;
    if (!s->loop) {
        /* No loop (tests, tools): answered now. */
        r->rows = run_query(s->reader, sql, params);
        s->stats.reads++;
        pending_read_answer(r);
        return 0;
    }
    if (s->reads_tail)
        s->reads_tail->next = r;
    else
        s->reads_head = r;
    s->reads_tail = r;
    s->reads_len++;
    if (!s->reads_in_flight) {
        s->flush_idle.data = s;
        uv_idle_start(&s->flush_idle, flush_idle_cb);
    }
    return 0;
}

int store_read(struct store *s, const void *owner, const char *sql, json_t *params,
               store_rows_cb cb, void *data)
{
    return store_read_as(s, owner, sql, params, NULL, (void (*)(void))cb, data);
}

void store_reads_forget(struct store *s, const void *owner)
{
    if (!s || !owner)
        return;
    for (struct pending_read *r = s->reads_head; r; r = r->next)
        if (r->owner == owner)
            r->cb = NULL;
    for (struct pending_read *r = s->read_batch; r; r = r->next)
        if (r->owner == owner)
            r->cb = NULL;
}

void *store_rows_array(json_t *rows, size_t size, int *err)
{
    *err = -EIO;
    if (!rows)
        return NULL;
    void *out = calloc(json_array_size(rows) + 1, size);
    if (!out) {
        *err = -ENOMEM;
        json_decref(rows);
    }
    return out;
}

void store_deliveries_prune(struct store *s, int64_t max_age_s)
{
    struct pending_write *w = calloc(1, sizeof(*w));
    if (!w)
        return;
    w->kind = WRITE_PRUNE_DELIVERIES;
    w->prune_max_age_s = max_age_s;
    if (submit(s, w) < 0)
        free(w);
}

int store_job_event_apply_sync(struct store *s, const struct job_event *event)
{
    struct pending_write w = {.kind = WRITE_JOB_EVENT, .event = (struct job_event *)event};
    apply_batch(s, &w);
    return w.result;
}

void store_close(struct store *s)
{
    if (!s)
        return;
    s->closing = true;
    /* A batch in flight owns the writer; the loop finishes it before we get here in
     * normal shutdown (hatcheryd runs the loop until the store is idle). */
    while ((s->in_flight || s->reads_in_flight) && s->loop)
        uv_run(s->loop, UV_RUN_ONCE);
    /* Reads not started get their answer: none. */
    for (struct pending_read *r = s->reads_head; r;) {
        struct pending_read *next = r->next;
        pending_read_answer(r);
        r = next;
    }
    s->reads_head = s->reads_tail = NULL;
    for (struct pending_write *w = s->queue_head; w;) {
        struct pending_write *next = w->next;
        if (w->cb)
            w->cb(w->data, -ECANCELED);
        job_event_free(w->event);
        free(w->sql);
        json_decref(w->params);
        free(w);
        w = next;
    }
    if (s->loop)
        uv_close((uv_handle_t *)&s->flush_idle, NULL);
    sqlite3_finalize(s->insert_delivery);
    sqlite3_finalize(s->upsert_job);
    sqlite3_finalize(s->prune_deliveries);
    sqlite3_close(s->reader);
    sqlite3_close(s->writer);
    /* The idle handle's memory must outlive its close: the loop runs once more. */
    if (s->loop)
        uv_run(s->loop, UV_RUN_NOWAIT);
    free(s);
}

static json_t *column_json(sqlite3_stmt *st, int i)
{
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER:
        return json_integer(sqlite3_column_int64(st, i));
    case SQLITE_TEXT:
        return json_string((const char *)sqlite3_column_text(st, i));
    default:
        return json_null();
    }
}

/* The CLI's shape of a job: labels as an array, unverified as a boolean. */
static void adapt_jobs_list(json_t *rows, void (*cb)(void), void *data)
{
    size_t i;
    json_t *job;
    json_array_foreach(rows, i, job)
    {
        const char *labels = json_string_value(json_object_get(job, "labels"));
        json_t *parsed = labels ? json_loads(labels, 0, NULL) : NULL;
        json_object_set_new(job, "labels", parsed ? parsed : json_array());
        json_object_set_new(job, "unverified",
                            json_boolean(json_integer_value(json_object_get(job, "unverified"))));
    }
    ((store_rows_cb)cb)(data, rows);
}

int store_jobs_list(struct store *s, const void *owner, const char *status_filter, int limit,
                    store_rows_cb cb, void *data)
{
    return store_read_as(
        s, owner,
        "SELECT id, run_id, repository, workflow, name, labels, pool, status, conclusion, "
        "runner_name, queued_at, started_at, completed_at, updated_at, unverified FROM jobs "
        "WHERE ?1 IS NULL OR status = ?1 ORDER BY updated_at DESC, id DESC LIMIT ?2",
        json_pack("[s?, i]", status_filter,
                  limit > 0 && limit <= ADMIN_MAX_LIST_ROWS ? limit : ADMIN_MAX_LIST_ROWS),
        adapt_jobs_list, (void (*)(void))cb, data);
}

int store_job_counts(struct store *s, const void *owner, store_rows_cb cb, void *data)
{
    return store_read(s, owner,
                      "SELECT nullif(pool, '') AS pool, status, n FROM job_counts WHERE n > 0 "
                      "ORDER BY pool, status",
                      json_array(), cb, data);
}

int store_jobs_queue_read(struct store *s, const void *owner, store_rows_cb cb, void *data)
{
    return store_read(s, owner,
                      "SELECT pool, sum(unverified = 0) AS verified, "
                      "coalesce(min(queued_at), 0) AS oldest_ms FROM jobs WHERE "
                      "status = 'queued' AND pool IS NOT NULL GROUP BY pool",
                      json_array(), cb, data);
}

int store_jobs_queue_by_pool(json_t *rows, const struct config *c, struct store_pool_queue *ret)
{
    for (size_t i = 0; i < c->n_pools; i++)
        ret[i] = (struct store_pool_queue){0, 0};
    if (!rows)
        return -EIO;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        int p = config_pool_index(c, json_string_value(json_object_get(row, "pool")));
        if (p >= 0)
            ret[p] = (struct store_pool_queue){
                json_integer_value(json_object_get(row, "verified")),
                json_integer_value(json_object_get(row, "oldest_ms")),
            };
    }
    return 0;
}

int store_deliveries_count(struct store *s, const void *owner, store_rows_cb cb, void *data)
{
    return store_read(s, owner, "SELECT count(*) AS n FROM deliveries", json_array(), cb, data);
}

void store_stats_get(const struct store *s, struct store_stats *ret_stats)
{
    *ret_stats = s->stats;
    ret_stats->writes_pending = s->queue_len;
}
