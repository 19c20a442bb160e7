/*
 * test_shadow.c - shadow rules end to end: through the daemon (decisions, the RateLimit body,
 * ratelimit_shadow_denied_total) and through the replay tool's summary, on one trace. The core's
 * semantics are tested in test_limiter.c; here, what an operator sees.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srvutil.h"

/* user: the enforced per-user bucket (5) and a tighter one being tried (2, "shadow"); team: a
 * whole level in shadow (3 per team). Nothing refills during the test (the clock stands at 0). */
static const char *cfg =
    "{\"levels\": ["
    " {\"name\": \"user\", \"rules\": ["
    "  {\"type\": \"token_bucket\", \"name\": \"per-user\", \"capacity\": 5, \"per_second\": 1},"
    "  {\"type\": \"token_bucket\", \"name\": \"new-limit\", \"capacity\": 2, \"per_second\": 1,"
    "   \"shadow\": true}]},"
    " {\"name\": \"team\", \"shadow\": true, \"rules\": ["
    "  {\"type\": \"fixed_window\", \"name\": \"team\", \"limit\": 3, \"window\": 60}]}]}";

/* Six requests of alice in team acme at t = 0, worked by hand:
 *   1, 2   allowed; new-limit takes 1 each (2 -> 0), team takes 1 each (3 -> 1)
 *   3      allowed; new-limit does not fit (would deny), team takes its last
 *   4, 5   allowed; new-limit and team would deny
 *   6      denied by per-user (5 taken); new-limit and team would deny as well
 * shadow denials: new-limit 4 (3 to 6), team 3 (4 to 6); per-user denied 1. */
static const char *request = "{\"keys\": {\"user\": \"alice\", \"team\": \"acme\"}, \"now\": 0}";

static const char *metric_line(const char *body, const char *series)
{
    const char *p = strstr(body, series);
    ck_assert_msg(p != NULL, "no %s in\n%.3000s", series, body);
    return p;
}

START_TEST(shadow_rules_through_the_daemon)
{
    su_server s;
    const char *manual[] = {"--manual-clock", NULL};
    su_tmpdir(&s);
    su_start(&s, cfg, manual);
    for (int i = 1; i <= 6; i++) {
        su_resp r = su_req(&s, "POST", "/acquire", request, NULL);
        ck_assert_msg(r.status == (i <= 5 ? 200 : 429), "request %d: %ld %s", i, r.status, r.body);
        if (i == 6)
            ck_assert_str_eq(su_str(&r, "blocked_by"), "user: per-user");
        su_resp_free(&r);
    }
    su_resp m = su_req(&s, "GET", "/metrics", NULL, NULL);
    metric_line(m.body, "ratelimit_shadow_denied_total{level=\"user\",rule=\"new-limit\"} 4\n");
    metric_line(m.body, "ratelimit_shadow_denied_total{level=\"team\",rule=\"team\"} 3\n");
    metric_line(m.body, "ratelimit_denied_total{level=\"user\",rule=\"per-user\"} 1\n");
    ck_assert_ptr_null(strstr(m.body, "ratelimit_denied_total{level=\"team\""));
    ck_assert_ptr_null(strstr(m.body, "ratelimit_denied_total{level=\"user\",rule=\"new-limit\""));
    metric_line(m.body, "ratelimit_acquire_total{decision=\"allowed\"} 5\n");
    su_resp_free(&m);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(shadow_rules_in_the_replay_summary)
{
    su_server s;
    char trace[1024] = "", cmd[2048], bin[600], *out = NULL;
    su_tmpdir(&s);
    for (int i = 0; i < 6; i++)
        snprintf(trace + strlen(trace), sizeof trace - strlen(trace), "%s\n", request);
    char cfgpath[400];
    snprintf(cfgpath, sizeof cfgpath, "%s", su_write(s.dir, "c.json", cfg));
    const char *tpath = su_write(s.dir, "t.jsonl", trace);
    snprintf(bin, sizeof bin, "%s", su_binary());
    snprintf(strrchr(bin, '/') + 1, 64, "ratelimit-replay");
    snprintf(cmd, sizeof cmd, "'%s' --config '%s' < '%s'", bin, cfgpath, tpath);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    ck_assert_int_eq(su_run(argv, &out), 0);
    /* rules in the order first seen: per-user and new-limit on request 1, team too */
    const char *want =
        "{\"summary\":{\"requests\":6,\"allowed\":5,\"denied\":1,\"errors\":0,\"rules\":["
        "{\"level\":\"user\",\"rule\":\"per-user\",\"allowed\":5,\"denied\":1,\"shadow_denied\":0},"
        "{\"level\":\"user\",\"rule\":\"new-limit\",\"allowed\":5,\"denied\":0,"
        "\"shadow_denied\":4},"
        "{\"level\":\"team\",\"rule\":\"team\",\"allowed\":5,\"denied\":0,\"shadow_denied\":3}],"
        "\"top_denied_keys\":[{\"level\":\"user\",\"key\":\"alice\",\"denied\":1}],"
        "\"peak_wait\":{\"seconds\":1,\"line\":6}}}\n";
    const char *summary = strstr(out, "{\"summary\":");
    ck_assert_ptr_nonnull(summary);
    ck_assert_str_eq(summary, want);
    free(out);
}
END_TEST

static Suite *shadow_suite(void)
{
    Suite *s = suite_create("shadow");
    TCase *tc = tcase_create("shadow");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, shadow_rules_through_the_daemon);
    tcase_add_test(tc, shadow_rules_in_the_replay_summary);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(shadow_suite());
}
