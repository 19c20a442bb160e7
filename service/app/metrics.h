/*
 * metrics.h - counters of the service and their Prometheus text exposition (format 0.0.4).
 *
 * Hot counters live in per-thread slots (no shared cache line between worker threads) and are
 * summed when /metrics is scraped. Labels are bounded: endpoints come from the route table,
 * levels and rule names from the configuration (custom quota rules beyond a cap are counted
 * as rule="other"); never a user or key.
 */
#ifndef RLD_APP_METRICS_H
#define RLD_APP_METRICS_H

#include <stddef.h>

#include "buf.h"
#include "ratelimit.h"

typedef struct rld_metrics rld_metrics;

/* New metrics for nendpoints endpoints named by names (borrowed, must outlive the metrics).
 * NULL when out of memory. */
rld_metrics *rld_metrics_new(size_t nendpoints, const char *const *names);
/* Frees the metrics. NULL is ok. */
void rld_metrics_free(rld_metrics *m);

/* One HTTP request of endpoint (an index below nendpoints) answered with status code after
 * duration nanoseconds. */
void rld_metrics_http(rld_metrics *m, size_t endpoint, int code, rl_ns duration);
/* Names the gRPC methods (paths "/package.Service/Method", borrowed, at most 8): their calls
 * are counted from then on, and the families exported. -1 when there are too many. */
int rld_metrics_grpc_methods(rld_metrics *m, size_t n, const char *const *paths);
/* One gRPC call of method (an index of those named, -1 for an unknown one) answered with
 * status code after duration nanoseconds. Nothing when no method is named. */
void rld_metrics_grpc(rld_metrics *m, int method, int code, rl_ns duration);
/* One decision of POST /acquire. cost is counted when the request took it (allowed, not a
 * dry run); a denial is counted against the level and rule that blocked it, and every shadow
 * rule that did not fit (rl_applied.shadow_denied) against its own level and rule. */
void rld_metrics_decision(rld_metrics *m, const rl_decision *d, int dry_run, rl_fp cost);
/* One settled reservation. */
void rld_metrics_settle(rld_metrics *m, const rl_settlement *s);

/* A decision refused because the memory store holds max_keys key states, none idle. */
void rld_metrics_keys_refused(rld_metrics *m);
/* A reload replaced the configuration from by to: the counts by level and rule follow their
 * levels by name (those of a level to does not have are dropped). While nothing counts. */
void rld_metrics_levels_changed(rld_metrics *m, const rl_config *from, const rl_config *to);
/* A configuration reload, ok or refused. */
void rld_metrics_reload(rld_metrics *m, int ok);
/* A state file found corrupt or truncated at start (and moved aside). */
void rld_metrics_snapshot_corrupt(rld_metrics *m);

/* Appends the exposition of every family to out; lim gives keys per level and reservations. */
void rld_metrics_render(rld_metrics *m, rl_limiter *lim, rld_buf *out);

#endif
