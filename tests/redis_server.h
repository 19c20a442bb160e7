/*
 * redis_server.h - a private redis-server for the tests: started on a free loopback port with no
 * persistence, in a temporary directory that is removed when it stops.
 *
 * A test that needs Redis fails (never skips) when redis-server is missing: `make deps` installs
 * it. Servers die with the process that started them (PR_SET_PDEATHSIG) and are stopped at
 * exit; the directory of a test that failed (Check leaves it through _exit) is removed by the
 * next start, once its owning process is gone.
 */
#ifndef RL_REDIS_SERVER_H
#define RL_REDIS_SERVER_H

#include <sys/types.h>

#include <hiredis/hiredis.h>

/* How a process is started (kept for rt_redis_restart). */
typedef enum rt_redis_kind {
    RT_REDIS_PLAIN = 0, /* a primary on its own */
    RT_REDIS_REPLICA,   /* a replica of 127.0.0.1:replica_of */
    RT_REDIS_CLUSTER,   /* a Redis Cluster node (its bus on port + 10000) */
    RT_REDIS_SENTINEL   /* redis-sentinel with dir/sentinel.conf */
} rt_redis_kind;

typedef struct rt_redis {
    pid_t pid; /* 0 when not running */
    int port;
    rt_redis_kind kind;
    int replica_of; /* RT_REDIS_REPLICA: the primary's port */
    int node_timeout_ms; /* RT_REDIS_CLUSTER: cluster-node-timeout */
    char dir[64];
    char url[64]; /* redis://127.0.0.1:<port>/0, or rediss://127.0.0.1:<tls_port>/0 */
    /* RT_REDIS_PLAIN started by rt_redis_start_tls: TLS on tls_port with the certificates of
     * tls_dir (no client certificate asked), besides cleartext on port (which rt_redis_connect
     * and rt_redis_cmd use); 0 and "" otherwise */
    int tls_port;
    char tls_dir[64];
} rt_redis;

/* Starts a server and waits until it answers; fails the test if it cannot. */
void rt_redis_start(rt_redis *r);
/* Makes a folder (cap bytes of dir) with a CA (ca.pem) and a certificate for 127.0.0.1 signed by
 * it (redis.pem, redis.key), with openssl; fails the test if it cannot. Removed with
 * rt_tls_remove. */
void rt_tls_certs(char *dir, size_t cap);
void rt_tls_remove(const char *dir);
/* rt_redis_start with TLS on another free port as well, with the certificates of tls_dir (made
 * by rt_tls_certs); r->url is then the rediss:// URL of that port. */
void rt_redis_start_tls(rt_redis *r, const char *tls_dir);
/* Kills the server at once (SIGKILL), keeping its port and directory for rt_redis_restart. */
void rt_redis_kill(rt_redis *r);
/* Starts a killed server again on the same port (empty: nothing was persisted). */
void rt_redis_restart(rt_redis *r);
/* Freezes and thaws the server (SIGSTOP, SIGCONT): connections stay open but nothing answers. */
void rt_redis_pause(rt_redis *r);
void rt_redis_resume(rt_redis *r);
/* Stops the server and removes its directory. Safe to call twice. */
void rt_redis_stop(rt_redis *r);

/* A connection to the server; fails the test if it cannot connect. Free with redisFree. */
redisContext *rt_redis_connect(const rt_redis *r);
/* Runs a command (redisCommand format) on a new connection and returns its reply (free with
 * freeReplyObject); fails the test on a connection error. */
redisReply *rt_redis_cmd(const rt_redis *r, const char *fmt, ...);
/* The same for a command that may run twice (a read): asked again on a new connection when the
 * server closed one before answering (Sentinel kills the normal clients of every node it
 * reconfigures in a failover), for 5 s at most. */
redisReply *rt_redis_read(const rt_redis *r, const char *fmt, ...);

/* ---- Sentinel: one primary, one replica, three sentinels ---------------------------------- */

#define RT_SENTINELS 3
#define RT_MASTER_NAME "mymaster"

typedef struct rt_sentinel_group {
    rt_redis data[2];             /* data[0] is the primary at start, data[1] its replica */
    rt_redis sent[RT_SENTINELS];  /* each monitors RT_MASTER_NAME with a quorum of 2 */
    char nodes[RT_SENTINELS][32]; /* "127.0.0.1:<port>" of each sentinel */
} rt_sentinel_group;

/* Starts the group and waits until the replica is in sync and every sentinel knows the replica
 * and the two other sentinels, so that a failover can happen; fails the test otherwise.
 * down_after_ms and failover_timeout_ms are the sentinels' down-after-milliseconds and
 * failover-timeout. Stopped with the process (as any server here) or by rt_sentinel_stop. */
void rt_sentinel_start(rt_sentinel_group *g, int down_after_ms, int failover_timeout_ms);
/* The port of the primary the sentinels name now (SENTINEL get-master-addr-by-name, asked of
 * the first sentinel that answers), 0 when none answers. */
int rt_sentinel_primary(const rt_sentinel_group *g);
/* Stops every process of the group. Safe to call twice. */
void rt_sentinel_stop(rt_sentinel_group *g);

/* ---- Cluster: three primaries with one replica each ---------------------------------------- */

#define RT_CLUSTER_NODES 6

typedef struct rt_cluster {
    rt_redis node[RT_CLUSTER_NODES]; /* node[0..2] are the primaries at start, node[3..5] the
                                        replicas (redis-cli chooses which replicates which) */
    char seeds[RT_CLUSTER_NODES][32]; /* "127.0.0.1:<port>" */
} rt_cluster;

/* Starts six cluster-enabled servers (cluster-node-timeout node_timeout_ms), creates the cluster
 * with `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes` and waits until every
 * node says cluster_state:ok and knows all six; fails the test otherwise. */
void rt_cluster_start(rt_cluster *c, int node_timeout_ms);
/* The node (index into c->node) serving slot as a primary now, asked of the first node that
 * answers CLUSTER SLOTS; -1 when none does. */
int rt_cluster_owner(const rt_cluster *c, int slot);
/* Stops every node. Safe to call twice. */
void rt_cluster_stop(rt_cluster *c);

/* Runs a program (argv[0] looked up in PATH) with its output appended to log; returns its exit
 * status, or fails the test when it cannot be run or outlives timeout_s. */
int rt_run(const char *const *argv, const char *log, int timeout_s);

#endif
