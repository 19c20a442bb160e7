/*
 * test_redis_sentinel.c - the Redis store behind Redis Sentinel: one primary, one replica, three
 * sentinels (tests/redis_server.h). The store finds the primary through the sentinels, follows
 * a failover by itself (the primary killed under load, the replica promoted) with each level
 * following its on_store_error during the gap, never answers from a replica (a primary demoted
 * by SENTINEL FAILOVER gets no call after the switch), and says why when no sentinel knows the
 * primary. Expected numbers are worked out in the comments.
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
#include "redis/sentinel.h"
#include "testutil.h"

#define TIMEOUT_MS 100
#define DOWN_AFTER_MS 1000

static rt_sentinel_group grp;

static void grp_up(void) { rt_sentinel_start(&grp, DOWN_AFTER_MS, 2000); }

static void grp_down(void) { rt_sentinel_stop(&grp); }

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

/* One instance: a limiter on a Redis store that asks the group's sentinels for master, wrapped
 * in the fallback store as the daemon wraps it. */
typedef struct inst {
    rl_registry *reg;
    rl_limiter *lim;
    rl_store *top, *redis;
} inst;

static void sentinels_of(rld_redis_addr *a, const char *master)
{
    memset(a, 0, sizeof *a);
    rld_sentinel *s = &a->sentinel;
    s->n = RT_SENTINELS;
    for (int i = 0; i < RT_SENTINELS; i++) {
        snprintf(s->host[i], sizeof s->host[i], "127.0.0.1");
        s->port[i] = grp.sent[i].port;
    }
    snprintf(s->master, sizeof s->master, "%s", master);
}

static void inst_new_at(inst *in, const char *levels, const rld_redis_addr *addr);

static void inst_new(inst *in, const char *levels, const char *master)
{
    rld_redis_addr addr;
    sentinels_of(&addr, master);
    inst_new_at(in, levels, &addr);
}

static void inst_new_at(inst *in, const char *levels, const rld_redis_addr *addr)
{
    char json[4096];
    snprintf(json, sizeof json, "{\"store\": {\"type\": \"redis\"}, \"levels\": [%s]}", levels);
    rld_settings set;
    rl_config *cfg;
    rl_err err = {{0}};
    in->reg = rl_registry_new();
    int rc = rld_config_parse(json, strlen(json), in->reg, &set, &cfg, &err);
    ck_assert_msg(rc == RL_OK, "%s", err.msg);
    rld_redis_options o = {.addr = addr, .prefix = "se:", .timeout_ms = TIMEOUT_MS, .pool = 4};
    rld_fallback_options f = {.fleet_size = 2};
    memcpy(f.mode, set.on_error, sizeof f.mode);
    rld_settings_clear(&set);
    ck_assert_int_eq(rld_redis_store_new(&o, &in->redis, &err), RL_OK);
    ck_assert_int_eq(rld_fallback_store_new(in->redis, &f, &in->top, &err), RL_OK);
    ck_assert_int_eq(rl_limiter_new(cfg, in->top, &in->lim, &err), RL_OK);
}

static void inst_free(inst *in)
{
    rl_limiter_free(in->lim);
    rl_registry_free(in->reg);
}

static int primary_port(inst *in)
{
    char buf[300];
    rld_pool_primary(rld_redis_store_pool(in->redis), buf, sizeof buf);
    const char *colon = strrchr(buf, ':');
    return colon ? atoi(colon + 1) : 0;
}

/* Decides "name=value" now; fails the test on an error. */
static void decide(inst *in, const char *name, const char *value, rl_decision *d)
{
    rl_descriptor ds[1] = {{name, strlen(name), value, strlen(value)}};
    rl_request req = {.desc = ds, .ndesc = 1, .cost = RL_FP_ONE, .now = wall()};
    rl_err err = {{0}};
    int rc = rl_acquire(in->lim, &req, d, &err);
    ck_assert_msg(rc == RL_OK, "acquire %s=%s: %s", name, value, err.msg);
    rl_decision_done(d);
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

/* ---- a failover under load ------------------------------------------------------------------ */

/* user fails open, global (the slow bucket: 100 at once, 20 a second) closed, team local */
static const char *levels =
    "{\"name\": \"user\", \"on_store_error\": \"open\", \"rules\": [{\"type\": \"token_bucket\", "
    "\"capacity\": 1000000, \"per_second\": 1000000}]},"
    "{\"name\": \"global\", \"on_store_error\": \"closed\", \"rules\": [{\"type\": "
    "\"token_bucket\", \"capacity\": 100, \"per_second\": 20, \"name\": \"slow\"}]},"
    "{\"name\": \"team\", \"on_store_error\": \"local\", \"rules\": [{\"type\": \"token_bucket\", "
    "\"capacity\": 1000000, \"per_second\": 1000000}]}";
#define SLOW_CAPACITY 100
#define SLOW_RATE 20

enum { KIND_USER, KIND_GLOBAL, KIND_TEAM, NKINDS };

typedef struct load {
    inst *in;
    volatile int stop;
    uint64_t calls, failed, global_allowed;
    uint64_t fell[NKINDS];  /* decisions of each kind that fell back */
    uint64_t wrong;         /* fell back otherwise than the level's on_store_error says */
    rl_ns last_fallback;    /* monotonic time of the last answer that fell back */
    rl_ns first_call;
    pthread_t th;
} load;

static void *load_loop(void *arg)
{
    load *l = arg;
    static const char *const names[NKINDS] = {"user", "global", "team"};
    static const rl_fallback modes[NKINDS] = {RL_FALLBACK_OPEN, RL_FALLBACK_CLOSED,
                                                   RL_FALLBACK_LOCAL};
    l->first_call = mono();
    for (unsigned i = 0; !__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE); i++) {
        int k = (int)(i % NKINDS);
        char value[32];
        snprintf(value, sizeof value, "%s", k == KIND_GLOBAL ? "all" : k == KIND_USER ? "u1" : "t1");
        rl_descriptor ds[1] = {{names[k], strlen(names[k]), value, strlen(value)}};
        rl_request req = {.desc = ds, .ndesc = 1, .cost = RL_FP_ONE, .now = wall()};
        rl_decision d;
        rl_err err;
        int rc = rl_acquire(l->in->lim, &req, &d, &err);
        rl_ns at = mono();
        l->calls++;
        if (rc != RL_OK) {
            l->failed++;
            continue;
        }
        rl_fallback fb = d.napplied ? d.applied[0].fallback : RL_FALLBACK_NONE;
        if (k == KIND_GLOBAL && d.allowed)
            l->global_allowed++;
        if (fb != RL_FALLBACK_NONE) {
            l->fell[k]++;
            l->last_fallback = at;
            /* open allows, closed denies, local decides with the quota halved (fleet_size 2) */
            if (fb != modes[k] || (k == KIND_USER && !d.allowed) ||
                (k == KIND_GLOBAL && d.allowed) ||
                (k == KIND_TEAM && tu_status(&d, 0)->limit != FP(500000)))
                l->wrong++;
        }
        rl_decision_done(&d);
        /* clients with a little think time: answers that fall back come at once, and
         * spinning on them would starve the sentinels and Redis of the machine's CPUs */
        usleep(200);
    }
    return NULL;
}

START_TEST(follows_a_failover_under_load)
{
    inst in[2];
    ticker tk = {.in = in, .n = 2};
    load ld[4];
    rl_decision d;
    for (int i = 0; i < 2; i++) {
        inst_new(&in[i], levels, RT_MASTER_NAME);
        decide(&in[i], "user", "warm", &d);
        ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
        ck_assert_int_eq(primary_port(&in[i]), grp.data[0].port);
    }
    ck_assert_int_eq(pthread_create(&tk.th, NULL, tick_loop, &tk), 0);
    rl_ns t0 = mono();
    for (int i = 0; i < 4; i++) {
        ld[i] = (load){.in = &in[i % 2]};
        ck_assert_int_eq(pthread_create(&ld[i].th, NULL, load_loop, &ld[i]), 0);
    }
    usleep(1000000);

    rl_ns killed = mono();
    rt_redis_kill(&grp.data[0]);
    while (rt_sentinel_primary(&grp) != grp.data[1].port && mono() - killed < S(60))
        usleep(10000);
    rl_ns switched = mono();
    ck_assert_int_eq(rt_sentinel_primary(&grp), grp.data[1].port);
    usleep(3000000);
    for (int i = 0; i < 4; i++) {
        __atomic_store_n(&ld[i].stop, 1, __ATOMIC_RELEASE);
        pthread_join(ld[i].th, NULL);
    }
    rl_ns t1 = mono();
    __atomic_store_n(&tk.stop, 1, __ATOMIC_RELEASE);
    pthread_join(tk.th, NULL);

    uint64_t calls = 0, failed = 0, wrong = 0, allowed = 0, fell[NKINDS] = {0};
    rl_ns last_fallback = 0;
    for (int i = 0; i < 4; i++) {
        calls += ld[i].calls;
        failed += ld[i].failed;
        wrong += ld[i].wrong;
        allowed += ld[i].global_allowed;
        for (int k = 0; k < NKINDS; k++)
            fell[k] += ld[i].fell[k];
        if (ld[i].last_fallback > last_fallback)
            last_fallback = ld[i].last_fallback;
    }
    fprintf(stderr,
            "sentinel failover under load: %" PRIu64 " decisions, primary killed at %.3f s, "
            "switched at %.3f s, last fallback at %.3f s, %" PRIu64 " global admitted\n",
            calls, (double)(killed - t0) / 1e9, (double)(switched - t0) / 1e9,
            (double)(last_fallback - t0) / 1e9, allowed);
    ck_assert_uint_eq(failed, 0);
    ck_assert_uint_eq(wrong, 0);
    /* the gap: every level fell back by its own mode */
    for (int k = 0; k < NKINDS; k++)
        ck_assert_uint_gt(fell[k], 0);
    /* decisions through Redis again within the failover time plus 2 s */
    ck_assert_msg(last_fallback <= switched + S(2), "fell back until %.3f s after the switch",
                  (double)(last_fallback - switched) / 1e9);
    /* the slow bucket: at most 100 at once and 20 a second over the whole run (the gap, when
     * global failed closed, only lowers what was admitted); the load asked far more */
    double run_s = (double)(t1 - t0) / 1e9;
    ck_assert_msg((double)allowed <= SLOW_CAPACITY + SLOW_RATE * run_s + 1,
                  "%" PRIu64 " admitted in %.3f s", allowed, run_s);
    ck_assert_uint_ge(allowed, SLOW_CAPACITY);
    /* both instances on the promoted replica, having followed one failover */
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(primary_port(&in[i]), grp.data[1].port);
        ck_assert_uint_ge(rld_pool_switches(rld_redis_store_pool(in[i].redis)), 1);
        decide(&in[i], "global", "after", &d);
        ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
        ck_assert(d.allowed);
    }
    /* the state is on the new primary */
    redisReply *r = rt_redis_cmd(&grp.data[1], "EXISTS se:global:0:after");
    ck_assert_int_eq(r->integer, 1);
    freeReplyObject(r);
    for (int i = 0; i < 2; i++)
        inst_free(&in[i]);
}
END_TEST

/* calls of EVALSHA a node has served (INFO commandstats), -1 when it has served none */
static long evalsha_calls(const rt_redis *r)
{
    redisReply *rep = rt_redis_read(r, "INFO commandstats");
    const char *p = strstr(rep->str, "cmdstat_evalsha:calls=");
    long n = p ? atol(p + strlen("cmdstat_evalsha:calls=")) : -1;
    freeReplyObject(rep);
    return n;
}

/* A graceful failover (SENTINEL FAILOVER) keeps the old primary running as a replica: the
 * store moves to the new primary and sends the old one nothing more. */
START_TEST(never_answers_from_a_demoted_primary)
{
    inst in;
    rl_decision d;
    inst_new(&in, levels, RT_MASTER_NAME);
    for (int i = 0; i < 20; i++) {
        decide(&in, "global", "g", &d);
        ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
    }
    ck_assert_int_ge(evalsha_calls(&grp.data[0]), 20);
    redisReply *r = rt_redis_cmd(&grp.sent[0], "SENTINEL FAILOVER %s", RT_MASTER_NAME);
    ck_assert_int_eq(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    /* until the old primary says it is a replica, calls may still reach it (15 s at most) */
    for (int i = 0; i < 750; i++) {
        r = rt_redis_read(&grp.data[0], "ROLE"); /* reconfigured meanwhile */
        int replica = strcmp(r->element[0]->str, "slave") == 0;
        freeReplyObject(r);
        if (replica)
            break;
        usleep(20000);
    }
    long before = evalsha_calls(&grp.data[0]);
    int through_redis = 0;
    for (int i = 0; i < 1000 && through_redis < 50; i++) {
        decide(&in, "user", "after", &d);
        through_redis += d.applied[0].fallback == RL_FALLBACK_NONE;
        usleep(10000);
    }
    ck_assert_int_eq(through_redis, 50);
    ck_assert_int_eq(evalsha_calls(&grp.data[0]), before);
    ck_assert_int_gt(evalsha_calls(&grp.data[1]), 0);
    ck_assert_int_eq(primary_port(&in), grp.data[1].port);
    inst_free(&in);
}
END_TEST

/* The store hears of a failover from the sentinels' +switch-master message, before any call
 * of its own could meet the demoted primary: with no call made after SENTINEL FAILOVER, the
 * pool's primary still moves to the promoted replica, and the switch is counted. */
START_TEST(switch_master_moves_the_pool_without_a_call)
{
    inst in;
    rl_decision d;
    inst_new(&in, levels, RT_MASTER_NAME);
    decide(&in, "global", "g", &d); /* the sentinels named data[0] */
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
    ck_assert_int_eq(primary_port(&in), grp.data[0].port);
    rld_pool *pool = rld_redis_store_pool(in.redis);
    uint64_t switches = rld_pool_switches(pool);
    redisReply *r = rt_redis_cmd(&grp.sent[0], "SENTINEL FAILOVER %s", RT_MASTER_NAME);
    ck_assert_int_eq(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    int moved = 0;
    for (int i = 0; i < 3000 && !moved; i++) { /* 60 s at most; a failover takes a few */
        moved = primary_port(&in) == grp.data[1].port;
        if (!moved)
            usleep(20000);
    }
    ck_assert_msg(moved, "the pool still uses port %d after 60 s", primary_port(&in));
    ck_assert_uint_gt(rld_pool_switches(pool), switches);
    decide(&in, "user", "after", &d);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
    inst_free(&in);
}
END_TEST

/* The port of the primary sentinel i names, 0 when it names none. */
static int named_by(int i)
{
    redisReply *r = rt_redis_cmd(&grp.sent[i], "SENTINEL get-master-addr-by-name %s",
                                 RT_MASTER_NAME);
    int port = r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? atoi(r->element[1]->str) : 0;
    freeReplyObject(r);
    return port;
}

/* Decides "user" every 20 ms until one is answered by Redis, for at most limit: how long it
 * took, or -1. */
static rl_ns until_through_redis(inst *in, rl_ns limit)
{
    rl_decision d;
    rl_ns t0 = mono();
    while (mono() - t0 < limit) {
        decide(in, "user", "back", &d);
        if (d.applied[0].fallback == RL_FALLBACK_NONE)
            return mono() - t0;
        usleep(20000);
    }
    return -1;
}

/* A sentinel that does not answer (stopped here; under load, one blocked writing its
 * configuration to disk) is the one the store asked first, and the one it subscribed to: the
 * primary is killed and the two others fail over. The store follows by asking those two: the
 * stopped one costs each attempt a share of its time, and the next attempt starts after it.
 * Bound: the sentinels' answer is taken at the first probe after the switch, at most 2 s (the
 * longest backoff) later; without the shares every attempt waited for the stopped one. */
START_TEST(a_stopped_sentinel_does_not_keep_the_store_from_a_failover)
{
    inst in;
    rl_decision d;
    inst_new(&in, levels, RT_MASTER_NAME);
    decide(&in, "user", "warm", &d); /* sentinel 0 answered, so it is asked first */
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
    rt_redis_pause(&grp.sent[0]);
    rt_redis_kill(&grp.data[0]);
    rl_ns killed = mono();
    while (named_by(1) != grp.data[1].port && mono() - killed < S(60)) {
        decide(&in, "user", "gap", &d);
        usleep(20000);
    }
    ck_assert_int_eq(named_by(1), grp.data[1].port);
    rl_ns took = until_through_redis(&in, S(3));
    fprintf(stderr, "a stopped sentinel: switched %.3f s after the kill, through Redis %.3f s "
            "later\n", (double)(mono() - killed - took) / 1e9, (double)took / 1e9);
    ck_assert_msg(took >= 0 && took <= S(2.5), "not through Redis within 2.5 s of the switch");
    ck_assert_int_eq(primary_port(&in), grp.data[1].port);
    rt_redis_resume(&grp.sent[0]);
    inst_free(&in);
}
END_TEST

/* No sentinel answers (all stopped) while the primary, paused for 300 ms, makes calls time
 * out: the store asks the sentinels again, gets no answer, and tries the primary they named
 * last, which ROLE confirms. Bound: probes after 0, 50, 100 and 200 ms of failures, so the
 * first after the resume comes within 400 ms quietly; 3 s leaves room for probes that time out
 * on a loaded machine (each doubles the backoff); without the fallback none got through while
 * the sentinels were stopped. */
START_TEST(stopped_sentinels_do_not_keep_the_store_from_its_primary)
{
    inst in;
    rl_decision d;
    inst_new(&in, levels, RT_MASTER_NAME);
    decide(&in, "user", "warm", &d);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
    for (int i = 0; i < RT_SENTINELS; i++)
        rt_redis_pause(&grp.sent[i]);
    rt_redis_pause(&grp.data[0]);
    int fell = 0;
    for (rl_ns t0 = mono(); mono() - t0 < S(0.3);) {
        decide(&in, "user", "paused", &d);
        fell += d.applied[0].fallback == RL_FALLBACK_OPEN;
    }
    ck_assert_int_gt(fell, 0);
    rt_redis_resume(&grp.data[0]);
    rl_ns took = until_through_redis(&in, S(5));
    ck_assert_msg(took >= 0 && took <= S(3), "not through Redis within 3 s of the resume");
    ck_assert_int_eq(primary_port(&in), grp.data[0].port);
    for (int i = 0; i < RT_SENTINELS; i++)
        rt_redis_resume(&grp.sent[i]);
    inst_free(&in);
}
END_TEST

/* How long until the pool's next probe, from the error of a call refused meanwhile (a PING of
 * its own; it may be the probe itself, which then fails on the paused primary): -1 if none. */
static long next_attempt_ms(inst *in)
{
    const char *ping[1] = {"PING"};
    redisReply *r;
    rl_err err = {{0}};
    if (rld_pool_command(rld_redis_store_pool(in->redis), 1, ping, NULL, &r, &err) == RL_OK) {
        freeReplyObject(r);
        return -1;
    }
    const char *at = strstr(err.msg, "next attempt in ");
    return at ? atol(at + strlen("next attempt in ")) : -1;
}

/* +switch-master is news even when it names the primary the store already tries: the next call
 * tries it at once instead of waiting out the backoff. A plain Redis stands first in the
 * store's list of sentinels: the store subscribes there too, so that the test can publish the
 * message, and asks the real sentinels (the plain one refuses SENTINEL). The real sentinels are
 * stopped, so that only the message can bring news (and no failover starts), and the primary
 * is paused until the backoff has 1.8 s or more left (its longest, 2 s), then resumed as the
 * message names it: through Redis within 1.2 s (quietly some 20 ms; a probe that times out on
 * a loaded machine costs its 100 ms and 50 ms, 100 ms, ... of backoff), where waiting out the
 * backoff takes 1.8 s. */
START_TEST(switch_master_cuts_the_backoff_short)
{
    rt_redis fake;
    memset(&fake, 0, sizeof fake);
    rt_redis_start(&fake);
    rld_redis_addr addr;
    sentinels_of(&addr, RT_MASTER_NAME);
    rld_sentinel *st = &addr.sentinel;
    memmove(&st->host[1], &st->host[0], RT_SENTINELS * sizeof st->host[0]);
    memmove(&st->port[1], &st->port[0], RT_SENTINELS * sizeof st->port[0]);
    st->port[0] = fake.port;
    st->n = RT_SENTINELS + 1;
    inst in;
    rl_decision d;
    inst_new_at(&in, levels, &addr);
    decide(&in, "user", "warm", &d);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
    long subs = 0;
    for (int i = 0; i < 500 && subs != 1; i++) {
        redisReply *r = rt_redis_cmd(&fake, "PUBSUB NUMSUB +switch-master");
        subs = r->elements == 2 ? r->element[1]->integer : 0;
        freeReplyObject(r);
        usleep(10000);
    }
    ck_assert_int_eq(subs, 1);
    for (int i = 0; i < RT_SENTINELS; i++)
        rt_redis_pause(&grp.sent[i]);
    rt_redis_pause(&grp.data[0]);
    long wait = -1;
    for (rl_ns t0 = mono(); wait < 1800 && mono() - t0 < S(20); usleep(10000))
        wait = next_attempt_ms(&in);
    ck_assert_int_ge(wait, 1800);
    rt_redis_resume(&grp.data[0]);
    char msg[128];
    snprintf(msg, sizeof msg, "%s 127.0.0.1 %d 127.0.0.1 %d", RT_MASTER_NAME, grp.data[0].port,
             grp.data[0].port);
    redisReply *r = rt_redis_cmd(&fake, "PUBLISH +switch-master %s", msg);
    ck_assert_int_eq(r->integer, 1);
    freeReplyObject(r);
    rl_ns took = until_through_redis(&in, S(3));
    ck_assert_msg(took >= 0 && took <= S(1.2), "through Redis %.3f s after the message (the "
                  "backoff had %ld ms left)", (double)took / 1e9, wait);
    for (int i = 0; i < RT_SENTINELS; i++)
        rt_redis_resume(&grp.sent[i]);
    inst_free(&in);
    rt_redis_stop(&fake);
}
END_TEST

/* Waits until the pool's primary is port, for at most limit: how long it took, or -1. */
static rl_ns until_primary(inst *in, int port, rl_ns limit)
{
    rl_ns t0 = mono();
    while (mono() - t0 < limit) {
        if (primary_port(in) == port)
            return mono() - t0;
        usleep(10000);
    }
    return -1;
}

/* Waits until one of the sentinels from first on names port (60 s at most: a failover under
 * load with split votes has taken 15); fails the test otherwise. */
static void until_named(int port, int first)
{
    for (rl_ns t0 = mono(); mono() - t0 < S(60); usleep(10000))
        for (int i = first; i < RT_SENTINELS; i++)
            if (named_by(i) == port)
                return;
    ck_abort_msg("no sentinel names port %d 60 s after the kill", port);
}

/* The store is subscribed on every sentinel: the first one is stopped (the store had asked it
 * first, and it would have been the only subscription) and the primary is killed, with no call
 * made, so only a +switch-master message from another sentinel can move the pool. Bound:
 * moved within 5 s of a sentinel naming the new primary (the message comes with the switch, a
 * few milliseconds quietly); without the other subscriptions it never moves. */
START_TEST(a_stopped_sentinel_does_not_hide_the_switch)
{
    inst in;
    rl_decision d;
    inst_new(&in, levels, RT_MASTER_NAME);
    decide(&in, "user", "warm", &d);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
    rld_pool *pool = rld_redis_store_pool(in.redis);
    uint64_t switches = rld_pool_switches(pool);
    rt_redis_pause(&grp.sent[0]);
    rt_redis_kill(&grp.data[0]);
    until_named(grp.data[1].port, 1);
    rl_ns took = until_primary(&in, grp.data[1].port, S(10));
    fprintf(stderr, "a stopped sentinel, no calls: the pool moved %.3f s after the switch\n",
            (double)took / 1e9);
    ck_assert_msg(took >= 0 && took <= S(5), "the pool still uses port %d (%s)",
                  primary_port(&in), took < 0 ? "10 s after the switch" : "moved too late");
    ck_assert_uint_gt(rld_pool_switches(pool), switches);
    rt_redis_resume(&grp.sent[0]);
    inst_free(&in);
}
END_TEST

/* No +switch-master reaches the store (its sentinel user may not subscribe to any channel, so
 * every subscription is refused): after one call finds the primary dead, the store asks the
 * sentinels every 200 ms while the link is down and moves to the primary they name, with no
 * further call. Bound: within 2 s of a sentinel naming it (a round and a ROLE, some 200 ms
 * quietly); without the rounds it never moves. */
START_TEST(a_missed_switch_is_found_by_asking)
{
    for (int i = 0; i < RT_SENTINELS; i++) {
        redisReply *r = rt_redis_cmd(&grp.sent[i], "ACL SETUSER poller on >pw resetchannels "
                                                   "+@all ~*");
        ck_assert_msg(r->type == REDIS_REPLY_STATUS, "ACL SETUSER: %s", r->str);
        freeReplyObject(r);
    }
    rld_redis_addr addr;
    sentinels_of(&addr, RT_MASTER_NAME);
    snprintf(addr.sentinel.user, sizeof addr.sentinel.user, "poller");
    snprintf(addr.sentinel.pass, sizeof addr.sentinel.pass, "pw");
    inst in;
    rl_decision d;
    inst_new_at(&in, levels, &addr);
    decide(&in, "user", "warm", &d); /* the sentinels answered the store's user */
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
    rt_redis_kill(&grp.data[0]);
    decide(&in, "user", "gap", &d);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_OPEN);
    until_named(grp.data[1].port, 0);
    rl_ns took = until_primary(&in, grp.data[1].port, S(10));
    fprintf(stderr, "no message: the pool moved %.3f s after the switch\n", (double)took / 1e9);
    ck_assert_msg(took >= 0 && took <= S(2), "the pool still uses port %d (%s)",
                  primary_port(&in), took < 0 ? "10 s after the switch" : "moved too late");
    decide(&in, "user", "after", &d);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_NONE);
    inst_free(&in);
}
END_TEST

/* Of the sentinels' answers to a round, the store follows the one of the highest
 * configuration epoch: a sentinel that has not heard of the last failover names the old
 * primary with the older epoch. Only complete answers to the round count. */
START_TEST(the_newest_answer_is_followed)
{
    rld_watch_answer a[5] = {
        {.round = 7, .got = 2, .ok = 1, .host = "10.0.0.1", .port = 6379, .epoch = 3}, /* stale */
        {.round = 7, .got = 2, .ok = 1, .host = "10.0.0.2", .port = 6379, .epoch = 4},
        {.round = 7, .got = 1, .ok = 1, .host = "10.0.0.3", .port = 6379, .epoch = -1}, /* half */
        {.round = 6, .got = 2, .ok = 1, .host = "10.0.0.4", .port = 6379, .epoch = 9}, /* old */
        {.round = 7, .got = 2, .ok = 0, .epoch = 10}, /* named none */
    };
    ck_assert_int_eq(rld__watch_best(a, 5, 7), 1);
    ck_assert_int_eq(rld__watch_best(a, 5, 6), 3);
    ck_assert_int_eq(rld__watch_best(a, 5, 8), -1);
    ck_assert_int_eq(rld__watch_best(a, 1, 7), 0);
    a[0].epoch = 4; /* equals: the first */
    ck_assert_int_eq(rld__watch_best(a, 5, 7), 0);
}
END_TEST

/* Sentinels that know no such primary: the store is down and says why. */
START_TEST(unknown_master_is_reported)
{
    inst in;
    rl_decision d;
    inst_new(&in, levels, "nosuch");
    decide(&in, "user", "u", &d);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_OPEN);
    rld_redis_health h;
    rld_redis_store_health(in.redis, &h);
    ck_assert(!h.up);
    ck_assert_msg(strstr(h.last_error, "knows no primary nosuch") != NULL, "%s", h.last_error);
    inst_free(&in);
}
END_TEST

Suite *redis_sentinel_suite(void);
Suite *redis_sentinel_suite(void)
{
    Suite *s = suite_create("redis_sentinel");
    TCase *tc = tcase_create("sentinel");
    tcase_add_checked_fixture(tc, grp_up, grp_down);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, follows_a_failover_under_load);
    tcase_add_test(tc, never_answers_from_a_demoted_primary);
    tcase_add_test(tc, switch_master_moves_the_pool_without_a_call);
    tcase_add_test(tc, unknown_master_is_reported);
    tcase_add_test(tc, a_stopped_sentinel_does_not_keep_the_store_from_a_failover);
    tcase_add_test(tc, stopped_sentinels_do_not_keep_the_store_from_its_primary);
    tcase_add_test(tc, switch_master_cuts_the_backoff_short);
    tcase_add_test(tc, a_stopped_sentinel_does_not_hide_the_switch);
    tcase_add_test(tc, a_missed_switch_is_found_by_asking);
    suite_add_tcase(s, tc);
    TCase *unit = tcase_create("unit");
    tcase_add_test(unit, the_newest_answer_is_followed);
    suite_add_tcase(s, unit);
    return s;
}

int main(void) { return tu_run(redis_sentinel_suite()) ? 1 : 0; }
