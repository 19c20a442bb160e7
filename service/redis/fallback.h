/*
 * fallback.h - a store decorator that decides per level when the store it wraps cannot
 * answer (RL_ESTORE from decide: Redis down or too slow).
 *
 * Each level has a mode (rld_on_error, from the level's "on_store_error"):
 *   open    its rules allow (wait 0, no status), rl_applied.fallback = RL_FALLBACK_OPEN;
 *   closed  its rules deny with retry_after closed_retry and no status (RL_FALLBACK_CLOSED), so
 *           that blocked_by can name the store;
 *   local   an in-process memory store decides it with the level's rules divided by the fleet
 *           size (every amount and rate parameter / N, N = fleet_size when set, else the live
 *           instances the wrapped store last counted, at least 1), so that the fleet as a whole
 *           still admits no more than the limit (RL_FALLBACK_LOCAL).
 * The decision stays two-phase across levels: when a closed level denies, the local levels are
 * only asked (nothing taken). A reservation made while falling back lives in the local store;
 * settle and release look there first, then in the wrapped store.
 *
 * Counters per (level, mode) say how often each level fell back.
 */
#ifndef RLD_REDIS_FALLBACK_H
#define RLD_REDIS_FALLBACK_H

#include <stdint.h>

#include "app/settings.h"
#include "ratelimit.h"
#include "ratelimit_store.h"

typedef struct rld_fallback_options {
    rld_on_error mode[RL_MAX_LEVELS]; /* per level index */
    rl_ns closed_retry;               /* retry_after of a closed level; 0: 1 s */
    unsigned fleet_size;              /* 0: ask peers */
    /* Live instances as last counted (0: unknown, taken as 1). May be NULL. */
    unsigned (*peers)(void *ctx);
    void *peers_ctx;
} rld_fallback_options;

/* Wraps inner (stolen, also on failure). Returns RL_OK or RL_ENOMEM. */
int rld_fallback_store_new(rl_store *inner, const rld_fallback_options *opt, rl_store **out,
                           rl_err *err);

/* How many decisions level fell back with mode (a store made by rld_fallback_store_new). */
uint64_t rld_fallback_count(rl_store *st, size_t level, rld_on_error mode);
/* The fleet size the local mode divides by now. */
unsigned rld_fallback_fleet(rl_store *st);

#endif
