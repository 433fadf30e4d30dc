/* The manifest a guest image carries beside it (`IMAGE.json`, written by
 * images/runner/build-image.sh and images/test-guest/build.sh): what the image is (arch,
 * Debian release, kernel, runner and agent versions, build time, sha256 of the qcow2) and
 * how it boots (kernel, initrd and command line, relative to the image's directory).
 * hatcheryd reads it for each VM pool, from this machine's files for a local host and through
 * libvirt's storage API for a remote one (host_image.h): an image built for another
 * architecture, or without a manifest, gets no runner. */
#ifndef HATCHERY_IMAGE_MANIFEST_H
#define HATCHERY_IMAGE_MANIFEST_H

#include <limits.h>
#include <stdbool.h>
#include <jansson.h>
#include <stddef.h>

#include "config.h"
#include "runner_version.h" /* RUNNER_VERSION_FLOOR */

#define IMAGE_MANIFEST_MAX_BYTES (64 * 1024)

struct image_manifest {
    char arch[16];
    char debian[32];
    char kernel_version[64];
    char runner_version[32];
    char agent_version[32];
    char built_at[40];
    char sha256[72];
    char preloaded[256]; /* container images baked into the image, comma-separated */
    /* Direct kernel boot: absolute paths (resolved against the image's directory). */
    char kernel[PATH_MAX];
    char initrd[PATH_MAX];
    char cmdline[512];
};

/* Parses the manifest of `image` from `len` bytes of `text` (read from the file, or
 * downloaded from a remote host: see host_image.h); boot files are resolved against the
 * image's directory. On failure returns a negative errno and a reason in `err`. */
int image_manifest_parse(const char *image, const char *text, size_t len,
                         struct image_manifest *ret_manifest, char *err, size_t err_size);
/* Reads `IMAGE.json` for `image`. On failure returns a negative errno and a reason
 * (naming the file) in `err`. */
int image_manifest_read(const char *image, struct image_manifest *ret_manifest, char *err,
                        size_t err_size);
/* 0 when the manifest fits a pool of `arch`; else -EINVAL and the reason in `err`. */
int image_manifest_check(const struct image_manifest *m, enum pool_arch arch, char *err,
                         size_t err_size);

/* Reads `IMAGE.json` and checks it fits a pool of `arch`: the two steps a pool's image goes
 * through before it gets a runner. -ENOENT when there is no manifest. */
int image_manifest_load(const char *image, enum pool_arch arch, struct image_manifest *ret_manifest,
                        char *err, size_t err_size);
/* 1 when the manifest's runner is older than RUNNER_VERSION_FLOOR, 0 when it is not, -1
 * when its version is not a runner version (a stand-in, say). */
int image_manifest_runner_below_floor(const struct image_manifest *m);
/* What tells one build of an image from another: its sha256, else its built_at ("" when
 * it has neither, as a stand-in's may not). A runner keeps the one it booted, so that
 * idle runners of an image since replaced are rotated out (scheduler.h). */
const char *image_manifest_id(const struct image_manifest *m);
/* The manifest as a JSON object for the admin API (a new reference). */
json_t *image_manifest_json(const struct image_manifest *m);

#endif
