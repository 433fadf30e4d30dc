/* Provisioner benchmarks. They print figures beside a baseline measured in the same run,
 * as a ratio; they assert nothing about time.
 *
 *   provision_bench overhead [N]   create+teardown cycles per second through the
 *                                  provisioner on test:///default, beside a raw libvirt
 *                                  loop doing the same calls (volume create, domain
 *                                  create, destroy, volume delete) back to back: one guest
 *                                  at a time, and 8 in flight; with what two bare round
 *                                  trips through libuv's thread pool cost (a cycle makes
 *                                  two: create, teardown).
 *   provision_bench boot ARCH DIR  on a real libvirtd: time from the create call to the
 *                                  agent's hello, beside virDomainCreateXML of the same
 *                                  domain XML to the guest's first line of its own (the test
 *                                  guest's /init prints one as userspace starts, right
 *                                  before it runs the agent; with `quiet` the kernel prints
 *                                  nothing before, but firmware may). DIR is the test guest
 *                                  (images/test-guest/build.sh ARCH).
 *   provision_bench template ARCH DIR|IMAGE.qcow2  a warm template of the same guest, or of
 *                                  a production image (e2e.production_image's): its build time
 *                                  and file size, then create to hello cold beside
 *                                  restore to hello from the template, alternating, as a
 *                                  ratio (goal <= 0.2).
 *   provision_bench footprint JOBS HOSTS  the memory libvirt's test driver itself holds for
 *                                  JOBS running domains and their volumes over HOSTS private
 *                                  test:/// instances in this process, as scale_bench.sh
 *                                  makes hatcheryd hold them: the part of hatcheryd's RSS
 *                                  that is libvirt's, not Hatchery's. Prints its RSS in KiB. */
#define _GNU_SOURCE /* memmem */
#include <fcntl.h>
#include <limits.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libvirt/domain_xml.h"
#include "image_manifest.h"
#include "libvirt/libvirt_loop.h"
#include "log.h"
#include "libvirt/provisioner.h"

#define SETTLE_US 2000000

static uv_loop_t loop;
static char state_dir[] = "/tmp/hatchery-bench-XXXXXX";

static double now_s(void)
{
    return (double)uv_hrtime() / 1e9;
}

static bool file_contains(const char *path, const char *needle)
{
    char buf[65536];
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    return memmem(buf, (size_t)n, needle, strlen(needle)) != NULL;
}

static void quiet(void *data, virErrorPtr e)
{
    (void)data;
    (void)e;
}

struct run {
    bool hello, gone, failed;
    double hello_at;
};

static void ev_hello(void *data, struct guest *g, const struct agent_hello *h)
{
    (void)h;
    struct run *r = data;
    r->hello = true;
    r->hello_at = now_s();
    guest_teardown(g, "benchmark");
}

static void ev_failed(void *data, struct guest *g, const char *reason)
{
    (void)g;
    struct run *r = data;
    r->failed = true;
    fprintf(stderr, "failed: %s\n", reason);
}

static void ev_gone(void *data, struct guest *g)
{
    (void)g;
    ((struct run *)data)->gone = true;
}

static const struct guest_events events = {
    .on_hello = ev_hello, .on_failed = ev_failed, .on_gone = ev_gone};

static struct provisioner *start(const char *host, const char *uri, const char *storage_pool)
{
    struct provisioner *p = NULL;
    struct provisioner_options o = {.controller_id = "bench", .state_dir = state_dir};
    provisioner_new(&loop, &o, &p);
    static struct config_host h;
    static char volumes[300];
    snprintf(volumes, sizeof(volumes), "%s/volumes", state_dir);
    h = (struct config_host){.name = (char *)host,
                             .uri = (char *)uri,
                             .vcpus = 64,
                             .memory_mib = 1 << 20,
                             .max_guests = 64,
                             .storage_pool = (char *)storage_pool,
                             .storage_dir = volumes};
    provider_host_add(provisioner_provider(p), &h);
    while (!provider_host_up(provisioner_provider(p), host))
        uv_run(&loop, UV_RUN_ONCE);
    return p;
}

/* `k` raw cycles: the libvirt calls a guest's create and teardown make, synchronously, on
 * one connection. Seconds, or -1. */
static double raw_cycles(virConnectPtr c, virStoragePoolPtr sp, int first, int k)
{
    struct domain_spec spec = {.controller_id = "bench",
                               .pool = "b",
                               .arch = ARCH_S390X,
                               .backend = BACKEND_VM,
                               .vcpus = 1,
                               .memory_mib = 256,
                               .storage_pool = "default-pool",
                               .network = "none",
                               .channel_path = "/tmp/x.sock",
                               .console_log = "/tmp/x.log"};
    char name[64], vol[80], err[256];
    double t0 = now_s();
    for (int i = first; i < first + k; i++) {
        snprintf(name, sizeof(name), "raw-%d", i);
        snprintf(vol, sizeof(vol), "raw-%d.qcow2", i);
        spec.name = name;
        spec.volume = vol;
        char vxml[512];
        snprintf(vxml, sizeof(vxml),
                 "<volume><name>%s</name><capacity unit='MiB'>64</capacity><target><format "
                 "type='qcow2'/></target><backingStore><path>/default-pool/base.qcow2</path>"
                 "<format type='qcow2'/></backingStore></volume>",
                 vol);
        virStorageVolPtr v = virStorageVolCreateXML(sp, vxml, 0);
        char *xml = domain_xml_build(&spec, err, sizeof(err));
        virDomainPtr d = virDomainCreateXML(c, xml, 0);
        free(xml);
        if (!d || !v) {
            fprintf(stderr, "raw cycle failed\n");
            return -1;
        }
        virDomainDestroy(d);
        virDomainFree(d);
        virStorageVolDelete(v, 0);
        virStorageVolFree(v);
    }
    return now_s() - t0;
}

/* `k` cycles through the provider with `depth` guests in flight at once (1: one at a time;
 * more, as a burst of jobs makes them): each guest is created (its work on a worker, back
 * on the loop), then torn down, and the next starts when one is gone. Seconds, or -1. */
#define IN_FLIGHT_MAX 16
#define IN_FLIGHT     8
static double provider_cycles(struct provider *p, const struct config_pool *pool, int first, int k,
                              int depth)
{
    struct run runs[IN_FLIGHT_MAX];
    struct guest *gs[IN_FLIGHT_MAX] = {0};
    bool torn[IN_FLIGHT_MAX] = {0};
    char name[64];
    int next = first, done = 0;
    double t0 = now_s();
    while (done < k) {
        for (int i = 0; i < depth; i++) {
            if (gs[i] && runs[i].gone) {
                gs[i] = NULL;
                done++;
            }
            if (gs[i] && !torn[i] && (guest_state_get(gs[i]) != GUEST_CREATING || runs[i].failed)) {
                guest_teardown(gs[i], "benchmark");
                torn[i] = true;
            }
            if (!gs[i] && next < first + k) {
                runs[i] = (struct run){0};
                torn[i] = false;
                snprintf(name, sizeof(name), "hatchery-bench-%d", next);
                struct guest_spec spec = {.name = name, .runner_id = next, .pool = pool};
                if (provider_guest_create(p, "t", &spec, &events, &runs[i], &gs[i]) < 0)
                    return -1;
                next++;
            }
        }
        if (done < k)
            uv_run(&loop, UV_RUN_ONCE);
    }
    return now_s() - t0;
}

/* `k` times two round trips through libuv's thread pool with nothing to do, as a guest's
 * create and teardown each make one: what handing work to a worker and hearing back costs
 * on this machine, apart from the work. Seconds. */
static void hop_work(uv_work_t *w)
{
    (void)w;
}
static void hop_done(uv_work_t *w, int status)
{
    (void)status;
    (*(int *)w->data)--;
}
static double hop_cycles(int k)
{
    double t0 = now_s();
    for (int i = 0; i < 2 * k; i++) {
        int pending = 1;
        uv_work_t w = {.data = &pending};
        uv_queue_work(&loop, &w, hop_work, hop_done);
        while (pending)
            uv_run(&loop, UV_RUN_ONCE);
    }
    return now_s() - t0;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Raw and provider chunks alternate, so that a slow second (this machine's raw rate swings
 * 2x between runs) weighs on both alike; the ratio is each chunk pair's, and their median. */
#define OVERHEAD_CHUNKS 9
static int overhead(int n)
{
    virConnectPtr c = virConnectOpen("test:///default");
    virStoragePoolPtr sp = virStoragePoolLookupByName(c, "default-pool");
    struct provisioner *prov = start("t", "test:///default", "default-pool");
    struct provider *p = provisioner_provider(prov);
    struct config_pool pool = {.name = (char *)"b",
                               .arch = ARCH_S390X,
                               .backend = BACKEND_VM,
                               .image = (char *)"/default-pool/base.qcow2",
                               .vcpus = 1,
                               .memory_mib = 256,
                               .network = (char *)"none",
                               .disk_mib = 64,
                               .boot_timeout_s = 600};
    int k = n / OVERHEAD_CHUNKS > 0 ? n / OVERHEAD_CHUNKS : 1;
    double raw_s = 0, ours_s = 0, hops_s = 0, flight_s = 0;
    double ratios[OVERHEAD_CHUNKS], flight_ratios[OVERHEAD_CHUNKS];
    for (int chunk = 0; chunk < OVERHEAD_CHUNKS; chunk++) {
        int first = 3 * chunk * k;
        double r = raw_cycles(c, sp, first, k);
        double o = provider_cycles(p, &pool, first + k, k, 1);
        double h = hop_cycles(k);
        double f = provider_cycles(p, &pool, first + 2 * k, k, IN_FLIGHT);
        if (r < 0 || o < 0 || f < 0)
            return 1;
        raw_s += r;
        ours_s += o;
        hops_s += h;
        flight_s += f;
        ratios[chunk] = r / o; /* provider cycles/s over raw cycles/s */
        flight_ratios[chunk] = r / f;
    }
    qsort(ratios, OVERHEAD_CHUNKS, sizeof(*ratios), compare_doubles);
    qsort(flight_ratios, OVERHEAD_CHUNKS, sizeof(*flight_ratios), compare_doubles);
    int total = k * OVERHEAD_CHUNKS;
    printf("provision+teardown cycles/s on test:///default (n=%d, %d alternating chunks of %d)\n",
           total, OVERHEAD_CHUNKS, k);
    printf("  raw libvirt loop      %10.1f\n", total / raw_s);
    printf("  hatchery provisioner  %10.1f  one guest at a time\n", total / ours_s);
    printf("  ratio %.3f overall, %.3f median of the chunks (goal >= 0.8)\n", raw_s / ours_s,
           ratios[OVERHEAD_CHUNKS / 2]);
    /* Where one at a time goes: the two hand-overs to a worker and back, apart from work. */
    double hop_us = hops_s / total * 1e6, raw_us = raw_s / total * 1e6;
    printf("  of a cycle: raw %.1f us, hatchery %.1f us, its two thread-pool round trips alone "
           "%.1f us (%.0f%% of what hatchery adds)\n",
           raw_us, ours_s / total * 1e6, hop_us, 100.0 * hop_us / (ours_s / total * 1e6 - raw_us));
    printf("  hatchery provisioner  %10.1f  %d guests in flight, as a burst makes them\n",
           total / flight_s, IN_FLIGHT);
    printf("  ratio %.3f overall, %.3f median of the chunks\n", raw_s / flight_s,
           flight_ratios[OVERHEAD_CHUNKS / 2]);
    virStoragePoolFree(sp);
    virConnectClose(c);
    provider_free(p);
    return 0;
}

/* The transient storage pool goes with the run; then the provisioner. */
static void finish(struct provisioner *p, const char *pool_name)
{
    virConnectPtr c = virConnectOpen("qemu:///system");
    virStoragePoolPtr sp = virStoragePoolLookupByName(c, pool_name);
    if (sp) {
        virStoragePoolDestroy(sp);
        virStoragePoolFree(sp);
    }
    virConnectClose(c);
    provider_free(provisioner_provider(p));
}

/* The guest a benchmark boots: DIR is the test guest's directory, or a production image
 * (IMAGE.qcow2, booted from the kernel, initrd and command line its manifest names, as
 * hatcheryd does). The pool points into `f`. */
struct guest_files {
    char kernel[PATH_MAX], initrd[PATH_MAX], image[PATH_MAX], cmdline[512];
};

static int bench_pool(const char *arch_name, const char *dir, struct guest_files *f,
                      struct config_pool *ret)
{
    bool ppc = strcmp(arch_name, "ppc64le") == 0;
    size_t dir_len = strlen(dir);
    bool production = dir_len > 6 && strcmp(dir + dir_len - 6, ".qcow2") == 0;
    snprintf(f->kernel, sizeof(f->kernel), "%s/kernel", dir);
    snprintf(f->initrd, sizeof(f->initrd), "%s/initrd", dir);
    snprintf(f->image, sizeof(f->image), "%s/base.qcow2", dir);
    snprintf(f->cmdline, sizeof(f->cmdline), "%s",
             ppc ? "console=hvc0 quiet" : "console=ttysclp0 quiet");
    if (production) {
        struct image_manifest m;
        char err[512];
        if (image_manifest_read(dir, &m, err, sizeof(err)) < 0) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
        snprintf(f->image, sizeof(f->image), "%s", dir);
        snprintf(f->kernel, sizeof(f->kernel), "%s", m.kernel);
        snprintf(f->initrd, sizeof(f->initrd), "%s", m.initrd);
        snprintf(f->cmdline, sizeof(f->cmdline), "%s", m.cmdline);
    }
    *ret = (struct config_pool){.name = (char *)arch_name,
                                .arch = ppc ? ARCH_PPC64LE : ARCH_S390X,
                                .backend = BACKEND_VM,
                                .image = f->image,
                                .kernel = f->kernel,
                                .initrd = f->initrd,
                                .cmdline = f->cmdline,
                                .firmware = ppc && !production ? FIRMWARE_VOF : FIRMWARE_DEFAULT,
                                .vcpus = 1,
                                .memory_mib = production ? 1536 : 512,
                                .network = (char *)"none",
                                .disk_mib = production ? 8192 : 64,
                                .boot_timeout_s = production ? 900 : 120};
    return production;
}

static int boot(const char *arch_name, const char *dir)
{
    bool ppc = strcmp(arch_name, "ppc64le") == 0;
    struct guest_files f;
    struct config_pool pool;
    if (bench_pool(arch_name, dir, &f, &pool) < 0)
        return 1;
    const char *kernel = f.kernel, *initrd = f.initrd, *image = f.image, *cmdline = f.cmdline;
    char pool_name[64];
    snprintf(pool_name, sizeof(pool_name), "hatchery-bench-%d", (int)getpid());
    struct provisioner *p = start("local", "qemu:///system", pool_name);
    const int rounds = 3;
    double ours = 0, raw = 0, ours_up = 0;
    for (int i = 0; i < rounds; i++) {
        char name[64];
        struct run r = {0};
        struct guest *g = NULL;
        snprintf(name, sizeof(name), "hatchery-bench-boot-%d", i);
        struct guest_spec gs = {.name = name, .runner_id = i, .pool = &pool};
        /* Let the previous guest's QEMU finish exiting: on 2 cores it slows the next boot. */
        usleep(SETTLE_US);
        double t0 = now_s();
        provider_guest_create(provisioner_provider(p), "local", &gs, &events, &r, &g);
        double up_at = 0;
        while (!r.hello && !r.failed) {
            uv_run(&loop, UV_RUN_NOWAIT);
            if (!up_at && file_contains(guest_console_log(g), "hatchery-test-guest: up"))
                up_at = now_s();
            usleep(2000);
        }
        ours += r.hello_at - t0;
        ours_up += (up_at ? up_at : r.hello_at) - t0;
        while (!r.gone)
            uv_run(&loop, UV_RUN_ONCE);
        /* Baseline: the same kind of domain, created directly, to its first console line. */
        char log_path[512], vol[80], err[256];
        snprintf(name, sizeof(name), "bench-raw-%d", i);
        snprintf(vol, sizeof(vol), "bench-raw-%d.qcow2", i);
        snprintf(log_path, sizeof(log_path), "%s/raw-%d.log", state_dir, i);
        char chan[512];
        snprintf(chan, sizeof(chan), "%s/raw-%d.sock", state_dir, i);
        struct domain_spec spec = {.name = name,
                                   .controller_id = "bench-raw",
                                   .pool = arch_name,
                                   .arch = pool.arch,
                                   .backend = BACKEND_VM,
                                   .vcpus = 1,
                                   .memory_mib = 512,
                                   .storage_pool = pool_name,
                                   .volume = vol,
                                   .kernel = kernel,
                                   .initrd = initrd,
                                   .cmdline = cmdline,
                                   .vof = ppc,
                                   .network = "none",
                                   .channel_path = chan,
                                   .console_log = log_path};
        virConnectPtr c = virConnectOpen("qemu:///system");
        virStoragePoolPtr sp = virStoragePoolLookupByName(c, pool_name);
        char vxml[PATH_MAX + 512];
        snprintf(vxml, sizeof(vxml),
                 "<volume><name>%s</name><capacity unit='MiB'>64</capacity><target><format "
                 "type='qcow2'/></target><backingStore><path>%s</path><format type='qcow2'/>"
                 "</backingStore></volume>",
                 vol, image);
        char *xml = domain_xml_build(&spec, err, sizeof(err));
        usleep(SETTLE_US);
        t0 = now_s();
        virStorageVolPtr v = virStorageVolCreateXML(sp, vxml, 0);
        virDomainPtr d = virDomainCreateXML(c, xml, 0);
        while (d && !file_contains(log_path, "hatchery-test-guest: up"))
            usleep(2000);
        raw += now_s() - t0;
        if (d) {
            virDomainDestroy(d);
            virDomainFree(d);
        }
        if (v) {
            virStorageVolDelete(v, 0);
            virStorageVolFree(v);
        }
        virStoragePoolFree(sp);
        virConnectClose(c);
        free(xml);
    }
    printf("%s boot, mean of %d (TCG)\n", arch_name, rounds);
    printf("  virDomainCreateXML to the guest's first own line   %6.2f s\n", raw / rounds);
    printf("  hatchery create to the guest's first own line      %6.2f s\n", ours_up / rounds);
    printf("  hatchery create to the agent's hello               %6.2f s\n", ours / rounds);
    printf("  ratio %.3f (goal <= 1.1)\n", ours / raw);
    finish(p, pool_name);
    return 0;
}

struct built {
    bool done;
    int err;
    int64_t bytes;
};

static void on_built(void *data, int err, const char *reason, int64_t bytes)
{
    struct built *b = data;
    b->done = true;
    b->err = err;
    b->bytes = bytes;
    if (err)
        fprintf(stderr, "template: %s\n", reason);
}

/* Create (or restore) to hello, in seconds; negative when the guest failed. */
static double to_hello(struct provisioner *p, struct config_pool *pool, const char *name,
                       const char *tpl)
{
    struct run r = {0};
    struct guest *g = NULL;
    struct guest_spec gs = {.name = name, .runner_id = 1, .pool = pool};
    usleep(SETTLE_US);
    double t0 = now_s();
    int e = tpl ? provisioner_guest_restore(p, "local", &gs, tpl, &events, &r, &g)
                : provider_guest_create(provisioner_provider(p), "local", &gs, &events, &r, &g);
    if (e < 0)
        return -1;
    while (!r.hello && !r.failed)
        uv_run(&loop, UV_RUN_ONCE);
    double took = r.hello ? r.hello_at - t0 : -1;
    while (!r.gone)
        uv_run(&loop, UV_RUN_ONCE);
    return took;
}

static int template(const char *arch_name, const char *dir)
{
    struct guest_files f;
    struct config_pool pool;
    int production = bench_pool(arch_name, dir, &f, &pool);
    if (production < 0)
        return 1;
    char pool_name[64], tpl[64], name[64];
    snprintf(pool_name, sizeof(pool_name), "hatchery-bench-%d", (int)getpid());
    snprintf(tpl, sizeof(tpl), "hatchery-bench-tpl-%s", arch_name);
    struct provisioner *p = start("local", "qemu:///system", pool_name);
    struct built b = {0};
    double t0 = now_s();
    provisioner_template_build(p, "local", &pool, tpl, on_built, &b);
    while (!b.done)
        uv_run(&loop, UV_RUN_ONCE);
    double build_s = now_s() - t0;
    printf("%s warm template (TCG, %s)\n", arch_name,
           production ? "the production image: 1536 MiB, one vCPU, systemd"
                      : "the test guest: 512 MiB, one vCPU");
    if (b.err) {
        printf("  not built\n");
        provider_free(provisioner_provider(p));
        return 1;
    }
    printf("  built (boot, hello, save) in %.2f s; its file %.1f MB\n", build_s,
           (double)b.bytes / 1e6);
    /* A template ages before it serves (TEMPLATE_AGE_S): its clones' clocks jump by that. */
    const char *age_text = getenv("TEMPLATE_AGE_S");
    long age = age_text ? strtol(age_text, NULL, 10) : 0;
    if (age > 0) {
        printf("  aging the template %ld s\n", age);
        fflush(stdout);
        /* On the loop: libvirt's keepalive must go on meanwhile. */
        for (double until = now_s() + (double)age; now_s() < until;) {
            uv_run(&loop, UV_RUN_NOWAIT);
            usleep(100000);
        }
    }
    const int rounds = 3;
    double cold = 0, warm = 0;
    int warm_ok = 0;
    for (int i = 0; i < rounds; i++) {
        snprintf(name, sizeof(name), "hatchery-bench-cold-%d", i);
        double c = to_hello(p, &pool, name, NULL);
        snprintf(name, sizeof(name), "hatchery-bench-warm-%d", i);
        double w = to_hello(p, &pool, name, tpl);
        cold += c;
        if (w >= 0) {
            warm += w;
            warm_ok++;
        } else if (i == 0) {
            printf("  restore failed (see the reason above): no warm figure\n");
            break;
        }
    }
    int n = warm_ok ? warm_ok : 1;
    printf("  cold: create to hello, mean of %d          %6.2f s\n", n, cold / n);
    if (warm_ok) {
        printf("  template: restore to hello, mean of %d     %6.2f s\n", warm_ok, warm / warm_ok);
        printf("  ratio %.3f (goal <= 0.2)\n", (warm / warm_ok) / (cold / n));
    }
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/volumes/%s.save", state_dir, tpl);
    unlink(path);
    snprintf(path, sizeof(path), "%s/volumes/%s.qcow2", state_dir, tpl);
    unlink(path);
    finish(p, pool_name);
    return 0;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

/* The host file scale_bench.sh writes (its node XML), so both measure the same driver. */
static const char node_xml[] =
    "<node><cpu><nodes>1</nodes><sockets>1</sockets><cores>64</cores><threads>1</threads>"
    "<active>64</active><mhz>4000</mhz><model>host</model></cpu><memory>4294967296</memory>"
    "<pool type='dir'><name>default-pool</name><capacity unit='bytes'>1099511627776</capacity>"
    "<allocation unit='bytes'>0</allocation><available unit='bytes'>1099511627776</available>"
    "<target><path>/default-pool</path></target></pool></node>";

static int footprint(int jobs, int hosts)
{
    if (jobs < 1 || hosts < 1)
        return 2;
    char path[PATH_MAX], uri[PATH_MAX + 8], name[64], vol[80], err[256];
    snprintf(path, sizeof(path), "%s/node.xml", state_dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(node_xml, f) < 0 || fclose(f) != 0)
        return 1;
    snprintf(uri, sizeof(uri), "test://%s", path);
    long before = rss_kib();
    virConnectPtr *conns = calloc((size_t)hosts, sizeof(*conns));
    for (int h = 0; h < hosts; h++)
        if (!(conns[h] = virConnectOpen(uri)))
            return 1;
    for (int i = 0; i < jobs; i++) {
        virConnectPtr c = conns[i % hosts];
        snprintf(name, sizeof(name), "hatchery-scale-%d", i);
        snprintf(vol, sizeof(vol), "%s.qcow2", name);
        char chan[PATH_MAX], console[PATH_MAX];
        snprintf(chan, sizeof(chan), "%s/channels/%s/agent.sock", state_dir, name);
        snprintf(console, sizeof(console), "%s/consoles/%s.log", state_dir, name);
        struct domain_spec spec = {.name = name,
                                   .controller_id = "scale",
                                   .pool = "scale",
                                   .arch = ARCH_S390X,
                                   .backend = BACKEND_VM,
                                   .vcpus = 1,
                                   .memory_mib = 64,
                                   .storage_pool = "default-pool",
                                   .volume = vol,
                                   .network = "none",
                                   .runner_id = i + 1,
                                   .channel_path = chan,
                                   .console_log = console};
        virStoragePoolPtr sp = virStoragePoolLookupByName(c, "default-pool");
        char *vxml = domain_xml_overlay_volume(vol, "/default-pool/base.qcow2", 64);
        virStorageVolPtr v = sp && vxml ? virStorageVolCreateXML(sp, vxml, 0) : NULL;
        free(vxml);
        char *xml = domain_xml_build(&spec, err, sizeof(err));
        virDomainPtr d = xml ? virDomainCreateXML(c, xml, 0) : NULL;
        free(xml);
        if (!d || !v) {
            fprintf(stderr, "footprint: domain %d failed\n", i);
            return 1;
        }
        virDomainFree(d);
        virStorageVolFree(v);
        virStoragePoolFree(sp);
    }
    printf("libvirt test driver, %d running domains and volumes over %d hosts: %ld KiB\n", jobs,
           hosts, rss_kib() - before);
    for (int h = 0; h < hosts; h++)
        virConnectClose(conns[h]);
    free(conns);
    unlink(path);
    return 0;
}

int main(int argc, char **argv)
{
    /* QEMU running as another user (libvirt-qemu, on a stock host) must pass through to
     * the overlays under it. */
    if (!mkdtemp(state_dir) || chmod(state_dir, 0711) < 0)
        return 1;
    log_level_set(LOG_WARN);
    virSetErrorFunc(NULL, quiet);
    uv_loop_init(&loop);
    libvirt_loop_register(&loop);
    if (argc >= 2 && strcmp(argv[1], "overhead") == 0)
        return overhead(argc > 2 ? (int)strtol(argv[2], NULL, 10) : 300);
    if (argc >= 4 && strcmp(argv[1], "boot") == 0)
        return boot(argv[2], argv[3]);
    if (argc >= 4 && strcmp(argv[1], "template") == 0)
        return template(argv[2], argv[3]);
    if (argc >= 4 && strcmp(argv[1], "footprint") == 0)
        return footprint((int)strtol(argv[2], NULL, 10), (int)strtol(argv[3], NULL, 10));
    fprintf(stderr, "usage: provision_bench overhead [N] | boot|template ppc64le|s390x GUEST_DIR "
                    "| footprint JOBS HOSTS\n");
    return 2;
}
