/*
 * pool.h - a pool of blocking hiredis connections to one Redis, with a deadline on every
 * call, the store's Lua scripts run as Redis Functions or by their SHA1, and the health of the
 * link.
 *
 * Redis Sentinel. With sentinels in the address, the pool asks them for the current primary
 * (SENTINEL get-master-addr-by-name, the sentinels in turn), opens connections only to a node
 * whose ROLE says master, and follows a failover by itself: a thread (sentinel.h) hears
 * +switch-master from every sentinel, and asks them all every 200 ms while the link is down,
 * and moves every connection to the new primary at once; a call that cannot reach the primary,
 * or that a demoted primary answers READONLY, makes the next connection ask the sentinels
 * again, within half its time (each sentinel a share of it); when none answers, the primary
 * they named last is tried. Nothing is ever answered from a replica.
 *
 * Pipelining. Concurrent calls share the pool's connections (a connection is not thread-safe,
 * so one thread at a time does a connection's I/O). A call goes to the first connection nobody
 * is using, or else joins the shortest queue: the caller that finds a connection idle becomes
 * its leader, writes every call queued on it in one write (a batch), reads the replies in
 * order and hands each to its caller, and makes the first caller queued meanwhile the next
 * leader. Each call is still one command or script in Redis: batching changes the system
 * calls, not what a call does. Every call finishes within the pool's timeout from its start:
 * waiting in the queue, connecting, and each read and write share that deadline; a reply not
 * in by the earliest deadline of the calls owed on a connection closes it, and those calls fail.
 *
 * Health. A call that cannot reach Redis (refused, reset, timed out) marks the link down; every
 * connection is then reopened before its next use. While the link is down, calls fail at once
 * without touching the network, except one probe at a time once the backoff has passed (0 after
 * the first failure, then 50 ms doubling up to 2 s); the first call that gets through marks the
 * link up again. rld_pool_probe lets housekeeping drive the probes when no requests come.
 */
#ifndef RLD_REDIS_POOL_H
#define RLD_REDIS_POOL_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "app/clock.h"
#include "conn.h"
#include "ratelimit.h"

#define RLD_MAX_SENTINELS 16

/* Redis Sentinel: the sentinels to ask where the primary named master is. */
typedef struct rld_sentinel {
    size_t n; /* 0: no sentinels (the address names Redis itself) */
    char host[RLD_MAX_SENTINELS][64];
    int port[RLD_MAX_SENTINELS];
    char master[128];
    char user[128]; /* the sentinels' own credentials, "" for none */
    char pass[256];
    rld_net_client_tls *tls; /* borrowed: the sentinels over TLS, NULL: cleartext */
} rld_sentinel;

/* Where Redis is: parsed from redis://[[user]:password@]host[:port][/db] (or rediss://, the
 * same over TLS). With sentinels, host and port are not used: the primary is the one the
 * sentinels name. */
typedef struct rld_redis_addr {
    char host[256];
    int port; /* 6379 by default */
    int db;   /* 0 by default */
    char user[128];
    char pass[256]; /* "" when no AUTH is sent */
    rld_sentinel sentinel;
    int tls_url; /* the URL said rediss:// */
    /* not NULL: every connection (to the data nodes, and to the sentinels) is TLS with this
     * context; borrowed: whoever set it (the store) frees it after the pools */
    rld_net_client_tls *tls;
} rld_redis_addr;

/* Parses a redis:// or rediss:// URL (tls is left NULL). RL_EINVAL with the reason in err. */
int rld_redis_parse_url(const char *url, rld_redis_addr *out, rl_err *err);
/* Parses "host:port" (an IPv6 address in brackets) into host (cap bytes) and *port. RL_EINVAL
 * with the reason in err, which starts with what (the field's name). */
int rld_redis_parse_hostport(const char *s, const char *what, char *host, size_t cap, int *port,
                             rl_err *err);

/* The server-side scripts, loaded on first use and again after NOSCRIPT (or, as Functions,
 * after "Function not found"). */
typedef enum rld_script {
    RLD_SCRIPT_DECIDE,
    RLD_SCRIPT_SETTLE,
    RLD_SCRIPT_RELEASE,
    RLD_SCRIPT_DUE,
    RLD_SCRIPT_HEARTBEAT,
    RLD_SCRIPT_QUOTA,
    RLD_SCRIPT_UNDO,
    RLD_SCRIPT_DUTY,
    RLD_NSCRIPTS
} rld_script;

typedef struct rld_pool rld_pool;

/* A pool of size connections (1..1024), opened lazily; calls last at most timeout_ms. Fails only
 * when out of memory (or, with sentinels, when the watching thread cannot start): an
 * unreachable Redis is a link that is down, not an error here. */
int rld_pool_new(const rld_redis_addr *addr, int timeout_ms, int size, rld_pool **out, rl_err *err);
/* Closes every connection and frees the pool. NULL is ok. */
void rld_pool_free(rld_pool *p);

/* Runs a script with argv[0..nkeys-1] as KEYS and the rest as ARGV. On RL_OK *reply is the
 * reply (not an error reply), which the caller frees with freeReplyObject. On RL_ESTORE (Redis
 * unreachable, too slow, or the script failed) err says why and nothing is returned. */
int rld_pool_eval(rld_pool *p, rld_script s, int nkeys, int argc, const char **argv,
                  const size_t *argvlen, redisReply **reply, rl_err *err);
/* The same for a plain command. */
int rld_pool_command(rld_pool *p, int argc, const char **argv, const size_t *argvlen,
                     redisReply **reply, rl_err *err);

/* Flags of rld_pool_exec. */
#define RLD_POOL_ASKING 1u       /* ASKING first, on the same connection (a Redis Cluster ASK) */
#define RLD_POOL_REPLY_ERRORS 2u /* an error reply is the reply (RL_OK), not a failure */

/* rld_pool_eval (s >= 0: an rld_script) or rld_pool_command (s < 0) with flags. */
int rld_pool_exec(rld_pool *p, int s, int nkeys, int argc, const char **argv,
                  const size_t *argvlen, unsigned flags, redisReply **reply, rl_err *err);

/* One call of rld_pool_exec_many: its keys and arguments, and what came of it. */
typedef struct rld_call {
    int nkeys, argc; /* argv[0..nkeys-1] are KEYS, the rest ARGV */
    const char **argv;
    const size_t *len;
    redisReply *reply; /* on RL_OK: the reply (not an error reply), freed by the caller */
    int rc;            /* what rld_pool_eval would have returned */
    rl_err err;        /* on RL_ESTORE: why */
} rld_call;

/* Runs script s for each of the n calls as rld_pool_eval would, written back to back on one
 * connection in one write and answered in order, so that n calls cost one round trip and one
 * wait. Redis runs each call atomically, one after the other; a call whose script Redis did
 * not have (restart, flush), or that met a closed connection, is made again on its own. */
void rld_pool_exec_many(rld_pool *p, rld_script s, rld_call *calls, size_t n);

/* Whether the store's larger scripts go as Redis Functions (FCALL of a library loaded once)
 * rather than EVALSHA: off (0) by default, on (1) when the store is configured so, and off
 * again for good when Redis refuses Functions (before Redis 7, or a user not permitted
 * FUNCTION and FCALL). A script's top level runs on every EVALSHA, the library's only once. */
void rld_pool_use_functions(rld_pool *p, int on);
int rld_pool_functions(rld_pool *p);

/* Puts the plug-ins' rule type ports (Lua text, see lua.h; NULL or "" for none) into the
 * scripts and the library. Call it before the first call that runs a script (the texts are read
 * without the pool's lock). RL_OK, or RL_ENOMEM leaving the scripts as they were. */
int rld_pool_set_ports(rld_pool *p, const char *ports, rl_err *err);

/* 1 while the link is up (the last attempt reached Redis), 0 while it is down. */
int rld_pool_up(rld_pool *p);
/* Calls that failed because of the store (including those refused at once while down). */
uint64_t rld_pool_errors(rld_pool *p);
/* Copies the message of the last call that failed because of the store ("" if none has). */
void rld_pool_last_error(rld_pool *p, char *buf, size_t len);
/* When the link is down and a probe is due, sends a PING as the probe. Returns rld_pool_up. */
int rld_pool_probe(rld_pool *p);

/* With sentinels: the primary the pool uses now ("host:port", "" before the sentinels named
 * one) and the failovers it has followed (+switch-master messages and changes of the address
 * the sentinels give). Without: the address, and 0. */
void rld_pool_primary(rld_pool *p, char *buf, size_t len);
uint64_t rld_pool_switches(rld_pool *p);

/* The calls written to Redis since the pool was made, and the writes (batches) that carried
 * them: calls / writes is how many calls a write carried on average. */
void rld_pool_counts(rld_pool *p, uint64_t *calls, uint64_t *writes);

/* Writes pre and then a command in Redis's protocol (an array of bulk strings, the bytes
 * redisFormatCommandArgv writes; lengths from len, or strlen when len is NULL) into out when
 * it fits in cap, or else into a buffer it allocates and returns in *heap (NULL otherwise; the
 * caller frees it). Returns the length written, or -1 when out of memory. */
long rld_resp_format(char *out, size_t cap, char **heap, const char *pre, size_t plen,
                     int argc, const char **argv, const size_t *len);

/* A new connection outside the pool (for a subscriber), authenticated and on the right
 * database, or NULL with the reason in err. The caller frees it with rld_rconn_free. */
rld_rconn *rld_pool_connect(rld_pool *p, int timeout_ms, rl_err *err);


/* Waits up to ms (-1: no limit) for what Redis pushes to the subscribed connection c and hands
 * each message's payload to fn. 1: wake_fd became readable (stop); -1: the connection failed;
 * 0: otherwise (call again). */
int rld_sub_read(rld_rconn *c, int wake_fd, int ms, void (*fn)(void *arg, const char *msg),
                 void *arg);

#endif
