/* GitHub's runner releases, as hatcheryd last fetched them: GET
 * /repos/actions/runner/releases (the newest 100) through the GitHub client, soon after the
 * start and then every RUNNER_RELEASES_INTERVAL_S, so that each pool's image is judged by
 * GitHub's 30-day rule (runner_version.h) without an operator running `hatchery
 * image-check`. A failed fetch keeps the last list and is tried again after
 * RUNNER_RELEASES_RETRY_S; a GitHub that has no actions/runner (an Enterprise Server)
 * leaves the floor alone to judge. */
#ifndef HATCHERY_RUNNER_RELEASES_H
#define HATCHERY_RUNNER_RELEASES_H

#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "github.h"
#include "runner_version.h"

#define RUNNER_RELEASES_FIRST_S    5
#define RUNNER_RELEASES_INTERVAL_S (6 * 3600)
#define RUNNER_RELEASES_RETRY_S    600
/* How many days ahead hatcheryd warns (log and alert) of a runner GitHub will refuse. */
#define RUNNER_EXPIRY_WARN_DAYS 7
#define RUNNER_RELEASES_PATH    "/repos/actions/runner/releases?per_page=100"

struct runner_releases;

/* A fetch came back with a list (not called for a failed one). */
typedef void (*runner_releases_cb)(void *data);

/* Fetches through `github` (which must outlive it) from RUNNER_RELEASES_FIRST_S on. */
int runner_releases_new(uv_loop_t *loop, struct github_client *github, runner_releases_cb fetched,
                        void *data, struct runner_releases **ret);
/* Safe with a fetch in flight: its answer is dropped. NULL is a no-op. */
void runner_releases_free(struct runner_releases *rr);

/* The last list fetched (borrowed), or NULL before the first. */
const json_t *runner_releases_list(const struct runner_releases *rr);
/* When the list was fetched (Unix ms), 0 before the first. */
int64_t runner_releases_fetched_ms(const struct runner_releases *rr);

/* Judges `version` by the floor and, once fetched, the releases (rr may be NULL: the floor
 * alone). As runner_version_judge. */
int runner_releases_judge(const struct runner_releases *rr, const char *version,
                          struct runner_judgement *ret, char *msg, size_t msg_size);

#endif
