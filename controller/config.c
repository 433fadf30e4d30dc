/* Config file loading: libyaml builds the document, a table of keys (one row per key with
 * type, bounds and default, as in Redis' config.c) checks it. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>
#include <yaml.h>

#include "hatchery/limits.h"
#include "image_manifest.h"
#include "store_backend.h"

const char *const pool_arch_names[ARCH_MAX] = {
    [ARCH_PPC64LE] = "ppc64le",
    [ARCH_S390X] = "s390x",
    [ARCH_X86_64] = "x86_64",
};

const char *const pool_backend_names[BACKEND_MAX] = {
    [BACKEND_VM] = "vm",
    [BACKEND_CONTAINER] = "container",
};

const char *const placement_names[PLACEMENT_MAX] = {
    [PLACEMENT_SPREAD] = "spread",
    [PLACEMENT_PACK] = "pack",
};

const char *const host_guest_isolation_names[ISOLATION_MAX] = {"required", "unchecked"};
const char *const host_transport_names[TRANSPORT_MAX] = {
    [TRANSPORT_AUTO] = "auto",
    [TRANSPORT_SOCKET] = "socket",
    [TRANSPORT_STREAM] = "stream",
};

bool config_host_streams(const struct config_host *h)
{
    if (h->agent_transport != TRANSPORT_AUTO)
        return h->agent_transport == TRANSPORT_STREAM;
    const char *rest = h->uri ? strstr(h->uri, "://") : NULL;
    return rest && rest[3] && rest[3] != '/';
}

bool config_host_is_local(const char *uri)
{
    return uri && strstr(uri, ":///") != NULL && !strchr(uri, '+') && strncmp(uri, "test:", 5) != 0;
}

bool config_pool_uses_host(const struct config_pool *pool, const char *host)
{
    if (pool->n_hosts == 0)
        return true;
    for (size_t k = 0; k < pool->n_hosts; k++)
        if (host && pool->hosts[k] && strcmp(pool->hosts[k], host) == 0)
            return true;
    return false;
}

bool config_pool_has_local_host(const struct config *c, const struct config_pool *pool)
{
    for (size_t h = 0; h < c->n_hosts; h++)
        if (config_pool_uses_host(pool, c->hosts[h].name) && config_host_is_local(c->hosts[h].uri))
            return true;
    return false;
}

int config_pool_index(const struct config *c, const char *name)
{
    for (size_t i = 0; name && i < c->n_pools; i++)
        if (c->pools[i].name && strcmp(c->pools[i].name, name) == 0)
            return (int)i;
    return -1;
}

int config_host_index(const struct config *c, const char *name)
{
    for (size_t i = 0; name && i < c->n_hosts; i++)
        if (strcmp(c->hosts[i].name, name) == 0)
            return (int)i;
    return -1;
}

bool config_pool_remote_only(const struct config *c, const struct config_pool *pool)
{
    for (size_t h = 0; h < c->n_hosts; h++) {
        const char *uri = c->hosts[h].uri;
        if (config_pool_uses_host(pool, c->hosts[h].name) &&
            (config_host_is_local(uri) || (uri && strncmp(uri, "test:", 5) == 0)))
            return false;
    }
    return true;
}

const char *const pool_firmware_names[FIRMWARE_MAX] = {
    [FIRMWARE_DEFAULT] = "default",
    [FIRMWARE_VOF] = "vof",
};

const char *const pool_start_names[START_MAX] = {
    [START_COLD] = "cold",
    [START_TEMPLATE] = "template",
};

static const char *const log_level_names[] = {"debug", "info", "warn", "error"};

enum key_type {
    KEY_STRING,
    KEY_INT,
    KEY_ENUM,
    KEY_STRING_LIST,
    KEY_MAPPING,
    KEY_SEQUENCE,
    KEY_TYPE_MAX,
};

/* What a KEY_STRING must look like, checked where it is read (so at its own line). */
enum string_form {
    FORM_ANY,
    FORM_PATH, /* absolute, no control character: used from whatever directory the daemon has */
    FORM_NAME, /* letters, digits, '-', '_', '.': a libvirt object's name, spliced nowhere */
};

struct key {
    const char *name;
    enum key_type type;
    enum string_form form; /* KEY_STRING */
    size_t offset;
    size_t count_offset; /* KEY_STRING_LIST, KEY_SEQUENCE: where the element count goes */
    int64_t min, max;    /* KEY_INT: value bounds; lists: length bounds */
    bool required;
    const char *default_string;
    int64_t default_int;
    const char *const *enum_values; /* KEY_ENUM: index stored as int64_t; KEY_STRING: allowed */
    size_t n_enum_values;
    const struct key *sub; /* KEY_MAPPING, KEY_SEQUENCE: keys of the nested mapping */
    size_t elem_size;      /* KEY_SEQUENCE */
    size_t line_offset;    /* KEY_SEQUENCE: where each element records its line */
};

/* Row builders: each key's type, place, bounds and default on one line. */
#define INT_KEY(struct_, field_, lo, hi, dflt)                                                     \
    {                                                                                              \
        .name = #field_, .type = KEY_INT, .offset = offsetof(struct_, field_), .min = (lo),        \
        .max = (hi), .default_int = (dflt)                                                         \
    }
#define INT_KEY_REQUIRED(struct_, field_, lo, hi)                                                  \
    {                                                                                              \
        .name = #field_, .type = KEY_INT, .offset = offsetof(struct_, field_), .min = (lo),        \
        .max = (hi), .required = true                                                              \
    }
#define STRING_KEY(struct_, field_, req, dflt)                                                     \
    {                                                                                              \
        .name = #field_, .type = KEY_STRING, .offset = offsetof(struct_, field_),                  \
        .required = (req), .default_string = (dflt)                                                \
    }
#define PATH_KEY(struct_, field_, req, dflt)                                                       \
    {                                                                                              \
        .name = #field_, .type = KEY_STRING, .form = FORM_PATH,                                    \
        .offset = offsetof(struct_, field_), .required = (req), .default_string = (dflt)           \
    }
#define NAME_KEY(struct_, field_, req, dflt)                                                       \
    {                                                                                              \
        .name = #field_, .type = KEY_STRING, .form = FORM_NAME,                                    \
        .offset = offsetof(struct_, field_), .required = (req), .default_string = (dflt)           \
    }
#define LIST_KEY(struct_, field_, lo, hi, req)                                                     \
    {                                                                                              \
        .name = #field_, .type = KEY_STRING_LIST, .offset = offsetof(struct_, field_),             \
        .count_offset = offsetof(struct_, n_##field_), .min = (lo), .max = (hi), .required = (req) \
    }
#define ENUM_KEY(struct_, field_, values, req, dflt)                                               \
    {                                                                                              \
        .name = #field_, .type = KEY_ENUM, .offset = offsetof(struct_, field_), .required = (req), \
        .default_int = (dflt), .enum_values = (values),                                            \
        .n_enum_values = sizeof(values) / sizeof(values[0])                                        \
    }

static const struct key http_keys[] = {
    INT_KEY(struct config_http, max_body_bytes, 1, HTTP_MAX_BODY_BYTES_MAX,
            HTTP_MAX_BODY_BYTES_DEFAULT),
    INT_KEY(struct config_http, max_header_bytes, 1024, 1024 * 1024, HTTP_MAX_HEADER_BYTES_DEFAULT),
    INT_KEY(struct config_http, max_headers, 8, HTTP_MAX_HEADERS_MAX, HTTP_MAX_HEADERS_DEFAULT),
    INT_KEY(struct config_http, read_timeout_ms, 10, 600000, HTTP_READ_TIMEOUT_MS_DEFAULT),
    INT_KEY(struct config_http, idle_timeout_ms, 10, 3600000, HTTP_IDLE_TIMEOUT_MS_DEFAULT),
    INT_KEY(struct config_http, max_connections, 1, HTTP_MAX_CONNECTIONS_MAX,
            HTTP_MAX_CONNECTIONS_DEFAULT),
    INT_KEY(struct config_http, max_bad_signatures_per_address, 0, 1000000, 60),
    INT_KEY(struct config_http, max_connections_per_address, 0, HTTP_MAX_CONNECTIONS_MAX,
            HTTP_MAX_CONNECTIONS_PER_ADDRESS_DEFAULT),
    PATH_KEY(struct config_http, tls_cert_file, false, NULL),
    PATH_KEY(struct config_http, tls_key_file, false, NULL),
    {.name = NULL},
};

static const char *const bool_names[] = {"false", "true"};

static const struct key host_keys[] = {
    STRING_KEY(struct config_host, name, true, NULL),
    STRING_KEY(struct config_host, uri, true, NULL),
    INT_KEY_REQUIRED(struct config_host, vcpus, 1, 4096),
    INT_KEY_REQUIRED(struct config_host, memory_mib, 64, INT64_C(1) << 32),
    INT_KEY_REQUIRED(struct config_host, max_guests, 0, 4096),
    NAME_KEY(struct config_host, storage_pool, false, "hatchery"),
    PATH_KEY(struct config_host, storage_dir, false, "/var/lib/hatchery/volumes"),
    INT_KEY(struct config_host, down_grace_s, 0, 86400, 120),
    ENUM_KEY(struct config_host, agent_transport, host_transport_names, false, TRANSPORT_AUTO),
    ENUM_KEY(struct config_host, guest_isolation, host_guest_isolation_names, false,
             ISOLATION_REQUIRED),
    {.name = NULL},
};

static const struct key pool_keys[] = {
    STRING_KEY(struct config_pool, name, true, NULL),
    LIST_KEY(struct config_pool, labels, 1, CONFIG_MAX_POOL_LABELS, true),
    ENUM_KEY(struct config_pool, arch, pool_arch_names, true, 0),
    ENUM_KEY(struct config_pool, backend, pool_backend_names, false, BACKEND_VM),
    PATH_KEY(struct config_pool, image, true, NULL),
    INT_KEY(struct config_pool, vcpus, 1, 1024, 2),
    INT_KEY(struct config_pool, memory_mib, 64, INT64_C(1) << 32, 4096),
    INT_KEY(struct config_pool, min_idle, 0, 1024, 0),
    INT_KEY_REQUIRED(struct config_pool, max_runners, 0, 65536),
    LIST_KEY(struct config_pool, hosts, 1, CONFIG_MAX_HOSTS, false),
    PATH_KEY(struct config_pool, kernel, false, NULL),
    PATH_KEY(struct config_pool, initrd, false, NULL),
    STRING_KEY(struct config_pool, cmdline, false, NULL),
    ENUM_KEY(struct config_pool, firmware, pool_firmware_names, false, FIRMWARE_DEFAULT),
    ENUM_KEY(struct config_pool, start, pool_start_names, false, START_COLD),
    NAME_KEY(struct config_pool, network, false, "user"),
    INT_KEY(struct config_pool, disk_mib, 64, INT64_C(1) << 24, 20480),
    INT_KEY(struct config_pool, boot_timeout_s, 5, 3600, 300),
    INT_KEY(struct config_pool, job_timeout_s, 60, 7 * 24 * 3600, 6 * 3600),
    LIST_KEY(struct config_pool, runner_command, 1, 64, false),
    INT_KEY(struct config_pool, idle_max_age_s, 60, 7 * 24 * 3600, 3600),
    INT_KEY(struct config_pool, surplus_idle_s, 0, 7 * 24 * 3600, 120),
    STRING_KEY(struct config_pool, github_scope, false, NULL),
    ENUM_KEY(struct config_pool, trusted, bool_names, false, 0),
    NAME_KEY(struct config_pool, runner_user, false, "runner"),
    NAME_KEY(struct config_pool, scale_set, false, NULL),
    {.name = NULL},
};

static const struct key scope_keys[] = {
    STRING_KEY(struct config_scope, repo, false, NULL),
    STRING_KEY(struct config_scope, org, false, NULL),
    STRING_KEY(struct config_scope, enterprise, false, NULL),
    INT_KEY(struct config_scope, runner_group_id, 1, INT64_MAX, CONFIG_DEFAULT_RUNNER_GROUP),
    {.name = NULL},
};

static const struct key github_keys[] = {
    STRING_KEY(struct config_github, api_url, false, "https://api.github.com"),
    INT_KEY(struct config_github, app_id, 0, INT64_MAX, 0),
    PATH_KEY(struct config_github, app_private_key_file, false, NULL),
    INT_KEY(struct config_github, installation_id, 0, INT64_MAX, 0),
    PATH_KEY(struct config_github, token_file, false, NULL),
    PATH_KEY(struct config_github, ca_file, false, NULL),
    INT_KEY(struct config_github, timeout_ms, 100, 600000, 30000),
    INT_KEY(struct config_github, max_retries, 0, 20, 5),
    INT_KEY(struct config_github, max_response_bytes, 4096, 256 * 1024 * 1024, 8 * 1024 * 1024),
    {.name = "runner_scopes",
     .type = KEY_SEQUENCE,
     .offset = offsetof(struct config_github, runner_scopes),
     .count_offset = offsetof(struct config_github, n_runner_scopes),
     .max = CONFIG_MAX_SCOPES,
     .sub = scope_keys,
     .elem_size = sizeof(struct config_scope),
     .line_offset = offsetof(struct config_scope, line)},
    {.name = NULL},
};

static const struct key database_keys[] = {
    STRING_KEY(struct config_database, postgresql, false, NULL),
    PATH_KEY(struct config_database, password_file, false, NULL),
    INT_KEY(struct config_database, lease_s, 3, 300, 10),
    {.name = NULL},
};

static const struct key top_keys[] = {
    STRING_KEY(struct config, controller_id, true, NULL),
    STRING_KEY(struct config, listen, false, "127.0.0.1:8080"),
    STRING_KEY(struct config, metrics_listen, false, NULL),
    PATH_KEY(struct config, state_dir, true, NULL),
    PATH_KEY(struct config, admin_socket, true, NULL),
    PATH_KEY(struct config, webhook_secret_file, false, NULL),
    {.name = "log_level",
     .type = KEY_STRING,
     .offset = offsetof(struct config, log_level),
     .default_string = "info",
     .enum_values = log_level_names,
     .n_enum_values = sizeof(log_level_names) / sizeof(log_level_names[0])},
    INT_KEY(struct config, delivery_retention_s, 60, INT64_C(365) * 24 * 3600,
            STORE_DELIVERY_RETENTION_S_DEFAULT),
    ENUM_KEY(struct config, placement, placement_names, false, PLACEMENT_SPREAD),
    INT_KEY(struct config, reconcile_interval_s, 1, 3600, 30),
    INT_KEY(struct config, heartbeat_timeout_s, 15, 3600, 60),
    INT_KEY(struct config, adopt_grace_s, 5, 3600, 60),
    ENUM_KEY(struct config, rotate_outdated, bool_names, false, 1),
    INT_KEY(struct config, log_retention_s, 60, INT64_C(365) * 24 * 3600, 7 * 24 * 3600),
    INT_KEY(struct config, history_retention_s, 60, INT64_C(3650) * 24 * 3600, 30 * 24 * 3600),
    {.name = "http",
     .type = KEY_MAPPING,
     .offset = offsetof(struct config, http),
     .sub = http_keys},
    {.name = "github",
     .type = KEY_MAPPING,
     .offset = offsetof(struct config, github),
     .sub = github_keys},
    {.name = "database",
     .type = KEY_MAPPING,
     .offset = offsetof(struct config, database),
     .sub = database_keys},
    {.name = "hosts",
     .type = KEY_SEQUENCE,
     .offset = offsetof(struct config, hosts),
     .count_offset = offsetof(struct config, n_hosts),
     .max = CONFIG_MAX_HOSTS,
     .sub = host_keys,
     .elem_size = sizeof(struct config_host),
     .line_offset = offsetof(struct config_host, line)},
    {.name = "pools",
     .type = KEY_SEQUENCE,
     .offset = offsetof(struct config, pools),
     .count_offset = offsetof(struct config, n_pools),
     .max = CONFIG_MAX_POOLS,
     .sub = pool_keys,
     .elem_size = sizeof(struct config_pool),
     .line_offset = offsetof(struct config_pool, line)},
    {.name = NULL},
};

static void each_key(const struct key *table, const char *path,
                     void (*fn)(const char *path, const char *key, void *data), void *data)
{
    for (const struct key *k = table; k->name; k++) {
        fn(path, k->name, data);
        if (!k->sub)
            continue;
        char sub_path[256];
        /* Key paths are a few dozen bytes; one that would not fit is left out, not cut. */
        if ((size_t)snprintf(sub_path, sizeof(sub_path), "%s%s%s%s", path, *path ? "." : "",
                             k->name, k->type == KEY_SEQUENCE ? "[]" : "") >= sizeof(sub_path))
            continue;
        each_key(k->sub, sub_path, fn, data);
    }
}

void config_each_key(void (*fn)(const char *path, const char *key, void *data), void *data)
{
    each_key(top_keys, "", fn, data);
}

struct loader {
    const char *path;
    struct config *config; /* being loaded: key lines are noted in it */
    yaml_document_t *doc;
    char *errors;
    size_t errors_len;
    size_t n_errors;
};

static void fail(struct loader *l, const yaml_node_t *node, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fail(struct loader *l, const yaml_node_t *node, const char *key, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    char line[1024];
    int n = snprintf(line, sizeof(line), "%s:%zu: %s: %s\n", l->path,
                     node ? node->start_mark.line + 1 : 0, key, msg);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
    char *grown = realloc(l->errors, l->errors_len + len + 1);
    if (!grown)
        return;
    memcpy(grown + l->errors_len, line, len);
    l->errors = grown;
    l->errors_len += len;
    l->errors[l->errors_len] = 0;
    l->n_errors++;
}

static const char *scalar(const yaml_node_t *node)
{
    return node && node->type == YAML_SCALAR_NODE ? (const char *)node->data.scalar.value : NULL;
}

static void *field(void *base, size_t offset)
{
    return (char *)base + offset;
}

static int parse_string(struct loader *l, const yaml_node_t *node, const char *path, char **ret)
{
    const char *s = scalar(node);
    if (!s) {
        fail(l, node, path, "expected a string");
        return -EINVAL;
    }
    if (!*s) {
        fail(l, node, path, "must not be empty");
        return -EINVAL;
    }
    char *copy = strdup(s);
    if (!copy)
        return -ENOMEM;
    free(*ret);
    *ret = copy;
    return 0;
}

static void parse_mapping(struct loader *l, yaml_node_t *node, const struct key *table, void *base,
                          const char *prefix);

/* A path or a name as its key's form wants it; else the error, at the value's line. */
static void check_form(struct loader *l, const yaml_node_t *value, const struct key *k,
                       const char *path, const char *s)
{
    if (k->form == FORM_PATH) {
        bool control = false;
        for (const char *c = s; *c; c++)
            control = control || (unsigned char)*c < 0x20 || *c == 0x7f;
        if (s[0] != '/')
            fail(l, value, path, "'%s' is not an absolute path", s);
        else if (control)
            fail(l, value, path, "a path with a control character in it");
        else if (strlen(s) >= PATH_MAX)
            fail(l, value, path, "a path longer than %d bytes", PATH_MAX - 1);
    } else if (k->form == FORM_NAME && !config_name_valid(s, CONFIG_MAX_NAME_BYTES)) {
        fail(l, value, path, "'%s' must be 1-%d letters, digits, '-', '_' or '.'", s,
             CONFIG_MAX_NAME_BYTES);
    }
}

/* A list's items, when `value` is a list with as many entries as `k` allows. */
static bool sequence_items(struct loader *l, yaml_node_t *value, const struct key *k,
                           const char *path, const char *what, yaml_node_item_t **ret_start,
                           size_t *ret_n)
{
    if (value->type != YAML_SEQUENCE_NODE) {
        fail(l, value, path, "expected %s", what);
        return false;
    }
    yaml_node_item_t *start = value->data.sequence.items.start;
    size_t n = (size_t)(value->data.sequence.items.top - start);
    if ((int64_t)n < k->min || (int64_t)n > k->max) {
        fail(l, value, path, "needs between %lld and %lld entries, has %zu", (long long)k->min,
             (long long)k->max, n);
        return false;
    }
    *ret_start = start;
    *ret_n = n;
    return true;
}

static void parse_value(struct loader *l, yaml_node_t *value, const struct key *k, void *base,
                        const char *path)
{
    switch (k->type) {
    case KEY_STRING: {
        char **slot = field(base, k->offset);
        if (parse_string(l, value, path, slot) < 0)
            return;
        check_form(l, value, k, path, *slot);
        if (k->enum_values) {
            for (size_t i = 0; i < k->n_enum_values; i++)
                if (strcmp(*slot, k->enum_values[i]) == 0)
                    return;
            fail(l, value, path, "'%s' is not one of the allowed values", *slot);
        }
        return;
    }
    case KEY_INT: {
        const char *s = scalar(value);
        char *end = NULL;
        errno = 0;
        long long v = s ? strtoll(s, &end, 10) : 0;
        if (!s || !*s || *end || errno) {
            fail(l, value, path, "expected an integer, got '%s'", s ? s : "(not a scalar)");
            return;
        }
        if (v < k->min || v > k->max) {
            fail(l, value, path, "%lld is out of range [%lld, %lld]", v, (long long)k->min,
                 (long long)k->max);
            return;
        }
        *(int64_t *)field(base, k->offset) = v;
        return;
    }
    case KEY_ENUM: {
        const char *s = scalar(value);
        for (size_t i = 0; s && i < k->n_enum_values; i++) {
            if (strcmp(s, k->enum_values[i]) == 0) {
                *(int64_t *)field(base, k->offset) = (int64_t)i;
                return;
            }
        }
        char allowed[256] = "";
        size_t used = 0;
        for (size_t i = 0; i < k->n_enum_values && used < sizeof(allowed); i++) {
            int n = snprintf(allowed + used, sizeof(allowed) - used, "%s%s", i ? ", " : "",
                             k->enum_values[i]);
            if (n > 0)
                used += (size_t)n;
        }
        fail(l, value, path, "'%s' is not one of: %s", s ? s : "(not a scalar)", allowed);
        return;
    }
    case KEY_STRING_LIST: {
        yaml_node_item_t *start;
        size_t n;
        if (!sequence_items(l, value, k, path, "a list of strings", &start, &n))
            return;
        char **list = calloc(n + 1, sizeof(char *));
        if (!list) {
            fail(l, value, path, "out of memory");
            return;
        }
        char ***slot = field(base, k->offset);
        *slot = list;
        *(size_t *)field(base, k->count_offset) = n;
        for (size_t i = 0; i < n; i++) {
            char item_path[300];
            snprintf(item_path, sizeof(item_path), "%s[%zu]", path, i);
            parse_string(l, yaml_document_get_node(l->doc, start[i]), item_path, &list[i]);
        }
        return;
    }
    case KEY_MAPPING:
        parse_mapping(l, value, k->sub, field(base, k->offset), path);
        return;
    case KEY_SEQUENCE: {
        yaml_node_item_t *start;
        size_t n;
        if (!sequence_items(l, value, k, path, "a list", &start, &n))
            return;
        char *elems = calloc(n ? n : 1, k->elem_size);
        if (!elems) {
            fail(l, value, path, "out of memory");
            return;
        }
        *(void **)field(base, k->offset) = elems;
        *(size_t *)field(base, k->count_offset) = n;
        for (size_t i = 0; i < n; i++) {
            char item_path[300];
            snprintf(item_path, sizeof(item_path), "%s[%zu]", path, i);
            yaml_node_t *item = yaml_document_get_node(l->doc, start[i]);
            /* Remember where each element starts, for cross-field errors later. */
            *(int *)(elems + i * k->elem_size + k->line_offset) = (int)item->start_mark.line + 1;
            parse_mapping(l, item, k->sub, elems + i * k->elem_size, item_path);
        }
        return;
    }
    case KEY_TYPE_MAX:
        break;
    }
}

/* Edit distance (insertions, deletions, substitutions, and swaps of two neighbours)
 * between two short key names, or SIZE_MAX past 63 bytes. */
static size_t key_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return SIZE_MAX;
    size_t d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

/* The key of `table` an unknown `name` was most likely meant to be: within two edits (one
 * for names of four bytes or fewer), or NULL. */
static const char *nearest_key(const struct key *table, size_t n_keys, const char *name)
{
    size_t best = SIZE_MAX, limit = strlen(name) <= 4 ? 1 : 2;
    const char *found = NULL;
    for (size_t i = 0; i < n_keys; i++) {
        size_t d = key_distance(name, table[i].name);
        if (d <= limit && d < best) {
            best = d;
            found = table[i].name;
        }
    }
    return found;
}

/* A key of a mapping or sequence below `table` near `name` (a pool's key written at the top
 * level, say), as its place: "pools[].max_runners" into `out`; false when none is near. */
static bool nearest_nested_key(const struct key *table, const char *name, char *out, size_t size)
{
    for (const struct key *k = table; k->name; k++) {
        if (k->type != KEY_MAPPING && k->type != KEY_SEQUENCE)
            continue;
        size_t n = 0;
        while (k->sub[n].name)
            n++;
        const char *near = nearest_key(k->sub, n, name);
        if (near) {
            snprintf(out, size, "%s%s.%s", k->name, k->type == KEY_SEQUENCE ? "[]" : "", near);
            return true;
        }
    }
    return false;
}

/* Where a key outside the sequences was given, for errors found after the parse
 * (config_line_of). */
static void note_line(struct loader *l, const char *path, const yaml_node_t *key_node)
{
    struct config_lines *lines = &l->config->lines;
    if (lines->n == CONFIG_MAX_KEY_LINES)
        return;
    char *copy = strdup(path);
    if (!copy)
        return;
    lines->paths[lines->n] = copy;
    lines->numbers[lines->n++] = (int)key_node->start_mark.line + 1;
}

static void parse_mapping(struct loader *l, yaml_node_t *node, const struct key *table, void *base,
                          const char *prefix)
{
    if (node->type != YAML_MAPPING_NODE) {
        fail(l, node, *prefix ? prefix : "(top level)", "expected a mapping of keys");
        return;
    }
    size_t n_keys = 0;
    while (table[n_keys].name)
        n_keys++;
    bool seen[64] = {false};
    if (n_keys > sizeof(seen) / sizeof(seen[0])) {
        fail(l, node, *prefix ? prefix : "(top level)", "hatcheryd's key table is too large");
        return;
    }

    for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top;
         p++) {
        yaml_node_t *key_node = yaml_document_get_node(l->doc, p->key);
        yaml_node_t *value = yaml_document_get_node(l->doc, p->value);
        const char *name = scalar(key_node);
        char path[256];
        snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", name ? name : "?");
        if (!name) {
            fail(l, key_node, path, "keys must be strings");
            continue;
        }
        size_t i = 0;
        while (i < n_keys && strcmp(table[i].name, name) != 0)
            i++;
        if (i == n_keys) {
            const char *near = nearest_key(table, n_keys, name);
            char nested[128];
            if (near)
                fail(l, key_node, path, "unknown key (did you mean '%s'?)", near);
            else if (nearest_nested_key(table, name, nested, sizeof(nested)))
                fail(l, key_node, path, "unknown key here (did you mean %s?)", nested);
            else
                fail(l, key_node, path, "unknown key");
            continue;
        }
        if (seen[i]) {
            fail(l, key_node, path, "key given twice");
            continue;
        }
        seen[i] = true;
        parse_value(l, value, &table[i], base, path);
        if (!strchr(path, '[')) /* a sequence's elements have their own `line` */
            note_line(l, path, key_node);
    }

    for (size_t i = 0; i < n_keys; i++) {
        if (seen[i])
            continue;
        const struct key *k = &table[i];
        char path[256];
        snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", k->name);
        if (k->required) {
            fail(l, node, path, "missing required key");
            continue;
        }
        if (k->type == KEY_INT || k->type == KEY_ENUM)
            *(int64_t *)field(base, k->offset) = k->default_int;
        else if (k->type == KEY_STRING && k->default_string)
            *(char **)field(base, k->offset) = strdup(k->default_string);
        else if (k->type == KEY_MAPPING) {
            /* Apply the nested defaults from an empty mapping. */
            yaml_node_t empty = {.type = YAML_MAPPING_NODE, .start_mark = node->start_mark};
            parse_mapping(l, &empty, k->sub, field(base, k->offset), path);
        }
    }
}

int config_listen_parse(const char *listen, struct sockaddr_storage *ret_addr)
{
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen)
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || port < 0 || port > 65535)
        return -EINVAL;
    char host[128];
    size_t host_len = (size_t)(colon - listen);
    if (listen[0] == '[') {
        if (host_len < 3 || colon[-1] != ']')
            return -EINVAL;
        listen++;
        host_len -= 2;
    }
    if (host_len >= sizeof(host))
        return -EINVAL;
    memcpy(host, listen, host_len);
    host[host_len] = 0;
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof(addr));
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)&addr) != 0 &&
        uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)&addr) != 0)
        return -EINVAL;
    *ret_addr = addr;
    return 0;
}

bool config_name_valid(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(isalnum(c) || c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

/* A node to blame for a cross-field problem: the element's own mapping. */
static yaml_node_t *line_node(int line, yaml_node_t *storage)
{
    memset(storage, 0, sizeof(*storage));
    storage->start_mark.line = line > 0 ? (size_t)line - 1 : 0;
    return storage;
}

/* A VM pool's image manifest, when it is on this machine (not a pool of remote hosts
 * only): an image of another arch is an error, and a pool that names no kernel boots the
 * kernel, initrd and command line the manifest names. A missing manifest is not an error
 * here (not built yet): the scheduler gives such a pool no runner, with the reason. The
 * image of a pool of remote hosts only is looked for on each host (host_image.h). */
static void pool_image_manifest(struct loader *l, const struct config *c, yaml_node_t *at,
                                struct config_pool *p)
{
    if (p->backend != BACKEND_VM || !p->image || p->arch < 0 || p->arch >= ARCH_MAX ||
        config_pool_remote_only(c, p))
        return;
    struct image_manifest m;
    char err[512];
    int r = image_manifest_load(p->image, (enum pool_arch)p->arch, &m, err, sizeof(err));
    if (r == -ENOENT)
        return;
    if (r < 0) {
        fail(l, line_node(p->line, at), "pools[].image", "pool '%s': %s", p->name ? p->name : "?",
             err);
        return;
    }
    if (!p->kernel && m.kernel[0]) {
        p->kernel = strdup(m.kernel);
        if (!p->initrd && m.initrd[0])
            p->initrd = strdup(m.initrd);
        if (!p->cmdline && m.cmdline[0])
            p->cmdline = strdup(m.cmdline);
    }
}

int config_line_of(const struct config *c, const char *path)
{
    for (size_t i = 0; i < c->lines.n; i++)
        if (strcmp(c->lines.paths[i], path) == 0)
            return c->lines.numbers[i];
    return 0;
}

/* The key `path` (a.b) was given at, for an error found after the parse: its line, or the
 * top level's when it was not given (a default, or missing). */
static yaml_node_t *key_at(struct loader *l, const char *path, yaml_node_t *storage)
{
    return line_node(config_line_of(l->config, path), storage);
}

bool config_github_enabled(const struct config *c)
{
    return c->github.app_id > 0 || c->github.token_file || c->github.n_runner_scopes > 0;
}

static bool valid_scope_name(const char *s, bool repo)
{
    size_t slashes = 0, n = strlen(s);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '/')
            slashes++;
        else if (!(isalnum(ch) || ch == '-' || ch == '_' || ch == '.'))
            return false;
    }
    return n > 0 && n <= 200 && slashes == (repo ? 1u : 0u) && s[0] != '/' && s[n - 1] != '/';
}

static const char *scope_name(const struct config_scope *s)
{
    return s->repo ? s->repo : s->org ? s->org : s->enterprise;
}

static void check_github(struct loader *l, struct config *c, yaml_node_t *root)
{
    (void)root;
    if (!config_github_enabled(c))
        return;
    struct config_github *g = &c->github;
    yaml_node_t at, section_at;
    yaml_node_t *section = key_at(l, "github", &section_at);
    bool app = g->app_id > 0 || g->app_private_key_file;
    if (app && g->token_file)
        fail(l, section, "github",
             "give either app_id with app_private_key_file (a GitHub App) or token_file, not "
             "both");
    else if (app && (!g->app_id || !g->app_private_key_file))
        fail(l, section, "github", "a GitHub App needs both app_id and app_private_key_file");
    else if (!app && !g->token_file)
        fail(l, section, "github", "needs app_id with app_private_key_file, or token_file");
    if (g->n_runner_scopes == 0)
        fail(l, key_at(l, "github.runner_scopes", &at), "github.runner_scopes",
             "needs at least one repo, org or enterprise");
    if (g->api_url && strncmp(g->api_url, "https://", 8) != 0 &&
        strncmp(g->api_url, "http://127.", 11) != 0 &&
        strncmp(g->api_url, "http://localhost", 16) != 0 &&
        strncmp(g->api_url, "http://[::1]", 12) != 0)
        fail(l, key_at(l, "github.api_url", &at), "github.api_url",
             "'%s' must be https:// (plain http only on loopback, for tests)", g->api_url);
    for (size_t i = 0; i < g->n_runner_scopes; i++) {
        struct config_scope *s = &g->runner_scopes[i];
        if (!!s->repo + !!s->org + !!s->enterprise != 1)
            fail(l, line_node(s->line, &at), "github.runner_scopes[]",
                 "each scope names exactly one of repo (owner/name), org or enterprise");
        else if (s->repo && !valid_scope_name(s->repo, true))
            fail(l, line_node(s->line, &at), "github.runner_scopes[].repo",
                 "'%s' is not owner/name", s->repo);
        else if (s->org && !valid_scope_name(s->org, false))
            fail(l, line_node(s->line, &at), "github.runner_scopes[].org",
                 "'%s' is not an organization name", s->org);
        else if (s->enterprise && !valid_scope_name(s->enterprise, false))
            fail(l, line_node(s->line, &at), "github.runner_scopes[].enterprise",
                 "'%s' is not an enterprise's slug", s->enterprise);
        for (size_t k = 0; k < i; k++)
            if (strcmp(scope_name(&g->runner_scopes[k]) ?: "", scope_name(s) ?: "-") == 0)
                fail(l, line_node(s->line, &at), "github.runner_scopes[]",
                     "scope '%s' is given twice (pools name their scope by its name alone)",
                     scope_name(s));
    }
}

/* The scope a pool's runners register in: the one it names, or the only one there is.
 * NULL when it names none of them, or none while there are several. */
const struct config_scope *config_pool_scope(const struct config *c, const struct config_pool *p)
{
    const struct config_github *g = &c->github;
    for (size_t i = 0; p->github_scope && i < g->n_runner_scopes; i++) {
        const struct config_scope *s = &g->runner_scopes[i];
        if (scope_name(s) && strcmp(scope_name(s), p->github_scope) == 0)
            return s;
    }
    return !p->github_scope && g->n_runner_scopes == 1 ? &g->runner_scopes[0] : NULL;
}

/* Which runner group a pool's runners join decides which workflows may reach them: no pool
 * falls into a scope it did not name, and a trusted pool never into the default group,
 * which every workflow of the repository (a pull request's among them) may use. */
static void check_pool_scope(struct loader *l, const struct config *c, const struct config_pool *p)
{
    if (!config_github_enabled(c) || c->github.n_runner_scopes == 0)
        return;
    yaml_node_t at;
    const char *name = p->name ? p->name : "?";
    const struct config_scope *s = config_pool_scope(c, p);
    if (!s && p->github_scope) {
        fail(l, line_node(p->line, &at), "pools[].github_scope",
             "pool '%s' names scope '%s', which is none of github.runner_scopes", name,
             p->github_scope);
        return;
    }
    if (!s) {
        fail(l, line_node(p->line, &at), "pools[].github_scope",
             "pool '%s' names no github_scope, and github.runner_scopes has %zu: say which one "
             "its runners register in (its runner group decides which workflows reach them)",
             name, c->github.n_runner_scopes);
        return;
    }
    if (!p->trusted)
        return;
    if (!p->github_scope)
        fail(l, line_node(p->line, &at), "pools[].github_scope",
             "trusted pool '%s' must name its github_scope, one whose runner group is "
             "restricted to trusted workflows",
             name);
    else if (s->repo)
        fail(l, line_node(p->line, &at), "pools[].trusted",
             "trusted pool '%s' registers in repository scope '%s', whose runners serve every "
             "workflow of the repository (a pull request's too): runner groups, which can be "
             "restricted to trusted workflows, exist for organizations only; give it an org "
             "scope",
             name, p->github_scope);
    else if (s->enterprise)
        fail(l, line_node(p->line, &at), "pools[].trusted",
             "trusted pool '%s' registers in enterprise scope '%s': Hatchery checks a trusted "
             "pool's runner group through its organization's API, so give it an org scope",
             name, p->github_scope);
    else if (s->runner_group_id == CONFIG_DEFAULT_RUNNER_GROUP)
        fail(l, line_node(p->line, &at), "pools[].trusted",
             "trusted pool '%s' registers in scope '%s', whose runner_group_id %d is the default "
             "group, which every workflow (a pull request's too) may use: give the scope a "
             "runner group restricted to trusted workflows",
             name, p->github_scope, CONFIG_DEFAULT_RUNNER_GROUP);
}

/* Whether a guest of `p` fits on `h`; a host whose size is missing (an error already)
 * is not taken for one it does not fit on. */
static bool host_fits(const struct config_host *h, const struct config_pool *p)
{
    return !h->vcpus || !h->memory_mib || (h->vcpus >= p->vcpus && h->memory_mib >= p->memory_mib);
}

/* The top-level keys that must agree with each other or with a form. */
static void check_top_level(struct loader *l, struct config *c)
{
    /* The webhook secret is needed while any pool takes webhooks (or none is configured
     * yet): only a config whose every pool is a scale set's does without. */
    const struct config_pool *webhook_pool = NULL;
    for (size_t i = 0; !webhook_pool && i < c->n_pools; i++)
        if (!c->pools[i].scale_set)
            webhook_pool = &c->pools[i];
    if (!c->webhook_secret_file && (webhook_pool || c->n_pools == 0)) {
        yaml_node_t at0;
        if (webhook_pool)
            fail(l, line_node(webhook_pool->line, &at0), "webhook_secret_file",
                 "required: pool '%s' takes webhooks (give it a scale_set, or the secret)",
                 webhook_pool->name ? webhook_pool->name : "?");
        else
            fail(l, NULL, "webhook_secret_file", "required (no pool is configured)");
    }
    yaml_node_t at;
    if (c->controller_id) {
        size_t n = strlen(c->controller_id);
        bool ok = n > 0 && n <= 32;
        for (size_t i = 0; ok && i < n; i++) {
            unsigned char ch = (unsigned char)c->controller_id[i];
            ok = islower(ch) || isdigit(ch) || ch == '-';
        }
        if (!ok)
            fail(l, key_at(l, "controller_id", &at), "controller_id",
                 "'%s' must be 1-32 characters of a-z, 0-9 and '-' (it prefixes runner names)",
                 c->controller_id);
    }
    struct sockaddr_storage addr;
    if (c->listen && config_listen_parse(c->listen, &addr) < 0)
        fail(l, key_at(l, "listen", &at), "listen", "'%s' is not IPV4:PORT or [IPV6]:PORT",
             c->listen);
    if (c->metrics_listen && config_listen_parse(c->metrics_listen, &addr) < 0)
        fail(l, key_at(l, "metrics_listen", &at), "metrics_listen",
             "'%s' is not IPV4:PORT or [IPV6]:PORT", c->metrics_listen);
    else if (c->metrics_listen && c->listen && strcmp(c->metrics_listen, c->listen) == 0)
        fail(l, key_at(l, "metrics_listen", &at), "metrics_listen",
             "'%s' is the webhook listener's address; give another port", c->metrics_listen);
    if (!c->http.tls_cert_file != !c->http.tls_key_file)
        fail(l, key_at(l, "http", &at), "http",
             "tls_cert_file and tls_key_file must be given together");
}

/* Whether a libvirt URI's transport is tcp (driver+tcp://), in any case: libvirt reads
 * the transport case-insensitively, so qemu+TCP:// is tcp too. */
static bool uri_transport_is_tcp(const char *uri)
{
    const char *end = strstr(uri, "://");
    const char *plus = end ? memchr(uri, '+', (size_t)(end - uri)) : NULL;
    return plus && end - plus - 1 == 3 && strncasecmp(plus + 1, "tcp", 3) == 0;
}

static void check_host(struct loader *l, const struct config *c, size_t i)
{
    yaml_node_t at;
    const struct config_host *h = &c->hosts[i];
    if (h->name && !config_name_valid(h->name, CONFIG_MAX_NAME_BYTES))
        fail(l, line_node(h->line, &at), "hosts[].name",
             "'%s' must be letters, digits, '-', '_' or '.'", h->name);
    for (size_t j = 0; j < i; j++)
        if (h->name && c->hosts[j].name && strcmp(h->name, c->hosts[j].name) == 0)
            fail(l, line_node(h->line, &at), "hosts[].name", "host '%s' is defined twice", h->name);
    /* Through streams the JIT config crosses libvirt's connection: never in clear. */
    if (h->uri && config_host_streams(h) && uri_transport_is_tcp(h->uri))
        fail(l, line_node(h->line, &at), "hosts[].uri",
             "host '%s': agent channels go through this connection, and %s is not "
             "encrypted: the runners' JIT configs would cross the network in clear; use "
             "qemu+ssh:// or qemu+tls://",
             h->name ? h->name : "?", h->uri);
    /* One libvirt under two names would be counted twice, and each name's reconciler
     * would remove the other's guests as orphans. */
    for (size_t j = 0; j < i; j++)
        if (h->uri && c->hosts[j].uri && strcmp(h->uri, c->hosts[j].uri) == 0)
            fail(l, line_node(h->line, &at), "hosts[].uri",
                 "host '%s' has the same uri as host '%s': one libvirt must be one host",
                 h->name ? h->name : "?", c->hosts[j].name ? c->hosts[j].name : "?");
}

/* The pool's hosts: each known, one at least big enough for a guest, none reached through
 * streams for a container pool (one that names none may use every host). */
static void check_pool_hosts(struct loader *l, const struct config *c, const struct config_pool *p)
{
    yaml_node_t at;
    bool fits = p->n_hosts == 0 && c->n_hosts == 0;
    for (size_t k = 0; k < p->n_hosts; k++) {
        size_t j = 0;
        while (j < c->n_hosts &&
               !(p->hosts[k] && c->hosts[j].name && strcmp(p->hosts[k], c->hosts[j].name) == 0))
            j++;
        if (j == c->n_hosts)
            fail(l, line_node(p->line, &at), "pools[].hosts", "unknown host '%s'",
                 p->hosts[k] ? p->hosts[k] : "?");
        else if (host_fits(&c->hosts[j], p))
            fits = true;
        if (j < c->n_hosts && p->backend == BACKEND_CONTAINER && config_host_streams(&c->hosts[j]))
            fail(l, line_node(p->line, &at), "pools[].hosts",
                 "container pool '%s' on host '%s', which is reached through streams: "
                 "containers need a host on this machine (lxc:///)",
                 p->name ? p->name : "?", c->hosts[j].name);
    }
    for (size_t j = 0; p->n_hosts == 0 && j < c->n_hosts; j++) {
        if (host_fits(&c->hosts[j], p))
            fits = true;
        if (p->backend == BACKEND_CONTAINER && config_host_streams(&c->hosts[j]))
            fail(l, line_node(p->line, &at), "pools[].hosts",
                 "container pool '%s' may use host '%s', which is reached through "
                 "streams: containers need a host on this machine (lxc:///); list the "
                 "pool's hosts",
                 p->name ? p->name : "?", c->hosts[j].name);
    }
    if (!fits)
        fail(l, line_node(p->line, &at), "pools[].vcpus",
             "pool '%s' (%lld vCPUs, %lld MiB) fits on none of its hosts", p->name ? p->name : "?",
             (long long)p->vcpus, (long long)p->memory_mib);
}

/* What a container pool may not be. */
static void check_container_pool(struct loader *l, const struct config_pool *p)
{
    yaml_node_t at;
    if (p->start == START_TEMPLATE)
        fail(l, line_node(p->line, &at), "pools[].start",
             "container pool '%s' cannot start from a template (VM pools only)",
             p->name ? p->name : "?");
    /* A container has its own users and network, but shares the host's kernel: one
     * kernel bug from the host, no place for a pull request's code (docs/POWER-HOST.md:
     * "Security model"). The config must say that only trusted code goes there. */
    if (!p->trusted)
        fail(l, line_node(p->line, &at), "pools[].trusted",
             "container pool '%s' is not isolated enough for untrusted jobs: set "
             "`trusted: true` if only trusted workflows use its labels, or use a VM pool",
             p->name ? p->name : "?");
    /* libvirt's LXC driver has no user-mode networking: without a network of its own a
     * container would share the host's. */
    if (p->network && strcmp(p->network, "user") == 0)
        fail(l, line_node(p->line, &at), "pools[].network",
             "container pool '%s' has network 'user' (the default), which containers do "
             "not have: say `network: none` (loopback only) or name a libvirt network "
             "(`network: default`), whose guests hatcheryd keeps off the host",
             p->name ? p->name : "?");
    if (p->runner_user && strcmp(p->runner_user, "root") == 0)
        fail(l, line_node(p->line, &at), "pools[].runner_user",
             "container pool '%s' would run its runner as root: name an unprivileged "
             "account of its root directory",
             p->name ? p->name : "?");
}

static void check_pool(struct loader *l, struct config *c, size_t i)
{
    yaml_node_t at;
    struct config_pool *p = &c->pools[i];
    if (p->name && !config_name_valid(p->name, CONFIG_MAX_NAME_BYTES))
        fail(l, line_node(p->line, &at), "pools[].name",
             "'%s' must be letters, digits, '-', '_' or '.'", p->name);
    for (size_t j = 0; j < i; j++)
        if (p->name && c->pools[j].name && strcmp(p->name, c->pools[j].name) == 0)
            fail(l, line_node(p->line, &at), "pools[].name", "pool '%s' is defined twice", p->name);
    if (p->min_idle > p->max_runners)
        fail(l, line_node(p->line, &at), "pools[].min_idle",
             "min_idle (%lld) is larger than max_runners (%lld)", (long long)p->min_idle,
             (long long)p->max_runners);
    for (size_t k = 0; k < p->n_labels; k++)
        if (p->labels[k] && strlen(p->labels[k]) > WEBHOOK_MAX_LABEL_BYTES)
            fail(l, line_node(p->line, &at), "pools[].labels", "label longer than %d bytes",
                 WEBHOOK_MAX_LABEL_BYTES);
    for (size_t j = 0; j < i; j++)
        if (p->scale_set && c->pools[j].scale_set &&
            strcmp(p->scale_set, c->pools[j].scale_set) == 0)
            fail(l, line_node(p->line, &at), "pools[].scale_set",
                 "scale set '%s' serves pools '%s' and '%s': one pool per scale set", p->scale_set,
                 c->pools[j].name ? c->pools[j].name : "?", p->name ? p->name : "?");
    if (p->scale_set && !config_github_enabled(c))
        fail(l, line_node(p->line, &at), "pools[].scale_set",
             "pool '%s' is served by scale set '%s', which needs the github section",
             p->name ? p->name : "?", p->scale_set);
    check_pool_hosts(l, c, p);
    if (p->backend == BACKEND_CONTAINER)
        check_container_pool(l, p);
    check_pool_scope(l, c, p);
    pool_image_manifest(l, c, &at, p);
}

static void check_database(struct loader *l, struct config *c)
{
    yaml_node_t at;
    char err[256];
    const struct config_database *db = &c->database;
    if (db->password_file && !db->postgresql)
        fail(l, key_at(l, "database.password_file", &at), "database.password_file",
             "is the password of database.postgresql, which is not set");
    if (db->postgresql && store_postgresql_conninfo_check(db->postgresql, err, sizeof(err)) < 0)
        fail(l, key_at(l, "database.postgresql", &at), "database.postgresql", "%s", err);
}

static void check_semantics(struct loader *l, struct config *c, yaml_node_t *root)
{
    check_top_level(l, c);
    check_github(l, c, root);
    check_database(l, c);
    for (size_t i = 0; i < c->n_hosts; i++)
        check_host(l, c, i);
    for (size_t i = 0; i < c->n_pools; i++)
        check_pool(l, c, i);
}

static void free_list(char **list, size_t n)
{
    for (size_t i = 0; list && i < n; i++)
        free(list[i]);
    free(list);
}

/* Frees what `keys` hold in `base`, as the table describes them: the strings and lists
 * each key owns, and the mappings and sequences below, whatever their depth. */
static void keys_free(const struct key *keys, void *base)
{
    for (const struct key *k = keys; k->name; k++) {
        void *at = field(base, k->offset);
        switch (k->type) {
        case KEY_STRING:
            free(*(char **)at);
            break;
        case KEY_STRING_LIST:
            free_list(*(char ***)at, *(size_t *)field(base, k->count_offset));
            break;
        case KEY_MAPPING:
            keys_free(k->sub, at);
            break;
        case KEY_SEQUENCE: {
            char *elems = *(char **)at;
            size_t n = *(size_t *)field(base, k->count_offset);
            for (size_t i = 0; elems && i < n; i++)
                keys_free(k->sub, elems + i * k->elem_size);
            free(elems);
            break;
        }
        case KEY_INT:
        case KEY_ENUM:
        case KEY_TYPE_MAX:
            break;
        }
    }
}

void config_free(struct config *c)
{
    if (!c)
        return;
    free(c->path); /* the fields that are not keys */
    for (size_t i = 0; i < c->lines.n; i++)
        free(c->lines.paths[i]);
    keys_free(top_keys, c);
    free(c);
}

int config_parse(const char *path, struct config **ret_config, char **ret_errors)
{
    struct loader l = {.path = path};
    *ret_config = NULL;
    yaml_parser_t parser;
    yaml_document_t doc;
    bool have_doc = false, parsed = false;
    int r = 0;
    struct config *c = calloc(1, sizeof(*c));
    char *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!c) {
        r = -ENOMEM;
        goto out;
    }
    if (!f) {
        r = -errno;
        fail(&l, NULL, "(file)", "cannot open: %s", strerror(-r));
        goto out;
    }
    /* Read with a bound, whatever the file is: a FIFO or a device has no size to check
     * first, and libyaml would read it for ever. */
    text = malloc(CONFIG_MAX_FILE_BYTES + 1);
    size_t text_len = text ? fread(text, 1, CONFIG_MAX_FILE_BYTES + 1, f) : 0;
    if (!text) {
        r = -ENOMEM;
        goto out;
    }
    if (text_len > CONFIG_MAX_FILE_BYTES) {
        r = -EFBIG;
        fail(&l, NULL, "(file)", "larger than %d bytes", CONFIG_MAX_FILE_BYTES);
        goto out;
    }
    if (ferror(f)) {
        r = -EIO;
        fail(&l, NULL, "(file)", "cannot read");
        goto out;
    }
    c->path = strdup(path);
    l.config = c;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, text_len);
    if (!yaml_parser_load(&parser, &doc)) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", parser.problem ? parser.problem : "YAML error");
        yaml_node_t at = {.start_mark = parser.problem_mark};
        fail(&l, &at, "(yaml)", "%s%s%s", msg, parser.context ? " " : "",
             parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        r = -EINVAL;
        goto out;
    }
    yaml_parser_delete(&parser);
    have_doc = true;
    l.doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        fail(&l, NULL, "(top level)", "the file is empty");
        r = -EINVAL;
        goto out;
    }
    parse_mapping(&l, root, top_keys, c, "");
    /* Every check, whatever the parse found: all the errors at once, each at its line. The
     * checks take what parsed, and skip what did not. */
    check_semantics(&l, c, root);
    if (l.n_errors)
        r = -EINVAL;
    parsed = true;
out:
    if (have_doc)
        yaml_document_delete(&doc);
    if (f)
        fclose(f);
    free(text);
    if (r < 0) {
        if (parsed)
            *ret_config = c; /* the caller checks what else it can, and frees it */
        else
            config_free(c);
        *ret_errors = l.errors ? l.errors : strdup("config: out of memory\n");
        return r;
    }
    free(l.errors);
    *ret_config = c;
    return 0;
}

struct error_line {
    const char *text;
    size_t len;
    unsigned long line;
    size_t order;
};

static int error_line_cmp(const void *a, const void *b)
{
    const struct error_line *x = a, *y = b;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

void config_errors_sort(char *errors)
{
    size_t n = 0, total = strlen(errors);
    for (const char *p = errors; *p; p++)
        n += *p == '\n';
    struct error_line *lines = calloc(n + 1, sizeof(*lines));
    char *sorted = malloc(total + 1);
    if (!lines || !sorted) {
        free(lines);
        free(sorted);
        return; /* left as it came */
    }
    n = 0;
    for (const char *p = errors; *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) + 1 : strlen(p);
        /* FILE:LINE: …: the line number follows the file's name and a colon. A file name
         * may hold colons itself: the first ":DIGITS: " counts. */
        unsigned long number = 0;
        for (const char *c = p; c < p + len; c++)
            if (*c == ':' && isdigit((unsigned char)c[1])) {
                char *after;
                number = strtoul(c + 1, &after, 10);
                if (*after == ':')
                    break;
                number = 0;
            }
        lines[n] = (struct error_line){p, len, number, n};
        n++;
        p += len;
    }
    qsort(lines, n, sizeof(*lines), error_line_cmp);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(sorted + at, lines[i].text, lines[i].len);
        at += lines[i].len;
    }
    sorted[at] = 0;
    memcpy(errors, sorted, at + 1);
    free(sorted);
    free(lines);
}

int config_load(const char *path, struct config **ret_config, char **ret_errors)
{
    struct config *c = NULL;
    int r = config_parse(path, &c, ret_errors);
    if (r < 0) {
        config_free(c);
        return r;
    }
    *ret_config = c;
    return 0;
}

/* ---- reload: what changed, and what must wait for a restart ----------------------------- */

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool keys_equal(const struct key *keys, const void *a, const void *b);

/* Whether key `k` has the same value in `a` and `b` (whole mappings and sequences). */
static bool key_equal(const struct key *k, const void *a, const void *b)
{
    const char *pa = (const char *)a + k->offset, *pb = (const char *)b + k->offset;
    switch (k->type) {
    case KEY_INT:
    case KEY_ENUM:
        return *(const int64_t *)pa == *(const int64_t *)pb;
    case KEY_STRING:
        return str_eq(*(char *const *)pa, *(char *const *)pb);
    case KEY_STRING_LIST: {
        size_t na = *(const size_t *)((const char *)a + k->count_offset);
        size_t nb = *(const size_t *)((const char *)b + k->count_offset);
        char *const *la = *(char *const *const *)pa, *const *lb = *(char *const *const *)pb;
        for (size_t i = 0; na == nb && i < na; i++)
            if (!str_eq(la[i], lb[i]))
                return false;
        return na == nb;
    }
    case KEY_MAPPING:
        return keys_equal(k->sub, pa, pb);
    case KEY_SEQUENCE: {
        size_t na = *(const size_t *)((const char *)a + k->count_offset);
        size_t nb = *(const size_t *)((const char *)b + k->count_offset);
        const char *ea = *(const char *const *)pa, *eb = *(const char *const *)pb;
        for (size_t i = 0; na == nb && i < na; i++)
            if (!keys_equal(k->sub, ea + i * k->elem_size, eb + i * k->elem_size))
                return false;
        return na == nb;
    }
    case KEY_TYPE_MAX:
        break;
    }
    return true;
}

static bool keys_equal(const struct key *keys, const void *a, const void *b)
{
    for (const struct key *k = keys; k->name; k++)
        if (!key_equal(k, a, b))
            return false;
    return true;
}

/* Appends to `changed` the name of each key of `keys` whose value differs between `a`
 * and `b` (nested mappings and sequences count as one key). */
static void keys_diff(const struct key *keys, const void *a, const void *b, json_t *changed)
{
    for (const struct key *k = keys; k->name; k++)
        if (!key_equal(k, a, b))
            json_array_append_new(changed, json_string(k->name));
}

/* Top-level keys a reload cannot apply: the running value stays until a restart. */
static const char *const restart_keys[] = {
    "controller_id",       "listen", "metrics_listen", "state_dir",     "admin_socket",
    "webhook_secret_file", "http",   "github",         "adopt_grace_s", "database",
};
/* Host keys a reload cannot apply to a host that exists: its connection and volumes. */
static const char *const host_restart_keys[] = {"uri", "storage_pool", "storage_dir",
                                                "agent_transport"};

static bool in_list(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], name) == 0)
            return true;
    return false;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Pools or hosts (an array of `size`-byte elements whose first field is the name). */
static json_t *named_diff(const struct key *keys, const void *old, size_t n_old, const void *new,
                          size_t n_new, size_t size, const char *const *restart, size_t n_restart,
                          const char *what, json_t *needs_restart)
{
    json_t *added = json_array(), *removed = json_array(), *changed = json_object();
    for (size_t i = 0; i < n_new; i++) {
        const void *b = (const char *)new + i *size;
        const char *name = *(char *const *)b;
        const void *a = NULL;
        for (size_t j = 0; j < n_old && !a; j++)
            if (strcmp(*(char *const *)((const char *)old + j * size), name) == 0)
                a = (const char *)old + j * size;
        if (!a) {
            json_array_append_new(added, json_string(name));
            continue;
        }
        json_t *keys_changed = json_array();
        keys_diff(keys, a, b, keys_changed);
        size_t k;
        json_t *key;
        json_array_foreach(keys_changed, k, key)
        {
            if (in_list(json_string_value(key), restart, n_restart)) {
                char path[256];
                snprintf(path, sizeof(path), "%s.%s.%s", what, name, json_string_value(key));
                json_array_append_new(needs_restart, json_string(path));
            }
        }
        if (json_array_size(keys_changed))
            json_object_set_new(changed, name, keys_changed);
        else
            json_decref(keys_changed);
    }
    for (size_t j = 0; j < n_old; j++) {
        const char *name = *(char *const *)((const char *)old + j * size);
        bool kept = false;
        for (size_t i = 0; i < n_new && !kept; i++)
            kept = strcmp(*(char *const *)((const char *)new + i *size), name) == 0;
        if (!kept)
            json_array_append_new(removed, json_string(name));
    }
    return json_pack("{s:o, s:o, s:o}", "added", added, "removed", removed, "changed", changed);
}

json_t *config_diff(const struct config *old, const struct config *new)
{
    json_t *needs_restart = json_array(), *settings = json_array(), *top = json_array();
    keys_diff(top_keys, old, new, top);
    size_t i;
    json_t *key;
    json_array_foreach(top, i, key)
    {
        const char *name = json_string_value(key);
        if (strcmp(name, "hosts") == 0 || strcmp(name, "pools") == 0)
            continue;
        json_array_append(
            in_list(name, restart_keys, N_OF(restart_keys)) ? needs_restart : settings, key);
    }
    json_decref(top);
    json_t *pools = named_diff(pool_keys, old->pools, old->n_pools, new->pools, new->n_pools,
                               sizeof(struct config_pool), NULL, 0, "pools", needs_restart);
    json_t *hosts = named_diff(host_keys, old->hosts, old->n_hosts, new->hosts, new->n_hosts,
                               sizeof(struct config_host), host_restart_keys,
                               N_OF(host_restart_keys), "hosts", needs_restart);
    return json_pack("{s:o, s:o, s:o, s:o}", "pools", pools, "hosts", hosts, "settings", settings,
                     "needs_restart", needs_restart);
}

#define SWAP(a, b)                                                                                 \
    do {                                                                                           \
        __typeof__(a) tmp_ = (a);                                                                  \
        (a) = (b);                                                                                 \
        (b) = tmp_;                                                                                \
    } while (0)

void config_keep_running(struct config *new, struct config *old)
{
    SWAP(new->controller_id, old->controller_id);
    SWAP(new->listen, old->listen);
    SWAP(new->metrics_listen, old->metrics_listen);
    SWAP(new->state_dir, old->state_dir);
    SWAP(new->admin_socket, old->admin_socket);
    SWAP(new->webhook_secret_file, old->webhook_secret_file);
    SWAP(new->http, old->http);
    SWAP(new->github, old->github);
    SWAP(new->adopt_grace_s, old->adopt_grace_s);
    for (size_t i = 0; i < new->n_hosts; i++)
        for (size_t j = 0; j < old->n_hosts; j++) {
            struct config_host *n = &new->hosts[i], *o = &old->hosts[j];
            if (strcmp(n->name, o->name) != 0)
                continue;
            SWAP(n->uri, o->uri);
            SWAP(n->storage_pool, o->storage_pool);
            SWAP(n->storage_dir, o->storage_dir);
            SWAP(n->agent_transport, o->agent_transport);
        }
}
