/*
 * http.c - see http.h.
 */
#define _GNU_SOURCE /* accept4, pipe2 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "http.h"
#include "log.h"
#include "tokens.h"

#define BODY_INLINE 2048
#define OUT_INLINE 4096
/* A body that passed the cap is read and dropped (to answer 413 on a chunked upload) only up
 * to this much; past it the connection is closed. */
#define DISCARD_MAX (16 * RLD_MAX_BODY)
/* libmicrohttpd's memory pool per connection: the request line and headers must fit in it,
 * along with the response's headers. libmicrohttpd zeroes the whole pool between two requests
 * of a keep-alive connection, so its default of 32 KiB cost more than any other user-space
 * step of a decision; 16 KiB still takes request headers up to about 12 KiB (nginx's default
 * limit for a header line is 8 KiB). The body does not live there: it comes in pieces. */
#define CONN_MEMORY (16 * 1024)

struct rld_req {
    rld_http *h;
    struct MHD_Connection *c;
    struct conn_ctx *owner; /* the connection storage it lives in, NULL when malloc'd */
    size_t route;           /* index in the table; nroutes for an unknown path */
    const rld_method *m;
    const char *tail;
    char *body;
    size_t len, cap, seen;
    int too_big, body_oom;
    int early;   /* an answer decided from the headers (404, 405, 401), sent after the body */
    const char *method, *url; /* libmicrohttpd's, for the access line */
    const char *note_by, *note_key; /* a denial's rule and key, for the access line */
    size_t note_keylen;
    rl_ns t0;
    int status; /* 0 until answered */
    enum MHD_Result queued;
    rld_buf out;
    char body_inl[BODY_INLINE + 1];
    char out_inl[OUT_INLINE];
};

typedef struct conn_ctx {
    int busy;   /* req is in use */
    int closed; /* the connection closed while req was in use: completion frees it */
    rld_req req;
} conn_ctx;

/* A worker: one libmicrohttpd daemon with its one thread. Its callbacks get the worker, so that
 * the count of requests in flight is kept per worker, on a cache line of its own (one counter
 * for all made the workers pass its line back and forth twice a request). */
typedef struct worker {
    _Alignas(64) rld_http *h;
    long active; /* atomic: requests between their first call and their completion */
} worker;

struct rld_http {
    struct MHD_Daemon *d[RLD_MAX_WORKERS];
    worker w[RLD_MAX_WORKERS];
    unsigned nd;
    int lfd;        /* the listening socket, -1 once closed */
    int wake[2];    /* a pipe: a byte in it stops the acceptor */
    pthread_t acceptor;
    int accepting;  /* the acceptor thread runs */
    rld_http_config cfg;
    char *token[3]; /* admin, acquire and metrics tokens (copies), NULL when not needed */
    int port;
    int stopping; /* atomic */
    long open;    /* atomic: connections accepted and not yet closed */
};


/* ---- requests --------------------------------------------------------------------------- */

static rld_req *req_begin(worker *w, struct MHD_Connection *c)
{
    rld_http *h = w->h;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn_ctx *cc = ci ? ci->socket_context : NULL;
    rld_req *r;
    if (cc && !cc->busy) {
        cc->busy = 1;
        r = &cc->req;
        r->owner = cc;
    } else if ((r = malloc(sizeof *r)) != NULL) {
        r->owner = NULL;
    } else {
        return NULL;
    }
    r->h = h;
    r->c = c;
    r->route = h->cfg.nroutes;
    r->m = NULL;
    r->tail = "";
    r->body = r->body_inl;
    r->body[0] = '\0';
    r->len = r->seen = 0;
    r->cap = BODY_INLINE;
    r->too_big = r->body_oom = 0;
    r->early = 0;
    r->note_by = NULL;
    r->status = 0;
    r->queued = MHD_NO;
    rld_buf_init(&r->out, r->out_inl, sizeof r->out_inl);
    r->t0 = rld_mono_ns();
    __atomic_add_fetch(&w->active, 1, __ATOMIC_RELAXED);
    return r;
}

static void req_end(rld_req *r)
{
    if (r->body != r->body_inl)
        free(r->body);
    rld_buf_reset(&r->out);
    conn_ctx *cc = r->owner;
    if (!cc)
        free(r);
    else if (cc->closed)
        free(cc);
    else
        cc->busy = 0;
}

static void body_append(rld_req *r, const char *data, size_t n)
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

/* The request's access line (only when access logging is on: this is off the hot path). */
static void access_line(const rld_req *r, int status)
{
    char client[INET6_ADDRSTRLEN] = "";
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, client, sizeof client);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, client,
                  sizeof client);
    rld_access a = {.method = r->method ? r->method : "",
                    .path = r->url ? r->url : "",
                    .status = status,
                    .duration = rld_mono_ns() - r->t0,
                    .client = client,
                    .blocked_by = r->note_by,
                    .key = r->note_key,
                    .keylen = r->note_keylen};
    rld_log_access(&a);
}

typedef struct each_header {
    rld_header_fn fn;
    void *ctx;
    int rc;
} each_header;

static enum MHD_Result header_of(void *cls, enum MHD_ValueKind kind, const char *key,
                                 size_t key_size, const char *value, size_t value_size)
{
    each_header *e = cls;
    (void)kind;
    e->rc = e->fn(e->ctx, key, key_size, value ? value : "", value ? value_size : 0);
    return e->rc ? MHD_NO : MHD_YES;
}

int rld_req_each_header(rld_req *r, rld_header_fn fn, void *ctx)
{
    each_header e = {fn, ctx, 0};
    MHD_get_connection_values_n(r->c, MHD_HEADER_KIND, header_of, &e);
    return e.rc;
}

const char *rld_req_query(rld_req *r, const char *name)
{
    const char *v = MHD_lookup_connection_value(r->c, MHD_GET_ARGUMENT_KIND, name);
    if (v)
        return v;
    /* a key without a value ("?flag") is listed with a NULL value */
    return MHD_lookup_connection_value_n(r->c, MHD_GET_ARGUMENT_KIND, name, strlen(name), NULL,
                                         NULL) == MHD_YES
               ? ""
               : NULL;
}

/* ---- replies ---------------------------------------------------------------------------- */

static const char oom_body[] = "{\"error\":\"out of memory\"}";

void rld_reply(rld_req *r, int status, const char *ctype, const rld_header *hs, size_t nh)
{
    struct MHD_Response *resp = NULL;
    if (r->status)
        return;
    if (!r->out.oom && rld_buf_on_heap(&r->out)) {
        size_t len = r->out.len;
        char *p = rld_buf_steal(&r->out);
        if (p && !(resp = MHD_create_response_from_buffer(len, p, MHD_RESPMEM_MUST_FREE)))
            free(p);
    } else if (!r->out.oom) {
        /* the inline buffer outlives the response: it is reused only by the connection's next
         * request, which starts after this response has been sent */
        resp = MHD_create_response_from_buffer(r->out.len, r->out.p, MHD_RESPMEM_PERSISTENT);
    }
    if (!resp) {
        status = 500;
        ctype = "application/json";
        nh = 0;
        resp = MHD_create_response_from_buffer(sizeof oom_body - 1, (void *)oom_body,
                                               MHD_RESPMEM_PERSISTENT);
        if (!resp) {
            r->status = 500;
            r->queued = MHD_NO;
            if (r->h->cfg.on_done)
                r->h->cfg.on_done(r->h->cfg.app, r->route, 500, rld_mono_ns() - r->t0);
            return;
        }
    }
    if (ctype)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    for (size_t i = 0; i < nh; i++)
        MHD_add_response_header(resp, hs[i].name, hs[i].value);
    if (__atomic_load_n(&r->h->stopping, __ATOMIC_RELAXED))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    r->status = status;
    /* counted before the answer leaves, so that a client that has it sees it counted */
    if (r->h->cfg.on_done)
        r->h->cfg.on_done(r->h->cfg.app, r->route, status, rld_mono_ns() - r->t0);
    if (r->h->cfg.access_log)
        access_line(r, status);
    r->queued = MHD_queue_response(r->c, (unsigned)status, resp);
    MHD_destroy_response(resp);
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

/* ---- the access handler ----------------------------------------------------------------- */

static int authorized(const rld_http *h, struct MHD_Connection *c, unsigned flags)
{
    const char *want = flags & RLD_ADMIN     ? h->token[0]
                       : flags & RLD_ACQUIRE ? h->token[1]
                       : flags & RLD_METRICS ? h->token[2]
                                             : NULL;
    return rld_token_matches(want, MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                               MHD_HTTP_HEADER_AUTHORIZATION));
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

/* Sends the answer decided from the headers alone. */
static void reply_early(rld_req *r, const char *url, const char *method)
{
    const rld_route *rt = r->route < r->h->cfg.nroutes ? &r->h->cfg.routes[r->route] : NULL;
    if (r->early == 404) {
        rld_reply_error(r, 404, "path: no such endpoint: %.200s", url);
    } else if (r->early == 405) {
        rld_header allow = {"Allow", rt->allow};
        rld_reply_error_with(r, 405, &allow, 1, "method: %.16s is not allowed on %s (allowed: %s)",
                         method, rt->path, rt->allow);
    } else if (r->early == 413) {
        rld_reply_error(r, 413, "body: larger than %d bytes", RLD_MAX_BODY);
    } else {
        rld_header www = {"WWW-Authenticate", "Bearer realm=\"ratelimitd\""};
        rld_reply_error_with(r, 401, &www, 1,
                         "authorization: this endpoint needs \"Authorization: Bearer "
                         "<token>\" with a valid token");
    }
}

/* Routes the request and decides what can be decided from the headers: 404, 405, 413 on a
 * declared length, 401. A 413 goes out at once (the connection then closes, the body unread);
 * the others after the body has been read and dropped, which keeps the connection alive. */
static enum MHD_Result first_call(rld_http *h, rld_req *r, const char *url, const char *method)
{
    r->method = method;
    r->url = url;
    int routed = rld_route_find(h->cfg.routes, h->cfg.nroutes, url, method, &r->route, &r->tail,
                                &r->m);
    const char *cl = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long length = cl ? strtoull(cl, NULL, 10) : 0;
    if (routed)
        r->early = routed;
    else if (length > RLD_MAX_BODY)
        r->early = 413;
    else if (!authorized(h, r->c, r->m->flags))
        r->early = 401;
    if (r->early == 413) {
        reply_early(r, url, method);
        return r->queued;
    }
    return MHD_YES;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_size, void **con_cls)
{
    worker *w = cls;
    rld_http *h = w->h;
    rld_req *r = *con_cls;
    (void)version;
    if (!r) {
        if (!(r = req_begin(w, c)))
            return MHD_NO;
        *con_cls = r;
        return first_call(h, r, url, method);
    }
    if (r->status)
        return MHD_YES;
    if (*upload_size) {
        body_append(r, upload_data, *upload_size);
        *upload_size = 0;
        return r->seen > DISCARD_MAX ? MHD_NO : MHD_YES;
    }
    if (r->early)
        reply_early(r, url, method);
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
        rld_log("error: the handler of %s %s gave no answer", method, url);
        rld_reply_error(r, 500, "internal error: no answer");
    }
    return r->queued;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    worker *w = cls;
    rld_req *r = *con_cls;
    (void)c;
    (void)toe;
    if (!r)
        return;
    *con_cls = NULL;
    req_end(r);
    /* release: the request's memory is done with before the drain sees the count fall */
    __atomic_sub_fetch(&w->active, 1, __ATOMIC_RELEASE);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    worker *w = cls;
    (void)c;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_ctx *cc = malloc(sizeof *cc);
        if (cc) {
            cc->busy = 0;
            cc->closed = 0;
        }
        *socket_context = cc; /* NULL: requests of this connection get their own memory */
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_ctx *cc = *socket_context;
        if (cc && cc->busy)
            cc->closed = 1;
        else
            free(cc);
        *socket_context = NULL;
        __atomic_sub_fetch(&w->h->open, 1, __ATOMIC_RELAXED);
    }
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    rld_log("error: libmicrohttpd: %s", msg);
}

/* ---- the daemon ------------------------------------------------------------------------- */

/* Answers a connection past max_connections with 503 and closes it, so that a client learns at
 * once rather than waiting in a queue. The socket is new, so the short answer fits its buffer. */
static void refuse(const rld_http *h, int fd)
{
    char body[128], msg[384];
    int nb = snprintf(body, sizeof body,
                      "{\"error\":\"connections: %u open, the most max_connections allows\"}",
                      h->cfg.max_connections);
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
                     nb, body);
    if (write(fd, msg, (size_t)n) < 0) {
        /* the client is gone already */
    }
    close(fd);
}

/* Connections go round-robin to the workers. libmicrohttpd's own thread pool lets every worker
 * accept from one shared socket, and a burst of new connections (a client opening its pool)
 * goes to whichever worker wakes first: measured here, 64 connections opened at once often
 * landed 50 or more on one of two workers, which then did nearly all the work, at half the
 * throughput and several times the latency. */
static void *accept_loop(void *arg)
{
    rld_http *h = arg;
    struct pollfd pf[2] = {{h->lfd, POLLIN, 0}, {h->wake[0], POLLIN, 0}};
    unsigned next = 0;
    for (;;) {
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            rld_log("error: poll on the listening socket: %s", strerror(errno));
            return NULL;
        }
        if (pf[1].revents)
            return NULL; /* rld_http_stop */
        for (;;) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            int fd = accept4(h->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED)
                    continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK) {
                    /* out of descriptors or memory: let connections finish, then retry */
                    const struct timespec pause = {0, 10000000};
                    rld_log("error: accept: %s", strerror(errno));
                    nanosleep(&pause, NULL);
                }
                break;
            }
            int one = 1;
            if (h->cfg.max_connections &&
                __atomic_load_n(&h->open, __ATOMIC_RELAXED) >= (long)h->cfg.max_connections) {
                refuse(h, fd);
                continue;
            }
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            __atomic_add_fetch(&h->open, 1, __ATOMIC_RELAXED);
            /* closes fd itself when it fails */
            if (MHD_add_connection(h->d[next], fd, (struct sockaddr *)&ss, sl) != MHD_YES) {
                __atomic_sub_fetch(&h->open, 1, __ATOMIC_RELAXED);
                rld_log("error: a new connection could not be taken: %s", strerror(errno));
            }
            next = next + 1 == h->nd ? 0 : next + 1;
        }
    }
}

/* Binds and listens; returns the socket or -1 with err set. */
static int listen_on(const rld_http_config *cfg, rl_err *err)
{
    struct sockaddr_in sa4;
    struct sockaddr_in6 sa6;
    struct sockaddr *sa;
    socklen_t salen;
    memset(&sa4, 0, sizeof sa4);
    memset(&sa6, 0, sizeof sa6);
    if (inet_pton(AF_INET, cfg->address, &sa4.sin_addr) == 1) {
        sa4.sin_family = AF_INET;
        sa4.sin_port = htons((uint16_t)cfg->port);
        sa = (struct sockaddr *)&sa4;
        salen = sizeof sa4;
    } else if (inet_pton(AF_INET6, cfg->address, &sa6.sin6_addr) == 1) {
        sa6.sin6_family = AF_INET6;
        sa6.sin6_port = htons((uint16_t)cfg->port);
        sa = (struct sockaddr *)&sa6;
        salen = sizeof sa6;
    } else {
        snprintf(err->msg, sizeof err->msg, "listen.address: \"%.64s\" is not an IP address",
                 cfg->address);
        return -1;
    }
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0) {
        snprintf(err->msg, sizeof err->msg, "socket: %s", strerror(errno));
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (sa->sa_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, sa, salen) != 0 || listen(fd, 1024) != 0) {
        snprintf(err->msg, sizeof err->msg, "cannot listen on %s port %d (in use?)",
                 cfg->address, cfg->port);
        close(fd);
        return -1;
    }
    return fd;
}

/* Stops and frees the workers, the acceptor and the socket that are running. */
static void teardown(rld_http *h)
{
    if (h->accepting) {
        char c = 1;
        while (write(h->wake[1], &c, 1) < 0 && errno == EINTR)
            ;
        pthread_join(h->acceptor, NULL);
        h->accepting = 0;
    }
    if (h->lfd >= 0)
        close(h->lfd);
    h->lfd = -1;
    for (unsigned i = 0; i < h->nd; i++)
        MHD_stop_daemon(h->d[i]);
    h->nd = 0;
}

rld_http *rld_http_start(const rld_http_config *cfg, rl_err *err)
{
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC |
                     MHD_USE_TURBO | MHD_USE_ERROR_LOG;
    rld_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    h->cfg = *cfg;
    h->lfd = -1;
    h->wake[0] = h->wake[1] = -1;
    if ((cfg->tls_cert_pem || cfg->tls_key_pem) &&
        MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(err->msg, sizeof err->msg, "tls: this libmicrohttpd was built without TLS");
        goto fail;
    }
    const char *tokens[3] = {cfg->admin_token, cfg->acquire_token, cfg->metrics_token};
    for (int i = 0; i < 3; i++)
        if (tokens[i] && !(h->token[i] = strdup(tokens[i]))) {
            snprintf(err->msg, sizeof err->msg, "out of memory");
            goto fail;
        }
    if ((h->lfd = listen_on(cfg, err)) < 0)
        goto fail;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(h->lfd, (struct sockaddr *)&ss, &sl) == 0)
        h->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    unsigned nd = cfg->threads < 1 ? 1 : cfg->threads > RLD_MAX_WORKERS ? RLD_MAX_WORKERS
                                                                        : (unsigned)cfg->threads;
    for (; h->nd < nd; h->nd++) {
        worker *w = &h->w[h->nd];
        w->h = h;
        int tls = cfg->tls_cert_pem && cfg->tls_key_pem;
        struct MHD_OptionItem tls_opts[] = {
            {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, (void *)cfg->tls_cert_pem},
            {MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)cfg->tls_key_pem},
            {MHD_OPTION_END, 0, NULL}};
        h->d[h->nd] = MHD_start_daemon(
            flags | (tls ? MHD_USE_TLS : 0u), 0, NULL, NULL, on_access, w,
            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
            w, MHD_OPTION_NOTIFY_CONNECTION, on_connection, w, MHD_OPTION_CONNECTION_TIMEOUT,
            cfg->connection_timeout ? cfg->connection_timeout : 30u,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY, MHD_OPTION_ARRAY, tls_opts,
            MHD_OPTION_END);
        if (!h->d[h->nd]) {
            snprintf(err->msg, sizeof err->msg, "cannot start the HTTP workers");
            goto fail;
        }
    }
    if (pipe2(h->wake, O_CLOEXEC) != 0 || pthread_create(&h->acceptor, NULL, accept_loop, h)) {
        snprintf(err->msg, sizeof err->msg, "cannot start the accepting thread");
        goto fail;
    }
    h->accepting = 1;
    return h;
fail:
    teardown(h);
    if (h->wake[0] >= 0) {
        close(h->wake[0]);
        close(h->wake[1]);
    }
    for (int i = 0; i < 3; i++)
        free(h->token[i]);
    free(h);
    return NULL;
}

/* Requests in flight, over all workers. */
static long in_flight(const rld_http *h)
{
    long n = 0;
    for (unsigned i = 0; i < h->nd; i++)
        n += __atomic_load_n(&h->w[i].active, __ATOMIC_ACQUIRE);
    return n;
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
    /* no new connections: the acceptor stops and the socket closes */
    if (h->accepting) {
        char c = 1;
        while (write(h->wake[1], &c, 1) < 0 && errno == EINTR)
            ;
        pthread_join(h->acceptor, NULL);
        h->accepting = 0;
    }
    close(h->lfd);
    h->lfd = -1;
    const struct timespec step = {0, 5000000};
    for (unsigned waited = 0; in_flight(h) > 0 && waited < drain_ms; waited += 5)
        nanosleep(&step, NULL);
    unsigned left = (unsigned)in_flight(h);
    teardown(h);
    close(h->wake[0]);
    close(h->wake[1]);
    for (int i = 0; i < 3; i++)
        free(h->token[i]);
    free(h);
    return left;
}
