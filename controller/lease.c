/* The leader's lease and the fence that stops a leader whose lease has run out (lease.h). */
#define _GNU_SOURCE /* pthread_setname_np */
#include "lease.h"

#include <errno.h>
#include <pthread.h>
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
    /* Threads that find the deadline passed at once: the first says so, the others wait
     * for its _exit (they make no call meanwhile). */
    static atomic_flag ending = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&ending))
        for (;;)
            pause();
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
    struct store_conn *conn; /* the thread's while it runs; then the release's */
    char *controller_id, *instance;
    int64_t lease_ms;
    struct lease_events events;
    /* Renewals run on a thread of the lease's own, not on libuv's shared pool: a pool busy
     * with the store's or anyone's work would make the leader miss its lease. The thread
     * extends the deadline itself (fence_deadline_ns), so a busy loop cannot either. */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t lock; /* guards stats, closing and the takeover's news */
    pthread_cond_t wake;
    bool closing;
    bool took_over; /* the thread took the lease: the loop's on_leading is due */
    uv_async_t news;
    uv_timer_t fence_timer; /* every lease/10: an idle leader past its deadline ends too */
    int open_handles;       /* at the release: the two handles' closes still to come */
    struct lease_stats stats;
};

/* One attempt, on the lease's thread; what it learnt goes into the stats (under lock)
 * and, for a leader, straight into the fence. */
static void attempt(struct lease *l)
{
    pthread_mutex_lock(&l->lock);
    int64_t epoch = l->stats.leading ? l->stats.epoch : 0;
    pthread_mutex_unlock(&l->lock);
    json_t *params = json_pack("[s, s, I, I]", l->controller_id, l->instance,
                               (json_int_t)l->lease_ms, (json_int_t)epoch);
    /* The deadline counts from before the statement leaves: the database's now() is later. */
    int64_t sent_ns = boottime_ns();
    json_t *rows = params ? l->conn->backend->query(l->conn, renew_sql, params) : NULL;
    json_decref(params);
    json_t *row = json_array_get(rows, 0);
    int64_t answered_ns = boottime_ns();
    int64_t deadline = sent_ns + l->lease_ms * 1000000 / 5 * 4;
    bool leading = atomic_load(&fence_mode) == FENCE_LEADER;
    /* An answer slower than the time between attempts eats into the margin a leader has
     * before its deadline: said before it runs out, with how much is left. */
    bool slow = answered_ns - sent_ns > l->lease_ms * 1000000 / 5;
    if (slow)
        log_warn("lease.renewal_slow", "leading=%s took_ms=%lld margin_ms=%lld",
                 leading ? "yes" : "no", (long long)((answered_ns - sent_ns) / 1000000),
                 leading ? (long long)((atomic_load(&fence_deadline_ns) - answered_ns) / 1000000)
                         : 0LL);
    /* An answer after the deadline extends nothing: the leader is gone by then (a renewal
     * sent after it cannot be trusted to follow on from the one before). */
    if (leading)
        lease_fence_check("lease_renewal");
    pthread_mutex_lock(&l->lock);
    l->stats.last_renewal_ms = wall_clock_ms();
    l->stats.slow_renewals += slow;
    if (!row) {
        l->stats.renewal_failures++;
        pthread_mutex_unlock(&l->lock);
        log_warn("lease.renew_failed", "leading=%s epoch=%lld error=\"%s\"", leading ? "yes" : "no",
                 (long long)epoch, params ? l->conn->backend->errmsg(l->conn) : "out of memory");
        json_decref(rows);
        return;
    }
    l->stats.renewals++;
    int64_t got = json_integer_value(json_object_get(row, "epoch"));
    const char *holder = json_string_value(json_object_get(row, "holder"));
    bool first = l->stats.renewals == 1;
    if (leading) {
        pthread_mutex_unlock(&l->lock);
        if (got != epoch) {
            /* Another leader came between (or this one's lease lapsed unseen): what it did
             * is not known here. */
            log_error("lease.superseded", "epoch=%lld answer_epoch=%lld holder=%s",
                      (long long)epoch, (long long)got, holder ? holder : "");
            fence_exit("lease_superseded", 0);
        }
        atomic_store(&fence_deadline_ns, deadline);
    } else if (got <= 0) {
        pthread_mutex_unlock(&l->lock);
        if (first)
            log_info("lease.following", "holder=%s", holder && holder[0] ? holder : "none");
    } else if (deadline <= boottime_ns()) {
        pthread_mutex_unlock(&l->lock);
        log_warn("lease.taken_too_late", "epoch=%lld", (long long)got); /* renewed next time */
    } else {
        /* Taken: the fence is set before anything may act on it. */
        atomic_store(&fence_epoch, got);
        atomic_store(&fence_deadline_ns, deadline);
        atomic_store(&fence_mode, FENCE_LEADER);
        l->stats.leading = true;
        l->stats.epoch = got;
        l->stats.leading_since_ms = json_integer_value(json_object_get(row, "acquired_ms"));
        l->stats.takeovers++;
        l->took_over = true;
        pthread_mutex_unlock(&l->lock);
        log_info("lease.acquired", "epoch=%lld instance=%s previous=%s lease_ms=%lld",
                 (long long)got, l->instance, holder && holder[0] ? holder : "none",
                 (long long)l->lease_ms);
        uv_async_send(&l->news);
    }
    json_decref(rows);
}

static void *lease_thread(void *arg)
{
    struct lease *l = arg;
    pthread_setname_np(pthread_self(), "lease");
    pthread_mutex_lock(&l->lock);
    while (!l->closing) {
        pthread_mutex_unlock(&l->lock);
        attempt(l);
        pthread_mutex_lock(&l->lock);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t ns = until.tv_nsec + l->lease_ms * 1000000 / 5;
        until.tv_sec += ns / 1000000000;
        until.tv_nsec = ns % 1000000000;
        while (!l->closing && pthread_cond_timedwait(&l->wake, &l->lock, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

/* The thread took the lease: the daemon leads, on the loop. */
static void on_news(uv_async_t *async)
{
    struct lease *l = async->data;
    pthread_mutex_lock(&l->lock);
    bool took = l->took_over && !l->closing;
    int64_t epoch = l->stats.epoch;
    l->took_over = false;
    pthread_mutex_unlock(&l->lock);
    if (took && l->events.on_leading)
        l->events.on_leading(l->events.data, epoch);
}

static void on_fence_timer(uv_timer_t *t)
{
    (void)t;
    lease_fence_check("lease_timer");
}

int lease_start(uv_loop_t *loop, struct store_conn *conn, const struct lease_options *o,
                const struct lease_events *events, struct lease **ret)
{
    struct lease *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
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
    pthread_mutex_init(&l->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&l->wake, &attr);
    pthread_condattr_destroy(&attr);
    atomic_store(&fence_mode, FENCE_FOLLOWER);
    uv_async_init(loop, &l->news, on_news);
    uv_timer_init(loop, &l->fence_timer);
    l->news.data = l->fence_timer.data = l;
    /* They serve the daemon while it runs, and keep no finished stop waiting. */
    uv_unref((uv_handle_t *)&l->news);
    uv_unref((uv_handle_t *)&l->fence_timer);
    uint64_t every = (uint64_t)(l->lease_ms / 10 > 0 ? l->lease_ms / 10 : 1);
    uv_timer_start(&l->fence_timer, on_fence_timer, every, every);
    int r = pthread_create(&l->thread, NULL, lease_thread, l);
    if (r != 0) {
        uv_close((uv_handle_t *)&l->news, NULL);
        uv_close((uv_handle_t *)&l->fence_timer, NULL);
        atomic_store(&fence_mode, FENCE_NONE);
        /* The handles' memory is the lease's: it stays allocated (a failed start ends the
         * process). */
        return -r;
    }
    l->thread_started = true;
    *ret = l;
    return 0;
}

/* Each handle's close; the last one frees (both close in the same turn of the loop). */
static void lease_free(uv_handle_t *h)
{
    struct lease *l = h->data;
    if (--l->open_handles > 0)
        return;
    l->conn->backend->close(l->conn);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->wake);
    free(l->controller_id);
    free(l->instance);
    free(l);
}

void lease_release(struct lease *l)
{
    if (!l)
        return;
    /* The thread's attempt in progress ends first (at most one statement's time); then the
     * connection is this thread's. */
    pthread_mutex_lock(&l->lock);
    l->closing = true;
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->lock);
    if (l->thread_started)
        pthread_join(l->thread, NULL);
    uv_timer_stop(&l->fence_timer);
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
    l->open_handles = 2;
    uv_close((uv_handle_t *)&l->news, lease_free);
    uv_close((uv_handle_t *)&l->fence_timer, lease_free);
}

void lease_stats_get(const struct lease *l, struct lease_stats *ret)
{
    pthread_mutex_lock((pthread_mutex_t *)&l->lock);
    *ret = l->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&l->lock);
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
