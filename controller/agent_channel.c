/* The controller's side of the agent protocol; see agent_channel.h. */
#include "agent_channel.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hatchery/agent_protocol.h"
#include "log.h"
#include "wall_clock.h"

enum channel_state {
    CHANNEL_EXPECT_HELLO,
    CHANNEL_EXPECT_RESUMED, /* resume sent to an adopted guest: resumed next */
    CHANNEL_READY,          /* hello seen: config may be sent */
    CHANNEL_CONFIGURED,     /* config sent: started or exited next */
    CHANNEL_RUNNING,        /* started: heartbeats, then exited */
    CHANNEL_EXITED,
    CHANNEL_STATE_MAX,
};

struct agent_channel {
    uv_stream_t *stream;
    enum channel_state state;
    int version; /* the agent's protocol version: what we send it */
    const struct agent_channel_events *events;
    void *data;
    char *buf;
    size_t len;
    uint64_t window_start_ms;
    int window_messages;
    bool closed;
    bool reported;
    bool restoring; /* restore sent: the hello that follows must say restored */
    int writes_pending;
    int64_t heard_ms; /* the last heartbeat (wall clock) */
};

struct channel_write {
    uv_write_t req;
    struct agent_channel *channel;
    size_t len;
    char data[];
};

int64_t agent_channel_heard_ms(const struct agent_channel *c)
{
    return c->heard_ms;
}

static void on_stream_closed(uv_handle_t *handle)
{
    struct agent_channel *c = handle->data;
    free(handle);
    if (c) {
        free(c->buf);
        free(c);
    }
}

static void channel_shut(struct agent_channel *c)
{
    if (c->closed)
        return;
    c->closed = true;
    uv_read_stop(c->stream);
    c->stream->data = c;
    uv_close((uv_handle_t *)c->stream, on_stream_closed);
}

static void fail(struct agent_channel *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void fail(struct agent_channel *c, const char *fmt, ...)
{
    if (c->closed)
        return;
    char reason[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    bool report = !c->reported;
    c->reported = true;
    const struct agent_channel_events *ev = c->events;
    void *data = c->data;
    channel_shut(c);
    if (report && ev->on_error)
        ev->on_error(data, reason);
}

static void copy_field(char *out, size_t size, json_t *v)
{
    const char *s = json_string_value(v);
    snprintf(out, size, "%s", s ? s : "");
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\' || (unsigned char)*p >= 0x7f)
            *p = '?';
}

static void handle_resumed(struct agent_channel *c, json_t *msg)
{
    struct agent_resumed resumed = {.pid = 0};
    const char *state = json_string_value(json_object_get(msg, "state"));
    json_t *pid = json_object_get(msg, "pid");
    json_t *name = json_object_get(msg, "runner_name");
    if (!state || !json_is_integer(pid) || json_integer_value(pid) < 0 || !json_is_string(name) ||
        json_string_length(name) >= sizeof(resumed.runner_name))
        return fail(c, "resumed needs state, pid and runner_name");
    if (strcmp(state, "waiting") == 0) {
        resumed.state = AGENT_RESUMED_WAITING;
        c->state = CHANNEL_READY;
    } else if (strcmp(state, "running") == 0 && json_integer_value(pid) > 0) {
        resumed.state = AGENT_RESUMED_RUNNING;
        c->state = CHANNEL_RUNNING;
    } else if (strcmp(state, "exited") == 0) {
        resumed.state = AGENT_RESUMED_EXITED;
        c->state = CHANNEL_RUNNING; /* its exited follows */
    } else {
        return fail(c, "resumed with an unknown state");
    }
    resumed.pid = json_integer_value(pid);
    copy_field(resumed.runner_name, sizeof(resumed.runner_name), name);
    copy_field(resumed.boot_id, sizeof(resumed.boot_id), json_object_get(msg, "boot_id"));
    copy_field(resumed.machine_id, sizeof(resumed.machine_id), json_object_get(msg, "machine_id"));
    copy_field(resumed.nonce, sizeof(resumed.nonce), json_object_get(msg, "nonce"));
    if (c->events->on_resumed)
        c->events->on_resumed(c->data, &resumed);
}

static void handle_message(struct agent_channel *c, json_t *msg, enum agent_msg_type type)
{
    const struct agent_channel_events *ev = c->events;
    if (c->state == CHANNEL_EXPECT_RESUMED) {
        int v = (int)json_integer_value(json_object_get(msg, "v"));
        if (type == AGENT_MSG_RESUMED && v >= 2)
            return handle_resumed(c, msg);
        /* A version 2 agent whose runner exited, or whose heartbeat was due, just as this
         * controller connected says so before it reads `resume`; it says both again after
         * its `resumed`. Acted on now, the exit would end an adoption that can succeed
         * (the chaos run through a scale set lost a job that way). */
        if (v >= 2 && (type == AGENT_MSG_EXITED || type == AGENT_MSG_HEARTBEAT))
            return;
        return fail(c, "the agent cannot resume (it sent %s in protocol version %d)",
                    agent_msg_type_names[type], (int)json_integer_value(json_object_get(msg, "v")));
    }
    switch (type) {
    case AGENT_MSG_HELLO: {
        if (c->state != CHANNEL_EXPECT_HELLO)
            return fail(c, "hello sent twice");
        json_t *version = json_object_get(msg, "version"), *arch = json_object_get(msg, "arch");
        if (!json_is_string(version) || !json_is_string(arch) || json_string_length(version) > 31 ||
            json_string_length(arch) > 31)
            return fail(c, "hello lacks version or arch");
        struct agent_hello hello;
        copy_field(hello.version, sizeof(hello.version), version);
        copy_field(hello.arch, sizeof(hello.arch), arch);
        copy_field(hello.boot_id, sizeof(hello.boot_id), json_object_get(msg, "boot_id"));
        copy_field(hello.machine_id, sizeof(hello.machine_id), json_object_get(msg, "machine_id"));
        copy_field(hello.nonce, sizeof(hello.nonce), json_object_get(msg, "nonce"));
        copy_field(hello.rng_sample, sizeof(hello.rng_sample), json_object_get(msg, "rng_sample"));
        hello.crng_ready = !json_is_false(json_object_get(msg, "crng_ready"));
        hello.restore_capable = json_is_true(json_object_get(msg, "restore"));
        hello.restored = json_is_true(json_object_get(msg, "restored"));
        if (c->restoring && !hello.restored)
            return fail(c, "a restored guest said hello without taking a new identity");
        if (!c->restoring && hello.restored)
            return fail(c, "hello says restored, but no restore was sent");
        json_t *protocol = json_object_get(msg, "protocol");
        c->version = json_is_integer(protocol) && json_integer_value(protocol) >= 2
                         ? AGENT_PROTOCOL_VERSION
                         : AGENT_PROTOCOL_MIN_VERSION;
        c->state = CHANNEL_READY;
        if (ev->on_hello)
            ev->on_hello(c->data, &hello);
        return;
    }
    case AGENT_MSG_STARTED: {
        if (c->state != CHANNEL_CONFIGURED)
            return fail(c, "started before any config was sent");
        json_t *pid = json_object_get(msg, "pid");
        if (!json_is_integer(pid) || json_integer_value(pid) <= 0)
            return fail(c, "started without a pid");
        c->state = CHANNEL_RUNNING;
        if (ev->on_started)
            ev->on_started(c->data, json_integer_value(pid));
        return;
    }
    case AGENT_MSG_HEARTBEAT:
        /* A version 2 agent also beats while it waits for its config. */
        if (c->state != CHANNEL_RUNNING && !(c->state == CHANNEL_READY && c->version >= 2))
            return fail(c, "heartbeat while no runner runs");
        c->heard_ms = wall_clock_ms();
        return;
    case AGENT_MSG_EXITED: {
        if (c->state != CHANNEL_RUNNING && c->state != CHANNEL_CONFIGURED)
            return fail(c, "exited before the runner could start");
        json_t *code = json_object_get(msg, "code"), *sig = json_object_get(msg, "signal");
        json_t *duration = json_object_get(msg, "duration_s");
        struct agent_exit exit = {.code = -1, .signal = 0};
        if (json_is_integer(code) && json_integer_value(code) >= 0 &&
            json_integer_value(code) <= 255 && !sig)
            exit.code = (int)json_integer_value(code);
        else if (json_is_integer(sig) && json_integer_value(sig) > 0 &&
                 json_integer_value(sig) < 128 && !code)
            exit.signal = (int)json_integer_value(sig);
        else
            return fail(c, "exited needs one of code (0-255) or signal (1-127)");
        if (!json_is_number(duration) || json_number_value(duration) < 0)
            return fail(c, "exited without a duration");
        exit.duration_s = json_number_value(duration);
        exit.timed_out = json_is_true(json_object_get(msg, "timed_out"));
        copy_field(exit.meaning, sizeof(exit.meaning), json_object_get(msg, "meaning"));
        json_t *relaunches = json_object_get(msg, "relaunches");
        if (json_is_integer(relaunches) && json_integer_value(relaunches) >= 0 &&
            json_integer_value(relaunches) < 1000)
            exit.relaunches = (int)json_integer_value(relaunches);
        exit.jit_on_argv = json_is_true(json_object_get(msg, "jit_on_argv"));
        json_t *scans = json_object_get(msg, "argv_scans");
        if (json_is_integer(scans) && json_integer_value(scans) >= 0 &&
            json_integer_value(scans) < 1000000)
            exit.argv_scans = (int)json_integer_value(scans);
        json_t *report = json_object_get(msg, "report");
        if (report) {
            /* The job wrote it: an object, small, or nothing. */
            char *text = json_is_object(report) ? json_dumps(report, JSON_COMPACT) : NULL;
            if (!text || strlen(text) > AGENT_MAX_REPORT_BYTES)
                report = NULL;
            free(text);
            exit.report = report;
        }
        c->state = CHANNEL_EXITED;
        if (ev->on_exited)
            ev->on_exited(c->data, &exit);
        return;
    }
    case AGENT_MSG_RESUMED:
        return fail(c, "resumed without a resume");
    case AGENT_MSG_CONFIG:
    case AGENT_MSG_SHUTDOWN:
    case AGENT_MSG_RESUME:
    case AGENT_MSG_ACK:
    case AGENT_MSG_RESTORE:
    case AGENT_MSG_TYPE_MAX:
        break;
    }
    fail(c, "%s is a controller-to-agent message", agent_msg_type_names[type]);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    (void)handle;
    (void)suggested;
    static char read_buf[16 * 1024];
    *buf = uv_buf_init(read_buf, sizeof(read_buf));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct agent_channel *c = stream->data;
    if (c->closed || nread == 0)
        return;
    if (nread < 0) {
        fail(c, "the guest closed the channel (%s)", uv_err_name((int)nread));
        return;
    }
    for (ssize_t i = 0; i < nread && !c->closed; i++) {
        char ch = buf->base[i];
        if (ch != '\n') {
            if (c->len >= AGENT_MAX_LINE_BYTES) {
                fail(c, "a line longer than %d bytes", AGENT_MAX_LINE_BYTES);
                return;
            }
            c->buf[c->len++] = ch;
            continue;
        }
        uint64_t now = uv_now(stream->loop);
        if (now - c->window_start_ms >= 1000) {
            c->window_start_ms = now;
            c->window_messages = 0;
        }
        if (++c->window_messages > AGENT_MAX_MESSAGES_PER_S) {
            fail(c, "more than %d messages a second", AGENT_MAX_MESSAGES_PER_S);
            return;
        }
        json_t *msg = NULL;
        enum agent_msg_type type;
        char err[256];
        int r = agent_msg_parse(c->buf, c->len, &msg, &type, err, sizeof(err));
        c->len = 0;
        if (r < 0) {
            fail(c, "bad message: %s", err);
            return;
        }
        handle_message(c, msg, type);
        json_decref(msg);
    }
}

int agent_channel_open(uv_stream_t *stream, const struct agent_channel_events *events, void *data,
                       struct agent_channel **ret_channel)
{
    struct agent_channel *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->buf = malloc(AGENT_MAX_LINE_BYTES);
    if (!c->buf) {
        free(c);
        return -ENOMEM;
    }
    c->stream = stream;
    c->version = AGENT_PROTOCOL_MIN_VERSION;
    c->events = events;
    c->data = data;
    c->window_start_ms = uv_now(stream->loop);
    stream->data = c;
    int r = uv_read_start(stream, on_alloc, on_read);
    if (r < 0) {
        free(c->buf);
        free(c);
        return r;
    }
    *ret_channel = c;
    return 0;
}

static void on_written(uv_write_t *req, int status)
{
    struct channel_write *w = (struct channel_write *)req;
    OPENSSL_cleanse(w->data, w->len);
    free(w);
    (void)status;
}

static int send_msg(struct agent_channel *c, json_t *msg)
{
    if (c->closed)
        return -EPIPE;
    size_t len = 0;
    char *line = agent_msg_encode(msg, &len);
    json_decref(msg);
    if (!line)
        return -EMSGSIZE;
    struct channel_write *w = malloc(sizeof(*w) + len);
    if (!w) {
        OPENSSL_cleanse(line, len);
        free(line);
        return -ENOMEM;
    }
    w->channel = c;
    w->len = len;
    memcpy(w->data, line, len);
    OPENSSL_cleanse(line, len);
    free(line);
    uv_buf_t buf = uv_buf_init(w->data, (unsigned)len);
    int r = uv_write(&w->req, c->stream, &buf, 1, on_written);
    if (r < 0) {
        OPENSSL_cleanse(w->data, len);
        free(w);
    }
    return r;
}

int agent_channel_resume(uv_stream_t *stream, const struct agent_channel_events *events, void *data,
                         struct agent_channel **ret_channel)
{
    struct agent_channel *c = NULL;
    int r = agent_channel_open(stream, events, data, &c);
    if (r < 0)
        return r;
    c->state = CHANNEL_EXPECT_RESUMED;
    c->version = AGENT_PROTOCOL_VERSION;
    /* Should the write fail, no answer comes, and the caller's grace ends the wait. */
    r = send_msg(c, agent_msg_new_v(AGENT_MSG_RESUME, AGENT_PROTOCOL_VERSION));
    if (r < 0)
        log_warn("agent.resume_unsent", "error=%s", uv_err_name(r));
    *ret_channel = c;
    return 0;
}

int agent_channel_restore(uv_stream_t *stream, const struct agent_channel_events *events,
                          void *data, const unsigned char seed[AGENT_RESTORE_SEED_BYTES],
                          int64_t now_ms, struct agent_channel **ret_channel)
{
    struct agent_channel *c = NULL;
    int r = agent_channel_open(stream, events, data, &c);
    if (r < 0)
        return r;
    c->restoring = true;
    char hex[2 * AGENT_RESTORE_SEED_BYTES + 1];
    for (size_t i = 0; i < AGENT_RESTORE_SEED_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", seed[i]);
    json_t *msg = agent_msg_new_v(AGENT_MSG_RESTORE, 2);
    json_object_set_new(msg, "seed", json_string(hex));
    json_object_set_new(msg, "time_ms", json_integer(now_ms));
    OPENSSL_cleanse(hex, sizeof(hex));
    /* Should the write fail, no hello comes, and the boot timeout ends the wait. */
    r = send_msg(c, msg);
    if (r < 0)
        log_warn("agent.restore_unsent", "error=%s", uv_err_name(r));
    *ret_channel = c;
    return 0;
}

int agent_channel_send_config(struct agent_channel *c, const char *runner_name,
                              const struct secret *jit_config, int64_t job_timeout_s,
                              const char *const *runner_command, size_t n_command)
{
    if (c->state != CHANNEL_READY)
        return -EPROTO;
    if (n_command == 0 || n_command > AGENT_MAX_COMMAND_ARGS)
        return -EINVAL;
    char *jit = NULL;
    int r = secret_reveal(jit_config, "", &jit);
    if (r < 0)
        return r;
    json_t *cmd = json_array();
    for (size_t i = 0; i < n_command; i++)
        json_array_append_new(cmd, json_string(runner_command[i]));
    json_t *msg = agent_msg_new_v(AGENT_MSG_CONFIG, c->version);
    json_object_set_new(msg, "runner_name", json_string(runner_name));
    json_object_set_new(msg, "jit_config", json_string(jit));
    json_object_set_new(msg, "job_timeout_s", json_integer(job_timeout_s));
    json_object_set_new(msg, "runner_command", cmd);
    secret_reveal_free(jit);
    r = send_msg(c, msg);
    if (r == 0)
        c->state = CHANNEL_CONFIGURED;
    return r;
}

int agent_channel_ack_exit(struct agent_channel *c)
{
    if (c->state != CHANNEL_EXITED)
        return -EPROTO;
    if (c->version < 2)
        return 0; /* a version 1 agent does not wait for it */
    json_t *ack = agent_msg_new_v(AGENT_MSG_ACK, c->version);
    json_object_set_new(ack, "of", json_string("exited"));
    return send_msg(c, ack);
}

int agent_channel_send_shutdown(struct agent_channel *c, const char *reason)
{
    if (c->state != CHANNEL_RUNNING)
        return -EPROTO; /* no runner to stop: not started, or exited */
    json_t *msg = agent_msg_new_v(AGENT_MSG_SHUTDOWN, c->version);
    json_object_set_new(msg, "reason", json_string(reason));
    return send_msg(c, msg);
}

void agent_channel_close(struct agent_channel *c)
{
    if (!c)
        return;
    c->reported = true;
    channel_shut(c);
}
