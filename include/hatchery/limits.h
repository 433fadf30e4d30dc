/* Every limit on input Hatchery does not control, in one place (STYLE.md habit 5).
 * Config keys may lower or raise some of them within the bounds given here. */
#ifndef HATCHERY_LIMITS_H
#define HATCHERY_LIMITS_H

/* HTTP listener defaults; each is a config key under `http:`. */
#define HTTP_MAX_BODY_BYTES_DEFAULT   (1024 * 1024)
#define HTTP_MAX_BODY_BYTES_MAX       (64 * 1024 * 1024)
#define HTTP_MAX_HEADER_BYTES_DEFAULT (16 * 1024)
#define HTTP_MAX_HEADERS_DEFAULT      64
#define HTTP_MAX_HEADERS_MAX          512
#define HTTP_READ_TIMEOUT_MS_DEFAULT  10000
#define HTTP_IDLE_TIMEOUT_MS_DEFAULT  60000
#define HTTP_MAX_CONNECTIONS_DEFAULT  256
#define HTTP_MAX_CONNECTIONS_MAX      65536
/* Bytes read past a complete request while its answer is pending (pipelining). */
#define HTTP_MAX_PIPELINE_BYTES (64 * 1024)
/* Answers queued for a peer that does not read them, after which it is not read. */
#define HTTP_MAX_UNSENT_BYTES                    (256 * 1024)
#define HTTP_MAX_CONNECTIONS_PER_ADDRESS_DEFAULT 32
#define HTTP_MAX_URL_BYTES                       2048

/* Webhooks. */
/* A job's labels: a pool's CONFIG_MAX_POOL_LABELS and `self-hosted`, which every pool
 * implies (docs/RUNNING.md: "How a job gets a runner"). */
#define WEBHOOK_MAX_LABELS            33
#define WEBHOOK_MAX_LABEL_BYTES       256
#define WEBHOOK_MAX_NAME_BYTES        512
#define WEBHOOK_MAX_DELIVERY_ID_BYTES 128
/* A `queued` delivery for a job created longer ago than this is checked with GitHub
 * before a runner is made for it: GitHub sends one within seconds of the job's creation,
 * so an older one is a manual redelivery or a replay. */
#define WEBHOOK_FRESH_MS (10 * 60 * 1000)

/* Store: deliveries are kept this long for deduplication, then pruned. */
#define STORE_DELIVERY_RETENTION_S_DEFAULT (7 * 24 * 3600)
/* Requests waiting for the next group commit before new ones get 503. */
#define STORE_MAX_PENDING_WRITES 65536
/* Reads waiting for the store's reader before new ones are refused (-EAGAIN). */
#define STORE_MAX_PENDING_READS 4096

/* Admin socket. */
#define ADMIN_MAX_REQUEST_BYTES (64 * 1024)
#define ADMIN_MAX_CONNECTIONS   64
#define ADMIN_TIMEOUT_MS        5000
/* The CLI's limit on one answer from the daemon. */
#define ADMIN_MAX_RESPONSE_BYTES (64 * 1024 * 1024)
#define ADMIN_MAX_LIST_ROWS      10000

/* How long a stop waits for libvirt calls in flight before it exits without them (below
 * the unit's TimeoutStopSec=30s). */
#define DAEMON_STOP_TIMEOUT_MS 10000

/* Config. */
#define CONFIG_MAX_FILE_BYTES  (1024 * 1024)
#define CONFIG_MAX_HOSTS       256
#define CONFIG_MAX_POOLS       256
#define CONFIG_MAX_SCOPES      256
#define CONFIG_MAX_POOL_LABELS 32
#define CONFIG_MAX_NAME_BYTES  128
#define SECRET_MAX_BYTES       (64 * 1024)

/* Logging: a longer line is cut and marked. */
#define LOG_MAX_LINE_BYTES 4096

/* A remote guest's console, copied from its stream into the runner's log. */
#define CONSOLE_MAX_BYTES (64 * 1024 * 1024)

#endif
