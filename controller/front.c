/* The HTTP front and its socketpair to the core (see front.h).
 *
 * A frame is a head of four native uint32s (type, request id, meta length, body length:
 * both ends are the same binary, forked), then the meta, then the body. The meta is a list
 * of fields, each a uint32 length and its bytes: the method, URL, peer and headers of a
 * request, or the status and content type of an answer. Both ends bound every length
 * before they allocate; a frame out of bounds ends the conversation. */
#define _GNU_SOURCE /* close_range */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "front.h"
#include "hatchery/limits.h"
#include "log.h"
#include "webhook.h"

enum frame_type {
    FRAME_READY = 1, /* front → core: listening; field 0 "sandboxed" or "unconfined" */
    FRAME_FAILED,    /* front → core: cannot listen; field 0 the reason, field 1 -errno */
    FRAME_REQUEST,   /* front → core: route, method, url, peer, then header names and values */
    FRAME_REJECTED,  /* front → core: status, reason, peer, latency in seconds */
    FRAME_STATS,     /* front → core: the body is the public listener's struct http_stats */
    FRAME_RESPONSE,  /* core → front: status, content type; the body */
};

struct frame_head {
    uint32_t type;
    uint32_t id;
    uint32_t meta_len;
    uint32_t body_len;
};

#define FRONT_FD             3
#define FRAME_MAX_FIELDS     (2 * HTTP_MAX_HEADERS_MAX + 8)
#define FRAME_MAX_META_BYTES (1024 * 1024)
/* The core's answers: /metrics is the largest. */
#define FRAME_MAX_ANSWER_BYTES (64 * 1024 * 1024)
#define READY_TIMEOUT_MS       30000

/* ---- frames -------------------------------------------------------------------------------- */

struct field {
    const char *data;
    size_t len;
};

struct frame_out {
    char *buf;
    size_t len, cap;
    bool error;
};

static void out_put(struct frame_out *o, const void *data, size_t len)
{
    if (o->error || len == 0)
        return;
    if (o->len + len > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->len + len)
            cap *= 2;
        char *buf = realloc(o->buf, cap);
        if (!buf) {
            o->error = true;
            return;
        }
        o->buf = buf;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, data, len);
    o->len += len;
}

static void out_field(struct frame_out *o, const char *s, size_t len)
{
    uint32_t n = (uint32_t)len;
    out_put(o, &n, sizeof(n));
    out_put(o, s, len);
}

static void out_string(struct frame_out *o, const char *s)
{
    out_field(o, s ? s : "", s ? strlen(s) : 0);
}

/* Starts a frame; its meta fields follow, then frame_end() adds the body. */
static void frame_begin(struct frame_out *o, enum frame_type type, uint32_t id)
{
    struct frame_head head = {.type = type, .id = id};
    memset(o, 0, sizeof(*o));
    out_put(o, &head, sizeof(head));
}

static void frame_end(struct frame_out *o, const void *body, size_t body_len)
{
    if (o->error)
        return;
    struct frame_head *head = (struct frame_head *)o->buf;
    head->meta_len = (uint32_t)(o->len - sizeof(*head));
    head->body_len = (uint32_t)body_len;
    out_put(o, body, body_len);
}

struct frame_in {
    char *buf;
    size_t len, cap;
    size_t max_body;
};

struct frame {
    struct frame_head head;
    struct field fields[FRAME_MAX_FIELDS];
    size_t n_fields;
    const char *body;
};

static int in_append(struct frame_in *in, const char *data, size_t len)
{
    if (in->len + len > in->cap) {
        size_t cap = in->cap ? in->cap : 64 * 1024;
        while (cap < in->len + len)
            cap *= 2;
        char *buf = realloc(in->buf, cap);
        if (!buf)
            return -ENOMEM;
        in->buf = buf;
        in->cap = cap;
    }
    memcpy(in->buf + in->len, data, len);
    in->len += len;
    return 0;
}

/* 1 and the frame at the buffer's start (its size in *ret_size), 0 for more bytes, or
 * -EPROTO for a frame out of bounds. */
static int frame_parse(const struct frame_in *in, struct frame *f, size_t *ret_size)
{
    if (in->len < sizeof(f->head))
        return 0;
    memcpy(&f->head, in->buf, sizeof(f->head));
    if (f->head.meta_len > FRAME_MAX_META_BYTES || f->head.body_len > in->max_body)
        return -EPROTO;
    size_t size = sizeof(f->head) + (size_t)f->head.meta_len + f->head.body_len;
    if (in->len < size)
        return 0;
    const char *p = in->buf + sizeof(f->head), *end = p + f->head.meta_len;
    f->n_fields = 0;
    while (p < end) {
        uint32_t n;
        if ((size_t)(end - p) < sizeof(n) || f->n_fields == FRAME_MAX_FIELDS)
            return -EPROTO;
        memcpy(&n, p, sizeof(n));
        p += sizeof(n);
        if ((size_t)(end - p) < n || memchr(p, 0, n))
            return -EPROTO;
        f->fields[f->n_fields++] = (struct field){p, n};
        p += n;
    }
    f->body = end;
    *ret_size = size;
    return 1;
}

static void in_consume(struct frame_in *in, size_t size)
{
    memmove(in->buf, in->buf + size, in->len - size);
    in->len -= size;
}

static char *field_dup(const struct field *f)
{
    char *s = malloc(f->len + 1);
    if (s) {
        memcpy(s, f->data, f->len);
        s[f->len] = 0;
    }
    return s;
}

static bool field_long(const struct field *f, long min, long max, long *ret)
{
    char text[32];
    if (f->len == 0 || f->len >= sizeof(text))
        return false;
    memcpy(text, f->data, f->len);
    text[f->len] = 0;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < min || v > max)
        return false;
    *ret = v;
    return true;
}

/* A write that completes before it returns: the front's first frame, before any loop. */
static int write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

struct frame_write {
    uv_write_t req;
    char *buf;
};

static void on_frame_written(uv_write_t *req, int status)
{
    (void)status; /* a broken pipe shows on the read side as EOF */
    struct frame_write *w = req->data;
    free(w->buf);
    free(w);
}

/* Queues the frame on `pipe` and takes its buffer. */
static int frame_send(uv_pipe_t *pipe, struct frame_out *o)
{
    if (o->error) {
        free(o->buf);
        return -ENOMEM;
    }
    struct frame_write *w = malloc(sizeof(*w));
    if (!w) {
        free(o->buf);
        return -ENOMEM;
    }
    w->buf = o->buf;
    w->req.data = w;
    uv_buf_t b = uv_buf_init(o->buf, (unsigned)o->len);
    int r = uv_write(&w->req, (uv_stream_t *)pipe, &b, 1, on_frame_written);
    if (r < 0) {
        free(w->buf);
        free(w);
    }
    return r;
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    (void)handle;
    (void)suggested;
    static char read_buf[64 * 1024];
    *buf = uv_buf_init(read_buf, sizeof(read_buf));
}

/* ---- the front process --------------------------------------------------------------------- */

struct pending {
    uint32_t id;
    struct http_conn *conn;
    uint64_t started_ns;
    struct pending *next;
};

struct front_process {
    uv_loop_t *loop;
    const struct config *config;
    const struct secret *secret;
    struct http_server http, metrics_http;
    bool metrics_http_on;
    uv_pipe_t core;
    struct frame_in in;
    struct pending *pending, *pending_tail;
    uint32_t next_id;
    bool stopping;
};

static void respond_error(struct http_conn *conn, int status, const char *reason)
{
    json_t *body = json_pack("{s:b, s:s}", "ok", 0, "error", reason);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        http_conn_respond(conn, 500, "application/json", "{}\n", 3);
        return;
    }
    size_t n = strlen(text);
    char *line = malloc(n + 2);
    if (line) {
        memcpy(line, text, n);
        line[n] = '\n';
        http_conn_respond(conn, status, "application/json", line, n + 1);
    } else {
        http_conn_respond(conn, 500, "application/json", "{}\n", 3);
    }
    free(line);
    free(text);
}

static void front_process_stop(struct front_process *fp)
{
    if (fp->stopping)
        return;
    fp->stopping = true;
    http_server_stop(&fp->http);
    if (fp->metrics_http_on)
        http_server_stop(&fp->metrics_http);
    if (!uv_is_closing((uv_handle_t *)&fp->core))
        uv_close((uv_handle_t *)&fp->core, NULL);
    /* The connections waiting for the core are closed; their answers never come. */
    while (fp->pending) {
        struct pending *p = fp->pending;
        fp->pending = p->next;
        http_conn_respond(p->conn, 503, "application/json", "{}\n", 3);
        free(p);
    }
}

static void forward(struct front_process *fp, struct http_conn *conn, enum front_route route,
                    const struct http_request *req)
{
    struct pending *p = calloc(1, sizeof(*p));
    if (!p) {
        respond_error(conn, 503, "out of memory");
        return;
    }
    p->id = ++fp->next_id;
    p->conn = conn;
    p->started_ns = uv_hrtime();
    struct frame_out o;
    if (route == FRONT_ROUTE_METRICS) {
        /* The counts as of now, for the core to render. */
        frame_begin(&o, FRAME_STATS, 0);
        frame_end(&o, &fp->http.stats, sizeof(fp->http.stats));
        frame_send(&fp->core, &o);
    }
    char route_text[8];
    snprintf(route_text, sizeof(route_text), "%d", (int)route);
    frame_begin(&o, FRAME_REQUEST, p->id);
    out_string(&o, route_text);
    out_string(&o, req->method);
    out_string(&o, req->url);
    out_string(&o, http_conn_peer(conn));
    for (size_t i = 0; i < req->n_headers; i++) {
        out_string(&o, req->headers[i].name);
        out_string(&o, req->headers[i].value ? req->headers[i].value : "");
    }
    frame_end(&o, req->body, req->body_len);
    if (frame_send(&fp->core, &o) < 0) {
        free(p);
        respond_error(conn, 503, "controller unavailable");
        return;
    }
    if (fp->pending_tail)
        fp->pending_tail->next = p;
    else
        fp->pending = p;
    fp->pending_tail = p;
}

static void reject_webhook(struct front_process *fp, struct http_conn *conn, int status,
                           const char *reason, uint64_t started_ns)
{
    respond_error(conn, status, reason);
    char status_text[8], latency[32];
    snprintf(status_text, sizeof(status_text), "%d", status);
    snprintf(latency, sizeof(latency), "%.9f", (double)(uv_hrtime() - started_ns) / 1e9);
    struct frame_out o;
    frame_begin(&o, FRAME_REJECTED, 0);
    out_string(&o, status_text);
    out_string(&o, reason);
    out_string(&o, http_conn_peer(conn));
    out_string(&o, latency);
    frame_end(&o, NULL, 0);
    frame_send(&fp->core, &o);
}

/* Routes a request: what the front can answer alone, it does. */
static void on_front_http(struct http_server *server, struct http_conn *conn,
                          const struct http_request *req)
{
    struct front_process *fp = server->data;
    uint64_t started_ns = uv_hrtime();
    if (fp->stopping) {
        respond_error(conn, 503, "stopping");
        return;
    }
    const char *url = req->url ? req->url : "";
    size_t path_len = strcspn(url, "?#");
    bool is_get = strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0;
    /* With metrics_listen, the public listener serves /webhook and /healthz only, and the
     * metrics listener /metrics and /healthz only. */
    bool is_metrics_listener = server == &fp->metrics_http;
    bool serves_metrics = is_metrics_listener || !fp->metrics_http_on;
#define PATH_IS(p) (path_len == strlen(p) && strncmp(url, p, path_len) == 0)
    if (PATH_IS("/webhook") && !is_metrics_listener) {
        if (strcmp(req->method, "POST") != 0) {
            respond_error(conn, 405, "use POST");
            return;
        }
        /* The signature comes first: nothing unsigned reaches the core. */
        const char *signature = http_request_header(req, "X-Hub-Signature-256");
        if (!signature)
            reject_webhook(fp, conn, 401, "missing X-Hub-Signature-256", started_ns);
        else if (webhook_signature_verify(fp->secret, signature, req->body, req->body_len) < 0)
            reject_webhook(fp, conn, 401, "signature does not match", started_ns);
        else
            forward(fp, conn, FRONT_ROUTE_WEBHOOK, req);
    } else if (PATH_IS("/healthz")) {
        if (!is_get)
            respond_error(conn, 405, "use GET");
        else
            forward(fp, conn, FRONT_ROUTE_HEALTHZ, req);
    } else if (PATH_IS("/metrics") && serves_metrics) {
        if (!is_get)
            respond_error(conn, 405, "use GET");
        else
            forward(fp, conn, FRONT_ROUTE_METRICS, req);
    } else {
        respond_error(conn, 404, "not found");
    }
#undef PATH_IS
}

static int front_process_frame(struct front_process *fp, const struct frame *f)
{
    if (f->head.type != FRAME_RESPONSE || f->n_fields != 2)
        return -EPROTO;
    /* Answers come in the order the core finishes them: mostly the order sent. */
    struct pending **pp = &fp->pending, *prev = NULL;
    while (*pp && (*pp)->id != f->head.id) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    struct pending *p = *pp;
    if (!p)
        return -EPROTO;
    long status;
    if (!field_long(&f->fields[0], 100, 599, &status))
        return -EPROTO;
    char *content_type = field_dup(&f->fields[1]);
    *pp = p->next;
    if (fp->pending_tail == p)
        fp->pending_tail = prev;
    http_conn_respond(p->conn, (int)status, content_type && *content_type ? content_type : NULL,
                      f->body, f->head.body_len);
    free(content_type);
    free(p);
    return 0;
}

static void on_core_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct front_process *fp = stream->data;
    if (nread < 0) {
        /* The core closed its end, or is gone: so is the front. */
        front_process_stop(fp);
        return;
    }
    if (in_append(&fp->in, buf->base, (size_t)nread) < 0) {
        front_process_stop(fp);
        return;
    }
    for (;;) {
        struct frame f;
        size_t size;
        int r = frame_parse(&fp->in, &f, &size);
        if (r == 0)
            return;
        if (r < 0 || front_process_frame(fp, &f) < 0) {
            log_error("front.protocol_error", "reason=\"a frame from the core out of bounds\"");
            front_process_stop(fp);
            return;
        }
        in_consume(&fp->in, size);
    }
}

static void send_first(int fd, enum frame_type type, const char *a, const char *b)
{
    struct frame_out o;
    frame_begin(&o, type, 0);
    out_string(&o, a);
    if (b)
        out_string(&o, b);
    frame_end(&o, NULL, 0);
    if (!o.error)
        write_all(fd, o.buf, o.len);
    free(o.buf);
}

static struct http_limits limits_of(const struct config *c)
{
    return (struct http_limits){
        .max_body_bytes = (size_t)c->http.max_body_bytes,
        .max_header_bytes = (size_t)c->http.max_header_bytes,
        .max_headers = (size_t)c->http.max_headers,
        .read_timeout_ms = (uint64_t)c->http.read_timeout_ms,
        .idle_timeout_ms = (uint64_t)c->http.idle_timeout_ms,
        .max_connections = (size_t)c->http.max_connections,
        .max_connections_per_address = (size_t)c->http.max_connections_per_address,
    };
}

static void fail_first(int fd, const char *what, const char *err, int r)
{
    char reason[700], code[16];
    snprintf(reason, sizeof(reason), "%s: %s", what, err);
    snprintf(code, sizeof(code), "%d", r);
    send_first(fd, FRAME_FAILED, reason, code);
}

__attribute__((noreturn)) static void front_main(const struct config *config,
                                                 const struct secret *secret, int fd)
{
    prctl(PR_SET_NAME, "hatcheryd-front", 0, 0, 0);
    /* A core killed outright takes the front with it. */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() == 1)
        _exit(1);
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    /* Nothing of the core's but stdio and the socketpair. */
    if (fd != FRONT_FD) {
        if (dup2(fd, FRONT_FD) < 0)
            _exit(1);
        fd = FRONT_FD;
    }
    if (close_range(FRONT_FD + 1, ~0U, 0) < 0)
        for (int i = FRONT_FD + 1; i < 65536; i++)
            close(i);

    struct front_process fp = {.config = config, .secret = secret};
    fp.loop = uv_default_loop();
    fp.in.max_body = FRAME_MAX_ANSWER_BYTES;
    struct http_limits limits = limits_of(config);
    struct sockaddr_storage addr;
    char err[512];
    config_listen_parse(config->listen, &addr);
    int r = http_server_start(&fp.http, fp.loop, (struct sockaddr *)&addr, &limits,
                              config->http.tls_cert_file, config->http.tls_key_file,
                              on_front_http, &fp, err, sizeof(err));
    if (r < 0) {
        fail_first(fd, "listen", err, r);
        _exit(1);
    }
    if (config->metrics_listen) {
        config_listen_parse(config->metrics_listen, &addr);
        r = http_server_start(&fp.metrics_http, fp.loop, (struct sockaddr *)&addr, &limits, NULL,
                              NULL, on_front_http, &fp, err, sizeof(err));
        if (r < 0) {
            fail_first(fd, "metrics_listen", err, r);
            _exit(1);
        }
        fp.metrics_http_on = true;
    }
    if (uv_pipe_init(fp.loop, &fp.core, 0) < 0 || uv_pipe_open(&fp.core, fd) < 0) {
        fail_first(fd, "front", "cannot open the socketpair", -EIO);
        _exit(1);
    }
    fp.core.data = &fp;
    log_stream_only();
    r = front_sandbox_apply();
    if (r < 0 && r != -ENOSYS) {
        fail_first(fd, "front", "cannot confine the front (seccomp)", r);
        _exit(1);
    }
    send_first(fd, FRAME_READY, r == 0 ? "sandboxed" : "unconfined", NULL);
    uv_read_start((uv_stream_t *)&fp.core, on_alloc, on_core_read);
    uv_run(fp.loop, UV_RUN_DEFAULT);
    /* No exit handlers: they belong to the core (and sanitizers' leak checks would need
     * what the filter forbids). */
    _exit(0);
}

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
    bool freed;
};

struct front_call {
    struct front *front;
    uint32_t id;
    struct http_request req;
    char *peer;
};

static void front_release(struct front *f)
{
    if (f->freed && f->calls_open == 0 && !f->attached) {
        free(f->in.buf);
        free(f);
    }
}

int front_spawn(const struct config *config, const struct secret *webhook_secret,
                struct front **ret, char *err, size_t err_size)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(err, err_size, "socketpair: %s", strerror(errno));
        return -errno;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        snprintf(err, err_size, "fork: %s", strerror(e));
        return -e;
    }
    if (pid == 0) {
        close(sv[0]);
        front_main(config, webhook_secret, sv[1]);
    }
    close(sv[1]);
    struct front *f = calloc(1, sizeof(*f));
    if (!f) {
        close(sv[0]);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    f->pid = pid;
    f->fd = sv[0];
    f->in.max_body = (size_t)config->http.max_body_bytes > sizeof(f->stats)
                         ? (size_t)config->http.max_body_bytes
                         : sizeof(f->stats);
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
                in_consume(&f->in, size);
                *ret = f;
                return 0;
            }
            if (fr.head.type == FRAME_FAILED && fr.n_fields == 2) {
                snprintf(err, err_size, "%.*s", (int)fr.fields[0].len, fr.fields[0].data);
                field_long(&fr.fields[1], -4095, -1, &code);
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
        if (in_append(&f->in, buf, (size_t)got) < 0) {
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
    for (size_t i = 0; i < call->req.n_headers; i++) {
        free(call->req.headers[i].name);
        free(call->req.headers[i].value);
    }
    free(call->req.headers);
    free((char *)call->req.method);
    free(call->req.url);
    free(call->req.body);
    free(call->peer);
    free(call);
    f->calls_open--;
    front_release(f);
}

static int take_request(struct front *f, const struct frame *fr)
{
    long route;
    if (fr->n_fields < 4 || (fr->n_fields - 4) % 2 != 0 ||
        !field_long(&fr->fields[0], 0, FRONT_ROUTE_MAX - 1, &route))
        return -EPROTO;
    struct front_call *call = calloc(1, sizeof(*call));
    if (!call)
        return -ENOMEM;
    call->front = f;
    call->id = fr->head.id;
    f->calls_open++;
    size_t n_headers = (fr->n_fields - 4) / 2;
    call->req.method = field_dup(&fr->fields[1]);
    call->req.url = field_dup(&fr->fields[2]);
    call->peer = field_dup(&fr->fields[3]);
    call->req.headers = calloc(n_headers ? n_headers : 1, sizeof(*call->req.headers));
    call->req.body = malloc(fr->head.body_len + 1);
    bool ok = call->req.method && call->req.url && call->peer && call->req.headers &&
              call->req.body;
    for (size_t i = 0; ok && i < n_headers; i++) {
        call->req.headers[i].name = field_dup(&fr->fields[4 + 2 * i]);
        call->req.headers[i].value = field_dup(&fr->fields[5 + 2 * i]);
        call->req.n_headers = i + 1;
        ok = call->req.headers[i].name && call->req.headers[i].value;
    }
    if (!ok) {
        call_free(call);
        return -ENOMEM;
    }
    memcpy(call->req.body, fr->body, fr->head.body_len);
    call->req.body[fr->head.body_len] = 0;
    call->req.body_len = fr->head.body_len;
    f->cb.on_request(f->data, call, (enum front_route)route, &call->req);
    return 0;
}

static int take_rejected(struct front *f, const struct frame *fr)
{
    long status;
    if (fr->n_fields != 4 || !field_long(&fr->fields[0], 400, 499, &status))
        return -EPROTO;
    char *reason = field_dup(&fr->fields[1]), *peer = field_dup(&fr->fields[2]),
         *latency = field_dup(&fr->fields[3]);
    if (reason && peer && latency && f->cb.on_rejected) {
        struct front_rejection rej = {.status = (int)status,
                                      .reason = reason,
                                      .peer = peer,
                                      .latency_s = strtod(latency, NULL)};
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
    if (in_append(&f->in, buf->base, (size_t)nread) < 0) {
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
        in_consume(&f->in, size);
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
    return uv_read_start((uv_stream_t *)&f->pipe, on_alloc, on_front_read);
}

void front_respond(struct front_call *call, int status, const char *content_type,
                   const char *body, size_t body_len)
{
    struct front *f = call->front;
    if (!f->closed) {
        char status_text[8];
        snprintf(status_text, sizeof(status_text), "%d", status);
        struct frame_out o;
        frame_begin(&o, FRAME_RESPONSE, call->id);
        out_string(&o, status_text);
        out_string(&o, content_type);
        frame_end(&o, body, body_len);
        frame_send(&f->pipe, &o);
    }
    call_free(call);
}

const char *front_call_peer(const struct front_call *call)
{
    return call->peer;
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
}

void front_free(struct front *f)
{
    if (!f)
        return;
    front_close(f);
    /* It exits once it reads the end of the socketpair. */
    int status;
    while (waitpid(f->pid, &status, 0) < 0 && errno == EINTR)
        ;
    f->freed = true;
    front_release(f);
}

/* ---- confinement --------------------------------------------------------------------------- */

/* What the front does after it listens: libuv's epoll loop and its timers, accept and the
 * socket calls on accepted connections, OpenSSL's getrandom, malloc's mmap and brk, stderr
 * for its log, and exiting. Everything else fails with EPERM; exec and ptrace kill. */
static const char *const front_syscalls[] = {
    "read", "write", "readv", "writev", "close", "epoll_wait", "epoll_pwait", "epoll_pwait2",
    "epoll_ctl", "accept", "accept4", "recvfrom", "sendto", "recvmsg", "sendmsg", "shutdown",
    "setsockopt", "getsockopt", "getsockname", "getpeername", "fcntl", "ioctl", "fstat",
    "clock_gettime", "clock_getres", "gettimeofday", "nanosleep", "clock_nanosleep", "futex",
    "brk", "mmap", "munmap", "mremap", "madvise", "mprotect", "rt_sigreturn", "rt_sigprocmask",
    "sigaltstack", "getrandom", "getpid", "gettid", "sched_yield", "restart_syscall", "exit",
    "exit_group",
};

static const char *const front_killing_syscalls[] = {
    "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev",
};

int front_sandbox_apply(void)
{
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    if (!ctx)
        return -ENOMEM;
    int r = 0;
    for (size_t i = 0; r == 0 && i < sizeof(front_syscalls) / sizeof(*front_syscalls); i++) {
        int nr = seccomp_syscall_resolve_name(front_syscalls[i]);
        if (nr != __NR_SCMP_ERROR)
            r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
    }
    for (size_t i = 0;
         r == 0 && i < sizeof(front_killing_syscalls) / sizeof(*front_killing_syscalls); i++) {
        int nr = seccomp_syscall_resolve_name(front_killing_syscalls[i]);
        if (nr != __NR_SCMP_ERROR)
            r = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, nr, 0);
    }
    /* fstatat only with AT_EMPTY_PATH, as glibc's fstat() calls it (stat shows a file's
     * metadata at most, never its contents). */
    int nr = seccomp_syscall_resolve_name("newfstatat");
    if (r == 0 && nr != __NR_SCMP_ERROR)
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
                             SCMP_A3(SCMP_CMP_MASKED_EQ, AT_EMPTY_PATH, AT_EMPTY_PATH));
    /* abort() signals its own thread only. */
    nr = seccomp_syscall_resolve_name("tgkill");
    if (r == 0 && nr != __NR_SCMP_ERROR)
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)getpid()));
    if (r == 0) {
        r = seccomp_load(ctx);
        /* No seccomp filter here (an emulator's kernel interface, or a kernel without it). */
        if (r == -EINVAL || r == -ENOSYS || r == -EOPNOTSUPP)
            r = -ENOSYS;
    }
    seccomp_release(ctx);
    return r;
}
