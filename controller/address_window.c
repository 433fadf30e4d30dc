/* Counts per client address in fixed windows (address_window.h). */
#include "address_window.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

/* The key `address` is counted under: an IPv6 address by its /64, which one subscriber
 * usually holds whole (counting each address alone would leave a /64 unlimited); an IPv4
 * address (IPv4-mapped ones included) and anything unreadable as it is. */
static void window_key(const char *address, char *key, size_t size)
{
    struct in6_addr a;
    if (!strchr(address, ':') || inet_pton(AF_INET6, address, &a) != 1 ||
        IN6_IS_ADDR_V4MAPPED(&a)) {
        snprintf(key, size, "%s", address);
        return;
    }
    memset(&a.s6_addr[8], 0, 8);
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &a, text, sizeof(text));
    snprintf(key, size, "%s/64", text);
}

struct address_window *address_window_open(struct address_window *table, size_t n,
                                           const char *address, int64_t now_ms, int64_t window_ms)
{
    char key[sizeof(table[0].address)];
    window_key(address, key, sizeof(key));
    for (size_t i = 0; i < n; i++)
        if (table[i].address[0] && strcmp(table[i].address, key) == 0)
            return now_ms - table[i].start_ms < window_ms ? &table[i] : NULL;
    return NULL;
}

struct address_window *address_window_take(struct address_window *table, size_t n,
                                           const char *address, int64_t now_ms, int64_t window_ms,
                                           struct address_window *ret_before)
{
    char key[sizeof(table[0].address)];
    window_key(address, key, sizeof(key));
    struct address_window *w = NULL, *oldest = &table[0];
    for (size_t i = 0; i < n && !w; i++) {
        if (table[i].address[0] && strcmp(table[i].address, key) == 0)
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
    snprintf(w->address, sizeof(w->address), "%s", key);
    w->start_ms = now_ms;
    w->count = 0;
    return w;
}
