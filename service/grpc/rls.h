/*
 * rls.h - Envoy's rate limit service (envoy.service.ratelimit.v3 ShouldRateLimit) over the
 * limiter: an RLS request in, an RLS response out, with no socket in between.
 *
 * With a native configuration a request is one decision of the limiter: every entry of every
 * descriptor is a descriptor name and its value (levels that read no entry of the request are
 * skipped, entries no level reads are ignored), so a request is allowed only if every level
 * has room, and a denied request takes nothing anywhere:
 *
 *   domain "edge", descriptors [{user: alice}, {user: alice, path: /x}]
 *     -> rl_acquire(keys {user: alice, path: /x}, cost hits_addend or 1)
 *     -> statuses[i]: the tightest rule among the levels that read descriptor i's entries
 *
 * A matcher (rld_rls.decide, for example the YAML configuration's) decides instead of the
 * native mapping when set. Messages are the protobuf-c types generated from the .proto files under
 * api/.
 */
#ifndef RLD_GRPC_RLS_H
#define RLD_GRPC_RLS_H

#include <stddef.h>
#include <stdint.h>

#include "app/buf.h"
#include "app/alerts.h"
#include "app/metrics.h"
#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "ratelimit.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest rld_rls_request;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rld_rls_response;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus rld_rls_status;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor rld_rls_descriptor;

/* gRPC status codes (grpc/doc/statuscodes.md): X(name, value). */
#define RLD_GRPC_CODES(X)                                                                          \
    X(OK, 0)                                                                                       \
    X(CANCELLED, 1)                                                                                \
    X(UNKNOWN, 2)                                                                                  \
    X(INVALID_ARGUMENT, 3)                                                                         \
    X(DEADLINE_EXCEEDED, 4)                                                                        \
    X(NOT_FOUND, 5)                                                                                \
    X(RESOURCE_EXHAUSTED, 8)                                                                       \
    X(FAILED_PRECONDITION, 9)                                                                      \
    X(UNIMPLEMENTED, 12)                                                                           \
    X(INTERNAL, 13)                                                                                \
    X(UNAVAILABLE, 14)                                                                             \
    X(UNAUTHENTICATED, 16)

typedef enum rld_grpc_code {
#define RLD__GRPC_ENUM(name, value) RLD_GRPC_##name = value,
    RLD_GRPC_CODES(RLD__GRPC_ENUM)
#undef RLD__GRPC_ENUM
} rld_grpc_code;

/* The gRPC status of a failed core call: RL_EINVAL is INVALID_ARGUMENT, RL_ESTORE UNAVAILABLE,
 * anything else INTERNAL. */
rld_grpc_code rld_grpc_code_of(int rl_rc);

/* ---- memory for one call ---------------------------------------------------------------- */

/* Everything of one call (the unpacked request, the response being built) comes from an arena
 * and goes at once with rld_arena_reset. The first block is inline, so a typical call
 * allocates nothing. */
typedef struct rld_arena_block rld_arena_block;
typedef struct rld_arena {
    size_t used;
    rld_arena_block *more; /* blocks beyond the inline one, newest first */
    size_t more_used;      /* used of the newest block */
    size_t more_cap;
    size_t total; /* bytes handed out, checked against limit */
    size_t limit; /* 0: no limit */
    _Alignas(16) unsigned char inl[8192];
} rld_arena;

/* Starts an empty arena; limit caps the bytes it hands out (0: no cap). */
void rld_arena_init(rld_arena *a, size_t limit);
/* n bytes aligned to 16, or NULL when out of memory or past the limit. Freed by reset. */
void *rld_arena_alloc(rld_arena *a, size_t n);
/* Frees everything allocated and empties the arena for the next call. */
void rld_arena_reset(rld_arena *a);

/* ---- the decision ------------------------------------------------------------------------- */

typedef struct rld_rls rld_rls;

/* Decides req at now into resp (zeroed by the caller with its init function, arrays from a).
 * Returns RLD_GRPC_OK, or another code with the reason in err (which names the field). */
typedef rld_grpc_code (*rld_rls_decide_fn)(const rld_rls *rls, const rld_rls_request *req,
                                           rl_ns now, rld_rls_response *resp, rld_arena *a,
                                           rl_err *err);

struct rld_rls {
    rl_limiter *lim;          /* borrowed */
    const char *domain;       /* the native configuration's "domain"; NULL: any domain */
    int ratelimit_headers;    /* add the IETF RateLimit and RateLimit-Policy headers */
    const char *hits_dim;     /* native: hits_addend is the usage in this dimension; NULL: cost */
    rld_metrics *metrics;     /* counts the decisions; may be NULL */
    rld_alerts *alerts;       /* notes the rules' alerts; may be NULL */
    rld_rls_decide_fn decide; /* NULL: the native mapping (rld_rls_decide_native) */
    void *cls;                /* the matcher's own state */
    /* told of every call answered with an error (after the check or the decision), with
     * cls; may be NULL */
    void (*failed)(void *cls, rld_grpc_code code);
};

/* Checks the parts of a request every configuration needs: a domain, at least one descriptor,
 * at least one entry each, every key non-empty. INVALID_ARGUMENT with err otherwise
 * ("descriptors[1].entries: at least one entry required"). */
rld_grpc_code rld_rls_check(const rld_rls_request *req, rl_err *err);

/* The native mapping (see the top of this file). A request for another domain than the
 * configuration's is answered OK with no limit and counts nothing, as envoyproxy/ratelimit
 * answers an unknown domain. The request's hits_addend (0 means 1) is the cost; a descriptor's
 * own hits_addend replaces it, and 0 there decides without counting (a dry run asking whether
 * one more hit fits). All descriptors must come to the same cost (one decision has one cost):
 * INVALID_ARGUMENT otherwise. The descriptors' "limit" override is not applied. */
rld_grpc_code rld_rls_decide_native(const rld_rls *rls, const rld_rls_request *req, rl_ns now,
                                    rld_rls_response *resp, rld_arena *a, rl_err *err);

/* ShouldRateLimit: checks req (rld_rls_check) and decides it with rls->decide or the native
 * mapping. */
rld_grpc_code rld_rls_should_rate_limit(const rld_rls *rls, const rld_rls_request *req, rl_ns now,
                                        rld_rls_response *resp, rld_arena *a, rl_err *err);

/* The whole request path without a socket: unpacks len bytes of msg (a serialized
 * RateLimitRequest) into a, decides it at now and appends the serialized RateLimitResponse to
 * out. INVALID_ARGUMENT when msg does not parse ("message: not a RateLimitRequest"),
 * RESOURCE_EXHAUSTED when unpacking needs more than the arena's limit, else as
 * rld_rls_should_rate_limit. a is reset by the caller afterwards. */
rld_grpc_code rld_rls_call(const rld_rls *rls, const uint8_t *msg, size_t len, rl_ns now,
                           rld_arena *a, rld_buf *out, rl_err *err);

/* ---- pieces of a response, for matchers ------------------------------------------------- */

/* Fills st (already initialised) from a rule's status after a decision: current_limit with
 * the rule's name and, where its window is a whole number of one of the protocol's units,
 * requests_per_unit and unit; limit_remaining (whole units, 0 when negative);
 * duration_until_reset. NULL on out of memory. */
int rld_rls_status_from_rule(rld_rls_status *st, const rl_rule *rule, const rl_rule_status *rs,
                             rld_arena *a);
/* Copies n bytes into the arena as a NUL-terminated string; NULL when out of memory. */
char *rld_arena_strndup(rld_arena *a, const char *s, size_t n);

#endif
