/*
 * fuzz_acquire.c - the POST /acquire body: rld_acquire_parse (the fast parser, jansson when it
 * steps aside, the value checks), then the decision it asks for on a limiter with every
 * built-in rule type. A refusal has a message; an accepted body holds checked values; the
 * decision keeps the invariants of fz_check_decision.
 */
#include <string.h>

#include "app/acquire_req.h"
#include "fuzz.h"

static const char config[] =
    "{\"levels\": ["
    "{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 10,"
    " \"per_second\": 2, \"reserved\": {\"fraction\": 0.2, \"min_priority\": 1}},"
    " {\"type\": \"sliding_window\", \"limit\": 5, \"window\": 3}]},"
    "{\"name\": \"team\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 4, \"burst\": 3},"
    " {\"type\": \"fixed_window\", \"limit\": 8, \"window\": 2}]},"
    "{\"name\": \"ip\", \"compose\": [\"ip\", \"event\"], \"rules\": [{\"type\":"
    " \"sliding_window_counter\", \"limit\": 6, \"window\": 1.5}]},"
    "{\"name\": \"job\", \"rules\": [{\"type\": \"concurrency\", \"limit\": 2}]},"
    "{\"name\": \"deny\", \"rules\": [{\"type\": \"deny_list\", \"keys\": [\"bad\"]}]},"
    "{\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"token_bucket\","
    " \"capacity\": 1000, \"per_second\": 100}]}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *body = fz_copy(data, size);
    rld_acquire_req q;
    rl_err err = {{0}};
    if (rld_acquire_parse(body, size, &q, &err) != 0) {
        FZ_CHECK(err.msg[0] != '\0', "a refusal without a message");
        free(body);
        return 0;
    }
    FZ_CHECK(q.has_keys && q.ndesc <= RLD_MAX_KEYS, "keys %d, %zu descriptors", q.has_keys,
             q.ndesc);
    FZ_CHECK(q.cost > 0 && q.cost <= RL_FP_MAX, "cost %lld accepted", (long long)q.cost);
    FZ_CHECK(!q.has_now || q.now >= 0, "now %lld accepted", (long long)q.now);
    FZ_CHECK((q.reserve == 0 || q.reserve == 1) && (q.dry_run == 0 || q.dry_run == 1),
             "reserve %d, dry_run %d", q.reserve, q.dry_run);
    for (size_t i = 0; i < q.ndesc; i++)
        FZ_CHECK(q.desc[i].name && q.desc[i].value, "descriptor %zu", i);

    rl_limiter *lim = fz_limiter(config);
    rl_request req = {.desc = q.desc,
                      .ndesc = q.ndesc,
                      .cost = q.cost,
                      .priority = q.priority,
                      .flags = (q.dry_run ? RL_DRY_RUN : 0u) | (q.reserve ? RL_RESERVE : 0u),
                      .now = q.has_now ? q.now : 0};
    rl_decision d;
    /* twice: a new key, then one with state */
    for (int round = 0; round < 2; round++) {
        int rc = rl_acquire(lim, &req, &d, &err);
        fz_check_decision(rc, &d, &err);
        if (rc == RL_OK) {
            FZ_CHECK(!d.allowed || !(req.flags & RL_RESERVE) || d.reservation[0],
                     "an allowed reservation without an id");
            rl_decision_done(&d);
        }
    }
    fz_free(lim);
    rld_acquire_req_clear(&q);
    free(body);
    return 0;
}
