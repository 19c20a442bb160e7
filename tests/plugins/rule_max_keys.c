/*
 * rule_max_keys.c - a rule type loaded as a plug-in: at most "limit" distinct keys are ever
 * admitted; requests for a key not yet seen are refused once that many keys have been seen.
 * Built against include/ratelimit_rule.h only, and loaded by a configuration's "plugins".
 *
 * Written against version 1 of the rule API (wait, take, status), and kept so: the host adapts
 * it, which is what proves that version 1 plug-ins keep loading and deciding.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "ratelimit_rule.h"

typedef struct mk_params {
    int64_t limit;
    int64_t *seen; /* shared by every key of the rule instance */
} mk_params;

typedef struct mk_state {
    int64_t known; /* 1 once the key was admitted */
} mk_state;

static int mk_prepare(void *pp, char *err, size_t errlen)
{
    mk_params *p = pp;
    p->seen = calloc(1, sizeof *p->seen);
    if (!p->seen) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static void mk_params_free(void *pp)
{
    free(((mk_params *)pp)->seen);
}

static rl_ns mk_wait(const void *pp, const void *st, const char *key, size_t keylen, rl_ns now,
                     rl_fp cost)
{
    const mk_params *p = pp;
    (void)key;
    (void)keylen;
    (void)now;
    (void)cost;
    if (((const mk_state *)st)->known)
        return 0;
    return __atomic_load_n(p->seen, __ATOMIC_RELAXED) < p->limit ? 0 : RL_WAIT_NEVER;
}

static void mk_take(const void *pp, void *st, rl_ns now, rl_fp cost)
{
    mk_state *s = st;
    (void)now;
    (void)cost;
    if (!s->known) {
        s->known = 1;
        __atomic_add_fetch(((const mk_params *)pp)->seen, 1, __ATOMIC_RELAXED);
    }
}

static rl_ns mk_idle_at(const void *pp, const void *st)
{
    (void)pp;
    return ((const mk_state *)st)->known ? RL_WAIT_NEVER : 0;
}

static void mk_name(const void *pp, char *buf, size_t len)
{
    snprintf(buf, len, "max_keys(%lld)", (long long)((const mk_params *)pp)->limit);
}

static const rl_param_def mk_params_def[] = {
    {"limit", RL_PARAM_INT, offsetof(mk_params, limit), 1, 1e9, 0, 1, "distinct keys admitted"},
};

static const rl_rule_type max_keys = {
    .api_version = 1,
    .name = "max_keys",
    .params = mk_params_def,
    .nparams = 1,
    .params_size = sizeof(mk_params),
    .state_size = sizeof(mk_state),
    .flags = RL_RULE_UNIT_REQUESTS,
    .prepare = mk_prepare,
    .params_free = mk_params_free,
    .default_name = mk_name,
    .wait = mk_wait,
    .take = mk_take,
    .idle_at = mk_idle_at,
};

int rl_plugin_init(rl_registry *reg, unsigned api_version);
int rl_plugin_init(rl_registry *reg, unsigned api_version)
{
    if (api_version < 1)
        return -1;
    return rl_register_rule_type(reg, &max_keys);
}
