/* The HTTP front's process, and the core's end of its socketpair (see front.h; the frames
 * are front_frame.h's). */
#define _GNU_SOURCE /* close_range */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <seccomp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "front.h"
#include "front_frame.h"
#include "hatchery/limits.h"
#include "log.h"
#include "address_window.h"
#include "wall_clock.h"
#include "webhook.h"

#define FRONT_FD 3
/* The core's answers: /metrics is the largest. */
#define FRAME_MAX_ANSWER_BYTES (64 * 1024 * 1024)
#define READY_TIMEOUT_MS       30000
#define N_OF(a)                (sizeof(a) / sizeof(*(a)))

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
    bool webhook;     /* a delivery: the core's 401 counts against its address */
    char address[48]; /* the client's, without its port */
    struct pending *next;
};

struct front_process {
    uv_loop_t *loop;
    const struct config *config;
    struct http_server http, metrics_http;
    bool metrics_http_on;
    uv_pipe_t core;
    struct frame_in in;
    struct pending *pending, *pending_tail;
    uint32_t next_id;
    bool stopping;
    struct address_window *bad; /* bad signatures: [FRONT_BAD_SIGNATURE_ADDRESSES] */
};

/* Who sent the request: its peer, or, when the peer is this machine's loopback (a reverse
 * proxy on this host, as the example config has it), the client that proxy names: the
 * last address of X-Forwarded-For (the one the proxy itself saw), else X-Real-IP. Trusted
 * from loopback only: any other peer could name any address. An unreadable name is not
 * taken. */
static void client_address(const struct http_conn *conn, const struct http_request *req, char *out,
                           size_t size)
{
    snprintf(out, size, "%s", http_conn_peer_address(conn));
    if (!http_conn_peer_is_loopback(conn))
        return;
    const char *forwarded = http_request_header(req, "X-Forwarded-For");
    const char *named = forwarded ? strrchr(forwarded, ',') : NULL;
    named = named ? named + 1 : forwarded ? forwarded : http_request_header(req, "X-Real-IP");
    if (!named)
        return;
    named += strspn(named, " \t");
    char address[INET6_ADDRSTRLEN];
    size_t n = strcspn(named, " \t");
    unsigned char bytes[sizeof(struct in6_addr)];
    if (n == 0 || n >= sizeof(address))
        return;
    memcpy(address, named, n);
    address[n] = '\0';
    if (inet_pton(AF_INET, address, bytes) == 1 || inet_pton(AF_INET6, address, bytes) == 1)
        snprintf(out, size, "%s", address);
}

/* Whether a request came through a proxy, by the headers proxies add. */
static bool proxied(const struct http_request *req)
{
    return http_request_header(req, "Forwarded") || http_request_header(req, "X-Forwarded-For") ||
           http_request_header(req, "X-Real-IP") || http_request_header(req, "X-Forwarded-Host");
}

/* Whether the address sent more bad signatures than it may in this window: then its
 * deliveries are refused before any HMAC work, until the window ends. */
static bool bad_signatures_over(struct front_process *fp, const char *address, int64_t now_ms)
{
    int64_t max = fp->config->http.max_bad_signatures_per_address;
    const struct address_window *w =
        max && fp->bad ? address_window_open(fp->bad, FRONT_BAD_SIGNATURE_ADDRESSES, address,
                                             now_ms, FRONT_BAD_SIGNATURE_WINDOW_MS)
                       : NULL;
    return w && w->count >= max;
}

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
                    const struct http_request *req, const char *client)
{
    struct pending *p = calloc(1, sizeof(*p));
    if (!p) {
        respond_error(conn, 503, "out of memory");
        return;
    }
    p->id = ++fp->next_id;
    p->conn = conn;
    p->started_ns = uv_hrtime();
    p->webhook = route == FRONT_ROUTE_WEBHOOK;
    snprintf(p->address, sizeof(p->address), "%s", client);
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
    frame_out_string(&o, route_text);
    frame_out_string(&o, req->method);
    frame_out_string(&o, req->url);
    frame_out_string(&o, http_conn_peer(conn));
    for (size_t i = 0; i < req->n_headers; i++) {
        frame_out_string(&o, req->headers[i].name);
        frame_out_string(&o, req->headers[i].value ? req->headers[i].value : "");
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
    frame_out_string(&o, status_text);
    frame_out_string(&o, reason);
    frame_out_string(&o, http_conn_peer(conn));
    frame_out_string(&o, latency);
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
     * metrics listener /metrics and /healthz only. Without it, the public listener serves
     * /metrics to this machine's loopback only, and not through a proxy there (which every
     * client on the internet reaches): the pools, hosts and jobs it tells of are nobody's
     * business on the internet. */
    bool is_metrics_listener = server == &fp->metrics_http;
    bool serves_metrics =
        is_metrics_listener ||
        (!fp->metrics_http_on && http_conn_peer_is_loopback(conn) && !proxied(req));
    char client[INET6_ADDRSTRLEN];
    client_address(conn, req, client, sizeof(client));
#define PATH_IS(p) (path_len == strlen(p) && strncmp(url, p, path_len) == 0)
    if (PATH_IS("/webhook") && !is_metrics_listener) {
        if (strcmp(req->method, "POST") != 0) {
            respond_error(conn, 405, "use POST");
            return;
        }
        /* The core checks the signature (the front holds no secret to check it with); an
         * address whose deliveries it refused too often gets none passed on, and so no
         * HMAC work, until its window ends. */
        if (bad_signatures_over(fp, client, wall_clock_ms()))
            reject_webhook(fp, conn, 429, "too many bad signatures from this address", started_ns);
        else
            forward(fp, conn, FRONT_ROUTE_WEBHOOK, req, client);
    } else if (PATH_IS("/healthz")) {
        if (!is_get)
            respond_error(conn, 405, "use GET");
        else
            forward(fp, conn, FRONT_ROUTE_HEALTHZ, req, client);
    } else if (PATH_IS("/metrics") && serves_metrics) {
        if (!is_get)
            respond_error(conn, 405, "use GET");
        else
            forward(fp, conn, FRONT_ROUTE_METRICS, req, client);
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
    if (!frame_field_long(&f->fields[0], 100, 599, &status))
        return -EPROTO;
    char *content_type = frame_field_dup(&f->fields[1]);
    if (p->webhook && status == 401 && fp->bad)
        address_window_take(fp->bad, FRONT_BAD_SIGNATURE_ADDRESSES, p->address, wall_clock_ms(),
                            FRONT_BAD_SIGNATURE_WINDOW_MS, NULL)
            ->count++;
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
    if (frame_in_append(&fp->in, buf->base, (size_t)nread) < 0) {
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
        frame_in_consume(&fp->in, size);
    }
}

static void send_first(int fd, enum frame_type type, const char *a, const char *b)
{
    struct frame_out o;
    frame_begin(&o, type, 0);
    frame_out_string(&o, a);
    if (b)
        frame_out_string(&o, b);
    frame_end(&o, NULL, 0);
    if (!o.error)
        frame_write_all(fd, o.buf, o.len);
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

/* Who the front becomes when the core runs as root (hatcheryd --allow-root): nobody, so
 * that not even a front that escaped its filter holds root's uid. */
struct front_user {
    bool drop;
    uid_t uid;
    gid_t gid;
};

static int drop_to(const struct front_user *u)
{
    if (!u->drop)
        return 0;
    if (setgroups(0, NULL) < 0 || setresgid(u->gid, u->gid, u->gid) < 0 ||
        setresuid(u->uid, u->uid, u->uid) < 0)
        return -errno;
    /* No way back: a uid 0 that can be regained was not dropped. */
    if (setuid(0) == 0 || geteuid() != u->uid || getegid() != u->gid)
        return -EPERM;
    /* The kernel clears the parent-death signal on a change of credentials. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        return -errno;
    if (getppid() == 1)
        _exit(1);
    return 0;
}

__attribute__((noreturn)) static void front_main(const struct config *config,
                                                 const struct front_user *user, int fd)
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

    int refused = front_refuse_io_uring();
    if (refused < 0 && refused != -ENOSYS) {
        fail_first(fd, "front", "cannot refuse io_uring to the front (seccomp)", refused);
        _exit(1);
    }
    struct front_process fp = {.config = config};
    fp.loop = uv_default_loop();
    /* Made before the filter (without it, no address is limited). */
    fp.bad = calloc(FRONT_BAD_SIGNATURE_ADDRESSES, sizeof(*fp.bad));
    fp.in.max_body = FRAME_MAX_ANSWER_BYTES;
    struct http_limits limits = limits_of(config);
    struct sockaddr_storage addr;
    char err[512];
    config_listen_parse(config->listen, &addr);
    int r = http_server_start(&fp.http, fp.loop, (struct sockaddr *)&addr, &limits,
                              config->http.tls_cert_file, config->http.tls_key_file, on_front_http,
                              &fp, err, sizeof(err));
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
    /* Its sockets are bound and its TLS files read: root (if it was) is not needed. */
    r = drop_to(user);
    if (r < 0) {
        fail_first(fd, "front", "cannot drop root to nobody", r);
        _exit(1);
    }
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
        front_main(config, &user, sv[1]);
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
    r = uv_read_start((uv_stream_t *)&f->pipe, on_alloc, on_front_read);
    if (r < 0 || f->log_fd < 0)
        return r;
    r = uv_pipe_init(loop, &f->log_pipe, 0);
    if (r == 0)
        r = uv_pipe_open(&f->log_pipe, f->log_fd);
    if (r < 0)
        return r;
    f->log_attached = true;
    f->log_pipe.data = f;
    return uv_read_start((uv_stream_t *)&f->log_pipe, on_alloc, on_front_log);
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

/* ---- confinement --------------------------------------------------------------------------- */

/* What the front does after it listens: libuv's epoll loop and its timers, accept and the
 * socket calls on accepted connections, OpenSSL's getrandom, malloc's mmap and brk, stderr
 * for its log, and exiting; fcntl and ioctl for a few requests only (fd_control_rules).
 * Everything else fails with EPERM; exec and ptrace kill. */
static const char *const front_syscalls[] = {
    "read",
    "write",
    "readv",
    "writev",
    "close",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_ctl",
    "accept",
    "accept4",
    "recvfrom",
    "sendto",
    "recvmsg",
    "sendmsg",
    "shutdown",
    "setsockopt",
    "getsockopt",
    "getsockname",
    "getpeername",
    "fstat",
    "clock_gettime",
    "clock_getres",
    "gettimeofday",
    "nanosleep",
    "clock_nanosleep",
    "futex",
    "brk",
    "mmap",
    "munmap",
    "mremap",
    "madvise",
    "mprotect",
    "rt_sigreturn",
    "rt_sigprocmask",
    "sigaltstack",
    "getrandom",
    "getpid",
    "gettid",
    "sched_yield",
    "restart_syscall",
    "exit",
    "exit_group",
};

static const char *const front_killing_syscalls[] = {
    "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev",
};

/* Whether this kernel (or emulator) has seccomp filters at all: qemu-user answers the
 * seccomp() syscall with ENOSYS (and refuses the prctl with EINVAL), as a kernel without
 * CONFIG_SECCOMP does; libseccomp would then fail in ways of its own. A kernel before 4.14
 * answers EINVAL (no GET_ACTION_AVAIL): the load tries. */
static bool seccomp_filters_available(void)
{
    uint32_t action = SECCOMP_RET_KILL_PROCESS;
    return syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0 || errno != ENOSYS;
}

static const char *const io_uring_syscalls[] = {
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
};

/* A filter whose calls not named get `default_action`, under no_new_privs: 0, -ENOSYS
 * where there are no seccomp filters (see seccomp_filters_available), or -errno. */
static int filter_new(uint32_t default_action, scmp_filter_ctx *ret)
{
    if (!seccomp_filters_available())
        return -ENOSYS;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    *ret = seccomp_init(default_action);
    if (!*ret)
        return -ENOMEM;
    /* The kernel's own errno from seccomp_load, not libseccomp's -ECANCELED for all (where
     * this libseccomp can: the attribute only sharpens the error). */
    seccomp_attr_set(*ret, SCMP_FLTATR_API_SYSRAWRC, 1);
    return 0;
}

/* `action` for each call of `names` this architecture has. */
static int filter_add(scmp_filter_ctx ctx, uint32_t action, const char *const *names, size_t n)
{
    int r = 0;
    for (size_t i = 0; r == 0 && i < n; i++) {
        int nr = seccomp_syscall_resolve_name(names[i]);
        if (nr != __NR_SCMP_ERROR)
            r = seccomp_rule_add(ctx, action, nr, 0);
    }
    return r;
}

/* Loads the filter when the rules went in (`r` 0), and releases it. */
static int filter_load(scmp_filter_ctx ctx, int r)
{
    if (r == 0) {
        r = seccomp_load(ctx);
        /* No seccomp filter here: qemu-user has no seccomp() (ENOSYS) and refuses the
         * prctl (EINVAL), as does a kernel without CONFIG_SECCOMP_FILTER. */
        if (r == -EINVAL || r == -ENOSYS)
            r = -ENOSYS;
    }
    seccomp_release(ctx);
    return r;
}

int front_refuse_io_uring(void)
{
    scmp_filter_ctx ctx;
    int r = filter_new(SCMP_ACT_ALLOW, &ctx);
    if (r < 0)
        return r;
    return filter_load(
        ctx, filter_add(ctx, SCMP_ACT_ERRNO(ENOSYS), io_uring_syscalls, N_OF(io_uring_syscalls)));
}

/* fcntl: a descriptor's own flags (libuv's and glibc's), never O_ASYNC, F_SETOWN or
 * F_SETSIG, with which the kernel would signal any process on I/O (SIGKILL to the core,
 * past the kill() ban). ioctl: libuv's non-blocking and close-on-exec requests only, not
 * a terminal's (TIOCSTI types into an inherited one) or an interface's (SIOCSIFFLAGS).
 * The request is an int: its upper half is not compared. */
static int fd_control_rules(scmp_filter_ctx ctx)
{
    int fcntl_nr = seccomp_syscall_resolve_name("fcntl");
    int ioctl_nr = seccomp_syscall_resolve_name("ioctl");
    const int fcntl_plain[] = {F_GETFD, F_SETFD, F_GETFL};
    const unsigned long ioctl_ok[] = {FIONBIO, FIOCLEX, FIONCLEX};
    int r = 0;
    for (size_t i = 0; r == 0 && fcntl_nr != __NR_SCMP_ERROR && i < N_OF(fcntl_plain); i++)
        r = seccomp_rule_add(
            ctx, SCMP_ACT_ALLOW, fcntl_nr, 1,
            SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)fcntl_plain[i]));
    if (r == 0 && fcntl_nr != __NR_SCMP_ERROR)
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, fcntl_nr, 2,
                             SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)F_SETFL),
                             SCMP_A2(SCMP_CMP_MASKED_EQ, (scmp_datum_t)O_ASYNC, 0));
    for (size_t i = 0; r == 0 && ioctl_nr != __NR_SCMP_ERROR && i < N_OF(ioctl_ok); i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, ioctl_nr, 1,
                             SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)ioctl_ok[i]));
    return r;
}

int front_sandbox_apply(void)
{
    scmp_filter_ctx ctx;
    int r = filter_new(SCMP_ACT_ERRNO(EPERM), &ctx);
    if (r < 0)
        return r;
    r = filter_add(ctx, SCMP_ACT_ALLOW, front_syscalls, N_OF(front_syscalls));
    if (r == 0)
        r = filter_add(ctx, SCMP_ACT_KILL_PROCESS, front_killing_syscalls,
                       N_OF(front_killing_syscalls));
    if (r == 0)
        r = fd_control_rules(ctx);
    /* No newfstatat or statx: seccomp sees the path's pointer, not the path, so "only with
     * AT_EMPTY_PATH" would still stat any file. The plain fstat syscall (allowed above)
     * takes a descriptor alone; glibc's fstat() wrapper, which goes through newfstatat,
     * fails with EPERM, which stdio copes with, and nothing the front runs calls it. */
    int nr;
    /* abort() signals its own thread only. */
    nr = seccomp_syscall_resolve_name("tgkill");
    if (r == 0 && nr != __NR_SCMP_ERROR)
        r = seccomp_rule_add(
            ctx, SCMP_ACT_ALLOW, nr, 1,
            (struct scmp_arg_cmp){
                .arg = 0, .op = SCMP_CMP_EQ, .datum_a = (scmp_datum_t)getpid(), .datum_b = 0});
    return filter_load(ctx, r);
}
