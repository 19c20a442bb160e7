/*
 * redis_store.c - see redis_store.h. The scripts are the .lua files in service/redis, with the
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

#include "fallback_store.h"
#include "redis_args.h"
#include "redis_scripts.h"
#include "redis_store.h"

#define GRACE_MS 60000 /* how long a reservation outlives its expiry, for housekeeping */
#define HEARTBEAT_NS (1000 * 1000000LL)
#define PEER_STALE_MS 3000 /* an instance silent this long is gone */
#define FLEET_TTL_MS 10000
#define DEFAULT_URL "redis://127.0.0.1:6379/0"
#define EXPIRE_BATCH 100 /* reservations expired per tick at most */

#define MAX_PORT_PARAMS 16

/* What the store knows of a rule type, by registry index. */
typedef struct type_info {
    const char *tag; /* the script's name for it; NULL when the type cannot live in Redis */
    int stateless;
    int refund; /* has refund: settling applies to it (when it counts cost) */
    int holds;
    size_t nparams; /* the parameters its port takes, in order */
    const rl_param_def *def[MAX_PORT_PARAMS];
} type_info;

typedef struct redis_store {
    rl_store base;
    rld_pool *pool;
    char *prefix;
    size_t plen;
    int manual;
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
    unsigned peers;   /* atomic */
    uint64_t expired; /* atomic */
    uint64_t active;  /* atomic */
    char cursor[32];
    size_t counting[RL_MAX_LEVELS];
    size_t counted[RL_MAX_LEVELS]; /* atomic: the last full scan's keys per level */
} redis_store;

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

/* Strings appended into one buffer; pointers are made at the end since the buffer moves. */
typedef struct abuf {
    size_t n, cap, used, bcap;
    size_t *off, *len;
    char *buf;
    int oom;
} abuf;

static void ab_add(abuf *a, const void *s, size_t n)
{
    if (a->oom)
        return;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        size_t *off = realloc(a->off, cap * sizeof *off);
        if (off)
            a->off = off;
        size_t *len = off ? realloc(a->len, cap * sizeof *len) : NULL;
        if (len)
            a->len = len;
        if (!off || !len) {
            a->oom = 1;
            return;
        }
        a->cap = cap;
    }
    if (a->used + n + 1 > a->bcap) {
        size_t cap = a->bcap ? a->bcap : 1024;
        while (a->used + n + 1 > cap)
            cap *= 2;
        char *b = realloc(a->buf, cap);
        if (!b) {
            a->oom = 1;
            return;
        }
        a->buf = b;
        a->bcap = cap;
    }
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
    ab_add(a, b, (size_t)snprintf(b, sizeof b, "%lld", (long long)v));
}

/* Appends to the last string instead of starting a new one. */
static void ab_cat(abuf *a, const void *s, size_t n)
{
    if (a->oom || a->n == 0)
        return;
    size_t last = a->off[a->n - 1], l = a->len[a->n - 1];
    a->n--;
    a->used = last;
    char *tmp = malloc(l + n);
    if (!tmp) {
        a->oom = 1;
        return;
    }
    memcpy(tmp, a->buf + last, l);
    memcpy(tmp + l, s, n);
    ab_add(a, tmp, l + n);
    free(tmp);
}

static void ab_free(abuf *a)
{
    free(a->off);
    free(a->len);
    free(a->buf);
    memset(a, 0, sizeof *a);
}

/* KEYS then ARGV as one argument vector (freed with free(*argv), *len with it). */
static int ab_join(const abuf *k, const abuf *a, const char ***argv, size_t **len)
{
    size_t n = k->n + a->n;
    if (k->oom || a->oom)
        return -1;
    void *mem = malloc(n ? n * (sizeof(char *) + sizeof(size_t)) : 1);
    if (!mem)
        return -1;
    *argv = mem;
    *len = (size_t *)(void *)((char *)mem + n * sizeof(char *));
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

static int eval(redis_store *rs, rld_script s, const abuf *k, const abuf *a, redisReply **r,
                rl_err *err)
{
    const char **argv;
    size_t *len;
    if (ab_join(k, a, &argv, &len) != 0)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    int rc = rld_pool_eval(rs->pool, s, (int)k->n, (int)(k->n + a->n), argv, len, r, err);
    free(argv);
    return rc;
}

/* ---- keys and parameters ------------------------------------------------------------------- */

static void ab_state_key(const redis_store *rs, abuf *k, size_t level, unsigned slot,
                         unsigned shard, const char *key, size_t keylen)
{
    char mid[48];
    const char *name = rs->cfg->levels[level].name;
    ab_add(k, rs->prefix, rs->plen);
    ab_cat(k, name, strlen(name));
    int n = rs->shards[level] > 1 ? snprintf(mid, sizeof mid, ":%u.%u:", slot, shard)
                                  : snprintf(mid, sizeof mid, ":%u:", slot);
    ab_cat(k, mid, (size_t)n);
    ab_cat(k, key, keylen);
}

static void ab_key(const redis_store *rs, abuf *k, const char *what, const char *id)
{
    ab_add(k, rs->prefix, rs->plen);
    ab_cat(k, what, strlen(what));
    if (id)
        ab_cat(k, id, strlen(id));
}

/* The parameters the rule's port takes, each shard's share of them (rl_param_share). */
static void ab_params(abuf *a, const type_info *ti, const rl_rule *r, unsigned n)
{
    for (size_t i = 0; i < ti->nparams; i++) {
        int64_t v;
        memcpy(&v, (const char *)r->params + ti->def[i]->offset, sizeof v);
        ab_i64(a, rl_param_share(ti->def[i], v, n));
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
    ti->tag = port->tag;
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

int rld_redis_store_check_config(const rl_config *cfg, rl_err *err)
{
    redis_store *rs = calloc(1, sizeof *rs);
    if (!rs)
        return rl_errf(err, RL_ENOMEM, "out of memory");
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
    int rc = rld_pool_set_ports(rs->pool, ports, err);
    free(ports);
    return rc;
}

static int rs_attach(void *cls, const rl_config *cfg, const rl_resolver *res, rl_err *err)
{
    redis_store *rs = cls;
    rs->cfg = cfg;
    rs->res = res;
    int rc = check_config(rs, cfg, err);
    if (rc == RL_OK)
        rc = set_ports(rs, cfg->reg, err);
    if (rc != RL_OK)
        return rc;
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
    int refundable = ap->rule->unit == RL_UNIT_COST && ti->refund;
    if (!id[0] || !(refundable || ti->holds)) {
        ab_str(a, "");
        return;
    }
    const char *lname = rs->cfg->levels[ap->level].name;
    int m = snprintf(rec, sizeof rec, "%d%d|%lld|%s|%u|%u|", refundable, ti->holds,
                     (long long)it->cost, ti->tag, ap->slot, shard);
    ab_add(a, rec, (size_t)m);
    ab_cat(a, lname, strlen(lname));
    ab_cat(a, "|", 1);
    ab_cat(a, ap->key, ap->keylen);
}

/* Item i's fields in args.def's order, then its port's parameters. ti is NULL for a rule
 * decided here (its wait is ap->wait). */
static void ab_decide_item(redis_store *rs, abuf *k, abuf *a, const rl_plan *plan, size_t i,
                           const rl_applied *ap, const type_info *ti, const char *id,
                           unsigned shard)
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
            ti ? ab_i64(a, it->cost + (it->need - it->cost) / (int64_t)n) : ab_str(a, "");
            break;
        case RLD_DECIDE_ITEM_COST:
            ti ? ab_i64(a, it->cost) : ab_str(a, "");
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
        ab_params(a, ti, ap->rule, n);
}

/* The items' modes: "" when every item blocks and takes, else a character per item (args.def). */
static void ab_modes(abuf *a, const rl_plan *plan)
{
    char m[RL_MAX_APPLIED];
    int any = 0;
    for (size_t i = 0; i < plan->n; i++) {
        m[i] = plan->items[i].mode & RL_ITEM_SHADOW ? 's'
               : !rl_plan_item_blocks(plan, i)      ? 'c'
                                                    : '-';
        any |= m[i] != '-';
    }
    ab_add(a, m, any ? plan->n : 0);
}

/* Builds a decision's arguments; the waits of rules without state are final in d. Returns
 * RL_OK, or RL_EINVAL for a rule that cannot be decided here; *nstate counts the rules with
 * state. */
static int build_decide(redis_store *rs, const rl_plan *plan, rl_decision *d, const char *id,
                        const unsigned *shard, abuf *k, abuf *a, size_t *nstate, rl_err *err)
{
    *nstate = 0;
    for (int f = 0; f < RLD_DECIDE_FIELDS; f++) {
        switch (f) {
        case RLD_DECIDE_NOW:
            rs->manual ? ab_i64(a, plan->now) : ab_str(a, "");
            break;
        case RLD_DECIDE_DRY:
            ab_str(a, plan->flags & RL_DRY_RUN ? "1" : "0");
            break;
        case RLD_DECIDE_COST:
            ab_i64(a, plan->cost);
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
            ab_modes(a, plan);
            break;
        case RLD_DECIDE_ITEMS:
            ab_i64(a, (int64_t)plan->n);
            break;
        }
    }
    for (size_t i = 0; i < plan->n; i++) {
        rl_applied *ap = &d->applied[i];
        const rl_rule *r = ap->rule;
        const type_info *ti = info_of(rs, r);
        const rl_plan_item *it = &plan->items[i];
        if (ti && ti->stateless) {
            ap->wait = rl_rule_peek(r, zero_state, ap->key, ap->keylen, plan->now, it->need, NULL);
            ab_decide_item(rs, k, a, plan, i, ap, NULL, id, shard[ap->level]);
            continue;
        }
        if (!ti || !ti->tag)
            return rl_errf(err, RL_EINVAL,
                           "rule type %s keeps state that the Redis store cannot hold",
                           r->type->name);
        ab_decide_item(rs, k, a, plan, i, ap, ti, id, shard[ap->level]);
        ++*nstate;
    }
    if (id[0]) {
        ab_key(rs, k, "r:", id);
        ab_key(rs, k, "resv", NULL);
    }
    return RL_OK;
}

static int rs_decide(void *cls, const rl_plan *plan, rl_decision *d, rl_err *err)
{
    redis_store *rs = cls;
    unsigned shard[RL_MAX_LEVELS] = {0};
    char id[RL_RESERVATION_ID] = "";
    int holds = 0, rc = RL_OK;
    redisReply *r = NULL;

    if (rs->manual && plan->now < 0)
        return rl_errf(err, RL_EINVAL, "now: must not be negative with the Redis store");
    for (size_t i = 0; i < plan->n; i++) {
        const type_info *ti = info_of(rs, d->applied[i].rule);
        holds |= ti && ti->holds;
    }
    for (size_t l = 0; l < rs->cfg->nlevels; l++)
        shard[l] = pick_shard(rs->shards[l]);
    int reserve = !(plan->flags & RL_DRY_RUN) && (holds || (plan->flags & RL_RESERVE));

    for (int attempt = 0; attempt < 3; attempt++) {
        abuf k = {0}, a = {0};
        size_t nstate;
        if (reserve)
            new_id(rs, id);
        rc = build_decide(rs, plan, d, id, shard, &k, &a, &nstate, err);
        if (rc == RL_OK && (k.oom || a.oom))
            rc = rl_errf(err, RL_ENOMEM, "out of memory");
        if (rc == RL_OK && nstate == 0 && !reserve) {
            /* nothing kept in Redis: the waits are final */
            ab_free(&k);
            ab_free(&a);
            break;
        }
        if (rc == RL_OK)
            rc = eval(rs, RLD_SCRIPT_DECIDE, &k, &a, &r, err);
        ab_free(&k);
        ab_free(&a);
        if (rc != RL_OK)
            return rc;
        if (reply_is(r, "dup")) {
            freeReplyObject(r);
            r = NULL;
            continue;
        }
        if (!reply_is(r, "ok") || r->elements != 1 + 6 * plan->n) {
            freeReplyObject(r);
            return rl_errf(err, RL_ESTORE, "redis: unexpected reply to a decision");
        }
        break;
    }
    if (rc == RL_OK && !r && reserve)
        return rl_errf(err, RL_ESTORE, "redis: no free reservation id");

    /* as the script decides: allowed when every item that blocks fits; a reservation when
     * asked for or when a rule that holds takes */
    int allowed = 1, made = reserve && (plan->flags & RL_RESERVE);
    for (size_t i = 0; i < plan->n; i++) {
        rl_applied *ap = &d->applied[i];
        const rl_rule *rule = ap->rule;
        const type_info *ti = info_of(rs, rule);
        if (r)
            ap->wait = parse_i64(r->element[1 + 6 * i]);
        allowed &= ap->wait == 0 || !rl_plan_item_blocks(plan, i);
        ap->shadow_denied = (plan->items[i].mode & RL_ITEM_SHADOW) && ap->wait != 0;
        made |= reserve && ti && ti->holds && rl_plan_item_takes(plan, i, ap->wait);
        ap->has_status = rule->type->report != NULL;
        if (!ap->has_status)
            continue;
        if (ti && ti->stateless) {
            rl_rule_peek(rule, zero_state, ap->key, ap->keylen, plan->now, 0, &ap->st);
        } else {
            redisReply **e = &r->element[2 + 6 * i];
            ap->st.limit = parse_i64(e[0]);
            ap->st.remaining = parse_i64(e[1]);
            ap->st.reset_after = parse_i64(e[2]);
            ap->st.window = parse_i64(e[3]);
            ap->st.next = parse_i64(e[4]);
        }
    }
    if (made && allowed)
        memcpy(d->reservation, id, sizeof id);
    if (r)
        freeReplyObject(r);
    return RL_OK;
}

/* ---- reservations -------------------------------------------------------------------------- */

/* One rule a reservation remembers, pointing into the HGETALL reply. */
typedef struct ritem {
    int refundable, holds;
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
    it->refundable = s[0] == '1';
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

/* Reads a reservation's rules (they never change once written). RL_ENOTFOUND when it is gone. */
static int read_resv(redis_store *rs, const char *id, resv *out, rl_err *err)
{
    abuf k = {0};
    const char *argv[2];
    size_t len[2];
    redisReply *r;
    memset(out, 0, sizeof *out);
    ab_str(&k, "HGETALL");
    ab_key(rs, &k, "r:", id);
    if (k.oom) {
        ab_free(&k);
        return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    for (int i = 0; i < 2; i++) {
        argv[i] = k.buf + k.off[i];
        len[i] = k.len[i];
    }
    int rc = rld_pool_command(rs->pool, 2, argv, len, &r, err);
    ab_free(&k);
    if (rc != RL_OK)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        freeReplyObject(r);
        return RL_ENOTFOUND;
    }
    out->reply = r;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *f = r->element[i], *v = r->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING || f->str[0] != 'i')
            continue;
        unsigned long k_ = strtoul(f->str + 1, NULL, 10);
        if (k_ < 1 || k_ > RL_MAX_APPLIED || parse_item(rs, v->str, v->len, &out->item[k_ - 1]))
            continue;
        if (k_ > out->n)
            out->n = k_;
    }
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
                    const type_info *ti, const rl_rule *rule, int release)
{
    ab_state_key(rs, k, (size_t)it->level, it->slot, it->shard, it->key, it->keylen);
    int nf = release ? RLD_RELEASE_ITEM_FIELDS : RLD_SETTLE_ITEM_FIELDS;
    for (int f = 0; f < nf; f++) {
        if (release ? f == RLD_RELEASE_ITEM_TAG : f == RLD_SETTLE_ITEM_TAG)
            ab_str(a, ti->tag);
        else if (release && f == RLD_RELEASE_ITEM_HELD)
            ab_i64(a, it->taken);
    }
    ab_params(a, ti, rule, rs->shards[it->level]);
}

static int rs_settle(void *cls, const char *id, rl_fp actual, rl_ns now, rl_settlement *out,
                     rl_err *err)
{
    redis_store *rs = cls;
    resv rv;
    abuf k = {0}, a = {0};
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
    ab_key(rs, &k, "r:", id);
    for (int f = 0; f < RLD_SETTLE_FIELDS; f++) {
        switch (f) {
        case RLD_SETTLE_NOW:
            rs->manual ? ab_i64(&a, now) : ab_str(&a, "");
            break;
        case RLD_SETTLE_ACTUAL:
            ab_i64(&a, actual);
            break;
        case RLD_SETTLE_FLOOR_MS:
            ab_i64(&a, rs->floor_ms);
            break;
        case RLD_SETTLE_HOLD_MS:
            ab_i64(&a, hold_ms(rs));
            break;
        }
    }
    for (size_t i = 0; i < rv.n; i++) {
        const ritem *it = &rv.item[i];
        const type_info *ti;
        rl_rules *ref;
        const rl_rule *rule = it->refundable ? rule_now(rs, it, &ti, &ref) : NULL;
        if (!rule)
            continue;
        ab_item(rs, &k, &a, it, ti, rule, 0);
        rl_rules_unref(ref);
    }
    rc = eval(rs, RLD_SCRIPT_SETTLE, &k, &a, &r, err);
    ab_free(&k);
    ab_free(&a);
    freeReplyObject(rv.reply);
    if (rc != RL_OK)
        return rc;
    if (reply_is(r, "ok") && r->elements == 2) {
        rl_fp cost = parse_i64(r->element[1]);
        out->reserved = cost;
        out->actual = actual;
        out->refunded = actual < cost ? cost - actual : 0;
        out->charged = actual > cost ? actual - cost : 0;
    } else if (reply_is(r, "settled")) {
        rc = rl_errf(err, RL_ESETTLED, "reservation: already settled");
    } else if (reply_is(r, "notfound")) {
        rc = rl_errf(err, RL_ENOTFOUND, "reservation: unknown or expired");
    } else {
        rc = rl_errf(err, RL_ESTORE, "redis: unexpected reply to a settlement");
    }
    freeReplyObject(r);
    return rc;
}

/* Ends a reservation: released by its client, or expired by housekeeping (now_arg is the
 * script's now: a decimal, or "" for Redis TIME). *settled tells whether it had been settled. */
static int end_resv(redis_store *rs, const char *id, const char *now_arg, int expire, int *settled,
                    int *holds, rl_err *err)
{
    resv rv;
    abuf k = {0}, a = {0};
    redisReply *r = NULL;
    int rc = read_resv(rs, id, &rv, err);
    if (rc == RL_ENOTFOUND && !expire)
        return rc;
    if (rc != RL_OK && rc != RL_ENOTFOUND)
        return rc;
    ab_key(rs, &k, "r:", id);
    ab_key(rs, &k, "resv", NULL);
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
        ab_item(rs, &k, &a, it, ti, rule, 1);
        rl_rules_unref(ref);
    }
    rc = eval(rs, RLD_SCRIPT_RELEASE, &k, &a, &r, err);
    ab_free(&k);
    ab_free(&a);
    if (rv.reply)
        freeReplyObject(rv.reply);
    if (rc != RL_OK)
        return rc;
    if (reply_is(r, "ok") && r->elements == 2) {
        *settled =
            r->element[1]->type == REDIS_REPLY_STRING && strcmp(r->element[1]->str, "1") == 0;
    } else if (reply_is(r, "notfound") || reply_is(r, "early")) {
        rc = RL_ENOTFOUND;
    } else {
        rc = rl_errf(err, RL_ESTORE, "redis: unexpected reply to a release");
    }
    freeReplyObject(r);
    return rc;
}

static int rs_release(void *cls, const char *id, rl_ns now, rl_err *err)
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
    int rc = end_resv(rs, id, nowbuf, 0, &settled, &holds, err);
    if (rc == RL_ENOTFOUND)
        return rl_errf(err, RL_ENOTFOUND, "reservation: unknown, expired or released");
    return rc;
}

/* ---- housekeeping -------------------------------------------------------------------------- */

static void heartbeat(redis_store *rs)
{
    abuf k = {0}, a = {0};
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

/* Expires the reservations whose time is up, whichever instance made them. */
static void expire_due(redis_store *rs, rl_ns now)
{
    abuf k = {0}, a = {0};
    redisReply *r;
    ab_key(rs, &k, "resv", NULL);
    for (int f = 0; f < RLD_DUE_FIELDS; f++) {
        if (f == RLD_DUE_NOW)
            rs->manual ? ab_i64(&a, now) : ab_str(&a, "");
        else if (f == RLD_DUE_BATCH)
            ab_i64(&a, EXPIRE_BATCH);
    }
    int rc = eval(rs, RLD_SCRIPT_DUE, &k, &a, &r, NULL);
    ab_free(&k);
    ab_free(&a);
    if (rc != RL_OK)
        return;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2) {
        const char *now_arg = rs->manual ? r->element[0]->str : "";
        int64_t active = parse_i64(r->element[1]);
        for (size_t i = 2; i < r->elements; i++) {
            const redisReply *e = r->element[i];
            int settled, holds;
            if (e->type != REDIS_REPLY_STRING || !valid_id(e->str) ||
                end_resv(rs, e->str, now_arg, 1, &settled, &holds, NULL) != RL_OK)
                continue;
            active--;
            if (!settled || holds) /* the client never finished it */
                __atomic_add_fetch(&rs->expired, 1, __ATOMIC_RELAXED);
        }
        __atomic_store_n(&rs->active, (uint64_t)(active > 0 ? active : 0), __ATOMIC_RELAXED);
    }
    freeReplyObject(r);
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

/* One SCAN step counting state keys per level; a full pass publishes the counts. */
static void scan_step(redis_store *rs)
{
    abuf k = {0};
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
    int rc = rld_pool_command(rs->pool, 6, argv, len, &r, NULL);
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
        if (strcmp(rs->cursor, "0") == 0)
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
    }
    if (rld_pool_probe(rs->pool)) {
        expire_due(rs, now);
        scan_step(rs);
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
    if (rs->cfg && rld_pool_up(rs->pool)) {
        /* leave the fleet at once rather than when the heartbeat goes stale */
        abuf k = {0};
        redisReply *r;
        ab_str(&k, "ZREM");
        ab_key(rs, &k, "fleet", NULL);
        ab_str(&k, rs->instance);
        if (!k.oom) {
            const char *argv[3] = {k.buf + k.off[0], k.buf + k.off[1], k.buf + k.off[2]};
            if (rld_pool_command(rs->pool, 3, argv, k.len, &r, NULL) == RL_OK)
                freeReplyObject(r);
        }
        ab_free(&k);
    }
    rld_pool_free(rs->pool);
    pthread_mutex_destroy(&rs->tick_mu);
    free(rs->types);
    free(rs->prefix);
    free(rs);
}

static const rl_store_ops redis_ops = {
    .name = "redis",
    .attach = rs_attach,
    .decide = rs_decide,
    .settle = rs_settle,
    .release = rs_release,
    .tick = rs_tick,
    .keys = rs_keys,
    .stats = rs_stats,
    .destroy = rs_destroy,
};

int rld_redis_store_new(const rld_redis_options *opt, rl_store **out, rl_err *err)
{
    rld_redis_addr addr;
    *out = NULL;
    int rc = RL_OK;
    if (opt->addr)
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
    redis_store *rs = calloc(1, sizeof *rs);
    const char *prefix = opt->prefix ? opt->prefix : "rl:";
    if (!rs || !(rs->prefix = strdup(prefix))) {
        free(rs);
        return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    if ((rc = rld_pool_new(&addr, opt->timeout_ms, opt->pool, &rs->pool, err)) != RL_OK) {
        free(rs->prefix);
        free(rs);
        return rc;
    }
    rld_pool_use_functions(rs->pool, opt->functions);
    rs->plen = strlen(prefix);
    rs->manual = opt->manual_clock != 0;
    rs->floor_ms = opt->ttl_floor_ms;
    for (size_t l = 0; l < RL_MAX_LEVELS; l++)
        rs->shards[l] = opt->shards[l] > 1 ? opt->shards[l] : 1;
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

int rld_redis_store_addr(const rld_settings *set, rld_redis_addr *out, rl_err *err)
{
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

int rld_redis_store_open(const rld_settings *set, int manual_clock, rl_store **out,
                         rl_store **redis, rl_err *err)
{
    rld_redis_addr addr;
    int rc = rld_redis_store_addr(set, &addr, err);
    if (rc != RL_OK)
        return rc;
    rld_redis_options o = {.addr = &addr,
                           .prefix = set->redis_prefix,
                           .timeout_ms = set->redis_timeout_ms,
                           .pool = set->redis_pool,
                           .manual_clock = manual_clock,
                           .functions = set->redis_functions};
    rld_fallback_options f = {.fleet_size = set->fleet_size > 0 ? (unsigned)set->fleet_size : 0,
                              .peers = rld_redis_store_peers};
    rl_store *rs;
    *out = NULL;
    memcpy(o.shards, set->shards, sizeof o.shards);
    memcpy(f.mode, set->on_error, sizeof f.mode);
    rc = rld_redis_store_new(&o, &rs, err);
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
    out->up = rld_pool_up(rs->pool);
    out->errors = rld_pool_errors(rs->pool);
    out->peers = __atomic_load_n(&rs->peers, __ATOMIC_RELAXED);
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
