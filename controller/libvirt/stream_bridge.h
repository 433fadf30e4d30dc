/* A libvirt stream (virDomainOpenChannel, virDomainOpenConsole) joined to a file
 * descriptor, on hatcheryd's loop. It is how guests on a remote host are reached: their
 * agent channel and console live on that host, and only libvirt's connection leads there.
 *
 * Two shapes:
 *  - a channel: the stream is joined to one end of a socketpair, both ways; the other end
 *    is handed out, to be opened as a uv_pipe_t and read like a local agent socket;
 *  - a log: the stream's bytes are appended to a file, up to a size limit.
 *
 * Everything but the blocking release of the stream runs on the loop: libvirt's stream
 * events arrive there through libvirt_loop. The release (an abort, a call that waits for
 * the host's answer) runs on the host's own queue (host_queue.h), so a host that goes
 * silent holds its own threads, not the loop or the pool the store commits on. A guest that floods
 * is held back: the stream is not read while more than STREAM_BRIDGE_MAX_PENDING bytes wait to be
 * written. */
#ifndef HATCHERY_STREAM_BRIDGE_H
#define HATCHERY_STREAM_BRIDGE_H

#include <libvirt/libvirt.h>
#include <stdint.h>
#include <uv.h>

#include "host_queue.h"

#define STREAM_BRIDGE_MAX_PENDING (64 * 1024)

struct stream_bridge;

/* Takes over `stream` (opened with VIR_STREAM_NONBLOCK). On success *ret_fd is the
 * caller's end of the socketpair: closing it ends the bridge's stream. */
int stream_bridge_channel(uv_loop_t *loop, struct host_queue *queue, virStreamPtr stream,
                          int *ret_fd, struct stream_bridge **ret_bridge);
/* Takes over `stream`; appends what it carries to `path` (created 0640), up to
 * `max_bytes`, then drops the rest. */
int stream_bridge_log(uv_loop_t *loop, struct host_queue *queue, virStreamPtr stream,
                      const char *path, int64_t max_bytes, struct stream_bridge **ret_bridge);
/* Ends the bridge: the stream is aborted and released off the loop. Idempotent through
 * the caller forgetting the pointer; a bridge whose stream ended releases itself but
 * stays valid for this call. */
void stream_bridge_close(struct stream_bridge *bridge);
/* A stream no bridge took: aborted and freed on `queue`'s threads (NULL: nothing). */
void stream_release(struct host_queue *queue, virStreamPtr stream);

#endif
