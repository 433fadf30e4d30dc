/* Domain XML through libxml2's xmlTextWriter; see domain_xml.h. */
#include "domain_xml.h"

#include <libxml/parser.h>
#include <libxml/xmlwriter.h>
#include <libxml/xpath.h>
#include <libxml/xpathInternals.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hatchery/agent_protocol.h"

#define W(call)                                                                                    \
    do {                                                                                           \
        if ((call) < 0)                                                                            \
            goto fail;                                                                             \
    } while (0)

static int element(xmlTextWriterPtr w, const char *name, const char *text)
{
    return xmlTextWriterWriteElement(w, BAD_CAST name, BAD_CAST text);
}

static int attr(xmlTextWriterPtr w, const char *name, const char *value)
{
    return xmlTextWriterWriteAttribute(w, BAD_CAST name, BAD_CAST value);
}

static int start(xmlTextWriterPtr w, const char *name)
{
    return xmlTextWriterStartElement(w, BAD_CAST name);
}

static int end(xmlTextWriterPtr w)
{
    return xmlTextWriterEndElement(w);
}

static const char *machine_of(enum pool_arch arch)
{
    switch (arch) {
    case ARCH_PPC64LE:
        return "pseries";
    case ARCH_S390X:
        return "s390-ccw-virtio";
    case ARCH_X86_64:
    case ARCH_MAX:
        break;
    }
    return "q35";
}

/* The guest's network interface: QEMU's user-mode networking, or a libvirt network with
 * hatcheryd's guest filter. None with `network: none` (a container then has loopback only). */
static int write_interface(xmlTextWriterPtr w, const struct domain_spec *s)
{
    bool lxc = s->backend == BACKEND_CONTAINER;
    if (!s->network || strcmp(s->network, "none") == 0)
        return 0;
    W(start(w, "interface"));
    bool user = strcmp(s->network, "user") == 0;
    W(attr(w, "type", user ? "user" : "network"));
    if (!user) {
        W(start(w, "source"));
        W(attr(w, "network", s->network));
        W(end(w));
    }
    if (!lxc) {
        W(start(w, "model"));
        W(attr(w, "type", "virtio"));
        W(end(w));
    }
    /* The guest's address is learnt from its DHCP lease, and until then libvirt lets
     * nothing but DHCP through: with the default (any first packet) it would let all
     * of IPv4 through meanwhile. */
    if (!user && s->network_filter) {
        W(start(w, "filterref"));
        W(attr(w, "filter", s->network_filter));
        W(start(w, "parameter"));
        W(attr(w, "name", "CTRL_IP_LEARNING"));
        W(attr(w, "value", "dhcp"));
        W(end(w));
        for (size_t i = 0; i < s->n_filter_host_ips; i++) {
            W(start(w, "parameter"));
            W(attr(w, "name", "HOST_IP"));
            W(attr(w, "value", s->filter_host_ips[i]));
            W(end(w));
        }
        W(end(w));
    }
    /* Without ipxe-qemu there is no option ROM to load. s390x's devices are CCW, not PCI:
     * they have no ROM, and libvirt refuses the element there. */
    if (!lxc && s->arch != ARCH_S390X) {
        W(start(w, "rom"));
        W(attr(w, "enabled", "no"));
        W(end(w));
    }
    W(end(w));
    return 0;
fail:
    return -1;
}

static int write_vm_devices(xmlTextWriterPtr w, const struct domain_spec *s)
{
    W(start(w, "disk"));
    W(attr(w, "type", "volume"));
    W(attr(w, "device", "disk"));
    W(start(w, "driver"));
    W(attr(w, "name", "qemu"));
    W(attr(w, "type", "qcow2"));
    W(attr(w, "discard", "unmap"));
    W(end(w));
    W(start(w, "source"));
    W(attr(w, "pool", s->storage_pool));
    W(attr(w, "volume", s->volume));
    W(end(w));
    W(start(w, "target"));
    W(attr(w, "dev", "vda"));
    W(attr(w, "bus", "virtio"));
    W(end(w));
    W(end(w)); /* disk */

    W(write_interface(w, s));

    /* The console goes to a per-runner log file, kept after teardown; on a remote host
     * to a pty that hatcheryd reads through a stream into that file. */
    W(start(w, s->arch == ARCH_X86_64 ? "serial" : "console"));
    W(attr(w, "type", s->streams ? "pty" : "file"));
    if (!s->streams) {
        W(start(w, "source"));
        W(attr(w, "path", s->console_log));
        W(end(w));
    }
    W(start(w, "target"));
    W(attr(w, "type",
           s->arch == ARCH_S390X     ? "sclp"
           : s->arch == ARCH_PPC64LE ? "serial"
                                     : "isa-serial"));
    W(end(w));
    W(end(w));

    W(start(w, "channel"));
    W(attr(w, "type", "unix"));
    W(start(w, "source"));
    W(attr(w, "mode", "bind"));
    if (!s->streams)
        W(attr(w, "path", s->channel_path));
    W(end(w));
    W(start(w, "target"));
    W(attr(w, "type", "virtio"));
    W(attr(w, "name", AGENT_CHANNEL_NAME));
    W(end(w));
    W(end(w));

    /* The guest's kernel seeds its CRNG from the host at boot, so that clones of one image
     * never start from the same randomness (the agent waits for the CRNG before hello). */
    W(start(w, "rng"));
    W(attr(w, "model", "virtio"));
    W(start(w, "backend"));
    W(attr(w, "model", "random"));
    W(xmlTextWriterWriteString(w, BAD_CAST "/dev/urandom"));
    W(end(w));
    W(end(w));

    W(start(w, "memballoon"));
    W(attr(w, "model", "none"));
    W(end(w));
    return 0;
fail:
    return -1;
}

static int write_lxc_devices(xmlTextWriterPtr w, const struct domain_spec *s)
{
    W(start(w, "filesystem"));
    W(attr(w, "type", "mount"));
    W(start(w, "source"));
    W(attr(w, "dir", s->root_dir));
    W(end(w));
    W(start(w, "target"));
    W(attr(w, "dir", "/"));
    W(end(w));
    W(start(w, "readonly"));
    W(end(w));
    W(end(w));
    /* Single use: everything the job writes goes to RAM and dies with the container. */
    static const char *const scratch[] = {"/tmp", "/home", "/var/tmp", "/work"};
    for (size_t i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++) {
        W(start(w, "filesystem"));
        W(attr(w, "type", "ram"));
        W(start(w, "source"));
        W(attr(w, "usage", "1024"));
        W(attr(w, "units", "MiB"));
        W(end(w));
        W(start(w, "target"));
        W(attr(w, "dir", scratch[i]));
        W(end(w));
        W(end(w));
    }
    W(start(w, "filesystem"));
    W(attr(w, "type", "mount"));
    W(start(w, "source"));
    W(attr(w, "dir", s->channel_dir));
    W(end(w));
    W(start(w, "target"));
    W(attr(w, "dir", "/run/hatchery"));
    W(end(w));
    W(end(w));
    W(write_interface(w, s));
    W(start(w, "console"));
    W(attr(w, "type", "pty"));
    W(end(w));
    return 0;
fail:
    return -1;
}

int64_t domain_container_id_base(int64_t runner_id)
{
    int64_t slot = runner_id % CONTAINER_ID_SLOTS;
    return CONTAINER_ID_FIRST + (slot < 0 ? slot + CONTAINER_ID_SLOTS : slot) * CONTAINER_ID_COUNT;
}

int64_t domain_container_id_base_free(int64_t runner_id, const int64_t *used, size_t n)
{
    int64_t base = domain_container_id_base(runner_id);
    for (int64_t tried = 0; tried < CONTAINER_ID_SLOTS; tried++) {
        size_t i = 0;
        while (i < n && used[i] != base)
            i++;
        if (i == n)
            return base;
        base += CONTAINER_ID_COUNT;
        if (base >= CONTAINER_ID_FIRST + CONTAINER_ID_SLOTS * CONTAINER_ID_COUNT)
            base = CONTAINER_ID_FIRST;
    }
    return -1;
}

/* What the agent (the container's PID 1, its root) needs: to make the runner's home and
 * report directory its user's, to read the job's report from that directory (private to
 * the runner), to become that user, and to signal the runner. Nothing else: no CAP_SYS_ADMIN
 * (mounts), no CAP_NET_ADMIN or CAP_NET_RAW, no CAP_SYS_PTRACE, and none of them regained through a
 * setuid program of the root directory (the bounding set). */
static const char *const container_capabilities[] = {"chown", "dac_read_search", "setuid", "setgid",
                                                     "kill"};

/* A user namespace of its own (idmap), a network namespace of its own (privnet: loopback,
 * and the interface of its libvirt network if it has one), and only the capabilities
 * above. */
static int write_lxc_confinement(xmlTextWriterPtr w, const struct domain_spec *s)
{
    char base[32], count[32];
    snprintf(base, sizeof(base), "%lld", (long long)s->container_id_base);
    snprintf(count, sizeof(count), "%lld", (long long)CONTAINER_ID_COUNT);
    W(start(w, "idmap"));
    static const char *const ids[] = {"uid", "gid"};
    for (size_t i = 0; i < 2; i++) {
        W(start(w, ids[i]));
        W(attr(w, "start", "0"));
        W(attr(w, "target", base));
        W(attr(w, "count", count));
        W(end(w));
    }
    W(end(w));
    W(start(w, "features"));
    W(start(w, "privnet"));
    W(end(w));
    W(start(w, "capabilities"));
    W(attr(w, "policy", "deny"));
    for (size_t i = 0; i < sizeof(container_capabilities) / sizeof(container_capabilities[0]);
         i++) {
        W(start(w, container_capabilities[i]));
        W(attr(w, "state", "on"));
        W(end(w));
    }
    W(end(w));
    W(end(w));
    return 0;
fail:
    return -1;
}

char *domain_xml_build(const struct domain_spec *s, char *err, size_t err_size)
{
    bool lxc = s->backend == BACKEND_CONTAINER;
    if (!s->name || !s->controller_id ||
        (lxc ? !s->root_dir || !s->channel_dir || !s->init || !s->runner_user
             : !s->storage_pool || !s->volume ||
                   (!s->streams && (!s->channel_path || !s->console_log)))) {
        snprintf(err, err_size, "domain spec is incomplete");
        return NULL;
    }
    xmlBufferPtr buf = xmlBufferCreate();
    xmlTextWriterPtr w = buf ? xmlNewTextWriterMemory(buf, 0) : NULL;
    char *out = NULL;
    char num[32];
    if (!w)
        goto fail;
    xmlTextWriterSetIndent(w, 1);
    xmlTextWriterSetIndentString(w, BAD_CAST "  ");
    W(start(w, "domain"));
    W(attr(w, "type", lxc ? "lxc" : s->kvm ? "kvm" : "qemu"));
    if (!lxc && s->vof && s->arch == ARCH_PPC64LE)
        W(attr(w, "xmlns:qemu", "http://libvirt.org/schemas/domain/qemu/1.0"));
    W(element(w, "name", s->name));

    W(start(w, "metadata"));
    W(xmlTextWriterStartElementNS(w, BAD_CAST DOMAIN_METADATA_KEY, BAD_CAST "runner",
                                  BAD_CAST DOMAIN_METADATA_NS));
    W(element(w, DOMAIN_METADATA_KEY ":controller", s->controller_id));
    snprintf(num, sizeof(num), "%lld", (long long)s->runner_id);
    W(element(w, DOMAIN_METADATA_KEY ":runner-id", num));
    if (s->epoch > 0) {
        snprintf(num, sizeof(num), "%lld", (long long)s->epoch);
        W(element(w, DOMAIN_METADATA_KEY ":epoch", num));
    }
    if (s->pool)
        W(element(w, DOMAIN_METADATA_KEY ":pool", s->pool));
    if (s->template_key)
        W(element(w, DOMAIN_METADATA_KEY ":template-key", s->template_key));
    W(end(w));
    W(end(w)); /* metadata */

    W(start(w, "memory"));
    W(attr(w, "unit", "MiB"));
    snprintf(num, sizeof(num), "%lld", (long long)s->memory_mib);
    W(xmlTextWriterWriteString(w, BAD_CAST num));
    W(end(w));
    snprintf(num, sizeof(num), "%lld", (long long)s->vcpus);
    W(element(w, "vcpu", num));

    W(start(w, "os"));
    if (lxc) {
        W(element(w, "type", "exe"));
        W(element(w, "init", s->init));
        W(element(w, "initarg", "--socket"));
        W(element(w, "initarg", AGENT_CONTAINER_SOCKET));
        W(element(w, "initarg", "--user"));
        W(element(w, "initarg", s->runner_user));
    } else {
        W(start(w, "type"));
        W(attr(w, "arch", pool_arch_names[s->arch]));
        W(attr(w, "machine", machine_of(s->arch)));
        W(xmlTextWriterWriteString(w, BAD_CAST "hvm"));
        W(end(w));
        if (s->kernel) {
            W(element(w, "kernel", s->kernel));
            if (s->initrd)
                W(element(w, "initrd", s->initrd));
            if (s->cmdline)
                W(element(w, "cmdline", s->cmdline));
        } else {
            W(start(w, "boot"));
            W(attr(w, "dev", "hd"));
            W(end(w));
        }
    }
    W(end(w)); /* os */
    if (!lxc && s->kvm) {
        W(start(w, "cpu"));
        W(attr(w, "mode", "host-passthrough"));
        W(end(w));
    }
    if (lxc)
        W(write_lxc_confinement(w, s));
    /* A guest that powers off or crashes is gone: hatcheryd sees the event and cleans up. */
    W(element(w, "on_poweroff", "destroy"));
    W(element(w, "on_reboot", "destroy"));
    W(element(w, "on_crash", "destroy"));

    W(start(w, "devices"));
    W(lxc ? write_lxc_devices(w, s) : write_vm_devices(w, s));
    W(end(w)); /* devices */

    if (!lxc && s->vof && s->arch == ARCH_PPC64LE) {
        W(start(w, "qemu:commandline"));
        W(start(w, "qemu:arg"));
        W(attr(w, "value", "-machine"));
        W(end(w));
        W(start(w, "qemu:arg"));
        W(attr(w, "value", "x-vof=on"));
        W(end(w));
        W(end(w));
    }
    W(end(w)); /* domain */
    W(xmlTextWriterEndDocument(w));
    xmlFreeTextWriter(w);
    w = NULL;
    out = strdup((const char *)xmlBufferContent(buf));
    xmlBufferFree(buf);
    if (!out)
        snprintf(err, err_size, "out of memory");
    return out;
fail:
    snprintf(err, err_size, "cannot write domain XML");
    if (w)
        xmlFreeTextWriter(w);
    if (buf)
        xmlBufferFree(buf);
    return NULL;
}

/* Starts a writer on a memory buffer; libvirt_xml_done() finishes it. */
static xmlTextWriterPtr xml_begin(xmlBufferPtr *ret_buf)
{
    *ret_buf = xmlBufferCreate();
    xmlTextWriterPtr w = *ret_buf ? xmlNewTextWriterMemory(*ret_buf, 0) : NULL;
    if (!w && *ret_buf) {
        xmlBufferFree(*ret_buf);
        *ret_buf = NULL;
    }
    return w;
}

/* The document, or NULL when any step of writing it failed (`ok` false). */
static char *xml_end(xmlTextWriterPtr w, xmlBufferPtr buf, bool ok)
{
    char *out = NULL;
    if (w && ok && xmlTextWriterEndDocument(w) >= 0) {
        xmlFreeTextWriter(w);
        w = NULL;
        out = strdup((const char *)xmlBufferContent(buf));
    }
    if (w)
        xmlFreeTextWriter(w);
    if (buf)
        xmlBufferFree(buf);
    return out;
}

char *domain_xml_dir_pool(const char *name, const char *path, const char *mode)
{
    xmlBufferPtr buf;
    xmlTextWriterPtr w = xml_begin(&buf);
    bool ok = w && start(w, "pool") >= 0 && attr(w, "type", "dir") >= 0 &&
              element(w, "name", name) >= 0 && start(w, "target") >= 0 &&
              element(w, "path", path) >= 0;
    if (ok && mode)
        ok = start(w, "permissions") >= 0 && element(w, "mode", mode) >= 0 && end(w) >= 0;
    ok = ok && end(w) >= 0 && end(w) >= 0;
    return xml_end(w, buf, ok);
}

char *domain_xml_overlay_volume(const char *name, const char *backing, int64_t capacity_mib)
{
    char num[32];
    snprintf(num, sizeof(num), "%lld", (long long)capacity_mib);
    xmlBufferPtr buf;
    xmlTextWriterPtr w = xml_begin(&buf);
    bool ok = w && start(w, "volume") >= 0 && element(w, "name", name) >= 0 &&
              start(w, "capacity") >= 0 && attr(w, "unit", "MiB") >= 0 &&
              xmlTextWriterWriteString(w, BAD_CAST num) >= 0 && end(w) >= 0 &&
              start(w, "target") >= 0 && start(w, "format") >= 0 && attr(w, "type", "qcow2") >= 0 &&
              end(w) >= 0 && end(w) >= 0 && start(w, "backingStore") >= 0 &&
              element(w, "path", backing) >= 0 && start(w, "format") >= 0 &&
              attr(w, "type", "qcow2") >= 0 && end(w) >= 0 && end(w) >= 0 && end(w) >= 0;
    return xml_end(w, buf, ok);
}

/* What a guest on a libvirt network may send, in the order libvirt's nwfilter evaluates it
 * (its root chain, by priority). clean-traffic comes first: no MAC, IP or ARP spoofing,
 * and nothing but IPv4 and ARP (no IPv6 at all); its last rule, at -650, accepts the IPv4
 * that gets that far. Before it, at -690 to -680, these: */
static const struct filter_rule {
    const char *action;   /* accept or drop */
    const char *priority; /* lower first */
    const char *protocol; /* udp, tcp, or NULL for any */
    const char *port;     /* destination port, or NULL */
    const char *net;      /* destination network and mask bits, or NULL */
    const char *mask;
} guest_filter_rules[] = {
    /* DHCP (to the broadcast address, before the drop of 240/4) and DNS, anywhere: the
     * guest needs them to come up, and the network's resolver is on its gateway, the host. */
    {"accept", "-690", "udp", "67", NULL, NULL},
    {"accept", "-690", "udp", "53", NULL, NULL},
    {"accept", "-690", "tcp", "53", NULL, NULL},
    /* The host's own addresses (HOST_IP, one rule per value), public ones included. */
    {"drop", "-685", NULL, NULL, "$HOST_IP", NULL},
    /* Then nothing that is not the internet: this network and the host on it, every
     * private, shared, loopback and link-local range (the LAN, cloud metadata at
     * 169.254.169.254), multicast and the reserved rest. */
    {"drop", "-680", NULL, NULL, "0.0.0.0", "8"},
    {"drop", "-680", NULL, NULL, "10.0.0.0", "8"},
    {"drop", "-680", NULL, NULL, "100.64.0.0", "10"},
    {"drop", "-680", NULL, NULL, "127.0.0.0", "8"},
    {"drop", "-680", NULL, NULL, "169.254.0.0", "16"},
    {"drop", "-680", NULL, NULL, "172.16.0.0", "12"},
    {"drop", "-680", NULL, NULL, "192.0.0.0", "24"},
    {"drop", "-680", NULL, NULL, "192.168.0.0", "16"},
    {"drop", "-680", NULL, NULL, "224.0.0.0", "4"},
    {"drop", "-680", NULL, NULL, "240.0.0.0", "4"},
};

char *domain_xml_guest_filter(const char *name, const char *uuid)
{
    xmlBufferPtr buf;
    xmlTextWriterPtr w = xml_begin(&buf);
    bool ok = w && start(w, "filter") >= 0 && attr(w, "name", name) >= 0 &&
              attr(w, "chain", "root") >= 0 && (!uuid || element(w, "uuid", uuid) >= 0) &&
              start(w, "filterref") >= 0 && attr(w, "filter", "clean-traffic") >= 0 && end(w) >= 0;
    for (size_t i = 0; ok && i < sizeof(guest_filter_rules) / sizeof(guest_filter_rules[0]); i++) {
        const struct filter_rule *r = &guest_filter_rules[i];
        ok = start(w, "rule") >= 0 && attr(w, "action", r->action) >= 0 &&
             attr(w, "direction", "out") >= 0 && attr(w, "priority", r->priority) >= 0 &&
             start(w, "ip") >= 0 && (!r->protocol || attr(w, "protocol", r->protocol) >= 0) &&
             (!r->port ||
              (attr(w, "dstportstart", r->port) >= 0 && attr(w, "dstportend", r->port) >= 0)) &&
             (!r->net || attr(w, "dstipaddr", r->net) >= 0) &&
             (!r->mask || attr(w, "dstipmask", r->mask) >= 0) && end(w) >= 0 && end(w) >= 0;
    }
    ok = ok && end(w) >= 0;
    return xml_end(w, buf, ok);
}

/* ---- reading: restores and metadata ----------------------------------------------------- */

/* Sets `attr` on every element `xpath` selects; returns how many there were. */
static int xml_set_attr(xmlXPathContextPtr ctx, const char *xpath, const char *attr,
                        const char *value)
{
    xmlXPathObjectPtr o = xmlXPathEvalExpression(BAD_CAST xpath, ctx);
    int n = o && o->nodesetval ? o->nodesetval->nodeNr : 0;
    for (int i = 0; i < n; i++)
        xmlSetProp(o->nodesetval->nodeTab[i], BAD_CAST attr, BAD_CAST value);
    xmlXPathFreeObject(o);
    return n;
}

/* Removes every node `xpath` selects. */
static void xml_remove(xmlXPathContextPtr ctx, const char *xpath)
{
    xmlXPathObjectPtr o = xmlXPathEvalExpression(BAD_CAST xpath, ctx);
    for (int i = 0; o && o->nodesetval && i < o->nodesetval->nodeNr; i++) {
        xmlNodePtr node = o->nodesetval->nodeTab[i];
        if (node->type == XML_ATTRIBUTE_NODE) {
            xmlRemoveProp((xmlAttrPtr)node);
        } else {
            xmlUnlinkNode(node);
            xmlFreeNode(node);
        }
        o->nodesetval->nodeTab[i] = NULL;
    }
    xmlXPathFreeObject(o);
}

/* `xml` parsed (no network, no error printed), with the metadata's namespace as "h"; NULL
 * when it does not parse. */
static xmlXPathContextPtr xml_open(const char *xml, xmlDocPtr *ret_doc)
{
    *ret_doc = xml ? xmlReadMemory(xml, (int)strlen(xml), "domain.xml", NULL,
                                   XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING)
                   : NULL;
    xmlXPathContextPtr ctx = *ret_doc ? xmlXPathNewContext(*ret_doc) : NULL;
    if (ctx && xmlXPathRegisterNs(ctx, BAD_CAST "h", BAD_CAST DOMAIN_METADATA_NS) != 0) {
        xmlXPathFreeContext(ctx);
        ctx = NULL;
    }
    if (!ctx) {
        xmlFreeDoc(*ret_doc);
        *ret_doc = NULL;
    }
    return ctx;
}

/* The one node `xpath` selects from `from` (NULL: the document), or NULL (none, or
 * several). */
static xmlNodePtr xml_one(xmlXPathContextPtr ctx, xmlNodePtr from, const char *xpath)
{
    xmlXPathObjectPtr o = from ? xmlXPathNodeEval(from, BAD_CAST xpath, ctx)
                               : xmlXPathEvalExpression(BAD_CAST xpath, ctx);
    xmlNodePtr node =
        o && o->nodesetval && o->nodesetval->nodeNr == 1 ? o->nodesetval->nodeTab[0] : NULL;
    xmlXPathFreeObject(o);
    return node;
}

char *domain_xml_restore(const char *saved, const struct domain_restore *r, char *err,
                         size_t err_size)
{
    xmlDocPtr doc = NULL;
    xmlXPathContextPtr ctx = xml_open(saved, &doc);
    char *out = NULL;
    if (!ctx) {
        snprintf(err, err_size, "the saved domain XML does not parse");
        goto done;
    }
    if (xml_set_attr(ctx, "/domain/devices/disk[@device='disk']/source", "volume", r->volume) !=
        1) {
        snprintf(err, err_size, "the saved domain has not one overlay volume");
        goto done;
    }
    xml_remove(ctx, "/domain/metadata/h:runner/h:template-key");
    xml_remove(ctx, "/domain/metadata/h:runner/h:runner-name");
    xml_remove(ctx, "/domain/devices/disk[@device='disk']/backingStore");
    xml_remove(ctx, "/domain/devices/disk[@device='disk']/source/@index");
    if (r->channel_path) {
        xml_set_attr(ctx, "/domain/devices/channel[@type='unix']/source", "path", r->channel_path);
        xml_set_attr(ctx, "/domain/devices/console[@type='file']/source", "path", r->console_log);
        xml_set_attr(ctx, "/domain/devices/serial[@type='file']/source", "path", r->console_log);
    }
    xmlNodePtr runner = xml_one(ctx, NULL, "/domain/metadata/h:runner");
    if (!runner) {
        snprintf(err, err_size, "the saved domain has no runner metadata");
        goto done;
    }
    char id[32];
    snprintf(id, sizeof(id), "%lld", (long long)r->runner_id);
    xmlNodePtr runner_id = xml_one(ctx, runner, "h:runner-id");
    if (runner_id)
        xmlNodeSetContent(runner_id, BAD_CAST id);
    /* xmlNewTextChild escapes the text. */
    xmlNewTextChild(runner, runner->ns, BAD_CAST "runner-name", BAD_CAST r->runner_name);
    xmlChar *text = NULL;
    int len = 0;
    xmlDocDumpMemory(doc, &text, &len);
    out = text ? strndup((const char *)text, (size_t)len) : NULL;
    xmlFree(text);
    if (!out)
        snprintf(err, err_size, "out of memory");
done:
    xmlXPathFreeContext(ctx);
    xmlFreeDoc(doc);
    return out;
}

/* The text of the metadata's element `name` into `out`; false when there is none (or it
 * does not fit). */
static bool metadata_text(xmlXPathContextPtr ctx, xmlNodePtr runner, const char *name, char *out,
                          size_t size)
{
    char xpath[64];
    snprintf(xpath, sizeof(xpath), "*[local-name()='%s']", name);
    xmlNodePtr node = xml_one(ctx, runner, xpath);
    xmlChar *text = node ? xmlNodeGetContent(node) : NULL;
    bool found = text && strlen((const char *)text) < size;
    if (found)
        snprintf(out, size, "%s", (const char *)text);
    xmlFree(text);
    return found;
}

void domain_xml_metadata(const char *xml, struct domain_metadata *out)
{
    memset(out, 0, sizeof(*out));
    xmlDocPtr doc = NULL;
    xmlXPathContextPtr ctx = xml_open(xml, &doc);
    /* The element alone, as virDomainGetMetadata answers for our namespace (libvirt gives
     * it back without one), or inside a whole domain's <metadata>, in our namespace. */
    xmlNodePtr runner =
        ctx ? xml_one(ctx, NULL, "/*[local-name()='runner'] | /domain/metadata/h:runner") : NULL;
    if (runner) {
        char id[32];
        out->found = true;
        metadata_text(ctx, runner, "controller", out->controller, sizeof(out->controller));
        if (metadata_text(ctx, runner, "runner-id", id, sizeof(id)))
            out->runner_id = strtoll(id, NULL, 10);
        metadata_text(ctx, runner, "runner-name", out->runner_name, sizeof(out->runner_name));
        metadata_text(ctx, runner, "template-key", out->template_key, sizeof(out->template_key));
        if (metadata_text(ctx, runner, "epoch", id, sizeof(id)))
            out->epoch = strtoll(id, NULL, 10);
    }
    xmlXPathFreeContext(ctx);
    xmlFreeDoc(doc);
}
