/*
 * test_redis_pool.c - the pool's shared connections (service/redis/pool.c) against a real
 * redis-server: more threads than connections, each call answered with its own reply while
 * calls are written in batches; a script cache flushed under load (NOSCRIPT in a batch);
 * Redis frozen and killed with calls owed, which fail within their deadline, and the pool
 * coming back by itself.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis/pool.h"
#include "redis_server.h"
#include "testutil.h"

#define THREADS 8
#define CONNS 2

static rt_redis srv;

static void srv_up(void) { rt_redis_start(&srv); }

static void srv_down(void) { rt_redis_stop(&srv); }

static rld_pool *pool(int timeout_ms, int size)
{
    rld_redis_addr addr;
    rld_pool *p;
    rl_err err = {{0}};
    ck_assert_int_eq(rld_redis_parse_url(srv.url, &addr, &err), RL_OK);
    ck_assert_int_eq(rld_pool_new(&addr, timeout_ms, size, &p, &err), RL_OK);
    return p;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* One call whose reply names it: ECHO, a script that returns its argument, or ECHO after
 * ASKING (two commands that must stay adjacent). RL_OK and *mine when the reply is this
 * call's own text. */
static int echo(rld_pool *p, int kind, const char *text, int *mine, rl_err *err)
{
    const char *echo_argv[2] = {"ECHO", text};
    const char *eval_argv[4] = {"EVAL", "return ARGV[1]", "0", text};
    redisReply *r = NULL;
    int rc = kind == 0   ? rld_pool_command(p, 2, echo_argv, NULL, &r, err)
             : kind == 1 ? rld_pool_command(p, 4, eval_argv, NULL, &r, err)
                         : rld_pool_exec(p, -1, 0, 2, echo_argv, NULL, RLD_POOL_ASKING, &r, err);
    *mine = rc == RL_OK && r->type == REDIS_REPLY_STRING && strcmp(r->str, text) == 0;
    if (r)
        freeReplyObject(r);
    return rc;
}

static rl_ns mono(void) { return rld_mono_ns(); }

/* ---- each call its own reply, in batches ------------------------------------------------- */

typedef struct worker {
    rld_pool *p;
    int id, calls;
    volatile int *stop; /* for the load that runs until told (NULL: calls calls) */
    /* what came back */
    int ok, wrong, failed, late_ok;
    rl_ns slowest_failure; /* ns from start to RL_ESTORE */
    rl_ns recovered_at;    /* the main thread's mark: calls answered after it count in late_ok */
    char last_error[512];
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    for (int i = 0; w->stop ? !__atomic_load_n(w->stop, __ATOMIC_ACQUIRE) : i < w->calls; i++) {
        char text[64];
        snprintf(text, sizeof text, "caller %d call %d", w->id, i);
        rl_err err = {{0}};
        int mine;
        rl_ns t0 = mono();
        int rc = echo(w->p, i % 3, text, &mine, &err);
        rl_ns took = mono() - t0;
        if (rc != RL_OK) {
            w->failed++;
            if (took > w->slowest_failure)
                w->slowest_failure = took;
            snprintf(w->last_error, sizeof w->last_error, "%s", err.msg);
        } else if (!mine) {
            w->wrong++;
        } else {
            w->ok++;
            rl_ns back = __atomic_load_n(&w->recovered_at, __ATOMIC_ACQUIRE);
            if (back && t0 > back)
                __atomic_add_fetch(&w->late_ok, 1, __ATOMIC_RELEASE);
        }
    }
    return NULL;
}

static void run_workers(worker *w, pthread_t *t, rld_pool *p, int calls, volatile int *stop)
{
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.p = p, .id = i, .calls = calls, .stop = stop};
        ck_assert_int_eq(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
}

START_TEST(each_call_gets_its_own_reply_in_batches)
{
    rld_pool *p = pool(5000, CONNS);
    worker w[THREADS];
    pthread_t t[THREADS];
    const int calls = 1500;
    run_workers(w, t, p, calls, NULL);
    int ok = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        ck_assert_msg(w[i].failed == 0, "caller %d: %d failed (%s)", i, w[i].failed,
                      w[i].last_error);
        ck_assert_msg(w[i].wrong == 0, "caller %d: %d replies were another call's", i,
                      w[i].wrong);
        ok += w[i].ok;
    }
    ck_assert_int_eq(ok, THREADS * calls);
    uint64_t n, batches;
    rld_pool_counts(p, &n, &batches); /* calls, and the writes (batches) that carried them */
    /* every call written once (and nothing else: no script is loaded for these commands) */
    ck_assert_uint_eq(n, (uint64_t)THREADS * calls);
    /* eight callers on two connections: many batches carry several calls */
    ck_assert_msg(batches * 5 / 4 < n, "%llu calls in %llu batches", (unsigned long long)n,
                  (unsigned long long)batches);
    /* CONNS connections carried them (Redis counts its clients, this one too) */
    redisReply *r = rt_redis_cmd(&srv, "INFO clients");
    const char *s = strstr(r->str, "connected_clients:");
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(atoi(s + strlen("connected_clients:")), CONNS + 1);
    freeReplyObject(r);
    rld_pool_free(p);
}
END_TEST

/* ---- NOSCRIPT in a batch ----------------------------------------------------------------- */

typedef struct beater {
    rld_pool *p;
    int id, calls, failed, wrong;
    char last_error[512];
} beater;

/* The heartbeat script on a key of its own: it answers 1 (this caller alone in its set). */
static void *beat(void *arg)
{
    beater *b = arg;
    char key[32], id[32];
    snprintf(key, sizeof key, "pool:fleet:%d", b->id);
    for (int i = 0; i < b->calls; i++) {
        snprintf(id, sizeof id, "i-%d", i);
        const char *argv[4] = {key, id, "3000", "10000"};
        redisReply *r = NULL;
        rl_err err = {{0}};
        if (rld_pool_eval(b->p, RLD_SCRIPT_HEARTBEAT, 1, 4, argv, NULL, &r, &err) != RL_OK) {
            b->failed++;
            snprintf(b->last_error, sizeof b->last_error, "%s", err.msg);
            continue;
        }
        /* the set holds id i-0 .. i-i, all within 3 s */
        if (r->type != REDIS_REPLY_INTEGER || r->integer != i + 1)
            b->wrong++;
        freeReplyObject(r);
    }
    return NULL;
}

START_TEST(scripts_flushed_under_load_are_loaded_again)
{
    rld_pool *p = pool(5000, CONNS);
    beater b[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        b[i] = (beater){.p = p, .id = i, .calls = 600};
        ck_assert_int_eq(pthread_create(&t[i], NULL, beat, &b[i]), 0);
    }
    redisContext *c = rt_redis_connect(&srv);
    for (int i = 0; i < 40; i++) {
        nap_ms(5);
        redisReply *r = redisCommand(c, "SCRIPT FLUSH");
        ck_assert_ptr_nonnull(r);
        freeReplyObject(r);
    }
    redisFree(c);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        ck_assert_msg(b[i].failed == 0, "caller %d: %d failed (%s)", i, b[i].failed,
                      b[i].last_error);
        ck_assert_int_eq(b[i].wrong, 0);
    }
    /* the flushes did land between calls: Redis answered NOSCRIPT, which the pool absorbed */
    redisReply *r = rt_redis_cmd(&srv, "INFO errorstats");
    ck_assert_msg(strstr(r->str, "errorstat_NOSCRIPT:count=") != NULL, "%s", r->str);
    freeReplyObject(r);
    uint64_t n, batches;
    rld_pool_counts(p, &n, &batches);
    ck_assert_uint_gt(n, batches);
    rld_pool_free(p);
}
END_TEST

/* ---- Redis frozen or killed with calls owed ---------------------------------------------- */

/* The bound a failure must meet is the timeout and half of it again: room for scheduling on a
 * busy machine or under a sanitizer (a run on a loaded machine once took 214 ms past a 300 ms
 * timeout), yet short of twice the timeout, which is what a queued call would take if it
 * waited out its leader's deadline before starting on its own. */
#define FAIL_TIMEOUT_MS 800
#define SLACK_MS 400

/* Load from THREADS callers for run_ms; Redis is broken by stop() at 150 ms, the pool must go
 * down, then Redis comes back with start() and the pool must be up again (through its
 * probes) and answer correctly. */
static void owed_calls_fail_in_time(void (*stop)(rt_redis *), void (*start)(rt_redis *))
{
    rld_pool *p = pool(FAIL_TIMEOUT_MS, CONNS);
    worker w[THREADS];
    pthread_t t[THREADS];
    volatile int done = 0;
    run_workers(w, t, p, 0, &done);
    nap_ms(150);
    stop(&srv);
    /* down once the first owed call fails (frozen: after its timeout) */
    for (int i = 0; i < 1000 && rld_pool_up(p); i++)
        nap_ms(10);
    ck_assert_msg(!rld_pool_up(p), "the pool still up 10 s after Redis went");
    char why[256];
    rld_pool_last_error(p, why, sizeof why);
    start(&srv);
    rl_ns until = mono() + S(5);
    while (!rld_pool_probe(p) && mono() < until)
        nap_ms(10);
    ck_assert_msg(rld_pool_up(p), "not back 5 s after Redis was");
    rl_ns back = mono();
    for (int i = 0; i < THREADS; i++)
        __atomic_store_n(&w[i].recovered_at, back, __ATOMIC_RELEASE);
    /* until every caller has had a call answered after the recovery (10 s at most) */
    for (int i = 0, waited = 0; i < THREADS && waited < 1000; waited++)
        if (__atomic_load_n(&w[i].late_ok, __ATOMIC_ACQUIRE) > 0)
            i++;
        else
            nap_ms(10);
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    int failed = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        failed += w[i].failed;
        ck_assert_msg(w[i].wrong == 0, "caller %d: %d replies were another call's", i,
                      w[i].wrong);
        ck_assert_msg(w[i].slowest_failure <= (rl_ns)(FAIL_TIMEOUT_MS + SLACK_MS) * 1000000,
                      "caller %d: a failure took %lld ms", i,
                      (long long)(w[i].slowest_failure / 1000000));
        ck_assert_msg(w[i].late_ok > 0, "caller %d: no call answered after the recovery", i);
    }
    ck_assert_int_gt(failed, 0);
    ck_assert_msg(why[0], "no error kept");
    rld_pool_free(p);
}

START_TEST(frozen_redis_fails_owed_calls_within_the_deadline)
{
    owed_calls_fail_in_time(rt_redis_pause, rt_redis_resume);
    /* the calls in flight when it froze timed out (rather than being refused later) */
    rld_pool *p = pool(FAIL_TIMEOUT_MS, 1);
    rt_redis_pause(&srv);
    int mine;
    rl_err err = {{0}};
    rl_ns t0 = mono();
    ck_assert_int_eq(echo(p, 0, "frozen", &mine, &err), RL_ESTORE);
    ck_assert_msg(strstr(err.msg, "timed out") != NULL, "%s", err.msg);
    ck_assert_int_le(mono() - t0, (rl_ns)(FAIL_TIMEOUT_MS + SLACK_MS) * 1000000);
    rt_redis_resume(&srv);
    rld_pool_free(p);
}
END_TEST

START_TEST(killed_redis_fails_owed_calls_and_the_pool_comes_back)
{
    owed_calls_fail_in_time(rt_redis_kill, rt_redis_restart);
}
END_TEST

/* ---- the protocol's form of a command --------------------------------------------------- */

START_TEST(commands_are_written_as_redis_reads_them)
{
    /* worked out by hand: an array of 3 bulk strings, one of them empty, one with a NUL */
    const char *argv[] = {"SET", "k\0y", ""};
    const size_t len[] = {3, 3, 0};
    char out[64], *heap;
    long n = rld_resp_format(out, sizeof out, &heap, "", 0, 3, argv, len);
    static const char want[] = "*3\r\n$3\r\nSET\r\n$3\r\nk\0y\r\n$0\r\n\r\n";
    ck_assert_int_eq(n, (long)sizeof want - 1);
    ck_assert_ptr_null(heap);
    ck_assert_int_eq(memcmp(out, want, sizeof want - 1), 0);

    /* with ASKING in front, and lengths from strlen */
    const char *echo[] = {"ECHO", "hello"};
    n = rld_resp_format(out, sizeof out, &heap, "*1\r\n$6\r\nASKING\r\n", 16, 2, echo, NULL);
    static const char want2[] = "*1\r\n$6\r\nASKING\r\n*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n";
    ck_assert_int_eq(n, (long)sizeof want2 - 1);
    ck_assert_int_eq(memcmp(out, want2, sizeof want2 - 1), 0);
}
END_TEST

START_TEST(long_commands_match_hiredis_in_a_buffer_of_their_own)
{
    /* 120 arguments of lengths 0 to 1,190: past the inline space, and the same bytes as
     * hiredis's own formatter writes */
    enum { N = 120 };
    const char *argv[N];
    size_t len[N];
    static char text[N * 10];
    memset(text, 'x', sizeof text);
    for (int i = 0; i < N; i++) {
        argv[i] = text;
        len[i] = (size_t)i * 10;
    }
    char out[256], *heap, *ref;
    long n = rld_resp_format(out, sizeof out, &heap, "", 0, N, argv, len);
    int m = redisFormatCommandArgv(&ref, N, argv, len);
    ck_assert_ptr_nonnull(heap);
    ck_assert_int_eq(n, m);
    ck_assert_int_eq(memcmp(heap, ref, (size_t)m), 0);
    free(heap);
    redisFreeCommand(ref);
}
END_TEST

Suite *redis_pool_suite(void);
Suite *redis_pool_suite(void)
{
    Suite *s = suite_create("redis_pool");
    TCase *tc = tcase_create("shared");
    tcase_add_checked_fixture(tc, srv_up, srv_down);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, each_call_gets_its_own_reply_in_batches);
    tcase_add_test(tc, scripts_flushed_under_load_are_loaded_again);
    tcase_add_test(tc, frozen_redis_fails_owed_calls_within_the_deadline);
    tcase_add_test(tc, killed_redis_fails_owed_calls_and_the_pool_comes_back);
    TCase *fmt = tcase_create("format");
    tcase_add_test(fmt, commands_are_written_as_redis_reads_them);
    tcase_add_test(fmt, long_commands_match_hiredis_in_a_buffer_of_their_own);
    suite_add_tcase(s, fmt);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(redis_pool_suite()) ? 1 : 0; }
