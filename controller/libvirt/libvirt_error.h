/* libvirt's last error on this thread, as text for a reason or a log line. */
#ifndef HATCHERY_LIBVIRT_ERROR_H
#define HATCHERY_LIBVIRT_ERROR_H

#include <libvirt/virterror.h>

static inline const char *libvirt_error(void)
{
    virErrorPtr e = virGetLastError();
    return e && e->message && e->message[0] ? e->message : "unknown libvirt error";
}

#endif
