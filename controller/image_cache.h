/* Each VM pool's image on this machine as last seen: whether the image file is readable,
 * and its manifest (IMAGE.json, image_manifest.h) parsed. The scheduler's tick, /metrics
 * and the admin API read it from memory; the files are looked at off the loop, in libuv's
 * thread pool, at most once a second and only while someone asks, and a manifest is read
 * again only when its file changed (inode, size, mtime or ctime). A change found calls
 * `changed`, so that the scheduler recounts with what is on disk now; so does a look that
 * a check waits for. */
#ifndef HATCHERY_IMAGE_CACHE_H
#define HATCHERY_IMAGE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "config.h"
#include "image_manifest.h"

/* How old what the cache says may be before a look at the files is started. */
#define IMAGE_CACHE_REFRESH_MS 1000

struct image_cache;

struct image_cache_entry {
    int image_errno; /* 0 when the image file is readable, else why not */
    int manifest_rc; /* image_manifest_read()'s: 0, or a negative errno */
    char err[512];   /* the manifest's problem when manifest_rc < 0 */
    struct image_manifest manifest;
};

/* What the cache says changed, or a look a check waited for is back. */
typedef void (*image_cache_changed_cb)(void *data);

int image_cache_new(uv_loop_t *loop, image_cache_changed_cb changed, void *data,
                    struct image_cache **ret);
/* Follows the images of `c`'s VM pools that have a host on this machine, reading the ones
 * not followed yet now, on the caller's thread (at start and at a reload, not on the hot
 * path); images no pool names any more are dropped. */
int image_cache_follow(struct image_cache *ic, const struct config *c);
/* What is known of `image`, or NULL when it is not followed. Starts a look at the files
 * when the last one is older than IMAGE_CACHE_REFRESH_MS. */
const struct image_cache_entry *image_cache_get(struct image_cache *ic, const char *image);
/* What is known of `image` for acting on it (the scheduler, before it makes a runner):
 * as found by a look that started after the demand began, that is after the first check
 * following a pause of more than two refresh intervals. NULL and `*ret_pending` when that
 * look has not come back yet: it is started, and `changed` is called when it is back. NULL
 * alone when the image is not followed. */
const struct image_cache_entry *image_cache_check(struct image_cache *ic, const char *image,
                                                  bool *ret_pending);
/* The entry's manifest when it was read and fits a pool of `arch`; else NULL and the reason
 * in `err`. */
const struct image_manifest *image_cache_entry_manifest(const struct image_cache_entry *e,
                                                        enum pool_arch arch, char *err,
                                                        size_t err_size);
/* How many manifests were read from disk since the cache was made. */
uint64_t image_cache_reads(const struct image_cache *ic);
/* Frees now, or once a look under way comes back. */
void image_cache_free(struct image_cache *ic);

#endif
