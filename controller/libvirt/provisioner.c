/* The libvirt provider put together: its layers (internal.h) joined by the hooks the
 * lower ones report through, its start and its end, and its provider ops table. */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
    p->hooks = (struct provisioner_hooks){.guest_lost = guest_lost,
                                          .guest_stopped = guest_stopped,
                                          .lifecycle = on_lifecycle,
                                          .finalize = finalize};
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
    *ret = p;
    return 0;
}

static void on_host_closed(uv_handle_t *handle)
{
    struct host *h = handle->data;
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
        host_conn_drop(h);
        uv_close((uv_handle_t *)&h->reconnect, on_host_closed);
        uv_close((uv_handle_t *)&h->grace, on_host_closed);
        h = next;
    }
    free(p->controller_id);
    free(p->state_dir);
    free(p);
}

void provisioner_free(struct provisioner *p)
{
    if (!p || p->closing)
        return;
    p->closing = true;
    for (struct host *h = p->hosts; h; h = h->next) {
        uv_timer_stop(&h->reconnect);
        uv_timer_stop(&h->grace);
    }
    if (p->works == 0)
        finalize(p);
}

/* ---- the provider ops
 * ---------------------------------------------------------------------------- */

static struct provisioner *provider_of(struct provider *p)
{
    return (struct provisioner *)p;
}

static void op_free(struct provider *p)
{
    provisioner_free(provider_of(p));
}
static int op_host_add(struct provider *p, const struct config_host *host)
{
    return provisioner_host_add(provider_of(p), host);
}
static int op_host_update(struct provider *p, const struct config_host *host)
{
    return provisioner_host_update(provider_of(p), host);
}
static bool op_host_up(struct provider *p, const char *host)
{
    return provisioner_host_up(provider_of(p), host);
}
static int op_host_status(struct provider *p, const char *host, struct host_status *ret)
{
    return provisioner_host_status(provider_of(p), host, ret);
}
static int op_host_image(struct provider *p, const char *host, const struct config_pool *pool,
                         struct image_status *ret)
{
    return provisioner_host_image(provider_of(p), host, pool, ret);
}
static int op_guest_create(struct provider *p, const char *host, const struct guest_spec *spec,
                           const struct guest_events *events, void *data, struct guest **ret)
{
    return provisioner_guest_create(provider_of(p), host, spec, events, data, ret);
}
static int op_guest_adopt(struct provider *p, const char *host, const struct guest_spec *spec,
                          const struct guest_events *events, void *data, struct guest **ret)
{
    return provisioner_guest_adopt(provider_of(p), host, spec, events, data, ret);
}
static int op_tagged_async(struct provider *p, const char *host, provider_names_cb cb, void *data)
{
    return provisioner_tagged_domains_async(provider_of(p), host, cb, data);
}
static int op_orphan_volumes_async(struct provider *p, const char *host, provider_names_cb cb,
                                   void *data)
{
    return provisioner_orphan_volumes_async(provider_of(p), host, cb, data);
}
static int op_remove(struct provider *p, const char *host, const char *name, provider_done_cb cb,
                     void *data)
{
    return provisioner_domain_remove(provider_of(p), host, name, cb, data);
}
static void op_templates_want(struct provider *p, const char *host, const struct config_pool *pool,
                              int n)
{
    provisioner_templates_want(provider_of(p), host, pool, n);
}
static void op_templates_sweep(struct provider *p, const char *host)
{
    provisioner_templates_sweep(provider_of(p), host);
}
static int op_templates(struct provider *p, const char *host, struct template_status *out,
                        size_t max, size_t *ret_n)
{
    return provisioner_templates(provider_of(p), host, out, max, ret_n);
}

static const struct provider_ops libvirt_provider_ops = {
    .free = op_free,
    .host_add = op_host_add,
    .host_update = op_host_update,
    .host_up = op_host_up,
    .host_status = op_host_status,
    .host_image = op_host_image,
    .guest_create = op_guest_create,
    .guest_adopt = op_guest_adopt,
    .guest_send_config = guest_send_config,
    .guest_ack_exit = guest_ack_exit,
    .guest_teardown = guest_teardown,
    .guest_disown = guest_disown,
    .tagged_async = op_tagged_async,
    .orphan_volumes_async = op_orphan_volumes_async,
    .remove = op_remove,
    .templates_want = op_templates_want,
    .templates_sweep = op_templates_sweep,
    .templates = op_templates,
};

struct provider *provisioner_provider(struct provisioner *p)
{
    return p ? &p->provider : NULL;
}
