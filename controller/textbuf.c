/* Bounded growing text buffer; see textbuf.h. */
#include "textbuf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "secret.h"

void textbuf_init(struct textbuf *buf, size_t max)
{
    memset(buf, 0, sizeof(*buf));
    buf->max = max;
}

void textbuf_free(struct textbuf *buf)
{
    /* Wiped, as its growth is: a GitHub answer (a token, a JIT config) is held here. */
    secret_wipe_free(buf->data, buf->cap);
    textbuf_init(buf, buf->max);
}

static int reserve(struct textbuf *buf, size_t extra)
{
    if (buf->error)
        return buf->error;
    if (extra > buf->max || buf->len + extra > buf->max) {
        buf->error = -E2BIG;
        return buf->error;
    }
    size_t need = buf->len + extra + 1;
    if (need <= buf->cap)
        return 0;
    size_t cap = buf->cap ? buf->cap : 256;
    while (cap < need)
        cap *= 2;
    if (cap > buf->max + 1)
        cap = buf->max + 1;
    /* A GitHub answer (a token, a JIT config) grows here: no copy is left behind. */
    char *grown = secret_wipe_realloc(buf->data, buf->cap, cap);
    if (!grown) {
        buf->error = -ENOMEM;
        return buf->error;
    }
    buf->data = grown;
    buf->cap = cap;
    return 0;
}

int textbuf_append(struct textbuf *buf, const void *data, size_t len)
{
    int r = reserve(buf, len);
    if (r < 0)
        return r;
    if (len)
        memcpy(buf->data + buf->len, data, len);
    buf->len += len;
    buf->data[buf->len] = 0;
    return 0;
}

int textbuf_printf(struct textbuf *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return buf->error = -EINVAL;
    int r = reserve(buf, (size_t)n);
    if (r < 0)
        return r;
    va_start(ap, fmt);
    vsnprintf(buf->data + buf->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    buf->len += (size_t)n;
    return 0;
}

char *textbuf_steal(struct textbuf *buf, size_t *ret_len)
{
    char *data = buf->data;
    if (ret_len)
        *ret_len = buf->len;
    if (!data)
        data = calloc(1, 1);
    buf->data = NULL;
    buf->len = buf->cap = 0;
    return data;
}
