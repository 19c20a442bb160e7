/*
 * rls_yaml_grpc.h - the YAML configuration's matcher behind ShouldRateLimit: the protobuf
 * request in, the protobuf response out (rls.h's rld_rls_decide_fn); and the matcher as a part
 * of the app (app/parts.h).
 */
#ifndef RLD_GRPC_RLS_YAML_GRPC_H
#define RLD_GRPC_RLS_YAML_GRPC_H

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

/* The matcher (self an rld_yrls) as a part of the app: a reload is refused (a YAML
 * configuration is applied at the next start), and /metrics gets its families
 * (rld_yrls_metrics). */
extern const rld_part_ops rld_yrls_part_ops;

#endif
