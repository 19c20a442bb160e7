/*
 * grpc_api.h - the gRPC methods of ratelimitd, over the same limiter as the HTTP API:
 *
 *   /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit   rls.h decides
 *   /grpc.health.v1.Health/Check   SERVING; NOT_SERVING while stopping, or while the store is
 *                                  unreachable and a level fails closed
 *
 * With --manual-clock a call's time is its "ratelimitd-now" metadata (seconds), as "now" is
 * in the HTTP bodies.
 */
#ifndef RLD_GRPC_API_H
#define RLD_GRPC_API_H

#include "app/app.h"
#include "grpc.h"

/* The method table for rld_grpc_config (its app is an rld_app). */
extern const rld_grpc_method rld_grpc_methods[];
extern const size_t rld_grpc_nmethods;
/* Counts a call in the app's metrics (rld_grpc_config.observe). */
void rld_grpc_observe(void *app, int method, rld_grpc_code code, rl_ns duration);
/* Names the methods in the app's metrics, so that their calls are counted. */
void rld_grpc_metrics_init(rld_app *app);

#endif
