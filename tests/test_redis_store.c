/*
 * test_redis_store.c - the Redis store against the in-memory store and against itself through
 * several instances: a conformance table, random traces replayed through both stores, TTLs,
 * reservations settled and released through another instance, and two instances hammering
 * one key.
 *
 * Every test starts its own redis-server (tests/redis_server.h); none is skipped.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis/fallback.h"
#include "redis/quota_sync.h"
#include "redis/lua.h"
#include "redis/scripts.h"
#include "redis_server.h"
#include "redis/store.h"
#include "testutil.h"

static rt_redis srv;

static void srv_up(void) { rt_redis_start(&srv); }

static void srv_down(void) { rt_redis_stop(&srv); }

/* The same server over TLS: srv.url is rediss://, and the stores made meanwhile trust the CA of
 * tls_dir, so that every call of theirs goes through the TLS transport. */
static char tls_dir[64];
static rld_net_client_tls_files tls_files;
static char tls_ca[96];

static void tls_up(void)
{
    rt_tls_certs(tls_dir, sizeof tls_dir);
    snprintf(tls_ca, sizeof tls_ca, "%s/ca.pem", tls_dir);
    tls_files = (rld_net_client_tls_files){.ca = tls_ca, .ca_name = "store.tls.ca"};
    rt_redis_start_tls(&srv, tls_dir);
}

static void tls_down(void)
{
    rt_redis_stop(&srv);
    rt_tls_remove(tls_dir);
    tls_dir[0] = '\0';
}

/* A Redis Cluster (three primaries with a replica each) for the stores made while on_cluster. */
static rt_cluster cl;
static int on_cluster;

static void cl_up(void)
{
    rt_cluster_start(&cl, 2000);
    on_cluster = 1;
}

static void cl_down(void)
{
    rt_cluster_stop(&cl);
    on_cluster = 0;
}

/* ---- limiters over either store ------------------------------------------------------------ */

typedef struct pair {
    rl_registry *reg;
    rl_limiter *mem, *red;
    rl_store *rst; /* red's store */
} pair;

static rl_config *config_of(rl_registry *reg, const char *json, rld_settings *set)
{
    rl_config *cfg;
    rl_err err = {{0}};
    int rc = rld_config_parse(json, strlen(json), reg, set, &cfg, &err);
    ck_assert_msg(rc == RL_OK, "config refused: %s\n%s", err.msg, json);
    return cfg;
}

/* 1: the stores made below call the scripts as a Functions library (FCALL); 0: EVALSHA, the
 * default. */
static int functions;
/* 1: the stores made below cache denials (store.deny_cache). */
static int deny_cache;

/* A limiter over a Redis store with a manual clock (unless real_clock) under prefix. */
static rl_limiter *redis_limiter(rl_registry *reg, const char *json, const char *prefix,
                                 int real_clock, rl_store **store_out)
{
    rld_settings set;
    rl_config *cfg = config_of(reg, json, &set);
    rld_redis_options o = {.url = srv.url,
                           .prefix = prefix,
                           .timeout_ms = 10000, /* a loaded machine is no store failure */
                           .pool = 4,
                           .manual_clock = !real_clock,
                           .ttl_floor_ms = real_clock ? 0 : 3600 * 1000,
                           .functions = functions,
                           .deny_cache = deny_cache,
                           .tls = tls_dir[0] ? &tls_files : NULL};
    for (size_t l = 0; l < RL_MAX_LEVELS; l++)
        o.shards[l] = set.shards[l];
    rld_settings_clear(&set);
    rld_redis_addr seeds[3];
    if (on_cluster) {
        memset(seeds, 0, sizeof seeds);
        for (int i = 0; i < 3; i++) {
            snprintf(seeds[i].host, sizeof seeds[i].host, "127.0.0.1");
            seeds[i].port = cl.node[i].port;
        }
        o.cluster = seeds;
        o.ncluster = 3;
    }
    rl_store *st;
    rl_limiter *lim;
    rl_err err = {{0}};
    ck_assert_int_eq(rld_redis_store_new(&o, &st, &err), RL_OK);
    int rc = rl_limiter_new(cfg, st, &lim, &err);
    ck_assert_msg(rc == RL_OK, "limiter refused: %s", err.msg);
    /* a cache of denials answers once its follower has subscribed */
    for (int i = 0; deny_cache && !rld_redis_store_deny_live(st); i++) {
        ck_assert_msg(i < 500, "the cache of denials did not subscribe in 5 s");
        usleep(10000);
    }
    if (store_out)
        *store_out = st;
    return lim;
}

static rl_limiter *memory_limiter(rl_registry *reg, const char *json)
{
    rld_settings set;
    rl_config *cfg = config_of(reg, json, &set);
    rld_settings_clear(&set);
    rl_limiter *lim;
    rl_err err = {{0}};
    ck_assert_int_eq(rl_limiter_new(cfg, NULL, &lim, &err), RL_OK);
    return lim;
}

static const char *plugin_path(const char *name);

/* Both limiters share one registry, which has the test plug-in with a Redis port loaded. */
static void pair_new(pair *p, const char *json, const char *prefix)
{
    rl_err err = {{0}};
    p->reg = rl_registry_new();
    ck_assert_ptr_nonnull(p->reg);
    ck_assert_msg(rl_registry_load_plugin(p->reg, plugin_path("rule_leaky_bucket"), &err) == RL_OK,
                  "%s", err.msg);
    p->mem = memory_limiter(p->reg, json);
    p->red = redis_limiter(p->reg, json, prefix, 0, &p->rst);
}

static void pair_free(pair *p)
{
    rl_limiter_free(p->mem);
    rl_limiter_free(p->red);
    rl_registry_free(p->reg);
}

/* Splits "a=x,b=y" into descriptors (pointing into buf). */
static size_t descs(const char *keys, char *buf, size_t cap, rl_descriptor *ds)
{
    size_t n = 0;
    snprintf(buf, cap, "%s", keys);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < 16;
         t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        ck_assert_ptr_nonnull(eq);
        *eq = '\0';
        ds[n] = (rl_descriptor){t, strlen(t), eq + 1, strlen(eq + 1)};
        n++;
    }
    return n;
}

/* The usage the differential replay's next acquire carries (NULL: none). */
static const rl_usage *replay_usage;

static int acquire(rl_limiter *lim, const char *keys, rl_fp cost, rl_ns now, unsigned flags,
                   int64_t priority, rl_decision *d)
{
    char buf[512];
    rl_descriptor ds[16];
    rl_request req = {.desc = ds,
                      .ndesc = descs(keys, buf, sizeof buf, ds),
                      .cost = cost,
                      .usage = replay_usage,
                      .priority = priority,
                      .flags = flags,
                      .now = now};
    rl_err err = {{0}};
    int rc = rl_acquire(lim, &req, d, &err);
    if (rc != RL_OK)
        fprintf(stderr, "acquire: %s\n", err.msg);
    if (rc == RL_OK)
        rl_decision_done(d);
    return rc;
}

/* ---- model usage: dimensions and dollars, on both stores ------------------------------------- */

/* A request with usage in=in_tokens, out=out_tokens (and cached when >= 0), model m. */
static int acquire_usage(rl_limiter *lim, const char *keys, double in, double out, double cached,
                         rl_ns now, unsigned flags, rl_decision *d)
{
    char buf[512];
    rl_descriptor ds[16];
    rl_usage u = {3u | (cached >= 0 ? 4u : 0u), {FP(in), FP(out), cached >= 0 ? FP(cached) : 0}};
    rl_request req = {.desc = ds,
                      .ndesc = descs(keys, buf, sizeof buf, ds),
                      .cost = FP(1),
                      .usage = &u,
                      .flags = flags,
                      .now = now};
    rl_err err = {{0}};
    int rc = rl_acquire(lim, &req, d, &err);
    ck_assert_msg(rc == RL_OK, "acquire: %s", err.msg);
    return d->allowed;
}

/* Levels: user counts dollars (a day's $1), team input (1000) and output (500) tokens in buckets
 * that refill 1 a second, global requests (100 a day). Model m: $3 and $15 per million input
 * and output tokens, $0.30 cached. */
static const char usage_cfg[] =
    "{\"dimensions\": [\"in\", \"out\", \"cached\"],"
    " \"prices\": {\"by\": \"model\", \"models\": {\"m\": {\"in\": 3, \"out\": 15,"
    " \"cached\": 0.30}}},"
    " \"levels\": ["
    "  {\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\", \"limit\": 1, \"window\": 86400,"
    "   \"unit\": \"usd\", \"name\": \"dollars\"}]},"
    "  {\"name\": \"team\", \"rules\": ["
    "   {\"type\": \"token_bucket\", \"capacity\": 1000, \"per_second\": 1, \"unit\": \"in\", \"name\": \"in\"},"
    "   {\"type\": \"token_bucket\", \"capacity\": 500, \"per_second\": 1, \"unit\": \"out\", \"name\": \"out\"}]},"
    "  {\"name\": \"global\", \"default_key\": \"all\", \"rules\": [{\"type\": \"fixed_window\","
    "   \"limit\": 100, \"window\": 86400, \"unit\": \"requests\", \"name\": \"requests\"}]}]}";

#define UKEYS "user=u,team=t,model=m"

/* A request denied on output tokens takes nothing from input tokens, dollars or requests. At
 * t = 0: {100 in, 400 out} costs 100 x 3 + 400 x 15 = 6300 millionths of a dollar; then {100
 * in, 200 out} needs 200 output tokens where 100 are left: denied by team's "out", 100 s to
 * wait (1 a second), and a dry run after it sees 900 input tokens, $0.9937 and 99 requests. */
START_TEST(usage_denied_on_one_dimension_takes_nothing)
{
    pair p;
    pair_new(&p, usage_cfg, "udeny:");
    rl_limiter *both[2] = {p.mem, p.red};
    for (int i = 0; i < 2; i++) {
        rl_decision d;
        ck_assert(acquire_usage(both[i], UKEYS, 100, 400, -1, S(0), 0, &d));
        ck_assert(!acquire_usage(both[i], UKEYS, 100, 200, -1, S(0), 0, &d));
        ck_assert_int_eq(d.blocked, 2); /* user's dollars, team's in, team's out */
        ck_assert_str_eq(d.applied[d.blocked].rule->name, "out");
        ck_assert_int_eq(d.retry_after, S(100));
        ck_assert(acquire_usage(both[i], UKEYS, 0, 0, -1, S(0), RL_DRY_RUN, &d));
        ck_assert_int_eq(tu_status(&d, 0)->remaining, 993700000); /* nano-dollars */
        ck_assert_int_eq(tu_status(&d, 1)->remaining, FP(900));
        ck_assert_int_eq(tu_status(&d, 2)->remaining, FP(100));
        ck_assert_int_eq(tu_status(&d, 3)->remaining, FP(99));
    }
    pair_free(&p);
}
END_TEST

/* A reservation of {1000 in, 4000 out} (team's out bucket made 10000 here) settled with {1000
 * in, 900 out, 600 cached}: out gives back 3100, cached is charged 600, and the dollars are
 * worked out again: reserved 1000 x 3 + 4000 x 15 = 63000 millionths ($0.063), actual 1000 x 3
 * + 900 x 15 + 600 x 0.30 = 16680 millionths ($0.01668), 46320 millionths given back. */
START_TEST(usage_reservation_settles_each_dimension)
{
    char cfg[sizeof usage_cfg + 8];
    const char *cap = strstr(usage_cfg, "500");
    snprintf(cfg, sizeof cfg, "%.*s10000%s", (int)(cap - usage_cfg), usage_cfg, cap + 3);
    pair p;
    pair_new(&p, cfg, "usettle:");
    rl_limiter *both[2] = {p.mem, p.red};
    for (int i = 0; i < 2; i++) {
        rl_decision d;
        rl_err err = {{0}};
        ck_assert(acquire_usage(both[i], UKEYS, 1000, 4000, -1, S(0), RL_RESERVE, &d));
        char id[RL_RESERVATION_ID];
        memcpy(id, d.reservation, sizeof id);
        ck_assert_int_eq(tu_status(&d, 0)->remaining, 1000000000 - 63000000);
        rl_actual a = {.has_cost = 0, .usage = {7u, {FP(1000), FP(900), FP(600)}}};
        rl_settlement st;
        ck_assert_int_eq(rl_settle_usage(both[i], id, &a, S(0), NULL, &st, &err), RL_OK);
        const rl_settled *out = &st.unit[RL_UNIT_DIM0 + 1], *cached = &st.unit[RL_UNIT_DIM0 + 2];
        const rl_settled *usd = &st.unit[RL_UNIT_USD];
        ck_assert_int_eq(out->reserved, FP(4000));
        ck_assert_int_eq(out->refunded, FP(3100));
        ck_assert_int_eq(cached->charged, FP(600));
        ck_assert_int_eq(usd->reserved, 63000000);
        ck_assert_int_eq(usd->actual, 16680000);
        ck_assert_int_eq(usd->refunded, 46320000);
        ck_assert_int_eq(st.actual, FP(1)); /* the cost stands */
        ck_assert(acquire_usage(both[i], UKEYS, 0, 0, -1, S(0), RL_DRY_RUN, &d));
        ck_assert_int_eq(tu_status(&d, 0)->remaining, 1000000000 - 16680000);
        ck_assert_int_eq(tu_status(&d, 1)->remaining, FP(0)); /* 1000 in, as reserved */
        ck_assert_int_eq(tu_status(&d, 2)->remaining, FP(10000 - 900));
        ck_assert_int_eq(rl_settle_usage(both[i], id, &a, S(0), NULL, &st, &err), RL_ESETTLED);
    }
    pair_free(&p);
}
END_TEST

/* A budget of $10 with prices of six decimals: {1000 in, 1000 out} at $5.000001 and $14.999999
 * per million is 0.005000001 + 0.014999999 = $0.02 exactly, so the budget admits exactly 500
 * (summing to $10.00 on paper) and denies the 501st; in binary floating point 500 x 0.02
 * overshoots 10 and a limiter adding doubles would deny the 500th. One input token at
 * $0.000001 per million is 10^-12 dollars, rounded up to one nano-dollar. */
START_TEST(usage_dollar_budget_is_exact)
{
    const char *cfg =
        "{\"dimensions\": [\"in\", \"out\"], \"prices\": {\"by\": \"model\", \"models\": {"
        " \"m\": {\"in\": 5.000001, \"out\": 14.999999}, \"tiny\": {\"in\": 0.000001}}},"
        " \"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\", \"limit\": 10,"
        " \"window\": 86400, \"unit\": \"usd\"}]}]}";
    pair p;
    pair_new(&p, cfg, "ubudget:");
    rl_limiter *both[2] = {p.mem, p.red};
    for (int i = 0; i < 2; i++) {
        rl_decision d;
        for (int k = 0; k < 500; k++)
            ck_assert_msg(acquire_usage(both[i], "user=u,model=m", 1000, 1000, -1, S(1), 0, &d),
                          "request %d of 500 denied", k + 1);
        ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
        ck_assert(!acquire_usage(both[i], "user=u,model=m", 1000, 1000, -1, S(1), 0, &d));
        ck_assert(acquire_usage(both[i], "user=v,model=tiny", 1, 0, -1, S(1), 0, &d));
        ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(10) * 1000 - 1);
    }
    pair_free(&p);
}
END_TEST

/* A reservation's amounts and prices survive a restart of the memory store (its snapshot):
 * settled after the load as before it, the dollars worked out at the prices it was made with. */
START_TEST(usage_reservation_survives_a_snapshot)
{
    rl_registry *reg = rl_registry_new();
    rl_limiter *a = memory_limiter(reg, usage_cfg), *b = memory_limiter(reg, usage_cfg);
    rl_decision d;
    rl_err err = {{0}};
    char path[] = "/tmp/rlusage.XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert(acquire_usage(a, UKEYS, 100, 400, -1, S(0), RL_RESERVE, &d));
    char id[RL_RESERVATION_ID];
    memcpy(id, d.reservation, sizeof id);
    ck_assert_int_eq(rl_limiter_save(a, path, &err), RL_OK);
    size_t loaded = 0;
    ck_assert_int_eq(rl_limiter_load(b, path, S(0), &loaded, &err), RL_OK);
    unlink(path);
    rl_actual act = {.has_cost = 0, .usage = {2u, {0, FP(100)}}};
    rl_settlement st;
    ck_assert_int_eq(rl_settle_usage(b, id, &act, S(0), NULL, &st, &err), RL_OK);
    /* 100 x 3 + 400 x 15 = 6300 millionths reserved; 100 x 3 + 100 x 15 = 1800 actual */
    ck_assert_int_eq(st.unit[RL_UNIT_USD].refunded, 4500000);
    ck_assert(acquire_usage(b, UKEYS, 0, 0, -1, S(0), RL_DRY_RUN, &d));
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 1000000000 - 1800000);
    ck_assert_int_eq(tu_status(&d, 2)->remaining, FP(400));
    rl_limiter_free(a);
    rl_limiter_free(b);
    rl_registry_free(reg);
}
END_TEST

/* Bad usage: an undeclared dimension, and a model without prices where a rule counts dollars,
 * are refused naming them, and change nothing. */
START_TEST(usage_errors_name_the_field)
{
    rl_registry *reg = rl_registry_new();
    rl_limiter *lim = memory_limiter(reg, usage_cfg);
    char buf[128];
    rl_descriptor ds[4];
    rl_usage u = {1u << 5, {0}};
    rl_request req = {.desc = ds, .ndesc = descs("user=u,team=t,model=m", buf, sizeof buf, ds),
                      .cost = FP(1), .usage = &u, .now = 0};
    rl_decision d;
    rl_err err = {{0}};
    ck_assert_int_eq(rl_acquire(lim, &req, &d, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "usage: dimension 5 is not declared");
    u.given = 1;
    u.v[0] = FP(10);
    req.ndesc = descs("user=u,team=t,model=x", buf, sizeof buf, ds);
    ck_assert_int_eq(rl_acquire(lim, &req, &d, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "keys.model: no prices for \"x\"");
    req.ndesc = descs("user=u,team=t", buf, sizeof buf, ds);
    ck_assert_int_eq(rl_acquire(lim, &req, &d, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "keys.model: required to count dollars");
    ck_assert(acquire_usage(lim, UKEYS, 0, 0, -1, S(0), RL_DRY_RUN, &d));
    ck_assert_int_eq(tu_status(&d, 1)->remaining, FP(1000));
    rl_limiter_free(lim);
    rl_registry_free(reg);
}
END_TEST

/* ---- a conformance table ------------------------------------------------------------------- */

/* Worked numbers from the rule files' comments, checked by hand, run against both stores. */
typedef struct crow {
    double t, cost;
    int allowed;
    double wait;      /* seconds */
    double remaining; /* after the decision */
} crow;

typedef struct ccase {
    const char *rule;
    crow rows[8];
} ccase;

static const ccase conformance[] = {
    /* capacity 100, 10/s: emptied at 0, a cost of 1 waits 0.1 s; 50 back at t = 5 */
    {"{\"type\": \"token_bucket\", \"capacity\": 100, \"per_second\": 10}",
     {{0, 100, 1, 0, 0},
      {0, 1, 0, 0.1, 0},
      {5, 10, 1, 0, 40},
      {5, 41, 0, 0.1, 40},
      {-1, 0, 0, 0, 0}}},
    /* 2/s, burst 3: three at t = 0 allowed, a fourth waits 0.5 s */
    {"{\"type\": \"gcra\", \"per_second\": 2, \"burst\": 3}",
     {{0, 1, 1, 0, 2},
      {0, 1, 1, 0, 1},
      {0, 1, 1, 0, 0},
      {0, 1, 0, 0.5, 0},
      {0.5, 1, 1, 0, 0},
      {-1, 0, 0, 0, 0}}},
    /* 2 per 60 s: a third at t = 59 waits 1 s and is allowed at t = 60 */
    {"{\"type\": \"fixed_window\", \"limit\": 2, \"window\": 60}",
     {{0, 1, 1, 0, 1}, {1, 1, 1, 0, 0}, {59, 1, 0, 1, 0}, {60, 1, 1, 0, 1}, {-1, 0, 0, 0, 0}}},
    /* 2 per 10 s: requests at 0 and 4, a third at 5 waits 5 s, allowed at 10 */
    {"{\"type\": \"sliding_window\", \"limit\": 2, \"window\": 10}",
     {{0, 1, 1, 0, 1}, {4, 1, 1, 0, 0}, {5, 1, 0, 5, 0}, {10, 1, 1, 0, 0}, {-1, 0, 0, 0, 0}}},
    /* 10 per 10 s, 10 taken in [0, 10): at 12.5 the estimate is 10 * 7.5 / 10 = 7.5, so a
     * cost of 3 waits until 13, when 10 * 7 / 10 + 3 = 10 fits exactly */
    {"{\"type\": \"sliding_window_counter\", \"limit\": 10, \"window\": 10}",
     {{0, 10, 1, 0, 0}, {12.5, 3, 0, 0.5, 2.5}, {13, 3, 1, 0, 0}, {-1, 0, 0, 0, 0}}},
    /* 2 slots: the third is denied with the default retry of 1 s */
    {"{\"type\": \"concurrency\", \"limit\": 2}",
     {{0, 1, 1, 0, 1}, {0, 1, 1, 0, 0}, {0, 1, 0, 1, 0}, {-1, 0, 0, 0, 0}}},
};

START_TEST(conformance_table)
{
    const ccase *c = &conformance[_i];
    char json[512];
    snprintf(json, sizeof json, "{\"levels\": [{\"name\": \"k\", \"rules\": [%s]}]}", c->rule);
    for (int which = 0; which < 2; which++) {
        rl_registry *reg = rl_registry_new();
        char prefix[32];
        snprintf(prefix, sizeof prefix, "conf%d:", _i);
        rl_limiter *lim =
            which ? redis_limiter(reg, json, prefix, 0, NULL) : memory_limiter(reg, json);
        for (const crow *r = c->rows; r->t >= 0; r++) {
            rl_decision d;
            ck_assert_int_eq(acquire(lim, "k=x", FP(r->cost), S(r->t), 0, 0, &d), RL_OK);
            ck_assert_msg(d.allowed == r->allowed, "%s store, %s, t=%g: allowed %d",
                          which ? "redis" : "memory", c->rule, r->t, d.allowed);
            ck_assert_int_eq(d.retry_after, S(r->wait));
            ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(r->remaining));
        }
        rl_limiter_free(lim);
        rl_registry_free(reg);
    }
}
END_TEST

/* ---- random traces through both stores ----------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rnd(uint64_t *s, uint64_t n) { return n ? rng_next(s) % n : 0; }

/* A fixed point quota in [1e-6, max_units]: mostly a few units, sometimes extreme. */
static rl_fp rnd_amount(uint64_t *s, int64_t max_units)
{
    rl_fp max = (rl_fp)max_units * RL_FP_ONE, v;
    uint64_t k = rnd(s, 40);
    if (k < 18)
        v = (rl_fp)(1 + rnd(s, 20)) * RL_FP_ONE;
    else if (k < 26)
        v = RL_FP_ONE + (rl_fp)rnd(s, 20 * RL_FP_ONE);
    else if (k < 36)
        v = (rl_fp)(20 + rnd(s, 1000)) * RL_FP_ONE + (rl_fp)rnd(s, RL_FP_ONE);
    else if (k < 37)
        v = RL_FP_ONE / 2 + (rl_fp)rnd(s, RL_FP_ONE / 2);
    else if (k < 39)
        v = 1 + (rl_fp)rnd(s, (uint64_t)max);
    else
        v = 1 + (rl_fp)rnd(s, 1000);
    return v > max ? max : v;
}

/* A rate per second: mostly 0.1 to 10000, sometimes extreme. */
static rl_fp rnd_rate(uint64_t *s)
{
    uint64_t k = rnd(s, 10);
    if (k < 5)
        return RL_FP_ONE / 10 + (rl_fp)rnd(s, 10 * RL_FP_ONE);
    if (k < 7)
        return (rl_fp)(10 + rnd(s, 10000)) * RL_FP_ONE + (rl_fp)rnd(s, RL_FP_ONE);
    if (k < 8)
        return 1 + (rl_fp)rnd(s, RL_FP_ONE / 100);
    if (k < 9)
        return 1 + (rl_fp)rnd(s, (uint64_t)RL_FP_MAX);
    return (rl_fp)(1 + rnd(s, 5)) * RL_FP_ONE;
}

/* A duration in [1 ms, max_s], with nanoseconds: mostly up to a minute. */
static rl_ns rnd_duration(uint64_t *s, int64_t max_s)
{
    rl_ns v;
    uint64_t k = rnd(s, 10);
    if (k < 4)
        v = RL_NS_PER_SEC / 1000 + (rl_ns)rnd(s, 10 * RL_NS_PER_SEC);
    else if (k < 6)
        v = (rl_ns)(1 + rnd(s, 60)) * RL_NS_PER_SEC;
    else if (k < 8)
        v = (rl_ns)(1 + rnd(s, 600)) * RL_NS_PER_SEC + (rl_ns)rnd(s, RL_NS_PER_SEC);
    else
        v = (rl_ns)rnd(s, (uint64_t)max_s) * RL_NS_PER_SEC + (rl_ns)rnd(s, RL_NS_PER_SEC);
    if (v < RL_NS_PER_SEC / 1000)
        v = RL_NS_PER_SEC / 1000;
    return v > max_s * RL_NS_PER_SEC ? max_s * RL_NS_PER_SEC : v;
}

static int put_fp(char *b, size_t n, rl_fp v)
{
    return snprintf(b, n, "%lld.%06lld", (long long)(v / RL_FP_ONE), (long long)(v % RL_FP_ONE));
}

static int put_ns(char *b, size_t n, rl_ns v)
{
    return snprintf(b, n, "%lld.%09lld", (long long)(v / RL_NS_PER_SEC),
                    (long long)(v % RL_NS_PER_SEC));
}

/* Every built-in type, then a plug-in's with state and its own Redis port
 * (tests/plugins/rule_leaky_bucket.c). */
static const char *const type_names[] = {
    "token_bucket", "gcra",      "fixed_window",         "sliding_window", "sliding_window_counter",
    "concurrency",  "deny_list", "adaptive_concurrency", "calendar",       "leaky_bucket"};
#define NTYPES ((int)(sizeof type_names / sizeof type_names[0]))
#define DENY_LIST 6
#define ADAPTIVE 7
#define CALENDAR 8
#define LEAKY_BUCKET 9

/* The path of a test plug-in (tests/plugins/<name>.c, built by the Makefile). */
static const char *plugin_path(const char *name)
{
    static _Thread_local char path[512];
    const char *b = getenv("RL_BUILD");
    snprintf(path, sizeof path, "%s/plugins/lib%s.so", b && *b ? b : "build", name);
    return path;
}

/* 1: rnd_config makes only the types of fast_types (token buckets, GCRA, fixed windows, sliding
 * windows, sliding window counters and concurrency limits; a type given to it is an index into
 * fast_types), and no shadow, charge or reserved rules: the decisions the decision script's
 * fast path (service/redis/fast.lua) takes (those that are not dry runs, with amounts, times and
 * windows within its bounds, reservations made or not). */
static const int fast_types[] = {0, 1, 2, 3, 4, 5};
#define FAST_TYPES ((int)(sizeof fast_types / sizeof fast_types[0]))
static int replay_fast;

/* Writes one random rule of type t as JSON into b. */
static size_t rnd_rule(uint64_t *s, int t, int idx, char *b, size_t n)
{
    char x[40], y[40];
    size_t u = (size_t)snprintf(b, n, "{\"type\": \"%s\", \"name\": \"r%d\"", type_names[t], idx);
    switch (t) {
    case 0:
        put_fp(x, sizeof x, rnd_amount(s, 1000000000000));
        put_fp(y, sizeof y, rnd_rate(s));
        u += (size_t)snprintf(b + u, n - u, ", \"capacity\": %s, \"per_second\": %s", x, y);
        break;
    case 1:
        put_fp(x, sizeof x, rnd_rate(s));
        put_fp(y, sizeof y, rnd_amount(s, 1000000000000));
        u += (size_t)snprintf(b + u, n - u, ", \"per_second\": %s, \"burst\": %s", x, y);
        break;
    case 2:
    case 3:
    case 4:
        put_fp(x, sizeof x, rnd_amount(s, t == 3 ? 1000000 : 1000000000000));
        put_ns(y, sizeof y, rnd_duration(s, 31622400));
        u += (size_t)snprintf(b + u, n - u, ", \"limit\": %s, \"window\": %s", x, y);
        break;
    case CALENDAR: {
        /* zones with changes at 02:00, at midnight (Beirut), of half an hour (Lord Howe), in
         * the southern hemisphere, and none */
        static const char *const zones[] = {"UTC", "Europe/Berlin", "America/Los_Angeles",
                                            "Asia/Beirut", "Australia/Lord_Howe", "Asia/Kolkata"};
        static const char *const periods[] = {"day", "week", "month", "year"};
        int per = (int)rnd(s, 4);
        put_fp(x, sizeof x, rnd_amount(s, 1000000000000));
        u += (size_t)snprintf(b + u, n - u, ", \"limit\": %s, \"period\": \"%s\", "
                              "\"time_zone\": \"%s\"", x, periods[per], zones[rnd(s, 6)]);
        if (per == 1 && rnd(s, 2))
            u += (size_t)snprintf(b + u, n - u, ", \"week_start\": \"sunday\"");
        if (per == 2 && rnd(s, 2))
            u += (size_t)snprintf(b + u, n - u, ", \"month_day\": %d", (int)(1 + rnd(s, 28)));
        break;
    }
    case LEAKY_BUCKET:
        put_fp(x, sizeof x, rnd_amount(s, 1000000000000));
        put_fp(y, sizeof y, rnd_rate(s));
        u += (size_t)snprintf(b + u, n - u, ", \"capacity\": %s, \"per_second\": %s", x, y);
        break;
    case ADAPTIVE: {
        /* limits from 1 to 60 in a few slots; windows short or long, of 1 to 20 calls */
        int lo = 1 + (int)rnd(s, 10), init = lo + (int)rnd(s, 20), hi = init + (int)rnd(s, 30);
        put_ns(x, sizeof x, rnd_duration(s, 10));
        put_ns(y, sizeof y, rnd_duration(s, 60));
        u += (size_t)snprintf(
            b + u, n - u,
            ", \"algorithm\": \"%s\", \"initial_limit\": %d, \"min_limit\": %d, "
            "\"max_limit\": %d, \"window\": %s, \"window_size\": %d, \"timeout\": %s, "
            "\"backoff_ratio\": 0.%02d, \"step\": %d, \"tolerance\": 1.%d, \"smoothing\": "
            "0.%02d, \"queue_size\": %d, \"long_window\": %d",
            rnd(s, 2) ? "aimd" : "gradient", init, lo, hi, x, 1 + (int)rnd(s, 20), y,
            50 + (int)rnd(s, 50), 1 + (int)rnd(s, 3), (int)rnd(s, 10), 1 + (int)rnd(s, 99),
            (int)rnd(s, 8), 1 + (int)rnd(s, 1000));
        break;
    }
    case 5:
        put_fp(x, sizeof x, rnd_amount(s, 20));
        put_ns(y, sizeof y, rnd_duration(s, 3600));
        u += (size_t)snprintf(b + u, n - u, ", \"limit\": %s, \"retry\": %s", x, y);
        if (rnd(s, 3) == 0)
            u += (size_t)snprintf(b + u, n - u, ", \"unit\": \"cost\"");
        break;
    default:
        u += (size_t)snprintf(b + u, n - u, ", \"keys\": [\"zz\", \"dflt\"]");
        break;
    }
    if ((t < 5 || t == CALENDAR || t == LEAKY_BUCKET) && rnd(s, 4) == 0)
        u += (size_t)snprintf(b + u, n - u, ", \"unit\": \"requests\"");
    /* shadow and charge rules (shadow wins when both are set) */
    uint64_t opt = replay_fast ? (rnd(s, 16), 16) : rnd(s, 16);
    if (opt < 2 || opt == 4)
        u += (size_t)snprintf(b + u, n - u, ", \"shadow\": true");
    if (opt >= 2 && opt <= 4)
        u += (size_t)snprintf(b + u, n - u, ", \"charge\": true");
    if (t != DENY_LIST && rnd(s, 5) == 0 && !replay_fast)
        u += (size_t)snprintf(b + u, n - u,
                              ", \"reserved\": {\"fraction\": 0.%02d, \"min_priority\": 2}",
                              (int)(1 + rnd(s, 98)));
    u += (size_t)snprintf(b + u, n - u, "}");
    return u;
}

/* 1 while the differential replay runs with dimensions d0 and d1 and model m's prices: half
 * the rules count d0, d1 or dollars, and requests carry usage. */
static int replay_dims;

/* A rule counting d0, d1 or usd (token bucket, GCRA or a window), sized so that the requests'
 * usage (up to a few thousand units, cents of dollars) is denied now and then. */
static size_t rnd_dim_rule(uint64_t *s, int idx, char *b, size_t n)
{
    static const char *const units[] = {"d0", "d1", "usd"};
    int unit = (int)rnd(s, 3), t = (int)rnd(s, 3);
    char x[40], y[40];
    rl_fp amount = unit == 2 ? 1000 + (rl_fp)rnd(s, RL_FP_ONE / 10) /* up to $0.1 */
                             : (rl_fp)(100 + rnd(s, 10000)) * RL_FP_ONE;
    rl_fp rate = amount / (rl_fp)(1 + rnd(s, 20));
    put_fp(x, sizeof x, amount);
    put_fp(y, sizeof y, rate > 0 ? rate : 1);
    size_t u = (size_t)snprintf(b, n, "{\"type\": \"%s\", \"name\": \"r%d\", \"unit\": \"%s\"",
                                t == 0 ? "token_bucket" : t == 1 ? "gcra" : "fixed_window", idx,
                                units[unit]);
    if (t == 0)
        u += (size_t)snprintf(b + u, n - u, ", \"capacity\": %s, \"per_second\": %s}", x, y);
    else if (t == 1)
        u += (size_t)snprintf(b + u, n - u, ", \"burst\": %s, \"per_second\": %s}", x, y);
    else
        u += (size_t)snprintf(b + u, n - u, ", \"limit\": %s, \"window\": %d}", x,
                              (int)(1 + rnd(s, 120)));
    return u;
}

/* A random configuration of 1 to 3 levels of 1 to 3 rules; level 0 starts with type force. */
static void rnd_config(uint64_t *s, int force, char *b, size_t n)
{
    size_t u =
        (size_t)snprintf(b, n, "{\"reservation_ttl\": %d, \"levels\": [", (int)(1 + rnd(s, 600)));
    if (replay_dims) {
        char p0[40], p1[40];
        put_fp(p0, sizeof p0, (rl_fp)rnd(s, 20 * RL_FP_ONE));
        put_fp(p1, sizeof p1, (rl_fp)rnd(s, 20 * RL_FP_ONE));
        u = (size_t)snprintf(b, n,
                             "{\"dimensions\": [\"d0\", \"d1\"], \"prices\": {\"by\": \"model\", "
                             "\"models\": {\"m\": {\"d0\": %s, \"d1\": %s}}}, \"reservation_ttl\": %d, "
                             "\"levels\": [",
                             p0, p1, (int)(1 + rnd(s, 600)));
    }
    int nlevels = 1 + (int)rnd(s, 3);
    for (int l = 0; l < nlevels; l++) {
        u += (size_t)snprintf(b + u, n - u, "%s{\"name\": \"l%d\", %s%s\"rules\": [",
                              l ? ", " : "", l, rnd(s, 3) == 0 ? "\"default_key\": \"dflt\", " : "",
                              rnd(s, 12) == 0 && !replay_fast ? "\"shadow\": true, " : "");
        int nrules = 1 + (int)rnd(s, 3);
        for (int i = 0; i < nrules; i++) {
            /* on a cluster, every type but the plug-in's, which cannot give back */
            int t = l == 0 && i == 0 ? force : (int)rnd(s, (uint64_t)NTYPES - (on_cluster != 0));
            if (replay_fast)
                t = fast_types[t % FAST_TYPES];
            if (i)
                u += (size_t)snprintf(b + u, n - u, ", ");
            if (replay_dims && rnd(s, 2) == 0)
                u += rnd_dim_rule(s, i, b + u, n - u);
            else
                u += rnd_rule(s, t, i, b + u, n - u);
        }
        u += (size_t)snprintf(b + u, n - u, "]}");
    }
    snprintf(b + u, n - u, "]}");
}

/* How a call went, as a release or settlement says (adaptive_concurrency learns from it; the
 * other types ignore it): any kind, ok more often than not, a latency up to 10 s or none. */
static rl_outcome rnd_outcome(uint64_t *s)
{
    rl_outcome o = {rnd(s, 2) ? RL_OUTCOME_OK : (rl_outcome_kind)rnd(s, 5), -1};
    if (rnd(s, 4))
        o.latency = (rl_ns)rnd(s, 10 * (uint64_t)RL_NS_PER_SEC);
    return o;
}

static rl_fp rnd_cost(uint64_t *s)
{
    uint64_t k = rnd(s, 20);
    if (k < 12)
        return (rl_fp)(1 + rnd(s, 3)) * RL_FP_ONE;
    if (k < 15)
        return 1 + (rl_fp)rnd(s, RL_FP_ONE);
    if (k < 18)
        return (rl_fp)(3 + rnd(s, 50)) * RL_FP_ONE + (rl_fp)rnd(s, RL_FP_ONE);
    if (k < 19)
        return 1 + (rl_fp)rnd(s, 1000);
    return 1 + (rl_fp)rnd(s, (uint64_t)RL_FP_MAX);
}

/* An amount of usage: mostly hundreds of units, sometimes 0 or a fraction. */
static rl_fp rnd_usage(uint64_t *s)
{
    uint64_t k = rnd(s, 10);
    if (k == 0)
        return 0;
    if (k == 1)
        return 1 + (rl_fp)rnd(s, RL_FP_ONE);
    return (rl_fp)rnd(s, 3000) * RL_FP_ONE;
}

/* One of n reservations, mostly a recent one. */
static size_t pick_id(uint64_t *s, size_t n)
{
    if (n > 6 && rnd(s, 5) != 0)
        return n - 1 - (size_t)rnd(s, 6);
    return (size_t)rnd(s, n);
}

#define TRACES (4 * NTYPES)
#define STEPS 400

static void compare(const rl_decision *a, const rl_decision *b, const char *ctx)
{
    ck_assert_msg(a->allowed == b->allowed, "%s: allowed %d vs %d", ctx, a->allowed, b->allowed);
    ck_assert_msg(a->retry_after == b->retry_after, "%s: retry_after %" PRId64 " vs %" PRId64, ctx,
                  a->retry_after, b->retry_after);
    ck_assert_msg(a->blocked == b->blocked, "%s: blocked %d vs %d", ctx, a->blocked, b->blocked);
    ck_assert_msg(a->napplied == b->napplied, "%s: applied %zu vs %zu", ctx, a->napplied,
                  b->napplied);
    ck_assert_msg(!a->reservation[0] == !b->reservation[0], "%s: reservation '%s' vs '%s'", ctx,
                  a->reservation, b->reservation);
    for (size_t i = 0; i < a->napplied; i++)
        ck_assert_msg(a->applied[i].shadow_denied == b->applied[i].shadow_denied,
                      "%s: [%zu] shadow_denied %d vs %d", ctx, i, a->applied[i].shadow_denied,
                      b->applied[i].shadow_denied);
    for (size_t i = 0; i < a->napplied; i++) {
        const rl_applied *x = &a->applied[i], *y = &b->applied[i];
        ck_assert_msg(x->wait == y->wait, "%s: [%zu] %s wait %" PRId64 " vs %" PRId64, ctx, i,
                      x->rule->name, x->wait, y->wait);
        ck_assert_msg(x->has_status == y->has_status, "%s: [%zu] has_status", ctx, i);
        if (!x->has_status)
            continue;
        const rl_rule_status *xs = tu_status(a, i), *ys = tu_status(b, i);
        ck_assert_msg(xs->limit == ys->limit && xs->remaining == ys->remaining &&
                          xs->reset_after == ys->reset_after && xs->window == ys->window &&
                          xs->next == ys->next,
                      "%s: [%zu] %s status (%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                      ", %" PRId64 ") vs (%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                      ", %" PRId64 ")",
                      ctx, i, x->rule->name, xs->limit, xs->remaining, xs->reset_after,
                      xs->window, xs->next, ys->limit, ys->remaining, ys->reset_after, ys->window,
                      ys->next);
    }
}

/* As compare, but with the cache of denials on (deny_cache) a denial may come from the cache:
 * then whether the request is allowed must be the same, the rule named blocking must block in
 * the memory store too, and retry_after is at most its wait there: never overstated, though it
 * may be less (the cached denial's wait counting down, when others took since or the cost is
 * larger; the cached level's when another level waits longer). */
static void compare_replay(const rl_decision *a, const rl_decision *b, const char *ctx)
{
    if (!deny_cache || a->allowed || b->allowed) {
        compare(a, b, ctx);
        return;
    }
    ck_assert_msg(b->blocked >= 0 && (size_t)b->blocked < a->napplied, "%s: blocked %d", ctx,
                  b->blocked);
    const rl_applied *x = &a->applied[b->blocked];
    ck_assert_msg(x->wait > 0 && b->retry_after > 0 && b->retry_after <= x->wait,
                  "%s: denied with %" PRId64 " by [%d] %s, whose wait is %" PRId64
                  " (retry_after %" PRId64 ")",
                  ctx, b->retry_after, b->blocked, x->rule->name, x->wait, a->retry_after);
}

/* Replays a random trace through a memory limiter and a Redis limiter with a manual clock;
 * every answer must be the same. force is the type of level 0's first rule. */
/* Acquires decided on the Redis side in one rl_acquire_many, compared at the end of the run
 * with the memory side's, which decided each as it came. */
typedef struct pending {
    size_t n;
    char buf[12][512], ctx[12][256];
    rl_descriptor ds[12][16];
    rl_request req[12];
    rl_decision mem[12], red[12];
} pending;

/* Decides the pending requests on the Redis side, compares, and records reservations. */
static void flush_pending(pending *q, rl_limiter *red, char ids[64][2][RL_RESERVATION_ID],
                          size_t *nids)
{
    rl_acquisition x[12];
    rl_err errs[12];
    for (size_t i = 0; i < q->n; i++)
        x[i] = (rl_acquisition){&q->req[i], &q->red[i], &errs[i], 0};
    rl_acquire_many(red, x, q->n);
    for (size_t i = 0; i < q->n; i++) {
        ck_assert_msg(x[i].rc == RL_OK, "%s: acquire_many %d (%s)", q->ctx[i], x[i].rc,
                      errs[i].msg);
        rl_decision_done(&q->red[i]);
        compare_replay(&q->mem[i], &q->red[i], q->ctx[i]);
        if (!q->mem[i].reservation[0])
            continue;
        if (*nids == 64) {
            memmove(ids, ids + 1, sizeof ids[0] * 63);
            --*nids;
        }
        memcpy(ids[*nids][0], q->mem[i].reservation, RL_RESERVATION_ID);
        memcpy(ids[*nids][1], q->red[i].reservation, RL_RESERVATION_ID);
        ++*nids;
    }
    q->n = 0;
}

/* The memory side of one acquire now, the Redis side queued in q. */
static void queue_acquire(pending *q, rl_limiter *mem, const char *keys, rl_fp cost, rl_ns now,
                          unsigned flags, int64_t prio, const char *ctx)
{
    size_t i = q->n++;
    snprintf(q->ctx[i], sizeof q->ctx[i], "%.200s (batched, %zu)", ctx, i);
    ck_assert_int_eq(acquire(mem, keys, cost, now, flags, prio, &q->mem[i]), RL_OK);
    q->req[i] = (rl_request){.desc = q->ds[i],
                             .ndesc = descs(keys, q->buf[i], sizeof q->buf[i], q->ds[i]),
                             .cost = cost,
                             .priority = prio,
                             .flags = flags,
                             .now = now};
}

/* Replays a random trace through a memory limiter and a Redis limiter with a manual clock;
 * every answer must be the same. force is the type of level 0's first rule. batch: the Redis
 * side decides runs of up to that many acquires at once (rl_acquire_many); 0: one by one. */
static uint64_t replay_local; /* decisions the cache of denials answered in replay */
static int replay_general;     /* 1: the Redis side decides by the script's general path only */

static void replay(uint64_t seed, int force, int steps, const char *prefix, size_t batch)
{
    pending *q = batch ? calloc(1, sizeof *q) : NULL;
    size_t want = batch;
    uint64_t s = seed;
    char json[8192], ctx[256];
    rnd_config(&s, force, json, sizeof json);
    pair p;
    if (getenv("RL_TRACE"))
        fprintf(stderr, "trace: %s\n", json);
    pair_new(&p, json, prefix);
    rld_redis_store_general(p.rst, replay_general);
    char ids[64][2][RL_RESERVATION_ID];
    size_t nids = 0;
    static const char *const values[] = {"a", "b", "c", "a", "b", "zz"};
    size_t nlevels = rl_limiter_config(p.mem)->nlevels;
    /* from 0, today, just below 2^53 ns or just below 4e18 ns (where the scripts' ways of
     * holding now change) */
    uint64_t start = rnd(&s, 8);
    rl_ns now = start < 3   ? 0
                : start < 6 ? (rl_ns)1700000000 * RL_NS_PER_SEC + (rl_ns)rnd(&s, 1u << 30)
                : start < 7 ? ((rl_ns)1 << 53) - (rl_ns)rnd(&s, 600 * RL_NS_PER_SEC)
                            : (rl_ns)4000000000 * RL_NS_PER_SEC - (rl_ns)rnd(&s, 600 * RL_NS_PER_SEC);
    for (int step = 0; step < steps; step++) {
        /* time moves forward in steps of any size (up to a year: beyond 2^53 ns, 104 days, a
         * time is no longer a number in the scripts), and sometimes back */
        uint64_t dt = rnd(&s, 40);
        if (dt < 12)
            now += (rl_ns)rnd(&s, 1000);
        else if (dt < 24)
            now += (rl_ns)rnd(&s, RL_NS_PER_SEC / 10);
        else if (dt < 34)
            now += (rl_ns)rnd(&s, 2 * RL_NS_PER_SEC);
        else if (dt < 35)
            now += (rl_ns)rnd(&s, 60 * RL_NS_PER_SEC);
        else if (dt < 36)
            now += (rl_ns)rnd(&s, 3600 * RL_NS_PER_SEC);
        else if (dt < 37)
            now += (rl_ns)rnd(&s, 366 * 86400 * RL_NS_PER_SEC);
        else {
            rl_ns back = (rl_ns)rnd(&s, 5 * RL_NS_PER_SEC);
            now = now > back ? now - back : 0;
        }
        snprintf(ctx, sizeof ctx, "seed 0x%" PRIx64 " step %d t=%" PRId64, seed, step, now);
        int op = (int)rnd(&s, 10);
        if (q && q->n && (q->n == want || !(op < 7 || nids == 0))) {
            flush_pending(q, p.red, ids, &nids);
            want = 1 + (size_t)rnd(&s, batch);
        }
        if (op < 7 || nids == 0) {
            char keys[64] = "";
            size_t u = 0;
            for (size_t l = 0; l < nlevels; l++)
                if (rnd(&s, 8) != 0)
                    u += (size_t)snprintf(keys + u, sizeof keys - u, "%sl%zu=%s", u ? "," : "", l,
                                          values[rnd(&s, 6)]);
            rl_usage usage = {(uint32_t)rnd(&s, 4), {rnd_usage(&s), rnd_usage(&s)}};
            replay_usage = replay_dims ? &usage : NULL;
            if (replay_dims)
                snprintf(keys + u, sizeof keys - u, "%smodel=m", u ? "," : "");
            rl_fp cost = rnd_cost(&s);
            unsigned flags = rnd(&s, 10) == 0 ? RL_DRY_RUN : 0;
            flags |= rnd(&s, 5) < 2 ? RL_RESERVE : 0;
            int64_t prio = (int64_t)rnd(&s, 4);
            rl_decision a, b;
            if (getenv("RL_TRACE"))
                fprintf(stderr, "trace: %s: %s cost %lld flags %u prio %lld\n", ctx, keys,
                        (long long)cost, flags, (long long)prio);
            if (q) {
                queue_acquire(q, p.mem, keys, cost, now, flags, prio, ctx);
                /* with the cache of denials, a denied request comes again within its wait */
                while (deny_cache && q->n < want && !q->mem[q->n - 1].allowed &&
                       q->mem[q->n - 1].retry_after < RL_NS_PER_SEC * 3600 && rnd(&s, 3)) {
                    now += (rl_ns)rnd(&s, (uint64_t)q->mem[q->n - 1].retry_after);
                    queue_acquire(q, p.mem, keys, cost, now, flags, prio, ctx);
                }
                continue;
            }
            int ra = acquire(p.mem, keys, cost, now, flags, prio, &a);
            int rb = acquire(p.red, keys, cost, now, flags, prio, &b);
            replay_usage = NULL;
            ck_assert_msg(ra == RL_OK && rb == RL_OK, "%s: acquire %d / %d", ctx, ra, rb);
            compare_replay(&a, &b, ctx);
            /* with the cache of denials, a denied request comes again within its wait, or
             * with a cost a little larger or smaller */
            while (deny_cache && !a.allowed && a.retry_after < RL_NS_PER_SEC * 3600 && rnd(&s, 4)) {
                now += (rl_ns)rnd(&s, (uint64_t)a.retry_after);
                rl_fp c2 = cost + (rl_fp)rnd(&s, 3) - 1;
                cost = c2 > 0 ? c2 : cost;
                ra = acquire(p.mem, keys, cost, now, flags, prio, &a);
                rb = acquire(p.red, keys, cost, now, flags, prio, &b);
                ck_assert_msg(ra == RL_OK && rb == RL_OK, "%s: again %d / %d", ctx, ra, rb);
                compare_replay(&a, &b, ctx);
            }
            if (a.reservation[0]) {
                if (nids == 64) {
                    memmove(ids, ids + 1, sizeof ids[0] * 63);
                    nids--;
                }
                memcpy(ids[nids][0], a.reservation, RL_RESERVATION_ID);
                memcpy(ids[nids][1], b.reservation, RL_RESERVATION_ID);
                nids++;
            }
        } else if (op < 9) {
            size_t k = pick_id(&s, nids);
            rl_fp actual = rnd(&s, 4) == 0 ? 0 : rnd_cost(&s);
            rl_settlement x = {0}, y = {0};
            rl_err e1, e2;
            if (getenv("RL_TRACE"))
                fprintf(stderr, "trace: %s: settle %zu %lld\n", ctx, k, (long long)actual);
            rl_actual act = {.has_cost = !replay_dims || rnd(&s, 2) == 0, .cost = actual,
                             .usage = {replay_dims ? (uint32_t)rnd(&s, 4) : 0u,
                                       {rnd_usage(&s), rnd_usage(&s)}}};
            rl_outcome oc = rnd_outcome(&s);
            const rl_outcome *o = rnd(&s, 3) ? &oc : NULL;
            int ra = rl_settle_usage(p.mem, ids[k][0], &act, now, o, &x, &e1);
            int rb = rl_settle_usage(p.red, ids[k][1], &act, now, o, &y, &e2);
            ck_assert_msg(ra == rb, "%s: settle %d vs %d (%s)", ctx, ra, rb,
                          rb == RL_ESTORE ? e2.msg : "");
            ck_assert_msg(memcmp(&x, &y, sizeof x) == 0, "%s: settlement differs", ctx);
        } else {
            size_t k = pick_id(&s, nids);
            rl_err e1, e2;
            if (getenv("RL_TRACE"))
                fprintf(stderr, "trace: %s: release %zu\n", ctx, k);
            rl_outcome oc = rnd_outcome(&s);
            const rl_outcome *o = rnd(&s, 4) ? &oc : NULL;
            int ra = rl_release_outcome(p.mem, ids[k][0], now, o, &e1);
            int rb = rl_release_outcome(p.red, ids[k][1], now, o, &e2);
            ck_assert_msg(ra == rb, "%s: release %d vs %d (%s)", ctx, ra, rb,
                          rb == RL_ESTORE ? e2.msg : "");
        }
    }
    if (q && q->n)
        flush_pending(q, p.red, ids, &nids);
    free(q);
    for (size_t l = 0; deny_cache && l < nlevels; l++)
        replay_local += rld_redis_store_deny_answered(p.rst, l);
    /* housekeeping for 0.4 s, as it runs ten times a second: it gives the index of
     * reservations its TTL (a decision leaves that alone), on a cluster a quarter of the
     * index's parts a tick */
    for (int t = 0; t < 4; t++)
        rl_limiter_tick(p.red, now);
    pair_free(&p);
}

START_TEST(differential_replay)
{
    uint64_t seed = 0x5eed0000u + (uint64_t)_i;
    const char *env = getenv("RL_SEED");
    char prefix[40];
    if (env)
        seed = strtoull(env, NULL, 0);
    snprintf(prefix, sizeof prefix, "diff%" PRIx64 ":", seed);
    replay(seed, _i % NTYPES, STEPS, prefix, 0);
}
END_TEST

/* The traces of differential_replay again, the decision script made to skip its fast path
 * (service/redis/fast.lua): its general path (numbers, and big integers past 2^53) must give
 * the memory store's answers too, so both paths agree over the same traces. The traces cross
 * 2^53 in amounts (up to 1e12 units, 1e18 in fixed point) and in times (from just below 2^53
 * ns and 4e18 ns, steps up to a year), where the fast path hands over to the general one. */
START_TEST(differential_replay_general)
{
    uint64_t seed = 0x5eed0000u + (uint64_t)_i;
    const char *env = getenv("RL_SEED");
    char prefix[40];
    if (env)
        seed = strtoull(env, NULL, 0);
    snprintf(prefix, sizeof prefix, "diffg%" PRIx64 ":", seed);
    replay_general = 1;
    replay(seed, _i % NTYPES, STEPS, prefix, 0);
    replay_general = 0;
}
END_TEST

/* Traces the fast path takes most decisions of (token buckets, GCRA, fixed windows, sliding
 * windows, sliding window counters and concurrency limits only; the rest are dry runs, reservations, and amounts, times or windows
 * beyond its bounds: the traces cross 2^53 in amounts and times as differential_replay_general's
 * do, windows reach a year, past the 2^50 ns the fast path takes), each replayed twice: with the
 * fast path (even _i) and with the general path only (odd _i), both against the memory store;
 * level 0's first rule is of each of fast_types in turn. */
START_TEST(differential_replay_fast)
{
    uint64_t seed = 0xfa570000u + (uint64_t)(_i / 2);
    char prefix[40];
    snprintf(prefix, sizeof prefix, "difff%d:", _i);
    replay_fast = 1;
    replay_general = _i % 2;
    replay(seed, (_i / 2) % FAST_TYPES, STEPS, prefix, 0);
    replay_general = 0;
    replay_fast = 0;
}
END_TEST

/* The default configuration's shape is decided by the fast path: asked for it alone (a decision
 * it declined would fail), three levels of token buckets and GCRA decide as worked out by hand.
 * user: 3 at 1/s; team: GCRA 2/s, burst 2; org: 100 at 10/s. At t = 100 s two pass, the third
 * is denied by team (its TAT is 1 s ahead, 0.5 s past what a burst of 2 allows: retry_after
 * 0.5 s), taking nothing; at 100.5 s the user has 1.5 used (3 - 1.5 left) and team's TAT is
 * 0.5 s ahead: it passes, leaving user 0.5 (1.5 + 1 of 3) and org 99 (2 used refilled by 5). */
static const char fast_cfg[] =
    "{\"levels\": ["
    " {\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 3, \"per_second\": 1}]},"
    " {\"name\": \"team\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 2, \"burst\": 2}]},"
    " {\"name\": \"org\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 100, \"per_second\": 10}]}]}";

START_TEST(fast_path_decides_the_default_shape)
{
    pair p;
    pair_new(&p, fast_cfg, "fastonly:");
    rld_redis_store_general(p.rst, 2);
    const char *keys = "user=a,team=t,org=o";
    rl_decision d;
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(acquire(p.red, keys, FP(1), S(100), 0, 0, &d), RL_OK);
        ck_assert(d.allowed);
    }
    ck_assert_int_eq(acquire(p.red, keys, FP(1), S(100), 0, 0, &d), RL_OK);
    ck_assert(!d.allowed);
    ck_assert_int_eq(d.blocked, 1);
    ck_assert_int_eq(d.retry_after, S(1) / 2);
    ck_assert_int_eq(acquire(p.red, keys, FP(1), S(100) + S(1) / 2, 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(1) / 2);
    ck_assert_int_eq(tu_status(&d, 2)->remaining, FP(99));
    pair_free(&p);
}
END_TEST

/* A sliding window (a log of takes) is decided by the fast path too, asked for it alone: limit
 * 3 in 10 s. At t = 100 s two takes of 1 (one entry, merged at the same time), at 104 s one more
 * (remaining 0, reset 10 s after 104 s, next whole unit when the 2 taken at 100 s leave: 6 s),
 * at 105 s denied (retry_after 5 s, when those 2 leave), at 110 s allowed (the 2 are gone: 1 of
 * 104 s and this 1 held, remaining 1; next when the first leaves: 4 s). */
static const char fast_sw_cfg[] =
    "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"sliding_window\", \"limit\": 3, "
    "\"window\": 10}]}]}";

START_TEST(fast_path_decides_a_sliding_window)
{
    pair p;
    pair_new(&p, fast_sw_cfg, "fastsw:");
    rld_redis_store_general(p.rst, 2);
    rl_decision d;
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(acquire(p.red, "user=a", FP(1), S(100), 0, 0, &d), RL_OK);
        ck_assert(d.allowed);
    }
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(1));
    ck_assert_int_eq(acquire(p.red, "user=a", FP(1), S(104), 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    ck_assert_int_eq(tu_status(&d, 0)->reset_after, S(10));
    ck_assert_int_eq(tu_status(&d, 0)->next, S(6));
    ck_assert_int_eq(acquire(p.red, "user=a", FP(1), S(105), 0, 0, &d), RL_OK);
    ck_assert(!d.allowed);
    ck_assert_int_eq(d.retry_after, S(5));
    ck_assert_int_eq(acquire(p.red, "user=a", FP(1), S(110), 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(1));
    ck_assert_int_eq(tu_status(&d, 0)->next, S(4));
    pair_free(&p);
}
END_TEST

/* A concurrency limit is decided by the fast path too, its reservation recorded there, asked for
 * it alone: limit 2, retry 3 s. Two pass, each with a reservation; the third is denied (retry
 * 3 s, remaining 0); the first released, the next passes at once; both reservations can be
 * released once and no more. */
static const char fast_cc_cfg[] =
    "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"concurrency\", \"limit\": 2, "
    "\"retry\": 3}]}]}";

START_TEST(fast_path_decides_a_concurrency_limit)
{
    pair p;
    pair_new(&p, fast_cc_cfg, "fastcc:");
    rld_redis_store_general(p.rst, 2);
    rl_decision d;
    rl_err err;
    char id[2][RL_RESERVATION_ID];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(acquire(p.red, "user=a", FP(1), S(100), 0, 0, &d), RL_OK);
        ck_assert(d.allowed);
        ck_assert(d.reservation[0]);
        memcpy(id[i], d.reservation, sizeof id[i]);
    }
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    ck_assert_int_eq(tu_status(&d, 0)->next, S(3));
    ck_assert_int_eq(acquire(p.red, "user=a", FP(1), S(101), 0, 0, &d), RL_OK);
    ck_assert(!d.allowed);
    ck_assert_int_eq(d.retry_after, S(3));
    ck_assert_int_eq(rl_release(p.red, id[0], S(102), &err), RL_OK);
    ck_assert_int_eq(acquire(p.red, "user=a", FP(1), S(102), 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    ck_assert_int_eq(rl_release(p.red, id[1], S(103), &err), RL_OK);
    ck_assert_int_eq(rl_release(p.red, id[1], S(103), &err), RL_ENOTFOUND);
    ck_assert_int_eq(acquire(p.red, "user=a", FP(1), S(103), 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    pair_free(&p);
}
END_TEST

/* The same with the Redis side deciding runs of 1 to 12 requests in one call
 * (rl_acquire_many: their scripts in one write, run in order): the answers must be those of
 * deciding them one by one. */
/* The same with dimensions and dollars: rules counting d0, d1 or usd beside the others,
 * requests with random usage of model m, settlements with random actual usage. */
START_TEST(differential_replay_usage)
{
    uint64_t seed = 0x05a9e000u + (uint64_t)_i;
    char prefix[40];
    snprintf(prefix, sizeof prefix, "diffu%" PRIx64 ":", seed);
    replay_dims = 1;
    replay(seed, _i % NTYPES, STEPS, prefix, 0);
    replay_dims = 0;
}
END_TEST

START_TEST(differential_replay_batched)
{
    uint64_t seed = 0xba7c0000u + (uint64_t)_i;
    char prefix[40];
    snprintf(prefix, sizeof prefix, "batch%" PRIx64 ":", seed);
    functions = _i & 1; /* FCALL and EVALSHA in turn */
    replay(seed, _i % NTYPES, STEPS, prefix, 12);
    functions = 0;
}
END_TEST

/* 12 decisions in one rl_acquire_many: a bucket of 5 (1 a second) for user a, asked 8 times,
 * and user b asked 4 times, all at t = 0. */
static void twelve_at_once(rl_limiter *lim, rl_decision d[12])
{
    char buf[12][64];
    rl_descriptor ds[12][2];
    rl_request req[12];
    rl_acquisition x[12];
    rl_err errs[12];
    for (int i = 0; i < 12; i++) {
        req[i] = (rl_request){.desc = ds[i],
                              .ndesc = descs(i < 8 ? "user=a" : "user=b", buf[i], 64, ds[i]),
                              .cost = RL_FP_ONE,
                              .now = 0};
        x[i] = (rl_acquisition){&req[i], &d[i], &errs[i], 0};
    }
    rl_acquire_many(lim, x, 12);
    for (int i = 0; i < 12; i++) {
        ck_assert_msg(x[i].rc == RL_OK, "decision %d: %s", i, errs[i].msg);
        rl_decision_done(&d[i]);
    }
}

/* Worked out by hand: a's first 5 take the bucket's 5 tokens, its next 3 wait 1 s for one;
 * b's 4 leave it 1 of 5. */
static void check_twelve(const rl_decision d[12])
{
    for (int i = 0; i < 12; i++) {
        int allowed = i < 5 || i >= 8;
        ck_assert_msg(d[i].allowed == allowed, "decision %d: allowed %d", i, d[i].allowed);
        ck_assert_int_eq(d[i].retry_after, allowed ? 0 : RL_NS_PER_SEC);
        const rl_rule_status *st = tu_status(&d[i], 0);
        int64_t left = i < 5 ? 4 - i : i < 8 ? 0 : 12 - i;
        ck_assert_int_eq(st->remaining, left * RL_FP_ONE);
    }
}

/* A batch whose calls are long: 40 rules (4 levels of 10) make each call over 350 arguments
 * (past what a call keeps on the stack). Worked out by hand: buckets of 1 that refill in 1 s, so of
 * three requests for one user the first is let through and the next two wait 1 s. */
START_TEST(many_decisions_with_long_calls)
{
    char json[16384];
    size_t n = (size_t)snprintf(json, sizeof json, "{\"levels\": [");
    for (int l = 0; l < 4; l++) {
        n += (size_t)snprintf(json + n, sizeof json - n, "%s{\"name\": \"u%d\", \"rules\": [",
                              l ? ", " : "", l);
        for (int i = 0; i < 10; i++)
            n += (size_t)snprintf(json + n, sizeof json - n,
                                  "%s{\"type\": \"token_bucket\", \"name\": \"b%d\", "
                                  "\"capacity\": 1, \"per_second\": 1}",
                                  i ? ", " : "", l * 10 + i);
        n += (size_t)snprintf(json + n, sizeof json - n, "]}");
    }
    snprintf(json + n, sizeof json - n, "]}");
    rl_registry *reg = rl_registry_new();
    rl_limiter *lim = redis_limiter(reg, json, "long:", 0, NULL);
    char buf[3][64];
    rl_descriptor ds[3][4];
    rl_request req[3];
    rl_decision d[3];
    rl_err errs[3];
    rl_acquisition x[3];
    for (int i = 0; i < 3; i++) {
        req[i] = (rl_request){.desc = ds[i],
                              .ndesc = descs("u0=a,u1=a,u2=a,u3=a", buf[i], 64, ds[i]),
                              .cost = RL_FP_ONE,
                              .now = 0};
        x[i] = (rl_acquisition){&req[i], &d[i], &errs[i], 0};
    }
    rl_acquire_many(lim, x, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(x[i].rc == RL_OK, "decision %d: %s", i, errs[i].msg);
        ck_assert_int_eq(d[i].napplied, 40);
        ck_assert_int_eq(d[i].allowed, i == 0);
        ck_assert_int_eq(d[i].retry_after, i == 0 ? 0 : RL_NS_PER_SEC);
        rl_decision_done(&d[i]);
    }
    rl_limiter_free(lim);
    rl_registry_free(reg);
}
END_TEST

START_TEST(many_decisions_share_one_write)
{
    static const char json[] =
        "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", "
        "\"capacity\": 5, \"per_second\": 1}]}]}";
    rl_registry *reg = rl_registry_new();
    rl_store *st;
    rl_limiter *lim = redis_limiter(reg, json, "many:", 0, &st);
    rl_decision d[12];
    rld_redis_health h0, h1;
    ck_assert_int_eq(acquire(lim, "user=warm", RL_FP_ONE, 0, 0, 0, &d[0]), RL_OK); /* loaded */
    rld_redis_store_health(st, &h0);
    twelve_at_once(lim, d);
    rld_redis_store_health(st, &h1);
    check_twelve(d);
    ck_assert_uint_eq(h1.calls - h0.calls, 12);
    ck_assert_uint_eq(h1.writes - h0.writes, 1);

    /* the scripts and the states gone (a restart without persistence): each call is made
     * again on its own, by EVAL, and the answers are the same */
    freeReplyObject(rt_redis_cmd(&srv, "SCRIPT FLUSH"));
    freeReplyObject(rt_redis_cmd(&srv, "FLUSHALL"));
    twelve_at_once(lim, d);
    check_twelve(d);
    rl_limiter_free(lim);
    rl_registry_free(reg);
}
END_TEST

/* The same on a Redis Cluster: the levels' states lie in other slots, mostly on other primaries,
 * so a denial by a later level gives back what the earlier ones took; every answer must still
 * be the memory store's. Every type that can live on a cluster (not the plug-in's). */
/* Usage on a cluster: reservations settled per dimension by undo scripts, slot by slot. */
START_TEST(differential_replay_usage_cluster)
{
    replay_dims = 1;
    for (int t = 0; t < NTYPES - 1; t++) {
        uint64_t seed = 0xc1a5e000u + (uint64_t)t;
        char prefix[40];
        snprintf(prefix, sizeof prefix, "clu%" PRIx64 ":", seed);
        replay(seed, t, STEPS, prefix, 0);
    }
    replay_dims = 0;
}
END_TEST

START_TEST(differential_replay_cluster)
{
    for (int t = 0; t < NTYPES - 1; t++) { /* one cluster for a trace of each type */
        uint64_t seed = 0xc1a50000u + (uint64_t)(_i * NTYPES + t);
        char prefix[40];
        snprintf(prefix, sizeof prefix, "cl%" PRIx64 ":", seed);
        replay(seed, t, STEPS, prefix, 0);
    }
}
END_TEST

/* The same with the cache of denials on (on a cluster a denial's earlier slots are given back
 * by undo.lua, which announces them). */
START_TEST(differential_replay_cluster_deny_cache)
{
    deny_cache = 1;
    for (int t = 0; t < NTYPES - 1; t++) {
        uint64_t seed = 0xc1dc0000u + (uint64_t)t;
        char prefix[40];
        snprintf(prefix, sizeof prefix, "cldc%" PRIx64 ":", seed);
        replay(seed, t, STEPS, prefix, 0);
    }
    deny_cache = 0;
}
END_TEST

/* On a cluster, a rule type with state but no refund is refused: a decision across nodes may
 * have to give back what it took. */
START_TEST(cluster_refuses_types_that_cannot_give_back)
{
    rl_err err = {{0}};
    rl_registry *reg = rl_registry_new();
    ck_assert_int_eq(rl_registry_load_plugin(reg, plugin_path("rule_leaky_bucket"), &err), RL_OK);
    rld_settings set;
    rl_config *cfg = config_of(reg,
                               "{\"levels\": [{\"name\": \"u\", \"rules\": [{\"type\": "
                               "\"token_bucket\", \"capacity\": 5, \"per_second\": 1}, "
                               "{\"type\": \"leaky_bucket\", \"capacity\": 5, "
                               "\"per_second\": 1}]}]}",
                               &set);
    rld_settings_clear(&set);
    rld_redis_addr seed;
    memset(&seed, 0, sizeof seed);
    snprintf(seed.host, sizeof seed.host, "127.0.0.1");
    seed.port = cl.node[0].port;
    rld_redis_options o = {.url = NULL, .timeout_ms = 1000, .pool = 1, .cluster = &seed,
                           .ncluster = 1};
    rl_store *st;
    rl_limiter *lim = NULL;
    ck_assert_int_eq(rld_redis_store_new(&o, &st, &err), RL_OK);
    ck_assert_int_eq(rl_limiter_new(cfg, st, &lim, &err), RL_EINVAL);
    ck_assert_msg(strstr(err.msg, "levels[0].rules[1]: rule type leaky_bucket cannot give back"),
                  "%s", err.msg);
    rl_registry_free(reg);
}
END_TEST

/* Traces aimed at the bounds of the scripts' fast paths, through both stores: every answer the
 * same. Times are ns, amounts fp units. */
typedef struct bstep {
    rl_ns t;
    rl_fp cost;
    unsigned flags;
} bstep;

typedef struct bcase {
    const char *what, *rules;
    bstep steps[8];
} bcase;

#define P2(b) ((rl_ns)1 << (b))
#define T4E18 ((rl_ns)4000000000 * 1000000000)

static const bcase boundaries[] = {
    /* emptied at 0; at 5363222357 ns, (now - last) * rate = 5363222357 * 18645507 = 1e17 - 1,
     * which rounds to used * 1e9 = 1e17 in doubles: 99999999 units come back, not 100000000 */
    {"refill one below the rounded product",
     "{\"type\": \"token_bucket\", \"capacity\": 100, \"per_second\": 18.645507}",
     {{1000, FP(100), 0}, {1000 + 5363222357, 1, RL_DRY_RUN}, {1000 + 5363222358, 1, 0}, {-1, 0, 0}}},
    {"the same, today",
     "{\"type\": \"token_bucket\", \"capacity\": 100, \"per_second\": 18.645507}",
     {{(rl_ns)1700000000 * 1000000000, FP(100), 0},
      {(rl_ns)1700000000 * 1000000000 + 5363222357, 1, RL_DRY_RUN},
      {-1, 0, 0}}},
    /* a bucket that takes years to refill, idle for about 2^53 ns (104 days) and beyond */
    {"idle across 2^53 ns",
     "{\"type\": \"token_bucket\", \"capacity\": 1000000000000, \"per_second\": 0.000001}",
     {{(rl_ns)1700000000 * 1000000000, FP(1000000000000), 0},
      {(rl_ns)1700000000 * 1000000000 + P2(53) - 1, 1, RL_DRY_RUN},
      {(rl_ns)1700000000 * 1000000000 + P2(53), 1, RL_DRY_RUN},
      {(rl_ns)1700000000 * 1000000000 + P2(53) + 1, FP(5), 0},
      {(rl_ns)1700000000 * 1000000000 + P2(60), FP(5), 0},
      {-1, 0, 0}}},
    {"gcra idle across 2^53 ns", "{\"type\": \"gcra\", \"per_second\": 0.000001, \"burst\": 5}",
     {{(rl_ns)1700000000 * 1000000000, FP(5), 0},
      {(rl_ns)1700000000 * 1000000000 + P2(53) - 1, FP(1), 0},
      {(rl_ns)1700000000 * 1000000000 + P2(53) + 7, FP(1), 0},
      {-1, 0, 0}}},
    /* now crossing 4e18 ns, where the scripts stop using 32-bit halves of now */
    {"token bucket across 4e18 ns",
     "{\"type\": \"token_bucket\", \"capacity\": 3, \"per_second\": 1.5}",
     {{T4E18 - 700000000, FP(2), 0},
      {T4E18 - 1, FP(1), 0},
      {T4E18, FP(1), 0},
      {T4E18 + 300000000, FP(1), 0},
      {T4E18 + 1300000000, FP(1), 0},
      {-1, 0, 0}}},
    {"windows across 4e18 ns",
     "{\"type\": \"fixed_window\", \"limit\": 2, \"window\": 0.7}, "
     "{\"type\": \"sliding_window_counter\", \"limit\": 3, \"window\": 0.9}, "
     "{\"type\": \"sliding_window\", \"limit\": 3, \"window\": 1.1}, "
     "{\"type\": \"gcra\", \"per_second\": 2, \"burst\": 3}",
     {{T4E18 - 700000000, FP(1), 0},
      {T4E18 - 1, FP(1), 0},
      {T4E18, FP(1), 0},
      {T4E18 + 300000000, FP(1), 0},
      {T4E18 + 1300000000, FP(1), 0},
      {-1, 0, 0}}},
    /* windows of 2^50 ns and one less, on either side of the scripts' fast remainder */
    {"windows of about 2^50 ns",
     "{\"type\": \"fixed_window\", \"limit\": 2, \"window\": 1125899.906842624}, "
     "{\"type\": \"sliding_window_counter\", \"limit\": 3, \"window\": 1125899.906842623}",
     {{(rl_ns)1700000000 * 1000000000, FP(1), 0},
      {(rl_ns)1700000000 * 1000000000 + P2(49), FP(1), 0},
      {(rl_ns)1700000000 * 1000000000 + P2(50), FP(2), 0},
      {(rl_ns)1700000000 * 1000000000 + P2(51) + 5, FP(1), 0},
      {-1, 0, 0}}},
    /* huge quotas and rates: products far beyond 2^99 */
    {"huge rates and amounts",
     "{\"type\": \"token_bucket\", \"capacity\": 1000000000000, \"per_second\": 999999999999.999999}, "
     "{\"type\": \"gcra\", \"per_second\": 1000000000000, \"burst\": 1000000000000}, "
     "{\"type\": \"sliding_window_counter\", \"limit\": 1000000000000, \"window\": 31622400}",
     {{(rl_ns)1700000000 * 1000000000, FP(999999999999), 0},
      {(rl_ns)1700000000 * 1000000000 + 1, FP(999999999999), 0},
      {(rl_ns)1700000000 * 1000000000 + 1000000, FP(3), 0},
      {(rl_ns)1700000000 * 1000000000 + P2(53), FP(1), 0},
      {-1, 0, 0}}},
};

START_TEST(boundaries_alike)
{
    const bcase *c = &boundaries[_i];
    char json[1024], prefix[32];
    snprintf(json, sizeof json, "{\"levels\": [{\"name\": \"k\", \"rules\": [%s]}]}", c->rules);
    snprintf(prefix, sizeof prefix, "bound%d:", _i);
    pair p;
    pair_new(&p, json, prefix);
    for (const bstep *st = c->steps; st->t >= 0; st++) {
        rl_decision a, b;
        char ctx[200];
        snprintf(ctx, sizeof ctx, "%s, t=%" PRId64, c->what, st->t);
        ck_assert_int_eq(acquire(p.mem, "k=x", st->cost, st->t, st->flags, 0, &a), RL_OK);
        ck_assert_int_eq(acquire(p.red, "k=x", st->cost, st->t, st->flags, 0, &b), RL_OK);
        compare(&a, &b, ctx);
    }
    pair_free(&p);
}
END_TEST

/* The same with the cache of denials on, one by one and batched, one trace per type of the
 * first rule, a denied request coming again within its wait: a request answered from the cache
 * is denied as the memory store denies it (the settlements and releases of the trace forget
 * what they give back to). Most traces have some answered from the cache (RL_TRACE=1 says how
 * many); denial_cached_then_refunded_through_another_instance makes sure of it. */
START_TEST(differential_replay_deny_cache)
{
    char prefix[40];
    snprintf(prefix, sizeof prefix, "diffdc%d:", _i);
    deny_cache = 1;
    replay_local = 0;
    replay(0xdc000u + (uint64_t)_i, _i % NTYPES, STEPS, prefix, (size_t)(_i / NTYPES) * 12);
    deny_cache = 0;
    if (getenv("RL_TRACE"))
        fprintf(stderr, "trace: %" PRIu64 " answered from the cache\n", replay_local);
}
END_TEST

/* The same with the scripts called as a Functions library (FCALL: the library's top level
 * run once, not on each call), one trace per type of the first rule. */
START_TEST(differential_replay_functions)
{
    char prefix[40];
    snprintf(prefix, sizeof prefix, "difffn%d:", _i);
    functions = 1;
    replay(0x5ba0000u + (uint64_t)_i, _i % NTYPES, STEPS, prefix, 0);
    functions = 0;
}
END_TEST

/* ---- Functions or EVALSHA ------------------------------------------------------------------ */

/* The calls of a command so far, from INFO commandstats (0 when never called). */
static long long command_calls(const char *cmd)
{
    redisReply *r = rt_redis_cmd(&srv, "INFO commandstats");
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    char pat[64];
    snprintf(pat, sizeof pat, "cmdstat_%s:calls=", cmd);
    const char *p = strstr(r->str, pat);
    long long n = p ? strtoll(p + strlen(pat), NULL, 10) : 0;
    freeReplyObject(r);
    return n;
}

static long long library_count(void)
{
    redisReply *r = rt_redis_cmd(&srv, "FUNCTION LIST LIBRARYNAME ratelimitd_*");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    long long n = (long long)r->elements;
    freeReplyObject(r);
    return n;
}

/* By default every script goes by EVALSHA, loaded once, and by EVAL after NOSCRIPT. With
 * "functions" and Redis 7 the decision goes as FCALL of a library loaded once, which is loaded
 * again when Redis lost it; where Redis refuses Functions (here: not permitted to the user, as
 * a Redis before 7 knows no FCALL) the store turns to EVALSHA by itself and decides the same. */
START_TEST(functions_or_evalsha)
{
    const char *json = "{\"levels\": [{\"name\": \"k\", \"rules\": [{\"type\": "
                       "\"token_bucket\", \"capacity\": 3, \"per_second\": 1}]}]}";
    rl_registry *reg = rl_registry_new();
    rl_store *st;
    rl_decision d;
    freeReplyObject(rt_redis_cmd(&srv, "CONFIG RESETSTAT"));
    freeReplyObject(rt_redis_cmd(&srv, "SCRIPT FLUSH"));
    rl_limiter *lim = redis_limiter(reg, json, "sha:", 0, &st);
    ck_assert_int_eq(acquire(lim, "k=a", FP(1), S(1), 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    /* the decision script loaded before its first call */
    ck_assert_int_eq(command_calls("script|load"), 1);
    ck_assert_int_eq(command_calls("evalsha"), 1);
    ck_assert_int_eq(command_calls("fcall"), 0);
    ck_assert_int_eq(rld_pool_functions(rld_redis_store_pool(st)), 0);
    freeReplyObject(rt_redis_cmd(&srv, "SCRIPT FLUSH"));
    ck_assert_int_eq(acquire(lim, "k=a", FP(1), S(1), 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(1));
    /* the scripts gone (as after a restart): NOSCRIPT, then called again by EVAL with the
     * script's text, which puts it back in the cache */
    ck_assert_int_eq(command_calls("script|load"), 1);
    ck_assert_int_eq(command_calls("evalsha"), 2);
    ck_assert_int_eq(command_calls("eval"), 1);
    ck_assert_int_eq(command_calls("fcall"), 0);
    ck_assert_int_eq(library_count(), 0);
    rl_limiter_free(lim);

    functions = 1;
    freeReplyObject(rt_redis_cmd(&srv, "CONFIG RESETSTAT"));
    lim = redis_limiter(reg, json, "fn:", 0, &st);
    ck_assert_int_eq(acquire(lim, "k=a", FP(1), S(1), 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(library_count(), 1);
    /* the first FCALL found no function: loaded, then called again */
    ck_assert_int_eq(command_calls("fcall"), 2);
    ck_assert_int_eq(command_calls("evalsha"), 0);
    ck_assert_int_eq(rld_pool_functions(rld_redis_store_pool(st)), 1);

    /* the library gone (as after a restart without persistence): loaded again on the way */
    freeReplyObject(rt_redis_cmd(&srv, "FUNCTION FLUSH"));
    ck_assert_int_eq(acquire(lim, "k=a", FP(1), S(1), 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(1));
    ck_assert_int_eq(library_count(), 1);
    rl_limiter_free(lim);

    /* Functions refused (to a user not permitted them): EVALSHA, the same state and answers */
    redisReply *r = rt_redis_cmd(&srv, "ACL SETUSER old on >pw ~* &* +@all -fcall -function");
    ck_assert_int_eq(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    freeReplyObject(rt_redis_cmd(&srv, "FUNCTION FLUSH"));
    char url[sizeof srv.url];
    memcpy(url, srv.url, sizeof url);
    snprintf(srv.url, sizeof srv.url, "redis://old:pw@127.0.0.1:%d/0", srv.port);
    lim = redis_limiter(reg, json, "fn:", 0, &st);
    memcpy(srv.url, url, sizeof url);
    long long fcalls = command_calls("fcall");
    ck_assert_int_eq(acquire(lim, "k=a", FP(1), S(1), 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    ck_assert_int_eq(acquire(lim, "k=a", FP(1), S(1), 0, 0, &d), RL_OK);
    ck_assert(!d.allowed);
    ck_assert_int_eq(d.retry_after, S(1));
    ck_assert_int_eq(rld_pool_functions(rld_redis_store_pool(st)), 0);
    ck_assert_int_eq(command_calls("evalsha"), 2);
    ck_assert_int_eq(command_calls("fcall"), fcalls); /* refused calls are not counted */
    ck_assert_int_eq(library_count(), 0);
    rl_limiter_free(lim);
    functions = 0;
    rl_registry_free(reg);
}
END_TEST

/* ---- the scripts' integer arithmetic against C's ------------------------------------------- */

__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

static char *i128_str(i128 v, char *buf)
{
    char tmp[48];
    int n = 0, neg = v < 0;
    u128 u = neg ? -(u128)v : (u128)v;
    do {
        tmp[n++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u);
    int k = 0;
    if (neg)
        buf[k++] = '-';
    while (n)
        buf[k++] = tmp[--n];
    buf[k] = '\0';
    return buf;
}

/* Applies the library's operations to pairs of values given as decimal strings. */
static const char *arith_harness =
    "\nlocal out = {}\n"
    "for i = 1, #ARGV, 2 do\n"
    "  local a, b = N(ARGV[i]), N(ARGV[i + 1])\n"
    "  local q, r = divmod(a, b)\n"
    "  local pos = ispos(b) and b or 1\n"
    "  out[#out + 1] = table.concat({S(add(a, b)), S(sub(a, b)), S(mul(a, b)), S(q), S(r),\n"
    "    tostring(cmp(a, b)), S(ceil_div(mul(a, a), pos)), S(used_add(a, b)),\n"
    "    S(add_sat(a, ispos(b) and b or 0))}, ' ')\n"
    "end\n"
    "return out\n";

/* A value of a magnitude picked at random, often at the edges of limbs and of 2^53. */
static i128 rnd_value(uint64_t *s)
{
    static const int64_t edges[] = {0,
                                    1,
                                    9999999,
                                    10000000,
                                    10000001,
                                    99999999999999,
                                    100000000000000,
                                    9007199254740991,
                                    9007199254740992,
                                    9007199254740993,
                                    4503599627370496,
                                    1125899906842624,
                                    4000000000000000000,
                                    INT64_MAX,
                                    1000000000,
                                    60000000000};
    i128 v;
    uint64_t k = rng_next(s) % 4;
    if (k == 0)
        v = edges[rng_next(s) % (sizeof edges / sizeof edges[0])] + (i128)(rng_next(s) % 3) - 1;
    else if (k == 1)
        v = (i128)(rng_next(s) >> (rng_next(s) % 64));
    else if (k == 2)
        v = (i128)(rng_next(s) >> 1) * (i128)(rng_next(s) >> (rng_next(s) % 64));
    else
        v = (i128)(rng_next(s) % 100000000);
    return rng_next(s) % 4 == 0 ? -v : v;
}

/* The lib as the store's scripts hold it (lib.lua, the built-in rule types' ports and ports)
 * followed by harness, in buf. */
static void lib_ports_with(const char *ports, const char *harness, char *buf, size_t cap)
{
    char *s = rld_lua_with_lib(ports, harness);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_lt(strlen(s), cap);
    strcpy(buf, s);
    free(s);
}

static void lib_with(const char *harness, char *buf, size_t cap)
{
    lib_ports_with(NULL, harness, buf, cap);
}

START_TEST(lua_arithmetic_matches_c)
{
    static char script[131072];
    lib_with(arith_harness, script, sizeof script);

    redisContext *c = rt_redis_connect(&srv);
    uint64_t s = 0xa817;
    for (int round = 0; round < 40; round++) {
        enum { PAIRS = 250 };
        static char bufs[2 * PAIRS][48];
        const char *argv[3 + 2 * PAIRS];
        i128 a[PAIRS], b[PAIRS];
        argv[0] = "EVAL";
        argv[1] = script;
        argv[2] = "0";
        for (int i = 0; i < PAIRS; i++) {
            a[i] = rnd_value(&s);
            do
                b[i] = rnd_value(&s);
            while (b[i] == 0);
            uint64_t shape = rng_next(&s) % 6;
            if (shape < 2) /* 128-bit dividends, as the rules make them */
                a[i] = (a[i] % ((i128)1 << 62)) * (b[i] % ((i128)1 << 62));
            else if (shape == 2) {
                /* exact multiples beyond 2^53 and their neighbours: the double estimate of the
                 * quotient may fall one short */
                b[i] = ((i128)1 << 40) + (i128)(rng_next(&s) % (((uint64_t)1 << 50) - (1u << 30)));
                a[i] = (i128)(1 + rng_next(&s) % (1u << 20)) * b[i] + (i128)(rng_next(&s) % 3) - 1;
            }
            if (a[i] > (i128)INT64_MAX * 4 || a[i] < -(i128)INT64_MAX * 4)
                a[i] = a[i] % ((i128)1 << 100);
            argv[3 + 2 * i] = i128_str(a[i], bufs[2 * i]);
            argv[4 + 2 * i] = i128_str(b[i], bufs[2 * i + 1]);
        }
        redisReply *r = redisCommandArgv(c, 3 + 2 * PAIRS, argv, NULL);
        ck_assert_ptr_nonnull(r);
        ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "%s",
                      r->type == REDIS_REPLY_ERROR ? r->str : "?");
        for (int i = 0; i < PAIRS; i++) {
            i128 x = a[i], y = b[i], never = INT64_MAX, used_max = (i128)4 * RL_FP_MAX;
            i128 pos = y > 0 ? y : 1, sq = x * x / pos + (x * x % pos != 0);
            i128 yy = y > 0 ? y : 0;
            char e[9][48], want[128];
            i128_str(x + y, e[0]);
            i128_str(x - y, e[1]);
            /* products of values beyond 2^64 would overflow 128 bits: not compared */
            if (x > -((i128)1 << 62) && x < ((i128)1 << 62) && y > -((i128)1 << 64) &&
                y < ((i128)1 << 64))
                i128_str(x * y, e[2]);
            else
                snprintf(e[2], sizeof e[2], "*");
            i128_str(x / y, e[3]);
            i128_str(x % y, e[4]);
            snprintf(e[5], sizeof e[5], "%d", (x > y) - (x < y));
            if (x > -((i128)1 << 62) && x < ((i128)1 << 62))
                i128_str(sq >= never ? never : sq, e[6]);
            else
                snprintf(e[6], sizeof e[6], "*");
            i128_str(x > used_max - y ? used_max : x + y, e[7]);
            i128_str(x > never - yy ? never : x + yy, e[8]);
            char got[9][160];
            const char *g = r->element[i]->str;
            for (int k = 0; k < 9; k++) {
                size_t l = strcspn(g, " ");
                snprintf(got[k], sizeof got[k], "%.*s", (int)l, g);
                g += l + (g[l] == ' ');
            }
            snprintf(want, sizeof want, "%.48s %.48s", bufs[2 * i], bufs[2 * i + 1]);
            for (int k = 0; k < 9; k++)
                ck_assert_msg(e[k][0] == '*' || strcmp(got[k], e[k]) == 0, "%s op %d: lua %s, C %s",
                              want, k, got[k], e[k]);
        }
        freeReplyObject(r);
    }
    redisFree(c);
}
END_TEST

/* Runs script with ARGV (no keys); fails on an error reply. */
static redisReply *eval_args(redisContext *c, const char *script, int n, const char **args)
{
    const char *argv[3 + 1024];
    ck_assert_int_le(n, 1024);
    argv[0] = "EVAL";
    argv[1] = script;
    argv[2] = "0";
    memcpy(argv + 3, args, (size_t)n * sizeof *args);
    redisReply *r = redisCommandArgv(c, 3 + n, argv, NULL);
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "%s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
    return r;
}

/* The products and quotients done in doubles: mdm(a, b, c, d) = floor((a * b + c) / d) and its
 * remainder, ceil_mdm, and the sign of a * b - d * e, against __int128, around every bound of
 * their fast paths (products near 2^53 and 2^99, quotients near 2^51, divisors near 2^50,
 * offsets near 2^50) and beyond them, where the big integers take over. */
static const char *mdm_harness =
    "\nlocal out = {}\n"
    "for i = 1, #ARGV, 5 do\n"
    "  local a, b, c, d, e = N(ARGV[i]), N(ARGV[i + 1]), N(ARGV[i + 2]), N(ARGV[i + 3]), "
    "N(ARGV[i + 4])\n"
    "  local q, r = mdm(a, b, c, d)\n"
    "  out[#out + 1] = table.concat({S(q), S(r), S(ceil_mdm(a, b, c, d)), "
    "tostring(cmp_prod(a, b, d, e))}, ' ')\n"
    "end\n"
    "return out\n";

/* A non-negative value below 2^63 of a random shape, often at a bound. */
static i128 rnd_edge(uint64_t *s, int bits_max)
{
    static const int bounds[] = {20, 26, 30, 32, 49, 50, 51, 52, 53, 54, 60, 62};
    uint64_t k = rng_next(s) % 5;
    i128 v;
    if (k == 0) { /* a power of two and its neighbours */
        int b = bounds[rng_next(s) % (sizeof bounds / sizeof bounds[0])];
        v = ((i128)1 << b) + (i128)(rng_next(s) % 5) - 2;
    } else if (k == 1) {
        v = (i128)(rng_next(s) % 100000);
    } else if (k == 2) {
        v = (i128)(rng_next(s) >> (rng_next(s) % 64));
    } else if (k == 3) {
        v = (i128)(rng_next(s) % 1000) * 1000000000; /* whole seconds, fp units */
    } else {
        v = (i128)(rng_next(s) >> (64 - 53)); /* below 2^53 */
    }
    if (v < 0)
        v = 0;
    i128 max = ((i128)1 << bits_max) - 1;
    return v > max ? v % ((i128)1 << bits_max) : v;
}

START_TEST(lua_products_match_c)
{
    static char script[131072];
    lib_with(mdm_harness, script, sizeof script);
    redisContext *c = rt_redis_connect(&srv);
    uint64_t s = 0x3d3d;
    for (int round = 0; round < 40; round++) {
        enum { ROWS = 200 };
        static char bufs[5 * ROWS][48];
        const char *args[5 * ROWS];
        i128 v[ROWS][5];
        for (int i = 0; i < ROWS; i++) {
            i128 a = rnd_edge(&s, 63), b = rnd_edge(&s, 63);
            if (rng_next(&s) % 2) { /* products around 2^53 and 2^99 */
                int t = rng_next(&s) % 2 ? 53 : 99;
                int ba = 1 + (int)(rng_next(&s) % (uint64_t)(t - 1));
                a = ((i128)1 << ba) + (i128)(rng_next(&s) % 3) - 1;
                b = (((i128)1 << (t - ba)) + (i128)(rng_next(&s) % 7) - 3);
                if (b < 0)
                    b = 0;
            }
            if (a > (i128)INT64_MAX)
                a = INT64_MAX;
            if (b > (i128)INT64_MAX)
                b = INT64_MAX;
            i128 cabs = rnd_edge(&s, 56);
            i128 cc = rng_next(&s) % 2 ? cabs : -cabs;
            if (a * b + cc < 0)
                cc = -(a * b);
            i128 d = rnd_edge(&s, 62);
            if (d == 0)
                d = 1;
            i128 e = rnd_edge(&s, 63);
            if (rng_next(&s) % 4 == 0 && d > 0) /* products equal, or one apart */
                e = (a * b) / d + (i128)(rng_next(&s) % 3) - 1;
            if (e < 0)
                e = 0;
            if (e > (i128)INT64_MAX)
                e = INT64_MAX;
            i128 row[5] = {a, b, cc, d, e};
            for (int k = 0; k < 5; k++) {
                v[i][k] = row[k];
                args[5 * i + k] = i128_str(row[k], bufs[5 * i + k]);
            }
        }
        redisReply *r = eval_args(c, script, 5 * ROWS, args);
        ck_assert_uint_eq(r->elements, ROWS);
        for (int i = 0; i < ROWS; i++) {
            i128 a = v[i][0], b = v[i][1], cc = v[i][2], d = v[i][3], e = v[i][4];
            i128 x = a * b + cc, q = x / d, rem = x % d, never = INT64_MAX;
            i128 cq = q + (rem != 0);
            i128 pd = d * e;
            char want[200], qs[48], rs[48], cs[48];
            snprintf(want, sizeof want, "%s %s %s %d", i128_str(q, qs), i128_str(rem, rs),
                     i128_str(cq >= never ? never : cq, cs), (a * b > pd) - (a * b < pd));
            ck_assert_msg(strcmp(r->element[i]->str, want) == 0,
                          "mdm(%s, %s, %s, %s), cmp_prod(.., %s): lua %s, C %s", args[5 * i],
                          args[5 * i + 1], args[5 * i + 2], args[5 * i + 3], args[5 * i + 4],
                          r->element[i]->str, want);
        }
        freeReplyObject(r);
    }
    redisFree(c);
}
END_TEST

/* Times relative to a now: a decimal time (T) made relative and back, its 32-bit halves and
 * back, the start of its window of length w, and now % w; against C, for nows of every range
 * (0, small, near 2^53, today, near 4e18 where the halves stop, up to INT64_MAX) and times
 * near now and far from it. */
static const char *time_harness =
    "\nclock(ARGV[1])\n"
    "local out = {}\n"
    "for i = 2, #ARGV, 2 do\n"
    "  local t, w = rel_of_dec(ARGV[i]), N(ARGV[i + 1])\n"
    "  local hi, lo = halves_of_rel(t)\n"
    "  local m = now_mod(w)\n"
    "  out[#out + 1] = table.concat({S(t), dec_of_rel(t), S(hi), S(lo), "
    "S(rel_of_halves(hi, lo)), S(start_of(w, t)), m and S(m) or '-', S(sat_time(t))}, ' ')\n"
    "end\n"
    "return out\n";

START_TEST(lua_times_match_c)
{
    static char script[131072];
    lib_with(time_harness, script, sizeof script);
    redisContext *c = rt_redis_connect(&srv);
    uint64_t s = 0x7173;
    const i128 never = INT64_MAX;
    for (int round = 0; round < 60; round++) {
        enum { ROWS = 150 };
        static char bufs[1 + 2 * ROWS][48];
        const char *args[1 + 2 * ROWS];
        i128 v[ROWS][2], now;
        uint64_t k = rng_next(&s) % 7;
        if (k == 0)
            now = (i128)(rng_next(&s) % 3);
        else if (k == 1)
            now = (i128)(rng_next(&s) % 100000000000ull);
        else if (k == 2)
            now = ((i128)1 << 53) + (i128)(rng_next(&s) % 2000000000) - 1000000000;
        else if (k == 3)
            now = (i128)1700000000 * 1000000000 + (i128)(rng_next(&s) % 100000000000000000ull);
        else if (k == 4)
            now = (i128)4000000000 * 1000000000 + (i128)(rng_next(&s) % 2000000000000ull) -
                  1000000000000;
        else if (k == 5)
            now = never - (i128)(rng_next(&s) % 1000000000000ull);
        else
            now = (i128)(rng_next(&s) >> 1);
        /* now within a few hundred ns of a multiple of w0, where the estimate of now / w0 from
         * doubles (now rounded by up to 256 ns) can land on the wrong side */
        i128 w0 = 1000000 + (i128)(rng_next(&s) % (((uint64_t)1 << 50) - 1000000));
        if (now > 1000 && rng_next(&s) % 2) {
            i128 m = now / w0 * w0 + (i128)(rng_next(&s) % 601) - 300;
            now = m > 0 ? m : now;
        }
        args[0] = i128_str(now, bufs[0]);
        for (int i = 0; i < ROWS; i++) {
            i128 t;
            uint64_t kt = rng_next(&s) % 6;
            if (kt == 0)
                t = now + (i128)(rng_next(&s) % 20000000000ull) - 10000000000; /* seconds away */
            else if (kt == 1) /* near 2^52 .. 2^53 away, where numbers stop */
                t = now + (rng_next(&s) % 2 ? 1 : -1) *
                              (((i128)1 << (52 + rng_next(&s) % 2)) +
                               (i128)(rng_next(&s) % 2000000000000ull) - 1000000000000);
            else if (kt == 2)
                t = (i128)(rng_next(&s) % 3);
            else if (kt == 3)
                t = never - (i128)(rng_next(&s) % 3);
            else if (kt == 4) /* days or years away */
                t = now + (i128)(rng_next(&s) % 2 ? 1 : -1) *
                              (i128)(rng_next(&s) % 40000000) * 1000000000;
            else
                t = (i128)(rng_next(&s) >> 1);
            if (t < 0)
                t = (i128)(rng_next(&s) % 1000);
            if (t > never)
                t = never;
            i128 w = 0;
            uint64_t kw = rng_next(&s) % 5;
            if (kw == 4)
                w = w0;
            else if (kw == 0)
                w = 1000000 + (i128)(rng_next(&s) % 1000);
            else if (kw == 1) /* near 2^50, where now_mod stops */
                w = ((i128)1 << 50) + (i128)(rng_next(&s) % 2001) - 1000;
            else if (kw == 2)
                w = (i128)(1 + rng_next(&s) % 31622400) * 1000000000;
            else
                w = 1000000 + (i128)(rng_next(&s) % 31622400000000000ull);
            v[i][0] = t;
            v[i][1] = w;
            args[1 + 2 * i] = i128_str(t, bufs[1 + 2 * i]);
            args[2 + 2 * i] = i128_str(w, bufs[2 + 2 * i]);
        }
        redisReply *r = eval_args(c, script, 1 + 2 * ROWS, args);
        ck_assert_uint_eq(r->elements, ROWS);
        for (int i = 0; i < ROWS; i++) {
            i128 t = v[i][0], w = v[i][1], rel = t - now;
            char e[8][48], want[400];
            i128_str(rel, e[0]);
            i128_str(t, e[1]);
            i128_str(t >> 32, e[2]);
            i128_str(t & 0xffffffff, e[3]);
            i128_str(rel, e[4]);
            i128_str(t - t % w - now, e[5]);
            /* now_mod answers below 4e18 for 1e6 <= w < 2^50, nil otherwise */
            if (now < (i128)4000000000 * 1000000000 && w < ((i128)1 << 50))
                i128_str(now % w, e[6]);
            else
                snprintf(e[6], sizeof e[6], "-");
            i128_str(rel > never - now ? never - now : rel, e[7]);
            snprintf(want, sizeof want, "%s %s %s %s %s %s %s %s", e[0], e[1], e[2], e[3], e[4],
                     e[5], e[6], e[7]);
            ck_assert_msg(strcmp(r->element[i]->str, want) == 0,
                          "now %s, t %s, w %s: lua %s, C %s", args[0], args[1 + 2 * i],
                          args[2 + 2 * i], r->element[i]->str, want);
        }
        freeReplyObject(r);
    }
    redisFree(c);
}
END_TEST

/* ---- TTLs ---------------------------------------------------------------------------------- */

/* Milliseconds of Redis's clock. */
static int64_t redis_ms(void)
{
    redisReply *r = rt_redis_cmd(&srv, "TIME");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    int64_t ms =
        strtoll(r->element[0]->str, NULL, 10) * 1000 + strtoll(r->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(r);
    return ms;
}

static long long pttl_on(const rt_redis *node, const char *key)
{
    redisReply *r = rt_redis_cmd(node, "PTTL %s", key);
    ck_assert_int_eq(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static long long pttl(const char *key) { return pttl_on(&srv, key); }

/* Every key on node has a TTL (once housekeeping has run): -1 (none) or a key without one
 * fails. Returns the keys seen. */
static size_t check_ttls_on(const rt_redis *node)
{
    char cursor[32] = "0";
    size_t n = 0;
    do {
        redisReply *r = rt_redis_cmd(node, "SCAN %s COUNT 1000", cursor);
        ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const char *key = r->element[1]->element[i]->str;
            long long t = pttl_on(node, key);
            ck_assert_msg(t > 0 || t == -2, "key %s has no TTL (%lld)", key, t);
            n++;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return n;
}

static size_t check_all_ttls(void) { return check_ttls_on(&srv); }

/* The same on a cluster: the keys of traces of every type that can live there, decisions given
 * back across slots included, on every primary. */
START_TEST(every_key_written_has_a_ttl_on_a_cluster)
{
    for (int t = 0; t < NTYPES - 1; t++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "ttl%d:", t);
        replay(0x77780000u + (uint64_t)t, t, 150, prefix, 0);
    }
    size_t n = 0;
    for (int i = 0; i < 3; i++) {
        size_t k = check_ttls_on(&cl.node[i]);
        ck_assert_uint_gt(k, 0);
        n += k;
    }
    ck_assert_uint_gt(n, 20);
}
END_TEST

START_TEST(every_key_written_has_a_ttl)
{
    /* every kind of key a trace writes, with every rule type */
    for (int t = 0; t < 7; t++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "ttl%d:", t);
        replay(0x77770000u + (uint64_t)t, t, 150, prefix, 0);
    }
    ck_assert_uint_gt(check_all_ttls(), 20);
}
END_TEST

/* With Redis's clock, a state key lives until its state is that of a new key. Expected values
 * (ms) worked out by hand for a cost of 4 taken at Redis time T:
 *   token bucket 10, 1/s     used 4, refilled after 4 s            -> 4000
 *   gcra 2/s burst 10        TAT = T + 2 s                          -> 2000
 *   sliding window 5 / 20 s  the entry of T expires at T + 20 s     -> 20000
 *   sliding window counter   cur counts until its window + 2 windows: (20000, 40000]
 *   fixed window 5 / 3600 s  until the end of T's hour
 *   concurrency 3            held: reservation TTL 30 s + 60 s grace -> 90000
 * A second of slack covers the time between the decision and PTTL. */
START_TEST(ttl_follows_the_state)
{
    rl_registry *reg = rl_registry_new();
    rl_limiter *lim = redis_limiter(
        reg,
        "{\"reservation_ttl\": 30, \"levels\": ["
        "{\"name\": \"tb\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 10, "
        "\"per_second\": 1}]},"
        "{\"name\": \"gcra\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 2, \"burst\": 10}]},"
        "{\"name\": \"sw\", \"rules\": [{\"type\": \"sliding_window\", \"limit\": 5, \"window\": "
        "20}]},"
        "{\"name\": \"swc\", \"rules\": [{\"type\": \"sliding_window_counter\", \"limit\": 5, "
        "\"window\": 20}]},"
        "{\"name\": \"fw\", \"rules\": [{\"type\": \"fixed_window\", \"limit\": 5, \"window\": "
        "3600}]},"
        "{\"name\": \"cc\", \"rules\": [{\"type\": \"concurrency\", \"limit\": 3}]}]}",
        "real:", 1, NULL);
    rl_decision d;
    int64_t before = redis_ms();
    ck_assert_int_eq(acquire(lim, "tb=u,gcra=u,sw=u,swc=u,fw=u,cc=u", FP(4), 0, 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert(d.reservation[0]); /* the concurrency slot is held by a reservation */
    int64_t now = redis_ms();
    long long v;
    v = pttl("real:tb:0:u");
    ck_assert_msg(v > 3000 && v <= 4000, "token bucket TTL %lld", v);
    v = pttl("real:gcra:0:u");
    ck_assert_msg(v > 1000 && v <= 2000, "gcra TTL %lld", v);
    v = pttl("real:sw:0:u");
    ck_assert_msg(v > 19000 && v <= 20000, "sliding window TTL %lld", v);
    v = pttl("real:swc:0:u");
    ck_assert_msg(v > 19000 && v <= 40000, "sliding window counter TTL %lld", v);
    int64_t hour_end = (now / 3600000 + 1) * 3600000;
    v = pttl("real:fw:0:u");
    ck_assert_msg(v > 0 && v <= 3600000 &&
                      (before / 3600000 != now / 3600000 || llabs(v - (hour_end - now)) <= 1000),
                  "fixed window TTL %lld, hour ends in %lld", v, (long long)(hour_end - now));
    v = pttl("real:cc:0:u");
    ck_assert_msg(v > 89000 && v <= 90000, "concurrency TTL %lld", v);
    char rk[64];
    snprintf(rk, sizeof rk, "real:r:%s", d.reservation);
    v = pttl(rk);
    ck_assert_msg(v > 89000 && v <= 90000, "reservation TTL %lld", v);
    /* the decision leaves the index's TTL alone; housekeeping keeps it twice a reservation's */
    ck_assert_int_eq(pttl("real:resv"), -1);
    rl_limiter_tick(lim, 0);
    v = pttl("real:resv");
    ck_assert_msg(v > 179000 && v <= 180000, "reservation index TTL %lld", v);

    /* released, the slot's state is a new key's: it goes at once */
    rl_err err;
    ck_assert_int_eq(rl_release(lim, d.reservation, 0, &err), RL_OK);
    usleep(20000);
    redisReply *r = rt_redis_cmd(&srv, "EXISTS real:cc:0:u %s", rk);
    ck_assert_int_eq(r->integer, 0);
    freeReplyObject(r);

    rl_limiter_tick(lim, 0); /* the heartbeat */
    v = pttl("real:fleet");
    ck_assert_msg(v > 9000 && v <= 10000, "fleet TTL %lld", v);
    check_all_ttls();
    rl_limiter_free(lim);
    rl_registry_free(reg);
}
END_TEST

/* ---- reservations across instances --------------------------------------------------------- */

/* The cache of denials over two instances with a manual clock. A bucket of 10 refilling 1 a
 * second: A reserves 8 and takes 2 at t = 0, so a cost of 1 waits 1 s. Worked out by hand: at
 * t = 0.5 a cost of 1 (and of 3) is denied from the cache with 0.5 s left and no call; a dry
 * run goes to Redis (it asks for the statuses), which says 0.5 remains, and a cost of 0.5 goes
 * to Redis and fits (0.5 refilled). B settles the reservation
 * at 3 and gives 5 back: A hears of it and the next cost of 1 passes at once, leaving 4. */
static uint64_t calls_of(rl_store *st)
{
    rld_redis_health h;
    rld_redis_store_health(st, &h);
    return h.calls;
}

START_TEST(denial_cached_then_refunded_through_another_instance)
{
    const char *json = "{\"reservation_ttl\": 5, \"levels\": [{\"name\": \"user\", \"rules\": ["
                       "{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": 1}]}]}";
    rl_registry *reg = rl_registry_new();
    rl_store *sa, *sb;
    deny_cache = 1;
    rl_limiter *a = redis_limiter(reg, json, "dc:", 0, &sa);
    rl_limiter *b = redis_limiter(reg, json, "dc:", 0, &sb);
    deny_cache = 0;
    rl_decision d;
    rl_settlement st;
    rl_err err;
    char id[RL_RESERVATION_ID];

    ck_assert_int_eq(acquire(a, "user=u", FP(8), S(0), RL_RESERVE, 0, &d), RL_OK);
    ck_assert(d.allowed);
    memcpy(id, d.reservation, sizeof id);
    ck_assert_int_eq(acquire(a, "user=u", FP(2), S(0), 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(acquire(a, "user=u", FP(1), S(0), 0, 0, &d), RL_OK);
    ck_assert(!d.allowed);
    ck_assert_int_eq(d.retry_after, S(1));
    ck_assert_uint_eq(rld_redis_store_deny_answered(sa, 0), 0);

    /* from the cache: no call, the wait counting down, the same answer's shape */
    uint64_t calls = calls_of(sa);
    ck_assert_int_eq(acquire(a, "user=u", FP(1), S(0) + S(1) / 2, 0, 0, &d), RL_OK);
    ck_assert(!d.allowed);
    ck_assert_int_eq(d.retry_after, S(1) / 2);
    ck_assert_int_eq(d.blocked, 0);
    ck_assert(d.applied[0].has_status);
    ck_assert_int_eq(tu_status(&d, 0)->limit, FP(10));
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    ck_assert_int_eq(tu_status(&d, 0)->reset_after, S(10) - S(1) / 2);
    ck_assert_int_eq(acquire(a, "user=u", FP(3), S(0) + S(1) / 2, 0, 0, &d), RL_OK);
    ck_assert(!d.allowed);
    ck_assert_uint_eq(calls_of(sa), calls);
    ck_assert_uint_eq(rld_redis_store_deny_answered(sa, 0), 2);

    /* a dry run asks for the statuses, which Redis has: 0.5 refilled */
    ck_assert_int_eq(acquire(a, "user=u", FP(1), S(0) + S(1) / 2, RL_DRY_RUN, 0, &d), RL_OK);
    ck_assert(!d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(1) / 2);
    ck_assert_uint_eq(calls_of(sa), calls + 1);

    /* a smaller cost is Redis's to decide: 0.5 has refilled */
    ck_assert_int_eq(acquire(a, "user=u", FP(1) / 2, S(0) + S(1) / 2, 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_uint_eq(calls_of(sa), calls + 2);

    /* B gives 5 back: A forgets its denial as soon as it hears */
    uint64_t heard = rld_redis_store_deny_messages(sa);
    ck_assert_int_eq(rl_settle(b, id, FP(3), S(0) + S(1) / 2, &st, &err), RL_OK);
    ck_assert_int_eq(st.refunded, FP(5));
    for (int i = 0; rld_redis_store_deny_messages(sa) == heard; i++) {
        ck_assert_msg(i < 200, "A did not hear of the refund in 2 s");
        usleep(10000);
    }
    ck_assert_int_eq(acquire(a, "user=u", FP(1), S(0) + S(1) / 2, 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(4));
    ck_assert_uint_eq(rld_redis_store_deny_answered(sa, 0), 2);
    rl_limiter_free(a);
    rl_limiter_free(b);
    rl_registry_free(reg);
}
END_TEST

/* A reservation's record is one string (lib.lua's read_resv): written out by hand for a bucket
 * of 10 refilling 1 a second and a concurrency limit of 1 in level user, a reservation of 8 at
 * t = 0 with a TTL of 5 s: not settled, cost 8, taken at 0, expiring at 5e9 ns, no amounts by
 * unit, then each rule's "RH|taken|tag|slot|shard|level|key" (R 1: it can be settled, H 1: it
 * holds slots; the concurrency rule takes one slot). Settled, only its flag changes. A
 * reservation kept as a hash, as older builds wrote it, is settled, released and expired as
 * well: an upgrade loses none in flight. */
static char *get_str(const char *key)
{
    redisReply *r = rt_redis_cmd(&srv, "GET %s", key);
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    return v;
}

/* Rewrites reservation id (prefix o:) as an older build kept it: a hash with the same TTL. */
static void as_hash(const char *id, const char *cost, const char *at, const char *exp,
                    const char *tb_record)
{
    char rk[64];
    snprintf(rk, sizeof rk, "o:r:%s", id);
    long long ttl = pttl(rk);
    ck_assert_int_gt(ttl, 0);
    freeReplyObject(rt_redis_cmd(&srv, "DEL %s", rk));
    redisReply *r = rt_redis_cmd(&srv,
                                 "HSET %s cost %s at %s exp %s settled 0 i1 %s i2 %s n 2", rk,
                                 cost, at, exp, tb_record, "01|1000000|cc|1|0|user|u");
    ck_assert_int_eq(r->integer, 7);
    freeReplyObject(r);
    freeReplyObject(rt_redis_cmd(&srv, "PEXPIRE %s %lld", rk, ttl));
}

START_TEST(reservation_record_and_older_hash)
{
    const char *json = "{\"reservation_ttl\": 5, \"levels\": [{\"name\": \"user\", \"rules\": ["
                       "{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": 1},"
                       "{\"type\": \"concurrency\", \"limit\": 1}]}]}";
    rl_registry *reg = rl_registry_new();
    rl_limiter *a = redis_limiter(reg, json, "o:", 0, NULL);
    rl_decision d;
    rl_settlement st;
    rl_stats stats;
    rl_err err;
    char rk[64];

    ck_assert_int_eq(acquire(a, "user=u", FP(8), S(0), RL_RESERVE, 0, &d), RL_OK);
    ck_assert(d.allowed);
    snprintf(rk, sizeof rk, "o:r:%s", d.reservation);
    char *v = get_str(rk);
    ck_assert_str_eq(v, "0\n8000000\n0\n5000000000\n\n10|8000000|tb|0|0|user|u\n"
                        "01|1000000|cc|1|0|user|u");
    free(v);
    long long ttl = pttl(rk);
    ck_assert_int_eq(rl_settle(a, d.reservation, FP(3), S(1), &st, &err), RL_OK);
    ck_assert_int_eq(st.refunded, FP(5));
    v = get_str(rk);
    ck_assert_str_eq(v, "1\n8000000\n0\n5000000000\n\n10|8000000|tb|0|0|user|u\n"
                        "01|1000000|cc|1|0|user|u");
    free(v);
    ck_assert_int_le(pttl(rk), ttl);
    ck_assert_int_gt(pttl(rk), ttl - 1000);
    ck_assert_int_eq(rl_settle(a, d.reservation, FP(3), S(1), &st, &err), RL_ESETTLED);
    ck_assert_int_eq(rl_release(a, d.reservation, S(1), &err), RL_OK);

    /* at t = 1: 8 taken, 1 refilled, 5 given back: 8 left; a hash settled at 2 and released */
    ck_assert_int_eq(acquire(a, "user=u", FP(8), S(1), RL_RESERVE, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    char id[RL_RESERVATION_ID];
    memcpy(id, d.reservation, sizeof id);
    as_hash(id, "8000000", "1000000000", "6000000000", "10|8000000|tb|0|0|user|u");
    ck_assert_int_eq(acquire(a, "user=u", FP(1), S(1), 0, 0, &d), RL_OK);
    ck_assert(!d.allowed); /* the hash's slot is held */
    ck_assert_int_eq(rl_settle(a, id, FP(2), S(2), &st, &err), RL_OK);
    ck_assert_int_eq(st.reserved, FP(8));
    ck_assert_int_eq(st.refunded, FP(6));
    snprintf(rk, sizeof rk, "o:r:%s", id);
    redisReply *r = rt_redis_cmd(&srv, "HGET %s settled", rk);
    ck_assert_str_eq(r->str, "1");
    freeReplyObject(r);
    ck_assert_int_eq(rl_settle(a, id, FP(2), S(2), &st, &err), RL_ESETTLED);
    ck_assert_int_eq(rl_release(a, id, S(2), &err), RL_OK);
    ck_assert_int_eq(rl_release(a, id, S(2), &err), RL_ENOTFOUND);

    /* at t = 2: 0 + 1 refilled + 6 back = 7 left; a hash nobody ends expires at 7 */
    ck_assert_int_eq(acquire(a, "user=u", FP(7), S(2), RL_RESERVE, 0, &d), RL_OK);
    ck_assert(d.allowed);
    as_hash(d.reservation, "7000000", "2000000000", "7000000000", "10|7000000|tb|0|0|user|u");
    rl_limiter_tick(a, S(6));
    rl_limiter_stats(a, &stats);
    ck_assert_uint_eq(stats.reservations_expired, 0);
    ck_assert_int_eq(acquire(a, "user=u", FP(1), S(6), 0, 0, &d), RL_OK);
    ck_assert(!d.allowed); /* still held */
    rl_limiter_tick(a, S(7));
    rl_limiter_stats(a, &stats);
    ck_assert_uint_eq(stats.reservations_expired, 1);
    /* the slot is back, the 7 are not (expired: settled at its reserved cost); 10 used at 2,
     * 5 refilled by 7: 5 left, 1 more leaves 4 */
    ck_assert_int_eq(acquire(a, "user=u", FP(1), S(7), 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(4));
    rl_limiter_free(a);
    rl_registry_free(reg);
}
END_TEST

START_TEST(refund_and_release_through_another_instance)
{
    const char *json = "{\"reservation_ttl\": 5, \"levels\": [{\"name\": \"user\", \"rules\": ["
                       "{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": 1},"
                       "{\"type\": \"concurrency\", \"limit\": 1}]}]}";
    rl_registry *reg = rl_registry_new();
    rl_limiter *a = redis_limiter(reg, json, "x:", 0, NULL);
    rl_limiter *b = redis_limiter(reg, json, "x:", 0, NULL);
    rl_decision d;
    rl_settlement st;
    rl_stats stats;
    rl_err err;
    char id1[RL_RESERVATION_ID], id2[RL_RESERVATION_ID];

    /* A reserves 8 and holds the only slot */
    ck_assert_int_eq(acquire(a, "user=u", FP(8), S(0), RL_RESERVE, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(2));
    ck_assert_int_eq(tu_status(&d, 1)->remaining, 0);
    memcpy(id1, d.reservation, sizeof id1);
    ck_assert_int_eq(acquire(a, "user=u", FP(1), S(0), 0, 0, &d), RL_OK);
    ck_assert(!d.allowed);
    ck_assert_int_eq(d.blocked, 1);
    ck_assert_int_eq(d.retry_after, S(1));

    /* B settles it at 3: 5 go back to the bucket A sees */
    ck_assert_int_eq(rl_settle(b, id1, FP(3), S(0), &st, &err), RL_OK);
    ck_assert_int_eq(st.reserved, FP(8));
    ck_assert_int_eq(st.refunded, FP(5));
    ck_assert_int_eq(st.charged, 0);
    ck_assert_int_eq(acquire(a, "user=u", FP(1), S(0), RL_DRY_RUN, 0, &d), RL_OK);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(7));
    ck_assert(!d.allowed); /* the slot is still held */

    /* B releases it: A gets the slot */
    ck_assert_int_eq(rl_release(b, id1, S(0), &err), RL_OK);
    ck_assert_int_eq(acquire(a, "user=u", FP(7), S(0), 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    memcpy(id2, d.reservation, sizeof id2);
    ck_assert(id2[0]);
    ck_assert_int_eq(rl_release(b, id1, S(0), &err), RL_ENOTFOUND);
    ck_assert_int_eq(rl_settle(b, id1, FP(1), S(0), &st, &err), RL_ENOTFOUND);
    ck_assert_int_eq(rl_settle(b, id2, FP(7), S(0), &st, &err), RL_OK);
    ck_assert_int_eq(st.refunded, 0);
    ck_assert_int_eq(rl_settle(a, id2, FP(7), S(0), &st, &err), RL_ESETTLED);

    /* A dies holding the slot; B's housekeeping expires the reservation at t = 5 (not 4) */
    rl_limiter_free(a);
    rl_limiter_tick(b, S(4));
    ck_assert_int_eq(acquire(b, "user=u", FP(1), S(4), 0, 0, &d), RL_OK);
    ck_assert(!d.allowed);
    ck_assert_int_eq(d.blocked, 1);
    rl_limiter_tick(b, S(5));
    rl_limiter_stats(b, &stats);
    ck_assert_uint_eq(stats.reservations_expired, 1); /* settled, but it held a slot */
    ck_assert_uint_eq(stats.reservations_active, 0);
    /* used 10 at t = 0, 5 refilled by t = 5: 1 more leaves 4 */
    ck_assert_int_eq(acquire(b, "user=u", FP(1), S(5), 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(4));
    ck_assert_int_eq(rl_release(b, id2, S(5), &err), RL_ENOTFOUND);
    rl_limiter_tick(b, S(5));
    rl_limiter_stats(b, &stats);
    ck_assert_uint_eq(stats.reservations_active, 1);
    rl_limiter_free(b);
    rl_registry_free(reg);
}
END_TEST

/* Charges saturate at the largest "used" amount (4e18 units) in both stores alike. */
START_TEST(charges_saturate_alike)
{
    const char *json =
        "{\"levels\": [{\"name\": \"k\", \"rules\": ["
        "{\"type\": \"token_bucket\", \"capacity\": 1000000000000, \"per_second\": 0.000001},"
        "{\"type\": \"gcra\", \"per_second\": 0.000001, \"burst\": 1000000000000},"
        "{\"type\": \"fixed_window\", \"limit\": 1000000000000, \"window\": 60},"
        "{\"type\": \"sliding_window_counter\", \"limit\": 1000000000000, \"window\": 60},"
        "{\"type\": \"sliding_window\", \"limit\": 1000000, \"window\": 60}]}]}";
    pair p;
    pair_new(&p, json, "sat:");
    char ids[6][2][RL_RESERVATION_ID];
    rl_decision x, y;
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(acquire(p.mem, "k=a", FP(1), S(1), RL_RESERVE, 0, &x), RL_OK);
        ck_assert_int_eq(acquire(p.red, "k=a", FP(1), S(1), RL_RESERVE, 0, &y), RL_OK);
        compare(&x, &y, "reserve");
        ck_assert(x.allowed);
        memcpy(ids[i][0], x.reservation, RL_RESERVATION_ID);
        memcpy(ids[i][1], y.reservation, RL_RESERVATION_ID);
    }
    for (int i = 0; i < 6; i++) {
        rl_settlement s1, s2;
        rl_err e;
        ck_assert_int_eq(rl_settle(p.mem, ids[i][0], RL_FP_MAX, S(2), &s1, &e), RL_OK);
        ck_assert_int_eq(rl_settle(p.red, ids[i][1], RL_FP_MAX, S(2), &s2, &e), RL_OK);
        ck_assert_int_eq(acquire(p.mem, "k=a", FP(1), S(3), RL_DRY_RUN, 0, &x), RL_OK);
        ck_assert_int_eq(acquire(p.red, "k=a", FP(1), S(3), RL_DRY_RUN, 0, &y), RL_OK);
        compare(&x, &y, "after a charge");
    }
    /* 6 charges of about 1e18 fp units each stop at 4e18; the last second refilled 1 fp unit:
     * remaining = 1e18 - 4e18 + 1 */
    ck_assert_int_eq(tu_status(&y, 0)->remaining, RL_FP_MAX - 4 * RL_FP_MAX + 1);
    pair_free(&p);
}
END_TEST

/* A key moved between tiers keeps what it used where the type at a position stays, starts
 * afresh where it changes, and a settlement only touches rules still of their type: the same
 * in both stores. */
START_TEST(tier_changes_alike)
{
    const char *json =
        "{\"levels\": [{\"name\": \"user\", \"tiered\": true}], \"tiers\": {"
        "\"free\": [{\"type\": \"token_bucket\", \"capacity\": 2, \"per_second\": 0.001}],"
        "\"pro\": [{\"type\": \"token_bucket\", \"capacity\": 5, \"per_second\": 0.001},"
        "{\"type\": \"concurrency\", \"limit\": 3}]},"
        "\"default_tier\": \"free\"}";
    pair p;
    pair_new(&p, json, "tiers:");
    rl_limiter *both[2] = {p.mem, p.red};
    rl_decision x, y;
    char ids[2][RL_RESERVATION_ID];
    rl_err err;
#define BOTH(call)                                                                                 \
    do {                                                                                           \
        for (int w_ = 0; w_ < 2; w_++) {                                                           \
            rl_limiter *L = both[w_];                                                              \
            rl_decision *D = w_ ? &y : &x;                                                         \
            (void)D;                                                                               \
            call;                                                                                  \
        }                                                                                          \
    } while (0)
    /* free: take 1 of 2, reserved */
    BOTH(ck_assert_int_eq(acquire(L, "user=k", FP(1), S(1), RL_RESERVE, 0, D), RL_OK));
    compare(&x, &y, "free");
    memcpy(ids[0], x.reservation, RL_RESERVATION_ID);
    memcpy(ids[1], y.reservation, RL_RESERVATION_ID);
    ck_assert_int_eq(tu_status(&x, 0)->remaining, FP(1));
    /* pro: the bucket keeps the 1 used: 5 - 1, plus 0.001 refilled in 1 s, minus 1 more */
    BOTH(ck_assert_int_eq(rl_quota_set(L, "k", "pro", NULL, &err), RL_OK));
    BOTH(ck_assert_int_eq(acquire(L, "user=k", FP(1), S(2), 0, 0, D), RL_OK));
    compare(&x, &y, "pro");
    ck_assert_int_eq(tu_status(&x, 0)->remaining, FP(3.001));
    /* custom: a fixed window where the bucket was starts empty */
    rl_registry *reg = p.reg;
    for (int w = 0; w < 2; w++) {
        json_t *arr =
            json_loads("[{\"type\": \"fixed_window\", \"limit\": 4, \"window\": 60}]", 0, NULL);
        rl_rules *rs;
        ck_assert_int_eq(rld_rules_from_json(arr, reg, NULL, &rs, &err), RL_OK);
        json_decref(arr);
        ck_assert_int_eq(rl_quota_set(both[w], "k", NULL, rs, &err), RL_OK);
    }
    BOTH(ck_assert_int_eq(acquire(L, "user=k", FP(1), S(3), 0, 0, D), RL_OK));
    compare(&x, &y, "custom");
    ck_assert_int_eq(tu_status(&x, 0)->remaining, FP(3));
    /* the free reservation's settlement finds a fixed window at its position: untouched */
    rl_settlement s1, s2;
    ck_assert_int_eq(rl_settle(p.mem, ids[0], 0, S(4), &s1, &err), RL_OK);
    ck_assert_int_eq(rl_settle(p.red, ids[1], 0, S(4), &s2, &err), RL_OK);
    ck_assert_int_eq(s1.refunded, s2.refunded);
    BOTH(ck_assert_int_eq(acquire(L, "user=k", FP(1), S(4), RL_DRY_RUN, 0, D), RL_OK));
    compare(&x, &y, "after the settlement");
    ck_assert_int_eq(tu_status(&x, 0)->remaining, FP(3));
    /* back to pro: the bucket's state was replaced, it starts full */
    BOTH(ck_assert_int_eq(rl_quota_set(L, "k", "pro", NULL, &err), RL_OK));
    BOTH(ck_assert_int_eq(acquire(L, "user=k", FP(1), S(5), 0, 0, D), RL_OK));
    compare(&x, &y, "pro again");
    ck_assert_int_eq(tu_status(&x, 0)->remaining, FP(4));
#undef BOTH
    pair_free(&p);
}
END_TEST

/* ---- shards -------------------------------------------------------------------------------- */

START_TEST(sharded_level_splits_the_quota)
{
    rl_registry *reg = rl_registry_new();
    rl_limiter *lim =
        redis_limiter(reg,
                      "{\"levels\": [{\"name\": \"global\", \"shards\": 4, \"rules\": [{\"type\": "
                      "\"token_bucket\", \"capacity\": 8, \"per_second\": 0.000001}]}]}",
                      "sh:", 0, NULL);
    rl_decision d;
    rl_settlement st;
    rl_err err;
    /* a reservation refunded in full goes back to the shard it came from */
    ck_assert_int_eq(acquire(lim, "global=all", FP(1), S(0), RL_RESERVE, 0, &d), RL_OK);
    ck_assert(d.allowed);
    ck_assert_int_eq(tu_status(&d, 0)->limit, FP(2));
    ck_assert_int_eq(rl_settle(lim, d.reservation, 0, S(0), &st, &err), RL_OK);
    /* 4 shards of 2: exactly 8 of 100 get through, wherever they land */
    int allowed = 0;
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(acquire(lim, "global=all", FP(1), S(0), 0, 0, &d), RL_OK);
        allowed += d.allowed;
    }
    ck_assert_int_eq(allowed, 8);
    for (int k = 0; k < 4; k++) {
        redisReply *r = rt_redis_cmd(&srv, "EXISTS sh:global:0.%d:all", k);
        ck_assert_int_eq(r->integer, 1);
        freeReplyObject(r);
    }
    /* the trade-off: a cost above a shard's share never fits, though the level's would */
    ck_assert_int_eq(acquire(lim, "global=all", FP(3), S(1000), 0, 0, &d), RL_OK);
    ck_assert_int_eq(d.retry_after, RL_WAIT_NEVER);
    rl_limiter_free(lim);
    rl_registry_free(reg);
}
END_TEST

/* On a cluster each shard of a sharded level has its own hash tag: the shards' states spread
 * over slots (so over primaries) while the rules of one shard share one; the quota splits as on
 * one Redis. 16 shards of one key: the chance that all of them land on one primary of three is
 * 3 / 3^16. */
START_TEST(sharded_level_spreads_on_a_cluster)
{
    rl_registry *reg = rl_registry_new();
    rl_limiter *lim =
        redis_limiter(reg,
                      "{\"levels\": [{\"name\": \"global\", \"shards\": 16, \"rules\": [{\"type\": "
                      "\"token_bucket\", \"capacity\": 32, \"per_second\": 0.000001}, "
                      "{\"type\": \"fixed_window\", \"limit\": 1000, \"window\": 3600}]}]}",
                      "shc:", 0, NULL);
    rl_decision d;
    int allowed = 0;
    for (int i = 0; i < 400; i++) {
        ck_assert_int_eq(acquire(lim, "global=all", FP(1), S(0), 0, 0, &d), RL_OK);
        allowed += d.allowed;
    }
    ck_assert_int_eq(allowed, 32); /* 16 shards of 2 */
    int owners[3] = {0};
    for (int k = 0; k < 16; k++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "shc:global:0.%d:{global.%d:all}", k, k);
        snprintf(b, sizeof b, "shc:global:1.%d:{global.%d:all}", k, k);
        redisReply *r = rt_redis_cmd(&cl.node[0], "CLUSTER KEYSLOT %s", a);
        int slot = (int)r->integer;
        freeReplyObject(r);
        r = rt_redis_cmd(&cl.node[0], "CLUSTER KEYSLOT %s", b);
        ck_assert_int_eq(r->integer, slot);
        freeReplyObject(r);
        int n = rt_cluster_owner(&cl, slot);
        ck_assert_int_ge(n, 0);
        r = rt_redis_cmd(&cl.node[n], "EXISTS %s %s", a, b);
        ck_assert_int_eq(r->integer, 2);
        freeReplyObject(r);
        owners[n] = 1;
    }
    ck_assert_int_ge(owners[0] + owners[1] + owners[2], 2);
    rl_limiter_free(lim);
    rl_registry_free(reg);
}
END_TEST

/* ---- many clients of several instances on one key ----------------------------------------- */

/* An instance of the service as the hammer sees it: something that decides one request. Two
 * limiters in this process now; two daemons over HTTP later. */
typedef struct instance {
    int (*acquire)(void *ctx); /* 1 allowed, 0 denied, -1 error */
    void *ctx;
} instance;

typedef struct hammer_run {
    const instance *inst;
    volatile int go, stop;
    uint64_t allowed, denied, errors;
} hammer_run;

static void *hammer_thread(void *arg)
{
    hammer_run *h = arg;
    while (!__atomic_load_n(&h->go, __ATOMIC_ACQUIRE))
        usleep(100);
    while (!__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE)) {
        int r = h->inst->acquire(h->inst->ctx);
        __atomic_add_fetch(r > 0    ? &h->allowed
                           : r == 0 ? &h->denied
                                    : &h->errors,
                           1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* Runs threads clients on each of n instances for ms milliseconds of Redis time, after
 * calling first (may be NULL) once. Returns the Redis time elapsed from before first to after
 * the last request, in ns. */
static rl_ns hammer(const instance *inst, size_t n, int threads, int ms, void (*first)(void),
                    uint64_t *allowed, uint64_t *denied, uint64_t *errors)
{
    hammer_run runs[8];
    pthread_t th[64];
    size_t nth = 0;
    ck_assert_uint_le(n, 8);
    for (size_t i = 0; i < n; i++) {
        runs[i] = (hammer_run){.inst = &inst[i]};
        for (int t = 0; t < threads; t++)
            ck_assert_int_eq(pthread_create(&th[nth++], NULL, hammer_thread, &runs[i]), 0);
    }
    int64_t t0 = redis_ms();
    if (first)
        first();
    for (size_t i = 0; i < n; i++)
        __atomic_store_n(&runs[i].go, 1, __ATOMIC_RELEASE);
    usleep((useconds_t)ms * 1000);
    for (size_t i = 0; i < n; i++)
        __atomic_store_n(&runs[i].stop, 1, __ATOMIC_RELEASE);
    for (size_t i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    int64_t t1 = redis_ms();
    *allowed = *denied = *errors = 0;
    for (size_t i = 0; i < n; i++) {
        *allowed += runs[i].allowed;
        *denied += runs[i].denied;
        *errors += runs[i].errors;
    }
    /* TIME has microseconds; the millisecond reads round the span up by at most 2 ms */
    return (rl_ns)(t1 - t0 + 2) * 1000000;
}

static int limiter_acquire(void *ctx)
{
    rl_decision d;
    int rc = acquire(ctx, "global=all", RL_FP_ONE, 0, 0, 0, &d);
    return rc != RL_OK ? -1 : d.allowed;
}

static rl_limiter *drained;

/* Takes the whole capacity at once: from then on the bucket is empty and every token it
 * refills goes to a client, unless every client stalls for the 4 s it takes to refill. */
static void drain(void)
{
    rl_decision d;
    ck_assert_int_eq(acquire(drained, "global=all", FP(400), 0, 0, 0, &d), RL_OK);
    ck_assert(d.allowed);
}

START_TEST(two_instances_share_one_bucket)
{
    /* capacity 400, 100/s: over the run no more than 400 + 100 x elapsed may pass, and since
     * the clients ask far faster than that, nearly all of it (400 of it at once). Tokens are
     * lost only between the last decision and the end of the span (the clients' joins and
     * the closing read of Redis's clock) and between its opening read and the drain: 90%
     * leaves 700 ms for those on a loaded machine, and still fails when either instance takes
     * twice (about 50%) or refills at half the rate (about 79%). */
    const char *json = "{\"levels\": [{\"name\": \"global\", \"rules\": [{\"type\": "
                       "\"token_bucket\", \"capacity\": 400, \"per_second\": 100}]}]}";
    rl_registry *reg = rl_registry_new();
    rl_limiter *a = redis_limiter(reg, json, "hammer:", 1, NULL);
    rl_limiter *b = redis_limiter(reg, json, "hammer:", 1, NULL);
    instance inst[2] = {{limiter_acquire, a}, {limiter_acquire, b}};
    uint64_t allowed, denied, errors;
    drained = a;
    rl_ns elapsed = hammer(inst, 2, 3, 3000, drain, &allowed, &denied, &errors);
    double bound = 400 + 100 * rl_ns_to_seconds(elapsed);
    allowed += 400;
    ck_assert_uint_eq(errors, 0);
    ck_assert_msg(denied > allowed,
                  "the clients did not outpace the bucket: %" PRIu64 " allowed, %" PRIu64 " denied",
                  allowed, denied);
    ck_assert_msg((double)allowed <= bound, "%" PRIu64 " allowed > %.1f", allowed, bound);
    ck_assert_msg((double)allowed >= 0.9 * bound, "%" PRIu64 " allowed < 90%% of %.1f", allowed,
                  bound);
    rl_limiter_free(a);
    rl_limiter_free(b);
    rl_registry_free(reg);
}
END_TEST

/* ---- quotas -------------------------------------------------------------------------------- */

/* The tier of key on lim, or "custom". */
static const char *tier_of(rl_limiter *lim, const char *key)
{
    const char *tier;
    rl_rules *rules;
    ck_assert_int_eq(rl_quota_get(lim, key, &tier, &rules), RL_OK);
    rl_rules_unref(rules);
    return tier ? tier : "custom";
}

/* Polls until key's tier on lim is want; fails after 10 s. */
static void wait_tier(rl_limiter *lim, const char *key, const char *want)
{
    for (int i = 0; i < 1000 && strcmp(tier_of(lim, key), want) != 0; i++)
        usleep(10000);
    ck_assert_str_eq(tier_of(lim, key), want);
}

START_TEST(quotas_reach_every_instance)
{
    const char *json =
        "{\"levels\": [{\"name\": \"user\", \"tiered\": true}], \"tiers\": {"
        "\"free\": [{\"type\": \"token_bucket\", \"capacity\": 2, \"per_second\": 1}],"
        "\"pro\": [{\"type\": \"token_bucket\", \"capacity\": 5, \"per_second\": 1}]},"
        "\"default_tier\": \"free\", \"quotas\": {\"vip\": \"pro\"}}";
    rl_registry *reg = rl_registry_new();
    rl_store *ra, *rb;
    rl_limiter *a = redis_limiter(reg, json, "q:", 0, &ra);
    rl_limiter *b = redis_limiter(reg, json, "q:", 0, &rb);
    rld_quota_follower *f;
    rl_err err;
    rl_decision d;
    ck_assert_int_eq(rld_redis_quota_follow(rb, b, &f, &err), RL_OK);
    for (int i = 0; i < 500 && rld_redis_quota_applied(f) == 0; i++)
        usleep(10000);
    ck_assert_uint_gt(rld_redis_quota_applied(f), 0);

    /* a tier, then custom rules, set through A, applied by B */
    ck_assert_int_eq(rld_redis_quota_put(ra, "alice", "pro", NULL, &err), RL_OK);
    wait_tier(b, "alice", "pro");
    json_t *rules =
        json_loads("[{\"type\": \"token_bucket\", \"capacity\": 7, \"per_second\": 1}]", 0, NULL);
    ck_assert_int_eq(rld_redis_quota_put(ra, "bob", NULL, rules, &err), RL_OK);
    json_decref(rules);
    wait_tier(b, "bob", "custom");
    ck_assert_int_eq(acquire(b, "user=bob", FP(1), S(0), RL_DRY_RUN, 0, &d), RL_OK);
    ck_assert_int_eq(tu_status(&d, 0)->limit, FP(7));

    /* deleted: back to the default tier, or to the configuration's quota for that key */
    int existed;
    ck_assert_int_eq(rld_redis_quota_delete(ra, "alice", &existed, &err), RL_OK);
    ck_assert(existed);
    wait_tier(b, "alice", "free");
    ck_assert_int_eq(rld_redis_quota_put(ra, "vip", "free", NULL, &err), RL_OK);
    wait_tier(b, "vip", "free");
    ck_assert_int_eq(rld_redis_quota_delete(ra, "vip", &existed, &err), RL_OK);
    wait_tier(b, "vip", "pro");
    ck_assert_int_eq(rld_redis_quota_delete(ra, "nobody", &existed, &err), RL_OK);
    ck_assert(!existed);

    /* an instance that starts later loads what is stored */
    rl_limiter *c = redis_limiter(reg, json, "q:", 0, NULL);
    size_t skipped = 1;
    ck_assert_int_eq(rld_redis_quota_sync(ra, c, &skipped, &err), RL_OK);
    ck_assert_uint_eq(skipped, 0);
    ck_assert_str_eq(tier_of(c, "bob"), "custom");
    ck_assert_str_eq(tier_of(c, "vip"), "pro");
    ck_assert_str_eq(tier_of(c, "alice"), "free");
    /* configuration, not state: the only key without a TTL */
    ck_assert_int_eq(pttl("q:quotas"), -1);

    /* Redis restarted (empty, as the test runs it without persistence): B subscribes again,
     * synchronises, and follows new changes */
    rt_redis_kill(&srv);
    rt_redis_restart(&srv);
    wait_tier(b, "bob", "free");
    int rc_;
    rc_ = rld_redis_quota_put(ra, "carol", "pro", NULL, &err);
    ck_assert_msg(rc_ == RL_OK, "%s", err.msg);
    wait_tier(b, "carol", "pro");

    rld_redis_quota_unfollow(f);
    rl_limiter_free(a);
    rl_limiter_free(b);
    rl_limiter_free(c);
    rl_registry_free(reg);
}
END_TEST

/* On a cluster: the quota hash lives where its slot says, and a change published through one
 * instance reaches subscribers on every primary (Redis Cluster carries PUBLISH to every node),
 * so the follower of another instance applies it wherever it subscribed. */
START_TEST(quotas_on_a_cluster)
{
    const char *json =
        "{\"levels\": [{\"name\": \"user\", \"tiered\": true}], \"tiers\": {"
        "\"free\": [{\"type\": \"token_bucket\", \"capacity\": 2, \"per_second\": 1}],"
        "\"pro\": [{\"type\": \"token_bucket\", \"capacity\": 5, \"per_second\": 1}]},"
        "\"default_tier\": \"free\"}";
    rl_registry *reg = rl_registry_new();
    rl_store *ra, *rb;
    rl_limiter *a = redis_limiter(reg, json, "q:", 0, &ra);
    rl_limiter *b = redis_limiter(reg, json, "q:", 0, &rb);
    rld_quota_follower *f;
    rl_err err;
    redisContext *sub[3];
    for (int i = 0; i < 3; i++) {
        sub[i] = rt_redis_connect(&cl.node[i]);
        redisReply *r = redisCommand(sub[i], "SUBSCRIBE q:quotas");
        ck_assert_ptr_nonnull(r);
        freeReplyObject(r);
    }
    ck_assert_int_eq(rld_redis_quota_follow(rb, b, &f, &err), RL_OK);
    for (int i = 0; i < 500 && rld_redis_quota_applied(f) == 0; i++)
        usleep(10000);
    ck_assert_uint_gt(rld_redis_quota_applied(f), 0);
    ck_assert_int_eq(rld_redis_quota_put(ra, "alice", "pro", NULL, &err), RL_OK);
    wait_tier(b, "alice", "pro");
    for (int i = 0; i < 3; i++) {
        struct timeval tv = {10, 0};
        redisSetTimeout(sub[i], tv);
        redisReply *m;
        ck_assert_int_eq(redisGetReply(sub[i], (void **)&m), REDIS_OK);
        ck_assert_int_eq(m->type, REDIS_REPLY_ARRAY);
        ck_assert_str_eq(m->element[0]->str, "message");
        ck_assert_str_eq(m->element[2]->str, "alice");
        freeReplyObject(m);
        redisFree(sub[i]);
    }
    redisReply *r = rt_redis_cmd(&cl.node[0], "CLUSTER KEYSLOT q:quotas");
    int owner = rt_cluster_owner(&cl, (int)r->integer);
    freeReplyObject(r);
    r = rt_redis_cmd(&cl.node[owner], "HGET q:quotas alice");
    ck_assert_str_eq(r->str, "{\"tier\":\"pro\"}");
    freeReplyObject(r);
    rld_redis_quota_unfollow(f);
    rl_limiter_free(a);
    rl_limiter_free(b);
    rl_registry_free(reg);
}
END_TEST

/* What a rule type's C side declares its Redis port takes (rl_rule_redis: the parameters, in
 * order, then as many computed values as it declares, and the state's layout version) is what
 * the port itself says (T.params, T.layout), for
 * every registered type with a port; every built-in port's tag belongs to a registered type,
 * and every built-in type with state has a port. */
static const char *port_harness =
    "local T = rule_type(ARGV[1])\n"
    "if not T then return {'none'} end\n"
    "local out = {tostring(T.layout)}\n"
    "for i = 1, #T.params do out[#out + 1] = T.params[i] end\n"
    "return out\n";

static void check_ports(rl_registry *reg, const char *script)
{
    redisContext *c = rt_redis_connect(&srv);
    size_t ported = 0;
    for (size_t i = 0; i < rl_registry_count(reg); i++) {
        const rl_rule_type *t = rl_registry_at(reg, i);
        const rl_rule_redis *port = t->api_version >= 2 ? t->redis : NULL;
        if (!port) {
            ck_assert_msg(t->state_size == 0, "%s keeps state and has no Redis port", t->name);
            continue;
        }
        ported++;
        redisReply *r = redisCommand(c, "EVAL %s 0 %s", script, port->tag);
        ck_assert_ptr_nonnull(r);
        ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "%s: %s", t->name,
                      r->type == REDIS_REPLY_ERROR ? r->str : "not an array");
        /* the values computed per call (rl_rule_redis.args, version 6) follow the parameters */
        size_t nargs = t->api_version >= 6 ? port->nargs : 0;
        ck_assert_msg(r->elements == 1 + port->nparams + nargs,
                      "%s: the port takes %zu parameters, C sends %zu", t->name, r->elements - 1,
                      port->nparams + nargs);
        ck_assert_msg(strtoul(r->element[0]->str, NULL, 10) == port->layout,
                      "%s: the port's layout %s, C's %u", t->name, r->element[0]->str,
                      port->layout);
        for (size_t j = 0; j < port->nparams; j++)
            ck_assert_msg(strcmp(r->element[1 + j]->str, port->params[j]) == 0,
                          "%s: parameter %zu is %s in the port, %s in C", t->name, j,
                          r->element[1 + j]->str, port->params[j]);
        freeReplyObject(r);
    }
    ck_assert_uint_ge(ported, 7);
    redisFree(c);
}

START_TEST(ports_match_their_declarations)
{
    static char script[131072];
    rl_err err = {{0}};
    rl_registry *reg = rl_registry_new();
    ck_assert_int_eq(rl_registry_load_plugin(reg, plugin_path("rule_leaky_bucket"), &err), RL_OK);
    const rl_rule_type *lk = rl_registry_find(reg, "leaky_bucket");
    ck_assert_ptr_nonnull(lk);
    ck_assert_ptr_nonnull(lk->redis->lua);
    /* the lib and the plug-in's port, as the store puts them together */
    lib_ports_with(lk->redis->lua, port_harness, script, sizeof script);
    check_ports(reg, script);
    for (size_t i = 0; rld_lua_ports[i].tag; i++) {
        size_t j = 0;
        while (j < rl_registry_count(reg) &&
               !(rl_registry_at(reg, j)->redis &&
                 strcmp(rl_registry_at(reg, j)->redis->tag, rld_lua_ports[i].tag) == 0))
            j++;
        ck_assert_msg(j < rl_registry_count(reg), "the port %s belongs to no built-in type",
                      rld_lua_ports[i].tag);
    }
    rl_registry_free(reg);
}
END_TEST

/* A Redis store refuses a rule type with state and no Redis port, naming it, and a registry
 * refuses a port whose tag is taken or whose parameters the type does not have. */
START_TEST(types_without_a_port_are_refused)
{
    rl_err err = {{0}};
    rl_registry *reg = rl_registry_new();
    ck_assert_int_eq(rl_registry_load_plugin(reg, plugin_path("rule_max_keys"), &err), RL_OK);
    rld_settings set;
    rl_config *cfg = config_of(reg,
                               "{\"levels\": [{\"name\": \"u\", \"rules\": [{\"type\": "
                               "\"max_keys\", \"limit\": 2}]}]}",
                               &set);
    rld_settings_clear(&set);
    ck_assert_int_eq(rld_redis_store_check_config(cfg, 0, &err), RL_EINVAL);
    ck_assert_str_eq(err.msg, "levels[0].rules[0]: rule type max_keys keeps state that the Redis "
                              "store cannot hold: it has no Redis port (rl_rule_type.redis with "
                              "its Lua text)");
    rl_store *st;
    rl_limiter *lim;
    rld_redis_options o = {.url = srv.url, .prefix = "refuse:", .timeout_ms = 1000, .pool = 1};
    ck_assert_int_eq(rld_redis_store_new(&o, &st, &err), RL_OK);
    ck_assert_int_eq(rl_limiter_new(cfg, st, &lim, &err), RL_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "rule type max_keys keeps state"));

    /* a built-in's tag, and a parameter the type does not have */
    static const char *const params[] = {"capacity", "per_second"}, *const bad[] = {"rate"};
    rl_rule_type t = *rl_registry_find(reg, "token_bucket");
    rl_rule_redis port = {.tag = "tb", .params = params, .nparams = 2, .layout = 1, .lua = ""};
    t.name = "tb_copy";
    t.redis = &port;
    ck_assert_int_eq(rl_register_rule_type(reg, &t), -1);
    port.tag = "tb_copy";
    port.params = bad;
    port.nparams = 1;
    ck_assert_int_eq(rl_register_rule_type(reg, &t), -1);
    port.tag = "Tb";
    port.params = params;
    port.nparams = 2;
    ck_assert_int_eq(rl_register_rule_type(reg, &t), -1);
    port.tag = "tb_copy";
    ck_assert_int_eq(rl_register_rule_type(reg, &t), 0);
    rl_registry_free(reg);
}
END_TEST

Suite *redis_store_suite(void);
Suite *redis_store_suite(void)
{
    Suite *s = suite_create("redis_store");
    TCase *tc = tcase_create("conformance");
    tcase_add_checked_fixture(tc, srv_up, srv_down);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, lua_arithmetic_matches_c);
    tcase_add_test(tc, lua_products_match_c);
    tcase_add_test(tc, lua_times_match_c);
    tcase_add_test(tc, ports_match_their_declarations);
    tcase_add_test(tc, types_without_a_port_are_refused);
    tcase_add_loop_test(tc, conformance_table, 0,
                        (int)(sizeof conformance / sizeof conformance[0]));
    suite_add_tcase(s, tc);

    /* the replays again with every call over TLS (one node) */
    tc = tcase_create("differential over TLS");
    tcase_add_checked_fixture(tc, tls_up, tls_down);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, differential_replay, 0, NTYPES);
    tcase_add_loop_test(tc, differential_replay_batched, 0, NTYPES);
    tcase_add_test(tc, many_decisions_share_one_write);
    tcase_add_loop_test(tc, differential_replay_deny_cache, 0, 2);
    suite_add_tcase(s, tc);

    tc = tcase_create("differential");
    tcase_add_checked_fixture(tc, srv_up, srv_down);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, differential_replay, 0, TRACES);
    tcase_add_loop_test(tc, differential_replay_general, 0, TRACES);
    tcase_add_loop_test(tc, differential_replay_fast, 0, 60);
    tcase_add_test(tc, fast_path_decides_the_default_shape);
    tcase_add_test(tc, fast_path_decides_a_sliding_window);
    tcase_add_test(tc, fast_path_decides_a_concurrency_limit);
    tcase_add_loop_test(tc, differential_replay_usage, 0, 2 * NTYPES);
    tcase_add_loop_test(tc, differential_replay_batched, 0, NTYPES);
    tcase_add_test(tc, many_decisions_share_one_write);
    tcase_add_test(tc, many_decisions_with_long_calls);
    tcase_add_loop_test(tc, differential_replay_functions, 0, NTYPES);
    tcase_add_loop_test(tc, differential_replay_deny_cache, 0, 2 * NTYPES);
    tcase_add_loop_test(tc, boundaries_alike, 0, (int)(sizeof boundaries / sizeof boundaries[0]));
    tcase_add_test(tc, charges_saturate_alike);
    tcase_add_test(tc, tier_changes_alike);
    suite_add_tcase(s, tc);

    tc = tcase_create("cluster");
    tcase_add_checked_fixture(tc, cl_up, cl_down);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, differential_replay_cluster, 0, 2);
    tcase_add_test(tc, differential_replay_cluster_deny_cache);
    tcase_add_test(tc, differential_replay_usage_cluster);
    tcase_add_test(tc, cluster_refuses_types_that_cannot_give_back);
    tcase_add_test(tc, quotas_on_a_cluster);
    tcase_add_test(tc, sharded_level_spreads_on_a_cluster);
    tcase_add_test(tc, every_key_written_has_a_ttl_on_a_cluster);
    suite_add_tcase(s, tc);

    tc = tcase_create("keys");
    tcase_add_checked_fixture(tc, srv_up, srv_down);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_key_written_has_a_ttl);
    tcase_add_test(tc, usage_denied_on_one_dimension_takes_nothing);
    tcase_add_test(tc, usage_reservation_settles_each_dimension);
    tcase_add_test(tc, usage_dollar_budget_is_exact);
    tcase_add_test(tc, usage_errors_name_the_field);
    tcase_add_test(tc, usage_reservation_survives_a_snapshot);
    tcase_add_test(tc, ttl_follows_the_state);
    tcase_add_test(tc, sharded_level_splits_the_quota);
    tcase_add_test(tc, functions_or_evalsha);
    suite_add_tcase(s, tc);

    tc = tcase_create("instances");
    tcase_add_checked_fixture(tc, srv_up, srv_down);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, refund_and_release_through_another_instance);
    tcase_add_test(tc, reservation_record_and_older_hash);
    tcase_add_test(tc, denial_cached_then_refunded_through_another_instance);
    tcase_add_test(tc, two_instances_share_one_bucket);
    tcase_add_test(tc, quotas_reach_every_instance);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(redis_store_suite()) ? 1 : 0; }
