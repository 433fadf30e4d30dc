/* Config loading: a good file loads with its defaults; every bad key or value is an error
 * naming file:line and the key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "image_manifest.h"
#include "hatchery/limits.h"
#include "secret.h"

/* The image is at a path no build machine has: one that holds an installed hatchery (a
 * /var/lib/hatchery its builder cannot read) made the manifest check fail. */
static const char good[] = "controller_id: p10\n"
                           "listen: 127.0.0.1:9000\n"
                           "state_dir: /var/lib/hatchery\n"
                           "admin_socket: /run/hatchery/admin.sock\n"
                           "webhook_secret_file: /etc/hatchery/secret\n"
                           "hosts:\n"
                           "  - name: p10-a\n"
                           "    uri: qemu:///system\n"
                           "    vcpus: 32\n"
                           "    memory_mib: 131072\n"
                           "    max_guests: 8\n"
                           "pools:\n"
                           "  - name: linux.ppc64le\n"
                           "    labels: [linux.ppc64le]\n"
                           "    arch: ppc64le\n"
                           "    image: /nonexistent/hatchery-unit-test/ppc64le.qcow2\n"
                           "    max_runners: 4\n"
                           "    hosts: [p10-a]\n";

static char *write_temp(const char *text)
{
    char *path = strdup("/tmp/hatchery-config-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* Loads `text`, which must load; the caller frees the config. */
static struct config *load_ok(const char *text)
{
    char *path = write_temp(text);
    struct config *c = NULL;
    char *errors = NULL;
    if (config_load(path, &c, &errors) < 0)
        fail_msg("%s", errors);
    unlink(path);
    free(path);
    return c;
}

/* Loads `text`; expects failure and returns the error text. */
static char *load_errors(const char *text)
{
    char *path = write_temp(text);
    struct config *c = NULL;
    char *errors = NULL;
    int r = config_load(path, &c, &errors);
    unlink(path);
    free(path);
    assert_true(r < 0);
    assert_null(c);
    assert_non_null(errors);
    return errors;
}

/* `good` with the line starting `old` replaced by `new` (or appended when old is NULL). */
static char *variant(const char *old, const char *new)
{
    static char buf[4096];
    if (!old) {
        snprintf(buf, sizeof(buf), "%s%s", good, new);
        return buf;
    }
    const char *at = strstr(good, old);
    assert_non_null(at);
    const char *eol = strchr(at, '\n');
    snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - good), good, new, eol);
    return buf;
}

static void expect_error(const char *text, const char *needle)
{
    char *errors = load_errors(text);
    if (!strstr(errors, needle))
        fail_msg("expected '%s' in errors:\n%s", needle, errors);
    /* Every line names the file and a line number. */
    assert_non_null(strstr(errors, "/tmp/hatchery-config-"));
    free(errors);
}

/* The checks between keys run whatever the parse found, so that every error shows at once;
 * they must take a host or pool whose required keys are missing (the fuzzer found a host
 * without its uri dereferenced). Each error still comes, and nothing crashes (ASan). */
static void test_every_check_runs_on_a_partial_config(void **state)
{
    (void)state;
    char *errors = load_errors("controller_id: p10\n"
                               "state_dir: /var/lib/hatchery\n"
                               "admin_socket: /run/hatchery/admin.sock\n"
                               "webhook_secret_file: /etc/hatchery/webhook-secret\n"
                               "listen: nowhere\n"
                               "hosts:\n"
                               "  - name: a\n"
                               "  - uri: qemu:///system\n"
                               "pools:\n"
                               "  - labels: [x]\n"
                               "    hosts: [a, b]\n"
                               "    backend: container\n"
                               "  - name: y\n"
                               "    arch: ppc64le\n"
                               "    labels: [y]\n"
                               "    image: /nonexistent/y.qcow2\n"
                               "    max_runners: 1\n"
                               "github:\n"
                               "  api_url: [not, a, string]\n"
                               "  token_file: /nonexistent/token\n"
                               "  runner_scopes:\n"
                               "    - repo: a/b\n");
    const char *wanted[] = {
        ":5: listen: 'nowhere' is not IPV4:PORT",  ":7: hosts[0].uri: missing required key",
        ":8: hosts[1].name: missing required key", ":10: pools[0].name: missing required key",
        "pools[].hosts: unknown host 'b'",         ":19: github.api_url: expected a string",
    };
    for (size_t i = 0; i < sizeof(wanted) / sizeof(wanted[0]); i++)
        if (!strstr(errors, wanted[i]))
            fail_msg("expected '%s' in errors:\n%s", wanted[i], errors);
    free(errors);
}

static void test_good_config_and_defaults(void **state)
{
    (void)state;
    char *path = write_temp(good);
    struct config *c = NULL;
    char *errors = NULL;
    int r = config_load(path, &c, &errors);
    if (r < 0)
        fail_msg("%s", errors);
    assert_string_equal(c->controller_id, "p10");
    assert_int_equal(c->n_hosts, 1);
    assert_int_equal(c->hosts[0].memory_mib, 131072);
    assert_int_equal(c->hosts[0].down_grace_s, 120);
    assert_int_equal(c->n_pools, 1);
    assert_int_equal(c->pools[0].arch, ARCH_PPC64LE);
    assert_int_equal(c->pools[0].backend, BACKEND_VM);
    assert_int_equal(c->pools[0].vcpus, 2);
    assert_int_equal(c->pools[0].min_idle, 0);
    assert_int_equal(c->http.max_body_bytes, 1024 * 1024);
    assert_null(c->http.tls_cert_file);
    assert_string_equal(c->log_level, "info");
    config_free(c);
    unlink(path);
    free(path);
}

static void test_unknown_key(void **state)
{
    (void)state;
    expect_error(variant(NULL, "colour: blue\n"), ":19: colour: unknown key");
    expect_error(variant("    max_runners: 4", "    max_runers: 4"),
                 ":17: pools[0].max_runers: unknown key (did you mean 'max_runners'?)");
    expect_error(variant("    max_runners: 4", "    max_runner: 4"),
                 ":17: pools[0].max_runner: unknown key (did you mean 'max_runners'?)");
    expect_error(variant("listen: 127.0.0.1:9000", "lsiten: 127.0.0.1:9000"),
                 ":2: lsiten: unknown key (did you mean 'listen'?)");
    /* Nothing near: no guess. */
    char *errors = load_errors(variant(NULL, "colour: blue\n"));
    assert_non_null(strstr(errors, ":19: colour: unknown key\n"));
    free(errors);
}

static void test_bad_values(void **state)
{
    (void)state;
    expect_error(variant("    arch: ppc64le", "    arch: sparc"),
                 ":15: pools[0].arch: 'sparc' is not one of: ppc64le, s390x, x86_64");
    expect_error(variant("    max_runners: 4", "    max_runners: many"),
                 ":17: pools[0].max_runners: expected an integer");
    expect_error(variant("    max_runners: 4", "    max_runners: -1"),
                 ":17: pools[0].max_runners: -1 is out of range");
    expect_error(variant("    vcpus: 32", "    vcpus: 0"), ":9: hosts[0].vcpus: 0 is out of range");
    expect_error(variant("listen: 127.0.0.1:9000", "listen: localhost:http"),
                 "listen: 'localhost:http' is not");
    expect_error(variant("controller_id: p10", "controller_id: P10 with spaces"),
                 "controller_id: 'P10 with spaces' must be");
    expect_error(variant(NULL, "log_level: loud\n"), ":19: log_level: 'loud' is not one of");
    expect_error(variant(NULL, "http:\n  max_body_bytes: 0\n"),
                 ":20: http.max_body_bytes: 0 is out of range");
    expect_error(variant(NULL, "http:\n  tls_cert_file: /c.pem\n"),
                 "tls_cert_file and tls_key_file must be given together");
    expect_error(variant("    labels: [linux.ppc64le]", "    labels: linux.ppc64le"),
                 ":14: pools[0].labels: expected a list of strings");
    expect_error(variant("    labels: [linux.ppc64le]", "    labels: []"),
                 ":14: pools[0].labels: needs between 1 and");
    expect_error(variant(NULL, "github:\n  runner_scopes: {org: p}\n"),
                 ":20: github.runner_scopes: expected a list");
    /* One host more than a config may name: the list's length is refused before any of
     * its entries is read. */
    static char many_hosts[sizeof(good) + (CONFIG_MAX_HOSTS + 1) * 48];
    const char *hosts = strstr(good, "hosts:\n"), *pools = strstr(good, "pools:\n");
    int used = snprintf(many_hosts, sizeof(many_hosts), "%.*shosts:\n", (int)(hosts - good), good);
    for (int i = 0; i <= CONFIG_MAX_HOSTS; i++)
        used += snprintf(many_hosts + used, sizeof(many_hosts) - (size_t)used,
                         "  - {name: h%d, uri: \"test:///default\"}\n", i);
    snprintf(many_hosts + used, sizeof(many_hosts) - (size_t)used, "%s", pools);
    expect_error(many_hosts, ":7: hosts: needs between 0 and 256 entries, has 257");
}

/* Paths and names that reach libvirt's XML, a shell or the filesystem: refused at their
 * own lines, not at the top of the file. */
static void test_paths_and_names(void **state)
{
    (void)state;
    expect_error(variant("state_dir: /var/lib/hatchery", "state_dir: var/lib/hatchery"),
                 ":3: state_dir: 'var/lib/hatchery' is not an absolute path");
    expect_error(
        variant("webhook_secret_file: /etc/hatchery/secret", "webhook_secret_file: secret"),
        ":5: webhook_secret_file: 'secret' is not an absolute path");
    expect_error(variant("    image: /nonexistent/hatchery-unit-test/ppc64le.qcow2",
                         "    image: images/ppc64le.qcow2"),
                 ":16: pools[0].image: 'images/ppc64le.qcow2' is not an absolute path");
    expect_error(
        variant("    max_guests: 8", "    max_guests: 8\n    storage_dir: \"relative dir/<v>\""),
        ":12: hosts[0].storage_dir: 'relative dir/<v>' is not an absolute path");
    expect_error(
        variant("    max_guests: 8", "    max_guests: 8\n    storage_dir: \"/var/lib/\\tx\""),
        ":12: hosts[0].storage_dir: a path with a control character in it");
    expect_error(
        variant("    max_guests: 8", "    max_guests: 8\n    storage_pool: \"x</name><name>y&z\""),
        ":12: hosts[0].storage_pool: 'x</name><name>y&z' must be 1-128 letters");
    expect_error(variant("    max_runners: 4", "    max_runners: 4\n    network: \"br0; reboot\""),
                 ":18: pools[0].network: 'br0; reboot' must be 1-128 letters");
    expect_error(variant(NULL, "http:\n  tls_cert_file: c.pem\n  tls_key_file: /k.pem\n"),
                 ":20: http.tls_cert_file: 'c.pem' is not an absolute path");
    /* All of them in one pass. */
    char *errors = load_errors(
        variant("state_dir: /var/lib/hatchery", "state_dir: rel\nadmin_socket: rel.sock"));
    assert_non_null(strstr(errors, "state_dir: 'rel' is not an absolute path"));
    assert_non_null(strstr(errors, "admin_socket: 'rel.sock' is not an absolute path"));
    free(errors);
}

static void test_missing_and_cross_references(void **state)
{
    (void)state;
    expect_error(variant("controller_id: p10", "# no id"), "controller_id: missing required key");
    expect_error(variant("    hosts: [p10-a]", "    hosts: [p10-b]"),
                 ":13: pools[].hosts: unknown host 'p10-b'");
    expect_error(variant("    max_runners: 4", "    max_runners: 1\n    min_idle: 2"),
                 "min_idle (2) is larger than max_runners (1)");
    expect_error(variant("    max_runners: 4", "    max_runners: 4\n    vcpus: 64"),
                 "fits on none of its hosts");
    expect_error(variant(NULL, "pools:\n  - {name: x, labels: [a], arch: s390x, image: /i, "
                               "max_runners: 1}\n"),
                 "pools: key given twice");
    expect_error(variant("    max_guests: 8", "    max_guests: 8\n"
                                              "  - {name: p10-b, uri: 'qemu:///system', vcpus: 8, "
                                              "memory_mib: 8192, max_guests: 4}"),
                 ":12: hosts[].uri: host 'p10-b' has the same uri as host 'p10-a'");
    /* Containers bind-mount a directory of this machine: not on a host reached by streams. */
    char text[8192];
    snprintf(text, sizeof(text), "%s    backend: container\n    trusted: true\n",
             variant("    max_guests: 8", "    max_guests: 8\n    agent_transport: stream"));
    expect_error(text, "container pool 'linux.ppc64le' on host 'p10-a', which is reached through "
                       "streams");
    /* A container pool must say it is for trusted code only. */
    snprintf(text, sizeof(text), "%s    backend: container\n", variant(NULL, ""));
    expect_error(text, "pools[].trusted: container pool 'linux.ppc64le' is not isolated enough "
                       "for untrusted jobs");
    /* A container has no user-mode networking: without a network of its own it would share
     * the host's, so the default `user` is refused, and so is a runner run as root. */
    snprintf(text, sizeof(text), "%s    backend: container\n    trusted: true\n",
             variant(NULL, ""));
    expect_error(text, "pools[].network: container pool 'linux.ppc64le' has network 'user' (the "
                       "default), which containers do not have");
    snprintf(text, sizeof(text),
             "%s    backend: container\n    trusted: true\n    network: none\n"
             "    runner_user: root\n",
             variant(NULL, ""));
    expect_error(text, "pools[].runner_user: container pool 'linux.ppc64le' would run its runner "
                       "as root");
    /* Warm templates are for VM pools; `start` takes cold or template. */
    snprintf(text, sizeof(text),
             "%s    backend: container\n    trusted: true\n    start: template\n",
             variant(NULL, ""));
    expect_error(text,
                 "pools[].start: container pool 'linux.ppc64le' cannot start from a template");
    snprintf(text, sizeof(text), "%s    start: warm\n", variant(NULL, ""));
    expect_error(text, "'warm' is not one of");
    expect_error(variant("    max_guests: 8", "    max_guests: 8\n    agent_transport: ssh"),
                 "hosts[0].agent_transport: 'ssh' is not one of");
    /* Secrets never cross the network in clear. */
    expect_error(variant("    uri: qemu:///system", "    uri: qemu+tcp://p10-a/system"),
                 ":7: hosts[].uri: host 'p10-a': agent channels go through this connection, and "
                 "qemu+tcp://p10-a/system is not encrypted");
    /* libvirt takes the transport in any case. */
    expect_error(variant("    uri: qemu:///system", "    uri: qemu+TCP://p10-a/system"),
                 "qemu+TCP://p10-a/system is not encrypted");
}

/* Which runner group a pool joins decides which workflows reach it: no pool falls into a
 * scope it did not name, and a trusted pool never into the default group. */
static void test_pool_scopes(void **state)
{
    (void)state;
    static const char two_scopes[] = "github:\n"
                                     "  token_file: /etc/hatchery/token\n"
                                     "  runner_scopes:\n"
                                     "    - repo: pytorch/pytorch\n"
                                     "      runner_group_id: 1\n"
                                     "    - org: pytorch\n"
                                     "      runner_group_id: 42\n";
    char text[8192];
    /* Two scopes, and the pool names neither: refused at the pool's line. */
    snprintf(text, sizeof(text), "%s%s", variant(NULL, ""), two_scopes);
    expect_error(text, ":13: pools[].github_scope: pool 'linux.ppc64le' names no github_scope, "
                       "and github.runner_scopes has 2");
    /* A scope that is not there. */
    snprintf(text, sizeof(text), "%s    github_scope: pytorch/vision\n%s", variant(NULL, ""),
             two_scopes);
    expect_error(text, "pools[].github_scope: pool 'linux.ppc64le' names scope 'pytorch/vision', "
                       "which is none of github.runner_scopes");
    /* A trusted pool in the default group, named or implied: refused. */
    snprintf(text, sizeof(text),
             "%s    backend: container\n    trusted: true\n"
             "    github_scope: pytorch/pytorch\n%s",
             variant(NULL, ""), two_scopes);
    expect_error(text, ":13: pools[].trusted: trusted pool 'linux.ppc64le' registers in "
                       "repository scope 'pytorch/pytorch', whose runners serve every workflow");
    /* A repository's runners have no group, whatever runner_group_id says. */
    snprintf(text, sizeof(text),
             "%s    backend: container\n    trusted: true\n    github_scope: pytorch/pytorch\n"
             "github:\n  token_file: /t\n  runner_scopes:\n    - repo: pytorch/pytorch\n"
             "      runner_group_id: 3\n",
             variant(NULL, ""));
    expect_error(text, "runner groups, which can be restricted to trusted workflows, exist for "
                       "organizations only");
    snprintf(text, sizeof(text),
             "%s    backend: container\n    trusted: true\ngithub:\n  token_file: /t\n"
             "  runner_scopes:\n    - org: pytorch\n      runner_group_id: 42\n",
             variant(NULL, ""));
    expect_error(text, "pools[].github_scope: trusted pool 'linux.ppc64le' must name its "
                       "github_scope");
    snprintf(text, sizeof(text),
             "%s    backend: container\n    trusted: true\n    github_scope: pytorch\n"
             "github:\n  token_file: /t\n  runner_scopes:\n    - org: pytorch\n",
             variant(NULL, ""));
    expect_error(text, "whose runner_group_id 1 is the default group");

    /* One scale set serves one pool; a scale set needs GitHub. */
    snprintf(text, sizeof(text),
             "%s    github_scope: pytorch\n    scale_set: p10\n"
             "  - {name: other, labels: [other], arch: ppc64le, image: /r, hosts: [p10-a], "
             "github_scope: pytorch, scale_set: p10}\n%s",
             variant(NULL, ""), two_scopes);
    expect_error(text, "pools[].scale_set: scale set 'p10' serves pools 'linux.ppc64le' and "
                       "'other': one pool per scale set");
    snprintf(text, sizeof(text), "%s    scale_set: p10\n", variant(NULL, ""));
    expect_error(text, "pools[].scale_set: pool 'linux.ppc64le' is served by scale set 'p10', "
                       "which needs the github section");

    /* Without the webhook secret: refused while a pool takes webhooks, at its line; a
     * config whose every pool is a scale set's needs none. */
    char webhookless[4096];
    snprintf(webhookless, sizeof(webhookless), "%s", variant("webhook_secret_file:", ""));
    snprintf(text, sizeof(text), "%s%s", webhookless, two_scopes);
    expect_error(text, ":13: webhook_secret_file: required: pool 'linux.ppc64le' takes webhooks");
    snprintf(text, sizeof(text), "%s    github_scope: pytorch\n    scale_set: p10\n%s", webhookless,
             two_scopes);
    struct config *loaded = load_ok(text);
    assert_null(loaded->webhook_secret_file);
    assert_string_equal(loaded->pools[0].scale_set, "p10");
    config_free(loaded);

    /* An enterprise scope: a pool names it by its slug, a scale set serves it. */
    static const char enterprise[] = "github:\n  token_file: /t\n  runner_scopes:\n"
                                     "    - org: pytorch\n      runner_group_id: 42\n"
                                     "    - enterprise: octo-corp\n      runner_group_id: 7\n";
    snprintf(text, sizeof(text), "%s    github_scope: octo-corp\n    scale_set: p10\n%s",
             variant(NULL, ""), enterprise);
    loaded = load_ok(text);
    const struct config_scope *ent_scope = config_pool_scope(loaded, &loaded->pools[0]);
    assert_non_null(ent_scope);
    assert_string_equal(ent_scope->enterprise, "octo-corp");
    assert_null(ent_scope->org);
    assert_int_equal(ent_scope->runner_group_id, 7);
    config_free(loaded);
    /* Two kinds in one item, a bad slug, one name twice, a trusted pool in an enterprise. */
    snprintf(text, sizeof(text),
             "%sgithub:\n  token_file: /t\n  runner_scopes:\n    - org: pytorch\n"
             "      enterprise: octo-corp\n",
             variant(NULL, ""));
    expect_error(text, "github.runner_scopes[]: each scope names exactly one of repo "
                       "(owner/name), org or enterprise");
    snprintf(text, sizeof(text),
             "%sgithub:\n  token_file: /t\n  runner_scopes:\n    - enterprise: octo/corp\n",
             variant(NULL, ""));
    expect_error(text,
                 "github.runner_scopes[].enterprise: 'octo/corp' is not an enterprise's slug");
    snprintf(text, sizeof(text),
             "%s    github_scope: pytorch\ngithub:\n  token_file: /t\n  runner_scopes:\n"
             "    - org: pytorch\n    - enterprise: pytorch\n",
             variant(NULL, ""));
    expect_error(text, "scope 'pytorch' is given twice");
    snprintf(text, sizeof(text),
             "%s    backend: container\n    trusted: true\n    github_scope: octo-corp\n%s",
             variant(NULL, ""), enterprise);
    expect_error(text, "trusted pool 'linux.ppc64le' registers in enterprise scope 'octo-corp'");

    /* Named scopes load, and each pool gets the one it named; one scope needs no name. */
    snprintf(text, sizeof(text),
             "%s    github_scope: pytorch/pytorch\n"
             "  - {name: small, labels: [small], arch: ppc64le, backend: container, "
             "trusted: true, network: none, image: /r, max_runners: 1, hosts: [p10-a], "
             "github_scope: pytorch}\n"
             "%s",
             variant(NULL, ""), two_scopes);
    char *path = write_temp(text);
    struct config *c = NULL;
    char *errors = NULL;
    if (config_load(path, &c, &errors) < 0)
        fail_msg("%s", errors);
    assert_string_equal(config_pool_scope(c, &c->pools[0])->repo, "pytorch/pytorch");
    assert_int_equal(config_pool_scope(c, &c->pools[1])->runner_group_id, 42);
    config_free(c);
    unlink(path);
    free(path);
    snprintf(text, sizeof(text),
             "%sgithub:\n  token_file: /t\n  runner_scopes:\n"
             "    - repo: pytorch/pytorch\n",
             variant(NULL, ""));
    path = write_temp(text);
    if (config_load(path, &c, &errors) < 0)
        fail_msg("%s", errors);
    assert_string_equal(config_pool_scope(c, &c->pools[0])->repo, "pytorch/pytorch");
    config_free(c);
    unlink(path);
    free(path);
}

static void test_host_transport(void **state)
{
    (void)state;
    struct config_host h = {.uri = (char *)"qemu:///system"};
    assert_false(config_host_streams(&h));
    h.uri = (char *)"qemu+ssh://hatchery@p10-b.example.com/system";
    assert_true(config_host_streams(&h));
    h.uri = (char *)"qemu+unix:///system?socket=/run/libvirt/libvirt-sock";
    assert_false(config_host_streams(&h));
    h.uri = (char *)"lxc:///";
    assert_false(config_host_streams(&h));
    h.agent_transport = TRANSPORT_STREAM;
    assert_true(config_host_streams(&h));
    h.uri = (char *)"qemu+tcp://10.0.0.5/system";
    h.agent_transport = TRANSPORT_SOCKET;
    assert_false(config_host_streams(&h));
    h.agent_transport = TRANSPORT_AUTO;
    assert_true(config_host_streams(&h));
}

static void test_yaml_syntax_error(void **state)
{
    (void)state;
    expect_error("controller_id: [unclosed\nstate_dir: /x\n", "(yaml)");
    expect_error("", "the file is empty");
    expect_error("- a\n- b\n", ":1: (top level): expected a mapping of keys");
}

static void test_listen_parse(void **state)
{
    (void)state;
    struct sockaddr_storage a;
    assert_int_equal(config_listen_parse("127.0.0.1:8080", &a), 0);
    assert_int_equal(a.ss_family, AF_INET);
    assert_int_equal(config_listen_parse("[::1]:8080", &a), 0);
    assert_int_equal(a.ss_family, AF_INET6);
    assert_true(config_listen_parse("127.0.0.1", &a) < 0);
    assert_true(config_listen_parse("127.0.0.1:99999", &a) < 0);
    assert_true(config_listen_parse(":80", &a) < 0);
    assert_true(config_listen_parse("example.com:80", &a) < 0);
}

static void test_secret_file_permissions(void **state)
{
    (void)state;
    char *path = write_temp("s3cret\n");
    struct secret *s = NULL;
    char err[256];
    chmod(path, 0640);
    assert_int_equal(secret_load_file(path, &s, err, sizeof(err)), -EPERM);
    assert_non_null(strstr(err, "must not be accessible to group or others"));
    assert_null(strstr(err, "s3cret"));
    chmod(path, 0604);
    assert_int_equal(secret_load_file(path, &s, err, sizeof(err)), -EPERM);
    chmod(path, 0600);
    assert_int_equal(secret_load_file(path, &s, err, sizeof(err)), 0);
    /* The trailing newline is not part of the secret: HMAC matches the bare key. */
    unsigned char a[32], b[32];
    struct secret *bare = NULL;
    assert_int_equal(secret_from_bytes("s3cret", 6, &bare), 0);
    assert_int_equal(secret_hmac_sha256(s, "x", 1, a), 0);
    assert_int_equal(secret_hmac_sha256(bare, "x", 1, b), 0);
    assert_memory_equal(a, b, 32);
    secret_free(s);
    secret_free(bare);
    unlink(path);
    assert_true(secret_load_file(path, &s, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "cannot open"));
    free(path);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* An image's manifest: a wrong arch is refused; a pool without `kernel` boots what the
 * manifest names, beside the image; a manifest cannot point outside the image's
 * directory; a missing manifest is left to the scheduler. */
static void test_image_manifest(void **state)
{
    (void)state;
    char dir[] = "/tmp/hatchery-image-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char image[128], manifest[160], text[1024];
    snprintf(image, sizeof(image), "%s/runner.qcow2", dir);
    snprintf(manifest, sizeof(manifest), "%s.json", image);
    snprintf(text, sizeof(text), "%.*s    image: %s\n    max_runners: 4\n",
             (int)(strstr(good, "    image:") - good), good, image);

    /* Missing: not a config error. */
    char *path = write_temp(text);
    struct config *c = NULL;
    char *errors = NULL;
    if (config_load(path, &c, &errors) < 0)
        fail_msg("%s", errors);
    assert_null(c->pools[0].kernel);
    config_free(c);

    write_text(manifest, "{\"arch\": \"ppc64le\", \"runner_version\": \"2.330.0\", "
                         "\"agent_version\": \"0.2.0\", \"boot\": {\"kernel\": "
                         "\"runner.qcow2.kernel\", \"initrd\": \"runner.qcow2.initrd\", "
                         "\"cmdline\": \"root=/dev/vda rw console=hvc0\"}}");
    if (config_load(path, &c, &errors) < 0)
        fail_msg("%s", errors);
    char want[200];
    snprintf(want, sizeof(want), "%s/runner.qcow2.kernel", dir);
    assert_string_equal(c->pools[0].kernel, want);
    snprintf(want, sizeof(want), "%s/runner.qcow2.initrd", dir);
    assert_string_equal(c->pools[0].initrd, want);
    assert_string_equal(c->pools[0].cmdline, "root=/dev/vda rw console=hvc0");
    config_free(c);

    write_text(manifest, "{\"arch\": \"s390x\", \"runner_version\": \"2.330.0\", "
                         "\"agent_version\": \"0.2.0\"}");
    expect_error(text, "pools[].image: pool 'linux.ppc64le': image is built for s390x, the "
                       "pool is ppc64le");
    write_text(manifest, "{\"arch\": \"ppc64le\", \"runner_version\": \"2.330.0\", "
                         "\"agent_version\": \"0.2.0\", \"boot\": {\"kernel\": "
                         "\"../../etc/shadow\"}}");
    expect_error(text, "boot.kernel must be a file name beside the image");
    /* A pool of remote hosts only: this machine's file at the image's path is not its
     * image (the host's is looked for through libvirt), so neither refused nor read. */
    char *remote = strdup(text);
    char *uri = strstr(remote, "qemu:///system");
    assert_non_null(uri);
    char remote_text[2048];
    snprintf(remote_text, sizeof(remote_text), "%.*sqemu+ssh://hatchery@p10-a/system%s",
             (int)(uri - remote), remote, uri + strlen("qemu:///system"));
    char *remote_path = write_temp(remote_text);
    if (config_load(remote_path, &c, &errors) < 0)
        fail_msg("%s", errors);
    assert_null(c->pools[0].kernel);
    config_free(c);
    unlink(remote_path);
    free(remote_path);
    free(remote);
    write_text(manifest, "{\"arch\": \"ppc64le\"");
    expect_error(text, "not a JSON object");
    write_text(manifest, "{\"arch\": \"ppc64le\", \"agent_version\": \"0.2.0\"}");
    expect_error(text, "runner_version must be a string");

    unlink(manifest);
    unlink(path);
    free(path);
    rmdir(dir);
}

/* Fills the stack below the caller with 3s, as an earlier call leaves its frame. */
static void __attribute__((noinline)) dirty_stack(void)
{
    volatile char junk[32768];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = 3;
}

/* A manifest that names no boot files gives empty paths, whatever the stack held: the
 * parser's own result was once left uninitialised there, and `hatchery pools --json`
 * printed "\u0003" for an initrd no manifest named. */
static void test_image_manifest_without_boot_files(void **state)
{
    (void)state;
    const char *texts[] = {
        "{\"arch\": \"ppc64le\", \"runner_version\": \"2.330.0\", \"agent_version\": \"0.3.0\"}",
        "{\"arch\": \"ppc64le\", \"runner_version\": \"2.330.0\", \"agent_version\": \"0.3.0\", "
        "\"boot\": {\"kernel\": \"runner.qcow2.kernel\"}}",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(*texts); i++) {
        dirty_stack();
        struct image_manifest m;
        memset(&m, 3, sizeof(m));
        char err[256];
        assert_int_equal(image_manifest_parse("/images/runner.qcow2", texts[i], strlen(texts[i]),
                                              &m, err, sizeof(err)),
                         0);
        assert_string_equal(m.kernel, i == 0 ? "" : "/images/runner.qcow2.kernel");
        assert_string_equal(m.initrd, "");
        assert_string_equal(m.cmdline, "");
        assert_string_equal(m.debian, "");
    }
}

static char *read_whole(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        fwrite(chunk, 1, n, out);
    fclose(f);
    fclose(out);
    return text;
}

/* Whether `word` occurs in `text` with no identifier character on either side. */
static bool has_word(const char *text, const char *word)
{
    size_t len = strlen(word);
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) {
        bool left = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        bool right = !(isalnum((unsigned char)p[len]) || p[len] == '_');
        if (left && right)
            return true;
    }
    return false;
}

struct documentation {
    char *reference; /* docs/CONFIGURATION.md's "## Configuration reference", alone */
    char *man_page;  /* hatchery.yaml(5), as pandoc made it */
    int keys, missing;
};

static void expect_documented(const char *path, const char *key, void *data)
{
    struct documentation *doc = data;
    char quoted[96];
    snprintf(quoted, sizeof(quoted), "`%s`", key);
    doc->keys++;
    if (!strstr(doc->reference, quoted)) {
        print_error("docs/CONFIGURATION.md lacks %s%s%s\n", path, *path ? "." : "", key);
        doc->missing++;
    }
    if (!has_word(doc->man_page, key)) {
        print_error("hatchery.yaml(5) lacks %s%s%s\n", path, *path ? "." : "", key);
        doc->missing++;
    }
}

/* Every key the loader takes is in docs/CONFIGURATION.md's reference and in the man
 * page made from it; and the check finds a key that is not. */
static void test_every_key_is_documented(void **state)
{
    const char *source = getenv("HATCHERY_SOURCE_DIR"), *man = getenv("HATCHERY_MAN_DIR");
    assert_non_null(source);
    assert_non_null(man);
    char path[4096];
    snprintf(path, sizeof(path), "%s/docs/CONFIGURATION.md", source);
    char *text = read_whole(path);
    char *start = strstr(text, "\n## Configuration reference\n");
    assert_non_null(start);
    char *end = strstr(start + 1, "\n## ");
    if (end)
        *end = '\0';
    snprintf(path, sizeof(path), "%s/hatchery.yaml.5", man);
    struct documentation doc = {.reference = start, .man_page = read_whole(path)};
    assert_non_null(strstr(doc.man_page, ".TH \"HATCHERY.YAML\" \"5\""));

    config_each_key(expect_documented, &doc);
    assert_true(doc.keys > 60);
    assert_int_equal(doc.missing, 0);

    struct documentation none = {.reference = "", .man_page = ""};
    expect_documented("http", "a_key_nobody_wrote", &none);
    assert_int_equal(none.missing, 2);
    free(doc.man_page);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_config_and_defaults),
        cmocka_unit_test(test_every_check_runs_on_a_partial_config),
        cmocka_unit_test(test_unknown_key),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_paths_and_names),
        cmocka_unit_test(test_missing_and_cross_references),
        cmocka_unit_test(test_pool_scopes),
        cmocka_unit_test(test_host_transport),
        cmocka_unit_test(test_yaml_syntax_error),
        cmocka_unit_test(test_listen_parse),
        cmocka_unit_test(test_secret_file_permissions),
        cmocka_unit_test(test_image_manifest),
        cmocka_unit_test(test_image_manifest_without_boot_files),
        cmocka_unit_test(test_every_key_is_documented),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
