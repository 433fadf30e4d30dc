/* libFuzzer target for the frames the core reads from its HTTP front (front_frame.c): the
 * bytes are what a front taken over by an attacker could write on the socketpair, arriving
 * in pieces. Every frame must parse or be refused within its bounds; a request that
 * decodes is encoded again and must read back the same, field by field. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "front_frame.h"

static void same_after_encoding(const struct frame_request *r, uint32_t id)
{
    struct frame_out o;
    char route[8];
    snprintf(route, sizeof(route), "%d", r->route);
    frame_begin(&o, FRAME_REQUEST, id);
    frame_out_string(&o, route);
    frame_out_string(&o, r->req.method);
    frame_out_string(&o, r->req.url);
    frame_out_string(&o, r->peer);
    for (size_t i = 0; i < r->req.n_headers; i++) {
        frame_out_string(&o, r->req.headers[i].name);
        frame_out_string(&o, r->req.headers[i].value);
    }
    frame_end(&o, r->req.body, r->req.body_len);
    if (o.error) {
        free(o.buf);
        return;
    }
    struct frame_in in = {.buf = o.buf, .len = o.len, .cap = o.len, .max_body = r->req.body_len};
    static struct frame f;
    size_t size;
    struct frame_request again;
    if (frame_parse(&in, &f, &size) != 1 || size != o.len ||
        frame_request_decode(&f, FRONT_ROUTE_MAX - 1, &again) != 0)
        abort();
    if (again.route != r->route || strcmp(again.req.method, r->req.method) != 0 ||
        strcmp(again.req.url, r->req.url) != 0 || strcmp(again.peer, r->peer) != 0 ||
        again.req.n_headers != r->req.n_headers || again.req.body_len != r->req.body_len ||
        memcmp(again.req.body, r->req.body, r->req.body_len) != 0)
        abort();
    for (size_t i = 0; i < r->req.n_headers; i++)
        if (strcmp(again.req.headers[i].name, r->req.headers[i].name) != 0 ||
            strcmp(again.req.headers[i].value, r->req.headers[i].value) != 0)
            abort();
    frame_request_free(&again);
    free(o.buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The first byte cuts the stream into reads of 1 to 256 bytes. */
    size_t piece = size ? (size_t)data[0] + 1 : 1;
    struct frame_in in = {.max_body = 64 * 1024};
    static struct frame f;
    for (size_t off = size ? 1 : 0; off < size; off += piece) {
        size_t n = size - off < piece ? size - off : piece;
        if (frame_in_append(&in, (const char *)data + off, n) < 0)
            break;
        for (;;) {
            size_t frame_size;
            int r = frame_parse(&in, &f, &frame_size);
            if (r <= 0) {
                if (r < 0)
                    goto done; /* the core ends the conversation here */
                break;
            }
            if (frame_size > in.len)
                abort();
            if (f.head.type == FRAME_REQUEST) {
                struct frame_request req;
                if (frame_request_decode(&f, FRONT_ROUTE_MAX - 1, &req) == 0) {
                    if (req.route < 0 || req.route >= FRONT_ROUTE_MAX)
                        abort();
                    http_request_header(&req.req, "X-Hub-Signature-256");
                    same_after_encoding(&req, f.head.id);
                    frame_request_free(&req);
                }
            } else if (f.head.type == FRAME_REJECTED && f.n_fields == 4) {
                long status;
                if (frame_field_long(&f.fields[0], 400, 499, &status) &&
                    (status < 400 || status > 499))
                    abort();
            }
            frame_in_consume(&in, frame_size);
        }
    }
done:
    free(in.buf);
    return 0;
}
