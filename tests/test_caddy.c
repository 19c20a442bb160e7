/*
 * test_caddy.c - the shipped config/caddy/Caddyfile in a real Caddy (Debian's caddy) in front
 * of an upstream, as test_check.c runs nginx: forward_auth asks ratelimitd's GET /check with
 * the client's headers mapped to descriptors; an allowed request reaches the upstream with the
 * RateLimit headers added to its answer, a denied one gets 429 with Retry-After and the
 * RateLimit headers and never reaches it. The upstream is a small server in this process, so
 * that the test counts what reached it and sees the headers it got.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "srvutil.h"

#define CADDY "/usr/bin/caddy"
#define CADDYFILE "config/caddy/Caddyfile" /* the site the test puts in front */

/* ---- the upstream: answers "upstream <X-User>\n" and keeps what it saw --------------------- */

typedef struct upstream {
    int fd;
    int port;
    pthread_t thread;
    pthread_mutex_t mu;
    int requests;    /* requests answered */
    char last[4096]; /* the head of the last one */
} upstream;

/* The value of header name in a request head (case-insensitive), "" when absent. */
static void head_value(const char *head, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    out[0] = '\0';
    for (const char *line = strstr(head, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
        const char *l = line + 2;
        if (strncasecmp(l, name, n) == 0 && l[n] == ':') {
            const char *v = l + n + 1, *end = strstr(v, "\r\n");
            while (*v == ' ')
                v++;
            size_t vl = end ? (size_t)(end - v) : strlen(v);
            snprintf(out, cap, "%.*s", (int)(vl < cap ? vl : cap - 1), v);
            return;
        }
    }
}

static void *upstream_serve(void *arg)
{
    upstream *u = arg;
    for (;;) {
        int c = accept(u->fd, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL; /* the listening socket was shut down */
        }
        char head[4096], user[256], reply[512];
        size_t len = 0;
        ssize_t r;
        head[0] = '\0';
        while (len < sizeof head - 1 && !strstr(head, "\r\n\r\n") &&
               (r = read(c, head + len, sizeof head - 1 - len)) > 0) {
            len += (size_t)r;
            head[len] = '\0';
        }
        head_value(head, "X-User", user, sizeof user);
        char body[300];
        int bl = snprintf(body, sizeof body, "upstream %s\n", user);
        int rl = snprintf(reply, sizeof reply,
                          "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                          "Connection: close\r\n\r\n%s",
                          bl, body);
        pthread_mutex_lock(&u->mu);
        u->requests++;
        snprintf(u->last, sizeof u->last, "%s", head);
        pthread_mutex_unlock(&u->mu);
        for (int off = 0; off < rl && (r = write(c, reply + off, (size_t)(rl - off))) > 0;)
            off += (int)r;
        close(c);
    }
}

static void upstream_start(upstream *u)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof sa;
    memset(u, 0, sizeof *u);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    u->fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(u->fd, 0);
    ck_assert_int_eq(bind(u->fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(u->fd, 64), 0);
    ck_assert_int_eq(getsockname(u->fd, (struct sockaddr *)&sa, &sl), 0);
    u->port = ntohs(sa.sin_port);
    pthread_mutex_init(&u->mu, NULL);
    ck_assert_int_eq(pthread_create(&u->thread, NULL, upstream_serve, u), 0);
}

static void upstream_stop(upstream *u)
{
    shutdown(u->fd, SHUT_RDWR);
    pthread_join(u->thread, NULL);
    close(u->fd);
    pthread_mutex_destroy(&u->mu);
}

/* Requests the upstream answered so far; the last one's head into last (may be NULL). */
static int upstream_seen(upstream *u, char *last, size_t cap)
{
    pthread_mutex_lock(&u->mu);
    int n = u->requests;
    if (last)
        snprintf(last, cap, "%s", u->last);
    pthread_mutex_unlock(&u->mu);
    return n;
}

/* ---- Caddy ---------------------------------------------------------------------------------- */

typedef struct caddy {
    pid_t pid;
    char dir[256];
    int port; /* the site */
} caddy;

/* Starts Debian's caddy with the shipped site in front of ratelimitd on rld_port and the
 * upstream on up_port: no admin endpoint, no automatic HTTPS, its storage, HOME and XDG
 * folders in a temporary directory, its log in dir/caddy.log. */
static void caddy_start(caddy *c, int rld_port, int up_port)
{
    su_server tmp;
    char to[128], path[400], conf[1024];
    char *site = su_read(CADDYFILE);
    ck_assert_msg(site != NULL, "config/caddy/Caddyfile (tests run from the repository)");
    su_tmpdir(&tmp);
    snprintf(c->dir, sizeof c->dir, "%s", tmp.dir);
    c->port = su_free_port();
    snprintf(to, sizeof to, "forward_auth 127.0.0.1:%d {", rld_port);
    site = su_replace_once(site, "forward_auth 127.0.0.1:8080 {", to, CADDYFILE);
    snprintf(to, sizeof to, "reverse_proxy 127.0.0.1:%d\n", up_port);
    site = su_replace_once(site, "reverse_proxy 127.0.0.1:3000\n", to, CADDYFILE);
    snprintf(to, sizeof to, "http://:%d {\n\tbind 127.0.0.1\n", c->port);
    site = su_replace_once(site, "http://:8000 {\n", to, CADDYFILE);
    su_write(c->dir, "site.caddy", site);
    free(site);
    snprintf(conf, sizeof conf,
             "{\n\tadmin off\n\tauto_https off\n"
             "\tstorage file_system %s/storage\n}\n\nimport %s/site.caddy\n",
             c->dir, c->dir);
    snprintf(path, sizeof path, "%s", su_write(c->dir, "Caddyfile", conf));

    fflush(NULL);
    c->pid = fork();
    ck_assert_int_ge(c->pid, 0);
    if (c->pid == 0) {
        char log[300], env[3][320];
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        snprintf(log, sizeof log, "%s/caddy.log", c->dir);
        if (!freopen(log, "w", stderr) || !freopen(log, "a", stdout))
            _exit(126);
        snprintf(env[0], sizeof env[0], "%s", c->dir);
        snprintf(env[1], sizeof env[1], "%s/config", c->dir);
        snprintf(env[2], sizeof env[2], "%s/data", c->dir);
        setenv("HOME", env[0], 1);
        setenv("XDG_CONFIG_HOME", env[1], 1);
        setenv("XDG_DATA_HOME", env[2], 1);
        execl(CADDY, "caddy", "run", "--config", path, "--adapter", "caddyfile", (char *)NULL);
        _exit(127);
    }
    /* up when the site answers */
    for (int i = 0; i < 200; i++) {
        int st;
        if (waitpid(c->pid, &st, WNOHANG) == c->pid) {
            snprintf(path, sizeof path, "%s/caddy.log", c->dir);
            char *log = su_read(path);
            ck_abort_msg("caddy did not start (exit %d; is it installed? make deps): %s",
                         WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st),
                         log ? log : "(no log)");
        }
        if (su_port_accepts(c->port))
            return;
        const struct timespec pause = {0, 50000000};
        nanosleep(&pause, NULL);
    }
    ck_abort_msg("caddy did not listen on port %d within 10 s", c->port);
}

/* SIGTERM: Caddy stops its servers and exits 0. */
static void caddy_stop(caddy *c)
{
    int st;
    kill(c->pid, SIGTERM);
    while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
        ;
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "caddy exited with %d", st);
}

static su_resp via_caddy(const caddy *c, const char *h1, const char *h2)
{
    su_server front = {.port = c->port};
    const char *hs[] = {h1, h2, NULL};
    return su_req(&front, "GET", "/some/page", NULL, hs);
}

/* The shipped file as it is: Caddy's own adapter reads it without an error. */
START_TEST(caddyfile_adapts)
{
    const char *argv[] = {CADDY, "adapt", "--config", CADDYFILE, "--adapter", "caddyfile", NULL};
    char *out = NULL;
    int rc = su_run(argv, &out);
    ck_assert_msg(rc != 127, "caddy is missing (make deps installs Debian's caddy)");
    ck_assert_msg(rc == 0, "caddy adapt: exit %d: %s", rc, out ? out : "");
    /* the three addresses the test replaces are in the adapted configuration */
    ck_assert_ptr_nonnull(strstr(out, "127.0.0.1:8080"));
    ck_assert_ptr_nonnull(strstr(out, "127.0.0.1:3000"));
    ck_assert_ptr_nonnull(strstr(out, ":8000"));
    free(out);
}
END_TEST

START_TEST(caddy_site_limits_users)
{
    su_server s;
    upstream up;
    caddy c;
    char last[4096];
    su_tmpdir(&s);
    /* the real clock: 3 tokens refilling at 0.001/s, so nothing comes back during the test */
    su_start(&s,
             "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", "
             "\"name\": \"per-user\", \"capacity\": 3, \"per_second\": 0.001}]},"
             " {\"name\": \"team\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"team\", "
             "\"capacity\": 100, \"per_second\": 0.001}]}]}",
             NULL);
    upstream_start(&up);
    caddy_start(&c, s.port, up.port);

    /* within alice's limit: the upstream answers, with the RateLimit headers added; it sees
     * the client's headers but neither the descriptors nor the limits */
    for (int i = 0; i < 3; i++) {
        su_resp r = via_caddy(&c, "X-User: alice", NULL);
        ck_assert_msg(r.status == 200, "request %d: %ld %s", i, r.status, r.body);
        ck_assert_str_eq(r.body, "upstream alice\n");
        char want[64];
        snprintf(want, sizeof want, "\"user.per-user\";r=%d;", 2 - i);
        ck_assert_ptr_nonnull(su_header(&r, "RateLimit"));
        ck_assert_ptr_nonnull(strstr(su_header(&r, "RateLimit"), want));
        ck_assert_str_eq(su_header(&r, "RateLimit-Policy"), "\"user.per-user\";q=3;w=3000");
        su_resp_free(&r);
    }
    ck_assert_int_eq(upstream_seen(&up, last, sizeof last), 3);
    ck_assert_ptr_nonnull(strcasestr(last, "\r\nX-User: alice\r\n"));
    ck_assert_msg(!strcasestr(last, "\r\nX-RateLimit-") && !strcasestr(last, "\r\nRateLimit"),
                  "the upstream got ratelimitd's headers: %s", last);

    /* past it: ratelimitd's own 429 comes back through Caddy, with an empty body. One token
     * at 0.001/s is 1000 s away, less the few milliseconds since the first request: rounded
     * up, 1000. The upstream never sees it. */
    su_resp r = via_caddy(&c, "X-User: alice", NULL);
    ck_assert_int_eq(r.status, 429);
    ck_assert_str_eq(r.body, "");
    ck_assert_ptr_nonnull(su_header(&r, "Retry-After"));
    ck_assert_str_eq(su_header(&r, "Retry-After"), "1000");
    ck_assert_str_eq(su_header(&r, "RateLimit"), "\"user.per-user\";r=0;t=1000");
    ck_assert_str_eq(su_header(&r, "RateLimit-Policy"), "\"user.per-user\";q=3;w=3000");
    su_resp_free(&r);
    ck_assert_int_eq(upstream_seen(&up, NULL, 0), 3);

    /* bob has his own tokens, and the team header is passed on: team acme's level applies */
    r = via_caddy(&c, "X-User: bob", NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "upstream bob\n");
    su_resp_free(&r);
    r = via_caddy(&c, "X-User: bob", "X-Team: acme");
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(su_header(&r, "RateLimit"), "\"team.team\";r=99;"));
    su_resp_free(&r);

    /* a client without X-User is limited by its address (127.0.0.1), and its own X-RateLimit-*
     * headers do not reach ratelimitd: a cost of 3 would take all three tokens at once */
    for (int i = 0; i < 3; i++) {
        r = via_caddy(&c, "X-RateLimit-User: someone-else", "X-RateLimit-Cost: 3");
        ck_assert_msg(r.status == 200, "request %d: %ld %s", i, r.status, r.body);
        ck_assert_str_eq(r.body, "upstream \n");
        su_resp_free(&r);
    }
    r = via_caddy(&c, NULL, NULL);
    ck_assert_int_eq(r.status, 429);
    ck_assert_str_eq(su_header(&r, "Retry-After"), "1000");
    su_resp_free(&r);
    ck_assert_int_eq(upstream_seen(&up, last, sizeof last), 8);
    ck_assert_msg(!strcasestr(last, "\r\nX-RateLimit-"), "the upstream got: %s", last);

    /* ratelimitd saw exactly these 10 decisions, 2 of them denied; the upstream the 8 others */
    r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_ptr_nonnull(strstr(r.body, "ratelimit_acquire_total{decision=\"allowed\"} 8\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "ratelimit_acquire_total{decision=\"denied\"} 2\n"));
    su_resp_free(&r);

    /* ratelimitd gone: Caddy answers 502 and the upstream is not asked (failing closed) */
    ck_assert_int_eq(su_stop(&s), 0);
    r = via_caddy(&c, "X-User: carol", NULL);
    ck_assert_int_eq(r.status, 502);
    su_resp_free(&r);
    ck_assert_int_eq(upstream_seen(&up, NULL, 0), 8);

    caddy_stop(&c);
    upstream_stop(&up);
}
END_TEST

static Suite *caddy_suite(void)
{
    Suite *s = suite_create("caddy");
    TCase *tc = tcase_create("caddy");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, caddyfile_adapts);
    tcase_add_test(tc, caddy_site_limits_users);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(caddy_suite());
}
