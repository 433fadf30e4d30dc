/* Which libvirt networks the guest filter can apply on (network_kind.h). */
#include "network_kind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libvirt_error.h"
#include "xml_query.h"

/* The verdict for a network whose forward mode is `mode` ("" when it has no <forward>). */
static bool filterable_mode(const struct xml_query *q, const char *mode, char *why, size_t why_size)
{
    if (xml_query_true(q, "boolean(//virtualport)")) {
        char *type = xml_query_string(q, "string((//virtualport/@type)[1])");
        snprintf(why, why_size,
                 "its ports are a virtual switch's (<virtualport type='%s'>, e.g. Open vSwitch), "
                 "which libvirt's nwfilter does not filter",
                 type && type[0] ? type : "?");
        free(type);
        return false;
    }
    if (!mode[0] || strcmp(mode, "nat") == 0 || strcmp(mode, "route") == 0 ||
        strcmp(mode, "open") == 0)
        return true;
    if (strcmp(mode, "bridge") == 0) {
        if (xml_query_true(q, "boolean(/network/bridge/@name)"))
            return true;
        snprintf(why, why_size,
                 "forward mode 'bridge' without a bridge is macvtap (direct), which libvirt's "
                 "nwfilter does not filter");
        return false;
    }
    if (strcmp(mode, "private") == 0 || strcmp(mode, "vepa") == 0 ||
        strcmp(mode, "passthrough") == 0) {
        snprintf(why, why_size,
                 "forward mode '%s' is macvtap (direct), which libvirt's nwfilter does not filter",
                 mode);
        return false;
    }
    if (strcmp(mode, "hostdev") == 0) {
        snprintf(why, why_size,
                 "forward mode 'hostdev' passes a device to the guest, which libvirt's nwfilter "
                 "does not filter");
        return false;
    }
    snprintf(why, why_size, "forward mode '%s' is not one libvirt's nwfilter is known to filter",
             mode);
    return false;
}

bool network_filterable(const char *xml, char *why, size_t why_size)
{
    why[0] = '\0';
    struct xml_query q;
    bool ok = false;
    if (xml_query_open(&q, xml) < 0 || !xml_query_true(&q, "boolean(/network)")) {
        snprintf(why, why_size, "its definition cannot be read");
    } else {
        /* No <forward>: isolated (""); <forward/> without a mode: NAT, libvirt's default. */
        bool forward = xml_query_true(&q, "boolean(/network/forward)");
        char *mode = forward ? xml_query_string(&q, "string(/network/forward/@mode)") : NULL;
        ok = filterable_mode(&q, !forward ? "" : mode && mode[0] ? mode : "nat", why, why_size);
        free(mode);
    }
    xml_query_close(&q);
    return ok;
}

int network_kinds_find(virConnectPtr conn, struct host_network *ret, size_t max, char *why,
                       size_t why_size)
{
    virNetworkPtr *nets = NULL;
    int n = virConnectListAllNetworks(conn, &nets, 0);
    if (n < 0) {
        snprintf(why, why_size, "its networks cannot be listed: %s", libvirt_error());
        return -1;
    }
    size_t found = 0;
    for (int i = 0; i < n; i++) {
        const char *name = virNetworkGetName(nets[i]);
        if (name && found < max) {
            struct host_network *hn = &ret[found++];
            snprintf(hn->name, sizeof(hn->name), "%s", name);
            char *xml = virNetworkGetXMLDesc(nets[i], 0);
            char reason[sizeof(hn->unfilterable)];
            hn->unfilterable[0] = '\0';
            if (!network_filterable(xml, reason, sizeof(reason)))
                snprintf(hn->unfilterable, sizeof(hn->unfilterable), "%s", reason);
            free(xml);
        }
        virNetworkFree(nets[i]);
    }
    free(nets);
    return (int)found;
}
