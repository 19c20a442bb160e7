/*
 * config.c - reads the JSON configuration into the core's structures (its rule lists through
 * app/rules_json.h) and the daemon's settings.
 *
 * Every error names the path of the field at fault. Members whose name starts with '_' are
 * comments and are ignored; any other unknown member is an error, so typos do not pass silently.
 */
#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app/file.h"
#include "app/rules_json.h"
#include "config.h"

#define fail(err, ...) rl_errf(err, RL_EINVAL, __VA_ARGS__)

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p)
        memcpy(p, s, n + 1);
    return p;
}

/* ---- the daemon's settings, read by their table (settings.h) -------------------------- */

static int read_table(const rld_setting_table *t, const json_t *obj, const char *path, size_t level,
                      rld_settings *set, rl_err *err);

/* The path of member name of the object at path ("store.url"; "threads" at the root). */
static void member_path(char *buf, size_t len, const char *path, const char *name)
{
    snprintf(buf, len, "%s%s%s", path, *path ? "." : "", name);
}

/* "\"open\", \"closed\" or \"local\"" (or_last), or "\"memory\", \"redis\"". */
static void choices_text(const rld_setting *r, char *buf, size_t len, int or_last)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; r->choices[i] && used < len; i++) {
        const char *sep = i == 0 ? "" : or_last && !r->choices[i + 1] ? " or " : ", ";
        used += (size_t)snprintf(buf + used, len - used, "%s\"%s\"", sep, r->choices[i]);
    }
}

/* The one message for any bad value of a row: "must be ...". */
static void must_be(const rld_setting *r, char *buf, size_t len)
{
    char c[256];
    switch (r->kind) {
    case RLD_SET_INT:
        snprintf(buf, len, "must be a whole number from %lld to %lld", (long long)r->min,
                 (long long)r->max);
        return;
    case RLD_SET_SECONDS:
        snprintf(buf, len, "must be a number of seconds from %g to %g", r->min, r->max);
        return;
    case RLD_SET_BOOL:
        snprintf(buf, len, "must be true or false");
        return;
    case RLD_SET_STRING:
    case RLD_SET_CHARS:
        if (r->min > 0)
            snprintf(buf, len, "must be a string of %zu to %zu characters", (size_t)r->min,
                     (size_t)r->max);
        else
            snprintf(buf, len, "must be a string of at most %zu characters", (size_t)r->max);
        return;
    case RLD_SET_ENUM:
        choices_text(r, c, sizeof c, 1);
        snprintf(buf, len, "must be %s", c);
        return;
    case RLD_SET_STRINGS:
        snprintf(buf, len, "must be a list of strings");
        return;
    case RLD_SET_OBJECT:
        if (r->sub->shorthand) {
            choices_text(rld_setting_find(r->sub, r->sub->shorthand, strlen(r->sub->shorthand)), c,
                         sizeof c, 0);
            snprintf(buf, len, "must be %s or an object with a \"%s\"", c, r->sub->shorthand);
        } else {
            size_t used = 0;
            for (size_t i = 0; i < r->sub->nrows && used < sizeof c; i++)
                used += (size_t)snprintf(c + used, sizeof c - used, "%s\"%s\"", i ? ", " : "",
                                         r->sub->rows[i].name);
            snprintf(buf, len, "must be an object {%s}", c);
        }
        return;
    case RLD_SET_CONFIG:
        snprintf(buf, len, "is read by the configuration");
        return;
    }
}

static int bad_value(const rld_setting *r, const char *path, rl_err *err)
{
    char why[400];
    must_be(r, why, sizeof why);
    return fail(err, "%s: %s", path, why);
}

/* A string row: into the char array at p (RLD_SET_CHARS) or the malloc'd char * at p. */
static int read_string(const rld_setting *r, const json_t *v, const char *path, char *p,
                       rl_err *err)
{
    size_t n = json_string_length(v);
    if (!json_is_string(v) || (double)n < r->min || (double)n > r->max)
        return bad_value(r, path, err);
    const char *s = json_string_value(v), *why = r->check ? r->check(s) : NULL;
    if (strlen(s) != n)
        return fail(err, "%s: must not contain NUL characters", path);
    if (why)
        return fail(err, "%s: %s", path, why);
    if (r->kind == RLD_SET_CHARS) {
        memcpy(p, s, n + 1);
        return RL_OK;
    }
    char *copy = dup_str(s);
    if (!copy)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    free(*(char **)p);
    *(char **)p = copy;
    return RL_OK;
}

/* A list of strings row, each element checked as a string row of the same bounds. */
static int read_strings(const rld_setting *r, const json_t *v, const char *path, rld_settings *set,
                        rl_err *err)
{
    char ***list = (char ***)((char *)set + r->offset);
    size_t *n = (size_t *)((char *)set + r->count_offset);
    rld_setting el = *r;
    el.kind = RLD_SET_STRING;
    if (!json_is_array(v))
        return bad_value(r, path, err);
    /* a list given empty is not NULL, so that its reader can tell it from one not given */
    if (!*list && !(*list = calloc(1, sizeof **list)))
        return rl_errf(err, RL_ENOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(v); i++) {
        char epath[300], *s = NULL;
        int rc;
        snprintf(epath, sizeof epath, "%s[%zu]", path, i);
        if ((rc = read_string(&el, json_array_get(v, i), epath, (char *)&s, err)) != RL_OK)
            return rc;
        char **grown = realloc(*list, (*n + 1) * sizeof *grown);
        if (!grown) {
            free(s);
            return rl_errf(err, RL_ENOMEM, "out of memory");
        }
        *list = grown;
        (*list)[(*n)++] = s;
    }
    return RL_OK;
}

/* An object row; a string stands for {shorthand: string} when the table has a shorthand. */
static int read_object(const rld_setting *r, const json_t *v, const char *path, size_t level,
                       rld_settings *set, rl_err *err);

/* Reads v into the field of row r (level's element for per-level rows). */
static int read_value(const rld_setting *r, const json_t *v, const char *path, size_t level,
                      rld_settings *set, rl_err *err)
{
    char *p = (char *)set + r->offset;
    int idx = -1;
    rl_ns ns;
    switch (r->kind) {
    case RLD_SET_INT:
        if (!json_is_integer(v) || json_integer_value(v) < r->min || json_integer_value(v) > r->max)
            return bad_value(r, path, err);
        ((int *)p)[level] = (int)json_integer_value(v);
        return RL_OK;
    case RLD_SET_BOOL:
        if (!json_is_boolean(v))
            return bad_value(r, path, err);
        *(int *)p = json_is_true(v);
        return RL_OK;
    case RLD_SET_ENUM:
        for (int i = 0; json_is_string(v) && r->choices[i]; i++)
            if (strcmp(json_string_value(v), r->choices[i]) == 0)
                idx = i;
        if (idx < 0)
            return bad_value(r, path, err);
        ((int *)p)[level] = idx;
        return RL_OK;
    case RLD_SET_SECONDS:
        ns = json_is_number(v) ? rl_ns_from_seconds(json_number_value(v)) : -1;
        if (ns < rl_ns_from_seconds(r->min) || ns > rl_ns_from_seconds(r->max))
            return bad_value(r, path, err);
        *(rl_ns *)p = ns;
        return RL_OK;
    case RLD_SET_STRING:
    case RLD_SET_CHARS:
        return read_string(r, v, path, p, err);
    case RLD_SET_STRINGS:
        return read_strings(r, v, path, set, err);
    case RLD_SET_OBJECT:
        return read_object(r, v, path, level, set, err);
    case RLD_SET_CONFIG:
        return RL_OK;
    }
    return bad_value(r, path, err);
}

static int read_object(const rld_setting *r, const json_t *v, const char *path, size_t level,
                       rld_settings *set, rl_err *err)
{
    const rld_setting_table *t = r->sub;
    if (t->shorthand && json_is_string(v)) {
        const rld_setting *s = rld_setting_find(t, t->shorthand, strlen(t->shorthand));
        char spath[300];
        member_path(spath, sizeof spath, path, s->name);
        return read_value(s, v, spath, level, set, err) == RL_OK ? RL_OK : bad_value(r, path, err);
    }
    if (!json_is_object(v))
        return bad_value(r, path, err);
    return read_table(t, v, path, level, set, err);
}

/* Reads the members of obj (the object at path) by the rows of t: an unknown member is an
 * error listing the known ones, a missing required one an error; rows of kind RLD_SET_CONFIG
 * are left to the configuration's parser. */
static int read_table(const rld_setting_table *t, const json_t *obj, const char *path, size_t level,
                      rld_settings *set, rl_err *err)
{
    const char *k;
    const json_t *m;
    char mpath[300];
    int rc;
    json_object_foreach((json_t *)obj, k, m)
    {
        if (k[0] == '_')
            continue;
        const rld_setting *r = rld_setting_find(t, k, strlen(k));
        member_path(mpath, sizeof mpath, path, k);
        if (!r) {
            char known[400];
            rld_setting_names(t, known, sizeof known);
            return fail(err, "%.200s: unknown field (known: %s)", mpath, known);
        }
        if ((rc = read_value(r, m, mpath, level, set, err)) != RL_OK)
            return rc;
    }
    for (size_t i = 0; i < t->nrows; i++) {
        const rld_setting *r = &t->rows[i];
        member_path(mpath, sizeof mpath, path, r->name);
        if (r->required && r->kind != RLD_SET_CONFIG && !json_object_get(obj, r->name))
            return bad_value(r, mpath, err);
    }
    return RL_OK;
}

/* ---- the limiter's configuration ------------------------------------------------------ */

/* A level's compose list into compose[8] and *n. */
static int level_compose(const json_t *m, const char *path, const char **compose, size_t *n,
                         rl_err *err)
{
    if (!m)
        return RL_OK;
    if (!json_is_array(m) || json_array_size(m) == 0 || json_array_size(m) > 8)
        return fail(err, "%s.compose: must be a list of 1 to 8 descriptor names", path);
    for (*n = 0; *n < json_array_size(m); (*n)++) {
        const json_t *e = json_array_get(m, *n);
        if (!json_is_string(e))
            return fail(err, "%s.compose[%zu]: must be a string", path, *n);
        compose[*n] = json_string_value(e);
    }
    return RL_OK;
}

/* A leased level takes slices of one shared bucket (redis.md, "Hot keys: leases"): it needs a
 * default_key, its own rules, no shards, and rules whose take is an amount from a bucket. */
static int check_lease(const json_t *lease, const char *path, const json_t *def,
                       const rl_rules *rules, unsigned shards, const rl_registry *reg,
                       rl_err *err)
{
    if (!lease)
        return RL_OK;
    if (!def)
        return fail(err, "%s.lease: needs a default_key (a lease is a slice of the level's one "
                    "shared key)", path);
    if (!rules)
        return fail(err, "%s.lease: needs the level's own rules (a tiered level cannot be "
                    "leased)", path);
    if (shards > 1)
        return fail(err, "%s.lease: a level is either sharded or leased, not both", path);
    for (size_t j = 0; j < rules->n; j++) {
        char known[160];
        if (!(rules->v[j].type->flags & RL_RULE_LEASABLE))
            return fail(err, "%s.rules[%zu].type: %s cannot be leased (lease: only %s rules)",
                        path, j, rules->v[j].type->name,
                        rld_rule_types_with(reg, RL_RULE_LEASABLE, known, sizeof known));
    }
    return RL_OK;
}

static int parse_level(const json_t *o, size_t i, rl_registry *reg, rl_config *cfg,
                       rld_settings *set, rl_err *err)
{
    const char *compose[8];
    size_t ncompose = 0;
    int rc;
    char path[64];
    snprintf(path, sizeof path, "levels[%zu]", i);

    if (!json_is_object(o))
        return fail(err, "%s: must be an object with a \"name\"", path);
    if ((rc = read_table(&rld_settings_level, o, path, i, set, err)) != RL_OK ||
        (rc = level_compose(json_object_get(o, "compose"), path, compose, &ncompose, err)))
        return rc;
    const json_t *name = json_object_get(o, "name"), *def = json_object_get(o, "default_key");
    const json_t *tiered = json_object_get(o, "tiered"), *rules_json = json_object_get(o, "rules");
    if (!name)
        return fail(err, "%s.name: required", path);
    if (!json_is_string(name))
        return fail(err, "%s.name: must be a string", path);
    if (def && !json_is_string(def))
        return fail(err, "%s.default_key: must be a string", path);
    if (tiered && !json_is_boolean(tiered))
        return fail(err, "%s.tiered: must be true or false", path);
    const json_t *shadow = json_object_get(o, "shadow");
    if (shadow && !json_is_boolean(shadow))
        return fail(err, "%s.shadow: must be true or false", path);
    rl_rules *rules = NULL;
    if (rules_json && json_is_true(tiered))
        return fail(err, "%s.rules: a tiered level takes its rules from \"tiers\"", path);
    if (rules_json) {
        char rpath[80];
        snprintf(rpath, sizeof rpath, "%s.rules", path);
        if ((rc = rld_rules_from_json(rules_json, reg, cfg, &rules, err)) != RL_OK)
            return rld_err_at(err, rc, rpath);
    }
    if ((rc = rl_config_add_level(cfg, json_string_value(name), compose, ncompose,
                                  def ? json_string_value(def) : NULL, json_is_true(tiered), rules,
                                  err)) != RL_OK)
        return rld_err_at(err, rc, path);
    cfg->levels[cfg->nlevels - 1].shadow = json_is_true(shadow);
    return check_lease(json_object_get(o, "lease"), path, def, rules, set->shards[i], reg, err);
}

static int parse_quota(const char *key, const json_t *v, rl_registry *reg, rl_config *cfg,
                       rl_err *err)
{
    char path[300];
    int rc;
    snprintf(path, sizeof path, "quotas.%.256s", key);
    const json_t *tier = json_is_string(v) ? v : json_object_get(v, "tier");
    const json_t *rules = json_is_object(v) ? json_object_get(v, "rules") : NULL;
    if (!tier == !rules)
        return fail(err, "%s: must be a tier name, {\"tier\": ...} or {\"rules\": [...]}", path);
    if (tier) {
        if (!json_is_string(tier))
            return fail(err, "%s.tier: must be a string", path);
        rc = rl_config_add_quota(cfg, key, json_string_value(tier), NULL, err);
        return rc ? rld_err_at_sep(err, rc, path, ": ") : RL_OK;
    }
    rl_rules *rs;
    if ((rc = rld_rules_from_json(rules, reg, cfg, &rs, err)) != RL_OK) {
        strncat(path, ".rules", sizeof path - strlen(path) - 1);
        return rld_err_at(err, rc, path);
    }
    rc = rl_config_add_quota(cfg, key, NULL, rs, err);
    return rc ? rld_err_at_sep(err, rc, path, ": ") : RL_OK;
}

static int parse_tiers(const json_t *m, rl_registry *reg, rl_config *cfg, rl_err *err)
{
    const char *k;
    json_t *rules;
    int rc;
    if (!json_is_object(m))
        return fail(err, "tiers: must be an object of tier name to rule list");
    json_object_foreach((json_t *)m, k, rules)
    {
        char path[96];
        rl_rules *rs;
        snprintf(path, sizeof path, "tiers.%.64s", k);
        if ((rc = rld_rules_from_json(rules, reg, cfg, &rs, err)) != RL_OK)
            return rld_err_at(err, rc, path);
        if ((rc = rl_config_add_tier(cfg, k, rs, err)) != RL_OK)
            return rld_err_at(err, rc, path);
    }
    return RL_OK;
}

static int parse_quotas(const json_t *m, rl_registry *reg, rl_config *cfg, rl_err *err)
{
    const char *k;
    json_t *v;
    int rc;
    if (!json_is_object(m))
        return fail(err, "quotas: must be an object of key to tier name or {\"rules\"}");
    json_object_foreach((json_t *)m, k, v)
    {
        if ((rc = parse_quota(k, v, reg, cfg, err)) != RL_OK)
            return rc;
    }
    return RL_OK;
}

static int parse_dimensions(const json_t *m, rl_config *cfg, rl_err *err)
{
    if (!json_is_array(m))
        return fail(err, "dimensions: must be a list of names");
    for (size_t i = 0; i < json_array_size(m); i++) {
        const json_t *v = json_array_get(m, i);
        if (!json_is_string(v))
            return fail(err, "dimensions[%zu]: must be a string", i);
        int rc = rl_config_add_dimension(cfg, json_string_value(v), err);
        if (rc != RL_OK)
            return rc;
    }
    return RL_OK;
}

/* A price in dollars per million units: 0 to 1000000 with at most 6 decimals, exactly. */
static int price_of(const json_t *v, const char *model, const char *dim, rl_fp *out, rl_err *err)
{
    double d = json_is_number(v) ? json_number_value(v) : -1;
    double scaled = d * (double)RL_FP_ONE;
    if (!(d >= 0 && d <= 1000000) || fabs(scaled - nearbyint(scaled)) > 1e-3)
        return fail(err, "prices.models.%.64s.%s: must be a number of dollars from 0 to 1000000 "
                    "with at most 6 decimals", model, dim);
    *out = (rl_fp)llrint(scaled);
    return RL_OK;
}

static int parse_prices(const json_t *m, rl_config *cfg, rl_err *err)
{
    const json_t *by = json_object_get(m, "by"), *models = json_object_get(m, "models");
    const char *k, *dk;
    json_t *v, *dv;
    int rc;
    if (!json_is_object(m))
        return fail(err, "prices: must be an object {\"by\": ..., \"models\": {...}}");
    json_object_foreach((json_t *)m, k, v)
    {
        if (strcmp(k, "by") != 0 && strcmp(k, "models") != 0)
            return fail(err, "prices.%.64s: unknown field (known: by, models)", k);
    }
    if (!json_is_string(by))
        return fail(err, "prices.by: required, the descriptor naming a request's model");
    if ((rc = rl_config_set_price_by(cfg, json_string_value(by), err)) != RL_OK)
        return rc;
    if (!json_is_object(models))
        return fail(err, "prices.models: required, an object of model name to prices");
    json_object_foreach((json_t *)models, k, v)
    {
        rl_fp per[RL_MAX_DIMS] = {0};
        if (!json_is_object(v))
            return fail(err, "prices.models.%.64s: must be an object of dimension to dollars "
                        "per million", k);
        json_object_foreach(v, dk, dv)
        {
            long d = rl_config_dimension(cfg, dk, strlen(dk));
            if (d < 0)
                return fail(err, "prices.models.%.64s.%.64s: not a declared dimension", k, dk);
            if ((rc = price_of(dv, k, dk, &per[d], err)) != RL_OK)
                return rc;
        }
        if ((rc = rl_config_add_price(cfg, k, per, err)) != RL_OK)
            return rc;
    }
    return RL_OK;
}

static int parse_root(const json_t *root, rl_registry *reg, rld_settings *set, rl_config *cfg,
                      const char **default_tier, rl_err *err)
{
    const json_t *m;
    int rc;

    if (!json_is_object(root))
        return fail(err, "the configuration must be a JSON object");
    if ((rc = read_table(&rld_settings_root, root, "", 0, set, err)) != RL_OK)
        return rc;
    cfg->reservation_ttl = set->reservation_ttl;
    /* plug-ins first: the rules below may use the types they register */
    for (size_t i = 0; i < set->nplugins; i++)
        if ((rc = rl_registry_load_plugin(reg, set->plugins[i], err)) != RL_OK) {
            char path[32];
            snprintf(path, sizeof path, "plugins[%zu]", i);
            return rld_err_at_sep(err, RL_EINVAL, path, ": ");
        }

    /* dimensions before the rules that count them */
    if ((m = json_object_get(root, "dimensions")) && (rc = parse_dimensions(m, cfg, err)) != RL_OK)
        return rc;
    if ((m = json_object_get(root, "prices")) && (rc = parse_prices(m, cfg, err)) != RL_OK)
        return rc;
    if ((m = json_object_get(root, "tiers")) && (rc = parse_tiers(m, reg, cfg, err)) != RL_OK)
        return rc;
    if ((m = json_object_get(root, "default_tier")) && !json_is_string(m))
        return fail(err, "default_tier: must be a string");
    *default_tier = json_string_value(m);

    m = json_object_get(root, "levels");
    if (set->ratelimit_config && !m) { /* the YAML's limits alone */
        if (json_object_get(root, "tiers") || json_object_get(root, "quotas"))
            return fail(err, "%s: needs a tiered level in levels (beside ratelimit_config)",
                        json_object_get(root, "tiers") ? "tiers" : "quotas");
        return RL_OK;
    }
    if (!json_is_array(m) || json_array_size(m) == 0)
        return fail(err, "levels: required, a list of at least one level");
    if (json_array_size(m) > RL_MAX_LEVELS)
        return fail(err, "levels: at most %d levels", RL_MAX_LEVELS);
    for (size_t i = 0; i < json_array_size(m); i++)
        if ((rc = parse_level(json_array_get(m, i), i, reg, cfg, set, err)) != RL_OK)
            return rc;

    if ((m = json_object_get(root, "quotas")) && (rc = parse_quotas(m, reg, cfg, err)) != RL_OK)
        return rc;
    return RL_OK;
}

int rld_config_parse(const char *text, size_t len, rl_registry *reg, rld_settings *set,
                     rl_config **out, rl_err *err)
{
    json_error_t jerr;
    const char *default_tier = NULL;
    *out = NULL;
    if (rld_settings_defaults(set) != RL_OK)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        rld_settings_clear(set);
        return fail(err, "line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
    }
    rl_config *cfg = rl_config_new(reg);
    int rc = cfg ? parse_root(root, reg, set, cfg, &default_tier, err) : fail(err, "out of memory");
    if (rc == RL_OK && set->ratelimit_config && cfg->nlevels == 0) {
        /* the caller reads the limits from the YAML */
        json_decref(root);
        rl_config_free(cfg);
        return RL_OK;
    }
    if (rc == RL_OK && set->grpc_hits_addend &&
        rl_config_dimension(cfg, set->grpc_hits_addend, strlen(set->grpc_hits_addend)) < 0)
        rc = fail(err, "grpc.hits_addend: \"%.64s\" is not a declared dimension",
                  set->grpc_hits_addend);
    if (rc == RL_OK)
        rc = rl_config_finish(cfg, default_tier, err);
    json_decref(root);
    if (rc != RL_OK) {
        rl_config_free(cfg);
        rld_settings_clear(set);
        return rc;
    }
    *out = cfg;
    return RL_OK;
}

int rld_config_load(const char *path, rl_registry *reg, rld_settings *set, rl_config **out,
                    rl_err *err)
{
    size_t len;
    *out = NULL;
    errno = 0;
    char *buf = rld_read_file(path, &len);
    if (!buf)
        return fail(err, "%s: %s", path, errno ? strerror(errno) : "cannot be read");
    int rc = rld_config_parse(buf, len, reg, set, out, err);
    free(buf);
    return rc;
}
