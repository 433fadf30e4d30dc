/* The store's PostgreSQL backend (store_backend.h), through libpq. Each connection is used
 * by one of libuv's workers at a time (store.c), so libpq's plain blocking calls never
 * hold the loop; connect_timeout, TCP keepalives, tcp_user_timeout and statement_timeout
 * bound how long a dead server or a held lock can keep a worker. A connection found broken
 * is reset before its next statement. */
#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store.h"
#include "store_backend.h"

/* Type oids (PostgreSQL's catalog/pg_type_d.h, stable across versions). */
#define OID_BOOL    16
#define OID_INT8    20
#define OID_INT2    21
#define OID_INT4    23
#define OID_FLOAT4  700
#define OID_FLOAT8  701
#define OID_NUMERIC 1700

/* The schema at version 8, the first PostgreSQL knew: the same tables, columns, indexes
 * and counts as SQLite's migrations 1 to 8 made (store_sqlite.c), with PostgreSQL's
 * types (a time in ms needs bigint) and its triggers. Each later version is one step in
 * `later` below, beside SQLite's own. */
#define FIRST_VERSION 8
static const char schema_v8[] =
    "CREATE TABLE deliveries ("
    "  id TEXT PRIMARY KEY,"
    "  event TEXT NOT NULL,"
    "  received_at BIGINT NOT NULL,"
    "  body_sha256 TEXT"
    ");"
    "CREATE INDEX deliveries_received_at ON deliveries(received_at);"
    "CREATE UNIQUE INDEX deliveries_body_sha256 ON deliveries(body_sha256);"
    "CREATE TABLE jobs ("
    "  id BIGINT PRIMARY KEY,"
    "  run_id BIGINT NOT NULL,"
    "  installation_id BIGINT,"
    "  repository TEXT NOT NULL,"
    "  workflow TEXT,"
    "  name TEXT,"
    "  labels TEXT NOT NULL,"
    "  pool TEXT,"
    "  status TEXT NOT NULL,"
    "  status_rank INTEGER NOT NULL,"
    "  conclusion TEXT,"
    "  runner_name TEXT,"
    "  queued_at BIGINT,"
    "  started_at BIGINT,"
    "  completed_at BIGINT,"
    "  updated_at BIGINT NOT NULL,"
    "  supplied_at BIGINT,"
    "  unverified INTEGER NOT NULL DEFAULT 0"
    ");"
    "CREATE INDEX jobs_pool_status ON jobs(pool, status);"
    "CREATE INDEX jobs_updated_at ON jobs(updated_at);"
    "CREATE INDEX jobs_unverified ON jobs(id) WHERE unverified = 1;"
    "CREATE INDEX jobs_queued ON jobs(pool, queued_at) WHERE status = 'queued';"
    "CREATE INDEX jobs_in_progress ON jobs(pool, updated_at) WHERE status = 'in_progress';"
    "CREATE TABLE runners ("
    "  id BIGINT PRIMARY KEY,"
    "  name TEXT UNIQUE NOT NULL,"
    "  pool TEXT NOT NULL,"
    "  host TEXT,"
    "  state TEXT NOT NULL,"
    "  vcpus BIGINT NOT NULL,"
    "  memory_mib BIGINT NOT NULL,"
    "  github_runner_id BIGINT,"
    "  job_id BIGINT,"
    "  exit_code INTEGER,"
    "  reason TEXT,"
    "  created_at BIGINT NOT NULL,"
    "  online_at BIGINT,"
    "  busy_at BIGINT,"
    "  finished_at BIGINT,"
    "  updated_at BIGINT NOT NULL,"
    "  image TEXT"
    ");"
    "CREATE INDEX runners_state ON runners(state);"
    "CREATE TABLE hosts ("
    "  name TEXT PRIMARY KEY,"
    "  drained INTEGER NOT NULL DEFAULT 0"
    ");"
    "CREATE TABLE job_counts ("
    "  pool TEXT NOT NULL,"
    "  status TEXT NOT NULL,"
    "  n BIGINT NOT NULL,"
    "  PRIMARY KEY (pool, status)"
    ");"
    "CREATE FUNCTION hatchery_job_counts() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    "  IF TG_OP IN ('UPDATE', 'DELETE') THEN"
    "    UPDATE job_counts SET n = n - 1 WHERE pool = coalesce(OLD.pool, '') AND status = "
    "OLD.status;"
    "  END IF;"
    "  IF TG_OP IN ('UPDATE', 'INSERT') THEN"
    "    INSERT INTO job_counts VALUES (coalesce(NEW.pool, ''), NEW.status, 1)"
    "      ON CONFLICT (pool, status) DO UPDATE SET n = job_counts.n + 1;"
    "  END IF;"
    "  RETURN NULL;"
    "END $$;"
    "CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs"
    "  FOR EACH ROW EXECUTE FUNCTION hatchery_job_counts();"
    "CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs"
    "  FOR EACH ROW EXECUTE FUNCTION hatchery_job_counts();"
    "CREATE TRIGGER job_counts_update AFTER UPDATE OF pool, status ON jobs FOR EACH ROW"
    "  WHEN (coalesce(OLD.pool, '') IS DISTINCT FROM coalesce(NEW.pool, '')"
    "        OR OLD.status IS DISTINCT FROM NEW.status)"
    "  EXECUTE FUNCTION hatchery_job_counts();"
    "CREATE TABLE scale_sets ("
    "  name TEXT PRIMARY KEY,"
    "  scale_set_id BIGINT NOT NULL,"
    "  last_message_id BIGINT NOT NULL DEFAULT 0,"
    "  updated_at BIGINT NOT NULL"
    ");"
    "CREATE TABLE scale_set_jobs ("
    "  scale_set TEXT NOT NULL,"
    "  job_id TEXT NOT NULL,"
    "  state TEXT NOT NULL,"
    "  runner_name TEXT,"
    "  result TEXT,"
    "  labels TEXT,"
    "  updated_at BIGINT NOT NULL,"
    "  PRIMARY KEY (scale_set, job_id)"
    ");";

/* Versions after FIRST_VERSION: later[v - FIRST_VERSION - 1] makes version v. */
static const char *const later[] = {
    /* 9: the leader's lease and the instances' renewals (lease.h). */
    LEASE_TABLES_SQL,
};
#define LATER_N ((int)(sizeof(later) / sizeof(later[0])))

/* Migrations of two controllers starting at once take turns (a transaction's lock). */
#define MIGRATION_LOCK 0x6861746368657279 /* "hatchery" */

struct pg_conn {
    struct store_conn conn;
    PGconn *pg;
    bool broken; /* a statement found the connection lost: reset before the next */
    char error[512];
};

static struct pg_conn *of(struct store_conn *c)
{
    return (struct pg_conn *)c;
}

static void set_error(struct pg_conn *c, const char *msg)
{
    snprintf(c->error, sizeof(c->error), "%s", msg && msg[0] ? msg : "unknown error");
    size_t n = strlen(c->error);
    while (n > 0 && (c->error[n - 1] == '\n' || c->error[n - 1] == ' '))
        c->error[--n] = 0;
}

static int pg_exec(struct store_conn *conn, const char *sql, json_t *params, int64_t *ret_changes);

/* Each session's limits, set again on a reset connection:
 *  - statement_timeout: a statement held up by a lock (or a server that stopped answering
 *    inside one) gives its worker back; the batch it was in fails, and its writes' callers
 *    hear it;
 *  - idle_in_transaction_session_timeout: a process paused inside a transaction (SIGSTOP,
 *    a machine that froze) keeps its locks only this long: the server ends its session.
 *    A leader's commit locks the lease's row (store.c's fence), which a takeover must
 *    update; a paused leader would otherwise hold every follower off for good. Between
 *    two statements of a batch the worker waits for nothing but the network. */
static int session_settings(struct pg_conn *c)
{
    return pg_exec(&c->conn,
                   "SET statement_timeout = 60000; SET idle_in_transaction_session_timeout = 5000",
                   NULL, NULL);
}

/* A connection found broken gets one reset before the next statement. */
static bool usable(struct pg_conn *c)
{
    if (PQstatus(c->pg) == CONNECTION_OK && !c->broken)
        return true;
    c->broken = false;
    log_warn("store.reconnecting", "backend=postgresql error=\"%s\"", PQerrorMessage(c->pg));
    PQreset(c->pg);
    if (PQstatus(c->pg) == CONNECTION_OK && session_settings(c) == 0)
        return true;
    set_error(c, PQerrorMessage(c->pg));
    return false;
}

/* Whether a statement failed because the connection is gone: an error libpq made itself
 * (no SQLSTATE), a connection exception (class 08), or the server shutting down (57P). */
static bool connection_lost(PGconn *pg, const PGresult *res)
{
    if (PQstatus(pg) != CONNECTION_OK)
        return true;
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    return !state || strncmp(state, "08", 2) == 0 || strncmp(state, "57P", 3) == 0;
}

/* `sql` with ?N written as $N (outside quoted text): the one placeholder spelling both
 * backends' statements share. */
static char *placeholders(const char *sql)
{
    char *out = strdup(sql);
    bool quoted = false;
    for (char *p = out; p && *p; p++) {
        if (*p == '\'')
            quoted = !quoted;
        else if (!quoted && *p == '?' && p[1] >= '0' && p[1] <= '9')
            *p = '$';
    }
    return out;
}

/* Runs `sql` with `params`: the result (the caller PQclear()s it), or NULL with the error
 * kept. */
static PGresult *run(struct pg_conn *c, const char *sql, json_t *params, ExecStatusType want)
{
    if (!usable(c))
        return NULL;
    size_t n = json_array_size(params);
    char *text = placeholders(sql);
    Oid *types = calloc(n + 1, sizeof(*types));
    const char **values = calloc(n + 1, sizeof(*values));
    char(*numbers)[32] = calloc(n + 1, sizeof(*numbers));
    PGresult *res = NULL;
    if (!text || !types || !values || !numbers) {
        set_error(c, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(params, i);
        if (json_is_integer(v)) {
            types[i] = OID_INT8;
            snprintf(numbers[i], sizeof(numbers[i]), "%lld", (long long)json_integer_value(v));
            values[i] = numbers[i];
        } else if (json_is_real(v)) {
            types[i] = OID_FLOAT8;
            snprintf(numbers[i], sizeof(numbers[i]), "%.17g", json_real_value(v));
            values[i] = numbers[i];
        } else if (json_is_string(v)) {
            values[i] = json_string_value(v); /* its type from where it is used */
        }
    }
    /* A statement outside a transaction that finds the connection lost (the server
     * restarted since the last one) runs again, once, on a new connection. */
    for (int attempt = 0;; attempt++) {
        bool alone = PQtransactionStatus(c->pg) == PQTRANS_IDLE;
        res = params ? PQexecParams(c->pg, text, (int)n, types, values, NULL, NULL, 0)
                     : PQexec(c->pg, text);
        if (PQresultStatus(res) == want)
            break;
        set_error(c, res ? PQresultErrorMessage(res) : PQerrorMessage(c->pg));
        c->broken = connection_lost(c->pg, res);
        PQclear(res);
        res = NULL;
        if (!c->broken || !alone || attempt > 0 || !usable(c))
            break;
    }
out:
    free(text);
    free(types);
    free(values);
    free(numbers);
    return res;
}

static int pg_exec(struct store_conn *conn, const char *sql, json_t *params, int64_t *ret_changes)
{
    PGresult *res = run(of(conn), sql, params, PGRES_COMMAND_OK);
    if (!res)
        return -EIO;
    if (ret_changes)
        *ret_changes = strtoll(PQcmdTuples(res), NULL, 10);
    PQclear(res);
    return 0;
}

static json_t *value_json(const PGresult *res, int row, int col)
{
    if (PQgetisnull(res, row, col))
        return json_null();
    const char *v = PQgetvalue(res, row, col);
    switch (PQftype(res, col)) {
    case OID_INT2:
    case OID_INT4:
    case OID_INT8:
        return json_integer(strtoll(v, NULL, 10));
    case OID_NUMERIC:
        return strpbrk(v, ".eE") ? json_real(strtod(v, NULL)) : json_integer(strtoll(v, NULL, 10));
    case OID_FLOAT4:
    case OID_FLOAT8:
        return json_real(strtod(v, NULL));
    case OID_BOOL:
        return json_boolean(v[0] == 't');
    default:
        return json_string(v);
    }
}

static json_t *pg_query(struct store_conn *conn, const char *sql, json_t *params)
{
    PGresult *res = run(of(conn), sql, params, PGRES_TUPLES_OK);
    if (!res)
        return NULL;
    json_t *rows = json_array();
    for (int r = 0; r < PQntuples(res); r++) {
        json_t *row = json_object();
        for (int f = 0; f < PQnfields(res); f++)
            json_object_set_new(row, PQfname(res, f), value_json(res, r, f));
        json_array_append_new(rows, row);
    }
    PQclear(res);
    return rows;
}

static const char *pg_errmsg(struct store_conn *conn)
{
    return of(conn)->error;
}

static int pg_migrate(struct store_conn *conn, char *err, size_t err_size)
{
    struct pg_conn *c = of(conn);
    const int latest = FIRST_VERSION + LATER_N;
    int version = -1;
    json_t *lock = json_pack("[I]", (json_int_t)MIGRATION_LOCK);
    json_t *rows = NULL;
    if (pg_exec(conn, "BEGIN", NULL, NULL) < 0 ||
        !(rows = pg_query(conn, "SELECT pg_advisory_xact_lock(?1)", lock)) ||
        pg_exec(conn, "CREATE TABLE IF NOT EXISTS hatchery_schema (version INTEGER NOT NULL)", NULL,
                NULL) < 0)
        goto failed;
    json_decref(rows);
    if (!(rows = pg_query(conn, "SELECT max(version) AS version FROM hatchery_schema", NULL)))
        goto failed;
    json_t *v = json_object_get(json_array_get(rows, 0), "version");
    version = json_is_integer(v) ? (int)json_integer_value(v) : 0;
    json_decref(rows);
    rows = NULL;
    if (version > latest) {
        pg_exec(conn, "ROLLBACK", NULL, NULL);
        json_decref(lock);
        snprintf(err, err_size,
                 "schema version %d is newer than this hatcheryd knows (%d): refusing to touch it",
                 version, latest);
        return -EPROTO;
    }
    int from = version;
    if (version == 0) {
        if (pg_exec(conn, schema_v8, NULL, NULL) < 0)
            goto failed;
        version = FIRST_VERSION;
    }
    for (; version < latest; version++)
        if (pg_exec(conn, later[version - FIRST_VERSION], NULL, NULL) < 0)
            goto failed;
    if (version != from) {
        char sql[96];
        snprintf(sql, sizeof(sql),
                 "DELETE FROM hatchery_schema; INSERT INTO hatchery_schema VALUES (%d)", version);
        if (pg_exec(conn, sql, NULL, NULL) < 0)
            goto failed;
    }
    if (pg_exec(conn, "COMMIT", NULL, NULL) < 0)
        goto failed;
    if (version != from)
        log_info("store.migrated", "backend=postgresql from=%d version=%d", from, version);
    json_decref(lock);
    return 0;
failed:
    snprintf(err, err_size, "migration to schema version %d failed: %s", latest, c->error);
    json_decref(rows);
    json_decref(lock);
    pg_exec(conn, "ROLLBACK", NULL, NULL);
    return -EIO;
}

static void pg_close(struct store_conn *conn)
{
    struct pg_conn *c = of(conn);
    if (!c)
        return;
    PQfinish(c->pg);
    free(c);
}

static const struct store_backend postgresql_backend = {
    .dialect = STORE_POSTGRESQL,
    .begin_sql = "BEGIN",
    .migrate = pg_migrate,
    .exec = pg_exec,
    .query = pg_query,
    .errmsg = pg_errmsg,
    .close = pg_close,
};

int store_postgresql_conninfo_check(const char *conninfo, char *err, size_t err_size)
{
    char *msg = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &msg);
    if (!opts) {
        snprintf(err, err_size, "not a postgresql:// URI or libpq keywords: %s",
                 msg ? msg : "out of memory");
        PQfreemem(msg);
        size_t n = strlen(err);
        while (n > 0 && err[n - 1] == '\n')
            err[--n] = 0;
        return -EINVAL;
    }
    int r = 0;
    for (PQconninfoOption *o = opts; o->keyword; o++)
        if (strcmp(o->keyword, "password") == 0 && o->val && o->val[0]) {
            snprintf(err, err_size,
                     "holds a password: keep it out of the config, in database.password_file "
                     "or libpq's PGPASSFILE");
            r = -EINVAL;
        }
    PQconninfoFree(opts);
    return r;
}

/* The server's notices (a shutdown's warning, say) as log lines, not bare stderr. */
static void on_notice(void *data, const char *message)
{
    (void)data;
    char text[512];
    snprintf(text, sizeof(text), "%s", message);
    size_t n = strlen(text);
    while (n > 0 && text[n - 1] == '\n')
        text[--n] = 0;
    log_warn("store.notice", "backend=postgresql text=\"%s\"", text);
}

int store_postgresql_open(const char *conninfo, const char *password, struct store_conn **ret,
                          char *err, size_t err_size)
{
    if (store_postgresql_conninfo_check(conninfo, err, err_size) < 0)
        return -EINVAL;
    struct pg_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    c->conn.backend = &postgresql_backend;
    /* Defaults first: what `conninfo` says overrides them; the password file's last. */
    const char *keys[] = {"connect_timeout",
                          "application_name",
                          "keepalives_idle",
                          "keepalives_interval",
                          "keepalives_count",
                          "tcp_user_timeout",
                          "dbname",
                          password ? "password" : NULL,
                          NULL};
    const char *values[] = {"10", "hatcheryd", "10", "5", "3", "20000", conninfo, password, NULL};
    c->pg = PQconnectdbParams(keys, values, 1);
    if (c->pg)
        PQsetNoticeProcessor(c->pg, on_notice, c);
    if (!c->pg || PQstatus(c->pg) != CONNECTION_OK) {
        snprintf(err, err_size, "cannot connect to PostgreSQL: %s",
                 c->pg ? PQerrorMessage(c->pg) : "out of memory");
        size_t n = strlen(err);
        while (n > 0 && err[n - 1] == '\n')
            err[--n] = 0;
        pg_close(&c->conn);
        return -EIO;
    }
    if (session_settings(c) < 0) {
        snprintf(err, err_size, "cannot set the session's timeouts: %s", c->error);
        pg_close(&c->conn);
        return -EIO;
    }
    *ret = &c->conn;
    return 0;
}
