/*
 * test_yaml_daemon.c - the daemon on envoyproxy/ratelimit's YAML configuration: --check-config
 * on files and directories, and a server started on a directory of them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "srvutil.h"

static const char *good = "domain: edge\n"
                          "descriptors:\n"
                          "  - key: remote_address\n"
                          "    rate_limit: {unit: second, requests_per_unit: 10}\n";

START_TEST(check_config_on_yaml)
{
    su_server s;
    char *out, path[400], bad[400], want[600];
    su_tmpdir(&s);
    snprintf(path, sizeof path, "%s", su_write(s.dir, "edge.yaml", good));
    snprintf(bad, sizeof bad, "%s",
             su_write(s.dir, "bad.yml",
                      "domain: other\ndescriptors:\n  - key: a\n  - key: b\n"
                      "    rate_limit: {unit: fortnight}\n"));
    const char *a1[] = {su_binary(), "--check-config", path, NULL};
    ck_assert_int_eq(su_run(a1, &out), 0);
    ck_assert_str_eq(out, "ok\n");
    free(out);
    const char *a2[] = {su_binary(), "--check-config", bad, NULL};
    ck_assert_int_eq(su_run(a2, &out), 1);
    snprintf(want, sizeof want,
             "%s: descriptors[1].rate_limit.unit: invalid rate limit unit "
             "'fortnight'\n",
             bad);
    ck_assert_str_eq(out, want);
    free(out);
    /* the directory holds the bad file too */
    const char *a3[] = {su_binary(), "--check-config", s.dir, NULL};
    ck_assert_int_eq(su_run(a3, &out), 1);
    ck_assert_str_eq(out, want);
    free(out);
}
END_TEST

START_TEST(serves_a_directory)
{
    su_server s;
    char dir[400];
    su_tmpdir(&s);
    snprintf(dir, sizeof dir, "%s/ratelimit", s.dir);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    su_write(dir, "edge.yaml", good);
    su_write(dir, "internal.yaml",
             "domain: internal\ndescriptors:\n  - key: ldap\n"
             "    rate_limit: {unlimited: true}\n");
    const char *extra[] = {"--config", dir, NULL};
    su_start(&s, NULL, extra);
    su_resp r = su_req(&s, "GET", "/rules", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "\"levels\":[{\"name\":\"rls\",\"tiered\":false,"
                                 "\"keyed\":true}]") != NULL,
                  "%s", r.body);
    su_resp_free(&r);
    r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "\nratelimit_service_rate_limit_total_hits{domain=\"edge\","
                                 "key1=\"remote_address\"} 0\n") != NULL,
                  "%s", r.body);
    su_resp_free(&r);
    r = su_req(&s, "GET", "/healthz", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(json_settings_with_yaml_limits)
{
    /* the daemon's settings from JSON, the limits from envoyproxy/ratelimit's YAML */
    su_server s;
    char *out, path[400], want[600];
    su_tmpdir(&s);
    su_write(s.dir, "edge.yaml", good);
    snprintf(path, sizeof path, "%s",
             su_write(s.dir, "both.json",
                      "{\"reservation_ttl\": 60, \"ratelimit_config\": "
                      "\"edge.yaml\", \"tiers\": {\"free\": [{\"type\": \"fixed_window\", \"limit\": 1, "
                      "\"window\": 1}]}}"));
    const char *a1[] = {su_binary(), "--check-config", path, NULL};
    ck_assert_int_eq(su_run(a1, &out), 1);
    snprintf(want, sizeof want,
             "%s: tiers: needs a tiered level in levels (beside ratelimit_config)\n",
             path);
    ck_assert_str_eq(out, want);
    free(out);
    su_start(&s, "{\"reservation_ttl\": 60, \"ratelimit_config\": \"edge.yaml\"}", NULL);
    su_resp r = su_req(&s, "GET", "/rules", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "\"keyed\":true") && strstr(r.body, "\"reservation_ttl\":60"),
                  "%s", r.body);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(charge_on_the_redis_store)
{
    su_server s;
    char *out, path[400];
    su_tmpdir(&s);
    su_write(s.dir, "ai.yaml",
             "domain: ai\ndescriptors:\n  - key: api_key\n    charge: true\n"
             "    rate_limit: {unit: minute, requests_per_unit: 1000}\n");
    char json[600]; /* the YAML by its full path: --check-config runs in the test's directory */
    snprintf(json, sizeof json, "{\"store\": \"redis\", \"ratelimit_config\": \"%s/ai.yaml\"}",
             s.dir);
    snprintf(path, sizeof path, "%s", su_write(s.dir, "redis.json", json));
    const char *a1[] = {su_binary(), "--check-config", path, NULL};
    /* accepted: the Redis store charges as the memory store does (test_rls_trace decides) */
    ck_assert_int_eq(su_run(a1, &out), 0);
    ck_assert_str_eq(out, "ok\n");
    free(out);
}
END_TEST

static Suite *yaml_daemon_suite(void)
{
    Suite *s = suite_create("yaml_daemon");
    TCase *tc = tcase_create("yaml_daemon");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, check_config_on_yaml);
    tcase_add_test(tc, serves_a_directory);
    tcase_add_test(tc, json_settings_with_yaml_limits);
    tcase_add_test(tc, charge_on_the_redis_store);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(yaml_daemon_suite());
}
