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

int store_scaleset_cursor(struct store *store, const char *name, int64_t *ret_scale_set_id,
                          int64_t *ret_last_message_id)
{
    json_t *rows = store_query(store,
                               "SELECT scale_set_id, last_message_id FROM scale_sets "
                               "WHERE name = ?1",
                               json_pack("[s]", name));
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    *ret_scale_set_id = json_integer_value(json_object_get(row, "scale_set_id"));
    *ret_last_message_id = json_integer_value(json_object_get(row, "last_message_id"));
    json_decref(rows);
    return 0;
}

json_t *store_scaleset_jobs(struct store *store, const char *name, int limit)
{
    return store_query(store,
                       "SELECT job_id, state, runner_name, result, updated_at FROM scale_set_jobs "
                       "WHERE scale_set = ?1 ORDER BY updated_at DESC LIMIT ?2",
                       json_pack("[s, i]", name, limit));
}
