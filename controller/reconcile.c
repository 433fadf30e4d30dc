/* The reconciler; see reconcile.h. */
#include "reconcile.h"
#include "scaleset/scaleset.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "runner.h"
#include "runner_group.h"
#include "webhook.h"
#include "wall_clock.h"

/* An org scope's repositories, listed through the installation and cached, so that lost
 * jobs are found across them a few repositories per pass. */
struct org_repos {
    char **names;
    size_t n;
    size_t cursor;
    int64_t listed_ms;
    bool listing;
};

struct orphan;

/* The reconciler's own state: what its passes have in flight, the GitHub runners it
 * retries deleting, and each org scope's repositories. */
struct reconciler {
    struct runners *runners;
    const struct runner_env *env;
    struct runner_group_checks *groups;
    bool recovered;          /* reconcile_recover() ran */
    bool recovering;         /* its read of the store is on its way */
    double pass_ms;          /* the loop time of the pass so far, callbacks included */
    int lists_pending;       /* GitHub lists of passes not answered yet */
    int late_checks_pending; /* late queued jobs asked about, not settled yet */
    /* Store reads not answered yet: reconciler_free leaves the reconciler itself to the
     * last of them (the store answers every read, by its close at the latest). */
    int reads_out;
    bool closing;
    struct org_repos *org_repos; /* per scope (used by org scopes) */
    size_t n_scopes;
    struct orphan *orphans;
    size_t n_orphans;
};

struct reconciler *reconciler_new(struct runners *reg, struct runner_group_checks *groups)
{
    struct reconciler *rec = calloc(1, sizeof(*rec));
    if (!rec)
        return NULL;
    rec->runners = reg;
    rec->env = runners_env(reg);
    rec->groups = groups;
    size_t n_scopes = rec->env->deps.n_scopes;
    rec->org_repos = calloc(n_scopes + 1, sizeof(*rec->org_repos));
    if (!rec->org_repos) {
        free(rec);
        return NULL;
    }
    rec->n_scopes = n_scopes;
    return rec;
}

void reconciler_free(struct reconciler *rec)
{
    if (!rec)
        return;
    free(rec->orphans);
    for (size_t i = 0; i < rec->n_scopes; i++) {
        for (size_t k = 0; k < rec->org_repos[i].n; k++)
            free(rec->org_repos[i].names[k]);
        free(rec->org_repos[i].names);
    }
    free(rec->org_repos);
    rec->closing = true;
    if (rec->reads_out == 0)
        free(rec);
}

/* A store read of the reconciler's has come back: false when the reconciler was freed
 * meanwhile (the caller then only frees what it kept for the read). */
static bool read_back(struct reconciler *rec)
{
    rec->reads_out--;
    if (!rec->closing)
        return true;
    if (rec->reads_out == 0)
        free(rec);
    return false;
}

bool reconcile_recovered(const struct reconciler *rec)
{
    return rec->recovered;
}

static const struct config *cfg(const struct reconciler *rec)
{
    return env_config(rec->env);
}

static struct github_client *gh(const struct reconciler *rec)
{
    return env_github(rec->env);
}

static struct provider *prov(const struct reconciler *rec)
{
    return env_provider(rec->env);
}

/* Time a reconciler callback spends on the loop counts to its pass. */
static void reconcile_pass_add(struct reconciler *rec, uint64_t t0)
{
    rec->pass_ms += (double)(uv_hrtime() - t0) / 1e6;
    rec->env->stats->reconcile_last_ms = rec->pass_ms;
}

/* ---- reconciliation ----------------------------------------------------------------------- */

static void on_orphan_removed(void *data, int err)
{
    struct reconciler *rec = data;
    if (err == 0)
        rec->env->stats->reconcile_domains_removed++;
}

static void on_tagged(void *data, const char *host, char **names, size_t n)
{
    struct reconciler *rec = data;
    uint64_t t0 = uv_hrtime();
    for (size_t i = 0; i < n; i++) {
        struct runner *r = runners_find(rec->runners, names[i]);
        if (r && runner_live(r))
            continue;
        log_info("reconcile.orphan_domain", "host=%s domain=%s action=remove", host, names[i]);
        provider_remove(prov(rec), host, names[i], on_orphan_removed, rec);
    }
    reconcile_pass_add(rec, t0);
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

static struct orphan *orphan_get(struct reconciler *rec, int64_t github_id, bool add)
{
    for (size_t i = 0; i < rec->n_orphans; i++)
        if (rec->orphans[i].github_id == github_id)
            return &rec->orphans[i];
    if (!add)
        return NULL;
    struct orphan *grown = realloc(rec->orphans, (rec->n_orphans + 1) * sizeof(*grown));
    if (!grown)
        return NULL;
    rec->orphans = grown;
    rec->orphans[rec->n_orphans] = (struct orphan){.github_id = github_id};
    return &rec->orphans[rec->n_orphans++];
}

static void orphan_drop(struct reconciler *rec, struct orphan *o)
{
    *o = rec->orphans[--rec->n_orphans];
}

struct orphan_delete {
    struct reconciler *rec;
    int64_t github_id;
};

static void on_orphan_volumes(void *data, const char *host, char **names, size_t n)
{
    struct reconciler *rec = data;
    uint64_t t0 = uv_hrtime();
    for (size_t i = 0; i < n; i++) {
        struct runner *r = runners_find(rec->runners, names[i]);
        if (r && (runner_live(r) || runner_has_guest(r)))
            continue; /* being created or torn down now */
        log_info("reconcile.orphan_volume", "host=%s volume=%s.qcow2 action=remove", host,
                 names[i]);
        rec->env->stats->reconcile_volumes_removed++;
        provider_remove(prov(rec), host, names[i], NULL, NULL);
    }
    reconcile_pass_add(rec, t0);
}

static void on_orphan_runner_deleted(void *data, int err, const char *message)
{
    struct orphan_delete *od = data;
    struct reconciler *rec = od->rec;
    struct orphan *o = orphan_get(rec, od->github_id, false);
    free(od);
    if (err == 0) {
        rec->env->stats->reconcile_github_deleted++;
        if (o)
            orphan_drop(rec, o);
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
    struct reconciler *rec;
    const struct github_scope *scope;
    char *repo; /* queued jobs: the repository listed (owned) */
};

#define ORG_REPOS_TTL_MS   (10 * 60 * 1000)
#define ORG_REPOS_PER_PASS 5

static void on_github_runners(void *data, int err, const char *message, json_t *runners)
{
    struct scope_ctx *ctx = data;
    struct reconciler *rec = ctx->rec;
    uint64_t t0 = uv_hrtime();
    rec->lists_pending--;
    size_t i;
    json_t *gr;
    if (err < 0)
        log_warn("reconcile.github_list_failed", "error=\"%s\"", message ? message : "?");
    json_array_foreach(runners, i, gr)
    {
        const char *name = json_string_value(json_object_get(gr, "name"));
        if (!name || !runners_name_ours(rec->runners, name))
            continue; /* not ours: never touched */
        struct runner *r = runners_find(rec->runners, name);
        if (r && runner_live(r) && runner_state_get(r) != RUNNER_FAILED)
            continue;
        if (json_is_true(json_object_get(gr, "busy")))
            continue;
        int64_t id = json_integer_value(json_object_get(gr, "id"));
        struct orphan *o = orphan_get(rec, id, true);
        if (!o || o->in_flight || o->next_ms > wall_clock_ms())
            continue; /* its back-off after a failed delete */
        struct orphan_delete *od = calloc(1, sizeof(*od));
        if (!od)
            continue;
        od->rec = rec;
        od->github_id = id;
        log_info("reconcile.orphan_github_runner", "runner=%s attempt=%d action=delete", name,
                 o->attempts + 1);
        o->in_flight = true;
        if (github_runner_delete(gh(rec), ctx->scope, id, on_orphan_runner_deleted, od) < 0) {
            o->in_flight = false;
            free(od);
        }
    }
    free(ctx);
    reconcile_pass_add(rec, t0);
}

/* ---- phantom queued jobs: their `completed` never came ---------------------------------- */

#define PHANTOM_AGE_MS   (10 * 60 * 1000) /* queued and unheard of for this long */
#define PHANTOM_PER_PASS 10               /* GitHub calls a pass may spend on them */

/* In progress for this long past its pool's job_timeout_s, a job is asked about: its
 * runner is gone (the agent stops a job at its limit), so its `completed` was lost. */
#define STUCK_GRACE_MS (10 * 60 * 1000)
#define STUCK_PER_PASS 10

/* Why a job is asked about. */
enum job_check {
    CHECK_PHANTOM, /* queued long, and not on GitHub's queued list */
    CHECK_LATE,    /* a late or replayed queued delivery (verify_late_jobs) */
    CHECK_STUCK,   /* in progress past its pool's job time limit (verify_stuck_jobs) */
};

struct phantom_check {
    struct reconciler *rec;
    int64_t job_id;
    enum job_check kind;
};

/* A late job's check is settled once its answer is on disk: until then the store still
 * says unverified, and the next pass must not ask again. */
static void on_late_check_settled(void *data, int result)
{
    struct reconciler *rec = data;
    (void)result;
    rec->late_checks_pending--;
    env_recount(rec->env);
}

static void on_phantom_checked(void *data, const struct github_response *res)
{
    struct phantom_check *pc = data;
    struct reconciler *rec = pc->rec;
    int64_t id = pc->job_id;
    enum job_check kind = pc->kind;
    bool late = kind == CHECK_LATE;
    free(pc);
    if (!late)
        rec->lists_pending--;
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
            rec->late_checks_pending--; /* asked again on a later pass */
        return;
    } else if (job_status_parse(status, &st) < 0) {
        st = JOB_COMPLETED; /* a state GitHub added that is not waiting for a runner */
    }
    int64_t now = wall_clock_ms();
    if (late && st <= JOB_QUEUED) {
        log_info("webhook.late_job_verified", "job=%lld github_status=%s", (long long)id,
                 job_status_names[st]);
        rec->env->stats->late_jobs_verified++;
        if (store_job_verified(rec->env->deps.store, id, on_late_check_settled, rec) < 0)
            rec->late_checks_pending--;
        return;
    }
    if (st <= JOB_QUEUED || (kind == CHECK_STUCK && st == JOB_IN_PROGRESS)) {
        /* Really queued (a run in progress hides it from the queued list), or really still
         * running: asked again after another PHANTOM_AGE_MS (STUCK_GRACE_MS). */
        store_job_touch(rec->env->deps.store, id, now);
        return;
    }
    static const char *const events[] = {[CHECK_PHANTOM] = "reconcile.phantom_job",
                                         [CHECK_LATE] = "webhook.late_job_retired",
                                         [CHECK_STUCK] = "reconcile.stuck_job"};
    log_info(events[kind], "job=%lld github_status=%s action=retire", (long long)id,
             job_status_names[st]);
    if (kind == CHECK_LATE)
        rec->env->stats->late_jobs_retired++;
    else if (kind == CHECK_STUCK)
        rec->env->stats->reconcile_stuck_retired++;
    else
        rec->env->stats->reconcile_phantoms_retired++;
    int r = store_job_retire(rec->env->deps.store, id, st, conclusion, now,
                             late ? on_late_check_settled : NULL, late ? rec : NULL);
    if (late && r < 0)
        rec->late_checks_pending--;
    env_recount(rec->env);
}

/* Asks GitHub about each of `n` jobs (its id, and its repository unless `repo` says it),
 * counting the questions in flight. `jobs`: a store list (`listed` < 0: it failed). */
static void ask_about_jobs(struct reconciler *rec, int listed, const struct store_job_ref *jobs,
                           size_t n, const char *repo, enum job_check kind)
{
    int *pending = kind == CHECK_LATE ? &rec->late_checks_pending : &rec->lists_pending;
    for (size_t i = 0; listed == 0 && i < n; i++) {
        struct phantom_check *pc = calloc(1, sizeof(*pc));
        if (!pc)
            break;
        pc->rec = rec;
        pc->job_id = jobs[i].id;
        pc->kind = kind;
        (*pending)++;
        const char *in = repo ? repo : jobs[i].repository;
        if (github_job_get(gh(rec), in, pc->job_id, on_phantom_checked, pc) < 0) {
            (*pending)--;
            free(pc);
        }
    }
}

/* A store list of jobs to ask GitHub about, on its way: counted in flight like the
 * questions, so that a pass or tick meanwhile does not ask for it again. */
struct job_list_read {
    struct reconciler *rec;
    enum job_check kind;
    char repo[WEBHOOK_MAX_NAME_BYTES + 1]; /* "": each job's own */
};

static int *pending_of(struct reconciler *rec, enum job_check kind)
{
    return kind == CHECK_LATE ? &rec->late_checks_pending : &rec->lists_pending;
}

static struct job_list_read *job_list_read_new(struct reconciler *rec, enum job_check kind,
                                               const char *repo)
{
    struct job_list_read *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    q->rec = rec;
    q->kind = kind;
    snprintf(q->repo, sizeof(q->repo), "%s", repo ? repo : "");
    (*pending_of(rec, kind))++;
    rec->reads_out++;
    return q;
}

/* `r`: how asking for the read went (0: its answer comes to on_job_list). */
static void job_list_asked(struct job_list_read *q, int r)
{
    if (r < 0) {
        (*pending_of(q->rec, q->kind))--;
        q->rec->reads_out--;
        free(q);
    }
}

static void on_job_list(void *data, int err, const struct store_job_ref *jobs, size_t n)
{
    struct job_list_read *q = data;
    struct reconciler *rec = q->rec;
    if (read_back(rec)) {
        (*pending_of(rec, q->kind))--;
        ask_about_jobs(rec, err, jobs, n, q->repo[0] ? q->repo : NULL, q->kind);
    }
    free(q);
}

#define LATE_CHECKS_PER_PASS 10

/* Queued jobs from a delivery sent long after the job was made (WEBHOOK_FRESH_MS): an
 * operator's redelivery, or a captured delivery replayed. No runner is made for one until
 * GitHub says it is still queued; one GitHub says is not is retired, as a phantom is. */
void reconcile_verify_late_jobs(struct reconciler *rec)
{
    if (!gh(rec) || rec->late_checks_pending > 0)
        return;
    struct job_list_read *q = job_list_read_new(rec, CHECK_LATE, NULL);
    if (q)
        job_list_asked(q, store_jobs_unverified(rec->env->deps.store, rec, LATE_CHECKS_PER_PASS,
                                                on_job_list, q));
}

/* Jobs the store has held as queued for PHANTOM_AGE_MS that GitHub's queued list for
 * `repo` does not show (`listed`, a JSON array of ids): each is asked about (a few per
 * pass), and retired when GitHub says it is no longer queued. Otherwise one lost
 * `completed` webhook keeps a runner reserved for ever. */
static void verify_phantoms(struct reconciler *rec, const char *repo, const char *listed)
{
    int64_t cutoff = wall_clock_ms() - PHANTOM_AGE_MS;
    struct job_list_read *q = job_list_read_new(rec, CHECK_PHANTOM, repo);
    if (q)
        job_list_asked(q, store_jobs_queued_unlisted(rec->env->deps.store, rec, repo, cutoff,
                                                     listed, PHANTOM_PER_PASS, on_job_list, q));
}

/* Jobs in progress longer than their pool's job_timeout_s and STUCK_GRACE_MS: the agent
 * stops a job at its limit and hatcheryd tears its guest down, so GitHub has finished it
 * and its `completed` was lost. Each is asked about (a few a pass) and retired when GitHub
 * says it is done; otherwise it would count as running for ever. */
static void verify_stuck_jobs(struct reconciler *rec)
{
    int64_t now = wall_clock_ms();
    for (size_t p = 0; p < cfg(rec)->n_pools; p++) {
        const struct config_pool *pool = &cfg(rec)->pools[p];
        int64_t cutoff = now - pool->job_timeout_s * 1000 - STUCK_GRACE_MS;
        struct job_list_read *q = job_list_read_new(rec, CHECK_STUCK, NULL);
        if (q)
            job_list_asked(q, store_jobs_stuck(rec->env->deps.store, rec, pool->name, cutoff,
                                               STUCK_PER_PASS, on_job_list, q));
    }
}

/* A repository's queued jobs as GitHub listed them, while the store says which of them it
 * has never seen. */
struct queued_list {
    struct reconciler *rec;
    char *repo;
    json_t *jobs;
};

/* Each listed job the store has never seen (`unknown_ids`) is stored as a queued one: its
 * `queued` webhook was lost. */
static void on_unknown_ids(void *data, int err, const struct store_job_ref *unknown_ids,
                           size_t n_unknown)
{
    struct queued_list *ql = data;
    struct reconciler *rec = ql->rec;
    const char *repo = ql->repo;
    if (!read_back(rec)) {
        json_decref(ql->jobs);
        free(ql->repo);
        free(ql);
        return;
    }
    rec->lists_pending--;
    uint64_t t0 = uv_hrtime();
    json_t *unknown = json_object(); /* by id, as text */
    for (size_t k = 0; err == 0 && k < n_unknown; k++) {
        char key[32];
        snprintf(key, sizeof(key), "%lld", (long long)unknown_ids[k].id);
        json_object_set_new(unknown, key, json_true());
    }
    size_t i;
    json_t *job;
    json_array_foreach(ql->jobs, i, job)
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
        const struct config_pool *pool = job_pool_match(cfg(rec), values, n);
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
        rec->env->stats->reconcile_jobs_found++;
        store_job_event_submit(rec->env->deps.store, ev, NULL, NULL);
    }
    json_decref(unknown);
    json_decref(ql->jobs);
    free(ql->repo);
    free(ql);
    env_recount(rec->env);
    reconcile_pass_add(rec, t0);
}

static void on_queued_jobs(void *data, int err, const char *message, json_t *jobs)
{
    struct scope_ctx *ctx = data;
    struct reconciler *rec = ctx->rec;
    char *repo = ctx->repo;
    free(ctx);
    rec->lists_pending--;
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
    struct queued_list *ql = ids_text ? calloc(1, sizeof(*ql)) : NULL;
    if (ql) {
        *ql = (struct queued_list){rec, repo, json_incref(jobs)};
        rec->lists_pending++;
        rec->reads_out++;
        if (store_job_ids_unknown(rec->env->deps.store, rec, ids_text, on_unknown_ids, ql) < 0) {
            rec->lists_pending--;
            rec->reads_out--;
            json_decref(ql->jobs);
            free(ql);
            ql = NULL;
        }
        verify_phantoms(rec, repo, ids_text);
    }
    free(ids_text);
    if (!ql)
        free(repo);
    reconcile_pass_add(rec, t0);
}

static void queued_jobs_start(struct reconciler *rec, const struct github_scope *scope,
                              const char *repo)
{
    struct scope_ctx *ctx = calloc(1, sizeof(*ctx));
    char *copy = strdup(repo);
    if (!ctx || !copy) {
        free(ctx);
        free(copy);
        return;
    }
    ctx->rec = rec;
    ctx->scope = scope;
    ctx->repo = copy;
    rec->lists_pending++;
    if (github_queued_jobs_list(gh(rec), repo, on_queued_jobs, ctx) < 0) {
        rec->lists_pending--;
        free(copy);
        free(ctx);
    }
}

static void on_org_repos(void *data, int err, const char *message, json_t *repos)
{
    struct scope_ctx *ctx = data;
    struct reconciler *rec = ctx->rec;
    size_t i = (size_t)(ctx->scope - rec->env->deps.scopes);
    const char *org = ctx->scope->org;
    free(ctx);
    rec->lists_pending--;
    struct org_repos *o = &rec->org_repos[i];
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
static void org_queued_jobs(struct reconciler *rec, size_t i)
{
    const struct github_scope *scope = &rec->env->deps.scopes[i];
    struct org_repos *o = &rec->org_repos[i];
    if (!o->listing && (!o->listed_ms || wall_clock_ms() - o->listed_ms > ORG_REPOS_TTL_MS)) {
        struct scope_ctx *ctx = calloc(1, sizeof(*ctx));
        if (ctx) {
            ctx->rec = rec;
            ctx->scope = scope;
            o->listing = true;
            rec->lists_pending++;
            if (github_installation_repos_list(gh(rec), on_org_repos, ctx) < 0) {
                o->listing = false;
                rec->lists_pending--;
                free(ctx);
            }
        }
    }
    struct github_stats gs;
    github_client_stats(gh(rec), &gs);
    size_t per_pass = gs.ratelimit_remaining >= 0 && gs.ratelimit_remaining < 200 ? 0
                      : gs.ratelimit_remaining >= 0 && gs.ratelimit_remaining < 1000
                          ? 1
                          : ORG_REPOS_PER_PASS;
    for (size_t k = 0; k < per_pass && k < o->n; k++) {
        queued_jobs_start(rec, scope, o->names[o->cursor % o->n]);
        o->cursor = (o->cursor + 1) % o->n;
    }
}

static void on_live_before(void *data, int err, const struct store_runner_row *rows, size_t n)
{
    struct reconciler *rec = data;
    if (!read_back(rec))
        return;
    rec->recovering = false;
    if (err < 0)
        return; /* again at the next pass */
    const struct config *c = cfg(rec);
    for (size_t i = 0; i < n; i++) {
        const struct store_runner_row *row = &rows[i];
        const char *name = row->name, *host = row->host[0] ? row->host : NULL;
        if (!name[0] || runners_find(rec->runners, name))
            continue;
        if (host && !provider_host_up(prov(rec), host))
            continue; /* again when the host is back */
        int st = runner_state_from_name(row->state);
        int slot = config_pool_index(c, row->pool);
        const struct config_pool *pool = slot >= 0 ? &c->pools[slot] : NULL;
        if (st >= 0 && pool && config_host_index(c, host) >= 0 &&
            runner_lifecycle_next((enum runner_state)st, RUNNER_EV_ADOPTED) >= 0) {
            runner_adopt(rec->runners, row, pool, (enum runner_state)st);
            continue;
        }
        bool lost = st == RUNNER_BUSY;
        char reason[200];
        snprintf(reason, sizeof(reason), "%shatcheryd restarted: the record was in flight%s",
                 lost ? "job lost: " : "", pool ? "" : " and its pool is no longer configured");
        if (st != RUNNER_FAILED) {
            log_warn("reconcile.stale_record", "runner=%s state=%s job_lost=%d action=fail", name,
                     row->state[0] ? row->state : "?", lost);
            rec->env->stats->reconcile_records_failed++;
            scheduler_stats_failure(rec->env->stats, row->pool, FAILURE_RESTART, lost);
        }
        if (host)
            provider_remove(prov(rec), host, name, NULL, NULL);
        int64_t gid = row->github_runner_id;
        const struct github_scope *scope = pool ? env_pool_scope(rec->env, pool) : NULL;
        if (!scope && rec->env->deps.n_scopes)
            scope = &rec->env->deps.scopes[0];
        if (gh(rec) && !gid && pool && pool->scale_set)
            /* Registered, maybe, by an answer the crash kept from the record: by name. */
            scalesets_runner_remove_by_name(env_scalesets(rec->env), pool->name, name,
                                            on_github_deleted_quiet, NULL);
        else if (gh(rec) && gid && scope && pool)
            runner_unregister(rec->env, pool, scope, gid, on_github_deleted_quiet, NULL);
        else if (gh(rec) && gid && scope)
            github_runner_delete(gh(rec), scope, gid, on_github_deleted_quiet, NULL);
        store_runner_mark_deleted(rec->env->deps.store, row->id, reason, wall_clock_ms());
    }
    rec->recovered = true;
    env_recount(rec->env);
}

void reconcile_recover(struct reconciler *rec)
{
    /* This process's records all have a runner in memory until they are final: only an
     * earlier process's can be stale. */
    if (rec->recovering)
        return;
    rec->recovering =
        store_runners_live_before(rec->env->deps.store, rec, runners_first_id(rec->runners),
                                  on_live_before, rec) == 0;
    if (rec->recovering)
        rec->reads_out++;
}

static bool scope_has_trusted_pool(struct reconciler *rec, const struct github_scope *scope)
{
    for (size_t p = 0; p < cfg(rec)->n_pools; p++)
        if (cfg(rec)->pools[p].trusted && env_pool_scope(rec->env, &cfg(rec)->pools[p]) == scope)
            return true;
    return false;
}

void reconcile_pass(struct reconciler *rec)
{
    uint64_t t0 = uv_hrtime();
    rec->env->stats->reconcile_ticks++;
    rec->pass_ms = 0;
    reconcile_recover(rec);
    for (size_t i = 0; i < cfg(rec)->n_hosts; i++)
        if (provider_host_up(prov(rec), cfg(rec)->hosts[i].name)) {
            provider_tagged_async(prov(rec), cfg(rec)->hosts[i].name, on_tagged, rec);
            provider_orphan_volumes_async(prov(rec), cfg(rec)->hosts[i].name, on_orphan_volumes,
                                          rec);
        }
    /* While a rate-limit wait holds the last pass's lists back, a new pass would only pile
     * more behind them, all fired at once when the wait ends. */
    if (gh(rec) && rec->lists_pending > 0) {
        rec->env->stats->reconcile_github_skipped++;
        log_info("reconcile.github_skipped", "lists_pending=%d", rec->lists_pending);
    } else if (gh(rec)) {
        for (size_t i = 0; i < rec->env->deps.n_scopes; i++) {
            struct scope_ctx *ctx = calloc(1, sizeof(*ctx));
            if (!ctx)
                break;
            ctx->rec = rec;
            ctx->scope = &rec->env->deps.scopes[i];
            rec->lists_pending++;
            if (github_runners_list(gh(rec), ctx->scope, NULL, on_github_runners, ctx) < 0) {
                rec->lists_pending--;
                free(ctx);
            }
            /* A trusted pool's group, asked again: an owner may open it at any time. */
            if (scope_has_trusted_pool(rec, &rec->env->deps.scopes[i]))
                runner_group_checks_ask(rec->groups, gh(rec), i, false, rec->env->recount,
                                        rec->env->recount_data);
            if (rec->env->deps.scopes[i].repo)
                queued_jobs_start(rec, &rec->env->deps.scopes[i], rec->env->deps.scopes[i].repo);
            else if (rec->env->deps.scopes[i].org)
                org_queued_jobs(rec, i);
        }
        verify_stuck_jobs(rec);
    }
    reconcile_pass_add(rec, t0);
}
