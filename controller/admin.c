/* Admin socket server on libuv; see admin.h. */
#include "admin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "hatchery/limits.h"
#include "log.h"

struct admin_conn {
    struct admin_server *server;
    uv_pipe_t pipe;
    uv_timer_t timer;
    int handles_open;
    char *buf;
    size_t len;
    bool answered;
    bool waiting; /* the request went to the handler, whose answer is still to come */
    uv_write_t write_req;
    char *reply;
};

static void on_conn_closed(uv_handle_t *handle)
{
    struct admin_conn *c = handle->data;
    if (--c->handles_open > 0)
        return;
    c->server->n_conns--;
    if (c->waiting)
        return; /* freed by its answer */
    free(c->buf);
    free(c->reply);
    free(c);
}

static void conn_close(struct admin_conn *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->pipe)) {
        uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
        uv_close((uv_handle_t *)&c->timer, on_conn_closed);
    }
}

static void on_written(uv_write_t *req, int status)
{
    (void)status;
    conn_close(req->data);
}

static void reply(struct admin_conn *c, json_t *answer)
{
    c->answered = true;
    uv_read_stop((uv_stream_t *)&c->pipe);
    char *text = json_dumps(answer, JSON_COMPACT);
    json_decref(answer);
    if (!text) {
        conn_close(c);
        return;
    }
    size_t n = strlen(text);
    c->reply = malloc(n + 2);
    if (c->reply) {
        memcpy(c->reply, text, n);
        c->reply[n] = '\n';
        c->reply[n + 1] = 0;
    }
    free(text);
    if (!c->reply) {
        conn_close(c);
        return;
    }
    uv_buf_t buf = uv_buf_init(c->reply, (unsigned)(n + 1));
    c->write_req.data = c;
    if (uv_write(&c->write_req, (uv_stream_t *)&c->pipe, &buf, 1, on_written) < 0)
        conn_close(c);
}

static json_t *error_reply(const char *msg)
{
    return json_pack("{s:b, s:s}", "ok", 0, "error", msg);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    static char read_buf[16 * 1024];
    (void)handle;
    *buf = uv_buf_init(read_buf, sizeof(read_buf));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct admin_conn *c = stream->data;
    if (c->answered)
        return;
    if (nread < 0) {
        if (nread == UV_EOF && c->len > 0) {
            /* A request without its newline: take what came. */
        } else {
            conn_close(c);
            return;
        }
    } else {
        if (c->len + (size_t)nread > ADMIN_MAX_REQUEST_BYTES) {
            reply(c, error_reply("request too large"));
            return;
        }
        char *grown = realloc(c->buf, c->len + (size_t)nread + 1);
        if (!grown) {
            conn_close(c);
            return;
        }
        c->buf = grown;
        memcpy(c->buf + c->len, buf->base, (size_t)nread);
        c->len += (size_t)nread;
        c->buf[c->len] = 0;
        if (!memchr(c->buf, '\n', c->len))
            return;
    }
    json_error_t jerr;
    json_t *request = json_loadb(c->buf, c->len, JSON_DISABLE_EOF_CHECK, &jerr);
    if (!request || !json_is_object(request)) {
        json_decref(request);
        reply(c, error_reply("request is not a JSON object"));
        return;
    }
    c->answered = c->waiting = true;
    uv_read_stop((uv_stream_t *)&c->pipe);
    c->server->handler(c->server, c, request);
    json_decref(request);
}

void admin_conn_answer(struct admin_conn *c, json_t *answer)
{
    c->waiting = false;
    if (c->handles_open == 0) {
        /* Closed while the answer was made. */
        json_decref(answer);
        free(c->buf);
        free(c);
        return;
    }
    if (uv_is_closing((uv_handle_t *)&c->pipe)) {
        json_decref(answer);
        return;
    }
    reply(c, answer ? answer : error_reply("internal error"));
}

static void on_timeout(uv_timer_t *timer)
{
    conn_close(timer->data);
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct admin_server *s = listener->data;
    if (status < 0)
        return;
    struct admin_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return;
    c->server = s;
    uv_pipe_init(s->loop, &c->pipe, 0);
    uv_timer_init(s->loop, &c->timer);
    c->pipe.data = c->timer.data = c;
    c->handles_open = 2;
    s->n_conns++;
    if (uv_accept(listener, (uv_stream_t *)&c->pipe) < 0 || s->n_conns > ADMIN_MAX_CONNECTIONS) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, on_timeout, ADMIN_TIMEOUT_MS, 0);
    uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
}

/* A socket file left by a daemon that died is removed; one that answers is not ours. */
static int clear_stale_socket(const char *path, char *err, size_t err_size)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, err_size, "%s exists and is not a socket", path);
        return -EEXIST;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
    int live = fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0;
    if (fd >= 0)
        close(fd);
    if (live) {
        snprintf(err, err_size, "another daemon is answering on %s", path);
        return -EADDRINUSE;
    }
    unlink(path);
    return 0;
}

int admin_server_start(struct admin_server *s, uv_loop_t *loop, const char *path,
                       admin_handler_cb handler, void *data, char *err, size_t err_size)
{
    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->handler = handler;
    s->data = data;
    if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        snprintf(err, err_size, "admin socket path %s is too long", path);
        return -ENAMETOOLONG;
    }
    int r = clear_stale_socket(path, err, err_size);
    if (r < 0)
        return r;
    uv_pipe_init(loop, &s->listener, 0);
    s->listener.data = s;
    mode_t old = umask(0117);
    r = uv_pipe_bind(&s->listener, path);
    umask(old);
    if (r == 0)
        r = chmod(path, 0660) < 0 ? -errno : 0;
    if (r == 0)
        r = uv_listen((uv_stream_t *)&s->listener, 64, on_connection);
    if (r < 0) {
        snprintf(err, err_size, "cannot listen on admin socket %s: %s", path, uv_strerror(r));
        uv_close((uv_handle_t *)&s->listener, NULL);
        return r;
    }
    s->listening = true;
    return 0;
}

void admin_server_stop(struct admin_server *s)
{
    if (!s->listening)
        return;
    s->listening = false;
    uv_close((uv_handle_t *)&s->listener, NULL);
}
