/* The provisioner end to end.
 *   test_provision testdriver  the guest lifecycle table; on libvirt's test:///default:
 *                              create/destroy cycles, capacity accounting, tagging
 *                              through <metadata>;
 *   test_provision real        on a real libvirtd (run-real.sh starts it and builds the
 *                              test guests): ppc64le and s390x guests boot under TCG, say
 *                              hello, take a config, run the stand-in runner (exit 0, then
 *                              1) and vanish with their volume; a silent guest dies at the
 *                              boot timeout; a flooding and a lying guest are cut off; a
 *                              twin (another live guest's machine-id) gets no config; the
 *                              LXC variant works; a host reached only through libvirt
 *                              has its image found there, not here; a remote host that
 *                              goes silent holds only its own threads; the JIT config
 *                              shows up in no log, no domain XML, no kernel command line
 *                              and no process argv. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libvirt/libvirt.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libvirt/libvirt_loop.h"
#include "log.h"
#include "libvirt/internal.h" /* the guest lifecycle table */
#include "hatchery/agent_protocol.h"
#include "libvirt/provisioner.h"

static uv_loop_t loop;
static char state_dir[] = "/tmp/hatchery-prov-XXXXXX";
static struct provisioner *prov;

struct run {
    bool hello, started, exited, failed, gone, resumed;
    bool ended_after_exit; /* the guest ended on its own once its runner had exited */
    int64_t heard_ms;      /* the agent's last heartbeat, as the guest kept it at the exit */
    bool restored;         /* its hello followed a restore */
    char nonce[72], rng_sample[72], machine_id[64], boot_id[64];
    struct agent_resumed resumed_as;
    struct agent_exit exit;
    char arch[32];
    char reason[512];
    const char *jit; /* to send on hello; NULL: do not configure */
    struct secret *jit_secret;
    bool secret_scan_done;
    bool secret_in_argv;
    bool xml_names_state_dir; /* the running domain's XML holds a path of ours */
};

static bool process_argv_contains(const char *needle)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    bool found = false;
    while (d && (e = readdir(d)) && !found) {
        char path[300], buf[65536];
        snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] == 0)
                buf[i] = ' ';
        if (n > 0) {
            buf[n] = 0;
            found = strstr(buf, needle) != NULL;
        }
    }
    if (d)
        closedir(d);
    return found;
}

static const char *const runner_command[] = {"/usr/bin/fake-runner", "--jitconfig"};

static void ev_hello(void *data, struct guest *g, const struct agent_hello *hello)
{
    struct run *r = data;
    r->hello = true;
    snprintf(r->arch, sizeof(r->arch), "%s", hello->arch);
    r->restored = hello->restored;
    snprintf(r->nonce, sizeof(r->nonce), "%s", hello->nonce);
    snprintf(r->rng_sample, sizeof(r->rng_sample), "%s", hello->rng_sample);
    snprintf(r->machine_id, sizeof(r->machine_id), "%s", hello->machine_id);
    snprintf(r->boot_id, sizeof(r->boot_id), "%s", hello->boot_id);
    if (r->jit) {
        secret_from_bytes(r->jit, strlen(r->jit), &r->jit_secret);
        assert_int_equal(guest_send_config(g, r->jit_secret, 120, runner_command, 2), 0);
    }
}

static void ev_started(void *data, struct guest *g, int64_t pid)
{
    (void)pid;
    struct run *r = data;
    r->started = true;
    /* While the guest runs: is the JIT config on any process's command line (QEMU's)? */
    if (r->jit) {
        r->secret_in_argv = process_argv_contains(r->jit);
        /* ...or in the running domain's XML, as libvirt holds it? */
        virConnectPtr c =
            virConnectOpen(strstr(guest_name(g), "lxc") ? "lxc:///" : "qemu:///system");
        virDomainPtr d = c ? virDomainLookupByName(c, guest_domain(g)) : NULL;
        char *xml = d ? virDomainGetXMLDesc(d, 0) : NULL;
        r->secret_in_argv = r->secret_in_argv || !xml || strstr(xml, r->jit) != NULL;
        r->xml_names_state_dir = xml && strstr(xml, state_dir) != NULL;
        free(xml);
        if (d)
            virDomainFree(d);
        if (c)
            virConnectClose(c);
        r->secret_scan_done = true;
    }
}

static void ev_exited(void *data, struct guest *g, const struct agent_exit *exit)
{
    struct run *r = data;
    r->exited = true;
    r->exit = *exit;
    r->heard_ms = guest_heard_ms(g);
    guest_ack_exit(g); /* a version 2 agent keeps its guest up until it hears this */
}

static void ev_resumed(void *data, struct guest *g, const struct agent_resumed *resumed)
{
    (void)g;
    struct run *r = data;
    r->resumed = true;
    r->resumed_as = *resumed;
}

/* Every event must reach its owner on the loop (this test's main thread), whichever of
 * libvirt's or a host's threads saw its cause first. */
static bool event_off_loop;

static void note_thread(void)
{
    if ((pid_t)syscall(SYS_gettid) != getpid())
        event_off_loop = true;
}

static void ev_failed(void *data, struct guest *g, const char *reason)
{
    (void)g;
    note_thread();
    struct run *r = data;
    r->failed = true;
    snprintf(r->reason, sizeof(r->reason), "%s", reason);
}

/* As the runner does: a guest that ends on its own after its runner's exit is done, and
 * the owner tears it down; one that ends before has failed. */
static void ev_ended(void *data, struct guest *g, const char *why)
{
    struct run *r = data;
    if (r->exited) {
        r->ended_after_exit = true;
        guest_teardown(g, "the guest powered off after the job");
        return;
    }
    r->failed = true;
    snprintf(r->reason, sizeof(r->reason), "%s before its runner reported an exit", why);
    guest_teardown(g, r->reason);
}

static void ev_gone(void *data, struct guest *g)
{
    (void)g;
    note_thread();
    struct run *r = data;
    r->gone = true;
    secret_free(r->jit_secret);
    r->jit_secret = NULL;
}

static const struct guest_events events = {
    .on_hello = ev_hello,
    .on_started = ev_started,
    .on_exited = ev_exited,
    .on_failed = ev_failed,
    .on_ended = ev_ended,
    .on_gone = ev_gone,
    .on_resumed = ev_resumed,
};

static void tick(uv_timer_t *t)
{
    (void)t; /* only wakes the loop so wait_for can look at the clock */
}

static void wait_for(const bool *flag, int seconds)
{
    uint64_t until = uv_now(&loop) + (uint64_t)seconds * 1000;
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    uv_timer_start(&t, tick, 100, 100);
    while (!*flag && uv_now(&loop) < until)
        uv_run(&loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
}

static char storage_pool_name[64];

static struct config_host host_cfg(const char *name, const char *uri, int64_t max_guests)
{
    static char volumes[300];
    snprintf(volumes, sizeof(volumes), "%s/volumes", state_dir);
    /* Per run: a transient pool of an earlier run may still point at its directory. */
    snprintf(storage_pool_name, sizeof(storage_pool_name), "hatchery-test-%d", (int)getpid());
    return (struct config_host){
        .name = (char *)name,
        .uri = (char *)uri,
        .vcpus = 8,
        .memory_mib = 8192,
        .max_guests = max_guests,
        .storage_pool = storage_pool_name,
        .storage_dir = volumes,
    };
}

static void wait_host_up(const char *name, int rounds)
{
    for (int i = 0; i < rounds && !provider_host_up(provisioner_provider(prov), name); i++)
        uv_run(&loop, UV_RUN_ONCE);
    assert_true(provider_host_up(provisioner_provider(prov), name));
}

/* The provisioner borrows the host's config: it lives here. */
static void add_host_cfg(struct config_host cfg)
{
    static struct config_host hosts[16];
    static int n;
    assert_true(n < 16);
    hosts[n] = cfg;
    assert_int_equal(provider_host_add(provisioner_provider(prov), &hosts[n]), 0);
    wait_host_up(hosts[n].name, 200);
    /* Each connection defines the guest filter anew: over the one an earlier connection or
     * an earlier run of this test left (libvirtd keeps it), which must work too. */
    struct host_status st;
    assert_int_equal(provider_host_status(provisioner_provider(prov), hosts[n].name, &st), 0);
    if (strncmp(hosts[n].uri, "test:", 5) != 0 && !st.guest_filter)
        fail_msg("host %s: the guest filter is not in place: %s", hosts[n].name,
                 st.guest_filter_error);
    n++;
}

static void add_host_via(const char *name, const char *uri, int64_t max_guests,
                         enum host_transport transport)
{
    struct config_host cfg = host_cfg(name, uri, max_guests);
    cfg.agent_transport = transport;
    add_host_cfg(cfg);
}

static void add_host(const char *name, const char *uri, int64_t max_guests)
{
    add_host_via(name, uri, max_guests, TRANSPORT_AUTO);
}

/* The host the real guests below are made on. */
static const char *guest_host = "local";

static int setup(void **state)
{
    (void)state;
    /* As in hatcheryd (main): a write to a libvirtd that has just gone away is an error for
     * libvirt to report, not a SIGPIPE that ends the test without a word (seen when a
     * stream's abort raced libvirtd's stop in test_stale_container_after_libvirtd_restart). */
    signal(SIGPIPE, SIG_IGN);
    /* Others pass through, as through /var/lib/hatchery: a container's root is no one here. */
    if (!mkdtemp(state_dir) || chmod(state_dir, 0711) < 0)
        return -1;
    uv_loop_init(&loop);
    if (libvirt_loop_register(&loop) < 0)
        return -1;
    struct provisioner_options o = {.controller_id = "ptest", .state_dir = state_dir};
    return provisioner_new(&loop, &o, &prov);
}

/* ---- test:///default ------------------------------------------------------------------ */

static struct config_pool test_pool = {
    .name = (char *)"tpool",
    .arch = ARCH_S390X,
    .backend = BACKEND_VM,
    .image = (char *)"/default-pool/base.qcow2",
    .vcpus = 2,
    .memory_mib = 1024,
    .max_runners = 10,
    .network = (char *)"none",
    .disk_mib = 64,
    .boot_timeout_s = 600,
};

/* The guest lifecycle table (libvirt/guest.c): what may follow what. */
static void test_guest_lifecycle_table(void **state)
{
    (void)state;
    for (int from = 0; from < GUEST_DELETING; from++)
        assert_true(guest_move_allowed((enum guest_state)from, GUEST_DELETING));
    assert_true(guest_move_allowed(GUEST_DELETING, GUEST_GONE));
    for (int to = 0; to < GUEST_STATE_MAX; to++) {
        assert_false(guest_move_allowed(GUEST_GONE, (enum guest_state)to));
        assert_false(guest_move_allowed((enum guest_state)to, (enum guest_state)to));
        if (to != GUEST_GONE)
            assert_false(guest_move_allowed(GUEST_DELETING, (enum guest_state)to));
        if (to != GUEST_DELETING)
            assert_false(guest_move_allowed(GUEST_UP, (enum guest_state)to));
    }
    /* A container's agent may say hello before its create call returns; an adopted
     * guest is up once its agent answers resume. */
    assert_true(guest_move_allowed(GUEST_CREATING, GUEST_UP));
    assert_true(guest_move_allowed(GUEST_ADOPTING, GUEST_UP));
    assert_true(guest_move_allowed(GUEST_BOOTING, GUEST_UP));
    /* Nothing goes back, and nothing skips the teardown. */
    assert_false(guest_move_allowed(GUEST_UP, GUEST_BOOTING));
    assert_false(guest_move_allowed(GUEST_BOOTING, GUEST_CREATING));
    assert_false(guest_move_allowed(GUEST_ADOPTING, GUEST_BOOTING));
    assert_false(guest_move_allowed(GUEST_CREATING, GUEST_GONE));
    assert_false(guest_move_allowed(GUEST_STATE_MAX, GUEST_DELETING));
}

/* The template slot's table: a template is ready only after it was looked at or built, is
 * never built while ready, and disabled gives way only to a changed want. */
static void test_template_lifecycle_table(void **state)
{
    (void)state;
    for (int s = 0; s < SLOT_STATE_MAX; s++)
        assert_true(slot_move_allowed((enum slot_state)s, (enum slot_state)s));
    assert_true(slot_move_allowed(SLOT_UNKNOWN, SLOT_CHECKING));
    assert_true(slot_move_allowed(SLOT_CHECKING, SLOT_BUILDING));
    assert_true(slot_move_allowed(SLOT_BUILDING, SLOT_READY));
    assert_true(slot_move_allowed(SLOT_READY, SLOT_BROKEN));
    assert_true(slot_move_allowed(SLOT_BROKEN, SLOT_UNKNOWN));
    assert_false(slot_move_allowed(SLOT_UNKNOWN, SLOT_READY));
    assert_false(slot_move_allowed(SLOT_UNKNOWN, SLOT_BUILDING));
    assert_false(slot_move_allowed(SLOT_READY, SLOT_BUILDING));
    assert_false(slot_move_allowed(SLOT_BROKEN, SLOT_READY));
    for (int to = 0; to < SLOT_STATE_MAX; to++)
        if (to != SLOT_UNKNOWN && to != SLOT_DISABLED)
            assert_false(slot_move_allowed(SLOT_DISABLED, (enum slot_state)to));
    assert_false(slot_move_allowed(SLOT_STATE_MAX, SLOT_UNKNOWN));
}

static void test_create_destroy_cycles_and_capacity(void **state)
{
    (void)state;
    add_host("t1", "test:///default", 3);
    for (int cycle = 0; cycle < 20; cycle++) {
        struct run runs[4] = {{0}};
        struct guest *gs[4] = {NULL};
        for (int i = 0; i < 3; i++) {
            char name[64];
            snprintf(name, sizeof(name), "hatchery-ptest-%d-%d", cycle, i);
            struct guest_spec spec = {
                .name = name, .runner_id = cycle * 10 + i, .pool = &test_pool};
            int r = provider_guest_create(provisioner_provider(prov), "t1", &spec, &events,
                                          &runs[i], &gs[i]);
            if (r < 0)
                fail_msg("create %s: %d", name, r);
        }
        /* max_guests is 3: the fourth is refused, with nothing created. */
        struct guest_spec extra = {
            .name = "hatchery-ptest-extra", .runner_id = 99, .pool = &test_pool};
        assert_int_equal(provider_guest_create(provisioner_provider(prov), "t1", &extra, &events,
                                               &runs[3], &gs[3]),
                         -ENOSPC);
        struct host_usage u;
        provisioner_host_usage(prov, "t1", &u);
        assert_int_equal(u.guests, 3);
        assert_int_equal(u.vcpus, 6);
        assert_int_equal(u.memory_mib, 3072);
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 200 && guest_state_get(gs[k]) == GUEST_CREATING; i++)
                uv_run(&loop, UV_RUN_ONCE);
        if (cycle == 0) {
            /* Tagged through <metadata>: our three, by name. */
            char **names = NULL;
            size_t n = 0;
            assert_int_equal(provisioner_tagged_domains(prov, "t1", &names, &n), 0);
            size_t ours = 0;
            for (size_t i = 0; i < n; i++) {
                ours += strstr(names[i], "hatchery-ptest-0-") != NULL;
                free(names[i]);
            }
            free(names);
            assert_int_equal(n, 3);
            assert_int_equal(ours, 3);
        }
        for (int i = 0; i < 3; i++) {
            assert_false(runs[i].failed);
            guest_teardown(gs[i], "test");
            guest_teardown(gs[i], "test again: idempotent");
        }
        for (int i = 0; i < 3; i++)
            wait_for(&runs[i].gone, 10);
        provisioner_host_usage(prov, "t1", &u);
        assert_int_equal(u.guests, 0);
        assert_int_equal(u.vcpus, 0);
    }
    char **names = NULL;
    size_t n = 0;
    assert_int_equal(provisioner_tagged_domains(prov, "t1", &names, &n), 0);
    assert_int_equal(n, 0); /* nothing leaked */
    free(names);
}

/* ---- a real libvirtd ---------------------------------------------------------------------- */

/* Stops or starts the test libvirtd (tests/libvirt/libvirtd.sh, from run-real.sh). */
static void libvirtd_do(const char *action)
{
    const char *sh = getenv("LIBVIRTD_SH");
    assert_non_null(sh);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "%s %s >/dev/null", sh, action);
    assert_int_equal(system(cmd), 0);
}

static void on_removed(void *data, int err)
{
    assert_int_equal(err, 0);
    *(bool *)data = true;
}

static struct config_pool real_pool(const char *arch)
{
    char var[64];
    snprintf(var, sizeof(var), "GUEST_%s", arch);
    const char *dir = getenv(var);
    assert_non_null(dir);
    static char paths[2][3][512];
    int k = strcmp(arch, "ppc64le") == 0 ? 0 : 1;
    snprintf(paths[k][0], 512, "%s/kernel", dir);
    snprintf(paths[k][1], 512, "%s/initrd", dir);
    snprintf(paths[k][2], 512, "%s/base.qcow2", dir);
    return (struct config_pool){
        .name = (char *)arch,
        .arch = k == 0 ? ARCH_PPC64LE : ARCH_S390X,
        .backend = BACKEND_VM,
        .image = paths[k][2],
        .kernel = paths[k][0],
        .initrd = paths[k][1],
        .cmdline = (char *)(k == 0 ? "console=hvc0 quiet" : "console=ttysclp0 quiet"),
        .firmware = k == 0 ? FIRMWARE_VOF : FIRMWARE_DEFAULT,
        .vcpus = 1,
        .memory_mib = 512,
        .max_runners = 4,
        .network = (char *)"none",
        .disk_mib = 64,
        .boot_timeout_s = 90,
    };
}

static bool domain_exists(const char *name)
{
    virConnectPtr c = virConnectOpen("qemu:///system");
    virDomainPtr d = virDomainLookupByName(c, name);
    bool exists = d != NULL;
    if (d)
        virDomainFree(d);
    virStoragePoolPtr p = virStoragePoolLookupByName(c, storage_pool_name);
    char vol[128];
    snprintf(vol, sizeof(vol), "%s.qcow2", name);
    virStorageVolPtr v = p ? virStorageVolLookupByName(p, vol) : NULL;
    exists = exists || v != NULL;
    if (v)
        virStorageVolFree(v);
    if (p)
        virStoragePoolFree(p);
    virConnectClose(c);
    return exists;
}

static bool domain_running(const char *name)
{
    virConnectPtr c = virConnectOpen("qemu:///system");
    virDomainPtr d = c ? virDomainLookupByName(c, name) : NULL;
    bool running = d && virDomainIsActive(d) == 1;
    if (d)
        virDomainFree(d);
    if (c)
        virConnectClose(c);
    return running;
}

static void boot_one(struct config_pool *pool, const char *name, const char *jit, int expect_code)
{
    struct run r = {.jit = jit};
    struct guest *g = NULL;
    struct guest_spec spec = {.name = name, .runner_id = 1, .pool = pool};
    assert_int_equal(
        provider_guest_create(provisioner_provider(prov), guest_host, &spec, &events, &r, &g), 0);
    wait_for(&r.exited, 120);
    if (!r.exited)
        fail_msg("%s: no exit (failed=%d: %s)", name, r.failed, r.reason);
    assert_true(r.hello);
    assert_true(r.started);
    assert_string_equal(r.arch, pool->arch == ARCH_PPC64LE ? "ppc64le" : "s390x");
    assert_int_equal(r.exit.code, expect_code);
    assert_int_equal(r.exit.signal, 0);
    /* The guest powers itself off; its owner hears it ended, and tears it down. */
    wait_for(&r.gone, 60);
    assert_true(r.gone);
    assert_false(r.failed);
    assert_true(r.ended_after_exit);
    assert_false(domain_exists(name));
    assert_true(r.secret_scan_done);
    assert_false(r.secret_in_argv);
    /* A socket host's guest uses our channel socket and console file; a stream host's
     * guest names no path of this machine. */
    assert_int_equal(r.xml_names_state_dir,
                     strcmp(guest_host, "streamed") != 0 && strcmp(guest_host, "remote") != 0);
}

static void test_ppc64le_guest(void **state)
{
    (void)state;
    add_host("local", "qemu:///system", 4);
    struct config_pool pool = real_pool("ppc64le");
    boot_one(&pool, "hatchery-ptest-ppc-0", "exit=0 jit-secret-7d3f1a", 0);
    boot_one(&pool, "hatchery-ptest-ppc-1", "exit=1 jit-secret-7d3f1a", 1);
}

static void test_s390x_guest(void **state)
{
    (void)state;
    struct config_pool pool = real_pool("s390x");
    boot_one(&pool, "hatchery-ptest-z-0", "exit=0 jit-secret-7d3f1a", 0);
}

static void bad_guest(const char *mode, int boot_timeout_s, const char *expect)
{
    struct config_pool pool = real_pool("s390x");
    char cmdline[128];
    snprintf(cmdline, sizeof(cmdline), "console=ttysclp0 quiet hatchery.test=%s", mode);
    pool.cmdline = cmdline;
    pool.boot_timeout_s = boot_timeout_s;
    char name[64];
    snprintf(name, sizeof(name), "hatchery-ptest-%s", mode);
    struct run r = {.jit = "exit=0"};
    struct guest *g = NULL;
    struct guest_spec spec = {.name = name, .runner_id = 2, .pool = &pool};
    assert_int_equal(
        provider_guest_create(provisioner_provider(prov), guest_host, &spec, &events, &r, &g), 0);
    wait_for(&r.gone, boot_timeout_s + 60);
    assert_true(r.failed);
    if (!strstr(r.reason, expect))
        fail_msg("%s: reason '%s' lacks '%s'", mode, r.reason, expect);
    assert_true(r.gone);
    assert_false(r.exited);
    assert_false(domain_exists(name));
}

static void test_silent_guest_dies_at_boot_timeout(void **state)
{
    (void)state;
    bad_guest("silent", 15, "no hello from the agent within 15 s");
}

static void test_flooding_guest_is_cut_off(void **state)
{
    (void)state;
    bad_guest("flood", 60, "a line longer than");
}

/* A local guest writes its console to a file through virtlogd, which rolls it over at
 * max_size and keeps max_backups (the test libvirtd's virtlogd.conf: 128 KiB, 2): a guest
 * that floods its console cannot fill the host's disk. */
static void test_console_flood_is_capped(void **state)
{
    (void)state;
    bad_guest("noisy", 40, "no hello from the agent within 40 s");
    char path[PATH_MAX];
    long long total = 0;
    int files = 0;
    for (int i = -1; i < 8; i++) {
        struct stat st;
        if (i < 0)
            snprintf(path, sizeof(path), "%s/logs/hatchery-ptest-noisy.console.log", state_dir);
        else
            snprintf(path, sizeof(path), "%s/logs/hatchery-ptest-noisy.console.log.%d", state_dir,
                     i);
        if (stat(path, &st) == 0) {
            total += st.st_size;
            files++;
        }
    }
    printf("# console flood: %d files, %lld bytes in all\n", files, total);
    /* Rolled over (more was written than one file holds), and bounded by three files. */
    assert_true(files >= 2);
    assert_true(total <= 3 * 131072 + 4096);
}

static void test_lying_guest_is_cut_off(void **state)
{
    (void)state;
    bad_guest("liar", 60, "exited before the runner could start");
    /* The controller is unaffected: a good guest right after works. */
    struct config_pool pool = real_pool("s390x");
    boot_one(&pool, "hatchery-ptest-z-after", "exit=0 jit-secret-7d3f1a", 0);
}

/* Two live guests with one machine-id share a boot's state (a copied disk, a restored
 * memory image), and with it their randomness: the second is failed at its hello, before
 * any runner's config reaches it, and the first goes on. Guests without a machine-id (the
 * plain test guest says "unknown") are no one's clones. */
static void test_twin_guest_gets_no_config(void **state)
{
    (void)state;
    struct config_pool plain = real_pool("s390x");
    struct config_pool twins = real_pool("s390x");
    twins.cmdline = (char *)"console=ttysclp0 quiet hatchery.test=twin";
    struct run plain_1 = {.jit = "sleep=30 exit=0"}, plain_2 = {.jit = "exit=0"};
    struct run first = {.jit = "sleep=30 exit=0"}, twin = {.jit = "exit=0 jit-secret-7d3f1a"};
    struct guest *g = NULL;
    struct guest_spec spec_p1 = {.name = "hatchery-ptest-plain-1", .runner_id = 3, .pool = &plain};
    struct guest_spec spec_p2 = {.name = "hatchery-ptest-plain-2", .runner_id = 4, .pool = &plain};
    struct guest_spec spec_t1 = {.name = "hatchery-ptest-twin-1", .runner_id = 5, .pool = &twins};
    struct guest_spec spec_t2 = {.name = "hatchery-ptest-twin-2", .runner_id = 6, .pool = &twins};
    assert_int_equal(provider_guest_create(provisioner_provider(prov), guest_host, &spec_p1,
                                           &events, &plain_1, &g),
                     0);
    assert_int_equal(provider_guest_create(provisioner_provider(prov), guest_host, &spec_t1,
                                           &events, &first, &g),
                     0);
    wait_for(&plain_1.started, 120);
    wait_for(&first.started, 120);
    assert_true(plain_1.started);
    assert_true(first.started);

    assert_int_equal(provider_guest_create(provisioner_provider(prov), guest_host, &spec_p2,
                                           &events, &plain_2, &g),
                     0);
    assert_int_equal(
        provider_guest_create(provisioner_provider(prov), guest_host, &spec_t2, &events, &twin, &g),
        0);
    wait_for(&twin.gone, 180);
    assert_true(twin.failed);
    assert_false(twin.started);
    if (!strstr(twin.reason, "a clone of live guest hatchery-ptest-twin-1: the same machine-id"))
        fail_msg("twin: reason '%s'", twin.reason);
    assert_false(domain_exists("hatchery-ptest-twin-2"));
    wait_for(&plain_2.gone, 120);
    assert_false(plain_2.failed);
    assert_int_equal(plain_2.exit.code, 0);

    wait_for(&first.gone, 120);
    wait_for(&plain_1.gone, 120);
    assert_true(first.exited && plain_1.exited);
    assert_int_equal(first.exit.code, 0);
    assert_int_equal(plain_1.exit.code, 0);
    assert_false(first.failed || plain_1.failed);
    /* Their runners ran 30 s: the agent beat every AGENT_HEARTBEAT_S, and the guest kept
     * the last beat for its owner to ask (a silent agent is judged hung by it). */
    assert_true(plain_1.exit.duration_s >= 3 * AGENT_HEARTBEAT_S);
    assert_true(plain_1.heard_ms > 0 && first.heard_ms > 0);
}

/* A remote host's guests are reached through libvirt streams only: the channel and the
 * console both. Forced here on the local libvirtd (qemu:///system already talks to it
 * over libvirt's RPC, as qemu+ssh:// would). The console must arrive in the runner's log,
 * and a flooding guest must be cut off through the bridge as it is through a socket. */
static void test_guests_through_streams(void **state)
{
    (void)state;
    add_host_via("streamed", "qemu:///system", 4, TRANSPORT_STREAM);
    guest_host = "streamed";
    struct config_pool pool = real_pool("ppc64le");
    boot_one(&pool, "hatchery-ptest-stream-0", "exit=0 jit-secret-7d3f1a", 0);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "grep -q 'fake-runner: done' %s/logs/hatchery-ptest-stream-0.console.log", state_dir);
    assert_int_equal(system(cmd), 0);
    bad_guest("flood", 60, "a line longer than");
    guest_host = "local";
}

/* A guest outlives its provisioner (hatcheryd restarted): a new provisioner adopts it on
 * a stream host (the channel reopened through libvirt, forced past the dead one's), and
 * its agent resumes, with the runner still running, then reports its exit. The adopted
 * guest's identity is kept from its resumed message: a clone of it (a guest with its
 * machine-id) booted meanwhile gets no config. */
static void test_adoption_through_streams(void **state)
{
    (void)state;
    guest_host = "streamed";
    struct config_pool pool = real_pool("ppc64le");
    pool.cmdline = (char *)"console=hvc0 quiet hatchery.test=twin";
    struct run first = {.jit = "sleep=30 exit=0 jit-secret-7d3f1a"};
    struct guest *g = NULL;
    struct guest_spec spec = {.name = "hatchery-ptest-adopt-0", .runner_id = 7, .pool = &pool};
    assert_int_equal(
        provider_guest_create(provisioner_provider(prov), guest_host, &spec, &events, &first, &g),
        0);
    wait_for(&first.started, 120);
    assert_true(first.started);
    /* hatcheryd goes away: its connections close, the guest and its domain stay (and no
     * event comes back to the first run, whose config it held). */
    provider_free(provisioner_provider(prov));
    secret_free(first.jit_secret);
    first.jit_secret = NULL;
    bool never = false;
    wait_for(&never, 2);
    assert_true(domain_exists("hatchery-ptest-adopt-0"));
    struct provisioner_options o = {
        .controller_id = "ptest", .state_dir = state_dir, .adopt_grace_ms = 30000};
    assert_int_equal(provisioner_new(&loop, &o, &prov), 0);
    add_host_via("streamed", "qemu:///system", 4, TRANSPORT_STREAM);
    struct run second = {.jit = NULL};
    uint64_t t0 = uv_now(&loop);
    assert_int_equal(
        provider_guest_adopt(provisioner_provider(prov), guest_host, &spec, &events, &second, &g),
        0);
    wait_for(&second.resumed, 60);
    if (!second.resumed)
        fail_msg("not resumed (failed=%d: %s)", second.failed, second.reason);
    fprintf(stderr, "adoption through a stream: %llu ms to resumed\n",
            (unsigned long long)(uv_now(&loop) - t0));
    assert_int_equal(second.resumed_as.state, AGENT_RESUMED_RUNNING);
    assert_true(second.resumed_as.pid > 0);
    assert_string_equal(second.resumed_as.runner_name, "hatchery-ptest-adopt-0");
    struct run twin = {.jit = "exit=0 jit-secret-7d3f1a"};
    struct guest_spec twin_spec = {
        .name = "hatchery-ptest-adopt-twin", .runner_id = 8, .pool = &pool};
    assert_int_equal(provider_guest_create(provisioner_provider(prov), guest_host, &twin_spec,
                                           &events, &twin, &g),
                     0);
    wait_for(&twin.gone, 120);
    assert_true(twin.failed);
    assert_false(twin.started);
    if (!strstr(twin.reason, "a clone of live guest hatchery-ptest-adopt-0: the same machine-id"))
        fail_msg("the adopted guest's twin: reason '%s'", twin.reason);
    wait_for(&second.exited, 120);
    assert_true(second.exited);
    assert_int_equal(second.exit.code, 0);
    assert_true(second.exit.duration_s >= 30);
    wait_for(&second.gone, 60);
    assert_true(second.gone);
    assert_false(second.failed);
    assert_false(domain_exists("hatchery-ptest-adopt-0"));
    /* The hosts the tests after this one use, on the new provisioner. */
    add_host("local", "qemu:///system", 4);
    guest_host = "local";
}

static struct config_pool lxc_pool(void)
{
    return (struct config_pool){
        .name = (char *)"lxc",
        .arch = ARCH_X86_64,
        .backend = BACKEND_CONTAINER,
        .image = (char *)getenv("ROOTFS"),
        .vcpus = 1,
        .memory_mib = 256,
        .max_runners = 2,
        .boot_timeout_s = 30,
        .network = (char *)"none",
        .runner_user = (char *)"runner",
    };
}

/* Runs `cmd` in the test libvirtd's mount namespace (tests/libvirt/libvirtd.sh), where
 * what is mounted is not seen from here. */
static void in_libvirtd_namespace(const char *cmd)
{
    char line[2048];
    snprintf(line, sizeof(line),
             "nsenter -t \"$(cat /run/hatchery-test-libvirtd/pid)\" -m -- sh -ec '%s'", cmd);
    if (system(line) != 0)
        fail_msg("in libvirtd's namespace: %s", cmd);
}

/* What provisioner_host_image reports once the probe it starts has answered. */
static struct image_status image_on(const char *host, const struct config_pool *pool,
                                    enum image_state until_not)
{
    struct image_status st;
    for (int i = 0; i < 400; i++) {
        assert_int_equal(provider_host_image(provisioner_provider(prov), host, pool, &st), 0);
        if (st.state != until_not && st.state != IMAGE_CHECKING)
            return st;
        bool never = false;
        wait_for(&never, 0);
        usleep(50000);
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    fail_msg("host %s: the image of %s stays %s", host, pool->name, image_state_name(st.state));
    return st;
}

/* A host reached only through libvirt, whose image this machine cannot see: the image,
 * its manifest and boot files are found through libvirt's storage API (the directory is
 * bound over an empty one in libvirtd's mount namespace only), and the guest boots the
 * kernel and initrd that host's manifest names. Before, with the image missing, with the
 * manifest for another arch, and with one too large, the host gets no guest and says why. */
static void test_image_found_through_libvirt(void **state)
{
    (void)state;
    add_host_via("remote", "qemu+unix:///system", 4, TRANSPORT_STREAM);
    char hidden[128], big[160], cmd[1024];
    snprintf(hidden, sizeof(hidden), "/run/hatchery-ptest-images-%d", (int)getpid());
    snprintf(big, sizeof(big), "%s-big", hidden);
    assert_int_equal(mkdir(hidden, 0755), 0);
    assert_int_equal(mkdir(big, 0755), 0);
    struct config_pool pool = real_pool("ppc64le");
    char image[256];
    snprintf(image, sizeof(image), "%s/base.qcow2", hidden);
    pool.name = (char *)"remote-ppc";
    pool.image = image;
    pool.kernel = pool.initrd = NULL; /* from the host's manifest */

    struct image_status st = image_on("remote", &pool, IMAGE_CHECKING);
    assert_int_equal(st.state, IMAGE_MISSING);
    snprintf(cmd, sizeof(cmd), "image %s missing on the host", image);
    if (!strstr(st.reason, cmd))
        fail_msg("missing: reason '%s'", st.reason);
    struct run r = {.jit = "exit=0"};
    struct guest *g = NULL;
    struct guest_spec spec = {.name = "hatchery-ptest-remote-0", .runner_id = 1, .pool = &pool};
    assert_int_equal(
        provider_guest_create(provisioner_provider(prov), "remote", &spec, &events, &r, &g),
        -ENOENT);

    /* The image appears on the host; this machine still cannot see it. */
    snprintf(cmd, sizeof(cmd), "mount --bind %s %s", getenv("GUEST_ppc64le"), hidden);
    in_libvirtd_namespace(cmd);
    assert_int_not_equal(access(image, F_OK), 0);
    st = image_on("remote", &pool, IMAGE_MISSING); /* looked at again within 10 s */
    assert_int_equal(st.state, IMAGE_READY);
    assert_string_equal(st.manifest.arch, "ppc64le");
    snprintf(cmd, sizeof(cmd), "%s/kernel", hidden);
    assert_string_equal(st.manifest.kernel, cmd);
    guest_host = "remote";
    boot_one(&pool, "hatchery-ptest-remote-1", "exit=0 jit-secret-7d3f1a", 0);
    guest_host = "local";

    /* The same image for an s390x pool: refused, with the manifest's reason. */
    struct config_pool wrong = pool;
    wrong.name = (char *)"remote-z";
    wrong.arch = ARCH_S390X;
    st = image_on("remote", &wrong, IMAGE_CHECKING);
    assert_int_equal(st.state, IMAGE_MISSING);
    assert_non_null(strstr(st.reason, "image is built for ppc64le, the pool is s390x"));

    /* A manifest past the bound is not read. */
    snprintf(cmd, sizeof(cmd),
             "mount -t tmpfs -o size=4m none %s && qemu-img create -q -f qcow2 %s/x.qcow2 1M && "
             "yes | head -c 70000 > %s/x.qcow2.json",
             big, big, big);
    in_libvirtd_namespace(cmd);
    struct config_pool large = pool;
    char large_image[256];
    snprintf(large_image, sizeof(large_image), "%s/x.qcow2", big);
    large.name = (char *)"remote-big";
    large.image = large_image;
    st = image_on("remote", &large, IMAGE_CHECKING);
    assert_int_equal(st.state, IMAGE_MISSING);
    if (!strstr(st.reason, "larger than 65536 bytes"))
        fail_msg("large: reason '%s'", st.reason);

    /* No trace left on the host: the transient pools over the directories go too. */
    virConnectPtr c = virConnectOpen("qemu:///system");
    const char *dirs[] = {hidden, big};
    for (size_t i = 0; i < 2; i++) {
        virStoragePoolPtr sp = virStoragePoolLookupByTargetPath(c, dirs[i]);
        assert_non_null(sp);
        assert_int_equal(strncmp(virStoragePoolGetName(sp), "hatchery-image-", 15), 0);
        virStoragePoolDestroy(sp);
        virStoragePoolFree(sp);
    }
    virConnectClose(c);
    snprintf(cmd, sizeof(cmd), "umount %s %s", hidden, big);
    in_libvirtd_namespace(cmd);
    rmdir(hidden);
    rmdir(big);
}

static void test_lxc_container(void **state)
{
    (void)state;
    add_host("lxc", "lxc:///", 4);
    struct config_pool pool = lxc_pool();
    assert_non_null(pool.image);
    struct run r = {.jit = "exit=3 jit-secret-7d3f1a"};
    struct guest *g = NULL;
    struct guest_spec spec = {.name = "hatchery-ptest-lxc", .runner_id = 3, .pool = &pool};
    assert_int_equal(
        provider_guest_create(provisioner_provider(prov), "lxc", &spec, &events, &r, &g), 0);
    wait_for(&r.exited, 60);
    if (!r.exited)
        fail_msg("container: no exit (failed=%d: %s)", r.failed, r.reason);
    assert_string_equal(r.arch, "x86_64");
    assert_int_equal(r.exit.code, 3);
    wait_for(&r.gone, 30);
    assert_true(r.gone);
    assert_false(r.failed);
    virConnectPtr c = virConnectOpen("lxc:///");
    virDomainPtr d = virDomainLookupByName(c, "hatchery-ptest-lxc");
    assert_null(d);
    virConnectClose(c);

    /* A root libvirt cannot enter from a user namespace (no .oldroot) fails with the reason,
     * and so does one its root cannot reach. */
    char bare[] = "/tmp/hatchery-bare-root-XXXXXX";
    assert_non_null(mkdtemp(bare));
    chmod(bare, 0755);
    pool.image = bare;
    struct run bad = {.jit = "exit=0"};
    spec = (struct guest_spec){.name = "hatchery-ptest-lxc-bare", .runner_id = 5, .pool = &pool};
    assert_int_equal(
        provider_guest_create(provisioner_provider(prov), "lxc", &spec, &events, &bad, &g), 0);
    wait_for(&bad.failed, 30);
    assert_true(bad.failed);
    if (!strstr(bad.reason, "has no .oldroot directory"))
        fail_msg("reason: %s", bad.reason);
    wait_for(&bad.gone, 30);
    chmod(bare, 0700);
    char oldroot[sizeof(bare) + 16];
    snprintf(oldroot, sizeof(oldroot), "%s/.oldroot", bare);
    assert_int_equal(mkdir(oldroot, 0755), 0);
    struct run hidden = {.jit = "exit=0"};
    spec.name = "hatchery-ptest-lxc-hidden";
    assert_int_equal(
        provider_guest_create(provisioner_provider(prov), "lxc", &spec, &events, &hidden, &g), 0);
    wait_for(&hidden.failed, 30);
    if (!strstr(hidden.reason, "does not let others pass"))
        fail_msg("reason: %s", hidden.reason);
    wait_for(&hidden.gone, 30);
    rmdir(oldroot);
    rmdir(bare);
}

/* A remote host that goes silent while its guest runs (its libvirtd hung, its network
 * dropping packets): the guest's streams are released, and the guest torn down, with
 * calls that wait for the host's answer. They must wait on that host's own threads: the
 * loop and libuv's pool (where hatcheryd's store commits) stay free. The host is reached
 * through a proxy (silent-proxy.py) that SIGSTOP silences; main runs this with a pool of
 * one thread, so a release stuck there shows at once. Seen failing three ways: the stream
 * release put back on uv_queue_work (the probe: 10 s), the connection's close put back
 * on the loop (the provisioner's end: 5 s, until the waker), the close callback's work
 * done on the thread libvirt calls it from (an event off the loop). */
static pid_t silent_proxy;

static void on_probe(uv_work_t *w)
{
    (void)w;
}

static void on_probe_done(uv_work_t *w, int status)
{
    (void)status;
    *(bool *)w->data = true;
}

static void on_listed(void *data, const char *host, char **names, size_t n)
{
    (void)host, (void)names, (void)n;
    *(bool *)data = true;
}

static pid_t silent_proxy_start(const char *proxy, const char *listen_path)
{
    unlink(listen_path);
    pid_t pid = fork();
    if (pid == 0) {
        /* It ends with this test, whatever way the test ends: left behind (a test killed
         * at its timeout), it would hold the test's stderr, and ctest would wait for it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        execl(proxy, proxy, listen_path, "/run/libvirt/libvirt-sock", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 50 && access(listen_path, F_OK) < 0; i++)
        usleep(100000);
    return pid;
}

/* A guest made on `host` whose runner has started. */
static struct guest *runner_started_on(const char *host, const struct guest_spec *spec,
                                       struct run *r)
{
    struct guest *g = NULL;
    assert_int_equal(provider_guest_create(provisioner_provider(prov), host, spec, &events, r, &g),
                     0);
    wait_for(&r->started, 120);
    if (!r->started)
        fail_msg("%s: not started (failed=%d: %s)", spec->name, r->failed, r->reason);
    return g;
}

static void test_streams_of_a_silent_host(void **state)
{
    (void)state;
    char listen_path[PATH_MAX], uri[PATH_MAX + 64];
    snprintf(listen_path, sizeof(listen_path), "%s/silent-host.sock", state_dir);
    const char *proxy = getenv("SILENT_PROXY");
    assert_non_null(proxy);
    silent_proxy = silent_proxy_start(proxy, listen_path);
    snprintf(uri, sizeof(uri), "qemu+unix:///system?socket=%s", listen_path);
    add_host_via("silent", uri, 2, TRANSPORT_STREAM);

    struct config_pool pool = real_pool("s390x");
    assert_int_equal(image_on("silent", &pool, IMAGE_CHECKING).state, IMAGE_READY);
    struct run r = {.jit = "sleep=60 exit=0"};
    struct guest_spec spec = {.name = "hatchery-ptest-silent", .runner_id = 9, .pool = &pool};
    struct guest *g = runner_started_on("silent", &spec, &r);

    assert_int_equal(kill(silent_proxy, SIGSTOP), 0);
    provider_guest_teardown(provisioner_provider(prov), g, "the test tears it down");
    static uv_work_t probe; /* static: if this fails, the probe still ends somewhere */
    static bool probed;
    probe.data = &probed;
    uint64_t t0 = uv_now(&loop);
    assert_int_equal(uv_queue_work(&loop, &probe, on_probe, on_probe_done), 0);
    wait_for(&probed, 10);
    uint64_t waited = uv_now(&loop) - t0;
    fprintf(stderr, "# libuv's pool while the host is silent: a probe done in %llu ms\n",
            (unsigned long long)waited);
    assert_int_equal(kill(silent_proxy, SIGCONT), 0);
    assert_true(probed);
    assert_true(waited < 3000); /* stuck behind a release, it waits for keepalive: 15-20 s */

    /* The host answers again: the release and the teardown finish, the guest is gone. */
    wait_for(&r.gone, 60);
    assert_true(r.gone);
    assert_false(domain_exists("hatchery-ptest-silent"));

    /* Silent again under a running guest, and then gone: the connection ends while a
     * call (a listing of the host's domains) waits on it, so libvirt reports the close
     * from that call's thread. The host goes down and its guest is failed (no
     * down_grace_s here) on the loop, like every event; the domain left running there is
     * the reconciler's. */
    struct run r2 = {.jit = "sleep=60 exit=0"};
    spec.name = "hatchery-ptest-vanish";
    runner_started_on("silent", &spec, &r2);
    assert_int_equal(kill(silent_proxy, SIGSTOP), 0);
    bool listed = false;
    assert_int_equal(
        provider_tagged_async(provisioner_provider(prov), "silent", on_listed, &listed), 0);
    bool never = false;
    wait_for(&never, 1);
    assert_int_equal(kill(silent_proxy, SIGKILL), 0);
    waitpid(silent_proxy, NULL, 0);
    wait_for(&r2.gone, 30);
    assert_true(r2.gone);
    assert_true(r2.failed);
    if (!strstr(r2.reason, "host silent went down"))
        fail_msg("reason: %s", r2.reason);
    assert_false(provider_host_up(provisioner_provider(prov), "silent"));
    assert_false(event_off_loop);
    silent_proxy = silent_proxy_start(proxy, listen_path);
    wait_host_up("silent", 600);
    bool removed = false;
    assert_int_equal(
        provider_remove(provisioner_provider(prov), "silent", spec.name, on_removed, &removed), 0);
    wait_for(&removed, 30);
    assert_false(domain_exists(spec.name));

    /* Silent again, idle this time, as hatcheryd stops: closing the connection is a call
     * to the host too (its event callback is dropped there). The provisioner's end must
     * not wait for it on the loop; the close finishes on the host's thread once it
     * answers. */
    assert_int_equal(kill(silent_proxy, SIGSTOP), 0);
    pid_t waker = fork(); /* on the loop, the wait would have no end: the host answers at 5 s */
    if (waker == 0) {
        sleep(5);
        kill(silent_proxy, SIGCONT);
        _exit(0);
    }
    uint64_t t1 = uv_hrtime();
    provider_free(provisioner_provider(prov));
    uint64_t free_ms = (uv_hrtime() - t1) / 1000000;
    fprintf(stderr, "# the provisioner's end with a silent host: %llu ms on the loop\n",
            (unsigned long long)free_ms);
    assert_int_equal(kill(silent_proxy, SIGCONT), 0);
    kill(waker, SIGKILL);
    waitpid(waker, NULL, 0);
    wait_for(&never, 1);
    struct provisioner_options o = {.controller_id = "ptest", .state_dir = state_dir};
    assert_int_equal(provisioner_new(&loop, &o, &prov), 0);
    add_host("local", "qemu:///system", 4);
    assert_true(free_ms < 3000);
}

/* A host that stays away longer than down_grace_s: its guests are given up (failed, and
 * gone from the provisioner), though their domains may still run there; when the host
 * returns, those are the reconciler's to remove. */
static void test_host_away_past_its_grace(void **state)
{
    (void)state;
    struct config_host brief = host_cfg("brief", "qemu:///system", 2);
    brief.down_grace_s = 2;
    add_host_cfg(brief);
    struct config_pool pool = real_pool("s390x");
    struct run r = {.jit = NULL}; /* booted and waiting: never configured */
    struct guest *g = NULL;
    struct guest_spec spec = {.name = "hatchery-ptest-away", .runner_id = 4, .pool = &pool};
    assert_int_equal(
        provider_guest_create(provisioner_provider(prov), "brief", &spec, &events, &r, &g), 0);
    wait_for(&r.hello, 120);
    assert_true(r.hello);
    libvirtd_do("stop");
    /* Kept through the grace, then given up. */
    uint64_t t0 = uv_now(&loop);
    wait_for(&r.failed, 30);
    assert_true(r.failed);
    assert_true(uv_now(&loop) - t0 >= 1500);
    if (!strstr(r.reason, "host brief went down"))
        fail_msg("reason: %s", r.reason);
    wait_for(&r.gone, 30);
    assert_true(r.gone);
    libvirtd_do("start");
    wait_host_up("brief", 600);
    /* QEMU outlived libvirtd: the domain is there for the reconciler. Remove it. */
    assert_true(domain_exists("hatchery-ptest-away"));
    bool removed = false;
    assert_int_equal(provider_remove(provisioner_provider(prov), "brief", "hatchery-ptest-away",
                                     on_removed, &removed),
                     0);
    wait_for(&removed, 30);
    assert_false(domain_exists("hatchery-ptest-away"));
}

/* A container whose controller (libvirt_lxc) died while libvirtd was away comes back as a
 * transient domain in state "shut off", which libvirt should not have kept: its metadata
 * cannot be read and it is neither running nor defined. The reconciler's listing must
 * still see it as ours (by name), and its removal must drop it. Found by the chaos test. */
static void test_stale_container_after_libvirtd_restart(void **state)
{
    (void)state;
    struct config_pool pool = lxc_pool();
    const char *name = "hatchery-ptest-stale";
    struct run r = {.jit = NULL};
    struct guest *g = NULL;
    struct guest_spec spec = {.name = name, .runner_id = 5, .pool = &pool};
    assert_int_equal(
        provider_guest_create(provisioner_provider(prov), "lxc", &spec, &events, &r, &g), 0);
    wait_for(&r.hello, 60);
    assert_true(r.hello);
    char path[256], cmd[600];
    snprintf(path, sizeof(path), "/run/libvirt/lxc/%s.pid", name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int controller = 0;
    assert_int_equal(fscanf(f, "%d", &controller), 1);
    fclose(f);
    libvirtd_do("stop");
    /* The container's init first (the controller's child), then the controller. */
    snprintf(cmd, sizeof(cmd), "pkill -KILL -P %d", controller);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(kill(controller, SIGKILL), 0);
    wait_for(&r.gone, 30); /* the host dropped: the guest is given up (down_grace_s 0) */
    assert_true(r.gone);
    libvirtd_do("start");
    wait_host_up("lxc", 600);
    virConnectPtr c = virConnectOpen("lxc:///");
    virDomainPtr d = virDomainLookupByName(c, name);
    assert_non_null(d); /* the stale object libvirt kept */
    assert_int_equal(virDomainIsActive(d), 0);
    assert_int_equal(virDomainIsPersistent(d), 0);
    virDomainFree(d);
    char **names = NULL;
    size_t n = 0;
    assert_int_equal(provisioner_tagged_domains(prov, "lxc", &names, &n), 0);
    bool listed = false;
    for (size_t i = 0; i < n; i++) {
        listed = listed || strcmp(names[i], name) == 0;
        free(names[i]);
    }
    free(names);
    assert_true(listed);
    bool removed = false;
    assert_int_equal(provider_remove(provisioner_provider(prov), "lxc", name, on_removed, &removed),
                     0);
    wait_for(&removed, 30);
    assert_true(removed);
    d = virDomainLookupByName(c, name);
    assert_null(d);
    virConnectClose(c);
}

static int teardown_real(void **state)
{
    (void)state;
    if (silent_proxy > 0) {
        kill(silent_proxy, SIGKILL);
        waitpid(silent_proxy, NULL, 0);
    }
    /* The transient storage pool this run made goes with it. */
    virConnectPtr c = virConnectOpen("qemu:///system");
    virStoragePoolPtr p = c ? virStoragePoolLookupByName(c, storage_pool_name) : NULL;
    if (p) {
        virStoragePoolDestroy(p);
        virStoragePoolFree(p);
    }
    if (c)
        virConnectClose(c);
    return 0;
}

/* ---- warm templates ---------------------------------------------------------------------- */

struct template_built {
    bool done;
    int err;
    char reason[512];
    int64_t bytes;
};

static void on_template_built(void *data, int err, const char *reason, int64_t bytes)
{
    struct template_built *t = data;
    t->done = true;
    t->err = err;
    t->bytes = bytes;
    snprintf(t->reason, sizeof(t->reason), "%s", reason ? reason : "");
}

/* A runner restored from `tpl`, through its job (the stand-in runner exits 0) and its
 * teardown. */
static void run_restored(struct config_pool *pool, const char *tpl, const char *name, struct run *r)
{
    struct guest *g = NULL;
    struct guest_spec spec = {.name = name, .runner_id = 7, .pool = pool};
    assert_int_equal(provisioner_guest_restore(prov, guest_host, &spec, tpl, &events, r, &g), 0);
    wait_for(&r->exited, 120);
    if (!r->exited)
        fail_msg("%s from %s: no exit (failed=%d: %s)", name, tpl, r->failed, r->reason);
    assert_true(r->restored);
    assert_true(r->started);
    assert_int_equal(r->exit.code, 0);
    wait_for(&r->gone, 60);
    assert_false(r->failed);
    assert_false(domain_exists(name)); /* its overlay volume too */
}

static bool is_hex(const char *s, size_t n)
{
    return strlen(s) == n && strspn(s, "0123456789abcdef") == n;
}

/* Whether a restored guest of `arch` keeps its timers here: s390x does; pseries under TCG
 * only from QEMU 8.2 ("target/ppc: Migrate DECR SPR"). */
static bool restore_keeps_timers(const char *arch)
{
    if (strcmp(arch, "ppc64le") != 0)
        return true;
    FILE *f = popen("qemu-system-ppc64 --version", "r");
    int major = 0, minor = 0;
    if (f) {
        if (fscanf(f, "QEMU emulator version %d.%d", &major, &minor) != 2)
            major = 0;
        pclose(f);
    }
    return major > 8 || (major == 8 && minor >= 2);
}

static void template_cycle(const char *arch)
{
    struct host_status local;
    if (provider_host_status(provisioner_provider(prov), "local", &local) <
        0) /* run alone: PROVISION_TEST_FILTER */
        add_host("local", "qemu:///system", 4);
    wait_host_up("local", 600); /* back from the libvirtd restarts of the tests before */
    struct config_pool pool = real_pool(arch);
    char tpl[64], file[PATH_MAX], name[64];
    snprintf(tpl, sizeof(tpl), "hatchery-ptest-tpl-%s", arch);
    snprintf(file, sizeof(file), "%s/volumes/%s.save", state_dir, tpl);
    struct template_built t = {0};
    assert_int_equal(
        provisioner_template_build(prov, guest_host, &pool, tpl, on_template_built, &t), 0);
    wait_for(&t.done, 150);
    if (!t.done || t.err)
        fail_msg("template %s: %s", tpl, t.done ? t.reason : "not built within 150 s");
    assert_true(t.bytes > 1 << 20);
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    assert_int_equal((int64_t)st.st_size, t.bytes);
    assert_false(domain_running(tpl)); /* saved: gone from libvirt, in its file */

    if (!restore_keeps_timers(arch)) {
        /* pseries under TCG before QEMU 8.2 does not migrate its decrementer: a restored
         * guest's timers stop, sometimes before its hello, sometimes mid-job (seen both
         * ways here). Such a restore is refused, and its runners boot cold. */
        struct run r = {.jit = "exit=0"};
        struct guest *g = NULL;
        snprintf(name, sizeof(name), "hatchery-ptest-%s-from-tpl-refused", arch);
        struct guest_spec spec = {.name = name, .runner_id = 9, .pool = &pool};
        assert_int_equal(provisioner_guest_restore(prov, guest_host, &spec, tpl, &events, &r, &g),
                         -ENOTSUP);
        assert_false(domain_exists(name));
        unlink(file);
        char vol[PATH_MAX];
        snprintf(vol, sizeof(vol), "%s/volumes/%s.qcow2", state_dir, tpl);
        unlink(vol);
        return;
    }

    /* Two runners from the one template, one after the other: each reseeded from the
     * host, each a new machine-id and nonce; the kernel's boot id is the template's. */
    struct run a = {.jit = "exit=0 jit-secret-7d3f1a"}, b = {.jit = "exit=0 jit-secret-7d3f1a"};
    snprintf(name, sizeof(name), "hatchery-ptest-%s-from-tpl-1", arch);
    run_restored(&pool, tpl, name, &a);
    snprintf(name, sizeof(name), "hatchery-ptest-%s-from-tpl-2", arch);
    run_restored(&pool, tpl, name, &b);
    assert_true(is_hex(a.rng_sample, 64) && is_hex(b.rng_sample, 64));
    assert_string_not_equal(a.rng_sample, b.rng_sample);
    assert_true(is_hex(a.nonce, 32) && is_hex(b.nonce, 32));
    assert_string_not_equal(a.nonce, b.nonce);
    assert_true(is_hex(a.machine_id, 32) && is_hex(b.machine_id, 32));
    assert_string_not_equal(a.machine_id, b.machine_id);
    assert_string_equal(a.boot_id, b.boot_id);
    assert_true(a.secret_scan_done && !a.secret_in_argv);

    /* The template stays for the next runner; one at a time. */
    assert_int_equal(access(file, F_OK), 0);

    /* A corrupt save file: the restore fails with the reason (the caller boots cold). */
    int fd = open(file, O_WRONLY);
    assert_true(fd >= 0);
    static char junk[1 << 20];
    memset(junk, 0x5a, sizeof(junk));
    assert_int_equal(pwrite(fd, junk, sizeof(junk), st.st_size / 2), (ssize_t)sizeof(junk));
    close(fd);
    struct run c = {.jit = "exit=0"};
    struct guest *g = NULL;
    snprintf(name, sizeof(name), "hatchery-ptest-%s-from-bad-tpl", arch);
    struct guest_spec spec = {.name = name, .runner_id = 8, .pool = &pool};
    assert_int_equal(provisioner_guest_restore(prov, guest_host, &spec, tpl, &events, &c, &g), 0);
    wait_for(&c.gone, 120);
    assert_true(c.failed);
    assert_false(c.hello);
    if (!strstr(c.reason, "restore from template"))
        fail_msg("a corrupt template failed with '%s'", c.reason);
    assert_false(domain_exists(name));

    unlink(file);
    char vol[PATH_MAX];
    snprintf(vol, sizeof(vol), "%s/volumes/%s.qcow2", state_dir, tpl);
    unlink(vol);
}

static void test_template_ppc64le(void **state)
{
    (void)state;
    template_cycle("ppc64le");
}

static void test_template_s390x(void **state)
{
    (void)state;
    template_cycle("s390x");
}

static void test_secret_in_no_log_or_xml(void **state)
{
    (void)state;
    /* Console logs of every guest above, the log lines (stderr, captured by run-real.sh
     * into HATCHERY_TEST_LOG) and libvirt's own per-domain logs. */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "grep -rl 'jit-secret-7d3f1a' %s/logs /var/log/libvirt /run/libvirt 2>/dev/null",
             state_dir);
    assert_int_not_equal(system(cmd), 0);
    const char *log = getenv("HATCHERY_TEST_LOG");
    if (log) {
        snprintf(cmd, sizeof(cmd), "grep -q 'jit-secret-7d3f1a' %s", log);
        assert_int_not_equal(system(cmd), 0);
    }
    /* And the console logs exist and show the guests did run. */
    snprintf(cmd, sizeof(cmd),
             "grep -q 'fake-runner: done' %s/logs/hatchery-ptest-ppc-0.console.log", state_dir);
    assert_int_equal(system(cmd), 0);
}

int main(int argc, char **argv)
{
    log_level_set(LOG_INFO);
    const struct CMUnitTest testdriver[] = {
        cmocka_unit_test(test_guest_lifecycle_table),
        cmocka_unit_test(test_template_lifecycle_table),
        cmocka_unit_test(test_create_destroy_cycles_and_capacity),
    };
    const struct CMUnitTest real[] = {
        cmocka_unit_test(test_ppc64le_guest),
        cmocka_unit_test(test_s390x_guest),
        cmocka_unit_test(test_silent_guest_dies_at_boot_timeout),
        cmocka_unit_test(test_flooding_guest_is_cut_off),
        cmocka_unit_test(test_console_flood_is_capped),
        cmocka_unit_test(test_lying_guest_is_cut_off),
        cmocka_unit_test(test_twin_guest_gets_no_config),
        cmocka_unit_test(test_guests_through_streams),
        cmocka_unit_test(test_adoption_through_streams),
        cmocka_unit_test(test_streams_of_a_silent_host),
        cmocka_unit_test(test_image_found_through_libvirt),
        cmocka_unit_test(test_lxc_container),
        cmocka_unit_test(test_host_away_past_its_grace),
        cmocka_unit_test(test_stale_container_after_libvirtd_restart),
        cmocka_unit_test(test_template_ppc64le),
        cmocka_unit_test(test_template_s390x),
        cmocka_unit_test(test_secret_in_no_log_or_xml),
    };
    /* One test or a few, by cmocka's pattern: PROVISION_TEST_FILTER='test_template_*'. */
    if (getenv("PROVISION_TEST_FILTER"))
        cmocka_set_test_filter(getenv("PROVISION_TEST_FILTER"));
    if (argc > 1 && strcmp(argv[1], "real") == 0) {
        /* One pool thread: a libvirt call that blocks there (see the silent host) shows.
         * Set before the loop's first use of the pool. */
        setenv("UV_THREADPOOL_SIZE", "1", 1);
        return cmocka_run_group_tests_name("real", real, setup, teardown_real);
    }
    return cmocka_run_group_tests_name("testdriver", testdriver, setup, NULL);
}
