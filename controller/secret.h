/* Secrets (webhook secret, later tokens and keys) as an opaque type.
 * There is deliberately no accessor that returns the bytes as a string: code can only
 * use a secret through the operations below, so it cannot reach a log line or a reply. */
#ifndef HATCHERY_SECRET_H
#define HATCHERY_SECRET_H

#include <stddef.h>

struct secret;

/* Reads a secret from `path`. The file must be a regular file of at most SECRET_MAX_BYTES,
 * not accessible to group or others. One trailing newline is dropped. On failure returns a
 * negative errno and writes a message (which never contains file contents) into `err`. */
int secret_load_file(const char *path, struct secret **ret_secret, char *err, size_t err_size);
/* For tests and fuzzing. */
int secret_from_bytes(const void *bytes, size_t len, struct secret **ret_secret);
void secret_free(struct secret *secret);

/* HMAC-SHA256 of `data` keyed by the secret. */
int secret_hmac_sha256(const struct secret *secret, const void *data, size_t len,
                       unsigned char ret_mac[32]);

#endif
