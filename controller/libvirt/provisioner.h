/* The provisioner: libvirt hosts and single-use guests on them.
 *
 * Every host is a libvirt connection (qemu:///system, qemu+ssh://…, lxc:///,
 * test:///default) opened off the loop, kept alive with libvirt keepalive, and reopened
 * with backoff when it drops; a dropped host is down and its guests fail. Slow libvirt
 * calls (open, volume and domain creation, destroy) run on libuv's worker pool and come
 * back as callbacks; lifecycle events arrive on the loop through libvirt_loop.
 *
 * A guest is: a qcow2 overlay volume on the pool's base image (through the storage API,
 * so it works on remote hosts), a transient domain from domain_xml, and the agent channel.
 * It reports hello, started and exited through its events, fails with a reason (boot
 * timeout, agent protocol violation, the guest stopping early, host down), and its
 * teardown (destroy, undefine, delete the volume) is idempotent and ends in on_gone. */
#ifndef HATCHERY_PROVISIONER_H
#define HATCHERY_PROVISIONER_H

#include <libvirt/libvirt.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "provider.h"

/* A guest's state in libvirt's provider (its table is libvirt/internal.h's). */
enum guest_state {
    GUEST_CREATING,
    GUEST_ADOPTING, /* an earlier hatcheryd's guest: looked up, then resumed */
    GUEST_BOOTING,
    GUEST_UP, /* its agent said hello (or, adopted, answered resume): the channel is live */
    GUEST_DELETING,
    GUEST_GONE,
    GUEST_STATE_MAX,
};
extern const char *const guest_state_names[GUEST_STATE_MAX];

struct provisioner;
struct guest;

struct provisioner_options {
    const char *controller_id;
    const char *state_dir; /* channels/ and logs/ live here */
    int64_t boot_timeout_ms;
    int64_t adopt_grace_ms; /* an adopted guest's agent must answer resume within this */
};

int provisioner_new(uv_loop_t *loop, const struct provisioner_options *options,
                    struct provisioner **ret);
/* The provisioner as a provider (provider.h): every operation on hosts, guests, the
 * inventory and templates goes through it, and so does the end (provider_free). */
struct provider *provisioner_provider(struct provisioner *prov);

int provisioner_host_usage(struct provisioner *prov, const char *host, struct host_usage *ret);

/* Warm templates. A template is a guest booted from its pool's image and saved, memory
 * and all, while its agent waited for a config (so no runner's secret is in it), under a
 * name of its own: the overlay volume `<name>.qcow2` is its disk, `<storage_dir>/<name>.save`
 * its memory. libvirt 9.0 restores a saved domain only under the name and UUID it had, so
 * one template serves one runner at a time: a pool needs one per runner it runs at once on
 * a host. A runner's guest restored from it gets its own overlay on the template's disk,
 * its own channel, console log and metadata, and the domain name of the template; its
 * agent is told `restore` (a seed from the host and the host's clock) and must say hello
 * again with a new identity before it gets a config.
 *
 * `cb` gets 0 and the save file's size (-1 where it cannot be seen: a remote host), or a
 * negative errno and the reason. The template counts against the host while it boots. */
typedef void (*provisioner_template_cb)(void *data, int err, const char *reason,
                                        int64_t file_bytes);
int provisioner_template_build(struct provisioner *prov, const char *host,
                               const struct config_pool *pool, const char *name,
                               provisioner_template_cb cb, void *data);
/* Like the provider's guest_create, from the template `template_name` (-EBUSY while another
 * guest has it). A template that cannot be restored (gone, corrupt, made by another QEMU)
 * fails the guest with the reason: the caller then boots one cold. */
int provisioner_guest_restore(struct provisioner *prov, const char *host,
                              const struct guest_spec *spec, const char *template_name,
                              const struct guest_events *events, void *data,
                              struct guest **ret_guest);

/* The owner gives the guest up: its teardown goes on, and no event reaches the owner. */
void guest_disown(struct guest *guest);
/* After on_hello. */
int guest_send_config(struct guest *guest, const struct secret *jit_config, int64_t job_timeout_s,
                      const char *const *command, size_t n_command);
/* After on_exited, once the exit is recorded: tells the agent we have it. */
void guest_ack_exit(struct guest *guest);
/* When its agent last beat (wall clock, ms), or 0. */
int64_t guest_heard_ms(const struct guest *guest);
/* Idempotent: asks the agent to stop (when it can), then destroys everything. */
void guest_teardown(struct guest *guest, const char *reason);
enum guest_state guest_state_get(const struct guest *guest);
const char *guest_name(const struct guest *guest);
/* Its libvirt domain's name: the runner's, or the template's it was restored from. */
const char *guest_domain(const struct guest *guest);
/* The per-runner console log, kept after teardown. */
const char *guest_console_log(const struct guest *guest);

/* Domains on `host` that carry this controller's tag (for the reconciler and the tests).
 * Synchronous: call from a worker or a test. */
int provisioner_tagged_domains(struct provisioner *prov, const char *host, char ***ret_names,
                               size_t *ret_n);

#endif
