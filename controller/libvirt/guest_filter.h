/* The guest filter: what keeps a guest on a libvirt network (a pool's `network: NAME`,
 * NAT or bridged) off its host, the host's LAN and the other guests. hatcheryd defines it
 * on each host through libvirt's nwfilter API and names it in every such guest's
 * interface, so a remote host is covered by the same code as a local one, and libvirt
 * refuses to start a domain whose filter is missing or cannot be applied. The rules are
 * domain_xml_guest_filter()'s: clean-traffic (no spoofing, no IPv6), DHCP and DNS, then
 * nothing in a private, shared, loopback, link-local, multicast or reserved range. */
#ifndef HATCHERY_GUEST_FILTER_H
#define HATCHERY_GUEST_FILTER_H

#include <libvirt/libvirt.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>

#define GUEST_FILTER_NAME "hatchery-guest-isolation"

/* The host's own IPv4 addresses, which the filter drops too (its HOST_IP parameter): a
 * host's public address is no private range, and a guest must not reach the host's
 * services there either. */
#define GUEST_FILTER_MAX_HOST_IPS 16
struct guest_filter_host {
    char ips[GUEST_FILTER_MAX_HOST_IPS][INET_ADDRSTRLEN];
    size_t n;
};

/* Fills `ret`: on a host of this machine, every IPv4 address of its interfaces; on a remote
 * host, what its name (as libvirt reports it) resolves to. Never empty (127.0.0.1 stands
 * in: libvirt refuses a filter whose variable has no value). Blocking. */
void guest_filter_host_addresses(virConnectPtr conn, bool local, struct guest_filter_host *ret);

/* Makes sure the filter is defined on `conn`: (re)defined as hatcheryd writes it when
 * `redefine` (at each connection, so an upgrade's rules and a changed definition are put
 * right, under the defined filter's UUID) or when it is missing. 0, 1 when it was missing
 * and is defined again, or -1 with libvirt's reason in `why`. Blocking. */
int guest_filter_ensure(virConnectPtr conn, bool redefine, char *why, size_t why_size);

#endif
