/* Each host's blocking libvirt calls on threads of its own; see host_queue.h. */
#define _GNU_SOURCE /* pthread_setname_np */
#include "host_queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease.h"
#include "log.h"

struct queued_call {
    uv_work_t *w;
    uv_work_cb work;
    uv_after_work_cb done;
    struct queued_call *next;
};

struct call_list {
    struct queued_call *head, *tail;
};

struct host_queue {
    uv_mutex_t lock;
    uv_cond_t wake;        /* a call queued, or the queue closing */
    struct call_list todo; /* under lock */
    struct call_list done; /* under lock: run, waiting for the loop */
    size_t todo_len;       /* under lock */
    int threads, idle;     /* under lock */
    int refs;              /* under lock: the loop's, and one per thread */
    bool closing;          /* under lock: the threads end once `todo` is empty */
    uv_async_t async;      /* loop side: done calls are waiting */
    int pending;           /* loop side: submitted, `done` not yet called */
    bool close_asked;      /* loop side: host_queue_close came; no more submits */
    char name[64];
};

static void list_push(struct call_list *l, struct queued_call *c)
{
    c->next = NULL;
    if (l->tail)
        l->tail->next = c;
    else
        l->head = c;
    l->tail = c;
}

static struct queued_call *list_pop(struct call_list *l)
{
    struct queued_call *c = l->head;
    if (c) {
        l->head = c->next;
        if (!l->head)
            l->tail = NULL;
    }
    return c;
}

static void queue_free(struct host_queue *q)
{
    struct queued_call *c;
    while ((c = list_pop(&q->todo)))
        free(c);
    while ((c = list_pop(&q->done)))
        free(c);
    uv_cond_destroy(&q->wake);
    uv_mutex_destroy(&q->lock);
    free(q);
}

/* Under lock: one reference fewer; true when it was the last (the caller frees). */
static bool unref_locked(struct host_queue *q)
{
    return --q->refs == 0;
}

static void *host_thread(void *arg)
{
    struct host_queue *q = arg;
    char name[16];
    snprintf(name, sizeof(name), "h:%.13s", q->name);
    pthread_setname_np(pthread_self(), name);
    uv_mutex_lock(&q->lock);
    for (;;) {
        if (!q->todo.head && !q->closing) {
            q->idle++;
            int r = uv_cond_timedwait(&q->wake, &q->lock, (uint64_t)HOST_QUEUE_IDLE_MS * 1000000);
            q->idle--;
            if (r == UV_ETIMEDOUT && !q->todo.head)
                break;
            continue;
        }
        struct queued_call *c = list_pop(&q->todo);
        if (!c) /* closing, nothing left */
            break;
        q->todo_len--;
        uv_mutex_unlock(&q->lock);
        /* Only a leader whose lease is good by its own clock acts on a host (lease.h). */
        lease_fence_or_exit("libvirt");
        c->work(c->w);
        uv_mutex_lock(&q->lock);
        list_push(&q->done, c);
        uv_async_send(&q->async);
    }
    q->threads--;
    bool last = unref_locked(q);
    uv_mutex_unlock(&q->lock);
    if (last)
        queue_free(q);
    return NULL;
}

static void queue_shut(struct host_queue *q);

static void on_calls_done(uv_async_t *async)
{
    struct host_queue *q = async->data;
    uv_mutex_lock(&q->lock);
    struct call_list done = q->done;
    q->done = (struct call_list){0};
    uv_mutex_unlock(&q->lock);
    struct queued_call *c;
    while ((c = list_pop(&done))) {
        uv_work_t *w = c->w;
        uv_after_work_cb cb = c->done;
        free(c);
        if (--q->pending == 0)
            uv_unref((uv_handle_t *)&q->async);
        cb(w, 0);
    }
    if (q->close_asked && q->pending == 0)
        queue_shut(q);
}

struct host_queue *host_queue_new(uv_loop_t *loop, const char *name)
{
    struct host_queue *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    if (uv_mutex_init(&q->lock) < 0) {
        free(q);
        return NULL;
    }
    if (uv_cond_init(&q->wake) < 0) {
        uv_mutex_destroy(&q->lock);
        free(q);
        return NULL;
    }
    if (uv_async_init(loop, &q->async, on_calls_done) < 0) {
        uv_cond_destroy(&q->wake);
        uv_mutex_destroy(&q->lock);
        free(q);
        return NULL;
    }
    q->async.data = q;
    uv_unref((uv_handle_t *)&q->async); /* referenced while a call is pending */
    q->refs = 1;
    snprintf(q->name, sizeof(q->name), "%s", name);
    return q;
}

/* Under lock: a thread more, detached (it ends on its own, see host_thread). */
static int start_thread_locked(struct host_queue *q)
{
    pthread_attr_t attr;
    pthread_t thread;
    if (pthread_attr_init(&attr) != 0)
        return -EAGAIN;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int r = pthread_create(&thread, &attr, host_thread, q);
    pthread_attr_destroy(&attr);
    if (r != 0)
        return -r;
    q->threads++;
    q->refs++;
    return 0;
}

int host_queue_submit(struct host_queue *q, uv_work_t *w, uv_work_cb work, uv_after_work_cb done)
{
    struct queued_call *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    *c = (struct queued_call){.w = w, .work = work, .done = done};
    if (q->close_asked) {
        free(c);
        return -ECANCELED;
    }
    uv_mutex_lock(&q->lock);
    list_push(&q->todo, c);
    q->todo_len++;
    if (q->todo_len > (size_t)q->idle && q->threads < HOST_QUEUE_MAX_THREADS) {
        int r = start_thread_locked(q);
        if (r < 0 && q->threads == 0) {         /* nothing would ever run it */
            q->todo.head = q->todo.tail = NULL; /* it was the only call queued */
            q->todo_len = 0;
            uv_mutex_unlock(&q->lock);
            free(c);
            log_error("host.thread_failed", "host=%s error=\"%s\"", q->name, strerror(-r));
            return -EAGAIN;
        }
    }
    uv_cond_signal(&q->wake);
    uv_mutex_unlock(&q->lock);
    if (q->pending++ == 0)
        uv_ref((uv_handle_t *)&q->async);
    return 0;
}

int host_queue_pending(const struct host_queue *q)
{
    return q->pending;
}

static void on_async_closed(uv_handle_t *handle)
{
    struct host_queue *q = handle->data;
    uv_mutex_lock(&q->lock);
    bool last = unref_locked(q);
    uv_mutex_unlock(&q->lock);
    if (last)
        queue_free(q);
}

/* No call is pending: the threads end, and the last of them or the handle frees. */
static void queue_shut(struct host_queue *q)
{
    if (uv_is_closing((uv_handle_t *)&q->async))
        return;
    uv_mutex_lock(&q->lock);
    q->closing = true;
    uv_cond_broadcast(&q->wake);
    uv_mutex_unlock(&q->lock);
    uv_close((uv_handle_t *)&q->async, on_async_closed);
}

void host_queue_close(struct host_queue *q)
{
    if (!q)
        return;
    q->close_asked = true;
    if (q->pending == 0)
        queue_shut(q);
}
