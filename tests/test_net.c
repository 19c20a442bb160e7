/*
 * test_net.c - the connection layer (service/net/net.h) under a tiny echo protocol, and the
 * listening socket's options as both servers get them: an IPv6 literal listens IPv6 only, so
 * that the same port stays free for IPv4 (HTTP and gRPC alike, since both listen through net).
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "grpc/grpc.h"
#include "http/http.h"
#include "net/net.h"

/* ---- an echo protocol --------------------------------------------------------------------- */

/* Echoes what it reads; a 'b' makes its worker busy, an 'e' idle again. Says "idle\n" before
 * an idle close, "stop\n" when the server stops, "full\n" past the cap. */
typedef struct echo_conn {
    rld_net_conn base;
    long busy;
} echo_conn;

static rld_net_conn *echo_open(rld_net_worker *w, int fd, const struct sockaddr *sa, socklen_t sl)
{
    (void)w, (void)fd, (void)sa, (void)sl;
    echo_conn *c = calloc(1, sizeof *c);
    return c ? &c->base : NULL;
}

static void say(int fd, const char *s)
{
    if (send(fd, s, strlen(s), MSG_NOSIGNAL) < 0) {
        /* the peer is gone */
    }
}

static void echo_event(rld_net_conn *nc, unsigned events)
{
    echo_conn *c = (echo_conn *)nc;
    char buf[256];
    (void)events;
    for (;;) {
        ssize_t n = recv(nc->fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            rld_net_close(nc);
            return;
        }
        for (ssize_t i = 0; i < n; i++) {
            long d = buf[i] == 'b' ? 1 : buf[i] == 'e' ? -1 : 0;
            c->busy += d;
            rld_net_busy_add(nc->w, d);
        }
        nc->last = nc->w->now;
        if (send(nc->fd, buf, (size_t)n, MSG_NOSIGNAL) < 0) {
            rld_net_close(nc);
            return;
        }
    }
}

static void echo_idle(rld_net_conn *c)
{
    say(c->fd, "idle\n");
}

static void echo_stop(rld_net_conn *c)
{
    say(c->fd, "stop\n");
}

static void echo_close(rld_net_conn *nc)
{
    echo_conn *c = (echo_conn *)nc;
    rld_net_busy_add(nc->w, -c->busy);
    free(c);
}

static void echo_refuse(void *ctx, int fd)
{
    (void)ctx;
    say(fd, "full\n");
}

static const rld_net_ops echo_ops = {.open = echo_open,
                                     .on_event = echo_event,
                                     .on_idle = echo_idle,
                                     .on_stop = echo_stop,
                                     .on_close = echo_close,
                                     .refuse = echo_refuse};

/* ---- a client ----------------------------------------------------------------------------- */

static int dial(int family, int port)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    memset(&ss, 0, sizeof ss);
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sl = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        a->sin6_addr = in6addr_loopback;
        sl = sizeof *a;
    }
    int fd = socket(family, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&ss, sl), 0);
    return fd;
}

/* Reads until EOF, a timeout, or len - 1 bytes; returns what came, NUL-terminated. */
static const char *read_all(int fd, char *buf, size_t len)
{
    size_t got = 0;
    while (got + 1 < len) {
        ssize_t n = recv(fd, buf + got, len - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    return buf;
}

/* Sends s and reads back as many bytes. */
static const char *echo(int fd, const char *s, char *buf, size_t len)
{
    size_t n = strlen(s), got = 0;
    ck_assert_int_eq(send(fd, s, n, MSG_NOSIGNAL), (ssize_t)n);
    while (got < n && got + 1 < len) {
        ssize_t k = recv(fd, buf + got, n - got, 0);
        ck_assert_int_gt(k, 0);
        got += (size_t)k;
    }
    buf[got] = '\0';
    return buf;
}

static long mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- tests -------------------------------------------------------------------------------- */

/* max_connections 2: the third connection reads the refusal and the end; the first two echo.
 * idle 300 ms: a quiet connection hears "idle" and closes, after 300 ms and within 300 + 75
 * (the look every idle / 4) plus slack for a loaded machine. */
START_TEST(cap_refuses_and_idle_closes)
{
    rl_err err = {{0}};
    rld_net_config cfg = {.address = "127.0.0.1",
                          .workers = 2,
                          .max_connections = 2,
                          .idle_ms = 300,
                          .setting = "test",
                          .ops = &echo_ops};
    rld_net *n = rld_net_new(&cfg, &err);
    ck_assert_msg(n != NULL, "%s", err.msg);
    ck_assert_int_eq(rld_net_run(n, &err), 0);
    char buf[64];
    int a = dial(AF_INET, rld_net_port(n)), b = dial(AF_INET, rld_net_port(n));
    ck_assert_str_eq(echo(a, "hello", buf, sizeof buf), "hello");
    ck_assert_str_eq(echo(b, "x", buf, sizeof buf), "x");
    long t0 = mono_ms();
    int c = dial(AF_INET, rld_net_port(n));
    ck_assert_str_eq(read_all(c, buf, sizeof buf), "full\n");
    close(c);
    ck_assert_str_eq(read_all(a, buf, sizeof buf), "idle\n"); /* then EOF */
    long waited = mono_ms() - t0;
    ck_assert_msg(waited >= 250 && waited < 3000, "idle close after %ld ms", waited);
    ck_assert_str_eq(read_all(b, buf, sizeof buf), "idle\n");
    close(a);
    close(b);
    rld_net_drain(n, 0);
    rld_net_free(n);
}
END_TEST

/* A connection with busy work holds the drain for its drain_ms (it hears "stop" at once); the
 * drain returns the work left (1); freeing then closes it. Without busy work the drain returns
 * 0 at once. */
START_TEST(drain_waits_for_busy_work)
{
    rl_err err = {{0}};
    rld_net_config cfg = {.address = "127.0.0.1", .workers = 1, .ops = &echo_ops};
    rld_net *n = rld_net_new(&cfg, &err);
    ck_assert_msg(n != NULL, "%s", err.msg);
    ck_assert_int_eq(rld_net_run(n, &err), 0);
    char buf[64];
    int a = dial(AF_INET, rld_net_port(n)), b = dial(AF_INET, rld_net_port(n));
    ck_assert_str_eq(echo(a, "b", buf, sizeof buf), "b");
    ck_assert_str_eq(echo(b, "q", buf, sizeof buf), "q");
    long t0 = mono_ms();
    ck_assert_int_eq(rld_net_drain(n, 200), 1);
    long waited = mono_ms() - t0;
    ck_assert_msg(waited >= 190 && waited < 3000, "drain took %ld ms", waited);
    ck_assert(rld_net_stopping(n));
    rld_net_free(n);
    ck_assert_str_eq(read_all(a, buf, sizeof buf), "stop\n");
    ck_assert_str_eq(read_all(b, buf, sizeof buf), "stop\n");
    close(a);
    close(b);

    ck_assert_ptr_nonnull(n = rld_net_new(&cfg, &err));
    ck_assert_int_eq(rld_net_run(n, &err), 0);
    a = dial(AF_INET, rld_net_port(n));
    ck_assert_str_eq(echo(a, "be", buf, sizeof buf), "be");
    t0 = mono_ms();
    ck_assert_int_eq(rld_net_drain(n, 5000), 0);
    ck_assert_int_lt(mono_ms() - t0, 1000);
    rld_net_free(n);
    close(a);
}
END_TEST

START_TEST(address_not_an_ip_named_by_its_setting)
{
    rl_err err = {{0}};
    int port = -1;
    ck_assert_int_lt(rld_net_listen("localhost", 0, "grpc.listen", &port, &err), 0);
    ck_assert_str_eq(err.msg, "grpc.listen: \"localhost\" is not an IP address");
    ck_assert_int_eq(port, -1);
}
END_TEST

/* 1 when an IPv4 socket can listen on port beside the IPv6 one: true only when the IPv6
 * socket on "::" is IPv6 only (a dual-stack one holds the IPv4 port too). */
static int ipv4_port_free(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    ck_assert_int_ge(fd, 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0;
    close(fd);
    return ok;
}

static int have_ipv6(void)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* The check of the check: a dual-stack socket on "::" does hold the IPv4 port (when the
 * system's default is dual stack), so ipv4_port_free can tell the two apart. */
static int dual_stack_default(void)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
    socklen_t sl = sizeof a;
    int fd = socket(AF_INET6, SOCK_STREAM, 0), v6only = 1;
    socklen_t ol = sizeof v6only;
    ck_assert_int_ge(fd, 0);
    getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &ol);
    int dual = !v6only && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0 &&
               getsockname(fd, (struct sockaddr *)&a, &sl) == 0 &&
               !ipv4_port_free(ntohs(a.sin6_port));
    close(fd);
    return dual;
}

START_TEST(ipv6_listens_ipv6_only)
{
    if (!have_ipv6())
        return; /* no IPv6 here: nothing to check */
    if (!dual_stack_default())
        fprintf(stderr, "test_net: the system listens IPv6 only by default: a weak check\n");
    rl_err err = {{0}};
    char buf[64];

    int port = 0, fd = rld_net_listen("::", 0, "listen.address", &port, &err);
    ck_assert_msg(fd >= 0, "%s", err.msg);
    ck_assert(ipv4_port_free(port));
    close(fd);

    static const rld_route one[] = {{"/only", "only", "GET", {{NULL, NULL, 0, NULL}}}};
    rld_http_config hc = {.address = "::", .threads = 1, .routes = one, .nroutes = 1};
    rld_http *h = rld_http_start(&hc, &err);
    ck_assert_msg(h != NULL, "%s", err.msg);
    ck_assert(ipv4_port_free(rld_http_port(h)));
    int c = dial(AF_INET6, rld_http_port(h)); /* and it serves IPv6 */
    ck_assert_int_gt(send(c, "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 47, 0), 0);
    read_all(c, buf, sizeof buf);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 404", 12) == 0, "%s", buf);
    close(c);
    rld_http_stop(h, 0);

    rld_grpc_config gc = {.address = "::", .threads = 1};
    rld_grpc *g = rld_grpc_start(&gc, &err);
    ck_assert_msg(g != NULL, "%s", err.msg);
    ck_assert(ipv4_port_free(rld_grpc_port(g)));
    c = dial(AF_INET6, rld_grpc_port(g)); /* the server's preface: a SETTINGS frame */
    ck_assert_int_eq(recv(c, buf, 9, MSG_WAITALL), 9);
    ck_assert_int_eq(buf[3], 0x4);
    close(c);
    rld_grpc_stop(g, 0);
}
END_TEST

static Suite *net_suite(void)
{
    Suite *s = suite_create("net");
    TCase *tc = tcase_create("net");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, cap_refuses_and_idle_closes);
    tcase_add_test(tc, drain_waits_for_busy_work);
    tcase_add_test(tc, address_not_an_ip_named_by_its_setting);
    tcase_add_test(tc, ipv6_listens_ipv6_only);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(net_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
