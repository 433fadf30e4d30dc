/* hatchery-agent: runs inside each guest. It opens the agent channel (the virtio-serial
 * port named org.hatchery.agent.0, or the controller's unix socket in a container), says
 * hello, takes one config, starts the runner with the JIT config, reports started,
 * heartbeats and the exit, and then powers the guest off (VM) or exits (container).
 *
 * Small and static on purpose: POSIX, poll(), and jansson for the JSON. No libcurl: it
 * talks only to the channel. It never prints the JIT config. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hatchery/agent_protocol.h"

#define PORT_WAIT_S        60 /* modules may load after the agent starts */
#define KILL_GRACE_S       10
#define SHUTDOWN_LINGER_MS 500

static int channel = -1;
static int sigchld_pipe[2] = {-1, -1};
static bool power_off = true;

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

static int write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            poll(&p, 1, 1000);
            continue;
        }
        if (n <= 0)
            return -errno;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static int send_msg(json_t *msg)
{
    size_t len = 0;
    char *line = agent_msg_encode(msg, &len);
    json_decref(msg);
    if (!line)
        return -ENOMEM;
    int r = write_all(channel, line, len);
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

static int open_channel(const char *port, const char *socket_path)
{
    if (socket_path) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket_path);
        for (int i = 0; i < PORT_WAIT_S * 10; i++) {
            if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0)
                return fd;
            usleep(100000);
        }
        say("cannot connect to %s: %s", socket_path, strerror(errno));
        close(fd);
        return -1;
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
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        say("cannot open %s: %s", path, strerror(errno));
    return fd;
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

static void read_boot_id(char *out, size_t size)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    snprintf(out, size, "unknown");
    if (f) {
        if (fgets(out, (int)size, f))
            out[strcspn(out, "\n")] = 0;
        fclose(f);
    }
}

struct runner {
    pid_t pid;
    double started_at;
    double deadline;
    bool term_sent;
    double kill_at;
    bool timed_out;
};

static pid_t start_runner(json_t *config)
{
    json_t *cmd = json_object_get(config, "runner_command");
    const char *jit = json_string_value(json_object_get(config, "jit_config"));
    size_t n = json_array_size(cmd);
    if (!jit || n == 0 || n > AGENT_MAX_COMMAND_ARGS)
        return -EINVAL;
    char *argv[AGENT_MAX_COMMAND_ARGS + 2];
    for (size_t i = 0; i < n; i++) {
        argv[i] = (char *)json_string_value(json_array_get(cmd, i));
        if (!argv[i])
            return -EINVAL;
    }
    argv[n] = (char *)jit;
    argv[n + 1] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        setsid();
        signal(SIGCHLD, SIG_DFL);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
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

int main(int argc, char **argv)
{
    const char *port = NULL, *socket_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = argv[++i];
        else if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
            socket_path = argv[++i];
        else if (strcmp(argv[i], "--no-poweroff") == 0)
            power_off = false;
        else {
            fprintf(stderr, "usage: hatchery-agent [--port DEV | --socket PATH] [--no-poweroff]\n");
            return 2;
        }
    }
    if (socket_path)
        power_off = false; /* a container just ends */
    channel = open_channel(port, socket_path);
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

    struct utsname uts;
    uname(&uts);
    char boot_id[64];
    read_boot_id(boot_id, sizeof(boot_id));
    json_t *hello = agent_msg_new(AGENT_MSG_HELLO);
    json_object_set_new(hello, "version", json_string(AGENT_VERSION));
    json_object_set_new(hello, "arch", json_string(uts.machine));
    json_object_set_new(hello, "boot_id", json_string(boot_id));
    if (send_msg(hello) < 0) {
        say("cannot send hello");
        poweroff_now();
        return 1;
    }
    say("hello sent (arch %s)", uts.machine);

    char *buf = malloc(AGENT_MAX_LINE_BYTES + 1);
    size_t len = 0;
    struct runner runner = {.pid = 0};
    bool configured = false, done = false;
    int exit_status = 1;
    double next_heartbeat = 0;

    while (!done) {
        int timeout_ms = 1000;
        struct pollfd fds[2] = {{.fd = channel, .events = POLLIN},
                                {.fd = sigchld_pipe[0], .events = POLLIN}};
        int n = poll(fds, 2, timeout_ms);
        if (n < 0 && errno != EINTR)
            break;
        double now = now_s();
        if (terminate) {
            say("terminated");
            if (runner.pid > 0)
                kill(-runner.pid, SIGKILL);
            break;
        }

        if (fds[1].revents & POLLIN) {
            char drain[64];
            while (read(sigchld_pipe[0], drain, sizeof(drain)) > 0) {
            }
        }
        if (runner.pid > 0) {
            int status;
            pid_t w = waitpid(runner.pid, &status, WNOHANG);
            if (w == runner.pid) {
                json_t *m = agent_msg_new(AGENT_MSG_EXITED);
                if (WIFEXITED(status)) {
                    json_object_set_new(m, "code", json_integer(WEXITSTATUS(status)));
                    exit_status = WEXITSTATUS(status);
                } else {
                    json_object_set_new(m, "signal", json_integer(WTERMSIG(status)));
                }
                json_object_set_new(m, "duration_s", json_real(now - runner.started_at));
                json_object_set_new(m, "timed_out", json_boolean(runner.timed_out));
                say("runner exited (%s %d)", WIFEXITED(status) ? "code" : "signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
                send_msg(m);
                runner.pid = 0;
                done = true;
                break;
            }
            if (now >= runner.deadline && !runner.term_sent) {
                say("job timeout: stopping the runner");
                runner.timed_out = true;
                runner.term_sent = true;
                runner.kill_at = now + KILL_GRACE_S;
                kill(-runner.pid, SIGTERM);
            } else if (runner.term_sent && now >= runner.kill_at) {
                kill(-runner.pid, SIGKILL);
            }
            if (now >= next_heartbeat) {
                send_msg(agent_msg_new(AGENT_MSG_HEARTBEAT));
                next_heartbeat = now + AGENT_HEARTBEAT_S;
            }
        }

        if (fds[0].revents & (POLLHUP | POLLERR) && !(fds[0].revents & POLLIN)) {
            /* A virtio port reports HUP while the host side is not connected yet: wait. */
            if (socket_path)
                break;
            usleep(100000);
            continue;
        }
        if (!(fds[0].revents & POLLIN))
            continue;
        ssize_t got = read(channel, buf + len, AGENT_MAX_LINE_BYTES + 1 - len);
        if (got <= 0) {
            if (got < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (socket_path)
                break;
            usleep(100000);
            continue;
        }
        len += (size_t)got;
        char *nl;
        while ((nl = memchr(buf, '\n', len))) {
            size_t line_len = (size_t)(nl - buf);
            json_t *msg = NULL;
            enum agent_msg_type type;
            char err[256];
            int r = agent_msg_parse(buf, line_len, &msg, &type, err, sizeof(err));
            memset(buf, 0, line_len); /* the config line carries the JIT config */
            memmove(buf, nl + 1, len - line_len - 1);
            len -= line_len + 1;
            if (r < 0) {
                say("bad message from the controller: %s", err);
                continue;
            }
            if (type == AGENT_MSG_CONFIG && !configured) {
                configured = true;
                json_t *timeout = json_object_get(msg, "job_timeout_s");
                const char *name = json_string_value(json_object_get(msg, "runner_name"));
                pid_t pid = start_runner(msg);
                if (pid < 0) {
                    say("cannot start the runner: %s", strerror(-pid));
                    json_t *m = agent_msg_new(AGENT_MSG_EXITED);
                    json_object_set_new(m, "code", json_integer(127));
                    json_object_set_new(m, "duration_s", json_real(0));
                    json_object_set_new(m, "timed_out", json_false());
                    send_msg(m);
                    done = true;
                } else {
                    runner.pid = pid;
                    runner.started_at = now_s();
                    runner.deadline = runner.started_at +
                                      (json_is_integer(timeout) && json_integer_value(timeout) > 0
                                           ? (double)json_integer_value(timeout)
                                           : 6 * 3600.0);
                    json_t *m = agent_msg_new(AGENT_MSG_STARTED);
                    json_object_set_new(m, "pid", json_integer(pid));
                    send_msg(m);
                    next_heartbeat = runner.started_at + AGENT_HEARTBEAT_S;
                    say("runner %s started (pid %d)", name ? name : "?", (int)pid);
                }
            } else if (type == AGENT_MSG_SHUTDOWN) {
                const char *reason = json_string_value(json_object_get(msg, "reason"));
                say("shutdown requested (%s)", reason ? reason : "no reason");
                if (runner.pid > 0) {
                    kill(-runner.pid, SIGTERM);
                    runner.term_sent = true;
                    runner.kill_at = now_s() + KILL_GRACE_S;
                } else {
                    done = true;
                }
            } else {
                say("unexpected %s message: ignored", agent_msg_type_names[type]);
            }
            json_decref(msg);
        }
        if (len > AGENT_MAX_LINE_BYTES) {
            say("line from the controller too long: dropped");
            memset(buf, 0, len);
            len = 0;
        }
    }
    /* Let the last message reach the host before the port goes away. */
    usleep(SHUTDOWN_LINGER_MS * 1000);
    free(buf);
    poweroff_now();
    close(channel);
    return exit_status;
}
