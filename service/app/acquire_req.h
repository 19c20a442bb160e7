/*
 * acquire_req.h - the body of POST /acquire, parsed once.
 *
 *   {"keys": {"user": "u1", "team": "acme"}, "cost": 1, "priority": 0, "reserve": false,
 *    "dry_run": false, "now": 0.0, "usage": {"input_tokens": 1200}}
 *
 * Two parsers give the same result: a hand-written one for the common shape (ASCII text
 * without escapes, no duplicate members), which allocates nothing and points into the body,
 * and jansson for everything else, which also writes the error messages. The fast one never
 * rejects: when anything is unusual (a value out of range too) it steps aside and jansson
 * decides. Both convert cost and now into the core's units with the helpers of values.h, so
 * a bad value has one message and nothing further in converts or checks them again.
 */
#ifndef RLD_APP_ACQUIRE_REQ_H
#define RLD_APP_ACQUIRE_REQ_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ratelimit.h"

/* Most descriptors one request may carry. */
#define RLD_MAX_KEYS 64

typedef struct rld_acquire_req {
    size_t ndesc;
    rl_descriptor desc[RLD_MAX_KEYS]; /* into the body, or into root's strings */
    int has_keys;
    rl_fp cost; /* RL_FP_ONE unless given; checked (values.h) */
    int64_t priority;
    int reserve;
    int dry_run;
    int has_now;
    rl_ns now; /* when has_now; checked (values.h) */
    const json_t *usage; /* "usage" (an object, borrowed from root; read by usage.h), or NULL */
    json_t *root; /* the document when jansson parsed it (new reference), else NULL */
} rld_acquire_req;

/* Parses and checks a body of len bytes; body[len] must be writable and is set to NUL. On
 * success returns 0 and fills req, which borrows from body and must be passed to
 * rld_acquire_req_clear. On failure returns -1 with a message naming the field in err
 * ("cost: must be a positive number ..."); req needs no clearing. Keys are required; cost and
 * now are in range (values.h). Whether now is allowed at all is the caller's. */
int rld_acquire_parse(char *body, size_t len, rld_acquire_req *req, rl_err *err);
/* Drops the jansson document, if any. */
void rld_acquire_req_clear(rld_acquire_req *req);

/* The two parsers, for tests. The fast one returns 1 when it parsed body (req filled, root
 * NULL) and 0 when it steps aside (req undefined). The jansson one returns 0 or -1 with err;
 * on success req->root holds the document. Both convert cost and now; neither requires keys. */
int rld__acquire_parse_fast(const char *body, size_t len, rld_acquire_req *req);
int rld__acquire_parse_json(const char *body, size_t len, rld_acquire_req *req, rl_err *err);

#endif
