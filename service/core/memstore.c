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
    const rl_rule_type *t = rl_registry_at(ms->cfg->reg, (size_t)r->type - 1);
    if (!t)
        return;
    if (t->state_free)
        t->state_free(NULL, rec_state(r, t));
    if (t->state_size > RL_STATE_INLINE)
        free(r->st.ext);
    memset(&r->st, 0, sizeof r->st);
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
    r->type = (uint8_t)(type_id + 1);
    return 0;
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

int rl__ms_resv_add(mem_store *ms, resv *r, int keep_id)
{
    if (ms->nresv >= ms->nrbucket && resv_grow(ms) != 0)
        return -1;
    resv **l;
    for (;;) {
        if (!keep_id)
            r->id = permute(++ms->idseq ^ ms->idkey);
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
                       int release)
{
    const char *key = (const char *)(rv->item + rv->n) + it->keyoff;
    rl_rules *ref = NULL;
    const rl_rule *rule = ms->res->rule_at(ms->res->ctx, it->level, it->slot, key, it->keylen,
                                           &ref);
    if (rule && rule->type_id + 1 == it->type) {
        uint64_t kh = rl__hash(key, it->keylen, ms->seed);
        rl__seg *s = rl__table_seg(&ms->tables[it->level], kh);
        rl__spin_lock(&s->lock);
        uint32_t i = rl__seg_find(s, rl__rec_hash(kh, it->slot), it->slot, key, it->keylen);
        if (i != RL__NONE && s->r[i].type == it->type) {
            void *st = rec_state(&s->r[i], rule->type);
            if (release && rule->type->release)
                rule->type->release(rule->params, st, now, amount);
            else if (!release && rule->type->refund)
                rule->type->refund(rule->params, st, now, rv->taken_at, amount);
        }
        rl__spin_unlock(&s->lock);
    }
    rl_rules_unref(ref);
}

void rl__ms_resv_release_all(mem_store *ms, resv *rv, rl_ns now)
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
    ms->tables = aligned_alloc(64, cfg->nlevels * sizeof(rl__table));
    if (!ms->tables)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    memset(ms->tables, 0, cfg->nlevels * sizeof(rl__table));
    return RL_OK;
}

/* Fills a->st from the rule's state st after the decision. */
static void rule_status(const rl_plan *plan, rl_applied *a, const void *st)
{
    const rl_rule *r = a->rule;
    r->type->status(r->params, st, plan->now, &a->st);
    rl_status_next(r, st, a->key, a->keylen, plan->now, &a->st);
}

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
    for (size_t i = 0; i < rs->n && i < 4; i++)
        if (rs->v[i].type->state_size)
            rl__seg_prefetch(s, rl__rec_hash(kh, (unsigned)i));
    return kh;
}

/* Whether a rule's status can be read from a copy of its state after the locks are released:
 * an inline state that holds no pointers. */
static int status_from_copy(const rl_rule_type *t)
{
    return t->state_size <= RL_STATE_INLINE && !t->state_free;
}

/* Whether two applied rules share their key (the rules of one key are consecutive). */
static int same_key(const rl_applied *a, const rl_applied *b)
{
    return a->level == b->level && a->key == b->key && a->keylen == b->keylen;
}

/* Whether the plan names at most one key per level, levels in increasing order (the plan of
 * descriptors always does). */
static int one_key_per_level(size_t n, const rl_decision *d)
{
    for (size_t i = 1; i < n; i++)
        if (!same_key(&d->applied[i - 1], &d->applied[i]) &&
            d->applied[i].level <= d->applied[i - 1].level)
            return 0;
    return 1;
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

static int ms_decide(void *cls, const rl_plan *plan, rl_decision *d, rl_err *err)
{
    mem_store *ms = cls;
    rl__seg *locked[RL_MAX_APPLIED];
    rl__seg *segof[RL_MAX_APPLIED];
    uint32_t h[RL_MAX_APPLIED], idx[RL_MAX_APPLIED];
    int64_t copy[RL_MAX_APPLIED][RL_STATE_INLINE / 8];
    const void *later[RL_MAX_APPLIED]; /* the state a status is read from after unlocking */
    size_t nlocked = 0;
    int allowed = 1, holds = 0, moved = 0, rc = RL_OK;
    resv *rv = NULL;

    /* The rules of one key are consecutive: one hash and one lock a key (a level has one key,
     * unless the request names several as items). Every record is prefetched before any is
     * read (by ms_prefetch, as the plan was made, for the first four rules of a key). */
    uint64_t kh = 0;
    for (size_t i = 0; i < plan->n; i++) {
        const rl_applied *a = &d->applied[i];
        if (i == 0 || !same_key(&d->applied[i - 1], a)) {
            /* ms_prefetch hashed the key already, unless the limiter did not call it */
            kh = plan->items[i].hash ? plan->items[i].hash
                                     : rl__hash(a->key, a->keylen, ms->seed);
            segof[i] = rl__table_seg(&ms->tables[a->level], kh);
        } else {
            segof[i] = segof[i - 1];
        }
        h[i] = rl__rec_hash(kh, a->slot);
        if (a->rule->type->state_size && (!plan->items[i].hash || a->slot >= 4))
            rl__seg_prefetch(segof[i], h[i]);
    }
    /* Segments are locked in level order (two decisions never deadlock), and each level's
     * records are found as soon as its segment is locked: the cache miss of a per-user record
     * is then paid while only that user's segment is locked, not while a broad level's
     * (team, global), which every decision needs, is held. A plan with several keys on one
     * level locks all its segments first, each once, in (level, address) order. */
    int one_key_a_level = one_key_per_level(plan->n, d);
    if (!one_key_a_level)
        nlocked = lock_in_order(plan->n, d, segof, locked);
    for (size_t i = 0; i < plan->n; i++) {
        const rl_applied *a = &d->applied[i];
        if (one_key_a_level && (i == 0 || segof[i] != segof[i - 1])) {
            rl__spin_lock(&segof[i]->lock);
            locked[nlocked++] = segof[i];
        }
        idx[i] = a->rule->type->state_size
                     ? rl__seg_find(segof[i], h[i], a->slot, a->key, a->keylen)
                     : RL__NONE;
    }

    /* phase 1: how long until the cost fits, for every rule */
    for (size_t i = 0; i < plan->n; i++) {
        rl_applied *a = &d->applied[i];
        const rl_rule *r = a->rule;
        const void *st = zero_state;
        if (idx[i] != RL__NONE && segof[i]->r[idx[i]].type == r->type_id + 1)
            st = rec_state(&segof[i]->r[idx[i]], r->type);
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
            if (idx[i] == RL__NONE) {
                idx[i] = rl__seg_insert(segof[i], h[i], a->slot, a->key, a->keylen,
                                        (uint8_t)(r->type_id + 1), ext_size(r->type));
                moved = 1;
            } else if (segof[i]->r[idx[i]].type != r->type_id + 1 &&
                       rec_retype(ms, &segof[i]->r[idx[i]], r->type, r->type_id) != 0) {
                idx[i] = RL__NONE;
            }
            if (idx[i] == RL__NONE)
                rc = rl_errf(err, RL_ENOMEM, "out of memory");
        }
        /* an insert may have moved the records found before it */
        for (size_t i = 0; moved && rc == RL_OK && i < plan->n; i++)
            if (d->applied[i].rule->type->state_size)
                idx[i] = rl__seg_find(segof[i], h[i], d->applied[i].slot, d->applied[i].key,
                                      d->applied[i].keylen);
        if (rc == RL_OK && (holds || (plan->flags & RL_RESERVE)) &&
            !(rv = resv_new(plan, d, ms->cfg->reservation_ttl)))
            rc = rl_errf(err, RL_ENOMEM, "out of memory");
        if (rc == RL_OK && rv) {
            pthread_mutex_lock(&ms->rmu);
            if (rl__ms_resv_add(ms, rv, 0) != 0)
                rc = rl_errf(err, RL_ENOMEM, "out of memory");
            else
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
            if (r->type->take && idx[i] != RL__NONE)
                r->type->take(r->params, rec_state(&segof[i]->r[idx[i]], r->type), plan->now,
                              plan->items[i].cost);
        }
    }

    /* What every rule has left after the decision. States are copied under the locks and
     * read after them (except those holding pointers), so the locks are held only for the
     * decision itself. */
    for (size_t i = 0; i < plan->n && rc == RL_OK; i++) {
        rl_applied *a = &d->applied[i];
        const rl_rule *r = a->rule;
        a->has_status = r->type->status != NULL;
        if (!a->has_status)
            continue;
        const void *st = zero_state;
        if (idx[i] != RL__NONE && segof[i]->r[idx[i]].type == r->type_id + 1)
            st = rec_state(&segof[i]->r[idx[i]], r->type);
        if (status_from_copy(r->type)) {
            if (st != zero_state) /* the whole inline area: a fixed-size copy is three moves */
                st = memcpy(copy[i], st, sizeof copy[i]);
            later[i] = st;
            continue;
        }
        later[i] = NULL;
        rule_status(plan, a, st);
    }
    while (nlocked > 0)
        rl__spin_unlock(&locked[--nlocked]->lock);
    for (size_t i = 0; i < plan->n && rc == RL_OK; i++)
        if (d->applied[i].has_status && later[i])
            rule_status(plan, &d->applied[i], later[i]);
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
    rl__ms_resv_release_all(ms, rv, now);
    free(rv);
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
        rl_rules *ref = NULL;
        const rl_rule *rule =
            ms->res->rule_at(ms->res->ctx, level, r->slot, rl__rec_key(r), r->klen, &ref);
        int idle = !rule || rule->type_id + 1 != r->type;
        if (!idle && rule->type->idle_at)
            idle = rule->type->idle_at(rule->params, rec_state(r, rule->type)) <= now;
        rl_rules_unref(ref);
        if (idle) {
            rl__ms_state_clear(ms, r);
            rl__seg_remove(s, s->sweep); /* the next record may now sit here: look again */
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
        rl__ms_resv_release_all(ms, rv, now);
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
