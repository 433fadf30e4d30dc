/* The scheduler's counters and histograms, whole and per pool: what runners, the tick and
 * the reconciler count, and what /metrics shows (docs/RUNNING.md: "Metrics"). One struct
 * scheduler_stats per scheduler; runner.c, reconcile.c and scheduler.c add to it, metrics.c
 * reads it. */
#ifndef HATCHERY_SCHEDULER_STATS_H
#define HATCHERY_SCHEDULER_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hatchery/limits.h"

struct scheduler_stats {
    uint64_t created, deleted, failed;
    uint64_t jobs_lost;           /* busy runners that failed: GitHub fails their jobs */
    uint64_t surplus_retired;     /* idle runners beyond demand, retired */
    uint64_t outdated_retired;    /* idle runners of a replaced image, retired */
    uint64_t transitions_refused; /* moves the lifecycle table does not allow */
    uint64_t job_mismatches;      /* job news for a runner that runs another job: ignored */
    uint64_t adopted, adopt_failed;
    double adopt_seconds_max; /* this hatcheryd's start to an adopted agent's resumed */
    uint64_t reconcile_domains_removed, reconcile_github_deleted, reconcile_jobs_found,
        reconcile_records_failed, reconcile_ticks, reconcile_github_skipped,
        reconcile_volumes_removed, reconcile_phantoms_retired, reconcile_stuck_retired;
    uint64_t late_jobs_verified, late_jobs_retired; /* late or replayed queued deliveries */
    double reconcile_last_ms;
    /* Per pool, by name: every configured pool from the start (so that each series is
     * there at 0; a pool renamed or removed by a reload keeps its series until a
     * restart; past CONFIG_MAX_POOLS names, new ones are not counted). */
    struct pool_stats *pools;
    size_t n_pools;
};

/* Why a runner failed: a bounded set, the `reason` label of hatchery_runners_failed_total
 * and hatchery_jobs_lost_total (docs/RUNNING.md: "Metrics"). */
enum runner_failure {
    FAILURE_BOOT_TIMEOUT, /* no guest, hello or runner start within boot_timeout_s */
    FAILURE_GUEST,        /* the guest could not be made, failed or went away */
    FAILURE_AGENT,        /* the agent could not be given its config */
    FAILURE_GITHUB,       /* no JIT config from GitHub */
    FAILURE_STORE,        /* the store did not record the runner */
    FAILURE_HUNG,         /* no heartbeat from the agent */
    FAILURE_IDLE_MAX_AGE, /* idle past idle_max_age_s */
    FAILURE_JOB_TIMEOUT,  /* busy past job_timeout_s */
    FAILURE_NOT_ADOPTED,  /* an earlier hatcheryd's runner whose guest did not answer */
    FAILURE_RESTART,      /* an earlier hatcheryd's record in flight, not adoptable */
    FAILURE_OPERATOR,     /* deleted by an operator, or its pool removed */
    FAILURE_MAX,
};
extern const char *const runner_failure_names[FAILURE_MAX];

/* Seconds, in buckets counted one by one (cumulative on output). How long a guest takes
 * (boot, online) is bucketed by scheduler_boot_bounds, 0.5 s to 2 min; how long a job
 * waits (start, supplied) by scheduler_wait_bounds, 1 s to 4 h. */
#define SCHEDULER_BOOT_BUCKETS 11
#define SCHEDULER_WAIT_BUCKETS 13
extern const double scheduler_boot_bounds[SCHEDULER_BOOT_BUCKETS];
extern const double scheduler_wait_bounds[SCHEDULER_WAIT_BUCKETS];
struct seconds_histogram {
    uint64_t buckets[SCHEDULER_WAIT_BUCKETS], count;
    double sum;
};
enum pool_histogram_kind {
    HISTOGRAM_BOOT,     /* a runner's creation to its agent's hello */
    HISTOGRAM_ONLINE,   /* a runner's creation to its runner online */
    HISTOGRAM_SUPPLIED, /* a job's queued to a runner online for it */
    HISTOGRAM_START,    /* a job's queued to its in_progress */
    HISTOGRAM_KIND_MAX,
};
struct pool_stats {
    char pool[CONFIG_MAX_NAME_BYTES];
    struct seconds_histogram of[HISTOGRAM_KIND_MAX];
    uint64_t created;
    uint64_t failed[FAILURE_MAX];
    uint64_t jobs_lost[FAILURE_MAX];
};
/* The kind's bucket bounds and their number: a job's wait (supplied, start) by
 * scheduler_wait_bounds, a guest's start (boot, online) by scheduler_boot_bounds. */
static inline const double *pool_histogram_bounds(enum pool_histogram_kind kind, int *ret_n)
{
    bool wait = kind == HISTOGRAM_SUPPLIED || kind == HISTOGRAM_START;
    *ret_n = wait ? SCHEDULER_WAIT_BUCKETS : SCHEDULER_BOOT_BUCKETS;
    return wait ? scheduler_wait_bounds : scheduler_boot_bounds;
}
/* The pool's counters and histograms (made at 0 if it has none yet), or NULL past
 * CONFIG_MAX_POOLS pools. */
struct pool_stats *scheduler_stats_pool(struct scheduler_stats *st, const char *pool);
/* The pool's, or NULL when it has none. */
const struct pool_stats *scheduler_stats_pool_find(const struct scheduler_stats *st,
                                                   const char *pool);
/* Counts a runner of `pool` that failed for `why` (and its job, if it was busy). */
void scheduler_stats_failure(struct scheduler_stats *st, const char *pool, enum runner_failure why,
                             bool job_lost);
/* Counts `seconds` into the pool's histogram of `kind`. */
void scheduler_stats_observe(struct scheduler_stats *st, const char *pool,
                             enum pool_histogram_kind kind, double seconds);
void scheduler_stats_free(struct scheduler_stats *st);

#endif
