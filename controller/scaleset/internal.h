/* What the scale-set files share (service.c: the Actions service connection of a scope and
 * its calls; listener.c: each pool's scale set, session and queue), and no one else. */
#ifndef HATCHERY_SCALESET_INTERNAL_H
#define HATCHERY_SCALESET_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "scaleset.h"
#include "secret.h"

/* One GitHub scope's connection to the Actions service: its URL and admin token, got
 * through the auth chain and renewed before the token runs out. */
struct ss_service {
    struct scalesets *sets;
    const struct github_scope *scope;
    char config_url[512];
    char *service_url; /* ends with '/' */
    struct secret *admin_token;
    int64_t admin_expires_ms;
    bool refreshing;
    struct ss_call *waiting; /* calls waiting for the admin token */
    uint64_t refreshes;
    char last_error[256];
};

/* One request to the service. */
struct ss_request {
    const char *method;
    const char *url;            /* "_apis/..." under the service URL, or an absolute URL */
    json_t *body;               /* borrowed */
    const struct secret *token; /* NULL: the admin token */
    const char *extra_header;   /* or NULL */
    long timeout_ms;            /* 0: the client's */
    int max_retries;            /* -1: the client's */
};

/* Sends `req` once the admin token is fresh (for a relative URL); `cb` gets the answer
 * (its status too: the caller decides what 404, 409 and 401 mean). */
int ss_call(struct ss_service *svc, const struct ss_request *req, github_json_cb cb, void *data);
/* Drops the admin token: the next call renews it (after a 401 from the service). */
void ss_service_forget_token(struct ss_service *svc);
void ss_service_free(struct ss_service *svc);

/* The collection: services by scope, listeners by pool, and what is in flight. */
struct ss_listener;
struct scalesets {
    struct scalesets_deps deps;
    struct ss_service *services; /* per scope */
    struct ss_listener **listeners;
    size_t n_listeners;
    int pending; /* requests in flight: the collection is freed when none is left */
    bool stopping;
    bool stopped; /* every session deleted (or given up): waiting for `pending` */
    void (*done)(void *data);
    void *done_data;
    uv_timer_t done_timer; /* `done` runs from the loop, never inside a request's callback */
    /* Called by the service after each request it counted in `pending` has ended: the
     * listeners' side (which owns the collection) frees it once nothing is left. */
    void (*request_ended)(struct scalesets *sets);
};

#endif
