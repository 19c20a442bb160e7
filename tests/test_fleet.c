/*
 * test_fleet.c - several real ratelimitd processes on one Redis ("store": "redis"), over HTTP:
 * many keep-alive clients on one shared key admit what one bucket allows; a reservation made
 * through one instance is settled and released through another; a quota set through one is in
 * force on every one and outlives them; Redis killed under load and restarted: each level
 * answers by its on_store_error mode, /healthz and /metrics say so, the instances return to
 * Redis by themselves. Each test starts its own redis-server (tests/redis_server.h) and its own
 * daemons, and stops all of them; a daemon that does not exit 0 fails the test. Expected
 * numbers are worked out by hand in the comments.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "srvutil.h"

static const char *const manual[] = {"--manual-clock", NULL};

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

/* A configuration on r's Redis: store members (after url) and the rest of the document. */
static char *fleet_config(const rt_redis *r, const char *store, const char *rest)
{
    static char buf[8192];
    snprintf(buf, sizeof buf, "{\"store\": {\"type\": \"redis\", \"url\": \"%s\"%s}, %s}", r->url,
             store, rest);
    return buf;
}

/* Starts n daemons on one configuration, each in its own directory. */
static void start_all(su_server *s, int n, const char *config, const char *const *extra)
{
    for (int i = 0; i < n; i++) {
        su_tmpdir(&s[i]);
        su_start(&s[i], config, extra);
    }
}

static void stop_all(su_server *s, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(su_stop(&s[i]) == 0, "ratelimitd %d did not exit 0", i);
}

static su_resp post(const su_server *s, const char *path, const char *body)
{
    return su_req(s, "POST", path, body, NULL);
}

/* A member of limits[i] of an /acquire answer. */
static json_t *limit_at(const su_resp *r, size_t i, const char *key)
{
    json_t *v = json_object_get(json_array_get(json_object_get(r->json, "limits"), i), key);
    ck_assert_msg(v != NULL, "no limits[%zu].%s in %.2000s", i, key, r->body);
    return v;
}

static size_t nlimits(const su_resp *r)
{
    json_t *l = json_object_get(r->json, "limits");
    ck_assert_msg(json_is_array(l), "no limits in %.2000s", r->body);
    return json_array_size(l);
}

/* Asserts an /acquire answer: status and blocked_by (NULL: null). */
static void check_decision(const su_resp *r, int status, const char *blocked_by)
{
    ck_assert_msg(r->status == status, "status %ld, want %d: %.2000s", r->status, status, r->body);
    json_t *b = json_object_get(r->json, "blocked_by");
    if (blocked_by)
        ck_assert_msg(json_is_string(b) && strcmp(json_string_value(b), blocked_by) == 0,
                      "blocked_by, want \"%s\": %.2000s", blocked_by, r->body);
    else
        ck_assert_msg(json_is_null(b), "blocked_by, want null: %.2000s", r->body);
}

static void check_error(const su_resp *r, int status, const char *prefix)
{
    ck_assert_msg(r->status == status, "status %ld, want %d: %.2000s", r->status, status, r->body);
    const char *got = su_error(r);
    ck_assert_msg(strncmp(got, prefix, strlen(prefix)) == 0, "error \"%s\", want \"%s...\"", got,
                  prefix);
}

/* The value of one sample line of /metrics ("name{labels}" exactly); fails when absent. */
static double metric(const su_server *s, const char *series)
{
    su_resp r = su_req(s, "GET", "/metrics", NULL, NULL);
    char want[300];
    snprintf(want, sizeof want, "\n%s ", series);
    const char *p = strstr(r.body, want);
    ck_assert_msg(p != NULL, "no sample %s in\n%.4000s", series, r.body);
    double v = strtod(p + strlen(want), NULL);
    su_resp_free(&r);
    return v;
}

/* Polls GET /healthz until its status is want (and, when peers > 0, it counts that many
 * peers and its fleet_size is that too), for at most limit_s seconds; returns the last answer (the caller frees it). */
static su_resp wait_health(const su_server *s, const char *want, unsigned peers, double limit_s)
{
    double until = mono_s() + limit_s;
    for (;;) {
        su_resp r = su_req(s, "GET", "/healthz", NULL, NULL);
        ck_assert_int_eq(r.status, 200);
        json_t *st = json_object_get(r.json, "status");
        json_t *p = json_object_get(r.json, "peers"), *n = json_object_get(r.json, "fleet_size");
        /* fleet_size follows the count of peers at the housekeeping tick after it changed */
        if (json_is_string(st) && strcmp(json_string_value(st), want) == 0 &&
            (!peers || (json_is_integer(p) && json_integer_value(p) == peers &&
                        json_is_integer(n) && json_integer_value(n) == peers)))
            return r;
        ck_assert_msg(mono_s() < until, "/healthz did not become \"%s\" (peers %u) within %g s: %s",
                      want, peers, limit_s, r.body);
        su_resp_free(&r);
        sleep_ms(20);
    }
}

/* Polls GET /quota/<user> on s until its tier is want (NULL: a custom list), at most limit_s
 * seconds. Returns the answer (the caller frees it). */
static su_resp wait_tier(const su_server *s, const char *user, const char *want, double limit_s)
{
    char path[128];
    snprintf(path, sizeof path, "/quota/%s", user);
    double until = mono_s() + limit_s;
    for (;;) {
        su_resp r = su_req(s, "GET", path, NULL, NULL);
        ck_assert_int_eq(r.status, 200);
        json_t *t = json_object_get(r.json, "tier");
        if (want ? json_is_string(t) && strcmp(json_string_value(t), want) == 0 : json_is_null(t))
            return r;
        ck_assert_msg(mono_s() < until, "%s: tier did not become %s within %g s: %s", path,
                      want ? want : "null", limit_s, r.body);
        su_resp_free(&r);
        sleep_ms(10);
    }
}

/* ---- many clients, two instances, one key -------------------------------------------------- */

#define HAMMER_CLIENTS 16
#define HAMMER_SECONDS 4.0
/* A large burst against a modest rate: what the fleet admits is mostly the burst, so a client
 * stalled at the end of the run (a loaded machine, a sanitized build) costs less than 1% of
 * it, while clients still ask far faster than the bucket gives (checked below). */
#define CAPACITY 2000
#define RATE 100

typedef struct hammer {
    const su_server *s;
    pthread_barrier_t *ready;
    double deadline;
    double first_start, last_end; /* monotonic seconds */
    long allowed, denied, other, failed;
} hammer;

static size_t discard(char *data, size_t size, size_t n, void *arg)
{
    (void)data;
    (void)arg;
    return size * n;
}

/* A keep-alive handle that POSTs body to s's /acquire; no assertion (runs on client threads). */
static CURL *acquire_handle(const su_server *s, const char *body, struct curl_slist **hl)
{
    char url[128];
    CURL *h = curl_easy_init();
    snprintf(url, sizeof url, "http://127.0.0.1:%d/acquire", s->port);
    *hl = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hl);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    return h;
}

static void *hammer_run(void *arg)
{
    hammer *c = arg;
    struct curl_slist *hl, *whl;
    /* the connection is opened on a key of the client's own, then every client starts at once */
    char warm[64];
    snprintf(warm, sizeof warm, "{\"keys\": {\"user\": \"warm-%p\"}}", (void *)c);
    CURL *h = acquire_handle(c->s, warm, &whl);
    if (curl_easy_perform(h) != CURLE_OK)
        c->failed++;
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, "{\"keys\": {\"user\": \"shared\"}}");
    curl_slist_free_all(whl);
    hl = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    pthread_barrier_wait(c->ready);
    c->first_start = mono_s();
    c->deadline = c->first_start + HAMMER_SECONDS;
    while (mono_s() < c->deadline) {
        long status = 0;
        if (curl_easy_perform(h) != CURLE_OK) {
            c->failed++;
            continue;
        }
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        if (status == 200)
            c->allowed++;
        else if (status == 429)
            c->denied++;
        else
            c->other++;
    }
    c->last_end = mono_s();
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    return NULL;
}

START_TEST(two_instances_share_one_bucket)
{
    rt_redis r;
    rt_redis_start(&r);
    su_server s[2];
    /* closed: a call that timed out could only deny, never admit more; the timeout is far
     * above any real answer, and the test checks that no level fell back */
    char levels[512];
    snprintf(levels, sizeof levels,
             "\"threads\": 4, \"levels\": [{\"name\": \"user\", \"on_store_error\": "
             "\"closed\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"shared\", "
             "\"capacity\": %d, \"per_second\": %d}]}]",
             CAPACITY, RATE);
    const char *cfg = fleet_config(&r, ", \"timeout_ms\": 2000, \"pool\": 8", levels);
    start_all(s, 2, cfg, NULL);
    /* both heartbeats seen: each instance counts two */
    for (int i = 0; i < 2; i++) {
        su_resp h = wait_health(&s[i], "ok", 2, 10);
        su_resp_free(&h);
    }

    hammer c[HAMMER_CLIENTS];
    pthread_t t[HAMMER_CLIENTS];
    pthread_barrier_t ready;
    pthread_barrier_init(&ready, NULL, HAMMER_CLIENTS);
    for (int i = 0; i < HAMMER_CLIENTS; i++) {
        c[i] = (hammer){.s = &s[i % 2], .ready = &ready};
        ck_assert_int_eq(pthread_create(&t[i], NULL, hammer_run, &c[i]), 0);
    }
    long allowed = 0, denied = 0, other = 0, failed = 0, per[2] = {0, 0};
    double first = 1e300, last = 0;
    for (int i = 0; i < HAMMER_CLIENTS; i++) {
        pthread_join(t[i], NULL);
        allowed += c[i].allowed;
        denied += c[i].denied;
        other += c[i].other;
        failed += c[i].failed;
        per[i % 2] += c[i].allowed;
        first = c[i].first_start < first ? c[i].first_start : first;
        last = c[i].last_end > last ? c[i].last_end : last;
    }
    pthread_barrier_destroy(&ready);
    /* The bucket starts full (2000) and refills at 100/s from its first take, so over the run
     * the fleet can admit at most 2000 + 100 * elapsed, elapsed measured from the first
     * request's start to the last answer's end (wider than the decisions' span). Clients ask
     * far faster (thousands a second), so the burst is gone within about a second and every
     * later token is taken within a request's time of appearing: nearly all of it. About
     * 2000 + 100 * 4 = 2400; quiet runs admit 2400 against a bound of 2400.1 to 2401.1. The
     * floor is 95% (120 tokens, 1.2 s of refill): room for a stall between the last decision
     * and the last answer on a loaded machine, and still far above what a fleet admits when
     * an instance takes twice its cost (about half). */
    double elapsed = last - first, bound = CAPACITY + RATE * elapsed;
    fprintf(stderr,
            "two_instances_share_one_bucket: %ld allowed (%ld + %ld), %ld denied in %.3f s; "
            "bound %.1f\n",
            allowed, per[0], per[1], denied, elapsed, bound);
    ck_assert_int_eq(failed, 0);
    ck_assert_int_eq(other, 0);
    ck_assert_msg(allowed <= bound, "%ld allowed, more than %.1f", allowed, bound);
    ck_assert_msg(allowed >= 0.95 * bound, "%ld allowed, less than 95%% of %.1f", allowed, bound);
    ck_assert_msg(denied > allowed, "the clients did not ask faster than the refill");
    /* both instances decided, against the same bucket, and what they counted adds up (plus
     * the warm-up request of each of their clients) */
    ck_assert_int_gt(per[0], 0);
    ck_assert_int_gt(per[1], 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(metric(&s[i], "ratelimit_acquire_total{decision=\"allowed\"}"),
                         per[i] + HAMMER_CLIENTS / 2);
        ck_assert_int_eq(metric(&s[i], "ratelimit_store_fallback_total{level=\"user\","
                                       "mode=\"closed\"}"),
                         0);
        ck_assert_int_eq(metric(&s[i], "ratelimit_store_up"), 1);
        /* every decision is a call to Redis (with the heartbeats and housekeeping besides),
         * and a write carries one call or more */
        double calls = metric(&s[i], "ratelimit_redis_calls_total");
        double writes = metric(&s[i], "ratelimit_redis_writes_total");
        ck_assert_double_ge(calls, per[i] + HAMMER_CLIENTS / 2);
        ck_assert_double_gt(writes, 0);
        ck_assert_double_le(writes, calls);
    }
    stop_all(s, 2);
    rt_redis_stop(&r);
}
END_TEST

/* ---- reservations across instances --------------------------------------------------------- */

static const char *resv_rest =
    "\"reservation_ttl\": 30, \"levels\": ["
    " {\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"tokens\", "
    "\"capacity\": 100, \"per_second\": 1}]},"
    " {\"name\": \"job\", \"rules\": [{\"type\": \"concurrency\", \"name\": \"slots\", "
    "\"limit\": 1}]}]";

/* remaining of the user's bucket at now, by a dry run on s */
static double remaining_at(const su_server *s, const char *now)
{
    char body[128];
    snprintf(body, sizeof body, "{\"keys\": {\"user\": \"u1\"}, \"dry_run\": true, \"now\": %s}",
             now);
    su_resp r = post(s, "/acquire", body);
    check_decision(&r, 200, NULL);
    double v = json_number_value(limit_at(&r, 0, "remaining"));
    su_resp_free(&r);
    return v;
}

/* A key's usage read and reset through the other instance: a bucket of 10 (1 a second) for u1
 * emptied by 7 on instance 0 shows used 7 on instance 1; DELETE /usage/user/u1 there clears
 * its one state, and instance 0 then finds it full (10). Without a level named so: 404. */
START_TEST(usage_read_and_reset_through_another_instance)
{
    rt_redis r;
    rt_redis_start(&r);
    su_server s[2];
    start_all(s, 2,
              fleet_config(&r, ", \"prefix\": \"uv:\"",
                           "\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
                           "\"token_bucket\", \"name\": \"b\", \"capacity\": 10, \"per_second\": 1}]}]"),
              manual);
    su_resp a = post(&s[0], "/acquire", "{\"keys\": {\"user\": \"u1\"}, \"cost\": 7, \"now\": 100}");
    check_decision(&a, 200, NULL);
    su_resp_free(&a);
    /* instance 1's manual clock reaches t = 100 too (an admin request carries no time) */
    a = post(&s[1], "/acquire", "{\"keys\": {\"user\": \"u2\"}, \"dry_run\": true, \"now\": 100}");
    su_resp_free(&a);
    su_resp g = su_req(&s[1], "GET", "/usage/user/u1", NULL, NULL);
    ck_assert_int_eq(g.status, 200);
    ck_assert_str_eq(g.body, "{\"level\":\"user\",\"key\":\"u1\",\"rules\":[{\"rule\":\"b\","
                             "\"unit\":\"cost\",\"limit\":10,\"used\":7,\"remaining\":3,"
                             "\"reset_after\":7}]}");
    su_resp_free(&g);
    /* instance 0 is denied 7 more (3 left) and keeps that denial (the cache of denials) */
    a = post(&s[0], "/acquire", "{\"keys\": {\"user\": \"u1\"}, \"cost\": 7, \"now\": 100}");
    check_decision(&a, 429, "user: b");
    su_resp_free(&a);
    su_resp d = su_req(&s[1], "DELETE", "/usage/user/u1", NULL, NULL);
    ck_assert_int_eq(d.status, 200);
    ck_assert_str_eq(d.body, "{\"level\":\"user\",\"key\":\"u1\",\"cleared\":1}");
    su_resp_free(&d);
    ck_assert_double_eq(remaining_at(&s[0], "100"), 10);
    /* the reset reached instance 0's cache: the same 7 passes as soon as the announcement
     * arrives (a denied try takes nothing), well within a second */
    int passed = 0;
    for (int i = 0; i < 50 && !passed; i++) {
        a = post(&s[0], "/acquire", "{\"keys\": {\"user\": \"u1\"}, \"cost\": 7, \"now\": 100}");
        passed = a.status == 200;
        su_resp_free(&a);
        if (!passed)
            sleep_ms(20);
    }
    ck_assert_msg(passed, "instance 0 still denies after the reset");
    d = su_req(&s[0], "DELETE", "/usage/team/t1", NULL, NULL);
    ck_assert_int_eq(d.status, 404);
    su_resp_free(&d);
    stop_all(s, 2);
    rt_redis_stop(&r);
}
END_TEST

START_TEST(reservations_settle_on_another_instance)
{
    rt_redis r;
    rt_redis_start(&r);
    su_server s[2];
    char body[256];
    start_all(s, 2, fleet_config(&r, ", \"prefix\": \"rv:\"", resv_rest), manual);
    su_resp rules = su_req(&s[0], "GET", "/rules", NULL, NULL);
    ck_assert_str_eq(su_str(&rules, "store"), "redis");
    su_resp_free(&rules);
    /* no "threads" configured: one worker per CPU, but with the Redis store at least 8 per
     * pooled connection (the default pool is 2): 16 */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    char workers[64];
    snprintf(workers, sizeof workers, ", %ld threads, redis store",
             cpus < 16 ? 16 : cpus > 64 ? 64 : cpus);
    char *log = su_read(s[0].log);
    ck_assert_msg(strstr(log, workers) != NULL, "no \"%s\" in\n%s", workers, log);
    free(log);

    /* A reserves 40 of u1's 100; B sees 60 left, settles at 10 (30 come back): A sees 90 */
    su_resp a = post(&s[0], "/acquire",
                     "{\"keys\": {\"user\": \"u1\"}, \"cost\": 40, \"reserve\": true, \"now\": 0}");
    check_decision(&a, 200, NULL);
    ck_assert_double_eq(json_number_value(limit_at(&a, 0, "remaining")), 60);
    char id[64];
    snprintf(id, sizeof id, "%s", su_str(&a, "reservation"));
    su_resp_free(&a);
    ck_assert_double_eq(remaining_at(&s[1], "0"), 60);
    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"actual_cost\": 10, \"now\": 0}", id);
    su_resp b = post(&s[1], "/refund", body);
    ck_assert_int_eq(b.status, 200);
    char want[256];
    snprintf(want, sizeof want,
             "{\"reservation\":\"%s\",\"reserved_cost\":40,\"actual_cost\":10,\"refunded\":30,"
             "\"charged\":0}",
             id);
    ck_assert_str_eq(b.body, want);
    su_resp_free(&b);
    ck_assert_double_eq(remaining_at(&s[0], "0"), 90);
    /* settled once, on either instance */
    a = post(&s[0], "/refund", body);
    check_error(&a, 409, "reservation: already settled");
    su_resp_free(&a);
    /* released through A, then unknown on B */
    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"now\": 0}", id);
    a = post(&s[0], "/release", body);
    ck_assert_int_eq(a.status, 200);
    ck_assert_str_eq(a.body, "{\"released\":true}");
    su_resp_free(&a);
    b = post(&s[1], "/release", body);
    check_error(&b, 404, "reservation: unknown, expired or released");
    su_resp_free(&b);

    /* charged through B: A reserves 20 (90 - 20 = 70), B settles at 50: 30 more, 40 left */
    a = post(&s[0], "/acquire",
             "{\"keys\": {\"user\": \"u1\"}, \"cost\": 20, \"reserve\": true, \"now\": 0}");
    check_decision(&a, 200, NULL);
    ck_assert_double_eq(json_number_value(limit_at(&a, 0, "remaining")), 70);
    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"actual_cost\": 50, \"now\": 0}",
             su_str(&a, "reservation"));
    su_resp_free(&a);
    b = post(&s[1], "/refund", body);
    ck_assert_int_eq(b.status, 200);
    ck_assert_double_eq(su_num(&b, "refunded"), 0);
    ck_assert_double_eq(su_num(&b, "charged"), 30);
    su_resp_free(&b);
    ck_assert_double_eq(remaining_at(&s[0], "0"), 40);
    ck_assert_double_eq(metric(&s[1], "ratelimit_refunded_cost_total"), 30);
    ck_assert_double_eq(metric(&s[1], "ratelimit_charged_cost_total"), 30);

    /* a slot taken on A is held for B, released on B, then B's and A waits */
    const char *job = "{\"keys\": {\"job\": \"j\"}, \"now\": 0}";
    a = post(&s[0], "/acquire", job);
    check_decision(&a, 200, NULL);
    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"now\": 0}", su_str(&a, "reservation"));
    su_resp_free(&a);
    b = post(&s[1], "/acquire", job);
    check_decision(&b, 429, "job: slots");
    su_resp_free(&b);
    b = post(&s[1], "/release", body);
    ck_assert_int_eq(b.status, 200);
    su_resp_free(&b);
    b = post(&s[1], "/acquire", job);
    check_decision(&b, 200, NULL);
    su_resp_free(&b);
    a = post(&s[0], "/acquire", job);
    check_decision(&a, 429, "job: slots");
    su_resp_free(&a);

    /* B's slot: B dies without releasing it; A expires it once the 30 s TTL has passed (a tick
     * at now 31 on A) and takes the slot */
    kill(s[1].pid, SIGKILL);
    waitpid(s[1].pid, NULL, 0);
    s[1].pid = 0;
    a = post(&s[0], "/acquire", "{\"keys\": {\"job\": \"j\"}, \"now\": 29}");
    check_decision(&a, 429, "job: slots");
    su_resp_free(&a);
    a = post(&s[0], "/acquire", "{\"keys\": {\"job\": \"j\"}, \"now\": 31}");
    check_decision(&a, 200, NULL);
    su_resp_free(&a);
    ck_assert_int_eq(su_stop(&s[0]), 0);
    rt_redis_stop(&r);
}
END_TEST

/* ---- quotas for the fleet ------------------------------------------------------------------- */

/* The absolute path of the test plug-in (a rule type with state, which Redis cannot hold). */
static const char *max_keys_plugin(void)
{
    static char path[400];
    char rel[400];
    const char *b = getenv("RL_BUILD");
    snprintf(rel, sizeof rel, "%s/plugins/librule_max_keys.so", b && *b ? b : "build");
    ck_assert_msg(realpath(rel, path) != NULL, "no %s", rel);
    return path;
}

/* The rest of the quota tests' configuration (static buffer). */
static const char *quota_rest(void)
{
    static char buf[2048];
    snprintf(buf, sizeof buf,
             "\"plugins\": [\"%s\"], \"quota_file\": \"var/quotas.json\", \"levels\": "
             "[{\"name\": \"user\", \"tiered\": true}], \"tiers\": {\"free\": [{\"type\": "
             "\"token_bucket\", \"name\": \"free\", \"capacity\": 2, \"per_second\": 1}], "
             "\"gold\": [{\"type\": \"token_bucket\", \"name\": \"gold\", \"capacity\": 100, "
             "\"per_second\": 10}]}, \"default_tier\": \"free\", \"quotas\": {\"dave\": "
             "\"gold\"}",
             max_keys_plugin());
    return buf;
}

static const char *carol_rules =
    "{\"rules\": [{\"type\": \"token_bucket\", \"name\": \"carol\", \"capacity\": 7, "
    "\"per_second\": 1}]}";

/* The stored quota of user in Redis's hash t:quotas, or "" (static buffer). */
static const char *stored(const rt_redis *r, const char *user)
{
    static char buf[1024];
    redisReply *rep = rt_redis_cmd(r, "HGET t:quotas %s", user);
    snprintf(buf, sizeof buf, "%s", rep->type == REDIS_REPLY_STRING ? rep->str : "");
    freeReplyObject(rep);
    return buf;
}

static long long hlen(const rt_redis *r)
{
    redisReply *rep = rt_redis_cmd(r, "HLEN t:quotas");
    long long n = rep->integer;
    freeReplyObject(rep);
    return n;
}

/* carol has her own 7, bob is gold, dave (gold in the configuration) was returned to free */
static void check_quotas_in_force(const su_server *s)
{
    su_resp q = su_req(s, "GET", "/quota/bob", NULL, NULL);
    ck_assert_str_eq(su_str(&q, "tier"), "gold");
    su_resp_free(&q);
    q = su_req(s, "GET", "/quota/carol", NULL, NULL);
    ck_assert_msg(json_is_null(json_object_get(q.json, "tier")), "%s", q.body);
    ck_assert_str_eq(q.body, "{\"user\":\"carol\",\"tier\":null,\"rules\":[{\"type\":"
                             "\"token_bucket\",\"name\":\"carol\",\"capacity\":7,\"per_second\":1,"
                             "\"unit\":\"cost\"}]}");
    su_resp_free(&q);
    q = su_req(s, "GET", "/quota/dave", NULL, NULL);
    ck_assert_str_eq(su_str(&q, "tier"), "free");
    su_resp_free(&q);
}

START_TEST(quotas_apply_to_the_fleet_and_outlive_it)
{
    rt_redis r;
    rt_redis_start(&r);
    su_server s[2];
    start_all(s, 2, fleet_config(&r, ", \"prefix\": \"t:\"", quota_rest()), NULL);
    char *log = su_read(s[0].log);
    char want[200];
    snprintf(want, sizeof want, "redis store 127.0.0.1:%d/0, prefix \"t:\"", r.port);
    ck_assert_msg(strstr(log, want), "the start line does not name the store: %s", log);
    ck_assert_ptr_nonnull(strstr(log, "quota_file not used with the Redis store"));
    free(log);

    /* bob: gold through A, in force on B at once; B decides with gold's 100 */
    su_resp a = su_req(&s[0], "PUT", "/quota/bob", "{\"tier\": \"gold\"}", NULL);
    ck_assert_int_eq(a.status, 200);
    ck_assert_str_eq(su_str(&a, "tier"), "gold");
    su_resp_free(&a);
    su_resp b = wait_tier(&s[1], "bob", "gold", 10);
    su_resp_free(&b);
    b = post(&s[1], "/acquire", "{\"keys\": {\"user\": \"bob\"}}");
    check_decision(&b, 200, NULL);
    ck_assert_str_eq(json_string_value(limit_at(&b, 0, "rule")), "gold");
    ck_assert_double_eq(json_number_value(limit_at(&b, 0, "limit")), 100);
    su_resp_free(&b);
    ck_assert_str_eq(stored(&r, "bob"), "{\"tier\":\"gold\"}");

    /* carol: her own rules through B, in force on A */
    b = su_req(&s[1], "PUT", "/quota/carol", carol_rules, NULL);
    ck_assert_int_eq(b.status, 200);
    su_resp_free(&b);
    a = wait_tier(&s[0], "carol", NULL, 10);
    ck_assert_double_eq(json_number_value(json_object_get(
                            json_array_get(json_object_get(a.json, "rules"), 0), "capacity")),
                        7);
    su_resp_free(&a);

    /* bad input: 400 naming the field, nothing stored, nothing changed anywhere */
    a = su_req(&s[0], "PUT", "/quota/bob", "{\"tier\": \"platinum\"}", NULL);
    check_error(&a, 400, "tier: unknown tier \"platinum\"");
    su_resp_free(&a);
    a = su_req(&s[0], "PUT", "/quota/bob",
               "{\"rules\": [{\"type\": \"token_bucket\", \"capacity\": -1, \"per_second\": 1}]}",
               NULL);
    check_error(&a, 400, "rules[0].capacity: ");
    su_resp_free(&a);
    a = su_req(&s[0], "PUT", "/quota/bob", "{\"tier\": \"gold\", \"rules\": []}", NULL);
    check_error(&a, 400, "body: give either");
    su_resp_free(&a);
    /* a rule type with state of a plug-in: fine in memory, but Redis cannot hold it */
    a = su_req(&s[0], "PUT", "/quota/bob", "{\"rules\": [{\"type\": \"max_keys\", \"limit\": 2}]}",
               NULL);
    check_error(&a, 400,
                "rules[0]: rule type max_keys keeps state that the Redis store cannot hold: it "
                "has no Redis port");
    su_resp_free(&a);
    ck_assert_int_eq(hlen(&r), 2);
    ck_assert_str_eq(stored(&r, "bob"), "{\"tier\":\"gold\"}");
    for (int i = 0; i < 2; i++) {
        su_resp q = su_req(&s[i], "GET", "/quota/bob", NULL, NULL);
        ck_assert_str_eq(su_str(&q, "tier"), "gold");
        su_resp_free(&q);
    }

    /* dave is gold by the configuration: DELETE returns him to the default tier everywhere,
     * stored as an explicit "free" so that the configuration's quota does not come back */
    a = su_req(&s[0], "DELETE", "/quota/dave", NULL, NULL);
    ck_assert_int_eq(a.status, 200);
    ck_assert_str_eq(su_str(&a, "tier"), "free");
    su_resp_free(&a);
    b = wait_tier(&s[1], "dave", "free", 10);
    su_resp_free(&b);
    ck_assert_str_eq(stored(&r, "dave"), "{\"tier\":\"free\"}");
    /* bob deleted through B: gone from Redis, free on A; then gold again */
    b = su_req(&s[1], "DELETE", "/quota/bob", NULL, NULL);
    ck_assert_int_eq(b.status, 200);
    ck_assert_str_eq(su_str(&b, "tier"), "free");
    su_resp_free(&b);
    a = wait_tier(&s[0], "bob", "free", 10);
    su_resp_free(&a);
    ck_assert_str_eq(stored(&r, "bob"), "");
    b = su_req(&s[1], "PUT", "/quota/bob", "{\"tier\": \"gold\"}", NULL);
    ck_assert_int_eq(b.status, 200);
    su_resp_free(&b);
    a = wait_tier(&s[0], "bob", "gold", 10);
    su_resp_free(&a);

    /* both restart (Redis, without persistence, kept running): the quotas come from Redis at
     * start, before the first request; the quota file was never written */
    stop_all(s, 2);
    for (int i = 0; i < 2; i++) {
        char path[400];
        struct stat st;
        snprintf(path, sizeof path, "%s/var/quotas.json", s[i].dir);
        ck_assert_msg(stat(path, &st) != 0, "%s was written", path);
        su_start(&s[i], fleet_config(&r, ", \"prefix\": \"t:\"", quota_rest()), NULL);
    }
    for (int i = 0; i < 2; i++) {
        check_quotas_in_force(&s[i]);
        log = su_read(s[i].log);
        ck_assert_ptr_nonnull(strstr(log, "quotas: in line with Redis, 3 users with a quota"));
        free(log);
    }
    b = post(&s[1], "/acquire", "{\"keys\": {\"user\": \"carol\"}}");
    check_decision(&b, 200, NULL);
    ck_assert_double_eq(json_number_value(limit_at(&b, 0, "limit")), 7);
    su_resp_free(&b);
    stop_all(s, 2);
    rt_redis_stop(&r);
}
END_TEST

/* ---- Redis killed under load, and back --------------------------------------------------------
 */

#define TIMEOUT_MS 100
#define LOAD_CLIENTS 8
#define FROZEN_MS 3000

static const char *modes_rest =
    "\"threads\": 4, \"levels\": ["
    " {\"name\": \"user\", \"on_store_error\": \"open\", \"rules\": [{\"type\": "
    "\"token_bucket\", \"name\": \"users\", \"capacity\": 1000000, \"per_second\": 1000000}]},"
    " {\"name\": \"global\", \"on_store_error\": \"closed\", \"rules\": [{\"type\": "
    "\"token_bucket\", \"name\": \"backends\", \"capacity\": 1000000, \"per_second\": 1000000}]},"
    " {\"name\": \"team\", \"on_store_error\": \"local\", \"rules\": [{\"type\": "
    "\"token_bucket\", \"name\": \"team\", \"capacity\": 10, \"per_second\": 0.000001}]}]";

typedef struct loader {
    const su_server *s;
    int stop; /* atomic */
    double slowest;
    long ok, denied, other, failed;
} loader;

static void *load_run(void *arg)
{
    static const char *const bodies[] = {
        "{\"keys\": {\"user\": \"u1\"}}",
        "{\"keys\": {\"global\": \"g\"}}",
        "{\"keys\": {\"team\": \"busy\"}}",
        "{\"keys\": {\"user\": \"u2\", \"global\": \"g\", \"team\": \"busy\"}}",
    };
    loader *l = arg;
    struct curl_slist *hl[4];
    CURL *h[4];
    for (int i = 0; i < 4; i++)
        h[i] = acquire_handle(l->s, bodies[i], &hl[i]);
    for (unsigned i = 0; !__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE); i++) {
        long status = 0;
        double t0 = mono_s();
        CURLcode rc = curl_easy_perform(h[i % 4]);
        double dt = mono_s() - t0;
        if (dt > l->slowest)
            l->slowest = dt;
        if (rc != CURLE_OK) {
            l->failed++;
            continue;
        }
        curl_easy_getinfo(h[i % 4], CURLINFO_RESPONSE_CODE, &status);
        if (status == 200)
            l->ok++;
        else if (status == 429)
            l->denied++;
        else
            l->other++;
    }
    for (int i = 0; i < 4; i++) {
        curl_slist_free_all(hl[i]);
        curl_easy_cleanup(h[i]);
    }
    return NULL;
}

/* n requests for team t on s: the first `allowed` pass, the next one is denied by "team: team"
 * with the given limit in its status. */
static void team_takes(const su_server *s, const char *t, int allowed, double limit)
{
    char body[128];
    snprintf(body, sizeof body, "{\"keys\": {\"team\": \"%s\"}}", t);
    for (int i = 0; i <= allowed; i++) {
        su_resp r = post(s, "/acquire", body);
        check_decision(&r, i < allowed ? 200 : 429, i < allowed ? NULL : "team: team");
        ck_assert_double_eq(json_number_value(limit_at(&r, 0, "limit")), limit);
        su_resp_free(&r);
    }
}

START_TEST(redis_killed_under_load_and_back)
{
    rt_redis r;
    rt_redis_start(&r);
    su_server s[2];
    char store[64];
    snprintf(store, sizeof store, ", \"timeout_ms\": %d, \"pool\": 4", TIMEOUT_MS);
    start_all(s, 2, fleet_config(&r, store, modes_rest), NULL);
    /* the local mode divides by the instances the heartbeat counted: wait until both count 2 */
    for (int i = 0; i < 2; i++) {
        su_resp h = wait_health(&s[i], "ok", 2, 10);
        ck_assert_str_eq(h.body, "{\"status\":\"ok\",\"store\":\"redis\",\"store_up\":true,"
                                 "\"store_errors\":0,\"peers\":2,\"fleet_size\":2,"
                                 "\"last_error\":null}");
        su_resp_free(&h);
    }

    loader l[LOAD_CLIENTS];
    pthread_t t[LOAD_CLIENTS];
    for (int i = 0; i < LOAD_CLIENTS; i++) {
        l[i] = (loader){.s = &s[i % 2]};
        ck_assert_int_eq(pthread_create(&t[i], NULL, load_run, &l[i]), 0);
    }
    /* frozen first (connections stay open, nothing answers: every call waits its timeout),
     * then thawed, then killed. Frozen for FROZEN_MS: a call that waited for Redis instead of
     * its timeout would take about that long */
    sleep_ms(500);
    rt_redis_pause(&r);
    sleep_ms(FROZEN_MS);
    rt_redis_resume(&r);
    sleep_ms(700);
    rt_redis_kill(&r);
    sleep_ms(1500);
    long ok = 0, denied = 0, other = 0, failed = 0;
    double slowest = 0;
    for (int i = 0; i < LOAD_CLIENTS; i++) {
        __atomic_store_n(&l[i].stop, 1, __ATOMIC_RELEASE);
        pthread_join(t[i], NULL);
        ok += l[i].ok;
        denied += l[i].denied;
        other += l[i].other;
        failed += l[i].failed;
        slowest = l[i].slowest > slowest ? l[i].slowest : slowest;
    }
    fprintf(stderr,
            "redis_killed_under_load_and_back: %ld allowed, %ld denied, slowest answer %.3f s\n",
            ok, denied, slowest);
    /* every request answered, by Redis or by its levels' modes, none slower than the timeout
     * and a generous margin (a correctness bound, not a benchmark): quietly twice the timeout
     * (a call waits out another's for a connection), 1.3 s more on a loaded machine, half the
     * time Redis was frozen */
    ck_assert_int_eq(failed, 0);
    ck_assert_int_eq(other, 0);
    ck_assert_int_gt(ok, 0);
    ck_assert_int_gt(denied, 0);
    ck_assert_msg(slowest <= FROZEN_MS / 2000.0, "an answer took %.3f s", slowest);

    /* Redis is down. /healthz: still 200, degraded */
    for (int i = 0; i < 2; i++) {
        su_resp h = su_req(&s[i], "GET", "/healthz", NULL, NULL);
        ck_assert_int_eq(h.status, 200);
        ck_assert_str_eq(su_str(&h, "status"), "degraded");
        ck_assert_str_eq(su_str(&h, "store"), "redis");
        ck_assert(json_is_false(json_object_get(h.json, "store_up")));
        ck_assert_int_gt(su_num(&h, "store_errors"), 0);
        ck_assert_int_eq(su_num(&h, "fleet_size"), 2);
        ck_assert_ptr_nonnull(strstr(su_str(&h, "last_error"), "redis"));
        su_resp_free(&h);
        ck_assert_int_eq(metric(&s[i], "ratelimit_store_up"), 0);
        ck_assert_int_gt(metric(&s[i], "ratelimit_store_errors_total"), 0);
        ck_assert_int_gt(metric(&s[i], "ratelimit_denied_total{level=\"global\","
                                       "rule=\"store unavailable\"}"),
                         0);
    }
    const char *open_c = "ratelimit_store_fallback_total{level=\"user\",mode=\"open\"}";
    const char *closed_c = "ratelimit_store_fallback_total{level=\"global\",mode=\"closed\"}";
    const char *local_c = "ratelimit_store_fallback_total{level=\"team\",mode=\"local\"}";
    double open0 = metric(&s[0], open_c), closed0 = metric(&s[0], closed_c),
           local0 = metric(&s[0], local_c);
    ck_assert_int_gt(open0, 0);
    ck_assert_int_gt(closed0, 0);
    ck_assert_int_gt(local0, 0);

    /* open: allowed, no status from the store */
    su_resp a = post(&s[0], "/acquire", "{\"keys\": {\"user\": \"u9\"}}");
    check_decision(&a, 200, NULL);
    ck_assert_int_eq(nlimits(&a), 0);
    su_resp_free(&a);
    /* closed: denied naming the store, retry after 1 s */
    a = post(&s[0], "/acquire", "{\"keys\": {\"global\": \"g9\"}}");
    check_decision(&a, 429, "global: store unavailable");
    ck_assert_double_eq(su_num(&a, "retry_after"), 1);
    ck_assert_str_eq(su_header(&a, "Retry-After"), "1");
    su_resp_free(&a);
    /* local: each instance decides alone with 10 / 2 = 5, so the fleet admits the 10 */
    team_takes(&s[0], "t9", 5, 5);
    team_takes(&s[1], "t9", 5, 5);
    /* a reservation lives in Redis: settling one cannot be done now, and says so */
    a = post(&s[1], "/refund", "{\"reservation\": \"r-0123456789abcdef\", \"actual_cost\": 1}");
    check_error(&a, 503, "store: redis: ");
    su_resp_free(&a);
    /* counted: one open, one closed, six local decisions on A */
    ck_assert_double_eq(metric(&s[0], open_c), open0 + 1);
    ck_assert_double_eq(metric(&s[0], closed_c), closed0 + 1);
    ck_assert_double_eq(metric(&s[0], local_c), local0 + 6);

    /* Redis back (empty: nothing persisted): both return to it by themselves */
    rt_redis_restart(&r);
    for (int i = 0; i < 2; i++) {
        su_resp h = wait_health(&s[i], "ok", 0, 15);
        ck_assert(json_is_true(json_object_get(h.json, "store_up")));
        su_resp_free(&h);
        ck_assert_int_eq(metric(&s[i], "ratelimit_store_up"), 1);
    }
    a = post(&s[0], "/acquire", "{\"keys\": {\"global\": \"g9\"}}");
    check_decision(&a, 200, NULL);
    ck_assert_str_eq(json_string_value(limit_at(&a, 0, "rule")), "backends");
    su_resp_free(&a);
    /* t9 in Redis again, shared: A takes all 10 (alone it would have 5), then B is denied */
    team_takes(&s[0], "t9", 10, 10);
    su_resp b = post(&s[1], "/acquire", "{\"keys\": {\"team\": \"t9\"}}");
    check_decision(&b, 429, "team: team");
    su_resp_free(&b);
    ck_assert_double_eq(metric(&s[0], closed_c), closed0 + 1);
    stop_all(s, 2);
    rt_redis_stop(&r);
}
END_TEST

/* ---- started while Redis is down ------------------------------------------------------------- */

START_TEST(starts_without_redis_and_catches_up)
{
    rt_redis r;
    rt_redis_start(&r);
    rt_redis_kill(&r);
    su_server s;
    su_tmpdir(&s);
    su_start(&s, fleet_config(&r, ", \"prefix\": \"t:\", \"timeout_ms\": 100", quota_rest()), NULL);
    su_resp h = wait_health(&s, "degraded", 0, 5);
    ck_assert(json_is_false(json_object_get(h.json, "store_up")));
    su_resp_free(&h);
    /* a change Redis cannot take: 503 naming the store, nothing changed */
    su_resp q = su_req(&s, "PUT", "/quota/bob", "{\"tier\": \"gold\"}", NULL);
    check_error(&q, 503, "store: Redis is unavailable, the quota was not changed");
    su_resp_free(&q);
    q = su_req(&s, "DELETE", "/quota/dave", NULL, NULL);
    check_error(&q, 503, "store: Redis is unavailable");
    su_resp_free(&q);
    q = su_req(&s, "GET", "/quota/bob", NULL, NULL);
    ck_assert_str_eq(su_str(&q, "tier"), "free");
    su_resp_free(&q);
    q = su_req(&s, "GET", "/quota/dave", NULL, NULL);
    ck_assert_str_eq(su_str(&q, "tier"), "gold");
    su_resp_free(&q);

    /* Redis comes up holding a quota written meanwhile by someone else: the instance returns
     * to Redis and its follower brings the quota in */
    rt_redis_restart(&r);
    redisReply *rep = rt_redis_cmd(&r, "HSET t:quotas carol %s", "{\"tier\":\"gold\"}");
    freeReplyObject(rep);
    h = wait_health(&s, "ok", 1, 15);
    su_resp_free(&h);
    /* the follower retries with a backoff of up to 5 s */
    q = wait_tier(&s, "carol", "gold", 10);
    su_resp_free(&q);
    q = su_req(&s, "PUT", "/quota/bob", "{\"tier\": \"gold\"}", NULL);
    ck_assert_int_eq(q.status, 200);
    su_resp_free(&q);
    ck_assert_str_eq(stored(&r, "bob"), "{\"tier\":\"gold\"}");

    /* and stops cleanly while Redis is gone again */
    rt_redis_kill(&r);
    ck_assert_int_eq(su_stop(&s), 0);
    rt_redis_stop(&r);
}
END_TEST

/* ---- --check-config with the Redis store ----------------------------------------------------- */

START_TEST(check_config_redis)
{
    su_server s;
    su_tmpdir(&s);
    static const struct {
        const char *store, *levels, *out;
        int rc;
    } cases[] = {
        {"{\"type\": \"redis\", \"url\": \"redis://127.0.0.1:1/0\"}",
         "{\"name\": \"user\", \"on_store_error\": \"local\", \"shards\": 4, \"rules\": "
         "[{\"type\": \"gcra\", \"per_second\": 5}]}",
         "ok\n", 0},
        {"{\"type\": \"redis\", \"url\": \"redis://127.0.0.1:99999/0\"}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5}]}",
         "store.url: ", 1},
        {"{\"type\": \"redis\"}",
         "{\"name\": \"user\", \"on_store_error\": \"sometimes\", \"rules\": [{\"type\": "
         "\"gcra\", \"per_second\": 5}]}",
         "levels[0].on_store_error: ", 1},
        {"{\"type\": \"redis\", \"sentinel\": {\"nodes\": [\"127.0.0.1:26379\", "
         "\"[::1]:26380\"], \"master\": \"mymaster\", \"password\": \"s\"}, \"password\": \"d\", "
         "\"db\": 2}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5}]}", "ok\n", 0},
        {"{\"type\": \"redis\", \"sentinel\": {\"nodes\": [\"127.0.0.1:26379\", "
         "\"127.0.0.1\"], \"master\": \"mymaster\"}}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5}]}",
         "store.sentinel.nodes[1]: must be ADDRESS:PORT", 1},
        {"{\"type\": \"redis\", \"sentinel\": {\"nodes\": [\"127.0.0.1:26379\"]}}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5}]}",
         "store.sentinel.master: ", 1},
        {"{\"type\": \"redis\", \"sentinel\": {\"nodes\": [], \"master\": \"m\"}}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5}]}",
         "store.sentinel.nodes: must list 1 to 16 sentinels", 1},
        {"{\"type\": \"redis\", \"url\": \"redis://10.0.0.1:6379/0\", \"sentinel\": "
         "{\"nodes\": [\"127.0.0.1:26379\"], \"master\": \"m\"}}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5}]}",
         "store.url: not with store.sentinel", 1},
        {"{\"type\": \"redis\", \"password\": \"x\"}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5}]}",
         "store.password: only with store.sentinel", 1},
        /* Redis Cluster: seeds instead of url or sentinel, database 0 only */
        {"{\"type\": \"redis\", \"cluster\": [\"127.0.0.1:7000\", \"[::1]:7001\"], "
         "\"password\": \"d\"}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5}]}", "ok\n", 0},
        {"{\"type\": \"redis\", \"cluster\": [\"127.0.0.1:7000\", \"127.0.0.1\"]}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5}]}",
         "store.cluster[1]: must be ADDRESS:PORT", 1},
        {"{\"type\": \"redis\", \"url\": \"redis://10.0.0.1:6379/0\", \"cluster\": "
         "[\"127.0.0.1:7000\"]}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5}]}",
         "store.url: not with store.cluster", 1},
        {"{\"type\": \"redis\", \"cluster\": [\"127.0.0.1:7000\"], \"sentinel\": "
         "{\"nodes\": [\"127.0.0.1:26379\"], \"master\": \"m\"}}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5}]}",
         "store.sentinel: not with store.cluster", 1},
        {"{\"type\": \"redis\", \"cluster\": [\"127.0.0.1:7000\"], \"db\": 3}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5}]}",
         "store.db: a Redis Cluster has only database 0", 1},
        {"{\"type\": \"redis\"}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"max_keys\", \"limit\": 2}]}",
         "levels[0].rules[0]: rule type max_keys keeps state that the Redis store cannot hold: "
         "it has no Redis port",
         1},
        /* shadow and charge rules, and a shadow level, run on Redis too */
        {"{\"type\": \"redis\"}",
         "{\"name\": \"user\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 5}, {\"type\": "
         "\"gcra\", \"name\": \"try\", \"per_second\": 1, \"shadow\": true}, {\"type\": "
         "\"gcra\", \"name\": \"pay\", \"per_second\": 1, \"charge\": true}]}, {\"name\": "
         "\"team\", \"shadow\": true, \"rules\": [{\"type\": \"gcra\", \"per_second\": 1}]}",
         "ok\n", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cfg[2048], path[400], *out;
        snprintf(cfg, sizeof cfg, "{\"plugins\": [\"%s\"], \"store\": %s, \"levels\": [%s]}",
                 max_keys_plugin(), cases[i].store, cases[i].levels);
        snprintf(path, sizeof path, "%s", su_write(s.dir, "c.json", cfg));
        const char *argv[] = {su_binary(), "--check-config", path, NULL};
        int rc = su_run(argv, &out);
        ck_assert_msg(rc == cases[i].rc, "case %zu: exit %d: %s", i, rc, out);
        const char *msg = cases[i].rc ? strstr(out, ": ") + 2 : out;
        ck_assert_msg(strncmp(msg, cases[i].out, strlen(cases[i].out)) == 0,
                      "case %zu: %s, want %s", i, out, cases[i].out);
        free(out);
    }
}
END_TEST

/* ---- a plug-in's rule type with state, on Redis -------------------------------------------- */

/* tests/plugins/rule_leaky_bucket.c carries its Redis port: two daemons share one bucket of it.
 * capacity 4, 2/s: 3 through A and 1 through B at t = 0 fill it; one more waits 0.5 s (one unit
 * leaks); at t = 1 it holds 2, so 3 through B waits 0.5 s and 2 through A fit. */
START_TEST(a_plugin_type_runs_in_the_fleet)
{
    rt_redis r;
    rt_redis_start(&r);
    su_server s[2];
    char rest[1024], rel[400], path[400];
    const char *b = getenv("RL_BUILD");
    snprintf(rel, sizeof rel, "%s/plugins/librule_leaky_bucket.so", b && *b ? b : "build");
    ck_assert_msg(realpath(rel, path) != NULL, "no %s", rel);
    snprintf(rest, sizeof rest,
             "\"plugins\": [\"%s\"], \"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
             "\"leaky_bucket\", \"capacity\": 4, \"per_second\": 2}]}]",
             path);
    start_all(s, 2, fleet_config(&r, ", \"prefix\": \"lk:\"", rest), manual);
    static const struct {
        int on, status;
        const char *cost, *now;
        double remaining, retry_after;
    } steps[] = {
        {0, 200, "3", "0", 1, 0}, {1, 200, "1", "0", 0, 0},   {0, 429, "1", "0", 0, 0.5},
        {1, 429, "3", "1", 2, 0.5}, {0, 200, "2", "1", 0, 0},
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"keys\": {\"user\": \"u\"}, \"cost\": %s, \"now\": %s}",
                 steps[i].cost, steps[i].now);
        su_resp a = post(&s[steps[i].on], "/acquire", body);
        check_decision(&a, steps[i].status,
                       steps[i].status == 200 ? NULL : "user: leaky_bucket(4, 2/s)");
        ck_assert_msg(json_number_value(limit_at(&a, 0, "remaining")) == steps[i].remaining,
                      "step %zu: %.2000s", i, a.body);
        if (steps[i].status != 200)
            ck_assert_msg(su_num(&a, "retry_after") == steps[i].retry_after, "step %zu: %.2000s",
                          i, a.body);
        su_resp_free(&a);
    }
    stop_all(s, 2);
    rt_redis_stop(&r);
}
END_TEST

/* Waits until every thread of pid is stopped (a SIGSTOP takes effect after kill returns). */
static void wait_stopped(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    for (int tries = 0; tries < 2000; tries++, sleep_ms(1)) {
        DIR *d = opendir(path);
        ck_assert_ptr_nonnull(d);
        int running = 0;
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            char stat[400], buf[512];
            if (e->d_name[0] == '.')
                continue;
            snprintf(stat, sizeof stat, "%s/%s/stat", path, e->d_name);
            FILE *f = fopen(stat, "r");
            size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
            if (f)
                fclose(f);
            buf[n] = '\0';
            const char *paren = strrchr(buf, ')');
            running |= paren && paren[1] == ' ' && paren[2] != 'T' && paren[2] != 't';
        }
        closedir(d);
        if (!running)
            return;
    }
    ck_abort_msg("ratelimitd did not stop");
}

/* Waits until the n connections' bytes sent are all acknowledged by the daemon's kernel, that
 * is in its receive queues (on a loaded machine loopback's delivery may wait for ksoftirqd). */
static void wait_delivered(const int *fd, int n)
{
    for (int tries = 0; tries < 10000; tries++, sleep_ms(1)) {
        int left = 0;
        for (int i = 0; i < n; i++) {
            int q = 0;
            ck_assert_int_eq(ioctl(fd[i], SIOCOUTQ, &q), 0);
            left += q;
        }
        if (!left)
            return;
    }
    ck_abort_msg("requests not delivered to the stopped daemon within 10 s");
}

/* A connection to the daemon. */
static int raw_connect(const su_server *s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Reads one answer from fd (its head and a body of Content-Length bytes); returns its status. */
static int raw_answer(int fd)
{
    char buf[8192];
    size_t len = 0;
    for (;;) {
        ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        ck_assert_int_gt(n, 0);
        len += (size_t)n;
        buf[len] = '\0';
        const char *end = strstr(buf, "\r\n\r\n"), *cl = strstr(buf, "Content-Length: ");
        if (end && cl && buf + len >= end + 4 + strtoul(cl + 16, NULL, 10))
            break;
    }
    ck_assert_int_eq(strncmp(buf, "HTTP/1.1 ", 9), 0);
    return atoi(buf + 9);
}

/* Eight POST /acquire on eight connections reach a worker in one turn of its loop (the
 * daemon is stopped while they are sent, until its kernel holds them all): it decides them in
 * one batch, whose eight scripts go to Redis in one write, so calls - writes grows by at least
 * 7 (a call of the daemon's own, such as a heartbeat, adds a write per call or joins the
 * batch's). A bucket of 5 lets five of them through and denies three. */
START_TEST(acquires_of_one_turn_share_one_redis_write)
{
    rt_redis r;
    rt_redis_start(&r);
    su_server s;
    su_tmpdir(&s);
    su_start(&s,
             fleet_config(&r, "",
                          "\"threads\": 1, \"levels\": [{\"name\": \"user\", \"rules\": "
                          "[{\"type\": \"token_bucket\", \"capacity\": 5, "
                          "\"per_second\": 0.001}]}]"),
             NULL);
    su_resp w = su_req(&s, "POST", "/acquire", "{\"keys\": {\"user\": \"warm\"}}", NULL);
    ck_assert_int_eq(w.status, 200); /* the script loaded */
    su_resp_free(&w);
    static const char req[] = "POST /acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 23\r\n\r\n"
                              "{\"keys\": {\"user\": \"p\"}}";
    int fd[8];
    static const char health[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    for (int i = 0; i < 8; i++) { /* accepted and watched by the worker: it answered on each */
        fd[i] = raw_connect(&s);
        ck_assert_int_eq(send(fd[i], health, sizeof health - 1, 0), (ssize_t)sizeof health - 1);
        ck_assert_int_eq(raw_answer(fd[i]), 200);
    }
    double c0 = metric(&s, "ratelimit_redis_calls_total");
    double w0 = metric(&s, "ratelimit_redis_writes_total");
    kill(s.pid, SIGSTOP);
    wait_stopped(s.pid);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(send(fd[i], req, sizeof req - 1, 0), (ssize_t)sizeof req - 1);
    wait_delivered(fd, 8);
    kill(s.pid, SIGCONT);
    int ok = 0, denied = 0;
    for (int i = 0; i < 8; i++) {
        int st = raw_answer(fd[i]);
        ok += st == 200;
        denied += st == 429;
        close(fd[i]);
    }
    double c1 = metric(&s, "ratelimit_redis_calls_total");
    double w1 = metric(&s, "ratelimit_redis_writes_total");
    ck_assert_int_eq(ok, 5);
    ck_assert_int_eq(denied, 3);
    ck_assert_msg((c1 - c0) - (w1 - w0) >= 7, "calls %g, writes %g", c1 - c0, w1 - w0);
    ck_assert_int_eq(su_stop(&s), 0);
    rt_redis_stop(&r);
}
END_TEST

static Suite *fleet_suite(void)
{
    Suite *s = suite_create("fleet");
    TCase *tc = tcase_create("redis");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, two_instances_share_one_bucket);
    tcase_add_test(tc, acquires_of_one_turn_share_one_redis_write);
    tcase_add_test(tc, reservations_settle_on_another_instance);
    tcase_add_test(tc, usage_read_and_reset_through_another_instance);
    tcase_add_test(tc, quotas_apply_to_the_fleet_and_outlive_it);
    tcase_add_test(tc, redis_killed_under_load_and_back);
    tcase_add_test(tc, starts_without_redis_and_catches_up);
    tcase_add_test(tc, check_config_redis);
    suite_add_tcase(s, tc);
    tc = tcase_create("plugins");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, a_plugin_type_runs_in_the_fleet);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(fleet_suite());
}
