/*
 * check_req.h - the request of GET /check, read from its headers, for gateways whose
 * sub-request has no body (nginx's auth_request):
 *
 *   X-RateLimit-User: alice        one header per descriptor: X-RateLimit-<name>
 *   X-RateLimit-Team: acme
 *   X-RateLimit-Cost: 3            optional, 1 by default
 *   X-RateLimit-Priority: 2        optional, 0 by default
 *   X-RateLimit-Usage-Input-Tokens: 1200   optional: the usage in a declared dimension
 *
 * The part after "X-RateLimit-" names a descriptor of the configuration, compared without
 * regard to case and with '-' standing for '_' too (X-RateLimit-Api-Key is api_key), since
 * header names are case-insensitive and nginx drops client headers with underscores. Cost
 * and Priority are always the cost and the priority. Values are converted here, once; errors
 * name the header.
 */
#ifndef RLD_HTTP_CHECK_REQ_H
#define RLD_HTTP_CHECK_REQ_H

#include <stddef.h>
#include <stdint.h>

#include "app/acquire_req.h"
#include "ratelimit.h"

#define RLD_CHECK_PREFIX "X-RateLimit-"

typedef struct rld_check_req {
    size_t ndesc;
    rl_descriptor desc[RLD_MAX_KEYS]; /* names into the configuration (or the header when
                                         no descriptor matches), values into the headers */
    int has_cost, has_priority;
    rl_fp cost; /* RL_FP_ONE unless given */
    int64_t priority;
    rl_usage usage; /* given: none unless X-RateLimit-Usage-<dimension> headers came */
} rld_check_req;

/* An empty request: no descriptors, cost 1, priority 0. */
void rld_check_req_init(rld_check_req *q);
/* Takes one request header into q (it borrows name and value). Headers without the prefix
 * are ignored. Returns 0, or -1 with err naming the header ("X-RateLimit-Cost: must be a
 * positive number ..."), q then unusable. A name that matches no descriptor of cfg is kept
 * as written, for rl_acquire to refuse with the descriptors the levels use. */
int rld_check_header(rld_check_req *q, const rl_config *cfg, const char *name, size_t nl,
                     const char *value, size_t vl, rl_err *err);
/* The deny_status query argument: NULL gives 429; otherwise a status from 400 to 499 (403 for
 * auth_request, which turns any other 4xx into a 500). Returns 0 or -1 with err. */
int rld_check_deny_status(const char *arg, int *status, rl_err *err);
/* Rewrites the core's message about a descriptor ("keys.usr: unknown descriptor ...") to name
 * its header ("X-RateLimit-usr: unknown descriptor ..."); other messages are left alone. */
void rld_check_error_to_header(rl_err *err);

#endif
