/*
 * rules_json.c - see rules_json.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules_json.h"

#define fail(err, ...) rl_errf(err, RL_EINVAL, __VA_ARGS__)

int rld_err_at_sep(rl_err *err, int rc, const char *path, const char *sep)
{
    char rest[sizeof err->msg];
    memcpy(rest, err->msg, sizeof rest);
    rest[sizeof rest - 1] = '\0';
    size_t pl = strlen(path), sl = strlen(sep), rl = strlen(rest);
    if (pl > 200)
        pl = 200;
    if (rl > sizeof err->msg - pl - sl - 1)
        rl = sizeof err->msg - pl - sl - 1;
    memcpy(err->msg, path, pl);
    memcpy(err->msg + pl, sep, sl);
    memcpy(err->msg + pl + sl, rest, rl);
    err->msg[pl + sl + rl] = '\0';
    return rc;
}

int rld_err_at(rl_err *err, int rc, const char *path)
{
    char c = err->msg[0];
    return rld_err_at_sep(err, rc, path, c == '[' || c == '.' || c == ':' ? "" : ".");
}

json_t *rld_json_number(double v)
{
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        return json_integer((json_int_t)v);
    return json_real(v);
}

/* ---- rules --------------------------------------------------------------------------- */

static int set_param(rl_rule *r, const char *k, const json_t *v, rl_err *err)
{
    int kind = rl_rule_param_kind(r, k);
    if (kind < 0) {
        char known[256] = "type, name, unit, shadow, charge";
        if (r->type->flags & RL_RULE_PERIODIC)
            strcat(known, ", alerts");
        size_t used = strlen(known);
        if (r->type->capacity)
            used += (size_t)snprintf(known + used, sizeof known - used, ", reserved");
        for (size_t i = 0; i < r->type->nparams && used < sizeof known; i++)
            used += (size_t)snprintf(known + used, sizeof known - used, ", %s",
                                     r->type->params[i].name);
        return fail(err, "%s: unknown parameter of %s (known: %s)", k, r->type->name, known);
    }
    if (kind == RL_PARAM_STRINGS && json_is_string(v)) { /* a list of one */
        const char *s1 = json_string_value(v);
        size_t len1 = json_string_length(v);
        return rl_rule_set_strings(r, k, &s1, &len1, 1, err);
    }
    if (kind == RL_PARAM_STRINGS) {
        size_t n = json_array_size(v);
        if (!json_is_array(v))
            return fail(err, "%s: must be a list of strings", k);
        const char **s = calloc(n ? n : 1, sizeof *s);
        size_t *len = calloc(n ? n : 1, sizeof *len);
        int rc = s && len ? RL_OK : RL_ENOMEM;
        for (size_t i = 0; rc == RL_OK && i < n; i++) {
            const json_t *e = json_array_get(v, i);
            if (!json_is_string(e))
                rc = fail(err, "%s[%zu]: must be a string", k, i);
            else {
                s[i] = json_string_value(e);
                len[i] = json_string_length(e);
            }
        }
        if (rc == RL_ENOMEM)
            snprintf(err->msg, sizeof err->msg, "out of memory");
        if (rc == RL_OK)
            rc = rl_rule_set_strings(r, k, s, len, n, err);
        free(s);
        free(len);
        return rc;
    }
    if (!json_is_number(v))
        return fail(err, "%s: must be a number", k);
    return rl_rule_set_number(r, k, json_number_value(v), err);
}

static int set_reserved(rl_rule *r, const json_t *v, rl_err *err)
{
    const char *k;
    const json_t *m;
    double fraction = 0;
    json_int_t min_priority = 1;
    if (!json_is_object(v))
        return fail(err, "reserved: must be an object {\"fraction\", \"min_priority\"}");
    json_object_foreach((json_t *)v, k, m)
    {
        if (strcmp(k, "fraction") == 0) {
            if (!json_is_number(m))
                return fail(err, "reserved.fraction: must be a number between 0 and 1");
            fraction = json_number_value(m);
        } else if (strcmp(k, "min_priority") == 0) {
            if (!json_is_integer(m))
                return fail(err, "reserved.min_priority: must be a whole number");
            min_priority = json_integer_value(m);
        } else if (k[0] != '_') {
            return fail(err, "reserved.%s: unknown field (known: fraction, min_priority)", k);
        }
    }
    return rl_rule_set_reserved(r, fraction, (int64_t)min_priority, err);
}

/* A rule option that is true or false ("shadow", "charge"). */
static int set_flag(int *flag, const char *k, const json_t *v, rl_err *err)
{
    if (!json_is_boolean(v))
        return fail(err, "%s: must be true or false", k);
    *flag = json_is_true(v);
    return RL_OK;
}

const char *rld_rule_types_with(const rl_registry *reg, unsigned flags, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < rl_registry_count(reg) && used < n; i++) {
        const rl_rule_type *t = rl_registry_at(reg, i);
        if ((t->flags & flags) == flags)
            used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", t->name);
    }
    return buf;
}

/* "alerts": up to RL_MAX_ALERTS fractions of the limit, each in (0, 1] and above the one
 * before, on a rule whose type counts in periods (RL_RULE_PERIODIC; the types that do are
 * listed from the registry). */
static int set_alerts(rl_rule *r, const rl_registry *reg, const json_t *v, rl_err *err)
{
    if (!(r->type->flags & RL_RULE_PERIODIC)) {
        char known[160];
        return fail(err, "alerts: a %s rule has no period to alert in (alerts are for: %s)",
                    r->type->name, rld_rule_types_with(reg, RL_RULE_PERIODIC, known, sizeof known));
    }
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > RL_MAX_ALERTS)
        return fail(err, "alerts: must be a list of 1 to %d fractions of the limit ([0.8, 0.95])",
                    RL_MAX_ALERTS);
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        double f = json_is_number(e) ? json_number_value(e) : -1;
        if (!(f > 0 && f <= 1))
            return fail(err, "alerts[%zu]: must be a number above 0 and at most 1", i);
        if (i > 0 && f <= r->alerts[i - 1])
            return fail(err, "alerts[%zu]: must be above alerts[%zu] (%g)", i, i - 1,
                        r->alerts[i - 1]);
        r->alerts[i] = f;
    }
    r->nalerts = (unsigned)json_array_size(v);
    return RL_OK;
}

/* Builds rule r (uninitialised) from a JSON object; errors are relative to the object. */
static int rule_from_json(const json_t *o, rl_registry *reg, const rl_config *cfg, rl_rule *r,
                          rl_err *err)
{
    const char *k;
    const json_t *v;
    int rc;
    memset(r, 0, sizeof *r);
    if (!json_is_object(o))
        return fail(err, ": must be an object with a \"type\"");
    const json_t *type = json_object_get(o, "type");
    if (!type)
        return fail(err, "type: required");
    if (!json_is_string(type))
        return fail(err, "type: must be a string");
    if ((rc = rl_rule_init(r, reg, json_string_value(type), err)) != RL_OK)
        return rc;
    json_object_foreach((json_t *)o, k, v)
    {
        if (k[0] == '_' || strcmp(k, "type") == 0)
            continue;
        if (strcmp(k, "name") == 0)
            rc = json_is_string(v) ? rl_rule_set_name(r, json_string_value(v), err)
                                   : fail(err, "name: must be a string");
        else if (strcmp(k, "unit") == 0)
            rc = json_is_string(v) ? rl_rule_set_unit_in(r, cfg ? (const char *const *)cfg->dims
                                                                    : NULL,
                                                         cfg ? cfg->ndims : 0,
                                                         json_string_value(v), err)
                                   : fail(err, "unit: must be a string");
        else if (strcmp(k, "reserved") == 0)
            rc = set_reserved(r, v, err);
        else if (strcmp(k, "shadow") == 0)
            rc = set_flag(&r->shadow, k, v, err);
        else if (strcmp(k, "charge") == 0)
            rc = set_flag(&r->charge, k, v, err);
        else if (strcmp(k, "alerts") == 0)
            rc = set_alerts(r, reg, v, err);
        else
            rc = set_param(r, k, v, err);
        if (rc != RL_OK)
            return rc;
    }
    return rl_rule_finish(r, err);
}

int rld_rules_from_json(const json_t *arr, rl_registry *reg, const rl_config *cfg, rl_rules **out,
                        rl_err *err)
{
    char path[32];
    *out = NULL;
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > RL_MAX_RULES)
        return fail(err, ": must be a list of 1 to %d rules", RL_MAX_RULES);
    rl_rules *rs = rl_rules_new(json_array_size(arr));
    if (!rs)
        return fail(err, ": out of memory");
    for (size_t i = 0; i < rs->n; i++) {
        int rc = rule_from_json(json_array_get(arr, i), reg, cfg, &rs->v[i], err);
        if (rc != RL_OK) {
            snprintf(path, sizeof path, "[%zu]", i);
            rl_rules_unref(rs);
            return rld_err_at(err, rc, path);
        }
    }
    *out = rs;
    return RL_OK;
}

const char *rld_amount_unit_name(const rl_config *cfg, unsigned u)
{
    if (u == RL_UNIT_COST || u == RL_UNIT_REQUESTS || u == RL_UNIT_USD)
        return u == RL_UNIT_COST ? "cost" : u == RL_UNIT_REQUESTS ? "requests" : "usd";
    return cfg && u - RL_UNIT_DIM0 < cfg->ndims ? cfg->dims[u - RL_UNIT_DIM0] : "?";
}

json_t *rld_rule_to_json(const rl_rule *r, const rl_config *cfg)
{
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string(r->type->name));
    json_object_set_new(o, "name", json_string(r->name));
    for (size_t i = 0; i < r->type->nparams; i++) {
        const rl_param_def *d = &r->type->params[i];
        if (d->kind == RL_PARAM_STRINGS && d->max == 1 && rl_rule_get_strings(r, d)->n == 1) {
            const rl_strings *s = rl_rule_get_strings(r, d); /* a choice: its one string */
            json_object_set_new(o, d->name, json_stringn(s->v[0], s->len[0]));
        } else if (d->kind == RL_PARAM_STRINGS) {
            const rl_strings *s = rl_rule_get_strings(r, d);
            if (d->max == 1) /* a choice not given (its default applies): absent */
                continue;
            json_t *a = json_array();
            for (size_t k = 0; k < s->n; k++)
                json_array_append_new(a, json_stringn(s->v[k], s->len[k]));
            json_object_set_new(o, d->name, a);
        } else {
            json_object_set_new(o, d->name, rld_json_number(rl_rule_get_number(r, d)));
        }
    }
    json_object_set_new(o, "unit", json_string(rld_amount_unit_name(cfg, r->unit)));
    if (r->shadow)
        json_object_set_new(o, "shadow", json_true());
    if (r->charge)
        json_object_set_new(o, "charge", json_true());
    if (r->nalerts) {
        json_t *a = json_array();
        for (unsigned i = 0; i < r->nalerts; i++)
            json_array_append_new(a, json_real(r->alerts[i]));
        json_object_set_new(o, "alerts", a);
    }
    if (r->reserved_fraction > 0)
        json_object_set_new(o, "reserved",
                            json_pack("{s:f, s:I}", "fraction", r->reserved_fraction,
                                      "min_priority", (json_int_t)r->reserved_min_priority));
    return o;
}

json_t *rld_rules_to_json(const rl_rules *rs, const rl_config *cfg)
{
    json_t *a = json_array();
    for (size_t i = 0; rs && i < rs->n; i++)
        json_array_append_new(a, rld_rule_to_json(&rs->v[i], cfg));
    return a;
}

static const char *on_error_name(rld_on_error e)
{
    return rld_setting_find(&rld_settings_level, "on_store_error", 14)->choices[e];
}

json_t *rld_config_to_json(const rl_config *cfg, const rld_settings *set)
{
    json_t *o = json_object(), *levels = json_array(), *tiers = json_object();
    for (size_t i = 0; i < cfg->nlevels; i++) {
        const rl_level *l = &cfg->levels[i];
        json_t *lo = json_object();
        json_object_set_new(lo, "name", json_string(l->name));
        if (l->ncompose) {
            json_t *c = json_array();
            for (size_t k = 0; k < l->ncompose; k++)
                json_array_append_new(c, json_string(l->compose[k]));
            json_object_set_new(lo, "compose", c);
        }
        if (l->default_key)
            json_object_set_new(lo, "default_key", json_string(l->default_key));
        json_object_set_new(lo, "tiered", json_boolean(l->tiered));
        if (l->shadow)
            json_object_set_new(lo, "shadow", json_true());
        /* a tiered level shows the default tier's rules; a user's own are at /quota/<user>;
         * a keyed level's rules follow from each key (a YAML configuration's descriptors) */
        if (l->key_rules)
            json_object_set_new(lo, "keyed", json_true());
        else
            json_object_set_new(
                lo, "rules",
                rld_rules_to_json(l->tiered ? cfg->tiers[cfg->default_tier].rules : l->rules,
                                  cfg));
        if (set && set->store == RLD_STORE_REDIS) {
            json_object_set_new(lo, "on_store_error", json_string(on_error_name(set->on_error[i])));
            if (set->shards[i] > 1)
                json_object_set_new(lo, "shards", json_integer(set->shards[i]));
        }
        json_array_append_new(levels, lo);
    }
    for (size_t i = 0; i < cfg->ntiers; i++)
        json_object_set_new(tiers, cfg->tiers[i].name, rld_rules_to_json(cfg->tiers[i].rules, cfg));
    json_object_set_new(o, "levels", levels);
    if (cfg->ndims) {
        json_t *dims = json_array();
        for (size_t k = 0; k < cfg->ndims; k++)
            json_array_append_new(dims, json_string(cfg->dims[k]));
        json_object_set_new(o, "dimensions", dims);
    }
    if (cfg->price_by) {
        json_t *models = json_object();
        for (size_t i = 0; i < cfg->nprices; i++) {
            json_t *m = json_object();
            for (size_t k = 0; k < cfg->ndims; k++)
                json_object_set_new(m, cfg->dims[k],
                                    rld_json_number(rl_fp_to_double(cfg->prices[i].per_million[k])));
            json_object_set_new(models, cfg->prices[i].model, m);
        }
        json_object_set_new(o, "prices", json_pack("{s:s, s:o}", "by", cfg->price_by, "models", models));
    }
    json_object_set_new(o, "tiers", tiers);
    json_object_set_new(o, "default_tier",
                        cfg->ntiers ? json_string(cfg->tiers[cfg->default_tier].name)
                                    : json_null());
    json_object_set_new(o, "reservation_ttl",
                        rld_json_number(rl_ns_to_seconds(cfg->reservation_ttl)));
    json_object_set_new(o, "store",
                        json_string(set && set->store == RLD_STORE_REDIS ? "redis" : "memory"));
    return o;
}
