/* The runner lifecycle table: every legal move gives its state, every other (state, event)
 * pair is refused, and every state's timeout is the one the header documents. The legal
 * moves are written out here a second time, from the header's diagram, so that a change
 * to the table must be a change to this list too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <string.h>

#include "runner_lifecycle.h"

struct move {
    enum runner_state from;
    enum runner_event event;
    enum runner_state to;
};

static const struct move legal[] = {
    {RUNNER_PENDING, RUNNER_EV_RECORDED, RUNNER_CREATING},
    {RUNNER_PENDING, RUNNER_EV_FAIL, RUNNER_FAILED},
    {RUNNER_PENDING, RUNNER_EV_TIMEOUT, RUNNER_FAILED},
    {RUNNER_CREATING, RUNNER_EV_DOMAIN_STARTED, RUNNER_BOOTING},
    {RUNNER_CREATING, RUNNER_EV_CONFIG_SENT, RUNNER_CONFIGURED},
    {RUNNER_CREATING, RUNNER_EV_FAIL, RUNNER_FAILED},
    {RUNNER_CREATING, RUNNER_EV_TIMEOUT, RUNNER_FAILED},
    {RUNNER_BOOTING, RUNNER_EV_CONFIG_SENT, RUNNER_CONFIGURED},
    {RUNNER_BOOTING, RUNNER_EV_FAIL, RUNNER_FAILED},
    {RUNNER_BOOTING, RUNNER_EV_TIMEOUT, RUNNER_FAILED},
    {RUNNER_CONFIGURED, RUNNER_EV_DOMAIN_STARTED, RUNNER_CONFIGURED},
    {RUNNER_CONFIGURED, RUNNER_EV_RUNNER_STARTED, RUNNER_IDLE},
    {RUNNER_CONFIGURED, RUNNER_EV_JOB_IN_PROGRESS, RUNNER_BUSY},
    {RUNNER_CONFIGURED, RUNNER_EV_JOB_COMPLETED, RUNNER_FINISHING},
    {RUNNER_CONFIGURED, RUNNER_EV_RUNNER_EXITED, RUNNER_FINISHING},
    {RUNNER_CONFIGURED, RUNNER_EV_FAIL, RUNNER_FAILED},
    {RUNNER_CONFIGURED, RUNNER_EV_TIMEOUT, RUNNER_FAILED},
    {RUNNER_CONFIGURED, RUNNER_EV_ADOPTED, RUNNER_CONFIGURED},
    {RUNNER_CONFIGURED, RUNNER_EV_RETIRE, RUNNER_FINISHING},
    {RUNNER_IDLE, RUNNER_EV_JOB_IN_PROGRESS, RUNNER_BUSY},
    {RUNNER_IDLE, RUNNER_EV_JOB_COMPLETED, RUNNER_FINISHING},
    {RUNNER_IDLE, RUNNER_EV_RUNNER_EXITED, RUNNER_FINISHING},
    {RUNNER_IDLE, RUNNER_EV_FAIL, RUNNER_FAILED},
    {RUNNER_IDLE, RUNNER_EV_TIMEOUT, RUNNER_FAILED},
    {RUNNER_IDLE, RUNNER_EV_ADOPTED, RUNNER_IDLE},
    {RUNNER_IDLE, RUNNER_EV_RETIRE, RUNNER_FINISHING},
    {RUNNER_BUSY, RUNNER_EV_RUNNER_STARTED, RUNNER_BUSY},
    {RUNNER_BUSY, RUNNER_EV_JOB_COMPLETED, RUNNER_FINISHING},
    {RUNNER_BUSY, RUNNER_EV_RUNNER_EXITED, RUNNER_FINISHING},
    {RUNNER_BUSY, RUNNER_EV_FAIL, RUNNER_FAILED},
    {RUNNER_BUSY, RUNNER_EV_TIMEOUT, RUNNER_FAILED},
    {RUNNER_BUSY, RUNNER_EV_ADOPTED, RUNNER_BUSY},
    {RUNNER_FINISHING, RUNNER_EV_JOB_COMPLETED, RUNNER_FINISHING},
    {RUNNER_FINISHING, RUNNER_EV_RUNNER_EXITED, RUNNER_FINISHING},
    {RUNNER_FINISHING, RUNNER_EV_GUEST_GONE, RUNNER_DELETING},
    {RUNNER_FINISHING, RUNNER_EV_FAIL, RUNNER_FAILED},
    {RUNNER_FINISHING, RUNNER_EV_TIMEOUT, RUNNER_FINISHING},
    {RUNNER_FINISHING, RUNNER_EV_ADOPTED, RUNNER_FINISHING},
    {RUNNER_DELETING, RUNNER_EV_GITHUB_DELETED, RUNNER_DELETED},
    {RUNNER_DELETING, RUNNER_EV_TIMEOUT, RUNNER_DELETED},
    {RUNNER_FAILED, RUNNER_EV_GUEST_GONE, RUNNER_FAILED},
    {RUNNER_FAILED, RUNNER_EV_GITHUB_DELETED, RUNNER_DELETED},
    {RUNNER_FAILED, RUNNER_EV_TIMEOUT, RUNNER_DELETED},
};

static const struct move *find_legal(int from, int event)
{
    for (size_t i = 0; i < sizeof(legal) / sizeof(legal[0]); i++)
        if ((int)legal[i].from == from && (int)legal[i].event == event)
            return &legal[i];
    return NULL;
}

static void every_legal_move_gives_its_state(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(legal) / sizeof(legal[0]); i++) {
        int to = runner_lifecycle_next(legal[i].from, legal[i].event);
        if (to != (int)legal[i].to)
            fail_msg("%s --%s--> %s expected, the table gives %d",
                     runner_state_names[legal[i].from], runner_event_names[legal[i].event],
                     runner_state_names[legal[i].to], to);
    }
}

static void every_other_move_is_refused(void **state)
{
    (void)state;
    int refused = 0;
    for (int from = 0; from < RUNNER_STATE_MAX; from++)
        for (int ev = 0; ev < RUNNER_EVENT_MAX; ev++) {
            if (find_legal(from, ev))
                continue;
            int to = runner_lifecycle_next((enum runner_state)from, (enum runner_event)ev);
            if (to != -1)
                fail_msg("%s --%s--> %d should be refused", runner_state_names[from],
                         runner_event_names[ev], to);
            refused++;
        }
    assert_int_equal(refused,
                     RUNNER_STATE_MAX * RUNNER_EVENT_MAX - (int)(sizeof(legal) / sizeof(legal[0])));
    /* Out of range is refused, not read past the table. */
    assert_int_equal(runner_lifecycle_next(RUNNER_STATE_MAX, RUNNER_EV_FAIL), -1);
    assert_int_equal(runner_lifecycle_next(RUNNER_IDLE, RUNNER_EVENT_MAX), -1);
    assert_int_equal(runner_lifecycle_next((enum runner_state) - 1, RUNNER_EV_FAIL), -1);
}

/* Nothing leaves deleted, and every state reaches deleted. */
static void deleted_is_final_and_reachable_from_everywhere(void **state)
{
    (void)state;
    for (int ev = 0; ev < RUNNER_EVENT_MAX; ev++)
        assert_int_equal(runner_lifecycle_next(RUNNER_DELETED, (enum runner_event)ev), -1);
    for (int from = 0; from < RUNNER_DELETED; from++) {
        bool seen[RUNNER_STATE_MAX] = {false};
        int queue[RUNNER_STATE_MAX], head = 0, tail = 0;
        queue[tail++] = from;
        seen[from] = true;
        while (head < tail) {
            int st = queue[head++];
            for (int ev = 0; ev < RUNNER_EVENT_MAX; ev++) {
                int to = runner_lifecycle_next((enum runner_state)st, (enum runner_event)ev);
                if (to >= 0 && !seen[to]) {
                    seen[to] = true;
                    queue[tail++] = to;
                }
            }
        }
        if (!seen[RUNNER_DELETED])
            fail_msg("%s never reaches deleted", runner_state_names[from]);
    }
}

static void every_timeout(void **state)
{
    (void)state;
    const struct lifecycle_limits limits = {
        .boot_timeout_s = 111, .idle_max_age_s = 222, .job_timeout_s = 333};
    const int64_t want[RUNNER_STATE_MAX] = {
        [RUNNER_PENDING] = LIFECYCLE_STORE_S * 1000,
        [RUNNER_CREATING] = 111000,
        [RUNNER_BOOTING] = 111000,
        [RUNNER_CONFIGURED] = 111000,
        [RUNNER_IDLE] = 222000,
        [RUNNER_BUSY] = (333 + LIFECYCLE_JOB_OVERRUN_S) * 1000,
        [RUNNER_FINISHING] = LIFECYCLE_FINISH_S * 1000,
        [RUNNER_DELETING] = LIFECYCLE_DELETE_S * 1000,
        [RUNNER_DELETED] = 0,
        [RUNNER_FAILED] = LIFECYCLE_DELETE_S * 1000,
    };
    for (int st = 0; st < RUNNER_STATE_MAX; st++) {
        int64_t got = runner_lifecycle_timeout_ms((enum runner_state)st, &limits);
        if (got != want[st])
            fail_msg("%s: timeout %lld ms, want %lld", runner_state_names[st], (long long)got,
                     (long long)want[st]);
        /* A state with a timeout says where its timeout leads. */
        if (got > 0 && runner_lifecycle_next((enum runner_state)st, RUNNER_EV_TIMEOUT) < 0)
            fail_msg("%s has a timeout but no move for it", runner_state_names[st]);
    }
}

static void state_classes_and_names(void **state)
{
    (void)state;
    for (int st = 0; st < RUNNER_STATE_MAX; st++) {
        assert_non_null(runner_state_names[st]);
        assert_int_equal(runner_state_from_name(runner_state_names[st]), st);
    }
    for (int ev = 0; ev < RUNNER_EVENT_MAX; ev++)
        assert_non_null(runner_event_names[ev]);
    assert_int_equal(runner_state_from_name("recovering"), -1);
    assert_int_equal(runner_state_from_name(NULL), -1);
    assert_true(runner_state_live(RUNNER_BUSY));
    assert_true(runner_state_live(RUNNER_DELETING));
    assert_false(runner_state_live(RUNNER_FAILED));
    assert_false(runner_state_live(RUNNER_DELETED));
    assert_true(runner_state_unbusy(RUNNER_BOOTING));
    assert_true(runner_state_unbusy(RUNNER_IDLE));
    assert_false(runner_state_unbusy(RUNNER_BUSY));
    assert_true(runner_state_heartbeats(RUNNER_IDLE));
    assert_true(runner_state_heartbeats(RUNNER_BUSY));
    assert_false(runner_state_heartbeats(RUNNER_BOOTING));
    assert_false(runner_state_heartbeats(RUNNER_FINISHING));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_legal_move_gives_its_state),
        cmocka_unit_test(every_other_move_is_refused),
        cmocka_unit_test(deleted_is_final_and_reachable_from_everywhere),
        cmocka_unit_test(every_timeout),
        cmocka_unit_test(state_classes_and_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
