/*
 * test_deny_cache.c - the Redis store's cache of denials (store.deny_cache) with two real
 * ratelimitd processes on one redis-server: one key flooded at 2,000 requests a second
 * (bench/flood.c) against a bucket of 10 refilling 10 a second, with the cache off and on,
 * counting Redis's script calls (INFO commandstats) and the admissions; the same flood with the
 * key's quota raised half-way through one instance, after which neither instance denies for
 * longer than the announcement takes; a denial cached by one instance and forgotten when the
 * other refunds. Expected numbers are worked out by hand in the comments.
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

#define RATE 2000 /* requests a second, shared by the two instances */
#define SECONDS 3 /* of flood */
#define BODY "{\"keys\": {\"user\": \"alice\"}}"

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Two instances on r, the cache of denials on or off, a tiered level "user" whose default tier
 * is a bucket of 10 refilling 10 a second and whose tier "pro" has 5,000 and 5,000 a second.
 * A call to Redis may take 2 s on a loaded machine, and a level never admits without Redis
 * ("closed"): every admission counted is Redis's. */
static void start_pair(su_server s[2], const rt_redis *r, const char *prefix, int cache)
{
    char config[2048];
    snprintf(config, sizeof config,
             "{\"store\": {\"type\": \"redis\", \"url\": \"%s\", \"prefix\": \"%s\", "
             "\"timeout_ms\": 2000, \"deny_cache\": %s}, \"levels\": [{\"name\": \"user\", "
             "\"tiered\": true, \"on_store_error\": \"closed\"}], "
             "\"tiers\": {\"free\": [{\"type\": \"token_bucket\", \"name\": \"free\", "
             "\"capacity\": 10, \"per_second\": 10}], \"pro\": [{\"type\": \"token_bucket\", "
             "\"name\": \"pro\", \"capacity\": 5000, \"per_second\": 5000}]}, "
             "\"default_tier\": \"free\"}",
             r->url, prefix, cache ? "true" : "false");
    for (int i = 0; i < 2; i++) {
        su_tmpdir(&s[i]);
        su_start(&s[i], config, NULL);
    }
}

static void stop_pair(su_server s[2])
{
    for (int i = 0; i < 2; i++)
        ck_assert_msg(su_stop(&s[i]) == 0, "ratelimitd %d did not exit 0", i);
}

/* calls=<n> of EVALSHA in INFO commandstats (0 when it never ran). */
static long long evalsha_calls(const rt_redis *r)
{
    redisReply *x = rt_redis_cmd(r, "INFO commandstats");
    const char *p = strstr(x->str, "cmdstat_evalsha:calls=");
    long long n = p ? atoll(p + strlen("cmdstat_evalsha:calls=")) : 0;
    freeReplyObject(x);
    return n;
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

#define LOCAL "ratelimit_deny_cache_total{level=\"user\"}"

/* ---- bench/flood ----------------------------------------------------------------------------- */

typedef struct flood {
    pid_t pid;
    int out; /* its stdout */
    char *text;
} flood;

static void flood_start(flood *f, const su_server s[2])
{
    char path[400], rate[16], secs[16], p0[16], p1[16];
    const char *b = getenv("RL_BUILD");
    snprintf(path, sizeof path, "%s/bench/flood", b && *b ? b : "build");
    ck_assert_msg(access(path, X_OK) == 0, "no %s (make build-test builds it)", path);
    snprintf(rate, sizeof rate, "%d", RATE);
    snprintf(secs, sizeof secs, "%d", SECONDS);
    snprintf(p0, sizeof p0, "%d", s[0].port);
    snprintf(p1, sizeof p1, "%d", s[1].port);
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    f->pid = fork();
    ck_assert_int_ge(f->pid, 0);
    if (f->pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execl(path, path, rate, secs, BODY, p0, p1, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    f->out = fd[0];
}

/* Waits for the flood and keeps what it printed. */
static void flood_wait(flood *f)
{
    size_t have = 0, cap = 65536;
    f->text = malloc(cap);
    ck_assert_ptr_nonnull(f->text);
    ssize_t n;
    while ((n = read(f->out, f->text + have, cap - 1 - have)) > 0)
        have += (size_t)n;
    f->text[have] = '\0';
    close(f->out);
    int st;
    ck_assert_int_eq(waitpid(f->pid, &st, 0), f->pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "flood failed: %s", f->text);
}

static double flood_num(const flood *f, const char *key)
{
    char want[80];
    snprintf(want, sizeof want, "%s: ", key);
    const char *p = strstr(f->text, want);
    ck_assert_msg(p != NULL, "no %s in %s", key, f->text);
    return atof(p + strlen(want));
}

/* A flood that got through: nearly every request sent at the rate and answered 200 or 429. */
static void check_flood(const flood *f)
{
    fprintf(stderr, "%s", f->text);
    ck_assert_msg(flood_num(f, "flood_errors") == 0, "errors in %s", f->text);
    ck_assert_msg(flood_num(f, "flood_requests") >= 0.8 * RATE * SECONDS, "too few: %s", f->text);
}

/* ---- the tests ---------------------------------------------------------------------------------
 */

/* Off, then on, each on a prefix of its own with Redis's counts reset. Worked out by hand: the
 * bucket starts full (10) and refills 10 a second, so over the flood's t seconds at most
 * 10 + 10 t requests are admitted (40 for t = 3, plus the flood's run-up). With the cache off
 * every request is a script call (about 6,000, besides a few dozen of housekeeping); with it
 * on, each instance calls Redis about once each time its cached denial lapses (a token every
 * 0.1 s: some 20 a second for the two, plus the calls in flight when a denial lapses), so the
 * calls fall far more than 20 times. */
START_TEST(flood_calls_fall_and_admissions_stay_within_the_limit)
{
    rt_redis r;
    rt_redis_start(&r);
    long long calls[2];
    double admitted[2], seconds[2];
    for (int cache = 0; cache < 2; cache++) {
        su_server s[2];
        flood f;
        start_pair(s, &r, cache ? "on:" : "off:", cache);
        freeReplyObject(rt_redis_cmd(&r, "CONFIG RESETSTAT"));
        flood_start(&f, s);
        flood_wait(&f);
        calls[cache] = evalsha_calls(&r);
        check_flood(&f);
        admitted[cache] = flood_num(&f, "flood_allowed");
        seconds[cache] = flood_num(&f, "flood_seconds");
        double local = metric(&s[0], LOCAL) + metric(&s[1], LOCAL);
        ck_assert_double_eq(metric(&s[0], "ratelimit_store_errors_total") +
                                metric(&s[1], "ratelimit_store_errors_total"),
                            0);
        fprintf(stderr,
                "cache %s: %lld script calls, %.0f admitted in %.3f s, %.0f denied "
                "from the cache\n",
                cache ? "on" : "off", calls[cache], admitted[cache], seconds[cache], local);
        ck_assert_msg(admitted[cache] <= 10 + 10 * seconds[cache] + 1,
                      "cache %d: %.0f admitted in %.3f s, more than the bucket allows", cache,
                      admitted[cache], seconds[cache]);
        /* most tokens are found: not fewer than 10 + 10 t minus one per tenth of a second */
        ck_assert_msg(admitted[cache] >= 10 + 5 * seconds[cache], "cache %d: only %.0f admitted",
                      cache, admitted[cache]);
        if (!cache) {
            ck_assert_double_eq(local, 0);
        } else {
            double denied = flood_num(&f, "flood_denied");
            /* every denial Redis did not make came from a cache */
            ck_assert_msg(local >= denied - (double)calls[cache],
                          "%.0f denied, %lld calls, only %.0f from the cache", denied, calls[cache],
                          local);
            /* a denial from the cache has the answer's shape: blocked_by, retry_after at most
             * a token's 0.1 s, Retry-After and RateLimit headers */
            for (int i = 0;; i++) {
                ck_assert_msg(i < 100, "no request was answered from the cache");
                double before = metric(&s[0], LOCAL);
                su_resp a = su_req(&s[0], "POST", "/acquire", BODY, NULL);
                int cached = metric(&s[0], LOCAL) == before + 1;
                if (cached) {
                    ck_assert_int_eq(a.status, 429);
                    ck_assert_str_eq(su_str(&a, "blocked_by"), "user: free");
                    double retry = su_num(&a, "retry_after");
                    ck_assert_msg(retry > 0 && retry <= 0.1, "retry_after %g", retry);
                    ck_assert_ptr_nonnull(su_header(&a, "Retry-After"));
                    ck_assert_ptr_nonnull(su_header(&a, "RateLimit"));
                }
                su_resp_free(&a);
                if (cached)
                    break;
            }
        }
        free(f.text);
        stop_pair(s);
    }
    fprintf(stderr, "script calls: %lld with the cache off, %lld on (%.1fx fewer)\n", calls[0],
            calls[1], (double)calls[0] / (double)(calls[1] ? calls[1] : 1));
    ck_assert_msg(calls[0] >= 20 * calls[1], "calls fell from %lld to %lld only", calls[0],
                  calls[1]);
    rt_redis_stop(&r);
}
END_TEST

/* The flood with the cache on, alice raised to "pro" (5,000 a second, more than the flood)
 * through instance 0 half-way. Instance 0 has the new quota in force before the PUT answers and
 * its cached denials no longer match the rule, so it denies nothing after; instance 1 hears of
 * the change from Redis (quota_sync and the cache's follower) and denies nothing after a
 * publish's time (0.2 s allowed here on a loaded machine). Before the raise, at most
 * 10 + 10 t are admitted. */
START_TEST(flood_sees_a_quota_raise_at_once)
{
    rt_redis r;
    rt_redis_start(&r);
    su_server s[2];
    flood f;
    start_pair(s, &r, "q:", 1);
    double t0 = mono_s();
    flood_start(&f, s);
    usleep(1500 * 1000);
    double put = mono_s();
    su_resp q = su_req(&s[0], "PUT", "/quota/alice", "{\"tier\": \"pro\"}", NULL);
    double done = mono_s();
    ck_assert_msg(q.status == 200, "PUT: %ld %s", q.status, q.body);
    su_resp_free(&q);
    flood_wait(&f);
    check_flood(&f);
    /* flood's own start is 50 ms after its launch, and a little later still */
    double done_ms = (done - t0) * 1000 - 50, put_ms = (put - t0) * 1000 - 50;
    double last0 = flood_num(&f, "flood_last_denied_ms_0");
    double last1 = flood_num(&f, "flood_last_denied_ms_1");
    fprintf(stderr, "raise at %.0f-%.0f ms; last denials at %.0f ms (0) and %.0f ms (1)\n", put_ms,
            done_ms, last0, last1);
    ck_assert_msg(last0 <= done_ms + 20, "instance 0 denied at %.0f ms, raised at %.0f ms", last0,
                  done_ms);
    ck_assert_msg(last1 <= done_ms + 200, "instance 1 denied at %.0f ms, raised at %.0f ms", last1,
                  done_ms);
    ck_assert_msg(last0 > 0 && last1 > 0, "no denial before the raise: %s", f.text);
    /* before the raise: the tenths of a second wholly before it */
    const char *p = strstr(f.text, "flood_allowed_per_100ms: ");
    ck_assert_ptr_nonnull(p);
    p += strlen("flood_allowed_per_100ms: ");
    double before = 0;
    int slots = (int)(put_ms / 100);
    for (int i = 0; i < slots && *p; i++) {
        before += atof(p);
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    ck_assert_msg(before <= 10 + 10 * (slots / 10.0) + 1, "%.0f admitted in the first %d tenths",
                  before, slots);
    /* after: every request (the pro bucket holds 5,000) */
    ck_assert_msg(flood_num(&f, "flood_allowed") >=
                      before + 0.8 * RATE * (SECONDS - done_ms / 1000),
                  "too few admitted after the raise: %s", f.text);
    free(f.text);
    stop_pair(s);
    rt_redis_stop(&r);
}
END_TEST

/* Through HTTP, with the real clock: a bucket of 10 that refills 1 a 1,000 s (nothing refills
 * during the test). Instance 0 reserves 8 of bob's 10 and takes 2: a cost of 1 is denied by
 * Redis (1,000 s to wait), then again from the cache (ratelimit_deny_cache_total + 1, the same
 * blocked_by). Instance 1 settles the reservation at 3, giving 5 back: instance 0's next
 * request of 1 passes as soon as the announcement has reached it (0.1 s allowed on a loaded
 * machine), leaving 4 (and the thousandths refilled meanwhile). */
START_TEST(denial_forgotten_after_a_refund_through_the_other_instance)
{
    rt_redis r;
    rt_redis_start(&r);
    su_server s[2];
    char config[1024], body[256];
    snprintf(config, sizeof config,
             "{\"store\": {\"type\": \"redis\", \"url\": \"%s\", \"timeout_ms\": 2000}, "
             "\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", "
             "\"name\": \"bucket\", \"capacity\": 10, \"per_second\": 0.001}]}]}",
             r.url);
    for (int i = 0; i < 2; i++) {
        su_tmpdir(&s[i]);
        su_start(&s[i], config, NULL);
    }
    const char *one = "{\"keys\": {\"user\": \"bob\"}}";
    su_resp a = su_req(&s[0], "POST", "/acquire",
                       "{\"keys\": {\"user\": \"bob\"}, \"cost\": 8, \"reserve\": true}", NULL);
    ck_assert_int_eq(a.status, 200);
    char id[64];
    snprintf(id, sizeof id, "%s", su_str(&a, "reservation"));
    su_resp_free(&a);
    a = su_req(&s[0], "POST", "/acquire", "{\"keys\": {\"user\": \"bob\"}, \"cost\": 2}", NULL);
    ck_assert_int_eq(a.status, 200);
    su_resp_free(&a);
    a = su_req(&s[0], "POST", "/acquire", one, NULL);
    ck_assert_int_eq(a.status, 429);
    su_resp_free(&a);
    double before = metric(&s[0], "ratelimit_deny_cache_total{level=\"user\"}");
    a = su_req(&s[0], "POST", "/acquire", one, NULL);
    ck_assert_int_eq(a.status, 429);
    ck_assert_str_eq(su_str(&a, "blocked_by"), "user: bucket");
    su_resp_free(&a);
    ck_assert_double_eq(metric(&s[0], "ratelimit_deny_cache_total{level=\"user\"}"), before + 1);

    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"actual_cost\": 3}", id);
    su_resp b = su_req(&s[1], "POST", "/refund", body, NULL);
    ck_assert_msg(b.status == 200 && su_num(&b, "refunded") == 5, "refund: %s", b.body);
    su_resp_free(&b);
    double t0 = mono_s();
    for (;;) {
        a = su_req(&s[0], "POST", "/acquire", one, NULL);
        long status = a.status;
        double left = json_number_value(
            json_object_get(json_array_get(json_object_get(a.json, "limits"), 0), "remaining"));
        /* 4, and what refilled meanwhile (a thousandth a second) */
        ck_assert_msg(status != 200 || (left >= 4 && left < 4.01), "remaining %g", left);
        su_resp_free(&a);
        if (status == 200)
            break;
        ck_assert_int_eq(status, 429);
        ck_assert_msg(mono_s() - t0 < 0.1, "still denied 0.1 s after the refund");
    }
    stop_pair(s);
    rt_redis_stop(&r);
}
END_TEST

static Suite *deny_cache_suite(void)
{
    Suite *s = suite_create("deny_cache");
    TCase *tc = tcase_create("flood");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, flood_calls_fall_and_admissions_stay_within_the_limit);
    tcase_add_test(tc, flood_sees_a_quota_raise_at_once);
    tcase_add_test(tc, denial_forgotten_after_a_refund_through_the_other_instance);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(deny_cache_suite());
}
