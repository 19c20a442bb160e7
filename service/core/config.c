/*
 * config.c - levels, tiers and initial quotas, checked as a whole before a limiter uses them.
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"

rl_config *rl_config_new(rl_registry *reg)
{
    rl_config *cfg = calloc(1, sizeof *cfg);
    if (cfg) {
        cfg->reg = reg;
        cfg->reservation_ttl = 300 * RL_NS_PER_SEC;
    }
    return cfg;
}

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

void rl_config_free(rl_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < cfg->nlevels; i++) {
        rl_level *l = &cfg->levels[i];
        free(l->name);
        free_strv(l->compose, l->ncompose);
        free(l->default_key);
        rl__rules_destroy(l->rules);
    }
    for (size_t i = 0; i < cfg->ntiers; i++) {
        free(cfg->tiers[i].name);
        rl__rules_destroy(cfg->tiers[i].rules);
    }
    free(cfg->tiers);
    for (size_t i = 0; i < cfg->nquotas; i++)
        rl_rules_unref(cfg->quotas[i].rules);
    free_strv(cfg->quota_keys, cfg->nquotas);
    free(cfg->quotas);
    rl__config_free_usage(cfg);
    free(cfg);
}

const char *rl__name_problem(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return "must be 1 to 64 characters";
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || c == '.';
        if (!ok)
            return "may hold only letters, digits, '_', '-' and '.'";
    }
    return NULL;
}

static int steal_rules(rl_rules *rules, rl_err *err)
{
    int rc = rl__rules_check(rules, err);
    if (rc == RL_OK)
        rules->refs = -1;
    return rc;
}

/* Whether another level named name may be added. */
static int check_level_name(const rl_config *cfg, const char *name, rl_err *err)
{
    const char *why;
    if (cfg->nlevels >= RL_MAX_LEVELS)
        return rl_errf(err, RL_EINVAL, "too many levels (at most %d)", RL_MAX_LEVELS);
    if ((why = rl__name_problem(name)))
        return rl_errf(err, RL_EINVAL, "name: %s", why);
    for (size_t i = 0; i < cfg->nlevels; i++)
        if (strcmp(cfg->levels[i].name, name) == 0)
            return rl_errf(err, RL_EINVAL, "name: level \"%s\" is defined twice", name);
    return RL_OK;
}

int rl_level_reads(const rl_level *l, const char *name, size_t n)
{
    size_t parts = l->ncompose ? l->ncompose : 1;
    for (size_t k = 0; k < parts; k++) {
        const char *own = l->ncompose ? l->compose[k] : l->name;
        if (strlen(own) == n && memcmp(own, name, n) == 0)
            return 1;
    }
    return 0;
}

int rl_config_add_keyed_level(rl_config *cfg, const char *name, rl_key_rules_fn fn, void *ctx,
                              rl_err *err)
{
    int rc = check_level_name(cfg, name, err);
    if (rc != RL_OK)
        return rc;
    if (!fn)
        return rl_errf(err, RL_EINVAL, "rules: a keyed level needs its function");
    rl_level *l = &cfg->levels[cfg->nlevels];
    memset(l, 0, sizeof *l);
    if (!(l->name = rl__strndup(name, strlen(name))))
        return rl_errf(err, RL_ENOMEM, "out of memory");
    l->key_rules = fn;
    l->key_rules_ctx = ctx;
    cfg->nlevels++;
    return RL_OK;
}

int rl_config_add_level(rl_config *cfg, const char *name, const char *const *compose,
                        size_t ncompose, const char *default_key, int tiered, rl_rules *rules,
                        rl_err *err)
{
    const char *why;
    int rc = RL_EINVAL;

    if ((rc = check_level_name(cfg, name, err)) != RL_OK)
        goto fail;
    rc = RL_EINVAL;
    if (ncompose > 8) {
        rl_errf(err, rc, "compose: at most 8 descriptors");
        goto fail;
    }
    for (size_t i = 0; i < ncompose; i++)
        if ((why = rl__name_problem(compose[i]))) {
            rl_errf(err, rc, "compose[%zu]: %s", i, why);
            goto fail;
        }
    if (default_key && (why = rl__key_problem(default_key, strlen(default_key)))) {
        rl_errf(err, rc, "default_key: %s", why);
        goto fail;
    }
    if (tiered && rules) {
        rl_errf(err, rc, "rules: a tiered level takes its rules from \"tiers\"");
        goto fail;
    }
    if (!tiered && !rules) {
        rl_errf(err, rc, "rules: required (or set \"tiered\": true)");
        goto fail;
    }
    if (rules && (rc = steal_rules(rules, err)) != RL_OK) {
        rl__err_prefix(err, "rules");
        goto fail;
    }

    rl_level *l = &cfg->levels[cfg->nlevels];
    memset(l, 0, sizeof *l);
    l->name = rl__strndup(name, strlen(name));
    l->compose = ncompose ? calloc(ncompose, sizeof *l->compose) : NULL;
    l->default_key = default_key ? rl__strndup(default_key, strlen(default_key)) : NULL;
    int oom = !l->name || (ncompose && !l->compose) || (default_key && !l->default_key);
    for (size_t i = 0; !oom && i < ncompose; i++) {
        l->compose[i] = rl__strndup(compose[i], strlen(compose[i]));
        oom = !l->compose[i];
        l->ncompose = i + 1;
    }
    l->tiered = tiered;
    l->rules = rules;
    cfg->nlevels++;
    if (oom)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    return RL_OK;
fail:
    rl__rules_destroy(rules);
    return rc;
}

long rl_config_tier(const rl_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->ntiers; i++)
        if (strcmp(cfg->tiers[i].name, name) == 0)
            return (long)i;
    return -1;
}

int rl_config_add_tier(rl_config *cfg, const char *name, rl_rules *rules, rl_err *err)
{
    const char *why;
    int rc = RL_EINVAL;
    if ((why = rl__name_problem(name))) {
        rl_errf(err, rc, "%s", why);
        goto fail;
    }
    if (rl_config_tier(cfg, name) >= 0) {
        rl_errf(err, rc, "tier defined twice");
        goto fail;
    }
    if ((rc = steal_rules(rules, err)) != RL_OK)
        goto fail;
    rl_tier *t = realloc(cfg->tiers, (cfg->ntiers + 1) * sizeof *t);
    char *copy = rl__strndup(name, strlen(name));
    if (t)
        cfg->tiers = t;
    if (!t || !copy) {
        free(copy);
        rc = rl_errf(err, RL_ENOMEM, "out of memory");
        goto fail;
    }
    cfg->tiers[cfg->ntiers].name = copy;
    cfg->tiers[cfg->ntiers].rules = rules;
    cfg->ntiers++;
    return RL_OK;
fail:
    rl__rules_destroy(rules);
    return rc;
}

int rl_config_add_quota(rl_config *cfg, const char *key, const char *tier, rl_rules *rules,
                        rl_err *err)
{
    const char *why;
    int rc = RL_EINVAL;
    long t = -1;
    if ((why = rl__key_problem(key, strlen(key)))) {
        rl_errf(err, rc, "%s", why);
        goto fail;
    }
    if ((tier == NULL) == (rules == NULL)) {
        rl_errf(err, rc, "give either a tier or rules");
        goto fail;
    }
    if (tier && (t = rl_config_tier(cfg, tier)) < 0) {
        rl_errf(err, rc, "unknown tier \"%.64s\"", tier);
        goto fail;
    }
    if (rules && (rc = rl__rules_check(rules, err)) != RL_OK) {
        rl__err_prefix(err, "rules");
        goto fail;
    }
    for (size_t i = 0; i < cfg->nquotas; i++)
        if (strcmp(cfg->quota_keys[i], key) == 0) {
            rc = rl_errf(err, RL_EINVAL, "quota given twice");
            goto fail;
        }
    char **keys = realloc(cfg->quota_keys, (cfg->nquotas + 1) * sizeof *keys);
    if (keys)
        cfg->quota_keys = keys;
    rl_quota *qs = realloc(cfg->quotas, (cfg->nquotas + 1) * sizeof *qs);
    if (qs)
        cfg->quotas = qs;
    char *copy = rl__strndup(key, strlen(key));
    if (!keys || !qs || !copy) {
        free(copy);
        rc = rl_errf(err, RL_ENOMEM, "out of memory");
        goto fail;
    }
    cfg->quota_keys[cfg->nquotas] = copy;
    cfg->quotas[cfg->nquotas].tier = t < 0 ? 0 : (size_t)t;
    cfg->quotas[cfg->nquotas].rules = rules;
    cfg->nquotas++;
    return RL_OK;
fail:
    rl_rules_unref(rules);
    return rc;
}

long rl_config_tiered_level(const rl_config *cfg)
{
    for (size_t i = 0; i < cfg->nlevels; i++)
        if (cfg->levels[i].tiered)
            return (long)i;
    return -1;
}

int rl_config_finish(rl_config *cfg, const char *default_tier, rl_err *err)
{
    size_t ntiered = 0, applied = 0;
    if (cfg->nlevels == 0)
        return rl_errf(err, RL_EINVAL, "levels: at least one level is required");
    for (size_t i = 0; i < cfg->nlevels; i++) {
        ntiered += cfg->levels[i].tiered != 0;
        /* a keyed level's rules are counted per decision */
        applied += cfg->levels[i].tiered ? RL_MAX_RULES
                   : cfg->levels[i].rules ? cfg->levels[i].rules->n
                                          : 0;
    }
    if (ntiered > 1)
        return rl_errf(err, RL_EINVAL, "levels: at most one level may be tiered");
    if (applied > RL_MAX_APPLIED)
        return rl_errf(err, RL_EINVAL,
                        "levels: too many rules in all (a tiered level counts %d; at most %d)",
                        RL_MAX_RULES, RL_MAX_APPLIED);
    if (ntiered && cfg->ntiers == 0)
        return rl_errf(err, RL_EINVAL, "tiers: required by the tiered level");
    if (!ntiered && cfg->ntiers)
        return rl_errf(err, RL_EINVAL, "tiers: no level is tiered (set \"tiered\": true)");
    if (!ntiered && cfg->nquotas)
        return rl_errf(err, RL_EINVAL, "quotas: no level is tiered");
    if (cfg->ntiers) {
        long t;
        if (!default_tier)
            return rl_errf(err, RL_EINVAL, "default_tier: required when tiers are given");
        if ((t = rl_config_tier(cfg, default_tier)) < 0)
            return rl_errf(err, RL_EINVAL, "default_tier: unknown tier \"%.64s\"",
                            default_tier);
        cfg->default_tier = (size_t)t;
    } else if (default_tier) {
        return rl_errf(err, RL_EINVAL, "default_tier: no tiers are defined");
    }
    if (cfg->reservation_ttl <= 0)
        return rl_errf(err, RL_EINVAL, "reservation_ttl: must be a positive number");
    return RL_OK;
}
