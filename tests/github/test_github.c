/* The GitHub client against Prism (GitHub's OpenAPI description) behind the GitHub double
 * (tests/github/github-double.mjs), run by with-prism.sh. Every request must pass Prism's
 * validation: the double records each 422 from Prism as a violation and every test ends by
 * asserting there were none. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "github.h"
#include "log.h"
#include "textbuf.h"

static const char *double_url;
static uv_loop_t loop;
static const struct github_scope repo_scope = {.repo = "octo/hello", .runner_group_id = 1};
static const struct github_scope org_scope = {.org = "octo", .runner_group_id = 3};
static const struct github_scope enterprise_scope = {.enterprise = "octo-corp",
                                                     .runner_group_id = 4};

/* ---- talking to the double (blocking curl is fine in a test) ------------------------- */

static size_t collect(char *p, size_t s, size_t n, void *u)
{
    textbuf_append(u, p, s * n);
    return s * n;
}

static json_t *control(const char *method, const char *path, const char *body)
{
    char url[512];
    snprintf(url, sizeof(url), "%s%s", double_url, path);
    CURL *e = curl_easy_init();
    struct textbuf out;
    textbuf_init(&out, 16 * 1024 * 1024);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &out);
    if (body)
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    assert_int_equal(curl_easy_perform(e), CURLE_OK);
    curl_easy_cleanup(e);
    json_t *j = out.len ? json_loadb(out.data, out.len, 0, NULL) : NULL;
    textbuf_free(&out);
    return j;
}

static void fault(const char *json_array)
{
    json_decref(control("POST", "/__double/faults", json_array));
}

/* Requests the double saw whose URL contains `needle` (and method, when given). */
static int count_requests(const char *method, const char *needle)
{
    json_t *l = control("GET", "/__double/log", NULL);
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(l, "log"), i, e)
    {
        if (strstr(json_string_value(json_object_get(e, "url")), needle) &&
            (!method || strcmp(json_string_value(json_object_get(e, "method")), method) == 0))
            n++;
    }
    json_decref(l);
    return n;
}

static void assert_no_violations(void)
{
    json_t *l = control("GET", "/__double/log", NULL);
    json_t *v = json_object_get(l, "violations");
    if (json_array_size(v)) {
        char *text = json_dumps(v, JSON_INDENT(1));
        fail_msg("Prism/JWT violations: %s", text);
    }
    json_decref(l);
}

/* ---- the client ---------------------------------------------------------------------- */

static const char *api_url;
static const struct github_scope *lookup_scope = &repo_scope; /* where the installation is */

static struct github_client *client_with(enum github_auth_mode auth, const char *token_file,
                                         size_t max_response, long timeout_ms)
{
    struct github_options o = {
        .api_url = api_url ? api_url : double_url,
        .auth = auth,
        .app_id = strtoll(getenv("APP_ID"), NULL, 10),
        .app_key_file = getenv("APP_KEY_FILE"),
        .token_file = token_file,
        .user_agent = "hatchery-test/1",
        .timeout_ms = timeout_ms,
        .max_retries = 3,
        .max_response_bytes = max_response,
        .max_backoff_ms = 100,
        .lookup_scope = lookup_scope,
    };
    struct github_client *c = NULL;
    char err[256];
    int r = github_client_new(&loop, &o, &c, err, sizeof(err));
    if (r < 0)
        fail_msg("client: %s", err);
    return c;
}

static struct github_client *client(void)
{
    return client_with(GITHUB_AUTH_APP, NULL, 1024 * 1024, 3000);
}

static void client_done(struct github_client *c)
{
    github_client_free(c);
    uv_run(&loop, UV_RUN_DEFAULT);
}

struct result {
    bool done;
    int err;
    long status;
    char message[256];
    int64_t runner_id;
    size_t jit_len;
    json_t *items;
    json_t *body;
};

static void wait_for(struct result *r)
{
    while (!r->done)
        uv_run(&loop, UV_RUN_ONCE);
}

static void on_jit(void *data, int err, const char *message, int64_t runner_id, struct secret *jit)
{
    struct result *r = data;
    r->done = true;
    r->err = err;
    snprintf(r->message, sizeof(r->message), "%s", message ? message : "");
    r->runner_id = runner_id;
    r->jit_len = jit ? secret_size(jit) : 0;
    secret_free(jit);
}

static void on_list(void *data, int err, const char *message, json_t *items)
{
    struct result *r = data;
    r->done = true;
    r->err = err;
    snprintf(r->message, sizeof(r->message), "%s", message ? message : "");
    r->items = json_incref(items);
}

static void on_json(void *data, const struct github_response *res)
{
    struct result *r = data;
    r->done = true;
    r->err = res->err;
    r->status = res->status;
    snprintf(r->message, sizeof(r->message), "%s", res->message ? res->message : "");
    r->body = json_incref(res->body);
}

static void on_done(void *data, int err, const char *message)
{
    struct result *r = data;
    r->done = true;
    r->err = err;
    snprintf(r->message, sizeof(r->message), "%s", message ? message : "");
}

static struct result jit(struct github_client *c, const struct github_scope *scope,
                         const char *name)
{
    const char *labels[] = {"self-hosted", "linux.ppc64le"};
    struct result r = {0};
    assert_int_equal(github_jitconfig_generate(c, scope, name, labels, 2, "_work", on_jit, &r), 0);
    wait_for(&r);
    return r;
}

static int reset_double(void **state)
{
    (void)state;
    json_decref(control("DELETE", "/__double/log", NULL));
    json_decref(control("POST", "/__double/token-ttl", "3600"));
    return 0;
}

/* ---- tests ----------------------------------------------------------------------------- */

static void test_jwt_is_well_formed(void **state)
{
    (void)state;
    struct github_client *c = client();
    struct secret *jwt = NULL;
    time_t now = time(NULL);
    assert_int_equal(github_app_jwt(c, now, &jwt), 0);
    char *text = NULL;
    assert_int_equal(secret_reveal(jwt, "", &text), 0);
    /* header.claims.signature, base64url without padding */
    char *dot1 = strchr(text, '.'), *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
    assert_non_null(dot2);
    assert_null(strchr(text, '='));
    assert_null(strchr(text, '+'));
    assert_null(strchr(text, '/'));
    secret_reveal_free(text);
    secret_free(jwt);
    client_done(c);
    /* The signature and the claims are checked by the double (node's crypto) on every
     * JWT request; this call makes one. */
    c = client();
    struct result r = jit(c, &repo_scope, "hatchery-t-jwt");
    assert_int_equal(r.err, 0);
    assert_int_equal(count_requests("GET", "/repos/octo/hello/installation"), 1);
    assert_int_equal(count_requests("POST", "/access_tokens"), 1);
    client_done(c);
    assert_no_violations();
}

static void test_jwt_from_another_key_is_refused(void **state)
{
    (void)state;
    /* The double's check is real: a JWT signed by a key that is not the App's fails. */
    char key[] = "/tmp/hatchery-otherkey-XXXXXX";
    int fd = mkstemp(key);
    close(fd);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "openssl genrsa -out %s 2048 2>/dev/null && chmod 600 %s", key, key);
    assert_int_equal(system(cmd), 0);
    setenv("APP_KEY_FILE_SAVED", getenv("APP_KEY_FILE"), 1);
    setenv("APP_KEY_FILE", key, 1);
    struct github_client *c = client();
    setenv("APP_KEY_FILE", getenv("APP_KEY_FILE_SAVED"), 1);
    struct result r = jit(c, &repo_scope, "hatchery-t-badjwt");
    assert_int_equal(r.err, -EACCES);
    client_done(c);
    unlink(key);
    json_t *l = control("GET", "/__double/log", NULL);
    json_t *v = json_array_get(json_object_get(l, "violations"), 0);
    assert_non_null(strstr(json_string_value(json_object_get(v, "problem")), "signature"));
    json_decref(l);
}

static void test_secrets_never_reach_the_log(void **state)
{
    (void)state;
    char path[] = "/tmp/hatchery-ghlog-XXXXXX";
    int fd = mkstemp(path);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    log_level_set(LOG_DEBUG);
    struct github_client *c = client();
    struct result r = jit(c, &repo_scope, "hatchery-t-log1");
    json_decref(control("POST", "/__double/revoke", NULL));
    fault("[{\"method\":\"POST\",\"path\":\"generate-jitconfig\",\"status\":500}]");
    r = jit(c, &repo_scope, "hatchery-t-log2");
    assert_int_equal(r.err, 0);
    client_done(c);
    fflush(stderr);
    log_level_set(LOG_ERROR);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char text[65536] = "";
    ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    close(fd);
    unlink(path);
    assert_true(n > 0); /* it did log: retries, refreshes */
    assert_non_null(strstr(text, "github.retry"));
    assert_non_null(strstr(text, "github.token_refreshed"));
    assert_null(strstr(text, "Bearer"));
    assert_null(strstr(text, "abc123")); /* Prism's example encoded_jit_config */
    json_t *l = control("GET", "/__double/log", NULL);
    size_t i;
    json_t *e;
    int issued = 0;
    json_array_foreach(json_object_get(l, "log"), i, e)
    {
        const char *token = json_string_value(json_object_get(e, "issued"));
        if (!token)
            continue;
        issued++;
        assert_null(strstr(text, token));
        assert_null(strstr(text, token + 4)); /* without the ghs_ prefix either */
    }
    assert_int_equal(issued, 2);
    json_decref(l);
}

static void test_jitconfig_repo_and_org(void **state)
{
    (void)state;
    struct github_client *c = client();
    struct result r = jit(c, &repo_scope, "hatchery-t-1");
    assert_int_equal(r.err, 0);
    assert_true(r.runner_id > 0);
    assert_true(r.jit_len > 0);
    r = jit(c, &org_scope, "hatchery-t-2");
    assert_int_equal(r.err, 0);
    /* One token served both: cached, not fetched per call. */
    assert_int_equal(count_requests("POST", "/access_tokens"), 1);
    json_t *l = control("GET", "/__double/log", NULL);
    json_t *last =
        json_array_get(json_object_get(l, "log"), json_array_size(json_object_get(l, "log")) - 1);
    json_t *h = json_object_get(last, "headers");
    assert_string_equal(json_string_value(json_object_get(h, "accept")),
                        "application/vnd.github+json");
    assert_string_equal(json_string_value(json_object_get(h, "x-github-api-version")),
                        "2022-11-28");
    assert_string_equal(json_string_value(json_object_get(h, "user-agent")), "hatchery-test/1");
    assert_string_equal(json_string_value(json_object_get(last, "url")),
                        "/orgs/octo/actions/runners/generate-jitconfig");
    json_t *body = json_loads(json_string_value(json_object_get(last, "body")), 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(body, "runner_group_id")), 3);
    assert_string_equal(json_string_value(json_object_get(body, "work_folder")), "_work");
    assert_int_equal(json_array_size(json_object_get(body, "labels")), 2);
    json_decref(body);
    json_decref(l);
    client_done(c);
    assert_no_violations();
}

static void test_every_operation_passes_prism(void **state)
{
    (void)state;
    struct github_client *c = client();
    struct result r = {0};
    assert_int_equal(github_runners_list(c, &repo_scope, NULL, on_list, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, 0);
    assert_true(json_array_size(r.items) >= 1);
    json_decref(r.items);

    r = (struct result){0};
    assert_int_equal(github_runners_list(c, &org_scope, "hatchery-t-x", on_list, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, 0);
    json_decref(r.items);

    r = (struct result){0};
    assert_int_equal(github_runner_get(c, &org_scope, 23, on_json, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, 0);
    assert_true(json_is_integer(json_object_get(r.body, "id")));
    json_decref(r.body);

    r = (struct result){0};
    assert_int_equal(github_runner_delete(c, &repo_scope, 23, on_done, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, 0);

    r = (struct result){0};
    assert_int_equal(github_job_get(c, "octo/hello", 399444496, on_json, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, 0);
    assert_non_null(json_object_get(r.body, "labels"));
    json_decref(r.body);

    r = (struct result){0};
    assert_int_equal(github_queued_jobs_list(c, "octo/hello", on_list, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, 0);
    assert_true(json_is_array(r.items));
    json_decref(r.items);
    assert_true(count_requests("GET", "/actions/runs?status=queued") == 1);
    assert_true(count_requests("GET", "/jobs?filter=latest") >= 1);
    client_done(c);
    assert_no_violations();
}

static void test_5xx_is_retried_then_fails_clearly(void **state)
{
    (void)state;
    struct github_client *c = client();
    fault("[{\"method\":\"POST\",\"path\":\"generate-jitconfig\",\"status\":502,\"times\":2}]");
    struct result r = jit(c, &repo_scope, "hatchery-t-5xx");
    assert_int_equal(r.err, 0);
    assert_int_equal(count_requests("POST", "generate-jitconfig"), 3);

    fault("[{\"method\":\"POST\",\"path\":\"generate-jitconfig\",\"status\":503,\"times\":10}]");
    r = jit(c, &repo_scope, "hatchery-t-5xx-2");
    assert_true(r.err < 0);
    assert_non_null(strstr(r.message, "503"));
    /* 1 + max_retries (3), then it stops: nothing retries forever. */
    assert_int_equal(count_requests("POST", "generate-jitconfig"), 3 + 4);
    struct github_stats st;
    github_client_stats(c, &st);
    assert_true(st.retries >= 5);
    json_decref(control("DELETE", "/__double/log", NULL));
    client_done(c);
}

/* Many calls at once: 16 go to curl, the rest wait their turn without a handle, and all
 * are answered; then with every token revoked, the calls holding the slots get 401s and
 * wait for a new token without holding them, so the token's own request gets one. */
#define MANY_CALLS 60
static void test_many_calls_take_turns(void **state)
{
    (void)state;
    struct github_client *c = client();
    struct result r[MANY_CALLS];
    for (int round = 0; round < 2; round++) {
        fault("[{\"method\":\"GET\",\"path\":\"/runners/23\",\"delay_ms\":100,"
              "\"times\":1000}]");
        memset(r, 0, sizeof(r));
        for (int i = 0; i < MANY_CALLS; i++)
            assert_int_equal(github_runner_get(c, &repo_scope, 23, on_json, &r[i]), 0);
        /* Round 0: the token is fetched first. Once the calls go out, 16 hold handles. */
        struct github_stats st;
        for (github_client_stats(c, &st); st.sending < 16 && !r[0].done;
             github_client_stats(c, &st))
            uv_run(&loop, UV_RUN_ONCE);
        assert_int_equal(st.sending, 16);
        assert_true(st.queued >= MANY_CALLS - 16 - 1);
        for (int i = 0; i < MANY_CALLS; i++) {
            wait_for(&r[i]);
            assert_int_equal(r[i].err, 0);
            json_decref(r[i].body);
        }
        github_client_stats(c, &st);
        assert_int_equal(st.sending, 0);
        assert_int_equal(st.queued, 0);
        json_decref(control("POST", "/__double/revoke", NULL));
    }
    /* In round 1, only the calls holding a slot went out with the revoked token: at most
     * 16 were sent twice (without the turns, all 60 were handed to curl with it). */
    int sent = count_requests("GET", "/runners/23");
    assert_in_range(sent, MANY_CALLS * 2 + 1, MANY_CALLS * 2 + 16);
    client_done(c);
    assert_no_violations();
}

static void test_reset_and_timeout_are_retried(void **state)
{
    (void)state;
    /* The hang must end by the timeout and nothing else may: an answer of Prism's slower
     * than the timeout is retried too, and counted (at 700 ms, a TSan build beside the
     * guest tests saw 5 requests). The default 3 s leaves every real answer room. */
    struct github_client *c = client();
    fault("[{\"method\":\"GET\",\"path\":\"/runners/23\",\"reset\":true},"
          "{\"method\":\"GET\",\"path\":\"/runners/23\",\"hang\":true}]");
    struct result r = {0};
    assert_int_equal(github_runner_get(c, &repo_scope, 23, on_json, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, 0);
    json_decref(r.body);
    assert_int_equal(count_requests("GET", "/runners/23"), 3);
    client_done(c);
    assert_no_violations();
}

static void test_rate_limits_are_waited_out(void **state)
{
    (void)state;
    struct github_client *c = client();
    fault("[{\"method\":\"GET\",\"path\":\"/runners/23\",\"status\":429,"
          "\"headers\":{\"Retry-After\":\"1\"}}]");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct result r = {0};
    assert_int_equal(github_runner_get(c, &repo_scope, 23, on_json, &r), 0);
    wait_for(&r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_int_equal(r.err, 0);
    json_decref(r.body);
    assert_true(t1.tv_sec - t0.tv_sec + (t1.tv_nsec - t0.tv_nsec) / 1e9 >= 0.9);

    /* Primary limit: 403 with X-RateLimit-Remaining: 0 waits for X-RateLimit-Reset. */
    char f[512];
    snprintf(f, sizeof(f),
             "[{\"method\":\"GET\",\"path\":\"/runners/24\",\"status\":403,"
             "\"headers\":{\"X-RateLimit-Remaining\":\"0\",\"X-RateLimit-Reset\":\"%lld\"},"
             "\"body\":{\"message\":\"API rate limit exceeded\"}}]",
             (long long)time(NULL) + 1);
    fault(f);
    r = (struct result){0};
    assert_int_equal(github_runner_get(c, &repo_scope, 24, on_json, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, 0);
    json_decref(r.body);
    struct github_stats st;
    github_client_stats(c, &st);
    assert_int_equal(st.rate_limited, 2);

    /* The budget GitHub reports is kept for /metrics. */
    fault("[{\"method\":\"GET\",\"path\":\"/runners/25\",\"ratelimit\":"
          "{\"X-RateLimit-Remaining\":\"4321\",\"X-RateLimit-Reset\":\"1900000000\"}}]");
    r = (struct result){0};
    assert_int_equal(github_runner_get(c, &repo_scope, 25, on_json, &r), 0);
    wait_for(&r);
    json_decref(r.body);
    github_client_stats(c, &st);
    assert_int_equal(st.ratelimit_remaining, 4321);
    assert_int_equal(st.ratelimit_reset, 1900000000);
    /* A plain 403 (no limit headers) is a permission problem: no waiting, a clear error. */
    fault("[{\"method\":\"GET\",\"path\":\"/runners/26\",\"status\":403,"
          "\"body\":{\"message\":\"Resource not accessible by integration\"}}]");
    r = (struct result){0};
    assert_int_equal(github_runner_get(c, &repo_scope, 26, on_json, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, -EPERM);
    assert_non_null(strstr(r.message, "Resource not accessible by integration"));
    json_decref(r.body);
    client_done(c);
    assert_no_violations();
}

static void test_401_refreshes_once_then_fails_loudly(void **state)
{
    (void)state;
    struct github_client *c = client();
    struct result r = jit(c, &repo_scope, "hatchery-t-401a");
    assert_int_equal(r.err, 0);
    json_decref(control("POST", "/__double/revoke", NULL));
    r = jit(c, &repo_scope, "hatchery-t-401b");
    assert_int_equal(r.err, 0);
    assert_int_equal(count_requests("POST", "/access_tokens"), 2);
    struct github_stats st;
    github_client_stats(c, &st);
    assert_int_equal(st.auth_failures, 0); /* mended by the refresh: not a failure */
    client_done(c);

    /* A configured token GitHub refuses: no refresh possible, a clear error at once. */
    char path[] = "/tmp/hatchery-token-XXXXXX";
    int fd = mkstemp(path);
    assert_true(write(fd, "github_pat_not_valid\n", 21) == 21);
    close(fd);
    c = client_with(GITHUB_AUTH_TOKEN, path, 1024 * 1024, 3000);
    r = jit(c, &repo_scope, "hatchery-t-401c");
    assert_int_equal(r.err, -EACCES);
    assert_non_null(strstr(r.message, "github.token_file"));
    github_client_stats(c, &st);
    assert_int_equal(st.auth_failures, 1);
    assert_int_equal(st.failures, 1);
    client_done(c);
    unlink(path);
}

static void test_expiring_token_is_refreshed_before_use(void **state)
{
    (void)state;
    /* Tokens that expire within the refresh margin are replaced before the next call. */
    json_decref(control("POST", "/__double/token-ttl", "400"));
    struct github_client *c = client();
    struct result r = jit(c, &repo_scope, "hatchery-t-exp1");
    assert_int_equal(r.err, 0);
    json_decref(control("POST", "/__double/token-ttl", "3600"));
    r = jit(c, &repo_scope, "hatchery-t-exp2");
    assert_int_equal(r.err, 0);
    r = jit(c, &repo_scope, "hatchery-t-exp3");
    assert_int_equal(r.err, 0);
    /* A 400 s token leaves 100 s before the 300 s refresh margin: all three calls share it. */
    assert_int_equal(count_requests("POST", "/access_tokens"), 1);
    client_done(c);
    json_decref(control("POST", "/__double/token-ttl", "200"));
    c = client();
    r = jit(c, &repo_scope, "hatchery-t-exp4");
    /* A token that arrives already inside the margin is an error, not a refresh loop. */
    assert_int_equal(r.err, -EBADMSG);
    assert_int_equal(count_requests("POST", "/access_tokens"), 2);
    client_done(c);
}

static void test_404_on_delete_is_success(void **state)
{
    (void)state;
    struct github_client *c = client();
    /* GitHub's 404 itself: the description has no 404 for this operation, so asking Prism
     * for one (prefer) got a 204 and tested nothing. */
    fault("[{\"method\":\"DELETE\",\"path\":\"/runners/77\",\"status\":404,"
          "\"body\":{\"message\":\"Not Found\"}}]");
    struct result r = {0};
    struct github_stats before, after;
    github_client_stats(c, &before);
    assert_int_equal(github_runner_delete(c, &org_scope, 77, on_done, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, 0);
    /* Not a failure anywhere: not counted, and not the last error `hatchery github` shows. */
    github_client_stats(c, &after);
    assert_int_equal(after.failures, before.failures);
    assert_int_equal(after.auth_failures, before.auth_failures);
    json_t *status = github_client_status(c);
    assert_true(json_is_null(json_object_get(status, "last_error")) ||
                !strstr(json_string_value(json_object_get(status, "last_error")), "/runners/77"));
    json_decref(status);
    client_done(c);
}

static void test_name_conflicts_never_make_two_runners(void **state)
{
    (void)state;
    struct github_client *c = client();
    /* Prism's list example holds mac_runner (offline, idle) and linux_runner (busy). */
    fault("[{\"method\":\"POST\",\"path\":\"generate-jitconfig\",\"prefer\":409}]");
    struct result r = jit(c, &repo_scope, "mac_runner");
    assert_int_equal(r.err, 0);
    assert_int_equal(count_requests("DELETE", "/actions/runners/24"), 1);
    assert_int_equal(count_requests("POST", "generate-jitconfig"), 2);

    fault("[{\"method\":\"POST\",\"path\":\"generate-jitconfig\",\"prefer\":422}]");
    r = jit(c, &repo_scope, "linux_runner");
    assert_int_equal(r.err, -EEXIST);
    assert_non_null(strstr(r.message, "busy"));
    assert_int_equal(count_requests("POST", "generate-jitconfig"), 3);

    /* A conflict that repeats after the stale runner was removed is an error, not a loop. */
    fault("[{\"method\":\"POST\",\"path\":\"generate-jitconfig\",\"prefer\":409,\"times\":2}]");
    r = jit(c, &repo_scope, "mac_runner");
    assert_int_equal(r.err, -EEXIST);
    client_done(c);
    assert_no_violations();
}

static void test_malformed_and_oversized_answers(void **state)
{
    (void)state;
    struct github_client *c = client_with(GITHUB_AUTH_APP, NULL, 64 * 1024, 3000);
    fault("[{\"method\":\"GET\",\"path\":\"/runners/23\",\"status\":200,\"raw\":\"{not json\"}]");
    struct result r = {0};
    assert_int_equal(github_runner_get(c, &repo_scope, 23, on_json, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, -EBADMSG);
    assert_non_null(strstr(r.message, "malformed JSON"));

    char *big = malloc(200 * 1024);
    memset(big, 'x', 200 * 1024 - 1);
    big[200 * 1024 - 1] = 0;
    json_t *f = json_pack("[{s:s, s:s, s:i, s:s}]", "method", "GET", "path", "/runners/24",
                          "status", 200, "raw", big);
    char *text = json_dumps(f, JSON_COMPACT);
    fault(text);
    free(text);
    json_decref(f);
    free(big);
    r = (struct result){0};
    assert_int_equal(github_runner_get(c, &repo_scope, 24, on_json, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, -EMSGSIZE);

    /* A success without the fields the client needs is an error, not a crash. */
    fault("[{\"method\":\"POST\",\"path\":\"generate-jitconfig\",\"status\":201,"
          "\"body\":{\"runner\":{}}}]");
    r = jit(c, &repo_scope, "hatchery-t-empty");
    assert_int_equal(r.err, -EBADMSG);
    client_done(c);
}

static void test_pagination_stays_on_the_api_host(void **state)
{
    (void)state;
    struct github_client *c = client();
    fault(
        "[{\"method\":\"GET\",\"path\":\"/repos/octo/hello/actions/runners\\\\?per_page\","
        "\"link\":\"<SELF/repos/octo/hello/actions/runners?per_page=100&page=2>; rel=\\\"next\\\", "
        "<SELF/repos/octo/hello/actions/runners?per_page=100&page=2>; rel=\\\"last\\\"\"}]");
    struct result r = {0};
    assert_int_equal(github_runners_list(c, &repo_scope, NULL, on_list, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, 0);
    assert_int_equal(json_array_size(r.items), 4); /* two pages of Prism's two runners */
    json_decref(r.items);
    assert_int_equal(count_requests("GET", "page=2"), 1);

    fault("[{\"method\":\"GET\",\"path\":\"/orgs/octo/actions/runners\","
          "\"link\":\"<http://api.github.com.evil.example/orgs/octo/actions/runners?page=2>; "
          "rel=\\\"next\\\"\"}]");
    r = (struct result){0};
    assert_int_equal(github_runners_list(c, &org_scope, NULL, on_list, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, -EPERM);
    assert_non_null(strstr(r.message, "off the API host"));
    client_done(c);
    assert_no_violations();
}

/* An enterprise's runners (GitHub Enterprise Cloud's description, which Prism serves for
 * these paths): the App's installation on the enterprise, then JIT configs, lists, gets and
 * deletes under /enterprises/SLUG. */
static void test_enterprise_scope(void **state)
{
    (void)state;
    lookup_scope = &enterprise_scope;
    struct github_client *c = client();
    lookup_scope = &repo_scope;
    struct result r = jit(c, &enterprise_scope, "hatchery-t-ent");
    assert_int_equal(r.err, 0);
    assert_int_equal(count_requests("GET", "/enterprises/octo-corp/installation"), 1);
    assert_int_equal(
        count_requests("POST", "/enterprises/octo-corp/actions/runners/generate-jitconfig"), 1);
    json_t *l = control("GET", "/__double/log", NULL);
    json_t *last =
        json_array_get(json_object_get(l, "log"), json_array_size(json_object_get(l, "log")) - 1);
    json_t *body = json_loads(json_string_value(json_object_get(last, "body")), 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(body, "runner_group_id")), 4);
    json_decref(body);
    json_decref(l);

    r = (struct result){0};
    assert_int_equal(github_runners_list(c, &enterprise_scope, "hatchery-t-ent", on_list, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, 0);
    json_decref(r.items);
    assert_int_equal(count_requests("GET", "/enterprises/octo-corp/actions/runners?"), 1);

    r = (struct result){0};
    assert_int_equal(github_runner_delete(c, &enterprise_scope, 23, on_done, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, 0);
    assert_int_equal(count_requests("DELETE", "/enterprises/octo-corp/actions/runners/23"), 1);
    client_done(c);
    assert_no_violations();
}

static void test_enterprise_server_path_prefix(void **state)
{
    (void)state;
    char url[256];
    snprintf(url, sizeof(url), "%s/api/v3/", double_url);
    api_url = url;
    struct github_client *c = client();
    struct result r = jit(c, &org_scope, "hatchery-t-ghes");
    assert_int_equal(r.err, 0);
    assert_int_equal(count_requests("POST", "/api/v3/orgs/octo/actions/runners/generate-jitconfig"),
                     1);
    assert_int_equal(count_requests("POST", "/api/v3/app/installations/"), 1);
    /* A next link outside the /api/v3 prefix is off the API too. */
    fault("[{\"method\":\"GET\",\"path\":\"/orgs/octo/actions/runners\","
          "\"link\":\"<SELF/orgs/octo/actions/runners?page=2>; rel=\\\"next\\\"\"}]");
    r = (struct result){0};
    assert_int_equal(github_runners_list(c, &org_scope, NULL, on_list, &r), 0);
    wait_for(&r);
    assert_int_equal(r.err, -EPERM);
    /* Nor a path that merely starts with the prefix's text, or climbs out of it. */
    static const char *const off[] = {"/api/v3x/orgs/octo/actions/runners?page=2",
                                      "/api/v3/../../orgs/octo/actions/runners?page=2",
                                      "/api/v3/%2e%2e/orgs/octo/actions/runners?page=2"};
    for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
        char f[512];
        snprintf(f, sizeof(f),
                 "[{\"method\":\"GET\",\"path\":\"/orgs/octo/actions/runners\","
                 "\"link\":\"<SELF%s>; rel=\\\"next\\\"\"}]",
                 off[i]);
        fault(f);
        r = (struct result){0};
        assert_int_equal(github_runners_list(c, &org_scope, NULL, on_list, &r), 0);
        wait_for(&r);
        if (r.err != -EPERM)
            fail_msg("followed %s (err %d)", off[i], r.err);
        assert_int_equal(count_requests("GET", "page=2"), 0);
    }
    client_done(c);
    api_url = NULL;
    assert_no_violations();
}

int main(void)
{
    double_url = getenv("GITHUB_DOUBLE_URL");
    if (!double_url || !getenv("APP_KEY_FILE")) {
        fprintf(stderr, "run me through tests/github/with-prism.sh\n");
        return 1;
    }
    log_level_set(LOG_ERROR);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    uv_loop_init(&loop);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_jwt_is_well_formed, reset_double),
        cmocka_unit_test_setup(test_jwt_from_another_key_is_refused, reset_double),
        cmocka_unit_test_setup(test_secrets_never_reach_the_log, reset_double),
        cmocka_unit_test_setup(test_jitconfig_repo_and_org, reset_double),
        cmocka_unit_test_setup(test_every_operation_passes_prism, reset_double),
        cmocka_unit_test_setup(test_5xx_is_retried_then_fails_clearly, reset_double),
        cmocka_unit_test_setup(test_reset_and_timeout_are_retried, reset_double),
        cmocka_unit_test_setup(test_many_calls_take_turns, reset_double),
        cmocka_unit_test_setup(test_rate_limits_are_waited_out, reset_double),
        cmocka_unit_test_setup(test_401_refreshes_once_then_fails_loudly, reset_double),
        cmocka_unit_test_setup(test_expiring_token_is_refreshed_before_use, reset_double),
        cmocka_unit_test_setup(test_404_on_delete_is_success, reset_double),
        cmocka_unit_test_setup(test_name_conflicts_never_make_two_runners, reset_double),
        cmocka_unit_test_setup(test_malformed_and_oversized_answers, reset_double),
        cmocka_unit_test_setup(test_pagination_stays_on_the_api_host, reset_double),
        cmocka_unit_test_setup(test_enterprise_server_path_prefix, reset_double),
        cmocka_unit_test_setup(test_enterprise_scope, reset_double),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    uv_loop_close(&loop);
    curl_global_cleanup();
    return failed;
}
