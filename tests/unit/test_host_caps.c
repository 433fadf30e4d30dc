/* host_caps_parse: KVM per guest arch and QEMU's uid from a host's libvirt capabilities.
 * libvirt's own document from its test driver, and a Power host's and an x86 host's as
 * libvirt's "Driver capabilities XML format" describes them: guests listed one per arch in
 * libvirt's order, kvm offered only for the arches /dev/kvm runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <libvirt/libvirt.h>
#include <stdlib.h>

#include "libvirt/host_caps.h"

/* A guest element for `arch`, offering kvm or not. */
#define GUEST(arch, kvm)                                                                           \
    "  <guest>\n    <os_type>hvm</os_type>\n    <arch name='" arch "'>\n"                          \
    "      <wordsize>64</wordsize>\n      <emulator>/usr/bin/qemu-system-ppc64</emulator>\n"       \
    "      <domain type='qemu'/>\n" kvm "    </arch>\n  </guest>\n"
#define KVM "      <domain type='kvm'/>\n"

/* A POWER9 host under Debian's libvirt: QEMU as libvirt-qemu; ppc (32-bit) first, with no
 * kvm, as libvirt lists arches in its own order. */
static const char power_host[] =
    "<capabilities>\n  <host>\n    <cpu>\n      <arch>ppc64le</arch>\n"
    "      <model>POWER9</model>\n    </cpu>\n"
    "    <secmodel>\n      <model>none</model>\n      <doi>0</doi>\n    </secmodel>\n"
    "    <secmodel>\n      <model>dac</model>\n      <doi>0</doi>\n"
    "      <baselabel type='kvm'>+64055:+64055</baselabel>\n"
    "      <baselabel type='qemu'>+64055:+64055</baselabel>\n    </secmodel>\n  </host>\n" GUEST(
        "ppc", "") GUEST("ppc64", KVM) GUEST("ppc64le", KVM) GUEST("s390x", "") "</capabilities>\n";

/* An x86 host: kvm for its own arches, none for the emulated ones; QEMU as root. */
static const char x86_host[] =
    "<capabilities>\n  <host>\n    <cpu>\n      <arch>x86_64</arch>\n    </cpu>\n"
    "    <secmodel>\n      <model>dac</model>\n      <doi>0</doi>\n"
    "      <baselabel type='qemu'>+0:+0</baselabel>\n    </secmodel>\n  </host>\n" GUEST("i686",
                                                                                         KVM)
        GUEST("ppc64le", "") GUEST("s390x", "") GUEST("x86_64", KVM) "</capabilities>\n";

static void a_power_host_offers_kvm_for_ppc64le(void **state)
{
    (void)state;
    struct host_caps c;
    assert_int_equal(host_caps_parse(power_host, &c), 0);
    assert_true(c.kvm[ARCH_PPC64LE]);
    assert_false(c.kvm[ARCH_S390X]);
    assert_false(c.kvm[ARCH_X86_64]);
    assert_int_equal(c.qemu_uid, 64055);
    assert_int_equal(c.qemu_gid, 64055);
}

static void an_x86_host_emulates_power_and_z(void **state)
{
    (void)state;
    struct host_caps c;
    assert_int_equal(host_caps_parse(x86_host, &c), 0);
    assert_false(c.kvm[ARCH_PPC64LE]);
    assert_false(c.kvm[ARCH_S390X]);
    assert_true(c.kvm[ARCH_X86_64]);
    assert_int_equal(c.qemu_uid, 0);
    assert_int_equal(c.qemu_gid, 0);
}

/* QEMU as root in a group of its own (the tests' libvirtd: qemu.conf user root, group
 * hatchery-qemu): the guest firewall must match that group, not root's. */
static void qemu_as_root_in_a_group_of_its_own(void **state)
{
    (void)state;
    struct host_caps c;
    assert_int_equal(host_caps_parse("<capabilities><host><secmodel><model>dac</model>"
                                     "<baselabel type='qemu'>+0:+64057</baselabel></secmodel>"
                                     "</host></capabilities>",
                                     &c),
                     0);
    assert_int_equal(c.qemu_uid, 0);
    assert_int_equal(c.qemu_gid, 64057);
}

/* libvirt's own document, from its test driver: no kvm, no DAC label. */
static void the_test_drivers_capabilities(void **state)
{
    (void)state;
    virConnectPtr conn = virConnectOpen("test:///default");
    assert_non_null(conn);
    char *xml = virConnectGetCapabilities(conn);
    assert_non_null(xml);
    struct host_caps c;
    assert_int_equal(host_caps_parse(xml, &c), 0);
    for (int a = 0; a < ARCH_MAX; a++)
        assert_false(c.kvm[a]);
    assert_int_equal(c.qemu_uid, -1);
    assert_int_equal(c.qemu_gid, -1);
    free(xml);
    virConnectClose(conn);
}

static void what_is_not_capabilities_offers_nothing(void **state)
{
    (void)state;
#define LABEL(l)                                                                                   \
    "<capabilities><host><secmodel><model>dac</model><baselabel type='qemu'>" l                    \
    "</baselabel></secmodel></host></capabilities>"
    const char *bad[] = {
        NULL,           "",          "not xml",          "<domain type='kvm'/>", LABEL("+x:+0"),
        LABEL("+0:+x"), LABEL("+0"), LABEL("+0:+5junk"), LABEL("+0:-5"),         LABEL("0:0")};
#undef LABEL
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        struct host_caps c = {.qemu_uid = 7, .qemu_gid = 7, .kvm = {true, true, true}};
        int r = host_caps_parse(bad[i], &c);
        assert_int_equal(r, i < 4 ? -EINVAL : 0);
        for (int a = 0; a < ARCH_MAX; a++)
            assert_false(c.kvm[a]);
        assert_int_equal(c.qemu_uid, -1);
        assert_int_equal(c.qemu_gid, -1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_power_host_offers_kvm_for_ppc64le),
        cmocka_unit_test(an_x86_host_emulates_power_and_z),
        cmocka_unit_test(qemu_as_root_in_a_group_of_its_own),
        cmocka_unit_test(the_test_drivers_capabilities),
        cmocka_unit_test(what_is_not_capabilities_offers_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
