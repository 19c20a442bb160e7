/*
 * ratelimit_store.h - where per-key state lives: the interface a store implements.
 *
 * The limiter resolves a request into a plan: for every rule that applies, the level, the rule's
 * position in its list, the key, and the amounts to check and take. A store carries the plan out
 * atomically (phase 1 for every item, then phase 2 for every item only if all fit) and keeps the
 * reservations. The in-memory store ships with the core; other stores (Redis) live outside it
 * and plug in through this table, methods taking their context first.
 */
#ifndef RATELIMIT_STORE_H
#define RATELIMIT_STORE_H

#include <stdio.h>

#include "ratelimit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the store needs of one applied rule besides d->applied[i] (level, slot, rule, key). */
typedef struct rl_plan_item {
    uint64_t hash; /* what the store's prefetch returned for this level (0 without one) */
    rl_fp cost;    /* taken in phase 2 (1 unit for a rule counting requests) */
    rl_fp need;    /* checked in phase 1: cost plus any reserved headroom */
    uint8_t mode;  /* RL_ITEM_SHADOW, RL_ITEM_CHARGE (d->applied[i].shadow, .charge) */
} rl_plan_item;

#define RL_ITEM_SHADOW 0x1u /* never blocks; takes, on an allowed request, only when it fits */
#define RL_ITEM_CHARGE 0x2u /* takes on an allowed request whatever it has left */

typedef struct rl_plan {
    size_t n; /* == d->napplied */
    rl_plan_item items[RL_MAX_APPLIED];
    rl_fp cost; /* the request's cost, what a reservation records */
    /* NULL, or the request's amount in each unit (amt[RL_UNIT_USD] and the dimensions'
     * amt[RL_UNIT_DIM0 + k]; amt[0] and amt[1] unused), with the prices its dollars came
     * from (NULL when none): what a reservation records besides the cost, to settle with. */
    const rl_fp *amt;
    const rl_price *price;
    unsigned flags; /* RL_DRY_RUN, RL_RESERVE */
    rl_ns now;
} rl_plan;

/* The amount a rule counting unit u takes from a request of cost and amounts amt (NULL:
 * none, rl_plan.amt): the cost, one unit for a rule counting requests (when cost > 0), or the
 * request's dollars or dimension (0 without amounts). */
static inline rl_fp rl_unit_amount(unsigned u, rl_fp cost, const rl_fp *amt)
{
    if (u == RL_UNIT_COST)
        return cost;
    if (u == RL_UNIT_REQUESTS)
        return cost > 0 ? RL_FP_ONE : cost;
    return amt ? amt[u] : 0;
}

/* What rule r asks of a request of cost (and amounts amt, rl_unit_amount) and priority at a
 * key of a level (level_shadow: the level makes its rules shadow rules): the amount it takes,
 * what it checks (with any reserved headroom the priority does not reach) and its mode. hash
 * is left 0. */
static inline rl_plan_item rl_plan_item_of(const rl_rule *r, int level_shadow, rl_fp cost,
                                           const rl_fp *amt, int64_t priority)
{
    rl_fp c = rl_unit_amount(r->unit, cost, amt);
    rl_fp need = r->reserved > 0 && priority < r->reserved_min_priority ? c + r->reserved : c;
    int shadow = (r->shadow | level_shadow) != 0, charge = r->charge != 0;
    rl_plan_item it = {.hash = 0, .cost = c, .need = need,
                       .mode = (uint8_t)((shadow ? RL_ITEM_SHADOW : 0) |
                                         (charge ? RL_ITEM_CHARGE : 0))};
    return it;
}

/* Whether an item's wait decides under the plan's flags (a wait > 0 denies the request): not
 * for a shadow rule, nor for a charge rule when the item takes a cost > 0 for real (not a dry
 * run). */
static inline int rl_item_blocks(const rl_plan_item *it, unsigned flags)
{
    if (it->mode & RL_ITEM_SHADOW)
        return 0;
    return !(it->mode & RL_ITEM_CHARGE) || (flags & RL_DRY_RUN) || it->cost == 0;
}

/* Whether item i's wait decides (rl_item_blocks). */
static inline int rl_plan_item_blocks(const rl_plan *plan, size_t i)
{
    return rl_item_blocks(&plan->items[i], plan->flags);
}

/* Whether item i takes its cost when the request is allowed and not a dry run, given its
 * wait: a shadow rule only when the cost fits it. */
static inline int rl_plan_item_takes(const rl_plan *plan, size_t i, rl_ns wait)
{
    return !(plan->items[i].mode & RL_ITEM_SHADOW) || wait == 0;
}

/* How a store finds the rule now in force at (level, slot) for a key: used to expire
 * reservations, settle them and drop idle state when tiers may have changed. Returns NULL
 * when there is none; *ref receives a reference to drop with rl_rules_unref (may be NULL). */
typedef struct rl_resolver {
    const rl_rule *(*rule_at)(void *ctx, size_t level, size_t slot, const char *key,
                              size_t keylen, rl_rules **ref);
    void *ctx;
} rl_resolver;

typedef struct rl_store_ops {
    const char *name;
    /* Called by rl_limiter_new before any other method. cfg and res outlive the store, or
     * the next attach: rl_limiter_new_over attaches a store again, to another configuration,
     * with nothing in flight; a store that keeps state of its own by level position must not
     * be taken over so (the memory store). */
    int (*attach)(void *cls, const rl_config *cfg, const rl_resolver *res, rl_err *err);
    /* Carries out the plan: fills d->allowed, d->retry_after, d->blocked, d->applied[i].wait,
     * .shadow_denied, .has_status and, when it has one, the rule's status, and d->reservation
     * when the plan reserves or a rule holds. Only items for which rl_plan_item_blocks holds
     * decide; when they all fit (and the plan is not a dry run) every item for which
     * rl_plan_item_takes holds takes its cost. The status is the rule's after the decision;
     * its next is the rule's wait then for rl_status_want(limit, remaining), and 0 when
     * remaining >= limit. A store sets it with rl_applied_set_status, or leaves it to be
     * worked out when read (rl_decision_status): the rule's evaluation at plan->now in
     * .status.ev, committed into when the request took, .status_lazy = 1 and d->now =
     * plan->now; only for a type without RL_RULE_EVAL_IN_STATE, whose state may have changed
     * by then. Returns 0, or RL_ESTORE (nothing taken) when the store cannot answer. */
    int (*decide)(void *cls, const rl_plan *plan, rl_decision *d, rl_err *err);
    /* Optional (NULL: decide is called for each). Carries out n plans as decide carries out
     * each, as if one after the other: rc[i] is what decide would return for plans[i] into
     * ds[i], with errs[i] its error. A store that waits for a round trip per decision makes
     * one for all of them. */
    void (*decide_many)(void *cls, const rl_plan *const *plans, rl_decision *const *ds,
                        size_t n, int *rc, rl_err *errs);
    /* Settles a reservation (rl_settle_usage): rl_settle_amounts says what each unit's actual
     * amount is; every remembered item counting a refundable unit is given back its reserved
     * amount less that (or charged the difference). settle and release: outcome is NULL or
     * says something (rl_settle_outcome); the store hands it to the rule types that learn from
     * it (rl_rule_type.release_outcome, through rl_rule_release_outcome), and a reservation its
     * tick expires unreleased is a timeout to them (latency: from its take to now). */
    int (*settle)(void *cls, const char *id, const rl_actual *actual, rl_ns now,
                  const rl_outcome *outcome, rl_settlement *out, rl_err *err);
    int (*release)(void *cls, const char *id, rl_ns now, const rl_outcome *outcome, rl_err *err);
    void (*tick)(void *cls, rl_ns now);
    /* Optional (NULL: the store cannot): drops every rule's state of key at level, on every
     * instance that shares the store, and counts them in *cleared (rl_limiter_reset). */
    int (*reset)(void *cls, size_t level, const char *key, size_t keylen, size_t *cleared,
                 rl_err *err);
    size_t (*keys)(void *cls, size_t level);
    void (*stats)(void *cls, rl_stats *out);
    /* Snapshots: save writes every key's state and every live reservation to f; load reads
     * them back into a store that has not decided anything yet, skipping what no longer
     * matches the configuration or is idle or expired at now. NULL for a store that keeps its
     * state elsewhere (Redis). */
    int (*save)(void *cls, FILE *f, rl_err *err);
    int (*load)(void *cls, FILE *f, rl_ns now, size_t *loaded, rl_err *err);
    void (*destroy)(void *cls);
    /* Optional (NULL: every item's hash is 0). A hint, and the one fast-path hook of this
     * interface. The limiter calls it while it makes a plan (for a store of yours, that is for
     * every request), once per key it plans (a level's, or an item's) as soon as it knows the
     * key and the rules rs that apply there (rs->n >= 1), before it calls decide or decide_many
     * with that plan; a plan may also end in an error before any decide. The store
     * may start loading that key's state into the cache while the limiter makes the rest of
     * the plan, and returns a value that the limiter hands back in each of the level's items
     * (rl_plan_item.hash), such as the key's hash, so that decide need not compute it again.
     * decide may assume nothing more: it must decide as well with every hash 0 (a plan made
     * without prefetch), and the state may change between prefetch and decide. Called from
     * any thread, concurrently; must not fail, block, take a lock a decision may hold, or
     * change state; key is borrowed for the call. (The memory store also decides most
     * requests from their keys without a plan, and then without prefetch: that shortcut is the
     * core's own, service/core/core.h.) */
    uint64_t (*prefetch)(void *cls, size_t level, const rl_rules *rs, const char *key,
                         size_t keylen);
} rl_store_ops;

struct rl_store {
    const rl_store_ops *ops;
    void *cls;
};

/* Sets applied rule a's status after the decision, as the store worked it out (from a
 * script's reply, another decision's status): rl_decision_status returns a copy of *st. */
static inline void rl_applied_set_status(rl_applied *a, const rl_rule_status *st)
{
    a->status.st = *st;
    a->status_lazy = 0;
}

/* One evaluation of rule for key in state at now, without taking: returns the wait for cost
 * and, when st is not NULL and the rule reports a status, fills every field of st. For stores
 * that decide a rule in process without keeping its state (a stateless rule, with a zero
 * state). */
rl_ns rl_rule_peek(const rl_rule *rule, const void *state, const char *key, size_t keylen,
                   rl_ns now, rl_fp cost, rl_rule_status *st);

/* The type's release_outcome when it declares version 5 or later and has one, else NULL. */
void (*rl_rule_release_outcome(const rl_rule_type *t))(const void *, void *, rl_ns, rl_ns, rl_fp,
                                                        const rl_outcome *);

/* A new in-memory store, or NULL when out of memory. */
rl_store *rl_memory_store_new(void);
/* The same holding at most max_keys key states (one per rule of a key; 0: no bound). A
 * decision that needs a new state past it drops the idle states of that key's segment first;
 * when none is idle it fails with RL_EFULL and changes nothing, while keys that have state
 * keep being decided. The bound holds under concurrent decisions. */
rl_store *rl_memory_store_new_bounded(uint64_t max_keys);

/* ---- what every store does the same way ------------------------------------------------ */

/* Whether a rule counting unit u is settled (given back or charged) with its reservation:
 * every unit but requests. */
static inline int rl_unit_refundable(unsigned u)
{
    return u != RL_UNIT_REQUESTS;
}

/* A settlement's amounts: a reservation made with cost, amounts amt (RL_UNITS entries, or
 * NULL for none) at prices price (NULL: none), settled with a; fills out (every field) and
 * act[u], each unit's actual amount, that an item counting u settles with (its reserved
 * amount less act[u]). */
void rl_settle_amounts(rl_fp cost, const rl_fp *amt, const rl_price *price, const rl_actual *a,
                       rl_settlement *out, rl_fp act[RL_UNITS]);

/* 64 random bits from the system, or a time-derived value when none is available. */
uint64_t rl_random64(void);

/* Reservation ids are "r-" and 16 hex digits of rl_store_permute(counter ^ key), the key
 * random per store (rl_random64): ids follow a counter but cannot be guessed from one another
 * without the key, and an id is its own good hash. */
uint64_t rl_store_permute(uint64_t x);
/* Writes the id of value v ("r-" and v in 16 lower-case hex digits). */
void rl_store_id_format(char id[RL_RESERVATION_ID], uint64_t v);
/* The value of an id written by rl_store_id_format: 0, or -1 when id has another form (the
 * store answers RL_ENOTFOUND then). */
int rl_store_id_parse(const char *id, uint64_t *v);

/* The share of parameter value v (as stored: rl_fp for amounts and rates) that each of n
 * parts gets when a rule is divided among n instances (the local fallback) or n shards of a
 * key: amounts and rates are divided by n rounded down, so that n shares never add up to
 * more than the whole, but not below the parameter's minimum nor one millionth; zero,
 * other parameters, and any when n <= 1, are left as they are. */
int64_t rl_param_share(const rl_param_def *d, int64_t v, unsigned n);

#ifdef __cplusplus
}
#endif
#endif
