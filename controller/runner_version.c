/* Whether GitHub still registers an image's runner (runner_version.h). */
#define _GNU_SOURCE
#include "runner_version.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool runner_version_parse(const char *s, long v[3])
{
    char *end;
    if (!s)
        return false;
    for (int i = 0; i < 3; i++) {
        if (*s < '0' || *s > '9')
            return false;
        v[i] = strtol(s, &end, 10);
        s = end;
        if (i < 2 && *s++ != '.')
            return false;
    }
    return *s == 0;
}

int runner_version_cmp(const long a[3], const long b[3])
{
    for (int i = 0; i < 3; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* A tag's "v2.329.0" or a RUNNER_VERSION file's "2.329.0\n": the version without them
 * (whitespace around it is taken off, as the check always did). */
static bool parse_loose(const char *text, long v[3])
{
    char buf[64];
    if (!text)
        return false;
    text += strspn(text, " \t\r\n");
    if (*text == 'v')
        text++;
    size_t n = strcspn(text, " \t\r\n");
    if (n >= sizeof(buf) || text[n + strspn(text + n, " \t\r\n")] != 0)
        return false;
    memcpy(buf, text, n);
    buf[n] = 0;
    return runner_version_parse(buf, v);
}

time_t runner_version_time(const char *iso)
{
    struct tm tm = {0};
    const char *end = iso ? strptime(iso, "%Y-%m-%dT%H:%M:%SZ", &tm) : NULL;
    if (!end || *end)
        return -1;
    return timegm(&tm);
}

static void day_of(time_t t, char out[11])
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 11, "%Y-%m-%d", &tm);
}

/* Whole days from `now` to `then`, rounded down (negative once it is past). */
static long days_until(time_t then, time_t now)
{
    double d = difftime(then, now) / 86400.0;
    long whole = (long)d;
    return d < 0 && (double)whole != d ? whole - 1 : whole;
}

int runner_version_judge(const char *version, const json_t *releases, struct runner_judgement *ret,
                         char *msg, size_t msg_size)
{
    struct runner_judgement j = {.refused_at = -1, .newest = {-1, -1, -1}};
    if (!parse_loose(version, j.mine)) {
        snprintf(msg, msg_size, "not a runner version: %s", version ? version : "(none)");
        return -EINVAL;
    }
    if (releases && !json_is_array(releases)) {
        snprintf(msg, msg_size, "the releases are not GitHub's list of releases (an array)");
        return -EINVAL;
    }
    long floor[3];
    runner_version_parse(RUNNER_VERSION_FLOOR, floor);
    if (runner_version_cmp(j.mine, floor) < 0) {
        j.below_floor = true;
        j.refused_at = runner_version_time(RUNNER_VERSION_FLOOR_ENFORCED);
    }
    /* The newest release, and the oldest one newer than this runner: its publication
     * starts the grace period. */
    long first[3] = {-1, -1, -1};
    time_t first_published = -1;
    size_t i;
    json_t *r;
    json_array_foreach(releases, i, r)
    {
        if (json_is_true(json_object_get(r, "draft")) ||
            json_is_true(json_object_get(r, "prerelease")))
            continue;
        long v[3];
        const char *tag = json_string_value(json_object_get(r, "tag_name"));
        time_t published =
            runner_version_time(json_string_value(json_object_get(r, "published_at")));
        if (!parse_loose(tag, v) || published < 0) {
            snprintf(msg, msg_size, "release %zu: no runner version in tag_name or no published_at",
                     i);
            return -EINVAL;
        }
        if (runner_version_cmp(v, j.newest) > 0)
            memcpy(j.newest, v, sizeof(j.newest));
        if (runner_version_cmp(v, j.mine) > 0 &&
            (first[0] < 0 || runner_version_cmp(v, first) < 0)) {
            memcpy(first, v, sizeof(first));
            first_published = published;
        }
    }
    if (first[0] >= 0) {
        time_t deadline = first_published + (time_t)RUNNER_RELEASE_GRACE_DAYS * 86400;
        if (j.refused_at < 0 || deadline < j.refused_at)
            j.refused_at = deadline;
    }
    j.floor_first =
        j.below_floor && j.refused_at == runner_version_time(RUNNER_VERSION_FLOOR_ENFORCED);
    *ret = j;
    return 0;
}

enum runner_compliance runner_version_check(const char *version, const json_t *releases, time_t now,
                                            int warn_days, char *msg, size_t msg_size)
{
    struct runner_judgement j;
    if (runner_version_judge(version, releases, &j, msg, msg_size) < 0)
        return RUNNER_BAD_INPUT;
    const long *mine = j.mine, *newest = j.newest;
    char day[11];
    if (j.refused_at < 0) {
        snprintf(msg, msg_size, "runner %ld.%ld.%ld: current", mine[0], mine[1], mine[2]);
        return RUNNER_CURRENT;
    }
    long left = days_until(j.refused_at, now);
    day_of(j.refused_at, day);
    if (j.floor_first) {
        if (left < 0) {
            snprintf(msg, msg_size,
                     "runner %ld.%ld.%ld: OUT OF COMPLIANCE: GitHub registers no runner older "
                     "than %s since %s: rebuild the image",
                     mine[0], mine[1], mine[2], RUNNER_VERSION_FLOOR, day);
            return RUNNER_REFUSED;
        }
        if (left <= warn_days) {
            snprintf(msg, msg_size,
                     "runner %ld.%ld.%ld: WARNING: GitHub registers no runner older than %s "
                     "from %s (%ld days): rebuild the image",
                     mine[0], mine[1], mine[2], RUNNER_VERSION_FLOOR, day, left);
            return RUNNER_WARNING;
        }
    }
    if (left < 0) {
        snprintf(msg, msg_size,
                 "runner %ld.%ld.%ld: OUT OF COMPLIANCE since %s (newest %ld.%ld.%ld): rebuild the "
                 "image",
                 mine[0], mine[1], mine[2], day, newest[0], newest[1], newest[2]);
        return RUNNER_REFUSED;
    }
    if (left <= warn_days) {
        snprintf(msg, msg_size,
                 "runner %ld.%ld.%ld: WARNING: GitHub refuses it from %s (%ld days; newest "
                 "%ld.%ld.%ld): rebuild the image",
                 mine[0], mine[1], mine[2], day, left, newest[0], newest[1], newest[2]);
        return RUNNER_WARNING;
    }
    if (j.floor_first)
        snprintf(msg, msg_size,
                 "runner %ld.%ld.%ld: below %s, which GitHub enforces from %s (%ld days)", mine[0],
                 mine[1], mine[2], RUNNER_VERSION_FLOOR, day, left);
    else
        snprintf(msg, msg_size,
                 "runner %ld.%ld.%ld: behind %ld.%ld.%ld, accepted until %s (%ld days)", mine[0],
                 mine[1], mine[2], newest[0], newest[1], newest[2], day, left);
    return RUNNER_CURRENT;
}
