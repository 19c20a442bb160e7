/*
 * values.c - see values.h.
 */
#include <stdlib.h>
#include <string.h>

#include "values.h"

#define COST_RANGE "must be a positive number from 0.000001 to 1000000000000"

int rld_value_cost(const char *field, double v, rl_fp *out, rl_err *err)
{
    rl_fp fp = rl_fp_from_double(v);
    if (fp <= 0 || fp > RL_FP_MAX)
        return rl_errf(err, -1, "%s: " COST_RANGE, field);
    *out = fp;
    return 0;
}

int rld_value_cost_text(const char *field, const char *s, size_t n, rl_fp *out, rl_err *err)
{
    const char *p = s, *end = s + n;
    rl_fp whole = 0, frac = 0;
    int digits = 0, decimals = 0;
    for (; p < end && *p >= '0' && *p <= '9' && whole <= RL_FP_MAX / RL_FP_ONE; p++, digits++)
        whole = whole * 10 + (*p - '0');
    if (p < end && *p == '.')
        for (p++; p < end && *p >= '0' && *p <= '9' && decimals < 6; p++, digits++, decimals++)
            frac = frac * 10 + (*p - '0');
    for (int i = decimals; i < 6; i++)
        frac *= 10;
    rl_fp v = whole <= RL_FP_MAX / RL_FP_ONE ? whole * RL_FP_ONE + frac : -1;
    if (p != end || digits == 0 || v <= 0 || v > RL_FP_MAX)
        return rl_errf(err, -1, "%s: " COST_RANGE " (at most 6 decimals)", field);
    *out = v;
    return 0;
}

int rld_value_cost_units(const char *field, uint64_t n, rl_fp *out, rl_err *err)
{
    if (n == 0 || n > (uint64_t)(RL_FP_MAX / RL_FP_ONE))
        return rl_errf(err, -1, "%s: must be a whole number from 1 to 1000000000000", field);
    *out = (rl_fp)n * RL_FP_ONE;
    return 0;
}

int rld_value_amount(const char *field, double v, rl_fp *out, rl_err *err)
{
    rl_fp fp = rl_fp_from_double(v);
    if (fp < 0 || fp > RL_FP_MAX)
        return rl_errf(err, -1, "%s: must be a number from 0 to 1000000000000", field);
    *out = fp;
    return 0;
}

int rld_value_seconds(const char *field, double v, rl_ns *out, rl_err *err)
{
    rl_ns ns = rl_ns_from_seconds(v);
    if (ns < 0)
        return rl_errf(err, -1, "%s: must be a number of seconds from 0 to 9200000000", field);
    *out = ns;
    return 0;
}

int rld_value_go_bool(const char *v)
{
    static const char *const yes[] = {"1", "t", "T", "true", "True", "TRUE"};
    static const char *const no[] = {"0", "f", "F", "false", "False", "FALSE"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(v, yes[i]) == 0)
            return 1;
        if (strcmp(v, no[i]) == 0)
            return 0;
    }
    return -1;
}

int rld_value_env_go_bool(const char *name, int def, int *out, rl_err *err)
{
    const char *v = getenv(name);
    *out = v && *v ? rld_value_go_bool(v) : def;
    if (*out < 0)
        return rl_errf(err, RL_EINVAL, "%s: must be true or false (1, t, true, TRUE, True, or "
                       "0, f, false, FALSE, False), not '%.64s'", name, v);
    return RL_OK;
}
