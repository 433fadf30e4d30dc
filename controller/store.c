/* The store: group commit and reads on libuv's workers, over a backend's connections
 * (store_backend.h); see store.h. */
#include "store.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "hatchery/limits.h"
#include "log.h"
#include "store_backend.h"
#include "wall_clock.h"

enum write_kind {
    WRITE_JOB_EVENT,
    WRITE_PRUNE_DELIVERIES,
    WRITE_SQL,
    WRITE_GROUP,
    WRITE_KIND_MAX,
};

struct pending_write {
    enum write_kind kind;
    struct job_event *event;
    int64_t prune_max_age_s;
    char *sql;      /* WRITE_SQL */
    json_t *params; /* WRITE_SQL: positional parameters; WRITE_GROUP: [[sql, params], …] */
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
    /* Each used by one thread at a time: the writer by a worker during a batch, the reader
     * by a worker during a batch of reads, either at start-up on the calling thread. */
    struct store_conn *writer;
    struct store_conn *reader;
    /* Each held while its connection runs statements: a start-up or test read on the
     * calling thread never meets a worker's batch on the same connection. */
    pthread_mutex_t writer_lock, reader_lock;

    struct pending_write *queue_head, *queue_tail;
    size_t queue_len;
    struct pending_write *batch; /* in flight on a worker */
    bool in_flight;
    bool closing;
    uv_idle_t flush_idle;
    uv_work_t work;
    uint64_t batch_ns; /* written by the worker, read after it in batch_after_cb */
    struct store_stats stats;

    /* The leader's fence (store_fence_set; NULL: none), set under writer_lock, read by the
     * batch. */
    char *fence_controller;
    int64_t fence_epoch;

    struct pending_read *reads_head, *reads_tail;
    size_t reads_len;
    struct pending_read *read_batch; /* on a worker */
    bool reads_in_flight;
    uv_work_t read_work;
    uint64_t read_batch_ns;
};

const char *const store_dialect_names[STORE_DIALECT_MAX] = {
    [STORE_SQLITE] = "sqlite",
    [STORE_POSTGRESQL] = "postgresql",
};

static void flush_idle_cb(uv_idle_t *idle);

static int exec_on(struct store_conn *c, const char *sql, json_t *params, int64_t *ret_changes)
{
    return c->backend->exec(c, sql, params, ret_changes);
}

static void conn_close(struct store_conn *c)
{
    if (c)
        c->backend->close(c);
}

int store_open_at(uv_loop_t *loop, const struct store_location *where, struct store **ret_store,
                  char *err, size_t err_size)
{
    char path[PATH_MAX];
    if (!where->postgresql &&
        (size_t)snprintf(path, sizeof(path), "%s/hatchery.db", where->dir) >= sizeof(path)) {
        snprintf(err, err_size, "state directory path too long");
        return -ENAMETOOLONG;
    }
    struct store *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    s->loop = loop;
    pthread_mutex_init(&s->writer_lock, NULL);
    pthread_mutex_init(&s->reader_lock, NULL);
    /* Two connections: the writer migrates first, so the reader finds the schema made. */
    int r = 0;
    for (int i = 0; i < 2 && r == 0; i++) {
        struct store_conn **c = i == 0 ? &s->writer : &s->reader;
        r = where->postgresql
                ? store_postgresql_open(where->postgresql, where->password, c, err, err_size)
                : store_sqlite_open(path, c, err, err_size);
        if (r == 0 && i == 0)
            r = s->writer->backend->migrate(s->writer, err, err_size);
    }
    if (r < 0) {
        conn_close(s->reader);
        conn_close(s->writer);
        pthread_mutex_destroy(&s->writer_lock);
        pthread_mutex_destroy(&s->reader_lock);
        free(s);
        return r;
    }
    if (loop) {
        /* Started only while work waits, so it keeps the loop alive exactly then. */
        uv_idle_init(loop, &s->flush_idle);
    }
    *ret_store = s;
    return 0;
}

int store_open(uv_loop_t *loop, const char *dir, struct store **ret_store, char *err,
               size_t err_size)
{
    const struct store_location where = {.dir = dir};
    return store_open_at(loop, &where, ret_store, err, err_size);
}

enum store_dialect store_dialect(const struct store *s)
{
    return s->writer->backend->dialect;
}

/* A delivery is recorded once: any conflict (its id, or its body's hash) is a duplicate. */
static const char insert_delivery_sql[] =
    "INSERT INTO deliveries(id, event, received_at, body_sha256) VALUES(?1, ?2, ?3, ?4) "
    "ON CONFLICT DO NOTHING";
/* A job's status only moves forward; what an earlier event said is kept. */
static const char upsert_job_sql[] =
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
    "WHERE excluded.status_rank > jobs.status_rank";

/* Inside a transaction. Returns enum store_result or -EIO. */
static int apply_job_event(struct store *s, const struct job_event *ev)
{
    json_t *params = json_pack("[s, s, I, s?]", ev->delivery_id, "workflow_job",
                               (json_int_t)(ev->received_at_ms / 1000),
                               ev->body_sha256[0] ? ev->body_sha256 : NULL);
    int64_t changes = 0;
    int r = params ? exec_on(s->writer, insert_delivery_sql, params, &changes) : -ENOMEM;
    json_decref(params);
    if (r < 0) {
        log_error("store.write_failed", "what=delivery error=\"%s\"",
                  s->writer->backend->errmsg(s->writer));
        return -EIO;
    }
    if (changes == 0)
        return STORE_DUPLICATE;
    params = json_pack("[I, I, o, s, s?, s?, s, s?, s, i, s?, s?, I, i]", (json_int_t)ev->job_id,
                       (json_int_t)ev->run_id,
                       ev->installation_id ? json_integer(ev->installation_id) : json_null(),
                       ev->repository, ev->workflow, ev->job_name, ev->labels_json, ev->pool,
                       job_status_names[ev->status], (int)ev->status, ev->conclusion,
                       ev->runner_name, (json_int_t)ev->received_at_ms, ev->unverified ? 1 : 0);
    r = params ? exec_on(s->writer, upsert_job_sql, params, NULL) : -ENOMEM;
    json_decref(params);
    if (r < 0) {
        log_error("store.write_failed", "what=job job=%lld error=\"%s\"", (long long)ev->job_id,
                  s->writer->backend->errmsg(s->writer));
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
        json_t *params =
            json_pack("[I]", (json_int_t)(wall_clock_ms() / 1000 - w->prune_max_age_s));
        int64_t n = 0;
        int r = exec_on(s->writer, "DELETE FROM deliveries WHERE received_at < ?1", params, &n);
        json_decref(params);
        if (r < 0)
            return -EIO;
        if (n > 0)
            log_info("store.deliveries_pruned", "count=%lld", (long long)n);
        return STORE_APPLIED;
    }
    case WRITE_SQL:
        if (!w->params)
            return -ENOMEM; /* its parameters could not be made */
        if (exec_on(s->writer, w->sql, w->params, NULL) < 0) {
            log_error("store.write_failed", "what=sql error=\"%s\"",
                      s->writer->backend->errmsg(s->writer));
            return -EIO;
        }
        return STORE_APPLIED;
    case WRITE_GROUP: {
        /* All of them or none: the batch's savepoint for this write undoes the rest. */
        size_t i;
        json_t *one;
        json_array_foreach(w->params, i, one)
        {
            const char *sql = json_string_value(json_array_get(one, 0));
            json_t *params = json_array_get(one, 1);
            if (!sql || !json_is_array(params) || exec_on(s->writer, sql, params, NULL) < 0) {
                log_error("store.write_failed", "what=group statement=%zu error=\"%s\"", i,
                          sql ? s->writer->backend->errmsg(s->writer) : "malformed");
                return -EIO;
            }
        }
        return STORE_APPLIED;
    }
    case WRITE_KIND_MAX:
        break;
    }
    return -EINVAL;
}

/* Whether `w` is the leader's alone: everything but a job event, which any instance
 * records (a delivery's, or the reconciler's word from GitHub: forward-only facts). */
static bool write_is_leaders(const struct pending_write *w)
{
    return w->kind != WRITE_JOB_EVENT;
}

/* Inside the batch's transaction, before its first write: the epoch lease_fences holds,
 * its row locked for the transaction (FOR SHARE): a takeover's update of it waits for this
 * commit, so a write of an older epoch either commits before the takeover or is refused.
 * 0 when there is no row, -1 when the read failed. (A paused process keeps the lock only
 * until the server ends its idle transaction: store_postgresql.c.) */
static int64_t current_epoch_locked(struct store *s)
{
    json_t *params = json_pack("[s]", s->fence_controller);
    json_t *rows =
        params ? s->writer->backend->query(
                     s->writer, "SELECT epoch FROM lease_fences WHERE controller_id = ?1 FOR SHARE",
                     params)
               : NULL;
    json_decref(params);
    if (!rows)
        return -1;
    int64_t epoch = json_integer_value(json_object_get(json_array_get(rows, 0), "epoch"));
    json_decref(rows);
    return epoch;
}

/* The leader's writes of the batch refused when this instance does not lead at the epoch
 * the database holds: -EPERM for a follower's, -ESTALE for a superseded leader's. */
static void fence_batch_locked(struct store *s, struct pending_write *batch)
{
    bool leaders = false;
    for (struct pending_write *w = batch; w && !leaders; w = w->next)
        leaders = write_is_leaders(w);
    if (!leaders)
        return;
    int64_t current = s->fence_epoch > 0 ? current_epoch_locked(s) : 0;
    int refusal = s->fence_epoch <= 0 ? -EPERM : current != s->fence_epoch ? -ESTALE : 0;
    if (current < 0)
        refusal = -EIO;
    if (refusal == 0)
        return;
    size_t n = 0;
    for (struct pending_write *w = batch; w; w = w->next)
        if (write_is_leaders(w)) {
            w->result = refusal;
            n++;
        }
    log_error("store.writes_fenced", "count=%zu epoch=%lld current_epoch=%lld reason=\"%s\"", n,
              (long long)s->fence_epoch, (long long)current,
              refusal == -EPERM ? "this instance does not lead"
              : refusal == -EIO ? "the lease could not be read"
                                : "a newer leader exists");
}

/* One transaction for the whole batch; a savepoint per write keeps one bad write from
 * sinking the others. */
static void apply_batch_locked(struct store *s, struct pending_write *batch)
{
    struct store_conn *c = s->writer;
    for (struct pending_write *w = batch; w; w = w->next)
        w->result = 0;
    if (exec_on(c, c->backend->begin_sql, NULL, NULL) < 0) {
        log_error("store.begin_failed", "error=\"%s\"", c->backend->errmsg(c));
        for (struct pending_write *w = batch; w; w = w->next)
            w->result = -EIO;
        return;
    }
    if (s->fence_controller)
        fence_batch_locked(s, batch);
    for (struct pending_write *w = batch; w; w = w->next) {
        if (w->result < 0)
            continue; /* fenced */
        exec_on(c, "SAVEPOINT w", NULL, NULL);
        w->result = apply_write(s, w);
        if (w->result < 0)
            exec_on(c, "ROLLBACK TO w", NULL, NULL);
        exec_on(c, "RELEASE w", NULL, NULL);
    }
    if (exec_on(c, "COMMIT", NULL, NULL) < 0) {
        log_error("store.commit_failed", "error=\"%s\"", c->backend->errmsg(c));
        exec_on(c, "ROLLBACK", NULL, NULL);
        for (struct pending_write *w = batch; w; w = w->next)
            w->result = -EIO;
    }
}

static void apply_batch(struct store *s, struct pending_write *batch)
{
    pthread_mutex_lock(&s->writer_lock);
    apply_batch_locked(s, batch);
    pthread_mutex_unlock(&s->writer_lock);
}

static void batch_work_cb(uv_work_t *work)
{
    struct store *s = work->data;
    uint64_t started = uv_hrtime();
    apply_batch(s, s->batch);
    s->batch_ns = uv_hrtime() - started;
}

static void start_batch(struct store *s);

/* A write's end in the stats: on the loop that hears it, never on the worker, so the
 * counters are the loop's alone. */
static bool refused_by_fence(int result)
{
    return result == -ESTALE || result == -EPERM;
}

static void tally(struct store *s, int result)
{
    if (refused_by_fence(result))
        s->stats.writes_fenced++;
    else if (result < 0)
        s->stats.commit_errors++;
    else
        s->stats.writes_committed++;
}

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
        tally(s, w->result);
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

int store_sql_group_submit(struct store *s, json_t *statements, store_write_cb cb, void *data)
{
    struct pending_write *w = calloc(1, sizeof(*w));
    if (!w || !statements) {
        free(w);
        json_decref(statements);
        return -ENOMEM;
    }
    w->kind = WRITE_GROUP;
    w->params = statements;
    w->cb = cb;
    w->data = data;
    int r = submit(s, w);
    if (r < 0) {
        json_decref(w->params);
        free(w);
    }
    return r;
}

/* A write now, on the calling thread (start-up, tests): in a transaction of its own, and
 * counted only when the fence refused it. */
static void apply_sync(struct store *s, struct pending_write *w)
{
    apply_batch(s, w);
    if (refused_by_fence(w->result))
        s->stats.writes_fenced++;
}

int store_sql_group_apply_sync(struct store *s, json_t *statements)
{
    struct pending_write w = {.kind = WRITE_GROUP, .params = statements};
    apply_sync(s, &w);
    json_decref(statements);
    return w.result;
}

int store_sql_apply_sync(struct store *s, const char *sql, json_t *params)
{
    struct pending_write w = {.kind = WRITE_SQL, .sql = (char *)sql, .params = params};
    apply_sync(s, &w);
    json_decref(params);
    return w.result;
}

/* A read on `c`, on the calling thread: rows as objects keyed by column name, or NULL. */
static json_t *run_query(struct store *s, const char *sql, json_t *params)
{
    struct store_conn *c = s->reader;
    pthread_mutex_lock(&s->reader_lock);
    json_t *rows = c->backend->query(c, sql, params);
    if (!rows)
        log_error("store.query_failed", "error=\"%s\"", c->backend->errmsg(c));
    pthread_mutex_unlock(&s->reader_lock);
    return rows;
}

json_t *store_query_sync(struct store *s, const char *sql, json_t *params)
{
    json_t *rows = run_query(s, sql, params);
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
        r->rows = run_query(s, r->sql, r->params);
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
        r->rows = run_query(s, sql, params);
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
    apply_sync(s, &w);
    return w.result;
}

int store_fence_set(struct store *s, const char *controller_id, int64_t epoch)
{
    char *copy = strdup(controller_id);
    if (!copy)
        return -ENOMEM;
    pthread_mutex_lock(&s->writer_lock);
    free(s->fence_controller);
    s->fence_controller = copy;
    s->fence_epoch = epoch;
    pthread_mutex_unlock(&s->writer_lock);
    return 0;
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
    conn_close(s->reader);
    conn_close(s->writer);
    free(s->fence_controller);
    pthread_mutex_destroy(&s->writer_lock);
    pthread_mutex_destroy(&s->reader_lock);
    /* The idle handle's memory must outlive its close: the loop runs once more. */
    if (s->loop)
        uv_run(s->loop, UV_RUN_NOWAIT);
    free(s);
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
        "WHERE status = coalesce(?1, status) ORDER BY updated_at DESC, id DESC LIMIT ?2",
        json_pack("[s?, i]", status_filter,
                  limit > 0 && limit <= ADMIN_MAX_LIST_ROWS ? limit : ADMIN_MAX_LIST_ROWS),
        adapt_jobs_list, (void (*)(void))cb, data);
}

int store_job_counts(struct store *s, const void *owner, store_rows_cb cb, void *data)
{
    return store_read(s, owner,
                      "SELECT nullif(pool, '') AS pool, status, n FROM job_counts WHERE n > 0 "
                      "ORDER BY job_counts.pool, status",
                      json_array(), cb, data);
}

int store_jobs_queue_read(struct store *s, const void *owner, store_rows_cb cb, void *data)
{
    return store_read(s, owner,
                      "SELECT pool, sum(CASE WHEN unverified = 0 THEN 1 ELSE 0 END) AS verified, "
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
