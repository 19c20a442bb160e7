/*
 * summary.h - what ratelimit-replay counts over a trace and writes at the end:
 *
 *   {"requests": 6, "allowed": 4, "denied": 2,
 *    "rules": [{"level": "user", "rule": "free", "allowed": 4, "denied": 2,
 *               "shadow_denied": 0}, ...],
 *    "top_denied_keys": [{"level": "user", "key": "alice", "denied": 2}, ...],
 *    "peak_wait": {"seconds": 0.5, "line": 6}}
 *
 * A rule's "allowed" counts the allowed requests it applied to, "denied" the requests it blocked
 * (the rule that gave the longest wait), "shadow_denied" the requests a shadow rule did not fit
 * (it would have denied them; it never does). top_denied_keys lists the ten keys blocked most often
 * (ties by level and key), peak_wait the longest finite wait of a denial and its line (null when
 * nothing was denied with a finite wait).
 */
#ifndef RLD_REPLAY_SUMMARY_H
#define RLD_REPLAY_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "app/buf.h"
#include "ratelimit.h"

typedef struct rld_summary_rule {
    uint16_t level;
    char *rule;
    uint64_t allowed, denied;
    uint64_t shadow_denied; /* a shadow rule: the requests it would have denied */
} rld_summary_rule;

typedef struct rld_summary_key {
    uint16_t level;
    char *key; /* NULL: an empty slot */
    size_t len;
    uint64_t denied;
} rld_summary_key;

typedef struct rld_summary {
    const rl_config *cfg; /* borrowed: level names */
    uint64_t requests, allowed, denied;
    size_t nrules, caprules;
    rld_summary_rule *rules;
    size_t nkeys, capkeys; /* an open-addressing table, capkeys a power of two */
    rld_summary_key *keys;
    rl_ns peak_wait; /* -1: none */
    size_t peak_line;
} rld_summary;

/* An empty summary over cfg (borrowed). RL_ENOMEM with err. */
int rld_summary_init(rld_summary *s, const rl_config *cfg, rl_err *err);
/* Counts one decision made on the trace's line. Out of memory loses counts, not the run. */
void rld_summary_add(rld_summary *s, const rl_decision *d, size_t line);
/* Appends the summary line: {"summary": <a>} alone, or with b (--compare)
 * {"summary": {"differing": n, "a": <a>, "b": <b>}}; errors counts the lines refused. */
void rld_summary_write(rld_buf *o, const rld_summary *a, const rld_summary *b, uint64_t errors,
                       uint64_t differing);
/* Frees what the summary holds; a zeroed summary is fine. */
void rld_summary_free(rld_summary *s);

#endif
