/* Every admin command's answer (admin_protocol.h names the commands and their keys), for
 * the admin socket (admin.h): `server->data` is the daemon (daemon.h). */
#ifndef HATCHERY_ADMIN_COMMANDS_H
#define HATCHERY_ADMIN_COMMANDS_H

#include <jansson.h>

#include "admin.h"

/* The answer to one request: {"ok": true, ...} or {"ok": false, "error": ...}. */
json_t *admin_commands_answer(struct admin_server *server, json_t *request);

#endif
