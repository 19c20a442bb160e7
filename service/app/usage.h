/*
 * usage.h - a request's usage in the configuration's dimensions, read from JSON where the
 * configuration is known:
 *
 *   "usage": {"input_tokens": 1200, "output_tokens": 4000}
 *
 * Each member names a declared dimension (rl_config.dims) and gives an amount from 0 to 10^12
 * (fixed point, values.h). Errors name the member: "usage.tokens: unknown dimension (declared:
 * input_tokens, output_tokens)".
 */
#ifndef RLD_APP_USAGE_H
#define RLD_APP_USAGE_H

#include <jansson.h>

#include "ratelimit.h"

/* Reads the object o (the member called field) into *out. Returns 0, or -1 with err. */
int rld_usage_read(const rl_config *cfg, const json_t *o, const char *field, rl_usage *out,
                   rl_err *err);

#endif
