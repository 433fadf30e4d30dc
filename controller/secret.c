/* Opaque secrets loaded from permission-checked files; see secret.h. */
#include "secret.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <malloc.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hatchery/limits.h"

struct secret {
    size_t len;
    unsigned char bytes[];
};

int secret_from_bytes(const void *bytes, size_t len, struct secret **ret_secret)
{
    if (len > SECRET_MAX_BYTES)
        return -EFBIG;
    struct secret *s = malloc(sizeof(*s) + len + 1);
    if (!s)
        return -ENOMEM;
    s->len = len;
    memcpy(s->bytes, bytes, len);
    s->bytes[len] = 0;
    *ret_secret = s;
    return 0;
}

void secret_free(struct secret *secret)
{
    if (!secret)
        return;
    OPENSSL_cleanse(secret->bytes, secret->len);
    free(secret);
}

int secret_file_open(const char *path, size_t max_bytes, char *err, size_t err_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        snprintf(err, err_size, "cannot open secret file %s: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    int r = 0;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        snprintf(err, err_size, "cannot stat secret file %s: %s", path, strerror(-r));
    } else if (!S_ISREG(st.st_mode)) {
        r = -EINVAL;
        snprintf(err, err_size, "secret file %s is not a regular file", path);
    } else if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        r = -EPERM;
        snprintf(err, err_size,
                 "secret file %s has mode %03o: it must not be accessible to group or others "
                 "(chmod 600)",
                 path, (unsigned)(st.st_mode & 0777));
    } else if (st.st_uid != geteuid() && st.st_uid != 0) {
        /* Another user who owns the file can change it, or widen its mode, at will. */
        r = -EPERM;
        snprintf(err, err_size,
                 "secret file %s is owned by uid %u: it must be owned by hatcheryd's user (uid "
                 "%u) or root",
                 path, (unsigned)st.st_uid, (unsigned)geteuid());
    } else if ((uint64_t)st.st_size > max_bytes) {
        r = -EFBIG;
        snprintf(err, err_size, "secret file %s is larger than %zu bytes", path, max_bytes);
    }
    if (r < 0) {
        close(fd);
        return r;
    }
    return fd;
}

int secret_load_file(const char *path, struct secret **ret_secret, char *err, size_t err_size)
{
    int fd = secret_file_open(path, SECRET_MAX_BYTES, err, err_size);
    if (fd < 0)
        return fd;
    unsigned char buf[SECRET_MAX_BYTES + 1];
    size_t len = 0;
    int r = 0;
    while (len < sizeof(buf)) {
        ssize_t n = read(fd, buf + len, sizeof(buf) - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = -errno;
            snprintf(err, err_size, "cannot read secret file %s: %s", path, strerror(-r));
            goto cleanup;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (len > SECRET_MAX_BYTES) {
        r = -EFBIG;
        snprintf(err, err_size, "secret file %s is larger than %d bytes", path, SECRET_MAX_BYTES);
        goto cleanup;
    }
    size_t used = len;
    if (used > 0 && buf[used - 1] == '\n')
        used--;
    if (used > 0 && buf[used - 1] == '\r')
        used--;
    if (used == 0) {
        r = -EINVAL;
        snprintf(err, err_size, "secret file %s is empty", path);
        goto cleanup;
    }
    r = secret_from_bytes(buf, used, ret_secret);
    if (r < 0)
        snprintf(err, err_size, "cannot hold secret from %s: %s", path, strerror(-r));
cleanup:
    OPENSSL_cleanse(buf, len);
    close(fd);
    return r;
}

size_t secret_size(const struct secret *secret)
{
    return secret->len;
}

int secret_reveal(const struct secret *secret, const char *prefix, char **ret_text)
{
    size_t plen = strlen(prefix);
    char *text = malloc(plen + secret->len + 1);
    if (!text)
        return -ENOMEM;
    memcpy(text, prefix, plen);
    memcpy(text + plen, secret->bytes, secret->len);
    text[plen + secret->len] = 0;
    *ret_text = text;
    return 0;
}

void secret_wipe_free(void *p, size_t len)
{
    if (!p)
        return;
    OPENSSL_cleanse(p, len);
    free(p);
}

void *secret_wipe_realloc(void *p, size_t old_len, size_t new_len)
{
    void *grown = malloc(new_len ? new_len : 1);
    if (!grown)
        return NULL;
    if (p)
        memcpy(grown, p, old_len < new_len ? old_len : new_len);
    secret_wipe_free(p, old_len);
    return grown;
}

static void json_wipe_free(void *p)
{
    if (p)
        OPENSSL_cleanse(p, malloc_usable_size(p));
    free(p);
}

void secret_wipe_json_allocations(void)
{
    json_set_alloc_funcs(malloc, json_wipe_free);
}

void secret_reveal_free(char *text)
{
    if (!text)
        return;
    OPENSSL_cleanse(text, strlen(text));
    free(text);
}

int secret_hmac_sha256(const struct secret *secret, const void *data, size_t len,
                       unsigned char ret_mac[32])
{
    unsigned int mac_len = 0;
    if (!HMAC(EVP_sha256(), secret->bytes, (int)secret->len, data, len, ret_mac, &mac_len))
        return -EIO;
    return mac_len == 32 ? 0 : -EIO;
}
