/*
 * test_hardening.c - the real ratelimitd against abuse: the connection limit (a connection past
 * max_connections is answered 503 at once and closed), the idle timeout (a connection that
 * sends nothing is closed after connection_timeout), and the limits of a request (a key over
 * 256 bytes, a body over 64 KiB); the tokens (acquire, admin and metrics tokens from the
 * configuration, a file or the environment, one 401 for every wrong or missing token); HTTPS
 * with a certificate the test makes, checked by curl; state across restarts (a snapshot
 * round trip with elapsed time and a clock gone back, SIGKILL after a periodic snapshot, a
 * truncated snapshot moved aside, counted and not half-loaded).
 * Connections are raw sockets, so that nothing in between
 * opens, reuses or times out connections on its own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "srvutil.h"

static const char *limits_cfg =
    "{\"max_connections\": 2, \"connection_timeout\": 1, \"threads\": 1, \"levels\": ["
    " {\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 5, "
    "\"per_second\": 1}]}]}";

static int connect_to(const su_server *s)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect: %s",
                  strerror(errno));
    return fd;
}

/* Reads until the peer closes or ms pass; returns what came (malloc'd) and sets *closed. */
static char *read_until_closed(int fd, int ms, int *closed)
{
    size_t n = 0, cap = 65536;
    char *buf = malloc(cap + 1);
    *closed = 0;
    for (;;) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, ms) <= 0)
            break;
        ssize_t r = read(fd, buf + n, cap - n);
        if (r <= 0) {
            *closed = 1;
            break;
        }
        n += (size_t)r;
        if (n == cap)
            break;
    }
    buf[n] = '\0';
    return buf;
}

/* Sends a whole request on fd and reads one answer's head and body (up to the body's end as
 * told by Content-Length). */
static char *exchange(int fd, const char *req)
{
    ck_assert_int_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    char *buf = calloc(1, 65537);
    size_t n = 0;
    while (n < 65536) {
        struct pollfd pf = {fd, POLLIN, 0};
        ck_assert_msg(poll(&pf, 1, 10000) == 1, "no answer to %s", req);
        ssize_t r = read(fd, buf + n, 65536 - n);
        ck_assert_msg(r > 0, "closed before the answer to %s", req);
        n += (size_t)r;
        const char *end = strstr(buf, "\r\n\r\n"), *cl = strstr(buf, "Content-Length: ");
        if (end && cl && n >= (size_t)(end + 4 - buf) + strtoul(cl + 16, NULL, 10))
            break;
    }
    return buf;
}

static const char healthz[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";

START_TEST(connections_past_the_limit_are_refused_at_once)
{
    su_server s;
    int closed;
    su_tmpdir(&s);
    su_start(&s, limits_cfg, NULL);
    /* two connections, each served once so the server holds them both */
    int a = connect_to(&s), b = connect_to(&s);
    char *r = exchange(a, healthz);
    ck_assert_ptr_nonnull(strstr(r, "HTTP/1.1 200"));
    free(r);
    r = exchange(b, healthz);
    ck_assert_ptr_nonnull(strstr(r, "HTTP/1.1 200"));
    free(r);
    /* the third is answered 503 and closed without sending anything */
    int c = connect_to(&s);
    r = read_until_closed(c, 5000, &closed);
    ck_assert_msg(closed, "the third connection stayed open: %s", r);
    ck_assert_msg(strncmp(r, "HTTP/1.1 503 ", 13) == 0, "got %s", r);
    ck_assert_ptr_nonnull(strstr(r, "Retry-After: 1\r\n"));
    ck_assert_ptr_nonnull(
        strstr(r, "{\"error\":\"connections: 2 open, the most max_connections allows\"}"));
    free(r);
    close(c);
    /* the two still work; once one closes, a new connection is served again */
    r = exchange(a, healthz);
    ck_assert_ptr_nonnull(strstr(r, "HTTP/1.1 200"));
    free(r);
    close(a);
    int d = -1;
    for (int i = 0; i < 100; i++) {
        /* the server counts the close when its worker sees it */
        d = connect_to(&s);
        r = exchange(d, healthz);
        int ok = strstr(r, "HTTP/1.1 200") != NULL;
        free(r);
        if (ok)
            break;
        close(d);
        d = -1;
        usleep(20000);
    }
    ck_assert_msg(d >= 0, "no connection was served after one closed");
    close(d);
    close(b);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(idle_connections_are_closed_after_the_timeout)
{
    su_server s;
    int closed;
    su_tmpdir(&s);
    su_start(&s, limits_cfg, NULL);
    /* one that never sends, and one that stalls in the middle of its headers: both closed after
     * about 1 s (connection_timeout); 20 s is only a bound for a slow machine */
    int idle = connect_to(&s), stalled = connect_to(&s);
    const char part[] = "POST /acquire HTTP/1.1\r\nHost: t\r\nContent-Le";
    ck_assert_int_eq(write(stalled, part, sizeof part - 1), (ssize_t)(sizeof part - 1));
    char *r = read_until_closed(idle, 20000, &closed);
    ck_assert_msg(closed, "an idle connection stayed open 20 s");
    ck_assert_str_eq(r, "");
    free(r);
    r = read_until_closed(stalled, 20000, &closed);
    ck_assert_msg(closed, "a stalled connection stayed open 20 s");
    free(r);
    close(idle);
    close(stalled);
    /* the slots they held are free again */
    int c = -1;
    for (int i = 0; i < 100 && c < 0; i++) {
        c = connect_to(&s);
        r = exchange(c, healthz);
        if (!strstr(r, "HTTP/1.1 200")) {
            close(c);
            c = -1;
            usleep(20000);
        }
        free(r);
    }
    ck_assert_int_ge(c, 0);
    close(c);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(default_timeout_keeps_a_quiet_connection)
{
    su_server s;
    int closed;
    su_tmpdir(&s);
    /* the default connection_timeout is 30 s: a connection quiet for 2 s is still served */
    su_start(&s,
             "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", "
             "\"capacity\": 5, \"per_second\": 1}]}]}",
             NULL);
    int fd = connect_to(&s);
    char *r = read_until_closed(fd, 2000, &closed);
    ck_assert_msg(!closed, "closed after less than 2 s");
    free(r);
    r = exchange(fd, healthz);
    ck_assert_ptr_nonnull(strstr(r, "HTTP/1.1 200"));
    free(r);
    close(fd);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(request_limits)
{
    su_server s;
    char body[400];
    su_tmpdir(&s);
    su_start(&s,
             "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", "
             "\"capacity\": 5, \"per_second\": 1}]}]}",
             NULL);
    /* a key of exactly 256 bytes is fine, 257 is refused and changes nothing */
    snprintf(body, sizeof body, "{\"keys\": {\"user\": \"%0256d\"}}", 0);
    su_resp r = su_req(&s, "POST", "/acquire", body, NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    snprintf(body, sizeof body, "{\"keys\": {\"user\": \"%0257d\"}}", 0);
    r = su_req(&s, "POST", "/acquire", body, NULL);
    ck_assert_int_eq(r.status, 400);
    ck_assert_str_eq(su_error(&r), "keys.user: must be at most 256 bytes");
    su_resp_free(&r);
    /* a body of 64 KiB + 1 is refused with 413 */
    char *big = malloc(65538);
    memset(big, ' ', 65537);
    big[0] = '{';
    big[65536] = '}';
    big[65537] = '\0';
    r = su_req(&s, "POST", "/acquire", big, NULL);
    ck_assert_int_eq(r.status, 413);
    ck_assert_str_eq(su_error(&r), "body: larger than 65536 bytes");
    su_resp_free(&r);
    free(big);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(limit_settings_are_checked)
{
    const char *argv[] = {su_binary(), "--check-config", NULL, NULL};
    char *out;
    su_server s;
    su_tmpdir(&s);
    argv[2] = su_write(s.dir, "c.json",
                       "{\"max_connections\": 0, \"levels\": [{\"name\": \"u\", \"rules\": "
                       "[{\"type\": \"gcra\", \"per_second\": 1}]}]}");
    ck_assert_int_eq(su_run(argv, &out), 1);
    ck_assert_msg(strstr(out, "max_connections: "), "%s", out);
    free(out);
    argv[2] = su_write(s.dir, "c.json",
                       "{\"connection_timeout\": 0.5, \"levels\": [{\"name\": \"u\", \"rules\": "
                       "[{\"type\": \"gcra\", \"per_second\": 1}]}]}");
    ck_assert_int_eq(su_run(argv, &out), 1);
    ck_assert_msg(strstr(out, "connection_timeout: "), "%s", out);
    free(out);
}
END_TEST

/* ---- tokens ------------------------------------------------------------------------------ */

static const char unauthorized[] =
    "authorization: this endpoint needs \"Authorization: Bearer <token>\" with a valid token";

/* The status of a request with an Authorization header (NULL: none). */
static long status_with(const su_server *s, const char *method, const char *path,
                        const char *body, const char *authorization)
{
    char h[300];
    const char *const hs[] = {h, NULL};
    snprintf(h, sizeof h, "Authorization: %s", authorization ? authorization : "");
    su_resp r = su_req(s, method, path, body, authorization ? hs : NULL);
    long st = r.status;
    if (st == 401) {
        /* the same answer whatever was wrong: no header, another scheme, another token */
        ck_assert_str_eq(su_error(&r), unauthorized);
        ck_assert_str_eq(su_header(&r, "WWW-Authenticate"), "Bearer realm=\"ratelimitd\"");
    }
    su_resp_free(&r);
    return st;
}

static const char acq[] = "{\"keys\": {\"user\": \"u\"}}";

START_TEST(acquire_token_from_the_config)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s,
             "{\"acquire_token\": \"acq-1\", \"admin_token\": \"adm-1\", \"levels\": [{\"name\": "
             "\"user\", \"tiered\": true}], \"tiers\": {\"t\": [{\"type\": \"token_bucket\", "
             "\"capacity\": 5, \"per_second\": 1}]}, \"default_tier\": \"t\"}",
             NULL);
    const char *const wrong[] = {NULL, "Bearer acq-2", "Bearer acq-1x", "Bearer acq-", "Basic acq-1",
                                 "Bearer adm-1", "Bearer  acq-1", "acq-1"};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        ck_assert_int_eq(status_with(&s, "POST", "/acquire", acq, wrong[i]), 401);
        ck_assert_int_eq(status_with(&s, "POST", "/refund",
                                     "{\"reservation\": \"r-1\", \"actual_cost\": 1}", wrong[i]),
                         401);
        ck_assert_int_eq(status_with(&s, "POST", "/release", "{\"reservation\": \"r-1\"}",
                                     wrong[i]),
                         401);
        ck_assert_int_eq(status_with(&s, "GET", "/check", NULL, wrong[i]), 401);
    }
    /* nothing was taken by the refusals: 5 in the bucket, this takes 1 */
    su_resp r = su_req(&s, "POST", "/acquire", acq,
                       (const char *const[]){"Authorization: bearer acq-1", NULL});
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "\"remaining\":4"));
    su_resp_free(&r);
    /* an unknown reservation is a 404 once the token is right */
    ck_assert_int_eq(status_with(&s, "POST", "/release", "{\"reservation\": \"r-1\"}",
                                 "Bearer acq-1"),
                     404);
    /* each token opens its own endpoints only */
    ck_assert_int_eq(status_with(&s, "GET", "/quota/u", NULL, "Bearer acq-1"), 401);
    ck_assert_int_eq(status_with(&s, "GET", "/quota/u", NULL, "Bearer adm-1"), 200);
    /* without metrics_token, /metrics, /healthz and /rules stay open */
    ck_assert_int_eq(status_with(&s, "GET", "/metrics", NULL, NULL), 200);
    ck_assert_int_eq(status_with(&s, "GET", "/healthz", NULL, NULL), 200);
    ck_assert_int_eq(status_with(&s, "GET", "/rules", NULL, NULL), 200);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(tokens_from_a_file_and_the_environment)
{
    su_server s;
    su_tmpdir(&s);
    su_write(s.dir, "acquire.token", "from-file\n");
    setenv("RATELIMITD_METRICS_TOKEN", "from-env", 1);
    setenv("RATELIMITD_ACQUIRE_TOKEN", "not-used", 1); /* the file comes first */
    su_start(&s,
             "{\"acquire_token_file\": \"acquire.token\", \"levels\": [{\"name\": \"user\", "
             "\"rules\": [{\"type\": \"token_bucket\", \"capacity\": 5, \"per_second\": 1}]}]}",
             NULL);
    ck_assert_int_eq(status_with(&s, "POST", "/acquire", acq, "Bearer from-fil"), 401);
    ck_assert_int_eq(status_with(&s, "POST", "/acquire", acq, "Bearer not-used"), 401);
    ck_assert_int_eq(status_with(&s, "POST", "/acquire", acq, "Bearer from-file"), 200);
    ck_assert_int_eq(status_with(&s, "GET", "/metrics", NULL, NULL), 401);
    ck_assert_int_eq(status_with(&s, "GET", "/healthz", NULL, "Bearer from-file"), 401);
    ck_assert_int_eq(status_with(&s, "GET", "/metrics", NULL, "Bearer from-env"), 200);
    ck_assert_int_eq(status_with(&s, "GET", "/healthz", NULL, "Bearer from-env"), 200);
    ck_assert_int_eq(su_stop(&s), 0);
    unsetenv("RATELIMITD_METRICS_TOKEN");
    unsetenv("RATELIMITD_ACQUIRE_TOKEN");
}
END_TEST

/* --check-config's answer for a configuration with these members. */
static char *check_with(const su_server *s, const char *members, int *rc)
{
    char cfg[1024];
    char *out;
    const char *argv[] = {su_binary(), "--check-config", NULL, NULL};
    snprintf(cfg, sizeof cfg,
             "{%s, \"levels\": [{\"name\": \"u\", \"rules\": [{\"type\": \"gcra\", "
             "\"per_second\": 1}]}]}",
             members);
    argv[2] = su_write(s->dir, "c.json", cfg);
    /* su_run runs in the test's directory: the token files are named with s->dir */
    *rc = su_run(argv, &out);
    return out;
}

static int log_has(const su_server *s, const char *text);

/* Off loopback without admin_token the admin endpoints are closed (403, whatever the request
 * carries), and nothing they would have changed changes; "admin_open": true opens them, with a
 * warning in the log at every start. The rule is about the configured address: 0.0.0.0 is
 * reached here through 127.0.0.1. */
static const char *const admin_routes[][3] = {
    {"PUT", "/quota/bob", "{\"tier\": \"gold\"}"},
    {"DELETE", "/quota/bob", NULL},
    {"GET", "/quota/bob", NULL},
    {"POST", "/admin/reload", NULL},
};

static char *admin_cfg(const char *extra)
{
    static char cfg[700];
    snprintf(cfg, sizeof cfg,
             "{\"listen\": {\"address\": \"0.0.0.0\"}, %s\"levels\": [{\"name\": \"user\", "
             "\"tiered\": true}], \"tiers\": {\"t\": [{\"type\": \"token_bucket\", \"capacity\": "
             "5, \"per_second\": 1}], \"gold\": [{\"type\": \"token_bucket\", \"capacity\": 50, "
             "\"per_second\": 1}]}, \"default_tier\": \"t\"}",
             extra);
    return cfg;
}

/* remaining after bob takes 1: 4 in tier t (capacity 5), 49 in gold (capacity 50) */
static double bob_remaining(const su_server *s)
{
    su_resp r = su_req(s, "POST", "/acquire", "{\"keys\": {\"user\": \"bob\"}}", NULL);
    ck_assert_int_eq(r.status, 200);
    double v = json_number_value(
        json_object_get(json_array_get(json_object_get(r.json, "limits"), 0), "remaining"));
    su_resp_free(&r);
    return v;
}

START_TEST(admin_endpoints_closed_off_loopback)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, admin_cfg(""), NULL);
    for (size_t i = 0; i < sizeof admin_routes / sizeof admin_routes[0]; i++) {
        for (int auth = 0; auth < 2; auth++) {
            const char *const h[] = {"Authorization: Bearer anything", NULL};
            su_resp r = su_req(&s, admin_routes[i][0], admin_routes[i][1], admin_routes[i][2],
                               auth ? h : NULL);
            ck_assert_msg(r.status == 403, "%s %s: %ld %s", admin_routes[i][0],
                          admin_routes[i][1], r.status, r.body);
            ck_assert_str_eq(su_error(&r),
                             "admin_token: the admin endpoints are closed: ratelimitd listens "
                             "on 0.0.0.0, not on loopback, and no admin_token is set (set "
                             "admin_token, or \"admin_open\": true to open them to anyone who "
                             "reaches the port)");
            su_resp_free(&r);
        }
    }
    /* the PUT changed nothing: bob is still in tier t; the decision endpoints stay open */
    ck_assert_double_eq(bob_remaining(&s), 4);
    ck_assert(log_has(&s, "note: the admin endpoints (/quota, /admin/reload) answer 403: "
                          "listening on 0.0.0.0, not on loopback, without admin_token"));
    ck_assert(!log_has(&s, "warn: the admin endpoints"));
    ck_assert(!log_has(&s, "configuration reloaded"));
    ck_assert_int_eq(su_stop(&s), 0);

    /* "admin_open": true: the PUT passes, and the log warns */
    su_tmpdir(&s); /* a log of its own */
    su_start(&s, admin_cfg("\"admin_open\": true, "), NULL);
    su_resp r = su_req(&s, "PUT", "/quota/bob", "{\"tier\": \"gold\"}", NULL);
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
    su_resp_free(&r);
    ck_assert_double_eq(bob_remaining(&s), 49);
    char want[200];
    snprintf(want, sizeof want,
             "warn: the admin endpoints (/quota, /admin/reload) are open to anyone who reaches "
             "0.0.0.0:%d: \"admin_open\": true and no admin_token",
             s.port);
    ck_assert(log_has(&s, want));
    ck_assert_int_eq(su_stop(&s), 0);

    /* with admin_token off loopback: the token opens them, as on loopback */
    su_tmpdir(&s);
    su_start(&s, admin_cfg("\"admin_token\": \"adm\", "), NULL);
    ck_assert_int_eq(status_with(&s, "PUT", "/quota/bob", "{\"tier\": \"t\"}", NULL), 401);
    ck_assert_int_eq(status_with(&s, "PUT", "/quota/bob", "{\"tier\": \"t\"}", "Bearer adm"),
                     200);
    ck_assert(!log_has(&s, "the admin endpoints"));
    ck_assert_int_eq(su_stop(&s), 0);

    /* on loopback without a token they stay open, with no warning */
    char *loopback = su_replace_once(strdup(admin_cfg("")), "0.0.0.0", "127.0.0.1", "admin_cfg");
    su_start(&s, loopback, NULL);
    free(loopback);
    ck_assert_int_eq(status_with(&s, "GET", "/quota/bob", NULL, NULL), 200);
    ck_assert_int_eq(su_stop(&s), 0);

    /* a value that is not a boolean names the field */
    int rc;
    char *out = check_with(&s, "\"admin_open\": \"yes\"", &rc);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "admin_open"), "%s", out);
    free(out);
}
END_TEST

START_TEST(bad_token_settings_are_refused)
{
    su_server s;
    char m[600];
    int rc;
    su_tmpdir(&s);
    snprintf(m, sizeof m, "\"admin_token_file\": \"%s/none.txt\"", s.dir);
    char *out = check_with(&s, m, &rc);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "admin_token_file: ") && strstr(out, "/none.txt: No such file"),
                  "%s", out);
    free(out);
    snprintf(m, sizeof m, "\"acquire_token\": \"x\", \"acquire_token_file\": \"%s/c.json\"",
             s.dir);
    out = check_with(&s, m, &rc);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "acquire_token: give acquire_token or acquire_token_file, not "
                              "both"),
                  "%s", out);
    free(out);
    out = check_with(&s, "\"metrics_token\": \"two words\"", &rc);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "metrics_token: must be printable ASCII without spaces"), "%s",
                  out);
    free(out);
    su_write(s.dir, "empty.token", "\n");
    snprintf(m, sizeof m, "\"metrics_token_file\": \"%s/empty.token\"", s.dir);
    out = check_with(&s, m, &rc);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "/empty.token: must be 1 to 1024 characters"), "%s", out);
    free(out);
    setenv("RATELIMITD_ADMIN_TOKEN", "a b", 1);
    out = check_with(&s, "\"threads\": 1", &rc);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "RATELIMITD_ADMIN_TOKEN: must be printable ASCII"), "%s", out);
    free(out);
    unsetenv("RATELIMITD_ADMIN_TOKEN");
}
END_TEST

/* ---- TLS --------------------------------------------------------------------------------- */

START_TEST(https_with_a_certificate_made_here)
{
    su_server s;
    char cert[400], key[400], url[128], *out;
    su_tmpdir(&s);
    snprintf(cert, sizeof cert, "%s/cert.pem", s.dir);
    snprintf(key, sizeof key, "%s/key.pem", s.dir);
    const char *gen[] = {"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                         "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                         "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                         "subjectAltName=IP:127.0.0.1", NULL};
    ck_assert_msg(su_run(gen, &out) == 0, "openssl: %s", out);
    free(out);
    su_start(&s,
             "{\"tls\": {\"cert\": \"cert.pem\", \"key\": \"key.pem\"}, \"acquire_token\": \"t1\","
             " \"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", "
             "\"capacity\": 5, \"per_second\": 1}]}]}",
             NULL);
    /* curl checks the certificate against the one made above */
    snprintf(url, sizeof url, "https://127.0.0.1:%d/acquire", s.port);
    const char *acquire[] = {"/usr/bin/curl", "-sS", "--cacert", cert, "-H", "Authorization: Bearer t1",
                             "-d", "{\"keys\": {\"user\": \"u\"}, \"cost\": 2}", url, NULL};
    ck_assert_int_eq(su_run(acquire, &out), 0);
    ck_assert_msg(strstr(out, "\"allowed\":true") && strstr(out, "\"remaining\":3"), "%s", out);
    free(out);
    /* without the token: 401 over TLS too */
    const char *noauth[] = {"/usr/bin/curl", "-sS", "--cacert", cert, "-d", "{\"keys\": {\"user\": \"u\"}}",
                            url, NULL};
    ck_assert_int_eq(su_run(noauth, &out), 0);
    ck_assert_msg(strstr(out, "{\"error\":\"authorization: this endpoint needs"), "%s", out);
    free(out);
    /* a client that does not trust the certificate stops at the handshake */
    const char *untrusted[] = {"/usr/bin/curl", "-sS", url, NULL};
    ck_assert_int_ne(su_run(untrusted, &out), 0);
    free(out);
    /* plain HTTP on the HTTPS port gets no answer */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/healthz", s.port);
    const char *plain[] = {"/usr/bin/curl", "-sS", "-m", "5", url, NULL};
    ck_assert_int_ne(su_run(plain, &out), 0);
    ck_assert_ptr_null(strstr(out, "status"));
    free(out);
    ck_assert_int_eq(su_stop(&s), 0);

    /* a key without its certificate, or a missing file, is refused at start */
    int rc;
    out = check_with(&s, "\"tls\": {\"key\": \"k.pem\"}", &rc);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "tls: give both cert and key"), "%s", out);
    free(out);
    out = check_with(&s, "\"tls\": {\"cert\": \"/nonexistent/c.pem\", \"key\": \"k.pem\"}", &rc);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "tls.cert: /nonexistent/c.pem: No such file or directory"), "%s",
                  out);
    free(out);
}
END_TEST

/* ---- state across restarts --------------------------------------------------------------- */

static const char *const manual[] = {"--manual-clock", NULL};

static const char *state_cfg =
    "{\"state_file\": \"var/state.bin\", \"state_interval\": 1, \"levels\": [{\"name\": "
    "\"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": "
    "1}]}]}";

/* remaining of the first limit of a decision of cost for user u at now (dry run or not). */
static double remaining_at(const su_server *s, const char *user, double cost, double now,
                           int dry_run, long want_status)
{
    char body[200];
    snprintf(body, sizeof body,
             "{\"keys\": {\"user\": \"%s\"}, \"cost\": %g, \"now\": %g, \"dry_run\": %s}", user,
             cost, now, dry_run ? "true" : "false");
    su_resp r = su_req(s, "POST", "/acquire", body, NULL);
    ck_assert_msg(r.status == want_status, "%s: %ld %s", body, r.status, r.body);
    json_t *l = json_array_get(json_object_get(r.json, "limits"), 0);
    double v = json_number_value(json_object_get(l, "remaining"));
    su_resp_free(&r);
    return v;
}

static int log_has(const su_server *s, const char *text)
{
    char *log = su_read(s->log);
    int found = log && strstr(log, text) != NULL;
    free(log);
    return found;
}

START_TEST(snapshot_round_trip_with_elapsed_time)
{
    su_server s;
    char path[400];
    su_tmpdir(&s);
    su_start(&s, state_cfg, manual);
    /* 10 at 1/s: 8 taken at t = 100 leave 2 */
    ck_assert_double_eq(remaining_at(&s, "u", 8, 100, 0, 200), 2);
    ck_assert_int_eq(su_stop(&s), 0);
    ck_assert(log_has(&s, "state saved to var/state.bin"));
    snprintf(path, sizeof path, "%s/var/state.bin.tmp", s.dir);
    ck_assert_msg(access(path, F_OK) != 0, "the temporary file was left behind");

    su_start(&s, state_cfg, manual);
    ck_assert(log_has(&s, "state: loaded 1 key states and reservations from var/state.bin"));
    /* 3 s later: 2 + 3 */
    ck_assert_double_eq(remaining_at(&s, "u", 1, 103, 1, 200), 5);
    /* a clock that went back refills nothing and takes nothing from time: still 2 at t = 50,
     * where 2 fit and 3 do not */
    ck_assert_double_eq(remaining_at(&s, "u", 3, 50, 1, 429), 2);
    ck_assert_double_eq(remaining_at(&s, "u", 2, 50, 0, 200), 0);
    ck_assert_double_eq(remaining_at(&s, "u", 1, 101, 1, 200), 1);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

static long long mtime_ns(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    return (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
}

START_TEST(sigkill_loses_at_most_the_interval)
{
    su_server s;
    char path[400];
    int st;
    su_tmpdir(&s);
    snprintf(path, sizeof path, "%s/var/state.bin", s.dir);
    su_start(&s, state_cfg, manual);
    ck_assert_double_eq(remaining_at(&s, "u", 8, 100, 0, 200), 2);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    long long after = (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
    /* two snapshots written after the decision (state_interval 1 s; 30 s bounds a slow run):
     * the second surely holds it */
    int saves = 0;
    for (int i = 0; i < 3000 && saves < 2; i++) {
        long long m = mtime_ns(path);
        if (m > after) {
            saves++;
            after = m;
        }
        usleep(10000);
    }
    ck_assert_msg(saves == 2, "no snapshot within 30 s");
    kill(s.pid, SIGKILL);
    while (waitpid(s.pid, &st, 0) < 0 && errno == EINTR)
        ;
    s.pid = 0;
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

    su_start(&s, state_cfg, manual);
    ck_assert(log_has(&s, "state: loaded 1 key states"));
    ck_assert_double_eq(remaining_at(&s, "u", 1, 100, 1, 200), 2);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(corrupt_snapshot_is_moved_aside_and_counted)
{
    su_server s;
    char path[400], aside[420];
    su_tmpdir(&s);
    snprintf(path, sizeof path, "%s/var/state.bin", s.dir);
    snprintf(aside, sizeof aside, "%s.corrupt", path);
    su_start(&s, state_cfg, manual);
    ck_assert_double_eq(remaining_at(&s, "u", 8, 100, 0, 200), 2);
    ck_assert_double_eq(remaining_at(&s, "v", 4, 100, 0, 200), 6);
    ck_assert_int_eq(su_stop(&s), 0);
    /* the end record ('E' and two 8-byte counts) cut off: every key record is whole, and still
     * none of them may be loaded */
    struct stat stt;
    ck_assert_int_eq(stat(path, &stt), 0);
    ck_assert_int_eq(truncate(path, stt.st_size - 17), 0);

    su_start(&s, state_cfg, manual);
    ck_assert_msg(log_has(&s, "error: state_file var/state.bin: truncated or malformed; moved to "
                              "var/state.bin.corrupt, starting without it"),
                  "no message about the truncated file");
    ck_assert_msg(access(aside, F_OK) == 0 && access(path, F_OK) != 0, "not moved aside");
    ck_assert_double_eq(remaining_at(&s, "u", 1, 100, 1, 200), 10);
    ck_assert_double_eq(remaining_at(&s, "v", 1, 100, 1, 200), 10);
    su_resp r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_msg(strstr(r.body, "\nratelimit_snapshot_corrupt_total 1\n"), "%s", r.body);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);

    /* a good start counts nothing */
    su_start(&s, state_cfg, manual);
    r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_msg(strstr(r.body, "\nratelimit_snapshot_corrupt_total 0\n"), "%s", r.body);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

/* ---- max_keys ---------------------------------------------------------------------------- */

START_TEST(max_keys_answers_503_and_counts)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s,
             "{\"max_keys\": 2, \"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
             "\"token_bucket\", \"capacity\": 10, \"per_second\": 1}]}]}",
             manual);
    ck_assert_double_eq(remaining_at(&s, "a", 5, 1, 0, 200), 5);
    ck_assert_double_eq(remaining_at(&s, "b", 5, 1, 0, 200), 5);
    su_resp r = su_req(&s, "POST", "/acquire", "{\"keys\": {\"user\": \"c\"}, \"now\": 1}", NULL);
    ck_assert_int_eq(r.status, 503);
    ck_assert_str_eq(su_header(&r, "Retry-After"), "1");
    ck_assert_str_eq(su_error(&r), "store: max_keys (2) key states held and none idle; keys "
                                   "with state are still served, try again later");
    su_resp_free(&r);
    /* a dry run needs no state, and the keys with state are served */
    ck_assert_double_eq(remaining_at(&s, "c", 1, 1, 1, 200), 10);
    ck_assert_double_eq(remaining_at(&s, "a", 1, 1, 0, 200), 4);
    r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_msg(strstr(r.body, "\nratelimit_keys_refused_total 1\n"), "%s", r.body);
    /* a and b hold one state each (one rule), against the bound of 2 */
    ck_assert_msg(strstr(r.body, "\nratelimit_key_states 2\n"), "%s", r.body);
    ck_assert_msg(strstr(r.body, "\nratelimit_key_states_max 2\n"), "%s", r.body);
    su_resp_free(&r);
    /* b is full again at t = 6 (5 + 5 s at 1/s) and idle: c takes its place */
    ck_assert_double_eq(remaining_at(&s, "c", 1, 6, 0, 200), 9);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

/* ---- reload ------------------------------------------------------------------------------ */

/* Waits up to 20 s for text in the log. */
static int log_waits_for(const su_server *s, const char *text)
{
    for (int i = 0; i < 2000; i++) {
        if (log_has(s, text))
            return 1;
        usleep(10000);
    }
    return 0;
}

static int count_in(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* Writes cfg as the daemon's configuration file and reloads it over the endpoint. */
static void reload_with(const su_server *s, const char *cfg)
{
    su_write(s->dir, "config.json", cfg);
    su_resp r = su_req(s, "POST", "/admin/reload", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
}

START_TEST(reload_moves_denial_counts_with_their_levels)
{
    su_server s;
    su_tmpdir(&s);
    static const char *rule = "\"rules\": [{\"type\": \"token_bucket\", \"name\": \"one\", "
                              "\"capacity\": 1, \"per_second\": 0.001}]";
    char cfg[600];
    snprintf(cfg, sizeof cfg, "{\"levels\": [{\"name\": \"user\", %s}, {\"name\": \"team\", %s}]}",
             rule, rule);
    su_start(&s, cfg, manual);
    /* u's second request is denied by user */
    ck_assert_double_eq(remaining_at(&s, "u", 1, 100, 0, 200), 0);
    remaining_at(&s, "u", 1, 100, 0, 429);
    const char *user1 = "\nratelimit_denied_total{level=\"user\",rule=\"one\"} 1\n";
    su_resp r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_msg(strstr(r.body, user1), "%.1500s", r.body);
    su_resp_free(&r);
    /* the levels swap places: the count stays with user */
    snprintf(cfg, sizeof cfg, "{\"levels\": [{\"name\": \"team\", %s}, {\"name\": \"user\", %s}]}",
             rule, rule);
    reload_with(&s, cfg);
    r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_msg(strstr(r.body, user1), "%.1500s", r.body);
    ck_assert_msg(!strstr(r.body, "ratelimit_denied_total{level=\"team\""), "%.1500s", r.body);
    su_resp_free(&r);
    /* user renamed: its series ends, member's starts with its own denials */
    snprintf(cfg, sizeof cfg, "{\"levels\": [{\"name\": \"team\", %s}, {\"name\": \"member\", %s}]}",
             rule, rule);
    reload_with(&s, cfg);
    r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_msg(!strstr(r.body, "ratelimit_denied_total{level=\"user\""), "%.1500s", r.body);
    ck_assert_msg(!strstr(r.body, "ratelimit_denied_total{level=\"member\""), "%.1500s", r.body);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(reload_keeps_quotas_set_at_run_time)
{
    /* no quota_file: the tiers admins set live only in memory, and a reload keeps them */
    su_server s;
    su_tmpdir(&s);
    const char *cfg =
        "{\"levels\": [{\"name\": \"user\", \"tiered\": true}], \"default_tier\": \"free\", "
        "\"tiers\": {\"free\": [{\"type\": \"token_bucket\", \"capacity\": 1, \"per_second\": "
        "0.001}], \"pro\": [{\"type\": \"token_bucket\", \"capacity\": 5, \"per_second\": 0.001}]}}";
    su_start(&s, cfg, manual);
    su_resp r = su_req(&s, "PUT", "/quota/bob", "{\"tier\": \"pro\"}", NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    r = su_req(&s, "POST", "/admin/reload", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    /* pro's 5, not free's 1: 3 fit and 2 are left */
    ck_assert_double_eq(remaining_at(&s, "bob", 3, 100, 0, 200), 2);
    r = su_req(&s, "GET", "/quota/bob", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "pro"), "%s", r.body);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(reload_keeps_state_and_refuses_bad_configs)
{
    su_server s;
    const char *const adm[] = {"Authorization: Bearer adm", NULL};
    su_tmpdir(&s);
    const char *a =
        "{\"admin_token\": \"adm\", \"levels\": ["
        " {\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 10, "
        "\"per_second\": 1}]},"
        " {\"name\": \"team\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 5, "
        "\"per_second\": 1}]}]}";
    su_start(&s, a, manual);
    ck_assert_double_eq(remaining_at(&s, "u", 8, 100, 0, 200), 2);
    su_resp r = su_req(&s, "POST", "/acquire",
                       "{\"keys\": {\"team\": \"t\"}, \"cost\": 3, \"now\": 100}", NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);

    /* user's rule stays, team's changes type, a level ip is new */
    su_write(s.dir, "config.json",
             "{\"admin_token\": \"adm\", \"levels\": ["
             " {\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 10, "
             "\"per_second\": 1}]},"
             " {\"name\": \"team\", \"rules\": [{\"type\": \"fixed_window\", \"limit\": 7, "
             "\"window\": 1000}]},"
             " {\"name\": \"ip\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 1}]}]}");
    kill(s.pid, SIGHUP);
    ck_assert_msg(log_waits_for(&s, "/config.json (levels, tiers, quotas"), "no reload");
    ck_assert_double_eq(remaining_at(&s, "u", 1, 100, 1, 200), 2);
    r = su_req(&s, "POST", "/acquire",
               "{\"keys\": {\"team\": \"t\", \"ip\": \"i\"}, \"dry_run\": true, \"now\": 100}",
               NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "\"level\":\"team\",\"key\":\"t\",\"rule\":\"fixed_window(7, "
                                 "1000s)\",\"limit\":7,\"remaining\":7"),
                  "%s", r.body);
    ck_assert_msg(strstr(r.body, "\"level\":\"ip\""), "%s", r.body);
    su_resp_free(&r);

    /* a configuration that does not load: refused over the endpoint with its error as the
     * body, and over SIGHUP in the log; the one in force stays */
    su_write(s.dir, "config.json",
             "{\"admin_token\": \"adm\", \"levels\": [{\"name\": \"user\", \"rules\": "
             "[{\"type\": \"token_bucket\", \"capacity\": 0, \"per_second\": 1}]}]}");
    r = su_req(&s, "POST", "/admin/reload", NULL, NULL);
    ck_assert_int_eq(r.status, 401);
    su_resp_free(&r);
    r = su_req(&s, "POST", "/admin/reload", NULL, adm);
    ck_assert_int_eq(r.status, 400);
    ck_assert_msg(strncmp(su_error(&r), "levels[0].rules[0].capacity: ", 29) == 0, "%s", r.body);
    su_resp_free(&r);
    kill(s.pid, SIGHUP);
    /* the endpoint's refusal was logged too: wait for the second line */
    int lines = 0;
    for (int i = 0; i < 2000 && lines < 2; i++) {
        char *log = su_read(s.log);
        lines = count_in(log, "error: reload refused, the configuration in force stays: "
                              "levels[0].rules[0].capacity: ");
        free(log);
        usleep(10000);
    }
    ck_assert_int_eq(lines, 2);
    ck_assert_double_eq(remaining_at(&s, "u", 1, 100, 1, 200), 2);
    r = su_req(&s, "GET", "/rules", NULL, NULL);
    ck_assert_msg(strstr(r.body, "\"name\":\"ip\""), "%s", r.body);
    su_resp_free(&r);
    r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_msg(strstr(r.body, "\nratelimit_config_reloads_total{result=\"ok\"} 1\n") &&
                      strstr(r.body, "\nratelimit_config_reloads_total{result=\"error\"} 2\n"),
                  "%s", r.body);
    su_resp_free(&r);

    /* a good file again over the endpoint: in force, the state still there */
    su_write(s.dir, "config.json", a);
    r = su_req(&s, "POST", "/admin/reload", NULL, adm);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"reloaded\":true}");
    su_resp_free(&r);
    ck_assert_double_eq(remaining_at(&s, "u", 1, 101, 1, 200), 3);
    r = su_req(&s, "GET", "/rules", NULL, NULL);
    ck_assert_msg(!strstr(r.body, "\"name\":\"ip\""), "%s", r.body);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

/* A request that must answer status. */
static void expect(const su_server *s, const char *method, const char *path, const char *body,
                   const char *const *headers, long status)
{
    su_resp r = su_req(s, method, path, body, headers);
    ck_assert_msg(r.status == status, "%s %s: %ld %s", method, path, r.status, r.body);
    su_resp_free(&r);
}

/* A reservation id from an acquire with "reserve": true (malloc'd). */
static char *reserve_one(const su_server *s, const char *body)
{
    su_resp r = su_req(s, "POST", "/acquire", body, NULL);
    ck_assert_msg(r.status == 200, "%s", r.body);
    char *id = strdup(su_str(&r, "reservation"));
    su_resp_free(&r);
    return id;
}

/* Every main path of the daemon once, then a graceful stop: it exits 0 and its stderr holds
 * no sanitizer report. In the AddressSanitizer build (make SANITIZE=address,undefined test)
 * LeakSanitizer checks the heap at that exit: whatever a request, a reload, the gRPC server
 * or the snapshot allocated and did not free is reported there and turns the exit status
 * into 23. */
START_TEST(clean_shutdown_frees_everything)
{
    su_server s;
    char body[256];
    const char *const adm[] = {"Authorization: Bearer adm", NULL};
    const char *const flags[] = {"--grpc-port", "0", NULL};
    const char *cfg =
        "{\"admin_token\": \"adm\", \"state_file\": \"var/state.bin\", \"levels\": ["
        " {\"name\": \"user\", \"tiered\": true},"
        " {\"name\": \"job\", \"rules\": [{\"type\": \"concurrency\", \"limit\": 2}]}],"
        " \"tiers\": {\"free\": [{\"type\": \"token_bucket\", \"capacity\": 10, "
        "\"per_second\": 1}], \"pro\": [{\"type\": \"sliding_window\", \"limit\": 5, "
        "\"window\": 1000}, {\"type\": \"gcra\", \"per_second\": 0.001, \"burst\": 6}]},"
        " \"default_tier\": \"free\"}";
    setenv("ASAN_OPTIONS", "detect_leaks=1", 1);
    su_tmpdir(&s);
    su_start(&s, cfg, flags);
    ck_assert_int_gt(s.grpc_port, 0);

    char *id = reserve_one(&s, "{\"keys\": {\"user\": \"alice\", \"job\": \"j\"}, \"cost\": 3, "
                               "\"reserve\": true}");
    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"actual_cost\": 1}", id);
    expect(&s, "POST", "/refund", body, NULL, 200);
    free(id);
    id = reserve_one(&s, "{\"keys\": {\"job\": \"j\"}, \"reserve\": true}");
    snprintf(body, sizeof body, "{\"reservation\": \"%s\"}", id);
    expect(&s, "POST", "/release", body, NULL, 200);
    free(id);
    /* left held, so that the snapshot at the stop carries a reservation */
    free(reserve_one(&s, "{\"keys\": {\"job\": \"k\"}, \"reserve\": true}"));

    expect(&s, "PUT", "/quota/bob", "{\"tier\": \"pro\"}", adm, 200);
    expect(&s, "GET", "/quota/bob", NULL, adm, 200);
    for (int i = 0; i < 7; i++) /* the log of bob's window grows past its first block */
        expect(&s, "POST", "/acquire", "{\"keys\": {\"user\": \"bob\"}}", NULL, i < 5 ? 200 : 429);
    expect(&s, "POST", "/acquire", "{\"keys\": {\"user\": \"bob\"}, \"cost\": -1}", NULL, 400);
    expect(&s, "GET", "/nowhere", NULL, NULL, 404);
    expect(&s, "GET", "/rules", NULL, NULL, 200);
    expect(&s, "GET", "/metrics", NULL, NULL, 200);
    expect(&s, "GET", "/healthz", NULL, NULL, 200);
    /* a reload that loads (the state carried over) and one refused */
    expect(&s, "POST", "/admin/reload", NULL, adm, 200);
    su_write(s.dir, "config.json", "{\"levels\": [{\"name\": \"user\"}], \"tiers\": 3}");
    expect(&s, "POST", "/admin/reload", NULL, adm, 400);
    /* the slot k holds came through the reload: one more fits, not two */
    expect(&s, "POST", "/acquire", "{\"keys\": {\"job\": \"k\"}}", NULL, 200);
    expect(&s, "POST", "/acquire", "{\"keys\": {\"job\": \"k\"}}", NULL, 429);

    ck_assert_int_eq(su_stop(&s), 0);
    char *log = su_read(s.log);
    ck_assert_ptr_nonnull(log);
    ck_assert_msg(!strstr(log, "Sanitizer") && !strstr(log, "runtime error"), "%s", log);
    free(log);
    struct stat st;
    char path[400];
    snprintf(path, sizeof path, "%s/var/state.bin", s.dir);
    ck_assert_int_eq(stat(path, &st), 0);
}
END_TEST

static Suite *hardening_suite(void)
{
    Suite *s = suite_create("hardening");
    TCase *tc = tcase_create("server");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, connections_past_the_limit_are_refused_at_once);
    tcase_add_test(tc, idle_connections_are_closed_after_the_timeout);
    tcase_add_test(tc, default_timeout_keeps_a_quiet_connection);
    tcase_add_test(tc, request_limits);
    tcase_add_test(tc, limit_settings_are_checked);
    tcase_add_test(tc, acquire_token_from_the_config);
    tcase_add_test(tc, tokens_from_a_file_and_the_environment);
    tcase_add_test(tc, bad_token_settings_are_refused);
    tcase_add_test(tc, admin_endpoints_closed_off_loopback);
    tcase_add_test(tc, https_with_a_certificate_made_here);
    tcase_add_test(tc, snapshot_round_trip_with_elapsed_time);
    tcase_add_test(tc, sigkill_loses_at_most_the_interval);
    tcase_add_test(tc, corrupt_snapshot_is_moved_aside_and_counted);
    tcase_add_test(tc, max_keys_answers_503_and_counts);
    tcase_add_test(tc, reload_keeps_state_and_refuses_bad_configs);
    tcase_add_test(tc, clean_shutdown_frees_everything);
    tcase_add_test(tc, reload_moves_denial_counts_with_their_levels);
    tcase_add_test(tc, reload_keeps_quotas_set_at_run_time);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(hardening_suite());
}
