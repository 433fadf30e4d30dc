/* Each scale-set pool's listener: ensure the scale set, hold its one session, long-poll its
 * queue, commit what a message says before deleting it, acquire what the service offers,
 * and keep the statistics the scheduler scales on (scaleset.h). */
#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "internal.h"
#include "log.h"
#include "store.h"
#include "wall_clock.h"

#define POLL_TIMEOUT_MS  90000 /* the service holds a poll about 50 s */
#define BACKOFF_FIRST_MS 1000
#define BACKOFF_MAX_MS   60000
#define MAX_JOBS_PER_MSG 50
#define UNDELETED_MAX    32
#define NAME_BYTES       128

enum ss_state {
    SS_ENSURING,
    SS_SESSION,
    SS_POLLING,
    SS_HANDLING,
    SS_WAITING, /* backing off before the next try */
    SS_STOPPING,
    SS_STOPPED,
    SS_STATE_MAX,
};

static const char *const state_names[SS_STATE_MAX] = {
    [SS_ENSURING] = "ensuring", [SS_SESSION] = "session", [SS_POLLING] = "polling",
    [SS_HANDLING] = "handling", [SS_WAITING] = "waiting", [SS_STOPPING] = "stopping",
    [SS_STOPPED] = "stopped",
};

static const char *const type_names[4] = {"JobAvailable", "JobAssigned", "JobStarted",
                                          "JobCompleted"};

struct ss_listener {
    struct scalesets *sets;
    struct ss_service *svc;
    char pool[NAME_BYTES];
    char name[NAME_BYTES];
    json_t *labels; /* [{name, type}] */
    int64_t group_id;
    int64_t max_runners;
    int64_t scale_set_id;
    char session_id[64];
    char *queue_url;
    struct secret *queue_token;
    int64_t last_message_id;
    /* Messages committed but not deleted from the queue (the delete failed, or the process
     * that committed them died first): the cursor will not bring them again, so they are
     * deleted before the next poll. */
    int64_t undeleted[UNDELETED_MAX];
    size_t n_undeleted;
    json_t *statistics;
    int64_t assigned; /* -1: not known yet */
    enum ss_state state;
    enum ss_state retry; /* what the back-off leads to */
    char why[320];
    int failures; /* in a row, for the back-off */
    uv_timer_t timer;
    bool timer_open;
    bool request_out;   /* a poll, commit or call of this listener is in flight */
    int64_t message_ms; /* the message being handled arrived then */
    struct scaleset_stats stats;
};

static void ensure(struct ss_listener *l);
static void session_create(struct ss_listener *l);
static void poll_queue(struct ss_listener *l);
static void stop_done(struct ss_listener *l);
static void scalesets_release(struct scalesets *sets);
static bool delete_undeleted(struct ss_listener *l);

static void set_why(struct ss_listener *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_why(struct ss_listener *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->why, sizeof(l->why), fmt, ap);
    va_end(ap);
}

static void on_timer(uv_timer_t *t)
{
    struct ss_listener *l = t->data;
    if (l->state != SS_WAITING)
        return;
    switch (l->retry) {
    case SS_SESSION:
        session_create(l);
        break;
    case SS_POLLING:
        poll_queue(l);
        break;
    default:
        ensure(l);
        break;
    }
}

static void undeleted_add(struct ss_listener *l, int64_t id)
{
    for (size_t i = 0; i < l->n_undeleted; i++)
        if (l->undeleted[i] == id)
            return;
    if (l->n_undeleted == UNDELETED_MAX) /* the oldest goes: the service keeps it, no more */
        memmove(l->undeleted, l->undeleted + 1, --l->n_undeleted * sizeof(l->undeleted[0]));
    l->undeleted[l->n_undeleted++] = id;
}

static void undeleted_remove(struct ss_listener *l, int64_t id)
{
    for (size_t i = 0; i < l->n_undeleted; i++)
        if (l->undeleted[i] == id) {
            memmove(l->undeleted + i, l->undeleted + i + 1,
                    (l->n_undeleted - i - 1) * sizeof(l->undeleted[0]));
            l->n_undeleted--;
            return;
        }
}

static bool stopping(struct ss_listener *l)
{
    return l->state == SS_STOPPING || l->state == SS_STOPPED || l->sets->stopping;
}

/* Jittered exponential back-off, then `next`: never given up. */
static void back_off(struct ss_listener *l, enum ss_state next)
{
    if (stopping(l))
        return;
    l->failures++;
    l->stats.errors++;
    long ms = BACKOFF_FIRST_MS;
    for (int i = 1; i < l->failures && ms < BACKOFF_MAX_MS; i++)
        ms *= 2;
    ms = ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS;
    ms += (long)(random() % (ms / 2 + 1));
    l->state = SS_WAITING;
    l->retry = next;
    if (!l->stats.no_session_since_ms && next != SS_POLLING)
        l->stats.no_session_since_ms = wall_clock_ms();
    uv_timer_start(&l->timer, on_timer, (uint64_t)ms, 0);
}

/* A callback's first words: false when the listener is stopping (then it finishes its
 * stop if that waited for this answer). */
static bool answer_wanted(struct ss_listener *l)
{
    l->request_out = false;
    if (!stopping(l))
        return true;
    if (l->state == SS_STOPPING && !l->session_id[0])
        stop_done(l);
    return false;
}

/* A request of the listener's own (its answer's answer_wanted clears request_out); one
 * that cannot be made (`req` NULL: its body could not be) backs off to `retry`, saying
 * `what` failed when given. */
static void listener_send(struct ss_listener *l, const struct ss_request *req, github_json_cb cb,
                          enum ss_state retry, const char *what)
{
    l->request_out = true;
    int r = req ? ss_call(l->svc, req, cb, l) : -ENOMEM;
    if (r < 0) {
        l->request_out = false;
        if (what)
            set_why(l, "%s: %s", what, strerror(-r));
        back_off(l, retry);
    }
}

static void statistics_set(struct ss_listener *l, json_t *stats)
{
    if (!json_is_object(stats))
        return;
    json_t *a = json_object_get(stats, "totalAssignedJobs");
    if (!json_is_integer(a) || json_integer_value(a) < 0)
        return;
    int64_t before = l->assigned;
    json_decref(l->statistics);
    l->statistics = json_incref(stats);
    l->assigned = json_integer_value(a);
    if (before != l->assigned && l->sets->deps.events.demand)
        l->sets->deps.events.demand(l->sets->deps.events.data);
}

/* ---- ensure: the scale set exists, with our labels ------------------------------------- */

static bool labels_equal(json_t *have, json_t *want)
{
    if (json_array_size(have) != json_array_size(want))
        return false;
    size_t i;
    json_t *w;
    json_array_foreach(want, i, w)
    {
        const char *name = json_string_value(json_object_get(w, "name"));
        bool found = false;
        size_t k;
        json_t *h;
        json_array_foreach(have, k, h) found =
            found || (name && json_string_value(json_object_get(h, "name")) &&
                      strcmp(json_string_value(json_object_get(h, "name")), name) == 0);
        if (!found)
            return false;
    }
    return true;
}

static void scale_set_ready(struct ss_listener *l, int64_t id)
{
    log_info("scaleset.ready", "pool=%s scale_set=%s id=%lld last_message_id=%lld", l->pool,
             l->name, (long long)id, (long long)l->last_message_id);
    session_create(l);
}

/* The cursor of a scale set other than the one it had (read like a request: the stop
 * waits for it). */
struct cursor_read {
    struct ss_listener *l;
    int64_t id;
};

static void on_cursor(void *data, int err, int64_t stored_id, int64_t stored_last)
{
    struct cursor_read *c = data;
    struct ss_listener *l = c->l;
    struct scalesets *sets = l->sets;
    int64_t id = c->id;
    free(c);
    if (answer_wanted(l)) {
        l->last_message_id = err == 0 && stored_id == id ? stored_last : 0;
        l->scale_set_id = id;
        l->n_undeleted = 0; /* the old scale set's queue went with it */
        if (l->last_message_id > 0)
            undeleted_add(l, l->last_message_id);
        scale_set_ready(l, id);
    }
    sets->pending--;
    scalesets_release(sets);
}

static void scale_set_known(struct ss_listener *l, int64_t id)
{
    if (id == l->scale_set_id) {
        scale_set_ready(l, id);
        return;
    }
    /* Another scale set than the cursor's (GitHub deleted ours and it was made again): its
     * queue starts anew, unless the store kept one for this id. */
    struct cursor_read *c = malloc(sizeof(*c));
    if (!c) {
        back_off(l, SS_ENSURING);
        return;
    }
    *c = (struct cursor_read){l, id};
    l->request_out = true;
    l->sets->pending++;
    if (store_scaleset_cursor(l->sets->deps.store, l, l->name, on_cursor, c) < 0) {
        l->sets->pending--;
        l->request_out = false;
        free(c);
        back_off(l, SS_ENSURING);
    }
}

static void on_scale_set_saved(void *data, const struct github_response *res)
{
    struct ss_listener *l = data;
    if (!answer_wanted(l))
        return;
    json_t *id = json_object_get(res->body, "id");
    if (res->err < 0 || !json_is_integer(id) || json_integer_value(id) <= 0) {
        set_why(l, "cannot create or update the scale set: %s",
                res->err < 0 ? res->message : "no id in the answer");
        back_off(l, SS_ENSURING);
        return;
    }
    statistics_set(l, json_object_get(res->body, "statistics"));
    scale_set_known(l, json_integer_value(id));
}

static void scale_set_save(struct ss_listener *l, int64_t id)
{
    json_t *body = json_pack("{s:s, s:I, s:O, s:{s:b}}", "name", l->name, "runnerGroupId",
                             (json_int_t)l->group_id, "labels", l->labels, "RunnerSetting",
                             "DisableUpdate", 1);
    char path[256];
    if (id)
        snprintf(path, sizeof(path), "_apis/runtime/runnerscalesets/%lld", (long long)id);
    else
        snprintf(path, sizeof(path), "_apis/runtime/runnerscalesets");
    struct ss_request req = {id ? "PATCH" : "POST", path, body, NULL, NULL, 0, -1};
    listener_send(l, body ? &req : NULL, on_scale_set_saved, SS_ENSURING,
                  "cannot save the scale set");
    json_decref(body);
}

static void on_scale_set_found(void *data, const struct github_response *res)
{
    struct ss_listener *l = data;
    if (!answer_wanted(l))
        return;
    json_t *value = json_object_get(res->body, "value");
    json_t *count = json_object_get(res->body, "count");
    if (res->err < 0 || !json_is_integer(count)) {
        set_why(l, "cannot look the scale set up: %s",
                res->err < 0 ? res->message : "an answer without a count");
        back_off(l, SS_ENSURING);
        return;
    }
    if (json_integer_value(count) == 0) {
        log_info("scaleset.create", "pool=%s scale_set=%s runner_group_id=%lld", l->pool, l->name,
                 (long long)l->group_id);
        scale_set_save(l, 0);
        return;
    }
    json_t *set = json_array_get(value, 0);
    json_t *id = json_object_get(set, "id");
    if (json_integer_value(count) != 1 || !json_is_integer(id)) {
        set_why(l, "the service lists %lld scale sets named %s",
                (long long)json_integer_value(count), l->name);
        back_off(l, SS_ENSURING);
        return;
    }
    if (!labels_equal(json_object_get(set, "labels"), l->labels)) {
        log_info("scaleset.labels_updated", "pool=%s scale_set=%s id=%lld", l->pool, l->name,
                 (long long)json_integer_value(id));
        scale_set_save(l, json_integer_value(id));
        return;
    }
    statistics_set(l, json_object_get(set, "statistics"));
    scale_set_known(l, json_integer_value(id));
}

static void ensure(struct ss_listener *l)
{
    if (stopping(l))
        return;
    l->state = SS_ENSURING;
    char path[512];
    char *name = curl_easy_escape(NULL, l->name, 0);
    snprintf(path, sizeof(path), "_apis/runtime/runnerscalesets?runnerGroupId=%lld&name=%s",
             (long long)l->group_id, name ? name : "");
    curl_free(name);
    struct ss_request req = {"GET", path, NULL, NULL, NULL, 0, -1};
    listener_send(l, &req, on_scale_set_found, SS_ENSURING, "cannot ask for the scale set");
}

/* ---- the session ------------------------------------------------------------------------ */

static int session_take(struct ss_listener *l, json_t *body)
{
    const char *id = json_string_value(json_object_get(body, "sessionId"));
    const char *url = json_string_value(json_object_get(body, "messageQueueUrl"));
    const char *token = json_string_value(json_object_get(body, "messageQueueAccessToken"));
    if (!id || !id[0] || strlen(id) >= sizeof(l->session_id)) {
        set_why(l, "the session has no id");
        return -EBADMSG;
    }
    snprintf(l->session_id, sizeof(l->session_id), "%s", id);
    if (!url || (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0)) {
        set_why(l, "the session came without a message queue URL");
        return -EBADMSG;
    }
    if (!token || !token[0]) {
        set_why(l, "the session came without a queue token");
        return -EBADMSG;
    }
    char *u = strdup(url);
    struct secret *t = NULL;
    if (!u || secret_from_bytes(token, strlen(token), &t) < 0) {
        free(u);
        return -ENOMEM;
    }
    free(l->queue_url);
    l->queue_url = u;
    secret_free(l->queue_token);
    l->queue_token = t;
    statistics_set(l, json_object_get(body, "statistics"));
    l->stats.no_session_since_ms = 0;
    l->failures = 0;
    l->why[0] = 0;
    return 0;
}

static void session_drop(struct ss_listener *l)
{
    l->session_id[0] = 0;
    free(l->queue_url);
    l->queue_url = NULL;
    secret_free(l->queue_token);
    l->queue_token = NULL;
    if (!l->stats.no_session_since_ms)
        l->stats.no_session_since_ms = wall_clock_ms();
}

static void on_session_deleted_quietly(void *data, const struct github_response *res)
{
    (void)data;
    (void)res;
}

/* A session that cannot be used (no queue URL): given back, so that it does not stand in
 * the next one's way for its linger. */
static void session_abandon(struct ss_listener *l)
{
    if (l->session_id[0]) {
        char path[256];
        snprintf(path, sizeof(path), "_apis/runtime/runnerscalesets/%lld/sessions/%s",
                 (long long)l->scale_set_id, l->session_id);
        struct ss_request req = {"DELETE", path, NULL, NULL, NULL, 0, 0};
        ss_call(l->svc, &req, on_session_deleted_quietly, NULL);
    }
    session_drop(l);
}

static void on_session(void *data, const struct github_response *res)
{
    struct ss_listener *l = data;
    if (!answer_wanted(l))
        return;
    if (res->status == 409) {
        /* Another holder, or a crashed hatcheryd's session lingering: wait it out. */
        l->stats.conflicts++;
        set_why(l, "another session holds the scale set (409): retrying");
        log_warn("scaleset.session_conflict", "pool=%s scale_set=%s id=%lld", l->pool, l->name,
                 (long long)l->scale_set_id);
        back_off(l, SS_SESSION);
        return;
    }
    if (res->status == 404) {
        set_why(l, "the scale set is gone (404): making it again");
        log_warn("scaleset.vanished", "pool=%s scale_set=%s id=%lld", l->pool, l->name,
                 (long long)l->scale_set_id);
        back_off(l, SS_ENSURING);
        return;
    }
    if (res->err < 0) {
        set_why(l, "cannot open a session: %s", res->message);
        back_off(l, SS_ENSURING);
        return;
    }
    int r = session_take(l, res->body);
    if (r < 0) {
        session_abandon(l);
        back_off(l, SS_SESSION);
        return;
    }
    log_info("scaleset.session", "pool=%s scale_set=%s id=%lld session=%s", l->pool, l->name,
             (long long)l->scale_set_id, l->session_id);
    poll_queue(l);
}

static void session_create(struct ss_listener *l)
{
    if (stopping(l))
        return;
    l->state = SS_SESSION;
    char path[256];
    snprintf(path, sizeof(path), "_apis/runtime/runnerscalesets/%lld/sessions",
             (long long)l->scale_set_id);
    json_t *body = json_pack("{s:s}", "ownerName", l->sets->deps.owner);
    struct ss_request req = {"POST", path, body, NULL, NULL, 0, -1};
    listener_send(l, body ? &req : NULL, on_session, SS_SESSION, "cannot open a session");
    json_decref(body);
}

static void on_session_refreshed(void *data, const struct github_response *res)
{
    struct ss_listener *l = data;
    if (!answer_wanted(l))
        return;
    l->stats.session_refreshes++;
    if (res->status == 404) {
        /* Evicted: a new one. */
        log_warn("scaleset.session_evicted", "pool=%s scale_set=%s", l->pool, l->name);
        session_drop(l);
        session_create(l);
        return;
    }
    if (res->err < 0 || session_take(l, res->body) < 0) {
        set_why(l, "cannot refresh the session: %s", res->err < 0 ? res->message : l->why);
        session_drop(l);
        back_off(l, SS_SESSION);
        return;
    }
    poll_queue(l);
}

/* The queue token expired (a poll's 401): the session gives a new one. */
static void session_refresh(struct ss_listener *l)
{
    char path[256];
    snprintf(path, sizeof(path), "_apis/runtime/runnerscalesets/%lld/sessions/%s",
             (long long)l->scale_set_id, l->session_id);
    struct ss_request req = {"PATCH", path, NULL, NULL, NULL, 0, -1};
    listener_send(l, &req, on_session_refreshed, SS_SESSION, NULL);
}

/* ---- a message: commit, delete from the queue, acquire ---------------------------------- */

struct handling {
    struct ss_listener *l;
    int64_t message_id;
    json_t *events;    /* the message's job messages */
    json_t *available; /* runner request ids to acquire */
};

static void handling_free(struct handling *h)
{
    json_decref(h->events);
    json_decref(h->available);
    free(h);
}

static int64_t job_key(const char *job_id)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const char *p = job_id; p && *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    return (int64_t)(h >> 1);
}

/* Tells the scheduler what started and finished, once it is on disk. */
static void tell_jobs(struct ss_listener *l, json_t *events)
{
    const struct scaleset_events *ev = &l->sets->deps.events;
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e)
    {
        const char *type = json_string_value(json_object_get(e, "messageType"));
        const char *runner = json_string_value(json_object_get(e, "runnerName"));
        const char *job = json_string_value(json_object_get(e, "jobId"));
        bool started = type && strcmp(type, "JobStarted") == 0;
        bool completed = type && strcmp(type, "JobCompleted") == 0;
        if ((started || completed) && runner && runner[0] && job && ev->job)
            ev->job(ev->data, l->pool, job_key(job), runner, started);
    }
}

static void after_message(struct handling *h)
{
    struct ss_listener *l = h->l;
    double lag = (double)(wall_clock_ms() - l->message_ms) / 1000.0;
    if (lag > l->stats.ack_lag_max_s)
        l->stats.ack_lag_max_s = lag;
    handling_free(h);
    poll_queue(l);
}

static void on_acquired(void *data, const struct github_response *res)
{
    struct handling *h = data;
    struct ss_listener *l = h->l;
    if (!answer_wanted(l)) {
        handling_free(h);
        return;
    }
    json_t *got = json_object_get(res->body, "value");
    if (res->err < 0)
        log_warn("scaleset.acquire_failed", "pool=%s scale_set=%s error=\"%s\"", l->pool, l->name,
                 res->message);
    else
        l->stats.acquired += json_array_size(got);
    after_message(h);
}

static void acquire(struct handling *h)
{
    struct ss_listener *l = h->l;
    if (json_array_size(h->available) == 0) {
        after_message(h);
        return;
    }
    char path[256];
    snprintf(path, sizeof(path), "_apis/runtime/runnerscalesets/%lld/acquirejobs",
             (long long)l->scale_set_id);
    struct ss_request req = {"POST", path, h->available, l->queue_token, NULL, 0, -1};
    l->request_out = true;
    if (ss_call(l->svc, &req, on_acquired, h) < 0) {
        l->request_out = false;
        after_message(h);
    }
}

static void ack(struct handling *h);

static void on_acked(void *data, const struct github_response *res)
{
    struct handling *h = data;
    struct ss_listener *l = h->l;
    if (!answer_wanted(l)) {
        handling_free(h);
        return;
    }
    if (res->status == 401 || (res->err < 0 && res->status != 404)) {
        /* Committed, not deleted: deleted before the next poll (after the session's
         * refresh when the queue token expired). */
        if (res->status != 401)
            log_warn("scaleset.ack_failed", "pool=%s scale_set=%s message=%lld error=\"%s\"",
                     l->pool, l->name, (long long)h->message_id, res->message);
        undeleted_add(l, h->message_id);
        bool expired = res->status == 401;
        if (json_array_size(h->available) == 0) {
            handling_free(h);
            if (expired)
                session_refresh(l);
            else
                back_off(l, SS_POLLING);
            return;
        }
        acquire(h); /* what the service offered is taken all the same */
        return;
    }
    l->stats.acks++;
    undeleted_remove(l, h->message_id);
    acquire(h);
}

/* The message's URL: the queue's, with /ID before its query (session_client.go). */
static int message_url(const char *queue, int64_t id, char *out, size_t size)
{
    const char *q = strchr(queue, '?');
    size_t n = q ? (size_t)(q - queue) : strlen(queue);
    int w = snprintf(out, size, "%.*s/%lld%s", (int)n, queue, (long long)id, q ? q : "");
    return w > 0 && (size_t)w < size ? 0 : -ENAMETOOLONG;
}

static void ack(struct handling *h)
{
    struct ss_listener *l = h->l;
    char url[2048];
    if (message_url(l->queue_url, h->message_id, url, sizeof(url)) < 0) {
        handling_free(h);
        back_off(l, SS_SESSION);
        return;
    }
    struct ss_request req = {"DELETE", url, NULL, l->queue_token, NULL, 0, -1};
    l->request_out = true;
    if (ss_call(l->svc, &req, on_acked, h) < 0) {
        l->request_out = false;
        handling_free(h);
        back_off(l, SS_POLLING);
    }
}

/* The first committed message not deleted from the queue, deleted now (a 404 says it
 * already was); false when there is none. */
static bool delete_undeleted(struct ss_listener *l)
{
    if (l->n_undeleted == 0)
        return false;
    struct handling *h = calloc(1, sizeof(*h));
    if (!h)
        return false;
    *h = (struct handling){l, l->undeleted[0], json_array(), json_array()};
    log_info("scaleset.redelete", "pool=%s scale_set=%s message=%lld", l->pool, l->name,
             (long long)h->message_id);
    l->message_ms = wall_clock_ms();
    l->state = SS_HANDLING;
    ack(h);
    return true;
}

static void committed(struct handling *h, int result)
{
    struct ss_listener *l = h->l;
    if (!answer_wanted(l)) {
        handling_free(h);
        return;
    }
    if (result < 0) {
        /* Not on disk: not deleted from the queue either; it comes again. */
        set_why(l, "cannot commit message %lld: %s", (long long)h->message_id, strerror(-result));
        handling_free(h);
        back_off(l, SS_POLLING);
        return;
    }
    if (h->message_id > l->last_message_id)
        l->last_message_id = h->message_id;
    tell_jobs(l, h->events);
    ack(h);
}

/* The store's answer to a message's commit. The commit counts in `pending` as a request
 * does: a stop that came meanwhile frees the listeners only after it (the store always
 * answers, -ECANCELED when it closes first). */
static void on_committed(void *data, int result)
{
    struct handling *h = data;
    struct scalesets *sets = h->l->sets;
    committed(h, result);
    sets->pending--;
    scalesets_release(sets);
}

static const char *job_state(const char *type)
{
    return strcmp(type, "JobAvailable") == 0  ? "available"
           : strcmp(type, "JobAssigned") == 0 ? "assigned"
           : strcmp(type, "JobStarted") == 0  ? "running"
                                              : "completed";
}

/* One message: checked, its jobs committed, then deleted from the queue. */
static void handle_message(struct ss_listener *l, json_t *msg)
{
    json_t *id = json_object_get(msg, "messageId");
    const char *type = json_string_value(json_object_get(msg, "messageType"));
    const char *body = json_string_value(json_object_get(msg, "body"));
    if (!json_is_integer(id) || json_integer_value(id) <= 0 || !type ||
        strcmp(type, "RunnerScaleSetJobMessages") != 0) {
        set_why(l, "a message that is not the scale set's (%s)", type ? type : "no type");
        log_warn("scaleset.bad_message", "pool=%s scale_set=%s type=%s", l->pool, l->name,
                 type ? type : "-");
        back_off(l, SS_POLLING);
        return;
    }
    json_t *events = body && body[0] ? json_loads(body, 0, NULL) : json_array();
    if (!json_is_array(events) || json_array_size(events) > MAX_JOBS_PER_MSG) {
        log_warn("scaleset.bad_message", "pool=%s scale_set=%s message=%lld reason=\"%s\"", l->pool,
                 l->name, (long long)json_integer_value(id),
                 json_is_array(events) ? "more than 50 jobs" : "a body that is not a JSON array");
        json_decref(events);
        back_off(l, SS_POLLING);
        return;
    }
    struct handling *h = calloc(1, sizeof(*h));
    json_t *jobs = json_array();
    if (!h || !jobs) {
        free(h);
        json_decref(jobs);
        json_decref(events);
        back_off(l, SS_POLLING);
        return;
    }
    *h = (struct handling){l, json_integer_value(id), events, json_array()};
    l->stats.messages++;
    l->message_ms = wall_clock_ms();
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e)
    {
        const char *t = json_string_value(json_object_get(e, "messageType"));
        const char *job = json_string_value(json_object_get(e, "jobId"));
        int k = -1;
        for (int j = 0; t && j < 4; j++)
            if (strcmp(t, type_names[j]) == 0)
                k = j;
        if (k < 0 || !job || !job[0])
            continue; /* a kind the library ignores too */
        l->stats.by_type[k]++;
        json_t *row = json_pack("{s:s, s:s}", "job_id", job, "state", job_state(t));
        const char *runner = json_string_value(json_object_get(e, "runnerName"));
        const char *result = json_string_value(json_object_get(e, "result"));
        json_t *labels = json_object_get(e, "requestLabels");
        if (row && runner && runner[0])
            json_object_set_new(row, "runner_name", json_string(runner));
        if (row && result)
            json_object_set_new(row, "result", json_string(result));
        char *text = json_is_array(labels) ? json_dumps(labels, JSON_COMPACT) : NULL;
        if (row && text)
            json_object_set_new(row, "labels", json_string(text));
        free(text);
        json_array_append_new(jobs, row);
        json_t *request = json_object_get(e, "runnerRequestId");
        if (k == 0 && json_is_integer(request))
            json_array_append(h->available, request);
    }
    statistics_set(l, json_object_get(msg, "statistics"));
    l->state = SS_HANDLING;
    l->request_out = true;
    l->sets->pending++;
    int r = store_scaleset_message_commit(l->sets->deps.store, l->name, l->scale_set_id,
                                          h->message_id, jobs, wall_clock_ms(), on_committed, h);
    if (r < 0) {
        l->sets->pending--;
        l->request_out = false;
        handling_free(h);
        back_off(l, SS_POLLING);
    }
}

/* ---- the long poll ---------------------------------------------------------------------- */

static void on_poll(void *data, const struct github_response *res)
{
    struct ss_listener *l = data;
    if (!answer_wanted(l))
        return;
    l->stats.polls++;
    if (res->status == 202 || (res->status == 200 && !res->body && res->err == 0)) {
        /* Nothing new (a 200 with an empty body, which the service sends too, alike). */
        l->stats.empty_polls++;
        l->failures = 0;
        poll_queue(l);
        return;
    }
    if (res->status == 401) {
        session_refresh(l);
        return;
    }
    if (res->status == 404) {
        log_warn("scaleset.session_evicted", "pool=%s scale_set=%s", l->pool, l->name);
        session_drop(l);
        back_off(l, SS_ENSURING); /* the session, or the scale set itself, is gone */
        return;
    }
    if (res->err < 0 || !json_is_object(res->body)) {
        set_why(l, "polling failed: %s", res->err < 0 ? res->message : "not a message");
        back_off(l, SS_POLLING);
        return;
    }
    l->failures = 0;
    handle_message(l, res->body);
}

static void poll_queue(struct ss_listener *l)
{
    if (stopping(l))
        return;
    if (!l->queue_url || !l->queue_token) {
        session_create(l);
        return;
    }
    if (delete_undeleted(l))
        return;
    l->state = SS_POLLING;
    char url[2048], capacity[64];
    const char *sep = strchr(l->queue_url, '?') ? "&" : "?";
    int n = l->last_message_id > 0 ? snprintf(url, sizeof(url), "%s%slastMessageId=%lld",
                                              l->queue_url, sep, (long long)l->last_message_id)
                                   : snprintf(url, sizeof(url), "%s", l->queue_url);
    if (n < 0 || (size_t)n >= sizeof(url)) {
        set_why(l, "the message queue URL is too long");
        session_abandon(l);
        back_off(l, SS_SESSION);
        return;
    }
    snprintf(capacity, sizeof(capacity), "X-ScaleSetMaxCapacity: %lld", (long long)l->max_runners);
    struct ss_request req = {"GET", url, NULL, l->queue_token, capacity, POLL_TIMEOUT_MS, 0};
    listener_send(l, &req, on_poll, SS_POLLING, NULL);
}

/* ---- stop ------------------------------------------------------------------------------- */

static void on_done_timer_closed(uv_handle_t *h)
{
    struct scalesets *sets = h->data;
    sets->pending--;
    scalesets_release(sets);
}

static void on_done_timer(uv_timer_t *t)
{
    struct scalesets *sets = t->data;
    if (sets->done)
        sets->done(sets->done_data);
    uv_close((uv_handle_t *)&sets->done_timer, on_done_timer_closed);
}

static void check_stopped(struct scalesets *sets)
{
    for (size_t i = 0; i < sets->n_listeners; i++)
        if (sets->listeners[i]->state != SS_STOPPED)
            return;
    if (sets->stopped)
        return;
    sets->stopped = true;
    for (size_t i = 0; sets->services && i < sets->deps.n_scopes; i++)
        ss_service_free(&sets->services[i]);
    /* Not from here: `done` may free the GitHub client, which answers (cancels) every
     * request at once, the one whose callback this may be among them. */
    uv_timer_start(&sets->done_timer, on_done_timer, 0, 0);
}

static void on_timer_closed(uv_handle_t *h)
{
    struct ss_listener *l = h->data;
    l->timer_open = false;
    l->sets->pending--;
    scalesets_release(l->sets);
}

static void stop_done(struct ss_listener *l)
{
    if (l->state == SS_STOPPED)
        return;
    l->state = SS_STOPPED;
    check_stopped(l->sets);
}

static void on_session_deleted(void *data, const struct github_response *res)
{
    struct ss_listener *l = data;
    if (res->err < 0 && res->status != 404)
        log_warn("scaleset.session_delete_failed", "pool=%s scale_set=%s error=\"%s\"", l->pool,
                 l->name, res->message);
    else
        log_info("scaleset.session_deleted", "pool=%s scale_set=%s", l->pool, l->name);
    session_drop(l);
    stop_done(l);
}

static void listener_stop(struct ss_listener *l)
{
    uv_timer_stop(&l->timer);
    l->state = SS_STOPPING;
    if (!l->session_id[0]) {
        stop_done(l);
        return;
    }
    /* A clean stop gives the session back: the next holder need not wait its linger. A
     * poll in flight is left to end on its own. */
    char path[256];
    snprintf(path, sizeof(path), "_apis/runtime/runnerscalesets/%lld/sessions/%s",
             (long long)l->scale_set_id, l->session_id);
    struct ss_request req = {"DELETE", path, NULL, NULL, NULL, 5000, 0};
    if (ss_call(l->svc, &req, on_session_deleted, l) < 0)
        stop_done(l);
}

/* ---- the collection ----------------------------------------------------------------------- */

static struct ss_listener *listener_of(const struct scalesets *sets, const char *pool)
{
    for (size_t i = 0; sets && i < sets->n_listeners; i++)
        if (strcmp(sets->listeners[i]->pool, pool) == 0)
            return sets->listeners[i];
    return NULL;
}

static void listener_free(struct ss_listener *l)
{
    json_decref(l->labels);
    json_decref(l->statistics);
    free(l->queue_url);
    secret_free(l->queue_token);
    free(l);
}

static void scalesets_release(struct scalesets *sets)
{
    if (!sets->stopped || sets->pending > 0)
        return;
    for (size_t i = 0; i < sets->n_listeners; i++)
        if (sets->listeners[i]->timer_open)
            return;
    for (size_t i = 0; i < sets->n_listeners; i++)
        listener_free(sets->listeners[i]);
    free(sets->listeners);
    free(sets->services);
    free(sets);
}

static const struct github_scope *pool_scope(const struct scalesets_deps *d,
                                             const struct config_pool *p)
{
    return github_scope_find(d->scopes, d->n_scopes, p->github_scope);
}

static struct ss_listener *listener_new(struct scalesets *sets, const struct config_pool *p,
                                        struct ss_service *svc)
{
    struct ss_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->sets = sets;
    l->svc = svc;
    snprintf(l->pool, sizeof(l->pool), "%s", p->name);
    snprintf(l->name, sizeof(l->name), "%s", p->scale_set);
    l->group_id = svc->scope->runner_group_id;
    l->max_runners = p->max_runners;
    l->assigned = -1;
    l->labels = json_array();
    for (size_t i = 0; l->labels && i < p->n_labels; i++)
        json_array_append_new(l->labels,
                              json_pack("{s:s, s:s}", "name", p->labels[i], "type", "System"));
    if (!l->labels) {
        free(l);
        return NULL;
    }
    int64_t id = 0, last = 0;
    if (store_scaleset_cursor_sync(sets->deps.store, l->name, &id, &last) == 0) {
        l->scale_set_id = id;
        l->last_message_id = last;
        /* The process that committed it may have died before deleting it. */
        if (last > 0)
            undeleted_add(l, last);
    }
    l->stats.no_session_since_ms = wall_clock_ms();
    uv_timer_init(sets->deps.loop, &l->timer);
    l->timer.data = l;
    l->timer_open = true;
    return l;
}

int scalesets_new(const struct scalesets_deps *deps, struct scalesets **ret)
{
    *ret = NULL;
    const struct config *c = deps->config;
    size_t n = 0;
    for (size_t i = 0; i < c->n_pools; i++)
        n += c->pools[i].scale_set != NULL;
    if (n == 0)
        return 0;
    struct scalesets *sets = calloc(1, sizeof(*sets));
    if (!sets)
        return -ENOMEM;
    sets->deps = *deps;
    sets->request_ended = scalesets_release;
    uv_timer_init(deps->loop, &sets->done_timer);
    sets->done_timer.data = sets;
    sets->pending = 1; /* the done timer, until it is closed */
    sets->services = calloc(deps->n_scopes + 1, sizeof(*sets->services));
    sets->listeners = calloc(n, sizeof(*sets->listeners));
    if (!sets->services || !sets->listeners) {
        free(sets->services);
        free(sets->listeners);
        sets->services = NULL;
        sets->listeners = NULL;
        sets->stopped = true;
        uv_close((uv_handle_t *)&sets->done_timer, on_done_timer_closed);
        return -ENOMEM;
    }
    for (size_t i = 0; i < deps->n_scopes; i++) {
        struct ss_service *svc = &sets->services[i];
        svc->sets = sets;
        svc->scope = &deps->scopes[i];
        scaleset_config_url(deps->github ? github_client_api_url(deps->github) : "", svc->scope,
                            svc->config_url, sizeof(svc->config_url));
    }
    for (size_t i = 0; i < c->n_pools; i++) {
        const struct config_pool *p = &c->pools[i];
        const struct github_scope *sc = p->scale_set ? pool_scope(deps, p) : NULL;
        if (!sc)
            continue;
        struct ss_listener *l = listener_new(sets, p, &sets->services[sc - deps->scopes]);
        if (!l)
            continue;
        sets->listeners[sets->n_listeners++] = l;
    }
    for (size_t i = 0; i < sets->n_listeners; i++)
        ensure(sets->listeners[i]);
    *ret = sets;
    return 0;
}

void scalesets_stop(struct scalesets *sets, void (*done)(void *data), void *data)
{
    if (!sets) {
        if (done)
            done(data);
        return;
    }
    sets->stopping = true;
    sets->done = done;
    sets->done_data = data;
    for (size_t i = 0; i < sets->n_listeners; i++) {
        struct ss_listener *l = sets->listeners[i];
        if (l->timer_open) {
            sets->pending++; /* until the close callback */
            uv_close((uv_handle_t *)&l->timer, on_timer_closed);
        }
        if (l->request_out && !l->session_id[0])
            l->state = SS_STOPPING; /* its answer ends the stop */
        else
            listener_stop(l);
    }
    check_stopped(sets);
}

int64_t scalesets_assigned(const struct scalesets *sets, const char *pool)
{
    const struct ss_listener *l = listener_of(sets, pool);
    return l ? l->assigned : -2;
}

/* ---- runners ------------------------------------------------------------------------------ */

struct jit_call {
    struct scalesets *sets;
    struct ss_listener *l;
    char name[NAME_BYTES];
    bool conflict_resolved;
    github_jit_cb cb;
    void *data;
};

static void jit_send(struct jit_call *j);

static void jit_finish(struct jit_call *j, int err, const char *message, int64_t id,
                       struct secret *config)
{
    j->cb(j->data, err, message, id, config);
    free(j);
}

static void on_stale_removed(void *data, const struct github_response *res)
{
    struct jit_call *j = data;
    if (res->err < 0 && res->status != 404) {
        jit_finish(j, res->err, res->message, 0, NULL);
        return;
    }
    jit_send(j);
}

static void on_stale_found(void *data, const struct github_response *res)
{
    struct jit_call *j = data;
    json_t *id = json_object_get(json_array_get(json_object_get(res->body, "value"), 0), "id");
    if (res->err < 0 || !json_is_integer(id)) {
        jit_finish(j, res->err < 0 ? res->err : -EEXIST,
                   res->err < 0 ? res->message : "the runner's name is taken, and not listed", 0,
                   NULL);
        return;
    }
    char path[128];
    snprintf(path, sizeof(path), "_apis/distributedtask/pools/0/agents/%lld",
             (long long)json_integer_value(id));
    struct ss_request req = {"DELETE", path, NULL, NULL, NULL, 0, -1};
    if (ss_call(j->l->svc, &req, on_stale_removed, j) < 0)
        jit_finish(j, -ECANCELED, "stopping", 0, NULL);
}

static void on_jit(void *data, const struct github_response *res)
{
    struct jit_call *j = data;
    if (res->status == 409 && !j->conflict_resolved) {
        /* Registered by an attempt whose answer was lost: ours, never configured. */
        j->conflict_resolved = true;
        char path[256];
        char *name = curl_easy_escape(NULL, j->name, 0);
        snprintf(path, sizeof(path), "_apis/distributedtask/pools/0/agents?agentName=%s",
                 name ? name : "");
        curl_free(name);
        struct ss_request req = {"GET", path, NULL, NULL, NULL, 0, -1};
        if (ss_call(j->l->svc, &req, on_stale_found, j) < 0)
            jit_finish(j, -ECANCELED, "stopping", 0, NULL);
        return;
    }
    json_t *runner_id = json_object_get(json_object_get(res->body, "runner"), "id");
    const char *config = json_string_value(json_object_get(res->body, "encodedJITConfig"));
    if (res->err < 0 || !json_is_integer(runner_id) || !config || !config[0]) {
        jit_finish(j, res->err < 0 ? res->err : -EBADMSG,
                   res->err < 0 ? res->message : "a JIT answer without runner id or config", 0,
                   NULL);
        return;
    }
    struct secret *jit = NULL;
    if (secret_from_bytes(config, strlen(config), &jit) < 0) {
        jit_finish(j, -ENOMEM, "out of memory", 0, NULL);
        return;
    }
    jit_finish(j, 0, NULL, json_integer_value(runner_id), jit);
}

static void jit_send(struct jit_call *j)
{
    char path[128];
    snprintf(path, sizeof(path), "_apis/runtime/runnerscalesets/%lld/generatejitconfig",
             (long long)j->l->scale_set_id);
    json_t *body = json_pack("{s:s, s:s}", "name", j->name, "workFolder", "_work");
    struct ss_request req = {"POST", path, body, NULL, NULL, 0, -1};
    int r = body ? ss_call(j->l->svc, &req, on_jit, j) : -ENOMEM;
    json_decref(body);
    if (r < 0)
        jit_finish(j, r, "cannot ask the scale set for a JIT config", 0, NULL);
}

int scalesets_jit_generate(struct scalesets *sets, const char *pool, const char *name,
                           github_jit_cb cb, void *data)
{
    struct ss_listener *l = listener_of(sets, pool);
    if (!l || sets->stopping)
        return -ENOENT;
    if (!l->scale_set_id)
        return -EAGAIN; /* not ensured yet */
    struct jit_call *j = calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    *j = (struct jit_call){.sets = sets, .l = l, .cb = cb, .data = data};
    snprintf(j->name, sizeof(j->name), "%s", name);
    jit_send(j);
    return 0;
}

struct remove_call {
    github_done_cb cb;
    void *data;
};

static void on_removed(void *data, const struct github_response *res)
{
    struct remove_call *rc = data;
    const char *type = json_string_value(json_object_get(res->body, "typeName"));
    if (res->err == 0 || res->status == 404)
        rc->cb(rc->data, 0, NULL);
    else if (type && strstr(type, "JobStillRunningException"))
        rc->cb(rc->data, -EBUSY, "the runner still runs its job");
    else
        rc->cb(rc->data, res->err, res->message);
    free(rc);
}

int scalesets_runner_remove(struct scalesets *sets, const char *pool, int64_t runner_id,
                            github_done_cb cb, void *data)
{
    struct ss_listener *l = listener_of(sets, pool);
    if (!l)
        return -ENOENT;
    struct remove_call *rc = calloc(1, sizeof(*rc));
    if (!rc)
        return -ENOMEM;
    *rc = (struct remove_call){cb, data};
    char path[128];
    snprintf(path, sizeof(path), "_apis/distributedtask/pools/0/agents/%lld", (long long)runner_id);
    struct ss_request req = {"DELETE", path, NULL, NULL, NULL, 0, -1};
    int r = ss_call(l->svc, &req, on_removed, rc);
    if (r < 0)
        free(rc);
    return r;
}

struct remove_by_name {
    struct ss_listener *l;
    github_done_cb cb;
    void *data;
};

static void on_named_runner(void *data, const struct github_response *res)
{
    struct remove_by_name *rn = data;
    json_t *id = json_object_get(json_array_get(json_object_get(res->body, "value"), 0), "id");
    struct ss_listener *l = rn->l;
    github_done_cb cb = rn->cb;
    void *cb_data = rn->data;
    free(rn);
    if (res->err < 0) {
        cb(cb_data, res->err, res->message);
        return;
    }
    if (!json_is_integer(id)) {
        cb(cb_data, 0, NULL); /* never registered, or already gone */
        return;
    }
    int r = scalesets_runner_remove(l->sets, l->pool, json_integer_value(id), cb, cb_data);
    if (r < 0)
        cb(cb_data, r, "cannot remove the runner");
}

int scalesets_runner_remove_by_name(struct scalesets *sets, const char *pool, const char *name,
                                    github_done_cb cb, void *data)
{
    struct ss_listener *l = listener_of(sets, pool);
    if (!l)
        return -ENOENT;
    struct remove_by_name *rn = calloc(1, sizeof(*rn));
    if (!rn)
        return -ENOMEM;
    *rn = (struct remove_by_name){l, cb, data};
    char path[256];
    char *escaped = curl_easy_escape(NULL, name, 0);
    snprintf(path, sizeof(path), "_apis/distributedtask/pools/0/agents?agentName=%s",
             escaped ? escaped : "");
    curl_free(escaped);
    struct ss_request req = {"GET", path, NULL, NULL, NULL, 0, -1};
    int r = ss_call(l->svc, &req, on_named_runner, rn);
    if (r < 0)
        free(rn);
    return r;
}

/* ---- what operators see ------------------------------------------------------------------- */

json_t *scalesets_json(const struct scalesets *sets)
{
    json_t *list = json_array();
    for (size_t i = 0; list && sets && i < sets->n_listeners; i++) {
        const struct ss_listener *l = sets->listeners[i];
        json_t *by_type = json_object();
        for (int k = 0; by_type && k < 4; k++)
            json_object_set_new(by_type, type_names[k],
                                json_integer((json_int_t)l->stats.by_type[k]));
        int64_t desired = l->assigned < 0 ? -1 : l->assigned;
        json_t *o = json_pack(
            "{s:s, s:s, s:I, s:s, s:s?, s:s?, s:s, s:I, s:O?, s:I, s:I, s:I, s:o, s:I, s:I, s:I}",
            "pool", l->pool, "name", l->name, "id", (json_int_t)l->scale_set_id, "state",
            state_names[l->state], "why", l->why[0] ? l->why : NULL, "session_id",
            l->session_id[0] ? l->session_id : NULL, "owner", l->sets->deps.owner,
            "last_message_id", (json_int_t)l->last_message_id, "statistics", l->statistics,
            "assigned_jobs", (json_int_t)desired, "polls", (json_int_t)l->stats.polls, "messages",
            (json_int_t)l->stats.messages, "messages_by_type", by_type, "conflicts",
            (json_int_t)l->stats.conflicts, "token_refreshes", (json_int_t)l->svc->refreshes,
            "no_session_s",
            (json_int_t)(l->stats.no_session_since_ms
                             ? (wall_clock_ms() - l->stats.no_session_since_ms) / 1000
                             : 0));
        json_object_set_new(
            o, "unacknowledged_s",
            json_integer(l->state == SS_HANDLING ? (wall_clock_ms() - l->message_ms) / 1000 : 0));
        json_array_append_new(list, o);
    }
    return list;
}

void scalesets_stats(const struct scalesets *sets, struct scaleset_stats *ret)
{
    memset(ret, 0, sizeof(*ret));
    for (size_t i = 0; sets && i < sets->n_listeners; i++) {
        const struct scaleset_stats *s = &sets->listeners[i]->stats;
        ret->polls += s->polls;
        ret->empty_polls += s->empty_polls;
        ret->messages += s->messages;
        ret->acks += s->acks;
        ret->acquired += s->acquired;
        ret->conflicts += s->conflicts;
        ret->session_refreshes += s->session_refreshes;
        ret->errors += s->errors;
        for (int k = 0; k < 4; k++)
            ret->by_type[k] += s->by_type[k];
        if (s->ack_lag_max_s > ret->ack_lag_max_s)
            ret->ack_lag_max_s = s->ack_lag_max_s;
        if (s->no_session_since_ms &&
            (!ret->no_session_since_ms || s->no_session_since_ms < ret->no_session_since_ms))
            ret->no_session_since_ms = s->no_session_since_ms;
    }
    for (size_t i = 0; sets && i < sets->deps.n_scopes; i++)
        ret->token_refreshes += sets->services[i].refreshes;
}
