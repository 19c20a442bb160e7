/*
 * sliding_window_counter {limit, window}: two fixed windows, the previous one weighted by how
 * much of it the sliding window still overlaps.
 *
 * At t, e = t - start of the current window: estimate = prev * (window - e) / window + cur.
 * Worked example: 10 per 10 s, 10 taken in [0, 10): at t = 12.5 the estimate is
 * 10 * 7.5 / 10 = 7.5, so 2 more fit and a cost of 3 waits until t = 13. Comparisons are made
 * multiplied out (prev * (window - e) + (cur + c) * window <= limit * window) so they are exact.
 */
#include <stddef.h>
#include <stdio.h>

#include "../core.h"

typedef struct swc_params {
    rl_fp limit;
    rl_ns window;
} swc_params;

typedef struct swc_state {
    rl_ns last;
    rl_fp cur;
    rl_fp prev;
} swc_state;

_Static_assert(sizeof(swc_state) <= RL_STATE_INLINE, "sliding window counter state fits inline");

static rl_ns start_of(const swc_params *p, rl_ns t)
{
    return t - t % p->window;
}

/* Rolls s forward to t >= s->last. */
static void roll(const swc_params *p, swc_state *s, rl_ns t)
{
    rl_ns ws = start_of(p, t), ls = start_of(p, s->last);
    if (ws == ls)
        return;
    s->prev = ws - ls == p->window ? s->cur : 0;
    s->cur = 0;
}

/* Does cost fit at t (s rolled to t)? */
static int fits(const swc_params *p, const swc_state *s, rl_ns t, rl_fp cost)
{
    uint64_t w = (uint64_t)p->window, e = (uint64_t)(t - start_of(p, t));
    rl__u128 lhs = (rl__u128)(uint64_t)s->prev * (w - e) + (rl__u128)(uint64_t)(s->cur + cost) * w;
    return lhs <= (rl__u128)(uint64_t)p->limit * w;
}

/* Earliest offset e in [0, window) into a window with previous count prev and current count cur
 * at which cost fits; window when it does not fit in that window at all. */
static rl_ns first_fit(const swc_params *p, rl_fp prev, rl_fp cur, rl_fp cost)
{
    if (cur > p->limit - cost)
        return p->window;
    if (prev == 0)
        return 0;
    rl__u128 room = (rl__u128)(uint64_t)(p->limit - cost - cur) * (uint64_t)p->window;
    rl__u128 k = rl__divmod(room, (uint64_t)prev, NULL); /* prev * (window - e) <= room  <=>  window - e <= k */
    return k >= (rl__u128)(uint64_t)p->window ? 0 : p->window - (rl_ns)k;
}

/* The evaluation: the state rolled to t = max(now, last), with last = t. */
typedef struct swc_ev {
    swc_state s;
} swc_ev;

_Static_assert(sizeof(swc_ev) <= RL_EVAL_MAX, "sliding window counter evaluation fits");

/* The wait at now for cost, from s rolled to s->last >= now. */
static rl_ns wait_for(const swc_params *p, const swc_state *s, rl_ns now, rl_fp cost)
{
    if (cost > p->limit)
        return RL_WAIT_NEVER;
    rl_ns t = s->last;
    if (fits(p, s, t, cost))
        return 0;
    rl_ns ws = start_of(p, t);
    rl_ns e = first_fit(p, s->prev, s->cur, cost);
    if (e < p->window)
        return rl__add_sat(ws - now, e);
    e = first_fit(p, s->cur, 0, cost); /* the next window: cur becomes prev */
    return rl__add_sat(rl__add_sat(ws - now, p->window), e);
}

static rl_ns swc_evaluate(const void *pp, const void *st, const char *key, size_t keylen,
                          rl_ns now, rl_fp cost, rl_eval *ev)
{
    swc_ev *e = (swc_ev *)(void *)ev;
    (void)key;
    (void)keylen;
    e->s = *(const swc_state *)st;
    rl_ns t = rl__max_ns(now, e->s.last);
    roll(pp, &e->s, t);
    e->s.last = t;
    return wait_for(pp, &e->s, now, cost);
}

static void swc_commit(const void *pp, void *st, rl_eval *ev, rl_fp cost)
{
    swc_ev *e = (swc_ev *)(void *)ev;
    (void)pp;
    e->s.cur = rl__used_add(e->s.cur, cost);
    *(swc_state *)st = e->s;
}

static void swc_refund(const void *pp, void *st, rl_ns now, rl_ns taken_at, rl_fp amount)
{
    const swc_params *p = pp;
    swc_state *s = st;
    rl_ns t = rl__max_ns(now, s->last);
    roll(p, s, t);
    s->last = t;
    if (amount < 0) {
        s->cur = rl__used_add(s->cur, -amount);
        return;
    }
    rl_ns ws = start_of(p, t), ts = start_of(p, taken_at);
    rl_fp *slot = ts == ws ? &s->cur : ts == ws - p->window ? &s->prev : NULL;
    if (slot)
        *slot = amount >= *slot ? 0 : *slot - amount;
}

static rl_ns swc_idle_at(const void *pp, const void *st)
{
    const swc_params *p = pp;
    const swc_state *s = st;
    rl_ns ls = start_of(p, s->last);
    if (s->cur)
        return rl__add_sat(ls, 2 * p->window);
    return s->prev ? rl__add_sat(ls, p->window) : 0;
}

static void swc_report(const void *pp, const rl_eval *ev, rl_ns now, rl_rule_status *out)
{
    const swc_params *p = pp;
    const swc_state *s = &((const swc_ev *)(const void *)ev)->s;
    rl_ns t = s->last, ws = start_of(p, t);
    uint64_t w = (uint64_t)p->window, e = (uint64_t)(t - ws);
    rl__u128 weighted = (rl__u128)(uint64_t)s->prev * (w - e);
    uint64_t part;
    rl_fp est = s->cur + (rl_fp)rl__divmod(weighted, w, &part) + (part != 0);
    out->limit = p->limit;
    out->remaining = p->limit - est;
    out->reset_after = s->cur ? ws + 2 * p->window - now : s->prev ? ws + p->window - now : 0;
    out->window = p->window;
    out->next = est > 0 ? wait_for(p, s, now, rl_status_want(p->limit, out->remaining)) : 0;
}

/* Counts never negative nor past what charges saturate at, and a sane time: then the
 * estimate (cur + at most prev) and every sum above stay within 64 bits. */
static int swc_state_valid(const void *pp, const void *st)
{
    const swc_state *s = st;
    (void)pp;
    return rl__used_ok(s->cur) && rl__used_ok(s->prev) && rl__time_ok(s->last);
}

static void swc_name(const void *pp, char *buf, size_t len)
{
    const swc_params *p = pp;
    char l[32], w[32];
    rl_fmt_fp(l, sizeof l, p->limit);
    rl_fmt_ns(w, sizeof w, p->window);
    snprintf(buf, len, "sliding_window_counter(%s, %ss)", l, w);
}

static rl_fp swc_capacity(const void *pp)
{
    return ((const swc_params *)pp)->limit;
}

static const rl_param_def swc_params_def[] = {
    {"limit", RL_PARAM_AMOUNT, offsetof(swc_params, limit), 1e-6, 1e12, 0, 1,
     "most per sliding window"},
    {"window", RL_PARAM_DURATION, offsetof(swc_params, window), 0.001, 31622400, 0, 1,
     "window length in seconds"},
};

/* The Redis port: sliding_window_counter.lua beside this file. */
static const char *const swc_redis_params[] = {"limit", "window"};
static const rl_rule_redis swc_redis = {
    .tag = "swc",
    .params = swc_redis_params,
    .nparams = 2,
    .layout = 1,
};

/* A limit of n per unit (envoyproxy/ratelimit's YAML): n per window of the unit. */
static const rl_rule_per_unit swc_per_unit = {.amount = "limit", .window = "window"};

const rl_rule_type rl__sliding_window_counter = {
    .api_version = RL_RULE_API_VERSION,
    .name = "sliding_window_counter",
    .params = swc_params_def,
    .nparams = sizeof swc_params_def / sizeof swc_params_def[0],
    .params_size = sizeof(swc_params),
    .state_size = sizeof(swc_state),
    .default_name = swc_name,
    .capacity = swc_capacity,
    .refund = swc_refund,
    .idle_at = swc_idle_at,
    .eval_size = sizeof(swc_ev),
    .evaluate = swc_evaluate,
    .commit = swc_commit,
    .report = swc_report,
    .redis = &swc_redis,
    .state_valid = swc_state_valid,
    .per_unit = &swc_per_unit,
};
