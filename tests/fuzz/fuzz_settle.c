/*
 * fuzz_settle.c - the bodies of POST /refund (first byte odd) and POST /release (even):
 * rld_settle_parse. A refusal has a message and holds nothing; an accepted body has its
 * reservation and checked amounts. Then the settlement it asks for on a limiter that holds
 * one reservation (made with a concurrency slot), so that an unknown id is answered too.
 */
#include <string.h>

#include "fuzz.h"
#include "app/settle_req.h"

static const char config[] =
    "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\","
    " \"capacity\": 10, \"per_second\": 1}, {\"type\": \"concurrency\", \"limit\": 1}]}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int with_actual = data[0] & 1;
    rld_settle_req b;
    rl_err err = {{0}};
    if (rld_settle_parse((const char *)data + 1, size - 1, with_actual, &b, &err) != 0) {
        FZ_CHECK(err.msg[0] != '\0', "a refusal without a message");
        FZ_CHECK(b.root == NULL, "a refusal holding a document");
        return 0;
    }
    FZ_CHECK(b.reservation != NULL, "accepted without a reservation");
    FZ_CHECK(!with_actual || (b.has_actual && b.actual >= 0 && b.actual <= RL_FP_MAX),
             "actual_cost %lld", (long long)b.actual);
    FZ_CHECK(!b.has_now || b.now >= 0, "now %lld", (long long)b.now);

    rl_limiter *lim = fz_limiter(config);
    rl_descriptor desc = {"user", 4, "u", 1};
    rl_request req = {.desc = &desc, .ndesc = 1, .cost = 3 * RL_FP_ONE, .now = 0};
    rl_decision d;
    FZ_CHECK(rl_acquire(lim, &req, &d, &err) == RL_OK && d.allowed && d.reservation[0],
             "the setup's reservation: %s", err.msg);
    rl_decision_done(&d);
    rl_ns now = b.has_now ? b.now : 0;
    int rc;
    if (with_actual) {
        rl_settlement s;
        memset(&s, 0, sizeof s);
        rc = rl_settle(lim, b.reservation, b.actual, now, &s, &err);
        FZ_CHECK(rc != RL_OK || (s.refunded >= 0 && s.charged >= 0 &&
                                  s.reserved - s.refunded + s.charged == s.actual),
                 "settlement %lld %lld %lld %lld", (long long)s.reserved, (long long)s.actual,
                 (long long)s.refunded, (long long)s.charged);
    } else {
        rc = rl_release(lim, b.reservation, now, &err);
    }
    FZ_CHECK(rc == RL_OK || err.msg[0], "error %d without a message", rc);
    /* the slot is back only when that very reservation was released */
    rc = rl_acquire(lim, &req, &d, &err);
    fz_check_decision(rc, &d, &err);
    if (rc == RL_OK)
        rl_decision_done(&d);
    fz_free(lim);
    rld_settle_req_clear(&b);
    return 0;
}
