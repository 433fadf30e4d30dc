/* Webhook handling without sockets: signature, parsing, pool matching. The full set of
 * GitHub's example payloads is exercised by tests/integration/webhooks.test.mjs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "job.h"
#include "secret.h"
#include "webhook.h"

static struct config *config;
static struct secret *secret;

static int setup(void **state)
{
    (void)state;
    char path[] = "/tmp/hatchery-wh-XXXXXX";
    int fd = mkstemp(path);
    const char *yaml = "controller_id: t\nstate_dir: /tmp\nadmin_socket: /tmp/a.sock\n"
                       "webhook_secret_file: /tmp/x\n"
                       "hosts: [{name: h, uri: 'test:///default', vcpus: 8, memory_mib: 8192, "
                       "max_guests: 4}]\n"
                       "pools:\n"
                       "  - {name: ppc, labels: [Linux.PPC64LE], arch: ppc64le, image: /i, "
                       "max_runners: 2}\n"
                       "  - {name: z-big, labels: [linux.s390x, big], arch: s390x, image: /i, "
                       "max_runners: 1}\n"
                       "  - {name: z, labels: [linux.s390x], arch: s390x, image: /i, "
                       "max_runners: 1}\n";
    if (write(fd, yaml, strlen(yaml)) < 0)
        return -1;
    close(fd);
    char *errors = NULL;
    int r = config_load(path, &config, &errors);
    unlink(path);
    if (r < 0) {
        fprintf(stderr, "%s", errors);
        return -1;
    }
    return secret_from_bytes("It's a Secret to Everybody", 26, &secret);
}

static int teardown(void **state)
{
    (void)state;
    config_free(config);
    secret_free(secret);
    return 0;
}

static void test_github_documented_vector(void **state)
{
    (void)state;
    const char *body = "Hello, World!";
    assert_int_equal(webhook_signature_verify(
                         secret,
                         "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
                         body, strlen(body)),
                     0);
    /* Upper-case hex is the same MAC. */
    assert_int_equal(webhook_signature_verify(
                         secret,
                         "sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17",
                         body, strlen(body)),
                     0);
    /* One changed byte of body or MAC, a truncated MAC, a wrong scheme: all refused. */
    assert_true(webhook_signature_verify(
                    secret,
                    "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
                    "Hello, World?", 13) < 0);
    assert_true(webhook_signature_verify(
                    secret,
                    "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e18", body,
                    strlen(body)) < 0);
    assert_true(webhook_signature_verify(secret, "sha256=757107ea", body, strlen(body)) < 0);
    assert_true(webhook_signature_verify(
                    secret, "sha1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
                    body, strlen(body)) < 0);
    assert_true(webhook_signature_verify(secret, NULL, body, strlen(body)) < 0);
}

struct fake_request {
    struct http_request req;
    struct http_header headers[8];
    char signature[80];
};

static void build(struct fake_request *f, const char *event, const char *delivery, const char *body,
                  bool sign)
{
    memset(f, 0, sizeof(*f));
    f->req.method = "POST";
    f->req.url = "/webhook";
    f->req.headers = f->headers;
    f->req.body = (char *)body;
    f->req.body_len = strlen(body);
    size_t n = 0;
    if (event)
        f->headers[n++] = (struct http_header){"X-GitHub-Event", (char *)event};
    if (delivery)
        f->headers[n++] = (struct http_header){"X-GitHub-Delivery", (char *)delivery};
    f->headers[n++] = (struct http_header){"Content-Type", "application/json"};
    if (sign) {
        unsigned char mac[32];
        assert_int_equal(secret_hmac_sha256(secret, body, strlen(body), mac), 0);
        memcpy(f->signature, "sha256=", 7);
        for (int i = 0; i < 32; i++)
            snprintf(f->signature + 7 + 2 * i, 3, "%02x", mac[i]);
        f->headers[n++] = (struct http_header){"x-hub-signature-256", f->signature};
    }
    f->req.n_headers = n;
}

static void handle(const char *event, const char *body, bool sign, struct webhook_result *res)
{
    struct fake_request f;
    build(&f, event, "1b7c8e20-0000-11ef-8000-000000000001", body, sign);
    webhook_handle(config, secret, &f.req, 1000, res);
}

static const char queued[] =
    "{\"action\":\"queued\",\"workflow_job\":{\"id\":29679449589,\"run_id\":10612271045,"
    "\"labels\":[\"self-hosted\",\"linux.ppc64le\"],\"name\":\"build\",\"runner_name\":null},"
    "\"repository\":{\"full_name\":\"pytorch/pytorch\"},\"installation\":{\"id\":4}}";

static void test_workflow_job_queued(void **state)
{
    (void)state;
    struct webhook_result res;
    handle("workflow_job", queued, true, &res);
    assert_int_equal(res.outcome, WEBHOOK_STORE);
    assert_int_equal(res.status, 202);
    struct job_event *ev = res.event;
    assert_true(ev->job_id == INT64_C(29679449589)); /* > 2^31: 64-bit all the way */
    assert_true(ev->run_id == INT64_C(10612271045));
    assert_int_equal(ev->status, JOB_QUEUED);
    assert_int_equal(ev->installation_id, 4);
    assert_string_equal(ev->repository, "pytorch/pytorch");
    assert_string_equal(ev->pool, "ppc"); /* label case differs from the config */
    assert_string_equal(ev->labels_json, "[\"self-hosted\",\"linux.ppc64le\"]");
    assert_null(ev->runner_name);
    job_event_free(ev);
}

/* Without a webhook secret (every pool a scale set's), a delivery, signed or not, is
 * refused unhashed: nothing takes webhooks. */
static void test_no_secret_no_webhooks(void **state)
{
    (void)state;
    struct fake_request f;
    build(&f, "workflow_job", "1b7c8e20-0000-11ef-8000-000000000002", queued, true);
    struct webhook_result res;
    webhook_handle(config, NULL, &f.req, 1000, &res);
    assert_int_equal(res.outcome, WEBHOOK_REJECTED);
    assert_int_equal(res.status, 404);
    assert_null(res.event);
}

/* A queued job made long before its delivery (a redelivery, or a replay) is unverified,
 * and every delivery carries its body's SHA-256 for deduplication by content. */
static void test_late_queued_and_body_hash(void **state)
{
    (void)state;
    const int64_t created = INT64_C(1717236000000); /* 2024-06-01T10:00:00Z */
    static const struct {
        const char *created_at; /* NULL: no such field */
        int64_t now;
        bool unverified;
    } cases[] = {
        {"2024-06-01T10:00:00Z", INT64_C(1717236000000) + 5000, false},
        {"2024-06-01T10:00:00.123Z", INT64_C(1717236000000) + 5000, false},
        {"2024-06-01T10:00:00+00:00", INT64_C(1717236000000) + 5000, false},
        {"2024-06-01T10:00:00Z", INT64_C(1717236000000) + 11 * 60 * 1000, true},
        {"2024-06-01T12:00:00+02:00", INT64_C(1717236000000) + 5000, true}, /* not UTC: unread */
        {"yesterday", INT64_C(1717236000000), true},
        {NULL, INT64_C(1717236000000), true},
    };
    char first_hash[65] = "", first_body[512] = "";
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char body[512], field[64] = "";
        if (cases[i].created_at)
            snprintf(field, sizeof(field), "\"created_at\":\"%s\",", cases[i].created_at);
        snprintf(body, sizeof(body),
                 "{\"action\":\"queued\",\"workflow_job\":{%s\"id\":7,\"run_id\":8,"
                 "\"labels\":[\"linux.ppc64le\"]},\"repository\":{\"full_name\":\"a/b\"}}",
                 field);
        struct fake_request f;
        build(&f, "workflow_job", "1b7c8e20-0000-11ef-8000-000000000002", body, true);
        struct webhook_result res;
        webhook_handle(config, secret, &f.req, cases[i].now, &res);
        assert_int_equal(res.outcome, WEBHOOK_STORE);
        if (res.event->unverified != cases[i].unverified)
            fail_msg("created_at %s at +%lld ms: unverified %d", cases[i].created_at,
                     (long long)(cases[i].now - created), res.event->unverified);
        assert_int_equal(strlen(res.event->body_sha256), 64);
        /* The same body hashes the same (cases 0 and 3), another one not. */
        if (i == 0) {
            snprintf(first_hash, sizeof(first_hash), "%s", res.event->body_sha256);
            snprintf(first_body, sizeof(first_body), "%s", body);
        } else if (strcmp(body, first_body) == 0) {
            assert_string_equal(first_hash, res.event->body_sha256);
        } else {
            assert_string_not_equal(first_hash, res.event->body_sha256);
        }
        job_event_free(res.event);
    }
    /* Only a queued job waits for GitHub's word: the others change no demand. */
    struct fake_request f;
    build(&f, "workflow_job", "1b7c8e20-0000-11ef-8000-000000000003",
          "{\"action\":\"completed\",\"workflow_job\":{\"id\":7,\"run_id\":8,"
          "\"labels\":[\"linux.ppc64le\"]},\"repository\":{\"full_name\":\"a/b\"}}",
          true);
    struct webhook_result res;
    webhook_handle(config, secret, &f.req, created, &res);
    assert_int_equal(res.outcome, WEBHOOK_STORE);
    assert_false(res.event->unverified);
    job_event_free(res.event);
}

static void test_rejections(void **state)
{
    (void)state;
    struct webhook_result res;
    handle("workflow_job", queued, false, &res);
    assert_int_equal(res.status, 401);
    assert_null(res.event);

    handle("workflow_job", "{\"action\":\"queued\",", true, &res);
    assert_int_equal(res.status, 400);
    assert_non_null(strstr(res.reason, "malformed JSON"));

    handle("workflow_job", "[1,2]", true, &res);
    assert_int_equal(res.status, 400);

    handle("workflow_job",
           "{\"action\":\"queued\",\"workflow_job\":{\"id\":-3,\"run_id\":1,\"labels\":[]},"
           "\"repository\":{\"full_name\":\"a/b\"}}",
           true, &res);
    assert_int_equal(res.status, 400);
    assert_non_null(strstr(res.reason, "workflow_job.id"));

    handle("workflow_job",
           "{\"action\":\"queued\",\"workflow_job\":{\"id\":3,\"run_id\":1,\"labels\":[7]},"
           "\"repository\":{\"full_name\":\"a/b\"}}",
           true, &res);
    assert_int_equal(res.status, 400);
    assert_non_null(strstr(res.reason, "labels[0]"));

    handle("workflow_job", "{\"action\":\"queued\",\"workflow_job\":{\"id\":3,\"run_id\":1}}", true,
           &res);
    assert_int_equal(res.status, 400);
    assert_non_null(strstr(res.reason, "missing field"));

    handle(NULL, queued, true, &res);
    assert_int_equal(res.status, 400);

    struct fake_request f;
    build(&f, "workflow_job", NULL, queued, true);
    webhook_handle(config, secret, &f.req, 1000, &res);
    assert_int_equal(res.status, 400);
    assert_non_null(strstr(res.reason, "X-GitHub-Delivery"));
}

/* The values read are picked out of yajl's events: each must come from its own place in
 * the payload, never from a key of the same name elsewhere, and a payload that says two
 * things about one of them is refused. `want` is in the reason, or NULL for accepted. */
static void expect(const char *body, int status, const char *want)
{
    struct webhook_result res;
    handle("workflow_job", body, true, &res);
    if (res.status != status || (want && !strstr(res.reason, want)))
        fail_msg("%s: got %d \"%s\", wanted %d \"%s\"", body, res.status, res.reason, status,
                 want ? want : "");
    job_event_free(res.event);
}

#define JOB(inner)                                                                                 \
    "{\"action\":\"queued\",\"workflow_job\":{" inner "},\"repository\":{\"full_name\":\"a/b\"}}"

static void test_values_come_from_their_place(void **state)
{
    (void)state;
    expect(JOB("\"id\":3,\"run_id\":1,\"labels\":[\"x\"]"), 202, NULL);
    /* The same names elsewhere are not the job's. */
    expect("{\"action\":\"queued\",\"sender\":{\"id\":5},\"workflow_job\":{\"run_id\":1,"
           "\"labels\":[\"x\"],\"steps\":[{\"id\":9,\"labels\":[7]}]},\"repository\":{"
           "\"full_name\":\"a/b\"}}",
           400, "workflow_job.id must be");
    expect("{\"action\":\"queued\",\"workflow_job\":{\"id\":3,\"run_id\":1,\"labels\":[]},"
           "\"repository\":{\"owner\":{\"full_name\":\"x/y\"}}}",
           400, "missing field: repository.full_name");
    expect("{\"action\":\"queued\",\"workflow_job\":[{\"id\":3,\"run_id\":1,\"labels\":[]}],"
           "\"repository\":{\"full_name\":\"a/b\"}}",
           400, "missing field: workflow_job");
    expect("{\"x\":{\"action\":\"queued\"},\"workflow_job\":{}}", 400, "missing field: action");
    /* Two values for one read: refused, whichever would have counted. */
    expect("{\"action\":\"queued\",\"action\":\"completed\"}", 400, "duplicate key: action");
    expect(JOB("\"id\":3,\"run_id\":1,\"id\":4,\"labels\":[]"), 400,
           "duplicate key: workflow_job.id");
    expect(JOB("\"id\":3,\"run_id\":1,\"labels\":[],\"labels\":[\"self-hosted\"]"), 400,
           "duplicate key: workflow_job.labels");
    /* ... and duplicates of what is not read are not Hatchery's business. */
    expect(JOB("\"id\":3,\"run_id\":1,\"labels\":[\"x\"],\"steps\":1,\"steps\":2"), 202, NULL);
    /* Labels: nested, NUL, too long, too many. */
    expect(JOB("\"id\":3,\"run_id\":1,\"labels\":[\"x\",[\"y\"]]"), 400, "labels[1]");
    expect(JOB("\"id\":3,\"run_id\":1,\"labels\":[\"a\\u0000b\"]"), 400, "labels[0]");
    expect(JOB("\"id\":3,\"run_id\":1,\"labels\":[\"\"]"), 400, "labels[0]");
    char many[2048] = "";
    for (int i = 0; i < 34; i++)
        strcat(many, i ? ",\"l\"" : "\"l\"");
    char body[4096];
    snprintf(body, sizeof(body), JOB("\"id\":3,\"run_id\":1,\"labels\":[%s]"), many);
    expect(body, 400, "more than 33 entries");
    /* Numbers: a fraction is no id; one past int64 is malformed, as is a bad token. */
    expect(JOB("\"id\":3.0,\"run_id\":1,\"labels\":[]"), 400, "workflow_job.id must be");
    expect(JOB("\"id\":9223372036854775808,\"run_id\":1,\"labels\":[]"), 400, "malformed JSON");
    expect(JOB("\"id\":3,\"run_id\":1,\"name\":\"a\\u0000\",\"labels\":[]"), 400,
           "workflow_job.name must be a string");
    /* Not an object, nothing, trailing bytes, bad UTF-8. */
    expect("\"queued\"", 400, "not a JSON object");
    expect("", 400, "malformed JSON");
    expect("   ", 400, "malformed JSON");
    expect("{\"action\":\"queued\"} {}", 400, "malformed JSON");
    expect("{\"action\":\"\xff\xfe\"}", 400, "malformed JSON");
    /* Deep nesting is read through without a stack of its own. */
    static char deep[200000];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof(deep), "{\"x\":");
    for (int i = 0; i < 90000; i++)
        deep[n++] = '[';
    for (int i = 0; i < 90000; i++)
        deep[n++] = ']';
    snprintf(deep + n, sizeof(deep) - n, "}");
    expect(deep, 400, "missing field: action");
}

static void test_other_events(void **state)
{
    (void)state;
    struct webhook_result res;
    handle("ping", "{\"zen\":\"Keep it logically awesome.\"}", true, &res);
    assert_int_equal(res.outcome, WEBHOOK_PING);
    assert_int_equal(res.status, 200);
    handle("push", "{}", true, &res);
    assert_int_equal(res.outcome, WEBHOOK_IGNORED);
    assert_int_equal(res.status, 204);
    /* An unsigned ping is still unauthorized. */
    handle("ping", "{}", false, &res);
    assert_int_equal(res.status, 401);
    /* An action GitHub may add later is ignored, not an error. */
    handle("workflow_job",
           "{\"action\":\"teleported\",\"workflow_job\":{\"id\":3,\"run_id\":1,\"labels\":[]},"
           "\"repository\":{\"full_name\":\"a/b\"}}",
           true, &res);
    assert_int_equal(res.status, 204);
}

static void test_pool_matching(void **state)
{
    (void)state;
    const char *ppc[] = {"self-hosted", "linux.ppc64le"};
    const char *ppc_upper[] = {"LINUX.ppc64le"};
    const char *z_big[] = {"linux.s390x", "BIG"};
    const char *z[] = {"linux.s390x"};
    const char *none[] = {"ubuntu-latest"};
    const char *mixed[] = {"linux.ppc64le", "big"};
    assert_string_equal(job_pool_match(config, ppc, 2)->name, "ppc");
    assert_string_equal(job_pool_match(config, ppc_upper, 1)->name, "ppc");
    /* First pool whose labels include all of the job's: z-big comes first. */
    assert_string_equal(job_pool_match(config, z_big, 2)->name, "z-big");
    assert_string_equal(job_pool_match(config, z, 1)->name, "z-big");
    assert_null(job_pool_match(config, none, 1));
    assert_null(job_pool_match(config, mixed, 2));
    assert_null(job_pool_match(config, NULL, 0));

    /* A trusted pool first: a job that names only some of its labels (a fork's PR asking
     * for `self-hosted`, or for the arch alone) is not its, and goes to the next pool. */
    char *trusted_labels[] = {"linux.ppc64le", "trusted"};
    char *open_labels[] = {"linux.ppc64le"};
    struct config_pool pools[2] = {
        {.name = "ppc-trusted", .labels = trusted_labels, .n_labels = 2, .trusted = 1},
        {.name = "ppc-open", .labels = open_labels, .n_labels = 1},
    };
    struct config two = {.pools = pools, .n_pools = 2};
    const char *self_hosted[] = {"self-hosted"};
    const char *arch[] = {"self-hosted", "linux.ppc64le"};
    const char *meant[] = {"self-hosted", "TRUSTED", "linux.ppc64le"};
    assert_string_equal(job_pool_match(&two, self_hosted, 1)->name, "ppc-open");
    assert_string_equal(job_pool_match(&two, arch, 2)->name, "ppc-open");
    assert_string_equal(job_pool_match(&two, meant, 3)->name, "ppc-trusted");
    pools[1].n_labels = 0; /* no other pool: the fork's job gets none */
    pools[1].labels = NULL;
    assert_null(job_pool_match(&two, arch, 2));
    assert_string_equal(job_pool_match(&two, self_hosted, 1)->name, "ppc-open");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_github_documented_vector),
        cmocka_unit_test(test_workflow_job_queued),
        cmocka_unit_test(test_no_secret_no_webhooks),
        cmocka_unit_test(test_late_queued_and_body_hash),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_values_come_from_their_place),
        cmocka_unit_test(test_other_events),
        cmocka_unit_test(test_pool_matching),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
