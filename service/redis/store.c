/*
 * store.c - see store.h. The scripts are the .lua files in service/redis, with the
 * rule types' ports (service/core/rules/<type>.lua, and the plug-ins' own) after lib.lua.
 *
 * The scripts' arguments are laid out as service/redis/args.def says (redis_args.h gives their
 * indices). A decision passes, for every applied rule with state, its key (KEYS) and its type's
 * tag, amounts and the parameters its port takes (rl_rule_redis.params) as decimal strings
 * (ARGV); a rule without state is decided here and only its wait is passed, so that phase 2
 * still waits for it. With a reservation id, the reservation's key and the index of
 * reservations follow the state keys, and every rule the reservation must remember gets a
 * record "RH|taken|tag|slot|shard|level|key" (R: it counts cost and can be settled; H: it holds
 * slots until release). This file names no rule type: what it knows of one comes from its
 * rl_rule_type.
 */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/buf.h"
#include "app/clock.h"
#include "app/values.h"
#include "fallback.h"
#include "redis_args.h"
#include "cluster.h"
#include "denycache.h"
#include "scripts.h"
#include "store.h"

#define GRACE_MS 60000 /* how long a reservation outlives its expiry, for housekeeping */
#define HEARTBEAT_NS (1000 * 1000000LL)
#define PEER_STALE_MS 3000 /* an instance silent this long is gone */
#define FLEET_TTL_MS 10000
#define DEFAULT_URL "redis://127.0.0.1:6379/0"
#define EXPIRE_BATCH 100 /* reservations expired per tick at most */
#define DUP_ID 1 /* internal: the reservation id drawn is taken, draw another */
#define RESV_SHARDS 16   /* on a cluster: the reservation index is split over this many slots */
#define RESV_PER_TICK 4  /* and housekeeping expires from this many of them a tick */
#define DUTY_TTL_MS 3000 /* the housekeeping claim lapses this long after its last renewal */

#define MAX_PORT_PARAMS 16

/* What the store knows of a rule type, by registry index. */
typedef struct type_info {
    const char *tag; /* the script's name for it; NULL when the type cannot live in Redis */
    int stateless;
    int refund; /* has refund: settling applies to it (when it counts cost) */
    int holds;
    int builtin;    /* a built-in type (its port is one of service/core/rules/) */
    size_t nparams; /* the parameters its port takes, in order */
    const rl_param_def *def[MAX_PORT_PARAMS];
    size_t nargs; /* then the values it computes for the time of the call (rl_rule_redis.args) */
    size_t (*args)(const void *params, rl_ns now, int64_t *out);
} type_info;

typedef struct redis_store {
    rl_store base;
    rld_pool *pool;        /* one Redis (or Sentinel); NULL on a cluster */
    rld_cluster *cluster;  /* Redis Cluster; NULL otherwise */
    rld_net_client_tls *tls; /* the connections' TLS, NULL: cleartext (freed after them) */
    char *prefix;
    size_t plen;
    int manual;
    int general; /* 1: the script's general path only, 2: its fast path only (tests) */
    long floor_ms;
    unsigned shards[RL_MAX_LEVELS];
    const rl_config *cfg;
    const rl_resolver *res;
    size_t ntypes;
    type_info *types;
    long hold_ms; /* TTL of a reservation and of held slots */
    uint64_t idkey, idseq;
    char instance[17];
    /* housekeeping */
    pthread_mutex_t tick_mu;
    rl_ns next_beat;
    rl_ns next_duty; /* when to ask for the housekeeping claim next (monotonic) */
    unsigned peers;   /* atomic */
    uint64_t expired; /* atomic */
    uint64_t active;  /* atomic */
    char cursor[32];
    size_t scan_node; /* on a cluster: the primary being scanned */
    unsigned due_next; /* on a cluster: the next part of the reservation index to expire */
    int64_t part_active[RESV_SHARDS];
    int duty; /* this instance holds the fleet's housekeeping claim (real clock only) */
    size_t counting[RL_MAX_LEVELS];
    size_t counted[RL_MAX_LEVELS]; /* atomic: the last full scan's keys per level */
    rld_denycache *dc;             /* NULL when denials are not cached */
    rl_ns dc_latest;               /* atomic, with a manual clock: the latest now sent to Redis */
    int dc_started;                /* its follower runs */
    struct lease *lease[RL_MAX_LEVELS]; /* NULL: the level is not leased */
    size_t nleased;
} redis_store;

/* A leased level (redis.md, "Hot keys: leases"): amounts this instance took from the states of
 * the level's rules for its default key, ahead of the requests it admits from them here. */
typedef struct lease {
    pthread_mutex_t mu;
    int64_t slice; /* in amounts (rl_fp), as left */
    rl_ns ttl;
    int live;                   /* holds what it took at `at` */
    int renewing;               /* a decision is taking a new slice: the others go to Redis */
    rl_ns until;                /* monotonic: when what is left goes back */
    rl_ns retry;                /* monotonic: no new slice before (the state lacked one) */
    char at[32];                /* the script's now when the slice was taken */
    int64_t left[RL_MAX_RULES]; /* per rule of the level: what may still be admitted here */
    int64_t limit[RL_MAX_RULES], window[RL_MAX_RULES]; /* the rule's status at the take */
    uint64_t returned, local;   /* atomic: amounts given back; decisions admitted here */
} lease;

static const int64_t zero_state[RL_STATE_MAX / 8];


static void new_id(redis_store *rs, char id[RL_RESERVATION_ID])
{
    uint64_t n = __atomic_add_fetch(&rs->idseq, 1, __ATOMIC_RELAXED);
    rl_store_id_format(id, rl_store_permute(n ^ rs->idkey));
}

static int valid_id(const char *id)
{
    uint64_t v;
    return rl_store_id_parse(id, &v) == 0;
}

static unsigned pick_shard(unsigned n)
{
    static _Thread_local uint64_t x;
    if (n <= 1)
        return 0;
    if (!x)
        x = rl_random64() | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return (unsigned)(x % n);
}

/* ---- argument lists ------------------------------------------------------------------------ */

/* Strings appended into one buffer; pointers are made at the end since the buffer moves. A
 * decision's arguments fit in the inline space, so that building them allocates nothing; an
 * abuf is never copied (its pointers may point into itself). */
#define AB_SLOTS 64
#define AB_BYTES 1024
typedef struct abuf {
    size_t n, cap, used, bcap;
    size_t *off, *len;
    char *buf;
    int oom;
    size_t off_inl[AB_SLOTS], len_inl[AB_SLOTS];
    char buf_inl[AB_BYTES];
} abuf;

/* Grows *p (inline storage or malloc'd) from have to want elements of size sz. */
static int ab_grow(void **p, void *inl, size_t have, size_t want, size_t sz)
{
    void *q = *p == inl ? malloc(want * sz) : realloc(*p, want * sz);
    if (!q)
        return -1;
    if (*p == inl)
        memcpy(q, inl, have * sz);
    *p = q;
    return 0;
}

/* Room for one more string and n more bytes (its NUL included). */
static int ab_room(abuf *a, size_t strings, size_t n)
{
    if (a->oom)
        return -1;
    if (!a->cap) {
        a->off = a->off_inl, a->len = a->len_inl, a->cap = AB_SLOTS;
        a->buf = a->buf_inl, a->bcap = AB_BYTES;
    }
    if (a->n + strings > a->cap) {
        size_t cap = a->cap * 2;
        if (ab_grow((void **)&a->off, a->off_inl, a->n, cap, sizeof *a->off) ||
            ab_grow((void **)&a->len, a->len_inl, a->n, cap, sizeof *a->len))
            return a->oom = 1, -1;
        a->cap = cap;
    }
    if (a->used + n > a->bcap) {
        size_t cap = a->bcap * 2;
        while (a->used + n > cap)
            cap *= 2;
        if (ab_grow((void **)&a->buf, a->buf_inl, a->used, cap, 1))
            return a->oom = 1, -1;
        a->bcap = cap;
    }
    return 0;
}

static void ab_add(abuf *a, const void *s, size_t n)
{
    if (ab_room(a, 1, n + 1) != 0)
        return;
    memcpy(a->buf + a->used, s, n);
    a->buf[a->used + n] = '\0';
    a->off[a->n] = a->used;
    a->len[a->n] = n;
    a->n++;
    a->used += n + 1;
}

static void ab_str(abuf *a, const char *s) { ab_add(a, s, strlen(s)); }

static void ab_i64(abuf *a, int64_t v)
{
    char b[24];
    ab_add(a, b, rld_fmt_i64(b, v));
}

/* Appends to the last string instead of starting a new one. */
static void ab_cat(abuf *a, const void *s, size_t n)
{
    if (a->n == 0 || ab_room(a, 0, n) != 0)
        return;
    memcpy(a->buf + a->used - 1, s, n); /* over the NUL, which moves to the end */
    a->used += n;
    a->buf[a->used - 1] = '\0';
    a->len[a->n - 1] += n;
}

/* The same with an unsigned number in decimal. */
static void ab_cat_u(abuf *a, unsigned v)
{
    char b[24];
    ab_cat(a, b, rld_fmt_i64(b, v));
}

/* An empty abuf (without touching its inline space). */
static void ab_init(abuf *a)
{
    a->n = a->cap = a->used = a->bcap = 0;
    a->off = a->len = NULL;
    a->buf = NULL;
    a->oom = 0;
}

static void ab_free(abuf *a)
{
    if (a->off != a->off_inl)
        free(a->off);
    if (a->len != a->len_inl)
        free(a->len);
    if (a->buf != a->buf_inl)
        free(a->buf);
    ab_init(a);
}

/* KEYS then ARGV as one argument vector: into av and al when n fits (max), or else into
 * vectors it allocates (free(*argv) frees both; *argv == av otherwise). */
static int ab_join(const abuf *k, const abuf *a, const char **av, size_t *al, size_t max,
                   const char ***argv, size_t **len)
{
    size_t n = k->n + a->n;
    if (k->oom || a->oom)
        return -1;
    *argv = av, *len = al;
    if (n > max) {
        void *mem = malloc(n * (sizeof(char *) + sizeof(size_t)));
        if (!mem)
            return -1;
        *argv = mem;
        *len = (size_t *)(void *)((char *)mem + n * sizeof(char *));
    }
    for (size_t i = 0; i < k->n; i++) {
        (*argv)[i] = k->buf + k->off[i];
        (*len)[i] = k->len[i];
    }
    for (size_t i = 0; i < a->n; i++) {
        (*argv)[k->n + i] = a->buf + a->off[i];
        (*len)[k->n + i] = a->len[i];
    }
    return 0;
}

/* A script (s >= 0) or a command (s < 0) with nkeys keys at argv[first..]: on a cluster, sent
 * to the primary serving the slot of argv[first] (every key of a call shares that slot). */
static int exec_at(redis_store *rs, int s, int first, int nkeys, int argc, const char **argv,
                   const size_t *len, redisReply **r, rl_err *err)
{
    if (!rs->cluster)
        return rld_pool_exec(rs->pool, s, nkeys, argc, argv, len, 0, r, err);
    unsigned slot = argc > first ? rld_cluster_slot(argv[first], len[first]) : 0;
    return rld_cluster_exec(rs->cluster, slot, s, nkeys, argc, argv, len, 0, r, err);
}

static int eval(redis_store *rs, rld_script s, const abuf *k, const abuf *a, redisReply **r,
                rl_err *err)
{
    const char **argv, *av[2 * AB_SLOTS];
    size_t *len, al[2 * AB_SLOTS];
    if (ab_join(k, a, av, al, 2 * AB_SLOTS, &argv, &len) != 0)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    int rc = exec_at(rs, (int)s, 0, (int)k->n, (int)(k->n + a->n), argv, len, r, err);
    if (argv != av)
        free(argv);
    return rc;
}

/* A command whose first key is argv[1] (k holds the command and its arguments). */
static int command(redis_store *rs, const abuf *k, redisReply **r, rl_err *err)
{
    const char **argv, *av[AB_SLOTS];
    size_t *len, al[AB_SLOTS];
    abuf none;
    ab_init(&none);
    if (ab_join(k, &none, av, al, AB_SLOTS, &argv, &len) != 0)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    int rc = exec_at(rs, -1, 1, 1, (int)k->n, argv, len, r, err);
    if (argv != av)
        free(argv);
    return rc;
}

/* ---- keys and parameters ------------------------------------------------------------------- */

static void ab_state_key(const redis_store *rs, abuf *k, size_t level, unsigned slot,
                         unsigned shard, const char *key, size_t keylen)
{
    const char *name = rs->cfg->levels[level].name;
    size_t nl = strlen(name);
    int sharded = rs->shards[level] > 1;
    ab_add(k, rs->prefix, rs->plen);
    ab_cat(k, name, nl);
    ab_cat(k, ":", 1);
    ab_cat_u(k, slot);
    if (sharded) {
        ab_cat(k, ".", 1);
        ab_cat_u(k, shard);
    }
    ab_cat(k, ":", 1);
    if (rs->cluster) { /* one hash tag for every state of (level, key), or of one shard */
        ab_cat(k, "{", 1);
        ab_cat(k, name, nl);
        if (sharded) {
            ab_cat(k, ".", 1);
            ab_cat_u(k, shard);
        }
        ab_cat(k, ":", 1);
        ab_cat(k, key, keylen);
        ab_cat(k, "}", 1);
    } else {
        ab_cat(k, key, keylen);
    }
}

/* Which part of the reservation index a reservation is in, on a cluster. */
static unsigned resv_shard(const char *id)
{
    uint64_t v = 0;
    rl_store_id_parse(id, &v);
    return (unsigned)(v % RESV_SHARDS);
}

/* A reservation's key: P"r:"<id>, on a cluster followed by the hash tag of its part of the
 * index, so that the two share a slot. */
static void ab_resv_key(const redis_store *rs, abuf *k, const char *id)
{
    ab_add(k, rs->prefix, rs->plen);
    ab_cat(k, "r:", 2);
    ab_cat(k, id, strlen(id));
    if (rs->cluster) {
        ab_cat(k, "{", 1);
        ab_cat_u(k, resv_shard(id));
        ab_cat(k, "}", 1);
    }
}

/* The reservation index: P"resv", on a cluster its part n P"resv{"n"}". */
static void ab_index_key(const redis_store *rs, abuf *k, unsigned n)
{
    ab_add(k, rs->prefix, rs->plen);
    ab_cat(k, "resv", 4);
    if (rs->cluster) {
        ab_cat(k, "{", 1);
        ab_cat_u(k, n);
        ab_cat(k, "}", 1);
    }
}

static void ab_key(const redis_store *rs, abuf *k, const char *what, const char *id)
{
    ab_add(k, rs->prefix, rs->plen);
    ab_cat(k, what, strlen(what));
    if (id)
        ab_cat(k, id, strlen(id));
}

/* The parameters the rule's port takes, each shard's share of them (rl_param_share), then the
 * values its type computes for the time now (a period's bounds): now is this instance's time
 * of the call, and the port's own clock picks among what they offer. */
static void ab_params(abuf *a, const type_info *ti, const rl_rule *r, unsigned n, rl_ns now)
{
    for (size_t i = 0; i < ti->nparams; i++) {
        int64_t v;
        memcpy(&v, (const char *)r->params + ti->def[i]->offset, sizeof v);
        ab_i64(a, rl_param_share(ti->def[i], v, n));
    }
    if (ti->nargs) {
        int64_t v[RL_REDIS_ARGS_MAX];
        size_t k = ti->args(r->params, now, v);
        for (size_t i = 0; i < ti->nargs; i++)
            ab_i64(a, i < k ? v[i] : 0);
    }
}

/* TTL of reservations and of held slots, in ms: never below the floor. */
static long hold_ms(const redis_store *rs)
{
    return rs->hold_ms > rs->floor_ms ? rs->hold_ms : rs->floor_ms;
}

static const type_info *info_of(const redis_store *rs, const rl_rule *r)
{
    return r->type_id < rs->ntypes ? &rs->types[r->type_id] : NULL;
}

/* ---- attach -------------------------------------------------------------------------------- */

/* The Redis port of a type of version 2 or later, or NULL. */
static const rl_rule_redis *port_of(const rl_rule_type *t)
{
    return t->api_version >= 2 ? t->redis : NULL;
}

static int builtin_tag(const char *tag)
{
    for (size_t i = 0; rld_lua_ports[i].tag; i++)
        if (strcmp(rld_lua_ports[i].tag, tag) == 0)
            return 1;
    return 0;
}

/* A type's tag is set when the scripts hold its port: a built-in's, or a plug-in's own text.
 * Its parameters were checked when it was registered. */
static void describe_type(const rl_rule_type *t, type_info *ti)
{
    const rl_rule_redis *port = port_of(t);
    memset(ti, 0, sizeof *ti);
    ti->stateless = t->state_size == 0;
    ti->refund = t->refund != NULL;
    ti->holds = (t->flags & RL_RULE_HOLDS) != 0;
    if (!port || port->nparams > MAX_PORT_PARAMS || (!port->lua && !builtin_tag(port->tag)))
        return;
    for (size_t i = 0; i < port->nparams; i++)
        for (size_t j = 0; j < t->nparams; j++)
            if (strcmp(t->params[j].name, port->params[i]) == 0)
                ti->def[i] = &t->params[j];
    ti->nparams = port->nparams;
    if (t->api_version >= 6 && port->nargs && port->args) {
        ti->nargs = port->nargs;
        ti->args = port->args;
    }
    ti->tag = port->tag;
    ti->builtin = !port->lua && builtin_tag(port->tag);
}

static int check_rules(const redis_store *rs, const rl_rules *rs_, const char *where, rl_err *err)
{
    for (size_t i = 0; rs_ && i < rs_->n; i++) {
        const type_info *ti = info_of(rs, &rs_->v[i]);
        if (!ti || (!ti->stateless && !ti->tag))
            return rl_errf(err, RL_EINVAL,
                           "%s[%zu]: rule type %s keeps state that the Redis store cannot hold: "
                           "it has no Redis port (rl_rule_type.redis with its Lua text)",
                           where, i, rs_->v[i].type->name);
        if (rs->cluster && !ti->stateless && !ti->refund && !ti->holds)
            return rl_errf(err, RL_EINVAL,
                           "%s[%zu]: rule type %s cannot give back what it took (no refund), "
                           "which a decision across the nodes of a Redis Cluster may have to do",
                           where, i, rs_->v[i].type->name);
    }
    return RL_OK;
}

/* Describes the registry's types and checks that every rule of cfg can live in Redis. */
static int check_config(redis_store *rs, const rl_config *cfg, rl_err *err)
{
    char where[128];
    rs->ntypes = rl_registry_count(cfg->reg);
    rs->types = calloc(rs->ntypes ? rs->ntypes : 1, sizeof *rs->types);
    if (!rs->types)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    for (size_t i = 0; i < rs->ntypes; i++)
        describe_type(rl_registry_at(cfg->reg, i), &rs->types[i]);
    for (size_t l = 0; l < cfg->nlevels; l++) {
        snprintf(where, sizeof where, "levels[%zu].rules", l);
        int rc = check_rules(rs, cfg->levels[l].rules, where, err);
        if (rc != RL_OK)
            return rc;
    }
    for (size_t t = 0; t < cfg->ntiers; t++) {
        snprintf(where, sizeof where, "tiers.%.64s", cfg->tiers[t].name);
        int rc = check_rules(rs, cfg->tiers[t].rules, where, err);
        if (rc != RL_OK)
            return rc;
    }
    for (size_t q = 0; q < cfg->nquotas; q++) {
        snprintf(where, sizeof where, "quotas.%.64s.rules", cfg->quota_keys[q]);
        int rc = check_rules(rs, cfg->quotas[q].rules, where, err);
        if (rc != RL_OK)
            return rc;
    }
    return RL_OK;
}

int rld_redis_store_check_config(const rl_config *cfg, int cluster, rl_err *err)
{
    redis_store *rs = calloc(1, sizeof *rs);
    if (!rs)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    rs->cluster = cluster ? (rld_cluster *)(void *)rs : NULL; /* only tested for NULL here */
    int rc = check_config(rs, cfg, err);
    free(rs->types);
    free(rs);
    return rc;
}

/* Puts the plug-ins' ports into the scripts (the built-ins' are built in). */
static int set_ports(redis_store *rs, const rl_registry *reg, rl_err *err)
{
    size_t n = 0, used = 0;
    for (size_t i = 0; i < rs->ntypes; i++) {
        const rl_rule_redis *port = port_of(rl_registry_at(reg, i));
        if (rs->types[i].tag && port->lua)
            n += strlen(port->lua) + 1;
    }
    if (n == 0)
        return RL_OK;
    char *ports = malloc(n + 1);
    if (!ports)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    for (size_t i = 0; i < rs->ntypes; i++) {
        const rl_rule_redis *port = port_of(rl_registry_at(reg, i));
        if (rs->types[i].tag && port->lua) {
            size_t l = strlen(port->lua);
            memcpy(ports + used, port->lua, l);
            ports[used + l] = '\n';
            used += l + 1;
        }
    }
    ports[used] = '\0';
    int rc = rs->cluster ? rld_cluster_set_ports(rs->cluster, ports, err)
                         : rld_pool_set_ports(rs->pool, ports, err);
    free(ports);
    return rc;
}

static rld_rconn *deny_connect(void *ctx);
static void lease_return(redis_store *rs, size_t level, struct lease *ls);
static void deny_forget(redis_store *rs, const abuf *k, size_t first);

static int rs_attach(void *cls, const rl_config *cfg, const rl_resolver *res, rl_err *err)
{
    redis_store *rs = cls;
    if (rs->cfg) { /* attached again (a reload): nothing of the configuration before stays */
        int up = rs->cluster ? rld_cluster_up(rs->cluster) : rld_pool_up(rs->pool);
        for (size_t l = 0; l < RL_MAX_LEVELS; l++) {
            lease *ls = rs->lease[l];
            if (!ls)
                continue;
            pthread_mutex_lock(&ls->mu);
            if (up && l < rs->cfg->nlevels)
                lease_return(rs, l, ls); /* what is left goes back to the fleet */
            ls->live = 0;
            for (size_t j = 0; j < RL_MAX_RULES; j++)
                ls->left[j] = 0;
            ls->retry = 0;
            pthread_mutex_unlock(&ls->mu);
        }
        if (rs->dc) /* a level's index and a key may mean something else now */
            rld_denycache_clear(rs->dc);
        free(rs->types);
        rs->types = NULL;
        rs->ntypes = 0;
    }
    rs->cfg = cfg;
    rs->res = res;
    int rc = check_config(rs, cfg, err);
    if (rc == RL_OK)
        rc = set_ports(rs, cfg->reg, err);
    if (rc != RL_OK)
        return rc;
    if (rs->dc && !rs->dc_started) {
        char deny[160], quotas[160];
        snprintf(deny, sizeof deny, "%sdeny", rs->prefix);
        snprintf(quotas, sizeof quotas, "%squotas", rs->prefix);
        if ((rc = rld_denycache_follow(rs->dc, deny_connect, rs, deny, quotas, err)) != RL_OK)
            return rc;
        rs->dc_started = 1;
    }
    rl_ns ms = (cfg->reservation_ttl + 999999) / 1000000;
    rs->hold_ms = (long)(ms > 86400000 ? 86400000 : ms) + GRACE_MS;
    return RL_OK;
}

/* ---- decisions ----------------------------------------------------------------------------- */

static int64_t parse_i64(const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING    ? strtoll(r->str, NULL, 10)
           : r->type == REDIS_REPLY_INTEGER ? r->integer
                                            : 0;
}

static int reply_is(const redisReply *r, const char *s)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
           r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, s) == 0;
}

/* The record of what a reservation must remember of an item, or "" when it keeps nothing. */
static void ab_record(const redis_store *rs, abuf *a, const rl_applied *ap, const type_info *ti,
                      const rl_plan_item *it, const char *id, unsigned shard)
{
    char rec[64];
    unsigned u = ap->rule->unit;
    int refundable = rl_unit_refundable(u) && ti->refund;
    if (!id[0] || !(refundable || ti->holds)) {
        ab_str(a, "");
        return;
    }
    const char *lname = rs->cfg->levels[ap->level].name;
    /* R: '0', '1' (counts cost, as records before dimensions say) or 'A' + the unit */
    char rc = !refundable ? '0' : u == RL_UNIT_COST ? '1' : (char)('A' + u);
    int m = snprintf(rec, sizeof rec, "%c%d|%lld|%s|%u|%u|", rc, ti->holds,
                     (long long)it->cost, ti->tag, ap->slot, shard);
    ab_add(a, rec, (size_t)m);
    ab_cat(a, lname, strlen(lname));
    ab_cat(a, "|", 1);
    ab_cat(a, ap->key, ap->keylen);
}

/* What a reservation remembers of the request's amounts beyond its cost, to settle them:
 * "" when it has none, else the amounts of units RL_UNIT_USD.. by commas, and after '|' the
 * prices its dollars came from, by commas. */
static void ab_usage(abuf *a, const rl_plan *plan, const char *id)
{
    char buf[RL_UNITS * 21 + RL_MAX_DIMS * 21 + 2];
    size_t n = 0;
    if (!id[0] || !plan->amt) {
        ab_str(a, "");
        return;
    }
    for (unsigned u = RL_UNIT_USD; u < RL_UNITS; u++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%lld", u > RL_UNIT_USD ? "," : "",
                              (long long)plan->amt[u]);
    for (unsigned k = 0; plan->price && k < RL_MAX_DIMS; k++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%c%lld", k ? ',' : '|',
                              (long long)plan->price->per_million[k]);
    ab_add(a, buf, n);
}

/* Item i's fields in args.def's order, then its port's parameters. ti is NULL for a rule
 * decided here (its wait is ap->wait). */
static void ab_decide_item(redis_store *rs, abuf *k, abuf *a, const rl_plan *plan, size_t i,
                           const rl_applied *ap, const type_info *ti, const char *id,
                           unsigned shard, int64_t extra)
{
    const rl_plan_item *it = &plan->items[i];
    unsigned n = rs->shards[ap->level]; /* 1 when not sharded */
    if (ti)
        ab_state_key(rs, k, ap->level, ap->slot, shard, ap->key, ap->keylen);
    for (int f = 0; f < RLD_DECIDE_ITEM_FIELDS; f++) {
        switch (f) {
        case RLD_DECIDE_ITEM_TAG:
            ab_str(a, ti ? ti->tag : "");
            break;
        case RLD_DECIDE_ITEM_KEY:
            ab_i64(a, ti ? (int64_t)k->n : 0);
            break;
        case RLD_DECIDE_ITEM_NEED:
            ti ? ab_i64(a, it->cost + extra + (it->need - it->cost) / (int64_t)n)
               : ab_str(a, "");
            break;
        case RLD_DECIDE_ITEM_COST:
            ti ? ab_i64(a, it->cost + extra) : ab_str(a, "");
            break;
        case RLD_DECIDE_ITEM_WAIT:
            ti ? ab_str(a, "") : ab_i64(a, ap->wait);
            break;
        case RLD_DECIDE_ITEM_RECORD:
            ti ? ab_record(rs, a, ap, ti, it, id, shard) : ab_str(a, "");
            break;
        }
    }
    if (ti)
        ab_params(a, ti, ap->rule, n, plan->now);
}

/* The modes of items sel[0..n-1]: "" when every one blocks and takes, else a character per item
 * (args.def). */
static void ab_modes(abuf *a, const rl_plan *plan, const size_t *sel, size_t n)
{
    char m[RL_MAX_APPLIED];
    int any = 0;
    for (size_t j = 0; j < n; j++) {
        size_t i = sel[j];
        m[j] = plan->items[i].mode & RL_ITEM_SHADOW ? 's'
               : !rl_plan_item_blocks(plan, i)      ? 'c'
                                                    : '-';
        any |= m[j] != '-';
    }
    ab_add(a, m, any ? n : 0);
}

/* The decision script's arguments for items sel[0..n-1] of plan (dry: take nothing; id: the
 * reservation to make, "" for none; lx: NULL, or per item 0, LEASED when its lease answered it
 * (sent as decided here, wait 0), or a slice to take beside its cost). */
#define LEASED (-1)
static void build_decide(redis_store *rs, const rl_plan *plan, rl_decision *d, const size_t *sel,
                         size_t n, int dry, const char *id, const unsigned *shard,
                         const int64_t *lx, abuf *k, abuf *a)
{
    int keep = rs->cluster && !dry; /* what a take changed, to give it back exactly */
    for (int f = 0; f < RLD_DECIDE_FIELDS; f++) {
        switch (f) {
        case RLD_DECIDE_NOW:
            rs->manual ? ab_i64(a, plan->now) : ab_str(a, "");
            break;
        case RLD_DECIDE_DRY:
            ab_str(a, dry ? "1" : "0");
            break;
        case RLD_DECIDE_COST:
            ab_i64(a, plan->cost);
            break;
        case RLD_DECIDE_USAGE:
            ab_usage(a, plan, id);
            break;
        case RLD_DECIDE_RESERVATION_TTL:
            ab_i64(a, rs->cfg->reservation_ttl);
            break;
        case RLD_DECIDE_FLOOR_MS:
            ab_i64(a, rs->floor_ms);
            break;
        case RLD_DECIDE_HOLD_MS:
            ab_i64(a, hold_ms(rs));
            break;
        case RLD_DECIDE_ID:
            ab_str(a, id);
            break;
        case RLD_DECIDE_RESERVE:
            ab_str(a, plan->flags & RL_RESERVE ? "1" : "0");
            break;
        case RLD_DECIDE_MODES:
            ab_modes(a, plan, sel, n);
            break;
        case RLD_DECIDE_KEEP:
            ab_str(a, keep ? "1" : "0");
            break;
        case RLD_DECIDE_GENERAL:
            ab_str(a, rs->general == 1 ? "1" : rs->general == 2 ? "2" : "");
            break;
        case RLD_DECIDE_ITEMS:
            ab_i64(a, (int64_t)n);
            break;
        }
    }
    for (size_t j = 0; j < n; j++) {
        size_t i = sel[j];
        rl_applied *ap = &d->applied[i];
        const type_info *ti = info_of(rs, ap->rule);
        int64_t x = lx ? lx[i] : 0;
        if (x == LEASED)
            ap->wait = 0;
        ab_decide_item(rs, k, a, plan, i, ap, ti->stateless || x == LEASED ? NULL : ti, id,
                       shard[ap->level], x > 0 ? x : 0);
    }
    if (id[0]) {
        ab_resv_key(rs, k, id);
        ab_index_key(rs, k, resv_shard(id));
    }
}

/* What a decision script answered for one item: its wait and status (limit, remaining,
 * reset_after, window, next), and (when kept) its state before and after its take, pointing
 * into the reply. */
typedef struct item_out {
    int64_t wait, st[5];
    const redisReply *before, *after;
} item_out;

/* Reads a decision script's reply for items sel[0..n-1] into out (by plan index) and the
 * script's now into at (may be NULL); keep: the reply has the states before and after. -1
 * when it is not such a reply. */
static int read_decide(const redisReply *r, const size_t *sel, size_t n, int keep, item_out *out,
                       char *at, size_t atlen)
{
    if (!reply_is(r, "ok") || r->elements != 2 + 6 * n + (keep ? 2 * n : 0))
        return -1;
    for (size_t j = 0; j < n; j++) {
        item_out *o = &out[sel[j]];
        o->wait = parse_i64(r->element[1 + 6 * j]);
        for (int f = 0; f < 5; f++)
            o->st[f] = parse_i64(r->element[2 + 6 * j + f]);
        o->before = keep ? r->element[2 + 6 * n + 2 * j] : NULL;
        o->after = keep ? r->element[3 + 6 * n + 2 * j] : NULL;
    }
    const redisReply *now = r->element[1 + 6 * n];
    if (at)
        snprintf(at, atlen, "%s", now->type == REDIS_REPLY_STRING ? now->str : "0");
    return 0;
}

/* Decides the rules without state here (their waits are final in d) and checks that every
 * other rule can be decided in Redis (RL_EINVAL otherwise). *nstate counts the rules with
 * state; *blocked says that a rule without state that blocks denies the request. */
static int decide_here(redis_store *rs, const rl_plan *plan, rl_decision *d, size_t *nstate,
                       int *blocked, rl_err *err)
{
    *nstate = 0;
    *blocked = 0;
    for (size_t i = 0; i < plan->n; i++) {
        rl_applied *ap = &d->applied[i];
        const rl_rule *r = ap->rule;
        const type_info *ti = info_of(rs, r);
        const rl_plan_item *it = &plan->items[i];
        if (ti && ti->stateless) {
            ap->wait = rl_rule_peek(r, zero_state, ap->key, ap->keylen, plan->now, it->need, NULL);
            *blocked |= ap->wait != 0 && rl_plan_item_blocks(plan, i);
            continue;
        }
        if (!ti || !ti->tag)
            return rl_errf(err, RL_EINVAL,
                           "rule type %s keeps state that the Redis store cannot hold",
                           r->type->name);
        ++*nstate;
    }
    return RL_OK;
}

/* One Redis: the whole decision is one script. DUP_ID when the reservation id is taken. */
static int decide_one(redis_store *rs, const rl_plan *plan, rl_decision *d, const char *id,
                      const unsigned *shard, const int64_t *lx, item_out *out, char *at,
                      size_t atlen, rl_err *err)
{
    size_t sel[RL_MAX_APPLIED];
    abuf k, a;
    ab_init(&k);
    ab_init(&a);
    redisReply *r = NULL;
    for (size_t i = 0; i < plan->n; i++)
        sel[i] = i;
    build_decide(rs, plan, d, sel, plan->n, (plan->flags & RL_DRY_RUN) != 0, id, shard, lx, &k,
                 &a);
    int rc = k.oom || a.oom ? rl_errf(err, RL_ENOMEM, "out of memory")
                            : eval(rs, RLD_SCRIPT_DECIDE, &k, &a, &r, err);
    ab_free(&k);
    ab_free(&a);
    if (rc != RL_OK)
        return rc;
    if (reply_is(r, "dup"))
        rc = DUP_ID;
    else if (read_decide(r, sel, plan->n, 0, out, at, atlen) != 0)
        rc = rl_errf(err, RL_ESTORE, "redis: unexpected reply to a decision");
    freeReplyObject(r);
    return rc;
}

/* A state to give back to (or settle, or release) outside a reservation's script. */
typedef struct uitem {
    size_t level;
    unsigned slot, shard;
    const char *key;
    size_t keylen;
    const type_info *ti;
    const rl_rule *rule;
    char op; /* 'r': refund amount (negative: charge it); 'h': release amount held */
    int64_t amount;
    const redisReply *before, *after; /* the state around the take to undo, or NULL */
} uitem;

/* Runs undo.lua for u[0..n-1], one call per slot of their state keys, in their order. Every
 * call is made; the first failure is returned. at: when the amounts were taken (decimal); o:
 * how the call went, for the 'h' items (NULL: not said; UNDO_EXPIRED: the reservation
 * expired). */
static const rl_outcome undo_expired = {RL_OUTCOME_NONE, -1};
#define UNDO_EXPIRED (&undo_expired)
static int undo(redis_store *rs, const char *now_arg, const char *at, const uitem *u, size_t n,
                const rl_outcome *o, rl_err *err)
{
    int rc = RL_OK, done[RL_MAX_APPLIED] = {0};
    for (size_t first = 0; first < n; first++) {
        abuf k, a, one;
        ab_init(&k);
        ab_init(&a);
        ab_init(&one);
        redisReply *r;
        if (done[first])
            continue;
        ab_state_key(rs, &one, u[first].level, u[first].slot, u[first].shard, u[first].key,
                     u[first].keylen);
        unsigned slot = one.oom ? 0 : rld_cluster_slot(one.buf, one.len[0]);
        ab_free(&one);
        ab_str(&a, now_arg);
        for (int f = RLD_UNDO_AT; f < RLD_UNDO_FIELDS; f++) {
            if (f == RLD_UNDO_AT)
                ab_str(&a, at && at[0] ? at : "0");
            else if (f == RLD_UNDO_FLOOR_MS)
                ab_i64(&a, rs->floor_ms);
            else if (f == RLD_UNDO_HOLD_MS)
                ab_i64(&a, hold_ms(rs));
            else if (f == RLD_UNDO_KIND)
                ab_i64(&a, o == UNDO_EXPIRED ? -1 : o ? (int64_t)o->kind : 0);
            else if (f == RLD_UNDO_LATENCY)
                ab_i64(&a, o && o != UNDO_EXPIRED ? o->latency : -1);
            else if (f == RLD_UNDO_CHANNEL)
                ab_key(rs, &a, "deny", NULL);
        }
        for (size_t i = first; i < n; i++) {
            const uitem *x = &u[i];
            size_t before = k.n;
            if (done[i])
                continue;
            ab_state_key(rs, &k, x->level, x->slot, x->shard, x->key, x->keylen);
            if (rs->cluster && !k.oom &&
                rld_cluster_slot(k.buf + k.off[before], k.len[before]) != slot) {
                k.n = before; /* another slot: a later call */
                k.used = k.off[before];
                continue;
            }
            done[i] = 1;
            for (int f = 0; f < RLD_UNDO_ITEM_FIELDS; f++) {
                if (f == RLD_UNDO_ITEM_TAG)
                    ab_str(&a, x->ti->tag);
                else if (f == RLD_UNDO_ITEM_OP)
                    ab_add(&a, &x->op, 1);
                else if (f == RLD_UNDO_ITEM_AMOUNT)
                    ab_i64(&a, x->amount);
                else if (f == RLD_UNDO_ITEM_BEFORE)
                    x->before ? ab_add(&a, x->before->str, x->before->len) : ab_str(&a, "");
                else if (f == RLD_UNDO_ITEM_AFTER)
                    x->after ? ab_add(&a, x->after->str, x->after->len) : ab_str(&a, "");
            }
            ab_params(&a, x->ti, x->rule, rs->shards[x->level], strtoll(at, NULL, 10));
        }
        int c = k.oom || a.oom ? rl_errf(err, RL_ENOMEM, "out of memory")
                               : eval(rs, RLD_SCRIPT_UNDO, &k, &a, &r, err);
        if (c == RL_OK) {
            freeReplyObject(r);
            deny_forget(rs, &k, 0);
        } else if (rc == RL_OK)
            rc = c;
        ab_free(&k);
        ab_free(&a);
    }
    return rc;
}

/* On a cluster: the items of a decision with state, grouped by the slot of their state keys
 * (every rule of one (level, key) shares one), the groups in the order of their first item. */
typedef struct groups {
    size_t n;
    size_t len[RL_MAX_APPLIED];
    size_t item[RL_MAX_APPLIED][RL_MAX_APPLIED];
    char at[RL_MAX_APPLIED][32]; /* each group's now, when it took */
    int took[RL_MAX_APPLIED];
    redisReply *reply[RL_MAX_APPLIED]; /* each group's reply that took (out points into it) */
} groups;

static void group_items(redis_store *rs, const rl_plan *plan, rl_decision *d,
                        const unsigned *shard, groups *g)
{
    unsigned gslot[RL_MAX_APPLIED];
    memset(g, 0, sizeof *g);
    for (size_t i = 0; i < plan->n; i++) {
        const rl_applied *ap = &d->applied[i];
        if (info_of(rs, ap->rule)->stateless)
            continue;
        abuf k;
        ab_init(&k);
        ab_state_key(rs, &k, ap->level, ap->slot, shard[ap->level], ap->key, ap->keylen);
        unsigned slot = k.oom ? 0 : rld_cluster_slot(k.buf, k.len[0]);
        ab_free(&k);
        size_t j = 0;
        while (j < g->n && gslot[j] != slot)
            j++;
        if (j == g->n)
            gslot[g->n++] = slot;
        g->item[j][g->len[j]++] = i;
    }
}

/* What group j took, as items to give back. */
static size_t taken_of(redis_store *rs, const rl_plan *plan, const rl_decision *d,
                       const groups *g, size_t j, const unsigned *shard, const item_out *out,
                       uitem *u)
{
    size_t n = 0;
    for (size_t m = g->len[j]; m-- > 0;) { /* the last take first: one key may be taken twice */
        size_t i = g->item[j][m];
        const rl_applied *ap = &d->applied[i];
        const type_info *ti = info_of(rs, ap->rule);
        if (!rl_plan_item_takes(plan, i, out[i].wait))
            continue;
        u[n++] = (uitem){ap->level,   ap->slot, shard[ap->level], ap->key, ap->keylen, ti,
                         ap->rule,    ti->holds ? 'h' : 'r',        plan->items[i].cost,
                         out[i].before, out[i].after};
    }
    return n;
}

/* Gives back what every group that took has taken. */
static int undo_groups(redis_store *rs, const rl_plan *plan, const rl_decision *d, groups *g,
                       size_t upto, const unsigned *shard, const item_out *out, rl_err *err)
{
    char nowbuf[24] = "";
    int rc = RL_OK;
    if (rs->manual)
        snprintf(nowbuf, sizeof nowbuf, "%lld", (long long)plan->now);
    for (size_t j = 0; j < upto; j++) {
        uitem u[RL_MAX_APPLIED];
        if (!g->took[j])
            continue;
        size_t n = taken_of(rs, plan, d, g, j, shard, out, u);
        int c = n ? undo(rs, nowbuf, g->at[j], u, n, NULL, err) : RL_OK;
        if (c != RL_OK && rc == RL_OK)
            rc = c;
        g->took[j] = 0;
    }
    return rc;
}

/* Group j's script: dry, or taking when every item of the group that blocks fits. */
static int decide_group(redis_store *rs, const rl_plan *plan, rl_decision *d, groups *g,
                        size_t j, int dry, const unsigned *shard, item_out *out, rl_err *err)
{
    abuf k, a;
    ab_init(&k);
    ab_init(&a);
    redisReply *r = NULL;
    build_decide(rs, plan, d, g->item[j], g->len[j], dry, "", shard, NULL, &k, &a);
    int rc = k.oom || a.oom ? rl_errf(err, RL_ENOMEM, "out of memory")
                            : eval(rs, RLD_SCRIPT_DECIDE, &k, &a, &r, err);
    ab_free(&k);
    ab_free(&a);
    if (rc != RL_OK)
        return rc;
    if (read_decide(r, g->item[j], g->len[j], !dry, out, g->at[j], sizeof g->at[j]) != 0) {
        freeReplyObject(r);
        return rl_errf(err, RL_ESTORE, "redis: unexpected reply to a decision");
    }
    int fits = !dry;
    for (size_t m = 0; m < g->len[j] && fits; m++) {
        size_t i = g->item[j][m];
        fits = out[i].wait == 0 || !rl_plan_item_blocks(plan, i);
    }
    g->took[j] = fits;
    if (g->reply[j])
        freeReplyObject(g->reply[j]);
    g->reply[j] = r; /* freed by decide_cluster */
    return RL_OK;
}

/* Records the reservation made by an allowed decision on a cluster: the decision script with
 * only the records of the items that took, on the slot of the reservation. DUP_ID when the
 * id is taken. */
static int record_resv(redis_store *rs, const rl_plan *plan, rl_decision *d, const char *id,
                       const unsigned *shard, const item_out *out, rl_err *err)
{
    abuf k, a;
    ab_init(&k);
    ab_init(&a);
    redisReply *r = NULL;
    size_t m = 0;
    for (int f = 0; f < RLD_DECIDE_FIELDS; f++) {
        if (f == RLD_DECIDE_NOW)
            rs->manual ? ab_i64(&a, plan->now) : ab_str(&a, "");
        else if (f == RLD_DECIDE_DRY)
            ab_str(&a, "0");
        else if (f == RLD_DECIDE_COST)
            ab_i64(&a, plan->cost);
        else if (f == RLD_DECIDE_USAGE)
            ab_usage(&a, plan, id);
        else if (f == RLD_DECIDE_RESERVATION_TTL)
            ab_i64(&a, rs->cfg->reservation_ttl);
        else if (f == RLD_DECIDE_FLOOR_MS)
            ab_i64(&a, rs->floor_ms);
        else if (f == RLD_DECIDE_HOLD_MS)
            ab_i64(&a, hold_ms(rs));
        else if (f == RLD_DECIDE_ID)
            ab_str(&a, id);
        else if (f == RLD_DECIDE_RESERVE)
            ab_str(&a, "1");
        else if (f == RLD_DECIDE_MODES || f == RLD_DECIDE_KEEP || f == RLD_DECIDE_GENERAL)
            ab_str(&a, f == RLD_DECIDE_KEEP ? "0" : "");
        else if (f == RLD_DECIDE_ITEMS)
            ab_i64(&a, 0); /* set below */
    }
    size_t items_at = a.n - (RLD_DECIDE_FIELDS - RLD_DECIDE_ITEMS);
    for (size_t i = 0; i < plan->n; i++) {
        const rl_applied *ap = &d->applied[i];
        const type_info *ti = info_of(rs, ap->rule);
        if (ti->stateless || !rl_plan_item_takes(plan, i, out[i].wait))
            continue;
        /* an item decided "here" (no key, wait 0) that carries the record */
        for (int f = 0; f < RLD_DECIDE_ITEM_FIELDS; f++) {
            if (f == RLD_DECIDE_ITEM_KEY || f == RLD_DECIDE_ITEM_WAIT)
                ab_i64(&a, 0);
            else if (f == RLD_DECIDE_ITEM_RECORD)
                ab_record(rs, &a, ap, ti, &plan->items[i], id, shard[ap->level]);
            else
                ab_str(&a, "");
        }
        m++;
    }
    ab_resv_key(rs, &k, id);
    ab_index_key(rs, &k, resv_shard(id));
    int rc = RL_OK;
    if (k.oom || a.oom)
        rc = rl_errf(err, RL_ENOMEM, "out of memory");
    if (rc == RL_OK) {
        char num[24];
        int l = snprintf(num, sizeof num, "%zu", m);
        abuf b; /* a with the count of items in place */
        ab_init(&b);
        for (size_t i = 0; i < a.n; i++)
            i == items_at ? ab_add(&b, num, (size_t)l) : ab_add(&b, a.buf + a.off[i], a.len[i]);
        rc = b.oom ? rl_errf(err, RL_ENOMEM, "out of memory")
                   : eval(rs, RLD_SCRIPT_DECIDE, &k, &b, &r, err);
        ab_free(&b);
    }
    ab_free(&k);
    ab_free(&a);
    if (rc != RL_OK)
        return rc;
    rc = reply_is(r, "dup") ? DUP_ID
         : reply_is(r, "ok") ? RL_OK
                             : rl_errf(err, RL_ESTORE, "redis: unexpected reply to a reservation");
    freeReplyObject(r);
    return rc;
}

/* A cluster: one script per group in order, each taking only when its own rules fit; when one
 * denies, the later ones are only asked (dry) and the earlier ones give back what they took and
 * are asked again, so that their status is as if nothing had been taken. DUP_ID when the
 * reservation id is taken (everything given back). */
static int decide_groups(redis_store *rs, const rl_plan *plan, rl_decision *d, groups *g, int dry,
                         int reserve, const char *id, const unsigned *shard, item_out *out,
                         rl_err *err)
{
    size_t denied = SIZE_MAX;
    int rc = RL_OK;
    for (size_t j = 0; j < g->n && rc == RL_OK; j++) {
        rc = decide_group(rs, plan, d, g, j, dry || denied != SIZE_MAX, shard, out, err);
        if (rc == RL_OK && !dry && denied == SIZE_MAX && !g->took[j])
            denied = j;
    }
    if (rc != RL_OK) {
        undo_groups(rs, plan, d, g, g->n, shard, out, NULL);
        return rc;
    }
    if (denied != SIZE_MAX) {
        rc = undo_groups(rs, plan, d, g, denied, shard, out, err);
        for (size_t j = 0; j < denied && rc == RL_OK; j++)
            rc = decide_group(rs, plan, d, g, j, 1, shard, out, err);
        return rc;
    }
    /* a reservation is made when asked for or when a rule that holds slots takes */
    int make = reserve && (plan->flags & RL_RESERVE);
    for (size_t i = 0; i < plan->n && reserve && !make; i++)
        make = info_of(rs, d->applied[i].rule)->holds && rl_plan_item_takes(plan, i, out[i].wait);
    if (dry || !make || !id[0])
        return RL_OK;
    rc = record_resv(rs, plan, d, id, shard, out, err);
    if (rc != RL_OK)
        undo_groups(rs, plan, d, g, g->n, shard, out, NULL);
    return rc;
}

static int decide_cluster(redis_store *rs, const rl_plan *plan, rl_decision *d, int blocked,
                          int reserve, const char *id, const unsigned *shard, item_out *out,
                          rl_err *err)
{
    groups g;
    int dry = (plan->flags & RL_DRY_RUN) || blocked;
    group_items(rs, plan, d, shard, &g);
    int rc = decide_groups(rs, plan, d, &g, dry, reserve, id, shard, out, err);
    for (size_t j = 0; j < g.n; j++)
        if (g.reply[j])
            freeReplyObject(g.reply[j]);
    return rc;
}

/* A decision between its plan and its answer. */
typedef struct dstate {
    unsigned shard[RL_MAX_LEVELS];
    char id[RL_RESERVATION_ID];
    size_t nstate; /* items whose state Redis keeps */
    int reserve, blocked;
    int local; /* answered from the cache of denials (deny_local) */
    item_out out[RL_MAX_APPLIED];
    uint64_t ticket[RL_MAX_APPLIED]; /* for learning item i's denial; 0: not cached */
    uint64_t hash[RL_MAX_APPLIED], fp[RL_MAX_APPLIED]; /* its state key's, its rule's */
    uint64_t sig;                                      /* the decision's (deny_sig) */
} dstate;

/* What a decision needs before any call: each level's shard, whether it reserves, and the
 * waits of the rules decided here. */
static int decide_begin(redis_store *rs, const rl_plan *plan, rl_decision *d, dstate *st,
                        rl_err *err)
{
    int holds = 0;
    if (rs->manual && plan->now < 0)
        return rl_errf(err, RL_EINVAL, "now: must not be negative with the Redis store");
    for (size_t i = 0; i < plan->n; i++) {
        const type_info *ti = info_of(rs, d->applied[i].rule);
        holds |= ti && ti->holds;
    }
    for (size_t l = 0; l < rs->cfg->nlevels; l++)
        st->shard[l] = pick_shard(rs->shards[l]);
    st->id[0] = '\0';
    st->local = 0;
    st->reserve = !(plan->flags & RL_DRY_RUN) && (holds || (plan->flags & RL_RESERVE));
    memset(st->out, 0, plan->n * sizeof st->out[0]);
    return decide_here(rs, plan, d, &st->nstate, &st->blocked, err);
}

/* The decision from what the scripts answered (st->out): as the script decides, allowed when
 * every item that blocks fits; a reservation when asked for or when a rule that holds takes. */
static void decide_end(redis_store *rs, const rl_plan *plan, rl_decision *d, const dstate *st)
{
    int allowed = 1, made = st->reserve && (plan->flags & RL_RESERVE);
    for (size_t i = 0; i < plan->n; i++) {
        rl_applied *ap = &d->applied[i];
        const rl_rule *rule = ap->rule;
        const type_info *ti = info_of(rs, rule);
        if (!ti->stateless)
            ap->wait = st->out[i].wait;
        allowed &= ap->wait == 0 || !rl_plan_item_blocks(plan, i);
        ap->shadow_denied = (plan->items[i].mode & RL_ITEM_SHADOW) && ap->wait != 0;
        made |= st->reserve && ti->holds && rl_plan_item_takes(plan, i, ap->wait);
        ap->has_status = rule->type->report != NULL;
        if (!ap->has_status)
            continue;
        rl_rule_status rs_st;
        if (ti->stateless) {
            rl_rule_peek(rule, zero_state, ap->key, ap->keylen, plan->now, 0, &rs_st);
        } else {
            rs_st.limit = st->out[i].st[0];
            rs_st.remaining = st->out[i].st[1];
            rs_st.reset_after = st->out[i].st[2];
            rs_st.window = st->out[i].st[3];
            rs_st.next = st->out[i].st[4];
        }
        rl_applied_set_status(ap, &rs_st);
    }
    if (made && allowed)
        memcpy(d->reservation, st->id, sizeof st->id);
}

/* ---- the cache of denials (denycache.h) ------------------------------------------------------
 *
 * A denial is cached for an item whose wait blocks under every flag (neither a shadow nor a
 * charge rule: its wait is phase 1's, the same for a dry run, a reservation or an item list,
 * and denies the whole request), of a built-in type (whose wait is the earliest time the amount
 * fits, checked against the memory store by the differential replay; a plug-in's may be an
 * estimate), whose state is one key (not a sharded level) and which holds no slots (held
 * slots also come back by expiring, which nothing announces). Any such item
 * found denied at least as long in the cache denies the request: nothing but a give-back
 * shortens a wait, and give-backs are announced. */

/* Item i's state key into k (emptied first) when its denials can be cached. */
static int deny_key(redis_store *rs, const rl_plan *plan, const rl_decision *d, size_t i, abuf *k)
{
    const rl_applied *ap = &d->applied[i];
    const type_info *ti = info_of(rs, ap->rule);
    if (plan->items[i].mode || !ti || !ti->builtin || ti->stateless || ti->holds ||
        rs->shards[ap->level] > 1)
        return 0;
    k->n = 0;
    k->used = 0;
    ab_state_key(rs, k, ap->level, ap->slot, 0, ap->key, ap->keylen);
    return !k->oom && k->len[0] <= DC_KEY_MAX;
}

/* The cache's clock: the caller's with a manual clock (what Redis decided at), else this
 * instance's monotonic clock. */
static rl_ns deny_clock(const redis_store *rs, const rl_plan *plan)
{
    return rs->manual ? plan->now : rld_mono_ns();
}

/* Sets applied rule ap's status as the decision reports it, for a rule without state. */
static void status_here(const rl_plan *plan, rl_applied *ap)
{
    rl_rule_status x;
    rl_rule_peek(ap->rule, zero_state, ap->key, ap->keylen, plan->now, 0, &x);
    rl_applied_set_status(ap, &x);
}

/* The signature of a decision: its rules, keys and amounts (0 never). */
static uint64_t deny_sig(const rl_plan *plan, const rl_decision *d, const dstate *st)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < plan->n; i++) {
        const rl_applied *ap = &d->applied[i];
        int64_t f[6] = {ap->level,           ap->slot,          ap->keylen, plan->items[i].need,
                        plan->items[i].mode, (int64_t)st->fp[i]};
        const unsigned char *p = (const unsigned char *)f;
        for (size_t j = 0; j < sizeof f; j++)
            h = (h ^ p[j]) * 0x100000001b3ull;
        for (size_t j = 0; j < ap->keylen; j++)
            h = (h ^ (unsigned char)ap->key[j]) * 0x100000001b3ull;
    }
    return h ? h : 1;
}

/* Answers the decision from the cache when some item of it is denied there (not a dry run:
 * one asks for the statuses, which only Redis has): 1 with d filled as decide_end would, each
 * such item's wait and status counting down, every other item with state waiting 0 and
 * reporting the status the same decision had when denied (when the cache kept it: a decision
 * of at most DC_ITEMS rules, asked again alike) or none; counted under the level of the
 * longest wait. Otherwise 0, with the tickets for learning from Redis's answer (deny_learn) in
 * st. */
static int deny_local(redis_store *rs, const rl_plan *plan, rl_decision *d, dstate *st)
{
    abuf k;
    rl_ns now = deny_clock(rs, plan);
    rld_denial best = {0}, one;
    /* a manual clock may go back: the state may then have moved past a denial, at a time
     * later than this one (Redis decides at the later of the two), so only a time not before
     * the latest this instance sent is answered here */
    rl_ns latest = __atomic_load_n(&rs->dc_latest, __ATOMIC_RELAXED);
    while (rs->manual && now > latest &&
           !__atomic_compare_exchange_n(&rs->dc_latest, &latest, now, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
        ;
    rl_ns wait[RL_MAX_APPLIED];
    rl_rule_status sts[RL_MAX_APPLIED];
    int has[RL_MAX_APPLIED], hit[RL_MAX_APPLIED], any = 0;
    int ask = !(plan->flags & RL_DRY_RUN) && (!rs->manual || now >= latest);
    size_t level = 0;
    ab_init(&k);
    for (size_t i = 0; i < plan->n; i++)
        st->fp[i] = rld_denycache_fingerprint(d->applied[i].rule);
    st->sig = deny_sig(plan, d, st);
    for (size_t i = 0; i < plan->n; i++) {
        st->ticket[i] = 0;
        hit[i] = 0;
        if (!deny_key(rs, plan, d, i, &k))
            continue;
        st->hash[i] = rld_denycache_hash(k.buf, k.len[0]);
        hit[i] = ask && rld_denycache_lookup(rs->dc, st->hash[i], k.buf, k.len[0], st->fp[i],
                                             plan->items[i].need, now, st->sig, &one);
        if (hit[i]) {
            wait[i] = one.wait;
            sts[i] = one.st;
            has[i] = one.has_st;
            if (one.wait > best.wait) {
                best = one;
                level = d->applied[i].level;
            }
        }
        any |= hit[i];
        if (!hit[i])
            st->ticket[i] = rld_denycache_ticket(rs->dc, st->hash[i]);
    }
    ab_free(&k);
    if (!any)
        return 0;
    int whole = best.sig != 0 && best.n == plan->n;
    for (size_t i = 0; i < plan->n; i++) {
        rl_applied *ap = &d->applied[i];
        const type_info *ti = info_of(rs, ap->rule);
        ap->has_status = 0;
        if (ti->stateless) { /* its wait is decide_here's */
            ap->has_status = ap->rule->type->report != NULL;
            if (ap->has_status)
                status_here(plan, ap);
        } else if (hit[i]) {
            ap->wait = wait[i];
            ap->has_status = has[i];
            if (has[i])
                rl_applied_set_status(ap, &sts[i]);
        } else {
            ap->wait = 0;
            ap->has_status = whole && best.has[i];
            if (ap->has_status)
                rl_applied_set_status(ap, &best.all[i]);
        }
        ap->shadow_denied = (plan->items[i].mode & RL_ITEM_SHADOW) && ap->wait != 0;
    }
    rld_denycache_count(rs->dc, level);
    st->local = 1;
    return 1;
}

/* After Redis's answer (decide_end): caches each item that it denied and deny_local gave a
 * ticket, with the decision's statuses when it has at most DC_ITEMS rules. */
static void deny_learn(redis_store *rs, const rl_plan *plan, rl_decision *d, const dstate *st)
{
    abuf k;
    rl_ns now = -1;
    rld_denial dn = {0};
    ab_init(&k);
    for (size_t i = 0; i < plan->n; i++) {
        const rl_applied *ap = &d->applied[i];
        if (!st->ticket[i] || ap->wait <= 0 || ap->wait >= RL_WAIT_NEVER ||
            !deny_key(rs, plan, d, i, &k))
            continue;
        if (now < 0) {
            now = deny_clock(rs, plan);
            dn.n = plan->n;
            dn.sig = plan->n <= DC_ITEMS ? st->sig : 0;
            for (size_t j = 0; dn.sig && j < plan->n; j++) {
                const rl_rule_status *x = rl_decision_status(d, j);
                dn.has[j] = x != NULL;
                if (x)
                    dn.all[j] = *x;
            }
        }
        const rl_rule_status *x = rl_decision_status(d, i);
        dn.wait = ap->wait;
        dn.has_st = x != NULL;
        if (x)
            dn.st = *x;
        rld_denycache_insert(rs->dc, st->ticket[i], st->hash[i], k.buf, k.len[0], st->fp[i],
                             plan->items[i].need, now, &dn);
    }
    ab_free(&k);
}

/* After a give-back made by this instance: its keys k[first..] are forgotten here at once (the
 * others hear of it from the script's announcement). */
static void deny_forget(redis_store *rs, const abuf *k, size_t first)
{
    if (!rs->dc || k->oom)
        return;
    for (size_t j = first; j < k->n; j++)
        rld_denycache_forget(rs->dc, k->buf + k->off[j], k->len[j]);
}

static rld_rconn *deny_connect(void *ctx)
{
    redis_store *rs = ctx;
    char ch[160];
    snprintf(ch, sizeof ch, "%sdeny", rs->prefix);
    return rld_redis_store_connect(&rs->base, ch, 2000, NULL);
}

/* Whether the decision needs a call at all (on one Redis): not when Redis keeps nothing of it
 * and it reserves nothing, for the waits decided here are final. */
static int needs_call(const dstate *st)
{
    return st->nstate != 0 || st->reserve;
}

/* ---- leases (redis.md, "Hot keys: leases") ---------------------------------------------------
 *
 * A decision whose leased level's items all fit what the level's lease has left takes them from
 * it here and sends them to the script as decided here (wait 0), the other levels' items as
 * usual; when the script denies the request, what it took from the lease goes back to the lease
 * (nothing was taken anywhere). When the lease lacks them, the script takes a slice beside the
 * request's cost from each of the level's rules, atomically with the other levels; when the
 * state cannot give both, the decision is made again without the slice (exact: it fits or it
 * waits), and no slice is asked for before the state could give one. What is left goes back
 * (undo.lua's refund, which never gives a state more than its take left it) when the lease is
 * older than its ttl_ms, before a new slice, and when the store is destroyed (shutdown). */

/* Whether item i of plan can be answered by its level's lease (lp: the lease, or NULL). */
static lease *lease_of(const redis_store *rs, const rl_plan *plan, const rl_decision *d, size_t i)
{
    const rl_applied *ap = &d->applied[i];
    lease *ls = rs->lease[ap->level];
    const char *def = rs->cfg->levels[ap->level].default_key;
    if (!ls || !def || ap->slot >= RL_MAX_RULES || plan->items[i].mode ||
        plan->items[i].need != plan->items[i].cost || strlen(def) != ap->keylen ||
        memcmp(def, ap->key, ap->keylen) != 0)
        return NULL;
    return ls;
}

/* Gives back what ls has left (ls->mu held); the lease is then empty. */
static void lease_return(redis_store *rs, size_t level, lease *ls)
{
    const rl_level *lv = &rs->cfg->levels[level];
    uitem u[RL_MAX_RULES];
    size_t n = 0;
    int64_t total = 0;
    for (size_t j = 0; ls->live && lv->rules && j < lv->rules->n && j < RL_MAX_RULES; j++) {
        if (ls->left[j] > 0)
            u[n++] = (uitem){.level = level, .slot = (unsigned)j, .key = lv->default_key,
                             .keylen = strlen(lv->default_key), .ti = info_of(rs, &lv->rules->v[j]),
                             .rule = &lv->rules->v[j], .op = 'r', .amount = ls->left[j]};
        total += ls->left[j] > 0 ? ls->left[j] : 0; /* rl_fp */
        ls->left[j] = 0;
    }
    ls->live = 0;
    if (n && undo(rs, "", ls->at, u, n, NULL, NULL) == RL_OK)
        __atomic_add_fetch(&ls->returned, (uint64_t)total, __ATOMIC_RELAXED);
}

/* Before the call: lx[i] for each item (0, LEASED, or the slice to take); *nlocal counts the
 * items answered here. */
static void lease_begin(redis_store *rs, const rl_plan *plan, const rl_decision *d, int64_t *lx,
                        size_t *nlocal)
{
    int state[RL_MAX_LEVELS] = {0}; /* 1 answered here, 2 renewing, 3 to Redis as usual */
    rl_ns mono = rld_mono_ns();
    *nlocal = 0;
    memset(lx, 0, plan->n * sizeof *lx);
    if (rs->cluster || (plan->flags & (RL_DRY_RUN | RL_RESERVE)))
        return;
    for (size_t i = 0; i < plan->n; i++) {
        size_t l = d->applied[i].level;
        if (rs->lease[l] && !lease_of(rs, plan, d, i))
            state[l] = 3; /* one item that cannot: the whole level goes to Redis */
    }
    for (size_t l = 0; l < rs->cfg->nlevels; l++) {
        lease *ls = rs->lease[l];
        if (!ls || state[l])
            continue;
        pthread_mutex_lock(&ls->mu);
        if (ls->live && mono >= ls->until && !ls->renewing)
            lease_return(rs, l, ls);
        int fits = ls->live;
        for (size_t i = 0; fits && i < plan->n; i++)
            if (d->applied[i].level == l && ls->left[d->applied[i].slot] < plan->items[i].cost)
                fits = 0;
        if (fits) {
            state[l] = 1;
            for (size_t i = 0; i < plan->n; i++)
                if (d->applied[i].level == l)
                    ls->left[d->applied[i].slot] -= plan->items[i].cost;
        } else if (!ls->renewing && mono >= ls->retry) {
            state[l] = 2;
            ls->renewing = 1;
            lease_return(rs, l, ls); /* what is left is less than the request: back first */
        } else {
            state[l] = 3;
        }
        pthread_mutex_unlock(&ls->mu);
    }
    for (size_t i = 0; i < plan->n; i++) {
        size_t l = d->applied[i].level;
        lx[i] = state[l] == 1 ? LEASED : state[l] == 2 ? rs->lease[l]->slice : 0;
        *nlocal += state[l] == 1;
    }
}

/* After the call (rc its result, at the script's now): a slice taken is the lease's; what a
 * denied request took from a lease goes back to it. *again: decide once more with lx as this
 * leaves it: when a slice did not fit beside the request, the first time a slice of what the
 * state had left beside the cost (when it had more), else none; the items answered by a lease
 * go to Redis then (their lease got them back) and *nlocal is 0. */
static void lease_end(redis_store *rs, const rl_plan *plan, const rl_decision *d, dstate *st,
                      int rc, const char *at, int64_t *lx, size_t *nlocal, int pass, int *again)
{
    int allowed = rc == RL_OK, done[RL_MAX_LEVELS] = {0};
    rl_ns mono = rld_mono_ns();
    *again = 0;
    for (size_t i = 0; rc == RL_OK && i < plan->n; i++) {
        int64_t w = lx[i] == LEASED ? 0 : st->out[i].wait;
        const type_info *ti = info_of(rs, d->applied[i].rule);
        if (ti && ti->stateless)
            w = d->applied[i].wait;
        allowed &= w == 0 || !rl_plan_item_blocks(plan, i);
        if (lx[i] > 0 && w != 0)
            *again = 1;
    }
    for (size_t i = 0; i < plan->n; i++) {
        size_t l = d->applied[i].level;
        lease *ls = rs->lease[l];
        if (!lx[i] || done[l])
            continue;
        done[l] = 1;
        int renewing = lx[i] > 0, partial = renewing && *again && pass == 0;
        pthread_mutex_lock(&ls->mu);
        for (size_t j = i; j < plan->n; j++) {
            const rl_applied *ap = &d->applied[j];
            if (ap->level != l)
                continue;
            if (lx[j] == LEASED && (!allowed || *again)) {
                ls->left[ap->slot] += plan->items[j].cost; /* taken nowhere, or in Redis next */
                lx[j] = 0;
            } else if (renewing && allowed && !*again) {
                ls->left[ap->slot] += lx[j];
                ls->limit[ap->slot] = st->out[j].st[0];
                ls->window[ap->slot] = st->out[j].st[3];
                rl_ns ttl = ls->ttl;
                if ((ap->rule->type->flags & RL_RULE_PERIODIC) && st->out[j].st[2] > 0 &&
                    st->out[j].st[2] < ttl)
                    ttl = st->out[j].st[2]; /* a period's slice ends with its period */
                if (!ls->live || mono + ttl < ls->until)
                    ls->until = mono + ttl;
                ls->live = 1;
                snprintf(ls->at, sizeof ls->at, "%s", at);
            } else if (renewing && *again) {
                /* what the state has beside the cost, as its status said */
                int64_t rest = rc == RL_OK ? st->out[j].st[1] - plan->items[j].cost : 0;
                lx[j] = partial && rest > 0 ? (rest < ls->slice ? rest : ls->slice) : 0;
                if (!lx[j])
                    partial = 0;
            }
        }
        if (renewing && *again && !partial) {
            /* no slice now: until the state could give one, the level goes to Redis as usual */
            for (size_t j = i; j < plan->n; j++)
                if (d->applied[j].level == l)
                    lx[j] = 0;
            rl_ns w = rc == RL_OK ? st->out[i].wait : 0;
            ls->retry = mono + (w > 0 && w < ls->ttl ? w : ls->ttl);
        }
        if (renewing && !(*again && partial))
            ls->renewing = 0;
        if (lx[i] == LEASED && allowed && !*again)
            __atomic_add_fetch(&ls->local, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&ls->mu);
    }
    if (*again)
        *nlocal = 0;
    /* the status of an item answered here: its rule's limit and window at the take, what the
     * lease has left */
    for (size_t i = 0; !*again && i < plan->n; i++)
        if (lx[i] == LEASED) {
            lease *ls = rs->lease[d->applied[i].level];
            unsigned sl = d->applied[i].slot;
            st->out[i] = (item_out){.wait = 0};
            pthread_mutex_lock(&ls->mu);
            st->out[i].st[0] = ls->limit[sl];
            st->out[i].st[1] = ls->left[sl];
            st->out[i].st[3] = ls->window[sl];
            pthread_mutex_unlock(&ls->mu);
        }
}

static int rs_decide(void *cls, const rl_plan *plan, rl_decision *d, rl_err *err)
{
    redis_store *rs = cls;
    dstate st;
    int rc;
    if ((rc = decide_begin(rs, plan, d, &st, err)) != RL_OK)
        return rc;
    if (rs->dc && deny_local(rs, plan, d, &st))
        return RL_OK;
    rc = DUP_ID;
    for (int attempt = 0; attempt < 3 && rc == DUP_ID; attempt++) {
        if (st.reserve)
            new_id(rs, st.id);
        if (rs->cluster) {
            int asked = st.reserve && (plan->flags & RL_RESERVE);
            rc = st.nstate ? decide_cluster(rs, plan, d, st.blocked, st.reserve, st.id, st.shard,
                                            st.out, err)
                 : asked && !st.blocked
                     ? record_resv(rs, plan, d, st.id, st.shard, st.out, err)
                     : RL_OK;
        } else {
            int64_t lx[RL_MAX_APPLIED];
            size_t nlocal;
            char at[32] = "0";
            int again = 0;
            lease_begin(rs, plan, d, lx, &nlocal);
            for (int pass = 0;; pass++) {
                st.nstate -= nlocal;
                rc = needs_call(&st) ? decide_one(rs, plan, d, st.id, st.shard, lx, st.out, at,
                                                  sizeof at, err)
                                     : RL_OK;
                st.nstate += nlocal;
                if (!rs->nleased)
                    break;
                lease_end(rs, plan, d, &st, rc, at, lx, &nlocal, pass, &again);
                if (!again || rc != RL_OK)
                    break;
            }
        }
    }
    if (rc == DUP_ID)
        return rl_errf(err, RL_ESTORE, "redis: no free reservation id");
    if (rc != RL_OK)
        return rc;
    decide_end(rs, plan, d, &st);
    if (rs->dc)
        deny_learn(rs, plan, d, &st);
    return RL_OK;
}

/* ---- many decisions at once ---------------------------------------------------------------- */

/* One decision of a batch: its state, its arguments, and its call. */
typedef struct many_item {
    dstate st;
    abuf k, a;
    const char **argv;
    size_t *len;
    size_t call; /* its index in the calls; SIZE_MAX: none */
} many_item;

/* Builds decision i's call into it (into calls[*m], counting it). */
static int many_build(redis_store *rs, const rl_plan *plan, rl_decision *d, many_item *it,
                      rld_call *calls, size_t *m, rl_err *err)
{
    size_t sel[RL_MAX_APPLIED];
    it->call = SIZE_MAX;
    int rc = decide_begin(rs, plan, d, &it->st, err);
    if (rc != RL_OK || (rs->dc && deny_local(rs, plan, d, &it->st)) || !needs_call(&it->st))
        return rc;
    for (size_t i = 0; i < plan->n; i++)
        sel[i] = i;
    if (it->st.reserve)
        new_id(rs, it->st.id);
    build_decide(rs, plan, d, sel, plan->n, (plan->flags & RL_DRY_RUN) != 0, it->st.id,
                 it->st.shard, NULL, &it->k, &it->a);
    if (ab_join(&it->k, &it->a, NULL, NULL, 0, &it->argv, &it->len) != 0)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    calls[*m] = (rld_call){.nkeys = (int)it->k.n, .argc = (int)(it->k.n + it->a.n),
                           .argv = it->argv, .len = it->len};
    it->call = (*m)++;
    return RL_OK;
}

/* Decision i from its call's outcome; a reservation id found taken decides it again alone. */
static int many_finish(redis_store *rs, const rl_plan *plan, rl_decision *d, many_item *it,
                       rld_call *c, rl_err *err)
{
    size_t sel[RL_MAX_APPLIED];
    if (!c) {
        if (!it->st.local)
            decide_end(rs, plan, d, &it->st);
        return RL_OK;
    }
    if (c->rc != RL_OK) {
        *err = c->err;
        return c->rc;
    }
    for (size_t i = 0; i < plan->n; i++)
        sel[i] = i;
    int rc = RL_OK;
    if (reply_is(c->reply, "dup"))
        rc = rs_decide(rs, plan, d, err);
    else if (read_decide(c->reply, sel, plan->n, 0, it->st.out, NULL, 0) != 0)
        rc = rl_errf(err, RL_ESTORE, "redis: unexpected reply to a decision");
    else {
        decide_end(rs, plan, d, &it->st);
        if (rs->dc)
            deny_learn(rs, plan, d, &it->st);
    }
    freeReplyObject(c->reply);
    c->reply = NULL;
    return rc;
}

/* On one Redis, the calls of all n decisions go in one write (rld_pool_exec_many); on a
 * cluster each decision goes its own way. */
static void rs_decide_many(void *cls, const rl_plan *const *plans, rl_decision *const *ds,
                           size_t n, int *rc, rl_err *errs)
{
    redis_store *rs = cls;
    /* a leased level's decisions take from its lease one by one (rs_decide) */
    many_item *it = rs->cluster || rs->nleased || n < 2 ? NULL : malloc(n * sizeof *it);
    rld_call *calls = it ? malloc(n * sizeof *calls) : NULL;
    size_t m = 0;
    if (!calls) {
        free(it);
        for (size_t i = 0; i < n; i++)
            rc[i] = rs_decide(rs, plans[i], ds[i], &errs[i]);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        ab_init(&it[i].k);
        ab_init(&it[i].a);
        it[i].argv = NULL;
        rc[i] = many_build(rs, plans[i], ds[i], &it[i], calls, &m, &errs[i]);
    }
    rld_pool_exec_many(rs->pool, RLD_SCRIPT_DECIDE, calls, m);
    for (size_t i = 0; i < n; i++) {
        if (rc[i] == RL_OK)
            rc[i] = many_finish(rs, plans[i], ds[i], &it[i],
                                it[i].call == SIZE_MAX ? NULL : &calls[it[i].call], &errs[i]);
        else if (it[i].call != SIZE_MAX && calls[it[i].call].reply)
            freeReplyObject(calls[it[i].call].reply);
        free(it[i].argv);
        ab_free(&it[i].k);
        ab_free(&it[i].a);
    }
    free(calls);
    free(it);
}

/* ---- reservations -------------------------------------------------------------------------- */

/* One rule a reservation remembers, pointing into the reply that read it. */
typedef struct ritem {
    int refundable, holds;
    unsigned unit; /* what the rule counted (rl_unit) */
    int64_t taken;
    const char *tag;
    size_t taglen;
    unsigned slot, shard;
    long level; /* index in this configuration, -1 when no level has that name */
    const char *key;
    size_t keylen;
} ritem;

typedef struct resv {
    redisReply *reply;
    char at[32];    /* when it was taken (decimal), "" when not recorded */
    rl_fp cost;     /* the cost it took */
    int has_amt, priced;
    rl_fp amt[RL_UNITS]; /* its amounts by unit (ab_usage), when has_amt */
    rl_price price;      /* the prices of its dollars, when priced (model unused) */
    size_t n;
    ritem item[RL_MAX_APPLIED];
} resv;

static long level_index(const redis_store *rs, const char *name, size_t len)
{
    for (size_t l = 0; l < rs->cfg->nlevels; l++)
        if (strlen(rs->cfg->levels[l].name) == len &&
            memcmp(rs->cfg->levels[l].name, name, len) == 0)
            return (long)l;
    return -1;
}

static int parse_item(const redis_store *rs, const char *s, size_t len, ritem *it)
{
    const char *f[7], *end = s + len;
    f[0] = s;
    for (int i = 1; i < 7; i++) {
        const char *bar = memchr(f[i - 1], '|', (size_t)(end - f[i - 1]));
        if (!bar)
            return -1;
        f[i] = bar + 1;
    }
    if (f[1] - f[0] != 3)
        return -1;
    it->refundable = s[0] == '1' || (s[0] >= 'A' + RL_UNIT_USD && s[0] < 'A' + RL_UNITS);
    it->unit = s[0] == '1' || !it->refundable ? RL_UNIT_COST : (unsigned)(s[0] - 'A');
    it->holds = s[1] == '1';
    it->taken = strtoll(f[1], NULL, 10);
    it->tag = f[2];
    it->taglen = (size_t)(f[3] - f[2] - 1);
    it->slot = (unsigned)strtoul(f[3], NULL, 10);
    it->shard = (unsigned)strtoul(f[4], NULL, 10);
    it->level = level_index(rs, f[5], (size_t)(f[6] - f[5] - 1));
    it->key = f[6];
    it->keylen = (size_t)(end - f[6]);
    return 0;
}

/* A reservation's amounts by unit (ab_usage's text, len bytes at s) into out. */
static void parse_usage(const char *s0, size_t len, resv *out)
{
    char buf[512], *end;
    if (len >= sizeof buf)
        return;
    memcpy(buf, s0, len);
    buf[len] = 0;
    const char *s = buf;
    out->has_amt = 1;
    for (unsigned u = RL_UNIT_USD; u < RL_UNITS; u++) {
        out->amt[u] = strtoll(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
    }
    if (*s != '|')
        return;
    out->priced = 1;
    s++;
    for (unsigned k = 0; k < RL_MAX_DIMS; k++) {
        out->price.per_million[k] = strtoll(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
    }
}

static void set_at(resv *out, const char *s, size_t len)
{
    if (len < sizeof out->at) {
        memcpy(out->at, s, len);
        out->at[len] = 0;
    }
}

/* The next field of a reservation's record (lib.lua's read_resv has the format) from *p
 * before end, to f and len; -1 past its last field. */
static int next_field(const char **p, const char *end, const char **f, size_t *len)
{
    if (!*p)
        return -1;
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    *f = *p;
    *len = (size_t)((nl ? nl : end) - *p);
    *p = nl ? nl + 1 : NULL;
    return 0;
}

/* A reservation's record into out. */
static void parse_resv(const redis_store *rs, const redisReply *r, resv *out)
{
    const char *p = r->str, *end = r->str + r->len, *f;
    size_t len;
    if (next_field(&p, end, &f, &len) || next_field(&p, end, &f, &len)) /* settled, cost */
        return;
    out->cost = strtoll(f, NULL, 10);
    if (next_field(&p, end, &f, &len))
        return;
    set_at(out, f, len);
    if (next_field(&p, end, &f, &len) || next_field(&p, end, &f, &len))
        return; /* exp, then the amounts */
    if (len)
        parse_usage(f, len, out);
    while (out->n < RL_MAX_APPLIED && next_field(&p, end, &f, &len) == 0)
        if (parse_item(rs, f, len, &out->item[out->n]) == 0)
            out->n++;
}

/* A reservation kept as a hash (as older builds wrote it) into out. */
static void parse_resv_hash(const redis_store *rs, const redisReply *r, resv *out)
{
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *f = r->element[i], *v = r->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        if (strcmp(f->str, "at") == 0)
            set_at(out, v->str, v->len);
        else if (strcmp(f->str, "cost") == 0)
            out->cost = strtoll(v->str, NULL, 10);
        else if (strcmp(f->str, "usage") == 0)
            parse_usage(v->str, v->len, out);
        if (f->str[0] != 'i')
            continue;
        unsigned long k_ = strtoul(f->str + 1, NULL, 10);
        if (k_ < 1 || k_ > RL_MAX_APPLIED || parse_item(rs, v->str, v->len, &out->item[k_ - 1]))
            continue;
        if (k_ > out->n)
            out->n = k_;
    }
}

static int fetch_resv(redis_store *rs, const char *cmd, const char *id, redisReply **r,
                      rl_err *err)
{
    abuf k;
    ab_init(&k);
    ab_str(&k, cmd);
    ab_resv_key(rs, &k, id);
    int rc = command(rs, &k, r, err);
    ab_free(&k);
    return rc;
}

/* Reads a reservation's rules (they never change once written). RL_ENOTFOUND when it is gone. */
static int read_resv(redis_store *rs, const char *id, resv *out, rl_err *err)
{
    redisReply *r;
    rl_err e;
    memset(out, 0, sizeof *out);
    int rc = fetch_resv(rs, "GET", id, &r, &e);
    int hash = rc == RL_ESTORE && strstr(e.msg, "WRONGTYPE");
    if (hash)
        rc = fetch_resv(rs, "HGETALL", id, &r, &e);
    if (rc != RL_OK) {
        if (err)
            *err = e;
        return rc;
    }
    if (hash ? r->type != REDIS_REPLY_ARRAY || r->elements == 0
             : r->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return RL_ENOTFOUND;
    }
    out->reply = r;
    if (hash)
        parse_resv_hash(rs, r, out);
    else
        parse_resv(rs, r, out);
    return RL_OK;
}

/* The rule now in force for a remembered item when it is still of the item's type; NULL
 * otherwise. *ref as for rl_resolver. */
static const rl_rule *rule_now(redis_store *rs, const ritem *it, const type_info **ti,
                               rl_rules **ref)
{
    *ref = NULL;
    if (it->level < 0)
        return NULL;
    const rl_rule *r =
        rs->res->rule_at(rs->res->ctx, (size_t)it->level, it->slot, it->key, it->keylen, ref);
    *ti = r ? info_of(rs, r) : NULL;
    if (!r || !*ti || !(*ti)->tag || strlen((*ti)->tag) != it->taglen ||
        memcmp((*ti)->tag, it->tag, it->taglen) != 0) {
        rl_rules_unref(*ref);
        *ref = NULL;
        return NULL;
    }
    return r;
}

/* A remembered item's state key (to k), and (to a) its fields as a settlement's (release 0)
 * or a release's item in args.def's order, then its rule's port's parameters. */
static void ab_item(const redis_store *rs, abuf *k, abuf *a, const ritem *it,
                    const type_info *ti, const rl_rule *rule, int release, rl_fp amount,
                    rl_ns now)
{
    ab_state_key(rs, k, (size_t)it->level, it->slot, it->shard, it->key, it->keylen);
    int nf = release ? RLD_RELEASE_ITEM_FIELDS : RLD_SETTLE_ITEM_FIELDS;
    for (int f = 0; f < nf; f++) {
        if (release ? f == RLD_RELEASE_ITEM_TAG : f == RLD_SETTLE_ITEM_TAG)
            ab_str(a, ti->tag);
        else if (release && f == RLD_RELEASE_ITEM_HELD)
            ab_i64(a, it->taken);
        else if (!release && f == RLD_SETTLE_ITEM_AMOUNT)
            ab_i64(a, amount);
    }
    ab_params(a, ti, rule, rs->shards[it->level], now);
}

/* On a cluster, a reservation's states lie outside its slot: the item goes to u (with the
 * reference to drop in refs) for undo() once the reservation's own script has run. */
static void defer_item(redis_store *rs, const ritem *it, const type_info *ti, const rl_rule *rule,
                       rl_rules *ref, char op, uitem *u, rl_rules **refs, size_t *n)
{
    u[*n] = (uitem){(size_t)it->level, it->slot, it->shard, it->key, it->keylen, ti, rule, op,
                    it->taken, NULL, NULL};
    refs[(*n)++] = ref;
    (void)rs;
}

static void unref_all(rl_rules **refs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        rl_rules_unref(refs[i]);
}

static int rs_settle(void *cls, const char *id, const rl_actual *actual, rl_ns now,
                     const rl_outcome *o,
                     rl_settlement *out, rl_err *err)
{
    redis_store *rs = cls;
    resv rv;
    abuf k, a;
    ab_init(&k);
    ab_init(&a);
    redisReply *r = NULL;

    if (!valid_id(id))
        return rl_errf(err, RL_ENOTFOUND, "reservation: unknown or expired");
    if (rs->manual && now < 0)
        return rl_errf(err, RL_EINVAL, "now: must not be negative with the Redis store");
    int rc = read_resv(rs, id, &rv, err);
    if (rc == RL_ENOTFOUND)
        return rl_errf(err, RL_ENOTFOUND, "reservation: unknown or expired");
    if (rc != RL_OK)
        return rc;
    uitem u[RL_MAX_APPLIED];
    rl_rules *refs[RL_MAX_APPLIED];
    size_t nu = 0;
    rl_fp act[RL_UNITS];
    rl_settlement st;
    rl_settle_amounts(rv.cost, rv.has_amt ? rv.amt : NULL, rv.priced ? &rv.price : NULL, actual,
                      &st, act);
    ab_resv_key(rs, &k, id);
    for (int f = 0; f < RLD_SETTLE_FIELDS; f++) {
        switch (f) {
        case RLD_SETTLE_NOW:
            rs->manual ? ab_i64(&a, now) : ab_str(&a, "");
            break;
        case RLD_SETTLE_ACTUAL:
            ab_i64(&a, act[RL_UNIT_COST]);
            break;
        case RLD_SETTLE_FLOOR_MS:
            ab_i64(&a, rs->floor_ms);
            break;
        case RLD_SETTLE_HOLD_MS:
            ab_i64(&a, hold_ms(rs));
            break;
        case RLD_SETTLE_KIND:
            ab_i64(&a, o ? (int64_t)o->kind : 0);
            break;
        case RLD_SETTLE_LATENCY:
            ab_i64(&a, o ? o->latency : -1);
            break;
        case RLD_SETTLE_CHANNEL:
            ab_key(rs, &a, "deny", NULL);
            break;
        }
    }
    for (size_t i = 0; i < rv.n; i++) {
        const ritem *it = &rv.item[i];
        const type_info *ti;
        rl_rules *ref;
        /* the slots a reservation holds learn its outcome (not on Redis Cluster, whose
         * settlements go key by key through undo.lua) */
        int learns = o && it->holds && !it->refundable;
        const rl_rule *rule = it->refundable || learns ? rule_now(rs, it, &ti, &ref) : NULL;
        if (!rule)
            continue;
        rl_fp amount = learns ? 0 : it->taken - act[it->unit];
        if (rs->cluster) {
            if (amount == 0 && !learns) {
                rl_rules_unref(ref);
                continue;
            }
            defer_item(rs, it, ti, rule, ref, learns ? 'h' : 'r', u, refs, &nu);
            u[nu - 1].amount = amount; /* an outcome to learn leaves held slots held: 0 */
            continue;
        }
        ab_item(rs, &k, &a, it, ti, rule, 0, amount, now);
        rl_rules_unref(ref);
    }
    rc = eval(rs, RLD_SCRIPT_SETTLE, &k, &a, &r, err);
    if (rc == RL_OK)
        deny_forget(rs, &k, 1);
    ab_free(&k);
    ab_free(&a);
    if (rc != RL_OK) {
        unref_all(refs, nu);
        freeReplyObject(rv.reply);
        return rc;
    }
    if (reply_is(r, "ok") && r->elements == 2) {
        if (nu) { /* the states, each slot by its own script */
            char nowbuf[24] = "";
            if (rs->manual)
                snprintf(nowbuf, sizeof nowbuf, "%lld", (long long)now);
            rc = undo(rs, nowbuf, rv.at, u, nu, o, err);
        }
        *out = st;
    } else if (reply_is(r, "settled")) {
        rc = rl_errf(err, RL_ESETTLED, "reservation: already settled");
    } else if (reply_is(r, "notfound")) {
        rc = rl_errf(err, RL_ENOTFOUND, "reservation: unknown or expired");
    } else {
        rc = rl_errf(err, RL_ESTORE, "redis: unexpected reply to a settlement");
    }
    unref_all(refs, nu);
    freeReplyObject(rv.reply);
    freeReplyObject(r);
    return rc;
}

/* Ends a reservation: released by its client, or expired by housekeeping (now_arg is the
 * script's now: a decimal, or "" for Redis TIME; now this instance's). *settled tells whether
 * it had been settled. */
static int end_resv(redis_store *rs, const char *id, const char *now_arg, rl_ns now, int expire,
                    const rl_outcome *o, int *settled, int *holds, rl_err *err)
{
    resv rv;
    abuf k, a;
    ab_init(&k);
    ab_init(&a);
    redisReply *r = NULL;
    int rc = read_resv(rs, id, &rv, err);
    if (rc == RL_ENOTFOUND && !expire)
        return rc;
    if (rc != RL_OK && rc != RL_ENOTFOUND)
        return rc;
    uitem u[RL_MAX_APPLIED];
    rl_rules *refs[RL_MAX_APPLIED];
    size_t nu = 0;
    ab_resv_key(rs, &k, id);
    ab_index_key(rs, &k, resv_shard(id));
    for (int f = 0; f < RLD_RELEASE_FIELDS; f++) {
        switch (f) {
        case RLD_RELEASE_NOW:
            ab_str(&a, now_arg);
            break;
        case RLD_RELEASE_MODE:
            ab_str(&a, expire ? "expire" : "release");
            break;
        case RLD_RELEASE_ID:
            ab_str(&a, id);
            break;
        case RLD_RELEASE_FLOOR_MS:
            ab_i64(&a, rs->floor_ms);
            break;
        case RLD_RELEASE_HOLD_MS:
            ab_i64(&a, hold_ms(rs));
            break;
        case RLD_RELEASE_KIND:
            ab_i64(&a, o ? (int64_t)o->kind : 0);
            break;
        case RLD_RELEASE_LATENCY:
            ab_i64(&a, o ? o->latency : -1);
            break;
        case RLD_RELEASE_CHANNEL:
            ab_key(rs, &a, "deny", NULL);
            break;
        }
    }
    *holds = 0;
    for (size_t i = 0; i < rv.n; i++) {
        const ritem *it = &rv.item[i];
        const type_info *ti;
        rl_rules *ref;
        *holds |= it->holds;
        const rl_rule *rule = it->holds ? rule_now(rs, it, &ti, &ref) : NULL;
        if (!rule)
            continue;
        if (rs->cluster) {
            defer_item(rs, it, ti, rule, ref, 'h', u, refs, &nu);
            continue;
        }
        ab_item(rs, &k, &a, it, ti, rule, 1, 0, now);
        rl_rules_unref(ref);
    }
    rc = eval(rs, RLD_SCRIPT_RELEASE, &k, &a, &r, err);
    if (rc == RL_OK)
        deny_forget(rs, &k, 2);
    ab_free(&k);
    ab_free(&a);
    if (rc != RL_OK) {
        unref_all(refs, nu);
        if (rv.reply)
            freeReplyObject(rv.reply);
        return rc;
    }
    if (reply_is(r, "ok") && r->elements == 2) {
        *settled =
            r->element[1]->type == REDIS_REPLY_STRING && strcmp(r->element[1]->str, "1") == 0;
        if (nu) /* the held slots, each slot's states by their own script */
            rc = undo(rs, now_arg, rv.at, u, nu, expire ? UNDO_EXPIRED : o, err);
    } else if (reply_is(r, "notfound") || reply_is(r, "early")) {
        rc = RL_ENOTFOUND;
    } else {
        rc = rl_errf(err, RL_ESTORE, "redis: unexpected reply to a release");
    }
    unref_all(refs, nu);
    if (rv.reply)
        freeReplyObject(rv.reply);
    freeReplyObject(r);
    return rc;
}

static int rs_release(void *cls, const char *id, rl_ns now, const rl_outcome *o, rl_err *err)
{
    redis_store *rs = cls;
    char nowbuf[24] = "";
    int settled, holds;
    if (!valid_id(id))
        return rl_errf(err, RL_ENOTFOUND, "reservation: unknown, expired or released");
    if (rs->manual && now < 0)
        return rl_errf(err, RL_EINVAL, "now: must not be negative with the Redis store");
    if (rs->manual)
        snprintf(nowbuf, sizeof nowbuf, "%lld", (long long)now);
    int rc = end_resv(rs, id, nowbuf, now, 0, o, &settled, &holds, err);
    if (rc == RL_ENOTFOUND)
        return rl_errf(err, RL_ENOTFOUND, "reservation: unknown, expired or released");
    return rc;
}

/* ---- housekeeping -------------------------------------------------------------------------- */

static void heartbeat(redis_store *rs)
{
    abuf k, a;
    ab_init(&k);
    ab_init(&a);
    redisReply *r;
    ab_key(rs, &k, "fleet", NULL);
    ab_str(&a, rs->instance);
    ab_i64(&a, PEER_STALE_MS);
    ab_i64(&a, FLEET_TTL_MS);
    if (eval(rs, RLD_SCRIPT_HEARTBEAT, &k, &a, &r, NULL) == RL_OK) {
        if (r->type == REDIS_REPLY_INTEGER && r->integer > 0)
            __atomic_store_n(&rs->peers, (unsigned)r->integer, __ATOMIC_RELAXED);
        freeReplyObject(r);
    }
    ab_free(&k);
    ab_free(&a);
}

/* Expires the reservations of index part n (always 0 on one Redis) whose time is up, whichever
 * instance made them. *active counts the reservations in it. */
static void expire_part(redis_store *rs, rl_ns now, unsigned n, int64_t *active)
{
    abuf k, a;
    ab_init(&k);
    ab_init(&a);
    redisReply *r;
    ab_index_key(rs, &k, n);
    for (int f = 0; f < RLD_DUE_FIELDS; f++) {
        if (f == RLD_DUE_NOW)
            rs->manual ? ab_i64(&a, now) : ab_str(&a, "");
        else if (f == RLD_DUE_BATCH)
            ab_i64(&a, EXPIRE_BATCH);
        else if (f == RLD_DUE_HOLD_MS)
            ab_i64(&a, hold_ms(rs));
    }
    int rc = eval(rs, RLD_SCRIPT_DUE, &k, &a, &r, NULL);
    ab_free(&k);
    ab_free(&a);
    if (rc != RL_OK)
        return;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2) {
        const char *now_arg = rs->manual ? r->element[0]->str : "";
        int64_t part = parse_i64(r->element[1]);
        for (size_t i = 2; i < r->elements; i++) {
            const redisReply *e = r->element[i];
            int settled, holds;
            if (e->type != REDIS_REPLY_STRING || !valid_id(e->str) ||
                end_resv(rs, e->str, now_arg, now, 1, NULL, &settled, &holds, NULL) != RL_OK)
                continue;
            part--;
            if (!settled || holds) /* the client never finished it */
                __atomic_add_fetch(&rs->expired, 1, __ATOMIC_RELAXED);
        }
        *active += part > 0 ? part : 0;
    }
    freeReplyObject(r);
}

/* On a cluster, RESV_PER_TICK parts of the index a tick, in turn (each part every 0.4 s at ten
 * ticks a second). */
static void expire_due(redis_store *rs, rl_ns now)
{
    int64_t active = 0;
    if (!rs->cluster) {
        expire_part(rs, now, 0, &active);
        __atomic_store_n(&rs->active, (uint64_t)active, __ATOMIC_RELAXED);
        return;
    }
    for (unsigned k = 0; k < RESV_PER_TICK; k++) {
        unsigned n = rs->due_next;
        rs->due_next = (n + 1) % RESV_SHARDS;
        rs->part_active[n] = 0;
        expire_part(rs, now, n, &rs->part_active[n]);
    }
    for (unsigned n = 0; n < RESV_SHARDS; n++)
        active += rs->part_active[n];
    __atomic_store_n(&rs->active, (uint64_t)active, __ATOMIC_RELAXED);
}

/* The level of a state key "P<level>:<slot>[.<shard>]:<key>", or -1 for any other key under
 * the prefix (r:<id> has no digit after its colon, resv, fleet and quotas have no colon). */
static long state_key_level(const redis_store *rs, const char *s, size_t len)
{
    if (len < rs->plen + 4)
        return -1;
    const char *name = s + rs->plen, *end = s + len;
    const char *colon = memchr(name, ':', (size_t)(end - name));
    if (!colon || colon + 1 >= end || colon[1] < '0' || colon[1] > '9')
        return -1;
    const char *p = colon + 1;
    while (p < end && ((*p >= '0' && *p <= '9') || *p == '.'))
        p++;
    if (p >= end || *p != ':')
        return -1;
    return level_index(rs, name, (size_t)(colon - name));
}

/* The fleet's housekeeping (expiring reservations, counting state keys) is one instance's at a
 * time: the holder of the claim P duty, renewed with each heartbeat (duty.lua). The holder
 * publishes the reservations active and the keys per level it counted ("active k0 k1 ..."); the
 * others take those figures, and ask again with their heartbeat or, when the claim lapses
 * sooner, just after it lapses, so that a holder that died is replaced within the claim's TTL
 * (and a tick). A failed call leaves the claim as it was believed. With a manual clock every
 * instance does the work itself, at the times it is given. */
static void duty(redis_store *rs, int release)
{
    char fig[32 + 24 * RL_MAX_LEVELS] = "";
    abuf k, a;
    ab_init(&k);
    ab_init(&a);
    redisReply *r;
    ab_key(rs, &k, "duty", NULL);
    ab_str(&a, rs->instance);
    ab_i64(&a, DUTY_TTL_MS);
    ab_str(&a, release ? "release" : "claim");
    if (rs->duty && !release) {
        size_t n = (size_t)snprintf(fig, sizeof fig, "%llu",
                                    (unsigned long long)__atomic_load_n(&rs->active,
                                                                        __ATOMIC_RELAXED));
        for (size_t l = 0; l < rs->cfg->nlevels && n < sizeof fig; l++)
            n += (size_t)snprintf(fig + n, sizeof fig - n, " %zu",
                                  __atomic_load_n(&rs->counted[l], __ATOMIC_RELAXED));
    }
    ab_str(&a, fig);
    int rc = eval(rs, RLD_SCRIPT_DUTY, &k, &a, &r, NULL);
    ab_free(&k);
    ab_free(&a);
    if (rc != RL_OK)
        return;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_STRING &&
        r->element[2]->type == REDIS_REPLY_INTEGER) {
        int held = r->element[0]->integer == 1;
        long long left = r->element[2]->integer;
        if (!held && left >= 0 && left < HEARTBEAT_NS / 1000000)
            rs->next_duty = rld_mono_ns() + (left + 1) * 1000000LL;
        if (held && !rs->duty) { /* a fresh pass; the figures taken meanwhile stand till it ends */
            snprintf(rs->cursor, sizeof rs->cursor, "0");
            rs->scan_node = 0;
            memset(rs->counting, 0, sizeof rs->counting);
        }
        rs->duty = held;
        const char *p = r->element[1]->str;
        if (!held && *p) {
            char *end;
            unsigned long long v = strtoull(p, &end, 10);
            if (end != p)
                __atomic_store_n(&rs->active, (uint64_t)v, __ATOMIC_RELAXED);
            for (size_t l = 0; l < rs->cfg->nlevels && end != p; l++) {
                p = end;
                v = strtoull(p, &end, 10);
                if (end != p)
                    __atomic_store_n(&rs->counted[l], (size_t)v, __ATOMIC_RELAXED);
            }
        }
    }
    freeReplyObject(r);
}

/* One SCAN step counting state keys per level; a full pass publishes the counts. */
static void scan_step(redis_store *rs)
{
    abuf k;
    ab_init(&k);
    const char *argv[6];
    size_t len[6];
    redisReply *r;
    ab_str(&k, "SCAN");
    ab_str(&k, rs->cursor);
    ab_str(&k, "MATCH");
    ab_str(&k, "");
    for (size_t i = 0; i < rs->plen; i++) { /* the prefix, its glob characters escaped */
        char c = rs->prefix[i];
        if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\')
            ab_cat(&k, "\\", 1);
        ab_cat(&k, &c, 1);
    }
    ab_cat(&k, "*", 1);
    ab_str(&k, "COUNT");
    ab_str(&k, "1000");
    if (k.oom) {
        ab_free(&k);
        return;
    }
    for (int i = 0; i < 6; i++) {
        argv[i] = k.buf + k.off[i];
        len[i] = k.len[i];
    }
    rld_pool *pool = rs->pool;
    size_t nodes = 1;
    if (rs->cluster) { /* every primary in turn, each to its end */
        rld_pool *p[RLD_CLUSTER_MAX_NODES];
        nodes = rld_cluster_primaries(rs->cluster, p, RLD_CLUSTER_MAX_NODES);
        if (rs->scan_node >= nodes)
            rs->scan_node = 0;
        pool = nodes ? p[rs->scan_node] : NULL;
    }
    int rc = pool ? rld_pool_command(pool, 6, argv, len, &r, NULL) : RL_ESTORE;
    ab_free(&k);
    if (rc != RL_OK)
        return;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_ARRAY) {
        const redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            const redisReply *e = keys->element[i];
            long l = e->type == REDIS_REPLY_STRING ? state_key_level(rs, e->str, e->len) : -1;
            if (l >= 0)
                rs->counting[l]++;
        }
        snprintf(rs->cursor, sizeof rs->cursor, "%s", r->element[0]->str);
        if (strcmp(rs->cursor, "0") == 0 && ++rs->scan_node >= nodes)
            rs->scan_node = 0;
        if (strcmp(rs->cursor, "0") == 0 && rs->scan_node == 0)
            for (size_t l = 0; l < rs->cfg->nlevels; l++) {
                __atomic_store_n(&rs->counted[l], rs->counting[l], __ATOMIC_RELAXED);
                rs->counting[l] = 0;
            }
    }
    freeReplyObject(r);
}

static void rs_tick(void *cls, rl_ns now)
{
    redis_store *rs = cls;
    if (pthread_mutex_trylock(&rs->tick_mu) != 0)
        return; /* another thread is at it */
    rl_ns mono = rld_mono_ns();
    if (mono >= rs->next_beat) {
        rs->next_beat = mono + HEARTBEAT_NS;
        heartbeat(rs);
        rs->next_duty = mono + HEARTBEAT_NS;
        if (!rs->manual)
            duty(rs, 0);
    } else if (!rs->manual && !rs->duty && mono >= rs->next_duty) {
        rs->next_duty = mono + HEARTBEAT_NS;
        duty(rs, 0);
    }
    if ((rs->manual || rs->duty) &&
        (rs->cluster ? rld_cluster_probe(rs->cluster) : rld_pool_probe(rs->pool))) {
        expire_due(rs, now);
        scan_step(rs);
    }
    for (size_t l = 0; rs->nleased && rs->cfg && l < rs->cfg->nlevels; l++) {
        lease *ls = rs->lease[l]; /* an idle instance's lease goes back when it is due too */
        if (ls && pthread_mutex_trylock(&ls->mu) == 0) {
            if (ls->live && !ls->renewing && mono >= ls->until)
                lease_return(rs, l, ls);
            pthread_mutex_unlock(&ls->mu);
        }
    }
    pthread_mutex_unlock(&rs->tick_mu);
}

static size_t rs_keys(void *cls, size_t level)
{
    redis_store *rs = cls;
    return level < RL_MAX_LEVELS ? __atomic_load_n(&rs->counted[level], __ATOMIC_RELAXED) : 0;
}

static void rs_stats(void *cls, rl_stats *out)
{
    redis_store *rs = cls;
    out->reservations_active = __atomic_load_n(&rs->active, __ATOMIC_RELAXED);
    out->reservations_expired = __atomic_load_n(&rs->expired, __ATOMIC_RELAXED);
}

static void rs_destroy(void *cls)
{
    redis_store *rs = cls;
    if (rs->cfg && (rs->cluster ? rld_cluster_up(rs->cluster) : rld_pool_up(rs->pool))) {
        /* hand the housekeeping on and leave the fleet at once rather than when the heartbeat
         * goes stale */
        if (rs->duty)
            duty(rs, 1);
        abuf k;
        ab_init(&k);
        redisReply *r;
        ab_str(&k, "ZREM");
        ab_key(rs, &k, "fleet", NULL);
        ab_str(&k, rs->instance);
        if (command(rs, &k, &r, NULL) == RL_OK)
            freeReplyObject(r);
        ab_free(&k);
    }
    for (size_t l = 0; l < RL_MAX_LEVELS; l++) {
        if (!rs->lease[l])
            continue;
        if (rs->cfg && l < rs->cfg->nlevels && rld_pool_up(rs->pool))
            lease_return(rs, l, rs->lease[l]); /* what is left goes back to the fleet */
        pthread_mutex_destroy(&rs->lease[l]->mu);
        free(rs->lease[l]);
    }
    rld_denycache_free(rs->dc); /* its follower connects through the pool */
    rld_pool_free(rs->pool);
    rld_cluster_free(rs->cluster);
    rld_net_client_tls_free(rs->tls);
    pthread_mutex_destroy(&rs->tick_mu);
    free(rs->types);
    free(rs->prefix);
    free(rs);
}

/* Deletes the state of every rule of key at level (each shard's): one DEL per state key, so
 * that on a cluster each goes to its own slot. */
static int rs_reset(void *cls, size_t level, const char *key, size_t keylen, size_t *cleared,
                    rl_err *err)
{
    redis_store *rs = cls;
    abuf gone; /* the deleted state keys, "<len>:<key>" each, as the scripts announce them */
    ab_init(&gone);
    ab_str(&gone, "PUBLISH");
    ab_key(rs, &gone, "deny", NULL);
    ab_str(&gone, "");
    *cleared = 0;
    for (unsigned slot = 0; slot < RL_MAX_RULES; slot++) {
        rl_rules *ref = NULL;
        const rl_rule *rule = rs->res->rule_at(rs->res->ctx, level, slot, key, keylen, &ref);
        rl_rules_unref(ref);
        if (!rule)
            break;
        unsigned nshards = rs->shards[level] > 1 ? rs->shards[level] : 1;
        for (unsigned sh = 0; sh < nshards; sh++) {
            abuf k;
            redisReply *r;
            ab_init(&k);
            ab_str(&k, "DEL");
            ab_state_key(rs, &k, level, slot, sh, key, keylen);
            int rc = command(rs, &k, &r, err);
            if (rc == RL_OK && r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
                char len[24];
                *cleared += (size_t)r->integer;
                ab_cat(&gone, len, (size_t)snprintf(len, sizeof len, "%zu:", k.len[1]));
                ab_cat(&gone, k.buf + k.off[1], k.len[1]);
                if (rs->dc) /* here at once; the others by the announcement below */
                    rld_denycache_forget(rs->dc, k.buf + k.off[1], k.len[1]);
            }
            if (rc == RL_OK)
                freeReplyObject(r);
            ab_free(&k);
            if (rc != RL_OK) {
                ab_free(&gone);
                return rc;
            }
        }
    }
    /* every instance forgets its cached denials of these keys */
    int rc = RL_OK;
    redisReply *r;
    if (*cleared && (rc = command(rs, &gone, &r, err)) == RL_OK)
        freeReplyObject(r);
    ab_free(&gone);
    return rc;
}

static const rl_store_ops redis_ops = {
    .name = "redis",
    .attach = rs_attach,
    .decide = rs_decide,
    .decide_many = rs_decide_many,
    .settle = rs_settle,
    .release = rs_release,
    .tick = rs_tick,
    .keys = rs_keys,
    .stats = rs_stats,
    .reset = rs_reset,
    .destroy = rs_destroy,
};

int rld_redis_store_new(const rld_redis_options *opt, rl_store **out, rl_err *err)
{
    rld_redis_addr addr;
    *out = NULL;
    int rc = RL_OK;
    if (opt->ncluster && opt->cluster)
        addr = opt->cluster[0];
    else if (opt->addr)
        addr = *opt->addr;
    else
        rc = rld_redis_parse_url(opt->url ? opt->url : DEFAULT_URL, &addr, err);
    if (rc != RL_OK)
        return rc;
    if (addr.sentinel.n > RLD_MAX_SENTINELS || (addr.sentinel.n && !addr.sentinel.master[0]))
        return rl_errf(err, RL_EINVAL, "store.sentinel: needs 1 to %d nodes and the master's name",
                       RLD_MAX_SENTINELS);
    if (opt->ttl_floor_ms < 0)
        return rl_errf(err, RL_EINVAL, "ttl_floor_ms: must not be negative");
    if (opt->ncluster && addr.sentinel.n)
        return rl_errf(err, RL_EINVAL, "store.cluster: not with store.sentinel");
    redis_store *rs = calloc(1, sizeof *rs);
    const char *prefix = opt->prefix ? opt->prefix : "rl:";
    rld_redis_addr *seeds = NULL;
    if (!rs || !(rs->prefix = strdup(prefix)) ||
        (opt->ncluster && !(seeds = malloc(opt->ncluster * sizeof *seeds)))) {
        if (rs)
            free(rs->prefix);
        free(rs);
        return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    if (opt->tls || addr.tls_url) {
        rld_net_client_tls_files defaults = {.ca_name = "store.tls.ca",
                                             .cert_name = "store.tls.cert",
                                             .key_name = "store.tls.key"};
        rs->tls = rld_net_client_tls_new(opt->tls ? opt->tls : &defaults, err);
        rc = rs->tls ? RL_OK : RL_EINVAL;
    }
    addr.tls = rs->tls;
    for (size_t i = 0; i < opt->ncluster; i++) {
        seeds[i] = opt->cluster[i];
        seeds[i].tls = rs->tls;
    }
    if (rc == RL_OK)
        rc = opt->ncluster ? rld_cluster_new(seeds, opt->ncluster, opt->timeout_ms, opt->pool,
                                             &rs->cluster, err)
                           : rld_pool_new(&addr, opt->timeout_ms, opt->pool, &rs->pool, err);
    free(seeds);
    if (rc != RL_OK) {
        rld_net_client_tls_free(rs->tls);
        free(rs->prefix);
        free(rs);
        return rc;
    }
    if (rs->cluster)
        rld_cluster_use_functions(rs->cluster, opt->functions);
    else
        rld_pool_use_functions(rs->pool, opt->functions);
    if (opt->deny_cache && !(rs->dc = rld_denycache_new())) {
        rld_pool_free(rs->pool);
        rld_cluster_free(rs->cluster);
        rld_net_client_tls_free(rs->tls);
        free(rs->prefix);
        free(rs);
        return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    rs->plen = strlen(prefix);
    rs->manual = opt->manual_clock != 0;
    rs->floor_ms = opt->ttl_floor_ms;
    for (size_t l = 0; l < RL_MAX_LEVELS; l++) {
        rs->shards[l] = opt->shards[l] > 1 ? opt->shards[l] : 1;
        if (opt->lease_slice[l] > 0 && (rs->lease[l] = calloc(1, sizeof(lease)))) {
            pthread_mutex_init(&rs->lease[l]->mu, NULL);
            rs->lease[l]->slice = (int64_t)opt->lease_slice[l] * RL_FP_ONE;
            rs->lease[l]->ttl = (rl_ns)(opt->lease_ttl_ms[l] > 0 ? opt->lease_ttl_ms[l] : 1000) *
                                1000000;
            rs->nleased++;
        }
    }
    rs->idkey = rl_random64();
    snprintf(rs->instance, sizeof rs->instance, "%016llx", (unsigned long long)rl_random64());
    snprintf(rs->cursor, sizeof rs->cursor, "0");
    pthread_mutex_init(&rs->tick_mu, NULL);

    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) {
        sa.sa_handler = SIG_IGN;
        sigaction(SIGPIPE, &sa, NULL);
    }
    rs->base.ops = &redis_ops;
    rs->base.cls = rs;
    *out = &rs->base;
    return RL_OK;
}

/* A string setting into a fixed buffer (the rows' bounds make it fit). */
static void copy_setting(char *dst, size_t cap, const char *s)
{
    snprintf(dst, cap, "%s", s ? s : "");
}

/* store.cluster's seeds into seeds[0..set->ncluster-1], with store.username and password. A
 * list given empty (set->cluster not NULL, unlike a list not given) is refused, not read as no
 * cluster at all. */
static int cluster_seeds(const rld_settings *set, rld_redis_addr *seeds, rl_err *err)
{
    if (set->redis_url && strcmp(set->redis_url, DEFAULT_URL) != 0)
        return rl_errf(err, RL_EINVAL,
                       "store.url: not with store.cluster (the cluster's slot map names the "
                       "nodes; give the nodes' store.username and store.password instead)");
    if (set->nsentinels || set->sentinel_master)
        return rl_errf(err, RL_EINVAL,
                       "store.sentinel: not with store.cluster (a cluster fails over by itself)");
    if (set->redis_db)
        return rl_errf(err, RL_EINVAL, "store.db: a Redis Cluster has only database 0");
    if (set->ncluster < 1 || set->ncluster > RLD_CLUSTER_MAX_NODES)
        return rl_errf(err, RL_EINVAL, "store.cluster: must list 1 to %d nodes",
                       RLD_CLUSTER_MAX_NODES);
    for (size_t i = 0; i < set->ncluster; i++) {
        char what[64];
        memset(&seeds[i], 0, sizeof seeds[i]);
        snprintf(what, sizeof what, "store.cluster[%zu]", i);
        int rc = rld_redis_parse_hostport(set->cluster[i], what, seeds[i].host,
                                          sizeof seeds[i].host, &seeds[i].port, err);
        if (rc != RL_OK)
            return rc;
        copy_setting(seeds[i].user, sizeof seeds[i].user, set->redis_username);
        copy_setting(seeds[i].pass, sizeof seeds[i].pass, set->redis_password);
    }
    return RL_OK;
}

int rld_redis_store_addr(const rld_settings *set, rld_redis_addr *out, rl_err *err)
{
    if (set->cluster) { /* given, even empty */
        rld_redis_addr *seeds = calloc(set->ncluster ? set->ncluster : 1, sizeof *seeds);
        if (!seeds)
            return rl_errf(err, RL_ENOMEM, "out of memory");
        int rc = cluster_seeds(set, seeds, err);
        if (rc == RL_OK)
            *out = seeds[0];
        free(seeds);
        return rc;
    }
    const char *extra = set->redis_password ? "password"
                        : set->redis_username ? "username"
                        : set->redis_db       ? "db"
                                              : NULL;
    memset(out, 0, sizeof *out);
    if (!set->nsentinels && !set->sentinel_master) {
        if (extra)
            return rl_errf(err, RL_EINVAL,
                           "store.%s: only with store.sentinel (with store.url, the credentials "
                           "and the database are part of the URL)",
                           extra);
        return rld_redis_parse_url(set->redis_url ? set->redis_url : DEFAULT_URL, out, err);
    }
    if (set->redis_url && strcmp(set->redis_url, DEFAULT_URL) != 0)
        return rl_errf(err, RL_EINVAL,
                       "store.url: not with store.sentinel (the sentinels name the primary; give "
                       "the data nodes' store.username, store.password and store.db instead)");
    rld_sentinel *s = &out->sentinel;
    if (set->nsentinels < 1 || set->nsentinels > RLD_MAX_SENTINELS)
        return rl_errf(err, RL_EINVAL, "store.sentinel.nodes: must list 1 to %d sentinels",
                       RLD_MAX_SENTINELS);
    for (size_t i = 0; i < set->nsentinels; i++) {
        char what[64];
        snprintf(what, sizeof what, "store.sentinel.nodes[%zu]", i);
        int rc = rld_redis_parse_hostport(set->sentinels[i], what, s->host[i], sizeof s->host[i],
                                          &s->port[i], err);
        if (rc != RL_OK)
            return rc;
    }
    s->n = set->nsentinels;
    copy_setting(s->master, sizeof s->master, set->sentinel_master);
    copy_setting(s->user, sizeof s->user, set->sentinel_username);
    copy_setting(s->pass, sizeof s->pass, set->sentinel_password);
    copy_setting(out->user, sizeof out->user, set->redis_username);
    copy_setting(out->pass, sizeof out->pass, set->redis_password);
    out->db = set->redis_db;
    return RL_OK;
}

/* A boolean variable of envoyproxy/ratelimit's: 0 when unset or empty. */
static int env_bool(const char *name, int *v, rl_err *err)
{
    const char *s = getenv(name);
    *v = s && *s ? rld_value_go_bool(s) : 0;
    if (*v < 0)
        return rl_errf(err, RL_EINVAL,
                       "%s: must be true or false (1, t, true, TRUE, True, 0, f, false, FALSE, "
                       "False)",
                       name);
    return RL_OK;
}

static const char *env_str(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? s : NULL;
}

int rld_redis_store_tls(const rld_settings *set, const rld_redis_addr *addr,
                        rld_net_client_tls_files *f, int *on, rl_err *err)
{
    int rc;
    *on = 0;
    if (set->redis_tls >= 0 || set->redis_tls_ca || set->redis_tls_cert || set->redis_tls_key ||
        set->redis_tls_skip_hostname >= 0) {
        *f = (rld_net_client_tls_files){.ca = set->redis_tls_ca,
                                        .ca_name = "store.tls.ca",
                                        .cert = set->redis_tls_cert,
                                        .cert_name = "store.tls.cert",
                                        .key = set->redis_tls_key,
                                        .key_name = "store.tls.key",
                                        .skip_hostname = set->redis_tls_skip_hostname == 1};
        if (set->redis_tls == 0 && addr->tls_url)
            return rl_errf(err, RL_EINVAL,
                           "store.tls.enabled: false, but store.url starts with rediss://");
        *on = set->redis_tls != 0;
    } else {
        int use, skip;
        if ((rc = env_bool("REDIS_TLS", &use, err)) != RL_OK ||
            (rc = env_bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", &skip, err)) != RL_OK)
            return rc;
        *f = (rld_net_client_tls_files){.ca = env_str("REDIS_TLS_CACERT"),
                                        .ca_name = "REDIS_TLS_CACERT",
                                        .cert = env_str("REDIS_TLS_CLIENT_CERT"),
                                        .cert_name = "REDIS_TLS_CLIENT_CERT",
                                        .key = env_str("REDIS_TLS_CLIENT_KEY"),
                                        .key_name = "REDIS_TLS_CLIENT_KEY",
                                        .skip_hostname = skip};
        *on = use || addr->tls_url;
    }
    if (*on && !f->cert != !f->key)
        return rl_errf(err, RL_EINVAL, "%s: give both %s and %s",
                       f->cert ? f->key_name : f->cert_name, f->cert_name, f->key_name);
    return RL_OK;
}

int rld_redis_store_open(const rld_settings *set, int manual_clock, rl_store **out,
                         rl_store **redis, rl_err *err)
{
    rld_redis_addr addr, *seeds = NULL;
    rld_net_client_tls_files tls;
    int on = 0, rc = rld_redis_store_addr(set, &addr, err);
    if (rc == RL_OK)
        rc = rld_redis_store_tls(set, &addr, &tls, &on, err);
    if (rc == RL_OK && set->ncluster && !(seeds = calloc(set->ncluster, sizeof *seeds)))
        rc = rl_errf(err, RL_ENOMEM, "out of memory");
    if (rc == RL_OK && seeds)
        rc = cluster_seeds(set, seeds, err);
    if (rc != RL_OK) {
        free(seeds);
        return rc;
    }
    rld_redis_options o = {.addr = &addr,
                           .cluster = seeds,
                           .ncluster = seeds ? set->ncluster : 0,
                           .prefix = set->redis_prefix,
                           .timeout_ms = set->redis_timeout_ms,
                           .pool = set->redis_pool,
                           .manual_clock = manual_clock,
                           .functions = set->redis_functions,
                           .deny_cache = set->redis_deny_cache,
                           .tls = on ? &tls : NULL};
    rld_fallback_options f = {.fleet_size = set->fleet_size > 0 ? (unsigned)set->fleet_size : 0,
                              .peers = rld_redis_store_peers};
    rl_store *rs;
    *out = NULL;
    memcpy(o.shards, set->shards, sizeof o.shards);
    memcpy(o.lease_slice, set->lease_slice, sizeof o.lease_slice);
    memcpy(o.lease_ttl_ms, set->lease_ttl_ms, sizeof o.lease_ttl_ms);
    memcpy(f.mode, set->on_error, sizeof f.mode);
    rc = rld_redis_store_new(&o, &rs, err);
    free(seeds);
    if (rc != RL_OK)
        return rc;
    f.peers_ctx = rs;
    if ((rc = rld_fallback_store_new(rs, &f, out, err)) != RL_OK)
        return rc;
    if (redis)
        *redis = rs;
    return RL_OK;
}

void rld_redis_store_health(rl_store *st, rld_redis_health *out)
{
    redis_store *rs = st->cls;
    out->peers = __atomic_load_n(&rs->peers, __ATOMIC_RELAXED);
    if (rs->cluster) {
        out->up = rld_cluster_up(rs->cluster);
        out->errors = rld_cluster_errors(rs->cluster);
        rld_cluster_last_error(rs->cluster, out->last_error, sizeof out->last_error);
        rld_cluster_counts(rs->cluster, &out->calls, &out->writes);
        return;
    }
    rld_pool_counts(rs->pool, &out->calls, &out->writes);
    out->up = rld_pool_up(rs->pool);
    out->errors = rld_pool_errors(rs->pool);
    rld_pool_last_error(rs->pool, out->last_error, sizeof out->last_error);
}

unsigned rld_redis_store_peers(void *ctx)
{
    redis_store *rs = ((rl_store *)ctx)->cls;
    return __atomic_load_n(&rs->peers, __ATOMIC_RELAXED);
}

int rld_redis_store_check_rules(rl_store *st, const rl_rules *rules, const char *where,
                                rl_err *err)
{
    return check_rules(st->cls, rules, where, err);
}

rld_pool *rld_redis_store_pool(rl_store *st) { return ((redis_store *)st->cls)->pool; }

const char *rld_redis_store_prefix(rl_store *st) { return ((redis_store *)st->cls)->prefix; }

rld_cluster *rld_redis_store_cluster(rl_store *st) { return ((redis_store *)st->cls)->cluster; }

int rld_redis_store_call(rl_store *st, int s, int nkeys, int argc, const char **argv,
                         const size_t *argvlen, redisReply **reply, rl_err *err)
{
    size_t len[16];
    if (!argvlen) {
        if (argc > 16)
            return rl_errf(err, RL_EINVAL, "too many arguments");
        for (int i = 0; i < argc; i++)
            len[i] = strlen(argv[i]);
        argvlen = len;
    }
    return exec_at(st->cls, s, s >= 0 ? 0 : 1, nkeys, argc, argv, argvlen, reply, err);
}

rld_rconn *rld_redis_store_connect(rl_store *st, const char *key, int timeout_ms, rl_err *err)
{
    redis_store *rs = st->cls;
    if (!rs->cluster)
        return rld_pool_connect(rs->pool, timeout_ms, err);
    unsigned slot = rld_cluster_slot(key, strlen(key));
    rld_pool *p = rld_cluster_pool(rs->cluster, slot);
    if (!p && rld_cluster_refresh(rs->cluster, err) == RL_OK)
        p = rld_cluster_pool(rs->cluster, slot);
    return p ? rld_pool_connect(p, timeout_ms, err) : NULL;
}

void rld_redis_store_general(rl_store *st, int mode)
{
    ((redis_store *)st->cls)->general = mode;
}

int rld_redis_store_deny_cache(rl_store *st)
{
    return ((redis_store *)st->cls)->dc != NULL;
}

int rld_redis_store_leased(rl_store *st, size_t level)
{
    redis_store *rs = st->cls;
    return level < RL_MAX_LEVELS && rs->lease[level];
}

void rld_redis_store_lease_stats(rl_store *st, size_t level, rld_redis_lease_stats *out)
{
    redis_store *rs = st->cls;
    lease *ls = level < RL_MAX_LEVELS ? rs->lease[level] : NULL;
    memset(out, 0, sizeof *out);
    if (!ls)
        return;
    pthread_mutex_lock(&ls->mu);
    for (size_t j = 0; ls->live && j < RL_MAX_RULES; j++)
        out->held += ls->left[j];
    pthread_mutex_unlock(&ls->mu);
    out->returned = __atomic_load_n(&ls->returned, __ATOMIC_RELAXED);
    out->local = __atomic_load_n(&ls->local, __ATOMIC_RELAXED);
}

uint64_t rld_redis_store_deny_answered(rl_store *st, size_t level)
{
    redis_store *rs = st->cls;
    return rs->dc ? rld_denycache_answered(rs->dc, level) : 0;
}

int rld_redis_store_deny_live(rl_store *st)
{
    redis_store *rs = st->cls;
    return rs->dc ? rld_denycache_live(rs->dc) : 0;
}

uint64_t rld_redis_store_deny_messages(rl_store *st)
{
    redis_store *rs = st->cls;
    return rs->dc ? rld_denycache_messages(rs->dc) : 0;
}
