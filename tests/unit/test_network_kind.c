/* Which libvirt networks the guest filter can apply on (controller/libvirt/network_kind.h),
 * read from the definitions libvirt itself gives back: networks of every forward mode of
 * libvirt's "Network XML format" defined on its test driver, then listed as hatcheryd does
 * at a host's connection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libvirt/network_kind.h"

static const struct {
    const char *name, *xml;
    const char *refused; /* a slice of the reason, or NULL: the filter applies */
} networks[] = {
    {"nat",
     "<network><name>nat</name><forward mode='nat'/><bridge name='virbr7'/>"
     "<ip address='192.168.77.1' netmask='255.255.255.0'/></network>",
     NULL},
    {"plain",
     "<network><name>plain</name><forward/><bridge name='virbr8'/>"
     "<ip address='192.168.78.1' netmask='255.255.255.0'/></network>",
     NULL},
    {"routed",
     "<network><name>routed</name><forward mode='route'/><bridge name='virbr9'/>"
     "<ip address='192.168.79.1' netmask='255.255.255.0'/></network>",
     NULL},
    {"isolated", "<network><name>isolated</name><bridge name='virbr10'/></network>", NULL},
    {"hostbridge",
     "<network><name>hostbridge</name><forward mode='bridge'/>"
     "<bridge name='br0'/></network>",
     NULL},
    {"ovs",
     "<network><name>ovs</name><forward mode='bridge'/><bridge name='ovsbr0'/>"
     "<virtualport type='openvswitch'/></network>",
     "virtualport type='openvswitch'"},
    {"macvtap",
     "<network><name>macvtap</name><forward mode='bridge'>"
     "<interface dev='eth0'/></forward></network>",
     "macvtap"},
    {"private",
     "<network><name>private</name><forward mode='private'>"
     "<interface dev='eth1'/></forward></network>",
     "forward mode 'private' is macvtap"},
    {"vepa",
     "<network><name>vepa</name><forward mode='vepa'><interface dev='eth2'/>"
     "</forward></network>",
     "forward mode 'vepa' is macvtap"},
    {"sriov",
     "<network><name>sriov</name><forward mode='hostdev' managed='yes'>"
     "<pf dev='eth3'/></forward></network>",
     "forward mode 'hostdev'"},
};
#define N_NETWORKS (sizeof(networks) / sizeof(*networks))

static void every_forward_mode_as_libvirt_gives_it_back(void **state)
{
    (void)state;
    virConnectPtr conn = virConnectOpen("test:///default");
    assert_non_null(conn);
    for (size_t i = 0; i < N_NETWORKS; i++) {
        virNetworkPtr net = virNetworkDefineXML(conn, networks[i].xml);
        if (!net)
            fail_msg("libvirt refused network %s", networks[i].name);
        virNetworkFree(net);
    }
    struct host_network found[HOST_NETWORKS_MAX];
    char why[256] = "";
    int n = network_kinds_find(conn, found, HOST_NETWORKS_MAX, why, sizeof(why));
    assert_true(n >= (int)N_NETWORKS); /* and the test driver's own "default" */
    for (size_t i = 0; i < N_NETWORKS; i++) {
        const struct host_network *hn = NULL;
        for (int k = 0; k < n; k++)
            if (strcmp(found[k].name, networks[i].name) == 0)
                hn = &found[k];
        if (!hn)
            fail_msg("network %s not listed", networks[i].name);
        if (networks[i].refused) {
            if (!strstr(hn->unfilterable, networks[i].refused))
                fail_msg("%s: \"%s\" lacks \"%s\"", hn->name, hn->unfilterable,
                         networks[i].refused);
        } else if (hn->unfilterable[0]) {
            fail_msg("%s refused: %s", hn->name, hn->unfilterable);
        }
    }
    /* At most `max`: the rest are not listed. */
    assert_int_equal(network_kinds_find(conn, found, 3, why, sizeof(why)), 3);
    virConnectClose(conn);
}

static void what_is_not_a_network_is_refused(void **state)
{
    (void)state;
    const char *bad[] = {NULL, "", "not xml", "<domain/>",
                         "<network><forward mode='x'/></network>"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        char why[256];
        assert_false(network_filterable(bad[i], why, sizeof(why)));
        assert_true(why[0] != '\0');
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_forward_mode_as_libvirt_gives_it_back),
        cmocka_unit_test(what_is_not_a_network_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
