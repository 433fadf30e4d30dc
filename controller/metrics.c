/* /metrics in the Prometheus text exposition format, checked by `promtool check metrics`. */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "daemon_config.h"
#include "lease.h"
#include "guest_isolation.h"
#include "store_backend.h"
#include "job.h"
#include "image_cache.h"
#include "pool_image.h"
#include "runner_releases.h"
#include "scaleset/scaleset.h"
#include "textbuf.h"
#include "wall_clock.h"

#define METRICS_MAX_BYTES (4 * 1024 * 1024)

const double webhook_latency_bounds[WEBHOOK_LATENCY_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
};

static void header(struct textbuf *b, const char *name, const char *type, const char *help)
{
    textbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(struct textbuf *b, const char *name, const char *help, uint64_t value)
{
    header(b, name, "counter", help);
    textbuf_printf(b, "%s %llu\n", name, (unsigned long long)value);
}

static void counter_real(struct textbuf *b, const char *name, const char *help, double value)
{
    header(b, name, "counter", help);
    textbuf_printf(b, "%s %.17g\n", name, value);
}

static void gauge(struct textbuf *b, const char *name, const char *help, double value)
{
    header(b, name, "gauge", help);
    textbuf_printf(b, "%s %.17g\n", name, value);
}

/* One histogram, a series per pool. */
static void pool_histogram(struct textbuf *b, const struct scheduler_stats *st, const char *name,
                           const char *help, enum pool_histogram_kind kind)
{
    header(b, name, "histogram", help);
    int n_bounds;
    const double *bounds = pool_histogram_bounds(kind, &n_bounds);
    for (size_t p = 0; p < st->n_pools; p++) {
        const char *pool = st->pools[p].pool;
        const struct seconds_histogram *h = &st->pools[p].of[kind];
        uint64_t cumulative = 0;
        for (int i = 0; i < n_bounds; i++) {
            cumulative += h->buckets[i];
            textbuf_printf(b, "%s_bucket{pool=\"%s\",le=\"%g\"} %llu\n", name, pool, bounds[i],
                           (unsigned long long)cumulative);
        }
        textbuf_printf(b, "%s_bucket{pool=\"%s\",le=\"+Inf\"} %llu\n", name, pool,
                       (unsigned long long)h->count);
        textbuf_printf(b, "%s_sum{pool=\"%s\"} %.6f\n%s_count{pool=\"%s\"} %llu\n", name, pool,
                       h->sum, name, pool, (unsigned long long)h->count);
    }
}

/* A counter per pool and reason (runner_failure_names), every reason of every pool present
 * (0 until it happens): runners failed, or the jobs they lost. */
static void pool_failures(struct textbuf *b, const struct scheduler_stats *st, const char *name,
                          const char *help, bool jobs_lost)
{
    header(b, name, "counter", help);
    for (size_t p = 0; p < st->n_pools; p++) {
        const uint64_t *n = jobs_lost ? st->pools[p].jobs_lost : st->pools[p].failed;
        for (int why = 0; why < FAILURE_MAX; why++)
            textbuf_printf(b, "%s{pool=\"%s\",reason=\"%s\"} %llu\n", name, st->pools[p].pool,
                           runner_failure_names[why], (unsigned long long)n[why]);
    }
}

/* Runners created, failed and jobs lost, per pool. */
static void pool_counters(struct textbuf *b, const struct scheduler_stats *st)
{
    header(b, "hatchery_runners_created_total", "counter", "Runners created, per pool.");
    for (size_t p = 0; p < st->n_pools; p++)
        textbuf_printf(b, "hatchery_runners_created_total{pool=\"%s\"} %llu\n", st->pools[p].pool,
                       (unsigned long long)st->pools[p].created);
    pool_failures(b, st, "hatchery_runners_failed_total",
                  "Runners that failed, per pool and reason.", false);
    pool_failures(b, st, "hatchery_jobs_lost_total",
                  "Jobs whose runner failed while busy (GitHub fails such a job), per pool and "
                  "the runner's reason.",
                  true);
}

/* The store's job counts, laid out so that every configured pool and every status has a
 * series, zeros included (a query over a series that comes and goes sees gaps, not 0). A
 * pool no longer configured keeps its non-zero rows, kept aside in `others` as they come. */
struct job_counts {
    const struct config *config;
    int64_t (*by_pool)[JOB_STATUS_MAX]; /* [n_pools] */
    int64_t unmatched[JOB_STATUS_MAX];
    struct textbuf others;
};

static void job_count_row(void *data, const char *pool, const char *status, int64_t count)
{
    struct job_counts *jc = data;
    enum job_status st;
    if (job_status_parse(status, &st) < 0)
        return;
    if (!pool) {
        jc->unmatched[st] = count;
        return;
    }
    for (size_t i = 0; i < jc->config->n_pools; i++)
        if (strcmp(jc->config->pools[i].name, pool) == 0) {
            if (jc->by_pool)
                jc->by_pool[i][st] = count;
            return;
        }
    textbuf_printf(&jc->others, "hatchery_jobs{pool=\"%s\",status=\"%s\"} %lld\n", pool, status,
                   (long long)count);
}

/* `counts`: store_job_counts's rows (NULL: not read, every count 0). */
static void job_metrics(struct textbuf *b, const struct daemon *d, json_t *counts)
{
    struct job_counts jc = {.config = d->config};
    textbuf_init(&jc.others, METRICS_MAX_BYTES);
    jc.by_pool = d->config->n_pools ? calloc(d->config->n_pools, sizeof(*jc.by_pool)) : NULL;
    size_t k;
    json_t *row;
    json_array_foreach(counts, k, row)
    {
        const char *status = json_string_value(json_object_get(row, "status"));
        if (status)
            job_count_row(&jc, json_string_value(json_object_get(row, "pool")), status,
                          json_integer_value(json_object_get(row, "n")));
    }
    header(b, "hatchery_jobs", "gauge", "Jobs in the store, by pool and status.");
    for (size_t i = 0; jc.by_pool && i < d->config->n_pools; i++)
        for (int st = 0; st < JOB_STATUS_MAX; st++)
            textbuf_printf(b, "hatchery_jobs{pool=\"%s\",status=\"%s\"} %lld\n",
                           d->config->pools[i].name, job_status_names[st],
                           (long long)jc.by_pool[i][st]);
    if (jc.others.error && !b->error)
        b->error = jc.others.error; /* as if written to `b`: the scrape fails whole */
    else if (jc.others.len)
        textbuf_append(b, jc.others.data, jc.others.len);
    header(b, "hatchery_jobs_unmatched", "gauge",
           "Jobs in the store that no pool matches, by status.");
    for (int st = 0; st < JOB_STATUS_MAX; st++)
        textbuf_printf(b, "hatchery_jobs_unmatched{status=\"%s\"} %lld\n", job_status_names[st],
                       (long long)jc.unmatched[st]);
    textbuf_free(&jc.others);
    free(jc.by_pool);
}

/* Prometheus's process_* family, from /proc/self (Linux only, as hatcheryd is). */
static void process_metrics(struct textbuf *b, const struct daemon *d)
{
    FILE *f = fopen("/proc/self/stat", "re");
    char line[1024];
    unsigned long utime = 0, stime = 0, vsize = 0;
    long rss = 0;
    bool have_stat = false;
    if (f && fgets(line, sizeof(line), f)) {
        /* After the command's closing parenthesis (the command may hold spaces and
         * parentheses itself): fields 3 on, of which utime is the 14th, stime the 15th,
         * vsize the 23rd and rss the 24th. */
        const char *rest = strrchr(line, ')');
        have_stat = rest && sscanf(rest + 1,
                                   " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d "
                                   "%*d %*d %*d %*d %*u %lu %ld",
                                   &utime, &stime, &vsize, &rss) == 4;
    }
    if (f)
        fclose(f);
    if (have_stat) {
        double ticks = (double)sysconf(_SC_CLK_TCK);
        counter_real(b, "process_cpu_seconds_total", "User and system CPU time spent, in seconds.",
                     (double)(utime + stime) / ticks);
        gauge(b, "process_resident_memory_bytes", "Resident memory size in bytes.",
              (double)rss * (double)sysconf(_SC_PAGESIZE));
        gauge(b, "process_virtual_memory_bytes", "Virtual memory size in bytes.", (double)vsize);
    }
    DIR *fds = opendir("/proc/self/fd");
    if (fds) {
        long open_fds = 0;
        struct dirent *e;
        while ((e = readdir(fds)))
            open_fds += e->d_name[0] != '.';
        closedir(fds);
        /* Less the one opendir held while it listed. */
        gauge(b, "process_open_fds", "Open file descriptors.", (double)(open_fds - 1));
    }
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
        gauge(b, "process_max_fds", "The limit of open file descriptors.", (double)lim.rlim_cur);
    gauge(b, "process_start_time_seconds", "When the process started, in Unix time.",
          (double)d->started_at_ms / 1000.0);
}

/* Warm templates (pools with start: template), by host and pool: how many in each state,
 * their files' bytes, and the runners restored from them or booted cold instead. */
#define TEMPLATES_PER_HOST 64
static void template_metrics(struct textbuf *b, struct daemon *d)
{
    size_t n_hosts = d->config->n_hosts;
    struct template_status *ts = calloc(n_hosts * TEMPLATES_PER_HOST, sizeof(*ts));
    size_t *n = calloc(n_hosts, sizeof(*n));
    for (size_t i = 0; ts && n && i < n_hosts; i++)
        provider_templates(d->provider, d->config->hosts[i].name, &ts[i * TEMPLATES_PER_HOST],
                           TEMPLATES_PER_HOST, &n[i]);
    static const char *const states[] = {"unknown", "checking", "building",
                                         "ready",   "broken",   "disabled"};
    static const struct {
        const char *name, *type, *help;
    } families[] = {
        {"hatchery_templates", "gauge", "Warm templates, by host, pool and state."},
        {"hatchery_template_file_bytes", "gauge", "Bytes of the ready templates' save files."},
        {"hatchery_template_restores_total", "counter", "Runners restored from a template."},
        {"hatchery_template_fallbacks_total", "counter",
         "Runners that booted cold because their template did not restore."},
    };
    for (size_t f = 0; ts && n && f < sizeof(families) / sizeof(*families); f++) {
        header(b, families[f].name, families[f].type, families[f].help);
        for (size_t i = 0; i < n_hosts; i++) {
            const char *host = d->config->hosts[i].name;
            const struct template_status *h = &ts[i * TEMPLATES_PER_HOST];
            for (size_t p = 0; p < d->config->n_pools; p++) {
                const char *pool = d->config->pools[p].name;
                /* The first family by state; the others one line per host and pool. */
                for (size_t k = 0; k < (f == 0 ? sizeof(states) / sizeof(*states) : 1); k++) {
                    long long v = 0;
                    size_t seen = 0;
                    for (size_t t = 0; t < n[i]; t++) {
                        if (strcmp(h[t].pool, pool) != 0 ||
                            (f == 0 && strcmp(h[t].state, states[k]) != 0))
                            continue;
                        seen++;
                        v += f == 0   ? 1
                             : f == 1 ? (h[t].file_bytes > 0 ? h[t].file_bytes : 0)
                             : f == 2 ? h[t].restores
                                      : h[t].fallbacks;
                    }
                    if (!seen)
                        continue;
                    if (f == 0)
                        textbuf_printf(b, "%s{host=\"%s\",pool=\"%s\",state=\"%s\"} %lld\n",
                                       families[f].name, host, pool, states[k], v);
                    else
                        textbuf_printf(b, "%s{host=\"%s\",pool=\"%s\"} %lld\n", families[f].name,
                                       host, pool, v);
                }
            }
        }
    }
    free(ts);
    free(n);
}

/* The HTTP front: its sandbox, connections, requests and answers. */
static void http_metrics(struct textbuf *b, struct daemon *d)
{
    const struct http_stats *h = front_http_stats(d->front);
    gauge(b, "hatchery_http_front_sandboxed",
          "1 when the HTTP front runs under its seccomp filter, 0 when unconfined.",
          front_sandboxed(d->front) ? 1 : 0);
    counter(b, "hatchery_http_front_calls_refused_total",
            "Calls the core refused (503) because the HTTP front had more open than its "
            "listeners allow: a front that lies (a bug, or taken over).",
            front_calls_refused(d->front));
    gauge(b, "hatchery_http_connections_open", "HTTP connections open now.",
          (double)h->connections_open);
    counter(b, "hatchery_http_connections_accepted_total", "HTTP connections accepted.",
            h->connections_accepted);
    counter(b, "hatchery_http_connections_rejected_total",
            "HTTP connections refused (503) because http.max_connections were open, or "
            "http.max_connections_per_address from one address.",
            h->connections_rejected);
    counter(b, "hatchery_http_backpressure_stalls_total",
            "Connections no longer read because their peer left answers unread.",
            h->backpressure_stalls);
    counter(b, "hatchery_http_requests_total", "Complete HTTP requests read.", h->requests);
    counter(b, "hatchery_http_timeouts_total",
            "Requests closed because they were not received within http.read_timeout_ms.",
            h->timeouts);
    counter(b, "hatchery_http_tls_handshake_failures_total", "Failed TLS handshakes.",
            h->tls_handshake_failures);
    header(b, "hatchery_http_responses_total", "counter", "HTTP responses sent, by status code.");
    for (int code = 100; code < 600; code++)
        if (h->responses_by_code[code])
            textbuf_printf(b, "hatchery_http_responses_total{code=\"%d\"} %llu\n", code,
                           (unsigned long long)h->responses_by_code[code]);
}

/* Webhook deliveries by result, and their latency. */
static void webhook_metrics(struct textbuf *b, struct daemon *d)
{
    header(b, "hatchery_webhook_deliveries_total", "counter", "Webhook deliveries, by result.");
    for (int r = 0; r < DELIVERY_RESULT_MAX; r++)
        textbuf_printf(b, "hatchery_webhook_deliveries_total{result=\"%s\"} %llu\n",
                       delivery_result_names[r], (unsigned long long)d->webhooks.by_result[r]);
    counter(b, "hatchery_webhook_unmatched_deliveries_total",
            "workflow_job deliveries stored whose labels no pool matches (one job's queued, "
            "in_progress and completed count three; hatchery_jobs_unmatched counts jobs).",
            d->webhooks.unmatched_deliveries);
    header(b, "hatchery_webhook_latency_seconds", "histogram",
           "Time from a webhook request's last byte to its answer.");
    uint64_t cumulative = 0;
    for (int i = 0; i < WEBHOOK_LATENCY_BUCKETS; i++) {
        cumulative += d->webhooks.latency_buckets[i];
        textbuf_printf(b, "hatchery_webhook_latency_seconds_bucket{le=\"%g\"} %llu\n",
                       webhook_latency_bounds[i], (unsigned long long)cumulative);
    }
    textbuf_printf(b, "hatchery_webhook_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
                   (unsigned long long)d->webhooks.latency_count);
    textbuf_printf(b, "hatchery_webhook_latency_seconds_sum %.9f\n", d->webhooks.latency_sum_s);
    textbuf_printf(b, "hatchery_webhook_latency_seconds_count %llu\n",
                   (unsigned long long)d->webhooks.latency_count);
}

/* The store's group commits. */
static void store_metrics(struct textbuf *b, struct daemon *d)
{
    struct store_stats ss;
    store_stats_get(d->store, &ss);
    header(b, "hatchery_store_backend_info", "gauge",
           "The store's database: sqlite (in state_dir) or postgresql (database:).");
    textbuf_printf(b, "hatchery_store_backend_info{backend=\"%s\"} 1\n",
                   store_dialect_names[store_dialect(d->store)]);
    counter(b, "hatchery_store_commits_total", "Group commits to the store.", ss.commits);
    header(b, "hatchery_store_commit_seconds_total", "counter",
           "Time spent applying and committing batches (fsync included).");
    textbuf_printf(b, "hatchery_store_commit_seconds_total %.6f\n", (double)ss.commit_ns / 1e9);
    counter(b, "hatchery_store_writes_total", "Writes committed to the store.",
            ss.writes_committed);
    counter(b, "hatchery_store_write_errors_total", "Writes the store failed.", ss.commit_errors);
    counter(b, "hatchery_store_writes_rejected_total",
            "Writes refused because too many were waiting for a commit.", ss.writes_rejected);
    gauge(b, "hatchery_store_writes_pending", "Writes waiting for the next commit.",
          (double)ss.writes_pending);
    counter(b, "hatchery_store_reads_total", "Reads the store answered (off the loop).", ss.reads);
    header(b, "hatchery_store_read_seconds_total", "counter",
           "Time the store's worker spent reading.");
    textbuf_printf(b, "hatchery_store_read_seconds_total %.6f\n", (double)ss.read_ns / 1e9);
    counter(b, "hatchery_store_read_errors_total", "Reads the store answered with no rows.",
            ss.read_errors);
    counter(b, "hatchery_store_reads_rejected_total",
            "Reads refused because too many were waiting.", ss.reads_rejected);
    counter(b, "hatchery_store_writes_fenced_total",
            "The leader's writes refused: this instance did not lead, or a newer leader "
            "existed (PostgreSQL).",
            ss.writes_fenced);
}

/* The leader's lease (a PostgreSQL store shared by several instances). With SQLite there is
 * none and one controller, which leads: the same series, so that an alert on them needs no
 * second form. */
static void lease_metrics(struct textbuf *b, struct daemon *d)
{
    struct lease_stats st = {.leading = true};
    if (d->lease)
        lease_stats_get(d->lease, &st);
    gauge(b, "hatchery_lease_leader", "1 when this instance holds the leader's lease.",
          st.leading ? 1 : 0);
    gauge(b, "hatchery_lease_epoch", "The epoch this instance leads at (0: it follows).",
          (double)st.epoch);
    counter(b, "hatchery_lease_renewals_total",
            "Lease attempts the database answered (renewals, and a follower's tries).",
            st.renewals);
    counter(b, "hatchery_lease_renewal_failures_total",
            "Lease attempts that failed (the database unreachable or erring).",
            st.renewal_failures);
    counter(b, "hatchery_lease_slow_renewals_total",
            "Lease attempts answered (or failed) after more than lease_s/5: each one eats "
            "into the time a leader has before it must stop.",
            st.slow_renewals);
    counter(b, "hatchery_lease_takeovers_total", "Times this instance took the lease.",
            st.takeovers);
    gauge(b, "hatchery_lease_last_renewal_timestamp_seconds",
          "When the database last answered this instance's lease attempt (0: never).",
          (double)st.last_renewal_ms / 1000.0);
}

/* The GitHub client: requests, retries, errors and the rate limit. */
static void github_metrics(struct textbuf *b, struct daemon *d)
{
    if (d->github) {
        struct github_stats gs;
        github_client_stats(d->github, &gs);
        counter(b, "hatchery_github_requests_total", "Requests sent to GitHub (retries included).",
                gs.requests);
        counter(b, "hatchery_github_retries_total",
                "GitHub requests retried after a 5xx, timeout or connection error.", gs.retries);
        counter(b, "hatchery_github_errors_total", "GitHub operations that failed.", gs.failures);
        counter(b, "hatchery_github_auth_failures_total",
                "GitHub operations refused for the credentials (401) or the App's permissions "
                "(403, not a rate limit).",
                gs.auth_failures);
        counter(b, "hatchery_github_rate_limited_total",
                "Answers that made the client wait for a rate limit.", gs.rate_limited);
        gauge(b, "hatchery_github_requests_sending",
              "Requests handed to curl now (at most 16 at once).", gs.sending);
        gauge(b, "hatchery_github_requests_queued",
              "Requests waiting their turn behind the ones being sent.", gs.queued);
        if (gs.ratelimit_remaining >= 0)
            gauge(b, "hatchery_github_ratelimit_remaining",
                  "Requests left in GitHub's rate-limit window (X-RateLimit-Remaining).",
                  (double)gs.ratelimit_remaining);
        if (gs.ratelimit_reset > 0) {
            double left = (double)gs.ratelimit_reset - (double)time(NULL);
            gauge(b, "hatchery_github_ratelimit_reset_seconds",
                  "Seconds until GitHub's rate-limit window resets.", left > 0 ? left : 0);
            gauge(b, "hatchery_github_ratelimit_reset_timestamp_seconds",
                  "When GitHub's rate-limit window resets, in Unix time (X-RateLimit-Reset).",
                  (double)gs.ratelimit_reset);
        }
    }
}

/* One labelled series per scale set, from its view (scalesets_json). */
static void scaleset_series(struct textbuf *b, json_t *sets, const char *name, const char *type,
                            const char *help, const char *key, const char *sub)
{
    header(b, name, type, help);
    size_t i;
    json_t *s;
    json_array_foreach(sets, i, s)
    {
        json_t *v = json_object_get(s, key);
        if (sub)
            v = json_object_get(v, sub);
        textbuf_printf(b, "%s{scale_set=\"%s\",pool=\"%s\"} %lld\n", name,
                       json_string_value(json_object_get(s, "name")),
                       json_string_value(json_object_get(s, "pool")),
                       (long long)json_integer_value(v));
    }
}

/* Runner scale sets: the session, the queue and the statistics, per scale set. */
static void scaleset_metrics(struct textbuf *b, struct daemon *d)
{
    /* The families are there without a scale set too (empty): what the alert rules query
     * exists on every hatcheryd. */
    json_t *sets = scalesets_json(d->scalesets);
    if (!sets)
        return;
    scaleset_series(b, sets, "hatchery_scaleset_polls_total", "counter",
                    "Long polls of the scale set's message queue answered.", "polls", NULL);
    static const char *const types[] = {"JobAvailable", "JobAssigned", "JobStarted",
                                        "JobCompleted"};
    header(b, "hatchery_scaleset_messages_total", "counter",
           "Job messages read from the scale set's queue, by type.");
    size_t i;
    json_t *s;
    json_array_foreach(sets, i, s)
    {
        for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++)
            textbuf_printf(b,
                           "hatchery_scaleset_messages_total{scale_set=\"%s\",pool=\"%s\","
                           "type=\"%s\"} %lld\n",
                           json_string_value(json_object_get(s, "name")),
                           json_string_value(json_object_get(s, "pool")), types[k],
                           (long long)json_integer_value(
                               json_object_get(json_object_get(s, "messages_by_type"), types[k])));
    }
    scaleset_series(b, sets, "hatchery_scaleset_session_conflicts_total", "counter",
                    "Sessions refused because another holder had one (409).", "conflicts", NULL);
    scaleset_series(b, sets, "hatchery_scaleset_token_refreshes_total", "counter",
                    "Admin tokens got from the Actions service (its scope's, shared).",
                    "token_refreshes", NULL);
    scaleset_series(b, sets, "hatchery_scaleset_without_session_seconds", "gauge",
                    "How long the scale set has had no session (0: it has one).", "no_session_s",
                    NULL);
    scaleset_series(b, sets, "hatchery_scaleset_unacknowledged_seconds", "gauge",
                    "How long the message being handled has waited for its deletion from the "
                    "queue (0: none waits).",
                    "unacknowledged_s", NULL);
    scaleset_series(b, sets, "hatchery_scaleset_assigned_jobs", "gauge",
                    "Jobs the service assigned to the scale set, running ones included, as its "
                    "statistics last said (-1: not said yet).",
                    "assigned_jobs", NULL);
    scaleset_series(b, sets, "hatchery_scaleset_last_message_id", "gauge",
                    "The last message committed from the queue.", "last_message_id", NULL);
    json_decref(sets);
}

/* Hosts: up, usage, capacity and guest isolation; then their templates. */
static void host_metrics(struct textbuf *b, struct daemon *d)
{
    /* A follower connects to no host, and would say each is down: the leader reports. */
    if (d->provider && d->config->n_hosts > 0 && daemon_leads(d)) {
        struct host_status *st = calloc(d->config->n_hosts, sizeof(*st));
        for (size_t i = 0; st && i < d->config->n_hosts; i++)
            provider_host_status(d->provider, d->config->hosts[i].name, &st[i]);
        static const struct {
            const char *name, *type, *help;
        } families[] = {
            {"hatchery_host_up", "gauge", "1 when the host's libvirt connection is up."},
            {"hatchery_host_guests", "gauge", "Guests on each host."},
            {"hatchery_host_vcpus_used", "gauge", "vCPUs handed out on each host."},
            {"hatchery_host_reconnects_total", "counter",
             "Times a host's libvirt connection came back after a drop."},
            {"hatchery_host_vcpus", "gauge", "vCPUs each host may hand out (hosts[].vcpus)."},
            {"hatchery_host_memory_used_bytes", "gauge", "Guest memory handed out on each host."},
            {"hatchery_host_memory_bytes", "gauge",
             "Guest memory each host may hand out (hosts[].memory_mib)."},
            {"hatchery_host_max_guests", "gauge",
             "Guests each host may hold (hosts[].max_guests)."},
            {"hatchery_guest_transitions_refused_total", "counter",
             "Guest state changes the guest lifecycle table refused, by host (a bug if not 0)."},
            {"hatchery_template_transitions_refused_total", "counter",
             "Warm template state changes the template lifecycle table refused, by host (a bug "
             "if not 0)."},
        };
        for (size_t f = 0; st && f < sizeof(families) / sizeof(families[0]); f++) {
            header(b, families[f].name, families[f].type, families[f].help);
            for (size_t i = 0; i < d->config->n_hosts; i++) {
                const struct config_host *host = &d->config->hosts[i];
                long long v = f == 0   ? st[i].up
                              : f == 1 ? st[i].used.guests
                              : f == 2 ? st[i].used.vcpus
                              : f == 3 ? st[i].reconnects
                              : f == 4 ? host->vcpus
                              : f == 5 ? st[i].used.memory_mib * 1048576
                              : f == 6 ? host->memory_mib * 1048576
                              : f == 7 ? host->max_guests
                              : f == 8 ? st[i].guest_moves_refused
                                       : st[i].template_moves_refused;
                textbuf_printf(b, "%s{host=\"%s\"} %lld\n", families[f].name,
                               d->config->hosts[i].name, v);
            }
        }
        header(b, "hatchery_host_guest_isolation", "gauge",
               "1 for the host's guest isolation state (in_place, unchecked, not_needed, or "
               "missing: then it gets no networked guest).");
        for (size_t i = 0; i < d->config->n_hosts; i++) {
            char why[512];
            enum guest_isolation_state iso = guest_isolation_host(
                d->config, &d->config->hosts[i], st ? &st[i] : NULL, why, sizeof(why));
            for (int k = 0; k < GUEST_ISOLATION_STATE_MAX; k++)
                textbuf_printf(b, "hatchery_host_guest_isolation{host=\"%s\",state=\"%s\"} %d\n",
                               d->config->hosts[i].name, guest_isolation_state_names[k],
                               k == (int)iso);
        }
        free(st);
        template_metrics(b, d);
    }
}

/* Runners by pool and state, pools' back-off, the lifecycle histograms and counters, and
 * the reconciler. */
static void scheduler_metrics(struct textbuf *b, struct daemon *d)
{
    if (d->scheduler) {
        header(b, "hatchery_runners", "gauge", "Live runners, by pool and state.");
        json_t **pools = calloc(d->config->n_pools + 1, sizeof(json_t *));
        for (size_t p = 0; pools && p < d->config->n_pools; p++) {
            pools[p] = scheduler_pool_json(d->scheduler, d->config->pools[p].name);
            const char *state;
            json_t *n;
            json_object_foreach(json_object_get(pools[p], "by_state"), state, n)
                textbuf_printf(b, "hatchery_runners{pool=\"%s\",state=\"%s\"} %lld\n",
                               d->config->pools[p].name, state, (long long)json_integer_value(n));
        }
        header(b, "hatchery_pool_backoff_seconds", "gauge",
               "How long each pool makes no new runner, after runners failed before starting "
               "(0: not backing off).");
        for (size_t p = 0; pools && p < d->config->n_pools; p++)
            textbuf_printf(b, "hatchery_pool_backoff_seconds{pool=\"%s\"} %.3f\n",
                           d->config->pools[p].name,
                           json_real_value(json_object_get(pools[p], "backoff_s")));
        header(b, "hatchery_pool_failures_in_a_row", "gauge",
               "Runners of each pool that failed in a row before their runner started.");
        for (size_t p = 0; pools && p < d->config->n_pools; p++)
            textbuf_printf(
                b, "hatchery_pool_failures_in_a_row{pool=\"%s\"} %lld\n", d->config->pools[p].name,
                (long long)json_integer_value(json_object_get(pools[p], "failures_in_a_row")));
        for (size_t p = 0; pools && p < d->config->n_pools; p++)
            json_decref(pools[p]);
        free(pools);
        const struct scheduler_stats *sch = scheduler_stats_get(d->scheduler);
        pool_histogram(b, sch, "hatchery_runner_online_seconds",
                       "From a runner's creation to its runner process online (registered, "
                       "waiting), per pool.",
                       HISTOGRAM_ONLINE);
        pool_histogram(b, sch, "hatchery_job_runner_online_seconds",
                       "From a job's queued webhook to a runner online for it (each online "
                       "runner counts for its pool's oldest queued job without one), per pool.",
                       HISTOGRAM_SUPPLIED);
        pool_histogram(b, sch, "hatchery_job_start_seconds",
                       "From a job's queued webhook to its in_progress webhook, per pool.",
                       HISTOGRAM_START);
        pool_histogram(b, sch, "hatchery_guest_boot_seconds",
                       "From a runner's creation to its agent's hello, per pool.", HISTOGRAM_BOOT);
        pool_counters(b, sch);
        counter(b, "hatchery_runners_surplus_retired_total",
                "Idle runners beyond demand retired after the pool's surplus_idle_s.",
                sch->surplus_retired);
        counter(b, "hatchery_runners_outdated_retired_total",
                "Idle runners retired because their pool's image was replaced since they booted "
                "(rotate_outdated, hatchery rotate).",
                sch->outdated_retired);
        counter(b, "hatchery_runners_adopted_total",
                "Runners of an earlier hatcheryd whose guests were re-attached after a restart.",
                sch->adopted);
        counter(b, "hatchery_runners_adopt_failed_total",
                "Runners of an earlier hatcheryd that could not be adopted.", sch->adopt_failed);
        gauge(b, "hatchery_runner_adopt_seconds_max",
              "The longest time from this hatcheryd's start to an adopted agent's answer.",
              sch->adopt_seconds_max);
        counter(b, "hatchery_runner_transitions_refused_total",
                "Runner state changes the lifecycle table refused (a bug if not 0).",
                sch->transitions_refused);
        counter(b, "hatchery_job_runner_mismatches_total",
                "Deliveries naming a runner that runs another job, ignored (forged with the "
                "webhook secret, or a bug).",
                sch->job_mismatches);
        header(b, "hatchery_reconcile_actions_total", "counter",
               "What the reconciler repaired, by action.");
        const struct {
            const char *action;
            uint64_t n;
        } actions[] = {
            {"domain_removed", sch->reconcile_domains_removed},
            {"github_runner_deleted", sch->reconcile_github_deleted},
            {"lost_job_found", sch->reconcile_jobs_found},
            {"record_failed", sch->reconcile_records_failed},
            {"github_lists_skipped", sch->reconcile_github_skipped},
            {"volume_removed", sch->reconcile_volumes_removed},
            {"phantom_job_retired", sch->reconcile_phantoms_retired},
            {"stuck_job_retired", sch->reconcile_stuck_retired},
            {"late_job_verified", sch->late_jobs_verified},
            {"late_job_retired", sch->late_jobs_retired},
        };
        for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
            textbuf_printf(b, "hatchery_reconcile_actions_total{action=\"%s\"} %llu\n",
                           actions[i].action, (unsigned long long)actions[i].n);
        counter(b, "hatchery_reconcile_ticks_total", "Reconciler passes.", sch->reconcile_ticks);
        gauge(b, "hatchery_reconcile_last_tick_seconds",
              "How long the last reconciler pass held the loop.", sch->reconcile_last_ms / 1000.0);
    }
}

/* Pools' limits and their oldest queued job (`queue`: store_jobs_queue_read's rows). */
static void queue_metrics(struct textbuf *b, struct daemon *d, json_t *queue_rows)
{
    header(b, "hatchery_pool_max_runners", "gauge", "Configured max_runners of each pool.");
    for (size_t i = 0; i < d->config->n_pools; i++)
        textbuf_printf(b, "hatchery_pool_max_runners{pool=\"%s\"} %lld\n", d->config->pools[i].name,
                       (long long)d->config->pools[i].max_runners);
    /* Every pool gets a value (0 with nothing queued), so an alert can compare it. */
    struct store_pool_queue *queue = calloc(d->config->n_pools + 1, sizeof(*queue));
    if (queue) /* a failed read leaves every pool at 0, as one with nothing queued */
        store_jobs_queue_by_pool(queue_rows, d->config, queue);
    header(b, "hatchery_pool_oldest_queued_job_seconds", "gauge",
           "Age of each pool's oldest queued job (0 when none is queued).");
    for (size_t i = 0; queue && i < d->config->n_pools; i++) {
        int64_t at = queue[i].oldest_ms;
        double age = at ? (double)(wall_clock_ms() - at) / 1000.0 : 0;
        textbuf_printf(b, "hatchery_pool_oldest_queued_job_seconds{pool=\"%s\"} %.3f\n",
                       d->config->pools[i].name, age > 0 ? age : 0);
    }
    free(queue);
}

/* VM pools' images: found on remote hosts, their manifests, and when GitHub stops taking
 * their runners. */
static void image_metrics(struct textbuf *b, struct daemon *d)
{
    header(b, "hatchery_host_image_ready", "gauge",
           "1 when a VM pool's image, its manifest and boot files were found on a remote host "
           "(through libvirt's storage API), 0 when not (yet).");
    for (size_t i = 0; i < d->config->n_pools; i++) {
        const struct config_pool *p = &d->config->pools[i];
        struct image_status st;
        for (size_t k = 0; p->backend == BACKEND_VM && k < d->config->n_hosts; k++) {
            const char *host = d->config->hosts[k].name;
            if (config_pool_uses_host(p, host) &&
                provider_host_image(d->provider, host, p, &st) == 0 && st.state != IMAGE_LOCAL &&
                st.state != IMAGE_UNCHECKED)
                textbuf_printf(b, "hatchery_host_image_ready{host=\"%s\",pool=\"%s\"} %d\n", host,
                               p->name, st.state == IMAGE_READY);
        }
    }
    /* Each VM pool's manifest, read once for the families below (pool_image.h). */
    struct image_manifest *manifests = calloc(d->config->n_pools + 1, sizeof(*manifests));
    bool *known = calloc(d->config->n_pools + 1, sizeof(bool));
    for (size_t i = 0; manifests && known && i < d->config->n_pools; i++)
        known[i] = pool_image_find_manifest(d, &d->config->pools[i], &manifests[i]);
    header(b, "hatchery_pool_image_info", "gauge",
           "The manifest of each VM pool's image (1 for each readable manifest).");
    for (size_t i = 0; manifests && known && i < d->config->n_pools; i++) {
        const struct image_manifest *m = &manifests[i];
        /* Manifest fields hold no quote, backslash or control character: safe as labels. */
        if (known[i])
            textbuf_printf(b,
                           "hatchery_pool_image_info{pool=\"%s\",arch=\"%s\",debian=\"%s\","
                           "kernel=\"%s\",runner=\"%s\",agent=\"%s\",sha256=\"%s\"} 1\n",
                           d->config->pools[i].name, m->arch, m->debian, m->kernel_version,
                           m->runner_version, m->agent_version, m->sha256);
    }
    header(b, "hatchery_pool_image_runner_below_floor", "gauge",
           "1 when a VM pool's image carries a runner below the oldest GitHub still registers.");
    for (size_t i = 0; manifests && known && i < d->config->n_pools; i++)
        if (known[i])
            textbuf_printf(b, "hatchery_pool_image_runner_below_floor{pool=\"%s\"} %d\n",
                           d->config->pools[i].name,
                           image_manifest_runner_below_floor(&manifests[i]) == 1);
    header(b, "hatchery_pool_image_built_timestamp_seconds", "gauge",
           "When each VM pool's image was built (its manifest's built_at, Unix time).");
    for (size_t i = 0; manifests && known && i < d->config->n_pools; i++) {
        time_t built = known[i] ? runner_version_time(manifests[i].built_at) : -1;
        if (built >= 0)
            textbuf_printf(b, "hatchery_pool_image_built_timestamp_seconds{pool=\"%s\"} %lld\n",
                           d->config->pools[i].name, (long long)built);
    }
    header(b, "hatchery_pool_image_runner_refused_timestamp_seconds", "gauge",
           "When GitHub stops giving jobs to the runner of a VM pool's image (Unix time; maybe "
           "past): the floor's enforcement, or 30 days after the first newer runner release. "
           "Absent while no rule refuses it.");
    for (size_t i = 0; manifests && known && i < d->config->n_pools; i++) {
        struct runner_judgement j;
        if (known[i] && pool_image_runner_refused(d, &manifests[i], &j))
            textbuf_printf(b,
                           "hatchery_pool_image_runner_refused_timestamp_seconds{pool=\"%s\"} "
                           "%lld\n",
                           d->config->pools[i].name, (long long)j.refused_at);
    }
    if (runner_releases_fetched_ms(d->runner_releases))
        gauge(b, "hatchery_runner_releases_fetched_timestamp_seconds",
              "When GitHub's runner releases were last fetched (Unix time).",
              (double)runner_releases_fetched_ms(d->runner_releases) / 1000.0);
    free(manifests);
    free(known);
}

char *metrics_render(struct daemon *d, json_t *job_counts, json_t *queue, size_t *ret_len)
{
    struct textbuf b;
    textbuf_init(&b, METRICS_MAX_BYTES);
    header(&b, "hatchery_build_info", "gauge", "Version of this hatcheryd.");
    textbuf_printf(&b, "hatchery_build_info{version=\"%s\"} 1\n", HATCHERY_VERSION);
    gauge(&b, "hatchery_start_time_seconds", "When this hatcheryd started, in Unix time.",
          (double)d->started_at_ms / 1000.0);
    process_metrics(&b, d);
    http_metrics(&b, d);
    webhook_metrics(&b, d);
    store_metrics(&b, d);
    lease_metrics(&b, d);
    github_metrics(&b, d);
    scaleset_metrics(&b, d);
    host_metrics(&b, d);
    scheduler_metrics(&b, d);
    queue_metrics(&b, d, queue);
    image_metrics(&b, d);
    job_metrics(&b, d, job_counts);
    if (b.error) {
        textbuf_free(&b);
        return NULL;
    }
    return textbuf_steal(&b, ret_len);
}
