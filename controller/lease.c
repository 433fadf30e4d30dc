/* The leader's lease and the fence that stops a leader whose lease has run out (lease.h). */
#include "lease.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "store.h"
#include "store_backend.h"
#include "wall_clock.h"

/* One statement, judged by the database's clock alone: the lease renewed for its holder at
 * the epoch it holds (while unexpired), or taken over once expired (the epoch one more,
 * and lease_fences with it), or, when neither, nothing returned: another instance leads.
 * The instance's own row records the attempt; rows of instances silent for an hour go.
 * Under READ COMMITTED a competing takeover waits for the row and then finds the lease
 * unexpired. A renewal touches only `leases`, which no commit of the store locks, so a
 * busy or blocked store never makes the leader miss its renewal. */
static const char renew_sql[] =
    "WITH now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms), "
    "taken AS ("
    " INSERT INTO leases AS l (controller_id, holder, epoch, acquired_ms, renewed_ms, expires_ms)"
    " SELECT ?1, ?2, 1, ms, ms, ms + ?3 FROM now"
    " ON CONFLICT (controller_id) DO UPDATE SET"
    "  holder = excluded.holder,"
    "  epoch = CASE WHEN l.holder = excluded.holder AND l.epoch = ?4"
    "   AND l.expires_ms >= excluded.renewed_ms THEN l.epoch ELSE l.epoch + 1 END,"
    "  acquired_ms = CASE WHEN l.holder = excluded.holder AND l.epoch = ?4"
    "   AND l.expires_ms >= excluded.renewed_ms THEN l.acquired_ms ELSE excluded.acquired_ms END,"
    "  renewed_ms = excluded.renewed_ms, expires_ms = excluded.expires_ms"
    " WHERE (l.holder = excluded.holder AND l.epoch = ?4 AND l.expires_ms >= excluded.renewed_ms)"
    "  OR l.expires_ms < excluded.renewed_ms"
    " RETURNING l.epoch, l.acquired_ms), "
    /* A takeover only: it waits for the commits of the leader before (they lock the row
     * for theirs: store.c), and refuses theirs after it. */
    "fence AS ("
    " INSERT INTO lease_fences (controller_id, epoch) SELECT ?1, epoch FROM taken"
    "  WHERE epoch <> ?4"
    " ON CONFLICT (controller_id) DO UPDATE SET epoch = excluded.epoch), "
    "member AS ("
    " INSERT INTO lease_members (controller_id, instance, started_ms, renewed_ms, epoch)"
    " SELECT ?1, ?2, ms, ms, coalesce((SELECT epoch FROM taken), 0) FROM now"
    " ON CONFLICT (controller_id, instance) DO UPDATE SET"
    "  renewed_ms = excluded.renewed_ms, epoch = excluded.epoch), "
    "gone AS ("
    " DELETE FROM lease_members WHERE controller_id = ?1 AND instance <> ?2"
    "  AND renewed_ms < (SELECT ms FROM now) - 3600000) "
    "SELECT (SELECT epoch FROM taken) AS epoch, (SELECT acquired_ms FROM taken) AS acquired_ms,"
    " (SELECT holder FROM leases WHERE controller_id = ?1) AS holder";

enum fence_mode {
    FENCE_NONE,     /* no lease (a SQLite store): this process is the only controller */
    FENCE_FOLLOWER, /* a lease, not held */
    FENCE_LEADER,   /* held until fence_deadline_ns */
};
/* Process-wide, as the process is what the fence stops: read by every thread that is about
 * to call libvirt or GitHub. */
static _Atomic int fence_mode = FENCE_NONE;
static _Atomic int64_t fence_deadline_ns;
static _Atomic int64_t fence_epoch;

static int64_t boottime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static _Noreturn void fence_exit(const char *what, int64_t late_ms)
{
    /* Nothing more runs: not even the other threads' next call. The log line goes first,
     * whole (log.c writes each line with one write). */
    log_error("lease.lost", "epoch=%lld what=%s late_ms=%lld exit=%d",
              (long long)atomic_load(&fence_epoch), what, (long long)late_ms, LEASE_LOST_EXIT);
    _exit(LEASE_LOST_EXIT);
}

int lease_fence_check(const char *what)
{
    switch (atomic_load(&fence_mode)) {
    case FENCE_NONE:
        return 0;
    case FENCE_FOLLOWER:
        return -EPERM;
    default:
        break;
    }
    int64_t late_ns = boottime_ns() - atomic_load(&fence_deadline_ns);
    if (late_ns >= 0)
        fence_exit(what, late_ns / 1000000);
    return 0;
}

void lease_fence_or_exit(const char *what)
{
    if (lease_fence_check(what) < 0)
        fence_exit(what, 0);
}

int64_t lease_epoch(void)
{
    return atomic_load(&fence_mode) == FENCE_LEADER ? atomic_load(&fence_epoch) : 0;
}

struct lease {
    uv_loop_t *loop;
    struct store_conn *conn;
    char *controller_id, *instance;
    int64_t lease_ms;
    struct lease_events events;
    uv_timer_t renew_timer; /* every lease/5 */
    uv_timer_t fence_timer; /* at the deadline: an idle leader ends too */
    uv_work_t work;
    bool in_flight;
    bool closing;
    /* The attempt on the worker: what it sent (at sent_ns) and what came back. */
    int64_t sent_ns;
    int64_t asked_epoch;
    bool failed;
    char error[200];
    int64_t got_epoch, got_acquired_ms;
    char got_holder[128];
    struct lease_stats stats;
};

static void renew_work(uv_work_t *w)
{
    struct lease *l = w->data;
    l->failed = false;
    l->got_epoch = 0;
    l->got_holder[0] = 0;
    json_t *params = json_pack("[s, s, I, I]", l->controller_id, l->instance,
                               (json_int_t)l->lease_ms, (json_int_t)l->asked_epoch);
    /* The deadline counts from before the statement leaves: the database's now() is later. */
    l->sent_ns = boottime_ns();
    json_t *rows = params ? l->conn->backend->query(l->conn, renew_sql, params) : NULL;
    json_decref(params);
    json_t *row = json_array_get(rows, 0);
    if (!row) {
        l->failed = true;
        snprintf(l->error, sizeof(l->error), "%s",
                 params ? l->conn->backend->errmsg(l->conn) : "out of memory");
    } else {
        l->got_epoch = json_integer_value(json_object_get(row, "epoch"));
        l->got_acquired_ms = json_integer_value(json_object_get(row, "acquired_ms"));
        const char *holder = json_string_value(json_object_get(row, "holder"));
        snprintf(l->got_holder, sizeof(l->got_holder), "%s", holder ? holder : "");
    }
    json_decref(rows);
}

static void on_fence_timer(uv_timer_t *t)
{
    (void)t;
    lease_fence_check("lease_timer");
}

static void renew_done(uv_work_t *w, int status)
{
    struct lease *l = w->data;
    l->in_flight = false;
    if (l->closing)
        return;
    bool leading = atomic_load(&fence_mode) == FENCE_LEADER;
    /* An answer that comes after the deadline extends nothing: the leader is gone by then
     * (a renewal sent after it cannot be trusted to follow on from the one before). */
    if (leading)
        lease_fence_check("lease_renewal");
    l->stats.last_renewal_ms = wall_clock_ms();
    if (status < 0 || l->failed) {
        l->stats.renewal_failures++;
        log_warn("lease.renew_failed", "leading=%s epoch=%lld error=\"%s\"", leading ? "yes" : "no",
                 (long long)l->stats.epoch, status < 0 ? uv_strerror(status) : l->error);
        return;
    }
    l->stats.renewals++;
    snprintf(l->stats.holder, sizeof(l->stats.holder), "%s", l->got_holder);
    if (leading) {
        if (l->got_epoch != l->stats.epoch) {
            /* Another leader came between (or this one's lease lapsed unseen): what it did
             * is not known here. */
            log_error("lease.superseded", "epoch=%lld answer_epoch=%lld holder=%s",
                      (long long)l->stats.epoch, (long long)l->got_epoch, l->got_holder);
            atomic_store(&fence_deadline_ns, 0);
            lease_fence_check("lease_superseded");
        }
        int64_t deadline = l->sent_ns + l->lease_ms * 1000000 / 5 * 4;
        atomic_store(&fence_deadline_ns, deadline);
        uv_timer_start(&l->fence_timer, on_fence_timer,
                       (uint64_t)((deadline - boottime_ns()) / 1000000) + 1, 0);
        return;
    }
    if (l->got_epoch <= 0) {
        if (l->stats.takeovers == 0 && l->stats.renewals == 1)
            log_info("lease.following", "holder=%s", l->got_holder[0] ? l->got_holder : "none");
        return;
    }
    /* Taken: the deadline is set before anything may act on it. */
    int64_t deadline = l->sent_ns + l->lease_ms * 1000000 / 5 * 4;
    if (deadline <= boottime_ns()) {
        log_warn("lease.taken_too_late", "epoch=%lld", (long long)l->got_epoch);
        return; /* the next attempt renews it, in time or not */
    }
    atomic_store(&fence_epoch, l->got_epoch);
    atomic_store(&fence_deadline_ns, deadline);
    atomic_store(&fence_mode, FENCE_LEADER);
    uv_timer_start(&l->fence_timer, on_fence_timer,
                   (uint64_t)((deadline - boottime_ns()) / 1000000) + 1, 0);
    l->stats.leading = true;
    l->stats.epoch = l->got_epoch;
    l->stats.leading_since_ms = l->got_acquired_ms;
    l->stats.takeovers++;
    log_info("lease.acquired", "epoch=%lld instance=%s previous=%s lease_ms=%lld",
             (long long)l->got_epoch, l->instance, l->got_holder[0] ? l->got_holder : "none",
             (long long)l->lease_ms);
    if (l->events.on_leading)
        l->events.on_leading(l->events.data, l->got_epoch);
}

static void on_renew_timer(uv_timer_t *t)
{
    struct lease *l = t->data;
    if (l->in_flight || l->closing)
        return; /* the last attempt still waits on the database: its answer decides */
    l->asked_epoch = l->stats.leading ? l->stats.epoch : 0;
    l->work.data = l;
    if (uv_queue_work(l->loop, &l->work, renew_work, renew_done) == 0)
        l->in_flight = true;
}

int lease_start(uv_loop_t *loop, struct store_conn *conn, const struct lease_options *o,
                const struct lease_events *events, struct lease **ret)
{
    struct lease *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->loop = loop;
    l->conn = conn;
    l->controller_id = strdup(o->controller_id);
    l->instance = strdup(o->instance);
    l->lease_ms = o->lease_ms;
    l->events = *events;
    if (!l->controller_id || !l->instance) {
        free(l->controller_id);
        free(l->instance);
        free(l);
        return -ENOMEM;
    }
    atomic_store(&fence_mode, FENCE_FOLLOWER);
    uv_timer_init(loop, &l->renew_timer);
    uv_timer_init(loop, &l->fence_timer);
    l->renew_timer.data = l->fence_timer.data = l;
    /* They run while the daemon does, and keep no finished stop waiting. */
    uv_unref((uv_handle_t *)&l->renew_timer);
    uv_unref((uv_handle_t *)&l->fence_timer);
    uv_timer_start(&l->renew_timer, on_renew_timer, 0, (uint64_t)(l->lease_ms / 5));
    *ret = l;
    return 0;
}

static void lease_free(uv_handle_t *h)
{
    struct lease *l = h->data;
    l->conn->backend->close(l->conn);
    free(l->controller_id);
    free(l->instance);
    free(l);
}

static void fence_timer_closed(uv_handle_t *h)
{
    struct lease *l = h->data;
    uv_close((uv_handle_t *)&l->renew_timer, lease_free);
}

void lease_release(struct lease *l)
{
    if (!l)
        return;
    l->closing = true;
    uv_timer_stop(&l->renew_timer);
    uv_timer_stop(&l->fence_timer);
    /* An attempt on a worker still owns the connection: the loop's last turns wait for it
     * (the handles close after it). Then the lease is given up only if still held here. */
    while (l->in_flight)
        uv_run(l->loop, UV_RUN_ONCE);
    if (l->stats.leading && lease_fence_check("lease_release") == 0) {
        json_t *params =
            json_pack("[s, s, I]", l->controller_id, l->instance, (json_int_t)l->stats.epoch);
        int r = params ? l->conn->backend->exec(
                             l->conn,
                             "UPDATE leases SET expires_ms = 0 WHERE controller_id = ?1 AND "
                             "holder = ?2 AND epoch = ?3",
                             params, NULL)
                       : -ENOMEM;
        json_decref(params);
        if (r < 0)
            log_warn("lease.release_failed", "epoch=%lld error=\"%s\"", (long long)l->stats.epoch,
                     l->conn->backend->errmsg(l->conn));
        else
            log_info("lease.released", "epoch=%lld", (long long)l->stats.epoch);
        /* Nothing acts after this: a follower may take over at once. */
        atomic_store(&fence_mode, FENCE_FOLLOWER);
    }
    json_t *params = json_pack("[s, s]", l->controller_id, l->instance);
    if (params)
        l->conn->backend->exec(
            l->conn, "DELETE FROM lease_members WHERE controller_id = ?1 AND instance = ?2", params,
            NULL);
    json_decref(params);
    uv_close((uv_handle_t *)&l->fence_timer, fence_timer_closed);
}

void lease_stats_get(const struct lease *l, struct lease_stats *ret)
{
    *ret = l->stats;
}

int lease_read(struct store *store, const void *owner, const char *controller_id,
               void (*cb)(void *data, json_t *rows), void *data)
{
    return store_read(
        store, owner,
        "SELECT m.instance, m.started_ms, m.renewed_ms, m.epoch, l.holder, l.epoch AS lease_epoch,"
        " l.acquired_ms, l.expires_ms,"
        " (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms"
        " FROM lease_members m LEFT JOIN leases l ON l.controller_id = m.controller_id"
        " WHERE m.controller_id = ?1 ORDER BY m.instance",
        json_pack("[s]", controller_id), cb, data);
}
