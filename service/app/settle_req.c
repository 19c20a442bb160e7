/*
 * settle_req.c - see settle_req.h.
 */
#include <math.h>
#include <string.h>

#include "settle_req.h"
#include "values.h"

#define fail(err, ...) rl_errf(err, -1, __VA_ARGS__)

/* "latency_ms" and "outcome": how the call went. Returns 1 when k is one of them (0 done, -1
 * with err filled, in *rc), 0 when it is not. */
static int outcome_member(rld_settle_req *b, const char *k, const json_t *v, int *rc,
                          rl_err *err)
{
    static const char *const kinds[] = {"ok", "error", "timeout", "dropped"};
    *rc = 0;
    if (strcmp(k, "latency_ms") == 0) {
        double n = json_is_number(v) ? json_number_value(v) : NAN;
        if (!(n >= 0 && n <= 3600000)) /* NaN too */
            *rc = fail(err, "latency_ms: must be a number from 0 to 3600000");
        else
            b->outcome.latency = (rl_ns)llround(n * 1e6);
        return 1;
    }
    if (strcmp(k, "outcome") == 0) {
        const char *s = json_is_string(v) ? json_string_value(v) : "";
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
            if (strcmp(s, kinds[i]) == 0) {
                b->outcome.kind = (rl_outcome_kind)(RL_OUTCOME_OK + (int)i);
                return 1;
            }
        *rc = fail(err, "outcome: must be \"ok\", \"error\", \"timeout\" or \"dropped\"");
        return 1;
    }
    return 0;
}

static int member(rld_settle_req *b, const char *k, const json_t *v, int with_actual,
                  rl_err *err)
{
    int rc;
    if (outcome_member(b, k, v, &rc, err))
        return rc;
    if (strcmp(k, "reservation") == 0) {
        if (!json_is_string(v))
            return fail(err, "reservation: must be a string");
        b->reservation = json_string_value(v);
    } else if (with_actual && strcmp(k, "actual_cost") == 0) {
        double n = json_is_number(v) ? json_number_value(v) : NAN;
        if (rld_value_amount("actual_cost", n, &b->actual, err) != 0)
            return -1;
        b->has_actual = 1;
    } else if (with_actual && strcmp(k, "actual_usage") == 0) {
        if (!json_is_object(v))
            return fail(err, "actual_usage: must be an object of dimension names to amounts");
        b->actual_usage = v;
    } else if (strcmp(k, "now") == 0) {
        double n = json_is_number(v) ? json_number_value(v) : NAN;
        if (rld_value_seconds("now", n, &b->now, err) != 0)
            return -1;
        b->has_now = 1;
    } else {
        return fail(err, "%.64s: unknown field (known: %s)", k,
                    with_actual ? "reservation, actual_cost, actual_usage, now, latency_ms, outcome"
                                : "reservation, now, latency_ms, outcome");
    }
    return 0;
}

int rld_settle_parse(const char *body, size_t len, int with_actual, rld_settle_req *b,
                     rl_err *err)
{
    json_error_t jerr;
    const char *k;
    json_t *v;
    int rc = 0;
    memset(b, 0, sizeof *b);
    b->outcome.latency = -1;
    if (len == 0)
        return fail(err, "body: required, a JSON object");
    if (!(b->root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr)))
        return fail(err, "body: malformed JSON at line %d, column %d: %s", jerr.line,
                    jerr.column, jerr.text);
    if (!json_is_object(b->root))
        rc = fail(err, "body: must be a JSON object");
    json_object_foreach(b->root, k, v)
    {
        if (rc == 0)
            rc = member(b, k, v, with_actual, err);
    }
    if (rc == 0 && !b->reservation)
        rc = fail(err, "reservation: required");
    if (rc == 0 && with_actual && !b->has_actual && !b->actual_usage)
        rc = fail(err, "actual_cost: required (or actual_usage)");
    if (rc != 0)
        rld_settle_req_clear(b);
    return rc;
}

void rld_settle_req_clear(rld_settle_req *b)
{
    json_decref(b->root);
    memset(b, 0, sizeof *b);
}
