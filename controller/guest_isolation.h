/* Guest isolation as a precondition: before a networked guest starts on a host, hatcheryd
 * sees that what keeps the guest off the host is in place there, and refuses otherwise.
 *
 * With user-mode networking (a pool's `network: user`) the guest's connections are made
 * by the QEMU process on the host, so only the host's firewall keeps a job off the host's
 * own services: deploy/guest-firewall.sh applies it, checks it, and leaves a record for
 * this boot in GUEST_FIREWALL_RECORD, which only root can write, naming the group its
 * rules match. A host is unsafe when the record is missing, stale (an earlier boot), not
 * root's, or for a group other than the one QEMU's guests run in there (the gid of
 * libvirt's DAC label, which must also not be hatcheryd's own: its rules would match
 * hatcheryd). A remote host's firewall cannot be seen from here: user-mode networking
 * there is unsafe unless the operator says `guest_isolation: unchecked` for the host,
 * which waives this check alone.
 *
 * On a libvirt network (`network: NAME`) the guest's traffic crosses the host's bridge,
 * where libvirt's nwfilter applies hatcheryd's guest filter (guest_filter.h), local or
 * remote alike, whatever `guest_isolation` says: in place once hatcheryd has defined it on
 * the host's current connection and the network is one whose interfaces libvirt filters
 * (libvirt/network_kind.h: not macvtap, hostdev or Open vSwitch). */
#ifndef HATCHERY_GUEST_ISOLATION_H
#define HATCHERY_GUEST_ISOLATION_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "provider.h"

#define GUEST_FIREWALL_RECORD "/run/hatchery-guest-firewall"

enum guest_isolation_state {
    GUEST_ISOLATION_NOT_NEEDED, /* no networked VM pool may use the host (or it runs no guests) */
    GUEST_ISOLATION_IN_PLACE,
    GUEST_ISOLATION_UNCHECKED, /* hosts[].guest_isolation: unchecked */
    GUEST_ISOLATION_MISSING,   /* unsafe: no networked guest starts there */
    GUEST_ISOLATION_STATE_MAX,
};
extern const char *const guest_isolation_state_names[GUEST_ISOLATION_STATE_MAX];

/* Whether `pool`'s guests on `host` take the guest filter: a guest on a libvirt network,
 * on any host but libvirt's test driver. */
bool guest_isolation_filtered(const struct config_host *host, const struct config_pool *pool);

/* Whether a guest of `pool` may start on `host`, from the host's status `st` (NULL: not
 * known, which is missing where a check is needed; a libvirt network also needs the host
 * up, its filter being the current connection's): the state, with the
 * reason in `why` when it is GUEST_ISOLATION_MISSING. */
enum guest_isolation_state guest_isolation_check(const struct config_host *host,
                                                 const struct config_pool *pool,
                                                 const struct host_status *st, char *why,
                                                 size_t why_size);

/* The host's state over every pool of `config` that may use it: MISSING if any of them
 * would be refused there (the first reason in `why`). */
enum guest_isolation_state guest_isolation_host(const struct config *config,
                                                const struct config_host *host,
                                                const struct host_status *st, char *why,
                                                size_t why_size);

/* What the journal was last told of each host's isolation, so that a host refused for it
 * is said once per change, at warning level, where the runbook's troubleshooting starts
 * (`journalctl -u hatcheryd -p warning`). Hosts are kept by name: a reload keeps them. */
struct guest_isolation_log;
struct guest_isolation_log *guest_isolation_log_new(void);
void guest_isolation_log_free(struct guest_isolation_log *log);

/* Logs host.unsafe (warning, with `why`) when `host`'s state became MISSING or its reason
 * changed, and host.isolation (info) when it is no longer MISSING. 0, or -ENOMEM. */
int guest_isolation_log_note(struct guest_isolation_log *log, const char *host,
                             enum guest_isolation_state state, const char *why);

/* The firewall's record at `path`: 0 when it is root's, not writable by others, of this
 * boot, and for `qemu_gid` (the group QEMU runs in; -1 when not known, which fails), which
 * is not this process's own; else a negative errno with the reason in `why`. */
int guest_firewall_record_check(const char *path, long long qemu_gid, char *why, size_t why_size);

#endif
