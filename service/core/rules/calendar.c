/*
 * calendar {limit, period, time_zone, week_start, month_day}: at most limit per period of the
 * calendar in a time zone: a day, a week (from week_start), a month (from its month_day) or a
 * year (from 1 January). A period starts at local midnight of its first day, as the zone's
 * rules say (tz.h: read once from the tz database when the rule is loaded), and lasts until the
 * next one starts: 23 or 25 hours for a day across a change of daylight saving time, 28 to 31
 * days for a month. Where a zone's change skips local midnight, the period starts at the first
 * instant after it (the change itself); where a change back repeats it, at its first
 * occurrence.
 *
 * Worked example: 2 a day in Europe/Berlin. Requests at 2026-03-28 10:00 and 11:00 local
 * (09:00 and 10:00 UTC) fill the day; a third at 23:00 local (22:00 UTC) waits 1 h, until
 * midnight; the day of 2026-03-29 lasts 23 hours (clocks go from 02:00 to 03:00), from 23:00 UTC
 * on the 28th to 22:00 UTC on the 29th.
 *
 * The state keeps the bounds of the period counted and the amount counted in it; a time at or
 * after its end starts a new period from zero, a time before its end (the clock going back
 * included) counts in it.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../core.h"
#include "../tz.h"

enum { P_DAY, P_WEEK, P_MONTH, P_YEAR };
static const char *const period_names[] = {"day", "week", "month", "year"};
static const char *const weekday_names[] = {"sunday",   "monday", "tuesday", "wednesday",
                                            "thursday", "friday", "saturday"};

typedef struct cal_params {
    rl_fp limit;
    rl_strings period, time_zone, week_start;
    int64_t month_day;
    /* from prepare */
    int kind;
    unsigned wstart;
    rl_tz *tz;
} cal_params;

typedef struct cal_state {
    rl_ns start, end; /* the period counted; end == 0: a key never seen */
    rl_fp count;
} cal_state;

_Static_assert(sizeof(cal_state) <= RL_STATE_INLINE, "calendar state fits inline");

/* ---- periods -------------------------------------------------------------------------------- */

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return q - ((a % b) != 0 && ((a < 0) != (b < 0)));
}

/* The first date of the period holding the local date day. */
static int64_t first_day(const cal_params *p, int64_t day)
{
    int64_t y;
    unsigned m, d;
    switch (p->kind) {
    case P_WEEK:
        return day - (int64_t)((rl__weekday(day) + 7 - p->wstart) % 7);
    case P_MONTH:
        rl__civil_from_days(day, &y, &m, &d);
        if (d < (unsigned)p->month_day) {
            if (--m == 0) {
                m = 12;
                y--;
            }
        }
        return rl__days_from_civil(y, m, (unsigned)p->month_day);
    case P_YEAR:
        rl__civil_from_days(day, &y, &m, &d);
        return rl__days_from_civil(y, 1, 1);
    default:
        return day;
    }
}

/* The first date of the period after the one starting on first. */
static int64_t next_day(const cal_params *p, int64_t first)
{
    int64_t y;
    unsigned m, d;
    switch (p->kind) {
    case P_WEEK:
        return first + 7;
    case P_MONTH:
        rl__civil_from_days(first, &y, &m, &d);
        return m == 12 ? rl__days_from_civil(y + 1, 1, d) : rl__days_from_civil(y, m + 1, d);
    case P_YEAR:
        rl__civil_from_days(first, &y, &m, &d);
        return rl__days_from_civil(y + 1, 1, 1);
    default:
        return first + 1;
    }
}

/* A time in seconds as ns, no earlier than time 0: a state keeps no time before it (a period
 * holding time 0 starts there, as a key's first time can be no earlier). */
static rl_ns ns_of(int64_t sec)
{
    if (sec <= 0)
        return 0;
    return sec > INT64_MAX / RL_NS_PER_SEC ? RL_WAIT_NEVER : sec * RL_NS_PER_SEC;
}

/* The period holding t: [*start, *end) in ns, and its first date in *first (a time before 0
 * counts as 0). */
static void period_of(const cal_params *p, rl_ns t, rl_ns *start, rl_ns *end, int64_t *first)
{
    int64_t sec = floor_div(t > 0 ? t : 0, RL_NS_PER_SEC);
    int64_t day = floor_div(sec + rl__tz_offset(p->tz, sec), 86400);
    int64_t f = first_day(p, day), nf = next_day(p, f);
    int64_t e = rl__tz_midnight(p->tz, nf);
    /* a change back across midnight repeats local times of the day before: the instant is
     * then after the next period's first start, and in that period */
    for (int i = 0; i < 4 && sec >= e; i++) {
        f = nf;
        nf = next_day(p, f);
        e = rl__tz_midnight(p->tz, nf);
    }
    *start = ns_of(rl__tz_midnight(p->tz, f));
    *end = ns_of(e);
    if (first)
        *first = f;
}

/* ---- the rule ------------------------------------------------------------------------------ */

typedef struct cal_ev {
    cal_state s;
} cal_ev;

_Static_assert(sizeof(cal_ev) <= RL_EVAL_MAX, "calendar evaluation fits");

/* The state at now: the same period while now is before its end, else now's period from 0. */
static void bring(const cal_params *p, const cal_state *s, rl_ns now, cal_state *out)
{
    if (s->end != 0 && now < s->end) {
        *out = *s;
        return;
    }
    period_of(p, now, &out->start, &out->end, NULL);
    out->count = 0;
}

static rl_ns wait_for(const cal_params *p, const cal_state *s, rl_ns now, rl_fp cost)
{
    if (cost > p->limit)
        return RL_WAIT_NEVER;
    if (s->count <= p->limit - cost)
        return 0;
    return s->end - now;
}

static rl_ns cal_evaluate(const void *pp, const void *st, const char *key, size_t keylen, rl_ns now,
                          rl_fp cost, rl_eval *ev)
{
    cal_ev *e = (cal_ev *)(void *)ev;
    (void)key;
    (void)keylen;
    bring(pp, st, now, &e->s);
    return wait_for(pp, &e->s, now, cost);
}

static void cal_commit(const void *pp, void *st, rl_eval *ev, rl_fp cost)
{
    cal_ev *e = (cal_ev *)(void *)ev;
    (void)pp;
    e->s.count = rl__used_add(e->s.count, cost);
    *(cal_state *)st = e->s;
}

static void cal_refund(const void *pp, void *st, rl_ns now, rl_ns taken_at, rl_fp amount)
{
    cal_state *s = st, b;
    bring(pp, s, now, &b);
    if (amount < 0)
        b.count = rl__used_add(b.count, -amount);
    else if (taken_at >= b.start && taken_at < b.end) /* a period that ended is left alone */
        b.count = amount >= b.count ? 0 : b.count - amount;
    *s = b;
}

static rl_ns cal_idle_at(const void *pp, const void *st)
{
    const cal_state *s = st;
    (void)pp;
    return s->count == 0 ? 0 : s->end;
}

static void cal_report(const void *pp, const rl_eval *ev, rl_ns now, rl_rule_status *out)
{
    const cal_params *p = pp;
    const cal_state *s = &((const cal_ev *)(const void *)ev)->s;
    out->limit = p->limit;
    out->remaining = p->limit - s->count;
    out->reset_after = s->count ? s->end - now : 0;
    out->window = s->end - s->start;
    out->next = s->count > 0 ? wait_for(p, s, now, rl_status_want(p->limit, out->remaining)) : 0;
}

/* A count never negative nor past what charges saturate at, and a period of sane times. */
static int cal_state_valid(const void *pp, const void *st)
{
    const cal_state *s = st;
    (void)pp;
    return rl__used_ok(s->count) && rl__time_ok(s->start) && rl__time_ok(s->end) &&
           s->start <= s->end;
}

/* ---- parameters --------------------------------------------------------------------------- */

/* The index of a one-string list's string in names, or -1. */
static int pick(const rl_strings *s, const char *const *names, int n)
{
    for (int i = 0; s->n == 1 && i < n; i++)
        if (strcmp(s->v[0], names[i]) == 0)
            return i;
    return -1;
}

static int cal_prepare(void *pp, char *err, size_t errlen)
{
    cal_params *p = pp;
    p->kind = pick(&p->period, period_names, 4);
    if (p->kind < 0) {
        snprintf(err, errlen, "period: must be \"day\", \"week\", \"month\" or \"year\"");
        return -1;
    }
    int w = p->week_start.n ? pick(&p->week_start, weekday_names, 7) : 1;
    if (w < 0) {
        snprintf(err, errlen, "week_start: must be a day of the week in English (\"monday\")");
        return -1;
    }
    if (p->week_start.n && p->kind != P_WEEK) {
        snprintf(err, errlen, "week_start: only for period \"week\"");
        return -1;
    }
    if (p->month_day != 1 && p->kind != P_MONTH) {
        snprintf(err, errlen, "month_day: only for period \"month\"");
        return -1;
    }
    p->wstart = (unsigned)w;
    rl__tz_free(p->tz); /* prepared again (a rule counting dollars is) */
    char why[200];
    p->tz = rl__tz_load(p->time_zone.v[0], why, sizeof why);
    if (!p->tz) {
        snprintf(err, errlen, "time_zone: %s", why);
        return -1;
    }
    return 0;
}

static void cal_params_free(void *pp)
{
    cal_params *p = pp;
    rl__tz_free(p->tz);
    p->tz = NULL;
}

static void cal_name(const void *pp, char *buf, size_t len)
{
    const cal_params *p = pp;
    char l[32];
    rl_fmt_fp(l, sizeof l, p->limit);
    snprintf(buf, len, "calendar(%s/%s, %.64s)", l, period_names[p->kind], p->time_zone.v[0]);
}

static rl_fp cal_capacity(const void *pp)
{
    return ((const cal_params *)pp)->limit;
}

static const rl_param_def cal_params_def[] = {
    {"limit", RL_PARAM_AMOUNT, offsetof(cal_params, limit), 1e-6, 1e12, 0, 1, "most per period"},
    {"period", RL_PARAM_STRINGS, offsetof(cal_params, period), 1, 1, 0, 1,
     "day, week, month or year"},
    {"time_zone", RL_PARAM_STRINGS, offsetof(cal_params, time_zone), 1, 1, 0, 1,
     "IANA time zone whose local midnights start the periods (\"Europe/Berlin\", \"UTC\")"},
    {"week_start", RL_PARAM_STRINGS, offsetof(cal_params, week_start), 1, 1, 0, 0,
     "first day of a week (default monday)"},
    {"month_day", RL_PARAM_INT, offsetof(cal_params, month_day), 1, 28, 1, 0,
     "day of the month a month starts on (default 1)"},
};

static void cal_period(const void *pp, rl_ns now, rl_ns *start, rl_ns *end)
{
    period_of(pp, now, start, end, NULL);
}

/* ---- the Redis port: calendar.lua beside this file ------------------------------------------ */

/* The bounds of the period before the one holding now, of that one and of the one after:
 * Redis's clock picks among them, so that it, not this instance's, decides the period. */
#define CAL_BOUNDS 4

static size_t cal_redis_args(const void *pp, rl_ns now, int64_t *out)
{
    const cal_params *p = pp;
    rl_ns start, end;
    int64_t f;
    period_of(p, now, &start, &end, &f);
    /* f - 1 is the last date of the period before */
    out[0] = ns_of(rl__tz_midnight(p->tz, first_day(p, f - 1)));
    out[1] = start;
    out[2] = end;
    out[3] = ns_of(rl__tz_midnight(p->tz, next_day(p, next_day(p, f))));
    return CAL_BOUNDS;
}

static const char *const cal_redis_params[] = {"limit"};
static const rl_rule_redis cal_redis = {
    .tag = "cal",
    .params = cal_redis_params,
    .nparams = 1,
    .layout = 1,
    .nargs = CAL_BOUNDS,
    .args = cal_redis_args,
};

const rl_rule_type rl__calendar = {
    .api_version = RL_RULE_API_VERSION,
    .name = "calendar",
    .params = cal_params_def,
    .nparams = sizeof cal_params_def / sizeof cal_params_def[0],
    .params_size = sizeof(cal_params),
    .state_size = sizeof(cal_state),
    .flags = RL_RULE_PERIODIC,
    .prepare = cal_prepare,
    .params_free = cal_params_free,
    .default_name = cal_name,
    .capacity = cal_capacity,
    .refund = cal_refund,
    .idle_at = cal_idle_at,
    .eval_size = sizeof(cal_ev),
    .evaluate = cal_evaluate,
    .commit = cal_commit,
    .report = cal_report,
    .redis = &cal_redis,
    .state_valid = cal_state_valid,
    .period = cal_period,
};
