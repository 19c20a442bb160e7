/*
 * config_json.c - reads the JSON configuration into the core's structures, and writes rules back.
 *
 * Every error names the path of the field at fault. Members whose name starts with '_' are
 * comments and are ignored; any other unknown member is an error, so typos do not pass silently.
 */
#include <errno.h>
#include <libgen.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_json.h"

#define fail(err, ...) rl_errf(err, RL_EINVAL, __VA_ARGS__)

/* Puts path and sep in front of the message already in err. */
static int at_sep(rl_err *err, int rc, const char *path, const char *sep)
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

/* Puts the path of a container in front of a message relative to it ("[0].capacity: ...",
 * "capacity: ..." or ": must be ..."). */
static int at(rl_err *err, int rc, const char *path)
{
    char c = err->msg[0];
    return at_sep(err, rc, path, c == '[' || c == '.' || c == ':' ? "" : ".");
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p)
        memcpy(p, s, n + 1);
    return p;
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
        char known[256] = "type, name, unit";
        size_t used = strlen(known);
        if (r->type->capacity)
            used += (size_t)snprintf(known + used, sizeof known - used, ", reserved");
        for (size_t i = 0; i < r->type->nparams && used < sizeof known; i++)
            used += (size_t)snprintf(known + used, sizeof known - used, ", %s",
                                     r->type->params[i].name);
        return fail(err, "%s: unknown parameter of %s (known: %s)", k, r->type->name, known);
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

/* Builds rule r (uninitialised) from a JSON object; errors are relative to the object. */
static int rule_from_json(const json_t *o, rl_registry *reg, rl_rule *r, rl_err *err)
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
            rc = json_is_string(v) ? rl_rule_set_unit(r, json_string_value(v), err)
                                   : fail(err, "unit: must be \"cost\" or \"requests\"");
        else if (strcmp(k, "reserved") == 0)
            rc = set_reserved(r, v, err);
        else
            rc = set_param(r, k, v, err);
        if (rc != RL_OK)
            return rc;
    }
    return rl_rule_finish(r, err);
}

int rld_rules_from_json(const json_t *arr, rl_registry *reg, rl_rules **out, rl_err *err)
{
    char path[32];
    *out = NULL;
    if (!json_is_array(arr) || json_array_size(arr) == 0 ||
        json_array_size(arr) > RL_MAX_RULES)
        return fail(err, ": must be a list of 1 to %d rules", RL_MAX_RULES);
    rl_rules *rs = rl_rules_new(json_array_size(arr));
    if (!rs)
        return fail(err, ": out of memory");
    for (size_t i = 0; i < rs->n; i++) {
        int rc = rule_from_json(json_array_get(arr, i), reg, &rs->v[i], err);
        if (rc != RL_OK) {
            snprintf(path, sizeof path, "[%zu]", i);
            rl_rules_unref(rs);
            return at(err, rc, path);
        }
    }
    *out = rs;
    return RL_OK;
}

json_t *rld_rule_to_json(const rl_rule *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string(r->type->name));
    json_object_set_new(o, "name", json_string(r->name));
    for (size_t i = 0; i < r->type->nparams; i++) {
        const rl_param_def *d = &r->type->params[i];
        if (d->kind == RL_PARAM_STRINGS) {
            const rl_strings *s = rl_rule_get_strings(r, d);
            json_t *a = json_array();
            for (size_t k = 0; k < s->n; k++)
                json_array_append_new(a, json_stringn(s->v[k], s->len[k]));
            json_object_set_new(o, d->name, a);
        } else {
            json_object_set_new(o, d->name, rld_json_number(rl_rule_get_number(r, d)));
        }
    }
    json_object_set_new(o, "unit", json_string(r->unit == RL_UNIT_REQUESTS ? "requests" : "cost"));
    if (r->reserved_fraction > 0)
        json_object_set_new(o, "reserved",
                            json_pack("{s:f, s:I}", "fraction", r->reserved_fraction,
                                      "min_priority", (json_int_t)r->reserved_min_priority));
    return o;
}

json_t *rld_rules_to_json(const rl_rules *rs)
{
    json_t *a = json_array();
    for (size_t i = 0; rs && i < rs->n; i++)
        json_array_append_new(a, rld_rule_to_json(&rs->v[i]));
    return a;
}

static const char *on_error_name(rld_on_error e)
{
    return e == RLD_ON_ERROR_CLOSED ? "closed" : e == RLD_ON_ERROR_LOCAL ? "local" : "open";
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
        /* a tiered level shows the default tier's rules; a user's own are at /quota/<user>;
         * a keyed level's rules follow from each key (a YAML configuration's descriptors) */
        if (l->key_rules)
            json_object_set_new(lo, "keyed", json_true());
        else
            json_object_set_new(lo, "rules", rld_rules_to_json(
                                             l->tiered ? cfg->tiers[cfg->default_tier].rules
                                                       : l->rules));
        if (set && set->store == RLD_STORE_REDIS) {
            json_object_set_new(lo, "on_store_error",
                                json_string(on_error_name(set->on_error[i])));
            if (set->shards[i] > 1)
                json_object_set_new(lo, "shards", json_integer(set->shards[i]));
        }
        json_array_append_new(levels, lo);
    }
    for (size_t i = 0; i < cfg->ntiers; i++)
        json_object_set_new(tiers, cfg->tiers[i].name, rld_rules_to_json(cfg->tiers[i].rules));
    json_object_set_new(o, "levels", levels);
    json_object_set_new(o, "tiers", tiers);
    json_object_set_new(o, "default_tier",
                        cfg->ntiers ? json_string(cfg->tiers[cfg->default_tier].name) : json_null());
    json_object_set_new(o, "reservation_ttl",
                        rld_json_number(rl_ns_to_seconds(cfg->reservation_ttl)));
    json_object_set_new(o, "store",
                        json_string(set && set->store == RLD_STORE_REDIS ? "redis" : "memory"));
    return o;
}

/* ---- the whole file ------------------------------------------------------------------ */

static int get_string(const json_t *v, const char *path, size_t max, const char **out,
                      rl_err *err)
{
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max)
        return fail(err, "%s: must be a string of 1 to %zu characters", path, max);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return fail(err, "%s: must not contain NUL characters", path);
    *out = json_string_value(v);
    return RL_OK;
}

static int get_int(const json_t *v, const char *path, json_int_t min, json_int_t max, int *out,
                   rl_err *err)
{
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return fail(err, "%s: must be a whole number from %lld to %lld", path, (long long)min,
                    (long long)max);
    *out = (int)json_integer_value(v);
    return RL_OK;
}

static int parse_listen(const json_t *v, rld_settings *set, rl_err *err)
{
    const char *k, *s;
    const json_t *m;
    int rc;
    if (!json_is_object(v))
        return fail(err, "listen: must be an object {\"address\", \"port\"}");
    json_object_foreach((json_t *)v, k, m)
    {
        if (strcmp(k, "address") == 0) {
            if ((rc = get_string(m, "listen.address", sizeof set->address - 1, &s, err)))
                return rc;
            snprintf(set->address, sizeof set->address, "%s", s);
        } else if (strcmp(k, "port") == 0) {
            if ((rc = get_int(m, "listen.port", 0, 65535, &set->port, err)))
                return rc;
        } else if (k[0] != '_') {
            return fail(err, "listen.%s: unknown field (known: address, port)", k);
        }
    }
    return RL_OK;
}

static int parse_store(const json_t *v, rld_settings *set, rl_err *err)
{
    const char *k, *s;
    const json_t *m;
    int rc;
    if (json_is_string(v)) {
        s = json_string_value(v);
        if (strcmp(s, "memory") == 0)
            set->store = RLD_STORE_MEMORY;
        else if (strcmp(s, "redis") == 0)
            set->store = RLD_STORE_REDIS;
        else
            return fail(err, "store: must be \"memory\", \"redis\" or an object with a \"type\"");
        return RL_OK;
    }
    if (!json_is_object(v))
        return fail(err, "store: must be \"memory\", \"redis\" or an object with a \"type\"");
    const json_t *type = json_object_get(v, "type");
    if (!json_is_string(type) || (strcmp(json_string_value(type), "memory") != 0 &&
                                  strcmp(json_string_value(type), "redis") != 0))
        return fail(err, "store.type: must be \"memory\" or \"redis\"");
    set->store = strcmp(json_string_value(type), "redis") == 0 ? RLD_STORE_REDIS
                                                               : RLD_STORE_MEMORY;
    json_object_foreach((json_t *)v, k, m)
    {
        if (k[0] == '_' || strcmp(k, "type") == 0)
            continue;
        if (strcmp(k, "url") == 0) {
            if ((rc = get_string(m, "store.url", 1024, &s, err)))
                return rc;
            if (strncmp(s, "redis://", 8) != 0)
                return fail(err, "store.url: must start with redis://");
            free(set->redis_url);
            set->redis_url = dup_str(s);
        } else if (strcmp(k, "prefix") == 0) {
            if (!json_is_string(m) || json_string_length(m) > 64)
                return fail(err, "store.prefix: must be a string of at most 64 characters");
            free(set->redis_prefix);
            set->redis_prefix = dup_str(json_string_value(m));
        } else if (strcmp(k, "timeout_ms") == 0) {
            if ((rc = get_int(m, "store.timeout_ms", 1, 60000, &set->redis_timeout_ms, err)))
                return rc;
        } else if (strcmp(k, "pool") == 0) {
            if ((rc = get_int(m, "store.pool", 1, 1024, &set->redis_pool, err)))
                return rc;
        } else if (strcmp(k, "functions") == 0) {
            if (!json_is_boolean(m))
                return fail(err, "store.functions: must be true or false");
            set->redis_functions = json_is_true(m);
        } else if (strcmp(k, "fleet_size") == 0) {
            if ((rc = get_int(m, "store.fleet_size", 1, 100000, &set->fleet_size, err)))
                return rc;
        } else {
            return fail(err,
                        "store.%s: unknown field (known: type, url, prefix, timeout_ms, pool, "
                        "fleet_size, functions)",
                        k);
        }
    }
    return RL_OK;
}

static int parse_level(const json_t *o, size_t i, rl_registry *reg, rl_config *cfg,
                       rld_settings *set, rl_err *err)
{
    const char *k, *name = NULL, *default_key = NULL, *compose[8];
    const json_t *m, *rules_json = NULL;
    size_t ncompose = 0;
    int tiered = 0, rc;
    char path[64];
    snprintf(path, sizeof path, "levels[%zu]", i);

    if (!json_is_object(o))
        return fail(err, "%s: must be an object with a \"name\"", path);
    json_object_foreach((json_t *)o, k, m)
    {
        if (k[0] == '_')
            continue;
        if (strcmp(k, "name") == 0) {
            if (!json_is_string(m))
                return fail(err, "%s.name: must be a string", path);
            name = json_string_value(m);
        } else if (strcmp(k, "compose") == 0) {
            if (!json_is_array(m) || json_array_size(m) == 0 || json_array_size(m) > 8)
                return fail(err, "%s.compose: must be a list of 1 to 8 descriptor names", path);
            for (ncompose = 0; ncompose < json_array_size(m); ncompose++) {
                const json_t *e = json_array_get(m, ncompose);
                if (!json_is_string(e))
                    return fail(err, "%s.compose[%zu]: must be a string", path, ncompose);
                compose[ncompose] = json_string_value(e);
            }
        } else if (strcmp(k, "default_key") == 0) {
            if (!json_is_string(m))
                return fail(err, "%s.default_key: must be a string", path);
            default_key = json_string_value(m);
        } else if (strcmp(k, "tiered") == 0) {
            if (!json_is_boolean(m))
                return fail(err, "%s.tiered: must be true or false", path);
            tiered = json_is_true(m);
        } else if (strcmp(k, "rules") == 0) {
            rules_json = m;
        } else if (strcmp(k, "on_store_error") == 0) {
            const char *s = json_is_string(m) ? json_string_value(m) : "";
            if (strcmp(s, "open") == 0)
                set->on_error[i] = RLD_ON_ERROR_OPEN;
            else if (strcmp(s, "closed") == 0)
                set->on_error[i] = RLD_ON_ERROR_CLOSED;
            else if (strcmp(s, "local") == 0)
                set->on_error[i] = RLD_ON_ERROR_LOCAL;
            else
                return fail(err, "%s.on_store_error: must be \"open\", \"closed\" or \"local\"",
                            path);
        } else if (strcmp(k, "shards") == 0) {
            int n;
            if ((rc = get_int(m, "shards", 1, 1024, &n, err)))
                return at(err, rc, path);
            set->shards[i] = (unsigned)n;
        } else {
            return fail(err,
                        "%s.%s: unknown field (known: name, compose, default_key, tiered, rules, "
                        "on_store_error, shards)",
                        path, k);
        }
    }
    if (!name)
        return fail(err, "%s.name: required", path);
    rl_rules *rules = NULL;
    if (rules_json && !tiered) {
        char rpath[80];
        snprintf(rpath, sizeof rpath, "%s.rules", path);
        if ((rc = rld_rules_from_json(rules_json, reg, &rules, err)) != RL_OK)
            return at(err, rc, rpath);
    } else if (rules_json && tiered) {
        return fail(err, "%s.rules: a tiered level takes its rules from \"tiers\"", path);
    }
    if ((rc = rl_config_add_level(cfg, name, compose, ncompose, default_key, tiered, rules,
                                  err)) != RL_OK)
        return at(err, rc, path);
    return RL_OK;
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
        return rc ? at_sep(err, rc, path, ": ") : RL_OK;
    }
    rl_rules *rs;
    if ((rc = rld_rules_from_json(rules, reg, &rs, err)) != RL_OK) {
        strncat(path, ".rules", sizeof path - strlen(path) - 1);
        return at(err, rc, path);
    }
    rc = rl_config_add_quota(cfg, key, NULL, rs, err);
    return rc ? at_sep(err, rc, path, ": ") : RL_OK;
}

static int parse_root(const json_t *root, rl_registry *reg, rld_settings *set, rl_config *cfg,
                      const char **default_tier, rl_err *err)
{
    const char *k, *s;
    const json_t *m;
    int rc;

    if (!json_is_object(root))
        return fail(err, "the configuration must be a JSON object");

    /* plug-ins first: the rules below may use the types they register */
    if ((m = json_object_get(root, "plugins"))) {
        if (!json_is_array(m))
            return fail(err, "plugins: must be a list of paths");
        for (size_t i = 0; i < json_array_size(m); i++) {
            char path[32];
            snprintf(path, sizeof path, "plugins[%zu]", i);
            if ((rc = get_string(json_array_get(m, i), path, 4096, &s, err)))
                return rc;
            if ((rc = rl_registry_load_plugin(reg, s, err)) != RL_OK)
                return at_sep(err, RL_EINVAL, path, ": ");
            char **p = realloc(set->plugins, (set->nplugins + 1) * sizeof *p);
            if (!p)
                return fail(err, "out of memory");
            set->plugins = p;
            set->plugins[set->nplugins++] = dup_str(s);
        }
    }

    json_object_foreach((json_t *)root, k, m)
    {
        rc = RL_OK;
        if (k[0] == '_' || strcmp(k, "plugins") == 0 || strcmp(k, "levels") == 0 ||
            strcmp(k, "tiers") == 0 || strcmp(k, "quotas") == 0)
            continue;
        if (strcmp(k, "listen") == 0)
            rc = parse_listen(m, set, err);
        else if (strcmp(k, "threads") == 0)
            rc = get_int(m, "threads", 0, 256, &set->threads, err);
        else if (strcmp(k, "store") == 0)
            rc = parse_store(m, set, err);
        else if (strcmp(k, "admin_token") == 0) {
            if (!(rc = get_string(m, "admin_token", 1024, &s, err))) {
                free(set->admin_token);
                set->admin_token = dup_str(s);
            }
        } else if (strcmp(k, "quota_file") == 0) {
            if (!(rc = get_string(m, "quota_file", 4096, &s, err))) {
                free(set->quota_file);
                set->quota_file = dup_str(s);
            }
        } else if (strcmp(k, "state_file") == 0) {
            if (!(rc = get_string(m, "state_file", 4096, &s, err))) {
                free(set->state_file);
                set->state_file = dup_str(s);
            }
        } else if (strcmp(k, "state_interval") == 0) {
            rc = get_int(m, "state_interval", 0, 86400, &set->state_interval, err);
        } else if (strcmp(k, "reservation_ttl") == 0) {
            rl_ns ttl = json_is_number(m) ? rl_ns_from_seconds(json_number_value(m)) : -1;
            if (ttl < RL_NS_PER_SEC / 1000 || ttl > 86400 * RL_NS_PER_SEC)
                return fail(err, "reservation_ttl: must be a number of seconds from 0.001 to "
                                 "86400");
            cfg->reservation_ttl = ttl;
        } else if (strcmp(k, "default_tier") == 0) {
            if (!json_is_string(m))
                return fail(err, "default_tier: must be a string");
            *default_tier = json_string_value(m);
        } else {
            return fail(err,
                        "%s: unknown field (known: listen, threads, store, admin_token, "
                        "quota_file, state_file, state_interval, reservation_ttl, plugins, "
                        "levels, tiers, default_tier, quotas)",
                        k);
        }
        if (rc != RL_OK)
            return rc;
    }

    if ((m = json_object_get(root, "tiers"))) {
        if (!json_is_object(m))
            return fail(err, "tiers: must be an object of tier name to rule list");
        json_t *rules;
        json_object_foreach((json_t *)m, k, rules)
        {
            char path[96];
            rl_rules *rs;
            snprintf(path, sizeof path, "tiers.%.64s", k);
            if ((rc = rld_rules_from_json(rules, reg, &rs, err)) != RL_OK)
                return at(err, rc, path);
            if ((rc = rl_config_add_tier(cfg, k, rs, err)) != RL_OK)
                return at(err, rc, path);
        }
    }

    m = json_object_get(root, "levels");
    if (!json_is_array(m) || json_array_size(m) == 0)
        return fail(err, "levels: required, a list of at least one level");
    if (json_array_size(m) > RL_MAX_LEVELS)
        return fail(err, "levels: at most %d levels", RL_MAX_LEVELS);
    for (size_t i = 0; i < json_array_size(m); i++)
        if ((rc = parse_level(json_array_get(m, i), i, reg, cfg, set, err)) != RL_OK)
            return rc;

    if ((m = json_object_get(root, "quotas"))) {
        json_t *v;
        if (!json_is_object(m))
            return fail(err, "quotas: must be an object of key to tier name or {\"rules\"}");
        json_object_foreach((json_t *)m, k, v)
        {
            if ((rc = parse_quota(k, v, reg, cfg, err)) != RL_OK)
                return rc;
        }
    }
    return RL_OK;
}

void rld_settings_defaults(rld_settings *set)
{
    memset(set, 0, sizeof *set);
    snprintf(set->address, sizeof set->address, "127.0.0.1");
    set->port = 8080;
    set->redis_timeout_ms = 50;
    set->state_interval = 60;
    set->redis_pool = 8;
    for (size_t i = 0; i < RL_MAX_LEVELS; i++)
        set->shards[i] = 1;
}

int rld_config_parse(const char *text, size_t len, rl_registry *reg, rld_settings *set,
                     rl_config **out, rl_err *err)
{
    json_error_t jerr;
    const char *default_tier = NULL;
    *out = NULL;
    rld_settings_defaults(set);
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return fail(err, "line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
    rl_config *cfg = rl_config_new(reg);
    int rc = cfg ? parse_root(root, reg, set, cfg, &default_tier, err)
                 : fail(err, "out of memory");
    if (rc == RL_OK)
        rc = rl_config_finish(cfg, default_tier, err);
    if (rc == RL_OK && set->store == RLD_STORE_REDIS && !set->redis_url)
        set->redis_url = dup_str("redis://127.0.0.1:6379/0");
    if (rc == RL_OK && set->store == RLD_STORE_REDIS && !set->redis_prefix)
        set->redis_prefix = dup_str("rl:");
    json_decref(root);
    if (rc != RL_OK) {
        rl_config_free(cfg);
        rld_settings_clear(set);
        return rc;
    }
    *out = cfg;
    return RL_OK;
}

char *rld_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t n = 0, cap = 4096;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (cap - n < 2) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len)
            *len = n;
    }
    return buf;
}

/* Creates dir and its parents (like mkdir -p). */
static int mkdirs(const char *dir)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return -1;
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int rld_make_parent_dir(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return -1;
    int rc = mkdirs(dirname(copy));
    free(copy);
    return rc;
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

void rld_settings_clear(rld_settings *set)
{
    free(set->admin_token);
    free(set->quota_file);
    free(set->state_file);
    free(set->redis_url);
    free(set->redis_prefix);
    for (size_t i = 0; i < set->nplugins; i++)
        free(set->plugins[i]);
    free(set->plugins);
    memset(set, 0, sizeof *set);
}
