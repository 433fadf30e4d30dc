/* What reading one delivery costs the core: webhook_handle (HMAC, the body's SHA-256, the
 * values read picked out of yajl's events, pool matching) on a signed payload, beside
 * jansson parsing the same bytes into a tree (what the webhook did before), alternating in
 * chunks, as a ratio. It asserts nothing about time.
 *
 * usage: webhook_parse_bench PAYLOAD.json [N]   (webhook_parse_bench.sh gives it octokit's) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "job.h"
#include "secret.h"
#include "webhook.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct config *load_config(void)
{
    char path[] = "/tmp/hatchery-parse-bench-XXXXXX";
    int fd = mkstemp(path);
    const char *yaml = "controller_id: b\nstate_dir: /tmp\nadmin_socket: /tmp/a.sock\n"
                       "webhook_secret_file: /tmp/x\n"
                       "hosts: [{name: h, uri: 'test:///default', vcpus: 8, memory_mib: 8192, "
                       "max_guests: 4}]\n"
                       "pools: [{name: p, labels: [linux.ppc64le], arch: ppc64le, image: /i, "
                       "max_runners: 2}]\n";
    struct config *c = NULL;
    char *errors = NULL;
    if (fd < 0 || write(fd, yaml, strlen(yaml)) < 0 || close(fd) < 0 ||
        config_load(path, &c, &errors) < 0) {
        fprintf(stderr, "config: %s\n", errors ? errors : "cannot write it");
        c = NULL;
    }
    unlink(path);
    free(errors);
    return c;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: webhook_parse_bench PAYLOAD.json [N]\n");
        return 2;
    }
    int n = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 20000;
    FILE *f = fopen(argv[1], "r");
    static char body[1 << 20];
    size_t len = f ? fread(body, 1, sizeof(body) - 1, f) : 0;
    if (f)
        fclose(f);
    struct config *config = load_config();
    struct secret *secret = NULL;
    if (!len || !config || secret_from_bytes("bench", 5, &secret) < 0 || n < 10)
        return 1;
    unsigned char mac[32];
    char signature[80] = "sha256=";
    secret_hmac_sha256(secret, body, len, mac);
    for (int i = 0; i < 32; i++)
        snprintf(signature + 7 + 2 * i, 3, "%02x", mac[i]);
    struct http_header headers[] = {{"X-GitHub-Event", "workflow_job"},
                                    {"X-GitHub-Delivery", "bench-1"},
                                    {"Content-Type", "application/json"},
                                    {"X-Hub-Signature-256", signature}};
    struct http_request req = {.method = "POST",
                               .url = "/webhook",
                               .headers = headers,
                               .n_headers = 4,
                               .body = body,
                               .body_len = len};
    /* It must be a delivery that is stored, or the figure is of a rejection. */
    struct webhook_result res;
    webhook_handle(config, secret, &req, 1000, &res);
    if (res.outcome != WEBHOOK_STORE) {
        fprintf(stderr, "the payload was not accepted: %d %s\n", res.status, res.reason);
        return 1;
    }
    job_event_free(res.event);
    enum { CHUNKS = 10 };
    double ours = 0, tree = 0;
    for (int c = 0; c < CHUNKS; c++) {
        double t0 = now_s();
        for (int i = 0; i < n / CHUNKS; i++) {
            webhook_handle(config, secret, &req, 1000, &res);
            job_event_free(res.event);
        }
        double t1 = now_s();
        for (int i = 0; i < n / CHUNKS; i++)
            json_decref(json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL));
        double t2 = now_s();
        ours += t1 - t0;
        tree += t2 - t1;
    }
    int done = n / CHUNKS * CHUNKS;
    printf("one workflow_job delivery of %zu bytes, %d times, in %d alternating chunks\n", len,
           done, CHUNKS);
    printf("  jansson's tree of it alone (the parse before)  %8.1f us\n", tree / done * 1e6);
    printf("  webhook_handle, all of it                        %8.1f us\n", ours / done * 1e6);
    printf("  ratio %.3f (webhook_handle over the tree alone)\n", ours / tree);
    config_free(config);
    secret_free(secret);
    return 0;
}
