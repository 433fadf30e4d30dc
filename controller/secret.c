/* Opaque secrets loaded from permission-checked files; see secret.h. */
#include "secret.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
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

int secret_load_file(const char *path, struct secret **ret_secret, char *err, size_t err_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        snprintf(err, err_size, "cannot open secret file %s: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    int r = 0;
    unsigned char *buf = NULL;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        snprintf(err, err_size, "cannot stat secret file %s: %s", path, strerror(-r));
        goto cleanup;
    }
    if (!S_ISREG(st.st_mode)) {
        r = -EINVAL;
        snprintf(err, err_size, "secret file %s is not a regular file", path);
        goto cleanup;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        r = -EPERM;
        snprintf(err, err_size,
                 "secret file %s has mode %03o: it must not be accessible to group or others "
                 "(chmod 600)",
                 path, (unsigned)(st.st_mode & 0777));
        goto cleanup;
    }
    if (st.st_size > SECRET_MAX_BYTES) {
        r = -EFBIG;
        snprintf(err, err_size, "secret file %s is larger than %d bytes", path, SECRET_MAX_BYTES);
        goto cleanup;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        r = -ENOMEM;
        snprintf(err, err_size, "out of memory reading %s", path);
        goto cleanup;
    }
    size_t len = 0;
    while (len < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);
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
    if (len > 0 && buf[len - 1] == '\n')
        len--;
    if (len > 0 && buf[len - 1] == '\r')
        len--;
    if (len == 0) {
        r = -EINVAL;
        snprintf(err, err_size, "secret file %s is empty", path);
        goto cleanup;
    }
    r = secret_from_bytes(buf, len, ret_secret);
    if (r < 0)
        snprintf(err, err_size, "cannot hold secret from %s: %s", path, strerror(-r));
cleanup:
    if (buf) {
        OPENSSL_cleanse(buf, (size_t)st.st_size);
        free(buf);
    }
    close(fd);
    return r;
}

int secret_hmac_sha256(const struct secret *secret, const void *data, size_t len,
                       unsigned char ret_mac[32])
{
    unsigned int mac_len = 0;
    if (!HMAC(EVP_sha256(), secret->bytes, (int)secret->len, data, len, ret_mac, &mac_len))
        return -EIO;
    return mac_len == 32 ? 0 : -EIO;
}
