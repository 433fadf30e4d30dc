/* Domain XML for one guest (and the storage XML of its disk), written with libxml2's xmlTextWriter
 * so that no string (a runner name, a path from the config) is ever pasted into markup: the writer
 * escapes. Variants: ppc64le `pseries` (KVM when the host offers it, else TCG), s390x
 * `s390-ccw-virtio`, x86_64 (development), and LXC containers. */
#ifndef HATCHERY_DOMAIN_XML_H
#define HATCHERY_DOMAIN_XML_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

#define DOMAIN_METADATA_NS  "https://hatchery.dev/xmlns/runner/1"
#define DOMAIN_METADATA_KEY "hatchery"

struct domain_spec {
    const char *name;          /* the runner name: hatchery-<controller>-<pool>-<id> */
    const char *controller_id; /* in <metadata>: nothing without our tag is touched */
    int64_t runner_id;
    int64_t epoch; /* the leader's epoch that made it (lease.h); 0: no lease, not written */
    const char *template_key; /* a warm template being built: what it is built from */
    const char *pool;
    enum pool_arch arch;
    enum pool_backend backend;
    bool kvm; /* domain type kvm (host and guest arch match, /dev/kvm) */
    int64_t vcpus;
    int64_t memory_mib;
    /* VMs */
    const char *storage_pool; /* the overlay volume, through the storage API */
    const char *volume;
    const char *kernel; /* direct kernel boot, when set */
    const char *initrd;
    const char *cmdline;                /* from the config only: never a secret */
    bool vof;                           /* ppc64le: QEMU's fast VOF firmware instead of SLOF */
    const char *network;                /* "user", "none", or a libvirt network name */
    const char *network_filter;         /* on a libvirt network: the nwfilter its interface takes */
    const char *const *filter_host_ips; /* its HOST_IP values: the host's own addresses */
    size_t n_filter_host_ips;
    const char *channel_path; /* the agent's virtio-serial port, bound by QEMU */
    const char *console_log;
    /* A remote host: no path of ours exists there. The channel's socket path is left to
     * libvirt and the console is a pty; both are reached through libvirt streams
     * (virDomainOpenChannel, virDomainOpenConsole), and channel_path and console_log are
     * not used. */
    bool streams;
    /* containers */
    const char *root_dir;      /* read-only root filesystem */
    const char *channel_dir;   /* holds the controller's socket; mounted at /run/hatchery */
    const char *init;          /* the agent inside the container */
    const char *runner_user;   /* the account it runs the runner as */
    int64_t container_id_base; /* its uids and gids on the host (domain_container_id_base) */
};

/* A container runs in a user namespace: its uids and gids 0..65535 are the host's
 * id_base..id_base+65535, a range of its own among CONTAINER_ID_SLOTS from
 * CONTAINER_ID_FIRST (above systemd-nspawn's ranges, below its foreign range). Its root is
 * no one on the host, and two containers on a host share no uid. */
#define CONTAINER_ID_FIRST INT64_C(0x70000000)
#define CONTAINER_ID_COUNT INT64_C(65536)
#define CONTAINER_ID_SLOTS INT64_C(1024)
/* The range runner `runner_id` takes first: its slot, runner_id mod CONTAINER_ID_SLOTS. */
int64_t domain_container_id_base(int64_t runner_id);
/* The range for a new container of `runner_id` on a host whose live containers hold the
 * bases `used[0..n)`: its own slot's when free, else the next free slot's (runner ids
 * CONTAINER_ID_SLOTS apart would otherwise share users); -1 when every slot is held. */
int64_t domain_container_id_base_free(int64_t runner_id, const int64_t *used, size_t n);

/* Returns the XML (caller frees) or NULL with a reason in `err`. */
char *domain_xml_build(const struct domain_spec *spec, char *err, size_t err_size);

/* The storage XML a guest's disk needs, written the same way (caller frees; NULL when out
 * of memory). A directory storage pool at `path`, its directory made with `mode` (NULL:
 * libvirt's default) when libvirt builds it: */
char *domain_xml_dir_pool(const char *name, const char *path, const char *mode);
/* A qcow2 overlay volume of `capacity_mib` on the qcow2 image `backing`: */
char *domain_xml_overlay_volume(const char *name, const char *backing, int64_t capacity_mib);

/* What a runner's guest restored from a template differs in from the template's saved
 * domain: the rest (the template's name and UUID among it: libvirt 9.0 refuses others on a
 * restore) stays as saved. */
struct domain_restore {
    const char *volume;       /* the runner's own overlay volume */
    const char *channel_path; /* the agent's socket and the console log; NULL on a host */
    const char *console_log;  /* reached through streams, where the saved ones stand */
    int64_t runner_id;
    const char *runner_name; /* said in the metadata's <runner-name> */
};
/* The XML to restore `saved` (virDomainSaveImageGetXMLDesc's) with: the runner's volume,
 * paths and metadata, the template's key and the disk's saved backing chain left out
 * (libvirt reads the chain from the new overlay). NULL with a reason in `err`: the saved
 * XML does not parse, has not exactly one disk or no runner metadata. The caller frees. */
char *domain_xml_restore(const char *saved, const struct domain_restore *r, char *err,
                         size_t err_size);

/* What Hatchery's metadata says of a domain, read from its <runner> element (as
 * virDomainGetMetadata answers for DOMAIN_METADATA_NS: without the namespace) or from a
 * whole domain's XML (a saved image's): all empty when there is none or it does not
 * parse. */
struct domain_metadata {
    bool found;
    char controller[128];
    int64_t runner_id;
    char runner_name[200]; /* a guest restored from a template: the runner it serves */
    char template_key[65]; /* a template being built: what it is built from */
    int64_t epoch;         /* the leader's epoch that defined it; 0: none recorded */
};
void domain_xml_metadata(const char *xml, struct domain_metadata *out);

/* The guest filter (guest_filter.h) named `name`, as an nwfilter definition; `uuid` (NULL:
 * none, libvirt picks one) is the defined filter's when it replaces it: libvirt refuses a
 * filter whose name is taken under another UUID. */
char *domain_xml_guest_filter(const char *name, const char *uuid);

#endif
