/*
 * test_grpc.c - the gRPC server's edge cases, driven frame by frame with nghttp2's client API
 * against the real daemon: trailers of a good call, deadlines (passed on arrival, and passing
 * while the body is awaited), compressed messages, a body past the message limit while it is
 * still arriving, a wrong content type, 100 streams at once on one connection, and SIGTERM
 * with streams in flight (GOAWAY, the open streams finish, the daemon exits 0); Health over
 * the Redis store, NOT_SERVING while Redis is down only when a level fails closed.
 *
 * user: 3 per 60 s (fixed windows from 0); burst: 60 per hour. The time is 10 s (manual
 * clock, the ratelimitd-now metadata).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "redis_server.h"
#include "srvutil.h"

static const char config[] =
    "{\"listen\": {\"address\": \"127.0.0.1\", \"port\": 0}, \"domain\": \"edge\","
    " \"grpc\": {\"max_message\": 1024},"
    " \"levels\": ["
    "  {\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\", \"name\": \"per-user\","
    "   \"limit\": 3, \"window\": 60}]},"
    "  {\"name\": \"burst\", \"rules\": [{\"type\": \"fixed_window\", \"name\": \"burst\","
    "   \"limit\": 60, \"window\": 3600}]}]}";

#define RLS_PATH "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define MAX_CALLS 128

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse resp_t;

/* What came back on one stream. */
typedef struct call {
    int32_t id;
    char status[8];      /* :status */
    char grpc_status[8]; /* from the trailers (or the trailers-only HEADERS) */
    char grpc_message[256];
    char accept_encoding[64];
    unsigned char data[4096];
    size_t len;
    int closed;
    /* the body to send */
    const uint8_t *body;
    size_t body_len, body_off;
    int hold; /* 1: the body is not sent until released */
} call;

typedef struct client {
    int fd;
    nghttp2_session *s;
    call calls[MAX_CALLS];
    int ncalls;
    int goaway;
    int32_t goaway_last;
    uint32_t goaway_code;
    char goaway_data[128];
    int ping_acked;
    int eof;
} client;

static call *call_of(client *c, int32_t id)
{
    for (int i = 0; i < c->ncalls; i++)
        if (c->calls[i].id == id)
            return &c->calls[i];
    return NULL;
}

static void copy_value(char *dst, size_t cap, const uint8_t *v, size_t vlen)
{
    size_t n = vlen < cap - 1 ? vlen : cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *v, size_t vlen, uint8_t flags, void *ud)
{
    call *k = call_of(ud, f->hd.stream_id);
    (void)s;
    (void)flags;
    if (!k)
        return 0;
    if (nlen == 7 && memcmp(name, ":status", 7) == 0)
        copy_value(k->status, sizeof k->status, v, vlen);
    else if (nlen == 11 && memcmp(name, "grpc-status", 11) == 0)
        copy_value(k->grpc_status, sizeof k->grpc_status, v, vlen);
    else if (nlen == 12 && memcmp(name, "grpc-message", 12) == 0)
        copy_value(k->grpc_message, sizeof k->grpc_message, v, vlen);
    else if (nlen == 20 && memcmp(name, "grpc-accept-encoding", 20) == 0)
        copy_value(k->accept_encoding, sizeof k->accept_encoding, v, vlen);
    return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *d, size_t len,
                   void *ud)
{
    call *k = call_of(ud, id);
    (void)s;
    (void)flags;
    if (k && k->len + len <= sizeof k->data) {
        memcpy(k->data + k->len, d, len);
        k->len += len;
    }
    return 0;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
    call *k = call_of(ud, id);
    (void)s;
    (void)code;
    if (k)
        k->closed = 1;
    return 0;
}

static int on_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    client *c = ud;
    (void)s;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        c->goaway = 1;
        c->goaway_last = f->goaway.last_stream_id;
        c->goaway_code = f->goaway.error_code;
        size_t n = f->goaway.opaque_data_len < sizeof c->goaway_data - 1
                       ? f->goaway.opaque_data_len
                       : sizeof c->goaway_data - 1;
        if (n > 0) /* a GOAWAY without opaque data has NULL there */
            memcpy(c->goaway_data, f->goaway.opaque_data, n);
        c->goaway_data[n] = '\0';
    } else if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK)) {
        c->ping_acked = 1;
    }
    return 0;
}

static ssize_t body_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    call *k = src->ptr;
    (void)s;
    (void)id;
    (void)ud;
    if (k->hold)
        return NGHTTP2_ERR_DEFERRED;
    size_t n = k->body_len - k->body_off;
    if (n > len)
        n = len;
    memcpy(buf, k->body + k->body_off, n);
    k->body_off += n;
    if (k->body_off == k->body_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static void connect_to(client *c, int port)
{
    nghttp2_session_callbacks *cb;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int one = 1;
    memset(c, 0, sizeof *c);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(c->fd, 0);
    ck_assert_int_eq(connect(c->fd, (struct sockaddr *)&a, sizeof a), 0);
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame);
    ck_assert_int_eq(nghttp2_session_client_new(&c->s, cb, c), 0);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, NULL, 0);
}

static void disconnect(client *c)
{
    nghttp2_session_del(c->s);
    close(c->fd);
}

/* Sends what the session has, reads for up to ms milliseconds or until done(c) holds. */
static void pump(client *c, int ms, int (*done)(client *))
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        const uint8_t *out;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(c->s, &out)) > 0)
            for (ssize_t off = 0; off < n;) {
                ssize_t w = send(c->fd, out + off, (size_t)(n - off), MSG_NOSIGNAL);
                if (w <= 0)
                    return;
                off += w;
            }
        if (done && done(c))
            return;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long left = ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0 || c->eof)
            return;
        struct pollfd p = {c->fd, POLLIN, 0};
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        uint8_t buf[16384];
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);
        if (r <= 0) {
            c->eof = 1;
            return;
        }
        ck_assert_int_ge(nghttp2_session_mem_recv(c->s, buf, (size_t)r), 0);
    }
}

static int all_closed(client *c)
{
    for (int i = 0; i < c->ncalls; i++)
        if (!c->calls[i].closed)
            return 0;
    return 1;
}

static int ping_acked(client *c)
{
    return c->ping_acked;
}

static int got_goaway(client *c)
{
    return c->goaway;
}

/* Opens a stream: POST path with content-type ctype, extra headers (name, value pairs,
 * NULL-terminated) and body (length-prefixed by the caller), sent unless hold. */
static call *open_call(client *c, const char *path, const char *ctype, const char *const *extra,
                       const uint8_t *body, size_t len, int hold)
{
    nghttp2_nv nv[16];
    size_t n = 0;
#define H(k, v)                                                                                    \
    nv[n++] =                                                                                      \
        (nghttp2_nv){(uint8_t *)(k), (uint8_t *)(v), strlen(k), strlen(v), NGHTTP2_NV_FLAG_NONE}
    H(":method", "POST");
    H(":scheme", "http");
    H(":authority", "127.0.0.1");
    H(":path", path);
    H("content-type", ctype);
    H("te", "trailers");
    for (int i = 0; extra && extra[i]; i += 2)
        H(extra[i], extra[i + 1]);
#undef H
    ck_assert_int_lt(c->ncalls, MAX_CALLS);
    call *k = &c->calls[c->ncalls++];
    memset(k, 0, sizeof *k);
    k->body = body;
    k->body_len = len;
    k->hold = hold;
    nghttp2_data_provider dp = {.source.ptr = k, .read_callback = body_read};
    k->id = nghttp2_submit_request(c->s, NULL, nv, n, &dp, NULL);
    ck_assert_int_gt(k->id, 0);
    return k;
}

static void release(client *c, call *k)
{
    k->hold = 0;
    nghttp2_session_resume_data(c->s, k->id);
}

/* A length-prefixed RateLimitRequest for domain "edge" and one descriptor {key: value}. */
static size_t rls_body(uint8_t *out, const char *key, const char *value, uint8_t flag)
{
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry e =
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor d =
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry *ep = &e;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *dp = &d;
    Envoy__Service__Ratelimit__V3__RateLimitRequest r =
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    e.key = (char *)key;
    e.value = (char *)value;
    d.n_entries = 1;
    d.entries = &ep;
    r.domain = "edge";
    r.n_descriptors = 1;
    r.descriptors = &dp;
    size_t n = envoy__service__ratelimit__v3__rate_limit_request__pack(&r, out + 5);
    out[0] = flag;
    out[1] = (uint8_t)(n >> 24);
    out[2] = (uint8_t)(n >> 16);
    out[3] = (uint8_t)(n >> 8);
    out[4] = (uint8_t)n;
    return n + 5;
}

/* The response of a good call, unpacked (free with its free_unpacked). */
static resp_t *response_of(const call *k)
{
    ck_assert_str_eq(k->status, "200");
    ck_assert_msg(strcmp(k->grpc_status, "0") == 0, "grpc-status %s: %s", k->grpc_status,
                  k->grpc_message);
    ck_assert_uint_ge(k->len, 5);
    size_t n =
        (size_t)k->data[1] << 24 | (size_t)k->data[2] << 16 | (size_t)k->data[3] << 8 | k->data[4];
    ck_assert_int_eq(k->data[0], 0);
    ck_assert_uint_eq(k->len, n + 5);
    resp_t *r = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, n, k->data + 5);
    ck_assert_ptr_nonnull(r);
    return r;
}

static const char *const at10[] = {"ratelimitd-now", "10", NULL};

static su_server srv;
static client cl;

static void start(void)
{
    static const char *const flags[] = {"--grpc-port", "0", "--manual-clock", NULL};
    su_tmpdir(&srv);
    su_start(&srv, config, flags);
    ck_assert_int_gt(srv.grpc_port, 0);
    connect_to(&cl, srv.grpc_port);
}

static void stop(void)
{
    disconnect(&cl);
    if (srv.pid > 0)
        ck_assert_int_eq(su_stop(&srv), 0);
}

/* Remaining of per-user for key after one more counted request at t=10. */
static uint32_t remaining_after_one(const char *key)
{
    uint8_t body[256];
    size_t n = rls_body(body, "user", key, 0);
    call *k = open_call(&cl, RLS_PATH, "application/grpc", at10, body, n, 0);
    pump(&cl, 5000, all_closed);
    resp_t *r = response_of(k);
    ck_assert_uint_eq(r->n_statuses, 1);
    uint32_t rem = r->statuses[0]->limit_remaining;
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    return rem;
}

START_TEST(good_call_has_trailers)
{
    uint8_t body[256];
    size_t n = rls_body(body, "user", "alice", 0);
    call *k = open_call(&cl, RLS_PATH, "application/grpc", at10, body, n, 0);
    pump(&cl, 5000, all_closed);
    resp_t *r = response_of(k);
    ck_assert_int_eq(r->overall_code, ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK);
    ck_assert_uint_eq(r->statuses[0]->limit_remaining, 2);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    ck_assert_str_eq(k->accept_encoding, "identity");
}
END_TEST

START_TEST(deadline_passed_on_arrival_takes_nothing)
{
    static const char *const h[] = {"ratelimitd-now", "10", "grpc-timeout", "1n", NULL};
    uint8_t body[256];
    size_t n = rls_body(body, "user", "bob", 0);
    call *k = open_call(&cl, RLS_PATH, "application/grpc", h, body, n, 0);
    pump(&cl, 5000, all_closed);
    ck_assert_str_eq(k->grpc_status, "4"); /* DEADLINE_EXCEEDED */
    ck_assert_uint_eq(k->len, 0);
    /* bob's first counted request leaves 2 of 3: the expired one took nothing */
    ck_assert_uint_eq(remaining_after_one("bob"), 2);
}
END_TEST

START_TEST(deadline_passes_while_the_body_is_awaited)
{
    static const char *const h[] = {"ratelimitd-now", "10", "grpc-timeout", "200m", NULL};
    uint8_t body[256];
    struct timespec t0, t1;
    size_t n = rls_body(body, "user", "carol", 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    call *k = open_call(&cl, RLS_PATH, "application/grpc", h, body, n, 1);
    pump(&cl, 5000, all_closed);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    ck_assert_int_eq(k->closed, 1);
    ck_assert_str_eq(k->grpc_status, "4");
    ck_assert_int_ge(ms, 200); /* not before the deadline */
    ck_assert_uint_eq(remaining_after_one("carol"), 2);
}
END_TEST

START_TEST(compressed_messages_refused)
{
    static const char *const gzip[] = {"ratelimitd-now", "10", "grpc-encoding", "gzip", NULL};
    uint8_t b1[256], b2[256];
    size_t n1 = rls_body(b1, "user", "dave", 1), n2 = rls_body(b2, "user", "dave", 1);
    call *none = open_call(&cl, RLS_PATH, "application/grpc", at10, b1, n1, 0);
    call *gz = open_call(&cl, RLS_PATH, "application/grpc", gzip, b2, n2, 0);
    pump(&cl, 5000, all_closed);
    ck_assert_str_eq(none->grpc_status, "13"); /* INTERNAL: flag set, no grpc-encoding */
    ck_assert_str_eq(gz->grpc_status, "12");   /* UNIMPLEMENTED: an encoding we lack */
    ck_assert_str_eq(gz->accept_encoding, "identity");
    ck_assert_uint_eq(remaining_after_one("dave"), 2);
}
END_TEST

START_TEST(oversized_body_refused_while_it_arrives)
{
    /* 200 KB against a limit of 1 KiB: refused early, over nghttp2's flow control */
    static uint8_t big[200000];
    memset(big, 'x', sizeof big);
    big[0] = 0;
    big[1] = 0;
    big[2] = 0x03;
    big[3] = 0x0d;
    big[4] = 0x3b; /* 199995 */
    call *k = open_call(&cl, RLS_PATH, "application/grpc", at10, big, sizeof big, 0);
    pump(&cl, 10000, all_closed);
    ck_assert_str_eq(k->grpc_status, "8"); /* RESOURCE_EXHAUSTED */
    /* the connection still serves */
    ck_assert_uint_eq(remaining_after_one("erin"), 2);
}
END_TEST

START_TEST(not_grpc_and_unknown_method)
{
    uint8_t body[256];
    size_t n = rls_body(body, "user", "fred", 0);
    call *json = open_call(&cl, RLS_PATH, "application/json", at10, body, n, 0);
    call *other = open_call(&cl, "/envoy.service.ratelimit.v3.RateLimitService/Nope",
                            "application/grpc", at10, body, n, 0);
    pump(&cl, 5000, all_closed);
    ck_assert_str_eq(json->status, "415");
    ck_assert_str_eq(other->grpc_status, "12");
    ck_assert_str_eq(other->grpc_message, "unknown method");
    ck_assert_uint_eq(remaining_after_one("fred"), 2);
}
END_TEST

START_TEST(hundred_streams_on_one_connection)
{
    static uint8_t bodies[100][64];
    int ok = 0, over = 0;
    for (int i = 0; i < 100; i++) {
        size_t n = rls_body(bodies[i], "burst", "b1", 0);
        open_call(&cl, RLS_PATH, "application/grpc", at10, bodies[i], n, 0);
    }
    pump(&cl, 10000, all_closed);
    for (int i = 0; i < 100; i++) {
        resp_t *r = response_of(&cl.calls[i]);
        if (r->overall_code == ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK)
            ok++;
        else if (r->overall_code ==
                 ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT)
            over++;
        envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    }
    ck_assert_int_eq(ok, 60);
    ck_assert_int_eq(over, 40);
}
END_TEST

START_TEST(sigterm_finishes_streams_in_flight)
{
    static uint8_t bodies[10][64];
    call *k[10];
    for (int i = 0; i < 10; i++) {
        size_t n = rls_body(bodies[i], "user", i < 5 ? "gina" : "hank", 0);
        k[i] = open_call(&cl, RLS_PATH, "application/grpc", at10, bodies[i], n, 1);
    }
    /* the HEADERS written first (nghttp2 sends a PING queued beside them ahead of them); the
     * PING is answered after the HEADERS before it were read: the streams are open */
    pump(&cl, 200, NULL);
    nghttp2_submit_ping(cl.s, NGHTTP2_FLAG_NONE, NULL);
    pump(&cl, 5000, ping_acked);
    ck_assert(cl.ping_acked);
    kill(srv.pid, SIGTERM);
    pump(&cl, 5000, got_goaway);
    ck_assert(cl.goaway);
    ck_assert_int_ge(cl.goaway_last, k[9]->id);
    for (int i = 0; i < 10; i++)
        release(&cl, k[i]);
    pump(&cl, 10000, all_closed);
    for (int i = 0; i < 10; i++) {
        resp_t *r = response_of(k[i]);
        /* each user: 3 fit, 2 do not */
        int want = i % 5 < 3 ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
                             : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
        ck_assert_int_eq(r->overall_code, want);
        envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    }
    /* then the server closes the connection and exits 0 */
    pump(&cl, 10000, NULL);
    ck_assert(cl.eof);
    int st = 0;
    ck_assert_int_eq(waitpid(srv.pid, &st, 0), srv.pid);
    srv.pid = 0;
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
END_TEST

/* Health/Check's status on a fresh connection: 1 SERVING, 2 NOT_SERVING. */
static int health_status(int port)
{
    static const uint8_t empty[5] = {0, 0, 0, 0, 0}; /* an empty HealthCheckRequest */
    client h;
    connect_to(&h, port);
    call *k = open_call(&h, "/grpc.health.v1.Health/Check", "application/grpc", NULL, empty, 5, 0);
    pump(&h, 5000, all_closed);
    ck_assert_str_eq(k->grpc_status, "0");
    /* HealthCheckResponse: field 1 (varint) = status, or nothing for UNKNOWN */
    int st = k->len == 7 && k->data[5] == 0x08 ? k->data[6] : 0;
    disconnect(&h);
    return st;
}

/* Polls Health until it answers want (up to 10 s); returns the last answer. */
static int health_becomes(int port, int want)
{
    int st = 0;
    for (int i = 0; i < 100 && (st = health_status(port)) != want; i++)
        usleep(100000);
    return st;
}

static void health_with_redis(const char *mode, int want_down)
{
    static const char *const flags[] = {"--grpc-port", "0", NULL};
    char cfg[1024];
    rt_redis r;
    su_server s;
    rt_redis_start(&r);
    snprintf(cfg, sizeof cfg,
             "{\"store\": {\"type\": \"redis\", \"url\": \"%s\", \"timeout_ms\": 200},"
             " \"levels\": [{\"name\": \"user\", \"on_store_error\": \"%s\", \"rules\":"
             " [{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": 1}]}]}",
             r.url, mode);
    su_tmpdir(&s);
    su_start(&s, cfg, flags);
    ck_assert_int_eq(health_becomes(s.grpc_port, 1), 1);
    rt_redis_kill(&r);
    ck_assert_int_eq(health_becomes(s.grpc_port, want_down), want_down);
    if (want_down == 1) { /* still SERVING a second later */
        usleep(1000000);
        ck_assert_int_eq(health_status(s.grpc_port), 1);
    }
    ck_assert_int_eq(su_stop(&s), 0);
    rt_redis_stop(&r);
}

START_TEST(health_not_serving_while_redis_is_down_and_a_level_fails_closed)
{
    health_with_redis("closed", 2);
}
END_TEST

START_TEST(health_serving_while_redis_is_down_and_levels_fail_open)
{
    health_with_redis("open", 1);
}
END_TEST

START_TEST(calls_counted_by_method_and_code)
{
    uint8_t body[256], bad[] = {0, 0, 0, 0, 2, 0xff, 0xff}; /* a message that does not parse */
    size_t n = rls_body(body, "user", "gina", 0);
    open_call(&cl, RLS_PATH, "application/grpc", at10, body, n, 0);
    open_call(&cl, RLS_PATH, "application/grpc", at10, body, n, 0);
    open_call(&cl, RLS_PATH, "application/grpc", at10, bad, sizeof bad, 0);
    open_call(&cl, "/envoy.service.ratelimit.v3.RateLimitService/Nope", "application/grpc",
              at10, body, n, 0);
    pump(&cl, 5000, all_closed);
    ck_assert(all_closed(&cl));
    su_resp r = su_req(&srv, "GET", "/metrics", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    static const char *const want[] = {
        "\n# TYPE ratelimit_grpc_requests_total counter\n",
        "\nratelimit_grpc_requests_total{service=\"envoy.service.ratelimit.v3.RateLimitService\","
        "method=\"ShouldRateLimit\",code=\"OK\"} 2\n",
        "\nratelimit_grpc_requests_total{service=\"envoy.service.ratelimit.v3.RateLimitService\","
        "method=\"ShouldRateLimit\",code=\"INVALID_ARGUMENT\"} 1\n",
        "\nratelimit_grpc_requests_total{service=\"other\",method=\"other\","
        "code=\"UNIMPLEMENTED\"} 1\n",
        "\n# TYPE ratelimit_grpc_request_duration_seconds histogram\n",
        "\nratelimit_grpc_request_duration_seconds_count{service=\"envoy.service.ratelimit.v3."
        "RateLimitService\",method=\"ShouldRateLimit\"} 3\n",
        "\nratelimit_grpc_request_duration_seconds_bucket{service=\"grpc.health.v1.Health\","
        "method=\"Check\",le=\"+Inf\"} 0\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(r.body, want[i]), "missing %s", want[i]);
    /* and the scrape is valid exposition for Prometheus's own checker */
    char path[300], cmd[400];
    snprintf(path, sizeof path, "%s/grpc.prom", srv.dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(r.body, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "promtool check metrics < '%s' > /dev/null 2>&1", path);
    ck_assert_int_eq(system(cmd), 0);
    su_resp_free(&r);
}
END_TEST

/* ---- connection limits --------------------------------------------------------------------- */

static int is_eof(client *c)
{
    return c->eof;
}

/* Reads what the server sends until it closes (up to ms), sending nothing. */
static void read_to_eof(client *c, int ms)
{
    struct pollfd p = {c->fd, POLLIN, 0};
    uint8_t buf[4096];
    while (!c->eof && poll(&p, 1, ms) > 0) {
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);
        if (r <= 0)
            c->eof = 1;
        else
            ck_assert_int_ge(nghttp2_session_mem_recv(c->s, buf, (size_t)r), 0);
    }
}

/* One good call on c; 1 when it was answered. */
static int one_call(client *c, const char *key)
{
    uint8_t body[256];
    size_t n = rls_body(body, "user", key, 0);
    call *k = open_call(c, RLS_PATH, "application/grpc", at10, body, n, 0);
    pump(c, 5000, all_closed);
    return k->closed && strcmp(k->grpc_status, "0") == 0;
}

START_TEST(connections_past_max_connections_refused_at_once)
{
    static const char *const flags[] = {"--grpc-port", "0", "--manual-clock", NULL};
    su_server s;
    client a, b, c;
    su_tmpdir(&s);
    su_start(&s,
             "{\"listen\": {\"address\": \"127.0.0.1\", \"port\": 0}, \"max_connections\": 2, "
             "\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\", "
             "\"limit\": 100, \"window\": 60}]}]}",
             flags);
    connect_to(&a, s.grpc_port);
    connect_to(&b, s.grpc_port);
    ck_assert(one_call(&a, "a"));
    ck_assert(one_call(&b, "b"));
    /* the third: a GOAWAY that says why, and the connection closed, with no call served */
    connect_to(&c, s.grpc_port);
    read_to_eof(&c, 10000);
    ck_assert(c.eof);
    ck_assert(c.goaway);
    ck_assert_uint_eq(c.goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
    ck_assert_str_eq(c.goaway_data, "connections: 2 open, the most max_connections allows");
    disconnect(&c);
    /* a closes: room for one again (the server sees the close at once; a few tries) */
    disconnect(&a);
    int served = 0;
    for (int i = 0; i < 50 && !served; i++) {
        connect_to(&c, s.grpc_port);
        served = one_call(&c, "c");
        if (!served) {
            disconnect(&c);
            usleep(20000);
        }
    }
    ck_assert_msg(served, "no room after a connection closed");
    ck_assert(one_call(&b, "b")); /* b was never disturbed */
    disconnect(&b);
    disconnect(&c);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

static long mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* connection_timeout 2 s. An idle connection and one whose call stalls (its body never comes)
 * are closed after a GOAWAY, while a busy one, with a call every 100 ms (1.9 s short of the
 * timeout: room for a loaded machine), stays open for twice the timeout, through the other
 * two's closing. */
START_TEST(idle_and_stalled_connections_closed)
{
    static const char *const flags[] = {"--grpc-port", "0", "--manual-clock", NULL};
    su_server s;
    client idle, stalled, busy;
    uint8_t body[256];
    su_tmpdir(&s);
    su_start(&s,
             "{\"listen\": {\"address\": \"127.0.0.1\", \"port\": 0}, \"connection_timeout\": 2, "
             "\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\", "
             "\"limit\": 100000, \"window\": 60}]}]}",
             flags);
    connect_to(&idle, s.grpc_port);
    ck_assert(one_call(&idle, "a"));
    connect_to(&stalled, s.grpc_port);
    size_t n = rls_body(body, "user", "b", 0);
    call *k = open_call(&stalled, RLS_PATH, "application/grpc", at10, body, n, 1);
    pump(&stalled, 200, NULL);
    ck_assert(!stalled.eof);
    connect_to(&busy, s.grpc_port);
    long start = mono_ms();
    for (int i = 0; !(idle.eof && stalled.eof) || mono_ms() - start < 4000; i++) {
        ck_assert_msg(mono_ms() - start < 30000, "30 s on: idle %s, stalled %s",
                      idle.eof ? "closed" : "open", stalled.eof ? "closed" : "open");
        ck_assert_msg(one_call(&busy, "c"), "busy call %d not answered", i);
        pump(&busy, 100, is_eof);
        ck_assert_msg(!busy.eof, "busy connection closed after %ld ms", mono_ms() - start);
        pump(&idle, 1, is_eof);
        pump(&stalled, 1, is_eof);
    }
    ck_assert(idle.goaway);
    ck_assert_uint_eq(idle.goaway_code, NGHTTP2_NO_ERROR);
    ck_assert(stalled.goaway);
    ck_assert(!k->closed || strcmp(k->grpc_status, "0") != 0); /* never answered OK */
    disconnect(&idle);
    disconnect(&stalled);
    disconnect(&busy);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

static Suite *grpc_suite(void)
{
    Suite *s = suite_create("grpc");
    TCase *tc = tcase_create("edges");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, start, stop);
    tcase_add_test(tc, good_call_has_trailers);
    tcase_add_test(tc, deadline_passed_on_arrival_takes_nothing);
    tcase_add_test(tc, deadline_passes_while_the_body_is_awaited);
    tcase_add_test(tc, compressed_messages_refused);
    tcase_add_test(tc, oversized_body_refused_while_it_arrives);
    tcase_add_test(tc, not_grpc_and_unknown_method);
    tcase_add_test(tc, calls_counted_by_method_and_code);
    tcase_add_test(tc, hundred_streams_on_one_connection);
    tcase_add_test(tc, sigterm_finishes_streams_in_flight);
    suite_add_tcase(s, tc);
    TCase *th = tcase_create("health");
    tcase_set_timeout(th, 120);
    tcase_add_test(th, health_not_serving_while_redis_is_down_and_a_level_fails_closed);
    tcase_add_test(th, health_serving_while_redis_is_down_and_levels_fail_open);
    suite_add_tcase(s, th);
    TCase *tl = tcase_create("limits");
    tcase_set_timeout(tl, 60);
    tcase_add_test(tl, connections_past_max_connections_refused_at_once);
    tcase_add_test(tl, idle_and_stalled_connections_closed);
    suite_add_tcase(s, tl);
    return s;
}

int main(void)
{
    return su_main(grpc_suite());
}
