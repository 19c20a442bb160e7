/*
 * testutil.h - helpers shared by the tests: limiters from JSON text, requests from short
 * strings, and times in seconds.
 */
#ifndef RL_TESTUTIL_H
#define RL_TESTUTIL_H

#include <check.h>

#include "app/rules_json.h"
#include "config/config.h"
#include "ratelimit.h"

/* Seconds (a decimal literal) to nanoseconds, exactly for the values tests use. */
#define S(x) ((rl_ns)((x) * 1e9 + ((x) >= 0 ? 0.5 : -0.5)))
/* An amount to fixed point. */
#define FP(x) ((rl_fp)((x) * 1e6 + ((x) >= 0 ? 0.5 : -0.5)))

/* A limiter from configuration text; fails the test with the loader's message on error. The
 * registry is created per limiter and freed by tu_free. */
rl_limiter *tu_limiter(const char *json);
/* The same over a registry the caller prepared (taken over: tu_free frees it). */
rl_limiter *tu_limiter_with(rl_registry *reg, const char *json);
void tu_free(rl_limiter *lim);
/* The error message of a configuration that must be refused (fails the test if it loads). */
const char *tu_config_error(const char *json);

/* Decides a request whose descriptors are "name=value,name=value". Fails the test on an error
 * return. Returns allowed (1/0); d is filled and released (its key pointers stay usable until
 * the next call on the same thread). */
int tu_acquire(rl_limiter *lim, const char *keys, double cost, rl_ns now, rl_decision *d);
/* The same with flags and priority. */
int tu_acquire_ex(rl_limiter *lim, const char *keys, double cost, rl_ns now, unsigned flags,
                  int64_t priority, rl_decision *d);
/* The error code and message of a request that must be refused. */
int tu_acquire_err(rl_limiter *lim, const char *keys, double cost, rl_ns now, rl_err *err);

/* The remaining balance (in units) of the first rule with a status of the named level. */
/* d's status of applied rule i (rl_decision_status); fails the test when it has none. */
const rl_rule_status *tu_status(const rl_decision *d, size_t i);
double tu_remaining(const rl_limiter *lim, const rl_decision *d, const char *level);
/* "<level>: <rule>" of the blocking rule, or "" when allowed. */
const char *tu_blocked_by(const rl_limiter *lim, const rl_decision *d);

/* Runs a suite and returns the number of failures (for main). */
int tu_run(Suite *s);

#endif
