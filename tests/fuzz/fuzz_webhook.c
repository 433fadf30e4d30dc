/* libFuzzer target for the webhook request path: raw bytes go through the HTTP request
 * parser, the webhook handler (signature, JSON, pool matching) and the store.
 *
 * The first input byte holds flags. With bit 0 set, the harness replaces the request's
 * X-Hub-Signature-256 value with the right one for its body, so the fuzzer can get past the
 * HMAC check and exercise JSON parsing and the store; without it, the signature check itself
 * is fuzzed. Bits 1-3 choose how the bytes are split across feeds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "http_server.h"
#include "log.h"
#include "secret.h"
#include "store.h"
#include "webhook.h"

static struct config *config;
static struct secret *secret;
static struct store *store;
static const char secret_text[] = "fuzz-secret";

static const char config_yaml[] = "controller_id: fuzz\n"
                                  "state_dir: /tmp\n"
                                  "admin_socket: /tmp/fuzz.sock\n"
                                  "webhook_secret_file: /tmp/unused\n"
                                  "hosts:\n"
                                  "  - {name: h1, uri: 'test:///default', vcpus: 8, memory_mib: "
                                  "8192, max_guests: 4}\n"
                                  "pools:\n"
                                  "  - {name: ppc, labels: [linux.ppc64le], arch: ppc64le, "
                                  "image: /x, max_runners: 2}\n"
                                  "  - {name: z, labels: [linux.s390x, big], arch: s390x, "
                                  "image: /y, max_runners: 1}\n";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_level_set(LOG_ERROR);
    char dir[] = "/dev/shm/hatchery-fuzz-XXXXXX";
    if (!mkdtemp(dir)) {
        snprintf(dir, sizeof(dir), "/tmp");
    }
    char path[128];
    snprintf(path, sizeof(path), "%s/config.yaml", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    fputs(config_yaml, f);
    fclose(f);
    char *errors = NULL;
    if (config_load(path, &config, &errors) < 0) {
        fprintf(stderr, "fuzz config: %s", errors);
        abort();
    }
    if (secret_from_bytes(secret_text, sizeof(secret_text) - 1, &secret) < 0)
        abort();
    char err[256];
    if (store_open(NULL, dir, &store, err, sizeof(err)) < 0) {
        fprintf(stderr, "fuzz store: %s\n", err);
        abort();
    }
    return 0;
}

static void fix_signature(struct http_request *req)
{
    for (size_t i = 0; i < req->n_headers; i++) {
        if (!req->headers[i].name || strcasecmp(req->headers[i].name, "X-Hub-Signature-256"))
            continue;
        unsigned char mac[32];
        if (secret_hmac_sha256(secret, req->body, req->body_len, mac) < 0)
            return;
        char *value = malloc(7 + 64 + 1);
        if (!value)
            return;
        memcpy(value, "sha256=", 7);
        for (int b = 0; b < 32; b++)
            snprintf(value + 7 + 2 * b, 3, "%02x", mac[b]);
        free(req->headers[i].value);
        req->headers[i].value = value;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    const char *bytes = (const char *)data + 1;
    size_t len = size - 1;
    size_t chunk = (flags >> 1 & 7) ? (size_t)(flags >> 1 & 7) * 7 : len;

    struct http_limits limits = {
        .max_body_bytes = 256 * 1024,
        .max_header_bytes = 8192,
        .max_headers = 32,
        .read_timeout_ms = 1000,
        .idle_timeout_ms = 1000,
        .max_connections = 1,
    };
    struct http_reader reader;
    http_reader_init(&reader, &limits);
    size_t off = 0;
    while (off < len) {
        size_t n = len - off < chunk ? len - off : chunk;
        size_t used = 0;
        enum http_reader_state st = http_reader_feed(&reader, bytes + off, n, &used);
        off += used;
        if (st == HTTP_READER_ERROR)
            break;
        if (st == HTTP_READER_COMPLETE) {
            if (flags & 1)
                fix_signature(&reader.req);
            struct webhook_result res;
            webhook_handle(config, secret, &reader.req, 1700000000000, &res);
            if (res.outcome == WEBHOOK_STORE) {
                store_job_event_apply_sync(store, res.event);
                job_event_free(res.event);
            }
            http_reader_next(&reader);
            continue;
        }
        if (used == 0 && n == len - off)
            break;
    }
    http_reader_eof(&reader);
    http_reader_free(&reader);
    return 0;
}
