/*
 * model_headers.c - see model_headers.h.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "model_headers.h"

enum { FAM_REQUESTS, FAM_TOKENS, FAM_INPUT, FAM_OUTPUT, FAMILIES };

/* Whether rule r (in cfg) counts family f. */
static int counts(const rl_config *cfg, const rl_rule *r, int f)
{
    unsigned u = r->unit;
    const char *dim = u >= RL_UNIT_DIM0 ? cfg->dims[u - RL_UNIT_DIM0] : NULL;
    switch (f) {
    case FAM_REQUESTS:
        return u == RL_UNIT_REQUESTS;
    case FAM_TOKENS:
        return dim != NULL || (u == RL_UNIT_COST && cfg->ndims == 0);
    case FAM_INPUT:
        return dim && strcmp(dim, "input_tokens") == 0;
    default:
        return dim && strcmp(dim, "output_tokens") == 0;
    }
}

/* The most restrictive status of family f among d's applied rules, or NULL. */
static const rl_rule_status *pick(const rl_config *cfg, const rl_decision *d, int f)
{
    const rl_rule_status *best = NULL;
    for (size_t i = 0; i < d->napplied; i++) {
        const rl_applied *a = &d->applied[i];
        if (!a->has_status || a->shadow || !counts(cfg, a->rule, f))
            continue;
        const rl_rule_status *st = rl_decision_status(d, i);
        if (!best || st->remaining < best->remaining ||
            (st->remaining == best->remaining && st->reset_after > best->reset_after))
            best = st;
    }
    return best;
}

size_t rld_go_duration(char *buf, size_t n, rl_ns ns)
{
    long long ms = ns <= 0 ? 0 : (long long)((ns + 999999) / 1000000);
    if (ms < 1000)
        return (size_t)snprintf(buf, n, ms ? "%lldms" : "0s", ms);
    long long h = ms / 3600000, m = ms / 60000 % 60, s = ms / 1000 % 60, f = ms % 1000;
    char sec[24];
    int k = f ? snprintf(sec, sizeof sec, "%lld.%03lld", s, f) : snprintf(sec, sizeof sec, "%lld", s);
    while (f && sec[k - 1] == '0')
        sec[--k] = '\0';
    if (h)
        return (size_t)snprintf(buf, n, "%lldh%lldm%ss", h, m, sec);
    if (m)
        return (size_t)snprintf(buf, n, "%lldm%ss", m, sec);
    return (size_t)snprintf(buf, n, "%ss", sec);
}

static long long whole(rl_fp v)
{
    return v > 0 ? (long long)(v / RL_FP_ONE) : 0;
}

/* Appends a field; its value from fmt. */
static size_t add(rld_field *out, size_t n, const char *name, long long v)
{
    out[n].name = name;
    snprintf(out[n].value, sizeof out[n].value, "%lld", v);
    return n + 1;
}

static size_t openai(const rl_config *cfg, const rl_decision *d, rld_field *out, size_t n)
{
    static const char *const names[2][3] = {
        {"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
         "x-ratelimit-reset-requests"},
        {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"}};
    for (int f = 0; f < 2; f++) {
        const rl_rule_status *st = pick(cfg, d, f == 0 ? FAM_REQUESTS : FAM_TOKENS);
        if (!st)
            continue;
        n = add(out, n, names[f][0], whole(st->limit));
        n = add(out, n, names[f][1], whole(st->remaining));
        if (st->reset_after != RL_WAIT_NEVER) {
            out[n].name = names[f][2];
            rld_go_duration(out[n].value, sizeof out[n].value, st->reset_after);
            n++;
        }
    }
    return n;
}

/* The RFC 3339 time (UTC, whole seconds, rounded up) of t ns since the epoch. */
static void rfc3339(char *buf, size_t n, rl_ns t)
{
    time_t s = (time_t)(t / RL_NS_PER_SEC + (t % RL_NS_PER_SEC != 0));
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static size_t anthropic(const rl_config *cfg, const rl_decision *d, rld_field *out, size_t n)
{
    static const char *const names[FAMILIES][3] = {
        {"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining",
         "anthropic-ratelimit-requests-reset"},
        {"anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining",
         "anthropic-ratelimit-tokens-reset"},
        {"anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-remaining",
         "anthropic-ratelimit-input-tokens-reset"},
        {"anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-output-tokens-remaining",
         "anthropic-ratelimit-output-tokens-reset"}};
    for (int f = 0; f < FAMILIES; f++) {
        const rl_rule_status *st = pick(cfg, d, f);
        if (!st)
            continue;
        n = add(out, n, names[f][0], whole(st->limit));
        n = add(out, n, names[f][1], whole(st->remaining));
        if (st->reset_after != RL_WAIT_NEVER) {
            out[n].name = names[f][2];
            rfc3339(out[n].value, sizeof out[n].value,
                    d->now + (st->reset_after > 0 ? st->reset_after : 0));
            n++;
        }
    }
    return n;
}

size_t rld_model_headers(unsigned which, const rl_config *cfg, const rl_decision *d,
                         rld_field *out)
{
    size_t n = 0;
    if (which & RLD_MODEL_HEADERS_OPENAI)
        n = openai(cfg, d, out, n);
    if (which & RLD_MODEL_HEADERS_ANTHROPIC)
        n = anthropic(cfg, d, out, n);
    return n;
}
