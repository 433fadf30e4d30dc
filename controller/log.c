/* Structured logging to stderr; see log.h. */
#include "log.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "hatchery/limits.h"
#include "journal.h"

static enum log_level threshold = LOG_INFO;
static bool stream_only;

static const char *const level_names[LOG_LEVEL_MAX] = {
    [LOG_DEBUG] = "debug",
    [LOG_INFO] = "info",
    [LOG_WARN] = "warn",
    [LOG_ERROR] = "error",
};

void log_stream_only(void)
{
    stream_only = true;
}

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

/* ---- logfmt values ---------------------------------------------------------------------- */

/* The values of the keys that journalctl can match (HATCHERY_RUNNER=…), as the line
 * gives them. */
enum journal_field {
    FIELD_RUNNER,
    FIELD_POOL,
    FIELD_HOST,
    FIELD_JOB,
    FIELD_MAX,
};
static const char *const field_keys[FIELD_MAX] = {
    [FIELD_RUNNER] = "runner", [FIELD_POOL] = "pool", [FIELD_HOST] = "host", [FIELD_JOB] = "job"};
static const char *const field_names[FIELD_MAX] = {
    [FIELD_RUNNER] = "HATCHERY_RUNNER",
    [FIELD_POOL] = "HATCHERY_POOL",
    [FIELD_HOST] = "HATCHERY_HOST",
    [FIELD_JOB] = "HATCHERY_JOB",
};

struct line {
    char *buf;
    size_t size, len;
    bool truncated;
    char fields[FIELD_MAX][128];
};

/* Which journal field the value of the conversion at `start` in `fmt` is: the key before
 * its '=' (and the '"' a format may quote it with), when it is one of field_keys. */
static int field_of(const char *fmt, const char *start)
{
    const char *p = start;
    if (p > fmt && p[-1] == '"')
        p--;
    if (p == fmt || p[-1] != '=')
        return -1;
    const char *end = --p;
    while (p > fmt && (p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z')))
        p--;
    if (p > fmt && p[-1] != ' ')
        return -1;
    for (int f = 0; f < FIELD_MAX; f++) {
        if (strlen(field_keys[f]) == (size_t)(end - p) && !memcmp(p, field_keys[f], end - p))
            return f;
    }
    return -1;
}

/* Keeps a field's value, with what would break a journal field (a newline) replaced. */
static void keep_field(struct line *l, int field, const char *v, size_t n)
{
    if (field < 0)
        return;
    char *out = l->fields[field];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < sizeof(l->fields[field]); i++)
        out[k++] = (v[i] == '\n' || (unsigned char)v[i] < 0x20) ? '?' : v[i];
    out[k] = '\0';
}

static void put_char(struct line *l, char c)
{
    if (l->len + 1 < l->size)
        l->buf[l->len++] = c;
    else
        l->truncated = true;
}

static void put_text(struct line *l, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put_char(l, s[i]);
}

/* A value needs quotes when it is empty or holds a space, '=', '"', '\' or a control
 * character: then `key=value` pairs cannot be split wrongly, and a value from the network
 * cannot add a pair of its own. */
static bool needs_quotes(const char *v, size_t n)
{
    if (n == 0)
        return true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c <= ' ' || c == '=' || c == '"' || c == '\\' || c == 0x7f)
            return true;
    }
    return false;
}

/* The inside of a quoted value: '"' and '\' escaped, control characters as \n, \t, \r or
 * \xNN. */
static void put_escaped(struct line *l, const char *v, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c == '"' || c == '\\') {
            put_char(l, '\\');
            put_char(l, (char)c);
        } else if (c == '\n') {
            put_text(l, "\\n", 2);
        } else if (c == '\t') {
            put_text(l, "\\t", 2);
        } else if (c == '\r') {
            put_text(l, "\\r", 2);
        } else if (c < 0x20 || c == 0x7f) {
            char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
            put_text(l, esc, 4);
        } else {
            put_char(l, (char)c);
        }
    }
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
/* A %s value of `fmt` (its conversion at `start`): a logfmt value, quoted and escaped when
 * it must be, only escaped where the format already quotes it (`reason="%s"`). */
static void put_string_value(struct line *l, const char *fmt, const char *start, const char *v,
                             int precision)
{
    if (!v)
        v = "(null)";
    size_t len = strlen(v);
    if (precision >= 0 && (size_t)precision < len)
        len = (size_t)precision;
    keep_field(l, field_of(fmt, start), v, len);
    bool quoted_in_format = start > fmt && start[-1] == '"';
    if (quoted_in_format) {
        put_escaped(l, v, len);
    } else if (needs_quotes(v, len)) {
        put_char(l, '"');
        put_escaped(l, v, len);
        put_char(l, '"');
    } else {
        put_text(l, v, len);
    }
}

/* A numeric or pointer conversion, by snprintf with its own `spec` (the compiler checked it
 * against its argument at log_emit's call): the length snprintf gives in `ret_n`. false for
 * a conversion this logger does not know (nothing consumed). */
static bool format_number(char *out, size_t size, const char *spec, const char *length, char conv,
                          va_list *ap, int *ret_n)
{
    int n = 0;
    switch (conv) {
    case 'd':
    case 'i':
    case 'c':
        if (!strcmp(length, "l"))
            n = snprintf(out, size, spec, va_arg(*ap, long));
        else if (!strcmp(length, "ll"))
            n = snprintf(out, size, spec, va_arg(*ap, long long));
        else if (!strcmp(length, "z"))
            n = snprintf(out, size, spec, va_arg(*ap, ssize_t));
        else if (!strcmp(length, "j"))
            n = snprintf(out, size, spec, va_arg(*ap, intmax_t));
        else if (!strcmp(length, "t"))
            n = snprintf(out, size, spec, va_arg(*ap, ptrdiff_t));
        else
            n = snprintf(out, size, spec, va_arg(*ap, int));
        break;
    case 'u':
    case 'x':
    case 'X':
    case 'o':
        if (!strcmp(length, "l"))
            n = snprintf(out, size, spec, va_arg(*ap, unsigned long));
        else if (!strcmp(length, "ll"))
            n = snprintf(out, size, spec, va_arg(*ap, unsigned long long));
        else if (!strcmp(length, "z"))
            n = snprintf(out, size, spec, va_arg(*ap, size_t));
        else if (!strcmp(length, "j"))
            n = snprintf(out, size, spec, va_arg(*ap, uintmax_t));
        else
            n = snprintf(out, size, spec, va_arg(*ap, unsigned int));
        break;
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G':
        if (!strcmp(length, "L"))
            n = snprintf(out, size, spec, va_arg(*ap, long double));
        else
            n = snprintf(out, size, spec, va_arg(*ap, double));
        break;
    case 'p':
        n = snprintf(out, size, spec, va_arg(*ap, void *));
        break;
    default:
        return false;
    }
    *ret_n = n;
    return true;
}

/* Formats `fmt` as printf would, except that each %s value is a logfmt value: quoted and
 * escaped when it must be, and only escaped where the format already quotes it
 * (`reason="%s"`). Each other conversion is handed to snprintf with its own spec, cut
 * from `fmt`, which the compiler checked against the arguments at log_emit's call. */
static void format_pairs(struct line *l, const char *fmt, va_list *ap)
{
    for (const char *p = fmt; *p; p++) {
        if (*p != '%') {
            put_char(l, *p);
            continue;
        }
        const char *start = p++;
        if (*p == '%') {
            put_char(l, '%');
            continue;
        }
        char spec[32];
        size_t k = 0;
        spec[k++] = '%';
        while (*p && strchr("-+ #0", *p) && k < 8)
            spec[k++] = *p++;
        int width = -1, precision = -1;
        if (*p == '*') {
            width = va_arg(*ap, int);
            p++;
        } else {
            while (*p >= '0' && *p <= '9')
                width = (width < 0 ? 0 : width * 10) + (*p++ - '0');
        }
        if (*p == '.') {
            p++;
            precision = 0;
            if (*p == '*') {
                precision = va_arg(*ap, int);
                p++;
            } else {
                while (*p >= '0' && *p <= '9')
                    precision = precision * 10 + (*p++ - '0');
            }
        }
        char length[3] = "";
        if (*p == 'h' || *p == 'l') {
            length[0] = *p++;
            if (*p == length[0])
                length[1] = *p++;
        } else if (*p == 'z' || *p == 'j' || *p == 't' || *p == 'L') {
            length[0] = *p++;
        }
        char conv = *p;
        if (!conv)
            break;
        if (width >= 0)
            k += (size_t)snprintf(spec + k, sizeof(spec) - k, "%d", width);
        if (precision >= 0)
            k += (size_t)snprintf(spec + k, sizeof(spec) - k, ".%d", precision);
        k += (size_t)snprintf(spec + k, sizeof(spec) - k, "%s%c", length, conv);
        char out[128];
        int n = 0;
        if (conv == 's') {
            put_string_value(l, fmt, start, va_arg(*ap, const char *), precision);
            continue;
        }
        if (!format_number(out, sizeof(out), spec, length, conv, ap, &n)) {
            /* Not a conversion this logger knows: written as it is, nothing consumed. */
            put_text(l, start, (size_t)(p - start + 1));
            continue;
        }
        if (n > 0) {
            size_t len = (size_t)n < sizeof(out) ? (size_t)n : sizeof(out) - 1;
            keep_field(l, field_of(fmt, start), out, len);
            put_text(l, out, len);
        }
    }
}

#pragma GCC diagnostic pop

/* When stderr is the journal (systemd sets JOURNAL_STREAM to its device and inode), each
 * line starts with its syslog priority, so that `journalctl -p warning` works. The answer
 * is kept for as long as JOURNAL_STREAM says the same: no fstat per line. */
static bool stderr_is_journal(void)
{
    static char known_for[64] = "";
    static bool known;
    const char *js = getenv("JOURNAL_STREAM");
    if (!js)
        return false;
    if (strcmp(js, known_for) == 0)
        return known;
    unsigned long long dev = 0, ino = 0;
    struct stat st;
    known = sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(2, &st) == 0 &&
            (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
    snprintf(known_for, sizeof(known_for), "%s", js);
    return known;
}

static const char syslog_priority[LOG_LEVEL_MAX] = {
    [LOG_DEBUG] = '7', [LOG_INFO] = '6', [LOG_WARN] = '4', [LOG_ERROR] = '3'};

/* To the journal by its native protocol: the line as MESSAGE, its priority, the event, and
 * runner, pool, host and job as fields of their own (`journalctl HATCHERY_RUNNER=NAME`).
 * Returns false when the journal did not take it: the caller then writes to stderr. */
static bool send_to_journal(const struct line *l, enum log_level level, const char *event)
{
    char message[LOG_MAX_LINE_BYTES + 32], priority[16], event_field[96];
    char fields[FIELD_MAX][160];
    struct iovec iov[4 + FIELD_MAX + 1];
    int n = 0;
    int len = snprintf(message, sizeof(message), "MESSAGE=%.*s%s", (int)l->len, l->buf,
                       l->truncated ? " truncated=1" : "");
    iov[n++] =
        (struct iovec){message, (size_t)len < sizeof(message) ? (size_t)len : sizeof(message) - 1};
    len = snprintf(priority, sizeof(priority), "PRIORITY=%c", syslog_priority[level]);
    iov[n++] = (struct iovec){priority, (size_t)len};
    iov[n++] = (struct iovec){"SYSLOG_IDENTIFIER=hatcheryd", strlen("SYSLOG_IDENTIFIER=hatcheryd")};
    len = snprintf(event_field, sizeof(event_field), "HATCHERY_EVENT=%s", event);
    iov[n++] = (struct iovec){
        event_field, (size_t)len < sizeof(event_field) ? (size_t)len : sizeof(event_field) - 1};
    for (int f = 0; f < FIELD_MAX; f++) {
        if (!l->fields[f][0])
            continue;
        len = snprintf(fields[f], sizeof(fields[f]), "%s=%s", field_names[f], l->fields[f]);
        iov[n++] = (struct iovec){
            fields[f], (size_t)len < sizeof(fields[f]) ? (size_t)len : sizeof(fields[f]) - 1};
    }
    return journal_send(iov, n);
}

void log_emit(enum log_level level, const char *event, const char *fmt, ...)
{
    if (level < threshold || level >= LOG_LEVEL_MAX)
        return;

    char buf[LOG_MAX_LINE_BYTES];
    struct line l = {.buf = buf, .size = sizeof(buf)};
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    char head[128];
    int n = snprintf(head, sizeof(head),
                     "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s event=", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     now.tv_nsec / 1000000, level_names[level]);
    put_text(&l, head, n > 0 ? (size_t)n : 0);
    put_text(&l, event, strlen(event));
    put_char(&l, ' ');
    va_list ap;
    va_start(ap, fmt);
    format_pairs(&l, fmt, &ap);
    va_end(ap);
    /* Whatever a value held, the line stays one line. */
    for (size_t i = 0; i < l.len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c < 0x20 || c == 0x7f)
            buf[i] = '?';
    }
    if (stderr_is_journal()) {
        if (!stream_only && send_to_journal(&l, level, event))
            return;
        /* The journal's stream still takes the line: with its priority in front. */
        fprintf(stderr, "<%c>", syslog_priority[level]);
    }
    fprintf(stderr, "%.*s%s\n", (int)l.len, buf, l.truncated ? " truncated=1" : "");
}

bool log_throttle_pass(struct log_throttle *t, int64_t now_ms, int64_t *ret_suppressed)
{
    *ret_suppressed = 0;
    if (t->window_start_ms == 0 || now_ms - t->window_start_ms >= LOG_THROTTLE_WINDOW_MS ||
        now_ms < t->window_start_ms) {
        *ret_suppressed = t->suppressed;
        t->window_start_ms = now_ms;
        t->lines = t->suppressed = 0;
    }
    if (t->lines >= LOG_THROTTLE_LINES) {
        t->suppressed++;
        return false;
    }
    t->lines++;
    return true;
}
