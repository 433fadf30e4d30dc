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

#endif
