/* A call tracer for measuring a job's way through hatcheryd (tests/bench/job_way.sh): linked
 * into a build made with -finstrument-functions, it writes one record per function entered,
 * with the thread and the *step* it belongs to. A step is what runs for one wake-up of the
 * loop or of a worker: it begins at a call from libuv into hatcheryd (a loop's callback,
 * a libuv worker's function; hatcheryd's main never returns while its loop runs, so depth
 * alone cannot tell), or where a thread's depth of traced calls goes from 0 to 1. The
 * hosts' own threads (host_queue.c) run many calls in one loop of theirs: analyze.py cuts
 * their steps where the queue hands over a call.
 * Writes to $HATCHERY_TRACE.<pid>; without that variable it records nothing. A forked child
 * (the sandboxed HTTP front) records nothing: it closes and reuses descriptors, and the
 * file's could become its socket to the core. Not part of any product build. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
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
    int64_t t_ns;      /* CLOCK_REALTIME */
    uint32_t tid, step;
};

#define BUFFERED 4096

static int trace_fd = -1;
static uintptr_t bias;
/* The text of libuv, whose calls into hatcheryd begin a step. */
#define LOOP_LIBS 4
static struct {
    uintptr_t start, end;
} loops[LOOP_LIBS];
static int n_loops;
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

NO_TRACE static int loop_library(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    if (!strstr(info->dlpi_name, "libuv.so"))
        return 0;
    for (int i = 0; i < info->dlpi_phnum && n_loops < LOOP_LIBS; i++)
        if (info->dlpi_phdr[i].p_type == PT_LOAD && (info->dlpi_phdr[i].p_flags & PF_X)) {
            loops[n_loops].start = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            loops[n_loops].end = loops[n_loops].start + info->dlpi_phdr[i].p_memsz;
            n_loops++;
        }
    return 0;
}

NO_TRACE static int from_loop(uintptr_t site)
{
    for (int i = 0; i < n_loops; i++)
        if (site >= loops[i].start && site < loops[i].end)
            return 1;
    return 0;
}

NO_TRACE static void trace_off_in_child(void)
{
    trace_fd = -1; /* the parent's descriptor stays open in the child, unwritten */
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
    dl_iterate_phdr(loop_library, NULL);
    pthread_atfork(NULL, NULL, trace_off_in_child);
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
    if (depth++ == 0 || from_loop((uintptr_t)site)) {
        flush(); /* a step's records reach the file whole, before the next step's */
        step = __atomic_add_fetch(&steps, 1, __ATOMIC_RELAXED);
        if (!tid)
            tid = (uint32_t)syscall(SYS_gettid);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    buf[n_buf].t_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    struct trace_record *r = &buf[n_buf];
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
        flush();
}
