/* The scheduler, driven through every move of the runner lifecycle without libvirt or
 * GitHub: the scheduler gets a provider of this file's own (an ops table, provider.h), and
 * this file defines the GitHub client's functions itself (the linker takes these before
 * the library's); both record what the scheduler asks of them, and the tests play their
 * answers back as the real ones would. The store is real SQLite,
 * the config is a real file, the loop is libuv's; its clock is moved on by the tests
 * (spin()), so a 15 s heartbeat timeout takes milliseconds and fires in its true order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "config.h"
#include "github.h"
#include "job.h"
#include "libvirt/libvirt_loop.h"
#include "provider.h"
#include "libvirt/provisioner.h"
#include "scheduler.h"
#include "scaleset/scaleset.h"
#include "secret.h"
#include "store.h"
#include "wall_clock.h"

/* ---- the fake provider ---------------------------------------------------------------- */

struct guest {
    char name[160];
    const struct guest_events *events;
    void *data;
    bool adopted;
    bool torn_down;
    bool acked;
    bool config_sent;
    bool disowned;
    int64_t heard_ms; /* the agent's last heartbeat, as a channel keeps it */
};

#define MAX_GUESTS 16
static struct guest guests[MAX_GUESTS];
static size_t n_guests;
static bool host_up = true;
/* What the fake's host_image reports for every host: the test driver's, unless a test
 * says the image is missing there. */
static enum image_state host_image_state = IMAGE_UNCHECKED;
static char host_image_sha[72]; /* the sha256 of the image a READY host has */

static struct guest *guest_named(const char *name)
{
    for (size_t i = 0; i < n_guests; i++)
        if (strcmp(guests[i].name, name) == 0)
            return &guests[i];
    return NULL;
}

static void fake_free(struct provider *p)
{
    (void)p;
}

static int fake_host_add(struct provider *p, const struct config_host *host)
{
    (void)p;
    (void)host;
    return 0;
}

static int fake_guest_create(struct provider *p, const char *host, const struct guest_spec *spec,
                             const struct guest_events *events, void *data,
                             struct guest **ret_guest)
{
    (void)p;
    (void)host;
    assert_true(n_guests < MAX_GUESTS);
    struct guest *g = &guests[n_guests++];
    memset(g, 0, sizeof(*g));
    snprintf(g->name, sizeof(g->name), "%s", spec->name);
    g->events = events;
    g->data = data;
    *ret_guest = g;
    return 0;
}

static int fake_guest_adopt(struct provider *p, const char *host, const struct guest_spec *spec,
                            const struct guest_events *events, void *data, struct guest **ret_guest)
{
    int r = fake_guest_create(p, host, spec, events, data, ret_guest);
    (*ret_guest)->adopted = true;
    return r;
}

static int fake_guest_send_config(struct guest *g, const struct secret *jit, int64_t job_timeout_s,
                                  const char *const *command, size_t n_command)
{
    (void)jit;
    (void)job_timeout_s;
    (void)command;
    (void)n_command;
    g->config_sent = true;
    return 0;
}

static void fake_guest_ack_exit(struct guest *g)
{
    g->acked = true;
}

static void fake_guest_teardown(struct guest *g, const char *reason)
{
    (void)reason;
    g->torn_down = true;
}

static void fake_guest_disown(struct guest *g)
{
    g->disowned = true;
}

static bool fake_host_up(struct provider *p, const char *host)
{
    (void)p;
    (void)host;
    return host_up;
}

static int fake_host_status(struct provider *p, const char *host, struct host_status *ret)
{
    (void)p;
    (void)host;
    memset(ret, 0, sizeof(*ret));
    ret->up = host_up;
    return 0;
}

static int fake_host_image(struct provider *p, const char *host, const struct config_pool *pool,
                           struct image_status *ret)
{
    (void)p;
    (void)pool;
    memset(ret, 0, sizeof(*ret));
    ret->state = host_image_state;
    if (host_image_state == IMAGE_READY)
        snprintf(ret->manifest.sha256, sizeof(ret->manifest.sha256), "%s", host_image_sha);
    if (host_image_state == IMAGE_MISSING)
        snprintf(ret->reason, sizeof(ret->reason), "image /srv/%s.qcow2 missing on the host", host);
    return 0;
}

/* The reconciler's lists: asked, never answered (as a host that is slow to answer). The
 * reconciler's answers are driven by the tests that run it on libvirt's own test driver. */
static int fake_list_none(struct provider *p, const char *host, provider_names_cb cb, void *data)
{
    (void)p;
    (void)host;
    (void)cb;
    (void)data;
    return 0;
}

static int fake_remove(struct provider *p, const char *host, const char *name, provider_done_cb cb,
                       void *data)
{
    (void)p;
    (void)host;
    (void)name;
    if (cb)
        cb(data, 0);
    return 0;
}

/* Warm templates: the scheduler asks for them on its tick; the fake keeps none. */
static void fake_templates_want(struct provider *p, const char *host,
                                const struct config_pool *pool, int n)
{
    (void)p;
    (void)host;
    (void)pool;
    (void)n;
}

static void fake_templates_sweep(struct provider *p, const char *host)
{
    (void)p;
    (void)host;
}

static int fake_templates(struct provider *p, const char *host, struct template_status *out,
                          size_t max, size_t *ret_n)
{
    (void)p;
    (void)host;
    (void)out;
    (void)max;
    *ret_n = 0;
    return 0;
}

static int64_t fake_guest_heard_ms(const struct guest *g)
{
    return g->heard_ms;
}

static const struct provider_ops fake_ops = {
    .free = fake_free,
    .host_add = fake_host_add,
    .host_update = fake_host_add,
    .host_up = fake_host_up,
    .host_status = fake_host_status,
    .host_image = fake_host_image,
    .guest_create = fake_guest_create,
    .guest_adopt = fake_guest_adopt,
    .guest_send_config = fake_guest_send_config,
    .guest_ack_exit = fake_guest_ack_exit,
    .guest_heard_ms = fake_guest_heard_ms,
    .guest_teardown = fake_guest_teardown,
    .guest_disown = fake_guest_disown,
    .tagged_async = fake_list_none,
    .orphan_volumes_async = fake_list_none,
    .remove = fake_remove,
    .templates_want = fake_templates_want,
    .templates_sweep = fake_templates_sweep,
    .templates = fake_templates,
};
static struct provider fake_provider = {.ops = &fake_ops};

/* ---- the fake GitHub client ------------------------------------------------------------ */

static github_jit_cb jit_cb;
static void *jit_data;
static int jit_requests;
static github_done_cb delete_cb;
static void *delete_data;
static int deletes;

/* Calls not answered yet: closing the client cancels them, as github_client_free does
 * before hatcheryd frees its scheduler. */
#define MAX_PENDING 32
static struct pending_call {
    github_jit_cb jit;
    github_done_cb done;
    void *data;
} pending[MAX_PENDING];
static size_t n_pending;

static void pending_add(github_jit_cb jit, github_done_cb done, void *data)
{
    assert_true(n_pending < MAX_PENDING);
    pending[n_pending++] = (struct pending_call){jit, done, data};
}

/* Takes the call made with `data` off the list: the test answers it. */
static void pending_take(void *data)
{
    for (size_t i = 0; i < n_pending; i++)
        if (pending[i].data == data) {
            pending[i] = pending[--n_pending];
            return;
        }
}

static void answer_jit(int err, const char *message, int64_t runner_id, struct secret *jit)
{
    pending_take(jit_data);
    jit_cb(jit_data, err, message, runner_id, jit);
}

static void answer_delete(int err, const char *message)
{
    pending_take(delete_data);
    delete_cb(delete_data, err, message);
}

static void github_close(void)
{
    while (n_pending) {
        struct pending_call c = pending[--n_pending];
        if (c.jit)
            c.jit(c.data, -ECANCELED, "client closed", 0, NULL);
        else
            c.done(c.data, -ECANCELED, "client closed");
    }
}

int github_jitconfig_generate(struct github_client *client, const struct github_scope *scope,
                              const char *name, const char *const *labels, size_t n_labels,
                              const char *work_folder, github_jit_cb cb, void *data)
{
    (void)client;
    (void)scope;
    (void)name;
    (void)labels;
    (void)n_labels;
    (void)work_folder;
    jit_cb = cb;
    jit_data = data;
    jit_requests++;
    pending_add(cb, NULL, data);
    return 0;
}

int github_runner_delete(struct github_client *client, const struct github_scope *scope,
                         int64_t runner_id, github_done_cb cb, void *data)
{
    (void)client;
    (void)scope;
    (void)runner_id;
    delete_cb = cb;
    delete_data = data;
    deletes++;
    pending_add(NULL, cb, data);
    return 0;
}

int github_runners_list(struct github_client *client, const struct github_scope *scope,
                        const char *name, github_list_cb cb, void *data)
{
    (void)client;
    (void)scope;
    (void)name;
    json_t *none = json_array();
    cb(data, 0, NULL, none);
    json_decref(none);
    return 0;
}

int github_queued_jobs_list(struct github_client *client, const char *repo, github_list_cb cb,
                            void *data)
{
    (void)client;
    (void)repo;
    json_t *none = json_array();
    cb(data, 0, NULL, none);
    json_decref(none);
    return 0;
}

int github_installation_repos_list(struct github_client *client, github_list_cb cb, void *data)
{
    (void)client;
    json_t *none = json_array();
    cb(data, 0, NULL, none);
    json_decref(none);
    return 0;
}

int github_job_get(struct github_client *client, const char *repo, int64_t job_id,
                   github_json_cb cb, void *data)
{
    (void)client;
    (void)repo;
    (void)job_id;
    (void)cb;
    (void)data;
    return -ENOTSUP;
}

/* The scale set's statistics as its listener last read them (github.scaleset tests the
 * listener itself): -2 while no pool is served by a scale set. */
static int64_t scale_set_assigned = -2;

int64_t scalesets_assigned(const struct scalesets *sets, const char *pool)
{
    (void)sets;
    (void)pool;
    return scale_set_assigned;
}

/* A scale set's JIT configs and removals are answered as GitHub's are (answer_jit,
 * answer_delete). */
int scalesets_jit_generate(struct scalesets *sets, const char *pool, const char *name,
                           github_jit_cb cb, void *data)
{
    (void)sets;
    (void)pool;
    (void)name;
    if (scale_set_assigned == -2)
        fail_msg("a scale set's JIT config asked for with no scale-set pool");
    jit_cb = cb;
    jit_data = data;
    jit_requests++;
    pending_add(cb, NULL, data);
    return 0;
}

int scalesets_runner_remove(struct scalesets *sets, const char *pool, int64_t runner_id,
                            github_done_cb cb, void *data)
{
    (void)sets;
    (void)pool;
    (void)runner_id;
    if (scale_set_assigned == -2)
        fail_msg("a scale set's runner removed with no scale-set pool");
    delete_cb = cb;
    delete_data = data;
    deletes++;
    pending_add(NULL, cb, data);
    return 0;
}

int scalesets_runner_remove_by_name(struct scalesets *sets, const char *pool, const char *name,
                                    github_done_cb cb, void *data)
{
    (void)sets;
    (void)pool;
    (void)name;
    (void)cb;
    (void)data;
    fail_msg("a scale set's runner removed by name with no scale-set pool");
    return -EOPNOTSUPP;
}

/* No pool here is trusted: nothing asks about a runner group (github.scheduler does). */
int github_runner_group_get(struct github_client *client, const char *org, int64_t group_id,
                            github_json_cb cb, void *data)
{
    (void)client;
    (void)org;
    (void)group_id;
    (void)cb;
    (void)data;
    fail_msg("a runner group asked about with no trusted pool");
    return -EOPNOTSUPP;
}

void github_client_stats(const struct github_client *client, struct github_stats *ret)
{
    (void)client;
    memset(ret, 0, sizeof(*ret));
    ret->ratelimit_remaining = -1;
}

/* ---- the world: a loop, a store, a config ------------------------------------------------ */

static uv_loop_t loop;
static struct store *store;
static struct config *config;
static struct github_client *github = (struct github_client *)&loop; /* never dereferenced */
static struct provider *provider = &fake_provider;
static struct github_scope scope = {.repo = "pytorch/pytorch"};
static char dir[] = "/tmp/hatchery-test-scheduler-XXXXXX";

/* ---- the clock: time the tests move on, not time they wait out ------------------------- */

/* Every clock this process reads (libuv's loop time, the wall clock that runner deadlines
 * and the store's records use) is the kernel's plus `clock_skip_ns`. The definition below
 * takes the place of libc's for libuv and for the daemon's code (an executable's symbol
 * comes first), so the boot timeout's 5 s or a 15 s heartbeat pass in the time it takes to
 * run what falls due within them, in the order it falls due. */
static int64_t clock_skip_ns;
static bool virtual_time = true;

int clock_gettime(clockid_t id, struct timespec *ts)
{
    if (syscall(SYS_clock_gettime, id, ts) != 0)
        return -1;
    int64_t ns = (int64_t)ts->tv_nsec + clock_skip_ns % 1000000000;
    ts->tv_sec += clock_skip_ns / 1000000000 + ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
    return 0;
}

/* Lets `ms` of the loop's time pass. Work on libuv's pool (the store's commits) is waited
 * for in real time first; then the clock jumps to the next timer's deadline, or to the end.
 * With virtual_time off (the libvirt test driver's test, whose host threads the loop cannot
 * see as pending work), the time is waited out for real. */
static uv_timer_t spin_end; /* a timer at the end keeps the loop's next deadline in view */

static void on_spin_end(uv_timer_t *t)
{
    (void)t;
}

static bool spin_until(bool (*reached)(void *), void *arg, int ms)
{
    uv_update_time(&loop);
    uint64_t end = uv_now(&loop) + (uint64_t)ms;
    uv_timer_start(&spin_end, on_spin_end, (uint64_t)ms, 0);
    for (;;) {
        uv_run(&loop, UV_RUN_NOWAIT);
        if (reached && reached(arg)) {
            uv_timer_stop(&spin_end);
            return true;
        }
        if (loop.active_reqs.count > 0) {
            uv_run(&loop, UV_RUN_ONCE); /* returns when the work is done, or a timer fires */
            continue;
        }
        uv_update_time(&loop);
        uint64_t now = uv_now(&loop);
        if (now >= end) {
            uv_timer_stop(&spin_end);
            return false;
        }
        int next = uv_backend_timeout(&loop);
        if (next == 0)
            continue;
        uint64_t step = end - now;
        if (next > 0 && (uint64_t)next < step)
            step = (uint64_t)next;
        if (virtual_time) {
            clock_skip_ns += (int64_t)step * 1000000;
            uv_update_time(&loop);
            if (uv_now(&loop) < now + step)
                fail_msg("the clock did not move: libuv does not read this test's clock_gettime");
        } else
            usleep(step > 10 ? 10000 : (useconds_t)step * 1000);
    }
}

static void spin(int ms)
{
    spin_until(NULL, NULL, ms);
}

/* The clocks the scheduler reads (the wall clock, libuv's) are the one spin() moves: were
 * they not, the tests below would prove nothing of their timeouts. */
static void the_clock_moves_with_spin(void **state)
{
    (void)state;
    struct timespec t0, t1;
    clock_gettime(CLOCK_REALTIME, &t0);
    uint64_t loop0 = uv_hrtime();
    spin(60000);
    clock_gettime(CLOCK_REALTIME, &t1);
    /* The loop counts whole milliseconds: the jump can be one short of the 60 s. */
    assert_true(t1.tv_sec - t0.tv_sec >= 59);
    assert_true(uv_hrtime() - loop0 >= 59ull * 1000000000);
}

static void write_config(const char *extra_pool)
{
    char path[256], text[2048];
    snprintf(path, sizeof(path), "%s/secret", dir);
    FILE *f = fopen(path, "w");
    fputs("s3cret\n", f);
    fclose(f);
    snprintf(text, sizeof(text),
             "controller_id: t\n"
             "state_dir: %s\n"
             "admin_socket: %s/admin.sock\n"
             "webhook_secret_file: %s/secret\n"
             "heartbeat_timeout_s: 15\n"
             "hosts:\n"
             "  - name: h\n"
             "    uri: test:///default\n"
             "    vcpus: 8\n"
             "    memory_mib: 8192\n"
             "    max_guests: 8\n"
             "pools:\n"
             "  - name: p\n"
             "    labels: [p]\n"
             "    arch: ppc64le\n"
             "    image: /default-pool/base.qcow2\n"
             "    max_runners: 2\n"
             "    boot_timeout_s: 5\n"
             "%s",
             dir, dir, dir, extra_pool);
    snprintf(path, sizeof(path), "%s/hatchery.yaml", dir);
    f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    char *errors = NULL;
    if (config_load(path, &config, &errors) < 0)
        fail_msg("config: %s", errors);
}

static struct scheduler *start(void)
{
    struct scheduler *s = NULL;
    struct runner_deps deps = {.loop = &loop,
                               .store = store,
                               .config = &config,
                               .github = &github,
                               .provider = &provider,
                               .scopes = &scope,
                               .n_scopes = 1};
    assert_int_equal(scheduler_new(&deps, &s), 0);
    return s;
}

static void stop(struct scheduler *s)
{
    github_close(); /* hatcheryd frees its GitHub client first */
    scheduler_free(s);
    spin(50);
    free(s);
}

static int setup(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(dir));
    uv_loop_init(&loop);
    uv_timer_init(&loop, &spin_end);
    char err[256];
    assert_int_equal(store_open(&loop, dir, &store, err, sizeof(err)), 0);
    write_config("");
    n_guests = 0;
    jit_cb = NULL;
    delete_cb = NULL;
    n_pending = 0;
    jit_requests = deletes = 0;
    host_up = true;
    host_image_state = IMAGE_UNCHECKED;
    host_image_sha[0] = 0;
    virtual_time = true;
    scale_set_assigned = -2;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    store_close(store);
    spin(50);
    uv_close((uv_handle_t *)&spin_end, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);
    uv_loop_close(&loop);
    config_free(config);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    snprintf(dir, sizeof(dir), "/tmp/hatchery-test-scheduler-XXXXXX");
    return 0;
}

/* A read's answer, once the loop has brought it. */
struct answer {
    bool done;
    json_t *rows;
};

static void keep_answer(void *data, json_t *rows)
{
    struct answer *a = data;
    a->rows = json_incref(rows);
    a->done = true;
}

static bool answered(void *arg)
{
    return ((struct answer *)arg)->done;
}

/* The store's runner records (every one, or the live ones). */
static json_t *stored_runners(bool all)
{
    struct answer a = {0};
    assert_int_equal(store_runners_list(store, NULL, all, keep_answer, &a), 0);
    assert_true(spin_until(answered, &a, 5000));
    assert_non_null(a.rows);
    return a.rows;
}

/* The runners as the admin API shows them: read now (running the loop for an answer would
 * let the runners move on before the test looks). */
static json_t *admin_runners(struct scheduler *s)
{
    json_t *rows = store_query_sync(store, "SELECT * FROM runners ORDER BY id DESC", json_array());
    assert_non_null(rows);
    return scheduler_runners_json(s, rows);
}

/* The runner's state as the admin API shows it, or "" when there is none. */
static const char *state_of(struct scheduler *s, const char *name)
{
    static char out[32];
    json_t *rows = admin_runners(s);
    size_t i;
    json_t *row;
    out[0] = 0;
    json_array_foreach(rows, i, row)
    {
        if (strcmp(json_string_value(json_object_get(row, "name")), name) == 0)
            snprintf(out, sizeof(out), "%s", json_string_value(json_object_get(row, "state")));
    }
    json_decref(rows);
    return out;
}

static json_t *runner_row(struct scheduler *s, const char *name)
{
    json_t *rows = admin_runners(s);
    size_t i;
    json_t *row, *found = NULL;
    json_array_foreach(rows, i, row)
    {
        if (strcmp(json_string_value(json_object_get(row, "name")), name) == 0)
            found = json_incref(row);
    }
    json_decref(rows);
    return found;
}

/* A workflow_job event as the webhook stores it. */
static void store_job(int64_t id, enum job_status status)
{
    struct job_event *ev = calloc(1, sizeof(*ev));
    char delivery[48];
    snprintf(delivery, sizeof(delivery), "d-%lld-%d", (long long)id, (int)status);
    ev->delivery_id = strdup(delivery);
    ev->job_id = id;
    ev->run_id = 1;
    ev->status = status;
    ev->repository = strdup("pytorch/pytorch");
    ev->labels_json = strdup("[\"p\"]");
    ev->pool = strdup("p");
    ev->received_at_ms = wall_clock_ms();
    assert_int_equal(store_job_event_submit(store, ev, NULL, NULL), 0);
}

static void queue_job(int64_t id)
{
    store_job(id, JOB_QUEUED);
}

/* The runner's recorded reason, once the store has it ("" when none). */
static const char *reason_of(struct scheduler *s, const char *name)
{
    static char out[512];
    spin(300);
    json_t *row = runner_row(s, name);
    const char *r = json_string_value(json_object_get(row, "reason"));
    snprintf(out, sizeof(out), "%s", r ? r : "");
    json_decref(row);
    return out;
}

/* A queued job, and the first tick after recovery: its runner's guest. */
static struct guest *first_runner(int64_t job_id)
{
    queue_job(job_id);
    spin(3500);
    assert_int_equal(n_guests, 1);
    return &guests[0];
}

/* GitHub's JIT answer and the agent's hello: the config goes to the agent. */
static void configure(struct guest *g, int64_t github_runner_id)
{
    struct secret *jit = NULL;
    assert_int_equal(secret_from_bytes("jit", 3, &jit), 0);
    answer_jit(0, NULL, github_runner_id, jit);
    struct agent_hello hello = {.version = "0.3.0", .arch = "ppc64le"};
    g->events->on_hello(g->data, g, &hello);
}

/* ...and the agent's started: the runner is idle. */
static void bring_online(struct guest *g, int64_t github_runner_id)
{
    configure(g, github_runner_id);
    g->events->on_started(g->data, g, 77);
}

static uint64_t refused(struct scheduler *s)
{
    return scheduler_stats_get(s)->transitions_refused;
}

/* pending → creating → booting → configured → idle → busy → finishing → deleting → deleted,
 * each move made by the event that makes it in hatcheryd. */
static void one_runner_through_every_state(void **state)
{
    (void)state;
    struct scheduler *s = start();
    queue_job(1001);
    spin(3500); /* the first tick after recovery makes the runner */
    assert_int_equal(n_guests, 1);
    struct guest *g = &guests[0];
    assert_string_equal(state_of(s, g->name), "creating");
    assert_int_equal(jit_requests, 1);
    g->events->on_booting(g->data, g);
    assert_string_equal(state_of(s, g->name), "booting");
    /* The JIT answer and the hello meet, in either order: here the answer first. */
    struct secret *jit = NULL;
    assert_int_equal(secret_from_bytes("jit", 3, &jit), 0);
    answer_jit(0, NULL, 4242, jit);
    assert_false(g->config_sent);
    struct agent_hello hello = {.version = "0.3.0", .arch = "ppc64le"};
    g->events->on_hello(g->data, g, &hello);
    assert_true(g->config_sent);
    assert_string_equal(state_of(s, g->name), "configured");
    g->events->on_started(g->data, g, 77);
    assert_string_equal(state_of(s, g->name), "idle");
    scheduler_job_event(s, 1001, JOB_IN_PROGRESS, g->name);
    assert_string_equal(state_of(s, g->name), "busy");
    struct agent_exit exit = {.code = 0, .duration_s = 3};
    g->events->on_exited(g->data, g, &exit);
    assert_string_equal(state_of(s, g->name), "finishing");
    /* A version 1 agent powers off at once: the guest's end, after the exit, is expected. */
    g->events->on_ended(g->data, g, "agent channel: the guest closed the channel");
    assert_string_equal(state_of(s, g->name), "finishing");
    /* The exit is committed before the agent hears of it and the guest goes. */
    assert_false(g->acked);
    assert_false(g->torn_down);
    spin(300);
    assert_true(g->acked);
    assert_true(g->torn_down);
    g->events->on_gone(g->data, g);
    assert_string_equal(state_of(s, g->name), "deleting");
    assert_int_equal(deletes, 1);
    answer_delete(0, NULL);
    spin(300); /* the final record's commit */
    assert_string_equal(state_of(s, g->name), "deleted");
    json_t *row = runner_row(s, g->name);
    assert_int_equal(json_integer_value(json_object_get(row, "exit_code")), 0);
    assert_true(json_is_null(json_object_get(row, "reason")));
    json_decref(row);
    assert_int_equal(refused(s), 0);
    assert_int_equal(scheduler_stats_get(s)->jobs_lost, 0);
    stop(s);
}

/* A runner runs one job: a delivery naming it for another job (forged with a leaked
 * webhook secret, say) moves nothing, and is counted. */
static void news_of_another_job_is_not_believed(void **state)
{
    (void)state;
    struct scheduler *s = start();
    struct guest *g = first_runner(1012);
    g->events->on_booting(g->data, g);
    bring_online(g, 4243);
    scheduler_job_event(s, 1012, JOB_IN_PROGRESS, g->name);
    assert_string_equal(state_of(s, g->name), "busy");
    /* Another job's completed, naming this busy runner: its own job goes on. */
    scheduler_job_event(s, 9999, JOB_COMPLETED, g->name);
    assert_string_equal(state_of(s, g->name), "busy");
    scheduler_job_event(s, 9998, JOB_IN_PROGRESS, g->name);
    assert_string_equal(state_of(s, g->name), "busy");
    assert_int_equal(scheduler_stats_get(s)->job_mismatches, 2);
    assert_false(g->torn_down);
    /* Its own job's completed is believed. */
    scheduler_job_event(s, 1012, JOB_COMPLETED, g->name);
    assert_string_equal(state_of(s, g->name), "finishing");
    assert_int_equal(refused(s), 0);
    stop(s);
}

/* Moves the table does not hold are refused, counted and not applied. */
static void illegal_moves_are_refused(void **state)
{
    (void)state;
    struct scheduler *s = start();
    struct guest *g = first_runner(1002);
    /* started before any config: creating --runner_started--> is not in the table */
    g->events->on_started(g->data, g, 77);
    assert_string_equal(state_of(s, g->name), "creating");
    assert_int_equal(refused(s), 1);
    /* GitHub's in_progress for a runner that never started: ignored, not applied */
    scheduler_job_event(s, 1002, JOB_IN_PROGRESS, g->name);
    assert_string_equal(state_of(s, g->name), "creating");
    stop(s);
}

/* The booting timeout fails the runner; a busy runner that fails is a lost job. */
static void timeouts_and_lost_jobs(void **state)
{
    (void)state;
    struct scheduler *s = start();
    struct guest *g = first_runner(1003);
    g->events->on_booting(g->data, g);
    spin(5600); /* boot_timeout_s: 5 */
    assert_string_equal(state_of(s, g->name), "failed");
    assert_true(g->torn_down);
    assert_non_null(strstr(reason_of(s, g->name), "no hello"));
    g->events->on_gone(g->data, g);
    answer_jit(-EIO, "late", 0, NULL); /* the JIT answer after all */
    spin(300);
    assert_string_equal(state_of(s, g->name), "deleted");

    /* A replacement, made busy, then its guest fails: the job is lost. */
    spin(1500);
    assert_int_equal(n_guests, 2);
    struct guest *b = &guests[1];
    bring_online(b, 4343);
    scheduler_job_event(s, 1003, JOB_IN_PROGRESS, b->name);
    b->events->on_failed(b->data, b, "host h went down");
    assert_string_equal(state_of(s, b->name), "failed");
    assert_non_null(strstr(reason_of(s, b->name), "job lost: "));
    assert_int_equal(scheduler_stats_get(s)->jobs_lost, 1);
    /* Counted by pool and reason: the first failed on its boot, the second lost its job
     * to its guest; no other reason has a count. */
    const struct pool_stats *ps = scheduler_stats_pool_find(scheduler_stats_get(s), "p");
    assert_non_null(ps);
    assert_int_equal(ps->created, scheduler_stats_get(s)->created); /* one pool: all of them */
    assert_true(ps->created >= 2);
    for (int why = 0; why < FAILURE_MAX; why++) {
        assert_int_equal(ps->failed[why], why == FAILURE_BOOT_TIMEOUT || why == FAILURE_GUEST);
        assert_int_equal(ps->jobs_lost[why], why == FAILURE_GUEST);
    }
    stop(s);
}

/* A guest that says hello and takes its config but never reports `started` holds its slot
 * only until its deadline (boot_timeout_s: 5). */
static void a_runner_that_never_starts_fails_at_its_deadline(void **state)
{
    (void)state;
    struct scheduler *s = start();
    struct guest *g = first_runner(1007);
    configure(g, 4747);
    assert_string_equal(state_of(s, g->name), "configured");
    spin(4000);
    assert_string_equal(state_of(s, g->name), "configured");
    spin(1600);
    assert_string_equal(state_of(s, g->name), "failed");
    assert_non_null(strstr(reason_of(s, g->name), "did not report started within 5 s"));
    assert_true(g->torn_down);
    stop(s);
}

/* Only failures before `started` tell of the pool's image or hosts: a job that kills its
 * own agent (its guest fails while busy) does not stop the pool's scaling. */
static void a_job_that_kills_its_agent_does_not_back_off_the_pool(void **state)
{
    (void)state;
    struct scheduler *s = start();
    struct guest *g = first_runner(1008);
    bring_online(g, 4848);
    store_job(1008, JOB_IN_PROGRESS);
    scheduler_job_event(s, 1008, JOB_IN_PROGRESS, g->name);
    /* Its guest ends before any exit: the runner fails, and says so (its job with it). */
    g->events->on_ended(g->data, g, "agent channel: the guest closed the channel");
    assert_string_equal(state_of(s, g->name), "failed");
    assert_string_equal(reason_of(s, g->name),
                        "job lost: agent channel: the guest closed the channel before its runner "
                        "reported an exit");
    assert_true(g->torn_down);
    g->events->on_gone(g->data, g);
    queue_job(1009);
    spin(1500);
    assert_null(scheduler_pool_waiting(s, "p"));
    assert_int_equal(n_guests, 2); /* the next job's runner, at once */
    /* Guests that fail before they start their runner do back the pool off: after the
     * second in a row, the pool waits 2 s. */
    for (int i = 1; i <= 2; i++) {
        for (int t = 0; t < 40 && n_guests < (size_t)i + 1; t++)
            spin(100);
        assert_int_equal(n_guests, i + 1);
        struct guest *h = &guests[i];
        h->events->on_failed(h->data, h, "no hello");
        h->events->on_gone(h->data, h);
    }
    spin(1100); /* a tick inside the 2 s */
    const char *why = scheduler_pool_waiting(s, "p");
    assert_non_null(why);
    assert_non_null(strstr(why, "2 runner(s) failed in a row: retrying in"));
    stop(s);
}

/* A heartbeat silent past heartbeat_timeout_s in idle fails the runner as hung. */
static void a_silent_agent_is_hung(void **state)
{
    (void)state;
    struct scheduler *s = start();
    struct guest *g = first_runner(1004);
    bring_online(g, 4444);
    for (int i = 0; i < 4; i++) {
        spin(5000);
        g->heard_ms = wall_clock_ms(); /* beats every 5 s: alive */
    }
    assert_string_equal(state_of(s, g->name), "idle");
    spin(16500); /* then silent past 15 s */
    assert_string_equal(state_of(s, g->name), "failed");
    assert_non_null(strstr(reason_of(s, g->name), "hung: no heartbeat"));
    assert_int_equal(scheduler_stats_pool_find(scheduler_stats_get(s), "p")->failed[FAILURE_HUNG],
                     1);
    stop(s);
}

/* A record an earlier process left busy is adopted, stays busy, and its exit comes; one
 * that cannot be adopted is a lost job. */
static void adoption_after_a_restart(void **state)
{
    (void)state;
    int64_t now = wall_clock_ms();
    char sql[1024];
    snprintf(
        sql, sizeof(sql),
        "INSERT INTO runners(id, name, pool, host, state, vcpus, memory_mib, github_runner_id, "
        "job_id, created_at, online_at, busy_at, updated_at) VALUES "
        "(1, 'hatchery-t-1', 'p', 'h', 'busy', 2, 4096, 11, 1005, %lld, %lld, %lld, %lld), "
        "(2, 'hatchery-t-2', 'p', 'h', 'busy', 2, 4096, 12, 1006, %lld, %lld, %lld, %lld), "
        "(3, 'hatchery-t-3', 'p', 'h', 'creating', 2, 4096, NULL, NULL, %lld, NULL, NULL, %lld)",
        (long long)now, (long long)now, (long long)now, (long long)now, (long long)now,
        (long long)now, (long long)now, (long long)now, (long long)now, (long long)now);
    assert_int_equal(store_sql_apply_sync(store, sql, json_array()), 0);
    struct scheduler *s = start();
    spin(1500);                    /* the first tick: hosts settled, recovery */
    assert_int_equal(n_guests, 2); /* the two busy ones; the creating one is failed */
    struct guest *a = guest_named("hatchery-t-1"), *b = guest_named("hatchery-t-2");
    assert_non_null(a);
    assert_non_null(b);
    assert_true(a->adopted);
    struct agent_resumed running = {
        .state = AGENT_RESUMED_RUNNING, .pid = 5, .runner_name = "hatchery-t-1"};
    a->events->on_resumed(a->data, a, &running);
    assert_string_equal(state_of(s, "hatchery-t-1"), "busy");
    b->events->on_failed(b->data, b, "its domain is gone");
    b->events->on_gone(b->data, b);
    assert_string_equal(reason_of(s, "hatchery-t-2"),
                        "job lost: not adopted after a restart: its domain is gone");
    struct agent_exit exit = {.code = 0, .duration_s = 30};
    a->events->on_exited(a->data, a, &exit);
    spin(300);
    assert_true(a->acked);
    assert_string_equal(state_of(s, "hatchery-t-1"), "finishing");
    const struct scheduler_stats *st = scheduler_stats_get(s);
    assert_int_equal(st->adopted, 1);
    assert_int_equal(st->adopt_failed, 1);
    assert_int_equal(st->jobs_lost, 1);
    assert_int_equal(st->reconcile_records_failed, 1); /* the creating one */
    assert_int_equal(
        scheduler_stats_pool_find(scheduler_stats_get(s), "p")->jobs_lost[FAILURE_NOT_ADOPTED], 1);
    assert_int_equal(
        scheduler_stats_pool_find(scheduler_stats_get(s), "p")->failed[FAILURE_RESTART], 1);
    assert_int_equal(refused(s), 0);
    stop(s);
}

/* Exit 127 (the runner is not there) backs the pool off as a failed boot does, when the
 * agent says it without `started` (the runner never ran); the same exit from a runner that
 * ran does not, whether GitHub's in_progress is here or not yet: its job, root in its
 * guest, may send any. */
static void exit_127_backs_off_only_before_a_job(void **state)
{
    (void)state;
    struct scheduler *s = start();
    /* A job that forges 127 once its runner ran, before GitHub's in_progress is stored
     * (with it, the runner is busy: the same). */
    struct guest *g = first_runner(1011);
    bring_online(g, 5151);
    struct agent_exit forged = {.code = 127, .duration_s = 40};
    g->events->on_exited(g->data, g, &forged);
    g->events->on_gone(g->data, g);
    json_t *pool = scheduler_pool_json(s, "p");
    assert_int_equal(json_integer_value(json_object_get(pool, "failures_in_a_row")), 0);
    json_decref(pool);
    queue_job(1012);
    for (int t = 0; t < 20 && n_guests < 2; t++)
        spin(100);
    assert_int_equal(n_guests, 2); /* at once: no back-off */
    /* The next runner's own 127, without `started` (the agent's word that the runner
     * never ran): an image fault. */
    struct guest *h = &guests[1];
    configure(h, 5252);
    struct agent_exit missing = {.code = 127};
    h->events->on_exited(h->data, h, &missing);
    h->events->on_gone(h->data, h);
    pool = scheduler_pool_json(s, "p");
    assert_int_equal(json_integer_value(json_object_get(pool, "failures_in_a_row")), 1);
    assert_true(json_real_value(json_object_get(pool, "backoff_s")) > 0);
    json_decref(pool);
    stop(s);
}

/* A pool whose image is not on its (remote) host gets no guest there, and says why; once
 * the image is found, the queued job gets its runner. */
static void a_host_without_the_image_gets_no_guest(void **state)
{
    (void)state;
    host_image_state = IMAGE_MISSING;
    struct scheduler *s = start();
    queue_job(1010);
    spin(1500);
    assert_int_equal(n_guests, 0);
    const char *why = scheduler_pool_waiting(s, "p");
    assert_non_null(why);
    assert_string_equal(why, "host h: image /srv/h.qcow2 missing on the host");
    host_image_state = IMAGE_CHECKING;
    spin(1100);
    assert_int_equal(n_guests, 0);
    host_image_state = IMAGE_READY;
    for (int t = 0; t < 30 && n_guests == 0; t++)
        spin(100);
    assert_int_equal(n_guests, 1);
    stop(s);
}

/* An idle runner whose pool's image was replaced since it booted is retired (rotate_outdated,
 * the default) and demand makes its replacement from the new image; a busy one keeps its
 * job. `hatchery rotate` does the same at once; without rotate_outdated only it does. */
static void idle_runners_of_a_replaced_image_are_rotated(void **state)
{
    (void)state;
    config_free(config);
    write_config("    min_idle: 1\n");
    host_image_state = IMAGE_READY;
    snprintf(host_image_sha, sizeof(host_image_sha), "1111");
    struct scheduler *s = start();
    spin(3500);
    assert_int_equal(n_guests, 1); /* min_idle's */
    bring_online(&guests[0], 501);
    queue_job(1020);
    spin(1500);
    assert_int_equal(n_guests, 2); /* the queued job's */
    bring_online(&guests[1], 502);
    scheduler_job_event(s, 1020, JOB_IN_PROGRESS, guests[1].name);
    spin(300);
    json_t *row = runner_row(s, guests[0].name);
    assert_string_equal(json_string_value(json_object_get(row, "image")), "1111");
    json_decref(row);

    snprintf(host_image_sha, sizeof(host_image_sha), "2222"); /* the image is rebuilt */
    spin(ROTATE_EVERY_MS + 1500);
    assert_true(guests[0].torn_down);
    assert_false(guests[1].torn_down); /* busy: its job goes on */
    const char *why = reason_of(s, guests[0].name);
    if (!strstr(why, "outdated: its image was replaced"))
        fail_msg("reason: %s", why);
    assert_int_equal(scheduler_stats_get(s)->outdated_retired, 1);
    guests[0].events->on_gone(guests[0].data, &guests[0]);
    answer_delete(0, NULL); /* GitHub deletes its registration */
    spin(2500);
    assert_int_equal(n_guests, 3); /* min_idle's replacement, from the new image */
    row = runner_row(s, guests[2].name);
    assert_string_equal(json_string_value(json_object_get(row, "image")), "2222");
    json_decref(row);
    bring_online(&guests[2], 503);
    spin(ROTATE_EVERY_MS + 500);
    assert_false(guests[2].torn_down); /* current: stays */
    stop(s);
}

/* A runner's first record is in the store's hands (its write on libuv's pool) when the
 * scheduler stops: the write's answer comes after scheduler_free, and must find the runner
 * held, not freed (seen failing before the hold: a use after free in on_runner_inserted).
 * Another connection holds the store's write lock meanwhile, so that the write waits,
 * however fast the pool's thread is, until the scheduler has stopped (without it, the
 * write could be back before the test looked: it failed so once under qemu-s390x). */
static bool a_job_stored(void *arg)
{
    (void)arg;
    json_t *jobs =
        store_query_sync(store, "SELECT id FROM jobs WHERE status = 'queued'", json_array());
    bool stored = json_array_size(jobs) == 1;
    json_decref(jobs);
    return stored;
}

static bool a_runner_being_recorded(void *arg)
{
    /* made, no guest asked for yet: its record's write is out */
    return loop.active_reqs.count > 0 && scheduler_stats_get(arg)->created == 1 && n_guests == 0;
}

static bool no_work_out(void *arg)
{
    (void)arg;
    return loop.active_reqs.count == 0;
}

static void a_stop_while_a_runner_is_recorded(void **state)
{
    (void)state;
    /* The job is in the store, and the lock taken, before the scheduler's first tick. */
    queue_job(1030);
    assert_true(spin_until(a_job_stored, NULL, 5000));
    char path[sizeof(dir) + 16];
    snprintf(path, sizeof(path), "%s/hatchery.db", dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    struct scheduler *s = start();
    assert_true(spin_until(a_runner_being_recorded, s, 4000)); /* within the store's 5 s wait */
    github_close();
    scheduler_free(s);
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_true(spin_until(no_work_out, NULL, 5000)); /* the write, and its answer */
    spin(50);
    free(s);
    /* The record is there for the next start to repair. */
    json_t *rows = stored_runners(false);
    assert_int_equal(json_array_size(rows), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 0), "name")),
                        "hatchery-t-1");
    json_decref(rows);
}

/* Without rotate_outdated, only `hatchery rotate` (scheduler_rotate) retires them. */
/* A scale set's job is held by the runner that took it until the service says it
 * completed. Its JobCompleted often comes once the runner has already exited and its guest
 * is going (the agent's exit and the service's message race): the job is done then too,
 * and the next job assigned gets a runner at once, not after the 10 minutes an ended job
 * is otherwise held back. */
static void a_scale_set_job_completed_while_its_runner_leaves(void **state)
{
    (void)state;
    config_free(config);
    write_config("    scale_set: p-set\n"
                 "github:\n  token_file: /t\n  runner_scopes:\n    - repo: pytorch/pytorch\n");
    scale_set_assigned = 1;
    struct scheduler *s = start();
    spin(3500);
    assert_int_equal(n_guests, 1);
    struct guest *g = &guests[0];
    g->events->on_booting(g->data, g);
    bring_online(g, 4300);
    scheduler_job_event(s, 501, JOB_IN_PROGRESS, g->name);
    assert_string_equal(state_of(s, g->name), "busy");
    struct agent_exit exit = {.code = 0, .duration_s = 3};
    g->events->on_exited(g->data, g, &exit);
    spin(300);
    assert_true(g->torn_down);
    g->events->on_gone(g->data, g);
    assert_string_equal(state_of(s, g->name), "deleting");
    /* Now the service's JobCompleted, and its statistics without the job. */
    scale_set_assigned = 0;
    scheduler_job_event(s, 501, JOB_COMPLETED, g->name);
    answer_delete(0, NULL);
    spin(300);
    assert_string_equal(state_of(s, g->name), "deleted");
    /* The next job: a runner for it on the next tick. */
    scale_set_assigned = 1;
    scheduler_kick(s);
    spin(1500);
    assert_int_equal(n_guests, 2);
    assert_int_equal(scheduler_stats_get(s)->jobs_lost, 0);
    stop(s);
}

static void without_rotate_outdated_only_the_command_rotates(void **state)
{
    (void)state;
    config_free(config);
    write_config("    min_idle: 1\nrotate_outdated: false\n");
    host_image_state = IMAGE_READY;
    snprintf(host_image_sha, sizeof(host_image_sha), "1111");
    struct scheduler *s = start();
    spin(3500);
    assert_int_equal(n_guests, 1);
    bring_online(&guests[0], 601);
    snprintf(host_image_sha, sizeof(host_image_sha), "2222");
    spin(ROTATE_EVERY_MS + 1500);
    assert_false(guests[0].torn_down);
    json_t *names = json_array();
    assert_int_equal(scheduler_rotate(s, "other-pool", names), 0);
    assert_false(guests[0].torn_down);
    assert_int_equal(scheduler_rotate(s, "p", names), 1);
    assert_true(guests[0].torn_down);
    assert_int_equal(json_array_size(names), 1);
    assert_string_equal(json_string_value(json_array_get(names, 0)), guests[0].name);
    json_decref(names);
    stop(s);
}

/* ---- the same scheduler on libvirt's provider ------------------------------------------ */

static size_t tagged_on(struct provisioner *libvirt, const char *name)
{
    char **names = NULL;
    size_t n = 0, found = 0;
    assert_int_equal(provisioner_tagged_domains(libvirt, "h", &names, &n), 0);
    for (size_t i = 0; i < n; i++) {
        found += strcmp(names[i], name) == 0;
        free(names[i]);
    }
    free(names);
    return found;
}

/* The scheduler on the provider hatcheryd runs, on libvirt's own test driver: the guest is
 * really made there (its volume and its domain, tagged as ours), boots, never says hello
 * (the test driver runs nothing), fails at the pool's boot timeout, and is gone from the
 * host; the reconciler's lists come back from the host. The same scheduler code as every
 * test above, through the other ops table. */
static void the_libvirt_provider_on_the_test_driver(void **state)
{
    (void)state;
    virtual_time = false; /* the host's calls run on threads of its own */
    assert_int_equal(libvirt_loop_register(&loop), 0);
    struct provisioner *libvirt = NULL;
    struct provisioner_options o = {.controller_id = "t", .state_dir = dir};
    assert_int_equal(provisioner_new(&loop, &o, &libvirt), 0);
    provider = provisioner_provider(libvirt);
    assert_int_equal(provider_host_add(provider, &config->hosts[0]), 0);
    for (int t = 0; t < 100 && !provider_host_up(provider, "h"); t++)
        spin(50);
    assert_true(provider_host_up(provider, "h"));

    struct scheduler *s = start();
    queue_job(2001);
    spin(3500);
    json_t *rows = admin_runners(s);
    assert_int_equal(json_array_size(rows), 1);
    char name[160];
    snprintf(name, sizeof(name), "%s",
             json_string_value(json_object_get(json_array_get(rows, 0), "name")));
    json_decref(rows);
    assert_int_equal(n_guests, 0); /* not the fake's */
    struct secret *jit = NULL;
    assert_int_equal(secret_from_bytes("jit", 3, &jit), 0);
    answer_jit(0, NULL, 5151, jit);
    for (int t = 0; t < 50 && strcmp(state_of(s, name), "booting") != 0; t++)
        spin(100);
    assert_string_equal(state_of(s, name), "booting");
    assert_int_equal(tagged_on(libvirt, name), 1);

    for (int t = 0; t < 100 && strcmp(state_of(s, name), "failed") != 0; t++)
        spin(100);
    assert_string_equal(state_of(s, name), "failed");
    assert_non_null(strstr(reason_of(s, name), "no hello from the agent within 5 s"));
    for (int t = 0; t < 50 && tagged_on(libvirt, name) > 0; t++)
        spin(100);
    assert_int_equal(tagged_on(libvirt, name), 0);

    stop(s);
    provider_free(provider);
    provider = &fake_provider;
    spin(200);
    libvirt_loop_close();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(the_clock_moves_with_spin, setup, teardown),
        cmocka_unit_test_setup_teardown(one_runner_through_every_state, setup, teardown),
        cmocka_unit_test_setup_teardown(news_of_another_job_is_not_believed, setup, teardown),
        cmocka_unit_test_setup_teardown(illegal_moves_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(timeouts_and_lost_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(a_silent_agent_is_hung, setup, teardown),
        cmocka_unit_test_setup_teardown(a_runner_that_never_starts_fails_at_its_deadline, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_job_that_kills_its_agent_does_not_back_off_the_pool,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(adoption_after_a_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(a_host_without_the_image_gets_no_guest, setup, teardown),
        cmocka_unit_test_setup_teardown(idle_runners_of_a_replaced_image_are_rotated, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(without_rotate_outdated_only_the_command_rotates, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(exit_127_backs_off_only_before_a_job, setup, teardown),
        cmocka_unit_test_setup_teardown(a_scale_set_job_completed_while_its_runner_leaves, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_stop_while_a_runner_is_recorded, setup, teardown),
        /* Last: libvirt's event loop is registered once in a process. */
        cmocka_unit_test_setup_teardown(the_libvirt_provider_on_the_test_driver, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
