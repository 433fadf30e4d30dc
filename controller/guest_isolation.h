/* Guest isolation as a precondition: before a networked guest starts on a host, hatcheryd
 * sees that what keeps the guest off the host is in place there, and refuses otherwise.
 *
 * With user-mode networking (a pool's `network: user`) the guest's connections are made
 * by the QEMU process on the host, so only the host's firewall keeps a job off the host's
 * own services: deploy/guest-firewall.sh applies it, checks it, and leaves a record for
 * this boot in GUEST_FIREWALL_RECORD, which only root can write. A host whose record is
 * missing, stale (an earlier boot) or not root's is unsafe. A remote host's firewall cannot
 * be seen from here: user-mode networking there is unsafe unless the operator says
 * `guest_isolation: unchecked` for the host.
 *
 * On a libvirt network (`network: NAME`) the guest's traffic crosses the host's bridge,
 * where libvirt's nwfilter applies hatcheryd's guest filter (guest_filter.h), local or
 * remote alike: in place once hatcheryd has defined it on the host's current connection. */
#ifndef HATCHERY_GUEST_ISOLATION_H
#define HATCHERY_GUEST_ISOLATION_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

#define GUEST_FIREWALL_RECORD "/run/hatchery-guest-firewall"

enum guest_isolation_state {
    GUEST_ISOLATION_NOT_NEEDED, /* no networked VM pool may use the host (or it runs no guests) */
    GUEST_ISOLATION_IN_PLACE,
    GUEST_ISOLATION_UNCHECKED, /* hosts[].guest_isolation: unchecked */
    GUEST_ISOLATION_MISSING,   /* unsafe: no networked guest starts there */
    GUEST_ISOLATION_STATE_MAX,
};
extern const char *const guest_isolation_state_names[GUEST_ISOLATION_STATE_MAX];

/* Whether `pool`'s guests on `host` take the guest filter: a VM on a libvirt network, on a
 * host whose isolation is required. */
bool guest_isolation_filtered(const struct config_host *host, const struct config_pool *pool);

/* Whether a guest of `pool` may start on `host`: the state, with the reason in `why` when
 * it is GUEST_ISOLATION_MISSING. `filter_missing` is NULL when the guest filter is defined
 * on the host's current connection, else why it is not. */
enum guest_isolation_state guest_isolation_check(const struct config_host *host,
                                                 const struct config_pool *pool,
                                                 const char *filter_missing, char *why,
                                                 size_t why_size);

/* The host's state over every pool of `config` that may use it: MISSING if any of them
 * would be refused there (the first reason in `why`). */
enum guest_isolation_state guest_isolation_host(const struct config *config,
                                                const struct config_host *host,
                                                const char *filter_missing, char *why,
                                                size_t why_size);

/* The firewall's record at `path`: 0 when it is root's, not writable by others and of this
 * boot; else a negative errno with the reason in `why`. */
int guest_firewall_record_check(const char *path, char *why, size_t why_size);

#endif
