/*
 * grpc_api.h - the gRPC methods of ratelimitd, over the same app (app/app.h) as the HTTP API:
 *
 *   /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit   rls.h decides
 *   /grpc.health.v1.Health/Check   SERVING; NOT_SERVING while stopping, or while the store is
 *                                  unreachable and a level fails closed
 *
 * With --manual-clock a call's time is its "ratelimitd-now" metadata (seconds), as "now" is
 * in the HTTP bodies.
 */
#ifndef RLD_GRPC_GRPC_API_H
#define RLD_GRPC_GRPC_API_H

#include "app/app.h"
#include "grpc.h"

/* The gRPC service of an app: what its methods get as their app (rld_grpc_config.app). */
typedef struct rld_grpc_api {
    rld_app *app; /* borrowed */
    rld_rls rls;  /* ShouldRateLimit over app->lim; a matcher may set rls.decide and rls.cls */
    int stopping; /* atomic: the daemon is stopping (Health answers NOT_SERVING) */
} rld_grpc_api;

/* Sets api up over app, before serving: rls with the native mapping (its domain and headers
 * from app's settings, its decisions counted in app's metrics), the methods named in app's
 * metrics, and api attached to app as a part (a reload switches rls.lim, a stop sets
 * stopping). RL_EFULL (with err) when app holds no more parts; api is then unused. */
int rld_grpc_api_init(rld_grpc_api *api, rld_app *app, rl_err *err);

/* The method table for rld_grpc_config (its app is an rld_grpc_api). */
extern const rld_grpc_method rld_grpc_methods[];
extern const size_t rld_grpc_nmethods;
/* Counts a call in the app's metrics (rld_grpc_config.observe; its app an rld_grpc_api). */
void rld_grpc_observe(void *api, int method, rld_grpc_code code, rl_ns duration);

#endif
