/* The frames between hatcheryd's core and its HTTP front (front.h), on their socketpair.
 *
 * A frame is a head of four native uint32s (type, request id, meta length, body length:
 * both ends are the same binary, forked), then the meta, then the body. The meta is a list
 * of fields, each a uint32 length and its bytes (no NUL inside): the route, method, URL,
 * peer and headers of a request, or the status and content type of an answer. Both ends
 * bound every length before they allocate; a frame out of bounds ends the conversation.
 * The core reads the front's frames as hostile input: a front taken over could send any. */
#ifndef HATCHERY_FRONT_FRAME_H
#define HATCHERY_FRONT_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "hatchery/limits.h"
#include "http_server.h"

#define FRAME_MAX_FIELDS     (2 * HTTP_MAX_HEADERS_MAX + 8)
#define FRAME_MAX_META_BYTES (1024 * 1024)
/* The request bodies the core holds for the front's open calls, at most (or one body of
 * http.max_body_bytes, when that is larger). */
#define FRONT_MAX_BYTES_OPEN (64 * 1024 * 1024)
/* A line of the front's stderr the core relays; the rest of a longer one is dropped. */
#define FRONT_LOG_LINE_MAX 2048

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

struct frame_field {
    const char *data;
    size_t len;
};

struct frame_out {
    char *buf;
    size_t len, cap;
    bool error;
};

struct frame_in {
    char *buf;
    size_t len, cap;
    size_t max_body;
};

struct frame {
    struct frame_head head;
    struct frame_field fields[FRAME_MAX_FIELDS];
    size_t n_fields;
    const char *body;
};

/* Building a frame: begin, add its meta fields, end with its body. An allocation failure
 * is kept in `error` and makes frame_send() fail. */
void frame_begin(struct frame_out *o, enum frame_type type, uint32_t id);
void frame_out_string(struct frame_out *o, const char *s);
void frame_end(struct frame_out *o, const void *body, size_t body_len);
/* Queues the frame on `pipe` and takes its buffer (freed once written, or now on failure). */
int frame_send(uv_pipe_t *pipe, struct frame_out *o);
/* A write that completes before it returns: the front's first frame, before any loop. */
int frame_write_all(int fd, const char *data, size_t len);
/* libuv's allocator for reading a socketpair or pipe of the front's: one static buffer,
 * which each read callback consumes (frame_in_append copies) before the next read. */
void frame_read_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf);

/* Reading: append what arrived, then take frames off the front of the buffer. */
int frame_in_append(struct frame_in *in, const char *data, size_t len);
/* 1 and the frame at the buffer's start (its size in *ret_size), 0 for more bytes, or
 * -EPROTO for a frame out of bounds. The frame points into the buffer until consumed. */
int frame_parse(const struct frame_in *in, struct frame *f, size_t *ret_size);
void frame_in_consume(struct frame_in *in, size_t size);
char *frame_field_dup(const struct frame_field *f);
/* A decimal field within [min, max]. */
bool frame_field_long(const struct frame_field *f, long min, long max, long *ret);

/* A REQUEST frame as the core takes it: every field copied and NUL-terminated, the body
 * too (with a NUL after it). 0, -EPROTO for a frame that is not a well-formed request (a
 * route out of range, a header without its value), or -ENOMEM. */
struct frame_request {
    int route;
    struct http_request req;
    char *peer;
};
int frame_request_decode(const struct frame *f, int max_route, struct frame_request *ret);
void frame_request_free(struct frame_request *r);

#endif
