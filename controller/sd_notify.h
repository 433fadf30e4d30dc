/* systemd's notify protocol (READY=1, WATCHDOG=1, STOPPING=1), without libsystemd. */
#ifndef HATCHERY_SD_NOTIFY_H
#define HATCHERY_SD_NOTIFY_H

#include <stdint.h>

/* Sends `state` to $NOTIFY_SOCKET. Returns 0 when sent, 0 when there is no socket to send
 * to, or a negative errno. */
int sd_notify_send(const char *state);
/* The watchdog interval systemd asked for (WATCHDOG_USEC, for this pid), in microseconds;
 * 0 when none. */
uint64_t sd_watchdog_usec(void);

#endif
