/*
 * render.h - the answer to POST /acquire, written with a fixed format (no JSON tree): the body
 * and the IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers, structured-field
 * form), one list member per applied rule that reports a status, named "<level>.<rule name>":
 *
 *   RateLimit-Policy: "user.free";q=20;w=2, "global.global";q=100000;w=2
 *   RateLimit: "user.free";r=19;t=1, "global.global";r=99999;t=1
 *
 * q is the rule's limit, w its window or time to refill from empty (rounded up, left out when
 * 0), r what remains (rounded down, never below 0) and t the seconds until the rule is back to
 * full (rounded up). A rule that holds slots (concurrency) carries qu="concurrent-requests".
 */
#ifndef RLD_APP_RENDER_H
#define RLD_APP_RENDER_H

#include "buf.h"
#include "ratelimit.h"

/* The rule part of blocked_by ("global: store unavailable") and of ratelimit_denied_total's
 * rule label when a level with "on_store_error": "closed" denied because the store failed. */
#define RLD_STORE_UNAVAILABLE "store unavailable"

/* Writes blocked_by of a denied decision, "<level>: <rule name>" (the rule part is
 * RLD_STORE_UNAVAILABLE for a closed level whose store failed), NUL-terminated and truncated to
 * n bytes; returns its length. */
size_t rld_render_blocked_by(char *buf, size_t n, const rl_config *cfg, const rl_decision *d);
/* Appends d's body to body, the values of RateLimit-Policy to policy and of RateLimit to
 * state, all three in one pass over its rules; body NULL: the headers alone, policy NULL
 * (state too then): the body alone. Returns the number of header list members (0: send
 * neither header). The parts of a rule's text that follow from its names, limit and window
 * are kept per thread and written again only for a rule that differs in one of them. */
size_t rld_render_answer(rld_buf *body, rld_buf *policy, rld_buf *state, const rl_config *cfg,
                         const rl_decision *d);
/* Appends {"allowed", "retry_after", "blocked_by", "reservation"?, "limits": [...]} for d. */
void rld_render_decision(rld_buf *o, const rl_config *cfg, const rl_decision *d);
/* Appends the values of RateLimit-Policy to policy and RateLimit to state; returns the number
 * of list members written (0: send neither header). */
size_t rld_render_ratelimit(rld_buf *policy, rld_buf *state, const rl_config *cfg,
                            const rl_decision *d);
/* Appends the answer to POST /refund: {"reservation", "reserved_cost", "actual_cost",
 * "refunded", "charged"}, then "usage" (each dimension the reservation counted or the
 * settlement gave: {"reserved", "actual", "refunded", "charged"}) and "usd" (the same in
 * dollars, to the nano-dollar) when it has them. */
void rld_render_settlement(rld_buf *o, const rl_config *cfg, const char *reservation,
                           const rl_settlement *s);
/* Appends one rule of GET /usage/<level>/<key>: {"rule", "unit", "limit", "used",
 * "remaining", "reset_after"} (a rule counting dollars in dollars), and "period_start" and
 * "period_end" (RFC 3339 UTC) for a type with periods (rl_rule_type_period), of the period
 * holding now; after a comma unless first. */
void rld_render_usage_rule(rld_buf *o, const rl_config *cfg, const rl_rule *rule,
                           const rl_rule_status *st, rl_ns now, int first);
/* The Retry-After value for a finite wait: whole seconds, rounded up. */
int64_t rld_retry_after_seconds(rl_ns wait);

#endif
