/*
 * model_headers.h - the rate-limit header fields of the model APIs, for clients written
 * against them (the official SDKs, agents that read them to pace themselves), beside the IETF
 * RateLimit fields (render.h):
 *
 *   OpenAI      x-ratelimit-limit-requests: 60        x-ratelimit-limit-tokens: 150000
 *               x-ratelimit-remaining-requests: 59    x-ratelimit-remaining-tokens: 149984
 *               x-ratelimit-reset-requests: 1s        x-ratelimit-reset-tokens: 6m0s
 *   Anthropic   anthropic-ratelimit-requests-limit / -remaining / -reset (RFC 3339), the same
 *               for tokens, input-tokens and output-tokens
 *
 * Each family comes from the most restrictive of the applied rules that count it (the least
 * remaining; on a tie, the longest reset), shadow rules left out: requests from rules counting
 * requests; tokens from rules counting any declared dimension (or cost, in a configuration
 * that declares none); input-tokens and output-tokens from rules counting the dimensions named
 * input_tokens and output_tokens. A family no applied rule counts is left out. Limits and
 * remaining amounts are whole units, rounded down, never below 0; resets are when the rule is
 * back to full: a duration as OpenAI writes them ("20ms", "1s", "1.5s", "6m0s", "1h0m0s"),
 * rounded up to the millisecond, or the time as RFC 3339 in UTC rounded up to the second.
 */
#ifndef RLD_APP_MODEL_HEADERS_H
#define RLD_APP_MODEL_HEADERS_H

#include <stddef.h>

#include "ratelimit.h"

#define RLD_MODEL_HEADERS_OPENAI 1
#define RLD_MODEL_HEADERS_ANTHROPIC 2

/* One header field: its name (static) and value. */
typedef struct rld_field {
    const char *name;
    char value[40];
} rld_field;

/* The most fields rld_model_headers writes. */
#define RLD_MODEL_FIELDS 18

/* Writes the fields of the APIs in which (RLD_MODEL_HEADERS_* bits) for decision d into out
 * (room for RLD_MODEL_FIELDS); returns how many. d's statuses are read (rl_decision_status). */
size_t rld_model_headers(unsigned which, const rl_config *cfg, const rl_decision *d,
                         rld_field *out);
/* A duration as OpenAI writes it, rounded up to the millisecond ("0s" for 0). */
size_t rld_go_duration(char *buf, size_t n, rl_ns ns);

#endif
