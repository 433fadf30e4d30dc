/* Guest isolation as a precondition: the firewall's record is trusted only when it is
 * root's alone and of this boot, and a networked guest is refused wherever its isolation
 * cannot be seen. */
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

static void test_firewall_record(void **state)
{
    (void)state;
    char dir[] = "/tmp/hatchery-isolation-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], text[256], why[512];
    snprintf(path, sizeof(path), "%s/record", dir);

    assert_int_equal(guest_firewall_record_check(path, why, sizeof(why)), -ENOENT);
    assert_non_null(strstr(why, "the guest firewall is not applied"));

    snprintf(text, sizeof(text), "boot_id %s\ngroup libvirt-qemu\nfamilies 4 6\n", boot_id());
    write_record(path, text, 0644);
    if (getuid() == 0) {
        assert_int_equal(guest_firewall_record_check(path, why, sizeof(why)), 0);
        /* Writable by others: anyone could have written it. */
        assert_int_equal(chmod(path, 0666), 0);
        assert_int_equal(guest_firewall_record_check(path, why, sizeof(why)), -EPERM);
        assert_non_null(strstr(why, "is not root's alone"));
        /* Not root's. */
        assert_int_equal(chmod(path, 0644), 0);
        assert_int_equal(chown(path, 65534, 65534), 0);
        assert_int_equal(guest_firewall_record_check(path, why, sizeof(why)), -EPERM);
        assert_int_equal(chown(path, 0, 0), 0);
    } else {
        assert_int_equal(guest_firewall_record_check(path, why, sizeof(why)), -EPERM);
    }

    /* An earlier boot's record: its rules went with that boot. */
    write_record(path, "boot_id 00000000-0000-0000-0000-000000000000\ngroup x\n", 0644);
    if (getuid() == 0) {
        assert_int_equal(guest_firewall_record_check(path, why, sizeof(why)), -ESTALE);
        assert_non_null(strstr(why, "from an earlier boot"));
        /* Empty, or a symlink to a good one: refused. */
        write_record(path, "", 0644);
        assert_int_equal(guest_firewall_record_check(path, why, sizeof(why)), -ESTALE);
        char good[160];
        snprintf(good, sizeof(good), "%s/good", dir);
        write_record(good, text, 0644);
        unlink(path);
        assert_int_equal(symlink(good, path), 0);
        assert_true(guest_firewall_record_check(path, why, sizeof(why)) < 0);
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
    struct config_pool container = {.name = "c", .backend = BACKEND_CONTAINER, .network = "none"};
    struct config_pool bridged_container = {
        .name = "cb", .backend = BACKEND_CONTAINER, .network = "br0"};
    char why[512];

    assert_int_equal(guest_isolation_check(&local, &none, NULL, why, sizeof(why)),
                     GUEST_ISOLATION_NOT_NEEDED);
    assert_int_equal(guest_isolation_check(&testdrv, &user, NULL, why, sizeof(why)),
                     GUEST_ISOLATION_NOT_NEEDED);
    assert_int_equal(guest_isolation_check(&local, &container, NULL, why, sizeof(why)),
                     GUEST_ISOLATION_NOT_NEEDED);
    /* A remote host's firewall cannot be seen from here. */
    assert_int_equal(guest_isolation_check(&remote, &user, NULL, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING);
    assert_non_null(strstr(why, "user-mode networking on a remote host"));
    /* A libvirt network: the guest filter, local or remote alike. Missing, the reason. */
    const char *no_filter = "nwfilter hatchery-guest-isolation cannot be defined: no driver";
    assert_int_equal(guest_isolation_check(&local, &bridged, no_filter, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING);
    /* A container on a libvirt network takes the filter as a VM does. */
    assert_int_equal(guest_isolation_check(&local, &bridged_container, no_filter, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING);
    assert_true(guest_isolation_filtered(&local, &bridged_container));
    assert_string_equal(why, "network 'br0': the guest filter is not in place: nwfilter "
                             "hatchery-guest-isolation cannot be defined: no driver");
    assert_int_equal(guest_isolation_check(&remote, &bridged, no_filter, why, sizeof(why)),
                     GUEST_ISOLATION_MISSING);
    assert_int_equal(guest_isolation_check(&local, &bridged, NULL, why, sizeof(why)),
                     GUEST_ISOLATION_IN_PLACE);
    assert_int_equal(guest_isolation_check(&remote, &bridged, NULL, why, sizeof(why)),
                     GUEST_ISOLATION_IN_PLACE);
    /* Which guests take the filter: a VM on a libvirt network where isolation is required. */
    assert_true(guest_isolation_filtered(&local, &bridged));
    assert_true(guest_isolation_filtered(&remote, &bridged));
    assert_false(guest_isolation_filtered(&local, &user));
    assert_false(guest_isolation_filtered(&local, &none));
    assert_false(guest_isolation_filtered(&testdrv, &bridged));
    /* The operator says guests are isolated some other way. */
    remote.guest_isolation = ISOLATION_UNCHECKED;
    assert_int_equal(guest_isolation_check(&remote, &user, NULL, why, sizeof(why)),
                     GUEST_ISOLATION_UNCHECKED);
    assert_int_equal(guest_isolation_check(&remote, &bridged, no_filter, why, sizeof(why)),
                     GUEST_ISOLATION_UNCHECKED);
    assert_false(guest_isolation_filtered(&remote, &bridged));
    /* Here, the answer is the record's. */
    char record_why[512];
    bool in_place =
        guest_firewall_record_check(GUEST_FIREWALL_RECORD, record_why, sizeof(record_why)) == 0;
    assert_int_equal(guest_isolation_check(&local, &user, NULL, why, sizeof(why)),
                     in_place ? GUEST_ISOLATION_IN_PLACE : GUEST_ISOLATION_MISSING);

    /* A host's state is its worst pool's, among the pools that may use it. */
    char *only_remote[] = {"p10-b"};
    struct config_pool pools[2] = {none, bridged};
    pools[1].hosts = only_remote;
    pools[1].n_hosts = 1;
    struct config c = {.pools = pools, .n_pools = 2};
    assert_int_equal(guest_isolation_host(&c, &local, no_filter, why, sizeof(why)),
                     GUEST_ISOLATION_NOT_NEEDED);
    remote.guest_isolation = ISOLATION_REQUIRED;
    assert_int_equal(guest_isolation_host(&c, &remote, NULL, why, sizeof(why)),
                     GUEST_ISOLATION_IN_PLACE);
    assert_int_equal(guest_isolation_host(&c, &remote, no_filter, why, sizeof(why)),
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
