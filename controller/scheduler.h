/* The scheduler: keeps, per pool, registered runners equal to demand (DESIGN.md: demand,
 * not 1:1 binding), and drives each runner through its lifecycle, whose states, events,
 * timeouts and owners are one table in runner_lifecycle.h.
 *
 * pending is written to the store before anything is done. creating asks GitHub for a
 * JIT config and the provisioner for a guest at once; booting is the domain started;
 * configured is the config delivered to the agent after its hello; idle is the runner
 * started (registered, waiting); busy comes from the `in_progress` webhook (matched by
 * runner name); finishing from `completed` or the agent's `exited`. Then the guest is torn
 * down and the GitHub runner deleted if it still exists.
 *
 * Demand per pool = queued jobs matching it + min_idle. Runners are created up to the
 * pool's max_runners and the hosts' capacity, placed by spreading (default) or packing, on
 * hosts that are up and not drained. Why a job waits is kept per pool.
 *
 * The reconciler runs at start-up and every reconcile_interval_s. A record an earlier
 * hatcheryd left in configured, idle, busy or finishing is adopted: its guest, found
 * running on its host, is re-attached and its agent resumed, so a restart kills no job.
 * Other records left in flight are failed and their guests removed; a busy one that
 * cannot be adopted is a lost job. Tagged domains without a live record are destroyed;
 * GitHub runners with our prefix and no live record deleted; queued jobs GitHub knows and
 * we do not (lost webhooks) are stored. */
#ifndef HATCHERY_SCHEDULER_H
#define HATCHERY_SCHEDULER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "hatchery/limits.h"
#include "job.h"
#include "runner_lifecycle.h"

struct config;
struct github_client;
struct image_cache;
struct github_scope;
struct provider;
struct scalesets;
struct scheduler;
struct store;

/* What the scheduler works with. The config, the GitHub client and the provider are
 * the daemon's own variables, read through on each use: a reload replaces the config,
 * and a stop sets the clients to NULL (the GitHub client is NULL without a `github`
 * section). */
struct scheduler_deps {
    uv_loop_t *loop;
    struct store *store;
    struct config *const *config;
    struct github_client *const *github;
    struct provider *const *provider;
    struct image_cache *images;        /* NULL: no pool's image is on this machine to look at */
    const struct github_scope *scopes; /* config.github.runner_scopes, resolved */
    size_t n_scopes;
    struct scalesets *const *scalesets; /* the scale-set pools' jobs and runners, or NULL */
};

int scheduler_new(const struct scheduler_deps *deps, struct scheduler **ret);
void scheduler_free(struct scheduler *s);
/* Recounts demand soon (after a webhook, a runner's end, a drain). */
void scheduler_kick(struct scheduler *s);
/* A stored workflow_job event: marks our runner busy or finishing. */
void scheduler_job_event(struct scheduler *s, int64_t job_id, enum job_status status,
                         const char *runner_name);

/* A reload: `next` is about to become the daemon's config (the running one stays in
 * memory). Per-pool and per-host state follows the names; runners keep the settings they
 * were made with. Call it before the config is replaced; -ENOMEM changes nothing. */
int scheduler_config_replace(struct scheduler *s, const struct config *next);

/* Admin API. */
json_t *scheduler_runners_json(struct scheduler *s, bool include_ended);
/* Per pool: live runners by state and why queued jobs wait. */
json_t *scheduler_pool_json(struct scheduler *s, const char *pool);
/* Why queued jobs of `pool` wait, or NULL when they do not. */
const char *scheduler_pool_waiting(struct scheduler *s, const char *pool);
int scheduler_host_drain(struct scheduler *s, const char *host, bool drained);
bool scheduler_host_drained(struct scheduler *s, const char *host);
int scheduler_runner_delete(struct scheduler *s, const char *name);
/* `delete --force`: a live runner is deleted; of one that ended or is unknown here (a name
 * of this controller's), the domain and disk are removed from every host that is up
 * (`*ret_hosts` of them asked) and a reconciler pass starts now, deleting its GitHub runner.
 * Idempotent. -EINVAL for a name that is not this controller's. */
int scheduler_runner_purge(struct scheduler *s, const char *name, int *ret_hosts);
/* Retires idle runners whose guest booted a build of their pool's image other than the one
 * a new runner on their host would boot now (image_manifest_id; `pool` NULL: every pool),
 * as surplus ones go; demand makes their replacements from the current image. Runners of
 * an unknown build (adopted from before schema 7) are left alone. Returns how many went
 * (-ENOMEM when it cannot look); their names are appended to `names` when it is given.
 * With rotate_outdated (the default), the tick does this every ROTATE_EVERY_MS. */
#define ROTATE_EVERY_MS 5000
int scheduler_rotate(struct scheduler *s, const char *pool, json_t *names);
/* Whether the runner is live (not ended). */
bool scheduler_runner_live(struct scheduler *s, const char *name);
/* The console log path of a runner (live or ended), or NULL. */
const char *scheduler_runner_log(struct scheduler *s, const char *name, char *buf, size_t size);

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
const struct scheduler_stats *scheduler_stats_get(const struct scheduler *s);
/* The pool's counters and histograms (made at 0 if it has none yet), or NULL past
 * CONFIG_MAX_POOLS pools. */
struct pool_stats *scheduler_pool_stats(struct scheduler *s, const char *pool);

#endif
