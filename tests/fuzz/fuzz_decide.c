/*
 * fuzz_decide.c - sequences of decisions, settlements, releases and ticks on every built-in
 * rule type, driven by the input four bytes at a time:
 *
 *   byte 0  bits 0-5: which of the six levels the request names; bit 6: key "x" or "y";
 *           bit 7: priority 1 instead of 0
 *   byte 1  the operation: 0-4 acquire, 5 reserve, 6 settle the last reservation (actual cost
 *           from byte 3), 7 release it; bit 3: tick after it
 *   byte 2  time step: 0..255 times 10 ms (time only moves forward)
 *   byte 3  cost: (b + 1) / 8, from 0.125 to 32
 *
 * Each decision keeps the invariants of fz_check_decision; a dry run just before it at the
 * same time gives the same answer; a denial takes nothing (the balances are those of the dry
 * run); and after a denial whose wait is finite, and that no concurrency rule caused, the same
 * request fits at exactly now + retry_after.
 */
#include <string.h>

#include "fuzz.h"

static const char config[] =
    "{\"levels\": ["
    "{\"name\": \"l0\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 10,"
    " \"per_second\": 3, \"reserved\": {\"fraction\": 0.3, \"min_priority\": 1}}]},"
    "{\"name\": \"l1\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5, \"burst\": 3}]},"
    "{\"name\": \"l2\", \"rules\": [{\"type\": \"sliding_window\", \"limit\": 5,"
    " \"window\": 2}]},"
    "{\"name\": \"l3\", \"rules\": [{\"type\": \"sliding_window_counter\", \"limit\": 7,"
    " \"window\": 1.5, \"unit\": \"cost\"}]},"
    "{\"name\": \"l4\", \"rules\": [{\"type\": \"fixed_window\", \"limit\": 6,"
    " \"window\": 1}]},"
    "{\"name\": \"l5\", \"rules\": [{\"type\": \"concurrency\", \"limit\": 2}]}],"
    " \"reservation_ttl\": 5}";

static const char *const names[6] = {"l0", "l1", "l2", "l3", "l4", "l5"};

static int held_by_concurrency(const rl_decision *d)
{
    for (size_t i = 0; i < d->napplied; i++)
        if ((d->applied[i].rule->type->flags & RL_RULE_HOLDS) && d->applied[i].wait > 0)
            return 1;
    return 0;
}

static void same_balances(const rl_decision *a, const rl_decision *b)
{
    FZ_CHECK(a->napplied == b->napplied, "%zu / %zu applied", a->napplied, b->napplied);
    for (size_t i = 0; i < a->napplied; i++) {
        const rl_rule_status *x = rl_decision_status(a, i), *y = rl_decision_status(b, i);
        FZ_CHECK(!x == !y, "%s: a status on one side only", a->applied[i].rule->name);
        if (x)
            FZ_CHECK(x->remaining == y->remaining,
                     "%s: a denial took something (%lld, dry run %lld)",
                     a->applied[i].rule->name, (long long)x->remaining, (long long)y->remaining);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rl_limiter *lim = fz_limiter(config);
    char last[RL_RESERVATION_ID] = "";
    rl_ns now = 0;
    rl_err err = {{0}};
    for (size_t off = 0; off + 4 <= size && off < 4 * 512; off += 4) {
        const uint8_t *b = data + off;
        rl_descriptor desc[6];
        size_t n = 0;
        const char *key = b[0] & 0x40 ? "x" : "y";
        for (int l = 0; l < 6; l++)
            if (b[0] & (1u << l))
                desc[n++] = (rl_descriptor){names[l], 2, key, 1};
        now += (rl_ns)b[2] * 10000000;
        rl_fp cost = ((rl_fp)b[3] + 1) * RL_FP_ONE / 8;
        int op = b[1] & 7;
        if (op == 6 && last[0]) {
            rl_settlement s;
            int rc = rl_settle(lim, last, cost, now, &s, &err);
            FZ_CHECK(rc == RL_OK || err.msg[0], "settle error %d without a message", rc);
        } else if (op == 7 && last[0]) {
            int rc = rl_release(lim, last, now, &err);
            FZ_CHECK(rc == RL_OK || err.msg[0], "release error %d without a message", rc);
            last[0] = '\0';
        } else if (n > 0) {
            rl_request req = {.desc = desc, .ndesc = n, .cost = cost,
                              .priority = b[0] >> 7, .flags = RL_DRY_RUN, .now = now};
            rl_decision dry, d;
            int rc = rl_acquire(lim, &req, &dry, &err);
            fz_check_decision(rc, &dry, &err);
            FZ_CHECK(rc == RL_OK, "acquire: %s", err.msg);
            req.flags = op == 5 ? RL_RESERVE : 0;
            rc = rl_acquire(lim, &req, &d, &err);
            fz_check_decision(rc, &d, &err);
            FZ_CHECK(rc == RL_OK, "acquire: %s", err.msg);
            FZ_CHECK(d.allowed == dry.allowed, "allowed %d, dry run %d", d.allowed,
                     dry.allowed);
            if (!d.allowed)
                same_balances(&d, &dry);
            if (d.allowed && d.reservation[0])
                memcpy(last, d.reservation, sizeof last);
            if (!d.allowed && d.retry_after != RL_WAIT_NEVER && !held_by_concurrency(&d)) {
                rl_decision later;
                req.flags = RL_DRY_RUN;
                req.now = now + d.retry_after;
                rc = rl_acquire(lim, &req, &later, &err);
                fz_check_decision(rc, &later, &err);
                FZ_CHECK(rc == RL_OK && later.allowed,
                         "denied again after waiting retry_after %lld ns at %lld ns",
                         (long long)d.retry_after, (long long)now);
                rl_decision_done(&later);
            }
            rl_decision_done(&dry);
            rl_decision_done(&d);
        }
        if (b[1] & 8)
            rl_limiter_tick(lim, now);
    }
    fz_free(lim);
    return 0;
}
