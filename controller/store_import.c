/* A SQLite site's store copied into an empty PostgreSQL one (store.h's store_import). */
#define _GNU_SOURCE /* asprintf */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store.h"
#include "textbuf.h"

/* Every table that holds a record of the site, with the key it is paged by. job_counts is
 * not copied: the target's triggers count the jobs as they arrive. */
static const struct {
    const char *table;
    const char *key;
} tables[] = {
    {"deliveries", "id"}, {"jobs", "id"},         {"runners", "id"},
    {"hosts", "name"},    {"scale_sets", "name"}, {"scale_set_jobs", "scale_set || '/' || job_id"},
};
#define N_TABLES  (sizeof(tables) / sizeof(tables[0]))
#define PAGE_ROWS 1000

/* INSERT INTO `table` of `row`'s columns, as [sql, params]. */
static json_t *insert_of(const char *table, json_t *row)
{
    struct textbuf cols, marks;
    textbuf_init(&cols, 4096);
    textbuf_init(&marks, 4096);
    json_t *params = json_array();
    const char *name;
    json_t *v;
    json_object_foreach(row, name, v)
    {
        json_array_append(params, v);
        textbuf_printf(&cols, "%s%s", json_array_size(params) > 1 ? ", " : "", name);
        textbuf_printf(&marks, "%s?%zu", json_array_size(params) > 1 ? ", " : "",
                       json_array_size(params));
    }
    char *sql = NULL;
    if (cols.error || marks.error ||
        asprintf(&sql, "INSERT INTO %s(%s) VALUES(%s)", table, cols.data, marks.data) < 0)
        sql = NULL;
    textbuf_free(&cols);
    textbuf_free(&marks);
    json_t *pair = sql ? json_pack("[s, o]", sql, params) : NULL;
    if (!pair)
        json_decref(params);
    free(sql);
    return pair;
}

static int64_t count_of(struct store *s, const char *table)
{
    char sql[96];
    snprintf(sql, sizeof(sql), "SELECT count(*) AS n FROM %s", table);
    json_t *rows = store_query_sync(s, sql, json_array());
    json_t *n = json_object_get(json_array_get(rows, 0), "n");
    int64_t count = json_is_integer(n) ? json_integer_value(n) : -1;
    json_decref(rows);
    return count;
}

int store_import(struct store *target, struct store *source, json_t **ret_counts, char *err,
                 size_t err_size)
{
    *ret_counts = NULL;
    err[0] = 0;
    for (size_t t = 0; t < N_TABLES; t++) {
        int64_t n = count_of(target, tables[t].table);
        if (n != 0) {
            snprintf(err, err_size,
                     n < 0 ? "cannot read the target's %s"
                           : "the target already holds %s: refusing to mix two sites' records "
                             "(import into an empty database)",
                     tables[t].table);
            return n < 0 ? -EIO : -EEXIST;
        }
    }
    json_t *counts = json_object();
    for (size_t t = 0; t < N_TABLES; t++) {
        const char *table = tables[t].table, *key = tables[t].key;
        char *page_sql = NULL;
        if (asprintf(&page_sql, "SELECT * FROM %s WHERE ?1 IS NULL OR %s > ?1 ORDER BY %s LIMIT %d",
                     table, key, key, PAGE_ROWS) < 0) {
            json_decref(counts);
            snprintf(err, err_size, "out of memory");
            return -ENOMEM;
        }
        json_t *after = json_null();
        int64_t copied = 0;
        for (;;) {
            json_t *rows = store_query_sync(source, page_sql, json_pack("[O]", after));
            if (!rows) {
                snprintf(err, err_size, "cannot read the source's %s", table);
                break;
            }
            if (json_array_size(rows) == 0) {
                json_decref(rows);
                break;
            }
            json_t *group = json_array();
            size_t i;
            json_t *row;
            json_array_foreach(rows, i, row)
            {
                json_array_append_new(group, insert_of(table, row));
            }
            /* One transaction per page: all of it or none. */
            int r = -ENOMEM;
            if (json_array_size(group) == json_array_size(rows))
                r = store_sql_group_apply_sync(target, group); /* takes the group */
            else
                json_decref(group);
            if (r < 0) {
                json_decref(rows);
                snprintf(err, err_size, "cannot write %s into the target (%lld copied)", table,
                         (long long)copied);
                break;
            }
            copied += (int64_t)json_array_size(rows);
            /* The next page starts after the last row's key, as the source compares it. */
            json_t *last = json_array_get(rows, json_array_size(rows) - 1);
            json_t *k =
                strcmp(table, "scale_set_jobs") == 0
                    ? json_pack("s++", json_string_value(json_object_get(last, "scale_set")), "/",
                                json_string_value(json_object_get(last, "job_id")))
                    : json_incref(json_object_get(last, key));
            json_decref(after);
            after = k ? k : json_null();
            json_decref(rows);
            if (!k) {
                snprintf(err, err_size, "out of memory");
                break;
            }
        }
        json_decref(after);
        free(page_sql);
        if (count_of(source, table) != copied || count_of(target, table) != copied) {
            if (!err[0])
                snprintf(err, err_size, "%s: %lld copied of %lld", table, (long long)copied,
                         (long long)count_of(source, table));
            json_decref(counts);
            return -EIO;
        }
        json_object_set_new(counts, table, json_integer(copied));
    }
    /* Runner ids are never given twice: an id SQLite's sequence gave to a record pruned
     * since is kept by a deleted record of that id (the newest is never pruned). */
    int64_t next = store_runner_next_id_sync(source);
    if (next > store_runner_next_id_sync(target)) {
        char name[64];
        snprintf(name, sizeof(name), "hatchery-import-%lld", (long long)(next - 1));
        json_t *one = json_pack(
            "[[s, [I, s]]]",
            "INSERT INTO runners(id, name, pool, host, state, vcpus, memory_mib, created_at, "
            "updated_at, reason) VALUES(?1, ?2, '', '', 'deleted', 0, 0, 0, 0, "
            "'the highest id the SQLite store gave, kept so that no id is given twice')",
            (json_int_t)(next - 1), name);
        if (store_sql_group_apply_sync(target, one) < 0) {
            snprintf(err, err_size, "cannot keep the runners' next id (%lld)", (long long)next);
            json_decref(counts);
            return -EIO;
        }
    }
    json_object_set_new(counts, "next_runner_id", json_integer(store_runner_next_id_sync(target)));
    *ret_counts = counts;
    return 0;
}
