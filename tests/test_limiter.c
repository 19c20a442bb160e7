/*
 * test_limiter.c - the decision engine through its public API: levels, two-phase decisions,
 * worked numbers of the design, composed keys, priorities, tiers, reservations.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/keytable.h" /* white-box: a segment's growth and shrinking */
#include "ratelimit_store.h"
#include "testutil.h"

/* ---- worked numbers --------------------------------------------------------------------- */

/* rl_acquire_many over the memory store: as rl_acquire one after the other, worked out by
 * hand. A bucket of 3 (1 a second) for user a asked 5 times at t = 0, a request with a bad
 * cost in the middle refused alone, and user b once. */
START_TEST(acquire_many_is_one_after_the_other)
{
    rl_limiter *lim = tu_limiter("{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
                                 "\"token_bucket\", \"capacity\": 3, \"per_second\": 1}]}]}");
    rl_descriptor da = {"user", 4, "a", 1}, db = {"user", 4, "b", 1};
    rl_request req[7];
    rl_decision d[7];
    rl_err err[7];
    rl_acquisition x[7];
    for (int i = 0; i < 7; i++) {
        req[i] = (rl_request){.desc = i == 6 ? &db : &da, .ndesc = 1, .cost = FP(1), .now = 0};
        x[i] = (rl_acquisition){&req[i], &d[i], &err[i], -99};
    }
    req[2].cost = 0; /* refused: cost must be positive */
    rl_acquire_many(lim, x, 7);
    ck_assert_int_eq(x[2].rc, RL_EINVAL);
    ck_assert_str_eq(err[2].msg, "cost: must be a positive number no larger than 1000000000000");
    static const int allowed[7] = {1, 1, -1, 1, 0, 0, 1};
    for (int i = 0; i < 7; i++) {
        if (i == 2)
            continue;
        ck_assert_int_eq(x[i].rc, RL_OK);
        ck_assert_int_eq(d[i].allowed, allowed[i]);
        ck_assert_int_eq(d[i].retry_after, allowed[i] ? 0 : S(1));
        ck_assert_int_eq(d[i].blocked, allowed[i] ? -1 : 0);
        rl_decision_done(&d[i]);
    }
    ck_assert_int_eq(tu_status(&d[6], 0)->remaining, FP(2));
    tu_free(lim);
}
END_TEST

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

/* One decision inserts a record into a segment that holds another record of the same
 * decision, found before the insert: the insert may grow the segment and move that record,
 * and the decision must find it again (under AddressSanitizer a stale one is a use after
 * free). A key of two buckets, "quick" (1, 1,000/s: full again 1 ms after a request) and
 * "slow" (1,000, 1/1,000 s): by 5.5 s the sweep has dropped every quick record and kept every
 * slow one; 2,000 new users fill the segments as far as they were, and then each of the first
 * 4,000 users inserts its quick record beside its slow one, which grows every segment.
 * Worked out by hand: the slow bucket holds 1,000 - 1 + 6 x 0.001 - 1 = 998.006, the quick
 * one 1 - 1 = 0. */
START_TEST(an_insert_beside_a_found_record)
{
    rl_limiter *lim =
        tu_limiter("{\"levels\": [{\"name\": \"user\", \"rules\": ["
                   "{\"type\": \"token_bucket\", \"capacity\": 1, \"per_second\": 1000, "
                   "\"name\": \"quick\"},"
                   "{\"type\": \"token_bucket\", \"capacity\": 1000, \"per_second\": 0.001, "
                   "\"name\": \"slow\"}]}]}");
    rl_decision d;
    char keys[32];
    for (int i = 0; i < 4000; i++) {
        snprintf(keys, sizeof keys, "user=u%d", i);
        ck_assert_msg(tu_acquire(lim, keys, 1, 0, &d), "request %d denied", i);
    }
    for (int i = 0; i <= 50; i++)
        rl_limiter_tick(lim, S(0.5) + i * S(0.1));
    ck_assert_uint_eq(rl_limiter_keys(lim, 0), 4000); /* the slow records only */
    for (int i = 4000; i < 6000; i++) { /* new users: the segments as full as before */
        snprintf(keys, sizeof keys, "user=u%d", i);
        ck_assert_msg(tu_acquire(lim, keys, 1, S(6), &d), "request %d denied", i);
    }
    for (int i = 0; i < 4000; i++) {
        snprintf(keys, sizeof keys, "user=u%d", i);
        ck_assert_msg(tu_acquire(lim, keys, 1, S(6), &d), "request %d denied", i);
        ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
        ck_assert_int_eq(tu_status(&d, 1)->remaining, 998006000);
    }
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


/* ---- levels and keys ---------------------------------------------------------------------- */

static const char *key_levels =
    "{\"levels\": ["
    "{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 2, "
    "\"per_second\": 0.001}]},"
    "{\"name\": \"user_event\", \"compose\": [\"user\", \"event\"], \"rules\": [{\"type\": "
    "\"token_bucket\", \"capacity\": 1, \"per_second\": 0.001, \"name\": \"per-event\"}]},"
    "{\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"token_bucket\", "
    "\"capacity\": 100, \"per_second\": 1}]}]}";

static int applied_key_is(const rl_decision *d, size_t i, const char *key)
{
    return d->applied[i].keylen == strlen(key) &&
           memcmp(d->applied[i].key, key, d->applied[i].keylen) == 0;
}

START_TEST(composed_and_default_keys)
{
    rl_limiter *lim = tu_limiter(key_levels);
    rl_decision d;
    ck_assert(tu_acquire(lim, "user=u1,event=login", 1, S(0), &d));
    ck_assert_int_eq(d.napplied, 3);
    ck_assert(applied_key_is(&d, 0, "u1"));
    ck_assert(applied_key_is(&d, 1, "u1:login"));
    ck_assert(applied_key_is(&d, 2, "*"));
    /* one per user and event */
    ck_assert(!tu_acquire(lim, "user=u1,event=login", 1, S(0), &d));
    ck_assert_str_eq(tu_blocked_by(lim, &d), "user_event: per-event");
    ck_assert(tu_acquire(lim, "user=u1,event=search", 1, S(0), &d));
    /* no event: the composed level cannot be formed and is skipped; the user is out */
    ck_assert(!tu_acquire(lim, "user=u1", 1, S(0), &d));
    ck_assert_int_eq(d.napplied, 2);
    ck_assert_str_eq(tu_blocked_by(lim, &d), "user: token_bucket(2, 0.001/s)");
    /* no descriptor at all: only the global level, by its default key */
    ck_assert(tu_acquire(lim, "", 1, S(0), &d));
    ck_assert_int_eq(d.napplied, 1);
    ck_assert(applied_key_is(&d, 0, "*"));
    /* three of the five requests were allowed */
    ck_assert_double_eq(tu_remaining(lim, &d, "global"), 97);
    tu_free(lim);
}
END_TEST

/* Which descriptors a level's key is made from: its own name, or each that it composes. */
START_TEST(levels_read_their_descriptors)
{
    rl_limiter *lim = tu_limiter(key_levels);
    const rl_config *cfg = rl_limiter_config(lim);
    const rl_level *user = &cfg->levels[0], *ue = &cfg->levels[1], *global = &cfg->levels[2];
    ck_assert(rl_level_reads(user, "user", 4));
    ck_assert(!rl_level_reads(user, "use", 3));
    ck_assert(!rl_level_reads(user, "users", 5));
    ck_assert(rl_level_reads(user, "userX", 4)); /* n bytes of the name: "user" */
    ck_assert(rl_level_reads(ue, "user", 4));
    ck_assert(rl_level_reads(ue, "event", 5));
    ck_assert(!rl_level_reads(ue, "user_event", 10)); /* a composed level reads its parts */
    ck_assert(rl_level_reads(global, "global", 6));
    ck_assert(!rl_level_reads(global, "user", 4));
    tu_free(lim);
}
END_TEST

START_TEST(bad_requests_change_nothing)
{
    rl_limiter *lim = tu_limiter(key_levels);
    rl_decision d;
    rl_err err;
    char long_key[300];
    memset(long_key, 'a', sizeof long_key);
    long_key[sizeof long_key - 1] = '\0';
    char buf[400];

    ck_assert_int_eq(tu_acquire_err(lim, "usr=u1", 1, S(0), &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "keys.usr: unknown descriptor (levels use: user, event, global)");
    ck_assert_int_eq(tu_acquire_err(lim, "user=", 1, S(0), &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "keys.user: must not be empty");
    snprintf(buf, sizeof buf, "user=%s", long_key);
    ck_assert_int_eq(tu_acquire_err(lim, buf, 1, S(0), &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "keys.user: must be at most 256 bytes");
    ck_assert_int_eq(tu_acquire_err(lim, "user=a\tb", 1, S(0), &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "keys.user: must not hold control characters");
    /* keys are checked eight bytes at a time: a control character or DEL anywhere in a long key,
     * and bytes above 0x7f next to 0x7e (a carry must not hide or invent one) */
    static const char *const bad[] = {"user=abcdefghijklmn\x1fp", "user=abcdefgh\x7fjklmnopq",
                                      "user=\x01" "bcdefghijklmnopqrstuvw", "user=abcdefg\x7f"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(tu_acquire_err(lim, bad[i], 1, S(0), &err), RL_EINVAL);
        ck_assert_str_eq(err.msg, "keys.user: must not hold control characters");
    }
    rl_decision dd;
    ck_assert(tu_acquire_ex(lim, "user=\xff\x7e\xff\x7e abcdefghijklmn\x80\x20~", 1, S(0),
                            RL_DRY_RUN, 0, &dd));
    ck_assert_int_eq(tu_acquire_err(lim, "user=u1,user=u2", 1, S(0), &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "keys.user: given twice");
    ck_assert_int_eq(tu_acquire_err(lim, "user=u1", 0, S(0), &err), RL_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "cost: must be a positive number"));
    /* 256 bytes is fine */
    long_key[256] = '\0';
    snprintf(buf, sizeof buf, "user=%s", long_key);
    ck_assert(tu_acquire(lim, buf, 1, S(0), &d));
    /* a request with an error in its second descriptor took nothing from the first */
    ck_assert_int_eq(tu_acquire_err(lim, "user=u1,event=", 1, S(0), &err), RL_EINVAL);
    ck_assert(tu_acquire_ex(lim, "user=u1", 2, S(0), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "global"), 99);
    tu_free(lim);
}
END_TEST

START_TEST(dry_run_takes_nothing)
{
    rl_limiter *lim = tu_limiter(key_levels);
    rl_decision d;
    for (int i = 0; i < 5; i++) {
        ck_assert(tu_acquire_ex(lim, "user=u1,event=e", 1, S(0), RL_DRY_RUN, 0, &d));
        ck_assert_double_eq(tu_remaining(lim, &d, "user"), 2);
    }
    ck_assert(!tu_acquire_ex(lim, "user=u1,event=e", 3, S(0), RL_DRY_RUN, 0, &d));
    ck_assert_int_eq(d.retry_after, RL_WAIT_NEVER);
    ck_assert_int_eq(rl_limiter_keys(lim, 0), 0);
    ck_assert(tu_acquire(lim, "user=u1,event=e", 1, S(0), &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 1);
    tu_free(lim);
}
END_TEST

START_TEST(requests_and_cost_units_in_one_level)
{
    /* a model API's requests per minute and tokens per minute */
    rl_limiter *lim = tu_limiter(
        "{\"levels\": [{\"name\": \"model\", \"rules\": ["
        "{\"type\": \"fixed_window\", \"limit\": 3, \"window\": 60, \"unit\": \"requests\", "
        "\"name\": \"rpm\"},"
        "{\"type\": \"fixed_window\", \"limit\": 1000, \"window\": 60, \"name\": \"tpm\"}]}]}");
    rl_decision d;
    ck_assert(tu_acquire(lim, "model=m", 400, S(0), &d));
    ck_assert(tu_acquire(lim, "model=m", 400, S(1), &d));
    ck_assert_double_eq(tu_status(&d, 0)->remaining / 1e6, 1);
    ck_assert_double_eq(tu_status(&d, 1)->remaining / 1e6, 200);
    ck_assert(!tu_acquire(lim, "model=m", 400, S(2), &d));
    ck_assert_str_eq(tu_blocked_by(lim, &d), "model: tpm");
    ck_assert_int_eq(d.retry_after, S(58));
    ck_assert(tu_acquire(lim, "model=m", 100, S(3), &d));
    ck_assert(!tu_acquire(lim, "model=m", 1, S(4), &d));
    ck_assert_str_eq(tu_blocked_by(lim, &d), "model: rpm");
    tu_free(lim);
}
END_TEST

/* On equal waits the first rule in level order, then rule order, is named. */
START_TEST(ties_name_the_first_rule)
{
    rl_limiter *lim = tu_limiter(
        "{\"levels\": ["
        "{\"name\": \"a\", \"default_key\": \"*\", \"rules\": [{\"type\": \"fixed_window\", "
        "\"limit\": 1, \"window\": 10, \"name\": \"a1\"}, {\"type\": \"fixed_window\", "
        "\"limit\": 1, \"window\": 10, \"name\": \"a2\"}]},"
        "{\"name\": \"b\", \"default_key\": \"*\", \"rules\": [{\"type\": \"fixed_window\", "
        "\"limit\": 1, \"window\": 10, \"name\": \"b1\"}]}]}");
    rl_decision d;
    ck_assert(tu_acquire(lim, "", 1, S(1), &d));
    ck_assert(!tu_acquire(lim, "", 1, S(2), &d));
    ck_assert_str_eq(tu_blocked_by(lim, &d), "a: a1");
    ck_assert_int_eq(d.retry_after, S(8));
    for (size_t i = 0; i < d.napplied; i++)
        ck_assert_int_eq(d.applied[i].wait, S(8));
    tu_free(lim);
}
END_TEST

/* ---- reservations ------------------------------------------------------------------------- */

static const char *reserve_cfg =
    "{\"reservation_ttl\": 30, \"levels\": ["
    "{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 1000, "
    "\"per_second\": 10}, {\"type\": \"concurrency\", \"limit\": 2}]}]}";

START_TEST(reserve_refund_and_settled_twice)
{
    rl_limiter *lim = tu_limiter(reserve_cfg);
    rl_decision d;
    rl_settlement st;
    rl_err err;
    ck_assert(tu_acquire_ex(lim, "user=u", 1000, S(0), RL_RESERVE, 0, &d));
    ck_assert_int_eq(strlen(d.reservation), 18);
    ck_assert(strncmp(d.reservation, "r-", 2) == 0);
    char id[RL_RESERVATION_ID];
    memcpy(id, d.reservation, sizeof id);
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 0);

    ck_assert_int_eq(rl_settle(lim, id, FP(734), S(0), &st, &err), RL_OK);
    ck_assert_int_eq(st.reserved, FP(1000));
    ck_assert_int_eq(st.actual, FP(734));
    ck_assert_int_eq(st.refunded, FP(266));
    ck_assert_int_eq(st.charged, 0);
    ck_assert(tu_acquire_ex(lim, "user=u", 1, S(0), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 266);

    ck_assert_int_eq(rl_settle(lim, id, FP(1), S(0), &st, &err), RL_ESETTLED);
    ck_assert_str_eq(err.msg, "reservation: already settled");
    ck_assert(tu_acquire_ex(lim, "user=u", 1, S(0), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 266);
    /* release ends it (and gives its concurrency slot back); then it is unknown */
    ck_assert_int_eq(rl_release(lim, id, S(0), &err), RL_OK);
    ck_assert_int_eq(rl_release(lim, id, S(0), &err), RL_ENOTFOUND);
    ck_assert_int_eq(rl_settle(lim, id, FP(1), S(0), &st, &err), RL_ENOTFOUND);
    ck_assert_int_eq(rl_settle(lim, "r-0000000000000000", FP(1), S(0), &st, &err),
                     RL_ENOTFOUND);
    ck_assert_int_eq(rl_settle(lim, "bogus", FP(1), S(0), &st, &err), RL_ENOTFOUND);
    tu_free(lim);
}
END_TEST

START_TEST(charge_drives_the_bucket_below_zero)
{
    rl_limiter *lim = tu_limiter(reserve_cfg);
    rl_decision d;
    rl_settlement st;
    rl_err err;
    ck_assert(tu_acquire_ex(lim, "user=u", 100, S(0), RL_RESERVE, 0, &d));
    ck_assert_int_eq(rl_settle(lim, d.reservation, FP(1050), S(0), &st, &err), RL_OK);
    ck_assert_int_eq(st.charged, FP(950));
    ck_assert_int_eq(st.refunded, 0);
    /* 1050 used of 1000: -50; a cost of 1 waits for 51 at 10/s */
    ck_assert(!tu_acquire(lim, "user=u", 1, S(0), &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), -50);
    ck_assert_int_eq(d.retry_after, S(5.1));
    ck_assert(tu_acquire(lim, "user=u", 1, S(5.1), &d));
    tu_free(lim);
}
END_TEST

START_TEST(refund_is_capped_at_capacity)
{
    rl_limiter *lim = tu_limiter(reserve_cfg);
    rl_decision d;
    rl_settlement st;
    rl_err err;
    ck_assert(tu_acquire_ex(lim, "user=u", 200, S(0), RL_RESERVE, 0, &d));
    /* by t = 25 the bucket is full again (200 at 10/s): the refund cannot lift it past 1000 */
    ck_assert_int_eq(rl_settle(lim, d.reservation, 0, S(25), &st, &err), RL_OK);
    ck_assert_int_eq(st.refunded, FP(200));
    ck_assert(tu_acquire_ex(lim, "user=u", 1, S(25), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 1000);
    tu_free(lim);
}
END_TEST

START_TEST(window_refund_only_in_its_window)
{
    rl_limiter *lim = tu_limiter("{\"levels\": [{\"name\": \"k\", \"rules\": [{\"type\": "
                                 "\"fixed_window\", \"limit\": 10, \"window\": 60}]}]}");
    rl_decision d;
    rl_settlement st;
    rl_err err;
    ck_assert(tu_acquire_ex(lim, "k=a", 8, S(10), RL_RESERVE, 0, &d));
    ck_assert_int_eq(rl_settle(lim, d.reservation, FP(3), S(20), &st, &err), RL_OK);
    ck_assert(tu_acquire_ex(lim, "k=a", 1, S(20), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "k"), 7);
    /* taken in [0, 60), settled in [60, 120): the rolled-over window is left alone */
    ck_assert(tu_acquire_ex(lim, "k=b", 8, S(50), RL_RESERVE, 0, &d));
    ck_assert_int_eq(rl_settle(lim, d.reservation, 0, S(70), &st, &err), RL_OK);
    ck_assert(tu_acquire_ex(lim, "k=b", 1, S(70), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "k"), 10);
    /* a charge after the roll-over counts in the current window */
    ck_assert(tu_acquire_ex(lim, "k=c", 2, S(100), RL_RESERVE, 0, &d));
    ck_assert_int_eq(rl_settle(lim, d.reservation, FP(6), S(130), &st, &err), RL_OK);
    ck_assert(tu_acquire_ex(lim, "k=c", 1, S(130), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "k"), 6);
    tu_free(lim);
}
END_TEST

START_TEST(concurrency_release_and_expiry)
{
    rl_limiter *lim = tu_limiter(reserve_cfg);
    rl_decision d;
    rl_err err;
    rl_stats stats;
    char a[RL_RESERVATION_ID], b[RL_RESERVATION_ID];
    /* a concurrency rule makes a reservation even without "reserve" */
    ck_assert(tu_acquire(lim, "user=u", 1, S(0), &d));
    memcpy(a, d.reservation, sizeof a);
    ck_assert(tu_acquire(lim, "user=u", 1, S(1), &d));
    memcpy(b, d.reservation, sizeof b);
    ck_assert_str_ne(a, b);
    ck_assert(!tu_acquire(lim, "user=u", 1, S(2), &d));
    ck_assert_str_eq(tu_blocked_by(lim, &d), "user: concurrency(2)");
    ck_assert_str_eq(d.reservation, "");
    ck_assert_int_eq(rl_release(lim, a, S(3), &err), RL_OK);
    ck_assert_int_eq(rl_release(lim, a, S(3), &err), RL_ENOTFOUND);
    ck_assert(tu_acquire(lim, "user=u", 1, S(4), &d));
    ck_assert(!tu_acquire(lim, "user=u", 1, S(5), &d));
    rl_limiter_stats(lim, &stats);
    ck_assert_int_eq(stats.reservations_active, 2);
    ck_assert_int_eq(stats.reservations_expired, 0);
    /* b expires at 31 (TTL 30): before the sweep it is already unknown, and the sweep frees
     * its slot */
    ck_assert_int_eq(rl_settle(lim, b, FP(1), S(31), &(rl_settlement){0}, &err), RL_ENOTFOUND);
    rl_limiter_tick(lim, S(31));
    rl_limiter_stats(lim, &stats);
    ck_assert_int_eq(stats.reservations_active, 1);
    ck_assert_int_eq(stats.reservations_expired, 1);
    ck_assert(tu_acquire(lim, "user=u", 1, S(31), &d));
    ck_assert_int_eq(rl_release(lim, b, S(31), &err), RL_ENOTFOUND);
    tu_free(lim);
}
END_TEST

/* ---- priorities --------------------------------------------------------------------------- */

START_TEST(reserved_share_for_priority)
{
    rl_limiter *lim = tu_limiter(
        "{\"levels\": [{\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": "
        "\"token_bucket\", \"capacity\": 10, \"per_second\": 1, \"reserved\": {\"fraction\": "
        "0.2, \"min_priority\": 1}}]}]}");
    rl_decision d;
    for (int i = 0; i < 8; i++)
        ck_assert(tu_acquire_ex(lim, "", 1, S(0), 0, 0, &d));
    /* low priority stops at 2 left; it waits for 1 more token */
    ck_assert(!tu_acquire_ex(lim, "", 1, S(0), 0, 0, &d));
    ck_assert_int_eq(d.retry_after, S(1));
    ck_assert_double_eq(tu_remaining(lim, &d, "global"), 2);
    ck_assert(tu_acquire_ex(lim, "", 1, S(0), 0, 1, &d));
    ck_assert(tu_acquire_ex(lim, "", 1, S(0), 0, 5, &d));
    ck_assert(!tu_acquire_ex(lim, "", 1, S(0), 0, 1, &d));
    /* more than capacity minus the share never fits at low priority */
    ck_assert(!tu_acquire_ex(lim, "", 9, S(100), 0, 0, &d));
    ck_assert_int_eq(d.retry_after, RL_WAIT_NEVER);
    ck_assert(tu_acquire_ex(lim, "", 9, S(100), 0, 1, &d));
    tu_free(lim);
}
END_TEST

/* ---- tiers -------------------------------------------------------------------------------- */

static const char *tier_cfg =
    "{\"levels\": [{\"name\": \"user\", \"tiered\": true}],"
    " \"tiers\": {"
    "  \"free\": [{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": 1, \"name\": "
    "\"free\"}],"
    "  \"enterprise\": [{\"type\": \"token_bucket\", \"capacity\": 100, \"per_second\": 10, "
    "\"name\": \"ent\"}],"
    "  \"windowed\": [{\"type\": \"fixed_window\", \"limit\": 3, \"window\": 60}],"
    "  \"two\": [{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": 1}, "
    "{\"type\": \"token_bucket\", \"capacity\": 50, \"per_second\": 0.5, \"name\": \"slow\"}]},"
    " \"default_tier\": \"free\", \"quotas\": {\"alice\": \"enterprise\"}}";

/* A plan past its bounds is refused and changes nothing: a composed key longer than 1024 bytes
 * (after a tiered level whose custom list the decision held: the reference is given back),
 * and more than 64 rules in one decision. */
START_TEST(plans_past_their_bounds_change_nothing)
{
    rl_limiter *lim = tu_limiter(
        "{\"levels\": [{\"name\": \"user\", \"tiered\": true},"
        " {\"name\": \"abcde\", \"compose\": [\"a\", \"b\", \"c\", \"d\", \"e\"], \"rules\": "
        "[{\"type\": \"token_bucket\", \"capacity\": 5, \"per_second\": 1}]}],"
        " \"tiers\": {\"free\": [{\"type\": \"token_bucket\", \"capacity\": 10, "
        "\"per_second\": 0.001}]}, \"default_tier\": \"free\"}");
    rl_decision d;
    rl_err err;
    rl_rules *rules = rl_rules_new(1);
    ck_assert_int_eq(rl_rule_init(&rules->v[0], rl_limiter_config(lim)->reg, "token_bucket",
                                  &err),
                     RL_OK);
    ck_assert_int_eq(rl_rule_set_number(&rules->v[0], "capacity", 7, &err), RL_OK);
    ck_assert_int_eq(rl_rule_set_number(&rules->v[0], "per_second", 0.001, &err), RL_OK);
    ck_assert_int_eq(rl_rule_finish(&rules->v[0], &err), RL_OK);
    ck_assert_int_eq(rl_quota_set(lim, "erin", NULL, rules, &err), RL_OK);
    long refs = rules->refs;

    /* five parts of 205 bytes and four ':' are 1029 bytes; of 204, 1024 */
    char part[206], keys[1200];
    memset(part, 'x', sizeof part);
    part[205] = '\0';
    snprintf(keys, sizeof keys, "user=erin,a=%s,b=%s,c=%s,d=%s,e=%s", part, part, part, part,
             part);
    ck_assert_int_eq(tu_acquire_err(lim, keys, 1, S(0), &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "keys: the composed keys are too long");
    ck_assert_int_eq(rules->refs, refs);
    part[204] = '\0';
    snprintf(keys, sizeof keys, "user=erin,a=%s,b=%s,c=%s,d=%s,e=%s", part, part, part, part,
             part);
    ck_assert(tu_acquire(lim, keys, 1, S(0), &d));
    ck_assert_int_eq(d.applied[1].keylen, 1024);
    /* the refused request took nothing from erin's 7 */
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 6);
    ck_assert_int_eq(rules->refs, refs);
    tu_free(lim);

    /* a level of 16 rules named by five items: 80 would apply */
    char cfg[4096];
    size_t n = (size_t)snprintf(cfg, sizeof cfg, "{\"levels\": [{\"name\": \"l\", \"rules\": [");
    for (int r = 0; r < 16; r++)
        n += (size_t)snprintf(cfg + n, sizeof cfg - n,
                              "%s{\"type\": \"token_bucket\", \"capacity\": 1, "
                              "\"per_second\": 0.001, \"name\": \"r%d\"}",
                              r ? ", " : "", r);
    snprintf(cfg + n, sizeof cfg - n, "]}]}");
    lim = tu_limiter(cfg);
    rl_item items[5];
    static const char *const ik[5] = {"k0", "k1", "k2", "k3", "k4"};
    for (int i = 0; i < 5; i++)
        items[i] = (rl_item){.level = 0, .key = ik[i], .keylen = 2, .cost = FP(1)};
    rl_request req = {.items = items, .nitems = 5, .now = S(0)};
    ck_assert_int_eq(rl_acquire(lim, &req, &d, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "keys: more than 64 rules would apply");
    /* four items are 64 rules, and the refused request took nothing from the fifth's */
    req.nitems = 4;
    ck_assert_int_eq(rl_acquire(lim, &req, &d, &err), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(d.napplied, 64);
    rl_decision_done(&d);
    ck_assert(tu_acquire(lim, "l=k4", 1, S(0), &d));
    ck_assert(!tu_acquire(lim, "l=k0", 1, S(0), &d)); /* the four took their unit */
    tu_free(lim);
}
END_TEST

START_TEST(tiers_and_tier_changes)
{
    rl_limiter *lim = tu_limiter(tier_cfg);
    rl_decision d;
    rl_err err;
    const char *tier;
    rl_rules *rules;

    ck_assert(tu_acquire(lim, "user=bob", 5, S(0), &d));
    ck_assert_str_eq(d.applied[0].rule->name, "free");
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 5);
    ck_assert(tu_acquire(lim, "user=alice", 5, S(0), &d));
    ck_assert_str_eq(d.applied[0].rule->name, "ent");
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 95);

    /* upgrade: what bob used is kept */
    ck_assert_int_eq(rl_quota_set(lim, "bob", "enterprise", NULL, &err), RL_OK);
    ck_assert_int_eq(rl_quota_get(lim, "bob", &tier, &rules), RL_OK);
    ck_assert_str_eq(tier, "enterprise");
    rl_rules_unref(rules);
    ck_assert(tu_acquire(lim, "user=bob", 50, S(0), &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 45);
    /* downgrade: 55 used of a 10 bucket; refills at the free tier's 1/s */
    ck_assert_int_eq(rl_quota_set(lim, "bob", "free", NULL, &err), RL_OK);
    ck_assert(!tu_acquire(lim, "user=bob", 1, S(0), &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), -45);
    ck_assert_int_eq(d.retry_after, S(46));

    /* another rule type at the position: a fresh state */
    ck_assert_int_eq(rl_quota_set(lim, "bob", "windowed", NULL, &err), RL_OK);
    ck_assert(tu_acquire(lim, "user=bob", 1, S(0), &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 2);
    ck_assert_int_eq(rl_quota_set(lim, "bob", "free", NULL, &err), RL_OK);
    ck_assert(tu_acquire(lim, "user=bob", 1, S(0), &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 9);

    /* back to the default tier */
    ck_assert_int_eq(rl_quota_clear(lim, "alice"), 1);
    ck_assert_int_eq(rl_quota_clear(lim, "alice"), 0);
    ck_assert_int_eq(rl_quota_get(lim, "alice", &tier, &rules), RL_OK);
    ck_assert_str_eq(tier, "free");
    rl_rules_unref(rules);
    ck_assert(!tu_acquire(lim, "user=alice", 6, S(0), &d));
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 5);

    ck_assert_int_eq(rl_quota_set(lim, "carol", "platinum", NULL, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "tier: unknown tier \"platinum\"");
    ck_assert_int_eq(rl_quota_set(lim, "", "free", NULL, &err), RL_EINVAL);
    tu_free(lim);
}
END_TEST

START_TEST(custom_rules_for_one_key)
{
    rl_limiter *lim = tu_limiter(tier_cfg);
    rl_decision d;
    rl_err err;
    const char *tier;
    rl_rules *rules, *got;

    ck_assert(tu_acquire(lim, "user=dave", 4, S(0), &d));
    rules = rl_rules_new(1);
    ck_assert_int_eq(rl_rule_init(&rules->v[0], rl_limiter_config(lim)->reg, "token_bucket",
                                  &err),
                     RL_OK);
    ck_assert_int_eq(rl_rule_set_number(&rules->v[0], "capacity", 7, &err), RL_OK);
    ck_assert_int_eq(rl_rule_set_number(&rules->v[0], "per_second", 1, &err), RL_OK);
    ck_assert_int_eq(rl_rule_finish(&rules->v[0], &err), RL_OK);
    ck_assert_int_eq(rl_quota_set(lim, "dave", NULL, rules, &err), RL_OK);
    ck_assert_int_eq(rl_quota_get(lim, "dave", &tier, &got), RL_OK);
    ck_assert_ptr_null(tier);
    ck_assert_ptr_eq(got, rules);
    rl_rules_unref(got);
    /* same rule type: dave's 4 used carry over into the custom bucket of 7 */
    ck_assert(tu_acquire(lim, "user=dave", 1, S(0), &d));
    ck_assert_str_eq(d.applied[0].rule->name, "token_bucket(7, 1/s)");
    ck_assert_double_eq(tu_remaining(lim, &d, "user"), 2);
    /* a decision keeps its rules alive while the quota changes under it */
    rl_request req = {.desc = &(rl_descriptor){"user", 4, "dave", 4}, .ndesc = 1,
                      .cost = FP(1), .now = S(0)};
    ck_assert_int_eq(rl_acquire(lim, &req, &d, &err), RL_OK);
    ck_assert_int_eq(rl_quota_clear(lim, "dave"), 1);
    ck_assert_str_eq(d.applied[0].rule->name, "token_bucket(7, 1/s)");
    rl_decision_done(&d);
    tu_free(lim);
}
END_TEST

START_TEST(stale_state_is_dropped)
{
    rl_limiter *lim = tu_limiter(tier_cfg);
    rl_decision d;
    rl_err err;
    ck_assert_int_eq(rl_quota_set(lim, "erin", "two", NULL, &err), RL_OK);
    ck_assert(tu_acquire(lim, "user=erin", 1, S(0), &d));
    ck_assert_int_eq(d.napplied, 2);
    ck_assert_int_eq(rl_limiter_keys(lim, 0), 2);
    ck_assert_int_eq(rl_quota_set(lim, "erin", "free", NULL, &err), RL_OK);
    /* the second position's state has no rule any more; the first one is not idle yet */
    rl_limiter_tick(lim, S(0.5));
    ck_assert_int_eq(rl_limiter_keys(lim, 0), 1);
    rl_limiter_tick(lim, S(1));
    ck_assert_int_eq(rl_limiter_keys(lim, 0), 0);
    tu_free(lim);
}
END_TEST

/* ---- idle state --------------------------------------------------------------------------- */

START_TEST(idle_state_is_dropped_and_memory_returns)
{
    rl_limiter *lim = tu_limiter("{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
                                 "\"token_bucket\", \"capacity\": 10, \"per_second\": 10}]}]}");
    rl_decision d;
    char keys[64];
    for (int i = 0; i < 200000; i++) {
        snprintf(keys, sizeof keys, "user=user-%d", i);
        ck_assert(tu_acquire(lim, keys, 1, S(0), &d));
    }
    ck_assert_int_eq(rl_limiter_keys(lim, 0), 200000);
    for (int i = 0; i < 100; i++)
        rl_limiter_tick(lim, S(0.05));
    ck_assert_int_eq(rl_limiter_keys(lim, 0), 200000);
    /* full again after 0.1 s: indistinguishable from new keys, so dropped */
    for (int i = 0; i < 100; i++)
        rl_limiter_tick(lim, S(0.1));
    ck_assert_int_eq(rl_limiter_keys(lim, 0), 0);
    /* and a dropped key behaves like a new one */
    ck_assert(tu_acquire(lim, "user=user-7", 10, S(0.1), &d));
    tu_free(lim);
}
END_TEST

/* ---- shadow and charge ------------------------------------------------------------------- */

/* The applied rule named name in d. */
static const rl_applied *applied_named(const rl_decision *d, const char *name)
{
    for (size_t i = 0; i < d->napplied; i++)
        if (strcmp(d->applied[i].rule->name, name) == 0)
            return &d->applied[i];
    ck_abort_msg("no applied rule %s", name);
    return NULL;
}

/* The status of the rule named name in d. */
static const rl_rule_status *status_named(const rl_decision *d, const char *name)
{
    return tu_status(d, (size_t)(applied_named(d, name) - d->applied));
}

/* Buckets refilling 1/s: "real" of 2 enforced, shadow "wide" of 10 and "narrow" of 1. */
START_TEST(shadow_never_denies)
{
    rl_limiter *lim = tu_limiter(
        "{\"levels\": [{\"name\": \"user\", \"rules\": ["
        "{\"type\": \"token_bucket\", \"name\": \"real\", \"capacity\": 2, \"per_second\": 1},"
        "{\"type\": \"token_bucket\", \"name\": \"wide\", \"capacity\": 10, \"per_second\": 1, "
        "\"shadow\": true},"
        "{\"type\": \"token_bucket\", \"name\": \"narrow\", \"capacity\": 1, \"per_second\": 1, "
        "\"shadow\": true}]}]}");
    rl_decision d;
    /* allowed, and both shadow rules fit: each takes 1 */
    ck_assert(tu_acquire(lim, "user=a", 1, S(0), &d));
    ck_assert_int_eq(status_named(&d, "real")->remaining, FP(1));
    ck_assert_int_eq(status_named(&d, "wide")->remaining, FP(9));
    ck_assert_int_eq(status_named(&d, "narrow")->remaining, 0);
    ck_assert(applied_named(&d, "narrow")->shadow && !applied_named(&d, "narrow")->shadow_denied);
    ck_assert(!applied_named(&d, "real")->shadow);
    /* narrow is empty: it would deny (1 s), takes nothing, and the request is still allowed */
    ck_assert(tu_acquire(lim, "user=a", 1, S(0), &d));
    ck_assert_int_eq(d.retry_after, 0);
    ck_assert_int_eq(d.blocked, -1);
    ck_assert(applied_named(&d, "narrow")->shadow_denied);
    ck_assert_int_eq(applied_named(&d, "narrow")->wait, S(1));
    ck_assert_int_eq(status_named(&d, "narrow")->remaining, 0);
    ck_assert_int_eq(status_named(&d, "wide")->remaining, FP(8));
    ck_assert_int_eq(status_named(&d, "real")->remaining, 0);
    /* real is empty: denied by real alone; wide fits but a denied request takes nothing */
    ck_assert(!tu_acquire(lim, "user=a", 1, S(0), &d));
    ck_assert_str_eq(tu_blocked_by(lim, &d), "user: real");
    ck_assert_int_eq(d.retry_after, S(1));
    ck_assert_int_eq(status_named(&d, "wide")->remaining, FP(8));
    ck_assert(!applied_named(&d, "wide")->shadow_denied);
    ck_assert(applied_named(&d, "narrow")->shadow_denied);
    /* a second later real and narrow hold 1 again: both take */
    ck_assert(tu_acquire(lim, "user=a", 1, S(1), &d));
    ck_assert(!applied_named(&d, "narrow")->shadow_denied);
    ck_assert_int_eq(status_named(&d, "narrow")->remaining, 0);
    ck_assert_int_eq(status_named(&d, "wide")->remaining, FP(8)); /* 8 + 1 refilled - 1 */
    tu_free(lim);
}
END_TEST

/* A level's "shadow" makes every rule of it a shadow rule. */
START_TEST(shadow_level)
{
    rl_limiter *lim = tu_limiter(
        "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\", "
        "\"limit\": 5, \"window\": 60}]}, {\"name\": \"team\", \"shadow\": true, \"rules\": "
        "[{\"type\": \"fixed_window\", \"name\": \"try\", \"limit\": 1, \"window\": 60}]}]}");
    rl_decision d;
    ck_assert(tu_acquire(lim, "user=a,team=t", 1, S(0), &d));
    ck_assert(tu_acquire(lim, "user=a,team=t", 1, S(1), &d));
    const rl_applied *t = applied_named(&d, "try");
    ck_assert(t->shadow && t->shadow_denied);
    ck_assert_int_eq(t->wait, S(59));
    /* took 1 the first time, nothing the second */
    ck_assert_int_eq(status_named(&d, "try")->remaining, 0);
    ck_assert_int_eq(tu_remaining(lim, &d, "user"), 3);
    tu_free(lim);
}
END_TEST

/* "pay" of 2 refilling 1/s is charged; "gate" of 1 refilling 1/s is enforced. */
START_TEST(charge_goes_below_zero_and_checks_wait_it_out)
{
    rl_limiter *lim = tu_limiter(
        "{\"levels\": [{\"name\": \"user\", \"rules\": ["
        "{\"type\": \"token_bucket\", \"name\": \"pay\", \"capacity\": 2, \"per_second\": 1, "
        "\"charge\": true},"
        "{\"type\": \"token_bucket\", \"name\": \"gate\", \"capacity\": 1000, \"per_second\": "
        "1000}]}]}");
    rl_decision d;
    /* 5 does not fit 2, and is taken anyway: 2 - 5 = -3 */
    ck_assert(tu_acquire(lim, "user=a", 5, S(0), &d));
    ck_assert_int_eq(status_named(&d, "pay")->remaining, FP(-3));
    ck_assert_int_eq(applied_named(&d, "pay")->wait, RL_WAIT_NEVER); /* reported, not counted */
    ck_assert_int_eq(d.retry_after, 0);
    ck_assert(applied_named(&d, "pay")->charge);
    /* at 1: 4 used; a check of 1 waits until 1 is used: 3 s */
    ck_assert(!tu_acquire_ex(lim, "user=a", 1, S(1), RL_DRY_RUN, 0, &d));
    ck_assert_int_eq(d.retry_after, S(3));
    ck_assert_str_eq(tu_blocked_by(lim, &d), "user: pay");
    ck_assert_int_eq(status_named(&d, "pay")->remaining, FP(-2));
    /* a real request of 1 is never blocked by it: 5 used */
    ck_assert(tu_acquire(lim, "user=a", 1, S(1), &d));
    ck_assert_int_eq(status_named(&d, "pay")->remaining, FP(-3));
    /* at 4: 2 used, the check waits 1 s more; at 5 it fits */
    ck_assert(!tu_acquire_ex(lim, "user=a", 1, S(4), RL_DRY_RUN, 0, &d));
    ck_assert_int_eq(d.retry_after, S(1));
    ck_assert(tu_acquire_ex(lim, "user=a", 1, S(5), RL_DRY_RUN, 0, &d));
    ck_assert_int_eq(status_named(&d, "pay")->remaining, FP(1));
    tu_free(lim);
}
END_TEST

/* A request that another rule denies takes nothing from a charge rule. */
START_TEST(charge_takes_nothing_when_denied)
{
    rl_limiter *lim = tu_limiter(
        "{\"levels\": [{\"name\": \"user\", \"rules\": ["
        "{\"type\": \"token_bucket\", \"name\": \"pay\", \"capacity\": 10, \"per_second\": 1, "
        "\"charge\": true},"
        "{\"type\": \"fixed_window\", \"name\": \"gate\", \"limit\": 1, \"window\": 60, "
        "\"unit\": \"requests\"}]}]}");
    rl_decision d;
    ck_assert(tu_acquire(lim, "user=a", 4, S(0), &d));
    ck_assert(!tu_acquire(lim, "user=a", 4, S(0), &d));
    ck_assert_str_eq(tu_blocked_by(lim, &d), "user: gate");
    ck_assert_int_eq(d.retry_after, S(60));
    ck_assert_int_eq(status_named(&d, "pay")->remaining, FP(6));
    tu_free(lim);
}
END_TEST

/* ---- plug-ins ----------------------------------------------------------------------------- */

/* A deny list registered by the test itself (rule API version 2): keys starting with "bad-"
 * never fit. */
static rl_ns prefix_evaluate(const void *p, const void *st, const char *key, size_t keylen,
                             rl_ns now, rl_fp cost, rl_eval *ev)
{
    (void)p;
    (void)st;
    (void)now;
    (void)cost;
    (void)ev;
    return keylen >= 4 && memcmp(key, "bad-", 4) == 0 ? RL_WAIT_NEVER : 0;
}

static void prefix_name(const void *p, char *buf, size_t len)
{
    (void)p;
    snprintf(buf, len, "deny_prefix(bad-)");
}

static const rl_rule_type deny_prefix = {
    .api_version = 2,
    .name = "deny_prefix",
    .params_size = 8,
    .default_name = prefix_name,
    .evaluate = prefix_evaluate,
};

START_TEST(rule_type_registered_by_the_test)
{
    rl_registry *reg = rl_registry_new();
    ck_assert_int_eq(rl_register_rule_type(reg, &deny_prefix), 0);
    ck_assert_int_eq(rl_register_rule_type(reg, &deny_prefix), -1); /* names are unique */
    rl_limiter *lim = tu_limiter_with(
        reg, "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"deny_prefix\"}, "
             "{\"type\": \"token_bucket\", \"capacity\": 5, \"per_second\": 1}]}]}");
    rl_decision d;
    ck_assert(tu_acquire(lim, "user=good-1", 1, S(0), &d));
    ck_assert(!tu_acquire(lim, "user=bad-1", 1, S(0), &d));
    ck_assert_int_eq(d.retry_after, RL_WAIT_NEVER);
    ck_assert_str_eq(tu_blocked_by(lim, &d), "user: deny_prefix(bad-)");
    /* denied: the bucket of bad-1 is untouched */
    rl_registry_free(NULL);
    tu_free(lim);
}
END_TEST

/* A version 1 type (wait, take, status), as plug-ins were written before version 2: at most
 * "limit" taken per key, ever; a cost that does not fit waits "retry" seconds. */
typedef struct v1c_params {
    rl_fp retry_pad; /* a first parameter, so that the adapter's moved offsets are exercised */
    rl_fp limit;
    rl_ns retry;
} v1c_params;

static rl_ns v1c_wait(const void *pp, const void *st, const char *key, size_t keylen, rl_ns now,
                      rl_fp cost)
{
    const v1c_params *p = pp;
    (void)key;
    (void)keylen;
    (void)now;
    if (cost > p->limit)
        return RL_WAIT_NEVER;
    return *(const rl_fp *)st <= p->limit - cost ? 0 : p->retry;
}

static void v1c_take(const void *pp, void *st, rl_ns now, rl_fp cost)
{
    (void)pp;
    (void)now;
    *(rl_fp *)st += cost;
}

static void v1c_status(const void *pp, const void *st, rl_ns now, rl_rule_status *out)
{
    const v1c_params *p = pp;
    (void)now;
    out->limit = p->limit;
    out->remaining = p->limit - *(const rl_fp *)st;
    out->reset_after = 0;
    out->window = 0;
}

static void v1c_name(const void *pp, char *buf, size_t len)
{
    snprintf(buf, len, "v1_counter(%lld)", (long long)(((const v1c_params *)pp)->limit / RL_FP_ONE));
}

static const rl_param_def v1c_params_def[] = {
    {"pad", RL_PARAM_AMOUNT, offsetof(v1c_params, retry_pad), 0, 10, 0, 0, "unused"},
    {"limit", RL_PARAM_AMOUNT, offsetof(v1c_params, limit), 1, 100, 0, 1, "most taken"},
    {"retry", RL_PARAM_DURATION, offsetof(v1c_params, retry), 1, 10, 5, 0, "wait when full"},
};

static const rl_rule_type v1_counter = {
    .api_version = 1,
    .name = "v1_counter",
    .params = v1c_params_def,
    .nparams = 3,
    .params_size = sizeof(v1c_params),
    .state_size = sizeof(rl_fp),
    .default_name = v1c_name,
    .wait = v1c_wait,
    .take = v1c_take,
    .status = v1c_status,
};

/* The version 1 type decides and reports through the adapter exactly as it would alone. */
START_TEST(v1_type_adapted)
{
    rl_registry *reg = rl_registry_new();
    ck_assert_int_eq(rl_register_rule_type(reg, &v1_counter), 0);
    const rl_rule_type *t = rl_registry_find(reg, "v1_counter");
    ck_assert_uint_eq(t->api_version, RL_RULE_API_VERSION);
    ck_assert(t->evaluate != NULL && t->wait == NULL);
    rl_limiter *lim = tu_limiter_with(
        reg, "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"v1_counter\", "
             "\"limit\": 3}]}]}");
    ck_assert_str_eq(rl_limiter_config(lim)->levels[0].rules->v[0].name, "v1_counter(3)");
    rl_decision d;
    ck_assert(tu_acquire(lim, "user=a", 2, S(0), &d));
    /* 1 of 3 left; one more whole unit (2) does not fit: the rule's wait, 5 s */
    ck_assert_int_eq(tu_status(&d, 0)->limit, FP(3));
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(1));
    ck_assert_int_eq(tu_status(&d, 0)->next, S(5));
    ck_assert(!tu_acquire(lim, "user=a", 2, S(1), &d));
    ck_assert_int_eq(d.retry_after, S(5));
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(1)); /* denied: nothing taken */
    ck_assert(tu_acquire(lim, "user=a", 1, S(1), &d));
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    /* another key starts empty: full, nothing to wait for */
    ck_assert(tu_acquire_ex(lim, "user=b", 1, S(1), RL_DRY_RUN, 0, &d));
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(3));
    ck_assert_int_eq(tu_status(&d, 0)->next, 0);
    ck_assert(!tu_acquire(lim, "user=b", 4, S(1), &d));
    ck_assert_int_eq(d.retry_after, RL_WAIT_NEVER);
    tu_free(lim);
}
END_TEST

/* ---- statuses, worked out when read ------------------------------------------------------- */

/* A version 2 counter that counts its reports: at most "limit" taken per key, ever. */
static int counted_reports;

static rl_ns cnt_evaluate(const void *pp, const void *st, const char *key, size_t keylen,
                          rl_ns now, rl_fp cost, rl_eval *ev)
{
    (void)key;
    (void)keylen;
    (void)now;
    ev->w[0] = *(const rl_fp *)st;
    return ev->w[0] + cost <= *(const rl_fp *)pp ? 0 : RL_WAIT_NEVER;
}

static void cnt_commit(const void *pp, void *st, rl_eval *ev, rl_fp cost)
{
    (void)pp;
    ev->w[0] += cost;
    *(rl_fp *)st = ev->w[0];
}

static void cnt_report(const void *pp, const rl_eval *ev, rl_ns now, rl_rule_status *st)
{
    (void)now;
    counted_reports++;
    st->limit = *(const rl_fp *)pp;
    st->remaining = st->limit - ev->w[0];
    st->reset_after = st->window = st->next = 0;
}

static const rl_param_def cnt_params[] = {
    {"limit", RL_PARAM_AMOUNT, 0, 1, 100, 0, 1, "most taken"},
};

static const rl_rule_type reports_counted = {
    .api_version = 2,
    .name = "reports_counted",
    .params = cnt_params,
    .nparams = 1,
    .params_size = sizeof(rl_fp),
    .state_size = sizeof(rl_fp),
    .default_name = prefix_name,
    .eval_size = sizeof(rl_fp),
    .evaluate = cnt_evaluate,
    .commit = cnt_commit,
    .report = cnt_report,
};

/* A decision reports nothing until a status is read; the first read reports once, from what
 * the decision found, and a second read gives the same status without reporting again. */
START_TEST(status_reported_when_read)
{
    rl_registry *reg = rl_registry_new();
    ck_assert_int_eq(rl_register_rule_type(reg, &reports_counted), 0);
    ck_assert_int_eq(rl_register_rule_type(reg, &deny_prefix), 0);
    rl_limiter *lim = tu_limiter_with(
        reg, "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"deny_prefix\"}, "
             "{\"type\": \"reports_counted\", \"name\": \"counted\", \"limit\": 5}]}]}");
    rl_decision d;
    counted_reports = 0;
    ck_assert(tu_acquire(lim, "user=a", 2, S(0), &d));
    ck_assert(tu_acquire(lim, "user=a", 1, S(0), &d));
    ck_assert_int_eq(counted_reports, 0);
    ck_assert_ptr_null(rl_decision_status(&d, 0)); /* the deny list reports none */
    ck_assert_ptr_null(rl_decision_status(&d, 2)); /* no such applied rule */
    const rl_rule_status *st = rl_decision_status(&d, 1);
    ck_assert_int_eq(counted_reports, 1);
    ck_assert_int_eq(st->limit, FP(5));
    ck_assert_int_eq(st->remaining, FP(2)); /* 5 - 2 - 1 */
    ck_assert_ptr_eq(rl_decision_status(&d, 1), st);
    ck_assert_int_eq(st->remaining, FP(2));
    ck_assert_int_eq(counted_reports, 1);
    rl_decision_done(&d);
    /* denied: the status is what the rule had, nothing taken */
    ck_assert(!tu_acquire(lim, "user=a", 3, S(0), &d));
    ck_assert_int_eq(d.retry_after, RL_WAIT_NEVER);
    ck_assert_int_eq(tu_status(&d, 1)->remaining, FP(2));
    tu_free(lim);
}
END_TEST

/* A status read after later decisions changed the key is still the one of its own decision
 * (worked out by hand): a token bucket of 10 refilling 2/s, full at 0. */
START_TEST(status_of_its_own_decision)
{
    rl_limiter *lim = tu_limiter("{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
                                 "\"token_bucket\", \"capacity\": 10, \"per_second\": 2}]}]}");
    rl_decision d1, d2, d3;
    ck_assert(tu_acquire(lim, "user=a", 3, S(1), &d1));
    ck_assert(tu_acquire(lim, "user=a", 5, S(2), &d2)); /* 7 + 2 refilled = 9, 4 left */
    ck_assert(!tu_acquire(lim, "user=a", 6, S(2), &d3));
    /* d1: 7 left; full again in 3 / 2 = 1.5 s; 8 (one more whole unit) in 0.5 s */
    const rl_rule_status *s1 = tu_status(&d1, 0);
    ck_assert_int_eq(s1->limit, FP(10));
    ck_assert_int_eq(s1->remaining, FP(7));
    ck_assert_int_eq(s1->reset_after, S(1.5));
    ck_assert_int_eq(s1->next, S(0.5));
    ck_assert_int_eq(s1->window, S(5));
    /* d2: 4 left, full in 3 s; d3 denied: 6 of 4 waits 1 s, and took nothing */
    ck_assert_int_eq(tu_status(&d2, 0)->remaining, FP(4));
    ck_assert_int_eq(tu_status(&d2, 0)->reset_after, S(3));
    ck_assert_int_eq(tu_status(&d2, 0)->next, S(0.5));
    ck_assert_int_eq(d3.retry_after, S(1));
    ck_assert_int_eq(tu_status(&d3, 0)->remaining, FP(4));
    ck_assert_int_eq(tu_status(&d3, 0)->reset_after, S(3));
    rl_decision_done(&d1);
    rl_decision_done(&d2);
    rl_decision_done(&d3);
    tu_free(lim);
}
END_TEST

START_TEST(plugin_loaded_from_config)
{
    char cfg[1024];
    const char *build = getenv("RL_BUILD");
    snprintf(cfg, sizeof cfg,
             "{\"plugins\": [\"%s/plugins/librule_max_keys.so\"], \"levels\": [{\"name\": "
             "\"user\", \"rules\": [{\"type\": \"max_keys\", \"limit\": 2}]}]}",
             build ? build : "build");
    rl_limiter *lim = tu_limiter(cfg);
    rl_decision d;
    ck_assert(tu_acquire(lim, "user=a", 1, S(0), &d));
    ck_assert(tu_acquire(lim, "user=b", 1, S(0), &d));
    ck_assert(tu_acquire(lim, "user=a", 1, S(1), &d));
    ck_assert(!tu_acquire(lim, "user=c", 1, S(1), &d));
    ck_assert_str_eq(tu_blocked_by(lim, &d), "user: max_keys(2)");
    ck_assert_int_eq(d.retry_after, RL_WAIT_NEVER);
    /* admitted keys are never idle */
    rl_limiter_tick(lim, S(1000));
    ck_assert_int_eq(rl_limiter_keys(lim, 0), 2);
    tu_free(lim);
}
END_TEST

/* A version 2 plug-in (tests/plugins/rule_leaky_bucket.c): capacity 4 leaking 2/s. */
START_TEST(plugin_v2_loaded_from_config)
{
    char cfg[1024];
    const char *build = getenv("RL_BUILD");
    snprintf(cfg, sizeof cfg,
             "{\"plugins\": [\"%s/plugins/librule_leaky_bucket.so\"], \"levels\": [{\"name\": "
             "\"user\", \"rules\": [{\"type\": \"leaky_bucket\", \"capacity\": 4, "
             "\"per_second\": 2}]}]}",
             build ? build : "build");
    rl_limiter *lim = tu_limiter(cfg);
    rl_decision d;
    ck_assert(tu_acquire(lim, "user=a", 4, S(0), &d));
    /* full: empty in 2 s, room for one unit in 0.5 s; leaking all of 4 takes 2 s */
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    ck_assert_int_eq(tu_status(&d, 0)->reset_after, S(2));
    ck_assert_int_eq(tu_status(&d, 0)->next, S(0.5));
    ck_assert_int_eq(tu_status(&d, 0)->window, S(2));
    /* at 1 it holds 2: 3 waits until it holds 1, 0.5 s */
    ck_assert(!tu_acquire(lim, "user=a", 3, S(1), &d));
    ck_assert_int_eq(d.retry_after, S(0.5));
    ck_assert_str_eq(tu_blocked_by(lim, &d), "user: leaky_bucket(4, 2/s)");
    ck_assert(tu_acquire(lim, "user=a", 3, S(1.5), &d));
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    /* another key is empty */
    ck_assert(tu_acquire(lim, "user=b", 1, S(1.5), &d));
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(3));
    /* idle once it leaked everything: b (1 at 1.5) at 2, a (4 at 1.5) at 3.5 */
    rl_limiter_tick(lim, S(1.999999999));
    ck_assert_int_eq(rl_limiter_keys(lim, 0), 2);
    rl_limiter_tick(lim, S(2));
    ck_assert_int_eq(rl_limiter_keys(lim, 0), 1);
    for (int i = 0; i < 10; i++)
        rl_limiter_tick(lim, S(3.5));
    ck_assert_int_eq(rl_limiter_keys(lim, 0), 0);
    tu_free(lim);
}
END_TEST

/* ---- segments ------------------------------------------------------------------------------ */

static uint32_t seg_hash(int i, char *key, size_t *klen)
{
    *klen = (size_t)snprintf(key, 16, "k%d", i);
    return rl__rec_hash(rl__hash(key, *klen, 1), 0);
}

/* Keys that go idle while as many new ones arrive must not make a segment shrink at the end of
 * one sweep and grow back during the next: it shrinks only a pass after it stopped growing. */
START_TEST(segment_shrinks_a_pass_after_it_stops_growing)
{
    rl__seg s;
    char key[16];
    size_t klen;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < 1000; i++) {
        uint32_t h = seg_hash(i, key, &klen);
        ck_assert_uint_ne(rl__seg_insert(&s, h, 0, key, klen, 1, 0), RL__NONE);
    }
    uint32_t grown = s.cap;
    for (int i = 10; i < 1000; i++) {
        uint32_t h = seg_hash(i, key, &klen), at = rl__seg_find(&s, h, 0, key, klen);
        ck_assert_uint_ne(at, RL__NONE);
        rl__seg_remove(&s, at);
    }
    ck_assert_int_eq(rl__seg_shrink(&s), 0); /* grew during this pass */
    ck_assert_uint_eq(s.cap, grown);
    ck_assert_int_eq(rl__seg_shrink(&s), 1); /* no growth since: mostly empty, so smaller */
    ck_assert_uint_lt(s.cap, grown / 8);
    for (int i = 0; i < 10; i++) {
        uint32_t h = seg_hash(i, key, &klen);
        ck_assert_uint_ne(rl__seg_find(&s, h, 0, key, klen), RL__NONE);
    }
    rl__seg_free(&s);
}
END_TEST

/* Keys of one length that share their record hash are told apart by every byte: inline keys
 * are compared as loads from both ends, which must cover the middle at every length. */
START_TEST(records_sharing_a_hash_differ_in_any_byte)
{
    for (size_t len = 1; len <= 20; len++) {
        rl__seg s;
        char key[24][24];
        uint32_t at[24];
        memset(&s, 0, sizeof s);
        /* key p differs from "aaa..." in byte p only; key len is "aaa..." itself */
        for (size_t p = 0; p <= len; p++) {
            memset(key[p], 'a', len);
            if (p < len)
                key[p][p] = 'b';
            at[p] = rl__seg_insert(&s, 42, 0, key[p], len, 1, 0);
            ck_assert_uint_ne(at[p], RL__NONE);
        }
        for (size_t p = 0; p <= len; p++) {
            uint32_t i = rl__seg_find(&s, 42, 0, key[p], len);
            ck_assert_uint_ne(i, RL__NONE);
            ck_assert_int_eq(memcmp(rl__rec_key(&s.r[i]), key[p], len), 0);
        }
        char other[24];
        memset(other, 'a', len);
        other[len - 1] = 'c';
        ck_assert_uint_eq(rl__seg_find(&s, 42, 0, other, len), RL__NONE);
        rl__seg_free(&s);
    }
}
END_TEST

/* Where records of one home sit: k0..k19 within 19 slots of it, found there and nowhere
 * else, wrapped around the array's end for a home in its last slot. */
static void one_home_found(const rl__seg *s, uint32_t h, int from, int to)
{
    uint32_t home = (uint32_t)(((uint64_t)h * s->cap) >> 32), wrapped = 0;
    for (int i = from; i < to; i++) {
        char key[8];
        snprintf(key, sizeof key, "k%d", i);
        uint32_t at = rl__seg_find(s, h, 0, key, strlen(key));
        ck_assert_uint_ne(at, RL__NONE);
        ck_assert_int_eq(memcmp(rl__rec_key(&s->r[at]), key, strlen(key)), 0);
        ck_assert_uint_le((at + s->cap - home) % s->cap, 19);
        wrapped += at < home;
    }
    ck_assert(home + 19 < s->cap ? wrapped == 0 : wrapped > 0);
}

/* A find looks no further from a key's home than the segment's furthest record: records of
 * one home sit one after the other, 0 to 19 slots from it, so far is 19; a removal moves the
 * later ones back and leaves far as it was; a key of that home not held is not found. */
START_TEST(finds_stop_at_the_furthest_record)
{
    static const uint32_t homes[] = {42, UINT32_MAX};
    for (size_t hi = 0; hi < 2; hi++) {
        rl__seg s;
        char key[8];
        uint32_t h = homes[hi];
        memset(&s, 0, sizeof s);
        for (int i = 0; i < 20; i++) {
            snprintf(key, sizeof key, "k%d", i);
            ck_assert_uint_ne(rl__seg_insert(&s, h, 0, key, strlen(key), 1, 0), RL__NONE);
        }
        ck_assert_uint_eq(s.far, 19);
        one_home_found(&s, h, 0, 20);
        ck_assert_uint_eq(rl__seg_find(&s, h, 0, "k20", 3), RL__NONE);
        rl__seg_remove(&s, rl__seg_find(&s, h, 0, "k0", 2));
        ck_assert_uint_eq(s.far, 19);
        ck_assert_uint_eq(rl__seg_find(&s, h, 0, "k0", 2), RL__NONE);
        one_home_found(&s, h, 1, 20);
        rl__seg_free(&s);
    }
}
END_TEST

/* A find matches the slot as well as the hash and the key, whatever the record's type (a
 * position whose rule changed type is found, then given a state of the new type). */
START_TEST(records_sharing_hash_and_key_differ_by_slot_not_type)
{
    rl__seg s;
    memset(&s, 0, sizeof s);
    uint32_t a = rl__seg_insert(&s, 7, 0, "k", 1, 1, 0);
    uint32_t b = rl__seg_insert(&s, 7, 1, "k", 1, 2, 0);
    ck_assert_uint_ne(a, RL__NONE);
    ck_assert_uint_ne(b, RL__NONE);
    uint32_t i0 = rl__seg_find(&s, 7, 0, "k", 1), i1 = rl__seg_find(&s, 7, 1, "k", 1);
    ck_assert_uint_ne(i0, RL__NONE);
    ck_assert_uint_ne(i1, RL__NONE);
    ck_assert_uint_eq(s.r[i0].slot, 0);
    ck_assert_uint_eq(s.r[i0].type, 1);
    ck_assert_uint_eq(s.r[i1].slot, 1);
    ck_assert_uint_eq(s.r[i1].type, 2);
    ck_assert_uint_eq(rl__seg_find(&s, 7, 2, "k", 1), RL__NONE);
    ck_assert_uint_eq(rl__seg_find(&s, 8, 0, "k", 1), RL__NONE);
    rl__seg_free(&s);
}
END_TEST

/* A key is checked a word at a time, short keys as overlapping halves: a control character
 * or DEL at any position of a key of any length up to 20 is found, bytes above 0x7e are not
 * mistaken for one. */
START_TEST(control_characters_found_at_every_length_and_position)
{
    rl_limiter *lim = tu_limiter(key_levels);
    rl_err err;
    rl_decision d;
    static const char bad[] = {'\x01', '\x1f', '\x7f', '\t'};
    for (size_t len = 1; len <= 20; len++) {
        char buf[40];
        memcpy(buf, "user=", 5);
        for (size_t p = 0; p < len; p++)
            buf[5 + p] = (char)(p % 2 ? '\xff' : '~');
        buf[5 + len] = '\0';
        ck_assert(tu_acquire_ex(lim, buf, 1, S(0), RL_DRY_RUN, 0, &d));
        for (size_t p = 0; p < len; p++)
            buf[5 + p] = (char)('a' + p);
        ck_assert(tu_acquire_ex(lim, buf, 1, S(0), RL_DRY_RUN, 0, &d));
        for (size_t p = 0; p < len; p++)
            for (size_t b = 0; b < sizeof bad; b++) {
                char c = buf[5 + p];
                buf[5 + p] = bad[b];
                ck_assert_int_eq(tu_acquire_err(lim, buf, 1, S(0), &err), RL_EINVAL);
                ck_assert_str_eq(err.msg, "keys.user: must not hold control characters");
                buf[5 + p] = c;
            }
    }
    tu_free(lim);
}
END_TEST

/* Descriptor names are matched by length and their first and last four bytes, then whole
 * when longer than eight: names that share both ends still reach their own level. */
START_TEST(descriptor_names_sharing_their_ends)
{
    static const char *const names[] = {"a",       "b",       "ab",        "abc",      "abd",
                                        "abcd",    "abce",    "abcde",     "abxde",    "abcdefgh",
                                        "abcdxfgh", "abcdefghi", "abcdxefghi", "abcdyefghi"};
    size_t n = sizeof names / sizeof names[0];
    char json[4096], keys[512];
    size_t used = (size_t)snprintf(json, sizeof json, "{\"levels\": [");
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(json + used, sizeof json - used,
                                 "%s{\"name\": \"%s\", \"rules\": [{\"type\": \"token_bucket\", "
                                 "\"capacity\": %zu, \"per_second\": 1}]}",
                                 i ? ", " : "", names[i], i + 1);
    snprintf(json + used, sizeof json - used, "]}");
    rl_limiter *lim = tu_limiter(json);
    const rl_config *cfg = rl_limiter_config(lim);
    for (size_t i = 0; i < n; i++) {
        rl_decision d;
        snprintf(keys, sizeof keys, "%s=k", names[i]);
        ck_assert(tu_acquire(lim, keys, 1, S(0), &d));
        ck_assert_uint_eq(d.napplied, 1);
        ck_assert_str_eq(cfg->levels[d.applied[0].level].name, names[i]);
        ck_assert_int_eq(tu_status(&d, 0)->limit, (rl_fp)(i + 1) * RL_FP_ONE);
    }
    rl_err err;
    ck_assert_int_eq(tu_acquire_err(lim, "abcdzefghi=k", 1, S(0), &err), RL_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "keys.abcdzefghi: unknown descriptor"));
    ck_assert_int_eq(tu_acquire_err(lim, "abye=k", 1, S(0), &err), RL_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "keys.abye: unknown descriptor"));
    tu_free(lim);
}
END_TEST

/* ---- which rule blocks (rl__decision_blocked) ------------------------------------------- */

/* Three applied rules with their waits and items: the longest wait of an item that blocks
 * denies, the first of equal ones; a shadow item never blocks, a charge item only in a dry run
 * or when it takes nothing; shadow wins over charge. Worked out by hand. */
static const struct {
    rl_ns wait[3];
    uint8_t mode1; /* item 1's mode; items 0 and 2 are plain */
    rl_fp cost1;
    unsigned flags;
    int blocked;
    rl_ns retry;
} blocks_cases[] = {
    {{0, 0, 0}, 0, 1, 0, -1, 0},
    {{5, 9, 9}, 0, 1, 0, 1, 9},
    {{5, 9, 0}, RL_ITEM_SHADOW, 1, 0, 0, 5},
    {{5, 9, 0}, RL_ITEM_CHARGE, 1, 0, 0, 5},
    {{5, 9, 0}, RL_ITEM_CHARGE, 1, RL_DRY_RUN, 1, 9},
    {{5, 9, 0}, RL_ITEM_CHARGE, 0, 0, 1, 9},
    {{0, 9, 0}, RL_ITEM_SHADOW, 1, 0, -1, 0},
    {{5, 9, 0}, RL_ITEM_SHADOW | RL_ITEM_CHARGE, 1, RL_DRY_RUN, 0, 5},
    {{7, 3, 7}, 0, 1, 0, 0, 7},
};

START_TEST(which_rule_blocks)
{
    rl_plan plan = {.n = 3, .flags = blocks_cases[_i].flags};
    rl_decision d = {.napplied = 3, .allowed = 0, .blocked = 7, .retry_after = 1};
    for (size_t i = 0; i < 3; i++) {
        plan.items[i] = (rl_plan_item){.cost = 1, .need = 1};
        d.applied[i].wait = blocks_cases[_i].wait[i];
    }
    plan.items[1].mode = blocks_cases[_i].mode1;
    plan.items[1].cost = plan.items[1].need = blocks_cases[_i].cost1;
    rl__decision_blocked(&d, &plan);
    ck_assert_int_eq(d.blocked, blocks_cases[_i].blocked);
    ck_assert_int_eq(d.retry_after, blocks_cases[_i].retry);
    ck_assert_int_eq(d.allowed, blocks_cases[_i].blocked < 0);
}
END_TEST

/* ---- the store's prefetch hint ---------------------------------------------------------- */

/* A store that hands every call to a memory store but offers no prefetch: its decide then
 * hashes the keys itself, and must decide exactly as with the hint. */
typedef struct plain_store {
    rl_store base;
    rl_store *inner;
} plain_store;

static int ps_attach(void *cls, const rl_config *cfg, const rl_resolver *res, rl_err *err)
{
    plain_store *p = cls;
    return p->inner->ops->attach(p->inner->cls, cfg, res, err);
}

static int ps_decide(void *cls, const rl_plan *plan, rl_decision *d, rl_err *err)
{
    plain_store *p = cls;
    for (size_t i = 0; i < plan->n; i++)
        ck_assert_uint_eq(plan->items[i].hash, 0); /* no prefetch, no hint */
    return p->inner->ops->decide(p->inner->cls, plan, d, err);
}

static int ps_settle(void *cls, const char *id, const rl_actual *actual, rl_ns now,
                     const rl_outcome *o, rl_settlement *out, rl_err *err)
{
    plain_store *p = cls;
    return p->inner->ops->settle(p->inner->cls, id, actual, now, o, out, err);
}

static int ps_release(void *cls, const char *id, rl_ns now, const rl_outcome *o, rl_err *err)
{
    plain_store *p = cls;
    return p->inner->ops->release(p->inner->cls, id, now, o, err);
}

static void ps_tick(void *cls, rl_ns now)
{
    plain_store *p = cls;
    p->inner->ops->tick(p->inner->cls, now);
}

static size_t ps_keys(void *cls, size_t level)
{
    plain_store *p = cls;
    return p->inner->ops->keys(p->inner->cls, level);
}

static void ps_stats(void *cls, rl_stats *out)
{
    plain_store *p = cls;
    p->inner->ops->stats(p->inner->cls, out);
}

static void ps_destroy(void *cls)
{
    plain_store *p = cls;
    p->inner->ops->destroy(p->inner->cls);
    free(p);
}

static const rl_store_ops plain_ops = {
    .name = "plain",
    .attach = ps_attach,
    .decide = ps_decide,
    .settle = ps_settle,
    .release = ps_release,
    .tick = ps_tick,
    .keys = ps_keys,
    .stats = ps_stats,
    .destroy = ps_destroy,
};

START_TEST(store_without_prefetch_decides_the_same)
{
    const char *json =
        "{\"levels\": ["
        "{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 3, "
        "\"per_second\": 1}, {\"type\": \"fixed_window\", \"limit\": 5, \"window\": 10}]},"
        "{\"name\": \"team\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 4, "
        "\"per_second\": 0.5}]},"
        "{\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": "
        "\"concurrency\", \"limit\": 1000}]}]}";
    rl_limiter *hinted = tu_limiter(json);
    rl_registry *reg = rl_registry_new();
    rld_settings set;
    rl_config *cfg;
    rl_limiter *plain;
    rl_err err = {{0}};
    plain_store *ps = calloc(1, sizeof *ps);
    ps->base.ops = &plain_ops;
    ps->base.cls = ps;
    ps->inner = rl_memory_store_new();
    ck_assert_int_eq(rld_config_parse(json, strlen(json), reg, &set, &cfg, &err), RL_OK);
    rld_settings_clear(&set);
    ck_assert_int_eq(rl_limiter_new(cfg, &ps->base, &plain, &err), RL_OK);

    /* every answer, status included, is the same: allowed, waits, balances, next */
    static const char *const keys[] = {"user=ann,team=t1", "user=bob,team=t1",
                                       "user=a-key-longer-than-sixteen,team=t2"};
    for (int step = 0; step < 60; step++) {
        rl_decision a, b;
        const char *k = keys[step % 3];
        rl_ns now = S(0.25) * (step / 2);
        int ra = tu_acquire(hinted, k, 1, now, &a), rb = tu_acquire(plain, k, 1, now, &b);
        ck_assert_int_eq(ra, rb);
        ck_assert_int_eq(a.retry_after, b.retry_after);
        ck_assert_int_eq(a.blocked, b.blocked);
        ck_assert_uint_eq(a.napplied, b.napplied);
        for (size_t i = 0; i < a.napplied; i++) {
            ck_assert_int_eq(a.applied[i].wait, b.applied[i].wait);
            ck_assert_int_eq(a.applied[i].has_status, b.applied[i].has_status);
            ck_assert_int_eq(tu_status(&a, i)->remaining, tu_status(&b, i)->remaining);
            ck_assert_int_eq(tu_status(&a, i)->reset_after, tu_status(&b, i)->reset_after);
            ck_assert_int_eq(tu_status(&a, i)->next, tu_status(&b, i)->next);
        }
    }
    ck_assert_uint_eq(rl_limiter_keys(hinted, 0), rl_limiter_keys(plain, 0));
    tu_free(hinted);
    rl_limiter_free(plain);
    rl_registry_free(reg);
}
END_TEST

/* ---- concurrent callers ------------------------------------------------------------------- */

typedef struct worker {
    rl_limiter *lim;
    int id, n;
    int allowed;
} worker;

static void *hammer(void *arg)
{
    worker *w = arg;
    char user[32];
    snprintf(user, sizeof user, "u%d", w->id);
    rl_descriptor ds[2] = {{"user", 4, user, strlen(user)}, {"team", 4, "acme", 4}};
    for (int i = 0; i < w->n; i++) {
        rl_decision d;
        rl_err err;
        rl_request req = {.desc = ds, .ndesc = 2, .cost = RL_FP_ONE, .now = S(0) + i % 3};
        if (rl_acquire(w->lim, &req, &d, &err) != RL_OK)
            return NULL;
        w->allowed += d.allowed;
        rl_decision_done(&d);
    }
    return w;
}

START_TEST(threads_never_admit_more_than_the_limits)
{
    /* the team's 1000 are shared by 4 users of 300 each; refill is negligible */
    rl_limiter *lim = tu_limiter(
        "{\"levels\": ["
        "{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 300, "
        "\"per_second\": 0.000001}]},"
        "{\"name\": \"team\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 1000, "
        "\"per_second\": 0.000001}]}]}");
    enum { NT = 4 };
    pthread_t th[NT];
    worker w[NT];
    for (int i = 0; i < NT; i++) {
        w[i] = (worker){lim, i, 20000, 0};
        pthread_create(&th[i], NULL, hammer, &w[i]);
    }
    int total = 0;
    for (int i = 0; i < NT; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        ck_assert_ptr_eq(ret, &w[i]);
        ck_assert_int_le(w[i].allowed, 300);
        total += w[i].allowed;
    }
    ck_assert_int_eq(total, 1000);
    tu_free(lim);
}
END_TEST


/* ---- snapshots ---------------------------------------------------------------------------- */

static const char *snap_cfg =
    "{\"reservation_ttl\": 60, \"levels\": ["
    "{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 10, "
    "\"per_second\": 1}, {\"type\": \"sliding_window\", \"limit\": 5, \"window\": 100}]},"
    "{\"name\": \"team\", \"rules\": [{\"type\": \"concurrency\", \"limit\": 2}, "
    "{\"type\": \"sliding_window_counter\", \"limit\": 50, \"window\": 100}]},"
    "{\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"gcra\", "
    "\"per_second\": 100, \"burst\": 1000}, {\"type\": \"fixed_window\", \"limit\": 100, "
    "\"window\": 1000}]}]}";

static char snap_path[256];

static const char *snapshot_path(void)
{
    const char *b = getenv("RL_BUILD");
    snprintf(snap_path, sizeof snap_path, "%s/snap-%d.bin", b ? b : "build", (int)getpid());
    return snap_path;
}

/* User u1 of team t: 2 at t = 0 and 2 reserved at t = 1 (each takes one of the team's two
 * concurrency slots, so each makes a reservation); at t = 2 the full team denies 1 more. */
START_TEST(snapshot_round_trip)
{
    rl_limiter *a = tu_limiter(snap_cfg);
    rl_decision d;
    rl_err err;
    char id[RL_RESERVATION_ID];
    const char *path = snapshot_path();
    ck_assert(tu_acquire(a, "user=u1,team=t", 2, S(0), &d));
    ck_assert(tu_acquire_ex(a, "user=u1,team=t", 2, S(1), RL_RESERVE, 0, &d));
    memcpy(id, d.reservation, sizeof id);
    ck_assert(!tu_acquire(a, "user=u1,team=t", 1, S(2), &d));
    ck_assert_str_eq(tu_blocked_by(a, &d), "team: concurrency(2)");
    /* the bucket: 10 - 2 - 2 + 2 s of refill = 8 at t = 2 */
    ck_assert_double_eq(tu_remaining(a, &d, "user"), 8);
    ck_assert_int_eq(rl_limiter_save(a, path, &err), RL_OK);

    /* a new limiter with the same configuration picks up where the first stopped */
    rl_limiter *b = tu_limiter(snap_cfg);
    size_t loaded = 0;
    ck_assert_int_eq(rl_limiter_load(b, path, S(3), &loaded, &err), RL_OK);
    /* two rules on each of three levels, but the global gcra has refilled (4 at 100/s) and
     * is idle by t = 3: five key states; and two reservations */
    ck_assert_uint_eq(loaded, 7);
    rl_stats stats;
    rl_limiter_stats(b, &stats);
    ck_assert_int_eq(stats.reservations_active, 2);
    /* the team is still full; the bucket kept refilling through the restart: 9 at t = 3 */
    ck_assert(!tu_acquire(b, "user=u1,team=t", 1, S(3), &d));
    ck_assert_str_eq(tu_blocked_by(b, &d), "team: concurrency(2)");
    ck_assert_double_eq(tu_remaining(b, &d, "user"), 9);
    /* the log kept 2 + 2 of 5: 2 more must wait for the entry of t = 0 to expire at 100 */
    ck_assert(!tu_acquire_ex(b, "user=u1", 2, S(3), RL_DRY_RUN, 0, &d));
    ck_assert_int_eq(d.retry_after, S(97));
    /* the reservation made before the restart settles: 2 reserved, 0 used */
    rl_settlement st;
    ck_assert_int_eq(rl_settle(b, id, 0, S(3), &st, &err), RL_OK);
    ck_assert_int_eq(st.refunded, FP(2));
    ck_assert(tu_acquire_ex(b, "user=u1", 1, S(3), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_remaining(b, &d, "user"), 10); /* 9 + 2, capped at 10 */
    /* releasing it gives its slot back */
    ck_assert_int_eq(rl_release(b, id, S(3), &err), RL_OK);
    ck_assert(tu_acquire(b, "team=t", 1, S(3), &d));
    /* the counter and the global window came back too: 2 + 2 - 2 refunded + 1 */
    tu_acquire_ex(b, "team=t", 1, S(3), RL_DRY_RUN, 0, &d);
    ck_assert_double_eq(tu_status(&d, 1)->remaining / 1e6, 47);
    tu_acquire_ex(b, "", 1, S(3), RL_DRY_RUN, 0, &d);
    ck_assert_double_eq(tu_status(&d, 1)->remaining / 1e6, 97);
    unlink(path);
    tu_free(a);
    tu_free(b);
}
END_TEST

START_TEST(snapshot_into_a_changed_configuration)
{
    rl_limiter *a = tu_limiter(snap_cfg);
    rl_decision d;
    rl_err err;
    const char *path = snapshot_path();
    ck_assert(tu_acquire(a, "user=u1,team=t", 5, S(0), &d));
    ck_assert(tu_acquire(a, "user=u2", 1, S(0), &d));
    ck_assert_int_eq(rl_limiter_save(a, path, &err), RL_OK);
    /* levels reordered, team gone, the user's second rule now another type */
    rl_limiter *b = tu_limiter(
        "{\"levels\": ["
        "{\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"gcra\", "
        "\"per_second\": 100, \"burst\": 1000}]},"
        "{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 10, "
        "\"per_second\": 1}, {\"type\": \"fixed_window\", \"limit\": 3, \"window\": 100}]}]}");
    size_t loaded = 0;
    ck_assert_int_eq(rl_limiter_load(b, path, S(0), &loaded, &err), RL_OK);
    /* u1's and u2's buckets and the global gcra; the reservation of team t's slot lost all
     * its items but stays an id that can be released */
    ck_assert_uint_eq(loaded, 3 + 1);
    /* global comes first now: gcra, then the user's bucket and fixed window */
    ck_assert(tu_acquire_ex(b, "user=u1", 1, S(0), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_remaining(b, &d, "user"), 5);
    ck_assert_double_eq(tu_status(&d, 2)->remaining / 1e6, 3); /* a fresh fixed window */
    ck_assert_double_eq(tu_status(&d, 0)->remaining / 1e6, 994); /* 1000 - 5 - 1 */
    unlink(path);
    tu_free(a);
    tu_free(b);
}
END_TEST

START_TEST(snapshot_follows_each_rule_by_name_and_parameters)
{
    /* user: a (bucket of 10), b (bucket of 20), c (window of 50); u1 takes 3, then reserves
     * 2: a 5, b 15, c 45 */
    rl_limiter *x = tu_limiter(
        "{\"levels\": [{\"name\": \"user\", \"rules\": ["
        "{\"type\": \"token_bucket\", \"name\": \"a\", \"capacity\": 10, \"per_second\": 1},"
        "{\"type\": \"token_bucket\", \"name\": \"b\", \"capacity\": 20, \"per_second\": 1},"
        "{\"type\": \"fixed_window\", \"name\": \"c\", \"limit\": 50, \"window\": 100}]}]}");
    rl_decision d;
    rl_err err;
    char id[RL_RESERVATION_ID];
    const char *path = snapshot_path();
    ck_assert(tu_acquire(x, "user=u1", 3, S(0), &d));
    ck_assert(tu_acquire_ex(x, "user=u1", 2, S(0), RL_RESERVE, 0, &d));
    memcpy(id, d.reservation, sizeof id);
    ck_assert_int_eq(rl_limiter_save(x, path, &err), RL_OK);
    /* b first, c's limit raised, a last: a and b keep theirs where they moved, c starts anew
     * (a rule at a's old position of a's type, b, must not get a's state) */
    rl_limiter *y = tu_limiter(
        "{\"levels\": [{\"name\": \"user\", \"rules\": ["
        "{\"type\": \"token_bucket\", \"name\": \"b\", \"capacity\": 20, \"per_second\": 1},"
        "{\"type\": \"fixed_window\", \"name\": \"c\", \"limit\": 60, \"window\": 100},"
        "{\"type\": \"token_bucket\", \"name\": \"a\", \"capacity\": 10, \"per_second\": 1}]}]}");
    size_t loaded = 0;
    ck_assert_int_eq(rl_limiter_load(y, path, S(0), &loaded, &err), RL_OK);
    ck_assert_uint_eq(loaded, 2 + 1); /* a's and b's states, the reservation */
    ck_assert(tu_acquire_ex(y, "user=u1", 1, S(0), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_status(&d, 0)->remaining / 1e6, 15); /* b */
    ck_assert_double_eq(tu_status(&d, 1)->remaining / 1e6, 60); /* c, afresh */
    ck_assert_double_eq(tu_status(&d, 2)->remaining / 1e6, 5);  /* a */
    /* the reservation settles with the same rules: 2 back to a and b, nothing to the new c */
    rl_settlement st;
    ck_assert_int_eq(rl_settle(y, id, 0, S(0), &st, &err), RL_OK);
    ck_assert_int_eq(st.refunded, FP(2));
    ck_assert(tu_acquire_ex(y, "user=u1", 1, S(0), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_status(&d, 0)->remaining / 1e6, 17);
    ck_assert_double_eq(tu_status(&d, 1)->remaining / 1e6, 60);
    ck_assert_double_eq(tu_status(&d, 2)->remaining / 1e6, 7);
    /* renamed, a rule is another rule */
    ck_assert_int_eq(rl_limiter_save(y, path, &err), RL_OK);
    rl_limiter *z = tu_limiter(
        "{\"levels\": [{\"name\": \"user\", \"rules\": ["
        "{\"type\": \"token_bucket\", \"name\": \"b2\", \"capacity\": 20, \"per_second\": 1}]}]}");
    ck_assert_int_eq(rl_limiter_load(z, path, S(0), &loaded, &err), RL_OK);
    ck_assert(tu_acquire_ex(z, "user=u1", 1, S(0), RL_DRY_RUN, 0, &d));
    ck_assert_double_eq(tu_status(&d, 0)->remaining / 1e6, 20);
    unlink(path);
    tu_free(x);
    tu_free(y);
    tu_free(z);
}
END_TEST

START_TEST(snapshot_skips_idle_and_expired)
{
    rl_limiter *a = tu_limiter(reserve_cfg); /* bucket 1000 at 10/s, concurrency 2, TTL 30 */
    rl_decision d;
    rl_err err;
    const char *path = snapshot_path();
    ck_assert(tu_acquire_ex(a, "user=u", 10, S(0), RL_RESERVE, 0, &d));
    ck_assert_int_eq(rl_limiter_save(a, path, &err), RL_OK);
    /* at t = 40 the bucket is full again and the reservation expired: nothing to load but
     * the concurrency slot the reservation held, which its expiry would have given back */
    rl_limiter *b = tu_limiter(reserve_cfg);
    size_t loaded = 9;
    ck_assert_int_eq(rl_limiter_load(b, path, S(40), &loaded, &err), RL_OK);
    ck_assert_uint_eq(loaded, 1);
    rl_limiter_tick(b, S(40));
    ck_assert(tu_acquire(b, "user=u", 1, S(40), &d));
    ck_assert(tu_acquire(b, "user=u", 1, S(40), &d)); /* the slot held before is not leaked */
    unlink(path);
    tu_free(a);
    tu_free(b);
}
END_TEST

START_TEST(snapshot_missing_or_corrupt)
{
    rl_limiter *a = tu_limiter(snap_cfg);
    rl_decision d;
    rl_err err;
    size_t loaded = 7;
    const char *path = snapshot_path();
    unlink(path);
    ck_assert_int_eq(rl_limiter_load(a, path, S(0), &loaded, &err), RL_OK);
    ck_assert_uint_eq(loaded, 0);
    ck_assert(tu_acquire(a, "user=u1,team=t", 5, S(0), &d));
    ck_assert_int_eq(rl_limiter_save(a, path, &err), RL_OK);
    /* cut the file short: refused, and nothing of it stays loaded */
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    ck_assert_int_eq(truncate(path, size - 5), 0);
    rl_limiter *b = tu_limiter(snap_cfg);
    ck_assert_int_eq(rl_limiter_load(b, path, S(0), &loaded, &err), RL_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "truncated or malformed"));
    for (size_t l = 0; l < 3; l++)
        ck_assert_uint_eq(rl_limiter_keys(b, l), 0);
    /* not a snapshot at all */
    f = fopen(path, "wb");
    fputs("{\"levels\": []}", f);
    fclose(f);
    ck_assert_int_eq(rl_limiter_load(b, path, S(0), &loaded, &err), RL_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a ratelimitd snapshot"));
    /* a directory that does not exist cannot be written, and says so */
    ck_assert_int_eq(rl_limiter_save(a, "/nonexistent/dir/snap", &err), RL_EIO);
    ck_assert_str_eq(err.msg, "/nonexistent/dir/snap.tmp: No such file or directory");
    unlink(path);
    tu_free(a);
    tu_free(b);
}
END_TEST

/* Overwrites 8 bytes at offset off of the state of the first 'k' record of (level, slot) in the
 * snapshot at path (the layout memsnap.c documents). Returns 0, or -1 when there is none. */
static int patch_state(const char *path, uint16_t level, uint8_t slot, long off, int64_t v)
{
    FILE *f = fopen(path, "r+b");
    uint32_t n;
    uint16_t len;
    ck_assert_ptr_nonnull(f);
    fseek(f, 12, SEEK_SET); /* magic, byte order */
    for (int list = 0; list < 2; list++) {
        ck_assert_int_eq(fread(&n, 4, 1, f), 1);
        for (uint32_t i = 0; i < n; i++) {
            ck_assert_int_eq(fread(&len, 2, 1, f), 1);
            fseek(f, len, SEEK_CUR);
        }
    }
    int tag;
    while ((tag = fgetc(f)) == 'k') {
        struct {
            uint16_t level;
            uint8_t slot, type;
        } h;
        uint16_t klen;
        uint32_t slen;
        ck_assert_int_eq(fread(&h, 4, 1, f), 1);
        fseek(f, 8, SEEK_CUR); /* the rule's fingerprint */
        ck_assert_int_eq(fread(&klen, 2, 1, f), 1);
        fseek(f, klen, SEEK_CUR);
        ck_assert_int_eq(fread(&slen, 4, 1, f), 1);
        if (h.level == level && h.slot == slot) {
            ck_assert_int_le(off + 8, (long)slen);
            fseek(f, off, SEEK_CUR);
            ck_assert_int_eq(fwrite(&v, 8, 1, f), 1);
            fclose(f);
            return 0;
        }
        fseek(f, slen, SEEK_CUR);
    }
    fclose(f);
    return -1;
}

/* One field of one rule type's state set to what no decision leaves there. snap_cfg's rules:
 * user (0): token_bucket 10 at 1/s {used, last, frac}, sliding_window 5 per 100 s (saved as
 * {sum, last, count, entries}); team (1): concurrency 2 {held}, sliding_window_counter 50 per
 * 100 s {last, cur, prev}; global (2): gcra 100/s burst 1000 {tat, rem, last}, fixed_window
 * 100 per 1000 s {last, count}. */
static const struct bad_state {
    uint16_t level;
    uint8_t slot;
    long off;
    int64_t v;
} bad_states[] = {
    {0, 0, 0, -1},                     /* a bucket with less than nothing used */
    {0, 0, 16, 1000000000},            /* a refill remainder of a whole second */
    {0, 1, 0, 3000001},                /* a log total that is not its entries' (3) */
    {0, 1, 8, -1},                     /* a time before 1970 */
    {1, 0, 0, -1000000},               /* a slot held below zero */
    {1, 1, 8, 4000000000000000001},    /* a count past what charges saturate at */
    {2, 0, 8, 100000000},              /* a remainder of a division by the rate (10^8) */
    {2, 1, 0, ((int64_t)1 << 62) + 1}, /* a time after 2116 */
};

/* A state that no rule could be in refuses the whole snapshot, as a damaged file does. */
START_TEST(snapshot_refuses_a_state_out_of_bounds)
{
    const struct bad_state *b = &bad_states[_i];
    rl_limiter *a = tu_limiter(snap_cfg);
    rl_decision d;
    rl_err err;
    size_t loaded = 0;
    const char *path = snapshot_path();
    ck_assert(tu_acquire(a, "user=u1,team=t", 3, S(1), &d));
    ck_assert_int_eq(rl_limiter_save(a, path, &err), RL_OK);
    ck_assert_int_eq(patch_state(path, b->level, b->slot, b->off, b->v), 0);
    rl_limiter *c = tu_limiter(snap_cfg);
    ck_assert_int_eq(rl_limiter_load(c, path, S(1), &loaded, &err), RL_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, ": a key's state is outside its rule type's bounds"));
    for (size_t l = 0; l < 3; l++)
        ck_assert_uint_eq(rl_limiter_keys(c, l), 0);
    unlink(path);
    tu_free(a);
    tu_free(c);
}
END_TEST

START_TEST(snapshot_state_at_its_bounds_loads)
{
    rl_limiter *a = tu_limiter(snap_cfg);
    rl_decision d;
    rl_err err;
    size_t loaded = 0;
    const char *path = snapshot_path();
    ck_assert(tu_acquire(a, "user=u1,team=t", 3, S(1), &d));
    ck_assert_int_eq(rl_limiter_save(a, path, &err), RL_OK);
    /* team's counter at the saturation bound (4 * 10^18 units, as after charges far past its
     * 50) and the bucket's remainder just under a second: both valid, all six states and the
     * concurrency slot's reservation load */
    ck_assert_int_eq(patch_state(path, 1, 1, 8, 4000000000000000000), 0);
    ck_assert_int_eq(patch_state(path, 0, 0, 16, 999999999), 0);
    rl_limiter *c = tu_limiter(snap_cfg);
    ck_assert_int_eq(rl_limiter_load(c, path, S(1), &loaded, &err), RL_OK);
    ck_assert_uint_eq(loaded, 7);
    /* that count, the previous window's in [100, 200), weighs 4 * 10^18 * (200 - t) / 100 s:
     * at most 49 units only when 200 - t <= 1.225 ns, so one more fits at 200 s - 1 ns */
    ck_assert(!tu_acquire_ex(c, "team=t", 1, S(1), RL_DRY_RUN, 0, &d));
    ck_assert_int_eq(d.retry_after, S(199) - 1);
    unlink(path);
    tu_free(a);
    tu_free(c);
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
    tcase_add_test(tc, an_insert_beside_a_found_record);
    tcase_add_test(tc, single_bucket_trace);
    suite_add_tcase(s, tc);

    tc = tcase_create("levels");
    tcase_add_test(tc, composed_and_default_keys);
    tcase_add_test(tc, levels_read_their_descriptors);
    tcase_add_test(tc, bad_requests_change_nothing);
    tcase_add_test(tc, dry_run_takes_nothing);
    tcase_add_test(tc, requests_and_cost_units_in_one_level);
    tcase_add_test(tc, ties_name_the_first_rule);
    suite_add_tcase(s, tc);

    tc = tcase_create("reservations");
    tcase_add_test(tc, reserve_refund_and_settled_twice);
    tcase_add_test(tc, charge_drives_the_bucket_below_zero);
    tcase_add_test(tc, refund_is_capped_at_capacity);
    tcase_add_test(tc, window_refund_only_in_its_window);
    tcase_add_test(tc, concurrency_release_and_expiry);
    suite_add_tcase(s, tc);

    tc = tcase_create("tiers");
    tcase_add_test(tc, reserved_share_for_priority);
    tcase_add_test(tc, tiers_and_tier_changes);
    tcase_add_test(tc, custom_rules_for_one_key);
    tcase_add_test(tc, plans_past_their_bounds_change_nothing);
    tcase_add_test(tc, stale_state_is_dropped);
    suite_add_tcase(s, tc);

    tc = tcase_create("stores");
    tcase_add_test(tc, segment_shrinks_a_pass_after_it_stops_growing);
    tcase_add_test(tc, records_sharing_a_hash_differ_in_any_byte);
    tcase_add_test(tc, records_sharing_hash_and_key_differ_by_slot_not_type);
    tcase_add_test(tc, finds_stop_at_the_furthest_record);
    tcase_add_test(tc, control_characters_found_at_every_length_and_position);
    tcase_add_test(tc, descriptor_names_sharing_their_ends);
    tcase_add_test(tc, store_without_prefetch_decides_the_same);
    tcase_add_loop_test(tc, which_rule_blocks, 0, sizeof blocks_cases / sizeof blocks_cases[0]);
    suite_add_tcase(s, tc);

    tc = tcase_create("store");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, idle_state_is_dropped_and_memory_returns);
    tcase_add_test(tc, rule_type_registered_by_the_test);
    tcase_add_test(tc, plugin_loaded_from_config);
    tcase_add_test(tc, v1_type_adapted);
    tcase_add_test(tc, status_reported_when_read);
    tcase_add_test(tc, status_of_its_own_decision);
    tcase_add_test(tc, shadow_never_denies);
    tcase_add_test(tc, shadow_level);
    tcase_add_test(tc, charge_goes_below_zero_and_checks_wait_it_out);
    tcase_add_test(tc, charge_takes_nothing_when_denied);
    tcase_add_test(tc, plugin_v2_loaded_from_config);
    tcase_add_test(tc, threads_never_admit_more_than_the_limits);
    suite_add_tcase(s, tc);

    tc = tcase_create("snapshots");
    tcase_add_test(tc, snapshot_round_trip);
    tcase_add_test(tc, snapshot_into_a_changed_configuration);
    tcase_add_test(tc, snapshot_follows_each_rule_by_name_and_parameters);
    tcase_add_test(tc, snapshot_skips_idle_and_expired);
    tcase_add_test(tc, acquire_many_is_one_after_the_other);
    tcase_add_test(tc, snapshot_missing_or_corrupt);
    tcase_add_loop_test(tc, snapshot_refuses_a_state_out_of_bounds, 0,
                        sizeof bad_states / sizeof bad_states[0]);
    tcase_add_test(tc, snapshot_state_at_its_bounds_loads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(limiter_suite()) ? 1 : 0;
}
