/*
 * ratelimit_rule.h - the interface a rule type implements (built in or loaded as a plug-in).
 *
 * A rule type is a name, a table of its parameters and a struct of functions. The limiter core
 * calls only through this table; it never names a concrete rule type. A plug-in is a shared
 * object that exports
 *
 *     int rl_plugin_init(rl_registry *reg, unsigned api_version);
 *
 * and calls rl_register_rule_type() for each type it provides. It returns 0, or a negative
 * value to refuse loading (for example when api_version is not one it was written for).
 *
 * Units. Time is integer nanoseconds (rl_ns). Amounts of tokens, requests or slots are fixed
 * point with six decimals (rl_fp, RL_FP_ONE == 1.0). Rates are rl_fp per second. All rule
 * functions take the time as an argument and must be exact: a request that fits on paper fits.
 *
 * State. Each (rule, key) pair has state_size bytes of state. All-zero bytes mean "a key never
 * seen": a full bucket, an empty window. The store keeps states of at most RL_STATE_INLINE bytes
 * inside its records; larger ones are allocated by the store (zeroed) and freed after
 * state_free. A rule never sees a state whose type differs from its own.
 *
 * One evaluation per decision (version 2). For every (rule, key) of a decision the store calls
 * evaluate once: it brings the key's state to now (into the type's own evaluation, eval_size
 * bytes the store provides) and answers the wait for the cost. When the decision takes, commit
 * takes the cost from what evaluate computed (no second refill) and writes the state; report
 * fills the status from the evaluation (as committed), once, when the status is first read
 * (rl_decision_status): a decision whose statuses nobody reads reports nothing. A decision is
 *
 *     wait = evaluate(params, state, key, keylen, now, need, ev);    for every rule
 *     commit(params, state, ev, cost);                 if every wait is 0 (and not a dry run)
 *     report(params, ev, now, &status);                for every status read
 *
 * Version 1 types (wait, take and status, each bringing the state to now by itself) still
 * load: the registry wraps them, so every registered type answers through version 2.
 *
 * Backward time. A "now" earlier than the key's last update must not add or remove anything by
 * the passage of time and must keep the last-update time; rules clamp now to it.
 */
#ifndef RATELIMIT_RULE_H
#define RATELIMIT_RULE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this interface; a plug-in is handed the version the host implements. A type
 * declares the version it was written against in api_version: 1 (wait, take, status), 2
 * (evaluate, commit, report, and the Redis port), 3 (state_valid), 4 (per_unit), 5
 * (release_outcome), 6 (the Redis port's computed arguments, rl_rule_redis.args) or 7
 * (period). */
#define RL_RULE_API_VERSION 7

typedef int64_t rl_ns; /* nanoseconds */
typedef int64_t rl_fp; /* fixed point amount, RL_FP_ONE units per token/request/slot */

#define RL_FP_ONE ((rl_fp)1000000)
#define RL_NS_PER_SEC ((rl_ns)1000000000)
/* A wait that never ends: the cost can never fit this rule. */
#define RL_WAIT_NEVER INT64_MAX
/* Largest amount accepted anywhere (10^12 tokens), so that sums of two never overflow. */
#define RL_FP_MAX ((rl_fp)1000000000000 * RL_FP_ONE)
/* Bytes of per-key state a store keeps inline; larger states are allocated separately. */
#define RL_STATE_INLINE 24
/* Largest state a rule type may declare. */
#define RL_STATE_MAX 4096
/* Largest evaluation a rule type may declare (eval_size). */
#define RL_EVAL_MAX 48

typedef struct rl_registry rl_registry;

/* How a call that held slots went, as its release (or settlement) tells it: a type whose limit
 * moves learns from it (release_outcome); every other type ignores it. */
typedef enum rl_outcome_kind {
    RL_OUTCOME_NONE = 0, /* not said: only the slots change */
    RL_OUTCOME_OK,
    RL_OUTCOME_ERROR,
    RL_OUTCOME_TIMEOUT, /* also a reservation that expired before it was released */
    RL_OUTCOME_DROPPED
} rl_outcome_kind;

typedef struct rl_outcome {
    rl_outcome_kind kind;
    rl_ns latency; /* the call's latency, 0..RL_OUTCOME_LATENCY_MAX; -1 when not said */
} rl_outcome;

/* Longest latency an outcome may state: one hour. */
#define RL_OUTCOME_LATENCY_MAX ((rl_ns)3600 * 1000000000)

/* Kinds of parameter. The loader converts and bounds-checks the value and stores it at
 * offset in the rule's parameter struct with the C type given here. */
typedef enum rl_param_kind {
    RL_PARAM_AMOUNT,   /* rl_fp: tokens, requests or slots; bounds in whole units */
    RL_PARAM_RATE,     /* rl_fp per second; bounds in units per second */
    RL_PARAM_DURATION, /* rl_ns; given in seconds; bounds in seconds */
    RL_PARAM_INT,      /* int64_t; must be a whole number */
    RL_PARAM_STRINGS   /* rl_strings; a list of non-empty strings */
} rl_param_kind;

/* A list of strings owned by the rule; sorted byte-wise and without duplicates once loaded,
 * so rl_strings_find() can search it. */
typedef struct rl_strings {
    size_t n;
    char **v;
    size_t *len;
} rl_strings;

/* One row of a rule type's parameter table. A parameter with required == 0 takes def when
 * absent. min and max are inclusive bounds in the user's units (for RL_PARAM_STRINGS they
 * bound the number of strings). */
typedef struct rl_param_def {
    const char *name;
    rl_param_kind kind;
    size_t offset;
    double min;
    double max;
    double def;
    int required;
    const char *help;
} rl_param_def;

/* What a rule reports about a key after a decision, for responses and headers: filled by the
 * type's report (version 2). */
typedef struct rl_rule_status {
    rl_fp limit;       /* the rule's quota (capacity, limit, slots) */
    rl_fp remaining;   /* what is left now; may be negative after a charge */
    rl_ns reset_after; /* until the rule is back to full (0 when it is full) */
    rl_ns window;      /* the policy window: window length, or time to refill from empty */
    rl_ns next;        /* the wait for rl_status_want(limit, remaining) (0 when full) */
} rl_rule_status;

/* The amount whose wait a status reports as next: one whole unit more than remains (whole
 * units of remaining, 0 when negative, plus one), at most the limit. Only meaningful while
 * remaining < limit (next is 0 otherwise). */
static inline rl_fp rl_status_want(rl_fp limit, rl_fp remaining)
{
    rl_fp whole = remaining > 0 ? remaining / RL_FP_ONE * RL_FP_ONE : 0;
    return whole + RL_FP_ONE < limit ? whole + RL_FP_ONE : limit;
}

/* Storage a store provides for one evaluation: RL_EVAL_MAX bytes, aligned for any of the
 * type's own fields (integers, pointers). A type reads and writes it as its own struct. */
typedef union rl_eval {
    int64_t w[RL_EVAL_MAX / 8];
    void *p;
    long double ld;
} rl_eval;

/* What the Redis store needs to keep a rule type's state in Redis: its port, a Lua file that
 * registers the type under tag in the store's scripts (docs/redis.md, "A rule type's Redis
 * port"), and the parameters the store sends it. A type without state needs none: the store
 * decides it in C. */
typedef struct rl_rule_redis {
    const char *tag;           /* the port's name in the scripts: [a-z0-9_], unique */
    const char *const *params; /* the parameters sent to the port, by name, in order; each of a
                                * kind held in 64 bits (not RL_PARAM_STRINGS) */
    size_t nparams;
    unsigned layout; /* the version of the state's binary layout in Redis, as the port says */
    const char *lua; /* a plug-in's port, its Lua text; NULL for the built-in types, whose ports
                      * are built into the store (service/core/rules/<type>.lua) */
    /* ---- read only from a type that declares version 6 or later ---- */
    /* Values the port needs that follow from the parameters and the time (a period's bounds
     * in a time zone, which only the C side can read): args writes nargs (at most
     * RL_REDIS_ARGS_MAX) integers for the time now, which the store sends after the parameters
     * on every call; the port names them after its params. nargs 0 and args NULL: none. */
    size_t nargs;
    size_t (*args)(const void *params, rl_ns now, int64_t *out);
} rl_rule_redis;

/* Most computed arguments a Redis port may take (rl_rule_redis.nargs). */
#define RL_REDIS_ARGS_MAX 8

/* How a rule type takes a limit stated as n per unit of time (envoyproxy/ratelimit's
 * requests_per_unit and unit, in its YAML configuration, whose algorithm names the type): the
 * parameters that get n, the unit's length and n per unit as a rate. A type without it cannot
 * be given such a limit.
 *
 *     {.amount = "limit", .window = "window"}  10 per minute -> limit 10, window 60
 *     {.amount = "capacity", .rate = "per_second"}          -> capacity 10, per_second 1/6 */
typedef struct rl_rule_per_unit {
    const char *amount; /* gets n: one of the type's RL_PARAM_AMOUNT parameters */
    const char *window; /* gets the unit in seconds (RL_PARAM_DURATION); NULL: none */
    const char *rate;   /* gets n per unit, per second (RL_PARAM_RATE); NULL: none */
    /* 1 when the windows start at every multiple of the unit since time 0, as
     * envoyproxy/ratelimit counts: a limit's reset is then the end of the window of now, and
     * the first such type registered is what a limit without an algorithm is counted by. */
    int aligned;
} rl_rule_per_unit;

/* Flags of a rule type. */
#define RL_RULE_UNIT_REQUESTS 0x1u /* default unit is "requests" (one per request) */
#define RL_RULE_HOLDS 0x2u         /* a take holds something until release (concurrency) */
/* The evaluation points into the state (a type whose state holds pointers): the store calls
 * report while it still holds the key, before anyone else can change the state. Without it,
 * report may run after the store let go of the key, on the evaluation alone, later (when the
 * status is read) and on a copy of its bytes: an evaluation must not point into itself. */
#define RL_RULE_EVAL_IN_STATE 0x4u
/* The rule's limit moves (it is kept in the state), so a reserved share cannot be an amount
 * fixed at load: the rule is asked for whole units (it counts requests; a rule of this type
 * with unit "cost" is refused) plus fraction * RL_FP_ONE when the request's priority does not
 * reach the share, and takes the fractional part of what it is asked to check as the share of
 * its current limit to keep free. capacity is not called for the share. */
#define RL_RULE_RESERVE_FRACTION 0x8u
/* The type counts in periods that start afresh whole (a calendar period, a fixed window): once
 * a key has counted anything in a period, its status's reset_after runs to the period's end
 * and window is the period's length. A rule's "alerts" are for such types only. */
#define RL_RULE_PERIODIC 0x10u
/* A take is an amount from one balance that can be handed out ahead in slices (a token bucket,
 * a fixed window): a slice taken from the state up front and spent by the requests it admits
 * counts exactly as those requests would have, and what is left of it can be given back with
 * refund. A level may be leased (redis.md, "Hot keys: leases") only with such types. */
#define RL_RULE_LEASABLE 0x20u

typedef struct rl_rule_type {
    unsigned api_version; /* RL_RULE_API_VERSION the type was written against */
    const char *name;     /* unique: "token_bucket" */
    const rl_param_def *params;
    size_t nparams;
    size_t params_size; /* size of the parameter struct, zeroed before loading */
    size_t state_size;  /* bytes of per-key state, 0 for stateless rules (at most RL_STATE_MAX) */
    unsigned flags;

    /* Checks across parameters and precomputes; err gets a message naming the parameter.
     * Returns 0 or -1. May be NULL. */
    int (*prepare)(void *params, char *err, size_t errlen);
    /* Frees what prepare allocated (not the rl_strings, which the loader frees). May be NULL. */
    void (*params_free)(void *params);
    /* Writes a readable default name such as "token_bucket(100, 10/s)". */
    void (*default_name)(const void *params, char *buf, size_t len);
    /* The quota that a "reserved" fraction is taken of; NULL when the rule has none. */
    rl_fp (*capacity)(const void *params);

    /* Version 1 only (api_version 1; the registry adapts them, so the host never calls them):
     * wait: how long from now until cost fits (0 fits now, RL_WAIT_NEVER never), rounding up,
     * without changing state; take: takes cost (wait returned 0 for it), NULL for stateless
     * rules; status: the first four fields of st for the state at now, NULL for none. */
    rl_ns (*wait)(const void *params, const void *state, const char *key, size_t keylen,
                  rl_ns now, rl_fp cost);
    void (*take)(const void *params, void *state, rl_ns now, rl_fp cost);
    /* Settles an earlier take made at taken_at: amount > 0 gives amount back, amount < 0
     * charges -amount more (a bucket may go below zero). NULL when settling does not apply. */
    void (*refund)(const void *params, void *state, rl_ns now, rl_ns taken_at, rl_fp amount);
    /* Gives back amount held by an earlier take (RL_RULE_HOLDS). NULL otherwise. */
    void (*release)(const void *params, void *state, rl_ns now, rl_fp amount);
    /* The time from which the state behaves exactly like a new key and can be dropped;
     * RL_WAIT_NEVER while it holds something. NULL when never idle. */
    rl_ns (*idle_at)(const void *params, const void *state);
    void (*status)(const void *params, const void *state, rl_ns now, rl_rule_status *st);
    /* Frees what the rule allocated inside a state. May be NULL. */
    void (*state_free)(const void *params, void *state);

    /* Snapshots (kept across restarts). A state without pointers (state_free NULL) is saved
     * as its bytes and these may be NULL. A state with pointers needs both: state_save writes
     * it into buf when it fits in len and returns the bytes it needs either way; state_load
     * rebuilds a zeroed state from such bytes and returns 0, or -1 when they are malformed. */
    size_t (*state_save)(const void *params, const void *state, void *buf, size_t len);
    int (*state_load)(const void *params, void *state, const void *buf, size_t len);

    /* ---- version 2 (after every version 1 member, so that a version 1 type's struct is a
     * prefix of this one) ---- */

    size_t eval_size; /* bytes of the type's evaluation in ev (at most RL_EVAL_MAX) */
    /* Brings state to now once into ev and returns how long from now until cost fits: 0 when
     * it fits now, RL_WAIT_NEVER when it never can; rounds up, so at now + wait the same cost
     * fits. Must not change state. ev holds whatever commit and report need afterwards. */
    rl_ns (*evaluate)(const void *params, const void *state, const char *key, size_t keylen,
                      rl_ns now, rl_fp cost, rl_eval *ev);
    /* Takes cost from the state evaluate brought to now, whatever the wait was (a charge may
     * go below zero: a negative balance that later requests wait out), writes it to state
     * and updates ev to match, for report. state is the one evaluate read, or a zero state
     * just created for a key evaluated as new. NULL for stateless rules. */
    void (*commit)(const void *params, void *state, rl_eval *ev, rl_fp cost);
    /* Fills every field of st, next included, from ev after the decision (committed or not).
     * now is the time evaluate was given. NULL for rules that report nothing (a deny list). */
    void (*report)(const void *params, const rl_eval *ev, rl_ns now, rl_rule_status *st);

    /* The Redis port (version 2); NULL when the type has none (a type with state then cannot be
     * used with the Redis store). */
    const rl_rule_redis *redis;

    /* ---- version 3 (the host reads it only from a type that declares 3 or later) ---- */

    /* Whether a state read from a snapshot (bytes, or what state_load rebuilt) holds the
     * type's invariants: amounts and times within the bounds its own arithmetic keeps them
     * in, so that evaluating it cannot overflow. Returns 1 or 0; a 0 refuses the whole
     * snapshot as damaged. It need not check the state against the rule's limit (a state
     * above a shrunk limit is valid, and the store drops it alone). NULL: no check. */
    int (*state_valid)(const void *params, const void *state);

    /* ---- version 4 (read only from a type that declares 4 or later) ---- */

    /* How the type takes a limit of n per unit; NULL when it takes none. */
    const rl_rule_per_unit *per_unit;

    /* ---- version 5 (read only from a type that declares 5 or later) ---- */

    /* In place of release for a type that learns from its calls (RL_RULE_HOLDS): gives back
     * amount held by an earlier take made at taken_at (amount 0 when a settlement reports the
     * outcome and the slots stay held) and learns from o when o is not NULL and o->kind is not
     * RL_OUTCOME_NONE. NULL: release is called and the outcome ignored. */
    void (*release_outcome)(const void *params, void *state, rl_ns now, rl_ns taken_at,
                            rl_fp amount, const rl_outcome *o);

    /* ---- version 7 (read only from a type that declares 7 or later) ---- */

    /* For a type counting in periods (RL_RULE_PERIODIC): the period holding now, [*start,
     * *end) in ns, as a key first counted at now would count in it. NULL: none is shown. */
    void (*period)(const void *params, rl_ns now, rl_ns *start, rl_ns *end);
} rl_rule_type;

/* Adds a rule type to the registry. The type struct must outlive the registry. Returns 0, or
 * -1 when the name (or the Redis port's tag) is taken, the registry is full, the API version is
 * newer than the host's or the type is malformed (a Redis port naming a parameter the type does
 * not have, or one of RL_PARAM_STRINGS, or a tag not of [a-z0-9_], 1 to 32 characters; a
 * per_unit naming a parameter the type does not have, or one of another kind). */
int rl_register_rule_type(rl_registry *reg, const rl_rule_type *type);

/* The type's per_unit when it declares version 4 or later and has one, else NULL. */
const rl_rule_per_unit *rl_rule_type_per_unit(const rl_rule_type *type);
/* type's period (version 7), or NULL when it has none or declares an earlier version. */
void (*rl_rule_type_period(const rl_rule_type *type))(const void *, rl_ns, rl_ns *, rl_ns *);

/* Looks key up in a loaded string list. Returns 1 when present, 0 otherwise. */
int rl_strings_find(const rl_strings *s, const char *key, size_t keylen);

/* Helpers for rule arithmetic and names, shared by built-in and plug-in rule types. */

/* Writes an amount as a short decimal ("10", "0.5"). */
void rl_fmt_fp(char *buf, size_t len, rl_fp v);
/* Writes a duration in seconds as a short decimal ("10", "0.25"). */
void rl_fmt_ns(char *buf, size_t len, rl_ns v);

/* Type of a plug-in's entry point. */
typedef int (*rl_plugin_init_fn)(rl_registry *reg, unsigned api_version);

#ifdef __cplusplus
}
#endif
#endif
