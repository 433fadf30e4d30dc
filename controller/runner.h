/* Runners: one runner's life, from its record to its end (the store record, the lifecycle
 * moves of runner_lifecycle.h, the guest's events, creation and adoption), and the
 * registry of this hatcheryd's runners, by id and by name, with each pool's failures in a
 * row. runner.c owns both: it alone makes, changes and frees a runner, and only it sees
 * the structs. The scheduler (scheduler.c) and the reconciler (reconcile.c) read runners
 * and act on them through the calls below. */
#ifndef HATCHERY_RUNNER_H
#define HATCHERY_RUNNER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "github.h"
#include "job.h"
#include "provider.h"
#include "runner_lifecycle.h"
#include "scheduler_stats.h"
#include "store.h"

struct image_cache;
struct scalesets;

/* What the scheduler and its runners work with. The config, the GitHub client, the
 * provider and the scale sets are the daemon's own variables, read through on each use: a
 * reload replaces the config, and a stop sets the clients to NULL (the GitHub client is
 * NULL without a `github` section). */
struct runner_deps {
    uv_loop_t *loop;
    struct store *store;
    struct config *const *config;
    struct github_client *const *github;
    struct provider *const *provider;
    struct image_cache *images;        /* NULL: no pool's image is on this machine to look at */
    const struct github_scope *scopes; /* config.github.runner_scopes, resolved */
    size_t n_scopes;
    struct scalesets *const *scalesets; /* the scale-set pools' jobs and runners, or NULL */
    bool shared_store; /* other instances of this controller take webhooks into it too */
};

/* And what the scheduler gives its runners besides: the counters they add to, and
 * `recount`, which asks it to count demand again soon (a runner ended, a job was found). */
struct runner_env {
    struct runner_deps deps;
    struct scheduler_stats *stats;
    void (*recount)(void *data);
    void *recount_data;
};

static inline const struct config *env_config(const struct runner_env *e)
{
    return *e->deps.config;
}

static inline struct github_client *env_github(const struct runner_env *e)
{
    return *e->deps.github;
}

static inline struct provider *env_provider(const struct runner_env *e)
{
    return *e->deps.provider;
}

static inline struct scalesets *env_scalesets(const struct runner_env *e)
{
    return e->deps.scalesets ? *e->deps.scalesets : NULL;
}

static inline void env_recount(const struct runner_env *e)
{
    e->recount(e->recount_data);
}

/* The scope whose runners `pool` registers (config.github.runner_scopes), or NULL. */
const struct github_scope *env_pool_scope(const struct runner_env *e, const struct config_pool *p);

struct runners;

/* One runner: runner.c's alone; others read it through the calls below. */
struct runner;

enum runner_state runner_state_get(const struct runner *r);
/* Whether it is still on its way or serving (runner_state_live of its state). */
bool runner_live(const struct runner *r);
const char *runner_name(const struct runner *r);
const char *runner_host(const struct runner *r);
/* How it ended, as its record will say: the runner's exit code (-1: none yet) and the
 * reason ("": none). */
int runner_exit_code(const struct runner *r);
const char *runner_reason(const struct runner *r);
/* The pool settings it was made with (a reload does not change them). */
const struct config_pool *runner_pool(const struct runner *r);
/* The build of its pool's image it booted (image_manifest_id), or "". */
const char *runner_booted_image(const struct runner *r);
/* An earlier hatcheryd's runner, waiting for its agent to answer. */
bool runner_adopting(const struct runner *r);
bool runner_has_guest(const struct runner *r);
/* When its runner started (ms), or 0. */
int64_t runner_online_ms(const struct runner *r);
/* The job GitHub gave it, or 0. */
int64_t runner_job_id(const struct runner *r);
/* The next runner of the registry's list, or NULL. */
struct runner *runner_next(const struct runner *r);

/* ---- the registry ---------------------------------------------------------------------- */

/* The registry of this hatcheryd's runners, for `env` (copied). Ids continue the store's;
 * names are hatchery-<controller_id>-<id>. NULL when out of memory. */
struct runners *runners_new(const struct runner_env *env);
/* Runners stay as records: the next start repairs them. One that a store write or a
 * GitHub call still holds is freed when that comes back, not before, so the loop must run
 * on until it has; the registry itself is freed with the last of them. */
void runners_free(struct runners *reg);
const struct runner_env *runners_env(const struct runners *reg);
/* The first runner of the list, newest first; the next is r->next. */
struct runner *runners_first(const struct runners *reg);
/* By name, or NULL. Not a walk: the reconciler looks up every domain and GitHub runner. */
struct runner *runners_find(const struct runners *reg, const char *name);
/* A name this controller gives its runners, and nothing a path could be built from. */
bool runners_name_ours(const struct runners *reg, const char *name);
/* The first id this process gave: records below it are an earlier process's. */
int64_t runners_first_id(const struct runners *reg);

/* Per pool, by its slot in the running config: runners that failed in a row, and no new
 * runner before retry_at (a pool whose runners keep failing backs off, up to 5 minutes). */
int runners_pool_failures(const struct runners *reg, int slot);
int64_t runners_pool_retry_at(const struct runners *reg, int slot);
/* A reload: `next` replaces `old`; each pool's failures follow its name. -ENOMEM changes
 * nothing. */
int runners_config_replace(struct runners *reg, const struct config *old,
                           const struct config *next);

/* Scale-set jobs of `pool` whose runner left before the service said they completed: the
 * service's statistics still count them until then (kept for 10 minutes at most). */
int64_t runners_ended_jobs(struct runners *reg, const char *pool);

/* ---- one runner ------------------------------------------------------------------------ */

/* A new runner of `pool` on `host`, booting `image` (the build runner_image_of found, or
 * ""): recorded, then its JIT config and guest asked for. */
void runner_create(struct runners *reg, const struct config_pool *pool, const char *host,
                   const char *image);
/* An earlier hatcheryd's runner whose guest may still run (its store record): back in
 * memory in its recorded state, its guest re-attached. */
void runner_adopt(struct runners *reg, const struct store_runner_row *row,
                  const struct config_pool *pool, enum runner_state state);
/* The store's word of a job on the runner `name` (a webhook another instance of this
 * controller took, store_jobs_of_live_runners): applied as runner_job_event when it tells
 * the runner something new (a job begun on a runner not yet busy, or its job's end), else
 * nothing. True when applied. */
bool runner_job_event_stored(struct runners *reg, const char *name, int64_t job_id,
                             enum job_status status);
/* GitHub's news of a job (a webhook, or its scale set) for `r`, which a runner's name
 * matched; `r` NULL: none did. */
void runner_job_event(struct runners *reg, struct runner *r, int64_t job_id,
                      enum job_status status);
/* Fails the runner (ev is fail or timeout) for `why` with a reason, and tears its guest
 * down. */
void runner_end(struct runner *r, enum runner_event ev, enum runner_failure why, const char *fmt,
                ...) __attribute__((format(printf, 4, 5)));
#define runner_fail(r, why, ...) runner_end((r), RUNNER_EV_FAIL, (why), __VA_ARGS__)
/* A runner no longer wanted, which has no job: it goes the way a finished one does. */
void runner_retire(struct runner *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Into `out`, the build of `pool`'s image a new runner on `host` boots now
 * (image_manifest_id); false when it is not known (no manifest yet, a container pool). */
bool runner_image_now(const struct runner_env *env, const struct config_pool *pool,
                      const char *host, char out[72]);
/* The same, from the host's image status already asked of the provider. */
bool runner_image_of(const struct runner_env *env, const struct config_pool *pool,
                     const struct image_status *st, char out[72]);
/* The agent's last sign of life: its last heartbeat (asked of the guest), or what the
 * runner last heard from it otherwise. */
int64_t runner_heard_ms(const struct runner *r);
/* The runner's pool's slot in the running config, or -1 when a reload removed the pool.
 * Runners keep the pool settings they were made with. */
int runner_pool_slot(const struct runner *r);

/* Removes the runner GitHub registered for `pool`: through its scale set, or the REST
 * API in `scope`. */
int runner_unregister(const struct runner_env *env, const struct config_pool *pool,
                      const struct github_scope *scope, int64_t runner_id, github_done_cb cb,
                      void *data);
/* A github_done_cb that only logs a failure. */
void on_github_deleted_quiet(void *data, int err, const char *message);

#endif
