/*
 * fuzz_quota_body.c - the body of PUT /quota/<user>: the input's first line is the user, the
 * rest the body. rld_quota_body_parse refuses with a message or gives exactly one of a known
 * tier and a rule list; the quota is then set and a decision for the user keeps the invariants
 * of fz_check_decision.
 */
#include <string.h>

#include "fuzz.h"
#include "app/quotas.h"

static const char config[] =
    "{\"levels\": [{\"name\": \"user\", \"tiered\": true},"
    " {\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"token_bucket\","
    " \"capacity\": 100, \"per_second\": 10}]}],"
    " \"tiers\": {\"free\": [{\"type\": \"token_bucket\", \"capacity\": 5, \"per_second\": 1}],"
    " \"pro\": [{\"type\": \"gcra\", \"per_second\": 10, \"burst\": 5}]},"
    " \"default_tier\": \"free\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t ulen = nl ? (size_t)(nl - data) : size;
    char *user = fz_copy(data, ulen);
    const char *body = nl ? (const char *)nl + 1 : "";
    size_t blen = nl ? size - ulen - 1 : 0;
    rl_limiter *lim = fz_limiter(config);
    const rl_config *cfg = rl_limiter_config(lim);
    rld_quota_body b;
    rl_err err = {{0}};
    if (strlen(user) != ulen ||
        rld_quota_body_parse(lim, (rl_registry *)cfg->reg, user, body, blen, &b, &err) != RL_OK) {
        FZ_CHECK(strlen(user) != ulen || err.msg[0], "a refusal without a message");
        fz_free(lim);
        free(user);
        return 0;
    }
    FZ_CHECK(rld_user_problem(user) == NULL, "user accepted: %s", rld_user_problem(user));
    FZ_CHECK(b.value && !b.tier != !b.rules, "value %p tier %p rules %p", (void *)b.value,
             (const void *)b.tier, (void *)b.rules);
    FZ_CHECK(!b.tier || rl_config_tier(cfg, b.tier) >= 0, "unknown tier %s accepted", b.tier);
    FZ_CHECK(!b.rules || (b.rules->n >= 1 && b.rules->n <= RL_MAX_RULES), "%zu rules",
             b.rules ? b.rules->n : 0);
    int rc = rl_quota_set(lim, user, b.tier, b.rules, &err);
    b.rules = NULL; /* stolen */
    FZ_CHECK(rc == RL_OK, "a checked quota refused: %s", err.msg);
    rl_descriptor desc = {"user", 4, user, ulen};
    for (int i = 0; i < 3; i++) {
        rl_request req = {.desc = &desc, .ndesc = 1, .cost = RL_FP_ONE,
                          .now = (rl_ns)i * RL_NS_PER_SEC / 3};
        rl_decision d;
        rc = rl_acquire(lim, &req, &d, &err);
        fz_check_decision(rc, &d, &err);
        if (rc == RL_OK)
            rl_decision_done(&d);
    }
    rld_quota_body_clear(&b);
    fz_free(lim);
    free(user);
    return 0;
}
