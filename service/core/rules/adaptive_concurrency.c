/*
 * adaptive_concurrency {algorithm, initial_limit, min_limit, max_limit, ...}: a concurrency
 * rule (slots taken on acquire, given back on release or when the reservation expires) whose
 * limit moves with how the calls went, one limit per key. Releases say it (rl_outcome: ok,
 * error, timeout or dropped, and a latency); a reservation that expires is a timeout.
 *
 * Samples are gathered in windows, as Netflix concurrency-limits' WindowedLimit does (its
 * defaults: a window of at least 1 s and at least 10 samples); a window opens when the last
 * one closed (a new key's at time 0), closes on the first sample that finds both reached,
 * and the limit moves once per window. A failure of a call taken before the limit last went
 * down is not counted (the cut was for it already):
 *
 *   aimd      (Netflix AIMDLimit) a window with an error, a timeout, a dropped call or a
 *             latency above timeout: limit * backoff_ratio (0.9); else, when the window's most
 *             in flight was at least half the limit: limit + step (1).
 *   gradient  (Netflix Gradient2Limit) short = the window's mean latency (ok and timed-out
 *             calls); long = its exponential average over long_window windows (600; the first
 *             10 a plain mean), cut by 5% when above 2 * short; unchanged while less than half
 *             the limit was in flight; else g = clamp(tolerance (1.5) * long / short, 0.5, 1),
 *             new = limit * g + queue_size (4), limit = limit * (1 - smoothing (0.2)) +
 *             new * smoothing. Gradient2 ignores errors; here a window with an error, a
 *             timeout or a dropped call takes g = 0.5 and is kept out of long.
 *
 * Then the limit is kept in [min_limit, max_limit]. Admission counts whole slots: a request
 * fits when held + 1 <= floor(limit) (minus a reserved share, a fraction of that limit).
 *
 * Worked example (aimd, initial 10, window 1 s, window_size 2): two acquires at 0 hold 2
 * slots; released ok at 0.5 s and 1 s: the window (2 samples, 1 s) closes with 2 in flight at
 * most, 2 * 2 < 10: the limit stays 10. Ten acquires, then a release with "error" and one ok
 * 1 s later: limit 10 * 0.9 = 9; the next acquire with 9 held is denied.
 *
 * Arithmetic in integers, the same in the Redis port: amounts in millionths (rl_fp), ratios
 * in millionths, latencies of the gradient in microseconds, every quotient rounded down.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../core.h"

enum { ALGO_AIMD = 0, ALGO_GRADIENT = 1 };

/* Windows whose plain mean starts long before its exponential average takes over. */
#define WARMUP 10
/* A key with nothing in flight keeps what it learnt this long after its last use. */
#define KEEP ((rl_ns)3600 * RL_NS_PER_SEC)
/* The largest limit any rule of the type allows (max_limit's bound), in rl_fp. */
#define LIMIT_MAX ((rl_fp)100000 * RL_FP_ONE)
/* The longest latency an outcome states, in us. */
#define LAT_MAX_US (RL_OUTCOME_LATENCY_MAX / 1000)
/* Latency sums saturate here (2^52 us), far beyond any window. */
#define SUM_MAX ((int64_t)1 << 52)

typedef struct ac_params {
    rl_strings algorithm;
    rl_fp initial, min, max;
    rl_fp backoff; /* ratio in millionths; 0 for gradient */
    rl_fp step;
    rl_ns timeout;
    rl_fp tolerance; /* ratio in millionths; 0 for aimd (how the Redis port tells them apart) */
    rl_fp smoothing;
    rl_fp queue;
    int64_t long_window;
    rl_ns window;
    int64_t window_size;
    rl_ns retry;
    int algo; /* set by prepare */
} ac_params;

typedef struct ac_state {
    rl_fp held;
    rl_fp limit;     /* 0: a new key, at initial_limit */
    rl_ns last;      /* last take or sample */
    rl_ns win_start; /* when the window opened: the last one closed (0 for a new key) */
    rl_ns cut_at;    /* when the limit last went down */
    int64_t win_n;   /* samples in the window */
    int64_t win_lat_n;
    int64_t win_lat_sum; /* us */
    int64_t win_drop;    /* 1: an error, a timeout or a dropped call in the window */
    rl_fp win_inflight;  /* most held since the window opened */
    int64_t long_rtt;    /* gradient's baseline, us; 0: none yet */
    int64_t long_n;      /* windows in the baseline, up to WARMUP */
} ac_state;

typedef struct ac_ev {
    rl_fp held, limit;
    rl_ns now;
} ac_ev;

static rl_fp clamp(const ac_params *p, rl_fp v)
{
    return v < p->min ? p->min : v > p->max ? p->max : v;
}

/* The key's limit: initial_limit for a new key, and within the bounds of the rule now in
 * force (a snapshot's state may come from a rule with other bounds). */
static rl_fp limit_of(const ac_params *p, const ac_state *s)
{
    return clamp(p, s->limit ? s->limit : p->initial);
}

/* The whole slots of the limit. */
static rl_fp whole(rl_fp limit)
{
    return limit / RL_FP_ONE * RL_FP_ONE;
}

/* need: whole slots plus fraction * RL_FP_ONE of reserved share (RL_RULE_RESERVE_FRACTION). */
static rl_ns wait_for(const ac_params *p, rl_fp held, rl_fp limit, rl_fp need)
{
    rl_fp slots = need / RL_FP_ONE * RL_FP_ONE, frac = need % RL_FP_ONE;
    rl_fp lim = whole(limit);
    rl_fp reserve = lim / RL_FP_ONE * frac; /* lim * frac / RL_FP_ONE, exact */
    if (slots > whole(p->max))
        return RL_WAIT_NEVER;
    return held + slots + reserve <= lim ? 0 : p->retry;
}

static rl_ns ac_evaluate(const void *pp, const void *st, const char *key, size_t keylen, rl_ns now,
                         rl_fp cost, rl_eval *ev)
{
    const ac_params *p = pp;
    const ac_state *s = st;
    ac_ev *e = (ac_ev *)(void *)ev;
    (void)key;
    (void)keylen;
    e->held = s->held;
    e->limit = limit_of(p, s);
    e->now = now;
    return wait_for(p, e->held, e->limit, cost);
}

static void ac_commit(const void *pp, void *st, rl_eval *ev, rl_fp cost)
{
    const ac_params *p = pp;
    ac_state *s = st;
    ac_ev *e = (ac_ev *)(void *)ev;
    s->limit = limit_of(p, s);
    s->held = rl__used_add(s->held, cost);
    if (s->held > s->win_inflight)
        s->win_inflight = s->held;
    if (e->now > s->last)
        s->last = e->now;
    e->held = s->held;
    e->limit = s->limit;
}

/* The gradient's baseline takes the window's mean latency short (us). */
static void baseline(const ac_params *p, ac_state *s, int64_t shrt)
{
    if (s->long_n < WARMUP) {
        s->long_rtt = (s->long_rtt * s->long_n + shrt) / (s->long_n + 1);
        s->long_n++;
    } else {
        s->long_rtt = (s->long_rtt * (p->long_window - 1) + 2 * shrt) / (p->long_window + 1);
    }
    if (s->long_rtt > 2 * shrt)
        s->long_rtt = s->long_rtt * 95 / 100;
}

/* The window is complete: the limit moves once. */
static void close_window(const ac_params *p, ac_state *s, rl_ns now)
{
    rl_fp limit = s->limit;
    int busy = s->win_inflight * 2 >= limit;
    if (p->algo == ALGO_AIMD) {
        if (s->win_drop)
            limit = limit / RL_FP_ONE * p->backoff + limit % RL_FP_ONE * p->backoff / RL_FP_ONE;
        else if (busy)
            limit += p->step;
    } else {
        int64_t shrt = s->win_lat_n ? s->win_lat_sum / s->win_lat_n : 0;
        if (shrt > LAT_MAX_US) /* a mean of latencies never above it, but for a damaged sum */
            shrt = LAT_MAX_US;
        if (!s->win_drop && shrt > 0)
            baseline(p, s, shrt);
        if (s->win_drop || busy) {
            rl_fp g = RL_FP_ONE;
            if (s->win_drop)
                g = RL_FP_ONE / 2;
            else if (shrt > 0) {
                g = p->tolerance * s->long_rtt / shrt;
                g = g < RL_FP_ONE / 2 ? RL_FP_ONE / 2 : g > RL_FP_ONE ? RL_FP_ONE : g;
            }
            rl_fp nl = limit * g / RL_FP_ONE + p->queue;
            limit = (limit * (RL_FP_ONE - p->smoothing) + nl * p->smoothing) / RL_FP_ONE;
        }
    }
    if (limit < s->limit)
        s->cut_at = now;
    s->limit = clamp(p, limit);
    s->win_start = now;
    s->win_n = s->win_lat_n = s->win_lat_sum = s->win_drop = 0;
    s->win_inflight = s->held;
}

/* One call's outcome, of a call taken at taken_at: into the window, which may close. A failure
 * of a call taken before the limit last went down is not counted: it started under the
 * higher limit, which was cut for it already (one cut per congestion, as TCP does). */
static void learn(const ac_params *p, ac_state *s, rl_ns now, rl_ns taken_at, const rl_outcome *o)
{
    int counts = taken_at >= s->cut_at;
    s->win_n++;
    if (o->kind != RL_OUTCOME_OK && o->kind != RL_OUTCOME_NONE && counts)
        s->win_drop = 1;
    if (o->latency >= 0) {
        if (p->algo == ALGO_AIMD && o->latency > p->timeout && counts)
            s->win_drop = 1;
        if (o->kind == RL_OUTCOME_OK || o->kind == RL_OUTCOME_NONE ||
            o->kind == RL_OUTCOME_TIMEOUT) {
            int64_t us = o->latency / 1000;
            s->win_lat_sum = s->win_lat_sum > SUM_MAX - us ? SUM_MAX : s->win_lat_sum + us;
            s->win_lat_n++;
        }
    }
    if (s->win_n >= p->window_size && now - s->win_start >= p->window)
        close_window(p, s, now);
}

static void ac_release_outcome(const void *pp, void *st, rl_ns now, rl_ns taken_at, rl_fp amount,
                               const rl_outcome *o)
{
    const ac_params *p = pp;
    ac_state *s = st;
    s->limit = limit_of(p, s);
    if (o && (o->kind != RL_OUTCOME_NONE || o->latency >= 0))
        learn(p, s, now, taken_at, o);
    s->held = amount >= s->held ? 0 : s->held - amount;
    if (now > s->last)
        s->last = now;
}

static void ac_release(const void *pp, void *st, rl_ns now, rl_fp amount)
{
    ac_release_outcome(pp, st, now, 0, amount, NULL);
}

static rl_ns ac_idle_at(const void *pp, const void *st)
{
    const ac_state *s = st;
    (void)pp;
    return s->held == 0 ? rl__add_sat(s->last, KEEP) : RL_WAIT_NEVER;
}

static void ac_report(const void *pp, const rl_eval *ev, rl_ns now, rl_rule_status *out)
{
    const ac_params *p = pp;
    const ac_ev *e = (const ac_ev *)(const void *)ev;
    rl_fp lim = whole(e->limit);
    (void)now;
    out->limit = lim;
    out->remaining = lim - e->held;
    out->reset_after = 0;
    out->window = 0;
    out->next = e->held > 0 && out->remaining < lim
                    ? wait_for(p, e->held, e->limit, rl_status_want(lim, out->remaining))
                    : 0;
}

static int ac_state_valid(const void *pp, const void *st)
{
    const ac_state *s = st;
    (void)pp;
    return rl__used_ok(s->held) && s->limit >= 0 && s->limit <= LIMIT_MAX && rl__time_ok(s->last) &&
           rl__time_ok(s->win_start) && rl__time_ok(s->cut_at) && s->win_n >= 0 &&
           s->win_lat_n >= 0 && s->win_lat_n <= s->win_n && s->win_lat_sum >= 0 &&
           s->win_lat_sum <= SUM_MAX && (s->win_drop == 0 || s->win_drop == 1) &&
           rl__used_ok(s->win_inflight) && s->long_rtt >= 0 && s->long_rtt <= LAT_MAX_US &&
           s->long_n >= 0 && s->long_n <= WARMUP;
}

static int ac_prepare(void *pp, char *err, size_t errlen)
{
    ac_params *p = pp;
    const rl_strings *a = &p->algorithm;
    /* the parameter of the other algorithm is 0: the Redis port tells them apart by it */
    if (a->n == 1 && a->len[0] == 4 && memcmp(a->v[0], "aimd", 4) == 0) {
        p->algo = ALGO_AIMD;
        p->tolerance = 0;
        if (p->backoff == 0) {
            snprintf(err, errlen, "backoff_ratio: must be above 0 with aimd");
            return -1;
        }
    } else if (a->n == 1 && a->len[0] == 8 && memcmp(a->v[0], "gradient", 8) == 0) {
        p->algo = ALGO_GRADIENT;
        p->backoff = 0;
        if (p->tolerance == 0) {
            snprintf(err, errlen, "tolerance: must be above 0 with gradient");
            return -1;
        }
    } else {
        snprintf(err, errlen, "algorithm: must be \"aimd\" or \"gradient\"");
        return -1;
    }
    if (p->min > p->max) {
        snprintf(err, errlen, "min_limit: must not be above max_limit");
        return -1;
    }
    if (p->initial < p->min || p->initial > p->max) {
        snprintf(err, errlen, "initial_limit: must be from min_limit to max_limit");
        return -1;
    }
    return 0;
}

static void ac_name(const void *pp, char *buf, size_t len)
{
    const ac_params *p = pp;
    char lo[32], hi[32];
    rl_fmt_fp(lo, sizeof lo, p->min);
    rl_fmt_fp(hi, sizeof hi, p->max);
    snprintf(buf, len, "adaptive_concurrency(%s, %s..%s)",
             p->algo == ALGO_AIMD ? "aimd" : "gradient", lo, hi);
}

static rl_fp ac_capacity(const void *pp)
{
    return ((const ac_params *)pp)->max;
}

static const rl_param_def ac_params_def[] = {
    {"algorithm", RL_PARAM_STRINGS, offsetof(ac_params, algorithm), 1, 1, 0, 1,
     "\"aimd\" or \"gradient\""},
    {"initial_limit", RL_PARAM_AMOUNT, offsetof(ac_params, initial), 1, 100000, 20, 0,
     "the limit of a new key"},
    {"min_limit", RL_PARAM_AMOUNT, offsetof(ac_params, min), 1, 100000, 1, 0,
     "the limit never goes below"},
    {"max_limit", RL_PARAM_AMOUNT, offsetof(ac_params, max), 1, 100000, 1000, 0,
     "the limit never goes above"},
    {"backoff_ratio", RL_PARAM_AMOUNT, offsetof(ac_params, backoff), 0, 0.999999, 0.9, 0,
     "aimd: the limit is multiplied by it after a window with a failure (0 with gradient)"},
    {"step", RL_PARAM_AMOUNT, offsetof(ac_params, step), 0.000001, 1000, 1, 0,
     "aimd: added after a busy window without failure"},
    {"timeout", RL_PARAM_DURATION, offsetof(ac_params, timeout), 0.001, 3600, 5, 0,
     "aimd: a latency above it counts as a failure, in seconds"},
    {"tolerance", RL_PARAM_AMOUNT, offsetof(ac_params, tolerance), 0, 10, 1.5, 0,
     "gradient: the latency ratio to the baseline taken as no queueing (0 with aimd)"},
    {"smoothing", RL_PARAM_AMOUNT, offsetof(ac_params, smoothing), 0.000001, 1, 0.2, 0,
     "gradient: the weight of each window's new limit"},
    {"queue_size", RL_PARAM_AMOUNT, offsetof(ac_params, queue), 0, 1000, 4, 0,
     "gradient: slots added above the gradient's limit"},
    {"long_window", RL_PARAM_INT, offsetof(ac_params, long_window), 1, 100000, 600, 0,
     "gradient: the windows the latency baseline averages over"},
    {"window", RL_PARAM_DURATION, offsetof(ac_params, window), 0.001, 3600, 1, 0,
     "a window lasts at least this long, in seconds"},
    {"window_size", RL_PARAM_INT, offsetof(ac_params, window_size), 1, 1000000, 10, 0,
     "a window holds at least this many samples"},
    {"retry", RL_PARAM_DURATION, offsetof(ac_params, retry), 0.001, 3600, 1, 0,
     "retry_after suggested while full, in seconds"},
};

/* The Redis port: adaptive_concurrency.lua beside this file. */
static const char *const ac_redis_params[] = {
    "initial_limit", "min_limit",   "max_limit", "backoff_ratio", "step",
    "timeout",       "tolerance",   "smoothing", "queue_size",    "long_window",
    "window",        "window_size", "retry",
};
static const rl_rule_redis ac_redis = {
    .tag = "ac",
    .params = ac_redis_params,
    .nparams = sizeof ac_redis_params / sizeof ac_redis_params[0],
    .layout = 1,
};

const rl_rule_type rl__adaptive_concurrency = {
    .api_version = RL_RULE_API_VERSION,
    .name = "adaptive_concurrency",
    .params = ac_params_def,
    .nparams = sizeof ac_params_def / sizeof ac_params_def[0],
    .params_size = sizeof(ac_params),
    .state_size = sizeof(ac_state),
    .flags = RL_RULE_UNIT_REQUESTS | RL_RULE_HOLDS | RL_RULE_RESERVE_FRACTION,
    .prepare = ac_prepare,
    .default_name = ac_name,
    .capacity = ac_capacity,
    .release = ac_release,
    .idle_at = ac_idle_at,
    .eval_size = sizeof(ac_ev),
    .evaluate = ac_evaluate,
    .commit = ac_commit,
    .report = ac_report,
    .redis = &ac_redis,
    .state_valid = ac_state_valid,
    .release_outcome = ac_release_outcome,
};
