/* libFuzzer target for the admin socket's request parser (admin.c): the bytes are what a
 * client writes on a real unix socket, then hangs up. A request that parses reaches the
 * handler, which answers with the request's own command echoed; anything else must get an
 * error answer or a close. The socket is 0660 for the operators' group, so its clients
 * are not all root. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "admin.h"
#include "hatchery/admin_protocol.h"
#include "log.h"

static uv_loop_t loop;
static struct admin_server server;
static char path[108];
static int handled;

/* What hatcheryd checks of a request before any handler (admin_protocol.h's table): the
 * command, and that each key is one a form of it sends. The answer echoes the command. */
static void on_request(struct admin_server *s, struct admin_conn *conn, json_t *request)
{
    (void)s;
    handled++;
    json_t *cmd = json_object_get(request, "cmd");
    enum admin_command command = admin_command_parse(json_string_value(cmd));
    const char *key;
    json_t *value;
    int refused = 0;
    json_object_foreach(request, key, value)
    {
        if (command < ADMIN_COMMAND_MAX && strcmp(key, ADMIN_KEY_CMD) != 0 &&
            !admin_key_allowed(command, key))
            refused++;
    }
    admin_conn_answer(conn,
                      json_pack("{s:b, s:O?, s:i}", "ok", command < ADMIN_COMMAND_MAX && !refused,
                                "cmd", cmd, "refused_keys", refused));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_level_set(LOG_LEVEL_MAX); /* nothing: every refused input is logged otherwise */
    uv_loop_init(&loop);
    snprintf(path, sizeof(path), "/dev/shm/hatchery-fuzz-admin-%d.sock", (int)getpid());
    char err[256];
    if (admin_server_start(&server, &loop, path, on_request, NULL, err, sizeof(err)) < 0) {
        fprintf(stderr, "admin: %s\n", err);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
        abort();
    int buf = 512 * 1024;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    uv_run(&loop, UV_RUN_NOWAIT); /* accept */
    size_t off = 0;
    while (off < size) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n <= 0) {
            uv_run(&loop, UV_RUN_NOWAIT);
            if (n < 0 && errno != EAGAIN)
                break;
            continue;
        }
        off += (size_t)n;
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    shutdown(fd, SHUT_WR);
    /* Until the server answers and closes, or gives up on us. */
    char answer[4096];
    bool ended = false;
    for (int i = 0; i < 20000 && !ended; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = recv(fd, answer, sizeof(answer), MSG_DONTWAIT);
        ended = n == 0 || (n < 0 && errno != EAGAIN);
    }
    if (!ended)
        abort(); /* every request gets an answer and a close */
    close(fd);
    for (int i = 0; i < 10; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    return 0;
}
