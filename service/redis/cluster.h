/*
 * cluster.h - routing over Redis Cluster, on hiredis (0.14 has no cluster support, and
 * Debian 12 packages no cluster client): the slot map, a pool of connections per primary, and
 * the redirections a cluster answers with while it reshards or fails over.
 *
 * A key's slot is CRC16 (XMODEM) of the key mod 16384, or of its hash tag: the text between the
 * first "{" and the next "}" when that is not empty ("{user:1}.a" and "{user:1}.b" share a
 * slot). The map comes from CLUSTER SLOTS, asked of a known node (the seeds at first). A call
 * goes to the primary the map names for its slot, through that node's pool (pool.h: a
 * deadline per call, health, scripts loaded on first use):
 *   - MOVED <slot> <host:port>: the slot has moved for good. The slot is pointed there at once,
 *     the whole map is asked for again on the next call, and the call is sent there. A MOVED
 *     after another redirection of the same call waits a little first (1 ms, 2 ms, ...): while
 *     a slot changes hands the nodes may disagree for a moment and send it back and forth.
 *   - ASK <slot> <host:port>: the slot is migrating and this key is already on the target. The
 *     call is sent there once, preceded by ASKING; the map does not change.
 *   - TRYAGAIN (a multi-key call while its keys are split by a migration): sent again shortly.
 *   - the node cannot be reached (it failed; its replica is being promoted) or CLUSTERDOWN: the
 *     map is asked for again and the call retried, until its deadline.
 * At most RLD_CLUSTER_REDIRECTS redirections per call; every attempt shares the call's timeout.
 */
#ifndef RLD_REDIS_CLUSTER_H
#define RLD_REDIS_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "ratelimit.h"
#include "pool.h"

#define RLD_CLUSTER_SLOTS 16384
#define RLD_CLUSTER_MAX_NODES 64
#define RLD_CLUSTER_REDIRECTS 16

/* CRC16-CCITT as Redis Cluster uses it (XMODEM: polynomial 0x1021, initial 0, no reflection):
 * CRC16("123456789") is 0x31C3. */
uint16_t rld_crc16(const char *buf, size_t len);
/* The slot of a key (0..16383), by its hash tag when it has one. */
unsigned rld_cluster_slot(const char *key, size_t len);

typedef struct rld_cluster rld_cluster;

/* A router over the cluster that seeds[0..nseeds-1] belong to (their host and port; user, pass
 * and db of seeds[0] are used for every node, db must be 0). Each primary gets a pool of pool
 * connections; calls last at most timeout_ms. The map is read on the first call: an
 * unreachable cluster is not an error here. RL_EINVAL for bad arguments, RL_ENOMEM. */
int rld_cluster_new(const rld_redis_addr *seeds, size_t nseeds, int timeout_ms, int pool,
                    rld_cluster **out, rl_err *err);
/* Closes every connection and frees the router. NULL is ok. */
void rld_cluster_free(rld_cluster *c);

/* Runs a script (s >= 0, an rld_script, with nkeys keys first in argv) or a command (s < 0)
 * whose keys all lie in slot, on the primary serving slot, following redirections. As
 * rld_pool_exec otherwise: on RL_OK *reply is the reply (an error reply only with
 * RLD_POOL_REPLY_ERRORS in flags), freed by the caller; RL_ESTORE with the reason in err. */
int rld_cluster_exec(rld_cluster *c, unsigned slot, int s, int nkeys, int argc, const char **argv,
                     const size_t *argvlen, unsigned flags, redisReply **reply, rl_err *err);

/* Reads the map again now (CLUSTER SLOTS from the nodes known, in turn). RL_ESTORE when none
 * answers with a map that covers every slot. */
int rld_cluster_refresh(rld_cluster *c, rl_err *err);

/* "host:port" of the primary the map names for slot ("" before the map is read). */
void rld_cluster_owner(rld_cluster *c, unsigned slot, char *buf, size_t len);
/* The pool of the primary serving slot (NULL before the map is read). Borrowed. */
rld_pool *rld_cluster_pool(rld_cluster *c, unsigned slot);
/* Redirections followed so far: MOVED (ask = 0) or ASK (ask = 1). */
uint64_t rld_cluster_redirects(rld_cluster *c, int ask);
/* Times the whole map was read. */
uint64_t rld_cluster_refreshes(rld_cluster *c);

/* Puts the plug-ins' rule type ports into every node's scripts, those of nodes found later
 * included (rld_pool_set_ports; copied). Call it before the first call. RL_OK or RL_ENOMEM. */
int rld_cluster_set_ports(rld_cluster *c, const char *ports, rl_err *err);
/* rld_pool_use_functions on every node, those found later included. */
void rld_cluster_use_functions(rld_cluster *c, int on);
/* The pools of the primaries the map names now, each once, at most cap of them (borrowed:
 * alive while the router is). 0 before the map is read. */
size_t rld_cluster_primaries(rld_cluster *c, rld_pool **out, size_t cap);
/* Housekeeping: reads the map when it was never read or is stale, and probes every primary
 * (rld_pool_probe). Returns 1 when the map is known and every primary answers. */
int rld_cluster_probe(rld_cluster *c);
/* 1 when the map is known and every primary's link is up (rld_pool_up). */
int rld_cluster_up(rld_cluster *c);
/* The calls that failed because of the store, summed over every node's pool. */
uint64_t rld_cluster_errors(rld_cluster *c);
/* rld_pool_counts summed over every node's pool. */
void rld_cluster_counts(rld_cluster *c, uint64_t *calls, uint64_t *writes);
/* The last error of a primary whose link is down ("" when every one is up). */
void rld_cluster_last_error(rld_cluster *c, char *buf, size_t len);

#endif
