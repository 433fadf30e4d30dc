/* hatcheryd: the controller daemon. One libuv loop carries the HTTP listener (webhooks,
 * metrics, health), the admin socket, the store's group commits and systemd's watchdog. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "guest_isolation.h"
#include "libvirt/libvirt_loop.h"
#include "libvirt/provisioner.h"
#include "hatchery/admin_protocol.h"
#include "hatchery/cleanup.h"
#include "hatchery/limits.h"
#include "image_cache.h"
#include "image_manifest.h"
#include "pool_image.h"
#include "log.h"
#include "scaleset/scaleset.h"
#include "sd_notify.h"
#include "textbuf.h"
#include "wall_clock.h"

const char *const delivery_result_names[DELIVERY_RESULT_MAX] = {
    [DELIVERY_STORED] = "stored",
    [DELIVERY_DUPLICATE] = "duplicate",
    [DELIVERY_PING] = "ping",
    [DELIVERY_IGNORED] = "ignored",
    [DELIVERY_UNAUTHORIZED] = "unauthorized",
    [DELIVERY_REJECTED] = "rejected",
    [DELIVERY_THROTTLED] = "throttled",
    [DELIVERY_ERROR] = "error",
};

#define PRUNE_INTERVAL_MS (3600 * 1000)

static void respond_json(struct front_call *call, int status, json_t *body)
{
    struct textbuf buf;
    textbuf_init(&buf, 64 * 1024);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (text)
        textbuf_printf(&buf, "%s\n", text);
    free(text);
    if (!text || buf.error)
        front_respond(call, 500, "application/json", "{}\n", 3);
    else
        front_respond(call, status, "application/json", buf.data, buf.len);
    textbuf_free(&buf);
}

static void record_latency(struct daemon *d, double s)
{
    for (int i = 0; i < WEBHOOK_LATENCY_BUCKETS; i++) {
        if (s <= webhook_latency_bounds[i]) {
            d->webhooks.latency_buckets[i]++;
            break;
        }
    }
    d->webhooks.latency_count++;
    d->webhooks.latency_sum_s += s;
}

/* One webhook request on its way: checked and parsed on a worker (HMAC and JSON are the
 * CPU-heavy part, and a 1 MiB body must not stall the loop), then stored, then answered. */
struct webhook_call {
    uv_work_t work;
    struct daemon *daemon;
    struct front_call *call;
    const struct http_request *req; /* valid until the answer: the front waits */
    uint64_t started_ns;
    int64_t received_ms;
    struct webhook_result res;
    int64_t job_id;
    enum job_status status;
    bool unmatched;
    char pool[CONFIG_MAX_NAME_BYTES + 1];
    char delivery[WEBHOOK_MAX_DELIVERY_ID_BYTES + 1];
    char runner_name[WEBHOOK_MAX_NAME_BYTES + 1];
    char repository[256];
    char labels[512]; /* the job's labels as received: why it matched no pool */
};

/* Says how many of an address's refused deliveries went unlogged in its window. */
static void say_unlogged(const struct address_window *w)
{
    if (w->count)
        log_warn("webhook.rejected_unlogged", "address=%s count=%lld window_s=%d", w->address,
                 (long long)w->count, LOG_THROTTLE_WINDOW_MS / 1000);
}

/* Whether a refusal from `peer` ("ADDR:PORT" or "[ADDR]:PORT") is the first of its
 * address's window, to be logged; the rest are counted (as unlogged), and said when the
 * window has ended (at the next refusal from anyone). Windows that ended are said first. */
static bool rejection_first_in_window(struct daemon *d, const char *peer, int64_t now_ms)
{
    char address[48];
    const char *colon = strrchr(peer, ':');
    size_t n = colon ? (size_t)(colon - peer) : strlen(peer);
    if (peer[0] == '[' && n >= 2) {
        peer++;
        n -= 2;
    }
    snprintf(address, sizeof(address), "%.*s", (int)(n < sizeof(address) ? n : sizeof(address) - 1),
             peer);
    for (size_t i = 0; i < REJECTION_ADDRESSES; i++) {
        struct address_window *w = &d->rejection_windows[i];
        if (w->address[0] && now_ms - w->start_ms >= LOG_THROTTLE_WINDOW_MS) {
            say_unlogged(w);
            w->count = 0;
        }
    }
    struct address_window *open = address_window_open(d->rejection_windows, REJECTION_ADDRESSES,
                                                      address, now_ms, LOG_THROTTLE_WINDOW_MS);
    if (open) {
        open->count++;
        return false;
    }
    struct address_window before;
    address_window_take(d->rejection_windows, REJECTION_ADDRESSES, address, now_ms,
                        LOG_THROTTLE_WINDOW_MS, &before);
    say_unlogged(&before); /* its count is not lost with its place */
    return true;
}

/* A refused delivery, counted always and logged within two bounds, as anyone can send
 * them: once per address per window (the rest counted in one line), and 10 lines in all
 * per window (many addresses). */
static void log_rejection(struct daemon *d, const char *peer, int status, const char *reason)
{
    d->webhooks.by_result[status == 401   ? DELIVERY_UNAUTHORIZED
                          : status == 429 ? DELIVERY_THROTTLED
                                          : DELIVERY_REJECTED]++;
    int64_t now = wall_clock_ms();
    if (!rejection_first_in_window(d, peer, now))
        return;
    int64_t suppressed;
    bool pass = log_throttle_pass(&d->rejections_logged, now, &suppressed);
    if (suppressed)
        log_warn("webhook.rejected_unlogged",
                 "count=%lld window_s=%d reason=\"more refused deliveries than %d in %d s, from "
                 "as many addresses: counted in hatchery_webhook_deliveries_total, not logged\"",
                 (long long)suppressed, LOG_THROTTLE_WINDOW_MS / 1000, LOG_THROTTLE_LINES,
                 LOG_THROTTLE_WINDOW_MS / 1000);
    if (pass)
        log_warn("webhook.rejected", "peer=%s status=%d reason=\"%s\"", peer, status, reason);
}

static void webhook_call_done(struct webhook_call *call)
{
    record_latency(call->daemon, (double)(uv_hrtime() - call->started_ns) / 1e9);
    free(call);
}

static void on_delivery_stored(void *data, int result)
{
    struct webhook_call *call = data;
    struct daemon *d = call->daemon;
    if (result == STORE_DUPLICATE) {
        d->webhooks.by_result[DELIVERY_DUPLICATE]++;
        log_info("webhook.duplicate", "delivery=%s job=%lld", call->delivery,
                 (long long)call->job_id);
        respond_json(call->call, 200, json_pack("{s:b, s:b}", "ok", 1, "duplicate", 1));
    } else if (result == STORE_APPLIED) {
        d->webhooks.by_result[DELIVERY_STORED]++;
        if (call->unmatched)
            d->webhooks.unmatched_deliveries++;
        if (call->unmatched)
            log_info("webhook.stored",
                     "delivery=%s job=%lld status=%s pool=(unmatched) repo=%s "
                     "labels=\"%s\"",
                     call->delivery, (long long)call->job_id, job_status_names[call->status],
                     call->repository, call->labels);
        else
            log_info("webhook.stored", "delivery=%s job=%lld status=%s pool=%s repo=%s",
                     call->delivery, (long long)call->job_id, job_status_names[call->status],
                     call->pool, call->repository);
        if (d->scheduler)
            scheduler_job_event(d->scheduler, call->job_id, call->status,
                                call->runner_name[0] ? call->runner_name : NULL);
        respond_json(call->call, 202,
                     json_pack("{s:b, s:I}", "ok", 1, "job", (json_int_t)call->job_id));
    } else {
        d->webhooks.by_result[DELIVERY_ERROR]++;
        log_error("webhook.store_failed", "delivery=%s job=%lld error=\"%s\"", call->delivery,
                  (long long)call->job_id, strerror(-result));
        respond_json(call->call, 500, json_pack("{s:b, s:s}", "ok", 0, "error", "store failed"));
    }
    webhook_call_done(call);
}

static void webhook_check_work(uv_work_t *work)
{
    struct webhook_call *call = work->data;
    webhook_handle(call->daemon->config, call->daemon->webhook_secret, call->req, call->received_ms,
                   &call->res);
}

static void webhook_check_done(uv_work_t *work, int status)
{
    struct webhook_call *call = work->data;
    struct daemon *d = call->daemon;
    struct front_call *fc = call->call;
    struct webhook_result *res = &call->res;
    (void)status; /* never cancelled */
    switch (res->outcome) {
    case WEBHOOK_STORE: {
        call->job_id = res->event->job_id;
        call->status = res->event->status;
        call->unmatched = res->event->pool == NULL;
        snprintf(call->pool, sizeof(call->pool), "%s", res->event->pool ? res->event->pool : "");
        snprintf(call->delivery, sizeof(call->delivery), "%s", res->event->delivery_id);
        snprintf(call->runner_name, sizeof(call->runner_name), "%s",
                 res->event->runner_name ? res->event->runner_name : "");
        snprintf(call->repository, sizeof(call->repository), "%s",
                 res->event->repository ? res->event->repository : "");
        snprintf(call->labels, sizeof(call->labels), "%s",
                 res->event->labels_json ? res->event->labels_json : "");
        int r = store_job_event_submit(d->store, res->event, on_delivery_stored, call);
        res->event = NULL; /* the store owns it now, even on failure */
        if (r < 0) {
            d->webhooks.by_result[DELIVERY_ERROR]++;
            log_warn("webhook.store_busy", "delivery=%s error=\"%s\"", call->delivery,
                     strerror(-r));
            respond_json(fc, 503, json_pack("{s:b, s:s}", "ok", 0, "error", "store busy"));
            webhook_call_done(call);
        }
        return;
    }
    case WEBHOOK_PING:
        d->webhooks.by_result[DELIVERY_PING]++;
        log_info("webhook.ping", "peer=%s", front_call_peer(fc));
        respond_json(fc, 200, json_pack("{s:b}", "ok", 1));
        break;
    case WEBHOOK_IGNORED:
        d->webhooks.by_result[DELIVERY_IGNORED]++;
        log_debug("webhook.ignored", "github_event=%s reason=\"%s\"", res->event_name, res->reason);
        front_respond(fc, 204, NULL, NULL, 0);
        break;
    case WEBHOOK_REJECTED:
    case WEBHOOK_OUTCOME_MAX:
        log_rejection(d, front_call_peer(fc), res->status, res->reason);
        respond_json(fc, res->status, json_pack("{s:b, s:s}", "ok", 0, "error", res->reason));
        break;
    }
    webhook_call_done(call);
}

static void handle_webhook(struct daemon *d, struct front_call *fc, const struct http_request *req)
{
    struct webhook_call *call = calloc(1, sizeof(*call));
    if (!call) {
        respond_json(fc, 503, json_pack("{s:b, s:s}", "ok", 0, "error", "out of memory"));
        return;
    }
    call->daemon = d;
    call->call = fc;
    call->req = req;
    call->started_ns = uv_hrtime();
    call->received_ms = wall_clock_ms();
    call->work.data = call;
    if (uv_queue_work(d->loop, &call->work, webhook_check_work, webhook_check_done) < 0) {
        webhook_check_work(&call->work);
        webhook_check_done(&call->work, 0);
    }
}

/* A request the HTTP front passed on: the routes and methods are checked there, and a
 * webhook's signature too (webhook_handle checks it again: nothing is believed twice less). */
static void on_front_request(void *data, struct front_call *call, enum front_route route,
                             const struct http_request *req)
{
    struct daemon *d = data;
    switch (route) {
    case FRONT_ROUTE_WEBHOOK:
        handle_webhook(d, call, req);
        return;
    case FRONT_ROUTE_HEALTHZ:
        respond_json(call, 200,
                     json_pack("{s:s, s:s}", "status", "ok", "version", HATCHERY_VERSION));
        return;
    case FRONT_ROUTE_METRICS:
    case FRONT_ROUTE_MAX: {
        size_t len = 0;
        char *text = metrics_render(d, &len);
        if (!text) {
            respond_json(call, 500, json_pack("{s:b, s:s}", "ok", 0, "error", "metrics failed"));
            return;
        }
        front_respond(call, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
        free(text);
        return;
    }
    }
}

/* A webhook the front refused for its signature: counted and logged as the core's own. */
static void on_front_rejected(void *data, const struct front_rejection *rej)
{
    struct daemon *d = data;
    log_rejection(d, rej->peer, rej->status, rej->reason);
    record_latency(d, rej->latency_s);
}

static void daemon_stop(struct daemon *d);

static void on_front_gone(void *data, const char *why)
{
    struct daemon *d = data;
    if (d->stopping)
        return;
    log_error("daemon.front_gone",
              "reason=\"%s\" action=\"stopping: the supervisor restarts "
              "hatcheryd, which adopts the running guests\"",
              why);
    d->exit_code = 1;
    daemon_stop(d);
}

/* An image or its manifest changed on disk, or a look the scheduler waits for is back: the
 * pools' demand is counted again with it. */
static void on_images_changed(void *data)
{
    struct daemon *d = data;
    if (d->scheduler)
        scheduler_kick(d->scheduler);
}

/* What the operator should know about each VM pool's image at start and reload: no
 * manifest (the pool gets no runner until there is one, or the image is on a remote host),
 * or a runner GitHub no longer registers. */
static void check_pool_images(struct daemon *d, const struct config *c)
{
    for (size_t i = 0; i < c->n_pools; i++) {
        const struct config_pool *p = &c->pools[i];
        /* A pool of remote hosts only: its image is looked for there (host_image.h). */
        const struct image_cache_entry *e =
            p->backend == BACKEND_VM ? image_cache_get(d->images, p->image) : NULL;
        if (!e)
            continue;
        if (e->manifest_rc < 0) {
            log_warn("image.manifest_unreadable", "pool=%s reason=\"%s\"", p->name, e->err);
            continue;
        }
        const struct image_manifest *m = &e->manifest;
        log_info("image.manifest", "pool=%s arch=%s kernel=%s runner=%s agent=%s built=%s", p->name,
                 m->arch, m->kernel_version, m->runner_version, m->agent_version, m->built_at);
        if (image_manifest_runner_below_floor(m) == 1)
            log_warn("image.runner_below_floor",
                     "pool=%s runner=%s floor=%s reason=\"GitHub refuses to register a runner "
                     "older than %s: rebuild the image with a newer runner\"",
                     p->name, m->runner_version, RUNNER_VERSION_FLOOR, RUNNER_VERSION_FLOOR);
    }
}

/* Warns of each VM pool whose image's runner GitHub stops taking within
 * RUNNER_EXPIRY_WARN_DAYS (or already has): at start, at a reload, and after each fetch of
 * GitHub's runner releases (runner_releases.h), so at most every few hours. */
static void check_pool_runners(struct daemon *d, const struct config *c)
{
    time_t now = time(NULL);
    for (size_t i = 0; i < c->n_pools; i++) {
        const struct config_pool *p = &c->pools[i];
        struct image_manifest m;
        struct runner_judgement j;
        if (!pool_image_find_manifest(d, p, &m) || !pool_image_runner_refused(d, &m, &j))
            continue;
        double days = difftime(j.refused_at, now) / 86400.0;
        char day[32];
        struct tm tm;
        gmtime_r(&j.refused_at, &tm);
        strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%SZ", &tm);
        const char *rule = j.floor_first ? "the runner floor" : "30 days after a newer release";
        if (days < 0)
            log_error("image.runner_refused",
                      "pool=%s runner=%s refused_at=%s rule=\"%s\" action=\"rebuild the image "
                      "with a current runner: GitHub gives its runners no job\"",
                      p->name, m.runner_version, day, rule);
        else if (days <= RUNNER_EXPIRY_WARN_DAYS)
            log_warn("image.runner_expiring",
                     "pool=%s runner=%s refused_at=%s days=%.1f rule=\"%s\" action=\"rebuild "
                     "the image with a current runner\"",
                     p->name, m.runner_version, day, days, rule);
    }
}

static void on_runner_releases(void *data)
{
    struct daemon *d = data;
    check_pool_runners(d, d->config);
}

/* ---- admin API ---------------------------------------------------------------------- */

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
        json_t *row = json_pack("{s:s, s:s}", "host", host, "state", image_state_names[st.state]);
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

struct capacity_ctx {
    json_t *pools; /* name -> object */
    json_t *unmatched;
};

static void capacity_row(void *data, const char *pool, const char *status, int64_t count)
{
    struct capacity_ctx *ctx = data;
    json_t *target = pool ? json_object_get(ctx->pools, pool) : ctx->unmatched;
    if (!target)
        return; /* a pool removed from the config since */
    json_t *jobs = json_object_get(target, "jobs");
    json_object_set_new(jobs, status, json_integer(count));
}

/* capacity: per pool, its runners by state, its jobs by status and why they wait; and the
 * jobs no pool matches. */
static json_t *admin_capacity(struct daemon *d, enum admin_command command, json_t *request)
{
    (void)command;
    (void)request;
    struct capacity_ctx ctx = {.pools = json_object(), .unmatched = json_object()};
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
        json_object_set(ctx.pools, p->name, row);
        json_array_append_new(list, row);
    }
    json_t *unmatched_jobs = json_object();
    for (int s = 0; s < JOB_STATUS_MAX; s++)
        json_object_set_new(unmatched_jobs, job_status_names[s], json_integer(0));
    json_object_set_new(ctx.unmatched, "jobs", unmatched_jobs);
    int r = store_job_counts(d->store, capacity_row, &ctx);
    json_decref(ctx.pools);
    if (r < 0) {
        json_decref(list);
        json_decref(ctx.unmatched);
        return json_pack("{s:b, s:s}", "ok", 0, "error", "store read failed");
    }
    return json_pack("{s:b, s:o, s:o}", "ok", 1, "pools", list, "unmatched", ctx.unmatched);
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

static json_t *daemon_reload(struct daemon *d, const char *how);

/* jobs: the store's jobs, each queued one with why it waits. */
static json_t *admin_jobs(struct daemon *d, enum admin_command command, json_t *request)
{
    (void)command;
    const char *status = json_string_value(json_object_get(request, ADMIN_KEY_STATUS));
    json_t *limit = json_object_get(request, ADMIN_KEY_LIMIT);
    enum job_status parsed;
    if (status && job_status_parse(status, &parsed) < 0)
        return json_pack("{s:b, s:s}", "ok", 0, "error",
                         "status must be waiting, queued, in_progress or completed");
    json_t *jobs = NULL;
    if (store_jobs_list(d->store, status, limit ? (int)json_integer_value(limit) : 0, &jobs) < 0)
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
    return json_pack("{s:b, s:o}", "ok", 1, "jobs", jobs);
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

/* runners: live ones (or all), filtered by name, pool or host. */
static json_t *admin_runners(struct daemon *d, enum admin_command command, json_t *request)
{
    (void)command;
    if (!d->scheduler)
        return json_pack("{s:b, s:s}", "ok", 0, "error", "the scheduler is not running");
    json_t *all =
        scheduler_runners_json(d->scheduler, json_is_true(json_object_get(request, ADMIN_KEY_ALL)));
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
    json_decref(all);
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

static void on_scaleset_job(void *data, const char *pool, int64_t job_key, const char *runner_name,
                            bool started)
{
    struct daemon *d = data;
    (void)pool;
    if (d->scheduler)
        scheduler_job_event(d->scheduler, job_key, started ? JOB_IN_PROGRESS : JOB_COMPLETED,
                            runner_name);
}

static void on_scaleset_demand(void *data)
{
    struct daemon *d = data;
    if (d->scheduler)
        scheduler_kick(d->scheduler);
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

/* Every admin command's handler, by the command (admin_protocol.h names them). */
static json_t *(*const admin_handlers[ADMIN_COMMAND_MAX])(struct daemon *, enum admin_command,
                                                          json_t *) = {
    [ADMIN_JOBS] = admin_jobs,         [ADMIN_POOLS] = admin_pools,
    [ADMIN_CAPACITY] = admin_capacity, [ADMIN_HOSTS] = admin_hosts,
    [ADMIN_RUNNERS] = admin_runners,   [ADMIN_DRAIN] = admin_drain,
    [ADMIN_UNDRAIN] = admin_drain,     [ADMIN_DELETE] = admin_delete,
    [ADMIN_LOGS] = admin_logs,         [ADMIN_GITHUB] = admin_github,
    [ADMIN_RELOAD] = admin_reload,     [ADMIN_HEALTH] = admin_health,
    [ADMIN_ROTATE] = admin_rotate,
};

static json_t *on_admin_request(struct admin_server *server, json_t *request)
{
    struct daemon *d = server->data;
    const char *cmd = json_string_value(json_object_get(request, ADMIN_KEY_CMD));
    if (!cmd)
        return json_pack("{s:b, s:s}", "ok", 0, "error", "missing \"cmd\"");
    enum admin_command command = admin_command_parse(cmd);
    if (command == ADMIN_COMMAND_MAX || !admin_handlers[command])
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
    return admin_handlers[command](d, command, request);
}

/* ---- GitHub ------------------------------------------------------------------------- */

static struct github_scope *scopes_from_config(const struct config *c, size_t *ret_n)
{
    struct github_scope *scopes = calloc(c->github.n_runner_scopes + 1, sizeof(*scopes));
    for (size_t i = 0; scopes && i < c->github.n_runner_scopes; i++)
        scopes[i] = (struct github_scope){
            c->github.runner_scopes[i].repo, c->github.runner_scopes[i].org,
            c->github.runner_scopes[i].enterprise, c->github.runner_scopes[i].runner_group_id};
    *ret_n = scopes ? c->github.n_runner_scopes : 0;
    return scopes;
}

static int github_open(uv_loop_t *loop, const struct config *c, const struct github_scope *scopes,
                       struct github_client **ret, char *err, size_t err_size)
{
    const struct config_github *g = &c->github;
    struct github_options o = {
        .api_url = g->api_url,
        .auth = g->app_id > 0 ? GITHUB_AUTH_APP : GITHUB_AUTH_TOKEN,
        .app_id = g->app_id,
        .app_key_file = g->app_private_key_file,
        .installation_id = g->installation_id,
        .token_file = g->token_file,
        .ca_file = g->ca_file,
        .user_agent = "hatchery/" HATCHERY_VERSION,
        .timeout_ms = (long)g->timeout_ms,
        .max_retries = (int)g->max_retries,
        .max_response_bytes = (size_t)g->max_response_bytes,
        .lookup_scope = &scopes[0],
    };
    return github_client_new(loop, &o, ret, err, err_size);
}

struct scope_probe {
    struct daemon *daemon;
    const struct github_scope *scope;
};

static void on_scope_probed(void *data, int err, const char *message, json_t *runners)
{
    struct scope_probe *p = data;
    const struct github_scope *s = p->scope;
    if (err < 0)
        log_error("github.scope_failed", "%s=%s error=\"%s\"", github_scope_kind(s),
                  github_scope_name(s), message ? message : strerror(-err));
    else
        log_info("github.scope_ok", "%s=%s runners=%zu", github_scope_kind(s), github_scope_name(s),
                 json_array_size(runners));
    free(p);
}

/* At start-up, list each scope's runners once: it proves the credentials and the
 * permissions, and says so in the log, before any job depends on them. */
static void github_probe(struct daemon *d)
{
    for (size_t i = 0; i < d->n_scopes; i++) {
        struct scope_probe *p = calloc(1, sizeof(*p));
        if (!p)
            return;
        p->daemon = d;
        p->scope = &d->scopes[i];
        if (github_runners_list(d->github, p->scope, NULL, on_scope_probed, p) < 0)
            free(p);
    }
}

/* ---- lifecycle ---------------------------------------------------------------------- */

static void on_watchdog(uv_timer_t *timer)
{
    (void)timer;
    sd_notify_send("WATCHDOG=1");
}

/* Console logs are kept after teardown for log_retention_s. A directory scan of small
 * files, hourly: cheap enough for the loop. */
static void prune_logs(struct daemon *d)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/logs", d->config->state_dir);
    DIR *dh = opendir(dir);
    if (!dh)
        return;
    time_t cutoff = time(NULL) - (time_t)d->config->log_retention_s;
    struct dirent *e;
    int removed = 0;
    while ((e = readdir(dh))) {
        struct stat st;
        if (e->d_name[0] == '.' || fstatat(dirfd(dh), e->d_name, &st, 0) < 0 ||
            !S_ISREG(st.st_mode) || st.st_mtime >= cutoff)
            continue;
        if (unlinkat(dirfd(dh), e->d_name, 0) == 0)
            removed++;
    }
    closedir(dh);
    if (removed)
        log_info("logs.pruned", "count=%d", removed);
}

/* Ended runners and completed jobs are history: kept history_retention_s for `hatchery
 * runners --all` and `jobs`, then dropped so the tables do not grow without end. */
static void prune_history(struct daemon *d)
{
    int64_t cutoff_ms = wall_clock_ms() - d->config->history_retention_s * 1000;
    store_runners_prune(d->store, cutoff_ms);
    store_jobs_prune(d->store, cutoff_ms);
}

static void on_prune(uv_timer_t *timer)
{
    struct daemon *d = timer->data;
    store_deliveries_prune(d->store, d->config->delivery_retention_s);
    prune_logs(d);
    prune_history(d);
}

/* The stop has waited DAEMON_STOP_TIMEOUT_MS: what holds it is a libvirt call to a host that
 * does not answer (the provisioner named it as host.calls_pending), which nothing can
 * interrupt. Everything of ours is written (the store commits on threads of its own), so
 * the process ends here rather than at the supervisor's SIGKILL; the guests stay domains
 * for the next start's reconciler, as on any stop. */
static void on_stop_timeout(uv_timer_t *timer)
{
    struct daemon *d = timer->data;
    log_warn("daemon.stop_abandoned",
             "waited_ms=%d reason=\"libvirt calls to a host that does not answer are still "
             "running\" action=\"exiting without them; the next start adopts what runs\"",
             DAEMON_STOP_TIMEOUT_MS);
    d->stop_abandoned = true;
    uv_stop(d->loop);
}

static void daemon_stop_rest(void *data);

/* A stop gives each scale set's session back first (the next holder then need not wait
 * out its linger), then closes the rest. */
static void daemon_stop(struct daemon *d)
{
    d->stopping = true;
    uv_timer_start(&d->stop_timer, on_stop_timeout, DAEMON_STOP_TIMEOUT_MS, 0);
    sd_notify_send("STOPPING=1");
    front_close(d->front);
    admin_server_stop(&d->admin);
    struct scalesets *sets = d->scalesets;
    d->scalesets = NULL; /* it frees itself once its last request has answered */
    scalesets_stop(sets, daemon_stop_rest, d);
}

static void daemon_stop_rest(void *data)
{
    struct daemon *d = data;
    runner_releases_free(d->runner_releases);
    d->runner_releases = NULL;
    github_client_free(d->github);
    d->github = NULL;
    scheduler_free(d->scheduler);
    d->scheduler_closed = d->scheduler;
    d->scheduler = NULL;
    provider_free(d->provider);
    d->provider = NULL;
    image_cache_free(d->images);
    d->images = NULL;
    libvirt_loop_close();
    unlink(d->config->admin_socket);
    uv_close((uv_handle_t *)&d->watchdog_timer, NULL);
    uv_close((uv_handle_t *)&d->prune_timer, NULL);
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
    uv_close((uv_handle_t *)&d->sighup, NULL);
}

static void on_signal(uv_signal_t *sig, int signum)
{
    struct daemon *d = sig->data;
    if (d->stopping)
        return;
    log_info("daemon.stopping", "signal=%d", signum);
    daemon_stop(d);
}

/* A directory made here gets `mode` whatever the umask (the unit's is 0027); one that
 * exists is left as it is. */
static int make_dir(const char *path, mode_t mode)
{
    if (mkdir(path, mode) == 0)
        return chmod(path, mode) < 0 ? -errno : 0;
    return errno == EEXIST ? 0 : -errno;
}

static int lock_state_dir(const char *dir, int *ret_fd)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/hatcheryd.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        close(fd);
        return e == EWOULDBLOCK ? -EBUSY : -e;
    }
    *ret_fd = fd;
    return 0;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: hatcheryd --config FILE [--allow-root REASON]\n"
                 "       hatcheryd --check-config FILE\n"
                 "       hatcheryd --version\n"
                 "\n"
                 "  -c, --config FILE        run with this configuration\n"
                 "      --allow-root REASON  run as root anyway, for the reason given (logged "
                 "at every start); the HTTP front drops to nobody\n"
                 "  -n, --check-config FILE  check the configuration and its secret files, "
                 "then exit 0 (valid) or 1\n"
                 "  -V, --version            print the version\n");
}

/* Loads and checks the config and its secret files. On failure every problem is in
 * `*ret_errors` (FILE:LINE: KEY: message lines; the caller frees). `check_github` opens
 * the App key or token too (at start; a reload keeps the running GitHub client). */
static int load(const char *path, bool check_github, struct config **ret_config,
                struct secret **ret_secret, char **ret_errors)
{
    char *parse_errors = NULL;
    struct config *c = NULL;
    *ret_config = NULL;
    *ret_secret = NULL;
    *ret_errors = NULL;
    int r = config_parse(path, &c, &parse_errors);
    if (!c) {
        *ret_errors = parse_errors; /* unreadable, or not YAML: nothing more to check */
        return -EINVAL;
    }
    /* The checks config.c cannot make, each at its key's line, whatever else is wrong:
     * every error of the file in one pass. */
    struct textbuf errors;
    textbuf_init(&errors, 1024 * 1024);
    if (parse_errors)
        textbuf_printf(&errors, "%s", parse_errors);
    free(parse_errors);
    char err[512];
    if (c->webhook_secret_file &&
        secret_load_file(c->webhook_secret_file, ret_secret, err, sizeof(err)) < 0)
        textbuf_printf(&errors, "%s:%d: webhook_secret_file: %s\n", path,
                       config_line_of(c, "webhook_secret_file"), err);
    /* The TLS key as the start checks it (its mode, that it is a regular file), so that
     * --check-config does not pass what the start refuses. */
    const char *tls_key = c->http.tls_key_file;
    int key_fd = tls_key ? secret_file_open(tls_key, SECRET_MAX_BYTES, err, sizeof(err)) : 0;
    if (key_fd < 0)
        textbuf_printf(&errors, "%s:%d: http.tls_key_file: %s\n", path,
                       config_line_of(c, "http.tls_key_file"), err);
    else if (tls_key)
        close(key_fd);
    bool github_parsed = c->github.api_url &&
                         (c->github.app_private_key_file || c->github.token_file) &&
                         !strstr(errors.data ? errors.data : "", ": github");
    if (check_github && config_github_enabled(c) && github_parsed) {
        /* Open the App key or token now, so a bad file fails the check, not the first job. */
        uv_loop_t loop;
        uv_loop_init(&loop);
        size_t n = 0;
        struct github_scope *scopes = scopes_from_config(c, &n);
        struct github_client *client = NULL;
        int g = scopes ? github_open(&loop, c, scopes, &client, err, sizeof(err)) : -ENOMEM;
        if (g == 0)
            github_client_free(client);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        free(scopes);
        if (g < 0) {
            const char *key =
                c->github.token_file ? "github.token_file" : "github.app_private_key_file";
            textbuf_printf(&errors, "%s:%d: %s: %s\n", path, config_line_of(c, key), key, err);
        }
    }
    if (r == 0 && !errors.len) {
        textbuf_free(&errors);
        *ret_config = c;
        return 0;
    }
    *ret_errors = errors.error ? strdup("config: out of memory\n") : textbuf_steal(&errors, NULL);
    textbuf_free(&errors);
    if (*ret_errors)
        config_errors_sort(*ret_errors);
    secret_free(*ret_secret);
    *ret_secret = NULL;
    config_free(c);
    return -EINVAL;
}

/* ---- reload (SIGHUP, `hatchery reload`) ---------------------------------------------- */

/* Re-reads the config. A config that does not load is refused whole and the running one
 * stays; otherwise pools and hosts are added, removed and changed, live settings apply,
 * and keys that need a restart keep their running value and are named. The old config
 * stays in memory until exit: runners made under it keep pointing at their pool. */
static json_t *daemon_reload(struct daemon *d, const char *how)
{
    struct config *next = NULL;
    struct secret *secret = NULL;
    char *errors = NULL;
    if (load(d->config->path, false, &next, &secret, &errors) < 0) {
        /* The errors name the file and line; they carry no secret. */
        char first[512];
        snprintf(first, sizeof(first), "%s", errors ? errors : "?");
        first[strcspn(first, "\n")] = 0;
        size_t n_errors = 0;
        for (const char *p = errors; p && *p; p++)
            n_errors += *p == '\n';
        log_warn("config.reload_refused", "via=%s errors=%zu first=\"%s\"", how, n_errors, first);
        json_t *answer = json_pack("{s:b, s:s}", "ok", 0, "error", errors ? errors : "?");
        free(errors);
        return answer;
    }
    secret_free(secret); /* the running webhook secret stays (webhook_secret_file: restart) */
    struct config **retired = realloc(d->retired_configs, (d->n_retired + 1) * sizeof(*retired));
    if (!retired) {
        config_free(next);
        return json_pack("{s:b, s:s}", "ok", 0, "error", "out of memory");
    }
    d->retired_configs = retired;
    /* The scheduler's per-pool state is made for the new config first: if that fails,
     * nothing has changed yet. */
    if (d->scheduler && scheduler_config_replace(d->scheduler, next) < 0) {
        config_free(next);
        return json_pack("{s:b, s:s}", "ok", 0, "error", "out of memory");
    }
    json_t *diff = config_diff(d->config, next);
    config_keep_running(next, d->config);
    d->retired_configs[d->n_retired++] = d->config;
    d->config = next;
    for (size_t i = 0; i < next->n_hosts; i++)
        provider_host_update(d->provider, &next->hosts[i]);
    if (image_cache_follow(d->images, next) < 0)
        log_warn("image.cache_failed", "error=\"out of memory\" action=\"images of new pools "
                                       "are not followed\"");
    enum log_level level;
    if (log_level_parse(next->log_level, &level) == 0)
        log_level_set(level);
    check_pool_images(d, next);
    check_pool_runners(d, next);
    char *text = json_dumps(diff, JSON_COMPACT);
    log_info("config.reloaded", "via=%s pools=%zu hosts=%zu changes=%s", how, next->n_pools,
             next->n_hosts, text ? text : "?");
    free(text);
    return json_pack("{s:b, s:o}", "ok", 1, "changed", diff);
}

static void on_sighup(uv_signal_t *sig, int signum)
{
    (void)signum;
    struct daemon *d = sig->data;
    if (!d->stopping)
        json_decref(daemon_reload(d, "SIGHUP"));
}

struct daemon_args {
    const char *config_path;
    const char *root_reason; /* --allow-root's */
    bool check_only;
};

/* The command line into `a`: -1 to go on, else the exit code (--version, --help, a usage
 * error, root refused). */
static int parse_args(int argc, char **argv, struct daemon_args *a)
{
    static const struct option options[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", required_argument, NULL, 'n'},
        {"allow-root", required_argument, NULL, 'R'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "c:n:Vh", options, NULL)) != -1) {
        switch (opt) {
        case 'c':
            a->config_path = optarg;
            break;
        case 'n':
            a->config_path = optarg;
            a->check_only = true;
            break;
        case 'R':
            a->root_reason = optarg;
            break;
        case 'V':
            printf("hatcheryd %s\n", HATCHERY_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!a->config_path || optind != argc) {
        usage(stderr);
        return 2;
    }
    /* Root is refused: the daemon needs only its state_dir and libvirt's socket (the
     * package's unit runs it as hatchery). An operator who must run it as root says why. */
    if (a->root_reason && strspn(a->root_reason, " \t") == strlen(a->root_reason)) {
        fprintf(stderr, "hatcheryd: --allow-root needs a reason, in words\n");
        return 2;
    }
    if (!a->check_only && geteuid() == 0 && !a->root_reason) {
        fprintf(stderr, "hatcheryd: refusing to run as root: run it as a user of its own (the "
                        "package's unit runs it as hatchery, in the libvirt group), or say why "
                        "it must be root with --allow-root REASON\n");
        return 1;
    }
    return -1;
}

/* What start() got done before it failed, undone as far as a process about to exit needs:
 * the front stopped, the store closed, secrets wiped. */
static int start_failed(struct daemon *d)
{
    if (d->front_attached) {
        front_close(d->front);
        uv_run(d->loop, UV_RUN_NOWAIT);
    }
    front_free(d->front);
    store_close(d->store);
    secret_free(d->webhook_secret);
    config_free(d->config);
    if (d->lock_fd >= 0)
        close(d->lock_fd);
    return 1;
}

/* The daemon's parts, in the order each needs the one before: the state directory and
 * its lock, the HTTP front (forked while this process holds nothing it must not inherit:
 * no store, no libvirt connection, no App key; front.h), the loop, the store, the
 * provider and its hosts, the GitHub client, the admin socket. 0, or 1 after logging why. */
static int start(struct daemon *d)
{
    char err[512];
    /* Others may pass through, not list: QEMU, which runs as libvirt-qemu on a stock host,
     * opens the overlays under the default storage_dir and the images the runbook keeps
     * in state_dir/images. What is private in it has its own mode (the store is 0640). */
    int r = make_dir(d->config->state_dir, 0711);
    if (r < 0) {
        log_error("daemon.state_dir_failed", "path=%s error=\"%s\"", d->config->state_dir,
                  strerror(-r));
        return 1;
    }
    r = lock_state_dir(d->config->state_dir, &d->lock_fd);
    if (r < 0) {
        log_error("daemon.state_dir_locked", "path=%s error=\"%s\"", d->config->state_dir,
                  r == -EBUSY ? "another hatcheryd uses this state directory" : strerror(-r));
        return 1;
    }
    /* The front is forked without the webhook secret in the core's memory (load() checked
     * the file, and wiped what it read): a front taken over has nothing to sign with. */
    secret_free(d->webhook_secret);
    d->webhook_secret = NULL;
    r = front_spawn(d->config, &d->front, err, sizeof(err));
    if (r < 0) {
        log_error("daemon.listen_failed", "listen=%s metrics_listen=%s error=\"%s\"",
                  d->config->listen,
                  d->config->metrics_listen ? d->config->metrics_listen : "listen", err);
        return 1;
    }
    r = d->config->webhook_secret_file
            ? secret_load_file(d->config->webhook_secret_file, &d->webhook_secret, err, sizeof(err))
            : 0;
    if (r < 0) {
        log_error("daemon.secret_failed", "key=webhook_secret_file error=\"%s\"", err);
        return 1;
    }
    d->loop = uv_default_loop();
    /* libvirt's events run on our loop; this must precede every libvirt connection. */
    libvirt_loop_register(d->loop);
    r = store_open(d->loop, d->config->state_dir, &d->store, err, sizeof(err));
    if (r < 0) {
        log_error("daemon.store_failed", "error=\"%s\"", err);
        return 1;
    }
    r = image_cache_new(d->loop, on_images_changed, d, &d->images);
    if (r == 0)
        r = image_cache_follow(d->images, d->config);
    if (r < 0) {
        log_error("daemon.image_cache_failed", "error=\"%s\"", strerror(-r));
        return 1;
    }
    struct provisioner_options popts = {.controller_id = d->config->controller_id,
                                        .state_dir = d->config->state_dir,
                                        .adopt_grace_ms = d->config->adopt_grace_s * 1000};
    struct provisioner *libvirt = NULL;
    r = provisioner_new(d->loop, &popts, &libvirt);
    d->provider = provisioner_provider(libvirt);
    for (size_t i = 0; r == 0 && i < d->config->n_hosts; i++)
        r = provider_host_add(d->provider, &d->config->hosts[i]);
    if (r < 0) {
        log_error("daemon.provisioner_failed", "error=\"%s\"", strerror(-r));
        return 1;
    }
    if (config_github_enabled(d->config)) {
        d->scopes = scopes_from_config(d->config, &d->n_scopes);
        r = d->scopes ? github_open(d->loop, d->config, d->scopes, &d->github, err, sizeof(err))
                      : -ENOMEM;
        if (r < 0) {
            log_error("daemon.github_failed", "error=\"%s\"", err);
            return 1;
        }
        r = runner_releases_new(d->loop, d->github, on_runner_releases, d, &d->runner_releases);
        if (r < 0) {
            log_error("daemon.github_failed", "error=\"%s\"", strerror(-r));
            return 1;
        }
    }
    static const struct front_callbacks front_callbacks = {
        .on_request = on_front_request,
        .on_rejected = on_front_rejected,
        .on_gone = on_front_gone,
    };
    r = front_attach(d->front, d->loop, &front_callbacks, d);
    if (r < 0) {
        log_error("daemon.front_failed", "error=\"%s\"", uv_strerror(r));
        return 1;
    }
    d->front_attached = true;
    char *socket_dir = strdup(d->config->admin_socket);
    char *slash = socket_dir ? strrchr(socket_dir, '/') : NULL;
    if (slash && slash != socket_dir) {
        *slash = 0;
        make_dir(socket_dir, 0750);
    }
    free(socket_dir);
    r = admin_server_start(&d->admin, d->loop, d->config->admin_socket, on_admin_request, d, err,
                           sizeof(err));
    if (r < 0) {
        log_error("daemon.admin_failed", "error=\"%s\"", err);
        return 1;
    }
    return 0;
}

/* Signals (stop, reload), the prune and watchdog timers. */
static void start_timers(struct daemon *d)
{
    uv_signal_init(d->loop, &d->sigterm);
    uv_signal_init(d->loop, &d->sigint);
    d->sigterm.data = d->sigint.data = d;
    uv_signal_start(&d->sigterm, on_signal, SIGTERM);
    uv_signal_start(&d->sigint, on_signal, SIGINT);
    uv_signal_init(d->loop, &d->sighup);
    d->sighup.data = d;
    uv_signal_start(&d->sighup, on_sighup, SIGHUP);
    uv_timer_init(d->loop, &d->watchdog_timer);
    uv_timer_init(d->loop, &d->prune_timer);
    uv_timer_init(d->loop, &d->stop_timer);
    d->stop_timer.data = d;
    uv_unref((uv_handle_t *)&d->stop_timer); /* it never keeps a finished stop waiting */
    d->prune_timer.data = d;
    uv_timer_start(&d->prune_timer, on_prune, 0, PRUNE_INTERVAL_MS);
    uint64_t watchdog_usec = sd_watchdog_usec();
    if (watchdog_usec) {
        uint64_t every_ms = watchdog_usec / 2000 ? watchdog_usec / 2000 : 1;
        uv_timer_start(&d->watchdog_timer, on_watchdog, every_ms, every_ms);
    }
}

static void log_ready(const struct daemon *d, const char *root_reason)
{
    if (geteuid() == 0)
        log_warn("daemon.running_as_root", "reason=\"%s\" front_user=nobody", root_reason);
    log_info("daemon.ready",
             "version=%s controller=%s listen=%s metrics_listen=%s tls=%s front_pid=%d "
             "front=%s admin=%s state=%s pools=%zu hosts=%zu github=%s",
             HATCHERY_VERSION, d->config->controller_id, d->config->listen,
             d->config->metrics_listen ? d->config->metrics_listen : "listen",
             d->config->http.tls_cert_file ? "on" : "off", (int)front_pid(d->front),
             front_sandboxed(d->front) ? "sandboxed" : "unconfined", d->config->admin_socket,
             d->config->state_dir, d->config->n_pools, d->config->n_hosts,
             d->github ? github_auth_mode_names[d->config->github.app_id > 0 ? GITHUB_AUTH_APP
                                                                             : GITHUB_AUTH_TOKEN]
                       : "off");
}

int main(int argc, char **argv)
{
    secret_wipe_json_allocations(); /* before any JSON: GitHub's answers carry secrets */
    struct daemon_args args = {0};
    int exit_code = parse_args(argc, argv, &args);
    if (exit_code >= 0)
        return exit_code;

    struct daemon d = {.lock_fd = -1};
    auto_free char *load_errors = NULL;
    /* Running, the App key is first read after the HTTP front is forked (github_open in
     * start() fails the start the same way), so that not even a freed copy of it is in the
     * front's memory; --check-config reads it here. */
    if (load(args.config_path, args.check_only, &d.config, &d.webhook_secret, &load_errors) < 0) {
        fputs(load_errors ? load_errors : "cannot load the config\n", stderr);
        return 1;
    }
    if (args.check_only) {
        printf("%s: OK (%zu hosts, %zu pools)\n", args.config_path, d.config->n_hosts,
               d.config->n_pools);
        secret_free(d.webhook_secret);
        config_free(d.config);
        return 0;
    }
    /* No core file may hold a secret (the webhook secret, the App key, tokens, JIT
     * configs): no core size, and not dumpable, which a piped core_pattern also obeys. */
    struct rlimit no_core = {0, 0};
    if (setrlimit(RLIMIT_CORE, &no_core) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
        fprintf(stderr, "hatcheryd: cannot disable core dumps: %s\n", strerror(errno));
        return start_failed(&d);
    }
    enum log_level level = LOG_INFO;
    log_level_parse(d.config->log_level, &level);
    log_level_set(level);
    signal(SIGPIPE, SIG_IGN);
    /* Seed jansson's hash once, before workers parse JSON in parallel. */
    json_object_seed(0);
    d.started_at_ms = wall_clock_ms();
    if (start(&d) != 0)
        return start_failed(&d);
    start_timers(&d);

    check_pool_images(&d, d.config);
    check_pool_runners(&d, d.config);
    log_ready(&d, args.root_reason);
    sd_notify_send("READY=1");
    if (d.github)
        github_probe(&d);
    struct scheduler_deps deps = {
        .loop = d.loop,
        .store = d.store,
        .config = &d.config,
        .github = &d.github,
        .provider = &d.provider,
        .images = d.images,
        .scopes = d.scopes,
        .n_scopes = d.n_scopes,
        .scalesets = &d.scalesets,
    };
    int r = scheduler_new(&deps, &d.scheduler);
    if (r < 0)
        log_error("daemon.scheduler_failed", "error=\"%s\"", strerror(-r));
    if (d.github) {
        struct scalesets_deps sdeps = {
            .loop = d.loop,
            .github = d.github,
            .store = d.store,
            .config = d.config,
            .scopes = d.scopes,
            .n_scopes = d.n_scopes,
            .owner = d.config->controller_id,
            .events = {on_scaleset_job, on_scaleset_demand, &d},
        };
        r = scalesets_new(&sdeps, &d.scalesets);
        if (r < 0)
            log_error("daemon.scalesets_failed", "error=\"%s\"", strerror(-r));
    }

    if (!front_sandboxed(d.front))
        log_warn("daemon.front_unconfined",
                 "reason=\"this kernel (or emulator) has no seccomp filter\" front_pid=%d",
                 (int)front_pid(d.front));
    uv_run(d.loop, UV_RUN_DEFAULT);
    if (d.stop_abandoned) {
        /* A thread is still inside libvirt with the provider's memory: nothing is freed
         * under it. The store's last commits are all that must be finished. */
        store_close(d.store);
        log_info("daemon.stopped", "controller=%s", d.config->controller_id);
        _exit(d.exit_code);
    }
    uv_close((uv_handle_t *)&d.stop_timer, NULL);
    uv_run(d.loop, UV_RUN_NOWAIT);

    store_close(d.store);
    front_free(d.front);
    uv_loop_close(d.loop);
    secret_free(d.webhook_secret);
    free(d.scopes);
    free(d.scheduler_closed);
    log_info("daemon.stopped", "controller=%s", d.config->controller_id);
    config_free(d.config);
    for (size_t i = 0; i < d.n_retired; i++)
        config_free(d.retired_configs[i]);
    free(d.retired_configs);
    close(d.lock_fd);
    return d.exit_code;
}
