/*
 * test_check.c - GET /check, the decision from request headers for gateways: against the
 * daemon alone (with the manual clock standing at 0, so that every number is exact), and with
 * a real nginx running the shipped site config/nginx/ratelimit.conf in front of an upstream.
 * Expected numbers are worked out by hand in the comments.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "srvutil.h"

#define NGINX_CONF "config/nginx/ratelimit.conf" /* the site the test puts in front */

static const char *const manual[] = {"--manual-clock", NULL};

/* user: 3 tokens, 0.5 a second (6 s from empty to full); api_key: 4 slots of which half are
 * kept for priority 1 and up; global: applies to every request. */
static const char *check_cfg =
    "{\"levels\": ["
    " {\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"per-user\", "
    "\"capacity\": 3, \"per_second\": 0.5}]},"
    " {\"name\": \"api_key\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"key\", "
    "\"capacity\": 4, \"per_second\": 0.001, \"reserved\": {\"fraction\": 0.5, "
    "\"min_priority\": 1}}]},"
    " {\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"fixed_window\", "
    "\"name\": \"g\", \"limit\": 1000, \"window\": 10}]}]}";

static su_resp check(const su_server *s, const char *query, const char *h1, const char *h2)
{
    const char *hs[] = {h1, h2, NULL};
    char path[128];
    snprintf(path, sizeof path, "/check%s", query ? query : "");
    return su_req(s, "GET", path, NULL, hs);
}

static long status_of(const su_server *s, const char *query, const char *h1, const char *h2)
{
    su_resp r = check(s, query, h1, h2);
    long st = r.status;
    su_resp_free(&r);
    return st;
}

START_TEST(check_decides_from_headers)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, check_cfg, manual);

    /* three tokens at t = 0: three allowed, with an empty body and no content type */
    for (int i = 0; i < 3; i++) {
        su_resp r = check(&s, NULL, "X-RateLimit-User: alice", NULL);
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(r.body, "");
        ck_assert_ptr_null(su_header(&r, "Content-Type"));
        ck_assert_ptr_null(su_header(&r, "Retry-After"));
        ck_assert_str_eq(su_header(&r, "RateLimit-Policy"),
                         "\"user.per-user\";q=3;w=6, \"global.g\";q=1000;w=10");
        su_resp_free(&r);
    }
    /* the fourth waits 2 s for one token at 0.5/s; the header's name is case-insensitive */
    su_resp r = check(&s, NULL, "x-ratelimit-USER: alice", NULL);
    ck_assert_int_eq(r.status, 429);
    ck_assert_str_eq(r.body, "");
    ck_assert_str_eq(su_header(&r, "Retry-After"), "2");
    /* the global window holds the three allowed requests: 997 left, 10 s until it rolls */
    ck_assert_str_eq(su_header(&r, "RateLimit"), "\"user.per-user\";r=0;t=2, \"global.g\";r=997;t=10");
    su_resp_free(&r);
    /* the same with deny_status=403, as nginx's auth_request needs it */
    r = check(&s, "?deny_status=403", "X-RateLimit-User: alice", NULL);
    ck_assert_int_eq(r.status, 403);
    ck_assert_str_eq(su_header(&r, "Retry-After"), "2");
    su_resp_free(&r);
    /* another user is not affected */
    ck_assert_int_eq(status_of(&s, NULL, "X-RateLimit-User: bob", NULL), 200);

    /* cost: 2 of carol's 3 tokens, then 2 more do not fit (1 left): 1 token short, 2 s */
    ck_assert_int_eq(status_of(&s, NULL, "X-RateLimit-User: carol", "X-RateLimit-Cost: 2"), 200);
    r = check(&s, NULL, "X-RateLimit-User: carol", "X-RateLimit-Cost: 2");
    ck_assert_int_eq(r.status, 429);
    ck_assert_str_eq(su_header(&r, "Retry-After"), "2");
    su_resp_free(&r);
    /* the remaining token still fits a cost of 0.5 (a decimal amount) */
    ck_assert_int_eq(status_of(&s, NULL, "X-RateLimit-User: carol", "X-RateLimit-Cost: 0.5"),
                     200);
    /* a cost beyond the capacity never fits: denied without Retry-After */
    r = check(&s, NULL, "X-RateLimit-User: dave", "X-RateLimit-Cost: 4");
    ck_assert_int_eq(r.status, 429);
    ck_assert_ptr_null(su_header(&r, "Retry-After"));
    su_resp_free(&r);

    /* priority and a descriptor with '_': X-RateLimit-Api-Key is api_key. Priority 0 may use
     * 2 of the 4 slots, priority 1 all of them. */
    ck_assert_int_eq(status_of(&s, NULL, "X-RateLimit-Api-Key: k1", NULL), 200);
    ck_assert_int_eq(status_of(&s, NULL, "X-RateLimit-Api-Key: k1", NULL), 200);
    ck_assert_int_eq(status_of(&s, NULL, "X-RateLimit-Api-Key: k1", NULL), 429);
    ck_assert_int_eq(status_of(&s, NULL, "X-RateLimit-Api-Key: k1", "X-RateLimit-Priority: 1"),
                     200);
    /* no descriptor at all: only the global level applies */
    ck_assert_int_eq(status_of(&s, NULL, NULL, NULL), 200);

    /* /metrics counts /check's decisions like /acquire's: alice (2), carol, dave, k1 denied */
    r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_ptr_nonnull(strstr(r.body, "ratelimit_acquire_total{decision=\"denied\"} 5\n"));
    ck_assert_ptr_nonnull(
        strstr(r.body, "ratelimit_denied_total{level=\"user\",rule=\"per-user\"} 4\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "ratelimit_http_requests_total{endpoint=\"/check\""));
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

/* Each bad request: the header (or argument) it names, and nothing is taken. */
static const struct {
    const char *query, *h1, *h2, *error;
} bad[] = {
    {NULL, "X-RateLimit-Usr: alice", NULL,
     "X-RateLimit-Usr: unknown descriptor (levels use: user, api_key, global)"},
    {NULL, "X-RateLimit-User: alice", "X-RateLimit-Cost: 0",
     "X-RateLimit-Cost: must be a positive number from 0.000001 to 1000000000000 (at most 6 "
     "decimals)"},
    {NULL, "X-RateLimit-User: alice", "X-RateLimit-Cost: 1.0000001",
     "X-RateLimit-Cost: must be a positive number from 0.000001 to 1000000000000 (at most 6 "
     "decimals)"},
    {NULL, "X-RateLimit-User: alice", "X-RateLimit-Cost: 2x",
     "X-RateLimit-Cost: must be a positive number from 0.000001 to 1000000000000 (at most 6 "
     "decimals)"},
    {NULL, "X-RateLimit-User: alice", "X-RateLimit-Priority: high",
     "X-RateLimit-Priority: must be a whole number"},
    {NULL, "X-RateLimit-User: alice", "X-RateLimit-user: bob", "X-RateLimit-user: given twice"},
    {NULL, "X-RateLimit-User;", NULL, "X-RateLimit-user: must not be empty"},
    {"?deny_status=200", "X-RateLimit-User: alice", NULL,
     "deny_status: must be a status code from 400 to 499"},
    {"?deny_status=", "X-RateLimit-User: alice", NULL,
     "deny_status: must be a status code from 400 to 499"},
};

START_TEST(check_refuses_bad_headers)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, check_cfg, manual);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        su_resp r = check(&s, bad[i].query, bad[i].h1, bad[i].h2);
        ck_assert_msg(r.status == 400, "case %zu: status %ld, body %s", i, r.status, r.body);
        ck_assert_str_eq(su_error(&r), bad[i].error);
        su_resp_free(&r);
    }
    /* none of them took anything: alice still has her three tokens */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(status_of(&s, NULL, "X-RateLimit-User: alice", NULL), 200);
    ck_assert_int_eq(status_of(&s, NULL, "X-RateLimit-User: alice", NULL), 429);
    /* only GET */
    su_resp r = su_req(&s, "POST", "/check", "", NULL);
    ck_assert_int_eq(r.status, 405);
    ck_assert_str_eq(su_header(&r, "Allow"), "GET");
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

/* ---- nginx in front ----------------------------------------------------------------------- */

typedef struct nginx {
    pid_t pid;
    char dir[256];
    int port;     /* the site */
    int upstream; /* the application behind it */
} nginx;

/* Starts Debian's nginx (daemon off, its own prefix and temp folders) with the shipped site in
 * front of ratelimitd on rld_port and an upstream that answers "upstream <X-User>". */
static void nginx_start(nginx *n, int rld_port)
{
    su_server tmp;
    char from[64], to[64], path[400], *site = su_read(NGINX_CONF);
    ck_assert_msg(site != NULL, "config/nginx/ratelimit.conf (tests run from the repository)");
    su_tmpdir(&tmp);
    snprintf(n->dir, sizeof n->dir, "%s", tmp.dir);
    n->port = su_free_port();
    n->upstream = su_free_port();
    snprintf(to, sizeof to, "server 127.0.0.1:%d;", rld_port);
    site = su_replace_once(site, "server 127.0.0.1:8080;", to, NGINX_CONF);
    snprintf(to, sizeof to, "server 127.0.0.1:%d;", n->upstream);
    site = su_replace_once(site, "server 127.0.0.1:3000;", to, NGINX_CONF);
    snprintf(from, sizeof from, "listen 8000;");
    snprintf(to, sizeof to, "listen 127.0.0.1:%d;", n->port);
    site = su_replace_once(site, from, to, NGINX_CONF);
    su_write(n->dir, "ratelimit.conf", site);
    free(site);

    char conf[4096];
    snprintf(conf, sizeof conf,
             "%s" /* as root, nginx's workers run as root too: the temp folders are root's */
             "daemon off;\nworker_processes 1;\npid %s/nginx.pid;\nerror_log %s/error.log info;\n"
             "events { worker_connections 256; }\n"
             "http {\n  access_log off;\n"
             "  client_body_temp_path %s/body;\n  proxy_temp_path %s/proxy;\n"
             "  fastcgi_temp_path %s/fastcgi;\n  uwsgi_temp_path %s/uwsgi;\n"
             "  scgi_temp_path %s/scgi;\n"
             "  include %s/ratelimit.conf;\n"
             "  server {\n    listen 127.0.0.1:%d;\n    default_type text/plain;\n"
             "    location / { return 200 \"upstream $http_x_user\\n\"; }\n  }\n}\n",
             getuid() == 0 ? "user root;\n" : "", n->dir, n->dir, n->dir, n->dir, n->dir, n->dir,
             n->dir, n->dir, n->upstream);
    su_write(n->dir, "nginx.conf", conf);
    snprintf(path, sizeof path, "%s/nginx.conf", n->dir);

    fflush(NULL);
    n->pid = fork();
    ck_assert_int_ge(n->pid, 0);
    if (n->pid == 0) {
        char errlog[300];
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        snprintf(errlog, sizeof errlog, "%s/error.log", n->dir);
        execlp("nginx", "nginx", "-p", n->dir, "-c", path, "-e", errlog, (char *)NULL);
        execl("/usr/sbin/nginx", "nginx", "-p", n->dir, "-c", path, "-e", errlog, (char *)NULL);
        _exit(127);
    }
    /* up when the site answers */
    for (int i = 0; i < 200; i++) {
        int st;
        if (waitpid(n->pid, &st, WNOHANG) == n->pid) {
            snprintf(path, sizeof path, "%s/error.log", n->dir);
            char *log = su_read(path);
            ck_abort_msg("nginx did not start (is it installed? make deps): %s",
                         log ? log : "(no error.log)");
        }
        if (su_port_accepts(n->port))
            return;
        const struct timespec pause = {0, 50000000};
        nanosleep(&pause, NULL);
    }
    ck_abort_msg("nginx did not listen on port %d within 10 s", n->port);
}

static void nginx_stop(nginx *n)
{
    int st;
    kill(n->pid, SIGQUIT);
    while (waitpid(n->pid, &st, 0) < 0 && errno == EINTR)
        ;
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nginx exited with %d", st);
}

static su_resp via_nginx(const nginx *n, const char *h1)
{
    su_server front = {.port = n->port};
    const char *hs[] = {h1, NULL};
    return su_req(&front, "GET", "/some/page", NULL, hs);
}

START_TEST(nginx_site_limits_users)
{
    su_server s;
    nginx n;
    su_tmpdir(&s);
    /* the real clock: 3 tokens refilling at 0.001/s, so nothing comes back during the test */
    su_start(&s,
             "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", "
             "\"name\": \"per-user\", \"capacity\": 3, \"per_second\": 0.001}]},"
             " {\"name\": \"team\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"team\", "
             "\"capacity\": 100, \"per_second\": 0.001}]}]}",
             NULL);
    nginx_start(&n, s.port);

    /* within alice's limit: the upstream answers, with the RateLimit headers added */
    for (int i = 0; i < 3; i++) {
        su_resp r = via_nginx(&n, "X-User: alice");
        ck_assert_msg(r.status == 200, "request %d: %ld %s", i, r.status, r.body);
        ck_assert_str_eq(r.body, "upstream alice\n");
        char want[64];
        snprintf(want, sizeof want, "\"user.per-user\";r=%d;", 2 - i);
        ck_assert_ptr_nonnull(strstr(su_header(&r, "RateLimit"), want));
        ck_assert_str_eq(su_header(&r, "RateLimit-Policy"), "\"user.per-user\";q=3;w=3000");
        su_resp_free(&r);
    }
    /* past it: nginx answers 429 itself. One token at 0.001/s is 1000 s away, less the few
     * milliseconds since the first request: rounded up, 1000. */
    su_resp r = via_nginx(&n, "X-User: alice");
    ck_assert_int_eq(r.status, 429);
    ck_assert_str_eq(r.body, "rate limited\n");
    ck_assert_str_eq(su_header(&r, "Retry-After"), "1000");
    ck_assert_str_eq(su_header(&r, "RateLimit"), "\"user.per-user\";r=0;t=1000");
    ck_assert_str_eq(su_header(&r, "RateLimit-Policy"), "\"user.per-user\";q=3;w=3000");
    su_resp_free(&r);

    /* bob has his own tokens, and the team header is passed on: team acme's level applies */
    r = via_nginx(&n, "X-User: bob");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "upstream bob\n");
    su_resp_free(&r);
    su_server front = {.port = n.port};
    const char *team[] = {"X-User: bob", "X-Team: acme", NULL};
    r = su_req(&front, "GET", "/", NULL, team);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(su_header(&r, "RateLimit"), "\"team.team\";r=99;"));
    su_resp_free(&r);

    /* a client without X-User is limited by its address (127.0.0.1), and its own
     * X-RateLimit-* headers do not reach ratelimitd */
    for (int i = 0; i < 3; i++) {
        r = via_nginx(&n, "X-RateLimit-User: someone-else");
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(r.body, "upstream \n");
        su_resp_free(&r);
    }
    r = via_nginx(&n, NULL);
    ck_assert_int_eq(r.status, 429);
    ck_assert_str_eq(su_header(&r, "Retry-After"), "1000");
    su_resp_free(&r);

    /* ratelimitd saw exactly these 10 decisions, 2 of them denied (the upstream's answers above
     * show which reached it) */
    r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_ptr_nonnull(strstr(r.body, "ratelimit_acquire_total{decision=\"allowed\"} 8\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "ratelimit_acquire_total{decision=\"denied\"} 2\n"));
    su_resp_free(&r);
    nginx_stop(&n);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

static Suite *check_suite(void)
{
    Suite *s = suite_create("check");
    TCase *tc = tcase_create("daemon");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, check_decides_from_headers);
    tcase_add_test(tc, check_refuses_bad_headers);
    suite_add_tcase(s, tc);
    tc = tcase_create("nginx");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, nginx_site_limits_users);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(check_suite());
}
