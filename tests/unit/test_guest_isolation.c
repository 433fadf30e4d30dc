/* Guest isolation as a precondition: the firewall's record is trusted only when it is
 * root's alone, of this boot and for the group QEMU runs in; a libvirt network only when
 * the guest filter is defined and libvirt filters that network's interfaces; and a
 * networked guest is refused wherever its isolation cannot be seen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guest_isolation.h"

static char *boot_id(void)
{
    static char id[64];
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    assert_non_null(f);
    assert_non_null(fgets(id, sizeof(id), f));
    fclose(f);
    id[strcspn(id, "\n")] = '\0';
    return id;
}

static void write_record(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
}

/* The tests' libvirtd runs QEMU as root in this group (not root's, not this test's). */
#define QEMU_GID 64057

static void test_firewall_record(void **state)
{
    (void)state;
    char dir[] = "/tmp/hatchery-isolation-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], text[256], why[512];
    snprintf(path, sizeof(path), "%s/record", dir);

    assert_int_equal(guest_firewall_record_check(path, QEMU_GID, why, sizeof(why)), -ENOENT);
    assert_non_null(strstr(why, "the guest firewall is not applied"));

    snprintf(text, sizeof(text), "boot_id %s\ngroup hatchery-qemu\ngid %d\nfamilies 4 6\n",
             boot_id(), QEMU_GID);
    write_record(path, text, 0644);
    if (getuid() == 0) {
        assert_int_equal(guest_firewall_record_check(path, QEMU_GID, why, sizeof(why)), 0);
        /* The rules match another group than QEMU's: they keep nothing off the host. */
        assert_int_equal(guest_firewall_record_check(path, QEMU_GID + 1, why, sizeof(why)),
                         -EINVAL);
        assert_string_equal(why, "the guest firewall matches gid 64057, but QEMU runs in gid "
                                 "64058 here: apply it with --group 64058");
        /* QEMU's group not known (no DAC label): nothing to match the rules to. */
        assert_int_equal(guest_firewall_record_check(path, -1, why, sizeof(why)), -ENOENT);
        assert_non_null(strstr(why, "the group QEMU runs in is not known"));
        /* QEMU in hatcheryd's own group: the rules would match hatcheryd too. */
        assert_int_equal(guest_firewall_record_check(path, (long long)getegid(), why, sizeof(why)),
                         -EINVAL);
        assert_non_null(strstr(why, "QEMU runs in hatcheryd's own group"));
        /* A record of an older guest-firewall.sh, which names the group only, or a bad gid. */
        char old[200];
        snprintf(old, sizeof(old), "boot_id %s\ngroup hatchery-qemu\nfamilies 4\n", boot_id());
        write_record(path, old, 0644);
        assert_int_equal(guest_firewall_record_check(path, QEMU_GID, why, sizeof(why)), -EINVAL);
        assert_non_null(strstr(why, "names no gid"));
        snprintf(old, sizeof(old), "boot_id %s\ngid 64057x\n", boot_id());
        write_record(path, old, 0644);
        assert_int_equal(guest_firewall_record_check(path, QEMU_GID, why, sizeof(why)), -EINVAL);
        write_record(path, text, 0644);
        /* Writable by others: anyone could have written it. */
        assert_int_equal(chmod(path, 0666), 0);
        assert_int_equal(guest_firewall_record_check(path, QEMU_GID, why, sizeof(why)), -EPERM);
        assert_non_null(strstr(why, "is not root's alone"));
        /* Not root's. */
        assert_int_equal(chmod(path, 0644), 0);
        assert_int_equal(chown(path, 65534, 65534), 0);
        assert_int_equal(guest_firewall_record_check(path, QEMU_GID, why, sizeof(why)), -EPERM);
        assert_int_equal(chown(path, 0, 0), 0);
    } else {
        assert_int_equal(guest_firewall_record_check(path, QEMU_GID, why, sizeof(why)), -EPERM);
    }

    /* An earlier boot's record: its rules went with that boot. */
    write_record(path, "boot_id 00000000-0000-0000-0000-000000000000\ngroup x\n", 0644);
    if (getuid() == 0) {
        assert_int_equal(guest_firewall_record_check(path, QEMU_GID, why, sizeof(why)), -ESTALE);
        assert_non_null(strstr(why, "from an earlier boot"));
        /* Empty, or a symlink to a good one: refused. */
        write_record(path, "", 0644);
        assert_int_equal(guest_firewall_record_check(path, QEMU_GID, why, sizeof(why)), -ESTALE);
        char good[160];
        snprintf(good, sizeof(good), "%s/good", dir);
        write_record(good, text, 0644);
        unlink(path);
        assert_int_equal(symlink(good, path), 0);
        assert_true(guest_firewall_record_check(path, QEMU_GID, why, sizeof(why)) < 0);
        unlink(good);
    }
    unlink(path);
    rmdir(dir);
}

static void test_check_by_host_and_pool(void **state)
{
    (void)state;
    struct config_host local = {.name = "here", .uri = "qemu:///system"};
    struct config_host remote = {.name = "p10-b", .uri = "qemu+ssh://h@p10-b/system"};
    struct config_host testdrv = {.name = "t", .uri = "test:///default"};
    struct config_pool user = {.name = "u", .backend = BACKEND_VM, .network = "user"};
    struct config_pool none = {.name = "n", .backend = BACKEND_VM, .network = "none"};
    struct config_pool bridged = {.name = "b", .backend = BACKEND_VM, .network = "br0"};
    struct config_pool on_ovs = {.name = "o", .backend = BACKEND_VM, .network = "ovs"};
    struct config_pool elsewhere = {.name = "e", .backend = BACKEND_VM, .network = "gone"};
    struct config_pool container = {.name = "c", .backend = BACKEND_CONTAINER, .network = "none"};
    struct config_pool bridged_container = {
        .name = "cb", .backend = BACKEND_CONTAINER, .network = "br0"};
    /* A host up with the filter defined, a network it filters and one it cannot. */
    struct host_status st = {
        .up = true,
        .guest_filter = true,
        .qemu_gid = QEMU_GID,
        .networks = {{"br0", ""}, {"ovs", "its ports are a virtual switch's"}},
        .n_networks = 2,
    };
    struct host_status no_filter = st;
    no_filter.guest_filter = false;
    snprintf(no_filter.guest_filter_error, sizeof(no_filter.guest_filter_error), "%s",
             "nwfilter hatchery-guest-isolation cannot be defined: no driver");
    struct host_status down = {.up = false, .qemu_gid = -1};
    struct host_status away = st; /* up before, and QEMU's group known then */
    away.up = false;
    char why[512];

    assert_int_equal(guest_isolation_check(&local, &none, &st, why, sizeof(why)),
                     GUEST_ISOLATION_NOT_NEEDED);
    assert_int_equal(guest_isolation_check(&testdrv, &user, NULL, why, sizeof(why)),
                     GUEST_ISOLATION_NOT_NEEDED);
    assert_int_equal(guest_isolation_check(&local, &container, NULL, why, sizeof(why)),
                     GUEST_ISOLATION_NOT_NEEDED);
    /* A remote host's firewall cannot be seen from here. */
    assert_int_equal(guest_isolation_check(&remote, &user, &st, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING);
    assert_non_null(strstr(why, "user-mode networking on a remote host"));
    /* A libvirt network: the guest filter, local or remote alike. Missing, the reason. */
    assert_int_equal(guest_isolation_check(&local, &bridged, &no_filter, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING);
    /* A container on a libvirt network takes the filter as a VM does. */
    assert_int_equal(
        guest_isolation_check(&local, &bridged_container, &no_filter, why, sizeof(why)),
        GUEST_ISOLATION_MISSING);
    assert_true(guest_isolation_filtered(&local, &bridged_container));
    assert_string_equal(why, "network 'br0': the guest filter is not in place: nwfilter "
                             "hatchery-guest-isolation cannot be defined: no driver");
    assert_int_equal(guest_isolation_check(&remote, &bridged, &no_filter, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING);
    assert_int_equal(guest_isolation_check(&local, &bridged, &st, why, sizeof(why)),
                     GUEST_ISOLATION_IN_PLACE);
    assert_int_equal(guest_isolation_check(&remote, &bridged, &st, why, sizeof(why)),
                     GUEST_ISOLATION_IN_PLACE);
    /* A network libvirt does not filter, or one the host does not have: missing. */
    assert_int_equal(guest_isolation_check(&local, &on_ovs, &st, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING);
    assert_string_equal(why, "network 'ovs': the guest filter cannot apply: its ports are a "
                             "virtual switch's");
    assert_int_equal(guest_isolation_check(&local, &elsewhere, &st, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING);
    assert_non_null(strstr(why, "network 'gone' is not among the host's libvirt networks"));
    /* A host that is not up: its filter is the connection's, so a libvirt network is
     * missing; QEMU's group is as last found (never: not known). */
    assert_int_equal(guest_isolation_check(&local, &bridged, &away, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING);
    assert_non_null(strstr(why, "not connected"));
    assert_int_equal(guest_isolation_check(&local, &user, &down, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING); /* no record here, or QEMU's group unknown */
    assert_int_equal(guest_isolation_check(&local, &user, NULL, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING);
    /* Which guests take the filter: one on a libvirt network, on any host but the test
     * driver, whatever guest_isolation says. */
    assert_true(guest_isolation_filtered(&local, &bridged));
    assert_true(guest_isolation_filtered(&remote, &bridged));
    assert_false(guest_isolation_filtered(&local, &user));
    assert_false(guest_isolation_filtered(&local, &none));
    assert_false(guest_isolation_filtered(&testdrv, &bridged));
    /* The operator says the user network is isolated some other way: that check alone is
     * waived; the guest filter still applies, and is still required. */
    remote.guest_isolation = ISOLATION_UNCHECKED;
    assert_int_equal(guest_isolation_check(&remote, &user, &st, why, sizeof(why)),
                     GUEST_ISOLATION_UNCHECKED);
    assert_int_equal(guest_isolation_check(&remote, &user, NULL, why, sizeof(why)),
                     GUEST_ISOLATION_UNCHECKED);
    assert_int_equal(guest_isolation_check(&remote, &bridged, &no_filter, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING);
    assert_int_equal(guest_isolation_check(&remote, &bridged, &st, why, sizeof(why)),
                     GUEST_ISOLATION_IN_PLACE);
    assert_true(guest_isolation_filtered(&remote, &bridged));
    /* Here, the answer is the record's, for QEMU's group. */
    char record_why[512];
    bool in_place = guest_firewall_record_check(GUEST_FIREWALL_RECORD, QEMU_GID, record_why,
                                                sizeof(record_why)) == 0;
    assert_int_equal(guest_isolation_check(&local, &user, &st, why, sizeof(why)),
                     in_place ? GUEST_ISOLATION_IN_PLACE : GUEST_ISOLATION_MISSING);
    assert_int_equal(guest_isolation_check(&local, &user, &away, why, sizeof(why)),
                     in_place ? GUEST_ISOLATION_IN_PLACE : GUEST_ISOLATION_MISSING);

    /* A host's state is its worst pool's, among the pools that may use it. */
    char *only_remote[] = {"p10-b"};
    struct config_pool pools[2] = {none, bridged};
    pools[1].hosts = only_remote;
    pools[1].n_hosts = 1;
    struct config c = {.pools = pools, .n_pools = 2};
    assert_int_equal(guest_isolation_host(&c, &local, &no_filter, why, sizeof(why)),
                     GUEST_ISOLATION_NOT_NEEDED);
    remote.guest_isolation = ISOLATION_REQUIRED;
    assert_int_equal(guest_isolation_host(&c, &remote, &st, why, sizeof(why)),
                     GUEST_ISOLATION_IN_PLACE);
    assert_int_equal(guest_isolation_host(&c, &remote, &no_filter, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING);
    assert_non_null(strstr(why, "network 'br0'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_firewall_record),
        cmocka_unit_test(test_check_by_host_and_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
