/*
 * test_fleet_idle.c - the fleet's housekeeping on Redis is one instance's at a time: three real
 * ratelimitd processes on one real redis-server, idle. Only the holder of the claim
 * (<prefix>duty) scans the state keys and asks for due reservations, so Redis sees one
 * instance's rate of SCAN and of the expiry script (counted with INFO commandstats), while
 * /metrics on every instance shows the fleet's key and reservation counts. When the holder is
 * killed (SIGKILL) another instance takes the claim over once it lapses, and the work goes on
 * at one instance's rate; a holder stopped with SIGTERM hands the claim on at once.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "srvutil.h"

#define N 3
#define WINDOW_MS 2000
#define CLAIM_TTL_MS 3000 /* store.c's DUTY_TTL_MS */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* The claim's holder ("" when nobody holds it), in a static buffer. */
static const char *holder(const rt_redis *r)
{
    static char id[64];
    redisReply *x = rt_redis_cmd(r, "HGET rl:duty holder");
    snprintf(id, sizeof id, "%s", x->type == REDIS_REPLY_STRING ? x->str : "");
    freeReplyObject(x);
    return id;
}

/* calls=<n> of one command in INFO commandstats (0 when it never ran). */
static long calls(const rt_redis *r, const char *cmd)
{
    redisReply *x = rt_redis_cmd(r, "INFO commandstats");
    char want[64];
    snprintf(want, sizeof want, "cmdstat_%s:calls=", cmd);
    const char *p = strstr(x->str, want);
    long n = p ? strtol(p + strlen(want), NULL, 10) : 0;
    freeReplyObject(x);
    return n;
}

/* SCAN steps and runs of the expiry script (due.lua, the only one to call ZRANGEBYSCORE)
 * over WINDOW_MS. One instance ticks ten times a second: 20 of each in 2 s; three would make
 * 60. */
static void one_instance_at_work(const rt_redis *r, const char *when)
{
    freeReplyObject(rt_redis_cmd(r, "CONFIG RESETSTAT"));
    sleep_ms(WINDOW_MS);
    long scan = calls(r, "scan"), due = calls(r, "zrangebyscore");
    ck_assert_msg(scan >= 10 && scan <= 26, "%s: %ld SCANs in 2 s, want one instance's 20", when,
                  scan);
    ck_assert_msg(due >= 10 && due <= 26, "%s: %ld expiry runs in 2 s, want one instance's 20",
                  when, due);
}

/* Someone other than not_by (NULL: anyone) holds the claim, renewed within a heartbeat. */
static void claim_fresh(const rt_redis *r, const char *when, const char *not_by)
{
    const char *h = holder(r);
    ck_assert_msg(*h, "%s: nobody holds the claim", when);
    ck_assert_msg(!not_by || strcmp(h, not_by) != 0, "%s: still held by the stopped instance",
                  when);
    redisReply *x = rt_redis_cmd(r, "PTTL rl:duty");
    ck_assert_msg(x->type == REDIS_REPLY_INTEGER && x->integer > CLAIM_TTL_MS - 1100,
                  "%s: the claim has %lld ms left", when, (long long)x->integer);
    freeReplyObject(x);
}

/* The value of one sample line of /metrics ("name{labels}" exactly), -1 when absent. */
static double metric(const su_server *s, const char *series)
{
    su_resp r = su_req(s, "GET", "/metrics", NULL, NULL);
    char want[300];
    snprintf(want, sizeof want, "\n%s ", series);
    const char *p = r.body ? strstr(r.body, want) : NULL;
    double v = p ? strtod(p + strlen(want), NULL) : -1;
    su_resp_free(&r);
    return v;
}

/* Waits (5 s at most) until every running instance's /metrics shows the series at want. */
static void wait_metric(su_server *s, int n, const char *series, double want)
{
    for (int i = 0; i < n; i++) {
        if (!s[i].pid)
            continue;
        double t0 = mono_s(), v;
        while ((v = metric(&s[i], series)) != want && mono_s() - t0 < 5)
            sleep_ms(50);
        ck_assert_msg(v == want, "instance %d: %s is %g, want %g", i, series, v, want);
    }
}

START_TEST(one_instance_does_the_housekeeping)
{
    rt_redis r;
    rt_redis_start(&r);
    su_server s[N];
    /* a take of 1 refills in 1000 s: the state keys stay for the test */
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"store\": {\"type\": \"redis\", \"url\": \"%s\", \"prefix\": \"rl:\"}, "
             "\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", "
             "\"capacity\": 10, \"per_second\": 0.001}]}]}",
             r.url);

    /* the first instance alone takes the claim */
    su_tmpdir(&s[0]);
    su_start(&s[0], cfg, NULL);
    double t0 = mono_s();
    while (!*holder(&r) && mono_s() - t0 < 3)
        sleep_ms(20);
    char first[64];
    snprintf(first, sizeof first, "%s", holder(&r));
    ck_assert_msg(*first, "no instance took the claim in 3 s");
    for (int i = 1; i < N; i++) {
        su_tmpdir(&s[i]);
        su_start(&s[i], cfg, NULL);
    }

    /* five users through the second instance, one reservation through the third */
    for (int u = 0; u < 5; u++) {
        char body[128];
        snprintf(body, sizeof body, "{\"keys\": {\"user\": \"u%d\"}}", u);
        su_resp a = su_req(&s[1], "POST", "/acquire", body, NULL);
        ck_assert_msg(a.status == 200, "%ld %s", a.status, a.body);
        su_resp_free(&a);
    }
    su_resp a = su_req(&s[2], "POST", "/acquire",
                       "{\"keys\": {\"user\": \"u0\"}, \"reserve\": true}", NULL);
    ck_assert_msg(a.status == 200, "%ld %s", a.status, a.body);
    su_resp_free(&a);
    sleep_ms(1200); /* every instance has heartbeaten and asked for the claim */
    ck_assert_str_eq(holder(&r), first);

    /* the holder counted; every instance shows its figures */
    wait_metric(s, N, "ratelimit_keys{level=\"user\"}", 5);
    wait_metric(s, N, "ratelimit_reservations_active", 1);
    one_instance_at_work(&r, "three instances");

    /* the holder dies; another takes the claim once it lapses, its TTL after the last renewal
     * (which came at most a heartbeat, 1 s, before the kill): the others, having seen less than
     * a heartbeat left, ask again at the first tick after it lapses (0.1 s) */
    kill(s[0].pid, SIGKILL);
    waitpid(s[0].pid, NULL, 0);
    s[0].pid = 0;
    t0 = mono_s();
    while (strcmp(holder(&r), first) == 0 && mono_s() - t0 < 6)
        sleep_ms(20);
    while (!*holder(&r) && mono_s() - t0 < 6)
        sleep_ms(20);
    double took = mono_s() - t0;
    ck_assert_msg(*holder(&r) && strcmp(holder(&r), first) != 0, "the claim was not taken over");
    ck_assert_msg(took <= CLAIM_TTL_MS / 1000.0 + 0.1 + 0.2, "taken over after %.2f s", took);
    fprintf(stderr, "fleet_idle: claim taken over %.2f s after the holder was killed\n", took);

    /* one more key, counted by the new holder and seen everywhere; the work at one rate */
    a = su_req(&s[2], "POST", "/acquire", "{\"keys\": {\"user\": \"u9\"}}", NULL);
    ck_assert_msg(a.status == 200, "%ld %s", a.status, a.body);
    su_resp_free(&a);
    wait_metric(s, N, "ratelimit_keys{level=\"user\"}", 6);
    wait_metric(s, N, "ratelimit_reservations_active", 1);
    one_instance_at_work(&r, "after the takeover");

    /* SIGTERM hands the claim on at once: whichever of the two held it, 1.5 s later the last
     * one holds a claim it renewed within its last heartbeat (at least 3000 - 1000 ms left);
     * a holder that stopped without handing it on would leave at most 3000 - 1500 ms */
    ck_assert_int_eq(su_stop(&s[1]), 0);
    s[1].pid = 0;
    sleep_ms(1500);
    claim_fresh(&r, "after the first SIGTERM", NULL);
    one_instance_at_work(&r, "one instance left");

    /* and once more with the holder known: the third instance is the only one left, a new one
     * starts beside it, then the holder is stopped; the new one holds a fresh claim */
    char third[64];
    snprintf(third, sizeof third, "%s", holder(&r));
    su_tmpdir(&s[0]);
    su_start(&s[0], cfg, NULL);
    sleep_ms(1200);
    ck_assert_str_eq(holder(&r), third);
    ck_assert_int_eq(su_stop(&s[2]), 0);
    s[2].pid = 0;
    sleep_ms(1500);
    claim_fresh(&r, "after the holder's SIGTERM", third);
    wait_metric(s, N, "ratelimit_keys{level=\"user\"}", 6);
    ck_assert_int_eq(su_stop(&s[0]), 0);
    rt_redis_stop(&r);
}
END_TEST

static Suite *idle_suite(void)
{
    Suite *s = suite_create("fleet_idle");
    TCase *tc = tcase_create("redis");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, one_instance_does_the_housekeeping);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(idle_suite());
}
