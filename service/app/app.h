/*
 * app.h - the endpoints of ratelimitd (the route table and its handlers) and the state they
 * share: the limiter, the clock, the quotas and the metrics.
 *
 *   POST /acquire   decide a request                 POST /refund   settle a reservation
 *   POST /release   give back a reservation's slots  GET  /rules    the configuration
 *   GET|PUT|DELETE /quota/<user>  a user's quota     GET  /metrics  Prometheus text
 *   GET  /healthz   readiness                        GET  /check    /acquire from headers
 *
 * api/openapi.yaml is the contract; the handlers stay thin: parse, call the core, answer.
 */
#ifndef RLD_API_H
#define RLD_API_H

#include <pthread.h>

#include "config/config.h"
#include "redis/redis.h"
#include "http/http.h"
#include "metrics.h"
#include "quotas.h"
#include "ratelimit.h"
#include "grpc/rls.h"

typedef struct rld_app {
    rl_registry *reg;        /* borrowed */
    rl_limiter *lim;         /* borrowed */
    const rld_settings *set; /* borrowed */
    rl_ns (*clock)(void);    /* the real clock; NULL with the manual clock */
    int manual_clock;        /* time comes from "now" in bodies (clock is NULL) */
    rl_ns manual_now;        /* atomic: the last "now" seen */
    rl_ns ticked;            /* atomic, written under tick_mu: the latest time ticked */
    pthread_mutex_t tick_mu; /* rl_limiter_tick is called by one thread at a time */
    rld_metrics *metrics;
    rld_quotas quotas;       /* the quota file (memory store) */
    rld_fleet *fleet;        /* borrowed; NULL with the memory store */
    char *rules_json; /* GET /rules, fixed for the configuration's life */
    size_t rules_len;
    rld_http *http; /* set once serving */
    /* Requests hold it for reading (rld_http_config.gate), a reload for writing: a request
     * sees the configuration before a reload or after it, never a mix. */
    pthread_rwlock_t gate;
    const char *config_path; /* what a reload reads; NULL: the built-in configuration */
    rld_rls rls;    /* ShouldRateLimit over gRPC */
    int grpc_stopping; /* atomic: the gRPC server is stopping (Health answers NOT_SERVING) */
    struct rld_yrls *yrls; /* borrowed: the YAML configuration's matcher, NULL without one */
} rld_app;

/* The route table, for rld_http_config and for tests that hold the OpenAPI document to it. */
extern const rld_route rld_routes[];
extern const size_t rld_nroutes;

/* Sets up the app over a limiter: metrics, the cached configuration, the quota file (read
 * and applied now) and the state file's snapshot (loaded now; one that cannot be read is
 * moved aside to <state_file>.corrupt, logged, and the service starts without it). With a
 * fleet (the Redis store; NULL for the memory store) neither file is used: Redis keeps the
 * quotas and the state, and /quota, /healthz and /metrics go through the fleet. clock is the
 * real clock (ns since the epoch), which only main.c reads; NULL runs on the manual clock
 * ("now" in requests). On failure returns an error with err set and app needs no freeing. */
int rld_app_init(rld_app *app, rl_registry *reg, rl_limiter *lim, const rld_settings *set,
                 rld_fleet *fleet, rl_ns (*clock)(void), rl_err *err);
/* Reads config_path again and puts its limiter configuration in force (levels, tiers, quotas,
 * reservation_ttl, max_keys; the other settings wait for a restart): a new limiter over a new
 * memory store, the quota file applied to it, and the state carried over as a snapshot would
 * carry it (matched by level name, rule position and type), swapped in while no request is in
 * flight. On failure (a bad file, the Redis store) the configuration in force stays, err says
 * why, and it is logged; both outcomes are counted. Not from a request holding the gate. */
int rld_app_reload(rld_app *app, rl_err *err);
/* Frees what rld_app_init made (not the limiter, registry or settings; app->lim may be another
 * limiter than the one given after a reload: the caller frees app->lim). */
void rld_app_free(rld_app *app);
/* Housekeeping, about ten times a second: rl_limiter_tick at the current time (the last
 * "now" seen with the manual clock). */
void rld_app_tick(rld_app *app);
/* Saves a snapshot to state_file when the settings name one; logs and returns -1 when it
 * cannot be written. */
int rld_app_save_state(rld_app *app);
/* The time of a request: the clock, or with --manual-clock the given time (has_now; checked
 * where it was read, values.h) or the last time seen. A manual time that moves forward ticks
 * the limiter first. */
rl_ns rld_app_time(rld_app *app, int has_now, rl_ns now);
/* The http layer's on_done: counts the request in the metrics. */
void rld_app_on_done(void *app, size_t route, int status, rl_ns duration);

#endif
