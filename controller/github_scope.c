/* GitHub's runner scopes: names and paths; see github_scope.h. */
#include "github_scope.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const char *github_scope_kind(const struct github_scope *scope)
{
    return scope->repo ? "repo" : scope->org ? "org" : "enterprise";
}

const char *github_scope_name(const struct github_scope *scope)
{
    return scope->repo ? scope->repo : scope->org ? scope->org : scope->enterprise;
}

const struct github_scope *github_scope_find(const struct github_scope *scopes, size_t n,
                                             const char *name)
{
    for (size_t i = 0; name && i < n; i++)
        if (strcmp(github_scope_name(&scopes[i]), name) == 0)
            return &scopes[i];
    return !name && n == 1 ? &scopes[0] : NULL;
}

int github_scope_path(const struct github_scope *scope, const char *suffix, char *out, size_t size)
{
    static const char *const prefixes[] = {"/repos/", "/orgs/", "/enterprises/"};
    const char *prefix = prefixes[scope->repo ? 0 : scope->org ? 1 : 2];
    const char *name = github_scope_name(scope);
    if (!name)
        return -EINVAL;
    int n = snprintf(out, size, "%s%s%s", prefix, name, suffix);
    return n > 0 && (size_t)n < size ? 0 : -ENAMETOOLONG;
}
