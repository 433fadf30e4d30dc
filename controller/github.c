/* GitHub REST transport: libcurl multi on libuv, auth, retries, rate limits; see github.h. */
#define _GNU_SOURCE /* strptime, timegm */
#include "github.h"

#include <ctype.h>
#include <stdarg.h>
#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <errno.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "hatchery/limits.h"
#include "lease.h"
#include "log.h"
#include "textbuf.h"
#include "wall_clock.h"

const char *const github_auth_mode_names[GITHUB_AUTH_MODE_MAX] = {
    [GITHUB_AUTH_APP] = "app",
    [GITHUB_AUTH_TOKEN] = "token",
};

/* Refresh an installation token this long before GitHub says it expires. */
#define TOKEN_REFRESH_MARGIN_S 300
#define BACKOFF_BASE_MS        250
/* At most this many requests are handed to curl at once (twice its connections to one
 * host); the rest wait their turn, in order, with no handle. GitHub asks integrators not to
 * send many requests at once (its secondary rate limits), and a request handed to curl
 * costs a handle and a 16 KiB receive buffer: 10,000 queued jobs asking for their JIT
 * configs together held about 60 MiB of them, which the heap kept after. */
#define MAX_CALLS_SENDING 16

enum call_auth {
    CALL_AUTH_TOKEN, /* installation token or configured token */
    CALL_AUTH_JWT,   /* App JWT: /app/... endpoints and the installation lookup */
    CALL_AUTH_GIVEN, /* the caller's own (github_request_with): fixed_auth */
    CALL_AUTH_MAX,
};

struct call {
    struct github_client *client;
    char method[8];
    char *url;
    char *body;
    enum call_auth auth;
    int attempt;
    bool refreshed_after_401;
    CURL *easy;
    struct curl_slist *headers;
    char *auth_header; /* revealed secret: wiped on free */
    char *fixed_auth;  /* CALL_AUTH_GIVEN's header, revealed once: wiped on free */
    char *accept;      /* "Accept: …" other than GitHub's, or NULL */
    char *extra_header;
    long timeout_ms; /* the client's unless set */
    int max_retries; /* the client's unless set */
    struct textbuf response;
    bool too_large;
    uv_timer_t timer; /* backoff and rate-limit waits */
    bool timer_open;
    github_json_cb cb;
    void *data;
    struct call *prev, *next;  /* client->calls: everything alive */
    struct call *next_waiting; /* client->token_waiters */
    bool queued;               /* in client->queue: waits for one of the sending slots */
    struct call *queue_prev, *queue_next;
};

struct poll_ctx {
    uv_poll_t poll;
    curl_socket_t fd;
    struct github_client *client;
};

struct github_client {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t curl_timer;
    char *api_url;
    char api_origin[256]; /* scheme://host[:port] of api_url, for pagination links */
    char *user_agent;
    char *ca_file;
    enum github_auth_mode auth;
    int64_t app_id;
    EVP_PKEY *app_key;
    int64_t installation_id;
    struct secret *token; /* installation token, or the configured token */
    int64_t token_expires_at;
    bool token_fetching;
    struct call *token_waiters;
    char
        *lookup_path; /* the scope's installation: /repos/…/installation, /orgs/…, /enterprises/… */
    long timeout_ms;
    int max_retries;
    size_t max_response_bytes;
    long max_backoff_ms;
    int64_t paused_until_ms; /* rate limited: nothing new goes out before this */
    struct call *calls;
    int sending; /* calls holding a curl handle: at most MAX_CALLS_SENDING */
    struct call *queue_head, *queue_tail;
    int queued;
    struct github_stats stats;
    char last_error[256];
    int64_t last_error_at;
    bool closing;
    int handles_open;
};

static void set_last_error(struct github_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_last_error(struct github_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof(c->last_error), fmt, ap);
    va_end(ap);
    c->last_error_at = wall_clock_ms() / 1000;
}

/* ---- JWT ---------------------------------------------------------------------------- */

static int base64url(const unsigned char *in, size_t len, struct textbuf *out)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        char chunk[4] = {alphabet[v >> 18 & 63], alphabet[v >> 12 & 63], alphabet[v >> 6 & 63],
                         alphabet[v & 63]};
        size_t n = len - i >= 3 ? 4 : len - i + 1;
        textbuf_append(out, chunk, n);
    }
    return out->error;
}

int github_app_jwt(const struct github_client *c, int64_t now, struct secret **ret_jwt)
{
    if (c->auth != GITHUB_AUTH_APP || !c->app_key)
        return -EINVAL;
    static const char header[] = "{\"alg\":\"RS256\",\"typ\":\"JWT\"}";
    char claims[128];
    /* GitHub's advice: iat 60 s in the past against clock drift; exp at most 10 min on. */
    int n = snprintf(claims, sizeof(claims), "{\"iat\":%lld,\"exp\":%lld,\"iss\":%lld}",
                     (long long)(now - 60), (long long)(now - 60 + 600), (long long)c->app_id);
    struct textbuf buf;
    textbuf_init(&buf, 4096);
    base64url((const unsigned char *)header, sizeof(header) - 1, &buf);
    textbuf_append(&buf, ".", 1);
    base64url((const unsigned char *)claims, (size_t)n, &buf);
    unsigned char sig[1024];
    size_t sig_len = sizeof(sig);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int ok = md && buf.error == 0 &&
             EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, c->app_key) == 1 &&
             EVP_DigestSign(md, sig, &sig_len, (unsigned char *)buf.data, buf.len) == 1;
    EVP_MD_CTX_free(md);
    int r = -EIO;
    if (ok) {
        textbuf_append(&buf, ".", 1);
        base64url(sig, sig_len, &buf);
        if (buf.error == 0)
            r = secret_from_bytes(buf.data, buf.len, ret_jwt);
    }
    textbuf_free(&buf);
    return r;
}

#define APP_KEY_MAX_BYTES (64 * 1024)

/* The App's key, parsed from a copy of the file this process wipes: read through stdio,
 * its text stayed in the FILE's freed buffer. */
static int load_app_key(const char *path, EVP_PKEY **ret, char *err, size_t err_size)
{
    int fd = secret_file_open(path, APP_KEY_MAX_BYTES, err, err_size);
    if (fd < 0)
        return fd;
    char *pem = malloc(APP_KEY_MAX_BYTES);
    size_t len = 0;
    ssize_t n = 0;
    while (pem && len < APP_KEY_MAX_BYTES &&
           ((n = read(fd, pem + len, APP_KEY_MAX_BYTES - len)) > 0 || (n < 0 && errno == EINTR)))
        len += n > 0 ? (size_t)n : 0;
    close(fd);
    if (!pem || n < 0) {
        if (pem)
            secret_wipe_free(pem, APP_KEY_MAX_BYTES);
        snprintf(err, err_size, "cannot read %s", path);
        return pem ? -EIO : -ENOMEM;
    }
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    EVP_PKEY *key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    secret_wipe_free(pem, APP_KEY_MAX_BYTES);
    if (!key || EVP_PKEY_get_base_id(key) != EVP_PKEY_RSA) {
        EVP_PKEY_free(key);
        snprintf(err, err_size, "%s is not a PEM RSA private key (the App's .pem)", path);
        return -EINVAL;
    }
    *ret = key;
    return 0;
}

/* ---- curl on libuv -------------------------------------------------------------------- */

static void check_multi_info(struct github_client *c);

static void on_poll(uv_poll_t *handle, int status, int events)
{
    struct poll_ctx *p = handle->data;
    int flags = 0;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE)
        flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE)
        flags |= CURL_CSELECT_OUT;
    int running = 0;
    curl_multi_socket_action(p->client->multi, p->fd, flags, &running);
    check_multi_info(p->client);
}

static void on_poll_closed(uv_handle_t *handle)
{
    free(handle->data);
}

static int socket_cb(CURL *easy, curl_socket_t fd, int action, void *userp, void *socketp)
{
    (void)easy;
    struct github_client *c = userp;
    struct poll_ctx *p = socketp;
    if (action == CURL_POLL_REMOVE) {
        if (p) {
            uv_poll_stop(&p->poll);
            uv_close((uv_handle_t *)&p->poll, on_poll_closed);
            curl_multi_assign(c->multi, fd, NULL);
        }
        return 0;
    }
    if (!p) {
        p = calloc(1, sizeof(*p));
        if (!p)
            return -1;
        p->fd = fd;
        p->client = c;
        p->poll.data = p;
        if (uv_poll_init_socket(c->loop, &p->poll, fd) < 0) {
            free(p);
            return -1;
        }
        curl_multi_assign(c->multi, fd, p);
    }
    int events = 0;
    if (action & CURL_POLL_IN)
        events |= UV_READABLE;
    if (action & CURL_POLL_OUT)
        events |= UV_WRITABLE;
    uv_poll_start(&p->poll, events, on_poll);
    return 0;
}

static void on_curl_timer(uv_timer_t *timer)
{
    struct github_client *c = timer->data;
    int running = 0;
    curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_multi_info(c);
}

static int timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    struct github_client *c = userp;
    if (timeout_ms < 0)
        uv_timer_stop(&c->curl_timer);
    else
        uv_timer_start(&c->curl_timer, on_curl_timer, (uint64_t)timeout_ms, 0);
    return 0;
}

/* ---- calls ---------------------------------------------------------------------------- */

static void call_send(struct call *call);

static void on_call_timer_closed(uv_handle_t *handle)
{
    struct call *call = handle->data;
    free(call);
}

/* A request's headers hold its Authorization: curl's copies are wiped too. */
static void slist_wipe_free(struct curl_slist *list)
{
    for (struct curl_slist *l = list; l; l = l->next)
        if (l->data)
            OPENSSL_cleanse(l->data, strlen(l->data));
    curl_slist_free_all(list);
}

/* Its handle goes back to curl, and with it its sending slot. */
static void call_drop_easy(struct call *call)
{
    struct github_client *c = call->client;
    if (!call->easy)
        return;
    curl_multi_remove_handle(c->multi, call->easy);
    curl_easy_cleanup(call->easy);
    call->easy = NULL;
    slist_wipe_free(call->headers);
    call->headers = NULL;
    c->sending--;
}

static void queue_remove(struct call *call)
{
    struct github_client *c = call->client;
    if (!call->queued)
        return;
    if (call->queue_prev)
        call->queue_prev->queue_next = call->queue_next;
    else
        c->queue_head = call->queue_next;
    if (call->queue_next)
        call->queue_next->queue_prev = call->queue_prev;
    else
        c->queue_tail = call->queue_prev;
    call->queued = false;
    call->queue_prev = call->queue_next = NULL;
    c->queued--;
}

/* The calls waiting for a slot take the free ones, first come first served. */
static void send_queued(struct github_client *c)
{
    while (c->queue_head && c->sending < MAX_CALLS_SENDING && !c->closing) {
        struct call *call = c->queue_head;
        queue_remove(call);
        call_send(call);
    }
}

static void call_free(struct call *call)
{
    struct github_client *c = call->client;
    if (call->prev)
        call->prev->next = call->next;
    else if (c->calls == call)
        c->calls = call->next;
    if (call->next)
        call->next->prev = call->prev;
    queue_remove(call);
    bool had_slot = call->easy != NULL;
    call_drop_easy(call);
    slist_wipe_free(call->headers);
    secret_reveal_free(call->auth_header);
    secret_reveal_free(call->fixed_auth);
    free(call->accept);
    free(call->extra_header);
    textbuf_free(&call->response); /* wiped: it may hold a token or a JIT config */
    free(call->url);
    free(call->body);
    if (call->timer_open)
        uv_close((uv_handle_t *)&call->timer, on_call_timer_closed);
    else
        free(call);
    if (had_slot)
        send_queued(c);
}

static const char *header_value(CURL *easy, const char *name)
{
    struct curl_header *h = NULL;
    if (curl_easy_header(easy, name, 0, CURLH_HEADER, -1, &h) != CURLHE_OK)
        return NULL;
    return h->value;
}

static void call_finish(struct call *call, int err, long status, json_t *body, const char *message)
{
    const char *link = NULL;
    if (err == 0 && call->easy)
        link = header_value(call->easy, "Link");
    struct github_client *c = call->client;
    /* Deleting what is already gone (a JIT runner GitHub removed after its job, as it does
     * after every job) is the outcome wanted, not a failure: it must not bury a real
     * error under last_error or count as one. */
    bool already_gone = err == -ENOENT && strcmp(call->method, "DELETE") == 0;
    if (already_gone)
        log_info("github.already_gone", "method=%s url=%s", call->method, call->url);
    if (err < 0 && !already_gone) {
        c->stats.failures++;
        /* 401 after a token refresh, or a 403 that is not a rate limit: the credentials
         * or the App's permissions, which no retry mends. */
        if (err == -EACCES || err == -EPERM)
            c->stats.auth_failures++;
        set_last_error(c, "%s %s: %s", call->method, call->url, message ? message : "failed");
        log_warn("github.request_failed", "method=%s url=%s status=%ld error=\"%s\"", call->method,
                 call->url, status, message ? message : strerror(-err));
    }
    struct github_response res = {err, status, body, message, link};
    if (call->cb)
        call->cb(call->data, &res);
    call_free(call);
}

static void on_call_timer(uv_timer_t *timer)
{
    call_send(timer->data);
}

/* A call waiting out a backoff or a rate limit holds no slot meanwhile. */
static void call_wait(struct call *call, long ms)
{
    bool had_slot = call->easy != NULL;
    call_drop_easy(call);
    if (had_slot)
        send_queued(call->client);
    if (!call->timer_open) {
        uv_timer_init(call->client->loop, &call->timer);
        call->timer.data = call;
        call->timer_open = true;
    }
    uv_timer_start(&call->timer, on_call_timer, (uint64_t)(ms > 0 ? ms : 0), 0);
}

/* Jittered exponential backoff: base * 2^attempt, a random half of it added, capped. */
static long backoff_ms(const struct github_client *c, int attempt)
{
    long ms = BACKOFF_BASE_MS;
    for (int i = 1; i < attempt && ms < c->max_backoff_ms; i++)
        ms *= 2;
    ms += (long)(random() % (ms / 2 + 1));
    return ms < c->max_backoff_ms ? ms : c->max_backoff_ms;
}

static void fetch_token(struct github_client *c);

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct call *call = userdata;
    size_t n = size * nmemb;
    int r = textbuf_append(&call->response, ptr, n);
    /* curl's own buffer held it too: an answer may be a token or a JIT config, and that
     * buffer is freed unwiped with the handle. */
    OPENSSL_cleanse(ptr, n);
    if (r < 0) {
        call->too_large = true;
        return 0; /* makes curl fail the transfer with CURLE_WRITE_ERROR */
    }
    return n;
}

/* OpenSSL keeps decrypted data in its record buffer until the next record overwrites it:
 * cleansed instead once read (an answer may be a token or a JIT config). */
static CURLcode on_ssl_ctx(CURL *easy, void *ssl_ctx, void *data)
{
    (void)easy;
    (void)data;
    SSL_CTX_set_options(ssl_ctx, SSL_OP_CLEANSE_PLAINTEXT);
    return CURLE_OK;
}

/* Again as the request is about to leave (its connection made): a leader paused between
 * the call's start and its send, past its lease, ends here rather than send it. */
static int on_prereq(void *clientp, char *primary_ip, char *local_ip, int primary_port,
                     int local_port)
{
    (void)clientp;
    (void)primary_ip;
    (void)local_ip;
    (void)primary_port;
    (void)local_port;
    return lease_fence_check("github") < 0 ? CURL_PREREQFUNC_ABORT : CURL_PREREQFUNC_OK;
}

static int build_easy(struct call *call)
{
    struct github_client *c = call->client;
    CURL *e = curl_easy_init();
    if (!e)
        return -ENOMEM;
    call->easy = e;
    c->sending++; /* until call_drop_easy */
    curl_easy_setopt(e, CURLOPT_URL, call->url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, call->method);
    curl_easy_setopt(e, CURLOPT_PRIVATE, call);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, call);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, call->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms < 10000 ? c->timeout_ms : 10000);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    /* No compressed answers: zlib's window would keep a copy of a token or JIT config
     * that nothing can wipe. GitHub's answers are small JSON pages. */
    curl_easy_setopt(e, CURLOPT_USERAGENT, c->user_agent);
    curl_easy_setopt(e, CURLOPT_SSL_CTX_FUNCTION, on_ssl_ctx);
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq);
    if (c->ca_file)
        curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file);
    if (c->max_response_bytes)
        curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)c->max_response_bytes);

    struct curl_slist *h = NULL;
    if (call->accept) {
        h = curl_slist_append(h, call->accept);
    } else {
        h = curl_slist_append(h, "Accept: application/vnd.github+json");
        h = curl_slist_append(h, "X-GitHub-Api-Version: 2022-11-28");
    }
    if (call->extra_header)
        h = curl_slist_append(h, call->extra_header);
    if (call->body) {
        h = curl_slist_append(h, "Content-Type: application/json");
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, call->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(call->body));
    }
    secret_reveal_free(call->auth_header);
    call->auth_header = NULL;
    int r = 0;
    if (call->auth == CALL_AUTH_JWT) {
        struct secret *jwt = NULL;
        r = github_app_jwt(c, wall_clock_ms() / 1000, &jwt);
        if (r == 0)
            r = secret_reveal(jwt, "Authorization: Bearer ", &call->auth_header);
        secret_free(jwt);
    } else if (call->auth == CALL_AUTH_TOKEN && c->token) {
        r = secret_reveal(c->token, "Authorization: Bearer ", &call->auth_header);
    }
    if (r == 0 && call->auth_header)
        h = curl_slist_append(h, call->auth_header);
    if (r == 0 && call->fixed_auth)
        h = curl_slist_append(h, call->fixed_auth);
    call->headers = h;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    return r;
}

static bool token_fresh(const struct github_client *c)
{
    if (!c->token)
        return false;
    if (c->auth == GITHUB_AUTH_TOKEN)
        return true;
    return c->token_expires_at - TOKEN_REFRESH_MARGIN_S > wall_clock_ms() / 1000;
}

static void call_send(struct call *call)
{
    struct github_client *c = call->client;
    if (c->closing)
        return;
    /* An earlier attempt's handle goes first: a call waiting for a token or its turn must
     * not hold a slot the token's own request needs. */
    if (call->easy) {
        call_drop_easy(call);
        send_queued(c);
    }
    int64_t now = wall_clock_ms();
    if (c->paused_until_ms > now) {
        call_wait(call, (long)(c->paused_until_ms - now));
        return;
    }
    if (call->auth == CALL_AUTH_TOKEN && !token_fresh(c)) {
        call->next_waiting = c->token_waiters;
        c->token_waiters = call;
        fetch_token(c);
        return;
    }
    if (c->sending >= MAX_CALLS_SENDING) {
        call->queued = true;
        call->queue_prev = c->queue_tail;
        if (c->queue_tail)
            c->queue_tail->queue_next = call;
        else
            c->queue_head = call;
        c->queue_tail = call;
        c->queued++;
        return;
    }
    /* Only the leader talks to GitHub, and not once its lease is up (lease.h). */
    if (lease_fence_check("github") < 0) {
        call_finish(call, -EPERM, 0, NULL, "this instance does not lead");
        return;
    }
    textbuf_free(&call->response);
    call->too_large = false;
    int r = build_easy(call);
    if (r == 0)
        r = curl_multi_add_handle(c->multi, call->easy) == CURLM_OK ? 0 : -EIO;
    if (r < 0) {
        call_finish(call, r, 0, NULL, "cannot prepare the request");
        return;
    }
    c->stats.requests++;
}

static bool parse_int64(const char *s, int64_t *ret)
{
    if (!s)
        return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno)
        return false;
    *ret = v;
    return true;
}

/* Records the rate-limit budget; returns how long to wait when GitHub says to, else -1. */
static long rate_limit_wait_ms(struct github_client *c, struct call *call, long status)
{
    int64_t remaining = -1, reset = 0, retry_after = -1;
    if (parse_int64(header_value(call->easy, "X-RateLimit-Remaining"), &remaining))
        c->stats.ratelimit_remaining = remaining;
    if (parse_int64(header_value(call->easy, "X-RateLimit-Reset"), &reset))
        c->stats.ratelimit_reset = reset;
    if (status != 403 && status != 429)
        return -1;
    if (parse_int64(header_value(call->easy, "Retry-After"), &retry_after) && retry_after >= 0)
        return (long)(retry_after * 1000);
    if (remaining == 0 && reset > 0) {
        int64_t wait = reset * 1000 - wall_clock_ms();
        return (long)(wait > 0 ? wait + 1000 : 1000);
    }
    if (status == 429)
        return backoff_ms(c, call->attempt + 1);
    return -1; /* a plain 403: permissions, not a limit */
}

static void fail_with_body(struct call *call, long status, json_t *body)
{
    char msg[256];
    const char *gh = json_string_value(json_object_get(body, "message"));
    snprintf(msg, sizeof(msg), "GitHub answered %ld%s%s", status, gh ? ": " : "", gh ? gh : "");
    int err = status == 404                    ? -ENOENT
              : status == 401                  ? -EACCES
              : status == 403                  ? -EPERM
              : status == 409 || status == 422 ? -EEXIST
                                               : -EPROTO;
    call_finish(call, err, status, body, msg);
}

static void call_done(struct call *call, CURLcode result)
{
    struct github_client *c = call->client;
    long status = 0;
    curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &status);
    char msg[256];

    if (result != CURLE_OK) {
        if (call->too_large || result == CURLE_FILESIZE_EXCEEDED) {
            snprintf(msg, sizeof(msg), "response larger than %zu bytes", c->max_response_bytes);
            call_finish(call, -EMSGSIZE, status, NULL, msg);
            return;
        }
        if (call->attempt < call->max_retries) {
            call->attempt++;
            c->stats.retries++;
            long wait = backoff_ms(c, call->attempt);
            log_info("github.retry", "method=%s url=%s attempt=%d wait_ms=%ld error=\"%s\"",
                     call->method, call->url, call->attempt, wait, curl_easy_strerror(result));
            call_wait(call, wait);
            return;
        }
        snprintf(msg, sizeof(msg), "%s (after %d attempts)", curl_easy_strerror(result),
                 call->attempt + 1);
        call_finish(call, result == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -ECONNREFUSED, 0, NULL,
                    msg);
        return;
    }

    long wait = rate_limit_wait_ms(c, call, status);
    if (wait >= 0) {
        c->stats.rate_limited++;
        int64_t until = wall_clock_ms() + wait;
        if (until > c->paused_until_ms)
            c->paused_until_ms = until;
        if (call->attempt < call->max_retries) {
            call->attempt++;
            log_warn("github.rate_limited", "method=%s url=%s status=%ld wait_ms=%ld", call->method,
                     call->url, status, wait);
            call_send(call);
            return;
        }
        snprintf(msg, sizeof(msg), "rate limited (%ld) after %d attempts", status,
                 call->attempt + 1);
        call_finish(call, -EBUSY, status, NULL, msg);
        return;
    }
    if (status >= 500 && call->attempt < call->max_retries) {
        call->attempt++;
        c->stats.retries++;
        long ms = backoff_ms(c, call->attempt);
        log_info("github.retry", "method=%s url=%s attempt=%d wait_ms=%ld status=%ld", call->method,
                 call->url, call->attempt, ms, status);
        call_wait(call, ms);
        return;
    }
    if (status == 401 && call->auth == CALL_AUTH_TOKEN && c->auth == GITHUB_AUTH_APP &&
        !call->refreshed_after_401) {
        /* The installation token was revoked or expired early: get a new one, once. */
        call->refreshed_after_401 = true;
        secret_free(c->token);
        c->token = NULL;
        log_warn("github.token_rejected", "method=%s url=%s action=refresh", call->method,
                 call->url);
        call_send(call);
        return;
    }

    json_t *body = NULL;
    if (call->response.len > 0) {
        json_error_t jerr;
        body = json_loadb(call->response.data, call->response.len, 0, &jerr);
        if (!body && status >= 200 && status < 300) {
            snprintf(msg, sizeof(msg), "malformed JSON from GitHub (status %ld): %s", status,
                     jerr.text);
            call_finish(call, -EBADMSG, status, NULL, msg);
            return;
        }
    }
    if (status >= 200 && status < 300)
        call_finish(call, 0, status, body, NULL);
    else if (status == 401)
        call_finish(call, -EACCES, status, body,
                    c->auth == GITHUB_AUTH_APP
                        ? "GitHub refused the App's credentials (401) even after a token refresh"
                        : "GitHub refused the token (401): check github.token_file");
    else
        fail_with_body(call, status, body);
    json_decref(body);
}

static void check_multi_info(struct github_client *c)
{
    CURLMsg *msg;
    int pending;
    while ((msg = curl_multi_info_read(c->multi, &pending))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        struct call *call = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&call);
        call_done(call, msg->data.result);
    }
}

static struct call *call_new(struct github_client *c, const char *method, const char *path,
                             json_t *body, enum call_auth auth, github_json_cb cb, void *data)
{
    struct call *call = calloc(1, sizeof(*call));
    if (!call)
        return NULL;
    call->client = c;
    snprintf(call->method, sizeof(call->method), "%s", method);
    call->auth = auth;
    call->timeout_ms = c->timeout_ms;
    call->max_retries = c->max_retries;
    call->cb = cb;
    call->data = data;
    textbuf_init(&call->response, c->max_response_bytes);
    if (strncmp(path, "http://", 7) == 0 || strncmp(path, "https://", 8) == 0) {
        call->url = strdup(path);
    } else {
        size_t n = strlen(c->api_url) + strlen(path) + 1;
        call->url = malloc(n);
        if (call->url)
            snprintf(call->url, n, "%s%s", c->api_url, path);
    }
    if (body)
        call->body = json_dumps(body, JSON_COMPACT);
    if (!call->url || (body && !call->body)) {
        free(call->url);
        free(call->body);
        free(call);
        return NULL;
    }
    call->next = c->calls;
    if (c->calls)
        c->calls->prev = call;
    c->calls = call;
    return call;
}

/* The origin (scheme://host:port) and the path of a URL, through libcurl's URL parser,
 * which also removes dot segments ("/api/v3/../x" is "/x"); `ret_url` (optional) gets
 * the URL as normalised. */
static int url_parts(const char *url, char *origin, size_t origin_size, char *path,
                     size_t path_size, char *ret_url, size_t url_size)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *p = NULL, *whole = NULL;
    int r = -EINVAL;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PATH, &p, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_URL, &whole, 0) == CURLUE_OK) {
        snprintf(origin, origin_size, "%s://%s:%s", scheme, host, port);
        for (char *c = origin; *c; c++)
            *c = (char)tolower((unsigned char)*c);
        snprintf(path, path_size, "%s", p);
        if (ret_url && (size_t)snprintf(ret_url, url_size, "%s", whole) >= url_size)
            r = -ENAMETOOLONG;
        else
            r = 0;
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(p);
    curl_free(whole);
    curl_url_cleanup(u);
    return r;
}

static int url_origin(const char *url, char *out, size_t size)
{
    char path[1024];
    return url_parts(url, out, size, path, sizeof(path), NULL, 0);
}

/* Whether `url` (a link from an answer) is on the configured API: the same origin, and a
 * path under the API's own path by whole segments once normalised, so none of
 * "/api/v3x/...", "/api/v3/../../x" or "/api/v3/%2e%2e/x" passes for "/api/v3". Writes
 * the normalised URL. */
static bool link_on_api(const struct github_client *c, const char *url, char *out, size_t out_size)
{
    char origin[256], path[1024], api_origin[256], api_path[1024];
    if (url_parts(url, origin, sizeof(origin), path, sizeof(path), out, out_size) < 0 ||
        url_parts(c->api_url, api_origin, sizeof(api_origin), api_path, sizeof(api_path), NULL, 0) <
            0 ||
        strcmp(origin, c->api_origin) != 0)
        return false;
    /* A percent-encoded dot ("%2e%2e") is a dot segment to some servers (RFC 3986, 6.2.2.2)
     * that libcurl leaves in place; GitHub's links never hold one. */
    if (strcasestr(path, "%2e"))
        return false;
    size_t n = strlen(api_path);
    while (n > 0 && api_path[n - 1] == '/')
        n--;
    return strncmp(path, api_path, n) == 0 && (path[n] == '/' || path[n] == 0);
}

int github_request(struct github_client *c, const char *method, const char *path, json_t *body,
                   github_json_cb cb, void *data)
{
    if (c->closing)
        return -ECANCELED;
    char link[2048];
    if (strncmp(path, "http://", 7) == 0 || strncmp(path, "https://", 8) == 0) {
        /* A link from a response: only ever to the API we were configured with, and
         * followed as normalised. */
        if (!link_on_api(c, path, link, sizeof(link))) {
            set_last_error(c, "refused to follow a link off the API host");
            log_warn("github.link_refused", "reason=\"not on the configured API host\"");
            return -EPERM;
        }
        path = link;
    } else if (path[0] != '/') {
        return -EINVAL;
    }
    /* The App's own endpoints and the installation lookups take the JWT; the rest the
     * installation token. */
    size_t len = strlen(path);
    bool jwt =
        c->auth == GITHUB_AUTH_APP && (strncmp(path, "/app/", 5) == 0 ||
                                       (len > 13 && strcmp(path + len - 13, "/installation") == 0));
    struct call *call =
        call_new(c, method, path, body, jwt ? CALL_AUTH_JWT : CALL_AUTH_TOKEN, cb, data);
    if (!call)
        return -ENOMEM;
    call_send(call);
    return 0;
}

int github_request_with(struct github_client *c, const char *method, const char *url, json_t *body,
                        const struct github_call_options *o, github_json_cb cb, void *data)
{
    if (c->closing)
        return -ECANCELED;
    bool absolute = strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0;
    if (!absolute && url[0] != '/')
        return -EINVAL;
    /* Another host gets the caller's credentials, never the installation token. */
    if (absolute && !o->auth)
        return -EPERM;
    struct call *call =
        call_new(c, method, url, body, o->auth ? CALL_AUTH_GIVEN : CALL_AUTH_TOKEN, cb, data);
    if (!call)
        return -ENOMEM;
    char header[256];
    int r = 0;
    if (o->auth) {
        snprintf(header, sizeof(header), "Authorization: %s ",
                 o->auth_scheme ? o->auth_scheme : "Bearer");
        r = secret_reveal(o->auth, header, &call->fixed_auth);
    }
    if (r == 0 && o->accept) {
        snprintf(header, sizeof(header), "Accept: %s", o->accept);
        r = (call->accept = strdup(header)) ? 0 : -ENOMEM;
    }
    if (r == 0 && o->extra_header)
        r = (call->extra_header = strdup(o->extra_header)) ? 0 : -ENOMEM;
    if (o->timeout_ms > 0)
        call->timeout_ms = o->timeout_ms;
    if (o->max_retries >= 0)
        call->max_retries = o->max_retries;
    if (r < 0) {
        call->cb = NULL;
        call_free(call);
        return r;
    }
    call_send(call);
    return 0;
}

/* ---- installation tokens -------------------------------------------------------------- */

static void release_token_waiters(struct github_client *c, int err, const char *message)
{
    struct call *w = c->token_waiters;
    c->token_waiters = NULL;
    while (w) {
        struct call *next = w->next_waiting;
        w->next_waiting = NULL;
        if (err < 0)
            call_finish(w, err, 0, NULL, message);
        else
            call_send(w);
        w = next;
    }
}

static int64_t parse_iso8601(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    if (!s || !strptime(s, "%Y-%m-%dT%H:%M:%S", &tm))
        return 0;
    return (int64_t)timegm(&tm);
}

static void on_token(void *data, const struct github_response *res)
{
    struct github_client *c = data;
    int err = res->err;
    const char *message = res->message;
    json_t *body = res->body;
    c->token_fetching = false;
    if (err < 0) {
        release_token_waiters(c, err, message);
        return;
    }
    const char *token = json_string_value(json_object_get(body, "token"));
    int64_t expires = parse_iso8601(json_string_value(json_object_get(body, "expires_at")));
    if (!token || !*token || expires <= 0) {
        release_token_waiters(c, -EBADMSG, "installation token answer lacks token or expires_at");
        return;
    }
    if (expires - TOKEN_REFRESH_MARGIN_S <= wall_clock_ms() / 1000) {
        release_token_waiters(c, -EBADMSG, "GitHub issued an installation token already expiring");
        return;
    }
    secret_free(c->token);
    c->token = NULL;
    /* Any length, any format: GitHub changes token formats. */
    if (secret_from_bytes(token, strlen(token), &c->token) < 0) {
        release_token_waiters(c, -ENOMEM, "out of memory");
        return;
    }
    c->token_expires_at = expires;
    log_info("github.token_refreshed", "installation=%lld expires_in_s=%lld",
             (long long)c->installation_id, (long long)(expires - wall_clock_ms() / 1000));
    release_token_waiters(c, 0, NULL);
}

/* One step of getting a token, made with the App's JWT; a failure to even send it fails
 * everyone waiting for the token. */
static void token_step(struct github_client *c, const char *method, const char *path,
                       github_json_cb cb)
{
    struct call *call = call_new(c, method, path, NULL, CALL_AUTH_JWT, cb, c);
    if (!call) {
        c->token_fetching = false;
        release_token_waiters(c, -ENOMEM, "out of memory");
        return;
    }
    call_send(call);
}

static void request_token(struct github_client *c)
{
    char path[96];
    snprintf(path, sizeof(path), "/app/installations/%lld/access_tokens",
             (long long)c->installation_id);
    token_step(c, "POST", path, on_token);
}

static void on_installation(void *data, const struct github_response *res)
{
    struct github_client *c = data;
    int err = res->err;
    const char *message = res->message;
    json_t *body = res->body;
    json_t *id = json_object_get(body, "id");
    if (err < 0 || !json_is_integer(id) || json_integer_value(id) <= 0) {
        c->token_fetching = false;
        release_token_waiters(c, err < 0 ? err : -EBADMSG,
                              err < 0 ? message : "installation answer lacks an id");
        return;
    }
    c->installation_id = json_integer_value(id);
    log_info("github.installation_found", "installation=%lld", (long long)c->installation_id);
    request_token(c);
}

static void fetch_token(struct github_client *c)
{
    if (c->token_fetching)
        return;
    if (c->auth == GITHUB_AUTH_TOKEN) {
        release_token_waiters(c, -EACCES, "no token");
        return;
    }
    c->token_fetching = true;
    if (c->installation_id > 0) {
        request_token(c);
        return;
    }
    if (!c->lookup_path) {
        c->token_fetching = false;
        release_token_waiters(c, -EINVAL,
                              "no installation_id and no runner scope to look it up from");
        return;
    }
    token_step(c, "GET", c->lookup_path, on_installation);
}

/* ---- client ------------------------------------------------------------------------- */

/* The client's own memory, apart from the multi handle and the timer. */
static void client_release(struct github_client *c)
{
    EVP_PKEY_free(c->app_key);
    secret_free(c->token);
    free(c->api_url);
    free(c->user_agent);
    free(c->ca_file);
    free(c->lookup_path);
    c->app_key = NULL;
    c->token = NULL;
    c->api_url = c->user_agent = c->ca_file = c->lookup_path = NULL;
}

int github_client_new(uv_loop_t *loop, const struct github_options *o,
                      struct github_client **ret_client, char *err, size_t err_size)
{
    static bool curl_ready;
    if (!curl_ready) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        curl_ready = true;
    }
    struct github_client *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->loop = loop;
    c->auth = o->auth;
    c->app_id = o->app_id;
    c->installation_id = o->installation_id;
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
    c->max_retries = o->max_retries >= 0 ? o->max_retries : 5;
    c->max_response_bytes = o->max_response_bytes ? o->max_response_bytes : 8 * 1024 * 1024;
    c->max_backoff_ms = o->max_backoff_ms > 0 ? o->max_backoff_ms : 30000;
    c->stats.ratelimit_remaining = -1;
    size_t n = strlen(o->api_url);
    while (n > 0 && o->api_url[n - 1] == '/')
        n--;
    c->api_url = strndup(o->api_url, n);
    c->user_agent = strdup(o->user_agent ? o->user_agent : "hatchery");
    c->ca_file = o->ca_file ? strdup(o->ca_file) : NULL;
    char lookup[512];
    if (o->lookup_scope &&
        github_scope_path(o->lookup_scope, "/installation", lookup, sizeof(lookup)) == 0)
        c->lookup_path = strdup(lookup);
    int r = 0;
    if (!c->api_url || url_origin(c->api_url, c->api_origin, sizeof(c->api_origin)) < 0) {
        snprintf(err, err_size, "github.api_url '%s' is not a URL", o->api_url);
        r = -EINVAL;
    } else if (o->auth == GITHUB_AUTH_APP) {
        r = load_app_key(o->app_key_file, &c->app_key, err, err_size);
    } else {
        r = secret_load_file(o->token_file, &c->token, err, err_size);
    }
    if (r == 0) {
        c->multi = curl_multi_init();
        if (!c->multi) {
            snprintf(err, err_size, "cannot create a curl multi handle");
            r = -ENOMEM;
        }
    }
    if (r < 0) {
        client_release(c);
        free(c);
        return r;
    }
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 8L);
    uv_timer_init(loop, &c->curl_timer);
    c->curl_timer.data = c;
    *ret_client = c;
    return 0;
}

static void on_client_timer_closed(uv_handle_t *handle)
{
    struct github_client *c = handle->data;
    curl_multi_cleanup(c->multi);
    free(c);
}

void github_client_free(struct github_client *c)
{
    if (!c)
        return;
    c->closing = true;
    c->token_waiters = NULL;
    while (c->calls) {
        struct call *call = c->calls;
        struct github_response res = {-ECANCELED, 0, NULL, "client closed", NULL};
        if (call->cb)
            call->cb(call->data, &res);
        call->cb = NULL;
        call_free(call);
    }
    client_release(c);
    uv_close((uv_handle_t *)&c->curl_timer, on_client_timer_closed);
}

const char *github_client_api_url(const struct github_client *c)
{
    return c->api_url;
}

json_t *github_client_status(const struct github_client *c)
{
    int64_t now = wall_clock_ms() / 1000;
    json_t *s =
        json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "auth", github_auth_mode_names[c->auth],
                  "api_url", c->api_url, "requests", (json_int_t)c->stats.requests, "retries",
                  (json_int_t)c->stats.retries, "failures", (json_int_t)c->stats.failures,
                  "rate_limited", (json_int_t)c->stats.rate_limited, "ratelimit_remaining",
                  (json_int_t)c->stats.ratelimit_remaining);
    json_object_set_new(
        s, "ratelimit_reset_in_s",
        c->stats.ratelimit_reset
            ? json_integer(c->stats.ratelimit_reset > now ? c->stats.ratelimit_reset - now : 0)
            : json_null());
    if (c->auth == GITHUB_AUTH_APP) {
        json_object_set_new(s, "app_id", json_integer(c->app_id));
        json_object_set_new(s, "installation_id",
                            c->installation_id ? json_integer(c->installation_id) : json_null());
        json_object_set_new(s, "token_expires_in_s",
                            c->token ? json_integer(c->token_expires_at - now) : json_null());
    }
    json_object_set_new(s, "last_error",
                        c->last_error[0] ? json_string(c->last_error) : json_null());
    json_object_set_new(s, "last_error_at",
                        c->last_error_at ? json_integer(c->last_error_at) : json_null());
    return s;
}

void github_client_stats(const struct github_client *c, struct github_stats *ret)
{
    *ret = c->stats;
    ret->sending = c->sending;
    ret->queued = c->queued;
}
