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

/* Checks that `path` is a regular file of at most `max_bytes`, not accessible to group or
 * others; opens it and returns the descriptor. */
int secret_file_open(const char *path, size_t max_bytes, char *err, size_t err_size);

/* Length in bytes. */
size_t secret_size(const struct secret *secret);

/* The one way out: `prefix` followed by the secret's bytes, NUL-terminated, for the wire
 * (an Authorization header, the agent channel). Free it with secret_reveal_free(), which
 * wipes it. Greppable on purpose: every call site is a place a secret leaves. */
int secret_reveal(const struct secret *secret, const char *prefix, char **ret_text);
void secret_reveal_free(char *text);

/* Memory that may have held a secret (a GitHub answer, a JIT config on its way to a
 * guest) leaves no copy behind: */
/* frees `p`, wiping its `len` bytes first; */
void secret_wipe_free(void *p, size_t len);
/* grows or shrinks a block of `old_len` bytes to `new_len`, wiping the old block (realloc
 * would leave it in freed memory); NULL on failure, with `p` untouched; */
void *secret_wipe_realloc(void *p, size_t old_len, size_t new_len);
/* makes jansson wipe every block it frees: parsed answers, built messages, dumped text.
 * Called once, before any JSON is made. */
void secret_wipe_json_allocations(void);

/* HMAC-SHA256 of `data` keyed by the secret. */
int secret_hmac_sha256(const struct secret *secret, const void *data, size_t len,
                       unsigned char ret_mac[32]);

#endif
