/* Structured logging to stderr; see log.h. */
#include "log.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hatchery/limits.h"

static enum log_level threshold = LOG_INFO;

static const char *const level_names[LOG_LEVEL_MAX] = {
    [LOG_DEBUG] = "debug",
    [LOG_INFO] = "info",
    [LOG_WARN] = "warn",
    [LOG_ERROR] = "error",
};

void log_level_set(enum log_level level)
{
    threshold = level;
}

int log_level_parse(const char *name, enum log_level *ret_level)
{
    for (int i = 0; i < LOG_LEVEL_MAX; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *ret_level = i;
            return 0;
        }
    }
    return -EINVAL;
}

void log_emit(enum log_level level, const char *event, const char *fmt, ...)
{
    if (level < threshold || level >= LOG_LEVEL_MAX)
        return;

    char line[LOG_MAX_LINE_BYTES];
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);

    int n =
        snprintf(line, sizeof(line), "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s event=%s ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 now.tv_nsec / 1000000, level_names[level], event);
    if (n < 0)
        return;
    size_t used = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;

    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + used, sizeof(line) - used, fmt, ap);
    va_end(ap);
    bool truncated = m < 0 || used + (size_t)m >= sizeof(line);
    size_t len = truncated ? sizeof(line) - 1 : used + (size_t)m;

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)line[i];
        if (c < 0x20 || c == 0x7f)
            line[i] = '?';
    }
    fprintf(stderr, "%.*s%s\n", (int)len, line, truncated ? " truncated=1" : "");
}
