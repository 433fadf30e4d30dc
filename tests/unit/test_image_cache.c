/* The image cache: what the scheduler, /metrics and the admin API know of a pool's image is
 * what is on disk, found by looks in libuv's thread pool, and a manifest is read again only
 * when its file changed. Real files, a real loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "image_cache.h"

static uv_loop_t loop;
static char dir[64];
static char image[128];
static int changes;

static void on_changed(void *data)
{
    (void)data;
    changes++;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void write_manifest(const char *arch)
{
    char path[160], text[256];
    snprintf(path, sizeof(path), "%s.json", image);
    snprintf(text, sizeof(text),
             "{\"arch\": \"%s\", \"runner_version\": \"2.330.0\", \"agent_version\": \"1\"}\n",
             arch);
    write_file(path, text);
}

static struct config *load(const char *pools)
{
    char path[128], text[4096];
    snprintf(path, sizeof(path), "%s/secret", dir);
    write_file(path, "s3cret\n");
    chmod(path, 0600);
    snprintf(path, sizeof(path), "%s/hatchery.yaml", dir);
    snprintf(
        text, sizeof(text),
        "controller_id: t\n"
        "state_dir: %s\n"
        "admin_socket: %s/admin.sock\n"
        "webhook_secret_file: %s/secret\n"
        "hosts:\n"
        "  - {name: here, uri: \"test:///default\", vcpus: 8, memory_mib: 8192, max_guests: 4}\n"
        "  - {name: far, uri: \"qemu+ssh://far.example/system\", vcpus: 8, "
        "memory_mib: 8192, max_guests: 4, guest_isolation: unchecked}\n"
        "pools:\n%s",
        dir, dir, dir, pools);
    write_file(path, text);
    struct config *c = NULL;
    char *errors = NULL;
    if (config_load(path, &c, &errors) < 0)
        fail_msg("config: %s", errors);
    return c;
}

static const struct image_manifest *manifest(struct image_cache *ic, enum pool_arch arch, char *err,
                                             size_t err_size)
{
    const struct image_cache_entry *e = image_cache_get(ic, image);
    assert_non_null(e);
    return image_cache_entry_manifest(e, arch, err, err_size);
}

/* Runs the loop until `n` changes were reported, or fails after 10 s. */
static void wait_changes(int n)
{
    for (int i = 0; i < 1000 && changes < n; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(10000);
    }
    assert_int_equal(changes, n);
}

/* Lets the last look age past IMAGE_CACHE_REFRESH_MS, the loop turning meanwhile. */
static void age(void)
{
    for (int i = 0; i < (IMAGE_CACHE_REFRESH_MS + 200) / 10; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(10000);
    }
}

static void test_follows_what_is_on_disk(void **state)
{
    (void)state;
    char pools[1024];
    snprintf(pools, sizeof(pools),
             "  - {name: p, labels: [p], arch: ppc64le, image: %s, hosts: [here], max_runners: 1}\n"
             "  - {name: twin, labels: [twin], arch: ppc64le, image: %s, hosts: [here], "
             "max_runners: 1}\n"
             "  - {name: r, labels: [r], arch: ppc64le, image: /srv/far.qcow2, hosts: [far], "
             "max_runners: 1}\n"
             "  - {name: q, labels: [q], arch: s390x, image: %s/other.qcow2, hosts: [here], "
             "max_runners: 1}\n",
             image, image, dir);
    struct config *c = load(pools);
    struct image_cache *ic = NULL;
    assert_int_equal(image_cache_new(&loop, on_changed, NULL, &ic), 0);
    assert_int_equal(image_cache_follow(ic, c), 0);
    /* Two images, one of them named by two pools, read once each; a remote host's pool is
     * not ours. */
    assert_int_equal(image_cache_reads(ic), 2);
    assert_null(image_cache_get(ic, "/srv/far.qcow2"));

    const struct image_cache_entry *e = image_cache_get(ic, image);
    assert_non_null(e);
    assert_int_equal(e->image_errno, ENOENT);
    assert_int_equal(e->manifest_rc, -ENOENT);
    assert_non_null(strstr(e->err, "missing"));
    /* That get started a look: let it come back before the files change, or it may see
     * them half written (a slow machine did) and count a read of its own. */
    age();
    assert_int_equal(changes, 0);

    /* The image is built: the next look finds it and says so. */
    write_file(image, "qcow2");
    write_manifest("ppc64le");
    age();
    assert_non_null(image_cache_get(ic, image));
    wait_changes(1);
    e = image_cache_get(ic, image);
    assert_int_equal(e->image_errno, 0);
    assert_int_equal(e->manifest_rc, 0);
    assert_string_equal(e->manifest.arch, "ppc64le");
    char err[512];
    assert_non_null(manifest(ic, ARCH_PPC64LE, err, sizeof(err)));
    assert_null(manifest(ic, ARCH_S390X, err, sizeof(err)));
    assert_string_equal(err, "image is built for ppc64le, the pool is s390x");
    assert_int_equal(image_cache_reads(ic), 3);

    /* Nothing changed: looks go on, the manifest is not read again. */
    age();
    image_cache_get(ic, image);
    age();
    assert_int_equal(image_cache_reads(ic), 3);
    assert_int_equal(changes, 1);

    /* Rebuilt for another arch: seen without a restart. */
    write_manifest("s390x");
    image_cache_get(ic, image);
    wait_changes(2);
    assert_null(manifest(ic, ARCH_PPC64LE, err, sizeof(err)));
    assert_string_equal(err, "image is built for s390x, the pool is ppc64le");

    /* Acted on after a pause: a check waits for a look that started after it, so that a
     * change made just before it is seen, not what the last look found. */
    age();
    age();
    write_manifest("ppc64le");
    bool pending = false;
    assert_null(image_cache_check(ic, image, &pending));
    assert_true(pending);
    wait_changes(3);
    e = image_cache_check(ic, image, &pending);
    assert_false(pending);
    assert_non_null(e);
    assert_string_equal(e->manifest.arch, "ppc64le");
    /* While asked for, what is known serves: no wait on each check. */
    assert_non_null(image_cache_check(ic, image, &pending));
    assert_false(pending);
    assert_null(image_cache_check(ic, "/not/followed.qcow2", &pending));
    assert_false(pending);

    /* A reload that keeps the pools keeps what is known, without a read. */
    uint64_t reads = image_cache_reads(ic);
    assert_int_equal(image_cache_follow(ic, c), 0);
    assert_int_equal(image_cache_reads(ic), reads);
    assert_non_null(manifest(ic, ARCH_PPC64LE, err, sizeof(err)));

    /* A reload without the pools: the image is no longer followed. */
    config_free(c);
    c = load("  - {name: r, labels: [r], arch: ppc64le, image: /srv/far.qcow2, hosts: [far], "
             "max_runners: 1}\n");
    assert_int_equal(image_cache_follow(ic, c), 0);
    assert_null(image_cache_get(ic, image));
    config_free(c);
    image_cache_free(ic);
}

/* Freed while a look is in the thread pool: the look's end frees it (ASan sees a leak or a
 * use after free otherwise). */
static void test_freed_while_looking(void **state)
{
    (void)state;
    char pools[512];
    snprintf(
        pools, sizeof(pools),
        "  - {name: p, labels: [p], arch: ppc64le, image: %s, hosts: [here], max_runners: 1}\n",
        image);
    write_manifest("ppc64le");
    struct config *c = load(pools);
    struct image_cache *ic = NULL;
    assert_int_equal(image_cache_new(&loop, on_changed, NULL, &ic), 0);
    assert_int_equal(image_cache_follow(ic, c), 0);
    image_cache_get(ic, image); /* the first get starts a look */
    image_cache_free(ic);
    int before = changes;
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(changes, before);
    config_free(c);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/hatchery-image-cache-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    snprintf(image, sizeof(image), "%s/base.qcow2", dir);
    uv_loop_init(&loop);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_follows_what_is_on_disk),
        cmocka_unit_test(test_freed_while_looking),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    uv_loop_close(&loop);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf -- '%s'", dir);
    if (system(cmd) != 0)
        failed++;
    return failed;
}
