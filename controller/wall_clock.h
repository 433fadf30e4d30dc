/* The wall clock in Unix milliseconds: what the store records, what GitHub's times and
 * rate-limit resets compare with, and what ages are measured against. One definition for
 * every part that keeps times. */
#ifndef HATCHERY_WALL_CLOCK_H
#define HATCHERY_WALL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t wall_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
