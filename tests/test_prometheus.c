/*
 * test_prometheus.c - the daemon's metrics and config/prometheus/ with Prometheus's own tool:
 * `promtool check metrics` on real scrapes (memory store and Redis store), `promtool check
 * config` on the scrape configuration (and through it the rules), `promtool test rules` on the
 * rules' unit tests, and every metric the rules name is one the daemon exports.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_server.h"
#include "srvutil.h"

/* Runs a shell command line (promtool), fails the test with its output unless it exits 0. */
static void run_ok(const char *cmd)
{
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char *out = NULL;
    int rc = su_run(argv, &out);
    ck_assert_msg(rc != 127, "promtool is missing (make deps installs Debian's prometheus): %s",
                  out ? out : "");
    ck_assert_msg(rc == 0, "%s: exit %d: %s", cmd, rc, out ? out : "");
    free(out);
}

/* Scrapes /metrics into dir/name and lints it with promtool; returns the scrape (malloc'd). */
static char *scrape_and_lint(const su_server *s, const char *name)
{
    char cmd[700];
    su_resp r = su_req(s, "GET", "/metrics", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    const char *path = su_write(s->dir, name, r.body);
    snprintf(cmd, sizeof cmd, "promtool check metrics < '%s' 2>&1", path);
    run_ok(cmd);
    char *text = r.body;
    r.body = NULL;
    su_resp_free(&r);
    return text;
}

/* Some traffic so that every family has series: allowed, denied, a reservation settled. */
static void traffic(const su_server *s)
{
    for (int i = 0; i < 4; i++) {
        su_resp r = su_req(s, "POST", "/acquire", "{\"keys\": {\"user\": \"u\"}, \"reserve\": true}",
                           NULL);
        ck_assert(r.status == 200 || r.status == 429);
        su_resp_free(&r);
    }
    const char *hs[] = {"X-RateLimit-User: v", NULL};
    su_resp r = su_req(s, "GET", "/check", NULL, hs);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
}

static const char *levels = "\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
                            "\"token_bucket\", \"name\": \"u\", \"capacity\": 2, \"per_second\": "
                            "0.001}]}, {\"name\": \"global\", \"default_key\": \"*\", \"rules\": "
                            "[{\"type\": \"concurrency\", \"name\": \"slots\", \"limit\": 100}]}]";

/* 1 when the scrapes declare the family: "# TYPE <name> ". */
static int exported(const char *const *scrapes, size_t n, const char *name, size_t len)
{
    char want[160];
    snprintf(want, sizeof want, "# TYPE %.*s ", (int)len, name);
    for (size_t i = 0; i < n; i++)
        if (strstr(scrapes[i], want))
            return 1;
    return 0;
}

START_TEST(scrapes_pass_promtool_and_rules_name_real_metrics)
{
    su_server mem, red;
    rt_redis redis;
    char cfg[2048];
    char *scrapes[2];

    su_tmpdir(&mem);
    snprintf(cfg, sizeof cfg, "{%s}", levels);
    su_start(&mem, cfg, NULL);
    traffic(&mem);
    scrapes[0] = scrape_and_lint(&mem, "memory.prom");
    ck_assert_int_eq(su_stop(&mem), 0);

    rt_redis_start(&redis);
    su_tmpdir(&red);
    snprintf(cfg, sizeof cfg, "{\"store\": {\"type\": \"redis\", \"url\": \"%s\"}, %s}",
             redis.url, levels);
    su_start(&red, cfg, NULL);
    traffic(&red);
    scrapes[1] = scrape_and_lint(&red, "redis.prom");
    ck_assert_int_eq(su_stop(&red), 0);
    rt_redis_stop(&redis);

    /* every ratelimit_* name in the rules is a family of one of the scrapes */
    char *rules = su_read("config/prometheus/rules.yml");
    ck_assert_msg(rules != NULL, "config/prometheus/rules.yml (tests run from the repository)");
    size_t named = 0;
    for (const char *p = rules; (p = strstr(p, "ratelimit_")) != NULL;) {
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz_");
        ck_assert_msg(exported((const char *const *)scrapes, 2, p, n),
                      "rules.yml names %.*s, which the daemon does not export", (int)n, p);
        named++;
        p += n;
    }
    ck_assert_uint_ge(named, 5);
    free(rules);
    free(scrapes[0]);
    free(scrapes[1]);
}
END_TEST

START_TEST(prometheus_config_and_rule_tests_pass)
{
    run_ok("promtool check config config/prometheus/prometheus.yml 2>&1");
    run_ok("promtool check rules config/prometheus/rules.yml 2>&1");
    run_ok("promtool test rules config/prometheus/rules_test.yml 2>&1");
}
END_TEST

static Suite *prometheus_suite(void)
{
    Suite *s = suite_create("prometheus");
    TCase *tc = tcase_create("promtool");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, scrapes_pass_promtool_and_rules_name_real_metrics);
    tcase_add_test(tc, prometheus_config_and_rule_tests_pass);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(prometheus_suite());
}
