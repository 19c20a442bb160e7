/*
 * rule.c - building rules from parameter tables, one loader for every rule type.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static const rl_param_def *find_param(const rl_rule_type *t, const char *name, size_t *idx)
{
    for (size_t i = 0; i < t->nparams; i++)
        if (strcmp(t->params[i].name, name) == 0) {
            if (idx)
                *idx = i;
            return &t->params[i];
        }
    return NULL;
}

int rl_rule_init(rl_rule *r, const rl_registry *reg, const char *type, rl_err *err)
{
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < reg->n; i++) {
        if (strcmp(reg->types[i]->name, type) != 0)
            continue;
        r->type = reg->types[i];
        r->type_id = (unsigned)i;
        r->unit = r->type->flags & RL_RULE_UNIT_REQUESTS ? RL_UNIT_REQUESTS : RL_UNIT_COST;
        r->params = calloc(1, r->type->params_size ? r->type->params_size : 1);
        r->given = calloc(1, r->type->nparams ? r->type->nparams : 1);
        if (!r->params || !r->given) {
            rl_rule_clear(r);
            return rl_errf(err, RL_ENOMEM, "out of memory");
        }
        rl__rule_v1_params_init(r->type, r->params);
        return RL_OK;
    }
    char known[512] = "";
    size_t used = 0;
    for (size_t i = 0; i < reg->n && used < sizeof known; i++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                                 reg->types[i]->name);
    return rl_errf(err, RL_EINVAL, "type: unknown rule type \"%.64s\" (known: %s)", type, known);
}

int rl_rule_param_kind(const rl_rule *r, const char *param)
{
    const rl_param_def *d = find_param(r->type, param, NULL);
    return d ? (int)d->kind : -1;
}

static int bounds_error(const rl_param_def *d, rl_err *err)
{
    if (d->kind == RL_PARAM_INT)
        return rl_errf(err, RL_EINVAL, "%s: must be a whole number from %.15g to %.15g", d->name,
                        d->min, d->max);
    if (d->min > 0 && d->min <= 1e-6)
        return rl_errf(err, RL_EINVAL, "%s: must be a positive number no larger than %.15g",
                        d->name, d->max);
    return rl_errf(err, RL_EINVAL, "%s: must be a number from %.15g to %.15g", d->name, d->min,
                    d->max);
}

int rl_rule_set_number(rl_rule *r, const char *param, double v, rl_err *err)
{
    size_t idx;
    const rl_param_def *d = find_param(r->type, param, &idx);
    if (!d)
        return rl_errf(err, RL_EINVAL, "%s: unknown parameter of %s", param, r->type->name);
    if (d->kind == RL_PARAM_STRINGS)
        return rl_errf(err, RL_EINVAL, "%s: must be a list of strings", param);
    if (!isfinite(v) || v < d->min || v > d->max)
        return bounds_error(d, err);

    int64_t out;
    switch (d->kind) {
    case RL_PARAM_AMOUNT:
    case RL_PARAM_RATE:
        out = rl_fp_from_double(v);
        if (out < 0 || (out == 0 && d->min > 0))
            return bounds_error(d, err);
        break;
    case RL_PARAM_DURATION:
        out = rl_ns_from_seconds(v);
        if (out < 0 || (out == 0 && d->min > 0))
            return bounds_error(d, err);
        break;
    case RL_PARAM_INT:
        if (v != floor(v))
            return bounds_error(d, err);
        out = (int64_t)v;
        break;
    default:
        return bounds_error(d, err);
    }
    memcpy((char *)r->params + d->offset, &out, sizeof out);
    r->given[idx] = 1;
    return RL_OK;
}

static void strings_free(rl_strings *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    free(s->len);
    memset(s, 0, sizeof *s);
}

static int cmp_bytes(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c ? c : (al > bl) - (al < bl);
}

/* Insertion sort with duplicates dropped; lists are configuration-sized. */
static void strings_sort(rl_strings *s)
{
    size_t out = 0;
    for (size_t i = 0; i < s->n; i++) {
        char *v = s->v[i];
        size_t l = s->len[i], j = out;
        while (j > 0 && cmp_bytes(s->v[j - 1], s->len[j - 1], v, l) > 0) {
            s->v[j] = s->v[j - 1];
            s->len[j] = s->len[j - 1];
            j--;
        }
        if (j > 0 && cmp_bytes(s->v[j - 1], s->len[j - 1], v, l) == 0) {
            /* a duplicate: undo the shift and drop it */
            for (size_t k = j; k < out; k++) {
                s->v[k] = s->v[k + 1];
                s->len[k] = s->len[k + 1];
            }
            free(v);
            continue;
        }
        s->v[j] = v;
        s->len[j] = l;
        out++;
    }
    s->n = out;
}

int rl_rule_set_strings(rl_rule *r, const char *param, const char *const *v, const size_t *len,
                        size_t n, rl_err *err)
{
    size_t idx;
    const rl_param_def *d = find_param(r->type, param, &idx);
    if (!d)
        return rl_errf(err, RL_EINVAL, "%s: unknown parameter of %s", param, r->type->name);
    if (d->kind != RL_PARAM_STRINGS)
        return rl_errf(err, RL_EINVAL, "%s: must be a number", param);
    if ((double)n < d->min || (double)n > d->max)
        return rl_errf(err, RL_EINVAL, "%s: must list from %.15g to %.15g strings", param, d->min,
                        d->max);
    for (size_t i = 0; i < n; i++)
        if (len[i] == 0 || len[i] > RL_KEY_MAX)
            return rl_errf(err, RL_EINVAL, "%s[%zu]: must be 1 to %d bytes", param, i,
                            RL_KEY_MAX);

    rl_strings s = {0};
    s.v = calloc(n ? n : 1, sizeof *s.v);
    s.len = calloc(n ? n : 1, sizeof *s.len);
    if (!s.v || !s.len) {
        strings_free(&s);
        return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    for (; s.n < n; s.n++) {
        s.v[s.n] = rl__strndup(v[s.n], len[s.n]);
        s.len[s.n] = len[s.n];
        if (!s.v[s.n]) {
            strings_free(&s);
            return rl_errf(err, RL_ENOMEM, "out of memory");
        }
    }
    strings_sort(&s);
    rl_strings *slot = (rl_strings *)(void *)((char *)r->params + d->offset);
    strings_free(slot);
    *slot = s;
    r->given[idx] = 1;
    return RL_OK;
}

int rl_rule_set_name(rl_rule *r, const char *name, rl_err *err)
{
    size_t n = strlen(name);
    if (n == 0 || n > 128)
        return rl_errf(err, RL_EINVAL, "name: must be 1 to 128 characters");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
            return rl_errf(err, RL_EINVAL,
                            "name: must be printable ASCII without '\"' or '\\\\'");
    }
    char *copy = rl__strndup(name, n);
    if (!copy)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    free(r->name);
    r->name = copy;
    r->name_given = 1;
    return RL_OK;
}

int rl_rule_set_unit(rl_rule *r, const char *unit, rl_err *err)
{
    if (strcmp(unit, "cost") == 0)
        r->unit = RL_UNIT_COST;
    else if (strcmp(unit, "requests") == 0)
        r->unit = RL_UNIT_REQUESTS;
    else
        return rl_errf(err, RL_EINVAL, "unit: must be \"cost\" or \"requests\"");
    return RL_OK;
}

int rl_rule_set_unit_in(rl_rule *r, const char *const *dims, size_t ndims, const char *unit,
                        rl_err *err)
{
    if (strcmp(unit, "usd") == 0) {
        r->unit = RL_UNIT_USD;
        return RL_OK;
    }
    for (size_t k = 0; k < ndims; k++)
        if (strcmp(unit, dims[k]) == 0) {
            r->unit = (rl_unit)(RL_UNIT_DIM0 + k);
            return RL_OK;
        }
    if (rl_rule_set_unit(r, unit, NULL) == RL_OK)
        return RL_OK;
    char list[RL_MAX_DIMS * 70] = "";
    size_t n = 0;
    for (size_t k = 0; k < ndims && n < sizeof list; k++)
        n += (size_t)snprintf(list + n, sizeof list - n, ", \"%s\"", dims[k]);
    if (!ndims)
        return rl_errf(err, RL_EINVAL,
                       "unit: must be \"cost\", \"requests\" or \"usd\" (not \"%s\"); other "
                       "units are declared in \"dimensions\"", unit);
    return rl_errf(err, RL_EINVAL,
                   "unit: must be \"cost\", \"requests\", \"usd\" or a declared dimension (%s) "
                   "(not \"%s\")", list + 2, unit);
}

/* Keeps a rule counting dollars in nano-dollars: its amounts and rates times RL_USD_SCALE. */
static int scale_usd(rl_rule *r, rl_err *err)
{
    const rl_rule_type *t = r->type;
    for (size_t i = 0; i < t->nparams; i++) {
        const rl_param_def *d = &t->params[i];
        if (d->kind != RL_PARAM_AMOUNT && d->kind != RL_PARAM_RATE)
            continue;
        int64_t v;
        memcpy(&v, (char *)r->params + d->offset, sizeof v);
        if (v > RL_FP_MAX / RL_USD_SCALE)
            return rl_errf(err, RL_EINVAL, "%s: must be at most 1000000000 dollars", d->name);
        v *= RL_USD_SCALE;
        memcpy((char *)r->params + d->offset, &v, sizeof v);
    }
    return RL_OK;
}

static const char *unit_name(const rl_rule *r)
{
    return r->unit == RL_UNIT_REQUESTS ? "requests"
           : r->unit == RL_UNIT_COST   ? "cost"
           : r->unit == RL_UNIT_USD    ? "usd"
                                       : "a dimension";
}

int rl_rule_set_reserved(rl_rule *r, double fraction, int64_t min_priority, rl_err *err)
{
    if (!r->type->capacity)
        return rl_errf(err, RL_EINVAL, "reserved: %s has no quota to reserve a share of",
                        r->type->name);
    if (!isfinite(fraction) || fraction <= 0 || fraction >= 1)
        return rl_errf(err, RL_EINVAL, "reserved.fraction: must be a number between 0 and 1");
    r->reserved_fraction = fraction;
    r->reserved_min_priority = min_priority;
    return RL_OK;
}

int rl_rule_finish(rl_rule *r, rl_err *err)
{
    const rl_rule_type *t = r->type;
    for (size_t i = 0; i < t->nparams; i++) {
        const rl_param_def *d = &t->params[i];
        if (r->given[i])
            continue;
        if (d->required)
            return rl_errf(err, RL_EINVAL, "%s: required by %s", d->name, t->name);
        if (d->kind != RL_PARAM_STRINGS) {
            int rc = rl_rule_set_number(r, d->name, d->def, err);
            r->given[i] = 0;
            if (rc != RL_OK)
                return rc;
        }
    }
    char msg[256] = "";
    if (t->prepare && t->prepare(r->params, msg, sizeof msg) != 0)
        return rl_errf(err, RL_EINVAL, "%s", msg[0] ? msg : "invalid parameters");
    if ((t->flags & RL_RULE_RESERVE_FRACTION) && r->unit != RL_UNIT_REQUESTS)
        return rl_errf(err, RL_EINVAL, "unit: %s counts requests only", t->name);
    if (!r->name) {
        char buf[160];
        t->default_name(r->params, buf, sizeof buf);
        int def_requests = (t->flags & RL_RULE_UNIT_REQUESTS) != 0;
        size_t n = strlen(buf);
        if ((r->unit == RL_UNIT_REQUESTS) != def_requests && r->unit < RL_UNIT_USD && n > 0 &&
            buf[n - 1] == ')')
            snprintf(buf + n - 1, sizeof buf - (n - 1), ", %s)", unit_name(r));
        r->name = rl__strndup(buf, strlen(buf));
        if (!r->name)
            return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    if (r->unit == RL_UNIT_USD) { /* the name above speaks in dollars */
        int rc = scale_usd(r, err);
        if (rc != RL_OK)
            return rc;
        if (t->prepare && t->prepare(r->params, msg, sizeof msg) != 0)
            return rl_errf(err, RL_EINVAL, "%s", msg[0] ? msg : "invalid parameters");
    }
    if (r->reserved_fraction > 0 && (t->flags & RL_RULE_RESERVE_FRACTION)) {
        /* a share of the moving limit: the rule reads it from the fractional part */
        r->reserved = (rl_fp)llround((double)RL_FP_ONE * r->reserved_fraction);
        if (r->reserved >= RL_FP_ONE)
            r->reserved = RL_FP_ONE - 1;
    } else if (r->reserved_fraction > 0) {
        rl_fp cap = t->capacity(r->params);
        r->reserved = (rl_fp)llround((double)cap * r->reserved_fraction);
    }
    return RL_OK;
}

void rl_rule_clear(rl_rule *r)
{
    if (r->type && r->params) {
        if (r->type->params_free)
            r->type->params_free(r->params);
        for (size_t i = 0; i < r->type->nparams; i++)
            if (r->type->params[i].kind == RL_PARAM_STRINGS)
                strings_free((rl_strings *)(void *)((char *)r->params + r->type->params[i].offset));
    }
    free(r->params);
    free(r->given);
    free(r->name);
    memset(r, 0, sizeof *r);
}

double rl_rule_get_number(const rl_rule *r, const rl_param_def *d)
{
    int64_t v;
    memcpy(&v, (const char *)r->params + d->offset, sizeof v);
    switch (d->kind) {
    case RL_PARAM_AMOUNT:
    case RL_PARAM_RATE:
        return rl_fp_to_double(v) / (double)rl_rule_scale(r);
    case RL_PARAM_DURATION:
        return rl_ns_to_seconds(v);
    default:
        return (double)v;
    }
}

const rl_strings *rl_rule_get_strings(const rl_rule *r, const rl_param_def *d)
{
    return (const rl_strings *)(const void *)((const char *)r->params + d->offset);
}

rl_rules *rl_rules_new(size_t n)
{
    if (n == 0 || n > RL_MAX_RULES)
        return NULL;
    rl_rules *rs = calloc(1, sizeof *rs);
    if (!rs)
        return NULL;
    rs->v = calloc(n, sizeof *rs->v);
    if (!rs->v) {
        free(rs);
        return NULL;
    }
    rs->n = n;
    rs->refs = 1;
    return rs;
}

void rl_rules_ref(rl_rules *rs)
{
    if (rs && __atomic_load_n(&rs->refs, __ATOMIC_RELAXED) > 0)
        __atomic_add_fetch(&rs->refs, 1, __ATOMIC_RELAXED);
}

void rl__rules_destroy(rl_rules *rs)
{
    if (!rs)
        return;
    for (size_t i = 0; i < rs->n; i++)
        rl_rule_clear(&rs->v[i]);
    free(rs->v);
    free(rs);
}

void rl_rules_unref(rl_rules *rs)
{
    if (!rs || __atomic_load_n(&rs->refs, __ATOMIC_RELAXED) < 0)
        return;
    if (__atomic_sub_fetch(&rs->refs, 1, __ATOMIC_ACQ_REL) == 0)
        rl__rules_destroy(rs);
}

int rl__rules_check(const rl_rules *rs, rl_err *err)
{
    for (size_t i = 0; i < rs->n; i++) {
        if (!rs->v[i].type)
            return rl_errf(err, RL_EINVAL, "[%zu]: rule not set up", i);
        for (size_t j = 0; j < i; j++)
            if (strcmp(rs->v[i].name, rs->v[j].name) == 0)
                return rl_errf(err, RL_EINVAL,
                                "[%zu].name: \"%s\" is used by rule %zu of the same list; give "
                                "one of them another \"name\"",
                                i, rs->v[i].name, j);
    }
    return RL_OK;
}

/* ---- fingerprints --------------------------------------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

uint64_t rl__rule_fingerprint(const rl_rule *r)
{
    const rl_rule_type *t = r->type;
    uint64_t h = 0xcbf29ce484222325ull;
    int64_t opts[3] = {(int64_t)r->unit, (int64_t)r->reserved, r->reserved_min_priority};
    h = fnv(h, t->name, strlen(t->name) + 1);
    h = fnv(h, r->name ? r->name : "", r->name ? strlen(r->name) + 1 : 1);
    h = fnv(h, opts, sizeof opts);
    const rl_rule_per_unit *pu = r->carry_limit ? rl_rule_type_per_unit(t) : NULL;
    for (size_t i = 0; i < t->nparams; i++) {
        const unsigned char *at = (const unsigned char *)r->params + t->params[i].offset;
        const char *name = t->params[i].name;
        if (pu && (strcmp(name, pu->amount) == 0 || (pu->rate && strcmp(name, pu->rate) == 0)))
            continue; /* the limit: its state counts on under another */
        if (t->params[i].kind != RL_PARAM_STRINGS) {
            h = fnv(h, at, 8);
            continue;
        }
        const rl_strings *s = (const rl_strings *)at;
        h = fnv(h, &s->n, sizeof s->n);
        for (size_t k = 0; k < s->n; k++)
            h = fnv(fnv(h, &s->len[k], sizeof s->len[k]), s->v[k], s->len[k]);
    }
    return h;
}
