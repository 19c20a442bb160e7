/*
 * test_limiter_over.c - rl_limiter_new_over: a limiter for a new configuration taking another
 * limiter's store over (a reload over a shared store), with a store that records its attaches:
 * the store follows the new configuration and outlives the old limiter; when the new
 * configuration cannot be attached, the store is back on the old one, which goes on.
 */
#include <stdlib.h>
#include <string.h>

#include "ratelimit_store.h"
#include "testutil.h"

/* A store that keeps no state: it records what it was attached to, refuses a configuration of
 * three levels, decides nothing, and counts its destruction. */
typedef struct rec_store {
    rl_store base;
    const rl_config *cfg;
    const rl_resolver *res;
    int attaches, destroyed;
} rec_store;

static int rec_attach(void *cls, const rl_config *cfg, const rl_resolver *res, rl_err *err)
{
    rec_store *s = cls;
    s->attaches++;
    s->cfg = cfg;
    s->res = res;
    if (cfg->nlevels == 3)
        return rl_errf(err, RL_EINVAL, "levels[2]: not in this store");
    return RL_OK;
}

static int rec_decide(void *cls, const rl_plan *plan, rl_decision *d, rl_err *err)
{
    (void)cls;
    (void)plan;
    (void)d;
    return rl_errf(err, RL_ESTORE, "not asked here");
}

static void rec_tick(void *cls, rl_ns now)
{
    (void)cls;
    (void)now;
}

static void rec_destroy(void *cls)
{
    rec_store *s = cls;
    s->destroyed++;
}

static const rl_store_ops rec_ops = {
    .name = "recording",
    .attach = rec_attach,
    .decide = rec_decide,
    .tick = rec_tick,
    .destroy = rec_destroy,
};

static rl_config *levels(rl_registry *reg, int n)
{
    static const char *const one =
        "{\"levels\": [{\"name\": \"a\", \"rules\": [{\"type\": \"fixed_window\", \"limit\": 5, "
        "\"window\": 60}]}]}";
    static const char *const two =
        "{\"levels\": [{\"name\": \"a\", \"rules\": [{\"type\": \"fixed_window\", \"limit\": 4, "
        "\"window\": 60}]}, {\"name\": \"b\", \"rules\": [{\"type\": \"fixed_window\", "
        "\"limit\": 9, \"window\": 60}]}]}";
    static const char *const three =
        "{\"levels\": [{\"name\": \"a\", \"rules\": [{\"type\": \"fixed_window\", "
        "\"limit\": 1, \"window\": 60}]}, {\"name\": \"b\", \"rules\": [{\"type\": "
        "\"fixed_window\", \"limit\": 1, \"window\": 60}]}, {\"name\": \"c\", \"rules\": "
        "[{\"type\": \"fixed_window\", \"limit\": 1, \"window\": 60}]}]}";
    const char *json = n == 1 ? one : n == 2 ? two : three;
    rld_settings set;
    rl_config *cfg;
    rl_err err = {{0}};
    ck_assert_msg(rld_config_parse(json, strlen(json), reg, &set, &cfg, &err) == RL_OK, "%s",
                  err.msg);
    rld_settings_clear(&set);
    return cfg;
}

START_TEST(new_limiter_takes_the_store_over_and_gives_it_back_on_failure)
{
    rl_registry *reg = rl_registry_new();
    rec_store *s = calloc(1, sizeof *s);
    s->base.ops = &rec_ops;
    s->base.cls = s;
    rl_limiter *a, *b, *c = NULL;
    rl_err err = {{0}};
    ck_assert_int_eq(rl_limiter_new(levels(reg, 1), &s->base, &a, &err), RL_OK);
    ck_assert_int_eq(s->attaches, 1);
    ck_assert_ptr_eq(s->cfg, rl_limiter_config(a));

    /* b takes it over: attached to b's configuration; freeing a leaves it alone */
    ck_assert_int_eq(rl_limiter_new_over(levels(reg, 2), a, &b, &err), RL_OK);
    ck_assert_int_eq(s->attaches, 2);
    ck_assert_ptr_eq(s->cfg, rl_limiter_config(b));
    ck_assert_uint_eq(rl_limiter_config(b)->nlevels, 2);
    /* a gave it up: a second takeover from a is refused, nothing attached */
    ck_assert_int_eq(rl_limiter_new_over(levels(reg, 2), a, &c, &err), RL_EINVAL);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(s->attaches, 2);
    rl_limiter_free(a);
    ck_assert_int_eq(s->destroyed, 0);

    /* three levels: refused by the store, which is attached back to b's configuration */
    ck_assert_int_eq(rl_limiter_new_over(levels(reg, 3), b, &c, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "levels[2]: not in this store");
    ck_assert_ptr_null(c);
    ck_assert_int_eq(s->attaches, 4);
    ck_assert_ptr_eq(s->cfg, rl_limiter_config(b));
    ck_assert_int_eq(s->destroyed, 0);
    /* b goes on over it */
    rl_limiter_tick(b, 1);
    ck_assert_ptr_eq(s->cfg, rl_limiter_config(b));

    rl_limiter_free(b);
    ck_assert_int_eq(s->destroyed, 1);
    free(s);
    rl_registry_free(reg);
}
END_TEST

static Suite *over_suite(void)
{
    Suite *s = suite_create("limiter_over");
    TCase *tc = tcase_create("over");
    tcase_add_test(tc, new_limiter_takes_the_store_over_and_gives_it_back_on_failure);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(over_suite()) ? 1 : 0;
}
