/*
 * builtins.c - the table of built-in rule types, registered in this order.
 */
#include "../core.h"

extern const rl_rule_type rl__token_bucket, rl__sliding_window, rl__sliding_window_counter,
    rl__fixed_window, rl__gcra, rl__concurrency, rl__deny_list, rl__adaptive_concurrency,
    rl__calendar;

static const rl_rule_type *const builtins[] = {
    &rl__token_bucket, &rl__sliding_window, &rl__sliding_window_counter, &rl__fixed_window,
    &rl__gcra,         &rl__concurrency,    &rl__deny_list,
    &rl__adaptive_concurrency, &rl__calendar,
};

int rl__register_builtins(rl_registry *reg)
{
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (rl_register_rule_type(reg, builtins[i]) != 0)
            return -1;
    return 0;
}
