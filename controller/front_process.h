/* The HTTP front's process, as front_spawn forks it: it listens, checks what arrives,
 * forwards each request to the core over the socketpair and writes back the core's
 * answers, after dropping root (when the core has it) and confining itself
 * (front_sandbox.h). What only front.c needs to start it. */
#ifndef HATCHERY_FRONT_PROCESS_H
#define HATCHERY_FRONT_PROCESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "config.h"

#define FRONT_FD 3 /* the socketpair's end, in the front */

/* Who the front becomes when the core runs as root (hatcheryd --allow-root): nobody, so
 * that not even a front that escaped its filter holds root's uid. */
struct front_user {
    bool drop;
    uid_t uid;
    gid_t gid;
};

/* The front's whole life, in the forked child: `fd` is its end of the socketpair. Its
 * first frame says whether it listens (READY, "sandboxed" or "unconfined") or why not
 * (FAILED). Never returns. */
__attribute__((noreturn)) void front_process_main(const struct config *config,
                                                  const struct front_user *user, int fd);

#endif
