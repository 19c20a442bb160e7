/*
 * test_rls_trace.c - the YAML configuration's numbers against a small model of
 * envoyproxy/ratelimit's fixed-window counting, on random traces, through the memory store
 * and the Redis store (a private redis-server).
 *
 * The model keeps one counter per (descriptor entries, window start = now - now % unit) as
 * upstream's Redis keys do. On single-descriptor traces of one hit at a time it is upstream
 * itself (which counts denied hits too: once over, a window stays over either way). On
 * traces of several descriptors and hits it counts only what ratelimitd admits: a request
 * passes when every descriptor fits, and then counts against all of them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_server.h"
#include "redis/store.h"
#include "testutil.h"
#include "yamlutil.h"

static const char *conf = "domain: trace\n"
                          "descriptors:\n"
                          "  - key: ip\n"
                          "    rate_limit: {unit: second, requests_per_unit: 5}\n"
                          "  - key: user\n"
                          "    value: vip\n"
                          "    rate_limit: {unit: minute, requests_per_unit: 7}\n"
                          "  - key: user\n"
                          "    descriptors:\n"
                          "      - key: path\n"
                          "        rate_limit: {unit: minute, requests_per_unit: 12}\n";

/* The descriptors a trace draws from: text, limit, unit in seconds. */
static const struct {
    const char *spec;
    uint32_t limit;
    int64_t unit;
} pool[] = {
    {"ip=10.0.0.1", 5, 1},         {"ip=10.0.0.2", 5, 1},         {"user=vip", 7, 60},
    {"user=bob, path=/a", 12, 60}, {"user=bob, path=/b", 12, 60},
};
#define NPOOL (sizeof pool / sizeof pool[0])

typedef struct model {
    int64_t start[NPOOL];
    uint64_t count[NPOOL];
} model;

static uint64_t rnd_state;

static unsigned rnd(unsigned n)
{
    rnd_state = rnd_state * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)((rnd_state >> 33) % n);
}

/* The model's counter of descriptor p at whole second now_s. */
static uint64_t *counter(model *m, size_t p, int64_t now_s)
{
    int64_t start = now_s - now_s % pool[p].unit;
    if (m->start[p] != start) {
        m->start[p] = start;
        m->count[p] = 0;
    }
    return &m->count[p];
}

/* Runs n requests; upstream: one descriptor and one hit each, counting denials as upstream. */
static void run(yt *t, unsigned n, int upstream, uint64_t seed)
{
    model m;
    double now = 1000;
    memset(&m, 0, sizeof m);
    for (size_t p = 0; p < NPOOL; p++)
        m.start[p] = -1;
    rnd_state = seed;
    for (unsigned r = 0; r < n; r++) {
        size_t pick[3], nd = upstream ? 1 : 1 + rnd(3);
        uint64_t hits = upstream ? 1 : 1 + rnd(4);
        char spec[256] = "";
        now += rnd(5) * 0.125; /* several requests a second, many windows */
        int64_t now_s = (int64_t)now;
        for (size_t i = 0; i < nd; i++) {
            int again;
            do { /* distinct descriptors in one request */
                pick[i] = rnd(NPOOL);
                again = 0;
                for (size_t j = 0; j < i; j++)
                    again |= pick[j] == pick[i];
            } while (again);
            size_t len = strlen(spec);
            snprintf(spec + len, sizeof spec - len, "%s%s", i ? "; " : "", pool[pick[i]].spec);
        }
        int fits[3], all = 1;
        for (size_t i = 0; i < nd; i++) {
            fits[i] = *counter(&m, pick[i], now_s) + hits <= pool[pick[i]].limit;
            all &= fits[i];
        }
        for (size_t i = 0; i < nd; i++)
            if (all || upstream)
                *counter(&m, pick[i], now_s) += hits;
        rld_ycode overall = yt_ask(t, "trace", now, (unsigned)hits, spec);
        ck_assert_msg(overall == (all ? RLD_YCODE_OK : RLD_YCODE_OVER_LIMIT),
                      "request %u (%s at %.3f): overall %d", r, spec, now, overall);
        for (size_t i = 0; i < nd; i++) {
            const rld_ystatus *s = &t->st[i];
            size_t p = pick[i];
            uint64_t c = *counter(&m, p, now_s);
            uint32_t want = fits[i] ? pool[p].limit - (uint32_t)c : 0;
            ck_assert_msg(s->code == (fits[i] ? RLD_YCODE_OK : RLD_YCODE_OVER_LIMIT),
                          "request %u descriptor %zu: code %d", r, i, s->code);
            ck_assert_msg(s->remaining == want,
                          "request %u (%s at %.3f) descriptor %zu: "
                          "remaining %u, model %u",
                          r, spec, now, i, s->remaining, want);
            ck_assert_int_eq(s->reset, (pool[p].unit - now_s % pool[p].unit) * RL_NS_PER_SEC);
            ck_assert_uint_eq(s->requests_per_unit, pool[p].limit);
        }
    }
}

START_TEST(memory_upstream_trace)
{
    yt t;
    yt_open(&t, conf, NULL);
    run(&t, 2000, 1, 42);
    yt_close(&t);
}
END_TEST

START_TEST(memory_admitted_trace)
{
    yt t;
    yt_open(&t, conf, NULL);
    run(&t, 2000, 0, 7);
    yt_close(&t);
}
END_TEST

static rt_redis srv;

static void redis_up(void)
{
    rt_redis_start(&srv);
}

static void redis_down(void)
{
    rt_redis_stop(&srv);
}

static rl_store *redis_store(const char *prefix)
{
    rld_redis_options o = {.url = srv.url,
                           .prefix = prefix,
                           .timeout_ms = 10000,
                           .pool = 2,
                           .manual_clock = 1,
                           .ttl_floor_ms = 3600 * 1000};
    rl_store *st;
    rl_err err = {{0}};
    ck_assert_msg(rld_redis_store_new(&o, &st, &err) == RL_OK, "%s", err.msg);
    return st;
}

START_TEST(redis_upstream_trace)
{
    yt t;
    yt_open(&t, conf, redis_store("up:"));
    run(&t, 1000, 1, 42);
    /* the counters are Redis keys named by domain and entries */
    redisReply *r = rt_redis_cmd(&srv, "KEYS up:*trace|user=bob|path=/a*");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_uint_ge(r->elements, 1);
    freeReplyObject(r);
    yt_close(&t);
}
END_TEST

START_TEST(redis_admitted_trace)
{
    yt t;
    yt_open(&t, conf, redis_store("adm:"));
    run(&t, 1000, 0, 7);
    yt_close(&t);
}
END_TEST

START_TEST(redis_same_descriptor_twice)
{
    /* one counter named twice in a request counts both hits once */
    yt t;
    yt_open(&t, conf, redis_store("twice:"));
    ck_assert_int_eq(yt_ask(&t, "trace", 5, 2, "ip=1; ip=1"), RLD_YCODE_OK);
    ck_assert_uint_eq(t.st[0].remaining, 1);
    ck_assert_uint_eq(t.st[1].remaining, 1);
    ck_assert_int_eq(yt_ask(&t, "trace", 5, 1, "ip=1; ip=1"), RLD_YCODE_OVER_LIMIT);
    ck_assert_int_eq(yt_ask(&t, "trace", 5, 1, "ip=1"), RLD_YCODE_OK);
    ck_assert_uint_eq(t.st[0].remaining, 0);
    yt_close(&t);
}
END_TEST

START_TEST(redis_charge_after_the_fact)
{
    /* charge: true on Redis, as in the memory store: 1000 hits a minute; 800 and then 700 are
     * both recorded (1500, 500 past the limit) and not denied; a check (hits 0) is then over
     * until the minute ends, and the next minute starts at 1000 */
    yt t;
    yt_open(&t,
            "domain: ai\ndescriptors:\n  - key: api_key\n    charge: true\n"
            "    rate_limit: {unit: minute, requests_per_unit: 1000}\n",
            redis_store("charge:"));
    ck_assert_int_eq(yt_ask(&t, "ai", 1, 0, "api_key=k @h0"), RLD_YCODE_OK);
    ck_assert_uint_eq(t.st[0].remaining, 1000);
    ck_assert_int_eq(yt_ask(&t, "ai", 2, 0, "api_key=k @h800"), RLD_YCODE_OK);
    ck_assert_uint_eq(t.st[0].remaining, 200);
    ck_assert_int_eq(yt_ask(&t, "ai", 3, 0, "api_key=k @h700"), RLD_YCODE_OK);
    ck_assert_uint_eq(t.st[0].remaining, 0);
    ck_assert_int_eq(t.st[0].st.remaining, -500 * RL_FP_ONE);
    ck_assert_int_eq(yt_ask(&t, "ai", 4, 0, "api_key=k @h0"), RLD_YCODE_OVER_LIMIT);
    ck_assert_int_eq(t.st[0].reset, 56 * RL_NS_PER_SEC);
    ck_assert_int_eq(yt_ask(&t, "ai", 60, 0, "api_key=k @h0"), RLD_YCODE_OK);
    ck_assert_uint_eq(t.st[0].remaining, 1000);
    yt_close(&t);
}
END_TEST

static Suite *trace_suite(void)
{
    Suite *s = suite_create("rls_trace");
    TCase *tc = tcase_create("memory");
    tcase_add_test(tc, memory_upstream_trace);
    tcase_add_test(tc, memory_admitted_trace);
    suite_add_tcase(s, tc);
    tc = tcase_create("redis");
    tcase_add_checked_fixture(tc, redis_up, redis_down);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, redis_upstream_trace);
    tcase_add_test(tc, redis_admitted_trace);
    tcase_add_test(tc, redis_charge_after_the_fact);
    tcase_add_test(tc, redis_same_descriptor_twice);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(trace_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
