/*
 * test_store_util.c - what every store does the same way (ratelimit_store.h): reservation ids,
 * and the share of a rule divided among instances or shards, through the local fallback.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/fallback.h"
#include "ratelimit_store.h"
#include "testutil.h"

START_TEST(ids_permute_format_parse)
{
    /* the splitmix64 finaliser: 0 stays 0, and splitmix64's first output for seed 0 */
    ck_assert_uint_eq(rl_store_permute(0), 0);
    ck_assert_uint_eq(rl_store_permute(0x9e3779b97f4a7c15ull), 0xe220a8397b1dcdafull);
    char id[RL_RESERVATION_ID];
    uint64_t v = 1;
    rl_store_id_format(id, 0xe220a8397b1dcdafull);
    ck_assert_str_eq(id, "r-e220a8397b1dcdaf");
    ck_assert_int_eq(rl_store_id_parse(id, &v), 0);
    ck_assert_uint_eq(v, 0xe220a8397b1dcdafull);
    rl_store_id_format(id, 10);
    ck_assert_str_eq(id, "r-000000000000000a");
    ck_assert_int_eq(rl_store_id_parse(id, &v), 0);
    ck_assert_uint_eq(v, 10);
    static const char *const bad[] = {"",
                                      "r-",
                                      "r-000000000000000",
                                      "r-000000000000000a0",
                                      "R-000000000000000a",
                                      "r_000000000000000a",
                                      "r-000000000000000A",
                                      "r-00000000000000g0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 7;
        ck_assert_msg(rl_store_id_parse(bad[i], &v) == -1, "\"%s\" taken", bad[i]);
        ck_assert_uint_eq(v, 7);
    }
    /* the memory store's ids have that form */
    rl_limiter *lim = tu_limiter("{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
                                 "\"token_bucket\", \"capacity\": 10, \"per_second\": 1}]}]}");
    rl_decision d;
    ck_assert_int_eq(tu_acquire_ex(lim, "user=a", 1, 0, RL_RESERVE, 0, &d), 1);
    ck_assert_int_eq(rl_store_id_parse(d.reservation, &v), 0);
    tu_free(lim);
}
END_TEST

static const rl_param_def amount = {.name = "capacity", .kind = RL_PARAM_AMOUNT, .min = 0.000001};
static const rl_param_def whole = {.name = "limit", .kind = RL_PARAM_AMOUNT, .min = 1};
static const rl_param_def window = {.name = "window", .kind = RL_PARAM_DURATION, .min = 0.001};

START_TEST(shares_round_down)
{
    /* 5 millionths among 2: 2 each (rounding to nearest gave 3, 6 in all, more than the 5) */
    ck_assert_int_eq(rl_param_share(&amount, 5, 2), 2);
    /* 10 among 3: 3.333333 each */
    ck_assert_int_eq(rl_param_share(&amount, 10000000, 3), 3333333);
    /* 0.666667 among 2: 0.333333 each (to nearest: 0.333334, twice 0.666668) */
    ck_assert_int_eq(rl_param_share(&amount, 666667, 2), 333333);
    /* never below the parameter's minimum, nor one millionth */
    ck_assert_int_eq(rl_param_share(&amount, 1, 4), 1);
    ck_assert_int_eq(rl_param_share(&whole, 3000000, 4), 1000000);
    ck_assert_int_eq(rl_param_share(&whole, 9000000, 4), 2250000);
    /* left alone: one part, zero, and what is not an amount or a rate */
    ck_assert_int_eq(rl_param_share(&amount, 5, 1), 5);
    ck_assert_int_eq(rl_param_share(&amount, 5, 0), 5);
    ck_assert_int_eq(rl_param_share(&amount, 0, 3), 0);
    ck_assert_int_eq(rl_param_share(&window, 60000000000, 3), 60000000000);
}
END_TEST

/* ---- a store that is always down, under the fallback store in local mode ---------------- */

static int down_attach(void *cls, const rl_config *cfg, const rl_resolver *res, rl_err *err)
{
    (void)cls, (void)cfg, (void)res, (void)err;
    return RL_OK;
}
static int down_decide(void *cls, const rl_plan *plan, rl_decision *d, rl_err *err)
{
    (void)cls, (void)plan, (void)d;
    return rl_errf(err, RL_ESTORE, "store: down");
}
static int down_settle(void *cls, const char *id, const rl_actual *actual, rl_ns now,
                       const rl_outcome *o, rl_settlement *out, rl_err *err)
{
    (void)cls, (void)id, (void)actual, (void)now, (void)o, (void)out;
    return rl_errf(err, RL_ESTORE, "store: down");
}
static int down_release(void *cls, const char *id, rl_ns now, const rl_outcome *o, rl_err *err)
{
    (void)cls, (void)id, (void)now, (void)o;
    return rl_errf(err, RL_ESTORE, "store: down");
}
static void down_tick(void *cls, rl_ns now)
{
    (void)cls, (void)now;
}
static size_t down_keys(void *cls, size_t level)
{
    (void)cls, (void)level;
    return 0;
}
static void down_stats(void *cls, rl_stats *out)
{
    (void)cls;
    memset(out, 0, sizeof *out);
}
static void down_destroy(void *cls)
{
    (void)cls;
}
static const rl_store_ops down_ops = {.attach = down_attach,
                                      .decide = down_decide,
                                      .settle = down_settle,
                                      .release = down_release,
                                      .tick = down_tick,
                                      .keys = down_keys,
                                      .stats = down_stats,
                                      .destroy = down_destroy};

START_TEST(local_fallback_takes_the_share)
{
    /* a bucket of 5 millionths on a fleet of 2: each instance gets 2 millionths */
    const char *json = "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
                       "\"token_bucket\", \"capacity\": 0.000005, \"per_second\": 0.000001}]}]}";
    rl_registry *reg = rl_registry_new();
    rld_settings set;
    rl_config *cfg;
    rl_err err;
    ck_assert_int_eq(rld_config_parse(json, strlen(json), reg, &set, &cfg, &err), RL_OK);
    static rl_store down = {&down_ops, NULL};
    rld_fallback_options opt = {.mode = {RLD_ON_ERROR_LOCAL}, .fleet_size = 2};
    rl_store *fb;
    ck_assert_int_eq(rld_fallback_store_new(&down, &opt, &fb, &err), RL_OK);
    rl_limiter *lim;
    ck_assert_int_eq(rl_limiter_new(cfg, fb, &lim, &err), RL_OK);
    rl_decision d;
    ck_assert_int_eq(tu_acquire(lim, "user=a", 0.000002, 0, &d), 1);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_LOCAL);
    ck_assert_int_eq(tu_status(&d, 0)->limit, 2);
    /* a third millionth does not fit: 3 would be more than the instance's share */
    ck_assert_int_eq(tu_acquire(lim, "user=b", 0.000003, 0, &d), 0);
    ck_assert_uint_eq(rld_fallback_count(fb, 0, RLD_ON_ERROR_LOCAL), 2);
    rl_limiter_free(lim);
    rld_settings_clear(&set);
    rl_registry_free(reg);
}
END_TEST

Suite *store_util_suite(void);
Suite *store_util_suite(void)
{
    Suite *s = suite_create("store_util");
    TCase *tc = tcase_create("store_util");
    tcase_add_test(tc, ids_permute_format_parse);
    tcase_add_test(tc, shares_round_down);
    tcase_add_test(tc, local_fallback_takes_the_share);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(store_util_suite()) ? 1 : 0;
}
