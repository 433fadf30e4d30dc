/* The store's jobs table, by name (store.h): every statement on it that the scheduler,
 * hatcheryd and /metrics make, beside the webhook's own writes in store.c. */
#define _GNU_SOURCE /* asprintf */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "store.h"
#include "textbuf.h"

/* A list's rows as job refs, for its callback. */
static void adapt_job_refs(json_t *rows, void (*cb)(void), void *data)
{
    int err;
    struct store_job_ref *out = store_rows_array(rows, sizeof(*out), &err);
    if (!out) {
        ((store_job_refs_cb)cb)(data, err, NULL, 0);
        return;
    }
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        json_t *queued = json_object_get(row, "queued_at");
        const char *repo = json_string_value(json_object_get(row, "repository"));
        struct store_job_ref *ref = &out[i];
        ref->id = json_integer_value(json_object_get(row, "id"));
        ref->queued_ms = json_is_integer(queued) ? json_integer_value(queued) : 0;
        snprintf(ref->repository, sizeof(ref->repository), "%s", repo ? repo : "");
    }
    ((store_job_refs_cb)cb)(data, 0, out, json_array_size(rows));
    free(out);
}

static int job_refs(struct store *store, const void *owner, const char *sql, json_t *params,
                    store_job_refs_cb cb, void *data)
{
    return store_read_as(store, owner, sql, params, adapt_job_refs, (void (*)(void))cb, data);
}

int store_jobs_stuck(struct store *store, const void *owner, const char *pool, int64_t before_ms,
                     int limit, store_job_refs_cb cb, void *data)
{
    return job_refs(store, owner,
                    "SELECT id, repository FROM jobs WHERE pool = ?1 AND status = "
                    "'in_progress' AND updated_at < ?2 ORDER BY updated_at, id LIMIT ?3",
                    json_pack("[s, I, i]", pool, (json_int_t)before_ms, limit), cb, data);
}

int store_jobs_unsupplied(struct store *store, const void *owner, const char *pool, int limit,
                          store_job_refs_cb cb, void *data)
{
    return job_refs(store, owner,
                    "SELECT id, queued_at FROM jobs WHERE pool = ?1 AND status = "
                    "'queued' AND supplied_at IS NULL ORDER BY queued_at, id LIMIT ?2",
                    json_pack("[s, i]", pool, limit), cb, data);
}

int store_job_supplied(struct store *store, int64_t id, int64_t at_ms)
{
    return store_sql_submit(
        store, "UPDATE jobs SET supplied_at = ?2 WHERE id = ?1 AND supplied_at IS NULL",
        json_pack("[I, I]", (json_int_t)id, (json_int_t)at_ms), NULL, NULL);
}

static void adapt_queued_at(json_t *rows, void (*cb)(void), void *data)
{
    json_t *q = json_object_get(json_array_get(rows, 0), "queued_at");
    ((void (*)(void *, int64_t))cb)(data, json_is_integer(q) ? json_integer_value(q) : -1);
}

int store_job_queued_at(struct store *store, const void *owner, int64_t id,
                        void (*cb)(void *data, int64_t queued_ms), void *data)
{
    return store_read_as(store, owner, "SELECT queued_at FROM jobs WHERE id = ?1",
                         json_pack("[I]", (json_int_t)id), adapt_queued_at, (void (*)(void))cb,
                         data);
}

int store_job_verified(struct store *store, int64_t id, store_write_cb cb, void *data)
{
    return store_sql_submit(store, "UPDATE jobs SET unverified = 0 WHERE id = ?1",
                            json_pack("[I]", (json_int_t)id), cb, data);
}

int store_job_touch(struct store *store, int64_t id, int64_t now_ms)
{
    return store_sql_submit(store, "UPDATE jobs SET updated_at = ?2 WHERE id = ?1",
                            json_pack("[I, I]", (json_int_t)id, (json_int_t)now_ms), NULL, NULL);
}

int store_job_retire(struct store *store, int64_t id, enum job_status status,
                     const char *conclusion, int64_t now_ms, store_write_cb cb, void *data)
{
    return store_sql_submit(store,
                            "UPDATE jobs SET status = ?2, status_rank = ?3, conclusion = "
                            "COALESCE(?4, conclusion), started_at = COALESCE(started_at, ?5), "
                            "completed_at = CASE WHEN ?3 = 3 THEN ?5 ELSE completed_at END, "
                            "updated_at = ?5, unverified = 0 WHERE id = ?1 AND status_rank < ?3",
                            json_pack("[I, s, i, s?, I]", (json_int_t)id, job_status_names[status],
                                      (int)status, conclusion, (json_int_t)now_ms),
                            cb, data);
}

int store_jobs_unverified(struct store *store, const void *owner, int limit, store_job_refs_cb cb,
                          void *data)
{
    return job_refs(store, owner,
                    "SELECT id, repository FROM jobs WHERE unverified = 1 AND "
                    "status = 'queued' ORDER BY id LIMIT ?1",
                    json_pack("[i]", limit), cb, data);
}

/* At most this many ids go into one statement (a longer GitHub list is cut: the jobs it
 * would have named are asked about, one by one, as if unlisted). */
#define IDS_PER_STATEMENT 5000

/* "WITH listed(id) AS (VALUES (?k), (?k+1), …) " for the integers of `ids_text` (a JSON
 * array), their values appended to `params`; "" for none. NULL when out of memory. */
static char *listed_ids(const char *ids_text, json_t *params)
{
    json_t *ids = json_loads(ids_text, 0, NULL);
    struct textbuf sql;
    textbuf_init(&sql, 16 * IDS_PER_STATEMENT + 64);
    size_t i, n = 0;
    json_t *id;
    json_array_foreach(ids, i, id)
    {
        if (!json_is_integer(id) || n == IDS_PER_STATEMENT)
            continue;
        json_array_append(params, id);
        textbuf_printf(&sql, "%s(?%zu)", n++ ? ", " : "WITH listed(id) AS (VALUES ",
                       json_array_size(params));
    }
    json_decref(ids);
    textbuf_printf(&sql, "%s", n ? ") " : "");
    if (sql.error) {
        textbuf_free(&sql);
        return NULL;
    }
    size_t len;
    return sql.data ? textbuf_steal(&sql, &len) : strdup("");
}

/* job_refs() with a statement made for the call (taken; NULL: out of memory). */
static int job_refs_of(struct store *store, const void *owner, char *sql, json_t *params,
                       store_job_refs_cb cb, void *data)
{
    if (!sql) {
        json_decref(params);
        return -ENOMEM;
    }
    int r = job_refs(store, owner, sql, params, cb, data);
    free(sql);
    return r;
}

int store_jobs_queued_unlisted(struct store *store, const void *owner, const char *repo,
                               int64_t before_ms, const char *listed, int limit,
                               store_job_refs_cb cb, void *data)
{
    json_t *params = json_pack("[s, I, i]", repo, (json_int_t)before_ms, limit);
    char *with = params ? listed_ids(listed, params) : NULL;
    char *sql = NULL;
    if (with && asprintf(&sql,
                         "%sSELECT id FROM jobs WHERE status = 'queued' AND repository = ?1 AND "
                         "queued_at < ?2 AND updated_at < ?2 %s ORDER BY queued_at LIMIT ?3",
                         with, with[0] ? "AND id NOT IN (SELECT id FROM listed)" : "") < 0)
        sql = NULL;
    free(with);
    return job_refs_of(store, owner, sql, params, cb, data);
}

int store_job_ids_unknown(struct store *store, const void *owner, const char *ids,
                          store_job_refs_cb cb, void *data)
{
    json_t *params = json_array();
    char *with = params ? listed_ids(ids, params) : NULL;
    char *sql = NULL;
    if (with && with[0]) {
        if (asprintf(&sql, "%sSELECT id FROM listed WHERE id NOT IN (SELECT id FROM jobs)", with) <
            0)
            sql = NULL;
    } else if (with) {
        sql = strdup("SELECT id FROM jobs WHERE 1 = 0"); /* none listed: none unknown */
    }
    free(with);
    return job_refs_of(store, owner, sql, params, cb, data);
}

int store_jobs_of_live_runners(struct store *store, const void *owner, int64_t since_ms,
                               store_rows_cb cb, void *data)
{
    /* Both arms have an index (jobs_in_progress, jobs_updated_at): the jobs table is
     * never scanned whole, however long it is. */
    return store_read(store, owner,
                      "SELECT j.id, j.status, j.runner_name FROM jobs j "
                      "JOIN runners r ON r.name = j.runner_name "
                      "WHERE r.state IN ('configured', 'idle', 'busy') "
                      "AND (j.status = 'in_progress' "
                      "OR (j.status = 'completed' AND j.updated_at > ?1))",
                      json_pack("[I]", (json_int_t)since_ms), cb, data);
}

int store_jobs_prune(struct store *store, int64_t before_ms)
{
    return store_sql_submit(store,
                            "DELETE FROM jobs WHERE status = 'completed' AND updated_at < ?1",
                            json_pack("[I]", (json_int_t)before_ms), NULL, NULL);
}
