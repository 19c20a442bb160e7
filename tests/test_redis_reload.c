/*
 * test_redis_reload.c - a reload of a daemon on the Redis store ("store": "redis"), the real
 * build/ratelimitd over a real redis-server: the new configuration is put in force over the same
 * store, so the counts Redis holds go on under the new limits; a configuration the store cannot
 * hold, that does not load, or that changes what the store was opened with, is refused and the
 * one in force keeps deciding; a denial the cache of denials learnt before a reload does not
 * deny after one that raised the limit; the quotas Redis holds stay in force across a reload;
 * the leases are given back.
 *
 * Every request carries "now": 100 (--manual-clock), so the fixed window of 1,000 s never
 * rolls and the counts below are exact.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "srvutil.h"

static const char *const manual[] = {"--manual-clock", NULL};
static const char *const adm[] = {"Authorization: Bearer adm", NULL};

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The absolute path of the test plug-in (a rule type with state and no Redis port). */
static const char *max_keys_plugin(void)
{
    static char path[400];
    char rel[400];
    const char *b = getenv("RL_BUILD");
    snprintf(rel, sizeof rel, "%s/plugins/librule_max_keys.so", b && *b ? b : "build");
    ck_assert_msg(realpath(rel, path) != NULL, "no %s", rel);
    return path;
}

/* The configuration on r's Redis: level "user" with the rule given (JSON), level "plan" tiered
 * (tier "free": a window of 2, "gold": of 50). */
static const char *config(const rt_redis *r, const char *user_rule)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"admin_token\": \"adm\", \"plugins\": [\"%s\"], \"store\": {\"type\": "
             "\"redis\", \"url\": \"%s\", \"prefix\": \"rr:\", \"timeout_ms\": 2000, "
             "\"deny_cache\": true}, \"levels\": [{\"name\": \"user\", \"rules\": [%s], "
             "\"on_store_error\": \"closed\"}, {\"name\": \"plan\", \"tiered\": true}], "
             "\"tiers\": {\"free\": [{\"type\": "
             "\"fixed_window\", \"name\": \"free\", \"limit\": 2, \"window\": 1000}], \"gold\": "
             "[{\"type\": \"fixed_window\", \"name\": \"gold\", \"limit\": 50, \"window\": "
             "1000}]}, \"default_tier\": \"free\"}",
             max_keys_plugin(), r->url, user_rule);
    return buf;
}

static const char *window(int limit)
{
    static char buf[200];
    snprintf(buf, sizeof buf,
             "{\"type\": \"fixed_window\", \"name\": \"w\", \"limit\": %d, \"window\": 1000}",
             limit);
    return buf;
}

/* One request of cost 1 at now 100 for user u (and plan p when not NULL); asserts its status
 * and returns the first limit's remaining. */
static double take(const su_server *s, const char *u, const char *p, long want)
{
    char body[300];
    if (p)
        snprintf(body, sizeof body, "{\"keys\": {\"plan\": \"%s\"}, \"now\": 100}", p);
    else
        snprintf(body, sizeof body, "{\"keys\": {\"user\": \"%s\"}, \"now\": 100}", u);
    su_resp r = su_req(s, "POST", "/acquire", body, NULL);
    ck_assert_msg(r.status == want, "%s: status %ld, want %ld: %s", body, r.status, want, r.body);
    double v = json_number_value(
        json_object_get(json_array_get(json_object_get(r.json, "limits"), 0), "remaining"));
    su_resp_free(&r);
    return v;
}

/* The value of one sample line of /metrics ("name{labels}" exactly); 0 when absent. */
static double metric(const su_server *s, const char *series)
{
    su_resp r = su_req(s, "GET", "/metrics", NULL, NULL);
    char want[300];
    snprintf(want, sizeof want, "\n%s ", series);
    const char *p = r.body ? strstr(r.body, want) : NULL;
    double v = p ? atof(p + strlen(want)) : 0;
    su_resp_free(&r);
    return v;
}

static int count_in(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* Waits (10 s at most) until the log holds n lines with text. */
static void wait_log(const su_server *s, const char *text, int n)
{
    double until = mono_s() + 10;
    for (;;) {
        char *log = su_read(s->log);
        int got = count_in(log, text);
        if (got >= n) {
            free(log);
            return;
        }
        ck_assert_msg(mono_s() < until, "%d lines \"%s\" in the log, want %d:\n%s", got, text, n,
                      log ? log : "");
        free(log);
        usleep(10000);
    }
}

/* POST /admin/reload with the file rewritten to text: its status, its error when not 200. */
static void reload_with(const su_server *s, const char *text, long want, const char *error)
{
    su_write(s->dir, "config.json", text);
    su_resp r = su_req(s, "POST", "/admin/reload", NULL, adm);
    ck_assert_msg(r.status == want, "reload: status %ld, want %ld: %s", r.status, want, r.body);
    if (error)
        ck_assert_msg(strstr(su_error(&r), error) != NULL, "reload: error \"%s\", want \"%s\"",
                      su_error(&r), error);
    su_resp_free(&r);
}

START_TEST(reload_over_redis_keeps_the_counts_and_refuses_what_redis_cannot_hold)
{
    rt_redis rd;
    su_server s;
    rt_redis_start(&rd);
    su_tmpdir(&s);
    su_start(&s, config(&rd, window(5)), manual);

    /* 5 in the window: 3 taken leave 2 */
    ck_assert_double_eq(take(&s, "u", NULL, 200), 4);
    ck_assert_double_eq(take(&s, "u", NULL, 200), 3);
    ck_assert_double_eq(take(&s, "u", NULL, 200), 2);
    /* a quota kept in Redis: alice on gold (50) instead of free (2) */
    su_resp q = su_req(&s, "PUT", "/quota/alice", "{\"tier\": \"gold\"}", adm);
    ck_assert_msg(q.status == 200, "PUT /quota: %ld %s", q.status, q.body);
    su_resp_free(&q);
    ck_assert_double_eq(take(&s, NULL, "alice", 200), 49);

    /* the same level and rule, a limit of 4, over SIGHUP: Redis counted 3, so 1 more is
     * allowed (remaining 0) and the next denied */
    su_write(s.dir, "config.json", config(&rd, window(4)));
    kill(s.pid, SIGHUP);
    wait_log(&s, "configuration reloaded from", 1);
    ck_assert_double_eq(take(&s, "u", NULL, 200), 0);
    take(&s, "u", NULL, 429);
    /* the quota Redis holds is in force on the new limiter: 50 - 2 = 48 */
    ck_assert_double_eq(take(&s, NULL, "alice", 200), 48);

    /* the denial learnt by the cache of denials: asked again until the cache answers it (once
     * its follower is subscribed) */
    double until = mono_s() + 10;
    while (metric(&s, "ratelimit_deny_cache_total{level=\"user\"}") < 1) {
        ck_assert_msg(mono_s() < until, "the cache of denials never answered");
        take(&s, "u", NULL, 429);
        usleep(20000);
    }

    /* a limit of 6 over POST /admin/reload: 4 counted, 2 more (the cached denial is gone) */
    reload_with(&s, config(&rd, window(6)), 200, NULL);
    ck_assert_double_eq(take(&s, "u", NULL, 200), 1);

    /* refused: a rule type the Redis store cannot hold, and a file that is not JSON; the limit
     * of 6 stays in force, over the same store */
    char rule[600];
    snprintf(rule, sizeof rule, "{\"type\": \"max_keys\", \"limit\": 3}");
    reload_with(&s, config(&rd, rule), 400,
                "levels[0].rules[0]: rule type max_keys keeps state that the Redis store cannot "
                "hold");
    reload_with(&s, "{\"levels\": [", 400, NULL);
    /* and a file that would change the store */
    reload_with(&s,
                "{\"admin_token\": \"adm\", \"levels\": [{\"name\": \"user\", \"rules\": "
                "[{\"type\": \"fixed_window\", \"limit\": 9, \"window\": 1000}]}]}",
                400, "store: a reload keeps the store in force (redis)");
    /* and one that changes what the store was opened with for a level (its on_store_error) */
    char *open_mode = su_replace_once(strdup(config(&rd, window(6))),
                                      "\"on_store_error\": \"closed\"",
                                      "\"on_store_error\": \"open\"", "the configuration");
    reload_with(&s, open_mode, 400,
                "levels[0].on_store_error: a reload over the Redis store keeps each level's "
                "on_store_error, shards and lease");
    free(open_mode);
    ck_assert_double_eq(take(&s, "u", NULL, 200), 0);
    take(&s, "u", NULL, 429);
    ck_assert_double_eq(take(&s, NULL, "alice", 200), 47);

    /* Redis holds the count: rr:...user... has 6 */
    su_resp m = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_msg(strstr(m.body, "\nratelimit_config_reloads_total{result=\"ok\"} 2\n") &&
                      strstr(m.body, "\nratelimit_config_reloads_total{result=\"error\"} 4\n"),
                  "%s", m.body);
    su_resp_free(&m);
    ck_assert_int_eq(su_stop(&s), 0);

    /* a restart on the last configuration in force: the count of 6 is Redis's */
    su_write(s.dir, "config.json", config(&rd, window(6)));
    su_start(&s, config(&rd, window(6)), manual);
    take(&s, "u", NULL, 429);
    ck_assert_int_eq(su_stop(&s), 0);
    rt_redis_stop(&rd);
}
END_TEST

/* The global level of a token bucket of 1,000 refilling 0.01 a second (under 0.1 over this
 * test), on prefix "lr:", leased in slices of 100 (lease 1) or not. */
static const char *global_config(const rt_redis *r, int lease)
{
    static char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"store\": {\"type\": \"redis\", \"url\": \"%s\", \"prefix\": \"lr:\", "
             "\"timeout_ms\": 2000}, \"levels\": [{\"name\": \"global\", \"default_key\": \"*\", "
             "\"on_store_error\": \"closed\"%s, \"rules\": [{\"type\": \"token_bucket\", "
             "\"name\": \"all\", \"capacity\": 1000, \"per_second\": 0.01}]}]}",
             r->url, lease ? ", \"lease\": {\"slice\": 100, \"ttl_ms\": 60000}" : "");
    return buf;
}

/* One request of the global level (real clock); returns its remaining. */
static double take_global(const su_server *s)
{
    su_resp r = su_req(s, "POST", "/acquire", "{\"keys\": {}}", NULL);
    ck_assert_msg(r.status == 200, "status %ld: %s", r.status, r.body);
    double v = json_number_value(
        json_object_get(json_array_get(json_object_get(r.json, "limits"), 0), "remaining"));
    su_resp_free(&r);
    return v;
}

/* A leased instance and a plain one on the same bucket. The leased one's first request takes
 * 1 and a slice of 100 from Redis (1000 - 101 = 899 there), its second comes from the lease
 * (held 99). The plain one takes 1: 898 left. A reload of the leased one (the same file) gives
 * the 99 back before the new configuration is in force: the plain one's next leaves
 * 898 + 99 - 1 = 996. */
START_TEST(a_reload_gives_the_leases_back)
{
    rt_redis rd;
    su_server leased, plain;
    rt_redis_start(&rd);
    su_tmpdir(&leased);
    su_start(&leased, global_config(&rd, 1), NULL);
    su_tmpdir(&plain);
    su_start(&plain, global_config(&rd, 0), NULL);
    take_global(&leased);
    take_global(&leased);
    ck_assert_double_eq(metric(&leased, "ratelimit_lease_held{level=\"global\"}"), 99);
    double left = take_global(&plain);
    ck_assert_msg(left >= 898 && left < 899, "remaining %g before the reload, not 898", left);
    kill(leased.pid, SIGHUP);
    wait_log(&leased, "configuration reloaded from", 1);
    ck_assert_double_eq(metric(&leased, "ratelimit_lease_held{level=\"global\"}"), 0);
    ck_assert_double_eq(metric(&leased, "ratelimit_lease_returned_total{level=\"global\"}"), 99);
    left = take_global(&plain);
    ck_assert_msg(left >= 996 && left < 997, "remaining %g after the reload, not 996", left);
    ck_assert_int_eq(su_stop(&leased), 0);
    ck_assert_int_eq(su_stop(&plain), 0);
    rt_redis_stop(&rd);
}
END_TEST

static Suite *redis_reload_suite(void)
{
    Suite *s = suite_create("redis_reload");
    TCase *tc = tcase_create("reload");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, reload_over_redis_keeps_the_counts_and_refuses_what_redis_cannot_hold);
    tcase_add_test(tc, a_reload_gives_the_leases_back);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(redis_reload_suite());
}
