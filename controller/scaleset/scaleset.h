/* Runner scale sets: pools whose jobs come from GitHub's Actions service over outbound
 * HTTPS, long-polled, instead of webhooks (nothing listens). The protocol is the one of
 * github.com/actions/scaleset v0.4.0, spoken on the GitHub client (libcurl multi on the
 * loop):
 *
 *   auth      App JWT -> installation token -> registration token (REST) ->
 *             POST {api}/actions/runner-registration (RemoteAuth) -> the service's URL
 *             and an admin token, renewed when under 60 s of it remain;
 *   ensure    the scale set of a pool (its name, the scope's runner group, the pool's
 *             labels) looked up, created, or its labels updated, before every session;
 *   session   one per scale set; 409 (another holder, or a crashed one's that lingers) is
 *             retried with back-off, never given up; deleted on a clean stop;
 *   poll      GET the queue with lastMessageId and X-ScaleSetMaxCapacity; 202 = nothing;
 *             a message's jobs are committed to the store before the message is deleted
 *             (acknowledged), and jobs the service asks us to are then acquired (GHES);
 *   demand    statistics.totalAssignedJobs (+ min_idle, within the pool's limits): the
 *             scheduler reads it, it never counts messages;
 *   runners   JIT configs from the scale set (generatejitconfig), removed through the
 *             service after their job.
 *
 * One `struct scalesets` holds a service connection per GitHub scope and a listener per
 * scale-set pool. */
#ifndef HATCHERY_SCALESET_H
#define HATCHERY_SCALESET_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "github.h"

struct config;
struct config_pool;
struct store;
struct scalesets;

/* What the scale sets tell the scheduler. */
struct scaleset_events {
    /* A job started on (`started`) or finished with (`!started`) the runner of that name. */
    void (*job)(void *data, const char *pool, int64_t job_key, const char *runner_name,
                bool started);
    /* A pool's demand changed: recount. */
    void (*demand)(void *data);
    void *data;
};

struct scalesets_deps {
    uv_loop_t *loop;
    struct github_client *github;
    struct store *store;
    const struct config *config;       /* read at creation: names, labels, scopes */
    const struct github_scope *scopes; /* config.github.runner_scopes, resolved */
    size_t n_scopes;
    const char *owner; /* the session's owner name: this controller */
    struct scaleset_events events;
};

/* NULL with *ret set to NULL when no pool is served by a scale set. Listening starts at
 * once. */
int scalesets_new(const struct scalesets_deps *deps, struct scalesets **ret);
/* Stops polling and deletes each session (a clean stop), then frees once every request has
 * answered; `done` runs then (may be NULL). The loop must run afterwards. */
void scalesets_stop(struct scalesets *sets, void (*done)(void *data), void *data);

/* The pool's jobs assigned to its scale set (running ones included), as the service last
 * said; -1 when it has not said yet, -2 when no listener serves the pool (its scale_set
 * came with a reload: listeners start with hatcheryd). */
int64_t scalesets_assigned(const struct scalesets *sets, const char *pool);

/* A runner of the pool: its JIT config from the scale set (github_jit_cb as for REST). A
 * name the service already has (an answer lost after it registered it) is removed and
 * asked for once more. */
int scalesets_jit_generate(struct scalesets *sets, const char *pool, const char *name,
                           github_jit_cb cb, void *data);
/* Removes a runner through the service; one already gone is success; one still running
 * its job answers -EBUSY. */
int scalesets_runner_remove(struct scalesets *sets, const char *pool, int64_t runner_id,
                            github_done_cb cb, void *data);

/* The same for a runner known by name alone (a record whose registration's answer was
 * not written before a crash): looked up, then removed; none of that name is success. */
int scalesets_runner_remove_by_name(struct scalesets *sets, const char *pool, const char *name,
                                    github_done_cb cb, void *data);

/* Per scale set: {pool, name, id, state, why, session_id, owner, last_message_id,
 * statistics, desired, polls, messages{by type}, conflicts, token_refreshes}. */
json_t *scalesets_json(const struct scalesets *sets);

struct scaleset_stats {
    uint64_t polls, empty_polls, messages, acks, acquired, conflicts, token_refreshes,
        session_refreshes, errors;
    uint64_t by_type[4];         /* JobAvailable, JobAssigned, JobStarted, JobCompleted */
    double ack_lag_max_s;        /* a message's arrival to its deletion, the longest seen */
    int64_t no_session_since_ms; /* 0: a session is held */
};
/* Summed over every scale set. */
void scalesets_stats(const struct scalesets *sets, struct scaleset_stats *ret);

/* The web URL of a scope for the runner-registration call ("https://github.com/ORG",
 * "https://HOST/OWNER/REPO"), from the API URL: api.github.com and api.*.ghe.com drop
 * their "api.", GHES its "/api/v3"; any other URL (a test's) is kept as it is. */
int scaleset_config_url(const char *api_url, const struct github_scope *scope, char *out,
                        size_t size);

#endif
