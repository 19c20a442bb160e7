/*
 * testutil.c - see testutil.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAX_LIMITERS 64
static struct {
    rl_limiter *lim;
    rl_registry *reg;
} made[MAX_LIMITERS];

rl_limiter *tu_limiter(const char *json)
{
    return tu_limiter_with(rl_registry_new(), json);
}

rl_limiter *tu_limiter_with(rl_registry *reg, const char *json)
{
    rld_settings set;
    rl_config *cfg;
    rl_limiter *lim = NULL;
    rl_err err = {{0}};
    ck_assert_ptr_nonnull(reg);
    int rc = rld_config_parse(json, strlen(json), reg, &set, &cfg, &err);
    ck_assert_msg(rc == RL_OK, "config refused: %s", err.msg);
    rld_settings_clear(&set);
    rc = rl_limiter_new(cfg, NULL, &lim, &err);
    ck_assert_msg(rc == RL_OK, "limiter refused: %s", err.msg);
    for (int i = 0; i < MAX_LIMITERS; i++)
        if (!made[i].lim) {
            made[i].lim = lim;
            made[i].reg = reg;
            break;
        }
    return lim;
}

void tu_free(rl_limiter *lim)
{
    for (int i = 0; i < MAX_LIMITERS; i++)
        if (made[i].lim == lim) {
            rl_limiter_free(lim);
            rl_registry_free(made[i].reg);
            made[i].lim = NULL;
            made[i].reg = NULL;
        }
}

const char *tu_config_error(const char *json)
{
    static rl_err err;
    rl_registry *reg = rl_registry_new();
    rld_settings set;
    rl_config *cfg = NULL;
    memset(&err, 0, sizeof err);
    int rc = rld_config_parse(json, strlen(json), reg, &set, &cfg, &err);
    rl_config_free(cfg);
    if (rc == RL_OK)
        rld_settings_clear(&set);
    rl_registry_free(reg);
    ck_assert_msg(rc != RL_OK, "configuration was accepted: %s", json);
    return err.msg;
}

static size_t parse_keys(const char *keys, char *buf, size_t buflen, rl_descriptor *ds,
                         size_t max)
{
    size_t n = 0;
    snprintf(buf, buflen, "%s", keys);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && n < max;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        ck_assert_ptr_nonnull(eq);
        *eq = '\0';
        ds[n].name = tok;
        ds[n].name_len = strlen(tok);
        ds[n].value = eq + 1;
        ds[n].value_len = strlen(eq + 1);
        n++;
    }
    return n;
}

int tu_acquire_ex(rl_limiter *lim, const char *keys, double cost, rl_ns now, unsigned flags,
                  int64_t priority, rl_decision *d)
{
    /* a decision's keys may point into the request: keep it until the next call */
    static _Thread_local char buf[2048];
    rl_descriptor ds[16];
    rl_err err = {{0}};
    rl_request req = {.desc = ds,
                      .ndesc = parse_keys(keys, buf, sizeof buf, ds, 16),
                      .cost = FP(cost),
                      .priority = priority,
                      .flags = flags,
                      .now = now};
    int rc = rl_acquire(lim, &req, d, &err);
    ck_assert_msg(rc == RL_OK, "acquire failed: %s", err.msg);
    rl_decision_done(d);
    return d->allowed;
}

int tu_acquire(rl_limiter *lim, const char *keys, double cost, rl_ns now, rl_decision *d)
{
    return tu_acquire_ex(lim, keys, cost, now, 0, 0, d);
}

int tu_acquire_err(rl_limiter *lim, const char *keys, double cost, rl_ns now, rl_err *err)
{
    char buf[2048];
    rl_descriptor ds[16];
    rl_decision d;
    rl_request req = {.desc = ds,
                      .ndesc = parse_keys(keys, buf, sizeof buf, ds, 16),
                      .cost = FP(cost),
                      .now = now};
    memset(err, 0, sizeof *err);
    int rc = rl_acquire(lim, &req, &d, err);
    if (rc == RL_OK)
        rl_decision_done(&d);
    return rc;
}

const rl_rule_status *tu_status(const rl_decision *d, size_t i)
{
    const rl_rule_status *st = rl_decision_status(d, i);
    ck_assert_msg(st != NULL, "applied rule %zu has no status", i);
    return st;
}

double tu_remaining(const rl_limiter *lim, const rl_decision *d, const char *level)
{
    const rl_config *cfg = rl_limiter_config(lim);
    for (size_t i = 0; i < d->napplied; i++)
        if (strcmp(cfg->levels[d->applied[i].level].name, level) == 0 &&
            d->applied[i].has_status)
            return rl_fp_to_double(tu_status(d, i)->remaining);
    ck_abort_msg("level %s not applied", level);
    return 0;
}

const char *tu_blocked_by(const rl_limiter *lim, const rl_decision *d)
{
    static char buf[256];
    if (d->blocked < 0)
        return "";
    const rl_applied *a = &d->applied[d->blocked];
    snprintf(buf, sizeof buf, "%s: %s", rl_limiter_config(lim)->levels[a->level].name,
             a->rule->name);
    return buf;
}

int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}
