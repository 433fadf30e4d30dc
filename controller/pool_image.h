/* A VM pool's image as hatcheryd knows it, for what reports on it (`/metrics`, `hatchery
 * pools`, the runner-freshness check): this machine's manifest (as last seen on disk,
 * image_cache.h) when the pool has a host whose files are here, else the first manifest a
 * remote host's probe found (provider_host_image). Reads no file. */
#ifndef HATCHERY_POOL_IMAGE_H
#define HATCHERY_POOL_IMAGE_H

#include <stdbool.h>

#include "daemon.h"
#include "image_manifest.h"

/* True and the manifest when one is known for the VM pool `p`. */
bool pool_image_find_manifest(struct daemon *d, const struct config_pool *p,
                              struct image_manifest *ret);
/* True and GitHub's rules' judgement of the runner of manifest `m` (runner_version_judge,
 * by the floor and the runner releases hatcheryd fetched) when a rule refuses it, from
 * ret->refused_at on; false when none does, or its version is not a runner version. */
bool pool_image_runner_refused(struct daemon *d, const struct image_manifest *m,
                               struct runner_judgement *ret);

#endif
