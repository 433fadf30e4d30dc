/* A VM pool's image on a remote host: probed off the loop (host_image.h), the
 * finding kept per host and pool, and the boot files a guest there takes from it. */
#include "internal.h"

#include <errno.h>
#include <libvirt/virterror.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "domain_xml.h"
#include "host_image.h"
#include "log.h"
#include "wall_clock.h"

/* ---- images on remote hosts ---------------------------------------------------------- */

#define IMAGE_RECHECK_MS         60000
#define IMAGE_RECHECK_MISSING_MS 10000

/* One probe, off the loop: the worker writes only here. */
struct image_probe {
    struct host *host;
    struct image_check *check;
    char image[PATH_MAX];
    int arch;
    int r;
    char reason[256];
    struct image_manifest manifest;
    uv_work_t work;
};

static struct image_check *image_check_find(const struct host *h, const struct config_pool *pool)
{
    for (struct image_check *c = h->images; c; c = c->next)
        if (strcmp(c->pool, pool->name) == 0)
            return c;
    return NULL;
}

/* The pool's check on `h`, made when absent and started over when the pool now names
 * another image or arch (a reload). */
static struct image_check *image_check_for(struct host *h, const struct config_pool *pool)
{
    struct image_check *c = image_check_find(h, pool);
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c)
            return NULL;
        snprintf(c->pool, sizeof(c->pool), "%s", pool->name);
        c->next = h->images;
        h->images = c;
    }
    if (strcmp(c->image, pool->image) != 0 || c->arch != pool->arch) {
        snprintf(c->image, sizeof(c->image), "%s", pool->image);
        c->arch = pool->arch;
        c->found = c->ready = false;
        c->checked_ms = 0;
    }
    return c;
}

static void image_probe_work(uv_work_t *w)
{
    struct image_probe *pr = w->data;
    virConnectPtr conn = host_conn_ref(pr->host, false, NULL);
    if (!conn) {
        pr->r = -ENODEV;
        return;
    }
    pr->r = host_image_probe(conn, pr->image, (enum pool_arch)pr->arch, &pr->manifest, pr->reason,
                             sizeof(pr->reason));
    virConnectClose(conn);
}

static void image_probe_done(uv_work_t *w, int status)
{
    struct image_probe *pr = w->data;
    struct host *h = pr->host;
    struct image_check *c = pr->check;
    (void)status;
    if (work_done_closing(h->prov)) {
        free(pr);
        return;
    }
    c->probing = false;
    /* The connection went away, or the pool was changed meanwhile: due again. */
    if (pr->r == -ENODEV || strcmp(pr->image, c->image) != 0 || pr->arch != c->arch) {
        free(pr);
        return;
    }
    bool was = c->found, was_ready = c->ready;
    c->found = true;
    c->ready = pr->r == 0;
    c->checked_ms = wall_clock_ms();
    if (c->ready) {
        c->manifest = pr->manifest;
        c->reason[0] = 0;
        if (!was || !was_ready)
            log_info("image.found_on_host",
                     "host=%s pool=%s image=%s arch=%s runner=%s agent=%s built=%s", h->cfg.name,
                     c->pool, c->image, c->manifest.arch, c->manifest.runner_version,
                     c->manifest.agent_version, c->manifest.built_at);
    } else if (!was || was_ready || strcmp(c->reason, pr->reason) != 0) {
        snprintf(c->reason, sizeof(c->reason), "%s", pr->reason);
        log_warn("image.missing_on_host", "host=%s pool=%s reason=\"%s\"", h->cfg.name, c->pool,
                 c->reason);
    }
    free(pr);
}

static void image_probe_start(struct host *h, struct image_check *c)
{
    int64_t now = wall_clock_ms();
    int64_t every = c->ready ? IMAGE_RECHECK_MS : IMAGE_RECHECK_MISSING_MS;
    if (c->probing || !h->up || h->prov->closing ||
        (c->checked_ms != 0 && now - c->checked_ms < every))
        return;
    struct image_probe *pr = calloc(1, sizeof(*pr));
    if (!pr)
        return;
    pr->host = h;
    pr->check = c;
    snprintf(pr->image, sizeof(pr->image), "%s", c->image);
    pr->arch = c->arch;
    pr->work.data = pr;
    if (host_queue_work(h, &pr->work, image_probe_work, image_probe_done) < 0) {
        free(pr);
        return;
    }
    c->probing = true;
}

/* The pool's check on the remote host `h`, with a probe started when one is due. */
struct image_check *image_look(struct host *h, const struct config_pool *pool)
{
    struct image_check *c = image_check_for(h, pool);
    if (c)
        image_probe_start(h, c);
    return c;
}

/* The ready manifest of `pool`'s image on a remote host `h`, or NULL. */
const struct image_manifest *remote_manifest(const struct host *h, const struct config_pool *pool)
{
    const struct image_check *c = h->local_files ? NULL : image_check_find(h, pool);
    return c && c->found && c->ready && strcmp(c->image, pool->image) == 0 ? &c->manifest : NULL;
}

/* Whether a VM of `pool` may be made on `h` now: its image is local (the scheduler reads
 * it), not ours to see, or found on the remote host. */
bool image_usable(struct host *h, const struct config_pool *pool)
{
    return h->local_files || h->simulated || pool->backend != BACKEND_VM ||
           remote_manifest(h, pool) != NULL;
}

/* How a guest of `pool` boots on `h`: see struct guest. */
struct boot_files boot_files_of(const struct host *h, const struct config_pool *pool)
{
    const struct image_manifest *m = remote_manifest(h, pool);
    struct boot_files b = {pool->kernel, pool->initrd, pool->cmdline};
    if (!b.kernel && m && m->kernel[0]) {
        b.kernel = m->kernel;
        if (!b.initrd && m->initrd[0])
            b.initrd = m->initrd;
        if (!b.cmdline && m->cmdline[0])
            b.cmdline = m->cmdline;
    }
    return b;
}

int provisioner_host_image(struct provider *provider, const char *host_name,
                           const struct config_pool *pool, struct image_status *ret)
{
    struct provisioner *p = provider_of(provider);
    struct host *h = host_find(p, host_name);
    if (!h)
        return -ENOENT;
    memset(ret, 0, sizeof(*ret));
    if (h->local_files) {
        ret->state = IMAGE_LOCAL;
        return 0;
    }
    if (h->simulated || pool->backend != BACKEND_VM) {
        ret->state = IMAGE_UNCHECKED;
        return 0;
    }
    struct image_check *c = image_look(h, pool);
    if (!c)
        return -ENOMEM;
    ret->checked_ms = c->found ? c->checked_ms : 0;
    if (!c->found) {
        ret->state = IMAGE_CHECKING;
        snprintf(ret->reason, sizeof(ret->reason), "looking for the image on the host");
    } else if (c->ready) {
        ret->state = IMAGE_READY;
        ret->manifest = c->manifest;
    } else {
        ret->state = IMAGE_MISSING;
        snprintf(ret->reason, sizeof(ret->reason), "%s", c->reason);
    }
    return 0;
}
