/* What the HTTP front hands the core; see intake.h. */
#include "intake.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
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

/* A scrape: the store's two reads, then the page. The store answers both, in order. */
struct scrape {
    struct daemon *d;
    struct front_call *call;
    json_t *job_counts;
};

static void scrape_answer(struct scrape *sc, json_t *queue)
{
    size_t len = 0;
    /* A stop frees what the page is made of: a scrape its reads outlived gets a 503. */
    char *text = sc->d->stopping ? NULL : metrics_render(sc->d, sc->job_counts, queue, &len);
    if (sc->d->stopping)
        respond_json(sc->call, 503, json_pack("{s:b, s:s}", "ok", 0, "error", "stopping"));
    else if (text)
        front_respond(sc->call, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    else
        respond_json(sc->call, 500, json_pack("{s:b, s:s}", "ok", 0, "error", "metrics failed"));
    free(text);
    json_decref(sc->job_counts);
    free(sc);
}

static void on_scrape_counts(void *data, json_t *rows)
{
    struct scrape *sc = data;
    sc->job_counts = json_incref(rows);
}

static void on_scrape_queue(void *data, json_t *rows)
{
    scrape_answer(data, rows);
}

static void scrape(struct daemon *d, struct front_call *call)
{
    struct scrape *sc = calloc(1, sizeof(*sc));
    if (!sc) {
        respond_json(call, 500, json_pack("{s:b, s:s}", "ok", 0, "error", "out of memory"));
        return;
    }
    sc->d = d;
    sc->call = call;
    /* A read the store refuses (closing, or too many waiting) leaves its series at 0. */
    store_job_counts(d->store, call, on_scrape_counts, sc);
    if (store_jobs_queue_read(d->store, call, on_scrape_queue, sc) < 0) {
        store_reads_forget(d->store, call); /* the counts' answer, if asked for */
        scrape_answer(sc, NULL);
    }
}

/* A request the HTTP front passed on: the routes and methods are checked there, and a
 * webhook's signature too (webhook_handle checks it again: nothing is believed twice less). */
void intake_request(void *data, struct front_call *call, enum front_route route,
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
    case FRONT_ROUTE_MAX:
        scrape(d, call);
        return;
    }
}

/* A webhook the front refused for its signature: counted and logged as the core's own. */
void intake_rejected(void *data, const struct front_rejection *rej)
{
    struct daemon *d = data;
    log_rejection(d, rej->peer, rej->status, rej->reason);
    record_latency(d, rej->latency_s);
}
