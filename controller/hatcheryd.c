/* hatcheryd: the controller daemon. One libuv loop carries the HTTP listener (webhooks,
 * metrics, health), the admin socket, the store's group commits and systemd's watchdog. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "admin_commands.h"
#include "daemon.h"
#include "daemon_config.h"
#include "hatchery/cleanup.h"
#include "intake.h"
#include "libvirt/libvirt_loop.h"
#include "libvirt/provisioner.h"
#include "image_cache.h"
#include "lease.h"
#include "store_backend.h"
#include "log.h"
#include "scaleset/scaleset.h"
#include "sd_notify.h"
#include "wall_clock.h"

#define PRUNE_INTERVAL_MS (3600 * 1000)

static void daemon_stop(struct daemon *d);

static void on_front_gone(void *data, const char *why)
{
    struct daemon *d = data;
    if (d->stopping)
        return;
    log_error("daemon.front_gone",
              "reason=\"%s\" action=\"stopping: the supervisor restarts "
              "hatcheryd, which adopts the running guests\"",
              why);
    d->exit_code = 1;
    daemon_stop(d);
}

/* An image or its manifest changed on disk, or a look the scheduler waits for is back: the
 * pools' demand is counted again with it. */
static void on_images_changed(void *data)
{
    struct daemon *d = data;
    if (d->scheduler)
        scheduler_kick(d->scheduler);
}

static void on_runner_releases(void *data)
{
    struct daemon *d = data;
    daemon_check_pool_runners(d, d->config);
}

static void on_scaleset_job(void *data, const char *pool, int64_t job_key, const char *runner_name,
                            bool started)
{
    struct daemon *d = data;
    (void)pool;
    if (d->scheduler)
        scheduler_job_event(d->scheduler, job_key, started ? JOB_IN_PROGRESS : JOB_COMPLETED,
                            runner_name);
}

static void on_scaleset_demand(void *data)
{
    struct daemon *d = data;
    if (d->scheduler)
        scheduler_kick(d->scheduler);
}

/* ---- GitHub ------------------------------------------------------------------------- */

struct scope_probe {
    struct daemon *daemon;
    const struct github_scope *scope;
};

static void on_scope_probed(void *data, int err, const char *message, json_t *runners)
{
    struct scope_probe *p = data;
    const struct github_scope *s = p->scope;
    if (err < 0)
        log_error("github.scope_failed", "%s=%s error=\"%s\"", github_scope_kind(s),
                  github_scope_name(s), message ? message : strerror(-err));
    else
        log_info("github.scope_ok", "%s=%s runners=%zu", github_scope_kind(s), github_scope_name(s),
                 json_array_size(runners));
    free(p);
}

/* At start-up, list each scope's runners once: it proves the credentials and the
 * permissions, and says so in the log, before any job depends on them. */
static void github_probe(struct daemon *d)
{
    for (size_t i = 0; i < d->n_scopes; i++) {
        struct scope_probe *p = calloc(1, sizeof(*p));
        if (!p)
            return;
        p->daemon = d;
        p->scope = &d->scopes[i];
        if (github_runners_list(d->github, p->scope, NULL, on_scope_probed, p) < 0)
            free(p);
    }
}

/* ---- lifecycle ---------------------------------------------------------------------- */

static void on_watchdog(uv_timer_t *timer)
{
    (void)timer;
    sd_notify_send("WATCHDOG=1");
}

/* Console logs are kept after teardown for log_retention_s. A directory scan of small
 * files, hourly: cheap enough for the loop. */
static void prune_logs(struct daemon *d)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/logs", d->config->state_dir);
    DIR *dh = opendir(dir);
    if (!dh)
        return;
    time_t cutoff = time(NULL) - (time_t)d->config->log_retention_s;
    struct dirent *e;
    int removed = 0;
    while ((e = readdir(dh))) {
        struct stat st;
        if (e->d_name[0] == '.' || fstatat(dirfd(dh), e->d_name, &st, 0) < 0 ||
            !S_ISREG(st.st_mode) || st.st_mtime >= cutoff)
            continue;
        if (unlinkat(dirfd(dh), e->d_name, 0) == 0)
            removed++;
    }
    closedir(dh);
    if (removed)
        log_info("logs.pruned", "count=%d", removed);
}

/* Ended runners and completed jobs are history: kept history_retention_s for `hatchery
 * runners --all` and `jobs`, then dropped so the tables do not grow without end. */
static void prune_history(struct daemon *d)
{
    int64_t cutoff_ms = wall_clock_ms() - d->config->history_retention_s * 1000;
    store_runners_prune(d->store, cutoff_ms);
    store_jobs_prune(d->store, cutoff_ms);
}

static void on_prune(uv_timer_t *timer)
{
    struct daemon *d = timer->data;
    store_deliveries_prune(d->store, d->config->delivery_retention_s);
    prune_logs(d);
    prune_history(d);
}

/* The stop has waited DAEMON_STOP_TIMEOUT_MS: what holds it is a libvirt call to a host that
 * does not answer (the provisioner named it as host.calls_pending), which nothing can
 * interrupt. Everything of ours is written (the store commits on threads of its own), so
 * the process ends here rather than at the supervisor's SIGKILL; the guests stay domains
 * for the next start's reconciler, as on any stop. */
static void on_stop_timeout(uv_timer_t *timer)
{
    struct daemon *d = timer->data;
    log_warn("daemon.stop_abandoned",
             "waited_ms=%d reason=\"libvirt calls to a host that does not answer are still "
             "running\" action=\"exiting without them; the next start adopts what runs\"",
             DAEMON_STOP_TIMEOUT_MS);
    d->stop_abandoned = true;
    uv_stop(d->loop);
}

static void daemon_stop_rest(void *data);

/* A stop gives each scale set's session back first (the next holder then need not wait
 * out its linger), then closes the rest. */
static void daemon_stop(struct daemon *d)
{
    d->stopping = true;
    uv_timer_start(&d->stop_timer, on_stop_timeout, DAEMON_STOP_TIMEOUT_MS, 0);
    sd_notify_send("STOPPING=1");
    front_close(d->front);
    admin_server_stop(&d->admin);
    struct scalesets *sets = d->scalesets;
    d->scalesets = NULL; /* it frees itself once its last request has answered */
    scalesets_stop(sets, daemon_stop_rest, d);
}

static void daemon_stop_rest(void *data)
{
    struct daemon *d = data;
    runner_releases_free(d->runner_releases);
    d->runner_releases = NULL;
    github_client_free(d->github);
    d->github = NULL;
    scheduler_free(d->scheduler);
    d->scheduler_closed = d->scheduler;
    d->scheduler = NULL;
    provider_free(d->provider);
    d->provider = NULL;
    image_cache_free(d->images);
    d->images = NULL;
    libvirt_loop_close();
    unlink(d->config->admin_socket);
    uv_close((uv_handle_t *)&d->watchdog_timer, NULL);
    uv_close((uv_handle_t *)&d->prune_timer, NULL);
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
    uv_close((uv_handle_t *)&d->sighup, NULL);
}

static void on_signal(uv_signal_t *sig, int signum)
{
    struct daemon *d = sig->data;
    if (d->stopping)
        return;
    log_info("daemon.stopping", "signal=%d", signum);
    daemon_stop(d);
}

/* A directory made here gets `mode` whatever the umask (the unit's is 0027); one that
 * exists is left as it is. */
static int make_dir(const char *path, mode_t mode)
{
    if (mkdir(path, mode) == 0)
        return chmod(path, mode) < 0 ? -errno : 0;
    return errno == EEXIST ? 0 : -errno;
}

static int lock_state_dir(const char *dir, int *ret_fd)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/hatcheryd.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        close(fd);
        return e == EWOULDBLOCK ? -EBUSY : -e;
    }
    *ret_fd = fd;
    return 0;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: hatcheryd --config FILE [--allow-root REASON]\n"
                 "       hatcheryd --check-config FILE\n"
                 "       hatcheryd --config FILE --import-sqlite DIR\n"
                 "       hatcheryd --version\n"
                 "\n"
                 "  -c, --config FILE        run with this configuration\n"
                 "      --allow-root REASON  run as root anyway, for the reason given (logged "
                 "at every start); the HTTP front drops to nobody\n"
                 "  -n, --check-config FILE  check the configuration and its secret files, "
                 "then exit 0 (valid) or 1\n"
                 "      --import-sqlite DIR  copy the SQLite store in DIR (a state_dir; no "
                 "hatcheryd may run on it) into the empty PostgreSQL database the config "
                 "names, then exit\n"
                 "  -V, --version            print the version\n");
}

static void on_sighup(uv_signal_t *sig, int signum)
{
    (void)signum;
    struct daemon *d = sig->data;
    if (!d->stopping)
        json_decref(daemon_reload(d, "SIGHUP"));
}

struct daemon_args {
    const char *config_path;
    const char *root_reason;   /* --allow-root's */
    const char *import_sqlite; /* --import-sqlite's state directory */
    bool check_only;
};

/* The command line into `a`: -1 to go on, else the exit code (--version, --help, a usage
 * error, root refused). */
static int parse_args(int argc, char **argv, struct daemon_args *a)
{
    static const struct option options[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", required_argument, NULL, 'n'},
        {"allow-root", required_argument, NULL, 'R'},
        {"import-sqlite", required_argument, NULL, 'I'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "c:n:Vh", options, NULL)) != -1) {
        switch (opt) {
        case 'c':
            a->config_path = optarg;
            break;
        case 'n':
            a->config_path = optarg;
            a->check_only = true;
            break;
        case 'R':
            a->root_reason = optarg;
            break;
        case 'I':
            a->import_sqlite = optarg;
            break;
        case 'V':
            printf("hatcheryd %s\n", HATCHERY_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!a->config_path || optind != argc || (a->import_sqlite && a->check_only)) {
        usage(stderr);
        return 2;
    }
    /* Root is refused: the daemon needs only its state_dir and libvirt's socket (the
     * package's unit runs it as hatchery). An operator who must run it as root says why. */
    if (a->root_reason && strspn(a->root_reason, " \t") == strlen(a->root_reason)) {
        fprintf(stderr, "hatcheryd: --allow-root needs a reason, in words\n");
        return 2;
    }
    if (!a->check_only && !a->import_sqlite && geteuid() == 0 && !a->root_reason) {
        fprintf(stderr, "hatcheryd: refusing to run as root: run it as a user of its own (the "
                        "package's unit runs it as hatchery, in the libvirt group), or say why "
                        "it must be root with --allow-root REASON\n");
        return 1;
    }
    return -1;
}

/* --import-sqlite: the SQLite store in `dir` copied into the config's PostgreSQL one. */
static int import_sqlite(const struct config *c, const char *dir)
{
    if (!c->database.postgresql) {
        fprintf(stderr, "hatcheryd: --import-sqlite: the config names no database.postgresql "
                        "to import into\n");
        return 1;
    }
    int lock_fd = -1, r = lock_state_dir(dir, &lock_fd);
    if (r < 0) {
        fprintf(stderr, "hatcheryd: --import-sqlite: %s: %s\n", dir,
                r == -EBUSY ? "a hatcheryd is running on it: stop it first" : strerror(-r));
        return 1;
    }
    char path[PATH_MAX], err[PATH_MAX + 512];
    snprintf(path, sizeof(path), "%s/hatchery.db", dir);
    struct store *source = NULL, *target = NULL;
    json_t *counts = NULL;
    if (access(path, R_OK) < 0) {
        snprintf(err, sizeof(err), "%s: %s", path, strerror(errno));
        r = -ENOENT;
    } else if ((r = store_open(NULL, dir, &source, err, sizeof(err))) == 0 &&
               (r = daemon_store_open(NULL, c, false, &target, err, sizeof(err))) == 0) {
        r = store_import(target, source, &counts, err, sizeof(err));
    }
    store_close(target);
    store_close(source);
    close(lock_fd);
    if (r < 0) {
        fprintf(stderr, "hatcheryd: --import-sqlite: %s\n", err);
        json_decref(counts);
        return 1;
    }
    char *text = json_dumps(counts, JSON_COMPACT | JSON_SORT_KEYS);
    printf("imported %s into PostgreSQL: %s\n", path, text ? text : "?");
    log_info("store.imported", "from=%s counts=%s", path, text ? text : "?");
    free(text);
    json_decref(counts);
    return 0;
}

/* What start() got done before it failed, undone as far as a process about to exit needs:
 * the front stopped, the store closed, secrets wiped. */
static int start_failed(struct daemon *d)
{
    if (d->front_attached) {
        front_close(d->front);
        uv_run(d->loop, UV_RUN_NOWAIT);
    }
    front_free(d->front);
    store_close(d->store);
    secret_free(d->webhook_secret);
    config_free(d->config);
    if (d->lock_fd >= 0)
        close(d->lock_fd);
    return 1;
}

/* The daemon's parts, in the order each needs the one before: the state directory and
 * its lock, the HTTP front (forked while this process holds nothing it must not inherit:
 * no store, no libvirt connection, no App key; front.h), the loop, the store, the
 * provider and its hosts, the GitHub client, the admin socket. 0, or 1 after logging why. */
static int start(struct daemon *d)
{
    char err[512];
    /* Others may pass through, not list: QEMU, which runs as libvirt-qemu on a stock host,
     * opens the overlays under the default storage_dir and the images the runbook keeps
     * in state_dir/images. What is private in it has its own mode (the store is 0640). */
    int r = make_dir(d->config->state_dir, 0711);
    if (r < 0) {
        log_error("daemon.state_dir_failed", "path=%s error=\"%s\"", d->config->state_dir,
                  strerror(-r));
        return 1;
    }
    r = lock_state_dir(d->config->state_dir, &d->lock_fd);
    if (r < 0) {
        log_error("daemon.state_dir_locked", "path=%s error=\"%s\"", d->config->state_dir,
                  r == -EBUSY ? "another hatcheryd uses this state directory" : strerror(-r));
        return 1;
    }
    /* The front is forked without the webhook secret in the core's memory (load() checked
     * the file, and wiped what it read): a front taken over has nothing to sign with. */
    secret_free(d->webhook_secret);
    d->webhook_secret = NULL;
    r = front_spawn(d->config, &d->front, err, sizeof(err));
    if (r < 0) {
        log_error("daemon.listen_failed", "listen=%s metrics_listen=%s error=\"%s\"",
                  d->config->listen,
                  d->config->metrics_listen ? d->config->metrics_listen : "listen", err);
        return 1;
    }
    r = d->config->webhook_secret_file
            ? secret_load_file(d->config->webhook_secret_file, &d->webhook_secret, err, sizeof(err))
            : 0;
    if (r < 0) {
        log_error("daemon.secret_failed", "key=webhook_secret_file error=\"%s\"", err);
        return 1;
    }
    d->loop = uv_default_loop();
    /* libvirt's events run on our loop; this must precede every libvirt connection. */
    libvirt_loop_register(d->loop);
    r = daemon_store_open(d->loop, d->config, false, &d->store, err, sizeof(err));
    if (r < 0) {
        log_error("daemon.store_failed", "backend=%s error=\"%s\"",
                  d->config->database.postgresql ? "postgresql" : "sqlite", err);
        return 1;
    }
    log_info("daemon.store_opened", "backend=%s",
             d->config->database.postgresql ? "postgresql" : "sqlite");
    r = image_cache_new(d->loop, on_images_changed, d, &d->images);
    if (r == 0)
        r = image_cache_follow(d->images, d->config);
    if (r < 0) {
        log_error("daemon.image_cache_failed", "error=\"%s\"", strerror(-r));
        return 1;
    }
    struct provisioner_options popts = {.controller_id = d->config->controller_id,
                                        .state_dir = d->config->state_dir,
                                        .adopt_grace_ms = d->config->adopt_grace_s * 1000};
    struct provisioner *libvirt = NULL;
    r = provisioner_new(d->loop, &popts, &libvirt);
    d->provider = provisioner_provider(libvirt);
    if (r < 0) {
        log_error("daemon.provisioner_failed", "error=\"%s\"", strerror(-r));
        return 1;
    }
    if (config_github_enabled(d->config)) {
        d->scopes = daemon_scopes_from_config(d->config, &d->n_scopes);
        r = d->scopes
                ? daemon_github_open(d->loop, d->config, d->scopes, &d->github, err, sizeof(err))
                : -ENOMEM;
        if (r < 0) {
            log_error("daemon.github_failed", "error=\"%s\"", err);
            return 1;
        }
    }
    static const struct front_callbacks front_callbacks = {
        .on_request = intake_request,
        .on_rejected = intake_rejected,
        .on_gone = on_front_gone,
    };
    r = front_attach(d->front, d->loop, &front_callbacks, d);
    if (r < 0) {
        log_error("daemon.front_failed", "error=\"%s\"", uv_strerror(r));
        return 1;
    }
    d->front_attached = true;
    char *socket_dir = strdup(d->config->admin_socket);
    char *slash = socket_dir ? strrchr(socket_dir, '/') : NULL;
    if (slash && slash != socket_dir) {
        *slash = 0;
        make_dir(socket_dir, 0750);
    }
    free(socket_dir);
    r = admin_server_start(&d->admin, d->loop, d->config->admin_socket, admin_commands_answer, d,
                           err, sizeof(err));
    if (r < 0) {
        log_error("daemon.admin_failed", "error=\"%s\"", err);
        return 1;
    }
    return 0;
}

/* Signals (stop, reload), the prune and watchdog timers. */
static void start_timers(struct daemon *d)
{
    uv_signal_init(d->loop, &d->sigterm);
    uv_signal_init(d->loop, &d->sigint);
    d->sigterm.data = d->sigint.data = d;
    uv_signal_start(&d->sigterm, on_signal, SIGTERM);
    uv_signal_start(&d->sigint, on_signal, SIGINT);
    uv_signal_init(d->loop, &d->sighup);
    d->sighup.data = d;
    uv_signal_start(&d->sighup, on_sighup, SIGHUP);
    uv_timer_init(d->loop, &d->watchdog_timer);
    uv_timer_init(d->loop, &d->prune_timer);
    uv_timer_init(d->loop, &d->stop_timer);
    d->stop_timer.data = d;
    uv_unref((uv_handle_t *)&d->stop_timer); /* it never keeps a finished stop waiting */
    d->prune_timer.data = d;                 /* started by lead() */
    uint64_t watchdog_usec = sd_watchdog_usec();
    if (watchdog_usec) {
        uint64_t every_ms = watchdog_usec / 2000 ? watchdog_usec / 2000 : 1;
        uv_timer_start(&d->watchdog_timer, on_watchdog, every_ms, every_ms);
    }
}

static void log_ready(const struct daemon *d, const char *root_reason)
{
    if (geteuid() == 0)
        log_warn("daemon.running_as_root", "reason=\"%s\" front_user=nobody", root_reason);
    log_info("daemon.ready",
             "version=%s controller=%s listen=%s metrics_listen=%s tls=%s front_pid=%d "
             "front=%s admin=%s state=%s pools=%zu hosts=%zu github=%s",
             HATCHERY_VERSION, d->config->controller_id, d->config->listen,
             d->config->metrics_listen ? d->config->metrics_listen : "listen",
             d->config->http.tls_cert_file ? "on" : "off", (int)front_pid(d->front),
             front_sandboxed(d->front) ? "sandboxed" : "unconfined", d->config->admin_socket,
             d->config->state_dir, d->config->n_pools, d->config->n_hosts,
             d->github ? github_auth_mode_names[d->config->github.app_id > 0 ? GITHUB_AUTH_APP
                                                                             : GITHUB_AUTH_TOKEN]
                       : "off");
}

/* What the leader alone runs, once it leads (at once without a lease): the hosts, the
 * scheduler and its reconciler, GitHub's runner releases and the scale sets' listeners,
 * the prunes. 0, or -1 after logging why. */
static int lead(struct daemon *d)
{
    int r = 0;
    d->leading = true;
    for (size_t i = 0; r == 0 && i < d->config->n_hosts; i++)
        r = provider_host_add(d->provider, &d->config->hosts[i]);
    if (r < 0) {
        log_error("daemon.provisioner_failed", "error=\"%s\"", strerror(-r));
        return -1;
    }
    uv_timer_start(&d->prune_timer, on_prune, 0, PRUNE_INTERVAL_MS);
    daemon_check_pool_images(d, d->config);
    if (d->github) {
        r = runner_releases_new(d->loop, d->github, on_runner_releases, d, &d->runner_releases);
        if (r < 0) {
            log_error("daemon.github_failed", "error=\"%s\"", strerror(-r));
            return -1;
        }
    }
    daemon_check_pool_runners(d, d->config);
    if (d->github)
        github_probe(d);
    struct runner_deps deps = {
        .loop = d->loop,
        .store = d->store,
        .config = &d->config,
        .github = &d->github,
        .provider = &d->provider,
        .images = d->images,
        .scopes = d->scopes,
        .n_scopes = d->n_scopes,
        .scalesets = &d->scalesets,
        .shared_store = d->lease != NULL,
    };
    r = scheduler_new(&deps, &d->scheduler);
    if (r < 0)
        log_error("daemon.scheduler_failed", "error=\"%s\"", strerror(-r));
    if (d->github) {
        struct scalesets_deps sdeps = {
            .loop = d->loop,
            .github = d->github,
            .store = d->store,
            .config = d->config,
            .scopes = d->scopes,
            .n_scopes = d->n_scopes,
            .owner = d->config->controller_id,
            .events = {on_scaleset_job, on_scaleset_demand, d},
        };
        r = scalesets_new(&sdeps, &d->scalesets);
        if (r < 0)
            log_error("daemon.scalesets_failed", "error=\"%s\"", strerror(-r));
    }
    return 0;
}

/* The lease is ours: the store takes the leader's writes at its epoch, then the rest. */
static void on_leading(void *data, int64_t epoch)
{
    struct daemon *d = data;
    if (d->stopping)
        return;
    if (store_fence_set(d->store, d->config->controller_id, epoch) < 0 || lead(d) < 0) {
        log_error("daemon.lead_failed", "epoch=%lld action=\"stopping\"", (long long)epoch);
        d->exit_code = 1;
        daemon_stop(d);
    }
}

/* With a PostgreSQL store, other instances may share it: this one takes webhooks and
 * answers the CLI from the store at once, and leads only once the lease is its own. */
static int follow(struct daemon *d)
{
    char err[512], host[64] = "";
    struct store_conn *conn = NULL;
    int r = store_fence_set(d->store, d->config->controller_id, 0);
    if (r == 0)
        r = daemon_database_connect(d->config, &conn, err, sizeof(err));
    else
        snprintf(err, sizeof(err), "out of memory");
    if (r < 0) {
        log_error("daemon.lease_failed", "error=\"%s\"", err);
        return -1;
    }
    gethostname(host, sizeof(host) - 1);
    snprintf(d->instance, sizeof(d->instance), "%s/%d", host, (int)getpid());
    const struct lease_options o = {
        .controller_id = d->config->controller_id,
        .instance = d->instance,
        .lease_ms = (d->config->database.lease_s > 0 ? d->config->database.lease_s : 10) * 1000,
    };
    const struct lease_events events = {on_leading, d};
    r = lease_start(d->loop, conn, &o, &events, &d->lease);
    if (r < 0) {
        conn->backend->close(conn);
        log_error("daemon.lease_failed", "error=\"%s\"", strerror(-r));
        return -1;
    }
    log_info("daemon.following", "instance=%s lease_ms=%lld", d->instance, (long long)o.lease_ms);
    return 0;
}

int main(int argc, char **argv)
{
    secret_wipe_json_allocations(); /* before any JSON: GitHub's answers carry secrets */
    struct daemon_args args = {0};
    int exit_code = parse_args(argc, argv, &args);
    if (exit_code >= 0)
        return exit_code;

    struct daemon d = {.lock_fd = -1};
    auto_free char *load_errors = NULL;
    /* Running, the App key is first read after the HTTP front is forked (github_open in
     * start() fails the start the same way), so that not even a freed copy of it is in the
     * front's memory; --check-config reads it here. */
    if (daemon_config_load(args.config_path, args.check_only, &d.config, &d.webhook_secret,
                           &load_errors) < 0) {
        fputs(load_errors ? load_errors : "cannot load the config\n", stderr);
        return 1;
    }
    if (args.import_sqlite) {
        int code = import_sqlite(d.config, args.import_sqlite);
        secret_free(d.webhook_secret);
        config_free(d.config);
        return code;
    }
    if (args.check_only) {
        printf("%s: OK (%zu hosts, %zu pools)\n", args.config_path, d.config->n_hosts,
               d.config->n_pools);
        secret_free(d.webhook_secret);
        config_free(d.config);
        return 0;
    }
    /* No core file may hold a secret (the webhook secret, the App key, tokens, JIT
     * configs): no core size, and not dumpable, which a piped core_pattern also obeys. */
    struct rlimit no_core = {0, 0};
    if (setrlimit(RLIMIT_CORE, &no_core) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
        fprintf(stderr, "hatcheryd: cannot disable core dumps: %s\n", strerror(errno));
        return start_failed(&d);
    }
    enum log_level level = LOG_INFO;
    log_level_parse(d.config->log_level, &level);
    log_level_set(level);
    signal(SIGPIPE, SIG_IGN);
    /* Seed jansson's hash once, before workers parse JSON in parallel. */
    json_object_seed(0);
    d.started_at_ms = wall_clock_ms();
    if (start(&d) != 0)
        return start_failed(&d);
    start_timers(&d);

    /* Without a lease this process leads from the start, and is ready once it does. */
    if (!d.config->database.postgresql && lead(&d) < 0)
        return start_failed(&d);
    log_ready(&d, args.root_reason);
    sd_notify_send("READY=1");
    if (d.config->database.postgresql && follow(&d) < 0)
        return start_failed(&d);

    if (!front_sandboxed(d.front))
        log_warn("daemon.front_unconfined",
                 "reason=\"this kernel (or emulator) has no seccomp filter\" front_pid=%d",
                 (int)front_pid(d.front));
    uv_run(d.loop, UV_RUN_DEFAULT);
    if (d.stop_abandoned) {
        /* A thread is still inside libvirt with the provider's memory: nothing is freed
         * under it. The store's last commits are all that must be finished. */
        store_close(d.store);
        log_info("daemon.stopped", "controller=%s", d.config->controller_id);
        _exit(d.exit_code);
    }
    /* Nothing acts any more: the lease is given up for a follower to take at once. */
    lease_release(d.lease);
    uv_close((uv_handle_t *)&d.stop_timer, NULL);
    uv_run(d.loop, UV_RUN_NOWAIT);

    store_close(d.store);
    front_free(d.front);
    uv_loop_close(d.loop);
    secret_free(d.webhook_secret);
    free(d.scopes);
    free(d.scheduler_closed);
    log_info("daemon.stopped", "controller=%s", d.config->controller_id);
    config_free(d.config);
    for (size_t i = 0; i < d.n_retired; i++)
        config_free(d.retired_configs[i]);
    free(d.retired_configs);
    close(d.lock_fd);
    return d.exit_code;
}
