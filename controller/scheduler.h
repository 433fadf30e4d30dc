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
#include "runner.h"
#include "runner_lifecycle.h"
#include "scheduler_stats.h"

struct config;
struct github_client;
struct image_cache;
struct github_scope;
struct provider;
struct scalesets;
struct scheduler;
struct store;

/* A scheduler working with `deps` (runner.h), copied. */
int scheduler_new(const struct runner_deps *deps, struct scheduler **ret);
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

/* Admin API. `rows` (store_runners_list's answer) with each runner's state as memory has
 * it (ahead of the store by at most a commit); returns `rows`. */
json_t *scheduler_runners_json(struct scheduler *s, json_t *rows);
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

const struct scheduler_stats *scheduler_stats_get(const struct scheduler *s);

#endif
