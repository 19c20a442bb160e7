/*
 * memstore.c - the in-memory store: per-key state in compact fixed-size records, and the
 * reservations.
 *
 * Each level has a table split into segments by the top bits of the key's hash; a segment is a
 * chained hash table with its own lock. A record is 48 bytes: chain link, key (inline up to 16
 * bytes), the rule's position in its list, its type, and 24 bytes of state. Records live in
 * chunks and are named by 32-bit indices, so growing the bucket array never moves them. A
 * decision locks one segment per level, in level order, so two decisions never deadlock and
 * decisions on different keys rarely meet. Nothing is allocated per decision, only per new key
 * (and a key longer than 16 bytes).
 *
 * Idle state is dropped by tick(): a record whose rule says it is idle (a full bucket, an
 * empty window) is indistinguishable from a missing one. A segment that falls below a quarter
 * of its records is compacted so that memory goes back when keys go idle.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core.h"

#define SEG_BITS 6
#define NSEG (1u << SEG_BITS)
#define CHUNK_BITS 10
#define CHUNK_RECS (1u << CHUNK_BITS)
#define KEY_INLINE 16
#define SWEEP_BATCH 512 /* buckets swept under one lock hold */

typedef struct rec {
    uint32_t next;
    uint16_t klen;
    uint8_t type; /* rule type id + 1; 0 marks a free record */
    uint8_t slot;
    union {
        char in[KEY_INLINE];
        char *out;
    } key;
    union {
        int64_t w[RL_STATE_INLINE / 8];
        void *ext;
    } st;
} rec;

_Static_assert(sizeof(rec) == 48, "records are 48 bytes");

typedef struct seg {
    _Alignas(64) pthread_mutex_t mu;
    uint32_t *bucket;
    uint32_t nbucket; /* a power of two, or 0 before the first insert */
    uint32_t count;   /* live records */
    uint32_t top;     /* next never-used record index (index 0 is the null link) */
    uint32_t freelist;
    uint32_t nchunk;
    uint32_t sweep; /* next bucket to sweep */
    rec **chunk;
} seg;

typedef struct table {
    seg s[NSEG];
} table;

/* One rule a reservation took from. */
typedef struct ritem {
    uint16_t level, slot;
    uint8_t type;
    uint8_t refundable; /* counted cost: settling gives back or charges */
    uint8_t holds;      /* holds slots until release */
    rl_fp taken;
    uint32_t keyoff, keylen;
} ritem;

typedef struct resv {
    struct resv *hnext;       /* hash chain */
    struct resv *prev, *next; /* creation order = expiry order (one TTL for all) */
    uint64_t id;
    rl_ns taken_at, expires;
    rl_fp cost;
    size_t size; /* bytes allocated, keys included */
    uint8_t settled;
    uint8_t holds; /* some item holds slots */
    uint16_t n;
    ritem item[]; /* then the keys the items name */
} resv;

typedef struct mem_store {
    rl_store base;
    const rl_config *cfg;
    const rl_resolver *res;
    uint64_t seed;
    table *tables;
    /* reservations */
    pthread_mutex_t rmu;
    resv **rbucket;
    size_t nrbucket, nresv;
    resv *oldest, *newest;
    uint64_t idseq, idkey;
    uint64_t expired;
    /* where the next tick sweeps */
    size_t sweep_level, sweep_seg;
} mem_store;

static const int64_t zero_state[RL_STATE_MAX / 8];

/* ---- records ---------------------------------------------------------------------------- */

static inline rec *rec_at(const seg *s, uint32_t i)
{
    return &s->chunk[i >> CHUNK_BITS][i & (CHUNK_RECS - 1)];
}

static inline const char *rec_key(const rec *r)
{
    return r->klen <= KEY_INLINE ? r->key.in : r->key.out;
}

static inline void *rec_state(rec *r, const rl_rule_type *t)
{
    return t->state_size <= RL_STATE_INLINE ? (void *)r->st.w : r->st.ext;
}

static inline uint32_t bucket_of(uint64_t h, unsigned slot, uint32_t nbucket)
{
    return (uint32_t)(h + slot * 0x9e3779b97f4a7c15ull) & (nbucket - 1);
}

static uint32_t rec_find(const seg *s, uint64_t h, unsigned slot, const char *key, size_t klen)
{
    if (!s->nbucket)
        return 0;
    for (uint32_t i = s->bucket[bucket_of(h, slot, s->nbucket)]; i; i = rec_at(s, i)->next) {
        const rec *r = rec_at(s, i);
        if (r->slot == slot && r->klen == klen && memcmp(rec_key(r), key, klen) == 0)
            return i;
    }
    return 0;
}

static void *chunk_alloc(void)
{
    void *p = mmap(NULL, CHUNK_RECS * sizeof(rec), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void chunk_free(rec *c)
{
    munmap(c, CHUNK_RECS * sizeof(rec));
}

/* Links every record into a bucket array of nb buckets (a power of two). */
static int rebucket(mem_store *ms, seg *s, uint32_t nb)
{
    uint32_t *b = calloc(nb, sizeof *b);
    if (!b)
        return -1;
    for (uint32_t i = 0; i < s->nbucket; i++)
        for (uint32_t j = s->bucket[i], next; j; j = next) {
            rec *r = rec_at(s, j);
            next = r->next;
            uint32_t k = bucket_of(rl__hash(rec_key(r), r->klen, ms->seed), r->slot, nb);
            r->next = b[k];
            b[k] = j;
        }
    free(s->bucket);
    s->bucket = b;
    s->nbucket = nb;
    s->sweep = 0;
    return 0;
}

/* A new record for (slot, key) holding a zero state of type t. Returns its index or 0. */
static uint32_t rec_insert(mem_store *ms, seg *s, uint64_t h, unsigned slot, const char *key,
                           size_t klen, const rl_rule_type *t, unsigned type_id)
{
    if (s->count >= s->nbucket && rebucket(ms, s, s->nbucket ? s->nbucket * 2 : 8) != 0)
        return 0;
    uint32_t i = s->freelist;
    if (!i) {
        if (s->top == 0)
            s->top = 1;
        if ((s->top >> CHUNK_BITS) >= s->nchunk) {
            rec **cs = realloc(s->chunk, (s->nchunk + 1) * sizeof *cs);
            if (!cs)
                return 0;
            s->chunk = cs;
            if (!(cs[s->nchunk] = chunk_alloc()))
                return 0;
            s->nchunk++;
        }
        i = s->top;
    }
    rec *r = rec_at(s, i);
    char *kout = NULL;
    void *ext = NULL;
    if (klen > KEY_INLINE && !(kout = rl__strndup(key, klen)))
        return 0;
    if (t->state_size > RL_STATE_INLINE && !(ext = calloc(1, t->state_size))) {
        free(kout);
        return 0;
    }
    if (i == s->freelist)
        s->freelist = r->next;
    else
        s->top++;
    memset(r, 0, sizeof *r);
    r->klen = (uint16_t)klen;
    r->slot = (uint8_t)slot;
    r->type = (uint8_t)(type_id + 1);
    if (kout)
        r->key.out = kout;
    else
        memcpy(r->key.in, key, klen);
    if (ext)
        r->st.ext = ext;
    uint32_t b = bucket_of(h, slot, s->nbucket);
    r->next = s->bucket[b];
    s->bucket[b] = i;
    __atomic_store_n(&s->count, s->count + 1, __ATOMIC_RELAXED);
    return i;
}

/* Frees what the state of r holds; the type is the record's own. */
static void state_clear(mem_store *ms, rec *r)
{
    const rl_rule_type *t = rl_registry_at(ms->cfg->reg, (size_t)r->type - 1);
    if (!t)
        return;
    void *st = rec_state(r, t);
    if (t->state_free)
        t->state_free(NULL, st);
    if (t->state_size > RL_STATE_INLINE)
        free(r->st.ext);
}

/* Gives r a zero state of another type (a tier change put another rule at its position). */
static int rec_retype(mem_store *ms, rec *r, const rl_rule_type *t, unsigned type_id)
{
    void *ext = NULL;
    if (t->state_size > RL_STATE_INLINE && !(ext = calloc(1, t->state_size)))
        return -1;
    state_clear(ms, r);
    memset(&r->st, 0, sizeof r->st);
    if (ext)
        r->st.ext = ext;
    r->type = (uint8_t)(type_id + 1);
    return 0;
}

/* Unlinks and frees record i, which *link points to. */
static void rec_remove(mem_store *ms, seg *s, uint32_t *link, uint32_t i)
{
    rec *r = rec_at(s, i);
    *link = r->next;
    state_clear(ms, r);
    if (r->klen > KEY_INLINE)
        free(r->key.out);
    memset(r, 0, sizeof *r);
    r->next = s->freelist;
    s->freelist = i;
    __atomic_store_n(&s->count, s->count - 1, __ATOMIC_RELAXED);
}

/* Moves the live records of a mostly empty segment into as few chunks as they need. */
static void compact(mem_store *ms, seg *s)
{
    uint32_t need = (s->count + 1 + CHUNK_RECS - 1) / CHUNK_RECS;
    rec **cs = calloc(need ? need : 1, sizeof *cs);
    uint32_t nb = 8;
    while (nb < s->count)
        nb *= 2;
    uint32_t *b = calloc(nb, sizeof *b);
    int ok = cs && b;
    for (uint32_t c = 0; ok && c < need; c++)
        ok = (cs[c] = chunk_alloc()) != NULL;
    if (!ok) {
        for (uint32_t c = 0; cs && c < need; c++)
            if (cs[c])
                chunk_free(cs[c]);
        free(cs);
        free(b);
        return;
    }
    seg fresh = {.bucket = b, .nbucket = nb, .top = 1, .nchunk = need, .chunk = cs};
    for (uint32_t i = 0; i < s->nbucket; i++)
        for (uint32_t j = s->bucket[i]; j; j = rec_at(s, j)->next) {
            const rec *r = rec_at(s, j);
            uint32_t k = fresh.top++;
            rec *to = rec_at(&fresh, k);
            *to = *r;
            uint32_t bk = bucket_of(rl__hash(rec_key(r), r->klen, ms->seed), r->slot, nb);
            to->next = b[bk];
            b[bk] = k;
        }
    for (uint32_t c = 0; c < s->nchunk; c++)
        chunk_free(s->chunk[c]);
    free(s->chunk);
    free(s->bucket);
    s->chunk = cs;
    s->nchunk = need;
    s->bucket = b;
    s->nbucket = nb;
    s->top = fresh.top;
    s->freelist = 0;
    s->sweep = 0;
}

static seg *seg_of(mem_store *ms, size_t level, uint64_t h)
{
    return &ms->tables[level].s[h >> (64 - SEG_BITS)];
}

/* ---- reservations ------------------------------------------------------------------------ */

/* A bijection of 64-bit values (the splitmix64 finaliser): ids follow a counter but cannot be
 * guessed from one another without the key. */
static uint64_t permute(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static int parse_id(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (strlen(s) != RL_RESERVATION_ID - 1 || s[0] != 'r' || s[1] != '-')
        return -1;
    for (int i = 2; i < RL_RESERVATION_ID - 1; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

static resv **resv_link(mem_store *ms, uint64_t id)
{
    resv **l = &ms->rbucket[permute(id) & (ms->nrbucket - 1)];
    while (*l && (*l)->id != id)
        l = &(*l)->hnext;
    return l;
}

static int resv_grow(mem_store *ms)
{
    size_t nb = ms->nrbucket ? ms->nrbucket * 2 : 64;
    resv **b = calloc(nb, sizeof *b);
    if (!b)
        return -1;
    for (size_t i = 0; i < ms->nrbucket; i++)
        for (resv *r = ms->rbucket[i], *next; r; r = next) {
            next = r->hnext;
            size_t k = permute(r->id) & (nb - 1);
            r->hnext = b[k];
            b[k] = r;
        }
    free(ms->rbucket);
    ms->rbucket = b;
    ms->nrbucket = nb;
    return 0;
}

/* Unlinks r from the hash and the expiry list (rmu held). */
static void resv_unlink(mem_store *ms, resv *r)
{
    resv **l = resv_link(ms, r->id);
    *l = r->hnext;
    if (r->prev)
        r->prev->next = r->next;
    else
        ms->oldest = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        ms->newest = r->prev;
    ms->nresv--;
}

/* Adds r with a fresh id (rmu held). */
static int resv_add(mem_store *ms, resv *r)
{
    if (ms->nresv >= ms->nrbucket && resv_grow(ms) != 0)
        return -1;
    r->id = permute(++ms->idseq ^ ms->idkey);
    resv **l = resv_link(ms, r->id);
    r->hnext = *l;
    *l = r;
    r->next = NULL;
    r->prev = ms->newest;
    if (ms->newest)
        ms->newest->next = r;
    else
        ms->oldest = r;
    ms->newest = r;
    ms->nresv++;
    return 0;
}

/* Applies fn to the record an item of a reservation names, with the rule now in force there
 * when it is still of the same type. */
static void resv_apply(mem_store *ms, const resv *rv, const ritem *it, rl_ns now, rl_fp amount,
                       int release)
{
    const char *key = (const char *)(rv->item + rv->n) + it->keyoff;
    rl_rules *ref = NULL;
    const rl_rule *rule = ms->res->rule_at(ms->res->ctx, it->level, it->slot, key, it->keylen,
                                           &ref);
    if (rule && rule->type_id + 1 == it->type) {
        uint64_t h = rl__hash(key, it->keylen, ms->seed);
        seg *s = seg_of(ms, it->level, h);
        pthread_mutex_lock(&s->mu);
        uint32_t i = rec_find(s, h, it->slot, key, it->keylen);
        if (i && rec_at(s, i)->type == it->type) {
            void *st = rec_state(rec_at(s, i), rule->type);
            if (release && rule->type->release)
                rule->type->release(rule->params, st, now, amount);
            else if (!release && rule->type->refund)
                rule->type->refund(rule->params, st, now, rv->taken_at, amount);
        }
        pthread_mutex_unlock(&s->mu);
    }
    rl_rules_unref(ref);
}

static void resv_release_all(mem_store *ms, resv *rv, rl_ns now)
{
    for (uint16_t k = 0; k < rv->n; k++)
        if (rv->item[k].holds)
            resv_apply(ms, rv, &rv->item[k], now, rv->item[k].taken, 1);
}

/* A reservation for the plan's takes, not yet added; NULL when out of memory. */
static resv *resv_new(const rl_plan *plan, const rl_decision *d, rl_ns ttl)
{
    size_t keys = 0, n = 0;
    for (size_t i = 0; i < plan->n; i++) {
        const rl_rule *r = d->applied[i].rule;
        if ((r->unit == RL_UNIT_COST && r->type->refund) || (r->type->flags & RL_RULE_HOLDS)) {
            keys += d->applied[i].keylen;
            n++;
        }
    }
    size_t size = offsetof(resv, item) + n * sizeof(ritem) + keys;
    resv *rv = calloc(1, size);
    if (!rv)
        return NULL;
    char *kb = (char *)(rv->item + n);
    size_t off = 0;
    for (size_t i = 0; i < plan->n; i++) {
        const rl_applied *a = &d->applied[i];
        const rl_rule *r = a->rule;
        int refundable = r->unit == RL_UNIT_COST && r->type->refund;
        int holds = (r->type->flags & RL_RULE_HOLDS) != 0;
        if (!refundable && !holds)
            continue;
        rv->holds |= (uint8_t)holds;
        ritem *it = &rv->item[rv->n++];
        it->level = a->level;
        it->slot = a->slot;
        it->type = (uint8_t)(r->type_id + 1);
        it->refundable = (uint8_t)refundable;
        it->holds = (uint8_t)holds;
        it->taken = plan->items[i].cost;
        it->keyoff = (uint32_t)off;
        it->keylen = a->keylen;
        memcpy(kb + off, a->key, a->keylen);
        off += a->keylen;
    }
    rv->size = size;
    rv->taken_at = plan->now;
    rv->expires = rl__add_sat(plan->now, ttl);
    rv->cost = plan->cost;
    return rv;
}

/* ---- the store's methods ----------------------------------------------------------------- */

static int ms_attach(void *cls, const rl_config *cfg, const rl_resolver *res, rl_err *err)
{
    mem_store *ms = cls;
    ms->cfg = cfg;
    ms->res = res;
    ms->tables = aligned_alloc(64, cfg->nlevels * sizeof(table));
    if (!ms->tables)
        return rl__fail(err, RL_ENOMEM, "out of memory");
    memset(ms->tables, 0, cfg->nlevels * sizeof(table));
    for (size_t l = 0; l < cfg->nlevels; l++)
        for (size_t i = 0; i < NSEG; i++)
            pthread_mutex_init(&ms->tables[l].s[i].mu, NULL);
    return RL_OK;
}

static int ms_decide(void *cls, const rl_plan *plan, rl_decision *d, rl_err *err)
{
    mem_store *ms = cls;
    seg *locked[RL_MAX_LEVELS];
    seg *segof[RL_MAX_APPLIED];
    uint64_t hash[RL_MAX_APPLIED];
    uint32_t idx[RL_MAX_APPLIED];
    size_t nlocked = 0;
    int allowed = 1, holds = 0, rc = RL_OK;
    resv *rv = NULL;

    /* Items of one level are consecutive and share its key: one hash and one lock a level. */
    for (size_t i = 0; i < plan->n; i++) {
        const rl_applied *a = &d->applied[i];
        if (i > 0 && d->applied[i - 1].level == a->level) {
            hash[i] = hash[i - 1];
            segof[i] = segof[i - 1];
        } else {
            hash[i] = rl__hash(a->key, a->keylen, ms->seed);
            segof[i] = seg_of(ms, a->level, hash[i]);
            pthread_mutex_lock(&segof[i]->mu);
            locked[nlocked++] = segof[i];
        }
    }

    /* phase 1: how long until the cost fits, for every rule */
    for (size_t i = 0; i < plan->n; i++) {
        rl_applied *a = &d->applied[i];
        const rl_rule *r = a->rule;
        const void *st = zero_state;
        idx[i] = 0;
        if (r->type->state_size) {
            idx[i] = rec_find(segof[i], hash[i], a->slot, a->key, a->keylen);
            rec *rc_ = idx[i] ? rec_at(segof[i], idx[i]) : NULL;
            if (rc_ && rc_->type == r->type_id + 1)
                st = rec_state(rc_, r->type);
        }
        a->wait = r->type->wait(r->params, st, a->key, a->keylen, plan->now, plan->items[i].need);
        allowed &= a->wait == 0;
        holds |= (r->type->flags & RL_RULE_HOLDS) != 0;
    }

    /* phase 2: take from every rule, once every record exists */
    if (allowed && !(plan->flags & RL_DRY_RUN)) {
        for (size_t i = 0; i < plan->n && rc == RL_OK; i++) {
            const rl_applied *a = &d->applied[i];
            const rl_rule *r = a->rule;
            if (!r->type->state_size)
                continue;
            if (!idx[i])
                idx[i] = rec_insert(ms, segof[i], hash[i], a->slot, a->key, a->keylen, r->type,
                                    r->type_id);
            else if (rec_at(segof[i], idx[i])->type != r->type_id + 1 &&
                     rec_retype(ms, rec_at(segof[i], idx[i]), r->type, r->type_id) != 0)
                idx[i] = 0;
            if (!idx[i])
                rc = rl__fail(err, RL_ENOMEM, "out of memory");
        }
        if (rc == RL_OK && (holds || (plan->flags & RL_RESERVE)) &&
            !(rv = resv_new(plan, d, ms->cfg->reservation_ttl)))
            rc = rl__fail(err, RL_ENOMEM, "out of memory");
        if (rc == RL_OK) {
            pthread_mutex_lock(&ms->rmu);
            if (rv && resv_add(ms, rv) != 0)
                rc = rl__fail(err, RL_ENOMEM, "out of memory");
            else if (rv)
                snprintf(d->reservation, sizeof d->reservation, "r-%016llx",
                         (unsigned long long)rv->id);
            pthread_mutex_unlock(&ms->rmu);
            if (rc != RL_OK) {
                free(rv);
                rv = NULL;
            }
        }
        for (size_t i = 0; i < plan->n && rc == RL_OK; i++) {
            const rl_rule *r = d->applied[i].rule;
            if (r->type->take && idx[i])
                r->type->take(r->params, rec_state(rec_at(segof[i], idx[i]), r->type), plan->now,
                              plan->items[i].cost);
        }
    }

    /* what every rule has left after the decision */
    for (size_t i = 0; i < plan->n && rc == RL_OK; i++) {
        rl_applied *a = &d->applied[i];
        const rl_rule *r = a->rule;
        a->has_status = r->type->status != NULL;
        if (!a->has_status)
            continue;
        const void *st = zero_state;
        if (idx[i] && rec_at(segof[i], idx[i])->type == r->type_id + 1)
            st = rec_state(rec_at(segof[i], idx[i]), r->type);
        r->type->status(r->params, st, plan->now, &a->st);
    }

    while (nlocked > 0)
        pthread_mutex_unlock(&locked[--nlocked]->mu);
    return rc;
}

static int ms_settle(void *cls, const char *id, rl_fp actual, rl_ns now, rl_settlement *out,
                     rl_err *err)
{
    mem_store *ms = cls;
    uint64_t v;
    resv *rv = NULL, *copy = NULL;
    int rc = RL_OK;

    if (parse_id(id, &v) != 0)
        return rl__fail(err, RL_ENOTFOUND, "reservation: unknown or expired");
    pthread_mutex_lock(&ms->rmu);
    if (ms->nrbucket)
        rv = *resv_link(ms, v);
    if (!rv || rv->expires <= now)
        rc = rl__fail(err, RL_ENOTFOUND, "reservation: unknown or expired");
    else if (rv->settled)
        rc = rl__fail(err, RL_ESETTLED, "reservation: already settled");
    else if (!(copy = malloc(rv->size)))
        rc = rl__fail(err, RL_ENOMEM, "out of memory");
    else {
        rv->settled = 1;
        memcpy(copy, rv, rv->size);
    }
    pthread_mutex_unlock(&ms->rmu);
    if (rc != RL_OK)
        return rc;

    /* The copy is applied outside rmu: a decision holds segment locks while it takes rmu. */
    out->reserved = copy->cost;
    out->actual = actual;
    out->refunded = actual < copy->cost ? copy->cost - actual : 0;
    out->charged = actual > copy->cost ? actual - copy->cost : 0;
    if (actual != copy->cost)
        for (uint16_t k = 0; k < copy->n; k++)
            if (copy->item[k].refundable)
                resv_apply(ms, copy, &copy->item[k], now, copy->cost - actual, 0);
    free(copy);
    return RL_OK;
}

static int ms_release(void *cls, const char *id, rl_ns now, rl_err *err)
{
    mem_store *ms = cls;
    uint64_t v;
    resv *rv = NULL;

    if (parse_id(id, &v) != 0)
        return rl__fail(err, RL_ENOTFOUND, "reservation: unknown, expired or released");
    pthread_mutex_lock(&ms->rmu);
    if (ms->nrbucket)
        rv = *resv_link(ms, v);
    if (rv && rv->expires > now)
        resv_unlink(ms, rv);
    else
        rv = NULL;
    pthread_mutex_unlock(&ms->rmu);
    if (!rv)
        return rl__fail(err, RL_ENOTFOUND, "reservation: unknown, expired or released");
    resv_release_all(ms, rv, now);
    free(rv);
    return RL_OK;
}

/* Drops idle records in up to SWEEP_BATCH buckets of s; returns the buckets visited. */
static uint32_t sweep_seg(mem_store *ms, size_t level, seg *s, rl_ns now)
{
    pthread_mutex_lock(&s->mu);
    uint32_t visited = 0;
    for (; visited < SWEEP_BATCH && s->sweep < s->nbucket; visited++, s->sweep++) {
        uint32_t *link = &s->bucket[s->sweep];
        while (*link) {
            uint32_t i = *link;
            rec *r = rec_at(s, i);
            rl_rules *ref = NULL;
            const rl_rule *rule =
                ms->res->rule_at(ms->res->ctx, level, r->slot, rec_key(r), r->klen, &ref);
            int idle = !rule || rule->type_id + 1 != r->type;
            if (!idle && rule->type->idle_at)
                idle = rule->type->idle_at(rule->params, rec_state(r, rule->type)) <= now;
            rl_rules_unref(ref);
            if (idle)
                rec_remove(ms, s, link, i);
            else
                link = &r->next;
        }
    }
    int done = s->sweep >= s->nbucket;
    if (done) {
        s->sweep = 0;
        uint32_t cap = s->nchunk * CHUNK_RECS;
        if (s->nchunk > 1 && s->count < cap / 4)
            compact(ms, s);
        else if (s->nbucket > 64 && s->count < s->nbucket / 8)
            rebucket(ms, s, s->nbucket / 4);
    }
    pthread_mutex_unlock(&s->mu);
    return done ? visited + 1 : visited;
}

static void ms_tick(void *cls, rl_ns now)
{
    mem_store *ms = cls;

    /* expire reservations: the oldest first, one TTL for all */
    for (;;) {
        pthread_mutex_lock(&ms->rmu);
        resv *rv = ms->oldest;
        if (rv && rv->expires <= now) {
            resv_unlink(ms, rv);
            ms->expired += !rv->settled || rv->holds; /* the client never finished it */
        } else {
            rv = NULL;
        }
        pthread_mutex_unlock(&ms->rmu);
        if (!rv)
            break;
        resv_release_all(ms, rv, now);
        free(rv);
    }

    /* drop idle state: a bounded number of buckets per tick, then move on */
    size_t budget = 64 * SWEEP_BATCH;
    for (size_t steps = 0; steps < ms->cfg->nlevels * NSEG && budget > 0; steps++) {
        seg *s = &ms->tables[ms->sweep_level].s[ms->sweep_seg];
        uint32_t before = s->sweep;
        uint32_t v = sweep_seg(ms, ms->sweep_level, s, now);
        budget -= v < budget ? v : budget;
        if (s->sweep == 0 || s->sweep == before) {
            if (++ms->sweep_seg == NSEG) {
                ms->sweep_seg = 0;
                ms->sweep_level = (ms->sweep_level + 1) % ms->cfg->nlevels;
            }
        }
    }
}

static size_t ms_keys(void *cls, size_t level)
{
    mem_store *ms = cls;
    size_t n = 0;
    if (level >= ms->cfg->nlevels)
        return 0;
    for (size_t i = 0; i < NSEG; i++)
        n += __atomic_load_n(&ms->tables[level].s[i].count, __ATOMIC_RELAXED);
    return n;
}

static void ms_stats(void *cls, rl_stats *out)
{
    mem_store *ms = cls;
    pthread_mutex_lock(&ms->rmu);
    out->reservations_active = ms->nresv;
    out->reservations_expired = ms->expired;
    pthread_mutex_unlock(&ms->rmu);
}

static void ms_destroy(void *cls)
{
    mem_store *ms = cls;
    for (size_t l = 0; ms->tables && l < ms->cfg->nlevels; l++)
        for (size_t k = 0; k < NSEG; k++) {
            seg *s = &ms->tables[l].s[k];
            for (uint32_t b = 0; b < s->nbucket; b++)
                for (uint32_t i = s->bucket[b], next; i; i = next) {
                    rec *r = rec_at(s, i);
                    next = r->next;
                    state_clear(ms, r);
                    if (r->klen > KEY_INLINE)
                        free(r->key.out);
                }
            for (uint32_t c = 0; c < s->nchunk; c++)
                chunk_free(s->chunk[c]);
            free(s->chunk);
            free(s->bucket);
            pthread_mutex_destroy(&s->mu);
        }
    free(ms->tables);
    for (resv *rv = ms->oldest, *next; rv; rv = next) {
        next = rv->next;
        free(rv);
    }
    free(ms->rbucket);
    pthread_mutex_destroy(&ms->rmu);
    free(ms);
}

static const rl_store_ops memory_ops = {
    .name = "memory",
    .attach = ms_attach,
    .decide = ms_decide,
    .settle = ms_settle,
    .release = ms_release,
    .tick = ms_tick,
    .keys = ms_keys,
    .stats = ms_stats,
    .destroy = ms_destroy,
};

rl_store *rl_memory_store_new(void)
{
    mem_store *ms = calloc(1, sizeof *ms);
    if (!ms)
        return NULL;
    pthread_mutex_init(&ms->rmu, NULL);
    ms->seed = rl__random64();
    ms->idkey = rl__random64();
    ms->base.ops = &memory_ops;
    ms->base.cls = ms;
    return &ms->base;
}
