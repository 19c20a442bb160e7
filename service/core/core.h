/*
 * core.h - internals shared by the files of the limiter core (rl__ prefix).
 */
#ifndef RL_CORE_H
#define RL_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ratelimit.h"
#include "ratelimit_store.h"

__extension__ typedef unsigned __int128 rl__u128;

#define RL__MAX_TYPES 64
#define RL__MAX_PLUGINS 16

struct rl_registry {
    size_t n;
    const rl_rule_type *types[RL__MAX_TYPES];
    size_t nplugins;
    void *plugins[RL__MAX_PLUGINS];
};

/* Puts a formatted prefix in front of the message in err. */
void rl__err_prefix(rl_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));


/* What identifies a rule's state across configurations: its type, its name, what it counts
 * (cost or requests), its reserved share and every declared parameter (the values, and the
 * strings of a list), not whether it is shadow or charged. Equal for the same rule in another
 * process (no pointers, no seed), so a snapshot keeps the state of a rule that did not change
 * wherever it moved in its list, and drops that of one whose parameters did. A rule with
 * carry_limit leaves out its per-unit amount and rate: its state outlives a changed limit. */
uint64_t rl__rule_fingerprint(const rl_rule *r);

/* A version 2 type that answers for the version 1 type v1 (allocated; freed with
 * rl__rule_v1_free), or NULL when v1 is malformed or out of memory. */
const rl_rule_type *rl__rule_v1_adapt(const rl_rule_type *v1);
/* Writes the header an adapted type's parameters start with (nothing for other types):
 * called on a rule's parameters as soon as they are allocated. */
void rl__rule_v1_params_init(const rl_rule_type *t, void *params);
/* Frees t when it is an adapter (nothing otherwise). */
void rl__rule_v1_free(const rl_rule_type *t);

/* Registers the built-in rule types from their table. */
int rl__register_builtins(rl_registry *reg);

/* Frees a rule list whatever its reference count. NULL is ok. */
void rl__rules_destroy(rl_rules *rs);
/* Checks that every rule of a list is set up and that names are unique in it; the message
 * starts with "[i]" so callers can prefix the list's path. */
int rl__rules_check(const rl_rules *rs, rl_err *err);

/* Why a level, tier or descriptor name is invalid, or NULL when it is fine. */
const char *rl__name_problem(const char *s);

/* Frees a configuration's dimensions and prices (usage.c). */
void rl__config_free_usage(rl_config *cfg);

/* Duplicates n bytes as a NUL-terminated string; NULL when out of memory. */
char *rl__strndup(const char *s, size_t n);

/* n / d with the remainder in *r (may be NULL); d > 0. Takes the 64-bit path when n fits,
 * which is nearly always: a 128-bit division is several times slower. */
static inline rl__u128 rl__divmod(rl__u128 n, uint64_t d, uint64_t *r)
{
    if ((uint64_t)(n >> 64) == 0) {
        uint64_t n64 = (uint64_t)n;
        if (r)
            *r = n64 % d;
        return n64 / d;
    }
    if (r)
        *r = (uint64_t)(n % d);
    return n / d;
}

/* ceil(a / b), saturated at RL_WAIT_NEVER; b > 0. */
static inline rl_ns rl__ceil_div(rl__u128 a, uint64_t b)
{
    uint64_t r;
    rl__u128 q = rl__divmod(a, b, &r);
    q += r != 0;
    return q >= (rl__u128)RL_WAIT_NEVER ? RL_WAIT_NEVER : (rl_ns)q;
}

/* Division by a divisor fixed in advance (a rule's rate), exact for every 64-bit numerator:
 * a multiplication by a precomputed reciprocal and a shift instead of a division, which costs
 * several times more (the round-up method with an add step, Granlund and Montgomery 1994). */
typedef struct rl__recip {
    uint64_t magic; /* 0: d is a power of two, shift only */
    uint8_t shift;
    uint8_t add;    /* the 65-bit reciprocal: one more step */
    uint64_t d;
} rl__recip;

/* The reciprocal of d > 0. */
static inline rl__recip rl__recip_make(uint64_t d)
{
    rl__recip r = {0, (uint8_t)(63 - __builtin_clzll(d)), 0, d};
    if ((d & (d - 1)) == 0)
        return r;
    rl__u128 num = (rl__u128)1 << (64 + r.shift);
    uint64_t m = (uint64_t)(num / d), rem = (uint64_t)(num % d);
    if (d - rem >= (uint64_t)1 << r.shift) {
        uint64_t twice = rem + rem;
        m += m;
        if (twice >= d || twice < rem)
            m += 1;
        r.add = 1;
    }
    r.magic = m + 1;
    return r;
}

/* n / r->d. */
static inline uint64_t rl__recip_div(const rl__recip *r, uint64_t n)
{
    if (r->magic == 0)
        return n >> r->shift;
    uint64_t q = (uint64_t)(((rl__u128)r->magic * n) >> 64);
    if (r->add)
        return (((n - q) >> 1) + q) >> r->shift;
    return q >> r->shift;
}

/* ceil(a / r->d), saturated at RL_WAIT_NEVER. */
static inline rl_ns rl__recip_ceil(const rl__recip *r, rl__u128 a)
{
    if ((uint64_t)(a >> 64) != 0 || (uint64_t)a == 0)
        return rl__ceil_div(a, r->d);
    uint64_t q = rl__recip_div(r, (uint64_t)a - 1) + 1;
    return q >= (uint64_t)RL_WAIT_NEVER ? RL_WAIT_NEVER : (rl_ns)q;
}

/* a + b for a, b >= 0, saturated at RL_WAIT_NEVER. */
static inline rl_ns rl__add_sat(rl_ns a, rl_ns b)
{
    return a > RL_WAIT_NEVER - b ? RL_WAIT_NEVER : a + b;
}

/* Largest "used" amount a state may record: charges saturate here instead of overflowing. */
#define RL__USED_MAX ((rl_fp)4 * RL_FP_MAX)

static inline rl_fp rl__used_add(rl_fp used, rl_fp add)
{
    return used > RL__USED_MAX - add ? RL__USED_MAX : used + add;
}

static inline rl_ns rl__max_ns(rl_ns a, rl_ns b)
{
    return a > b ? a : b;
}

/* Latest time a state may hold (about the year 2116). Clocks stay far below it, and adding
 * any duration a rule allows (at most a year) to it cannot overflow: a state read from a
 * snapshot with a later or a negative time is damaged. */
#define RL__TIME_MAX ((rl_ns)1 << 62)

/* Checks for state_valid: a time in [0, RL__TIME_MAX], a used amount in [0, RL__USED_MAX]. */
static inline int rl__time_ok(rl_ns t)
{
    return t >= 0 && t <= RL__TIME_MAX;
}

static inline int rl__used_ok(rl_fp v)
{
    return v >= 0 && v <= RL__USED_MAX;
}

/* Whether state holds the invariants of its type t: 1 as well when t has no state_valid (or
 * declares a version before 3, whose struct ends before it). */
static inline int rl__state_valid(const rl_rule_type *t, const void *params, const void *state)
{
    return t->api_version < 3 || !t->state_valid || t->state_valid(params, state);
}

/* The hash multiplies 64-bit words into 128 bits and folds the halves, 16 bytes a round. */
static inline uint64_t rl__mix(uint64_t a, uint64_t b)
{
    rl__u128 r = (rl__u128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t rl__read64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t rl__read32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* A fast keyed hash of n bytes (not cryptographic; the seed is random per limiter so that
 * clients cannot aim keys at one bucket chain); inline, since every decision hashes each key.
 * Keys are mostly short: up to 16 bytes are read as loads from both ends that overlap in the
 * middle (no byte-by-byte tail); the length, mixed in first, tells the overlaps apart. */
static inline uint64_t rl__hash(const void *data, size_t n, uint64_t seed)
{
    const uint64_t k0 = 0xa0761d6478bd642full, k1 = 0xe7037ed1a0b428dbull,
                   k2 = 0x8ebc6af09c88c6e3ull;
    const unsigned char *p = data;
    uint64_t h = seed ^ rl__mix(seed ^ k0, (uint64_t)n ^ k1);
    uint64_t a, b;

    if (n <= 16) {
        if (n >= 8) {
            a = rl__read64(p);
            b = rl__read64(p + n - 8);
        } else if (n >= 4) {
            a = rl__read32(p);
            b = rl__read32(p + n - 4);
        } else {
            a = n ? ((uint64_t)p[0] << 16) | ((uint64_t)p[n >> 1] << 8) | p[n - 1] : 0;
            b = 0;
        }
    } else {
        size_t left = n;
        while (left > 16) {
            h = rl__mix(rl__read64(p) ^ k1, rl__read64(p + 8) ^ h);
            p += 16;
            left -= 16;
        }
        a = rl__read64(p + left - 16);
        b = rl__read64(p + left - 8);
    }
    return rl__mix(k2 ^ (uint64_t)n, rl__mix(a ^ k1, b ^ h));
}

/* Why a key (descriptor value) is invalid, or NULL when it is fine. Inline: every decision
 * checks each key. */
static inline const char *rl__key_problem(const char *k, size_t n)
{
    if (n == 0)
        return "must not be empty";
    if (n > RL_KEY_MAX)
        return "must be at most 256 bytes";
    /* eight bytes at a time: a byte below 0x20, or 0x7f (which + 1 puts at 0x80); the last
     * word overlaps the one before it, a short key is read as two overlapping halves. A carry
     * out of a byte 0xff can flag the byte above it, so a flagged key is checked byte by byte. */
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t w, flagged = 0;
    if (n >= 8) {
        for (size_t i = 0; i + 8 < n; i += 8) {
            memcpy(&w, k + i, 8);
            flagged |= ((w - 0x20 * ones) | (w + ones)) & ~w & highs;
        }
        memcpy(&w, k + n - 8, 8);
    } else if (n >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, k, 4);
        memcpy(&hi, k + n - 4, 4);
        w = lo | (uint64_t)hi << 32;
    } else { /* 1 to 3 bytes: the first, middle and last (some twice), over spaces */
        w = 0x2020202020000000ull | (unsigned char)k[0] | (uint64_t)(unsigned char)k[n >> 1] << 8 |
            (uint64_t)(unsigned char)k[n - 1] << 16;
    }
    flagged |= ((w - 0x20 * ones) | (w + ones)) & ~w & highs;
    for (size_t i = 0; flagged && i < n; i++) {
        unsigned char c = (unsigned char)k[i];
        if (c < 0x20 || c == 0x7f)
            return "must not hold control characters";
    }
    return NULL;
}

/* ---- one decision: what the limiter and the memory store share ------------------------- */

/* Writes what a store's phase 1 found of applied rule a, whose item's mode is mode: its wait,
 * whether its type reports a status (left in its evaluation: status_lazy) and whether it is a
 * shadow rule that would have denied. */
static inline __attribute__((always_inline)) void
rl__applied_decided(rl_applied *a, unsigned mode, rl_ns wait, int has_status)
{
    a->wait = wait;
    a->has_status = has_status;
    a->status_lazy = (uint8_t)has_status;
    a->shadow_denied = (uint8_t)((mode & RL_ITEM_SHADOW) && wait != 0);
}

/* Writes applied rule a of a plan: rule r at position slot of level's list, at key, with its
 * item's mode (rl_plan_item_of), and what phase 1 found (rl__applied_decided; wait 0 and
 * has_status 0 before a store decides). The one place that says what an applied rule holds,
 * for the limiter's plan and the memory store's decision of levels. Pass values worked out
 * before the call: a's byte fields may alias anything. */
static inline __attribute__((always_inline)) void
rl__applied_set(rl_applied *a, const rl_rule *r, unsigned mode, const char *key, uint32_t keylen,
                uint16_t level, uint16_t slot, rl_ns wait, int has_status)
{
    a->rule = r;
    a->key = key;
    a->level = level;
    a->slot = slot;
    a->keylen = keylen;
    a->fallback = RL_FALLBACK_NONE;
    a->shadow = (uint8_t)((mode & RL_ITEM_SHADOW) != 0);
    a->charge = (uint8_t)((mode & RL_ITEM_CHARGE) != 0);
    rl__applied_decided(a, mode, wait, has_status);
}

/* Which rule blocks: once every applied rule of d has its wait for plan's item, sets
 * d->retry_after to the longest wait of an item that blocks (rl_plan_item_blocks),
 * d->blocked to its index (the first of equal waits; -1 when no such item waits) and
 * d->allowed. The one place that says it: the limiter calls it after any store's decide, the
 * memory store at the end of its decision of levels. */
static inline void rl__decision_blocked(rl_decision *d, const rl_plan *plan)
{
    rl_ns retry = 0;
    int blocked = -1;
    for (size_t i = 0, n = d->napplied; i < n; i++)
        if (d->applied[i].wait > retry && rl_plan_item_blocks(plan, i)) {
            retry = d->applied[i].wait;
            blocked = (int)i;
        }
    d->retry_after = retry;
    d->blocked = blocked;
    d->allowed = blocked < 0;
}

/* ---- the memory store's decision from the keys alone --------------------------------------
 *
 * Not part of the store interface (ratelimit_store.h): only the memory store can decide a
 * request without its plan, and only the core knows it. A request of descriptors (no items,
 * no reservation) is resolved by the limiter into one key per level (rl__levels) and handed to
 * the memory store's decide_levels; when that declines, the limiter plans the request and
 * calls decide as for any store. tests/test_decide_paths.c runs one random trace both ways. */

/* One level's key of a request, with the rules in force there (at least one). */
typedef struct rl__level_key {
    const rl_rules *rules;
    const char *key;
    uint32_t keylen;
    uint16_t level;
    uint8_t shadow;  /* the level makes every rule a shadow rule */
    uint8_t as_cost; /* rl__rules_as_cost(rules, shadow) */
} rl__level_key;

/* Whether every rule of rs, on a level that makes its rules shadow rules or not (level_shadow),
 * checks and takes a request's cost as it is, whatever the request: rl_plan_item_of gives each
 * the item {cost, cost, mode 0} (unit "cost", no reserved share, neither shadow nor charge).
 * Worked out once per rule list where the limiter can (per key for tiered and keyed levels). */
static inline int rl__rules_as_cost(const rl_rules *rs, int level_shadow)
{
    if (level_shadow)
        return 0;
    for (size_t i = 0; i < rs->n; i++) {
        const rl_rule *r = &rs->v[i];
        if (r->unit != RL_UNIT_COST || r->reserved > 0 || r->shadow || r->charge)
            return 0;
    }
    return 1;
}

/* A request of descriptors resolved into its keys, levels in increasing order. */
typedef struct rl__levels {
    size_t n;
    rl__level_key lv[RL_MAX_LEVELS];
    size_t nrules; /* over every level, at most RL_MAX_APPLIED */
    rl_fp cost;    /* > 0 */
    const rl_fp *amt;      /* NULL, or the decision's amt: the request's amounts by unit */
    const rl_price *price; /* the prices its dollars came from, or NULL */
    int64_t priority;
    unsigned flags; /* RL_DRY_RUN or 0 (a request that reserves is planned) */
    rl_ns now;
} rl__levels;

/* What decide_levels returns when it leaves the request to the plan. */
#define RL__DECLINED 1

/* Decides q into d as decide would decide the plan the limiter makes of q (rl_plan_item_of and
 * rl__applied_set per rule, level by level): fills d's applied rules, d->napplied, d->now, d->allowed,
 * d->retry_after and d->blocked (rl__decision_blocked), and returns RL_OK. Or returns
 * RL__DECLINED having changed no state, when deciding would need more than taking from state
 * that exists (a new key's state, a rule that holds, room under max_keys): the limiter then
 * plans the request and calls decide, whatever d holds. Never fails. */
typedef int (*rl__decide_levels_fn)(void *cls, const rl__levels *q, rl_decision *d);

/* The decide_levels of store: the memory store's (rl_memory_store_new), NULL for any other
 * store, a decorator around a memory store included. */
rl__decide_levels_fn rl__store_decide_levels(const rl_store *store);

/* Replaces the decide_levels lim calls with store's cls (NULL: every request is planned): for
 * tests that compare both ways or count what decide_levels declines. */
void rl__limiter_set_decide_levels(rl_limiter *lim, rl__decide_levels_fn fn);

#endif
