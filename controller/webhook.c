/* workflow_job webhooks: HMAC check, the values read picked out by yajl's event parser, pool
 * matching. */
#define _GNU_SOURCE /* strptime, timegm */
#include "webhook.h"

#include <errno.h>
#include <jansson.h>
#include <yajl/yajl_parse.h>
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

/* ---- the values read, picked out of yajl's events --------------------------------------- */

/* A workflow_job delivery is about 7 KB, of which Hatchery reads eleven values. jansson
 * built a tree of all of them (about 300) for that, which was most of a delivery's cost:
 * 83 us for octokit's example, against 6.5 us for yajl's event parser reading it through.
 * The values read are taken from yajl's events here; nothing else is kept. */
enum field {
    F_ACTION,
    F_JOB,
    F_REPOSITORY,
    F_INSTALLATION,
    F_JOB_ID,
    F_RUN_ID,
    F_WORKFLOW_NAME,
    F_JOB_NAME,
    F_RUNNER_NAME,
    F_CONCLUSION,
    F_CREATED_AT,
    F_LABELS,
    F_FULL_NAME,
    F_INSTALLATION_ID,
    F_COUNT,
    F_NONE = F_COUNT,
};

/* Each field's key, and the field whose object holds it (F_NONE: the root). */
static const struct {
    const char *key;
    enum field parent;
} fields[F_COUNT] = {
    [F_ACTION] = {"action", F_NONE},
    [F_JOB] = {"workflow_job", F_NONE},
    [F_REPOSITORY] = {"repository", F_NONE},
    [F_INSTALLATION] = {"installation", F_NONE},
    [F_JOB_ID] = {"id", F_JOB},
    [F_RUN_ID] = {"run_id", F_JOB},
    [F_WORKFLOW_NAME] = {"workflow_name", F_JOB},
    [F_JOB_NAME] = {"name", F_JOB},
    [F_RUNNER_NAME] = {"runner_name", F_JOB},
    [F_CONCLUSION] = {"conclusion", F_JOB},
    [F_CREATED_AT] = {"created_at", F_JOB},
    [F_LABELS] = {"labels", F_JOB},
    [F_FULL_NAME] = {"full_name", F_REPOSITORY},
    [F_INSTALLATION_ID] = {"id", F_INSTALLATION},
};

enum value_kind { V_ABSENT, V_NULL, V_STRING, V_INTEGER, V_OBJECT, V_ARRAY, V_OTHER };

struct value {
    enum value_kind kind;
    char *text; /* V_STRING, NUL-terminated: a string holding a NUL is V_OTHER */
    size_t len;
    long long integer; /* V_INTEGER */
};

#define PICK_DEPTH 4 /* deeper containers hold nothing read: only counted */

struct pick {
    int depth;                     /* containers open: inside the root object it is 1 */
    bool array_at[PICK_DEPTH];     /* the container at each depth is an array */
    enum field key_at[PICK_DEPTH]; /* the field of the key last read at each depth */
    enum value_kind root;          /* the payload's own kind */
    struct value v[F_COUNT];
    size_t n_labels; /* workflow_job.labels' elements, all of them */
    long bad_label;  /* the first that is not a string of 1 to 256 bytes, or -1 */
    char *labels[WEBHOOK_MAX_LABELS];
    char error[160]; /* why a callback stopped the parse */
    bool out_of_memory;
};

static void pick_free(struct pick *p)
{
    for (int f = 0; f < F_COUNT; f++)
        free(p->v[f].text);
    for (size_t i = 0; i < p->n_labels && i < WEBHOOK_MAX_LABELS; i++)
        free(p->labels[i]);
}

/* The field a value at the current depth is, or F_NONE; *label: an element of labels. */
static enum field value_field(const struct pick *p, bool *label)
{
    *label = false;
    int d = p->depth;
    if (d < 1 || d >= PICK_DEPTH)
        return F_NONE;
    /* A field's key is only ever set where no array lies above it (on_map_key), and
     * an array's own key_at stays F_NONE. */
    if (p->array_at[d]) {
        *label = d == 3 && p->key_at[2] == F_LABELS;
        return F_NONE;
    }
    return p->key_at[d];
}

/* One value: a scalar, or a container about to open. */
static int take(struct pick *p, enum value_kind kind, const unsigned char *text, size_t len,
                long long integer)
{
    if (p->depth == 0) {
        p->root = kind;
        return 1;
    }
    if (kind == V_STRING && memchr(text, 0, len))
        kind = V_OTHER;
    bool label;
    enum field f = value_field(p, &label);
    if (label) {
        size_t i = p->n_labels++;
        bool usable = kind == V_STRING && len >= 1 && len <= WEBHOOK_MAX_LABEL_BYTES;
        if (!usable && p->bad_label < 0)
            p->bad_label = (long)i;
        if (usable && i < WEBHOOK_MAX_LABELS &&
            !(p->labels[i] = strndup((const char *)text, len))) {
            p->out_of_memory = true;
            return 0;
        }
        return 1;
    }
    if (f == F_NONE)
        return 1;
    struct value *v = &p->v[f];
    v->kind = kind;
    v->integer = integer;
    v->len = len;
    if (kind == V_STRING && !(v->text = strndup((const char *)text, len))) {
        p->out_of_memory = true;
        return 0;
    }
    return 1;
}

static int on_null(void *ctx)
{
    return take(ctx, V_NULL, NULL, 0, 0);
}

static int on_boolean(void *ctx, int b)
{
    (void)b;
    return take(ctx, V_OTHER, NULL, 0, 0);
}

static int on_integer(void *ctx, long long i)
{
    return take(ctx, V_INTEGER, NULL, 0, i);
}

static int on_double(void *ctx, double d)
{
    (void)d;
    return take(ctx, V_OTHER, NULL, 0, 0);
}

static int on_string(void *ctx, const unsigned char *s, size_t len)
{
    return take(ctx, V_STRING, s, len, 0);
}

static int open_container(struct pick *p, bool array)
{
    if (!take(p, array ? V_ARRAY : V_OBJECT, NULL, 0, 0))
        return 0;
    p->depth++;
    if (p->depth < PICK_DEPTH) {
        p->array_at[p->depth] = array;
        p->key_at[p->depth] = F_NONE;
    }
    return 1;
}

static int on_start_map(void *ctx)
{
    return open_container(ctx, false);
}

static int on_start_array(void *ctx)
{
    return open_container(ctx, true);
}

static int on_end(void *ctx)
{
    ((struct pick *)ctx)->depth--;
    return 1;
}

/* A key: the field it names, when its object is one read (the root, or a field's). A
 * field read twice is refused, as GitHub never sends one: which value would count? */
static int on_map_key(void *ctx, const unsigned char *key, size_t len)
{
    struct pick *p = ctx;
    int d = p->depth;
    if (d < 1 || d >= PICK_DEPTH)
        return 1;
    p->key_at[d] = F_NONE;
    enum field parent = d == 1 ? F_NONE : p->key_at[d - 1];
    if (d > 1 && parent == F_NONE) /* not under a field read (or under an array) */
        return 1;
    for (int f = 0; f < F_COUNT; f++) {
        if (fields[f].parent != parent || strlen(fields[f].key) != len ||
            memcmp(fields[f].key, key, len) != 0)
            continue;
        if (p->v[f].kind != V_ABSENT) {
            snprintf(p->error, sizeof(p->error), "duplicate key: %s%s%s",
                     parent == F_NONE ? "" : fields[parent].key, parent == F_NONE ? "" : ".",
                     fields[f].key);
            return 0;
        }
        p->key_at[d] = (enum field)f;
        return 1;
    }
    return 1;
}

static const yajl_callbacks pick_callbacks = {
    .yajl_null = on_null,
    .yajl_boolean = on_boolean,
    .yajl_integer = on_integer,
    .yajl_double = on_double,
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_map_key,
    .yajl_end_map = on_end,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end,
};

/* Reads the body through; 0, or -1 with the reason in res. */
static int pick_read(const char *body, size_t len, struct pick *p, struct webhook_result *res)
{
    *p = (struct pick){.bad_label = -1, .root = V_ABSENT};
    yajl_handle h = yajl_alloc(&pick_callbacks, NULL, p);
    if (!h) {
        reject(res, 503, "out of memory");
        return -1;
    }
    yajl_status st = yajl_parse(h, (const unsigned char *)body, len);
    if (st == yajl_status_ok)
        st = yajl_complete_parse(h);
    int r = 0;
    if (st == yajl_status_client_canceled) {
        if (p->out_of_memory)
            reject(res, 503, "out of memory");
        else
            reject(res, 400, "%s", p->error);
        r = -1;
    } else if (st != yajl_status_ok) {
        unsigned char *why = yajl_get_error(h, 0, NULL, 0);
        const char *text = why ? (const char *)why : "unreadable";
        reject(res, 400, "malformed JSON at byte %zu: %.*s", yajl_get_bytes_consumed(h),
               (int)strcspn(text, "\n"), text);
        if (why)
            yajl_free_error(h, why);
        r = -1;
    } else if (p->root == V_ABSENT) {
        reject(res, 400, "malformed JSON: the body is empty");
        r = -1;
    } else if (p->root != V_OBJECT) {
        reject(res, 400, "payload is not a JSON object");
        r = -1;
    }
    yajl_free(h);
    return r;
}

/* A string field that may be absent or null; longer than the limit is an error. */
static int optional_string(struct pick *p, enum field f, char **ret, struct webhook_result *res)
{
    struct value *v = &p->v[f];
    *ret = NULL;
    if (v->kind == V_ABSENT || v->kind == V_NULL)
        return 0;
    if (v->kind != V_STRING) {
        reject(res, 400, "workflow_job.%s must be a string", fields[f].key);
        return -EINVAL;
    }
    if (v->len > WEBHOOK_MAX_NAME_BYTES) {
        reject(res, 400, "workflow_job.%s is longer than %d bytes", fields[f].key,
               WEBHOOK_MAX_NAME_BYTES);
        return -EINVAL;
    }
    *ret = v->text; /* taken */
    v->text = NULL;
    return 0;
}

static int positive_id(struct pick *p, enum field f, int64_t *ret, struct webhook_result *res)
{
    const struct value *v = &p->v[f];
    if (v->kind != V_INTEGER || v->integer <= 0) {
        reject(res, 400, "%s.%s must be a positive integer", fields[fields[f].parent].key,
               fields[f].key);
        return -EINVAL;
    }
    *ret = v->integer;
    return 0;
}

/* `workflow_job.created_at`, an ISO 8601 UTC time as GitHub writes it
 * ("2021-06-15T19:58:42Z"), in Unix ms; 0 when absent or not in that form. */
static int64_t created_at_ms(const struct pick *p)
{
    const char *text = p->v[F_CREATED_AT].kind == V_STRING ? p->v[F_CREATED_AT].text : NULL;
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

static void parse_workflow_job(const struct config *config, struct pick *p, const char *delivery,
                               const struct http_request *req, int64_t now_ms,
                               struct webhook_result *res)
{
    if (p->v[F_ACTION].kind != V_STRING) {
        reject(res, 400, "missing field: action");
        return;
    }
    enum job_status status;
    if (job_status_parse(p->v[F_ACTION].text, &status) < 0) {
        res->outcome = WEBHOOK_IGNORED;
        res->status = 204;
        snprintf(res->reason, sizeof(res->reason), "action ignored");
        return;
    }
    if (p->v[F_JOB].kind != V_OBJECT) {
        reject(res, 400, "missing field: workflow_job");
        return;
    }
    const struct value *full_name = &p->v[F_FULL_NAME];
    if (full_name->kind != V_STRING || full_name->len == 0) {
        reject(res, 400, "missing field: repository.full_name");
        return;
    }
    if (full_name->len > WEBHOOK_MAX_NAME_BYTES) {
        reject(res, 400, "repository.full_name is longer than %d bytes", WEBHOOK_MAX_NAME_BYTES);
        return;
    }
    if (p->v[F_LABELS].kind != V_ARRAY) {
        reject(res, 400, "missing field: workflow_job.labels");
        return;
    }
    if (p->n_labels > WEBHOOK_MAX_LABELS) {
        reject(res, 400, "workflow_job.labels has more than %d entries", WEBHOOK_MAX_LABELS);
        return;
    }
    if (p->bad_label >= 0) {
        reject(res, 400, "workflow_job.labels[%ld] must be a string of 1-%d bytes", p->bad_label,
               WEBHOOK_MAX_LABEL_BYTES);
        return;
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
        int64_t created = created_at_ms(p);
        ev->unverified = created == 0 || now_ms - created > WEBHOOK_FRESH_MS;
    }
    if (p->v[F_INSTALLATION].kind == V_OBJECT && p->v[F_INSTALLATION_ID].kind == V_INTEGER &&
        p->v[F_INSTALLATION_ID].integer > 0)
        ev->installation_id = p->v[F_INSTALLATION_ID].integer;
    if (positive_id(p, F_JOB_ID, &ev->job_id, res) < 0 ||
        positive_id(p, F_RUN_ID, &ev->run_id, res) < 0 ||
        optional_string(p, F_WORKFLOW_NAME, &ev->workflow, res) < 0 ||
        optional_string(p, F_JOB_NAME, &ev->job_name, res) < 0 ||
        optional_string(p, F_RUNNER_NAME, &ev->runner_name, res) < 0 ||
        optional_string(p, F_CONCLUSION, &ev->conclusion, res) < 0)
        goto fail;
    ev->delivery_id = strdup(delivery);
    ev->repository = strdup(full_name->text);
    /* The labels as the store keeps them: a JSON array, written by jansson. */
    json_t *labels = json_array();
    for (size_t i = 0; labels && i < p->n_labels; i++)
        if (json_array_append_new(labels, json_string(p->labels[i])) < 0) {
            json_decref(labels);
            labels = NULL;
        }
    ev->labels_json = labels ? json_dumps(labels, JSON_COMPACT) : NULL;
    json_decref(labels);
    const struct config_pool *pool =
        job_pool_match(config, (const char *const *)p->labels, p->n_labels);
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
    /* Without a webhook secret (every pool is a scale set's) nothing takes webhooks. */
    if (!secret) {
        reject(res, 404, "no webhooks here: every pool is served by a runner scale set");
        return;
    }
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
    struct pick p;
    if (pick_read(req->body, req->body_len, &p, res) == 0)
        parse_workflow_job(config, &p, delivery, req, now_ms, res);
    pick_free(&p);
}
