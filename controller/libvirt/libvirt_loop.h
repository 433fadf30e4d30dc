/* libvirt's event loop implemented on libuv (virEventRegisterImpl): libvirt's sockets,
 * keepalive timers, domain lifecycle events and stream events run as callbacks on
 * hatcheryd's one loop. A connection-close callback does not: libvirt calls it from
 * whichever thread finds the connection closed, often a worker whose call waited on it
 * (host.c hands it to the loop). A call that waits for a host's answer must not be made
 * on the loop thread: the keepalive that would end it runs here. libvirt may add, change
 * or remove watches from any thread (a worker driving a slow call does), so changes made
 * off the loop thread are queued and applied on the loop through a uv_async. */
#ifndef HATCHERY_LIBVIRT_LOOP_H
#define HATCHERY_LIBVIRT_LOOP_H

#include <uv.h>

/* Registers the implementation; call once, before the first virConnectOpen. */
int libvirt_loop_register(uv_loop_t *loop);
/* Closes the handles still open (libvirt must have released its watches). */
void libvirt_loop_close(void);

#endif
