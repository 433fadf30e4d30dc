/* The admin socket's protocol, shared by hatcheryd (controller/hatcheryd.c) and the CLI
 * (controller/hatchery.c): one JSON object per request, `{"cmd": NAME, KEY: VALUE…}`, one
 * JSON answer with "ok". The command names and request keys are defined here only. */
#ifndef HATCHERY_ADMIN_PROTOCOL_H
#define HATCHERY_ADMIN_PROTOCOL_H

#include <string.h>

enum admin_command {
    ADMIN_JOBS, /* keys: status, limit */
    ADMIN_POOLS,
    ADMIN_CAPACITY,
    ADMIN_HOSTS,
    ADMIN_RUNNERS, /* keys: all, name, pool, host */
    ADMIN_DRAIN,   /* key: host */
    ADMIN_UNDRAIN, /* key: host */
    ADMIN_DELETE,  /* key: runner */
    ADMIN_LOGS,    /* key: runner */
    ADMIN_GITHUB,
    ADMIN_RELOAD,
    ADMIN_HEALTH,
    ADMIN_COMMAND_MAX,
};

static const char *const admin_command_names[ADMIN_COMMAND_MAX] = {
    [ADMIN_JOBS] = "jobs",       [ADMIN_POOLS] = "pools",     [ADMIN_CAPACITY] = "capacity",
    [ADMIN_HOSTS] = "hosts",     [ADMIN_RUNNERS] = "runners", [ADMIN_DRAIN] = "drain",
    [ADMIN_UNDRAIN] = "undrain", [ADMIN_DELETE] = "delete",   [ADMIN_LOGS] = "logs",
    [ADMIN_GITHUB] = "github",   [ADMIN_RELOAD] = "reload",   [ADMIN_HEALTH] = "health",
};

/* Request keys. */
#define ADMIN_KEY_CMD    "cmd"
#define ADMIN_KEY_STATUS "status"
#define ADMIN_KEY_LIMIT  "limit"
#define ADMIN_KEY_ALL    "all"
#define ADMIN_KEY_NAME   "name"
#define ADMIN_KEY_POOL   "pool"
#define ADMIN_KEY_HOST   "host"
#define ADMIN_KEY_RUNNER "runner"

/* The command named `name`, or ADMIN_COMMAND_MAX. */
static inline enum admin_command admin_command_parse(const char *name)
{
    for (int c = 0; name && c < ADMIN_COMMAND_MAX; c++)
        if (strcmp(name, admin_command_names[c]) == 0)
            return (enum admin_command)c;
    return ADMIN_COMMAND_MAX;
}

#endif
