/*
 * token_bucket {capacity, per_second}: lazy refill, no timers; a new key starts full.
 *
 * Worked example: capacity 100, 10/s, emptied at t = 0. A cost of 1 then waits 0.1 s, and at
 * t = 5 the bucket holds 50. The state records what is used rather than what is left, so that
 * all-zero state is a full bucket and a key moved to a larger bucket keeps what it used:
 *   used  amount taken and not yet refilled (above capacity after a charge: a negative balance)
 *   last  time of the last update
 *   frac  refill not yet worth one fixed point unit, in 1e-9 units (always < 1e9), so that
 *         refill is exact: each nanosecond adds exactly per_second / 1e9.
 */
#include <stddef.h>
#include <stdio.h>

#include "../core.h"

typedef struct tb_params {
    rl_fp capacity;
    rl_fp rate;   /* per second */
    rl_ns window; /* time to refill from empty, computed once */
    rl__recip per_rate; /* divides by rate (computed once) */
} tb_params;

typedef struct tb_state {
    rl_fp used;
    rl_ns last;
    int64_t frac;
} tb_state;

_Static_assert(sizeof(tb_state) <= RL_STATE_INLINE, "token bucket state fits inline");

/* What a refill leaves: used and frac (two words, returned in registers). */
typedef struct tb_left {
    rl_fp used;
    int64_t frac;
} tb_left;

/* refill's result when elapsed * rate + frac does not fit 64 bits (a long idle key). Takes
 * and returns values, not the state's address, so that a caller's state can stay in
 * registers. */
static __attribute__((noinline)) tb_left refill_wide(const tb_params *p, rl_fp used, int64_t frac,
                                                     rl_ns elapsed)
{
    rl__u128 num = (rl__u128)(uint64_t)elapsed * (uint64_t)p->rate + (uint64_t)frac;
    uint64_t rem;
    rl__u128 gain = rl__divmod(num, (uint64_t)RL_NS_PER_SEC, &rem);
    if (gain >= (rl__u128)(uint64_t)used)
        return (tb_left){0, 0};
    return (tb_left){used - (rl_fp)gain, (int64_t)rem};
}

/* s refilled by num / RL_NS_PER_SEC tokens, num fitting 64 bits (a key used moments ago):
 * the division by a constant is a multiplication. */
static inline void refill_by(tb_state *s, uint64_t num)
{
    uint64_t gain = num / (uint64_t)RL_NS_PER_SEC;
    if (gain >= (uint64_t)s->used) {
        s->used = 0;
        s->frac = 0;
    } else {
        s->used -= (rl_fp)gain;
        s->frac = (int64_t)(num % (uint64_t)RL_NS_PER_SEC);
    }
}

/* Brings s forward to now; a now before s->last changes nothing. The refill of a key used
 * moments ago fits 64 bits, whose division by a constant is a multiplication. */
static inline void refill(const tb_params *p, tb_state *s, rl_ns now)
{
    uint64_t num;
    if (now <= s->last)
        return;
    if (s->used <= 0) {
        s->frac = 0;
    } else if (__builtin_mul_overflow((uint64_t)(now - s->last), (uint64_t)p->rate, &num) ||
               __builtin_add_overflow(num, (uint64_t)s->frac, &num)) {
        tb_left l = refill_wide(p, s->used, s->frac, now - s->last);
        s->used = l.used;
        s->frac = l.frac;
    } else {
        refill_by(s, num);
    }
    s->last = now;
}

/* Time for s (already at max(now, last)) to bring used down to target. */
static inline rl_ns time_to(const tb_params *p, const tb_state *s, rl_fp target)
{
    if (s->used <= target)
        return 0;
    rl__u128 need = (rl__u128)(uint64_t)(s->used - target) * (uint64_t)RL_NS_PER_SEC -
                    (uint64_t)s->frac;
    return rl__recip_ceil(&p->per_rate, need);
}

/* The evaluation: the state brought to max(now, last). */
typedef struct tb_ev {
    tb_state s;
} tb_ev;

_Static_assert(sizeof(tb_ev) <= RL_EVAL_MAX, "token bucket evaluation fits");

/* The wait at now for cost, from s at max(now, last). */
static inline rl_ns wait_for(const tb_params *p, const tb_state *s, rl_ns now, rl_fp cost)
{
    if (cost > p->capacity)
        return RL_WAIT_NEVER;
    rl_ns dt = time_to(p, s, p->capacity - cost);
    return dt == 0 ? 0 : rl__add_sat(s->last - now, dt);
}

/* tb_evaluate of any state: its whole refill. Out of line, so that tb_evaluate's common case
 * needs no stack frame. */
static __attribute__((noinline)) rl_ns evaluate_any(const tb_params *p, const tb_state *st,
                                                    rl_ns now, rl_fp cost, tb_ev *e)
{
    tb_state s = *st;
    refill(p, &s, now);
    e->s = s;
    return wait_for(p, &s, now, cost);
}

/* tb_evaluate's wait when the cost does not fit the state in e. */
static __attribute__((noinline)) rl_ns evaluate_wait(const tb_params *p, const tb_ev *e,
                                                     rl_ns now, rl_fp cost)
{
    return wait_for(p, &e->s, now, cost);
}

/* The common case inline: a key used moments ago (a refill that fits 64 bits) whose bucket
 * holds the cost; anything else goes to evaluate_any or evaluate_wait, which give the same
 * answer by the general path. */
static rl_ns tb_evaluate(const void *pp, const void *st, const char *key, size_t keylen,
                         rl_ns now, rl_fp cost, rl_eval *ev)
{
    const tb_params *p = pp;
    tb_ev *e = (tb_ev *)(void *)ev;
    tb_state s = *(const tb_state *)st; /* a local: no store through ev aliases the params */
    uint64_t num;
    (void)key;
    (void)keylen;
    if (now <= s.last || s.used <= 0 ||
        __builtin_mul_overflow((uint64_t)(now - s.last), (uint64_t)p->rate, &num) ||
        __builtin_add_overflow(num, (uint64_t)s.frac, &num))
        return evaluate_any(p, st, now, cost, e);
    refill_by(&s, num);
    s.last = now;
    e->s = s;
    if (cost <= p->capacity && s.used <= p->capacity - cost)
        return 0;
    return evaluate_wait(p, e, now, cost);
}

static void tb_commit(const void *pp, void *st, rl_eval *ev, rl_fp cost)
{
    tb_ev *e = (tb_ev *)(void *)ev;
    (void)pp;
    e->s.used = rl__used_add(e->s.used, cost);
    *(tb_state *)st = e->s;
}

static void tb_refund(const void *pp, void *st, rl_ns now, rl_ns taken_at, rl_fp amount)
{
    tb_state *s = st;
    (void)taken_at;
    refill(pp, s, now);
    if (amount < 0) {
        s->used = rl__used_add(s->used, -amount);
    } else if (amount >= s->used) {
        s->used = 0;
        s->frac = 0;
    } else {
        s->used -= amount;
    }
}

static rl_ns tb_idle_at(const void *pp, const void *st)
{
    const tb_state *s = st;
    if (s->used == 0)
        return 0;
    return rl__add_sat(s->last, time_to(pp, s, 0));
}

/* The status from s at max(now, last): reset_after and next share the time_to arithmetic,
 * (used - target) * 1e9 - frac, with target 0 and capacity - want. */
static void tb_report(const void *pp, const rl_eval *ev, rl_ns now, rl_rule_status *out)
{
    const tb_params *p = pp;
    const tb_state *s = &((const tb_ev *)(const void *)ev)->s;
    out->limit = p->capacity;
    out->remaining = p->capacity - s->used;
    out->window = p->window;
    if (s->used <= 0) {
        out->reset_after = 0;
        out->next = 0;
        return;
    }
    rl__u128 need = (rl__u128)(uint64_t)s->used * (uint64_t)RL_NS_PER_SEC - (uint64_t)s->frac;
    rl_ns ahead = s->last - now;
    out->reset_after = rl__add_sat(ahead, rl__recip_ceil(&p->per_rate, need));
    rl_fp target = p->capacity - rl_status_want(out->limit, out->remaining);
    out->next = s->used <= target
                    ? 0
                    : rl__add_sat(ahead, rl__recip_ceil(&p->per_rate,
                                                        need - (rl__u128)(uint64_t)target *
                                                                   (uint64_t)RL_NS_PER_SEC));
}

static int tb_prepare(void *pp, char *err, size_t errlen)
{
    tb_params *p = pp;
    (void)err;
    (void)errlen;
    p->window = rl__ceil_div((rl__u128)(uint64_t)p->capacity * (uint64_t)RL_NS_PER_SEC,
                             (uint64_t)p->rate);
    p->per_rate = rl__recip_make((uint64_t)p->rate);
    return 0;
}

/* used never negative nor past what charges saturate at, frac a remainder of a division by
 * a second, and a sane time. */
static int tb_state_valid(const void *pp, const void *st)
{
    const tb_state *s = st;
    (void)pp;
    return rl__used_ok(s->used) && s->frac >= 0 && s->frac < RL_NS_PER_SEC &&
           rl__time_ok(s->last);
}

static void tb_name(const void *pp, char *buf, size_t len)
{
    const tb_params *p = pp;
    char c[32], r[32];
    rl_fmt_fp(c, sizeof c, p->capacity);
    rl_fmt_fp(r, sizeof r, p->rate);
    snprintf(buf, len, "token_bucket(%s, %s/s)", c, r);
}

static rl_fp tb_capacity(const void *pp)
{
    return ((const tb_params *)pp)->capacity;
}

static const rl_param_def tb_params_def[] = {
    {"capacity", RL_PARAM_AMOUNT, offsetof(tb_params, capacity), 1e-6, 1e12, 0, 1,
     "most the bucket holds (a new key starts full)"},
    {"per_second", RL_PARAM_RATE, offsetof(tb_params, rate), 1e-6, 1e12, 0, 1,
     "refill per second"},
};

/* The Redis port: token_bucket.lua beside this file. */
static const char *const tb_redis_params[] = {"capacity", "per_second"};
static const rl_rule_redis tb_redis = {
    .tag = "tb",
    .params = tb_redis_params,
    .nparams = 2,
    .layout = 1,
};

/* A limit of n per unit (envoyproxy/ratelimit's YAML): capacity n, refilled at n per unit. */
static const rl_rule_per_unit tb_per_unit = {.amount = "capacity", .rate = "per_second"};

const rl_rule_type rl__token_bucket = {
    .api_version = RL_RULE_API_VERSION,
    .name = "token_bucket",
    .params = tb_params_def,
    .nparams = sizeof tb_params_def / sizeof tb_params_def[0],
    .params_size = sizeof(tb_params),
    .state_size = sizeof(tb_state),
    .flags = RL_RULE_LEASABLE,
    .prepare = tb_prepare,
    .default_name = tb_name,
    .capacity = tb_capacity,
    .refund = tb_refund,
    .idle_at = tb_idle_at,
    .eval_size = sizeof(tb_ev),
    .evaluate = tb_evaluate,
    .commit = tb_commit,
    .report = tb_report,
    .redis = &tb_redis,
    .state_valid = tb_state_valid,
    .per_unit = &tb_per_unit,
};
