/*
 * fuzz_quota_file.c - the quota file read at start: rld_quotas_open over the input refuses
 * with a message naming the file, or applies every override, after which a decision for each
 * user keeps the invariants of fz_check_decision.
 */
#include <string.h>

#include "fuzz.h"
#include "app/quotas.h"

static const char config[] =
    "{\"levels\": [{\"name\": \"user\", \"tiered\": true}],"
    " \"tiers\": {\"free\": [{\"type\": \"token_bucket\", \"capacity\": 5, \"per_second\": 1}],"
    " \"pro\": [{\"type\": \"sliding_window\", \"limit\": 10, \"window\": 2}]},"
    " \"default_tier\": \"free\", \"quotas\": {\"cfg\": \"pro\"}}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_scratch("quota");
    fz_write(path, data, size);
    rl_limiter *lim = fz_limiter(config);
    rld_quotas q;
    rl_err err = {{0}};
    int rc = rld_quotas_open(&q, path, lim, (rl_registry *)rl_limiter_config(lim)->reg, &err);
    if (rc != RL_OK) {
        FZ_CHECK(strstr(err.msg, path) != NULL, "the error does not name the file: %s", err.msg);
    } else {
        const char *user;
        json_t *v;
        FZ_CHECK(json_is_object(q.overrides), "the overrides are not an object");
        json_object_foreach(q.overrides, user, v)
        {
            rl_descriptor desc = {"user", 4, user, strlen(user)};
            rl_request req = {.desc = &desc, .ndesc = 1, .cost = RL_FP_ONE, .now = 0};
            rl_decision d;
            rc = rl_acquire(lim, &req, &d, &err);
            fz_check_decision(rc, &d, &err);
            FZ_CHECK(rc == RL_OK, "a user of the quota file refused: %s", err.msg);
            rl_decision_done(&d);
        }
    }
    rld_quotas_close(&q);
    fz_free(lim);
    return 0;
}
