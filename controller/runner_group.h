/* The runner group policy of a trusted pool, as GitHub says it is.
 *
 * A trusted pool's runners must be given by GitHub only to trusted workflows. That is the
 * runner group's policy, kept on GitHub, not in our config: the group must be restricted
 * to selected workflows, each pinned to a branch, tag or commit (never a pull request's
 * ref, never a wildcard). Runner groups exist for organizations only; a repository's own
 * runners serve every workflow of the repository, so a trusted pool must register in an
 * org scope (config.c refuses the rest).
 *
 * hatcheryd asks GitHub for each org scope a trusted pool names, when the pool first needs
 * a runner and again on every reconciler pass. Until GitHub has said the group is
 * restricted, and whenever it says it is not, the pool gets no runner; its idle runners
 * are retired (the scheduler's part). A change of verdict is logged once, at warning
 * level when the group is open. */
#ifndef HATCHERY_RUNNER_GROUP_H
#define HATCHERY_RUNNER_GROUP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct github_client;
struct github_scope;

enum runner_group_verdict {
    RUNNER_GROUP_UNKNOWN,    /* not asked yet, or never answered */
    RUNNER_GROUP_RESTRICTED, /* only selected workflows, each at a fixed ref */
    RUNNER_GROUP_OPEN,       /* a workflow GitHub does not pin may use it */
    RUNNER_GROUP_VERDICT_MAX,
};

extern const char *const runner_group_verdict_names[RUNNER_GROUP_VERDICT_MAX];

/* GitHub's `runner-groups-org` object judged: RESTRICTED, or OPEN with why in `why`, or
 * UNKNOWN for an answer that is not such an object. */
enum runner_group_verdict runner_group_judge(const json_t *group, char *why, size_t why_size);

/* What is known of each scope's group: one per scope, in the scopes' order. */
struct runner_group_checks;

struct runner_group_checks *runner_group_checks_new(const struct github_scope *scopes, size_t n);
/* Requests in flight answer into nothing: it is freed when the last one has. */
void runner_group_checks_free(struct runner_group_checks *checks);

/* Asks GitHub about scope `i` (an org scope) unless a request is in flight, or, with
 * `only_if_unknown`, unless a verdict or a recent failure is there. The answer kicks
 * `on_change(data)` when the verdict changes. */
void runner_group_checks_ask(struct runner_group_checks *checks, struct github_client *github,
                             size_t i, bool only_if_unknown, void (*on_change)(void *data),
                             void *data);

/* Whether a trusted pool registering in scope `i` may get runners; why not, otherwise. */
bool runner_group_checks_allow(const struct runner_group_checks *checks, size_t i, char *why,
                               size_t why_size);

/* Scope `i` for `hatchery pools`/`github`: {verdict, why, checked_at}, or NULL when it
 * was never asked about. */
json_t *runner_group_checks_json(const struct runner_group_checks *checks, size_t i);

#endif
