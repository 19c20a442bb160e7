/*
 * test_decide_paths.c - the memory store's decision from the keys alone (decide_levels,
 * service/core/core.h) against its decision of a plan: one random trace through two limiters,
 * one that offers requests to decide_levels and one that plans every request, must give the
 * same answers, statuses, errors and key counts at every step. The trace mixes what the short
 * path must hand to the plan (new keys, reservations, rules that hold slots, tier changes that
 * retype a position, a bound on key states) with what it decides itself (shadow, charge,
 * reserved shares, requests units, composed and default keys, stateless rules, dry runs, time
 * going back).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "testutil.h"

/* The global level's reserved share is most of it, so that a request's priority often decides
 * there: a way of deciding that lost the headroom (or gave it where there is none) differs. */
static const char *paths_cfg =
    "{\"levels\": ["
    "{\"name\": \"user\", \"tiered\": true},"
    "{\"name\": \"team\", \"rules\": ["
    "  {\"type\": \"token_bucket\", \"capacity\": 12, \"per_second\": 3, \"shadow\": true},"
    "  {\"type\": \"gcra\", \"per_second\": 2, \"burst\": 5, \"charge\": true},"
    "  {\"type\": \"sliding_window_counter\", \"limit\": 10, \"window\": 2, "
    "   \"unit\": \"requests\"}]},"
    "{\"name\": \"ip\", \"shadow\": true, \"rules\": ["
    "  {\"type\": \"token_bucket\", \"capacity\": 3, \"per_second\": 1}]},"
    "{\"name\": \"ue\", \"compose\": [\"user\", \"event\"], \"rules\": ["
    "  {\"type\": \"fixed_window\", \"limit\": 3, \"window\": 1}]},"
    "{\"name\": \"event\", \"rules\": [{\"type\": \"deny_list\", \"keys\": [\"bad\"]}]},"
    "{\"name\": \"api\", \"rules\": [{\"type\": \"concurrency\", \"limit\": 2}]},"
    "{\"name\": \"global\", \"default_key\": \"*\", \"rules\": ["
    "  {\"type\": \"token_bucket\", \"capacity\": 40, \"per_second\": 20, "
    "   \"reserved\": {\"fraction\": 0.75, \"min_priority\": 2}}]}],"
    "\"tiers\": {"
    "  \"free\": [{\"type\": \"token_bucket\", \"capacity\": 5, \"per_second\": 2},"
    "            {\"type\": \"fixed_window\", \"limit\": 8, \"window\": 3, "
    "             \"unit\": \"requests\"}],"
    "  \"pro\": [{\"type\": \"sliding_window\", \"limit\": 6, \"window\": 2},"
    "           {\"type\": \"token_bucket\", \"capacity\": 20, \"per_second\": 5, "
    "            \"reserved\": {\"fraction\": 0.3, \"min_priority\": 1}}],"
    "  \"odd\": [{\"type\": \"gcra\", \"per_second\": 3, \"burst\": 4, \"shadow\": true}]},"
    "\"default_tier\": \"free\"}";

/* decide_levels of the store under test, counted: decided and declined */
static rl__decide_levels_fn inner_levels;
static long n_decided, n_declined;

static int counted_levels(void *cls, const rl__levels *q, rl_decision *d)
{
    int rc = inner_levels(cls, q, d);
    ck_assert(rc == RL_OK || rc == RL__DECLINED);
    if (rc == RL_OK)
        n_decided++;
    else
        n_declined++;
    return rc;
}

/* A limiter over a memory store (bounded by max_keys) that decides requests from their keys
 * (levels: through counted_levels) or plans every request (the plan alone). */
static rl_limiter *limiter_over(int levels, uint64_t max_keys, rl_registry **reg)
{
    rld_settings set;
    rl_config *cfg;
    rl_limiter *lim;
    rl_err err = {{0}};
    rl_store *st = rl_memory_store_new_bounded(max_keys);
    inner_levels = rl__store_decide_levels(st);
    ck_assert(inner_levels != NULL);
    *reg = rl_registry_new();
    ck_assert_int_eq(rld_config_parse(paths_cfg, strlen(paths_cfg), *reg, &set, &cfg, &err), RL_OK);
    rld_settings_clear(&set);
    ck_assert_msg(rl_limiter_new(cfg, st, &lim, &err) == RL_OK, "%s", err.msg);
    rl__limiter_set_decide_levels(lim, levels ? counted_levels : NULL);
    return lim;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng % n;
}

/* A random request into req and ds (names and values from fixed tables). */
static void random_request(rl_request *req, rl_descriptor *ds, rl_ns now)
{
    static const char *const users[] = {"ann", "bob", "cy", "a-user-longer-than-16", "eve", "f"};
    static const char *const teams[] = {"t1", "t2", "team-three"};
    static const char *const ips[] = {"10.0.0.1", "10.0.0.2", "10.0.0.3"};
    static const char *const events[] = {"login", "view", "bad"};
    static const char *const apis[] = {"k1", "k2"};
    static const struct {
        const char *name;
        const char *const *v;
        size_t n;
        unsigned per100;
    } d[] = {{"user", users, 6, 90},
             {"team", teams, 3, 70},
             {"ip", ips, 3, 50},
             {"event", events, 3, 50},
             {"api", apis, 2, 10}};
    size_t n = 0;
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (rnd(100) < d[i].per100) {
            const char *v = d[i].v[rnd(d[i].n)];
            ds[n++] = (rl_descriptor){d[i].name, strlen(d[i].name), v, strlen(v)};
        }
    unsigned bad = (unsigned)rnd(60);
    if (bad == 0)
        ds[n++] = (rl_descriptor){"usr", 3, "x", 1}; /* unknown */
    else if (bad == 1 && n > 0)
        ds[n++] = ds[0]; /* given twice */
    else if (bad == 2)
        ds[n++] = (rl_descriptor){"ip", 2, "", 0}; /* empty (or twice) */
    rl_fp cost = rnd(10) == 0 ? (rl_fp)rnd(3 * RL_FP_ONE) + 1 : (rl_fp)(rnd(4) + 1) * RL_FP_ONE;
    if (rnd(80) == 0)
        cost = 50 * RL_FP_ONE; /* never fits */
    unsigned flags = (rnd(8) == 0 ? RL_DRY_RUN : 0) | (rnd(12) == 0 ? RL_RESERVE : 0);
    *req = (rl_request){.desc = ds,
                        .ndesc = n,
                        .cost = cost,
                        .priority = (int64_t)rnd(3),
                        .flags = flags,
                        .now = now};
}

static void same_status(const rl_decision *a, const rl_decision *b, size_t i)
{
    const rl_rule_status *sa = rl_decision_status(a, i), *sb = rl_decision_status(b, i);
    ck_assert_int_eq(sa == NULL, sb == NULL);
    if (!sa)
        return;
    ck_assert_int_eq(sa->limit, sb->limit);
    ck_assert_int_eq(sa->remaining, sb->remaining);
    ck_assert_int_eq(sa->reset_after, sb->reset_after);
    ck_assert_int_eq(sa->window, sb->window);
    ck_assert_int_eq(sa->next, sb->next);
}

static void same_decision(const rl_decision *a, const rl_decision *b)
{
    ck_assert_int_eq(a->allowed, b->allowed);
    ck_assert_int_eq(a->retry_after, b->retry_after);
    ck_assert_int_eq(a->blocked, b->blocked);
    ck_assert_int_eq(a->reservation[0] != 0, b->reservation[0] != 0);
    ck_assert_uint_eq(a->napplied, b->napplied);
    for (size_t i = 0; i < a->napplied; i++) {
        const rl_applied *x = &a->applied[i], *y = &b->applied[i];
        ck_assert_uint_eq(x->level, y->level);
        ck_assert_uint_eq(x->slot, y->slot);
        ck_assert_str_eq(x->rule->name, y->rule->name);
        ck_assert_uint_eq(x->keylen, y->keylen);
        ck_assert(memcmp(x->key, y->key, x->keylen) == 0);
        ck_assert_int_eq(x->wait, y->wait);
        ck_assert_int_eq(x->has_status, y->has_status);
        ck_assert_uint_eq(x->fallback, y->fallback);
        ck_assert_uint_eq(x->shadow, y->shadow);
        ck_assert_uint_eq(x->shadow_denied, y->shadow_denied);
        ck_assert_uint_eq(x->charge, y->charge);
        same_status(a, b, i);
    }
}

static void same_counts(rl_limiter *a, rl_limiter *b)
{
    rl_stats sa, sb;
    for (size_t l = 0; l < rl_limiter_config(a)->nlevels; l++)
        ck_assert_uint_eq(rl_limiter_keys(a, l), rl_limiter_keys(b, l));
    rl_limiter_stats(a, &sa);
    rl_limiter_stats(b, &sb);
    ck_assert_uint_eq(sa.key_states, sb.key_states);
    ck_assert_uint_eq(sa.reservations_active, sb.reservations_active);
}

#define RESV_KEPT 16

/* Now and then: a tier change, a settlement or release of an earlier reservation, a tick;
 * the same on both limiters. ids[k][i] are limiter k's reservation ids. */
static void housekeeping(rl_limiter *const lim[2], char ids[2][RESV_KEPT][RL_RESERVATION_ID],
                         rl_ns now)
{
    static const char *const users[] = {"ann", "bob", "cy", "a-user-longer-than-16"};
    static const char *const tiers[] = {"free", "pro", "odd"};
    unsigned what = (unsigned)rnd(40), r = (unsigned)rnd(RESV_KEPT);
    const char *user = users[rnd(4)], *tier = tiers[rnd(3)];
    rl_fp actual = (rl_fp)rnd(5 * RL_FP_ONE);
    int rc[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        rl_err err;
        rl_settlement st;
        if (what == 0)
            rc[k] = rl_quota_set(lim[k], user, tier, NULL, &err);
        else if (what == 1)
            rc[k] = rl_quota_clear(lim[k], user);
        else if (what == 2 && ids[k][r][0])
            rc[k] = rl_settle(lim[k], ids[k][r], actual, now, &st, &err);
        else if (what == 3 && ids[k][r][0])
            rc[k] = rl_release(lim[k], ids[k][r], now, &err);
        else if (what == 4)
            rl_limiter_tick(lim[k], now);
    }
    ck_assert_int_eq(rc[0], rc[1]);
}

#define MANY_KEYS 20000

/* Gives the user and ip levels MANY_KEYS keys each on both limiters (their answers compared
 * as well): about 1,250 records a segment, past the size from which the store prefetches a
 * level's records and evaluates that level after the others. Requests come 0.05 s apart,
 * as often as the global level allows. Returns the time after the last. */
static rl_ns many_keys(rl_limiter *const lim[2], rl_ns now)
{
    for (int u = 0; u < MANY_KEYS; u++) {
        char name[16];
        int len = snprintf(name, sizeof name, "k%d", u);
        rl_descriptor ds[2] = {{"user", 4, name, (size_t)len}, {"ip", 2, name, (size_t)len}};
        rl_request req = {.desc = ds, .ndesc = 2, .cost = RL_FP_ONE, .now = now += S(0.05)};
        rl_decision d[2];
        rl_err err;
        for (int k = 0; k < 2; k++)
            ck_assert_int_eq(rl_acquire(lim[k], &req, &d[k], &err), RL_OK);
        same_decision(&d[0], &d[1]);
        for (int k = 0; k < 2; k++)
            rl_decision_done(&d[k]);
    }
    for (int k = 0; k < 2; k++) {
        ck_assert_uint_ge(rl_limiter_keys(lim[k], 0), 2 * MANY_KEYS); /* two rules a user */
        ck_assert_uint_ge(rl_limiter_keys(lim[k], 2), MANY_KEYS);
    }
    return now;
}

/* The trace, unbounded (_i == 0), with a bound on key states that it reaches (1), and
 * unbounded over large tables (2). */
START_TEST(short_path_decides_as_the_plan)
{
    rl_registry *reg[2];
    uint64_t bound = _i == 1 ? 24 : 0;
    rl_limiter *lim[2] = {limiter_over(1, bound, &reg[0]), limiter_over(0, bound, &reg[1])};
    char ids[2][RESV_KEPT][RL_RESERVATION_ID] = {{{0}}};
    rl_ns now = S(1);
    long full = 0;
    n_decided = n_declined = 0;
    if (_i == 2)
        now = many_keys(lim, now);
    for (int step = 0; step < 6000; step++) {
        rl_descriptor ds[8];
        rl_request req;
        rl_decision d[2];
        rl_err err[2];
        int rc[2];
        now += (rl_ns)rnd((uint64_t)S(0.2));
        if (rnd(30) == 0)
            now -= S(0.3); /* back in time: rules keep their last update */
        random_request(&req, ds, now);
        for (int k = 0; k < 2; k++)
            rc[k] = rl_acquire(lim[k], &req, &d[k], &err[k]);
        ck_assert_int_eq(rc[0], rc[1]);
        if (rc[0] != RL_OK) {
            ck_assert_str_eq(err[0].msg, err[1].msg);
            full += rc[0] == RL_EFULL;
        } else {
            same_decision(&d[0], &d[1]);
            for (int k = 0; k < 2; k++) {
                if (d[k].reservation[0])
                    memcpy(ids[k][step % RESV_KEPT], d[k].reservation, RL_RESERVATION_ID);
                rl_decision_done(&d[k]);
            }
        }
        housekeeping(lim, ids, now);
        if (step % 97 == 0 && _i != 2)
            same_counts(lim[0], lim[1]);
    }
    /* a tick sweeps a bounded share of large tables, where records lie as each store's random
     * seed put them: idle records (which decide as missing ones) are dropped at another pace */
    for (int t = 0; _i == 2 && t < 100; t++)
        for (int k = 0; k < 2; k++)
            rl_limiter_tick(lim[k], now);
    same_counts(lim[0], lim[1]);
    /* both ways were taken: many requests decided from the keys, some handed to the plan
     * (most of them near the bound, where the store makes room first) */
    ck_assert_msg(n_decided > (_i == 1 ? 300 : 3000) && n_declined > 100,
                  "decided %ld, declined %ld", n_decided, n_declined);
    if (_i == 1)
        ck_assert_msg(full > 0, "the bound was never reached");
    for (int k = 0; k < 2; k++) {
        rl_limiter_free(lim[k]);
        rl_registry_free(reg[k]);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decide_paths");
    TCase *tc = tcase_create("core");
    /* the large tables under the sanitizers: under ThreadSanitizer beside three busy loops the
     * three runs took 63 s (the longest test function 15.6 s), and 60 s was some three times a
     * run */
    tcase_set_timeout(tc, 240);
    tcase_add_loop_test(tc, short_path_decides_as_the_plan, 0, 3);
    suite_add_tcase(s, tc);
    return tu_run(s) ? 1 : 0;
}
