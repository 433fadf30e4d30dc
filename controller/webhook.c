/* workflow_job webhooks: HMAC check, JSON parsing with jansson, pool matching. */
#define _GNU_SOURCE /* strptime, timegm */
#include "webhook.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "hatchery/hex.h"
#include "hatchery/limits.h"

int webhook_signature_verify(const struct secret *secret, const char *header, const char *body,
                             size_t body_len)
{
    static const char prefix[] = "sha256=";
    if (!header || strncmp(header, prefix, sizeof(prefix) - 1) != 0)
        return -EBADMSG;
    const char *hex = header + sizeof(prefix) - 1;
    if (strlen(hex) != 64)
        return -EBADMSG;
    unsigned char given[32];
    for (int i = 0; i < 32; i++) {
        int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -EBADMSG;
        given[i] = (unsigned char)(hi << 4 | lo);
    }
    unsigned char expected[32];
    if (secret_hmac_sha256(secret, body, body_len, expected) < 0)
        return -EBADMSG;
    int differs = CRYPTO_memcmp(given, expected, sizeof(expected));
    OPENSSL_cleanse(expected, sizeof(expected));
    return differs ? -EBADMSG : 0;
}

static void reject(struct webhook_result *res, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void reject(struct webhook_result *res, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->reason, sizeof(res->reason), fmt, ap);
    va_end(ap);
    res->outcome = WEBHOOK_REJECTED;
    res->status = status;
}

/* A string field that may be absent or null; longer than the limit is an error. */
static int optional_string(json_t *obj, const char *key, char **ret, struct webhook_result *res)
{
    json_t *v = json_object_get(obj, key);
    *ret = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v)) {
        reject(res, 400, "workflow_job.%s must be a string", key);
        return -EINVAL;
    }
    if (json_string_length(v) > WEBHOOK_MAX_NAME_BYTES) {
        reject(res, 400, "workflow_job.%s is longer than %d bytes", key, WEBHOOK_MAX_NAME_BYTES);
        return -EINVAL;
    }
    *ret = strdup(json_string_value(v));
    return *ret ? 0 : -ENOMEM;
}

static int positive_id(json_t *obj, const char *path, const char *key, int64_t *ret,
                       struct webhook_result *res)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) <= 0) {
        reject(res, 400, "%s.%s must be a positive integer", path, key);
        return -EINVAL;
    }
    *ret = json_integer_value(v);
    return 0;
}

/* `workflow_job.created_at`, an ISO 8601 UTC time as GitHub writes it
 * ("2021-06-15T19:58:42Z"), in Unix ms; 0 when absent or not in that form. */
static int64_t created_at_ms(json_t *job)
{
    const char *text = json_string_value(json_object_get(job, "created_at"));
    struct tm tm = {0};
    const char *end = text ? strptime(text, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!end)
        return 0;
    if (*end == '.') /* fractional seconds */
        end += 1 + strspn(end + 1, "0123456789");
    if (strcmp(end, "Z") != 0 && strcmp(end, "+00:00") != 0)
        return 0;
    time_t t = timegm(&tm);
    return t > 0 ? (int64_t)t * 1000 : 0;
}

static void body_sha256_hex(const char *body, size_t len, char out[65])
{
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)body, len, digest);
    for (size_t i = 0; i < sizeof(digest); i++)
        snprintf(out + 2 * i, 3, "%02x", digest[i]);
}

static void parse_workflow_job(const struct config *config, json_t *root, const char *delivery,
                               const struct http_request *req, int64_t now_ms,
                               struct webhook_result *res)
{
    json_t *action = json_object_get(root, "action");
    if (!json_is_string(action)) {
        reject(res, 400, "missing field: action");
        return;
    }
    enum job_status status;
    if (job_status_parse(json_string_value(action), &status) < 0) {
        res->outcome = WEBHOOK_IGNORED;
        res->status = 204;
        snprintf(res->reason, sizeof(res->reason), "action ignored");
        return;
    }
    json_t *job = json_object_get(root, "workflow_job");
    if (!json_is_object(job)) {
        reject(res, 400, "missing field: workflow_job");
        return;
    }
    json_t *repo = json_object_get(root, "repository");
    json_t *full_name = json_object_get(repo, "full_name");
    if (!json_is_string(full_name) || json_string_length(full_name) == 0) {
        reject(res, 400, "missing field: repository.full_name");
        return;
    }
    if (json_string_length(full_name) > WEBHOOK_MAX_NAME_BYTES) {
        reject(res, 400, "repository.full_name is longer than %d bytes", WEBHOOK_MAX_NAME_BYTES);
        return;
    }
    json_t *labels = json_object_get(job, "labels");
    if (!json_is_array(labels)) {
        reject(res, 400, "missing field: workflow_job.labels");
        return;
    }
    size_t n_labels = json_array_size(labels);
    if (n_labels > WEBHOOK_MAX_LABELS) {
        reject(res, 400, "workflow_job.labels has more than %d entries", WEBHOOK_MAX_LABELS);
        return;
    }
    const char *label_values[WEBHOOK_MAX_LABELS];
    for (size_t i = 0; i < n_labels; i++) {
        json_t *l = json_array_get(labels, i);
        if (!json_is_string(l) || json_string_length(l) == 0 ||
            json_string_length(l) > WEBHOOK_MAX_LABEL_BYTES) {
            reject(res, 400, "workflow_job.labels[%zu] must be a string of 1-%d bytes", i,
                   WEBHOOK_MAX_LABEL_BYTES);
            return;
        }
        label_values[i] = json_string_value(l);
    }

    struct job_event *ev = calloc(1, sizeof(*ev));
    if (!ev) {
        reject(res, 503, "out of memory");
        return;
    }
    ev->status = status;
    ev->received_at_ms = now_ms;
    body_sha256_hex(req->body, req->body_len, ev->body_sha256);
    if (status == JOB_QUEUED) {
        int64_t created = created_at_ms(job);
        ev->unverified = created == 0 || now_ms - created > WEBHOOK_FRESH_MS;
    }
    json_t *installation = json_object_get(root, "installation");
    json_t *installation_id = json_object_get(installation, "id");
    if (json_is_integer(installation_id) && json_integer_value(installation_id) > 0)
        ev->installation_id = json_integer_value(installation_id);
    if (positive_id(job, "workflow_job", "id", &ev->job_id, res) < 0 ||
        positive_id(job, "workflow_job", "run_id", &ev->run_id, res) < 0 ||
        optional_string(job, "workflow_name", &ev->workflow, res) < 0 ||
        optional_string(job, "name", &ev->job_name, res) < 0 ||
        optional_string(job, "runner_name", &ev->runner_name, res) < 0 ||
        optional_string(job, "conclusion", &ev->conclusion, res) < 0)
        goto fail;
    ev->delivery_id = strdup(delivery);
    ev->repository = strdup(json_string_value(full_name));
    ev->labels_json = json_dumps(labels, JSON_COMPACT);
    const struct config_pool *pool = job_pool_match(config, label_values, n_labels);
    if (pool)
        ev->pool = strdup(pool->name);
    if (!ev->delivery_id || !ev->repository || !ev->labels_json || (pool && !ev->pool)) {
        reject(res, 503, "out of memory");
        goto fail;
    }
    res->outcome = WEBHOOK_STORE;
    res->status = 202;
    res->event = ev;
    return;
fail:
    if (res->outcome != WEBHOOK_REJECTED)
        reject(res, 503, "out of memory");
    job_event_free(ev);
}

/* Whether a Content-Type value's media type, the part before any parameter, is JSON:
 * "application/json; charset=utf-8" is, "application/jsonx" is not (RFC 9110, 8.3.1). */
static bool is_json_media_type(const char *value)
{
    size_t n = strcspn(value, ";");
    while (n > 0 && (*value == ' ' || *value == '\t')) {
        value++;
        n--;
    }
    while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t'))
        n--;
    return n == strlen("application/json") && strncasecmp(value, "application/json", n) == 0;
}

static bool valid_delivery_id(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > WEBHOOK_MAX_DELIVERY_ID_BYTES)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\')
            return false;
    }
    return true;
}

void webhook_handle(const struct config *config, const struct secret *secret,
                    const struct http_request *req, int64_t now_ms, struct webhook_result *res)
{
    memset(res, 0, sizeof(*res));
    res->event_name = "none";
    const char *event = http_request_header(req, "X-GitHub-Event");
    const char *signature = http_request_header(req, "X-Hub-Signature-256");
    /* The signature comes first: nothing about an unsigned request is believed. */
    if (!signature) {
        reject(res, 401, "missing X-Hub-Signature-256");
        return;
    }
    if (webhook_signature_verify(secret, signature, req->body, req->body_len) < 0) {
        reject(res, 401, "signature does not match");
        return;
    }
    if (!event || !*event) {
        reject(res, 400, "missing X-GitHub-Event");
        return;
    }
    res->event_name = event;
    if (strcmp(event, "ping") == 0) {
        res->outcome = WEBHOOK_PING;
        res->status = 200;
        return;
    }
    if (strcmp(event, "workflow_job") != 0) {
        res->outcome = WEBHOOK_IGNORED;
        res->status = 204;
        snprintf(res->reason, sizeof(res->reason), "event ignored");
        return;
    }
    const char *delivery = http_request_header(req, "X-GitHub-Delivery");
    if (!delivery || !valid_delivery_id(delivery)) {
        reject(res, 400, "missing or malformed X-GitHub-Delivery");
        return;
    }
    const char *content_type = http_request_header(req, "Content-Type");
    if (content_type && !is_json_media_type(content_type)) {
        reject(res, 415, "Content-Type must be application/json (set it in the webhook)");
        return;
    }
    json_error_t jerr;
    json_t *root = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        reject(res, 400, "malformed JSON at line %d column %d: %s", jerr.line, jerr.column,
               jerr.text);
        return;
    }
    if (!json_is_object(root))
        reject(res, 400, "payload is not a JSON object");
    else
        parse_workflow_job(config, root, delivery, req, now_ms, res);
    json_decref(root);
}
