/* Every admin command's answer; see admin_commands.h. */
#include "admin_commands.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "lease.h"
#include "daemon_config.h"
#include "guest_isolation.h"
#include "hatchery/admin_protocol.h"
#include "pool_image.h"
#include "scaleset/scaleset.h"
#include "wall_clock.h"

/* A VM pool's image: as each remote host's probe found it (provider_host_image), and
 * read from this machine for its other hosts (local ones, and the test driver's, which
 * has no files of its own). `image_manifest` is this machine's, else the first a remote
 * host has; `image_error` this machine's problem, else the first remote host's. */
static void pool_image_json(struct daemon *d, const struct config_pool *p, json_t *out)
{
    char err[512];
    json_t *on_hosts = json_array(), *remote_error = NULL;
    bool here = false;
    struct image_status st;
    for (size_t i = 0; i < d->config->n_hosts; i++) {
        const char *host = d->config->hosts[i].name;
        if (!config_pool_uses_host(p, host) || provider_host_image(d->provider, host, p, &st) < 0)
            continue;
        json_t *row = json_pack("{s:s, s:s}", "host", host, "state", image_state_name(st.state));
        here = here || st.state == IMAGE_LOCAL || st.state == IMAGE_UNCHECKED;
        if (st.state == IMAGE_READY) {
            json_object_set_new(row, "manifest", image_manifest_json(&st.manifest));
        } else if (st.reason[0]) {
            json_object_set_new(row, "reason", json_string(st.reason));
            snprintf(err, sizeof(err), "host %s: %s", host, st.reason);
            if (!remote_error)
                remote_error = json_string(err);
        }
        json_array_append_new(on_hosts, row);
    }
    json_object_set_new(out, "image_hosts", on_hosts);
    /* This machine's problem first (as last seen on disk, image_cache.h), else the first
     * remote host's. */
    const struct image_cache_entry *e = here ? image_cache_get(d->images, p->image) : NULL;
    if (e && e->manifest_rc == 0 &&
        image_manifest_check(&e->manifest, (enum pool_arch)p->arch, err, sizeof(err)) < 0)
        json_object_set_new(out, "image_error", json_string(err));
    else if (e && e->manifest_rc < 0)
        json_object_set_new(out, "image_error", json_string(e->err));
    if (remote_error && !json_object_get(out, "image_error"))
        json_object_set(out, "image_error", remote_error);
    json_decref(remote_error);
    /* The manifest (this machine's first), and when GitHub stops giving its runners jobs. */
    struct image_manifest m;
    struct runner_judgement j;
    if (pool_image_find_manifest(d, p, &m)) {
        json_object_set_new(out, "image_manifest", image_manifest_json(&m));
        if (pool_image_runner_refused(d, &m, &j))
            json_object_set_new(out, "runner_refused_at", json_integer((json_int_t)j.refused_at));
    }
}

static json_t *pool_json(struct daemon *d, const struct config_pool *p)
{
    json_t *labels = json_array(), *hosts = json_array();
    for (size_t i = 0; i < p->n_labels; i++)
        json_array_append_new(labels, json_string(p->labels[i]));
    for (size_t i = 0; i < p->n_hosts; i++)
        json_array_append_new(hosts, json_string(p->hosts[i]));
    json_t *out =
        json_pack("{s:s, s:o, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:o}", "name", p->name, "labels",
                  labels, "arch", pool_arch_names[p->arch], "backend",
                  pool_backend_names[p->backend], "image", p->image, "vcpus", (json_int_t)p->vcpus,
                  "memory_mib", (json_int_t)p->memory_mib, "min_idle", (json_int_t)p->min_idle,
                  "max_runners", (json_int_t)p->max_runners, "hosts", hosts);
    json_object_set_new(out, "start", json_string(pool_start_names[p->start]));
    if (p->backend == BACKEND_VM)
        pool_image_json(d, p, out);
    return out;
}

/* capacity: per pool, its runners by state, its jobs by status and why they wait; and the
 * jobs no pool matches. `rows`: the store's job counts. */
static json_t *admin_capacity(struct daemon *d, enum admin_command command, json_t *request,
                              json_t *rows)
{
    (void)command;
    (void)request;
    if (!rows)
        return json_pack("{s:b, s:s}", "ok", 0, "error", "store read failed");
    json_t *pools = json_object(); /* name -> its row */
    json_t *list = json_array();
    for (size_t i = 0; i < d->config->n_pools; i++) {
        const struct config_pool *p = &d->config->pools[i];
        json_t *jobs = json_object();
        for (int s = 0; s < JOB_STATUS_MAX; s++)
            json_object_set_new(jobs, job_status_names[s], json_integer(0));
        json_t *row =
            json_pack("{s:s, s:s, s:I, s:I, s:I, s:o}", "pool", p->name, "arch",
                      pool_arch_names[p->arch], "max_runners", (json_int_t)p->max_runners,
                      "min_idle", (json_int_t)p->min_idle, "runners", (json_int_t)0, "jobs", jobs);
        if (d->scheduler) {
            json_t *sp = scheduler_pool_json(d->scheduler, p->name);
            json_object_set(row, "runners", json_object_get(sp, "live"));
            json_object_set(row, "runners_by_state", json_object_get(sp, "by_state"));
            json_object_set(row, "waiting", json_object_get(sp, "waiting"));
            if (json_object_get(sp, "runner_group"))
                json_object_set(row, "runner_group", json_object_get(sp, "runner_group"));
            json_decref(sp);
        }
        json_object_set(pools, p->name, row);
        json_array_append_new(list, row);
    }
    json_t *unmatched_jobs = json_object();
    for (int s = 0; s < JOB_STATUS_MAX; s++)
        json_object_set_new(unmatched_jobs, job_status_names[s], json_integer(0));
    json_t *unmatched = json_pack("{s:o}", "jobs", unmatched_jobs);
    size_t i;
    json_t *count;
    json_array_foreach(rows, i, count)
    {
        const char *pool = json_string_value(json_object_get(count, "pool"));
        const char *status = json_string_value(json_object_get(count, "status"));
        json_t *target = pool ? json_object_get(pools, pool) : unmatched;
        if (target && status) /* else a pool removed from the config since */
            json_object_set(json_object_get(target, "jobs"), status, json_object_get(count, "n"));
    }
    json_decref(pools);
    return json_pack("{s:b, s:o, s:o}", "ok", 1, "pools", list, "unmatched", unmatched);
}

/* The last LOGS_MAX_BYTES of a console log (the agent's lines are in it too), across the
 * files virtlogd rolled it over into (PATH.0 the newest of them, up to PATH.9). */
#define LOGS_MAX_BYTES   (1024 * 1024)
#define LOGS_MAX_BACKUPS 10

static json_t *log_file_json(const char *path, json_int_t since)
{
    char paths[LOGS_MAX_BACKUPS + 1][PATH_MAX];
    long sizes[LOGS_MAX_BACKUPS + 1];
    int n_files = 0; /* newest first */
    long total = 0;
    for (int i = -1; i < LOGS_MAX_BACKUPS && total < LOGS_MAX_BYTES; i++) {
        struct stat st;
        if (i < 0)
            snprintf(paths[n_files], PATH_MAX, "%s", path);
        else
            snprintf(paths[n_files], PATH_MAX, "%s.%d", path, i);
        if (stat(paths[n_files], &st) < 0 || !S_ISREG(st.st_mode)) {
            if (i < 0)
                return json_pack("{s:b, s:s}", "ok", 0, "error", "cannot open the log");
            break;
        }
        sizes[n_files] = (long)st.st_size;
        total += sizes[n_files++];
    }
    /* `since`: what the asker has, as the whole log's length then (a follow); a log that
     * shrank meanwhile (its oldest file dropped) is taken from its end. */
    long fresh = since < 0 ? total : since <= total ? total - (long)since : 0;
    long want = fresh > LOGS_MAX_BYTES ? LOGS_MAX_BYTES : fresh;
    bool truncated = fresh > LOGS_MAX_BYTES;
    char *buf = malloc((size_t)want + 1);
    if (!buf)
        return json_pack("{s:b, s:s}", "ok", 0, "error", "out of memory");
    /* Oldest first; of the oldest file read, only its end. */
    size_t n = 0;
    long skip = total - want;
    for (int k = n_files - 1; k >= 0; k--) {
        long from = skip > sizes[k] ? sizes[k] : skip;
        skip -= from;
        FILE *f = fopen(paths[k], "rb");
        if (!f)
            continue;
        if (fseek(f, from, SEEK_SET) == 0)
            n += fread(buf + n, 1, (size_t)want - n, f);
        fclose(f);
    }
    /* Console output is bytes: keep it valid JSON text, and drop the console's CRs. */
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] == '\r')
            continue;
        bool printable = (unsigned char)buf[i] < 0x80 &&
                         ((unsigned char)buf[i] >= 0x20 || buf[i] == '\n' || buf[i] == '\t');
        buf[out++] = printable ? buf[i] : '?';
    }
    json_t *text = json_stringn(buf, out);
    free(buf);
    return json_pack("{s:b, s:s, s:o, s:b, s:I}", "ok", 1, "path", path, "log",
                     text ? text : json_string(""), "truncated", truncated, "end",
                     (json_int_t)total);
}

/* jobs: the store's jobs (`jobs`, from store_jobs_list), each queued one with why it
 * waits. */
static json_t *admin_jobs(struct daemon *d, enum admin_command command, json_t *request,
                          json_t *jobs)
{
    (void)command;
    (void)request;
    if (!jobs)
        return json_pack("{s:b, s:s}", "ok", 0, "error", "store read failed");
    size_t i;
    json_t *job;
    json_array_foreach(jobs, i, job)
    {
        const char *st = json_string_value(json_object_get(job, "status"));
        json_t *pool = json_object_get(job, "pool");
        json_t *why = json_null();
        if (st && strcmp(st, "queued") == 0) {
            if (!json_is_string(pool)) {
                why = json_string("no matching pool");
            } else if (d->github && json_is_true(json_object_get(job, "unverified"))) {
                why = json_string("a late or replayed delivery: asking GitHub whether it is "
                                  "still queued");
            } else if (d->scheduler) {
                const char *w = scheduler_pool_waiting(d->scheduler, json_string_value(pool));
                why = w ? json_string(w) : json_null();
            }
        }
        json_object_set_new(job, "waiting", why ? why : json_null());
    }
    return json_pack("{s:b, s:O}", "ok", 1, "jobs", jobs);
}

/* pools: each pool's config, image and runners. */
static json_t *admin_pools(struct daemon *d, enum admin_command command, json_t *request)
{
    (void)request;
    (void)command;
    json_t *pools = json_array();
    for (size_t i = 0; i < d->config->n_pools; i++)
        json_array_append_new(pools, pool_json(d, &d->config->pools[i]));
    return json_pack("{s:b, s:o}", "ok", 1, "pools", pools);
}

/* runners: live ones (or all: `rows`, from store_runners_list), filtered by name, pool or
 * host. */
static json_t *admin_runners(struct daemon *d, enum admin_command command, json_t *request,
                             json_t *rows)
{
    (void)command;
    if (!rows)
        return json_pack("{s:b, s:s}", "ok", 0, "error", "store read failed");
    /* A follower (or a leader not started) shows the records as the store holds them. */
    json_t *all = d->scheduler ? scheduler_runners_json(d->scheduler, rows) : rows;
    /* Filters: one runner by name, or a pool's or a host's; each key names the runner's
     * field of the same name. */
    static const char *const filters[] = {ADMIN_KEY_NAME, ADMIN_KEY_POOL, ADMIN_KEY_HOST};
    json_t *kept = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(all, i, r)
    {
        bool match = true;
        for (size_t f = 0; f < sizeof(filters) / sizeof(filters[0]); f++) {
            const char *want = json_string_value(json_object_get(request, filters[f]));
            const char *have = json_string_value(json_object_get(r, filters[f]));
            match = match && (!want || (have && strcmp(want, have) == 0));
        }
        if (match)
            json_array_append(kept, r);
    }
    const char *name = json_string_value(json_object_get(request, ADMIN_KEY_NAME));
    if (name && json_array_size(kept) == 0) {
        json_decref(kept);
        return json_pack("{s:b, s:s}", "ok", 0, "error", "no runner of that name");
    }
    return json_pack("{s:b, s:o}", "ok", 1, "runners", kept);
}

/* drain, undrain: a host gets no new guests, or gets them again. */
static json_t *admin_drain(struct daemon *d, enum admin_command command, json_t *request)
{
    const char *host = json_string_value(json_object_get(request, ADMIN_KEY_HOST));
    if (!host || !d->scheduler ||
        scheduler_host_drain(d->scheduler, host, command == ADMIN_DRAIN) < 0)
        return json_pack("{s:b, s:s}", "ok", 0, "error", "no such host");
    return json_pack("{s:b, s:s, s:b}", "ok", 1, "host", host, "drained", command == ADMIN_DRAIN);
}

/* delete: a live runner, now. */
static json_t *admin_delete(struct daemon *d, enum admin_command command, json_t *request)
{
    (void)command;
    const char *name = json_string_value(json_object_get(request, ADMIN_KEY_RUNNER));
    if (!name || !d->scheduler)
        return json_pack("{s:b, s:s}", "ok", 0, "error", "no such live runner");
    if (json_is_true(json_object_get(request, ADMIN_KEY_FORCE))) {
        int hosts = 0;
        if (scheduler_runner_purge(d->scheduler, name, &hosts) < 0)
            return json_pack("{s:b, s:s}", "ok", 0, "error",
                             "not a runner name of this controller");
        return json_pack("{s:b, s:s, s:b, s:i}", "ok", 1, "runner", name, "forced", 1,
                         "hosts_asked", hosts);
    }
    if (scheduler_runner_delete(d->scheduler, name) < 0)
        return json_pack("{s:b, s:s}", "ok", 0, "error",
                         "no such live runner (one that ended or is unknown here: delete "
                         "--force removes what is left of it)");
    return json_pack("{s:b, s:s}", "ok", 1, "runner", name);
}

/* rotate: idle runners of a replaced image, now. */
static json_t *admin_rotate(struct daemon *d, enum admin_command command, json_t *request)
{
    (void)command;
    const char *pool = json_string_value(json_object_get(request, ADMIN_KEY_POOL));
    if (pool && config_pool_index(d->config, pool) < 0)
        return json_pack("{s:b, s:s}", "ok", 0, "error", "no such pool");
    json_t *names = json_array();
    if (d->scheduler)
        scheduler_rotate(d->scheduler, pool, names);
    return json_pack("{s:b, s:o}", "ok", 1, "retired", names);
}

/* logs: a runner's console log. */
static json_t *admin_logs(struct daemon *d, enum admin_command command, json_t *request)
{
    (void)command;
    const char *name = json_string_value(json_object_get(request, ADMIN_KEY_RUNNER));
    char path[PATH_MAX];
    const char *file =
        name && d->scheduler ? scheduler_runner_log(d->scheduler, name, path, sizeof(path)) : NULL;
    if (!file)
        return json_pack("{s:b, s:s}", "ok", 0, "error", "no log for that runner");
    json_t *since = json_object_get(request, ADMIN_KEY_SINCE);
    if (since && (!json_is_integer(since) || json_integer_value(since) < 0))
        return json_pack("{s:b, s:s}", "ok", 0, "error", "since must be a byte offset");
    json_t *answer = log_file_json(file, since ? json_integer_value(since) : -1);
    /* A follower stops once the runner ended and the log has nothing new. */
    json_object_set_new(answer, "live", json_boolean(scheduler_runner_live(d->scheduler, name)));
    return answer;
}

/* hosts: each host's connection, usage, isolation and templates. */
static json_t *admin_hosts(struct daemon *d, enum admin_command command, json_t *request)
{
    (void)request;
    (void)command;
    json_t *hosts = json_array();
    for (size_t i = 0; i < d->config->n_hosts; i++) {
        const struct config_host *h = &d->config->hosts[i];
        struct host_status st;
        if (provider_host_status(d->provider, h->name, &st) < 0)
            continue;
        json_t *row = json_pack(
            "{s:s, s:s, s:s, s:s, s:o, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "name",
            h->name, "uri", h->uri, "transport", st.streams ? "stream" : "socket", "state",
            st.up           ? "up"
            : st.connecting ? "connecting"
                            : "down",
            "error", st.error[0] ? json_string(st.error) : json_null(), "kvm", st.kvm, "vcpus_used",
            (json_int_t)st.used.vcpus, "vcpus", (json_int_t)h->vcpus, "memory_mib_used",
            (json_int_t)st.used.memory_mib, "memory_mib", (json_int_t)h->memory_mib, "guests",
            (json_int_t)st.used.guests, "max_guests", (json_int_t)h->max_guests, "reconnects",
            (json_int_t)st.reconnects, "drained",
            d->scheduler && scheduler_host_drained(d->scheduler, h->name));
        /* Whether what keeps guests off the host is in place (guest_isolation.h). */
        char why[512];
        enum guest_isolation_state iso = guest_isolation_host(d->config, h, &st, why, sizeof(why));
        json_object_set_new(row, "guest_isolation", json_string(guest_isolation_state_names[iso]));
        json_object_set_new(row, "unsafe", why[0] ? json_string(why) : json_null());
        /* Its warm templates: their files, state and use. */
        struct template_status ts[64];
        size_t n_ts = 0;
        json_t *templates = json_array();
        provider_templates(d->provider, h->name, ts, 64, &n_ts);
        for (size_t k = 0; k < n_ts; k++)
            json_array_append_new(
                templates,
                json_pack("{s:s, s:s, s:s, s:o, s:o, s:b, s:I, s:I}", "name", ts[k].name, "pool",
                          ts[k].pool, "state", ts[k].state, "reason",
                          ts[k].reason[0] ? json_string(ts[k].reason) : json_null(), "file_bytes",
                          ts[k].file_bytes >= 0 ? json_integer(ts[k].file_bytes) : json_null(),
                          "in_use", ts[k].in_use, "restores", (json_int_t)ts[k].restores,
                          "fallbacks", (json_int_t)ts[k].fallbacks));
        json_object_set_new(row, "templates", templates);
        json_array_append_new(hosts, row);
    }
    return json_pack("{s:b, s:o}", "ok", 1, "hosts", hosts);
}

/* github: the client's auth, rate limit and scopes. */
static json_t *admin_github(struct daemon *d, enum admin_command command, json_t *request)
{
    (void)request;
    (void)command;
    if (!d->github)
        return json_pack("{s:b, s:b}", "ok", 1, "configured", 0);
    json_t *status = github_client_status(d->github);
    json_t *scopes = json_array();
    for (size_t i = 0; i < d->n_scopes; i++)
        json_array_append_new(scopes,
                              json_pack("{s:s, s:s, s:I}", "kind", github_scope_kind(&d->scopes[i]),
                                        "name", github_scope_name(&d->scopes[i]), "runner_group_id",
                                        (json_int_t)d->scopes[i].runner_group_id));
    json_object_set_new(status, "scopes", scopes);
    json_object_set_new(status, "scale_sets", scalesets_json(d->scalesets));
    json_object_set_new(status, "ok", json_true());
    json_object_set_new(status, "configured", json_true());
    return status;
}

static json_t *admin_reload(struct daemon *d, enum admin_command command, json_t *request)
{
    (void)command;
    (void)request;
    return daemon_reload(d, "admin");
}

static json_t *admin_health(struct daemon *d, enum admin_command command, json_t *request)
{
    (void)command;
    (void)request;
    return json_pack("{s:b, s:s, s:s, s:I}", "ok", 1, "version", HATCHERY_VERSION, "controller_id",
                     d->config->controller_id, "uptime_s",
                     (json_int_t)((wall_clock_ms() - d->started_at_ms) / 1000));
}

/* leader: the lease as the store holds it (`rows`: lease_read's), and this instance's own
 * view of it. With SQLite there is one controller, this one, and no lease. */
static json_t *admin_leader(struct daemon *d, enum admin_command command, json_t *request,
                            json_t *rows)
{
    (void)command;
    (void)request;
    if (!d->lease)
        return json_pack("{s:b, s:s, s:s, s:n, s:[]}", "ok", 1, "backend", "sqlite", "this",
                         "this hatcheryd (a SQLite store has one controller)", "leader",
                         "instances");
    if (!rows)
        return json_pack("{s:b, s:s}", "ok", 0, "error", "store read failed");
    json_t *leader = json_null();
    json_t *instances = json_array();
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        int64_t now = json_integer_value(json_object_get(row, "now_ms"));
        const char *name = json_string_value(json_object_get(row, "instance"));
        const char *holder = json_string_value(json_object_get(row, "holder"));
        int64_t expires = json_integer_value(json_object_get(row, "expires_ms"));
        bool leads = name && holder && strcmp(name, holder) == 0 && expires >= now;
        if (leads && json_is_null(leader))
            leader = json_pack("{s:s, s:I, s:I, s:I}", "instance", holder, "epoch",
                               json_integer_value(json_object_get(row, "lease_epoch")), "since_ms",
                               json_integer_value(json_object_get(row, "acquired_ms")),
                               "expires_in_ms", (json_int_t)(expires - now));
        json_array_append_new(
            instances,
            json_pack("{s:s?, s:b, s:b, s:I, s:I}", "instance", name, "leading", leads, "this",
                      name && strcmp(name, d->instance) == 0, "started_ms",
                      json_integer_value(json_object_get(row, "started_ms")), "renewed_ago_ms",
                      (json_int_t)(now - json_integer_value(json_object_get(row, "renewed_ms")))));
    }
    struct lease_stats st;
    lease_stats_get(d->lease, &st);
    return json_pack("{s:b, s:s, s:s, s:o, s:o, s:{s:b, s:I, s:I, s:I, s:I}}", "ok", 1, "backend",
                     "postgresql", "this", d->instance, "leader", leader, "instances", instances,
                     "lease", "leading", st.leading, "epoch", (json_int_t)st.epoch, "renewals",
                     (json_int_t)st.renewals, "renewal_failures", (json_int_t)st.renewal_failures,
                     "takeovers", (json_int_t)st.takeovers);
}

/* Every admin command's handler, by the command (admin_protocol.h names them). */
static json_t *(*const admin_handlers[ADMIN_COMMAND_MAX])(struct daemon *, enum admin_command,
                                                          json_t *) = {
    [ADMIN_POOLS] = admin_pools,   [ADMIN_HOSTS] = admin_hosts,   [ADMIN_DRAIN] = admin_drain,
    [ADMIN_UNDRAIN] = admin_drain, [ADMIN_DELETE] = admin_delete, [ADMIN_LOGS] = admin_logs,
    [ADMIN_GITHUB] = admin_github, [ADMIN_RELOAD] = admin_reload, [ADMIN_HEALTH] = admin_health,
    [ADMIN_ROTATE] = admin_rotate,
};

/* The commands answered from the store: the read each makes, then the answer from its rows
 * (NULL when the read failed), once they come. */
typedef json_t *store_answer_fn(struct daemon *, enum admin_command, json_t *request, json_t *rows);

struct store_answer {
    struct daemon *d;
    struct admin_conn *conn;
    enum admin_command command;
    json_t *request;
    store_answer_fn *answer;
};

static void on_store_answer(void *data, json_t *rows)
{
    struct store_answer *a = data;
    admin_conn_answer(a->conn, a->answer(a->d, a->command, a->request, rows));
    json_decref(a->request);
    free(a);
}

/* Its read asked for, or an error answer. */
static json_t *read_for(struct daemon *d, struct admin_conn *conn, enum admin_command command,
                        json_t *request)
{
    struct store_answer *a = malloc(sizeof(*a));
    if (!a)
        return json_pack("{s:b, s:s}", "ok", 0, "error", "out of memory");
    *a = (struct store_answer){d, conn, command, json_incref(request), NULL};
    int r = -EINVAL;
    switch (command) {
    case ADMIN_JOBS: {
        a->answer = admin_jobs;
        const char *status = json_string_value(json_object_get(request, ADMIN_KEY_STATUS));
        json_t *limit = json_object_get(request, ADMIN_KEY_LIMIT);
        enum job_status parsed;
        if (status && job_status_parse(status, &parsed) < 0) {
            json_decref(a->request);
            free(a);
            return json_pack("{s:b, s:s}", "ok", 0, "error",
                             "status must be waiting, queued, in_progress or completed");
        }
        r = store_jobs_list(d->store, conn, status, limit ? (int)json_integer_value(limit) : 0,
                            on_store_answer, a);
        break;
    }
    case ADMIN_CAPACITY:
        a->answer = admin_capacity;
        r = store_job_counts(d->store, conn, on_store_answer, a);
        break;
    case ADMIN_LEADER:
        a->answer = admin_leader;
        r = lease_read(d->store, conn, d->config->controller_id, on_store_answer, a);
        break;
    case ADMIN_RUNNERS:
        a->answer = admin_runners;
        r = store_runners_list(d->store, conn,
                               json_is_true(json_object_get(request, ADMIN_KEY_ALL)),
                               on_store_answer, a);
        break;
    default:
        break;
    }
    if (r == 0)
        return NULL;
    json_decref(a->request);
    free(a);
    return json_pack("{s:b, s:s}", "ok", 0, "error",
                     r == -EAGAIN ? "the store is busy: try again" : "store read failed");
}

static json_t *answer_now(struct daemon *d, struct admin_conn *conn, json_t *request)
{
    const char *cmd = json_string_value(json_object_get(request, ADMIN_KEY_CMD));
    if (!cmd)
        return json_pack("{s:b, s:s}", "ok", 0, "error", "missing \"cmd\"");
    enum admin_command command = admin_command_parse(cmd);
    bool from_store = command == ADMIN_JOBS || command == ADMIN_CAPACITY ||
                      command == ADMIN_RUNNERS || command == ADMIN_LEADER;
    if (command == ADMIN_COMMAND_MAX || (!admin_handlers[command] && !from_store))
        return json_pack("{s:b, s:s, s:s}", "ok", 0, "error", "unknown command", ADMIN_KEY_CMD,
                         cmd);
    /* Only the keys one of the command's forms sends (admin_protocol.h): a misspelt
     * filter is an error, not a wider answer than asked for. */
    const char *key;
    json_t *value;
    json_object_foreach(request, key, value)
    {
        if (strcmp(key, ADMIN_KEY_CMD) != 0 && !admin_key_allowed(command, key)) {
            char error[160];
            snprintf(error, sizeof(error), "%s takes no key \"%.64s\"", cmd, key);
            return json_pack("{s:b, s:s}", "ok", 0, "error", error);
        }
    }
    if (command == ADMIN_LEADER && !d->lease)
        return admin_leader(d, command, request, NULL); /* nothing to read */
    if (from_store)
        return read_for(d, conn, command, request);
    json_t *answer = admin_handlers[command](d, command, request);
    return answer ? answer : json_pack("{s:b, s:s}", "ok", 0, "error", "internal error");
}

void admin_commands_answer(struct admin_server *server, struct admin_conn *conn, json_t *request)
{
    json_t *answer = answer_now(server->data, conn, request);
    if (answer)
        admin_conn_answer(conn, answer);
}
