/*
 * test_rules.c - every built-in rule type against a table of (time, cost -> decision, wait,
 * balance) rows worked out by hand, including boundaries, rounding of waits and backward time.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "testutil.h"

#define NEVER (-1.0)
#define MAX_ROWS 16
#define END {-1, 0, 0, 0, 0, 0}

typedef struct row {
    double t, cost;
    int dry; /* 1: a dry run */
    int allowed;
    double wait; /* seconds; NEVER */
    double remaining;
} row;

typedef struct rule_case {
    const char *name;
    const char *rule; /* JSON of the one rule of level "k" */
    const char *key;
    row rows[MAX_ROWS];
} rule_case;

static const rule_case cases[] = {
    {"token_bucket: the design's single-bucket trace",
     "{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": 2}",
     "k=x",
     {{0, 7, 0, 1, 0, 3},
      {1, 5, 0, 1, 0, 0},
      /* 0.4 refilled by 1.2; 1 needs 0.6 more at 2/s */
      {1.2, 1, 0, 0, 0.3, 0.4},
      {1.5, 1, 0, 1, 0, 0},
      {100, 20, 0, 0, NEVER, 10},
      END}},
    {"token_bucket: exact refill (5/s emptied at 0.1 holds exactly 1 at 0.3)",
     "{\"type\": \"token_bucket\", \"capacity\": 5, \"per_second\": 5}",
     "k=x",
     {{0.1, 5, 0, 1, 0, 0}, {0.3, 1, 0, 1, 0, 0}, {0.3, 1, 0, 0, 0.2, 0}, END}},
    {"token_bucket: refills past 64 bits (10^12/s for 0.25 s) and within them (10 ns later)",
     "{\"type\": \"token_bucket\", \"capacity\": 1000000000000, \"per_second\": "
     "1000000000000}",
     "k=x",
     {{0, 1e12, 0, 1, 0, 0},
      /* 2.5e11 refilled, 1e11 taken */
      {0.25, 1e11, 0, 1, 0, 1.5e11},
      /* 1e4 more in 10 ns; 2e11 is 49999990000 short: 0.04999999 s at 1e12/s */
      {0.25000001, 2e11, 1, 0, 0.04999999, 150000010000},
      END}},
    {"token_bucket: waits round up to the nanosecond",
     "{\"type\": \"token_bucket\", \"capacity\": 1, \"per_second\": 3}",
     "k=x",
     {{0, 1, 0, 1, 0, 0},
      /* 1/3 s is 333333333.3 ns: rounded up */
      {0, 1, 0, 0, 0.333333334, 0},
      /* 999999 refilled by then, plus 0.999 of a unit: one nanosecond short */
      {0.333333333, 1, 0, 0, 0.000000001, 0.999999},
      {0.333333334, 1, 0, 1, 0, 0},
      END}},
    {"token_bucket: backward time keeps the state and the last update",
     "{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": 2}",
     "k=x",
     {{5, 10, 0, 1, 0, 0},
      /* at 3 nothing refills: still empty; the wait counts from 3 to 5, then 0.5 s */
      {3, 1, 1, 0, 2.5, 0},
      {4, 1, 0, 0, 1.5, 0},
      /* 0.5 s after the last update (5), not after 4: one token */
      {5.5, 1, 0, 1, 0, 0},
      END}},
    {"sliding_window: 2 per 10 s",
     "{\"type\": \"sliding_window\", \"limit\": 2, \"window\": 10}",
     "k=x",
     {{0, 1, 0, 1, 0, 1},
      {4, 1, 0, 1, 0, 0},
      /* the entry of t = 0 expires at 10 */
      {5, 1, 0, 0, 5, 0},
      {9.999999999, 1, 0, 0, 0.000000001, 0},
      {10, 1, 0, 1, 0, 0},
      /* entries 4 (expires at 14, ts <= now - window) and 10 */
      {14, 1, 0, 1, 0, 0},
      /* 2 needs both 10 and 14 gone: 14 expires at 24 */
      {14, 2, 0, 0, 10, 0},
      {14, 3, 0, 0, NEVER, 0},
      /* backward: counted at the last update (14), so it expires at 24 too */
      {12, 1, 1, 0, 8, 0},
      END}},
    {"sliding_window_counter: 10 per 10 s",
     "{\"type\": \"sliding_window_counter\", \"limit\": 10, \"window\": 10}",
     "k=x",
     {{0, 10, 0, 1, 0, 0},
      /* previous window weighted 7.5/10: estimate 7.5; 3 fits when it is 7, at 13 */
      {12.5, 3, 0, 0, 0.5, 2.5},
      {12.5, 2, 0, 1, 0, 0.5},
      /* 10 * 0.7 + 2 = 9 */
      {13, 1, 0, 1, 0, 0},
      /* needs an empty estimate: the current 3 weigh until the window after next, 30 */
      {13, 10, 0, 0, 17, 0},
      {13, 11, 0, 0, NEVER, 0},
      /* [20, 30): previous = 3, weighted 0.5: 1.5 + 1 */
      {25, 1, 0, 1, 0, 7.5},
      /* backward: the estimate at the last update (25) */
      {21, 1, 1, 1, 0, 7.5},
      END}},
    {"fixed_window: 2 per 60 s",
     "{\"type\": \"fixed_window\", \"limit\": 2, \"window\": 60}",
     "k=x",
     {{0, 1, 0, 1, 0, 1},
      {1, 1, 0, 1, 0, 0},
      {59, 1, 0, 0, 1, 0},
      {60, 1, 0, 1, 0, 1},
      {60, 3, 0, 0, NEVER, 1},
      /* backward into the old window: counted in the window of the last update */
      {59.5, 1, 0, 1, 0, 0},
      {61, 1, 0, 0, 59, 0},
      END}},
    {"gcra: 2/s with a burst of 3",
     "{\"type\": \"gcra\", \"per_second\": 2, \"burst\": 3}",
     "k=x",
     {{0, 1, 0, 1, 0, 2},
      {0, 1, 0, 1, 0, 1},
      {0, 1, 0, 1, 0, 0},
      {0, 1, 0, 0, 0.5, 0},
      {0.5, 1, 0, 1, 0, 0},
      {0.5, 4, 0, 0, NEVER, 0},
      /* backward: no emission credit for the earlier time */
      {0.25, 1, 1, 0, 0.75, 0},
      END}},
    {"deny_list: listed keys never fit",
     "{\"type\": \"deny_list\", \"keys\": [\"mallory\", \"eve\"]}",
     "k=eve",
     {{0, 1, 0, 0, NEVER, 0}, END}},
    {"concurrency: slots without release",
     "{\"type\": \"concurrency\", \"limit\": 2, \"retry\": 0.25}",
     "k=x",
     {{0, 5, 0, 1, 0, 1}, {0, 5, 0, 1, 0, 0}, {1000, 1, 0, 0, 0.25, 0}, END}},
};

START_TEST(rule_trace)
{
    const rule_case *c = &cases[_i];
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "{\"levels\": [{\"name\": \"k\", \"rules\": [%s]}]}", c->rule);
    rl_limiter *lim = tu_limiter(cfg);
    for (int i = 0; i < MAX_ROWS && c->rows[i].t >= 0; i++) {
        const row *r = &c->rows[i];
        rl_decision d;
        int ok = tu_acquire_ex(lim, c->key, r->cost, S(r->t), r->dry ? RL_DRY_RUN : 0, 0, &d);
        ck_assert_msg(ok == r->allowed, "%s, row %d: allowed %d, expected %d", c->name, i, ok,
                      r->allowed);
        rl_ns want = r->wait == NEVER ? RL_WAIT_NEVER : S(r->wait);
        ck_assert_msg(d.retry_after == want, "%s, row %d: wait %lld ns, expected %lld", c->name,
                      i, (long long)d.retry_after, (long long)want);
        if (d.applied[0].has_status)
            ck_assert_msg(tu_status(&d, 0)->remaining == FP(r->remaining),
                          "%s, row %d: remaining %.6f, expected %.6f", c->name, i,
                          rl_fp_to_double(tu_status(&d, 0)->remaining), r->remaining);
    }
    tu_free(lim);
}
END_TEST

/* ---- the version 2 evaluation, called directly ------------------------------------------
 * Each row evaluates the rule's state at t for cost (wait), takes the cost when take is set
 * (commit), then reads the status from the same evaluation (report): remaining, reset_after
 * and next (the wait for one whole unit more than remains, at most the limit). */

typedef struct erow {
    double t, cost;
    int take;
    double wait; /* seconds; NEVER */
    double remaining, reset_after, next;
} erow;

typedef struct eval_case {
    const char *rule;
    const char *key;
    erow rows[8];
} eval_case;

#define EEND {-1, 0, 0, 0, 0, 0, 0}

static const eval_case ecases[] = {
    /* capacity 10 at 2/s */
    {"{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": 2}",
     "x",
     {/* 7 used: 3.5 s to refill; a 4th token left needs 1 more unit: 0.5 s */
      {0, 7, 1, 0, 3, 3.5, 0.5},
      /* 2 refilled by 1: 5 left, 5 taken: empty, 5 s to full, 0.5 s to the first token */
      {1, 5, 1, 0, 0, 5, 0.5},
      /* 0.4 refilled by 1.2: 1 needs 0.6 more, 0.3 s; 9.6 to refill, 4.8 s */
      {1.2, 1, 0, 0.3, 0.4, 4.8, 0.3},
      {1.5, 1, 1, 0, 0, 5, 0.5},
      /* full again long after: more than the capacity never fits */
      {100, 20, 0, NEVER, 10, 0, 0},
      EEND}},
    /* 2 per 60 s, windows [0, 60), [60, 120) */
    {"{\"type\": \"fixed_window\", \"limit\": 2, \"window\": 60}",
     "x",
     {{0, 1, 1, 0, 1, 60, 60},
      {1, 1, 1, 0, 0, 59, 59},
      {59, 1, 0, 1, 0, 1, 1},
      {60, 1, 1, 0, 1, 60, 60},
      {60, 3, 0, NEVER, 1, 60, 60},
      EEND}},
    /* 2/s, burst 3: a unit moves TAT by 0.5 s; the window is 3 / 2 = 1.5 s */
    {"{\"type\": \"gcra\", \"per_second\": 2, \"burst\": 3}",
     "x",
     {/* TAT 0.5: 2 left; 3 would need TAT 0, 0.5 s away */
      {0, 1, 1, 0, 2, 0.5, 0.5},
      {0, 2, 1, 0, 0, 1.5, 0.5},
      /* TAT 1.5 is 1.25 s ahead: 2.5 used, 0.5 left; 1 fits at 0.5 */
      {0.25, 1, 0, 0.25, 0.5, 1.25, 0.25},
      {1.5, 4, 0, NEVER, 3, 0, 0},
      EEND}},
    /* 10 per 10 s */
    {"{\"type\": \"sliding_window_counter\", \"limit\": 10, \"window\": 10}",
     "x",
     {/* full: the 10 weigh until 20; one unit fits at 11 (10 * 9/10 + 1 = 10) */
      {0, 10, 1, 0, 0, 20, 11},
      /* previous 10 weighted 7.5/10: 3 fits at 13; the previous window ends its weight at 20 */
      {12.5, 3, 0, 0.5, 2.5, 7.5, 0.5},
      /* 7.5 + 2: 0.5 left; 1 more fits when 10 * (10 - e) / 10 + 3 <= 10, e = 3: t = 13 */
      {12.5, 2, 1, 0, 0.5, 17.5, 0.5},
      EEND}},
    /* 2 per 10 s, the log */
    {"{\"type\": \"sliding_window\", \"limit\": 2, \"window\": 10}",
     "x",
     {{0, 1, 1, 0, 1, 10, 10},
      /* one more unit fits when the entry of 0 expires, at 10 */
      {4, 1, 1, 0, 0, 10, 6},
      {5, 1, 0, 5, 0, 9, 5},
      /* both expired at 14 (ts <= 14 - 10): 2 fit, and expire at 24 */
      {14, 2, 1, 0, 0, 10, 10},
      EEND}},
    /* 2 slots, a retry hint of 0.25 s */
    {"{\"type\": \"concurrency\", \"limit\": 2, \"retry\": 0.25}",
     "x",
     {{0, 1, 1, 0, 1, 0, 0.25},
      {0, 1, 1, 0, 0, 0, 0.25},
      {5, 1, 0, 0.25, 0, 0, 0.25},
      {5, 3, 0, NEVER, 0, 0, 0.25},
      EEND}},
};

START_TEST(v2_evaluation)
{
    const eval_case *c = &ecases[_i];
    char cfg[512];
    snprintf(cfg, sizeof cfg, "{\"levels\": [{\"name\": \"k\", \"rules\": [%s]}]}", c->rule);
    rl_limiter *lim = tu_limiter(cfg);
    const rl_rule *r = &rl_limiter_config(lim)->levels[0].rules->v[0];
    const rl_rule_type *t = r->type;
    _Alignas(16) unsigned char state[RL_STATE_MAX];
    memset(state, 0, sizeof state);
    ck_assert_uint_le(t->eval_size, RL_EVAL_MAX);
    for (int i = 0; i < 8 && c->rows[i].t >= 0; i++) {
        const erow *w = &c->rows[i];
        rl_eval ev;
        rl_rule_status st;
        memset(&st, 0xa5, sizeof st); /* report must fill every field */
        rl_ns now = S(w->t);
        rl_ns wait = t->evaluate(r->params, state, c->key, strlen(c->key), now, FP(w->cost), &ev);
        rl_ns want = w->wait == NEVER ? RL_WAIT_NEVER : S(w->wait);
        ck_assert_msg(wait == want, "%s, row %d: wait %lld, expected %lld", t->name, i,
                      (long long)wait, (long long)want);
        if (w->take)
            t->commit(r->params, state, &ev, FP(w->cost));
        t->report(r->params, &ev, now, &st);
        ck_assert_msg(st.remaining == FP(w->remaining), "%s, row %d: remaining %lld", t->name, i,
                      (long long)st.remaining);
        ck_assert_msg(st.reset_after == S(w->reset_after), "%s, row %d: reset_after %lld",
                      t->name, i, (long long)st.reset_after);
        ck_assert_msg(st.next == S(w->next), "%s, row %d: next %lld", t->name, i,
                      (long long)st.next);
        ck_assert_int_eq(st.limit, FP(t->capacity(r->params) / 1e6));
    }
    if (t->state_free)
        t->state_free(r->params, state);
    tu_free(lim);
}
END_TEST

/* A stateless type answers the wait alone and reports nothing. */
START_TEST(v2_evaluation_stateless)
{
    rl_limiter *lim = tu_limiter("{\"levels\": [{\"name\": \"k\", \"rules\": [{\"type\": "
                                 "\"deny_list\", \"keys\": [\"mallory\", \"eve\"]}]}]}");
    const rl_rule *r = &rl_limiter_config(lim)->levels[0].rules->v[0];
    rl_eval ev;
    ck_assert_int_eq(r->type->evaluate(r->params, NULL, "eve", 3, 0, FP(1), &ev), RL_WAIT_NEVER);
    ck_assert_int_eq(r->type->evaluate(r->params, NULL, "bob", 3, 0, FP(1), &ev), 0);
    ck_assert(r->type->commit == NULL && r->type->report == NULL);
    tu_free(lim);
}
END_TEST

/* The precomputed reciprocal divides exactly as the division does, at the edges of every
 * divisor (0, 1, d - 1, d, d + 1, 2^64 - 1) and at pseudo-random numerators. */
START_TEST(reciprocal_division_is_exact)
{
    uint64_t ds[64] = {1, 2, 3, 5, 7, 10, 1000000, 1000000000, 999999937, 6700417,
                       (uint64_t)1 << 63, ((uint64_t)1 << 63) + 1, UINT64_MAX, UINT64_MAX - 1,
                       ((uint64_t)1 << 32) - 1, ((uint64_t)1 << 32) + 1};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 16; i < 64; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ds[i] = (x >> (x % 60)) | 1;
    }
    for (int i = 0; i < 64; i++) {
        uint64_t d = ds[i];
        rl__recip r = rl__recip_make(d);
        uint64_t ns[7] = {0, 1, d - 1, d, d + 1, UINT64_MAX, UINT64_MAX - d};
        for (int k = 0; k < 2007; k++) {
            uint64_t n = k < 7 ? ns[k] : (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x);
            if (k >= 7 && k % 3 == 0)
                n >>= x % 64;
            ck_assert_msg(rl__recip_div(&r, n) == n / d, "%llu / %llu", (unsigned long long)n,
                          (unsigned long long)d);
            rl__u128 wide = (rl__u128)n * 3;
            ck_assert_int_eq(rl__recip_ceil(&r, wide), rl__ceil_div(wide, d));
            ck_assert_int_eq(rl__recip_ceil(&r, n), rl__ceil_div(n, d));
        }
    }
}
END_TEST

/* The same refill in doubles, as a naive implementation would compute it, is short of a token:
 * this is why the core counts in integers. */
START_TEST(naive_doubles_would_deny)
{
    volatile double emptied = 0.1, now = 0.3, rate = 5;
    ck_assert((now - emptied) * rate < 1.0);
}
END_TEST

/* A client that waits exactly retry_after and retries is let in, for every rule type, at
 * awkward rates. */
START_TEST(waiting_retry_after_is_enough)
{
    static const char *rules[] = {
        "{\"type\": \"token_bucket\", \"capacity\": 7, \"per_second\": 0.7}",
        "{\"type\": \"gcra\", \"per_second\": 3, \"burst\": 2}",
        "{\"type\": \"sliding_window\", \"limit\": 3, \"window\": 0.7}",
        "{\"type\": \"sliding_window_counter\", \"limit\": 7, \"window\": 1.3}",
        "{\"type\": \"fixed_window\", \"limit\": 3, \"window\": 0.9}",
    };
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++) {
        char cfg[512];
        snprintf(cfg, sizeof cfg, "{\"levels\": [{\"name\": \"k\", \"rules\": [%s]}]}", rules[k]);
        rl_limiter *lim = tu_limiter(cfg);
        rl_ns now = S(1000.123456789);
        int retries = 0;
        for (int i = 0; i < 200; i++) {
            rl_decision d;
            double cost = 0.3 + (i % 7) * 0.25;
            if (tu_acquire(lim, "k=x", cost, now, &d))
                continue;
            rl_ns wait = d.retry_after;
            ck_assert_int_ne(wait, RL_WAIT_NEVER);
            ck_assert_int_gt(wait, 0);
            /* one nanosecond early is too early, exactly on time is enough */
            ck_assert_msg(!tu_acquire_ex(lim, "k=x", cost, now + wait - 1, RL_DRY_RUN, 0, &d),
                          "%s: allowed 1 ns before retry_after", rules[k]);
            ck_assert_msg(tu_acquire(lim, "k=x", cost, now + wait, &d),
                          "%s: denied after waiting retry_after (%lld ns more)", rules[k],
                          (long long)d.retry_after);
            now += wait;
            retries++;
        }
        ck_assert_int_gt(retries, 10);
        tu_free(lim);
    }
}
END_TEST

/* Default names as blocked_by shows them. */
START_TEST(default_names)
{
    static const struct {
        const char *rule, *name;
    } names[] = {
        {"{\"type\": \"token_bucket\", \"capacity\": 100, \"per_second\": 10}",
         "token_bucket(100, 10/s)"},
        {"{\"type\": \"token_bucket\", \"capacity\": 60, \"per_second\": 1, \"unit\": "
         "\"requests\"}",
         "token_bucket(60, 1/s, requests)"},
        {"{\"type\": \"sliding_window\", \"limit\": 2, \"window\": 10}", "sliding_window(2, 10s)"},
        {"{\"type\": \"sliding_window_counter\", \"limit\": 5, \"window\": 0.5}",
         "sliding_window_counter(5, 0.5s)"},
        {"{\"type\": \"fixed_window\", \"limit\": 2, \"window\": 60}", "fixed_window(2, 60s)"},
        {"{\"type\": \"gcra\", \"per_second\": 2.5, \"burst\": 3}", "gcra(2.5/s, burst 3)"},
        {"{\"type\": \"concurrency\", \"limit\": 4}", "concurrency(4)"},
        {"{\"type\": \"deny_list\", \"keys\": [\"a\"]}", "deny_list(1 key)"},
        {"{\"type\": \"token_bucket\", \"capacity\": 1, \"per_second\": 1, \"name\": \"free\"}",
         "free"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char cfg[512];
        snprintf(cfg, sizeof cfg, "{\"levels\": [{\"name\": \"k\", \"rules\": [%s]}]}",
                 names[i].rule);
        rl_limiter *lim = tu_limiter(cfg);
        ck_assert_str_eq(rl_limiter_config(lim)->levels[0].rules->v[0].name, names[i].name);
        tu_free(lim);
    }
}
END_TEST

/* Status of each rule: limit, remaining, time to full and the policy window. */
START_TEST(status_fields)
{
    rl_limiter *lim = tu_limiter(
        "{\"levels\": [{\"name\": \"k\", \"rules\": ["
        "{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": 4},"
        "{\"type\": \"fixed_window\", \"limit\": 100, \"window\": 60},"
        "{\"type\": \"sliding_window_counter\", \"limit\": 50, \"window\": 10}]}]}");
    rl_decision d;
    ck_assert(tu_acquire(lim, "k=x", 6, S(30), &d));
    ck_assert_int_eq(d.napplied, 3);
    /* bucket: 4 left, 6 to refill at 4/s = 1.5 s; a full refill takes 2.5 s */
    ck_assert_int_eq(tu_status(&d, 0)->limit, FP(10));
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(4));
    ck_assert_int_eq(tu_status(&d, 0)->reset_after, S(1.5));
    ck_assert_int_eq(tu_status(&d, 0)->window, S(2.5));
    /* more quota: the 5th token in 0.25 s */
    ck_assert_int_eq(tu_status(&d, 0)->next, S(0.25));
    /* fixed window [0, 60): resets at 60 */
    ck_assert_int_eq(tu_status(&d, 1)->remaining, FP(94));
    ck_assert_int_eq(tu_status(&d, 1)->reset_after, S(30));
    ck_assert_int_eq(tu_status(&d, 1)->window, S(60));
    ck_assert_int_eq(tu_status(&d, 1)->next, S(30));
    /* counter [30, 40): the 6 weigh until 50 */
    ck_assert_int_eq(tu_status(&d, 2)->remaining, FP(44));
    ck_assert_int_eq(tu_status(&d, 2)->reset_after, S(20));
    /* 45 fit once the 6 weigh at most 5: 1/6 into the next window, 10 + 10/6 s */
    ck_assert_int_eq(tu_status(&d, 2)->next, 11666666667);
    tu_free(lim);
}
END_TEST

Suite *rules_suite(void);
Suite *rules_suite(void)
{
    Suite *s = suite_create("rules");
    TCase *tc = tcase_create("table");
    /* reciprocal_division_is_exact takes 0.85 s under ThreadSanitizer on a quiet machine:
     * Check's default of 4 s was only 4.7 times that */
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, rule_trace, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_loop_test(tc, v2_evaluation, 0, (int)(sizeof ecases / sizeof ecases[0]));
    tcase_add_test(tc, v2_evaluation_stateless);
    tcase_add_test(tc, naive_doubles_would_deny);
    tcase_add_test(tc, reciprocal_division_is_exact);
    tcase_add_test(tc, waiting_retry_after_is_enough);
    tcase_add_test(tc, default_names);
    tcase_add_test(tc, status_fields);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(rules_suite()) ? 1 : 0;
}
