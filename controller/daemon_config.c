/* The config of a running hatcheryd: loaded with its secret files, reloaded, and what
 * its pools' images say; see daemon_config.h. */
#include "daemon_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "image_manifest.h"
#include "pool_image.h"
#include "store_backend.h"
#include "textbuf.h"

/* What the operator should know about each VM pool's image at start and reload: no
 * manifest (the pool gets no runner until there is one, or the image is on a remote host),
 * or a runner GitHub no longer registers. */
void daemon_check_pool_images(struct daemon *d, const struct config *c)
{
    for (size_t i = 0; i < c->n_pools; i++) {
        const struct config_pool *p = &c->pools[i];
        /* A pool of remote hosts only: its image is looked for there (host_image.h). */
        const struct image_cache_entry *e =
            p->backend == BACKEND_VM ? image_cache_get(d->images, p->image) : NULL;
        if (!e)
            continue;
        if (e->manifest_rc < 0) {
            log_warn("image.manifest_unreadable", "pool=%s reason=\"%s\"", p->name, e->err);
            continue;
        }
        const struct image_manifest *m = &e->manifest;
        log_info("image.manifest", "pool=%s arch=%s kernel=%s runner=%s agent=%s built=%s", p->name,
                 m->arch, m->kernel_version, m->runner_version, m->agent_version, m->built_at);
        if (image_manifest_runner_below_floor(m) == 1)
            log_warn("image.runner_below_floor",
                     "pool=%s runner=%s floor=%s reason=\"GitHub refuses to register a runner "
                     "older than %s: rebuild the image with a newer runner\"",
                     p->name, m->runner_version, RUNNER_VERSION_FLOOR, RUNNER_VERSION_FLOOR);
    }
}

/* Warns of each VM pool whose image's runner GitHub stops taking within
 * RUNNER_EXPIRY_WARN_DAYS (or already has): at start, at a reload, and after each fetch of
 * GitHub's runner releases (runner_releases.h), so at most every few hours. */
void daemon_check_pool_runners(struct daemon *d, const struct config *c)
{
    time_t now = time(NULL);
    for (size_t i = 0; i < c->n_pools; i++) {
        const struct config_pool *p = &c->pools[i];
        struct image_manifest m;
        struct runner_judgement j;
        if (!pool_image_find_manifest(d, p, &m) || !pool_image_runner_refused(d, &m, &j))
            continue;
        double days = difftime(j.refused_at, now) / 86400.0;
        char day[32];
        struct tm tm;
        gmtime_r(&j.refused_at, &tm);
        strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%SZ", &tm);
        const char *rule = j.floor_first ? "the runner floor" : "30 days after a newer release";
        if (days < 0)
            log_error("image.runner_refused",
                      "pool=%s runner=%s refused_at=%s rule=\"%s\" action=\"rebuild the image "
                      "with a current runner: GitHub gives its runners no job\"",
                      p->name, m.runner_version, day, rule);
        else if (days <= RUNNER_EXPIRY_WARN_DAYS)
            log_warn("image.runner_expiring",
                     "pool=%s runner=%s refused_at=%s days=%.1f rule=\"%s\" action=\"rebuild "
                     "the image with a current runner\"",
                     p->name, m.runner_version, day, days, rule);
    }
}

struct github_scope *daemon_scopes_from_config(const struct config *c, size_t *ret_n)
{
    struct github_scope *scopes = calloc(c->github.n_runner_scopes + 1, sizeof(*scopes));
    for (size_t i = 0; scopes && i < c->github.n_runner_scopes; i++)
        scopes[i] = (struct github_scope){
            c->github.runner_scopes[i].repo, c->github.runner_scopes[i].org,
            c->github.runner_scopes[i].enterprise, c->github.runner_scopes[i].runner_group_id};
    *ret_n = scopes ? c->github.n_runner_scopes : 0;
    return scopes;
}

int daemon_github_open(uv_loop_t *loop, const struct config *c, const struct github_scope *scopes,
                       struct github_client **ret, char *err, size_t err_size)
{
    const struct config_github *g = &c->github;
    struct github_options o = {
        .api_url = g->api_url,
        .auth = g->app_id > 0 ? GITHUB_AUTH_APP : GITHUB_AUTH_TOKEN,
        .app_id = g->app_id,
        .app_key_file = g->app_private_key_file,
        .installation_id = g->installation_id,
        .token_file = g->token_file,
        .ca_file = g->ca_file,
        .user_agent = "hatchery/" HATCHERY_VERSION,
        .timeout_ms = (long)g->timeout_ms,
        .max_retries = (int)g->max_retries,
        .max_response_bytes = (size_t)g->max_response_bytes,
        .lookup_scope = &scopes[0],
    };
    return github_client_new(loop, &o, ret, err, err_size);
}

/* The password of database.postgresql, read from its file now (NULL without one: libpq's
 * own sources); 0, or -EINVAL with the reason in `err`. Freed with secret_reveal_free. */
static int database_password(const struct config_database *db, char **ret, char *err,
                             size_t err_size)
{
    *ret = NULL;
    if (!db->password_file)
        return 0;
    struct secret *secret = NULL;
    char why[256];
    if (secret_load_file(db->password_file, &secret, why, sizeof(why)) < 0 ||
        secret_reveal(secret, "", ret) < 0) {
        snprintf(err, err_size, "database.password_file: %s", secret ? "out of memory" : why);
        secret_free(secret);
        return -EINVAL;
    }
    secret_free(secret);
    return 0;
}

int daemon_database_connect(const struct config *c, struct store_conn **ret, char *err,
                            size_t err_size)
{
    char *password = NULL;
    int r = database_password(&c->database, &password, err, err_size);
    if (r == 0)
        r = store_postgresql_open(c->database.postgresql, password, ret, err, err_size);
    if (password)
        secret_reveal_free(password);
    return r;
}

bool daemon_leads(const struct daemon *d)
{
    return d->leading;
}

int daemon_store_open(uv_loop_t *loop, const struct config *c, bool reach_only,
                      struct store **ret_store, char *err, size_t err_size)
{
    const struct config_database *db = &c->database;
    if (!db->postgresql)
        return reach_only ? 0 : store_open(loop, c->state_dir, ret_store, err, err_size);
    if (reach_only) {
        struct store_conn *conn = NULL;
        int r = daemon_database_connect(c, &conn, err, err_size);
        if (r == 0)
            conn->backend->close(conn);
        return r;
    }
    char *password = NULL;
    int r = database_password(db, &password, err, err_size);
    if (r == 0) {
        const struct store_location where = {.postgresql = db->postgresql, .password = password};
        r = store_open_at(loop, &where, ret_store, err, err_size);
    }
    if (password)
        secret_reveal_free(password);
    return r;
}

/* Loads and checks the config and its secret files. On failure every problem is in
 * `*ret_errors` (FILE:LINE: KEY: message lines; the caller frees). `check_github` opens
 * the App key or token too (at start; a reload keeps the running GitHub client). */
int daemon_config_load(const char *path, bool check_github, struct config **ret_config,
                       struct secret **ret_secret, char **ret_errors)
{
    char *parse_errors = NULL;
    struct config *c = NULL;
    *ret_config = NULL;
    *ret_secret = NULL;
    *ret_errors = NULL;
    int r = config_parse(path, &c, &parse_errors);
    if (!c) {
        *ret_errors = parse_errors; /* unreadable, or not YAML: nothing more to check */
        return -EINVAL;
    }
    /* The checks config.c cannot make, each at its key's line, whatever else is wrong:
     * every error of the file in one pass. */
    struct textbuf errors;
    textbuf_init(&errors, 1024 * 1024);
    if (parse_errors)
        textbuf_printf(&errors, "%s", parse_errors);
    free(parse_errors);
    char err[512];
    if (c->webhook_secret_file &&
        secret_load_file(c->webhook_secret_file, ret_secret, err, sizeof(err)) < 0)
        textbuf_printf(&errors, "%s:%d: webhook_secret_file: %s\n", path,
                       config_line_of(c, "webhook_secret_file"), err);
    /* The TLS key as the start checks it (its mode, that it is a regular file), so that
     * --check-config does not pass what the start refuses. */
    const char *tls_key = c->http.tls_key_file;
    int key_fd = tls_key ? secret_file_open(tls_key, SECRET_MAX_BYTES, err, sizeof(err)) : 0;
    if (key_fd < 0)
        textbuf_printf(&errors, "%s:%d: http.tls_key_file: %s\n", path,
                       config_line_of(c, "http.tls_key_file"), err);
    else if (tls_key)
        close(key_fd);
    bool github_parsed = c->github.api_url &&
                         (c->github.app_private_key_file || c->github.token_file) &&
                         !strstr(errors.data ? errors.data : "", ": github");
    if (check_github && config_github_enabled(c) && github_parsed) {
        /* Open the App key or token now, so a bad file fails the check, not the first job. */
        uv_loop_t loop;
        uv_loop_init(&loop);
        size_t n = 0;
        struct github_scope *scopes = daemon_scopes_from_config(c, &n);
        struct github_client *client = NULL;
        int g = scopes ? daemon_github_open(&loop, c, scopes, &client, err, sizeof(err)) : -ENOMEM;
        if (g == 0)
            github_client_free(client);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        free(scopes);
        if (g < 0) {
            const char *key =
                c->github.token_file ? "github.token_file" : "github.app_private_key_file";
            textbuf_printf(&errors, "%s:%d: %s: %s\n", path, config_line_of(c, key), key, err);
        }
    }
    /* The database, reached (not changed) as the start will reach it. */
    if (check_github && c->database.postgresql &&
        !strstr(errors.data ? errors.data : "", ": database") &&
        daemon_store_open(NULL, c, true, NULL, err, sizeof(err)) < 0)
        textbuf_printf(&errors, "%s:%d: database: %s\n", path, config_line_of(c, "database"), err);
    if (r == 0 && !errors.len) {
        textbuf_free(&errors);
        *ret_config = c;
        return 0;
    }
    *ret_errors = errors.error ? strdup("config: out of memory\n") : textbuf_steal(&errors, NULL);
    textbuf_free(&errors);
    if (*ret_errors)
        config_errors_sort(*ret_errors);
    secret_free(*ret_secret);
    *ret_secret = NULL;
    config_free(c);
    return -EINVAL;
}

/* ---- reload (SIGHUP, `hatchery reload`) ---------------------------------------------- */

/* Re-reads the config. A config that does not load is refused whole and the running one
 * stays; otherwise pools and hosts are added, removed and changed, live settings apply,
 * and keys that need a restart keep their running value and are named. The old config
 * stays in memory until exit: runners made under it keep pointing at their pool. */
json_t *daemon_reload(struct daemon *d, const char *how)
{
    struct config *next = NULL;
    struct secret *secret = NULL;
    char *errors = NULL;
    if (daemon_config_load(d->config->path, false, &next, &secret, &errors) < 0) {
        /* The errors name the file and line; they carry no secret. */
        char first[512];
        snprintf(first, sizeof(first), "%s", errors ? errors : "?");
        first[strcspn(first, "\n")] = 0;
        size_t n_errors = 0;
        for (const char *p = errors; p && *p; p++)
            n_errors += *p == '\n';
        log_warn("config.reload_refused", "via=%s errors=%zu first=\"%s\"", how, n_errors, first);
        json_t *answer = json_pack("{s:b, s:s}", "ok", 0, "error", errors ? errors : "?");
        free(errors);
        return answer;
    }
    secret_free(secret); /* the running webhook secret stays (webhook_secret_file: restart) */
    struct config **retired = realloc(d->retired_configs, (d->n_retired + 1) * sizeof(*retired));
    if (!retired) {
        config_free(next);
        return json_pack("{s:b, s:s}", "ok", 0, "error", "out of memory");
    }
    d->retired_configs = retired;
    /* The scheduler's per-pool state is made for the new config first: if that fails,
     * nothing has changed yet. */
    if (d->scheduler && scheduler_config_replace(d->scheduler, next) < 0) {
        config_free(next);
        return json_pack("{s:b, s:s}", "ok", 0, "error", "out of memory");
    }
    json_t *diff = config_diff(d->config, next);
    config_keep_running(next, d->config);
    d->retired_configs[d->n_retired++] = d->config;
    d->config = next;
    /* A follower connects to no host (lease.h): it takes the hosts of the config it has
     * when it comes to lead. */
    bool leads = daemon_leads(d);
    for (size_t i = 0; leads && i < next->n_hosts; i++)
        provider_host_update(d->provider, &next->hosts[i]);
    if (image_cache_follow(d->images, next) < 0)
        log_warn("image.cache_failed", "error=\"out of memory\" action=\"images of new pools "
                                       "are not followed\"");
    enum log_level level;
    if (log_level_parse(next->log_level, &level) == 0)
        log_level_set(level);
    if (leads) {
        daemon_check_pool_images(d, next);
        daemon_check_pool_runners(d, next);
    }
    char *text = json_dumps(diff, JSON_COMPACT);
    log_info("config.reloaded", "via=%s pools=%zu hosts=%zu changes=%s", how, next->n_pools,
             next->n_hosts, text ? text : "?");
    free(text);
    return json_pack("{s:b, s:o}", "ok", 1, "changed", diff);
}
