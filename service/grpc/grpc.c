/*
 * grpc.c - see grpc.h.
 *
 * Each worker owns an epoll instance, the connections it accepted and their nghttp2 sessions;
 * nothing is shared between workers but the listening socket (EPOLLEXCLUSIVE, so one worker
 * wakes per connection) and the stop flag. A call is answered on the worker that read it, as
 * soon as its last frame arrives, inside nghttp2's frame callback.
 */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "app/clock.h"
#include "grpc.h"
#include "app/log.h"

#define MAX_WORKERS 64
#define MAX_STREAMS 1024 /* SETTINGS_MAX_CONCURRENT_STREAMS */
#define OUT_BUF 16384
#define ARENA_LIMIT (4u << 20) /* the memory one call may use, the unpacked message included */

typedef struct worker worker;
typedef struct conn conn;

typedef struct stream {
    int32_t id;
    conn *c;
    int method;         /* index in methods, -1 when unknown */
    int not_post;       /* :method is not POST */
    int not_grpc;       /* content-type is not application/grpc[+proto] */
    int other_encoding; /* grpc-encoding names something other than identity */
    int answered;
    int early; /* answered before the request ended: reset the stream once the answer is sent */
    int too_big;
    rl_ns deadline; /* CLOCK_MONOTONIC; 0: none */
    rl_ns started;  /* CLOCK_MONOTONIC: its headers began */
    char now[40];   /* ratelimitd-now metadata */
    int has_now;
    char auth[1040]; /* authorization metadata ("Bearer <token>", tokens are 1024 at most) */
    int has_auth;
    rld_buf body;
    char body_inl[256];
    rld_buf resp; /* the length-prefixed answer */
    char resp_inl[256];
    size_t resp_off;
    char code[4];                 /* grpc-status of the trailers */
    char msg[600];                /* grpc-message, encoded */
    struct stream *wprev, *wnext; /* in the worker's list of streams waiting with a deadline */
    int waiting;
    struct stream *cprev, *cnext; /* in its connection's list of open streams */
} stream;

struct conn {
    int fd;
    worker *w;
    nghttp2_session *s;
    conn *prev, *next;
    int out_armed;
    unsigned nstreams; /* open */
    stream *streams;   /* the open ones: nghttp2_session_del frees its own without on_close */
    rl_ns last;        /* CLOCK_MONOTONIC: accepted, or bytes last read */
    size_t outlen, outoff;
    const uint8_t *pend; /* the rest of nghttp2's last chunk that did not fit in out */
    size_t pend_len;
    uint8_t out[OUT_BUF];
};

struct worker {
    rld_grpc *g;
    int ep, ev; /* epoll, eventfd for the stop */
    pthread_t thread;
    conn *conns;
    unsigned nconns;
    stream *waiting; /* streams with a deadline not answered yet */
    rl_ns idle_check; /* CLOCK_MONOTONIC: when idle connections are looked for next */
    int goaway_sent;
    rld_arena arena;
};

struct rld_grpc {
    rld_grpc_config cfg;
    int lfd, port;
    int stopping;      /* atomic */
    rl_ns drain_until; /* atomic, CLOCK_MONOTONIC */
    unsigned left;     /* atomic: streams open when a worker gave up */
    unsigned open;     /* atomic: connections open, over all workers */
    int nworkers;
    worker w[MAX_WORKERS];
};

/* ---- small pieces ----------------------------------------------------------------------- */

rl_ns rld_grpc_timeout_parse(const char *v, size_t len)
{
    static const struct {
        char unit;
        rl_ns ns;
    } units[] = {{'H', 3600 * RL_NS_PER_SEC},
                 {'M', 60 * RL_NS_PER_SEC},
                 {'S', RL_NS_PER_SEC},
                 {'m', 1000000},
                 {'u', 1000},
                 {'n', 1}};
    if (len < 2 || len > 9)
        return -1;
    rl_ns n = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        n = n * 10 + (v[i] - '0');
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (v[len - 1] == units[i].unit)
            return n > INT64_MAX / units[i].ns ? INT64_MAX : n * units[i].ns;
    return -1;
}

void rld_grpc_message_encode(rld_buf *out, const char *msg)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
            rld_buf_putc(out, (char)*p);
        } else {
            rld_buf_putc(out, '%');
            rld_buf_putc(out, hex[*p >> 4]);
            rld_buf_putc(out, hex[*p & 15]);
        }
    }
}

static int header_is(const uint8_t *name, size_t nlen, const char *lit)
{
    return nlen == strlen(lit) && memcmp(name, lit, nlen) == 0;
}

static void waiting_remove(worker *w, stream *st)
{
    if (!st->waiting)
        return;
    if (st->wprev)
        st->wprev->wnext = st->wnext;
    else
        w->waiting = st->wnext;
    if (st->wnext)
        st->wnext->wprev = st->wprev;
    st->waiting = 0;
}

/* ---- answers ------------------------------------------------------------------------------ */

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE             \
    }

static ssize_t resp_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    stream *st = src->ptr;
    (void)ud;
    size_t n = st->resp.len - st->resp_off;
    if (n > len)
        n = len;
    memcpy(buf, st->resp.p + st->resp_off, n);
    st->resp_off += n;
    if (st->resp_off == st->resp.len) {
        nghttp2_nv tr[] = {NV("grpc-status", "0")};
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (nghttp2_submit_trailer(s, id, tr, 1) == 0)
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
    return (ssize_t)n;
}

/* A trailers-only answer: the status in the one HEADERS frame, which ends the stream. */
static void observe(stream *st, rld_grpc_code code)
{
    const rld_grpc_config *cfg = &st->c->w->g->cfg;
    if (cfg->observe)
        cfg->observe(cfg->app, st->method, code, rld_mono_ns() - st->started);
}

static void answer_status(stream *st, rld_grpc_code code, const char *msg)
{
    rld_buf m;
    observe(st, code);
    st->answered = 1;
    waiting_remove(st->c->w, st);
    snprintf(st->code, sizeof st->code, "%d", (int)code);
    rld_buf_init(&m, NULL, 0);
    rld_grpc_message_encode(&m, msg);
    snprintf(st->msg, sizeof st->msg, "%s", m.oom ? "" : rld_buf_cstr(&m));
    rld_buf_reset(&m);
    nghttp2_nv h[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                      NV("grpc-status", st->code), NV("grpc-message", st->msg),
                      NV("grpc-accept-encoding", "identity")};
    nghttp2_submit_response(st->c->s, st->id, h, sizeof h / sizeof h[0], NULL);
}

static void answer_http(stream *st, const char *status)
{
    nghttp2_nv h[] = {NV(":status", status)};
    st->answered = 1;
    waiting_remove(st->c->w, st);
    nghttp2_submit_response(st->c->s, st->id, h, 1, NULL);
}

/* Takes the one message out of the body; answers and returns -1 when there is none. */
static int message_or_answer(stream *st, size_t max, const uint8_t **msg, size_t *len)
{
    const uint8_t *b = (const uint8_t *)st->body.p;
    if (st->too_big)
        return answer_status(st, RLD_GRPC_RESOURCE_EXHAUSTED, "message: larger than the limit"), -1;
    if (st->body.len < 5)
        return answer_status(st, RLD_GRPC_INTERNAL, "message: a unary call needs one message"), -1;
    uint32_t n = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
    if (n > max)
        return answer_status(st, RLD_GRPC_RESOURCE_EXHAUSTED, "message: larger than the limit"), -1;
    if (st->body.len != (size_t)n + 5)
        return answer_status(st, RLD_GRPC_INTERNAL,
                             "message: the body is not one length-prefixed message"),
               -1;
    if (b[0] & 1)
        return answer_status(st, st->other_encoding ? RLD_GRPC_UNIMPLEMENTED : RLD_GRPC_INTERNAL,
                             st->other_encoding ? "grpc-encoding: only identity is supported"
                                                : "message: compressed without grpc-encoding"),
               -1;
    *msg = b + 5;
    *len = n;
    return 0;
}

/* The whole call is in: decide it and answer. */
static void handle_call(stream *st)
{
    rld_grpc *g = st->c->w->g;
    worker *w = st->c->w;
    const uint8_t *msg;
    size_t len;
    rl_err err = {{0}};

    if (st->answered)
        return;
    if (st->not_post || st->not_grpc) {
        answer_http(st, st->not_post ? "405" : "415");
        return;
    }
    if (st->method < 0) {
        answer_status(st, RLD_GRPC_UNIMPLEMENTED, "unknown method");
        return;
    }
    if (st->deadline && rld_mono_ns() >= st->deadline) {
        answer_status(st, RLD_GRPC_DEADLINE_EXCEEDED,
                      "deadline passed before the call "
                      "was complete");
        return;
    }
    if (message_or_answer(st, g->cfg.max_message, &msg, &len) != 0)
        return;
    rld_grpc_call call = {msg, len, st->has_now ? st->now : NULL,
                          st->has_auth ? st->auth : NULL, &w->arena};
    rld_buf_reset(&st->resp);
    rld_buf_put(&st->resp, "\0\0\0\0\0", 5);
    rld_grpc_code code = g->cfg.methods[st->method].fn(g->cfg.app, &call, &st->resp, &err);
    rld_arena_reset(&w->arena);
    if (code == RLD_GRPC_OK && st->resp.oom)
        code = rl_errf(&err, RLD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    if (code != RLD_GRPC_OK) {
        answer_status(st, code, err.msg);
        return;
    }
    if (st->deadline && rld_mono_ns() >= st->deadline) {
        answer_status(st, RLD_GRPC_DEADLINE_EXCEEDED, "deadline passed while deciding");
        return;
    }
    size_t n = st->resp.len - 5;
    uint8_t *p = (uint8_t *)st->resp.p;
    p[1] = (uint8_t)(n >> 24);
    p[2] = (uint8_t)(n >> 16);
    p[3] = (uint8_t)(n >> 8);
    p[4] = (uint8_t)n;
    observe(st, RLD_GRPC_OK);
    st->answered = 1;
    waiting_remove(w, st);
    nghttp2_nv h[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                      NV("grpc-accept-encoding", "identity")};
    nghttp2_data_provider dp = {.source.ptr = st, .read_callback = resp_read};
    nghttp2_submit_response(st->c->s, st->id, h, sizeof h / sizeof h[0], &dp);
}

/* ---- nghttp2 callbacks ---------------------------------------------------------------------- */

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    conn *c = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    stream *st = calloc(1, sizeof *st);
    if (!st)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    st->id = f->hd.stream_id;
    st->c = c;
    st->method = -1;
    st->started = rld_mono_ns();
    c->nstreams++;
    st->cnext = c->streams;
    if (c->streams)
        c->streams->cprev = st;
    c->streams = st;
    rld_buf_init(&st->body, st->body_inl, sizeof st->body_inl);
    rld_buf_init(&st->resp, st->resp_inl, sizeof st->resp_inl);
    nghttp2_session_set_stream_user_data(s, st->id, st);
    return 0;
}

static void set_deadline(stream *st, const uint8_t *v, size_t vlen)
{
    rl_ns t = rld_grpc_timeout_parse((const char *)v, vlen);
    worker *w = st->c->w;
    if (t < 0)
        return;
    rl_ns now = rld_mono_ns();
    st->deadline = t > INT64_MAX - now ? INT64_MAX : now + t;
    if (!st->deadline)
        st->deadline = 1;
    if (!st->waiting) {
        st->waiting = 1;
        st->wprev = NULL;
        st->wnext = w->waiting;
        if (w->waiting)
            w->waiting->wprev = st;
        w->waiting = st;
    }
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *v, size_t vlen, uint8_t flags, void *ud)
{
    conn *c = ud;
    (void)flags;
    stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (!st || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (header_is(name, nlen, ":path")) {
        const rld_grpc_config *cfg = &c->w->g->cfg;
        for (size_t i = 0; i < cfg->nmethods; i++)
            if (header_is(v, vlen, cfg->methods[i].path))
                st->method = (int)i;
    } else if (header_is(name, nlen, ":method")) {
        st->not_post = !header_is(v, vlen, "POST");
    } else if (header_is(name, nlen, "content-type")) {
        st->not_grpc = !(vlen >= 16 && memcmp(v, "application/grpc", 16) == 0 &&
                         (vlen == 16 || v[16] == '+' || v[16] == ';'));
    } else if (header_is(name, nlen, "grpc-timeout")) {
        set_deadline(st, v, vlen);
    } else if (header_is(name, nlen, "grpc-encoding")) {
        st->other_encoding = !header_is(v, vlen, "identity");
    } else if (header_is(name, nlen, "ratelimitd-now") && vlen < sizeof st->now) {
        memcpy(st->now, v, vlen);
        st->now[vlen] = '\0';
        st->has_now = 1;
    } else if (header_is(name, nlen, "authorization") && vlen < sizeof st->auth) {
        memcpy(st->auth, v, vlen);
        st->auth[vlen] = '\0';
        st->has_auth = 1;
    }
    return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *ud)
{
    conn *c = ud;
    (void)flags;
    stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (!st || st->answered)
        return 0;
    if (st->body.len + len > c->w->g->cfg.max_message + 5) {
        st->too_big = st->early = 1;
        rld_buf_reset(&st->body);
        answer_status(st, RLD_GRPC_RESOURCE_EXHAUSTED, "message: larger than the limit");
        return 0;
    }
    rld_buf_put(&st->body, (const char *)data, len);
    if (st->body.oom) {
        st->too_big = st->early = 1;
        answer_status(st, RLD_GRPC_RESOURCE_EXHAUSTED, "message: out of memory");
    }
    return 0;
}

static int on_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    (void)ud;
    if ((f->hd.type == NGHTTP2_DATA || f->hd.type == NGHTTP2_HEADERS) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
        if (st)
            handle_call(st);
    }
    return 0;
}

/* After an answer sent before the request ended, RST_STREAM(NO_ERROR) tells the client to stop
 * sending (RFC 9113, 8.1). */
static int on_frame_sent(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    (void)ud;
    if (f->hd.type != NGHTTP2_HEADERS || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (st && st->early)
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
    return 0;
}

/* Frees a stream of c, closed or left open by a connection that goes. */
static void stream_free(conn *c, stream *st)
{
    waiting_remove(c->w, st);
    c->nstreams--;
    if (st->cprev)
        st->cprev->cnext = st->cnext;
    else
        c->streams = st->cnext;
    if (st->cnext)
        st->cnext->cprev = st->cprev;
    rld_buf_reset(&st->body);
    rld_buf_reset(&st->resp);
    free(st);
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
    (void)code;
    stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (!st)
        return 0;
    nghttp2_session_set_stream_user_data(s, id, NULL);
    stream_free(ud, st);
    return 0;
}

static nghttp2_session_callbacks *callbacks;
static nghttp2_option *options;
static pthread_once_t callbacks_once = PTHREAD_ONCE_INIT;

static void callbacks_init(void)
{
    if (nghttp2_session_callbacks_new(&callbacks) != 0 || nghttp2_option_new(&options) != 0)
        return;
    nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, on_frame_sent);
}

/* ---- connections ------------------------------------------------------------------------ */

static void conn_arm(conn *c, int out)
{
    if (c->out_armed == out)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0u), .data.ptr = c};
    epoll_ctl(c->w->ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->out_armed = out;
}

/* Writes what nghttp2 has to send, gathering frames into one buffer. -1 when the connection
 * is broken. */
static int conn_flush(conn *c)
{
    for (;;) {
        while (c->outlen < OUT_BUF) {
            if (!c->pend_len) {
                ssize_t n = nghttp2_session_mem_send(c->s, &c->pend);
                if (n < 0)
                    return -1;
                if (n == 0)
                    break;
                c->pend_len = (size_t)n;
            }
            size_t k = c->pend_len < OUT_BUF - c->outlen ? c->pend_len : OUT_BUF - c->outlen;
            memcpy(c->out + c->outlen, c->pend, k);
            c->outlen += k;
            c->pend += k;
            c->pend_len -= k;
        }
        if (c->outoff == c->outlen)
            break;
        ssize_t w = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                conn_arm(c, 1);
                return 0;
            }
            return -1;
        }
        c->outoff += (size_t)w;
        if (c->outoff == c->outlen)
            c->outoff = c->outlen = 0;
    }
    conn_arm(c, 0);
    return 0;
}

static void conn_close(conn *c)
{
    worker *w = c->w;
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    while (c->streams) /* a stalled call, say: the session frees its side only */
        stream_free(c, c->streams);
    nghttp2_session_del(c->s);
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    w->nconns--;
    __atomic_sub_fetch(&w->g->open, 1, __ATOMIC_RELAXED);
    free(c);
}

static void conn_goaway(conn *c)
{
    nghttp2_submit_goaway(c->s, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->s),
                          NGHTTP2_NO_ERROR, NULL, 0);
}

/* Flushes, and closes the connection when it is broken or both sides are done. */
static void conn_settle(conn *c)
{
    if (conn_flush(c) != 0 || (!nghttp2_session_want_read(c->s) &&
                               !nghttp2_session_want_write(c->s) && c->outlen == 0 && !c->pend_len))
        conn_close(c);
}

static void conn_read(conn *c)
{
    uint8_t buf[16384];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0 || nghttp2_session_mem_recv(c->s, buf, (size_t)n) < 0) {
            conn_close(c);
            return;
        }
        c->last = rld_mono_ns();
        if ((size_t)n < sizeof buf)
            break;
    }
    conn_settle(c);
}

static void conn_new(worker *w, int fd)
{
    int one = 1;
    conn *c = calloc(1, sizeof *c);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS}};
    if (!c || nghttp2_session_server_new2(&c->s, callbacks, c, options) != 0) {
        free(c);
        close(fd);
        return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    c->w = w;
    c->last = rld_mono_ns();
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        nghttp2_session_del(c->s);
        free(c);
        close(fd);
        return;
    }
    c->next = w->conns;
    if (w->conns)
        w->conns->prev = c;
    w->conns = c;
    w->nconns++;
    __atomic_add_fetch(&w->g->open, 1, __ATOMIC_RELAXED);
    nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, 1);
    if (w->goaway_sent)
        conn_goaway(c);
    conn_settle(c);
}

/* A connection past max_connections: the server's preface (an empty SETTINGS) and a GOAWAY
 * with ENHANCE_YOUR_CALM that says why, written at once, then closed. */
static void refuse(int fd, unsigned max)
{
    uint8_t f[9 + 9 + 8 + 96] = {0, 0, 0, 0x4}; /* SETTINGS, empty, stream 0 */
    int n = snprintf((char *)f + 26, 96, "connections: %u open, the most max_connections allows",
                     max);
    size_t len = 8 + (size_t)n;
    uint8_t *g = f + 9;
    g[0] = (uint8_t)(len >> 16), g[1] = (uint8_t)(len >> 8), g[2] = (uint8_t)len;
    g[3] = 0x7; /* GOAWAY, flags 0, stream 0, last stream 0 */
    g[9 + 7] = NGHTTP2_ENHANCE_YOUR_CALM;
    if (send(fd, f, 9 + 9 + len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* the client learns it from the closed connection alone */
    }
    close(fd);
}

static void accept_all(worker *w)
{
    unsigned max = w->g->cfg.max_connections;
    for (;;) {
        int fd = accept4(w->g->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (max && __atomic_load_n(&w->g->open, __ATOMIC_RELAXED) >= max)
            refuse(fd, max);
        else
            conn_new(w, fd);
    }
}

/* Closes, after a GOAWAY, the connections that sent nothing for idle_timeout_ms: idle ones,
 * and those whose call stalls (a body that does not come); looks at most every 100 ms. */
static void close_idle(worker *w, rl_ns now)
{
    rl_ns idle = (rl_ns)w->g->cfg.idle_timeout_ms * 1000000;
    if (!idle || now < w->idle_check)
        return;
    w->idle_check = now + 100000000;
    for (conn *c = w->conns, *nx; c; c = nx) {
        nx = c->next;
        if (now - c->last >= idle) {
            conn_goaway(c);
            conn_flush(c);
            conn_close(c);
        }
    }
}

/* Answers DEADLINE_EXCEEDED to the calls whose deadline passed; returns the milliseconds until
 * the next deadline (-1: none). */
static int expire(worker *w)
{
    rl_ns now = rld_mono_ns(), next = INT64_MAX;
    close_idle(w, now);
    if (w->g->cfg.idle_timeout_ms && w->nconns)
        next = w->idle_check;
    for (stream *st = w->waiting, *nx; st; st = nx) {
        nx = st->wnext;
        if (st->deadline <= now) {
            conn *c = st->c;
            st->early = 1;
            answer_status(st, RLD_GRPC_DEADLINE_EXCEEDED,
                          "deadline passed before the call "
                          "was complete");
            conn_flush(c);
        } else if (st->deadline < next) {
            next = st->deadline;
        }
    }
    if (next == INT64_MAX)
        return -1;
    rl_ns ms = (next - now) / 1000000 + 1;
    return ms > 1000 ? 1000 : (int)ms;
}

static void begin_stop(worker *w)
{
    epoll_ctl(w->ep, EPOLL_CTL_DEL, w->g->lfd, NULL);
    w->goaway_sent = 1;
    for (conn *c = w->conns, *nx; c; c = nx) {
        nx = c->next;
        conn_goaway(c);
        conn_settle(c);
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    rld_grpc *g = w->g;
    struct epoll_event evs[64];
    rld_arena_init(&w->arena, ARENA_LIMIT);
    for (;;) {
        int stopping = __atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE);
        if (stopping && !w->goaway_sent)
            begin_stop(w);
        if (stopping &&
            (w->nconns == 0 || rld_mono_ns() >= __atomic_load_n(&g->drain_until, __ATOMIC_ACQUIRE)))
            break;
        int timeout = expire(w);
        if (stopping && (timeout < 0 || timeout > 50))
            timeout = 50;
        int n = epoll_wait(w->ep, evs, 64, timeout);
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &g->lfd) {
                accept_all(w);
            } else if (p == w) {
                uint64_t v;
                if (read(w->ev, &v, sizeof v) < 0)
                    continue;
            } else {
                conn *c = p;
                if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    conn_read(c); /* may close c */
                else if (evs[i].events & EPOLLOUT)
                    conn_settle(c);
            }
        }
    }
    unsigned open = 0;
    while (w->conns) {
        open += w->conns->nstreams;
        conn_close(w->conns);
    }
    if (open)
        __atomic_add_fetch(&g->left, open, __ATOMIC_RELAXED);
    rld_arena_reset(&w->arena);
    return NULL;
}

/* ---- the server ------------------------------------------------------------------------- */

static int listen_on(const char *address, int port, int *bound, rl_err *err)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, address, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        sl = sizeof *a4;
    } else if (inet_pton(AF_INET6, address, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        sl = sizeof *a6;
    } else {
        return rl_errf(err, RL_EINVAL, "grpc.listen: %s is not an IP address", address);
    }
    int one = 1, fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return rl_errf(err, RL_EIO, "grpc: socket: %s", strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0) {
        int e = errno;
        close(fd);
        return rl_errf(err, RL_EIO, "grpc.listen: cannot listen on %s port %d: %s", address, port,
                       strerror(e));
    }
    sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound = ntohs(ss.ss_family == AF_INET ? a4->sin_port : a6->sin6_port);
    return fd;
}

rld_grpc *rld_grpc_start(const rld_grpc_config *cfg, rl_err *err)
{
    pthread_once(&callbacks_once, callbacks_init);
    if (!callbacks || !options) {
        rl_errf(err, RL_ENOMEM, "out of memory");
        return NULL;
    }
    rld_grpc *g = calloc(1, sizeof *g);
    if (!g) {
        rl_errf(err, RL_ENOMEM, "out of memory");
        return NULL;
    }
    g->cfg = *cfg;
    if (!g->cfg.max_message)
        g->cfg.max_message = RLD_GRPC_MAX_MESSAGE;
    g->nworkers = cfg->threads < 1 ? 1 : cfg->threads > MAX_WORKERS ? MAX_WORKERS : cfg->threads;
    if ((g->lfd = listen_on(cfg->address, cfg->port, &g->port, err)) < 0) {
        free(g);
        return NULL;
    }
    int started = 0;
    for (; started < g->nworkers; started++) {
        worker *w = &g->w[started];
        w->g = g;
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        w->ev = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        struct epoll_event le = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &g->lfd};
        struct epoll_event ee = {.events = EPOLLIN, .data.ptr = w};
        if (w->ep < 0 || w->ev < 0 || epoll_ctl(w->ep, EPOLL_CTL_ADD, g->lfd, &le) != 0 ||
            epoll_ctl(w->ep, EPOLL_CTL_ADD, w->ev, &ee) != 0 ||
            pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            if (w->ep >= 0)
                close(w->ep);
            if (w->ev >= 0)
                close(w->ev);
            break;
        }
    }
    if (started < g->nworkers) {
        g->nworkers = started;
        rld_grpc_stop(g, 0);
        rl_errf(err, RL_EIO, "grpc: cannot start the worker threads");
        return NULL;
    }
    return g;
}

int rld_grpc_port(const rld_grpc *g)
{
    return g->port;
}

unsigned rld_grpc_stop(rld_grpc *g, unsigned drain_ms)
{
    __atomic_store_n(&g->drain_until, rld_mono_ns() + (rl_ns)drain_ms * 1000000, __ATOMIC_RELEASE);
    __atomic_store_n(&g->stopping, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < g->nworkers; i++) {
        uint64_t one = 1;
        if (write(g->w[i].ev, &one, sizeof one) < 0)
            rld_log("error: grpc: cannot wake a worker: %s", strerror(errno));
    }
    for (int i = 0; i < g->nworkers; i++) {
        pthread_join(g->w[i].thread, NULL);
        close(g->w[i].ep);
        close(g->w[i].ev);
    }
    close(g->lfd);
    unsigned left = __atomic_load_n(&g->left, __ATOMIC_RELAXED);
    free(g);
    return left;
}
