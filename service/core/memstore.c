/*
 * memstore.c - the in-memory store: per-key state in compact records (keytable.c), and the
 * reservations.
 *
 * A decision locks one segment per level, in level order, so two decisions never deadlock and
 * decisions on different keys rarely meet; it looks each rule's record up once (one cache miss
 * for a key not recently used), asks every rule to wait, and only when all answer 0 takes from
 * every rule. Nothing is allocated per decision: only per new key (and for a key longer than
 * 16 bytes, or a reservation).
 *
 * Idle state is dropped by tick(): a record whose rule says it is idle (a full bucket, an
 * empty window) is indistinguishable from a missing one. Segments shrink as keys go idle, so
 * memory goes back.
 */
#include <stdlib.h>
#include <string.h>

#include "memstore.h"

#define SWEEP_BATCH 1024 /* slots swept under one lock hold */

static const int64_t zero_state[RL_STATE_MAX / 8];

/* ---- records ------------------------------------------------------------------------- */

void rl__ms_state_clear(mem_store *ms, rl__rec *r)
{
    const rl_rule_type *t = rl_registry_at(ms->cfg->reg, code_type_id(r->type));
    if (!t)
        return;
    if (t->state_free)
        t->state_free(NULL, rec_state(r, t));
    if (t->state_size > RL_STATE_INLINE)
        free(r->st.ext);
    memset(&r->st, 0, sizeof r->st);
}

int rl__ms_key_claim(mem_store *ms)
{
    if (!ms->max_keys)
        return 1;
    if (__atomic_add_fetch(&ms->nkeys, 1, __ATOMIC_RELAXED) <= ms->max_keys)
        return 1;
    __atomic_sub_fetch(&ms->nkeys, 1, __ATOMIC_RELAXED);
    return 0;
}

void rl__ms_key_drop(mem_store *ms, uint64_t n)
{
    if (ms->max_keys && n)
        __atomic_sub_fetch(&ms->nkeys, n, __ATOMIC_RELAXED);
}

/* Gives r a zero state of another type (a tier change put another rule at its position). */
static int rec_retype(mem_store *ms, rl__rec *r, const rl_rule_type *t, unsigned type_id)
{
    void *ext = NULL;
    if (ext_size(t) && !(ext = calloc(1, ext_size(t))))
        return -1;
    rl__ms_state_clear(ms, r);
    if (ext)
        r->st.ext = ext;
    r->type = type_code(type_id);
    return 0;
}

/* ---- reservations ------------------------------------------------------------------------ */

static resv **resv_link(mem_store *ms, uint64_t id)
{
    resv **l = &ms->rbucket[rl_store_permute(id) & (ms->nrbucket - 1)];
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
            size_t k = rl_store_permute(r->id) & (nb - 1);
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

int rl__ms_resv_add(mem_store *ms, resv *r, int keep_id)
{
    if (ms->nresv >= ms->nrbucket && resv_grow(ms) != 0)
        return -1;
    resv **l;
    for (;;) {
        if (!keep_id)
            r->id = rl_store_permute(++ms->idseq ^ ms->idkey);
        l = resv_link(ms, r->id);
        if (!*l)
            break;
        if (keep_id)
            return -1;
    }
    r->hnext = NULL;
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
                       int release, const rl_outcome *o)
{
    const char *key = (const char *)(rv->item + rv->n) + it->keyoff;
    rl_rules *ref = NULL;
    const rl_rule *rule = ms->res->rule_at(ms->res->ctx, it->level, it->slot, key, it->keylen,
                                           &ref);
    if (rule && code_is(it->type, rule)) {
        uint64_t kh = rl__hash(key, it->keylen, ms->seed);
        rl__seg *s = rl__table_seg(&ms->tables[it->level], kh);
        rl__spin_lock(&s->lock);
        uint32_t i = rl__seg_find(s, rl__rec_hash(kh, it->slot), it->slot, key, it->keylen);
        if (i != RL__NONE && s->r[i].type == it->type) {
            void *st = rec_state(&s->r[i], rule->type);
            void (*learn)(const void *, void *, rl_ns, rl_ns, rl_fp, const rl_outcome *) =
                rl_rule_release_outcome(rule->type);
            if (release && learn)
                learn(rule->params, st, now, rv->taken_at, amount, o);
            else if (release && rule->type->release)
                rule->type->release(rule->params, st, now, amount);
            else if (!release && rule->type->refund)
                rule->type->refund(rule->params, st, now, rv->taken_at, amount);
        }
        rl__spin_unlock(&s->lock);
    }
    rl_rules_unref(ref);
}

void rl__ms_resv_release_all(mem_store *ms, resv *rv, rl_ns now, const rl_outcome *o)
{
    for (uint16_t k = 0; k < rv->n; k++)
        if (rv->item[k].holds)
            resv_apply(ms, rv, &rv->item[k], now, rv->item[k].taken, 1, o);
}

rl_outcome rl__ms_expired_outcome(const resv *rv, rl_ns now)
{
    rl_ns lat = now > rv->taken_at ? now - rv->taken_at : 0;
    rl_outcome o = {RL_OUTCOME_TIMEOUT, lat < RL_OUTCOME_LATENCY_MAX ? lat : RL_OUTCOME_LATENCY_MAX};
    return o;
}

/* A reservation for the plan's takes (items i with takes[i]), not yet added; NULL when out of
 * memory. */
static resv *resv_new(const rl_plan *plan, const rl_decision *d, const uint8_t *takes, rl_ns ttl)
{
    size_t keys = 0, n = 0;
    for (size_t i = 0; i < plan->n; i++) {
        const rl_rule *r = d->applied[i].rule;
        if (takes[i] && ((rl_unit_refundable(r->unit) && r->type->refund) ||
                         (r->type->flags & RL_RULE_HOLDS))) {
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
        int refundable = rl_unit_refundable(r->unit) && r->type->refund;
        int holds = (r->type->flags & RL_RULE_HOLDS) != 0;
        if (!takes[i] || (!refundable && !holds))
            continue;
        rv->holds |= (uint8_t)holds;
        ritem *it = &rv->item[rv->n++];
        it->level = a->level;
        it->slot = a->slot;
        it->type = type_code(r->type_id);
        it->refundable = (uint8_t)refundable;
        it->holds = (uint8_t)holds;
        it->unit = (uint8_t)r->unit;
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
    if (plan->amt)
        memcpy(rv->amt, plan->amt, sizeof rv->amt);
    if (plan->price) {
        rv->priced = 1;
        memcpy(rv->price.per_million, plan->price->per_million, sizeof rv->price.per_million);
    }
    return rv;
}

/* ---- the store's methods ----------------------------------------------------------------- */

static int ms_attach(void *cls, const rl_config *cfg, const rl_resolver *res, rl_err *err)
{
    mem_store *ms = cls;
    ms->cfg = cfg;
    ms->res = res;
    ms->tables = aligned_alloc(64, cfg->nlevels * sizeof(rl__table));
    if (!ms->tables)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    memset(ms->tables, 0, cfg->nlevels * sizeof(rl__table));
    for (size_t l = 0; l < cfg->nlevels; l++) {
        const char *k = cfg->levels[l].default_key;
        ms->dkey[l] = k;
        ms->dklen[l] = k ? strlen(k) : 0;
        ms->dkhash[l] = k ? rl__hash(k, ms->dklen[l], ms->seed) : 0;
    }
    return RL_OK;
}

/* Segments smaller than this (48 KiB of records) stay in the cache while they are used: not
 * worth a prefetch. */
#define PREFETCH_CAP 1024u

/* Starts loading the records a decision on key at level will read: called by the limiter as
 * soon as the key is known, so that the cache miss of a per-user record overlaps with the rest
 * of the plan's making (the segment may still change before the decision locks it: this only
 * loads the cache). Returns the key's hash, which ms_decide then takes from the plan. */
static uint64_t ms_prefetch(void *cls, size_t level, const rl_rules *rs, const char *key,
                            size_t keylen)
{
    mem_store *ms = cls;
    uint64_t kh = rl__hash(key, keylen, ms->seed);
    const rl__seg *s = rl__table_seg(&ms->tables[level], kh);
    if (__atomic_load_n(&s->cap, __ATOMIC_RELAXED) < PREFETCH_CAP)
        return kh;
    for (size_t i = 0; i < rs->n && i < 4; i++)
        if (rs->v[i].type->state_size)
            rl__seg_prefetch(s, rl__rec_hash(kh, (unsigned)i));
    return kh;
}

/* ---- one decision ---------------------------------------------------------------------- */

/* Whether two applied rules share their key (the rules of one key are consecutive). */
static int same_key(const rl_applied *a, const rl_applied *b)
{
    return a->level == b->level && a->key == b->key && a->keylen == b->keylen;
}

/* Locks the distinct segments of the plan in (level, address) order; returns how many. */
static size_t lock_in_order(size_t n, const rl_decision *d, rl__seg *const *segof,
                            rl__seg **locked)
{
    uint16_t lv[RL_MAX_APPLIED];
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = m;
        uint16_t l = d->applied[i].level;
        int dup = 0;
        for (size_t k = 0; k < m && !dup; k++)
            dup = locked[k] == segof[i];
        if (dup)
            continue;
        while (j > 0 && (lv[j - 1] > l || (lv[j - 1] == l && (uintptr_t)locked[j - 1] >
                                                                  (uintptr_t)segof[i]))) {
            locked[j] = locked[j - 1];
            lv[j] = lv[j - 1];
            j--;
        }
        locked[j] = segof[i];
        lv[j] = l;
        m++;
    }
    for (size_t k = 0; k < m; k++)
        rl__spin_lock(&locked[k]->lock);
    return m;
}


/* What a decision keeps per applied rule while it runs: where its record is and what its
 * one evaluation found. Records are found once, evaluated once; commit and report read the
 * evaluation. */
typedef struct run {
    mem_store *ms;
    const rl_plan *plan;
    rl_decision *d;
    size_t nlocked;
    rl__seg *locked[RL_MAX_APPLIED];
    rl__seg *seg[RL_MAX_APPLIED];
    uint32_t h[RL_MAX_APPLIED];
    rl__rec *rec[RL_MAX_APPLIED]; /* NULL: no record (yet) */
    int several;                  /* a level has several keys (a request of items) */
    unsigned seen;                /* SEEN_*: what phase 1 found across the items */
    uint8_t takes[RL_MAX_APPLIED]; /* takes when the request is allowed (a shadow rule: fits) */
} run;

#define SEEN_BLOCKS 0x1u   /* an item that decides does not fit: the request is denied */
#define SEEN_HOLDS 0x2u    /* a rule that takes holds slots (a reservation is needed) */
#define SEEN_MISSING 0x4u  /* a rule that takes has no record of its type yet */
#define SEEN_IN_STATE 0x8u /* a rule's evaluation points into its state */

/* The hash of item i's key: ms_prefetch's, unless the limiter did not call it. */
static inline uint64_t key_hash(const run *x, size_t i)
{
    const rl_applied *a = &x->d->applied[i];
    uint64_t kh = x->plan->items[i].hash;
    return kh ? kh : rl__hash(a->key, a->keylen, x->ms->seed);
}

/* Starts loading the records ms_prefetch did not: those of rules past a key's first four,
 * or all of a key the limiter did not prefetch. i is the key's first item. */
static void prefetch_rest(run *x, size_t i, uint64_t kh, rl__seg *seg)
{
    const rl_applied *a = &x->d->applied[i];
    size_t j = x->plan->items[i].hash ? i + 4 : i;
    for (; j < x->plan->n && same_key(a, &x->d->applied[j]); j++)
        if (x->d->applied[j].rule->type->state_size)
            rl__seg_prefetch(seg, rl__rec_hash(kh, x->d->applied[j].slot));
}

/* Where every item's record would be, for a plan with several keys on one level: the rules
 * of one key are consecutive, one hash and one segment a key. */
static void locate(run *x)
{
    uint64_t kh = 0;
    for (size_t i = 0; i < x->plan->n; i++) {
        const rl_applied *a = &x->d->applied[i];
        if (i == 0 || !same_key(&x->d->applied[i - 1], a)) {
            kh = key_hash(x, i);
            x->seg[i] = rl__table_seg(&x->ms->tables[a->level], kh);
            prefetch_rest(x, i, kh, x->seg[i]);
        } else {
            x->seg[i] = x->seg[i - 1];
        }
        x->h[i] = rl__rec_hash(kh, a->slot);
    }
}

/* What phase 1 found for one applied rule. */
typedef struct found {
    rl_ns wait;
    rl__rec *rec;   /* its record, of its type or not; NULL when none (or no state) */
    unsigned seen;  /* the SEEN_* bits it adds */
    int takes;      /* takes when the request is allowed (a shadow rule: when it fits) */
    int has_status; /* its type reports a status */
} found;

/* Phase 1 of one rule, the one place it is written for every way a decision is made: rule r,
 * checking item it under flags (a plan's), at (slot, key) in seg (locked) with record hash h,
 * finds its record and evaluates the rule once at now into *ev (a missing record or one of
 * another type evaluates as a zero state), and works out whether the rule takes and blocks.
 * Takes its inputs as values and writes nothing but *ev, so that the compiler keeps them in
 * registers (the decision's byte fields may alias anything). */
static inline __attribute__((always_inline)) found
phase1(const rl_rule *r, rl_plan_item it, unsigned flags, rl__seg *seg, uint32_t h,
       unsigned slot, const char *key, uint32_t klen, rl_ns now, rl_eval *ev)
{
    const rl_rule_type *t = r->type;
    const void *state = zero_state;
    found f = {.rec = NULL, .seen = t->flags & RL_RULE_EVAL_IN_STATE ? SEEN_IN_STATE : 0};
    if (t->state_size) {
        f.rec = rl__seg_lookup(seg, h, slot, key, klen);
        if (f.rec && code_is(f.rec->type, r))
            state = rec_state(f.rec, t);
        else
            f.seen |= SEEN_MISSING;
        if (t->flags & RL_RULE_HOLDS)
            f.seen |= SEEN_HOLDS;
    }
    f.wait = t->evaluate(r->params, state, key, klen, now, it.need, ev);
    f.has_status = t->report != NULL;
    f.takes = !(it.mode & RL_ITEM_SHADOW) || f.wait == 0;
    if (!f.takes)
        f.seen &= ~(SEEN_MISSING | SEEN_HOLDS);
    if (f.wait != 0 && rl_item_blocks(&it, flags))
        f.seen |= SEEN_BLOCKS;
    return f;
}

/* Phase 1 for item i of a plan, its segment seg locked (record hash h). Returns the SEEN_*
 * bits the item adds. */
static inline __attribute__((always_inline)) unsigned evaluate_one(run *x, size_t i,
                                                                   rl__seg *seg, uint32_t h)
{
    const rl_plan *plan = x->plan;
    rl_applied *a = &x->d->applied[i];
    rl_plan_item it = plan->items[i];
    found f = phase1(a->rule, it, plan->flags, seg, h, a->slot, a->key, a->keylen, plan->now,
                     &a->status.ev);
    x->seg[i] = seg;
    x->h[i] = h;
    x->rec[i] = f.rec;
    x->takes[i] = (uint8_t)f.takes;
    rl__applied_decided(a, it.mode, f.wait, f.has_status);
    return f.seen;
}

static void unlock_all(run *x);

/* A plan with several keys on one level (a request of items): every segment locked first. */
static unsigned lock_all_and_evaluate(run *x)
{
    unsigned seen = 0;
    x->several = 1;
    locate(x);
    x->nlocked = lock_in_order(x->plan->n, x->d, x->seg, x->locked);
    for (size_t i = 0; i < x->plan->n; i++)
        seen |= evaluate_one(x, i, x->seg[i], x->h[i]);
    return seen;
}

/* Phase 1 for every item; returns the SEEN_* bits, SEEN_BLOCKS when a rule that decides does
 * not fit (shadow rules, and charge rules of a request that takes, do not decide). Segments
 * are locked in level order (two decisions never deadlock), and each level's records are found
 * and evaluated as soon as its segment is locked: the cache miss of a per-user record is then
 * paid while only that user's segment is locked, not while a broad level's (team, global),
 * which every decision needs, is held. A plan with several keys on one level (levels not
 * increasing from key to key) locks all its segments first, each once, in (level, address)
 * order. */
static unsigned lock_and_evaluate(run *x)
{
    const rl_plan *plan = x->plan;
    const rl_applied *ap = x->d->applied;
    size_t n = plan->n;
    unsigned seen = 0;
    uint64_t kh = 0;
    rl__seg *seg = NULL;
    x->several = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || !same_key(&ap[i - 1], &ap[i])) {
            if (i > 0 && ap[i].level <= ap[i - 1].level) {
                /* nothing has changed yet: start again the other way */
                unlock_all(x);
                return lock_all_and_evaluate(x);
            }
            kh = key_hash(x, i);
            seg = rl__table_seg(&x->ms->tables[ap[i].level], kh);
            if (!plan->items[i].hash || i + 4 < n)
                prefetch_rest(x, i, kh, seg);
            rl__spin_lock(&seg->lock);
            x->locked[x->nlocked++] = seg;
        }
        seen |= evaluate_one(x, i, seg, rl__rec_hash(kh, ap[i].slot));
    }
    return seen;
}

static void unlock_all(run *x)
{
    while (x->nlocked > 0)
        rl__spin_unlock(&x->locked[--x->nlocked]->lock);
}

/* Whether record r of level behaves like a missing one at now: its rule is gone or of another
 * type, or the rule says its state is idle. */
static int rec_idle(mem_store *ms, size_t level, rl__rec *r, rl_ns now)
{
    rl_rules *ref = NULL;
    const rl_rule *rule =
        ms->res->rule_at(ms->res->ctx, level, r->slot, rl__rec_key(r), r->klen, &ref);
    int idle = !rule || !code_is(r->type, rule);
    if (!idle && rule->type->idle_at)
        idle = rule->type->idle_at(rule->params, rec_state(r, rule->type)) <= now;
    rl_rules_unref(ref);
    return idle;
}

/* Drops the idle records of s (locked); returns how many. */
static uint64_t drop_idle(mem_store *ms, size_t level, rl__seg *s, rl_ns now)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < s->cap;) {
        rl__rec *r = &s->r[i];
        if (r->type && rec_idle(ms, level, r, now)) {
            rl__ms_state_clear(ms, r);
            rl__seg_remove(s, i); /* the next record may now sit here: look again */
            n++;
        } else {
            i++;
        }
    }
    rl__ms_key_drop(ms, n);
    return n;
}

/* Finds the record of every stateful rule that takes again (an insert may move them). */
static void find_again(run *x)
{
    for (size_t i = 0; i < x->plan->n; i++) {
        const rl_applied *a = &x->d->applied[i];
        if (a->rule->type->state_size && x->takes[i])
            x->rec[i] = rl__seg_lookup(x->seg[i], x->h[i], a->slot, a->key, a->keylen);
    }
}

/* Gives every stateful rule a record of its type (a new key's, or one whose position now has
 * another type); then finds them again, since an insert may move the records found before.
 * RL_EFULL when a new record would pass max_keys. */
static int make_records(run *x, rl_err *err)
{
    int moved = 0;
    for (size_t i = 0; i < x->plan->n; i++) {
        const rl_applied *a = &x->d->applied[i];
        const rl_rule *r = a->rule;
        if (!r->type->state_size || !x->takes[i])
            continue;
        if (moved && x->rec[i]) /* found before an insert that may have moved it */
            x->rec[i] = rl__seg_lookup(x->seg[i], x->h[i], a->slot, a->key, a->keylen);
        if (!x->rec[i]) {
            if (!rl__ms_key_claim(x->ms)) {
                if (moved)
                    find_again(x);
                return rl_errf(err, RL_EFULL,
                               "store: max_keys (%llu) key states held and none idle; keys "
                               "with state are still served, try again later",
                               (unsigned long long)x->ms->max_keys);
            }
            uint32_t k = rl__seg_insert(x->seg[i], x->h[i], a->slot, a->key, a->keylen,
                                        type_code(r->type_id), ext_size(r->type));
            if (k == RL__NONE)
                rl__ms_key_drop(x->ms, 1);
            else
                x->rec[i] = &x->seg[i]->r[k];
            moved = 1;
        } else if (!code_is(x->rec[i]->type, r) &&
                   rec_retype(x->ms, x->rec[i], r->type, r->type_id) != 0) {
            x->rec[i] = NULL;
        }
        if (!x->rec[i])
            return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    if (moved)
        find_again(x);
    return RL_OK;
}

/* Near max_keys, drops the idle records of every segment before a decision locks its own (no
 * other lock is held, so this cannot deadlock). One caller at a time and at most every
 * MAKE_ROOM_EVERY of request time, so that a flood of new keys while nothing is idle costs
 * a scan ten times a second, not one per request. */
#define MAKE_ROOM_EVERY (RL_NS_PER_SEC / 10)
static void make_room(mem_store *ms, rl_ns now)
{
    rl_ns last = __atomic_load_n(&ms->room_at, __ATOMIC_RELAXED);
    if ((now >= last && now - last < MAKE_ROOM_EVERY && last != 0) ||
        !__atomic_compare_exchange_n(&ms->room_at, &last, now ? now : 1, 0, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
        return;
    for (size_t l = 0; l < ms->cfg->nlevels; l++)
        for (size_t k = 0; k < RL__NSEG; k++) {
            rl__seg *s = &ms->tables[l].s[k];
            rl__spin_lock(&s->lock);
            drop_idle(ms, l, s, now);
            rl__spin_unlock(&s->lock);
        }
}

/* Records the takes as a reservation when the plan asks for one or a rule holds slots. */
static int reserve(run *x, rl_err *err)
{
    if (!(x->seen & SEEN_HOLDS) && !(x->plan->flags & RL_RESERVE))
        return RL_OK;
    resv *rv = resv_new(x->plan, x->d, x->takes, x->ms->cfg->reservation_ttl);
    if (!rv)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    pthread_mutex_lock(&x->ms->rmu);
    int added = rl__ms_resv_add(x->ms, rv, 0) == 0;
    if (added)
        rl_store_id_format(x->d->reservation, rv->id);
    pthread_mutex_unlock(&x->ms->rmu);
    if (!added) {
        free(rv);
        return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    return RL_OK;
}

/* Whether an earlier item of a request of items took from the record of item i (items may
 * name one key twice): its evaluation is then out of date. */
static int taken_before(const run *x, size_t i)
{
    for (size_t j = 0; x->several && j < i; j++)
        if (x->rec[j] == x->rec[i])
            return 1;
    return 0;
}

/* Phase 2: every stateful rule takes its cost from what its evaluation found. */
static inline __attribute__((always_inline)) void commit_all(run *x)
{
    for (size_t i = 0; i < x->plan->n; i++) {
        rl_applied *a = &x->d->applied[i];
        const rl_rule *r = a->rule;
        if (!r->type->commit || !x->takes[i])
            continue;
        void *st = rec_state(x->rec[i], r->type);
        if (taken_before(x, i))
            r->type->evaluate(r->params, st, a->key, a->keylen, x->plan->now,
                              x->plan->items[i].need, &a->status.ev);
        r->type->commit(r->params, st, &a->status.ev, x->plan->items[i].cost);
    }
}

/* The statuses of types whose evaluation points into the state, reported now under the
 * locks; the others' are left in their evaluations, for rl_decision_status to work out
 * when read (most callers read few, some none). */
static void report_in_state(rl_decision *d, size_t n, rl_ns now)
{
    for (size_t i = 0; i < n; i++) {
        rl_applied *a = &d->applied[i];
        const rl_rule_type *t = a->rule->type;
        if (a->has_status && (t->flags & RL_RULE_EVAL_IN_STATE)) {
            rl_eval ev = a->status.ev;
            rl_rule_status st;
            t->report(a->rule->params, &ev, now, &st);
            rl_applied_set_status(a, &st);
        }
    }
}

static int ms_decide(void *cls, const rl_plan *plan, rl_decision *d, rl_err *err)
{
    run x;
    x.ms = cls;
    x.plan = plan;
    x.d = d;
    x.nlocked = 0;
    d->now = plan->now; /* what the statuses left in the evaluations are reported at */
    if (x.ms->max_keys && !(plan->flags & RL_DRY_RUN) &&
        __atomic_load_n(&x.ms->nkeys, __ATOMIC_RELAXED) + plan->n > x.ms->max_keys)
        make_room(x.ms, plan->now);
    int rc = RL_OK;
    x.seen = lock_and_evaluate(&x);
    if (!(x.seen & SEEN_BLOCKS) && !(plan->flags & RL_DRY_RUN)) {
        if (x.seen & SEEN_MISSING)
            rc = make_records(&x, err);
        if (rc == RL_OK)
            rc = reserve(&x, err);
        if (rc == RL_OK)
            commit_all(&x);
    }
    if (rc == RL_OK && (x.seen & SEEN_IN_STATE))
        report_in_state(d, plan->n, plan->now);
    unlock_all(&x);
    return rc;
}

/* ---- one decision from the keys alone (decide_levels, core.h) ------------------------------ */

/* Starts loading the records of q's keys in large segments (see ms_prefetch); fills the keys'
 * hashes, segments and the index of each level's first rule. Returns the levels whose
 * records were prefetched, as bits. */
static inline unsigned levels_locate(mem_store *ms, const rl__levels *q, uint64_t *kh,
                                     rl__seg **seg, size_t *base)
{
    unsigned late = 0;
    for (size_t k = 0, i = 0; k < q->n; k++) {
        const rl__level_key *lk = &q->lv[k];
        kh[k] = lk->key == ms->dkey[lk->level] && lk->keylen == ms->dklen[lk->level]
                    ? ms->dkhash[lk->level]
                    : rl__hash(lk->key, lk->keylen, ms->seed);
        seg[k] = rl__table_seg(&ms->tables[lk->level], kh[k]);
        base[k] = i;
        i += lk->rules->n;
        if (__atomic_load_n(&seg[k]->cap, __ATOMIC_RELAXED) < PREFETCH_CAP)
            continue;
        late |= 1u << k;
        for (size_t si = 0; si < lk->rules->n; si++)
            if (lk->rules->v[si].type->state_size)
                rl__seg_prefetch(seg[k], rl__rec_hash(kh[k], (unsigned)si));
    }
    return late;
}

/* Phase 1 for level k of q, its segment seg locked (key hash kh, first rule at base): each
 * rule planned into plan and d as the limiter plans it (rl_plan_item_of, rl__applied_set) and
 * evaluated as ms_decide evaluates it (phase1). Returns the SEEN_* bits. as_cost is a
 * constant at each call (evaluate_level): when the level's rules take the request's cost as it
 * is (rl__rules_as_cost), each item is {cost, cost, mode 0}, as rl_plan_item_of would make it,
 * and the compiler folds the mode through phase1 (no shadow nor charge to work out): about 100
 * instructions of a decision of three levels of one token bucket each (bench/callgrind_core.sh,
 * 1,842 without it, 1,739-1,759 with it). test_decide_paths compares both with the plan,
 * which always asks rl_plan_item_of. */
static inline __attribute__((always_inline)) unsigned
evaluate_level_as(run *x, rl_plan *plan, const rl__levels *q, size_t k, rl__seg *seg,
                  uint64_t kh, size_t base, int as_cost)
{
    const rl__level_key *lk = &q->lv[k];
    const rl_rules *rs = lk->rules;
    const char *key = lk->key;
    uint32_t klen = lk->keylen;
    uint16_t level = lk->level;
    int lshadow = lk->shadow;
    rl_fp cost = q->cost;
    int64_t prio = q->priority;
    unsigned flags = q->flags, seen = 0;
    rl_ns now = q->now;
    for (size_t si = 0, n = rs->n; si < n; si++) {
        size_t i = base + si;
        const rl_rule *r = &rs->v[si];
        rl_applied *a = &x->d->applied[i];
        rl_plan_item it = {.hash = 0, .cost = cost, .need = cost, .mode = 0};
        if (!as_cost)
            it = rl_plan_item_of(r, lshadow, cost, q->amt, prio);
        found f = phase1(r, it, flags, seg, rl__rec_hash(kh, (unsigned)si), (unsigned)si, key,
                         klen, now, &a->status.ev);
        x->rec[i] = f.rec; /* phase 2 needs no more: a missing record declines */
        x->takes[i] = (uint8_t)f.takes;
        plan->items[i] = it;
        rl__applied_set(a, r, it.mode, key, klen, level, (uint16_t)si, f.wait, f.has_status);
        seen |= f.seen;
    }
    return seen;
}

/* evaluate_level_as for level k, made for its kind of rule list. */
static inline __attribute__((always_inline)) unsigned
evaluate_level(run *x, rl_plan *plan, const rl__levels *q, size_t k, rl__seg *seg, uint64_t kh,
               size_t base)
{
    return q->lv[k].as_cost ? evaluate_level_as(x, plan, q, k, seg, kh, base, 1)
                            : evaluate_level_as(x, plan, q, k, seg, kh, base, 0);
}

/* ms_decide for the plan of q, made here, when every rule that takes has its record and none
 * holds; otherwise declines before anything is taken. Segments are locked in level order (as
 * lock_and_evaluate locks them: one key per level, levels increasing), a level whose records
 * are in the cache evaluated as soon as its segment is locked (the last level's lock, that of
 * a global key, is held the shortest); the levels whose records were prefetched are evaluated
 * after all others, while they are on their way (a per-user record of a large table: its
 * cache miss overlaps with the rest of the decision instead of stalling it). What this saves
 * over the plan: the limiter's prefetch call per level and the plan's making before the
 * locks. */
static int ms_decide_levels(void *cls, const rl__levels *q, rl_decision *d)
{
    mem_store *ms = cls;
    uint64_t kh[RL_MAX_LEVELS];
    rl__seg *seg[RL_MAX_LEVELS];
    size_t base[RL_MAX_LEVELS];
    rl_plan plan;
    run x;
    if (ms->max_keys && !(q->flags & RL_DRY_RUN) &&
        __atomic_load_n(&ms->nkeys, __ATOMIC_RELAXED) + q->nrules > ms->max_keys)
        return RL__DECLINED; /* ms_decide makes room first */
    plan.n = q->nrules;
    plan.cost = q->cost;
    plan.amt = q->amt;
    plan.price = q->price;
    plan.flags = q->flags;
    plan.now = q->now;
    x.ms = ms;
    x.plan = &plan;
    x.d = d;
    x.nlocked = 0;
    x.several = 0;
    unsigned late = levels_locate(ms, q, kh, seg, base), seen = 0;
    for (size_t k = 0; k < q->n; k++) {
        rl__spin_lock(&seg[k]->lock);
        x.locked[x.nlocked++] = seg[k];
        if (!(late & (1u << k)))
            seen |= evaluate_level(&x, &plan, q, k, seg[k], kh[k], base[k]);
    }
    for (size_t k = 0; late && k < q->n; k++)
        if (late & (1u << k))
            seen |= evaluate_level(&x, &plan, q, k, seg[k], kh[k], base[k]);
    x.seen = seen;
    int takes = !(seen & SEEN_BLOCKS) && !(q->flags & RL_DRY_RUN);
    if (takes && (seen & (SEEN_MISSING | SEEN_HOLDS))) {
        unlock_all(&x);
        return RL__DECLINED;
    }
    if (takes)
        commit_all(&x);
    if (seen & SEEN_IN_STATE)
        report_in_state(d, plan.n, q->now);
    unlock_all(&x);
    d->napplied = plan.n;
    d->now = q->now;
    d->retry_after = 0;
    d->blocked = -1;
    d->allowed = 1;
    if (seen & SEEN_BLOCKS) /* nothing waits otherwise */
        rl__decision_blocked(d, &plan);
    return RL_OK;
}

static int ms_settle(void *cls, const char *id, const rl_actual *actual, rl_ns now,
                     const rl_outcome *o, rl_settlement *out, rl_err *err)
{
    mem_store *ms = cls;
    uint64_t v;
    resv *rv = NULL, *copy = NULL;
    int rc = RL_OK;

    if (rl_store_id_parse(id, &v) != 0)
        return rl_errf(err, RL_ENOTFOUND, "reservation: unknown or expired");
    pthread_mutex_lock(&ms->rmu);
    if (ms->nrbucket)
        rv = *resv_link(ms, v);
    if (!rv || rv->expires <= now)
        rc = rl_errf(err, RL_ENOTFOUND, "reservation: unknown or expired");
    else if (rv->settled)
        rc = rl_errf(err, RL_ESETTLED, "reservation: already settled");
    else if (!(copy = malloc(rv->size)))
        rc = rl_errf(err, RL_ENOMEM, "out of memory");
    else {
        rv->settled = 1;
        memcpy(copy, rv, rv->size);
    }
    pthread_mutex_unlock(&ms->rmu);
    if (rc != RL_OK)
        return rc;

    /* The copy is applied outside rmu: a decision holds segment locks while it takes rmu. */
    rl_fp act[RL_UNITS];
    rl_settle_amounts(copy->cost, copy->amt, copy->priced ? &copy->price : NULL, actual, out,
                      act);
    for (uint16_t k = 0; k < copy->n; k++) {
        const ritem *it = &copy->item[k];
        if (it->refundable && it->taken != act[it->unit])
            resv_apply(ms, copy, it, now, it->taken - act[it->unit], 0, NULL);
    }
    if (o) /* the outcome is learnt now; the slots stay held until the release */
        for (uint16_t k = 0; k < copy->n; k++)
            if (copy->item[k].holds)
                resv_apply(ms, copy, &copy->item[k], now, 0, 1, o);
    free(copy);
    return RL_OK;
}

static int ms_release(void *cls, const char *id, rl_ns now, const rl_outcome *o, rl_err *err)
{
    mem_store *ms = cls;
    uint64_t v;
    resv *rv = NULL;

    if (rl_store_id_parse(id, &v) != 0)
        return rl_errf(err, RL_ENOTFOUND, "reservation: unknown, expired or released");
    pthread_mutex_lock(&ms->rmu);
    if (ms->nrbucket)
        rv = *resv_link(ms, v);
    if (rv && rv->expires > now)
        resv_unlink(ms, rv);
    else
        rv = NULL;
    pthread_mutex_unlock(&ms->rmu);
    if (!rv)
        return rl_errf(err, RL_ENOTFOUND, "reservation: unknown, expired or released");
    rl__ms_resv_release_all(ms, rv, now, o);
    free(rv);
    return RL_OK;
}

static int ms_reset(void *cls, size_t level, const char *key, size_t keylen, size_t *cleared,
                    rl_err *err)
{
    mem_store *ms = cls;
    uint64_t kh = rl__hash(key, keylen, ms->seed), n = 0;
    rl__seg *s = rl__table_seg(&ms->tables[level], kh);
    (void)err;
    rl__spin_lock(&s->lock);
    for (unsigned slot = 0; slot < RL_MAX_RULES; slot++) {
        uint32_t i = rl__seg_find(s, rl__rec_hash(kh, slot), slot, key, keylen);
        if (i == RL__NONE)
            continue;
        rl__ms_state_clear(ms, &s->r[i]);
        rl__seg_remove(s, i);
        n++;
    }
    rl__spin_unlock(&s->lock);
    rl__ms_key_drop(ms, n);
    *cleared = (size_t)n;
    return RL_OK;
}

/* Drops idle records in up to SWEEP_BATCH slots of s; returns the slots visited (at least 1)
 * and sets *done when the pass over the segment is complete. */
static uint32_t sweep_seg(mem_store *ms, size_t level, rl__seg *s, rl_ns now, int *done)
{
    rl__spin_lock(&s->lock);
    uint32_t visited = 0;
    while (visited < SWEEP_BATCH && s->sweep < s->cap) {
        rl__rec *r = &s->r[s->sweep];
        visited++;
        if (!r->type) {
            s->sweep++;
            continue;
        }
        if (rec_idle(ms, level, r, now)) {
            rl__ms_state_clear(ms, r);
            rl__seg_remove(s, s->sweep); /* the next record may now sit here: look again */
            rl__ms_key_drop(ms, 1);
        } else {
            s->sweep++;
        }
    }
    *done = s->sweep >= s->cap;
    if (*done) {
        s->sweep = 0;
        rl__seg_shrink(s);
    }
    rl__spin_unlock(&s->lock);
    return visited + 1;
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
        rl_outcome o = rl__ms_expired_outcome(rv, now);
        rl__ms_resv_release_all(ms, rv, now, &o);
        free(rv);
    }

    /* drop idle state: a bounded number of buckets per tick, then move on */
    size_t budget = 64 * SWEEP_BATCH;
    for (size_t steps = 0; steps < 4 * ms->cfg->nlevels * RL__NSEG && budget > 0; steps++) {
        int done;
        uint32_t v = sweep_seg(ms, ms->sweep_level, &ms->tables[ms->sweep_level].s[ms->sweep_seg],
                               now, &done);
        budget -= v < budget ? v : budget;
        if (done) {
            if (++ms->sweep_seg == RL__NSEG) {
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
    for (size_t i = 0; i < RL__NSEG; i++)
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
    out->key_states = __atomic_load_n(&ms->nkeys, __ATOMIC_RELAXED);
    out->key_states_max = ms->max_keys;
}

static void ms_destroy(void *cls)
{
    mem_store *ms = cls;
    for (size_t l = 0; ms->tables && l < ms->cfg->nlevels; l++)
        for (size_t k = 0; k < RL__NSEG; k++) {
            rl__seg *s = &ms->tables[l].s[k];
            for (uint32_t i = 0; i < s->cap; i++)
                if (s->r[i].type)
                    rl__ms_state_clear(ms, &s->r[i]);
            rl__seg_free(s);
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
    .reset = ms_reset,
    .release = ms_release,
    .tick = ms_tick,
    .keys = ms_keys,
    .stats = ms_stats,
    .save = rl__ms_save,
    .load = rl__ms_load,
    .destroy = ms_destroy,
    .prefetch = ms_prefetch,
};

rl_store *rl_memory_store_new(void)
{
    return rl_memory_store_new_bounded(0);
}

rl_store *rl_memory_store_new_bounded(uint64_t max_keys)
{
    mem_store *ms = calloc(1, sizeof *ms);
    if (!ms)
        return NULL;
    ms->max_keys = max_keys;
    pthread_mutex_init(&ms->rmu, NULL);
    ms->seed = rl_random64();
    ms->idkey = rl_random64();
    ms->base.ops = &memory_ops;
    ms->base.cls = ms;
    return &ms->base;
}

rl__decide_levels_fn rl__store_decide_levels(const rl_store *store)
{
    return store->ops == &memory_ops ? ms_decide_levels : NULL;
}
