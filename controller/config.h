/* hatcheryd's configuration: one YAML file, parsed with libyaml and checked against a
 * table of keys (config.c). Every error names the file, the line and the key. */
#ifndef HATCHERY_CONFIG_H
#define HATCHERY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>

enum pool_arch {
    ARCH_PPC64LE,
    ARCH_S390X,
    ARCH_X86_64,
    ARCH_MAX,
};

enum pool_backend {
    BACKEND_VM,
    BACKEND_CONTAINER,
    BACKEND_MAX,
};

extern const char *const pool_arch_names[ARCH_MAX];
extern const char *const pool_backend_names[BACKEND_MAX];

/* How hatcheryd reaches a guest's agent channel and console: through a unix socket and a
 * file on this machine, or through libvirt streams over the connection (a remote host). */
enum host_transport {
    TRANSPORT_AUTO, /* streams when the URI names a host (qemu+ssh://h/system), else socket */
    TRANSPORT_SOCKET,
    TRANSPORT_STREAM,
    TRANSPORT_MAX,
};

extern const char *const host_transport_names[TRANSPORT_MAX];

/* Whether hatcheryd must see a host's guest isolation in place before it starts networked
 * guests there (controller/guest_isolation.h). */
enum host_guest_isolation {
    ISOLATION_REQUIRED,  /* checked; a host without it gets no networked guest */
    ISOLATION_UNCHECKED, /* the operator isolates guests some other way, and says so */
    ISOLATION_MAX,
};
extern const char *const host_guest_isolation_names[ISOLATION_MAX];

struct config_host {
    char *name;
    char *uri;
    int64_t vcpus;
    int64_t memory_mib;
    int64_t max_guests;
    char *storage_pool; /* libvirt storage pool for overlays; made as a dir pool if missing */
    char *storage_dir;
    int64_t down_grace_s;    /* guests outlive a dropped connection this long, for its return */
    int64_t agent_transport; /* enum host_transport */
    int64_t guest_isolation; /* enum host_guest_isolation */
    int line;
};

enum pool_firmware {
    FIRMWARE_DEFAULT,
    FIRMWARE_VOF, /* ppc64le: QEMU's Virtual Open Firmware, boots in ~2 s instead of ~8 */
    FIRMWARE_MAX,
};

extern const char *const pool_firmware_names[FIRMWARE_MAX];

enum pool_start {
    START_COLD,     /* every runner boots its guest */
    START_TEMPLATE, /* runners are restored from warm templates, cold when none is ready */
    START_MAX,
};

extern const char *const pool_start_names[START_MAX];

struct config_pool {
    char *name;
    char **labels;
    size_t n_labels;
    int64_t arch;    /* enum pool_arch */
    int64_t backend; /* enum pool_backend */
    char *image;
    int64_t vcpus;
    int64_t memory_mib;
    int64_t min_idle;
    int64_t max_runners;
    char **hosts;
    size_t n_hosts;
    char *kernel; /* direct kernel boot (test guests), else the image boots itself */
    char *initrd;
    char *cmdline;
    int64_t firmware; /* enum pool_firmware */
    int64_t start;    /* enum pool_start */
    char *network;    /* "user", "none" or a libvirt network */
    int64_t disk_mib;
    int64_t boot_timeout_s;
    int64_t job_timeout_s;
    char **runner_command; /* the JIT config is appended as the last argument */
    size_t n_runner_command;
    int64_t idle_max_age_s;
    int64_t surplus_idle_s; /* an idle runner beyond demand + min_idle goes after this */
    char *github_scope; /* a repo (owner/name) or org of github.runner_scopes; default the first */
    int64_t trusted;    /* 1: only trusted code runs here (required of container pools) */
    char *runner_user;  /* containers: the account in the root the runner runs as */
    char *scale_set;    /* the runner scale set its jobs come from (no webhooks), or NULL */
    int line;
};

enum placement {
    PLACEMENT_SPREAD,
    PLACEMENT_PACK,
    PLACEMENT_MAX,
};

extern const char *const placement_names[PLACEMENT_MAX];

struct config_http {
    int64_t max_body_bytes;
    int64_t max_header_bytes;
    int64_t max_headers;
    int64_t read_timeout_ms;
    int64_t idle_timeout_ms;
    int64_t max_connections;
    int64_t max_connections_per_address; /* 0: no limit */
    /* Deliveries with a bad signature one address may send in FRONT_BAD_SIGNATURE_WINDOW_MS
     * before its deliveries are refused (429) unhashed until the window ends; 0: no limit */
    int64_t max_bad_signatures_per_address;
    char *tls_cert_file;
    char *tls_key_file;
};

/* GitHub's default runner group: every repository of the scope, and every workflow, may use
 * it. */
#define CONFIG_DEFAULT_RUNNER_GROUP 1

struct config_scope {
    char *repo; /* owner/name */
    char *org;
    char *enterprise; /* its slug */
    int64_t runner_group_id;
    int line;
};

struct config_github {
    char *api_url;
    int64_t app_id; /* 0: not an App */
    char *app_private_key_file;
    int64_t installation_id; /* 0: look it up */
    char *token_file;
    char *ca_file;
    int64_t timeout_ms;
    int64_t max_retries;
    int64_t max_response_bytes;
    struct config_scope *runner_scopes;
    size_t n_runner_scopes;
};

/* Where each key outside the sequences was given ("listen", "github.app_private_key_file"):
 * errors found after the parse name their line (config_line_of). */
#define CONFIG_MAX_KEY_LINES 128
struct config_lines {
    char *paths[CONFIG_MAX_KEY_LINES];
    int numbers[CONFIG_MAX_KEY_LINES];
    size_t n;
};

/* Where the store is: PostgreSQL when `postgresql` is set, else SQLite in state_dir. */
struct config_database {
    char *postgresql;    /* a postgresql:// URI or libpq's keywords, without a password */
    char *password_file; /* NULL: libpq's own sources (PGPASSFILE, ~/.pgpass) */
    /* The leader's lease (lease.h): a leader that cannot renew for 4/5 of it stops; a
     * follower takes over once it has expired by the database's clock. */
    int64_t lease_s;
};

struct config {
    char *path;
    struct config_lines lines;
    char *controller_id;
    char *listen;
    char *metrics_listen; /* NULL: /metrics is served on `listen` */
    char *state_dir;
    char *admin_socket;
    char *webhook_secret_file;
    char *log_level;
    int64_t delivery_retention_s;
    int64_t placement; /* enum placement */
    int64_t reconcile_interval_s;
    int64_t heartbeat_timeout_s; /* an agent silent this long in idle or busy is hung */
    int64_t adopt_grace_s;       /* after a restart, how long a guest has to answer resume */
    int64_t rotate_outdated;     /* 1: idle runners of a replaced image go at once */
    int64_t log_retention_s;
    int64_t history_retention_s; /* ended runner and job records */
    struct config_http http;
    struct config_github github;
    struct config_database database;
    struct config_host *hosts;
    size_t n_hosts;
    struct config_pool *pools;
    size_t n_pools;
};

/* Loads and validates `path`. On failure returns a negative errno and writes every problem
 * found, one per line as `FILE:LINE: KEY: message`, to `errors` (a NUL-terminated string
 * the caller frees). */
/* The host's transport with `auto` resolved. */
bool config_host_streams(const struct config_host *host);
/* Hosts whose files and firewall are this machine's (qemu:///system, lxc:///); not the
 * test driver's, whose paths are its own, nor a remote host's. */
bool config_host_is_local(const char *uri);
/* Whether `pool` may place guests on the host named `host` (its hosts, or all of them). */
bool config_pool_uses_host(const struct config_pool *pool, const char *host);
/* Pools are known by name: a reload may move, add or remove them. The index of the pool
 * named `name` in `c`, or -1. */
int config_pool_index(const struct config *c, const char *name);
/* Hosts too: the index of the host named `name` in `c`, or -1. */
int config_host_index(const struct config *c, const char *name);
/* Letters, digits, '-', '_' and '.', 1 to `max` of them: a name that is safe in a path,
 * libvirt's XML and a log line. */
bool config_name_valid(const char *s, size_t max);
/* Whether one of the pool's hosts is local: the scheduler then reads its image here. */
bool config_pool_has_local_host(const struct config *c, const struct config_pool *pool);
/* Whether every host of the pool is remote (neither local nor libvirt's test driver): its
 * image is then looked for on each host through libvirt (host_image.h), never here. */
bool config_pool_remote_only(const struct config *c, const struct config_pool *pool);
int config_load(const char *path, struct config **ret_config, char **ret_errors);
/* As config_load, but on errors in a file that parsed as YAML it also returns what parsed
 * (its bad keys unset, missing ones NULL or 0) in `*ret_config`, for the checks made
 * outside config.c (files' modes, the GitHub credentials) to add theirs; the caller frees
 * it. `*ret_config` is NULL when the file could not be read or is not YAML. */
int config_parse(const char *path, struct config **ret_config, char **ret_errors);
/* Orders `errors` (FILE:LINE: KEY: message lines, as config_parse writes them) by line,
 * in place; lines of one line number keep their order. */
void config_errors_sort(char *errors);
/* The line `path` (a top-level key, or one of a mapping: "http.tls_key_file") was given
 * at, or 0 when it was not given. */
int config_line_of(const struct config *c, const char *path);
void config_free(struct config *config);

/* What a reload from `old` to `new` changes: {pools: {added, removed, changed: {NAME:
 * [keys]}}, hosts: {…}, settings: [top-level keys applied live], needs_restart: [keys that
 * keep their running value until a restart]}. */
json_t *config_diff(const struct config *old, const struct config *new);
/* Moves the running values of every key a reload cannot apply from `old` into `new` (and
 * the requested ones into `old`), so that `new` describes what runs. */
void config_keep_running(struct config *new, struct config *old);

/* Calls `fn` for every key the loader accepts, parents before their keys: `path` is where
 * it sits ("", "http", "github.runner_scopes[]", "pools[]"), `key` its name. The
 * documentation is held to this list (tests/unit/test_config.c). */
void config_each_key(void (*fn)(const char *path, const char *key, void *data), void *data);

/* Whether the config has a `github` section with credentials. */
bool config_github_enabled(const struct config *config);
/* The runner scope a pool's runners register in: the one it names, or the only one. NULL
 * when there is none (a loaded config has one for every pool while GitHub is enabled). */
const struct config_scope *config_pool_scope(const struct config *config,
                                             const struct config_pool *pool);

/* Parses "HOST:PORT" or "[V6]:PORT" without resolving names. */
int config_listen_parse(const char *listen, struct sockaddr_storage *ret_addr);

#endif
