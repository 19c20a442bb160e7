/*
 * quota_sync.h - the tiered level's quotas kept in Redis, so that a change made through any
 * instance applies on every instance at once and outlives all of them.
 *
 * The hash P"quotas" (P the store's prefix) maps a key to its quota as JSON text, either
 * {"tier": "<name>"} or {"rules": [<rule objects as in the configuration file>]}. Every change
 * is published on the channel P"quotas" with the key as the message. A follower (one thread per
 * instance) applies each message to its limiter (rl_quota_set, or back to the configuration's
 * quota for that key, or rl_quota_clear), and reloads the whole hash each time it subscribes,
 * so that changes made while Redis was out of reach are not missed. The hash has no TTL: it is
 * configuration, not state.
 */
#ifndef RLD_REDIS_QUOTA_SYNC_H
#define RLD_REDIS_QUOTA_SYNC_H

#include <jansson.h>

#include "ratelimit.h"
#include "ratelimit_store.h"

/* Stores key's quota and announces it: tier names a tier, or rules (borrowed) is the JSON array
 * of rule objects the client gave; exactly one is non-NULL. The caller validates it first (an
 * instance that cannot apply a stored quota keeps what it had). redis is the store from
 * rld_redis_store_new. RL_ESTORE when Redis is unavailable, RL_EINVAL for bad arguments. */
int rld_redis_quota_put(rl_store *redis, const char *key, const char *tier, const json_t *rules,
                        rl_err *err);
/* Deletes key's quota and announces it; *existed (may be NULL) says whether there was one. */
int rld_redis_quota_delete(rl_store *redis, const char *key, int *existed, rl_err *err);
/* Makes lim's quotas those of Redis: every stored quota is applied; a key lim has that Redis
 * does not goes back to its quota in the configuration, or to the default tier. Entries that
 * cannot be applied are skipped; *skipped (may be NULL) counts them. */
int rld_redis_quota_sync(rl_store *redis, rl_limiter *lim, size_t *skipped, rl_err *err);

typedef struct rld_quota_follower rld_quota_follower;

/* Starts a thread that subscribes to the changes and applies them to lim (synchronising in
 * full at every (re)subscription; reconnecting with backoff). Stop it with
 * rld_redis_quota_unfollow before freeing lim. */
int rld_redis_quota_follow(rl_store *redis, rl_limiter *lim, rld_quota_follower **out, rl_err *err);
/* Applies key's quota as Redis holds it now to the follower's limiter, one at a time with the
 * follower's own updates, so that changes racing through several instances end, everywhere, in
 * the value Redis kept last. For the instance that just stored a change (rld_redis_quota_put or
 * _delete) to have it in force before it answers. When Redis cannot be read, written (the
 * value just stored, as the hash holds it: {"tier": ...} or {"rules": [...]}; NULL when it was
 * deleted) is applied instead; the next full synchronisation corrects it if needed. Returns
 * the result of applying (RL_EINVAL when the quota cannot be applied). */
int rld_redis_quota_refresh(rld_quota_follower *f, const char *key, const char *written,
                            rl_err *err);
/* Makes lim the follower's limiter (a reload put it in force; the one before is not touched
 * again) and synchronises it in full now (rld_redis_quota_sync's skipped). When Redis cannot
 * be read, returns the error and the thread synchronises in full as soon as it can. */
int rld_redis_quota_retarget(rld_quota_follower *f, rl_limiter *lim, size_t *skipped,
                             rl_err *err);
/* Stops and frees the follower. NULL is ok. */
void rld_redis_quota_unfollow(rld_quota_follower *f);
/* Changes the follower has applied so far (messages and full synchronisations). */
uint64_t rld_redis_quota_applied(rld_quota_follower *f);

#endif
