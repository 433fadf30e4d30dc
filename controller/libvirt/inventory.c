/* What is ours on a host, asked off the loop: tagged domains, orphan overlay
 * volumes, and removal by name for records with no guest in memory. */
#include "internal.h"

#include <errno.h>
#include <libvirt/virterror.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "domain_xml.h"
#include "log.h"

int provisioner_tagged_domains(struct provisioner *p, const char *host, char ***ret_names,
                               size_t *ret_n)
{
    struct host *h = host_find(p, host);
    virConnectPtr conn = h ? host_conn_ref(h, true, NULL) : NULL;
    if (!conn)
        return -ENODEV;
    virDomainPtr *doms = NULL;
    int n = virConnectListAllDomains(conn, &doms, 0);
    virConnectClose(conn); /* the domains hold their own references */
    if (n < 0)
        return -EIO;
    char **names = calloc((size_t)n + 1, sizeof(char *));
    size_t found = 0;
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "hatchery-%s-", p->controller_id);
    for (int i = 0; i < n; i++) {
        char *md =
            virDomainGetMetadata(doms[i], VIR_DOMAIN_METADATA_ELEMENT, DOMAIN_METADATA_NS, 0);
        const char *name = virDomainGetName(doms[i]);
        struct domain_metadata m;
        domain_xml_metadata(md, &m);
        bool ours = m.found && strcmp(m.controller, p->controller_id) == 0;
        /* A stale transient domain that is shut off (see domain_remove) has no readable
         * metadata: a name of ours is all that is left to go by. */
        if (!md && name && strncmp(name, prefix, strlen(prefix)) == 0 &&
            virDomainIsActive(doms[i]) == 0 && virDomainIsPersistent(doms[i]) == 0)
            ours = true;
        /* A template being built is no runner: its builder (or the next one) owns it. */
        if (ours && m.template_key[0])
            ours = false;
        if (ours && names && name)
            names[found++] = strdup(m.runner_name[0] ? m.runner_name : name);
        free(md);
        virDomainFree(doms[i]);
    }
    free(doms);
    *ret_names = names;
    *ret_n = found;
    return names ? 0 : -ENOMEM;
}

/* ---- work by name, off the loop --------------------------------------------------------- */

struct name_work {
    uv_work_t work;
    struct provisioner *prov;
    struct host *host;
    char name[256];
    char **names;
    size_t n;
    int err;
    bool volumes; /* tagged_work lists orphan overlay volumes, not domains */
    provider_names_cb names_cb;
    provider_done_cb done_cb;
    void *data;
};

/* Overlay volumes named like our runners (hatchery-<controller>-<n>.qcow2) whose domain
 * does not exist: left by a teardown whose volume delete failed. On a worker. */
static int orphan_volumes(struct provisioner *p, struct host *h, char ***ret_names, size_t *ret_n)
{
    *ret_names = NULL;
    *ret_n = 0;
    if (h->lxc)
        return 0; /* containers have no overlay */
    virConnectPtr conn = host_conn_ref(h, false, NULL);
    if (!conn)
        return -ENODEV;
    /* No pool (yet), or a lookup that failed once: the next pass looks again. */
    virStoragePoolPtr sp = virStoragePoolLookupByName(conn, h->cfg.storage_pool);
    if (!sp) {
        virConnectClose(conn);
        return 0;
    }
    virStorageVolPtr *vols = NULL;
    int n = virStoragePoolListAllVolumes(sp, &vols, 0);
    virStoragePoolFree(sp);
    if (n < 0) {
        virConnectClose(conn);
        return -EIO;
    }
    char **names = calloc((size_t)n + 1, sizeof(char *));
    size_t found = 0;
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "hatchery-%s-", p->controller_id);
    /* The runners that guests restored from templates serve: their domains have the
     * templates' names, their volumes the runners'. */
    char **serving = NULL;
    size_t n_serving = 0;
    virDomainPtr *doms = NULL;
    int n_doms = virConnectListAllDomains(conn, &doms, 0);
    serving = n_doms > 0 ? calloc((size_t)n_doms, sizeof(char *)) : NULL;
    for (int i = 0; i < n_doms; i++) {
        char *md =
            virDomainGetMetadata(doms[i], VIR_DOMAIN_METADATA_ELEMENT, DOMAIN_METADATA_NS, 0);
        struct domain_metadata m;
        domain_xml_metadata(md, &m);
        if (m.runner_name[0] && serving)
            serving[n_serving++] = strdup(m.runner_name);
        free(md);
        virDomainFree(doms[i]);
    }
    free(doms);
    if (n_doms < 0) { /* no list, no verdict: nothing is an orphan this time */
        for (int i = 0; i < n; i++)
            virStorageVolFree(vols[i]);
        free(vols);
        free(names);
        virConnectClose(conn);
        return -EIO;
    }
    for (int i = 0; i < n; i++) {
        const char *vname = virStorageVolGetName(vols[i]);
        size_t len = vname ? strlen(vname) : 0;
        /* A runner's overlay is the prefix and its id: a template's is not. */
        bool runner_volume =
            len > strlen(prefix) + 6 && strncmp(vname, prefix, strlen(prefix)) == 0 &&
            strcmp(vname + len - 6, ".qcow2") == 0 &&
            strspn(vname + strlen(prefix), "0123456789") == len - 6 - strlen(prefix);
        if (names && runner_volume) {
            char name[256];
            snprintf(name, sizeof(name), "%.*s", (int)(len - 6), vname);
            bool served = false;
            for (size_t k = 0; k < n_serving && !served; k++)
                served = serving[k] && strcmp(serving[k], name) == 0;
            virDomainPtr dom = served ? NULL : virDomainLookupByName(conn, name);
            if (dom)
                virDomainFree(dom);
            else if (!served)
                names[found++] = strdup(name);
        }
        virStorageVolFree(vols[i]);
    }
    free(vols);
    for (size_t k = 0; k < n_serving; k++)
        free(serving[k]);
    free(serving);
    virConnectClose(conn);
    *ret_names = names;
    *ret_n = found;
    return names ? 0 : -ENOMEM;
}

static void tagged_work(uv_work_t *w)
{
    struct name_work *nw = w->data;
    if (!host_usable(nw->host) ||
        (nw->volumes
             ? orphan_volumes(nw->prov, nw->host, &nw->names, &nw->n)
             : provisioner_tagged_domains(nw->prov, nw->host->cfg.name, &nw->names, &nw->n)) < 0) {
        nw->names = NULL;
        nw->n = 0;
        nw->err = -EIO;
    }
}

static void tagged_done(uv_work_t *w, int status)
{
    struct name_work *nw = w->data;
    (void)status;
    if (!work_done_closing(nw->prov))
        nw->names_cb(nw->data, nw->host->cfg.name, nw->names, nw->n);
    for (size_t i = 0; i < nw->n; i++)
        free(nw->names[i]);
    free(nw->names);
    free(nw);
}

static int names_async(struct provisioner *p, const char *host, bool volumes, provider_names_cb cb,
                       void *data)
{
    struct host *h = host_find(p, host);
    if (!h)
        return -ENOENT;
    struct name_work *nw = calloc(1, sizeof(*nw));
    if (!nw)
        return -ENOMEM;
    nw->prov = p;
    nw->host = h;
    nw->volumes = volumes;
    nw->names_cb = cb;
    nw->data = data;
    nw->work.data = nw;
    int r = host_queue_work(h, &nw->work, tagged_work, tagged_done);
    if (r < 0)
        free(nw);
    return r;
}

int provisioner_tagged_domains_async(struct provider *provider, const char *host,
                                     provider_names_cb cb, void *data)
{
    struct provisioner *p = provider_of(provider);
    return names_async(p, host, false, cb, data);
}

int provisioner_orphan_volumes_async(struct provider *provider, const char *host,
                                     provider_names_cb cb, void *data)
{
    struct provisioner *p = provider_of(provider);
    return names_async(p, host, true, cb, data);
}

static void remove_work(uv_work_t *w)
{
    struct name_work *nw = w->data;
    struct host *h = nw->host;
    virConnectPtr conn = host_conn_ref(h, false, NULL);
    if (!conn) {
        nw->err = -ENODEV;
        return;
    }
    if (runner_domain_remove(conn, nw->name) < 0)
        nw->err = -EIO;
    char vol_name[300];
    snprintf(vol_name, sizeof(vol_name), "%s.qcow2", nw->name);
    virStoragePoolPtr sp = host_storage_pool_lookup(h, conn);
    virStorageVolPtr vol = sp ? virStorageVolLookupByName(sp, vol_name) : NULL;
    if (vol && virStorageVolDelete(vol, 0) < 0)
        nw->err = -EIO;
    if (vol)
        virStorageVolFree(vol);
    if (sp)
        virStoragePoolFree(sp);
    virConnectClose(conn);
}

static void remove_done(uv_work_t *w, int status)
{
    struct name_work *nw = w->data;
    (void)status;
    if (work_done_closing(nw->prov)) {
        free(nw);
        return;
    }
    char path[PATH_MAX + 300];
    snprintf(path, sizeof(path), "%s/channels/%s.sock", nw->prov->state_dir, nw->name);
    unlink(path);
    static const char *const socket_dirs[] = {"containers", "channels"};
    for (size_t i = 0; i < sizeof(socket_dirs) / sizeof(socket_dirs[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s/%s/agent.sock", nw->prov->state_dir, socket_dirs[i],
                 nw->name);
        unlink(path);
        snprintf(path, sizeof(path), "%s/%s/%s", nw->prov->state_dir, socket_dirs[i], nw->name);
        rmdir(path);
    }
    log_info("guest.removed", "guest=%s host=%s result=%s", nw->name, nw->host->cfg.name,
             nw->err ? "failed" : "ok");
    if (nw->done_cb)
        nw->done_cb(nw->data, nw->err);
    free(nw);
}

int provisioner_domain_remove(struct provider *provider, const char *host, const char *name,
                              provider_done_cb cb, void *data)
{
    struct provisioner *p = provider_of(provider);
    struct host *h = host_find(p, host);
    if (!h)
        return -ENOENT;
    if (!h->up)
        return -ENODEV;
    struct name_work *nw = calloc(1, sizeof(*nw));
    if (!nw)
        return -ENOMEM;
    nw->prov = p;
    nw->host = h;
    snprintf(nw->name, sizeof(nw->name), "%s", name);
    nw->done_cb = cb;
    nw->data = data;
    nw->work.data = nw;
    int r = host_queue_work(h, &nw->work, remove_work, remove_done);
    if (r < 0)
        free(nw);
    return r;
}
