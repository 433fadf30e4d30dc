/* Scope-bound cleanup (docs/STYLE.md, after libvirt's g_autofree and systemd's _cleanup_):
 * a variable declared with one of these is released when it goes out of scope, on every
 * return, so that a function with several exits frees the same things on each. Every
 * releaser takes what was never set (NULL, -1). */
#ifndef HATCHERY_CLEANUP_H
#define HATCHERY_CLEANUP_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void cleanup_free(void *p)
{
    free(*(void **)p);
}

static inline void cleanup_json(json_t **j)
{
    json_decref(*j);
}

static inline void cleanup_fclose(FILE **f)
{
    if (*f)
        fclose(*f);
}

static inline void cleanup_close(int *fd)
{
    if (*fd >= 0)
        close(*fd);
}

#define auto_free   __attribute__((cleanup(cleanup_free)))
#define auto_json   __attribute__((cleanup(cleanup_json)))
#define auto_fclose __attribute__((cleanup(cleanup_fclose)))
#define auto_close  __attribute__((cleanup(cleanup_close)))

#endif
