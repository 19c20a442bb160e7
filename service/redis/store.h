/*
 * store.h - the fleet store: per-key state, reservations and held concurrency slots kept
 * in Redis, so that several ratelimitd instances behind a load balancer enforce one set of
 * limits as a single instance would.
 *
 * Every decision is one Lua script run atomically by Redis (both phases, every rule of every
 * level); settling, releasing and expiring a reservation are scripts too. The scripts port the
 * built-in rule types' integer arithmetic exactly (service/redis/lib.lua), so a trace gives the
 * same decisions, waits and balances as the in-memory store. Rule types without state (a deny
 * list, stateless plug-ins) are decided here in C; a plug-in type with state cannot live in
 * Redis and is refused (RL_EINVAL).
 *
 * Clock: the scripts read Redis TIME, one clock for the whole fleet, unless the store was made
 * with manual_clock, when the caller's now is used (and must not be negative).
 *
 * Keys (prefix P): P<level>":"<slot>[.<shard>]":"<key> per rule state, P"r:"<id> per
 * reservation, P"resv" (the reservations by expiry), P"fleet" (heartbeats), P"quotas" (see
 * quota_sync.h).
 *
 * Redis Cluster (options.cluster): a state key ends in "{"<level>":"<key>"}" instead of <key>
 * ("{"<level>"."<shard>":"<key>"}" for a shard of a sharded level), so that every state of one
 * (level, key), or of one of its shards, shares a slot (and shards spread over the primaries); a reservation is P"r:"<id>"{"<n>"}"
 * beside its part of the index P"resv{"<n>"}" (n: 0..15, from the id). A decision whose states
 * lie in one slot is one script; otherwise one script per slot, in the order of the levels,
 * each taking only when its own rules fit; when a later one denies, what the earlier ones took
 * is given back (undo.lua: the refund a settlement makes, or the release of held slots) and
 * they are asked again for their status. A reservation is recorded after its takes, and its
 * settlement and release mark it first and then reach each slot of its states. Each state key expires when its state is indistinguishable from a new key's;
 * see docs/redis.md.
 *
 * Failure: when Redis is unreachable or slower than timeout_ms, decide, settle and release
 * return RL_ESTORE after at most timeout_ms (a decision may or may not have been applied when
 * a reply timed out). Wrap the store in rld_fallback_store_new (fallback.h) to decide per
 * level instead. The pool reconnects by itself with backoff; tick() drives the reconnection and
 * the heartbeat, so call it regularly (ten times a second).
 *
 * The process should ignore SIGPIPE (a write to a connection Redis closed would kill it);
 * rld_redis_store_new sets SIGPIPE to SIG_IGN when it is still at its default.
 */
#ifndef RLD_REDIS_STORE_H
#define RLD_REDIS_STORE_H

#include <stdint.h>

#include "app/settings.h"
#include "ratelimit.h"
#include "ratelimit_store.h"
#include "pool.h"

typedef struct rld_redis_options {
    const char *url;                /* redis://[[user]:password@]host[:port][/db] */
    const rld_redis_addr *addr;     /* instead of url when not NULL (copied): where Redis is,
                                       with sentinels when addr->sentinel.n > 0 */
    const char *prefix;             /* in front of every key, "" allowed; NULL: "rl:" */
    int timeout_ms;                 /* most a call waits on Redis (1..60000) */
    int pool;                       /* connections (1..1024) */
    int manual_clock;               /* 1: use the caller's now instead of Redis TIME */
    unsigned shards[RL_MAX_LEVELS]; /* per level index: 0 or 1 is one key; N > 1 splits the
                                       level's state into N keys of 1/N of every quota */
    long ttl_floor_ms; /* least TTL given to any key written, 0 for none. TTLs follow the clock
                          the store decides with; with a manual clock that is not real time, so
                          tests that replay traces set a floor that outlasts them. */
    const rld_redis_addr *cluster; /* Redis Cluster seed nodes (host and port; user and pass of
                                      the first for every node) instead of url/addr, or NULL */
    size_t ncluster;               /* how many (1..RLD_CLUSTER_MAX_NODES), 0 for no cluster */
    int functions; /* 1: call the decision, settlement, release and expiry scripts as one Redis
                      Functions library (FCALL) where Redis has Functions, EVALSHA where it
                      refuses them; 0: EVALSHA */
    int lease_slice[RL_MAX_LEVELS];  /* per level index: 0 no lease; else the amount a lease
                                        takes from each rule of the level (redis.md, "Hot keys:
                                        leases") */
    int lease_ttl_ms[RL_MAX_LEVELS]; /* how long a lease is held at most */
    int deny_cache; /* 1: answer the denials Redis gave again here until they lapse, forgetting
                       them when capacity is given back anywhere (denycache.h) */
    /* not NULL: every connection is TLS with these files (net.h); NULL: TLS only when the URL
     * is rediss://, then with the system's CAs and no client certificate */
    const rld_net_client_tls_files *tls;
} rld_redis_options;

/* A new Redis store for rl_limiter_new, which takes it. Connections open lazily: an unreachable
 * Redis is not an error here (the store starts down and keeps trying). Errors: RL_EINVAL for a
 * bad URL or option, RL_ENOMEM. The configuration is checked when the limiter attaches: a level
 * or tier using a plug-in rule type with state is refused there. */
int rld_redis_store_new(const rld_redis_options *opt, rl_store **out, rl_err *err);

/* What the daemon reports about the store. */
typedef struct rld_redis_health {
    int up;          /* 1 while Redis answers */
    uint64_t errors; /* calls that failed because of Redis, those refused while down included */
    unsigned peers;  /* live instances counted by heartbeat, this one included; 0 before the
                        first heartbeat got through */
    char last_error[256]; /* why the last failed call failed, "" when none has */
    uint64_t calls, writes; /* calls written to Redis, and the writes that carried them */
} rld_redis_health;

/* Fills out for a store made by rld_redis_store_new (borrowed; alive while its limiter is). */
void rld_redis_store_health(rl_store *st, rld_redis_health *out);
/* For tests: mode 1 makes the decision script skip its fast path (service/redis/fast.lua) and
 * decide by its general one, so that both can be compared over the same trace; mode 2 makes
 * it answer by its fast path only (a decision the fast path declines fails), so that a test
 * can see the fast path taken; 0, both as in service. Set before use. */
void rld_redis_store_general(rl_store *st, int mode);

/* Whether the store caches denials (options.deny_cache); the decisions of level it answered
 * from the cache; whether the cache is subscribed (answering); and the announcements of
 * give-backs and quota changes it has applied. */
int rld_redis_store_deny_cache(rl_store *st);
uint64_t rld_redis_store_deny_answered(rl_store *st, size_t level);
int rld_redis_store_deny_live(rl_store *st);
uint64_t rld_redis_store_deny_messages(rl_store *st);
/* A leased level's figures: the amount its lease holds unspent now, what leases gave back to
 * Redis, and the decisions it admitted from a lease without calling Redis for the level. */
typedef struct rld_redis_lease_stats {
    int64_t held;
    uint64_t returned, local;
} rld_redis_lease_stats;
void rld_redis_store_lease_stats(rl_store *st, size_t level, rld_redis_lease_stats *out);
/* Whether level is leased. */
int rld_redis_store_leased(rl_store *st, size_t level);

/* The last heartbeat's count of live instances (0: not known yet). ctx is the rl_store; the
 * signature fits rld_fallback_options.peers. */
unsigned rld_redis_store_peers(void *ctx);

/* The daemon's store for "store": {"type": "redis", ...}: a Redis store wrapped in a fallback
 * store (fallback.h) that follows each level's on_store_error, dividing the local mode's
 * rules by fleet_size or else by the live instances the heartbeat counts. *out is for
 * rl_limiter_new; *redis (may be NULL) borrows the Redis store inside it, for
 * rld_redis_store_health and the quota functions. manual_clock as in rld_redis_options. */
int rld_redis_store_open(const rld_settings *set, int manual_clock, rl_store **out,
                         rl_store **redis, rl_err *err);

/* Where the settings say Redis is: store.url, or store.sentinel with store.username, password
 * and db for the data nodes. RL_EINVAL naming the field ("store.sentinel.nodes[1]: ...", a url
 * given with sentinel, credentials given outside the URL without sentinel). */
int rld_redis_store_addr(const rld_settings *set, rld_redis_addr *out, rl_err *err);
/* Whether and how the store speaks TLS: store.tls of the configuration; without it
 * envoyproxy/ratelimit's variables (REDIS_TLS true, REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT,
 * REDIS_TLS_CLIENT_KEY, REDIS_TLS_SKIP_HOSTNAME_VERIFICATION); a rediss:// URL (addr->tls_url)
 * turns it on too. *on 0: cleartext. The files are named in messages as they were given (the
 * field or the variable); the strings are borrowed from set and the environment. RL_EINVAL
 * naming the field or variable at fault. */
int rld_redis_store_tls(const rld_settings *set, const rld_redis_addr *addr,
                        rld_net_client_tls_files *f, int *on, rl_err *err);

/* The checks attaching to a limiter makes, without a store or a connection: RL_EINVAL naming
 * the rule when cfg uses a rule type whose state this store cannot hold (on a Redis Cluster,
 * cluster != 0: or cannot give back). For --check-config. */
int rld_redis_store_check_config(const rl_config *cfg, int cluster, rl_err *err);
/* RL_EINVAL, err naming where[i], when a rule of rules has a type whose state this store cannot
 * hold (a plug-in type with state); RL_OK otherwise. st is attached (its limiter exists). For
 * checking a custom quota before it is stored. */
int rld_redis_store_check_rules(rl_store *st, const rl_rules *rules, const char *where,
                                rl_err *err);

/* The store's pool (NULL on a cluster), its cluster router (NULL otherwise) and key prefix.
 * Borrowed. */
rld_pool *rld_redis_store_pool(rl_store *st);
struct rld_cluster *rld_redis_store_cluster(rl_store *st);
const char *rld_redis_store_prefix(rl_store *st);

/* Runs a script (s >= 0: an rld_script, its nkeys keys first in argv) or a command (s < 0, its
 * key argv[1]) where its key lives: the one Redis, or on a cluster the primary serving the
 * key's slot. argvlen NULL: the strings' lengths (at most 16 of them). As rld_pool_exec
 * otherwise; for the quota functions (quota_sync.h). */
int rld_redis_store_call(rl_store *st, int s, int nkeys, int argc, const char **argv,
                         const size_t *argvlen, redisReply **reply, rl_err *err);
/* A new connection outside the pool (for a subscriber): to the one Redis, or on a cluster to
 * the primary serving key's slot (a message published on any node reaches every node's
 * subscribers). NULL with the reason in err. The caller frees it with rld_rconn_free. */
rld_rconn *rld_redis_store_connect(rl_store *st, const char *key, int timeout_ms, rl_err *err);

#endif
