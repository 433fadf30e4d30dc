/* A provider: a place that runs single-use guests, as the scheduler, the admin socket and
 * /metrics see it. The scheduler asks it for guests on named hosts and hears back through
 * guest_events; it never sees how a guest is made. libvirt's is the provider hatcheryd
 * runs (libvirt/provisioner.h); the scheduler's unit test drives the scheduler through a
 * provider of its own.
 *
 * Everything here runs on the daemon's loop. Calls that need the host's answer (lists,
 * removals) take a callback that comes back on the loop; a guest's life comes back
 * through its guest_events, in the order booting, hello (or resumed), started, exited,
 * gone, with ended or failed possible at any point before gone.
 *
 * The guest's state is the guest's alone: made, booting, up (its agent answered), torn
 * down. What the agent reports after its hello (the runner started, the runner exited)
 * passes through to the owner, whose facts those are; the provider keeps no state of it
 * beyond the channel's own protocol order. */
#ifndef HATCHERY_PROVIDER_H
#define HATCHERY_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent_channel.h"
#include "config.h"
#include "hatchery/limits.h"
#include "image_manifest.h"
#include "secret.h"

struct guest; /* the provider's own */
struct provider;

/* ---- hosts ------------------------------------------------------------------------------ */

struct host_usage {
    int64_t vcpus, memory_mib, guests;
};

/* A libvirt network of a host, as found at its last connection. */
#define HOST_NETWORKS_MAX 16
struct host_network {
    char name[64];
    char unfilterable[192]; /* why the guest filter cannot apply on it; empty when it can */
};

struct host_status {
    bool up;
    bool connecting; /* the first connection attempt is in flight */
    bool kvm;        /* KVM offered for at least one architecture */
    int64_t reconnects;
    char error[256]; /* why it is down, or empty */
    struct host_usage used;
    int64_t guest_moves_refused;    /* guest state changes its lifecycle table refused: a bug */
    int64_t template_moves_refused; /* the same for warm template slots */
    bool streams;                   /* agent channels and consoles through libvirt streams */
    bool guest_filter; /* the guest filter (libvirt/guest_filter.h) is defined on the host */
    char guest_filter_error[256]; /* else why not */
    long long qemu_gid;           /* the group QEMU's guests run in (libvirt's DAC label), as last
                                   * found; -1 not known */
    struct host_network networks[HOST_NETWORKS_MAX]; /* its first HOST_NETWORKS_MAX */
    size_t n_networks;
    char networks_error[192]; /* why they could not be listed, or empty */
};

/* A VM pool's image on one host. On a host whose files are this machine's, the caller
 * reads them (IMAGE_LOCAL); on libvirt's test driver there are none (IMAGE_UNCHECKED). On a
 * remote host it is what the provider last found there: it looks again off the loop when
 * there is no finding yet, when the host reconnected, and when the last is older than a
 * minute (ten seconds while the image is missing). */
enum image_state {
    IMAGE_LOCAL,
    IMAGE_UNCHECKED,
    IMAGE_CHECKING, /* the first probe is under way */
    IMAGE_READY,
    IMAGE_MISSING, /* missing, unreadable, or for another arch: `reason` says which */
};
/* The state's name, as the admin API shows it. */
static inline const char *image_state_name(enum image_state state)
{
    static const char *const names[IMAGE_MISSING + 1] = {
        [IMAGE_LOCAL] = "local", [IMAGE_UNCHECKED] = "unchecked", [IMAGE_CHECKING] = "checking",
        [IMAGE_READY] = "ready", [IMAGE_MISSING] = "missing",
    };
    return state <= IMAGE_MISSING ? names[state] : "?";
}
struct image_status {
    enum image_state state;
    char reason[256];
    int64_t checked_ms;             /* wall clock of the last finding; 0 none */
    struct image_manifest manifest; /* when ready */
};

/* ---- guests ------------------------------------------------------------------------------ */

struct guest_events {
    void (*on_hello)(void *data, struct guest *guest, const struct agent_hello *hello);
    void (*on_started)(void *data, struct guest *guest, int64_t pid);
    void (*on_exited)(void *data, struct guest *guest, const struct agent_exit *exit);
    /* Something went wrong; teardown has begun. */
    void (*on_failed)(void *data, struct guest *guest, const char *reason);
    /* The guest ended on its own: its agent's channel closed, or its domain stopped (`why`
     * says which). Expected once the owner has its runner's exit, a failure before: the
     * owner tears the guest down either way. An owner without this handler gets on_failed
     * (and the teardown) instead. */
    void (*on_ended)(void *data, struct guest *guest, const char *why);
    /* The guest and its disk are gone; the guest is freed after this returns. */
    void (*on_gone)(void *data, struct guest *guest);
    /* The guest is started: it boots. */
    void (*on_booting)(void *data, struct guest *guest);
    /* An adopted guest's agent answered resume. */
    void (*on_resumed)(void *data, struct guest *guest, const struct agent_resumed *resumed);
};

struct guest_spec {
    const char *name; /* unique, hatchery-<controller>-… */
    int64_t runner_id;
    const struct config_pool *pool;
};

/* ---- warm templates ------------------------------------------------------------------------ */

struct template_status {
    char name[256];
    char pool[CONFIG_MAX_NAME_BYTES + 1];
    const char *state;  /* unknown, checking, building, ready, broken, disabled */
    char reason[256];   /* why broken or disabled */
    int64_t file_bytes; /* the save file's size; -1 unknown */
    int64_t restores, fallbacks;
    bool in_use;
};

/* ---- the operations ------------------------------------------------------------------------ */

/* `names` is NULL and `n` 0 when the host cannot be asked. */
typedef void (*provider_names_cb)(void *data, const char *host, char **names, size_t n);
typedef void (*provider_done_cb)(void *data, int err);

struct provider_ops {
    /* Tears no guest down: they stay for the next start's reconciler. */
    void (*free)(struct provider *p);

    /* Hosts. add starts connecting to a new one. update is a reload: a new host is added;
     * a known one takes its new capacity and down_grace_s. A host the config no longer
     * names is kept for its guests; it gets no new ones. */
    int (*host_add)(struct provider *p, const struct config_host *host);
    int (*host_update)(struct provider *p, const struct config_host *host);
    bool (*host_up)(struct provider *p, const char *host);
    int (*host_status)(struct provider *p, const char *host, struct host_status *ret);
    /* Reports, and starts a look when one is due (so: call it where the image is needed).
     * -ENOENT for an unknown host. */
    int (*host_image)(struct provider *p, const char *host, const struct config_pool *pool,
                      struct image_status *ret);

    /* Starts creating a guest on `host`. Fails at once with -ENODEV (host down), -ENOENT
     * (the pool's image is not found on the host: host_image), -ENOSPC (no capacity left on
     * the host) or -EINVAL. A pool with warm templates on the host is restored from one
     * when one is free, else booted cold. */
    int (*guest_create)(struct provider *p, const char *host, const struct guest_spec *spec,
                        const struct guest_events *events, void *data, struct guest **ret);
    /* Re-attaches a guest an earlier hatcheryd created on `host` and resumes its agent:
     * on_resumed follows, or on_failed (the guest is gone, or its agent did not answer). */
    int (*guest_adopt)(struct provider *p, const char *host, const struct guest_spec *spec,
                       const struct guest_events *events, void *data, struct guest **ret);
    /* After on_hello (-EPROTO before, or once sent). */
    int (*guest_send_config)(struct guest *guest, const struct secret *jit_config,
                             int64_t job_timeout_s, const char *const *command, size_t n_command);
    /* After on_exited, once the exit is recorded: tells the agent we have it (nothing
     * before its exit). */
    void (*guest_ack_exit)(struct guest *guest);
    /* When the guest's agent last beat (wall clock, ms), or 0: asked by the owner, which
     * judges a silent agent hung. */
    int64_t (*guest_heard_ms)(const struct guest *guest);
    /* Idempotent: asks the agent to stop its runner (when one runs), then destroys
     * everything. */
    void (*guest_teardown)(struct guest *guest, const char *reason);
    /* The owner gives the guest up: its teardown goes on, and no event reaches the owner. */
    void (*guest_disown)(struct guest *guest);

    /* Inventory, for the reconciler: the guests of this controller on `host`, and the disks
     * of ours whose guest does not exist (left when a teardown could not delete them). */
    int (*tagged_async)(struct provider *p, const char *host, provider_names_cb cb, void *data);
    int (*orphan_volumes_async)(struct provider *p, const char *host, provider_names_cb cb,
                                void *data);
    /* Removes a guest and its disk by name, for records with no guest in memory (after a
     * restart) and for guests nobody owns. Idempotent; `cb` may be NULL. */
    int (*remove)(struct provider *p, const char *host, const char *name, provider_done_cb cb,
                  void *data);

    /* Warm templates: keep `n` of `pool` on `host` (call it on every tick); after the tick's
     * wants for a host, sweep removes those no want named; templates lists them. */
    void (*templates_want)(struct provider *p, const char *host, const struct config_pool *pool,
                           int n);
    void (*templates_sweep)(struct provider *p, const char *host);
    int (*templates)(struct provider *p, const char *host, struct template_status *out, size_t max,
                     size_t *ret_n);
};

/* An implementation embeds this as its first member. */
struct provider {
    const struct provider_ops *ops;
};

/* The calls, spelt as calls. */
static inline void provider_free(struct provider *p)
{
    if (p)
        p->ops->free(p);
}
static inline int provider_host_add(struct provider *p, const struct config_host *host)
{
    return p->ops->host_add(p, host);
}
static inline int provider_host_update(struct provider *p, const struct config_host *host)
{
    return p->ops->host_update(p, host);
}
static inline bool provider_host_up(struct provider *p, const char *host)
{
    return p->ops->host_up(p, host);
}
static inline int provider_host_status(struct provider *p, const char *host,
                                       struct host_status *ret)
{
    return p->ops->host_status(p, host, ret);
}
static inline int provider_host_image(struct provider *p, const char *host,
                                      const struct config_pool *pool, struct image_status *ret)
{
    return p->ops->host_image(p, host, pool, ret);
}
static inline int provider_guest_create(struct provider *p, const char *host,
                                        const struct guest_spec *spec,
                                        const struct guest_events *events, void *data,
                                        struct guest **ret)
{
    return p->ops->guest_create(p, host, spec, events, data, ret);
}
static inline int provider_guest_adopt(struct provider *p, const char *host,
                                       const struct guest_spec *spec,
                                       const struct guest_events *events, void *data,
                                       struct guest **ret)
{
    return p->ops->guest_adopt(p, host, spec, events, data, ret);
}
static inline int provider_guest_send_config(struct provider *p, struct guest *guest,
                                             const struct secret *jit_config, int64_t job_timeout_s,
                                             const char *const *command, size_t n_command)
{
    return p->ops->guest_send_config(guest, jit_config, job_timeout_s, command, n_command);
}
static inline void provider_guest_ack_exit(struct provider *p, struct guest *guest)
{
    p->ops->guest_ack_exit(guest);
}
static inline int64_t provider_guest_heard_ms(struct provider *p, const struct guest *guest)
{
    return p->ops->guest_heard_ms(guest);
}
static inline void provider_guest_teardown(struct provider *p, struct guest *guest,
                                           const char *reason)
{
    p->ops->guest_teardown(guest, reason);
}
static inline void provider_guest_disown(struct provider *p, struct guest *guest)
{
    p->ops->guest_disown(guest);
}
static inline int provider_tagged_async(struct provider *p, const char *host, provider_names_cb cb,
                                        void *data)
{
    return p->ops->tagged_async(p, host, cb, data);
}
static inline int provider_orphan_volumes_async(struct provider *p, const char *host,
                                                provider_names_cb cb, void *data)
{
    return p->ops->orphan_volumes_async(p, host, cb, data);
}
static inline int provider_remove(struct provider *p, const char *host, const char *name,
                                  provider_done_cb cb, void *data)
{
    return p->ops->remove(p, host, name, cb, data);
}
static inline void provider_templates_want(struct provider *p, const char *host,
                                           const struct config_pool *pool, int n)
{
    p->ops->templates_want(p, host, pool, n);
}
static inline void provider_templates_sweep(struct provider *p, const char *host)
{
    p->ops->templates_sweep(p, host);
}
static inline int provider_templates(struct provider *p, const char *host,
                                     struct template_status *out, size_t max, size_t *ret_n)
{
    return p->ops->templates(p, host, out, max, ret_n);
}

#endif
