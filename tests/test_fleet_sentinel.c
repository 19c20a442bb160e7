/*
 * test_fleet_sentinel.c - two real ratelimitd processes on Redis behind Sentinel (one primary,
 * one replica, three sentinels), over HTTP. The primary is killed under load; the sentinels
 * promote the replica; both daemons follow by themselves. Asserted: no daemon crashes, every
 * request is answered, each level answers by its on_store_error during the gap, decisions come
 * from Redis again within the failover time plus 2 s, and the slow global bucket admits no more
 * than its limits over the whole run. Expected numbers are worked out in the comments.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis_server.h"
#include "srvutil.h"

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* user fails open, global (100 at once, 20 a second) closed, team local (halved: 2 daemons) */
#define SLOW_CAPACITY 100
#define SLOW_RATE 20
static const char *levels =
    "\"levels\": ["
    "{\"name\": \"user\", \"on_store_error\": \"open\", \"rules\": [{\"type\": \"token_bucket\", "
    "\"name\": \"user\", \"capacity\": 1000000, \"per_second\": 1000000}]},"
    "{\"name\": \"global\", \"on_store_error\": \"closed\", \"rules\": [{\"type\": "
    "\"token_bucket\", \"name\": \"slow\", \"capacity\": 100, \"per_second\": 20}]},"
    "{\"name\": \"team\", \"on_store_error\": \"local\", \"rules\": [{\"type\": \"token_bucket\", "
    "\"name\": \"team\", \"capacity\": 1000000, \"per_second\": 1000000}]}]";

enum { KIND_USER, KIND_GLOBAL, KIND_TEAM, NKINDS };

typedef struct loader {
    const su_server *s;
    volatile int stop;
    long calls, failed, other, wrong, global_allowed;
    long fell[NKINDS];
    double last_fallback;
    int last_kind; /* of the last answer that fell back */
    char body[4096];
    size_t len;
} loader;

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
    loader *l = arg;
    size_t k = size * n;
    if (l->len + k < sizeof l->body) {
        memcpy(l->body + l->len, data, k);
        l->len += k;
    }
    return k;
}

/* What one answer says: -1 when it came from Redis, else the fallback mode it shows (0 open:
 * allowed with no limits; 1 closed: denied by "global: store unavailable"; 2 local: the team
 * limit halved), 3 for anything else. */
static int fallback_of(int kind, long status, const char *body, int *allowed)
{
    json_t *j = json_loads(body, 0, NULL);
    json_t *lim = json_object_get(j, "limits"), *b = json_object_get(j, "blocked_by");
    size_t n = json_array_size(lim);
    double limit = json_number_value(json_object_get(json_array_get(lim, 0), "limit"));
    const char *by = json_is_string(b) ? json_string_value(b) : "";
    int r = 3;
    *allowed = status == 200;
    if (kind == KIND_USER)
        r = status == 200 && n == 0 ? 0 : status == 200 && n == 1 ? -1 : 3;
    else if (kind == KIND_GLOBAL)
        r = status == 429 && strcmp(by, "global: store unavailable") == 0 ? 1
            : n == 1 && limit == SLOW_CAPACITY                            ? -1
                                                                          : 3;
    else
        r = n == 1 && limit == 500000 ? 2 : n == 1 && limit == 1000000 ? -1 : 3;
    json_decref(j);
    return r;
}

static void *load_run(void *arg)
{
    static const char *const bodies[NKINDS] = {"{\"keys\": {\"user\": \"u1\"}}",
                                               "{\"keys\": {\"global\": \"all\"}}",
                                               "{\"keys\": {\"team\": \"t1\"}}"};
    loader *l = arg;
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/acquire", l->s->port);
    struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, l);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    for (unsigned i = 0; !__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE); i++) {
        int kind = (int)(i % NKINDS), allowed;
        long status = 0;
        l->len = 0;
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, bodies[kind]);
        CURLcode rc = curl_easy_perform(h);
        double at = mono_s();
        l->calls++;
        if (rc != CURLE_OK) {
            l->failed++;
            continue;
        }
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        l->body[l->len] = '\0';
        if (status != 200 && status != 429) {
            l->other++;
            continue;
        }
        int fb = fallback_of(kind, status, l->body, &allowed);
        if (kind == KIND_GLOBAL && allowed)
            l->global_allowed++;
        if (fb == 3 || (fb >= 0 && fb != kind)) {
            l->wrong++;
        } else if (fb >= 0) {
            l->fell[kind]++;
            l->last_fallback = at;
            l->last_kind = kind;
        }
    }
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    return NULL;
}

#define CLIENTS 4

/* What the clients saw, summed; last is the client of the last answer that fell back. */
typedef struct totals {
    long calls, failed, other, wrong, allowed, fell[NKINDS];
    double last_fallback;
    int last;
} totals;

static void stop_and_sum(loader *l, pthread_t *t, totals *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 0; i < CLIENTS; i++) {
        __atomic_store_n(&l[i].stop, 1, __ATOMIC_RELEASE);
        pthread_join(t[i], NULL);
        o->calls += l[i].calls;
        o->failed += l[i].failed;
        o->other += l[i].other;
        o->wrong += l[i].wrong;
        o->allowed += l[i].global_allowed;
        for (int k = 0; k < NKINDS; k++)
            o->fell[k] += l[i].fell[k];
        if (l[i].last_fallback > o->last_fallback)
            o->last_fallback = l[i].last_fallback, o->last = i;
    }
}

/* The daemons' view of the store, to say why one kept falling back. */
static void show_health(const su_server *s)
{
    for (int i = 0; i < 2; i++) {
        su_resp h = su_req(&s[i], "GET", "/healthz", NULL, NULL);
        fprintf(stderr, "daemon %d /healthz: %s\n", i, h.body);
        su_resp_free(&h);
    }
}

START_TEST(daemons_follow_a_sentinel_failover)
{
    static const char *const kinds[NKINDS] = {"user", "global", "team"};
    rt_sentinel_group g;
    rt_sentinel_start(&g, 1000, 2000);
    char cfg[4096];
    snprintf(cfg, sizeof cfg,
             "{\"store\": {\"type\": \"redis\", \"sentinel\": {\"nodes\": [\"%s\", \"%s\", \"%s\"], "
             "\"master\": \"%s\"}, \"timeout_ms\": 100, \"pool\": 4, \"fleet_size\": 2}, %s}",
             g.nodes[0], g.nodes[1], g.nodes[2], RT_MASTER_NAME, levels);
    su_server s[2];
    for (int i = 0; i < 2; i++) {
        su_tmpdir(&s[i]);
        su_start(&s[i], cfg, NULL);
    }
    loader l[CLIENTS];
    pthread_t t[CLIENTS];
    double t0 = mono_s();
    for (int i = 0; i < CLIENTS; i++) {
        memset(&l[i], 0, sizeof l[i]);
        l[i].s = &s[i % 2];
        ck_assert_int_eq(pthread_create(&t[i], NULL, load_run, &l[i]), 0);
    }
    sleep_ms(1000);
    double killed = mono_s();
    rt_redis_kill(&g.data[0]);
    while (rt_sentinel_primary(&g) != g.data[1].port && mono_s() - killed < 60)
        sleep_ms(10);
    double switched = mono_s();
    ck_assert_int_eq(rt_sentinel_primary(&g), g.data[1].port);
    sleep_ms(3000);
    totals o;
    stop_and_sum(l, t, &o);
    double run_s = mono_s() - t0;
    fprintf(stderr,
            "daemons_follow_a_sentinel_failover: %ld requests; killed at %.3f s, switched at "
            "%.3f s (%.3f s later), last fallback %.3f s after the switch (%s, daemon %d); %ld of "
            "global admitted in %.3f s\n",
            o.calls, killed - t0, switched - t0, switched - killed, o.last_fallback - switched,
            kinds[l[o.last].last_kind], o.last % 2, o.allowed, run_s);
    ck_assert_int_eq(o.failed, 0);
    ck_assert_int_eq(o.other, 0);
    ck_assert_int_eq(o.wrong, 0);
    for (int k = 0; k < NKINDS; k++)
        ck_assert_int_gt(o.fell[k], 0);
    if (o.last_fallback > switched + 2)
        show_health(s);
    ck_assert_msg(o.last_fallback <= switched + 2, "fell back until %.3f s after the switch",
                  o.last_fallback - switched);
    /* 100 at once and 20 a second over the run, at most; the clients asked far more */
    ck_assert_msg(o.allowed <= SLOW_CAPACITY + SLOW_RATE * run_s + 1, "%ld admitted in %.3f s",
                  o.allowed, run_s);
    ck_assert_int_ge(o.allowed, SLOW_CAPACITY);
    for (int i = 0; i < 2; i++) {
        su_resp h = su_req(&s[i], "GET", "/healthz", NULL, NULL);
        ck_assert_str_eq(su_str(&h, "status"), "ok");
        su_resp_free(&h);
        ck_assert_msg(su_stop(&s[i]) == 0, "ratelimitd %d did not exit 0", i);
    }
    /* the bucket lives on the new primary */
    redisReply *r = rt_redis_cmd(&g.data[1], "EXISTS rl:global:0:all");
    ck_assert_int_eq(r->integer, 1);
    freeReplyObject(r);
    rt_sentinel_stop(&g);
}
END_TEST

static Suite *fleet_sentinel_suite(void)
{
    Suite *s = suite_create("fleet_sentinel");
    TCase *tc = tcase_create("sentinel");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, daemons_follow_a_sentinel_failover);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return su_main(fleet_sentinel_suite()); }
