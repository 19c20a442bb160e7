/*
 * fixed_window {limit, window}: at most limit per window; windows are aligned to multiples of
 * the window length from time 0.
 *
 * Worked example: 2 per 60 s, requests at t = 0 and 1: a third at t = 59 waits 1 s (the window
 * [0, 60) ends), and is allowed at t = 60. The state keeps the time of the last update, from
 * which the window it counts for follows, and the amount counted in that window.
 */
#include <stddef.h>
#include <stdio.h>

#include "../core.h"

typedef struct fw_params {
    rl_fp limit;
    rl_ns window;
} fw_params;

typedef struct fw_state {
    rl_ns last;
    rl_fp count;
} fw_state;

_Static_assert(sizeof(fw_state) <= RL_STATE_INLINE, "fixed window state fits inline");

static rl_ns start_of(const fw_params *p, rl_ns t)
{
    return t - t % p->window;
}

/* The count at t (t >= s->last): zero once t is in a later window. */
static rl_fp count_at(const fw_params *p, const fw_state *s, rl_ns t)
{
    return start_of(p, t) == start_of(p, s->last) ? s->count : 0;
}

/* The evaluation: the state at t = max(now, last), counting for t's window. */
typedef struct fw_ev {
    fw_state s;
} fw_ev;

_Static_assert(sizeof(fw_ev) <= RL_EVAL_MAX, "fixed window evaluation fits");

static rl_ns wait_for(const fw_params *p, const fw_state *s, rl_ns now, rl_fp cost)
{
    if (cost > p->limit)
        return RL_WAIT_NEVER;
    if (s->count <= p->limit - cost)
        return 0;
    return rl__add_sat(start_of(p, s->last) - now, p->window);
}

static rl_ns fw_evaluate(const void *pp, const void *st, const char *key, size_t keylen,
                         rl_ns now, rl_fp cost, rl_eval *ev)
{
    const fw_state *s = st;
    fw_ev *e = (fw_ev *)(void *)ev;
    (void)key;
    (void)keylen;
    e->s.last = rl__max_ns(now, s->last);
    e->s.count = count_at(pp, s, e->s.last);
    return wait_for(pp, &e->s, now, cost);
}

static void fw_commit(const void *pp, void *st, rl_eval *ev, rl_fp cost)
{
    fw_ev *e = (fw_ev *)(void *)ev;
    (void)pp;
    e->s.count = rl__used_add(e->s.count, cost);
    *(fw_state *)st = e->s;
}

static void fw_refund(const void *pp, void *st, rl_ns now, rl_ns taken_at, rl_fp amount)
{
    const fw_params *p = pp;
    fw_state *s = st;
    rl_ns t = rl__max_ns(now, s->last);
    s->count = count_at(p, s, t);
    s->last = t;
    if (amount < 0)
        s->count = rl__used_add(s->count, -amount);
    else if (start_of(p, taken_at) == start_of(p, t)) /* a window that rolled over is left alone */
        s->count = amount >= s->count ? 0 : s->count - amount;
}

static rl_ns fw_idle_at(const void *pp, const void *st)
{
    const fw_state *s = st;
    return s->count == 0 ? 0 : rl__add_sat(start_of(pp, s->last), ((const fw_params *)pp)->window);
}

static void fw_report(const void *pp, const rl_eval *ev, rl_ns now, rl_rule_status *out)
{
    const fw_params *p = pp;
    const fw_state *s = &((const fw_ev *)(const void *)ev)->s;
    out->limit = p->limit;
    out->remaining = p->limit - s->count;
    out->reset_after = s->count ? rl__add_sat(start_of(p, s->last) - now, p->window) : 0;
    out->window = p->window;
    out->next = s->count > 0 ? wait_for(p, s, now, rl_status_want(p->limit, out->remaining)) : 0;
}

/* A count never negative nor past what charges saturate at, and a sane time. */
static int fw_state_valid(const void *pp, const void *st)
{
    const fw_state *s = st;
    (void)pp;
    return rl__used_ok(s->count) && rl__time_ok(s->last);
}

static void fw_name(const void *pp, char *buf, size_t len)
{
    const fw_params *p = pp;
    char l[32], w[32];
    rl_fmt_fp(l, sizeof l, p->limit);
    rl_fmt_ns(w, sizeof w, p->window);
    snprintf(buf, len, "fixed_window(%s, %ss)", l, w);
}

static rl_fp fw_capacity(const void *pp)
{
    return ((const fw_params *)pp)->limit;
}

static const rl_param_def fw_params_def[] = {
    {"limit", RL_PARAM_AMOUNT, offsetof(fw_params, limit), 1e-6, 1e12, 0, 1,
     "most per window"},
    {"window", RL_PARAM_DURATION, offsetof(fw_params, window), 0.001, 31622400, 0, 1,
     "window length in seconds"},
};

/* The Redis port: fixed_window.lua beside this file. */
static const char *const fw_redis_params[] = {"limit", "window"};
static const rl_rule_redis fw_redis = {
    .tag = "fw",
    .params = fw_redis_params,
    .nparams = 2,
    .layout = 1,
};

/* A limit of n per unit (envoyproxy/ratelimit's YAML): n per window of the unit, the windows
 * aligned as upstream aligns its own. */
static const rl_rule_per_unit fw_per_unit = {.amount = "limit", .window = "window", .aligned = 1};

static void fw_period(const void *pp, rl_ns now, rl_ns *start, rl_ns *end)
{
    const fw_params *p = pp;
    *start = start_of(p, now > 0 ? now : 0);
    *end = rl__add_sat(*start, p->window);
}

const rl_rule_type rl__fixed_window = {
    .api_version = RL_RULE_API_VERSION,
    .name = "fixed_window",
    .params = fw_params_def,
    .nparams = sizeof fw_params_def / sizeof fw_params_def[0],
    .params_size = sizeof(fw_params),
    .state_size = sizeof(fw_state),
    .flags = RL_RULE_PERIODIC | RL_RULE_LEASABLE,
    .default_name = fw_name,
    .capacity = fw_capacity,
    .refund = fw_refund,
    .idle_at = fw_idle_at,
    .eval_size = sizeof(fw_ev),
    .evaluate = fw_evaluate,
    .commit = fw_commit,
    .report = fw_report,
    .redis = &fw_redis,
    .state_valid = fw_state_valid,
    .per_unit = &fw_per_unit,
    .period = fw_period,
};
