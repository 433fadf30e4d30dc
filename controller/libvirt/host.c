/* libvirt hosts: one connection each, opened off the loop, kept alive, reopened with
 * backoff when it drops; the provisioner itself (new, free) and its provider ops table. */
#include "internal.h"

#include <errno.h>
#include <libvirt/virterror.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "domain_xml.h"
#include "libvirt_error.h"
#include "guest_filter.h"
#include "network_kind.h"
#include "host_caps.h"
#include "host_queue.h"
#include "hatchery/limits.h"
#include "stream_bridge.h"
#include "log.h"

static void host_connect(struct host *h);

struct host *host_find(struct provisioner *p, const char *name)
{
    for (struct host *h = p->hosts; h; h = h->next)
        if (strcmp(h->cfg.name, name) == 0)
            return h;
    return NULL;
}

int host_queue_work(struct host *h, uv_work_t *w, uv_work_cb work, uv_after_work_cb done)
{
    int r = host_queue_submit(h->queue, w, work, done);
    if (r == 0)
        h->prov->works++;
    return r;
}

/* Every after-work callback starts here: true means the provisioner is shutting down and
 * the callback must only release its own memory. */
bool work_done_closing(struct provisioner *p)
{
    p->works--;
    if (!p->closing)
        return false;
    if (p->works == 0)
        p->hooks.finalize(p);
    return true;
}

/* ---- hosts ---------------------------------------------------------------------------- */

static bool host_has_conn(struct host *h)
{
    uv_mutex_lock(&h->lock);
    bool has = h->conn != NULL;
    uv_mutex_unlock(&h->lock);
    return has;
}

/* The host's connection for one worker's calls, as a reference of its own (closed with
 * virConnectClose when done), or NULL when there is none or libvirt dropped it
 * (`even_dropped` takes a dropped one anyway: its calls fail, but a teardown's are tried).
 * `ret_kvm` (may be NULL) gets what KVM offers, per arch. */
virConnectPtr host_conn_ref(struct host *h, bool even_dropped, bool ret_kvm[ARCH_MAX])
{
    uv_mutex_lock(&h->lock);
    virConnectPtr conn = h->conn && (even_dropped || !h->dropped) ? h->conn : NULL;
    if (conn)
        virConnectRef(conn);
    if (ret_kvm)
        memcpy(ret_kvm, h->kvm, sizeof(h->kvm));
    uv_mutex_unlock(&h->lock);
    return conn;
}

/* Connected, and not dropped by libvirt. */
bool host_usable(struct host *h)
{
    uv_mutex_lock(&h->lock);
    bool usable = h->conn && !h->dropped;
    uv_mutex_unlock(&h->lock);
    return usable;
}

bool host_dropped(struct host *h)
{
    uv_mutex_lock(&h->lock);
    bool dropped = h->dropped;
    uv_mutex_unlock(&h->lock);
    return dropped;
}

static void on_reconnect_timer(uv_timer_t *t)
{
    host_connect(t->data);
}

static void host_down(struct host *h, const char *why)
{
    if (!h->up && !h->connecting && !host_has_conn(h))
        return;
    bool was_up = h->up;
    h->up = false;
    snprintf(h->error, sizeof(h->error), "%s", why);
    if (was_up)
        log_error("host.down", "host=%s uri=%s reason=\"%s\"", h->cfg.name, h->cfg.uri, why);
    long delay = RECONNECT_MIN_MS;
    for (int i = 0; i < h->attempt && delay < RECONNECT_MAX_MS; i++)
        delay *= 2;
    if (delay > RECONNECT_MAX_MS)
        delay = RECONNECT_MAX_MS;
    h->attempt++;
    uv_timer_start(&h->reconnect, on_reconnect_timer, (uint64_t)delay, 0);
}

/* Guests on a host that stays away are failed: nobody can reach them. Their domains, if
 * the host comes back, carry our tag and are removed by the reconciler. */
static void host_give_up_guests(struct host *h)
{
    for (struct guest *g = h->guests; g; g = g->next) {
        char why[512];
        snprintf(why, sizeof(why), "host %s went down (%s)", h->cfg.name, h->error);
        h->prov->hooks.on_guest_lost(g, why);
    }
}

static void on_grace_timer(uv_timer_t *t)
{
    struct host *h = t->data;
    if (!h->up) {
        log_warn("host.guests_given_up", "host=%s after_s=%lld", h->cfg.name,
                 (long long)h->cfg.down_grace_s);
        host_give_up_guests(h);
    }
}

/* libvirt calls this from whichever thread finds the connection closed: a worker whose
 * call failed as often as the loop. The loop is told (dropped_async), and acts there. */
static void on_close_cb(virConnectPtr conn, int reason, void *opaque)
{
    (void)conn;
    struct host *h = opaque;
    /* Inside libvirt's callback the connection must not be closed (that deadlocks): the
     * reconnect, on a worker, drops the old one first. */
    uv_mutex_lock(&h->lock);
    h->dropped = true;
    h->drop_reason = reason;
    if (!h->finished) /* else the provisioner is gone, its connection being closed */
        uv_async_send(&h->dropped_async);
    uv_mutex_unlock(&h->lock);
}

static void on_dropped(uv_async_t *async)
{
    struct host *h = async->data;
    static const char *const reasons[] = {"error", "end of file", "keepalive timeout",
                                          "client closed"};
    uv_mutex_lock(&h->lock);
    int reason = h->drop_reason;
    bool finished = h->finished;
    uv_mutex_unlock(&h->lock);
    if (finished)
        return;
    const char *why = reason >= 0 && reason < 4 ? reasons[reason] : "connection closed";
    host_down(h, why);
    /* A libvirtd restart (an upgrade) or a short network cut must not kill running jobs:
     * QEMU and the agent channels live on without libvirtd. The guests are kept for
     * down_grace_s; if the host is back by then, they go on, else they are failed. */
    size_t kept = 0;
    for (struct guest *g = h->guests; g; g = g->next)
        kept += g->state < GUEST_DELETING;
    if (h->cfg.down_grace_s == 0) {
        host_give_up_guests(h);
        return;
    }
    if (kept) {
        log_warn("host.guests_kept", "host=%s guests=%zu grace_s=%lld", h->cfg.name, kept,
                 (long long)h->cfg.down_grace_s);
        uv_timer_start(&h->grace, on_grace_timer, (uint64_t)h->cfg.down_grace_s * 1000, 0);
    }
}

/* Takes the host's connection away (NULL when it had none). */
static virConnectPtr host_conn_take(struct host *h)
{
    uv_mutex_lock(&h->lock);
    virConnectPtr old = h->conn;
    h->conn = NULL;
    h->dropped = false;
    uv_mutex_unlock(&h->lock);
    return old;
}

/* Blocking: each is a call to the host (on a remote one, even dropping a callback), and
 * on the loop thread it would wait without end, as libvirt's keepalive runs there. */
static void conn_close(virConnectPtr conn, int lifecycle_id)
{
    if (lifecycle_id >= 0)
        virConnectDomainEventDeregisterAny(conn, lifecycle_id);
    virConnectUnregisterCloseCallback(conn, on_close_cb);
    virConnectClose(conn);
}

/* On the connect worker: takes the host's old connection away and closes it (workers
 * still using it hold references of their own). */
void host_conn_drop(struct host *h)
{
    virConnectPtr old = host_conn_take(h);
    if (!old)
        return;
    conn_close(old, h->lifecycle_id);
    h->lifecycle_id = -1;
}

struct conn_closing {
    uv_work_t work;
    struct host *host;
    virConnectPtr conn;
    int lifecycle_id;
    void (*then)(struct host *h);
};

static void conn_closing_work(uv_work_t *w)
{
    struct conn_closing *c = w->data;
    conn_close(c->conn, c->lifecycle_id);
}

static void conn_closing_done(uv_work_t *w, int status)
{
    struct conn_closing *c = w->data;
    (void)status;
    c->then(c->host);
    free(c);
}

int host_conn_close_queued(struct host *h, void (*then)(struct host *h))
{
    uv_mutex_lock(&h->lock);
    h->finished = true; /* the callbacks that still come drop what they bring */
    uv_mutex_unlock(&h->lock);
    virConnectPtr old = host_conn_take(h);
    if (!old)
        return -ENOENT;
    int lifecycle_id = h->lifecycle_id;
    h->lifecycle_id = -1;
    struct conn_closing *c = malloc(sizeof(*c));
    if (c) {
        *c = (struct conn_closing){
            .host = h, .conn = old, .lifecycle_id = lifecycle_id, .then = then};
        c->work.data = c;
        if (host_queue_submit(h->queue, &c->work, conn_closing_work, conn_closing_done) == 0)
            return 0;
        free(c);
    }
    conn_close(old, lifecycle_id); /* no memory or no thread: here */
    then(h);
    return 0;
}

void quiet_libvirt(void *data, virErrorPtr error)
{
    /* libvirt prints every error by default; we read them with virGetLastError and log
     * them once, where they matter. */
    (void)data;
    (void)error;
}

/* The uid QEMU runs guests as, from the capabilities' DAC security model: <secmodel>
 * <model>dac</model> <baselabel type='qemu'>+64055:+64055</baselabel>; -1 when absent. */
/* How a host's agent channels and consoles are reached. `socket` puts QEMU's channel socket
 * and its console file under state_dir, which only this daemon's user may enter: that
 * works only where QEMU runs as root (or as this user). On a stock host QEMU runs as
 * libvirt-qemu with dynamic ownership, so `auto` takes streams there, as for a remote
 * host; an LXC host keeps its socket (the container's socket directory is bind-mounted). */
static void host_transport(struct host *h, long long qemu_uid)
{
    /* Without a DAC label (security_driver = "none") the uid is not known: the socket. */
    if (h->cfg.agent_transport != TRANSPORT_AUTO || h->lxc || h->simulated || qemu_uid < 0 ||
        config_host_streams(&h->cfg))
        return;
    bool streams = qemu_uid != 0 && qemu_uid != (long long)getuid();
    if (streams != h->streams || !h->transport_logged)
        log_info("host.transport", "host=%s transport=%s qemu_uid=%lld", h->cfg.name,
                 streams ? "stream" : "socket", qemu_uid);
    h->streams = streams;
    h->transport_logged = true;
}

static void connect_work(uv_work_t *w)
{
    struct host *h = w->data;
    /* libvirt's error handler is per thread here: keep its default printer quiet. */
    host_conn_drop(h);
    struct host_found *f = &h->found;
    memset(f, 0, sizeof(*f));
    f->qemu_uid = f->qemu_gid = -1;
    f->conn = virConnectOpen(h->cfg.uri);
    if (!f->conn) {
        snprintf(f->error, sizeof(f->error), "%s", libvirt_error());
        return;
    }
    if (h->ever_up) {
        virDomainPtr *doms = NULL;
        int n = virConnectListAllDomains(f->conn, &doms, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
        f->inventory_failed = n < 0;
        f->active = n > 0 ? calloc((size_t)n, sizeof(char *)) : NULL;
        for (int i = 0; i < n; i++) {
            const char *name = virDomainGetName(doms[i]);
            if (f->active && name)
                f->active[f->n_active++] = strdup(name);
            virDomainFree(doms[i]);
        }
        free(doms);
        f->inventory_failed = f->inventory_failed || (n > 0 && !f->active);
    }
    char *caps = virConnectGetCapabilities(f->conn);
    virConnectGetVersion(f->conn, &f->hypervisor_version);
    virConnectGetLibVersion(f->conn, &f->libvirt_version);
    struct host_caps found;
    host_caps_parse(caps, &found);
    free(caps);
    memcpy(f->kvm, found.kvm, sizeof(f->kvm));
    f->qemu_uid = found.qemu_uid;
    f->qemu_gid = found.qemu_gid;
    if (!h->simulated)
        f->n_networks = network_kinds_find(f->conn, f->networks, HOST_NETWORKS_MAX,
                                           f->networks_error, sizeof(f->networks_error));
    /* The guest filter, as this hatcheryd writes it, on every host: a guest (VM or
     * container) on one of its libvirt networks starts only once it is there
     * (guest_isolation.h). */
    if (!h->simulated) {
        f->filter_tried = true;
        guest_filter_host_addresses(f->conn, h->local_files, &f->filter_host);
        if (guest_filter_ensure(f->conn, true, f->filter_error, sizeof(f->filter_error)) >= 0)
            f->filter_error[0] = '\0';
    }
}

static bool host_runs(const struct host *h, const char *name)
{
    for (size_t i = 0; i < h->n_active; i++)
        if (h->active[i] && strcmp(h->active[i], name) == 0)
            return true;
    return false;
}

void host_active_free(struct host *h)
{
    for (size_t i = 0; i < h->n_active; i++)
        free(h->active[i]);
    free(h->active);
    h->active = NULL;
    h->n_active = 0;
}

/* Back after a drop: the guests kept through it go on if their domains still run; the
 * ones that stopped meanwhile are handled as their lost stop events would have been. */
static void host_reinventory(struct host *h)
{
    uv_timer_stop(&h->grace);
    size_t kept = 0, stopped = 0;
    for (struct guest *g = h->guests, *next; g; g = next) {
        next = g->next;
        if (g->busy || g->failed || g->state == GUEST_CREATING || g->state >= GUEST_DELETING)
            continue;
        if (h->inventory_failed) {
            char why[512];
            snprintf(why, sizeof(why), "host %s came back, but its domains could not be listed",
                     h->cfg.name);
            h->prov->hooks.on_guest_lost(g, why);
        } else if (host_runs(h, g->domain)) {
            kept++;
        } else {
            stopped++;
            h->prov->hooks.on_guest_stopped(g, "while the host was unreachable");
        }
    }
    log_info("host.reinventoried", "host=%s guests_running=%zu guests_stopped=%zu", h->cfg.name,
             kept, stopped);
    host_active_free(h);
    h->inventory_failed = false;
}

static void connect_done(uv_work_t *w, int status)
{
    struct host *h = w->data;
    struct host_found *f = &h->found;
    (void)status;
    if (h->prov->closing) {
        /* Stopping: what the worker found is not taken. */
        for (size_t i = 0; i < f->n_active; i++)
            free(f->active[i]);
        free(f->active);
        if (f->conn)
            virConnectClose(f->conn);
        memset(f, 0, sizeof(*f));
    }
    if (work_done_closing(h->prov))
        return;
    h->connecting = false;
    if (!f->conn) {
        char why[sizeof(h->error)];
        snprintf(why, sizeof(why), "%s", f->error);
        log_warn("host.connect_failed", "host=%s uri=%s error=\"%s\"", h->cfg.name, h->cfg.uri,
                 why);
        h->connecting = true; /* so host_down schedules the retry */
        host_down(h, why);
        h->connecting = false;
        return;
    }
    uv_mutex_lock(&h->lock);
    h->conn = f->conn;
    h->dropped = false;
    memcpy(h->kvm, f->kvm, sizeof(h->kvm));
    h->hypervisor_version = f->hypervisor_version;
    h->libvirt_version = f->libvirt_version;
    h->filter_host = f->filter_host;
    uv_mutex_unlock(&h->lock);
    host_active_free(h);
    h->active = f->active;
    h->n_active = f->n_active;
    h->inventory_failed = f->inventory_failed;
    host_transport(h, f->qemu_uid);
    h->qemu_gid = f->qemu_gid;
    h->n_networks = f->n_networks > 0 ? (size_t)f->n_networks : 0;
    memcpy(h->networks, f->networks, sizeof(h->networks));
    snprintf(h->networks_error, sizeof(h->networks_error), "%s",
             f->n_networks < 0 ? f->networks_error : "");
    h->guest_filter = f->filter_tried && !f->filter_error[0];
    snprintf(h->guest_filter_error, sizeof(h->guest_filter_error), "%s",
             f->filter_tried ? f->filter_error : "");
    if (f->filter_tried && h->guest_filter)
        log_info("host.guest_filter", "host=%s filter=%s state=defined", h->cfg.name,
                 GUEST_FILTER_NAME);
    else if (f->filter_tried)
        log_info("host.guest_filter", "host=%s filter=%s state=unavailable error=\"%s\"",
                 h->cfg.name, GUEST_FILTER_NAME, h->guest_filter_error);
    memset(f, 0, sizeof(*f));
    /* Keepalive makes a dead remote host show as a closed connection (not on test:///). */
    virConnectSetKeepAlive(h->conn, 5, 3);
    virConnectRegisterCloseCallback(h->conn, on_close_cb, h, NULL);
    h->lifecycle_id = virConnectDomainEventRegisterAny(
        h->conn, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
        VIR_DOMAIN_EVENT_CALLBACK(h->prov->hooks.lifecycle), h, NULL);
    if (h->attempt > 0)
        h->reconnects++;
    h->up = true;
    h->attempt = 0;
    h->error[0] = 0;
    /* Which arches libvirt offers KVM for (host_caps.h): the rest run under TCG. */
    char kvm[64] = "";
    for (int a = 0; a < ARCH_MAX; a++)
        if (h->kvm[a])
            snprintf(kvm + strlen(kvm), sizeof(kvm) - strlen(kvm), "%s%s", kvm[0] ? "," : "",
                     pool_arch_names[a]);
    log_info("host.up", "host=%s uri=%s kvm=%s", h->cfg.name, h->cfg.uri, kvm[0] ? kvm : "none");
    for (struct image_check *c = h->images; c; c = c->next)
        c->checked_ms = 0; /* the host may have been rebuilt: looked at again */
    if (h->ever_up)
        host_reinventory(h);
    h->ever_up = true;
}

static void host_connect(struct host *h)
{
    if (h->connecting || h->up)
        return;
    h->connecting = true;
    h->work.data = h;
    if (host_queue_work(h, &h->work, connect_work, connect_done) < 0)
        h->connecting = false;
}

int provisioner_host_add(struct provider *provider, const struct config_host *cfg)
{
    struct provisioner *p = provider_of(provider);
    if (host_find(p, cfg->name))
        return -EEXIST;
    struct host *h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->prov = p;
    h->cfg = *cfg;
    h->streams = config_host_streams(cfg);
    h->local_files = config_host_is_local(cfg->uri);
    h->lxc = strncmp(cfg->uri, "lxc:", 4) == 0;
    h->simulated = strncmp(cfg->uri, "test:", 5) == 0;
    h->lifecycle_id = -1;
    h->qemu_gid = -1;
    h->queue = host_queue_new(p->loop, cfg->name);
    if (!h->queue) {
        free(h);
        return -ENOMEM;
    }
    if (uv_mutex_init(&h->lock) < 0) {
        host_queue_close(h->queue);
        free(h);
        return -ENOMEM;
    }
    if (uv_async_init(p->loop, &h->dropped_async, on_dropped) < 0) {
        uv_mutex_destroy(&h->lock);
        host_queue_close(h->queue);
        free(h);
        return -ENOMEM;
    }
    uv_unref((uv_handle_t *)&h->dropped_async); /* it alone must not keep the loop */
    uv_timer_init(p->loop, &h->reconnect);
    uv_timer_init(p->loop, &h->grace);
    h->reconnect.data = h->grace.data = h->dropped_async.data = h;
    h->open_handles = 3;
    h->next = p->hosts;
    p->hosts = h;
    host_connect(h);
    return 0;
}

int provisioner_host_update(struct provider *provider, const struct config_host *cfg)
{
    struct provisioner *p = provider_of(provider);
    struct host *h = host_find(p, cfg->name);
    if (!h)
        return provisioner_host_add(&p->provider, cfg);
    /* Its connection (uri, transport) and volumes (storage_*) stay as they run. */
    h->cfg.vcpus = cfg->vcpus;
    h->cfg.memory_mib = cfg->memory_mib;
    h->cfg.max_guests = cfg->max_guests;
    h->cfg.down_grace_s = cfg->down_grace_s;
    return 0;
}

bool provisioner_host_up(struct provider *provider, const char *name)
{
    struct provisioner *p = provider_of(provider);
    struct host *h = host_find(p, name);
    return h && h->up;
}

int provisioner_host_usage(struct provisioner *p, const char *name, struct host_usage *ret)
{
    struct host *h = host_find(p, name);
    if (!h)
        return -ENOENT;
    *ret = h->used;
    return 0;
}

int provisioner_host_status(struct provider *provider, const char *name, struct host_status *ret)
{
    struct provisioner *p = provider_of(provider);
    struct host *h = host_find(p, name);
    if (!h)
        return -ENOENT;
    memset(ret, 0, sizeof(*ret));
    ret->up = h->up;
    ret->connecting = h->connecting && !h->error[0];
    for (int a = 0; a < ARCH_MAX; a++)
        ret->kvm = ret->kvm || h->kvm[a];
    ret->reconnects = h->reconnects;
    snprintf(ret->error, sizeof(ret->error), "%s", h->up ? "" : h->error);
    ret->used = h->used;
    ret->guest_moves_refused = h->guest_moves_refused;
    ret->template_moves_refused = h->slot_moves_refused;
    ret->streams = h->streams;
    ret->guest_filter = h->up && h->guest_filter;
    snprintf(ret->guest_filter_error, sizeof(ret->guest_filter_error), "%s",
             !h->up                     ? "the host is not connected"
             : h->guest_filter_error[0] ? h->guest_filter_error
                                        : "not defined on this host");
    ret->qemu_gid = h->qemu_gid; /* as last found: -1 until a connection says it */
    ret->n_networks = h->up ? h->n_networks : 0;
    memcpy(ret->networks, h->networks, sizeof(ret->networks));
    snprintf(ret->networks_error, sizeof(ret->networks_error), "%s",
             h->up ? h->networks_error : "the host is not connected");
    return 0;
}

int host_capacity_for(const struct host *h, const struct config_pool *pool)
{
    if (!h->up)
        return -ENODEV;
    if (h->used.guests + 1 > h->cfg.max_guests || h->used.vcpus + pool->vcpus > h->cfg.vcpus ||
        h->used.memory_mib + pool->memory_mib > h->cfg.memory_mib)
        return -ENOSPC;
    return 0;
}
