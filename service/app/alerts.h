/*
 * alerts.h - the rules' alerts: a POST of JSON to the configuration's "alert_webhook" when a
 * key's usage of a rule crosses one of its "alerts" fractions within a period.
 *
 * A decision only notes a crossing: rld_alerts_note compares each rule's usage before and
 * after what the decision took and, for each fraction crossed, copies a small record into a
 * bounded queue (no I/O, no waiting; a full queue drops the record and counts it). One thread
 * of the alerts' own sends the records in order with libcurl, each once per (level, key,
 * rule, period start, fraction): remembered here until its period ends, and, when a claim
 * function is given (the Redis fleet), claimed for the whole fleet first, so that one instance
 * sends it. A try that fails (no answer, or not 2xx) is tried again after 0.1 s, 0.2 s, ...
 * (at most 10 s) up to the configured attempts; the alerts behind it wait, so order holds.
 *
 * The body: {"level", "key", "rule", "unit", "used", "limit", "threshold", "period_start",
 * "period_end"}, amounts in the rule's unit (dollars for "usd"), times in RFC 3339 UTC
 * ("2026-12-01T00:00:00Z").
 */
#ifndef RLD_APP_ALERTS_H
#define RLD_APP_ALERTS_H

#include <stdint.h>

#include "buf.h"
#include "ratelimit.h"

typedef struct rld_alerts rld_alerts;

/* Claims an alert for the fleet: name (NUL-terminated) kept ttl_ms milliseconds. Returns 1
 * when this instance is to send it, 0 when another instance has, -1 when the claim could not
 * be made (the alert is then sent: twice rather than never). */
typedef int (*rld_alerts_claim_fn)(void *self, const char *name, int64_t ttl_ms);

typedef struct rld_alerts_config {
    const char *url;        /* http:// or https:// */
    const char *token;      /* NULL: no Authorization; copied */
    unsigned queue;         /* records waiting at most (>= 1) */
    unsigned attempts;      /* tries of one alert (>= 1) */
    unsigned timeout_ms;    /* one try's limit */
    rld_alerts_claim_fn claim; /* NULL: each instance sends its own (the memory store) */
    void *claim_self;       /* borrowed: outlives the alerts */
    rl_ns (*clock)(void);   /* the real clock, for how long a claim lasts; NULL: manual time */
} rld_alerts_config;

/* Starts the sender's thread (libcurl is initialised here: call before any other thread
 * uses it). NULL with err set when it cannot start. */
rld_alerts *rld_alerts_new(const rld_alerts_config *c, rl_err *err);
/* Notes the crossings of decision d (of request req, made over configuration cfg): for every
 * applied rule with alerts that took from it, each fraction its usage crossed. Never blocks
 * on the sender. a may be NULL (no webhook: nothing noted). Reads d's statuses (and so
 * writes d, rl_decision_status): from the thread that reads d. */
void rld_alerts_note(rld_alerts *a, const rl_config *cfg, const rl_request *req,
                     const rl_decision *d);
/* Appends ratelimit_alerts_total{result="sent|dropped|failed|duplicate"} and
 * ratelimit_alerts_queued. */
void rld_alerts_metrics(rld_alerts *a, rld_buf *out);
/* Stops the thread (a try in flight ends within its timeout; what is queued is not sent) and
 * frees a. NULL is ok. */
void rld_alerts_free(rld_alerts *a);

#endif
