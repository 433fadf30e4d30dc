/* The runner's confinement in a container; see confine.h. */
#define _GNU_SOURCE
#include "confine.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#if defined(__x86_64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_X86_64
#define CLONE_FLAGS_ARG   0
#define X32_SYSCALL_BIT   0x40000000u /* x32 calls carry x86_64's audit arch */
#elif defined(__aarch64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#define CLONE_FLAGS_ARG   0
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_PPC64LE
#define CLONE_FLAGS_ARG   0
#elif defined(__s390x__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_S390X
#define CLONE_FLAGS_ARG   1 /* clone(stack, flags, ...) on s390 */
#else
#error "agent/confine.c: no seccomp filter for this architecture"
#endif

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* Every namespace clone can make. CLONE_NEWTIME shares its bit with clone's exit signal,
 * so it is unshare's (and clone3's) alone. */
#define CLONE_NAMESPACES                                                                           \
    (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |  \
     CLONE_NEWNET)
#define UNSHARE_NAMESPACES (CLONE_NAMESPACES | CLONE_NEWTIME)

/* The flags' 32 low bits (every namespace flag is among them), in the 64-bit argument. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ARG_LOW_WORD(n) (offsetof(struct seccomp_data, args) + 8 * (n))
#else
#define ARG_LOW_WORD(n) (offsetof(struct seccomp_data, args) + 8 * (n) + 4)
#endif

#define DENY   (SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))
#define NO_SYS (SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA))
#define ALLOW  SECCOMP_RET_ALLOW

#define LOAD(offset)        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (offset))
#define RETURN(what)        BPF_STMT(BPF_RET | BPF_K, (what))
#define IF_EQUAL_SKIP(k, n) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (k), 0, (n)) /* else skip n */
#define IF_ANY_BITS(k)      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, (k), 0, 1)  /* else skip 1 */

/* Each block tests the call's number (in the accumulator) and ends in a return, or skips
 * itself whole. */
static const struct sock_filter filter[] = {
    LOAD(offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_AUDIT_ARCH, 1, 0), /* equal: skip the return */
    RETURN(DENY),                                                 /* another ABI's call */
    LOAD(offsetof(struct seccomp_data, nr)),
#ifdef X32_SYSCALL_BIT
    IF_ANY_BITS(X32_SYSCALL_BIT),
    RETURN(DENY),
#endif
    IF_EQUAL_SKIP(__NR_setns, 1),
    RETURN(DENY),
    IF_EQUAL_SKIP(__NR_clone3, 1),
    RETURN(NO_SYS),
    IF_EQUAL_SKIP(__NR_unshare, 4),
    LOAD(ARG_LOW_WORD(0)),
    IF_ANY_BITS(UNSHARE_NAMESPACES),
    RETURN(DENY),
    RETURN(ALLOW),
    IF_EQUAL_SKIP(__NR_clone, 4),
    LOAD(ARG_LOW_WORD(CLONE_FLAGS_ARG)),
    IF_ANY_BITS(CLONE_NAMESPACES),
    RETURN(DENY),
    RETURN(ALLOW),
    RETURN(ALLOW),
};

int confine_no_new_namespaces(void)
{
    struct sock_fprog prog = {
        .len = (unsigned short)(sizeof(filter) / sizeof(filter[0])),
        .filter = (struct sock_filter *)filter,
    };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
        return -errno;
    return 0;
}
