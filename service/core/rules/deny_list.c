/*
 * deny_list {keys}: keys in the list never fit (their wait is infinite); others always do.
 * Stateless: it keeps nothing per key and reports no quota.
 */
#include <stddef.h>
#include <stdio.h>

#include "../core.h"

typedef struct dl_params {
    rl_strings keys;
} dl_params;

static rl_ns dl_evaluate(const void *pp, const void *st, const char *key, size_t keylen,
                         rl_ns now, rl_fp cost, rl_eval *ev)
{
    (void)st;
    (void)now;
    (void)cost;
    (void)ev;
    return rl_strings_find(&((const dl_params *)pp)->keys, key, keylen) ? RL_WAIT_NEVER : 0;
}

static void dl_name(const void *pp, char *buf, size_t len)
{
    size_t n = ((const dl_params *)pp)->keys.n;
    snprintf(buf, len, "deny_list(%zu key%s)", n, n == 1 ? "" : "s");
}

static const rl_param_def dl_params_def[] = {
    {"keys", RL_PARAM_STRINGS, offsetof(dl_params, keys), 0, 1000000, 0, 1, "keys to refuse"},
};

const rl_rule_type rl__deny_list = {
    .api_version = RL_RULE_API_VERSION,
    .name = "deny_list",
    .params = dl_params_def,
    .nparams = sizeof dl_params_def / sizeof dl_params_def[0],
    .params_size = sizeof(dl_params),
    .state_size = 0,
    .flags = RL_RULE_UNIT_REQUESTS,
    .default_name = dl_name,
    .evaluate = dl_evaluate,
};
