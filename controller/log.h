/* Structured logging: one `key=value` line per event on stderr.
 * Secrets cannot be passed here by accident: they live in `struct secret`, which has no
 * string form (see secret.h). Control characters in a line are replaced, so a value that
 * came from the network cannot forge a second line. */
#ifndef HATCHERY_LOG_H
#define HATCHERY_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

enum log_level {
    LOG_DEBUG,
    LOG_INFO,
    LOG_WARN,
    LOG_ERROR,
    LOG_LEVEL_MAX,
};

void log_level_set(enum log_level level);
/* Lines go to stderr only, never to the journal's socket (with their priority in front when
 * stderr is the journal): for a process that may open no socket, the HTTP front. */
void log_stream_only(void);
/* Returns 0 and sets *ret_level for "debug", "info", "warn" or "error"; -EINVAL otherwise. */
int log_level_parse(const char *name, enum log_level *ret_level);

/* `event` is a short dotted name (`webhook.accepted`); `fmt` formats the rest of the line,
 * written as `key=value` pairs. */
void log_emit(enum log_level level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A bound on lines of one kind that the network can cause (a bad signature from anyone):
 * at most LOG_THROTTLE_LINES per LOG_THROTTLE_WINDOW_MS; the rest are counted and said
 * in one line when the next window opens. Zero-initialised. */
#define LOG_THROTTLE_LINES     10
#define LOG_THROTTLE_WINDOW_MS 10000
struct log_throttle {
    int64_t window_start_ms;
    int64_t lines;      /* in this window */
    int64_t suppressed; /* in this window, past the bound */
};
/* Whether a line may be written now. When a window opens after suppressed ones,
 * *ret_suppressed gets their count (else 0): say it first. */
bool log_throttle_pass(struct log_throttle *t, int64_t now_ms, int64_t *ret_suppressed);

#define log_debug(event, ...) log_emit(LOG_DEBUG, event, __VA_ARGS__)
#define log_info(event, ...)  log_emit(LOG_INFO, event, __VA_ARGS__)
#define log_warn(event, ...)  log_emit(LOG_WARN, event, __VA_ARGS__)
#define log_error(event, ...) log_emit(LOG_ERROR, event, __VA_ARGS__)

#endif
