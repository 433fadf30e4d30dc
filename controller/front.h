/* The HTTP front: the internet-facing listener in a process of its own, in the style of
 * OpenBSD's httpd and relayd.
 *
 * hatcheryd forks it before it reads the webhook secret or opens the store, libvirt or
 * GitHub, so the front never holds the webhook secret, the App key, a token or a JIT
 * config: the TLS key, which a TLS listener cannot do without, is the one secret it has.
 * The core checks every delivery's signature, so a front taken over cannot sign one. The
 * front binds the listeners, reads and checks every request with the HTTP server, answers
 * alone what needs nothing of the core (404, 405, and 429 for an address the core refused
 * too many bad signatures from: http.max_bad_signatures_per_address), then closes every other
 * descriptor and confines itself: no_new_privs and a seccomp allowlist with no open(), no
 * socket(), no connect() and no exec. What passes goes to the core over a socketpair, one
 * frame per request, and the core's answer comes back the same way; the core answers 202
 * only once a delivery is on disk, as before.
 *
 * Either side ending ends the other: the front exits when the core closes the socketpair,
 * and the core stops (exit 1, for systemd to restart it; guests are adopted) when the front
 * dies. The front ignores SIGTERM and SIGINT: its end is the core's to decide. */
#ifndef HATCHERY_FRONT_H
#define HATCHERY_FRONT_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "config.h"
#include "http_server.h"
#include "secret.h"

struct front;
struct front_call;

enum front_route {
    FRONT_ROUTE_WEBHOOK, /* POST /webhook with a matching signature */
    FRONT_ROUTE_HEALTHZ, /* GET or HEAD /healthz */
    FRONT_ROUTE_METRICS, /* GET or HEAD /metrics, where it is served */
    FRONT_ROUTE_MAX,
};

/* Bad signatures are counted per address in windows of this length
 * (http.max_bad_signatures_per_address), in at most FRONT_BAD_SIGNATURE_ADDRESSES addresses
 * at once (the oldest window makes room). */
#define FRONT_BAD_SIGNATURE_WINDOW_MS 10000
#define FRONT_BAD_SIGNATURE_ADDRESSES 1024

/* A webhook the front refused (a missing or wrong signature): for the core's log and counts. */
struct front_rejection {
    int status;
    const char *reason;
    const char *peer;
    double latency_s;
};

struct front_callbacks {
    /* A request for the core. It must call front_respond() exactly once, now or later; `req`
     * stays valid until then. */
    void (*on_request)(void *data, struct front_call *call, enum front_route route,
                       const struct http_request *req);
    void (*on_rejected)(void *data, const struct front_rejection *rejection);
    /* The front died or broke the protocol: the core should stop. */
    void (*on_gone)(void *data, const char *why);
};

/* Forks the front and waits until it listens (or says why it cannot: `err`, and -EADDRINUSE
 * or another negative errno). Call before opening or reading anything the front must not
 * inherit, the webhook secret included. */
int front_spawn(const struct config *config, struct front **ret, char *err, size_t err_size);
/* The core's side of a socketpair whose other end speaks the front's protocol, and of the
 * pipe that is the front's stderr (`log_fd`, or -1): what front_spawn makes around the
 * front it forks, and what a test standing in for a front taken over uses. No process to
 * wait for (front_pid() is -1). */
struct front *front_wrap(int fd, int log_fd, const struct config *config);
/* Calls refused because the front had more open than its listeners allow (a front that
 * lies): each answered 503 at once. */
uint64_t front_calls_refused(const struct front *front);
/* Starts reading the front's frames on `loop`. */
int front_attach(struct front *front, uv_loop_t *loop, const struct front_callbacks *callbacks,
                 void *data);
/* The answer to a call. The body is copied; after the front is gone it is dropped. */
void front_respond(struct front_call *call, int status, const char *content_type, const char *body,
                   size_t body_len);
const char *front_call_peer(const struct front_call *call);
/* The public listener's counts, as of the front's last metrics request. */
const struct http_stats *front_http_stats(const struct front *front);
/* Whether the front runs under its seccomp filter (false where the kernel has none, as
 * under qemu-user: it then runs unconfined, and says so in the log and /metrics). */
bool front_sandboxed(const struct front *front);
pid_t front_pid(const struct front *front);
/* Closes the socketpair: the front stops listening and exits. Calls still unanswered are
 * answered into nothing. */
void front_close(struct front *front);
/* After the loop has ended: waits for the front's exit and frees what is left. */
void front_free(struct front *front);

#endif
