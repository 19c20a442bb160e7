/*
 * fuzz_config.c - the JSON configuration: rld_config_parse refuses with a message, or gives a
 * finished configuration and settings in their bounds, over which a limiter starts and decides
 * a request naming every level (invariants of fz_check_decision); a rule's alerts and the
 * alert webhook's settings are within their bounds. Inputs that name plug-ins
 * are skipped: loading a shared object from a path is not parsing.
 */
#define _GNU_SOURCE /* memmem */
#include <string.h>

#include "app/rules_json.h"
#include "config/config.h"
#include "fuzz.h"

/* A rule's alerts: at most RL_MAX_ALERTS fractions in (0, 1], increasing, on a type with
 * periods only. */
static void check_alerts(const rl_rule *r)
{
    FZ_CHECK(r->nalerts <= RL_MAX_ALERTS, "%u alerts", r->nalerts);
    FZ_CHECK(r->nalerts == 0 || (r->type->flags & RL_RULE_PERIODIC), "alerts on a %s rule",
             r->type->name);
    for (unsigned k = 0; k < r->nalerts; k++)
        FZ_CHECK(r->alerts[k] > 0 && r->alerts[k] <= 1 && (k == 0 || r->alerts[k] > r->alerts[k - 1]),
                 "alerts[%u] = %g", k, r->alerts[k]);
}

static void decide(rl_config *cfg)
{
    rl_limiter *lim = NULL;
    rl_err err = {{0}};
    rl_descriptor desc[RL_MAX_LEVELS * 2];
    size_t n = 0;
    int rc = rl_limiter_new(cfg, NULL, &lim, &err);
    FZ_CHECK(rc == RL_OK || err.msg[0], "limiter error %d without a message", rc);
    if (rc != RL_OK)
        return;
    cfg = (rl_config *)rl_limiter_config(lim);
    for (size_t l = 0; l < cfg->nlevels && n < sizeof desc / sizeof desc[0]; l++) {
        const rl_level *lv = &cfg->levels[l];
        const char *name = lv->ncompose ? lv->compose[0] : lv->name;
        int dup = 0;
        for (size_t i = 0; i < n; i++)
            dup |= strcmp(desc[i].name, name) == 0;
        if (!dup)
            desc[n++] = (rl_descriptor){name, strlen(name), "k", 1};
    }
    for (int i = 0; i < 2; i++) {
        rl_request req = {.desc = desc, .ndesc = n, .cost = RL_FP_ONE, .now = i};
        rl_decision d;
        rc = rl_acquire(lim, &req, &d, &err);
        fz_check_decision(rc, &d, &err);
        if (rc == RL_OK)
            rl_decision_done(&d);
    }
    rl_limiter_free(lim);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (memmem(data, size, "plugins", 7))
        return 0;
    rl_registry *reg = rl_registry_new();
    rld_settings set;
    rl_config *cfg = NULL;
    rl_err err = {{0}};
    FZ_CHECK(reg != NULL, "out of memory");
    if (rld_config_parse((const char *)data, size, reg, &set, &cfg, &err) != RL_OK) {
        FZ_CHECK(err.msg[0] != '\0', "a refusal without a message");
        FZ_CHECK(cfg == NULL, "a refusal with a configuration");
    } else if (set.ratelimit_config) { /* the YAML's limits are not this parser's */
        FZ_CHECK(!cfg || (cfg->nlevels >= 1 && cfg->nlevels <= RL_MAX_LEVELS),
                 "%zu levels beside ratelimit_config", cfg->nlevels);
        rl_config_free(cfg);
        rld_settings_clear(&set);
    } else {
        FZ_CHECK(cfg && cfg->nlevels >= 1 && cfg->nlevels <= RL_MAX_LEVELS, "%zu levels",
                 cfg ? cfg->nlevels : 0);
        FZ_CHECK(set.port >= 0 && set.port <= 65535, "port %d", set.port);
        FZ_CHECK(set.threads >= 0 && set.state_interval >= 0, "threads %d, state_interval %d",
                 set.threads, set.state_interval);
        FZ_CHECK(cfg->reservation_ttl > 0, "reservation_ttl %lld",
                 (long long)cfg->reservation_ttl);
        FZ_CHECK(!set.alert_url || strncmp(set.alert_url, "http", 4) == 0, "alert url %s",
                 set.alert_url);
        FZ_CHECK(!set.alert_url || (set.alert_queue >= 1 && set.alert_attempts >= 1 &&
                                    set.alert_timeout_ms >= 10),
                 "alert_webhook out of its bounds");
        for (size_t l = 0; l < cfg->nlevels; l++)
            for (size_t i = 0; cfg->levels[l].rules && i < cfg->levels[l].rules->n; i++)
                check_alerts(&cfg->levels[l].rules->v[i]);
        json_t *j = rld_config_to_json(cfg, &set);
        FZ_CHECK(j != NULL, "the configuration cannot be listed");
        json_decref(j);
        decide(cfg); /* takes cfg */
        rld_settings_clear(&set);
    }
    rl_registry_free(reg);
    return 0;
}
