/*
 * test_http1.c - the plain HTTP server's protocol: the request parser on its own (heads,
 * limits, URL-decoding, chunked bodies), then the real daemon over raw sockets: pipelining,
 * a request one byte at a time, HTTP/1.0, Connection: close, Expect: 100-continue, chunked
 * bodies, HEAD, the 400/414/431/501/505 answers, clients that close early, and a client that
 * does not read its answers. Expected bytes are worked out by hand in the comments.
 */
#define _GNU_SOURCE /* strptime, timegm */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http/http1_parse.h"
#include "srvutil.h"

/* ---- the parser ---------------------------------------------------------------------------- */

START_TEST(head_parsed_in_place)
{
    char buf[] = "POST /quota/b%6Fb?x=1&flag&e=%3D%zz HTTP/1.1\r\nHost: t\r\n"
                 "content-LENGTH:  2 \r\nX-A:\r\n\r\n{}";
    size_t scan = 0, len = strlen(buf);
    /* the head is everything but the 2-byte body */
    size_t end = rld_h1_head_end(buf, len, &scan);
    ck_assert_uint_eq(end, len - 2);
    rld_h1_req q;
    ck_assert_int_eq(rld_h1_parse_head(buf, end, &q), 0);
    ck_assert_str_eq(q.method, "POST");
    ck_assert_str_eq(q.path, "/quota/bob"); /* %6F is 'o' */
    ck_assert_int_eq(q.minor, 1);
    ck_assert_int_eq(q.content_length, 2);
    ck_assert_int_eq(q.keep_alive, 1);
    ck_assert_int_eq(q.chunked, 0);
    ck_assert_uint_eq(q.nargs, 3);
    ck_assert_str_eq(q.args[0].name, "x");
    ck_assert_str_eq(q.args[0].value, "1");
    ck_assert_str_eq(q.args[1].name, "flag");
    ck_assert_str_eq(q.args[1].value, "");
    ck_assert_str_eq(q.args[2].value, "=%zz"); /* %3D is '='; %zz is no escape and stays */
    ck_assert_uint_eq(q.nh, 3);
    ck_assert_str_eq(q.h[1].name, "content-LENGTH"); /* names as sent, values trimmed */
    ck_assert_str_eq(q.h[1].value, "2");
    ck_assert_uint_eq(q.h[2].vl, 0);
}
END_TEST

START_TEST(head_end_found_byte_by_byte)
{
    const char *req = "GET / HTTP/1.0\nA: b\r\n\n";
    size_t scan = 0, n = strlen(req);
    for (size_t i = 1; i < n; i++)
        ck_assert_uint_eq(rld_h1_head_end(req, i, &scan), 0);
    ck_assert_uint_eq(rld_h1_head_end(req, n, &scan), n);
    ck_assert_uint_eq(rld_h1_skip_empty("\r\n\nGET", 6), 3);
}
END_TEST

static const struct {
    const char *head;
    int status;
    const char *error;
} bad_heads[] = {
    {"GET /\r\n\r\n", 400, "request line: expected \"METHOD /path HTTP/1.1\""},
    {"GET  / HTTP/1.1\r\nHost: t\r\n\r\n", 400, "request line: expected \"METHOD /path HTTP/1.1\""},
    {"GET / HTTP/2.0\r\n\r\n", 505, "version: only HTTP/1.0 and HTTP/1.1 are served here"},
    {"GET / HTTP/1.1\r\n\r\n", 400, "Host: an HTTP/1.1 request must have one"},
    {"GET / HTTP/1.1\r\nHost t\r\n\r\n", 400, "headers: expected \"Name: value\""},
    {"GET / HTTP/1.1\r\nHost: t\r\n folded\r\n\r\n", 400, "headers: a field folded over lines"},
    {"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400, "headers: a stray CR or NUL byte"},
    {"GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400, "headers: a value has a control character"},
    {"GET /%00 HTTP/1.1\r\nHost: t\r\n\r\n", 400, "path: %00 is not allowed"},
    {"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1x\r\n\r\n", 400,
     "Content-Length: must be a number of bytes"},
    {"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400,
     "Content-Length: given twice with different values"},
    {"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501,
     "Transfer-Encoding: only chunked is supported"},
    {"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", 400,
     "Content-Length: not allowed with Transfer-Encoding"},
};

START_TEST(bad_heads_are_refused)
{
    char buf[256];
    rld_h1_req q;
    snprintf(buf, sizeof buf, "%s", bad_heads[_i].head);
    ck_assert_int_eq(rld_h1_parse_head(buf, strlen(buf), &q), bad_heads[_i].status);
    ck_assert_str_eq(q.error, bad_heads[_i].error);
}
END_TEST

START_TEST(heads_past_the_limits)
{
    const char *why = NULL;
    char *buf = malloc(RLD_H1_MAX_HEAD + 1);
    /* a request line with no end in 8192 bytes: 414 */
    memset(buf, 'a', RLD_H1_MAX_HEAD);
    ck_assert_int_eq(rld_h1_head_too_long(buf, RLD_H1_MAX_LINE - 1, &why), 0);
    ck_assert_int_eq(rld_h1_head_too_long(buf, RLD_H1_MAX_LINE, &why), 414);
    ck_assert_str_eq(why, "request line: longer than 8192 bytes");
    /* a short request line and 16384 bytes of headers without their end: 431 */
    memcpy(buf, "GET / HTTP/1.1\r\n", 16);
    ck_assert_int_eq(rld_h1_head_too_long(buf, RLD_H1_MAX_HEAD - 1, &why), 0);
    ck_assert_int_eq(rld_h1_head_too_long(buf, RLD_H1_MAX_HEAD, &why), 431);
    ck_assert_str_eq(why, "headers: longer than 16384 bytes in all");
    free(buf);
    /* 101 header fields: 431 */
    char *many = malloc(101 * 16 + 64), *p = many;
    p += sprintf(p, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < 101; i++)
        p += sprintf(p, "H%03d: x\r\n", i);
    p += sprintf(p, "\r\n");
    rld_h1_req q;
    ck_assert_int_eq(rld_h1_parse_head(many, (size_t)(p - many), &q), 431);
    ck_assert_str_eq(q.error, "headers: more than 100 fields");
    free(many);
}
END_TEST

START_TEST(chunked_bodies_decoded)
{
    /* "Wiki" (4) and "pedia" (5), an extension, the last chunk, a trailer field; "NEXT" is the
     * next request's and is left */
    const char *body = "4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nX-T: 1\r\n\r\nNEXT";
    size_t n = strlen(body), used, out;
    char buf[64];
    rld_h1_chunked c = {0};
    memcpy(buf, body, n);
    ck_assert_int_eq(rld_h1_unchunk(&c, buf, n, &used, &out), 1);
    ck_assert_uint_eq(used, n - 4);
    ck_assert_uint_eq(out, 9);
    ck_assert(memcmp(buf, "Wikipedia", 9) == 0);
    /* the same one byte at a time */
    char got[16];
    size_t gl = 0;
    int rc = 0;
    c = (rld_h1_chunked){0};
    for (size_t i = 0; i < n - 4; i++) {
        memcpy(buf, body + i, 1);
        ck_assert_int_eq(rc, 0);
        rc = rld_h1_unchunk(&c, buf, 1, &used, &out);
        ck_assert_uint_eq(used, 1);
        memcpy(got + gl, buf, out);
        gl += out;
    }
    ck_assert_int_eq(rc, 1);
    ck_assert_uint_eq(gl, 9);
    ck_assert(memcmp(got, "Wikipedia", 9) == 0);
    /* no size, a size that is not hex, data longer than its size */
    const char *bad[] = {"\r\n", "g\r\n", "1\r\nab\r\n", "1234567890abcdef0\r\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = (rld_h1_chunked){0};
        snprintf(buf, sizeof buf, "%s", bad[i]);
        ck_assert_int_eq(rld_h1_unchunk(&c, buf, strlen(buf), &used, &out), -1);
    }
}
END_TEST

/* ---- the server over raw sockets ----------------------------------------------------------- */

static su_server srv;

static void srv_up(void)
{
    su_tmpdir(&srv);
    su_start(&srv, NULL, NULL);
}

static void srv_down(void)
{
    ck_assert_int_eq(su_stop(&srv), 0);
}

static int dial(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv.port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect: %s",
                  strerror(errno));
    return fd;
}

static void send_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        ck_assert_msg(w > 0, "send: %s", strerror(errno));
        s += w;
        n -= (size_t)w;
    }
}

/* Reads until the peer closes or 10 s pass; returns what came (malloc'd) and sets *closed. */
static char *read_all(int fd, int *closed)
{
    size_t n = 0, cap = 1 << 16;
    char *buf = malloc(cap + 1);
    *closed = 0;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 10000) <= 0)
            break;
        if (n == cap)
            buf = realloc(buf, (cap *= 2) + 1);
        ssize_t r = read(fd, buf + n, cap - n);
        if (r <= 0) {
            *closed = 1;
            break;
        }
        n += (size_t)r;
    }
    buf[n] = '\0';
    return buf;
}

/* Reads one answer (head and Content-Length bytes of body) into a static buffer. */
static const char *read_answer(int fd)
{
    static char buf[1 << 16];
    size_t n = 0;
    const char *end = NULL;
    long body = -1;
    while (n < sizeof buf - 1) {
        ssize_t r = read(fd, buf + n, 1); /* byte by byte: nothing of the next answer is taken */
        ck_assert_msg(r == 1, "the connection ended after %zu bytes: %.*s", n, (int)n, buf);
        buf[++n] = '\0';
        if (!end && (end = strstr(buf, "\r\n\r\n")) != NULL) {
            const char *cl = strstr(buf, "Content-Length: ");
            body = cl && cl < end ? strtol(cl + 16, NULL, 10) : 0;
            if (strncmp(buf, "HTTP/1.1 100 ", 13) == 0)
                body = 0;
        }
        if (end && (long)(n - (size_t)(end + 4 - buf)) >= body)
            return buf;
    }
    ck_abort_msg("an answer longer than %zu bytes", sizeof buf);
    return NULL;
}

START_TEST(pipelined_requests_answered_in_order)
{
    int fd = dial();
    const char *reqs = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
                       "GET /nope HTTP/1.1\r\nHost: t\r\n\r\n\r\n" /* an empty line is skipped */
                       "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                       "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"; /* after close: unanswered */
    send_all(fd, reqs, strlen(reqs));
    int closed;
    char *all = read_all(fd, &closed);
    ck_assert(closed);
    /* {"status":"ok"} is 15 bytes; {"error":"path: no such endpoint: /nope"} 41 */
    const char *a1 = strstr(all, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 "Content-Length: 15\r\n");
    const char *a2 = strstr(all, "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                                 "Content-Length: 41\r\n");
    const char *a3 = a2 ? strstr(a2, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     "Connection: close\r\nContent-Length: 15\r\n")
                        : NULL;
    ck_assert_msg(a1 == all && a2 && a3, "%s", all);
    ck_assert_ptr_nonnull(strstr(a2, "\r\n\r\n{\"error\":\"path: no such endpoint: /nope\"}"));
    ck_assert_msg(strstr(a3 + 1, "HTTP/1.1") == NULL, "answered after Connection: close: %s", all);
    const char *tail = strstr(a3, "\r\n\r\n");
    ck_assert_str_eq(tail, "\r\n\r\n{\"status\":\"ok\"}");
    free(all);
    close(fd);
}
END_TEST

START_TEST(a_request_one_byte_at_a_time)
{
    int fd = dial();
    const char *req = "POST /acquire HTTP/1.1\r\nHost: t\r\nContent-Length: 26\r\n\r\n"
                      "{\"keys\": {\"user\": \"slow\"}}";
    for (const char *p = req; *p; p++) {
        send_all(fd, p, 1);
        usleep(1000);
    }
    const char *a = read_answer(fd);
    ck_assert_msg(strncmp(a, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", a);
    ck_assert_ptr_nonnull(strstr(a, "\"key\":\"slow\""));
    /* the connection stays open for the next one */
    const char *h = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    send_all(fd, h, strlen(h));
    a = read_answer(fd);
    ck_assert_msg(strncmp(a, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", a);
    close(fd);
}
END_TEST

START_TEST(http_1_0_closes_unless_keep_alive)
{
    int fd = dial(), closed;
    const char *h10 = "GET /healthz HTTP/1.0\r\n\r\n";
    send_all(fd, h10, strlen(h10));
    char *all = read_all(fd, &closed);
    ck_assert(closed);
    ck_assert_msg(strncmp(all, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                               "Connection: close\r\nContent-Length: 15\r\n", 85) == 0, "%s", all);
    free(all);
    close(fd);
    fd = dial();
    const char *ka = "GET /healthz HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n";
    for (int i = 0; i < 2; i++) {
        send_all(fd, ka, strlen(ka));
        const char *a = read_answer(fd);
        ck_assert_msg(strstr(a, "\r\nConnection: keep-alive\r\n") != NULL, "%s", a);
    }
    close(fd);
}
END_TEST

START_TEST(expect_100_continue)
{
    int fd = dial();
    const char *head = "POST /acquire HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                       "Content-Length: 26\r\n\r\n";
    send_all(fd, head, strlen(head));
    ck_assert_str_eq(read_answer(fd), "HTTP/1.1 100 Continue\r\n\r\n");
    const char *body = "{\"keys\": {\"user\": \"exp1\"}}";
    send_all(fd, body, strlen(body));
    const char *a = read_answer(fd);
    ck_assert_msg(strncmp(a, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", a);
    close(fd);
}
END_TEST

START_TEST(chunked_request_bodies)
{
    int fd = dial();
    /* {"keys": {"user": "chunky"}} in two chunks of 10 and 18 bytes */
    const char *req = "POST /acquire HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "a\r\n{\"keys\": {\r\n12\r\n\"user\": \"chunky\"}}\r\n0\r\n\r\n";
    send_all(fd, req, strlen(req));
    const char *a = read_answer(fd);
    ck_assert_msg(strncmp(a, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", a);
    ck_assert_ptr_nonnull(strstr(a, "\"key\":\"chunky\""));
    /* a malformed chunk size: 400, and the connection closes (its framing is lost) */
    const char *bad = "POST /acquire HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "zz\r\n";
    send_all(fd, bad, strlen(bad));
    int closed;
    char *all = read_all(fd, &closed);
    ck_assert(closed);
    ck_assert_msg(strncmp(all, "HTTP/1.1 400 Bad Request\r\n", 26) == 0, "%s", all);
    ck_assert_ptr_nonnull(strstr(all, "{\"error\":\"body: malformed chunked encoding\"}"));
    free(all);
    close(fd);
}
END_TEST

/* The Date field's value in answer a ("Www, DD Mmm YYYY HH:MM:SS GMT", RFC 9110, 5.6.7),
 * checked to be the time now within two seconds; copied into out (30 bytes). */
static void date_of(const char *a, char *out)
{
    const char *d = strstr(a, "\r\nDate: ");
    ck_assert_msg(d != NULL, "no Date: %s", a);
    d += 8;
    ck_assert_msg(strlen(d) > 29 && strncmp(d + 29, "\r\n", 2) == 0, "%s", a);
    memcpy(out, d, 29);
    out[29] = '\0';
    struct tm tm = {0};
    const char *end = strptime(out, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    ck_assert_msg(end && *end == '\0', "Date: %s", out);
    long off = (long)(timegm(&tm) - time(NULL));
    ck_assert_msg(off >= -2 && off <= 2, "Date: %s is %ld s away from now", out, off);
}

START_TEST(answer_heads_in_full)
{
    int fd = dial();
    char date[30], want[512];
    const char *h = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    send_all(fd, h, strlen(h));
    const char *a = read_answer(fd);
    date_of(a, date);
    /* {"status":"ok"} is 15 bytes; Date comes last, then the blank line */
    snprintf(want, sizeof want,
             "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n"
             "Date: %s\r\n\r\n{\"status\":\"ok\"}", date);
    ck_assert_str_eq(a, want);
    /* a second later the field says so (it is rewritten when the second changes) */
    char later[30];
    usleep(1100000);
    send_all(fd, h, strlen(h));
    date_of(read_answer(fd), later);
    ck_assert_str_ne(later, date);
    /* a fresh user and team of the built-in configuration: free (20, 10/s: full again in
     * 2 s) and team (1000, 500/s: 2 s) keep 19 and 999, the next whole unit in 0.1 and
     * 0.002 s (t=1, rounded up); global is shared with the other tests, so its figures vary */
    const char *acq = "POST /acquire HTTP/1.1\r\nHost: t\r\nContent-Length: 40\r\n\r\n"
                      "{\"keys\": {\"user\": \"hd1\", \"team\": \"hd2\"}}";
    send_all(fd, acq, strlen(acq));
    a = read_answer(fd);
    const char *head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                       "RateLimit-Policy: \"user.free\";q=20;w=2, \"team.team\";q=1000;w=2, "
                       "\"global.global\";q=100000;w=2\r\n"
                       "RateLimit: \"user.free\";r=19;t=1, \"team.team\";r=999;t=1, "
                       "\"global.global\";r=";
    ck_assert_msg(strncmp(a, head, strlen(head)) == 0, "%s", a);
    date_of(a, date);
    const char *body = strstr(a, "\r\n\r\n");
    const char *lead = "\r\n\r\n{\"allowed\":true,\"retry_after\":0,\"blocked_by\":null,\"limits\":["
                       "{\"level\":\"user\",\"key\":\"hd1\",\"rule\":\"free\",\"limit\":20,"
                       "\"remaining\":19,\"reset_after\":0.1},{\"level\":\"team\",\"key\":\"hd2\","
                       "\"rule\":\"team\",\"limit\":1000,\"remaining\":999,\"reset_after\":0.002},"
                       "{\"level\":\"global\",\"key\":\"*\",\"rule\":\"global\",\"limit\":100000,";
    ck_assert_msg(body && strncmp(body, lead, strlen(lead)) == 0, "%s", a);
    char cl[64];
    snprintf(cl, sizeof cl, "\r\nContent-Length: %zu\r\nDate: ", strlen(body + 4));
    ck_assert_msg(strstr(a, cl) != NULL, "%s", a);
    close(fd);
}
END_TEST

START_TEST(head_gets_no_body)
{
    int fd = dial();
    /* HEAD is no method of /healthz: 405 with the body's length, but no body; the GET after it
     * is answered right after those headers */
    const char *req = "HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\n"
                      "Host: t\r\nConnection: close\r\n\r\n";
    send_all(fd, req, strlen(req));
    int closed;
    char *all = read_all(fd, &closed);
    ck_assert(closed);
    ck_assert_msg(strncmp(all, "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: application/json\r\n"
                               "Allow: GET\r\nContent-Length: 66\r\n", 97) == 0, "%s", all);
    char *blank = strstr(all, "\r\n\r\n");
    ck_assert_ptr_nonnull(blank);
    ck_assert_msg(strncmp(blank + 4, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", all);
    free(all);
    close(fd);
}
END_TEST

static const struct {
    const char *req;
    const char *status_line, *body;
} refused[] = {
    {"GET / HTTP/2.0\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported\r\n",
     "{\"error\":\"version: only HTTP/1.0 and HTTP/1.1 are served here\"}"},
    {"GET /healthz HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n",
     "{\"error\":\"Host: an HTTP/1.1 request must have one\"}"},
    {"POST /acquire HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n",
     "HTTP/1.1 501 Not Implemented\r\n",
     "{\"error\":\"Transfer-Encoding: only chunked is supported\"}"},
    {"\x16\x03\x01\x02\x05\x01\x01\x01\xfc\x03\x03\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n",
     "{\"error\":\"request line: expected \\\"METHOD /path HTTP/1.1\\\"\"}"},
};

START_TEST(bad_requests_answered_and_closed)
{
    int fd = dial(), closed;
    send_all(fd, refused[_i].req, strlen(refused[_i].req));
    char *all = read_all(fd, &closed);
    ck_assert(closed);
    ck_assert_msg(strncmp(all, refused[_i].status_line, strlen(refused[_i].status_line)) == 0,
                  "%s", all);
    ck_assert_ptr_nonnull(strstr(all, "\r\nConnection: close\r\n"));
    char *blank = strstr(all, "\r\n\r\n");
    ck_assert_ptr_nonnull(blank);
    ck_assert_str_eq(blank + 4, refused[_i].body);
    free(all);
    close(fd);
}
END_TEST

/* Sends a head of n bytes in total (a long target, or many header bytes) and expects status. */
static void too_long(int line, const char *status_line, const char *body)
{
    size_t n = 20000;
    char *req = malloc(n + 64);
    int fd = dial(), closed;
    if (line) {
        memcpy(req, "GET /", 5);
        memset(req + 5, 'a', n - 5);
    } else {
        memcpy(req, "GET / HTTP/1.1\r\nHost: t\r\nX-Pad: ", 32);
        memset(req + 32, 'a', n - 32);
    }
    send_all(fd, req, n);
    char *all = read_all(fd, &closed);
    ck_assert(closed);
    ck_assert_msg(strncmp(all, status_line, strlen(status_line)) == 0, "%.300s", all);
    ck_assert_str_eq(strstr(all, "\r\n\r\n") + 4, body);
    free(all);
    free(req);
    close(fd);
}

START_TEST(heads_over_the_limits_answered)
{
    too_long(1, "HTTP/1.1 414 URI Too Long\r\n",
             "{\"error\":\"request line: longer than 8192 bytes\"}");
    too_long(0, "HTTP/1.1 431 Request Header Fields Too Large\r\n",
             "{\"error\":\"headers: longer than 16384 bytes in all\"}");
}
END_TEST

START_TEST(names_any_case_and_decoded_arguments)
{
    int fd = dial();
    /* cost 25 never fits the free tier's 20: denied, with the status of deny_status=4%303,
     * that is 403; the header names in lower and upper case */
    const char *req = "GET /check?deny_status=4%303 HTTP/1.1\r\nhost: t\r\n"
                      "x-ratelimit-user: dee\r\nX-RATELIMIT-COST: 25\r\n\r\n";
    send_all(fd, req, strlen(req));
    const char *a = read_answer(fd);
    ck_assert_msg(strncmp(a, "HTTP/1.1 403 Forbidden\r\n", 24) == 0, "%s", a);
    /* /quota/b%6Fb is bob's quota */
    const char *q = "GET /quota/b%6Fb HTTP/1.1\r\nHost: t\r\n\r\n";
    send_all(fd, q, strlen(q));
    a = read_answer(fd);
    ck_assert_msg(strstr(a, "{\"user\":\"bob\",") != NULL, "%s", a);
    close(fd);
}
END_TEST

START_TEST(clients_that_leave_early)
{
    /* mid-request: half a head, half a body */
    int fd = dial();
    send_all(fd, "POST /acquire HTTP/1.1\r\nHo", 26);
    close(fd);
    fd = dial();
    const char *head = "POST /acquire HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"ke";
    send_all(fd, head, strlen(head));
    close(fd);
    /* mid-answer: many answers asked for, none read, then a reset */
    fd = dial();
    char *many = malloc(200 * 40);
    size_t n = 0;
    for (int i = 0; i < 200; i++)
        n += (size_t)sprintf(many + n, "GET /rules HTTP/1.1\r\nHost: t\r\n\r\n");
    send_all(fd, many, n);
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
    free(many);
    /* the server is still there and answers */
    su_resp r = su_req(&srv, "GET", "/healthz", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
}
END_TEST

/* Takes the complete answers at the front of buf (len bytes), checking each is a 200;
 * returns how many and moves the rest to the front. */
static int take_answers(char *buf, size_t *len)
{
    int n = 0;
    for (;;) {
        buf[*len] = '\0';
        char *end = strstr(buf, "\r\n\r\n"), *cl = strstr(buf, "Content-Length: ");
        if (!end || !cl)
            return n;
        size_t size = (size_t)(end + 4 - buf) + (size_t)strtol(cl + 16, NULL, 10);
        if (*len < size)
            return n;
        ck_assert_msg(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0, "%.200s", buf);
        memmove(buf, buf + size, *len - size);
        *len -= size;
        n++;
    }
}

START_TEST(a_client_that_does_not_read)
{
    enum { N = 20000 };
    const char *one = "GET /rules HTTP/1.1\r\nHost: t\r\n\r\n";
    size_t len = strlen(one), sent = 0, total = len * N;
    char *all = malloc(total);
    for (int i = 0; i < N; i++)
        memcpy(all + (size_t)i * len, one, len);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv.port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0), small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    /* each answer (about 1.2 KB) is 37 times its request: the server stops reading once its
     * answers wait, so sending stalls well before all 660 KB of requests are in */
    for (int stalls = 0; sent < total && stalls < 50;) {
        ssize_t w = send(fd, all + sent, total - sent, MSG_NOSIGNAL);
        if (w > 0) {
            sent += (size_t)w;
            stalls = 0;
        } else {
            stalls++;
            usleep(10000);
        }
    }
    ck_assert_msg(sent < total, "all %zu bytes of requests went in while nothing was read", total);
    /* meanwhile others are served */
    su_resp r = su_req(&srv, "GET", "/healthz", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    /* reading now, every request gets its answer */
    static char buf[1 << 17];
    size_t have = 0;
    int answered = 0;
    while (answered < N) {
        struct pollfd p = {fd, (short)(POLLIN | (sent < total ? POLLOUT : 0)), 0};
        ck_assert_msg(poll(&p, 1, 10000) > 0, "stuck after %d answers", answered);
        if (p.revents & POLLOUT) {
            ssize_t w = send(fd, all + sent, total - sent, MSG_NOSIGNAL);
            if (w > 0)
                sent += (size_t)w;
        }
        if (p.revents & POLLIN) {
            ssize_t got = read(fd, buf + have, sizeof buf - 1 - have);
            ck_assert_msg(got > 0, "closed after %d answers", answered);
            have += (size_t)got;
            answered += take_answers(buf, &have);
        }
    }
    ck_assert_uint_eq(have, 0);
    free(all);
    close(fd);
}
END_TEST

/* Policy (field 41 of /proc/<pid>/task/<tid>/stat) of each of the daemon's threads: its HTTP
 * workers run as SCHED_BATCH (3), the main thread as SCHED_OTHER (0). */
START_TEST(workers_run_as_batch_threads)
{
    char path[320], line[1024];
    int batch = 0, threads = 0, main_policy = -1;
    snprintf(path, sizeof path, "/proc/%d/task", (int)srv.pid);
    DIR *d = opendir(path);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        int tid = atoi(e->d_name);
        snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)srv.pid, tid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* a thread that ended meanwhile */
        char *got = fgets(line, sizeof line, f);
        fclose(f);
        ck_assert_ptr_nonnull(got);
        char *p = strrchr(line, ')'); /* fields counted after the command's parenthesis */
        ck_assert_ptr_nonnull(p);
        int field = 2, policy = -1;
        for (char *t = strtok(p + 1, " "); t; t = strtok(NULL, " "))
            if (++field == 41)
                policy = atoi(t);
        threads++;
        batch += policy == 3;
        if (tid == srv.pid)
            main_policy = policy;
    }
    closedir(d);
    ck_assert_int_gt(threads, 1);
    ck_assert_int_eq(main_policy, 0);
    ck_assert_int_ge(batch, 1);
}
END_TEST

static Suite *http1_suite(void)
{
    Suite *s = suite_create("http1");
    TCase *p = tcase_create("parser");
    tcase_add_test(p, head_parsed_in_place);
    tcase_add_test(p, head_end_found_byte_by_byte);
    tcase_add_loop_test(p, bad_heads_are_refused, 0, sizeof bad_heads / sizeof bad_heads[0]);
    tcase_add_test(p, heads_past_the_limits);
    tcase_add_test(p, chunked_bodies_decoded);
    suite_add_tcase(s, p);
    TCase *tc = tcase_create("server");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, srv_up, srv_down);
    tcase_add_test(tc, pipelined_requests_answered_in_order);
    tcase_add_test(tc, a_request_one_byte_at_a_time);
    tcase_add_test(tc, http_1_0_closes_unless_keep_alive);
    tcase_add_test(tc, expect_100_continue);
    tcase_add_test(tc, chunked_request_bodies);
    tcase_add_test(tc, head_gets_no_body);
    tcase_add_test(tc, answer_heads_in_full);
    tcase_add_loop_test(tc, bad_requests_answered_and_closed, 0,
                        sizeof refused / sizeof refused[0]);
    tcase_add_test(tc, heads_over_the_limits_answered);
    tcase_add_test(tc, names_any_case_and_decoded_arguments);
    tcase_add_test(tc, clients_that_leave_early);
    tcase_add_test(tc, a_client_that_does_not_read);
    tcase_add_test(tc, workers_run_as_batch_threads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(http1_suite());
}
