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

void rld_render_decision(rld_buf *o, const rl_config *cfg, const rl_decision *d)
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
    rld_buf_puts(o, ",\"limits\":[");
    int first = 1;
    for (size_t i = 0; i < d->napplied; i++) {
        const rl_applied *a = &d->applied[i];
        const rl_rule_status *st = rl_decision_status(d, i);
        if (!st)
            continue;
        const char *level = cfg->levels[a->level].name;
        rld_buf_puts(o, first ? "{\"level\":" : ",{\"level\":");
        first = 0;
        rld_buf_json_str(o, level, strlen(level));
        rld_buf_puts(o, ",\"key\":");
        rld_buf_json_str(o, a->key, a->keylen);
        rld_buf_puts(o, ",\"rule\":");
        rld_buf_json_str(o, a->rule->name, strlen(a->rule->name));
        rld_buf_puts(o, ",\"limit\":");
        rld_buf_fp(o, st->limit);
        rld_buf_puts(o, ",\"remaining\":");
        rld_buf_fp(o, st->remaining);
        rld_buf_puts(o, ",\"reset_after\":");
        if (st->reset_after == RL_WAIT_NEVER)
            rld_buf_puts(o, "null");
        else
            rld_buf_seconds(o, st->reset_after > 0 ? st->reset_after : 0);
        rld_buf_putc(o, '}');
    }
    rld_buf_puts(o, "]}");
}

/* 1 when s goes into an sf-string as it is: printable ASCII without '"' or '\\'. */
static int sf_plain(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
            return 0;
    }
    return 1;
}

/* An sf-string: printable ASCII, with '"' and '\\' escaped; anything else becomes '?'. */
static void sf_string(rld_buf *o, const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (sf_plain(a, na) && sf_plain(b, nb)) { /* names are nearly always plain */
        if (rld_buf_reserve(o, na + nb + 3) != 0)
            return;
        char *p = o->p + o->len;
        *p++ = '"';
        memcpy(p, a, na);
        p += na;
        *p++ = '.';
        memcpy(p, b, nb);
        p += nb;
        *p++ = '"';
        o->len = (size_t)(p - o->p);
        return;
    }
    rld_buf_putc(o, '"');
    for (const char *part[2] = {a, b}, **p = part; p < part + 2; p++) {
        for (const char *s = *p; *s; s++) {
            unsigned char c = (unsigned char)*s;
            if (c == '"' || c == '\\')
                rld_buf_putc(o, '\\');
            rld_buf_putc(o, c >= 0x20 && c < 0x7f ? (char)c : '?');
        }
        if (p == part)
            rld_buf_putc(o, '.');
    }
    rld_buf_putc(o, '"');
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

size_t rld_render_ratelimit(rld_buf *policy, rld_buf *state, const rl_config *cfg,
                            const rl_decision *d)
{
    size_t n = 0;
    for (size_t i = 0; i < d->napplied; i++) {
        const rl_applied *a = &d->applied[i];
        const rl_rule_status *st = rl_decision_status(d, i);
        if (!st)
            continue;
        const char *level = cfg->levels[a->level].name;
        if (n++) {
            rld_buf_puts(policy, ", ");
            rld_buf_puts(state, ", ");
        }
        sf_string(policy, level, a->rule->name);
        rld_buf_puts(policy, ";q=");
        rld_buf_i64(policy, st->limit > 0 ? st->limit / RL_FP_ONE : 0);
        int64_t w = ceil_div(st->window, RL_NS_PER_SEC);
        if (w > 0) {
            rld_buf_puts(policy, ";w=");
            rld_buf_i64(policy, w);
        }
        if (a->rule->type->flags & RL_RULE_HOLDS)
            rld_buf_puts(policy, ";qu=\"concurrent-requests\"");
        sf_string(state, level, a->rule->name);
        rld_buf_puts(state, ";r=");
        rld_buf_i64(state, st->remaining > 0 ? st->remaining / RL_FP_ONE : 0);
        /* t: seconds until more quota (r grows by one), not until the rule is full */
        rld_buf_puts(state, ";t=");
        rld_buf_i64(state, ceil_div(st->next, RL_NS_PER_SEC));
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
