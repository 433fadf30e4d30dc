/* A growing text buffer created with its maximum size (curl's dynbuf habit): appends past
 * the maximum fail with -E2BIG and leave the buffer as it was. */
#ifndef HATCHERY_TEXTBUF_H
#define HATCHERY_TEXTBUF_H

#include <stdarg.h>
#include <stddef.h>

struct textbuf {
    char *data; /* always NUL-terminated once anything was appended */
    size_t len;
    size_t cap;
    size_t max;
    int error; /* first failure, sticky: check once at the end */
};

void textbuf_init(struct textbuf *buf, size_t max);
/* Frees the data, wiped first (and growth wipes what it leaves): a textbuf may hold a
 * GitHub answer, and so a token or a JIT config. */
void textbuf_free(struct textbuf *buf);
int textbuf_append(struct textbuf *buf, const void *data, size_t len);
int textbuf_printf(struct textbuf *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands the data over to the caller (who frees it) and empties the buffer. */
char *textbuf_steal(struct textbuf *buf, size_t *ret_len);

#endif
