/* The guest filter on a host (guest_filter.h). */
#include "guest_filter.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <libvirt/virterror.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "domain_xml.h"
#include "libvirt_error.h"

int guest_filter_ensure(virConnectPtr conn, bool redefine, char *why, size_t why_size)
{
    /* A filter defined before (by an earlier start, or an earlier connection) is replaced
     * under its own UUID: under a new one, libvirt refuses the name ("already exists with
     * uuid"), and the host would count as one without guest isolation. */
    char uuid[VIR_UUID_STRING_BUFLEN] = "";
    virNWFilterPtr found = virNWFilterLookupByName(conn, GUEST_FILTER_NAME);
    if (found) {
        int r = virNWFilterGetUUIDString(found, uuid);
        virNWFilterFree(found);
        if (!redefine)
            return 0;
        if (r < 0)
            uuid[0] = '\0';
    }
    char *xml = domain_xml_guest_filter(GUEST_FILTER_NAME, uuid[0] ? uuid : NULL);
    if (!xml) {
        snprintf(why, why_size, "nwfilter %s: out of memory", GUEST_FILTER_NAME);
        return -1;
    }
    virNWFilterPtr filter = virNWFilterDefineXML(conn, xml);
    free(xml);
    if (!filter) {
        snprintf(why, why_size, "nwfilter %s cannot be defined: %s", GUEST_FILTER_NAME,
                 libvirt_error());
        return -1;
    }
    virNWFilterFree(filter);
    return redefine ? 0 : 1;
}

static void add_address(struct guest_filter_host *ret, const struct in_addr *a)
{
    char ip[INET_ADDRSTRLEN];
    if (!inet_ntop(AF_INET, a, ip, sizeof(ip)) || ret->n >= GUEST_FILTER_MAX_HOST_IPS)
        return;
    for (size_t i = 0; i < ret->n; i++)
        if (strcmp(ret->ips[i], ip) == 0)
            return;
    snprintf(ret->ips[ret->n++], sizeof(ret->ips[0]), "%s", ip);
}

void guest_filter_host_addresses(virConnectPtr conn, bool local, struct guest_filter_host *ret)
{
    memset(ret, 0, sizeof(*ret));
    if (local) {
        struct ifaddrs *all = NULL;
        if (getifaddrs(&all) == 0)
            for (struct ifaddrs *i = all; i; i = i->ifa_next)
                if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
                    add_address(ret, &((const struct sockaddr_in *)i->ifa_addr)->sin_addr);
        freeifaddrs(all);
    } else {
        char *name = virConnectGetHostname(conn);
        struct addrinfo hints = {.ai_family = AF_INET}, *res = NULL;
        if (name && getaddrinfo(name, NULL, &hints, &res) == 0)
            for (struct addrinfo *r = res; r; r = r->ai_next)
                add_address(ret, &((const struct sockaddr_in *)r->ai_addr)->sin_addr);
        if (res)
            freeaddrinfo(res);
        free(name);
    }
    if (ret->n == 0)
        snprintf(ret->ips[ret->n++], sizeof(ret->ips[0]), "127.0.0.1");
}
