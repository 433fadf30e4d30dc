/* A scope's Actions service: the auth chain (registration token, runner-registration,
 * admin token renewed when under 60 s remain, as actions/scaleset's updateTokenIfNeeded)
 * and the calls made under it. */
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "log.h"
#include "wall_clock.h"

#define ADMIN_RENEW_MARGIN_MS 60000
#define API_VERSION           "api-version=6.0-preview"

struct ss_call {
    struct ss_service *svc;
    char method[8];
    char *url;
    json_t *body;
    struct secret *token; /* a copy of the caller's, or NULL: the admin token */
    char *extra_header;
    long timeout_ms;
    int max_retries;
    bool renewed_after_401;
    github_json_cb cb;
    void *data;
    struct ss_call *next;
};

static void call_free(struct ss_call *c)
{
    free(c->url);
    json_decref(c->body);
    secret_free(c->token);
    free(c->extra_header);
    free(c);
}

static void call_fail(struct ss_call *c, int err, const char *message)
{
    struct github_response res = {.err = err, .message = message};
    c->cb(c->data, &res);
    call_free(c);
}

static void call_send(struct ss_call *c);

/* ---- the admin token ------------------------------------------------------------------ */

/* The `exp` of a JWT, in ms; 0 when it cannot be read. The token is not verified (the
 * service does that): only its lifetime is wanted, as the library reads it. */
static int64_t jwt_exp_ms(const struct secret *token)
{
    char *text = NULL;
    if (secret_reveal(token, "", &text) < 0)
        return 0;
    int64_t exp = 0;
    char *dot1 = strchr(text, '.'), *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
    size_t n = dot2 ? (size_t)(dot2 - dot1 - 1) : 0;
    if (n > 0 && n < 4096) {
        char b64[4100];
        memcpy(b64, dot1 + 1, n);
        for (size_t i = 0; i < n; i++)
            b64[i] = b64[i] == '-' ? '+' : b64[i] == '_' ? '/' : b64[i];
        while (n % 4)
            b64[n++] = '=';
        unsigned char raw[3100];
        int len = EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)n);
        /* EVP_DecodeBlock counts the padding's zero bytes: the JSON parser stops at them. */
        json_t *claims =
            len > 0 ? json_loadb((const char *)raw, (size_t)len, JSON_DISABLE_EOF_CHECK, NULL)
                    : NULL;
        json_t *e = json_object_get(claims, "exp");
        if (json_is_integer(e) && json_integer_value(e) > 0)
            exp = json_integer_value(e) * 1000;
        json_decref(claims);
    }
    secret_reveal_free(text);
    return exp;
}

static void release_waiting(struct ss_service *svc, int err, const char *message)
{
    struct ss_call *c = svc->waiting;
    svc->waiting = NULL;
    while (c) {
        struct ss_call *next = c->next;
        c->next = NULL;
        if (err < 0)
            call_fail(c, err, message);
        else
            call_send(c);
        c = next;
    }
}

struct refresh {
    struct ss_service *svc;
    struct secret *registration;
};

static void refresh_done(struct refresh *f, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refresh_done(struct refresh *f, int err, const char *fmt, ...)
{
    struct ss_service *svc = f->svc;
    struct scalesets *sets = svc->sets;
    secret_free(f->registration);
    free(f);
    svc->refreshing = false;
    if (err < 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(svc->last_error, sizeof(svc->last_error), fmt, ap);
        va_end(ap);
        log_warn("scaleset.auth_failed", "config_url=%s error=\"%s\"", svc->config_url,
                 svc->last_error);
    } else {
        svc->last_error[0] = 0;
    }
    release_waiting(svc, err, svc->last_error);
    sets->pending--;
    sets->request_ended(sets);
}

static void on_admin_connection(void *data, const struct github_response *res)
{
    struct refresh *f = data;
    struct ss_service *svc = f->svc;
    const char *url = json_string_value(json_object_get(res->body, "url"));
    const char *token = json_string_value(json_object_get(res->body, "token"));
    if (res->err < 0) {
        refresh_done(f, res->err, "runner-registration: %s", res->message);
        return;
    }
    if (!url || !url[0] || !token || !token[0]) {
        refresh_done(f, -EBADMSG, "runner-registration answered without %s",
                     !url || !url[0] ? "the service URL" : "a token");
        return;
    }
    if (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0) {
        refresh_done(f, -EBADMSG, "runner-registration gave a service URL that is not HTTP(S)");
        return;
    }
    struct secret *admin = NULL;
    if (secret_from_bytes(token, strlen(token), &admin) < 0) {
        refresh_done(f, -ENOMEM, "out of memory");
        return;
    }
    int64_t exp = jwt_exp_ms(admin);
    if (exp <= 0) {
        secret_free(admin);
        refresh_done(f, -EBADMSG, "the admin token is not a JWT with an expiry");
        return;
    }
    size_t n = strlen(url);
    char *u = malloc(n + 2);
    if (!u) {
        secret_free(admin);
        refresh_done(f, -ENOMEM, "out of memory");
        return;
    }
    snprintf(u, n + 2, "%s%s", url, url[n - 1] == '/' ? "" : "/");
    free(svc->service_url);
    svc->service_url = u;
    secret_free(svc->admin_token);
    svc->admin_token = admin;
    svc->admin_expires_ms = exp;
    svc->refreshes++;
    log_info("scaleset.token_refreshed", "config_url=%s expires_in_s=%lld", svc->config_url,
             (long long)((exp - wall_clock_ms()) / 1000));
    refresh_done(f, 0, "%s", "");
}

static void on_registration_token(void *data, const struct github_response *res)
{
    struct refresh *f = data;
    struct ss_service *svc = f->svc;
    const char *token = json_string_value(json_object_get(res->body, "token"));
    if (res->err < 0 || !token || !token[0]) {
        refresh_done(f, res->err < 0 ? res->err : -EBADMSG, "registration token: %s",
                     res->err < 0 ? res->message : "no token in the answer");
        return;
    }
    if (secret_from_bytes(token, strlen(token), &f->registration) < 0) {
        refresh_done(f, -ENOMEM, "out of memory");
        return;
    }
    json_t *body = json_pack("{s:s, s:s}", "url", svc->config_url, "runner_event", "register");
    struct github_call_options o = {.auth = f->registration,
                                    .auth_scheme = "RemoteAuth",
                                    .accept = "application/json",
                                    .max_retries = -1};
    int r =
        body ? github_request_with(svc->sets->deps.github, "POST", "/actions/runner-registration",
                                   body, &o, on_admin_connection, f)
             : -ENOMEM;
    json_decref(body);
    if (r < 0)
        refresh_done(f, r, "runner-registration: %s", strerror(-r));
}

static void refresh_start(struct ss_service *svc)
{
    if (svc->refreshing)
        return;
    struct refresh *f = calloc(1, sizeof(*f));
    if (!f) {
        release_waiting(svc, -ENOMEM, "out of memory");
        return;
    }
    f->svc = svc;
    svc->refreshing = true;
    svc->sets->pending++;
    char path[512];
    int r =
        github_scope_path(svc->scope, "/actions/runners/registration-token", path, sizeof(path));
    if (r == 0)
        r = github_request(svc->sets->deps.github, "POST", path, NULL, on_registration_token, f);
    if (r < 0)
        refresh_done(f, r, "registration token: %s", strerror(-r));
}

void ss_service_forget_token(struct ss_service *svc)
{
    secret_free(svc->admin_token);
    svc->admin_token = NULL;
    svc->admin_expires_ms = 0;
}

/* ---- calls ---------------------------------------------------------------------------- */

static void on_answer(void *data, const struct github_response *res)
{
    struct ss_call *c = data;
    struct ss_service *svc = c->svc;
    /* This request still counts until its callback has returned: a callback may stop the
     * collection, and the stop cancel (and so answer) the other requests at once. */
    struct scalesets *sets = svc->sets;
    /* A 401 under the admin token: it was revoked or expired early; renewed once. */
    if (res->status == 401 && !c->token && !c->renewed_after_401 && !sets->stopped) {
        c->renewed_after_401 = true;
        ss_service_forget_token(svc);
        call_send(c);
    } else {
        c->cb(c->data, res);
        call_free(c);
    }
    sets->pending--;
    sets->request_ended(sets);
}

static void call_send(struct ss_call *c)
{
    struct ss_service *svc = c->svc;
    bool absolute = strncmp(c->url, "http://", 7) == 0 || strncmp(c->url, "https://", 8) == 0;
    if (!absolute &&
        (!svc->admin_token || svc->admin_expires_ms - ADMIN_RENEW_MARGIN_MS < wall_clock_ms())) {
        c->next = svc->waiting;
        svc->waiting = c;
        refresh_start(svc);
        return;
    }
    char *url = NULL;
    if (absolute) {
        url = strdup(c->url);
    } else {
        size_t n = strlen(svc->service_url) + strlen(c->url) + sizeof(API_VERSION) + 2;
        url = malloc(n);
        if (url)
            snprintf(url, n, "%s%s%c" API_VERSION, svc->service_url, c->url,
                     strchr(c->url, '?') ? '&' : '?');
    }
    if (!url) {
        call_fail(c, -ENOMEM, "out of memory");
        return;
    }
    struct github_call_options o = {.auth = c->token ? c->token : svc->admin_token,
                                    .auth_scheme = "Bearer",
                                    .accept = "application/json; api-version=6.0-preview",
                                    .extra_header = c->extra_header,
                                    .timeout_ms = c->timeout_ms,
                                    .max_retries = c->max_retries};
    svc->sets->pending++;
    int r = github_request_with(svc->sets->deps.github, c->method, url, c->body, &o, on_answer, c);
    free(url);
    if (r < 0) {
        svc->sets->pending--;
        call_fail(c, r, "the request could not be made");
    }
}

int ss_call(struct ss_service *svc, const struct ss_request *req, github_json_cb cb, void *data)
{
    if (svc->sets->stopped)
        return -ECANCELED;
    struct ss_call *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->svc = svc;
    snprintf(c->method, sizeof(c->method), "%s", req->method);
    c->url = strdup(req->url);
    c->body = json_incref(req->body);
    c->extra_header = req->extra_header ? strdup(req->extra_header) : NULL;
    c->timeout_ms = req->timeout_ms;
    c->max_retries = req->max_retries;
    c->cb = cb;
    c->data = data;
    int r = 0;
    if (req->token) {
        char *t = NULL;
        r = secret_reveal(req->token, "", &t);
        if (r == 0)
            r = secret_from_bytes(t, strlen(t), &c->token);
        secret_reveal_free(t);
    }
    if (r < 0 || !c->url || (req->extra_header && !c->extra_header)) {
        call_free(c);
        return r < 0 ? r : -ENOMEM;
    }
    call_send(c);
    return 0;
}

void ss_service_free(struct ss_service *svc)
{
    release_waiting(svc, -ECANCELED, "stopping");
    free(svc->service_url);
    secret_free(svc->admin_token);
    svc->admin_token = NULL;
    svc->service_url = NULL;
}

int scaleset_config_url(const char *api_url, const struct github_scope *scope, char *out,
                        size_t size)
{
    /* The scope's page on the web: github.com/OWNER/NAME, github.com/ORG,
     * github.com/enterprises/SLUG (actions/scaleset config.go). */
    const char *path = github_scope_name(scope);
    const char *kind = scope->enterprise ? "enterprises/" : "";
    char base[512];
    int n;
    if (!path)
        return -EINVAL;
    const char *host = strstr(api_url, "://");
    size_t alen = strlen(api_url);
    while (alen > 0 && api_url[alen - 1] == '/')
        alen--;
    if (host && strncmp(host + 3, "api.", 4) == 0) {
        /* https://api.github.com, https://api.SUBDOMAIN.ghe.com */
        n = snprintf(base, sizeof(base), "%.*s%.*s", (int)(host + 3 - api_url), api_url,
                     (int)(alen - (size_t)(host + 7 - api_url)), host + 7);
    } else if (alen >= 7 && strncmp(api_url + alen - 7, "/api/v3", 7) == 0) {
        n = snprintf(base, sizeof(base), "%.*s", (int)(alen - 7), api_url); /* GHES */
    } else {
        n = snprintf(base, sizeof(base), "%.*s", (int)alen, api_url);
    }
    if (n < 0 || (size_t)n >= sizeof(base))
        return -ENAMETOOLONG;
    n = snprintf(out, size, "%s/%s%s", base, kind, path);
    return n > 0 && (size_t)n < size ? 0 : -ENAMETOOLONG;
}
