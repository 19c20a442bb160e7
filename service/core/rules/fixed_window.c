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

static rl_ns fw_wait(const void *pp, const void *st, const char *key, size_t keylen, rl_ns now,
                     rl_fp cost)
{
    const fw_params *p = pp;
    const fw_state *s = st;
    (void)key;
    (void)keylen;
    if (cost > p->limit)
        return RL_WAIT_NEVER;
    rl_ns t = rl__max_ns(now, s->last);
    if (count_at(p, s, t) <= p->limit - cost)
        return 0;
    return rl__add_sat(start_of(p, t) - now, p->window);
}

static void fw_take(const void *pp, void *st, rl_ns now, rl_fp cost)
{
    fw_state *s = st;
    rl_ns t = rl__max_ns(now, s->last);
    s->count = rl__used_add(count_at(pp, s, t), cost);
    s->last = t;
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

static void fw_status(const void *pp, const void *st, rl_ns now, rl_rule_status *out)
{
    const fw_params *p = pp;
    const fw_state *s = st;
    rl_ns t = rl__max_ns(now, s->last);
    rl_fp c = count_at(p, s, t);
    out->limit = p->limit;
    out->remaining = p->limit - c;
    out->reset_after = c ? rl__add_sat(start_of(p, t) - now, p->window) : 0;
    out->window = p->window;
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

const rl_rule_type rl__fixed_window = {
    .api_version = RL_RULE_API_VERSION,
    .name = "fixed_window",
    .params = fw_params_def,
    .nparams = sizeof fw_params_def / sizeof fw_params_def[0],
    .params_size = sizeof(fw_params),
    .state_size = sizeof(fw_state),
    .default_name = fw_name,
    .capacity = fw_capacity,
    .wait = fw_wait,
    .take = fw_take,
    .refund = fw_refund,
    .idle_at = fw_idle_at,
    .status = fw_status,
    .redis = &fw_redis,
};
