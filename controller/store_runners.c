/* The store's runners and hosts tables, by name (store.h): every statement on them that
 * the scheduler and hatcheryd make is here. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "store.h"
#include "store_backend.h"

static json_t *ms_or_null(int64_t ms)
{
    return ms ? json_integer(ms) : json_null();
}

int store_runner_insert(struct store *store, const struct store_runner_new *r, store_write_cb cb,
                        void *data)
{
    json_t *params =
        json_pack("[I, s, s, s, s, I, I, I, s?]", (json_int_t)r->id, r->name, r->pool, r->host,
                  r->state, (json_int_t)r->vcpus, (json_int_t)r->memory_mib,
                  (json_int_t)r->created_ms, r->image && r->image[0] ? r->image : NULL);
    return store_sql_submit(store,
                            "INSERT INTO runners(id, name, pool, host, state, vcpus, memory_mib, "
                            "created_at, updated_at, image) "
                            "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9)",
                            params, cb, data);
}

int store_runner_update(struct store *store, const struct store_runner_update *u, store_write_cb cb,
                        void *data)
{
    json_t *params =
        json_pack("[I, s, s, o, o, o, s?, o, o, o, I]", (json_int_t)u->id, u->state, u->host,
                  u->github_runner_id ? json_integer(u->github_runner_id) : json_null(),
                  u->job_id ? json_integer(u->job_id) : json_null(),
                  u->exit_code >= 0 ? json_integer(u->exit_code) : json_null(),
                  u->reason && u->reason[0] ? u->reason : NULL, ms_or_null(u->online_ms),
                  ms_or_null(u->busy_ms), ms_or_null(u->finished_ms), (json_int_t)u->updated_ms);
    return store_sql_submit(store,
                            "UPDATE runners SET state = ?2, host = ?3, github_runner_id = ?4, "
                            "job_id = ?5, exit_code = ?6, reason = ?7, online_at = ?8, "
                            "busy_at = ?9, finished_at = ?10, updated_at = ?11 WHERE id = ?1",
                            params, cb, data);
}

int store_runner_mark_deleted(struct store *store, int64_t id, const char *reason, int64_t now_ms)
{
    return store_sql_submit(
        store,
        "UPDATE runners SET state = 'deleted', reason = COALESCE(reason, ?2), "
        "finished_at = COALESCE(finished_at, ?3), updated_at = ?3 WHERE id = ?1",
        json_pack("[I, s, I]", (json_int_t)id, reason, (json_int_t)now_ms), NULL, NULL);
}

static int64_t row_integer(json_t *row, const char *key, int64_t if_null)
{
    json_t *v = json_object_get(row, key);
    return json_is_integer(v) ? json_integer_value(v) : if_null;
}

static void row_text(json_t *row, const char *key, char *out, size_t size)
{
    const char *v = json_string_value(json_object_get(row, key));
    snprintf(out, size, "%s", v ? v : "");
}

static void adapt_runner_rows(json_t *rows, void (*cb)(void), void *data)
{
    int err;
    struct store_runner_row *out = store_rows_array(rows, sizeof(*out), &err);
    if (!out) {
        ((store_runner_rows_cb)cb)(data, err, NULL, 0);
        return;
    }
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        struct store_runner_row *r = &out[i];
        r->id = row_integer(row, "id", 0);
        row_text(row, "name", r->name, sizeof(r->name));
        row_text(row, "pool", r->pool, sizeof(r->pool));
        row_text(row, "host", r->host, sizeof(r->host));
        row_text(row, "state", r->state, sizeof(r->state));
        r->github_runner_id = row_integer(row, "github_runner_id", 0);
        r->job_id = row_integer(row, "job_id", 0);
        r->exit_code = (int)row_integer(row, "exit_code", -1);
        row_text(row, "reason", r->reason, sizeof(r->reason));
        r->created_ms = row_integer(row, "created_at", 0);
        r->online_ms = row_integer(row, "online_at", 0);
        r->busy_ms = row_integer(row, "busy_at", 0);
        r->finished_ms = row_integer(row, "finished_at", 0);
        row_text(row, "image", r->image, sizeof(r->image));
    }
    ((store_runner_rows_cb)cb)(data, 0, out, json_array_size(rows));
    free(out);
}

int store_runners_live_before(struct store *store, const void *owner, int64_t first_id,
                              store_runner_rows_cb cb, void *data)
{
    return store_read_as(store, owner,
                         "SELECT id, name, pool, host, state, github_runner_id, job_id, "
                         "exit_code, reason, created_at, online_at, busy_at, finished_at, "
                         "image FROM runners WHERE id < ?1 AND state NOT IN ('deleted')",
                         json_pack("[I]", (json_int_t)first_id), adapt_runner_rows,
                         (void (*)(void))cb, data);
}

int store_runners_list(struct store *store, const void *owner, bool include_ended, store_rows_cb cb,
                       void *data)
{
    return store_read(
        store, owner,
        include_ended
            ? "SELECT name, pool, host, state, job_id, github_runner_id, exit_code, reason, "
              "created_at, online_at, busy_at, finished_at, image FROM runners ORDER BY id DESC "
              "LIMIT 1000"
            : "SELECT name, pool, host, state, job_id, github_runner_id, exit_code, reason, "
              "created_at, online_at, busy_at, finished_at, image FROM runners WHERE state NOT IN "
              "('deleted') ORDER BY id DESC LIMIT 1000",
        json_array(), cb, data);
}

int64_t store_runner_next_id_sync(struct store *store)
{
    /* The newest record is never pruned (store_runners_prune), so the highest id is one
     * ever given; SQLite's sequence also remembers those pruned before that rule. */
    json_t *rows = store_query_sync(
        store,
        store_dialect(store) == STORE_SQLITE
            ? "SELECT max(COALESCE((SELECT max(id) FROM runners), 0), "
              "COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'runners'), 0)) + 1 AS next"
            : "SELECT COALESCE(max(id), 0) + 1 AS next FROM runners",
        json_array());
    int64_t next = json_integer_value(json_object_get(json_array_get(rows, 0), "next"));
    json_decref(rows);
    return next > 0 ? next : 1;
}

int store_runners_prune(struct store *store, int64_t before_ms)
{
    return store_sql_submit(store,
                            "DELETE FROM runners WHERE state = 'deleted' AND updated_at < ?1 "
                            "AND id < (SELECT max(id) FROM runners)",
                            json_pack("[I]", (json_int_t)before_ms), NULL, NULL);
}

bool store_host_drained_sync(struct store *store, const char *host)
{
    json_t *rows = store_query_sync(store, "SELECT 1 FROM hosts WHERE name = ?1 AND drained = 1",
                                    json_pack("[s]", host));
    bool drained = json_array_size(rows) > 0;
    json_decref(rows);
    return drained;
}

int store_host_drained_set(struct store *store, const char *host, bool drained)
{
    return store_sql_submit(store,
                            "INSERT INTO hosts(name, drained) VALUES(?1, ?2) ON CONFLICT(name) DO "
                            "UPDATE SET drained = excluded.drained",
                            json_pack("[s, i]", host, drained ? 1 : 0), NULL, NULL);
}
