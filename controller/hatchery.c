/* hatchery: the operator CLI. It talks to hatcheryd's admin socket: one JSON request, one
 * JSON answer, printed as a table for people or as JSON (--json) for scripts. One command,
 * image-check, needs no daemon (its exit status is its own, below in usage()).
 *
 * Exit status: 0 success; 1 the daemon answered with an error; 2 usage error;
 * 3 the daemon cannot be reached; 4 the answer was not understood. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "hatchery/admin_protocol.h"
#include "hatchery/cleanup.h"
#include "hatchery/version.h"
#include "hatchery/limits.h"
#include "runner_version.h"

#define DEFAULT_SOCKET "/run/hatchery/admin.sock"

enum exit_code {
    EXIT_OK = 0,
    EXIT_DAEMON_ERROR = 1,
    EXIT_USAGE = 2,
    EXIT_UNREACHABLE = 3,
    EXIT_BAD_ANSWER = 4,
};

/* A form's synopsis: `runners show RUNNER`, `jobs [--status S] [--limit N]`. */
static void form_synopsis(const struct admin_form *form, char *out, size_t size)
{
    int n = snprintf(out, size, "%s%s%s%s%s", admin_command_names[form->command],
                     form->sub ? " " : "", form->sub ? form->sub : "", form->operand ? " " : "",
                     form->operand ? form->operand : "");
    for (int o = 0; o < ADMIN_OPT_MAX && n > 0 && (size_t)n < size; o++)
        if (form->options & ADMIN_OPT(o))
            n += snprintf(out + n, size - (size_t)n, " [--%s%s%s]", admin_options[o].name,
                          admin_options[o].value ? " " : "",
                          admin_options[o].value ? admin_options[o].value : "");
}

/* `text` after a synopsis of `column` characters, wrapped at 79 under the help column. */
static void help_line(FILE *out, const char *synopsis, const char *text)
{
    enum { HELP_COLUMN = 33, WIDTH = 79 };
    int at = fprintf(out, "  %s", synopsis);
    if (at >= HELP_COLUMN - 1) {
        fputc('\n', out);
        at = 0;
    }
    fprintf(out, "%*s", HELP_COLUMN - at, "");
    at = HELP_COLUMN;
    while (*text) {
        size_t word = strcspn(text, " ");
        if (at > HELP_COLUMN && at + 1 + (int)word > WIDTH) {
            fprintf(out, "\n%*s", HELP_COLUMN, "");
            at = HELP_COLUMN;
        } else if (at > HELP_COLUMN) {
            fputc(' ', out);
            at++;
        }
        fwrite(text, 1, word, out);
        at += (int)word;
        text += word;
        text += strspn(text, " ");
    }
    fputc('\n', out);
}

/* The help: the daemon's commands from admin_protocol.h's table, then image-check. */
static void usage(FILE *out)
{
    fputs("usage: hatchery [--socket PATH] [--json] COMMAND [ARGS]\n"
          "       hatchery --version\n"
          "\n"
          "commands:\n",
          out);
    char synopsis[128];
    for (size_t f = 0; f < ADMIN_N_FORMS; f++) {
        form_synopsis(&admin_forms[f], synopsis, sizeof(synopsis));
        help_line(out, synopsis, admin_forms[f].help);
    }
    help_line(out, "image-check IMAGE RELEASES [--now ISO] [--warn-days N]",
              "whether GitHub still registers the runner in IMAGE (its .json manifest, or a "
              "mounted root), judged by RELEASES (GET /repos/actions/runner/releases, saved); "
              "no daemon needed. Exit 0 current, 1 warning (refused within N days, default "
              "7), 2 refused, 3 bad input");
    fputs("\n"
          "options:\n"
          "  --socket PATH  admin socket (default $HATCHERY_SOCKET or " DEFAULT_SOCKET ")\n"
          "  --json         print the daemon's answer as JSON (also -o json)\n"
          "  -o FORMAT      a listing as a table (the default), wide (more columns), name\n"
          "                 (the names alone, one a line) or json\n"
          "  --no-headers   a listing's table without its header line\n"
          "\n"
          "exit status: 0 ok, 1 daemon error, 2 usage, 3 daemon unreachable, 4 bad answer\n",
          out);
}

/* `hatchery image-check`: the runner version of an image's manifest (IMAGE.json, written by
 * hatchery-build-image) or of a mounted image root, against GitHub's releases. */
static int image_check(const char *const paths[2], time_t now, int warn_days)
{
    char version[64] = "";
    struct stat st;
    json_error_t err;
    if (stat(paths[0], &st) == 0 && S_ISDIR(st.st_mode)) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/opt/actions-runner/RUNNER_VERSION", paths[0]);
        auto_fclose FILE *f = fopen(path, "re");
        if (!f || !fgets(version, sizeof(version), f)) {
            fprintf(stderr, "hatchery: image-check: %s: %s\n", path, f ? "empty" : strerror(errno));
            return RUNNER_BAD_INPUT;
        }
    } else {
        auto_json json_t *manifest = json_load_file(paths[0], 0, &err);
        const char *v = json_string_value(json_object_get(manifest, "runner_version"));
        if (!v) {
            fprintf(stderr, "hatchery: image-check: %s: %s\n", paths[0],
                    manifest ? "no runner_version in the manifest" : err.text);
            return RUNNER_BAD_INPUT;
        }
        snprintf(version, sizeof(version), "%s", v);
    }
    auto_json json_t *releases = json_load_file(paths[1], 0, &err);
    if (!releases) {
        fprintf(stderr, "hatchery: image-check: %s: %s\n", paths[1], err.text);
        return RUNNER_BAD_INPUT;
    }
    char msg[512];
    enum runner_compliance c =
        runner_version_check(version, releases, now, warn_days, msg, sizeof(msg));
    if (c == RUNNER_BAD_INPUT) {
        fprintf(stderr, "hatchery: image-check: %s\n", msg);
        return c;
    }
    puts(msg);
    return c;
}

/* Why the last call() failed, for --json: the same words as on standard error. */
static char call_error[512];

__attribute__((format(printf, 1, 2))) static void call_failed(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call_error, sizeof(call_error), fmt, ap);
    va_end(ap);
    fprintf(stderr, "hatchery: %s\n", call_error);
}

/* Sends one request and reads the whole answer (bounded). */
static int call(const char *socket_path, json_t *request, json_t **ret_answer)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(socket_path) >= sizeof(addr.sun_path)) {
        call_failed("socket path too long: %s", socket_path);
        return EXIT_USAGE;
    }
    memcpy(addr.sun_path, socket_path, strlen(socket_path));
    auto_close int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        int e = errno;
        call_failed("cannot reach hatcheryd at %s: %s", socket_path, strerror(e));
        fprintf(stderr, "hatchery: is the daemon running? (systemctl status hatcheryd; or pass "
                        "--socket)\n");
        return EXIT_UNREACHABLE;
    }
    auto_free char *text = json_dumps(request, JSON_COMPACT);
    size_t len = text ? strlen(text) : 0;
    /* MSG_NOSIGNAL: a daemon that hangs up is an error to report, not a SIGPIPE to die of. */
    bool sent = text && send(fd, text, len, MSG_NOSIGNAL) == (ssize_t)len &&
                send(fd, "\n", 1, MSG_NOSIGNAL) == 1;
    if (!sent) {
        call_failed("cannot send to %s: %s%s", socket_path, strerror(errno),
                    errno == EPIPE || errno == ECONNRESET
                        ? " (the daemon closed the connection: is it stopping or overloaded?)"
                        : "");
        return EXIT_UNREACHABLE;
    }
    auto_free char *buf = NULL;
    size_t used = 0, cap = 0;
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, ADMIN_TIMEOUT_MS * 2) <= 0) {
            call_failed("no answer from %s", socket_path);
            return EXIT_UNREACHABLE;
        }
        if (used + 65536 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *grown = cap <= ADMIN_MAX_RESPONSE_BYTES ? realloc(buf, cap) : NULL;
            if (!grown) {
                call_failed("answer larger than %d bytes", ADMIN_MAX_RESPONSE_BYTES);
                return EXIT_BAD_ANSWER;
            }
            buf = grown;
        }
        ssize_t n = read(fd, buf + used, cap - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (n == 0 && used == 0)) {
            call_failed("the daemon closed the connection at %s without answering%s%s (is it "
                        "stopping or overloaded?)",
                        socket_path, n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
            return EXIT_UNREACHABLE;
        }
        if (n == 0)
            break;
        used += (size_t)n;
    }
    json_error_t jerr;
    json_t *answer = buf ? json_loadb(buf, used, 0, &jerr) : NULL;
    if (!json_is_object(answer)) {
        call_failed("the daemon's answer is not a JSON object");
        json_decref(answer);
        return EXIT_BAD_ANSWER;
    }
    *ret_answer = answer;
    return EXIT_OK;
}

/* ---- tables ------------------------------------------------------------------------- */

#define TABLE_MAX_COLUMNS 12

struct table {
    size_t n_columns;
    const char *headers[TABLE_MAX_COLUMNS];
    size_t widths[TABLE_MAX_COLUMNS];
    char **cells; /* row-major */
    size_t n_rows;
};

/* Cells hold what GitHub and guests said (labels come from any workflow's `runs-on`):
 * control characters, C0 and DEL and UTF-8's C1 (U+0080..U+009F), become '?', so no value
 * can move the cursor or recolour an operator's terminal. */
static void make_printable(char *v)
{
    char *out = v;
    for (unsigned char *p = (unsigned char *)v; *p; p++) {
        if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            *out++ = '?';
            p++;
        } else if (*p < 0x20 || *p == 0x7f) {
            *out++ = '?';
        } else {
            *out++ = (char)*p;
        }
    }
    *out = 0;
}

static void table_add_row(struct table *t, char *const *cells)
{
    char **grown = realloc(t->cells, (t->n_rows + 1) * t->n_columns * sizeof(char *));
    if (!grown)
        return;
    t->cells = grown;
    for (size_t c = 0; c < t->n_columns; c++) {
        char *v = strdup(cells[c] ? cells[c] : "-");
        if (v)
            make_printable(v);
        t->cells[t->n_rows * t->n_columns + c] = v;
        size_t w = v ? strlen(v) : 0;
        if (w > t->widths[c])
            t->widths[c] = w;
    }
    t->n_rows++;
}

/* How a listing is printed (-o, --no-headers): a table, with more columns (wide), or the
 * names alone, one a line (the first column of the first table), for scripts. */
enum output_format {
    OUTPUT_TABLE,
    OUTPUT_WIDE,
    OUTPUT_NAME,
};
static struct {
    enum output_format format;
    bool no_headers;
    int tables; /* printed so far */
} output;

static void table_free(struct table *t)
{
    for (size_t i = 0; i < t->n_rows * t->n_columns; i++)
        free(t->cells[i]);
    free(t->cells);
}

static void table_print(struct table *t)
{
    /* For scripts (-o name, --no-headers), a listing is its first table alone: the rows a
     * pipe takes apart are all of one kind. */
    bool first_only = output.format == OUTPUT_NAME || output.no_headers;
    if (first_only && output.tables > 0) {
        table_free(t);
        return;
    }
    output.tables++;
    if (output.format == OUTPUT_NAME) {
        for (size_t r = 0; r < t->n_rows; r++)
            puts(t->cells[r * t->n_columns] ? t->cells[r * t->n_columns] : "-");
        table_free(t);
        return;
    }
    for (size_t c = 0; c < t->n_columns; c++) {
        size_t w = strlen(t->headers[c]);
        if (w > t->widths[c])
            t->widths[c] = w;
    }
    for (size_t r = output.no_headers ? 1 : 0; r <= t->n_rows; r++)
        for (size_t c = 0; c < t->n_columns; c++) {
            const char *v = r == 0 ? t->headers[c] : t->cells[(r - 1) * t->n_columns + c];
            bool last = c + 1 == t->n_columns;
            printf("%-*s%s", last ? 0 : (int)t->widths[c], v ? v : "", last ? "\n" : "  ");
        }
    table_free(t);
}

static char *fmt_value(json_t *v)
{
    if (!v || json_is_null(v))
        return strdup("-");
    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (json_is_integer(v)) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
        return strdup(buf);
    }
    if (json_is_array(v)) {
        char buf[512] = "";
        size_t used = 0;
        for (size_t i = 0; i < json_array_size(v) && used < sizeof(buf); i++) {
            const char *s = json_string_value(json_array_get(v, i));
            int n = snprintf(buf + used, sizeof(buf) - used, "%s%s", i ? "," : "", s ? s : "?");
            if (n > 0)
                used += (size_t)n;
        }
        return strdup(buf);
    }
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

static char *fmt_age(json_t *ms)
{
    if (!json_is_integer(ms))
        return strdup("-");
    long long age = (long long)time(NULL) - (long long)(json_integer_value(ms) / 1000);
    char buf[32];
    if (age < 120)
        snprintf(buf, sizeof(buf), "%llds", age < 0 ? 0 : age);
    else if (age < 7200)
        snprintf(buf, sizeof(buf), "%lldm", age / 60);
    else
        snprintf(buf, sizeof(buf), "%lldh", age / 3600);
    return strdup(buf);
}

static void free_cells(char **cells, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(cells[i]);
}

/* A listing's column: its header, and its cell made from one row of the answer. */
struct column {
    const char *header;
    const char *key;                                         /* "jobs.queued": one level down */
    char *(*cell)(json_t *row, const struct column *column); /* NULL: the value as it is */
    const char *of;                                          /* cell_used's total */
};

/* A column's value as it is; its age; a cell of its own making; used against a total. */
// clang-format off
#define VALUE(header, key) {header, key, NULL, NULL}
#define AGE(header, key) {header, key, cell_age, NULL}
#define CELL(header, key, cell) {header, key, cell, NULL}
#define USED(header, key, of) {header, key, cell_used, of}
// clang-format on

static json_t *column_value(json_t *row, const char *key)
{
    const char *dot = strchr(key, '.');
    if (!dot)
        return json_object_get(row, key);
    return json_object_get(json_object_getn(row, key, (size_t)(dot - key)), dot + 1);
}

static char *cell_age(json_t *row, const struct column *c)
{
    return fmt_age(column_value(row, c->key));
}

static char *cell_used(json_t *row, const struct column *c)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%lld/%lld",
             (long long)json_integer_value(column_value(row, c->key)),
             (long long)json_integer_value(column_value(row, c->of)));
    return strdup(buf);
}

/* A table of the array `rows`, one row an element: the first `n` of `columns` (a wide
 * listing shows more of them). */
static void print_listing(json_t *rows, const struct column *columns, size_t n)
{
    struct table t = {.n_columns = n};
    for (size_t c = 0; c < n; c++)
        t.headers[c] = columns[c].header;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        char *cells[TABLE_MAX_COLUMNS];
        for (size_t c = 0; c < n; c++)
            cells[c] = columns[c].cell ? columns[c].cell(row, &columns[c])
                                       : fmt_value(column_value(row, columns[c].key));
        table_add_row(&t, cells);
        free_cells(cells, n);
    }
    table_print(&t);
}

static size_t wide_or(size_t all, size_t narrow)
{
    return output.format == OUTPUT_WIDE ? all : narrow;
}

static char *cell_job_pool(json_t *job, const struct column *c)
{
    json_t *pool = json_object_get(job, c->key);
    return json_is_string(pool) ? fmt_value(pool) : strdup("(unmatched)");
}

static void print_jobs(json_t *answer)
{
    static const struct column columns[] = {
        VALUE("JOB", "id"),
        VALUE("STATUS", "status"),
        CELL("POOL", "pool", cell_job_pool),
        VALUE("REPOSITORY", "repository"),
        VALUE("RUN", "run_id"),
        VALUE("LABELS", "labels"),
        VALUE("RUNNER", "runner_name"),
        AGE("UPDATED", "updated_at"),
        VALUE("WHY_IT_WAITS", "waiting"),
        AGE("QUEUED", "queued_at"),
        AGE("STARTED", "started_at"),
    };
    print_listing(json_object_get(answer, "jobs"), columns, wide_or(11, 9));
}

/* A pool's image in one cell: what its manifest says, or why it cannot be used. */
static char *image_cell(json_t *p, const struct column *c)
{
    (void)c;
    const char *error = json_string_value(json_object_get(p, "image_error"));
    json_t *m = json_object_get(p, "image_manifest");
    char buf[512];
    if (error)
        snprintf(buf, sizeof(buf), "error: %s", error);
    else if (m)
        snprintf(buf, sizeof(buf), "runner %s, kernel %s, agent %s, built %s",
                 json_string_value(json_object_get(m, "runner_version")),
                 json_string_value(json_object_get(m, "kernel_version")),
                 json_string_value(json_object_get(m, "agent_version")),
                 json_string_value(json_object_get(m, "built_at")));
    else
        snprintf(buf, sizeof(buf), "-");
    return strdup(buf);
}

static char *cell_pool_hosts(json_t *p, const struct column *c)
{
    json_t *hosts = json_object_get(p, c->key);
    return json_array_size(hosts) ? fmt_value(hosts) : strdup("(all)");
}

static void print_pools(json_t *answer)
{
    static const struct column columns[] = {
        VALUE("POOL", "name"),
        VALUE("ARCH", "arch"),
        VALUE("BACKEND", "backend"),
        VALUE("START", "start"),
        VALUE("LABELS", "labels"),
        VALUE("VCPUS", "vcpus"),
        VALUE("MEMORY_MIB", "memory_mib"),
        VALUE("MIN_IDLE", "min_idle"),
        VALUE("MAX", "max_runners"),
        CELL("HOSTS", "hosts", cell_pool_hosts),
        CELL("IMAGE", NULL, image_cell),
    };
    print_listing(json_object_get(answer, "pools"), columns, 11);
}

static void print_capacity(json_t *answer)
{
    static const struct column columns[] = {
        VALUE("POOL", "pool"),
        VALUE("ARCH", "arch"),
        VALUE("MAX", "max_runners"),
        VALUE("MIN_IDLE", "min_idle"),
        VALUE("RUNNERS", "runners"),
        VALUE("QUEUED", "jobs.queued"),
        VALUE("IN_PROGRESS", "jobs.in_progress"),
        VALUE("WAITING", "jobs.waiting"),
        VALUE("WHY_QUEUED_JOBS_WAIT", "waiting"),
    };
    /* The jobs no pool matches, as a last row of the pools'. */
    json_t *rows = json_copy(json_object_get(answer, "pools"));
    json_t *unmatched = json_object_get(answer, "unmatched");
    json_t *queued = column_value(unmatched, "jobs.queued");
    json_array_append_new(rows, json_pack("{s:s, s:i, s:O*, s:s}", "pool", "(unmatched)", "runners",
                                          0, "jobs", json_object_get(unmatched, "jobs"), "waiting",
                                          json_integer_value(queued) ? "no matching pool" : "-"));
    print_listing(rows, columns, 9);
    json_decref(rows);
}

/* An unsafe host's reason is its error too: it gets no networked guest. */
static char *cell_host_error(json_t *h, const struct column *c)
{
    json_t *error = json_object_get(h, c->key);
    if (!error || json_is_null(error))
        error = json_object_get(h, "unsafe");
    return fmt_value(error);
}

/* A drained host takes no new guest whatever its state: said beside it. */
static char *cell_host_state(json_t *h, const struct column *c)
{
    char *state = fmt_value(json_object_get(h, c->key));
    if (json_is_true(json_object_get(h, "drained")) && state) {
        char both[64];
        snprintf(both, sizeof(both), "%.40s,drained", state);
        char *copy = strdup(both);
        if (copy) {
            free(state);
            state = copy;
        }
    }
    return state;
}

static char *cell_template_mb(json_t *tp, const struct column *c)
{
    json_t *bytes = json_object_get(tp, c->key);
    char mb[32] = "-";
    if (json_is_integer(bytes))
        snprintf(mb, sizeof(mb), "%.1f", (double)json_integer_value(bytes) / 1e6);
    return strdup(mb);
}

static char *cell_template_restores(json_t *tp, const struct column *c)
{
    char restores[64];
    snprintf(restores, sizeof(restores), "%lld (%lld cold)",
             (long long)json_integer_value(json_object_get(tp, c->key)),
             (long long)json_integer_value(json_object_get(tp, c->of)));
    return strdup(restores);
}

static void print_hosts(json_t *answer)
{
    static const struct column columns[] = {
        VALUE("HOST", "name"),
        CELL("STATE", "state", cell_host_state),
        VALUE("URI", "uri"),
        VALUE("TRANSPORT", "transport"),
        USED("VCPUS", "vcpus_used", "vcpus"),
        USED("MEMORY_MIB", "memory_mib_used", "memory_mib"),
        USED("GUESTS", "guests", "max_guests"),
        VALUE("ISOLATION", "guest_isolation"),
        CELL("ERROR", "error", cell_host_error),
    };
    static const struct column template_columns[] = {
        VALUE("TEMPLATE", "name"),
        VALUE("HOST", "host"),
        VALUE("POOL", "pool"),
        VALUE("STATE", "state"),
        CELL("FILE_MB", "file_bytes", cell_template_mb),
        {"RESTORES", "restores", cell_template_restores, "fallbacks"},
        VALUE("REASON", "reason"),
    };
    json_t *hosts = json_object_get(answer, "hosts");
    print_listing(hosts, columns, 9);
    /* Warm templates, where any are kept, each beside its host's name. */
    json_t *templates = json_array();
    size_t i, k;
    json_t *h, *tp;
    json_array_foreach(hosts, i, h)
    {
        json_array_foreach(json_object_get(h, "templates"), k, tp)
        {
            json_t *row = json_copy(tp);
            json_object_set(row, "host", json_object_get(h, "name"));
            json_array_append_new(templates, row);
        }
    }
    if (json_array_size(templates) && output.format != OUTPUT_NAME && !output.no_headers)
        printf("\n");
    print_listing(templates, template_columns, 7);
    json_decref(templates);
}

static void print_runners(json_t *answer)
{
    static const struct column columns[] = {
        VALUE("RUNNER", "name"),
        VALUE("STATE", "state"),
        VALUE("POOL", "pool"),
        VALUE("HOST", "host"),
        VALUE("JOB", "job_id"),
        VALUE("EXIT", "exit_code"),
        AGE("AGE", "created_at"),
        VALUE("REASON", "reason"),
        VALUE("GITHUB_ID", "github_runner_id"),
        AGE("ONLINE", "online_at"),
        AGE("BUSY", "busy_at"),
        AGE("FINISHED", "finished_at"),
    };
    print_listing(json_object_get(answer, "runners"), columns, wide_or(12, 8));
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* One runner, a field per line, by name. */
static void print_runner(json_t *answer)
{
    json_t *r = json_array_get(json_object_get(answer, "runners"), 0);
    const char *keys[64];
    size_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(r, key, v)
    {
        if (n < sizeof(keys) / sizeof(keys[0]))
            keys[n++] = key;
    }
    qsort(keys, n, sizeof(keys[0]), compare_strings);
    for (size_t i = 0; i < n; i++) {
        char *cell = fmt_value(json_object_get(r, keys[i]));
        make_printable(cell);
        printf("%-18s %s\n", keys[i], cell);
        free(cell);
    }
}

static void print_done(json_t *answer)
{
    const char *host = json_string_value(json_object_get(answer, "host"));
    const char *runner = json_string_value(json_object_get(answer, "runner"));
    if (host)
        printf("host %s %s\n", host,
               json_is_true(json_object_get(answer, "drained")) ? "drained: no new guests"
                                                                : "undrained");
    else if (runner)
        printf("runner %s: teardown started\n", runner);
}

static void print_names(const char *what, const char *verb, json_t *names)
{
    if (!json_array_size(names))
        return;
    printf("%s %s:", what, verb);
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n)
    {
        char *v = fmt_value(n);
        printf(" %s", v);
        free(v);
    }
    printf("\n");
}

static void print_reload(json_t *answer)
{
    json_t *c = json_object_get(answer, "changed");
    bool any = false;
    const char *const groups[] = {"pools", "hosts"};
    for (size_t g = 0; g < 2; g++) {
        json_t *grp = json_object_get(c, groups[g]);
        print_names(groups[g], "added", json_object_get(grp, "added"));
        print_names(groups[g], "removed (their runners finish their jobs)",
                    json_object_get(grp, "removed"));
        const char *name;
        json_t *keys;
        json_object_foreach(json_object_get(grp, "changed"), name, keys)
        {
            json_t *jname = json_string(name);
            char *v = fmt_value(jname);
            json_decref(jname);
            char what[300];
            snprintf(what, sizeof(what), "%.*s %s", (int)strlen(groups[g]) - 1, groups[g], v);
            free(v);
            print_names(what, "changed", keys);
        }
        any = any || json_array_size(json_object_get(grp, "added")) ||
              json_array_size(json_object_get(grp, "removed")) ||
              json_object_size(json_object_get(grp, "changed"));
    }
    print_names("settings", "changed", json_object_get(c, "settings"));
    print_names("needs a restart (the running value stays)", "for",
                json_object_get(c, "needs_restart"));
    any = any || json_array_size(json_object_get(c, "settings")) ||
          json_array_size(json_object_get(c, "needs_restart"));
    if (!any)
        printf("config reloaded: nothing changed\n");
}

static void print_logs(json_t *answer)
{
    const char *log = json_string_value(json_object_get(answer, "log"));
    if (json_is_true(json_object_get(answer, "truncated")))
        printf("[... earlier output cut; %s has all of it]\n",
               json_string_value(json_object_get(answer, "path")));
    fputs(log ? log : "", stdout);
}

static void print_github(json_t *answer)
{
    if (!json_is_true(json_object_get(answer, "configured"))) {
        printf("GitHub is not configured (no `github` section in the config)\n");
        return;
    }
    char *v;
    printf("%-14s %s", "auth", json_string_value(json_object_get(answer, "auth")));
    if (json_object_get(answer, "app_id")) {
        printf(" (app %s", v = fmt_value(json_object_get(answer, "app_id")));
        free(v);
        printf(", installation %s)", v = fmt_value(json_object_get(answer, "installation_id")));
        free(v);
    }
    printf("\n%-14s %s\n", "api", json_string_value(json_object_get(answer, "api_url")));
    json_t *expires = json_object_get(answer, "token_expires_in_s");
    if (json_object_get(answer, "app_id")) {
        if (json_is_integer(expires))
            printf("%-14s expires in %llds\n", "token", (long long)json_integer_value(expires));
        else
            printf("%-14s none yet\n", "token");
    }
    json_t *remaining = json_object_get(answer, "ratelimit_remaining");
    json_t *reset = json_object_get(answer, "ratelimit_reset_in_s");
    if (json_integer_value(remaining) >= 0) {
        printf("%-14s %lld requests left", "rate limit", (long long)json_integer_value(remaining));
        if (json_is_integer(reset))
            printf(", resets in %llds", (long long)json_integer_value(reset));
        printf("\n");
    } else {
        printf("%-14s not seen yet\n", "rate limit");
    }
    printf("%-14s %lld (retries %lld, failures %lld, rate limited %lld)\n", "requests",
           (long long)json_integer_value(json_object_get(answer, "requests")),
           (long long)json_integer_value(json_object_get(answer, "retries")),
           (long long)json_integer_value(json_object_get(answer, "failures")),
           (long long)json_integer_value(json_object_get(answer, "rate_limited")));
    printf("%-14s %s\n", "last error", (v = fmt_value(json_object_get(answer, "last_error"))));
    free(v);
    size_t i;
    json_t *scope;
    json_array_foreach(json_object_get(answer, "scopes"), i, scope)
    {
        printf("%-14s %s %s (runner group %lld)\n", i ? "" : "scopes",
               json_string_value(json_object_get(scope, "kind")),
               json_string_value(json_object_get(scope, "name")),
               (long long)json_integer_value(json_object_get(scope, "runner_group_id")));
    }
    /* Scale sets: the session id and the reason may carry the service's text: made
     * printable as table cells are. */
    json_t *set;
    json_array_foreach(json_object_get(answer, "scale_sets"), i, set)
    {
        char *why = fmt_value(json_object_get(set, "why"));
        char *session = fmt_value(json_object_get(set, "session_id"));
        char *name = fmt_value(json_object_get(set, "name"));
        char *pool = fmt_value(json_object_get(set, "pool"));
        char *const texts[] = {why, session, name, pool};
        for (size_t k = 0; k < 4; k++)
            if (texts[k])
                make_printable(texts[k]);
        printf("%-14s %s (pool %s, id %lld): %s, session %s, last message %lld, assigned jobs "
               "%lld, polls %lld, messages %lld, conflicts %lld%s%s\n",
               i ? "" : "scale sets", name, pool,
               (long long)json_integer_value(json_object_get(set, "id")),
               json_string_value(json_object_get(set, "state")), session,
               (long long)json_integer_value(json_object_get(set, "last_message_id")),
               (long long)json_integer_value(json_object_get(set, "assigned_jobs")),
               (long long)json_integer_value(json_object_get(set, "polls")),
               (long long)json_integer_value(json_object_get(set, "messages")),
               (long long)json_integer_value(json_object_get(set, "conflicts")),
               json_is_string(json_object_get(set, "why")) ? ": " : "",
               json_is_string(json_object_get(set, "why")) ? why : "");
        free(why);
        free(session);
        free(name);
        free(pool);
    }
}

static void print_health(json_t *answer)
{
    printf("hatcheryd %s, controller %s, up %llds\n",
           json_string_value(json_object_get(answer, "version")),
           json_string_value(json_object_get(answer, "controller_id")),
           (long long)json_integer_value(json_object_get(answer, "uptime_s")));
}

static void print_leader(json_t *answer)
{
    json_t *leader = json_object_get(answer, "leader");
    if (!json_object_get(answer, "lease")) {
        printf("no lease: %s\n", json_string_value(json_object_get(answer, "this")));
        return;
    }
    if (json_is_object(leader)) {
        time_t since = (time_t)(json_integer_value(json_object_get(leader, "since_ms")) / 1000);
        char when[32] = "?";
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime(&since));
        printf("leader: %s, epoch %lld, since %s (its lease ends in %.1f s unless renewed)\n",
               json_string_value(json_object_get(leader, "instance")),
               (long long)json_integer_value(json_object_get(leader, "epoch")), when,
               (double)json_integer_value(json_object_get(leader, "expires_in_ms")) / 1000.0);
    } else
        printf("leader: none (no instance holds an unexpired lease)\n");
    printf("%-40s %-9s %s\n", "INSTANCE", "ROLE", "LAST RENEWAL");
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(answer, "instances"), i, m)
    {
        char name[64];
        snprintf(name, sizeof(name), "%s%s", json_string_value(json_object_get(m, "instance")),
                 json_is_true(json_object_get(m, "this")) ? " (this)" : "");
        printf("%-40s %-9s %.1f s ago\n", name,
               json_is_true(json_object_get(m, "leading")) ? "leader" : "follower",
               (double)json_integer_value(json_object_get(m, "renewed_ago_ms")) / 1000.0);
    }
}

/* A usage error: one line, and where the whole help is. */
__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("hatchery: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (hatchery --help)\n", stderr);
    return EXIT_USAGE;
}

/* The options, anywhere on the line (getopt_long permutes): the global ones, the admin
 * commands' (admin_options in admin_protocol.h, as OPT_ADMIN + ADMIN_OPT_x) and
 * image-check's. */
enum {
    OPT_JSON = 'j',
    OPT_SOCKET = 's',
    OPT_HELP = 'h',
    OPT_VERSION = 'V',
    OPT_OUTPUT = 'o',
    OPT_FOLLOW_SHORT = 'f',
    OPT_NO_HEADERS = 255,
    OPT_ADMIN = 256,
    OPT_NOW = OPT_ADMIN + ADMIN_OPT_MAX,
    OPT_WARN_DAYS,
};
static const struct option fixed_options[] = {
    {"json", no_argument, NULL, OPT_JSON},
    {"socket", required_argument, NULL, OPT_SOCKET},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {"output", required_argument, NULL, OPT_OUTPUT},
    {"no-headers", no_argument, NULL, OPT_NO_HEADERS},
    {"now", required_argument, NULL, OPT_NOW},
    {"warn-days", required_argument, NULL, OPT_WARN_DAYS},
};
#define N_FIXED_OPTIONS (sizeof(fixed_options) / sizeof(fixed_options[0]))

/* getopt_long's table: the fixed options, then the admin ones, then the end. */
static void cli_options(struct option out[N_FIXED_OPTIONS + ADMIN_OPT_MAX + 1])
{
    memcpy(out, fixed_options, sizeof(fixed_options));
    for (int o = 0; o < ADMIN_OPT_MAX; o++)
        out[N_FIXED_OPTIONS + o] = (struct option){
            admin_options[o].name, admin_options[o].value ? required_argument : no_argument, NULL,
            OPT_ADMIN + o};
    out[N_FIXED_OPTIONS + ADMIN_OPT_MAX] = (struct option){0};
}

struct cli_args {
    const char *socket_path;
    bool as_json;
    const char *output;                /* -o's, as given */
    const char *values[ADMIN_OPT_MAX]; /* each admin option's value, as given */
    long limit;                        /* --limit's, checked */
    const char *now;
    long warn_days;
    unsigned given;       /* GIVEN(opt) for each option given that is not global */
    bool answered;        /* --help or --version: printed, nothing else to do */
    char problem[256];    /* the first usage error met, said once the command is known */
    const char *words[4]; /* the command and its operands, in order */
    size_t n_words;
};

/* An admin option's bit is its ADMIN_OPT() bit, so that a form's `options` reads as one. */
#define GIVEN(o) (1u << ((o)-OPT_ADMIN))

static const char *option_name(int opt)
{
    if (opt >= OPT_ADMIN && opt < OPT_ADMIN + ADMIN_OPT_MAX)
        return admin_options[opt - OPT_ADMIN].name;
    for (size_t i = 0; i < N_FIXED_OPTIONS; i++)
        if (fixed_options[i].val == opt)
            return fixed_options[i].name;
    return "?";
}

/* Notes the first usage error in `a`: parsing goes on, so that the command is known when
 * it is said (image-check's exit statuses are its own). */
__attribute__((format(printf, 2, 3))) static void problem(struct cli_args *a, const char *fmt, ...)
{
    if (a->problem[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->problem, sizeof(a->problem), fmt, ap);
    va_end(ap);
}

static void admin_option(struct cli_args *a, int o, const char *value)
{
    a->values[o] = value ? value : "";
    if (o == ADMIN_OPT_LIMIT) {
        char *end = NULL;
        a->limit = strtol(value, &end, 10);
        if (*end || a->limit <= 0 || a->limit > ADMIN_MAX_LIST_ROWS)
            problem(a, "--limit takes 1..%d", ADMIN_MAX_LIST_ROWS);
    }
}

/* Fills `a` from argv, `answered` set when --help or --version printed all there is to
 * print, `problem` when the line is not a valid one. */
static void parse_args(int argc, char **argv, struct cli_args *a)
{
    struct option options[N_FIXED_OPTIONS + ADMIN_OPT_MAX + 1];
    cli_options(options);
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":hVo:f", options, NULL)) != -1) {
        char *end = NULL;
        if (opt == OPT_FOLLOW_SHORT)
            opt = OPT_ADMIN + ADMIN_OPT_FOLLOW;
        if (opt >= OPT_ADMIN && opt < OPT_ADMIN + ADMIN_OPT_MAX)
            admin_option(a, opt - OPT_ADMIN, optarg);
        switch (opt) {
        case OPT_JSON:
            a->as_json = true;
            break;
        case OPT_SOCKET:
            a->socket_path = optarg;
            break;
        case OPT_HELP:
            usage(stdout);
            a->answered = true;
            return;
        case OPT_VERSION:
            printf("hatchery %s\n", HATCHERY_VERSION);
            a->answered = true;
            return;
        case OPT_OUTPUT:
            a->output = optarg;
            if (strcmp(optarg, "json") == 0)
                a->as_json = true;
            else if (strcmp(optarg, "wide") == 0)
                output.format = OUTPUT_WIDE;
            else if (strcmp(optarg, "name") == 0)
                output.format = OUTPUT_NAME;
            else if (strcmp(optarg, "table") != 0)
                problem(a, "-o takes table, wide, name or json, not '%s'", optarg);
            break;
        case OPT_NO_HEADERS:
            output.no_headers = true;
            break;
        case OPT_NOW:
            a->now = optarg;
            break;
        case OPT_WARN_DAYS:
            a->warn_days = strtol(optarg, &end, 10);
            if (*end || a->warn_days < 0 || a->warn_days > 365)
                problem(a, "--warn-days takes 0..365");
            break;
        case ':':
            problem(a, "%s needs a value", argv[optind - 1]);
            break;
        case '?':
            problem(a, "unknown option %s", argv[optind - 1]);
            break;
        default:
            break;
        }
        if (opt >= OPT_ADMIN)
            a->given |= GIVEN(opt);
    }
    for (int i = optind; i < argc; i++) {
        if (a->n_words == sizeof(a->words) / sizeof(a->words[0]))
            problem(a, "unexpected argument %s", argv[i]);
        else
            a->words[a->n_words++] = argv[i];
    }
}

/* Whether the line takes only the options `allowed`, and `min`..`max` operands after its
 * first `skip` words (`runners show`: 2). */
static int check_shape(const struct cli_args *a, const char *name, unsigned allowed, size_t skip,
                       size_t min, size_t max, const char *operands)
{
    for (int o = OPT_ADMIN; o <= OPT_WARN_DAYS; o++)
        if ((a->given & GIVEN(o)) && !(allowed & GIVEN(o)))
            return usage_error("%s takes no --%s", name, option_name(o));
    size_t n = a->n_words - skip;
    if (n < min)
        return usage_error("%s needs %s", name, operands);
    if (n > max)
        return usage_error("%s: unexpected argument %s", name, a->words[skip + max]);
    return EXIT_OK;
}

/* image-check runs here, without the daemon; its exit statuses are its own. */
static int run_image_check(const struct cli_args *a)
{
    if (check_shape(a, "image-check", GIVEN(OPT_NOW) | GIVEN(OPT_WARN_DAYS), 1, 2, 2,
                    "IMAGE and RELEASES") != EXIT_OK) {
        fprintf(stderr, "usage: hatchery image-check IMAGE RELEASES [--now ISO] [--warn-days N]\n");
        return RUNNER_BAD_INPUT;
    }
    time_t now = time(NULL);
    if (a->now && (now = runner_version_time(a->now)) < 0) {
        fprintf(stderr,
                "hatchery: image-check: --now takes a UTC time like 2026-11-27T00:00:00Z\n");
        return RUNNER_BAD_INPUT;
    }
    const char *paths[2] = {a->words[1], a->words[2]};
    return image_check(paths, now, (int)a->warn_days);
}

/* The form of `command` that `words` (the command's own first) are: the one whose fixed
 * word comes next, else the one without. NULL when the command has none. */
static const struct admin_form *form_of(enum admin_command command, const char *const *words,
                                        size_t n_words)
{
    const struct admin_form *plain = NULL;
    for (size_t f = 0; f < ADMIN_N_FORMS; f++) {
        const struct admin_form *form = &admin_forms[f];
        if (form->command != command)
            continue;
        if (!form->sub)
            plain = form;
        else if (n_words > 1 && strcmp(words[1], form->sub) == 0)
            return form;
    }
    return plain;
}

/* The values `jobs --status` takes, as a sentence: "a, b or c". */
static void statuses_sentence(char *out, size_t size)
{
    size_t n = 0, count = 0;
    while (admin_job_statuses[count])
        count++;
    out[0] = 0;
    for (size_t i = 0; i < count && n < size; i++)
        n += (size_t)snprintf(out + n, size - n, "%s%s",
                              i == 0           ? ""
                              : i + 1 == count ? " or "
                                               : ", ",
                              admin_job_statuses[i]);
}

/* Whether the command line fits `form` (its words and options, and the values known
 * here, so that a typo is a usage error, not the daemon's refusal). EXIT_OK, or the usage
 * error's status (said already). */
static int check_form(const struct cli_args *a, const struct admin_form *form)
{
    char name[64], operand[32];
    snprintf(name, sizeof(name), "%s%s%s", a->words[0], form->sub ? " " : "",
             form->sub ? form->sub : "");
    snprintf(operand, sizeof(operand), "a %s", form->operand ? form->operand : "");
    size_t want = form->operand ? 1 : 0;
    int r = check_shape(a, name, form->options, form->sub ? 2 : 1, want, want, operand);
    const char *status = a->values[ADMIN_OPT_STATUS];
    bool known = r != EXIT_OK || !status;
    for (size_t k = 0; !known && admin_job_statuses[k]; k++)
        known = strcmp(status, admin_job_statuses[k]) == 0;
    if (r == EXIT_OK && !form->listing && (output.format != OUTPUT_TABLE || output.no_headers))
        r = usage_error("%s takes no %s%s (only the listings jobs, pools, hosts and runners)", name,
                        output.no_headers ? "--no-headers" : "-o ",
                        output.no_headers ? "" : a->output);
    if (r == EXIT_OK && a->as_json && (a->given & ADMIN_OPT(ADMIN_OPT_FOLLOW)))
        r = usage_error("%s: -f prints the log as it comes, not as JSON", name);
    if (!known) {
        char statuses[128];
        statuses_sentence(statuses, sizeof(statuses));
        r = usage_error("%s: --status must be %s, not '%s'", name, statuses, status);
    }
    return r;
}

/* The admin request for the command line, as its form says (admin_protocol.h). */
static json_t *build_request(const struct cli_args *a, const struct admin_form *form)
{
    json_t *request = json_pack("{s:s}", ADMIN_KEY_CMD, admin_command_names[form->command]);
    if (form->operand)
        json_object_set_new(request, form->operand_key, json_string(a->words[form->sub ? 2 : 1]));
    if (form->implies_all)
        json_object_set_new(request, ADMIN_KEY_ALL, json_true());
    for (int o = 0; o < ADMIN_OPT_MAX; o++) {
        if (!(a->given & ADMIN_OPT(o)) || o == ADMIN_OPT_FOLLOW) /* follow_logs() sends it */
            continue;
        json_t *value = !admin_options[o].value ? json_true()
                        : o == ADMIN_OPT_LIMIT  ? json_integer(a->limit)
                                                : json_string(a->values[o]);
        json_object_set_new(request, admin_options[o].key, value);
    }
    return request;
}

static void print_rotate(json_t *answer)
{
    json_t *retired = json_object_get(answer, "retired");
    if (!json_array_size(retired))
        printf("no idle runner of a replaced image\n");
    print_names("outdated runners", "retiring", retired);
}

/* How each command's answer is printed for people. */
static void (*const printers[ADMIN_COMMAND_MAX])(json_t *) = {
    [ADMIN_JOBS] = print_jobs,         [ADMIN_POOLS] = print_pools,
    [ADMIN_CAPACITY] = print_capacity, [ADMIN_HOSTS] = print_hosts,
    [ADMIN_RUNNERS] = print_runners,   [ADMIN_DRAIN] = print_done,
    [ADMIN_UNDRAIN] = print_done,      [ADMIN_DELETE] = print_done,
    [ADMIN_LOGS] = print_logs,         [ADMIN_GITHUB] = print_github,
    [ADMIN_RELOAD] = print_reload,     [ADMIN_HEALTH] = print_health,
    [ADMIN_ROTATE] = print_rotate,     [ADMIN_LEADER] = print_leader,
};

static void (*printer_of(const struct admin_form *form))(json_t *)
{
    /* `runners show` answers with one runner, not a table of them. */
    return form->command == ADMIN_RUNNERS && form->sub ? print_runner : printers[form->command];
}

static void print_json(json_t *value)
{
    char *text = value ? json_dumps(value, JSON_INDENT(2)) : NULL;
    puts(text ? text : "{}");
    free(text);
}

/* The daemon's answer (or why there is none, status `rc`) as the user asked for it. */
static int report(const char *cmd, bool as_json, int rc, json_t *answer, void (*print)(json_t *))
{
    if (rc != EXIT_OK) {
        /* A script asked for JSON: it gets JSON, the error and the exit status in it. */
        if (as_json) {
            json_t *err = json_pack("{s:b, s:s, s:i}", "ok", 0, "error", call_error, "exit", rc);
            if (err)
                print_json(err);
            else
                puts("{\"ok\": false}");
            json_decref(err);
        }
        return rc;
    }
    if (!json_is_true(json_object_get(answer, "ok"))) {
        const char *e = json_string_value(json_object_get(answer, "error"));
        if (as_json)
            print_json(answer);
        fprintf(stderr, "hatchery: %s: %s\n", cmd, e ? e : "failed");
        return EXIT_DAEMON_ERROR;
    }
    if (as_json)
        print_json(answer);
    else
        print(answer);
    return EXIT_OK;
}

/* ---- completion ----------------------------------------------------------------------
 * `hatchery __complete WORD… CURRENT` prints what may come in place of CURRENT (the word
 * being typed, maybe empty) after the words before it, one per line: the shells' scripts
 * (deploy/completion/) are thin callers of this, so that commands, forms and options
 * come from admin_protocol.h's table and runner, host and pool names from the daemon's
 * JSON answers. A first line ":files" asks the shell for file names as well. */

/* `candidate`, one a line, when it begins with what is typed. */
static void print_if(const char *candidate, const char *prefix)
{
    if (strncmp(candidate, prefix, strlen(prefix)) == 0)
        puts(candidate);
}

/* The names the daemon knows of a kind, from its answer's "name" fields; none when it is
 * away (nothing is said on the terminal while someone types). */
static void print_daemon_names(const char *socket_path, enum admin_names kind, const char *prefix)
{
    static const struct {
        enum admin_command command;
        const char *list;
    } lists[] = {
        [ADMIN_NAMES_RUNNERS] = {ADMIN_RUNNERS, "runners"},
        [ADMIN_NAMES_HOSTS] = {ADMIN_HOSTS, "hosts"},
        [ADMIN_NAMES_POOLS] = {ADMIN_POOLS, "pools"},
    };
    if (kind == ADMIN_NAMES_JOB_STATUS) {
        for (size_t i = 0; admin_job_statuses[i]; i++)
            print_if(admin_job_statuses[i], prefix);
        return;
    }
    if (kind != ADMIN_NAMES_RUNNERS && kind != ADMIN_NAMES_HOSTS && kind != ADMIN_NAMES_POOLS)
        return;
    auto_json json_t *request =
        json_pack("{s:s}", ADMIN_KEY_CMD, admin_command_names[lists[kind].command]);
    if (kind == ADMIN_NAMES_RUNNERS)
        json_object_set_new(request, ADMIN_KEY_ALL, json_true());
    auto_json json_t *answer = NULL;
    json_t *row;
    size_t i;
    auto_close int saved = dup(STDERR_FILENO);
    auto_close int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0)
        dup2(null, STDERR_FILENO);
    if (request && call(socket_path, request, &answer) == EXIT_OK)
        json_array_foreach(json_object_get(answer, lists[kind].list), i, row)
        {
            const char *name = json_string_value(json_object_get(row, "name"));
            if (name)
                print_if(name, prefix);
        }
    if (saved >= 0)
        dup2(saved, STDERR_FILENO);
}

static void print_options(unsigned options, bool global, bool listing, const char *prefix)
{
    char option[64];
    for (int o = 0; o < ADMIN_OPT_MAX; o++)
        if (options & ADMIN_OPT(o)) {
            snprintf(option, sizeof(option), "--%s", admin_options[o].name);
            print_if(option, prefix);
        }
    print_if("--json", prefix);
    if (listing) {
        print_if("--output", prefix);
        print_if("--no-headers", prefix);
    }
    if (global) {
        print_if("--socket", prefix);
        print_if("--help", prefix);
        print_if("--version", prefix);
    }
}

/* The admin option `word` names (`--pool`, `--pool=x`), or -1. */
static int admin_option_named(const char *word)
{
    if (strncmp(word, "--", 2) != 0)
        return -1;
    size_t len = strcspn(word + 2, "=");
    for (int o = 0; o < ADMIN_OPT_MAX; o++)
        if (strlen(admin_options[o].name) == len &&
            strncmp(word + 2, admin_options[o].name, len) == 0)
            return o;
    return -1;
}

static int complete(int n, char **words)
{
    const char *socket_path = getenv("HATCHERY_SOCKET");
    if (!socket_path || !*socket_path)
        socket_path = DEFAULT_SOCKET;
    const char *cur = n > 0 ? words[n - 1] : "";
    const char *positional[4];
    size_t n_positional = 0;
    int value_of = -1; /* the admin option whose value `cur` is */
    bool socket_value = false, output_value = false, value_taken = false;
    for (int i = 0; i < n - 1; i++) {
        const char *w = words[i];
        int o = admin_option_named(w);
        bool format = strcmp(w, "-o") == 0 || strcmp(w, "--output") == 0;
        bool takes = (o >= 0 && admin_options[o].value) || strcmp(w, "--socket") == 0 ||
                     strcmp(w, "--now") == 0 || strcmp(w, "--warn-days") == 0 || format;
        if (strncmp(w, "--socket=", 9) == 0)
            socket_path = w + 9;
        if (w[0] == '-' && takes && !strchr(w, '=')) {
            if (i + 1 == n - 1) {
                value_of = o;
                socket_value = strcmp(w, "--socket") == 0;
                output_value = format;
                value_taken = true;
            } else if (strcmp(w, "--socket") == 0) {
                socket_path = words[i + 1];
            }
            i++;
        } else if (w[0] != '-' && n_positional < sizeof(positional) / sizeof(positional[0])) {
            positional[n_positional++] = w;
        }
    }
    if (value_taken) {
        static const char *const formats[] = {"table", "wide", "name", "json"};
        for (size_t f = 0; output_value && f < sizeof(formats) / sizeof(formats[0]); f++)
            print_if(formats[f], cur);
        if (socket_value)
            puts(":files");
        else if (value_of >= 0)
            print_daemon_names(socket_path, admin_options[value_of].names, cur);
        return EXIT_OK;
    }
    if (n_positional == 0) {
        for (int c = 0; c < ADMIN_COMMAND_MAX; c++)
            print_if(admin_command_names[c], cur);
        print_if("image-check", cur);
        print_options(0, true, false, cur);
        return EXIT_OK;
    }
    if (strcmp(positional[0], "image-check") == 0) {
        if (n_positional < 3)
            puts(":files");
        print_if("--now", cur);
        print_if("--warn-days", cur);
        return EXIT_OK;
    }
    enum admin_command command = admin_command_parse(positional[0]);
    const struct admin_form *form =
        command == ADMIN_COMMAND_MAX ? NULL : form_of(command, positional, n_positional);
    if (!form)
        return EXIT_OK;
    size_t operands = n_positional - (form->sub ? 2 : 1);
    if (!form->sub && n_positional == 1)
        for (size_t f = 0; f < ADMIN_N_FORMS; f++)
            if (admin_forms[f].command == command && admin_forms[f].sub)
                print_if(admin_forms[f].sub, cur);
    if (form->operand && operands == 0)
        print_daemon_names(socket_path, form->operand_names, cur);
    print_options(form->options, false, form->listing, cur);
    return EXIT_OK;
}

/* `logs -f`: the log, then what it gains each second, until the runner ended and nothing
 * more came (or the daemon goes away: its status is the exit status). */
static int follow_logs(const struct cli_args *a, json_t *request)
{
    json_int_t since = -1;
    for (;;) {
        if (since >= 0)
            json_object_set_new(request, ADMIN_KEY_SINCE, json_integer(since));
        auto_json json_t *answer = NULL;
        int rc = call(a->socket_path, request, &answer);
        if (rc != EXIT_OK || !json_is_true(json_object_get(answer, "ok")))
            return report(a->words[0], false, rc, answer, print_logs);
        if (since < 0)
            print_logs(answer);
        else if (json_string_value(json_object_get(answer, "log")))
            fputs(json_string_value(json_object_get(answer, "log")), stdout);
        fflush(stdout);
        json_int_t end = json_integer_value(json_object_get(answer, "end"));
        bool fresh = end != since;
        since = end;
        if (!json_is_true(json_object_get(answer, "live")) && !fresh)
            return EXIT_OK;
        poll(NULL, 0, 1000);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "__complete") == 0)
        return complete(argc - 2, argv + 2);
    struct cli_args a = {.socket_path = getenv("HATCHERY_SOCKET"), .warn_days = 7};
    if (!a.socket_path || !*a.socket_path)
        a.socket_path = DEFAULT_SOCKET;
    parse_args(argc, argv, &a);
    if (a.answered)
        return EXIT_OK;
    if (a.problem[0]) {
        usage_error("%s", a.problem);
        /* image-check's exit statuses are its own: 2 is "refused" there, bad input is 3. */
        return a.n_words && strcmp(a.words[0], "image-check") == 0 ? RUNNER_BAD_INPUT : EXIT_USAGE;
    }
    if (a.n_words == 0)
        return usage_error("which command?");
    if (strcmp(a.words[0], "image-check") == 0)
        return run_image_check(&a);
    enum admin_command command = admin_command_parse(a.words[0]);
    const struct admin_form *form =
        command == ADMIN_COMMAND_MAX ? NULL : form_of(command, a.words, a.n_words);
    if (!form)
        return usage_error("unknown command '%s'", a.words[0]);
    int r = check_form(&a, form);
    if (r != EXIT_OK)
        return r;
    auto_json json_t *request = build_request(&a, form);
    if (a.given & ADMIN_OPT(ADMIN_OPT_FOLLOW))
        return follow_logs(&a, request);
    auto_json json_t *answer = NULL;
    int rc = call(a.socket_path, request, &answer);
    return report(a.words[0], a.as_json, rc, answer, printer_of(form));
}
