/* One guest from create to teardown: its volume and domain made on a worker, its
 * boot and adoption, its failure, its teardown (destroy, undefine, delete the volume),
 * and the domain lifecycle events that tell of it. */
#define _GNU_SOURCE /* asprintf */
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
#include "xml_query.h"
#include "guest_isolation.h"
#include "host_caps.h"
#include "hatchery/agent_protocol.h"
#include "hatchery/limits.h"
#include "stream_bridge.h"
#include "lease.h"
#include "log.h"

static int domain_remove_found(virDomainPtr dom);

const char *const guest_state_names[GUEST_STATE_MAX] = {
    [GUEST_CREATING] = "creating", [GUEST_ADOPTING] = "adopting",
    [GUEST_BOOTING] = "booting",   [GUEST_UP] = "up",
    [GUEST_DELETING] = "deleting", [GUEST_GONE] = "gone",
};

/* A guest's own memory, once nothing refers to it. */
void guest_release(struct guest *g)
{
    guest_error_clear(g);
    free(g->why_failed);
    free(g->fallback);
    free(g->found_domain);
    free(g->volume);
    free(g->xml);
    free(g->kernel);
    free(g->initrd);
    free(g->cmdline);
    free(g->channel_path);
    free(g->channel_dir);
    free(g->console_log);
    free(g->save_file);
    free(g->name);
    free(g);
}

/* The guest's lifecycle: the moves each state may make. A guest begins creating (or
 * adopting, an earlier hatcheryd's); a container's agent may say hello before its create
 * call returns, so creating may go straight to up. Every state may go to deleting (the
 * teardown), and only deleting to gone. guest_move is the one writer of a guest's state.
 * What the agent says after its hello is not the guest's state: its order is the
 * channel's (agent_channel.c), its meaning the owner's. */
static const uint8_t guest_moves[GUEST_STATE_MAX] = {
#define TO(s) (1u << (s))
    [GUEST_CREATING] = TO(GUEST_BOOTING) | TO(GUEST_UP) | TO(GUEST_DELETING),
    [GUEST_ADOPTING] = TO(GUEST_UP) | TO(GUEST_DELETING),
    [GUEST_BOOTING] = TO(GUEST_UP) | TO(GUEST_DELETING),
    [GUEST_UP] = TO(GUEST_DELETING),
    [GUEST_DELETING] = TO(GUEST_GONE),
    [GUEST_GONE] = 0,
#undef TO
};

bool guest_move_allowed(enum guest_state from, enum guest_state to)
{
    return from < GUEST_STATE_MAX && to < GUEST_STATE_MAX && (guest_moves[from] & (1u << to));
}

bool guest_move(struct guest *g, enum guest_state to)
{
    if (!guest_move_allowed(g->state, to)) {
        g->host->guest_moves_refused++;
        log_error("guest.transition_refused", "guest=%s from=%s to=%s", g->name,
                  guest_state_names[g->state], to < GUEST_STATE_MAX ? guest_state_names[to] : "?");
        return false;
    }
    g->state = to;
    return true;
}

/* Tells the template the guest was restored from how the restore went. */
void guest_restore_told(struct guest *g, enum restore_outcome outcome, const char *reason)
{
    if (g->restore_outcome)
        g->restore_outcome(g->restore_slot, g, outcome, reason);
}

/* ---- guests: timers -------------------------------------------------------------------- */

void on_adopt_timeout(uv_timer_t *t)
{
    struct guest *g = t->data;
    if (g->adopting)
        guest_fail(g,
                   "its agent did not answer resume within %lld s (an agent older than "
                   "protocol version 2 cannot resume)",
                   (long long)(g->prov->adopt_grace_ms / 1000));
}

void on_boot_timeout(uv_timer_t *t)
{
    struct guest *g = t->data;
    if (g->state == GUEST_BOOTING && g->restore)
        guest_fail(g,
                   "no hello from the restored agent within %d s (a guest whose timers do not "
                   "survive a restore, as pseries under TCG before QEMU 8.2)",
                   RESTORE_HELLO_TIMEOUT_MS / 1000);
    else if (g->state == GUEST_BOOTING)
        guest_fail(g, "no hello from the agent within %lld s", (long long)g->pool->boot_timeout_s);
}

/* How long a guest has to say hello: a restored one is up at once. */
uint64_t hello_timeout_ms(const struct guest *g)
{
    uint64_t boot_ms = (uint64_t)g->pool->boot_timeout_s * 1000;
    return g->restore && boot_ms > RESTORE_HELLO_TIMEOUT_MS ? RESTORE_HELLO_TIMEOUT_MS : boot_ms;
}

void on_pipe_closed(uv_handle_t *handle)
{
    free(handle);
}

/* ---- guests: creation ------------------------------------------------------------------ */

/* The host's storage pool for overlays, made as a transient directory pool when absent. */
virStoragePoolPtr host_storage_pool(struct host *h, virConnectPtr conn, char *err, size_t err_size)
{
    virStoragePoolPtr pool = virStoragePoolLookupByName(conn, h->cfg.storage_pool);
    if (!pool) {
        char *xml = domain_xml_dir_pool(h->cfg.storage_pool, h->cfg.storage_dir, "0711");
        /* QEMU (libvirt-qemu on a stock host) must pass through to its overlay; libvirt
         * builds a missing directory 0711 itself, one made here must not take the umask. */
        if (h->local_files && mkdir(h->cfg.storage_dir, 0711) == 0)
            chmod(h->cfg.storage_dir, 0711);
        pool = xml ? virStoragePoolCreateXML(conn, xml, VIR_STORAGE_POOL_CREATE_WITH_BUILD) : NULL;
        if (!pool && xml) /* drivers without build support (test:///) */
            pool = virStoragePoolCreateXML(conn, xml, 0);
        free(xml);
        if (!pool) /* another worker made it first */
            pool = virStoragePoolLookupByName(conn, h->cfg.storage_pool);
    } else if (virStoragePoolIsActive(pool) == 0) {
        virStoragePoolCreate(pool, 0);
    }
    if (!pool)
        snprintf(err, err_size, "storage pool %s: %s", h->cfg.storage_pool, libvirt_error());
    return pool;
}

static void create_on(struct guest *g, virConnectPtr conn, const bool kvm[ARCH_MAX])
{
    struct host *h = g->host;
    const struct config_pool *pool = g->pool;
    bool lxc = pool->backend == BACKEND_CONTAINER;
    char err[256] = "";
    uv_mutex_lock(&h->lock);
    struct guest_filter_host filter_host = h->filter_host;
    uv_mutex_unlock(&h->lock);
    const char *host_ips[GUEST_FILTER_MAX_HOST_IPS];
    for (size_t i = 0; i < filter_host.n; i++)
        host_ips[i] = filter_host.ips[i];
    struct domain_spec spec = {
        .name = g->name,
        .controller_id = g->prov->controller_id,
        .runner_id = g->runner_id,
        .epoch = lease_epoch(),
        .template_key = g->template ? g->template_key : NULL,
        .pool = pool->name,
        .arch = (enum pool_arch)pool->arch,
        .backend = (enum pool_backend)pool->backend,
        .kvm = kvm[pool->arch],
        .vcpus = pool->vcpus,
        .memory_mib = pool->memory_mib,
        .storage_pool = h->cfg.storage_pool,
        .volume = g->volume,
        .kernel = g->kernel,
        .initrd = g->initrd,
        .cmdline = g->cmdline,
        .vof = pool->firmware == FIRMWARE_VOF,
        .network = pool->network,
        .network_filter = guest_isolation_filtered(&h->cfg, pool) ? GUEST_FILTER_NAME : NULL,
        .filter_host_ips = host_ips,
        .n_filter_host_ips = filter_host.n,
        .channel_path = g->channel_path,
        .console_log = g->console_log,
        .root_dir = pool->image,
        .channel_dir = g->channel_dir,
        .init = "/usr/bin/hatchery-agent",
        .runner_user = pool->runner_user,
        .container_id_base = g->id_base,
        .streams = h->streams,
    };
    if (!lxc) {
        virStoragePoolPtr sp = host_storage_pool(h, conn, err, sizeof(err));
        if (!sp) {
            guest_error_set(g, "%s", err);
            return;
        }
        char *vxml = domain_xml_overlay_volume(g->volume, pool->image, pool->disk_mib);
        virStorageVolPtr vol = vxml ? virStorageVolCreateXML(sp, vxml, 0) : NULL;
        free(vxml);
        virStoragePoolFree(sp);
        if (!vol) {
            guest_error_set(g, "overlay volume on %s: %s", pool->image, libvirt_error());
            return;
        }
        virStorageVolFree(vol);
    } else if (!container_paths_usable(pool->image, g->channel_dir, err, sizeof(err))) {
        guest_error_set(g, "%s", err);
        return;
    }
    g->xml = domain_xml_build(&spec, err, sizeof(err));
    if (!g->xml) {
        guest_error_set(g, "domain XML: %s", err);
        return;
    }
    /* Put back if it went since the connection was made (libvirt would refuse the domain
     * anyway: this says why, and heals an undefine). */
    if (spec.network_filter) {
        int r = guest_filter_ensure(conn, false, err, sizeof(err));
        if (r < 0) {
            guest_error_set(g, "%s", err);
            return;
        }
        g->filter_restored = r > 0;
    }
    virDomainPtr dom = virDomainCreateXML(conn, g->xml, 0);
    if (!dom) {
        guest_error_set(g, "domain: %s", libvirt_error());
        return;
    }
    virDomainFree(dom);
}

/* -- templates: a guest saved while its agent waits, restored for each runner -- */

/* A runner's guest from a template, on a worker: its overlay on the template's disk, then
 * the restore of the template's memory into it. */
static void restore_on(struct guest *g, virConnectPtr conn)
{
    struct host *h = g->host;
    char err[256] = "";
    virStoragePoolPtr sp = host_storage_pool(h, conn, err, sizeof(err));
    if (!sp) {
        guest_error_set(g, "%s", err);
        return;
    }
    char template_volume[300];
    snprintf(template_volume, sizeof(template_volume), "%s.qcow2", g->domain);
    virStorageVolPtr tv = virStorageVolLookupByName(sp, template_volume);
    char *backing = tv ? virStorageVolGetPath(tv) : NULL;
    if (tv)
        virStorageVolFree(tv);
    char *vxml = backing ? domain_xml_overlay_volume(g->volume, backing, g->pool->disk_mib) : NULL;
    virStorageVolPtr vol = vxml ? virStorageVolCreateXML(sp, vxml, 0) : NULL;
    free(vxml);
    virStoragePoolFree(sp);
    if (!vol) {
        guest_error_set(g, "overlay volume on template %s: %s", g->domain,
                        backing ? libvirt_error() : "the template's volume is gone");
        free(backing);
        return;
    }
    free(backing);
    virStorageVolFree(vol);
    char *saved =
        virDomainSaveImageGetXMLDesc(conn, g->save_file, VIR_DOMAIN_SAVE_IMAGE_XML_SECURE);
    if (!saved) {
        guest_error_set(g, "template %.100s: %.300s", g->domain, libvirt_error());
        return;
    }
    const struct domain_restore r = {.volume = g->volume,
                                     .channel_path = h->streams ? NULL : g->channel_path,
                                     .console_log = g->console_log,
                                     .runner_id = g->runner_id,
                                     .runner_name = g->name};
    g->xml = domain_xml_restore(saved, &r, err, sizeof(err));
    free(saved);
    if (!g->xml) {
        guest_error_set(g, "template %.100s: %.300s", g->domain, err);
        return;
    }
    if (virDomainRestoreFlags(conn, g->save_file, g->xml, 0) < 0)
        guest_error_set(g, "restore from template %.100s: %.300s", g->domain, libvirt_error());
}

void guest_create_work(struct guest *g)
{
    bool kvm[ARCH_MAX];
    virConnectPtr conn = host_conn_ref(g->host, false, kvm);
    if (!conn) {
        guest_error_set(g, "host %s is not connected", g->host->cfg.name);
        return;
    }
    if (g->restore) {
        restore_on(g, conn);
        if (g->error && g->restore_outcome) {
            /* The template did not restore (corrupt, gone, another QEMU's): this runner
             * boots cold, under its own name, and the template is rebuilt. */
            free(g->fallback);
            g->fallback = g->error; /* the template's error, kept apart */
            g->error = NULL;
            virStoragePoolPtr sp = host_storage_pool_lookup(g->host, conn);
            virStorageVolPtr vol = sp ? virStorageVolLookupByName(sp, g->volume) : NULL;
            if (vol) {
                virStorageVolDelete(vol, 0);
                virStorageVolFree(vol);
            }
            if (sp)
                virStoragePoolFree(sp);
            free(g->xml);
            g->xml = NULL;
            g->restore = false;
            snprintf(g->domain, sizeof(g->domain), "%s", g->name);
            create_on(g, conn, kvm);
        }
    } else {
        create_on(g, conn, kvm);
    }
    virConnectClose(conn);
}

static void guest_free(struct guest *g)
{
    for (struct guest **pp = &g->host->guests; *pp; pp = &(*pp)->next) {
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    }
    guest_release(g);
}

static void on_guest_timer_closed(uv_handle_t *handle)
{
    guest_free(handle->data);
}

static void guest_gone(struct guest *g)
{
    struct host *h = g->host;
    guest_move(g, GUEST_GONE);
    h->used.vcpus -= g->pool->vcpus;
    h->used.memory_mib -= g->pool->memory_mib;
    h->used.guests--;
    log_info("guest.gone", "guest=%s host=%s", g->name, h->cfg.name);
    if (g->events->on_gone)
        g->events->on_gone(g->data, g);
    uv_close((uv_handle_t *)&g->timer, on_guest_timer_closed);
}

void guest_error_set(struct guest *g, const char *fmt, ...)
{
    char *error = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&error, fmt, ap) < 0)
        error = NULL;
    va_end(ap);
    free(g->error);
    g->error = error ? error : strdup("out of memory");
}

void guest_error_clear(struct guest *g)
{
    free(g->error);
    g->error = NULL;
}

void guest_fail(struct guest *g, const char *fmt, ...)
{
    if (g->failed || g->state >= GUEST_DELETING || g->prov->closing)
        return;
    g->failed = true;
    va_list ap;
    va_start(ap, fmt);
    char *why = NULL;
    if (vasprintf(&why, fmt, ap) < 0)
        why = NULL;
    va_end(ap);
    /* Its own field, not `error`: a worker may be writing that now (a container's agent
     * can break its channel while the create call runs). */
    free(g->why_failed);
    g->why_failed = why;
    const char *reason = why ? why : "out of memory";
    log_warn("guest.failed", "guest=%s host=%s state=%s reason=\"%s\"", g->name, g->host->cfg.name,
             guest_state_names[g->state], reason);
    /* A clone that failed before its hello: the template's fault until shown otherwise. */
    if (g->restore && g->state == GUEST_BOOTING)
        guest_restore_told(g, RESTORE_NO_HELLO, reason);
    if (g->events->on_failed)
        g->events->on_failed(g->data, g, reason);
    teardown_start(g);
}

/* Hands the guest's next libvirt calls to a worker; the guest fails when none can take
 * them. `what` names the work in that failure. */
static void guest_call_work(uv_work_t *w)
{
    struct guest *g = w->data;
    g->call_work(g);
}

static void guest_call_done(uv_work_t *w, int status)
{
    struct guest *g = w->data;
    (void)status;
    if (g->prov->closing && g->call_release) /* before the last call's end closes the queue */
        g->call_release(g);
    if (work_done_closing(g->prov))
        return;
    g->busy = false;
    g->call_done(g);
}

int guest_call(struct guest *g, void (*work)(struct guest *g), void (*done)(struct guest *g),
               void (*release)(struct guest *g))
{
    g->call_work = work;
    g->call_done = done;
    g->call_release = release;
    g->busy = true;
    g->work.data = g;
    int r = host_queue_work(g->host, &g->work, guest_call_work, guest_call_done);
    if (r < 0)
        g->busy = false;
    return r;
}

void guest_work_start(struct guest *g, void (*work)(struct guest *g), void (*done)(struct guest *g),
                      void (*release)(struct guest *g), const char *what)
{
    if (guest_call(g, work, done, release) < 0)
        guest_fail(g, "cannot queue %s", what);
}

void guest_create_done(struct guest *g)
{
    /* The domain's XML served its one call (a few KiB a guest, kept for nothing). */
    free(g->xml);
    g->xml = NULL;
    if (g->error) {
        const char *reason = g->error;
        guest_fail(g, "create: %s", reason);
        return;
    }
    if (g->teardown_queued) {
        teardown_start(g);
        return;
    }
    if (g->filter_restored)
        log_warn("host.guest_filter_restored", "host=%s filter=%s guest=%s", g->host->cfg.name,
                 GUEST_FILTER_NAME, g->name);
    log_info("guest.created", "guest=%s host=%s pool=%s", g->name, g->host->cfg.name,
             g->pool->name);
    if (g->fallback) {
        guest_restore_told(g, RESTORE_FELL_BACK, g->fallback);
        g->restore_outcome = NULL;
    } else {
        guest_restore_told(g, RESTORE_DONE, NULL);
    }
    /* A container's agent can connect, say hello and even finish before this callback
     * runs: only a guest not heard from yet is booting. */
    if (g->state != GUEST_CREATING) {
        if (g->domain_stopped)
            guest_ended(g, "the guest stopped");
        return;
    }
    guest_move(g, GUEST_BOOTING);
    if (g->events->on_booting)
        g->events->on_booting(g->data, g);
    if (g->state != GUEST_BOOTING || g->failed)
        return;
    uv_timer_start(&g->timer, on_boot_timeout, hello_timeout_ms(g), 0);
    /* The test driver runs nothing, so no agent will ever answer: such a guest waits
     * for its boot timeout like a silent one, without knocking on a socket that no
     * QEMU will create. */
    if (g->pool->backend == BACKEND_VM && !g->host->simulated)
        g->prov->channel.open(g);
}

struct guest *guest_new(struct provisioner *p, struct host *h, const struct guest_spec *spec,
                        const char *template, const struct guest_events *events, void *data)
{
    struct guest *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->prov = p;
    g->host = h;
    g->name = strdup(spec->name);
    struct boot_files b = spec->pool ? boot_files_of(h, spec->pool) : (struct boot_files){0};
    g->kernel = b.kernel ? strdup(b.kernel) : NULL;
    g->initrd = b.initrd ? strdup(b.initrd) : NULL;
    g->cmdline = b.cmdline ? strdup(b.cmdline) : NULL;
    const char *state = p->state_dir;
    if (asprintf(&g->channel_path, "%s/channels/%s.sock", state, spec->name) < 0)
        g->channel_path = NULL;
    if (asprintf(&g->channel_dir, "%s/containers/%s", state, spec->name) < 0)
        g->channel_dir = NULL;
    if (asprintf(&g->console_log, "%s/logs/%s.console.log", state, spec->name) < 0)
        g->console_log = NULL;
    if (template && asprintf(&g->save_file, "%s/%s.save", h->cfg.storage_dir, template) < 0)
        g->save_file = NULL;
    if (!g->name || (b.kernel && !g->kernel) || (b.initrd && !g->initrd) ||
        (b.cmdline && !g->cmdline) || !g->channel_path || !g->channel_dir || !g->console_log ||
        (template && !g->save_file) || asprintf(&g->volume, "%s.qcow2", spec->name) < 0) {
        guest_release(g);
        return NULL;
    }
    snprintf(g->domain, sizeof(g->domain), "%s", spec->name);
    g->runner_id = spec->runner_id;
    g->pool = spec->pool;
    g->events = events;
    g->data = data;
    g->state = GUEST_CREATING;
    uv_timer_init(p->loop, &g->timer);
    g->timer.data = g;
    return g;
}

/* The guest counts against its host from here on. */
void guest_attach(struct guest *g)
{
    struct host *h = g->host;
    h->used.vcpus += g->pool->vcpus;
    h->used.memory_mib += g->pool->memory_mib;
    h->used.guests++;
    g->next = h->guests;
    h->guests = g;
}

/* A new container's range of users on `h`: its runner's slot, or the next one no live
 * container of the host holds (domain_container_id_base_free); -1 when none is free. */
static int64_t container_id_base_on(const struct host *h, int64_t runner_id)
{
    int64_t used[CONTAINER_ID_SLOTS];
    size_t n = 0;
    for (const struct guest *o = h->guests; o && n < CONTAINER_ID_SLOTS; o = o->next)
        if (o->id_base > 0)
            used[n++] = o->id_base;
    return domain_container_id_base_free(runner_id, used, n);
}

int guest_create(struct provisioner *p, struct host *h, const struct guest_spec *spec,
                 const char *restore_from, restore_outcome_cb outcome, void *slot,
                 const struct guest_events *events, void *data, struct guest **ret_guest)
{
    const struct config_pool *pool = spec->pool;
    int r = host_capacity_for(h, pool);
    if (r < 0)
        return r;
    struct guest *g = guest_new(p, h, spec, restore_from, events, data);
    if (!g)
        return -ENOMEM;
    if (restore_from) {
        g->restore = true;
        g->restore_outcome = outcome;
        g->restore_slot = slot;
        snprintf(g->domain, sizeof(g->domain), "%s", restore_from);
    }
    if (pool->backend == BACKEND_CONTAINER) {
        g->id_base = container_id_base_on(h, g->runner_id);
        r = g->id_base < 0 ? -EBUSY : p->channel.listen(g);
        if (r < 0) {
            uv_close((uv_handle_t *)&g->timer, on_guest_timer_closed);
            return r;
        }
    }
    guest_attach(g);
    guest_work_start(g, guest_create_work, guest_create_done, NULL, "the creation");
    *ret_guest = g;
    return 0;
}

/* -- adoption: a guest an earlier hatcheryd created -- */

static void adopt_work(struct guest *g)
{
    guest_error_clear(g);
    virConnectPtr conn = host_conn_ref(g->host, false, NULL);
    virDomainPtr dom = conn ? runner_domain(conn, g->name) : NULL;
    if (dom) /* restored from a template: the template's name; taken on the loop */
        g->found_domain = strdup(virDomainGetName(dom));
    if (dom && g->pool->backend == BACKEND_CONTAINER) {
        /* The range of users it was given: its idmap's target for uid 0. */
        char *xml = virDomainGetXMLDesc(dom, 0);
        struct xml_query q;
        char *target = xml_query_open(&q, xml) == 0
                           ? xml_query_string(&q, "string(/domain/idmap/uid[@start='0']/@target)")
                           : NULL;
        char *end = NULL;
        long long base = target && target[0] ? strtoll(target, &end, 10) : -1;
        if (end && *end == '\0' && base >= CONTAINER_ID_FIRST)
            g->found_id_base = base;
        free(target);
        xml_query_close(&q);
        free(xml);
    }
    if (!dom)
        guest_error_set(g, "its domain is gone");
    else if (virDomainIsActive(dom) != 1)
        guest_error_set(g, "its domain is not running");
    if (dom)
        virDomainFree(dom);
    if (conn)
        virConnectClose(conn);
}

static void adopt_done(struct guest *g)
{
    if (g->found_domain)
        snprintf(g->domain, sizeof(g->domain), "%s", g->found_domain);
    if (g->found_id_base > 0)
        g->id_base = g->found_id_base;
    free(g->found_domain);
    g->found_domain = NULL;
    if (g->teardown_queued) {
        teardown_start(g);
        return;
    }
    if (g->error) {
        const char *reason = g->error;
        guest_fail(g, "%s", reason);
        return;
    }
    log_info("guest.adopting", "guest=%s host=%s pool=%s", g->name, g->host->cfg.name,
             g->pool->name);
    if (g->pool->backend == BACKEND_CONTAINER) {
        /* The agent reconnects to the socket it had, bound again here: under channels/ for
         * a container made before containers had user namespaces. */
        char old[PATH_MAX];
        struct stat st;
        snprintf(old, sizeof(old), "%s/channels/%s", g->prov->state_dir, g->name);
        if (stat(old, &st) == 0 && S_ISDIR(st.st_mode)) {
            char *dir = strdup(old);
            if (dir) {
                free(g->channel_dir);
                g->channel_dir = dir;
            }
        }
        int r = g->prov->channel.listen(g);
        if (r < 0) {
            guest_fail(g, "cannot listen for its agent: %s", uv_strerror(r));
            return;
        }
        uv_timer_start(&g->timer, on_adopt_timeout, (uint64_t)g->prov->adopt_grace_ms, 0);
    } else if (g->host->streams || !g->host->simulated) {
        g->prov->channel.open(g);
    }
}

int provisioner_guest_adopt(struct provider *provider, const char *host_name,
                            const struct guest_spec *spec, const struct guest_events *events,
                            void *data, struct guest **ret_guest)
{
    struct provisioner *p = provider_of(provider);
    struct host *h = host_find(p, host_name);
    if (!h || !spec->name || !spec->pool)
        return -EINVAL;
    if (!h->up)
        return -ENODEV;
    struct guest *g = guest_new(p, h, spec, NULL, events, data);
    if (!g)
        return -ENOMEM;
    /* Until its domain says which range it has (adopt_done): the one its runner's slot
     * gives, which is what it got unless that was held. */
    if (spec->pool->backend == BACKEND_CONTAINER)
        g->id_base = domain_container_id_base(g->runner_id);
    g->state = GUEST_ADOPTING; /* its first state: nothing has seen guest_new's yet */
    g->adopting = true;
    /* It exists, so it counts, even past what the host allows now. */
    guest_attach(g);
    guest_work_start(g, adopt_work, adopt_done, NULL, "the adoption");
    *ret_guest = g;
    return 0;
}

static const struct guest_events no_events; /* every event ignored */

void guest_disown(struct guest *g)
{
    g->events = &no_events;
    g->data = NULL;
}

/* ---- guests: teardown --------------------------------------------------------------------- */

/* Destroys and undefines a domain, on a worker. A transient domain that is shut off should
 * not exist (libvirt drops transient domains when they stop), but libvirt's LXC driver
 * leaves one behind when a container died while libvirtd was away: destroying it is
 * refused ("not running") yet drops the stale object. */
static int domain_remove(virConnectPtr conn, const char *name)
{
    virDomainPtr dom = virDomainLookupByName(conn, name);
    return dom ? domain_remove_found(dom) : 0;
}

/* The same for the domain that serves runner `name` (its own, or a template's). */
int runner_domain_remove(virConnectPtr conn, const char *name)
{
    virDomainPtr dom = runner_domain(conn, name);
    return dom ? domain_remove_found(dom) : 0;
}

static int domain_remove_found(virDomainPtr dom)
{
    int persistent = virDomainIsPersistent(dom);
    int r = 0;
    /* Ours are transient: destroyed without asking whether they run. */
    if ((persistent == 0 || virDomainIsActive(dom) == 1) && virDomainDestroy(dom) < 0 &&
        virDomainIsActive(dom) == 1)
        r = -EIO;
    if (persistent == 1)
        virDomainUndefineFlags(dom, VIR_DOMAIN_UNDEFINE_NVRAM);
    virDomainFree(dom);
    return r;
}

/* The host's storage pool, on a worker. libvirt 9.0 sometimes answers this lookup with
 * "not found" while other clients work on volumes (about 1 in 100 here): asked again
 * before giving up. */
virStoragePoolPtr host_storage_pool_lookup(struct host *h, virConnectPtr conn)
{
    for (int i = 0; i < 5; i++) {
        virStoragePoolPtr sp = virStoragePoolLookupByName(conn, h->cfg.storage_pool);
        if (sp || host_dropped(h))
            return sp;
        usleep(100000);
    }
    return NULL;
}

static void teardown_work(struct guest *g)
{
    struct host *h = g->host;
    guest_error_clear(g);
    virConnectPtr conn = host_conn_ref(h, false, NULL);
    if (!conn)
        return; /* the host is down: the reconciler finishes this when it returns */
    if (domain_remove(conn, g->domain) < 0)
        guest_error_set(g, "destroy: %s", libvirt_error());
    /* A template's volume is its disk, saved with its memory: kept. */
    if (g->pool->backend == BACKEND_VM && !g->saved) {
        virStoragePoolPtr sp = host_storage_pool_lookup(h, conn);
        if (!sp)
            guest_error_set(g,
                            "volume %s kept: storage pool %s: %s (the reconciler removes it later)",
                            g->volume, h->cfg.storage_pool, libvirt_error());
        virStorageVolPtr vol = sp ? virStorageVolLookupByName(sp, g->volume) : NULL;
        if (vol && virStorageVolDelete(vol, 0) < 0)
            guest_error_set(g, "volume delete: %s", libvirt_error());
        if (vol)
            virStorageVolFree(vol);
        if (sp)
            virStoragePoolFree(sp);
    }
    virConnectClose(conn);
}

static void teardown_done(struct guest *g)
{
    if (g->error)
        log_warn("guest.teardown_incomplete", "guest=%s error=\"%s\"", g->name, g->error);
    /* The console's last lines came before the destroy. */
    stream_bridge_close(g->console_bridge);
    g->console_bridge = NULL;
    if (g->pool->backend == BACKEND_CONTAINER) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof(path), "%s/agent.sock", g->channel_dir);
        unlink(path);
        rmdir(g->channel_dir);
    } else {
        unlink(g->channel_path);
    }
    guest_gone(g);
}

void teardown_start(struct guest *g)
{
    if (g->busy) {
        g->teardown_queued = true; /* after the create in flight */
        return;
    }
    if (g->state >= GUEST_DELETING)
        return;
    guest_move(g, GUEST_DELETING);
    uv_timer_stop(&g->timer);
    if (g->channel) {
        agent_channel_close(g->channel);
        g->channel = NULL;
    }
    if (g->pipe) {
        uv_close((uv_handle_t *)g->pipe, on_pipe_closed);
        g->pipe = NULL;
    }
    stream_bridge_close(g->channel_bridge);
    g->channel_bridge = NULL;
    if (guest_call(g, teardown_work, teardown_done, NULL) < 0)
        guest_gone(g);
}

void guest_teardown(struct guest *g, const char *reason)
{
    if (g->state >= GUEST_DELETING)
        return;
    log_info("guest.teardown", "guest=%s reason=\"%s\"", g->name, reason);
    if (g->channel) /* heard only while a runner runs */
        agent_channel_send_shutdown(g->channel, reason);
    teardown_start(g);
}

void guest_ack_exit(struct guest *g)
{
    if (g->channel) /* refused before the agent's exit */
        agent_channel_ack_exit(g->channel);
}

int64_t guest_heard_ms(const struct guest *g)
{
    return g->channel ? agent_channel_heard_ms(g->channel) : 0;
}

int guest_send_config(struct guest *g, const struct secret *jit, int64_t job_timeout_s,
                      const char *const *command, size_t n_command)
{
    if (g->state != GUEST_UP || !g->channel)
        return -EPROTO; /* and the channel takes it once, after hello */
    return agent_channel_send_config(g->channel, g->name, jit, job_timeout_s, command, n_command);
}

enum guest_state guest_state_get(const struct guest *g)
{
    return g->state;
}

const char *guest_name(const struct guest *g)
{
    return g->name;
}

const char *guest_domain(const struct guest *g)
{
    return g->domain;
}

const char *guest_console_log(const struct guest *g)
{
    return g->console_log;
}

/* The domain that serves runner `name`: its own, or a template's restored for it (its
 * metadata says so). On a worker; NULL when there is none. */
virDomainPtr runner_domain(virConnectPtr conn, const char *name)
{
    virDomainPtr dom = virDomainLookupByName(conn, name);
    if (dom)
        return dom;
    virDomainPtr *doms = NULL;
    int n = virConnectListAllDomains(conn, &doms, 0);
    for (int i = 0; i < n; i++) {
        char *md =
            virDomainGetMetadata(doms[i], VIR_DOMAIN_METADATA_ELEMENT, DOMAIN_METADATA_NS, 0);
        struct domain_metadata m;
        domain_xml_metadata(md, &m);
        free(md);
        if (!dom && m.runner_name[0] && strcmp(m.runner_name, name) == 0)
            dom = doms[i];
        else
            virDomainFree(doms[i]);
    }
    free(doms);
    return dom;
}

/* ---- lifecycle events ---------------------------------------------------------------- */

static struct guest *guest_by_domain(struct host *h, const char *domain)
{
    for (struct guest *g = h->guests; g; g = g->next)
        if (domain && strcmp(g->domain, domain) == 0)
            return g;
    return NULL;
}

int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque)
{
    (void)conn;
    (void)detail;
    struct host *h = opaque;
    if (h->finished || event != VIR_DOMAIN_EVENT_STOPPED) /* h->prov may be gone */
        return 0;
    struct guest *g = h->prov->closing ? NULL : guest_by_domain(h, virDomainGetName(dom));
    if (!g || g->state >= GUEST_DELETING || g->saving)
        return 0;
    g->domain_stopped = true;
    if (g->busy)
        return 0; /* a worker still has it: guest_create_done looks at domain_stopped */
    guest_stopped(g, detail == VIR_DOMAIN_EVENT_STOPPED_CRASHED ? "crashed" : "powered off");
    return 0;
}

void guest_stopped(struct guest *g, const char *why)
{
    g->domain_stopped = true;
    char text[64];
    snprintf(text, sizeof(text), "the guest stopped (%s)", why);
    guest_ended(g, text);
}

void guest_ended(struct guest *g, const char *why)
{
    if (g->failed || g->state >= GUEST_DELETING || g->prov->closing)
        return;
    if (!g->events->on_ended) {
        guest_fail(g, "%s", why);
        return;
    }
    log_info("guest.ended", "guest=%s host=%s state=%s why=\"%s\"", g->name, g->host->cfg.name,
             guest_state_names[g->state], why);
    g->events->on_ended(g->data, g, why);
}
