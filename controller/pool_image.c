/* A VM pool's image as hatcheryd knows it (pool_image.h). */
#include "pool_image.h"

#include "image_cache.h"
#include "provider.h"
#include "runner_releases.h"

bool pool_image_find_manifest(struct daemon *d, const struct config_pool *p,
                              struct image_manifest *ret)
{
    if (p->backend != BACKEND_VM)
        return false;
    bool here = false, remote = false;
    struct image_status st;
    for (size_t k = 0; k < d->config->n_hosts; k++) {
        const char *host = d->config->hosts[k].name;
        if (!config_pool_uses_host(p, host) || provider_host_image(d->provider, host, p, &st) < 0)
            continue;
        if (st.state == IMAGE_LOCAL || st.state == IMAGE_UNCHECKED)
            here = true;
        else if (st.state == IMAGE_READY && !remote) {
            *ret = st.manifest;
            remote = true;
        }
    }
    const struct image_cache_entry *e = here ? image_cache_get(d->images, p->image) : NULL;
    if (e && e->manifest_rc == 0) {
        *ret = e->manifest;
        return true;
    }
    return remote;
}

bool pool_image_runner_refused(struct daemon *d, const struct image_manifest *m,
                               struct runner_judgement *ret)
{
    char why[256];
    return runner_releases_judge(d->runner_releases, m->runner_version, ret, why, sizeof(why)) ==
               0 &&
           ret->refused_at >= 0;
}
