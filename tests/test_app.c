/*
 * test_app.c - the app without a protocol: what a reload tells the parts attached to it, a part
 * that refuses one, a stop, and quotas, health and metrics going to an attached store
 * (app/parts.h), the files a part reads again at every reload; the admin endpoints off loopback
 * (app/auth.h). The parts and the store here are fakes that write down what they were asked.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "app/auth.h"
#include "app/model_headers.h"
#include "testutil.h"

/* One token bucket of capacity cap on "user". */
static void config_text(char *buf, size_t len, int cap)
{
    snprintf(buf, len,
             "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", "
             "\"capacity\": %d, \"per_second\": 1}]}]}",
             cap);
}

static void write_config(const char *path, int cap)
{
    char text[512];
    config_text(text, sizeof text, cap);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* An app on the manual clock over a limiter of capacity 5, reloading from path. */
typedef struct fixture {
    char path[64];
    rl_registry *reg;
    rld_settings set;
    rld_app app;
} fixture;

/* rld_app_load_fn over the JSON loader */
static int load_file(void *cls, const char *path, rl_registry *reg, rld_settings *set,
                     rl_config **cfg, rl_err *err)
{
    (void)cls;
    return rld_config_load(path, reg, set, cfg, err);
}

static void fixture_open(fixture *fx, const rld_app_store *store)
{
    static const char *const endpoints[] = {"/a", "/b"};
    rl_config *cfg;
    rl_limiter *lim;
    rl_err err = {{0}};
    snprintf(fx->path, sizeof fx->path, "/tmp/test_app-%d.json", (int)getpid());
    write_config(fx->path, 5);
    fx->reg = rl_registry_new();
    ck_assert_msg(rld_config_load(fx->path, fx->reg, &fx->set, &cfg, &err) == RL_OK, "%s", err.msg);
    ck_assert_int_eq(rl_limiter_new(cfg, NULL, &lim, &err), RL_OK);
    rld_app_config c = {.reg = fx->reg,
                        .lim = lim,
                        .set = &fx->set,
                        .store = store,
                        .endpoints = endpoints,
                        .nendpoints = 2,
                        .config_path = fx->path,
                        .load = load_file};
    ck_assert_msg(rld_app_init(&fx->app, &c, &err) == RL_OK, "%s", err.msg);
}

static void fixture_close(fixture *fx)
{
    rl_limiter *lim = fx->app.lim;
    rld_app_free(&fx->app);
    rl_limiter_free(lim);
    rld_settings_clear(&fx->set);
    rl_registry_free(fx->reg);
    unlink(fx->path);
}

/* ---- parts ----------------------------------------------------------------------------------- */

typedef struct fake_part {
    const char *name;
    char *log;       /* shared by the parts of a test: what each was asked, in order */
    rl_limiter *lim; /* the limiter of the last reload */
    int stopped;
    int refuse; /* reload_check refuses */
} fake_part;

static void note(fake_part *p, const char *what)
{
    strcat(p->log, p->name);
    strcat(p->log, what);
    strcat(p->log, " ");
}

static int part_check(void *self, rl_err *err)
{
    fake_part *p = self;
    note(p, ".check");
    return p->refuse ? rl_errf(err, RL_EINVAL, "reload: %s cannot follow", p->name) : RL_OK;
}

static void part_reload(void *self, rl_limiter *lim)
{
    fake_part *p = self;
    note(p, ".reload");
    p->lim = lim;
}

static void part_metrics(void *self, rld_buf *out)
{
    rld_buf_printf(out, "# part %s\n", ((fake_part *)self)->name);
}

static void part_stopping(void *self)
{
    ((fake_part *)self)->stopped++;
}

static const rld_part_ops fake_ops = {.name = "fake",
                                      .reload_check = part_check,
                                      .reload = part_reload,
                                      .metrics = part_metrics,
                                      .stopping = part_stopping};
/* A part with no method but reload: the others are optional. */
static const rld_part_ops bare_ops = {.name = "bare", .reload = part_reload};

/* Durations as OpenAI's headers write them (Go's time.Duration), rounded up to the ms. */
START_TEST(durations_as_openai_writes_them)
{
    static const struct {
        rl_ns ns;
        const char *want;
    } rows[] = {{0, "0s"},
                {1, "1ms"},
                {20 * 1000000LL, "20ms"},
                {999 * 1000000LL + 1, "1s"},
                {1500 * 1000000LL, "1.5s"},
                {1201 * 1000000LL, "1.201s"},
                {360 * RL_NS_PER_SEC, "6m0s"},
                {90 * RL_NS_PER_SEC, "1m30s"},
                {3600 * RL_NS_PER_SEC, "1h0m0s"},
                {3723 * RL_NS_PER_SEC + 250000000, "1h2m3.25s"}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char buf[40];
        rld_go_duration(buf, sizeof buf, rows[i].ns);
        ck_assert_str_eq(buf, rows[i].want);
    }
}
END_TEST

START_TEST(a_reload_reaches_every_part)
{
    fixture fx;
    char log[256] = "";
    fake_part a = {.name = "a", .log = log}, b = {.name = "b", .log = log};
    rl_err err = {{0}};
    fixture_open(&fx, NULL);
    rl_limiter *before = fx.app.lim;
    ck_assert_int_eq(rld_app_attach(&fx.app, &fake_ops, &a), RL_OK);
    ck_assert_int_eq(rld_app_attach(&fx.app, &bare_ops, &b), RL_OK);
    ck_assert_ptr_nonnull(strstr(fx.app.rules_json, "\"capacity\":5"));
    write_config(fx.path, 7);
    ck_assert_msg(rld_app_reload(&fx.app, &err) == RL_OK, "%s", err.msg);
    /* each part is asked first, then told, in the order attached; b has no check */
    ck_assert_str_eq(log, "a.check a.reload b.reload ");
    ck_assert_ptr_ne(fx.app.lim, before);
    ck_assert_ptr_eq(a.lim, fx.app.lim);
    ck_assert_ptr_eq(b.lim, fx.app.lim);
    ck_assert_ptr_nonnull(strstr(fx.app.rules_json, "\"capacity\":7"));
    /* metrics: the app's own families, then each part's that has some */
    rld_buf out;
    rld_buf_init(&out, NULL, 0);
    rld_app_metrics(&fx.app, &out);
    const char *text = rld_buf_cstr(&out);
    ck_assert_ptr_nonnull(strstr(text, "ratelimit_config_reloads_total{result=\"ok\"} 1"));
    const char *pa = strstr(text, "# part a\n");
    ck_assert_ptr_nonnull(pa);
    ck_assert_str_eq(pa, "# part a\n"); /* last: b has no metrics */
    rld_buf_reset(&out);
    rld_app_stopping(&fx.app);
    ck_assert_int_eq(a.stopped, 1);
    fixture_close(&fx);
}
END_TEST

START_TEST(a_part_can_refuse_a_reload)
{
    fixture fx;
    char log[256] = "";
    fake_part a = {.name = "a", .log = log}, b = {.name = "b", .log = log, .refuse = 1};
    rl_err err = {{0}};
    fixture_open(&fx, NULL);
    rl_limiter *before = fx.app.lim;
    ck_assert_int_eq(rld_app_attach(&fx.app, &fake_ops, &a), RL_OK);
    ck_assert_int_eq(rld_app_attach(&fx.app, &fake_ops, &b), RL_OK);
    write_config(fx.path, 7);
    ck_assert_int_eq(rld_app_reload(&fx.app, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "reload: b cannot follow");
    /* nobody is told of a reload that did not happen, and the configuration in force stays */
    ck_assert_str_eq(log, "a.check b.check ");
    ck_assert_ptr_eq(fx.app.lim, before);
    ck_assert_ptr_null(a.lim);
    ck_assert_ptr_nonnull(strstr(fx.app.rules_json, "\"capacity\":5"));
    fixture_close(&fx);
}
END_TEST

START_TEST(parts_are_bounded)
{
    fixture fx;
    char log[8] = "";
    fake_part a = {.name = "a", .log = log};
    fixture_open(&fx, NULL);
    for (int i = 0; i < RLD_APP_MAX_PARTS; i++)
        ck_assert_int_eq(rld_app_attach(&fx.app, &fake_ops, &a), RL_OK);
    ck_assert_int_eq(rld_app_attach(&fx.app, &fake_ops, &a), RL_EFULL);
    ck_assert_uint_eq(fx.app.nparts, RLD_APP_MAX_PARTS);
    fixture_close(&fx);
}
END_TEST

/* ---- a store --------------------------------------------------------------------------------- */

typedef struct fake_store {
    char asked[128];
    int up;
} fake_store;

static int store_put(void *self, rl_registry *reg, const char *user, const char *body, size_t len,
                     rl_err *err)
{
    (void)reg;
    (void)err;
    fake_store *s = self;
    snprintf(s->asked, sizeof s->asked, "put %s %.*s", user, (int)len, body);
    return RL_OK;
}

static int store_delete(void *self, const char *user, rl_err *err)
{
    fake_store *s = self;
    snprintf(s->asked, sizeof s->asked, "delete %s", user);
    return rl_errf(err, RL_ESTORE, "store: down");
}

static int store_health(void *self, rld_buf *out)
{
    fake_store *s = self;
    rld_buf_puts(out, s->up ? "{\"status\":\"ok\"}" : "{\"status\":\"degraded\"}");
    return s->up;
}

static void store_metrics(void *self, rld_buf *out)
{
    (void)self;
    rld_buf_puts(out, "# store\n");
}

static void store_describe(const void *self, char *buf, size_t len)
{
    (void)self;
    snprintf(buf, len, "fake store");
}

static const rld_app_store_ops fake_store_ops = {.quota_put = store_put,
                                                 .quota_delete = store_delete,
                                                 .health = store_health,
                                                 .metrics = store_metrics,
                                                 .describe = store_describe};

START_TEST(quotas_health_and_metrics_go_to_the_store)
{
    fixture fx;
    fake_store st = {.up = 0};
    rld_app_store store = {&fake_store_ops, &st};
    rl_err err = {{0}};
    rld_buf out;
    fixture_open(&fx, &store);
    ck_assert_int_eq(rld_app_quota_put(&fx.app, "bob", "{\"tier\":\"gold\"}", 15, &err), RL_OK);
    ck_assert_str_eq(st.asked, "put bob {\"tier\":\"gold\"}");
    ck_assert_int_eq(rld_app_quota_delete(&fx.app, "bob", &err), RL_ESTORE);
    ck_assert_str_eq(st.asked, "delete bob");
    ck_assert_str_eq(err.msg, "store: down");
    rld_buf_init(&out, NULL, 0);
    ck_assert_int_eq(rld_app_store_health(&fx.app, &out), 0);
    ck_assert_str_eq(rld_buf_cstr(&out), "{\"status\":\"degraded\"}");
    rld_buf_reset(&out);
    rld_buf_init(&out, NULL, 0);
    rld_app_metrics(&fx.app, &out);
    ck_assert_ptr_nonnull(strstr(rld_buf_cstr(&out), "# store\n"));
    rld_buf_reset(&out);
    /* a reload keeps the store the daemon started with: a file of the memory store is refused */
    ck_assert_int_eq(rld_app_reload(&fx.app, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "store: a reload keeps the store in force (redis); a restart "
                              "applies another one");
    fixture_close(&fx);
}
END_TEST

START_TEST(without_a_store_quotas_stay_here)
{
    fixture fx;
    rl_err err = {{0}};
    rld_buf out;
    fixture_open(&fx, NULL);
    rld_buf_init(&out, NULL, 0);
    ck_assert_int_eq(rld_app_store_health(&fx.app, &out), -1);
    ck_assert_uint_eq(out.len, 0);
    rld_app_metrics(&fx.app, &out);
    ck_assert_ptr_null(strstr(rld_buf_cstr(&out), "ratelimit_store_up"));
    rld_buf_reset(&out);
    /* the quota file's path: no level is tiered here, so there is no quota to set */
    ck_assert_int_ne(rld_app_quota_put(&fx.app, "bob", "{\"tier\":\"gold\"}", 15, &err), RL_OK);
    fixture_close(&fx);
}
END_TEST

/* A part with files: refresh is its only method. */
static void part_refresh(void *self)
{
    note(self, ".refresh");
}

static const rld_part_ops files_ops = {.name = "files", .refresh = part_refresh};

START_TEST(files_are_read_again_whatever_the_reload_gives)
{
    fixture fx;
    char log[256] = "";
    fake_part a = {.name = "a", .log = log}, f = {.name = "f", .log = log};
    rl_err err = {{0}};
    fixture_open(&fx, NULL);
    ck_assert_int_eq(rld_app_attach(&fx.app, &fake_ops, &a), RL_OK);
    ck_assert_int_eq(rld_app_attach(&fx.app, &files_ops, &f), RL_OK);
    /* before anything else, in the order attached: the files first */
    ck_assert_int_eq(rld_app_reload(&fx.app, &err), RL_OK);
    ck_assert_str_eq(log, "f.refresh a.check a.reload ");
    /* a configuration that does not load: the files are read again all the same */
    log[0] = '\0';
    FILE *cf = fopen(fx.path, "w");
    ck_assert_ptr_nonnull(cf);
    fputs("{\"levels\": []}", cf);
    fclose(cf);
    ck_assert_int_ne(rld_app_reload(&fx.app, &err), RL_OK);
    ck_assert_str_eq(log, "f.refresh a.check ");
    /* and when a part refuses */
    log[0] = '\0';
    a.refuse = 1;
    ck_assert_int_ne(rld_app_reload(&fx.app, &err), RL_OK);
    ck_assert_str_eq(log, "f.refresh a.check ");
    fixture_close(&fx);
}
END_TEST

/* ---- the admin endpoints off loopback (auth.h) ------------------------------------------- */

static const struct {
    const char *address;
    int loopback;
} addresses[] = {
    {"127.0.0.1", 1},       {"127.255.0.9", 1}, {"::1", 1},
    {"::ffff:127.0.0.1", 1}, {"0.0.0.0", 0},     {"::", 0},
    {"10.0.0.1", 0},        {"128.0.0.1", 0},   {"::2", 0},
    {"::ffff:10.0.0.1", 0}, {"localhost", 0},   {"", 0},
};

START_TEST(loopback_addresses)
{
    ck_assert_msg(rld_auth_loopback(addresses[_i].address) == addresses[_i].loopback, "%s",
                  addresses[_i].address);
}
END_TEST

START_TEST(admin_closed_off_loopback_without_a_token)
{
    rld_settings set;
    ck_assert_int_eq(rld_settings_defaults(&set), RL_OK);
    /* the default address is loopback: open, no warning */
    ck_assert(!rld_auth_admin_closed(&set) && !rld_auth_admin_exposed(&set));
    snprintf(set.address, sizeof set.address, "0.0.0.0");
    ck_assert(rld_auth_admin_closed(&set) && !rld_auth_admin_exposed(&set));
    set.admin_open = 1;
    ck_assert(!rld_auth_admin_closed(&set) && rld_auth_admin_exposed(&set));
    set.admin_token = strdup("t");
    ck_assert(!rld_auth_admin_closed(&set) && !rld_auth_admin_exposed(&set));
    set.admin_open = 0;
    ck_assert(!rld_auth_admin_closed(&set) && !rld_auth_admin_exposed(&set));
    rld_settings_clear(&set);
}
END_TEST

static Suite *app_suite(void)
{
    Suite *s = suite_create("app");
    TCase *tc = tcase_create("parts");
    tcase_add_test(tc, a_reload_reaches_every_part);
    tcase_add_test(tc, durations_as_openai_writes_them);
    tcase_add_test(tc, a_part_can_refuse_a_reload);
    tcase_add_test(tc, parts_are_bounded);
    tcase_add_test(tc, quotas_health_and_metrics_go_to_the_store);
    tcase_add_test(tc, without_a_store_quotas_stay_here);
    tcase_add_test(tc, files_are_read_again_whatever_the_reload_gives);
    suite_add_tcase(s, tc);
    TCase *auth = tcase_create("auth");
    tcase_add_loop_test(auth, loopback_addresses, 0, sizeof addresses / sizeof addresses[0]);
    tcase_add_test(auth, admin_closed_off_loopback_without_a_token);
    suite_add_tcase(s, auth);
    return s;
}

int main(void)
{
    return tu_run(app_suite()) ? 1 : 0;
}
