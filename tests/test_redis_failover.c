/*
 * test_redis_failover.c - the Redis store when Redis goes away: killed, frozen, restarted. Each
 * level follows its on_store_error mode, no call waits past the timeout, the store returns to
 * Redis by itself, and the local mode divides the quota among the instances alive.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis/fallback.h"
#include "redis_server.h"
#include "redis/store.h"
#include "testutil.h"

#define TIMEOUT_MS 100

static rt_redis srv;

static void srv_up(void) { rt_redis_start(&srv); }

static void srv_down(void) { rt_redis_stop(&srv); }

static rl_ns mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (rl_ns)ts.tv_sec * RL_NS_PER_SEC + ts.tv_nsec;
}

static rl_ns wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (rl_ns)ts.tv_sec * RL_NS_PER_SEC + ts.tv_nsec;
}

/* A limiter as the daemon makes it: store settings from the configuration. */
typedef struct inst {
    rl_registry *reg;
    rl_limiter *lim;
    rl_store *top, *redis;
} inst;

static void inst_new(inst *in, const char *levels, int fleet_size)
{
    char json[4096];
    snprintf(json, sizeof json,
             "{\"store\": {\"type\": \"redis\", \"url\": \"%s\", \"prefix\": \"fo:\", "
             "\"timeout_ms\": %d, \"pool\": 4%s}, \"levels\": [%s]}",
             srv.url, TIMEOUT_MS, fleet_size ? ", \"fleet_size\": 2" : "", levels);
    rld_settings set;
    rl_config *cfg;
    rl_err err = {{0}};
    in->reg = rl_registry_new();
    int rc = rld_config_parse(json, strlen(json), in->reg, &set, &cfg, &err);
    ck_assert_msg(rc == RL_OK, "%s", err.msg);
    ck_assert_int_eq(rld_redis_store_open(&set, 0, &in->top, &in->redis, &err), RL_OK);
    rld_settings_clear(&set);
    ck_assert_int_eq(rl_limiter_new(cfg, in->top, &in->lim, &err), RL_OK);
}

static void inst_free(inst *in)
{
    rl_limiter_free(in->lim);
    rl_registry_free(in->reg);
}

static int up(const inst *in)
{
    rld_redis_health h;
    rld_redis_store_health(in->redis, &h);
    return h.up;
}

/* Housekeeping, as the daemon runs it: tick ten times a second. */
typedef struct ticker {
    inst *in;
    size_t n;
    volatile int stop;
    pthread_t th;
} ticker;

static void *tick_loop(void *arg)
{
    ticker *t = arg;
    while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
        for (size_t i = 0; i < t->n; i++)
            rl_limiter_tick(t->in[i].lim, wall());
        usleep(100000);
    }
    return NULL;
}

static void ticker_start(ticker *t, inst *in, size_t n)
{
    memset(t, 0, sizeof *t);
    t->in = in;
    t->n = n;
    ck_assert_int_eq(pthread_create(&t->th, NULL, tick_loop, t), 0);
}

static void ticker_stop(ticker *t)
{
    __atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE);
    pthread_join(t->th, NULL);
}

/* Decides a request now; fails the test on an error. Returns the call's duration. */
static rl_ns decide(inst *in, const char *keys, double cost, rl_decision *d)
{
    rl_descriptor ds[4];
    char buf[128];
    size_t n = 0;
    snprintf(buf, sizeof buf, "%s", keys);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        *eq = '\0';
        ds[n++] = (rl_descriptor){t, strlen(t), eq + 1, strlen(eq + 1)};
    }
    rl_request req = {.desc = ds, .ndesc = n, .cost = FP(cost), .now = wall()};
    rl_err err = {{0}};
    rl_ns t0 = mono();
    int rc = rl_acquire(in->lim, &req, d, &err);
    rl_ns dt = mono() - t0;
    ck_assert_msg(rc == RL_OK, "acquire %s: %s", keys, err.msg);
    rl_decision_done(d);
    return dt;
}

/* Clients that keep asking, recording the slowest answer. */
typedef struct load {
    inst *in;
    volatile int stop;
    rl_ns slowest;
    uint64_t calls, failed, fell_back;
    pthread_t th[3];
} load;

static void *load_loop(void *arg)
{
    load *l = arg;
    static const char *const keys[] = {"user=u1", "global=g", "team=t1", "user=u2,team=t2"};
    rl_descriptor ds[2];
    for (unsigned i = 0; !__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE); i++) {
        char buf[64];
        size_t n = 0;
        snprintf(buf, sizeof buf, "%s", keys[i % 4]);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(t, '=');
            *eq = '\0';
            ds[n++] = (rl_descriptor){t, strlen(t), eq + 1, strlen(eq + 1)};
        }
        rl_request req = {.desc = ds, .ndesc = n, .cost = RL_FP_ONE, .now = wall()};
        rl_decision d;
        rl_err err;
        rl_ns t0 = mono();
        int rc = rl_acquire(l->in->lim, &req, &d, &err);
        rl_ns dt = mono() - t0;
        rl_ns prev = __atomic_load_n(&l->slowest, __ATOMIC_RELAXED);
        while (dt > prev && !__atomic_compare_exchange_n(&l->slowest, &prev, dt, 0,
                                                         __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
        __atomic_add_fetch(&l->calls, 1, __ATOMIC_RELAXED);
        if (rc != RL_OK) {
            __atomic_add_fetch(&l->failed, 1, __ATOMIC_RELAXED);
            continue;
        }
        if (d.napplied && d.applied[0].fallback != RL_FALLBACK_NONE)
            __atomic_add_fetch(&l->fell_back, 1, __ATOMIC_RELAXED);
        rl_decision_done(&d);
    }
    return NULL;
}

static const char *modes_levels =
    "{\"name\": \"user\", \"on_store_error\": \"open\", \"rules\": [{\"type\": \"token_bucket\", "
    "\"capacity\": 1000000, \"per_second\": 1000000}]},"
    "{\"name\": \"global\", \"on_store_error\": \"closed\", \"rules\": [{\"type\": "
    "\"token_bucket\", \"capacity\": 1000000, \"per_second\": 1000000, \"name\": \"backends\"}]},"
    "{\"name\": \"team\", \"on_store_error\": \"local\", \"rules\": [{\"type\": \"token_bucket\", "
    "\"capacity\": 10, \"per_second\": 0.001}]}";

/* While Redis is away: open allows, closed denies naming the store with retry_after 1 s, local
 * decides with half the quota (fleet_size 2). Nothing waits past the timeout. */
static void check_modes(inst *in, const char *team_key)
{
    rl_decision d;
    rl_ns dt = decide(in, "user=u9", 1, &d);
    ck_assert(d.allowed);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_OPEN);
    ck_assert_int_le(dt, (rl_ns)(TIMEOUT_MS + 1000) * 1000000);

    decide(in, "global=g9", 1, &d);
    ck_assert(!d.allowed);
    ck_assert_int_eq(d.blocked, 0);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_CLOSED);
    ck_assert_int_eq(d.retry_after, RL_NS_PER_SEC);

    /* capacity 10 over 2 instances: 5 here */
    int allowed = 0;
    for (int i = 0; i < 8; i++) {
        decide(in, team_key, 1, &d);
        ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_LOCAL);
        ck_assert_int_eq(tu_status(&d, 0)->limit, FP(5));
        allowed += d.allowed;
    }
    ck_assert_int_eq(allowed, 5);

    /* a closed level denies the whole request: the local level takes nothing */
    decide(in, "global=g9,team=other", 1, &d);
    ck_assert(!d.allowed);
    ck_assert_int_eq(d.applied[1].fallback, RL_FALLBACK_LOCAL);
    ck_assert_int_eq(tu_status(&d, 1)->remaining, FP(5));
}

/* Polls until the store has seen Redis go (the load's calls fail at once when it was killed,
 * after their timeout when it froze); fails after 10 s. */
static void wait_down(inst *in)
{
    for (int i = 0; i < 1000 && up(in); i++)
        usleep(10000);
    ck_assert_msg(!up(in), "the store still up 10 s after Redis went");
}

/* Polls until the store is up again and decides through Redis; fails after 15 s. */
static void wait_back(inst *in)
{
    rl_decision d;
    for (int i = 0; i < 150; i++) {
        if (up(in)) {
            decide(in, "user=back", 1, &d);
            if (d.applied[0].fallback == RL_FALLBACK_NONE)
                return;
        }
        usleep(100000);
    }
    ck_abort_msg("the store did not return to Redis within 15 s");
}

START_TEST(redis_killed_and_restarted_under_load)
{
    inst in;
    ticker tk;
    load ld = {0};
    rl_decision d;
    inst_new(&in, modes_levels, 1);
    ticker_start(&tk, &in, 1);
    decide(&in, "user=u0", 1, &d);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
    ld.in = &in;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&ld.th[i], NULL, load_loop, &ld), 0);
    usleep(300000);

    /* killed: connections are reset, reconnecting is refused */
    rt_redis_kill(&srv);
    wait_down(&in);
    check_modes(&in, "team=solo1");
    rt_redis_restart(&srv);
    wait_back(&in);

    /* frozen: connections stay open but nothing answers, so every call times out */
    rt_redis_pause(&srv);
    wait_down(&in);
    check_modes(&in, "team=solo2");
    rt_redis_resume(&srv);
    wait_back(&in);

    /* killed and back before anyone noticed: the stale connections fail once, then recover */
    rt_redis_kill(&srv);
    rt_redis_restart(&srv);
    wait_back(&in);

    __atomic_store_n(&ld.stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 3; i++)
        pthread_join(ld.th[i], NULL);
    ticker_stop(&tk);

    ck_assert_uint_eq(ld.failed, 0);
    ck_assert_uint_gt(ld.fell_back, 0);
    ck_assert_uint_gt(ld.calls, ld.fell_back);
    ck_assert_msg(ld.slowest <= (rl_ns)(TIMEOUT_MS + 1000) * 1000000,
                  "a call took %" PRId64 " ms with a %d ms timeout", ld.slowest / 1000000,
                  TIMEOUT_MS);
    rld_redis_health h;
    rld_redis_store_health(in.redis, &h);
    ck_assert(h.up);
    ck_assert_uint_gt(h.errors, 0);
    ck_assert_msg(strncmp(h.last_error, "redis: ", 7) == 0, "last error: %s", h.last_error);
    ck_assert_uint_gt(rld_fallback_count(in.top, 0, RLD_ON_ERROR_OPEN), 0);
    ck_assert_uint_gt(rld_fallback_count(in.top, 1, RLD_ON_ERROR_CLOSED), 0);
    ck_assert_uint_gt(rld_fallback_count(in.top, 2, RLD_ON_ERROR_LOCAL), 0);
    ck_assert_uint_eq(rld_fallback_count(in.top, 0, RLD_ON_ERROR_CLOSED), 0);
    inst_free(&in);
}
END_TEST

/* Connections that Redis closed while they sat in the pool (it restarted, or dropped them as
 * idle) are reopened for the call that finds them closed: no error, no fallback. */
START_TEST(stale_connections_are_reopened)
{
    inst in;
    rl_decision d;
    rld_redis_health h;
    inst_new(&in, modes_levels, 1);
    decide(&in, "user=u", 1, &d);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
    rt_redis_kill(&srv);
    rt_redis_restart(&srv);
    decide(&in, "user=u", 1, &d);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
    redisReply *r = rt_redis_cmd(&srv, "CLIENT KILL TYPE normal");
    freeReplyObject(r);
    decide(&in, "user=u", 1, &d);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
    rld_redis_store_health(in.redis, &h);
    ck_assert(h.up);
    ck_assert_uint_eq(h.errors, 0);
    ck_assert_str_eq(h.last_error, "");
    inst_free(&in);
}
END_TEST

/* Without fleet_size, the local mode divides by the instances the heartbeats counted before
 * Redis went away. */
START_TEST(local_mode_divides_by_live_instances)
{
    inst in[3];
    ticker tk;
    rl_decision d;
    const char *levels =
        "{\"name\": \"team\", \"on_store_error\": \"local\", \"rules\": [{\"type\": "
        "\"token_bucket\", \"capacity\": 12, \"per_second\": 0.001}]}";
    for (int i = 0; i < 3; i++)
        inst_new(&in[i], levels, 0);
    ticker_start(&tk, in, 3);
    for (int i = 0; i < 150 && rld_fallback_fleet(in[0].top) != 3; i++) /* 15 s at most */
        usleep(100000);
    ck_assert_uint_eq(rld_fallback_fleet(in[0].top), 3);
    rt_redis_kill(&srv);
    usleep(300000);
    /* capacity 12 over 3 instances: 4 each, 12 in all */
    int allowed = 0;
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 6; k++) {
            decide(&in[i], "team=t", 1, &d);
            ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_LOCAL);
            allowed += d.allowed;
        }
    ck_assert_int_eq(allowed, 12);
    ticker_stop(&tk);
    for (int i = 0; i < 3; i++)
        inst_free(&in[i]);
}
END_TEST

/* A tiered level in local mode: a tier's rules and a key's own rules are both divided. */
START_TEST(local_mode_with_tiers_and_custom_quotas)
{
    char json[2048];
    snprintf(json, sizeof json,
             "{\"store\": {\"type\": \"redis\", \"url\": \"%s\", \"timeout_ms\": %d, "
             "\"fleet_size\": 2}, \"levels\": [{\"name\": \"user\", \"tiered\": true, "
             "\"on_store_error\": \"local\"}], \"tiers\": {\"free\": [{\"type\": "
             "\"token_bucket\", \"capacity\": 4, \"per_second\": 0.001}]}, "
             "\"default_tier\": \"free\", \"quotas\": {\"vip\": {\"rules\": [{\"type\": "
             "\"token_bucket\", \"capacity\": 6, \"per_second\": 0.001}]}}}",
             srv.url, TIMEOUT_MS);
    inst in;
    rld_settings set;
    rl_config *cfg;
    rl_err err = {{0}};
    in.reg = rl_registry_new();
    ck_assert_int_eq(rld_config_parse(json, strlen(json), in.reg, &set, &cfg, &err), RL_OK);
    ck_assert_int_eq(rld_redis_store_open(&set, 0, &in.top, &in.redis, &err), RL_OK);
    rld_settings_clear(&set);
    ck_assert_int_eq(rl_limiter_new(cfg, in.top, &in.lim, &err), RL_OK);
    rt_redis_kill(&srv);

    rl_decision d;
    int free_allowed = 0, vip_allowed = 0;
    for (int i = 0; i < 5; i++) {
        decide(&in, "user=joe", 1, &d);
        ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_LOCAL);
        free_allowed += d.allowed;
        decide(&in, "user=vip", 1, &d);
        vip_allowed += d.allowed;
    }
    ck_assert_int_eq(free_allowed, 2); /* 4 / 2 */
    ck_assert_int_eq(vip_allowed, 3);  /* 6 / 2 */

    /* a reservation on the custom rules is settled through the local store's resolver */
    rl_descriptor ds[1] = {{"user", 4, "ann", 3}};
    json_t *arr = json_loads(
        "[{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": 0.001}]", 0, NULL);
    rl_rules *rs;
    ck_assert_int_eq(rld_rules_from_json(arr, in.reg, NULL, &rs, &err), RL_OK);
    json_decref(arr);
    ck_assert_int_eq(rl_quota_set(in.lim, "ann", NULL, rs, &err), RL_OK);
    rl_request req = {.desc = ds, .ndesc = 1, .cost = FP(5), .flags = RL_RESERVE, .now = wall()};
    ck_assert_int_eq(rl_acquire(in.lim, &req, &d, &err), RL_OK);
    rl_decision_done(&d);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->limit, FP(5)); /* 10 / 2 */
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    rl_settlement st;
    ck_assert_int_eq(rl_settle(in.lim, d.reservation, FP(2), wall(), &st, &err), RL_OK);
    req.flags = RL_DRY_RUN;
    req.cost = FP(3);
    ck_assert_int_eq(rl_acquire(in.lim, &req, &d, &err), RL_OK);
    rl_decision_done(&d);
    ck_assert(d.allowed); /* 3 given back */
    inst_free(&in);
}
END_TEST

/* A reservation made while falling back is settled and released where it was made. */
START_TEST(reservations_made_while_down)
{
    inst in;
    rl_decision d;
    rl_settlement st;
    rl_err err;
    inst_new(&in, modes_levels, 1);
    rt_redis_kill(&srv);
    rl_descriptor ds[1] = {{"team", 4, "r", 1}};
    rl_request req = {.desc = ds, .ndesc = 1, .cost = FP(4), .flags = RL_RESERVE, .now = wall()};
    ck_assert_int_eq(rl_acquire(in.lim, &req, &d, &err), RL_OK);
    rl_decision_done(&d);
    ck_assert(d.allowed);
    ck_assert(d.reservation[0]);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(1));
    ck_assert_int_eq(rl_settle(in.lim, d.reservation, FP(1), wall(), &st, &err), RL_OK);
    ck_assert_int_eq(st.refunded, FP(3));
    ck_assert_int_eq(rl_release(in.lim, d.reservation, wall(), &err), RL_OK);
    /* an id the local store does not know cannot be looked up in Redis now */
    ck_assert_int_eq(rl_release(in.lim, "r-0123456789abcdef", wall(), &err), RL_ESTORE);
    /* open levels make a reservation too, so that the client can settle it */
    ds[0] = (rl_descriptor){"user", 4, "u", 1};
    ck_assert_int_eq(rl_acquire(in.lim, &req, &d, &err), RL_OK);
    rl_decision_done(&d);
    ck_assert(d.allowed && d.reservation[0]);
    ck_assert_int_eq(rl_settle(in.lim, d.reservation, FP(2), wall(), &st, &err), RL_OK);
    inst_free(&in);
}
END_TEST

Suite *redis_failover_suite(void);
Suite *redis_failover_suite(void)
{
    Suite *s = suite_create("redis_failover");
    TCase *tc = tcase_create("failover");
    tcase_add_checked_fixture(tc, srv_up, srv_down);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, redis_killed_and_restarted_under_load);
    tcase_add_test(tc, stale_connections_are_reopened);
    tcase_add_test(tc, local_mode_divides_by_live_instances);
    tcase_add_test(tc, reservations_made_while_down);
    tcase_add_test(tc, local_mode_with_tiers_and_custom_quotas);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(redis_failover_suite()) ? 1 : 0; }
