/*
 * rule_leaky_bucket.c - a rule type with state loaded as a plug-in, with its Redis port: a
 * leaky bucket {capacity, per_second} that each request pours its cost into and that leaks
 * per_second units a second; a request fits when the bucket does not overflow. Built against
 * include/ratelimit_rule.h only, and loaded by a configuration's "plugins".
 *
 * Worked example: capacity 10, 2/s. Ten requests at t = 0 fill it; the next one waits 0.5 s
 * (one unit leaks). Leaking counts whole fixed-point units since the last update and drops
 * the rest, so a state is two integers:
 *   level  what is in the bucket (fixed point)
 *   last   the time of the last update
 * The Redis port below keeps the same two fields ('L' last(8) level(as few bytes as it takes))
 * and does the same arithmetic with the store's exact helpers.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ratelimit_rule.h"

__extension__ typedef unsigned __int128 u128;

typedef struct lk_params {
    rl_fp capacity;
    rl_fp rate; /* per second */
} lk_params;

typedef struct lk_state {
    rl_fp level;
    rl_ns last;
} lk_state;

static rl_ns add_sat(rl_ns a, rl_ns b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* ceil(x * 1e9 / rate), saturated. */
static rl_ns time_for(const lk_params *p, rl_fp x)
{
    u128 q = ((u128)(uint64_t)x * (uint64_t)RL_NS_PER_SEC + (uint64_t)p->rate - 1) /
             (uint64_t)p->rate;
    return q > (u128)INT64_MAX ? INT64_MAX : (rl_ns)q;
}

/* Leaks s to now; a now before s->last changes nothing. */
static void leak(const lk_params *p, lk_state *s, rl_ns now)
{
    if (now <= s->last)
        return;
    if (s->level > 0) {
        u128 out = (u128)(uint64_t)(now - s->last) * (uint64_t)p->rate / (uint64_t)RL_NS_PER_SEC;
        s->level = out >= (u128)(uint64_t)s->level ? 0 : s->level - (rl_fp)out;
    }
    s->last = now;
}

static rl_ns lk_wait(const void *pp, const void *st, const char *key, size_t keylen, rl_ns now,
                     rl_fp cost)
{
    const lk_params *p = pp;
    lk_state s = *(const lk_state *)st;
    (void)key;
    (void)keylen;
    if (cost > p->capacity)
        return RL_WAIT_NEVER;
    leak(p, &s, now);
    if (s.level + cost <= p->capacity)
        return 0;
    return add_sat(s.last - now, time_for(p, s.level + cost - p->capacity));
}

static void lk_take(const void *pp, void *st, rl_ns now, rl_fp cost)
{
    lk_state *s = st;
    leak(pp, s, now);
    s->level += cost;
}

static rl_ns lk_idle_at(const void *pp, const void *st)
{
    const lk_state *s = st;
    return s->level == 0 ? 0 : add_sat(s->last, time_for(pp, s->level));
}

static void lk_status(const void *pp, const void *st, rl_ns now, rl_rule_status *out)
{
    const lk_params *p = pp;
    lk_state s = *(const lk_state *)st;
    leak(p, &s, now);
    out->limit = p->capacity;
    out->remaining = p->capacity - s.level;
    out->reset_after = s.level ? add_sat(s.last - now, time_for(p, s.level)) : 0;
    out->window = time_for(p, p->capacity);
}

static void lk_name(const void *pp, char *buf, size_t len)
{
    const lk_params *p = pp;
    char c[32], r[32];
    rl_fmt_fp(c, sizeof c, p->capacity);
    rl_fmt_fp(r, sizeof r, p->rate);
    snprintf(buf, len, "leaky_bucket(%s, %s/s)", c, r);
}

static rl_fp lk_capacity(const void *pp)
{
    return ((const lk_params *)pp)->capacity;
}

static const rl_param_def lk_params_def[] = {
    {"capacity", RL_PARAM_AMOUNT, offsetof(lk_params, capacity), 1e-6, 1e12, 0, 1,
     "most the bucket holds (a new key starts empty)"},
    {"per_second", RL_PARAM_RATE, offsetof(lk_params, rate), 1e-6, 1e12, 0, 1,
     "what leaks out per second"},
};

/* The Redis port: times relative to the script's now, values numbers or the store's big
 * integers (service/redis/lib.lua's helpers). */
static const char lk_lua[] =
    "register_rule('leaky_bucket', function()\n"
    "    local T = {params = {'capacity', 'per_second'}, layout = 1}\n"
    "    function T.zero(t)\n"
    "        t.level, t.last = 0, 0\n"
    "        return t\n"
    "    end\n"
    "    function T.load(v, t)\n"
    "        local n = #v\n"
    "        if string.byte(v, 1) == 76 and n >= 9 and n <= 17 then\n"
    "            t.last, t.level = dec_time(v, 2), uint(v, 10, n)\n"
    "            return t\n"
    "        end\n"
    "    end\n"
    "    function T.dump(s) return 'L' .. enc_time(s.last) .. enc_var(s.level) end\n"
    "    function T.prep(p, s)\n"
    "        if not isneg(s.last) then return end\n"
    "        if s.level ~= 0 then\n"
    "            local out = mdm(sub(0, s.last), p.per_second, 0, NS)\n"
    "            if cmp(out, s.level) >= 0 then s.level = 0 else s.level = sub(s.level, out) end\n"
    "        end\n"
    "        s.last = 0\n"
    "    end\n"
    "    local function time_for(p, x) return ceil_mdm(x, NS, 0, p.per_second) end\n"
    "    function T.wait(p, s, cost)\n"
    "        if cmp(cost, p.capacity) > 0 then return NEVER end\n"
    "        local over = sub(add(s.level, cost), p.capacity)\n"
    "        if not ispos(over) then return 0 end\n"
    "        return add_sat(s.last, time_for(p, over))\n"
    "    end\n"
    "    function T.take(p, s, cost) s.level = add(s.level, cost) end\n"
    "    function T.idle(p, s)\n"
    "        if s.level == 0 then return false end\n"
    "        return add_sat_t(s.last, time_for(p, s.level))\n"
    "    end\n"
    "    function T.status(p, s)\n"
    "        local reset = 0\n"
    "        if s.level ~= 0 then reset = add_sat(s.last, time_for(p, s.level)) end\n"
    "        return p.capacity, sub(p.capacity, s.level), reset, time_for(p, p.capacity)\n"
    "    end\n"
    "    return T\n"
    "end)\n";

static const char *const lk_redis_params[] = {"capacity", "per_second"};
static const rl_rule_redis lk_redis = {
    .tag = "leaky_bucket",
    .params = lk_redis_params,
    .nparams = 2,
    .layout = 1,
    .lua = lk_lua,
};

static const rl_rule_type leaky_bucket = {
    .api_version = RL_RULE_API_VERSION,
    .name = "leaky_bucket",
    .params = lk_params_def,
    .nparams = 2,
    .params_size = sizeof(lk_params),
    .state_size = sizeof(lk_state),
    .default_name = lk_name,
    .capacity = lk_capacity,
    .wait = lk_wait,
    .take = lk_take,
    .idle_at = lk_idle_at,
    .status = lk_status,
    .redis = &lk_redis,
};

int rl_plugin_init(rl_registry *reg, unsigned api_version);
int rl_plugin_init(rl_registry *reg, unsigned api_version)
{
    if (api_version < 2)
        return -1;
    return rl_register_rule_type(reg, &leaky_bucket);
}
