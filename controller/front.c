/* The core's side of the HTTP front: it forks the front's process (front_process.h) and
 * reads its socketpair (see front.h; the frames are front_frame.h's). */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "front.h"
#include "front_frame.h"
#include "front_process.h"
#include "hatchery/limits.h"
#include "log.h"
#include "wall_clock.h"

#define READY_TIMEOUT_MS 30000

/* ---- the core's side ----------------------------------------------------------------------- */

struct front {
    pid_t pid;
    int fd;
    bool sandboxed;
    bool attached, closed, gone_told;
    uv_pipe_t pipe;
    struct frame_in in;
    struct front_callbacks cb;
    void *data;
    struct http_stats stats;
    size_t calls_open;
    size_t bytes_open;     /* the bodies of the calls open */
    size_t max_calls_open; /* a front keeps at most one call a connection open */
    size_t max_bytes_open;
    uint64_t calls_refused; /* past those bounds: a front that lies, answered 503 */
    bool freed;
    /* The front's stderr, read here as untrusted text (relay_line): its priority capped at
     * warn, its text one escaped value, its lines throttled. */
    int log_fd;
    uv_pipe_t log_pipe;
    bool log_attached;
    char log_line[FRONT_LOG_LINE_MAX + 1];
    size_t log_len;
    bool log_cut; /* the line in log_line was longer: the rest is dropped */
    struct log_throttle log_throttle;
};

struct front_call {
    struct front *front;
    uint32_t id;
    struct frame_request r;
};

static void front_release(struct front *f)
{
    if (f->freed && f->calls_open == 0 && !f->attached && !f->log_attached) {
        free(f->in.buf);
        free(f);
    }
}

int front_spawn(const struct config *config, struct front **ret, char *err, size_t err_size)
{
    int sv[2], logs[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(err, err_size, "socketpair: %s", strerror(errno));
        return -errno;
    }
    /* Its stderr: a pipe the core reads, not the core's own (the journal's stream, where
     * a line's `<N>` prefix would set its priority). */
    if (pipe2(logs, O_CLOEXEC) < 0) {
        int e = errno;
        snprintf(err, err_size, "pipe: %s", strerror(e));
        close(sv[0]);
        close(sv[1]);
        return -e;
    }
    /* Looked up before the fork: the core may have threads by now. */
    struct front_user user = {.drop = geteuid() == 0, .uid = 65534, .gid = 65534};
    if (user.drop) {
        const struct passwd *pw = getpwnam("nobody");
        if (pw && pw->pw_uid != 0) {
            user.uid = pw->pw_uid;
            user.gid = pw->pw_gid;
        }
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        close(logs[0]);
        close(logs[1]);
        snprintf(err, err_size, "fork: %s", strerror(e));
        return -e;
    }
    if (pid == 0) {
        /* Its stdio is its own: nothing to read, and every line it writes goes through the
         * core's relay (relay_line), never straight to the core's journal stream. */
        close(sv[0]);
        close(logs[0]);
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(logs[1], STDOUT_FILENO) < 0 ||
            dup2(logs[1], STDERR_FILENO) < 0)
            _exit(1);
        if (null > STDERR_FILENO)
            close(null);
        front_process_main(config, &user, sv[1]);
    }
    close(sv[1]);
    close(logs[1]);
    struct front *f = front_wrap(sv[0], logs[0], config);
    if (!f) {
        close(logs[0]);
        close(sv[0]);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    f->pid = pid;
    /* Its first frame says whether it listens. */
    int r = 0;
    for (;;) {
        struct frame fr;
        size_t size;
        r = frame_parse(&f->in, &fr, &size);
        if (r < 0)
            break;
        if (r > 0) {
            long code = -EIO;
            if (fr.head.type == FRAME_READY && fr.n_fields == 1) {
                f->sandboxed = fr.fields[0].len == strlen("sandboxed") &&
                               memcmp(fr.fields[0].data, "sandboxed", fr.fields[0].len) == 0;
                frame_in_consume(&f->in, size);
                *ret = f;
                return 0;
            }
            if (fr.head.type == FRAME_FAILED && fr.n_fields == 2) {
                snprintf(err, err_size, "%.*s", (int)fr.fields[0].len, fr.fields[0].data);
                frame_field_long(&fr.fields[1], -4095, -1, &code);
                r = (int)code;
            } else {
                snprintf(err, err_size, "the front's first frame is not READY");
                r = -EPROTO;
            }
            break;
        }
        struct pollfd pfd = {.fd = f->fd, .events = POLLIN};
        int n = poll(&pfd, 1, READY_TIMEOUT_MS);
        if (n == 0) {
            snprintf(err, err_size, "the front did not start within %d s", READY_TIMEOUT_MS / 1000);
            r = -ETIMEDOUT;
            break;
        }
        if (n < 0 && errno == EINTR)
            continue;
        char buf[4096];
        ssize_t got = n > 0 ? read(f->fd, buf, sizeof(buf)) : -1;
        if (got <= 0) {
            snprintf(err, err_size, "the front exited before it listened");
            r = -EPIPE;
            break;
        }
        if (frame_in_append(&f->in, buf, (size_t)got) < 0) {
            snprintf(err, err_size, "out of memory");
            r = -ENOMEM;
            break;
        }
    }
    close(f->fd);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    free(f->in.buf);
    free(f);
    return r < 0 ? r : -EIO;
}

static void front_gone(struct front *f, const char *why)
{
    front_close(f);
    if (!f->gone_told && f->cb.on_gone) {
        f->gone_told = true;
        f->cb.on_gone(f->data, why);
    }
}

static void call_free(struct front_call *call)
{
    struct front *f = call->front;
    f->bytes_open -= call->r.req.body_len;
    frame_request_free(&call->r);
    free(call);
    f->calls_open--;
    front_release(f);
}

static int take_request(struct front *f, const struct frame *fr)
{
    struct front_call *call = calloc(1, sizeof(*call));
    if (!call)
        return -ENOMEM;
    int r = frame_request_decode(fr, FRONT_ROUTE_MAX - 1, &call->r);
    if (r < 0) {
        free(call);
        return r;
    }
    call->front = f;
    call->id = fr->head.id;
    f->calls_open++;
    f->bytes_open += call->r.req.body_len;
    /* The front's listeners keep one call a connection open, within their limits: more is
     * a front that lies (taken over), which would have the core hold calls without bound.
     * Answered at once, and counted; the core goes on serving the calls within bounds. */
    if (f->calls_open > f->max_calls_open || f->bytes_open > f->max_bytes_open) {
        if (f->calls_refused++ == 0)
            log_warn("front.calls_refused",
                     "calls_open=%zu bytes_open=%zu max_calls=%zu max_bytes=%zu "
                     "reason=\"the front has more calls open than its listeners allow\"",
                     f->calls_open, f->bytes_open, f->max_calls_open, f->max_bytes_open);
        front_respond(call, 503, "text/plain", "busy\n", 5);
        return 0;
    }
    f->cb.on_request(f->data, call, (enum front_route)call->r.route, &call->r.req);
    return 0;
}

uint64_t front_calls_refused(const struct front *f)
{
    return f->calls_refused;
}

struct front *front_wrap(int fd, int log_fd, const struct config *config)
{
    struct front *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->fd = fd;
    f->log_fd = log_fd;
    f->pid = -1;
    f->in.max_body = (size_t)config->http.max_body_bytes > sizeof(f->stats)
                         ? (size_t)config->http.max_body_bytes
                         : sizeof(f->stats);
    /* Two listeners at most (listen, metrics_listen), each with its connection limit and
     * one call a connection; as many again for calls whose connection closed before their
     * answer came. */
    f->max_calls_open = 4 * (size_t)config->http.max_connections;
    f->max_bytes_open =
        FRONT_MAX_BYTES_OPEN > f->in.max_body ? FRONT_MAX_BYTES_OPEN : f->in.max_body;
    return f;
}

static int take_rejected(struct front *f, const struct frame *fr)
{
    long status;
    if (fr->n_fields != 4 || !frame_field_long(&fr->fields[0], 400, 499, &status))
        return -EPROTO;
    char *reason = frame_field_dup(&fr->fields[1]), *peer = frame_field_dup(&fr->fields[2]),
         *latency = frame_field_dup(&fr->fields[3]);
    if (reason && peer && latency && f->cb.on_rejected) {
        char *end = NULL;
        double latency_s = strtod(latency, &end);
        /* A figure the front made up (NaN, infinite, negative, or not a number) would spoil
         * the core's latency sums: the frame is refused. */
        if (end == latency || *end || !isfinite(latency_s) || latency_s < 0) {
            free(reason);
            free(peer);
            free(latency);
            return -EPROTO;
        }
        struct front_rejection rej = {
            .status = (int)status, .reason = reason, .peer = peer, .latency_s = latency_s};
        f->cb.on_rejected(f->data, &rej);
    }
    free(reason);
    free(peer);
    free(latency);
    return 0;
}

static int take_frame(struct front *f, const struct frame *fr)
{
    switch (fr->head.type) {
    case FRAME_REQUEST:
        return take_request(f, fr);
    case FRAME_REJECTED:
        return take_rejected(f, fr);
    case FRAME_STATS:
        if (fr->n_fields != 0 || fr->head.body_len != sizeof(f->stats))
            return -EPROTO;
        memcpy(&f->stats, fr->body, sizeof(f->stats));
        return 0;
    default:
        return -EPROTO;
    }
}

static void on_front_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct front *f = stream->data;
    if (nread < 0) {
        front_gone(f, nread == UV_EOF ? "the HTTP front exited" : uv_strerror((int)nread));
        return;
    }
    if (frame_in_append(&f->in, buf->base, (size_t)nread) < 0) {
        front_gone(f, "out of memory for the HTTP front's frames");
        return;
    }
    while (!f->closed) {
        struct frame fr;
        size_t size;
        int r = frame_parse(&f->in, &fr, &size);
        if (r == 0)
            return;
        if (r > 0)
            r = take_frame(f, &fr);
        if (r < 0) {
            front_gone(f, r == -ENOMEM ? "out of memory for the HTTP front's frames"
                                       : "the HTTP front broke the protocol");
            return;
        }
        frame_in_consume(&f->in, size);
    }
}

static void on_log_pipe_closed(uv_handle_t *handle)
{
    struct front *f = handle->data;
    f->log_attached = false;
    front_release(f);
}

/* One line of the front's stderr, as untrusted text: a `<N>` prefix or a `level=` in it
 * sets its level, but never above warn (an error of the core's is the core's to say); the
 * whole line is one escaped value of a front.line event; past LOG_THROTTLE_LINES a window
 * lines are counted, not written. */
static void relay_line(struct front *f, const char *line, bool cut)
{
    enum log_level level = LOG_INFO;
    if (line[0] == '<' && line[1] >= '0' && line[1] <= '7' && line[2] == '>') {
        level = line[1] <= '4' ? LOG_WARN : line[1] == '7' ? LOG_DEBUG : LOG_INFO;
        line += 3;
    } else if (strstr(line, " level=error ") || strstr(line, " level=warn ")) {
        level = LOG_WARN;
    } else if (strstr(line, " level=debug ")) {
        level = LOG_DEBUG;
    }
    int64_t suppressed = 0;
    bool pass = log_throttle_pass(&f->log_throttle, wall_clock_ms(), &suppressed);
    if (suppressed)
        log_warn("front.lines_unlogged", "count=%lld", (long long)suppressed);
    if (pass)
        log_emit(level, "front.line", "text=%s cut=%d", line, cut);
}

static void on_front_log(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct front *f = stream->data;
    if (nread < 0) {
        if (f->log_len) { /* a last line without its newline */
            f->log_line[f->log_len] = 0;
            relay_line(f, f->log_line, f->log_cut);
        }
        f->log_len = 0;
        uv_close((uv_handle_t *)&f->log_pipe, on_log_pipe_closed);
        return;
    }
    for (ssize_t i = 0; i < nread; i++) {
        char c = buf->base[i];
        if (c == '\n') {
            f->log_line[f->log_len] = 0;
            relay_line(f, f->log_line, f->log_cut);
            f->log_len = 0;
            f->log_cut = false;
        } else if (f->log_len < FRONT_LOG_LINE_MAX) {
            f->log_line[f->log_len++] = c ? c : '?';
        } else {
            f->log_cut = true;
        }
    }
}

int front_attach(struct front *f, uv_loop_t *loop, const struct front_callbacks *callbacks,
                 void *data)
{
    f->cb = *callbacks;
    f->data = data;
    int r = uv_pipe_init(loop, &f->pipe, 0);
    if (r == 0)
        r = uv_pipe_open(&f->pipe, f->fd);
    if (r < 0)
        return r;
    f->attached = true;
    f->pipe.data = f;
    r = uv_read_start((uv_stream_t *)&f->pipe, frame_read_alloc, on_front_read);
    if (r < 0 || f->log_fd < 0)
        return r;
    r = uv_pipe_init(loop, &f->log_pipe, 0);
    if (r == 0)
        r = uv_pipe_open(&f->log_pipe, f->log_fd);
    if (r < 0)
        return r;
    f->log_attached = true;
    f->log_pipe.data = f;
    return uv_read_start((uv_stream_t *)&f->log_pipe, frame_read_alloc, on_front_log);
}

void front_respond(struct front_call *call, int status, const char *content_type, const char *body,
                   size_t body_len)
{
    struct front *f = call->front;
    if (!f->closed) {
        char status_text[8];
        snprintf(status_text, sizeof(status_text), "%d", status);
        struct frame_out o;
        frame_begin(&o, FRAME_RESPONSE, call->id);
        frame_out_string(&o, status_text);
        frame_out_string(&o, content_type);
        frame_end(&o, body, body_len);
        frame_send(&f->pipe, &o);
    }
    call_free(call);
}

const char *front_call_peer(const struct front_call *call)
{
    return call->r.peer;
}

const struct http_stats *front_http_stats(const struct front *f)
{
    return &f->stats;
}

bool front_sandboxed(const struct front *f)
{
    return f->sandboxed;
}

pid_t front_pid(const struct front *f)
{
    return f->pid;
}

static void on_pipe_closed(uv_handle_t *handle)
{
    struct front *f = handle->data;
    f->attached = false;
    front_release(f);
}

void front_close(struct front *f)
{
    if (f->closed)
        return;
    f->closed = true;
    if (f->attached)
        uv_close((uv_handle_t *)&f->pipe, on_pipe_closed);
    else
        close(f->fd);
    /* The log pipe ends by itself once the front exits (its end of file); one never
     * attached is closed here. */
    if (!f->log_attached && f->log_fd >= 0) {
        close(f->log_fd);
        f->log_fd = -1;
    }
}

void front_free(struct front *f)
{
    if (!f)
        return;
    front_close(f);
    /* It exits once it reads the end of the socketpair. */
    int status;
    while (f->pid > 0 && waitpid(f->pid, &status, 0) < 0 && errno == EINTR)
        ;
    f->freed = true;
    front_release(f);
}
