/* The systemd journal's native protocol, apart from log.h: <systemd/sd-journal.h> brings
 * <syslog.h>, whose LOG_DEBUG and LOG_INFO macros would rename log.h's levels. */
#ifndef HATCHERY_JOURNAL_H
#define HATCHERY_JOURNAL_H

#include <stdbool.h>
#include <sys/uio.h>

/* Sends one entry, each iovec a `FIELD=value`. False when the journal did not take it. */
bool journal_send(const struct iovec *fields, int n_fields);

#endif
