/* The agent protocol, shared by hatcheryd and hatchery-agent (DESIGN.md, "Agent protocol").
 *
 * A byte stream (a virtio-serial port named AGENT_CHANNEL_NAME for VMs, a unix socket
 * bind-mounted into LXC containers) carrying newline-delimited JSON: one object per line,
 * each with "v" (the sender's protocol version) and a "type". A line longer than
 * AGENT_MAX_LINE_BYTES, a line that is not a JSON object, a version outside
 * AGENT_PROTOCOL_MIN_VERSION … AGENT_PROTOCOL_VERSION or an unknown type is an error that
 * ends the conversation. Text (JSON), never raw structs: ppc64le is
 * little-endian, s390x big-endian.
 *
 *   agent -> controller  hello      {version, arch, boot_id, machine_id, nonce,
 *                                    crng_ready, crng_wait_s, restore, restored,
 *                                    rng_sample}
 *                                   nonce: 16 random bytes in hex, drawn after the CRNG
 *                                   wait (0.3.0 and later); a guest whose machine-id (VMs)
 *                                   or nonce another live guest has is failed as a clone.
 *                                   restore: true from an agent that can be restored from
 *                                   a saved memory image (0.4.0 and later; see below)
 *   controller -> agent  config     {runner_name, jit_config, job_timeout_s, runner_command[]}
 *   agent -> controller  started    {pid, uid}
 *   agent -> controller  heartbeat  {}
 *   agent -> controller  exited     {code | signal, meaning, duration_s, timed_out,
 *                                    relaunches, jit_on_argv, argv_scans, report}
 *   controller -> agent  shutdown   {reason}
 *
 * Version 2 adds resuming, so that a guest outlives a restart of hatcheryd:
 *
 *   controller -> agent  resume     {}   first, on a channel reopened to a running guest
 *   agent -> controller  resumed    {state: "waiting" | "running" | "exited",
 *                                    runner_name, pid, boot_id, machine_id, nonce}
 *                                   machine_id and nonce as in its last hello
 *                                   (optional: an older agent sends neither):
 *                                   adopted guests are compared as new ones are,
 *                                   and a clone of a live guest is failed;
 *                                   then, for "exited", the kept `exited` message again
 *   controller -> agent  ack        {of: "exited"}
 *   agent -> controller  heartbeat  also while it waits for its config
 *
 * Restoring (a warm template: a guest saved while it waited for its config, then restored
 * for each runner; optional fields and a type an older agent ignores, so no new version):
 *
 *   controller -> agent  restore    {seed, time_ms}  first, on the channel of a restored
 *                                   guest: 64 bytes from the host's CSPRNG in hex, and the
 *                                   host's clock (the saved image's stopped at the save),
 *                                   which the agent sets
 *   agent -> controller  hello      again, with restored: true, after it added the seed to
 *                                   the kernel's pool (RNDADDENTROPY), reseeded the CRNG
 *                                   (RNDRESEEDCRNG), made a new machine-id (where
 *                                   /etc/machine-id exists) and drew a new nonce;
 *                                   rng_sample: 32 bytes from getrandom after the reseed,
 *                                   in hex, for tests to compare clones. boot_id is the
 *                                   template's: the kernel sets it once per boot.
 *
 * A version 2 agent keeps its `exited` message until the controller acknowledges it, and
 * powers off only then (or on `shutdown`): an exit while no controller listens is told
 * to the next one. It sends nothing while the host side of the channel is closed. A
 * version 1 agent ignores `resume` (it rejects the version), so the controller hears no
 * `resumed` and fails the guest after its grace, as it did before version 2.
 *
 * The runner is started as runner_command, with the JIT config in its environment as
 * ACTIONS_RUNNER_INPUT_JITCONFIG (the GitHub runner reads it like `--jitconfig`), never
 * on an argv; a trailing `--jitconfig` in runner_command is dropped. `report` is the JSON
 * object of at most AGENT_MAX_REPORT_BYTES the job wrote to $HATCHERY_REPORT_FILE: the
 * job's own words, untrusted. Fields added since version 1 are optional, so an older
 * agent is still understood. */
#ifndef HATCHERY_AGENT_PROTOCOL_H
#define HATCHERY_AGENT_PROTOCOL_H

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AGENT_PROTOCOL_VERSION     2
#define AGENT_PROTOCOL_MIN_VERSION 1
#define AGENT_CHANNEL_NAME         "org.hatchery.agent.0"
/* A JIT config is a few KB of base64; everything else is small. */
#define AGENT_MAX_LINE_BYTES (64 * 1024)
#define AGENT_HEARTBEAT_S    5
/* The controller closes a channel that sends more than this many messages a second. */
#define AGENT_MAX_MESSAGES_PER_S 20
#define AGENT_MAX_COMMAND_ARGS   64
#define AGENT_MAX_REPORT_BYTES   4096
/* The host's entropy a restored guest adds to its pool (`restore`'s seed). */
#define AGENT_RESTORE_SEED_BYTES 64
/* Inside the container, where the controller's socket appears. */
#define AGENT_CONTAINER_SOCKET "/run/hatchery/agent.sock"

enum agent_msg_type {
    AGENT_MSG_HELLO,
    AGENT_MSG_CONFIG,
    AGENT_MSG_STARTED,
    AGENT_MSG_HEARTBEAT,
    AGENT_MSG_EXITED,
    AGENT_MSG_SHUTDOWN,
    AGENT_MSG_RESUME,
    AGENT_MSG_RESUMED,
    AGENT_MSG_ACK,
    AGENT_MSG_RESTORE,
    AGENT_MSG_TYPE_MAX,
};

static const char *const agent_msg_type_names[AGENT_MSG_TYPE_MAX] = {
    [AGENT_MSG_HELLO] = "hello",     [AGENT_MSG_CONFIG] = "config",
    [AGENT_MSG_STARTED] = "started", [AGENT_MSG_HEARTBEAT] = "heartbeat",
    [AGENT_MSG_EXITED] = "exited",   [AGENT_MSG_SHUTDOWN] = "shutdown",
    [AGENT_MSG_RESUME] = "resume",   [AGENT_MSG_RESUMED] = "resumed",
    [AGENT_MSG_ACK] = "ack",         [AGENT_MSG_RESTORE] = "restore",
};

/* Parses one line (without its newline). On success returns 0, the object (a new
 * reference) and its type; otherwise a negative errno and a reason in `err`. The sender's
 * version is the object's "v". */
static inline int agent_msg_parse(const char *line, size_t len, json_t **ret_msg,
                                  enum agent_msg_type *ret_type, char *err, size_t err_size)
{
    if (len > AGENT_MAX_LINE_BYTES) {
        snprintf(err, err_size, "line longer than %d bytes", AGENT_MAX_LINE_BYTES);
        return -EMSGSIZE;
    }
    json_error_t jerr;
    json_t *msg = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(msg)) {
        snprintf(err, err_size, "not a JSON object: %s", msg ? "wrong type" : jerr.text);
        json_decref(msg);
        return -EBADMSG;
    }
    json_t *v = json_object_get(msg, "v");
    if (!json_is_integer(v) || json_integer_value(v) < AGENT_PROTOCOL_MIN_VERSION ||
        json_integer_value(v) > AGENT_PROTOCOL_VERSION) {
        snprintf(err, err_size, "protocol version is not %d to %d", AGENT_PROTOCOL_MIN_VERSION,
                 AGENT_PROTOCOL_VERSION);
        json_decref(msg);
        return -EPROTO;
    }
    const char *type = json_string_value(json_object_get(msg, "type"));
    for (int i = 0; type && i < AGENT_MSG_TYPE_MAX; i++) {
        if (strcmp(type, agent_msg_type_names[i]) == 0) {
            *ret_msg = msg;
            *ret_type = (enum agent_msg_type)i;
            return 0;
        }
    }
    snprintf(err, err_size, "unknown message type");
    json_decref(msg);
    return -EBADMSG;
}

/* A new message object of `type` in protocol `version`. */
static inline json_t *agent_msg_new_v(enum agent_msg_type type, int version)
{
    return json_pack("{s:i, s:s}", "v", version, "type", agent_msg_type_names[type]);
}

/* A new message object of `type`, in this side's own version. */
static inline json_t *agent_msg_new(enum agent_msg_type type)
{
    return agent_msg_new_v(type, AGENT_PROTOCOL_VERSION);
}

/* Encodes `msg` as one line with its newline (caller frees), or NULL when too long. */
static inline char *agent_msg_encode(json_t *msg, size_t *ret_len)
{
    char *text = json_dumps(msg, JSON_COMPACT);
    if (!text)
        return NULL;
    size_t n = strlen(text);
    char *line = n <= AGENT_MAX_LINE_BYTES ? (char *)malloc(n + 2) : NULL;
    if (line) {
        memcpy(line, text, n);
        line[n] = '\n';
        line[n + 1] = 0;
        *ret_len = n + 1;
    }
    /* A config line carries the JIT config. explicit_bzero, not memset: a memset right
     * before free is a dead store the optimiser removes (tests/unit/wipe-release.sh). */
    explicit_bzero(text, n);
    free(text);
    return line;
}

#endif
