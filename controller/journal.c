/* The systemd journal's native protocol, by libsystemd; see journal.h. */
#include "journal.h"

#include <unistd.h>

#define SD_JOURNAL_SUPPRESS_LOCATION /* the entry names no source file or line */
#include <systemd/sd-journal.h>

/* libsystemd drops an entry without a word when the journal's socket is not there: look
 * first, so that the caller can write the line elsewhere. */
bool journal_send(const struct iovec *fields, int n_fields)
{
    if (access("/run/systemd/journal/socket", W_OK) != 0)
        return false;
    return sd_journal_sendv(fields, n_fields) == 0;
}
