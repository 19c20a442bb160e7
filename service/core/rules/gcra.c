/*
 * gcra {per_second, burst}: the generic cell rate algorithm, a smooth rate with a bounded burst.
 *
 * The state is the theoretical arrival time (TAT): the time at which the key would have sent
 * nothing beyond its rate. A cost c moves TAT by c / per_second; it is allowed while
 * TAT + c / per_second - now <= burst / per_second. Worked example: 2/s, burst 3: three
 * requests at t = 0 are allowed (TAT = 1.5), a fourth waits 0.5 s. TAT is kept exactly as
 * tat + rem / rate nanoseconds (rem < rate), so no rounding accumulates.
 */
#include <stddef.h>
#include <stdio.h>

#include "../core.h"

typedef struct gcra_params {
    rl_fp rate; /* per second */
    rl_fp burst;
} gcra_params;

typedef struct gcra_state {
    rl_ns tat;
    int64_t rem; /* TAT's fraction of a nanosecond, in units of 1 / rate */
    rl_ns last;
} gcra_state;

_Static_assert(sizeof(gcra_state) <= RL_STATE_INLINE, "gcra state fits inline");

/* How far TAT is ahead of t, scaled: (TAT - t) * rate, in fixed point units times 1e9. */
static rl__u128 ahead(const gcra_params *p, const gcra_state *s, rl_ns t)
{
    if (s->tat < t || (s->tat == t && s->rem == 0))
        return 0;
    return (rl__u128)(uint64_t)(s->tat - t) * (uint64_t)p->rate + (uint64_t)s->rem;
}

/* Sets TAT to t + scaled / rate. */
static void set_ahead(const gcra_params *p, gcra_state *s, rl_ns t, rl__u128 scaled)
{
    uint64_t rem;
    rl__u128 q = rl__divmod(scaled, (uint64_t)p->rate, &rem);
    s->rem = (int64_t)rem;
    s->tat = q >= (rl__u128)(RL_WAIT_NEVER - t) ? RL_WAIT_NEVER : t + (rl_ns)q;
}

static rl__u128 scaled(rl_fp amount)
{
    return (rl__u128)(uint64_t)amount * (uint64_t)RL_NS_PER_SEC;
}

/* The evaluation: the state, the time t = max(now, last) and how far TAT is ahead of t. */
typedef struct gcra_ev {
    gcra_state s;
    rl_ns t;
    rl__u128 ahead;
} gcra_ev;

_Static_assert(sizeof(gcra_ev) <= RL_EVAL_MAX, "gcra evaluation fits");

static rl_ns wait_for(const gcra_params *p, const gcra_ev *e, rl_ns now, rl_fp cost)
{
    if (cost > p->burst)
        return RL_WAIT_NEVER;
    rl__u128 d = e->ahead + scaled(cost), b = scaled(p->burst);
    if (d <= b)
        return 0;
    return rl__add_sat(e->t - now, rl__ceil_div(d - b, (uint64_t)p->rate));
}

static rl_ns gcra_evaluate(const void *pp, const void *st, const char *key, size_t keylen,
                           rl_ns now, rl_fp cost, rl_eval *ev)
{
    gcra_ev *e = (gcra_ev *)(void *)ev;
    (void)key;
    (void)keylen;
    e->s = *(const gcra_state *)st;
    e->t = rl__max_ns(now, e->s.last);
    e->ahead = ahead(pp, &e->s, e->t);
    return wait_for(pp, e, now, cost);
}

static void gcra_commit(const void *pp, void *st, rl_eval *ev, rl_fp cost)
{
    gcra_ev *e = (gcra_ev *)(void *)ev;
    set_ahead(pp, &e->s, e->t, e->ahead + scaled(cost));
    e->s.last = e->t;
    e->ahead = ahead(pp, &e->s, e->t);
    *(gcra_state *)st = e->s;
}

static void gcra_refund(const void *pp, void *st, rl_ns now, rl_ns taken_at, rl_fp amount)
{
    gcra_state *s = st;
    rl_ns t = rl__max_ns(now, s->last);
    rl__u128 a = ahead(pp, s, t);
    (void)taken_at;
    if (amount < 0)
        a += scaled(-amount);
    else
        a = a > scaled(amount) ? a - scaled(amount) : 0;
    set_ahead(pp, s, t, a);
    s->last = t;
}

static rl_ns gcra_idle_at(const void *pp, const void *st)
{
    const gcra_state *s = st;
    (void)pp;
    return s->rem ? rl__add_sat(s->tat, 1) : s->tat;
}

static void gcra_report(const void *pp, const rl_eval *ev, rl_ns now, rl_rule_status *out)
{
    const gcra_params *p = pp;
    const gcra_ev *e = (const gcra_ev *)(const void *)ev;
    rl__u128 a = e->ahead;
    uint64_t part;
    rl__u128 used = rl__divmod(a, (uint64_t)RL_NS_PER_SEC, &part);
    used += part != 0;
    out->limit = p->burst;
    out->remaining = used >= (rl__u128)RL__USED_MAX ? p->burst - RL__USED_MAX
                                                     : p->burst - (rl_fp)used;
    out->reset_after = a ? rl__add_sat(e->t - now, rl__ceil_div(a, (uint64_t)p->rate)) : 0;
    out->window = rl__ceil_div(scaled(p->burst), (uint64_t)p->rate);
    out->next = out->remaining < out->limit
                    ? wait_for(p, e, now, rl_status_want(out->limit, out->remaining))
                    : 0;
}

/* TAT not negative (it saturates at RL_WAIT_NEVER), rem a remainder of a division by the
 * rate, and a sane time of the last change. */
static int gcra_state_valid(const void *pp, const void *st)
{
    const gcra_params *p = pp;
    const gcra_state *s = st;
    return s->tat >= 0 && s->rem >= 0 && s->rem < p->rate && rl__time_ok(s->last);
}

static void gcra_name(const void *pp, char *buf, size_t len)
{
    const gcra_params *p = pp;
    char r[32], b[32];
    rl_fmt_fp(r, sizeof r, p->rate);
    rl_fmt_fp(b, sizeof b, p->burst);
    snprintf(buf, len, "gcra(%s/s, burst %s)", r, b);
}

static rl_fp gcra_capacity(const void *pp)
{
    return ((const gcra_params *)pp)->burst;
}

static const rl_param_def gcra_params_def[] = {
    {"per_second", RL_PARAM_RATE, offsetof(gcra_params, rate), 1e-6, 1e12, 0, 1,
     "sustained rate per second"},
    {"burst", RL_PARAM_AMOUNT, offsetof(gcra_params, burst), 1e-6, 1e12, 1, 0,
     "most that may be sent at once (default 1: strictly spaced)"},
};

/* The Redis port: gcra.lua beside this file. */
static const char *const gcra_redis_params[] = {"per_second", "burst"};
static const rl_rule_redis gcra_redis = {
    .tag = "gcra",
    .params = gcra_redis_params,
    .nparams = 2,
    .layout = 1,
};

/* A limit of n per unit (envoyproxy/ratelimit's YAML): burst n, refilled at n per unit. */
static const rl_rule_per_unit gcra_per_unit = {.amount = "burst", .rate = "per_second"};

const rl_rule_type rl__gcra = {
    .api_version = RL_RULE_API_VERSION,
    .name = "gcra",
    .params = gcra_params_def,
    .nparams = sizeof gcra_params_def / sizeof gcra_params_def[0],
    .params_size = sizeof(gcra_params),
    .state_size = sizeof(gcra_state),
    .default_name = gcra_name,
    .capacity = gcra_capacity,
    .refund = gcra_refund,
    .idle_at = gcra_idle_at,
    .eval_size = sizeof(gcra_ev),
    .evaluate = gcra_evaluate,
    .commit = gcra_commit,
    .report = gcra_report,
    .redis = &gcra_redis,
    .state_valid = gcra_state_valid,
    .per_unit = &gcra_per_unit,
};
