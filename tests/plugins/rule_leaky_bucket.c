/*
 * rule_leaky_bucket.c - a rule type loaded as a plug-in, written against version 2 of the rule
 * API (evaluate, commit, report) and built against include/ratelimit_rule.h only.
 *
 * leaky_bucket {capacity, per_second}: each key's bucket fills with what it is sent and leaks
 * per_second; a cost fits while level + cost <= capacity. Worked example: capacity 4, 2/s:
 * 4 at t = 0 fill it (2 s until empty, 0.5 s until one unit fits: next); at t = 1 it holds
 * 2, so 3 waits 0.5 s. The level is exact: what has not yet leaked a whole fixed
 * point unit is kept in nanounits (frac < 1e9).
 *
 * Its Redis port (lb_lua, below) keeps the same fields, as 'L' last(8) frac(4) level(as few
 * bytes as it takes), and does the same arithmetic with the store's exact helpers, so that
 * the type runs on the Redis store as the built-in ones do.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ratelimit_rule.h"

typedef struct lb_params {
    rl_fp capacity;
    rl_fp rate; /* per second */
} lb_params;

typedef struct lb_state {
    rl_fp level;
    rl_ns last;
    int64_t frac; /* leaked, not yet a whole unit, in 1e-9 units */
} lb_state;

/* The evaluation: the state brought to max(now, last). */
typedef struct lb_ev {
    lb_state s;
} lb_ev;

_Static_assert(sizeof(lb_ev) <= RL_EVAL_MAX, "the evaluation fits");

__extension__ typedef unsigned __int128 u128;

static void leak(const lb_params *p, lb_state *s, rl_ns now)
{
    if (now <= s->last)
        return;
    u128 n = (u128)(uint64_t)(now - s->last) * (uint64_t)p->rate + (uint64_t)s->frac;
    u128 gone = n / (uint64_t)RL_NS_PER_SEC;
    if (gone >= (u128)(uint64_t)s->level) {
        s->level = 0;
        s->frac = 0;
    } else {
        s->level -= (rl_fp)gone;
        s->frac = (int64_t)(n % (uint64_t)RL_NS_PER_SEC);
    }
    s->last = now;
}

/* From s (at max(now, last)): how long until the level is at most target, counted from now. */
static rl_ns until(const lb_params *p, const lb_state *s, rl_ns now, rl_fp target)
{
    if (s->level <= target)
        return 0;
    u128 need = (u128)(uint64_t)(s->level - target) * (uint64_t)RL_NS_PER_SEC - (uint64_t)s->frac;
    u128 dt = (need + (uint64_t)p->rate - 1) / (uint64_t)p->rate;
    u128 w = dt + (uint64_t)(s->last - now);
    return w >= (u128)RL_WAIT_NEVER ? RL_WAIT_NEVER : (rl_ns)w;
}

static rl_ns wait_for(const lb_params *p, const lb_state *s, rl_ns now, rl_fp cost)
{
    return cost > p->capacity ? RL_WAIT_NEVER : until(p, s, now, p->capacity - cost);
}

static rl_ns lb_evaluate(const void *pp, const void *st, const char *key, size_t keylen,
                         rl_ns now, rl_fp cost, rl_eval *ev)
{
    lb_ev *e = (lb_ev *)(void *)ev;
    (void)key;
    (void)keylen;
    e->s = *(const lb_state *)st;
    leak(pp, &e->s, now);
    return wait_for(pp, &e->s, now, cost);
}

static void lb_commit(const void *pp, void *st, rl_eval *ev, rl_fp cost)
{
    lb_ev *e = (lb_ev *)(void *)ev;
    (void)pp;
    /* a charge may overfill it: saturate rather than overflow */
    e->s.level = e->s.level > INT64_MAX / 2 - cost ? INT64_MAX / 2 : e->s.level + cost;
    *(lb_state *)st = e->s;
}

static void lb_report(const void *pp, const rl_eval *ev, rl_ns now, rl_rule_status *out)
{
    const lb_params *p = pp;
    const lb_state *s = &((const lb_ev *)(const void *)ev)->s;
    out->limit = p->capacity;
    out->remaining = p->capacity - s->level;
    out->reset_after = until(p, s, now, 0);
    out->window = until(p, &(lb_state){p->capacity, 0, 0}, 0, 0);
    out->next = s->level > 0 ? wait_for(p, s, now, rl_status_want(out->limit, out->remaining))
                             : 0;
}

static rl_ns lb_idle_at(const void *pp, const void *st)
{
    const lb_state *s = st;
    if (s->level == 0)
        return 0;
    rl_ns d = until(pp, s, s->last, 0);
    return s->last > INT64_MAX - d ? INT64_MAX : s->last + d;
}

static void lb_name(const void *pp, char *buf, size_t len)
{
    const lb_params *p = pp;
    char c[32], r[32];
    rl_fmt_fp(c, sizeof c, p->capacity);
    rl_fmt_fp(r, sizeof r, p->rate);
    snprintf(buf, len, "leaky_bucket(%s, %s/s)", c, r);
}

static rl_fp lb_capacity(const void *pp)
{
    return ((const lb_params *)pp)->capacity;
}

static const rl_param_def lb_params_def[] = {
    {"capacity", RL_PARAM_AMOUNT, offsetof(lb_params, capacity), 1e-6, 1e12, 0, 1,
     "most the bucket holds"},
    {"per_second", RL_PARAM_RATE, offsetof(lb_params, rate), 1e-6, 1e12, 0, 1,
     "what leaks out per second"},
};

/* The Redis port: times relative to the script's now, values numbers or the store's big
 * integers (service/redis/lib.lua's helpers, docs/redis.md). */
static const char lb_lua[] =
    "register_rule('leaky_bucket', function()\n"
    "    local T = {params = {'capacity', 'per_second'}, layout = 1}\n"
    "    local LEVEL_MAX = N('4611686018427387903')\n"
    "    function T.zero(t)\n"
    "        t.level, t.last, t.frac = 0, 0, 0\n"
    "        return t\n"
    "    end\n"
    "    function T.load(v, t)\n"
    "        local n = #v\n"
    "        if string.byte(v, 1) == 76 and n >= 13 and n <= 21 then\n"
    "            t.last, t.frac, t.level = dec_time(v, 2), uint(v, 10, 13), uint(v, 14, n)\n"
    "            return t\n"
    "        end\n"
    "    end\n"
    "    function T.dump(s)\n"
    "        return 'L' .. enc_time(s.last) .. string.sub(enc_u8(s.frac), 5) .. enc_var(s.level)\n"
    "    end\n"
    "    function T.prep(p, s)\n"
    "        if not isneg(s.last) then return end\n"
    "        local gone, rem = mdm(sub(0, s.last), p.per_second, s.frac, NS)\n"
    "        if cmp(gone, s.level) >= 0 then\n"
    "            s.level, s.frac = 0, 0\n"
    "        else\n"
    "            s.level, s.frac = sub(s.level, gone), rem\n"
    "        end\n"
    "        s.last = 0\n"
    "    end\n"
    "    local function until_(p, s, target)\n"
    "        if cmp(s.level, target) <= 0 then return 0 end\n"
    "        return add_sat(s.last, ceil_mdm(sub(s.level, target), NS, 0 - s.frac, p.per_second))\n"
    "    end\n"
    "    function T.wait(p, s, cost)\n"
    "        if cmp(cost, p.capacity) > 0 then return NEVER end\n"
    "        return until_(p, s, sub(p.capacity, cost))\n"
    "    end\n"
    "    function T.take(p, s, cost)\n"
    "        if cmp(s.level, sub(LEVEL_MAX, cost)) > 0 then\n"
    "            s.level = LEVEL_MAX\n"
    "        else\n"
    "            s.level = add(s.level, cost)\n"
    "        end\n"
    "    end\n"
    "    function T.idle(p, s)\n"
    "        if s.level == 0 then return false end\n"
    "        return add_sat_t(s.last, ceil_mdm(s.level, NS, 0 - s.frac, p.per_second))\n"
    "    end\n"
    "    function T.status(p, s)\n"
    "        return p.capacity, sub(p.capacity, s.level), until_(p, s, 0),\n"
    "            ceil_mdm(p.capacity, NS, 0, p.per_second)\n"
    "    end\n"
    "    return T\n"
    "end)\n";

static const char *const lb_redis_params[] = {"capacity", "per_second"};
static const rl_rule_redis lb_redis = {
    .tag = "leaky_bucket",
    .params = lb_redis_params,
    .nparams = 2,
    .layout = 1,
    .lua = lb_lua,
};

static const rl_rule_type leaky_bucket = {
    .api_version = 2,
    .name = "leaky_bucket",
    .params = lb_params_def,
    .nparams = sizeof lb_params_def / sizeof lb_params_def[0],
    .params_size = sizeof(lb_params),
    .state_size = sizeof(lb_state),
    .default_name = lb_name,
    .capacity = lb_capacity,
    .idle_at = lb_idle_at,
    .eval_size = sizeof(lb_ev),
    .evaluate = lb_evaluate,
    .commit = lb_commit,
    .report = lb_report,
    .redis = &lb_redis,
};

int rl_plugin_init(rl_registry *reg, unsigned api_version);
int rl_plugin_init(rl_registry *reg, unsigned api_version)
{
    if (api_version < 2)
        return -1; /* written for version 2 */
    return rl_register_rule_type(reg, &leaky_bucket);
}
