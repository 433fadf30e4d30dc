/* Guest isolation as a precondition (guest_isolation.h). */
#include "guest_isolation.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

const char *const guest_isolation_state_names[GUEST_ISOLATION_STATE_MAX] = {
    "not_needed", "in_place", "unchecked", "missing"};

#define RECORD_MAX_BYTES 512

static int read_small(const char *path, char *buf, size_t size, struct stat *ret_st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    int r = 0;
    if (fstat(fd, ret_st) < 0)
        r = -errno;
    else if (!S_ISREG(ret_st->st_mode))
        r = -EINVAL;
    ssize_t n = r == 0 ? read(fd, buf, size - 1) : 0;
    if (n < 0)
        r = -errno;
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return r;
}

/* This boot's id, read once: it does not change while the process lives. NULL when it
 * cannot be read. */
static const char *boot_id(void)
{
    static char id[64];
    if (!id[0]) {
        struct stat ignored;
        if (read_small("/proc/sys/kernel/random/boot_id", id, sizeof(id), &ignored) < 0)
            id[0] = '\0';
        id[strcspn(id, "\n")] = '\0';
    }
    return id[0] ? id : NULL;
}

/* The record's "gid N" line: N, or -1. */
static long long record_gid(const char *record)
{
    const char *line = strstr(record, "\ngid ");
    if (!line)
        return -1;
    char *end = NULL;
    errno = 0;
    long long gid = strtoll(line + 5, &end, 10);
    return errno == 0 && end != line + 5 && *end == '\n' && gid >= 0 ? gid : -1;
}

int guest_firewall_record_check(const char *path, long long qemu_gid, char *why, size_t why_size)
{
    char record[RECORD_MAX_BYTES];
    struct stat st;
    int r = read_small(path, record, sizeof(record), &st);
    if (r == -ENOENT) {
        snprintf(why, why_size,
                 "the guest firewall is not applied (no %s: run guest-firewall.sh apply, or "
                 "enable hatchery-guest-firewall.service)",
                 path);
        return r;
    }
    if (r < 0) {
        snprintf(why, why_size, "the guest firewall's record %s cannot be read: %s", path,
                 strerror(-r));
        return r;
    }
    if (st.st_uid != 0 || (st.st_mode & 022)) {
        snprintf(why, why_size,
                 "the guest firewall's record %s is not root's alone (uid %u, mode %03o): "
                 "not trusted",
                 path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
        return -EPERM;
    }
    const char *boot = boot_id();
    if (!boot) {
        snprintf(why, why_size, "this machine's boot id cannot be read");
        return -EIO;
    }
    /* The record's "boot_id ID" line: rules do not outlive a reboot, and neither may it. */
    char want[96];
    snprintf(want, sizeof(want), "boot_id %s\n", boot);
    if (strncmp(record, want, strlen(want)) != 0) {
        snprintf(why, why_size,
                 "the guest firewall's record %s is from an earlier boot: its rules are gone "
                 "(apply it again)",
                 path);
        return -ESTALE;
    }
    /* The rules match one group's sockets: they keep guests off the host only if that is
     * the group QEMU runs in, and must not be this daemon's. */
    if (qemu_gid < 0) {
        snprintf(why, why_size,
                 "the group QEMU runs in is not known (libvirt's capabilities give no DAC "
                 "label): the guest firewall cannot be matched to it");
        return -ENOENT;
    }
    if (qemu_gid == (long long)getegid()) {
        snprintf(why, why_size,
                 "QEMU runs in hatcheryd's own group (gid %lld): a firewall for that group would "
                 "match hatcheryd too; give QEMU a group of its own (qemu.conf group)",
                 qemu_gid);
        return -EINVAL;
    }
    long long gid = record_gid(record);
    if (gid < 0) {
        snprintf(why, why_size,
                 "the guest firewall's record %s names no gid (an older guest-firewall.sh): "
                 "apply it again",
                 path);
        return -EINVAL;
    }
    if (gid != qemu_gid) {
        snprintf(why, why_size,
                 "the guest firewall matches gid %lld, but QEMU runs in gid %lld here: apply it "
                 "with --group %lld",
                 gid, qemu_gid, qemu_gid);
        return -EINVAL;
    }
    return 0;
}

static bool named_network(const struct config_pool *pool)
{
    return pool->network && strcmp(pool->network, "none") != 0 &&
           strcmp(pool->network, "user") != 0;
}

bool guest_isolation_filtered(const struct config_host *host, const struct config_pool *pool)
{
    return named_network(pool) && strncmp(host->uri, "test:", 5) != 0;
}

/* A libvirt network: the guest filter defined on the host, on a network it filters. */
static enum guest_isolation_state network_check(const struct config_pool *pool,
                                                const struct host_status *st, char *why,
                                                size_t why_size)
{
    if (!st->guest_filter) {
        snprintf(why, why_size, "network '%s': the guest filter is not in place: %s", pool->network,
                 st->guest_filter_error);
        return GUEST_ISOLATION_MISSING;
    }
    if (st->networks_error[0]) {
        snprintf(why, why_size, "network '%s': %s", pool->network, st->networks_error);
        return GUEST_ISOLATION_MISSING;
    }
    for (size_t i = 0; i < st->n_networks; i++) {
        if (strcmp(st->networks[i].name, pool->network) != 0)
            continue;
        if (!st->networks[i].unfilterable[0])
            return GUEST_ISOLATION_IN_PLACE;
        snprintf(why, why_size, "network '%s': the guest filter cannot apply: %s", pool->network,
                 st->networks[i].unfilterable);
        return GUEST_ISOLATION_MISSING;
    }
    snprintf(why, why_size,
             "network '%s' is not among the host's libvirt networks%s (as found at its last "
             "connection)",
             pool->network, st->n_networks >= HOST_NETWORKS_MAX ? " (the first 16 read)" : "");
    return GUEST_ISOLATION_MISSING;
}

enum guest_isolation_state guest_isolation_check(const struct config_host *host,
                                                 const struct config_pool *pool,
                                                 const struct host_status *st, char *why,
                                                 size_t why_size)
{
    why[0] = '\0';
    /* The test driver runs no guest; no network, nothing to reach. A container on a libvirt
     * network takes the guest filter as a VM does (the config refuses `user` for one). */
    if (strncmp(host->uri, "test:", 5) == 0 || !pool->network || strcmp(pool->network, "none") == 0)
        return GUEST_ISOLATION_NOT_NEEDED;
    bool known = st && st->up;
    if (named_network(pool)) {
        if (!known)
            snprintf(why, why_size, "network '%s': the host is not connected", pool->network);
        return known ? network_check(pool, st, why, why_size) : GUEST_ISOLATION_MISSING;
    }
    if (host->guest_isolation == ISOLATION_UNCHECKED)
        return GUEST_ISOLATION_UNCHECKED;
    if (!config_host_is_local(host->uri)) {
        snprintf(why, why_size,
                 "user-mode networking on a remote host: its guest firewall cannot be verified "
                 "from here; apply guest-firewall.sh there and say guest_isolation: unchecked "
                 "for host '%s'",
                 host->name);
        return GUEST_ISOLATION_MISSING;
    }
    /* (QEMU's group as last found: a host away for a moment keeps its state.) */
    if (!st) {
        snprintf(why, why_size, "the host's state is not known");
        return GUEST_ISOLATION_MISSING;
    }
    return guest_firewall_record_check(GUEST_FIREWALL_RECORD, st->qemu_gid, why, why_size) == 0
               ? GUEST_ISOLATION_IN_PLACE
               : GUEST_ISOLATION_MISSING;
}

enum guest_isolation_state guest_isolation_host(const struct config *config,
                                                const struct config_host *host,
                                                const struct host_status *st, char *why,
                                                size_t why_size)
{
    enum guest_isolation_state state = GUEST_ISOLATION_NOT_NEEDED;
    why[0] = '\0';
    for (size_t p = 0; p < config->n_pools; p++) {
        const struct config_pool *pool = &config->pools[p];
        if (!config_pool_uses_host(pool, host->name))
            continue;
        char reason[256];
        enum guest_isolation_state s =
            guest_isolation_check(host, pool, st, reason, sizeof(reason));
        if (s > state) {
            state = s;
            if (s == GUEST_ISOLATION_MISSING)
                snprintf(why, why_size, "%s", reason);
        }
        if (state == GUEST_ISOLATION_MISSING)
            break;
    }
    return state;
}

struct isolation_noted {
    char *host;
    enum guest_isolation_state state;
    char why[512];
    struct isolation_noted *next;
};

struct guest_isolation_log {
    struct isolation_noted *hosts;
};

struct guest_isolation_log *guest_isolation_log_new(void)
{
    return calloc(1, sizeof(struct guest_isolation_log));
}

void guest_isolation_log_free(struct guest_isolation_log *log)
{
    if (!log)
        return;
    while (log->hosts) {
        struct isolation_noted *n = log->hosts;
        log->hosts = n->next;
        free(n->host);
        free(n);
    }
    free(log);
}

int guest_isolation_log_note(struct guest_isolation_log *log, const char *host,
                             enum guest_isolation_state state, const char *why)
{
    struct isolation_noted *n = log->hosts;
    while (n && strcmp(n->host, host) != 0)
        n = n->next;
    bool first = !n;
    if (first) {
        n = calloc(1, sizeof(*n));
        if (!n || !(n->host = strdup(host))) {
            free(n);
            return -ENOMEM;
        }
        n->state = GUEST_ISOLATION_NOT_NEEDED;
        n->next = log->hosts;
        log->hosts = n;
    }
    bool was_missing = n->state == GUEST_ISOLATION_MISSING;
    if (state == GUEST_ISOLATION_MISSING && (!was_missing || strcmp(n->why, why) != 0))
        log_warn("host.unsafe", "host=%s guest_isolation=missing reason=\"%s\"", host, why);
    else if (state != GUEST_ISOLATION_MISSING && was_missing)
        log_info("host.isolation", "host=%s guest_isolation=%s", host,
                 guest_isolation_state_names[state]);
    n->state = state;
    snprintf(n->why, sizeof(n->why), "%s", state == GUEST_ISOLATION_MISSING ? why : "");
    return 0;
}
