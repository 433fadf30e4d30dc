/* A guest's channel to its agent: the socket (or a container's listening socket, or
 * libvirt streams on a remote host) opened, kept and retried, and what the agent says
 * relayed to the guest's owner. The agent's hello (or resumed) makes the guest up; what
 * it says after that (started, exited) is the owner's to keep: the guest's state does not
 * follow it, and its order is the channel's own (agent_channel.c). Heartbeats stop at the
 * channel, which keeps the last one's time (guest_heard_ms). */
#include "internal.h"

#include <errno.h>
#include <libvirt/virterror.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "domain_xml.h"
#include "libvirt_error.h"
#include "hatchery/agent_protocol.h"
#include "hatchery/limits.h"
#include "stream_bridge.h"
#include "log.h"
#include "wall_clock.h"

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

/* Another live guest with the same machine-id or RNG nonce: the two share one boot's state
 * (a copied disk, a restored memory image), and with it their randomness, so the newer one
 * must get no runner's config. NULL when there is none. Containers share their host's
 * kernel and may share one root (and its /etc/machine-id): only their nonces count. */
static const struct guest *clone_of(const struct guest *g, const char *machine_id,
                                    const char *nonce)
{
    bool vm = g->pool->backend == BACKEND_VM;
    bool has_machine = is_identity(machine_id), has_nonce = is_identity(nonce);
    for (const struct host *h = g->prov->hosts; h; h = h->next)
        for (const struct guest *o = h->guests; o; o = o->next) {
            if (o == g || o->state >= GUEST_DELETING)
                continue;
            bool same_machine = vm && has_machine && o->pool->backend == BACKEND_VM &&
                                strcmp(o->machine_id, machine_id) == 0;
            if (same_machine || (has_nonce && strcmp(o->nonce, nonce) == 0))
                return o;
        }
    return NULL;
}

/* Records the identity the agent gave (its hello, or an adopted guest's resumed), unless
 * another live guest has it: then the guest is failed as a clone, and false. */
static bool take_identity(struct guest *g, const char *machine_id, const char *nonce)
{
    const struct guest *twin = clone_of(g, machine_id, nonce);
    if (twin) {
        bool same_machine = !(is_identity(nonce) && strcmp(twin->nonce, nonce) == 0);
        guest_fail(g, "a clone of live guest %s: the same %s (%s); it gets no runner's config",
                   twin->name, same_machine ? "machine-id" : "RNG nonce",
                   same_machine ? machine_id : nonce);
        return false;
    }
    snprintf(g->machine_id, sizeof(g->machine_id), "%s", machine_id);
    snprintf(g->nonce, sizeof(g->nonce), "%s", nonce);
    return true;
}

static void ch_hello(void *data, const struct agent_hello *hello)
{
    struct guest *g = data;
    if (g->prov->closing)
        return;
    if (!take_identity(g, hello->machine_id, hello->nonce))
        return;
    if (hello->restored)
        guest_restore_told(g, RESTORE_HELLO, NULL);
    uv_timer_stop(&g->timer);
    if (!guest_move(g, GUEST_UP)) {
        guest_fail(g, "the agent said hello to a guest that was %s", guest_state_names[g->state]);
        return;
    }
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
    log_info("guest.runner_started", "guest=%s pid=%lld", g->name, (long long)pid);
    if (g->events->on_started)
        g->events->on_started(g->data, g, pid);
}

static void ch_resumed(void *data, const struct agent_resumed *resumed)
{
    static const char *const names[] = {"waiting", "running", "exited"};
    struct guest *g = data;
    if (g->prov->closing)
        return;
    uv_timer_stop(&g->timer);
    g->adopting = false;
    if (!guest_move(g, GUEST_UP)) {
        guest_fail(g, "the agent said resumed to a guest that was %s", guest_state_names[g->state]);
        return;
    }
    log_info("guest.resumed", "guest=%s agent_state=%s pid=%lld boot_id=%s", g->name,
             names[resumed->state], (long long)resumed->pid, resumed->boot_id);
    if (strcmp(resumed->runner_name, g->name) != 0 && resumed->runner_name[0]) {
        guest_fail(g, "the agent runs runner %s, not %s", resumed->runner_name, g->name);
        return;
    }
    /* Its identity, so that a clone of it, or it of another, is found as at hello. */
    if (!take_identity(g, resumed->machine_id, resumed->nonce))
        return;
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
    if (g->state >= GUEST_DELETING || g->saving)
        return; /* torn down, or saved as a template: expected */
    char why[320];
    snprintf(why, sizeof(why), "agent channel: %s", reason);
    guest_ended(g, why);
}

static const struct agent_channel_events channel_events = {
    .on_hello = ch_hello,
    .on_started = ch_started,
    .on_exited = ch_exited,
    .on_resumed = ch_resumed,
    .on_error = ch_error,
};

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

static void channel_connect(struct guest *g);

static void on_retry_connect(uv_timer_t *t)
{
    struct guest *g = t->data;
    if (!g->adopting)
        uv_timer_start(&g->timer, on_boot_timeout, hello_timeout_ms(g), 0);
    channel_connect(g);
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

int container_listen(struct guest *g)
{
    int r = container_socket_dir_make(g->channel_dir, g->id_base);
    if (r < 0)
        return r;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/agent.sock", g->channel_dir);
    unlink(path);
    uv_pipe_t *pipe = malloc(sizeof(*pipe));
    if (!pipe)
        return -ENOMEM;
    uv_pipe_init(g->prov->loop, pipe, 0);
    pipe->data = g;
    r = uv_pipe_bind(pipe, path);
    /* Its directory keeps out all but the container's root, which is not the socket's owner. */
    if (r == 0)
        r = chmod(path, 0666) < 0 ? -errno : 0;
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

/* Streams a worker opened that no bridge took over (a teardown came first). */
static void streams_release(struct guest *g)
{
    stream_release(g->host->queue, g->opened_channel);
    stream_release(g->host->queue, g->opened_console);
    g->opened_channel = g->opened_console = NULL;
}

static void streams_on(struct guest *g, virConnectPtr conn)
{
    virDomainPtr dom = conn ? virDomainLookupByName(conn, g->domain) : NULL;
    if (!dom) {
        guest_error_set(g, "the domain is gone: %s", libvirt_error());
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
        guest_error_set(g, "cannot open the agent channel through libvirt: %s", libvirt_error());
        if (channel)
            virStreamFree(channel);
    }
    virDomainFree(dom);
}

static void streams_work(struct guest *g)
{
    guest_error_clear(g);
    virConnectPtr conn = host_conn_ref(g->host, false, NULL);
    streams_on(g, conn);
    if (conn)
        virConnectClose(conn);
}

static void streams_done(struct guest *g)
{
    if (g->teardown_queued || g->state >= GUEST_DELETING || g->failed) {
        streams_release(g);
        if (g->teardown_queued)
            teardown_start(g);
        return;
    }
    if (g->opened_console) {
        if (stream_bridge_log(g->prov->loop, g->host->queue, g->opened_console, g->console_log,
                              CONSOLE_MAX_BYTES, &g->console_bridge) == 0)
            g->opened_console = NULL;
        else
            log_warn("guest.console_lost", "guest=%s reason=\"cannot write\" path=%s", g->name,
                     g->console_log);
    } else {
        log_warn("guest.console_lost", "guest=%s reason=\"no console stream\"", g->name);
    }
    if (!g->opened_channel) {
        const char *reason = g->error ? g->error : "no channel stream";
        streams_release(g);
        guest_fail(g, "%s", reason);
        return;
    }
    int fd = -1;
    uv_pipe_t *pipe = malloc(sizeof(*pipe));
    int r = pipe ? stream_bridge_channel(g->prov->loop, g->host->queue, g->opened_channel, &fd,
                                         &g->channel_bridge)
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

/* Connects to a VM's agent (channel_hooks.open): through libvirt streams on a host that
 * needs them, else the channel's socket on this machine. */
void channel_open(struct guest *g)
{
    if (g->host->streams)
        guest_work_start(g, streams_work, streams_done, streams_release,
                         "the opening of the agent channel");
    else
        channel_connect(g);
}
