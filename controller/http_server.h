/* The HTTP/1.1 listener: libuv for I/O, Debian's http-parser for parsing, optional TLS
 * through OpenSSL memory BIOs on the same loop. Every input has a limit, and each breach
 * gets its own status: 413 body, 431 headers, 414 URL, 408 slow request, 503 too many
 * connections, 400 malformed. Keep-alive and pipelining are supported; one request per
 * connection is handled at a time, so answers go out in order, and one per turn of the
 * loop, so no connection holds it. A connection whose peer leaves its answers unread is
 * not read any further (HTTP_MAX_UNSENT_BYTES), and is closed after read_timeout_ms. */
#ifndef HATCHERY_HTTP_SERVER_H
#define HATCHERY_HTTP_SERVER_H

#include <http_parser.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct http_limits {
    size_t max_body_bytes;
    size_t max_header_bytes; /* request line and headers together */
    size_t max_headers;
    uint64_t read_timeout_ms; /* from a request's first byte to its last */
    uint64_t idle_timeout_ms; /* between requests on a kept-alive connection */
    size_t max_connections;
    size_t max_connections_per_address; /* 0: no limit per address */
};

struct http_header {
    char *name;
    char *value;
};

struct http_request {
    const char *method;
    char *url;
    struct http_header *headers;
    size_t n_headers;
    char *body;
    size_t body_len;
    bool keep_alive;
};

/* Case-insensitive; NULL when absent. */
const char *http_request_header(const struct http_request *req, const char *name);

/* Request parsing, apart from the socket so that tests and the fuzzer can drive it. */
enum http_reader_state {
    HTTP_READER_MORE,     /* feed more bytes */
    HTTP_READER_COMPLETE, /* a request is ready; feed the rest after http_reader_next() */
    HTTP_READER_ERROR,    /* answer `error_status` and close */
    HTTP_READER_STATE_MAX,
};

struct http_reader {
    http_parser parser;
    const struct http_limits *limits;
    struct http_request req;
    size_t header_bytes;
    size_t body_cap;
    bool in_value;
    bool started;
    bool complete;
    int error_status;
    const char *error_reason;
};

void http_reader_init(struct http_reader *reader, const struct http_limits *limits);
/* Consumes bytes until a request completes or an error; *ret_used says how many. */
enum http_reader_state http_reader_feed(struct http_reader *reader, const char *data, size_t len,
                                        size_t *ret_used);
/* Tells the parser the peer closed: an unfinished request is an error. */
enum http_reader_state http_reader_eof(struct http_reader *reader);
/* Frees the completed request and gets ready for the next one on the same connection. */
void http_reader_next(struct http_reader *reader);
void http_reader_free(struct http_reader *reader);

struct http_server;
struct http_conn;

/* Called for each complete request. The handler must call http_conn_respond() exactly once,
 * now or later (after an asynchronous store commit); the request stays valid until then. */
typedef void (*http_handler_cb)(struct http_server *server, struct http_conn *conn,
                                const struct http_request *req);

struct http_stats {
    uint64_t connections_accepted;
    uint64_t connections_rejected; /* over max_connections or max_connections_per_address */
    uint64_t backpressure_stalls;  /* connections that stopped being read: answers unread */
    uint64_t requests;
    uint64_t timeouts;
    uint64_t tls_handshake_failures;
    uint64_t responses_by_code[600]; /* index: the status code */
    size_t connections_open;
};

struct http_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    struct http_limits limits;
    SSL_CTX *tls;
    http_handler_cb handler;
    void *data;
    struct http_conn *conns; /* open connections, for shutdown */
    struct http_stats stats;
    uint64_t rejections_logged_ms; /* rejections are logged once a second at most */
    uint64_t rejections_unlogged;
    bool closing;
};

/* Binds and listens. `tls_cert_file`/`tls_key_file` may be NULL for plain HTTP. On failure
 * returns a negative errno and writes a message to `err`. */
int http_server_start(struct http_server *server, uv_loop_t *loop, const struct sockaddr *addr,
                      const struct http_limits *limits, const char *tls_cert_file,
                      const char *tls_key_file, http_handler_cb handler, void *data, char *err,
                      size_t err_size);
/* Stops listening and closes every connection; pending answers are dropped. */
void http_server_stop(struct http_server *server);

/* Sends the answer to the request the handler got. The body is copied. */
void http_conn_respond(struct http_conn *conn, int status, const char *content_type,
                       const char *body, size_t body_len);
/* The connection's peer address as text, for logs. */
const char *http_conn_peer(const struct http_conn *conn);
/* The peer's address without its port: what per-address limits count by. */
const char *http_conn_peer_address(const struct http_conn *conn);
/* Whether the peer is on this machine's loopback. */
bool http_conn_peer_is_loopback(const struct http_conn *conn);

const char *http_status_reason(int status);

#endif
