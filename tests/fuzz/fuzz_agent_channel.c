/* libFuzzer target for hatcheryd's side of the agent protocol (agent_channel.c), as a
 * hostile guest drives it: the input is what the guest writes into its channel, through a
 * real socketpair and libuv stream. The first byte holds flags: bit 0 resumes the channel
 * (as after a restart) instead of opening it; bit 1 answers a hello with a config, as the
 * scheduler does. Whatever the bytes, once the guest hangs up the channel must report
 * exactly one on_error, with no crash, leak or sanitizer report. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "agent_channel.h"
#include "log.h"
#include "secret.h"

static uv_loop_t loop;
static struct secret *jit;

struct run {
    struct agent_channel *channel;
    bool send_config;
    bool errored;
};

static void on_hello(void *data, const struct agent_hello *hello)
{
    struct run *r = data;
    (void)hello;
    if (r->send_config) {
        static const char *const cmd[] = {"/home/runner/run.sh"};
        agent_channel_send_config(r->channel, "hatchery-fuzz-1", jit, 3600, cmd, 1);
    }
}

static void on_started(void *data, int64_t pid)
{
    (void)data;
    (void)pid;
}

static void on_exited(void *data, const struct agent_exit *exit)
{
    struct run *r = data;
    (void)exit;
    agent_channel_ack_exit(r->channel);
}

static void on_resumed(void *data, const struct agent_resumed *resumed)
{
    (void)data;
    (void)resumed;
}

static void on_error(void *data, const char *reason)
{
    struct run *r = data;
    (void)reason;
    if (r->errored)
        abort(); /* the header promises one on_error */
    r->errored = true;
}

static const struct agent_channel_events events = {
    .on_hello = on_hello,
    .on_started = on_started,
    .on_exited = on_exited,
    .on_resumed = on_resumed,
    .on_error = on_error,
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_level_set(LOG_LEVEL_MAX); /* nothing: every refused input is logged otherwise */
    uv_loop_init(&loop);
    static const char text[] = "fuzz-jit-config";
    return secret_from_bytes(text, sizeof(text) - 1, &jit);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 128 * 1024)
        return 0;
    uint8_t flags = data[0];
    data++;
    size--;
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0)
        abort();
    int buf = 512 * 1024;
    setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    uv_pipe_t *pipe = malloc(sizeof(*pipe));
    uv_pipe_init(&loop, pipe, 0);
    if (uv_pipe_open(pipe, fds[0]) < 0)
        abort();
    struct run r = {.send_config = flags & 2};
    int e = flags & 1 ? agent_channel_resume((uv_stream_t *)pipe, &events, &r, &r.channel)
                      : agent_channel_open((uv_stream_t *)pipe, &events, &r, &r.channel);
    if (e < 0)
        abort();
    /* The guest's bytes, then its end closed: the channel reads them all, then EOF. */
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(fds[1], data + off, size - off);
        if (n <= 0)
            break;
        off += (size_t)n;
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    close(fds[1]);
    for (int i = 0; i < 1000 && !r.errored && uv_run(&loop, UV_RUN_NOWAIT); i++)
        ;
    if (!r.errored)
        abort(); /* the guest hung up: the channel must have said so */
    while (uv_run(&loop, UV_RUN_NOWAIT))
        ;
    return 0;
}
