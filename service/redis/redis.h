/*
 * redis.h - the daemon over the Redis store ("store": {"type": "redis", ...}): the store stack
 * opened from the settings, the tier quotas kept in Redis for the whole fleet, and what
 * /healthz and /metrics say about the store.
 *
 * Quotas. With Redis the hash P"quotas" is the fleet's source of truth (quota_sync.h):
 * PUT and DELETE /quota/<user> write it (and announce the change), and every instance, the
 * one that took the request included, applies what Redis holds; quota_file is not used. A
 * change Redis cannot take is refused (RL_ESTORE, 503) and changes nothing.
 *
 * Life: rld_redis_open before rl_limiter_new (which takes the store), rld_redis_start once
 * the limiter exists, rld_redis_free before rl_limiter_free.
 */
#ifndef RLD_REDIS_H
#define RLD_REDIS_H

#include <stddef.h>

#include "app/buf.h"
#include "app/parts.h"
#include "app/settings.h"
#include "ratelimit.h"
#include "ratelimit_store.h"

typedef struct rld_redis rld_redis;

/* Opens the Redis store stack for set (rld_redis_store_open: the Redis store inside the
 * fallback store that follows each level's on_store_error). *store is for rl_limiter_new,
 * which takes it; *out borrows it and is usable once the limiter owns it. Nothing connects
 * yet. RL_EINVAL for a bad URL or option, RL_ENOMEM; nothing is returned then. */
int rld_redis_open(const rld_settings *set, int manual_clock, rl_store **store, rld_redis **out,
                   rl_err *err);
/* Brings lim's quotas in line with Redis now and starts following changes. A Redis that cannot
 * be reached is not an error: it is logged, and the follower synchronises in full as soon as
 * Redis answers. RL_ENOMEM (or RL_EIO) when the follower cannot start. */
int rld_redis_start(rld_redis *f, rl_limiter *lim, rl_err *err);
/* Stops the follower and frees f; call before freeing the limiter. NULL is ok. */
void rld_redis_free(rld_redis *f);

/* The fleet as the app's store (app/parts.h), self an rld_redis usable once rld_redis_start
 * has run:
 *   check_config  whether the Redis store can hold a configuration a reload would put in
 *                 force (rld_redis_store_check_config)
 *   quota_put     PUT /quota/<user>: checks the body (rld_quota_body_parse, and that the
 *                 Redis store can hold its rules), stores it in Redis and has it in force here
 *                 before returning
 *   quota_delete  DELETE /quota/<user>: removes the stored quota, or stores the default tier
 *                 when the configuration gives user a quota of its own
 *   health        the /healthz body: {"status": "ok" | "degraded", "store": "redis",
 *                 "store_up", "store_errors", "peers", "fleet_size", "last_error"}
 *   metrics       ratelimit_store_up, ratelimit_store_errors_total,
 *                 ratelimit_store_fallback_total{level,mode}, ratelimit_store_peers,
 *                 ratelimit_redis_calls_total, ratelimit_redis_writes_total,
 *                 ratelimit_deny_cache_total{level} (decisions denied from the cache of
 *                 denials, store.deny_cache)
 *   describe      "redis store 127.0.0.1:6379/0, prefix \"rl:\"" (never the password); usable
 *                 from rld_redis_open on */
extern const rld_app_store_ops rld_redis_store_ops;

/* The fleet as a part of the app (app/parts.h, self an rld_redis once rld_redis_start has
 * run): a reload puts its limiter in force over the same store (rl_limiter_new_over), and
 * reload makes the quota follower apply the quotas Redis holds to it, and follow them there. */
extern const rld_part_ops rld_redis_part_ops;

/* Claims an alert for the whole fleet (app/alerts.h's rld_alerts_claim_fn, self an rld_redis):
 * SET P"alert:"<name> 1 NX PX ttl_ms. 1 when this instance won it, 0 when another instance
 * has, -1 (logged) when Redis did not answer. */
int rld_redis_alert_claim(void *self, const char *name, int64_t ttl_ms);

#endif
