/* The scheduler's counters and histograms; see scheduler_stats.h. */
#include "scheduler_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double scheduler_boot_bounds[SCHEDULER_BOOT_BUCKETS] = {0.5, 1,  2,  5,  10, 15,
                                                              20,  30, 45, 60, 120};
const double scheduler_wait_bounds[SCHEDULER_WAIT_BUCKETS] = {
    1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400};

const char *const runner_failure_names[FAILURE_MAX] = {
    [FAILURE_BOOT_TIMEOUT] = "boot_timeout",
    [FAILURE_GUEST] = "guest",
    [FAILURE_AGENT] = "agent",
    [FAILURE_GITHUB] = "github",
    [FAILURE_STORE] = "store",
    [FAILURE_HUNG] = "hung",
    [FAILURE_IDLE_MAX_AGE] = "idle_max_age",
    [FAILURE_JOB_TIMEOUT] = "job_timeout",
    [FAILURE_NOT_ADOPTED] = "not_adopted",
    [FAILURE_RESTART] = "restart",
    [FAILURE_OPERATOR] = "operator",
};

const struct pool_stats *scheduler_stats_pool_find(const struct scheduler_stats *st,
                                                   const char *pool)
{
    for (size_t i = 0; i < st->n_pools; i++)
        if (strcmp(st->pools[i].pool, pool) == 0)
            return &st->pools[i];
    return NULL;
}

struct pool_stats *scheduler_stats_pool(struct scheduler_stats *st, const char *pool)
{
    for (size_t i = 0; i < st->n_pools; i++)
        if (strcmp(st->pools[i].pool, pool) == 0)
            return &st->pools[i];
    if (st->n_pools == CONFIG_MAX_POOLS)
        return NULL;
    if (!st->pools && !(st->pools = calloc(CONFIG_MAX_POOLS, sizeof(*st->pools))))
        return NULL;
    struct pool_stats *ps = &st->pools[st->n_pools++];
    snprintf(ps->pool, sizeof(ps->pool), "%s", pool);
    return ps;
}

void scheduler_stats_failure(struct scheduler_stats *st, const char *pool, enum runner_failure why,
                             bool job_lost)
{
    st->failed++;
    if (job_lost)
        st->jobs_lost++;
    struct pool_stats *ps = scheduler_stats_pool(st, pool);
    if (ps) {
        ps->failed[why]++;
        if (job_lost)
            ps->jobs_lost[why]++;
    }
}

void scheduler_stats_observe(struct scheduler_stats *st, const char *pool,
                             enum pool_histogram_kind kind, double seconds)
{
    struct pool_stats *ph = scheduler_stats_pool(st, pool);
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

void scheduler_stats_free(struct scheduler_stats *st)
{
    free(st->pools);
    st->pools = NULL;
    st->n_pools = 0;
}
