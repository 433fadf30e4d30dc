/* Guest isolation as a precondition (guest_isolation.h). */
#include "guest_isolation.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int guest_firewall_record_check(const char *path, char *why, size_t why_size)
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
    return 0;
}

static bool named_network(const struct config_pool *pool)
{
    return pool->network && strcmp(pool->network, "none") != 0 &&
           strcmp(pool->network, "user") != 0;
}

bool guest_isolation_filtered(const struct config_host *host, const struct config_pool *pool)
{
    return named_network(pool) && host->guest_isolation != ISOLATION_UNCHECKED &&
           strncmp(host->uri, "test:", 5) != 0;
}

enum guest_isolation_state guest_isolation_check(const struct config_host *host,
                                                 const struct config_pool *pool,
                                                 const char *filter_missing, char *why,
                                                 size_t why_size)
{
    why[0] = '\0';
    /* The test driver runs no guest; no network, nothing to reach. A container on a libvirt
     * network takes the guest filter as a VM does (the config refuses `user` for one). */
    if (strncmp(host->uri, "test:", 5) == 0 || !pool->network || strcmp(pool->network, "none") == 0)
        return GUEST_ISOLATION_NOT_NEEDED;
    if (host->guest_isolation == ISOLATION_UNCHECKED)
        return GUEST_ISOLATION_UNCHECKED;
    if (named_network(pool)) {
        if (!filter_missing)
            return GUEST_ISOLATION_IN_PLACE;
        snprintf(why, why_size, "network '%s': the guest filter is not in place: %s", pool->network,
                 filter_missing);
        return GUEST_ISOLATION_MISSING;
    }
    if (!config_host_is_local(host->uri)) {
        snprintf(why, why_size,
                 "user-mode networking on a remote host: its guest firewall cannot be verified "
                 "from here; apply guest-firewall.sh there and say guest_isolation: unchecked "
                 "for host '%s'",
                 host->name);
        return GUEST_ISOLATION_MISSING;
    }
    return guest_firewall_record_check(GUEST_FIREWALL_RECORD, why, why_size) == 0
               ? GUEST_ISOLATION_IN_PLACE
               : GUEST_ISOLATION_MISSING;
}

enum guest_isolation_state guest_isolation_host(const struct config *config,
                                                const struct config_host *host,
                                                const char *filter_missing, char *why,
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
            guest_isolation_check(host, pool, filter_missing, reason, sizeof(reason));
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
