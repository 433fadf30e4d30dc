/* Demand-based scheduling, the runner lifecycle and the reconciler; see scheduler.h. */
#include "scheduler.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "github.h"
#include "guest_isolation.h"
#include "hatchery/limits.h"
#include "image_manifest.h"
#include "log.h"
#include "provider.h"
#include "store.h"
#include "wall_clock.h"
#include "webhook.h"

#define TICK_MS              1000
#define DEFAULT_COMMAND_ARGS 2

const double scheduler_boot_bounds[SCHEDULER_BOOT_BUCKETS] = {0.5, 1,  2,  5,  10, 15,
                                                              20,  30, 45, 60, 120};
const double scheduler_wait_bounds[SCHEDULER_WAIT_BUCKETS] = {
    1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400};

/* The Listener itself, not run.sh: run.sh exits 0 for every return code but 2, and the
 * agent reports what the code means (and re-launches on 2, 3 and 4 as run.sh would). */
static const char *const default_command[DEFAULT_COMMAND_ARGS] = {
    "/opt/actions-runner/bin/Runner.Listener", "run"};

struct runner {
    struct scheduler *s;
    int64_t id;
    char name[160];
    const struct config_pool *pool;
    const struct github_scope *scope;
    char host[CONFIG_MAX_NAME_BYTES + 1];
    enum runner_state state;
    struct guest *guest;
    struct secret *jit;
    int64_t github_runner_id;
    bool hello;
    int pool_failures_at_start; /* the pool's failures in a row when this runner started */
    /* Callbacks still to come with this runner (GitHub requests, store commits): it is
     * freed only when it is deleted and none is left. */
    int holds;
    bool forget_pending;
    bool adopting; /* an earlier hatcheryd's runner, waiting for its agent */
    int64_t adopt_started_ms;
    int64_t heartbeat_ms; /* the agent's last sign of life */
    int64_t job_id;
    int exit_code;
    int64_t created_ms, online_ms, busy_ms, finished_ms;
    char reason[256];
    uv_timer_t timer;
    struct runner *next;
    struct runner *next_in_bucket;
};

#define RUNNER_BUCKETS 1024 /* by id; a power of two */

struct scheduler {
    struct scheduler_deps deps;
    bool closing; /* scheduler_free was called: runners still held are freed by their holds */
    struct runner *runners;
    struct runner *by_id[RUNNER_BUCKETS];
    int64_t next_id;
    int64_t first_id; /* records below it are an earlier process's */
    double pass_ms;   /* the loop time of the reconciler pass so far, callbacks included */
    /* Jobs credited with an online runner whose write may not be committed yet. */
    int64_t supplied_recent[64];
    size_t supplied_next;
    char prefix[64]; /* hatchery-<controller>- */
    uv_timer_t tick;
    uv_timer_t reconcile;
    bool *drained;               /* per config host */
    char (*why)[512];            /* per pool: why queued jobs wait, or "" */
    int *failures;               /* per pool: runners that failed in a row */
    int64_t *retry_at_ms;        /* per pool: no new runner before this, after failures */
    bool recovered;              /* recover() ran: earlier records are adopted or failed */
    int lists_pending;           /* GitHub lists of reconciler passes not answered yet */
    int late_checks_pending;     /* late queued jobs asked about, not settled yet */
    struct org_repos *org_repos; /* per scope (used by org scopes) */
    struct orphan *orphans;
    size_t n_orphans;
    int64_t started_ms;
    struct scheduler_stats stats;
};

/* The running config, GitHub client and provider, read through on each use: a reload
 * replaces the config, and a stop clears the clients. */
static const struct config *cfg(const struct scheduler *s)
{
    return *s->deps.config;
}

static struct github_client *gh(const struct scheduler *s)
{
    return *s->deps.github;
}

static struct provider *prov(const struct scheduler *s)
{
    return *s->deps.provider;
}

/* Pools and hosts are known by name: a reload may move, add or remove them. The index in
 * `c`, or -1. */
static int pool_index(const struct config *c, const char *name)
{
    for (size_t i = 0; name && i < c->n_pools; i++)
        if (strcmp(c->pools[i].name, name) == 0)
            return (int)i;
    return -1;
}

static int host_index(const struct config *c, const char *name)
{
    for (size_t i = 0; name && i < c->n_hosts; i++)
        if (strcmp(c->hosts[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* The pool's histograms, made on its first observation. */
static struct pool_histograms *histograms_of(struct scheduler *s, const char *pool)
{
    struct scheduler_stats *st = &s->stats;
    for (size_t i = 0; i < st->n_histograms; i++)
        if (strcmp(st->histograms[i].pool, pool) == 0)
            return &st->histograms[i];
    if (st->n_histograms == CONFIG_MAX_POOLS)
        return NULL;
    if (!st->histograms && !(st->histograms = calloc(CONFIG_MAX_POOLS, sizeof(*st->histograms))))
        return NULL;
    struct pool_histograms *h = &st->histograms[st->n_histograms++];
    snprintf(h->pool, sizeof(h->pool), "%s", pool);
    return h;
}

static void observe(struct scheduler *s, const char *pool, enum pool_histogram_kind kind,
                    double seconds)
{
    struct pool_histograms *ph = histograms_of(s, pool);
    if (!ph)
        return;
    struct seconds_histogram *h = &ph->of[kind];
    int n;
    const double *bounds = pool_histogram_bounds(kind, &n);
    for (int i = 0; i < n; i++)
        if (seconds <= bounds[i]) {
            h->buckets[i]++;
            break;
        }
    h->count++;
    h->sum += seconds;
}

/* Runners by name, which is the prefix and the id: the reconciler looks up every domain
 * and GitHub runner, so this must not walk a list of thousands. */
static struct runner *runner_find(struct scheduler *s, const char *name)
{
    size_t n = strlen(s->prefix);
    if (strncmp(name, s->prefix, n) != 0 || name[n] < '1' || name[n] > '9')
        return NULL;
    char *end = NULL;
    errno = 0;
    long long id = strtoll(name + n, &end, 10);
    if (errno || *end)
        return NULL;
    for (struct runner *r = s->by_id[(uint64_t)id & (RUNNER_BUCKETS - 1)]; r; r = r->next_in_bucket)
        if (r->id == id)
            return r;
    return NULL;
}

static void runner_index(struct runner *r)
{
    struct runner **bucket = &r->s->by_id[(uint64_t)r->id & (RUNNER_BUCKETS - 1)];
    r->next_in_bucket = *bucket;
    *bucket = r;
}

static void runner_unindex(struct runner *r)
{
    for (struct runner **pp = &r->s->by_id[(uint64_t)r->id & (RUNNER_BUCKETS - 1)]; *pp;
         pp = &(*pp)->next_in_bucket)
        if (*pp == r) {
            *pp = r->next_in_bucket;
            return;
        }
}

/* Time a reconciler callback spends on the loop counts to its pass. */
static void pass_add(struct scheduler *s, uint64_t t0)
{
    s->pass_ms += (double)(uv_hrtime() - t0) / 1e6;
    s->stats.reconcile_last_ms = s->pass_ms;
}

/* ---- the store record ------------------------------------------------------------------ */

static void record_then(struct runner *r, store_write_cb cb);

static void record(struct runner *r)
{
    record_then(r, NULL);
}

/* Writes the runner's record; `cb` (with the runner) once it is committed. */
static void record_then(struct runner *r, store_write_cb cb)
{
    const struct store_runner_update u = {.id = r->id,
                                          .state = runner_state_names[r->state],
                                          .host = r->host,
                                          .github_runner_id = r->github_runner_id,
                                          .job_id = r->job_id,
                                          .exit_code = r->exit_code,
                                          .reason = r->reason,
                                          .online_ms = r->online_ms,
                                          .busy_ms = r->busy_ms,
                                          .finished_ms = r->finished_ms,
                                          .updated_ms = wall_clock_ms()};
    int e = store_runner_update(r->s->deps.store, &u, cb, cb ? r : NULL);
    if (e < 0 && cb)
        cb(r, e); /* not taken: the caller still hears of it */
}

static void on_runner_timer(uv_timer_t *t);

/* Starts the state's timeout (runner_lifecycle.h), counted from `since_ms`: now, or for
 * an adopted runner when it entered its state. */
static void arm_timeout(struct runner *r, int64_t since_ms)
{
    const struct lifecycle_limits limits = {.boot_timeout_s = r->pool->boot_timeout_s,
                                            .idle_max_age_s = r->pool->idle_max_age_s,
                                            .job_timeout_s = r->pool->job_timeout_s};
    int64_t ms = runner_lifecycle_timeout_ms(r->state, &limits);
    if (ms <= 0) {
        uv_timer_stop(&r->timer);
        return;
    }
    int64_t left = ms - (wall_clock_ms() - since_ms);
    uv_timer_start(&r->timer, on_runner_timer, left > 0 ? (uint64_t)left : 0, 0);
}

/* Moves the runner by `ev` as the lifecycle table says, records it and starts the new
 * state's timeout. A move the table does not hold is refused and logged. */
static bool runner_move(struct runner *r, enum runner_event ev)
{
    int to = runner_lifecycle_next(r->state, ev);
    if (to < 0) {
        log_warn("runner.transition_refused", "runner=%s pool=%s state=%s cause=%s", r->name,
                 r->pool->name, runner_state_names[r->state], runner_event_names[ev]);
        r->s->stats.transitions_refused++;
        return false;
    }
    if ((enum runner_state)to == r->state)
        return true;
    log_info("runner.state", "runner=%s pool=%s host=%s from=%s to=%s cause=%s", r->name,
             r->pool->name, r->host, runner_state_names[r->state], runner_state_names[to],
             runner_event_names[ev]);
    r->state = (enum runner_state)to;
    record(r);
    arm_timeout(r, wall_clock_ms());
    return true;
}

/* The runner's pool's slot in the running config (its per-pool counters), or -1 when a
 * reload removed the pool. Runners keep the pool settings they were made with. */
static int pool_slot(const struct scheduler *s, const struct config_pool *pool)
{
    return pool_index(cfg(s), pool->name);
}

/* A pool whose runners keep failing (a broken image, a bad host) backs off exponentially,
 * up to 5 minutes, instead of boot-looping. */
static void pool_result(struct runner *r, bool ok)
{
    struct scheduler *s = r->s;
    int p = pool_slot(s, r->pool);
    if (p < 0)
        return;
    if (ok) {
        s->failures[p] = 0;
        s->retry_at_ms[p] = 0;
        return;
    }
    int64_t delay = 1000;
    for (int i = 0; i < s->failures[p] && delay < 300000; i++)
        delay *= 2;
    s->failures[p]++;
    s->retry_at_ms[p] = wall_clock_ms() + (delay < 300000 ? delay : 300000);
}

/* ---- the end of a runner ---------------------------------------------------------------- */

static void on_runner_timer_closed(uv_handle_t *h)
{
    struct runner *r = h->data;
    secret_free(r->jit);
    free(r);
}

static void runner_forget(struct runner *r)
{
    struct scheduler *s = r->s;
    if (r->holds > 0) {
        r->forget_pending = true; /* the last callback that holds it frees it */
        return;
    }
    if (s->closing) { /* already off the list; the loop runs on only to close */
        uv_close((uv_handle_t *)&r->timer, on_runner_timer_closed);
        return;
    }
    for (struct runner **pp = &s->runners; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    runner_unindex(r);
    uv_close((uv_handle_t *)&r->timer, on_runner_timer_closed);
    scheduler_kick(s);
}

/* A callback that held the runner has come: true when the runner is still wanted, false
 * when it was freed. */
static bool hold_release(struct runner *r)
{
    r->holds--;
    if (r->forget_pending && r->holds == 0) {
        r->forget_pending = false;
        runner_forget(r);
        return false;
    }
    return !r->forget_pending;
}

static void runner_deleted(struct runner *r)
{
    r->finished_ms = r->finished_ms ? r->finished_ms : wall_clock_ms();
    if (runner_move(r, RUNNER_EV_GITHUB_DELETED))
        r->s->stats.deleted++;
    runner_forget(r);
}

static void on_github_deleted(void *data, int err, const char *message)
{
    struct runner *r = data;
    if (!hold_release(r))
        return;
    if (err < 0)
        log_warn("runner.github_delete_failed", "runner=%s error=\"%s\"", r->name,
                 message ? message : strerror(-err));
    if (r->state != RUNNER_DELETED)
        runner_deleted(r);
}

/* The guest is gone: remove the GitHub runner if it may still exist (never used, or its
 * guest failed), then the record is final. */
static void runner_after_guest(struct runner *r)
{
    if (!runner_move(r, RUNNER_EV_GUEST_GONE))
        return;
    if (r->state == RUNNER_FAILED)
        record(r);
    if (gh(r->s) && r->github_runner_id > 0) {
        r->holds++;
        if (github_runner_delete(gh(r->s), r->scope, r->github_runner_id, on_github_deleted, r) ==
            0)
            return;
        r->holds--;
    }
    runner_deleted(r);
}

/* The runner's guest is torn down (its gone event then finishes the runner), or, when it
 * has none, the runner finishes now. */
static void guest_goes(struct runner *r, const char *reason)
{
    if (r->guest)
        provider_guest_teardown(prov(r->s), r->guest, reason);
    else
        runner_after_guest(r);
}

static void runner_end(struct runner *r, enum runner_event ev, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Fails the runner (ev is fail or timeout) with a reason, and tears its guest down. A
 * runner already failing or deleted is left alone. A busy runner's job is lost: GitHub
 * fails a job whose runner vanishes. */
static void runner_end(struct runner *r, enum runner_event ev, const char *fmt, ...)
{
    if (runner_lifecycle_next(r->state, ev) != RUNNER_FAILED)
        return;
    bool lost = r->state == RUNNER_BUSY;
    static const char lost_prefix[] = "job lost: ";
    size_t at = lost ? sizeof(lost_prefix) - 1 : 0;
    memcpy(r->reason, lost_prefix, at);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason + at, sizeof(r->reason) - at, fmt, ap);
    va_end(ap);
    log_warn("runner.failed", "runner=%s pool=%s host=%s state=%s job_lost=%d reason=\"%s\"",
             r->name, r->pool->name, r->host, runner_state_names[r->state], lost, r->reason);
    r->s->stats.failed++;
    if (lost)
        r->s->stats.jobs_lost++;
    if (r->adopting)
        r->s->stats.adopt_failed++;
    r->adopting = false;
    /* Only a runner that never started tells of the pool's image or hosts: what a job
     * does to its own guest must not stop the pool's scaling for everyone. */
    if (!r->online_ms)
        pool_result(r, false);
    r->finished_ms = wall_clock_ms();
    runner_move(r, ev);
    guest_goes(r, r->reason);
}

#define runner_fail(r, ...) runner_end((r), RUNNER_EV_FAIL, __VA_ARGS__)

static void runner_retire(struct runner *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A runner no longer wanted, which has no job: it goes the way a finished one does. */
static void runner_retire(struct runner *r, const char *fmt, ...)
{
    if (runner_lifecycle_next(r->state, RUNNER_EV_RETIRE) < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof(r->reason), fmt, ap);
    va_end(ap);
    r->finished_ms = wall_clock_ms();
    runner_move(r, RUNNER_EV_RETIRE);
    guest_goes(r, r->reason);
}

/* Past the deadline of deleting or failed: the guest or GitHub never answered. The
 * record is final; the reconciler removes what is left of the domain or the GitHub
 * runner. */
static void runner_give_up(struct runner *r)
{
    log_warn("runner.delete_deadline", "runner=%s state=%s guest=%s github_requests=%d", r->name,
             runner_state_names[r->state], r->guest ? "kept" : "gone", r->holds);
    if (r->guest) {
        provider_guest_disown(prov(r->s), r->guest);
        r->guest = NULL;
    }
    if (!r->reason[0])
        snprintf(r->reason, sizeof(r->reason), "delete deadline passed (%d s)", LIFECYCLE_DELETE_S);
    r->finished_ms = r->finished_ms ? r->finished_ms : wall_clock_ms();
    runner_move(r, RUNNER_EV_TIMEOUT);
    r->s->stats.deleted++;
    runner_forget(r);
}

static void on_runner_timer(uv_timer_t *t)
{
    struct runner *r = t->data;
    const struct config_pool *p = r->pool;
    switch (r->state) {
    case RUNNER_PENDING:
        runner_end(r, RUNNER_EV_TIMEOUT, "the store did not record the runner within %d s",
                   LIFECYCLE_STORE_S);
        break;
    case RUNNER_CREATING:
        runner_end(r, RUNNER_EV_TIMEOUT, "no guest and JIT config within %lld s",
                   (long long)p->boot_timeout_s);
        break;
    case RUNNER_BOOTING:
        runner_end(r, RUNNER_EV_TIMEOUT, "no hello from the agent within %lld s",
                   (long long)p->boot_timeout_s);
        break;
    case RUNNER_CONFIGURED:
        runner_end(r, RUNNER_EV_TIMEOUT,
                   "the runner did not report started within %lld s of its config",
                   (long long)p->boot_timeout_s);
        break;
    case RUNNER_IDLE:
        runner_end(r, RUNNER_EV_TIMEOUT, "idle longer than idle_max_age_s (%lld s)",
                   (long long)p->idle_max_age_s);
        break;
    case RUNNER_BUSY:
        runner_end(r, RUNNER_EV_TIMEOUT,
                   "job ran past job_timeout_s (%lld s) and the agent did not stop it",
                   (long long)p->job_timeout_s);
        break;
    case RUNNER_FINISHING:
        runner_move(r, RUNNER_EV_TIMEOUT);
        guest_goes(r, "job completed");
        break;
    case RUNNER_DELETING:
    case RUNNER_FAILED:
        runner_give_up(r);
        break;
    case RUNNER_DELETED:
    case RUNNER_STATE_MAX:
        break;
    }
}

/* ---- guest events ------------------------------------------------------------------------ */

static void maybe_configure(struct runner *r)
{
    if (!r->hello || !r->jit || runner_lifecycle_next(r->state, RUNNER_EV_CONFIG_SENT) < 0)
        return;
    const struct config_pool *p = r->pool;
    const char *const *cmd =
        p->n_runner_command ? (const char *const *)p->runner_command : default_command;
    size_t n = p->n_runner_command ? p->n_runner_command : DEFAULT_COMMAND_ARGS;
    int e = provider_guest_send_config(prov(r->s), r->guest, r->jit, p->job_timeout_s, cmd, n);
    secret_free(r->jit); /* the JIT config travels once */
    r->jit = NULL;
    if (e < 0) {
        runner_fail(r, "cannot send the config to the agent: %s", strerror(-e));
        return;
    }
    r->heartbeat_ms = wall_clock_ms();
    runner_move(r, RUNNER_EV_CONFIG_SENT);
}

static void ev_booting(void *data, struct guest *g)
{
    (void)g;
    struct runner *r = data;
    runner_move(r, RUNNER_EV_DOMAIN_STARTED);
}

static void ev_heartbeat(void *data, struct guest *g)
{
    (void)g;
    struct runner *r = data;
    r->heartbeat_ms = wall_clock_ms();
}

static void ev_hello(void *data, struct guest *g, const struct agent_hello *hello)
{
    (void)g;
    (void)hello;
    struct runner *r = data;
    r->hello = true;
    observe(r->s, r->pool->name, HISTOGRAM_BOOT,
            (double)(wall_clock_ms() - r->created_ms) / 1000.0);
    maybe_configure(r);
}

static bool supplied_recently(const struct scheduler *s, int64_t job_id)
{
    for (size_t i = 0; i < sizeof(s->supplied_recent) / sizeof(s->supplied_recent[0]); i++)
        if (s->supplied_recent[i] == job_id)
            return true;
    return false;
}

/* Runners serve demand, not a job each: a runner that comes online is counted against its
 * pool's oldest queued job that no runner came online for yet, and the wait from that
 * job's `queued` is observed. A min_idle runner with no job waiting counts for none. */
static void credit_oldest_queued_job(struct runner *r)
{
    struct scheduler *s = r->s;
    json_t *rows = store_jobs_unsupplied(s->deps.store, r->pool->name, 65);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        int64_t id = json_integer_value(json_object_get(row, "id"));
        json_t *queued_at = json_object_get(row, "queued_at");
        if (supplied_recently(s, id))
            continue;
        s->supplied_recent[s->supplied_next++ % 64] = id;
        if (json_is_integer(queued_at))
            observe(s, r->pool->name, HISTOGRAM_SUPPLIED,
                    (double)(r->online_ms - json_integer_value(queued_at)) / 1000.0);
        store_job_supplied(s->deps.store, id, r->online_ms);
        break;
    }
    json_decref(rows);
}

static void ev_started(void *data, struct guest *g, int64_t pid)
{
    (void)g;
    (void)pid;
    struct runner *r = data;
    r->heartbeat_ms = wall_clock_ms();
    if (r->state == RUNNER_CONFIGURED) {
        int slot = pool_slot(r->s, r->pool);
        r->pool_failures_at_start = slot >= 0 ? r->s->failures[slot] : 0;
        pool_result(r, true);
        r->online_ms = wall_clock_ms();
        observe(r->s, r->pool->name, HISTOGRAM_ONLINE,
                (double)(r->online_ms - r->created_ms) / 1000.0);
        credit_oldest_queued_job(r);
    } else if (r->state == RUNNER_BUSY && !r->online_ms) {
        r->online_ms = wall_clock_ms(); /* GitHub's in_progress came first */
    }
    runner_move(r, RUNNER_EV_RUNNER_STARTED);
}

static void on_exit_recorded(void *data, int result)
{
    struct runner *r = data;
    if (!hold_release(r))
        return;
    if (result < 0)
        log_warn("runner.exit_unrecorded", "runner=%s error=\"%s\"", r->name, strerror(-result));
    if (r->guest) {
        provider_guest_ack_exit(prov(r->s), r->guest);
        /* The guest powers itself off; tear down now either way. */
        provider_guest_teardown(prov(r->s), r->guest, "runner exited");
    }
}

static void ev_exited(void *data, struct guest *g, const struct agent_exit *exit)
{
    struct runner *r = data;
    r->exit_code = exit->code;
    r->finished_ms = wall_clock_ms();
    if (exit->timed_out)
        snprintf(r->reason, sizeof(r->reason), "job timed out after %lld s",
                 (long long)r->pool->job_timeout_s);
    else if (exit->signal)
        snprintf(r->reason, sizeof(r->reason), "runner killed by signal %d", exit->signal);
    else if (exit->jit_on_argv)
        snprintf(r->reason, sizeof(r->reason), "the JIT config was on a command line in the guest");
    else if (exit->code != 0)
        snprintf(r->reason, sizeof(r->reason), "runner exited %d: %s", exit->code,
                 exit->meaning[0] ? exit->meaning : "no meaning given");
    /* A runner that could not even be started (126: not its user, 127: not there) is an
     * image fault, not a job's: it counts toward the pool's back-off as a failed boot does,
     * from where the count stood before this runner started, so it grows. Not once a job
     * runs on it: a job with root in its guest can send any exit, and must not be able to
     * back its pool off for everyone. */
    if ((exit->code == 126 || exit->code == 127) && r->state != RUNNER_BUSY && r->job_id == 0) {
        int slot = pool_slot(r->s, r->pool);
        if (slot >= 0)
            r->s->failures[slot] = r->pool_failures_at_start;
        pool_result(r, false);
    }
    /* The exit is on disk before the agent hears that we have it (and may power off)
     * and before the guest goes: a restart in between finds the runner finishing, with
     * its exit, not busy with a guest gone. */
    if (!runner_move(r, RUNNER_EV_RUNNER_EXITED))
        return;
    r->holds++;
    record_then(r, on_exit_recorded);
}

static void ev_failed(void *data, struct guest *g, const char *reason)
{
    (void)g;
    struct runner *r = data;
    if (r->state == RUNNER_FINISHING)
        return; /* the guest went away after its runner exited: expected */
    if (r->adopting)
        runner_fail(r, "not adopted after a restart: %s", reason);
    else
        runner_fail(r, "%s", reason);
}

/* An adopted runner's agent answered resume: the runner goes on where it was. */
static void ev_resumed(void *data, struct guest *g, const struct agent_resumed *resumed)
{
    struct runner *r = data;
    struct scheduler *s = r->s;
    double seconds = (double)(wall_clock_ms() - r->adopt_started_ms) / 1000.0;
    r->adopting = false;
    r->heartbeat_ms = wall_clock_ms();
    s->stats.adopted++;
    if (seconds > s->stats.adopt_seconds_max)
        s->stats.adopt_seconds_max = seconds;
    log_info("runner.adopted", "runner=%s pool=%s host=%s state=%s agent_pid=%lld seconds=%.3f",
             r->name, r->pool->name, r->host, runner_state_names[r->state], (long long)resumed->pid,
             seconds);
    runner_move(r, RUNNER_EV_ADOPTED);
    if (resumed->state == AGENT_RESUMED_WAITING)
        runner_fail(r, "adopted, but its agent never got its config");
    else if (resumed->state == AGENT_RESUMED_RUNNING && r->state == RUNNER_CONFIGURED)
        ev_started(r, g, resumed->pid);
    /* AGENT_RESUMED_EXITED: the kept exit follows, and ends the runner as usual. */
}

static void ev_gone(void *data, struct guest *g)
{
    (void)g;
    struct runner *r = data;
    r->guest = NULL;
    if (r->state != RUNNER_FINISHING && r->state != RUNNER_FAILED)
        runner_fail(r, "the guest went away"); /* and, having no guest, ends here */
    else
        runner_after_guest(r);
}

static const struct guest_events guest_events = {
    .on_hello = ev_hello,
    .on_started = ev_started,
    .on_exited = ev_exited,
    .on_failed = ev_failed,
    .on_gone = ev_gone,
    .on_booting = ev_booting,
    .on_heartbeat = ev_heartbeat,
    .on_resumed = ev_resumed,
};

/* ---- creation ------------------------------------------------------------------------------ */

static void on_github_deleted_quiet(void *data, int err, const char *message)
{
    (void)data;
    (void)err;
    (void)message;
}

static void on_jit(void *data, int err, const char *message, int64_t runner_id, struct secret *jit)
{
    struct runner *r = data;
    struct github_client *github = gh(r->s);
    const struct github_scope *scope = r->scope;
    bool wanted = hold_release(r); /* false: r is freed */
    if (!wanted || r->state >= RUNNER_DELETING) {
        secret_free(jit);
        /* Registered after all: delete it, or it lingers. */
        if (err == 0 && github)
            github_runner_delete(github, scope, runner_id, on_github_deleted_quiet, NULL);
        return;
    }
    if (err < 0) {
        runner_fail(r, "GitHub JIT config: %s", message ? message : strerror(-err));
        return;
    }
    r->github_runner_id = runner_id;
    r->jit = jit;
    record(r);
    maybe_configure(r);
}

static void runner_start(struct runner *r)
{
    runner_move(r, RUNNER_EV_RECORDED);
    const struct config_pool *p = r->pool;
    const char *labels[CONFIG_MAX_POOL_LABELS + 1];
    size_t n = 0;
    labels[n++] = "self-hosted";
    for (size_t i = 0; i < p->n_labels && n < CONFIG_MAX_POOL_LABELS + 1; i++)
        labels[n++] = p->labels[i];
    r->holds++;
    int e = github_jitconfig_generate(gh(r->s), r->scope, r->name, labels, n, "_work", on_jit, r);
    if (e < 0) {
        r->holds--;
        runner_fail(r, "cannot ask GitHub for a JIT config: %s", strerror(-e));
        return;
    }
    /* A request that failed at once has already called back and failed the runner (whose
     * memory lasts until its timer's close callback): create no guest for it. */
    if (r->state != RUNNER_CREATING)
        return;
    struct guest_spec spec = {.name = r->name, .runner_id = r->id, .pool = p};
    e = provider_guest_create(prov(r->s), r->host, &spec, &guest_events, r, &r->guest);
    if (e < 0) {
        r->guest = NULL;
        runner_fail(r, "cannot create the guest on %s: %s", r->host,
                    e == -ENOSPC   ? "no capacity"
                    : e == -ENODEV ? "host down"
                                   : strerror(-e));
    }
}

static void on_runner_inserted(void *data, int result)
{
    struct runner *r = data;
    if (result < 0) {
        runner_fail(r, "cannot record the runner: %s", strerror(-result));
        return;
    }
    runner_start(r);
}

static const struct github_scope *scope_for(const struct scheduler *s, const struct config_pool *p)
{
    for (size_t i = 0; p->github_scope && i < s->deps.n_scopes; i++) {
        const struct github_scope *sc = &s->deps.scopes[i];
        if ((sc->repo && strcmp(sc->repo, p->github_scope) == 0) ||
            (sc->org && strcmp(sc->org, p->github_scope) == 0))
            return sc;
    }
    /* Only the one scope there is: the config refuses a pool that names none of several. */
    return !p->github_scope && s->deps.n_scopes == 1 ? &s->deps.scopes[0] : NULL;
}

static void runner_create(struct scheduler *s, const struct config_pool *pool, const char *host)
{
    struct runner *r = calloc(1, sizeof(*r));
    if (!r)
        return;
    r->s = s;
    r->id = s->next_id++;
    snprintf(r->name, sizeof(r->name), "%s%lld", s->prefix, (long long)r->id);
    r->pool = pool;
    r->scope = scope_for(s, pool);
    snprintf(r->host, sizeof(r->host), "%s", host);
    r->state = RUNNER_PENDING;
    r->exit_code = -1;
    r->created_ms = wall_clock_ms();
    uv_timer_init(s->deps.loop, &r->timer);
    r->timer.data = r;
    r->next = s->runners;
    s->runners = r;
    runner_index(r);
    arm_timeout(r, r->created_ms);
    s->stats.created++;
    log_info("runner.created", "runner=%s pool=%s host=%s", r->name, pool->name, host);
    const struct store_runner_new row = {.id = r->id,
                                         .name = r->name,
                                         .pool = pool->name,
                                         .host = host,
                                         .state = runner_state_names[RUNNER_PENDING],
                                         .vcpus = pool->vcpus,
                                         .memory_mib = pool->memory_mib,
                                         .created_ms = r->created_ms};
    /* Written before anything is done: a crash from here on leaves a record to repair. */
    if (store_runner_insert(s->deps.store, &row, on_runner_inserted, r) < 0)
        runner_fail(r, "the store is busy");
}

/* ---- demand and placement ------------------------------------------------------------------- */

/* One tick's view of a host, taken once per tick so that placing N runners over H hosts
 * costs N*H, not N*H*(runners): what the provider says the host runs, and what the runners
 * recorded for it but not yet handed to the provider add (placements of this tick
 * included). */
struct host_view {
    bool up;
    struct host_status st;
    struct host_usage pending;
};

static struct host_view *host_views(struct scheduler *s)
{
    const struct config *c = cfg(s);
    struct host_view *v = calloc(c->n_hosts ? c->n_hosts : 1, sizeof(*v));
    if (!v)
        return NULL;
    for (size_t i = 0; i < c->n_hosts; i++)
        v[i].up = provider_host_status(prov(s), c->hosts[i].name, &v[i].st) == 0 && v[i].st.up;
    for (struct runner *r = s->runners; r; r = r->next) {
        int i = r->state == RUNNER_PENDING ? host_index(c, r->host) : -1;
        if (i >= 0) {
            v[i].pending.guests++;
            v[i].pending.vcpus += r->pool->vcpus;
            v[i].pending.memory_mib += r->pool->memory_mib;
        }
    }
    return v;
}

/* A host for one more guest of `pool` (its index in the config), or -1 with the reason in
 * `why`. */
static int place(struct scheduler *s, const struct host_view *views, const struct config_pool *pool,
                 char *why, size_t why_size)
{
    const struct config *c = cfg(s);
    int best = -1;
    int64_t best_guests = 0;
    size_t down = 0, drained = 0, full = 0, candidates = 0, unsafe = 0, no_image = 0;
    char unsafe_why[512] = "", no_image_why[512] = "";
    for (size_t i = 0; i < c->n_hosts; i++) {
        const struct config_host *h = &c->hosts[i];
        if (!config_pool_uses_host(pool, h->name))
            continue;
        candidates++;
        const struct host_status *st = &views[i].st;
        if (s->drained[i]) {
            drained++;
            continue;
        }
        if (!views[i].up) {
            down++;
            continue;
        }
        /* No networked guest where what keeps it off its host is not in place. */
        char reason[256];
        if (guest_isolation_check(h, pool, host_status_filter_missing(st), reason,
                                  sizeof(reason)) == GUEST_ISOLATION_MISSING) {
            if (!unsafe++)
                snprintf(unsafe_why, sizeof(unsafe_why), "host %s unsafe: %s", h->name, reason);
            continue;
        }
        /* A remote host's image, found through libvirt (host_image.h); a local host's
         * is read from this machine's files, for the whole pool, in tick(). */
        struct image_status image;
        if (pool->backend == BACKEND_VM &&
            provider_host_image(prov(s), h->name, pool, &image) == 0 &&
            (image.state == IMAGE_CHECKING || image.state == IMAGE_MISSING)) {
            if (!no_image++)
                snprintf(no_image_why, sizeof(no_image_why), "host %s: %s", h->name, image.reason);
            continue;
        }
        /* Runners recorded but not yet handed to the provider count too. */
        const struct host_usage *pend = &views[i].pending;
        int64_t guests = st->used.guests + pend->guests;
        if (guests + 1 > h->max_guests || st->used.vcpus + pend->vcpus + pool->vcpus > h->vcpus ||
            st->used.memory_mib + pend->memory_mib + pool->memory_mib > h->memory_mib) {
            full++;
            continue;
        }
        bool better = best < 0 || (c->placement == PLACEMENT_PACK ? guests > best_guests
                                                                  : guests < best_guests);
        if (better) {
            best = (int)i;
            best_guests = guests;
        }
    }
    if (best >= 0)
        return best;
    if (candidates == 0)
        snprintf(why, why_size, "no host configured for the pool");
    else if (full)
        snprintf(why, why_size, "no host capacity");
    else if (unsafe)
        snprintf(why, why_size, "%s", unsafe_why);
    else if (no_image)
        snprintf(why, why_size, "%s", no_image_why);
    else if (down && !drained)
        snprintf(why, why_size, "host down");
    else
        snprintf(why, why_size, "hosts drained or down");
    return -1;
}

static void recover(struct scheduler *s);

/* Every host's first connection attempt is over (up or down). */
static bool hosts_settled(struct scheduler *s)
{
    for (size_t i = 0; i < cfg(s)->n_hosts; i++) {
        struct host_status st;
        if (provider_host_status(prov(s), cfg(s)->hosts[i].name, &st) == 0 && st.connecting)
            return false;
    }
    return true;
}

/* A guest whose agent went silent in idle or busy is hung: it is replaced. */
static void check_heartbeats(struct scheduler *s)
{
    int64_t limit_ms = cfg(s)->heartbeat_timeout_s * 1000, now = wall_clock_ms();
    for (struct runner *r = s->runners, *next; r; r = next) {
        next = r->next;
        if (runner_state_heartbeats(r->state) && !r->adopting && r->guest &&
            now - r->heartbeat_ms > limit_ms)
            runner_fail(r, "hung: no heartbeat from the agent for %lld s",
                        (long long)((now - r->heartbeat_ms) / 1000));
    }
}

/* Idle runners beyond demand (a cancelled burst): the ones idle longer than the pool's
 * surplus_idle_s go, oldest first, up to `surplus` of them. */
static void retire_surplus(struct scheduler *s, const struct config_pool *pool, int64_t surplus)
{
    int64_t now = wall_clock_ms(), limit_ms = pool->surplus_idle_s * 1000;
    while (surplus-- > 0) {
        struct runner *oldest = NULL;
        for (struct runner *r = s->runners; r; r = r->next)
            if (r->state == RUNNER_IDLE && !r->adopting && strcmp(r->pool->name, pool->name) == 0 &&
                now - r->online_ms >= limit_ms && (!oldest || r->online_ms < oldest->online_ms))
                oldest = r;
        if (!oldest)
            return;
        log_info("runner.surplus", "runner=%s pool=%s idle_s=%lld", oldest->name, pool->name,
                 (long long)((now - oldest->online_ms) / 1000));
        s->stats.surplus_retired++;
        runner_retire(oldest, "surplus: idle beyond demand for %lld s",
                      (long long)((now - oldest->online_ms) / 1000));
    }
}

/* A reload removed their pool: runners without a job go now; busy ones finish theirs
 * and are not replaced. */
static void retire_removed(struct scheduler *s)
{
    for (struct runner *r = s->runners, *next; r; r = next) {
        next = r->next;
        if (!runner_state_unbusy(r->state) || r->adopting || pool_slot(s, r->pool) >= 0)
            continue;
        if (runner_lifecycle_next(r->state, RUNNER_EV_RETIRE) >= 0)
            runner_retire(r, "its pool %s was removed from the config", r->pool->name);
        else
            runner_fail(r, "its pool %s was removed from the config", r->pool->name);
    }
}

static void verify_late_jobs(struct scheduler *s);

/* Warm templates (start: template): one per runner a pool may run at once on each of its
 * hosts that is not drained. The provisioner builds what is missing, one at a time. */
static void keep_templates(struct scheduler *s)
{
    const struct config *c = cfg(s);
    for (size_t p = 0; p < c->n_pools; p++) {
        const struct config_pool *pool = &c->pools[p];
        if (pool->start != START_TEMPLATE || pool->backend != BACKEND_VM)
            continue;
        for (size_t i = 0; i < c->n_hosts; i++) {
            const struct config_host *h = &c->hosts[i];
            char why[256];
            /* A template boots the pool's guest, network and all. While the host is away,
             * its guest filter is not known: its templates are kept wanted meanwhile. */
            struct host_status st;
            bool up = provider_host_status(prov(s), h->name, &st) == 0 && st.up;
            if (!config_pool_uses_host(pool, h->name) || s->drained[i] ||
                guest_isolation_check(h, pool, up ? host_status_filter_missing(&st) : NULL, why,
                                      sizeof(why)) == GUEST_ISOLATION_MISSING)
                continue;
            int64_t n = pool->max_runners < h->max_guests ? pool->max_runners : h->max_guests;
            provider_templates_want(prov(s), h->name, pool, (int)n);
        }
    }
    for (size_t i = 0; i < c->n_hosts; i++)
        provider_templates_sweep(prov(s), c->hosts[i].name);
}

static void tick(struct scheduler *s)
{
    const struct config *c = cfg(s);
    check_heartbeats(s);
    retire_removed(s);
    if (!s->recovered && hosts_settled(s))
        recover(s); /* as soon as every host's first connection has been tried */
    if (!gh(s)) {
        for (size_t p = 0; p < c->n_pools; p++)
            snprintf(s->why[p], sizeof(s->why[p]), "GitHub is not configured");
        return;
    }
    if (!s->recovered) {
        /* An earlier hatcheryd's runners are not counted yet: wait for recover(). */
        for (size_t p = 0; p < c->n_pools; p++)
            snprintf(s->why[p], sizeof(s->why[p]), "recovering the runners of before the restart");
        return;
    }
    json_t *rows = store_jobs_queued_by_pool(s->deps.store);
    verify_late_jobs(s);
    struct github_stats gs;
    github_client_stats(gh(s), &gs);
    bool rate_limited = gs.ratelimit_remaining == 0 && gs.ratelimit_reset * 1000 > wall_clock_ms();
    struct host_view *views = host_views(s); /* NULL: out of memory, no placement this tick */
    for (size_t p = 0; p < c->n_pools; p++) {
        const struct config_pool *pool = &c->pools[p];
        int64_t queued = 0;
        size_t i;
        json_t *row;
        json_array_foreach(rows, i, row)
        {
            if (strcmp(json_string_value(json_object_get(row, "pool")), pool->name) == 0)
                queued = json_integer_value(json_object_get(row, "n"));
        }
        int64_t unbusy = 0, live = 0;
        for (struct runner *r = s->runners; r; r = r->next) {
            if (strcmp(r->pool->name, pool->name) != 0 || !runner_state_live(r->state))
                continue;
            live++;
            if (runner_state_unbusy(r->state))
                unbusy++;
        }
        int64_t want = queued + pool->min_idle - unbusy;
        int64_t room = pool->max_runners - live;
        if (want < 0)
            retire_surplus(s, pool, -want);
        s->why[p][0] = 0;
        /* Whether the image is on this machine: a host of this pool is. The pools of a
         * controller of remote hosts are not judged by another pool's local host; their
         * image is looked for on each host (place()). */
        bool local = config_pool_has_local_host(c, pool);
        bool local_missing = local && want > 0 && access(pool->image, R_OK) != 0;
        /* The image's manifest, read again whenever a runner is wanted: an image rebuilt
         * for another arch, or one without a manifest, gets no runner. */
        char image_error[sizeof(s->why[p])] = "";
        if (local && want > 0 && !local_missing && pool->backend == BACKEND_VM) {
            struct image_manifest m;
            image_manifest_load(pool->image, (enum pool_arch)pool->arch, &m, image_error,
                                sizeof(image_error));
        }
        while (want > 0) {
            if (room <= 0) {
                snprintf(s->why[p], sizeof(s->why[p]), "pool at max_runners (%lld)",
                         (long long)pool->max_runners);
                break;
            }
            if (s->retry_at_ms[p] > wall_clock_ms()) {
                snprintf(s->why[p], sizeof(s->why[p]),
                         "%d runner(s) failed in a row: retrying in %lld s", s->failures[p],
                         (long long)((s->retry_at_ms[p] - wall_clock_ms()) / 1000 + 1));
                break;
            }
            if (rate_limited) {
                snprintf(s->why[p], sizeof(s->why[p]), "GitHub rate limit");
                break;
            }
            if (local_missing) {
                snprintf(s->why[p], sizeof(s->why[p]), "image missing: %s", pool->image);
                break;
            }
            if (image_error[0]) {
                snprintf(s->why[p], sizeof(s->why[p]), "%s", image_error);
                break;
            }
            if (!views) {
                snprintf(s->why[p], sizeof(s->why[p]), "out of memory");
                break;
            }
            int h = place(s, views, pool, s->why[p], sizeof(s->why[p]));
            if (h < 0)
                break;
            views[h].pending.guests++;
            views[h].pending.vcpus += pool->vcpus;
            views[h].pending.memory_mib += pool->memory_mib;
            runner_create(s, pool, c->hosts[h].name);
            want--;
            room--;
        }
    }
    free(views);
    json_decref(rows);
    keep_templates(s);
}

static void on_tick(uv_timer_t *t)
{
    struct scheduler *s = t->data;
    tick(s);
    uv_timer_start(&s->tick, on_tick, TICK_MS, 0);
}

void scheduler_kick(struct scheduler *s)
{
    /* Coalesced: at most one recount per loop iteration. */
    uv_timer_start(&s->tick, on_tick, 0, 0);
}

void scheduler_job_event(struct scheduler *s, int64_t job_id, enum job_status status,
                         const char *runner_name)
{
    struct runner *r = runner_name ? runner_find(s, runner_name) : NULL;
    enum runner_event ev =
        status == JOB_IN_PROGRESS ? RUNNER_EV_JOB_IN_PROGRESS : RUNNER_EV_JOB_COMPLETED;
    if (r && (status == JOB_IN_PROGRESS || status == JOB_COMPLETED) &&
        runner_lifecycle_next(r->state, ev) < 0) {
        /* A late or repeated webhook (the runner ended already): nothing to do. */
        log_info("runner.job_event_ignored", "runner=%s state=%s cause=%s job=%lld", r->name,
                 runner_state_names[r->state], runner_event_names[ev], (long long)job_id);
        r = NULL;
    }
    if (r && status == JOB_IN_PROGRESS) {
        r->job_id = job_id;
        r->busy_ms = wall_clock_ms();
        int64_t queued_ms = store_job_queued_at(s->deps.store, job_id);
        if (queued_ms >= 0)
            observe(s, r->pool->name, HISTOGRAM_START, (double)(r->busy_ms - queued_ms) / 1000.0);
        runner_move(r, RUNNER_EV_JOB_IN_PROGRESS);
    } else if (r && status == JOB_COMPLETED) {
        r->job_id = r->job_id ? r->job_id : job_id;
        /* The runner exits by itself after its one job; finishing gives it a grace. */
        runner_move(r, RUNNER_EV_JOB_COMPLETED);
    }
    scheduler_kick(s);
}

/* ---- reconciliation ----------------------------------------------------------------------- */

static void on_orphan_removed(void *data, int err)
{
    struct scheduler *s = data;
    if (err == 0)
        s->stats.reconcile_domains_removed++;
}

static void on_tagged(void *data, const char *host, char **names, size_t n)
{
    struct scheduler *s = data;
    uint64_t t0 = uv_hrtime();
    for (size_t i = 0; i < n; i++) {
        struct runner *r = runner_find(s, names[i]);
        if (r && runner_state_live(r->state))
            continue;
        log_info("reconcile.orphan_domain", "host=%s domain=%s action=remove", host, names[i]);
        provider_remove(prov(s), host, names[i], on_orphan_removed, s);
    }
    pass_add(s, t0);
}

/* GitHub runners of ours with no live record, being deleted: each with its own back-off,
 * so that a GitHub that fails deletes is not asked again for each of them every pass. */
struct orphan {
    int64_t github_id;
    int attempts;
    int64_t next_ms;
    bool in_flight;
};

#define ORPHAN_BACKOFF_MAX_MS (10 * 60 * 1000)

static struct orphan *orphan_get(struct scheduler *s, int64_t github_id, bool add)
{
    for (size_t i = 0; i < s->n_orphans; i++)
        if (s->orphans[i].github_id == github_id)
            return &s->orphans[i];
    if (!add)
        return NULL;
    struct orphan *grown = realloc(s->orphans, (s->n_orphans + 1) * sizeof(*grown));
    if (!grown)
        return NULL;
    s->orphans = grown;
    s->orphans[s->n_orphans] = (struct orphan){.github_id = github_id};
    return &s->orphans[s->n_orphans++];
}

static void orphan_drop(struct scheduler *s, struct orphan *o)
{
    *o = s->orphans[--s->n_orphans];
}

struct orphan_delete {
    struct scheduler *s;
    int64_t github_id;
};

static void on_orphan_volumes(void *data, const char *host, char **names, size_t n)
{
    struct scheduler *s = data;
    uint64_t t0 = uv_hrtime();
    for (size_t i = 0; i < n; i++) {
        struct runner *r = runner_find(s, names[i]);
        if (r && (runner_state_live(r->state) || r->guest))
            continue; /* being created or torn down now */
        log_info("reconcile.orphan_volume", "host=%s volume=%s.qcow2 action=remove", host,
                 names[i]);
        s->stats.reconcile_volumes_removed++;
        provider_remove(prov(s), host, names[i], NULL, NULL);
    }
    pass_add(s, t0);
}

static void on_orphan_runner_deleted(void *data, int err, const char *message)
{
    struct orphan_delete *od = data;
    struct scheduler *s = od->s;
    struct orphan *o = orphan_get(s, od->github_id, false);
    free(od);
    if (err == 0) {
        s->stats.reconcile_github_deleted++;
        if (o)
            orphan_drop(s, o);
        return;
    }
    if (!o)
        return;
    o->in_flight = false;
    int64_t delay = 2000;
    for (int i = 0; i < o->attempts && delay < ORPHAN_BACKOFF_MAX_MS; i++)
        delay *= 2;
    o->attempts++;
    o->next_ms = wall_clock_ms() + (delay < ORPHAN_BACKOFF_MAX_MS ? delay : ORPHAN_BACKOFF_MAX_MS);
    log_warn("reconcile.orphan_delete_failed",
             "github_runner_id=%lld attempts=%d retry_in_s=%lld "
             "error=\"%s\"",
             (long long)o->github_id, o->attempts,
             (long long)((o->next_ms - wall_clock_ms()) / 1000),
             message ? message : strerror(-err));
}

struct scope_ctx {
    struct scheduler *s;
    const struct github_scope *scope;
    char *repo; /* queued jobs: the repository listed (owned) */
};

/* An org scope's repositories, listed through the installation and cached, so that lost
 * jobs are found across them a few repositories per pass. */
struct org_repos {
    char **names;
    size_t n;
    size_t cursor;
    int64_t listed_ms;
    bool listing;
};

#define ORG_REPOS_TTL_MS   (10 * 60 * 1000)
#define ORG_REPOS_PER_PASS 5

static void on_github_runners(void *data, int err, const char *message, json_t *runners)
{
    struct scope_ctx *ctx = data;
    struct scheduler *s = ctx->s;
    uint64_t t0 = uv_hrtime();
    s->lists_pending--;
    size_t i;
    json_t *gr;
    if (err < 0)
        log_warn("reconcile.github_list_failed", "error=\"%s\"", message ? message : "?");
    json_array_foreach(runners, i, gr)
    {
        const char *name = json_string_value(json_object_get(gr, "name"));
        if (!name || strncmp(name, s->prefix, strlen(s->prefix)) != 0)
            continue; /* not ours: never touched */
        struct runner *r = runner_find(s, name);
        if (r && runner_state_live(r->state) && r->state != RUNNER_FAILED)
            continue;
        if (json_is_true(json_object_get(gr, "busy")))
            continue;
        int64_t id = json_integer_value(json_object_get(gr, "id"));
        struct orphan *o = orphan_get(s, id, true);
        if (!o || o->in_flight || o->next_ms > wall_clock_ms())
            continue; /* its back-off after a failed delete */
        struct orphan_delete *od = calloc(1, sizeof(*od));
        if (!od)
            continue;
        od->s = s;
        od->github_id = id;
        log_info("reconcile.orphan_github_runner", "runner=%s attempt=%d action=delete", name,
                 o->attempts + 1);
        o->in_flight = true;
        if (github_runner_delete(gh(s), ctx->scope, id, on_orphan_runner_deleted, od) < 0) {
            o->in_flight = false;
            free(od);
        }
    }
    free(ctx);
    pass_add(s, t0);
}

/* ---- phantom queued jobs: their `completed` never came ---------------------------------- */

#define PHANTOM_AGE_MS   (10 * 60 * 1000) /* queued and unheard of for this long */
#define PHANTOM_PER_PASS 10               /* GitHub calls a pass may spend on them */

struct phantom_check {
    struct scheduler *s;
    int64_t job_id;
    bool late; /* a late or replayed queued delivery (verify_late_jobs), not a phantom */
};

/* A late job's check is settled once its answer is on disk: until then the store still
 * says unverified, and the next pass must not ask again. */
static void on_late_check_settled(void *data, int result)
{
    struct scheduler *s = data;
    (void)result;
    s->late_checks_pending--;
    scheduler_kick(s);
}

static void on_phantom_checked(void *data, const struct github_response *res)
{
    struct phantom_check *pc = data;
    struct scheduler *s = pc->s;
    int64_t id = pc->job_id;
    bool late = pc->late;
    free(pc);
    if (!late)
        s->lists_pending--;
    const char *status = json_string_value(json_object_get(res->body, "status"));
    const char *conclusion = json_string_value(json_object_get(res->body, "conclusion"));
    enum job_status st;
    if (res->status == 404) {
        st = JOB_COMPLETED; /* GitHub no longer knows it */
        conclusion = "gone";
    } else if (res->err < 0 || !status) {
        log_warn(late ? "webhook.late_job_check_failed" : "reconcile.phantom_check_failed",
                 "job=%lld error=\"%s\"", (long long)id,
                 res->message ? res->message : "no status in the answer");
        if (late)
            s->late_checks_pending--; /* asked again on a later pass */
        return;
    } else if (job_status_parse(status, &st) < 0) {
        st = JOB_COMPLETED; /* a state GitHub added that is not waiting for a runner */
    }
    int64_t now = wall_clock_ms();
    if (late && st <= JOB_QUEUED) {
        log_info("webhook.late_job_verified", "job=%lld github_status=%s", (long long)id,
                 job_status_names[st]);
        s->stats.late_jobs_verified++;
        if (store_job_verified(s->deps.store, id, on_late_check_settled, s) < 0)
            s->late_checks_pending--;
        return;
    }
    if (st <= JOB_QUEUED) {
        /* Really queued (a run in progress hides it from the queued list): asked again
         * after another PHANTOM_AGE_MS. */
        store_job_touch(s->deps.store, id, now);
        return;
    }
    log_info(late ? "webhook.late_job_retired" : "reconcile.phantom_job",
             "job=%lld github_status=%s action=retire", (long long)id, job_status_names[st]);
    if (late)
        s->stats.late_jobs_retired++;
    else
        s->stats.reconcile_phantoms_retired++;
    int r = store_job_retire(s->deps.store, id, st, conclusion, now,
                             late ? on_late_check_settled : NULL, late ? s : NULL);
    if (late && r < 0)
        s->late_checks_pending--;
    scheduler_kick(s);
}

/* Asks GitHub about each job of `rows` (its id, and its repository unless `repo` says
 * it), counting the questions in flight. Takes `rows`. */
static void ask_about_jobs(struct scheduler *s, json_t *rows, const char *repo, bool late)
{
    int *pending = late ? &s->late_checks_pending : &s->lists_pending;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        struct phantom_check *pc = calloc(1, sizeof(*pc));
        if (!pc)
            break;
        pc->s = s;
        pc->job_id = json_integer_value(json_object_get(row, "id"));
        pc->late = late;
        (*pending)++;
        const char *in = repo ? repo : json_string_value(json_object_get(row, "repository"));
        if (github_job_get(gh(s), in, pc->job_id, on_phantom_checked, pc) < 0) {
            (*pending)--;
            free(pc);
        }
    }
    json_decref(rows);
}

#define LATE_CHECKS_PER_PASS 10

/* Queued jobs from a delivery sent long after the job was made (WEBHOOK_FRESH_MS): an
 * operator's redelivery, or a captured delivery replayed. No runner is made for one until
 * GitHub says it is still queued; one GitHub says is not is retired, as a phantom is. */
static void verify_late_jobs(struct scheduler *s)
{
    if (!gh(s) || s->late_checks_pending > 0)
        return;
    ask_about_jobs(s, store_jobs_unverified(s->deps.store, LATE_CHECKS_PER_PASS), NULL, true);
}

/* Jobs the store has held as queued for PHANTOM_AGE_MS that GitHub's queued list for
 * `repo` does not show (`listed`, a JSON array of ids): each is asked about (a few per
 * pass), and retired when GitHub says it is no longer queued. Otherwise one lost
 * `completed` webhook keeps a runner reserved for ever. */
static void verify_phantoms(struct scheduler *s, const char *repo, const char *listed)
{
    int64_t cutoff = wall_clock_ms() - PHANTOM_AGE_MS;
    ask_about_jobs(
        s, store_jobs_queued_unlisted(s->deps.store, repo, cutoff, listed, PHANTOM_PER_PASS), repo,
        false);
}

static void on_queued_jobs(void *data, int err, const char *message, json_t *jobs)
{
    struct scope_ctx *ctx = data;
    struct scheduler *s = ctx->s;
    char *repo = ctx->repo;
    free(ctx);
    s->lists_pending--;
    if (err < 0) {
        log_warn("reconcile.queued_list_failed", "repository=%s error=\"%s\"", repo,
                 message ? message : "?");
        free(repo);
        return;
    }
    uint64_t t0 = uv_hrtime();
    /* One query for all of them: which ids has the store never seen? */
    json_t *ids = json_array();
    size_t i;
    json_t *job;
    json_array_foreach(jobs, i, job)
    {
        if (json_is_integer(json_object_get(job, "id")))
            json_array_append(ids, json_object_get(job, "id"));
    }
    char *ids_text = json_dumps(ids, JSON_COMPACT);
    json_decref(ids);
    json_t *unknown_rows = ids_text ? store_job_ids_unknown(s->deps.store, ids_text) : NULL;
    if (ids_text)
        verify_phantoms(s, repo, ids_text);
    free(ids_text);
    json_t *unknown = json_object();
    json_t *row;
    json_array_foreach(unknown_rows, i, row)
    {
        char key[32];
        snprintf(key, sizeof(key), "%lld",
                 (long long)json_integer_value(json_object_get(row, "id")));
        json_object_set_new(unknown, key, json_true());
    }
    json_decref(unknown_rows);
    json_array_foreach(jobs, i, job)
    {
        json_t *id = json_object_get(job, "id");
        json_t *labels = json_object_get(job, "labels");
        if (!json_is_integer(id) || !json_is_array(labels))
            continue;
        char key[32];
        snprintf(key, sizeof(key), "%lld", (long long)json_integer_value(id));
        if (!json_object_get(unknown, key))
            continue;
        const char *values[WEBHOOK_MAX_LABELS];
        size_t n = 0;
        for (size_t k = 0; k < json_array_size(labels) && n < WEBHOOK_MAX_LABELS; k++)
            if (json_is_string(json_array_get(labels, k)))
                values[n++] = json_string_value(json_array_get(labels, k));
        struct job_event *ev = calloc(1, sizeof(*ev));
        if (!ev)
            break;
        char delivery[64];
        snprintf(delivery, sizeof(delivery), "reconcile-%lld", (long long)json_integer_value(id));
        const struct config_pool *pool = job_pool_match(cfg(s), values, n);
        ev->delivery_id = strdup(delivery);
        ev->job_id = json_integer_value(id);
        ev->run_id = json_integer_value(json_object_get(job, "run_id"));
        ev->status = JOB_QUEUED;
        ev->repository = strdup(repo);
        ev->job_name = json_is_string(json_object_get(job, "name"))
                           ? strdup(json_string_value(json_object_get(job, "name")))
                           : NULL;
        ev->labels_json = json_dumps(labels, JSON_COMPACT);
        ev->pool = pool ? strdup(pool->name) : NULL;
        ev->received_at_ms = wall_clock_ms();
        if (ev->run_id <= 0)
            ev->run_id = 1;
        log_info("reconcile.lost_job", "job=%lld pool=%s action=store", (long long)ev->job_id,
                 pool ? pool->name : "(unmatched)");
        s->stats.reconcile_jobs_found++;
        store_job_event_submit(s->deps.store, ev, NULL, NULL);
    }
    json_decref(unknown);
    free(repo);
    scheduler_kick(s);
    pass_add(s, t0);
}

static void queued_jobs_start(struct scheduler *s, const struct github_scope *scope,
                              const char *repo)
{
    struct scope_ctx *ctx = calloc(1, sizeof(*ctx));
    char *copy = strdup(repo);
    if (!ctx || !copy) {
        free(ctx);
        free(copy);
        return;
    }
    ctx->s = s;
    ctx->scope = scope;
    ctx->repo = copy;
    s->lists_pending++;
    if (github_queued_jobs_list(gh(s), repo, on_queued_jobs, ctx) < 0) {
        s->lists_pending--;
        free(copy);
        free(ctx);
    }
}

static void on_org_repos(void *data, int err, const char *message, json_t *repos)
{
    struct scope_ctx *ctx = data;
    struct scheduler *s = ctx->s;
    size_t i = (size_t)(ctx->scope - s->deps.scopes);
    const char *org = ctx->scope->org;
    free(ctx);
    s->lists_pending--;
    struct org_repos *o = &s->org_repos[i];
    o->listing = false;
    if (err < 0) {
        log_warn("reconcile.org_repos_failed", "org=%s error=\"%s\"", org, message ? message : "?");
        return;
    }
    for (size_t k = 0; k < o->n; k++)
        free(o->names[k]);
    free(o->names);
    o->names = calloc(json_array_size(repos) + 1, sizeof(char *));
    o->n = 0;
    o->listed_ms = wall_clock_ms();
    size_t k;
    json_t *repo;
    size_t org_len = strlen(org);
    json_array_foreach(repos, k, repo)
    {
        const char *full = json_string_value(json_object_get(repo, "full_name"));
        /* The installation may reach other owners' repositories: only the org's. */
        if (o->names && full && strncasecmp(full, org, org_len) == 0 && full[org_len] == '/' &&
            strlen(full) <= WEBHOOK_MAX_NAME_BYTES)
            o->names[o->n++] = strdup(full);
    }
    log_info("reconcile.org_repos", "org=%s repositories=%zu", org, o->n);
}

/* Lost jobs of an org scope: its repositories (listed through the installation every
 * ORG_REPOS_TTL_MS), a few per pass in turn, fewer when the rate-limit budget is low. */
static void org_queued_jobs(struct scheduler *s, size_t i)
{
    const struct github_scope *scope = &s->deps.scopes[i];
    struct org_repos *o = &s->org_repos[i];
    if (!o->listing && (!o->listed_ms || wall_clock_ms() - o->listed_ms > ORG_REPOS_TTL_MS)) {
        struct scope_ctx *ctx = calloc(1, sizeof(*ctx));
        if (ctx) {
            ctx->s = s;
            ctx->scope = scope;
            o->listing = true;
            s->lists_pending++;
            if (github_installation_repos_list(gh(s), on_org_repos, ctx) < 0) {
                o->listing = false;
                s->lists_pending--;
                free(ctx);
            }
        }
    }
    struct github_stats gs;
    github_client_stats(gh(s), &gs);
    size_t per_pass = gs.ratelimit_remaining >= 0 && gs.ratelimit_remaining < 200 ? 0
                      : gs.ratelimit_remaining >= 0 && gs.ratelimit_remaining < 1000
                          ? 1
                          : ORG_REPOS_PER_PASS;
    for (size_t k = 0; k < per_pass && k < o->n; k++) {
        queued_jobs_start(s, scope, o->names[o->cursor % o->n]);
        o->cursor = (o->cursor + 1) % o->n;
    }
}

static int64_t row_ms(json_t *row, const char *key)
{
    json_t *v = json_object_get(row, key);
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

/* An earlier hatcheryd's runner whose guest may still run: back in memory in its
 * recorded state, its guest re-attached. Its state's timeout counts from when it was
 * entered, not from now. */
static void runner_adopt(struct scheduler *s, json_t *row, const struct config_pool *pool,
                         enum runner_state state)
{
    struct runner *r = calloc(1, sizeof(*r));
    if (!r)
        return;
    r->s = s;
    r->id = json_integer_value(json_object_get(row, "id"));
    snprintf(r->name, sizeof(r->name), "%s", json_string_value(json_object_get(row, "name")));
    snprintf(r->host, sizeof(r->host), "%s", json_string_value(json_object_get(row, "host")));
    r->pool = pool;
    r->scope = scope_for(s, pool);
    r->state = state;
    r->github_runner_id = row_ms(row, "github_runner_id");
    r->job_id = row_ms(row, "job_id");
    json_t *exit_code = json_object_get(row, "exit_code");
    r->exit_code = json_is_integer(exit_code) ? (int)json_integer_value(exit_code) : -1;
    snprintf(r->reason, sizeof(r->reason), "%s",
             json_is_string(json_object_get(row, "reason"))
                 ? json_string_value(json_object_get(row, "reason"))
                 : "");
    r->finished_ms = row_ms(row, "finished_at");
    r->created_ms = row_ms(row, "created_at");
    r->online_ms = row_ms(row, "online_at");
    r->busy_ms = row_ms(row, "busy_at");
    r->hello = true;
    r->adopting = true;
    r->adopt_started_ms = s->started_ms;
    r->heartbeat_ms = wall_clock_ms();
    uv_timer_init(s->deps.loop, &r->timer);
    r->timer.data = r;
    r->next = s->runners;
    s->runners = r;
    runner_index(r);
    log_info("runner.adopting", "runner=%s pool=%s host=%s state=%s", r->name, pool->name, r->host,
             runner_state_names[state]);
    int64_t since = state == RUNNER_BUSY ? r->busy_ms : state == RUNNER_IDLE ? r->online_ms : 0;
    arm_timeout(r, since ? since : wall_clock_ms());
    struct guest_spec spec = {.name = r->name, .runner_id = r->id, .pool = pool};
    int e = provider_guest_adopt(prov(s), r->host, &spec, &guest_events, r, &r->guest);
    if (e < 0) {
        r->guest = NULL;
        runner_fail(r, "not adopted after a restart: %s",
                    e == -ENODEV ? "host down" : strerror(-e));
    }
}

/* Records the store holds as live that no runner in memory owns: an earlier hatcheryd's.
 * Those in configured, idle, busy or finishing whose pool and host are still configured
 * are adopted; the rest are failed and their guests removed. */
static void recover(struct scheduler *s)
{
    /* This process's records all have a runner in memory until they are final: only an
     * earlier process's can be stale. */
    json_t *rows = store_runners_live_before(s->deps.store, s->first_id);
    const struct config *c = cfg(s);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        const char *name = json_string_value(json_object_get(row, "name"));
        const char *host = json_string_value(json_object_get(row, "host"));
        struct runner *r = name ? runner_find(s, name) : NULL;
        if (r || !name)
            continue;
        if (host && !provider_host_up(prov(s), host))
            continue; /* again when the host is back */
        const char *state = json_string_value(json_object_get(row, "state"));
        int st = runner_state_from_name(state);
        int slot = pool_index(c, json_string_value(json_object_get(row, "pool")));
        const struct config_pool *pool = slot >= 0 ? &c->pools[slot] : NULL;
        if (st >= 0 && pool && host_index(c, host) >= 0 &&
            runner_lifecycle_next((enum runner_state)st, RUNNER_EV_ADOPTED) >= 0) {
            runner_adopt(s, row, pool, (enum runner_state)st);
            continue;
        }
        bool lost = st == RUNNER_BUSY;
        char reason[200];
        snprintf(reason, sizeof(reason), "%shatcheryd restarted: the record was in flight%s",
                 lost ? "job lost: " : "", pool ? "" : " and its pool is no longer configured");
        if (st != RUNNER_FAILED) {
            log_warn("reconcile.stale_record", "runner=%s state=%s job_lost=%d action=fail", name,
                     state ? state : "?", lost);
            s->stats.reconcile_records_failed++;
            if (lost)
                s->stats.jobs_lost++;
        }
        if (host)
            provider_remove(prov(s), host, name, NULL, NULL);
        json_t *gid = json_object_get(row, "github_runner_id");
        const struct github_scope *scope = pool ? scope_for(s, pool) : NULL;
        if (!scope && s->deps.n_scopes)
            scope = &s->deps.scopes[0];
        if (gh(s) && json_is_integer(gid) && scope)
            github_runner_delete(gh(s), scope, json_integer_value(gid), on_github_deleted_quiet,
                                 NULL);
        store_runner_mark_deleted(s->deps.store, json_integer_value(json_object_get(row, "id")),
                                  reason, wall_clock_ms());
    }
    json_decref(rows);
    s->recovered = true;
}

static void reconcile(struct scheduler *s)
{
    uint64_t t0 = uv_hrtime();
    s->stats.reconcile_ticks++;
    s->pass_ms = 0;
    recover(s);
    for (size_t i = 0; i < cfg(s)->n_hosts; i++)
        if (provider_host_up(prov(s), cfg(s)->hosts[i].name)) {
            provider_tagged_async(prov(s), cfg(s)->hosts[i].name, on_tagged, s);
            provider_orphan_volumes_async(prov(s), cfg(s)->hosts[i].name, on_orphan_volumes, s);
        }
    /* While a rate-limit wait holds the last pass's lists back, a new pass would only pile
     * more behind them, all fired at once when the wait ends. */
    if (gh(s) && s->lists_pending > 0) {
        s->stats.reconcile_github_skipped++;
        log_info("reconcile.github_skipped", "lists_pending=%d", s->lists_pending);
    } else if (gh(s)) {
        for (size_t i = 0; i < s->deps.n_scopes; i++) {
            struct scope_ctx *ctx = calloc(1, sizeof(*ctx));
            if (!ctx)
                break;
            ctx->s = s;
            ctx->scope = &s->deps.scopes[i];
            s->lists_pending++;
            if (github_runners_list(gh(s), ctx->scope, NULL, on_github_runners, ctx) < 0) {
                s->lists_pending--;
                free(ctx);
            }
            if (s->deps.scopes[i].repo)
                queued_jobs_start(s, &s->deps.scopes[i], s->deps.scopes[i].repo);
            else if (s->deps.scopes[i].org && s->org_repos)
                org_queued_jobs(s, i);
        }
    }
    pass_add(s, t0);
}

static void on_reconcile(uv_timer_t *t)
{
    struct scheduler *s = t->data;
    reconcile(s);
}

/* ---- lifetime and admin -----------------------------------------------------------------------
 */

int scheduler_new(const struct scheduler_deps *deps, struct scheduler **ret)
{
    struct scheduler *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->deps = *deps;
    s->started_ms = wall_clock_ms();
    snprintf(s->prefix, sizeof(s->prefix), "hatchery-%s-", cfg(s)->controller_id);
    s->drained = calloc(cfg(s)->n_hosts + 1, sizeof(bool));
    s->why = calloc(cfg(s)->n_pools + 1, sizeof(*s->why));
    s->failures = calloc(cfg(s)->n_pools + 1, sizeof(int));
    s->retry_at_ms = calloc(cfg(s)->n_pools + 1, sizeof(int64_t));
    s->org_repos = calloc(s->deps.n_scopes + 1, sizeof(*s->org_repos));
    if (!s->drained || !s->why || !s->failures || !s->retry_at_ms || !s->org_repos) {
        free(s->drained);
        free(s->why);
        free(s->failures);
        free(s->retry_at_ms);
        free(s->org_repos);
        free(s);
        return -ENOMEM;
    }
    /* Ids are never reused, even once old records are pruned: AUTOINCREMENT remembers. */
    s->next_id = store_runner_next_id(s->deps.store);
    s->first_id = s->next_id;
    json_t *rows = store_hosts_drained(s->deps.store);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        int h = host_index(cfg(s), json_string_value(json_object_get(row, "name")));
        if (h >= 0)
            s->drained[h] = true;
    }
    json_decref(rows);
    uv_timer_init(s->deps.loop, &s->tick);
    uv_timer_init(s->deps.loop, &s->reconcile);
    s->tick.data = s->reconcile.data = s;
    uv_timer_start(&s->tick, on_tick, TICK_MS, 0);
    /* The first pass waits a little for the hosts' connections and the GitHub token. */
    uv_timer_start(&s->reconcile, on_reconcile, 2000,
                   (uint64_t)cfg(s)->reconcile_interval_s * 1000);
    *ret = s;
    return 0;
}

void scheduler_free(struct scheduler *s)
{
    if (!s)
        return;
    uv_close((uv_handle_t *)&s->tick, NULL);
    uv_close((uv_handle_t *)&s->reconcile, NULL);
    /* Runners stay as records: the next start repairs them. One that a store write or a
     * GitHub call still holds is freed when that comes back (hold_release), not before:
     * the loop runs on until it has. */
    s->closing = true;
    for (struct runner *r = s->runners; r;) {
        struct runner *next = r->next;
        if (r->holds > 0) {
            r->forget_pending = true;
            uv_timer_stop(&r->timer); /* no deadline acts on it now */
        } else
            uv_close((uv_handle_t *)&r->timer, on_runner_timer_closed);
        r = next;
    }
    s->runners = NULL;
    free(s->drained);
    free(s->why);
    free(s->failures);
    free(s->retry_at_ms);
    free(s->orphans);
    s->orphans = NULL;
    s->n_orphans = 0;
    for (size_t i = 0; s->org_repos && i < s->deps.n_scopes; i++) {
        for (size_t k = 0; k < s->org_repos[i].n; k++)
            free(s->org_repos[i].names[k]);
        free(s->org_repos[i].names);
    }
    free(s->org_repos);
    s->org_repos = NULL;
    free(s->stats.histograms);
    s->stats.histograms = NULL;
    s->stats.n_histograms = 0;
    /* The tick and reconcile handles close in this loop iteration; s outlives them by
     * being freed from the daemon after uv_run returns. */
}

int scheduler_config_replace(struct scheduler *s, const struct config *next)
{
    const struct config *old = cfg(s), *c = next;
    bool *drained = calloc(c->n_hosts + 1, sizeof(bool));
    char(*why)[512] = calloc(c->n_pools + 1, sizeof(*why));
    int *failures = calloc(c->n_pools + 1, sizeof(int));
    int64_t *retry_at_ms = calloc(c->n_pools + 1, sizeof(int64_t));
    if (!drained || !why || !failures || !retry_at_ms) {
        free(drained);
        free(why);
        free(failures);
        free(retry_at_ms);
        return -ENOMEM;
    }
    /* Per-pool and per-host state follows the name. */
    for (size_t i = 0; i < c->n_pools; i++) {
        int j = pool_index(old, c->pools[i].name);
        if (j >= 0) {
            failures[i] = s->failures[j];
            retry_at_ms[i] = s->retry_at_ms[j];
            memcpy(why[i], s->why[j], sizeof(why[i]));
        }
    }
    for (size_t i = 0; i < c->n_hosts; i++) {
        int j = host_index(old, c->hosts[i].name);
        if (j >= 0)
            drained[i] = s->drained[j];
    }
    free(s->drained);
    free(s->why);
    free(s->failures);
    free(s->retry_at_ms);
    s->drained = drained;
    s->why = why;
    s->failures = failures;
    s->retry_at_ms = retry_at_ms;
    if (c->reconcile_interval_s != old->reconcile_interval_s)
        uv_timer_start(&s->reconcile, on_reconcile, (uint64_t)c->reconcile_interval_s * 1000,
                       (uint64_t)c->reconcile_interval_s * 1000);
    scheduler_kick(s);
    return 0;
}

json_t *scheduler_runners_json(struct scheduler *s, bool include_ended)
{
    json_t *rows = store_runners_list(s->deps.store, include_ended);
    size_t i;
    json_t *row;
    /* Memory is ahead of the store by at most a commit: show the live state. */
    json_array_foreach(rows, i, row)
    {
        struct runner *r = runner_find(s, json_string_value(json_object_get(row, "name")));
        const char *stored = json_string_value(json_object_get(row, "state"));
        if (r)
            json_object_set_new(row, "state", json_string(runner_state_names[r->state]));
        else if (stored && strcmp(stored, "deleted") != 0 && strcmp(stored, "failed") != 0)
            /* A record from before a restart that the reconciler has not repaired yet. */
            json_object_set_new(row, "state", json_string("recovering"));
    }
    return rows ? rows : json_array();
}

json_t *scheduler_pool_json(struct scheduler *s, const char *pool)
{
    json_t *states = json_object();
    int64_t live = 0;
    for (int st = 0; st < RUNNER_DELETED; st++)
        json_object_set_new(states, runner_state_names[st], json_integer(0));
    for (struct runner *r = s->runners; r; r = r->next) {
        if (strcmp(r->pool->name, pool) != 0 || !runner_state_live(r->state))
            continue;
        json_t *n = json_object_get(states, runner_state_names[r->state]);
        json_integer_set(n, json_integer_value(n) + 1);
        live++;
    }
    const char *why = scheduler_pool_waiting(s, pool);
    int p = pool_index(cfg(s), pool);
    int64_t backoff_ms = p >= 0 ? s->retry_at_ms[p] - wall_clock_ms() : 0;
    return json_pack("{s:I, s:o, s:o, s:i, s:f}", "live", (json_int_t)live, "by_state", states,
                     "waiting", why ? json_string(why) : json_null(), "failures_in_a_row",
                     p >= 0 ? s->failures[p] : 0, "backoff_s",
                     backoff_ms > 0 ? (double)backoff_ms / 1000.0 : 0.0);
}

const char *scheduler_pool_waiting(struct scheduler *s, const char *pool)
{
    int p = pool_index(cfg(s), pool);
    return p >= 0 && s->why[p][0] ? s->why[p] : NULL;
}

int scheduler_host_drain(struct scheduler *s, const char *host, bool drained)
{
    int h = host_index(cfg(s), host);
    if (h < 0)
        return -ENOENT;
    s->drained[h] = drained;
    store_host_drained_set(s->deps.store, host, drained);
    log_info(drained ? "host.drained" : "host.undrained", "host=%s", host);
    scheduler_kick(s);
    return 0;
}

bool scheduler_host_drained(struct scheduler *s, const char *host)
{
    int h = host_index(cfg(s), host);
    return h >= 0 && s->drained[h];
}

int scheduler_runner_delete(struct scheduler *s, const char *name)
{
    struct runner *r = runner_find(s, name);
    if (!r || !runner_state_live(r->state))
        return -ENOENT;
    runner_fail(r, "deleted by an operator");
    return 0;
}

const char *scheduler_runner_log(struct scheduler *s, const char *name, char *buf, size_t size)
{
    if (strncmp(name, s->prefix, strlen(s->prefix)) != 0 || strchr(name, '/'))
        return NULL;
    snprintf(buf, size, "%s/logs/%s.console.log", cfg(s)->state_dir, name);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

const struct scheduler_stats *scheduler_stats_get(const struct scheduler *s)
{
    return &s->stats;
}
