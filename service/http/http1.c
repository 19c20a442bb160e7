/*
 * http1.c - the plain HTTP server behind http.h: HTTP/1.1 on net.h's workers.
 *
 * net.h accepts, hands each new connection to a worker in turn and runs the worker's loop, its
 * timeouts and the drain; this file parses and answers. A connection reads into one buffer,
 * parses each request's head there in place (http1_parse.h), runs the handler as soon as the
 * body is in, and appends the answer to its output, which goes out with one send for
 * everything one read brought (pipelined requests are answered in order). While
 * more than OUT_HIGH bytes of answers wait for a client that does not read them, nothing more
 * is read from it. A request stays its connection's current one until it is answered, so an
 * answer given later (from another thread, through the worker's queue) fits the same path.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#include "http1_parse.h"
#include "net/net.h"
#include "server.h"

#define IN_CAP (RLD_H1_MAX_HEAD + 4096) /* a head at its limit leaves room to read a body */
#define OUT_INLINE 8192
#define OUT_HIGH 65536            /* answers waiting to be read: past it, stop reading */
#define LINGER_NS (2 * RL_NS_PER_SEC) /* reading what a closed request still sends, at most */

/* S_READY: the request is complete and waits in its worker's batch (h1_on_turn). */
enum { S_HEAD, S_BODY, S_CHUNKED, S_LINGER, S_READY };

typedef struct worker worker;

typedef struct conn {
    rld_net_conn base; /* first: net.h's part */
    worker *w;
    int state;
    int readable;     /* the socket may hold bytes not read yet */
    int keep;         /* the current request lets the connection stay open */
    int head_only;    /* HEAD: the answer without its body */
    int close_after;  /* close once the output is written */
    int peer_eof;     /* the client will send nothing more */
    unsigned pending; /* requests begun whose answers are not all written (in flight) */
    unsigned queued;  /* of them, those answered: their answers are in wb */
    size_t in_len, in_off;
    size_t scan; /* rld_h1_head_end's resume point */
    size_t hold; /* the current request's head ends here: the buffer keeps it till answered */
    uint64_t body_left;
    size_t discarded; /* while lingering */
    rld_h1_chunked ch;
    rld_buf wb; /* answers not yet written */
    size_t woff;
    struct sockaddr_storage peer;
    rld_h1_req hreq;
    rld_req req;
    char wb_inl[OUT_INLINE];
    char in[IN_CAP];
} conn;

/* HTTP's part of a net worker; its busy work is the requests in flight. */
struct worker {
    _Alignas(64) rld_net_worker *nw; /* a cache line of its own: no sharing between workers */
    struct h1_http *h;
    conn *ready[RLD_MANY_MAX]; /* complete requests of one row with a many handler, not yet run */
    size_t nready;
    time_t date_at; /* the second date is written for */
    char date[40];  /* "Date: ...\r\n", of the last wake-up (date_refresh) */
    size_t date_len;
};

typedef struct h1_http {
    rld_http base;
    rld_net *net;
    worker w[RLD_NET_MAX_WORKERS];
} h1_http;

static conn *conn_of(const rld_req *r)
{
    return (conn *)((char *)r - offsetof(conn, req));
}

static void active_add(worker *w, long n)
{
    rld_net_busy_add(w->nw, n);
}

/* ---- answers ------------------------------------------------------------------------------ */

static const char *reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "";
    }
}

/* The Date header of this second (RFC 9110, 6.6.1), looked at once per wake-up of the loop
 * (the answers of one turn share it) and rewritten once a second. */
static void date_refresh(worker *w)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    if (ts.tv_sec != w->date_at) {
        w->date_at = ts.tv_sec;
        gmtime_r(&ts.tv_sec, &tm);
        w->date_len = strftime(w->date, sizeof w->date, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n",
                               &tm);
    }
}

/* "HTTP/1.1 <status> <reason>\r\n" and the Content-Type field when ctype is not NULL. */
static void put_status_line(rld_buf *b, int status, const char *ctype)
{
    const char *why = reason(status);
    size_t nw = strlen(why), nc = ctype ? strlen(ctype) : 0;
    if (rld_buf_reserve(b, 13 + nw + 2 + 14 + nc + 2) != 0)
        return;
    char *p = b->p + b->len;
    RLD_PUT_LIT(p, "HTTP/1.1 ");
    *p++ = (char)('0' + status / 100 % 10);
    *p++ = (char)('0' + status / 10 % 10);
    *p++ = (char)('0' + status % 10);
    *p++ = ' ';
    memcpy(p, why, nw);
    p += nw;
    RLD_PUT_LIT(p, "\r\n");
    if (ctype) {
        RLD_PUT_LIT(p, "Content-Type: ");
        memcpy(p, ctype, nc);
        p += nc;
        RLD_PUT_LIT(p, "\r\n");
    }
    b->len = (size_t)(p - b->p);
}

static void put_header(rld_buf *b, const char *name, const char *value)
{
    size_t nn = strlen(name), nv = strlen(value);
    if (rld_buf_reserve(b, nn + nv + 4) != 0)
        return;
    char *p = b->p + b->len;
    memcpy(p, name, nn);
    p += nn;
    RLD_PUT_LIT(p, ": ");
    memcpy(p, value, nv);
    p += nv;
    RLD_PUT_LIT(p, "\r\n");
    b->len = (size_t)(p - b->p);
}

/* The fields every answer ends with (Connection when needed, Content-Length, Date) and the
 * blank line. */
static void put_head_end(conn *c, size_t len)
{
    rld_buf *b = &c->wb;
    if (rld_buf_reserve(b, 24 + 16 + 20 + 2 + c->w->date_len + 2) != 0)
        return;
    char *p = b->p + b->len;
    if (c->close_after)
        RLD_PUT_LIT(p, "Connection: close\r\n");
    else if (c->hreq.minor == 0)
        RLD_PUT_LIT(p, "Connection: keep-alive\r\n");
    RLD_PUT_LIT(p, "Content-Length: ");
    p += rld_fmt_i64(p, (int64_t)len);
    RLD_PUT_LIT(p, "\r\n");
    memcpy(p, c->w->date, c->w->date_len);
    p += c->w->date_len;
    RLD_PUT_LIT(p, "\r\n");
    b->len = (size_t)(p - b->p);
}

static const char oom_body[] = "{\"error\":\"out of memory\"}";

/* Appends the whole answer (status line, headers, body) to the connection's output. */
static int h1_prepare(rld_req *r, int status, const char *ctype, const rld_header *hs, size_t nh)
{
    conn *c = conn_of(r);
    rld_buf *b = &c->wb;
    const char *body = r->out.p;
    size_t len = r->out.len;
    if (r->out.oom) {
        status = 500, ctype = "application/json", nh = 0;
        body = oom_body, len = sizeof oom_body - 1;
    }
    if (!c->keep || rld_http_stopping(r->h))
        c->close_after = 1;
    c->queued++;
    put_status_line(b, status, ctype);
    for (size_t i = 0; i < nh; i++)
        put_header(b, hs[i].name, hs[i].value);
    put_head_end(c, len);
    if (!c->head_only && len)
        rld_buf_put(b, body, len);
    return status;
}

static void h1_commit(rld_req *r)
{
    (void)r; /* the answer goes out with the connection's next write */
}

static int h1_each_header(rld_req *r, rld_header_fn fn, void *ctx)
{
    const rld_h1_req *q = &conn_of(r)->hreq;
    for (unsigned i = 0; i < q->nh; i++) {
        int rc = fn(ctx, q->h[i].name, q->h[i].nl, q->h[i].value, q->h[i].vl);
        if (rc)
            return rc;
    }
    return 0;
}

static const char *h1_query(rld_req *r, const char *name)
{
    const rld_h1_req *q = &conn_of(r)->hreq;
    for (unsigned i = 0; i < q->nargs; i++)
        if (strcmp(q->args[i].name, name) == 0)
            return q->args[i].value;
    return NULL;
}

static const struct sockaddr *h1_client(const rld_req *r)
{
    return (const struct sockaddr *)&conn_of(r)->peer;
}

/* ---- requests ----------------------------------------------------------------------------- */

static void request_begin(conn *c)
{
    /* the loop's wake-up: no clock call */
    rld__req_begin(&c->w->h->base, &c->req, c->w->nw->now);
    c->pending++;
    active_add(c->w, 1);
}

/* Answers what cannot be read as a request and closes after it (the framing is lost). */
static void reply_bad(conn *c, int status, const char *why)
{
    c->keep = 0;
    c->head_only = 0;
    rld_reply_error(&c->req, status, "%s", why);
    rld__req_end(&c->req);
    c->close_after = 1;
}

static void request_done(conn *c)
{
    rld__req_end(&c->req);
    c->state = S_HEAD;
    c->hold = 0;
}

/* Runs the complete request, or, when its row takes several at once, puts it in the worker's
 * batch (run at the end of the loop's turn). 1 when it ran, 0 when it waits there. */
static int request_finish(conn *c)
{
    worker *w = c->w;
    if (rld__req_batchable(&c->req) && w->nready < RLD_MANY_MAX &&
        (!w->nready || w->ready[0]->req.m == c->req.m)) {
        w->ready[w->nready++] = c;
        c->state = S_READY;
        return 0;
    }
    rld__req_run(&c->req);
    request_done(c);
    return 1;
}

/* A head is complete at in + in_off: routes it and sets up the body's reading. */
static int head_parsed(conn *c, char *head, size_t len)
{
    rld_h1_req *q = &c->hreq;
    rld_req *r = &c->req;
    request_begin(c);
    int st = rld_h1_parse_head(head, len, q);
    if (st) {
        reply_bad(c, st, q->error);
        return 0;
    }
    c->keep = q->keep_alive;
    c->head_only = strcmp(q->method, "HEAD") == 0;
    rld__req_route(r, q->method, q->path,
                   q->content_length > 0 ? (unsigned long long)q->content_length : 0,
                   q->authorization);
    if (r->early == 413) { /* answered at once: the body is not read */
        c->keep = 0;
        rld__req_reply_early(r);
        rld__req_end(r);
        c->close_after = 1;
        return 0;
    }
    if (!q->chunked && q->content_length <= 0)
        return request_finish(c);
    c->hold = c->in_off;
    if (q->chunked)
        c->ch = (rld_h1_chunked){0};
    c->body_left = q->chunked ? 0 : (uint64_t)q->content_length;
    c->state = q->chunked ? S_CHUNKED : S_BODY;
    if (q->expect_continue && q->minor == 1 && c->in_off == c->in_len)
        rld_buf_put(&c->wb, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    return 1;
}

/* Looks for the next head. 1 when a request was taken, 0 when more bytes are needed. */
static int step_head(conn *c)
{
    if (c->scan == 0)
        c->in_off += rld_h1_skip_empty(c->in + c->in_off, c->in_len - c->in_off);
    size_t avail = c->in_len - c->in_off;
    if (!avail)
        return 0;
    char *head = c->in + c->in_off;
    size_t end = rld_h1_head_end(head, avail, &c->scan);
    if (!end) {
        const char *why;
        int st = rld_h1_head_too_long(head, avail, &why);
        if (st) {
            request_begin(c);
            reply_bad(c, st, why);
        }
        return 0;
    }
    c->in_off += end;
    c->scan = 0;
    return head_parsed(c, head, end);
}

/* The bytes read were taken into the body: the buffer keeps only the head. */
static int body_wait(conn *c)
{
    c->in_off = c->in_len = c->hold;
    return 0;
}

static int step_body(conn *c)
{
    size_t avail = c->in_len - c->in_off;
    size_t n = avail < c->body_left ? avail : (size_t)c->body_left;
    rld__req_body_append(&c->req, c->in + c->in_off, n);
    c->in_off += n;
    c->body_left -= n;
    if (c->body_left == 0)
        return request_finish(c);
    return body_wait(c);
}

static int step_chunked(conn *c)
{
    size_t used, out;
    char *p = c->in + c->in_off;
    int rc = rld_h1_unchunk(&c->ch, p, c->in_len - c->in_off, &used, &out);
    if (rc < 0) {
        reply_bad(c, 400, "body: malformed chunked encoding");
        return 0;
    }
    rld__req_body_append(&c->req, p, out);
    c->in_off += used;
    if (c->req.seen > RLD_DISCARD_MAX) {
        reply_bad(c, 413, "body: larger than 65536 bytes");
        return 0;
    }
    if (rc == 1)
        return request_finish(c);
    return body_wait(c);
}

/* Takes every request the buffer holds. Returns 1 when it stopped because answers wait to be
 * read, 0 when it needs more bytes (or the connection closes after its output). */
static int conn_process(conn *c)
{
    for (;;) {
        if (c->close_after || c->state == S_LINGER || c->state == S_READY)
            return 0;
        if (c->wb.len - c->woff > OUT_HIGH)
            return 1;
        int more = c->state == S_HEAD   ? step_head(c)
                   : c->state == S_BODY ? step_body(c)
                                        : step_chunked(c);
        if (!more)
            return 0;
    }
}

/* ---- connections -------------------------------------------------------------------------- */

static void conn_close(conn *c)
{
    rld_net_close(&c->base); /* h1_on_close frees c */
}

static void h1_on_close(rld_net_conn *nc)
{
    conn *c = (conn *)nc;
    if (c->state != S_HEAD && c->state != S_LINGER)
        rld__req_end(&c->req); /* a request whose body never came */
    active_add(c->w, -(long)c->pending);
    rld_buf_reset(&c->wb);
    free(c);
}

/* Writes the output. 1 when all of it went, 0 when the rest waits for the socket, -1 when the
 * connection is broken. */
static int conn_flush(conn *c)
{
    while (c->woff < c->wb.len) {
        ssize_t n = send(c->base.fd, c->wb.p + c->woff, c->wb.len - c->woff, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        c->woff += (size_t)n;
        c->base.last = c->w->nw->now;
    }
    if (c->wb.oom)
        return -1;
    c->woff = c->wb.len = 0;
    if (rld_buf_on_heap(&c->wb))
        rld_buf_reset(&c->wb); /* a large answer's memory goes back */
    active_add(c->w, -(long)c->queued);
    c->pending -= c->queued;
    c->queued = 0;
    return 1;
}

/* Reads and drops until the socket is drained; closes at its end or past RLD_DISCARD_MAX. */
static void linger_read(conn *c)
{
    for (;;) {
        ssize_t n = recv(c->base.fd, c->in, IN_CAP, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0 || (c->discarded += (size_t)n) > RLD_DISCARD_MAX) {
            conn_close(c);
            return;
        }
        c->base.last = c->w->nw->now;
    }
}

/* After the last answer: the write side closes, and what the client still sends is read and
 * dropped for a while, so that its unread request does not turn the close into a reset that
 * loses the answer. */
static void conn_linger(conn *c)
{
    if (c->peer_eof || shutdown(c->base.fd, SHUT_WR) != 0) {
        conn_close(c);
        return;
    }
    if (c->state != S_HEAD)
        rld__req_end(&c->req);
    c->state = S_LINGER;
    c->base.last = c->w->nw->now;
    c->base.timeout = LINGER_NS;
    linger_read(c); /* may close c */
}

/* Makes room at the end of the buffer for the next read. */
static void conn_room(conn *c)
{
    if (c->state == S_HEAD && c->in_off) {
        size_t avail = c->in_len - c->in_off;
        if (avail)
            memmove(c->in, c->in + c->in_off, avail);
        c->in_len = avail;
        c->in_off = 0;
    }
}

/* One read. The socket is watched edge-triggered: a read that leaves room in the buffer took
 * everything there was, and the next bytes bring a new event. -1 when the connection broke. */
static int conn_read(conn *c)
{
    conn_room(c);
    size_t room = IN_CAP - c->in_len;
    ssize_t n;
    do
        n = recv(c->base.fd, c->in + c->in_len, room, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        c->readable = 0;
        return 0;
    }
    if (n < 0)
        return -1;
    if (n == 0)
        c->peer_eof = 1;
    if ((size_t)n < room)
        c->readable = 0;
    c->base.last = c->w->nw->now;
    c->in_len += (size_t)n;
    return 0;
}

/* Reads what there is, answers it, writes, and closes when the connection is done. Reading
 * stops while the answers waiting to be written pass OUT_HIGH. */
static void conn_run(conn *c)
{
    for (;;) {
        if (c->readable && !c->close_after && c->wb.len - c->woff <= OUT_HIGH &&
            conn_read(c) != 0) {
            conn_close(c);
            return;
        }
        int paused = conn_process(c);
        if (c->state == S_READY)
            return; /* its batch runs it, then runs the connection on */
        if (c->peer_eof && !paused)
            c->close_after = 1;
        int rc = conn_flush(c);
        if (rc < 0) {
            conn_close(c);
            return;
        }
        if (rc == 1 && c->close_after) {
            conn_linger(c); /* may close c */
            return;
        }
        if (rc == 0 || (!paused && !c->readable))
            return; /* the socket's next event goes on */
    }
}

static void h1_on_event(rld_net_conn *nc, unsigned events)
{
    conn *c = (conn *)nc;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        c->readable = 1;
    if (c->state == S_LINGER)
        linger_read(c); /* may close c */
    else
        conn_run(c); /* may close c */
}

/* ---- workers ------------------------------------------------------------------------------ */

static void h1_on_wake(rld_net_worker *nw)
{
    date_refresh(nw->proto);
}

/* Runs the batch of complete requests, then each of their connections on (reading what
 * follows, writing the answers); requests completed meanwhile form the next batch. */
static int h1_on_turn(rld_net_worker *nw)
{
    worker *w = nw->proto;
    while (w->nready) {
        conn *cs[RLD_MANY_MAX];
        rld_req *rs[RLD_MANY_MAX];
        size_t n = w->nready;
        memcpy(cs, w->ready, n * sizeof cs[0]);
        w->nready = 0;
        for (size_t i = 0; i < n; i++)
            rs[i] = &cs[i]->req;
        rld__req_run_many(rs, n);
        for (size_t i = 0; i < n; i++)
            request_done(cs[i]);
        for (size_t i = 0; i < n; i++)
            conn_run(cs[i]); /* may close it */
    }
    return -1;
}

/* On the accepting thread: the connection's memory is made off the worker. */
static rld_net_conn *h1_open(rld_net_worker *nw, int fd, const struct sockaddr *sa, socklen_t sl)
{
    conn *c = malloc(sizeof *c);
    (void)fd;
    if (!c)
        return NULL;
    c->w = nw->proto;
    c->state = S_HEAD;
    c->close_after = c->peer_eof = 0;
    c->readable = 1;
    c->pending = c->queued = 0;
    c->in_len = c->in_off = c->scan = c->hold = 0;
    c->discarded = 0;
    c->woff = 0;
    c->keep = 1;
    c->hreq.minor = 1;
    rld_buf_init(&c->wb, c->wb_inl, sizeof c->wb_inl);
    memset(&c->peer, 0, sizeof c->peer);
    memcpy(&c->peer, sa, sl < sizeof c->peer ? sl : sizeof c->peer);
    return &c->base;
}

static const rld_net_ops h1_net_ops = {.open = h1_open,
                                       .on_event = h1_on_event,
                                       .on_wake = h1_on_wake,
                                       .on_turn = h1_on_turn,
                                       .on_close = h1_on_close,
                                       .refuse = rld__http_refuse};

/* ---- the server ------------------------------------------------------------------------- */

static void teardown(h1_http *h)
{
    if (h->net)
        rld_net_free(h->net);
    rld__http_fini(&h->base);
    free(h);
}

static unsigned h1_stop(rld_http *base, unsigned drain_ms)
{
    h1_http *h = (h1_http *)base;
    long left = rld_net_drain(h->net, drain_ms);
    teardown(h);
    return (unsigned)left;
}

static const rld_http_ops h1_ops = {h1_each_header, h1_query,  h1_prepare,
                                    h1_commit,      h1_client, h1_stop};

rld_http *rld__http1_start(const rld_http_config *cfg, rl_err *err)
{
    h1_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    if (rld__http_init(&h->base, cfg, &h1_ops, err) != 0)
        goto fail;
    unsigned idle_s = cfg->connection_timeout ? cfg->connection_timeout : 30;
    rld_net_config nc = {.address = cfg->address,
                         .port = cfg->port,
                         .workers = rld__http_workers(cfg),
                         .max_connections = cfg->max_connections,
                         .idle_ms = idle_s * 1000u,
                         .batch = 1,
                         .setting = "listen.address",
                         .ops = &h1_net_ops,
                         .ctx = &h->base};
    if (!(h->net = rld_net_new(&nc, err)))
        goto fail;
    h->base.port = rld_net_port(h->net);
    for (unsigned i = 0; i < rld_net_workers(h->net); i++) {
        worker *w = &h->w[i];
        w->nw = rld_net_worker_at(h->net, i);
        w->nw->proto = w;
        w->h = h;
        date_refresh(w);
    }
    if (rld_net_run(h->net, err) != 0)
        goto fail;
    return &h->base;
fail:
    teardown(h);
    return NULL;
}
