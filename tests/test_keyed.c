/*
 * test_keyed.c - keyed levels (rules chosen by the key) and requests given as items (several
 * keys of one level, each with its own cost), through the public API of the core.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Two rule lists: keys starting with "a" get 2 per 10 s, keys starting with "b" 5 per 10 s,
 * others none. */
typedef struct two_lists {
    rl_rules *a, *b;
    int calls;
} two_lists;

static rl_rules *fixed(rl_registry *reg, double limit, const char *name)
{
    rl_rules *rs = rl_rules_new(1);
    rl_err err;
    ck_assert_ptr_nonnull(rs);
    ck_assert_int_eq(rl_rule_init(&rs->v[0], reg, "fixed_window", &err), RL_OK);
    ck_assert_int_eq(rl_rule_set_number(&rs->v[0], "limit", limit, &err), RL_OK);
    ck_assert_int_eq(rl_rule_set_number(&rs->v[0], "window", 10, &err), RL_OK);
    ck_assert_int_eq(rl_rule_set_name(&rs->v[0], name, &err), RL_OK);
    ck_assert_int_eq(rl_rule_set_unit(&rs->v[0], "cost", &err), RL_OK);
    ck_assert_int_eq(rl_rule_finish(&rs->v[0], &err), RL_OK);
    return rs;
}

static const rl_rules *lists_for(void *ctx, const char *key, size_t keylen, rl_rules **ref)
{
    two_lists *tl = ctx;
    rl_rules *rs = keylen && key[0] == 'a' ? tl->a : keylen && key[0] == 'b' ? tl->b : NULL;
    __atomic_add_fetch(&tl->calls, 1, __ATOMIC_RELAXED);
    rl_rules_ref(rs);
    *ref = rs;
    return rs;
}

typedef struct fixture {
    rl_registry *reg;
    two_lists tl;
    rl_limiter *lim;
} fixture;

static void setup(fixture *f)
{
    rl_err err;
    rl_config *cfg;
    f->reg = rl_registry_new();
    f->tl.a = fixed(f->reg, 2, "a-limit");
    f->tl.b = fixed(f->reg, 5, "b-limit");
    f->tl.calls = 0;
    cfg = rl_config_new(f->reg);
    ck_assert_int_eq(rl_config_add_keyed_level(cfg, "k", lists_for, &f->tl, &err), RL_OK);
    ck_assert_int_eq(rl_config_finish(cfg, NULL, &err), RL_OK);
    ck_assert_int_eq(rl_limiter_new(cfg, NULL, &f->lim, &err), RL_OK);
}

static void teardown(fixture *f)
{
    rl_limiter_free(f->lim);
    rl_rules_unref(f->tl.a);
    rl_rules_unref(f->tl.b);
    rl_registry_free(f->reg);
}

/* Decides items "key:cost key:cost ..." on level 0 at time now (seconds). */
static int decide(fixture *f, const char *spec, double now, rl_decision *d)
{
    rl_item it[64];
    char keys[64][32];
    size_t n = 0;
    const char *p = spec;
    while (*p) {
        double cost;
        int used;
        ck_assert_int_eq(sscanf(p, " %31[^:]:%lf%n", keys[n], &cost, &used), 2);
        it[n] = (rl_item){.level = 0,
                          .key = keys[n],
                          .keylen = strlen(keys[n]),
                          .cost = (rl_fp)(cost * 1e6 + 0.5)};
        n++;
        p += used;
        while (*p == ' ')
            p++;
    }
    rl_request req = {.items = it, .nitems = n, .now = S(now)};
    rl_err err;
    ck_assert_int_eq(rl_acquire(f->lim, &req, d, &err), RL_OK);
    rl_decision_done(d);
    return d->allowed;
}

START_TEST(rules_follow_the_key)
{
    fixture f;
    rl_decision d;
    setup(&f);
    /* a1 has 2 a window, b1 has 5; c1 has no rules and never limits */
    ck_assert(decide(&f, "a1:1 b1:4 c1:100", 0, &d));
    ck_assert_uint_eq(d.napplied, 2);
    ck_assert_str_eq(d.applied[0].rule->name, "a-limit");
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(1));
    ck_assert_str_eq(d.applied[1].rule->name, "b-limit");
    ck_assert_int_eq(tu_status(&d, 1)->remaining, FP(1));
    /* a1 fits 1 more, b1 does not fit 2: denied, and a1 keeps its 1 */
    ck_assert(!decide(&f, "a1:1 b1:2", 1, &d));
    ck_assert_int_eq(d.blocked, 1);
    ck_assert_int_eq(d.retry_after, S(9));
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(1));
    ck_assert(decide(&f, "a1:1", 2, &d));
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    /* the next window starts at 10 */
    ck_assert(decide(&f, "a1:2 b1:5", 10, &d));
    teardown(&f);
}
END_TEST

START_TEST(several_keys_of_one_level_are_one_decision)
{
    fixture f;
    rl_decision d;
    setup(&f);
    /* twenty keys of one level, in an order unrelated to their segments: all or nothing */
    char spec[1024] = "";
    for (int i = 19; i >= 0; i--) {
        size_t n = strlen(spec);
        snprintf(spec + n, sizeof spec - n, "a%d:1 ", i * 7919 % 101);
    }
    ck_assert(decide(&f, spec, 0, &d));
    ck_assert_uint_eq(d.napplied, 20);
    ck_assert(decide(&f, spec, 0, &d));
    for (size_t i = 0; i < d.napplied; i++)
        ck_assert_int_eq(tu_status(&d, i)->remaining, 0);
    /* a third take fails on every key and takes nothing from the new key a1000 */
    char more[1100];
    snprintf(more, sizeof more, "a1000:1 %s", spec);
    ck_assert(!decide(&f, more, 0, &d));
    ck_assert(decide(&f, "a1000:2", 0, &d));
    teardown(&f);
}
END_TEST

START_TEST(cost_zero_checks_without_taking)
{
    fixture f;
    rl_decision d;
    setup(&f);
    ck_assert(decide(&f, "a1:0", 0, &d));
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(2));
    ck_assert(decide(&f, "a1:2", 0, &d));
    /* exhausted, not over: a check of 0 fits, a take of 1 does not */
    ck_assert(decide(&f, "a1:0", 0, &d));
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    ck_assert(!decide(&f, "a1:1", 0, &d));
    teardown(&f);
}
END_TEST

START_TEST(bad_items_are_refused)
{
    fixture f;
    rl_decision d;
    rl_err err;
    setup(&f);
    rl_item it = {.level = 1, .key = "a", .keylen = 1, .cost = 1};
    rl_request req = {.items = &it, .nitems = 1};
    ck_assert_int_eq(rl_acquire(f.lim, &req, &d, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "items[0].level: no such level");
    it.level = 0;
    it.keylen = 0;
    ck_assert_int_eq(rl_acquire(f.lim, &req, &d, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "items[0].key: must be 1 to 1024 bytes");
    it.keylen = 1;
    it.cost = -1;
    ck_assert_int_eq(rl_acquire(f.lim, &req, &d, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "items[0].cost: must be a number from 0 to 1000000000000");
    it.cost = 1;
    req.flags = RL_RESERVE;
    ck_assert_int_eq(rl_acquire(f.lim, &req, &d, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "reserve: not with items");
    teardown(&f);
}
END_TEST

START_TEST(keyed_level_by_descriptor)
{
    fixture f;
    rl_decision d;
    setup(&f);
    /* a request of descriptors names the keyed level's key by its name */
    rl_descriptor ds = {.name = "k", .name_len = 1, .value = "b7", .value_len = 2};
    rl_request req = {.desc = &ds, .ndesc = 1, .cost = FP(5)};
    rl_err err;
    ck_assert_int_eq(rl_acquire(f.lim, &req, &d, &err), RL_OK);
    ck_assert(d.allowed);
    rl_decision_done(&d);
    ck_assert_int_eq(rl_acquire(f.lim, &req, &d, &err), RL_OK);
    ck_assert(!d.allowed);
    ck_assert_str_eq(d.applied[0].rule->name, "b-limit");
    rl_decision_done(&d);
    /* the sweep finds the rules of a stored key through the level's function */
    int before = f.tl.calls;
    rl_limiter_tick(f.lim, S(1000));
    ck_assert_int_gt(f.tl.calls, before);
    ck_assert_uint_eq(rl_limiter_keys(f.lim, 0), 0);
    teardown(&f);
}
END_TEST

static Suite *keyed_suite(void)
{
    Suite *s = suite_create("keyed");
    TCase *tc = tcase_create("keyed");
    tcase_add_test(tc, rules_follow_the_key);
    tcase_add_test(tc, several_keys_of_one_level_are_one_decision);
    tcase_add_test(tc, cost_zero_checks_without_taking);
    tcase_add_test(tc, bad_items_are_refused);
    tcase_add_test(tc, keyed_level_by_descriptor);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(keyed_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
