/* The scheduler: demand per pool and placement on hosts, its tick, its start and end, and
 * the admin and metrics views; see scheduler.h. A runner's own life and the registry of
 * runners are runner.c's (runner.h), the reconciler's work reconcile.c's (reconcile.h). */
#include "scheduler.h"
#include "scaleset/scaleset.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "guest_isolation.h"
#include "image_cache.h"
#include "log.h"
#include "reconcile.h"
#include "runner.h"
#include "runner_group.h"
#include "wall_clock.h"

#define TICK_MS 1000

struct scheduler {
    struct runner_deps deps;
    struct runners *runners; /* runner.c's */
    struct reconciler *rec;  /* reconcile.c's */
    uv_timer_t tick;
    uv_timer_t reconcile;
    bool *drained;                             /* per config host */
    struct guest_isolation_log *isolation_log; /* what the journal was told of each host */
    char (*why)[512];                          /* per pool: why queued jobs wait, or "" */
    int64_t rotated_ms;                 /* when the tick last looked for outdated idle runners */
    struct runner_group_checks *groups; /* per scope: the runner group's policy, as GitHub says */
    struct scheduler_stats stats;
    bool counting;    /* the queue's count is being read: the tick waits for it */
    bool tick_again;  /* a recount was asked for meanwhile */
    bool catching_up; /* the live runners' jobs are being read (a shared store) */
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

static const struct runner_env *env(const struct scheduler *s)
{
    return runners_env(s->runners);
}

static void on_tick(uv_timer_t *t);

/* Recounts demand soon: at most one recount per loop iteration. */
static void scheduler_recount(void *data)
{
    struct scheduler *s = data;
    uv_timer_start(&s->tick, on_tick, 0, 0);
}

/* ---- demand and placement ------------------------------------------------------------------- */

/* One tick's view of a host, taken once per tick so that placing N runners over H hosts
 * costs N*H, not N*H*(runners): what the provider says the host runs, and what the runners
 * recorded for it but not yet handed to the provider add (placements of this tick
 * included). */
struct host_view {
    bool known; /* the provider answered for it */
    bool up;
    struct host_status st;
    struct host_usage pending;
    /* The pool being placed: its image on this host, asked once (image_asked). */
    bool image_asked;
    bool image_known;
    struct image_status image;
};

static struct host_view *host_views(struct scheduler *s)
{
    const struct config *c = cfg(s);
    struct host_view *v = calloc(c->n_hosts ? c->n_hosts : 1, sizeof(*v));
    if (!v)
        return NULL;
    for (size_t i = 0; i < c->n_hosts; i++) {
        v[i].known = provider_host_status(prov(s), c->hosts[i].name, &v[i].st) == 0;
        v[i].up = v[i].known && v[i].st.up;
    }
    for (struct runner *r = runners_first(s->runners); r; r = runner_next(r)) {
        int i = runner_state_get(r) == RUNNER_PENDING ? config_host_index(c, runner_host(r)) : -1;
        if (i >= 0) {
            v[i].pending.guests++;
            v[i].pending.vcpus += runner_pool(r)->vcpus;
            v[i].pending.memory_mib += runner_pool(r)->memory_mib;
        }
    }
    return v;
}

/* A host for one more guest of `pool` (its index in the config), or -1 with the reason in
 * `why`. */
static int place(struct scheduler *s, struct host_view *views, const struct config_pool *pool,
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
        char reason[384];
        if (guest_isolation_check(h, pool, st, reason, sizeof(reason)) == GUEST_ISOLATION_MISSING) {
            if (!unsafe++)
                snprintf(unsafe_why, sizeof(unsafe_why), "host %s unsafe: %s", h->name, reason);
            continue;
        }
        /* A remote host's image, found through libvirt (host_image.h); a local host's
         * is read from this machine's files, for the whole pool, in tick(). */
        struct host_view *v = &views[i];
        if (pool->backend == BACKEND_VM && !v->image_asked) {
            v->image_asked = true;
            v->image_known = provider_host_image(prov(s), h->name, pool, &v->image) == 0;
        }
        if (pool->backend == BACKEND_VM && v->image_known &&
            (v->image.state == IMAGE_CHECKING || v->image.state == IMAGE_MISSING)) {
            if (!no_image++)
                snprintf(no_image_why, sizeof(no_image_why), "host %s: %s", h->name,
                         v->image.reason);
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

/* Every host's first connection attempt is over (up or down). */
static bool hosts_settled(struct scheduler *s, const struct host_view *views)
{
    for (size_t i = 0; i < cfg(s)->n_hosts; i++)
        if (views[i].known && views[i].st.connecting)
            return false;
    return true;
}

/* A guest whose agent went silent in idle or busy is hung: it is replaced. */
static void check_heartbeats(struct scheduler *s)
{
    int64_t limit_ms = cfg(s)->heartbeat_timeout_s * 1000, now = wall_clock_ms();
    for (struct runner *r = runners_first(s->runners), *next; r; r = next) {
        next = runner_next(r);
        if (!runner_state_heartbeats(runner_state_get(r)) || runner_adopting(r) ||
            !runner_has_guest(r))
            continue;
        int64_t heard_ms = runner_heard_ms(r);
        if (now - heard_ms > limit_ms)
            runner_fail(r, FAILURE_HUNG, "hung: no heartbeat from the agent for %lld s",
                        (long long)((now - heard_ms) / 1000));
    }
}

/* Idle runners beyond demand (a cancelled burst): the ones idle longer than the pool's
 * surplus_idle_s go, oldest first, up to `surplus` of them. */
static void retire_surplus(struct scheduler *s, const struct config_pool *pool, int64_t surplus)
{
    int64_t now = wall_clock_ms(), limit_ms = pool->surplus_idle_s * 1000;
    while (surplus-- > 0) {
        struct runner *oldest = NULL;
        for (struct runner *r = runners_first(s->runners); r; r = runner_next(r))
            if (runner_state_get(r) == RUNNER_IDLE && !runner_adopting(r) &&
                strcmp(runner_pool(r)->name, pool->name) == 0 &&
                now - runner_online_ms(r) >= limit_ms &&
                (!oldest || runner_online_ms(r) < runner_online_ms(oldest)))
                oldest = r;
        if (!oldest)
            return;
        log_info("runner.surplus", "runner=%s pool=%s idle_s=%lld", runner_name(oldest), pool->name,
                 (long long)((now - runner_online_ms(oldest)) / 1000));
        s->stats.surplus_retired++;
        runner_retire(oldest, "surplus: idle beyond demand for %lld s",
                      (long long)((now - runner_online_ms(oldest)) / 1000));
    }
}

/* A reload removed their pool: runners without a job go now; busy ones finish theirs
 * and are not replaced. */
static void retire_removed(struct scheduler *s)
{
    for (struct runner *r = runners_first(s->runners), *next; r; r = next) {
        next = runner_next(r);
        if (!runner_state_unbusy(runner_state_get(r)) || runner_adopting(r) ||
            runner_pool_slot(r) >= 0)
            continue;
        if (runner_lifecycle_next(runner_state_get(r), RUNNER_EV_RETIRE) >= 0)
            runner_retire(r, "its pool %s was removed from the config", runner_pool(r)->name);
        else
            runner_fail(r, FAILURE_OPERATOR, "its pool %s was removed from the config",
                        runner_pool(r)->name);
    }
}

int scheduler_rotate(struct scheduler *s, const char *pool, json_t *names)
{
    /* The current build per pool and host, asked once each: thousands of idle runners
     * share a few of them. 0: not asked yet, 1: known, -1: unknown. */
    const struct config *c = cfg(s);
    size_t n = c->n_pools * c->n_hosts;
    struct current {
        int known;
        char image[72];
    } *current = calloc(n + 1, sizeof(*current));
    if (!current)
        return -ENOMEM;
    int retired = 0;
    for (struct runner *r = runners_first(s->runners), *next; r; r = next) {
        next = runner_next(r);
        int p = runner_pool_slot(r), h = config_host_index(c, runner_host(r));
        if (runner_state_get(r) != RUNNER_IDLE || runner_adopting(r) ||
            !runner_booted_image(r)[0] || p < 0 || h < 0 ||
            (pool && strcmp(runner_pool(r)->name, pool) != 0))
            continue;
        struct current *now = &current[(size_t)p * c->n_hosts + (size_t)h];
        if (!now->known)
            now->known =
                runner_image_now(env(s), runner_pool(r), runner_host(r), now->image) ? 1 : -1;
        if (now->known < 0 || strcmp(now->image, runner_booted_image(r)) == 0)
            continue;
        log_info("runner.outdated", "runner=%s pool=%s host=%s image=%s current=%s", runner_name(r),
                 runner_pool(r)->name, runner_host(r), runner_booted_image(r), now->image);
        if (names)
            json_array_append_new(names, json_string(runner_name(r)));
        s->stats.outdated_retired++;
        retired++;
        runner_retire(r, "outdated: its image was replaced (%.12s, now %.12s)",
                      runner_booted_image(r), now->image);
    }
    free(current);
    return retired;
}

/* Warm templates (start: template): one per runner a pool may run at once on each of its
 * hosts that is not drained. The provisioner builds what is missing, one at a time. */
static void keep_templates(struct scheduler *s, const struct host_view *views)
{
    const struct config *c = cfg(s);
    for (size_t p = 0; p < c->n_pools; p++) {
        const struct config_pool *pool = &c->pools[p];
        if (pool->start != START_TEMPLATE || pool->backend != BACKEND_VM)
            continue;
        for (size_t i = 0; i < c->n_hosts; i++) {
            const struct config_host *h = &c->hosts[i];
            char why[512];
            /* A template boots the pool's guest, network and all. While the host is away,
             * its isolation is not known: its templates are kept wanted meanwhile. */
            if (!config_pool_uses_host(pool, h->name) || s->drained[i] ||
                (views[i].up && guest_isolation_check(h, pool, &views[i].st, why, sizeof(why)) ==
                                    GUEST_ISOLATION_MISSING))
                continue;
            int64_t n = pool->max_runners < h->max_guests ? pool->max_runners : h->max_guests;
            provider_templates_want(prov(s), h->name, pool, (int)n);
        }
    }
    for (size_t i = 0; i < c->n_hosts; i++)
        provider_templates_sweep(prov(s), c->hosts[i].name);
}

/* Whether trusted `pool` may get runners: its scope's runner group restricted to pinned
 * workflows, as GitHub last said (asked for the first time here). When it may not, its
 * idle runners go: GitHub could give them to any workflow now. */
static bool trusted_pool_allowed(struct scheduler *s, const struct config_pool *pool, char *why,
                                 size_t why_size)
{
    const struct github_scope *sc = env_pool_scope(env(s), pool);
    size_t i = sc ? (size_t)(sc - s->deps.scopes) : s->deps.n_scopes;
    runner_group_checks_ask(s->groups, gh(s), i, true, scheduler_recount, s);
    if (runner_group_checks_allow(s->groups, i, why, why_size))
        return true;
    for (struct runner *r = runners_first(s->runners), *next; r; r = next) {
        next = runner_next(r);
        if (runner_state_get(r) == RUNNER_IDLE && !runner_adopting(r) && runner_pool(r) == pool) {
            log_info("runner.group_open", "runner=%s pool=%s", runner_name(r), pool->name);
            runner_retire(r, "%s", why);
        }
    }
    return false;
}

/* Each connected host's guest isolation, told to the journal when it changes: a host
 * that gets no networked guest says why where operators look first. */
static void note_isolation(struct scheduler *s, const struct host_view *views)
{
    const struct config *c = cfg(s);
    for (size_t i = 0; i < c->n_hosts; i++) {
        if (!views[i].up)
            continue;
        char why[512];
        enum guest_isolation_state state =
            guest_isolation_host(c, &c->hosts[i], &views[i].st, why, sizeof(why));
        guest_isolation_log_note(s->isolation_log, c->hosts[i].name, state, why);
    }
}

/* The part of a tick that needs no count of the queue: true when demand is to be counted
 * (GitHub is configured and an earlier process's runners are recovered). */
static bool tick_begin(struct scheduler *s)
{
    const struct config *c = cfg(s);
    check_heartbeats(s);
    retire_removed(s);
    if (c->rotate_outdated && wall_clock_ms() - s->rotated_ms >= ROTATE_EVERY_MS) {
        s->rotated_ms = wall_clock_ms();
        scheduler_rotate(s, NULL, NULL); /* their replacements are made below, this tick */
    }
    struct host_view *views = host_views(s);
    if (!views)
        return false; /* out of memory: the next tick tries again */
    note_isolation(s, views);
    if (!reconcile_recovered(s->rec) && hosts_settled(s, views))
        reconcile_recover(s->rec); /* as soon as every host's first connection has been tried;
                                      it asks for a recount when done */
    if (!gh(s)) {
        for (size_t p = 0; p < c->n_pools; p++)
            snprintf(s->why[p], sizeof(s->why[p]), "GitHub is not configured");
        free(views);
        return false;
    }
    if (!reconcile_recovered(s->rec)) {
        /* An earlier hatcheryd's runners are not counted yet: wait for reconcile_recover(). */
        for (size_t p = 0; p < c->n_pools; p++)
            snprintf(s->why[p], sizeof(s->why[p]), "recovering the runners of before the restart");
        free(views);
        return false;
    }
    free(views);
    return true;
}

/* The rest of a tick, with the store's count of queued jobs (store_jobs_queue_read's rows;
 * NULL when it could not be read). */
static void tick_demand(struct scheduler *s, json_t *queue_rows)
{
    const struct config *c = cfg(s);
    if (!gh(s) || !reconcile_recovered(s->rec))
        return; /* a stop or a reload since the tick began */
    /* The provider is asked once per host for the rest of the tick. */
    struct host_view *views = host_views(s);
    if (!views)
        return; /* out of memory: the next tick tries again */
    struct store_pool_queue *queue = calloc(c->n_pools + 1, sizeof(*queue));
    if (!queue || store_jobs_queue_by_pool(queue_rows, c, queue) < 0) {
        free(queue);
        free(views);
        return; /* the next tick counts again */
    }
    reconcile_verify_late_jobs(s->rec);
    struct github_stats gs;
    github_client_stats(gh(s), &gs);
    bool rate_limited = gs.ratelimit_remaining == 0 && gs.ratelimit_reset * 1000 > wall_clock_ms();
    for (size_t p = 0; p < c->n_pools; p++) {
        const struct config_pool *pool = &c->pools[p];
        int64_t queued = queue[p].verified;
        /* took: runners that took a job, which a scale set's runner holds until the service
         * says it completed, finishing or not (the statistics count the job till then). */
        int64_t unbusy = 0, live = 0, took = 0;
        for (struct runner *r = runners_first(s->runners); r; r = runner_next(r)) {
            if (strcmp(runner_pool(r)->name, pool->name) != 0 || !runner_live(r))
                continue;
            live++;
            if (runner_state_unbusy(runner_state_get(r)))
                unbusy++;
            if (runner_job_id(r) || runner_state_get(r) == RUNNER_BUSY)
                took++;
        }
        if (pool->scale_set) {
            /* Its jobs are the ones the service assigned to the scale set, running ones
             * included: those still to start are what is not busy yet. */
            int64_t assigned = scalesets_assigned(env_scalesets(env(s)), pool->name);
            if (assigned < 0) {
                snprintf(s->why[p], sizeof(s->why[p]),
                         assigned == -1 ? "waiting for scale set %s"
                                        : "scale set %s is not listened to: restart hatcheryd "
                                          "(a scale_set added by a reload)",
                         pool->scale_set);
                continue;
            }
            /* And jobs whose runner left before the service completed them. */
            took += runners_ended_jobs(s->runners, pool->name);
            queued = assigned > took ? assigned - took : 0;
        }
        for (size_t i = 0; i < c->n_hosts; i++)
            views[i].image_asked = views[i].image_known = false; /* asked again per pool */
        int64_t want = queued + pool->min_idle - unbusy;
        int64_t room = pool->max_runners - live;
        if (want < 0)
            retire_surplus(s, pool, -want);
        s->why[p][0] = 0;
        if (pool->trusted && !trusted_pool_allowed(s, pool, s->why[p], sizeof(s->why[p])))
            continue;
        /* Whether the image is on this machine: a host of this pool is. The pools of a
         * controller of remote hosts are not judged by another pool's local host; their
         * image is looked for on each host (place()). */
        bool local = config_pool_has_local_host(c, pool);
        /* The image and its manifest as a look at the files after this demand began found
         * them (image_cache.h: off the loop, once a second while wanted, kicking a recount
         * when back): an image rebuilt for another arch, or one without a manifest, gets
         * no runner. */
        bool image_pending = false;
        const struct image_cache_entry *image =
            local && want > 0 && s->deps.images
                ? image_cache_check(s->deps.images, pool->image, &image_pending)
                : NULL;
        bool local_missing = image && image->image_errno != 0;
        char image_error[sizeof(s->why[p])] = "";
        if (image_pending)
            snprintf(image_error, sizeof(image_error), "looking at the image");
        else if (image && !local_missing && pool->backend == BACKEND_VM)
            image_cache_entry_manifest(image, (enum pool_arch)pool->arch, image_error,
                                       sizeof(image_error));
        while (want > 0) {
            if (room <= 0) {
                snprintf(s->why[p], sizeof(s->why[p]), "pool at max_runners (%lld)",
                         (long long)pool->max_runners);
                break;
            }
            int64_t retry_at = runners_pool_retry_at(s->runners, (int)p);
            if (retry_at > wall_clock_ms()) {
                snprintf(s->why[p], sizeof(s->why[p]),
                         "%d runner(s) failed in a row: retrying in %lld s",
                         runners_pool_failures(s->runners, (int)p),
                         (long long)((retry_at - wall_clock_ms()) / 1000 + 1));
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
            int h = place(s, views, pool, s->why[p], sizeof(s->why[p]));
            if (h < 0)
                break;
            struct host_view *v = &views[h];
            v->pending.guests++;
            v->pending.vcpus += pool->vcpus;
            v->pending.memory_mib += pool->memory_mib;
            char build[72] = "";
            if (v->image_known)
                runner_image_of(env(s), pool, &v->image, build);
            runner_create(s->runners, pool, c->hosts[h].name, build);
            want--;
            room--;
        }
    }
    keep_templates(s, views);
    free(views);
    free(queue);
}

static void on_queue_counted(void *data, json_t *rows)
{
    struct scheduler *s = data;
    s->counting = false;
    tick_demand(s, rows);
    if (s->tick_again) {
        s->tick_again = false;
        scheduler_recount(s);
    }
}

/* How far back a job's end, stored by another instance, is still news for a live runner:
 * a runner lives hours at most, and the instances' clocks (which stamp updated_at) need
 * not agree to the second. */
#define STORED_JOB_END_WINDOW_MS (6 * 3600 * 1000)

static void on_stored_job_events(void *data, json_t *rows)
{
    struct scheduler *s = data;
    s->catching_up = false;
    bool news = false;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        enum job_status status;
        if (job_status_parse(json_string_value(json_object_get(row, "status")), &status) < 0)
            continue;
        news |= runner_job_event_stored(s->runners,
                                        json_string_value(json_object_get(row, "runner_name")),
                                        json_integer_value(json_object_get(row, "id")), status);
    }
    if (news)
        scheduler_recount(s);
}

/* With a shared store, the webhooks another instance took reach this one (the leader)
 * through the store alone: each tick reads what the jobs of its live runners say, and a
 * runner given its job there goes busy here as if the webhook had come here. */
static void catch_up_stored_job_events(struct scheduler *s)
{
    if (!s->deps.shared_store || s->catching_up)
        return;
    s->catching_up =
        store_jobs_of_live_runners(s->deps.store, s, wall_clock_ms() - STORED_JOB_END_WINDOW_MS,
                                   on_stored_job_events, s) == 0;
}

/* A tick: what needs no count now, then, when demand is to be counted, the store's count
 * of queued jobs (read off the loop) and the rest once it comes. A tick asked for while the
 * count is on its way runs after it. */
static void on_tick(uv_timer_t *t)
{
    struct scheduler *s = t->data;
    uv_timer_start(&s->tick, on_tick, TICK_MS, 0);
    catch_up_stored_job_events(s);
    if (s->counting) {
        s->tick_again = true;
        return;
    }
    if (tick_begin(s))
        s->counting = store_jobs_queue_read(s->deps.store, s, on_queue_counted, s) == 0;
}

void scheduler_kick(struct scheduler *s)
{
    scheduler_recount(s);
}

static void on_reconcile(uv_timer_t *t)
{
    struct scheduler *s = t->data;
    reconcile_pass(s->rec);
}

void scheduler_job_event(struct scheduler *s, int64_t job_id, enum job_status status,
                         const char *runner_name)
{
    runner_job_event(s->runners, runner_name ? runners_find(s->runners, runner_name) : NULL, job_id,
                     status);
    scheduler_kick(s);
}

/* ---- lifetime and admin -----------------------------------------------------------------------
 */

int scheduler_new(const struct runner_deps *deps, struct scheduler **ret)
{
    struct scheduler *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->deps = *deps;
    const struct runner_env env = {
        .deps = *deps, .stats = &s->stats, .recount = scheduler_recount, .recount_data = s};
    s->drained = calloc(cfg(s)->n_hosts + 1, sizeof(bool));
    s->why = calloc(cfg(s)->n_pools + 1, sizeof(*s->why));
    s->runners = runners_new(&env);
    s->isolation_log = guest_isolation_log_new();
    s->groups = runner_group_checks_new(s->deps.scopes, s->deps.n_scopes);
    s->rec = s->runners && s->groups ? reconciler_new(s->runners, s->groups) : NULL;
    if (!s->drained || !s->why || !s->runners || !s->rec || !s->isolation_log || !s->groups) {
        guest_isolation_log_free(s->isolation_log);
        reconciler_free(s->rec);
        runner_group_checks_free(s->groups);
        runners_free(s->runners); /* none made: freed now */
        free(s->drained);
        free(s->why);
        free(s);
        return -ENOMEM;
    }
    for (size_t h = 0; h < cfg(s)->n_hosts; h++)
        s->drained[h] = store_host_drained_sync(s->deps.store, cfg(s)->hosts[h].name);
    for (size_t p = 0; p < cfg(s)->n_pools; p++)
        scheduler_stats_pool(&s->stats, cfg(s)->pools[p].name); /* each series from 0 */
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
    store_reads_forget(s->deps.store, s);
    reconciler_free(s->rec);
    s->rec = NULL;
    /* Runners stay as records: the next start repairs them (runners_free). */
    runners_free(s->runners);
    s->runners = NULL;
    guest_isolation_log_free(s->isolation_log);
    runner_group_checks_free(s->groups);
    s->groups = NULL;
    free(s->drained);
    free(s->why);
    scheduler_stats_free(&s->stats);
    /* The tick and reconcile handles close in this loop iteration; s outlives them by
     * being freed from the daemon after uv_run returns. */
}

int scheduler_config_replace(struct scheduler *s, const struct config *next)
{
    const struct config *old = cfg(s), *c = next;
    bool *drained = calloc(c->n_hosts + 1, sizeof(bool));
    char(*why)[512] = calloc(c->n_pools + 1, sizeof(*why));
    if (!drained || !why || runners_config_replace(s->runners, old, next) < 0) {
        free(drained);
        free(why);
        return -ENOMEM;
    }
    /* Per-pool and per-host state follows the name. */
    for (size_t i = 0; i < c->n_pools; i++) {
        int j = config_pool_index(old, c->pools[i].name);
        if (j >= 0)
            memcpy(why[i], s->why[j], sizeof(why[i]));
    }
    for (size_t i = 0; i < c->n_hosts; i++) {
        int j = config_host_index(old, c->hosts[i].name);
        if (j >= 0)
            drained[i] = s->drained[j];
    }
    free(s->drained);
    free(s->why);
    s->drained = drained;
    s->why = why;
    for (size_t p = 0; p < c->n_pools; p++)
        scheduler_stats_pool(&s->stats, c->pools[p].name);
    if (c->reconcile_interval_s != old->reconcile_interval_s)
        uv_timer_start(&s->reconcile, on_reconcile, (uint64_t)c->reconcile_interval_s * 1000,
                       (uint64_t)c->reconcile_interval_s * 1000);
    scheduler_kick(s);
    return 0;
}

json_t *scheduler_runners_json(struct scheduler *s, json_t *rows)
{
    size_t i;
    json_t *row;
    /* Memory is ahead of the store by at most a commit: show the live state. */
    json_array_foreach(rows, i, row)
    {
        struct runner *r =
            runners_find(s->runners, json_string_value(json_object_get(row, "name")));
        const char *stored = json_string_value(json_object_get(row, "state"));
        if (r) {
            /* What memory knows of its end too: the read may have run before its commit. */
            json_object_set_new(row, "state", json_string(runner_state_names[runner_state_get(r)]));
            if (runner_exit_code(r) >= 0)
                json_object_set_new(row, "exit_code", json_integer(runner_exit_code(r)));
            if (runner_reason(r)[0])
                json_object_set_new(row, "reason", json_string(runner_reason(r)));
        } else if (stored && strcmp(stored, "deleted") != 0 && strcmp(stored, "failed") != 0)
            /* A record from before a restart that the reconciler has not repaired yet. */
            json_object_set_new(row, "state", json_string("recovering"));
    }
    return rows;
}

json_t *scheduler_pool_json(struct scheduler *s, const char *pool)
{
    json_t *states = json_object();
    int64_t live = 0;
    for (int st = 0; st < RUNNER_DELETED; st++)
        json_object_set_new(states, runner_state_names[st], json_integer(0));
    for (struct runner *r = runners_first(s->runners); r; r = runner_next(r)) {
        if (strcmp(runner_pool(r)->name, pool) != 0 || !runner_live(r))
            continue;
        json_t *n = json_object_get(states, runner_state_names[runner_state_get(r)]);
        json_integer_set(n, json_integer_value(n) + 1);
        live++;
    }
    const char *why = scheduler_pool_waiting(s, pool);
    int p = config_pool_index(cfg(s), pool);
    int64_t backoff_ms = p >= 0 ? runners_pool_retry_at(s->runners, p) - wall_clock_ms() : 0;
    json_t *o = json_pack("{s:I, s:o, s:o, s:i, s:f}", "live", (json_int_t)live, "by_state", states,
                          "waiting", why ? json_string(why) : json_null(), "failures_in_a_row",
                          runners_pool_failures(s->runners, p), "backoff_s",
                          backoff_ms > 0 ? (double)backoff_ms / 1000.0 : 0.0);
    const struct github_scope *sc = p >= 0 ? env_pool_scope(env(s), &cfg(s)->pools[p]) : NULL;
    json_t *group = sc && cfg(s)->pools[p].trusted
                        ? runner_group_checks_json(s->groups, (size_t)(sc - s->deps.scopes))
                        : NULL;
    if (o && group)
        json_object_set_new(o, "runner_group", group);
    else
        json_decref(group);
    return o;
}

const char *scheduler_pool_waiting(struct scheduler *s, const char *pool)
{
    int p = config_pool_index(cfg(s), pool);
    return p >= 0 && s->why[p][0] ? s->why[p] : NULL;
}

int scheduler_host_drain(struct scheduler *s, const char *host, bool drained)
{
    int h = config_host_index(cfg(s), host);
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
    int h = config_host_index(cfg(s), host);
    return h >= 0 && s->drained[h];
}

int scheduler_runner_delete(struct scheduler *s, const char *name)
{
    struct runner *r = runners_find(s->runners, name);
    if (!r || !runner_live(r))
        return -ENOENT;
    runner_fail(r, FAILURE_OPERATOR, "deleted by an operator");
    return 0;
}

int scheduler_runner_purge(struct scheduler *s, const char *name, int *ret_hosts)
{
    *ret_hosts = 0;
    if (!runners_name_ours(s->runners, name))
        return -EINVAL;
    struct runner *r = runners_find(s->runners, name);
    if (r && runner_live(r)) {
        runner_fail(r, FAILURE_OPERATOR, "deleted by an operator");
        return 0;
    }
    /* Ended or never known here: its domain and disk wherever they are left, now; its
     * GitHub registration and orphan disks by a reconciler pass started now, which deletes
     * every runner of ours GitHub still lists that is not live. */
    const struct config *c = cfg(s);
    for (size_t i = 0; i < c->n_hosts; i++)
        if (provider_remove(prov(s), c->hosts[i].name, name, NULL, NULL) == 0)
            (*ret_hosts)++;
    log_info("runner.purge",
             "runner=%s hosts=%d action=\"domain and disk removed where found; "
             "a reconciler pass deletes its GitHub runner\"",
             name, *ret_hosts);
    uv_timer_start(&s->reconcile, on_reconcile, 0, (uint64_t)c->reconcile_interval_s * 1000);
    return 0;
}

bool scheduler_runner_live(struct scheduler *s, const char *name)
{
    struct runner *r = runners_find(s->runners, name);
    return r && runner_live(r);
}

const char *scheduler_runner_log(struct scheduler *s, const char *name, char *buf, size_t size)
{
    if (!runners_name_ours(s->runners, name))
        return NULL;
    snprintf(buf, size, "%s/logs/%s.console.log", cfg(s)->state_dir, name);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

const struct scheduler_stats *scheduler_stats_get(const struct scheduler *s)
{
    return &s->stats;
}
