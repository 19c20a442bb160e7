/*
 * yamlutil.h - helpers for the tests of the YAML configuration: a matcher and limiter from
 * YAML text, and rate limit requests from short strings.
 */
#ifndef RL_YAMLUTIL_H
#define RL_YAMLUTIL_H

#include "ratelimit.h"
#include "grpc/rls_yaml.h"

typedef struct yt {
    rl_registry *reg;
    rld_yrls *y;
    rl_limiter *lim;
    rld_ystatus st[16];
    rld_ycode overall;
} yt;

/* A matcher over the YAML text (named "test.yaml"), its limiter on store (NULL: memory).
 * Fails the test when the text is refused. */
void yt_open(yt *t, const char *yaml, rl_store *store);
/* The same with the levels (and tiers) of a JSON configuration decided beside the YAML. */
void yt_open_beside(yt *t, const char *yaml, const char *json, rl_store *store);
void yt_close(yt *t);
/* The message for YAML text that must be refused (named "bad.yaml"). */
const char *yt_refused(const char *yaml);

/* Asks at now (seconds) for domain with descriptors "k=v,k=v; k=v" (';' between descriptors);
 * a descriptor may end in " @h<N>" (its own hits_addend) and " @o<N>/<UNIT>" (a limit
 * override). Fails the test on an error return. Returns the overall code; t->st[i] holds the
 * statuses. */
rld_ycode yt_ask(yt *t, const char *domain, double now, unsigned hits_addend, const char *spec);
/* The error message of a request that must be refused. */
const char *yt_ask_err(yt *t, const char *domain, const char *spec);

#endif
