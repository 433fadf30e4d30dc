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
    ADMIN_ROTATE,  /* key: pool */
    ADMIN_GITHUB,
    ADMIN_RELOAD,
    ADMIN_HEALTH,
    ADMIN_LEADER,
    ADMIN_COMMAND_MAX,
};

static const char *const admin_command_names[ADMIN_COMMAND_MAX] = {
    [ADMIN_JOBS] = "jobs",       [ADMIN_POOLS] = "pools",     [ADMIN_CAPACITY] = "capacity",
    [ADMIN_HOSTS] = "hosts",     [ADMIN_RUNNERS] = "runners", [ADMIN_DRAIN] = "drain",
    [ADMIN_UNDRAIN] = "undrain", [ADMIN_DELETE] = "delete",   [ADMIN_LOGS] = "logs",
    [ADMIN_GITHUB] = "github",   [ADMIN_RELOAD] = "reload",   [ADMIN_HEALTH] = "health",
    [ADMIN_ROTATE] = "rotate",   [ADMIN_LEADER] = "leader",
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
#define ADMIN_KEY_FORCE  "force"
#define ADMIN_KEY_SINCE  "since" /* logs: bytes from this offset of the whole log on */

/* The options a command may take on the CLI's line, each carried in the request under its
 * key: `--status S` as "status": "S", `--all` as "all": true. */
enum admin_option {
    ADMIN_OPT_STATUS,
    ADMIN_OPT_LIMIT,
    ADMIN_OPT_ALL,
    ADMIN_OPT_POOL,
    ADMIN_OPT_HOST,
    ADMIN_OPT_FORCE,
    ADMIN_OPT_FOLLOW, /* the CLI's own: it asks again from where the last answer ended */
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
    [ADMIN_OPT_FORCE] = {"force", ADMIN_KEY_FORCE, NULL, ADMIN_NAMES_NONE},
    [ADMIN_OPT_FOLLOW] = {"follow", ADMIN_KEY_SINCE, NULL, ADMIN_NAMES_NONE},
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
    bool listing;     /* answers with a table of named rows: -o name, -o wide, --no-headers */
    unsigned options; /* ADMIN_OPT(o) for each option it takes */
    const char *help;
};

static const struct admin_form admin_forms[] = {
    {.command = ADMIN_JOBS,
     .listing = true,
     .options = ADMIN_OPT(ADMIN_OPT_STATUS) | ADMIN_OPT(ADMIN_OPT_LIMIT),
     .help = "jobs GitHub told us about, newest first, and why a queued one waits (S: "
             "waiting, queued, in_progress, completed)"},
    {.command = ADMIN_POOLS, .listing = true, .help = "configured pools"},
    {.command = ADMIN_CAPACITY, .help = "per pool: runners, jobs by status, why jobs wait"},
    {.command = ADMIN_HOSTS,
     .listing = true,
     .help = "libvirt hosts: state (and why), drained, transport, vCPUs, memory and guests "
             "used, guest isolation; warm templates"},
    {.command = ADMIN_RUNNERS,
     .listing = true,
     .options = ADMIN_OPT(ADMIN_OPT_ALL) | ADMIN_OPT(ADMIN_OPT_POOL) | ADMIN_OPT(ADMIN_OPT_HOST),
     .help = "live runners (--all: ended ones too, with reasons), of one pool or host"},
    {.command = ADMIN_RUNNERS,
     .sub = "show",
     .operand = "RUNNER",
     .operand_key = ADMIN_KEY_NAME,
     .operand_names = ADMIN_NAMES_RUNNERS,
     .implies_all = true,
     .help = "every field of one runner, ended or not"},
    {.command = ADMIN_DRAIN,
     .operand = "HOST",
     .operand_key = ADMIN_KEY_HOST,
     .operand_names = ADMIN_NAMES_HOSTS,
     .help = "stop placing new guests on HOST"},
    {.command = ADMIN_UNDRAIN,
     .operand = "HOST",
     .operand_key = ADMIN_KEY_HOST,
     .operand_names = ADMIN_NAMES_HOSTS,
     .help = "place new guests on HOST again"},
    {.command = ADMIN_DELETE,
     .operand = "RUNNER",
     .operand_key = ADMIN_KEY_RUNNER,
     .operand_names = ADMIN_NAMES_RUNNERS,
     .options = ADMIN_OPT(ADMIN_OPT_FORCE),
     .help = "tear a runner down now (guest, disk, GitHub runner); --force: also what is left "
             "of one that ended or is unknown, on every host and on GitHub"},
    {.command = ADMIN_LOGS,
     .operand = "RUNNER",
     .operand_key = ADMIN_KEY_RUNNER,
     .operand_names = ADMIN_NAMES_RUNNERS,
     .options = ADMIN_OPT(ADMIN_OPT_FOLLOW),
     .help = "the runner's console log, kept after teardown; -f: follow it until the runner "
             "ends"},
    {.command = ADMIN_ROTATE,
     .options = ADMIN_OPT(ADMIN_OPT_POOL),
     .help = "retire now the idle runners whose image was replaced since they booted (of one "
             "pool), as rotate_outdated does every 5 s; demand replaces them"},
    {.command = ADMIN_GITHUB, .help = "auth mode, installation, rate-limit budget, last error"},
    {.command = ADMIN_RELOAD,
     .help = "re-read the config: pools and hosts added, removed and changed; a bad config "
             "is refused and the running one stays"},
    {.command = ADMIN_HEALTH, .help = "version, controller id and uptime"},
    {.command = ADMIN_LEADER,
     .help = "with a PostgreSQL store: which instance leads, at which epoch and since when, "
             "and each instance's last renewal of the lease"},
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
