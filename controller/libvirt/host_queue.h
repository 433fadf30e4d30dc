/* Each host's blocking libvirt calls, on threads of that host's own.
 *
 * A libvirt call to a host that stops answering (its libvirtd hung, its SSH silent, its
 * network dropping packets) blocks its thread until libvirt's keepalive gives up, and a
 * connection being opened blocks for good. On libuv's shared thread pool (four threads)
 * a few such calls took every thread: the store could not commit, so no webhook was
 * acknowledged, and no other host's guest was made. Here a host's calls queue on that
 * host's threads alone (at most HOST_QUEUE_MAX_THREADS, started as its queue grows, ended
 * after HOST_QUEUE_IDLE_MS without work), so a silent host holds only its own.
 *
 * The calls' `work` runs on a host thread, `done` on the loop, as with uv_queue_work;
 * `done`'s status is always 0. A pending call keeps the loop alive as a uv_work_t does. */
#ifndef HATCHERY_LIBVIRT_HOST_QUEUE_H
#define HATCHERY_LIBVIRT_HOST_QUEUE_H

#include <uv.h>

#define HOST_QUEUE_MAX_THREADS 4
#define HOST_QUEUE_IDLE_MS     30000

struct host_queue;

/* `name` (the host's) is for its threads' name and log lines. NULL on failure. */
struct host_queue *host_queue_new(uv_loop_t *loop, const char *name);
/* 0, or a negative errno (-ECANCELED once closing, -EAGAIN when no thread can be made). */
int host_queue_submit(struct host_queue *q, uv_work_t *w, uv_work_cb work, uv_after_work_cb done);
/* Calls submitted and not yet done (loop thread). */
int host_queue_pending(const struct host_queue *q);
/* From the loop: no call is taken after this. The calls already submitted still run and
 * get their `done` (the loop stays alive for them, as for any pending call); then the
 * threads end and the queue is freed after them. A call that never returns (a host that
 * never answers) keeps it, and the loop, until the process ends: hatcheryd's stop gives
 * up after DAEMON_STOP_TIMEOUT_MS. */
void host_queue_close(struct host_queue *q);

#endif
