/*
 * quotas.h - quotas of the tiered level set at run time (PUT/DELETE /quota/<user>), kept in the
 * configuration's quota_file so that they survive a restart.
 *
 * The file holds the run-time overrides only, applied at start over the configuration's own
 * "quotas": {"bob": "enterprise", "carol": {"rules": [...]}, "alice": null}, where null means
 * "returned to the default tier" (alice may have a quota in the configuration). It is rewritten
 * whole on every change, atomically: a temporary file in the same directory, fsync, rename,
 * fsync of the directory. A change is written before it is applied, so a change that could not
 * be written is not applied either.
 */
#ifndef RLD_APP_QUOTAS_H
#define RLD_APP_QUOTAS_H

#include <jansson.h>
#include <pthread.h>

#include "ratelimit.h"

typedef struct rld_quotas {
    char *path;          /* NULL: changes are kept in memory only */
    json_t *overrides;   /* user -> tier name | {"rules": [...]} | null */
    pthread_mutex_t mu;  /* one change at a time, file and limiter in step */
} rld_quotas;

/* Reads path (NULL: no file; a missing file: no overrides yet, and its directory is created)
 * and applies its overrides to lim. On failure returns an error with err naming the file and
 * the entry; lim may then hold some of the overrides (the caller gives up on it). */
int rld_quotas_open(rld_quotas *q, const char *path, rl_limiter *lim, rl_registry *reg,
                    rl_err *err);
/* For a reload without a quota file: the overrides set at run time in from (PUT /quota),
 * applied to lim, become q's. Errors as rld_quotas_open (an override whose tier is gone). */
int rld_quotas_carry(rld_quotas *q, const rld_quotas *from, rl_limiter *lim, rl_registry *reg,
                     rl_err *err);
/* Frees what q holds. */
void rld_quotas_close(rld_quotas *q);

/* Why user cannot be a key (NULL when it can): "must not be empty", ... */
const char *rld_user_problem(const char *user);

/* A PUT /quota/<user> body ({"tier": name} or {"rules": [...]}) checked against lim's
 * configuration. */
typedef struct rld_quota_body {
    json_t *value;    /* new reference: the tier name as a JSON string, or {"rules": [...]}
                         with the rules as configured (every parameter written out) */
    const char *tier; /* borrowed from value; NULL for rules */
    rl_rules *rules;  /* one reference; NULL for a tier */
} rld_quota_body;

/* Parses and checks a PUT body for user; changes nothing. RL_EINVAL with err naming the field
 * ("tier: unknown tier ...", "rules[0].capacity: ...", "user: ..."); out then holds nothing.
 * On success free out with rld_quota_body_clear. */
int rld_quota_body_parse(rl_limiter *lim, rl_registry *reg, const char *user, const char *body,
                         size_t len, rld_quota_body *out, rl_err *err);
/* Drops what b holds and empties it. */
void rld_quota_body_clear(rld_quota_body *b);

/* Sets user's quota from a PUT body ({"tier": name} or {"rules": [...]}). RL_EINVAL with
 * err naming the field for a bad body or user, RL_EIO when the file could not be written;
 * nothing changes then. */
int rld_quotas_put(rld_quotas *q, rl_limiter *lim, rl_registry *reg, const char *user,
                   const char *body, size_t len, rl_err *err);
/* Returns user to the default tier. RL_EIO when the file could not be written. */
int rld_quotas_delete(rld_quotas *q, rl_limiter *lim, const char *user, rl_err *err);
/* A new JSON object {"user", "tier" (name or null), "rules": [...]} of user's quota in force,
 * or NULL when no level is tiered. */
json_t *rld_quota_to_json(rl_limiter *lim, const char *user);

#endif
