/* What a host's libvirt capabilities (virConnectGetCapabilities, libvirt's "Driver
 * capabilities XML format") tell hatcheryd, read with libxml2's XPath:
 *  - KVM per guest arch: a `<guest>` whose `<arch name='ARCH'>` offers
 *    `<domain type='kvm'/>`. libvirt lists a guest per arch its QEMU binaries serve, in
 *    its own order, and offers kvm only for those the host's /dev/kvm runs (on a Power
 *    host: ppc64 and ppc64le, not ppc);
 *  - the uid and gid QEMU's guests run as: the DAC security model's `qemu` base label
 *    `+UID:+GID` (absent with `security_driver = "none"` and no user set). */
#ifndef HATCHERY_HOST_CAPS_H
#define HATCHERY_HOST_CAPS_H

#include <stdbool.h>

#include "config.h"

struct host_caps {
    bool kvm[ARCH_MAX];
    long long qemu_uid; /* -1: not said */
    long long qemu_gid; /* -1: not said */
};

/* 0, or -EINVAL when `xml` is not a capabilities document (nothing offered, uid and gid -1). */
int host_caps_parse(const char *xml, struct host_caps *ret);

#endif
