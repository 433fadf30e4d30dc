/* hatcheryd's side of the agent protocol (include/hatchery/agent_protocol.h) on one
 * connected stream. The guest is hostile: every byte is checked. An overlong line, a line
 * that is not a protocol message, a message out of order, a field of the wrong type, or
 * more than AGENT_MAX_MESSAGES_PER_S messages in a second closes the channel and reports
 * the reason once through on_error. The controller is never affected beyond that. */
#ifndef HATCHERY_AGENT_CHANNEL_H
#define HATCHERY_AGENT_CHANNEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "hatchery/agent_protocol.h"
#include "secret.h"

struct agent_channel;

struct agent_hello {
    char version[32];
    char arch[32];
    char boot_id[64];
    char machine_id[64];  /* /etc/machine-id: made at each boot, so distinct per guest */
    char nonce[72];       /* random bytes the agent drew once its CRNG was ready (hex);
                           * empty from an agent before 0.3.0 */
    bool crng_ready;      /* the kernel's CRNG was ready before hello */
    bool restore_capable; /* the agent takes `restore` (0.4.0 and later) */
    bool restored;        /* this hello follows a restore: new seed, machine-id, nonce */
    char rng_sample[72];  /* after a restore: 32 bytes of its CRNG's output (hex) */
};

struct agent_exit {
    int code;   /* -1 when the runner died of a signal */
    int signal; /* 0 when it exited */
    double duration_s;
    bool timed_out;
    char meaning[160];    /* the agent's reading of the Listener's return code */
    int relaunches;       /* Listener re-launches after return codes 2, 3 and 4 */
    bool jit_on_argv;     /* the agent found the JIT config on a command line */
    int argv_scans;       /* how often the agent looked */
    const json_t *report; /* the job's report object (<= AGENT_MAX_REPORT_BYTES), or NULL */
};

/* What a running guest's agent says when a new controller resumes it. */
enum agent_resumed_state {
    AGENT_RESUMED_WAITING, /* no config yet */
    AGENT_RESUMED_RUNNING, /* the runner runs (pid) */
    AGENT_RESUMED_EXITED,  /* the runner ended: its `exited` follows */
};

struct agent_resumed {
    enum agent_resumed_state state;
    int64_t pid;
    char runner_name[160];
    char boot_id[64];
    char machine_id[64]; /* "" from an agent older than 0.4.1 */
    char nonce[72];
};

struct agent_channel_events {
    void (*on_hello)(void *data, const struct agent_hello *hello);
    void (*on_started)(void *data, int64_t pid);
    void (*on_exited)(void *data, const struct agent_exit *exit);
    /* The answer to resume (agent_channel_resume). */
    void (*on_resumed)(void *data, const struct agent_resumed *resumed);
    /* The channel is closed: a protocol violation, or the guest hung up. Called once. */
    void (*on_error)(void *data, const char *reason);
};

/* Takes over a connected stream (a uv_pipe_t allocated with malloc); the channel closes
 * and frees it. */
int agent_channel_open(uv_stream_t *stream, const struct agent_channel_events *events, void *data,
                       struct agent_channel **ret_channel);
/* The same, for a channel reopened to a guest an earlier hatcheryd started: sends
 * `resume`, and expects `resumed` before anything else. An agent that speaks only
 * protocol version 1 cannot resume: the channel reports that through on_error. */
int agent_channel_resume(uv_stream_t *stream, const struct agent_channel_events *events, void *data,
                         struct agent_channel **ret_channel);
/* The same, for the channel of a guest restored from a saved memory image: sends
 * `restore` with `seed` (the host's entropy for the guest's CRNG) and the host's clock,
 * and expects a hello that says `restored`. The seed is wiped from our buffers once sent. */
int agent_channel_restore(uv_stream_t *stream, const struct agent_channel_events *events,
                          void *data, const unsigned char seed[AGENT_RESTORE_SEED_BYTES],
                          int64_t now_ms, struct agent_channel **ret_channel);
/* Sends `config` once, after hello. The JIT config leaves only here, and the buffers that
 * carried it are wiped once written. */
int agent_channel_send_config(struct agent_channel *channel, const char *runner_name,
                              const struct secret *jit_config, int64_t job_timeout_s,
                              const char *const *runner_command, size_t n_command);
/* After `exited`, once the exit is recorded: a version 2 agent keeps its exit (and its
 * guest up) until it hears this. */
int agent_channel_ack_exit(struct agent_channel *channel);
/* Asks the agent to stop its runner: -EPROTO unless one runs (started, not exited). */
int agent_channel_send_shutdown(struct agent_channel *channel, const char *reason);
/* When the agent last beat (wall clock, ms; heartbeats come while its runner runs, and
 * from a version 2 agent while it waits for its config), or 0 when it never has. Read by
 * the owner, not told: a beat is the most frequent message and changes nothing. */
int64_t agent_channel_heard_ms(const struct agent_channel *channel);
/* Closes without further callbacks. */
void agent_channel_close(struct agent_channel *channel);

#endif
