/* A trusted pool's runner group, judged from what GitHub says of it; see runner_group.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "github.h"
#include "log.h"
#include "runner_group.h"
#include "wall_clock.h"

#define RETRY_AFTER_FAILURE_MS 60000 /* an unanswered question is asked again after this */

const char *const runner_group_verdict_names[RUNNER_GROUP_VERDICT_MAX] = {
    [RUNNER_GROUP_UNKNOWN] = "unknown",
    [RUNNER_GROUP_RESTRICTED] = "restricted",
    [RUNNER_GROUP_OPEN] = "open",
};

/* A string from GitHub, fit to quote in a log line or a reason: no quote, backslash or
 * control character, and cut. */
static void quotable(const char *in, char *out, size_t size)
{
    size_t n = 0;
    for (; in && *in && n + 1 < size; in++)
        out[n++] = (*in == '"' || *in == '\\' || (unsigned char)*in < 0x20) ? '?' : *in;
    out[n] = 0;
}

/* A selected workflow is `OWNER/REPO/PATH@REF`: GitHub requires the ref (a branch, tag or
 * commit). A wildcard or a pull request's ref would let a pull request's workflow in. */
static bool workflow_pinned(const char *w)
{
    const char *at = w ? strrchr(w, '@') : NULL;
    if (!at || !at[1])
        return false;
    return !strchr(w, '*') && !strchr(w, '?') && strncmp(at + 1, "refs/pull/", 10) != 0;
}

enum runner_group_verdict runner_group_judge(const json_t *group, char *why, size_t why_size)
{
    why[0] = 0;
    json_t *restricted = json_object_get(group, "restricted_to_workflows");
    json_t *selected = json_object_get(group, "selected_workflows");
    if (!json_is_object(group) || !json_is_integer(json_object_get(group, "id"))) {
        snprintf(why, why_size, "GitHub's answer is not a runner group");
        return RUNNER_GROUP_UNKNOWN;
    }
    if (json_is_true(json_object_get(group, "default"))) {
        snprintf(why, why_size, "it is the organization's default group");
        return RUNNER_GROUP_OPEN;
    }
    if (!json_is_true(restricted)) {
        snprintf(why, why_size,
                 "it is not restricted to selected workflows (restricted_to_workflows: false): "
                 "any workflow of a repository it admits, a pull request's included, may use it");
        return RUNNER_GROUP_OPEN;
    }
    if (!json_is_array(selected) || json_array_size(selected) == 0) {
        snprintf(why, why_size, "it is restricted to workflows but selects none");
        return RUNNER_GROUP_OPEN;
    }
    size_t i;
    json_t *w;
    json_array_foreach(selected, i, w)
    {
        if (workflow_pinned(json_string_value(w)))
            continue;
        char shown[160];
        quotable(json_string_value(w), shown, sizeof(shown));
        snprintf(why, why_size,
                 "it selects the workflow '%s', which is not pinned to a branch, tag or commit "
                 "(a wildcard or a pull request's ref lets a pull request's workflow in)",
                 shown);
        return RUNNER_GROUP_OPEN;
    }
    return RUNNER_GROUP_RESTRICTED;
}

struct group_check {
    const struct github_scope *scope;
    enum runner_group_verdict verdict;
    char why[384];
    char error[256]; /* the last question's failure, or "" */
    int64_t checked_ms, failed_ms;
    bool asking;
};

struct runner_group_checks {
    struct group_check *of; /* per scope */
    size_t n;
    int pending; /* requests in flight */
    bool closing;
};

struct group_ask {
    struct runner_group_checks *checks;
    size_t i;
    void (*on_change)(void *data);
    void *data;
};

struct runner_group_checks *runner_group_checks_new(const struct github_scope *scopes, size_t n)
{
    struct runner_group_checks *c = calloc(1, sizeof(*c));
    if (c)
        c->of = calloc(n + 1, sizeof(*c->of));
    if (!c || !c->of) {
        free(c);
        return NULL;
    }
    c->n = n;
    for (size_t i = 0; i < n; i++)
        c->of[i].scope = &scopes[i];
    return c;
}

static void checks_release(struct runner_group_checks *c)
{
    if (!c->closing || c->pending > 0)
        return;
    free(c->of);
    free(c);
}

void runner_group_checks_free(struct runner_group_checks *checks)
{
    if (!checks)
        return;
    checks->closing = true;
    checks_release(checks);
}

static void note_verdict(const struct group_check *g, enum runner_group_verdict was)
{
    const struct github_scope *sc = g->scope;
    if (g->verdict == was)
        return;
    if (g->verdict == RUNNER_GROUP_OPEN)
        log_warn("github.runner_group_open",
                 "org=%s runner_group_id=%lld action=\"trusted pools of this scope get no "
                 "runner\" reason=\"%s\"",
                 sc->org, (long long)sc->runner_group_id, g->why);
    else
        log_info("github.runner_group_restricted", "org=%s runner_group_id=%lld", sc->org,
                 (long long)sc->runner_group_id);
}

static void on_group(void *data, const struct github_response *res)
{
    struct group_ask *a = data;
    struct runner_group_checks *c = a->checks;
    c->pending--;
    if (c->closing) {
        free(a);
        checks_release(c);
        return;
    }
    struct group_check *g = &c->of[a->i];
    g->asking = false;
    enum runner_group_verdict was = g->verdict;
    char why[sizeof(g->why)];
    enum runner_group_verdict v =
        res->err < 0 ? RUNNER_GROUP_UNKNOWN : runner_group_judge(res->body, why, sizeof(why));
    if (v == RUNNER_GROUP_UNKNOWN) {
        /* A verdict GitHub gave stands until GitHub gives another. */
        g->failed_ms = wall_clock_ms();
        quotable(res->err < 0 ? res->message : why, g->error, sizeof(g->error));
        log_warn("github.runner_group_unchecked",
                 "org=%s runner_group_id=%lld status=%ld error=\"%s\" verdict=%s", g->scope->org,
                 (long long)g->scope->runner_group_id, res->status, g->error,
                 runner_group_verdict_names[g->verdict]);
    } else {
        g->verdict = v;
        g->error[0] = 0;
        g->checked_ms = wall_clock_ms();
        snprintf(g->why, sizeof(g->why), "%s", v == RUNNER_GROUP_OPEN ? why : "");
        note_verdict(g, was);
    }
    if (g->verdict != was && a->on_change)
        a->on_change(a->data);
    free(a);
}

void runner_group_checks_ask(struct runner_group_checks *checks, struct github_client *github,
                             size_t i, bool only_if_unknown, void (*on_change)(void *data),
                             void *data)
{
    if (!checks || !github || i >= checks->n || !checks->of[i].scope->org)
        return;
    struct group_check *g = &checks->of[i];
    if (g->asking || (only_if_unknown &&
                      (g->verdict != RUNNER_GROUP_UNKNOWN ||
                       (g->failed_ms && wall_clock_ms() - g->failed_ms < RETRY_AFTER_FAILURE_MS))))
        return;
    struct group_ask *a = calloc(1, sizeof(*a));
    if (!a)
        return;
    *a = (struct group_ask){checks, i, on_change, data};
    checks->pending++;
    g->asking = true;
    if (github_runner_group_get(github, g->scope->org, g->scope->runner_group_id, on_group, a) <
        0) {
        checks->pending--;
        g->asking = false;
        g->failed_ms = wall_clock_ms();
        snprintf(g->error, sizeof(g->error), "the request could not be made");
        free(a);
    }
}

bool runner_group_checks_allow(const struct runner_group_checks *checks, size_t i, char *why,
                               size_t why_size)
{
    if (!checks || i >= checks->n) {
        snprintf(why, why_size, "its runner group is not known");
        return false;
    }
    const struct group_check *g = &checks->of[i];
    const struct github_scope *sc = g->scope;
    switch (g->verdict) {
    case RUNNER_GROUP_RESTRICTED:
        return true;
    case RUNNER_GROUP_OPEN:
        snprintf(why, why_size, "trusted pool, but runner group %lld of %s is open: %s",
                 (long long)sc->runner_group_id, sc->org, g->why);
        return false;
    default:
        if (g->error[0])
            snprintf(why, why_size, "trusted pool: runner group %lld of %s not checked: %s",
                     (long long)sc->runner_group_id, sc->org, g->error);
        else
            snprintf(why, why_size, "trusted pool: asking GitHub about runner group %lld of %s",
                     (long long)sc->runner_group_id, sc->org);
        return false;
    }
}

json_t *runner_group_checks_json(const struct runner_group_checks *checks, size_t i)
{
    if (!checks || i >= checks->n)
        return NULL;
    const struct group_check *g = &checks->of[i];
    if (!g->checked_ms && !g->failed_ms && !g->asking)
        return NULL;
    json_t *o = json_pack("{s:s}", "verdict", runner_group_verdict_names[g->verdict]);
    if (o && g->why[0])
        json_object_set_new(o, "why", json_string(g->why));
    if (o && g->error[0])
        json_object_set_new(o, "error", json_string(g->error));
    if (o && g->checked_ms)
        json_object_set_new(o, "checked_ms", json_integer(g->checked_ms));
    return o;
}
