/*
 * keytable.h - tables of per-key state records for the in-memory store (core-internal).
 *
 * A table belongs to one level. It is split into RL__NSEG segments by the top bits of the key's
 * hash; each segment is an open-addressing array of 48-byte records with Robin Hood probing and
 * its own spin lock. A lookup costs one cache miss: the record holds its hash, its key (inline
 * up to 16 bytes) and its state. Large arrays are backed by huge pages where the system allows.
 *
 * Indices are valid only while the segment's lock is held, and only until the next insert,
 * resize or removal in that segment (all of them may move records).
 */
#ifndef RL_KEYTABLE_H
#define RL_KEYTABLE_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"

#define RL__NSEG_BITS 4
#define RL__NSEG (1u << RL__NSEG_BITS)
#define RL__KEY_INLINE 16
#define RL__NONE UINT32_MAX

typedef struct rl__rec {
    uint32_t hash; /* of (key, slot); its high bits are not the segment's */
    uint16_t klen;
    uint8_t type; /* rule type id + 1; 0 marks an empty slot */
    uint8_t slot; /* the rule's position in its list */
    union {
        char in[RL__KEY_INLINE];
        char *out; /* keys longer than RL__KEY_INLINE */
    } key;
    union {
        int64_t w[RL_STATE_INLINE / 8];
        void *ext; /* states larger than RL_STATE_INLINE */
    } st;
} rl__rec;

_Static_assert(sizeof(rl__rec) == 48, "records are 48 bytes");

/* A test-and-test-and-set lock: the sections it guards are a few hundred nanoseconds. */
typedef struct rl__spin {
    int v;
} rl__spin;

/* The wait of rl__spin_lock when the lock was taken (spins, yielding now and then). */
void rl__spin_wait(rl__spin *l);
static inline void rl__spin_lock(rl__spin *l)
{
    if (__atomic_exchange_n(&l->v, 1, __ATOMIC_ACQUIRE))
        rl__spin_wait(l);
}
static inline void rl__spin_unlock(rl__spin *l)
{
    __atomic_store_n(&l->v, 0, __ATOMIC_RELEASE);
}

typedef struct rl__seg {
    _Alignas(64) rl__spin lock;
    uint32_t cap;   /* slots in r (0 before the first insert) */
    uint32_t count; /* records in use; read without the lock for statistics */
    uint32_t sweep; /* next slot the idle sweep looks at */
    uint32_t grew;  /* the array grew since the sweep's last pass ended */
    uint32_t far;   /* no record sits further from its home slot (removals leave it as is) */
    rl__rec *r;
} rl__seg;

typedef struct rl__table {
    rl__seg s[RL__NSEG];
} rl__table;

/* The segment of a key. */
static inline rl__seg *rl__table_seg(rl__table *t, uint64_t keyhash)
{
    return &t->s[keyhash >> (64 - RL__NSEG_BITS)];
}

/* The record hash of (key, slot) from the key's 64-bit hash. */
static inline uint32_t rl__rec_hash(uint64_t keyhash, unsigned slot)
{
    uint64_t x = (keyhash + slot * 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
    return (uint32_t)(x >> 32);
}

static inline const char *rl__rec_key(const rl__rec *r)
{
    return r->klen <= RL__KEY_INLINE ? r->key.in : r->key.out;
}

/* Starts loading the home slot of record hash h into the cache. The segment's array may be
 * replaced concurrently: this only reads the pointer, and a prefetch never faults. */
static inline void rl__seg_prefetch(const rl__seg *s, uint32_t h)
{
    uint32_t cap = __atomic_load_n(&s->cap, __ATOMIC_RELAXED);
    const rl__rec *r = __atomic_load_n(&s->r, __ATOMIC_RELAXED);
    if (r && cap)
        __builtin_prefetch(&r[((uint64_t)h * cap) >> 32]);
}

/* The home slot of record hash h in an array of cap slots. */
static inline uint32_t rl__home(uint32_t h, uint32_t cap)
{
    return (uint32_t)(((uint64_t)h * cap) >> 32);
}

/* How far slot i is from the home of the record hash h. */
static inline uint32_t rl__distance(uint32_t h, uint32_t i, uint32_t cap)
{
    uint32_t hm = rl__home(h, cap);
    return i >= hm ? i - hm : i + cap - hm;
}

/* Whether r, whose length is klen (at most RL__KEY_INLINE), holds key: two loads from each
 * end that overlap in the middle, which cover every byte once the lengths are equal (one to
 * three bytes: the first, the middle and the last). */
static inline int rl__inline_key_equal(const rl__rec *r, const char *key, size_t klen)
{
    const unsigned char *in = (const unsigned char *)r->key.in, *k = (const unsigned char *)key;
    if (klen >= 8)
        return rl__read64(in) == rl__read64(k) &&
               rl__read64(in + klen - 8) == rl__read64(k + klen - 8);
    if (klen >= 4)
        return rl__read32(in) == rl__read32(k) &&
               rl__read32(in + klen - 4) == rl__read32(k + klen - 4);
    return in[0] == k[0] && in[klen >> 1] == k[klen >> 1] && in[klen - 1] == k[klen - 1];
}

_Static_assert(offsetof(rl__rec, hash) == 0 && offsetof(rl__rec, klen) == 4 &&
                   offsetof(rl__rec, type) == 6 && offsetof(rl__rec, slot) == 7,
               "a record's first word is its hash, key length, type and slot");

#define RL__HEAD_TYPE ((uint64_t)0xff << 48)

/* The probe loop compares a record's first word (hash, length and slot; little-endian) as
 * one (an empty slot is all zeros and a key at least one byte long, so an empty slot never
 * matches); only a record that matches them compares its key. It stops after the segment's
 * furthest distance from home, which no record passes: a probe costs a load, a compare and
 * a step of a pointer (no index to wrap and scale). Made twice, for keys held inline and for
 * longer ones, so that the first calls nothing and saves no registers. */
static inline __attribute__((always_inline)) rl__rec *
rl__seg_lookup_in(const rl__seg *s, uint32_t h, unsigned slot, const char *key, size_t klen,
                  int inline_key)
{
    uint32_t cap = s->cap;
    if (!cap)
        return NULL;
    rl__rec *r = s->r;
    uint64_t want = (uint64_t)h | (uint64_t)klen << 32 | (uint64_t)slot << 56;
    rl__rec *p = r + rl__home(h, cap), *end = r + cap;
    for (uint32_t left = s->far;;) {
        uint64_t head = rl__read64((const unsigned char *)p);
        if ((head & ~RL__HEAD_TYPE) == want &&
            (inline_key ? rl__inline_key_equal(p, key, klen)
                        : memcmp(p->key.out, key, klen) == 0))
            return p;
        if (left-- == 0)
            return NULL;
        if (++p == end)
            p = r;
    }
}

/* rl__seg_lookup for a key longer than RL__KEY_INLINE (out of line). */
rl__rec *rl__seg_lookup_long(const rl__seg *s, uint32_t h, unsigned slot, const char *key,
                             size_t klen);

/* The record of (slot, key) with record hash h, or NULL. Inline: every decision looks up a
 * record per rule. */
static inline __attribute__((always_inline)) rl__rec *
rl__seg_lookup(const rl__seg *s, uint32_t h, unsigned slot, const char *key, size_t klen)
{
    if (klen > RL__KEY_INLINE)
        return rl__seg_lookup_long(s, h, slot, key, klen);
    return rl__seg_lookup_in(s, h, slot, key, klen, 1);
}

/* The index of the record of (slot, key) with record hash h, or RL__NONE. */
static inline __attribute__((always_inline)) uint32_t
rl__seg_find(const rl__seg *s, uint32_t h, unsigned slot, const char *key, size_t klen)
{
    const rl__rec *p = rl__seg_lookup(s, h, slot, key, klen);
    return p ? (uint32_t)(p - s->r) : RL__NONE;
}
/* Inserts a record with a zero state (ext_size > 0: a zeroed external state of that size) for
 * a key not in the segment. Returns its index, or RL__NONE when out of memory (nothing
 * changed). May move other records. */
uint32_t rl__seg_insert(rl__seg *s, uint32_t h, unsigned slot, const char *key, size_t klen,
                        uint8_t type, size_t ext_size);
/* Removes record i (the caller has released what its state holds). Moves later records. */
void rl__seg_remove(rl__seg *s, uint32_t i);
/* Called when a sweep's pass over the segment ends: shrinks a segment that has become mostly
 * empty and did not grow since the previous pass (keys that go idle while as many new ones
 * come would otherwise make it shrink and grow back at every pass). Returns 1 when it did. */
int rl__seg_shrink(rl__seg *s);
/* Frees a segment's array and keys (states must have been released). */
void rl__seg_free(rl__seg *s);

#endif
