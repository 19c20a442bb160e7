/*
 * limiter.c - turns a request into a plan (levels, keys, rules, amounts) and lets the store
 * carry it out; keeps the quotas of the tiered level.
 *
 * The core never names a rule type here: everything a rule does goes through its type's table.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

#define MAX_DESC (RL_MAX_LEVELS * 9)
#define DESC_SLOTS 64
#define DESC_SHARED 0xff
#define QSTRIPES 16

typedef struct qent {
    struct qent *next;
    uint64_t hash;
    rl_quota q;
    size_t klen;
    char key[];
} qent;

typedef struct qstripe {
    pthread_mutex_t mu;
    qent **bucket;
    size_t nbucket, n;
} qstripe;

/* What a decision needs of a level, worked out once when the limiter is made. */
typedef struct lvinfo {
    const rl_rules *rules; /* the level's own list; NULL when resolved per key (tiered, keyed)
                              or when it is empty */
    const char *dkey;      /* the default key, or NULL */
    uint32_t dklen;
    uint8_t shadow;        /* the level makes every rule a shadow rule */
    uint8_t as_cost;       /* rl__rules_as_cost(rules, shadow) */
    uint8_t nparts;        /* descriptors the key is made of */
    uint8_t part[8];       /* their indices into desc */
} lvinfo;

struct rl_limiter {
    rl_config *cfg;
    rl_store *store;
    rl_resolver res;
    uint64_t seed;
    long tiered;
    /* the store's methods a decision calls, read once */
    int (*decide)(void *cls, const rl_plan *plan, rl_decision *d, rl_err *err);
    uint64_t (*prefetch)(void *cls, size_t level, const rl_rules *rs, const char *key,
                         size_t keylen);
    rl__decide_levels_fn decide_levels; /* the memory store's, or NULL */
    void *scls;
    size_t ndesc;
    const char *desc[MAX_DESC]; /* descriptor names the levels use */
    size_t desclen[MAX_DESC];
    uint32_t deschead[MAX_DESC], desctail[MAX_DESC]; /* name_ends of each */
    uint8_t descmap[DESC_SLOTS]; /* by desc_slot: index + 1, 0 for none, DESC_SHARED for two */
    lvinfo lv[RL_MAX_LEVELS];
    int usd;      /* atomic: some rule counts dollars (a request with usage needs prices) */
    long nquotas; /* atomic: lets the hot path skip the quota lookup when none are set */
    qstripe q[QSTRIPES];
};

/* ---- quotas --------------------------------------------------------------------------- */

static qstripe *stripe_of(rl_limiter *lim, uint64_t h)
{
    return &lim->q[h >> 60];
}

/* Finds key's entry in its stripe (locked by the caller); *link receives the link to it. */
static qent *quota_find(qstripe *s, uint64_t h, const char *key, size_t klen, qent ***link)
{
    if (!s->nbucket)
        return NULL;
    qent **l = &s->bucket[h & (s->nbucket - 1)];
    for (; *l; l = &(*l)->next)
        if ((*l)->hash == h && (*l)->klen == klen && memcmp((*l)->key, key, klen) == 0)
            break;
    if (link)
        *link = l;
    return *l;
}

static int quota_grow(qstripe *s)
{
    size_t nb = s->nbucket ? s->nbucket * 2 : 16;
    qent **b = calloc(nb, sizeof *b);
    if (!b)
        return -1;
    for (size_t i = 0; i < s->nbucket; i++)
        for (qent *e = s->bucket[i], *next; e; e = next) {
            next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    free(s->bucket);
    s->bucket = b;
    s->nbucket = nb;
    return 0;
}

/* The rules in force for key on the tiered level. A custom list comes with a reference in
 * *ref; a tier's list needs none. */
static const rl_rules *quota_rules(rl_limiter *lim, const char *key, size_t klen, rl_rules **ref)
{
    const rl_config *cfg = lim->cfg;
    const rl_rules *rs = cfg->tiers[cfg->default_tier].rules;
    *ref = NULL;
    if (__atomic_load_n(&lim->nquotas, __ATOMIC_ACQUIRE) == 0)
        return rs;
    uint64_t h = rl__hash(key, klen, lim->seed);
    qstripe *s = stripe_of(lim, h);
    pthread_mutex_lock(&s->mu);
    qent *e = quota_find(s, h, key, klen, NULL);
    if (e && e->q.rules) {
        rl_rules_ref(e->q.rules);
        *ref = e->q.rules;
        rs = e->q.rules;
    } else if (e) {
        rs = cfg->tiers[e->q.tier].rules;
    }
    pthread_mutex_unlock(&s->mu);
    return rs;
}

/* Whether a rule of rs (may be NULL) counts dollars. */
static int counts_usd(const rl_rules *rs)
{
    for (size_t i = 0; rs && i < rs->n; i++)
        if (rs->v[i].unit == RL_UNIT_USD)
            return 1;
    return 0;
}

int rl_quota_set(rl_limiter *lim, const char *key, const char *tier, rl_rules *rules,
                 rl_err *err)
{
    const char *why;
    size_t klen = strlen(key);
    long t = 0;
    int rc = RL_EINVAL;

    if (lim->tiered < 0) {
        rl_errf(err, rc, "no level is tiered");
        goto fail;
    }
    if ((why = rl__key_problem(key, klen))) {
        rl_errf(err, rc, "user: %s", why);
        goto fail;
    }
    if ((tier == NULL) == (rules == NULL)) {
        rl_errf(err, rc, "give either \"tier\" or \"rules\"");
        goto fail;
    }
    if (tier && (t = rl_config_tier(lim->cfg, tier)) < 0) {
        rl_errf(err, rc, "tier: unknown tier \"%.64s\"", tier);
        goto fail;
    }
    if (rules && (rc = rl__rules_check(rules, err)) != RL_OK) {
        rl__err_prefix(err, "rules");
        goto fail;
    }

    if (counts_usd(rules))
        __atomic_store_n(&lim->usd, 1, __ATOMIC_RELAXED);
    uint64_t h = rl__hash(key, klen, lim->seed);
    qstripe *s = stripe_of(lim, h);
    rl_rules *old = NULL;
    pthread_mutex_lock(&s->mu);
    qent **link, *e = quota_find(s, h, key, klen, &link);
    if (!e) {
        if ((s->n >= s->nbucket && quota_grow(s) != 0) ||
            !(e = calloc(1, sizeof *e + klen + 1))) {
            pthread_mutex_unlock(&s->mu);
            rc = rl_errf(err, RL_ENOMEM, "out of memory");
            goto fail;
        }
        e->hash = h;
        e->klen = klen;
        memcpy(e->key, key, klen);
        e->next = s->bucket[h & (s->nbucket - 1)];
        s->bucket[h & (s->nbucket - 1)] = e;
        s->n++;
        __atomic_add_fetch(&lim->nquotas, 1, __ATOMIC_RELEASE);
    }
    old = e->q.rules;
    e->q.rules = rules;
    e->q.tier = (size_t)t;
    pthread_mutex_unlock(&s->mu);
    rl_rules_unref(old);
    return RL_OK;
fail:
    rl_rules_unref(rules);
    return rc;
}

int rl_quota_clear(rl_limiter *lim, const char *key)
{
    size_t klen = strlen(key);
    uint64_t h = rl__hash(key, klen, lim->seed);
    qstripe *s = stripe_of(lim, h);
    pthread_mutex_lock(&s->mu);
    qent **link, *e = quota_find(s, h, key, klen, &link);
    if (e) {
        *link = e->next;
        s->n--;
        __atomic_sub_fetch(&lim->nquotas, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s->mu);
    if (!e)
        return 0;
    rl_rules_unref(e->q.rules);
    free(e);
    return 1;
}

int rl_quota_get(rl_limiter *lim, const char *key, const char **tier, rl_rules **rules)
{
    const rl_config *cfg = lim->cfg;
    size_t klen = strlen(key);
    if (lim->tiered < 0)
        return RL_EINVAL;
    uint64_t h = rl__hash(key, klen, lim->seed);
    qstripe *s = stripe_of(lim, h);
    size_t t = cfg->default_tier;
    rl_rules *custom = NULL;
    pthread_mutex_lock(&s->mu);
    qent *e = quota_find(s, h, key, klen, NULL);
    if (e && e->q.rules) {
        custom = e->q.rules;
        rl_rules_ref(custom);
    } else if (e) {
        t = e->q.tier;
    }
    pthread_mutex_unlock(&s->mu);
    *tier = custom ? NULL : cfg->tiers[t].name;
    *rules = custom ? custom : cfg->tiers[t].rules;
    return RL_OK;
}

void rl_quota_foreach(rl_limiter *lim,
                      void (*fn)(void *ctx, const char *key, const char *tier,
                                 const rl_rules *rules),
                      void *ctx)
{
    for (size_t i = 0; i < QSTRIPES; i++) {
        qstripe *s = &lim->q[i];
        pthread_mutex_lock(&s->mu);
        for (size_t b = 0; b < s->nbucket; b++)
            for (qent *e = s->bucket[b]; e; e = e->next)
                fn(ctx, e->key, e->q.rules ? NULL : lim->cfg->tiers[e->q.tier].name,
                   e->q.rules ? e->q.rules : lim->cfg->tiers[e->q.tier].rules);
        pthread_mutex_unlock(&s->mu);
    }
}

/* ---- the resolver stores use ------------------------------------------------------------ */

/* The rules of level li for key: the level's own, the key's tier or custom quota, or what a
 * keyed level's function gives (NULL: none). *ref as quota_rules. */
static const rl_rules *level_rules(rl_limiter *lim, size_t li, const char *key, size_t klen,
                                   rl_rules **ref)
{
    const rl_level *l = &lim->cfg->levels[li];
    *ref = NULL;
    if (l->tiered)
        return quota_rules(lim, key, klen, ref);
    if (l->key_rules)
        return l->key_rules(l->key_rules_ctx, key, klen, ref);
    return l->rules;
}

static const rl_rule *rule_at(void *ctx, size_t level, size_t slot, const char *key,
                              size_t keylen, rl_rules **ref)
{
    rl_limiter *lim = ctx;
    *ref = NULL;
    if (level >= lim->cfg->nlevels)
        return NULL;
    const rl_rules *rs = level_rules(lim, level, key, keylen, ref);
    return rs && slot < rs->n ? &rs->v[slot] : NULL;
}

/* ---- creation ---------------------------------------------------------------------------- */

/* The first and the last four bytes of a name of at least four bytes (0 for shorter ones):
 * two names of one length up to eight bytes are equal when these are. */
static inline void name_ends(const char *p, size_t n, uint32_t *head, uint32_t *tail)
{
    *head = *tail = 0;
    if (n >= 4) {
        memcpy(head, p, 4);
        memcpy(tail, p + n - 4, 4);
    }
}

/* Where a descriptor name of length n with those ends goes in descmap. */
static inline size_t desc_slot(size_t n, uint32_t head, uint32_t tail)
{
    return (size_t)(((head ^ (tail * 0x85ebca77u) ^ (uint32_t)n) * 0x9e3779b1u) >> 26);
}

static size_t desc_index(rl_limiter *lim, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < lim->ndesc; i++)
        if (lim->desclen[i] == n && memcmp(lim->desc[i], name, n) == 0)
            return i;
    lim->desc[lim->ndesc] = name;
    lim->desclen[lim->ndesc] = n;
    name_ends(name, n, &lim->deschead[lim->ndesc], &lim->desctail[lim->ndesc]);
    uint8_t *e = &lim->descmap[desc_slot(n, lim->deschead[lim->ndesc], lim->desctail[lim->ndesc])];
    *e = *e ? DESC_SHARED : (uint8_t)(lim->ndesc + 1);
    return lim->ndesc++;
}

/* rl_limiter_new; owned 0: store is another limiter's, and is not destroyed on failure. */
static int limiter_new(rl_config *cfg, rl_store *store, int owned, rl_limiter **out, rl_err *err)
{
    rl_limiter *lim = calloc(1, sizeof *lim);
    *out = NULL;
    if (!lim) {
        rl_config_free(cfg);
        if (store && owned)
            store->ops->destroy(store->cls);
        return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    lim->cfg = cfg;
    lim->seed = rl_random64();
    lim->tiered = rl_config_tiered_level(cfg);
    for (size_t i = 0; i < QSTRIPES; i++)
        pthread_mutex_init(&lim->q[i].mu, NULL);
    for (size_t i = 0; i < cfg->nlevels; i++) {
        const rl_level *l = &cfg->levels[i];
        lvinfo *v = &lim->lv[i];
        v->rules = l->tiered || l->key_rules || !l->rules || !l->rules->n ? NULL : l->rules;
        v->dkey = l->default_key;
        v->dklen = l->default_key ? (uint32_t)strlen(l->default_key) : 0;
        v->shadow = l->shadow != 0;
        v->as_cost = v->rules && rl__rules_as_cost(v->rules, v->shadow);
        if (l->ncompose == 0) {
            v->nparts = 1;
            v->part[0] = (uint8_t)desc_index(lim, l->name);
        } else {
            v->nparts = (uint8_t)l->ncompose;
            for (size_t k = 0; k < l->ncompose; k++)
                v->part[k] = (uint8_t)desc_index(lim, l->compose[k]);
        }
    }
    if (cfg->price_by)
        desc_index(lim, cfg->price_by); /* a descriptor requests may carry */
    for (size_t i = 0; i < cfg->nlevels; i++)
        lim->usd |= counts_usd(cfg->levels[i].rules);
    for (size_t i = 0; i < cfg->ntiers; i++)
        lim->usd |= counts_usd(cfg->tiers[i].rules);
    lim->res.rule_at = rule_at;
    lim->res.ctx = lim;
    lim->store = store ? store : rl_memory_store_new();
    if (!lim->store) {
        rl_limiter_free(lim);
        return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    lim->decide = lim->store->ops->decide;
    lim->prefetch = lim->store->ops->prefetch;
    lim->decide_levels = rl__store_decide_levels(lim->store);
    lim->scls = lim->store->cls;
    int rc = lim->store->ops->attach(lim->store->cls, cfg, &lim->res, err);
    for (size_t i = 0; rc == RL_OK && i < cfg->nquotas; i++) {
        rl_rules_ref(cfg->quotas[i].rules);
        rc = rl_quota_set(lim, cfg->quota_keys[i],
                          cfg->quotas[i].rules ? NULL : cfg->tiers[cfg->quotas[i].tier].name,
                          cfg->quotas[i].rules, err);
        if (rc != RL_OK)
            rl__err_prefix(err, "quotas.%s: ", cfg->quota_keys[i]);
    }
    if (rc != RL_OK) {
        if (!owned)
            lim->store = NULL;
        rl_limiter_free(lim);
        return rc;
    }
    *out = lim;
    return RL_OK;
}

int rl_limiter_new(rl_config *cfg, rl_store *store, rl_limiter **out, rl_err *err)
{
    return limiter_new(cfg, store, 1, out, err);
}

int rl_limiter_new_over(rl_config *cfg, rl_limiter *from, rl_limiter **out, rl_err *err)
{
    rl_store *st = from->store;
    *out = NULL;
    if (!st) {
        rl_config_free(cfg);
        return rl_errf(err, RL_EINVAL, "store: already taken over by another limiter");
    }
    int rc = limiter_new(cfg, st, 0, out, err);
    if (rc != RL_OK) { /* the store back on from's configuration, as it was */
        rl_err again = {{0}};
        if (st->ops->attach(st->cls, from->cfg, &from->res, &again) != RL_OK) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            rl_errf(err, rc, "%.300s (and the store did not take the configuration in force "
                             "back: %.300s)",
                    why, again.msg);
        }
        return rc;
    }
    from->store = NULL; /* *out owns it now */
    return RL_OK;
}

void rl_limiter_free(rl_limiter *lim)
{
    if (!lim)
        return;
    if (lim->store)
        lim->store->ops->destroy(lim->store->cls);
    for (size_t i = 0; i < QSTRIPES; i++) {
        qstripe *s = &lim->q[i];
        for (size_t b = 0; b < s->nbucket; b++)
            for (qent *e = s->bucket[b], *next; e; e = next) {
                next = e->next;
                rl_rules_unref(e->q.rules);
                free(e);
            }
        free(s->bucket);
        pthread_mutex_destroy(&s->mu);
    }
    rl_config_free(lim->cfg);
    free(lim);
}

const rl_config *rl_limiter_config(const rl_limiter *lim)
{
    return lim->cfg;
}

/* ---- decisions --------------------------------------------------------------------------- */

static inline int desc_is(const rl_limiter *lim, size_t k, const char *name, size_t n,
                          uint32_t head, uint32_t tail)
{
    return lim->desclen[k] == n && lim->deschead[k] == head && lim->desctail[k] == tail &&
           ((n >= 4 && n <= 8) || memcmp(lim->desc[k], name, n) == 0);
}

/* The index of the descriptor named (name, n), or lim->ndesc when no level uses it: looked up
 * in descmap, or among all when two names share its slot. */
static inline size_t desc_find(const rl_limiter *lim, const char *name, size_t n)
{
    uint32_t head, tail;
    name_ends(name, n, &head, &tail);
    size_t e = lim->descmap[desc_slot(n, head, tail)];
    if (e != DESC_SHARED)
        return e && desc_is(lim, e - 1, name, n, head, tail) ? e - 1 : lim->ndesc;
    for (size_t k = 0; k < lim->ndesc; k++)
        if (desc_is(lim, k, name, n, head, tail))
            return k;
    return lim->ndesc;
}

/* The error of descriptor ds: why it is refused, or (why NULL) that no level uses it. Out of
 * the way of read_descriptors, which then needs no room for the message. */
static __attribute__((noinline, cold)) int descriptor_error(const rl_limiter *lim,
                                                             const rl_descriptor *ds,
                                                             const char *why, rl_err *err)
{
    int nl = ds->name_len > 64 ? 64 : (int)ds->name_len;
    if (why)
        return rl_errf(err, RL_EINVAL, "keys.%.*s: %s", nl, ds->name, why);
    char known[256] = "";
    size_t used = 0;
    for (size_t j = 0; j < lim->ndesc && used < sizeof known; j++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", j ? ", " : "",
                                 lim->desc[j]);
    return rl_errf(err, RL_EINVAL, "keys.%.*s: unknown descriptor (levels use: %s)", nl,
                   ds->name, known);
}

/* Looks the request's descriptors up; fills val/vlen by descriptor index. */
static inline __attribute__((always_inline)) int
read_descriptors(const rl_limiter *lim, const rl_request *req, const char **val, size_t *vlen,
                 rl_err *err)
{
    for (size_t i = 0; i < lim->ndesc; i++)
        val[i] = NULL;
    for (size_t i = 0; i < req->ndesc; i++) {
        const rl_descriptor *ds = &req->desc[i];
        size_t k = desc_find(lim, ds->name, ds->name_len);
        if (k == lim->ndesc)
            return descriptor_error(lim, ds, NULL, err);
        if (val[k])
            return descriptor_error(lim, ds, "given twice", err);
        const char *why = rl__key_problem(ds->value, ds->value_len);
        if (why)
            return descriptor_error(lim, ds, why, err);
        val[k] = ds->value;
        vlen[k] = ds->value_len;
    }
    return RL_OK;
}

/* Level li's key when it is made of several descriptors, joined with ':' in d->keybuf (all
 * present). Returns its length, or -1 when it does not fit. */
static long compose_key(const lvinfo *v, const char **val, const size_t *vlen, rl_decision *d,
                        const char **key)
{
    char *out = d->keybuf + d->keyused;
    size_t room = sizeof d->keybuf - d->keyused, n = 0;
    for (size_t k = 0; k < v->nparts; k++) {
        size_t p = v->part[k], need = vlen[p] + (k > 0);
        if (n + need > room || n + need > RL_COMPOSED_MAX)
            return -1;
        if (k > 0)
            out[n++] = ':';
        memcpy(out + n, val[p], vlen[p]);
        n += vlen[p];
    }
    *key = out;
    d->keyused += n;
    return (long)n;
}

/* Level li's key: the descriptor's own value, the level's default key, or several descriptors
 * joined. Returns its length, 0 when the level is skipped, or -1 when a composed key does not
 * fit. */
static inline long make_key(const lvinfo *v, const char **val, const size_t *vlen,
                            rl_decision *d, const char **key)
{
    if (v->nparts == 1 && val[v->part[0]]) {
        *key = val[v->part[0]];
        return (long)vlen[v->part[0]];
    }
    for (size_t k = 0; k < v->nparts; k++)
        if (!val[v->part[k]]) {
            *key = v->dkey;
            return (long)v->dklen;
        }
    return compose_key(v, val, vlen, d, key);
}

/* The rules of level li for key: the level's own, or those the key's tier, custom quota or
 * the keyed level's function give. A custom list's reference is kept in d. */
static inline const rl_rules *key_rules(rl_limiter *lim, size_t li, const char *key, size_t klen,
                                        rl_decision *d)
{
    if (lim->lv[li].rules)
        return lim->lv[li].rules;
    rl_rules *ref;
    const rl_rules *rs = level_rules(lim, li, key, klen, &ref);
    if ((long)li == lim->tiered) {
        rl_rules_unref(d->held); /* only one level is tiered: one key per decision */
        d->held = ref;
    } else if (ref) {
        rl_rules_unref(ref); /* a keyed level's lists outlive the limiter */
    }
    return rs;
}

/* Appends to the plan the rules rs of level li at key, each taking cost (or one unit for a
 * rule counting requests, when cost > 0), with the store's prefetch hint. */
static inline __attribute__((always_inline)) int
plan_rules(rl_limiter *lim, size_t li, const rl_rules *rs, const char *key, size_t klen,
           int64_t prio, rl_fp cost, const rl_fp *amt, rl_decision *d, rl_plan *plan,
           rl_err *err)
{
    size_t n = rs->n, base = d->napplied;
    if (base + n > RL_MAX_APPLIED)
        return rl_errf(err, RL_EINVAL, "keys: more than %d rules would apply", RL_MAX_APPLIED);
    uint64_t hint = lim->prefetch ? lim->prefetch(lim->scls, li, rs, key, klen) : 0;
    int lshadow = lim->lv[li].shadow;
    d->napplied = base + n;
    for (size_t si = 0; si < n; si++) {
        const rl_rule *r = &rs->v[si];
        rl_plan_item it = rl_plan_item_of(r, lshadow, cost, amt, prio);
        it.hash = hint;
        plan->items[base + si] = it;
        rl__applied_set(&d->applied[base + si], r, it.mode, key, (uint32_t)klen, (uint16_t)li,
                        (uint16_t)si, 0, 0);
    }
    return RL_OK;
}

/* Plans a request given as items (rl_request.items). */
static inline __attribute__((always_inline)) int
plan_items(rl_limiter *lim, const rl_request *req, rl_decision *d, rl_plan *plan, rl_err *err)
{
    if (req->flags & RL_RESERVE)
        return rl_errf(err, RL_EINVAL, "reserve: not with items");
    if (req->usage)
        return rl_errf(err, RL_EINVAL, "usage: not with items");
    for (size_t i = 0; i < req->nitems; i++) {
        const rl_item *it = &req->items[i];
        if (it->level >= lim->cfg->nlevels)
            return rl_errf(err, RL_EINVAL, "items[%zu].level: no such level", i);
        if (it->keylen == 0 || it->keylen > RL_COMPOSED_MAX)
            return rl_errf(err, RL_EINVAL, "items[%zu].key: must be 1 to %d bytes", i,
                            RL_COMPOSED_MAX);
        if (it->cost < 0 || it->cost > RL_FP_MAX)
            return rl_errf(err, RL_EINVAL,
                            "items[%zu].cost: must be a number from 0 to 1000000000000", i);
        const rl_rules *rs = key_rules(lim, it->level, it->key, it->keylen, d);
        int rc = rs && rs->n ? plan_rules(lim, it->level, rs, it->key, it->keylen,
                                          req->priority, it->cost, NULL, d, plan, err)
                             : RL_OK;
        if (rc != RL_OK)
            return rc;
    }
    plan->cost = 0;
    plan->amt = NULL;
    plan->price = NULL;
    return RL_OK;
}

/* The value of the descriptor named name in the request, or NULL. */
static const rl_descriptor *find_descriptor(const rl_request *req, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < req->ndesc; i++)
        if (req->desc[i].name_len == n && memcmp(req->desc[i].name, name, n) == 0)
            return &req->desc[i];
    return NULL;
}

/* q's amounts by unit from the request's usage: each declared dimension's, and the dollars
 * at the prices of the request's model when the configuration has prices and names it. */
static int usage_amounts(rl_limiter *lim, const rl_request *req, rl__levels *q, rl_decision *d,
                         rl_err *err)
{
    const rl_config *cfg = lim->cfg;
    const rl_usage *u = req->usage;
    rl_fp *amt = d->amt;
    memset(amt, 0, sizeof d->amt);
    for (size_t k = 0; k < RL_MAX_DIMS; k++) {
        if (!(u->given >> k & 1u))
            continue;
        if (k >= cfg->ndims)
            return rl_errf(err, RL_EINVAL, "usage: dimension %zu is not declared", k);
        if (u->v[k] < 0 || u->v[k] > RL_FP_MAX)
            return rl_errf(err, RL_EINVAL,
                           "usage.%s: must be a number from 0 to 1000000000000", cfg->dims[k]);
        amt[RL_UNIT_DIM0 + k] = u->v[k];
    }
    if (cfg->price_by) {
        const rl_descriptor *m = find_descriptor(req, cfg->price_by);
        q->price = m ? rl_config_price(cfg, m->value, m->value_len) : NULL;
        if (q->price)
            amt[RL_UNIT_USD] = rl_usage_usd(u, q->price);
        else if (__atomic_load_n(&lim->usd, __ATOMIC_RELAXED))
            return m ? rl_errf(err, RL_EINVAL, "keys.%s: no prices for \"%.*s\"", cfg->price_by,
                               (int)m->value_len, m->value)
                     : rl_errf(err, RL_EINVAL, "keys.%s: required to count dollars",
                               cfg->price_by);
    } else if (__atomic_load_n(&lim->usd, __ATOMIC_RELAXED)) {
        return rl_errf(err, RL_EINVAL, "usage: no prices are configured to count dollars");
    }
    q->amt = amt;
    d->has_amt = 1;
    return RL_OK;
}

/* Resolves a request given as descriptors into q: a key and its rules per level that applies,
 * levels in order. */
static inline __attribute__((always_inline)) int
resolve_levels(rl_limiter *lim, const rl_request *req, rl_decision *d, rl__levels *q, rl_err *err)
{
    const char *val[MAX_DESC];
    size_t vlen[MAX_DESC], nrules = 0, n = 0;
    int rc;
    q->n = 0; /* whole before any return: rl_errf's code is not known to be an error */
    q->nrules = 0;
    q->cost = req->cost;
    q->amt = NULL;
    q->price = NULL;
    q->priority = req->priority;
    q->flags = req->flags;
    q->now = req->now;
    if (req->cost <= 0 || req->cost > RL_FP_MAX)
        return rl_errf(err, RL_EINVAL,
                        "cost: must be a positive number no larger than 1000000000000");
    if ((rc = read_descriptors(lim, req, val, vlen, err)) != RL_OK)
        return rc;
    if (req->usage && (rc = usage_amounts(lim, req, q, d, err)) != RL_OK)
        return rc;
    for (size_t li = 0, nl = lim->cfg->nlevels; li < nl; li++) {
        const lvinfo *v = &lim->lv[li];
        const char *key;
        long klen = make_key(v, val, vlen, d, &key);
        if (klen <= 0) {
            if (klen < 0)
                return rl_errf(err, RL_EINVAL, "keys: the composed keys are too long");
            continue;
        }
        const rl_rules *rs = v->rules; /* a level's own list is never empty */
        int as_cost = v->as_cost;
        if (!rs) {
            rs = key_rules(lim, li, key, (size_t)klen, d);
            if (!rs || !rs->n)
                continue;
            as_cost = rl__rules_as_cost(rs, v->shadow);
        }
        if ((nrules += rs->n) > RL_MAX_APPLIED)
            return rl_errf(err, RL_EINVAL, "keys: more than %d rules would apply",
                           RL_MAX_APPLIED);
        q->lv[n++] = (rl__level_key){rs, key, (uint32_t)klen, (uint16_t)li, v->shadow,
                                     (uint8_t)as_cost};
    }
    q->n = n;
    q->nrules = nrules;
    return RL_OK;
}

/* Plans a request of descriptors resolved into q. */
static inline __attribute__((always_inline)) void
plan_levels(rl_limiter *lim, const rl__levels *q, rl_decision *d, rl_plan *plan)
{
    d->napplied = 0;
    for (size_t k = 0; k < q->n; k++) {
        const rl__level_key *lk = &q->lv[k];
        plan_rules(lim, lk->level, lk->rules, lk->key, lk->keylen, q->priority, q->cost,
                   q->amt, d, plan, NULL); /* q holds at most RL_MAX_APPLIED rules: cannot fail */
    }
    plan->cost = q->cost;
    plan->amt = q->amt;
    plan->price = q->price;
    plan->n = d->napplied;
    plan->flags = q->flags;
    plan->now = q->now;
}

/* A decision's fields before its plan. */
static inline void acquire_start(const rl_request *req, rl_decision *d)
{
    d->allowed = 0;
    d->retry_after = 0;
    d->blocked = -1;
    d->reservation[0] = '\0';
    d->napplied = 0;
    d->held = NULL;
    d->keyused = 0;
    d->now = req->now;
    d->has_amt = 0;
}

/* A request's plan, up to the store's decision: RL_OK with plan ready, or an error (d done). */
static inline __attribute__((always_inline)) int
acquire_plan(rl_limiter *lim, const rl_request *req, rl_decision *d, rl_plan *plan, rl_err *err)
{
    rl__levels q;
    int rc;
    acquire_start(req, d);
    if (req->nitems > 0) {
        if ((rc = plan_items(lim, req, d, plan, err)) == RL_OK) {
            plan->n = d->napplied;
            plan->flags = req->flags;
            plan->now = req->now;
        }
    } else if ((rc = resolve_levels(lim, req, d, &q, err)) == RL_OK) {
        plan_levels(lim, &q, d, plan);
    }
    if (rc != RL_OK)
        rl_decision_done(d);
    return rc;
}

int rl_acquire(rl_limiter *lim, const rl_request *req, rl_decision *d, rl_err *err)
{
    rl_plan plan;
    int rc;
    if (lim->decide_levels && req->nitems == 0 && !(req->flags & RL_RESERVE)) {
        /* the memory store decides from the keys alone what it can, and declines the rest */
        rl__levels q;
        acquire_start(req, d);
        if ((rc = resolve_levels(lim, req, d, &q, err)) != RL_OK) {
            rl_decision_done(d);
            return rc;
        }
        if (lim->decide_levels(lim->scls, &q, d) == RL_OK)
            return RL_OK;
        plan_levels(lim, &q, d, &plan);
    } else if ((rc = acquire_plan(lim, req, d, &plan, err)) != RL_OK) {
        return rc;
    }
    if ((rc = lim->decide(lim->scls, &plan, d, err)) != RL_OK) {
        rl_decision_done(d);
        return rc;
    }
    rl__decision_blocked(d, &plan);
    return RL_OK;
}

void rl__limiter_set_decide_levels(rl_limiter *lim, rl__decide_levels_fn fn)
{
    lim->decide_levels = fn;
}

/* Batches of rl_acquire_many go to the store this many at a time (their plans on the stack). */
#define MANY_BATCH 16

void rl_acquire_many(rl_limiter *lim, rl_acquisition *a, size_t n)
{
    const rl_store_ops *ops = lim->store->ops;
    if (!ops->decide_many) { /* nothing to share: each as rl_acquire decides it */
        for (size_t i = 0; i < n; i++)
            a[i].rc = rl_acquire(lim, a[i].req, a[i].d, a[i].err);
        return;
    }
    for (size_t at = 0; at < n; at += MANY_BATCH) {
        rl_plan plan[MANY_BATCH];
        const rl_plan *pp[MANY_BATCH];
        rl_decision *dp[MANY_BATCH];
        int src[MANY_BATCH];
        rl_err serr[MANY_BATCH];
        size_t idx[MANY_BATCH], m = 0, end = n - at < MANY_BATCH ? n : at + MANY_BATCH;
        for (size_t i = at; i < end; i++) {
            if ((a[i].rc = acquire_plan(lim, a[i].req, a[i].d, &plan[m], a[i].err)) != RL_OK)
                continue;
            pp[m] = &plan[m];
            dp[m] = a[i].d;
            idx[m++] = i;
        }
        if (m > 1) {
            ops->decide_many(lim->store->cls, pp, dp, m, src, serr);
        } else {
            for (size_t j = 0; j < m; j++)
                src[j] = lim->decide(lim->scls, pp[j], dp[j], &serr[j]);
        }
        for (size_t j = 0; j < m; j++) {
            rl_acquisition *x = &a[idx[j]];
            if ((x->rc = src[j]) != RL_OK) {
                *x->err = serr[j];
                rl_decision_done(x->d);
            } else {
                rl__decision_blocked(x->d, pp[j]);
            }
        }
    }
}

rl_ns rl_rule_peek(const rl_rule *rule, const void *state, const char *key, size_t keylen,
                   rl_ns now, rl_fp cost, rl_rule_status *st)
{
    rl_eval ev;
    const rl_rule_type *t = rule->type;
    rl_ns wait = t->evaluate(rule->params, state, key, keylen, now, cost, &ev);
    if (st && t->report)
        t->report(rule->params, &ev, now, st);
    return wait;
}

const rl_rule_status *rl_decision_status(const rl_decision *d, size_t i)
{
    if (i >= d->napplied || !d->applied[i].has_status)
        return NULL;
    rl_applied *a = (rl_applied *)&d->applied[i]; /* kept: see ratelimit.h */
    if (a->status_lazy) {
        rl_eval ev = a->status.ev; /* the status takes its place */
        a->rule->type->report(a->rule->params, &ev, d->now, &a->status.st);
        a->status_lazy = 0;
    }
    return &a->status.st;
}

void rl_decision_done(rl_decision *d)
{
    if (d->held) {
        rl_rules_unref(d->held);
        d->held = NULL;
    }
}

/* The outcome as the stores get it: NULL when it says nothing; a guard on its range. */
static int outcome_of(const rl_outcome *o, const rl_outcome **out, rl_err *err)
{
    *out = NULL;
    if (!o || (o->kind == RL_OUTCOME_NONE && o->latency < 0))
        return RL_OK;
    if (o->kind < RL_OUTCOME_NONE || o->kind > RL_OUTCOME_DROPPED)
        return rl_errf(err, RL_EINVAL,
                        "outcome: must be \"ok\", \"error\", \"timeout\" or \"dropped\"");
    if (o->latency < -1 || o->latency > RL_OUTCOME_LATENCY_MAX)
        return rl_errf(err, RL_EINVAL, "latency_ms: must be a number from 0 to 3600000");
    *out = o;
    return RL_OK;
}

int rl_settle_usage(rl_limiter *lim, const char *id, const rl_actual *actual, rl_ns now,
                    const rl_outcome *outcome, rl_settlement *out, rl_err *err)
{
    const rl_outcome *o;
    if (actual->has_cost && (actual->cost < 0 || actual->cost > RL_FP_MAX))
        return rl_errf(err, RL_EINVAL,
                        "actual_cost: must be a number from 0 to 1000000000000");
    for (size_t k = 0; k < RL_MAX_DIMS; k++) {
        if (!(actual->usage.given >> k & 1u))
            continue;
        if (k >= lim->cfg->ndims)
            return rl_errf(err, RL_EINVAL, "actual_usage: dimension %zu is not declared", k);
        if (actual->usage.v[k] < 0 || actual->usage.v[k] > RL_FP_MAX)
            return rl_errf(err, RL_EINVAL,
                           "actual_usage.%s: must be a number from 0 to 1000000000000",
                           lim->cfg->dims[k]);
    }
    if (outcome_of(outcome, &o, err) != RL_OK)
        return RL_EINVAL;
    return lim->store->ops->settle(lim->store->cls, id, actual, now, o, out, err);
}

int rl_settle_outcome(rl_limiter *lim, const char *id, rl_fp actual, rl_ns now,
                      const rl_outcome *outcome, rl_settlement *out, rl_err *err)
{
    rl_actual a = {.has_cost = 1, .cost = actual, .usage = {0, {0}}};
    return rl_settle_usage(lim, id, &a, now, outcome, out, err);
}

int rl_settle(rl_limiter *lim, const char *id, rl_fp actual, rl_ns now, rl_settlement *out,
              rl_err *err)
{
    return rl_settle_outcome(lim, id, actual, now, NULL, out, err);
}

int rl_release_outcome(rl_limiter *lim, const char *id, rl_ns now, const rl_outcome *outcome,
                       rl_err *err)
{
    const rl_outcome *o;
    if (outcome_of(outcome, &o, err) != RL_OK)
        return RL_EINVAL;
    return lim->store->ops->release(lim->store->cls, id, now, o, err);
}

int rl_limiter_reset(rl_limiter *lim, size_t level, const char *key, size_t keylen,
                     size_t *cleared, rl_err *err)
{
    size_t n = 0;
    if (level >= lim->cfg->nlevels)
        return rl_errf(err, RL_EINVAL, "level: no such level");
    const char *why = rl__key_problem(key, keylen);
    if (keylen > RL_COMPOSED_MAX || why)
        return rl_errf(err, RL_EINVAL, "key: %s", why ? why : "too long");
    if (!lim->store->ops->reset)
        return rl_errf(err, RL_EINVAL, "store: %s cannot reset a key", lim->store->ops->name);
    int rc = lim->store->ops->reset(lim->store->cls, level, key, keylen, &n, err);
    if (cleared)
        *cleared = n;
    return rc;
}

int rl_release(rl_limiter *lim, const char *id, rl_ns now, rl_err *err)
{
    return rl_release_outcome(lim, id, now, NULL, err);
}

void rl_limiter_tick(rl_limiter *lim, rl_ns now)
{
    lim->store->ops->tick(lim->store->cls, now);
}

/* fsyncs the directory holding path, so that a rename in it survives a crash. */
static void sync_dir(const char *path)
{
    char dir[4096] = ".";
    const char *slash = strrchr(path, '/');
    if (slash == path) {
        strcpy(dir, "/");
    } else if (slash) {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir)
            return;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int rl_limiter_save(rl_limiter *lim, const char *path, rl_err *err)
{
    char tmp[4096];
    if (!lim->store->ops->save)
        return RL_OK;
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return rl_errf(err, RL_EIO, "%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return rl_errf(err, RL_EIO, "%s: %s", tmp, strerror(errno));
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    int rc = lim->store->ops->save(lim->store->cls, f, err);
    if (rc == RL_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        rc = rl_errf(err, RL_EIO, "%s", strerror(errno));
    if (fclose(f) != 0 && rc == RL_OK)
        rc = rl_errf(err, RL_EIO, "%s", strerror(errno));
    if (rc == RL_OK && rename(tmp, path) != 0)
        rc = rl_errf(err, RL_EIO, "%s", strerror(errno));
    if (rc != RL_OK) {
        unlink(tmp);
        rl__err_prefix(err, "%s: ", path);
        return rc;
    }
    sync_dir(path);
    return RL_OK;
}

int rl_limiter_load(rl_limiter *lim, const char *path, rl_ns now, size_t *loaded, rl_err *err)
{
    if (loaded)
        *loaded = 0;
    if (!lim->store->ops->load)
        return RL_OK;
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? RL_OK : rl_errf(err, RL_EIO, "%s: %s", path, strerror(errno));
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    int rc = lim->store->ops->load(lim->store->cls, f, now, loaded, err);
    fclose(f);
    if (rc != RL_OK)
        rl__err_prefix(err, "%s: ", path);
    return rc;
}

size_t rl_limiter_keys(rl_limiter *lim, size_t level)
{
    return lim->store->ops->keys(lim->store->cls, level);
}

void rl_limiter_stats(rl_limiter *lim, rl_stats *out)
{
    memset(out, 0, sizeof *out); /* a store fills what it keeps */
    lim->store->ops->stats(lim->store->cls, out);
}
