/*
 * rls_yaml_grpc.h - the YAML configuration's matcher behind ShouldRateLimit: the protobuf
 * request in, the protobuf response out (rls.h's rld_rls_decide_fn); and the configuration in
 * force as a part of the app (app/parts.h), which reloads swap and rld_yrls_apply sets.
 */
#ifndef RLD_GRPC_RLS_YAML_GRPC_H
#define RLD_GRPC_RLS_YAML_GRPC_H

#include "app/app.h"
#include "app/parts.h"
#include "rls.h"
#include "rls_yaml.h"

/* The rld_rls failed hook for a YAML configuration: counts the call's error in
 * ratelimit_service_should_rate_limit_error (cls: the rld_yrls). */
void rld_yrls_failed(void *cls, rld_grpc_code code);

/* Decides req with the matcher rls->cls (an rld_yrls) over rls->lim: one status per request
 * descriptor in order, overall_code, and response_headers_to_add with the IETF RateLimit and
 * RateLimit-Policy headers when rls->ratelimit_headers is set, and envoyproxy/ratelimit's
 * three headers of the descriptor nearest its limit when the matcher has them
 * (rld_yrls_upstream_headers). Errors: INVALID_ARGUMENT naming the field, UNAVAILABLE when the
 * store failed, RESOURCE_EXHAUSTED when the arena is full. */
rld_grpc_code rld_yrls_decide_rls(const rld_rls *rls, const rld_rls_request *req, rl_ns now,
                                  rld_rls_response *resp, rld_arena *a, rl_err *err);

/* ---- the YAML configuration in force, and its reloads --------------------------------------- */

/* The daemon's YAML configuration: the matcher in force (swapped by a reload under the app's
 * gate), the one a reload has made and not yet put in force, and the JSON text whose levels
 * are decided beside the YAML's limits. */
typedef struct rld_yservice rld_yservice;

/* Turns a JSON configuration's text into the finished configuration of its levels, as loaded at
 * start (*base NULL when it has none beside ratelimit_config); on failure nothing is returned
 * and err says why. main.c gives config/config.h's parser. */
typedef int (*rld_ybase_fn)(const char *json, size_t len, rl_registry *reg, rl_config **base,
                            rl_err *err);

/* Makes the service over y (stolen, also on failure), the matcher of the configuration the
 * limiter starts with (rld_yrls_new_beside, or rld_yrls_new_empty when the YAML configuration
 * comes later), with its options set (headers, shadow mode, EXTRA_TAGS: every matcher put in
 * force after it inherits them). json (len bytes, copied; NULL: none) is the text of the JSON
 * configuration whose levels y was built beside, which parse turns into those levels again for
 * each rld_yrls_apply. NULL when out of memory. */
rld_yservice *rld_yservice_new(rld_yrls *y, rl_registry *reg, const char *json, size_t len,
                               rld_ybase_fn parse);
/* Frees the service and its matchers, after the limiter. NULL is ok. */
void rld_yservice_free(rld_yservice *s);
/* The matcher in force (read holding the app's gate, or before serving). */
rld_yrls *rld_yservice_matcher(const rld_yservice *s);
/* For a reload of the configuration file (rld_app_load_fn, called by the app one reload at a
 * time): hands over y (stolen, also on failure), the matcher of the configuration just loaded,
 * built beside the levels of json (len bytes, copied; NULL: none), to be put in force with the
 * limiter of that configuration. It inherits the options of the one in force. RL_ENOMEM. */
int rld_yservice_stage(rld_yservice *s, rld_yrls *y, const char *json, size_t len, rl_err *err);

/* The rld_rls failed hook with the matcher in force of the service cls (rld_yrls_failed). */
void rld_yservice_failed(void *cls, rld_grpc_code code);
/* ShouldRateLimit as rld_yrls_decide_rls decides it, with the matcher in force of the service
 * rls->cls; called holding the app's gate, as every ShouldRateLimit is. */
rld_grpc_code rld_yservice_decide_rls(const rld_rls *rls, const rld_rls_request *req, rl_ns now,
                                      rld_rls_response *resp, rld_arena *a, rl_err *err);

/* Puts the YAML configuration c (stolen, also on failure) in force, as a reload does: every
 * step that can fail happens before the swap (the matcher, the limiter over a new memory
 * store, the JSON levels beside it as loaded at start or at the last reload of the file), the
 * swap happens under the app's gate with the state carried over (a limit of the same domain,
 * descriptor path and rule type keeps its count, under its new numbers), the matcher's
 * statistics follow (rld_yrls_carry_counts), ratelimit_service_config_load_success or _error
 * is counted, and the outcome is logged naming origin (e.g. "xDS version 3"). On failure the
 * configuration in force stays and err says why (naming the domain's file and the YAML path as
 * the file loader does; RL_EINVAL when the Redis store cannot hold the configuration, and
 * when app has no YAML service attached; over the Redis store the counts stay in Redis).
 * Thread-safe: may be called from any thread while requests are served (one reload at a time;
 * not from a request holding the gate). */
int rld_yrls_apply(rld_app *app, rld_yconf *c, const char *origin, rl_err *err);
/* Counts a configuration refused before it could be given to rld_yrls_apply (a pushed one that
 * does not read) in ratelimit_service_config_load_error. Any thread. */
void rld_yrls_count_refused(rld_app *app);

/* The service (self an rld_yservice) as a part of the app: a reload puts in force the matcher
 * staged with its limiter, carrying the statistics over, and counts the outcome in
 * ratelimit_service_config_load_success or _error; /metrics gets the matcher's families
 * (rld_yrls_metrics). */
extern const rld_part_ops rld_yrls_part_ops;

#endif
