/* The HTTP request reader (http-parser underneath) and its limits, fed byte strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "http_server.h"

static const struct http_limits limits = {
    .max_body_bytes = 64,
    .max_header_bytes = 1024,
    .max_headers = 8,
    .read_timeout_ms = 1000,
    .idle_timeout_ms = 1000,
    .max_connections = 4,
};

/* Feeds `text` in pieces of `chunk` bytes; returns the final state. */
static enum http_reader_state feed(struct http_reader *r, const char *text, size_t chunk,
                                   size_t *ret_consumed)
{
    size_t len = strlen(text), off = 0;
    enum http_reader_state st = HTTP_READER_MORE;
    while (off < len) {
        size_t n = len - off < chunk ? len - off : chunk, used = 0;
        st = http_reader_feed(r, text + off, n, &used);
        off += used;
        if (st != HTTP_READER_MORE)
            break;
    }
    *ret_consumed = off;
    return st;
}

static void test_request_in_pieces(void **state)
{
    (void)state;
    const char *text = "POST /webhook?x=1 HTTP/1.1\r\nHost: a\r\nX-GitHub-Event: ping\r\n"
                       "Content-Length: 5\r\n\r\nhello";
    for (size_t chunk = 1; chunk <= strlen(text); chunk += 7) {
        struct http_reader r;
        http_reader_init(&r, &limits);
        size_t used;
        assert_int_equal(feed(&r, text, chunk, &used), HTTP_READER_COMPLETE);
        assert_string_equal(r.req.method, "POST");
        assert_string_equal(r.req.url, "/webhook?x=1");
        assert_string_equal(http_request_header(&r.req, "x-github-event"), "ping");
        assert_int_equal(r.req.body_len, 5);
        assert_memory_equal(r.req.body, "hello", 5);
        assert_true(r.req.keep_alive);
        http_reader_free(&r);
    }
}

static void test_pipelined_requests(void **state)
{
    (void)state;
    const char *two = "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"
                      "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    struct http_reader r;
    http_reader_init(&r, &limits);
    size_t used = 0;
    assert_int_equal(http_reader_feed(&r, two, strlen(two), &used), HTTP_READER_COMPLETE);
    assert_string_equal(r.req.url, "/healthz");
    assert_true(used < strlen(two));
    http_reader_next(&r);
    size_t used2 = 0;
    assert_int_equal(http_reader_feed(&r, two + used, strlen(two) - used, &used2),
                     HTTP_READER_COMPLETE);
    assert_string_equal(r.req.url, "/metrics");
    assert_false(r.req.keep_alive);
    assert_int_equal(used + used2, strlen(two));
    http_reader_free(&r);
}

static const struct http_limits roomy_headers = {
    .max_body_bytes = 64,
    .max_header_bytes = 16384,
    .max_headers = 8,
    .read_timeout_ms = 1000,
    .idle_timeout_ms = 1000,
    .max_connections = 4,
};

static void expect_error_with(const struct http_limits *l, const char *text, int status)
{
    struct http_reader r;
    http_reader_init(&r, l);
    size_t used;
    assert_int_equal(feed(&r, text, 3, &used), HTTP_READER_ERROR);
    assert_int_equal(r.error_status, status);
    assert_non_null(r.error_reason);
    http_reader_free(&r);
}

static void expect_error(const char *text, int status)
{
    expect_error_with(&limits, text, status);
}

static void test_limits(void **state)
{
    (void)state;
    /* Declared too large: refused before a byte of body is read. */
    expect_error("POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n", 413);
    /* Chunked past the limit. */
    expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "28\r\n0123456789012345678901234567890123456789\r\n"
                 "28\r\n0123456789012345678901234567890123456789\r\n0\r\n\r\n",
                 413);
    char many[1024] = "GET / HTTP/1.1\r\n";
    for (int i = 0; i < 9; i++) {
        char h[32];
        snprintf(h, sizeof(h), "X-H%d: v\r\n", i);
        strcat(many, h);
    }
    strcat(many, "\r\n");
    expect_error(many, 431);
    char big[2048];
    snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nX-Big: %01100d\r\n\r\n", 0);
    expect_error(big, 431);
    char url[4096];
    snprintf(url, sizeof(url), "GET /%03000d HTTP/1.1\r\n\r\n", 0);
    expect_error_with(&roomy_headers, url, 414);
    expect_error("BREW /pot HTCPCP/1.0\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n", 400);
}

static void test_eof_mid_request(void **state)
{
    (void)state;
    struct http_reader r;
    http_reader_init(&r, &limits);
    size_t used;
    assert_int_equal(feed(&r, "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", 100, &used),
                     HTTP_READER_MORE);
    assert_int_equal(http_reader_eof(&r), HTTP_READER_ERROR);
    assert_int_equal(r.error_status, 400);
    http_reader_free(&r);
    /* A connection closed between requests is no error. */
    http_reader_init(&r, &limits);
    assert_int_equal(http_reader_eof(&r), HTTP_READER_MORE);
    http_reader_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_in_pieces),
        cmocka_unit_test(test_pipelined_requests),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_eof_mid_request),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
