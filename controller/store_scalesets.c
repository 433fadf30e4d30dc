/* The store's scale_sets and scale_set_jobs tables (store.h): every statement on them. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>

#include "store.h"

int store_scaleset_message_commit(struct store *store, const char *name, int64_t scale_set_id,
                                  int64_t message_id, json_t *jobs, int64_t now_ms,
                                  store_write_cb cb, void *data)
{
    char *text = json_dumps(jobs, JSON_COMPACT);
    json_decref(jobs);
    if (!text)
        return -ENOMEM;
    /* Both writes join the same group commit, in order: the callback of the second runs
     * only once the first is on disk too (a failed first one fails the transaction's
     * savepoint alone, so the cursor would move past news not kept: it is checked). */
    int r = store_sql_submit(
        store,
        "INSERT INTO scale_set_jobs(scale_set, job_id, state, runner_name, result, labels, "
        "updated_at) "
        "SELECT ?1, json_extract(value, '$.job_id'), json_extract(value, '$.state'), "
        "json_extract(value, '$.runner_name'), json_extract(value, '$.result'), "
        "json_extract(value, '$.labels'), ?3 FROM json_each(?2) WHERE true "
        "ON CONFLICT (scale_set, job_id) DO UPDATE SET state = excluded.state, "
        "runner_name = COALESCE(excluded.runner_name, runner_name), "
        "result = COALESCE(excluded.result, result), "
        "labels = COALESCE(excluded.labels, labels), updated_at = excluded.updated_at",
        json_pack("[s, s, I]", name, text, (json_int_t)now_ms), NULL, NULL);
    free(text);
    if (r < 0)
        return r;
    return store_sql_submit(
        store,
        "INSERT INTO scale_sets(name, scale_set_id, last_message_id, updated_at) "
        "VALUES(?1, ?2, ?3, ?4) ON CONFLICT (name) DO UPDATE SET "
        "last_message_id = CASE WHEN scale_set_id = excluded.scale_set_id "
        "THEN MAX(last_message_id, excluded.last_message_id) "
        "ELSE excluded.last_message_id END, "
        "scale_set_id = excluded.scale_set_id, "
        "updated_at = excluded.updated_at",
        json_pack("[s, I, I, I]", name, (json_int_t)scale_set_id, (json_int_t)message_id,
                  (json_int_t)now_ms),
        cb, data);
}

static const char cursor_sql[] =
    "SELECT scale_set_id, last_message_id FROM scale_sets WHERE name = ?1";

static int cursor_of(json_t *rows, int64_t *ret_scale_set_id, int64_t *ret_last_message_id)
{
    json_t *row = json_array_get(rows, 0);
    *ret_scale_set_id = json_integer_value(json_object_get(row, "scale_set_id"));
    *ret_last_message_id = json_integer_value(json_object_get(row, "last_message_id"));
    return rows ? 0 : -EIO;
}

static void adapt_cursor(json_t *rows, void (*cb)(void), void *data)
{
    int64_t id, last;
    int err = cursor_of(rows, &id, &last);
    ((store_scaleset_cursor_cb)cb)(data, err, id, last);
}

int store_scaleset_cursor(struct store *store, const void *owner, const char *name,
                          store_scaleset_cursor_cb cb, void *data)
{
    return store_read_as(store, owner, cursor_sql, json_pack("[s]", name), adapt_cursor,
                         (void (*)(void))cb, data);
}

int store_scaleset_cursor_sync(struct store *store, const char *name, int64_t *ret_scale_set_id,
                               int64_t *ret_last_message_id)
{
    json_t *rows = store_query_sync(store, cursor_sql, json_pack("[s]", name));
    int err = cursor_of(rows, ret_scale_set_id, ret_last_message_id);
    json_decref(rows);
    return err;
}
