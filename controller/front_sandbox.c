/* The HTTP front's confinement: no_new_privs and a seccomp allowlist; see front_sandbox.h. */
#include "front_sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define N_OF(a) (sizeof(a) / sizeof(*(a)))

/* What the front does after it listens: libuv's epoll loop and its timers, accept and the
 * socket calls on accepted connections, OpenSSL's getrandom, malloc's mmap and brk, stderr
 * for its log, and exiting; fcntl and ioctl for a few requests only (fd_control_rules).
 * Everything else fails with EPERM; exec and ptrace kill. */
static const char *const front_syscalls[] = {
    "read",
    "write",
    "readv",
    "writev",
    "close",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_ctl",
    "accept",
    "accept4",
    "recvfrom",
    "sendto",
    "recvmsg",
    "sendmsg",
    "shutdown",
    "setsockopt",
    "getsockopt",
    "getsockname",
    "getpeername",
    "fstat",
    "clock_gettime",
    "clock_getres",
    "gettimeofday",
    "nanosleep",
    "clock_nanosleep",
    "futex",
    "brk",
    "mmap",
    "munmap",
    "mremap",
    "madvise",
    "mprotect",
    "rt_sigreturn",
    "rt_sigprocmask",
    "sigaltstack",
    "getrandom",
    "getpid",
    "gettid",
    "sched_yield",
    "restart_syscall",
    "exit",
    "exit_group",
};

static const char *const front_killing_syscalls[] = {
    "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev",
};

/* Whether this kernel (or emulator) has seccomp filters at all: qemu-user answers the
 * seccomp() syscall with ENOSYS (and refuses the prctl with EINVAL), as a kernel without
 * CONFIG_SECCOMP does; libseccomp would then fail in ways of its own. A kernel before 4.14
 * answers EINVAL (no GET_ACTION_AVAIL): the load tries. */
static bool seccomp_filters_available(void)
{
    uint32_t action = SECCOMP_RET_KILL_PROCESS;
    return syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0 || errno != ENOSYS;
}

static const char *const io_uring_syscalls[] = {
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
};

/* A filter whose calls not named get `default_action`, under no_new_privs: 0, -ENOSYS
 * where there are no seccomp filters (see seccomp_filters_available), or -errno. */
static int filter_new(uint32_t default_action, scmp_filter_ctx *ret)
{
    if (!seccomp_filters_available())
        return -ENOSYS;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    *ret = seccomp_init(default_action);
    if (!*ret)
        return -ENOMEM;
    /* The kernel's own errno from seccomp_load, not libseccomp's -ECANCELED for all (where
     * this libseccomp can: the attribute only sharpens the error). */
    seccomp_attr_set(*ret, SCMP_FLTATR_API_SYSRAWRC, 1);
    return 0;
}

/* `action` for each call of `names` this architecture has. */
static int filter_add(scmp_filter_ctx ctx, uint32_t action, const char *const *names, size_t n)
{
    int r = 0;
    for (size_t i = 0; r == 0 && i < n; i++) {
        int nr = seccomp_syscall_resolve_name(names[i]);
        if (nr != __NR_SCMP_ERROR)
            r = seccomp_rule_add(ctx, action, nr, 0);
    }
    return r;
}

/* Loads the filter when the rules went in (`r` 0), and releases it. */
static int filter_load(scmp_filter_ctx ctx, int r)
{
    if (r == 0) {
        r = seccomp_load(ctx);
        /* No seccomp filter here: qemu-user has no seccomp() (ENOSYS) and refuses the
         * prctl (EINVAL), as does a kernel without CONFIG_SECCOMP_FILTER. */
        if (r == -EINVAL || r == -ENOSYS)
            r = -ENOSYS;
    }
    seccomp_release(ctx);
    return r;
}

int front_refuse_io_uring(void)
{
    scmp_filter_ctx ctx;
    int r = filter_new(SCMP_ACT_ALLOW, &ctx);
    if (r < 0)
        return r;
    return filter_load(
        ctx, filter_add(ctx, SCMP_ACT_ERRNO(ENOSYS), io_uring_syscalls, N_OF(io_uring_syscalls)));
}

/* fcntl: a descriptor's own flags (libuv's and glibc's), never O_ASYNC, F_SETOWN or
 * F_SETSIG, with which the kernel would signal any process on I/O (SIGKILL to the core,
 * past the kill() ban). ioctl: libuv's non-blocking and close-on-exec requests only, not
 * a terminal's (TIOCSTI types into an inherited one) or an interface's (SIOCSIFFLAGS).
 * The request is an int: its upper half is not compared. */
static int fd_control_rules(scmp_filter_ctx ctx)
{
    int fcntl_nr = seccomp_syscall_resolve_name("fcntl");
    int ioctl_nr = seccomp_syscall_resolve_name("ioctl");
    const int fcntl_plain[] = {F_GETFD, F_SETFD, F_GETFL};
    const unsigned long ioctl_ok[] = {FIONBIO, FIOCLEX, FIONCLEX};
    int r = 0;
    for (size_t i = 0; r == 0 && fcntl_nr != __NR_SCMP_ERROR && i < N_OF(fcntl_plain); i++)
        r = seccomp_rule_add(
            ctx, SCMP_ACT_ALLOW, fcntl_nr, 1,
            SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)fcntl_plain[i]));
    if (r == 0 && fcntl_nr != __NR_SCMP_ERROR)
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, fcntl_nr, 2,
                             SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)F_SETFL),
                             SCMP_A2(SCMP_CMP_MASKED_EQ, (scmp_datum_t)O_ASYNC, 0));
    for (size_t i = 0; r == 0 && ioctl_nr != __NR_SCMP_ERROR && i < N_OF(ioctl_ok); i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, ioctl_nr, 1,
                             SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)ioctl_ok[i]));
    return r;
}

int front_sandbox_apply(void)
{
    scmp_filter_ctx ctx;
    int r = filter_new(SCMP_ACT_ERRNO(EPERM), &ctx);
    if (r < 0)
        return r;
    r = filter_add(ctx, SCMP_ACT_ALLOW, front_syscalls, N_OF(front_syscalls));
    if (r == 0)
        r = filter_add(ctx, SCMP_ACT_KILL_PROCESS, front_killing_syscalls,
                       N_OF(front_killing_syscalls));
    if (r == 0)
        r = fd_control_rules(ctx);
    /* No newfstatat or statx: seccomp sees the path's pointer, not the path, so "only with
     * AT_EMPTY_PATH" would still stat any file. The plain fstat syscall (allowed above)
     * takes a descriptor alone; glibc's fstat() wrapper, which goes through newfstatat,
     * fails with EPERM, which stdio copes with, and nothing the front runs calls it. */
    int nr;
    /* abort() signals its own thread only. */
    nr = seccomp_syscall_resolve_name("tgkill");
    if (r == 0 && nr != __NR_SCMP_ERROR)
        r = seccomp_rule_add(
            ctx, SCMP_ACT_ALLOW, nr, 1,
            (struct scmp_arg_cmp){
                .arg = 0, .op = SCMP_CMP_EQ, .datum_a = (scmp_datum_t)getpid(), .datum_b = 0});
    return filter_load(ctx, r);
}
