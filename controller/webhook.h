/* GitHub webhook intake: checks the signature, then turns a `workflow_job` delivery into a
 * job event for the store. Pure: no I/O, so tests and the fuzzer call it directly. */
#ifndef HATCHERY_WEBHOOK_H
#define HATCHERY_WEBHOOK_H

#include "config.h"
#include "http_server.h"
#include "job.h"
#include "secret.h"

enum webhook_outcome {
    WEBHOOK_STORE,    /* a job event to store; answer 202 once it is durable */
    WEBHOOK_PING,     /* 200 */
    WEBHOOK_IGNORED,  /* 204: an event or action Hatchery does not act on */
    WEBHOOK_REJECTED, /* 4xx with a reason */
    WEBHOOK_OUTCOME_MAX,
};

struct webhook_result {
    enum webhook_outcome outcome;
    int status;
    char reason[160];
    const char *event_name;  /* points into the request, or a constant */
    struct job_event *event; /* WEBHOOK_STORE only; the caller owns it */
};

/* Checks an `X-Hub-Signature-256` value against the body, in constant time.
 * Returns 0 when it matches, -EBADMSG when it does not or is malformed. */
int webhook_signature_verify(const struct secret *secret, const char *header, const char *body,
                             size_t body_len);

/* `now_ms` stamps the event. */
void webhook_handle(const struct config *config, const struct secret *secret,
                    const struct http_request *req, int64_t now_ms,
                    struct webhook_result *ret_result);

#endif
