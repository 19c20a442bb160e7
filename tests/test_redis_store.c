/*
 * test_redis_store.c - the Redis store against the in-memory store and against itself through
 * several instances: a conformance table, random traces replayed through both stores, TTLs,
 * reservations settled and released through another instance, and two instances hammering
 * one key.
 *
 * Every test starts its own redis-server (tests/redis_server.h); none is skipped.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fallback_store.h"
#include "redis_server.h"
#include "redis_store.h"
#include "testutil.h"

static rt_redis srv;

static void srv_up(void)
{
    rt_redis_start(&srv);
}

static void srv_down(void)
{
    rt_redis_stop(&srv);
}

/* ---- limiters over either store ------------------------------------------------------------ */

typedef struct pair {
    rl_registry *reg;
    rl_limiter *mem, *red;
} pair;

static rl_config *config_of(rl_registry *reg, const char *json, rld_settings *set)
{
    rl_config *cfg;
    rl_err err = {{0}};
    int rc = rld_config_parse(json, strlen(json), reg, set, &cfg, &err);
    ck_assert_msg(rc == RL_OK, "config refused: %s\n%s", err.msg, json);
    return cfg;
}

/* A limiter over a Redis store with a manual clock (unless real_clock) under prefix. */
static rl_limiter *redis_limiter(rl_registry *reg, const char *json, const char *prefix,
                                 int real_clock, rl_store **store_out)
{
    rld_settings set;
    rl_config *cfg = config_of(reg, json, &set);
    rld_redis_options o = {.url = srv.url,
                           .prefix = prefix,
                           .timeout_ms = 2000,
                           .pool = 4,
                           .manual_clock = !real_clock,
                           .ttl_floor_ms = real_clock ? 0 : 3600 * 1000};
    for (size_t l = 0; l < RL_MAX_LEVELS; l++)
        o.shards[l] = set.shards[l];
    rld_settings_clear(&set);
    rl_store *st;
    rl_limiter *lim;
    rl_err err = {{0}};
    ck_assert_int_eq(rld_redis_store_new(&o, &st, &err), RL_OK);
    int rc = rl_limiter_new(cfg, st, &lim, &err);
    ck_assert_msg(rc == RL_OK, "limiter refused: %s", err.msg);
    if (store_out)
        *store_out = st;
    return lim;
}

static rl_limiter *memory_limiter(rl_registry *reg, const char *json)
{
    rld_settings set;
    rl_config *cfg = config_of(reg, json, &set);
    rld_settings_clear(&set);
    rl_limiter *lim;
    rl_err err = {{0}};
    ck_assert_int_eq(rl_limiter_new(cfg, NULL, &lim, &err), RL_OK);
    return lim;
}

static void pair_new(pair *p, const char *json, const char *prefix)
{
    p->reg = rl_registry_new();
    ck_assert_ptr_nonnull(p->reg);
    p->mem = memory_limiter(p->reg, json);
    p->red = redis_limiter(p->reg, json, prefix, 0, NULL);
}

static void pair_free(pair *p)
{
    rl_limiter_free(p->mem);
    rl_limiter_free(p->red);
    rl_registry_free(p->reg);
}

/* Splits "a=x,b=y" into descriptors (pointing into buf). */
static size_t descs(const char *keys, char *buf, size_t cap, rl_descriptor *ds)
{
    size_t n = 0;
    snprintf(buf, cap, "%s", keys);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < 16;
         t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        ck_assert_ptr_nonnull(eq);
        *eq = '\0';
        ds[n] = (rl_descriptor){t, strlen(t), eq + 1, strlen(eq + 1)};
        n++;
    }
    return n;
}

static int acquire(rl_limiter *lim, const char *keys, rl_fp cost, rl_ns now, unsigned flags,
                   int64_t priority, rl_decision *d)
{
    char buf[512];
    rl_descriptor ds[16];
    rl_request req = {.desc = ds,
                      .ndesc = descs(keys, buf, sizeof buf, ds),
                      .cost = cost,
                      .priority = priority,
                      .flags = flags,
                      .now = now};
    rl_err err = {{0}};
    int rc = rl_acquire(lim, &req, d, &err);
    if (rc == RL_OK)
        rl_decision_done(d);
    return rc;
}

/* ---- a conformance table ------------------------------------------------------------------- */

/* Worked numbers from the rule files' comments, checked by hand, run against both stores. */
typedef struct crow {
    double t, cost;
    int allowed;
    double wait;      /* seconds */
    double remaining; /* after the decision */
} crow;

typedef struct ccase {
    const char *rule;
    crow rows[8];
} ccase;

static const ccase conformance[] = {
    /* capacity 100, 10/s: emptied at 0, a cost of 1 waits 0.1 s; 50 back at t = 5 */
    {"{\"type\": \"token_bucket\", \"capacity\": 100, \"per_second\": 10}",
     {{0, 100, 1, 0, 0}, {0, 1, 0, 0.1, 0}, {5, 10, 1, 0, 40}, {5, 41, 0, 0.1, 40}, {-1, 0, 0, 0, 0}}},
    /* 2/s, burst 3: three at t = 0 allowed, a fourth waits 0.5 s */
    {"{\"type\": \"gcra\", \"per_second\": 2, \"burst\": 3}",
     {{0, 1, 1, 0, 2}, {0, 1, 1, 0, 1}, {0, 1, 1, 0, 0}, {0, 1, 0, 0.5, 0}, {0.5, 1, 1, 0, 0},
      {-1, 0, 0, 0, 0}}},
    /* 2 per 60 s: a third at t = 59 waits 1 s and is allowed at t = 60 */
    {"{\"type\": \"fixed_window\", \"limit\": 2, \"window\": 60}",
     {{0, 1, 1, 0, 1}, {1, 1, 1, 0, 0}, {59, 1, 0, 1, 0}, {60, 1, 1, 0, 1}, {-1, 0, 0, 0, 0}}},
    /* 2 per 10 s: requests at 0 and 4, a third at 5 waits 5 s, allowed at 10 */
    {"{\"type\": \"sliding_window\", \"limit\": 2, \"window\": 10}",
     {{0, 1, 1, 0, 1}, {4, 1, 1, 0, 0}, {5, 1, 0, 5, 0}, {10, 1, 1, 0, 0}, {-1, 0, 0, 0, 0}}},
    /* 10 per 10 s, 10 taken in [0, 10): at 12.5 the estimate is 10 * 7.5 / 10 = 7.5, so a
     * cost of 3 waits until 13, when 10 * 7 / 10 + 3 = 10 fits exactly */
    {"{\"type\": \"sliding_window_counter\", \"limit\": 10, \"window\": 10}",
     {{0, 10, 1, 0, 0}, {12.5, 3, 0, 0.5, 2.5}, {13, 3, 1, 0, 0}, {-1, 0, 0, 0, 0}}},
    /* 2 slots: the third is denied with the default retry of 1 s */
    {"{\"type\": \"concurrency\", \"limit\": 2}",
     {{0, 1, 1, 0, 1}, {0, 1, 1, 0, 0}, {0, 1, 0, 1, 0}, {-1, 0, 0, 0, 0}}},
};

START_TEST(conformance_table)
{
    const ccase *c = &conformance[_i];
    char json[512];
    snprintf(json, sizeof json, "{\"levels\": [{\"name\": \"k\", \"rules\": [%s]}]}", c->rule);
    for (int which = 0; which < 2; which++) {
        rl_registry *reg = rl_registry_new();
        char prefix[32];
        snprintf(prefix, sizeof prefix, "conf%d:", _i);
        rl_limiter *lim = which ? redis_limiter(reg, json, prefix, 0, NULL)
                                : memory_limiter(reg, json);
        for (const crow *r = c->rows; r->t >= 0; r++) {
            rl_decision d;
            ck_assert_int_eq(acquire(lim, "k=x", FP(r->cost), S(r->t), 0, 0, &d), RL_OK);
            ck_assert_msg(d.allowed == r->allowed, "%s store, %s, t=%g: allowed %d",
                          which ? "redis" : "memory", c->rule, r->t, d.allowed);
            ck_assert_int_eq(d.retry_after, S(r->wait));
            ck_assert_int_eq(d.applied[0].st.remaining, FP(r->remaining));
        }
        rl_limiter_free(lim);
        rl_registry_free(reg);
    }
}
END_TEST

/* ---- random traces through both stores ----------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rnd(uint64_t *s, uint64_t n)
{
    return n ? rng_next(s) % n : 0;
}

/* A fixed point quota in [1e-6, max_units]: mostly a few units, sometimes extreme. */
static rl_fp rnd_amount(uint64_t *s, int64_t max_units)
{
    rl_fp max = (rl_fp)max_units * RL_FP_ONE, v;
    uint64_t k = rnd(s, 40);
    if (k < 18)
        v = (rl_fp)(1 + rnd(s, 20)) * RL_FP_ONE;
    else if (k < 26)
        v = RL_FP_ONE + (rl_fp)rnd(s, 20 * RL_FP_ONE);
    else if (k < 36)
        v = (rl_fp)(20 + rnd(s, 1000)) * RL_FP_ONE + (rl_fp)rnd(s, RL_FP_ONE);
    else if (k < 37)
        v = RL_FP_ONE / 2 + (rl_fp)rnd(s, RL_FP_ONE / 2);
    else if (k < 39)
        v = 1 + (rl_fp)rnd(s, (uint64_t)max);
    else
        v = 1 + (rl_fp)rnd(s, 1000);
    return v > max ? max : v;
}

/* A rate per second: mostly 0.1 to 10000, sometimes extreme. */
static rl_fp rnd_rate(uint64_t *s)
{
    uint64_t k = rnd(s, 10);
    if (k < 5)
        return RL_FP_ONE / 10 + (rl_fp)rnd(s, 10 * RL_FP_ONE);
    if (k < 7)
        return (rl_fp)(10 + rnd(s, 10000)) * RL_FP_ONE + (rl_fp)rnd(s, RL_FP_ONE);
    if (k < 8)
        return 1 + (rl_fp)rnd(s, RL_FP_ONE / 100);
    if (k < 9)
        return 1 + (rl_fp)rnd(s, (uint64_t)RL_FP_MAX);
    return (rl_fp)(1 + rnd(s, 5)) * RL_FP_ONE;
}

/* A duration in [1 ms, max_s], with nanoseconds: mostly up to a minute. */
static rl_ns rnd_duration(uint64_t *s, int64_t max_s)
{
    rl_ns v;
    uint64_t k = rnd(s, 10);
    if (k < 4)
        v = RL_NS_PER_SEC / 1000 + (rl_ns)rnd(s, 10 * RL_NS_PER_SEC);
    else if (k < 6)
        v = (rl_ns)(1 + rnd(s, 60)) * RL_NS_PER_SEC;
    else if (k < 8)
        v = (rl_ns)(1 + rnd(s, 600)) * RL_NS_PER_SEC + (rl_ns)rnd(s, RL_NS_PER_SEC);
    else
        v = (rl_ns)rnd(s, (uint64_t)max_s) * RL_NS_PER_SEC + (rl_ns)rnd(s, RL_NS_PER_SEC);
    if (v < RL_NS_PER_SEC / 1000)
        v = RL_NS_PER_SEC / 1000;
    return v > max_s * RL_NS_PER_SEC ? max_s * RL_NS_PER_SEC : v;
}

static int put_fp(char *b, size_t n, rl_fp v)
{
    return snprintf(b, n, "%lld.%06lld", (long long)(v / RL_FP_ONE), (long long)(v % RL_FP_ONE));
}

static int put_ns(char *b, size_t n, rl_ns v)
{
    return snprintf(b, n, "%lld.%09lld", (long long)(v / RL_NS_PER_SEC),
                    (long long)(v % RL_NS_PER_SEC));
}

static const char *const type_names[] = {"token_bucket", "gcra", "fixed_window",
                                         "sliding_window", "sliding_window_counter",
                                         "concurrency", "deny_list"};

/* Writes one random rule of type t as JSON into b. */
static size_t rnd_rule(uint64_t *s, int t, int idx, char *b, size_t n)
{
    char x[40], y[40];
    size_t u = (size_t)snprintf(b, n, "{\"type\": \"%s\", \"name\": \"r%d\"", type_names[t], idx);
    switch (t) {
    case 0:
        put_fp(x, sizeof x, rnd_amount(s, 1000000000000));
        put_fp(y, sizeof y, rnd_rate(s));
        u += (size_t)snprintf(b + u, n - u, ", \"capacity\": %s, \"per_second\": %s", x, y);
        break;
    case 1:
        put_fp(x, sizeof x, rnd_rate(s));
        put_fp(y, sizeof y, rnd_amount(s, 1000000000000));
        u += (size_t)snprintf(b + u, n - u, ", \"per_second\": %s, \"burst\": %s", x, y);
        break;
    case 2:
    case 3:
    case 4:
        put_fp(x, sizeof x, rnd_amount(s, t == 3 ? 1000000 : 1000000000000));
        put_ns(y, sizeof y, rnd_duration(s, 31622400));
        u += (size_t)snprintf(b + u, n - u, ", \"limit\": %s, \"window\": %s", x, y);
        break;
    case 5:
        put_fp(x, sizeof x, rnd_amount(s, 20));
        put_ns(y, sizeof y, rnd_duration(s, 3600));
        u += (size_t)snprintf(b + u, n - u, ", \"limit\": %s, \"retry\": %s", x, y);
        if (rnd(s, 3) == 0)
            u += (size_t)snprintf(b + u, n - u, ", \"unit\": \"cost\"");
        break;
    default:
        u += (size_t)snprintf(b + u, n - u, ", \"keys\": [\"zz\", \"dflt\"]");
        break;
    }
    if (t < 5 && rnd(s, 4) == 0)
        u += (size_t)snprintf(b + u, n - u, ", \"unit\": \"requests\"");
    if (t < 6 && rnd(s, 5) == 0)
        u += (size_t)snprintf(b + u, n - u,
                              ", \"reserved\": {\"fraction\": 0.%02d, \"min_priority\": 2}",
                              (int)(1 + rnd(s, 98)));
    u += (size_t)snprintf(b + u, n - u, "}");
    return u;
}

/* A random configuration of 1 to 3 levels of 1 to 3 rules; level 0 starts with type force. */
static void rnd_config(uint64_t *s, int force, char *b, size_t n)
{
    size_t u = (size_t)snprintf(b, n, "{\"reservation_ttl\": %d, \"levels\": [",
                                (int)(1 + rnd(s, 600)));
    int nlevels = 1 + (int)rnd(s, 3);
    for (int l = 0; l < nlevels; l++) {
        u += (size_t)snprintf(b + u, n - u, "%s{\"name\": \"l%d\", %s\"rules\": [", l ? ", " : "",
                              l, rnd(s, 3) == 0 ? "\"default_key\": \"dflt\", " : "");
        int nrules = 1 + (int)rnd(s, 3);
        for (int i = 0; i < nrules; i++) {
            int t = l == 0 && i == 0 ? force : (int)rnd(s, 7);
            if (i)
                u += (size_t)snprintf(b + u, n - u, ", ");
            u += rnd_rule(s, t, i, b + u, n - u);
        }
        u += (size_t)snprintf(b + u, n - u, "]}");
    }
    snprintf(b + u, n - u, "]}");
}

static rl_fp rnd_cost(uint64_t *s)
{
    uint64_t k = rnd(s, 20);
    if (k < 12)
        return (rl_fp)(1 + rnd(s, 3)) * RL_FP_ONE;
    if (k < 15)
        return 1 + (rl_fp)rnd(s, RL_FP_ONE);
    if (k < 18)
        return (rl_fp)(3 + rnd(s, 50)) * RL_FP_ONE + (rl_fp)rnd(s, RL_FP_ONE);
    if (k < 19)
        return 1 + (rl_fp)rnd(s, 1000);
    return 1 + (rl_fp)rnd(s, (uint64_t)RL_FP_MAX);
}

/* One of n reservations, mostly a recent one. */
static size_t pick_id(uint64_t *s, size_t n)
{
    if (n > 6 && rnd(s, 5) != 0)
        return n - 1 - (size_t)rnd(s, 6);
    return (size_t)rnd(s, n);
}

#define TRACES 28
#define STEPS 400

static void compare(const rl_decision *a, const rl_decision *b, const char *ctx)
{
    ck_assert_msg(a->allowed == b->allowed, "%s: allowed %d vs %d", ctx, a->allowed, b->allowed);
    ck_assert_msg(a->retry_after == b->retry_after, "%s: retry_after %" PRId64 " vs %" PRId64,
                  ctx, a->retry_after, b->retry_after);
    ck_assert_msg(a->blocked == b->blocked, "%s: blocked %d vs %d", ctx, a->blocked, b->blocked);
    ck_assert_msg(a->napplied == b->napplied, "%s: applied %zu vs %zu", ctx, a->napplied,
                  b->napplied);
    ck_assert_msg(!a->reservation[0] == !b->reservation[0], "%s: reservation '%s' vs '%s'", ctx,
                  a->reservation, b->reservation);
    for (size_t i = 0; i < a->napplied; i++) {
        const rl_applied *x = &a->applied[i], *y = &b->applied[i];
        ck_assert_msg(x->wait == y->wait, "%s: [%zu] %s wait %" PRId64 " vs %" PRId64, ctx, i,
                      x->rule->name, x->wait, y->wait);
        ck_assert_msg(x->has_status == y->has_status, "%s: [%zu] has_status", ctx, i);
        if (!x->has_status)
            continue;
        ck_assert_msg(x->st.limit == y->st.limit && x->st.remaining == y->st.remaining &&
                          x->st.reset_after == y->st.reset_after && x->st.window == y->st.window,
                      "%s: [%zu] %s status (%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                      ") vs (%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ")",
                      ctx, i, x->rule->name, x->st.limit, x->st.remaining, x->st.reset_after,
                      x->st.window, y->st.limit, y->st.remaining, y->st.reset_after,
                      y->st.window);
    }
}

/* Replays one random trace through a memory limiter and a Redis limiter with a manual clock;
 * every answer must be the same. */
START_TEST(differential_replay)
{
    uint64_t seed = 0x5eed0000u + (uint64_t)_i, s = seed;
    const char *env = getenv("RL_SEED");
    if (env)
        s = seed = strtoull(env, NULL, 0);
    char json[8192], prefix[40], ctx[256];
    rnd_config(&s, _i % 7, json, sizeof json);
    snprintf(prefix, sizeof prefix, "diff%" PRIx64 ":", seed);
    pair p;
    pair_new(&p, json, prefix);
    char ids[64][2][RL_RESERVATION_ID];
    size_t nids = 0;
    static const char *const values[] = {"a", "b", "c", "a", "b", "zz"};
    size_t nlevels = rl_limiter_config(p.mem)->nlevels;
    rl_ns now = rnd(&s, 2) ? 0 : (rl_ns)1700000000 * RL_NS_PER_SEC + (rl_ns)rnd(&s, 1u << 30);
    for (int step = 0; step < STEPS; step++) {
        /* time moves forward in steps of any size, and sometimes back */
        uint64_t dt = rnd(&s, 40);
        if (dt < 12)
            now += (rl_ns)rnd(&s, 1000);
        else if (dt < 24)
            now += (rl_ns)rnd(&s, RL_NS_PER_SEC / 10);
        else if (dt < 34)
            now += (rl_ns)rnd(&s, 2 * RL_NS_PER_SEC);
        else if (dt < 36)
            now += (rl_ns)rnd(&s, 60 * RL_NS_PER_SEC);
        else if (dt < 37)
            now += (rl_ns)rnd(&s, 3600 * RL_NS_PER_SEC);
        else {
            rl_ns back = (rl_ns)rnd(&s, 5 * RL_NS_PER_SEC);
            now = now > back ? now - back : 0;
        }
        snprintf(ctx, sizeof ctx, "seed 0x%" PRIx64 " step %d t=%" PRId64, seed, step, now);
        int op = (int)rnd(&s, 10);
        if (op < 7 || nids == 0) {
            char keys[64] = "";
            for (size_t l = 0, u = 0; l < nlevels; l++)
                if (rnd(&s, 8) != 0)
                    u += (size_t)snprintf(keys + u, sizeof keys - u, "%sl%zu=%s", u ? "," : "",
                                          l, values[rnd(&s, 6)]);
            rl_fp cost = rnd_cost(&s);
            unsigned flags = rnd(&s, 10) == 0 ? RL_DRY_RUN : 0;
            flags |= rnd(&s, 5) < 2 ? RL_RESERVE : 0;
            int64_t prio = (int64_t)rnd(&s, 4);
            rl_decision a, b;
            int ra = acquire(p.mem, keys, cost, now, flags, prio, &a);
            int rb = acquire(p.red, keys, cost, now, flags, prio, &b);
            ck_assert_msg(ra == RL_OK && rb == RL_OK, "%s: acquire %d / %d", ctx, ra, rb);
            compare(&a, &b, ctx);
            if (a.reservation[0]) {
                if (nids == 64) {
                    memmove(ids, ids + 1, sizeof ids[0] * 63);
                    nids--;
                }
                memcpy(ids[nids][0], a.reservation, RL_RESERVATION_ID);
                memcpy(ids[nids][1], b.reservation, RL_RESERVATION_ID);
                nids++;
            }
        } else if (op < 9) {
            size_t k = pick_id(&s, nids);
            rl_fp actual = rnd(&s, 4) == 0 ? 0 : rnd_cost(&s);
            rl_settlement x = {0}, y = {0};
            rl_err e1, e2;
            int ra = rl_settle(p.mem, ids[k][0], actual, now, &x, &e1);
            int rb = rl_settle(p.red, ids[k][1], actual, now, &y, &e2);
            ck_assert_msg(ra == rb, "%s: settle %d vs %d (%s)", ctx, ra, rb,
                          rb == RL_ESTORE ? e2.msg : "");
            ck_assert_msg(memcmp(&x, &y, sizeof x) == 0, "%s: settlement differs", ctx);
        } else {
            size_t k = pick_id(&s, nids);
            rl_err e1, e2;
            int ra = rl_release(p.mem, ids[k][0], now, &e1);
            int rb = rl_release(p.red, ids[k][1], now, &e2);
            ck_assert_msg(ra == rb, "%s: release %d vs %d (%s)", ctx, ra, rb,
                          rb == RL_ESTORE ? e2.msg : "");
        }
    }
    pair_free(&p);
}
END_TEST

Suite *redis_store_suite(void);
Suite *redis_store_suite(void)
{
    Suite *s = suite_create("redis_store");
    TCase *tc = tcase_create("conformance");
    tcase_add_checked_fixture(tc, srv_up, srv_down);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, conformance_table, 0,
                        (int)(sizeof conformance / sizeof conformance[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("differential");
    tcase_add_checked_fixture(tc, srv_up, srv_down);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, differential_replay, 0, TRACES);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(redis_store_suite()) ? 1 : 0;
}
