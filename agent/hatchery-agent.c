/* hatchery-agent: runs inside each guest. It opens the agent channel (the virtio-serial
 * port named org.hatchery.agent.0, or the controller's unix socket in a container), waits
 * for the kernel's CRNG, says hello, takes one config, starts the runner with the JIT
 * config, reports started, heartbeats and the exit, and then powers the guest off (VM) or
 * exits (container) once the controller has acknowledged the exit.
 *
 * The guest outlives a restart of hatcheryd (protocol version 2): while the host side of
 * the channel is closed the agent sends nothing and carries on (a container's agent
 * reconnects to the socket); a new controller sends `resume`, and the agent answers with
 * its state, and with its exit again if the runner ended meanwhile.
 *
 * The runner's contract (actions/runner, src/Misc/layoutroot/run-helper.sh.template and
 * Runner.Common/Constants.cs ReturnCode) is kept here, because run.sh hides the
 * Listener's return code (it exits 0 for every code but 2):
 *   - the runner never runs as root: with --user NAME the agent drops to that user
 *     (supplementary groups from /etc/group, then setgid and setuid) before exec, with a
 *     clean environment and HOME;
 *   - the JIT config travels in the environment as ACTIONS_RUNNER_INPUT_JITCONFIG, which the
 *     Listener reads like `--jitconfig`, and never on an argv;
 *   - return codes 2 (retryable), 3 and 4 (updating) re-launch the Listener after 5 s as
 *     run-helper.sh does, at most RELAUNCH_MAX times; 0, 1, 5 and the rest end the job,
 *     and the exit report carries the code's meaning.
 *
 * In a container the runner also gets no_new_privs and a seccomp filter that refuses new
 * namespaces (confine.h); in a VM it does not (rootless podman needs them there).
 *
 * Small and static on purpose: POSIX, poll(), and jansson for the JSON. No libcurl: it
 * talks only to the channel. It never prints the JIT config. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/random.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "confine.h"
#include "hatchery/agent_protocol.h"
#include "hatchery/hex.h"
#include "hatchery/version.h"

#define PORT_WAIT_S        60 /* modules may load after the agent starts */
#define KILL_GRACE_S       10
#define SHUTDOWN_LINGER_MS 500
#define CRNG_WAIT_S        120 /* virtio-rng seeds it at once; jitter entropy within seconds */
#define RELAUNCH_MAX       3   /* Listener re-launches after return codes 2, 3 and 4 */
#define RELAUNCH_DELAY_S   5   /* as run-helper.sh */
#define REPORT_MAX_BYTES   AGENT_MAX_REPORT_BYTES
#define MAX_GROUPS         64
/* The runner's clean environment; the JIT config and the report path are added to it. */
#define RUNNER_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

static int channel = -1;
static const char *channel_socket; /* a container: the controller's socket, to reconnect to */
static bool confine_runner;        /* a container: the runner makes no namespace (confine.h) */
static int sigchld_pipe[2] = {-1, -1};
/* The controller's protocol version, from its last message (config or resume). */
static int controller_version = AGENT_PROTOCOL_MIN_VERSION;
static bool power_off = true;
static const char *state_dir = "/run/hatchery-agent";
static const char *report_dir; /* where the job's report goes, or NULL */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("hatchery-agent: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Whether a controller listens on the channel now. A virtio-serial port reports POLLHUP
 * while its host side is closed (hatcheryd not connected, or restarting); writing then
 * would block until it comes back. */
static bool host_connected(void)
{
    if (channel < 0)
        return false;
    struct pollfd p = {.fd = channel, .events = POLLOUT};
    if (poll(&p, 1, 0) < 0)
        return false;
    return !(p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

/* Writes one line while a controller listens, waiting at most 5 s for room. A line is at
 * most AGENT_MAX_LINE_BYTES, below virtio-serial's 32 KiB per write, so it leaves whole
 * or not at all. -EAGAIN when nobody listens: the state is told again on `resume`. */
static int write_line(const char *buf, size_t len)
{
    double give_up = now_s() + 5;
    while (len > 0) {
        if (!host_connected())
            return -EAGAIN;
        ssize_t n = write(channel, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            if (now_s() > give_up)
                return -EAGAIN;
            struct pollfd p = {.fd = channel, .events = POLLOUT};
            poll(&p, 1, 100);
            continue;
        }
        if (n <= 0)
            return -errno;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Sends `msg` (and frees it) in the controller's version. */
static int send_msg(json_t *msg)
{
    json_object_set_new(msg, "v", json_integer(controller_version));
    size_t len = 0;
    char *line = agent_msg_encode(msg, &len);
    json_decref(msg);
    if (!line)
        return -ENOMEM;
    int r = write_line(line, len);
    free(line);
    return r;
}

/* The /dev node of the virtio-serial port called `name`, found by its sysfs name. */
static int find_port(const char *name, char *out, size_t size)
{
    DIR *d = opendir("/sys/class/virtio-ports");
    if (!d)
        return -ENOENT;
    struct dirent *e;
    int r = -ENOENT;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[512], value[128] = "";
        snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(value, sizeof(value), f))
            value[strcspn(value, "\n")] = 0;
        fclose(f);
        if (strcmp(value, name) == 0) {
            snprintf(out, size, "/dev/%s", e->d_name);
            r = 0;
            break;
        }
    }
    closedir(d);
    return r;
}

static int socket_connect(const char *socket_path, int tries)
{
    for (int i = 0; i < tries; i++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket_path);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0)
            return fd;
        if (fd >= 0)
            close(fd);
        if (i + 1 < tries)
            usleep(100000);
    }
    return -1;
}

static int open_channel(const char *port, const char *socket_path)
{
    if (socket_path) {
        int fd = socket_connect(socket_path, PORT_WAIT_S * 10);
        if (fd < 0)
            say("cannot connect to %s: %s", socket_path, strerror(errno));
        return fd;
    }
    char path[300];
    if (port) {
        snprintf(path, sizeof(path), "%s", port);
    } else {
        int i = 0;
        while (find_port(AGENT_CHANNEL_NAME, path, sizeof(path)) < 0) {
            if (++i > PORT_WAIT_S * 10) {
                say("no virtio-serial port named %s", AGENT_CHANNEL_NAME);
                return -1;
            }
            usleep(100000);
        }
    }
    /* Kept open for the agent's whole life: data written to a closed port is lost. */
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        say("cannot open %s: %s", path, strerror(errno));
    return fd;
}

/* The controller went away. A VM's port stays open (its host side comes back); a
 * container's socket is closed and tried again once a second by the loop. */
static void channel_lost(void)
{
    if (!channel_socket)
        return;
    if (channel >= 0) {
        close(channel);
        channel = -1;
        say("the controller hung up: waiting for it to come back");
    }
}

static void channel_retry(void)
{
    if (channel_socket && channel < 0) {
        channel = socket_connect(channel_socket, 1);
        if (channel >= 0)
            say("reconnected to the controller");
    }
}

static void on_sigchld(int sig);
static volatile sig_atomic_t terminate;

/* In a container the agent is PID 1, which ignores SIGTERM unless it handles it: handle it,
 * so that a destroy does not wait out libvirt's grace period. */
static void on_sigterm(int sig)
{
    (void)sig;
    terminate = 1;
    on_sigchld(SIGCHLD); /* wake the poll */
}

static void on_sigchld(int sig)
{
    (void)sig;
    int saved = errno;
    if (write(sigchld_pipe[1], "c", 1) < 0) {
        /* the pipe is full: a wakeup is already pending */
    }
    errno = saved;
}

static void read_line_file(const char *path, char *out, size_t size)
{
    FILE *f = fopen(path, "r");
    snprintf(out, size, "unknown");
    if (f) {
        if (fgets(out, (int)size, f))
            out[strcspn(out, "\n")] = 0;
        fclose(f);
    }
}

/* Blocks until the kernel's CRNG is initialised, so that nothing the runner or its job
 * makes (keys, nonces, podman's ids) comes from a predictable pool. Returns the seconds
 * waited, or -1 when it was not ready within CRNG_WAIT_S. */
static double wait_for_crng(void)
{
    double start = now_s();
    unsigned char b[16];
    while (getrandom(b, sizeof(b), GRND_NONBLOCK) < 0) {
        if (errno != EAGAIN && errno != EINTR)
            return 0; /* no getrandom: an old kernel, nothing to wait for */
        if (now_s() - start > CRNG_WAIT_S)
            return -1;
        usleep(100000);
    }
    explicit_bzero(b, sizeof(b));
    return now_s() - start;
}

/* The Listener's return codes (actions/runner Runner.Common/Constants.cs, ReturnCode) and
 * what run-helper.sh does with them. */
static const char *listener_code_meaning(int code)
{
    switch (code) {
    case 0:
        return "success: the runner took its job and ended";
    case 1:
        return "terminated error: the runner stopped on an error that a retry does not fix";
    case 2:
        return "retryable error: the runner asked to be re-launched";
    case 3:
        return "runner updating: the runner replaced itself and asked to be re-launched";
    case 4:
        return "run-once runner updating: the ephemeral runner updated and asked to be "
               "re-launched";
    case 5:
        return "session conflict: another listener holds this runner's session";
    case 6:
        return "runner configuration refreshed: the runner asked to be restarted";
    case 127:
        return "the runner could not be started (not found or not executable)";
    default:
        return "unknown return code";
    }
}

static bool listener_code_relaunches(int code)
{
    return code == 2 || code == 3 || code == 4;
}

/* The account the runner runs as, read from /etc/passwd and /etc/group directly: the
 * agent is static, and glibc's getpwnam/initgroups need NSS modules a static binary
 * cannot load. */
struct runner_user {
    uid_t uid;
    gid_t gid;
    gid_t groups[MAX_GROUPS];
    int n_groups;
    char name[64];
    char home[256];
    char shell[128];
};

static int runner_user_lookup(const char *name, struct runner_user *ret_user)
{
    struct runner_user u = {.n_groups = 0};
    FILE *f = fopen("/etc/passwd", "re");
    if (!f)
        return -errno;
    struct passwd *pw;
    bool found = false;
    while ((pw = fgetpwent(f))) {
        if (strcmp(pw->pw_name, name) == 0) {
            u.uid = pw->pw_uid;
            u.gid = pw->pw_gid;
            snprintf(u.name, sizeof(u.name), "%s", pw->pw_name);
            snprintf(u.home, sizeof(u.home), "%s", pw->pw_dir);
            snprintf(u.shell, sizeof(u.shell), "%s", pw->pw_shell);
            found = true;
            break;
        }
    }
    fclose(f);
    if (!found)
        return -ENOENT;
    if (u.uid == 0)
        return -EPERM; /* the point of --user is not to be root */
    u.groups[u.n_groups++] = u.gid;
    f = fopen("/etc/group", "re");
    if (f) {
        struct group *gr;
        while ((gr = fgetgrent(f)) && u.n_groups < MAX_GROUPS) {
            for (char **m = gr->gr_mem; m && *m; m++) {
                if (strcmp(*m, name) == 0 && gr->gr_gid != u.gid) {
                    u.groups[u.n_groups++] = gr->gr_gid;
                    break;
                }
            }
        }
        fclose(f);
    }
    *ret_user = u;
    return 0;
}

/* In the child: become the runner's user for good (groups first, then gid, then uid),
 * and check that root cannot be regained. */
static int drop_to(const struct runner_user *u)
{
    if (setgroups((size_t)u->n_groups, u->groups) < 0 || setgid(u->gid) < 0 || setuid(u->uid) < 0)
        return -1;
    if (setuid(0) == 0 || geteuid() == 0)
        return -1;
    return 0;
}

/* A home the root directory does not have (a container's /home is empty memory) is made,
 * the user's own; one that cannot be made leaves the runner in / as before. */
static void make_home(const struct runner_user *u)
{
    struct stat st;
    if (!u->home[0] || stat(u->home, &st) == 0)
        return;
    if (mkdir(u->home, 0750) < 0 || chown(u->home, u->uid, u->gid) < 0)
        say("cannot make %s's home %s: %s", u->name, u->home, strerror(errno));
}

struct runner {
    pid_t pid;
    double started_at;
    double deadline;
    bool term_sent;
    double kill_at;
    bool timed_out;
    int relaunches;
    double relaunch_at; /* > 0: waiting to re-launch */
    bool jit_on_argv;   /* the JIT config was seen in some process's command line */
    int argv_scans;
};

/* What the agent keeps of one config to start (and re-start) the runner. The JIT config
 * lives here until the runner has ended for good, then it is wiped. */
struct launch {
    char *argv[AGENT_MAX_COMMAND_ARGS + 1];
    char *jit;
    size_t jit_len;
    const struct runner_user *user;
    char report_path[300];
};

static void launch_free(struct launch *l)
{
    for (int i = 0; l->argv[i]; i++)
        free(l->argv[i]);
    if (l->jit) {
        explicit_bzero(l->jit, l->jit_len);
        free(l->jit);
    }
    memset(l, 0, sizeof(*l));
}

static int launch_prepare(json_t *config, const struct runner_user *user, struct launch *ret)
{
    json_t *cmd = json_object_get(config, "runner_command");
    const char *jit = json_string_value(json_object_get(config, "jit_config"));
    size_t n = json_array_size(cmd);
    if (!jit || n == 0 || n > AGENT_MAX_COMMAND_ARGS)
        return -EINVAL;
    /* Configs written for `run.sh --jitconfig JIT` end with --jitconfig: the JIT config now
     * goes in the environment, so the flag is dropped rather than left without a value. */
    const char *last = json_string_value(json_array_get(cmd, n - 1));
    if (n > 1 && last && strcmp(last, "--jitconfig") == 0)
        n--;
    struct launch l = {.user = user};
    for (size_t i = 0; i < n; i++) {
        const char *a = json_string_value(json_array_get(cmd, i));
        if (!a || !(l.argv[i] = strdup(a))) {
            launch_free(&l);
            return -EINVAL;
        }
    }
    l.jit_len = strlen(jit);
    l.jit = strdup(jit);
    if (!l.jit) {
        launch_free(&l);
        return -ENOMEM;
    }
    if (report_dir)
        snprintf(l.report_path, sizeof(l.report_path), "%s/report.json", report_dir);
    *ret = l;
    return 0;
}

/* A directory for the job's report: made fresh, owned by the runner's user and private to
 * it. Anything that was there is not the job's and is removed. */
static int make_report_dir(const char *dir, const struct runner_user *user)
{
    struct stat st;
    if (lstat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return -ENOTDIR;
        char old[PATH_MAX];
        snprintf(old, sizeof(old), "%s/report.json", dir);
        unlink(old);
    } else if (mkdir(dir, 0700) < 0) {
        return -errno;
    }
    if (chmod(dir, 0700) < 0 || (user && chown(dir, user->uid, user->gid) < 0))
        return -errno;
    return 0;
}

/* The report directory: --state-dir, else under /tmp (a container's root is read-only),
 * else none: the job then runs without a report, which is not a failure of the job. */
static void choose_report_dir(const struct runner_user *user)
{
    static const char fallback[] = "/tmp/hatchery-agent";
    int r = make_report_dir(state_dir, user);
    if (r == 0) {
        report_dir = state_dir;
        return;
    }
    say("no report directory at %s (%s): trying %s", state_dir, strerror(-r), fallback);
    r = make_report_dir(fallback, user);
    if (r == 0) {
        report_dir = fallback;
        return;
    }
    say("no report directory at %s (%s): the job runs without one", fallback, strerror(-r));
}

/* In the child: the runner could not be started (126: not as its user, or not confined;
 * 127: no such program). Says so on `ready` before exiting with that code. */
_Noreturn static void not_started(int ready, unsigned char code)
{
    (void)!write(ready, &code, 1);
    _exit(code);
}

/* Forks and execs the runner. 0 with its pid in `ret_pid` once the exec happened; 126 or
 * 127 (the child reaped) when it could not become the runner, which the agent reports
 * without ever saying `started`: an exit after `started` may be a job's, and a job with
 * root in its guest can send any; or -errno when there is no child. */
static int launch_start(const struct launch *l, pid_t *ret_pid)
{
    const struct runner_user *u = l->user;
    /* Built before the fork: the child only calls async-signal-safe functions. */
    size_t env_len = l->jit_len + 64;
    char *jit_env = malloc(env_len);
    char home[300], user[100], logname[100], shell[150], report[340];
    if (!jit_env)
        return -ENOMEM;
    snprintf(jit_env, env_len, "ACTIONS_RUNNER_INPUT_JITCONFIG=%s", l->jit);
    snprintf(home, sizeof(home), "HOME=%s", u ? u->home : "/root");
    snprintf(user, sizeof(user), "USER=%s", u ? u->name : "root");
    snprintf(logname, sizeof(logname), "LOGNAME=%s", u ? u->name : "root");
    snprintf(shell, sizeof(shell), "SHELL=%s", u && u->shell[0] ? u->shell : "/bin/sh");
    snprintf(report, sizeof(report), "HATCHERY_REPORT_FILE=%s",
             l->report_path[0] ? l->report_path : "/dev/null");
    char xdg[64] = "", dbus[96] = "";
    if (u) {
        /* A lingering user session (the image enables one) gives rootless podman its
         * runtime directory and the systemd cgroup manager its bus. */
        char dir[48];
        snprintf(dir, sizeof(dir), "/run/user/%u", (unsigned)u->uid);
        if (access(dir, F_OK) == 0) {
            snprintf(xdg, sizeof(xdg), "XDG_RUNTIME_DIR=%s", dir);
            snprintf(dbus, sizeof(dbus), "DBUS_SESSION_BUS_ADDRESS=unix:path=%s/bus", dir);
        }
    }
    char *envp[] = {
        "PATH=" RUNNER_PATH, "LANG=C.UTF-8", home, user, logname, shell, report, jit_env,
        xdg[0] ? xdg : NULL, dbus,           NULL};
    /* Closed by the exec: nothing read means the runner runs. */
    int ready[2] = {-1, -1};
    pid_t pid = pipe2(ready, O_CLOEXEC) < 0 ? -1 : fork();
    if (pid < 0) {
        int e = errno;
        if (ready[0] >= 0) {
            close(ready[0]);
            close(ready[1]);
        }
        explicit_bzero(jit_env, env_len);
        free(jit_env);
        return -e;
    }
    if (pid == 0) {
        setsid();
        signal(SIGCHLD, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        close(ready[0]);
        if (u && drop_to(u) < 0)
            not_started(ready[1], 126);
        if (u && chdir(u->home) < 0 && chdir("/") < 0)
            not_started(ready[1], 126);
        if (confine_runner && confine_no_new_namespaces() < 0) {
            static const char why[] = "hatchery-agent: the runner cannot be confined "
                                      "(no_new_privs, seccomp): not started\n";
            (void)!write(STDERR_FILENO, why, sizeof(why) - 1);
            not_started(ready[1], 126);
        }
        execve(l->argv[0], l->argv, envp);
        not_started(ready[1], 127);
    }
    explicit_bzero(jit_env, env_len);
    free(jit_env);
    close(ready[1]);
    unsigned char code = 0;
    ssize_t n;
    while ((n = read(ready[0], &code, 1)) < 0 && errno == EINTR)
        ;
    close(ready[0]);
    if (n == 1) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        return code;
    }
    *ret_pid = pid;
    return 0;
}

/* Whether a distinctive slice of the JIT config appears in any process's command line:
 * the agent's own check that nothing in the guest put it on an argv. */
static bool jit_in_any_cmdline(const struct launch *l)
{
    if (!l->jit || l->jit_len < 16)
        return false;
    size_t slice = l->jit_len < 48 ? l->jit_len : 48;
    const char *needle = l->jit + (l->jit_len - slice) / 2;
    DIR *d = opendir("/proc");
    if (!d)
        return false;
    static char buf[128 * 1024];
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[300];
        snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof(buf));
        close(fd);
        if (n > 0 && memmem(buf, (size_t)n, needle, slice))
            found = true;
    }
    closedir(d);
    return found;
}

/* The job's report: a JSON object of at most REPORT_MAX_BYTES that the job wrote to
 * $HATCHERY_REPORT_FILE. The job is hostile: the file must be a regular file owned by the
 * runner's user (never a link to something of root's), and it is only ever parsed. */
static json_t *read_report(const struct launch *l)
{
    if (!l->report_path[0])
        return NULL;
    int fd = open(l->report_path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    json_t *report = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
        st.st_uid == (l->user ? l->user->uid : 0) && st.st_size <= REPORT_MAX_BYTES) {
        char buf[REPORT_MAX_BYTES + 1];
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n > 0 && n <= REPORT_MAX_BYTES) {
            json_error_t jerr;
            report = json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
            if (!json_is_object(report)) {
                say("the job's report is not a JSON object: ignored");
                json_decref(report);
                report = NULL;
            }
        }
    } else {
        say("the job's report is not a small regular file of the runner's: ignored");
    }
    close(fd);
    return report;
}

static void poweroff_now(void)
{
    if (!power_off)
        return;
    sync();
    say("powering off");
    reboot(RB_POWER_OFF);
    say("poweroff failed: %s", strerror(errno));
}

/* The `exited` message, kept until the controller acknowledges it (version 2): sent again
 * after each `resume`. */
static json_t *exited_msg;

static void send_exited(struct runner *runner, struct launch *l, int status, double now)
{
    json_t *m = agent_msg_new(AGENT_MSG_EXITED);
    int code = -1;
    if (WIFEXITED(status)) {
        code = WEXITSTATUS(status);
        json_object_set_new(m, "code", json_integer(code));
    } else {
        json_object_set_new(m, "signal", json_integer(WTERMSIG(status)));
    }
    if (code >= 0)
        json_object_set_new(m, "meaning",
                            json_string(code == 126 ? "cannot become the runner's user"
                                                    : listener_code_meaning(code)));
    json_object_set_new(m, "duration_s",
                        json_real(runner->started_at > 0 ? now - runner->started_at : 0));
    json_object_set_new(m, "timed_out", json_boolean(runner->timed_out));
    json_object_set_new(m, "relaunches", json_integer(runner->relaunches));
    if (l->jit && jit_in_any_cmdline(l))
        runner->jit_on_argv = true;
    runner->argv_scans++;
    json_object_set_new(m, "jit_on_argv", json_boolean(runner->jit_on_argv));
    json_object_set_new(m, "argv_scans", json_integer(runner->argv_scans));
    json_t *report = l->jit ? read_report(l) : NULL;
    if (report)
        json_object_set_new(m, "report", report);
    if (code >= 0)
        say("runner exited %d: %s", code, json_string_value(json_object_get(m, "meaning")));
    else
        say("runner killed by signal %d", WTERMSIG(status));
    exited_msg = m;
    if (send_msg(json_incref(m)) < 0)
        say("no controller listens: the exit is kept for the next one");
}

/* jansson's blocks (the config message, its parsed JIT config) are wiped when freed. */
static void json_wipe_free(void *p)
{
    if (p)
        explicit_bzero(p, malloc_usable_size(p));
    free(p);
}

static char boot_id[64], machine_id[64];
/* The nonce of the last hello, told again in `resumed`: a new controller compares the
 * guests it adopts as it compares new ones. */
static char hello_nonce[33];

static void hex_of(const unsigned char *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* hello: who this guest is. Its nonce is drawn now, from the CRNG: two guests that share
 * one boot's state (a copied disk, a restored memory image) share their RNG too, and the
 * controller, seeing the same nonce twice, configures neither twin. After a restore
 * (`restored`), the CRNG has been reseeded with the host's entropy first, and rng_sample
 * shows its output, so that tests can compare two clones. */
static int send_hello(double crng_wait, bool restored)
{
    struct utsname uts;
    uname(&uts);
    json_t *hello = agent_msg_new(AGENT_MSG_HELLO);
    json_object_set_new(hello, "version", json_string(HATCHERY_VERSION));
    json_object_set_new(hello, "protocol", json_integer(AGENT_PROTOCOL_VERSION));
    json_object_set_new(hello, "arch", json_string(uts.machine));
    json_object_set_new(hello, "boot_id", json_string(boot_id));
    json_object_set_new(hello, "machine_id", json_string(machine_id));
    unsigned char nonce[16], sample[32];
    char nonce_hex[2 * sizeof(nonce) + 1] = "", sample_hex[2 * sizeof(sample) + 1] = "";
    if (getrandom(nonce, sizeof(nonce), 0) == (ssize_t)sizeof(nonce))
        hex_of(nonce, sizeof(nonce), nonce_hex);
    json_object_set_new(hello, "nonce", json_string(nonce_hex));
    snprintf(hello_nonce, sizeof(hello_nonce), "%s", nonce_hex);
    json_object_set_new(hello, "crng_ready", json_boolean(crng_wait >= 0));
    json_object_set_new(hello, "crng_wait_s", json_real(crng_wait >= 0 ? crng_wait : CRNG_WAIT_S));
    json_object_set_new(hello, "restore", json_true());
    if (restored) {
        json_object_set_new(hello, "restored", json_true());
        if (getrandom(sample, sizeof(sample), 0) == (ssize_t)sizeof(sample))
            hex_of(sample, sizeof(sample), sample_hex);
        json_object_set_new(hello, "rng_sample", json_string(sample_hex));
    }
    return send_msg(hello);
}

/* This guest was restored from a saved memory image that other guests were restored from
 * too: until now its CRNG state, machine-id and nonce are theirs. The host's seed goes
 * into the kernel's pool, credited, and the CRNG reseeds from it at once (without the
 * ioctl it would wait for its next scheduled reseed); then a new machine-id. */
static int restore_identity(const char *seed_hex)
{
    unsigned char seed[AGENT_RESTORE_SEED_BYTES];
    if (!seed_hex || strlen(seed_hex) != 2 * sizeof(seed))
        return -EINVAL;
    for (size_t i = 0; i < sizeof(seed); i++) {
        int hi = hex_digit(seed_hex[2 * i]), lo = hex_digit(seed_hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        seed[i] = (unsigned char)(hi << 4 | lo);
    }
    struct {
        int entropy_count;
        int buf_size;
        unsigned char buf[AGENT_RESTORE_SEED_BYTES];
    } pool = {.entropy_count = 8 * AGENT_RESTORE_SEED_BYTES, .buf_size = sizeof(seed)};
    memcpy(pool.buf, seed, sizeof(seed));
    explicit_bzero(seed, sizeof(seed));
    int fd = open("/dev/urandom", O_RDWR | O_CLOEXEC);
    int r = 0;
    if (fd < 0 || ioctl(fd, RNDADDENTROPY, &pool) < 0 || ioctl(fd, RNDRESEEDCRNG) < 0)
        r = -errno;
    explicit_bzero(&pool, sizeof(pool));
    if (fd >= 0)
        close(fd);
    if (r < 0)
        return r;
    /* A machine-id only where the image has one (systemd's; the test guests have none). */
    if (access("/etc/machine-id", F_OK) == 0) {
        unsigned char id[16];
        char text[2 * sizeof(id) + 2];
        if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id))
            return -errno;
        /* A v4 UUID's bits, as systemd-id128 makes them. */
        id[6] = (id[6] & 0x0f) | 0x40;
        id[8] = (id[8] & 0x3f) | 0x80;
        hex_of(id, sizeof(id), text);
        strcat(text, "\n");
        int mfd = open("/etc/machine-id.new", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
        if (mfd < 0)
            return -errno;
        bool ok = write(mfd, text, strlen(text)) == (ssize_t)strlen(text) && fsync(mfd) == 0;
        close(mfd);
        if (!ok || rename("/etc/machine-id.new", "/etc/machine-id") < 0)
            return -EIO;
        read_line_file("/etc/machine-id", machine_id, sizeof(machine_id));
    }
    return 0;
}

/* One conversation with the controller, from hello to power-off: the runner, its launch
 * (the JIT config lives there), and the bytes read from the channel (a config line among
 * them: wiped as soon as each line is parsed). */
struct session {
    const struct runner_user *user;
    struct runner runner;
    struct launch launch;
    char runner_name[160];
    bool configured, done;
    int exit_status;
    double next_heartbeat;
    char *buf;
    size_t len;
};

struct agent_args {
    const char *port, *socket_path, *user_name;
};

/* The command line into `a` (and the globals it sets): -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, struct agent_args *a)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            a->port = argv[++i];
        else if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
            a->socket_path = argv[++i];
        else if (strcmp(argv[i], "--user") == 0 && i + 1 < argc)
            a->user_name = argv[++i];
        else if (strcmp(argv[i], "--state-dir") == 0 && i + 1 < argc)
            state_dir = argv[++i];
        else if (strcmp(argv[i], "--no-poweroff") == 0)
            power_off = false;
        else {
            fprintf(stderr, "usage: hatchery-agent [--port DEV | --socket PATH] [--user NAME] "
                            "[--state-dir DIR] [--no-poweroff]\n");
            return 2;
        }
    }
    if (a->socket_path) {
        power_off = false; /* a container just ends */
        confine_runner = true;
    }
    channel_socket = a->socket_path;
    return -1;
}

/* The channel opened, signals set up, the CRNG waited for, and hello said once a
 * controller is there. 0, or 1 after saying why (the guest is powered off). */
static int start(const struct agent_args *a)
{
    channel = open_channel(a->port, a->socket_path);
    if (channel < 0) {
        poweroff_now();
        return 1;
    }
    if (pipe2(sigchld_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return 1;
    struct sigaction sa = {.sa_handler = on_sigchld, .sa_flags = SA_RESTART | SA_NOCLDSTOP};
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction st = {.sa_handler = on_sigterm, .sa_flags = SA_RESTART};
    sigaction(SIGTERM, &st, NULL);

    double crng_wait = wait_for_crng();
    if (crng_wait < 0)
        say("the kernel's CRNG is not ready after %d s: saying hello anyway", CRNG_WAIT_S);
    read_line_file("/proc/sys/kernel/random/boot_id", boot_id, sizeof(boot_id));
    read_line_file("/etc/machine-id", machine_id, sizeof(machine_id));
    /* hello waits for a controller: the first connection comes after the boot. */
    while (!host_connected() && !terminate) {
        channel_retry();
        usleep(100000);
    }
    if (send_hello(crng_wait, false) < 0) {
        say("cannot send hello");
        poweroff_now();
        return 1;
    }
    say("hello sent (crng waited %.1f s)", crng_wait);
    return 0;
}

/* The runner's own life, each turn: a re-launch that is due, its exit (re-launched when
 * its code says so, else reported), the job timeout and the kill after it. */
static void tend_runner(struct session *ss, double now)
{
    struct runner *runner = &ss->runner;
    if (runner->relaunch_at > 0 && now >= runner->relaunch_at) {
        runner->relaunch_at = 0;
        pid_t pid = 0;
        int r = launch_start(&ss->launch, &pid);
        if (r != 0) {
            send_exited(runner, &ss->launch, W_EXITCODE(r > 0 ? r : 127, 0), now);
        } else {
            runner->pid = pid;
            say("runner re-launched (pid %d, %d of %d)", (int)pid, runner->relaunches,
                RELAUNCH_MAX);
        }
    }
    if (runner->pid <= 0)
        return;
    int status;
    pid_t w = waitpid(runner->pid, &status, WNOHANG);
    if (w == runner->pid) {
        runner->pid = 0;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        if (listener_code_relaunches(code) && runner->relaunches < RELAUNCH_MAX &&
            !runner->timed_out && !runner->term_sent) {
            runner->relaunches++;
            runner->relaunch_at = now + RELAUNCH_DELAY_S;
            say("runner exited %d (%s): re-launching in %d s", code, listener_code_meaning(code),
                RELAUNCH_DELAY_S);
        } else {
            ss->exit_status = code >= 0 ? code : 1;
            send_exited(runner, &ss->launch, status, now);
        }
    }
    if (runner->pid > 0 && now >= runner->deadline && !runner->term_sent) {
        say("job timeout: stopping the runner");
        runner->timed_out = true;
        runner->term_sent = true;
        runner->kill_at = now + KILL_GRACE_S;
        kill(-runner->pid, SIGTERM);
    } else if (runner->pid > 0 && runner->term_sent && now >= runner->kill_at) {
        kill(-runner->pid, SIGKILL);
    }
}

/* A heartbeat while a runner runs (or waits to re-launch), and while a version 2
 * controller waits for this guest to be configured; each also looks for the JIT config
 * on a command line. */
static void heartbeat(struct session *ss, double now)
{
    bool waiting = !ss->configured && controller_version >= 2;
    if (!((ss->runner.pid > 0 || ss->runner.relaunch_at > 0 || waiting) &&
          now >= ss->next_heartbeat && host_connected()))
        return;
    if (!ss->runner.jit_on_argv && ss->launch.jit && jit_in_any_cmdline(&ss->launch)) {
        ss->runner.jit_on_argv = true;
        say("the JIT config is on a command line in this guest");
    }
    if (ss->launch.jit)
        ss->runner.argv_scans++;
    send_msg(agent_msg_new(AGENT_MSG_HEARTBEAT));
    ss->next_heartbeat = now + AGENT_HEARTBEAT_S;
}

/* config: the runner is started with it (once). */
static void on_config(struct session *ss, json_t *msg)
{
    ss->configured = true;
    json_t *timeout = json_object_get(msg, "job_timeout_s");
    const char *name = json_string_value(json_object_get(msg, "runner_name"));
    snprintf(ss->runner_name, sizeof(ss->runner_name), "%s", name ? name : "");
    choose_report_dir(ss->user);
    int lr = launch_prepare(msg, ss->user, &ss->launch);
    pid_t pid = 0;
    int r = lr < 0 ? lr : launch_start(&ss->launch, &pid);
    struct runner *runner = &ss->runner;
    runner->started_at = now_s();
    if (r != 0) {
        /* No `started`: the runner never ran, so the exit is the image's, not a job's. */
        if (r < 0)
            say("cannot start the runner: %s", strerror(-r));
        send_exited(runner, &ss->launch, W_EXITCODE(r > 0 ? r : 127, 0), runner->started_at);
        return;
    }
    runner->pid = pid;
    runner->deadline =
        runner->started_at + (json_is_integer(timeout) && json_integer_value(timeout) > 0
                                  ? (double)json_integer_value(timeout)
                                  : 6 * 3600.0);
    json_t *m = agent_msg_new(AGENT_MSG_STARTED);
    json_object_set_new(m, "pid", json_integer(pid));
    if (ss->user)
        json_object_set_new(m, "uid", json_integer(ss->user->uid));
    send_msg(m);
    ss->next_heartbeat = runner->started_at + AGENT_HEARTBEAT_S;
    say("runner %s started (pid %d, uid %u%s)", ss->runner_name[0] ? ss->runner_name : "?",
        (int)pid, ss->user ? (unsigned)ss->user->uid : (unsigned)getuid(),
        confine_runner ? ", no new namespaces" : "");
}

/* resume: a new controller asks where things stand; an exit it may have missed follows. */
static void on_resume(struct session *ss)
{
    const char *agent_state = exited_msg                                         ? "exited"
                              : ss->runner.pid > 0 || ss->runner.relaunch_at > 0 ? "running"
                                                                                 : "waiting";
    json_t *m = agent_msg_new(AGENT_MSG_RESUMED);
    json_object_set_new(m, "state", json_string(agent_state));
    json_object_set_new(m, "runner_name", json_string(ss->runner_name));
    json_object_set_new(m, "pid", json_integer(ss->runner.pid));
    json_object_set_new(m, "boot_id", json_string(boot_id));
    json_object_set_new(m, "machine_id", json_string(machine_id));
    json_object_set_new(m, "nonce", json_string(hello_nonce));
    send_msg(m);
    say("resumed by a new controller (%s)", agent_state);
    if (exited_msg)
        send_msg(json_incref(exited_msg));
    ss->next_heartbeat = now_s() + AGENT_HEARTBEAT_S;
}

/* restore: this guest is a template's clone; it takes the host's clock and a new identity
 * before it says hello again. */
static void on_restore(struct session *ss, json_t *msg)
{
    const char *seed = json_string_value(json_object_get(msg, "seed"));
    /* The saved image's clock stopped at the save: TLS and GitHub's tokens need today's. */
    json_t *host_ms = json_object_get(msg, "time_ms");
    if (json_is_integer(host_ms) && json_integer_value(host_ms) > 0) {
        struct timespec ts = {.tv_sec = json_integer_value(host_ms) / 1000,
                              .tv_nsec = json_integer_value(host_ms) % 1000 * 1000000};
        if (clock_settime(CLOCK_REALTIME, &ts) < 0)
            say("cannot set the clock after the restore: %s", strerror(errno));
    }
    int rr = restore_identity(seed);
    /* A clone whose timers did not survive the restore (pseries under TCG before QEMU 8.2
     * loses its decrementer; the controller refuses those) may stall in this sleep, before
     * its hello and any config, rather than mid-job: a cheap early probe, not a proof. */
    if (rr == 0 && usleep(10000) < 0)
        rr = -errno;
    if (rr < 0) {
        /* A clone that cannot tell itself apart says so, and gets nothing. */
        say("cannot take a new identity after the restore: %s", strerror(-rr));
        ss->done = true;
        return;
    }
    send_hello(0, true);
    say("restored: reseeded, new machine-id and nonce, hello sent again");
    ss->next_heartbeat = now_s() + AGENT_HEARTBEAT_S;
}

/* shutdown: the runner is stopped (killed after a grace), or the agent ends. */
static void on_shutdown(struct session *ss, json_t *msg)
{
    const char *reason = json_string_value(json_object_get(msg, "reason"));
    say("shutdown requested (%s)", reason ? reason : "no reason");
    if (ss->runner.pid > 0) {
        kill(-ss->runner.pid, SIGTERM);
        ss->runner.term_sent = true;
        ss->runner.kill_at = now_s() + KILL_GRACE_S;
    } else {
        ss->done = true;
    }
}

static void on_message(struct session *ss, json_t *msg, enum agent_msg_type type)
{
    controller_version = (int)json_integer_value(json_object_get(msg, "v"));
    if (type == AGENT_MSG_CONFIG && !ss->configured) {
        on_config(ss, msg);
    } else if (type == AGENT_MSG_RESUME) {
        on_resume(ss);
    } else if (type == AGENT_MSG_RESTORE && !ss->configured) {
        on_restore(ss, msg);
    } else if (type == AGENT_MSG_ACK && exited_msg) {
        say("the controller has the exit");
        ss->done = true;
    } else if (type == AGENT_MSG_SHUTDOWN) {
        on_shutdown(ss, msg);
    } else {
        say("unexpected %s message: ignored", agent_msg_type_names[type]);
    }
}

/* What the channel has to read, as lines to on_message. Each line is wiped from the buffer
 * as soon as it is parsed (the config line carries the JIT config). */
static void read_channel(struct session *ss, short revents)
{
    if (revents & (POLLHUP | POLLERR) && !(revents & POLLIN)) {
        /* A virtio port reports HUP while the host side is not connected: wait. */
        channel_lost();
        if (!channel_socket)
            usleep(100000);
        return;
    }
    if (!(revents & POLLIN))
        return;
    char *buf = ss->buf;
    ssize_t got = read(channel, buf + ss->len, AGENT_MAX_LINE_BYTES + 1 - ss->len);
    if (got <= 0) {
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            return;
        channel_lost();
        if (!channel_socket)
            usleep(100000);
        return;
    }
    ss->len += (size_t)got;
    char *nl;
    while ((nl = memchr(buf, '\n', ss->len))) {
        size_t line_len = (size_t)(nl - buf);
        json_t *msg = NULL;
        enum agent_msg_type type;
        char err[256];
        int r = agent_msg_parse(buf, line_len, &msg, &type, err, sizeof(err));
        explicit_bzero(buf, line_len); /* the config line carries the JIT config */
        memmove(buf, nl + 1, ss->len - line_len - 1);
        explicit_bzero(buf + ss->len - line_len - 1, line_len + 1); /* the moved tail's old copy */
        ss->len -= line_len + 1;
        if (r < 0) {
            say("bad message from the controller: %s", err);
            continue;
        }
        on_message(ss, msg, type);
        json_decref(msg);
    }
    if (ss->len > AGENT_MAX_LINE_BYTES) {
        say("line from the controller too long: dropped");
        explicit_bzero(buf, ss->len);
        ss->len = 0;
    }
}

int main(int argc, char **argv)
{
    json_set_alloc_funcs(malloc, json_wipe_free);
    struct agent_args args = {0};
    int exit_code = parse_args(argc, argv, &args);
    if (exit_code >= 0)
        return exit_code;
    struct runner_user user_buf;
    struct session ss = {.exit_status = 1};
    if (args.user_name) {
        int r = runner_user_lookup(args.user_name, &user_buf);
        if (r < 0) {
            say("cannot run the runner as %s: %s", args.user_name,
                r == -EPERM ? "that user is root" : strerror(-r));
            poweroff_now();
            return 1;
        }
        ss.user = &user_buf;
        make_home(&user_buf);
    }
    if (start(&args) != 0)
        return 1;
    ss.buf = malloc(AGENT_MAX_LINE_BYTES + 1);
    if (!ss.buf) {
        say("out of memory");
        ss.done = true;
    }
    while (!ss.done) {
        channel_retry();
        struct pollfd fds[2] = {{.fd = channel, .events = POLLIN},
                                {.fd = sigchld_pipe[0], .events = POLLIN}};
        int n = poll(fds, 2, 1000);
        if (n < 0 && errno != EINTR)
            break;
        double now = now_s();
        if (terminate) {
            say("terminated");
            if (ss.runner.pid > 0)
                kill(-ss.runner.pid, SIGKILL);
            break;
        }
        if (fds[1].revents & POLLIN) {
            char drain[64];
            while (read(sigchld_pipe[0], drain, sizeof(drain)) > 0) {
            }
        }
        tend_runner(&ss, now);
        /* An exit told to a version 1 controller ends the conversation; a version 2
         * controller acknowledges it first. */
        if (exited_msg && controller_version < 2 && host_connected())
            break;
        heartbeat(&ss, now);
        if (channel >= 0)
            read_channel(&ss, fds[0].revents);
    }
    launch_free(&ss.launch);
    /* Let the last message reach the host before the port goes away. */
    usleep(SHUTDOWN_LINGER_MS * 1000);
    free(ss.buf);
    json_decref(exited_msg);
    poweroff_now();
    if (channel >= 0)
        close(channel);
    return ss.exit_status;
}

/* libjansson.a's assertions land here rather than in glibc's __assert_fail, which would
 * bring glibc's wide-character printf into the static agent (64 KiB on ppc64le, which it
 * would put past 1 MiB). Said on stderr, which reaches the console, then aborted as glibc
 * would. */
void __assert_fail(const char *assertion, const char *file, unsigned int line, const char *function)
{
    fprintf(stderr, "hatchery-agent: %s:%u: %s: assertion failed: %s\n", file, line, function,
            assertion);
    abort();
}
