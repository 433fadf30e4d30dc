/* Guest image manifests; see image_manifest.h. */
#include "image_manifest.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int field(json_t *obj, const char *key, bool required, char *out, size_t size,
                 const char *path, char *err, size_t err_size)
{
    json_t *v = json_object_get(obj, key);
    out[0] = 0;
    if (!v && !required)
        return 0;
    const char *s = json_string_value(v);
    /* An optional field may be empty ("preloaded": "" when nothing was baked in). */
    if (!s || (required && !s[0]) || json_string_length(v) >= size) {
        snprintf(err, err_size, "%s: %s must be a string of %d to %zu characters", path, key,
                 required ? 1 : 0, size - 1);
        return -EINVAL;
    }
    for (const char *p = s; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\') {
            snprintf(err, err_size, "%s: %s holds a control character or quote", path, key);
            return -EINVAL;
        }
    }
    snprintf(out, size, "%s", s);
    return 0;
}

/* A boot file named by the manifest: a plain file name in the image's directory, so a
 * manifest cannot point hatcheryd at any other file of the host. */
static int boot_file(json_t *boot, const char *key, const char *dir, char *out, size_t size,
                     const char *path, char *err, size_t err_size)
{
    char name[256];
    out[0] = '\0'; /* none named: an empty path, not what the caller's memory held */
    int r = field(boot, key, false, name, sizeof(name), path, err, err_size);
    if (r < 0 || !name[0])
        return r;
    if (strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
        snprintf(err, err_size, "%s: boot.%s must be a file name beside the image", path, key);
        return -EINVAL;
    }
    if ((size_t)snprintf(out, size, "%s/%s", dir, name) >= size) {
        snprintf(err, err_size, "%s: boot.%s: path too long", path, key);
        return -ENAMETOOLONG;
    }
    return 0;
}

int image_manifest_parse(const char *image, const char *text, size_t len,
                         struct image_manifest *ret_manifest, char *err, size_t err_size)
{
    char path[PATH_MAX], dir[PATH_MAX];
    if ((size_t)snprintf(path, sizeof(path), "%s.json", image) >= sizeof(path)) {
        snprintf(err, err_size, "image path too long");
        return -ENAMETOOLONG;
    }
    snprintf(dir, sizeof(dir), "%s", image);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof(dir), ".");
    if (len > IMAGE_MANIFEST_MAX_BYTES) {
        snprintf(err, err_size, "image manifest %s: larger than %d bytes", path,
                 IMAGE_MANIFEST_MAX_BYTES);
        return -EFBIG;
    }
    json_error_t jerr;
    json_t *m = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(m)) {
        snprintf(err, err_size, "image manifest %s: not a JSON object%s%s", path, m ? "" : ": ",
                 m ? "" : jerr.text);
        json_decref(m);
        return -EINVAL;
    }
    struct image_manifest out = {0};
    json_t *boot = json_object_get(m, "boot");
    int r = 0;
    if (boot && !json_is_object(boot)) {
        snprintf(err, err_size, "%s: boot must be an object", path);
        r = -EINVAL;
    }
    /* The text fields, in the order they are checked. */
    const struct {
        const char *key;
        bool required;
        char *out;
        size_t size;
    } fields[] = {
        {"arch", true, out.arch, sizeof(out.arch)},
        {"debian", false, out.debian, sizeof(out.debian)},
        {"kernel_version", false, out.kernel_version, sizeof(out.kernel_version)},
        {"runner_version", true, out.runner_version, sizeof(out.runner_version)},
        {"agent_version", true, out.agent_version, sizeof(out.agent_version)},
        {"built_at", false, out.built_at, sizeof(out.built_at)},
        {"sha256", false, out.sha256, sizeof(out.sha256)},
        {"preloaded", false, out.preloaded, sizeof(out.preloaded)},
    };
    for (size_t i = 0; r == 0 && i < sizeof(fields) / sizeof(fields[0]); i++)
        r = field(m, fields[i].key, fields[i].required, fields[i].out, fields[i].size, path, err,
                  err_size);
    if (r == 0)
        r = boot_file(boot, "kernel", dir, out.kernel, sizeof(out.kernel), path, err, err_size);
    if (r == 0)
        r = boot_file(boot, "initrd", dir, out.initrd, sizeof(out.initrd), path, err, err_size);
    if (r == 0)
        r = field(boot, "cmdline", false, out.cmdline, sizeof(out.cmdline), path, err, err_size);
    json_decref(m);
    if (r == 0)
        *ret_manifest = out;
    return r;
}

int image_manifest_read(const char *image, struct image_manifest *ret_manifest, char *err,
                        size_t err_size)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof(path), "%s.json", image) >= sizeof(path)) {
        snprintf(err, err_size, "image path too long");
        return -ENAMETOOLONG;
    }
    FILE *f = fopen(path, "re");
    if (!f) {
        int e = errno;
        snprintf(err, err_size, "image manifest %s: %s", path,
                 e == ENOENT ? "missing (build the image with images/runner/build-image.sh)"
                             : strerror(e));
        return -e;
    }
    char *buf = malloc(IMAGE_MANIFEST_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, IMAGE_MANIFEST_MAX_BYTES + 1, f) : 0;
    fclose(f);
    if (!buf)
        return -ENOMEM;
    int r = image_manifest_parse(image, buf, n, ret_manifest, err, err_size);
    free(buf);
    return r;
}

int image_manifest_check(const struct image_manifest *m, enum pool_arch arch, char *err,
                         size_t err_size)
{
    if (strcmp(m->arch, pool_arch_names[arch]) != 0) {
        snprintf(err, err_size, "image is built for %s, the pool is %s", m->arch,
                 pool_arch_names[arch]);
        return -EINVAL;
    }
    return 0;
}

int image_manifest_load(const char *image, enum pool_arch arch, struct image_manifest *ret_manifest,
                        char *err, size_t err_size)
{
    struct image_manifest m;
    int r = image_manifest_read(image, &m, err, err_size);
    if (r == 0)
        r = image_manifest_check(&m, arch, err, err_size);
    if (r == 0)
        *ret_manifest = m;
    return r;
}

int image_manifest_runner_below_floor(const struct image_manifest *m)
{
    long mine[3], floor[3];
    if (!runner_version_parse(m->runner_version, mine) ||
        !runner_version_parse(RUNNER_VERSION_FLOOR, floor))
        return -1;
    return runner_version_cmp(mine, floor) < 0;
}

const char *image_manifest_id(const struct image_manifest *m)
{
    return m->sha256[0] ? m->sha256 : m->built_at;
}

json_t *image_manifest_json(const struct image_manifest *m)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "arch", m->arch,
                     "debian", m->debian, "kernel_version", m->kernel_version, "runner_version",
                     m->runner_version, "agent_version", m->agent_version, "built_at", m->built_at,
                     "sha256", m->sha256, "preloaded", m->preloaded, "kernel", m->kernel, "initrd",
                     m->initrd, "cmdline", m->cmdline);
}
