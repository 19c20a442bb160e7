/*
 * test_max_keys.c - the memory store's bound on key states (rl_memory_store_new_bounded): idle
 * states are dropped first, a new key past the bound is refused with RL_EFULL while keys with
 * state keep being decided, and the bound holds under concurrent callers.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "ratelimit_store.h"
#include "testutil.h"

/* One level, one token bucket of 2 at 1/s: a key that took 1 is idle again 1 s later. */
static const char *cfg_json =
    "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", "
    "\"capacity\": 2, \"per_second\": 1}]}]}";

static rl_registry *reg;

static rl_limiter *bounded(uint64_t max_keys)
{
    rld_settings set;
    rl_config *cfg;
    rl_limiter *lim = NULL;
    rl_err err = {{0}};
    reg = rl_registry_new();
    ck_assert_int_eq(rld_config_parse(cfg_json, strlen(cfg_json), reg, &set, &cfg, &err), RL_OK);
    rld_settings_clear(&set);
    rl_store *st = rl_memory_store_new_bounded(max_keys);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(rl_limiter_new(cfg, st, &lim, &err), RL_OK);
    return lim;
}

static void done(rl_limiter *lim)
{
    rl_limiter_free(lim);
    rl_registry_free(reg);
}

/* rc of one decision of cost 1 for user at t seconds; *allowed when it is a decision. */
static int take(rl_limiter *lim, const char *user, double t, int *allowed, rl_err *err)
{
    rl_descriptor desc = {"user", 4, user, strlen(user)};
    rl_request req = {.desc = &desc, .ndesc = 1, .cost = RL_FP_ONE,
                      .now = (rl_ns)(t * 1e9)};
    rl_decision d;
    int rc = rl_acquire(lim, &req, &d, err);
    if (rc == RL_OK) {
        *allowed = d.allowed;
        rl_decision_done(&d);
    }
    return rc;
}

START_TEST(new_keys_past_the_bound_are_refused)
{
    rl_limiter *lim = bounded(3);
    rl_err err = {{0}};
    int allowed;
    ck_assert_int_eq(take(lim, "a", 10, &allowed, &err), RL_OK);
    ck_assert_int_eq(take(lim, "b", 10, &allowed, &err), RL_OK);
    ck_assert_int_eq(take(lim, "c", 10, &allowed, &err), RL_OK);
    ck_assert_uint_eq(rl_limiter_keys(lim, 0), 3);
    /* a, b and c each hold 1 of 2 at t = 10: none is idle, so d is refused */
    ck_assert_int_eq(take(lim, "d", 10.5, &allowed, &err), RL_EFULL);
    ck_assert_str_eq(err.msg, "store: max_keys (3) key states held and none idle; keys with "
                              "state are still served, try again later");
    ck_assert_uint_eq(rl_limiter_keys(lim, 0), 3);
    /* the keys with state are decided as before: a has 1.5 at 10.5, takes 1 */
    ck_assert_int_eq(take(lim, "a", 10.5, &allowed, &err), RL_OK);
    ck_assert(allowed);
    /* at 11 b and c are full again (idle), a is not (0.5 + 0.5 = 1): d gets a place */
    ck_assert_int_eq(take(lim, "d", 11, &allowed, &err), RL_OK);
    ck_assert(allowed);
    ck_assert_uint_le(rl_limiter_keys(lim, 0), 3);
    /* and the refused decision took nothing: d is at 1 of 2, like a key asked once */
    ck_assert_int_eq(take(lim, "d", 11, &allowed, &err), RL_OK);
    ck_assert(allowed);
    ck_assert_int_eq(take(lim, "d", 11, &allowed, &err), RL_OK);
    ck_assert(!allowed);
    done(lim);
}
END_TEST

START_TEST(ticks_make_room_again)
{
    rl_limiter *lim = bounded(2);
    rl_err err = {{0}};
    int allowed;
    ck_assert_int_eq(take(lim, "a", 0, &allowed, &err), RL_OK);
    ck_assert_int_eq(take(lim, "b", 0, &allowed, &err), RL_OK);
    ck_assert_int_eq(take(lim, "c", 0, &allowed, &err), RL_EFULL);
    /* housekeeping drops a and b once idle; the count follows */
    rl_limiter_tick(lim, 5 * RL_NS_PER_SEC);
    ck_assert_uint_eq(rl_limiter_keys(lim, 0), 0);
    ck_assert_int_eq(take(lim, "c", 5, &allowed, &err), RL_OK);
    ck_assert_int_eq(take(lim, "d", 5, &allowed, &err), RL_OK);
    ck_assert_int_eq(take(lim, "e", 5, &allowed, &err), RL_EFULL);
    done(lim);
}
END_TEST

#define THREADS 8
#define PER_THREAD 500
#define BOUND 1000

static rl_limiter *shared;
static int admitted[THREADS];

static void *caller(void *arg)
{
    int t = (int)(long)arg, allowed;
    char key[32];
    rl_err err;
    for (int i = 0; i < PER_THREAD; i++) {
        snprintf(key, sizeof key, "t%d-%d", t, i);
        int rc = take(shared, key, 1, &allowed, &err);
        ck_assert(rc == RL_OK || rc == RL_EFULL);
        admitted[t] += rc == RL_OK;
    }
    return NULL;
}

START_TEST(the_bound_holds_under_concurrent_callers)
{
    pthread_t th[THREADS];
    shared = bounded(BOUND);
    for (long t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, caller, (void *)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    /* 4000 new keys at one time, none ever idle: exactly BOUND get a state */
    int sum = 0;
    for (int t = 0; t < THREADS; t++)
        sum += admitted[t];
    ck_assert_int_eq(sum, BOUND);
    ck_assert_uint_eq(rl_limiter_keys(shared, 0), BOUND);
    done(shared);
}
END_TEST

static Suite *max_keys_suite(void)
{
    Suite *s = suite_create("max_keys");
    TCase *tc = tcase_create("bound");
    tcase_add_test(tc, new_keys_past_the_bound_are_refused);
    tcase_add_test(tc, ticks_make_room_again);
    tcase_add_test(tc, the_bound_holds_under_concurrent_callers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(max_keys_suite());
}
