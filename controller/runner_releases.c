/* GitHub's runner releases, fetched now and then (runner_releases.h). */
#include "runner_releases.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "log.h"
#include "wall_clock.h"

struct runner_releases {
    struct github_client *github;
    runner_releases_cb fetched;
    void *data;
    uv_timer_t timer;
    json_t *list;
    int64_t fetched_ms;
    bool fetching;     /* a request is out: its callback comes, answered or cancelled */
    bool freed;        /* runner_releases_free() was called */
    bool timer_closed; /* the timer's close callback ran */
};

static void on_timer(uv_timer_t *t);

static void free_when_idle(struct runner_releases *rr)
{
    if (rr->freed && rr->timer_closed && !rr->fetching) {
        json_decref(rr->list);
        free(rr);
    }
}

static void on_timer_closed(uv_handle_t *h)
{
    struct runner_releases *rr = h->data;
    rr->timer_closed = true;
    free_when_idle(rr);
}

/* GitHub's answer: an array of releases, kept if runner_version_judge can read it all. */
static void on_releases(void *data, const struct github_response *res)
{
    struct runner_releases *rr = data;
    rr->fetching = false;
    if (rr->freed) {
        free_when_idle(rr);
        return;
    }
    uint64_t next_s = RUNNER_RELEASES_INTERVAL_S;
    struct runner_judgement j;
    char why[256] = "";
    if (res->err < 0)
        snprintf(why, sizeof(why), "%s", res->message ? res->message : "request failed");
    else if (runner_version_judge("0.0.0", res->body, &j, why, sizeof(why)) < 0)
        ; /* `why` says what is wrong with the list */
    else if (json_array_size(res->body) == 0)
        snprintf(why, sizeof(why), "GitHub listed no release");
    if (why[0]) {
        /* An Enterprise Server has no actions/runner (404): not a fault, said at info and
         * asked again at the usual interval. */
        if (res->err == -ENOENT)
            log_info("runner_releases.unavailable",
                     "reason=\"%s\" action=\"judging images by the runner floor alone\"", why);
        else
            log_warn("runner_releases.fetch_failed", "reason=\"%s\" retry_s=%d", why,
                     RUNNER_RELEASES_RETRY_S);
        next_s = res->err == -ENOENT ? RUNNER_RELEASES_INTERVAL_S : RUNNER_RELEASES_RETRY_S;
    } else {
        json_decref(rr->list);
        rr->list = json_incref(res->body);
        rr->fetched_ms = wall_clock_ms();
        log_info("runner_releases.fetched", "releases=%zu newest=%ld.%ld.%ld",
                 json_array_size(rr->list), j.newest[0], j.newest[1], j.newest[2]);
    }
    uv_timer_start(&rr->timer, on_timer, next_s * 1000, 0);
    if (!why[0] && rr->fetched)
        rr->fetched(rr->data);
}

static void on_timer(uv_timer_t *t)
{
    struct runner_releases *rr = t->data;
    if (rr->fetching)
        return;
    rr->fetching = true;
    if (github_request(rr->github, "GET", RUNNER_RELEASES_PATH, NULL, on_releases, rr) < 0) {
        rr->fetching = false;
        log_warn("runner_releases.fetch_failed", "reason=\"cannot start the request\" retry_s=%d",
                 RUNNER_RELEASES_RETRY_S);
        uv_timer_start(&rr->timer, on_timer, (uint64_t)RUNNER_RELEASES_RETRY_S * 1000, 0);
    }
}

int runner_releases_new(uv_loop_t *loop, struct github_client *github, runner_releases_cb fetched,
                        void *data, struct runner_releases **ret)
{
    struct runner_releases *rr = calloc(1, sizeof(*rr));
    if (!rr)
        return -ENOMEM;
    rr->github = github;
    rr->fetched = fetched;
    rr->data = data;
    uv_timer_init(loop, &rr->timer);
    rr->timer.data = rr;
    uv_timer_start(&rr->timer, on_timer, (uint64_t)RUNNER_RELEASES_FIRST_S * 1000, 0);
    *ret = rr;
    return 0;
}

void runner_releases_free(struct runner_releases *rr)
{
    if (!rr)
        return;
    rr->freed = true;
    uv_close((uv_handle_t *)&rr->timer, on_timer_closed);
}

const json_t *runner_releases_list(const struct runner_releases *rr)
{
    return rr ? rr->list : NULL;
}

int64_t runner_releases_fetched_ms(const struct runner_releases *rr)
{
    return rr ? rr->fetched_ms : 0;
}

int runner_releases_judge(const struct runner_releases *rr, const char *version,
                          struct runner_judgement *ret, char *msg, size_t msg_size)
{
    return runner_version_judge(version, runner_releases_list(rr), ret, msg, msg_size);
}
