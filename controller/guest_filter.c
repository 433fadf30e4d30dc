/* The guest filter on a host (guest_filter.h). */
#include "guest_filter.h"

#include <libvirt/virterror.h>
#include <stdio.h>
#include <stdlib.h>

#include "domain_xml.h"

static const char *virt_error(void)
{
    const char *m = virGetLastErrorMessage();
    return m ? m : "unknown libvirt error";
}

int guest_filter_ensure(virConnectPtr conn, bool redefine, char *why, size_t why_size)
{
    if (!redefine) {
        virNWFilterPtr found = virNWFilterLookupByName(conn, GUEST_FILTER_NAME);
        if (found) {
            virNWFilterFree(found);
            return 0;
        }
    }
    char *xml = domain_xml_guest_filter(GUEST_FILTER_NAME);
    if (!xml) {
        snprintf(why, why_size, "nwfilter %s: out of memory", GUEST_FILTER_NAME);
        return -1;
    }
    virNWFilterPtr filter = virNWFilterDefineXML(conn, xml);
    free(xml);
    if (!filter) {
        snprintf(why, why_size, "nwfilter %s cannot be defined: %s", GUEST_FILTER_NAME,
                 virt_error());
        return -1;
    }
    virNWFilterFree(filter);
    return redefine ? 0 : 1;
}
