/* Warm templates: a pool's guests booted once and saved, kept per host, checked,
 * rebuilt when stale or broken, swept when unwanted, and restored into runners' guests. */
#include "internal.h"

#include <errno.h>
#include <libvirt/virterror.h>
#include <openssl/sha.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "domain_xml.h"
#include "libvirt_error.h"
#include "host_caps.h"
#include "hatchery/agent_protocol.h"
#include "hatchery/version.h"
#include "log.h"
#include "textbuf.h"
#include "wall_clock.h"

static int provisioner_template_build_keyed(struct provisioner *p, const char *host_name,
                                            const struct config_pool *pool, const char *name,
                                            const char *key, provisioner_template_cb cb,
                                            void *data);

static const char *const slot_state_names[SLOT_STATE_MAX] = {
    [SLOT_UNKNOWN] = "unknown", [SLOT_CHECKING] = "checking", [SLOT_BUILDING] = "building",
    [SLOT_READY] = "ready",     [SLOT_BROKEN] = "broken",     [SLOT_DISABLED] = "disabled",
};

/* A template slot's lifecycle: the moves each state may make. Unknown is looked at
 * (checking), which finds it ready, has it built, or leaves it unknown (in use, no room, the
 * want changed). A ready template goes broken or disabled when restores from it fail,
 * unknown when what it was built from changed; broken waits, then is looked at again.
 * Restores unsupported on the host disable a slot from any state; a restore that fails
 * after its slot went unknown breaks it there. slot_move is the one writer of a slot's
 * state; a move to the state it is in is no move. */
static const uint8_t slot_moves[SLOT_STATE_MAX] = {
#define TO(s) (1u << (s))
    [SLOT_UNKNOWN] = TO(SLOT_CHECKING) | TO(SLOT_BROKEN) | TO(SLOT_DISABLED),
    [SLOT_CHECKING] =
        TO(SLOT_UNKNOWN) | TO(SLOT_READY) | TO(SLOT_BUILDING) | TO(SLOT_BROKEN) | TO(SLOT_DISABLED),
    [SLOT_BUILDING] = TO(SLOT_READY) | TO(SLOT_BROKEN) | TO(SLOT_DISABLED),
    [SLOT_READY] = TO(SLOT_UNKNOWN) | TO(SLOT_BROKEN) | TO(SLOT_DISABLED),
    [SLOT_BROKEN] = TO(SLOT_UNKNOWN) | TO(SLOT_DISABLED),
    [SLOT_DISABLED] = TO(SLOT_UNKNOWN),
#undef TO
};

bool slot_move_allowed(enum slot_state from, enum slot_state to)
{
    return from < SLOT_STATE_MAX && to < SLOT_STATE_MAX &&
           (from == to || (slot_moves[from] & (1u << to)));
}

bool slot_move(struct template_slot *slot, enum slot_state to)
{
    if (!slot_move_allowed(slot->state, to)) {
        slot->host->slot_moves_refused++;
        log_error("template.transition_refused", "template=%s from=%s to=%s", slot->name,
                  slot_state_names[slot->state], to < SLOT_STATE_MAX ? slot_state_names[to] : "?");
        return false;
    }
    slot->state = to;
    return true;
}

/* -- templates: building one, restoring runners from it -- */

static void save_work(struct guest *g)
{
    guest_error_clear(g);
    virConnectPtr conn = host_conn_ref(g->host, false, NULL);
    virDomainPtr dom = conn ? virDomainLookupByName(conn, g->domain) : NULL;
    if (!dom)
        guest_error_set(g, "its domain is gone");
    else if (virDomainSaveFlags(dom, g->save_file, NULL, VIR_DOMAIN_SAVE_RUNNING) < 0)
        guest_error_set(g, "save: %.300s", libvirt_error());
    if (dom)
        virDomainFree(dom);
    if (conn)
        virConnectClose(conn);
}

static void save_done(struct guest *g)
{
    if (g->error || g->teardown_queued) {
        const char *reason = g->error ? g->error : "torn down while saved";
        g->saving = false;
        if (g->host->local_files)
            unlink(g->save_file);
        guest_fail(g, "template: %s", reason);
        return;
    }
    g->saved = true;
    struct stat st;
    log_info("template.saved", "template=%s host=%s pool=%s file=%s bytes=%lld", g->name,
             g->host->cfg.name, g->pool->name, g->save_file,
             g->host->local_files && stat(g->save_file, &st) == 0 ? (long long)st.st_size : -1LL);
    guest_teardown(g, "saved as a template");
}

static void template_on_hello(void *data, struct guest *g, const struct agent_hello *hello)
{
    (void)data;
    if (!hello->restore_capable) {
        guest_fail(g,
                   "template: its agent %s cannot be restored (0.4.0 or later can): rebuild "
                   "the image",
                   hello->version);
        return;
    }
    /* Saved now, while it waits for a config it never gets: no runner's secret exists in
     * it, and every clone starts from here. */
    g->saving = true;
    guest_work_start(g, save_work, save_done, NULL, "the save");
}

static void template_on_gone(void *data, struct guest *g)
{
    (void)data;
    struct stat st;
    int64_t bytes =
        g->saved && g->host->local_files && stat(g->save_file, &st) == 0 ? (int64_t)st.st_size : -1;
    if (g->template_cb)
        g->template_cb(g->template_data, g->saved ? 0 : -EIO,
                       g->saved        ? NULL
                       : g->why_failed ? g->why_failed
                       : g->error      ? g->error
                                       : "gone before it was saved",
                       bytes);
}

static const struct guest_events template_events = {
    .on_hello = template_on_hello,
    .on_gone = template_on_gone,
};

/* Why guests of `pool` cannot be restored on `h`, or NULL. pseries under TCG before QEMU
 * 8.2 does not migrate its decrementer ("target/ppc: Migrate DECR SPR"): a restored
 * guest's timers stop, sometimes at once, sometimes mid-job (docs/LIBVIRT-HERE.md). */
static const char *restore_unsupported(const struct host *h, const struct config_pool *pool)
{
    if (pool->arch == ARCH_PPC64LE && !h->kvm[ARCH_PPC64LE] && h->hypervisor_version < 8002000)
        return "pseries under TCG loses its timers on a restore before QEMU 8.2: cold boots "
               "only";
    return NULL;
}

int provisioner_template_build(struct provisioner *p, const char *host_name,
                               const struct config_pool *pool, const char *name,
                               provisioner_template_cb cb, void *data)
{
    return provisioner_template_build_keyed(p, host_name, pool, name, "-", cb, data);
}

static int provisioner_template_build_keyed(struct provisioner *p, const char *host_name,
                                            const struct config_pool *pool, const char *name,
                                            const char *key, provisioner_template_cb cb, void *data)
{
    struct host *h = host_find(p, host_name);
    if (!h || !name || !pool || pool->backend != BACKEND_VM)
        return -EINVAL;
    if (!image_usable(h, pool))
        return -ENOENT;
    int r = host_capacity_for(h, pool);
    if (r < 0)
        return r;
    struct guest_spec spec = {.name = name, .runner_id = 0, .pool = pool};
    struct guest *g = guest_new(p, h, &spec, name, &template_events, NULL);
    if (!g)
        return -ENOMEM;
    g->data = g;
    g->template = true;
    snprintf(g->template_key, sizeof(g->template_key), "%s", key);
    g->template_cb = cb;
    g->template_data = data;
    guest_attach(g);
    log_info("template.building", "template=%s host=%s pool=%s", name, h->cfg.name, pool->name);
    guest_work_start(g, guest_create_work, guest_create_done, NULL, "the template's creation");
    return 0;
}

int provisioner_guest_restore(struct provisioner *p, const char *host_name,
                              const struct guest_spec *spec, const char *template_name,
                              const struct guest_events *events, void *data,
                              struct guest **ret_guest)
{
    struct host *h = host_find(p, host_name);
    if (!h || !spec->name || !spec->pool || !template_name || spec->pool->backend != BACKEND_VM)
        return -EINVAL;
    if (restore_unsupported(h, spec->pool))
        return -ENOTSUP;
    int r = host_capacity_for(h, spec->pool);
    if (r < 0)
        return r;
    for (struct guest *o = h->guests; o; o = o->next)
        if (strcmp(o->domain, template_name) == 0 && o->state < GUEST_GONE)
            return -EBUSY; /* one guest per template at a time: it has one name */
    struct guest *g = guest_new(p, h, spec, template_name, events, data);
    if (!g)
        return -ENOMEM;
    g->restore = true;
    snprintf(g->domain, sizeof(g->domain), "%s", template_name);
    guest_attach(g);
    guest_work_start(g, guest_create_work, guest_create_done, NULL, "the restore");
    *ret_guest = g;
    return 0;
}

/* -- warm templates kept per pool and host (provisioner_templates_want) -- */

#define SLOT_RETRY_MS       60000
#define SLOT_FAILURES_LIMIT 2 /* restores in a row without a hello: templates off here */

/* What a template is built from, hashed: a save image holds the guest's memory and
 * device state as this QEMU, libvirt and image made them; any change makes it stale. */
void template_key_of(const struct host *h, const struct config_pool *p, char out[65])
{
    struct textbuf b;
    textbuf_init(&b, 8192);
    struct boot_files boot = boot_files_of(h, p);
    const char *files[] = {p->image, boot.kernel, boot.initrd};
    for (size_t i = 0; i < sizeof(files) / sizeof(*files); i++) {
        struct stat st;
        /* A remote host's files are not ours to stat: their paths count. */
        bool seen = files[i] && h->local_files && stat(files[i], &st) == 0;
        textbuf_printf(&b, "file=%s size=%lld mtime=%lld.%09ld\n", files[i] ? files[i] : "-",
                       seen ? (long long)st.st_size : -1LL,
                       seen ? (long long)st.st_mtim.tv_sec : 0LL, seen ? st.st_mtim.tv_nsec : 0L);
    }
    textbuf_printf(&b,
                   "cmdline=%s arch=%s firmware=%s vcpus=%lld memory=%lld network=%s disk=%lld "
                   "qemu=%lu libvirt=%lu hatchery=%s controller=%s\n",
                   boot.cmdline ? boot.cmdline : "-", pool_arch_names[p->arch],
                   pool_firmware_names[p->firmware], (long long)p->vcpus, (long long)p->memory_mib,
                   p->network ? p->network : "-", (long long)p->disk_mib, h->hypervisor_version,
                   h->libvirt_version, HATCHERY_VERSION, h->prov->controller_id);
    /* A remote host's image is known by its manifest: a rebuild there changes both. */
    const struct image_manifest *m = remote_manifest(h, p);
    if (m)
        textbuf_printf(&b, "image_sha256=%s built_at=%s\n", m->sha256, m->built_at);
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)b.data, b.len, md);
    textbuf_free(&b);
    for (size_t i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static bool slot_in_use(const struct template_slot *slot)
{
    for (const struct guest *g = slot->host->guests; g; g = g->next)
        if (strcmp(g->domain, slot->name) == 0 && g->state < GUEST_GONE)
            return true;
    return false;
}

static void slot_broken(struct template_slot *slot, const char *reason)
{
    slot_move(slot, SLOT_BROKEN);
    slot->rebuild = true;
    slot->retry_at_ms = wall_clock_ms() + SLOT_RETRY_MS;
    snprintf(slot->reason, sizeof(slot->reason), "%.250s", reason);
    log_warn("template.broken", "template=%s host=%s pool=%s reason=\"%s\"", slot->name,
             slot->host->cfg.name, slot->pool, reason);
}

/* A restored guest that never said hello. Twice in a row: restores do not work on this
 * host for this pool (pseries under TCG before QEMU 8.2), so its runners boot cold. */
static void slot_restore_failed(struct template_slot *slot, const char *reason)
{
    if (++slot->failures < SLOT_FAILURES_LIMIT) {
        slot_broken(slot, reason);
        return;
    }
    slot_move(slot, SLOT_DISABLED);
    snprintf(slot->reason, sizeof(slot->reason), "%d restores in a row gave no hello: %.200s",
             slot->failures, reason);
    log_warn("template.disabled", "template=%s host=%s pool=%s reason=\"%s\"", slot->name,
             slot->host->cfg.name, slot->pool, slot->reason);
}

static void on_slot_built(void *data, int err, const char *reason, int64_t bytes)
{
    struct template_slot *slot = data;
    slot->host->slot_work = false;
    if (err) {
        slot_broken(slot, reason ? reason : "the build failed");
        return;
    }
    slot_move(slot, SLOT_READY);
    slot->rebuild = false;
    slot->reason[0] = 0;
    slot->file_bytes = bytes;
    snprintf(slot->key, sizeof(slot->key), "%s", slot->want_key);
}

/* On a worker: deletes a template's overlay and save file through the storage API (so on a
 * remote host too; the pool is refreshed first, for it to list the save file libvirtd
 * wrote beside the volumes). */
static void template_files_delete(struct host *h, virConnectPtr conn, const char *name)
{
    virStoragePoolPtr sp = host_storage_pool_lookup(h, conn);
    if (!sp)
        return;
    virStoragePoolRefresh(sp, 0);
    const char *suffixes[] = {".qcow2", ".save"};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(*suffixes); i++) {
        char vol_name[300];
        snprintf(vol_name, sizeof(vol_name), "%s%s", name, suffixes[i]);
        virStorageVolPtr vol = virStorageVolLookupByName(sp, vol_name);
        if (vol) {
            virStorageVolDelete(vol, 0);
            virStorageVolFree(vol);
        }
    }
    virStoragePoolFree(sp);
}

/* A slot's check, with what the worker reads and writes: the loop may change the slot
 * meanwhile. */
struct slot_check {
    uv_work_t work;
    struct template_slot *slot;
    struct host *host;
    char name[256], want_key[65];
    bool rebuild;
    bool valid;      /* out: its save file is there, built from want_key */
    char reason[64]; /* out: why it could not be looked at (in use, host away) */
    int64_t bytes;   /* out */
};

/* On a worker: is the slot's save file there, built from what it should be? If not, its
 * files go (and a leftover build's domain, from a hatcheryd that died mid-build). */
static void slot_check_work(uv_work_t *w)
{
    struct slot_check *c = w->data;
    struct host *h = c->host;
    virConnectPtr conn = host_conn_ref(h, false, NULL);
    if (!conn) {
        snprintf(c->reason, sizeof(c->reason), "host not connected");
        return;
    }
    char file[PATH_MAX];
    snprintf(file, sizeof(file), "%s/%s.save", h->cfg.storage_dir, c->name);
    virDomainPtr dom = virDomainLookupByName(conn, c->name);
    if (dom) {
        char *md = virDomainGetMetadata(dom, VIR_DOMAIN_METADATA_ELEMENT, DOMAIN_METADATA_NS, 0);
        struct domain_metadata m;
        domain_xml_metadata(md, &m);
        if (m.template_key[0])
            virDomainDestroy(dom); /* a build nobody finishes */
        else
            snprintf(c->reason, sizeof(c->reason), "in use by a runner");
        free(md);
        virDomainFree(dom);
    }
    if (!c->reason[0] && !c->rebuild) {
        char *xml = virDomainSaveImageGetXMLDesc(conn, file, 0);
        struct domain_metadata m;
        domain_xml_metadata(xml, &m);
        if (m.template_key[0] && strcmp(m.template_key, c->want_key) == 0) {
            c->valid = true;
            struct stat st;
            c->bytes = h->local_files && stat(file, &st) == 0 ? (int64_t)st.st_size : -1;
        }
        free(xml);
    }
    if (!c->reason[0] && !c->valid)
        template_files_delete(h, conn, c->name);
    virConnectClose(conn);
}

static void slot_check_done(uv_work_t *w, int status)
{
    struct slot_check *c = w->data;
    struct template_slot *slot = c->slot;
    struct host *h = c->host;
    (void)status;
    bool closing = work_done_closing(h->prov);
    bool in_use = c->reason[0] != 0, valid = c->valid;
    char key[65];
    snprintf(key, sizeof(key), "%s", c->want_key);
    slot->file_bytes = c->bytes;
    free(c);
    if (closing)
        return;
    h->slot_work = false;
    if (in_use) { /* in use, or the host went away: looked at again later */
        slot_move(slot, SLOT_UNKNOWN);
        return;
    }
    if (valid && strcmp(key, slot->want_key) == 0) {
        slot_move(slot, SLOT_READY);
        slot->rebuild = false;
        slot->reason[0] = 0;
        snprintf(slot->key, sizeof(slot->key), "%s", key);
        log_info("template.found", "template=%s host=%s pool=%s bytes=%lld", slot->name,
                 h->cfg.name, slot->pool, (long long)slot->file_bytes);
        return;
    }
    if (valid) { /* the want changed while it was looked at: again */
        slot_move(slot, SLOT_UNKNOWN);
        return;
    }
    slot->rebuild = false;
    int r = provisioner_template_build_keyed(h->prov, h->cfg.name, slot->pool_cfg, slot->name,
                                             slot->want_key, on_slot_built, slot);
    if (r == -ENOSPC || r == -ENODEV) {
        slot_move(slot, SLOT_UNKNOWN); /* no room now: the next want tries again */
        return;
    }
    if (r < 0) {
        slot_broken(slot, strerror(-r));
        return;
    }
    slot_move(slot, SLOT_BUILDING);
    h->slot_work = true;
}

void provisioner_templates_want(struct provider *provider, const char *host_name,
                                const struct config_pool *pool, int n)
{
    struct provisioner *p = provider_of(provider);
    struct host *h = host_find(p, host_name);
    if (!h || !h->up || p->closing || !pool || pool->backend != BACKEND_VM)
        return;
    char key[65];
    template_key_of(h, pool, key);
    for (int k = 0; k < n; k++) {
        char name[256];
        snprintf(name, sizeof(name), "hatchery-tpl-%s-%s-%d", p->controller_id, pool->name, k);
        struct template_slot *slot = h->slots;
        while (slot && (strcmp(slot->name, name) != 0 || slot->removing))
            slot = slot->next;
        if (slot && slot->pool[0] == '(') /* found on disk: this pool's after all */
            snprintf(slot->pool, sizeof(slot->pool), "%s", pool->name);
        if (!slot) {
            slot = calloc(1, sizeof(*slot));
            if (!slot)
                return;
            slot->host = h;
            snprintf(slot->pool, sizeof(slot->pool), "%s", pool->name);
            snprintf(slot->name, sizeof(slot->name), "%s", name);
            slot->next = h->slots;
            h->slots = slot;
        }
        slot->pool_cfg = pool;
        slot->wanted = h->slot_generation;
        const char *unsupported = restore_unsupported(h, pool);
        if (unsupported) {
            if (slot->state != SLOT_DISABLED)
                log_warn("template.disabled", "template=%s host=%s pool=%s reason=\"%s\"",
                         slot->name, h->cfg.name, slot->pool, unsupported);
            slot_move(slot, SLOT_DISABLED);
            snprintf(slot->reason, sizeof(slot->reason), "%s", unsupported);
            continue;
        }
        if (strcmp(slot->want_key, key) != 0) {
            snprintf(slot->want_key, sizeof(slot->want_key), "%s", key);
            if (slot->state == SLOT_READY || slot->state == SLOT_BROKEN ||
                slot->state == SLOT_DISABLED) {
                /* The image, the guest's size or the host's QEMU changed. */
                log_info("template.stale", "template=%s host=%s pool=%s", slot->name, h->cfg.name,
                         slot->pool);
                slot_move(slot, SLOT_UNKNOWN);
                slot->rebuild = true;
                slot->failures = 0;
            }
        }
    }
    /* One at a time; and on a remote host, not before the image is found there (its
     * manifest is in the key): the slots stay wanted meanwhile. */
    if (!h->local_files && !h->simulated)
        image_look(h, pool);
    if (h->slot_work || !image_usable(h, pool))
        return;
    int64_t now = wall_clock_ms();
    for (struct template_slot *slot = h->slots; slot; slot = slot->next) {
        if (strcmp(slot->pool, pool->name) != 0 || slot_in_use(slot) || slot->removing)
            continue;
        if (slot->state == SLOT_BROKEN && now >= slot->retry_at_ms)
            slot_move(slot, SLOT_UNKNOWN);
        if (slot->state != SLOT_UNKNOWN)
            continue;
        struct slot_check *c = calloc(1, sizeof(*c));
        if (!c)
            return;
        c->slot = slot;
        c->host = h;
        snprintf(c->name, sizeof(c->name), "%s", slot->name);
        snprintf(c->want_key, sizeof(c->want_key), "%s", slot->want_key);
        c->rebuild = slot->rebuild;
        c->work.data = c;
        slot_move(slot, SLOT_CHECKING);
        h->slot_work = true;
        if (host_queue_work(h, &c->work, slot_check_work, slot_check_done) < 0) {
            free(c);
            slot_move(slot, SLOT_UNKNOWN);
            h->slot_work = false;
        }
        return;
    }
}

/* On a worker: an unwanted template's files go. */
static void slot_remove_work(uv_work_t *w)
{
    struct template_slot *slot = w->data;
    virConnectPtr conn = host_conn_ref(slot->host, false, NULL);
    if (!conn)
        return;
    template_files_delete(slot->host, conn, slot->name);
    virConnectClose(conn);
}

static void slot_remove_done(uv_work_t *w, int status)
{
    struct template_slot *slot = w->data;
    struct host *h = slot->host;
    (void)status;
    if (work_done_closing(h->prov))
        return;
    h->slot_work = false;
    log_info("template.removed", "template=%s host=%s pool=%s", slot->name, h->cfg.name,
             slot->pool);
    for (struct template_slot **pp = &h->slots; *pp; pp = &(*pp)->next)
        if (*pp == slot) {
            *pp = slot->next;
            break;
        }
    free(slot);
}

/* On a worker: the template volumes of ours in the storage pool, as slots (unwanted until
 * a want names them): templates a pool no longer has, left by an earlier hatcheryd. */
struct slot_scan {
    uv_work_t work;
    struct host *host;
    char **names;
    size_t n;
};

static void slot_scan_work(uv_work_t *w)
{
    struct slot_scan *sc = w->data;
    struct host *h = sc->host;
    virConnectPtr conn = host_conn_ref(h, false, NULL);
    virStoragePoolPtr sp = conn ? host_storage_pool_lookup(h, conn) : NULL;
    virStorageVolPtr *vols = NULL;
    int n = sp ? virStoragePoolListAllVolumes(sp, &vols, 0) : -1;
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "hatchery-tpl-%s-", h->prov->controller_id);
    sc->names = n > 0 ? calloc((size_t)n, sizeof(char *)) : NULL;
    for (int i = 0; i < n; i++) {
        const char *vname = virStorageVolGetName(vols[i]);
        size_t len = vname ? strlen(vname) : 0;
        if (sc->names && len > strlen(prefix) + 6 && strncmp(vname, prefix, strlen(prefix)) == 0 &&
            strcmp(vname + len - 6, ".qcow2") == 0)
            sc->names[sc->n++] = strndup(vname, len - 6);
        virStorageVolFree(vols[i]);
    }
    free(vols);
    if (sp)
        virStoragePoolFree(sp);
    if (conn)
        virConnectClose(conn);
}

static void slot_scan_done(uv_work_t *w, int status)
{
    struct slot_scan *sc = w->data;
    struct host *h = sc->host;
    (void)status;
    if (!work_done_closing(h->prov)) {
        h->slot_work = false;
        for (size_t i = 0; i < sc->n; i++) {
            struct template_slot *slot = h->slots;
            while (slot && strcmp(slot->name, sc->names[i]) != 0)
                slot = slot->next;
            if (slot || !sc->names[i])
                continue;
            slot = calloc(1, sizeof(*slot));
            if (!slot)
                break;
            slot->host = h;
            snprintf(slot->name, sizeof(slot->name), "%s", sc->names[i]);
            snprintf(slot->pool, sizeof(slot->pool), "(no pool)");
            slot_move(slot, SLOT_UNKNOWN);
            slot->wanted = UINT64_MAX; /* a sweep decides, after this generation's wants */
            slot->next = h->slots;
            h->slots = slot;
        }
    }
    for (size_t i = 0; i < sc->n; i++)
        free(sc->names[i]);
    free(sc->names);
    free(sc);
}

void provisioner_templates_sweep(struct provider *provider, const char *host_name)
{
    struct provisioner *p = provider_of(provider);
    struct host *h = host_find(p, host_name);
    if (!h || !h->up || p->closing || h->lxc)
        return;
    uint64_t generation = h->slot_generation++;
    if (h->slot_work)
        return;
    if (!h->slots_scanned) {
        struct slot_scan *sc = calloc(1, sizeof(*sc));
        if (!sc)
            return;
        sc->host = h;
        sc->work.data = sc;
        h->slots_scanned = true;
        h->slot_work = true;
        if (host_queue_work(h, &sc->work, slot_scan_work, slot_scan_done) < 0) {
            h->slot_work = false;
            free(sc);
        }
        return;
    }
    for (struct template_slot *slot = h->slots; slot; slot = slot->next) {
        if (slot->wanted == UINT64_MAX) { /* found on disk: wanted from the next round on */
            slot->wanted = generation;
            continue;
        }
        if (slot->wanted == generation || slot_in_use(slot) || slot->removing ||
            slot->state == SLOT_BUILDING || slot->state == SLOT_CHECKING)
            continue;
        slot->removing = true;
        h->slot_work = true;
        slot->work.data = slot;
        if (host_queue_work(h, &slot->work, slot_remove_work, slot_remove_done) < 0) {
            slot->removing = false;
            h->slot_work = false;
        }
        return;
    }
}

/* A ready template of `pool` on `h` that no guest has, or NULL. */
int provisioner_templates(struct provider *provider, const char *host_name,
                          struct template_status *out, size_t max, size_t *ret_n)
{
    struct provisioner *p = provider_of(provider);
    struct host *h = host_find(p, host_name);
    if (!h)
        return -ENOENT;
    size_t n = 0;
    for (struct template_slot *slot = h->slots; slot && n < max; slot = slot->next) {
        struct template_status *t = &out[n++];
        memset(t, 0, sizeof(*t));
        snprintf(t->name, sizeof(t->name), "%s", slot->name);
        snprintf(t->pool, sizeof(t->pool), "%s", slot->pool);
        t->state = slot_state_names[slot->state];
        snprintf(t->reason, sizeof(t->reason), "%s", slot->reason);
        t->file_bytes = slot->state == SLOT_READY ? slot->file_bytes : -1;
        t->restores = slot->restores;
        t->fallbacks = slot->fallbacks;
        t->in_use = slot_in_use(slot);
    }
    *ret_n = n;
    return 0;
}

static struct template_slot *slot_for(struct host *h, const struct config_pool *pool)
{
    for (struct template_slot *slot = h->slots; slot; slot = slot->next)
        if (slot->state == SLOT_READY && !slot->removing && strcmp(slot->pool, pool->name) == 0 &&
            strcmp(slot->key, slot->want_key) == 0 && !slot_in_use(slot))
            return slot;
    return NULL;
}

/* How a restore from `slot` went, told by its guest (guest.c). */
static void slot_told(void *data, const struct guest *g, enum restore_outcome outcome,
                      const char *reason)
{
    struct template_slot *slot = data;
    switch (outcome) {
    case RESTORE_DONE:
        slot->restores++;
        log_info("template.restored", "guest=%s template=%s", g->name, slot->name);
        break;
    case RESTORE_FELL_BACK:
        slot->fallbacks++;
        log_warn("template.fallback", "guest=%s template=%s reason=\"%s\" action=\"booted cold\"",
                 g->name, slot->name, reason);
        slot_broken(slot, reason);
        break;
    case RESTORE_NO_HELLO:
        slot_restore_failed(slot, reason);
        break;
    case RESTORE_HELLO:
        slot->failures = 0;
        break;
    }
}

/* The provider's create: a runner's guest, restored from a ready template of its pool on
 * the host when there is one, else booted cold. */
int provisioner_guest_create(struct provider *provider, const char *host_name,
                             const struct guest_spec *spec, const struct guest_events *events,
                             void *data, struct guest **ret_guest)
{
    struct provisioner *p = provider_of(provider);
    struct host *h = host_find(p, host_name);
    if (!h || !spec->name || !spec->pool)
        return -EINVAL;
    if (!h->up)
        return -ENODEV;
    const struct config_pool *pool = spec->pool;
    if (!image_usable(h, pool))
        return -ENOENT;
    struct template_slot *slot =
        pool->start == START_TEMPLATE && pool->backend == BACKEND_VM ? slot_for(h, pool) : NULL;
    return guest_create(p, h, spec, slot ? slot->name : NULL, slot ? slot_told : NULL, slot, events,
                        data, ret_guest);
}
