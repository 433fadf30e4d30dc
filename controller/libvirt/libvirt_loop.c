/* libvirt's event loop on libuv; see libvirt_loop.h. */
#include "libvirt_loop.h"

#include <errno.h>
#include <libvirt/libvirt.h>
#include <stdbool.h>
#include <stdlib.h>

struct watch {
    int id;
    bool is_timer;
    /* desired state, written under the lock by any thread */
    int fd;
    int events;  /* handles: VIR_EVENT_HANDLE_* */
    int timeout; /* timers: -1 off, 0 every iteration, >0 period in ms */
    bool removed;
    bool dirty;
    /* applied state, loop thread only */
    bool handle_open;
    int applied_events;
    int applied_timeout;
    union {
        uv_poll_t poll;
        uv_timer_t timer;
    } h;
    virEventHandleCallback handle_cb;
    virEventTimeoutCallback timeout_cb;
    void *opaque;
    virFreeCallback ff;
    struct watch *next;
};

static uv_loop_t *loop;
static uv_mutex_t lock;
static uv_async_t wake;
static uv_thread_t loop_thread;
static struct watch *watches;
static int next_id = 1;

static bool on_loop_thread(void)
{
    uv_thread_t self = uv_thread_self();
    return uv_thread_equal(&self, &loop_thread);
}

static struct watch *find(int id, bool is_timer)
{
    for (struct watch *w = watches; w; w = w->next)
        if (w->id == id && w->is_timer == is_timer && !w->removed)
            return w;
    return NULL;
}

static void on_watch_closed(uv_handle_t *handle)
{
    struct watch *w = handle->data;
    if (w->ff)
        w->ff(w->opaque);
    free(w);
}

static void on_poll(uv_poll_t *poll, int status, int events)
{
    struct watch *w = poll->data;
    int vir = 0;
    if (status < 0)
        vir |= VIR_EVENT_HANDLE_ERROR;
    if (events & UV_READABLE)
        vir |= VIR_EVENT_HANDLE_READABLE;
    if (events & UV_WRITABLE)
        vir |= VIR_EVENT_HANDLE_WRITABLE;
    if (events & UV_DISCONNECT)
        vir |= VIR_EVENT_HANDLE_HANGUP;
    uv_mutex_lock(&lock);
    bool live = !w->removed;
    virEventHandleCallback cb = w->handle_cb;
    int id = w->id, fd = w->fd;
    void *opaque = w->opaque;
    uv_mutex_unlock(&lock);
    if (live)
        cb(id, fd, vir, opaque);
}

static void on_timer(uv_timer_t *timer)
{
    struct watch *w = timer->data;
    uv_mutex_lock(&lock);
    bool live = !w->removed && w->timeout >= 0;
    virEventTimeoutCallback cb = w->timeout_cb;
    int id = w->id;
    void *opaque = w->opaque;
    bool again = live && w->timeout == 0 && w->applied_timeout == 0;
    uv_mutex_unlock(&lock);
    /* A zero timeout fires on every loop iteration until it is changed. */
    if (again)
        uv_timer_start(timer, on_timer, 0, 0);
    if (live)
        cb(id, opaque);
}

/* Brings the libuv handles in line with what libvirt asked for. Loop thread only.
 * Removals go first: libvirt may drop a watch and add another on the same fd, and libuv's
 * epoll backend must see the old one gone before the new one starts. */
static void apply(void)
{
    uv_mutex_lock(&lock);
    struct watch **pp = &watches;
    while (*pp) {
        struct watch *w = *pp;
        if (!(w->dirty && w->removed)) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        if (w->handle_open) {
            uv_close((uv_handle_t *)&w->h, on_watch_closed);
        } else {
            /* ff may call back into libvirt: not under our lock. */
            uv_mutex_unlock(&lock);
            if (w->ff)
                w->ff(w->opaque);
            free(w);
            uv_mutex_lock(&lock);
            pp = &watches;
        }
    }
    for (struct watch *w = watches; w; w = w->next) {
        if (!w->dirty)
            continue;
        w->dirty = false;
        if (!w->is_timer) {
            if (!w->handle_open) {
                if (uv_poll_init(loop, &w->h.poll, w->fd) < 0)
                    continue;
                w->h.poll.data = w;
                w->handle_open = true;
            }
            int ev = 0;
            if (w->events & VIR_EVENT_HANDLE_READABLE)
                ev |= UV_READABLE | UV_DISCONNECT;
            if (w->events & VIR_EVENT_HANDLE_WRITABLE)
                ev |= UV_WRITABLE;
            if (ev)
                uv_poll_start(&w->h.poll, ev, on_poll);
            else
                uv_poll_stop(&w->h.poll);
            w->applied_events = w->events;
        } else {
            if (!w->handle_open) {
                uv_timer_init(loop, &w->h.timer);
                w->h.timer.data = w;
                w->handle_open = true;
            }
            if (w->timeout < 0)
                uv_timer_stop(&w->h.timer);
            else
                uv_timer_start(&w->h.timer, on_timer, (uint64_t)w->timeout,
                               w->timeout > 0 ? (uint64_t)w->timeout : 0);
            w->applied_timeout = w->timeout;
        }
    }
    uv_mutex_unlock(&lock);
}

static void on_wake(uv_async_t *async)
{
    (void)async;
    apply();
}

/* After a change: apply now on the loop thread, or wake the loop. */
static void changed(void)
{
    if (on_loop_thread())
        apply();
    else
        uv_async_send(&wake);
}

static struct watch *watch_new(bool is_timer, void *opaque, virFreeCallback ff)
{
    struct watch *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->is_timer = is_timer;
    w->opaque = opaque;
    w->ff = ff;
    w->dirty = true;
    uv_mutex_lock(&lock);
    w->id = next_id++;
    w->next = watches;
    watches = w;
    uv_mutex_unlock(&lock);
    return w;
}

static int add_handle(int fd, int events, virEventHandleCallback cb, void *opaque,
                      virFreeCallback ff)
{
    struct watch *w = watch_new(false, opaque, ff);
    if (!w)
        return -1;
    uv_mutex_lock(&lock);
    w->fd = fd;
    w->events = events;
    w->handle_cb = cb;
    int id = w->id;
    uv_mutex_unlock(&lock);
    changed();
    return id;
}

static void update_handle(int id, int events)
{
    uv_mutex_lock(&lock);
    struct watch *w = find(id, false);
    if (w) {
        w->events = events;
        w->dirty = true;
    }
    uv_mutex_unlock(&lock);
    if (w)
        changed();
}

static int remove_watch(int id, bool is_timer)
{
    uv_mutex_lock(&lock);
    struct watch *w = find(id, is_timer);
    if (w) {
        w->removed = true;
        w->dirty = true;
    }
    uv_mutex_unlock(&lock);
    if (!w)
        return -1;
    changed();
    return 0;
}

static int remove_handle(int id)
{
    return remove_watch(id, false);
}

static int add_timeout(int timeout, virEventTimeoutCallback cb, void *opaque, virFreeCallback ff)
{
    struct watch *w = watch_new(true, opaque, ff);
    if (!w)
        return -1;
    uv_mutex_lock(&lock);
    w->timeout = timeout;
    w->applied_timeout = -2;
    w->timeout_cb = cb;
    int id = w->id;
    uv_mutex_unlock(&lock);
    changed();
    return id;
}

static void update_timeout(int id, int timeout)
{
    uv_mutex_lock(&lock);
    struct watch *w = find(id, true);
    if (w) {
        w->timeout = timeout;
        w->dirty = true;
    }
    uv_mutex_unlock(&lock);
    if (w)
        changed();
}

static int remove_timeout(int id)
{
    return remove_watch(id, true);
}

int libvirt_loop_register(uv_loop_t *l)
{
    if (loop)
        return -EALREADY;
    loop = l;
    loop_thread = uv_thread_self();
    if (uv_mutex_init(&lock) < 0 || uv_async_init(loop, &wake, on_wake) < 0)
        return -ENOMEM;
    /* The async handle alone must not keep the loop running. */
    uv_unref((uv_handle_t *)&wake);
    virEventRegisterImpl(add_handle, update_handle, remove_handle, add_timeout, update_timeout,
                         remove_timeout);
    return 0;
}

void libvirt_loop_close(void)
{
    if (!loop)
        return;
    apply();
    uv_mutex_lock(&lock);
    for (struct watch *w = watches; w; w = w->next)
        if (w->handle_open)
            uv_unref((uv_handle_t *)&w->h);
    uv_mutex_unlock(&lock);
    uv_close((uv_handle_t *)&wake, NULL);
}
