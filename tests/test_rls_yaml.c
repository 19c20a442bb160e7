/*
 * test_rls_yaml.c - envoyproxy/ratelimit's configurations decided by the limiter: the
 * examples of its README (written out again here), each asked with requests whose answers
 * are worked out by hand, the limit override, both hits_addends, and the cases where
 * ratelimitd differs on purpose (a denied request counts against none of its descriptors).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/buf.h"
#include "testutil.h"
#include "yamlutil.h"

#define OK RLD_YCODE_OK
#define OVER RLD_YCODE_OVER_LIMIT

/* status i: code, requests_per_unit, unit, remaining, reset in whole seconds */
static void expect(const yt *t, size_t i, rld_ycode code, uint32_t rpu, int unit,
                   uint32_t remaining, long reset_s)
{
    const rld_ystatus *s = &t->st[i];
    ck_assert_msg(s->code == code, "status %zu: code %d, want %d", i, s->code, code);
    ck_assert_msg(s->has_limit, "status %zu: no limit", i);
    ck_assert_uint_eq(s->requests_per_unit, rpu);
    ck_assert_int_eq(s->unit, unit);
    ck_assert_msg(s->remaining == remaining, "status %zu: remaining %u, want %u", i, s->remaining,
                  remaining);
    ck_assert(s->has_reset);
    ck_assert_int_eq(s->reset, (rl_ns)reset_s * RL_NS_PER_SEC);
}

/* status i: OK with no limit (nothing matched, or replaced) */
static void expect_none(const yt *t, size_t i)
{
    ck_assert_int_eq(t->st[i].code, OK);
    ck_assert(!t->st[i].has_limit);
    ck_assert(!t->st[i].has_reset);
    ck_assert_uint_eq(t->st[i].remaining, t->st[i].unlimited ? UINT32_MAX : 0);
}

static char *metrics_of(yt *t)
{
    static char text[16384];
    rld_buf b;
    rld_buf_init(&b, text, sizeof text);
    rld_yrls_metrics(t->y, &b);
    ck_assert(!rld_buf_on_heap(&b));
    rld_buf_cstr(&b);
    return text;
}

static void has_line(const char *text, const char *line)
{
    char want[400];
    snprintf(want, sizeof want, "\n%s\n", line);
    ck_assert_msg(strstr(text, want) != NULL, "no line \"%s\" in:\n%s", line, text);
}

/* ---- README example 1: two values of one key, 500 a second each -------------------------- */

static const char *ex1 = "domain: mongo_cps\n"
                         "descriptors:\n"
                         "  - key: database\n"
                         "    value: users\n"
                         "    rate_limit:\n"
                         "      unit: second\n"
                         "      requests_per_unit: 500\n"
                         "\n"
                         "  - key: database\n"
                         "    value: default\n"
                         "    rate_limit:\n"
                         "      unit: second\n"
                         "      requests_per_unit: 500\n";

START_TEST(example1_per_second)
{
    yt t;
    yt_open(&t, ex1, NULL);
    /* 499 at t = 100.25 leave 1; the window of second 100 ends in 1 s */
    ck_assert_int_eq(yt_ask(&t, "mongo_cps", 100.25, 499, "database=users"), OK);
    expect(&t, 0, OK, 500, RLD_UNIT_SECOND, 1, 1);
    ck_assert_int_eq(yt_ask(&t, "mongo_cps", 100.5, 0, "database=users"), OK);
    expect(&t, 0, OK, 500, RLD_UNIT_SECOND, 0, 1);
    ck_assert_int_eq(yt_ask(&t, "mongo_cps", 100.75, 0, "database=users"), OVER);
    expect(&t, 0, OVER, 500, RLD_UNIT_SECOND, 0, 1);
    /* the other value has its own 500; an unlisted value matches nothing */
    ck_assert_int_eq(yt_ask(&t, "mongo_cps", 100.75, 0, "database=default; database=other"), OK);
    expect(&t, 0, OK, 500, RLD_UNIT_SECOND, 499, 1);
    expect_none(&t, 1);
    /* second 101 is a new window */
    ck_assert_int_eq(yt_ask(&t, "mongo_cps", 101, 0, "database=users"), OK);
    expect(&t, 0, OK, 500, RLD_UNIT_SECOND, 499, 1);
    yt_close(&t);
}
END_TEST

/* ---- README example 2: nested descriptors, several descriptors in one request ------------ */

static const char *ex2 = "domain: messaging\n"
                         "descriptors:\n"
                         "  # Only allow 5 marketing messages a day\n"
                         "  - key: message_type\n"
                         "    value: marketing\n"
                         "    descriptors:\n"
                         "      - key: to_number\n"
                         "        rate_limit:\n"
                         "          unit: day\n"
                         "          requests_per_unit: 5\n"
                         "\n"
                         "  # Only allow 100 messages a day to any unique phone number\n"
                         "  - key: to_number\n"
                         "    rate_limit:\n"
                         "      unit: day\n"
                         "      requests_per_unit: 100\n";

START_TEST(example2_nested_and_denial_consumes_nothing)
{
    yt t;
    const char *both = "message_type=marketing, to_number=2061111111; to_number=2061111111";
    yt_open(&t, ex2, NULL);
    /* day windows from 0: at t = 1000.5 the day ends in 86400 - 1000 = 85400 s */
    for (uint32_t i = 1; i <= 5; i++) {
        ck_assert_int_eq(yt_ask(&t, "messaging", 1000.5, 0, both), OK);
        expect(&t, 0, OK, 5, RLD_UNIT_DAY, 5 - i, 85400);
        expect(&t, 1, OK, 100, RLD_UNIT_DAY, 100 - i, 85400);
    }
    /* the sixth marketing message is over; the number's own limit had room, and is not
     * counted: the request is denied as a whole (upstream would count it: 94) */
    ck_assert_int_eq(yt_ask(&t, "messaging", 2000, 0, both), OVER);
    expect(&t, 0, OVER, 5, RLD_UNIT_DAY, 0, 84400);
    expect(&t, 1, OK, 100, RLD_UNIT_DAY, 95, 84400);
    ck_assert_int_eq(yt_ask(&t, "messaging", 2000, 0, "to_number=2061111111"), OK);
    expect(&t, 0, OK, 100, RLD_UNIT_DAY, 94, 84400);
    /* every number counts on its own */
    ck_assert_int_eq(
        yt_ask(&t, "messaging", 2000, 0, "message_type=marketing, to_number=2062222222"), OK);
    expect(&t, 0, OK, 5, RLD_UNIT_DAY, 4, 84400);
    /* the next day starts at 86400 */
    ck_assert_int_eq(yt_ask(&t, "messaging", 86400, 0, both), OK);
    expect(&t, 0, OK, 5, RLD_UNIT_DAY, 4, 86400);
    expect(&t, 1, OK, 100, RLD_UNIT_DAY, 99, 86400);
    /* a request deeper than the configuration, and message_type alone, match nothing */
    ck_assert_int_eq(yt_ask(&t, "messaging", 86400, 0, "to_number=1, x=y; message_type=marketing"),
                     OK);
    expect_none(&t, 0);
    expect_none(&t, 1);
    yt_close(&t);
}
END_TEST

/* ---- README example 3: the most specific match, a limit of 0 ------------------------------ */

static const char *ex3 = "domain: edge_proxy_per_ip\n"
                         "descriptors:\n"
                         "  - key: remote_address\n"
                         "    rate_limit:\n"
                         "      unit: second\n"
                         "      requests_per_unit: 10\n"
                         "\n"
                         "  # Black list IP\n"
                         "  - key: remote_address\n"
                         "    value: 50.0.0.5\n"
                         "    rate_limit:\n"
                         "      unit: second\n"
                         "      requests_per_unit: 0\n";

START_TEST(example3_most_specific_wins)
{
    yt t;
    yt_open(&t, ex3, NULL);
    ck_assert_int_eq(yt_ask(&t, "edge_proxy_per_ip", 7, 0, "remote_address=50.0.0.1"), OK);
    expect(&t, 0, OK, 10, RLD_UNIT_SECOND, 9, 1);
    ck_assert_int_eq(yt_ask(&t, "edge_proxy_per_ip", 7, 0, "remote_address=50.0.0.5"), OVER);
    expect(&t, 0, OVER, 0, RLD_UNIT_SECOND, 0, 1);
    /* a check of 0 hits is not over a limit of 0 (upstream: 0 + 0 > 0 is false) */
    ck_assert_int_eq(yt_ask(&t, "edge_proxy_per_ip", 7, 0, "remote_address=50.0.0.5 @h0"), OK);
    expect(&t, 0, OK, 0, RLD_UNIT_SECOND, 0, 1);
    yt_close(&t);
}
END_TEST

/* ---- README example 4: the request's depth must be the configuration's -------------------- */

START_TEST(example4_depth)
{
    yt t;
    yt_open(&t,
            "domain: example4\n"
            "descriptors:\n"
            "  - key: key\n"
            "    value: value\n"
            "    rate_limit:\n"
            "      requests_per_unit: 300\n"
            "      unit: second\n",
            NULL);
    ck_assert_int_eq(yt_ask(&t, "example4", 1, 0, "key=value, subkey=subvalue"), OK);
    expect_none(&t, 0);
    yt_close(&t);

    yt_open(&t,
            "domain: example4\n"
            "descriptors:\n"
            "  - key: key\n"
            "    value: value\n"
            "    descriptors:\n"
            "      - key: subkey\n"
            "        rate_limit:\n"
            "          requests_per_unit: 300\n"
            "          unit: second\n",
            NULL);
    ck_assert_int_eq(yt_ask(&t, "example4", 1, 0, "key=value, subkey=subvalue; key=value"), OK);
    expect(&t, 0, OK, 300, RLD_UNIT_SECOND, 299, 1);
    expect_none(&t, 1);
    yt_close(&t);
}
END_TEST

/* ---- README example 5: unlimited ----------------------------------------------------------- */

START_TEST(example5_unlimited)
{
    yt t;
    yt_open(&t,
            "domain: internal\n"
            "descriptors:\n"
            "  - key: ldap\n"
            "    rate_limit:\n"
            "      unlimited: true\n"
            "\n"
            "  - key: azure\n"
            "    rate_limit:\n"
            "      unit: minute\n"
            "      requests_per_unit: 100\n",
            NULL);
    /* at t = 90 the minute [60, 120) ends in 30 s */
    ck_assert_int_eq(yt_ask(&t, "internal", 90, 1000000, "ldap=x; azure=y @h1"), OK);
    ck_assert(t.st[0].unlimited);
    expect_none(&t, 0); /* OK, no limit, remaining MaxUint32 */
    expect(&t, 1, OK, 100, RLD_UNIT_MINUTE, 99, 30);
    yt_close(&t);
}
END_TEST

/* ---- README example 6: shadow_mode --------------------------------------------------------- */

static const char *ex6 = "domain: example6\n"
                         "descriptors:\n"
                         "  - key: service\n"
                         "    descriptors:\n"
                         "      - key: user\n"
                         "        value: user-a\n"
                         "        rate_limit:\n"
                         "          requests_per_unit: 10\n"
                         "          unit: second\n"
                         "        shadow_mode: true\n"
                         "      - key: user\n"
                         "        value: user-b\n"
                         "        rate_limit:\n"
                         "          requests_per_unit: 20\n"
                         "          unit: second\n";

START_TEST(example6_shadow_mode)
{
    yt t;
    const char *a = "service=auth-service, user=user-a";
    const char *b = "service=auth-service, user=user-b";
    yt_open(&t, ex6, NULL);
    for (uint32_t i = 1; i <= 10; i++) {
        ck_assert_int_eq(yt_ask(&t, "example6", 5, 0, a), OK);
        expect(&t, 0, OK, 10, RLD_UNIT_SECOND, 10 - i, 1);
        ck_assert(!t.st[0].shadow_denied);
    }
    /* the eleventh would be over: OK all the same, reported as a shadow denial */
    ck_assert_int_eq(yt_ask(&t, "example6", 5, 0, a), OK);
    expect(&t, 0, OK, 10, RLD_UNIT_SECOND, 0, 1);
    ck_assert(t.st[0].shadow_denied);
    /* user-b is enforced: 20, then over */
    ck_assert_int_eq(yt_ask(&t, "example6", 5, 20, b), OK);
    ck_assert_int_eq(yt_ask(&t, "example6", 5, 0, b), OVER);
    /* a request denied by user-b takes nothing from user-a's shadow limit either */
    ck_assert_int_eq(yt_ask(&t, "example6", 6, 20, b), OK);
    char both[128];
    snprintf(both, sizeof both, "%s; %s", a, b);
    ck_assert_int_eq(yt_ask(&t, "example6", 6, 0, both), OVER);
    expect(&t, 0, OK, 10, RLD_UNIT_SECOND, 10, 1);
    expect(&t, 1, OVER, 20, RLD_UNIT_SECOND, 0, 1);
    ck_assert_int_eq(yt_ask(&t, "example6", 6, 0, a), OK);
    expect(&t, 0, OK, 10, RLD_UNIT_SECOND, 9, 1);
    yt_close(&t);
}
END_TEST

START_TEST(global_shadow_mode)
{
    /* SHADOW_MODE as upstream answers it (its TestServiceGlobalShadowMode): a descriptor over
     * its limit stays OVER_LIMIT, only the overall code is OK, and global_shadow_mode counts
     * the request. user-b's 20 are counted; the 21st is let through, not counted (it does not
     * fit), and counted over_limit. user-a, shadow_mode of its own, answers OK as ever. */
    yt t;
    yt_open(&t, ex6, NULL);
    rld_yrls_set_global_shadow(t.y);
    ck_assert_int_eq(yt_ask(&t, "example6", 5, 20, "service=s, user=user-b"), OK);
    expect(&t, 0, OK, 20, RLD_UNIT_SECOND, 0, 1);
    ck_assert_int_eq(yt_ask(&t, "example6", 5, 0, "service=s, user=user-b; nothing=here"), OK);
    expect(&t, 0, OVER, 20, RLD_UNIT_SECOND, 0, 1);
    expect_none(&t, 1);
    ck_assert(!t.st[0].shadow_denied);
    for (int i = 0; i < 11; i++)
        ck_assert_int_eq(yt_ask(&t, "example6", 5, 0, "service=s, user=user-a"), OK);
    expect(&t, 0, OK, 10, RLD_UNIT_SECOND, 0, 1);
    ck_assert(t.st[0].shadow_denied);
    ck_assert_int_eq(yt_ask(&t, "example6", 6, 0, "service=s, user=user-b"), OK);
    expect(&t, 0, OK, 20, RLD_UNIT_SECOND, 19, 1);
    const char *m = metrics_of(&t);
    has_line(m, "ratelimit_service_global_shadow_mode 1");
    has_line(m, "ratelimit_service_rate_limit_over_limit{domain=\"example6\",key1=\"service\","
                "key2=\"user_user-b\"} 1");
    has_line(m, "ratelimit_service_rate_limit_total_hits{domain=\"example6\",key1=\"service\","
                "key2=\"user_user-b\"} 22");
    yt_close(&t);

    /* without it the same request is OVER_LIMIT and nothing counts the global mode */
    yt_open(&t, ex6, NULL);
    ck_assert_int_eq(yt_ask(&t, "example6", 5, 21, "service=s, user=user-b"), OVER);
    has_line(metrics_of(&t), "ratelimit_service_global_shadow_mode 0");
    yt_close(&t);
}
END_TEST

/* ---- quota_mode (upstream's TestServicePerDescriptorQuotaMode and the cases after it) ------- */

static const char *quota = "domain: quota-domain\n"
                           "descriptors:\n"
                           "  - key: regular\n"
                           "    value: limit\n"
                           "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
                           "  - key: quota\n"
                           "    value: limit\n"
                           "    quota_mode: true\n"
                           "    rate_limit: {unit: minute, requests_per_unit: 3}\n"
                           "  - key: quota1\n"
                           "    value: limit\n"
                           "    quota_mode: true\n"
                           "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
                           "  - key: quota2\n"
                           "    value: limit\n"
                           "    quota_mode: true\n"
                           "    rate_limit: {unit: minute, requests_per_unit: 3}\n";

START_TEST(quota_mode_only_quota_descriptors)
{
    /* two quota mode limits, 5 and 3 a minute, one hit a request at t = 10 (reset in 50 s) */
    yt t;
    const char *both = "quota1=limit; quota2=limit";
    yt_open(&t, quota, NULL);
    for (uint32_t i = 1; i <= 3; i++) {
        ck_assert_int_eq(yt_ask(&t, "quota-domain", 10, 0, both), OK);
        expect(&t, 0, OK, 5, RLD_UNIT_MINUTE, 5 - i, 50);
        expect(&t, 1, OK, 3, RLD_UNIT_MINUTE, 3 - i, 50);
    }
    /* some over (TestServiceQuotaModeOnlySomeOverTheLimit): quota2 OVER_LIMIT, the request OK;
     * quota1 counts the hit, quota2 (no room) does not */
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 10, 0, both), OK);
    expect(&t, 0, OK, 5, RLD_UNIT_MINUTE, 1, 50);
    expect(&t, 1, OVER, 3, RLD_UNIT_MINUTE, 0, 50);
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 10, 0, both), OK);
    expect(&t, 0, OK, 5, RLD_UNIT_MINUTE, 0, 50);
    expect(&t, 1, OVER, 3, RLD_UNIT_MINUTE, 0, 50);
    /* all over (TestServiceQuotaModeOnlyAllOverTheLimit): OVER_LIMIT */
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 10, 0, both), OVER);
    expect(&t, 0, OVER, 5, RLD_UNIT_MINUTE, 0, 50);
    expect(&t, 1, OVER, 3, RLD_UNIT_MINUTE, 0, 50);
    /* the next minute both have room again */
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 60, 0, both), OK);
    expect(&t, 0, OK, 5, RLD_UNIT_MINUTE, 4, 60);
    expect(&t, 1, OK, 3, RLD_UNIT_MINUTE, 2, 60);
    const char *m = metrics_of(&t);
    /* quota2: 3 within, then 3 over (2 let through, 1 in the denied request) */
    has_line(m, "ratelimit_service_rate_limit_over_limit{domain=\"quota-domain\","
                "key1=\"quota2_limit\"} 3");
    has_line(m, "ratelimit_service_rate_limit_within_limit{domain=\"quota-domain\","
                "key1=\"quota2_limit\"} 4");
    yt_close(&t);
}
END_TEST

START_TEST(quota_mode_beside_a_rate_limit)
{
    yt t;
    const char *both = "regular=limit; quota=limit";
    yt_open(&t, quota, NULL);
    /* under both (TestServiceMixedPerDescriptorModesUnderLimit): OK */
    for (uint32_t i = 1; i <= 3; i++) {
        ck_assert_int_eq(yt_ask(&t, "quota-domain", 10, 0, both), OK);
        expect(&t, 0, OK, 5, RLD_UNIT_MINUTE, 5 - i, 50);
        expect(&t, 1, OK, 3, RLD_UNIT_MINUTE, 3 - i, 50);
    }
    /* the only quota mode limit over (TestServiceMixedPerDescriptorModes): every quota mode
     * limit is over, so OVER_LIMIT; a denied request counts nothing, regular keeps its 2 */
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 10, 0, both), OVER);
    expect(&t, 0, OK, 5, RLD_UNIT_MINUTE, 2, 50);
    expect(&t, 1, OVER, 3, RLD_UNIT_MINUTE, 0, 50);
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 10, 0, "regular=limit"), OK);
    expect(&t, 0, OK, 5, RLD_UNIT_MINUTE, 1, 50);
    /* beside another quota mode limit with room, the over one no longer denies */
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 10, 0, "regular=limit; quota=limit; quota1=limit"),
                     OK);
    expect(&t, 0, OK, 5, RLD_UNIT_MINUTE, 0, 50);
    expect(&t, 1, OVER, 3, RLD_UNIT_MINUTE, 0, 50);
    expect(&t, 2, OK, 5, RLD_UNIT_MINUTE, 4, 50);
    /* the rate limit over, the quota with room (TestServicePerDescriptorQuotaMode): OVER_LIMIT,
     * and the quota is not counted */
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 70, 5, "regular=limit"), OK);
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 70, 0, both), OVER);
    expect(&t, 0, OVER, 5, RLD_UNIT_MINUTE, 0, 50);
    expect(&t, 1, OK, 3, RLD_UNIT_MINUTE, 3, 50);
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 70, 0, "quota=limit"), OK);
    expect(&t, 0, OK, 3, RLD_UNIT_MINUTE, 2, 50);
    yt_close(&t);
}
END_TEST

START_TEST(quota_mode_under_global_shadow_mode)
{
    /* TestServiceQuotaModeWithShadowMode and TestServiceMixedModeWithShadowMode: every
     * descriptor over stays OVER_LIMIT, the overall code is OK, global_shadow_mode counts the
     * requests it answered OK instead (the first, second and fourth) */
    yt t;
    yt_open(&t, quota, NULL);
    rld_yrls_set_global_shadow(t.y);
    /* 5 hits: regular fits exactly, quota (3) is over and takes nothing */
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 10, 5, "regular=limit; quota=limit"), OK);
    expect(&t, 0, OK, 5, RLD_UNIT_MINUTE, 0, 50);
    expect(&t, 1, OVER, 3, RLD_UNIT_MINUTE, 0, 50);
    /* regular over, the quota with room: OVER_LIMIT rewritten, the quota counted */
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 10, 0, "regular=limit; quota=limit"), OK);
    expect(&t, 0, OVER, 5, RLD_UNIT_MINUTE, 0, 50);
    expect(&t, 1, OK, 3, RLD_UNIT_MINUTE, 2, 50);
    /* 3 hits fit both quota mode limits (5 and 3); 5 more are over both */
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 10, 3, "quota1=limit; quota2=limit"), OK);
    expect(&t, 0, OK, 5, RLD_UNIT_MINUTE, 2, 50);
    expect(&t, 1, OK, 3, RLD_UNIT_MINUTE, 0, 50);
    ck_assert_int_eq(yt_ask(&t, "quota-domain", 10, 5, "quota1=limit; quota2=limit"), OK);
    expect(&t, 0, OVER, 5, RLD_UNIT_MINUTE, 0, 50);
    expect(&t, 1, OVER, 3, RLD_UNIT_MINUTE, 0, 50);
    has_line(metrics_of(&t), "ratelimit_service_global_shadow_mode 3");
    yt_close(&t);
}
END_TEST

/* ---- README example 7: replaces ------------------------------------------------------------ */

static const char *ex7 = "domain: example7\n"
                         "descriptors:\n"
                         "  - key: key_1\n"
                         "    value: value_1\n"
                         "    descriptors:\n"
                         "      - key: user\n"
                         "        value: bkthomps\n"
                         "        rate_limit:\n"
                         "          name: specific_limit\n"
                         "          requests_per_unit: 5\n"
                         "          unit: second\n"
                         "  - key: key_2\n"
                         "    value: value_2\n"
                         "    descriptors:\n"
                         "      - key: user\n"
                         "        value: bkthomps\n"
                         "        rate_limit:\n"
                         "          replaces:\n"
                         "            - name: specific_limit\n"
                         "          requests_per_unit: 10\n"
                         "          unit: second\n";

START_TEST(example7_replaces)
{
    yt t;
    const char *both = "key_1=value_1, user=bkthomps; key_2=value_2, user=bkthomps";
    yt_open(&t, ex7, NULL);
    /* with both, only the replacing 10/s applies, and the 5/s one is left alone */
    for (uint32_t i = 1; i <= 7; i++) {
        ck_assert_int_eq(yt_ask(&t, "example7", 3, 0, both), OK);
        expect_none(&t, 0);
        expect(&t, 1, OK, 10, RLD_UNIT_SECOND, 10 - i, 1);
    }
    ck_assert_int_eq(yt_ask(&t, "example7", 3, 0, "key_1=value_1, user=bkthomps"), OK);
    expect(&t, 0, OK, 5, RLD_UNIT_SECOND, 4, 1);
    ck_assert_str_eq(t.st[0].name, "specific_limit");
    yt_close(&t);
}
END_TEST

/* ---- README examples 8 and 9: values, wildcards -------------------------------------------- */

START_TEST(example8_value_beats_key)
{
    yt t;
    yt_open(&t,
            "domain: example8\n"
            "descriptors:\n"
            "  - key: key1\n"
            "    detailed_metric: true\n"
            "    rate_limit:\n"
            "      unit: minute\n"
            "      requests_per_unit: 10\n"
            "  - key: key1\n"
            "    value: value1\n"
            "    rate_limit:\n"
            "      unit: minute\n"
            "      requests_per_unit: 20\n",
            NULL);
    ck_assert_int_eq(yt_ask(&t, "example8", 0, 0, "key1=value1; key1=other; key1=other2"), OK);
    expect(&t, 0, OK, 20, RLD_UNIT_MINUTE, 19, 60);
    expect(&t, 1, OK, 10, RLD_UNIT_MINUTE, 9, 60);
    expect(&t, 2, OK, 10, RLD_UNIT_MINUTE, 9, 60);
    yt_close(&t);
}
END_TEST

START_TEST(example9_wildcards)
{
    yt t;
    yt_open(&t,
            "domain: example9\n"
            "descriptors:\n"
            "  - key: key1\n"
            "    value: value*\n"
            "    rate_limit:\n"
            "      unit: minute\n"
            "      requests_per_unit: 20\n"
            "  - key: path\n"
            "    value: /api/*/action\n"
            "    rate_limit:\n"
            "      unit: minute\n"
            "      requests_per_unit: 20\n"
            "  - key: route\n"
            "    value: /api/*/resource/*/action\n"
            "    rate_limit:\n"
            "      unit: minute\n"
            "      requests_per_unit: 20\n",
            NULL);
    ck_assert_int_eq(
        yt_ask(&t, "example9", 61, 0, "key1=value1; key1=value1; key1=valueXYZ; key1=valu"), OK);
    /* one counter per value: value1 twice in one request counts 2 */
    expect(&t, 0, OK, 20, RLD_UNIT_MINUTE, 18, 59);
    expect(&t, 1, OK, 20, RLD_UNIT_MINUTE, 18, 59);
    expect(&t, 2, OK, 20, RLD_UNIT_MINUTE, 19, 59);
    expect_none(&t, 3);
    ck_assert_int_eq(yt_ask(&t, "example9", 61, 0,
                            "path=/api/123/action; path=/api/123/other; "
                            "route=/api/v1/resource/123/action; route=/api/v1/resource/123"),
                     OK);
    expect(&t, 0, OK, 20, RLD_UNIT_MINUTE, 19, 59);
    expect_none(&t, 1);
    expect(&t, 2, OK, 20, RLD_UNIT_MINUTE, 19, 59);
    expect_none(&t, 3);
    yt_close(&t);
}
END_TEST

/* ---- README example 11: share_threshold ---------------------------------------------------- */

START_TEST(example11_share_threshold)
{
    yt t;
    yt_open(&t,
            "domain: example11\n"
            "descriptors:\n"
            "  - key: files\n"
            "    value: files/*\n"
            "    share_threshold: true\n"
            "    rate_limit:\n"
            "      unit: hour\n"
            "      requests_per_unit: 10\n"
            "  - key: files_no_share\n"
            "    value: files_no_share/*\n"
            "    share_threshold: false\n"
            "    rate_limit:\n"
            "      unit: hour\n"
            "      requests_per_unit: 10\n",
            NULL);
    ck_assert_int_eq(yt_ask(&t, "example11", 10, 5, "files=files/a.pdf"), OK);
    ck_assert_int_eq(yt_ask(&t, "example11", 10, 5, "files=files/b.csv"), OK);
    expect(&t, 0, OK, 10, RLD_UNIT_HOUR, 0, 3590);
    ck_assert_int_eq(yt_ask(&t, "example11", 10, 0, "files=files/c.txt"), OVER);
    ck_assert_int_eq(yt_ask(&t, "example11", 10, 10, "files_no_share=files_no_share/a.pdf"), OK);
    ck_assert_int_eq(yt_ask(&t, "example11", 10, 0, "files_no_share=files_no_share/b.csv"), OK);
    expect(&t, 0, OK, 10, RLD_UNIT_HOUR, 9, 3590);
    yt_close(&t);
}
END_TEST

START_TEST(every_unit)
{
    /* windows from 0 of every unit; at t = 100000000.5 (day 1157, 09:46:40) each ends in
     * unit - 100000000 % unit seconds */
    yt t;
    yt_open(&t,
            "domain: u\n"
            "descriptors:\n"
            "  - {key: s, rate_limit: {unit: second, requests_per_unit: 2}}\n"
            "  - {key: m, rate_limit: {unit: minute, requests_per_unit: 2}}\n"
            "  - {key: h, rate_limit: {unit: hour, requests_per_unit: 2}}\n"
            "  - {key: d, rate_limit: {unit: day, requests_per_unit: 2}}\n"
            "  - {key: w, rate_limit: {unit: week, requests_per_unit: 2}}\n"
            "  - {key: mo, rate_limit: {unit: month, requests_per_unit: 2}}\n"
            "  - {key: y, rate_limit: {unit: year, requests_per_unit: 2}}\n",
            NULL);
    ck_assert_int_eq(yt_ask(&t, "u", 100000000.5, 0, "s=1; m=1; h=1; d=1; w=1; mo=1; y=1"), OK);
    expect(&t, 0, OK, 2, RLD_UNIT_SECOND, 1, 1);
    expect(&t, 1, OK, 2, RLD_UNIT_MINUTE, 1, 20);     /* 100000000 % 60 = 40 */
    expect(&t, 2, OK, 2, RLD_UNIT_HOUR, 1, 800);      /* % 3600 = 2800 */
    expect(&t, 3, OK, 2, RLD_UNIT_DAY, 1, 51200);     /* % 86400 = 35200 */
    expect(&t, 4, OK, 2, RLD_UNIT_WEEK, 1, 396800);   /* % 604800 = 208000 */
    expect(&t, 5, OK, 2, RLD_UNIT_MONTH, 1, 1088000); /* % 2592000 = 1504000 */
    expect(&t, 6, OK, 2, RLD_UNIT_YEAR, 1, 26144000); /* % 31536000 = 5392000 */
    /* the week ends at 100396800: a second before, w has none left after a hit; then two */
    ck_assert_int_eq(yt_ask(&t, "u", 100396799, 0, "w=1"), OK);
    expect(&t, 0, OK, 2, RLD_UNIT_WEEK, 0, 1);
    ck_assert_int_eq(yt_ask(&t, "u", 100396800, 0, "w=1"), OK);
    expect(&t, 0, OK, 2, RLD_UNIT_WEEK, 1, 604800);
    yt_close(&t);
}
END_TEST

START_TEST(native_algorithms)
{
    /* the same numbers, another shape: a token bucket of 60 refilled at 60 a minute (1/s) */
    yt t;
    yt_open(&t,
            "domain: n\n"
            "descriptors:\n"
            "  - key: k\n"
            "    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: token_bucket}\n",
            NULL);
    ck_assert_int_eq(yt_ask(&t, "n", 30, 60, "k=a"), OK);
    ck_assert_uint_eq(t.st[0].remaining, 0);
    ck_assert_int_eq(yt_ask(&t, "n", 30, 0, "k=a"), OVER);
    /* 5 s later 5 tokens are back (a fixed window would wait for the minute's end) */
    ck_assert_int_eq(yt_ask(&t, "n", 35, 5, "k=a"), OK);
    ck_assert_uint_eq(t.st[0].remaining, 0);
    ck_assert_str_eq(t.st[0].rule->type->name, "token_bucket");
    yt_close(&t);
}
END_TEST

/* The mapping asks the registry: a type registered here that declares how it takes n per unit
 * (a token bucket under another name) is an algorithm too; one that declares it wrongly is
 * refused, and one of an API before per_unit is no algorithm. */
static const rl_rule_per_unit bucket_per_unit = {.amount = "capacity", .rate = "per_second"};
static const rl_rule_per_unit rate_as_amount = {.amount = "per_second"};
static const rl_rule_per_unit capacity_as_window = {.amount = "capacity", .window = "capacity"};
static const rl_rule_per_unit unknown_param = {.amount = "most"};

START_TEST(algorithms_from_the_registry)
{
    rl_registry *reg = rl_registry_new();
    rl_rule_type bucket = *rl_registry_at(reg, 0), bad[3], old;
    const rl_rule_per_unit *wrong[3] = {&rate_as_amount, &capacity_as_window, &unknown_param};
    ck_assert_ptr_nonnull(rl_rule_type_per_unit(&bucket));
    bucket.name = "bucket2";
    bucket.redis = NULL; /* its tag is the original's */
    bucket.per_unit = &bucket_per_unit;
    for (int i = 0; i < 3; i++) {
        bad[i] = bucket;
        bad[i].name = "bad";
        bad[i].per_unit = wrong[i];
        ck_assert_int_eq(rl_register_rule_type(reg, &bad[i]), -1);
    }
    old = bucket;
    old.name = "old3";
    old.api_version = 3; /* per_unit is not read */
    ck_assert_int_eq(rl_register_rule_type(reg, &bucket), 0);
    ck_assert_int_eq(rl_register_rule_type(reg, &old), 0);
    ck_assert_ptr_null(rl_rule_type_per_unit(&old));

    /* bucket2 counts 60 a minute as the token bucket does (native_algorithms) */
    const char *yaml =
        "domain: n\n"
        "descriptors:\n"
        "  - key: k\n"
        "    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: bucket2}\n";
    yt t = {.reg = reg};
    rl_config *cfg;
    rl_err err = {{0}};
    rld_yconf *c = rld_yconf_new();
    ck_assert_int_eq(rld_yaml_parse(c, "test.yaml", yaml, strlen(yaml), &err), RL_OK);
    ck_assert_msg(rld_yrls_new(c, reg, &t.y, &cfg, &err) == RL_OK, "%s", err.msg);
    ck_assert_int_eq(rl_limiter_new(cfg, NULL, &t.lim, &err), RL_OK);
    ck_assert_int_eq(yt_ask(&t, "n", 30, 60, "k=a"), OK);
    ck_assert_uint_eq(t.st[0].remaining, 0);
    ck_assert_str_eq(t.st[0].rule->type->name, "bucket2");
    ck_assert_int_eq(yt_ask(&t, "n", 30, 0, "k=a"), OVER);
    ck_assert_int_eq(yt_ask(&t, "n", 35, 5, "k=a"), OK);
    /* not aligned: the reset is the bucket's own, empty and refilled at 1/s in 60 s (an
     * aligned window's would end at the minute's end, in 25 s) */
    ck_assert_int_eq(t.st[0].reset, 60 * RL_NS_PER_SEC);

    /* old3 is no algorithm; the message lists those there are, in registry order */
    yaml = "domain: n\n"
           "descriptors:\n"
           "  - key: k\n"
           "    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: old3}\n";
    rld_yrls *y2;
    rl_config *cfg2;
    c = rld_yconf_new();
    ck_assert_int_eq(rld_yaml_parse(c, "test.yaml", yaml, strlen(yaml), &err), RL_OK);
    ck_assert_int_eq(rld_yrls_new(c, reg, &y2, &cfg2, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "test.yaml: descriptors[0].rate_limit: algorithm: 'old3' is not "
                              "one of token_bucket, sliding_window, sliding_window_counter, "
                              "fixed_window, gcra, bucket2");
    yt_close(&t);
}
END_TEST

START_TEST(charge_after_the_fact)
{
    /* an AI gateway's token limit: a check (hits 0) before the model call, the real count
     * after it, recorded even past the limit; later checks wait out the debt */
    yt t;
    yt_open(&t,
            "domain: ai\n"
            "descriptors:\n"
            "  - key: api_key\n"
            "    charge: true\n"
            "    rate_limit: {unit: minute, requests_per_unit: 1000}\n",
            NULL);
    ck_assert_int_eq(yt_ask(&t, "ai", 1, 0, "api_key=k @h0"), OK);
    expect(&t, 0, OK, 1000, RLD_UNIT_MINUTE, 1000, 59);
    ck_assert_int_eq(yt_ask(&t, "ai", 2, 0, "api_key=k @h800"), OK);
    expect(&t, 0, OK, 1000, RLD_UNIT_MINUTE, 200, 58);
    /* 700 more: 1500 of 1000, recorded, and not denied (nobody waits for this answer) */
    ck_assert_int_eq(yt_ask(&t, "ai", 3, 0, "api_key=k @h700"), OK);
    expect(&t, 0, OK, 1000, RLD_UNIT_MINUTE, 0, 57);
    ck_assert_int_eq(t.st[0].st.remaining, -500 * RL_FP_ONE);
    /* the next check is over until the window ends */
    ck_assert_int_eq(yt_ask(&t, "ai", 4, 0, "api_key=k @h0"), OVER);
    ck_assert_int_eq(yt_ask(&t, "ai", 60, 0, "api_key=k @h0"), OK);
    expect(&t, 0, OK, 1000, RLD_UNIT_MINUTE, 1000, 60);
    yt_close(&t);
}
END_TEST

/* ---- native levels beside the YAML: tiers and quotas ----------------------------------------- */

static const char *beside_json =
    "{\"ratelimit_config\": \"api.yaml\", \"default_tier\": \"free\", "
    "\"levels\": [{\"name\": \"api_key\", \"tiered\": true}, {\"name\": \"user\", "
    "\"rules\": [{\"type\": \"fixed_window\", \"name\": \"per-user\", \"limit\": 1, "
    "\"window\": 60}]}], "
    "\"tiers\": {\"free\": [{\"type\": \"fixed_window\", \"limit\": 2, \"window\": 60}], "
    "\"enterprise\": [{\"type\": \"fixed_window\", \"limit\": 5, \"window\": 60}]}}";

START_TEST(tiers_and_quotas_beside_the_yaml)
{
    /* the YAML allows 3 a minute per api_key; the key's tier 2 (free) or 5 (enterprise) */
    yt t;
    rl_err err = {{0}};
    yt_open_beside(&t,
                   "domain: api\ndescriptors:\n  - key: api_key\n"
                   "    rate_limit: {unit: minute, requests_per_unit: 3}\n",
                   beside_json, NULL);
    ck_assert_int_eq(yt_ask(&t, "api", 10, 1, "api_key=alice"), OK);
    expect(&t, 0, OK, 3, RLD_UNIT_MINUTE, 2, 50);
    ck_assert_int_eq(yt_ask(&t, "api", 10, 1, "api_key=alice"), OK);
    expect(&t, 0, OK, 3, RLD_UNIT_MINUTE, 1, 50);
    /* the free tier is full: over, though the YAML's limit has room, and nothing is counted */
    ck_assert_int_eq(yt_ask(&t, "api", 10, 1, "api_key=alice"), OVER);
    ck_assert_int_eq(t.st[0].code, OVER);
    ck_assert_uint_eq(t.st[0].requests_per_unit, 3);
    ck_assert_uint_eq(t.st[0].remaining, 0);
    /* an admin moves alice to enterprise: her third request fits both, and it is the YAML's
     * third (the denied one took nothing from it) */
    ck_assert_msg(rl_quota_set(t.lim, "alice", "enterprise", NULL, &err) == RL_OK, "%s", err.msg);
    ck_assert_int_eq(yt_ask(&t, "api", 11, 1, "api_key=alice"), OK);
    expect(&t, 0, OK, 3, RLD_UNIT_MINUTE, 0, 49);
    ck_assert_int_eq(yt_ask(&t, "api", 11, 1, "api_key=alice"), OVER);
    ck_assert_int_eq(t.st[0].code, OVER); /* the YAML's limit denies now: 3 of 3 */
    ck_assert_int_eq(t.st[0].st.limit, 3 * RL_FP_ONE);
    /* a descriptor the YAML has no limit for, keyed by a native level: that level's numbers */
    ck_assert_int_eq(yt_ask(&t, "api", 10, 1, "user=bob"), OK);
    expect_none(&t, 0);
    ck_assert_int_eq(yt_ask(&t, "api", 10, 1, "user=bob"), OVER);
    expect(&t, 0, OVER, 1, RLD_UNIT_MINUTE, 0, 50);
    ck_assert_str_eq(t.st[0].name, "per-user");
    /* another domain: no limit at all, the native levels included */
    ck_assert_int_eq(yt_ask(&t, "other", 10, 1, "user=bob"), OK);
    yt_close(&t);
}
END_TEST

/* ---- the request: domain, override, hits_addend -------------------------------------------- */

static const char *basic = "domain: test-domain\n"
                           "descriptors:\n"
                           "  - key: key1\n"
                           "    value: value1\n"
                           "    descriptors:\n"
                           "      - key: subkey1\n"
                           "        rate_limit:\n"
                           "          unit: minute\n"
                           "          requests_per_unit: 50\n";

START_TEST(unknown_domain_limits_nothing)
{
    yt t;
    yt_open(&t, basic, NULL);
    ck_assert_int_eq(yt_ask(&t, "other-domain", 1, 0, "key1=value1, subkey1=x @o1/SECOND"), OK);
    expect_none(&t, 0);
    yt_close(&t);
}
END_TEST

START_TEST(limit_override_counts_on_its_own)
{
    yt t;
    const char *d = "key1=value1, subkey1=something";
    yt_open(&t, basic, NULL);
    /* 3 a minute from the request: at t = 10 the minute ends in 50 s */
    ck_assert_int_eq(yt_ask(&t, "test-domain", 10, 0, "key1=value1, subkey1=something @o3/MINUTE"),
                     OK);
    expect(&t, 0, OK, 3, RLD_UNIT_MINUTE, 2, 50);
    ck_assert_str_eq(t.st[0].name, "");
    ck_assert_int_eq(yt_ask(&t, "test-domain", 10, 2, "key1=value1, subkey1=something @o3/MINUTE"),
                     OK);
    expect(&t, 0, OK, 3, RLD_UNIT_MINUTE, 0, 50);
    ck_assert_int_eq(yt_ask(&t, "test-domain", 10, 0, "key1=value1, subkey1=something @o3/MINUTE"),
                     OVER);
    /* the configured 50 a minute is another counter, untouched */
    ck_assert_int_eq(yt_ask(&t, "test-domain", 10, 0, d), OK);
    expect(&t, 0, OK, 50, RLD_UNIT_MINUTE, 49, 50);
    /* an override applies where the configuration has no limit at all, and per day */
    ck_assert_int_eq(yt_ask(&t, "test-domain", 10, 0, "nothing=here @o2/DAY"), OK);
    expect(&t, 0, OK, 2, RLD_UNIT_DAY, 1, 86390);
    ck_assert_str_eq(yt_ask_err(&t, "test-domain", "a=b @o2/UNKNOWN"),
                     "descriptors[0].limit.unit: unknown unit 0");
    yt_close(&t);
}
END_TEST

START_TEST(hits_addends)
{
    yt t;
    const char *d = "key1=value1, subkey1=x";
    yt_open(&t, basic, NULL);
    /* the request's hits_addend: 0 means 1 */
    ck_assert_int_eq(yt_ask(&t, "test-domain", 0, 0, d), OK);
    expect(&t, 0, OK, 50, RLD_UNIT_MINUTE, 49, 60);
    ck_assert_int_eq(yt_ask(&t, "test-domain", 0, 9, d), OK);
    expect(&t, 0, OK, 50, RLD_UNIT_MINUTE, 40, 60);
    /* a descriptor's own hits_addend wins over the request's, 0 checks without counting */
    ck_assert_int_eq(yt_ask(&t, "test-domain", 0, 9, "key1=value1, subkey1=x @h3"), OK);
    expect(&t, 0, OK, 50, RLD_UNIT_MINUTE, 37, 60);
    ck_assert_int_eq(yt_ask(&t, "test-domain", 0, 9, "key1=value1, subkey1=x @h0"), OK);
    expect(&t, 0, OK, 50, RLD_UNIT_MINUTE, 37, 60);
    /* 37 more fit exactly; then a check still passes (not over), a hit does not */
    ck_assert_int_eq(yt_ask(&t, "test-domain", 0, 37, d), OK);
    expect(&t, 0, OK, 50, RLD_UNIT_MINUTE, 0, 60);
    ck_assert_int_eq(yt_ask(&t, "test-domain", 0, 0, "key1=value1, subkey1=x @h0"), OK);
    ck_assert_int_eq(yt_ask(&t, "test-domain", 0, 0, d), OVER);
    /* a request of 51 can never fit 50 */
    ck_assert_int_eq(yt_ask(&t, "test-domain", 60, 51, d), OVER);
    ck_assert_int_eq(yt_ask(&t, "test-domain", 60, 50, d), OK);
    yt_close(&t);
}
END_TEST

START_TEST(bad_requests)
{
    yt t;
    yt_open(&t, basic, NULL);
    ck_assert_str_eq(yt_ask_err(&t, "test-domain", "key1=a\tb"),
                     "descriptors[0].entries[0].value: must not hold control characters");
    ck_assert_str_eq(yt_ask_err(&t, "test-domain", "k=v; key1=value1, subkey1=x @h1000000000001"),
                     "descriptors[1].hits_addend: at most 1000000000000");
    yt_close(&t);
}
END_TEST

START_TEST(keys_are_found_again_from_the_store)
{
    /* values with the key format's own characters, and the rules found from a stored key when
     * the store sweeps: a key idle past its window is dropped */
    yt t;
    yt_open(&t, basic, NULL);
    ck_assert_int_eq(yt_ask(&t, "test-domain", 0, 0, "key1=value1, subkey1=a|b=c%d#e"), OK);
    ck_assert_int_eq(yt_ask(&t, "test-domain", 0, 0, "key1=value1, subkey1=a|b=c%d#e"), OK);
    expect(&t, 0, OK, 50, RLD_UNIT_MINUTE, 48, 60);
    ck_assert_int_eq(yt_ask(&t, "test-domain", 0, 0, "key1=value1, subkey1=a|b=c%d#f"), OK);
    expect(&t, 0, OK, 50, RLD_UNIT_MINUTE, 49, 60);
    ck_assert_int_eq(yt_ask(&t, "test-domain", 0, 0, "x=y @o5/HOUR"), OK);
    ck_assert_uint_eq(rl_limiter_keys(t.lim, 0), 3);
    rl_limiter_tick(t.lim, S(30));
    ck_assert_uint_eq(rl_limiter_keys(t.lim, 0), 3);
    rl_limiter_tick(t.lim, S(3600));
    ck_assert_uint_eq(rl_limiter_keys(t.lim, 0), 0);
    yt_close(&t);
}
END_TEST

/* ---- statistics -------------------------------------------------------------------------- */

START_TEST(statistics_as_upstream_counts)
{
    yt t;
    yt_open(&t,
            "domain: example8\n"
            "descriptors:\n"
            "  - key: key1\n"
            "    detailed_metric: true\n"
            "    rate_limit:\n"
            "      unit: minute\n"
            "      requests_per_unit: 10\n"
            "  - key: key1\n"
            "    value: value1\n"
            "    rate_limit:\n"
            "      unit: minute\n"
            "      requests_per_unit: 20\n",
            NULL);
    /* 17 of 20: 1 near (past 16); 5 more: 2 over, 3 near, denied and not counted; 3 more fit:
     * 3 near */
    yt_ask(&t, "example8", 0, 17, "key1=value1");
    ck_assert_int_eq(yt_ask(&t, "example8", 0, 5, "key1=value1"), OVER);
    ck_assert_int_eq(yt_ask(&t, "example8", 0, 3, "key1=value1"), OK);
    /* detailed_metric: a series per value */
    yt_ask(&t, "example8", 0, 2, "key1=other");
    yt_ask(&t, "example8", 0, 0, "key1=other2 @o5/HOUR");
    const char *m = metrics_of(&t);
    has_line(m, "# TYPE ratelimit_service_rate_limit_total_hits counter");
    has_line(
        m, "ratelimit_service_rate_limit_total_hits{domain=\"example8\",key1=\"key1_value1\"} 25");
    has_line(m,
             "ratelimit_service_rate_limit_over_limit{domain=\"example8\",key1=\"key1_value1\"} 2");
    has_line(m,
             "ratelimit_service_rate_limit_near_limit{domain=\"example8\",key1=\"key1_value1\"} 7");
    has_line(
        m,
        "ratelimit_service_rate_limit_within_limit{domain=\"example8\",key1=\"key1_value1\"} 20");
    has_line(m, "ratelimit_service_rate_limit_total_hits{domain=\"example8\",key1=\"key1\"} 0");
    has_line(m,
             "ratelimit_service_rate_limit_total_hits{domain=\"example8\",key1=\"key1_other\"} 2");
    /* an override counts under its entries */
    has_line(m,
             "ratelimit_service_rate_limit_total_hits{domain=\"example8\",key1=\"key1_other2\"} 1");
    yt_close(&t);

    yt_open(&t, ex6, NULL);
    for (int i = 0; i < 11; i++)
        yt_ask(&t, "example6", 5, 0, "service=auth-service, user=user-a");
    m = metrics_of(&t);
    /* 11 hits of 10: the 9th and 10th near (past 8), the 11th over and let through */
    has_line(m, "ratelimit_service_rate_limit_total_hits{domain=\"example6\",key1=\"service\","
                "key2=\"user_user-a\"} 11");
    has_line(m, "ratelimit_service_rate_limit_near_limit{domain=\"example6\",key1=\"service\","
                "key2=\"user_user-a\"} 2");
    has_line(m, "ratelimit_service_rate_limit_over_limit{domain=\"example6\",key1=\"service\","
                "key2=\"user_user-a\"} 1");
    has_line(m, "ratelimit_service_rate_limit_shadow_mode{domain=\"example6\",key1=\"service\","
                "key2=\"user_user-a\"} 1");
    has_line(m, "ratelimit_service_rate_limit_shadow_mode{domain=\"example6\",key1=\"service\","
                "key2=\"user_user-b\"} 0");
    yt_close(&t);
}
END_TEST

/* How many lines of text start with prefix. */
static int lines_with(const char *text, const char *prefix)
{
    int n = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        n += strncmp(p, prefix, strlen(prefix)) == 0;
    return n;
}

START_TEST(statistics_under_share_threshold)
{
    /* upstream's TestShareThreshold ("share_threshold with metrics"), from its
     * share_threshold.yaml: the values a wildcard shares a counter for share one series, named
     * by the pattern, even with value_to_metric or detailed_metric */
    yt t;
    yt_open(&t,
            "domain: test-domain\n"
            "descriptors:\n"
            "  - key: route\n"
            "    value: api/*\n"
            "    share_threshold: true\n"
            "    value_to_metric: true\n"
            "    descriptors:\n"
            "      - key: method\n"
            "        rate_limit: {unit: minute, requests_per_unit: 60}\n"
            "  - key: service\n"
            "    value: svc/*\n"
            "    share_threshold: true\n"
            "    descriptors:\n"
            "      - key: endpoint\n"
            "        detailed_metric: true\n"
            "        rate_limit: {unit: minute, requests_per_unit: 80}\n",
            NULL);
    yt_ask(&t, "test-domain", 0, 0, "route=api/v1, method=GET");
    yt_ask(&t, "test-domain", 0, 2, "route=api/v2, method=POST");
    yt_ask(&t, "test-domain", 0, 0, "service=svc/user, endpoint=get");
    yt_ask(&t, "test-domain", 0, 0, "service=svc/admin, endpoint=get");
    yt_ask(&t, "test-domain", 0, 0, "service=svc/admin, endpoint=put");
    const char *m = metrics_of(&t);
    has_line(m, "ratelimit_service_rate_limit_total_hits{domain=\"test-domain\","
                "key1=\"route_api/*\",key2=\"method\"} 3");
    has_line(m, "ratelimit_service_rate_limit_total_hits{domain=\"test-domain\","
                "key1=\"service_svc/*\",key2=\"endpoint_get\"} 2");
    has_line(m, "ratelimit_service_rate_limit_total_hits{domain=\"test-domain\","
                "key1=\"service_svc/*\",key2=\"endpoint_put\"} 1");
    ck_assert_msg(!strstr(m, "api/v") && !strstr(m, "svc/user") && !strstr(m, "svc/admin"),
                  "a series per value:\n%s", m);
    ck_assert_int_eq(lines_with(m, "ratelimit_service_rate_limit_total_hits{domain=\"test-domain\","
                                   "key1=\"route_api/*\",key2=\"method\"}"),
                     1);
    yt_close(&t);
}
END_TEST

START_TEST(one_series_per_label_set)
{
    /* upstream's TestValueToMetric_WithEmptyValue: an empty value is written without "_"; when
     * every value is empty the key is the configured one, and so is the series (one, not two
     * with the same labels) */
    yt t;
    yt_open(&t,
            "domain: domain\n"
            "descriptors:\n"
            "  - key: route\n"
            "    value_to_metric: true\n"
            "    descriptors:\n"
            "      - key: http_method\n"
            "        value_to_metric: true\n"
            "        descriptors:\n"
            "          - key: subject_id\n"
            "            rate_limit: {unit: minute, requests_per_unit: 60}\n",
            NULL);
    yt_ask(&t, "domain", 0, 0, "route=, http_method=GET, subject_id=123");
    yt_ask(&t, "domain", 0, 0, "route=draw, http_method=, subject_id=123");
    yt_ask(&t, "domain", 0, 0, "route=, http_method=, subject_id=123");
    yt_ask(&t, "domain", 0, 0, "route=, http_method=, subject_id=456");
    const char *m = metrics_of(&t);
    has_line(m, "ratelimit_service_rate_limit_total_hits{domain=\"domain\",key1=\"route\","
                "key2=\"http_method_GET\",key3=\"subject_id\"} 1");
    has_line(m, "ratelimit_service_rate_limit_total_hits{domain=\"domain\",key1=\"route_draw\","
                "key2=\"http_method\",key3=\"subject_id\"} 1");
    has_line(m, "ratelimit_service_rate_limit_total_hits{domain=\"domain\",key1=\"route\","
                "key2=\"http_method\",key3=\"subject_id\"} 2");
    ck_assert_int_eq(lines_with(m, "ratelimit_service_rate_limit_total_hits{domain=\"domain\","
                                   "key1=\"route\",key2=\"http_method\",key3=\"subject_id\"}"),
                     1);
    yt_close(&t);
}
END_TEST

START_TEST(extra_tags_and_service_counters)
{
    /* EXTRA_TAGS=region:us,zone:a: two labels after the others on every ratelimit_service_*
     * series; config_load_success is the load at start, config_load_error counts refused
     * reloads */
    yt t;
    rl_err err;
    yt_open(&t, ex6, NULL);
    ck_assert_int_eq(rld_yrls_set_extra_tags(t.y, "region:us,zone:a", &err), RL_OK);
    yt_ask(&t, "example6", 5, 0, "service=s, user=user-b");
    rld_yrls_load_error(t.y);
    const char *m = metrics_of(&t);
    has_line(m, "ratelimit_service_rate_limit_total_hits{domain=\"example6\",key1=\"service\","
                "key2=\"user_user-b\",region=\"us\",zone=\"a\"} 1");
    has_line(m, "ratelimit_service_config_load_success{region=\"us\",zone=\"a\"} 1");
    has_line(m, "ratelimit_service_config_load_error{region=\"us\",zone=\"a\"} 1");
    has_line(m, "ratelimit_service_global_shadow_mode{region=\"us\",zone=\"a\"} 0");
    ck_assert_int_eq(lines_with(m, "ratelimit_service_rate_limit_total_hits{domain=\"example6\","
                                   "key1=\"service\",key2=\"user_user-b\"}"),
                     0);
    /* a value with a quote is escaped; bad tags are refused naming the variable */
    ck_assert_int_eq(rld_yrls_set_extra_tags(t.y, "build:\"x\"", &err), RL_OK);
    has_line(metrics_of(&t), "ratelimit_service_config_load_success{build=\"\\\"x\\\"\"} 1");
    static const struct {
        const char *spec, *msg;
    } bad[] = {
        {"region", "EXTRA_TAGS: 'region' is not <name>:<value>"},
        {"region:us,", "EXTRA_TAGS: '' is not <name>:<value>"},
        {"re-gion:us", "EXTRA_TAGS: 're-gion' is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)"},
        {"domain:x", "EXTRA_TAGS: 'domain' is a label of the statistics themselves (domain, key1, "
                     "key2, ...)"},
        {"key2:x", "EXTRA_TAGS: 'key2' is a label of the statistics themselves (domain, key1, "
                   "key2, ...)"},
        {"a:1,a:2", "EXTRA_TAGS: 'a' is given twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(rld_yrls_set_extra_tags(t.y, bad[i].spec, &err), RL_EINVAL);
        ck_assert_str_eq(err.msg, bad[i].msg);
    }
    yt_close(&t);
}
END_TEST

/* ---- threads -------------------------------------------------------------------------------- */

static yt shared;

static void *hammer(void *arg)
{
    /* 1000 requests of two descriptors: the configured counter, and an override's */
    rld_yentry e[2] = {{"key1", 4, "value1", 6}, {"subkey1", 7, "x", 1}};
    rld_ydescreq d[2] = {{.entries = e, .nentries = 2},
                         {.entries = e,
                          .nentries = 2,
                          .has_override = 1,
                          .override_rpu = 100000,
                          .override_unit = RLD_UNIT_HOUR}};
    rld_ystatus st[2];
    rld_ycode overall;
    rl_err err;
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        rld_yreq r = {
            .domain = "test-domain", .domain_len = 11, .desc = d, .ndesc = 2, .now = S(1)};
        ck_assert_int_eq(rld_yrls_decide(shared.y, shared.lim, &r, st, &overall, &err), RL_OK);
        ck_assert_int_eq(overall, OK);
    }
    return NULL;
}

START_TEST(threads_share_counters_and_stats)
{
    pthread_t th[4];
    yt_open(&shared,
            "domain: test-domain\n"
            "descriptors:\n"
            "  - key: key1\n"
            "    value: value1\n"
            "    descriptors:\n"
            "      - key: subkey1\n"
            "        detailed_metric: true\n"
            "        rate_limit: {unit: minute, requests_per_unit: 5000}\n",
            NULL);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, hammer, NULL), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    /* 4000 of 5000 taken, and 4000 of the override's 100000 */
    ck_assert_int_eq(yt_ask(&shared, "test-domain", 1, 0, "key1=value1, subkey1=x @h0"), OK);
    ck_assert_uint_eq(shared.st[0].remaining, 1000);
    ck_assert_int_eq(
        yt_ask(&shared, "test-domain", 1, 0, "key1=value1, subkey1=x @h0 @o100000/HOUR"), OK);
    ck_assert_uint_eq(shared.st[0].remaining, 96000);
    has_line(metrics_of(&shared), "ratelimit_service_rate_limit_total_hits{domain=\"test-domain\","
                                  "key1=\"key1_value1\",key2=\"subkey1_x\"} 8000");
    yt_close(&shared);
}
END_TEST

static Suite *rls_yaml_suite(void)
{
    Suite *s = suite_create("rls_yaml");
    TCase *tc = tcase_create("examples");
    tcase_add_test(tc, example1_per_second);
    tcase_add_test(tc, example2_nested_and_denial_consumes_nothing);
    tcase_add_test(tc, example3_most_specific_wins);
    tcase_add_test(tc, example4_depth);
    tcase_add_test(tc, example5_unlimited);
    tcase_add_test(tc, example6_shadow_mode);
    tcase_add_test(tc, global_shadow_mode);
    tcase_add_test(tc, quota_mode_only_quota_descriptors);
    tcase_add_test(tc, quota_mode_beside_a_rate_limit);
    tcase_add_test(tc, quota_mode_under_global_shadow_mode);
    tcase_add_test(tc, example7_replaces);
    tcase_add_test(tc, example8_value_beats_key);
    tcase_add_test(tc, example9_wildcards);
    tcase_add_test(tc, example11_share_threshold);
    tcase_add_test(tc, every_unit);
    tcase_add_test(tc, native_algorithms);
    tcase_add_test(tc, algorithms_from_the_registry);
    suite_add_tcase(s, tc);
    tc = tcase_create("request");
    tcase_add_test(tc, unknown_domain_limits_nothing);
    tcase_add_test(tc, limit_override_counts_on_its_own);
    tcase_add_test(tc, hits_addends);
    tcase_add_test(tc, charge_after_the_fact);
    tcase_add_test(tc, tiers_and_quotas_beside_the_yaml);
    tcase_add_test(tc, bad_requests);
    tcase_add_test(tc, keys_are_found_again_from_the_store);
    tcase_add_test(tc, statistics_as_upstream_counts);
    tcase_add_test(tc, statistics_under_share_threshold);
    tcase_add_test(tc, one_series_per_label_set);
    tcase_add_test(tc, extra_tags_and_service_counters);
    tcase_add_test(tc, threads_share_counters_and_stats);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(rls_yaml_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
