/* The store's seam to its database (store.h's callers never see it): a connection of
 * SQLite (store_sqlite.c, the embedded default) or of PostgreSQL (store_postgresql.c),
 * each used by one thread at a time. store.c batches and orders the work and runs it on
 * libuv's workers; a backend only runs statements. Statements are written once, in the
 * SQL both accept, with ?1… for their parameters; where the two differ, store_dialect()
 * says which one to write for. */
#ifndef HATCHERY_STORE_BACKEND_H
#define HATCHERY_STORE_BACKEND_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum store_dialect {
    STORE_SQLITE,
    STORE_POSTGRESQL,
    STORE_DIALECT_MAX,
};
extern const char *const store_dialect_names[STORE_DIALECT_MAX];

/* Schema 9, the same on both backends: the lease of each controller_id's leader (one row,
 * written by lease.c with the database's clock: times in ms since the epoch); its epoch
 * again in lease_fences, written only by a takeover, whose row the leader's commits lock
 * (store.c's fence) without ever holding up a renewal; and each instance's last renewal,
 * with the epoch it leads at (0: a follower). */
#define LEASE_TABLES_SQL                                                                           \
    "CREATE TABLE leases ("                                                                        \
    "  controller_id TEXT PRIMARY KEY,"                                                            \
    "  holder TEXT NOT NULL,"                                                                      \
    "  epoch BIGINT NOT NULL,"                                                                     \
    "  acquired_ms BIGINT NOT NULL,"                                                               \
    "  renewed_ms BIGINT NOT NULL,"                                                                \
    "  expires_ms BIGINT NOT NULL"                                                                 \
    ");"                                                                                           \
    "CREATE TABLE lease_fences ("                                                                  \
    "  controller_id TEXT PRIMARY KEY,"                                                            \
    "  epoch BIGINT NOT NULL"                                                                      \
    ");"                                                                                           \
    "CREATE TABLE lease_members ("                                                                 \
    "  controller_id TEXT NOT NULL,"                                                               \
    "  instance TEXT NOT NULL,"                                                                    \
    "  started_ms BIGINT NOT NULL,"                                                                \
    "  renewed_ms BIGINT NOT NULL,"                                                                \
    "  epoch BIGINT NOT NULL DEFAULT 0,"                                                           \
    "  PRIMARY KEY (controller_id, instance)"                                                      \
    ");"

struct store;
/* Which SQL `store`'s backend speaks, for the few statements the two write apart. */
enum store_dialect store_dialect(const struct store *store);

struct store_conn;

struct store_backend {
    enum store_dialect dialect;
    /* What opens a write transaction (SQLite takes its write lock at once). */
    const char *begin_sql;
    /* Brings the schema to STORE_SCHEMA_VERSION, refusing a newer one (-EPROTO). */
    int (*migrate)(struct store_conn *conn, char *err, size_t err_size);
    /* One statement, `params` (a JSON array: integers, strings, reals, nulls; NULL: none)
     * bound to ?1…: 0 and the rows it changed in `*ret_changes` (may be NULL), or -EIO
     * (errmsg() says why). */
    int (*exec)(struct store_conn *conn, const char *sql, json_t *params, int64_t *ret_changes);
    /* One statement's rows, as objects keyed by column name (integers, strings, reals,
     * nulls), or NULL (errmsg() says why). */
    json_t *(*query)(struct store_conn *conn, const char *sql, json_t *params);
    const char *(*errmsg)(struct store_conn *conn);
    void (*close)(struct store_conn *conn);
};

/* Every backend's connection starts with this. */
struct store_conn {
    const struct store_backend *backend;
};

/* `path`: the database file, made if missing. */
int store_sqlite_open(const char *path, struct store_conn **ret, char *err, size_t err_size);
/* `conninfo`: a postgresql:// URI or libpq's keywords; `password` (NULL: libpq's own
 * sources, PGPASSFILE or ~/.pgpass) is used to connect and not kept by this code. */
int store_postgresql_open(const char *conninfo, const char *password, struct store_conn **ret,
                          char *err, size_t err_size);
/* Whether `conninfo` parses, and carries no password of its own (a password belongs in a
 * file, never in the config): 0, or -EINVAL with the reason in `err`. */
int store_postgresql_conninfo_check(const char *conninfo, char *err, size_t err_size);

#endif
