/* The log line: every value a logfmt value (quoted and escaped when it must be), so that a
 * value from the network cannot add a pair or a line; numbers formatted as printf would;
 * and the syslog priority in front when stderr is the journal's stream but its native
 * socket is not there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

/* Runs the logging in `fn` with stderr in a file and returns all it wrote. With
 * `journal`, JOURNAL_STREAM names that file, as systemd names the journal's stream. */
static const char *capture_all(void (*fn)(void), bool journal)
{
    static char out[8192];
    char path[] = "/tmp/hatchery-test-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    if (journal) {
        struct stat st;
        assert_int_equal(fstat(fd, &st), 0);
        char js[64];
        snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
        setenv("JOURNAL_STREAM", js, 1);
    }
    fflush(stderr);
    int saved_stderr = dup(2);
    dup2(fd, 2);
    fn();
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    unsetenv("JOURNAL_STREAM");
    FILE *f = fdopen(fd, "r");
    rewind(f);
    size_t n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = 0;
    fclose(f);
    unlink(path);
    return out;
}

/* The line from "event=…" on. */
static const char *capture(void (*fn)(void))
{
    const char *ev = strstr(capture_all(fn, false), "event=");
    assert_non_null(ev);
    return ev;
}

static void log_plain(void)
{
    log_info("t.plain", "host=%s n=%d big=%lld size=%zu f=%.1f hex=%x pct=%%", "p10-a", -3,
             (long long)INT64_MAX, (size_t)42, 2.25, 255u);
}

static void numbers_and_plain_words_are_written_as_printf_would(void **state)
{
    (void)state;
    assert_string_equal(capture(log_plain),
                        "event=t.plain host=p10-a n=-3 big=9223372036854775807 size=42 f=2.2 "
                        "hex=ff pct=%\n");
}

static void log_hostile(void)
{
    /* An agent's hello, a GitHub error, an X-GitHub-Event: anything. */
    log_warn("t.hostile", "arch=%s version=%s event_header=%s empty=%s", "ppc64le level=error",
             "1.0\" injected=1", "a\\b\nsecond line", "");
}

static void hostile_values_are_quoted_and_escaped(void **state)
{
    (void)state;
    assert_string_equal(capture(log_hostile),
                        "event=t.hostile arch=\"ppc64le level=error\" "
                        "version=\"1.0\\\" injected=1\" event_header=\"a\\\\b\\nsecond line\" "
                        "empty=\"\"\n");
}

static void log_prequoted(void)
{
    log_warn("t.quoted", "reason=\"%s\" tail=%s", "timeout\" forged=\"yes", "x");
}

static void a_value_the_format_quotes_is_escaped_inside_its_quotes(void **state)
{
    (void)state;
    assert_string_equal(capture(log_prequoted),
                        "event=t.quoted reason=\"timeout\\\" forged=\\\"yes\" tail=x\n");
}

static const char *volatile nothing; /* NULL, out of the compiler's sight */

static void log_precision(void)
{
    log_info("t.prec", "cut=%.3s star=%.*s null=%s", "abcdef", 2, "xyz", nothing);
}

static void precision_and_null(void **state)
{
    (void)state;
    assert_string_equal(capture(log_precision), "event=t.prec cut=abc star=xy null=(null)\n");
}

static void log_control(void)
{
    log_info("t.ctl", "v=%s",
             "a\x01\x7f"
             "b");
}

static void control_characters_become_escapes(void **state)
{
    (void)state;
    assert_string_equal(capture(log_control), "event=t.ctl v=\"a\\x01\\x7fb\"\n");
}

static void log_levels(void)
{
    log_warn("t.journal", "n=%d", 1);
    log_error("t.journal", "n=%d", 2);
}

/* Under systemd, stderr is the journal: JOURNAL_STREAM names its device and inode. Lines
 * go to the journal by its native protocol (tests/integration/journal.test.mjs); when
 * that socket is not there, down the stream, each with its priority in front. */
static void the_journal_gets_each_line_with_its_priority(void **state)
{
    (void)state;
    if (access("/run/systemd/journal/socket", F_OK) == 0)
        skip(); /* a journald would take the lines: the integration test covers that */
    const char *out = capture_all(log_levels, true);
    assert_int_equal(strncmp(out, "<4>ts=", 6), 0);
    assert_non_null(strstr(out, "\n<3>ts="));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(numbers_and_plain_words_are_written_as_printf_would),
        cmocka_unit_test(hostile_values_are_quoted_and_escaped),
        cmocka_unit_test(a_value_the_format_quotes_is_escaped_inside_its_quotes),
        cmocka_unit_test(precision_and_null),
        cmocka_unit_test(control_characters_become_escapes),
        cmocka_unit_test(the_journal_gets_each_line_with_its_priority),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
