/*
 * redis.c - see redis.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fallback.h"
#include "redis.h"
#include "app/log.h"
#include "app/quotas.h"
#include "pool.h"
#include "quota_sync.h"
#include "store.h"

struct rld_redis {
    rl_store *top;   /* the fallback store: borrowed from the limiter */
    rl_store *redis; /* the Redis store inside it */
    rl_limiter *lim; /* set by rld_redis_start */
    rld_quota_follower *follower;
    rld_redis_addr addr; /* with a cluster: its first seed */
    size_t ncluster;
    int tls; /* the connections are TLS */
    char prefix[80];
    rld_on_error mode[RL_MAX_LEVELS]; /* each level's on_store_error */
};

static const char *const mode_names[] = {"open", "closed", "local"};

int rld_redis_open(const rld_settings *set, int manual_clock, rl_store **store, rld_redis **out,
                   rl_err *err)
{
    *store = NULL;
    *out = NULL;
    rld_redis *f = calloc(1, sizeof *f);
    if (!f)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    rld_net_client_tls_files tls;
    int rc = rld_redis_store_addr(set, &f->addr, err);
    if (rc == RL_OK)
        rc = rld_redis_store_tls(set, &f->addr, &tls, &f->tls, err);
    if (rc == RL_OK)
        rc = rld_redis_store_open(set, manual_clock, &f->top, &f->redis, err);
    if (rc != RL_OK) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        rl_errf(err, rc, "store: %s", why);
        free(f);
        return rc;
    }
    snprintf(f->prefix, sizeof f->prefix, "%s", set->redis_prefix ? set->redis_prefix : "rl:");
    f->ncluster = set->ncluster;
    memcpy(f->mode, set->on_error, sizeof f->mode);
    *store = f->top;
    *out = f;
    return RL_OK;
}

static void count_quota(void *ctx, const char *key, const char *tier, const rl_rules *rules)
{
    (void)key;
    (void)tier;
    (void)rules;
    ++*(size_t *)ctx;
}

int rld_redis_start(rld_redis *f, rl_limiter *lim, rl_err *err)
{
    size_t skipped = 0;
    rl_err why = {{0}};
    f->lim = lim;
    if (rld_redis_quota_sync(f->redis, lim, &skipped, &why) == RL_OK) {
        size_t n = 0;
        if (rl_config_tiered_level(rl_limiter_config(lim)) >= 0)
            rl_quota_foreach(lim, count_quota, &n);
        rld_log("quotas: in line with Redis, %zu users with a quota of their own", n);
        if (skipped)
            rld_log("error: quotas: %zu quotas stored in Redis cannot be applied to this "
                    "configuration and were skipped",
                    skipped);
    } else {
        rld_log("error: quotas: cannot read them from Redis yet (%s); they apply as soon as "
                "Redis answers",
                why.msg);
    }
    return rld_redis_quota_follow(f->redis, lim, &f->follower, err);
}

/* A reload put lim in force over the same store (the gate held for writing): the quotas Redis
 * holds applied to it, and followed there from now on. */
static void part_reload(void *self, rl_limiter *lim)
{
    rld_redis *f = self;
    size_t skipped = 0;
    rl_err why = {{0}};
    f->lim = lim;
    if (rld_redis_quota_retarget(f->follower, lim, &skipped, &why) != RL_OK)
        rld_log("error: quotas: cannot read them from Redis after the reload (%s); they apply "
                "as soon as Redis answers",
                why.msg);
    else if (skipped)
        rld_log("error: quotas: %zu quotas stored in Redis cannot be applied to this "
                "configuration and were skipped",
                skipped);
}

const rld_part_ops rld_redis_part_ops = {
    .name = "redis store",
    .reload = part_reload,
};

void rld_redis_free(rld_redis *f)
{
    if (!f)
        return;
    rld_redis_quota_unfollow(f->follower);
    free(f);
}

static void describe(const void *self, char *buf, size_t len)
{
    const rld_redis *f = self;
    const char *tls = f->tls ? ", over TLS" : "";
    int v6 = strchr(f->addr.host, ':') != NULL;
    if (f->ncluster) {
        snprintf(buf, len, "redis cluster via %zu seed nodes (first %s%s%s:%d), prefix \"%s\"%s",
                 f->ncluster, v6 ? "[" : "", f->addr.host, v6 ? "]" : "", f->addr.port, f->prefix,
                 tls);
        return;
    }
    if (f->addr.sentinel.n) {
        snprintf(buf, len, "redis store via %zu sentinels (primary \"%s\")/%d, prefix \"%s\"%s",
                 f->addr.sentinel.n, f->addr.sentinel.master, f->addr.db, f->prefix, tls);
        return;
    }
    snprintf(buf, len, "redis store %s%s%s:%d/%d, prefix \"%s\"%s", v6 ? "[" : "", f->addr.host,
             v6 ? "]" : "", f->addr.port, f->addr.db, f->prefix, tls);
}

/* ---- quotas ------------------------------------------------------------------------------- */

/* Prefixes a store failure with the field clients see. */
static int store_failed(int rc, rl_err *err)
{
    if (rc == RL_ESTORE) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        rl_errf(err, rc, "store: Redis is unavailable, the quota was not changed (%.300s)", why);
    }
    return rc;
}

/* Stored: makes this instance apply what Redis holds for user now. written is the value just
 * stored (a new reference, stolen; NULL when deleted), applied if Redis cannot be read back. */
static int refresh(rld_redis *f, const char *user, json_t *written, rl_err *err)
{
    char *text = written ? json_dumps(written, JSON_COMPACT) : NULL;
    json_decref(written);
    if (written && !text)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    int rc = rld_redis_quota_refresh(f->follower, user, text, err);
    free(text);
    return rc;
}

static int quota_put(void *self, rl_registry *reg, const char *user, const char *body,
                     size_t len, rl_err *err)
{
    rld_redis *f = self;
    rld_quota_body b;
    int rc = rld_quota_body_parse(f->lim, reg, user, body, len, &b, err);
    if (rc != RL_OK)
        return rc;
    if (b.rules)
        rc = rld_redis_store_check_rules(f->redis, b.rules, "rules", err);
    const json_t *rules = b.tier ? NULL : json_object_get(b.value, "rules");
    if (rc == RL_OK)
        rc = store_failed(rld_redis_quota_put(f->redis, user, b.tier, rules, err), err);
    if (rc == RL_OK)
        rc = refresh(f, user, b.tier ? json_pack("{s:s}", "tier", b.tier) : json_incref(b.value),
                     err);
    rld_quota_body_clear(&b);
    return rc;
}

static int quota_delete(void *self, const char *user, rl_err *err)
{
    rld_redis *f = self;
    const rl_config *cfg = rl_limiter_config(f->lim);
    const char *why = rld_user_problem(user);
    int in_config = 0, rc;
    if (why)
        return rl_errf(err, RL_EINVAL, "user: %s", why);
    if (rl_config_tiered_level(cfg) < 0)
        return rl_errf(err, RL_EINVAL, "user: no level is tiered, so there are no quotas");
    for (size_t i = 0; i < cfg->nquotas; i++)
        in_config |= strcmp(cfg->quota_keys[i], user) == 0;
    if (!in_config) {
        rc = store_failed(rld_redis_quota_delete(f->redis, user, NULL, err), err);
        return rc == RL_OK ? refresh(f, user, NULL, err) : rc;
    }
    /* without a stored quota the configuration's own would apply again */
    const char *tier = cfg->tiers[cfg->default_tier].name;
    rc = store_failed(rld_redis_quota_put(f->redis, user, tier, NULL, err), err);
    return rc == RL_OK ? refresh(f, user, json_pack("{s:s}", "tier", tier), err) : rc;
}

/* ---- health and metrics -------------------------------------------------------------------- */

static int health(void *self, rld_buf *o)
{
    rld_redis *f = self;
    rld_redis_health h;
    rld_redis_store_health(f->redis, &h);
    rld_buf_puts(o, h.up ? "{\"status\":\"ok\"" : "{\"status\":\"degraded\"");
    rld_buf_puts(o, ",\"store\":\"redis\",\"store_up\":");
    rld_buf_puts(o, h.up ? "true" : "false");
    rld_buf_printf(o, ",\"store_errors\":%llu,\"peers\":%u,\"fleet_size\":%u,\"last_error\":",
                   (unsigned long long)h.errors, h.peers, rld_fallback_fleet(f->top));
    if (h.last_error[0])
        rld_buf_json_str(o, h.last_error, strlen(h.last_error));
    else
        rld_buf_puts(o, "null");
    rld_buf_putc(o, '}');
    return h.up;
}

static void family(rld_buf *o, const char *name, const char *type, const char *help)
{
    rld_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void metrics(void *self, rld_buf *o)
{
    rld_redis *f = self;
    const rl_config *cfg = rl_limiter_config(f->lim);
    rld_redis_health h;
    rld_redis_store_health(f->redis, &h);
    family(o, "ratelimit_store_up", "gauge",
           "1 while the shared store (Redis) answers, 0 while the levels run on their "
           "on_store_error modes.");
    rld_buf_printf(o, "ratelimit_store_up %d\n", h.up ? 1 : 0);
    family(o, "ratelimit_store_errors_total", "counter",
           "Calls to the shared store that failed (timed out, refused, or not tried while it "
           "was down).");
    rld_buf_printf(o, "ratelimit_store_errors_total %llu\n", (unsigned long long)h.errors);
    family(o, "ratelimit_store_fallback_total", "counter",
           "Decisions in which a level stood in for the unavailable store, by level and its "
           "on_store_error mode.");
    /* a level falls back only by its own mode: one series per level, there from the start */
    for (size_t l = 0; l < cfg->nlevels; l++)
        rld_buf_printf(o, "ratelimit_store_fallback_total{level=\"%s\",mode=\"%s\"} %llu\n",
                       cfg->levels[l].name, mode_names[f->mode[l]],
                       (unsigned long long)rld_fallback_count(f->top, l, f->mode[l]));
    family(o, "ratelimit_store_peers", "gauge",
           "Instances sharing the store, this one included, as the last heartbeat counted them "
           "(0: not known yet).");
    rld_buf_printf(o, "ratelimit_store_peers %u\n", h.peers);
    family(o, "ratelimit_deny_cache_total", "counter",
           "Decisions denied by this instance from its cache of the denials Redis gave, without "
           "a call to Redis, by the level whose cached denial answered (store.deny_cache).");
    for (size_t l = 0; l < cfg->nlevels; l++)
        rld_buf_printf(o, "ratelimit_deny_cache_total{level=\"%s\"} %llu\n", cfg->levels[l].name,
                       (unsigned long long)rld_redis_store_deny_answered(f->redis, l));
    family(o, "ratelimit_lease_held", "gauge",
           "Amount this instance holds unspent in its lease of a leased level: taken from the "
           "level's shared state in Redis, admitted from here, at most the level's lease slice "
           "per rule (redis.md, Hot keys: leases).");
    for (size_t l = 0; l < cfg->nlevels; l++)
        if (rld_redis_store_leased(f->redis, l)) {
            rld_redis_lease_stats ls;
            rld_redis_store_lease_stats(f->redis, l, &ls);
            rld_buf_printf(o, "ratelimit_lease_held{level=\"%s\"} %.6g\n", cfg->levels[l].name,
                           (double)ls.held / RL_FP_ONE);
        }
    family(o, "ratelimit_lease_returned_total", "counter",
           "Amount this instance's leases gave back to the shared state unspent (on expiry, "
           "before a new slice, on shutdown).");
    for (size_t l = 0; l < cfg->nlevels; l++)
        if (rld_redis_store_leased(f->redis, l)) {
            rld_redis_lease_stats ls;
            rld_redis_store_lease_stats(f->redis, l, &ls);
            rld_buf_printf(o, "ratelimit_lease_returned_total{level=\"%s\"} %.6g\n",
                           cfg->levels[l].name, (double)ls.returned / RL_FP_ONE);
        }
    family(o, "ratelimit_lease_saved_total", "counter",
           "Decisions admitted from this instance's lease of a level without a call to Redis "
           "for that level.");
    for (size_t l = 0; l < cfg->nlevels; l++)
        if (rld_redis_store_leased(f->redis, l)) {
            rld_redis_lease_stats ls;
            rld_redis_store_lease_stats(f->redis, l, &ls);
            rld_buf_printf(o, "ratelimit_lease_saved_total{level=\"%s\"} %llu\n",
                           cfg->levels[l].name, (unsigned long long)ls.local);
        }
    family(o, "ratelimit_redis_calls_total", "counter",
           "Commands and scripts written to Redis (concurrent calls share connections).");
    rld_buf_printf(o, "ratelimit_redis_calls_total %llu\n", (unsigned long long)h.calls);
    family(o, "ratelimit_redis_writes_total", "counter",
           "Writes to Redis that carried those calls, several back to back in one write when "
           "requests come together.");
    rld_buf_printf(o, "ratelimit_redis_writes_total %llu\n", (unsigned long long)h.writes);
}

static int check_config(void *self, const rl_config *cfg, rl_err *err)
{
    const rld_redis *f = self;
    return rld_redis_store_check_config(cfg, f->ncluster > 0, err);
}

const rld_app_store_ops rld_redis_store_ops = {
    .check_config = check_config,
    .quota_put = quota_put,
    .quota_delete = quota_delete,
    .health = health,
    .metrics = metrics,
    .describe = describe,
};

int rld_redis_alert_claim(void *self, const char *name, int64_t ttl_ms)
{
    rld_redis *f = self;
    size_t n = strlen(f->prefix) + strlen(name) + 8;
    char *key = malloc(n), ttl[24];
    if (!key)
        return -1;
    snprintf(key, n, "%salert:%s", f->prefix, name);
    snprintf(ttl, sizeof ttl, "%lld", (long long)(ttl_ms > 0 ? ttl_ms : 1));
    const char *argv[6] = {"SET", key, "1", "NX", "PX", ttl};
    redisReply *r;
    rl_err err;
    int rc = rld_redis_store_call(f->redis, -1, 1, 6, argv, NULL, &r, &err);
    free(key);
    if (rc != RL_OK) {
        rld_log("warn: alert claim in Redis failed (sending it here): %s", err.msg);
        return -1;
    }
    int won = r->type == REDIS_REPLY_STATUS; /* "OK"; a nil reply: another instance has it */
    freeReplyObject(r);
    return won;
}
