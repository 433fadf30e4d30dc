/* Counts per client address in fixed windows (address_window.h). */
#include "address_window.h"

#include <stdio.h>
#include <string.h>

struct address_window *address_window_open(struct address_window *table, size_t n,
                                           const char *address, int64_t now_ms, int64_t window_ms)
{
    for (size_t i = 0; i < n; i++)
        if (table[i].address[0] && strcmp(table[i].address, address) == 0)
            return now_ms - table[i].start_ms < window_ms ? &table[i] : NULL;
    return NULL;
}

struct address_window *address_window_take(struct address_window *table, size_t n,
                                           const char *address, int64_t now_ms, int64_t window_ms,
                                           struct address_window *ret_before)
{
    struct address_window *w = NULL, *oldest = &table[0];
    for (size_t i = 0; i < n && !w; i++) {
        if (table[i].address[0] && strcmp(table[i].address, address) == 0)
            w = &table[i];
        else if (table[i].start_ms < oldest->start_ms)
            oldest = &table[i];
    }
    if (w && now_ms - w->start_ms < window_ms)
        return w;
    if (!w)
        w = oldest;
    if (ret_before)
        *ret_before = *w;
    snprintf(w->address, sizeof(w->address), "%s", address);
    w->start_ms = now_ms;
    w->count = 0;
    return w;
}
