/*
 * sliding_window {limit, window}: the log variant. Every take is logged with its time; an entry
 * expires when ts <= now - window; a cost fits when the live entries plus the cost stay within
 * the limit, and the wait is until enough of the oldest entries expire.
 *
 * Worked example: 2 per 10 s, requests at t = 0 and t = 4: a third at t = 5 waits 5 s (the
 * entry of t = 0 expires at t = 10) and is allowed at t = 10. The log costs 16 bytes per take
 * in the window (takes at the same nanosecond share one entry); prefer sliding_window_counter
 * for large limits.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core.h"

typedef struct swl_params {
    rl_fp limit;
    rl_ns window;
} swl_params;

typedef struct swl_entry {
    rl_ns ts;
    rl_fp cost;
} swl_entry;

typedef struct swl_log {
    uint32_t cap, head, n;
    swl_entry e[];
} swl_log;

typedef struct swl_state {
    swl_log *log;
    rl_fp sum; /* of every entry in the log, expired or not */
    rl_ns last;
} swl_state;

_Static_assert(sizeof(swl_state) <= RL_STATE_INLINE, "sliding window state fits inline");

static swl_entry *at(const swl_log *l, uint32_t i)
{
    return (swl_entry *)&l->e[(l->head + i) % l->cap];
}

/* The evaluation: the state as read, t = max(now, last), the live sum at t and the first
 * live entry. The log itself stays in the state (RL_RULE_EVAL_IN_STATE). */
typedef struct swl_ev {
    swl_state s;
    rl_ns t;
    rl_fp live;
    uint32_t first;
} swl_ev;

_Static_assert(sizeof(swl_ev) <= RL_EVAL_MAX, "sliding window evaluation fits");

static rl_ns wait_for(const swl_params *p, const swl_ev *e, rl_ns now, rl_fp cost)
{
    if (cost > p->limit)
        return RL_WAIT_NEVER;
    rl_fp live = e->live, room = p->limit - cost;
    if (live <= room)
        return 0;
    const swl_log *l = e->s.log;
    for (uint32_t i = e->first; i < l->n; i++) {
        live -= at(l, i)->cost;
        if (live <= room)
            return rl__add_sat(at(l, i)->ts - now, p->window);
    }
    return RL_WAIT_NEVER; /* not reached: with every entry gone cost fits */
}

static rl_ns swl_evaluate(const void *pp, const void *st, const char *key, size_t keylen,
                          rl_ns now, rl_fp cost, rl_eval *ev)
{
    const swl_params *p = pp;
    swl_ev *e = (swl_ev *)(void *)ev;
    (void)key;
    (void)keylen;
    e->s = *(const swl_state *)st;
    e->t = rl__max_ns(now, e->s.last);
    e->live = e->s.sum;
    uint32_t i = 0, n = e->s.log ? e->s.log->n : 0;
    for (; i < n && at(e->s.log, i)->ts <= e->t - p->window; i++)
        e->live -= at(e->s.log, i)->cost;
    e->first = i;
    return wait_for(p, e, now, cost);
}

static void expire(const swl_params *p, swl_state *s, rl_ns t)
{
    swl_log *l = s->log;
    while (l && l->n > 0 && at(l, 0)->ts <= t - p->window) {
        s->sum -= at(l, 0)->cost;
        l->head = (l->head + 1) % l->cap;
        l->n--;
    }
}

static int grow(swl_state *s)
{
    swl_log *l = s->log;
    uint32_t cap = l ? l->cap * 2 : 4;
    swl_log *nl = malloc(sizeof *nl + (size_t)cap * sizeof(swl_entry));
    if (!nl)
        return -1;
    nl->cap = cap;
    nl->head = 0;
    nl->n = 0;
    for (uint32_t i = 0; l && i < l->n; i++)
        nl->e[nl->n++] = *at(l, i);
    free(l);
    s->log = nl;
    return 0;
}

/* Logs amount at t (t >= every logged time). */
static void append(swl_state *s, rl_ns t, rl_fp amount)
{
    swl_log *l = s->log;
    if (l && l->n > 0 && at(l, l->n - 1)->ts == t) {
        at(l, l->n - 1)->cost = rl__used_add(at(l, l->n - 1)->cost, amount);
    } else if ((l && l->n < l->cap) || grow(s) == 0) {
        l = s->log;
        *at(l, l->n) = (swl_entry){t, amount};
        l->n++;
    } else if (l && l->n > 0) {
        /* out of memory: count it with the newest entry, moved to t so it expires no earlier */
        at(l, l->n - 1)->ts = t;
        at(l, l->n - 1)->cost = rl__used_add(at(l, l->n - 1)->cost, amount);
    } else {
        return; /* nothing to count it with: the take cannot be recorded */
    }
    s->sum = rl__used_add(s->sum, amount);
}

static void swl_commit(const void *pp, void *st, rl_eval *ev, rl_fp cost)
{
    swl_state *s = st;
    swl_ev *e = (swl_ev *)(void *)ev;
    expire(pp, s, e->t);
    append(s, e->t, cost);
    s->last = e->t;
    e->s = *s;
    e->live = s->sum;
    e->first = 0;
}

static void swl_refund(const void *pp, void *st, rl_ns now, rl_ns taken_at, rl_fp amount)
{
    swl_state *s = st;
    rl_ns t = rl__max_ns(now, s->last);
    expire(pp, s, t);
    s->last = t;
    if (amount < 0) {
        append(s, t, -amount);
        return;
    }
    for (uint32_t i = s->log ? s->log->n : 0; i-- > 0;) {
        swl_entry *e = at(s->log, i);
        if (e->ts < taken_at)
            break; /* expired already: left alone */
        if (e->ts == taken_at) {
            rl_fp back = amount < e->cost ? amount : e->cost;
            e->cost -= back;
            s->sum -= back;
            break;
        }
    }
}

static rl_ns swl_idle_at(const void *pp, const void *st)
{
    const swl_state *s = st;
    if (!s->log || s->log->n == 0)
        return 0;
    return rl__add_sat(s->last, ((const swl_params *)pp)->window);
}

static void swl_report(const void *pp, const rl_eval *ev, rl_ns now, rl_rule_status *out)
{
    const swl_params *p = pp;
    const swl_ev *e = (const swl_ev *)(const void *)ev;
    out->limit = p->limit;
    out->remaining = p->limit - e->live;
    out->reset_after = e->live > 0 ? rl__add_sat(e->s.last - now, p->window) : 0;
    out->window = p->window;
    out->next = e->live > 0 ? wait_for(p, e, now, rl_status_want(p->limit, out->remaining)) : 0;
}

static void swl_free(const void *pp, void *st)
{
    swl_state *s = st;
    (void)pp;
    free(s->log);
    s->log = NULL;
}

/* Saved as: sum, last, count, then (ts, cost) pairs, oldest first. */
static size_t swl_save(const void *pp, const void *st, void *buf, size_t len)
{
    const swl_state *s = st;
    uint32_t n = s->log ? s->log->n : 0;
    size_t need = 2 * sizeof(int64_t) + sizeof(uint32_t) + (size_t)n * sizeof(swl_entry);
    (void)pp;
    if (need > len)
        return need;
    char *p = buf;
    memcpy(p, &s->sum, sizeof s->sum);
    memcpy(p + 8, &s->last, sizeof s->last);
    memcpy(p + 16, &n, sizeof n);
    for (uint32_t i = 0; i < n; i++)
        memcpy(p + 20 + i * sizeof(swl_entry), at(s->log, i), sizeof(swl_entry));
    return need;
}

static int swl_load(const void *pp, void *st, const void *buf, size_t len)
{
    swl_state *s = st;
    const char *p = buf;
    uint32_t n;
    (void)pp;
    if (len < 20)
        return -1;
    memcpy(&n, p + 16, sizeof n);
    if (len != 20 + (size_t)n * sizeof(swl_entry))
        return -1;
    memcpy(&s->sum, p, sizeof s->sum);
    memcpy(&s->last, p + 8, sizeof s->last);
    if (n == 0)
        return 0;
    uint32_t cap = 4;
    while (cap < n)
        cap *= 2;
    if (!(s->log = malloc(sizeof *s->log + (size_t)cap * sizeof(swl_entry))))
        return -1;
    s->log->cap = cap;
    s->log->head = 0;
    s->log->n = n;
    memcpy(s->log->e, p + 20, (size_t)n * sizeof(swl_entry));
    return 0;
}

/* A sane time, entries in strictly increasing time up to it, each cost not negative, and sum
 * their exact total within what charges saturate at: then the live sum never goes below zero
 * nor overflows as entries expire. */
static int swl_state_valid(const void *pp, const void *st)
{
    const swl_state *s = st;
    rl_fp total = 0;
    (void)pp;
    if (!rl__time_ok(s->last) || !rl__used_ok(s->sum))
        return 0;
    for (uint32_t i = 0, n = s->log ? s->log->n : 0; i < n; i++) {
        const swl_entry *e = at(s->log, i);
        if (!rl__time_ok(e->ts) || e->ts > s->last || (i > 0 && e->ts <= at(s->log, i - 1)->ts))
            return 0;
        if (!rl__used_ok(e->cost) || e->cost > RL__USED_MAX - total)
            return 0;
        total += e->cost;
    }
    return total == s->sum;
}

static void swl_name(const void *pp, char *buf, size_t len)
{
    const swl_params *p = pp;
    char l[32], w[32];
    rl_fmt_fp(l, sizeof l, p->limit);
    rl_fmt_ns(w, sizeof w, p->window);
    snprintf(buf, len, "sliding_window(%s, %ss)", l, w);
}

static rl_fp swl_capacity(const void *pp)
{
    return ((const swl_params *)pp)->limit;
}

static const rl_param_def swl_params_def[] = {
    {"limit", RL_PARAM_AMOUNT, offsetof(swl_params, limit), 1e-6, 1e6, 0, 1,
     "most per sliding window"},
    {"window", RL_PARAM_DURATION, offsetof(swl_params, window), 0.001, 31622400, 0, 1,
     "window length in seconds"},
};

/* The Redis port: sliding_window.lua beside this file. */
static const char *const swl_redis_params[] = {"limit", "window"};
static const rl_rule_redis swl_redis = {
    .tag = "sw",
    .params = swl_redis_params,
    .nparams = 2,
    .layout = 1,
};

/* A limit of n per unit (envoyproxy/ratelimit's YAML): n per window of the unit. */
static const rl_rule_per_unit swl_per_unit = {.amount = "limit", .window = "window"};

const rl_rule_type rl__sliding_window = {
    .api_version = RL_RULE_API_VERSION,
    .name = "sliding_window",
    .params = swl_params_def,
    .nparams = sizeof swl_params_def / sizeof swl_params_def[0],
    .params_size = sizeof(swl_params),
    .state_size = sizeof(swl_state),
    .flags = RL_RULE_EVAL_IN_STATE,
    .default_name = swl_name,
    .capacity = swl_capacity,
    .refund = swl_refund,
    .idle_at = swl_idle_at,
    .state_free = swl_free,
    .state_save = swl_save,
    .state_load = swl_load,
    .eval_size = sizeof(swl_ev),
    .evaluate = swl_evaluate,
    .commit = swl_commit,
    .report = swl_report,
    .redis = &swl_redis,
    .state_valid = swl_state_valid,
    .per_unit = &swl_per_unit,
};
