/* libFuzzer target for the config loader: the bytes are the YAML file hatcheryd reads
 * (libyaml underneath), then every check config_load makes. A config is the operator's,
 * but a bad one must be refused with a reason, never crash the daemon or a reload. A
 * config that loads is also diffed against itself and against the last one that loaded,
 * as a reload does. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

static char path[64];
static struct config *last;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_level_set(LOG_LEVEL_MAX); /* nothing: every refused input is logged otherwise */
    snprintf(path, sizeof(path), "/dev/shm/hatchery-fuzz-config-%d.yaml", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    struct config *c = NULL;
    char *errors = NULL;
    if (config_load(path, &c, &errors) < 0) {
        if (!errors || !*errors)
            abort(); /* a refusal always says why */
        free(errors);
        return 0;
    }
    free(errors);
    json_decref(config_diff(c, c));
    if (last) {
        json_decref(config_diff(last, c));
        config_free(last);
    }
    last = c;
    return 0;
}
