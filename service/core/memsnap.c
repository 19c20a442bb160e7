/*
 * memsnap.c - snapshots of the in-memory store, so that a restart loses nothing.
 *
 * The file, in the machine's byte order (checked on load):
 *   "RLSNAP01", u32 0x01020304
 *   u32 levels, then each level's name      (u16 length + bytes)
 *   u32 types, then each rule type's name   (registry order at save time)
 *   records, each starting with a tag byte:
 *     'k'  u16 level, u8 slot, u8 type, u64 rule, u16 key length, key, u32 state length,
 *          state
 *     'u'  u64 id, i64 taken_at, i64 expires, i64 cost, u8 settled, u8 holds, u16 items,
 *          then per item: u16 level, u16 slot, u8 type, u64 rule, u8 refundable, u8 holds,
 *          u8 unit, i64 taken, u32 key length, key; then i64 amounts by unit (RL_UNITS),
 *          u8 priced, i64 prices by dimension (RL_MAX_DIMS)
 *     'r'  the same without units, amounts and prices (every item counted cost), as files
 *          written before dimensions have them
 *   'E', u64 key states, u64 reservations   (a file without it is incomplete)
 *
 * Levels and types are matched by name on load, and each state goes to the rule of its level
 * with the same fingerprint ("rule": type, name and parameters, rl__rule_fingerprint), at
 * its old position or anywhere in its list: a changed configuration keeps the state of every
 * rule that did not change, moved or not, and a rule whose parameters changed starts afresh
 * (but for a rule with carry_limit, whose fingerprint leaves its limit out).
 * Files written before fingerprints ('K' and 'R' records, the same without "rule") load by
 * position and type. A state is its bytes, or what the rule's state_save wrote for states
 * with pointers.
 */
#include <stdlib.h>
#include <string.h>

#include "memstore.h"

static const char MAGIC[8] = {'R', 'L', 'S', 'N', 'A', 'P', '0', '1'};
#define ENDIAN 0x01020304u

/* ---- writing --------------------------------------------------------------------------- */

static int put(FILE *f, const void *p, size_t n)
{
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

static int put_name(FILE *f, const char *s)
{
    uint16_t n = (uint16_t)strlen(s);
    return put(f, &n, sizeof n) || put(f, s, n);
}

/* The bytes of a record's state in *buf (grown as needed); 0 when it cannot be saved. */
static size_t state_bytes(const rl_rule *rule, rl__rec *r, unsigned char **buf, size_t *cap)
{
    const rl_rule_type *t = rule->type;
    const void *st = rec_state(r, t);
    if (!t->state_free) {
        if (t->state_size > *cap)
            return 0;
        memcpy(*buf, st, t->state_size);
        return t->state_size;
    }
    if (!t->state_save)
        return 0;
    size_t need = t->state_save(rule->params, st, *buf, *cap);
    if (need > *cap) {
        unsigned char *nb = realloc(*buf, need);
        if (!nb)
            return 0;
        *buf = nb;
        *cap = need;
        need = t->state_save(rule->params, st, *buf, *cap);
    }
    return need;
}

static int save_segment(mem_store *ms, FILE *f, uint16_t level, rl__seg *s, unsigned char **buf,
                        size_t *cap, uint64_t *count)
{
    int rc = 0;
    rl__spin_lock(&s->lock);
    for (uint32_t i = 0; rc == 0 && i < s->cap; i++) {
        rl__rec *r = &s->r[i];
        if (!r->type)
            continue;
        rl_rules *ref = NULL;
        const rl_rule *rule =
            ms->res->rule_at(ms->res->ctx, level, r->slot, rl__rec_key(r), r->klen, &ref);
        uint32_t slen = 0;
        if (rule && code_is(r->type, rule))
            slen = (uint32_t)state_bytes(rule, r, buf, cap);
        if (slen == 0) {
            rl_rules_unref(ref);
            continue; /* stale (its rule changed) or not saveable */
        }
        uint8_t tag = 'k', slot = r->slot, type = (uint8_t)code_type_id(r->type);
        uint64_t fp = rl__rule_fingerprint(rule);
        rc = put(f, &tag, 1) || put(f, &level, 2) || put(f, &slot, 1) || put(f, &type, 1) ||
             put(f, &fp, 8) || put(f, &r->klen, 2) || put(f, rl__rec_key(r), r->klen) ||
             put(f, &slen, 4) || put(f, *buf, slen);
        rl_rules_unref(ref);
        ++*count;
    }
    rl__spin_unlock(&s->lock);
    return rc;
}

/* The fingerprint of the rule at (level, slot) for key now, 0 when there is none. */
static uint64_t rule_fp(mem_store *ms, size_t level, size_t slot, const char *key, size_t klen)
{
    rl_rules *ref = NULL;
    const rl_rule *rule = ms->res->rule_at(ms->res->ctx, level, slot, key, klen, &ref);
    uint64_t fp = rule ? rl__rule_fingerprint(rule) : 0;
    rl_rules_unref(ref);
    return fp;
}

static int save_reservation(mem_store *ms, FILE *f, const resv *rv)
{
    uint8_t tag = 'u';
    const char *keys = (const char *)(rv->item + rv->n);
    int rc = put(f, &tag, 1) || put(f, &rv->id, 8) || put(f, &rv->taken_at, 8) ||
             put(f, &rv->expires, 8) || put(f, &rv->cost, 8) || put(f, &rv->settled, 1) ||
             put(f, &rv->holds, 1) || put(f, &rv->n, 2);
    for (uint16_t k = 0; rc == 0 && k < rv->n; k++) {
        const ritem *it = &rv->item[k];
        uint64_t fp = rule_fp(ms, it->level, it->slot, keys + it->keyoff, it->keylen);
        rc = put(f, &it->level, 2) || put(f, &it->slot, 2) || put(f, &it->type, 1) ||
             put(f, &fp, 8) || put(f, &it->refundable, 1) || put(f, &it->holds, 1) ||
             put(f, &it->unit, 1) || put(f, &it->taken, 8) || put(f, &it->keylen, 4) ||
             put(f, keys + it->keyoff, it->keylen);
    }
    return rc || put(f, rv->amt, sizeof rv->amt) || put(f, &rv->priced, 1) ||
           put(f, rv->price.per_million, sizeof rv->price.per_million);
}

int rl__ms_save(void *cls, FILE *f, rl_err *err)
{
    mem_store *ms = cls;
    const rl_config *cfg = ms->cfg;
    uint32_t endian = ENDIAN, nl = (uint32_t)cfg->nlevels,
             nt = (uint32_t)rl_registry_count(cfg->reg);
    uint64_t nrec = 0, nres = 0;
    size_t cap = RL_STATE_MAX;
    unsigned char *buf = malloc(cap);
    int rc = !buf || put(f, MAGIC, sizeof MAGIC) || put(f, &endian, 4) || put(f, &nl, 4);
    for (uint32_t l = 0; rc == 0 && l < nl; l++)
        rc = put_name(f, cfg->levels[l].name);
    rc = rc || put(f, &nt, 4);
    for (uint32_t t = 0; rc == 0 && t < nt; t++)
        rc = put_name(f, rl_registry_at(cfg->reg, t)->name);
    for (uint32_t l = 0; rc == 0 && l < nl; l++)
        for (size_t k = 0; rc == 0 && k < RL__NSEG; k++)
            rc = save_segment(ms, f, (uint16_t)l, &ms->tables[l].s[k], &buf, &cap, &nrec);
    free(buf);
    pthread_mutex_lock(&ms->rmu);
    for (const resv *rv = ms->oldest; rc == 0 && rv; rv = rv->next, nres++)
        rc = save_reservation(ms, f, rv);
    pthread_mutex_unlock(&ms->rmu);
    uint8_t tag = 'E';
    rc = rc || put(f, &tag, 1) || put(f, &nrec, 8) || put(f, &nres, 8);
    return rc ? rl_errf(err, RL_EIO, "writing the snapshot failed") : RL_OK;
}

/* ---- reading --------------------------------------------------------------------------- */

static int get(FILE *f, void *p, size_t n)
{
    return fread(p, 1, n, f) == n ? 0 : -1;
}

/* Reads a u32 count of names and maps each to an index of the current configuration or
 * registry (-1 when it has none of that name). */
static int get_names(FILE *f, long **map, uint32_t *n, long (*lookup)(const void *, const char *),
                     const void *ctx)
{
    char name[65536];
    if (get(f, n, 4) || *n > 65536 || !(*map = calloc(*n ? *n : 1, sizeof **map)))
        return -1;
    for (uint32_t i = 0; i < *n; i++) {
        uint16_t len;
        if (get(f, &len, 2) || get(f, name, len))
            return -1;
        name[len] = '\0';
        (*map)[i] = lookup(ctx, name);
    }
    return 0;
}

static long level_index(const void *ctx, const char *name)
{
    const rl_config *cfg = ctx;
    for (size_t i = 0; i < cfg->nlevels; i++)
        if (strcmp(cfg->levels[i].name, name) == 0)
            return (long)i;
    return -1;
}

static long type_index(const void *ctx, const char *name)
{
    const rl_registry *reg = ctx;
    for (size_t i = 0; i < rl_registry_count(reg); i++)
        if (strcmp(rl_registry_at(reg, i)->name, name) == 0)
            return (long)i;
    return -1;
}

typedef struct reader {
    mem_store *ms;
    FILE *f;
    rl_ns now;
    long *lmap, *tmap;
    uint32_t nl, nt;
    unsigned char *buf;
    size_t cap;
    const char *why; /* why the file is refused, when more precise than "malformed" */
    char key[65536];
} reader;

/* Fills the zeroed state st of rule from len bytes; 0 or -1. */
static int fill_state(const rl_rule *rule, void *st, const void *bytes, size_t len)
{
    const rl_rule_type *t = rule->type;
    if (!t->state_free) {
        if (len != t->state_size)
            return -1;
        memcpy(st, bytes, len);
        return 0;
    }
    return t->state_load ? t->state_load(rule->params, st, bytes, len) : -1;
}

/* Whether a valid state read from a file fits the rule now in force: at the load's time it
 * holds no more than the rule's limit and answers no negative wait. One that does not comes
 * from a rule whose limit has shrunk since (a bucket above its new capacity); it is not
 * loaded, and the key starts as a new one. */
static int plausible(const rl_rule *rule, const void *st, const reader *rd, size_t klen)
{
    rl_rule_status status;
    memset(&status, 0, sizeof status);
    rl_ns wait = rl_rule_peek(rule, st, rd->key, klen, rd->now, RL_FP_ONE, &status);
    return wait >= 0 && status.remaining <= status.limit;
}

/* The rule of level l for key that a saved state of type t belongs to, and its slot: with a
 * fingerprint fp, the one with that fingerprint (at the saved slot or another), else the one
 * at the saved slot when its type is t. NULL when none is. */
static const rl_rule *rule_for(mem_store *ms, size_t l, unsigned t, int has_fp, uint64_t fp,
                               const char *key, size_t klen, uint8_t *slot, rl_rules **ref)
{
    const rl_rule *rule = ms->res->rule_at(ms->res->ctx, l, *slot, key, klen, ref);
    if (rule && rule->type_id == t && (!has_fp || rl__rule_fingerprint(rule) == fp))
        return rule;
    rl_rules_unref(*ref);
    *ref = NULL;
    for (size_t s = 0; has_fp && s < RL_MAX_RULES; s++) {
        if (!(rule = ms->res->rule_at(ms->res->ctx, l, s, key, klen, ref)))
            break;
        if (rule->type_id == t && rl__rule_fingerprint(rule) == fp) {
            *slot = (uint8_t)s;
            return rule;
        }
        rl_rules_unref(*ref);
        *ref = NULL;
    }
    return NULL;
}

/* One 'k' record (or 'K' without the fingerprint). Returns 1 when loaded, 0 when skipped, -1
 * when malformed. */
static int load_key(reader *rd, int has_fp)
{
    mem_store *ms = rd->ms;
    uint16_t level, klen;
    uint8_t slot, type;
    uint32_t slen;
    uint64_t fp = 0;
    if (get(rd->f, &level, 2) || get(rd->f, &slot, 1) || get(rd->f, &type, 1) ||
        (has_fp && get(rd->f, &fp, 8)) || get(rd->f, &klen, 2) || klen == 0 ||
        get(rd->f, rd->key, klen) || get(rd->f, &slen, 4) || level >= rd->nl ||
        type >= rd->nt || slen > (1u << 30))
        return -1;
    if (slen > rd->cap) {
        unsigned char *nb = realloc(rd->buf, slen);
        if (!nb)
            return -1;
        rd->buf = nb;
        rd->cap = slen;
    }
    if (get(rd->f, rd->buf, slen))
        return -1;
    long l = rd->lmap[level], t = rd->tmap[type];
    if (l < 0 || t < 0)
        return 0;
    rl_rules *ref = NULL;
    const rl_rule *rule =
        rule_for(ms, (size_t)l, (unsigned)t, has_fp, fp, rd->key, klen, &slot, &ref);
    int loaded = 0;
    if (rule) {
        const rl_rule_type *rt = rule->type;
        /* built apart first: a bad or idle state never reaches the table */
        _Alignas(8) unsigned char st[RL_STATE_MAX];
        memset(st, 0, rt->state_size);
        if (fill_state(rule, st, rd->buf, slen) != 0) {
            rl_rules_unref(ref);
            return -1;
        }
        if (!rl__state_valid(rt, rule->params, st)) {
            /* amounts or times no decision could have left: the file is damaged */
            if (rt->state_free)
                rt->state_free(rule->params, st);
            rl_rules_unref(ref);
            rd->why = "a key's state is outside its rule type's bounds";
            return -1;
        }
        if (!plausible(rule, st, rd, klen)) {
            if (rt->state_free)
                rt->state_free(rule->params, st);
            rl_rules_unref(ref);
            return 0;
        }
        int idle = rt->idle_at && rt->idle_at(rule->params, st) <= rd->now;
        uint64_t kh = rl__hash(rd->key, klen, ms->seed);
        rl__seg *s = rl__table_seg(&ms->tables[l], kh);
        uint32_t h = rl__rec_hash(kh, slot), i = RL__NONE;
        rl__spin_lock(&s->lock);
        if (!idle && rl__seg_find(s, h, slot, rd->key, klen) == RL__NONE &&
            rl__ms_key_claim(ms)) {
            i = rl__seg_insert(s, h, slot, rd->key, klen, type_code(rule->type_id),
                               ext_size(rt));
            if (i == RL__NONE)
                rl__ms_key_drop(ms, 1);
        }
        if (i != RL__NONE) {
            memcpy(rec_state(&s->r[i], rt), st, rt->state_size);
            loaded = 1;
        }
        rl__spin_unlock(&s->lock);
        if (!loaded && rt->state_free)
            rt->state_free(rule->params, st);
    }
    rl_rules_unref(ref);
    return loaded;
}

/* One 'r' record (or 'R' without the fingerprints). Returns 1 when loaded, 0 when skipped, -1
 * when malformed. */
static int load_reservation(reader *rd, int has_fp, int has_units)
{
    mem_store *ms = rd->ms;
    resv head;
    memset(&head, 0, sizeof head);
    if (get(rd->f, &head.id, 8) || get(rd->f, &head.taken_at, 8) || get(rd->f, &head.expires, 8) ||
        get(rd->f, &head.cost, 8) || get(rd->f, &head.settled, 1) || get(rd->f, &head.holds, 1) ||
        get(rd->f, &head.n, 2) || head.n > RL_MAX_APPLIED)
        return -1;
    ritem items[RL_MAX_APPLIED];
    char keys[RL_DECISION_KEYS];
    size_t used = 0;
    uint16_t kept = 0;
    for (uint16_t k = 0; k < head.n; k++) {
        ritem it;
        uint64_t fp = 0;
        memset(&it, 0, sizeof it);
        if (get(rd->f, &it.level, 2) || get(rd->f, &it.slot, 2) || get(rd->f, &it.type, 1) ||
            (has_fp && get(rd->f, &fp, 8)) || get(rd->f, &it.refundable, 1) ||
            get(rd->f, &it.holds, 1) || (has_units && get(rd->f, &it.unit, 1)) ||
            it.unit >= RL_UNITS || get(rd->f, &it.taken, 8) || get(rd->f, &it.keylen, 4) || it.keylen == 0 ||
            it.keylen > sizeof keys - used || get(rd->f, keys + used, it.keylen) ||
            it.level >= rd->nl || it.type == 0 || it.type > rd->nt)
            return -1;
        long l = rd->lmap[it.level], t = rd->tmap[code_type_id(it.type)];
        if (l < 0 || t < 0)
            continue; /* its level or type is gone: nothing to settle there */
        if (has_fp) { /* settled with the same rule, wherever it is now; not at all if gone */
            rl_rules *ref = NULL;
            uint8_t slot = it.slot > 255 ? 255 : (uint8_t)it.slot;
            const rl_rule *rule = rule_for(ms, (size_t)l, (unsigned)t, 1, fp, keys + used,
                                           it.keylen, &slot, &ref);
            rl_rules_unref(ref);
            if (!rule)
                continue;
            it.slot = slot;
        }
        it.level = (uint16_t)l;
        it.type = type_code((unsigned)t);
        it.keyoff = (uint32_t)used;
        used += it.keylen;
        items[kept++] = it;
    }
    if (has_units && (get(rd->f, head.amt, sizeof head.amt) || get(rd->f, &head.priced, 1) ||
                      get(rd->f, head.price.per_million, sizeof head.price.per_million)))
        return -1;
    size_t size = offsetof(resv, item) + kept * sizeof(ritem) + used;
    resv *rv = calloc(1, size);
    if (!rv)
        return -1;
    memcpy(rv, &head, offsetof(resv, item));
    rv->size = size;
    rv->n = kept;
    memcpy(rv->item, items, kept * sizeof(ritem));
    memcpy((char *)(rv->item + kept), keys, used);
    if (rv->expires <= rd->now) {
        /* it expired while the process was down: what it held goes back, as expiry does */
        rl_outcome o = rl__ms_expired_outcome(rv, rd->now);
        rl__ms_resv_release_all(ms, rv, rd->now, &o);
        pthread_mutex_lock(&ms->rmu);
        ms->expired += !rv->settled || rv->holds;
        pthread_mutex_unlock(&ms->rmu);
        free(rv);
        return 0;
    }
    pthread_mutex_lock(&ms->rmu);
    int rc = rl__ms_resv_add(ms, rv, 1);
    pthread_mutex_unlock(&ms->rmu);
    if (rc != 0)
        free(rv);
    return rc == 0;
}

/* Empties the store again (after a malformed snapshot). */
static void wipe(mem_store *ms)
{
    for (size_t l = 0; l < ms->cfg->nlevels; l++)
        for (size_t k = 0; k < RL__NSEG; k++) {
            rl__seg *s = &ms->tables[l].s[k];
            rl__spin_lock(&s->lock);
            for (uint32_t i = 0; i < s->cap; i++)
                if (s->r[i].type)
                    rl__ms_state_clear(ms, &s->r[i]);
            rl__seg_free(s);
            rl__spin_unlock(&s->lock);
        }
    __atomic_store_n(&ms->nkeys, 0, __ATOMIC_RELAXED);
    pthread_mutex_lock(&ms->rmu);
    for (resv *rv = ms->oldest, *next; rv; rv = next) {
        next = rv->next;
        free(rv);
    }
    if (ms->rbucket)
        memset(ms->rbucket, 0, ms->nrbucket * sizeof *ms->rbucket);
    ms->oldest = ms->newest = NULL;
    ms->nresv = 0;
    pthread_mutex_unlock(&ms->rmu);
}

int rl__ms_load(void *cls, FILE *f, rl_ns now, size_t *loaded, rl_err *err)
{
    mem_store *ms = cls;
    reader *rd = calloc(1, sizeof *rd);
    char magic[8];
    uint32_t endian;
    uint64_t nrec = 0, nres = 0, want_rec, want_res;
    size_t count = 0;
    const char *why = "truncated or malformed";
    int ok = 0;

    if (!rd)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    rd->ms = ms;
    rd->f = f;
    rd->now = now;
    if (get(f, magic, 8) || memcmp(magic, MAGIC, 8) != 0 || get(f, &endian, 4)) {
        why = "not a ratelimitd snapshot";
        goto done;
    }
    if (endian != ENDIAN) {
        why = "written on a machine of another byte order";
        goto done;
    }
    if (get_names(f, &rd->lmap, &rd->nl, level_index, ms->cfg) ||
        get_names(f, &rd->tmap, &rd->nt, type_index, ms->cfg->reg))
        goto done;
    for (;;) {
        uint8_t tag;
        int r;
        if (get(f, &tag, 1))
            goto done;
        if (tag == 'E')
            break;
        if (tag == 'K' || tag == 'k') {
            r = load_key(rd, tag == 'k');
            nrec++;
        } else if (tag == 'R' || tag == 'r' || tag == 'u') {
            r = load_reservation(rd, tag != 'R', tag == 'u');
            nres++;
        } else {
            goto done;
        }
        if (r < 0) {
            if (rd->why)
                why = rd->why;
            goto done;
        }
        count += (size_t)r;
    }
    ok = !get(f, &want_rec, 8) && !get(f, &want_res, 8) && want_rec == nrec && want_res == nres;
done:
    free(rd->lmap);
    free(rd->tmap);
    free(rd->buf);
    free(rd);
    if (!ok) {
        wipe(ms);
        return rl_errf(err, RL_EIO, "%s", why);
    }
    if (loaded)
        *loaded = count;
    return RL_OK;
}
