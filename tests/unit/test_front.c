/* The HTTP front's confinement (front_sandbox_apply), tried from inside: a child process
 * applies it, then attempts what a front taken over by an attacker would, and reports each
 * result to the parent through a pipe it had before. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "config.h"
#include "address_window.h"
#include "front.h"
#include "front_frame.h"
#include "front_sandbox.h"
#include "log.h"

enum probe {
    PROBE_OPEN,      /* open("/etc/passwd") */
    PROBE_SOCKET,    /* socket(AF_INET) */
    PROBE_UNIX,      /* socket(AF_UNIX): libvirt's socket, the admin socket */
    PROBE_FORK,      /* fork() */
    PROBE_GETRANDOM, /* OpenSSL needs it */
    PROBE_FSTAT,     /* the fstat syscall: a descriptor, no path */
    PROBE_FSTATAT,   /* newfstatat("/etc/passwd", AT_EMPTY_PATH): a path after all */
    PROBE_STATX,     /* statx("/etc/passwd") */
    PROBE_SETOWN,    /* fcntl F_SETOWN: I/O signals to another process */
    PROBE_SETSIG,    /* fcntl F_SETSIG: which signal (SIGKILL) */
    PROBE_ASYNC,     /* fcntl F_SETFL with O_ASYNC */
    PROBE_NONBLOCK,  /* fcntl F_SETFL O_NONBLOCK: libuv's */
    PROBE_GETFL,     /* fcntl F_GETFL */
    PROBE_TIOCSTI,   /* ioctl TIOCSTI: keystrokes into an inherited terminal */
    PROBE_FIONBIO,   /* ioctl FIONBIO: libuv's */
    PROBE_MAX,
};

struct report {
    int sandbox;           /* front_sandbox_apply()'s result */
    int result[PROBE_MAX]; /* 0 when allowed, or the errno */
};

static int errno_of(long r)
{
    return r < 0 ? errno : 0;
}

/* Runs in the child: applies the sandbox, probes, writes the report, then (if `then_exec`)
 * tries execve, which must kill it. */
static void child(int fd, bool then_exec)
{
    struct report rep = {.sandbox = front_sandbox_apply()};
    if (rep.sandbox == 0) {
        rep.result[PROBE_OPEN] = errno_of(open("/etc/passwd", O_RDONLY));
        rep.result[PROBE_SOCKET] = errno_of(socket(AF_INET, SOCK_STREAM, 0));
        rep.result[PROBE_UNIX] = errno_of(socket(AF_UNIX, SOCK_STREAM, 0));
        pid_t p = fork();
        if (p == 0)
            _exit(0);
        rep.result[PROBE_FORK] = errno_of(p);
        char buf[16];
        rep.result[PROBE_GETRANDOM] = errno_of(getrandom(buf, sizeof(buf), 0));
        struct stat st;
        rep.result[PROBE_FSTAT] = errno_of(syscall(SYS_fstat, fd, &st));
        rep.result[PROBE_FSTATAT] = errno_of(fstatat(AT_FDCWD, "/etc/passwd", &st, AT_EMPTY_PATH));
        struct statx stx;
        rep.result[PROBE_STATX] =
            errno_of(statx(AT_FDCWD, "/etc/passwd", AT_EMPTY_PATH, STATX_BASIC_STATS, &stx));
        /* On the report pipe: without the filter, F_SETOWN, F_SETSIG and O_ASYNC succeed
         * and TIOCSTI answers ENOTTY; with it, each is EPERM. */
        rep.result[PROBE_SETOWN] = errno_of(fcntl(fd, F_SETOWN, getppid()));
        rep.result[PROBE_SETSIG] = errno_of(fcntl(fd, F_SETSIG, SIGKILL));
        rep.result[PROBE_ASYNC] = errno_of(fcntl(fd, F_SETFL, O_ASYNC));
        rep.result[PROBE_NONBLOCK] = errno_of(fcntl(fd, F_SETFL, 0));
        rep.result[PROBE_GETFL] = errno_of(fcntl(fd, F_GETFL));
        char key = 'x';
        rep.result[PROBE_TIOCSTI] = errno_of(ioctl(fd, TIOCSTI, &key));
        int off = 0;
        rep.result[PROBE_FIONBIO] = errno_of(ioctl(fd, FIONBIO, &off));
    }
    if (write(fd, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
        _exit(3);
    if (then_exec && rep.sandbox == 0) {
        char *argv[] = {"/bin/true", NULL};
        execve(argv[0], argv, environ);
        _exit(4); /* execve failed without killing: not what the filter says */
    }
    _exit(0);
}

/* Forks a child that runs `body` (which writes its report of `size` bytes to `fd` and
 * exits), reads the report into `rep`, and returns the child's pid for waitpid. */
static pid_t run_in_child(void (*body)(int fd, bool arg), bool arg, void *rep, size_t size)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        body(p[1], arg);
    }
    close(p[1]);
    assert_int_equal(read(p[0], rep, size), (ssize_t)size);
    close(p[0]);
    return pid;
}

static pid_t run_child(bool then_exec, struct report *rep)
{
    return run_in_child(child, then_exec, rep, sizeof(*rep));
}

static void test_sandbox_denies_files_sockets_and_processes(void **state)
{
    (void)state;
    struct report rep;
    pid_t pid = run_child(false, &rep);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (rep.sandbox == -ENOSYS)
        skip(); /* no seccomp filter here (qemu-user): hatcheryd says "front=unconfined" */
    assert_int_equal(rep.sandbox, 0);
    assert_int_equal(rep.result[PROBE_OPEN], EPERM);
    assert_int_equal(rep.result[PROBE_SOCKET], EPERM);
    assert_int_equal(rep.result[PROBE_UNIX], EPERM);
    assert_int_equal(rep.result[PROBE_FORK], EPERM);
    assert_int_equal(rep.result[PROBE_GETRANDOM], 0);
    assert_int_equal(rep.result[PROBE_FSTAT], 0);
    assert_int_equal(rep.result[PROBE_FSTATAT], EPERM);
    assert_int_equal(rep.result[PROBE_STATX], EPERM);
    assert_int_equal(rep.result[PROBE_SETOWN], EPERM);
    assert_int_equal(rep.result[PROBE_SETSIG], EPERM);
    assert_int_equal(rep.result[PROBE_ASYNC], EPERM);
    assert_int_equal(rep.result[PROBE_NONBLOCK], 0);
    assert_int_equal(rep.result[PROBE_GETFL], 0);
    assert_int_equal(rep.result[PROBE_TIOCSTI], EPERM);
    assert_int_equal(rep.result[PROBE_FIONBIO], 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_sandbox_kills_exec(void **state)
{
    (void)state;
    struct report rep;
    pid_t pid = run_child(true, &rep);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (rep.sandbox == -ENOSYS)
        skip();
    assert_int_equal(rep.sandbox, 0);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGSYS);
}

/* What the front does before it listens: io_uring refused, the loop made, the allowlist
 * applied, the loop run. On a libuv that batches epoll_ctl through a ring (1.49 and later)
 * the loop would otherwise abort at its first turn under the allowlist. */
struct uring_report {
    int refused;     /* front_refuse_io_uring() */
    int setup_errno; /* io_uring_setup(2) after it */
    int open_errno;  /* open() after it: nothing else is refused */
    int sandbox;     /* front_sandbox_apply() */
    int timer_fired; /* the loop ran under the allowlist */
};

static void on_timer(uv_timer_t *t)
{
    *(int *)t->data = 1;
}

/* Runs in the child: io_uring refused, a loop made, the allowlist applied, the loop run. */
static void uring_child(int fd, bool unused)
{
    (void)unused;
    struct uring_report rep = {.refused = front_refuse_io_uring()};
    unsigned char params[120] = {0}; /* struct io_uring_params */
    rep.setup_errno = errno_of(syscall(__NR_io_uring_setup, 4, params));
    int null_fd = open("/dev/null", O_RDONLY);
    rep.open_errno = errno_of(null_fd);
    if (null_fd >= 0)
        close(null_fd);
    uv_loop_t loop;
    uv_timer_t timer;
    uv_loop_init(&loop);
    uv_timer_init(&loop, &timer);
    timer.data = &rep.timer_fired;
    rep.sandbox = front_sandbox_apply();
    uv_timer_start(&timer, on_timer, 1, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (write(fd, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
        _exit(2);
    _exit(0);
}

static void test_io_uring_refused_and_the_loop_runs_confined(void **state)
{
    (void)state;
    struct uring_report rep = {0};
    pid_t pid = run_in_child(uring_child, false, &rep, sizeof(rep));
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (rep.refused == -ENOSYS)
        skip(); /* no seccomp filter here (qemu-user) */
    assert_int_equal(rep.refused, 0);
    assert_int_equal(rep.setup_errno, ENOSYS);
    assert_int_equal(rep.open_errno, 0);
    assert_int_equal(rep.sandbox, 0);
    assert_int_equal(rep.timer_fired, 1);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The core's side, against a front taken over: it opens more calls than its listeners
 * could hold (4 × max_connections: two listeners, and calls whose connection closed), and
 * the core answers those past the bound 503 at once instead of holding them. */
struct held {
    struct front_call *calls[64];
    size_t n;
};

static void hold_request(void *data, struct front_call *call, enum front_route route,
                         const struct http_request *req)
{
    (void)route;
    (void)req;
    struct held *h = data;
    h->calls[h->n++] = call;
}

static void on_rejected_none(void *data, const struct front_rejection *rej)
{
    (void)data;
    (void)rej;
}

static void on_gone_none(void *data, const char *why)
{
    (void)data;
    (void)why;
}

/* The core's side of a front: a front wrapped on one end of a socketpair (the test plays
 * the front on `sv[1]`), attached to a loop of its own with `cb`. */
struct core_side {
    int sv[2];
    struct config config;
    struct front *f;
    uv_loop_t loop;
};

static void core_side_open(struct core_side *cs, const struct front_callbacks *cb, void *data)
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, cs->sv), 0);
    cs->config = (struct config){.http = {.max_connections = 2, .max_body_bytes = 1024}};
    cs->f = front_wrap(cs->sv[0], -1, &cs->config);
    assert_non_null(cs->f);
    uv_loop_init(&cs->loop);
    assert_int_equal(front_attach(cs->f, &cs->loop, cb, data), 0);
}

static void core_side_close(struct core_side *cs)
{
    front_close(cs->f);
    uv_run(&cs->loop, UV_RUN_DEFAULT);
    front_free(cs->f);
    close(cs->sv[1]);
    assert_int_equal(uv_loop_close(&cs->loop), 0);
}

static void test_core_bounds_the_calls_a_front_opens(void **state)
{
    (void)state;
    struct core_side cs;
    struct held held = {0};
    const struct front_callbacks cb = {hold_request, on_rejected_none, on_gone_none};
    core_side_open(&cs, &cb, &held);
    struct front *f = cs.f;
    /* Twelve calls, none answered by the core's handler: 8 are within 4 × 2. */
    for (uint32_t id = 1; id <= 12; id++) {
        struct frame_out o;
        frame_begin(&o, FRAME_REQUEST, id);
        frame_out_string(&o, "0");
        frame_out_string(&o, "GET");
        frame_out_string(&o, "/healthz");
        frame_out_string(&o, "127.0.0.1");
        frame_end(&o, NULL, 0);
        assert_false(o.error);
        assert_int_equal(write(cs.sv[1], o.buf, o.len), (ssize_t)o.len);
        free(o.buf);
    }
    for (int i = 0; i < 100 && held.n + front_calls_refused(f) < 12; i++)
        uv_run(&cs.loop, UV_RUN_NOWAIT), usleep(10000);
    assert_int_equal(held.n, 8);
    assert_int_equal(front_calls_refused(f), 4);
    /* The four refused were answered 503 on the socketpair; the held ones are not yet. */
    for (int i = 0; i < 100; i++)
        uv_run(&cs.loop, UV_RUN_NOWAIT);
    char answers[4096];
    ssize_t n = read(cs.sv[1], answers, sizeof(answers));
    assert_true(n > 0);
    size_t n503 = 0;
    for (ssize_t k = 0; k + 3 <= n; k++)
        n503 += memcmp(answers + k, "503", 3) == 0;
    assert_int_equal(n503, 4);
    /* The held calls are answered as the core's handler would. */
    for (size_t i = 0; i < held.n; i++)
        front_respond(held.calls[i], 200, "text/plain", "ok\n", 3);
    core_side_close(&cs);
}

/* Bad signatures are counted per address, and an IPv6 address per /64: a subscriber's
 * whole /64 is one sender, or it would be unlimited. */
static void test_address_windows_count_ipv6_by_its_64(void **state)
{
    (void)state;
    struct address_window table[8] = {0};
    const char *same[] = {"2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff",
                          "2001:db8:1:2::abcd"};
    for (size_t i = 0; i < 3; i++)
        address_window_take(table, 8, same[i], 1000, 10000, NULL)->count++;
    const struct address_window *w = address_window_open(table, 8, "2001:db8:1:2::77", 1000, 10000);
    assert_non_null(w);
    assert_int_equal(w->count, 3);
    assert_string_equal(w->address, "2001:db8:1:2::/64");
    /* Another /64, and IPv4 addresses (mapped ones too), each counted alone. */
    assert_null(address_window_open(table, 8, "2001:db8:1:3::1", 1000, 10000));
    address_window_take(table, 8, "192.0.2.1", 1000, 10000, NULL)->count++;
    assert_null(address_window_open(table, 8, "192.0.2.2", 1000, 10000));
    assert_null(address_window_open(table, 8, "::ffff:192.0.2.2", 1000, 10000));
    address_window_take(table, 8, "::ffff:192.0.2.1", 1000, 10000, NULL)->count++;
    assert_int_equal(address_window_open(table, 8, "::ffff:192.0.2.1", 1000, 10000)->count, 1);
}

struct rejections {
    int n;
    double latency_s;
    bool gone;
};

static void count_rejected(void *data, const struct front_rejection *rej)
{
    struct rejections *r = data;
    r->n++;
    r->latency_s = rej->latency_s;
}

static void note_gone(void *data, const char *why)
{
    struct rejections *r = data;
    r->gone = strstr(why, "protocol") != NULL;
}

/* A rejection's latency from a front taken over: a figure that is not a finite,
 * non-negative number of seconds would spoil the core's sums. The frame is refused as a
 * breach of the protocol; a good one is counted. */
static void test_core_refuses_a_latency_that_is_no_figure(void **state)
{
    (void)state;
    const char *bad[] = {"nan", "-nan", "inf", "-1", "1e999", "", "0.5s"};
    for (size_t i = 0; i <= sizeof(bad) / sizeof(*bad); i++) {
        const char *latency = i < sizeof(bad) / sizeof(*bad) ? bad[i] : "0.25";
        struct core_side cs;
        struct rejections r = {0};
        const struct front_callbacks cb = {hold_request, count_rejected, note_gone};
        core_side_open(&cs, &cb, &r);
        struct frame_out o;
        frame_begin(&o, FRAME_REJECTED, 0);
        frame_out_string(&o, "401");
        frame_out_string(&o, "bad signature");
        frame_out_string(&o, "192.0.2.9");
        frame_out_string(&o, latency);
        frame_end(&o, NULL, 0);
        assert_false(o.error);
        assert_int_equal(write(cs.sv[1], o.buf, o.len), (ssize_t)o.len);
        free(o.buf);
        for (int k = 0; k < 100 && r.n == 0 && !r.gone; k++)
            uv_run(&cs.loop, UV_RUN_NOWAIT), usleep(2000);
        if (i < sizeof(bad) / sizeof(*bad)) {
            if (r.n != 0 || !r.gone)
                fail_msg("latency \"%s\": counted %d, refused %d", latency, r.n, r.gone);
        } else {
            assert_int_equal(r.n, 1);
            assert_true(r.latency_s == 0.25);
        }
        core_side_close(&cs);
    }
}

/* The front's stderr, read by the core as untrusted text: a front taken over writes an
 * emergency priority, terminal escapes, an endless line and a flood; the core's log gets
 * each as one escaped value at warn at most, cut, and at most LOG_THROTTLE_LINES lines. */
static void test_core_relays_the_fronts_lines_as_untrusted(void **state)
{
    (void)state;
    int sv[2], logs[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(pipe2(logs, O_CLOEXEC), 0);
    struct config c = {.http = {.max_connections = 2, .max_body_bytes = 1024}};
    struct front *f = front_wrap(sv[0], logs[0], &c);
    assert_non_null(f);
    /* The core's own log lines, caught in a file. */
    char path[] = "/tmp/hatchery-front-log-XXXXXX";
    int out = mkstemp(path);
    assert_true(out >= 0);
    int saved = dup(STDERR_FILENO);
    assert_true(dup2(out, STDERR_FILENO) >= 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct held held = {0};
    const struct front_callbacks cb = {hold_request, on_rejected_none, on_gone_none};
    assert_int_equal(front_attach(f, &loop, &cb, &held), 0);
    static char text[8192];
    size_t n = (size_t)snprintf(text, sizeof(text),
                                "<0>the front says: emergency\n"
                                "ts=1 level=error event=fake.core reason=\"\x1b[2Jwiped\"\n");
    memset(text + n, 'x', 3000); /* longer than FRONT_LOG_LINE_MAX */
    n += 3000;
    text[n++] = '\n';
    for (int i = 0; i < 20; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "flood %d\n", i);
    assert_int_equal(write(logs[1], text, n), (ssize_t)n);
    close(logs[1]);
    front_close(f);
    close(sv[1]);
    uv_run(&loop, UV_RUN_DEFAULT);
    front_free(f);
    assert_int_equal(uv_loop_close(&loop), 0);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    static char got[65536];
    ssize_t len = pread(out, got, sizeof(got) - 1, 0);
    close(out);
    unlink(path);
    assert_true(len > 0);
    got[len] = 0;
    /* Its priority capped: warn, never error, and no line of the core's starts with <N>. */
    assert_non_null(strstr(got, "level=warn event=front.line text=\"the front says: emergency\""));
    assert_null(strstr(got, "Z level=error"));
    assert_null(strstr(got, "\n<0>"));
    assert_true(strncmp(got, "<", 1) != 0);
    /* The escape arrived as text, not as a byte to the terminal; the fake event is inside
     * one value, not a key of the core's line. */
    assert_null(strchr(got, 0x1b));
    if (!strstr(got, "level=warn event=front.line text=\"ts=1 level=error event=fake.core reason="))
        fail_msg("the fake line is not one value: %s", got);
    /* The endless line cut; the flood bounded. */
    assert_non_null(strstr(got, "cut=1"));
    size_t lines = 0;
    for (const char *p = got; (p = strstr(p, "event=front.line")); p++)
        lines++;
    assert_int_equal(lines, LOG_THROTTLE_LINES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sandbox_denies_files_sockets_and_processes),
        cmocka_unit_test(test_sandbox_kills_exec),
        cmocka_unit_test(test_io_uring_refused_and_the_loop_runs_confined),
        cmocka_unit_test(test_core_bounds_the_calls_a_front_opens),
        cmocka_unit_test(test_core_relays_the_fronts_lines_as_untrusted),
        cmocka_unit_test(test_core_refuses_a_latency_that_is_no_figure),
        cmocka_unit_test(test_address_windows_count_ipv6_by_its_64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
