/* The confinement the HTTP front puts itself under once it listens (front_process.h). */
#ifndef HATCHERY_FRONT_SANDBOX_H
#define HATCHERY_FRONT_SANDBOX_H

/* no_new_privs, then the seccomp allowlist. Returns 0, or -ENOSYS where the kernel (or an
 * emulator) has no seccomp filter, or another negative errno. Public for its test. */
int front_sandbox_apply(void);
/* Before the front's loop exists: io_uring_setup (and the other io_uring calls) fail with
 * ENOSYS, as on a kernel without io_uring, so that libuv keeps to plain epoll. A ring made
 * before the allowlist would carry operations past it unseen, and libuv 1.49 and later
 * (Debian 13) batch epoll_ctl through one whatever UV_USE_IO_URING says, then abort when
 * the allowlist refuses io_uring_enter. Same returns as front_sandbox_apply(). */
int front_refuse_io_uring(void);

#endif
