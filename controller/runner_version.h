/* Whether GitHub still registers the runner an image carries (`hatchery image-check`).
 * Two rules (GitHub changelog, "Self-hosted runner minimum version enforcement", 2026):
 *   - an absolute floor: no runner older than RUNNER_VERSION_FLOOR registers, enforced in
 *     full from RUNNER_VERSION_FLOOR_ENFORCED;
 *   - a runner older than GitHub's newest release is refused once the oldest release newer
 *     than it is 30 days old. */
#ifndef HATCHERY_RUNNER_VERSION_H
#define HATCHERY_RUNNER_VERSION_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include <jansson.h>

/* GitHub's absolute floor for registering a self-hosted runner: 2.329.0 or later, enforced
 * in full from 2026-09-25 ("Self-hosted runner minimum version enforcement", GitHub
 * changelog, 2026). On top of it a runner must take each release within 30 days. */
#define RUNNER_VERSION_FLOOR          "2.329.0"
#define RUNNER_VERSION_FLOOR_ENFORCED "2026-09-25T00:00:00Z"
#define RUNNER_RELEASE_GRACE_DAYS     30

enum runner_compliance {
    RUNNER_CURRENT = 0,  /* current, or behind but accepted for longer than the warning */
    RUNNER_WARNING = 1,  /* refused within the warning's days */
    RUNNER_REFUSED = 2,  /* out of compliance already: rebuild the image */
    RUNNER_BAD_INPUT = 3 /* the version or the releases could not be read */
};

/* "2.329.0" into its three numbers; false for anything else (a stand-in's "2.321.0-x", a
 * tag's "v2.329.0": runner_version_check takes those off itself). */
bool runner_version_parse(const char *text, long ret[3]);
/* <0, 0, >0 as a is older than, the same as, newer than b. */
int runner_version_cmp(const long a[3], const long b[3]);

/* What GitHub's two rules make of a runner version. */
struct runner_judgement {
    long mine[3];
    long newest[3];    /* the newest release; -1s when none was given */
    bool below_floor;  /* older than RUNNER_VERSION_FLOOR */
    bool floor_first;  /* refused_at is the floor's enforcement, not a release's grace */
    time_t refused_at; /* when GitHub stops taking it (maybe past); -1: no rule refuses it */
};
/* Judges `version` (as runner_version_check takes it) by the floor, and by GitHub's
 * releases (the answer to GET /repos/actions/runner/releases) unless `releases` is NULL.
 * -EINVAL and a reason in `msg` for a version or releases it cannot read. */
int runner_version_judge(const char *version, const json_t *releases, struct runner_judgement *ret,
                         char *msg, size_t msg_size);

/* Judges `version` (a leading 'v' and trailing whitespace, as in a RUNNER_VERSION file, are
 * allowed) against GitHub's answer to GET /repos/actions/runner/releases (an
 * array; drafts and prereleases are ignored) at `now`, warning `warn_days` ahead. Writes
 * one line for the operator into `msg`. */
enum runner_compliance runner_version_check(const char *version, const json_t *releases, time_t now,
                                            int warn_days, char *msg, size_t msg_size);

/* An ISO 8601 UTC time as GitHub writes it ("2025-01-27T15:05:43Z"); -1 if it is not one. */
time_t runner_version_time(const char *iso);

#endif
