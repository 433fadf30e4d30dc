/* A call tracer for measuring a job's way through hatcheryd (tests/bench/job_way.sh): linked
 * into a build made with -finstrument-functions, it writes one record per function entered,
 * with the thread and the *step* it belongs to. A step is what runs for one wake-up of the
 * loop or of a worker: it begins where a thread's depth of instrumented calls goes from 0
 * to 1 (a callback from libuv, a worker's function). Writes to $HATCHERY_TRACE.<pid>;
 * without that variable it records nothing. Not part of any product build. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NO_TRACE __attribute__((no_instrument_function))

struct trace_record {
    uint64_t fn, site; /* offsets in the executable (ASLR taken out) */
    int64_t t_ns;      /* CLOCK_REALTIME, at the step's first record only; else 0 */
    uint32_t tid, step;
};

#define BUFFERED 4096

static int trace_fd = -1;
static uintptr_t bias;
static uint32_t steps; /* across threads: a step number is unique in the process */

static __thread int depth;
static __thread uint32_t step;
static __thread uint32_t tid;
static __thread struct trace_record buf[BUFFERED];
static __thread size_t n_buf;

NO_TRACE static int first_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(uintptr_t *)data = info->dlpi_addr;
    return 1; /* the executable comes first */
}

NO_TRACE __attribute__((constructor)) static void trace_open(void)
{
    const char *path = getenv("HATCHERY_TRACE");
    if (!path || !path[0])
        return;
    char name[4096];
    snprintf(name, sizeof(name), "%s.%ld", path, (long)getpid());
    trace_fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    dl_iterate_phdr(first_object, &bias);
}

NO_TRACE static void flush(void)
{
    if (n_buf && trace_fd >= 0 &&
        write(trace_fd, buf, n_buf * sizeof(buf[0])) != (ssize_t)(n_buf * sizeof(buf[0])))
        trace_fd = -1;
    n_buf = 0;
}

NO_TRACE void __cyg_profile_func_enter(void *fn, void *site)
{
    if (trace_fd < 0)
        return;
    struct trace_record *r = &buf[n_buf];
    memset(r, 0, sizeof(*r));
    if (depth++ == 0) {
        step = __atomic_add_fetch(&steps, 1, __ATOMIC_RELAXED);
        if (!tid)
            tid = (uint32_t)syscall(SYS_gettid);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r->t_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    }
    r->fn = (uintptr_t)fn - bias;
    r->site = (uintptr_t)site - bias;
    r->tid = tid;
    r->step = step;
    if (++n_buf == BUFFERED)
        flush();
}

NO_TRACE void __cyg_profile_func_exit(void *fn, void *site)
{
    (void)fn;
    (void)site;
    if (trace_fd >= 0 && --depth == 0)
        flush(); /* a step's records reach the file whole, before the next step's */
}
