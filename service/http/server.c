/*
 * server.c - see server.h and http.h.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/clock.h"
#include "server.h"
#include "app/log.h"
#include "app/auth.h"

/* ---- the server --------------------------------------------------------------------------- */

rld_http *rld_http_start(const rld_http_config *cfg, rl_err *err)
{
    if (cfg->tls_cert_pem || cfg->tls_key_pem || cfg->libmicrohttpd)
        return rld__http_mhd_start(cfg, err);
    return rld__http1_start(cfg, err);
}

int rld__http_init(rld_http *h, const rld_http_config *cfg, const rld_http_ops *ops, rl_err *err)
{
    const char *tokens[3] = {cfg->admin_token, cfg->acquire_token, cfg->metrics_token};
    h->cfg = *cfg;
    h->ops = ops;
    for (int i = 0; i < 3; i++)
        if (tokens[i] && !(h->token[i] = strdup(tokens[i]))) {
            snprintf(err->msg, sizeof err->msg, "out of memory");
            return -1;
        }
    return 0;
}

void rld__http_fini(rld_http *h)
{
    for (int i = 0; i < 3; i++)
        free(h->token[i]);
}

int rld_http_port(const rld_http *h)
{
    return h->port;
}

int rld_http_stopping(const rld_http *h)
{
    return __atomic_load_n(&h->stopping, __ATOMIC_RELAXED);
}

unsigned rld_http_stop(rld_http *h, unsigned drain_ms)
{
    __atomic_store_n(&h->stopping, 1, __ATOMIC_SEQ_CST);
    return h->ops->stop(h, drain_ms);
}

/* A client learns at once that the server is full rather than waiting in a queue. The socket
 * is new, so the short answer fits its buffer. */
void rld__http_refuse(void *http, int fd)
{
    const rld_http *h = http;
    char body[128], msg[384];
    int nb = snprintf(body, sizeof body,
                      "{\"error\":\"connections: %u open, the most max_connections allows\"}",
                      h->cfg.max_connections);
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
                     nb, body);
    if (send(fd, msg, (size_t)n, MSG_NOSIGNAL) < 0) {
        /* the client is gone already */
    }
}

/* ---- requests --------------------------------------------------------------------------- */

void rld__req_begin(rld_http *h, rld_req *r, rl_ns t0)
{
    r->h = h;
    r->route = h->cfg.nroutes;
    r->m = NULL;
    r->tail = "";
    r->method = r->url = "";
    r->body = r->body_inl;
    r->body[0] = '\0';
    r->len = r->seen = 0;
    r->cap = RLD_BODY_INLINE;
    r->too_big = r->body_oom = 0;
    r->early = 0;
    r->note_by = NULL;
    r->status = 0;
    rld_buf_init(&r->out, r->out_inl, sizeof r->out_inl);
    r->t0 = t0;
}

void rld__req_end(rld_req *r)
{
    if (r->body != r->body_inl)
        free(r->body);
    r->body = r->body_inl;
    rld_buf_reset(&r->out);
}

int rld_route_find(const rld_route *routes, size_t n, const char *url, const char *method,
                   size_t *route, const char **tail, const rld_method **m)
{
    *route = n;
    *tail = "";
    *m = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *p = routes[i].path;
        size_t pl = strlen(p);
        if (p[pl - 1] == '/' ? strncmp(url, p, pl) == 0 : strcmp(url, p) == 0) {
            *route = i;
            *tail = p[pl - 1] == '/' ? url + pl : "";
            break;
        }
    }
    if (*route == n)
        return 404;
    for (const rld_method *mm = routes[*route].methods; mm->name; mm++)
        if (strcmp(mm->name, method) == 0) {
            *m = mm;
            return 0;
        }
    return 405;
}

static int authorized(const rld_http *h, unsigned flags, const char *authorization)
{
    const char *want = flags & RLD_ADMIN     ? h->token[0]
                       : flags & RLD_ACQUIRE ? h->token[1]
                       : flags & RLD_METRICS ? h->token[2]
                                             : NULL;
    return rld_auth_matches(want, authorization);
}

void rld__req_route(rld_req *r, const char *method, const char *url,
                    unsigned long long length, const char *authorization)
{
    rld_http *h = r->h;
    r->method = method;
    r->url = url;
    int routed = rld_route_find(h->cfg.routes, h->cfg.nroutes, url, method, &r->route, &r->tail,
                                &r->m);
    if (routed)
        r->early = routed;
    else if (length > RLD_MAX_BODY)
        r->early = 413;
    else if ((r->m->flags & RLD_ADMIN) && h->cfg.admin_closed)
        r->early = 403;
    else if (!authorized(h, r->m->flags, authorization))
        r->early = 401;
}

void rld__req_body_append(rld_req *r, const char *data, size_t n)
{
    r->seen += n;
    if (r->too_big || r->body_oom || r->early)
        return;
    if (r->len + n > RLD_MAX_BODY) {
        r->too_big = 1;
        return;
    }
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap * 2;
        while (cap < r->len + n + 1)
            cap *= 2;
        if (cap > RLD_MAX_BODY + 1)
            cap = RLD_MAX_BODY + 1;
        char *p = r->body == r->body_inl ? malloc(cap) : realloc(r->body, cap);
        if (!p) {
            r->body_oom = 1;
            return;
        }
        if (r->body == r->body_inl)
            memcpy(p, r->body, r->len);
        r->body = p;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = '\0';
}

void rld__req_run(rld_req *r)
{
    rld_http *h = r->h;
    if (r->status)
        return;
    if (r->early)
        rld__req_reply_early(r);
    else if (r->too_big)
        rld_reply_error(r, 413, "body: larger than %d bytes", RLD_MAX_BODY);
    else if (r->body_oom)
        rld_reply_error(r, 500, "out of memory");
    else if (!h->cfg.gate || (r->m->flags & RLD_UNGATED))
        r->m->fn(h->cfg.app, r);
    else {
        pthread_rwlock_rdlock(h->cfg.gate);
        r->m->fn(h->cfg.app, r);
        pthread_rwlock_unlock(h->cfg.gate);
    }
    if (!r->status) {
        rld_log("error: the handler of %s %s gave no answer", r->method, r->url);
        rld_reply_error(r, 500, "internal error: no answer");
    }
}

int rld__req_batchable(const rld_req *r)
{
    return !r->status && !r->early && !r->too_big && !r->body_oom && r->m && r->m->many;
}

void rld__req_run_many(rld_req **rs, size_t n)
{
    rld_http *h = rs[0]->h;
    const rld_method *m = rs[0]->m;
    int gated = h->cfg.gate && !(m->flags & RLD_UNGATED);
    if (gated)
        pthread_rwlock_rdlock(h->cfg.gate);
    m->many(h->cfg.app, rs, n);
    if (gated)
        pthread_rwlock_unlock(h->cfg.gate);
    for (size_t i = 0; i < n; i++)
        if (!rs[i]->status) {
            rld_log("error: the handler of %s %s gave no answer", rs[i]->method, rs[i]->url);
            rld_reply_error(rs[i], 500, "internal error: no answer");
        }
}

void rld__req_reply_early(rld_req *r)
{
    const rld_route *rt = r->route < r->h->cfg.nroutes ? &r->h->cfg.routes[r->route] : NULL;
    if (r->early == 404) {
        rld_reply_error(r, 404, "path: no such endpoint: %.200s", r->url);
    } else if (r->early == 405) {
        rld_header allow = {"Allow", rt->allow};
        rld_reply_error_with(r, 405, &allow, 1, "method: %.16s is not allowed on %s (allowed: %s)",
                             r->method, rt->path, rt->allow);
    } else if (r->early == 413) {
        rld_reply_error(r, 413, "body: larger than %d bytes", RLD_MAX_BODY);
    } else if (r->early == 403) {
        rld_reply_error(r, 403,
                        "admin_token: the admin endpoints are closed: ratelimitd listens on %s, "
                        "not on loopback, and no admin_token is set (set admin_token, or "
                        "\"admin_open\": true to open them to anyone who reaches the port)",
                        r->h->cfg.address);
    } else {
        rld_header www = {"WWW-Authenticate", "Bearer realm=\"ratelimitd\""};
        rld_reply_error_with(r, 401, &www, 1,
                             "authorization: this endpoint needs \"Authorization: Bearer "
                             "<token>\" with a valid token");
    }
}

/* ---- for handlers ------------------------------------------------------------------------ */

char *rld_req_body(rld_req *r, size_t *len)
{
    *len = r->len;
    r->body[r->len] = '\0';
    return r->body;
}

const char *rld_req_tail(const rld_req *r)
{
    return r->tail;
}

rld_buf *rld_req_out(rld_req *r)
{
    return &r->out;
}

rld_http *rld_req_http(rld_req *r)
{
    return r->h;
}

int rld_req_access_logged(const rld_req *r)
{
    return r->h->cfg.access_log;
}

void rld_req_note(rld_req *r, const char *blocked_by, const char *key, size_t keylen)
{
    r->note_by = blocked_by;
    r->note_key = key;
    r->note_keylen = keylen;
}

int rld_req_each_header(rld_req *r, rld_header_fn fn, void *ctx)
{
    return r->h->ops->each_header(r, fn, ctx);
}

const char *rld_req_query(rld_req *r, const char *name)
{
    return r->h->ops->query(r, name);
}

/* ---- replies ---------------------------------------------------------------------------- */

/* The request's access line (only when access logging is on: this is off the hot path). */
static void access_line(const rld_req *r, int status)
{
    char client[INET6_ADDRSTRLEN] = "";
    const struct sockaddr *sa = r->h->ops->client(r);
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, client, sizeof client);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, client,
                  sizeof client);
    rld_access a = {.method = r->method,
                    .path = r->url,
                    .status = status,
                    .duration = rld_mono_ns() - r->t0,
                    .client = client,
                    .blocked_by = r->note_by,
                    .key = r->note_key,
                    .keylen = r->note_keylen};
    rld_log_access(&a);
}

void rld_reply(rld_req *r, int status, const char *ctype, const rld_header *hs, size_t nh)
{
    rld_http *h = r->h;
    if (r->status)
        return;
    status = h->ops->prepare(r, status, ctype, hs, nh);
    r->status = status;
    /* counted before the answer leaves, so that a client that has it sees it counted */
    if (h->cfg.on_done)
        h->cfg.on_done(h->cfg.app, r->route, status, rld_mono_ns() - r->t0);
    if (h->cfg.access_log)
        access_line(r, status);
    h->ops->commit(r);
}

void rld_reply_json(rld_req *r, int status)
{
    rld_reply(r, status, "application/json", NULL, 0);
}

static int reply_error_h(rld_req *r, int status, const rld_header *hs, size_t nh,
                         const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));
static int reply_error_h(rld_req *r, int status, const rld_header *hs, size_t nh,
                         const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    rld_buf_reset(&r->out);
    rld_buf_puts(&r->out, "{\"error\":");
    rld_buf_json_str(&r->out, msg, strlen(msg));
    rld_buf_putc(&r->out, '}');
    rld_reply(r, status, "application/json", hs, nh);
    return -1;
}

int rld_reply_error(rld_req *r, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_error_h(r, status, NULL, 0, fmt, ap);
    va_end(ap);
    return -1;
}

int rld_reply_error_with(rld_req *r, int status, const rld_header *hs, size_t nh,
                         const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reply_error_h(r, status, hs, nh, fmt, ap);
    va_end(ap);
    return -1;
}

void rld_reply_text(rld_req *r, int status, const char *ctype, char *text)
{
    if (!text) {
        rld_reply_error(r, 500, "out of memory");
        return;
    }
    rld_buf_reset(&r->out);
    r->out.p = text;
    r->out.len = strlen(text);
    r->out.cap = r->out.len + 1;
    rld_reply(r, status, ctype, NULL, 0);
}
