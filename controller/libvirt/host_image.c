/* A pool's image on a remote host, through libvirt's storage API; see host_image.h. */
#include "host_image.h"

#include <errno.h>
#include <libvirt/virterror.h>
#include <limits.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "domain_xml.h"
#include "libvirt_error.h"

/* The storage pool over `dir` on the host: the active one whose target it is, else a
 * transient directory pool of our own, made here (or by another worker a moment ago). */
static virStoragePoolPtr dir_pool(virConnectPtr conn, const char *dir, char *err, size_t err_size)
{
    virStoragePoolPtr pool = virStoragePoolLookupByTargetPath(conn, dir);
    if (pool)
        return pool;
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)dir, strlen(dir), md);
    char name[64];
    int n = snprintf(name, sizeof(name), "hatchery-image-");
    for (size_t i = 0; i < 8; i++)
        n += snprintf(name + n, sizeof(name) - (size_t)n, "%02x", md[i]);
    char *xml = domain_xml_dir_pool(name, dir, NULL);
    pool = xml ? virStoragePoolCreateXML(conn, xml, 0) : NULL;
    free(xml);
    if (!pool) {
        char why[256];
        snprintf(why, sizeof(why), "%s", libvirt_error());
        pool = virStoragePoolLookupByName(conn, name);
        if (pool && virStoragePoolIsActive(pool) != 1) {
            virStoragePoolFree(pool);
            pool = NULL;
        }
        if (!pool) {
            /* Creating a directory pool fails when the directory is not there. */
            snprintf(err, err_size, "image directory %s: %s", dir, why);
            return NULL;
        }
    }
    return pool;
}

/* Downloads the volume `vol` (at most `max` bytes) into a new buffer. */
static int download(virConnectPtr conn, virStorageVolPtr vol, const char *path, size_t max,
                    char **ret, size_t *ret_len, char *err, size_t err_size)
{
    virStorageVolInfo info;
    if (virStorageVolGetInfo(vol, &info) < 0) {
        snprintf(err, err_size, "%s: %s", path, libvirt_error());
        return -EIO;
    }
    if (info.capacity > max) {
        snprintf(err, err_size, "image manifest %s: larger than %zu bytes", path, max);
        return -EFBIG;
    }
    char *buf = malloc(max + 1);
    virStreamPtr st = buf ? virStreamNew(conn, 0) : NULL;
    if (!st) {
        free(buf);
        snprintf(err, err_size, "%s: %s", path, buf ? libvirt_error() : "out of memory");
        return -ENOMEM;
    }
    int r = 0;
    size_t n = 0;
    if (virStorageVolDownload(vol, st, 0, 0, 0) < 0) {
        snprintf(err, err_size, "%s: download: %s", path, libvirt_error());
        r = -EIO;
    }
    /* The file may have grown since its size was read: never past max + 1. */
    while (r == 0) {
        int got = virStreamRecv(st, buf + n, max + 1 - n);
        if (got < 0) {
            snprintf(err, err_size, "%s: download: %s", path, libvirt_error());
            r = -EIO;
        } else if (got == 0) {
            break;
        } else if ((n += (size_t)got) > max) {
            snprintf(err, err_size, "image manifest %s: larger than %zu bytes", path, max);
            r = -EFBIG;
        }
    }
    if (r == 0 && virStreamFinish(st) < 0) {
        snprintf(err, err_size, "%s: download: %s", path, libvirt_error());
        r = -EIO;
    } else if (r < 0) {
        virStreamAbort(st);
    }
    virStreamFree(st);
    if (r < 0) {
        free(buf);
        return r;
    }
    *ret = buf;
    *ret_len = n;
    return 0;
}

/* 0 when the pool holds a volume named like the file `path` (in the pool's directory). */
static int has_volume(virStoragePoolPtr pool, const char *path, const char *what, char *err,
                      size_t err_size)
{
    const char *name = strrchr(path, '/');
    virStorageVolPtr vol = virStorageVolLookupByName(pool, name ? name + 1 : path);
    if (!vol) {
        snprintf(err, err_size, "%s %s missing on the host", what, path);
        return -ENOENT;
    }
    virStorageVolFree(vol);
    return 0;
}

int host_image_probe(virConnectPtr conn, const char *image, enum pool_arch arch,
                     struct image_manifest *ret_manifest, char *err, size_t err_size)
{
    char dir[PATH_MAX], manifest_path[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", image);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir || !slash[1]) {
        snprintf(err, err_size, "image %s: not an absolute file path", image);
        return -EINVAL;
    }
    *slash = 0;
    if ((size_t)snprintf(manifest_path, sizeof(manifest_path), "%s.json", image) >=
        sizeof(manifest_path)) {
        snprintf(err, err_size, "image path too long");
        return -ENAMETOOLONG;
    }
    virStoragePoolPtr pool = dir_pool(conn, dir, err, err_size);
    if (!pool)
        return -ENOENT;
    int r = 0;
    /* Another pool over the directory may be one the operator keeps: refreshed, not
     * rebuilt. Files copied in since the last look appear only after a refresh. */
    if (virStoragePoolRefresh(pool, 0) < 0) {
        snprintf(err, err_size, "image directory %s: refresh: %s", dir, libvirt_error());
        r = -EIO;
    }
    if (r == 0)
        r = has_volume(pool, image, "image", err, err_size);
    virStorageVolPtr mvol = NULL;
    if (r == 0) {
        mvol = virStorageVolLookupByName(pool, strrchr(manifest_path, '/') + 1);
        if (!mvol) {
            snprintf(err, err_size,
                     "image manifest %s missing on the host (copy it beside the image, as "
                     "images/runner/build-image.sh wrote it)",
                     manifest_path);
            r = -ENOENT;
        }
    }
    char *text = NULL;
    size_t len = 0;
    if (r == 0)
        r = download(conn, mvol, manifest_path, IMAGE_MANIFEST_MAX_BYTES, &text, &len, err,
                     err_size);
    if (mvol)
        virStorageVolFree(mvol);
    struct image_manifest m;
    if (r == 0)
        r = image_manifest_parse(image, text, len, &m, err, err_size);
    free(text);
    if (r == 0)
        r = image_manifest_check(&m, arch, err, err_size);
    if (r == 0 && m.kernel[0])
        r = has_volume(pool, m.kernel, "kernel", err, err_size);
    if (r == 0 && m.initrd[0])
        r = has_volume(pool, m.initrd, "initrd", err, err_size);
    virStoragePoolFree(pool);
    if (r == 0)
        *ret_manifest = m;
    return r;
}
