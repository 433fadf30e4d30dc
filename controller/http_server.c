/* HTTP/1.1 server on libuv with http-parser and optional OpenSSL; see http_server.h. */
#include "http_server.h"

#include <errno.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "hatchery/limits.h"
#include "log.h"
#include "secret.h"

#define READ_BUF_BYTES (64 * 1024)

/* ---- request parsing ---------------------------------------------------------------- */

static int reader_fail(struct http_reader *r, int status, const char *reason)
{
    if (!r->error_status) {
        r->error_status = status;
        r->error_reason = reason;
    }
    return -1;
}

static int append_str(char **dst, const char *at, size_t len)
{
    size_t old = *dst ? strlen(*dst) : 0;
    char *grown = realloc(*dst, old + len + 1);
    if (!grown)
        return -ENOMEM;
    memcpy(grown + old, at, len);
    grown[old + len] = 0;
    *dst = grown;
    return 0;
}

static int count_header_bytes(struct http_reader *r, size_t len)
{
    r->header_bytes += len;
    if (r->header_bytes > r->limits->max_header_bytes)
        return reader_fail(r, 431, "request headers too large");
    return 0;
}

static int on_message_begin(http_parser *p)
{
    struct http_reader *r = p->data;
    r->started = true;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    struct http_reader *r = p->data;
    if ((r->req.url ? strlen(r->req.url) : 0) + len > HTTP_MAX_URL_BYTES)
        return reader_fail(r, 414, "URL too long");
    if (count_header_bytes(r, len) < 0)
        return -1;
    return append_str(&r->req.url, at, len) < 0 ? reader_fail(r, 503, "out of memory") : 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    struct http_reader *r = p->data;
    if (count_header_bytes(r, len) < 0)
        return -1;
    if (r->in_value || r->req.n_headers == 0) {
        if (r->req.n_headers >= r->limits->max_headers)
            return reader_fail(r, 431, "too many request headers");
        r->req.n_headers++;
        r->in_value = false;
    }
    struct http_header *h = &r->req.headers[r->req.n_headers - 1];
    return append_str(&h->name, at, len) < 0 ? reader_fail(r, 503, "out of memory") : 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    struct http_reader *r = p->data;
    if (count_header_bytes(r, len) < 0)
        return -1;
    r->in_value = true;
    struct http_header *h = &r->req.headers[r->req.n_headers - 1];
    return append_str(&h->value, at, len) < 0 ? reader_fail(r, 503, "out of memory") : 0;
}

static int on_headers_complete(http_parser *p)
{
    struct http_reader *r = p->data;
    r->req.method = http_method_str((enum http_method)p->method);
    r->req.keep_alive = http_should_keep_alive(p);
    /* A header with an empty value never calls on_header_value. */
    for (size_t i = 0; i < r->req.n_headers; i++)
        if (!r->req.headers[i].value && append_str(&r->req.headers[i].value, "", 0) < 0)
            return reader_fail(r, 503, "out of memory");
    /* http-parser takes "Content-Length : 5" as a header named "Content-Length ", so the
     * body would be read as the next request (smuggling). RFC 9112, 5.1: a server must
     * answer whitespace between a field name and its colon with 400. */
    for (size_t i = 0; i < r->req.n_headers; i++)
        if (r->req.headers[i].name && strpbrk(r->req.headers[i].name, " \t"))
            return reader_fail(r, 400, "whitespace between a header name and its colon");
    if (p->upgrade)
        return reader_fail(r, 400, "protocol upgrade is not supported");
    if (!(p->flags & F_CHUNKED) && p->content_length != ULLONG_MAX && p->content_length > 0) {
        if (p->content_length > r->limits->max_body_bytes)
            return reader_fail(r, 413, "request body too large");
        r->req.body = malloc(p->content_length + 1);
        if (!r->req.body)
            return reader_fail(r, 503, "out of memory");
        r->body_cap = p->content_length;
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    struct http_reader *r = p->data;
    if (len > r->limits->max_body_bytes - r->req.body_len)
        return reader_fail(r, 413, "request body too large");
    if (r->req.body_len + len > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap * 2 : 4096;
        while (cap < r->req.body_len + len)
            cap *= 2;
        if (cap > r->limits->max_body_bytes)
            cap = r->limits->max_body_bytes;
        char *grown = realloc(r->req.body, cap + 1);
        if (!grown)
            return reader_fail(r, 503, "out of memory");
        r->req.body = grown;
        r->body_cap = cap;
    }
    memcpy(r->req.body + r->req.body_len, at, len);
    r->req.body_len += len;
    r->req.body[r->req.body_len] = 0;
    return 0;
}

static int on_message_complete(http_parser *p)
{
    struct http_reader *r = p->data;
    r->complete = true;
    if (!r->req.body) {
        r->req.body = calloc(1, 1);
        if (!r->req.body)
            return reader_fail(r, 503, "out of memory");
    }
    /* Stop here: the rest of the buffer is the next request, parsed after this one's answer. */
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static void request_clear(struct http_request *req, size_t max_headers)
{
    free(req->url);
    for (size_t i = 0; i < req->n_headers; i++) {
        free(req->headers[i].name);
        free(req->headers[i].value);
    }
    free(req->body);
    struct http_header *headers = req->headers;
    memset(req, 0, sizeof(*req));
    if (headers)
        memset(headers, 0, max_headers * sizeof(*headers));
    req->headers = headers;
}

void http_reader_init(struct http_reader *r, const struct http_limits *limits)
{
    memset(r, 0, sizeof(*r));
    r->limits = limits;
    r->req.headers = calloc(limits->max_headers, sizeof(struct http_header));
    http_parser_init(&r->parser, HTTP_REQUEST);
    r->parser.data = r;
}

enum http_reader_state http_reader_feed(struct http_reader *r, const char *data, size_t len,
                                        size_t *ret_used)
{
    *ret_used = 0;
    if (r->error_status)
        return HTTP_READER_ERROR;
    if (r->complete)
        return HTTP_READER_COMPLETE;
    if (!r->req.headers)
        return reader_fail(r, 503, "out of memory"), HTTP_READER_ERROR;
    size_t used = http_parser_execute(&r->parser, &parser_settings, data, len);
    *ret_used = used;
    if (r->error_status)
        return HTTP_READER_ERROR;
    if (r->complete)
        return HTTP_READER_COMPLETE;
    enum http_errno e = HTTP_PARSER_ERRNO(&r->parser);
    if (e == HPE_HEADER_OVERFLOW) {
        reader_fail(r, 431, "request headers too large");
        return HTTP_READER_ERROR;
    }
    if (e != HPE_OK) {
        reader_fail(r, 400, http_errno_description(e));
        return HTTP_READER_ERROR;
    }
    return HTTP_READER_MORE;
}

enum http_reader_state http_reader_eof(struct http_reader *r)
{
    if (r->complete)
        return HTTP_READER_COMPLETE;
    if (r->started) {
        reader_fail(r, 400, "connection closed in the middle of a request");
        return HTTP_READER_ERROR;
    }
    return HTTP_READER_MORE;
}

void http_reader_next(struct http_reader *r)
{
    request_clear(&r->req, r->limits->max_headers);
    r->header_bytes = 0;
    r->body_cap = 0;
    r->in_value = false;
    r->started = false;
    r->complete = false;
    http_parser_pause(&r->parser, 0);
}

void http_reader_free(struct http_reader *r)
{
    request_clear(&r->req, r->limits->max_headers);
    free(r->req.headers);
    r->req.headers = NULL;
}

const char *http_request_header(const struct http_request *req, const char *name)
{
    for (size_t i = 0; i < req->n_headers; i++)
        if (req->headers[i].name && strcasecmp(req->headers[i].name, name) == 0)
            return req->headers[i].value;
    return NULL;
}

const char *http_status_reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 415:
        return "Unsupported Media Type";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return "Unknown";
    }
}

/* ---- connections -------------------------------------------------------------------- */

enum timer_mode {
    TIMER_OFF,
    TIMER_READ,  /* a request is arriving: read_timeout_ms */
    TIMER_IDLE,  /* kept alive between requests: idle_timeout_ms */
    TIMER_WRITE, /* answers wait for a peer that does not read: read_timeout_ms */
    TIMER_MODE_MAX,
};

struct http_conn {
    struct http_server *server;
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_idle_t yield; /* the next pipelined request waits for the loop's next turn */
    enum timer_mode timer_mode;
    struct http_reader reader;
    char *in;
    size_t in_len, in_off, in_cap;
    SSL *ssl;
    BIO *rbio, *wbio;
    bool busy; /* a request is with the handler */
    bool reading;
    bool closing;
    bool close_after_write;
    bool in_process;
    bool yielding;      /* `yield` is started */
    bool write_blocked; /* unsent answers over HTTP_MAX_UNSENT_BYTES: no request is read */
    int handles_open;
    size_t writes_pending;
    char peer[64];
    char peer_address[48];
    bool peer_loopback; /* 127.0.0.0/8, ::1, or ::ffff:127.0.0.0/104 */
    struct http_conn *prev, *next;
};

struct write_req {
    uv_write_t req;
    struct http_conn *conn;
    size_t len;
    char data[];
};

static void conn_process(struct http_conn *conn);
static void conn_close(struct http_conn *conn);
static void start_reading(struct http_conn *conn);
static void timer_set(struct http_conn *conn, enum timer_mode mode);

const char *http_conn_peer(const struct http_conn *conn)
{
    return conn->peer;
}

const char *http_conn_peer_address(const struct http_conn *conn)
{
    return conn->peer_address;
}

bool http_conn_peer_is_loopback(const struct http_conn *conn)
{
    return conn->peer_loopback;
}

static void conn_free(struct http_conn *conn)
{
    http_reader_free(&conn->reader);
    free(conn->in);
    if (conn->ssl)
        SSL_free(conn->ssl); /* frees both BIOs */
    free(conn);
}

static void on_handle_closed(uv_handle_t *handle)
{
    struct http_conn *conn = handle->data;
    if (--conn->handles_open == 0 && !conn->busy)
        conn_free(conn);
}

static void conn_close(struct http_conn *conn)
{
    if (conn->closing)
        return;
    conn->closing = true;
    struct http_server *s = conn->server;
    if (conn->prev)
        conn->prev->next = conn->next;
    else if (s->conns == conn)
        s->conns = conn->next;
    if (conn->next)
        conn->next->prev = conn->prev;
    conn->prev = conn->next = NULL;
    s->stats.connections_open--;
    uv_close((uv_handle_t *)&conn->tcp, on_handle_closed);
    uv_close((uv_handle_t *)&conn->timer, on_handle_closed);
    uv_close((uv_handle_t *)&conn->yield, on_handle_closed);
}

/* Bytes of answers libuv still holds because the peer has not read them. */
static size_t unsent_bytes(struct http_conn *conn)
{
    return uv_stream_get_write_queue_size((uv_stream_t *)&conn->tcp);
}

static void on_write(uv_write_t *req, int status)
{
    struct write_req *w = (struct write_req *)req;
    struct http_conn *conn = w->conn;
    free(w);
    conn->writes_pending--;
    if (conn->closing)
        return;
    if (status < 0 || (conn->close_after_write && conn->writes_pending == 0)) {
        conn_close(conn);
        return;
    }
    /* Backpressure released: the peer read half of what waited. */
    if (conn->write_blocked && unsent_bytes(conn) <= HTTP_MAX_UNSENT_BYTES / 2) {
        conn->write_blocked = false;
        timer_set(conn, TIMER_IDLE);
        if (!conn->in_process)
            conn_process(conn);
    }
}

/* One write of up to two parts (an answer's head and body), so an answer is one syscall. */
static int raw_write(struct http_conn *conn, const char *a, size_t a_len, const char *b,
                     size_t b_len)
{
    struct write_req *w = malloc(sizeof(*w) + a_len + b_len);
    if (!w)
        return -ENOMEM;
    w->conn = conn;
    w->len = a_len + b_len;
    memcpy(w->data, a, a_len);
    if (b_len)
        memcpy(w->data + a_len, b, b_len);
    uv_buf_t buf = uv_buf_init(w->data, (unsigned)w->len);
    int r = uv_write(&w->req, (uv_stream_t *)&conn->tcp, &buf, 1, on_write);
    if (r < 0) {
        free(w);
        return r;
    }
    conn->writes_pending++;
    return 0;
}

/* Sends whatever OpenSSL has produced (records, handshake messages). */
static int tls_flush(struct http_conn *conn)
{
    char buf[16 * 1024];
    int n;
    while ((n = BIO_read(conn->wbio, buf, sizeof(buf))) > 0) {
        int r = raw_write(conn, buf, (size_t)n, NULL, 0);
        if (r < 0)
            return r;
    }
    return 0;
}

static int tls_write(struct http_conn *conn, const char *data, size_t len)
{
    while (len > 0) {
        int n = SSL_write(conn->ssl, data, len > INT32_MAX ? INT32_MAX : (int)len);
        if (n <= 0)
            return -EIO;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

static int conn_send(struct http_conn *conn, const char *head, size_t head_len, const char *body,
                     size_t body_len)
{
    if (!conn->ssl)
        return raw_write(conn, head, head_len, body, body_len);
    int r = tls_write(conn, head, head_len);
    if (r == 0)
        r = tls_write(conn, body, body_len);
    return r < 0 ? r : tls_flush(conn);
}

static void on_timer(uv_timer_t *timer)
{
    struct http_conn *conn = timer->data;
    if (conn->busy || conn->closing)
        return;
    if (conn->timer_mode == TIMER_WRITE) {
        conn->server->stats.timeouts++;
        log_info("http.write_timeout", "peer=%s unsent_bytes=%zu", conn->peer, unsent_bytes(conn));
        conn_close(conn);
        return;
    }
    if (conn->ssl && !SSL_is_init_finished(conn->ssl)) {
        conn->server->stats.timeouts++;
        conn_close(conn); /* no answer can go out before the handshake */
        return;
    }
    if (conn->timer_mode == TIMER_READ) {
        conn->server->stats.timeouts++;
        log_info("http.timeout", "peer=%s after_ms=%llu", conn->peer,
                 (unsigned long long)conn->server->limits.read_timeout_ms);
        conn->reader.error_status = 408;
        conn->reader.error_reason = "request not received in time";
        conn->in_off = conn->in_len = 0;
        conn_process(conn);
        return;
    }
    conn_close(conn);
}

static void timer_set(struct http_conn *conn, enum timer_mode mode)
{
    if (conn->timer_mode == mode || conn->closing)
        return;
    conn->timer_mode = mode;
    if (mode == TIMER_OFF)
        uv_timer_stop(&conn->timer);
    else
        uv_timer_start(&conn->timer, on_timer,
                       mode == TIMER_IDLE ? conn->server->limits.idle_timeout_ms
                                          : conn->server->limits.read_timeout_ms,
                       0);
}

static void respond(struct http_conn *conn, int status, const char *content_type, const char *body,
                    size_t body_len, bool close)
{
    struct http_server *s = conn->server;
    conn->busy = false;
    if (conn->closing) {
        /* The peer left while the answer was being prepared. */
        if (conn->handles_open == 0)
            conn_free(conn);
        return;
    }
    bool keep_alive = !close && conn->reader.req.keep_alive && !conn->reader.error_status;
    bool no_body = status == 204 || status == 304;
    /* HEAD: the same head as GET, Content-Length included, and no body (RFC 9110, 9.3.2). */
    bool head_only = conn->reader.req.method && strcmp(conn->reader.req.method, "HEAD") == 0;
    char head[512];
    int n;
    if (no_body)
        n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nServer: hatcheryd\r\nConnection: %s\r\n\r\n", status,
                     http_status_reason(status), keep_alive ? "keep-alive" : "close");
    else
        n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nServer: hatcheryd\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\nConnection: %s\r\n\r\n",
                     status, http_status_reason(status), content_type, body_len,
                     keep_alive ? "keep-alive" : "close");
    if (status >= 100 && status < 600)
        s->stats.responses_by_code[status]++;
    int r = conn_send(conn, head, (size_t)n, body, no_body || head_only ? 0 : body_len);
    if (r < 0) {
        conn_close(conn);
        return;
    }
    if (!keep_alive) {
        conn->close_after_write = true;
        timer_set(conn, TIMER_OFF);
        if (conn->reading) {
            uv_read_stop((uv_stream_t *)&conn->tcp);
            conn->reading = false;
        }
        if (conn->writes_pending == 0)
            conn_close(conn);
        return;
    }
    http_reader_next(&conn->reader);
    timer_set(conn, TIMER_IDLE);
    if (!conn->in_process)
        conn_process(conn);
}

void http_conn_respond(struct http_conn *conn, int status, const char *content_type,
                       const char *body, size_t body_len)
{
    respond(conn, status, content_type, body, body_len, false);
}

static void respond_error(struct http_conn *conn)
{
    char body[256];
    int status = conn->reader.error_status;
    int n = snprintf(body, sizeof(body), "{\"error\":\"%s\"}\n", conn->reader.error_reason);
    log_debug("http.rejected", "peer=%s status=%d reason=\"%s\"", conn->peer, status,
              conn->reader.error_reason);
    respond(conn, status, "application/json", body, (size_t)n, true);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct http_conn *conn = handle->data;
    /* One request at a time: the buffer is consumed before the next read. */
    static char read_buf[READ_BUF_BYTES];
    (void)conn;
    *buf = uv_buf_init(read_buf, sizeof(read_buf));
}

static int in_append(struct http_conn *conn, const char *data, size_t len)
{
    if (conn->in_off > 0 && conn->in_off == conn->in_len)
        conn->in_off = conn->in_len = 0;
    if (conn->in_len - conn->in_off + len > HTTP_MAX_PIPELINE_BYTES + READ_BUF_BYTES)
        return -E2BIG;
    if (conn->in_len + len > conn->in_cap) {
        if (conn->in_off > 0) {
            memmove(conn->in, conn->in + conn->in_off, conn->in_len - conn->in_off);
            conn->in_len -= conn->in_off;
            conn->in_off = 0;
        }
        if (conn->in_len + len > conn->in_cap) {
            size_t cap = conn->in_len + len;
            char *grown = realloc(conn->in, cap);
            if (!grown)
                return -ENOMEM;
            conn->in = grown;
            conn->in_cap = cap;
        }
    }
    memcpy(conn->in + conn->in_len, data, len);
    conn->in_len += len;
    return 0;
}

static void on_yield(uv_idle_t *idle)
{
    struct http_conn *conn = idle->data;
    uv_idle_stop(idle);
    conn->yielding = false;
    if (!conn->closing)
        conn_process(conn);
}

/* Whether an answer can go out: a TLS connection needs its handshake first. */
static bool can_answer(struct http_conn *conn)
{
    return !conn->ssl || SSL_is_init_finished(conn->ssl);
}

/* Parses and hands on requests from what was read, one per turn of the loop: a packet
 * of pipelined requests cannot hold the loop, and no more is read or handled while
 * answers the peer does not read pile up (HTTP_MAX_UNSENT_BYTES). */
static void conn_process(struct http_conn *conn)
{
    struct http_server *s = conn->server;
    conn->in_process = true;
    if (conn->reader.error_status && !conn->busy && !conn->closing && can_answer(conn))
        respond_error(conn);
    while (!conn->busy && !conn->closing && !conn->close_after_write && !conn->yielding &&
           conn->in_off < conn->in_len) {
        if (unsent_bytes(conn) > HTTP_MAX_UNSENT_BYTES) {
            if (!conn->write_blocked)
                s->stats.backpressure_stalls++;
            conn->write_blocked = true;
            timer_set(conn, TIMER_WRITE);
            break;
        }
        if (!conn->reader.started)
            timer_set(conn, TIMER_READ);
        size_t used = 0;
        enum http_reader_state st = http_reader_feed(&conn->reader, conn->in + conn->in_off,
                                                     conn->in_len - conn->in_off, &used);
        conn->in_off += used;
        if (conn->reader.started)
            timer_set(conn, TIMER_READ);
        if (st == HTTP_READER_ERROR) {
            respond_error(conn);
            break;
        }
        if (st == HTTP_READER_COMPLETE) {
            s->stats.requests++;
            timer_set(conn, TIMER_OFF);
            conn->busy = true;
            s->handler(s, conn, &conn->reader.req);
            if (!conn->closing && !conn->busy && conn->in_off < conn->in_len &&
                uv_idle_start(&conn->yield, on_yield) == 0)
                conn->yielding = true;
            continue;
        }
        if (used == 0)
            break;
    }
    if (conn->in_off == conn->in_len)
        conn->in_off = conn->in_len = 0;
    if (!conn->closing && !conn->close_after_write) {
        /* Read only when everything read is handled: while the handler has a request
         * (answered later, possibly from a store callback), while pipelined requests wait
         * their turn, and while the peer leaves its answers unread, the socket waits. */
        bool want = !conn->busy && !conn->write_blocked && conn->in_off == conn->in_len;
        if (!want && conn->reading) {
            uv_read_stop((uv_stream_t *)&conn->tcp);
            conn->reading = false;
        } else if (want && !conn->reading) {
            start_reading(conn);
        }
    }
    conn->in_process = false;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct http_conn *conn = stream->data;
    if (nread == 0 || conn->closing)
        return;
    if (nread < 0) {
        if (!conn->busy && !conn->close_after_write &&
            http_reader_eof(&conn->reader) == HTTP_READER_ERROR && conn->reader.started)
            log_debug("http.truncated", "peer=%s", conn->peer);
        conn_close(conn);
        return;
    }
    if (conn->ssl) {
        if (BIO_write(conn->rbio, buf->base, (int)nread) != (int)nread) {
            conn_close(conn);
            return;
        }
        char plain[16 * 1024];
        for (;;) {
            int n = SSL_read(conn->ssl, plain, sizeof(plain));
            if (n > 0) {
                if (in_append(conn, plain, (size_t)n) < 0) {
                    conn_close(conn);
                    return;
                }
                continue;
            }
            int e = SSL_get_error(conn->ssl, n);
            if (e == SSL_ERROR_WANT_READ)
                break;
            if (!SSL_is_init_finished(conn->ssl)) {
                conn->server->stats.tls_handshake_failures++;
                log_info("http.tls_handshake_failed", "peer=%s error=\"%s\"", conn->peer,
                         ERR_reason_error_string(ERR_peek_last_error())
                             ? ERR_reason_error_string(ERR_peek_last_error())
                             : "unknown");
            }
            ERR_clear_error();
            tls_flush(conn);
            conn->close_after_write = true;
            if (conn->writes_pending == 0)
                conn_close(conn);
            return;
        }
        if (tls_flush(conn) < 0) {
            conn_close(conn);
            return;
        }
    } else if (in_append(conn, buf->base, (size_t)nread) < 0) {
        conn_close(conn);
        return;
    }
    if (conn->in_len > conn->in_off && !conn->reader.started)
        timer_set(conn, TIMER_READ);
    conn_process(conn);
}

static void start_reading(struct http_conn *conn)
{
    if (uv_read_start((uv_stream_t *)&conn->tcp, on_alloc, on_read) == 0)
        conn->reading = true;
    else
        conn_close(conn);
}

static void peer_name(struct http_conn *conn)
{
    struct sockaddr_storage addr;
    int len = sizeof(addr);
    snprintf(conn->peer, sizeof(conn->peer), "?");
    snprintf(conn->peer_address, sizeof(conn->peer_address), "?");
    if (uv_tcp_getpeername(&conn->tcp, (struct sockaddr *)&addr, &len) != 0)
        return;
    char ip[48] = "?";
    int port = 0;
    if (addr.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&addr;
        uv_ip4_name(in, ip, sizeof(ip));
        port = ntohs(in->sin_port);
        conn->peer_loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (addr.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&addr;
        uv_ip6_name(in6, ip, sizeof(ip));
        port = ntohs(in6->sin6_port);
        conn->peer_loopback =
            IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
            (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127);
    }
    snprintf(conn->peer_address, sizeof(conn->peer_address), "%s", ip);
    snprintf(conn->peer, sizeof(conn->peer), addr.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", ip,
             port);
}

/* Other open connections from this connection's address. */
static size_t connections_from(const struct http_server *s, const struct http_conn *conn)
{
    size_t n = 0;
    for (const struct http_conn *c = s->conns; c; c = c->next)
        if (c != conn && strcmp(c->peer_address, conn->peer_address) == 0)
            n++;
    return n;
}

/* Why a new connection is turned away, or NULL. */
static const char *over_limit(struct http_server *s, struct http_conn *conn)
{
    if (s->stats.connections_open > s->limits.max_connections)
        return "too many connections";
    if (s->limits.max_connections_per_address &&
        connections_from(s, conn) >= s->limits.max_connections_per_address)
        return "too many connections from this address";
    return NULL;
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct http_server *s = listener->data;
    if (status < 0) {
        log_warn("http.accept_failed", "error=\"%s\"", uv_strerror(status));
        return;
    }
    struct http_conn *conn = calloc(1, sizeof(*conn));
    if (!conn)
        return;
    conn->server = s;
    uv_tcp_init(s->loop, &conn->tcp);
    uv_timer_init(s->loop, &conn->timer);
    uv_idle_init(s->loop, &conn->yield);
    conn->tcp.data = conn->timer.data = conn->yield.data = conn;
    conn->handles_open = 3;
    http_reader_init(&conn->reader, &s->limits);
    conn->next = s->conns;
    if (s->conns)
        s->conns->prev = conn;
    s->conns = conn;
    s->stats.connections_open++;
    if (uv_accept(listener, (uv_stream_t *)&conn->tcp) < 0) {
        conn_close(conn);
        return;
    }
    peer_name(conn);
    uv_tcp_nodelay(&conn->tcp, 1);
    /* Turned away with a 503 the client can read (over TLS, once the handshake is done),
     * then closed. */
    const char *refused = over_limit(s, conn);
    if (refused) {
        s->stats.connections_rejected++;
        uint64_t now = uv_now(s->loop);
        if (now - s->rejections_logged_ms >= 1000 || s->rejections_logged_ms == 0) {
            log_warn("http.too_many_connections",
                     "peer=%s reason=\"%s\" limit=%zu per_address=%zu unlogged_before=%llu",
                     conn->peer, refused, s->limits.max_connections,
                     s->limits.max_connections_per_address,
                     (unsigned long long)s->rejections_unlogged);
            s->rejections_logged_ms = now;
            s->rejections_unlogged = 0;
        } else {
            s->rejections_unlogged++;
        }
        conn->reader.error_status = 503;
        conn->reader.error_reason = refused;
    } else {
        s->stats.connections_accepted++;
    }
    if (s->tls) {
        conn->ssl = SSL_new(s->tls);
        conn->rbio = BIO_new(BIO_s_mem());
        conn->wbio = BIO_new(BIO_s_mem());
        if (!conn->ssl || !conn->rbio || !conn->wbio) {
            BIO_free(conn->rbio);
            BIO_free(conn->wbio);
            conn_close(conn);
            return;
        }
        SSL_set_bio(conn->ssl, conn->rbio, conn->wbio);
        SSL_set_accept_state(conn->ssl);
    }
    timer_set(conn, TIMER_READ);
    conn_process(conn);
}

static int tls_setup(struct http_server *s, const char *cert, const char *key, char *err,
                     size_t err_size)
{
    /* Held to the rules of every secret file (regular, private, ours, bounded), as
     * --check-config holds it. */
    int fd = secret_file_open(key, SECRET_MAX_BYTES, err, err_size);
    if (fd < 0)
        return fd;
    close(fd);
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        snprintf(err, err_size, "cannot create TLS context");
        return -ENOMEM;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        snprintf(err, err_size, "cannot load TLS certificate %s: %s", cert,
                 ERR_reason_error_string(ERR_get_error()));
        SSL_CTX_free(ctx);
        return -EINVAL;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        snprintf(err, err_size, "cannot load TLS key %s or it does not match the certificate", key);
        ERR_clear_error();
        SSL_CTX_free(ctx);
        return -EINVAL;
    }
    s->tls = ctx;
    return 0;
}

int http_server_start(struct http_server *s, uv_loop_t *loop, const struct sockaddr *addr,
                      const struct http_limits *limits, const char *tls_cert_file,
                      const char *tls_key_file, http_handler_cb handler, void *data, char *err,
                      size_t err_size)
{
    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->limits = *limits;
    s->handler = handler;
    s->data = data;
    http_parser_set_max_header_size((uint32_t)limits->max_header_bytes + 1024);
    if (tls_cert_file) {
        int r = tls_setup(s, tls_cert_file, tls_key_file, err, err_size);
        if (r < 0)
            return r;
    }
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    int r = uv_tcp_bind(&s->listener, addr, 0);
    if (r == 0)
        r = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
    if (r < 0) {
        snprintf(err, err_size, "cannot listen: %s", uv_strerror(r));
        uv_close((uv_handle_t *)&s->listener, NULL);
        if (s->tls)
            SSL_CTX_free(s->tls);
        s->tls = NULL;
        return r;
    }
    return 0;
}

void http_server_stop(struct http_server *s)
{
    if (s->closing)
        return;
    s->closing = true;
    uv_close((uv_handle_t *)&s->listener, NULL);
    while (s->conns)
        conn_close(s->conns);
    if (s->tls)
        SSL_CTX_free(s->tls);
    s->tls = NULL;
}
