/* The admin socket's protocol, shared by hatcheryd (controller/hatcheryd.c) and the CLI
 * (controller/hatchery.c): one JSON object per request, `{"cmd": NAME, KEY: VALUE…}`, one
 * JSON answer with "ok". The command names, their forms on the CLI's line, and the request
 * keys are defined here only. */
#ifndef HATCHERY_ADMIN_PROTOCOL_H
#define HATCHERY_ADMIN_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
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

/* The options a command may take on the CLI's line, each carried in the request under its
 * key: `--status S` as "status": "S", `--all` as "all": true. */
enum admin_option {
    ADMIN_OPT_STATUS,
    ADMIN_OPT_LIMIT,
    ADMIN_OPT_ALL,
    ADMIN_OPT_POOL,
    ADMIN_OPT_HOST,
    ADMIN_OPT_MAX,
};

/* What completes an option's value or an operand: nothing, or names the daemon knows. */
enum admin_names {
    ADMIN_NAMES_NONE,
    ADMIN_NAMES_JOB_STATUS, /* the job statuses a listing filters by */
    ADMIN_NAMES_RUNNERS,
    ADMIN_NAMES_HOSTS,
    ADMIN_NAMES_POOLS,
};

struct admin_option_spec {
    const char *name;  /* the long option, without its dashes */
    const char *key;   /* the request key */
    const char *value; /* the value's name in help, or NULL for a flag (sent as true) */
    enum admin_names names;
};

static const struct admin_option_spec admin_options[ADMIN_OPT_MAX] = {
    [ADMIN_OPT_STATUS] = {"status", ADMIN_KEY_STATUS, "S", ADMIN_NAMES_JOB_STATUS},
    [ADMIN_OPT_LIMIT] = {"limit", ADMIN_KEY_LIMIT, "N", ADMIN_NAMES_NONE},
    [ADMIN_OPT_ALL] = {"all", ADMIN_KEY_ALL, NULL, ADMIN_NAMES_NONE},
    [ADMIN_OPT_POOL] = {"pool", ADMIN_KEY_POOL, "P", ADMIN_NAMES_POOLS},
    [ADMIN_OPT_HOST] = {"host", ADMIN_KEY_HOST, "H", ADMIN_NAMES_HOSTS},
};

/* The statuses `jobs --status` takes (job.h's, and "waiting": queued without a runner). */
static const char *const admin_job_statuses[] = {"waiting", "queued", "in_progress", "completed",
                                                 NULL};

#define ADMIN_OPT(o) (1u << (o))

/* One form of a command on the CLI's line and what it sends: the one table that the CLI's
 * parsing, help and completion and hatcheryd's check of a request are made from. A command
 * may have several forms (`runners`, `runners show RUNNER`); hatcheryd accepts in a request
 * the keys of any of its command's forms. */
struct admin_form {
    enum admin_command command;
    const char *sub;         /* a fixed word after the command (`show`), or NULL */
    const char *operand;     /* the one word it takes after that (HOST, RUNNER), or NULL */
    const char *operand_key; /* the request key the operand goes in */
    enum admin_names operand_names;
    bool implies_all; /* also sends "all": true (`runners show` finds ended runners too) */
    unsigned options; /* ADMIN_OPT(o) for each option it takes */
    const char *help;
};

static const struct admin_form admin_forms[] = {
    {ADMIN_JOBS, NULL, NULL, NULL, ADMIN_NAMES_NONE, false,
     ADMIN_OPT(ADMIN_OPT_STATUS) | ADMIN_OPT(ADMIN_OPT_LIMIT),
     "jobs GitHub told us about, newest first, and why a queued one waits (S: waiting, "
     "queued, in_progress, completed)"},
    {ADMIN_POOLS, NULL, NULL, NULL, ADMIN_NAMES_NONE, false, 0, "configured pools"},
    {ADMIN_CAPACITY, NULL, NULL, NULL, ADMIN_NAMES_NONE, false, 0,
     "per pool: runners, jobs by status, why jobs wait"},
    {ADMIN_HOSTS, NULL, NULL, NULL, ADMIN_NAMES_NONE, false, 0,
     "libvirt hosts: state (and why), drained, transport, vCPUs, memory and guests used, "
     "guest isolation; warm templates"},
    {ADMIN_RUNNERS, NULL, NULL, NULL, ADMIN_NAMES_NONE, false,
     ADMIN_OPT(ADMIN_OPT_ALL) | ADMIN_OPT(ADMIN_OPT_POOL) | ADMIN_OPT(ADMIN_OPT_HOST),
     "live runners (--all: ended ones too, with reasons), of one pool or host"},
    {ADMIN_RUNNERS, "show", "RUNNER", ADMIN_KEY_NAME, ADMIN_NAMES_RUNNERS, true, 0,
     "every field of one runner, ended or not"},
    {ADMIN_DRAIN, NULL, "HOST", ADMIN_KEY_HOST, ADMIN_NAMES_HOSTS, false, 0,
     "stop placing new guests on HOST"},
    {ADMIN_UNDRAIN, NULL, "HOST", ADMIN_KEY_HOST, ADMIN_NAMES_HOSTS, false, 0,
     "place new guests on HOST again"},
    {ADMIN_DELETE, NULL, "RUNNER", ADMIN_KEY_RUNNER, ADMIN_NAMES_RUNNERS, false, 0,
     "tear a runner down now (guest, disk, GitHub runner)"},
    {ADMIN_LOGS, NULL, "RUNNER", ADMIN_KEY_RUNNER, ADMIN_NAMES_RUNNERS, false, 0,
     "the runner's console log, kept after teardown"},
    {ADMIN_GITHUB, NULL, NULL, NULL, ADMIN_NAMES_NONE, false, 0,
     "auth mode, installation, rate-limit budget, last error"},
    {ADMIN_RELOAD, NULL, NULL, NULL, ADMIN_NAMES_NONE, false, 0,
     "re-read the config: pools and hosts added, removed and changed; a bad config is "
     "refused and the running one stays"},
    {ADMIN_HEALTH, NULL, NULL, NULL, ADMIN_NAMES_NONE, false, 0,
     "version, controller id and uptime"},
};

#define ADMIN_N_FORMS (sizeof(admin_forms) / sizeof(admin_forms[0]))

/* Whether a request of `command` may carry `key` (besides "cmd"): one of its forms sends it. */
static inline bool admin_key_allowed(enum admin_command command, const char *key)
{
    for (size_t f = 0; f < ADMIN_N_FORMS; f++) {
        const struct admin_form *form = &admin_forms[f];
        if (form->command != command)
            continue;
        if ((form->operand_key && strcmp(key, form->operand_key) == 0) ||
            (form->implies_all && strcmp(key, ADMIN_KEY_ALL) == 0))
            return true;
        for (int o = 0; o < ADMIN_OPT_MAX; o++)
            if ((form->options & ADMIN_OPT(o)) && strcmp(key, admin_options[o].key) == 0)
                return true;
    }
    return false;
}

/* The command named `name`, or ADMIN_COMMAND_MAX. */
static inline enum admin_command admin_command_parse(const char *name)
{
    for (int c = 0; name && c < ADMIN_COMMAND_MAX; c++)
        if (strcmp(name, admin_command_names[c]) == 0)
            return (enum admin_command)c;
    return ADMIN_COMMAND_MAX;
}

#endif
