/*
 * denycache.h - the denials an instance got from Redis, answered again here until they lapse
 * (store.deny_cache; docs/redis.md, "The cache of denials").
 *
 * An entry is one rule's state in Redis (its state key, which names the level, the rule's
 * position and the key) denied a need with a wait: until that wait has passed on this
 * instance's clock, a request whose item names the same state key, a rule of the same
 * fingerprint (type, parameters, name, options) and a need at least as large is denied too,
 * for nothing but a give-back can shorten the wait (refunds, releases and undos announce the
 * states they gave back to on the channel P"deny"; quota changes on P"quotas"). A follower
 * thread subscribes to both and forgets what they name (everything for a quota change, or for a
 * message on P"deny" that is not a list of keys, such as "reset"); while it is not subscribed
 * the cache neither answers nor learns, and it starts empty at every subscription.
 *
 * Fixed size (DC_SETS sets of DC_WAYS entries, the entry that lapses first evicted), one mutex
 * per set. An insertion carries a ticket taken before its call went to Redis: a give-back
 * announced for the set meanwhile voids it, so a denial Redis made before a give-back is never
 * learnt after it.
 */
#ifndef RLD_REDIS_DENYCACHE_H
#define RLD_REDIS_DENYCACHE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "conn.h"
#include "ratelimit.h"
#include "ratelimit_rule.h"

#define DC_SETS 512
#define DC_WAYS 8
#define DC_KEY_MAX 160 /* longer state keys are not cached */

#define DC_ITEMS 4 /* a decision of at most this many rules keeps every rule's status */

typedef struct rld_denycache rld_denycache;

/* What a denial answered, kept with it: the rule's wait and status, and, for a decision of at
 * most DC_ITEMS rules, every rule's status under the decision's signature (a hash of its rules'
 * keys, rules and amounts), so that the same decision asked again gets the same answer's
 * shape. */
typedef struct rld_denial {
    rl_ns wait;
    int has_st;
    rl_rule_status st;
    uint64_t sig; /* 0: the decision's statuses are not kept (or, from a lookup, do not apply) */
    size_t n;     /* the decision's rules */
    int has[DC_ITEMS];
    rl_rule_status all[DC_ITEMS];
} rld_denial;

/* A new, empty cache that answers nothing until rld_denycache_follow has subscribed; NULL when
 * out of memory. */
rld_denycache *rld_denycache_new(void);
/* Stops the follower, if any, and frees c. NULL is ok. */
void rld_denycache_free(rld_denycache *c);

/* Starts the follower thread: connect(ctx) gives it a new connection (NULL: try again later,
 * with backoff), on which it subscribes to deny_channel and quota_channel (copied). RL_ENOMEM
 * when the thread cannot start. */
int rld_denycache_follow(rld_denycache *c, rld_rconn *(*connect)(void *ctx), void *ctx,
                         const char *deny_channel, const char *quota_channel, rl_err *err);
/* Whether the follower is subscribed (the cache answers and learns). */
int rld_denycache_live(rld_denycache *c);

/* The fingerprint of a rule: equal for rules that decide alike and are reported alike. */
uint64_t rld_denycache_fingerprint(const rl_rule *r);
/* The hash of a state key. */
uint64_t rld_denycache_hash(const char *key, size_t len);

/* Before a call to Redis that may deny the state key of hash h: the ticket to insert with
 * (0 while the cache is not live: the insertion will be refused). */
uint64_t rld_denycache_ticket(rld_denycache *c, uint64_t h);
/* Learns that key (hash h) under a rule of fingerprint fp denied need at now with dn->wait
 * (> 0, below RL_WAIT_NEVER) and what else dn holds. Refused when ticket is stale. */
void rld_denycache_insert(rld_denycache *c, uint64_t ticket, uint64_t h, const char *key,
                          size_t len, uint64_t fp, rl_fp need, rl_ns now, const rld_denial *dn);
/* Whether a request needing need at now of key (hash h) under a rule of fingerprint fp, in a
 * decision of signature sig, is denied by an entry: 1 with *out the entry's denial brought to
 * now (the wait left; reset_after and next counting down; out->sig 0 unless the entry kept the
 * statuses of a decision of signature sig), else 0. */
int rld_denycache_lookup(rld_denycache *c, uint64_t h, const char *key, size_t len, uint64_t fp,
                         rl_fp need, rl_ns now, uint64_t sig, rld_denial *out);
/* Forgets key's entry (it was given back to); voids the tickets of its set. */
void rld_denycache_forget(rld_denycache *c, const char *key, size_t len);
/* Forgets every entry; voids every ticket. */
void rld_denycache_clear(rld_denycache *c);

/* Counts a request of level answered here, and reads the count; and how many messages of
 * give-backs the follower has applied (for the tests). */
void rld_denycache_count(rld_denycache *c, size_t level);
uint64_t rld_denycache_answered(rld_denycache *c, size_t level);
uint64_t rld_denycache_messages(rld_denycache *c);

#endif
