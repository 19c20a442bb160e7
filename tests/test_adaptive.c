/*
 * test_adaptive.c - the adaptive_concurrency rule type on the manual clock, against a
 * simulated backend, through the memory store and the Redis store.
 *
 * The backend: a call that starts with n calls in flight (itself included) takes 100 ms while
 * n <= cap, and 100 ms * (1 + n - cap) beyond; the client gives up at 250 ms (a timeout,
 * reported at 250 ms), so past cap + 1 in flight every call times out; past fail (60, or cap +
 * 20) calls fail at once (an error after 10 ms). Clients always want more calls than the
 * limit lets through: each 10 ms step they acquire until denied. A window is 1 s (at least 10
 * samples), so one simulated second is one window.
 *
 * Worked out by hand for cap 40 (the limits the tests assert):
 *   aimd      +1 per window up to 42 in flight, where calls time out: 42 * 0.9 = 37.8; back to
 *             42 in 5 windows: it stays in [37, 43]. From 10: 10 -> 42 in 32 windows. From
 *             200: windows with errors or timeouts, * 0.9 each: below 42 after 16.
 *   gradient  with no queueing g = 1: limit + 0.2 * 4 = +0.8 per window, 10 -> 41 in 39
 *             windows; at 41 in flight calls take 200 ms, twice the baseline of 100 ms:
 *             g = 1.5 * 100 / 200 = 0.75, limit = 0.95 * limit + 0.8 (about 39.8); at 42 a
 *             timeout gives g = 0.5: 0.9 * limit + 0.8. From 200: 0.9 * limit + 0.8 per window
 *             below 42 after 17.
 * Both are asserted within 40 +- 10% ([36, 44]) from window 45 (from 10) and window 25 (from
 * 200) to the end of the run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ratelimit_store.h"
#include "redis/store.h"
#include "redis_server.h"
#include "srvutil.h"
#include "testutil.h"

#define STEP S(0.01)
#define BASE S(0.1)
#define DEADLINE S(0.25)
#define MAX_CALLS 4096

typedef struct call {
    char id[RL_RESERVATION_ID];
    rl_ns end;
    rl_outcome o;
} call;

typedef struct sim {
    rl_limiter *lim;
    int cap, fail;
    int errors; /* 1: every call fails (an error burst) */
    rl_ns now;
    size_t n;
    call c[MAX_CALLS];
    rl_fp lo, hi; /* the least and most limit seen */
} sim;

static const rl_descriptor backend = {"backend", 7, "llm", 3};

static void sim_init(sim *s, rl_limiter *lim)
{
    memset(s, 0, sizeof *s);
    s->lim = lim;
    s->cap = 40;
    s->fail = 60;
    s->lo = RL_FP_MAX;
}

/* The key's current limit (whole slots), from a dry run. */
static rl_fp sim_limit(sim *s)
{
    rl_request rq = {
        .desc = &backend, .ndesc = 1, .cost = RL_FP_ONE, .flags = RL_DRY_RUN, .now = s->now};
    rl_decision d;
    rl_err err;
    ck_assert_int_eq(rl_acquire(s->lim, &rq, &d, &err), RL_OK);
    rl_fp l = tu_status(&d, 0)->limit;
    rl_decision_done(&d);
    return l;
}

/* One 10 ms step: calls that end are released with their outcome, then clients acquire until
 * denied. */
static void sim_step(sim *s)
{
    rl_err err;
    for (size_t i = 0; i < s->n;) {
        if (s->c[i].end <= s->now) {
            ck_assert_msg(rl_release_outcome(s->lim, s->c[i].id, s->now, &s->c[i].o, &err) == RL_OK,
                          "%s", err.msg);
            s->c[i] = s->c[--s->n]; /* the last one takes its place */
            continue;
        }
        i++;
    }
    for (;;) {
        rl_request rq = {.desc = &backend, .ndesc = 1, .cost = RL_FP_ONE, .now = s->now};
        rl_decision d;
        ck_assert_msg(rl_acquire(s->lim, &rq, &d, &err) == RL_OK, "%s", err.msg);
        int ok = d.allowed;
        if (ok) {
            ck_assert_uint_lt(s->n, MAX_CALLS);
            call *c = &s->c[s->n++];
            memcpy(c->id, d.reservation, sizeof c->id);
            int n = (int)s->n;
            if (s->errors || n > s->fail) {
                c->o = (rl_outcome){RL_OUTCOME_ERROR, S(0.01)};
            } else {
                rl_ns lat = BASE * (1 + (n > s->cap ? n - s->cap : 0));
                c->o = lat > DEADLINE ? (rl_outcome){RL_OUTCOME_TIMEOUT, DEADLINE}
                                      : (rl_outcome){RL_OUTCOME_OK, lat};
            }
            c->end = s->now + c->o.latency;
        }
        rl_decision_done(&d);
        if (!ok)
            break;
    }
    s->now += STEP;
}

/* Runs whole seconds (windows); returns the limit at the end. lo/hi track the whole run,
 * from_window on (seconds from now) the band [band_lo, band_hi] must hold (0 to not check). */
static rl_fp sim_run(sim *s, int seconds, int from_window, double band_lo, double band_hi)
{
    rl_ns start = s->now;
    while (s->now < start + S(1) * seconds) {
        sim_step(s);
        rl_fp l = sim_limit(s);
        s->lo = l < s->lo ? l : s->lo;
        s->hi = l > s->hi ? l : s->hi;
        if (getenv("ADAPTIVE_TRACE") && (s->now - start) % S(1) == 0)
            fprintf(stderr, "%.0f:%.0f ", rl_ns_to_seconds(s->now - start), rl_fp_to_double(l));
        if (band_hi > 0 && s->now >= start + S(1) * from_window)
            ck_assert_msg(l >= FP(band_lo) && l <= FP(band_hi),
                          "limit %.0f at %.2f s, outside [%g, %g] from window %d",
                          rl_fp_to_double(l), rl_ns_to_seconds(s->now - start), band_lo, band_hi,
                          from_window);
    }
    return sim_limit(s);
}

static char *config(const char *algo, int initial, int min, int max)
{
    static char buf[512];
    snprintf(buf, sizeof buf,
             "{\"levels\": [{\"name\": \"backend\", \"rules\": [{\"type\": "
             "\"adaptive_concurrency\", \"algorithm\": \"%s\", \"initial_limit\": %d, "
             "\"min_limit\": %d, \"max_limit\": %d, \"timeout\": 5}]}]}",
             algo, initial, min, max);
    return buf;
}

static const char *const algos[] = {"aimd", "gradient"};
static rl_registry *registries[8];
static int nregistries;

/* ---- the worked example of adaptive_concurrency.c ------------------------------------------ */

START_TEST(worked_example)
{
    rl_limiter *lim =
        tu_limiter("{\"levels\": [{\"name\": \"backend\", \"rules\": [{\"type\": "
                   "\"adaptive_concurrency\", \"algorithm\": \"aimd\", \"initial_limit\": 10, "
                   "\"window_size\": 2}]}]}");
    sim s;
    sim_init(&s, lim);
    rl_request rq = {.desc = &backend, .ndesc = 1, .cost = RL_FP_ONE, .now = 0};
    rl_decision d;
    rl_err err;
    char ids[10][RL_RESERVATION_ID];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(rl_acquire(lim, &rq, &d, &err), RL_OK);
        ck_assert(d.allowed);
        memcpy(ids[i], d.reservation, RL_RESERVATION_ID);
        rl_decision_done(&d);
    }
    rl_outcome ok = {RL_OUTCOME_OK, S(0.5)}, bad = {RL_OUTCOME_ERROR, -1};
    ck_assert_int_eq(rl_release_outcome(lim, ids[0], S(0.5), &ok, &err), RL_OK);
    ck_assert_int_eq(rl_release_outcome(lim, ids[1], S(1), &ok, &err), RL_OK);
    s.now = S(1);
    ck_assert_int_eq(sim_limit(&s), FP(10)); /* 2 in flight at most: 2 * 2 < 10 */
    rq.now = S(1);
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(rl_acquire(lim, &rq, &d, &err), RL_OK);
        ck_assert(d.allowed);
        memcpy(ids[i], d.reservation, RL_RESERVATION_ID);
        rl_decision_done(&d);
    }
    ck_assert_int_eq(rl_acquire(lim, &rq, &d, &err), RL_OK);
    ck_assert(!d.allowed);
    ck_assert_int_eq(d.retry_after, S(1));
    rl_decision_done(&d);
    ck_assert_int_eq(rl_release_outcome(lim, ids[0], S(1), &bad, &err), RL_OK);
    ck_assert_int_eq(rl_release_outcome(lim, ids[1], S(2), &ok, &err), RL_OK);
    s.now = S(2);
    ck_assert_int_eq(sim_limit(&s), FP(9)); /* 10 * 0.9 */
    rq.now = S(2);                          /* 8 held: one more fits, then none */
    ck_assert_int_eq(rl_acquire(lim, &rq, &d, &err), RL_OK);
    ck_assert(d.allowed);
    rl_decision_done(&d);
    ck_assert_int_eq(rl_acquire(lim, &rq, &d, &err), RL_OK);
    ck_assert(!d.allowed);
    rl_decision_done(&d);
    tu_free(lim);
}
END_TEST

/* A release without an outcome changes only the slot. */
START_TEST(release_without_outcome)
{
    rl_limiter *lim =
        tu_limiter("{\"levels\": [{\"name\": \"backend\", \"rules\": [{\"type\": "
                   "\"adaptive_concurrency\", \"algorithm\": \"aimd\", \"initial_limit\": 4, "
                   "\"window\": 0.001, \"window_size\": 1}]}]}");
    sim s;
    sim_init(&s, lim);
    rl_err err;
    for (int k = 0; k < 20; k++) {
        rl_request rq = {.desc = &backend, .ndesc = 1, .cost = RL_FP_ONE, .now = S(k)};
        rl_decision d;
        ck_assert_int_eq(rl_acquire(lim, &rq, &d, &err), RL_OK);
        ck_assert(d.allowed);
        ck_assert_int_eq(rl_release(lim, d.reservation, S(k) + S(0.5), &err), RL_OK);
        rl_decision_done(&d);
    }
    s.now = S(20);
    ck_assert_int_eq(sim_limit(&s), FP(4));
    /* an outcome out of range is refused, naming the field */
    rl_outcome o = {(rl_outcome_kind)9, -1};
    ck_assert_int_eq(rl_release_outcome(lim, "r-0000000000000000", S(20), &o, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "outcome: must be \"ok\", \"error\", \"timeout\" or \"dropped\"");
    tu_free(lim);
}
END_TEST

/* ---- convergence on the simulated backend ------------------------------------------------- */

START_TEST(converges_from_10)
{
    rl_limiter *lim = tu_limiter(config(algos[_i], 10, 1, 1000));
    sim *s = malloc(sizeof *s);
    sim_init(s, lim);
    sim_run(s, 90, 45, 36, 44);
    ck_assert_int_ge(s->lo, FP(1));
    ck_assert_int_le(s->hi, FP(44));
    free(s);
    tu_free(lim);
}
END_TEST

START_TEST(converges_from_200)
{
    rl_limiter *lim = tu_limiter(config(algos[_i], 200, 1, 1000));
    sim *s = malloc(sizeof *s);
    sim_init(s, lim);
    sim_run(s, 70, 25, 36, 44);
    free(s);
    tu_free(lim);
}
END_TEST

/* An error burst of 3 windows drops the limit: the errors of calls taken before a cut do not
 * count, so the burst cuts two or three times (aimd 38 * 0.9^3 = 27.7; gradient from 41,
 * 0.9 * limit + 0.8 twice: 34); it is back within 40 +- 10% 20 windows later. */
START_TEST(error_burst_recovers)
{
    rl_limiter *lim = tu_limiter(config(algos[_i], 10, 1, 1000));
    sim *s = malloc(sizeof *s);
    sim_init(s, lim);
    sim_run(s, 60, 45, 36, 44);
    s->errors = 1;
    s->lo = RL_FP_MAX;
    sim_run(s, 3, 0, 0, 0);
    s->errors = 0;
    ck_assert_int_le(s->lo, FP(34));
    sim_run(s, 60, 20, 36, 44);
    free(s);
    tu_free(lim);
}
END_TEST

/* Capacity rising to 80 (failing past 100): aimd +1 per window, 40 windows; gradient +0.8,
 * 50 windows; both within 80 +- 10% after 70. */
START_TEST(follows_capacity)
{
    rl_limiter *lim = tu_limiter(config(algos[_i], 10, 1, 1000));
    sim *s = malloc(sizeof *s);
    sim_init(s, lim);
    sim_run(s, 60, 45, 36, 44);
    s->cap = 80;
    s->fail = 100;
    sim_run(s, 100, 70, 72, 88);
    free(s);
    tu_free(lim);
}
END_TEST

/* The limit never leaves [min, max]: max 30 below the capacity, min 35 above the limit an
 * error burst would leave. */
START_TEST(stays_within_bounds)
{
    rl_limiter *lim = tu_limiter(config(algos[_i], 10, 5, 30));
    sim *s = malloc(sizeof *s);
    sim_init(s, lim);
    sim_run(s, 60, 40, 30, 30);
    ck_assert_int_ge(s->lo, FP(5));
    ck_assert_int_le(s->hi, FP(30));
    tu_free(lim);

    lim = tu_limiter(config(algos[_i], 40, 35, 1000));
    sim_init(s, lim);
    s->errors = 1;
    sim_run(s, 20, 0, 0, 0);
    ck_assert_int_eq(s->lo, FP(35));
    free(s);
    tu_free(lim);
}
END_TEST

/* Each key learns its own limit. */
START_TEST(one_limit_per_key)
{
    rl_limiter *lim = tu_limiter(config("aimd", 10, 1, 1000));
    sim *s = malloc(sizeof *s);
    sim_init(s, lim);
    sim_run(s, 20, 0, 0, 0);
    ck_assert_int_ge(sim_limit(s), FP(25));
    rl_descriptor other = {"backend", 7, "other", 5};
    rl_request rq = {
        .desc = &other, .ndesc = 1, .cost = RL_FP_ONE, .flags = RL_DRY_RUN, .now = s->now};
    rl_decision d;
    rl_err err;
    ck_assert_int_eq(rl_acquire(lim, &rq, &d, &err), RL_OK);
    ck_assert_int_eq(tu_status(&d, 0)->limit, FP(10));
    rl_decision_done(&d);
    free(s);
    tu_free(lim);
}
END_TEST

/* A reserved share is a fraction of the moving limit: 0.2 of 10 keeps 2 slots from priority
 * 0; once the limit is 9, 0.2 of 9 = 1.8 keeps 2 (7 + 1 + 1.8 > 9). */
START_TEST(reserved_share_moves)
{
    rl_limiter *lim =
        tu_limiter("{\"levels\": [{\"name\": \"backend\", \"rules\": [{\"type\": "
                   "\"adaptive_concurrency\", \"algorithm\": \"aimd\", \"initial_limit\": 10, "
                   "\"window\": 0.001, \"window_size\": 1, \"reserved\": {\"fraction\": 0.2, "
                   "\"min_priority\": 1}}]}]}");
    rl_err err;
    rl_decision d;
    char ids[10][RL_RESERVATION_ID];
    int n = 0;
    for (;; n++) {
        rl_request rq = {.desc = &backend, .ndesc = 1, .cost = RL_FP_ONE, .now = S(1)};
        ck_assert_int_eq(rl_acquire(lim, &rq, &d, &err), RL_OK);
        int ok = d.allowed;
        if (ok)
            memcpy(ids[n], d.reservation, RL_RESERVATION_ID);
        rl_decision_done(&d);
        if (!ok)
            break;
    }
    ck_assert_int_eq(n, 8);
    rl_request hi = {.desc = &backend, .ndesc = 1, .cost = RL_FP_ONE, .priority = 1, .now = S(1)};
    ck_assert_int_eq(rl_acquire(lim, &hi, &d, &err), RL_OK);
    ck_assert(d.allowed);
    memcpy(ids[n++], d.reservation, RL_RESERVATION_ID);
    rl_decision_done(&d);
    /* an error closes a window (window_size 1): limit 9, 9 held less the one released */
    rl_outcome bad = {RL_OUTCOME_ERROR, S(0.1)};
    ck_assert_int_eq(rl_release_outcome(lim, ids[--n], S(2), &bad, &err), RL_OK);
    ck_assert_int_eq(rl_release(lim, ids[--n], S(2), &err), RL_OK);
    /* 7 held: priority 0 needs 7 + 1 + 1.8 <= 9: no */
    rl_request lo = {.desc = &backend, .ndesc = 1, .cost = RL_FP_ONE, .now = S(2)};
    ck_assert_int_eq(rl_acquire(lim, &lo, &d, &err), RL_OK);
    ck_assert(!d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->limit, FP(9));
    rl_decision_done(&d);
    hi.now = S(2);
    ck_assert_int_eq(rl_acquire(lim, &hi, &d, &err), RL_OK);
    ck_assert(d.allowed);
    rl_decision_done(&d);
    tu_free(lim);
}
END_TEST

/* A reservation that expires is a timeout: aimd backs off. */
START_TEST(expiry_is_a_timeout)
{
    rl_limiter *lim = tu_limiter(
        "{\"reservation_ttl\": 10, \"levels\": [{\"name\": \"backend\", \"rules\": [{\"type\": "
        "\"adaptive_concurrency\", \"algorithm\": \"aimd\", \"initial_limit\": 10, "
        "\"window\": 0.001, \"window_size\": 1}]}]}");
    rl_err err;
    rl_decision d;
    rl_request rq = {.desc = &backend, .ndesc = 1, .cost = RL_FP_ONE, .now = S(1)};
    ck_assert_int_eq(rl_acquire(lim, &rq, &d, &err), RL_OK);
    ck_assert(d.allowed);
    rl_decision_done(&d);
    rl_limiter_tick(lim, S(12));
    sim s;
    sim_init(&s, lim);
    s.now = S(12);
    ck_assert_int_eq(sim_limit(&s), FP(9));
    tu_free(lim);
}
END_TEST

/* A snapshot keeps the learnt limit across a restart. */
START_TEST(snapshot_keeps_limit)
{
    const char *cfg = config("aimd", 10, 1, 1000);
    char path[] = "/tmp/rl-adaptive-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    rl_limiter *lim = tu_limiter(cfg);
    sim *s = malloc(sizeof *s);
    sim_init(s, lim);
    sim_run(s, 20, 0, 0, 0);
    rl_fp learnt = sim_limit(s);
    ck_assert_int_gt(learnt, FP(20));
    rl_err err;
    ck_assert_int_eq(rl_limiter_save(lim, path, &err), RL_OK);
    rl_limiter *again = tu_limiter(cfg);
    ck_assert_int_eq(rl_limiter_load(again, path, s->now, NULL, &err), RL_OK);
    s->lim = again;
    ck_assert_int_eq(sim_limit(s), learnt);
    /* a rule whose parameters changed starts again from its initial_limit (snapshots keep a
     * state only for the same rule) */
    rl_limiter *other = tu_limiter(config("aimd", 10, 1, 15));
    ck_assert_int_eq(rl_limiter_load(other, path, s->now, NULL, &err), RL_OK);
    s->lim = other;
    ck_assert_int_eq(sim_limit(s), FP(10));
    tu_free(other);
    unlink(path);
    free(s);
    tu_free(again);
    tu_free(lim);
}
END_TEST

START_TEST(config_errors)
{
    ck_assert_str_eq(tu_config_error("{\"levels\": [{\"name\": \"b\", \"rules\": [{\"type\": "
                                     "\"adaptive_concurrency\", \"algorithm\": \"vegas\"}]}]}"),
                     "levels[0].rules[0].algorithm: must be \"aimd\" or \"gradient\"");
    ck_assert_str_eq(tu_config_error("{\"levels\": [{\"name\": \"b\", \"rules\": [{\"type\": "
                                     "\"adaptive_concurrency\", \"algorithm\": \"aimd\", "
                                     "\"unit\": \"cost\"}]}]}"),
                     "levels[0].rules[0].unit: adaptive_concurrency counts requests only");
    ck_assert_str_eq(tu_config_error("{\"levels\": [{\"name\": \"b\", \"rules\": [{\"type\": "
                                     "\"adaptive_concurrency\", \"algorithm\": \"gradient\", "
                                     "\"initial_limit\": 5, \"min_limit\": 10}]}]}"),
                     "levels[0].rules[0].initial_limit: must be from min_limit to max_limit");
}
END_TEST

/* ---- the same trace through the Redis store ---------------------------------------------- */

static rt_redis srv;
static void srv_up(void)
{
    rt_redis_start(&srv);
}
static void srv_down(void)
{
    rt_redis_stop(&srv);
}

/* A limiter over a Redis store on the manual clock, its keys under prefix. */
static rl_limiter *redis_limiter(const char *json, const char *prefix)
{
    rld_settings set;
    rl_config *cfg;
    rl_err err = {{0}};
    rl_registry *reg = rl_registry_new();
    ck_assert_int_eq(rld_config_parse(json, strlen(json), reg, &set, &cfg, &err), RL_OK);
    rld_settings_clear(&set);
    rld_redis_options o = {.url = srv.url,
                           .prefix = prefix,
                           .timeout_ms = 10000,
                           .pool = 2,
                           .manual_clock = 1,
                           .ttl_floor_ms = 3600 * 1000};
    rl_store *st;
    rl_limiter *lim;
    ck_assert_int_eq(rld_redis_store_new(&o, &st, &err), RL_OK);
    ck_assert_msg(rl_limiter_new(cfg, st, &lim, &err) == RL_OK, "%s", err.msg);
    registries[nregistries++] = reg;
    return lim;
}

/* The limit at every step of seconds of the simulation, into out (100 per second). */
static void trace(rl_limiter *lim, int seconds, int burst_at, rl_fp *out)
{
    sim *s = malloc(sizeof *s);
    sim_init(s, lim);
    s->now = (rl_ns)1764000000 * RL_NS_PER_SEC; /* a date: times of a new key (0) are far */
    for (int k = 0; k < seconds * 100; k++) {
        s->errors = burst_at && k >= burst_at * 100 && k < (burst_at + 3) * 100;
        sim_step(s);
        out[k] = sim_limit(s);
    }
    free(s);
}

/* The simulation from 200 (errors, timeouts, cuts, the gradient's baseline) and an error burst,
 * through both stores: the same limit at every step. */
START_TEST(redis_same_limits)
{
    enum { SECONDS = 42 };
    static rl_fp mem[SECONDS * 100], red[SECONDS * 100];
    const char *cfg = config(algos[_i], 200, 1, 1000);
    rl_limiter *a = tu_limiter(cfg);
    char prefix[32];
    snprintf(prefix, sizeof prefix, "ac%d:", _i);
    rl_limiter *b = redis_limiter(cfg, prefix);
    trace(a, SECONDS, 20, mem);
    trace(b, SECONDS, 20, red);
    for (int k = 0; k < SECONDS * 100; k++)
        ck_assert_msg(mem[k] == red[k], "step %d: memory %lld, redis %lld", k, (long long)mem[k],
                      (long long)red[k]);
    ck_assert_int_ge(mem[SECONDS * 100 - 1], FP(36)); /* converged and recovered */
    tu_free(a);
    rl_limiter_free(b);
}
END_TEST

/* ---- POST /release and /refund with latency_ms and outcome ------------------------------- */

static const char *const manual[] = {"--manual-clock", NULL};

static char *http_acquire(su_server *s, double now, int want_status, const char *policy)
{
    char body[128];
    snprintf(body, sizeof body, "{\"keys\": {\"backend\": \"llm\"}, \"now\": %g}", now);
    su_resp r = su_req(s, "POST", "/acquire", body, NULL);
    ck_assert_msg(r.status == want_status, "status %ld: %s", r.status, r.body);
    if (policy)
        ck_assert_str_eq(su_header(&r, "RateLimit-Policy"), policy);
    char *id = want_status == 200 ? strdup(su_str(&r, "reservation")) : NULL;
    su_resp_free(&r);
    return id;
}

START_TEST(http_release_outcome)
{
    su_server s;
    char body[256];
    su_tmpdir(&s);
    su_start(&s,
             "{\"levels\": [{\"name\": \"backend\", \"rules\": [{\"type\": "
             "\"adaptive_concurrency\", \"name\": \"llm\", \"algorithm\": \"aimd\", "
             "\"initial_limit\": 4, \"window\": 0.001, \"window_size\": 1}]}]}",
             manual);
    char *a = http_acquire(&s, 0, 200, "\"backend.llm\";q=4;qu=\"concurrent-requests\"");
    char *b = http_acquire(&s, 0, 200, NULL);
    /* a bad outcome or latency is a 400 naming the field, and releases nothing */
    static const struct {
        const char *fields, *error;
    } bad[] = {
        {"\"outcome\": \"failed\"",
         "outcome: must be \"ok\", \"error\", \"timeout\" or \"dropped\""},
        {"\"outcome\": 1", "outcome: must be \"ok\", \"error\", \"timeout\" or \"dropped\""},
        {"\"latency_ms\": -1", "latency_ms: must be a number from 0 to 3600000"},
        {"\"latency_ms\": \"12\"", "latency_ms: must be a number from 0 to 3600000"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int path = 0; path < 2; path++) {
            snprintf(body, sizeof body, "{\"reservation\": \"%s\", %s%s}", a, bad[i].fields,
                     path ? ", \"actual_cost\": 1" : "");
            su_resp r = su_req(&s, "POST", path ? "/refund" : "/release", body, NULL);
            ck_assert_msg(r.status == 400, "status %ld: %s", r.status, r.body);
            ck_assert_str_eq(su_error(&r), bad[i].error);
            su_resp_free(&r);
        }
    }
    /* released ok, the window closes: 2 in flight of 4 is busy, 4 + 1 */
    snprintf(body, sizeof body,
             "{\"reservation\": \"%s\", \"latency_ms\": 120, \"outcome\": \"ok\", "
             "\"now\": 1}",
             a);
    su_resp r = su_req(&s, "POST", "/release", body, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"released\":true}");
    su_resp_free(&r);
    free(http_acquire(&s, 1, 200, "\"backend.llm\";q=5;qu=\"concurrent-requests\""));
    /* a refund with an error: 5 * 0.9 = 4.5, 4 whole slots; the slot stays held */
    snprintf(body, sizeof body,
             "{\"reservation\": \"%s\", \"actual_cost\": 1, \"outcome\": \"error\", "
             "\"now\": 2}",
             b);
    r = su_req(&s, "POST", "/refund", body, NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    free(http_acquire(&s, 2, 200, "\"backend.llm\";q=4;qu=\"concurrent-requests\""));
    free(http_acquire(&s, 2, 200, NULL)); /* 4 held */
    http_acquire(&s, 2, 429, "\"backend.llm\";q=4;qu=\"concurrent-requests\"");
    /* a release without outcome changes only the slot */
    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"now\": 3}", b);
    r = su_req(&s, "POST", "/release", body, NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    free(http_acquire(&s, 3, 200, "\"backend.llm\";q=4;qu=\"concurrent-requests\""));
    /* /metrics: the limit and the slots in flight as that decision left them */
    r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body,
                                 "# TYPE ratelimit_adaptive_limit gauge\n"
                                 "ratelimit_adaptive_limit{level=\"backend\",rule=\"llm\"} 4\n"));
    ck_assert_ptr_nonnull(
        strstr(r.body, "ratelimit_adaptive_in_flight{level=\"backend\",rule=\"llm\"} 4\n"));
    su_resp_free(&r);
    free(a);
    free(b);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("adaptive");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, worked_example);
    tcase_add_test(tc, release_without_outcome);
    tcase_add_loop_test(tc, converges_from_10, 0, 2);
    tcase_add_loop_test(tc, converges_from_200, 0, 2);
    tcase_add_loop_test(tc, error_burst_recovers, 0, 2);
    tcase_add_loop_test(tc, follows_capacity, 0, 2);
    tcase_add_loop_test(tc, stays_within_bounds, 0, 2);
    tcase_add_test(tc, one_limit_per_key);
    tcase_add_test(tc, reserved_share_moves);
    tcase_add_test(tc, expiry_is_a_timeout);
    tcase_add_test(tc, snapshot_keeps_limit);
    tcase_add_test(tc, config_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("redis");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, srv_up, srv_down); /* one server per test, in its process */
    tcase_add_loop_test(tc, redis_same_limits, 0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("http");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, http_release_outcome);
    suite_add_tcase(s, tc);
    return su_main(s) ? EXIT_FAILURE : EXIT_SUCCESS;
}
