/* The runner lifecycle table; see runner_lifecycle.h. */
#include "runner_lifecycle.h"

#include <string.h>

const char *const runner_state_names[RUNNER_STATE_MAX] = {
    [RUNNER_PENDING] = "pending",     [RUNNER_CREATING] = "creating",
    [RUNNER_BOOTING] = "booting",     [RUNNER_CONFIGURED] = "configured",
    [RUNNER_IDLE] = "idle",           [RUNNER_BUSY] = "busy",
    [RUNNER_FINISHING] = "finishing", [RUNNER_DELETING] = "deleting",
    [RUNNER_DELETED] = "deleted",     [RUNNER_FAILED] = "failed",
};

const char *const runner_event_names[RUNNER_EVENT_MAX] = {
    [RUNNER_EV_RECORDED] = "recorded",
    [RUNNER_EV_DOMAIN_STARTED] = "domain_started",
    [RUNNER_EV_CONFIG_SENT] = "config_sent",
    [RUNNER_EV_RUNNER_STARTED] = "runner_started",
    [RUNNER_EV_JOB_IN_PROGRESS] = "job_in_progress",
    [RUNNER_EV_JOB_COMPLETED] = "job_completed",
    [RUNNER_EV_RUNNER_EXITED] = "runner_exited",
    [RUNNER_EV_GUEST_GONE] = "guest_gone",
    [RUNNER_EV_GITHUB_DELETED] = "github_deleted",
    [RUNNER_EV_FAIL] = "fail",
    [RUNNER_EV_TIMEOUT] = "timeout",
    [RUNNER_EV_ADOPTED] = "adopted",
    [RUNNER_EV_RETIRE] = "retire",
};

/* next[from][event] - 1 is the state `event` moves `from` to; 0 means refused. Stored
 * plus one so that every pair left out of this table is a refusal. */
#define TO(state) ((state) + 1)

static const signed char next[RUNNER_STATE_MAX][RUNNER_EVENT_MAX] = {
    [RUNNER_PENDING] =
        {
            [RUNNER_EV_RECORDED] = TO(RUNNER_CREATING),
            [RUNNER_EV_FAIL] = TO(RUNNER_FAILED),
            [RUNNER_EV_TIMEOUT] = TO(RUNNER_FAILED),
        },
    [RUNNER_CREATING] =
        {
            [RUNNER_EV_DOMAIN_STARTED] = TO(RUNNER_BOOTING),
            /* A container's agent can say hello before libvirt's create call returns. */
            [RUNNER_EV_CONFIG_SENT] = TO(RUNNER_CONFIGURED),
            [RUNNER_EV_FAIL] = TO(RUNNER_FAILED),
            [RUNNER_EV_TIMEOUT] = TO(RUNNER_FAILED),
        },
    [RUNNER_BOOTING] =
        {
            [RUNNER_EV_CONFIG_SENT] = TO(RUNNER_CONFIGURED),
            [RUNNER_EV_FAIL] = TO(RUNNER_FAILED),
            [RUNNER_EV_TIMEOUT] = TO(RUNNER_FAILED),
        },
    [RUNNER_CONFIGURED] =
        {
            [RUNNER_EV_DOMAIN_STARTED] = TO(RUNNER_CONFIGURED),
            [RUNNER_EV_RUNNER_STARTED] = TO(RUNNER_IDLE),
            [RUNNER_EV_JOB_IN_PROGRESS] = TO(RUNNER_BUSY),
            [RUNNER_EV_JOB_COMPLETED] = TO(RUNNER_FINISHING),
            [RUNNER_EV_RUNNER_EXITED] = TO(RUNNER_FINISHING),
            [RUNNER_EV_FAIL] = TO(RUNNER_FAILED),
            [RUNNER_EV_TIMEOUT] = TO(RUNNER_FAILED),
            [RUNNER_EV_ADOPTED] = TO(RUNNER_CONFIGURED),
            [RUNNER_EV_RETIRE] = TO(RUNNER_FINISHING),
        },
    [RUNNER_IDLE] =
        {
            [RUNNER_EV_JOB_IN_PROGRESS] = TO(RUNNER_BUSY),
            [RUNNER_EV_JOB_COMPLETED] = TO(RUNNER_FINISHING),
            [RUNNER_EV_RUNNER_EXITED] = TO(RUNNER_FINISHING),
            [RUNNER_EV_FAIL] = TO(RUNNER_FAILED),
            [RUNNER_EV_TIMEOUT] = TO(RUNNER_FAILED),
            [RUNNER_EV_ADOPTED] = TO(RUNNER_IDLE),
            [RUNNER_EV_RETIRE] = TO(RUNNER_FINISHING),
        },
    [RUNNER_BUSY] =
        {
            /* GitHub's in_progress can overtake the agent's started: still busy. */
            [RUNNER_EV_RUNNER_STARTED] = TO(RUNNER_BUSY),
            [RUNNER_EV_JOB_COMPLETED] = TO(RUNNER_FINISHING),
            [RUNNER_EV_RUNNER_EXITED] = TO(RUNNER_FINISHING),
            [RUNNER_EV_FAIL] = TO(RUNNER_FAILED),
            [RUNNER_EV_TIMEOUT] = TO(RUNNER_FAILED),
            [RUNNER_EV_ADOPTED] = TO(RUNNER_BUSY),
        },
    [RUNNER_FINISHING] =
        {
            [RUNNER_EV_JOB_COMPLETED] = TO(RUNNER_FINISHING),
            [RUNNER_EV_RUNNER_EXITED] = TO(RUNNER_FINISHING),
            [RUNNER_EV_GUEST_GONE] = TO(RUNNER_DELETING),
            [RUNNER_EV_FAIL] = TO(RUNNER_FAILED),
            /* The runner did not exit by itself: the scheduler tears its guest down. */
            [RUNNER_EV_TIMEOUT] = TO(RUNNER_FINISHING),
            [RUNNER_EV_ADOPTED] = TO(RUNNER_FINISHING),
        },
    [RUNNER_DELETING] =
        {
            [RUNNER_EV_GITHUB_DELETED] = TO(RUNNER_DELETED),
            /* The reconciler removes what a delete that never answered left behind. */
            [RUNNER_EV_TIMEOUT] = TO(RUNNER_DELETED),
        },
    [RUNNER_FAILED] =
        {
            [RUNNER_EV_GUEST_GONE] = TO(RUNNER_FAILED),
            [RUNNER_EV_GITHUB_DELETED] = TO(RUNNER_DELETED),
            [RUNNER_EV_TIMEOUT] = TO(RUNNER_DELETED),
        },
    [RUNNER_DELETED] = {0},
};

static const enum lifecycle_timeout timeouts[RUNNER_STATE_MAX] = {
    [RUNNER_PENDING] = LIFECYCLE_TIMEOUT_STORE,    [RUNNER_CREATING] = LIFECYCLE_TIMEOUT_BOOT,
    [RUNNER_BOOTING] = LIFECYCLE_TIMEOUT_BOOT,     [RUNNER_CONFIGURED] = LIFECYCLE_TIMEOUT_START,
    [RUNNER_IDLE] = LIFECYCLE_TIMEOUT_IDLE,        [RUNNER_BUSY] = LIFECYCLE_TIMEOUT_JOB,
    [RUNNER_FINISHING] = LIFECYCLE_TIMEOUT_FINISH, [RUNNER_DELETING] = LIFECYCLE_TIMEOUT_DELETE,
    [RUNNER_DELETED] = LIFECYCLE_TIMEOUT_NONE,     [RUNNER_FAILED] = LIFECYCLE_TIMEOUT_DELETE,
};

int runner_lifecycle_next(enum runner_state from, enum runner_event event)
{
    if ((unsigned)from >= RUNNER_STATE_MAX || (unsigned)event >= RUNNER_EVENT_MAX)
        return -1;
    return next[from][event] - 1;
}

enum lifecycle_timeout runner_lifecycle_timeout_kind(enum runner_state state)
{
    return (unsigned)state < RUNNER_STATE_MAX ? timeouts[state] : LIFECYCLE_TIMEOUT_NONE;
}

int64_t runner_lifecycle_timeout_ms(enum runner_state state, const struct lifecycle_limits *limits)
{
    int64_t s = 0;
    switch (runner_lifecycle_timeout_kind(state)) {
    case LIFECYCLE_TIMEOUT_NONE:
        return 0;
    case LIFECYCLE_TIMEOUT_STORE:
        s = LIFECYCLE_STORE_S;
        break;
    case LIFECYCLE_TIMEOUT_BOOT:
        s = limits->boot_timeout_s;
        break;
    case LIFECYCLE_TIMEOUT_START:
        /* The agent starts the runner as the config arrives: no longer than a boot. */
        s = limits->boot_timeout_s;
        break;
    case LIFECYCLE_TIMEOUT_IDLE:
        s = limits->idle_max_age_s;
        break;
    case LIFECYCLE_TIMEOUT_JOB:
        s = limits->job_timeout_s + LIFECYCLE_JOB_OVERRUN_S;
        break;
    case LIFECYCLE_TIMEOUT_FINISH:
        s = LIFECYCLE_FINISH_S;
        break;
    case LIFECYCLE_TIMEOUT_DELETE:
        s = LIFECYCLE_DELETE_S;
        break;
    }
    return s * 1000;
}

bool runner_state_live(enum runner_state state)
{
    return state < RUNNER_DELETED;
}

bool runner_state_unbusy(enum runner_state state)
{
    return state <= RUNNER_IDLE;
}

bool runner_state_heartbeats(enum runner_state state)
{
    return state == RUNNER_IDLE || state == RUNNER_BUSY;
}

int runner_state_from_name(const char *name)
{
    for (int i = 0; name && i < RUNNER_STATE_MAX; i++)
        if (strcmp(runner_state_names[i], name) == 0)
            return i;
    return -1;
}
