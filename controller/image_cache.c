/* Each pool's image on this machine as last seen: see image_cache.h. */
#include "image_cache.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wall_clock.h"

/* What says a manifest file changed: a rewrite in place changes mtime or size, a rename over
 * it the inode, a chmod the ctime; `err` when there is no file to stat. */
struct stamp {
    int err;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
};

struct followed {
    char *image;
    struct stamp stamp;
    struct image_cache_entry entry;
    int64_t asked_ms;        /* the last image_cache_check() */
    int64_t needed_since_ms; /* a check waits for a look started at or after this */
};

/* One look at the files, in the thread pool: its own copies of the names and stamps, so
 * that a reload on the loop meanwhile changes nothing it reads. */
struct look_item {
    char *image;
    struct stamp before, after;
    bool read; /* the manifest changed and was read into `entry` */
    int image_errno;
    struct image_cache_entry entry;
};

struct look {
    uv_work_t work;
    struct image_cache *cache;
    int64_t started_ms;
    size_t n;
    struct look_item items[];
};

struct image_cache {
    uv_loop_t *loop;
    image_cache_changed_cb changed;
    void *data;
    struct followed *items;
    size_t n;
    int64_t looked_at_ms; /* the last look's start */
    int64_t seen_ms;      /* the start of the last look that came back */
    bool looking;
    bool waited_for; /* a check waits for the look under way: say when it is back */
    bool freed;      /* image_cache_free() while looking: the look's end frees */
    uint64_t reads;
};

static bool stamp_equal(const struct stamp *a, const struct stamp *b)
{
    return a->err == b->err && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

static struct stamp stamp_of(const char *image)
{
    char path[PATH_MAX];
    struct stat st;
    struct stamp s = {0};
    if ((size_t)snprintf(path, sizeof(path), "%s.json", image) >= sizeof(path))
        s.err = ENAMETOOLONG;
    else if (stat(path, &st) < 0)
        s.err = errno;
    else
        s = (struct stamp){0, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
    return s;
}

static int image_errno_of(const char *image)
{
    return access(image, R_OK) == 0 ? 0 : errno;
}

/* Blocking: the thread pool's, or the caller's at follow time. */
static void read_manifest(const char *image, struct image_cache_entry *ret)
{
    ret->manifest_rc = image_manifest_read(image, &ret->manifest, ret->err, sizeof(ret->err));
    if (ret->manifest_rc == 0)
        ret->err[0] = 0;
}

static struct followed *find(struct image_cache *ic, const char *image)
{
    for (size_t i = 0; i < ic->n; i++)
        if (ic->items[i].image && strcmp(ic->items[i].image, image) == 0) /* NULL: moved */
            return &ic->items[i];
    return NULL;
}

static void look_free(struct look *l)
{
    for (size_t i = 0; l && i < l->n; i++)
        free(l->items[i].image);
    free(l);
}

static void cache_free_now(struct image_cache *ic)
{
    for (size_t i = 0; i < ic->n; i++)
        free(ic->items[i].image);
    free(ic->items);
    free(ic);
}

static void look_work(uv_work_t *w)
{
    struct look *l = w->data;
    for (size_t i = 0; i < l->n; i++) {
        struct look_item *it = &l->items[i];
        it->image_errno = image_errno_of(it->image);
        it->after = stamp_of(it->image);
        if (!stamp_equal(&it->before, &it->after)) {
            read_manifest(it->image, &it->entry);
            it->read = true;
        }
    }
}

static void look_done(uv_work_t *w, int status)
{
    struct look *l = w->data;
    struct image_cache *ic = l->cache;
    ic->looking = false;
    if (ic->freed) {
        cache_free_now(ic);
        look_free(l);
        return;
    }
    bool changed = false;
    if (status == 0)
        ic->seen_ms = l->started_ms;
    for (size_t i = 0; status == 0 && i < l->n; i++) {
        struct look_item *it = &l->items[i];
        struct followed *f = find(ic, it->image);
        if (!f)
            continue; /* dropped by a reload meanwhile */
        changed = changed || f->entry.image_errno != it->image_errno || it->read;
        f->entry.image_errno = it->image_errno;
        if (it->read) {
            ic->reads++;
            f->stamp = it->after;
            it->entry.image_errno = it->image_errno;
            f->entry = it->entry;
        }
    }
    look_free(l);
    bool say = changed || ic->waited_for;
    ic->waited_for = false;
    if (say && ic->changed)
        ic->changed(ic->data);
}

static void look_start(struct image_cache *ic)
{
    struct look *l = calloc(1, sizeof(*l) + ic->n * sizeof(l->items[0]));
    if (!l)
        return;
    l->cache = ic;
    l->work.data = l;
    l->started_ms = wall_clock_ms();
    for (size_t i = 0; i < ic->n; i++, l->n++) {
        l->items[i].image = strdup(ic->items[i].image);
        l->items[i].before = ic->items[i].stamp;
        if (!l->items[i].image) {
            look_free(l);
            return;
        }
    }
    if (uv_queue_work(ic->loop, &l->work, look_work, look_done) < 0) {
        look_free(l);
        return;
    }
    ic->looking = true;
    ic->looked_at_ms = l->started_ms;
}

int image_cache_new(uv_loop_t *loop, image_cache_changed_cb changed, void *data,
                    struct image_cache **ret)
{
    struct image_cache *ic = calloc(1, sizeof(*ic));
    if (!ic)
        return -ENOMEM;
    *ic = (struct image_cache){.loop = loop, .changed = changed, .data = data};
    *ret = ic;
    return 0;
}

/* Whether this machine holds `p`'s image: a pool of remote hosts only has it looked for
 * there (host_image.h). */
static bool followed_pool(const struct config *c, const struct config_pool *p)
{
    return !config_pool_remote_only(c, p);
}

int image_cache_follow(struct image_cache *ic, const struct config *c)
{
    struct followed *items = calloc(c->n_pools + 1, sizeof(*items));
    if (!items)
        return -ENOMEM;
    size_t n = 0;
    int r = 0;
    for (size_t i = 0; r == 0 && i < c->n_pools; i++) {
        const struct config_pool *p = &c->pools[i];
        bool twice = false;
        for (size_t k = 0; k < n && !twice; k++)
            twice = strcmp(items[k].image, p->image) == 0;
        if (!followed_pool(c, p) || twice)
            continue;
        struct followed *old = find(ic, p->image);
        if (old) {
            items[n] = *old;
            old->image = NULL; /* moved */
        } else {
            items[n].image = strdup(p->image);
            if (!items[n].image) {
                r = -ENOMEM;
                break;
            }
            items[n].stamp = stamp_of(p->image);
            read_manifest(p->image, &items[n].entry);
            items[n].entry.image_errno = image_errno_of(p->image);
            ic->reads++;
        }
        n++;
    }
    for (size_t i = 0; i < ic->n; i++)
        free(ic->items[i].image);
    free(ic->items);
    ic->items = items;
    ic->n = n;
    return r;
}

const struct image_cache_entry *image_cache_get(struct image_cache *ic, const char *image)
{
    struct followed *f = find(ic, image);
    if (f && !ic->looking && wall_clock_ms() - ic->looked_at_ms >= IMAGE_CACHE_REFRESH_MS)
        look_start(ic);
    return f ? &f->entry : NULL;
}

const struct image_cache_entry *image_cache_check(struct image_cache *ic, const char *image,
                                                  bool *ret_pending)
{
    struct followed *f = find(ic, image);
    *ret_pending = false;
    if (!f)
        return NULL;
    int64_t now = wall_clock_ms();
    /* Asked again after a pause: demand that is new, so the files are looked at anew. */
    if (now - f->asked_ms > 2 * IMAGE_CACHE_REFRESH_MS && f->needed_since_ms <= f->asked_ms)
        f->needed_since_ms = now;
    f->asked_ms = now;
    if (ic->seen_ms >= f->needed_since_ms) {
        image_cache_get(ic, image); /* and keep looking once a second while asked */
        return &f->entry;
    }
    if (!ic->looking)
        look_start(ic);
    ic->waited_for = true;
    *ret_pending = true;
    return NULL;
}

const struct image_manifest *image_cache_entry_manifest(const struct image_cache_entry *e,
                                                        enum pool_arch arch, char *err,
                                                        size_t err_size)
{
    if (e->manifest_rc < 0) {
        snprintf(err, err_size, "%s", e->err);
        return NULL;
    }
    return image_manifest_check(&e->manifest, arch, err, err_size) == 0 ? &e->manifest : NULL;
}

uint64_t image_cache_reads(const struct image_cache *ic)
{
    return ic->reads;
}

void image_cache_free(struct image_cache *ic)
{
    if (!ic)
        return;
    if (ic->looking)
        ic->freed = true;
    else
        cache_free_now(ic);
}
