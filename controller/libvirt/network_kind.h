/* Whether libvirt's nwfilter can keep a guest on a libvirt network off its host. libvirt
 * applies a domain's <filterref> to tap and veth devices only: those of a network it
 * bridges itself (forward mode nat, route or open, or no forward: isolated) and of a
 * Linux bridge of the host's (forward mode bridge with a <bridge name>, without
 * <virtualport>). On any other network the <filterref> is in the domain's XML and nothing
 * filters the wire: macvtap ("direct": forward mode bridge without a bridge, private, vepa,
 * passthrough), SR-IOV (hostdev), and Open vSwitch bridges (a <virtualport>). hatcheryd
 * starts no guest there (guest_isolation.h). Read from libvirt's "Network XML format" with
 * libxml2's XPath. */
#ifndef HATCHERY_NETWORK_KIND_H
#define HATCHERY_NETWORK_KIND_H

#include <libvirt/libvirt.h>
#include <stdbool.h>
#include <stddef.h>

#include "provider.h"

/* true when the guest filter applies on the network whose definition is `xml`; else
 * false with the reason in `why` (an unreadable definition is one it cannot apply on). */
bool network_filterable(const char *xml, char *why, size_t why_size);

/* The networks defined on `conn`, each with network_filterable()'s answer, at most `max`
 * of them: how many, or -1 with libvirt's reason in `why`. Blocking. */
int network_kinds_find(virConnectPtr conn, struct host_network *ret, size_t max, char *why,
                       size_t why_size);

#endif
