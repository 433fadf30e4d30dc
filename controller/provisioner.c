/* libvirt hosts and single-use guests; see provisioner.h. */
#include "provisioner.h"

#include <errno.h>
#include <libvirt/virterror.h>
#include <libxml/parser.h>
#include <libxml/xmlwriter.h>
#include <libxml/xpath.h>
#include <libxml/xpathInternals.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "domain_xml.h"
#include "libvirt_error.h"
#include "guest_filter.h"
#include "guest_isolation.h"
#include "host_caps.h"
#include "host_image.h"
#include "hatchery/agent_protocol.h"
#include "hatchery/limits.h"
#include "stream_bridge.h"
#include "hatchery/version.h"
#include "log.h"
#include "textbuf.h"
#include "wall_clock.h"

#define RECONNECT_MIN_MS      500
#define RECONNECT_MAX_MS      30000
#define CHANNEL_CONNECT_TRIES 50 /* 100 ms apart */
/* A restored guest's agent answers `restore` within a second here, a production guest
 * under TCG within seconds: a minute is a clone that is stuck. */
#define RESTORE_HELLO_TIMEOUT_MS 60000

const char *const guest_state_names[GUEST_STATE_MAX] = {
    [GUEST_CREATING] = "creating", [GUEST_ADOPTING] = "adopting", [GUEST_BOOTING] = "booting",
    [GUEST_READY] = "ready",       [GUEST_RUNNING] = "running",   [GUEST_EXITED] = "exited",
    [GUEST_DELETING] = "deleting", [GUEST_GONE] = "gone",
};

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
    long long qemu_uid; /* the uid QEMU's guests run as (libvirt's DAC label), or -1 */
    bool filter_tried;  /* a QEMU host: the guest filter was defined, or `filter_error` */
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
    int lifecycle_id;
    int attempt;
    int64_t reconnects;
    uv_timer_t reconnect;
    uv_timer_t grace; /* guests kept through a drop are given up when it fires */
    int open_handles; /* the two timers: the host is freed when both have closed */
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
    struct guest *guests;
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

static const char *const slot_state_names[SLOT_STATE_MAX] = {
    [SLOT_UNKNOWN] = "unknown", [SLOT_CHECKING] = "checking", [SLOT_BUILDING] = "building",
    [SLOT_READY] = "ready",     [SLOT_BROKEN] = "broken",     [SLOT_DISABLED] = "disabled",
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

struct guest {
    struct provisioner *prov;
    struct host *host;
    char *name;       /* the runner's */
    char domain[256]; /* the libvirt domain's: the runner's, or a template slot's */
    int64_t runner_id;
    const struct config_pool *pool;
    enum guest_state state;
    const struct guest_events *events;
    void *data;
    char volume[300];
    char channel_path[PATH_MAX];
    char channel_dir[PATH_MAX];
    char console_log[PATH_MAX];
    char *xml;
    /* Direct kernel boot: the pool's (its config, or its manifest on this machine), else
     * what the image's manifest on its remote host names. NULL: boots from its disk. */
    char *kernel, *initrd, *cmdline;
    char error[512];                /* the last worker's error (each worker clears it first) */
    char why_failed[512];           /* guest_fail's reason, kept through the teardown */
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
    char save_file[PATH_MAX];
    struct template_slot *slot; /* the template it was restored from */
    char fallback[300];         /* why its template could not be restored: booted cold */
    bool filter_restored;       /* create_work found the guest filter gone and put it back */
    char template_key[65];      /* a template being built: its key, in its metadata */
    char found_domain[256];     /* adopt_work's answer: the domain serving this runner */
    provisioner_template_cb template_cb;
    void *template_data;
    int connect_tries;
    uv_work_t work;
    uv_timer_t timer; /* boot timeout, channel connect retries */
    uv_pipe_t *pipe;  /* connecting (VM) or listening (container) */
    struct agent_channel *channel;
    /* A host reached through streams: the opened streams (a worker fills them), then
     * the bridges that carry them. */
    virStreamPtr opened_channel, opened_console;
    struct stream_bridge *channel_bridge, *console_bridge;
    struct guest *next;
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
};

static void guest_fail(struct guest *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void teardown_start(struct guest *g);
static void save_file_of(const struct host *h, const char *name, char *out, size_t size);
static struct template_slot *slot_for(struct host *h, const struct config_pool *pool);
static void slot_broken(struct template_slot *slot, const char *reason);
static void slot_restore_failed(struct template_slot *slot, const char *reason);
static virDomainPtr runner_domain(virConnectPtr conn, const char *name);
static const struct provider_ops libvirt_provider_ops;

static struct host *host_find(struct provisioner *p, const char *name)
{
    for (struct host *h = p->hosts; h; h = h->next)
        if (strcmp(h->cfg.name, name) == 0)
            return h;
    return NULL;
}

static int queue_work(struct provisioner *p, uv_work_t *w, uv_work_cb work, uv_after_work_cb done)
{
    int r = uv_queue_work(p->loop, w, work, done);
    if (r == 0)
        p->works++;
    return r;
}

static void finalize(struct provisioner *p);
static void on_pipe_closed(uv_handle_t *handle);

/* Every after-work callback starts here: true means the provisioner is shutting down and
 * the callback must only release its own memory. */
static bool work_done_closing(struct provisioner *p)
{
    p->works--;
    if (!p->closing)
        return false;
    if (p->works == 0)
        finalize(p);
    return true;
}

/* ---- hosts ---------------------------------------------------------------------------- */

static void host_connect(struct host *h);

static bool host_has_conn(struct host *h)
{
    uv_mutex_lock(&h->lock);
    bool has = h->conn != NULL;
    uv_mutex_unlock(&h->lock);
    return has;
}

/* The host's connection for one worker's calls, as a reference of its own (closed with
 * virConnectClose when done), or NULL when there is none or libvirt dropped it
 * (`even_dropped` takes a dropped one anyway: its calls fail, but a teardown's are tried).
 * `ret_kvm` (may be NULL) gets what KVM offers, per arch. */
static virConnectPtr host_conn_ref(struct host *h, bool even_dropped, bool ret_kvm[ARCH_MAX])
{
    uv_mutex_lock(&h->lock);
    virConnectPtr conn = h->conn && (even_dropped || !h->dropped) ? h->conn : NULL;
    if (conn)
        virConnectRef(conn);
    if (ret_kvm)
        memcpy(ret_kvm, h->kvm, sizeof(h->kvm));
    uv_mutex_unlock(&h->lock);
    return conn;
}

/* Connected, and not dropped by libvirt. */
static bool host_usable(struct host *h)
{
    uv_mutex_lock(&h->lock);
    bool usable = h->conn && !h->dropped;
    uv_mutex_unlock(&h->lock);
    return usable;
}

static bool host_dropped(struct host *h)
{
    uv_mutex_lock(&h->lock);
    bool dropped = h->dropped;
    uv_mutex_unlock(&h->lock);
    return dropped;
}

static void on_reconnect_timer(uv_timer_t *t)
{
    host_connect(t->data);
}

static void host_down(struct host *h, const char *why)
{
    if (!h->up && !h->connecting && !host_has_conn(h))
        return;
    bool was_up = h->up;
    h->up = false;
    snprintf(h->error, sizeof(h->error), "%s", why);
    if (was_up)
        log_error("host.down", "host=%s uri=%s reason=\"%s\"", h->cfg.name, h->cfg.uri, why);
    long delay = RECONNECT_MIN_MS;
    for (int i = 0; i < h->attempt && delay < RECONNECT_MAX_MS; i++)
        delay *= 2;
    if (delay > RECONNECT_MAX_MS)
        delay = RECONNECT_MAX_MS;
    h->attempt++;
    uv_timer_start(&h->reconnect, on_reconnect_timer, (uint64_t)delay, 0);
}

/* Guests on a host that stays away are failed: nobody can reach them. Their domains, if
 * the host comes back, carry our tag and are removed by the reconciler. */
static void host_give_up_guests(struct host *h)
{
    for (struct guest *g = h->guests; g; g = g->next)
        guest_fail(g, "host %s went down (%s)", h->cfg.name, h->error);
}

static void on_grace_timer(uv_timer_t *t)
{
    struct host *h = t->data;
    if (!h->up) {
        log_warn("host.guests_given_up", "host=%s after_s=%lld", h->cfg.name,
                 (long long)h->cfg.down_grace_s);
        host_give_up_guests(h);
    }
}

static void on_close_cb(virConnectPtr conn, int reason, void *opaque)
{
    (void)conn;
    struct host *h = opaque;
    static const char *const reasons[] = {"error", "end of file", "keepalive timeout",
                                          "client closed"};
    /* Inside libvirt's callback the connection must not be closed (that deadlocks): the
     * reconnect, on a worker, drops the old one first. */
    uv_mutex_lock(&h->lock);
    h->dropped = true;
    uv_mutex_unlock(&h->lock);
    const char *why = reason >= 0 && reason < 4 ? reasons[reason] : "connection closed";
    host_down(h, why);
    /* A libvirtd restart (an upgrade) or a short network cut must not kill running jobs:
     * QEMU and the agent channels live on without libvirtd. The guests are kept for
     * down_grace_s; if the host is back by then, they go on, else they are failed. */
    size_t kept = 0;
    for (struct guest *g = h->guests; g; g = g->next)
        kept += g->state < GUEST_DELETING;
    if (h->cfg.down_grace_s == 0) {
        host_give_up_guests(h);
        return;
    }
    if (kept) {
        log_warn("host.guests_kept", "host=%s guests=%zu grace_s=%lld", h->cfg.name, kept,
                 (long long)h->cfg.down_grace_s);
        uv_timer_start(&h->grace, on_grace_timer, (uint64_t)h->cfg.down_grace_s * 1000, 0);
    }
}

static int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque);

/* On the connect worker: takes the host's old connection away and closes it (workers
 * still using it hold references of their own). */
static void host_conn_drop(struct host *h)
{
    uv_mutex_lock(&h->lock);
    virConnectPtr old = h->conn;
    h->conn = NULL;
    h->dropped = false;
    uv_mutex_unlock(&h->lock);
    if (!old)
        return;
    if (h->lifecycle_id >= 0)
        virConnectDomainEventDeregisterAny(old, h->lifecycle_id);
    h->lifecycle_id = -1;
    virConnectUnregisterCloseCallback(old, on_close_cb);
    virConnectClose(old);
}

static void quiet_libvirt(void *data, virErrorPtr error)
{
    /* libvirt prints every error by default; we read them with virGetLastError and log
     * them once, where they matter. */
    (void)data;
    (void)error;
}

/* The uid QEMU runs guests as, from the capabilities' DAC security model: <secmodel>
 * <model>dac</model> <baselabel type='qemu'>+64055:+64055</baselabel>; -1 when absent. */
/* How a host's agent channels and consoles are reached. `socket` puts QEMU's channel socket
 * and its console file under state_dir, which only this daemon's user may enter: that
 * works only where QEMU runs as root (or as this user). On a stock host QEMU runs as
 * libvirt-qemu with dynamic ownership, so `auto` takes streams there, as for a remote
 * host; an LXC host keeps its socket (the container's socket directory is bind-mounted). */
static void host_transport(struct host *h, long long qemu_uid)
{
    /* Without a DAC label (security_driver = "none") the uid is not known: the socket. */
    if (h->cfg.agent_transport != TRANSPORT_AUTO || h->lxc || h->simulated || qemu_uid < 0 ||
        config_host_streams(&h->cfg))
        return;
    bool streams = qemu_uid != 0 && qemu_uid != (long long)getuid();
    if (streams != h->streams || !h->transport_logged)
        log_info("host.transport", "host=%s transport=%s qemu_uid=%lld", h->cfg.name,
                 streams ? "stream" : "socket", qemu_uid);
    h->streams = streams;
    h->transport_logged = true;
}

static void connect_work(uv_work_t *w)
{
    struct host *h = w->data;
    /* libvirt's error handler is per thread here: keep its default printer quiet. */
    virSetErrorFunc(NULL, quiet_libvirt);
    host_conn_drop(h);
    struct host_found *f = &h->found;
    memset(f, 0, sizeof(*f));
    f->qemu_uid = -1;
    f->conn = virConnectOpen(h->cfg.uri);
    if (!f->conn) {
        snprintf(f->error, sizeof(f->error), "%s", libvirt_error());
        return;
    }
    if (h->ever_up) {
        virDomainPtr *doms = NULL;
        int n = virConnectListAllDomains(f->conn, &doms, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
        f->inventory_failed = n < 0;
        f->active = n > 0 ? calloc((size_t)n, sizeof(char *)) : NULL;
        for (int i = 0; i < n; i++) {
            const char *name = virDomainGetName(doms[i]);
            if (f->active && name)
                f->active[f->n_active++] = strdup(name);
            virDomainFree(doms[i]);
        }
        free(doms);
        f->inventory_failed = f->inventory_failed || (n > 0 && !f->active);
    }
    char *caps = virConnectGetCapabilities(f->conn);
    virConnectGetVersion(f->conn, &f->hypervisor_version);
    virConnectGetLibVersion(f->conn, &f->libvirt_version);
    struct host_caps found;
    host_caps_parse(caps, &found);
    free(caps);
    memcpy(f->kvm, found.kvm, sizeof(f->kvm));
    f->qemu_uid = found.qemu_uid;
    /* The guest filter, as this hatcheryd writes it, on every QEMU host: a guest on one of
     * its libvirt networks starts only once it is there (guest_isolation.h). */
    if (!h->lxc && !h->simulated) {
        f->filter_tried = true;
        guest_filter_host_addresses(f->conn, h->local_files, &f->filter_host);
        if (guest_filter_ensure(f->conn, true, f->filter_error, sizeof(f->filter_error)) >= 0)
            f->filter_error[0] = '\0';
    }
}

static bool host_runs(const struct host *h, const char *name)
{
    for (size_t i = 0; i < h->n_active; i++)
        if (h->active[i] && strcmp(h->active[i], name) == 0)
            return true;
    return false;
}

static void host_active_free(struct host *h)
{
    for (size_t i = 0; i < h->n_active; i++)
        free(h->active[i]);
    free(h->active);
    h->active = NULL;
    h->n_active = 0;
}

static void guest_stopped(struct guest *g, const char *why);

/* Back after a drop: the guests kept through it go on if their domains still run; the
 * ones that stopped meanwhile are handled as their lost stop events would have been. */
static void host_reinventory(struct host *h)
{
    uv_timer_stop(&h->grace);
    size_t kept = 0, stopped = 0;
    for (struct guest *g = h->guests, *next; g; g = next) {
        next = g->next;
        if (g->busy || g->failed || g->state == GUEST_CREATING || g->state >= GUEST_DELETING)
            continue;
        if (h->inventory_failed) {
            guest_fail(g, "host %s came back, but its domains could not be listed", h->cfg.name);
        } else if (host_runs(h, g->domain)) {
            kept++;
        } else {
            stopped++;
            guest_stopped(g, "while the host was unreachable");
        }
    }
    log_info("host.reinventoried", "host=%s guests_running=%zu guests_stopped=%zu", h->cfg.name,
             kept, stopped);
    host_active_free(h);
    h->inventory_failed = false;
}

static void connect_done(uv_work_t *w, int status)
{
    struct host *h = w->data;
    struct host_found *f = &h->found;
    (void)status;
    if (h->prov->closing) {
        /* Stopping: what the worker found is not taken. */
        for (size_t i = 0; i < f->n_active; i++)
            free(f->active[i]);
        free(f->active);
        if (f->conn)
            virConnectClose(f->conn);
        memset(f, 0, sizeof(*f));
    }
    if (work_done_closing(h->prov))
        return;
    h->connecting = false;
    if (!f->conn) {
        char why[sizeof(h->error)];
        snprintf(why, sizeof(why), "%s", f->error);
        log_warn("host.connect_failed", "host=%s uri=%s error=\"%s\"", h->cfg.name, h->cfg.uri,
                 why);
        h->connecting = true; /* so host_down schedules the retry */
        host_down(h, why);
        h->connecting = false;
        return;
    }
    uv_mutex_lock(&h->lock);
    h->conn = f->conn;
    h->dropped = false;
    memcpy(h->kvm, f->kvm, sizeof(h->kvm));
    h->hypervisor_version = f->hypervisor_version;
    h->libvirt_version = f->libvirt_version;
    h->filter_host = f->filter_host;
    uv_mutex_unlock(&h->lock);
    host_active_free(h);
    h->active = f->active;
    h->n_active = f->n_active;
    h->inventory_failed = f->inventory_failed;
    host_transport(h, f->qemu_uid);
    h->guest_filter = f->filter_tried && !f->filter_error[0];
    snprintf(h->guest_filter_error, sizeof(h->guest_filter_error), "%s",
             f->filter_tried ? f->filter_error : "");
    if (f->filter_tried && h->guest_filter)
        log_info("host.guest_filter", "host=%s filter=%s state=defined", h->cfg.name,
                 GUEST_FILTER_NAME);
    else if (f->filter_tried)
        log_info("host.guest_filter", "host=%s filter=%s state=unavailable error=\"%s\"",
                 h->cfg.name, GUEST_FILTER_NAME, h->guest_filter_error);
    memset(f, 0, sizeof(*f));
    /* Keepalive makes a dead remote host show as a closed connection (not on test:///). */
    virConnectSetKeepAlive(h->conn, 5, 3);
    virConnectRegisterCloseCallback(h->conn, on_close_cb, h, NULL);
    h->lifecycle_id =
        virConnectDomainEventRegisterAny(h->conn, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                         VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), h, NULL);
    if (h->attempt > 0)
        h->reconnects++;
    h->up = true;
    h->attempt = 0;
    h->error[0] = 0;
    /* Which arches libvirt offers KVM for (host_caps.h): the rest run under TCG. */
    char kvm[64] = "";
    for (int a = 0; a < ARCH_MAX; a++)
        if (h->kvm[a])
            snprintf(kvm + strlen(kvm), sizeof(kvm) - strlen(kvm), "%s%s", kvm[0] ? "," : "",
                     pool_arch_names[a]);
    log_info("host.up", "host=%s uri=%s kvm=%s", h->cfg.name, h->cfg.uri, kvm[0] ? kvm : "none");
    for (struct image_check *c = h->images; c; c = c->next)
        c->checked_ms = 0; /* the host may have been rebuilt: looked at again */
    if (h->ever_up)
        host_reinventory(h);
    h->ever_up = true;
}

static void host_connect(struct host *h)
{
    if (h->connecting || h->up)
        return;
    h->connecting = true;
    h->work.data = h;
    if (queue_work(h->prov, &h->work, connect_work, connect_done) < 0)
        h->connecting = false;
}

int provisioner_host_add(struct provisioner *p, const struct config_host *cfg)
{
    if (host_find(p, cfg->name))
        return -EEXIST;
    struct host *h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->prov = p;
    h->cfg = *cfg;
    h->streams = config_host_streams(cfg);
    h->local_files = config_host_is_local(cfg->uri);
    h->lxc = strncmp(cfg->uri, "lxc:", 4) == 0;
    h->simulated = strncmp(cfg->uri, "test:", 5) == 0;
    h->lifecycle_id = -1;
    if (uv_mutex_init(&h->lock) < 0) {
        free(h);
        return -ENOMEM;
    }
    uv_timer_init(p->loop, &h->reconnect);
    uv_timer_init(p->loop, &h->grace);
    h->reconnect.data = h->grace.data = h;
    h->open_handles = 2;
    h->next = p->hosts;
    p->hosts = h;
    host_connect(h);
    return 0;
}

int provisioner_host_update(struct provisioner *p, const struct config_host *cfg)
{
    struct host *h = host_find(p, cfg->name);
    if (!h)
        return provisioner_host_add(p, cfg);
    /* Its connection (uri, transport) and volumes (storage_*) stay as they run. */
    h->cfg.vcpus = cfg->vcpus;
    h->cfg.memory_mib = cfg->memory_mib;
    h->cfg.max_guests = cfg->max_guests;
    h->cfg.down_grace_s = cfg->down_grace_s;
    return 0;
}

bool provisioner_host_up(struct provisioner *p, const char *name)
{
    struct host *h = host_find(p, name);
    return h && h->up;
}

int provisioner_host_usage(struct provisioner *p, const char *name, struct host_usage *ret)
{
    struct host *h = host_find(p, name);
    if (!h)
        return -ENOENT;
    *ret = h->used;
    return 0;
}

int provisioner_host_status(struct provisioner *p, const char *name, struct host_status *ret)
{
    struct host *h = host_find(p, name);
    if (!h)
        return -ENOENT;
    memset(ret, 0, sizeof(*ret));
    ret->up = h->up;
    ret->connecting = h->connecting && !h->error[0];
    for (int a = 0; a < ARCH_MAX; a++)
        ret->kvm = ret->kvm || h->kvm[a];
    ret->reconnects = h->reconnects;
    snprintf(ret->error, sizeof(ret->error), "%s", h->up ? "" : h->error);
    ret->used = h->used;
    ret->streams = h->streams;
    ret->guest_filter = h->up && h->guest_filter;
    snprintf(ret->guest_filter_error, sizeof(ret->guest_filter_error), "%s",
             !h->up                     ? "the host is not connected"
             : h->guest_filter_error[0] ? h->guest_filter_error
                                        : "not defined on this host");
    return 0;
}

/* ---- images on remote hosts ---------------------------------------------------------- */

const char *const image_state_names[IMAGE_MISSING + 1] = {
    [IMAGE_LOCAL] = "local", [IMAGE_UNCHECKED] = "unchecked", [IMAGE_CHECKING] = "checking",
    [IMAGE_READY] = "ready", [IMAGE_MISSING] = "missing",
};

#define IMAGE_RECHECK_MS         60000
#define IMAGE_RECHECK_MISSING_MS 10000

/* One probe, off the loop: the worker writes only here. */
struct image_probe {
    struct host *host;
    struct image_check *check;
    char image[PATH_MAX];
    int arch;
    int r;
    char reason[256];
    struct image_manifest manifest;
    uv_work_t work;
};

static struct image_check *image_check_find(const struct host *h, const struct config_pool *pool)
{
    for (struct image_check *c = h->images; c; c = c->next)
        if (strcmp(c->pool, pool->name) == 0)
            return c;
    return NULL;
}

/* The pool's check on `h`, made when absent and started over when the pool now names
 * another image or arch (a reload). */
static struct image_check *image_check_for(struct host *h, const struct config_pool *pool)
{
    struct image_check *c = image_check_find(h, pool);
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c)
            return NULL;
        snprintf(c->pool, sizeof(c->pool), "%s", pool->name);
        c->next = h->images;
        h->images = c;
    }
    if (strcmp(c->image, pool->image) != 0 || c->arch != pool->arch) {
        snprintf(c->image, sizeof(c->image), "%s", pool->image);
        c->arch = pool->arch;
        c->found = c->ready = false;
        c->checked_ms = 0;
    }
    return c;
}

static void image_probe_work(uv_work_t *w)
{
    struct image_probe *pr = w->data;
    virSetErrorFunc(NULL, quiet_libvirt);
    virConnectPtr conn = host_conn_ref(pr->host, false, NULL);
    if (!conn) {
        pr->r = -ENODEV;
        return;
    }
    pr->r = host_image_probe(conn, pr->image, (enum pool_arch)pr->arch, &pr->manifest, pr->reason,
                             sizeof(pr->reason));
    virConnectClose(conn);
}

static void image_probe_done(uv_work_t *w, int status)
{
    struct image_probe *pr = w->data;
    struct host *h = pr->host;
    struct image_check *c = pr->check;
    (void)status;
    if (work_done_closing(h->prov)) {
        free(pr);
        return;
    }
    c->probing = false;
    /* The connection went away, or the pool was changed meanwhile: due again. */
    if (pr->r == -ENODEV || strcmp(pr->image, c->image) != 0 || pr->arch != c->arch) {
        free(pr);
        return;
    }
    bool was = c->found, was_ready = c->ready;
    c->found = true;
    c->ready = pr->r == 0;
    c->checked_ms = wall_clock_ms();
    if (c->ready) {
        c->manifest = pr->manifest;
        c->reason[0] = 0;
        if (!was || !was_ready)
            log_info("image.found_on_host",
                     "host=%s pool=%s image=%s arch=%s runner=%s agent=%s built=%s", h->cfg.name,
                     c->pool, c->image, c->manifest.arch, c->manifest.runner_version,
                     c->manifest.agent_version, c->manifest.built_at);
    } else if (!was || was_ready || strcmp(c->reason, pr->reason) != 0) {
        snprintf(c->reason, sizeof(c->reason), "%s", pr->reason);
        log_warn("image.missing_on_host", "host=%s pool=%s reason=\"%s\"", h->cfg.name, c->pool,
                 c->reason);
    }
    free(pr);
}

static void image_probe_start(struct host *h, struct image_check *c)
{
    int64_t now = wall_clock_ms();
    int64_t every = c->ready ? IMAGE_RECHECK_MS : IMAGE_RECHECK_MISSING_MS;
    if (c->probing || !h->up || h->prov->closing ||
        (c->checked_ms != 0 && now - c->checked_ms < every))
        return;
    struct image_probe *pr = calloc(1, sizeof(*pr));
    if (!pr)
        return;
    pr->host = h;
    pr->check = c;
    snprintf(pr->image, sizeof(pr->image), "%s", c->image);
    pr->arch = c->arch;
    pr->work.data = pr;
    if (queue_work(h->prov, &pr->work, image_probe_work, image_probe_done) < 0) {
        free(pr);
        return;
    }
    c->probing = true;
}

/* The pool's check on the remote host `h`, with a probe started when one is due. */
static struct image_check *image_look(struct host *h, const struct config_pool *pool)
{
    struct image_check *c = image_check_for(h, pool);
    if (c)
        image_probe_start(h, c);
    return c;
}

/* The ready manifest of `pool`'s image on a remote host `h`, or NULL. */
static const struct image_manifest *remote_manifest(const struct host *h,
                                                    const struct config_pool *pool)
{
    const struct image_check *c = h->local_files ? NULL : image_check_find(h, pool);
    return c && c->found && c->ready && strcmp(c->image, pool->image) == 0 ? &c->manifest : NULL;
}

/* Whether a VM of `pool` may be made on `h` now: its image is local (the scheduler reads
 * it), not ours to see, or found on the remote host. */
static bool image_usable(struct host *h, const struct config_pool *pool)
{
    return h->local_files || h->simulated || pool->backend != BACKEND_VM ||
           remote_manifest(h, pool) != NULL;
}

struct boot_files {
    const char *kernel, *initrd, *cmdline;
};

/* How a guest of `pool` boots on `h`: see struct guest. */
static struct boot_files boot_files_of(const struct host *h, const struct config_pool *pool)
{
    const struct image_manifest *m = remote_manifest(h, pool);
    struct boot_files b = {pool->kernel, pool->initrd, pool->cmdline};
    if (!b.kernel && m && m->kernel[0]) {
        b.kernel = m->kernel;
        if (!b.initrd && m->initrd[0])
            b.initrd = m->initrd;
        if (!b.cmdline && m->cmdline[0])
            b.cmdline = m->cmdline;
    }
    return b;
}

int provisioner_host_image(struct provisioner *p, const char *host_name,
                           const struct config_pool *pool, struct image_status *ret)
{
    struct host *h = host_find(p, host_name);
    if (!h)
        return -ENOENT;
    memset(ret, 0, sizeof(*ret));
    if (h->local_files) {
        ret->state = IMAGE_LOCAL;
        return 0;
    }
    if (h->simulated || pool->backend != BACKEND_VM) {
        ret->state = IMAGE_UNCHECKED;
        return 0;
    }
    struct image_check *c = image_look(h, pool);
    if (!c)
        return -ENOMEM;
    ret->checked_ms = c->found ? c->checked_ms : 0;
    if (!c->found) {
        ret->state = IMAGE_CHECKING;
        snprintf(ret->reason, sizeof(ret->reason), "looking for the image on the host");
    } else if (c->ready) {
        ret->state = IMAGE_READY;
        ret->manifest = c->manifest;
    } else {
        ret->state = IMAGE_MISSING;
        snprintf(ret->reason, sizeof(ret->reason), "%s", c->reason);
    }
    return 0;
}

int provisioner_new(uv_loop_t *loop, const struct provisioner_options *o, struct provisioner **ret)
{
    virInitialize();
    virSetErrorFunc(NULL, quiet_libvirt);
    struct provisioner *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->provider.ops = &libvirt_provider_ops;
    p->loop = loop;
    p->controller_id = strdup(o->controller_id);
    p->state_dir = strdup(o->state_dir);
    p->boot_timeout_ms = o->boot_timeout_ms;
    p->adopt_grace_ms = o->adopt_grace_ms > 0 ? o->adopt_grace_ms : 60000;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/channels", o->state_dir);
    mkdir(path, 0700);
    snprintf(path, sizeof(path), "%s/logs", o->state_dir);
    mkdir(path, 0750);
    *ret = p;
    return 0;
}

static void on_host_closed(uv_handle_t *handle)
{
    struct host *h = handle->data;
    if (--h->open_handles == 0) {
        host_active_free(h);
        while (h->slots) {
            struct template_slot *next = h->slots->next;
            free(h->slots);
            h->slots = next;
        }
        while (h->images) {
            struct image_check *next = h->images->next;
            free(h->images);
            h->images = next;
        }
        uv_mutex_destroy(&h->lock);
        free(h);
    }
}

/* A guest's own memory, once nothing refers to it. */
static void guest_release(struct guest *g)
{
    free(g->xml);
    free(g->kernel);
    free(g->initrd);
    free(g->cmdline);
    free(g->name);
    free(g);
}

static void on_guest_handle_closed(uv_handle_t *handle)
{
    guest_release(handle->data);
}

/* Everything is idle: close the connections and free. Guests stay as domains for the
 * reconciler of the next start. */
static void finalize(struct provisioner *p)
{
    for (struct host *h = p->hosts; h;) {
        struct host *next = h->next;
        for (struct guest *g = h->guests; g;) {
            struct guest *gn = g->next;
            if (g->channel)
                agent_channel_close(g->channel);
            if (g->pipe)
                uv_close((uv_handle_t *)g->pipe, on_pipe_closed);
            stream_bridge_close(g->channel_bridge);
            stream_bridge_close(g->console_bridge);
            uv_close((uv_handle_t *)&g->timer, on_guest_handle_closed);
            g = gn;
        }
        host_conn_drop(h);
        uv_close((uv_handle_t *)&h->reconnect, on_host_closed);
        uv_close((uv_handle_t *)&h->grace, on_host_closed);
        h = next;
    }
    free(p->controller_id);
    free(p->state_dir);
    free(p);
}

void provisioner_free(struct provisioner *p)
{
    if (!p || p->closing)
        return;
    p->closing = true;
    for (struct host *h = p->hosts; h; h = h->next) {
        uv_timer_stop(&h->reconnect);
        uv_timer_stop(&h->grace);
    }
    if (p->works == 0)
        finalize(p);
}

/* ---- guests: creation ------------------------------------------------------------------ */

/* The host's storage pool for overlays, made as a transient directory pool when absent. */
static virStoragePoolPtr storage_pool(struct host *h, virConnectPtr conn, char *err,
                                      size_t err_size)
{
    virStoragePoolPtr pool = virStoragePoolLookupByName(conn, h->cfg.storage_pool);
    if (!pool) {
        char *xml = domain_xml_dir_pool(h->cfg.storage_pool, h->cfg.storage_dir, "0711");
        /* QEMU (libvirt-qemu on a stock host) must pass through to its overlay; libvirt
         * builds a missing directory 0711 itself, one made here must not take the umask. */
        if (h->local_files && mkdir(h->cfg.storage_dir, 0711) == 0)
            chmod(h->cfg.storage_dir, 0711);
        pool = xml ? virStoragePoolCreateXML(conn, xml, VIR_STORAGE_POOL_CREATE_WITH_BUILD) : NULL;
        if (!pool && xml) /* drivers without build support (test:///) */
            pool = virStoragePoolCreateXML(conn, xml, 0);
        free(xml);
        if (!pool) /* another worker made it first */
            pool = virStoragePoolLookupByName(conn, h->cfg.storage_pool);
    } else if (virStoragePoolIsActive(pool) == 0) {
        virStoragePoolCreate(pool, 0);
    }
    if (!pool)
        snprintf(err, err_size, "storage pool %s: %s", h->cfg.storage_pool, libvirt_error());
    return pool;
}

static void create_on(struct guest *g, virConnectPtr conn, const bool kvm[ARCH_MAX])
{
    struct host *h = g->host;
    const struct config_pool *pool = g->pool;
    bool lxc = pool->backend == BACKEND_CONTAINER;
    char err[256] = "";
    uv_mutex_lock(&h->lock);
    struct guest_filter_host filter_host = h->filter_host;
    uv_mutex_unlock(&h->lock);
    const char *host_ips[GUEST_FILTER_MAX_HOST_IPS];
    for (size_t i = 0; i < filter_host.n; i++)
        host_ips[i] = filter_host.ips[i];
    struct domain_spec spec = {
        .name = g->name,
        .controller_id = g->prov->controller_id,
        .runner_id = g->runner_id,
        .template_key = g->template ? g->template_key : NULL,
        .pool = pool->name,
        .arch = (enum pool_arch)pool->arch,
        .backend = (enum pool_backend)pool->backend,
        .kvm = kvm[pool->arch],
        .vcpus = pool->vcpus,
        .memory_mib = pool->memory_mib,
        .storage_pool = h->cfg.storage_pool,
        .volume = g->volume,
        .kernel = g->kernel,
        .initrd = g->initrd,
        .cmdline = g->cmdline,
        .vof = pool->firmware == FIRMWARE_VOF,
        .network = pool->network,
        .network_filter = guest_isolation_filtered(&h->cfg, pool) ? GUEST_FILTER_NAME : NULL,
        .filter_host_ips = host_ips,
        .n_filter_host_ips = filter_host.n,
        .channel_path = g->channel_path,
        .console_log = g->console_log,
        .root_dir = pool->image,
        .channel_dir = g->channel_dir,
        .init = "/usr/bin/hatchery-agent",
        .streams = h->streams,
    };
    if (!lxc) {
        virStoragePoolPtr sp = storage_pool(h, conn, err, sizeof(err));
        if (!sp) {
            snprintf(g->error, sizeof(g->error), "%s", err);
            return;
        }
        char *vxml = domain_xml_overlay_volume(g->volume, pool->image, pool->disk_mib);
        virStorageVolPtr vol = vxml ? virStorageVolCreateXML(sp, vxml, 0) : NULL;
        free(vxml);
        virStoragePoolFree(sp);
        if (!vol) {
            snprintf(g->error, sizeof(g->error), "overlay volume on %s: %s", pool->image,
                     libvirt_error());
            return;
        }
        virStorageVolFree(vol);
    }
    g->xml = domain_xml_build(&spec, err, sizeof(err));
    if (!g->xml) {
        snprintf(g->error, sizeof(g->error), "domain XML: %s", err);
        return;
    }
    /* Put back if it went since the connection was made (libvirt would refuse the domain
     * anyway: this says why, and heals an undefine). */
    if (spec.network_filter) {
        int r = guest_filter_ensure(conn, false, err, sizeof(err));
        if (r < 0) {
            snprintf(g->error, sizeof(g->error), "%s", err);
            return;
        }
        g->filter_restored = r > 0;
    }
    virDomainPtr dom = virDomainCreateXML(conn, g->xml, 0);
    if (!dom) {
        snprintf(g->error, sizeof(g->error), "domain: %s", libvirt_error());
        return;
    }
    virDomainFree(dom);
}

/* -- templates: a guest saved while its agent waits, restored for each runner -- */

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

/* The XML a runner's guest is restored with: the saved domain's (its name and UUID stay
 * the template's: libvirt 9.0 refuses others on a restore), with the runner's own overlay
 * volume, channel socket, console log and metadata. The disk's backing chain is left for
 * libvirt to read from the new overlay (runner → template → image), not taken from the
 * template's. */
static char *restore_xml(const struct guest *g, const char *saved, char *err, size_t err_size)
{
    xmlDocPtr doc = xmlReadMemory(saved, (int)strlen(saved), "saved.xml", NULL, XML_PARSE_NONET);
    xmlXPathContextPtr ctx = doc ? xmlXPathNewContext(doc) : NULL;
    char *out = NULL;
    if (!ctx || xmlXPathRegisterNs(ctx, BAD_CAST "h", BAD_CAST DOMAIN_METADATA_NS) != 0) {
        snprintf(err, err_size, "the saved domain XML does not parse");
        goto done;
    }
    if (xml_set_attr(ctx, "/domain/devices/disk[@device='disk']/source", "volume", g->volume) !=
        1) {
        snprintf(err, err_size, "the saved domain has not one overlay volume");
        goto done;
    }
    xml_remove(ctx, "/domain/metadata/h:runner/h:template-key");
    xml_remove(ctx, "/domain/devices/disk[@device='disk']/backingStore");
    xml_remove(ctx, "/domain/devices/disk[@device='disk']/source/@index");
    if (!g->host->streams) {
        xml_set_attr(ctx, "/domain/devices/channel[@type='unix']/source", "path", g->channel_path);
        xml_set_attr(ctx, "/domain/devices/console[@type='file']/source", "path", g->console_log);
        xml_set_attr(ctx, "/domain/devices/serial[@type='file']/source", "path", g->console_log);
    }
    xmlXPathObjectPtr o = xmlXPathEvalExpression(BAD_CAST "/domain/metadata/h:runner", ctx);
    xmlNodePtr runner =
        o && o->nodesetval && o->nodesetval->nodeNr == 1 ? o->nodesetval->nodeTab[0] : NULL;
    xmlXPathFreeObject(o);
    if (!runner) {
        snprintf(err, err_size, "the saved domain has no runner metadata");
        goto done;
    }
    char id[32];
    snprintf(id, sizeof(id), "%lld", (long long)g->runner_id);
    for (xmlNodePtr c = runner->children; c; c = c->next)
        if (c->type == XML_ELEMENT_NODE && xmlStrcmp(c->name, BAD_CAST "runner-id") == 0)
            xmlNodeSetContent(c, BAD_CAST id);
    xmlNewTextChild(runner, runner->ns, BAD_CAST "runner-name", BAD_CAST g->name);
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

/* A runner's guest from a template, on a worker: its overlay on the template's disk, then
 * the restore of the template's memory into it. */
static int capacity_for(const struct host *h, const struct config_pool *pool);
static virStoragePoolPtr storage_pool_lookup(struct host *h, virConnectPtr conn);

static void restore_on(struct guest *g, virConnectPtr conn)
{
    struct host *h = g->host;
    char err[256] = "";
    virStoragePoolPtr sp = storage_pool(h, conn, err, sizeof(err));
    if (!sp) {
        snprintf(g->error, sizeof(g->error), "%s", err);
        return;
    }
    char template_volume[300];
    snprintf(template_volume, sizeof(template_volume), "%s.qcow2", g->domain);
    virStorageVolPtr tv = virStorageVolLookupByName(sp, template_volume);
    char *backing = tv ? virStorageVolGetPath(tv) : NULL;
    if (tv)
        virStorageVolFree(tv);
    char *vxml = backing ? domain_xml_overlay_volume(g->volume, backing, g->pool->disk_mib) : NULL;
    virStorageVolPtr vol = vxml ? virStorageVolCreateXML(sp, vxml, 0) : NULL;
    free(vxml);
    virStoragePoolFree(sp);
    if (!vol) {
        snprintf(g->error, sizeof(g->error), "overlay volume on template %s: %s", g->domain,
                 backing ? libvirt_error() : "the template's volume is gone");
        free(backing);
        return;
    }
    free(backing);
    virStorageVolFree(vol);
    char *saved =
        virDomainSaveImageGetXMLDesc(conn, g->save_file, VIR_DOMAIN_SAVE_IMAGE_XML_SECURE);
    if (!saved) {
        snprintf(g->error, sizeof(g->error), "template %.100s: %.300s", g->domain, libvirt_error());
        return;
    }
    g->xml = restore_xml(g, saved, err, sizeof(err));
    free(saved);
    if (!g->xml) {
        snprintf(g->error, sizeof(g->error), "template %.100s: %.300s", g->domain, err);
        return;
    }
    if (virDomainRestoreFlags(conn, g->save_file, g->xml, 0) < 0)
        snprintf(g->error, sizeof(g->error), "restore from template %.100s: %.300s", g->domain,
                 libvirt_error());
}

static void create_work(uv_work_t *w)
{
    struct guest *g = w->data;
    virSetErrorFunc(NULL, quiet_libvirt);
    bool kvm[ARCH_MAX];
    virConnectPtr conn = host_conn_ref(g->host, false, kvm);
    if (!conn) {
        snprintf(g->error, sizeof(g->error), "host %s is not connected", g->host->cfg.name);
        return;
    }
    if (g->restore) {
        restore_on(g, conn);
        if (g->error[0] && g->slot) {
            /* The template did not restore (corrupt, gone, another QEMU's): this runner
             * boots cold, under its own name, and the template is rebuilt. */
            snprintf(g->fallback, sizeof(g->fallback), "%.290s", g->error);
            g->error[0] = 0;
            virStoragePoolPtr sp = storage_pool_lookup(g->host, conn);
            virStorageVolPtr vol = sp ? virStorageVolLookupByName(sp, g->volume) : NULL;
            if (vol) {
                virStorageVolDelete(vol, 0);
                virStorageVolFree(vol);
            }
            if (sp)
                virStoragePoolFree(sp);
            free(g->xml);
            g->xml = NULL;
            g->restore = false;
            snprintf(g->domain, sizeof(g->domain), "%s", g->name);
            create_on(g, conn, kvm);
        }
    } else {
        create_on(g, conn, kvm);
    }
    virConnectClose(conn);
}

static void guest_free(struct guest *g)
{
    for (struct guest **pp = &g->host->guests; *pp; pp = &(*pp)->next) {
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    }
    guest_release(g);
}

static void on_guest_timer_closed(uv_handle_t *handle)
{
    guest_free(handle->data);
}

static void guest_gone(struct guest *g)
{
    struct host *h = g->host;
    g->state = GUEST_GONE;
    h->used.vcpus -= g->pool->vcpus;
    h->used.memory_mib -= g->pool->memory_mib;
    h->used.guests--;
    log_info("guest.gone", "guest=%s host=%s", g->name, h->cfg.name);
    if (g->events->on_gone)
        g->events->on_gone(g->data, g);
    uv_close((uv_handle_t *)&g->timer, on_guest_timer_closed);
}

static void guest_fail(struct guest *g, const char *fmt, ...)
{
    if (g->failed || g->state >= GUEST_DELETING || g->prov->closing)
        return;
    g->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof(g->error), fmt, ap);
    va_end(ap);
    memcpy(g->why_failed, g->error, sizeof(g->why_failed));
    log_warn("guest.failed", "guest=%s host=%s state=%s reason=\"%s\"", g->name, g->host->cfg.name,
             guest_state_names[g->state], g->error);
    /* A clone that failed before its hello: the template's fault until shown otherwise. */
    if (g->slot && g->restore && g->state == GUEST_BOOTING)
        slot_restore_failed(g->slot, g->error);
    if (g->events->on_failed)
        g->events->on_failed(g->data, g, g->error);
    teardown_start(g);
}

/* -- the agent channel -- */

/* Another live guest with the same machine-id or RNG nonce: the two share one boot's state
 * (a copied disk, a restored memory image), and with it their randomness, so the newer one
 * must get no runner's config. NULL when there is none. Containers share their host's
 * kernel and may share one root (and its /etc/machine-id): only their nonces count. */
/* An identity worth comparing: 32 hex digits, as a machine-id and the agent's nonce are. A
 * guest without /etc/machine-id says "unknown" (the test guests do), which every such
 * guest shares without being anyone's clone. */
static bool is_identity(const char *id)
{
    size_t n = 0;
    for (; id[n]; n++)
        if (!((id[n] >= '0' && id[n] <= '9') || (id[n] >= 'a' && id[n] <= 'f')))
            return false;
    return n == 32;
}

static const struct guest *clone_of(const struct guest *g, const struct agent_hello *hello)
{
    bool vm = g->pool->backend == BACKEND_VM;
    bool has_machine = is_identity(hello->machine_id), has_nonce = is_identity(hello->nonce);
    for (const struct host *h = g->prov->hosts; h; h = h->next)
        for (const struct guest *o = h->guests; o; o = o->next) {
            if (o == g || o->state >= GUEST_DELETING)
                continue;
            bool same_machine = vm && has_machine && o->pool->backend == BACKEND_VM &&
                                strcmp(o->machine_id, hello->machine_id) == 0;
            if (same_machine || (has_nonce && strcmp(o->nonce, hello->nonce) == 0))
                return o;
        }
    return NULL;
}

static void ch_hello(void *data, const struct agent_hello *hello)
{
    struct guest *g = data;
    if (g->prov->closing)
        return;
    const struct guest *twin = clone_of(g, hello);
    if (twin) {
        bool same_machine = !(is_identity(hello->nonce) && strcmp(twin->nonce, hello->nonce) == 0);
        guest_fail(g, "a clone of live guest %s: the same %s (%s); it gets no runner's config",
                   twin->name, same_machine ? "machine-id" : "RNG nonce",
                   same_machine ? hello->machine_id : hello->nonce);
        return;
    }
    snprintf(g->machine_id, sizeof(g->machine_id), "%s", hello->machine_id);
    snprintf(g->nonce, sizeof(g->nonce), "%s", hello->nonce);
    if (g->slot && hello->restored)
        g->slot->failures = 0;
    uv_timer_stop(&g->timer);
    g->state = GUEST_READY;
    log_info("guest.hello",
             "guest=%s arch=%s agent=%s boot_id=%s machine_id=%s nonce=%s crng_ready=%d", g->name,
             hello->arch, hello->version, hello->boot_id, hello->machine_id,
             hello->nonce[0] ? hello->nonce : "-", hello->crng_ready);
    if (g->events->on_hello)
        g->events->on_hello(g->data, g, hello);
}

static void ch_started(void *data, int64_t pid)
{
    struct guest *g = data;
    if (g->prov->closing)
        return;
    g->state = GUEST_RUNNING;
    log_info("guest.runner_started", "guest=%s pid=%lld", g->name, (long long)pid);
    if (g->events->on_started)
        g->events->on_started(g->data, g, pid);
}

static void ch_heartbeat(void *data)
{
    struct guest *g = data;
    if (g->prov->closing)
        return;
    if (g->events->on_heartbeat)
        g->events->on_heartbeat(g->data, g);
}

static void ch_resumed(void *data, const struct agent_resumed *resumed)
{
    static const char *const names[] = {"waiting", "running", "exited"};
    struct guest *g = data;
    if (g->prov->closing)
        return;
    uv_timer_stop(&g->timer);
    g->adopting = false;
    g->state = resumed->state == AGENT_RESUMED_WAITING ? GUEST_READY : GUEST_RUNNING;
    log_info("guest.resumed", "guest=%s agent_state=%s pid=%lld boot_id=%s", g->name,
             names[resumed->state], (long long)resumed->pid, resumed->boot_id);
    if (strcmp(resumed->runner_name, g->name) != 0 && resumed->runner_name[0]) {
        guest_fail(g, "the agent runs runner %s, not %s", resumed->runner_name, g->name);
        return;
    }
    if (g->events->on_resumed)
        g->events->on_resumed(g->data, g, resumed);
}

/* The job's report goes to the runner's log (`hatchery logs`), marked as the job's words:
 * it is untrusted, so it never reaches hatcheryd's own log or the store. */
static void append_report(struct guest *g, const json_t *report)
{
    char *text = json_dumps(report, JSON_COMPACT | JSON_ENSURE_ASCII);
    FILE *f = text ? fopen(g->console_log, "ae") : NULL;
    if (f) {
        fprintf(f, "\nhatchery: job report: %s\n", text);
        fclose(f);
        log_info("guest.report", "guest=%s bytes=%zu", g->name, strlen(text));
    }
    free(text);
}

static void ch_exited(void *data, const struct agent_exit *exit)
{
    struct guest *g = data;
    if (g->prov->closing)
        return;
    g->state = GUEST_EXITED;
    log_info("guest.runner_exited",
             "guest=%s code=%d signal=%d duration_s=%.1f timed_out=%d relaunches=%d "
             "jit_on_argv=%d argv_scans=%d meaning=\"%s\"",
             g->name, exit->code, exit->signal, exit->duration_s, exit->timed_out, exit->relaunches,
             exit->jit_on_argv, exit->argv_scans, exit->meaning);
    if (exit->jit_on_argv)
        log_error("guest.jit_on_argv", "guest=%s the agent found the JIT config on a command line",
                  g->name);
    if (exit->report)
        append_report(g, exit->report);
    if (g->events->on_exited)
        g->events->on_exited(g->data, g, exit);
}

static void ch_error(void *data, const char *reason)
{
    struct guest *g = data;
    if (g->prov->closing)
        return;
    g->channel = NULL; /* the channel closed itself */
    if (g->state == GUEST_EXITED || g->state >= GUEST_DELETING || g->saving)
        return; /* the guest powered off after reporting, or was saved: expected */
    guest_fail(g, "agent channel: %s", reason);
}

static const struct agent_channel_events channel_events = {
    .on_hello = ch_hello,
    .on_started = ch_started,
    .on_heartbeat = ch_heartbeat,
    .on_exited = ch_exited,
    .on_resumed = ch_resumed,
    .on_error = ch_error,
};

static void on_adopt_timeout(uv_timer_t *t)
{
    struct guest *g = t->data;
    if (g->adopting)
        guest_fail(g,
                   "its agent did not answer resume within %lld s (an agent older than "
                   "protocol version 2 cannot resume)",
                   (long long)(g->prov->adopt_grace_ms / 1000));
}

/* Opens the agent conversation on a connected stream: hello first for a new guest,
 * resume for an adopted one. */
static int channel_start(struct guest *g, uv_stream_t *stream)
{
    if (g->restore) {
        /* The host's entropy for the clone's CRNG, as fresh as it can be. */
        unsigned char seed[AGENT_RESTORE_SEED_BYTES];
        if (RAND_bytes(seed, sizeof(seed)) != 1)
            return -EIO;
        int r =
            agent_channel_restore(stream, &channel_events, g, seed, wall_clock_ms(), &g->channel);
        OPENSSL_cleanse(seed, sizeof(seed));
        return r;
    }
    if (!g->adopting)
        return agent_channel_open(stream, &channel_events, g, &g->channel);
    uv_timer_start(&g->timer, on_adopt_timeout, (uint64_t)g->prov->adopt_grace_ms, 0);
    return agent_channel_resume(stream, &channel_events, g, &g->channel);
}

static void on_boot_timeout(uv_timer_t *t)
{
    struct guest *g = t->data;
    if (g->state == GUEST_BOOTING && g->restore)
        guest_fail(g,
                   "no hello from the restored agent within %d s (a guest whose timers do not "
                   "survive a restore, as pseries under TCG before QEMU 8.2)",
                   RESTORE_HELLO_TIMEOUT_MS / 1000);
    else if (g->state == GUEST_BOOTING)
        guest_fail(g, "no hello from the agent within %lld s", (long long)g->pool->boot_timeout_s);
}

/* How long a guest has to say hello: a restored one is up at once. */
static uint64_t hello_timeout_ms(const struct guest *g)
{
    uint64_t boot_ms = (uint64_t)g->pool->boot_timeout_s * 1000;
    return g->restore && boot_ms > RESTORE_HELLO_TIMEOUT_MS ? RESTORE_HELLO_TIMEOUT_MS : boot_ms;
}

static void channel_connect(struct guest *g);

static void on_retry_connect(uv_timer_t *t)
{
    struct guest *g = t->data;
    if (!g->adopting)
        uv_timer_start(&g->timer, on_boot_timeout, hello_timeout_ms(g), 0);
    channel_connect(g);
}

static void on_pipe_closed(uv_handle_t *handle)
{
    free(handle);
}

static void on_channel_connected(uv_connect_t *req, int status)
{
    struct guest *g = req->data;
    uv_pipe_t *pipe = (uv_pipe_t *)req->handle;
    free(req);
    if (g->state >= GUEST_DELETING || g->failed) {
        uv_close((uv_handle_t *)pipe, on_pipe_closed);
        return;
    }
    g->pipe = NULL;
    if (status < 0) {
        uv_close((uv_handle_t *)pipe, on_pipe_closed);
        if (++g->connect_tries >= CHANNEL_CONNECT_TRIES) {
            guest_fail(g, "cannot connect to the agent channel: %s", uv_strerror(status));
            return;
        }
        uv_timer_start(&g->timer, on_retry_connect, 100, 0);
        return;
    }
    if (channel_start(g, (uv_stream_t *)pipe) < 0) {
        uv_close((uv_handle_t *)pipe, on_pipe_closed);
        guest_fail(g, "cannot read the agent channel");
    }
}

static void channel_connect(struct guest *g)
{
    uv_pipe_t *pipe = malloc(sizeof(*pipe));
    uv_connect_t *req = malloc(sizeof(*req));
    if (!pipe || !req) {
        free(pipe);
        free(req);
        guest_fail(g, "out of memory");
        return;
    }
    uv_pipe_init(g->prov->loop, pipe, 0);
    req->data = g;
    g->pipe = pipe;
    uv_pipe_connect(req, pipe, g->channel_path, on_channel_connected);
}

/* Containers: the agent connects to us through the bind-mounted directory. */
static void on_container_connection(uv_stream_t *server, int status)
{
    struct guest *g = server->data;
    if (status < 0 || g->channel || g->state >= GUEST_DELETING)
        return;
    uv_pipe_t *client = malloc(sizeof(*client));
    if (!client)
        return;
    uv_pipe_init(g->prov->loop, client, 0);
    if (uv_accept(server, (uv_stream_t *)client) < 0 ||
        channel_start(g, (uv_stream_t *)client) < 0) {
        uv_close((uv_handle_t *)client, on_pipe_closed);
        return;
    }
    /* One agent per container: stop listening. */
    uv_close((uv_handle_t *)g->pipe, on_pipe_closed);
    g->pipe = NULL;
}

static int container_listen(struct guest *g)
{
    mkdir(g->channel_dir, 0700);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/agent.sock", g->channel_dir);
    unlink(path);
    uv_pipe_t *pipe = malloc(sizeof(*pipe));
    if (!pipe)
        return -ENOMEM;
    uv_pipe_init(g->prov->loop, pipe, 0);
    pipe->data = g;
    int r = uv_pipe_bind(pipe, path);
    if (r == 0)
        r = uv_listen((uv_stream_t *)pipe, 1, on_container_connection);
    if (r < 0) {
        uv_close((uv_handle_t *)pipe, on_pipe_closed);
        return r;
    }
    g->pipe = pipe;
    return 0;
}

/* -- a remote host: the channel and the console through libvirt streams -- */

static void stream_drop(virStreamPtr *stream)
{
    if (*stream) {
        virStreamAbort(*stream);
        virStreamFree(*stream);
        *stream = NULL;
    }
}

/* Streams a worker opened that no bridge took over (a teardown came first). */
static void streams_release(struct guest *g)
{
    stream_drop(&g->opened_channel);
    stream_drop(&g->opened_console);
}

static void streams_on(struct guest *g, virConnectPtr conn)
{
    virDomainPtr dom = conn ? virDomainLookupByName(conn, g->domain) : NULL;
    if (!dom) {
        snprintf(g->error, sizeof(g->error), "the domain is gone: %s", libvirt_error());
        return;
    }
    /* The console first: it carries the boot, and losing it costs only the log. */
    virStreamPtr console = virStreamNew(conn, VIR_STREAM_NONBLOCK);
    if (console && virDomainOpenConsole(dom, NULL, console, VIR_DOMAIN_CONSOLE_FORCE) == 0) {
        g->opened_console = console;
    } else if (console) {
        virStreamFree(console);
    }
    virStreamPtr channel = virStreamNew(conn, VIR_STREAM_NONBLOCK);
    /* An adopted guest's channel may still be held for the hatcheryd that died. */
    unsigned int flags = g->adopting ? VIR_DOMAIN_CHANNEL_FORCE : 0;
    if (channel && virDomainOpenChannel(dom, AGENT_CHANNEL_NAME, channel, flags) == 0) {
        g->opened_channel = channel;
    } else {
        snprintf(g->error, sizeof(g->error), "cannot open the agent channel through libvirt: %s",
                 libvirt_error());
        if (channel)
            virStreamFree(channel);
    }
    virDomainFree(dom);
}

static void streams_work(uv_work_t *w)
{
    struct guest *g = w->data;
    virSetErrorFunc(NULL, quiet_libvirt);
    g->error[0] = 0;
    virConnectPtr conn = host_conn_ref(g->host, false, NULL);
    streams_on(g, conn);
    if (conn)
        virConnectClose(conn);
}

static void streams_done(uv_work_t *w, int status)
{
    struct guest *g = w->data;
    (void)status;
    if (work_done_closing(g->prov)) {
        streams_release(g);
        return;
    }
    g->busy = false;
    if (g->teardown_queued || g->state >= GUEST_DELETING || g->failed) {
        streams_release(g);
        if (g->teardown_queued)
            teardown_start(g);
        return;
    }
    if (g->opened_console) {
        if (stream_bridge_log(g->prov->loop, g->opened_console, g->console_log, CONSOLE_MAX_BYTES,
                              &g->console_bridge) == 0)
            g->opened_console = NULL;
        else
            log_warn("guest.console_lost", "guest=%s reason=\"cannot write\" path=%s", g->name,
                     g->console_log);
    } else {
        log_warn("guest.console_lost", "guest=%s reason=\"no console stream\"", g->name);
    }
    if (!g->opened_channel) {
        char reason[sizeof(g->error)];
        snprintf(reason, sizeof(reason), "%s", g->error);
        streams_release(g);
        guest_fail(g, "%s", reason);
        return;
    }
    int fd = -1;
    uv_pipe_t *pipe = malloc(sizeof(*pipe));
    int r = pipe ? stream_bridge_channel(g->prov->loop, g->opened_channel, &fd, &g->channel_bridge)
                 : -ENOMEM;
    if (r == 0)
        g->opened_channel = NULL;
    if (r == 0) {
        uv_pipe_init(g->prov->loop, pipe, 0);
        r = uv_pipe_open(pipe, fd);
        if (r < 0)
            close(fd);
        if (r == 0 && channel_start(g, (uv_stream_t *)pipe) < 0)
            r = -EIO;
        if (r < 0)
            uv_close((uv_handle_t *)pipe, on_pipe_closed);
    } else {
        free(pipe);
    }
    streams_release(g);
    if (r < 0)
        guest_fail(g, "cannot bridge the agent channel: %s", strerror(-r));
}

/* Hands the guest's next libvirt calls to a worker; the guest fails when none can take
 * them. `what` names the work in that failure. */
static void guest_work_start(struct guest *g, uv_work_cb work, uv_after_work_cb done,
                             const char *what)
{
    g->busy = true;
    g->work.data = g;
    if (queue_work(g->prov, &g->work, work, done) < 0) {
        g->busy = false;
        guest_fail(g, "cannot queue %s", what);
    }
}

static void streams_open(struct guest *g)
{
    guest_work_start(g, streams_work, streams_done, "the opening of the agent channel");
}

static void create_done(uv_work_t *w, int status)
{
    struct guest *g = w->data;
    (void)status;
    if (work_done_closing(g->prov))
        return;
    g->busy = false;
    if (g->error[0]) {
        char reason[sizeof(g->error)];
        snprintf(reason, sizeof(reason), "%s", g->error);
        guest_fail(g, "create: %s", reason);
        return;
    }
    if (g->teardown_queued) {
        teardown_start(g);
        return;
    }
    if (g->filter_restored)
        log_warn("host.guest_filter_restored", "host=%s filter=%s guest=%s", g->host->cfg.name,
                 GUEST_FILTER_NAME, g->name);
    log_info("guest.created", "guest=%s host=%s pool=%s", g->name, g->host->cfg.name,
             g->pool->name);
    if (g->slot && g->fallback[0]) {
        g->slot->fallbacks++;
        log_warn("template.fallback", "guest=%s template=%s reason=\"%s\" action=\"booted cold\"",
                 g->name, g->slot->name, g->fallback);
        slot_broken(g->slot, g->fallback);
        g->slot = NULL;
    } else if (g->slot) {
        g->slot->restores++;
        log_info("template.restored", "guest=%s template=%s", g->name, g->slot->name);
    }
    /* A container's agent can connect, say hello and even finish before this callback
     * runs: only a guest not heard from yet is booting. */
    if (g->state != GUEST_CREATING) {
        if (g->domain_stopped && g->state == GUEST_EXITED)
            guest_teardown(g, "the guest powered off after the job");
        else if (g->domain_stopped)
            guest_fail(g, "the guest stopped before its runner reported an exit");
        return;
    }
    g->state = GUEST_BOOTING;
    if (g->events->on_booting)
        g->events->on_booting(g->data, g);
    if (g->state != GUEST_BOOTING || g->failed)
        return;
    uv_timer_start(&g->timer, on_boot_timeout, hello_timeout_ms(g), 0);
    /* The test driver runs nothing, so no agent will ever answer: such a guest waits
     * for its boot timeout like a silent one, without knocking on a socket that no
     * QEMU will create. */
    if (g->pool->backend == BACKEND_VM && !g->host->simulated) {
        if (g->host->streams)
            streams_open(g);
        else
            channel_connect(g);
    }
}

static struct guest *guest_new(struct provisioner *p, struct host *h, const struct guest_spec *spec,
                               const struct guest_events *events, void *data)
{
    struct guest *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->prov = p;
    g->host = h;
    g->name = strdup(spec->name);
    struct boot_files b = spec->pool ? boot_files_of(h, spec->pool) : (struct boot_files){0};
    g->kernel = b.kernel ? strdup(b.kernel) : NULL;
    g->initrd = b.initrd ? strdup(b.initrd) : NULL;
    g->cmdline = b.cmdline ? strdup(b.cmdline) : NULL;
    if (!g->name || (b.kernel && !g->kernel) || (b.initrd && !g->initrd) ||
        (b.cmdline && !g->cmdline)) {
        guest_release(g);
        return NULL;
    }
    snprintf(g->domain, sizeof(g->domain), "%s", spec->name);
    g->runner_id = spec->runner_id;
    g->pool = spec->pool;
    g->events = events;
    g->data = data;
    g->state = GUEST_CREATING;
    snprintf(g->volume, sizeof(g->volume), "%s.qcow2", spec->name);
    snprintf(g->channel_path, sizeof(g->channel_path), "%s/channels/%s.sock", p->state_dir,
             spec->name);
    snprintf(g->channel_dir, sizeof(g->channel_dir), "%s/channels/%s", p->state_dir, spec->name);
    snprintf(g->console_log, sizeof(g->console_log), "%s/logs/%s.console.log", p->state_dir,
             spec->name);
    uv_timer_init(p->loop, &g->timer);
    g->timer.data = g;
    return g;
}

/* The guest counts against its host from here on. */
static void guest_attach(struct guest *g)
{
    struct host *h = g->host;
    h->used.vcpus += g->pool->vcpus;
    h->used.memory_mib += g->pool->memory_mib;
    h->used.guests++;
    g->next = h->guests;
    h->guests = g;
}

int provisioner_guest_create(struct provisioner *p, const char *host_name,
                             const struct guest_spec *spec, const struct guest_events *events,
                             void *data, struct guest **ret_guest)
{
    struct host *h = host_find(p, host_name);
    if (!h || !spec->name || !spec->pool)
        return -EINVAL;
    if (!h->up)
        return -ENODEV;
    const struct config_pool *pool = spec->pool;
    if (!image_usable(h, pool))
        return -ENOENT;
    int r = capacity_for(h, pool);
    if (r < 0)
        return r;
    struct guest *g = guest_new(p, h, spec, events, data);
    if (!g)
        return -ENOMEM;
    struct template_slot *slot =
        pool->start == START_TEMPLATE && pool->backend == BACKEND_VM ? slot_for(h, pool) : NULL;
    if (slot) {
        g->restore = true;
        g->slot = slot;
        snprintf(g->domain, sizeof(g->domain), "%s", slot->name);
        save_file_of(h, slot->name, g->save_file, sizeof(g->save_file));
    }
    if (pool->backend == BACKEND_CONTAINER) {
        r = container_listen(g);
        if (r < 0) {
            uv_close((uv_handle_t *)&g->timer, on_guest_timer_closed);
            return r;
        }
    }
    guest_attach(g);
    guest_work_start(g, create_work, create_done, "the creation");
    *ret_guest = g;
    return 0;
}

/* -- adoption: a guest an earlier hatcheryd created -- */

static void adopt_work(uv_work_t *w)
{
    struct guest *g = w->data;
    virSetErrorFunc(NULL, quiet_libvirt);
    g->error[0] = 0;
    virConnectPtr conn = host_conn_ref(g->host, false, NULL);
    virDomainPtr dom = conn ? runner_domain(conn, g->name) : NULL;
    if (dom) /* restored from a template: the template's name; taken on the loop */
        snprintf(g->found_domain, sizeof(g->found_domain), "%s", virDomainGetName(dom));
    if (!dom)
        snprintf(g->error, sizeof(g->error), "its domain is gone");
    else if (virDomainIsActive(dom) != 1)
        snprintf(g->error, sizeof(g->error), "its domain is not running");
    if (dom)
        virDomainFree(dom);
    if (conn)
        virConnectClose(conn);
}

static void adopt_done(uv_work_t *w, int status)
{
    struct guest *g = w->data;
    (void)status;
    if (work_done_closing(g->prov))
        return;
    g->busy = false;
    if (g->found_domain[0])
        snprintf(g->domain, sizeof(g->domain), "%s", g->found_domain);
    if (g->teardown_queued) {
        teardown_start(g);
        return;
    }
    if (g->error[0]) {
        char reason[sizeof(g->error)];
        snprintf(reason, sizeof(reason), "%s", g->error);
        guest_fail(g, "%s", reason);
        return;
    }
    log_info("guest.adopting", "guest=%s host=%s pool=%s", g->name, g->host->cfg.name,
             g->pool->name);
    if (g->pool->backend == BACKEND_CONTAINER) {
        /* The agent reconnects to the socket it had, bound again here. */
        int r = container_listen(g);
        if (r < 0) {
            guest_fail(g, "cannot listen for its agent: %s", uv_strerror(r));
            return;
        }
        uv_timer_start(&g->timer, on_adopt_timeout, (uint64_t)g->prov->adopt_grace_ms, 0);
    } else if (g->host->streams) {
        streams_open(g);
    } else if (!g->host->simulated) {
        channel_connect(g);
    }
}

int provisioner_guest_adopt(struct provisioner *p, const char *host_name,
                            const struct guest_spec *spec, const struct guest_events *events,
                            void *data, struct guest **ret_guest)
{
    struct host *h = host_find(p, host_name);
    if (!h || !spec->name || !spec->pool)
        return -EINVAL;
    if (!h->up)
        return -ENODEV;
    struct guest *g = guest_new(p, h, spec, events, data);
    if (!g)
        return -ENOMEM;
    g->state = GUEST_ADOPTING;
    g->adopting = true;
    /* It exists, so it counts, even past what the host allows now. */
    guest_attach(g);
    guest_work_start(g, adopt_work, adopt_done, "the adoption");
    *ret_guest = g;
    return 0;
}

/* -- templates: building one, restoring runners from it -- */

static int provisioner_template_build_keyed(struct provisioner *p, const char *host_name,
                                            const struct config_pool *pool, const char *name,
                                            const char *key, provisioner_template_cb cb,
                                            void *data);

static void save_work(uv_work_t *w)
{
    struct guest *g = w->data;
    virSetErrorFunc(NULL, quiet_libvirt);
    g->error[0] = 0;
    virConnectPtr conn = host_conn_ref(g->host, false, NULL);
    virDomainPtr dom = conn ? virDomainLookupByName(conn, g->domain) : NULL;
    if (!dom)
        snprintf(g->error, sizeof(g->error), "its domain is gone");
    else if (virDomainSaveFlags(dom, g->save_file, NULL, VIR_DOMAIN_SAVE_RUNNING) < 0)
        snprintf(g->error, sizeof(g->error), "save: %.300s", libvirt_error());
    if (dom)
        virDomainFree(dom);
    if (conn)
        virConnectClose(conn);
}

static void save_done(uv_work_t *w, int status)
{
    struct guest *g = w->data;
    (void)status;
    if (work_done_closing(g->prov))
        return;
    g->busy = false;
    if (g->error[0] || g->teardown_queued) {
        char reason[sizeof(g->error)];
        snprintf(reason, sizeof(reason), "%s", g->error[0] ? g->error : "torn down while saved");
        g->saving = false;
        if (g->host->local_files)
            unlink(g->save_file);
        guest_fail(g, "template: %s", reason);
        return;
    }
    g->saved = true;
    struct stat st;
    log_info("template.saved", "template=%s host=%s pool=%s file=%s bytes=%lld", g->name,
             g->host->cfg.name, g->pool->name, g->save_file,
             g->host->local_files && stat(g->save_file, &st) == 0 ? (long long)st.st_size : -1LL);
    guest_teardown(g, "saved as a template");
}

static void template_on_hello(void *data, struct guest *g, const struct agent_hello *hello)
{
    (void)data;
    if (!hello->restore_capable) {
        guest_fail(g,
                   "template: its agent %s cannot be restored (0.4.0 or later can): rebuild "
                   "the image",
                   hello->version);
        return;
    }
    /* Saved now, while it waits for a config it never gets: no runner's secret exists in
     * it, and every clone starts from here. */
    g->saving = true;
    guest_work_start(g, save_work, save_done, "the save");
}

static void template_on_gone(void *data, struct guest *g)
{
    (void)data;
    struct stat st;
    int64_t bytes =
        g->saved && g->host->local_files && stat(g->save_file, &st) == 0 ? (int64_t)st.st_size : -1;
    if (g->template_cb)
        g->template_cb(g->template_data, g->saved ? 0 : -EIO,
                       g->saved           ? NULL
                       : g->why_failed[0] ? g->why_failed
                                          : g->error,
                       bytes);
}

static const struct guest_events template_events = {
    .on_hello = template_on_hello,
    .on_gone = template_on_gone,
};

/* Why guests of `pool` cannot be restored on `h`, or NULL. pseries under TCG before QEMU
 * 8.2 does not migrate its decrementer ("target/ppc: Migrate DECR SPR"): a restored
 * guest's timers stop, sometimes at once, sometimes mid-job (docs/LIBVIRT-HERE.md). */
static const char *restore_unsupported(const struct host *h, const struct config_pool *pool)
{
    if (pool->arch == ARCH_PPC64LE && !h->kvm[ARCH_PPC64LE] && h->hypervisor_version < 8002000)
        return "pseries under TCG loses its timers on a restore before QEMU 8.2: cold boots "
               "only";
    return NULL;
}

static void save_file_of(const struct host *h, const char *name, char *out, size_t size)
{
    snprintf(out, size, "%s/%s.save", h->cfg.storage_dir, name);
}

static int capacity_for(const struct host *h, const struct config_pool *pool)
{
    if (!h->up)
        return -ENODEV;
    if (h->used.guests + 1 > h->cfg.max_guests || h->used.vcpus + pool->vcpus > h->cfg.vcpus ||
        h->used.memory_mib + pool->memory_mib > h->cfg.memory_mib)
        return -ENOSPC;
    return 0;
}

int provisioner_template_build(struct provisioner *p, const char *host_name,
                               const struct config_pool *pool, const char *name,
                               provisioner_template_cb cb, void *data)
{
    return provisioner_template_build_keyed(p, host_name, pool, name, "-", cb, data);
}

static int provisioner_template_build_keyed(struct provisioner *p, const char *host_name,
                                            const struct config_pool *pool, const char *name,
                                            const char *key, provisioner_template_cb cb, void *data)
{
    struct host *h = host_find(p, host_name);
    if (!h || !name || !pool || pool->backend != BACKEND_VM)
        return -EINVAL;
    if (!image_usable(h, pool))
        return -ENOENT;
    int r = capacity_for(h, pool);
    if (r < 0)
        return r;
    struct guest_spec spec = {.name = name, .runner_id = 0, .pool = pool};
    struct guest *g = guest_new(p, h, &spec, &template_events, NULL);
    if (!g)
        return -ENOMEM;
    g->data = g;
    g->template = true;
    snprintf(g->template_key, sizeof(g->template_key), "%s", key);
    g->template_cb = cb;
    g->template_data = data;
    save_file_of(h, name, g->save_file, sizeof(g->save_file));
    guest_attach(g);
    log_info("template.building", "template=%s host=%s pool=%s", name, h->cfg.name, pool->name);
    guest_work_start(g, create_work, create_done, "the template's creation");
    return 0;
}

int provisioner_guest_restore(struct provisioner *p, const char *host_name,
                              const struct guest_spec *spec, const char *template_name,
                              const struct guest_events *events, void *data,
                              struct guest **ret_guest)
{
    struct host *h = host_find(p, host_name);
    if (!h || !spec->name || !spec->pool || !template_name || spec->pool->backend != BACKEND_VM)
        return -EINVAL;
    if (restore_unsupported(h, spec->pool))
        return -ENOTSUP;
    int r = capacity_for(h, spec->pool);
    if (r < 0)
        return r;
    for (struct guest *o = h->guests; o; o = o->next)
        if (strcmp(o->domain, template_name) == 0 && o->state < GUEST_GONE)
            return -EBUSY; /* one guest per template at a time: it has one name */
    struct guest *g = guest_new(p, h, spec, events, data);
    if (!g)
        return -ENOMEM;
    g->restore = true;
    snprintf(g->domain, sizeof(g->domain), "%s", template_name);
    save_file_of(h, template_name, g->save_file, sizeof(g->save_file));
    guest_attach(g);
    guest_work_start(g, create_work, create_done, "the restore");
    *ret_guest = g;
    return 0;
}

/* -- warm templates kept per pool and host (provisioner_templates_want) -- */

#define SLOT_RETRY_MS       60000
#define SLOT_FAILURES_LIMIT 2 /* restores in a row without a hello: templates off here */

/* What a template is built from, hashed: a save image holds the guest's memory and
 * device state as this QEMU, libvirt and image made them; any change makes it stale. */
static void template_key(const struct host *h, const struct config_pool *p, char out[65])
{
    struct textbuf b;
    textbuf_init(&b, 8192);
    struct boot_files boot = boot_files_of(h, p);
    const char *files[] = {p->image, boot.kernel, boot.initrd};
    for (size_t i = 0; i < sizeof(files) / sizeof(*files); i++) {
        struct stat st;
        /* A remote host's files are not ours to stat: their paths count. */
        bool seen = files[i] && h->local_files && stat(files[i], &st) == 0;
        textbuf_printf(&b, "file=%s size=%lld mtime=%lld.%09ld\n", files[i] ? files[i] : "-",
                       seen ? (long long)st.st_size : -1LL,
                       seen ? (long long)st.st_mtim.tv_sec : 0LL, seen ? st.st_mtim.tv_nsec : 0L);
    }
    textbuf_printf(&b,
                   "cmdline=%s arch=%s firmware=%s vcpus=%lld memory=%lld network=%s disk=%lld "
                   "qemu=%lu libvirt=%lu hatchery=%s controller=%s\n",
                   boot.cmdline ? boot.cmdline : "-", pool_arch_names[p->arch],
                   pool_firmware_names[p->firmware], (long long)p->vcpus, (long long)p->memory_mib,
                   p->network ? p->network : "-", (long long)p->disk_mib, h->hypervisor_version,
                   h->libvirt_version, HATCHERY_VERSION, h->prov->controller_id);
    /* A remote host's image is known by its manifest: a rebuild there changes both. */
    const struct image_manifest *m = remote_manifest(h, p);
    if (m)
        textbuf_printf(&b, "image_sha256=%s built_at=%s\n", m->sha256, m->built_at);
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)b.data, b.len, md);
    textbuf_free(&b);
    for (size_t i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static bool slot_in_use(const struct template_slot *slot)
{
    for (const struct guest *g = slot->host->guests; g; g = g->next)
        if (strcmp(g->domain, slot->name) == 0 && g->state < GUEST_GONE)
            return true;
    return false;
}

static void slot_broken(struct template_slot *slot, const char *reason)
{
    slot->state = SLOT_BROKEN;
    slot->rebuild = true;
    slot->retry_at_ms = wall_clock_ms() + SLOT_RETRY_MS;
    snprintf(slot->reason, sizeof(slot->reason), "%.250s", reason);
    log_warn("template.broken", "template=%s host=%s pool=%s reason=\"%s\"", slot->name,
             slot->host->cfg.name, slot->pool, reason);
}

/* A restored guest that never said hello. Twice in a row: restores do not work on this
 * host for this pool (pseries under TCG before QEMU 8.2), so its runners boot cold. */
static void slot_restore_failed(struct template_slot *slot, const char *reason)
{
    if (++slot->failures < SLOT_FAILURES_LIMIT) {
        slot_broken(slot, reason);
        return;
    }
    slot->state = SLOT_DISABLED;
    snprintf(slot->reason, sizeof(slot->reason), "%d restores in a row gave no hello: %.200s",
             slot->failures, reason);
    log_warn("template.disabled", "template=%s host=%s pool=%s reason=\"%s\"", slot->name,
             slot->host->cfg.name, slot->pool, slot->reason);
}

static void on_slot_built(void *data, int err, const char *reason, int64_t bytes)
{
    struct template_slot *slot = data;
    slot->host->slot_work = false;
    if (err) {
        slot_broken(slot, reason ? reason : "the build failed");
        return;
    }
    slot->state = SLOT_READY;
    slot->rebuild = false;
    slot->reason[0] = 0;
    slot->file_bytes = bytes;
    snprintf(slot->key, sizeof(slot->key), "%s", slot->want_key);
}

/* On a worker: deletes a template's overlay and save file through the storage API (so on a
 * remote host too; the pool is refreshed first, for it to list the save file libvirtd
 * wrote beside the volumes). */
static void template_files_delete(struct host *h, virConnectPtr conn, const char *name)
{
    virStoragePoolPtr sp = storage_pool_lookup(h, conn);
    if (!sp)
        return;
    virStoragePoolRefresh(sp, 0);
    const char *suffixes[] = {".qcow2", ".save"};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(*suffixes); i++) {
        char vol_name[300];
        snprintf(vol_name, sizeof(vol_name), "%s%s", name, suffixes[i]);
        virStorageVolPtr vol = virStorageVolLookupByName(sp, vol_name);
        if (vol) {
            virStorageVolDelete(vol, 0);
            virStorageVolFree(vol);
        }
    }
    virStoragePoolFree(sp);
}

/* A slot's check, with what the worker reads and writes: the loop may change the slot
 * meanwhile. */
struct slot_check {
    uv_work_t work;
    struct template_slot *slot;
    struct host *host;
    char name[256], want_key[65];
    bool rebuild;
    bool valid;      /* out: its save file is there, built from want_key */
    char reason[64]; /* out: why it could not be looked at (in use, host away) */
    int64_t bytes;   /* out */
};

/* On a worker: is the slot's save file there, built from what it should be? If not, its
 * files go (and a leftover build's domain, from a hatcheryd that died mid-build). */
static void slot_check_work(uv_work_t *w)
{
    struct slot_check *c = w->data;
    struct host *h = c->host;
    virSetErrorFunc(NULL, quiet_libvirt);
    virConnectPtr conn = host_conn_ref(h, false, NULL);
    if (!conn) {
        snprintf(c->reason, sizeof(c->reason), "host not connected");
        return;
    }
    char file[PATH_MAX];
    snprintf(file, sizeof(file), "%s/%s.save", h->cfg.storage_dir, c->name);
    virDomainPtr dom = virDomainLookupByName(conn, c->name);
    if (dom) {
        char *md = virDomainGetMetadata(dom, VIR_DOMAIN_METADATA_ELEMENT, DOMAIN_METADATA_NS, 0);
        if (md && strstr(md, "template-key>"))
            virDomainDestroy(dom); /* a build nobody finishes */
        else
            snprintf(c->reason, sizeof(c->reason), "in use by a runner");
        free(md);
        virDomainFree(dom);
    }
    if (!c->reason[0] && !c->rebuild) {
        char *xml = virDomainSaveImageGetXMLDesc(conn, file, 0);
        char needle[96];
        snprintf(needle, sizeof(needle), "template-key>%s<", c->want_key);
        if (xml && strstr(xml, needle)) {
            c->valid = true;
            struct stat st;
            c->bytes = h->local_files && stat(file, &st) == 0 ? (int64_t)st.st_size : -1;
        }
        free(xml);
    }
    if (!c->reason[0] && !c->valid)
        template_files_delete(h, conn, c->name);
    virConnectClose(conn);
}

static void slot_check_done(uv_work_t *w, int status)
{
    struct slot_check *c = w->data;
    struct template_slot *slot = c->slot;
    struct host *h = c->host;
    (void)status;
    bool closing = work_done_closing(h->prov);
    bool in_use = c->reason[0] != 0, valid = c->valid;
    char key[65];
    snprintf(key, sizeof(key), "%s", c->want_key);
    slot->file_bytes = c->bytes;
    free(c);
    if (closing)
        return;
    h->slot_work = false;
    if (in_use) { /* in use, or the host went away: looked at again later */
        slot->state = SLOT_UNKNOWN;
        return;
    }
    if (valid && strcmp(key, slot->want_key) == 0) {
        slot->state = SLOT_READY;
        slot->rebuild = false;
        slot->reason[0] = 0;
        snprintf(slot->key, sizeof(slot->key), "%s", key);
        log_info("template.found", "template=%s host=%s pool=%s bytes=%lld", slot->name,
                 h->cfg.name, slot->pool, (long long)slot->file_bytes);
        return;
    }
    if (valid) { /* the want changed while it was looked at: again */
        slot->state = SLOT_UNKNOWN;
        return;
    }
    slot->rebuild = false;
    int r = provisioner_template_build_keyed(h->prov, h->cfg.name, slot->pool_cfg, slot->name,
                                             slot->want_key, on_slot_built, slot);
    if (r == -ENOSPC || r == -ENODEV) {
        slot->state = SLOT_UNKNOWN; /* no room now: the next want tries again */
        return;
    }
    if (r < 0) {
        slot_broken(slot, strerror(-r));
        return;
    }
    slot->state = SLOT_BUILDING;
    h->slot_work = true;
}

void provisioner_templates_want(struct provisioner *p, const char *host_name,
                                const struct config_pool *pool, int n)
{
    struct host *h = host_find(p, host_name);
    if (!h || !h->up || p->closing || !pool || pool->backend != BACKEND_VM)
        return;
    char key[65];
    template_key(h, pool, key);
    for (int k = 0; k < n; k++) {
        char name[256];
        snprintf(name, sizeof(name), "hatchery-tpl-%s-%s-%d", p->controller_id, pool->name, k);
        struct template_slot *slot = h->slots;
        while (slot && (strcmp(slot->name, name) != 0 || slot->removing))
            slot = slot->next;
        if (slot && slot->pool[0] == '(') /* found on disk: this pool's after all */
            snprintf(slot->pool, sizeof(slot->pool), "%s", pool->name);
        if (!slot) {
            slot = calloc(1, sizeof(*slot));
            if (!slot)
                return;
            slot->host = h;
            snprintf(slot->pool, sizeof(slot->pool), "%s", pool->name);
            snprintf(slot->name, sizeof(slot->name), "%s", name);
            slot->next = h->slots;
            h->slots = slot;
        }
        slot->pool_cfg = pool;
        slot->wanted = h->slot_generation;
        const char *unsupported = restore_unsupported(h, pool);
        if (unsupported) {
            if (slot->state != SLOT_DISABLED)
                log_warn("template.disabled", "template=%s host=%s pool=%s reason=\"%s\"",
                         slot->name, h->cfg.name, slot->pool, unsupported);
            slot->state = SLOT_DISABLED;
            snprintf(slot->reason, sizeof(slot->reason), "%s", unsupported);
            continue;
        }
        if (strcmp(slot->want_key, key) != 0) {
            snprintf(slot->want_key, sizeof(slot->want_key), "%s", key);
            if (slot->state == SLOT_READY || slot->state == SLOT_BROKEN ||
                slot->state == SLOT_DISABLED) {
                /* The image, the guest's size or the host's QEMU changed. */
                log_info("template.stale", "template=%s host=%s pool=%s", slot->name, h->cfg.name,
                         slot->pool);
                slot->state = SLOT_UNKNOWN;
                slot->rebuild = true;
                slot->failures = 0;
            }
        }
    }
    /* One at a time; and on a remote host, not before the image is found there (its
     * manifest is in the key): the slots stay wanted meanwhile. */
    if (!h->local_files && !h->simulated)
        image_look(h, pool);
    if (h->slot_work || !image_usable(h, pool))
        return;
    int64_t now = wall_clock_ms();
    for (struct template_slot *slot = h->slots; slot; slot = slot->next) {
        if (strcmp(slot->pool, pool->name) != 0 || slot_in_use(slot) || slot->removing)
            continue;
        if (slot->state == SLOT_BROKEN && now >= slot->retry_at_ms)
            slot->state = SLOT_UNKNOWN;
        if (slot->state != SLOT_UNKNOWN)
            continue;
        struct slot_check *c = calloc(1, sizeof(*c));
        if (!c)
            return;
        c->slot = slot;
        c->host = h;
        snprintf(c->name, sizeof(c->name), "%s", slot->name);
        snprintf(c->want_key, sizeof(c->want_key), "%s", slot->want_key);
        c->rebuild = slot->rebuild;
        c->work.data = c;
        slot->state = SLOT_CHECKING;
        h->slot_work = true;
        if (queue_work(p, &c->work, slot_check_work, slot_check_done) < 0) {
            free(c);
            slot->state = SLOT_UNKNOWN;
            h->slot_work = false;
        }
        return;
    }
}

/* On a worker: an unwanted template's files go. */
static void slot_remove_work(uv_work_t *w)
{
    struct template_slot *slot = w->data;
    virSetErrorFunc(NULL, quiet_libvirt);
    virConnectPtr conn = host_conn_ref(slot->host, false, NULL);
    if (!conn)
        return;
    template_files_delete(slot->host, conn, slot->name);
    virConnectClose(conn);
}

static void slot_remove_done(uv_work_t *w, int status)
{
    struct template_slot *slot = w->data;
    struct host *h = slot->host;
    (void)status;
    if (work_done_closing(h->prov))
        return;
    h->slot_work = false;
    log_info("template.removed", "template=%s host=%s pool=%s", slot->name, h->cfg.name,
             slot->pool);
    for (struct template_slot **pp = &h->slots; *pp; pp = &(*pp)->next)
        if (*pp == slot) {
            *pp = slot->next;
            break;
        }
    free(slot);
}

/* On a worker: the template volumes of ours in the storage pool, as slots (unwanted until
 * a want names them): templates a pool no longer has, left by an earlier hatcheryd. */
struct slot_scan {
    uv_work_t work;
    struct host *host;
    char **names;
    size_t n;
};

static void slot_scan_work(uv_work_t *w)
{
    struct slot_scan *sc = w->data;
    struct host *h = sc->host;
    virSetErrorFunc(NULL, quiet_libvirt);
    virConnectPtr conn = host_conn_ref(h, false, NULL);
    virStoragePoolPtr sp = conn ? storage_pool_lookup(h, conn) : NULL;
    virStorageVolPtr *vols = NULL;
    int n = sp ? virStoragePoolListAllVolumes(sp, &vols, 0) : -1;
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "hatchery-tpl-%s-", h->prov->controller_id);
    sc->names = n > 0 ? calloc((size_t)n, sizeof(char *)) : NULL;
    for (int i = 0; i < n; i++) {
        const char *vname = virStorageVolGetName(vols[i]);
        size_t len = vname ? strlen(vname) : 0;
        if (sc->names && len > strlen(prefix) + 6 && strncmp(vname, prefix, strlen(prefix)) == 0 &&
            strcmp(vname + len - 6, ".qcow2") == 0)
            sc->names[sc->n++] = strndup(vname, len - 6);
        virStorageVolFree(vols[i]);
    }
    free(vols);
    if (sp)
        virStoragePoolFree(sp);
    if (conn)
        virConnectClose(conn);
}

static void slot_scan_done(uv_work_t *w, int status)
{
    struct slot_scan *sc = w->data;
    struct host *h = sc->host;
    (void)status;
    if (!work_done_closing(h->prov)) {
        h->slot_work = false;
        for (size_t i = 0; i < sc->n; i++) {
            struct template_slot *slot = h->slots;
            while (slot && strcmp(slot->name, sc->names[i]) != 0)
                slot = slot->next;
            if (slot || !sc->names[i])
                continue;
            slot = calloc(1, sizeof(*slot));
            if (!slot)
                break;
            slot->host = h;
            snprintf(slot->name, sizeof(slot->name), "%s", sc->names[i]);
            snprintf(slot->pool, sizeof(slot->pool), "(no pool)");
            slot->state = SLOT_UNKNOWN;
            slot->wanted = UINT64_MAX; /* a sweep decides, after this generation's wants */
            slot->next = h->slots;
            h->slots = slot;
        }
    }
    for (size_t i = 0; i < sc->n; i++)
        free(sc->names[i]);
    free(sc->names);
    free(sc);
}

void provisioner_templates_sweep(struct provisioner *p, const char *host_name)
{
    struct host *h = host_find(p, host_name);
    if (!h || !h->up || p->closing || h->lxc)
        return;
    uint64_t generation = h->slot_generation++;
    if (h->slot_work)
        return;
    if (!h->slots_scanned) {
        struct slot_scan *sc = calloc(1, sizeof(*sc));
        if (!sc)
            return;
        sc->host = h;
        sc->work.data = sc;
        h->slots_scanned = true;
        h->slot_work = true;
        if (queue_work(p, &sc->work, slot_scan_work, slot_scan_done) < 0) {
            h->slot_work = false;
            free(sc);
        }
        return;
    }
    for (struct template_slot *slot = h->slots; slot; slot = slot->next) {
        if (slot->wanted == UINT64_MAX) { /* found on disk: wanted from the next round on */
            slot->wanted = generation;
            continue;
        }
        if (slot->wanted == generation || slot_in_use(slot) || slot->removing ||
            slot->state == SLOT_BUILDING || slot->state == SLOT_CHECKING)
            continue;
        slot->removing = true;
        h->slot_work = true;
        slot->work.data = slot;
        if (queue_work(p, &slot->work, slot_remove_work, slot_remove_done) < 0) {
            slot->removing = false;
            h->slot_work = false;
        }
        return;
    }
}

/* A ready template of `pool` on `h` that no guest has, or NULL. */
static struct template_slot *slot_for(struct host *h, const struct config_pool *pool)
{
    for (struct template_slot *slot = h->slots; slot; slot = slot->next)
        if (slot->state == SLOT_READY && !slot->removing && strcmp(slot->pool, pool->name) == 0 &&
            strcmp(slot->key, slot->want_key) == 0 && !slot_in_use(slot))
            return slot;
    return NULL;
}

int provisioner_templates(struct provisioner *p, const char *host_name, struct template_status *out,
                          size_t max, size_t *ret_n)
{
    struct host *h = host_find(p, host_name);
    if (!h)
        return -ENOENT;
    size_t n = 0;
    for (struct template_slot *slot = h->slots; slot && n < max; slot = slot->next) {
        struct template_status *t = &out[n++];
        memset(t, 0, sizeof(*t));
        snprintf(t->name, sizeof(t->name), "%s", slot->name);
        snprintf(t->pool, sizeof(t->pool), "%s", slot->pool);
        t->state = slot_state_names[slot->state];
        snprintf(t->reason, sizeof(t->reason), "%s", slot->reason);
        t->file_bytes = slot->state == SLOT_READY ? slot->file_bytes : -1;
        t->restores = slot->restores;
        t->fallbacks = slot->fallbacks;
        t->in_use = slot_in_use(slot);
    }
    *ret_n = n;
    return 0;
}

static const struct guest_events no_events; /* every event ignored */

void guest_disown(struct guest *g)
{
    g->events = &no_events;
    g->data = NULL;
}

/* ---- guests: teardown --------------------------------------------------------------------- */

/* Destroys and undefines a domain, on a worker. A transient domain that is shut off should
 * not exist (libvirt drops transient domains when they stop), but libvirt's LXC driver
 * leaves one behind when a container died while libvirtd was away: destroying it is
 * refused ("not running") yet drops the stale object. */
static int domain_remove_found(virDomainPtr dom);

static int domain_remove(virConnectPtr conn, const char *name)
{
    virDomainPtr dom = virDomainLookupByName(conn, name);
    return dom ? domain_remove_found(dom) : 0;
}

/* The same for the domain that serves runner `name` (its own, or a template's). */
static int runner_domain_remove(virConnectPtr conn, const char *name)
{
    virDomainPtr dom = runner_domain(conn, name);
    return dom ? domain_remove_found(dom) : 0;
}

static int domain_remove_found(virDomainPtr dom)
{
    int persistent = virDomainIsPersistent(dom);
    int r = 0;
    if ((virDomainIsActive(dom) == 1 || persistent == 0) && virDomainDestroy(dom) < 0 &&
        virDomainIsActive(dom) == 1)
        r = -EIO;
    if (persistent == 1)
        virDomainUndefineFlags(dom, VIR_DOMAIN_UNDEFINE_NVRAM);
    virDomainFree(dom);
    return r;
}

/* The host's storage pool, on a worker. libvirt 9.0 sometimes answers this lookup with
 * "not found" while other clients work on volumes (about 1 in 100 here): asked again
 * before giving up. */
static virStoragePoolPtr storage_pool_lookup(struct host *h, virConnectPtr conn)
{
    for (int i = 0; i < 5; i++) {
        virStoragePoolPtr sp = virStoragePoolLookupByName(conn, h->cfg.storage_pool);
        if (sp || host_dropped(h))
            return sp;
        usleep(100000);
    }
    return NULL;
}

static void teardown_work(uv_work_t *w)
{
    struct guest *g = w->data;
    virSetErrorFunc(NULL, quiet_libvirt);
    struct host *h = g->host;
    g->error[0] = 0;
    virConnectPtr conn = host_conn_ref(h, false, NULL);
    if (!conn)
        return; /* the host is down: the reconciler finishes this when it returns */
    if (domain_remove(conn, g->domain) < 0)
        snprintf(g->error, sizeof(g->error), "destroy: %s", libvirt_error());
    /* A template's volume is its disk, saved with its memory: kept. */
    if (g->pool->backend == BACKEND_VM && !g->saved) {
        virStoragePoolPtr sp = storage_pool_lookup(h, conn);
        if (!sp)
            snprintf(g->error, sizeof(g->error),
                     "volume %s kept: storage pool %s: %s (the reconciler removes it later)",
                     g->volume, h->cfg.storage_pool, libvirt_error());
        virStorageVolPtr vol = sp ? virStorageVolLookupByName(sp, g->volume) : NULL;
        if (vol && virStorageVolDelete(vol, 0) < 0)
            snprintf(g->error, sizeof(g->error), "volume delete: %s", libvirt_error());
        if (vol)
            virStorageVolFree(vol);
        if (sp)
            virStoragePoolFree(sp);
    }
    virConnectClose(conn);
}

static void teardown_done(uv_work_t *w, int status)
{
    struct guest *g = w->data;
    (void)status;
    if (work_done_closing(g->prov))
        return;
    g->busy = false;
    if (g->error[0])
        log_warn("guest.teardown_incomplete", "guest=%s error=\"%s\"", g->name, g->error);
    /* The console's last lines came before the destroy. */
    stream_bridge_close(g->console_bridge);
    g->console_bridge = NULL;
    if (g->pool->backend == BACKEND_CONTAINER) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof(path), "%s/agent.sock", g->channel_dir);
        unlink(path);
        rmdir(g->channel_dir);
    } else {
        unlink(g->channel_path);
    }
    guest_gone(g);
}

static void teardown_start(struct guest *g)
{
    if (g->busy) {
        g->teardown_queued = true; /* after the create in flight */
        return;
    }
    if (g->state >= GUEST_DELETING)
        return;
    g->state = GUEST_DELETING;
    uv_timer_stop(&g->timer);
    if (g->channel) {
        agent_channel_close(g->channel);
        g->channel = NULL;
    }
    if (g->pipe) {
        uv_close((uv_handle_t *)g->pipe, on_pipe_closed);
        g->pipe = NULL;
    }
    stream_bridge_close(g->channel_bridge);
    g->channel_bridge = NULL;
    g->busy = true;
    g->work.data = g;
    if (queue_work(g->prov, &g->work, teardown_work, teardown_done) < 0) {
        g->busy = false;
        guest_gone(g);
    }
}

void guest_teardown(struct guest *g, const char *reason)
{
    if (g->state >= GUEST_DELETING)
        return;
    log_info("guest.teardown", "guest=%s reason=\"%s\"", g->name, reason);
    if (g->channel && g->state == GUEST_RUNNING)
        agent_channel_send_shutdown(g->channel, reason);
    teardown_start(g);
}

void guest_ack_exit(struct guest *g)
{
    if (g->channel && g->state == GUEST_EXITED)
        agent_channel_ack_exit(g->channel);
}

int guest_send_config(struct guest *g, const struct secret *jit, int64_t job_timeout_s,
                      const char *const *command, size_t n_command)
{
    if (g->state != GUEST_READY || !g->channel)
        return -EPROTO;
    return agent_channel_send_config(g->channel, g->name, jit, job_timeout_s, command, n_command);
}

enum guest_state guest_state_get(const struct guest *g)
{
    return g->state;
}

const char *guest_name(const struct guest *g)
{
    return g->name;
}

const char *guest_domain(const struct guest *g)
{
    return g->domain;
}

const char *guest_console_log(const struct guest *g)
{
    return g->console_log;
}

/* ---- lifecycle events and inventory ----------------------------------------------------- */

static struct guest *guest_by_domain(struct host *h, const char *domain)
{
    for (struct guest *g = h->guests; g; g = g->next)
        if (domain && strcmp(g->domain, domain) == 0)
            return g;
    return NULL;
}

static int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque)
{
    (void)conn;
    (void)detail;
    struct host *h = opaque;
    if (event != VIR_DOMAIN_EVENT_STOPPED)
        return 0;
    struct guest *g = h->prov->closing ? NULL : guest_by_domain(h, virDomainGetName(dom));
    if (!g || g->state >= GUEST_DELETING || g->saving)
        return 0;
    g->domain_stopped = true;
    if (g->busy)
        return 0; /* a worker still has it: create_done looks at domain_stopped */
    guest_stopped(g, detail == VIR_DOMAIN_EVENT_STOPPED_CRASHED ? "crashed" : "powered off");
    return 0;
}

static void guest_stopped(struct guest *g, const char *why)
{
    g->domain_stopped = true;
    if (g->state == GUEST_EXITED)
        guest_teardown(g, "the guest powered off after the job");
    else
        guest_fail(g, "the guest stopped (%s) before its runner reported an exit", why);
}

/* The runner a domain serves, from its metadata: a guest restored from a template runs
 * under the template's name, and says its runner's in <runner-name>. Into `out`, or empty. */
static void metadata_runner_name(const char *md, char *out, size_t size)
{
    const char *at = md ? strstr(md, "runner-name>") : NULL;
    out[0] = 0;
    if (!at)
        return;
    at += strlen("runner-name>");
    size_t n = strcspn(at, "<");
    if (n < size)
        snprintf(out, size, "%.*s", (int)n, at);
}

int provisioner_tagged_domains(struct provisioner *p, const char *host, char ***ret_names,
                               size_t *ret_n)
{
    struct host *h = host_find(p, host);
    virConnectPtr conn = h ? host_conn_ref(h, true, NULL) : NULL;
    if (!conn)
        return -ENODEV;
    virDomainPtr *doms = NULL;
    int n = virConnectListAllDomains(conn, &doms, 0);
    virConnectClose(conn); /* the domains hold their own references */
    if (n < 0)
        return -EIO;
    char **names = calloc((size_t)n + 1, sizeof(char *));
    size_t found = 0;
    char needle[128], prefix[128];
    snprintf(needle, sizeof(needle), "controller>%s</", p->controller_id);
    snprintf(prefix, sizeof(prefix), "hatchery-%s-", p->controller_id);
    for (int i = 0; i < n; i++) {
        char *md =
            virDomainGetMetadata(doms[i], VIR_DOMAIN_METADATA_ELEMENT, DOMAIN_METADATA_NS, 0);
        const char *name = virDomainGetName(doms[i]);
        bool ours = md && strstr(md, needle);
        /* A stale transient domain that is shut off (see domain_remove) has no readable
         * metadata: a name of ours is all that is left to go by. */
        if (!md && name && strncmp(name, prefix, strlen(prefix)) == 0 &&
            virDomainIsActive(doms[i]) == 0 && virDomainIsPersistent(doms[i]) == 0)
            ours = true;
        /* A template being built is no runner: its builder (or the next one) owns it. */
        if (ours && md && strstr(md, "template-key>"))
            ours = false;
        char runner[256];
        metadata_runner_name(md, runner, sizeof(runner));
        if (ours && names && name)
            names[found++] = strdup(runner[0] ? runner : name);
        free(md);
        virDomainFree(doms[i]);
    }
    free(doms);
    *ret_names = names;
    *ret_n = found;
    return names ? 0 : -ENOMEM;
}

/* ---- work by name, off the loop --------------------------------------------------------- */

/* The domain that serves runner `name`: its own, or a template's restored for it (its
 * metadata says so). On a worker; NULL when there is none. */
static virDomainPtr runner_domain(virConnectPtr conn, const char *name)
{
    virDomainPtr dom = virDomainLookupByName(conn, name);
    if (dom)
        return dom;
    virDomainPtr *doms = NULL;
    int n = virConnectListAllDomains(conn, &doms, 0);
    for (int i = 0; i < n; i++) {
        char *md =
            virDomainGetMetadata(doms[i], VIR_DOMAIN_METADATA_ELEMENT, DOMAIN_METADATA_NS, 0);
        char runner[256];
        metadata_runner_name(md, runner, sizeof(runner));
        free(md);
        if (!dom && runner[0] && strcmp(runner, name) == 0)
            dom = doms[i];
        else
            virDomainFree(doms[i]);
    }
    free(doms);
    return dom;
}

struct name_work {
    uv_work_t work;
    struct provisioner *prov;
    struct host *host;
    char name[256];
    char **names;
    size_t n;
    int err;
    bool volumes; /* tagged_work lists orphan overlay volumes, not domains */
    provider_names_cb names_cb;
    provider_done_cb done_cb;
    void *data;
};

/* Overlay volumes named like our runners (hatchery-<controller>-<n>.qcow2) whose domain
 * does not exist: left by a teardown whose volume delete failed. On a worker. */
static int orphan_volumes(struct provisioner *p, struct host *h, char ***ret_names, size_t *ret_n)
{
    *ret_names = NULL;
    *ret_n = 0;
    if (h->lxc)
        return 0; /* containers have no overlay */
    virConnectPtr conn = host_conn_ref(h, false, NULL);
    if (!conn)
        return -ENODEV;
    /* No pool (yet), or a lookup that failed once: the next pass looks again. */
    virStoragePoolPtr sp = virStoragePoolLookupByName(conn, h->cfg.storage_pool);
    if (!sp) {
        virConnectClose(conn);
        return 0;
    }
    virStorageVolPtr *vols = NULL;
    int n = virStoragePoolListAllVolumes(sp, &vols, 0);
    virStoragePoolFree(sp);
    if (n < 0) {
        virConnectClose(conn);
        return -EIO;
    }
    char **names = calloc((size_t)n + 1, sizeof(char *));
    size_t found = 0;
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "hatchery-%s-", p->controller_id);
    /* The runners that guests restored from templates serve: their domains have the
     * templates' names, their volumes the runners'. */
    char **serving = NULL;
    size_t n_serving = 0;
    virDomainPtr *doms = NULL;
    int n_doms = virConnectListAllDomains(conn, &doms, 0);
    serving = n_doms > 0 ? calloc((size_t)n_doms, sizeof(char *)) : NULL;
    for (int i = 0; i < n_doms; i++) {
        char *md =
            virDomainGetMetadata(doms[i], VIR_DOMAIN_METADATA_ELEMENT, DOMAIN_METADATA_NS, 0);
        char runner[256];
        metadata_runner_name(md, runner, sizeof(runner));
        if (runner[0] && serving)
            serving[n_serving++] = strdup(runner);
        free(md);
        virDomainFree(doms[i]);
    }
    free(doms);
    if (n_doms < 0) { /* no list, no verdict: nothing is an orphan this time */
        for (int i = 0; i < n; i++)
            virStorageVolFree(vols[i]);
        free(vols);
        free(names);
        virConnectClose(conn);
        return -EIO;
    }
    for (int i = 0; i < n; i++) {
        const char *vname = virStorageVolGetName(vols[i]);
        size_t len = vname ? strlen(vname) : 0;
        /* A runner's overlay is the prefix and its id: a template's is not. */
        bool runner_volume =
            len > strlen(prefix) + 6 && strncmp(vname, prefix, strlen(prefix)) == 0 &&
            strcmp(vname + len - 6, ".qcow2") == 0 &&
            strspn(vname + strlen(prefix), "0123456789") == len - 6 - strlen(prefix);
        if (names && runner_volume) {
            char name[256];
            snprintf(name, sizeof(name), "%.*s", (int)(len - 6), vname);
            bool served = false;
            for (size_t k = 0; k < n_serving && !served; k++)
                served = serving[k] && strcmp(serving[k], name) == 0;
            virDomainPtr dom = served ? NULL : virDomainLookupByName(conn, name);
            if (dom)
                virDomainFree(dom);
            else if (!served)
                names[found++] = strdup(name);
        }
        virStorageVolFree(vols[i]);
    }
    free(vols);
    for (size_t k = 0; k < n_serving; k++)
        free(serving[k]);
    free(serving);
    virConnectClose(conn);
    *ret_names = names;
    *ret_n = found;
    return names ? 0 : -ENOMEM;
}

static void tagged_work(uv_work_t *w)
{
    struct name_work *nw = w->data;
    virSetErrorFunc(NULL, quiet_libvirt);
    if (!host_usable(nw->host) ||
        (nw->volumes
             ? orphan_volumes(nw->prov, nw->host, &nw->names, &nw->n)
             : provisioner_tagged_domains(nw->prov, nw->host->cfg.name, &nw->names, &nw->n)) < 0) {
        nw->names = NULL;
        nw->n = 0;
        nw->err = -EIO;
    }
}

static void tagged_done(uv_work_t *w, int status)
{
    struct name_work *nw = w->data;
    (void)status;
    if (!work_done_closing(nw->prov))
        nw->names_cb(nw->data, nw->host->cfg.name, nw->names, nw->n);
    for (size_t i = 0; i < nw->n; i++)
        free(nw->names[i]);
    free(nw->names);
    free(nw);
}

static int names_async(struct provisioner *p, const char *host, bool volumes, provider_names_cb cb,
                       void *data)
{
    struct host *h = host_find(p, host);
    if (!h)
        return -ENOENT;
    struct name_work *nw = calloc(1, sizeof(*nw));
    if (!nw)
        return -ENOMEM;
    nw->prov = p;
    nw->host = h;
    nw->volumes = volumes;
    nw->names_cb = cb;
    nw->data = data;
    nw->work.data = nw;
    int r = queue_work(p, &nw->work, tagged_work, tagged_done);
    if (r < 0)
        free(nw);
    return r;
}

int provisioner_tagged_domains_async(struct provisioner *p, const char *host, provider_names_cb cb,
                                     void *data)
{
    return names_async(p, host, false, cb, data);
}

int provisioner_orphan_volumes_async(struct provisioner *p, const char *host, provider_names_cb cb,
                                     void *data)
{
    return names_async(p, host, true, cb, data);
}

static void remove_work(uv_work_t *w)
{
    struct name_work *nw = w->data;
    struct host *h = nw->host;
    virSetErrorFunc(NULL, quiet_libvirt);
    virConnectPtr conn = host_conn_ref(h, false, NULL);
    if (!conn) {
        nw->err = -ENODEV;
        return;
    }
    if (runner_domain_remove(conn, nw->name) < 0)
        nw->err = -EIO;
    char vol_name[300];
    snprintf(vol_name, sizeof(vol_name), "%s.qcow2", nw->name);
    virStoragePoolPtr sp = storage_pool_lookup(h, conn);
    virStorageVolPtr vol = sp ? virStorageVolLookupByName(sp, vol_name) : NULL;
    if (vol && virStorageVolDelete(vol, 0) < 0)
        nw->err = -EIO;
    if (vol)
        virStorageVolFree(vol);
    if (sp)
        virStoragePoolFree(sp);
    virConnectClose(conn);
}

static void remove_done(uv_work_t *w, int status)
{
    struct name_work *nw = w->data;
    (void)status;
    if (work_done_closing(nw->prov)) {
        free(nw);
        return;
    }
    char path[PATH_MAX + 300];
    snprintf(path, sizeof(path), "%s/channels/%s.sock", nw->prov->state_dir, nw->name);
    unlink(path);
    snprintf(path, sizeof(path), "%s/channels/%s/agent.sock", nw->prov->state_dir, nw->name);
    unlink(path);
    snprintf(path, sizeof(path), "%s/channels/%s", nw->prov->state_dir, nw->name);
    rmdir(path);
    log_info("guest.removed", "guest=%s host=%s result=%s", nw->name, nw->host->cfg.name,
             nw->err ? "failed" : "ok");
    if (nw->done_cb)
        nw->done_cb(nw->data, nw->err);
    free(nw);
}

int provisioner_domain_remove(struct provisioner *p, const char *host, const char *name,
                              provider_done_cb cb, void *data)
{
    struct host *h = host_find(p, host);
    if (!h)
        return -ENOENT;
    if (!h->up)
        return -ENODEV;
    struct name_work *nw = calloc(1, sizeof(*nw));
    if (!nw)
        return -ENOMEM;
    nw->prov = p;
    nw->host = h;
    snprintf(nw->name, sizeof(nw->name), "%s", name);
    nw->done_cb = cb;
    nw->data = data;
    nw->work.data = nw;
    int r = queue_work(p, &nw->work, remove_work, remove_done);
    if (r < 0)
        free(nw);
    return r;
}

/* ---- the provider ---------------------------------------------------------------------------- */

static struct provisioner *provider_of(struct provider *p)
{
    return (struct provisioner *)p;
}

static void op_free(struct provider *p)
{
    provisioner_free(provider_of(p));
}
static int op_host_add(struct provider *p, const struct config_host *host)
{
    return provisioner_host_add(provider_of(p), host);
}
static int op_host_update(struct provider *p, const struct config_host *host)
{
    return provisioner_host_update(provider_of(p), host);
}
static bool op_host_up(struct provider *p, const char *host)
{
    return provisioner_host_up(provider_of(p), host);
}
static int op_host_status(struct provider *p, const char *host, struct host_status *ret)
{
    return provisioner_host_status(provider_of(p), host, ret);
}
static int op_host_image(struct provider *p, const char *host, const struct config_pool *pool,
                         struct image_status *ret)
{
    return provisioner_host_image(provider_of(p), host, pool, ret);
}
static int op_guest_create(struct provider *p, const char *host, const struct guest_spec *spec,
                           const struct guest_events *events, void *data, struct guest **ret)
{
    return provisioner_guest_create(provider_of(p), host, spec, events, data, ret);
}
static int op_guest_adopt(struct provider *p, const char *host, const struct guest_spec *spec,
                          const struct guest_events *events, void *data, struct guest **ret)
{
    return provisioner_guest_adopt(provider_of(p), host, spec, events, data, ret);
}
static int op_tagged_async(struct provider *p, const char *host, provider_names_cb cb, void *data)
{
    return provisioner_tagged_domains_async(provider_of(p), host, cb, data);
}
static int op_orphan_volumes_async(struct provider *p, const char *host, provider_names_cb cb,
                                   void *data)
{
    return provisioner_orphan_volumes_async(provider_of(p), host, cb, data);
}
static int op_remove(struct provider *p, const char *host, const char *name, provider_done_cb cb,
                     void *data)
{
    return provisioner_domain_remove(provider_of(p), host, name, cb, data);
}
static void op_templates_want(struct provider *p, const char *host, const struct config_pool *pool,
                              int n)
{
    provisioner_templates_want(provider_of(p), host, pool, n);
}
static void op_templates_sweep(struct provider *p, const char *host)
{
    provisioner_templates_sweep(provider_of(p), host);
}
static int op_templates(struct provider *p, const char *host, struct template_status *out,
                        size_t max, size_t *ret_n)
{
    return provisioner_templates(provider_of(p), host, out, max, ret_n);
}

static const struct provider_ops libvirt_provider_ops = {
    .free = op_free,
    .host_add = op_host_add,
    .host_update = op_host_update,
    .host_up = op_host_up,
    .host_status = op_host_status,
    .host_image = op_host_image,
    .guest_create = op_guest_create,
    .guest_adopt = op_guest_adopt,
    .guest_send_config = guest_send_config,
    .guest_ack_exit = guest_ack_exit,
    .guest_teardown = guest_teardown,
    .guest_disown = guest_disown,
    .tagged_async = op_tagged_async,
    .orphan_volumes_async = op_orphan_volumes_async,
    .remove = op_remove,
    .templates_want = op_templates_want,
    .templates_sweep = op_templates_sweep,
    .templates = op_templates,
};

struct provider *provisioner_provider(struct provisioner *p)
{
    return p ? &p->provider : NULL;
}
