/*
 * render.c - see render.h.
 */
#include <stdio.h>
#include <string.h>

#include "render.h"

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

/* One member of "limits", after a comma unless it is the first. The room is made once: the
 * three strings escaped at worst, the literals (63 bytes) and three numbers of at most 32. */
static void put_limit(rld_buf *o, const char *level, const rl_applied *a,
                      const rl_rule_status *st, int first)
{
    const char *rule = a->rule->name;
    size_t nl = strlen(level), nr = strlen(rule);
    if (rld_buf_reserve(o, RLD_JSON_STR_MAX(nl + nr + a->keylen) + 6 + 63 + 3 * 32) != 0)
        return;
    char *p = o->p + o->len;
    if (!first)
        *p++ = ',';
    RLD_PUT_LIT(p, "{\"level\":");
    p = rld_put_json_str(p, level, nl);
    RLD_PUT_LIT(p, ",\"key\":");
    p = rld_put_json_str(p, a->key, a->keylen);
    RLD_PUT_LIT(p, ",\"rule\":");
    p = rld_put_json_str(p, rule, nr);
    RLD_PUT_LIT(p, ",\"limit\":");
    p += rld_fmt_fp(p, st->limit);
    RLD_PUT_LIT(p, ",\"remaining\":");
    p += rld_fmt_fp(p, st->remaining);
    RLD_PUT_LIT(p, ",\"reset_after\":");
    if (st->reset_after == RL_WAIT_NEVER)
        RLD_PUT_LIT(p, "null");
    else
        p += rld_fmt_seconds(p, st->reset_after > 0 ? st->reset_after : 0);
    *p++ = '}';
    o->len = (size_t)(p - o->p);
}

void rld_render_decision(rld_buf *o, const rl_config *cfg, const rl_decision *d)
{
    put_verdict(o, cfg, d);
    rld_buf_puts(o, ",\"limits\":[");
    int first = 1;
    for (size_t i = 0; i < d->napplied; i++) {
        const rl_rule_status *st = rl_decision_status(d, i);
        if (!st)
            continue;
        put_limit(o, cfg->levels[d->applied[i].level].name, &d->applied[i], st, first);
        first = 0;
    }
    rld_buf_puts(o, "]}");
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

/* One rule's members of RateLimit-Policy and RateLimit, after ", " unless it is the first.
 * Room for each: the name escaped at worst, ", ", and at most 74 bytes of parameters. */
static void put_member(rld_buf *policy, rld_buf *state, const char *level, const rl_applied *a,
                       const rl_rule_status *st, int first)
{
    const char *rule = a->rule->name;
    size_t nl = strlen(level), nr = strlen(rule), room = 2 * (nl + nr) + 3 + 2 + 74;
    if (rld_buf_reserve(policy, room) != 0 || rld_buf_reserve(state, room) != 0)
        return;
    char *p = policy->p + policy->len, *s = state->p + state->len;
    if (!first) {
        RLD_PUT_LIT(p, ", ");
        RLD_PUT_LIT(s, ", ");
    }
    char *name = p;
    p = put_sf_name(p, level, nl, rule, nr);
    memcpy(s, name, (size_t)(p - name));
    s += p - name;
    RLD_PUT_LIT(p, ";q=");
    p += rld_fmt_i64(p, st->limit > 0 ? st->limit / RL_FP_ONE : 0);
    int64_t w = ceil_div(st->window, RL_NS_PER_SEC);
    if (w > 0) {
        RLD_PUT_LIT(p, ";w=");
        p += rld_fmt_i64(p, w);
    }
    if (a->rule->type->flags & RL_RULE_HOLDS)
        RLD_PUT_LIT(p, ";qu=\"concurrent-requests\"");
    RLD_PUT_LIT(s, ";r=");
    s += rld_fmt_i64(s, st->remaining > 0 ? st->remaining / RL_FP_ONE : 0);
    /* t: seconds until more quota (r grows by one), not until the rule is full */
    RLD_PUT_LIT(s, ";t=");
    s += rld_fmt_i64(s, ceil_div(st->next, RL_NS_PER_SEC));
    policy->len = (size_t)(p - policy->p);
    state->len = (size_t)(s - state->p);
}

size_t rld_render_ratelimit(rld_buf *policy, rld_buf *state, const rl_config *cfg,
                            const rl_decision *d)
{
    size_t n = 0;
    for (size_t i = 0; i < d->napplied; i++) {
        const rl_rule_status *st = rl_decision_status(d, i);
        if (!st)
            continue;
        put_member(policy, state, cfg->levels[d->applied[i].level].name, &d->applied[i], st,
                   n++ == 0);
    }
    return n;
}

void rld_render_settlement(rld_buf *o, const char *reservation, const rl_settlement *s)
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
    rld_buf_putc(o, '}');
}
