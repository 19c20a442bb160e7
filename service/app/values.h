/*
 * values.h - a request's amounts and times, converted once where they enter ratelimitd (a
 * JSON body, a request header, a protobuf field) into the core's units: fixed-point amounts
 * (rl_fp, millionths) and integer nanoseconds (rl_ns). Each kind of value has one range and
 * one message, whatever the edge; layers further in take the converted values as checked.
 *
 * Every function returns 0 with *out set, or -1 with err (may be NULL) holding
 * "<field>: must be ..." and *out untouched. field names the value as its edge spells it
 * ("cost", "X-RateLimit-Cost", "hits_addend").
 */
#ifndef RLD_APP_VALUES_H
#define RLD_APP_VALUES_H

#include <stddef.h>
#include <stdint.h>

#include "ratelimit.h"

/* A request's cost: a positive number that is at least one millionth once rounded to fixed
 * point, at most 10^12. NaN (what an edge passes for "not a number") is refused too. */
int rld_value_cost(const char *field, double v, rl_fp *out, rl_err *err);
/* The same written as decimal text ("3", "2.5"): digits, an optional point and at most six
 * decimals, no sign, no exponent, converted exactly (no rounding through double). */
int rld_value_cost_text(const char *field, const char *s, size_t n, rl_fp *out, rl_err *err);
/* The same as a count of whole units (a protobuf integer): 1 to 10^12. */
int rld_value_cost_units(const char *field, uint64_t n, rl_fp *out, rl_err *err);
/* An amount that may be zero (a settlement's actual cost): 0 to 10^12, rounded to fixed
 * point. */
int rld_value_amount(const char *field, double v, rl_fp *out, rl_err *err);
/* A time in seconds since the epoch of the clock in use: 0 to 9.2e9 (inside int64 ns). */
int rld_value_seconds(const char *field, double v, rl_ns *out, rl_err *err);
/* A Go boolean as envoyproxy/ratelimit reads its variables (strconv.ParseBool): 1 or 0, -1
 * when v is none of its spellings (1, t, T, true, True, TRUE and 0, f, F, false, False,
 * FALSE). */
int rld_value_go_bool(const char *v);
/* The environment variable name as a Go boolean into *out (unset or empty: def); RL_EINVAL
 * naming it when it is not one, as envoyproxy/ratelimit refuses to start. */
int rld_value_env_go_bool(const char *name, int def, int *out, rl_err *err);

#endif
