/*
 * render.c - see render.h.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "render.h"
#include "rules_json.h"

size_t rld_render_blocked_by(char *buf, size_t n, const rl_config *cfg, const rl_decision *d)
{
    const rl_applied *a = &d->applied[d->blocked];
    int len = snprintf(buf, n, "%s: %s", cfg->levels[a->level].name,
                       a->fallback == RL_FALLBACK_CLOSED ? RLD_STORE_UNAVAILABLE : a->rule->name);
    return len < 0 ? 0 : (size_t)len < n ? (size_t)len : n - 1;
}

/* The body up to its "limits" array: allowed, retry_after, blocked_by, reservation. */
static void put_verdict(rld_buf *o, const rl_config *cfg, const rl_decision *d)
{
    rld_buf_puts(o, d->allowed ? "{\"allowed\":true,\"retry_after\":" : "{\"allowed\":false,"
                                                                        "\"retry_after\":");
    if (d->retry_after == RL_WAIT_NEVER)
        rld_buf_puts(o, "null");
    else
        rld_buf_seconds(o, d->retry_after);
    rld_buf_puts(o, ",\"blocked_by\":");
    if (d->blocked >= 0) {
        char by[256];
        size_t n = rld_render_blocked_by(by, sizeof by, cfg, d);
        rld_buf_json_str(o, by, n);
    } else {
        rld_buf_puts(o, "null");
    }
    if (d->reservation[0]) {
        rld_buf_puts(o, ",\"reservation\":");
        rld_buf_json_str(o, d->reservation, strlen(d->reservation));
    }
}

/* 1 when s goes into an sf-string as it is: printable ASCII without '"' or '\\'. */
static int sf_plain(const char *s, size_t n)
{
    int plain = 1;
    for (size_t i = 0; i < n; i++)
        plain &= rld_text_class[(unsigned char)s[i]] == '.';
    return plain;
}

/* The sf-string "<a>.<b>" at p, which has room for 2 * (na + nb) + 3 bytes: printable ASCII,
 * with '"' and '\\' escaped; anything else becomes '?'. Returns the end. */
static char *put_sf_name(char *p, const char *a, size_t na, const char *b, size_t nb)
{
    *p++ = '"';
    if (sf_plain(a, na) && sf_plain(b, nb)) { /* names are nearly always plain */
        memcpy(p, a, na);
        p += na;
        *p++ = '.';
        memcpy(p, b, nb);
        p += nb;
    } else {
        for (const char *part[2] = {a, b}, **s = part; s < part + 2; s++) {
            for (const char *c = *s; *c; c++) {
                unsigned char ch = (unsigned char)*c;
                if (ch == '"' || ch == '\\')
                    *p++ = '\\';
                *p++ = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
            }
            if (s == part)
                *p++ = '.';
        }
    }
    *p++ = '"';
    return p;
}

static int64_t ceil_div(int64_t v, int64_t unit)
{
    if (v <= 0)
        return 0;
    return v / unit + (v % unit != 0);
}

int64_t rld_retry_after_seconds(rl_ns wait)
{
    return ceil_div(wait, RL_NS_PER_SEC);
}

/* A rule's RateLimit-Policy parameters after its name: q, w (when not 0), qu. At most 72. */
static char *put_policy_params(char *p, const rl_rule_status *st, int holds)
{
    RLD_PUT_LIT(p, ";q=");
    p += rld_fmt_i64(p, st->limit > 0 ? st->limit / RL_FP_ONE : 0);
    int64_t w = ceil_div(st->window, RL_NS_PER_SEC);
    if (w > 0) {
        RLD_PUT_LIT(p, ";w=");
        p += rld_fmt_i64(p, w);
    }
    if (holds)
        RLD_PUT_LIT(p, ";qu=\"concurrent-requests\"");
    return p;
}

/* A rule's RateLimit parameters after its name: r, t. At most 46 bytes. */
static char *put_state_params(char *p, const rl_rule_status *st)
{
    RLD_PUT_LIT(p, ";r=");
    p += rld_fmt_i64(p, st->remaining > 0 ? st->remaining / RL_FP_ONE : 0);
    /* t: seconds until more quota (r grows by one), not until the rule is full */
    RLD_PUT_LIT(p, ";t=");
    p += rld_fmt_i64(p, ceil_div(st->next, RL_NS_PER_SEC));
    return p;
}

/* A "limits" member from its remaining balance on: the balance, reset_after, '}'. At most
 * 64 bytes. */
static char *put_limit_tail(char *p, const rl_rule_status *st)
{
    p += rld_fmt_fp(p, st->remaining);
    RLD_PUT_LIT(p, ",\"reset_after\":");
    if (st->reset_after == RL_WAIT_NEVER)
        RLD_PUT_LIT(p, "null");
    else
        p += rld_fmt_seconds(p, st->reset_after > 0 ? st->reset_after : 0);
    *p++ = '}';
    return p;
}

/* ---- what the answers of one rule share ------------------------------------------------ */

#define MEMBER_NAME 48 /* the longest level or rule name kept, its NUL included */
#define MEMBERS 16     /* kept per thread, one place per rule (and level) */

/* The text of a rule's parts of an answer that follows from its level's name, its own name,
 * its limit and window and whether it holds slots alone: written once, kept per thread, and
 * found again by those values (the names compared as text). A memo, so nothing has to be
 * forgotten when the configuration changes: a rule that differs in any of them is written
 * anew. Only plain names are kept (nearly all are). */
typedef struct member {
    char level[MEMBER_NAME], rule[MEMBER_NAME];
    rl_fp limit;
    rl_ns window;
    int holds;
    unsigned char name_len, policy_len, lead_len, mid_len; /* policy_len 0: an empty place */
    char policy[2 * MEMBER_NAME + 3 + 72]; /* "\"<level>.<rule>\";q=...": the name first */
    char lead[MEMBER_NAME + 20];           /* {"level":"<level>","key": */
    char mid[MEMBER_NAME + 60];            /* ,"rule":"<rule>","limit":<limit>,"remaining": */
} member;

static _Thread_local member members[MEMBERS];

/* Writes m for the rule (names of nl and nr bytes, plain, shorter than MEMBER_NAME). */
static void member_make(member *m, const char *level, size_t nl, const char *rule, size_t nr,
                        const rl_rule_status *st, int holds)
{
    memcpy(m->level, level, nl + 1);
    memcpy(m->rule, rule, nr + 1);
    m->limit = st->limit;
    m->window = st->window;
    m->holds = holds;
    char *p = put_sf_name(m->policy, level, nl, rule, nr);
    m->name_len = (unsigned char)(p - m->policy);
    m->policy_len = (unsigned char)(put_policy_params(p, st, holds) - m->policy);
    p = m->lead;
    RLD_PUT_LIT(p, "{\"level\":");
    p = rld_put_json_str(p, level, nl);
    RLD_PUT_LIT(p, ",\"key\":");
    m->lead_len = (unsigned char)(p - m->lead);
    p = m->mid;
    RLD_PUT_LIT(p, ",\"rule\":");
    p = rld_put_json_str(p, rule, nr);
    RLD_PUT_LIT(p, ",\"limit\":");
    p += rld_fmt_fp(p, st->limit);
    RLD_PUT_LIT(p, ",\"remaining\":");
    m->mid_len = (unsigned char)(p - m->mid);
}

/* The shared text of applied rule a (at a level named level), kept or written now; NULL when
 * its names are not kept (long, or not plain). */
static const member *member_of(const char *level, const rl_applied *a, const rl_rule_status *st)
{
    const char *rule = a->rule->name;
    int holds = (a->rule->type->flags & RL_RULE_HOLDS) != 0;
    member *m = &members[((uintptr_t)a->rule / 64 + a->level) % MEMBERS];
    if (m->policy_len && m->limit == st->limit && m->window == st->window && m->holds == holds &&
        strcmp(m->rule, rule) == 0 && strcmp(m->level, level) == 0)
        return m;
    size_t nl = strlen(level), nr = strlen(rule);
    if (nl >= MEMBER_NAME || nr >= MEMBER_NAME || !sf_plain(level, nl) || !sf_plain(rule, nr))
        return NULL;
    member_make(m, level, nl, rule, nr, st, holds);
    return m;
}

/* ---- the answer ------------------------------------------------------------------------ */

/* One member of "limits", after a comma unless it is the first, from m (NULL: written from
 * the names). The room is made once: the strings escaped at worst, the literals (63 bytes)
 * and three numbers of at most 32. */
static void put_limit(rld_buf *o, const member *m, const char *level, const rl_applied *a,
                      const rl_rule_status *st, int first)
{
    const char *rule = a->rule->name;
    size_t names = m ? m->lead_len + m->mid_len : RLD_JSON_STR_MAX(strlen(level) + strlen(rule));
    if (rld_buf_reserve(o, names + RLD_JSON_STR_MAX(a->keylen) + 6 + 63 + 3 * 32) != 0)
        return;
    char *p = o->p + o->len;
    if (!first)
        *p++ = ',';
    if (m) {
        memcpy(p, m->lead, m->lead_len);
        p = rld_put_json_str(p + m->lead_len, a->key, a->keylen);
        memcpy(p, m->mid, m->mid_len);
        p += m->mid_len;
    } else {
        RLD_PUT_LIT(p, "{\"level\":");
        p = rld_put_json_str(p, level, strlen(level));
        RLD_PUT_LIT(p, ",\"key\":");
        p = rld_put_json_str(p, a->key, a->keylen);
        RLD_PUT_LIT(p, ",\"rule\":");
        p = rld_put_json_str(p, rule, strlen(rule));
        RLD_PUT_LIT(p, ",\"limit\":");
        p += rld_fmt_fp(p, st->limit);
        RLD_PUT_LIT(p, ",\"remaining\":");
    }
    o->len = (size_t)(put_limit_tail(p, st) - o->p);
}

/* One rule's members of RateLimit-Policy and RateLimit, after ", " unless it is the first,
 * from m (NULL: written from the names). Room for each: ", ", the name escaped at worst and
 * its parameters (at most 72 and 46 bytes). */
static void put_member(rld_buf *policy, rld_buf *state, const member *m, const char *level,
                       const rl_applied *a, const rl_rule_status *st, int first)
{
    const char *rule = a->rule->name;
    size_t nl = m ? 0 : strlen(level), nr = m ? 0 : strlen(rule);
    size_t nn = m ? m->name_len : 2 * (nl + nr) + 3;
    if (rld_buf_reserve(policy, 2 + (m ? m->policy_len : nn + 72)) != 0 ||
        rld_buf_reserve(state, 2 + nn + 46) != 0)
        return;
    char *p = policy->p + policy->len, *s = state->p + state->len;
    if (!first) {
        RLD_PUT_LIT(p, ", ");
        RLD_PUT_LIT(s, ", ");
    }
    if (m) {
        memcpy(p, m->policy, m->policy_len);
        p += m->policy_len;
        memcpy(s, m->policy, m->name_len);
        s += m->name_len;
    } else {
        char *name = p;
        p = put_sf_name(p, level, nl, rule, nr);
        memcpy(s, name, (size_t)(p - name));
        s += p - name;
        p = put_policy_params(p, st, (a->rule->type->flags & RL_RULE_HOLDS) != 0);
    }
    policy->len = (size_t)(p - policy->p);
    state->len = (size_t)(put_state_params(s, st) - state->p);
}

size_t rld_render_answer(rld_buf *body, rld_buf *policy, rld_buf *state, const rl_config *cfg,
                         const rl_decision *d)
{
    size_t n = 0;
    if (body) {
        put_verdict(body, cfg, d);
        rld_buf_puts(body, ",\"limits\":[");
    }
    for (size_t i = 0; i < d->napplied; i++) {
        const rl_applied *a = &d->applied[i];
        const rl_rule_status *st = rl_decision_status(d, i);
        if (!st)
            continue;
        rl_rule_status dollars;
        if (a->rule->unit == RL_UNIT_USD) { /* shown in dollars, to the millionth */
            dollars = *st;
            dollars.limit /= RL_USD_SCALE;
            dollars.remaining /= RL_USD_SCALE;
            st = &dollars;
        }
        const char *level = cfg->levels[a->level].name;
        const member *m = member_of(level, a, st);
        if (body)
            put_limit(body, m, level, a, st, n == 0);
        if (policy)
            put_member(policy, state, m, level, a, st, n == 0);
        n++;
    }
    if (body)
        rld_buf_puts(body, "]}");
    return n;
}

void rld_render_decision(rld_buf *o, const rl_config *cfg, const rl_decision *d)
{
    rld_render_answer(o, NULL, NULL, cfg, d);
}

size_t rld_render_ratelimit(rld_buf *policy, rld_buf *state, const rl_config *cfg,
                            const rl_decision *d)
{
    return rld_render_answer(NULL, policy, state, cfg, d);
}

/* An amount of a rule counting dollars (nano-dollars) in dollars, exactly: up to 9 decimals. */
static void put_dollars(rld_buf *o, rl_fp v)
{
    char b[48];
    const int64_t nano = RL_FP_ONE * RL_USD_SCALE;
    int64_t w = v / nano, f = v % nano;
    int n = f ? snprintf(b, sizeof b, "%lld.%09lld", (long long)w, (long long)f)
              : snprintf(b, sizeof b, "%lld", (long long)w);
    while (f && b[n - 1] == '0')
        n--;
    rld_buf_put(o, b, (size_t)n);
}

/* {"reserved":..,"actual":..,"refunded":..,"charged":..} of one unit (dollars: in dollars). */
static void put_settled(rld_buf *o, const rl_settled *u, int dollars)
{
    const rl_fp v[4] = {u->reserved, u->actual, u->refunded, u->charged};
    static const char *const name[4] = {"{\"reserved\":", ",\"actual\":", ",\"refunded\":",
                                        ",\"charged\":"};
    for (int i = 0; i < 4; i++) {
        rld_buf_puts(o, name[i]);
        if (dollars)
            put_dollars(o, v[i]);
        else
            rld_buf_fp(o, v[i]);
    }
    rld_buf_putc(o, '}');
}

void rld_render_settlement(rld_buf *o, const rl_config *cfg, const char *reservation,
                           const rl_settlement *s)
{
    rld_buf_puts(o, "{\"reservation\":");
    rld_buf_json_str(o, reservation, strlen(reservation));
    rld_buf_puts(o, ",\"reserved_cost\":");
    rld_buf_fp(o, s->reserved);
    rld_buf_puts(o, ",\"actual_cost\":");
    rld_buf_fp(o, s->actual);
    rld_buf_puts(o, ",\"refunded\":");
    rld_buf_fp(o, s->refunded);
    rld_buf_puts(o, ",\"charged\":");
    rld_buf_fp(o, s->charged);
    int first = 1;
    for (size_t k = 0; k < cfg->ndims; k++) {
        if (!(s->units >> (RL_UNIT_DIM0 + k) & 1u))
            continue;
        rld_buf_puts(o, first ? ",\"usage\":{" : ",");
        rld_buf_json_str(o, cfg->dims[k], strlen(cfg->dims[k]));
        rld_buf_putc(o, ':');
        put_settled(o, &s->unit[RL_UNIT_DIM0 + k], 0);
        first = 0;
    }
    if (!first)
        rld_buf_putc(o, '}');
    if (s->units >> RL_UNIT_USD & 1u) {
        rld_buf_puts(o, ",\"usd\":");
        put_settled(o, &s->unit[RL_UNIT_USD], 1);
    }
    rld_buf_putc(o, '}');
}

void rld_render_usage_rule(rld_buf *o, const rl_config *cfg, const rl_rule *rule,
                           const rl_rule_status *st, rl_ns now, int first)
{
    int64_t scale = rl_rule_scale(rule);
    rl_fp limit = st->limit / scale, remaining = st->remaining / scale;
    rld_buf_puts(o, first ? "{\"rule\":" : ",{\"rule\":");
    rld_buf_json_str(o, rule->name, strlen(rule->name));
    const char *unit = rld_amount_unit_name(cfg, rule->unit);
    rld_buf_puts(o, ",\"unit\":");
    rld_buf_json_str(o, unit, strlen(unit));
    rld_buf_puts(o, ",\"limit\":");
    rld_buf_fp(o, limit);
    rld_buf_puts(o, ",\"used\":");
    rld_buf_fp(o, limit - remaining > 0 ? limit - remaining : 0);
    rld_buf_puts(o, ",\"remaining\":");
    rld_buf_fp(o, remaining);
    rld_buf_puts(o, ",\"reset_after\":");
    if (st->reset_after == RL_WAIT_NEVER)
        rld_buf_puts(o, "null");
    else
        rld_buf_seconds(o, st->reset_after > 0 ? st->reset_after : 0);
    void (*period)(const void *, rl_ns, rl_ns *, rl_ns *) = rl_rule_type_period(rule->type);
    if (period) {
        rl_ns start, end;
        period(rule->params, now, &start, &end);
        rld_buf_puts(o, ",\"period_start\":");
        rld_buf_rfc3339(o, start);
        rld_buf_puts(o, ",\"period_end\":");
        rld_buf_rfc3339(o, end);
    }
    rld_buf_putc(o, '}');
}
