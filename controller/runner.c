/* One runner's life, from its record to its end, and the registry of runners; see
 * runner.h. */
#include "runner.h"
#include "scaleset/scaleset.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "image_cache.h"
#include "log.h"
#include "wall_clock.h"

/* One runner (runner.h). */
struct runner {
    struct runners *reg;
    int64_t id;
    char name[160];
    const struct config_pool *pool;
    const struct github_scope *scope;
    char host[CONFIG_MAX_NAME_BYTES + 1];
    enum runner_state state;
    char image[72]; /* the build of the pool's image it booted (image_manifest_id), or "" */
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
    int64_t heartbeat_ms; /* the agent's last sign of life but its heartbeats (config sent,
                           * started, resumed, adopted) */
    int64_t job_id;
    bool job_completed; /* GitHub said its job completed (a webhook, or its scale set) */
    int exit_code;
    int64_t created_ms, online_ms, busy_ms, finished_ms;
    char reason[256];
    uv_timer_t timer;
    struct runner *next;
    struct runner *next_in_bucket;
};

#define RUNNER_BUCKETS       1024 /* by id; a power of two */
#define DEFAULT_COMMAND_ARGS 2

/* A scale-set runner gone with its job before the service said the job completed: the
 * service's statistics still count the job until then, and no runner is made for it. */
#define ENDED_JOBS_MAX    128
#define ENDED_JOB_KEEP_MS (10 * 60 * 1000)
struct ended_job {
    char pool[CONFIG_MAX_NAME_BYTES + 1];
    int64_t job_id;
    int64_t ended_ms;
};

/* Per pool of the running config: failures in a row, and the back-off they earned. */
struct pool_health {
    int failures;
    int64_t retry_at_ms;
};

struct runners {
    struct runner_env env;
    struct runner *list;
    struct runner *by_id[RUNNER_BUCKETS];
    int64_t next_id;
    int64_t first_id; /* records below it are an earlier process's */
    char prefix[64];  /* hatchery-<controller>- */
    int64_t started_ms;
    struct pool_health *pools; /* by slot in the running config */
    /* Jobs credited with an online runner whose write may not be committed yet. */
    int64_t supplied_recent[64];
    size_t supplied_next;
    struct ended_job ended_jobs[ENDED_JOBS_MAX];
    size_t n_ended_jobs;
    /* runners_free was called: runners still held are freed by their holds, and the
     * registry with the last of them (`unfreed` counts them, and the owner's reference). */
    bool closing;
    size_t unfreed;
};

static void record_then(struct runner *r, store_write_cb cb);
static void on_runner_timer(uv_timer_t *t);
static void runner_index(struct runner *r);
static void runner_unindex(struct runner *r);
static void runner_record(struct runner *r);
static void arm_timeout(struct runner *r, int64_t since_ms);
static bool runner_move(struct runner *r, enum runner_event ev);
extern const struct guest_events runner_guest_events;

/* The Listener itself, not run.sh: run.sh exits 0 for every return code but 2, and the
 * agent reports what the code means (and re-launches on 2, 3 and 4 as run.sh would). */
static const char *const default_command[DEFAULT_COMMAND_ARGS] = {
    "/opt/actions-runner/bin/Runner.Listener", "run"};

/* ---- the store record ------------------------------------------------------------------ */

static void runner_record(struct runner *r)
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
    int e = store_runner_update(r->reg->env.deps.store, &u, cb, cb ? r : NULL);
    if (e < 0 && cb)
        cb(r, e); /* not taken: the caller still hears of it */
}

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
        r->reg->env.stats->transitions_refused++;
        return false;
    }
    if ((enum runner_state)to == r->state)
        return true;
    log_info("runner.state", "runner=%s pool=%s host=%s from=%s to=%s cause=%s", r->name,
             r->pool->name, r->host, runner_state_names[r->state], runner_state_names[to],
             runner_event_names[ev]);
    r->state = (enum runner_state)to;
    runner_record(r);
    arm_timeout(r, wall_clock_ms());
    return true;
}

int64_t runner_heard_ms(const struct runner *r)
{
    int64_t beat = r->guest ? provider_guest_heard_ms(env_provider(&r->reg->env), r->guest) : 0;
    return beat > r->heartbeat_ms ? beat : r->heartbeat_ms;
}

int runner_pool_slot(const struct runner *r)
{
    return config_pool_index(env_config(&r->reg->env), r->pool->name);
}

/* A pool whose runners keep failing (a broken image, a bad host) backs off exponentially,
 * up to 5 minutes, instead of boot-looping. */
static void pool_result(struct runner *r, bool ok)
{
    int p = runner_pool_slot(r);
    if (p < 0)
        return;
    struct pool_health *h = &r->reg->pools[p];
    if (ok) {
        *h = (struct pool_health){0};
        return;
    }
    int64_t delay = 1000;
    for (int i = 0; i < h->failures && delay < 300000; i++)
        delay *= 2;
    h->failures++;
    h->retry_at_ms = wall_clock_ms() + (delay < 300000 ? delay : 300000);
}

/* ---- the end of a runner ---------------------------------------------------------------- */

static void runners_release(struct runners *reg)
{
    if (--reg->unfreed > 0)
        return;
    free(reg->pools);
    free(reg);
}

static void on_runner_timer_closed(uv_handle_t *h)
{
    struct runner *r = h->data;
    struct runners *reg = r->reg;
    secret_free(r->jit);
    free(r);
    runners_release(reg);
}

/* A scale-set runner that took a job leaves: its job counts as held until the service
 * says it completed (runner_job_event). */
static void note_ended_job(struct runner *r)
{
    struct runners *s = r->reg;
    if (!r->pool->scale_set || !r->job_id || r->job_completed || s->closing)
        return;
    if (s->n_ended_jobs == ENDED_JOBS_MAX) /* the oldest goes: at worst a runner too many */
        memmove(s->ended_jobs, s->ended_jobs + 1, --s->n_ended_jobs * sizeof(s->ended_jobs[0]));
    struct ended_job *e = &s->ended_jobs[s->n_ended_jobs++];
    snprintf(e->pool, sizeof(e->pool), "%s", r->pool->name);
    e->job_id = r->job_id;
    e->ended_ms = wall_clock_ms();
}

static void runner_forget(struct runner *r)
{
    struct runners *s = r->reg;
    if (r->holds > 0) {
        r->forget_pending = true; /* the last callback that holds it frees it */
        return;
    }
    note_ended_job(r);
    if (s->closing) { /* already off the list; the loop runs on only to close */
        uv_close((uv_handle_t *)&r->timer, on_runner_timer_closed);
        return;
    }
    for (struct runner **pp = &s->list; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    runner_unindex(r);
    uv_close((uv_handle_t *)&r->timer, on_runner_timer_closed);
    env_recount(&s->env);
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

int runner_unregister(const struct runner_env *env, const struct config_pool *pool,
                      const struct github_scope *scope, int64_t runner_id, github_done_cb cb,
                      void *data)
{
    if (pool->scale_set)
        return scalesets_runner_remove(env_scalesets(env), pool->name, runner_id, cb, data);
    return github_runner_delete(env_github(env), scope, runner_id, cb, data);
}

static void runner_deleted(struct runner *r)
{
    r->finished_ms = r->finished_ms ? r->finished_ms : wall_clock_ms();
    if (runner_move(r, RUNNER_EV_GITHUB_DELETED))
        r->reg->env.stats->deleted++;
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
        runner_record(r);
    if (env_github(&r->reg->env) && r->github_runner_id > 0) {
        r->holds++;
        if (runner_unregister(&r->reg->env, r->pool, r->scope, r->github_runner_id,
                              on_github_deleted, r) == 0)
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
        provider_guest_teardown(env_provider(&r->reg->env), r->guest, reason);
    else
        runner_after_guest(r);
}

/* Fails the runner (ev is fail or timeout) with a reason, and tears its guest down. A
 * runner already failing or deleted is left alone. A busy runner's job is lost: GitHub
 * fails a job whose runner vanishes. */
void runner_end(struct runner *r, enum runner_event ev, enum runner_failure why, const char *fmt,
                ...)
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
    log_warn("runner.failed", "runner=%s pool=%s host=%s state=%s job_lost=%d why=%s reason=\"%s\"",
             r->name, r->pool->name, r->host, runner_state_names[r->state], lost,
             runner_failure_names[why], r->reason);
    scheduler_stats_failure(r->reg->env.stats, r->pool->name, why, lost);
    if (r->adopting)
        r->reg->env.stats->adopt_failed++;
    r->adopting = false;
    /* Only a runner that never started tells of the pool's image or hosts: what a job
     * does to its own guest must not stop the pool's scaling for everyone. */
    if (!r->online_ms)
        pool_result(r, false);
    r->finished_ms = wall_clock_ms();
    runner_move(r, ev);
    guest_goes(r, r->reason);
}

/* A runner no longer wanted, which has no job: it goes the way a finished one does. */
void runner_retire(struct runner *r, const char *fmt, ...)
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
        provider_guest_disown(env_provider(&r->reg->env), r->guest);
        r->guest = NULL;
    }
    if (!r->reason[0])
        snprintf(r->reason, sizeof(r->reason), "delete deadline passed (%d s)", LIFECYCLE_DELETE_S);
    r->finished_ms = r->finished_ms ? r->finished_ms : wall_clock_ms();
    runner_move(r, RUNNER_EV_TIMEOUT);
    r->reg->env.stats->deleted++;
    runner_forget(r);
}

static void on_runner_timer(uv_timer_t *t)
{
    struct runner *r = t->data;
    const struct config_pool *p = r->pool;
    switch (r->state) {
    case RUNNER_PENDING:
        runner_end(r, RUNNER_EV_TIMEOUT, FAILURE_STORE,
                   "the store did not record the runner within %d s", LIFECYCLE_STORE_S);
        break;
    case RUNNER_CREATING:
        runner_end(r, RUNNER_EV_TIMEOUT, FAILURE_BOOT_TIMEOUT,
                   "no guest and JIT config within %lld s", (long long)p->boot_timeout_s);
        break;
    case RUNNER_BOOTING:
        runner_end(r, RUNNER_EV_TIMEOUT, FAILURE_BOOT_TIMEOUT,
                   "no hello from the agent within %lld s", (long long)p->boot_timeout_s);
        break;
    case RUNNER_CONFIGURED:
        runner_end(r, RUNNER_EV_TIMEOUT, FAILURE_BOOT_TIMEOUT,
                   "the runner did not report started within %lld s of its config",
                   (long long)p->boot_timeout_s);
        break;
    case RUNNER_IDLE:
        runner_end(r, RUNNER_EV_TIMEOUT, FAILURE_IDLE_MAX_AGE,
                   "idle longer than idle_max_age_s (%lld s)", (long long)p->idle_max_age_s);
        break;
    case RUNNER_BUSY:
        runner_end(r, RUNNER_EV_TIMEOUT, FAILURE_JOB_TIMEOUT,
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
    int e = provider_guest_send_config(env_provider(&r->reg->env), r->guest, r->jit,
                                       p->job_timeout_s, cmd, n);
    secret_free(r->jit); /* the JIT config travels once */
    r->jit = NULL;
    if (e < 0) {
        runner_fail(r, FAILURE_AGENT, "cannot send the config to the agent: %s", strerror(-e));
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

static void ev_hello(void *data, struct guest *g, const struct agent_hello *hello)
{
    (void)g;
    (void)hello;
    struct runner *r = data;
    r->hello = true;
    scheduler_stats_observe(r->reg->env.stats, r->pool->name, HISTOGRAM_BOOT,
                            (double)(wall_clock_ms() - r->created_ms) / 1000.0);
    maybe_configure(r);
}

static bool supplied_recently(const struct runners *s, int64_t job_id)
{
    for (size_t i = 0; i < sizeof(s->supplied_recent) / sizeof(s->supplied_recent[0]); i++)
        if (s->supplied_recent[i] == job_id)
            return true;
    return false;
}

/* Runners serve demand, not a job each: a runner that comes online is counted against its
 * pool's oldest queued job that no runner came online for yet, and the wait from that
 * job's `queued` is observed. A min_idle runner with no job waiting counts for none. */
static void on_unsupplied_jobs(void *data, int err, const struct store_job_ref *jobs, size_t n)
{
    struct runner *r = data;
    if (!hold_release(r) || err < 0)
        return;
    struct runners *s = r->reg;
    for (size_t i = 0; i < n; i++) {
        int64_t id = jobs[i].id;
        if (supplied_recently(s, id))
            continue;
        s->supplied_recent[s->supplied_next++ % 64] = id;
        if (jobs[i].queued_ms)
            scheduler_stats_observe(s->env.stats, r->pool->name, HISTOGRAM_SUPPLIED,
                                    (double)(r->online_ms - jobs[i].queued_ms) / 1000.0);
        store_job_supplied(s->env.deps.store, id, r->online_ms);
        break;
    }
}

static void credit_oldest_queued_job(struct runner *r)
{
    r->holds++;
    if (store_jobs_unsupplied(r->reg->env.deps.store, r, r->pool->name, 65, on_unsupplied_jobs, r) <
        0)
        r->holds--;
}

static void ev_started(void *data, struct guest *g, int64_t pid)
{
    (void)g;
    (void)pid;
    struct runner *r = data;
    r->heartbeat_ms = wall_clock_ms();
    if (r->state == RUNNER_CONFIGURED) {
        int slot = runner_pool_slot(r);
        r->pool_failures_at_start = slot >= 0 ? r->reg->pools[slot].failures : 0;
        pool_result(r, true);
        r->online_ms = wall_clock_ms();
        scheduler_stats_observe(r->reg->env.stats, r->pool->name, HISTOGRAM_ONLINE,
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
        provider_guest_ack_exit(env_provider(&r->reg->env), r->guest);
        /* The guest powers itself off; tear down now either way. */
        provider_guest_teardown(env_provider(&r->reg->env), r->guest, "runner exited");
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
     * from where the count stood before this runner started, so it grows. The agent says
     * so without ever saying `started`. Not once the runner ran: a job with root in its
     * guest can send any exit, before GitHub's in_progress is here too, and must not be
     * able to back its pool off for everyone. */
    if ((exit->code == 126 || exit->code == 127) && !r->online_ms && r->state != RUNNER_BUSY &&
        r->job_id == 0) {
        int slot = runner_pool_slot(r);
        if (slot >= 0)
            r->reg->pools[slot].failures = r->pool_failures_at_start;
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
        runner_fail(r, FAILURE_NOT_ADOPTED, "not adopted after a restart: %s", reason);
    else
        runner_fail(r, FAILURE_GUEST, "%s", reason);
}

/* The guest ended on its own. Once the runner's exit is in (finishing), that is the
 * guest's expected end: its agent powers off once it has our ack, and on_exit_recorded
 * tears it down (ev_failed lets it be). Before, its runner never reported, and the
 * runner fails. */
static void ev_ended(void *data, struct guest *g, const char *why)
{
    char reason[320];
    snprintf(reason, sizeof(reason), "%s before its runner reported an exit", why);
    ev_failed(data, g, reason);
}

/* An adopted runner's agent answered resume: the runner goes on where it was. */
static void ev_resumed(void *data, struct guest *g, const struct agent_resumed *resumed)
{
    struct runner *r = data;
    struct runners *reg = r->reg;
    double seconds = (double)(wall_clock_ms() - r->adopt_started_ms) / 1000.0;
    r->adopting = false;
    r->heartbeat_ms = wall_clock_ms();
    reg->env.stats->adopted++;
    if (seconds > reg->env.stats->adopt_seconds_max)
        reg->env.stats->adopt_seconds_max = seconds;
    log_info("runner.adopted", "runner=%s pool=%s host=%s state=%s agent_pid=%lld seconds=%.3f",
             r->name, r->pool->name, r->host, runner_state_names[r->state], (long long)resumed->pid,
             seconds);
    runner_move(r, RUNNER_EV_ADOPTED);
    if (resumed->state == AGENT_RESUMED_WAITING)
        runner_fail(r, FAILURE_AGENT, "adopted, but its agent never got its config");
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
        runner_fail(r, FAILURE_GUEST, "the guest went away"); /* and, having no guest, ends here */
    else
        runner_after_guest(r);
}

const struct guest_events runner_guest_events = {
    .on_hello = ev_hello,
    .on_started = ev_started,
    .on_exited = ev_exited,
    .on_failed = ev_failed,
    .on_ended = ev_ended,
    .on_gone = ev_gone,
    .on_booting = ev_booting,
    .on_resumed = ev_resumed,
};

/* ---- creation ------------------------------------------------------------------------------ */

void on_github_deleted_quiet(void *data, int err, const char *message)
{
    (void)data;
    (void)err;
    (void)message;
}

static void on_jit(void *data, int err, const char *message, int64_t runner_id, struct secret *jit)
{
    struct runner *r = data;
    const struct runner_env *env = &r->reg->env;
    const struct config_pool *pool = r->pool;
    const struct github_scope *scope = r->scope;
    bool wanted = hold_release(r); /* false: r is freed */
    if (!wanted || r->state >= RUNNER_DELETING) {
        secret_free(jit);
        /* Registered after all: delete it, or it lingers. */
        if (err == 0 && env_github(env))
            runner_unregister(env, pool, scope, runner_id, on_github_deleted_quiet, NULL);
        return;
    }
    if (err < 0) {
        runner_fail(r, FAILURE_GITHUB, "GitHub JIT config: %s", message ? message : strerror(-err));
        return;
    }
    r->github_runner_id = runner_id;
    r->jit = jit;
    runner_record(r);
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
    int e = p->scale_set
                ? scalesets_jit_generate(env_scalesets(&r->reg->env), p->name, r->name, on_jit, r)
                : github_jitconfig_generate(env_github(&r->reg->env), r->scope, r->name, labels, n,
                                            "_work", on_jit, r);
    if (e < 0) {
        r->holds--;
        runner_fail(r, FAILURE_GITHUB, "cannot ask GitHub for a JIT config: %s", strerror(-e));
        return;
    }
    /* A request that failed at once has already called back and failed the runner (whose
     * memory lasts until its timer's close callback): create no guest for it. */
    if (r->state != RUNNER_CREATING)
        return;
    struct guest_spec spec = {.name = r->name, .runner_id = r->id, .pool = p};
    e = provider_guest_create(env_provider(&r->reg->env), r->host, &spec, &runner_guest_events, r,
                              &r->guest);
    if (e < 0) {
        r->guest = NULL;
        runner_fail(r, FAILURE_GUEST, "cannot create the guest on %s: %s", r->host,
                    e == -ENOSPC   ? "no capacity"
                    : e == -ENODEV ? "host down"
                                   : strerror(-e));
    }
}

static void on_runner_inserted(void *data, int result)
{
    struct runner *r = data;
    if (!hold_release(r))
        return; /* the scheduler stopped while the record was written: it is repaired at
                 * the next start, as a pending runner */
    if (result < 0) {
        runner_fail(r, FAILURE_STORE, "cannot record the runner: %s", strerror(-result));
        return;
    }
    runner_start(r);
}

const struct github_scope *env_pool_scope(const struct runner_env *e, const struct config_pool *p)
{
    return github_scope_find(e->deps.scopes, e->deps.n_scopes, p->github_scope);
}

/* A runner in memory, in the registry and its index, its timer ready: `id` and `state` as
 * given, the rest for the caller to fill. NULL when out of memory. */
static struct runner *runner_new(struct runners *reg, int64_t id, const struct config_pool *pool,
                                 const char *host, enum runner_state state)
{
    struct runner *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->reg = reg;
    r->id = id;
    snprintf(r->name, sizeof(r->name), "%s%lld", reg->prefix, (long long)id);
    r->pool = pool;
    r->scope = env_pool_scope(&reg->env, pool);
    snprintf(r->host, sizeof(r->host), "%s", host);
    r->state = state;
    r->exit_code = -1;
    uv_timer_init(reg->env.deps.loop, &r->timer);
    r->timer.data = r;
    r->next = reg->list;
    reg->list = r;
    runner_index(r);
    reg->unfreed++;
    return r;
}

void runner_create(struct runners *reg, const struct config_pool *pool, const char *host,
                   const char *image)
{
    struct runner *r = runner_new(reg, reg->next_id, pool, host, RUNNER_PENDING);
    if (!r)
        return;
    reg->next_id++;
    r->created_ms = wall_clock_ms();
    snprintf(r->image, sizeof(r->image), "%s", image ? image : "");
    arm_timeout(r, r->created_ms);
    reg->env.stats->created++;
    struct pool_stats *ps = scheduler_stats_pool(reg->env.stats, pool->name);
    if (ps)
        ps->created++;
    log_info("runner.created", "runner=%s pool=%s host=%s", r->name, pool->name, host);
    const struct store_runner_new row = {.id = r->id,
                                         .name = r->name,
                                         .pool = pool->name,
                                         .host = host,
                                         .state = runner_state_names[RUNNER_PENDING],
                                         .vcpus = pool->vcpus,
                                         .memory_mib = pool->memory_mib,
                                         .image = r->image,
                                         .created_ms = r->created_ms};
    /* Written before anything is done: a crash from here on leaves a record to repair.
     * Held until the write comes back, so that a stop in between frees it only then. */
    r->holds++;
    if (store_runner_insert(reg->env.deps.store, &row, on_runner_inserted, r) < 0) {
        r->holds--;
        runner_fail(r, FAILURE_STORE, "the store is busy");
    }
}

/* Its state's timeout counts from when it was entered, not from now. */
void runner_adopt(struct runners *reg, const struct store_runner_row *row,
                  const struct config_pool *pool, enum runner_state state)
{
    struct runner *r = runner_new(reg, row->id, pool, row->host, state);
    if (!r)
        return;
    if (strcmp(r->name, row->name) != 0) /* a record of another prefix is not ours */
        snprintf(r->name, sizeof(r->name), "%s", row->name);
    r->github_runner_id = row->github_runner_id;
    r->job_id = row->job_id;
    r->exit_code = row->exit_code;
    snprintf(r->reason, sizeof(r->reason), "%s", row->reason);
    snprintf(r->image, sizeof(r->image), "%s", row->image);
    r->finished_ms = row->finished_ms;
    r->created_ms = row->created_ms;
    r->online_ms = row->online_ms;
    r->busy_ms = row->busy_ms;
    r->hello = true;
    r->adopting = true;
    r->adopt_started_ms = reg->started_ms;
    r->heartbeat_ms = wall_clock_ms();
    log_info("runner.adopting", "runner=%s pool=%s host=%s state=%s", r->name, pool->name, r->host,
             runner_state_names[state]);
    int64_t since = state == RUNNER_BUSY ? r->busy_ms : state == RUNNER_IDLE ? r->online_ms : 0;
    arm_timeout(r, since ? since : wall_clock_ms());
    struct guest_spec spec = {.name = r->name, .runner_id = r->id, .pool = pool};
    int e = provider_guest_adopt(env_provider(&reg->env), r->host, &spec, &runner_guest_events, r,
                                 &r->guest);
    if (e < 0) {
        r->guest = NULL;
        runner_fail(r, FAILURE_NOT_ADOPTED, "not adopted after a restart: %s",
                    e == -ENODEV ? "host down" : strerror(-e));
    }
}

/* The wait from its job's `queued` to the runner taking it. */
static void on_job_queued_at(void *data, int64_t queued_ms)
{
    struct runner *r = data;
    if (hold_release(r) && queued_ms >= 0)
        scheduler_stats_observe(r->reg->env.stats, r->pool->name, HISTOGRAM_START,
                                (double)(r->busy_ms - queued_ms) / 1000.0);
}

void runner_job_event(struct runners *reg, struct runner *r, int64_t job_id, enum job_status status)
{
    for (size_t i = 0; status == JOB_COMPLETED && i < reg->n_ended_jobs; i++)
        if (reg->ended_jobs[i].job_id == job_id) {
            memmove(reg->ended_jobs + i, reg->ended_jobs + i + 1,
                    (reg->n_ended_jobs - i - 1) * sizeof(reg->ended_jobs[0]));
            reg->n_ended_jobs--;
            break;
        }
    if (!r)
        return;
    enum runner_event ev =
        status == JOB_IN_PROGRESS ? RUNNER_EV_JOB_IN_PROGRESS : RUNNER_EV_JOB_COMPLETED;
    /* A runner takes one job (a JIT runner is single-use): news of another job on a runner
     * that has one is not believed. Signed deliveries say so only if the webhook secret
     * leaked (or the front that holds it was taken over); acted on, a busy runner's job
     * would be ended early. */
    if (r->job_id && r->job_id != job_id &&
        (status == JOB_IN_PROGRESS || status == JOB_COMPLETED)) {
        log_warn("runner.job_mismatch",
                 "runner=%s runner_job=%lld job=%lld status=%s action=\"ignored: the runner "
                 "runs another job\"",
                 r->name, (long long)r->job_id, (long long)job_id, job_status_names[status]);
        reg->env.stats->job_mismatches++;
        return;
    }
    /* Its job is done, whatever state the runner is in: one that has exited already and is
     * leaving no longer holds a scale set's job back once it is gone (note_ended_job). */
    if (status == JOB_COMPLETED)
        r->job_completed = true;
    if ((status == JOB_IN_PROGRESS || status == JOB_COMPLETED) &&
        runner_lifecycle_next(r->state, ev) < 0) {
        /* A late or repeated webhook (the runner ended already): nothing to do. */
        log_info("runner.job_event_ignored", "runner=%s state=%s cause=%s job=%lld", r->name,
                 runner_state_names[r->state], runner_event_names[ev], (long long)job_id);
        return;
    }
    if (status == JOB_IN_PROGRESS) {
        r->job_id = job_id;
        r->busy_ms = wall_clock_ms();
        r->holds++;
        if (store_job_queued_at(reg->env.deps.store, r, job_id, on_job_queued_at, r) < 0)
            r->holds--;
        runner_move(r, RUNNER_EV_JOB_IN_PROGRESS);
    } else if (status == JOB_COMPLETED) {
        r->job_id = r->job_id ? r->job_id : job_id;
        /* The runner exits by itself after its one job; finishing gives it a grace. */
        runner_move(r, RUNNER_EV_JOB_COMPLETED);
    }
}

bool runner_job_event_stored(struct runners *reg, const char *name, int64_t job_id,
                             enum job_status status)
{
    struct runner *r = name ? runners_find(reg, name) : NULL;
    if (!r || (r->job_id && r->job_id != job_id))
        return false;
    /* News: the lifecycle takes the event from the runner's state, and the runner has not
     * heard it (no job yet, or its job not ended). */
    enum runner_event ev =
        status == JOB_IN_PROGRESS ? RUNNER_EV_JOB_IN_PROGRESS : RUNNER_EV_JOB_COMPLETED;
    bool unheard =
        status == JOB_IN_PROGRESS ? !r->job_id : status == JOB_COMPLETED && !r->job_completed;
    if (!unheard || runner_lifecycle_next(r->state, ev) < 0)
        return false;
    log_info("runner.job_event_stored", "runner=%s job=%lld status=%s", r->name, (long long)job_id,
             job_status_names[status]);
    runner_job_event(reg, r, job_id, status);
    return true;
}

bool runner_image_now(const struct runner_env *env, const struct config_pool *pool,
                      const char *host, char out[72])
{
    out[0] = 0;
    struct image_status st;
    if (pool->backend != BACKEND_VM || provider_host_image(env_provider(env), host, pool, &st) < 0)
        return false;
    return runner_image_of(env, pool, &st, out);
}

bool runner_image_of(const struct runner_env *env, const struct config_pool *pool,
                     const struct image_status *st, char out[72])
{
    out[0] = 0;
    if (pool->backend != BACKEND_VM)
        return false;
    const struct image_manifest *m = NULL;
    if (st->state == IMAGE_READY)
        m = &st->manifest; /* a remote host's, found through its libvirt */
    else if (st->state == IMAGE_LOCAL || st->state == IMAGE_UNCHECKED) {
        const struct image_cache_entry *e =
            env->deps.images ? image_cache_get(env->deps.images, pool->image) : NULL;
        m = e && e->manifest_rc == 0 ? &e->manifest : NULL;
    }
    if (m)
        snprintf(out, 72, "%s", image_manifest_id(m));
    return out[0] != 0;
}

/* ---- the registry -------------------------------------------------------------------------- */

struct runners *runners_new(const struct runner_env *env)
{
    struct runners *reg = calloc(1, sizeof(*reg));
    if (!reg)
        return NULL;
    reg->env = *env;
    const struct config *c = env_config(env);
    reg->pools = calloc(c->n_pools + 1, sizeof(*reg->pools));
    if (!reg->pools) {
        free(reg);
        return NULL;
    }
    reg->unfreed = 1; /* the owner's */
    reg->started_ms = wall_clock_ms();
    snprintf(reg->prefix, sizeof(reg->prefix), "hatchery-%s-", c->controller_id);
    /* Ids are never reused, even once old records are pruned: AUTOINCREMENT remembers. */
    reg->next_id = store_runner_next_id_sync(env->deps.store);
    reg->first_id = reg->next_id;
    return reg;
}

void runners_free(struct runners *reg)
{
    if (!reg)
        return;
    reg->closing = true;
    for (struct runner *r = reg->list; r;) {
        struct runner *next = r->next;
        if (r->holds > 0) {
            r->forget_pending = true;
            uv_timer_stop(&r->timer); /* no deadline acts on it now */
        } else
            uv_close((uv_handle_t *)&r->timer, on_runner_timer_closed);
        r = next;
    }
    reg->list = NULL;
    runners_release(reg);
}

const struct runner_env *runners_env(const struct runners *reg)
{
    return &reg->env;
}

struct runner *runners_first(const struct runners *reg)
{
    return reg->list;
}

int64_t runners_first_id(const struct runners *reg)
{
    return reg->first_id;
}

bool runners_name_ours(const struct runners *reg, const char *name)
{
    return strncmp(name, reg->prefix, strlen(reg->prefix)) == 0 && config_name_valid(name, 199);
}

int runners_pool_failures(const struct runners *reg, int slot)
{
    return slot >= 0 ? reg->pools[slot].failures : 0;
}

int64_t runners_pool_retry_at(const struct runners *reg, int slot)
{
    return slot >= 0 ? reg->pools[slot].retry_at_ms : 0;
}

int runners_config_replace(struct runners *reg, const struct config *old, const struct config *next)
{
    struct pool_health *pools = calloc(next->n_pools + 1, sizeof(*pools));
    if (!pools)
        return -ENOMEM;
    for (size_t i = 0; i < next->n_pools; i++) {
        int j = config_pool_index(old, next->pools[i].name);
        if (j >= 0)
            pools[i] = reg->pools[j];
    }
    free(reg->pools);
    reg->pools = pools;
    return 0;
}

int64_t runners_ended_jobs(struct runners *reg, const char *pool)
{
    int64_t n = 0, now = wall_clock_ms();
    size_t kept = 0;
    for (size_t i = 0; i < reg->n_ended_jobs; i++) {
        if (now - reg->ended_jobs[i].ended_ms > ENDED_JOB_KEEP_MS)
            continue; /* never completed: no longer held back */
        reg->ended_jobs[kept++] = reg->ended_jobs[i];
        n += strcmp(reg->ended_jobs[i].pool, pool) == 0;
    }
    reg->n_ended_jobs = kept;
    return n;
}

/* Runners by name, which is the prefix and the id: the reconciler looks up every domain
 * and GitHub runner, so this must not walk a list of thousands. */
struct runner *runners_find(const struct runners *reg, const char *name)
{
    size_t n = strlen(reg->prefix);
    if (!name || strncmp(name, reg->prefix, n) != 0 || name[n] < '1' || name[n] > '9')
        return NULL;
    char *end = NULL;
    errno = 0;
    long long id = strtoll(name + n, &end, 10);
    if (errno || *end)
        return NULL;
    for (struct runner *r = reg->by_id[(uint64_t)id & (RUNNER_BUCKETS - 1)]; r;
         r = r->next_in_bucket)
        if (r->id == id)
            return r;
    return NULL;
}

static void runner_index(struct runner *r)
{
    struct runner **bucket = &r->reg->by_id[(uint64_t)r->id & (RUNNER_BUCKETS - 1)];
    r->next_in_bucket = *bucket;
    *bucket = r;
}

static void runner_unindex(struct runner *r)
{
    for (struct runner **pp = &r->reg->by_id[(uint64_t)r->id & (RUNNER_BUCKETS - 1)]; *pp;
         pp = &(*pp)->next_in_bucket)
        if (*pp == r) {
            *pp = r->next_in_bucket;
            return;
        }
}

/* ---- what others read of a runner ---------------------------------------------------------- */

enum runner_state runner_state_get(const struct runner *r)
{
    return r->state;
}

bool runner_live(const struct runner *r)
{
    return runner_state_live(r->state);
}

const char *runner_name(const struct runner *r)
{
    return r->name;
}

const char *runner_host(const struct runner *r)
{
    return r->host;
}

int runner_exit_code(const struct runner *r)
{
    return r->exit_code;
}

const char *runner_reason(const struct runner *r)
{
    return r->reason;
}

const struct config_pool *runner_pool(const struct runner *r)
{
    return r->pool;
}

const char *runner_booted_image(const struct runner *r)
{
    return r->image;
}

bool runner_adopting(const struct runner *r)
{
    return r->adopting;
}

bool runner_has_guest(const struct runner *r)
{
    return r->guest != NULL;
}

int64_t runner_online_ms(const struct runner *r)
{
    return r->online_ms;
}

int64_t runner_job_id(const struct runner *r)
{
    return r->job_id;
}

struct runner *runner_next(const struct runner *r)
{
    return r->next;
}
