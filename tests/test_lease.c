/*
 * test_lease.c - leased levels (redis.md, "Hot keys: leases") with four real ratelimitd
 * processes on one redis-server: a global level (default_key "*") whose one token bucket holds
 * 1,000 and refills 1 every 100 s, leased in slices of 100. Requests from four clients at once,
 * more than the bucket holds: the admissions never exceed it, and the global key's state is
 * named by at most one Redis call per 50 decisions (counted with MONITOR); a lease's unspent
 * part goes back to the bucket when its instance gets SIGTERM; a request denied by another
 * level takes nothing from the lease; an idle lease goes back when due. Expected numbers are worked
 * out by hand in the comments.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "srvutil.h"

#define N 4       /* instances */
#define SLICE 100 /* a lease's slice */
#define CAPACITY 1000
#define GLOBAL "{\"keys\": {}}"

/* The global level, leased (lease 1) or not, on prefix. The rule refills 0.01 a second: over
 * a test of a minute at most 1 token more than the 1,000 it starts with. */
static void config_of(char *buf, size_t cap, const rt_redis *r, const char *prefix, int lease)
{
    snprintf(buf, cap,
             "{\"store\": {\"type\": \"redis\", \"url\": \"%s\", \"prefix\": \"%s\", "
             "\"timeout_ms\": 2000}, \"levels\": [{\"name\": \"global\", \"default_key\": \"*\", "
             "\"on_store_error\": \"closed\"%s, \"rules\": [{\"type\": \"token_bucket\", "
             "\"name\": \"all\", \"capacity\": %d, \"per_second\": 0.01}]}]}",
             r->url, prefix, lease ? ", \"lease\": {\"slice\": 100, \"ttl_ms\": 60000}" : "",
             CAPACITY);
}

static void start_fleet(su_server s[N], const rt_redis *r, const char *prefix)
{
    char config[1024];
    config_of(config, sizeof config, r, prefix, 1);
    for (int i = 0; i < N; i++) {
        su_tmpdir(&s[i]);
        su_start(&s[i], config, NULL);
    }
}

/* The value of one sample line of /metrics ("name{labels}" exactly); fails when absent. */
static double metric(const su_server *s, const char *series)
{
    su_resp r = su_req(s, "GET", "/metrics", NULL, NULL);
    char want[300];
    snprintf(want, sizeof want, "\n%s ", series);
    const char *p = strstr(r.body, want);
    ck_assert_msg(p != NULL, "no %s in /metrics", series);
    double v = atof(p + strlen(want));
    su_resp_free(&r);
    return v;
}

#define HELD "ratelimit_lease_held{level=\"global\"}"
#define SAVED "ratelimit_lease_saved_total{level=\"global\"}"
#define RETURNED "ratelimit_lease_returned_total{level=\"global\"}"

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- MONITOR through redis-cli, into a file ------------------------------------------------ */

typedef struct monitor {
    pid_t pid;
    char path[96];
} monitor;

static void monitor_start(monitor *m, const rt_redis *r)
{
    snprintf(m->path, sizeof m->path, "%s/monitor.txt", r->dir);
    m->pid = fork();
    ck_assert_int_ge(m->pid, 0);
    if (m->pid == 0) {
        FILE *f = freopen(m->path, "w", stdout);
        if (!f)
            _exit(126);
        execlp("redis-cli", "redis-cli", "-u", r->url, "monitor", (char *)NULL);
        _exit(127);
    }
    /* MONITOR is in force once redis-cli printed OK */
    for (int i = 0;; i++) {
        ck_assert_msg(i < 500, "redis-cli monitor did not start");
        FILE *f = fopen(m->path, "r");
        char line[16] = "";
        if (f) {
            if (!fgets(line, sizeof line, f))
                line[0] = '\0';
            fclose(f);
        }
        if (strncmp(line, "OK", 2) == 0)
            break;
        usleep(10000);
    }
}

/* Stops it and counts the calls it saw from clients that name key (quoted as MONITOR quotes
 * it); the commands a script runs are shown too, from "lua": not counted. */
static long monitor_count(monitor *m, const char *key)
{
    usleep(200000); /* what Redis sent last */
    kill(m->pid, SIGTERM);
    waitpid(m->pid, NULL, 0);
    FILE *f = fopen(m->path, "r");
    ck_assert_ptr_nonnull(f);
    char want[128], line[8192];
    snprintf(want, sizeof want, "\"%s\"", key);
    long n = 0;
    int shown = 0;
    while (fgets(line, sizeof line, f)) {
        n += strstr(line, want) && !strstr(line, " lua]"); /* a script's own commands */
        if (getenv("LEASE_SHOW") && shown++ < 100000)
            fprintf(stderr, "%.300s", line);
    }
    fclose(f);
    return n;
}

/* ---- clients ----------------------------------------------------------------------------------
 */

typedef struct client {
    const su_server *s;
    int requests;
    int allowed, denied, other;
} client;

static void *client_run(void *arg)
{
    client *c = arg;
    for (int i = 0; i < c->requests; i++) {
        su_resp a = su_req(c->s, "POST", "/acquire", GLOBAL, NULL);
        if (a.status == 200)
            c->allowed++;
        else if (a.status == 429)
            c->denied++;
        else
            c->other++;
        su_resp_free(&a);
    }
    return NULL;
}

/* Each of the four instances asked `requests` times at once; the admissions. */
static int flood(su_server s[N], int requests, client c[N])
{
    pthread_t t[N];
    int allowed = 0;
    for (int i = 0; i < N; i++) {
        c[i] = (client){.s = &s[i], .requests = requests};
        ck_assert_int_eq(pthread_create(&t[i], NULL, client_run, &c[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        ck_assert_msg(c[i].other == 0, "instance %d: %d answers neither 200 nor 429", i,
                      c[i].other);
        allowed += c[i].allowed;
    }
    return allowed;
}

/* remaining of the one rule in an answer to /acquire */
static double remaining(const su_resp *a)
{
    return json_number_value(
        json_object_get(json_array_get(json_object_get(a->json, "limits"), 0), "remaining"));
}

/* ---- the tests -------------------------------------------------------------------------------
 */

/* 4 x 600 = 2,400 decisions against a bucket of 1,000 (and at most 1 refilled): by hand, at
 * most 1,001 admitted; the admissions and what sits unspent in the four leases at the end (at
 * most a slice each) make up the whole bucket: 1,000 or 1,001. Calls naming the global key: 9
 * slices of 100 beside a request's 1 (909), then one refused and taken again as the 90 left
 * beside the request; then per instance a slice refused, the decision made again without it
 * and the denial it caches (retry_after 100 s, longer than the test): about 11 + 4 x 3 = 23,
 * at most 2,400 / 50 = 48. */
START_TEST(admissions_within_the_limit_and_one_call_per_50_decisions)
{
    rt_redis r;
    rt_redis_start(&r);
    su_server s[N];
    client c[N];
    start_fleet(s, &r, "lease:");
    monitor m;
    monitor_start(&m, &r);
    int allowed = flood(s, 600, c);
    long calls = monitor_count(&m, "lease:global:0:*");
    double held = 0, saved = 0;
    for (int i = 0; i < N; i++) {
        held += metric(&s[i], HELD);
        saved += metric(&s[i], SAVED);
        fprintf(stderr, "instance %d: %d admitted, %d denied, %.0f held\n", i, c[i].allowed,
                c[i].denied, metric(&s[i], HELD));
    }
    fprintf(stderr,
            "%d admitted of %d decisions; %.0f unspent in leases; %.0f admitted without "
            "a call; %ld calls named the global key (1 per %.0f decisions)\n",
            allowed, N * 600, held, saved, calls, (double)(N * 600) / (double)(calls ? calls : 1));
    ck_assert_msg(allowed <= CAPACITY + 1, "%d admitted, more than the bucket holds", allowed);
    ck_assert_msg(allowed + held >= CAPACITY && allowed + held <= CAPACITY + 1,
                  "%d admitted and %.0f unspent: the bucket's %d are not all accounted for",
                  allowed, held, CAPACITY);
    ck_assert_msg(held <= N * SLICE, "%.0f held, more than 4 slices", held);
    ck_assert_msg(calls >= CAPACITY / SLICE, "only %ld calls named the global key", calls);
    ck_assert_msg(calls * 50 <= N * 600, "%ld calls named the global key for %d decisions", calls,
                  N * 600);
    for (int i = 0; i < N; i++)
        ck_assert_msg(su_stop(&s[i]) == 0, "ratelimitd %d did not exit 0", i);
    rt_redis_stop(&r);
}
END_TEST

/* 30 requests on each instance: the first takes its cost and a slice of 100 beside it, the
 * other 29 come from the slice, so the bucket has 1,000 - 4 x 101 = 596 and each lease 71
 * unspent. A fifth instance without a lease takes 1 (remaining 595). After SIGTERM to the four,
 * their 4 x 71 = 284 are back: 1,000 - 120 - 1 - 1 = 878 after the fifth's next request (and at
 * most 1 refilled: below 879). */
START_TEST(leases_come_back_on_sigterm)
{
    rt_redis r;
    rt_redis_start(&r);
    su_server s[N], plain;
    client c[N];
    char config[1024];
    start_fleet(s, &r, "back:");
    config_of(config, sizeof config, &r, "back:", 0);
    su_tmpdir(&plain);
    su_start(&plain, config, NULL);
    ck_assert_int_eq(flood(s, 30, c), 4 * 30);
    for (int i = 0; i < N; i++)
        ck_assert_double_eq(metric(&s[i], HELD), SLICE - 29);
    su_resp a = su_req(&plain, "POST", "/acquire", GLOBAL, NULL);
    ck_assert_int_eq(a.status, 200);
    double left = remaining(&a);
    su_resp_free(&a);
    ck_assert_msg(left >= 595 && left < 596, "remaining %g before SIGTERM, not 595", left);
    for (int i = 0; i < N; i++)
        ck_assert_msg(su_stop(&s[i]) == 0, "ratelimitd %d did not exit 0", i);
    a = su_req(&plain, "POST", "/acquire", GLOBAL, NULL);
    ck_assert_int_eq(a.status, 200);
    left = remaining(&a);
    su_resp_free(&a);
    fprintf(stderr, "remaining %g after the four leases came back\n", left);
    ck_assert_msg(left >= 878 && left < 879, "remaining %g after SIGTERM, not 878", left);
    ck_assert_msg(su_stop(&plain) == 0, "the fifth ratelimitd did not exit 0");
    rt_redis_stop(&r);
}
END_TEST

/* One instance, the global level leased (ttl_ms 300) above a level "user" whose bucket holds 2
 * and refills 0.01 a second. Five requests of alice: the first takes its cost and a slice of
 * 100 (held 100), the second comes from the lease (99); the other three are denied by "user",
 * so what they took from the lease goes back to it: still 99, 1 admitted without a call for
 * the global level. 0.3 s later the lease is due and goes back, idle: held 0, 99 returned. */
START_TEST(denied_elsewhere_takes_nothing_from_the_lease_and_an_idle_lease_goes_back)
{
    rt_redis r;
    rt_redis_start(&r);
    su_server s;
    char config[1024];
    snprintf(config, sizeof config,
             "{\"store\": {\"type\": \"redis\", \"url\": \"%s\", \"timeout_ms\": 2000}, "
             "\"levels\": [{\"name\": \"global\", \"default_key\": \"*\", \"lease\": "
             "{\"slice\": 100, \"ttl_ms\": 300}, \"rules\": [{\"type\": \"token_bucket\", "
             "\"capacity\": 1000, \"per_second\": 0.01}]}, {\"name\": \"user\", \"rules\": "
             "[{\"type\": \"token_bucket\", \"capacity\": 2, \"per_second\": 0.01}]}]}",
             r.url);
    su_tmpdir(&s);
    su_start(&s, config, NULL);
    int allowed = 0;
    for (int i = 0; i < 5; i++) {
        su_resp a = su_req(&s, "POST", "/acquire", "{\"keys\": {\"user\": \"alice\"}}", NULL);
        ck_assert_msg(a.status == 200 || a.status == 429, "%ld %s", a.status, a.body);
        allowed += a.status == 200;
        su_resp_free(&a);
    }
    ck_assert_int_eq(allowed, 2);
    ck_assert_double_eq(metric(&s, HELD), 99);
    ck_assert_double_eq(metric(&s, SAVED), 1);
    double t0 = mono_s();
    while (metric(&s, HELD) != 0) {
        ck_assert_msg(mono_s() - t0 < 2, "the lease was not given back 2 s after it was due");
        usleep(20000);
    }
    ck_assert_double_eq(metric(&s, RETURNED), 99);
    ck_assert_msg(su_stop(&s) == 0, "ratelimitd did not exit 0");
    rt_redis_stop(&r);
}
END_TEST

static Suite *lease_suite(void)
{
    Suite *s = suite_create("lease");
    TCase *tc = tcase_create("fleet");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, admissions_within_the_limit_and_one_call_per_50_decisions);
    tcase_add_test(tc, leases_come_back_on_sigterm);
    tcase_add_test(tc, denied_elsewhere_takes_nothing_from_the_lease_and_an_idle_lease_goes_back);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(lease_suite());
}
