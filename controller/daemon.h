/* The running hatcheryd: what the loop's callbacks share. */
#ifndef HATCHERY_DAEMON_H
#define HATCHERY_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "address_window.h"
#include "admin.h"
#include "config.h"
#include "log.h"
#include "front.h"
#include "github.h"
#include "image_cache.h"
#include "provider.h"
#include "runner_releases.h"
#include "scheduler.h"
#include "secret.h"
#include "store.h"
#include "webhook.h"

#include "hatchery/version.h"

/* Webhook answer latency buckets, in seconds (from the request's last byte to its answer). */
#define WEBHOOK_LATENCY_BUCKETS 10
#define REJECTION_ADDRESSES     256 /* addresses whose refused deliveries are tracked */

enum delivery_result {
    DELIVERY_STORED,
    DELIVERY_DUPLICATE,
    DELIVERY_PING,
    DELIVERY_IGNORED,
    DELIVERY_UNAUTHORIZED,
    DELIVERY_REJECTED,
    DELIVERY_THROTTLED, /* 429: its address sent too many bad signatures; not hashed */
    DELIVERY_ERROR,
    DELIVERY_RESULT_MAX,
};

extern const char *const delivery_result_names[DELIVERY_RESULT_MAX];
extern const double webhook_latency_bounds[WEBHOOK_LATENCY_BUCKETS];

struct daemon {
    uv_loop_t *loop;
    struct config *config;
    struct secret *webhook_secret;
    struct store *store;
    struct github_client *github;            /* NULL without a `github` section */
    struct runner_releases *runner_releases; /* GitHub's runner releases; NULL without github */
    struct provider *provider;
    struct image_cache *images; /* each pool's image on this machine, as last seen */
    struct scheduler *scheduler;
    struct scheduler *scheduler_closed; /* freed after the loop ends */
    struct scalesets *scalesets;        /* the scale-set pools' listeners; NULL without any */
    struct github_scope *scopes;        /* from config.github.runner_scopes */
    size_t n_scopes;
    struct lease *lease; /* with a PostgreSQL store: who leads (lease.h); NULL with SQLite */
    char instance[128];  /* this process among those sharing the store: host/pid */
    bool leading;        /* lead() has run: the hosts, scheduler and the rest are this one's */
    struct front *front; /* the HTTP front's process: the listeners */
    bool front_attached; /* its socketpair is on the loop */
    struct admin_server admin;
    uv_signal_t sigterm, sigint, sighup;
    struct config **retired_configs; /* replaced by reloads; runners may still point in */
    size_t n_retired;
    uv_timer_t watchdog_timer;
    uv_timer_t prune_timer;
    uv_timer_t stop_timer; /* a stop that waits on a silent host ends at DAEMON_STOP_TIMEOUT_MS */
    bool stop_abandoned;
    int lock_fd;
    int64_t started_at_ms;
    bool stopping;
    int exit_code; /* 1 when the front died */
    struct {
        uint64_t by_result[DELIVERY_RESULT_MAX];
        uint64_t unmatched_deliveries;
        uint64_t latency_buckets[WEBHOOK_LATENCY_BUCKETS]; /* cumulative on output only */
        uint64_t latency_count;
        double latency_sum_s;
    } webhooks;
    struct log_throttle rejections_logged; /* webhook.rejected lines: anyone can cause them */
    /* Per address: one webhook.rejected line per LOG_THROTTLE_WINDOW_MS, the rest counted
     * (`count`: unlogged) and said in one line when its window has ended. */
    struct address_window rejection_windows[REJECTION_ADDRESSES];
};

/* Renders /metrics in the Prometheus text format (version 0.0.4), with what the store read
 * for it: `job_counts` (store_job_counts) and `queue` (store_jobs_queue_read), either NULL
 * when it could not. The caller frees. */
char *metrics_render(struct daemon *d, json_t *job_counts, json_t *queue, size_t *ret_len);

#endif
