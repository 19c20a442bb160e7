/*
 * mhd.c - the HTTPS server behind http.h: libmicrohttpd, one single-threaded epoll daemon
 * per worker, fed new connections round-robin by net.h's accepting thread (which also owns
 * the listening socket and the cap). Plain HTTP is served by http1.c.
 */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "app/clock.h"
#include "app/log.h"
#include "net/net.h"
#include "server.h"

/* libmicrohttpd's memory pool per connection: the request line and headers must fit in it,
 * along with the response's headers. libmicrohttpd zeroes the whole pool between two requests
 * of a keep-alive connection, so its default of 32 KiB cost more than any other user-space
 * step of a decision; 16 KiB still takes request headers up to about 12 KiB (nginx's default
 * limit for a header line is 8 KiB). The body does not live there: it comes in pieces. */
#define CONN_MEMORY (16 * 1024)

/* A request as libmicrohttpd serves it. */
typedef struct mreq {
    rld_req r;
    struct MHD_Connection *c;
    struct conn_ctx *owner; /* the connection storage it lives in, NULL when malloc'd */
    struct MHD_Response *resp; /* prepared, not queued yet */
    int resp_status;
    enum MHD_Result queued;
} mreq;

typedef struct conn_ctx {
    int busy;   /* req is in use */
    int closed; /* the connection closed while req was in use: completion frees it */
    mreq req;
} conn_ctx;

/* A worker: one libmicrohttpd daemon with its one thread. Its callbacks get the worker, so that
 * the count of requests in flight (net's busy work, the drain waits for it) is kept per worker,
 * on a cache line of its own (one counter for all made the workers pass its line back and forth
 * twice a request). */
typedef struct worker {
    struct mhd_http *h;
    rld_net_worker *nw;
} worker;

typedef struct mhd_http {
    rld_http base;
    rld_net *net;
    struct MHD_Daemon *d[RLD_NET_MAX_WORKERS];
    worker w[RLD_NET_MAX_WORKERS];
    unsigned nd;
} mhd_http;

/* ---- requests --------------------------------------------------------------------------- */

static mreq *req_begin(worker *w, struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn_ctx *cc = ci ? ci->socket_context : NULL;
    mreq *q;
    if (cc && !cc->busy) {
        cc->busy = 1;
        q = &cc->req;
        q->owner = cc;
    } else if ((q = malloc(sizeof *q)) != NULL) {
        q->owner = NULL;
    } else {
        return NULL;
    }
    rld__req_begin(&w->h->base, &q->r, rld_mono_ns());
    q->c = c;
    q->resp = NULL;
    q->queued = MHD_NO;
    rld_net_busy_add(w->nw, 1);
    return q;
}

static void req_end(mreq *q)
{
    rld__req_end(&q->r);
    conn_ctx *cc = q->owner;
    if (!cc)
        free(q);
    else if (cc->closed)
        free(cc);
    else
        cc->busy = 0;
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

static int mhd_each_header(rld_req *r, rld_header_fn fn, void *ctx)
{
    each_header e = {fn, ctx, 0};
    MHD_get_connection_values_n(((mreq *)r)->c, MHD_HEADER_KIND, header_of, &e);
    return e.rc;
}

static const char *mhd_query(rld_req *r, const char *name)
{
    struct MHD_Connection *c = ((mreq *)r)->c;
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    if (v)
        return v;
    /* a key without a value ("?flag") is listed with a NULL value */
    return MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, name, strlen(name), NULL,
                                         NULL) == MHD_YES
               ? ""
               : NULL;
}

static const struct sockaddr *mhd_client(const rld_req *r)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(((const mreq *)r)->c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return ci ? ci->client_addr : NULL;
}

/* ---- replies ---------------------------------------------------------------------------- */

static const char oom_body[] = "{\"error\":\"out of memory\"}";

static int mhd_prepare(rld_req *r, int status, const char *ctype, const rld_header *hs,
                       size_t nh)
{
    mreq *q = (mreq *)r;
    struct MHD_Response *resp = NULL;
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
        if (!resp)
            return q->resp = NULL, 500;
    }
    if (ctype)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    for (size_t i = 0; i < nh; i++)
        MHD_add_response_header(resp, hs[i].name, hs[i].value);
    if (rld_http_stopping(r->h))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    q->resp = resp;
    q->resp_status = status;
    return status;
}

static void mhd_commit(rld_req *r)
{
    mreq *q = (mreq *)r;
    if (!q->resp) {
        q->queued = MHD_NO;
        return;
    }
    q->queued = MHD_queue_response(q->c, (unsigned)q->resp_status, q->resp);
    MHD_destroy_response(q->resp);
    q->resp = NULL;
}

/* ---- the access handler ----------------------------------------------------------------- */

/* Routes the request and decides what can be decided from the headers: 404, 405, 413 on a
 * declared length, 401. A 413 goes out at once (the connection then closes, the body unread);
 * the others after the body has been read and dropped, which keeps the connection alive. */
static enum MHD_Result first_call(mreq *q, const char *url, const char *method)
{
    const char *cl =
        MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    rld__req_route(&q->r, method, url, cl ? strtoull(cl, NULL, 10) : 0,
                   MHD_lookup_connection_value(q->c, MHD_HEADER_KIND,
                                               MHD_HTTP_HEADER_AUTHORIZATION));
    if (q->r.early == 413) {
        rld__req_reply_early(&q->r);
        return q->queued;
    }
    return MHD_YES;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_size, void **con_cls)
{
    worker *w = cls;
    mreq *q = *con_cls;
    (void)version;
    if (!q) {
        if (!(q = req_begin(w, c)))
            return MHD_NO;
        *con_cls = q;
        return first_call(q, url, method);
    }
    if (q->r.status)
        return MHD_YES;
    if (*upload_size) {
        rld__req_body_append(&q->r, upload_data, *upload_size);
        *upload_size = 0;
        return q->r.seen > RLD_DISCARD_MAX ? MHD_NO : MHD_YES;
    }
    rld__req_run(&q->r);
    return q->queued;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    worker *w = cls;
    mreq *q = *con_cls;
    (void)c;
    (void)toe;
    if (!q)
        return;
    *con_cls = NULL;
    req_end(q);
    /* release: the request's memory is done with before the drain sees the count fall */
    rld_net_busy_add(w->nw, -1);
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
        rld_net_closed(w->h->net);
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

/* Hands a new connection to worker i's daemon (which closes fd itself when it fails). */
static int hand(void *ctx, unsigned i, int fd, const struct sockaddr *sa, socklen_t sl)
{
    mhd_http *m = ctx;
    return MHD_add_connection(m->d[i], fd, sa, sl) == MHD_YES ? 0 : -1;
}

/* Stops the accepting thread and the workers, and frees m. */
static void teardown(mhd_http *m)
{
    if (m->net)
        rld_net_drain(m->net, 0); /* no more hand-overs */
    for (unsigned i = 0; i < m->nd; i++)
        MHD_stop_daemon(m->d[i]); /* its closes count down on net */
    if (m->net)
        rld_net_free(m->net);
    rld__http_fini(&m->base);
    free(m);
}

static unsigned mhd_stop(rld_http *h, unsigned drain_ms)
{
    mhd_http *m = (mhd_http *)h;
    long left = rld_net_drain(m->net, drain_ms);
    teardown(m);
    return (unsigned)left;
}

static const rld_http_ops mhd_ops = {mhd_each_header, mhd_query, mhd_prepare,
                                     mhd_commit,      mhd_client, mhd_stop};

static struct MHD_Daemon *start_worker(mhd_http *m, worker *w)
{
    const rld_http_config *cfg = &m->base.cfg;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC |
                     MHD_USE_TURBO | MHD_USE_ERROR_LOG;
    int tls = cfg->tls_cert_pem && cfg->tls_key_pem;
    struct MHD_OptionItem tls_opts[] = {
        {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, (void *)cfg->tls_cert_pem},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)cfg->tls_key_pem},
        {MHD_OPTION_END, 0, NULL}};
    w->h = m;
    return MHD_start_daemon(
        flags | (tls ? MHD_USE_TLS : 0u), 0, NULL, NULL, on_access, w,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, m, MHD_OPTION_NOTIFY_COMPLETED, on_completed, w,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, w, MHD_OPTION_CONNECTION_TIMEOUT,
        cfg->connection_timeout ? cfg->connection_timeout : 30u,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY, MHD_OPTION_ARRAY, tls_opts,
        MHD_OPTION_END);
}

static const rld_net_ops mhd_net_ops = {.refuse = rld__http_refuse, .hand = hand};

rld_http *rld__http_mhd_start(const rld_http_config *cfg, rl_err *err)
{
    mhd_http *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    if (rld__http_init(&m->base, cfg, &mhd_ops, err) != 0)
        goto fail;
    if ((cfg->tls_cert_pem || cfg->tls_key_pem) &&
        MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(err->msg, sizeof err->msg, "tls: this libmicrohttpd was built without TLS");
        goto fail;
    }
    /* libmicrohttpd keeps its own timeouts: net's idle_ms stays 0 */
    rld_net_config nc = {.address = cfg->address,
                         .port = cfg->port,
                         .workers = rld__http_workers(cfg),
                         .max_connections = cfg->max_connections,
                         .setting = "listen.address",
                         .ops = &mhd_net_ops,
                         .ctx = m};
    if (!(m->net = rld_net_new(&nc, err)))
        goto fail;
    m->base.port = rld_net_port(m->net);
    unsigned nd = rld_net_workers(m->net);
    for (; m->nd < nd; m->nd++) {
        m->w[m->nd].nw = rld_net_worker_at(m->net, m->nd);
        if (!(m->d[m->nd] = start_worker(m, &m->w[m->nd]))) {
            snprintf(err->msg, sizeof err->msg, "cannot start the HTTP workers");
            goto fail;
        }
    }
    if (rld_net_run(m->net, err) != 0)
        goto fail;
    return &m->base;
fail:
    teardown(m);
    return NULL;
}
