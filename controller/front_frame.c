/* The frames between the core and the HTTP front (see front_frame.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "front_frame.h"

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

void frame_out_string(struct frame_out *o, const char *s)
{
    out_field(o, s ? s : "", s ? strlen(s) : 0);
}

/* Starts a frame; its meta fields follow, then frame_end() adds the body. */
void frame_begin(struct frame_out *o, enum frame_type type, uint32_t id)
{
    struct frame_head head = {.type = type, .id = id};
    memset(o, 0, sizeof(*o));
    out_put(o, &head, sizeof(head));
}

void frame_end(struct frame_out *o, const void *body, size_t body_len)
{
    if (o->error)
        return;
    struct frame_head *head = (struct frame_head *)o->buf;
    head->meta_len = (uint32_t)(o->len - sizeof(*head));
    head->body_len = (uint32_t)body_len;
    out_put(o, body, body_len);
}

int frame_in_append(struct frame_in *in, const char *data, size_t len)
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
int frame_parse(const struct frame_in *in, struct frame *f, size_t *ret_size)
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
        f->fields[f->n_fields++] = (struct frame_field){p, n};
        p += n;
    }
    f->body = end;
    *ret_size = size;
    return 1;
}

void frame_in_consume(struct frame_in *in, size_t size)
{
    memmove(in->buf, in->buf + size, in->len - size);
    in->len -= size;
}

char *frame_field_dup(const struct frame_field *f)
{
    char *s = malloc(f->len + 1);
    if (s) {
        memcpy(s, f->data, f->len);
        s[f->len] = 0;
    }
    return s;
}

bool frame_field_long(const struct frame_field *f, long min, long max, long *ret)
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
int frame_write_all(int fd, const char *data, size_t len)
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
int frame_send(uv_pipe_t *pipe, struct frame_out *o)
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

int frame_request_decode(const struct frame *f, int max_route, struct frame_request *r)
{
    memset(r, 0, sizeof(*r));
    long route;
    if (f->head.type != FRAME_REQUEST || f->n_fields < 4 || (f->n_fields - 4) % 2 != 0 ||
        !frame_field_long(&f->fields[0], 0, max_route, &route))
        return -EPROTO;
    r->route = (int)route;
    size_t n_headers = (f->n_fields - 4) / 2;
    r->req.method = frame_field_dup(&f->fields[1]);
    r->req.url = frame_field_dup(&f->fields[2]);
    r->peer = frame_field_dup(&f->fields[3]);
    r->req.headers = calloc(n_headers ? n_headers : 1, sizeof(*r->req.headers));
    r->req.body = malloc((size_t)f->head.body_len + 1);
    bool ok = r->req.method && r->req.url && r->peer && r->req.headers && r->req.body;
    for (size_t i = 0; ok && i < n_headers; i++) {
        r->req.headers[i].name = frame_field_dup(&f->fields[4 + 2 * i]);
        r->req.headers[i].value = frame_field_dup(&f->fields[5 + 2 * i]);
        r->req.n_headers = i + 1;
        ok = r->req.headers[i].name && r->req.headers[i].value;
    }
    if (!ok) {
        frame_request_free(r);
        return -ENOMEM;
    }
    memcpy(r->req.body, f->body, f->head.body_len);
    r->req.body[f->head.body_len] = 0;
    r->req.body_len = f->head.body_len;
    return 0;
}

void frame_request_free(struct frame_request *r)
{
    for (size_t i = 0; r->req.headers && i < r->req.n_headers; i++) {
        free(r->req.headers[i].name);
        free(r->req.headers[i].value);
    }
    free(r->req.headers);
    free((char *)r->req.method);
    free(r->req.url);
    free(r->req.body);
    free(r->peer);
    memset(r, 0, sizeof(*r));
}

void frame_read_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    (void)handle;
    (void)suggested;
    static char read_buf[64 * 1024];
    *buf = uv_buf_init(read_buf, sizeof(read_buf));
}
