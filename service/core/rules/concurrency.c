/*
 * concurrency {limit}: at most limit in flight per key. A take holds slots until they are
 * released (or the reservation that holds them expires); time never refills them.
 *
 * Worked example: limit 2: two acquires hold both slots, a third is denied with the retry hint
 * (default 1 s) as its wait; after one release the next acquire is allowed. Counts requests by
 * default: one slot per request.
 */
#include <stddef.h>
#include <stdio.h>

#include "../core.h"

typedef struct cc_params {
    rl_fp limit;
    rl_ns retry; /* the wait to suggest when full: slots free on release, not with time */
} cc_params;

typedef struct cc_state {
    rl_fp held;
} cc_state;

/* The evaluation: the state as read (time changes nothing). */
typedef struct cc_ev {
    cc_state s;
} cc_ev;

static rl_ns wait_for(const cc_params *p, const cc_state *s, rl_fp cost)
{
    if (cost > p->limit)
        return RL_WAIT_NEVER;
    return s->held <= p->limit - cost ? 0 : p->retry;
}

static rl_ns cc_evaluate(const void *pp, const void *st, const char *key, size_t keylen,
                         rl_ns now, rl_fp cost, rl_eval *ev)
{
    cc_ev *e = (cc_ev *)(void *)ev;
    (void)key;
    (void)keylen;
    (void)now;
    e->s = *(const cc_state *)st;
    return wait_for(pp, &e->s, cost);
}

static void cc_commit(const void *pp, void *st, rl_eval *ev, rl_fp cost)
{
    cc_ev *e = (cc_ev *)(void *)ev;
    (void)pp;
    e->s.held = rl__used_add(e->s.held, cost);
    *(cc_state *)st = e->s;
}

static void cc_release(const void *pp, void *st, rl_ns now, rl_fp amount)
{
    cc_state *s = st;
    (void)pp;
    (void)now;
    s->held = amount >= s->held ? 0 : s->held - amount;
}

static rl_ns cc_idle_at(const void *pp, const void *st)
{
    (void)pp;
    return ((const cc_state *)st)->held == 0 ? 0 : RL_WAIT_NEVER;
}

static void cc_report(const void *pp, const rl_eval *ev, rl_ns now, rl_rule_status *out)
{
    const cc_params *p = pp;
    const cc_state *s = &((const cc_ev *)(const void *)ev)->s;
    (void)now;
    out->limit = p->limit;
    out->remaining = p->limit - s->held;
    out->reset_after = 0;
    out->window = 0;
    out->next = s->held > 0 ? wait_for(p, s, rl_status_want(p->limit, out->remaining)) : 0;
}

/* Slots held never negative nor past what charges saturate at. */
static int cc_state_valid(const void *pp, const void *st)
{
    (void)pp;
    return rl__used_ok(((const cc_state *)st)->held);
}

static void cc_name(const void *pp, char *buf, size_t len)
{
    char l[32];
    rl_fmt_fp(l, sizeof l, ((const cc_params *)pp)->limit);
    snprintf(buf, len, "concurrency(%s)", l);
}

static rl_fp cc_capacity(const void *pp)
{
    return ((const cc_params *)pp)->limit;
}

static const rl_param_def cc_params_def[] = {
    {"limit", RL_PARAM_AMOUNT, offsetof(cc_params, limit), 1e-6, 1e12, 0, 1,
     "most in flight per key"},
    {"retry", RL_PARAM_DURATION, offsetof(cc_params, retry), 0.001, 3600, 1, 0,
     "retry_after suggested while full, in seconds"},
};

/* The Redis port: concurrency.lua beside this file. */
static const char *const cc_redis_params[] = {"limit", "retry"};
static const rl_rule_redis cc_redis = {
    .tag = "cc",
    .params = cc_redis_params,
    .nparams = 2,
    .layout = 1,
};

const rl_rule_type rl__concurrency = {
    .api_version = RL_RULE_API_VERSION,
    .name = "concurrency",
    .params = cc_params_def,
    .nparams = sizeof cc_params_def / sizeof cc_params_def[0],
    .params_size = sizeof(cc_params),
    .state_size = sizeof(cc_state),
    .flags = RL_RULE_UNIT_REQUESTS | RL_RULE_HOLDS,
    .default_name = cc_name,
    .capacity = cc_capacity,
    .release = cc_release,
    .idle_at = cc_idle_at,
    .eval_size = sizeof(cc_ev),
    .evaluate = cc_evaluate,
    .commit = cc_commit,
    .report = cc_report,
    .redis = &cc_redis,
    .state_valid = cc_state_valid,
};
