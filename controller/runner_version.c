/* Whether GitHub still registers an image's runner (runner_version.h). */
#define _GNU_SOURCE
#include "runner_version.h"

#include <stdio.h>
#include <string.h>

#include "image_manifest.h"

bool runner_version_parse(const char *text, int ret[3])
{
    if (!text)
        return false;
    if (*text == 'v')
        text++;
    int used = 0;
    if (sscanf(text, "%d.%d.%d%n", &ret[0], &ret[1], &ret[2], &used) != 3)
        return false;
    /* Only trailing whitespace (a RUNNER_VERSION file's newline) may follow. */
    for (const char *p = text + used; *p; p++)
        if (*p != '\n' && *p != ' ' && *p != '\r' && *p != '\t')
            return false;
    return ret[0] >= 0 && ret[1] >= 0 && ret[2] >= 0;
}

static int version_cmp(const int a[3], const int b[3])
{
    for (int i = 0; i < 3; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return 0;
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

enum runner_compliance runner_version_check(const char *version, const json_t *releases, time_t now,
                                            int warn_days, char *msg, size_t msg_size)
{
    int mine[3], floor[3];
    if (!runner_version_parse(version, mine)) {
        snprintf(msg, msg_size, "not a runner version: %s", version ? version : "(none)");
        return RUNNER_BAD_INPUT;
    }
    if (!json_is_array(releases)) {
        snprintf(msg, msg_size, "the releases are not GitHub's list of releases (an array)");
        return RUNNER_BAD_INPUT;
    }
    runner_version_parse(RUNNER_VERSION_FLOOR, floor);
    time_t enforced = runner_version_time(RUNNER_VERSION_FLOOR_ENFORCED);
    char day[11];
    day_of(enforced, day);
    if (version_cmp(mine, floor) < 0) {
        long days = days_until(enforced, now);
        if (days < 0) {
            snprintf(msg, msg_size,
                     "runner %d.%d.%d: OUT OF COMPLIANCE: GitHub registers no runner older "
                     "than %s since %s: rebuild the image",
                     mine[0], mine[1], mine[2], RUNNER_VERSION_FLOOR, day);
            return RUNNER_REFUSED;
        }
        if (days <= warn_days) {
            snprintf(msg, msg_size,
                     "runner %d.%d.%d: WARNING: GitHub registers no runner older than %s "
                     "from %s (%ld days): rebuild the image",
                     mine[0], mine[1], mine[2], RUNNER_VERSION_FLOOR, day, days);
            return RUNNER_WARNING;
        }
    }
    /* The newest release, and the oldest one newer than this runner: its publication
     * starts the grace period. */
    int newest[3] = {-1, -1, -1}, first[3] = {-1, -1, -1};
    time_t first_published = -1;
    size_t i;
    json_t *r;
    json_array_foreach(releases, i, r)
    {
        if (json_is_true(json_object_get(r, "draft")) ||
            json_is_true(json_object_get(r, "prerelease")))
            continue;
        int v[3];
        const char *tag = json_string_value(json_object_get(r, "tag_name"));
        time_t published =
            runner_version_time(json_string_value(json_object_get(r, "published_at")));
        if (!runner_version_parse(tag, v) || published < 0) {
            snprintf(msg, msg_size, "release %zu: no runner version in tag_name or no published_at",
                     i);
            return RUNNER_BAD_INPUT;
        }
        if (version_cmp(v, newest) > 0)
            memcpy(newest, v, sizeof(newest));
        if (version_cmp(v, mine) > 0 && (first[0] < 0 || version_cmp(v, first) < 0)) {
            memcpy(first, v, sizeof(first));
            first_published = published;
        }
    }
    if (first[0] < 0) {
        snprintf(msg, msg_size, "runner %d.%d.%d: current", mine[0], mine[1], mine[2]);
        return RUNNER_CURRENT;
    }
    time_t deadline = first_published + (time_t)RUNNER_RELEASE_GRACE_DAYS * 86400;
    long left = days_until(deadline, now);
    day_of(deadline, day);
    if (left < 0) {
        snprintf(msg, msg_size,
                 "runner %d.%d.%d: OUT OF COMPLIANCE since %s (newest %d.%d.%d): rebuild the image",
                 mine[0], mine[1], mine[2], day, newest[0], newest[1], newest[2]);
        return RUNNER_REFUSED;
    }
    if (left <= warn_days) {
        snprintf(msg, msg_size,
                 "runner %d.%d.%d: WARNING: GitHub refuses it from %s (%ld days; newest "
                 "%d.%d.%d): rebuild the image",
                 mine[0], mine[1], mine[2], day, left, newest[0], newest[1], newest[2]);
        return RUNNER_WARNING;
    }
    snprintf(msg, msg_size, "runner %d.%d.%d: behind %d.%d.%d, accepted until %s (%ld days)",
             mine[0], mine[1], mine[2], newest[0], newest[1], newest[2], day, left);
    return RUNNER_CURRENT;
}
