/* The GitHub REST client: libcurl multi driven by the libuv loop (no blocking call, no
 * thread), keep-alive and TLS verification on, GitHub App or token auth, retries with
 * jittered exponential backoff, rate-limit waits, and a limit on every response.
 *
 * Every operation reports once through its callback, with 0 or a negative errno and a
 * message. Secrets (the App key, the JWT, installation tokens, JIT configs) are held as
 * `struct secret` and never reach a log line. */
#ifndef HATCHERY_GITHUB_H
#define HATCHERY_GITHUB_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "secret.h"
#include "github_scope.h"

enum github_auth_mode {
    GITHUB_AUTH_APP,
    GITHUB_AUTH_TOKEN,
    GITHUB_AUTH_MODE_MAX,
};

extern const char *const github_auth_mode_names[GITHUB_AUTH_MODE_MAX];

struct github_options {
    const char *api_url; /* https://api.github.com, https://HOST/api/v3, http://127.0.0.1:PORT */
    enum github_auth_mode auth;
    int64_t app_id;
    const char *app_key_file;
    int64_t installation_id; /* 0: look it up through the first scope */
    const char *token_file;
    const char *ca_file; /* NULL: the system's CA store */
    const char *user_agent;
    long timeout_ms;
    int max_retries;
    size_t max_response_bytes;
    long max_backoff_ms;
    const struct github_scope *lookup_scope; /* for the installation lookup */
};

struct github_client;

int github_client_new(uv_loop_t *loop, const struct github_options *options,
                      struct github_client **ret_client, char *err, size_t err_size);
/* Cancels everything in flight (callbacks get -ECANCELED) and frees once the handles are
 * closed; the loop must run afterwards. */
void github_client_free(struct github_client *client);

/* One answer. Everything is borrowed for the callback's duration. */
struct github_response {
    int err;             /* 0 or a negative errno */
    long status;         /* HTTP status; 0 when none arrived */
    json_t *body;        /* parsed JSON, or NULL */
    const char *message; /* why it failed */
    const char *link;    /* the Link header, or NULL */
};

typedef void (*github_json_cb)(void *data, const struct github_response *res);

/* A request relative to the API URL (`/repos/...`), or an absolute URL on the API's host
 * (a pagination link). `body` is borrowed. */
int github_request(struct github_client *client, const char *method, const char *path, json_t *body,
                   github_json_cb cb, void *data);

/* A request the GitHub client sends as any other (the same loop, limits, retries and
 * wipes), with what the Actions service of a runner scale set needs instead of the API's
 * defaults. `url` is relative to the API URL, or absolute on any host; an absolute one
 * must carry its own `auth`. */
struct github_call_options {
    const struct secret *auth; /* sent as "Authorization: <auth_scheme> <auth>"; NULL: the
                                  installation token */
    const char *auth_scheme;   /* "Bearer" (NULL) or "RemoteAuth" */
    const char *accept;        /* the Accept value; NULL: GitHub's REST media type */
    const char *extra_header;  /* one more "Name: value", or NULL */
    long timeout_ms;           /* 0: the client's (a long poll holds longer) */
    int max_retries;           /* -1: the client's */
};
int github_request_with(struct github_client *client, const char *method, const char *url,
                        json_t *body, const struct github_call_options *options, github_json_cb cb,
                        void *data);

/* ---- operations (github_api.c) ------------------------------------------------------- */

/* `jit_config` is handed over to the callee; NULL on failure. */
typedef void (*github_jit_cb)(void *data, int err, const char *message, int64_t runner_id,
                              struct secret *jit_config);
/* POST …/actions/runners/generate-jitconfig. A name already taken (409, or 422 that says
 * so) is resolved without ever leaving two runners for one demand: the runner of that name
 * is ours, registered by an attempt whose answer was lost, and never got its config; it is
 * deleted and the call made once more. */
int github_jitconfig_generate(struct github_client *client, const struct github_scope *scope,
                              const char *name, const char *const *labels, size_t n_labels,
                              const char *work_folder, github_jit_cb cb, void *data);

/* All runners of a scope, following `Link: rel="next"` only on the API's host. `name` may
 * filter by exact name. `runners` is borrowed (a JSON array). */
typedef void (*github_list_cb)(void *data, int err, const char *message, json_t *items);
int github_runners_list(struct github_client *client, const struct github_scope *scope,
                        const char *name, github_list_cb cb, void *data);
int github_runner_get(struct github_client *client, const struct github_scope *scope,
                      int64_t runner_id, github_json_cb cb, void *data);
/* 404 is success: the runner is already gone. */
typedef void (*github_done_cb)(void *data, int err, const char *message);
int github_runner_delete(struct github_client *client, const struct github_scope *scope,
                         int64_t runner_id, github_done_cb cb, void *data);
/* The repositories the App's installation can reach (for an org scope's lost jobs). */
int github_installation_repos_list(struct github_client *client, github_list_cb cb, void *data);
int github_job_get(struct github_client *client, const char *repo, int64_t job_id,
                   github_json_cb cb, void *data);
/* An organization's runner group: its policy (which repositories and workflows may use
 * it). Runner groups exist for organizations only. */
int github_runner_group_get(struct github_client *client, const char *org, int64_t group_id,
                            github_json_cb cb, void *data);
/* Queued jobs of a repository: its queued workflow runs, then each run's jobs that are
 * queued. For jobs whose webhook was lost. */
int github_queued_jobs_list(struct github_client *client, const char *repo, github_list_cb cb,
                            void *data);

/* The API URL it was configured with. */
const char *github_client_api_url(const struct github_client *client);
/* What `hatchery github` shows. */
json_t *github_client_status(const struct github_client *client);

struct github_stats {
    uint64_t requests;
    uint64_t retries;
    uint64_t failures;
    uint64_t auth_failures; /* of them, refused credentials (401) or permissions (403) */
    uint64_t rate_limited;
    int64_t ratelimit_remaining; /* -1: not seen yet */
    int64_t ratelimit_reset;     /* Unix time; 0: not seen */
    int sending;                 /* requests handed to curl now (at most 16) */
    int queued;                  /* requests waiting their turn behind them */
};
void github_client_stats(const struct github_client *client, struct github_stats *ret);

/* For tests: the App JWT the client would send now (caller frees with secret_free). */
int github_app_jwt(const struct github_client *client, int64_t now, struct secret **ret_jwt);

#endif
