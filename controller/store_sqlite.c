/* The store's SQLite backend (store_backend.h): one file in WAL mode, the embedded
 * default. Statements are prepared once and kept, by their text, in a small cache. */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store.h"
#include "store_backend.h"

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
    /* 9: the leader's lease (controllers sharing a PostgreSQL store; lease.h), and each
     * instance's last renewal. A SQLite store has one controller, which never uses them:
     * the same schema on both backends. */
    LEASE_TABLES_SQL,
};

#define STATEMENT_CACHE 16

struct sqlite_conn {
    struct store_conn conn;
    sqlite3 *db;
    char *path;
    struct {
        char *sql;
        sqlite3_stmt *st;
        uint64_t used;
    } cache[STATEMENT_CACHE];
    uint64_t uses;
};

static struct sqlite_conn *of(struct store_conn *c)
{
    return (struct sqlite_conn *)c;
}

static int exec_script(sqlite3 *db, const char *sql, char *err, size_t err_size)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(err, err_size, "%s", msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        return -EIO;
    }
    return 0;
}

static int sqlite_migrate(struct store_conn *c, char *err, size_t err_size)
{
    sqlite3 *db = of(c)->db;
    const char *path = of(c)->path;
    char msg[512];
    if (exec_script(db, "PRAGMA journal_mode=WAL;", msg, sizeof(msg)) < 0) {
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
        if (exec_script(db, "BEGIN IMMEDIATE;", msg, sizeof(msg)) < 0 ||
            exec_script(db, migrations[v], msg, sizeof(msg)) < 0 ||
            exec_script(db, sql, msg, sizeof(msg)) < 0 ||
            exec_script(db, "COMMIT;", msg, sizeof(msg)) < 0) {
            exec_script(db, "ROLLBACK;", sql, sizeof(sql));
            snprintf(err, err_size, "%s: migration to schema version %d failed: %s", path, v + 1,
                     msg);
            return -EIO;
        }
        log_info("store.migrated", "path=%s version=%d", path, v + 1);
    }
    /* FULL: with WAL this fsyncs the log at every commit, so an acknowledged write survives
     * power loss, not only a crash. Group commit pays for it once per batch. temp_store:
     * each write's savepoint journal stays in memory (in a temporary file, its pages were a
     * third of a commit's writes). */
    if (exec_script(db,
                    "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;",
                    msg, sizeof(msg)) < 0) {
        snprintf(err, err_size, "%s: %s", path, msg);
        return -EIO;
    }
    return 0;
}

/* The statement for `sql`, from the cache or prepared (and cached, evicting the least
 * recently used); NULL when it does not prepare. */
static sqlite3_stmt *statement(struct sqlite_conn *c, const char *sql)
{
    int free_slot = -1, oldest = 0;
    for (int i = 0; i < STATEMENT_CACHE; i++) {
        if (!c->cache[i].sql) {
            free_slot = free_slot < 0 ? i : free_slot;
            continue;
        }
        if (strcmp(c->cache[i].sql, sql) == 0) {
            c->cache[i].used = ++c->uses;
            sqlite3_reset(c->cache[i].st);
            sqlite3_clear_bindings(c->cache[i].st);
            return c->cache[i].st;
        }
        if (c->cache[i].used < c->cache[oldest].used)
            oldest = i;
    }
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK)
        return NULL;
    char *copy = strdup(sql);
    if (!copy) {
        sqlite3_finalize(st);
        return NULL;
    }
    int slot = free_slot >= 0 ? free_slot : oldest;
    sqlite3_finalize(c->cache[slot].st);
    free(c->cache[slot].sql);
    c->cache[slot].sql = copy;
    c->cache[slot].st = st;
    c->cache[slot].used = ++c->uses;
    return st;
}

static void bind_params(sqlite3_stmt *st, json_t *params)
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

static int sqlite_exec(struct store_conn *conn, const char *sql, json_t *params,
                       int64_t *ret_changes)
{
    struct sqlite_conn *c = of(conn);
    if (!params) {
        /* Transaction control: no statement worth keeping. */
        char msg[256];
        if (exec_script(c->db, sql, msg, sizeof(msg)) < 0)
            return -EIO;
        if (ret_changes)
            *ret_changes = 0;
        return 0;
    }
    sqlite3_stmt *st = statement(c, sql);
    if (!st)
        return -EIO;
    bind_params(st, params);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        ;
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return -EIO;
    if (ret_changes)
        *ret_changes = sqlite3_changes64(c->db);
    return 0;
}

static json_t *column_json(sqlite3_stmt *st, int i)
{
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER:
        return json_integer(sqlite3_column_int64(st, i));
    case SQLITE_FLOAT:
        return json_real(sqlite3_column_double(st, i));
    case SQLITE_TEXT:
        return json_string((const char *)sqlite3_column_text(st, i));
    default:
        return json_null();
    }
}

static json_t *sqlite_query(struct store_conn *conn, const char *sql, json_t *params)
{
    struct sqlite_conn *c = of(conn);
    sqlite3_stmt *st = statement(c, sql);
    if (!st)
        return NULL;
    bind_params(st, params);
    json_t *rows = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *row = json_object();
        for (int i = 0; i < sqlite3_column_count(st); i++)
            json_object_set_new(row, sqlite3_column_name(st, i), column_json(st, i));
        json_array_append_new(rows, row);
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        json_decref(rows);
        return NULL;
    }
    return rows;
}

static const char *sqlite_errmsg(struct store_conn *conn)
{
    return sqlite3_errmsg(of(conn)->db);
}

static void sqlite_close(struct store_conn *conn)
{
    struct sqlite_conn *c = of(conn);
    if (!c)
        return;
    for (int i = 0; i < STATEMENT_CACHE; i++) {
        sqlite3_finalize(c->cache[i].st);
        free(c->cache[i].sql);
    }
    sqlite3_close(c->db);
    free(c->path);
    free(c);
}

static const struct store_backend sqlite_backend = {
    .dialect = STORE_SQLITE,
    .begin_sql = "BEGIN IMMEDIATE",
    .migrate = sqlite_migrate,
    .exec = sqlite_exec,
    .query = sqlite_query,
    .errmsg = sqlite_errmsg,
    .close = sqlite_close,
};

int store_sqlite_open(const char *path, struct store_conn **ret, char *err, size_t err_size)
{
    struct sqlite_conn *c = calloc(1, sizeof(*c));
    if (!c || !(c->path = strdup(path))) {
        free(c);
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    c->conn.backend = &sqlite_backend;
    int rc = sqlite3_open_v2(
        path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, err_size, "cannot open %s: %s", path,
                 c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
        sqlite_close(&c->conn);
        return -EIO;
    }
    sqlite3_busy_timeout(c->db, 5000);
    sqlite3_extended_result_codes(c->db, 1);
    *ret = &c->conn;
    return 0;
}
