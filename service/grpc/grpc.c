/*
 * grpc.c - see grpc.h.
 *
 * HTTP/2 on net.h: net accepts, hands each connection to a worker in turn and runs the
 * worker's loop, the cap, the idle timeout and the drain; each worker holds the nghttp2
 * sessions of its connections. A call is answered on the worker that read it, as soon as its
 * last frame arrives, inside nghttp2's frame callback.
 */
#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "app/clock.h"
#include "grpc.h"
#include "net/net.h"

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
    rld_net_conn base; /* first: net.h's part; its last is when bytes were last read */
    worker *w;
    nghttp2_session *s;
    unsigned nstreams; /* open */
    stream *streams;   /* the open ones: nghttp2_session_del frees its own without on_close */
    size_t outlen, outoff;
    const uint8_t *pend; /* the rest of nghttp2's last chunk that did not fit in out */
    size_t pend_len;
    uint8_t out[OUT_BUF];
};

/* gRPC's part of a net worker. */
struct worker {
    rld_net_worker *nw;
    rld_grpc *g;
    stream *waiting; /* streams with a deadline not answered yet */
    rld_arena arena;
};

struct rld_grpc {
    rld_grpc_config cfg;
    rld_net *net;
    int giving_up;  /* the drain is over: connections closed now count their streams */
    unsigned left;  /* atomic: streams open when the drain gave up */
    worker w[RLD_NET_MAX_WORKERS];
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

/* Writes what nghttp2 has to send, gathering frames into one buffer; what the socket does not
 * take waits for its next event. -1 when the connection is broken. */
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
            return 0;
        ssize_t w = rld_net_write(&c->base, c->out + c->outoff, c->outlen - c->outoff);
        if (w < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        c->outoff += (size_t)w;
        if (c->outoff == c->outlen)
            c->outoff = c->outlen = 0;
    }
}

static void conn_close(conn *c)
{
    rld_net_close(&c->base); /* grpc_on_close frees c */
}

static void grpc_on_close(rld_net_conn *nc)
{
    conn *c = (conn *)nc;
    rld_grpc *g = c->w->g;
    if (c->nstreams && __atomic_load_n(&g->giving_up, __ATOMIC_ACQUIRE))
        __atomic_add_fetch(&g->left, c->nstreams, __ATOMIC_RELAXED);
    while (c->streams) /* a stalled call, say: the session frees its side only */
        stream_free(c, c->streams);
    nghttp2_session_del(c->s);
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

/* Reads what there is (up to a short read; to the end once the peer hung up, so that its
 * close is seen), then writes the answers. */
static void grpc_on_event(rld_net_conn *nc, unsigned events)
{
    conn *c = (conn *)nc;
    uint8_t buf[16384];
    int hup = (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
    while (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        ssize_t n = rld_net_read(&c->base, buf, sizeof buf);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0 || nghttp2_session_mem_recv(c->s, buf, (size_t)n) < 0) {
            conn_close(c);
            return;
        }
        c->base.last = c->w->nw->now;
        if ((size_t)n < sizeof buf && !hup)
            break;
    }
    conn_settle(c); /* may close c */
}

/* On the accepting thread: the session, with the server's SETTINGS queued (sent on the
 * connection's first event). */
static rld_net_conn *grpc_open(rld_net_worker *nw, int fd, const struct sockaddr *sa,
                               socklen_t sl)
{
    conn *c = calloc(1, sizeof *c);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS}};
    (void)fd, (void)sa, (void)sl;
    if (!c || nghttp2_session_server_new2(&c->s, callbacks, c, options) != 0) {
        free(c);
        return NULL;
    }
    c->w = nw->proto;
    nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, 1);
    return &c->base;
}

/* A connection past max_connections: the server's preface (an empty SETTINGS) and a GOAWAY
 * with ENHANCE_YOUR_CALM that says why, written at once (net closes it then). */
static void grpc_refuse(void *ctx, int fd)
{
    const rld_grpc *gs = ctx;
    uint8_t f[9 + 9 + 8 + 96] = {0, 0, 0, 0x4}; /* SETTINGS, empty, stream 0 */
    int n = snprintf((char *)f + 26, 96, "connections: %u open, the most max_connections allows",
                     gs->cfg.max_connections);
    size_t len = 8 + (size_t)n;
    uint8_t *g = f + 9;
    g[0] = (uint8_t)(len >> 16), g[1] = (uint8_t)(len >> 8), g[2] = (uint8_t)len;
    g[3] = 0x7; /* GOAWAY, flags 0, stream 0, last stream 0 */
    g[9 + 7] = NGHTTP2_ENHANCE_YOUR_CALM;
    if (send(fd, f, 9 + 9 + len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* the client learns it from the closed connection alone */
    }
}

/* Quiet for idle_timeout_ms (idle, or a call whose body stalls): a GOAWAY before net closes. */
static void grpc_on_idle(rld_net_conn *nc)
{
    conn *c = (conn *)nc;
    conn_goaway(c);
    conn_flush(c);
}

/* The server stops: a GOAWAY; the streams already opened finish, then the session closes. */
static void grpc_on_stop(rld_net_conn *nc)
{
    conn *c = (conn *)nc;
    conn_goaway(c);
    conn_settle(c); /* may close c */
}

/* Answers DEADLINE_EXCEEDED to the calls whose deadline passed; returns the milliseconds until
 * the next deadline (-1: none). */
static int grpc_on_turn(rld_net_worker *nw)
{
    worker *w = nw->proto;
    rl_ns now = nw->now, next = INT64_MAX;
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

static const rld_net_ops grpc_net_ops = {.open = grpc_open,
                                         .on_event = grpc_on_event,
                                         .on_turn = grpc_on_turn,
                                         .on_idle = grpc_on_idle,
                                         .on_stop = grpc_on_stop,
                                         .on_close = grpc_on_close,
                                         .refuse = grpc_refuse};

/* ---- the server ------------------------------------------------------------------------- */

/* Stops the workers and frees g; returns the streams still open then. */
static unsigned grpc_free(rld_grpc *g)
{
    if (g->net) {
        __atomic_store_n(&g->giving_up, 1, __ATOMIC_RELEASE);
        rld_net_free(g->net); /* closes what is left, counting its streams */
    }
    for (unsigned i = 0; i < RLD_NET_MAX_WORKERS; i++)
        rld_arena_reset(&g->w[i].arena);
    unsigned left = __atomic_load_n(&g->left, __ATOMIC_RELAXED);
    free(g);
    return left;
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
    rld_net_config nc = {.address = cfg->address,
                         .port = cfg->port,
                         .workers = cfg->threads < 1 ? 1u : (unsigned)cfg->threads,
                         .max_connections = cfg->max_connections,
                         .idle_ms = cfg->idle_timeout_ms,
                         .drain_connections = 1,
                         .setting = "grpc.listen",
                         .tls = cfg->tls,
                         .ops = &grpc_net_ops,
                         .ctx = g};
    for (unsigned i = 0; i < RLD_NET_MAX_WORKERS; i++)
        rld_arena_init(&g->w[i].arena, ARENA_LIMIT);
    if (!(g->net = rld_net_new(&nc, err))) {
        grpc_free(g);
        return NULL;
    }
    for (unsigned i = 0; i < rld_net_workers(g->net); i++) {
        worker *w = &g->w[i];
        w->nw = rld_net_worker_at(g->net, i);
        w->nw->proto = w;
        w->g = g;
    }
    if (rld_net_run(g->net, err) != 0) {
        grpc_free(g);
        return NULL;
    }
    return g;
}

int rld_grpc_port(const rld_grpc *g)
{
    return rld_net_port(g->net);
}

unsigned rld_grpc_stop(rld_grpc *g, unsigned drain_ms)
{
    rld_net_drain(g->net, drain_ms);
    return grpc_free(g);
}
