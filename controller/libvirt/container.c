/* What a container in its own user namespace needs of this machine's files: its root (no one
 * on the host, uid id_base) reaches its root directory and its socket directory, and no one
 * else of it, nor anyone on the host, reaches the socket. */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/acl.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every directory above `path` (and `path` itself when `self`) must let others pass: libvirt
 * mounts the container's root directory and /run/hatchery from inside the namespace, as its
 * root. A directory that grants it by an ACL alone is refused too: it is not looked at. */
static bool others_pass(const char *path, bool self, char *why, size_t why_size)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    if (!self) {
        char *slash = strrchr(dir, '/');
        if (!slash)
            return true;
        *(slash == dir ? slash + 1 : slash) = '\0';
    }
    for (;;) {
        struct stat st;
        if (stat(dir, &st) < 0) {
            snprintf(why, why_size, "%s: %s", dir, strerror(errno));
            return false;
        }
        if (!(st.st_mode & S_IXOTH)) {
            snprintf(why, why_size,
                     "%s (mode %04o) does not let others pass, and a container's root is no "
                     "one on this machine: give it o+x (`chmod o+x %s`)",
                     dir, (unsigned)(st.st_mode & 07777), dir);
            return false;
        }
        if (strcmp(dir, "/") == 0)
            return true;
        char *slash = strrchr(dir, '/');
        *(slash == dir ? slash + 1 : slash) = '\0';
    }
}

bool container_paths_usable(const char *root_dir, const char *socket_dir, char *why,
                            size_t why_size)
{
    char oldroot[PATH_MAX];
    snprintf(oldroot, sizeof(oldroot), "%s/.oldroot", root_dir);
    struct stat st;
    if (!others_pass(root_dir, true, why, why_size))
        return false;
    /* libvirt pivots into the root through ROOT/.oldroot, which it makes as the container's
     * root: in a root directory that is root's, it cannot. */
    if (stat(oldroot, &st) < 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, why_size,
                 "the container root %s has no .oldroot directory, which libvirt needs to "
                 "enter it from a user namespace: `mkdir %s`",
                 root_dir, oldroot);
        return false;
    }
    return others_pass(socket_dir, false, why, why_size);
}

int container_socket_dir_make(const char *dir, int64_t id_base)
{
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    if (chmod(dir, 0700) < 0)
        return -errno;
    /* The container's root may pass, to reach the socket; nobody else: not its runner's user,
     * not another container's root. An ACL, which the directory's owner may set, so that
     * hatcheryd needs no CAP_CHOWN. */
    char text[128];
    snprintf(text, sizeof(text), "u::rwx,u:%lld:--x,g::---,m::--x,o::---", (long long)id_base);
    acl_t acl = acl_from_text(text);
    if (!acl)
        return -errno;
    int r = acl_set_file(dir, ACL_TYPE_ACCESS, acl) < 0 ? -errno : 0;
    acl_free(acl);
    return r;
}
