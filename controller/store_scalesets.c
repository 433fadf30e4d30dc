/* The store's scale_sets and scale_set_jobs tables (store.h): every statement on them. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>

#include "store.h"

int store_scaleset_message_commit(struct store *store, const char *name, int64_t scale_set_id,
                                  int64_t message_id, json_t *jobs, int64_t now_ms,
                                  store_write_cb cb, void *data)
{
    /* One write of several statements, all or none: each job's news in order (a later one
     * for the same job overrides what it says, keeps what it does not), then the cursor.
     * `cb` runs once all of it is on disk; the cursor never moves past news not kept. */
    json_t *statements = json_array();
    size_t i, expected = json_array_size(jobs) + 1;
    json_t *job;
    json_array_foreach(jobs, i, job)
    {
        json_t *params =
            json_pack("[s, s, s, s?, s?, s?, I]", name,
                      json_string_value(json_object_get(job, "job_id")) ?: "",
                      json_string_value(json_object_get(job, "state")) ?: "",
                      json_string_value(json_object_get(job, "runner_name")),
                      json_string_value(json_object_get(job, "result")),
                      json_string_value(json_object_get(job, "labels")), (json_int_t)now_ms);
        json_array_append_new(
            statements,
            json_pack("[s, o]",
                      "INSERT INTO scale_set_jobs(scale_set, job_id, state, runner_name, result, "
                      "labels, updated_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7) "
                      "ON CONFLICT (scale_set, job_id) DO UPDATE SET state = excluded.state, "
                      "runner_name = COALESCE(excluded.runner_name, scale_set_jobs.runner_name), "
                      "result = COALESCE(excluded.result, scale_set_jobs.result), "
                      "labels = COALESCE(excluded.labels, scale_set_jobs.labels), "
                      "updated_at = excluded.updated_at",
                      params));
    }
    json_decref(jobs);
    json_array_append_new(
        statements,
        json_pack("[s, [s, I, I, I]]",
                  "INSERT INTO scale_sets(name, scale_set_id, last_message_id, updated_at) "
                  "VALUES(?1, ?2, ?3, ?4) ON CONFLICT (name) DO UPDATE SET "
                  "last_message_id = CASE WHEN scale_sets.scale_set_id <> excluded.scale_set_id "
                  "OR excluded.last_message_id > scale_sets.last_message_id "
                  "THEN excluded.last_message_id ELSE scale_sets.last_message_id END, "
                  "scale_set_id = excluded.scale_set_id, updated_at = excluded.updated_at",
                  name, (json_int_t)scale_set_id, (json_int_t)message_id, (json_int_t)now_ms));
    if (json_array_size(statements) != expected) {
        json_decref(statements);
        return -ENOMEM;
    }
    return store_sql_group_submit(store, statements, cb, data);
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
