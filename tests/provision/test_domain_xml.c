/* Golden domain XML for each variant (ppc64le, s390x, x86_64, LXC), each also checked by
 * libvirt's own schema (virt-xml-validate). Hostile names and paths come out escaped.
 * Set UPDATE_GOLDEN=1 to rewrite the golden files after an intended change. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libvirt/domain_xml.h"

static const char *golden_dir;

static struct domain_spec vm(enum pool_arch arch)
{
    return (struct domain_spec){
        .name = "hatchery-p10-ci-42",
        .controller_id = "p10-ci",
        .runner_id = 42,
        .pool = "linux.ppc64le",
        .arch = arch,
        .backend = BACKEND_VM,
        .kvm = false,
        .vcpus = 4,
        .memory_mib = 8192,
        .storage_pool = "hatchery",
        .volume = "hatchery-p10-ci-42.qcow2",
        .network = "user",
        .channel_path = "/var/lib/hatchery/channels/hatchery-p10-ci-42.sock",
        .console_log = "/var/lib/hatchery/logs/hatchery-p10-ci-42.console.log",
    };
}

/* `xml` (freed here) against its golden file, and against libvirt's `schema`. */
static void check_xml(const char *name, char *xml, const char *schema)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s.xml", golden_dir, name);
    if (getenv("UPDATE_GOLDEN")) {
        FILE *f = fopen(path, "w");
        fputs(xml, f);
        fclose(f);
    }
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char golden[16384];
    size_t n = fread(golden, 1, sizeof(golden) - 1, f);
    golden[n] = 0;
    fclose(f);
    if (strcmp(golden, xml) != 0)
        fail_msg("%s differs from %s:\n%s", name, path, xml);
    /* libvirt's schema must accept it. */
    char tmp[] = "/tmp/hatchery-xml-XXXXXX";
    int fd = mkstemp(tmp);
    assert_int_equal(write(fd, xml, strlen(xml)), (ssize_t)strlen(xml));
    close(fd);
    char cmd[640];
    snprintf(cmd, sizeof(cmd), "virt-xml-validate %s %s >/dev/null 2>&1", tmp, schema);
    int rc = system(cmd);
    unlink(tmp);
    if (rc != 0)
        fail_msg("%s: virt-xml-validate refused:\n%s", name, xml);
    free(xml);
}

static void quiet(void *data, virErrorPtr error)
{
    (void)data;
    (void)error;
}

/* libvirt's own domain parser must take it too (the test driver's, which parses what
 * qemu:///system would), and keep what makes a KVM guest one: the schema alone does not
 * check an attribute's values against each other. */
static void check_defined(const char *name, const char *xml, bool kvm)
{
    virSetErrorFunc(NULL, quiet);
    virConnectPtr c = virConnectOpen("test:///default");
    assert_non_null(c);
    virDomainPtr d = virDomainDefineXML(c, xml);
    if (!d) {
        const virError *e = virGetLastError();
        fail_msg("%s: libvirt refused it: %s", name, e && e->message ? e->message : "?");
    }
    char *back = virDomainGetXMLDesc(d, VIR_DOMAIN_XML_INACTIVE);
    assert_non_null(back);
    if (kvm && (!strstr(back, "<domain type='kvm'") || !strstr(back, "mode='host-passthrough'")))
        fail_msg("%s: libvirt kept it as\n%s", name, back);
    free(back);
    assert_int_equal(virDomainUndefine(d), 0);
    virDomainFree(d);
    virConnectClose(c);
}

static void check(const char *name, const struct domain_spec *spec)
{
    char err[256];
    char *xml = domain_xml_build(spec, err, sizeof(err));
    if (!xml)
        fail_msg("%s: %s", name, err);
    check_defined(name, xml, spec->kvm);
    check_xml(name, xml, "domain");
}

/* What hatcheryd reads back from libvirt: the metadata of a domain it wrote, whole or as
 * virDomainGetMetadata gives it, and a template's saved domain restored for a runner. */
static void test_metadata_and_restore(void **state)
{
    (void)state;
    struct domain_spec s = vm(ARCH_S390X);
    s.name = "hatchery-tpl-p10-ci-linux.s390x-0";
    s.template_key = "5f2a";
    char err[256];
    char *saved = domain_xml_build(&s, err, sizeof(err));
    assert_non_null(saved);
    struct domain_metadata m;
    domain_xml_metadata(saved, &m);
    assert_true(m.found);
    assert_string_equal(m.controller, "p10-ci");
    assert_int_equal(m.runner_id, 42);
    assert_int_equal(m.epoch, 0); /* no lease: none written */
    assert_null(strstr(saved, ":epoch>"));
    /* A leader's domain records its epoch. */
    s.epoch = 7;
    char *led = domain_xml_build(&s, err, sizeof(err));
    assert_non_null(led);
    domain_xml_metadata(led, &m);
    assert_int_equal(m.epoch, 7);
    free(led);
    s.epoch = 0;
    domain_xml_metadata(saved, &m);
    assert_string_equal(m.template_key, "5f2a");
    assert_string_equal(m.runner_name, "");
    /* The element alone, as libvirt 9.0 answers virDomainGetMetadata for our namespace:
     * without it. */
    domain_xml_metadata("<runner>\n  <controller>p10-ci</controller>\n"
                        "  <runner-id>7</runner-id>\n"
                        "  <runner-name>hatchery-p10-ci-7</runner-name>\n</runner>",
                        &m);
    assert_true(m.found);
    assert_int_equal(m.runner_id, 7);
    assert_string_equal(m.runner_name, "hatchery-p10-ci-7");
    assert_string_equal(m.template_key, "");

    /* Restored for runner 43: its volume, paths and name; the template's key gone. A
     * hostile name comes back as it was, escaped on the way. */
    const struct domain_restore r = {.volume = "hatchery-p10-ci-43.qcow2",
                                     .channel_path = "/run/c/43.sock",
                                     .console_log = "/var/log/43.log",
                                     .runner_id = 43,
                                     .runner_name = "a</hatchery:runner-name><x>&"};
    char *restored = domain_xml_restore(saved, &r, err, sizeof(err));
    if (!restored)
        fail_msg("%s", err);
    domain_xml_metadata(restored, &m);
    assert_int_equal(m.runner_id, 43);
    assert_string_equal(m.runner_name, r.runner_name);
    assert_string_equal(m.template_key, "");
    assert_string_equal(m.controller, "p10-ci");
    assert_non_null(strstr(restored, "volume=\"hatchery-p10-ci-43.qcow2\""));
    assert_non_null(strstr(restored, "path=\"/run/c/43.sock\""));
    assert_null(strstr(restored, "hatchery-p10-ci-42.qcow2"));
    assert_non_null(strstr(restored, "<name>hatchery-tpl-p10-ci-linux.s390x-0</name>"));
    /* On a host reached through streams the saved paths stay. */
    const struct domain_restore remote = {.volume = "v.qcow2", .runner_id = 44, .runner_name = "r"};
    char *kept = domain_xml_restore(saved, &remote, err, sizeof(err));
    assert_non_null(kept);
    assert_non_null(strstr(kept, s.channel_path));
    free(kept);
    free(restored);
    free(saved);

    /* Bad input: nothing read, a clear error. */
    domain_xml_metadata(NULL, &m);
    assert_false(m.found);
    domain_xml_metadata("<hatchery:runner><unclosed>", &m);
    assert_false(m.found);
    domain_xml_metadata("<runner-name>not a runner</runner-name>", &m);
    assert_false(m.found);
    /* Another namespace's <runner> inside a domain's metadata is not ours. */
    domain_xml_metadata("<domain><metadata><x:runner xmlns:x=\"urn:other\"><x:controller>p10-ci"
                        "</x:controller></x:runner></metadata></domain>",
                        &m);
    assert_false(m.found);
    assert_null(domain_xml_restore("not xml <<<", &r, err, sizeof(err)));
    assert_string_equal(err, "the saved domain XML does not parse");
    assert_null(domain_xml_restore("<domain><devices/></domain>", &r, err, sizeof(err)));
    assert_string_equal(err, "the saved domain has not one overlay volume");
}

static void test_ppc64le(void **state)
{
    (void)state;
    struct domain_spec s = vm(ARCH_PPC64LE);
    check("ppc64le-tcg", &s);
    /* KVM on POWER9 and POWER10 alike: host-passthrough gives the guest the host's own
     * processor, so one domain serves both (docs/POWER-HOST.md: "KVM"). */
    s.kvm = true;
    check("ppc64le-kvm", &s);
    s.kvm = false;
    s.kernel = "/var/lib/hatchery/images/test/vmlinux";
    s.initrd = "/var/lib/hatchery/images/test/initrd";
    s.cmdline = "console=hvc0 quiet";
    s.vof = true;
    s.network = "none";
    check("ppc64le-direct-vof", &s);
}

static void test_s390x(void **state)
{
    (void)state;
    struct domain_spec s = vm(ARCH_S390X);
    s.pool = "linux.s390x";
    s.network = "ci-net";
    s.network_filter = "hatchery-guest-isolation";
    const char *host_ips[] = {"192.0.2.2", "203.0.113.7"};
    s.filter_host_ips = host_ips;
    s.n_filter_host_ips = 2;
    check("s390x", &s);
    /* On z15 (or any Z with SIE in its LPAR), the same guest under KVM. */
    s.kvm = true;
    check("s390x-kvm", &s);
}

/* The guest filter a libvirt network's guests take (guest_filter.h): libvirt's nwfilter
 * schema accepts it, and its order is the one that isolates. */
static void test_guest_filter(void **state)
{
    (void)state;
    char *xml = domain_xml_guest_filter("hatchery-guest-isolation", NULL);
    assert_non_null(xml);
    /* DHCP and DNS first, then the drops, all before clean-traffic's accept at -650. */
    const char *dhcp = strstr(xml, "dstportstart=\"67\"");
    const char *lan = strstr(xml, "dstipaddr=\"192.168.0.0\" dstipmask=\"16\"");
    assert_non_null(strstr(xml, "<filterref filter=\"clean-traffic\"/>"));
    assert_non_null(dhcp);
    assert_non_null(lan);
    assert_true(dhcp < lan);
    int rules = 0;
    for (const char *p = strstr(xml, "priority=\""); p; p = strstr(p + 1, "priority=\"")) {
        assert_true(strtol(p + strlen("priority=\""), NULL, 10) < -650);
        rules++;
    }
    assert_int_equal(rules, 14);
    /* The host's own addresses, whatever their range, are dropped too. */
    assert_non_null(strstr(xml, "<ip dstipaddr=\"$HOST_IP\"/>"));
    check_xml("guest-filter", xml, "nwfilter");
    /* Replacing a defined filter keeps its UUID (libvirt refuses the name under another). */
    xml =
        domain_xml_guest_filter("hatchery-guest-isolation", "27e3167b-18e2-4d06-a02e-adf7843c7828");
    assert_non_null(xml);
    assert_non_null(strstr(xml, "<filter name=\"hatchery-guest-isolation\" chain=\"root\">"
                                "<uuid>27e3167b-18e2-4d06-a02e-adf7843c7828</uuid>"));
    check_xml("guest-filter-replacing", xml, "nwfilter");
}

/* A remote host: the channel's path is libvirt's to choose, the console a pty, and no
 * path of this machine appears. */
static void test_remote_streams(void **state)
{
    (void)state;
    struct domain_spec s = vm(ARCH_PPC64LE);
    s.streams = true;
    s.channel_path = NULL;
    s.console_log = NULL;
    check("ppc64le-remote-streams", &s);
    char err[256];
    char *xml = domain_xml_build(&s, err, sizeof(err));
    assert_non_null(xml);
    assert_null(strstr(xml, "/var/lib/hatchery"));
    assert_non_null(strstr(xml, "<console type=\"pty\">"));
    free(xml);
}

static void test_x86_64(void **state)
{
    (void)state;
    struct domain_spec s = vm(ARCH_X86_64);
    s.pool = "dev";
    check("x86_64", &s);
}

static void test_lxc(void **state)
{
    (void)state;
    struct domain_spec s = {
        .name = "hatchery-p10-ci-43",
        .controller_id = "p10-ci",
        .runner_id = 43,
        .pool = "linux.ppc64le.small",
        .arch = ARCH_PPC64LE,
        .backend = BACKEND_CONTAINER,
        .vcpus = 2,
        .memory_mib = 4096,
        .root_dir = "/var/lib/hatchery/images/rootfs-ppc64le",
        .channel_dir = "/var/lib/hatchery/containers/hatchery-p10-ci-43",
        .init = "/usr/bin/hatchery-agent",
        .runner_user = "runner",
        .network = "none",
        .container_id_base = INT64_C(0x70000000) + 43 * 65536,
    };
    check("lxc", &s);
    /* Its own users: runner 43's slot of the id ranges, and none other's. */
    char *xml = domain_xml_build(&s, (char[256]){0}, 256);
    assert_non_null(xml);
    assert_non_null(strstr(xml, "<uid start=\"0\" target=\"1881866240\" count=\"65536\"/>"));
    assert_int_equal(domain_container_id_base(43), INT64_C(0x70000000) + 43 * 65536);
    assert_int_equal(domain_container_id_base(1024 + 43), domain_container_id_base(43));
    assert_true(domain_container_id_base(44) - domain_container_id_base(43) >= 65536);
    /* Runner 1067's slot is 43's: while 43's container lives on the host, 1067 takes the
     * next free range, not 43's users; the last slot wraps to the first; all held, none. */
    int64_t held[] = {domain_container_id_base(43), domain_container_id_base(44)};
    assert_int_equal(domain_container_id_base_free(1024 + 43, held, 1),
                     domain_container_id_base(44));
    assert_int_equal(domain_container_id_base_free(1024 + 43, held, 2),
                     domain_container_id_base(45));
    assert_int_equal(domain_container_id_base_free(1024 + 43, NULL, 0),
                     domain_container_id_base(43));
    int64_t last[] = {domain_container_id_base(1023)};
    assert_int_equal(domain_container_id_base_free(1023, last, 1), domain_container_id_base(0));
    static int64_t every[1024];
    for (int i = 0; i < 1024; i++)
        every[i] = domain_container_id_base(i);
    assert_int_equal(domain_container_id_base_free(7, every, 1024), -1);
    /* Its own network, no mounts (CAP_SYS_ADMIN), no interface with `network: none`. */
    assert_non_null(strstr(xml, "<privnet/>"));
    assert_non_null(strstr(xml, "<capabilities policy=\"deny\">"));
    assert_null(strstr(xml, "sys_admin"));
    assert_null(strstr(xml, "<interface"));
    assert_non_null(strstr(xml, "<initarg>--user</initarg>\n    <initarg>runner</initarg>"));
    free(xml);
    /* On a libvirt network: a veth there, with the guest filter, as a VM's. */
    static const char *const host_ips[] = {"192.0.2.7"};
    s.network = "default";
    s.network_filter = "hatchery-guest-isolation";
    s.filter_host_ips = host_ips;
    s.n_filter_host_ips = 1;
    check("lxc-network", &s);
    /* No account to run the runner as: incomplete. */
    s.runner_user = NULL;
    assert_null(domain_xml_build(&s, (char[256]){0}, 256));
}

static void test_hostile_strings_are_escaped(void **state)
{
    (void)state;
    struct domain_spec s = vm(ARCH_S390X);
    s.name = "x</name><devices><hostdev/></devices><name>y";
    s.pool = "p&<'\"";
    char err[256];
    char *xml = domain_xml_build(&s, err, sizeof(err));
    assert_non_null(xml);
    if (strstr(xml, "<hostdev") || !strstr(xml, "p&amp;&lt;"))
        fail_msg("not escaped:\n%s", xml);
    assert_null(strstr(xml, "<hostdev"));
    assert_non_null(strstr(xml, "x&lt;/name&gt;&lt;devices&gt;"));
    assert_non_null(strstr(xml, "p&amp;&lt;"));
    free(xml);
    /* An incomplete spec is an error, not a half-written domain. */
    s.channel_path = NULL;
    assert_null(domain_xml_build(&s, err, sizeof(err)));
}

int main(void)
{
    golden_dir = getenv("GOLDEN_DIR");
    if (!golden_dir) {
        fprintf(stderr, "GOLDEN_DIR must be set (ctest does)\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metadata_and_restore),
        cmocka_unit_test(test_ppc64le),
        cmocka_unit_test(test_s390x),
        cmocka_unit_test(test_guest_filter),
        cmocka_unit_test(test_remote_streams),
        cmocka_unit_test(test_x86_64),
        cmocka_unit_test(test_lxc),
        cmocka_unit_test(test_hostile_strings_are_escaped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
