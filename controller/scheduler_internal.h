/* What the scheduler's three files share (scheduler.c, runner.c, reconcile.c), and no one
 * else: the scheduler and runner structures, and the functions one file calls in another.
 * scheduler.c holds demand and placement, the tick, start and end; reconcile.c the
 * reconciler; runner.c one runner's life. Each calls only those after it in that list:
 * runner.c and reconcile.c ask for a recount through scheduler_recount (the tick that
 * scheduler.c sets), not by calling up. */
#ifndef HATCHERY_SCHEDULER_INTERNAL_H
#define HATCHERY_SCHEDULER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <uv.h>

#include "config.h"
#include "github.h"
#include "provider.h"
#include "runner_group.h"
#include "scheduler.h"
#include "store.h"

#define TICK_MS              1000
#define DEFAULT_COMMAND_ARGS 2

struct runner {
    struct scheduler *s;
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
    int64_t heartbeat_ms; /* the agent's last sign of life */
    int64_t job_id;
    bool job_completed; /* GitHub said its job completed (a webhook, or its scale set) */
    int exit_code;
    int64_t created_ms, online_ms, busy_ms, finished_ms;
    char reason[256];
    uv_timer_t timer;
    struct runner *next;
    struct runner *next_in_bucket;
};

#define RUNNER_BUCKETS 1024 /* by id; a power of two */

/* A scale-set runner gone with its job before the service said the job completed: the
 * service's statistics still count the job until then, and no runner is made for it. */
#define ENDED_JOBS_MAX    128
#define ENDED_JOB_KEEP_MS (10 * 60 * 1000)
struct ended_job {
    char pool[CONFIG_MAX_NAME_BYTES + 1];
    int64_t job_id;
    int64_t ended_ms;
};

struct scheduler {
    struct scheduler_deps deps;
    uv_timer_cb on_tick; /* scheduler.c's tick, which runner.c and reconcile.c ask for */
    bool closing; /* scheduler_free was called: runners still held are freed by their holds */
    struct runner *runners;
    struct runner *by_id[RUNNER_BUCKETS];
    int64_t next_id;
    int64_t first_id; /* records below it are an earlier process's */
    /* Jobs credited with an online runner whose write may not be committed yet. */
    int64_t supplied_recent[64];
    size_t supplied_next;
    char prefix[64]; /* hatchery-<controller>- */
    uv_timer_t tick;
    uv_timer_t reconcile;
    bool *drained;                             /* per config host */
    struct guest_isolation_log *isolation_log; /* what the journal was told of each host */
    char (*why)[512];                          /* per pool: why queued jobs wait, or "" */
    int *failures;                             /* per pool: runners that failed in a row */
    int64_t *retry_at_ms;   /* per pool: no new runner before this, after failures */
    bool recovered;         /* reconcile_recover() ran: earlier records are adopted or failed */
    int64_t rotated_ms;     /* when the tick last looked for outdated idle runners */
    struct reconciler *rec; /* reconcile.c's own state */
    struct runner_group_checks *groups; /* per scope: the runner group's policy, as GitHub says */
    struct ended_job ended_jobs[ENDED_JOBS_MAX];
    size_t n_ended_jobs;
    int64_t started_ms;
    struct scheduler_stats stats;
};

/* The running config, GitHub client and provider, read through on each use: a reload
 * replaces the config, and a stop clears the clients. */
static inline const struct config *cfg(const struct scheduler *s)
{
    return *s->deps.config;
}

static inline struct github_client *gh(const struct scheduler *s)
{
    return *s->deps.github;
}

static inline struct provider *prov(const struct scheduler *s)
{
    return *s->deps.provider;
}

static inline struct scalesets *scalesets_of(const struct scheduler *s)
{
    return s->deps.scalesets ? *s->deps.scalesets : NULL;
}

/* Hosts are known by name, as pools are (config_pool_index): a reload may move, add or
 * remove them. The index in `c`, or -1. */
static inline int host_index(const struct config *c, const char *name)
{
    for (size_t i = 0; name && i < c->n_hosts; i++)
        if (strcmp(c->hosts[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* runner.c */
/* What a runner hears from its guest (provider.h). */
extern const struct guest_events runner_guest_events;
void runner_record(struct runner *r);
void arm_timeout(struct runner *r, int64_t since_ms);
bool runner_move(struct runner *r, enum runner_event ev);
int pool_slot(const struct scheduler *s, const struct config_pool *pool);
void on_runner_timer_closed(uv_handle_t *h);
/* Fails the runner (ev is fail or timeout) for `why` with a reason, and tears its guest
 * down. */
void runner_end(struct runner *r, enum runner_event ev, enum runner_failure why, const char *fmt,
                ...) __attribute__((format(printf, 4, 5)));
#define runner_fail(r, why, ...) runner_end((r), RUNNER_EV_FAIL, (why), __VA_ARGS__)
/* Into `out`, the build of `pool`'s image a new runner on `host` boots now
 * (image_manifest_id); false when it is not known (no manifest yet, a container pool). */
bool runner_image_now(struct scheduler *s, const struct config_pool *pool, const char *host,
                      char out[72]);
/* Counts a runner of `pool` that failed for `why` (and its job, if it was busy). */
void scheduler_count_failure(struct scheduler *s, const char *pool, enum runner_failure why,
                             bool job_lost);
/* A runner no longer wanted, which has no job: it goes the way a finished one does. */
void runner_retire(struct runner *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void on_github_deleted_quiet(void *data, int err, const char *message);
/* Removes the runner GitHub registered for `pool`: through its scale set, or the REST
 * API in `scope`. */
int runner_unregister(struct scheduler *s, const struct config_pool *pool,
                      const struct github_scope *scope, int64_t runner_id, github_done_cb cb,
                      void *data);
const struct github_scope *scheduler_pool_scope(const struct scheduler *s,
                                                const struct config_pool *p);
void runner_create(struct scheduler *s, const struct config_pool *pool, const char *host);
void scheduler_observe(struct scheduler *s, const char *pool, enum pool_histogram_kind kind,
                       double seconds);
struct runner *runner_find(struct scheduler *s, const char *name);
void runner_index(struct runner *r);

/* reconcile.c */
struct reconciler *reconciler_new(size_t n_scopes);
void reconciler_free(struct reconciler *rec);
void reconcile_pass_add(struct scheduler *s, uint64_t t0);
void verify_late_jobs(struct scheduler *s);
void reconcile_recover(struct scheduler *s);
void reconcile_pass(struct scheduler *s);
void on_reconcile(uv_timer_t *t);

/* Recounts demand soon: at most one recount per loop iteration (scheduler_kick). */
static inline void scheduler_recount(struct scheduler *s)
{
    uv_timer_start(&s->tick, s->on_tick, 0, 0);
}

/* scheduler_recount as a callback: `data` is the scheduler. */
static inline void scheduler_recount_cb(void *data)
{
    scheduler_recount(data);
}

#endif
