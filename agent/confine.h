/* The runner's confinement in a container: no new namespaces, no new privileges.
 *
 * A container's runner keeps its container's bounding set (chown, dac_read_search, kill,
 * setgid, setuid), and a user namespace of its own would give it every capability inside
 * it: enough to mount file systems and create network devices, the surface of most
 * container-escape kernel bugs. So before the runner is exec'd in a container, the agent
 * sets no_new_privs (setuid and file-capability binaries give nothing more) and a seccomp
 * filter that refuses new namespaces:
 *   - unshare with any CLONE_NEW* flag, and setns: EPERM;
 *   - clone with any CLONE_NEW* flag: EPERM (the flags are clone's first argument, its
 *     second on s390x);
 *   - clone3: ENOSYS, because a filter cannot read its flags (they are in memory); libc
 *     then falls back to clone, which the filter reads;
 *   - any system call of another ABI (x86_64's x32 and i386 ones, s390x's 31-bit ones):
 *     EPERM, or they would pass around the filter.
 * Every other call is allowed: the runner's own threads and processes are made by clone
 * without namespace flags.
 *
 * Not in a VM: a VM guest is the job's alone and is destroyed after it, and rootless
 * podman (the production image's docker) needs user namespaces and the setuid
 * newuidmap, which these would refuse.
 *
 * Called in the runner's child between fork and exec: async-signal-safe. */
#ifndef HATCHERY_AGENT_CONFINE_H
#define HATCHERY_AGENT_CONFINE_H

/* no_new_privs, then the filter: 0, or -errno (the caller does not start the runner). */
int confine_no_new_namespaces(void);

#endif
