/* The libvirt provider's own parts, shared by its files and by no one else (the rest of
 * hatcheryd sees provisioner.h and provider.h).
 *
 * The files, from the bottom up; a file calls only those below it, except where noted:
 *   host.c          connections and reconnects; it reports up through provisioner_hooks
 *   remote_image.c  pool images on remote hosts
 *   guest.c         one guest from create to teardown, its timers and lifecycle events; it
 *                   opens the agent channel through the hooks provisioner.c sets
 *                   (struct channel_hooks), and tells its template how a restore went
 *                   through the callback the template gave it (restore_outcome_cb)
 *   channel.c       the channel to a guest's agent, and the relay of what it says
 *   template.c      warm templates, handing guests a restore source; the create op
 *   inventory.c     tagged domains, orphan volumes, removal by name
 *   provisioner.c   the top: new, free, the hooks and the provider ops table
 * with domain_xml, stream_bridge, guest_filter, host_image, host_caps and libvirt_loop
 * beside them (they know nothing of hosts or guests). */
#ifndef HATCHERY_LIBVIRT_INTERNAL_H
#define HATCHERY_LIBVIRT_INTERNAL_H

#include <limits.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "agent_channel.h"
#include "guest_filter.h"
#include "host_caps.h"
#include "image_manifest.h"
#include "provisioner.h"
#include "stream_bridge.h"

#define RECONNECT_MIN_MS      500
#define RECONNECT_MAX_MS      30000
#define CHANNEL_CONNECT_TRIES 50 /* 100 ms apart */
/* A restored guest's agent answers `restore` within a second here, a production guest
 * under TCG within seconds: a minute is a clone that is stuck. */
#define RESTORE_HELLO_TIMEOUT_MS 60000

/* What a connect worker found, for the loop to take in connect_done: the worker writes
 * only here, and the loop reads it only once the work is done. */
struct host_found {
    virConnectPtr conn;
    char error[256];
    bool kvm[ARCH_MAX];
    char **active; /* on a reconnect: the domains running */
    size_t n_active;
    bool inventory_failed;
    unsigned long hypervisor_version, libvirt_version; /* a template is tied to both */
    long long qemu_uid, qemu_gid; /* QEMU's guests' ids (libvirt's DAC label), or -1 */
    struct host_network networks[HOST_NETWORKS_MAX];
    int n_networks; /* -1: `networks_error` */
    char networks_error[192];
    bool filter_tried; /* a QEMU host: the guest filter was defined, or `filter_error` */
    char filter_error[256];
    struct guest_filter_host filter_host;
};

/* Threads: a host is the loop's. Workers read its config, and reach its connection only
 * through host_conn_ref() under `lock`, which guards `conn`, `dropped` and `kvm` (the one
 * field a worker reads that a reconnect changes). Each worker holds its own reference, so
 * a reconnect can drop the host's while a worker still uses the old one. */
struct host {
    struct provisioner *prov;
    struct config_host cfg; /* strings borrowed from the config */
    uv_mutex_t lock;
    virConnectPtr conn; /* under lock */
    bool up;
    bool connecting;
    bool dropped;     /* under lock; libvirt closed the connection: dead until the reconnect */
    bool lxc;         /* from the URI, at add */
    bool local_files; /* its storage_dir is on this machine (a local URI) */
    bool transport_logged;
    bool simulated; /* from the URI: libvirt's test driver, where no guest ever runs */
    bool streams;   /* channels and consoles through libvirt streams (host_transport) */
    bool kvm[ARCH_MAX];
    /* The guest filter (guest_filter.h) on the current connection: defined, or why not;
     * and the host's addresses it keeps guests off (under lock: create workers read it). */
    bool guest_filter;
    char guest_filter_error[256];
    struct guest_filter_host filter_host;
    long long qemu_gid; /* the group QEMU's guests run in, or -1 (host_caps.h) */
    /* Its libvirt networks, as found at this connection, and whether the filter applies on
     * each (network_kind.h); or why they could not be listed. */
    struct host_network networks[HOST_NETWORKS_MAX];
    size_t n_networks;
    char networks_error[192];
    int lifecycle_id;
    int attempt;
    int64_t reconnects;
    uv_timer_t reconnect;
    uv_timer_t grace;         /* guests kept through a drop are given up when it fires */
    uv_async_t dropped_async; /* libvirt closed the connection (told from any thread) */
    int drop_reason;          /* under lock: its VIR_CONNECT_CLOSE_REASON_* */
    int open_handles;         /* the timers, the async and a connection closing: freed when done */
    bool finished; /* under lock: the provisioner is gone, callbacks that come are dropped */
    bool ever_up;
    /* On a reconnect, the worker lists the running domains here; the loop compares them
     * with the guests it kept, because their stop events were lost with the connection. */
    char **active;
    size_t n_active;
    bool inventory_failed;
    struct host_found found;
    uv_work_t work;
    char error[256];
    struct host_usage used;
    int64_t guest_moves_refused; /* guest_move's refusals on this host: a bug if not 0 */
    int64_t slot_moves_refused;  /* slot_move's, the same */
    struct guest *guests;
    struct host_queue *queue; /* its libvirt calls' threads */
    unsigned long hypervisor_version, libvirt_version;
    struct image_check *images;  /* the VM pools' images, on a remote host */
    struct template_slot *slots; /* warm templates kept here */
    bool slot_work;              /* a template is checked or built: one at a time */
    uint64_t slot_generation;    /* provisioner_templates_sweep's count */
    bool slots_scanned;          /* templates left on disk by an earlier hatcheryd listed */
    struct host *next;
};

enum slot_state {
    SLOT_UNKNOWN,  /* not looked at yet: a valid save file from before may be there */
    SLOT_CHECKING, /* its files are being looked at (or removed) */
    SLOT_BUILDING,
    SLOT_READY,
    SLOT_BROKEN,   /* its last build or restore failed: rebuilt after a delay */
    SLOT_DISABLED, /* restores keep failing on this host: cold boots only */
    SLOT_STATE_MAX,
};

/* One warm template of a pool on a host: `name` is its domain's, its volume's and its
 * save file's. */
struct template_slot {
    struct host *host;
    char pool[CONFIG_MAX_NAME_BYTES + 1];
    char name[256];
    char key[65];      /* what it was built from (template_key): stale when it changes */
    char want_key[65]; /* what it should be built from now */
    enum slot_state state;
    bool rebuild; /* its files go before the next build: a corrupt or stale save */
    int failures; /* restores in a row that gave no hello */
    int64_t retry_at_ms;
    int64_t file_bytes;
    int64_t restores, fallbacks;
    char reason[256];
    const struct config_pool *pool_cfg; /* as of the last want */
    uint64_t wanted;                    /* the host's sweep generation it was last wanted in */
    bool removing;                      /* unwanted: its files are being deleted */
    uv_work_t work;
    struct template_slot *next;
};

/* A VM pool's image on a remote host, as the last probe found it (provisioner_host_image). */
struct image_check {
    char pool[CONFIG_MAX_NAME_BYTES + 1];
    char image[PATH_MAX]; /* the path probed: a reload may name another */
    int arch;
    bool probing;
    bool found; /* there is a finding: `ready`, or `reason` */
    bool ready;
    char reason[256];
    int64_t checked_ms; /* 0: due now (none yet, or the host reconnected) */
    struct image_manifest manifest;
    struct image_check *next;
};

/* How a restore from a template went, as the guest tells its template (template.c). */
enum restore_outcome {
    RESTORE_DONE,      /* restored: the clone boots from the template's memory */
    RESTORE_FELL_BACK, /* the template did not restore: booted cold, `reason` why */
    RESTORE_NO_HELLO,  /* the clone failed before its agent said hello, `reason` why */
    RESTORE_HELLO,     /* the clone's agent said hello: the template works */
};
struct guest;
typedef void (*restore_outcome_cb)(void *slot, const struct guest *g, enum restore_outcome outcome,
                                   const char *reason);

/* What the guest layer asks of the channel layer above it (channel.c), through the hooks
 * provisioner.c sets, so that guest.c calls nothing above itself. */
struct channel_hooks {
    int (*listen)(struct guest *g); /* a container's: bind the socket its agent dials */
    void (*open)(struct guest *g);  /* a VM's: connect to its agent, by socket or stream */
};

struct guest {
    struct provisioner *prov;
    struct host *host;
    char *name;       /* the runner's */
    char domain[256]; /* the libvirt domain's: the runner's, or a template slot's */
    int64_t runner_id;
    int64_t id_base;       /* a container's uids and gids on its host (domain_xml.h); 0 for a VM */
    int64_t found_id_base; /* adoption's worker: the range its domain says, or 0 */
    const struct config_pool *pool;
    enum guest_state state;
    const struct guest_events *events;
    void *data;
    char *volume; /* its overlay's: NAME.qcow2 */
    /* Its files on this machine, made once by guest_new (a guest is small: at 10,000 of
     * them, four PATH_MAX arrays each were 160 MiB). */
    char *channel_path, *channel_dir, *console_log;
    char *xml;
    /* Direct kernel boot: the pool's (its config, or its manifest on this machine), else
     * what the image's manifest on its remote host names. NULL: boots from its disk. */
    char *kernel, *initrd, *cmdline;
    /* The last worker's error (each worker clears it first; read on the loop only once
     * the worker is done), and guest_fail's reason (the loop's only), kept through the
     * teardown; NULL when none. Strings of their own, not arrays: fixed ones were most of
     * a guest's size at 10,000 guests. */
    char *error;
    char *why_failed;
    char machine_id[64], nonce[72]; /* from its hello: no other live guest may have them */
    bool failed;
    bool domain_stopped;
    bool teardown_queued;
    bool busy;     /* a worker owns this guest's libvirt calls */
    bool adopting; /* an earlier hatcheryd's: the channel reopens with resume */
    /* Templates (provisioner_template_build, provisioner_guest_restore). */
    bool restore;  /* restored from the template `domain`: the channel opens with restore */
    bool template; /* a template being built: saved on hello, its volume kept */
    bool saving;   /* the save runs: the domain's stop and the channel's end are expected */
    bool saved;
    char *save_file; /* a template's memory: built into or restored from; else NULL */
    /* The template it was restored from (an opaque slot of template.c), told how the
     * restore went; NULL once told it fell back, or for a guest not restored. */
    restore_outcome_cb restore_outcome;
    void *restore_slot;
    char *fallback;        /* why its template could not be restored: booted cold */
    bool filter_restored;  /* create_work found the guest filter gone and put it back */
    char template_key[65]; /* a template being built: its key, in its metadata */
    char *found_domain;    /* adopt_work's answer: the domain serving this runner */
    provisioner_template_cb template_cb;
    void *template_data;
    int connect_tries;
    uv_work_t work;
    void (*call_work)(struct guest *g), (*call_done)(struct guest *g),
        (*call_release)(struct guest *g); /* guest_call's, while one is under way */
    uv_timer_t timer;                     /* boot timeout, channel connect retries */
    uv_pipe_t *pipe;                      /* connecting (VM) or listening (container) */
    struct agent_channel *channel;
    /* A host reached through streams: the opened streams (a worker fills them), then
     * the bridges that carry them. */
    virStreamPtr opened_channel, opened_console;
    struct stream_bridge *channel_bridge, *console_bridge;
    struct guest *next;
};

/* What the layers above host.c hear from it, set by provisioner_new: a host's guests
 * cannot be reached, one of them stopped while its host was away, a domain's lifecycle
 * event, and the last work done after provisioner_free. */
struct provisioner_hooks {
    void (*on_guest_lost)(struct guest *g, const char *why);
    void (*on_guest_stopped)(struct guest *g, const char *why);
    int (*lifecycle)(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque);
    void (*finalize)(struct provisioner *p);
};

struct provisioner {
    struct provider provider; /* first: the provider's calls get it back (provider_of) */
    uv_loop_t *loop;
    int works;    /* libvirt calls in flight on workers */
    bool closing; /* provisioner_free was called: finish when works reach 0 */
    char *controller_id;
    char *state_dir;
    int64_t boot_timeout_ms;
    int64_t adopt_grace_ms;
    struct host *hosts;
    struct provisioner_hooks hooks;
    struct channel_hooks channel;
};

/* How a guest boots: its pool's kernel, else its image's manifest's; NULL from its disk. */
struct boot_files {
    const char *kernel, *initrd, *cmdline;
};

/* host.c */
struct host *host_find(struct provisioner *p, const char *name);
/* A blocking libvirt call for `h`, on its own threads (host_queue.h). */
int host_queue_work(struct host *h, uv_work_t *w, uv_work_cb work, uv_after_work_cb done);
bool work_done_closing(struct provisioner *p);
virConnectPtr host_conn_ref(struct host *h, bool even_dropped, bool ret_kvm[ARCH_MAX]);
bool host_usable(struct host *h);
bool host_dropped(struct host *h);
/* libvirt's error handler, set once for the process (provisioner_new): libvirt keeps one
 * handler for every thread, so the hosts' threads need not set it again. */
void quiet_libvirt(void *data, virErrorPtr error);
void host_conn_drop(struct host *h);
/* At the provisioner's end, from the loop: the host's connection is closed on the host's
 * own queue (dropping its callbacks and closing it are calls that wait for the host's
 * answer; on the loop a silent host would hold it for good). Callbacks that still come
 * are dropped (h->finished), and `h` stays allocated for them until `then` runs on the
 * loop, once the connection is closed. -ENOENT: there was none, and `then` is not
 * called. */
int host_conn_close_queued(struct host *h, void (*then)(struct host *h));
void host_active_free(struct host *h);
/* 0 when a guest of `pool` fits on `h` now; -ENODEV (down) or -ENOSPC. */
int host_capacity_for(const struct host *h, const struct config_pool *pool);

/* remote_image.c */
struct image_check *image_look(struct host *h, const struct config_pool *pool);
const struct image_manifest *remote_manifest(const struct host *h, const struct config_pool *pool);
bool image_usable(struct host *h, const struct config_pool *pool);
struct boot_files boot_files_of(const struct host *h, const struct config_pool *pool);

/* guest.c */
/* The one writer of a guest's state: false (logged, counted) for a move its lifecycle
 * table does not allow, and the state is kept. */
bool guest_move(struct guest *g, enum guest_state to);
bool guest_move_allowed(enum guest_state from, enum guest_state to);
void guest_release(struct guest *g);
virStoragePoolPtr host_storage_pool(struct host *h, virConnectPtr conn, char *err, size_t err_size);
void guest_create_work(struct guest *g);
void guest_fail(struct guest *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A worker's error, replacing the last; cleared at the start of each work. */
void guest_error_set(struct guest *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void guest_error_clear(struct guest *g);
/* The one way a guest's blocking libvirt work runs: `work(g)` on its host's thread, the
 * guest busy meanwhile; then `done(g)` back on the loop, the guest no longer busy, unless
 * the provisioner is closing by then: then only `release(g)` (when given), to let go of what
 * the work took. -errno, with nothing queued and the guest not busy, when it cannot be
 * queued. */
int guest_call(struct guest *g, void (*work)(struct guest *g), void (*done)(struct guest *g),
               void (*release)(struct guest *g));
/* guest_call, failing the guest when it cannot be queued (`what`: the work, for the reason). */
void guest_work_start(struct guest *g, void (*work)(struct guest *g), void (*done)(struct guest *g),
                      void (*release)(struct guest *g), const char *what);
void guest_create_done(struct guest *g);
/* `template`: the template it is built into or restored from (its save file), or NULL. */
struct guest *guest_new(struct provisioner *p, struct host *h, const struct guest_spec *spec,
                        const char *template, const struct guest_events *events, void *data);
void guest_attach(struct guest *g);
int runner_domain_remove(virConnectPtr conn, const char *name);
virStoragePoolPtr host_storage_pool_lookup(struct host *h, virConnectPtr conn);
void teardown_start(struct guest *g);
int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque);
void guest_stopped(struct guest *g, const char *why);
/* The guest ended on its own (`why`): told to its owner (guest_events.on_ended), which
 * decides whether that is a failure; failed when the owner has no say. */
void guest_ended(struct guest *g, const char *why);
/* Makes and starts the guest of `spec`, restored from a template when `restore_from` (the
 * template's domain) is given, which hears how it went through `outcome`. */
int guest_create(struct provisioner *p, struct host *h, const struct guest_spec *spec,
                 const char *restore_from, restore_outcome_cb outcome, void *slot,
                 const struct guest_events *events, void *data, struct guest **ret_guest);
void guest_restore_told(struct guest *g, enum restore_outcome outcome, const char *reason);
void on_adopt_timeout(uv_timer_t *t);
void on_boot_timeout(uv_timer_t *t);
uint64_t hello_timeout_ms(const struct guest *g);
void on_pipe_closed(uv_handle_t *handle);
virDomainPtr runner_domain(virConnectPtr conn, const char *name);

/* container.c: a container's files, seen from its user namespace (domain_xml.h's id base).
 * Whether its root can reach `root_dir` (with the .oldroot libvirt enters it through) and
 * the directory `socket_dir` is made in; false with the reason: */
bool container_paths_usable(const char *root_dir, const char *socket_dir, char *why,
                            size_t why_size);
/* Makes `dir` (0700, kept if there) and opens it to the container's root alone: */
int container_socket_dir_make(const char *dir, int64_t id_base);

/* channel.c: its hooks (struct channel_hooks) */
void channel_open(struct guest *g);
int container_listen(struct guest *g);

/* template.c */
/* A template slot's lifecycle table, as guest_move's. */
bool slot_move(struct template_slot *slot, enum slot_state to);
bool slot_move_allowed(enum slot_state from, enum slot_state to);
void template_key_of(const struct host *h, const struct config_pool *p, char out[65]);

/* The provider's operations (provisioner.c's ops table), each in the file of its layer. */
static inline struct provisioner *provider_of(struct provider *p)
{
    return (struct provisioner *)p; /* the provider is its first member */
}
int provisioner_guest_create(struct provider *provider, const char *host_name,
                             const struct guest_spec *spec, const struct guest_events *events,
                             void *data, struct guest **ret_guest);
int provisioner_guest_adopt(struct provider *provider, const char *host_name,
                            const struct guest_spec *spec, const struct guest_events *events,
                            void *data, struct guest **ret_guest);
int provisioner_host_add(struct provider *provider, const struct config_host *cfg);
int provisioner_host_update(struct provider *provider, const struct config_host *cfg);
bool provisioner_host_up(struct provider *provider, const char *name);
int provisioner_host_status(struct provider *provider, const char *name, struct host_status *ret);
void provisioner_templates_want(struct provider *provider, const char *host_name,
                                const struct config_pool *pool, int n);
void provisioner_templates_sweep(struct provider *provider, const char *host_name);
int provisioner_templates(struct provider *provider, const char *host_name,
                          struct template_status *out, size_t max, size_t *ret_n);
void provisioner_free(struct provider *provider);
int provisioner_tagged_domains_async(struct provider *provider, const char *host,
                                     provider_names_cb cb, void *data);
int provisioner_orphan_volumes_async(struct provider *provider, const char *host,
                                     provider_names_cb cb, void *data);
int provisioner_domain_remove(struct provider *provider, const char *host, const char *name,
                              provider_done_cb cb, void *data);
int provisioner_host_image(struct provider *provider, const char *host_name,
                           const struct config_pool *pool, struct image_status *ret);

#endif
