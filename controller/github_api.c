/* The GitHub operations Hatchery needs, on top of github_request(); see github.h. */
#define _GNU_SOURCE /* memmem */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "github.h"
#include "log.h"

#define MAX_PAGES 100 /* 100 runners a page: 10,000 runners is far past any real scope */

static int scope_path(const struct github_scope *scope, const char *suffix, char *out, size_t size)
{
    char tail[256];
    int n = snprintf(tail, sizeof(tail), "/actions/runners%s", suffix);
    if (n < 0 || (size_t)n >= sizeof(tail))
        return -ENAMETOOLONG;
    return github_scope_path(scope, tail, out, size);
}

/* ---- generate-jitconfig ---------------------------------------------------------------- */

struct jit_call {
    struct github_client *client;
    struct github_scope scope;
    char *scope_name; /* the copy j->scope points into */
    char *name;
    json_t *request;
    bool conflict_resolved;
    github_jit_cb cb;
    void *data;
};

static void jit_call_free(struct jit_call *j)
{
    json_decref(j->request);
    free(j->scope_name);
    free(j->name);
    free(j);
}

static void jit_fail(struct jit_call *j, int err, const char *message)
{
    j->cb(j->data, err, message, 0, NULL);
    jit_call_free(j);
}

static void jit_post(struct jit_call *j);

static void on_stale_deleted(void *data, int err, const char *message)
{
    struct jit_call *j = data;
    if (err < 0) {
        jit_fail(j, err, message);
        return;
    }
    jit_post(j);
}

static void on_conflict_listed(void *data, int err, const char *message, json_t *runners)
{
    struct jit_call *j = data;
    if (err < 0) {
        jit_fail(j, err, message);
        return;
    }
    size_t i;
    json_t *r;
    json_array_foreach(runners, i, r)
    {
        const char *name = json_string_value(json_object_get(r, "name"));
        if (!name || strcmp(name, j->name) != 0)
            continue;
        if (json_is_true(json_object_get(r, "busy"))) {
            /* It got a job: then it is in use, and a second runner must not appear. */
            jit_fail(j, -EEXIST, "a busy runner already has this name");
            return;
        }
        json_int_t id = json_integer_value(json_object_get(r, "id"));
        log_info("github.jit_name_conflict", "runner=%s id=%lld action=delete-stale", j->name,
                 (long long)id);
        int e = github_runner_delete(j->client, &j->scope, id, on_stale_deleted, j);
        if (e < 0)
            jit_fail(j, e, "cannot delete the stale runner");
        return;
    }
    /* GitHub said taken but lists nothing by that name (it was just removed): try again. */
    jit_post(j);
}

static void on_jit(void *data, const struct github_response *res)
{
    struct jit_call *j = data;
    int err = res->err;
    long status = res->status;
    json_t *body = res->body;
    const char *message = res->message;
    if (err < 0 && (status == 409 || status == 422) && !j->conflict_resolved) {
        j->conflict_resolved = true;
        int e = github_runners_list(j->client, &j->scope, j->name, on_conflict_listed, j);
        if (e < 0)
            jit_fail(j, e, "cannot list runners to resolve a name conflict");
        return;
    }
    if (err < 0) {
        jit_fail(j, err, message);
        return;
    }
    json_t *config = json_object_get(body, "encoded_jit_config");
    json_t *id = json_object_get(json_object_get(body, "runner"), "id");
    if (!json_is_string(config) || json_string_length(config) == 0 || !json_is_integer(id)) {
        jit_fail(j, -EBADMSG, "generate-jitconfig answer lacks runner.id or encoded_jit_config");
        return;
    }
    struct secret *jit = NULL;
    if (secret_from_bytes(json_string_value(config), json_string_length(config), &jit) < 0) {
        jit_fail(j, -ENOMEM, "out of memory");
        return;
    }
    j->cb(j->data, 0, NULL, json_integer_value(id), jit);
    jit_call_free(j);
}

static void jit_post(struct jit_call *j)
{
    char path[512];
    int e = scope_path(&j->scope, "/generate-jitconfig", path, sizeof(path));
    if (e == 0)
        e = github_request(j->client, "POST", path, j->request, on_jit, j);
    if (e < 0)
        jit_fail(j, e, "cannot send generate-jitconfig");
}

int github_jitconfig_generate(struct github_client *client, const struct github_scope *scope,
                              const char *name, const char *const *labels, size_t n_labels,
                              const char *work_folder, github_jit_cb cb, void *data)
{
    if (!name || !*name || n_labels == 0 || n_labels > 100)
        return -EINVAL;
    struct jit_call *j = calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    j->client = client;
    const char *scope_name = github_scope_name(scope);
    j->scope_name = scope_name ? strdup(scope_name) : NULL;
    j->scope =
        (struct github_scope){scope->repo ? j->scope_name : NULL, scope->org ? j->scope_name : NULL,
                              scope->enterprise ? j->scope_name : NULL, scope->runner_group_id};
    j->name = strdup(name);
    j->cb = cb;
    j->data = data;
    json_t *l = json_array();
    for (size_t i = 0; i < n_labels; i++)
        json_array_append_new(l, json_string(labels[i]));
    j->request = json_pack("{s:s, s:I, s:o, s:s}", "name", name, "runner_group_id",
                           (json_int_t)scope->runner_group_id, "labels", l, "work_folder",
                           work_folder ? work_folder : "_work");
    if (!j->name || !j->request || !j->scope_name) {
        jit_call_free(j);
        return -ENOMEM;
    }
    jit_post(j);
    return 0;
}

/* ---- paginated lists ------------------------------------------------------------------ */

struct list_call {
    struct github_client *client;
    const char *items_key; /* "runners", "workflow_runs", "jobs" */
    json_t *items;
    int pages;
    github_list_cb cb;
    void *data;
};

/* The `rel="next"` target of a Link header value. Writes it to `out`; 0 when found. */
static int link_next(const char *link, char *out, size_t size)
{
    const char *p = link;
    while (p && *p) {
        const char *lt = strchr(p, '<');
        const char *gt = lt ? strchr(lt, '>') : NULL;
        if (!gt)
            return -ENOENT;
        const char *end = strchr(gt, ',');
        size_t params_len = end ? (size_t)(end - gt) : strlen(gt);
        if (memmem(gt, params_len, "rel=\"next\"", 10) && (size_t)(gt - lt - 1) < size) {
            memcpy(out, lt + 1, (size_t)(gt - lt - 1));
            out[gt - lt - 1] = 0;
            return 0;
        }
        p = end ? end + 1 : NULL;
    }
    return -ENOENT;
}

static void list_finish(struct list_call *l, int err, const char *message)
{
    l->cb(l->data, err, message, err < 0 ? NULL : l->items);
    json_decref(l->items);
    free(l);
}

static void on_list_page(void *data, const struct github_response *res);

static int list_get(struct list_call *l, const char *path)
{
    return github_request(l->client, "GET", path, NULL, on_list_page, l);
}

static void on_list_page(void *data, const struct github_response *res)
{
    struct list_call *l = data;
    if (res->err < 0) {
        list_finish(l, res->err, res->message);
        return;
    }
    json_t *items = json_object_get(res->body, l->items_key);
    if (!json_is_array(items)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "list answer lacks \"%s\"", l->items_key);
        list_finish(l, -EBADMSG, msg);
        return;
    }
    json_array_extend(l->items, items);
    const char *link = res->link;
    char next[2048];
    if (!link || link_next(link, next, sizeof(next)) < 0) {
        list_finish(l, 0, NULL);
        return;
    }
    if (++l->pages >= MAX_PAGES) {
        list_finish(l, -E2BIG, "more pages than the client will follow");
        return;
    }
    int e = list_get(l, next);
    if (e < 0)
        list_finish(l, e,
                    e == -EPERM ? "refused a pagination link off the API host"
                                : "cannot fetch the next page");
}

static int list_start(struct github_client *client, const char *path, const char *items_key,
                      github_list_cb cb, void *data)
{
    struct list_call *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->client = client;
    l->items_key = items_key;
    l->items = json_array();
    l->cb = cb;
    l->data = data;
    int e = list_get(l, path);
    if (e < 0) {
        json_decref(l->items);
        free(l);
    }
    return e;
}

int github_runners_list(struct github_client *client, const struct github_scope *scope,
                        const char *name, github_list_cb cb, void *data)
{
    char path[1024];
    char suffix[512];
    if (name) {
        char *escaped = curl_easy_escape(NULL, name, 0);
        if (!escaped)
            return -ENOMEM;
        snprintf(suffix, sizeof(suffix), "?per_page=100&name=%s", escaped);
        curl_free(escaped);
    } else {
        snprintf(suffix, sizeof(suffix), "?per_page=100");
    }
    int e = scope_path(scope, suffix, path, sizeof(path));
    return e < 0 ? e : list_start(client, path, "runners", cb, data);
}

int github_runner_get(struct github_client *client, const struct github_scope *scope,
                      int64_t runner_id, github_json_cb cb, void *data)
{
    char path[512], suffix[32];
    snprintf(suffix, sizeof(suffix), "/%lld", (long long)runner_id);
    int e = scope_path(scope, suffix, path, sizeof(path));
    return e < 0 ? e : github_request(client, "GET", path, NULL, cb, data);
}

struct done_call {
    github_done_cb cb;
    void *data;
};

static void on_deleted(void *data, const struct github_response *res)
{
    struct done_call *d = data;
    int err = res->err;
    if (err < 0 && res->status == 404)
        err = 0; /* already gone */
    if (d->cb)
        d->cb(d->data, err, err < 0 ? res->message : NULL);
    free(d);
}

int github_runner_delete(struct github_client *client, const struct github_scope *scope,
                         int64_t runner_id, github_done_cb cb, void *data)
{
    char path[512], suffix[32];
    snprintf(suffix, sizeof(suffix), "/%lld", (long long)runner_id);
    int e = scope_path(scope, suffix, path, sizeof(path));
    if (e < 0)
        return e;
    struct done_call *d = malloc(sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->cb = cb;
    d->data = data;
    e = github_request(client, "DELETE", path, NULL, on_deleted, d);
    if (e < 0)
        free(d);
    return e;
}

int github_installation_repos_list(struct github_client *client, github_list_cb cb, void *data)
{
    return list_start(client, "/installation/repositories?per_page=100", "repositories", cb, data);
}

int github_job_get(struct github_client *client, const char *repo, int64_t job_id,
                   github_json_cb cb, void *data)
{
    char path[512];
    snprintf(path, sizeof(path), "/repos/%s/actions/jobs/%lld", repo, (long long)job_id);
    return github_request(client, "GET", path, NULL, cb, data);
}

int github_runner_group_get(struct github_client *client, const char *org, int64_t group_id,
                            github_json_cb cb, void *data)
{
    char path[512];
    snprintf(path, sizeof(path), "/orgs/%s/actions/runner-groups/%lld", org, (long long)group_id);
    return github_request(client, "GET", path, NULL, cb, data);
}

/* ---- queued jobs: runs, then each run's jobs ------------------------------------------ */

struct queued_call {
    struct github_client *client;
    char *repo;
    json_t *jobs;
    size_t runs_pending;
    int err;
    char message[256];
    github_list_cb cb;
    void *data;
};

static void queued_finish(struct queued_call *q)
{
    q->cb(q->data, q->err, q->err < 0 ? q->message : NULL, q->err < 0 ? NULL : q->jobs);
    json_decref(q->jobs);
    free(q->repo);
    free(q);
}

static void on_run_jobs(void *data, int err, const char *message, json_t *jobs)
{
    struct queued_call *q = data;
    if (err < 0 && q->err == 0) {
        q->err = err;
        snprintf(q->message, sizeof(q->message), "%s", message ? message : "failed");
    }
    size_t i;
    json_t *job;
    json_array_foreach(jobs, i, job)
    {
        const char *status = json_string_value(json_object_get(job, "status"));
        if (status && strcmp(status, "queued") == 0)
            json_array_append(q->jobs, job);
    }
    if (--q->runs_pending == 0)
        queued_finish(q);
}

static void on_queued_runs(void *data, int err, const char *message, json_t *runs)
{
    struct queued_call *q = data;
    if (err < 0) {
        q->err = err;
        snprintf(q->message, sizeof(q->message), "%s", message ? message : "failed");
        queued_finish(q);
        return;
    }
    size_t n = json_array_size(runs);
    if (n == 0) {
        queued_finish(q);
        return;
    }
    /* One extra count so that a synchronous failure below cannot finish early. */
    q->runs_pending = n + 1;
    for (size_t i = 0; i < n; i++) {
        json_t *id = json_object_get(json_array_get(runs, i), "id");
        char path[512];
        snprintf(path, sizeof(path), "/repos/%s/actions/runs/%lld/jobs?filter=latest&per_page=100",
                 q->repo, (long long)json_integer_value(id));
        if (!json_is_integer(id) || list_start(q->client, path, "jobs", on_run_jobs, q) < 0)
            on_run_jobs(q, -EBADMSG, "cannot list a run's jobs", NULL);
    }
    if (--q->runs_pending == 0)
        queued_finish(q);
}

int github_queued_jobs_list(struct github_client *client, const char *repo, github_list_cb cb,
                            void *data)
{
    struct queued_call *q = calloc(1, sizeof(*q));
    if (!q)
        return -ENOMEM;
    q->client = client;
    q->repo = strdup(repo);
    q->jobs = json_array();
    q->cb = cb;
    q->data = data;
    char path[512];
    snprintf(path, sizeof(path), "/repos/%s/actions/runs?status=queued&per_page=100", repo);
    int e = q->repo ? list_start(client, path, "workflow_runs", on_queued_runs, q) : -ENOMEM;
    if (e < 0) {
        json_decref(q->jobs);
        free(q->repo);
        free(q);
    }
    return e;
}
