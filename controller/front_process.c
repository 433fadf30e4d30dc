/* The HTTP front's process: its listeners, what it checks and forwards to the core over
 * the socketpair, and how it drops root and confines itself; see front_process.h. */
#define _GNU_SOURCE /* close_range */
#include "front_process.h"

#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "address_window.h"
#include "front.h"
#include "front_frame.h"
#include "front_sandbox.h"
#include "hatchery/limits.h"
#include "log.h"
#include "wall_clock.h"
#include "webhook.h"

/* The core's answers: /metrics is the largest. */
#define FRAME_MAX_ANSWER_BYTES (64 * 1024 * 1024)

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

void front_process_main(const struct config *config, const struct front_user *user, int fd)
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
    uv_read_start((uv_stream_t *)&fp.core, frame_read_alloc, on_core_read);
    uv_run(fp.loop, UV_RUN_DEFAULT);
    /* No exit handlers: they belong to the core (and sanitizers' leak checks would need
     * what the filter forbids). */
    _exit(0);
}
