/* A trusted pool's runner group judged (controller/runner_group.h) from GitHub's own
 * example of the object (`runner-group-item` in its OpenAPI description, as the tests'
 * Prism serves it), then from that example changed one field at a time the way an
 * organization owner can change it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner_group.h"

static json_t *github_example(void)
{
    const char *source = getenv("HATCHERY_SOURCE_DIR");
    assert_non_null(source);
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/github/openapi-cutdown.json", source);
    json_error_t error;
    json_t *spec = json_load_file(path, 0, &error);
    if (!spec)
        fail_msg("%s: %s", path, error.text);
    json_t *value = json_object_get(
        json_object_get(json_object_get(json_object_get(spec, "components"), "examples"),
                        "runner-group-item"),
        "value");
    assert_non_null(value);
    json_t *copy = json_deep_copy(value);
    json_decref(spec);
    return copy;
}

/* The example with `key` set to `value` (taken). */
static enum runner_group_verdict judge_with(const char *key, json_t *value, char *why, size_t size)
{
    json_t *group = github_example();
    json_object_set_new(group, key, value);
    enum runner_group_verdict v = runner_group_judge(group, why, size);
    json_decref(group);
    return v;
}

static void githubs_example_is_restricted(void **state)
{
    (void)state;
    char why[512];
    json_t *group = github_example();
    /* restricted_to_workflows, one workflow at refs/heads/main */
    assert_int_equal(runner_group_judge(group, why, sizeof(why)), RUNNER_GROUP_RESTRICTED);
    json_decref(group);
}

static void what_lets_a_pull_request_in_is_open(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        const char *json;
        const char *why; /* a slice of the reason */
    } cases[] = {
        {"restricted_to_workflows", "false", "not restricted to selected workflows"},
        {"default", "true", "default group"},
        {"selected_workflows", "[]", "selects none"},
        {"selected_workflows", "[\"o/r/.github/workflows/ci.yml@refs/pull/7/merge\"]",
         "'o/r/.github/workflows/ci.yml@refs/pull/7/merge', which is not pinned"},
        {"selected_workflows", "[\"o/r/.github/workflows/ci.yml\"]", "not pinned"},
        {"selected_workflows", "[\"o/r/.github/workflows/ci.yml@\"]", "not pinned"},
        {"selected_workflows", "[\"o/r/.github/workflows/*.yml@main\"]", "not pinned"},
        {"selected_workflows", "[\"o/r/.github/workflows/nightly.yml@refs/heads/main\", 7]",
         "not pinned"},
        /* a name from GitHub is quoted without its quotes (a reason goes into log lines) */
        {"selected_workflows", "[\"o/r/x\\\"y@\"]", "'o/r/x?y@'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char why[512];
        json_t *value = json_loads(cases[i].json, JSON_DECODE_ANY, NULL);
        assert_non_null(value);
        enum runner_group_verdict v = judge_with(cases[i].key, value, why, sizeof(why));
        if (v != RUNNER_GROUP_OPEN || !strstr(why, cases[i].why))
            fail_msg("%s: %s: %s (%s)", cases[i].key, cases[i].json, runner_group_verdict_names[v],
                     why);
    }
    /* Pinned to a branch, a tag or a commit, every one of them: restricted. */
    char why[512];
    json_t *pinned =
        json_loads("[\"o/r/.github/workflows/a.yml@refs/heads/main\","
                   "\"o/r/.github/workflows/b.yml@v1.2\","
                   "\"o/r/.github/workflows/c.yml@0123456789abcdef0123456789abcdef01234567\"]",
                   0, NULL);
    assert_int_equal(judge_with("selected_workflows", pinned, why, sizeof(why)),
                     RUNNER_GROUP_RESTRICTED);
}

static void what_is_not_a_group_is_unknown(void **state)
{
    (void)state;
    char why[512];
    json_t *array = json_array();
    assert_int_equal(runner_group_judge(NULL, why, sizeof(why)), RUNNER_GROUP_UNKNOWN);
    assert_int_equal(runner_group_judge(array, why, sizeof(why)), RUNNER_GROUP_UNKNOWN);
    json_decref(array);
    json_t *group = github_example();
    json_object_del(group, "id"); /* {"message": "..."} or another object */
    assert_int_equal(runner_group_judge(group, why, sizeof(why)), RUNNER_GROUP_UNKNOWN);
    json_decref(group);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(githubs_example_is_restricted),
        cmocka_unit_test(what_lets_a_pull_request_in_is_open),
        cmocka_unit_test(what_is_not_a_group_is_unknown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
