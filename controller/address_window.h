/* Counts per client address in fixed windows of time, in a table of a fixed size whose
 * entry with the oldest window makes room for a new address: what anyone on the network
 * can cause is bounded per address (the front's bad signatures, the core's log lines of
 * refused deliveries), and the table is bounded however many addresses there are. */
#ifndef HATCHERY_ADDRESS_WINDOW_H
#define HATCHERY_ADDRESS_WINDOW_H

#include <stddef.h>
#include <stdint.h>

/* An IPv6 address is counted by its /64 (the entry's `address` is then "PREFIX::/64"). */
struct address_window {
    char address[64]; /* "" for an entry never used */
    int64_t start_ms; /* when its window began */
    int64_t count;
};

/* The entry of `address` whose window is open at `now_ms` (began less than `window_ms`
 * before), or NULL. */
struct address_window *address_window_open(struct address_window *table, size_t n,
                                           const char *address, int64_t now_ms, int64_t window_ms);
/* The entry of `address`, its window open: its own when open, its own restarted (count 0)
 * when its window ended, else the entry whose window began first, taken for it. What a
 * restarted or taken entry held before (count 0 when nothing) is copied to `ret_before`
 * when given, so that a count is not lost with its place. */
struct address_window *address_window_take(struct address_window *table, size_t n,
                                           const char *address, int64_t now_ms, int64_t window_ms,
                                           struct address_window *ret_before);

#endif
