/* The libvirt provider put together: its layers (internal.h) joined by the hooks the
 * lower ones report through, its start and its end, and its provider ops table. */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "host_queue.h"
#include "log.h"

static const struct provider_ops libvirt_provider_ops;

/* A host's guests cannot be reached (host.c): they fail. */
static void guest_lost(struct guest *g, const char *why)
{
    guest_fail(g, "%s", why);
}

static void finalize(struct provisioner *p);

int provisioner_new(uv_loop_t *loop, const struct provisioner_options *o, struct provisioner **ret)
{
    virInitialize();
    virSetErrorFunc(NULL, quiet_libvirt);
    struct provisioner *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->provider.ops = &libvirt_provider_ops;
    p->hooks = (struct provisioner_hooks){.on_guest_lost = guest_lost,
                                          .on_guest_stopped = guest_stopped,
                                          .lifecycle = on_lifecycle,
                                          .finalize = finalize};
    p->channel = (struct channel_hooks){.listen = container_listen, .open = channel_open};
    p->loop = loop;
    p->controller_id = strdup(o->controller_id);
    p->state_dir = strdup(o->state_dir);
    p->boot_timeout_ms = o->boot_timeout_ms;
    p->adopt_grace_ms = o->adopt_grace_ms > 0 ? o->adopt_grace_ms : 60000;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/channels", o->state_dir);
    mkdir(path, 0700);
    snprintf(path, sizeof(path), "%s/logs", o->state_dir);
    mkdir(path, 0750);
    /* Containers' socket directories: their roots, no one on this machine, pass through. */
    snprintf(path, sizeof(path), "%s/containers", o->state_dir);
    if (mkdir(path, 0711) == 0)
        chmod(path, 0711);
    *ret = p;
    return 0;
}

static void host_unref(struct host *h)
{
    if (--h->open_handles == 0) {
        host_active_free(h);
        while (h->slots) {
            struct template_slot *next = h->slots->next;
            free(h->slots);
            h->slots = next;
        }
        while (h->images) {
            struct image_check *next = h->images->next;
            free(h->images);
            h->images = next;
        }
        uv_mutex_destroy(&h->lock);
        free(h);
    }
}

static void on_host_closed(uv_handle_t *handle)
{
    host_unref(handle->data);
}

static void on_guest_handle_closed(uv_handle_t *handle)
{
    guest_release(handle->data);
}

/* Everything is idle: close the connections and free. Guests stay as domains for the
 * reconciler of the next start. */
static void finalize(struct provisioner *p)
{
    for (struct host *h = p->hosts; h;) {
        struct host *next = h->next;
        for (struct guest *g = h->guests; g;) {
            struct guest *gn = g->next;
            if (g->channel)
                agent_channel_close(g->channel);
            if (g->pipe)
                uv_close((uv_handle_t *)g->pipe, on_pipe_closed);
            stream_bridge_close(g->channel_bridge);
            stream_bridge_close(g->console_bridge);
            uv_close((uv_handle_t *)&g->timer, on_guest_handle_closed);
            g = gn;
        }
        h->open_handles++; /* until its connection is closed */
        if (host_conn_close_queued(h, host_unref) < 0)
            h->open_handles--;
        host_queue_close(h->queue);
        uv_close((uv_handle_t *)&h->reconnect, on_host_closed);
        uv_close((uv_handle_t *)&h->grace, on_host_closed);
        uv_close((uv_handle_t *)&h->dropped_async, on_host_closed);
        h = next;
    }
    free(p->controller_id);
    free(p->state_dir);
    free(p);
}

void provisioner_free(struct provider *provider)
{
    struct provisioner *p = provider_of(provider);
    if (!p || p->closing)
        return;
    p->closing = true;
    for (struct host *h = p->hosts; h; h = h->next) {
        uv_timer_stop(&h->reconnect);
        uv_timer_stop(&h->grace);
        int pending = host_queue_pending(h->queue);
        if (pending > 0)
            log_warn("host.calls_pending", "host=%s calls=%d action=\"the stop waits for them\"",
                     h->cfg.name, pending);
    }
    if (p->works == 0)
        finalize(p);
}

/* ---- the provider ops
 * ---------------------------------------------------------------------------- */

static const struct provider_ops libvirt_provider_ops = {
    .free = provisioner_free,
    .host_add = provisioner_host_add,
    .host_update = provisioner_host_update,
    .host_up = provisioner_host_up,
    .host_status = provisioner_host_status,
    .host_image = provisioner_host_image,
    .guest_create = provisioner_guest_create,
    .guest_adopt = provisioner_guest_adopt,
    .guest_send_config = guest_send_config,
    .guest_ack_exit = guest_ack_exit,
    .guest_heard_ms = guest_heard_ms,
    .guest_teardown = guest_teardown,
    .guest_disown = guest_disown,
    .tagged_async = provisioner_tagged_domains_async,
    .orphan_volumes_async = provisioner_orphan_volumes_async,
    .remove = provisioner_domain_remove,
    .templates_want = provisioner_templates_want,
    .templates_sweep = provisioner_templates_sweep,
    .templates = provisioner_templates,
};

struct provider *provisioner_provider(struct provisioner *p)
{
    return p ? &p->provider : NULL;
}
