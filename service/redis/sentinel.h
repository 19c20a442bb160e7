/*
 * sentinel.h - following Redis Sentinel: a thread that tells the pool where the primary is.
 *
 * It subscribes to +switch-master on every sentinel at once, so that the message reaches the
 * pool from the first sentinel that switches, whichever is slow, stopped or gone. Each
 * subscription that has been silent for a second is pinged; one that owes an answer for 3 s is
 * closed and opened again (100 ms after, doubling to 1 s between attempts).
 *
 * While the pool's link is down, it also asks every sentinel where the primary is, every
 * 200 ms (a round: SENTINEL get-master-addr-by-name and SENTINEL master, pipelined on one
 * connection per sentinel; a sentinel still owing the last round is not asked again), so that a
 * failover whose message was missed is found within a round. A round is also asked once a
 * subscription starts, for a failover missed while not subscribed.
 *
 * What is followed: of a round's answers, the one of the highest configuration epoch (a
 * sentinel that has not heard of the last failover gives an older one), and only once the
 * node it names says it is a primary (ROLE). A +switch-master message is followed unless the
 * node it names says it is not a primary. Nothing is followed that the pool uses already,
 * except while the link is down, when the news lets the pool's next call try at once.
 *
 * Work is bounded: at most 2 commands per sentinel per round and one ROLE a round while the
 * link is down, a PING per sentinel a second while it is up. Only the thread touches its
 * connections; the pool is reached through the ops, which must be thread-safe.
 */
#ifndef RLD_REDIS_SENTINEL_H
#define RLD_REDIS_SENTINEL_H

#include <stddef.h>

#include "app/clock.h"
#include "pool.h"

/* What the watcher needs of the pool it serves; cls is handed to each. */
typedef struct rld_watch_ops {
    void *cls;
    /* 1 while the pool cannot reach its primary, else 0 */
    int (*down)(void *cls);
    /* the primary the pool uses now into host (cap bytes) and *port; "" and 0 before any */
    void (*current)(void *cls, char *host, size_t cap, int *port);
    /* ROLE on host:port by deadline: 1 it says master, 0 it says something else, -1 it could
     * not be asked (unreachable, refused, too slow) */
    int (*is_primary)(void *cls, const char *host, int port, rl_ns deadline);
    /* makes host:port the primary; while the link is down, the next call may try it at once */
    void (*follow)(void *cls, const char *host, int port);
} rld_watch_ops;

typedef struct rld_watch rld_watch;

/* Starts the thread for the sentinels s (copied) and the pool behind ops (kept; it must
 * outlive the watcher). RL_ENOMEM when the thread or its pipe cannot be made. */
int rld__watch_start(const rld_sentinel *s, const rld_watch_ops *ops, rld_watch **out, rl_err *err);
/* Stops the thread, closes its connections and frees w. NULL is ok. */
void rld__watch_stop(rld_watch *w);

/* One sentinel's answer to a round, as the thread keeps it. */
typedef struct rld_watch_answer {
    unsigned round; /* the round it answers (0: none) */
    int got;        /* of the round's two replies, how many came */
    int ok;         /* the first named a primary: host and port */
    char host[256];
    int port;
    long long epoch; /* config-epoch from the second; -1 when it gave none */
} rld_watch_answer;

/* Of n answers, the index of the complete one (both replies, a primary named) to round with
 * the highest epoch (the first of equals), or -1 when there is none. */
int rld__watch_best(const rld_watch_answer *a, size_t n, unsigned round);

#endif
