/*
 * memstore.h - the in-memory store's private structures, shared by memstore.c (decisions,
 * reservations, housekeeping) and memsnap.c (snapshots). Core-internal.
 */
#ifndef RL_MEMSTORE_H
#define RL_MEMSTORE_H

#include <pthread.h>
#include <stdio.h>

#include "keytable.h"

/* One rule a reservation took from. */
typedef struct ritem {
    uint16_t level, slot;
    uint8_t type;
    uint8_t refundable; /* counted cost: settling gives back or charges */
    uint8_t holds;      /* holds slots until release */
    uint8_t unit;       /* what the rule counted (rl_unit) */
    rl_fp taken;
    uint32_t keyoff, keylen;
} ritem;

typedef struct resv {
    struct resv *hnext;       /* hash chain */
    struct resv *prev, *next; /* creation order = expiry order (one TTL for all) */
    uint64_t id;
    rl_ns taken_at, expires;
    rl_fp cost;
    rl_fp amt[RL_UNITS];     /* the request's amounts by unit (rl_plan.amt; zero without) */
    uint8_t priced;          /* price holds the prices its dollars came from */
    rl_price price;          /* model unused */
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
    rl__table *tables;
    /* each level's default key and its hash (NULL for none): a decision that falls back to
     * it hashes nothing */
    const char *dkey[RL_MAX_LEVELS];
    size_t dklen[RL_MAX_LEVELS];
    uint64_t dkhash[RL_MAX_LEVELS];
    /* reservations */
    pthread_mutex_t rmu;
    resv **rbucket;
    size_t nrbucket, nresv;
    resv *oldest, *newest;
    uint64_t idseq, idkey;
    uint64_t expired;
    /* where the next tick sweeps */
    size_t sweep_level, sweep_seg;
    uint64_t max_keys; /* 0: no bound */
    uint64_t nkeys;    /* atomic: records held, counted only when max_keys is set */
    rl_ns room_at;     /* atomic: when idle records were last dropped to make room */
} mem_store;

/* Counts a record about to be inserted; 0 when max_keys is reached (nothing counted). */
int rl__ms_key_claim(mem_store *ms);
/* Uncounts n records removed. */
void rl__ms_key_drop(mem_store *ms, uint64_t n);

/* The type byte of records and reservation items: the rule type's registry index + 1, so that
 * 0 marks an empty slot. These three are the only places that know the encoding. */
static inline uint8_t type_code(unsigned type_id)
{
    return (uint8_t)(type_id + 1);
}

static inline size_t code_type_id(uint8_t code)
{
    return (size_t)code - 1;
}

/* Whether a record or item of type code code belongs to rule's type. */
static inline int code_is(uint8_t code, const rl_rule *rule)
{
    return code == type_code(rule->type_id);
}

static inline void *rec_state(rl__rec *r, const rl_rule_type *t)
{
    return t->state_size <= RL_STATE_INLINE ? (void *)r->st.w : r->st.ext;
}

static inline size_t ext_size(const rl_rule_type *t)
{
    return t->state_size > RL_STATE_INLINE ? t->state_size : 0;
}

/* Releases what the state of r holds (its type is the record's own) and zeroes it. */
void rl__ms_state_clear(mem_store *ms, rl__rec *r);
/* Adds a reservation (rmu held): with a fresh id, or with r->id when keep_id (a snapshot's),
 * refused when taken. Returns 0 or -1. */
int rl__ms_resv_add(mem_store *ms, resv *r, int keep_id);

/* Gives back the slots a reservation (already unlinked, or never added) holds; o (may be
 * NULL) is how the call went, for the types that learn from it. */
void rl__ms_resv_release_all(mem_store *ms, resv *rv, rl_ns now, const rl_outcome *o);
/* The outcome of a reservation that expired unreleased at now: a timeout. */
rl_outcome rl__ms_expired_outcome(const resv *rv, rl_ns now);

/* The store's snapshot methods (memsnap.c). */
int rl__ms_save(void *cls, FILE *f, rl_err *err);
int rl__ms_load(void *cls, FILE *f, rl_ns now, size_t *loaded, rl_err *err);

#endif
