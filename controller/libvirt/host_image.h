/* A pool's image as a remote host sees it. A controller that reaches a host only through
 * libvirt cannot open the host's files: it finds the image, its manifest (`IMAGE.json`, see
 * image_manifest.h) and the boot files the manifest names through libvirt's storage API.
 * The image's directory is a storage pool on the host: the active pool whose target it
 * is, or else a transient directory pool `hatchery-image-<hash of the directory>` made
 * for it (gone with the host's libvirtd; nothing on the disk changes). The manifest is a
 * volume of that pool, downloaded through a libvirt stream (at most
 * IMAGE_MANIFEST_MAX_BYTES). Paths are the same on every host: a pool's `image` names the
 * file where each of its hosts keeps it. */
#ifndef HATCHERY_HOST_IMAGE_H
#define HATCHERY_HOST_IMAGE_H

#include <libvirt/libvirt.h>
#include <stddef.h>

#include "config.h"
#include "image_manifest.h"

/* Synchronous (a worker's): 0 and the manifest when the image, its manifest and its boot
 * files are on the host behind `conn` and the manifest fits a pool of `arch`. Else -ENOENT
 * (something is missing), -EFBIG, -EINVAL (a manifest that is not one, or for another
 * arch) or -EIO (libvirt failed), with the reason in `err`. */
int host_image_probe(virConnectPtr conn, const char *image, enum pool_arch arch,
                     struct image_manifest *ret_manifest, char *err, size_t err_size);

#endif
