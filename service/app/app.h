/*
 * app.h - the application every protocol serves: the limiter and the state around it (the
 * clock, the quotas, the metrics, the configuration text of GET /rules), its lifecycle (start,
 * housekeeping, snapshots, reload, stop) and what a request asks of it beyond the core.
 *
 * It knows no protocol and no store. main.c attaches them: a shared store (parts.h's
 * rld_app_store, the Redis fleet) when the limiter runs on one, and parts (parts.h's
 * rld_part_ops: the gRPC service, the YAML matcher) that a reload reaches through one table.
 * The HTTP endpoints (http/http.h's rld_routes) and the gRPC methods (grpc/grpc_api.h) are
 * thin layers over it: parse, call the core or the app, answer.
 */
#ifndef RLD_APP_H
#define RLD_APP_H

#include <pthread.h>

#include "alerts.h"
#include "buf.h"
#include "metrics.h"
#include "parts.h"
#include "quotas.h"
#include "ratelimit.h"
#include "settings.h"

/* Reads a configuration file into *set and *cfg, as config/config.h's rld_config_load does:
 * on success the caller owns both; on failure nothing is returned and err says why. cls is
 * rld_app_config's load_cls. A reload calls it holding no gate, one reload at a time: what it
 * makes beside the configuration (a part's matcher) it hands to the part it is for, which puts
 * it in force when told of the new limiter (parts.h's reload) and drops what is not in force
 * when told that the reload ended (reload_end). */
typedef int (*rld_app_load_fn)(void *cls, const char *path, rl_registry *reg, rld_settings *set,
                               rl_config **cfg, rl_err *err);

/* Makes the limiter configuration a reload puts in force (rld_app_reload_with): on success
 * *cfg is a finished configuration the caller owns, and *max_keys (the bound of the new memory
 * store, on entry the one in force; 0: none) may be changed; on failure nothing is returned and
 * err says why. Called as rld_app_load_fn is. */
typedef struct rld_app rld_app;
typedef int (*rld_app_make_fn)(void *cls, rld_app *app, rl_config **cfg, uint64_t *max_keys,
                               rl_err *err);

/* The most endpoints the metrics count by name (an unknown path is one more, "other"). */
#define RLD_APP_MAX_ENDPOINTS 15

/* What rld_app_init builds the app from; everything is borrowed and outlives the app. */
typedef struct rld_app_config {
    rl_registry *reg;
    rl_limiter *lim;
    const rld_settings *set;
    rl_ns (*clock)(void);        /* the real clock; NULL: the manual clock ("now" in requests) */
    const rld_app_store *store;  /* the fleet's store; NULL: none (the memory store) */
    const char *const *endpoints; /* the metrics labels of the HTTP routes, by route index */
    size_t nendpoints;            /* at most RLD_APP_MAX_ENDPOINTS */
    const char *config_path;      /* what a reload reads; NULL: the built-in configuration */
    rld_app_load_fn load;         /* reads config_path; NULL: reloads are refused */
    void *load_cls;               /* load's first argument */
} rld_app_config;

struct rld_app {
    rl_registry *reg;        /* borrowed */
    rl_limiter *lim;         /* borrowed */
    const rld_settings *set; /* borrowed */
    rl_ns (*clock)(void);    /* the real clock; NULL with the manual clock */
    int manual_clock;        /* time comes from "now" in bodies (clock is NULL) */
    rl_ns manual_now;        /* atomic: the last "now" seen */
    rl_ns ticked;            /* atomic, written under tick_mu: the latest time ticked */
    pthread_mutex_t tick_mu; /* rl_limiter_tick is called by one thread at a time */
    rld_metrics *metrics;
    rld_alerts *alerts;      /* the rules' alerts (set by main.c before serving); NULL: none */
    rld_quotas quotas;       /* the quota file (without a store) */
    rld_app_store store;     /* store.ops NULL: no shared store */
    char *rules_json;        /* GET /rules, fixed for the configuration's life */
    size_t rules_len;
    /* Requests hold it for reading (every protocol), a reload for writing: a request sees the
     * configuration before a reload or after it, never a mix. */
    pthread_rwlock_t gate;
    const char *config_path;
    rld_app_load_fn load;
    void *load_cls;
    pthread_mutex_t reload_mu; /* one reload at a time, whoever asks for it */
    uint64_t max_keys;         /* the bound of the memory store in force (0: none) */
    rld_part parts[RLD_APP_MAX_PARTS];
    size_t nparts;
    const char *endpoints[RLD_APP_MAX_ENDPOINTS + 1]; /* the metrics labels, "other" last */
};

/* Sets up the app from c: metrics, the cached configuration, the quota file (read and applied
 * now) and the state file's snapshot (loaded now; one that cannot be read is moved aside to
 * <state_file>.corrupt, logged, and the service starts without it). With a store neither file
 * is used: the store keeps the quotas and the state, and /quota, /healthz and /metrics go
 * through it. clock is the real clock (ns since the epoch), which only main.c reads. On
 * failure returns an error with err set and app needs no freeing. */
int rld_app_init(rld_app *app, const rld_app_config *c, rl_err *err);
/* Attaches a part (ops and self borrowed, both outliving the app) to be told of reloads and
 * stops and asked for metrics, in the order attached. RL_EFULL past RLD_APP_MAX_PARTS. Before
 * serving: the list is read without a lock. */
int rld_app_attach(rld_app *app, const rld_part_ops *ops, void *self);
/* First tells every part to read its own files again (refresh: the gRPC port's certificates),
 * whatever comes of the rest. Then reads config_path again and puts its limiter configuration
 * in force (levels, tiers, quotas, reservation_ttl, max_keys; the other settings wait for a
 * restart): a new limiter over a new memory store, the quota file applied to it, and the state
 * carried over as a snapshot would carry it (matched by level name, rule position and type),
 * swapped in while no request is in flight, and every part told. With a shared store (Redis)
 * the new limiter takes the same store over instead (the state stays in it), once the store
 * said it can hold the configuration (check_config); the store in force cannot change. On
 * failure (a bad file, a store, a part that cannot follow) the configuration in force stays,
 * err says why, and it is logged; both outcomes are counted.
 * Not from a request holding the gate. */
int rld_app_reload(rld_app *app, rl_err *err);
/* The same from the configuration make builds (called with cls) instead of config_path, without
 * refresh: everything that can fail happens before the swap, the state is carried over under
 * the gate (or the shared store taken over), every part told (reload, then reload_end),
 * counted and logged naming origin ("configuration reloaded from <origin>"; "reload of
 * <origin> refused ..."). Thread-safe: reloads wait for each other.
 * Not from a request holding the gate. */
int rld_app_reload_with(rld_app *app, rld_app_make_fn make, void *cls, const char *origin,
                        rl_err *err);
/* Tells every part that the daemon is stopping. */
void rld_app_stopping(rld_app *app);
/* Frees what rld_app_init made (not the limiter, registry, settings, store or parts; app->lim
 * may be another limiter than the one given after a reload: the caller frees app->lim). */
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
/* The HTTP layer's on_done: counts the request of route (nendpoints: an unknown path) in the
 * metrics. */
void rld_app_on_done(void *app, size_t route, int status, rl_ns duration);

/* ---- what requests ask of the app ------------------------------------------------------ */

/* Sets user's quota from a PUT /quota body: through the store when one is attached, else in
 * the limiter and the quota file (quotas.h). RL_EINVAL naming the field, RL_ESTORE or RL_EIO
 * when it cannot be kept; nothing changes then. Called holding the gate for reading. */
int rld_app_quota_put(rld_app *app, const char *user, const char *body, size_t len,
                      rl_err *err);
/* Returns user to the default tier (DELETE /quota), the same way. */
int rld_app_quota_delete(rld_app *app, const char *user, rl_err *err);
/* Appends the /healthz body of the store and returns 1 while it answers, 0 while the levels
 * run on their fallbacks; -1 with nothing appended when no store is attached. */
int rld_app_store_health(rld_app *app, rld_buf *out);
/* Appends every metric family in the Prometheus text format: the app's, the store's and each
 * part's. */
void rld_app_metrics(rld_app *app, rld_buf *out);

#endif
