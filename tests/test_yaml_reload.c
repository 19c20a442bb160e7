/*
 * test_yaml_reload.c - a YAML configuration put in force while serving (rld_yrls_apply): from
 * an empty configuration, updated, refused, beside a JSON configuration's levels, and applied
 * from one thread while another decides. The app runs on the manual clock; the numbers are
 * worked out by hand in the comments.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"
#include "config/config.h"
#include "grpc/rls_yaml_grpc.h"
#include "testutil.h"
#include "yamlutil.h"

typedef struct fixture {
    rl_registry *reg;
    rld_settings set;
    rld_app app;
    rld_yservice *svc;
    yt t; /* the matcher and limiter in force, for yt_ask */
} fixture;

static int parse_base(const char *json, size_t len, rl_registry *reg, rl_config **base,
                      rl_err *err)
{
    rld_settings set;
    int rc = rld_config_parse(json, len, reg, &set, base, err);
    if (rc == RL_OK)
        rld_settings_clear(&set);
    return rc;
}

/* The daemon's start without a YAML configuration yet (beside json's levels when not NULL), as
 * main.c makes it; store: the app's shared store (NULL: none). */
static void open_fx(fixture *fx, const char *json, const rld_app_store *store)
{
    rl_err err = {{0}};
    rl_config *base = NULL, *cfg;
    rld_yrls *y;
    rl_limiter *lim;
    memset(fx, 0, sizeof *fx);
    ck_assert_ptr_nonnull(fx->reg = rl_registry_new());
    if (json)
        ck_assert_msg(rld_config_parse(json, strlen(json), fx->reg, &fx->set, &base, &err) == RL_OK,
                      "%s", err.msg);
    else
        ck_assert_int_eq(rld_settings_defaults(&fx->set), RL_OK);
    ck_assert_msg(rld_yrls_new_empty(fx->reg, base, &y, &cfg, &err) == RL_OK, "%s", err.msg);
    ck_assert_msg(rl_limiter_new(cfg, NULL, &lim, &err) == RL_OK, "%s", err.msg);
    rld_app_config c = {.reg = fx->reg, .lim = lim, .set = &fx->set, .store = store};
    ck_assert_msg(rld_app_init(&fx->app, &c, &err) == RL_OK, "%s", err.msg);
    ck_assert_ptr_nonnull(fx->svc = rld_yservice_new(y, fx->reg, json,
                                                     json ? strlen(json) : 0, parse_base));
    ck_assert_int_eq(rld_app_attach(&fx->app, &rld_yrls_part_ops, fx->svc), RL_OK);
}

static void close_fx(fixture *fx)
{
    rl_limiter *lim = fx->app.lim;
    rld_app_free(&fx->app);
    rl_limiter_free(lim);
    rld_yservice_free(fx->svc);
    rld_settings_clear(&fx->set);
    rl_registry_free(fx->reg);
}

/* YAML text as a configuration of one file, "api.yaml". */
static rld_yconf *yconf(const char *text)
{
    rl_err err = {{0}};
    rld_yconf *c = rld_yconf_new();
    ck_assert_ptr_nonnull(c);
    ck_assert_msg(rld_yaml_parse(c, "api.yaml", text, strlen(text), &err) == RL_OK, "%s",
                  err.msg);
    return c;
}

static void apply_ok(fixture *fx, const char *text, const char *origin)
{
    rl_err err = {{0}};
    ck_assert_msg(rld_yrls_apply(&fx->app, yconf(text), origin, &err) == RL_OK, "%s", err.msg);
}

/* Asks at now (seconds) holding the gate, as a gRPC call does; fx->t.st holds the statuses. */
static rld_ycode ask(fixture *fx, const char *domain, double now, const char *spec)
{
    pthread_rwlock_rdlock(&fx->app.gate);
    fx->t.y = rld_yservice_matcher(fx->svc);
    fx->t.lim = fx->app.lim;
    rld_ycode code = yt_ask(&fx->t, domain, now, 0, spec);
    pthread_rwlock_unlock(&fx->app.gate);
    return code;
}

/* The /metrics text of the app (the matcher's families among them); the caller frees it. */
static char *metrics(fixture *fx)
{
    rld_buf b;
    rld_buf_init(&b, NULL, 0);
    pthread_rwlock_rdlock(&fx->app.gate);
    rld_app_metrics(&fx->app, &b);
    pthread_rwlock_unlock(&fx->app.gate);
    rld_buf_putc(&b, '\0');
    char *s = strdup(b.p);
    rld_buf_reset(&b);
    return s;
}

static void has(const char *text, const char *want)
{
    ck_assert_msg(strstr(text, want) != NULL, "no \"%s\" in:\n%s", want, text);
}

static const char *v1 = "domain: api\n"
                        "descriptors:\n"
                        "  - key: user\n"
                        "    rate_limit: {unit: minute, requests_per_unit: 5}\n";
/* v1 and one more descriptor */
static const char *v2 = "domain: api\n"
                        "descriptors:\n"
                        "  - key: user\n"
                        "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
                        "  - key: path\n"
                        "    rate_limit: {unit: minute, requests_per_unit: 2}\n";
/* v2 with the user's limit raised */
static const char *v3 = "domain: api\n"
                        "descriptors:\n"
                        "  - key: user\n"
                        "    rate_limit: {unit: minute, requests_per_unit: 10}\n"
                        "  - key: path\n"
                        "    rate_limit: {unit: minute, requests_per_unit: 2}\n";
/* reads, but its limit cannot be built: refused by the matcher, after the reader */
static const char *bad = "domain: api\n"
                         "descriptors:\n"
                         "  - key: user\n"
                         "    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: leaky}\n";
/* v3 without the user's descriptor */
static const char *v4 = "domain: api\n"
                        "descriptors:\n"
                        "  - key: path\n"
                        "    rate_limit: {unit: minute, requests_per_unit: 2}\n";

START_TEST(empty_then_applied_updated_refused)
{
    fixture fx;
    rl_err err = {{0}};
    open_fx(&fx, NULL, NULL);
    /* no domain yet: nothing limits */
    ck_assert_int_eq(ask(&fx, "api", 10, "user=a"), RLD_YCODE_OK);
    ck_assert_int_eq(fx.t.st[0].has_limit, 0);

    apply_ok(&fx, v1, "xDS version 1");
    for (unsigned left = 4; left >= 2; left--) { /* 5 per minute: 4, 3, 2 left */
        ck_assert_int_eq(ask(&fx, "api", 10, "user=a"), RLD_YCODE_OK);
        ck_assert_uint_eq(fx.t.st[0].requests_per_unit, 5);
        ck_assert_uint_eq(fx.t.st[0].remaining, left);
    }
    /* a descriptor added: the user's count carries over, 3 of 5 used, the 4th leaves 1 */
    apply_ok(&fx, v2, "xDS version 2");
    ck_assert_int_eq(ask(&fx, "api", 11, "user=a"), RLD_YCODE_OK);
    ck_assert_uint_eq(fx.t.st[0].remaining, 1);
    ck_assert_int_eq(ask(&fx, "api", 11, "path=/x"), RLD_YCODE_OK);
    ck_assert_uint_eq(fx.t.st[0].remaining, 1); /* 2 per minute */
    /* the limit raised: 4 used carry over under 10, the 5th leaves 5 (upstream's count in
     * Redis carries over the same way) */
    apply_ok(&fx, v3, "xDS version 3");
    ck_assert_int_eq(ask(&fx, "api", 12, "user=a"), RLD_YCODE_OK);
    ck_assert_uint_eq(fx.t.st[0].requests_per_unit, 10);
    ck_assert_uint_eq(fx.t.st[0].remaining, 5);

    /* refused: v3 stays, 6 of 10 used after the next hit */
    ck_assert_int_eq(rld_yrls_apply(&fx.app, yconf(bad), "xDS version 4", &err), RL_EINVAL);
    ck_assert_msg(strncmp(err.msg, "api.yaml: descriptors[0].rate_limit: algorithm: 'leaky' is "
                                   "not one of ", 62) == 0, "%s", err.msg);
    ck_assert_int_eq(ask(&fx, "api", 13, "user=a"), RLD_YCODE_OK);
    ck_assert_uint_eq(fx.t.st[0].requests_per_unit, 10);
    ck_assert_uint_eq(fx.t.st[0].remaining, 4);

    char *m = metrics(&fx);
    has(m, "\nratelimit_service_config_load_success 4\n"); /* the start and 3 applied */
    has(m, "\nratelimit_service_config_load_error 1\n");
    /* the user's hits through every configuration: 3 + 1 + 1 + 1 */
    has(m, "\nratelimit_service_rate_limit_total_hits{domain=\"api\",key1=\"user\"} 6\n");
    has(m, "\nratelimit_service_rate_limit_total_hits{domain=\"api\",key1=\"path\"} 1\n");
    free(m);

    /* the user's descriptor removed: its series ends, the path's stays; the user is free */
    apply_ok(&fx, v4, "xDS version 5");
    m = metrics(&fx);
    ck_assert_msg(!strstr(m, "key1=\"user\""), "%s", m);
    has(m, "\nratelimit_service_rate_limit_total_hits{domain=\"api\",key1=\"path\"} 1\n");
    has(m, "\nratelimit_service_config_load_success 5\n");
    free(m);
    ck_assert_int_eq(ask(&fx, "api", 14, "user=a"), RLD_YCODE_OK);
    ck_assert_int_eq(fx.t.st[0].has_limit, 0);
    ck_assert_int_eq(ask(&fx, "api", 14, "path=/x"), RLD_YCODE_OK);
    ck_assert_uint_eq(fx.t.st[0].remaining, 0); /* 2 of 2 */
    ck_assert_int_eq(ask(&fx, "api", 14, "path=/x"), RLD_YCODE_OVER_LIMIT);
    close_fx(&fx);
}
END_TEST

START_TEST(changed_unit_starts_afresh)
{
    /* upstream's counter is keyed by the window of the unit: a new unit is a new counter */
    static const char *hourly = "domain: api\n"
                                "descriptors:\n"
                                "  - key: user\n"
                                "    rate_limit: {unit: hour, requests_per_unit: 5}\n";
    fixture fx;
    open_fx(&fx, NULL, NULL);
    apply_ok(&fx, v1, "test");
    ck_assert_int_eq(ask(&fx, "api", 10, "user=a"), RLD_YCODE_OK);
    ck_assert_int_eq(ask(&fx, "api", 10, "user=a"), RLD_YCODE_OK);
    ck_assert_uint_eq(fx.t.st[0].remaining, 3);
    apply_ok(&fx, hourly, "test");
    ck_assert_int_eq(ask(&fx, "api", 10, "user=a"), RLD_YCODE_OK);
    ck_assert_uint_eq(fx.t.st[0].remaining, 4); /* 1 of 5 in the hour */
    close_fx(&fx);
}
END_TEST

START_TEST(beside_the_json_levels)
{
    /* a level of the JSON, 2 per user per minute, decided beside the YAML's limits before
     * and after each apply */
    static const char *json = "{\"levels\": [{\"name\": \"user\", \"compose\": [\"user\"], "
                              "\"rules\": [{\"type\": \"fixed_window\", \"limit\": 2, "
                              "\"window\": 60}]}]}";
    fixture fx;
    open_fx(&fx, json, NULL);
    /* an unknown domain limits nothing, the levels beside included (upstream answers it OK) */
    ck_assert_int_eq(ask(&fx, "api", 10, "user=a"), RLD_YCODE_OK);
    apply_ok(&fx, v1, "test");
    ck_assert_int_eq(ask(&fx, "api", 10, "user=a"), RLD_YCODE_OK); /* the level's 1 of 2 */
    ck_assert_uint_eq(fx.t.st[0].remaining, 4);                    /* the YAML's 1 of 5 */
    ck_assert_int_eq(ask(&fx, "api", 10, "user=a"), RLD_YCODE_OK); /* 2 of 2, 2 of 5 */
    /* the level is still there after the next apply, its count carried over: denied */
    apply_ok(&fx, v2, "test");
    ck_assert_int_eq(ask(&fx, "api", 10, "user=a"), RLD_YCODE_OVER_LIMIT);
    ck_assert_int_eq(rl_limiter_config(fx.app.lim)->nlevels, 2);
    close_fx(&fx);
}
END_TEST

static int fake_health(void *self, rld_buf *out)
{
    (void)self;
    rld_buf_puts(out, "{\"status\":\"ok\"}");
    return 1;
}

static void fake_metrics(void *self, rld_buf *out)
{
    (void)self;
    (void)out;
}

/* A shared store that cannot hold any configuration but the one it started with. */
static int fake_check(void *self, const rl_config *cfg, rl_err *err)
{
    (void)self;
    (void)cfg;
    return rl_errf(err, RL_EINVAL, "levels[0].rules[0]: not in this store");
}

START_TEST(refused_when_the_shared_store_cannot_hold_it)
{
    static const rld_app_store_ops ops = {
        .check_config = fake_check, .health = fake_health, .metrics = fake_metrics};
    rld_app_store store = {&ops, NULL};
    fixture fx;
    rl_err err = {{0}};
    open_fx(&fx, NULL, &store);
    ck_assert_int_eq(rld_yrls_apply(&fx.app, yconf(v1), "xDS version 1", &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "levels[0].rules[0]: not in this store");
    char *m = metrics(&fx);
    has(m, "\nratelimit_service_config_load_error 1\n");
    has(m, "\nratelimit_service_config_load_success 1\n");
    free(m);
    ck_assert_int_eq(ask(&fx, "api", 10, "user=a"), RLD_YCODE_OK);
    ck_assert_int_eq(fx.t.st[0].has_limit, 0);
    close_fx(&fx);
}
END_TEST

/* Two descriptors whose limits change together: a decision sees (5, 7) or (10, 14). */
static const char *pair_a = "domain: api\n"
                            "descriptors:\n"
                            "  - key: user\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
                            "  - key: path\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 7}\n";
static const char *pair_b = "domain: api\n"
                            "descriptors:\n"
                            "  - key: user\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 10}\n"
                            "  - key: path\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 14}\n";

typedef struct decider {
    fixture *fx;
    int stop;
    unsigned long decided, mixed, seen_a, seen_b;
} decider;

static void *decide_loop(void *arg)
{
    decider *d = arg;
    yt t = {0};
    for (unsigned long i = 0; !__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE) && i < 2000000; i++) {
        pthread_rwlock_rdlock(&d->fx->app.gate);
        t.y = rld_yservice_matcher(d->fx->svc);
        t.lim = d->fx->app.lim;
        yt_ask(&t, "api", 100 + (double)(i / 8), 0, "user=u; path=/p");
        pthread_rwlock_unlock(&d->fx->app.gate);
        uint32_t a = t.st[0].requests_per_unit, b = t.st[1].requests_per_unit;
        d->seen_a += a == 5 && b == 7;
        d->seen_b += a == 10 && b == 14;
        d->mixed += !((a == 5 && b == 7) || (a == 10 && b == 14));
        __atomic_add_fetch(&d->decided, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

START_TEST(applied_while_another_thread_decides)
{
    fixture fx;
    decider d = {.fx = &fx};
    pthread_t th;
    open_fx(&fx, NULL, NULL);
    apply_ok(&fx, pair_a, "first");
    ck_assert_int_eq(pthread_create(&th, NULL, decide_loop, &d), 0);
    while (!__atomic_load_n(&d.decided, __ATOMIC_ACQUIRE))
        ; /* the first decision made: the applies below race with the next ones */
    for (int i = 0; i < 40; i++)
        apply_ok(&fx, i % 2 ? pair_a : pair_b, "alternate");
    __atomic_store_n(&d.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    ck_assert_uint_eq(d.mixed, 0);
    ck_assert_uint_gt(d.seen_a, 0);
    ck_assert_uint_gt(d.seen_b, 0);
    char *m = metrics(&fx);
    has(m, "\nratelimit_service_config_load_success 42\n");
    char want[160];
    /* every decision's hit counted once, through 41 swaps */
    snprintf(want, sizeof want,
             "\nratelimit_service_rate_limit_total_hits{domain=\"api\",key1=\"user\"} %lu\n",
             d.decided);
    has(m, want);
    free(m);
    close_fx(&fx);
}
END_TEST

static Suite *yaml_reload_suite(void)
{
    Suite *s = suite_create("yaml_reload");
    TCase *tc = tcase_create("yaml_reload");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, empty_then_applied_updated_refused);
    tcase_add_test(tc, changed_unit_starts_afresh);
    tcase_add_test(tc, beside_the_json_levels);
    tcase_add_test(tc, refused_when_the_shared_store_cannot_hold_it);
    tcase_add_test(tc, applied_while_another_thread_decides);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(yaml_reload_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
