/* A host's libvirt capabilities; see host_caps.h. */
#include "host_caps.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xml_query.h"

/* libvirt's DAC label "+UID:+GID" to its two ids; both -1 unless the whole label reads. */
static void label_ids(const char *label, long long *ret_uid, long long *ret_gid)
{
    *ret_uid = *ret_gid = -1;
    if (!label || label[0] != '+')
        return;
    char *end = NULL;
    errno = 0;
    long long uid = strtoll(label + 1, &end, 10);
    if (errno || end == label + 1 || uid < 0 || end[0] != ':' || end[1] != '+')
        return;
    const char *g = end + 2;
    long long gid = strtoll(g, &end, 10);
    if (errno || end == g || gid < 0 || *end != '\0')
        return;
    *ret_uid = uid;
    *ret_gid = gid;
}

int host_caps_parse(const char *xml, struct host_caps *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->qemu_uid = ret->qemu_gid = -1;
    struct xml_query q;
    if (xml_query_open(&q, xml) < 0 || !xml_query_true(&q, "boolean(/capabilities)")) {
        xml_query_close(&q);
        return -EINVAL;
    }
    for (int a = 0; a < ARCH_MAX; a++) {
        char expr[160];
        snprintf(expr, sizeof(expr),
                 "boolean(/capabilities/guest/arch[@name='%s']/domain[@type='kvm'])",
                 pool_arch_names[a]);
        ret->kvm[a] = xml_query_true(&q, expr);
    }
    char *label = xml_query_string(
        &q, "string(/capabilities/host/secmodel[model='dac']/baselabel[@type='qemu'])");
    label_ids(label, &ret->qemu_uid, &ret->qemu_gid);
    free(label);
    xml_query_close(&q);
    return 0;
}
