/* Every admin command's answer (admin_protocol.h names the commands and their keys), for
 * the admin socket (admin.h): `server->data` is the daemon (daemon.h). */
#ifndef HATCHERY_ADMIN_COMMANDS_H
#define HATCHERY_ADMIN_COMMANDS_H

#include <jansson.h>

#include "admin.h"

/* The answer to one request, {"ok": true, ...} or {"ok": false, "error": ...}, given to
 * admin_conn_answer() now, or once the store has read what it needs. */
void admin_commands_answer(struct admin_server *server, struct admin_conn *conn, json_t *request);

#endif
