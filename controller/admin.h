/* The admin API: JSON request/response over a unix socket (mode 0660), one request per
 * connection, newline-terminated. The `hatchery` CLI is its client. */
#ifndef HATCHERY_ADMIN_H
#define HATCHERY_ADMIN_H

#include <jansson.h>
#include <stdbool.h>
#include <uv.h>

struct admin_server;
struct admin_conn;

/* Takes one request: answers it with admin_conn_answer(), now or later (after a store
 * read). `request` is borrowed. */
typedef void (*admin_handler_cb)(struct admin_server *server, struct admin_conn *conn,
                                 json_t *request);

/* The answer to `conn`'s request (taken; NULL: an internal error), exactly once. A client
 * that left or timed out meanwhile gets nothing, and `conn` is freed. */
void admin_conn_answer(struct admin_conn *conn, json_t *answer);

struct admin_server {
    uv_loop_t *loop;
    uv_pipe_t listener;
    admin_handler_cb handler;
    void *data;
    size_t n_conns;
    bool listening;
};

/* Creates the socket at `path` (replacing a stale one; refusing when a live daemon answers
 * there). */
int admin_server_start(struct admin_server *server, uv_loop_t *loop, const char *path,
                       admin_handler_cb handler, void *data, char *err, size_t err_size);
void admin_server_stop(struct admin_server *server);

#endif
