/* A libvirt stream joined to a file descriptor; see stream_bridge.h. */
#include "stream_bridge.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <openssl/crypto.h>
#include <unistd.h>

#include "host_queue.h"
#include "lease.h"
#include "secret.h"

#define CHUNK (16 * 1024)

struct stream_bridge {
    uv_loop_t *loop;
    struct host_queue *queue; /* its host's: where the stream is released */
    virStreamPtr stream;
    bool log;       /* one way, into a file; else a channel over a socketpair */
    int fd;         /* our end of the socketpair, or the log file */
    uv_poll_t poll; /* channel: our end */
    bool polling;
    char *to_fd; /* from the stream, waiting for the socketpair */
    size_t to_fd_len;
    char *to_stream; /* from the socketpair, waiting for the stream */
    size_t to_stream_len;
    int64_t written, max_bytes;
    bool ended;  /* the stream is released, or being released */
    bool closed; /* the owner is done with us */
    int ops;     /* a handle close still to finish */
};

static void bridge_end(struct stream_bridge *b);
static void on_poll(uv_poll_t *poll, int status, int events);

static void maybe_free(struct stream_bridge *b)
{
    if (b->closed && b->ops == 0) {
        secret_wipe_free(b->to_fd, b->to_fd_len);
        secret_wipe_free(b->to_stream, b->to_stream_len);
        free(b);
    }
}

/* The bridge carries the agent channel, and so a JIT config: no copy of what passed is
 * left in memory, by a realloc, a move or a free. */
static int append(char **buf, size_t *len, const char *data, size_t n)
{
    char *grown = secret_wipe_realloc(*buf, *len, *len + n);
    if (!grown)
        return -ENOMEM;
    memcpy(grown + *len, data, n);
    *buf = grown;
    *len += n;
    return 0;
}

static void consume(char *buf, size_t *len, size_t n)
{
    memmove(buf, buf + n, *len - n);
    OPENSSL_cleanse(buf + *len - n, n);
    *len -= n;
}

/* What the stream and the socketpair should be watched for, from what waits. */
static void rearm(struct stream_bridge *b)
{
    if (b->ended)
        return;
    int ev = VIR_STREAM_EVENT_ERROR | VIR_STREAM_EVENT_HANGUP;
    if (b->to_fd_len < STREAM_BRIDGE_MAX_PENDING)
        ev |= VIR_STREAM_EVENT_READABLE;
    if (b->to_stream_len)
        ev |= VIR_STREAM_EVENT_WRITABLE;
    virStreamEventUpdateCallback(b->stream, ev);
    if (b->log)
        return;
    int pev = 0;
    if (b->to_stream_len < STREAM_BRIDGE_MAX_PENDING)
        pev |= UV_READABLE;
    if (b->to_fd_len)
        pev |= UV_WRITABLE;
    uv_poll_start(&b->poll, pev, on_poll);
}

static int flush_to_fd(struct stream_bridge *b)
{
    while (b->to_fd_len) {
        ssize_t n = write(b->fd, b->to_fd, b->to_fd_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return -EPIPE;
        consume(b->to_fd, &b->to_fd_len, (size_t)n);
    }
    return 0;
}

static int flush_to_stream(struct stream_bridge *b)
{
    while (b->to_stream_len) {
        /* A send is a libvirt call, made here on the loop, not on the host's queue: only
         * a leader whose lease still holds by its own clock makes it (lease.h). A bridge
         * of a process paused past its lease would send what it held on its resumption. */
        lease_fence_or_exit("libvirt_stream");
        int n = virStreamSend(b->stream, b->to_stream, b->to_stream_len);
        if (n == -2)
            return 0; /* would block: WRITABLE comes back */
        if (n <= 0)
            return -EPIPE;
        consume(b->to_stream, &b->to_stream_len, (size_t)n);
    }
    return 0;
}

static void deliver(struct stream_bridge *b, const char *data, size_t n)
{
    if (b->log) {
        size_t room = b->written < b->max_bytes ? (size_t)(b->max_bytes - b->written) : 0;
        size_t take = n < room ? n : room;
        if (take && write(b->fd, data, take) < 0) {
            /* a full disk: the console is lost, the guest is not */
        }
        b->written += (int64_t)n;
        return;
    }
    if (append(&b->to_fd, &b->to_fd_len, data, n) < 0 || flush_to_fd(b) < 0)
        bridge_end(b);
}

static void on_stream_event(virStreamPtr stream, int events, void *opaque)
{
    struct stream_bridge *b = opaque;
    (void)stream;
    if (b->ended)
        return;
    if (events & VIR_STREAM_EVENT_READABLE) {
        char buf[CHUNK];
        while (!b->ended && b->to_fd_len < STREAM_BRIDGE_MAX_PENDING) {
            int n = virStreamRecv(b->stream, buf, sizeof(buf));
            if (n == -2)
                break;
            if (n <= 0) { /* the guest's end closed (0) or the stream broke */
                bridge_end(b);
                return;
            }
            deliver(b, buf, (size_t)n);
        }
    }
    if (!b->ended && (events & VIR_STREAM_EVENT_WRITABLE) && flush_to_stream(b) < 0) {
        bridge_end(b);
        return;
    }
    if (!b->ended && (events & (VIR_STREAM_EVENT_ERROR | VIR_STREAM_EVENT_HANGUP)) &&
        !(events & VIR_STREAM_EVENT_READABLE)) {
        bridge_end(b);
        return;
    }
    rearm(b);
}

static void on_poll(uv_poll_t *poll, int status, int events)
{
    struct stream_bridge *b = poll->data;
    if (b->ended)
        return;
    if (status < 0) {
        bridge_end(b);
        return;
    }
    if ((events & UV_WRITABLE) && flush_to_fd(b) < 0) {
        bridge_end(b);
        return;
    }
    if (events & UV_READABLE) {
        char buf[CHUNK];
        ssize_t n = read(b->fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            bridge_end(b); /* the owner closed its end */
            return;
        }
        int r = n > 0 ? append(&b->to_stream, &b->to_stream_len, buf, (size_t)n) : 0;
        OPENSSL_cleanse(buf, sizeof(buf)); /* a JIT config passes host to guest here */
        if (r < 0 || (n > 0 && flush_to_stream(b) < 0)) {
            bridge_end(b);
            return;
        }
    }
    rearm(b);
}

/* ---- the end ----------------------------------------------------------------------------- */

/* Blocking calls to the stream's host (each waits for its answer, as long as libvirt's
 * keepalive lets a silent host take): on that host's threads, never on the loop or on
 * libuv's pool, where the store commits. */
static void stream_abort_free(virStreamPtr stream)
{
    virStreamAbort(stream);
    virStreamFree(stream);
}

struct stream_release {
    uv_work_t work;
    virStreamPtr stream;
};

static void stream_release_work(uv_work_t *w)
{
    stream_abort_free(((struct stream_release *)w->data)->stream);
}

static void stream_release_done(uv_work_t *w, int status)
{
    (void)status;
    free(w->data);
}

void stream_release(struct host_queue *queue, virStreamPtr stream)
{
    if (!stream)
        return;
    struct stream_release *r = malloc(sizeof(*r));
    if (r) {
        r->stream = stream;
        r->work.data = r;
        if (host_queue_submit(queue, &r->work, stream_release_work, stream_release_done) == 0)
            return;
        free(r);
    }
    stream_abort_free(stream); /* no memory or no thread: here, rather than leak it */
}

static void on_poll_closed(uv_handle_t *h)
{
    struct stream_bridge *b = h->data;
    close(b->fd);
    b->fd = -1;
    b->ops--;
    maybe_free(b);
}

static void bridge_end(struct stream_bridge *b)
{
    if (b->ended)
        return;
    b->ended = true;
    virStreamEventRemoveCallback(b->stream);
    if (b->log) {
        close(b->fd);
        b->fd = -1;
    } else {
        /* Closing our end is the owner's EOF. */
        b->ops++;
        uv_close((uv_handle_t *)&b->poll, on_poll_closed);
    }
    /* Its callback is removed: nothing of the bridge is touched by the release. */
    stream_release(b->queue, b->stream);
    b->stream = NULL;
}

void stream_bridge_close(struct stream_bridge *b)
{
    if (!b)
        return;
    b->closed = true;
    bridge_end(b);
    maybe_free(b);
}

/* ---- opening ----------------------------------------------------------------------------- */

static int bridge_start(struct stream_bridge *b)
{
    int ev = VIR_STREAM_EVENT_READABLE | VIR_STREAM_EVENT_ERROR | VIR_STREAM_EVENT_HANGUP;
    if (virStreamEventAddCallback(b->stream, ev, on_stream_event, b, NULL) < 0)
        return -EIO;
    return 0;
}

int stream_bridge_channel(uv_loop_t *loop, struct host_queue *queue, virStreamPtr stream,
                          int *ret_fd, struct stream_bridge **ret_bridge)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    struct stream_bridge *b = calloc(1, sizeof(*b));
    if (!b) {
        close(sv[0]);
        close(sv[1]);
        return -ENOMEM;
    }
    b->loop = loop;
    b->queue = queue;
    b->stream = stream;
    b->fd = sv[0];
    int r = uv_poll_init(loop, &b->poll, b->fd);
    if (r < 0) {
        close(sv[0]);
        close(sv[1]);
        free(b);
        return r;
    }
    b->poll.data = b;
    uv_poll_start(&b->poll, UV_READABLE, on_poll);
    if (bridge_start(b) < 0) {
        close(sv[1]);
        b->ended = true; /* nothing registered with libvirt; the caller keeps the stream */
        b->closed = true;
        b->ops = 1;
        uv_close((uv_handle_t *)&b->poll, on_poll_closed);
        return -EIO;
    }
    *ret_fd = sv[1];
    *ret_bridge = b;
    return 0;
}

int stream_bridge_log(uv_loop_t *loop, struct host_queue *queue, virStreamPtr stream,
                      const char *path, int64_t max_bytes, struct stream_bridge **ret_bridge)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0)
        return -errno;
    struct stream_bridge *b = calloc(1, sizeof(*b));
    if (!b) {
        close(fd);
        return -ENOMEM;
    }
    b->loop = loop;
    b->queue = queue;
    b->stream = stream;
    b->log = true;
    b->fd = fd;
    b->max_bytes = max_bytes;
    if (bridge_start(b) < 0) {
        close(fd);
        free(b);
        return -EIO;
    }
    *ret_bridge = b;
    return 0;
}
