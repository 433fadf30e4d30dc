/* Jobs as GitHub reports them through `workflow_job` webhooks, and the rule that gives
 * each job its pool. */
#ifndef HATCHERY_JOB_H
#define HATCHERY_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* Ordered: a job only ever moves forward, so an event that arrives late (a `queued` after
 * its `completed`) cannot bring the job back. */
enum job_status {
    JOB_WAITING, /* waiting for an environment's approval: no runner wanted yet */
    JOB_QUEUED,
    JOB_IN_PROGRESS,
    JOB_COMPLETED,
    JOB_STATUS_MAX,
};

extern const char *const job_status_names[JOB_STATUS_MAX];
int job_status_parse(const char *name, enum job_status *ret_status);

/* One `workflow_job` delivery, checked and ready to store. Owns its strings. */
struct job_event {
    char *delivery_id;
    int64_t job_id;
    int64_t run_id;
    int64_t installation_id; /* 0 when the payload has none */
    enum job_status status;
    char *repository;  /* owner/name */
    char *workflow;    /* may be NULL */
    char *job_name;    /* may be NULL */
    char *labels_json; /* JSON array, as received */
    char *runner_name; /* NULL until GitHub names one */
    char *conclusion;  /* NULL until completed */
    char *pool;        /* NULL: no pool matches (the job is "unmatched") */
    int64_t received_at_ms;
    /* A webhook's body, hashed: a delivery whose body was seen before is a duplicate
     * whatever its delivery id (a replay). Empty for events not from a webhook. */
    char body_sha256[65];
    /* A queued job that may not be queued any more (a late or replayed delivery): no
     * runner is made for it until GitHub says it is. */
    bool unverified;
};

void job_event_free(struct job_event *event);

/* The first pool whose labels include every label of the job, compared case-insensitively
 * as GitHub does. Every self-hosted runner carries `self-hosted`, so that label is implied
 * in every pool. A trusted pool also needs the job to name each of its labels: its runners
 * are for the jobs meant for it, not for any job whose few labels it happens to carry. A
 * job without labels matches nothing. Returns NULL when nothing matches. */
const struct config_pool *job_pool_match(const struct config *config, const char *const *labels,
                                         size_t n_labels);

#endif
