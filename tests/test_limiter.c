/*
 * test_limiter.c - the decision engine through its public API: levels, two-phase decisions,
 * worked numbers of the design, composed keys, priorities, tiers, reservations.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

/* ---- worked numbers --------------------------------------------------------------------- */

START_TEST(team_bucket_worked_numbers)
{
    /* a 100-capacity, 10/s team bucket emptied at t = 0 answers retry_after 0.1 s and holds
     * 50 tokens at t = 5 */
    rl_limiter *lim = tu_limiter("{\"levels\": [{\"name\": \"team\", \"rules\": [{\"type\": "
                                 "\"token_bucket\", \"capacity\": 100, \"per_second\": 10}]}]}");
    rl_decision d;
    ck_assert(tu_acquire(lim, "team=acme", 100, S(0), &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "team"), 0);
    ck_assert(!tu_acquire(lim, "team=acme", 1, S(0), &d));
    ck_assert_int_eq(d.retry_after, S(0.1));
    ck_assert(tu_acquire_ex(lim, "team=acme", 1, S(5), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "team"), 50);
    tu_free(lim);
}
END_TEST

START_TEST(user_limit_with_refill)
{
    /* 3 allowed, the 4th denied with retry_after 1.0 blocked by user, allowed again at t = 1 */
    rl_limiter *lim = tu_limiter("{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
                                 "\"token_bucket\", \"capacity\": 3, \"per_second\": 1}]}]}");
    rl_decision d;
    for (int i = 0; i < 3; i++)
        ck_assert(tu_acquire(lim, "user=u1", 1, S(0), &d));
    ck_assert(!tu_acquire(lim, "user=u1", 1, S(0), &d));
    ck_assert_int_eq(d.retry_after, S(1));
    ck_assert_str_eq(tu_blocked_by(lim, &d), "user: token_bucket(3, 1/s)");
    ck_assert(!tu_acquire(lim, "user=u1", 1, S(0.999999999), &d));
    ck_assert_int_eq(d.retry_after, 1);
    ck_assert(tu_acquire(lim, "user=u1", 1, S(1), &d));
    tu_free(lim);
}
END_TEST

static const char *two_levels =
    "{\"levels\": ["
    "{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 5, "
    "\"per_second\": 1}]},"
    "{\"name\": \"team\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 6, "
    "\"per_second\": 1, \"name\": \"team-bucket\"}]}]}";

START_TEST(team_shared_denial_leaves_user_untouched)
{
    rl_limiter *lim = tu_limiter(two_levels);
    rl_decision d;
    ck_assert(tu_acquire(lim, "user=a,team=t", 4, S(0), &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "team"), 2);
    /* b has 5 of its own, the team only 2: denied by the team, b's bucket untouched */
    ck_assert(!tu_acquire(lim, "user=b,team=t", 3, S(0), &d));
    ck_assert_str_eq(tu_blocked_by(lim, &d), "team: team-bucket");
    ck_assert_int_eq(d.retry_after, S(1));
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 5);
    ck_assert(tu_acquire_ex(lim, "user=b", 5, S(0), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 5);
    /* and the team's 2 are still there for b */
    ck_assert(tu_acquire(lim, "user=b,team=t", 2, S(0), &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 3);
    tu_free(lim);
}
END_TEST

START_TEST(cost_larger_than_capacity_never_fits)
{
    rl_limiter *lim = tu_limiter(two_levels);
    rl_decision d;
    ck_assert(!tu_acquire(lim, "user=a,team=t", 5.5, S(0), &d));
    ck_assert_int_eq(d.retry_after, RL_WAIT_NEVER);
    ck_assert_str_eq(tu_blocked_by(lim, &d), "user: token_bucket(5, 1/s)");
    ck_assert(!tu_acquire(lim, "user=a,team=t", 7, S(0), &d));
    /* both never fit: the first in level order names it */
    ck_assert_str_eq(tu_blocked_by(lim, &d), "user: token_bucket(5, 1/s)");
    tu_free(lim);
}
END_TEST

START_TEST(single_bucket_trace)
{
    /* capacity 10, 2/s; costs 7, 5, 1, 1, 20 at t = 0, 1, 1.2, 1.5, 100:
     * allowed T, T, F, T, F and balances 3, 0, 0.4, 0, 10 */
    rl_limiter *lim = tu_limiter("{\"levels\": [{\"name\": \"k\", \"rules\": [{\"type\": "
                                 "\"token_bucket\", \"capacity\": 10, \"per_second\": 2}]}]}");
    const double cost[] = {7, 5, 1, 1, 20}, t[] = {0, 1, 1.2, 1.5, 100},
                 bal[] = {3, 0, 0.4, 0, 10};
    const int ok[] = {1, 1, 0, 1, 0};
    rl_decision d;
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(tu_acquire(lim, "k=x", cost[i], S(t[i]), &d), ok[i]);
        ck_assert_double_eq_tol(tu_remaining(lim, &d, "k"), bal[i], 1e-9);
    }
    tu_free(lim);
}
END_TEST

Suite *limiter_suite(void);
Suite *limiter_suite(void)
{
    Suite *s = suite_create("limiter");
    TCase *tc = tcase_create("worked");
    tcase_add_test(tc, team_bucket_worked_numbers);
    tcase_add_test(tc, user_limit_with_refill);
    tcase_add_test(tc, team_shared_denial_leaves_user_untouched);
    tcase_add_test(tc, cost_larger_than_capacity_never_fits);
    tcase_add_test(tc, single_bucket_trace);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(limiter_suite()) ? 1 : 0;
}
