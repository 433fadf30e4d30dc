/* Where runners register, as GitHub names it: a repository, an organization or an
 * enterprise. Pure: names and REST paths, no requests (github.h makes those). */
#ifndef HATCHERY_GITHUB_SCOPE_H
#define HATCHERY_GITHUB_SCOPE_H

#include <stddef.h>
#include <stdint.h>

/* Where runners register: a repository ("owner/name"), an organization or an enterprise:
 * exactly one of the three is set. */
struct github_scope {
    const char *repo;
    const char *org;
    const char *enterprise;
    int64_t runner_group_id;
};

/* "repo", "org" or "enterprise"; and the scope's name (owner/name, the org's, the
 * enterprise's slug). */
const char *github_scope_kind(const struct github_scope *scope);
const char *github_scope_name(const struct github_scope *scope);
/* The scope a pool names (`name`, as config's pools[].github_scope gives it), or without a
 * name the only one there is; NULL when none matches (the config refuses such a pool). */
const struct github_scope *github_scope_find(const struct github_scope *scopes, size_t n,
                                             const char *name);
/* The REST path of the scope's own resources: "/repos/OWNER/NAME", "/orgs/ORG" or
 * "/enterprises/SLUG", then `suffix`. -EINVAL for an empty scope, -ENAMETOOLONG. */
int github_scope_path(const struct github_scope *scope, const char *suffix, char *out, size_t size);

#endif
