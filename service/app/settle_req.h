/*
 * settle_req.h - the bodies of POST /refund and POST /release, parsed once.
 *
 *   {"reservation": "r-...", "actual_cost": 9, "now": 0.0}     (/refund)
 *   {"reservation": "r-...", "actual_usage": {"output_tokens": 900}}
 *   {"reservation": "r-...", "now": 0.0}                       (/release)
 *
 * Both also take how the call went: "latency_ms" (0 to 3600000) and "outcome" ("ok",
 * "error", "timeout" or "dropped"), for the rules that learn from it.
 */
#ifndef RLD_APP_SETTLE_REQ_H
#define RLD_APP_SETTLE_REQ_H

#include <jansson.h>
#include <stddef.h>

#include "ratelimit.h"

typedef struct rld_settle_req {
    json_t *root;            /* the document (new reference); NULL after a failure */
    const char *reservation; /* borrowed from root */
    int has_actual;
    rl_fp actual; /* from 0 to RL_FP_MAX, checked (values.h) */
    const json_t *actual_usage; /* an object borrowed from root (read by usage.h), or NULL */
    int has_now;
    rl_ns now; /* checked (values.h) */
    rl_outcome outcome; /* {RL_OUTCOME_NONE, -1} when the body says nothing of it */
} rld_settle_req;

/* Parses and checks a body of len bytes; with_actual: the /refund body (actual_cost or
 * actual_usage required),
 * else /release's. On success returns 0 and fills out (free with rld_settle_req_clear). On
 * failure returns -1 with a message naming the field in err ("actual_cost: must be ...") and
 * out needs no clearing. Whether now is allowed at all is the caller's. */
int rld_settle_parse(const char *body, size_t len, int with_actual, rld_settle_req *out,
                     rl_err *err);
/* Drops the document; NULL-safe on a cleared or failed request. */
void rld_settle_req_clear(rld_settle_req *b);

#endif
