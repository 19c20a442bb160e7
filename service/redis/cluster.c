/*
 * cluster.c - see cluster.h.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster.h"

#define REFRESH_EVERY_NS (100 * 1000000LL) /* the map is asked for at most this often on errors */

typedef struct cnode {
    char host[256];
    int port;
    rld_pool *pool;
} cnode;

struct rld_cluster {
    rld_redis_addr base; /* the credentials every node is opened with */
    int timeout_ms, pool_size;
    pthread_mutex_t mu;
    /* every node seen so far (seeds first); kept until freed, so that a pool handed out stays
     * valid */
    cnode nodes[RLD_CLUSTER_MAX_NODES];
    size_t nnodes;
    int16_t owner[RLD_CLUSTER_SLOTS]; /* index into nodes, -1 while not known */
    char *ports;                      /* the rule type ports every node's scripts get */
    int functions;
    int stale;                        /* ask for the map before the next call */
    rl_ns refreshed_at;
    uint64_t moved, asked, refreshes;
};

/* Redis Cluster's CRC16: bit by bit, the polynomial 0x1021 from an initial 0. */
uint16_t rld_crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned rld_cluster_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(key + from, '}', len - from);
        if (close && close > key + from) /* "{}" is no tag: the whole key counts */
            return rld_crc16(key + from, (size_t)(close - key - from)) & (RLD_CLUSTER_SLOTS - 1);
    }
    return rld_crc16(key, len) & (RLD_CLUSTER_SLOTS - 1);
}

/* The index of host:port among the nodes, added (with its pool) when new; -1 when full or out
 * of memory. Under mu. */
static int node_at(rld_cluster *c, const char *host, int port)
{
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].port == port && strcmp(c->nodes[i].host, host) == 0)
            return (int)i;
    if (c->nnodes == RLD_CLUSTER_MAX_NODES)
        return -1;
    rld_redis_addr a = c->base;
    cnode *n = &c->nodes[c->nnodes];
    snprintf(a.host, sizeof a.host, "%s", host);
    a.port = port;
    if (rld_pool_new(&a, c->timeout_ms, c->pool_size, &n->pool, NULL) != RL_OK)
        return -1;
    if (c->ports && rld_pool_set_ports(n->pool, c->ports, NULL) != RL_OK) {
        rld_pool_free(n->pool);
        n->pool = NULL;
        return -1;
    }
    rld_pool_use_functions(n->pool, c->functions);
    snprintf(n->host, sizeof n->host, "%s", host);
    n->port = port;
    return (int)c->nnodes++;
}

int rld_cluster_new(const rld_redis_addr *seeds, size_t nseeds, int timeout_ms, int pool,
                    rld_cluster **out, rl_err *err)
{
    *out = NULL;
    if (nseeds < 1 || nseeds > RLD_CLUSTER_MAX_NODES)
        return rl_errf(err, RL_EINVAL, "store.cluster: must list 1 to %d nodes",
                       RLD_CLUSTER_MAX_NODES);
    if (seeds[0].db != 0)
        return rl_errf(err, RL_EINVAL, "store.cluster: Redis Cluster has only database 0");
    if (pool < 1 || pool > 1024 || timeout_ms < 1)
        return rl_errf(err, RL_EINVAL, "store: pool must be 1 to 1024 and timeout_ms positive");
    rld_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    c->base = seeds[0];
    c->timeout_ms = timeout_ms;
    c->pool_size = pool;
    c->stale = 1;
    pthread_mutex_init(&c->mu, NULL);
    for (size_t i = 0; i < RLD_CLUSTER_SLOTS; i++)
        c->owner[i] = -1;
    for (size_t i = 0; i < nseeds; i++)
        if (node_at(c, seeds[i].host, seeds[i].port) < 0) {
            rld_cluster_free(c);
            return rl_errf(err, RL_ENOMEM, "out of memory");
        }
    *out = c;
    return RL_OK;
}

void rld_cluster_free(rld_cluster *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nnodes; i++)
        rld_pool_free(c->nodes[i].pool);
    pthread_mutex_destroy(&c->mu);
    free(c->ports);
    free(c);
}

/* Fills map from a CLUSTER SLOTS reply (asked of node asked, whose host stands in for an
 * empty one). Returns the slots covered, or -1 when the reply is not a map or names too many
 * nodes. Under mu. */
static long read_map(rld_cluster *c, const redisReply *r, const cnode *asked, int16_t *map)
{
    long covered = 0;
    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    for (size_t i = 0; i < RLD_CLUSTER_SLOTS; i++)
        map[i] = -1;
    for (size_t k = 0; k < r->elements; k++) {
        const redisReply *e = r->element[k];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2 ||
            e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            return -1;
        long long from = e->element[0]->integer, to = e->element[1]->integer;
        const char *host = e->element[2]->element[0]->str;
        if (from < 0 || to >= RLD_CLUSTER_SLOTS || from > to)
            return -1;
        int idx = node_at(c, host[0] && strcmp(host, "?") != 0 ? host : asked->host,
                          (int)e->element[2]->element[1]->integer);
        if (idx < 0)
            return -1;
        for (long long s = from; s <= to; s++)
            map[s] = (int16_t)idx;
        covered += (long)(to - from + 1);
    }
    return covered;
}

int rld_cluster_refresh(rld_cluster *c, rl_err *err)
{
    int16_t *map = malloc(sizeof c->owner);
    int rc = rl_errf(err, RL_ESTORE, "redis cluster: no node answered CLUSTER SLOTS");
    if (!map)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    pthread_mutex_lock(&c->mu);
    size_t n = c->nnodes;
    c->refreshed_at = rld_mono_ns();
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < n && rc != RL_OK; i++) {
        const char *argv[2] = {"CLUSTER", "SLOTS"};
        redisReply *r;
        cnode *node = &c->nodes[i]; /* nodes are only appended: i < n stays valid */
        if (!rld_pool_up(node->pool) || rld_pool_command(node->pool, 2, argv, NULL, &r, err) != RL_OK)
            continue;
        pthread_mutex_lock(&c->mu);
        long covered = read_map(c, r, node, map);
        if (covered == RLD_CLUSTER_SLOTS) {
            memcpy(c->owner, map, sizeof c->owner);
            c->stale = 0;
            c->refreshes++;
            rc = RL_OK;
        } else {
            rc = rl_errf(err, RL_ESTORE, "redis cluster: %s:%d serves %ld of the %d slots",
                         node->host, node->port, covered < 0 ? 0 : covered, RLD_CLUSTER_SLOTS);
        }
        pthread_mutex_unlock(&c->mu);
        freeReplyObject(r);
    }
    free(map);
    return rc;
}

/* The node serving slot, reading the map first when it is stale (at most every 100 ms unless
 * it was never read). NULL with err set when no map can be had. */
static cnode *route(rld_cluster *c, unsigned slot, rl_err *err)
{
    pthread_mutex_lock(&c->mu);
    int due = c->stale && (c->refreshes == 0 || c->owner[slot] < 0 ||
                           rld_mono_ns() - c->refreshed_at >= REFRESH_EVERY_NS);
    pthread_mutex_unlock(&c->mu);
    if (due)
        rld_cluster_refresh(c, err);
    pthread_mutex_lock(&c->mu);
    int idx = c->owner[slot];
    pthread_mutex_unlock(&c->mu);
    if (idx < 0)
        rl_errf(err, RL_ESTORE, "redis cluster: no node known for slot %u", slot);
    return idx < 0 ? NULL : &c->nodes[idx];
}

/* "MOVED <slot> <host:port>" or "ASK ...": the node it names (added when new), or NULL. */
static cnode *redirect_target(rld_cluster *c, const char *msg, unsigned *slot)
{
    char where[300], host[256];
    int port;
    if (sscanf(msg, "%*s %u %299s", slot, where) != 2 || *slot >= RLD_CLUSTER_SLOTS ||
        rld_redis_parse_hostport(where, "redirection", host, sizeof host, &port, NULL) != RL_OK)
        return NULL;
    pthread_mutex_lock(&c->mu);
    int idx = node_at(c, host, port);
    pthread_mutex_unlock(&c->mu);
    return idx < 0 ? NULL : &c->nodes[idx];
}

static void mark_stale(rld_cluster *c)
{
    pthread_mutex_lock(&c->mu);
    c->stale = 1;
    pthread_mutex_unlock(&c->mu);
}

static void nap_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

int rld_cluster_exec(rld_cluster *c, unsigned slot, int s, int nkeys, int argc, const char **argv,
                     const size_t *argvlen, unsigned flags, redisReply **reply, rl_err *err)
{
    rl_ns deadline = rld_mono_ns() + (rl_ns)c->timeout_ms * 1000000;
    cnode *target = NULL;
    unsigned ask = 0, rslot;
    int rc = RL_ESTORE;
    *reply = NULL;
    if (slot >= RLD_CLUSTER_SLOTS)
        return rl_errf(err, RL_EINVAL, "redis cluster: slot %u out of range", slot);
    for (int attempt = 0; attempt <= RLD_CLUSTER_REDIRECTS; attempt++) {
        if (attempt > 0 && rld_mono_ns() >= deadline)
            break;
        if (!target && !(target = route(c, slot, err)))
            return RL_ESTORE;
        redisReply *r = NULL;
        rc = rld_pool_exec(target->pool, s, nkeys, argc, argv, argvlen,
                           ask | RLD_POOL_REPLY_ERRORS, &r, err);
        ask = 0;
        if (rc != RL_OK) { /* the node failed: its replica may be taking over */
            mark_stale(c);
            target = NULL;
            continue;
        }
        if (r->type != REDIS_REPLY_ERROR) {
            *reply = r;
            return RL_OK;
        }
        cnode *to = NULL;
        if (strncmp(r->str, "MOVED ", 6) == 0 && (to = redirect_target(c, r->str, &rslot))) {
            pthread_mutex_lock(&c->mu);
            c->owner[rslot] = (int16_t)(to - c->nodes);
            c->stale = 1;
            c->moved++;
            pthread_mutex_unlock(&c->mu);
            target = to;
            if (attempt > 0) /* sent back and forth while the nodes disagree: let them agree */
                nap_us(1000 * attempt);
        } else if (strncmp(r->str, "ASK ", 4) == 0 && (to = redirect_target(c, r->str, &rslot))) {
            pthread_mutex_lock(&c->mu);
            c->asked++;
            pthread_mutex_unlock(&c->mu);
            target = to;
            ask = RLD_POOL_ASKING;
        } else if (strncmp(r->str, "TRYAGAIN", 8) == 0) {
            nap_us(2000); /* a migration moves this call's keys: once they are together */
        } else if (strncmp(r->str, "CLUSTERDOWN", 11) == 0) {
            mark_stale(c);
            target = NULL;
            nap_us(5000);
        } else {
            if (flags & RLD_POOL_REPLY_ERRORS) {
                *reply = r;
                return RL_OK;
            }
            rc = rl_errf(err, RL_ESTORE, "redis: %.400s", r->str);
            freeReplyObject(r);
            return rc;
        }
        rc = rl_errf(err, RL_ESTORE, "redis cluster: %.400s", r->str);
        freeReplyObject(r);
    }
    return rc == RL_OK ? rl_errf(err, RL_ESTORE, "redis cluster: too many redirections") : rc;
}

void rld_cluster_owner(rld_cluster *c, unsigned slot, char *buf, size_t len)
{
    pthread_mutex_lock(&c->mu);
    int idx = slot < RLD_CLUSTER_SLOTS ? c->owner[slot] : -1;
    if (idx < 0)
        snprintf(buf, len, "%s", "");
    else
        snprintf(buf, len, "%s:%d", c->nodes[idx].host, c->nodes[idx].port);
    pthread_mutex_unlock(&c->mu);
}

rld_pool *rld_cluster_pool(rld_cluster *c, unsigned slot)
{
    pthread_mutex_lock(&c->mu);
    int idx = slot < RLD_CLUSTER_SLOTS ? c->owner[slot] : -1;
    pthread_mutex_unlock(&c->mu);
    return idx < 0 ? NULL : c->nodes[idx].pool;
}

uint64_t rld_cluster_redirects(rld_cluster *c, int ask)
{
    pthread_mutex_lock(&c->mu);
    uint64_t n = ask ? c->asked : c->moved;
    pthread_mutex_unlock(&c->mu);
    return n;
}

uint64_t rld_cluster_refreshes(rld_cluster *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t n = c->refreshes;
    pthread_mutex_unlock(&c->mu);
    return n;
}

int rld_cluster_set_ports(rld_cluster *c, const char *ports, rl_err *err)
{
    char *copy = strdup(ports ? ports : "");
    int rc = copy ? RL_OK : rl_errf(err, RL_ENOMEM, "out of memory");
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nnodes && rc == RL_OK; i++)
        rc = rld_pool_set_ports(c->nodes[i].pool, copy, err);
    if (rc == RL_OK) {
        free(c->ports);
        c->ports = copy;
    } else {
        free(copy);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void rld_cluster_use_functions(rld_cluster *c, int on)
{
    pthread_mutex_lock(&c->mu);
    c->functions = on != 0;
    for (size_t i = 0; i < c->nnodes; i++)
        rld_pool_use_functions(c->nodes[i].pool, on);
    pthread_mutex_unlock(&c->mu);
}

size_t rld_cluster_primaries(rld_cluster *c, rld_pool **out, size_t cap)
{
    char seen[RLD_CLUSTER_MAX_NODES] = {0};
    size_t n = 0;
    pthread_mutex_lock(&c->mu);
    for (size_t s = 0; s < RLD_CLUSTER_SLOTS; s++) {
        int idx = c->owner[s];
        if (idx < 0 || seen[idx])
            continue;
        seen[idx] = 1;
        if (n < cap)
            out[n] = c->nodes[idx].pool;
        n++;
    }
    pthread_mutex_unlock(&c->mu);
    return n < cap ? n : cap;
}

int rld_cluster_probe(rld_cluster *c)
{
    rld_pool *p[RLD_CLUSTER_MAX_NODES];
    pthread_mutex_lock(&c->mu);
    int due = c->refreshes == 0 ||
              (c->stale && rld_mono_ns() - c->refreshed_at >= REFRESH_EVERY_NS);
    pthread_mutex_unlock(&c->mu);
    if (due)
        rld_cluster_refresh(c, NULL);
    size_t n = rld_cluster_primaries(c, p, RLD_CLUSTER_MAX_NODES);
    int up = n > 0;
    for (size_t i = 0; i < n; i++)
        if (!rld_pool_probe(p[i])) {
            up = 0;
            mark_stale(c); /* a primary down: its replica may be taking over */
        }
    return up;
}

int rld_cluster_up(rld_cluster *c)
{
    rld_pool *p[RLD_CLUSTER_MAX_NODES];
    size_t n = rld_cluster_primaries(c, p, RLD_CLUSTER_MAX_NODES);
    int up = n > 0;
    for (size_t i = 0; i < n; i++)
        up &= rld_pool_up(p[i]);
    return up;
}

uint64_t rld_cluster_errors(rld_cluster *c)
{
    uint64_t n = 0;
    pthread_mutex_lock(&c->mu);
    size_t nn = c->nnodes;
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < nn; i++)
        n += rld_pool_errors(c->nodes[i].pool);
    return n;
}

void rld_cluster_counts(rld_cluster *c, uint64_t *calls, uint64_t *writes)
{
    pthread_mutex_lock(&c->mu);
    size_t nn = c->nnodes;
    pthread_mutex_unlock(&c->mu);
    *calls = *writes = 0;
    for (size_t i = 0; i < nn; i++) {
        uint64_t a, b;
        rld_pool_counts(c->nodes[i].pool, &a, &b);
        *calls += a;
        *writes += b;
    }
}

void rld_cluster_last_error(rld_cluster *c, char *buf, size_t len)
{
    rld_pool *p[RLD_CLUSTER_MAX_NODES];
    size_t n = rld_cluster_primaries(c, p, RLD_CLUSTER_MAX_NODES);
    snprintf(buf, len, "%s", "");
    for (size_t i = 0; i < n && !buf[0]; i++)
        if (!rld_pool_up(p[i]))
            rld_pool_last_error(p[i], buf, len);
    if (!buf[0] && n == 0)
        snprintf(buf, len, "%s", "redis cluster: no slot map yet");
}
