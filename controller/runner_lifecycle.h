/* The runner lifecycle: every state a runner can be in, every event that moves it, and
 * how long it may stay in each state, as one table (runner_lifecycle.c). The scheduler
 * asks this module before it moves a runner; a move the table does not hold is refused
 * and logged by the caller, never applied.
 *
 *   pending --recorded--> creating --domain_started--> booting --config_sent--> configured
 *   configured --runner_started--> idle --job_in_progress--> busy
 *   idle | busy --job_completed | runner_exited--> finishing --guest_gone--> deleting
 *   deleting --github_deleted--> deleted
 *   any state before deleting --fail--> failed --guest_gone--> failed --github_deleted--> deleted
 *   configured | idle | busy | finishing --adopted--> (the same state, after a restart)
 *   configured | idle --retire--> finishing (surplus beyond demand, or its pool removed)
 *
 * Who owns what:
 *   - The scheduler owns the runner: it makes every decision in this table, runs every
 *     timeout, writes every state to the store, and is the only part that frees a runner,
 *     when it reaches `deleted` (and no GitHub request still holds it).
 *   - The provisioner owns the guest: it reports facts (domain started, hello, runner
 *     started, exited, failed, gone) and frees the guest itself after `gone`. It decides
 *     nothing about the runner.
 *   - The agent channel owns the protocol: it checks each message's order and shape and
 *     reports a violation once, as a failure of the guest.
 *
 * Timeouts (the scheduler's per-runner timer; entering a state restarts it):
 *   pending     LIFECYCLE_STORE_S       the store never recorded the runner      -> failed
 *   creating    boot_timeout_s          no domain and JIT config in time         -> failed
 *   booting     boot_timeout_s          no hello from the agent                  -> failed
 *   configured  boot_timeout_s          the runner never reported `started`      -> failed
 *   idle        idle_max_age_s          idle too long                            -> failed
 *   busy        job_timeout_s + LIFECYCLE_JOB_OVERRUN_S (the agent stops the job
 *               at job_timeout_s; this is for an agent that does not)            -> failed
 *   finishing   LIFECYCLE_FINISH_S      the runner did not exit after its job    -> teardown
 *   deleting    LIFECYCLE_DELETE_S      GitHub's delete never answered           -> deleted
 *   failed      LIFECYCLE_DELETE_S      the teardown never ended                 -> deleted
 * Besides, in idle and busy a guest whose agent sent no heartbeat for
 * heartbeat_timeout_s is hung: it fails and is replaced. */
#ifndef HATCHERY_RUNNER_LIFECYCLE_H
#define HATCHERY_RUNNER_LIFECYCLE_H

#include <stdbool.h>
#include <stdint.h>

enum runner_state {
    RUNNER_PENDING,
    RUNNER_CREATING,
    RUNNER_BOOTING,
    RUNNER_CONFIGURED,
    RUNNER_IDLE,
    RUNNER_BUSY,
    RUNNER_FINISHING,
    RUNNER_DELETING,
    RUNNER_DELETED,
    RUNNER_FAILED,
    RUNNER_STATE_MAX,
};

enum runner_event {
    RUNNER_EV_RECORDED,        /* the store holds the runner's record */
    RUNNER_EV_DOMAIN_STARTED,  /* the provisioner started the guest */
    RUNNER_EV_CONFIG_SENT,     /* hello and the JIT config met: the config went to the agent */
    RUNNER_EV_RUNNER_STARTED,  /* the agent started the runner */
    RUNNER_EV_JOB_IN_PROGRESS, /* GitHub gave the runner a job */
    RUNNER_EV_JOB_COMPLETED,   /* GitHub says the runner's job completed */
    RUNNER_EV_RUNNER_EXITED,   /* the agent reports the runner's exit */
    RUNNER_EV_GUEST_GONE,      /* the provisioner removed the guest */
    RUNNER_EV_GITHUB_DELETED,  /* the GitHub runner is deleted (or never existed) */
    RUNNER_EV_FAIL,            /* anything that ends the runner early */
    RUNNER_EV_TIMEOUT,         /* the state's timeout fired */
    RUNNER_EV_ADOPTED,         /* a new hatcheryd re-attached the runner's guest */
    RUNNER_EV_RETIRE,          /* not needed any more (surplus, its pool removed): it goes */
    RUNNER_EVENT_MAX,
};

/* Fixed timeouts, in seconds. */
#define LIFECYCLE_STORE_S       60
#define LIFECYCLE_JOB_OVERRUN_S 300
#define LIFECYCLE_FINISH_S      120
#define LIFECYCLE_DELETE_S      300

/* What a state's timeout is measured against. */
enum lifecycle_timeout {
    LIFECYCLE_TIMEOUT_NONE,
    LIFECYCLE_TIMEOUT_STORE,
    LIFECYCLE_TIMEOUT_BOOT,
    LIFECYCLE_TIMEOUT_START,
    LIFECYCLE_TIMEOUT_IDLE,
    LIFECYCLE_TIMEOUT_JOB,
    LIFECYCLE_TIMEOUT_FINISH,
    LIFECYCLE_TIMEOUT_DELETE,
};

/* The pool's settings the timeouts use. */
struct lifecycle_limits {
    int64_t boot_timeout_s;
    int64_t idle_max_age_s;
    int64_t job_timeout_s;
};

extern const char *const runner_state_names[RUNNER_STATE_MAX];
extern const char *const runner_event_names[RUNNER_EVENT_MAX];

/* The state `event` moves `from` to, or -1 when the table does not allow it. */
int runner_lifecycle_next(enum runner_state from, enum runner_event event);
/* The state's timeout in milliseconds under `limits`, or 0 when it has none. */
int64_t runner_lifecycle_timeout_ms(enum runner_state state, const struct lifecycle_limits *limits);
enum lifecycle_timeout runner_lifecycle_timeout_kind(enum runner_state state);
/* A runner in this state holds a guest or may still get one (it counts against
 * max_runners): every state before deleted; not failed, whose teardown has begun. */
bool runner_state_live(enum runner_state state);
/* A runner in this state can still take a job (demand counts it as supply). */
bool runner_state_unbusy(enum runner_state state);
/* The agent must send heartbeats in this state. */
bool runner_state_heartbeats(enum runner_state state);
/* Looks a state up by its name (as stored); -1 when unknown. */
int runner_state_from_name(const char *name);

#endif
