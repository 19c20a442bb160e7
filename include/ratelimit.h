/*
 * ratelimit.h - the limiter core: levels, rules, tiers, two-phase decisions, reservations.
 *
 * The core knows nothing of HTTP, JSON or where state is kept. A configuration (rl_config) is
 * built by the caller from rule specifications checked against each rule type's parameter table;
 * a limiter (rl_limiter) owns it and decides requests against a store (rl_store, see
 * ratelimit_store.h; the in-memory store is the default).
 *
 * A decision for a request of cost c:
 *   phase 1  every rule of every level that applies answers how long until c fits;
 *   phase 2  if every answer is 0, c is taken from every rule; otherwise nothing is taken
 *            anywhere and the decision names the longest wait and the rule that gave it.
 *
 * Functions that can fail return 0 (RL_OK) or a negative code from RL_ERRORS, and fill an
 * rl_err with a message that names the field at fault. A denied request is not an error.
 * Time is always an argument (rl_ns, nanoseconds); only the caller reads a clock.
 */
#ifndef RATELIMIT_H
#define RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "ratelimit_rule.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RL_VERSION "1.0.0"

/* Error codes: X(name, value, message). */
#define RL_ERRORS(X)                                                                               \
    X(ENOMEM, -1, "out of memory")                                                                 \
    X(EINVAL, -2, "invalid argument")                                                              \
    X(ENOTFOUND, -3, "no such reservation")                                                        \
    X(ESETTLED, -4, "reservation already settled")                                                 \
    X(ESTORE, -5, "store unavailable")                                                             \
    X(EPLUGIN, -6, "plug-in not loaded")                                                           \
    X(EIO, -7, "input/output error")                                                               \
    X(EFULL, -8, "store full")

typedef enum rl_code {
    RL_OK = 0,
#define RL__ERR_ENUM(name, value, msg) RL_##name = value,
    RL_ERRORS(RL__ERR_ENUM)
#undef RL__ERR_ENUM
} rl_code;

/* The fixed message of a code ("out of memory"); "unknown error" for others. */
const char *rl_strerror(int code);

/* A message naming the field at fault, filled by failing functions. */
typedef struct rl_err {
    char msg[512];
} rl_err;

/* Fills err (may be NULL) with a formatted message and returns code: for the core and for
 * code built on it that reports errors the same way. */
int rl_errf(rl_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Limits of one decision. */
#define RL_MAX_LEVELS 16       /* levels in a configuration */
#define RL_MAX_RULES 16        /* rules in one rule list */
#define RL_MAX_ALERTS 4        /* alert thresholds of one rule */
#define RL_MAX_APPLIED 64      /* rules applied by one decision */
#define RL_KEY_MAX 256         /* bytes in a descriptor value */
#define RL_COMPOSED_MAX 1024   /* bytes in a key composed from several descriptors */
#define RL_DECISION_KEYS 4096  /* bytes of all level keys of one decision together */
#define RL_RESERVATION_ID 19   /* "r-" + 16 hex digits + NUL */

/* ---- rule type registry ---------------------------------------------------------------- */

/* Creates a registry holding the built-in rule types. Returns NULL when out of memory. */
rl_registry *rl_registry_new(void);
/* Frees the registry and unloads its plug-ins. Rules made from it must be gone. NULL is ok. */
void rl_registry_free(rl_registry *reg);
/* Loads a plug-in shared object and lets it register its rule types; a plug-in loaded already
 * (the same object, by any path) is not loaded again and gives RL_OK. On failure returns
 * RL_EPLUGIN with the reason in err and registers nothing of it. */
int rl_registry_load_plugin(rl_registry *reg, const char *path, rl_err *err);
/* The rule type of that name, or NULL. */
const rl_rule_type *rl_registry_find(const rl_registry *reg, const char *name);
/* Number of registered types and the i-th one (registration order, built-ins first). */
size_t rl_registry_count(const rl_registry *reg);
const rl_rule_type *rl_registry_at(const rl_registry *reg, size_t i);

/* ---- rules ---------------------------------------------------------------------------- */

/* What a rule counts. A request carries a cost (1 unless given) and, optionally, its usage in
 * the dimensions the configuration declares (rl_config_add_dimension: input tokens, output
 * tokens, ...); a rule counts the cost, one per request, dollars, or one dimension. Dollars
 * are worked out from the usage and the prices of the request's model (rl_config_add_price),
 * exactly: the sum over the dimensions of amount x price, rounded up once to a whole
 * nano-dollar (1e-9). A rule counting dollars keeps its amounts in nano-dollars: its amount
 * and rate parameters are given in dollars and kept multiplied by RL_USD_SCALE, and its
 * statuses (limit, remaining) count in those units (rl_rule_scale). A rule counting a
 * dimension the request does not carry takes 0 from it (and so only waits while its balance
 * is below 0, after a charge). */
#define RL_MAX_DIMS 8
typedef enum rl_unit {
    RL_UNIT_COST = 0,
    RL_UNIT_REQUESTS = 1,
    RL_UNIT_USD = 2,
    RL_UNIT_DIM0 = 3 /* dimension k is RL_UNIT_DIM0 + k */
} rl_unit;
#define RL_UNITS (RL_UNIT_DIM0 + RL_MAX_DIMS)
#define RL_USD_SCALE 1000 /* rl_fp units per dollar: RL_FP_ONE * 1000 per dollar */

/* A request's usage: v[k] in dimension k when bit k of given is set (0..RL_FP_MAX each). */
typedef struct rl_usage {
    uint32_t given;
    rl_fp v[RL_MAX_DIMS];
} rl_usage;

/* One configured rule: a type, its parameters and the options every rule accepts. */
typedef struct rl_rule {
    const rl_rule_type *type;
    unsigned type_id;          /* index in the registry, stable for the registry's life */
    char *name;                /* shown in blocked_by and headers */
    int name_given;            /* 1 when the configuration named it */
    rl_unit unit;
    double reserved_fraction;  /* 0 when no share is reserved */
    int64_t reserved_min_priority;
    rl_fp reserved;            /* headroom kept for priority >= reserved_min_priority */
    /* Shadow: the rule is evaluated and its would-be denial reported (rl_applied.shadow_denied)
     * but it never denies nor changes the decision; on an allowed request it takes the cost
     * when the cost fits it (nothing otherwise), on a denied one nothing. */
    int shadow;
    /* Charge: a request of cost > 0 that the other rules allow takes its cost from the rule
     * whatever it has left, below zero if need be, and the rule never blocks it; a dry run
     * (or an item of cost 0) checks it like any rule, so checks wait out a negative balance.
     * shadow wins over charge on one rule. */
    int charge;
    /* Fractions of the limit (0 < f <= 1, increasing) whose crossing within a period the
     * service reports (its alerts); the core keeps them and never reads them. nalerts 0: none. */
    unsigned nalerts;
    double alerts[RL_MAX_ALERTS];
    unsigned char *given;      /* given[i] != 0 when parameter i was set explicitly */
    void *params;              /* type->params_size bytes */
    /* A rule of a type that takes a limit per unit (rl_rule_per_unit) whose state carries
     * over a reload that changes only that limit (the amount and the rate made from it): the
     * state then counts on under the new limit, as counters keyed by the window and not by
     * the limit do. 0: a changed limit starts afresh, as any changed parameter. */
    int carry_limit;
} rl_rule;

/* Starts a rule of the named type: zeroes r and allocates its parameters. Errors: RL_EINVAL
 * ("type: unknown rule type ...") or RL_ENOMEM. After a failure r needs no rl_rule_clear. */
int rl_rule_init(rl_rule *r, const rl_registry *reg, const char *type, rl_err *err);
/* The kind of the named parameter, or -1 when the type has no such parameter. */
int rl_rule_param_kind(const rl_rule *r, const char *param);
/* Sets a numeric parameter (amount, rate, duration or integer) after checking its bounds.
 * Errors name the parameter: "capacity: must be a number from 0.000001 to 1000000000000". */
int rl_rule_set_number(rl_rule *r, const char *param, double v, rl_err *err);
/* Sets a string-list parameter; the strings are copied. */
int rl_rule_set_strings(rl_rule *r, const char *param, const char *const *v, const size_t *len,
                        size_t n, rl_err *err);
/* Sets the rule's name (1 to 128 bytes, printable, no '"' or '\\'). */
int rl_rule_set_name(rl_rule *r, const char *name, rl_err *err);
/* Sets the unit: "cost" or "requests". */
int rl_rule_set_unit(rl_rule *r, const char *unit, rl_err *err);
/* Sets the unit among those of a configuration with dimensions dims[0..ndims-1]: "cost",
 * "requests", "usd" or a dimension's name. Errors name the field: "unit: must be ...". */
int rl_rule_set_unit_in(rl_rule *r, const char *const *dims, size_t ndims, const char *unit,
                        rl_err *err);
/* How many of the rule's stored amount units make one unit of its own: RL_USD_SCALE for a
 * rule counting dollars, 1 otherwise (divide a status's limit and remaining by it). */
static inline int64_t rl_rule_scale(const rl_rule *r)
{
    return r->unit == RL_UNIT_USD ? RL_USD_SCALE : 1;
}
/* Reserves a share of the rule's quota for priorities >= min_priority. fraction in (0, 1).
 * Errors when the rule type has no quota to reserve a share of. */
int rl_rule_set_reserved(rl_rule *r, double fraction, int64_t min_priority, rl_err *err);
/* Applies defaults, checks required parameters, lets the type check the whole and names the
 * rule when no name was set. After success the rule is complete. */
int rl_rule_finish(rl_rule *r, rl_err *err);
/* Frees what the rule owns; r may be zeroed or half-built. */
void rl_rule_clear(rl_rule *r);
/* Reads a numeric parameter back in the user's units (for listing the configuration). */
double rl_rule_get_number(const rl_rule *r, const rl_param_def *def);
/* Borrows a string-list parameter. */
const rl_strings *rl_rule_get_strings(const rl_rule *r, const rl_param_def *def);

/* An immutable list of rules. Lists of a configuration live as long as the limiter; lists
 * made at run time (custom quotas) are reference counted. */
typedef struct rl_rules {
    long refs; /* < 0: owned by the configuration, never freed by unref */
    size_t n;
    rl_rule *v;
} rl_rules;

/* A list of n rules (zeroed, each to be set up with rl_rule_init) with one reference.
 * n is 1..RL_MAX_RULES. Returns NULL when out of memory. */
rl_rules *rl_rules_new(size_t n);
/* Takes and drops a reference; the last unref frees the list and its rules. NULL is ok. */
void rl_rules_ref(rl_rules *rs);
void rl_rules_unref(rl_rules *rs);

/* ---- configuration -------------------------------------------------------------------- */

/* The rules of a keyed level for one key, or NULL when none apply to it. The list must stay
 * valid as long as the limiter; *ref receives a reference to drop with rl_rules_unref when
 * the list is counted (NULL otherwise). Called from any thread, also by stores (to expire,
 * settle or sweep a key's state), so it must be fast, must not block, and must give the same
 * rules for the same key for the limiter's life. */
typedef const rl_rules *(*rl_key_rules_fn)(void *ctx, const char *key, size_t keylen,
                                           rl_rules **ref);

typedef struct rl_level {
    char *name;
    size_t ncompose;    /* 0: the key is the descriptor of the level's name */
    char **compose;     /* descriptors joined with ':' to form the key */
    char *default_key;  /* used when the descriptor is absent; NULL: the level is skipped */
    int tiered;         /* rules come from the key's tier or custom quota */
    int shadow;         /* every rule of the level is a shadow rule (see rl_rule.shadow) */
    rl_rules *rules;    /* the rules of a level that is neither tiered nor keyed */
    rl_key_rules_fn key_rules; /* a keyed level: the rules follow from the key */
    void *key_rules_ctx;
} rl_level;

/* 1 when level l's key is made from the descriptor named (name, n): its own name, or one of
 * those it composes. */
int rl_level_reads(const rl_level *l, const char *name, size_t n);

typedef struct rl_tier {
    char *name;
    rl_rules *rules;
} rl_tier;

/* A quota: either a tier (rules == NULL) or a custom list of rules. */
typedef struct rl_quota {
    size_t tier;     /* index in tiers, when rules is NULL */
    rl_rules *rules; /* a custom list, or NULL */
} rl_quota;

/* A model's prices: dollars per million units of each dimension, in rl_fp (6 decimals). */
typedef struct rl_price {
    char *model;
    rl_fp per_million[RL_MAX_DIMS];
} rl_price;

typedef struct rl_config {
    rl_registry *reg; /* borrowed: must outlive the configuration */
    size_t ndims;
    char *dims[RL_MAX_DIMS]; /* the dimensions' names */
    char *price_by;          /* the descriptor naming a request's model; NULL: no prices */
    size_t nprices;
    rl_price *prices;
    size_t nlevels;
    rl_level levels[RL_MAX_LEVELS];
    size_t ntiers;
    rl_tier *tiers;
    size_t default_tier;
    rl_ns reservation_ttl;
    size_t nquotas; /* initial quotas of the tiered level */
    char **quota_keys;
    rl_quota *quotas;
} rl_config;

/* An empty configuration over reg (reservation TTL 300 s). NULL when out of memory. */
rl_config *rl_config_new(rl_registry *reg);
/* Frees the configuration and all it owns. NULL is ok. */
void rl_config_free(rl_config *cfg);
/* Adds a level. name and each compose entry are descriptor names (1..64 bytes of letters,
 * digits, '_', '-', '.'); default_key may be NULL. rules is NULL for a tiered level and is
 * stolen otherwise (also on failure). Errors name the problem ("name: duplicate level"). */
int rl_config_add_level(rl_config *cfg, const char *name, const char *const *compose,
                        size_t ncompose, const char *default_key, int tiered, rl_rules *rules,
                        rl_err *err);
/* Adds a keyed level: the rules that apply to a key are fn(ctx, key) (see rl_key_rules_fn),
 * for keys that the caller makes itself (a configuration of its own, such as a tree of
 * descriptors, encoded in the key). Requests name its keys as items (rl_request.items) or as
 * the descriptor of the level's name. Errors as rl_config_add_level. */
int rl_config_add_keyed_level(rl_config *cfg, const char *name, rl_key_rules_fn fn, void *ctx,
                              rl_err *err);
/* Declares a dimension (1..64 bytes of letters, digits, '_', '-', '.'; not "cost",
 * "requests" or "usd"; at most RL_MAX_DIMS). Add dimensions before rules that count them. */
int rl_config_add_dimension(rl_config *cfg, const char *name, rl_err *err);
/* The index of the named dimension, or -1. */
long rl_config_dimension(const rl_config *cfg, const char *name, size_t len);
/* Names the descriptor whose value selects a request's prices (once). */
int rl_config_set_price_by(rl_config *cfg, const char *descriptor, rl_err *err);
/* Adds a model's prices (per_million[k] for dimension k, 0..RL_PRICE_MAX each). */
#define RL_PRICE_MAX ((rl_fp)1000000 * RL_FP_ONE) /* a million dollars per million units */
int rl_config_add_price(rl_config *cfg, const char *model, const rl_fp *per_million,
                        rl_err *err);
/* The prices of the model named (value, len), or NULL. */
const rl_price *rl_config_price(const rl_config *cfg, const char *model, size_t len);
/* The dollars of usage u at prices p, in the units of a rule counting dollars (nano-dollars):
 * sum of u.v[k] x p.per_million[k] over the given dimensions, rounded up once. RL_FP_MAX at
 * most (a larger sum is clamped there). */
rl_fp rl_usage_usd(const rl_usage *u, const rl_price *p);

/* Adds a tier; rules is stolen (also on failure). */
int rl_config_add_tier(rl_config *cfg, const char *name, rl_rules *rules, rl_err *err);
/* Index of the named tier, or -1. */
long rl_config_tier(const rl_config *cfg, const char *name);
/* Adds an initial quota for key on the tiered level: a tier name, or rules (stolen). */
int rl_config_add_quota(rl_config *cfg, const char *key, const char *tier, rl_rules *rules,
                        rl_err *err);
/* Final checks across the whole configuration: at least one level, at most one tiered level,
 * tiers present when a level is tiered, default tier set. default_tier may be NULL when there
 * are no tiers, or names the default. */
int rl_config_finish(rl_config *cfg, const char *default_tier, rl_err *err);
/* The index of the tiered level, or -1. */
long rl_config_tiered_level(const rl_config *cfg);

/* ---- decisions ------------------------------------------------------------------------ */

typedef struct rl_descriptor {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} rl_descriptor;

#define RL_DRY_RUN 0x1u /* phase 1 only: nothing is taken */
#define RL_RESERVE 0x2u /* record the take as a reservation to settle later */

/* A key of a level named explicitly, with its own cost: several items may name one level. */
typedef struct rl_item {
    size_t level;
    const char *key;
    size_t keylen; /* 1..RL_COMPOSED_MAX bytes, any bytes */
    rl_fp cost;    /* 0..RL_FP_MAX; 0 checks the rules without taking anything from them */
} rl_item;

typedef struct rl_request {
    const rl_descriptor *desc;
    size_t ndesc;
    /* When nitems > 0 the request is these items instead of desc and cost: each applies the
     * rules of its level to its key with its own cost (a rule counting requests counts 1,
     * or 0 for an item of cost 0). The decision is still one: every item fits or nothing is
     * taken anywhere. Not with RL_RESERVE. */
    const rl_item *items;
    size_t nitems;
    rl_fp cost;       /* > 0 (unless items are given) */
    /* NULL, or the usage that rules counting a dimension take, and that prices turn into
     * dollars (the model: the descriptor rl_config.price_by names). Not with items. */
    const rl_usage *usage;
    int64_t priority; /* compared with a rule's reserved.min_priority */
    unsigned flags;
    rl_ns now;
} rl_request;

/* How a store that could not reach its shared state stood in for a rule (rl_applied.fallback). */
typedef enum rl_fallback {
    RL_FALLBACK_NONE = 0, /* the store decided */
    RL_FALLBACK_OPEN,     /* allowed without the store */
    RL_FALLBACK_CLOSED,   /* denied because the store was unavailable */
    RL_FALLBACK_LOCAL     /* decided in process with a share of the rule's quota */
} rl_fallback;

/* One rule that a decision applied. */
typedef struct rl_applied {
    uint16_t level;
    uint16_t slot;     /* index of the rule in its list */
    const rl_rule *rule;
    const char *key;   /* not NUL-terminated; points into the request's descriptor values, the
                          configuration (a default key) or the decision's buffer (a composed
                          key): valid while both the request and the decision are */
    uint32_t keylen;
    int has_status;    /* the rule reports a status (a deny list does not): read it with
                          rl_decision_status */
    uint8_t fallback;  /* rl_fallback: RL_FALLBACK_NONE unless the store failed */
    uint8_t shadow;    /* a shadow rule here (its own option or its level's): never denies */
    uint8_t shadow_denied; /* shadow and the cost did not fit it: it would have denied, and
                              took nothing */
    uint8_t charge;    /* a charge rule here (see rl_rule.charge) */
    uint8_t status_lazy; /* the store's (ratelimit_store.h): status holds ev, not st yet */
    rl_ns wait;        /* phase 1's answer (for shadow and charge rules too, which may not
                          count towards retry_after) */
    /* The rule's status after the decision. Never read here: rl_decision_status works it out
     * on the first read from what the store left (ev, while status_lazy) and keeps it (st). */
    union {
        rl_rule_status st;
        rl_eval ev;
    } status;
} rl_applied;

typedef struct rl_decision {
    int allowed;
    rl_ns retry_after; /* 0 when allowed; RL_WAIT_NEVER when the cost can never fit */
    int blocked;       /* index in applied of the blocking rule, -1 when allowed */
    char reservation[RL_RESERVATION_ID]; /* "" when no reservation was made */
    rl_ns now; /* the request's time, which statuses are reported at */
    size_t napplied;
    rl_applied applied[RL_MAX_APPLIED];
    rl_rules *held; /* reference kept on a custom rule list until rl_decision_done */
    int has_amt;     /* the request carried usage: amt holds its amounts */
    rl_fp amt[RL_UNITS]; /* by unit: dollars (nano-dollars) and each dimension; 0 and 1 unused */
    size_t keyused;
    char keybuf[RL_DECISION_KEYS]; /* composed keys */
} rl_decision;

/* The status of d->applied[i] after the decision (limit, remaining, reset_after, window,
 * next), or NULL when that rule reports none (has_status == 0) or i >= d->napplied. A store
 * that decides in process leaves each rule's evaluation in the decision: the first read
 * works the status out from it (the rule type's report) and keeps it in d, so a caller that
 * reads no status pays nothing for it and a second read gives the same status. That first
 * read writes d (the pointer is const so that readers of a decision can stay so): read one
 * decision from one thread at a time, and before rl_decision_done. Whether a request is
 * allowed, retry_after and the blocking rule never wait for this: they are set by
 * rl_acquire. */
const rl_rule_status *rl_decision_status(const rl_decision *d, size_t i);

/* Drops what a decision holds. Call once after reading a decision filled by rl_acquire. */
void rl_decision_done(rl_decision *d);

/* What a reservation is settled with: its actual cost (when has_cost; else the reserved
 * cost stands) and its actual usage in the dimensions given (the others stand as reserved).
 * Dollars are worked out again from the usage that results, at the prices the reservation
 * was made with. */
typedef struct rl_actual {
    int has_cost;
    rl_fp cost;      /* 0..RL_FP_MAX */
    rl_usage usage;  /* 0..RL_FP_MAX each */
} rl_actual;

/* One unit's amounts in a settlement. */
typedef struct rl_settled {
    rl_fp reserved, actual;
    rl_fp refunded; /* given back (reserved - actual when positive) */
    rl_fp charged;  /* taken extra (actual - reserved when positive) */
} rl_settled;

/* The outcome of settling a reservation. */
typedef struct rl_settlement {
    rl_fp reserved; /* the cost the reservation took */
    rl_fp actual;
    rl_fp refunded; /* given back (reserved - actual when positive) */
    rl_fp charged;  /* taken extra (actual - reserved when positive) */
    uint32_t units; /* bit u: unit[u] holds (dollars and dimensions the reservation counted) */
    rl_settled unit[RL_UNITS];
} rl_settlement;

typedef struct rl_limiter rl_limiter;
typedef struct rl_store rl_store;

/* Creates a limiter over cfg (stolen, also on failure, after rl_config_finish) with the given
 * store (stolen; NULL: a new in-memory store). Initial quotas of the configuration are set. */
int rl_limiter_new(rl_config *cfg, rl_store *store, rl_limiter **out, rl_err *err);
/* Creates a limiter over cfg (stolen, also on failure) that takes over from's store: the store
 * is attached again, to cfg (its attach called a second time; a store whose state lives
 * elsewhere, as Redis's does, keeps it), and from gives it up, so that freeing from leaves it
 * alone; from must not decide anything afterwards. On failure nothing is taken: the store is
 * attached back to from's configuration and from goes on as before. Call it with no decision,
 * tick or settlement in flight on from. */
int rl_limiter_new_over(rl_config *cfg, rl_limiter *from, rl_limiter **out, rl_err *err);
/* Frees the limiter, its store (unless another limiter took it over) and its configuration.
 * NULL is ok. */
void rl_limiter_free(rl_limiter *lim);
/* The configuration in force (borrowed). */
const rl_config *rl_limiter_config(const rl_limiter *lim);

/* Decides a request. On success (RL_OK) d is filled, allowed or denied, and must be passed to
 * rl_decision_done. Errors, which change no state: RL_EINVAL for a bad request ("keys.usr:
 * unknown descriptor", "keys.user: must not be empty"), RL_ESTORE when the store failed.
 * Amounts and times are the caller's to convert and check where they enter (the daemon does
 * it once per edge, service/app/values.h): cost in 1..RL_FP_MAX, now >= 0. A cost out of range is
 * still refused with RL_EINVAL, as a guard that keeps the arithmetic inside int64, not as the
 * place where users learn the range. */
int rl_acquire(rl_limiter *lim, const rl_request *req, rl_decision *d, rl_err *err);
/* One request of rl_acquire_many and what came of it: rc is what rl_acquire returns for req
 * into d (done with rl_decision_done as from rl_acquire), with its error in err. */
typedef struct rl_acquisition {
    const rl_request *req;
    rl_decision *d;
    rl_err *err;
    int rc;
} rl_acquisition;
/* Decides n requests as rl_acquire decides each, as if one after the other. With a store that
 * waits for a round trip per decision (Redis) the requests share round trips instead of
 * making one each. */
void rl_acquire_many(rl_limiter *lim, rl_acquisition *a, size_t n);

/* Settles a reservation with its actual cost (0..RL_FP_MAX, checked by the caller as the cost
 * of rl_acquire is; out of range is refused by the same guard): gives the difference back to
 * every rule counting cost, or charges the extra. RL_ENOTFOUND for an unknown or expired
 * reservation, RL_ESETTLED when it was settled already. */
int rl_settle(rl_limiter *lim, const char *id, rl_fp actual, rl_ns now, rl_settlement *out,
              rl_err *err);
/* Settles a reservation with its actual cost and usage (rl_actual): each rule counting cost,
 * dollars or a dimension is given back its reserved amount less the actual one, or charged
 * the extra; outcome (may be NULL) as for rl_settle_outcome. Errors as rl_settle. */
int rl_settle_usage(rl_limiter *lim, const char *id, const rl_actual *actual, rl_ns now,
                    const rl_outcome *outcome, rl_settlement *out, rl_err *err);
/* Releases what a reservation holds (concurrency slots) and ends it; an unsettled one is
 * settled at its reserved cost. RL_ENOTFOUND when unknown, expired or released. */
int rl_release(rl_limiter *lim, const char *id, rl_ns now, rl_err *err);
/* rl_settle and rl_release that also say how the call went (outcome may be NULL: as without
 * one; an outcome of kind RL_OUTCOME_NONE with latency -1 says nothing either). Each rule
 * holding slots for the reservation whose type learns from outcomes (release_outcome) learns
 * from it; a settlement leaves the slots held. Give a call's outcome once, with its settlement
 * or its release. RL_EINVAL for a kind or latency out of range ("outcome: ...",
 * "latency_ms: ..."). A reservation that expires unreleased is a timeout to those rules. */
int rl_settle_outcome(rl_limiter *lim, const char *id, rl_fp actual, rl_ns now,
                      const rl_outcome *outcome, rl_settlement *out, rl_err *err);
int rl_release_outcome(rl_limiter *lim, const char *id, rl_ns now, const rl_outcome *outcome,
                       rl_err *err);

/* Housekeeping to call now and then (for example ten times a second), from one thread at a
 * time (decisions may run meanwhile): expires reservations whose TTL has passed, releasing
 * their slots, and drops idle per-key state. */
void rl_limiter_tick(rl_limiter *lim, rl_ns now);

/* Saves the store's per-key state and reservations to path, so that a restart loses nothing:
 * written to path.tmp, flushed to disk and renamed, so a crash keeps the previous snapshot.
 * A store that keeps its state elsewhere (Redis) saves nothing and returns RL_OK. RL_EIO with
 * the reason in err when the file cannot be written. */
int rl_limiter_save(rl_limiter *lim, const char *path, rl_err *err);
/* Loads a snapshot made by rl_limiter_save into a limiter that has not decided anything yet
 * (quotas set first, so that keys find their tiers). Levels and rule types are matched by
 * name; state whose level, position or rule type no longer matches, or that is idle at now,
 * and reservations expired at now are skipped. A missing file loads nothing. *loaded (may be
 * NULL) counts the key states and reservations loaded. RL_EIO for an unreadable or malformed
 * file (nothing is loaded from it then). */
int rl_limiter_load(rl_limiter *lim, const char *path, rl_ns now, size_t *loaded, rl_err *err);

/* Forgets what key (keylen bytes) of level has used: every rule's state there starts afresh, as
 * for a key never seen (slots held by live reservations are forgotten too: their release gives
 * back nothing). *cleared (may be NULL) counts the states dropped. RL_EINVAL for a bad level or
 * key, or a store that cannot reset; RL_ESTORE when the store failed. */
int rl_limiter_reset(rl_limiter *lim, size_t level, const char *key, size_t keylen,
                     size_t *cleared, rl_err *err);

/* Per-level key state records held by the store. */
size_t rl_limiter_keys(rl_limiter *lim, size_t level);

typedef struct rl_stats {
    uint64_t reservations_active;
    uint64_t reservations_expired;
    uint64_t key_states;     /* key states held, counted against key_states_max */
    uint64_t key_states_max; /* the store's bound on them (max_keys); 0: no bound */
} rl_stats;
void rl_limiter_stats(rl_limiter *lim, rl_stats *out);

/* ---- quotas of the tiered level -------------------------------------------------------- */

/* Puts key in a tier (by name), or gives it a custom rule list (rules, one reference stolen,
 * also on failure). Exactly one of tier and rules is non-NULL. What the key has used is kept
 * where the rule type at a position stays the same. RL_EINVAL for an unknown tier, a bad key
 * or when no level is tiered. */
int rl_quota_set(rl_limiter *lim, const char *key, const char *tier, rl_rules *rules,
                 rl_err *err);
/* Returns key to the default tier. Returns 1 when it had a quota, 0 when not. */
int rl_quota_clear(rl_limiter *lim, const char *key);
/* Reads key's quota: *tier is the tier's name (NULL for a custom list) and *rules the rules
 * in force, with a reference the caller drops with rl_rules_unref. */
int rl_quota_get(rl_limiter *lim, const char *key, const char **tier, rl_rules **rules);
/* Calls fn for every key with a quota (under a lock: fn must not call back into quotas). */
void rl_quota_foreach(rl_limiter *lim,
                      void (*fn)(void *ctx, const char *key, const char *tier,
                                 const rl_rules *rules),
                      void *ctx);

/* ---- conversions ---------------------------------------------------------------------- */

/* Seconds to nanoseconds, rounded to nearest; -1 when not finite, negative or too large. */
rl_ns rl_ns_from_seconds(double s);
/* An amount to fixed point, rounded to nearest; -1 when not finite, negative or too large. */
rl_fp rl_fp_from_double(double v);
/* Back to doubles for output. */
double rl_fp_to_double(rl_fp v);
double rl_ns_to_seconds(rl_ns v);

#ifdef __cplusplus
}
#endif
#endif
