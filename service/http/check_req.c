/*
 * check_req.c - see check_req.h.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "check_req.h"
#include "app/values.h"

#define PREFIX_LEN (sizeof RLD_CHECK_PREFIX - 1)

void rld_check_req_init(rld_check_req *q)
{
    q->ndesc = 0;
    q->has_cost = q->has_priority = 0;
    q->cost = RL_FP_ONE;
    q->priority = 0;
    q->usage.given = 0;
}

/* A whole number, optionally signed, in int64 range. */
static int i64_from_text(const char *s, size_t n, int64_t *out)
{
    const char *p = s, *end = s + n;
    int neg = p < end && *p == '-';
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (p < end && (*p == '-' || *p == '+'))
        p++;
    if (p == end)
        return -1;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9' || v > (lim - (uint64_t)(*p - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* 1 when a header's descriptor part names descriptor d ('-' also stands for '_'). */
static int names(const char *part, size_t n, const char *d)
{
    size_t i = 0;
    for (; i < n && d[i]; i++) {
        char a = part[i], b = d[i];
        if (a >= 'A' && a <= 'Z')
            a = (char)(a - 'A' + 'a');
        if (b >= 'A' && b <= 'Z')
            b = (char)(b - 'A' + 'a');
        if (a != b && !(a == '-' && b == '_'))
            return 0;
    }
    return i == n && !d[i];
}

/* The configuration's spelling of a descriptor, or NULL. */
static const char *descriptor_of(const rl_config *cfg, const char *part, size_t n)
{
    for (size_t i = 0; i < cfg->nlevels; i++) {
        const rl_level *lv = &cfg->levels[i];
        if (lv->ncompose == 0 && names(part, n, lv->name))
            return lv->name;
        for (size_t k = 0; k < lv->ncompose; k++)
            if (names(part, n, lv->compose[k]))
                return lv->compose[k];
    }
    if (cfg->price_by && names(part, n, cfg->price_by))
        return cfg->price_by;
    return NULL;
}

#define USAGE_LEN (sizeof "Usage-" - 1)

/* X-RateLimit-Usage-<dimension>: the request's amount in that dimension. */
static int usage_header(rld_check_req *q, const rl_config *cfg, const char *part, size_t n,
                        const char *value, size_t vl, rl_err *err)
{
    const char *dim = part + USAGE_LEN;
    size_t dn = n - USAGE_LEN;
    for (size_t k = 0; k < cfg->ndims; k++) {
        if (!names(dim, dn, cfg->dims[k]))
            continue;
        char field[96];
        snprintf(field, sizeof field, RLD_CHECK_PREFIX "%.*s", (int)n, part);
        if (q->usage.given >> k & 1u)
            return rl_errf(err, -1, "%s: given twice", field);
        rl_fp v = 0;
        int zero = vl == 1 && value[0] == '0';
        if (!zero && rld_value_cost_text(field, value, vl, &v, err) != 0)
            return -1;
        q->usage.v[k] = v;
        q->usage.given |= 1u << k;
        return 0;
    }
    return rl_errf(err, -1, RLD_CHECK_PREFIX "%.*s: no such dimension", (int)n, part);
}

int rld_check_header(rld_check_req *q, const rl_config *cfg, const char *name, size_t nl,
                     const char *value, size_t vl, rl_err *err)
{
    if (nl <= PREFIX_LEN || strncasecmp(name, RLD_CHECK_PREFIX, PREFIX_LEN) != 0)
        return 0;
    const char *part = name + PREFIX_LEN;
    size_t n = nl - PREFIX_LEN;
    if (n == 4 && strncasecmp(part, "cost", 4) == 0) {
        if (q->has_cost)
            return rl_errf(err, -1, RLD_CHECK_PREFIX "Cost: given twice");
        if (rld_value_cost_text(RLD_CHECK_PREFIX "Cost", value, vl, &q->cost, err) != 0)
            return -1;
        q->has_cost = 1;
        return 0;
    }
    if (n == 8 && strncasecmp(part, "priority", 8) == 0) {
        if (q->has_priority)
            return rl_errf(err, -1, RLD_CHECK_PREFIX "Priority: given twice");
        if (i64_from_text(value, vl, &q->priority) != 0)
            return rl_errf(err, -1, RLD_CHECK_PREFIX "Priority: must be a whole number");
        q->has_priority = 1;
        return 0;
    }
    if (n > USAGE_LEN && strncasecmp(part, "usage-", USAGE_LEN) == 0)
        return usage_header(q, cfg, part, n, value, vl, err);
    if (q->ndesc == RLD_MAX_KEYS)
        return rl_errf(err, -1, RLD_CHECK_PREFIX "*: at most %d descriptors", RLD_MAX_KEYS);
    const char *d = descriptor_of(cfg, part, n);
    rl_descriptor *o = &q->desc[q->ndesc++];
    o->name = d ? d : part;
    o->name_len = d ? strlen(d) : n;
    o->value = value;
    o->value_len = vl;
    return 0;
}

int rld_check_deny_status(const char *arg, int *status, rl_err *err)
{
    int64_t v;
    if (!arg) {
        *status = 429;
        return 0;
    }
    if (i64_from_text(arg, strlen(arg), &v) != 0 || v < 400 || v > 499 || arg[0] == '+' ||
        arg[0] == '-')
        return rl_errf(err, -1, "deny_status: must be a status code from 400 to 499");
    *status = (int)v;
    return 0;
}

void rld_check_error_to_header(rl_err *err)
{
    char msg[sizeof err->msg];
    if (strncmp(err->msg, "keys.", 5) != 0)
        return;
    snprintf(msg, sizeof msg, RLD_CHECK_PREFIX "%s", err->msg + 5);
    memcpy(err->msg, msg, sizeof msg);
}
