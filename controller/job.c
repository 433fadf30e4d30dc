/* Job statuses and pool matching; see job.h. */
#include "job.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const job_status_names[JOB_STATUS_MAX] = {
    [JOB_WAITING] = "waiting",
    [JOB_QUEUED] = "queued",
    [JOB_IN_PROGRESS] = "in_progress",
    [JOB_COMPLETED] = "completed",
};

int job_status_parse(const char *name, enum job_status *ret_status)
{
    for (int i = 0; i < JOB_STATUS_MAX; i++) {
        if (strcmp(name, job_status_names[i]) == 0) {
            *ret_status = i;
            return 0;
        }
    }
    return -EINVAL;
}

void job_event_free(struct job_event *event)
{
    if (!event)
        return;
    free(event->delivery_id);
    free(event->repository);
    free(event->workflow);
    free(event->job_name);
    free(event->labels_json);
    free(event->runner_name);
    free(event->conclusion);
    free(event->pool);
    free(event);
}

static bool pool_has_label(const struct config_pool *pool, const char *label)
{
    if (strcasecmp(label, "self-hosted") == 0)
        return true;
    for (size_t i = 0; i < pool->n_labels; i++)
        if (strcasecmp(pool->labels[i], label) == 0)
            return true;
    return false;
}

static bool job_has_label(const char *const *labels, size_t n_labels, const char *label)
{
    for (size_t i = 0; i < n_labels; i++)
        if (strcasecmp(labels[i], label) == 0)
            return true;
    return false;
}

const struct config_pool *job_pool_match(const struct config *config, const char *const *labels,
                                         size_t n_labels)
{
    if (n_labels == 0)
        return NULL;
    for (size_t p = 0; p < config->n_pools; p++) {
        const struct config_pool *pool = &config->pools[p];
        /* A scale set's jobs come from its queue, and its runners only ever get those. */
        if (pool->scale_set)
            continue;
        size_t i = 0;
        while (i < n_labels && pool_has_label(pool, labels[i]))
            i++;
        if (i < n_labels)
            continue;
        /* A trusted pool's runners are in a runner group GitHub gives only trusted code:
         * a job that names fewer labels (`self-hosted` alone, a fork's) would make them
         * and never get one. It must name the pool's every label. */
        size_t k = 0;
        while (pool->trusted && k < pool->n_labels &&
               job_has_label(labels, n_labels, pool->labels[k]))
            k++;
        if (!pool->trusted || k == pool->n_labels)
            return pool;
    }
    return NULL;
}
