/*
 * quota_sync.c - see quota_sync.h.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/rules_json.h"
#include "quota_sync.h"
#include "store.h"

#define SUBSCRIBE_TIMEOUT_MS 2000
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 5000


/* P"quotas" into buf. */
static const char *hash_name(rl_store *redis, char *buf, size_t len)
{
    snprintf(buf, len, "%squotas", rld_redis_store_prefix(redis));
    return buf;
}

static int change(rl_store *redis, const char *key, const char *json, long long *result,
                  rl_err *err)
{
    char hash[128];
    const char *argv[3] = {hash_name(redis, hash, sizeof hash), key, json};
    redisReply *r;
    int rc = rld_redis_store_call(redis, RLD_SCRIPT_QUOTA, 1, 3, argv, NULL, &r, err);
    if (rc != RL_OK)
        return rc;
    if (result)
        *result = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    return RL_OK;
}

int rld_redis_quota_put(rl_store *redis, const char *key, const char *tier, const json_t *rules,
                        rl_err *err)
{
    if (!key[0] || (tier == NULL) == (rules == NULL) || (rules && !json_is_array(rules)))
        return rl_errf(err, RL_EINVAL, "give a key and either a tier or a list of rules");
    json_t *o = tier ? json_pack("{s:s}", "tier", tier) : json_pack("{s:O}", "rules", rules);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    int rc = change(redis, key, text, NULL, err);
    free(text);
    return rc;
}

int rld_redis_quota_delete(rl_store *redis, const char *key, int *existed, rl_err *err)
{
    long long n = 0;
    int rc = change(redis, key, "", &n, err);
    if (rc == RL_OK && existed)
        *existed = n > 0;
    return rc;
}

/* ---- applying ------------------------------------------------------------------------------ */

/* The configuration's own quota for key: applies it and returns 1, or 0 when it has none. */
static int restore_initial(rl_limiter *lim, const char *key)
{
    const rl_config *cfg = rl_limiter_config(lim);
    for (size_t i = 0; i < cfg->nquotas; i++) {
        if (strcmp(cfg->quota_keys[i], key) != 0)
            continue;
        const rl_quota *q = &cfg->quotas[i];
        rl_rules_ref(q->rules);
        rl_err err;
        return rl_quota_set(lim, key, q->rules ? NULL : cfg->tiers[q->tier].name, q->rules, &err) ==
               RL_OK;
    }
    return 0;
}

/* Applies a stored quota (json: the hash's value, NULL when the key has none). */
static int apply(rl_limiter *lim, const char *key, const char *json, size_t len, rl_err *err)
{
    if (!json) {
        if (!restore_initial(lim, key))
            rl_quota_clear(lim, key);
        return RL_OK;
    }
    json_error_t jerr;
    json_t *o = json_loadb(json, len, 0, &jerr);
    const json_t *tier = json_object_get(o, "tier"), *rules = json_object_get(o, "rules");
    int rc;
    if (json_is_string(tier)) {
        rc = rl_quota_set(lim, key, json_string_value(tier), NULL, err);
    } else if (rules) {
        rl_rules *rs;
        rl_registry *reg = rl_limiter_config(lim)->reg;
        rc = rld_rules_from_json(rules, reg, rl_limiter_config(lim), &rs, err);
        if (rc == RL_OK)
            rc = rl_quota_set(lim, key, NULL, rs, err);
    } else {
        rc = rl_errf(err, RL_EINVAL, "quota of %.64s: neither a tier nor rules", key);
    }
    json_decref(o);
    return rc;
}

typedef struct keylist {
    size_t n, cap;
    char **v;
} keylist;

static void collect(void *ctx, const char *key, const char *tier, const rl_rules *rules)
{
    keylist *l = ctx;
    (void)tier;
    (void)rules;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return;
        l->v = v;
        l->cap = cap;
    }
    if ((l->v[l->n] = strdup(key)))
        l->n++;
}

int rld_redis_quota_sync(rl_store *redis, rl_limiter *lim, size_t *skipped, rl_err *err)
{
    char hash[128];
    const char *argv[2] = {"HGETALL", hash_name(redis, hash, sizeof hash)};
    redisReply *r;
    size_t bad = 0;
    int rc = rld_redis_store_call(redis, -1, 1, 2, argv, NULL, &r, err);
    if (rc != RL_OK)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return rl_errf(err, RL_ESTORE, "redis: %s is not a hash", hash);
    }
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        rl_err e;
        if (apply(lim, r->element[i]->str, r->element[i + 1]->str, r->element[i + 1]->len, &e) !=
            RL_OK)
            bad++;
    }
    /* what lim has and Redis does not */
    keylist l = {0};
    if (rl_config_tiered_level(rl_limiter_config(lim)) >= 0)
        rl_quota_foreach(lim, collect, &l);
    for (size_t k = 0; k < l.n; k++) {
        int stored = 0;
        for (size_t i = 0; i + 1 < r->elements && !stored; i += 2)
            stored = strcmp(r->element[i]->str, l.v[k]) == 0;
        if (!stored)
            apply(lim, l.v[k], NULL, 0, NULL);
        free(l.v[k]);
    }
    free(l.v);
    freeReplyObject(r);
    if (skipped)
        *skipped = bad;
    return RL_OK;
}

/* ---- following ----------------------------------------------------------------------------- */

struct rld_quota_follower {
    rl_store *redis;
    rl_limiter *lim;
    pthread_t th;
    int wake[2]; /* written to stop the thread */
    uint64_t applied;
    pthread_mutex_t mu; /* one read-and-apply at a time: the thread's and rld_redis_quota_refresh */
    int resync;         /* atomic: the thread synchronises in full at its next turn */
};

/* Waits ms or until stopped; returns 1 when stopped. */
static int nap(rld_quota_follower *f, int ms)
{
    struct pollfd p = {.fd = f->wake[0], .events = POLLIN};
    return poll(&p, 1, ms) > 0;
}

static void apply_key(rld_quota_follower *f, const char *key)
{
    char hash[128];
    const char *argv[3] = {"HGET", hash_name(f->redis, hash, sizeof hash), key};
    redisReply *r;
    rl_err err;
    pthread_mutex_lock(&f->mu);
    if (rld_redis_store_call(f->redis, -1, 1, 3, argv, NULL, &r, &err) == RL_OK) {
        if (apply(f->lim, key, r->type == REDIS_REPLY_STRING ? r->str : NULL, r->len, &err) ==
            RL_OK)
            __atomic_add_fetch(&f->applied, 1, __ATOMIC_RELAXED);
        freeReplyObject(r);
    } /* else the next subscription synchronises in full */
    pthread_mutex_unlock(&f->mu);
}

int rld_redis_quota_refresh(rld_quota_follower *f, const char *key, const char *written,
                            rl_err *err)
{
    char hash[128];
    const char *argv[3] = {"HGET", hash_name(f->redis, hash, sizeof hash), key};
    redisReply *r;
    rl_err ignored;
    int rc;
    pthread_mutex_lock(&f->mu);
    if (rld_redis_store_call(f->redis, -1, 1, 3, argv, NULL, &r, &ignored) == RL_OK) {
        rc = apply(f->lim, key, r->type == REDIS_REPLY_STRING ? r->str : NULL, r->len, err);
        freeReplyObject(r);
    } else {
        rc = apply(f->lim, key, written, written ? strlen(written) : 0, err);
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

int rld_redis_quota_retarget(rld_quota_follower *f, rl_limiter *lim, size_t *skipped,
                             rl_err *err)
{
    pthread_mutex_lock(&f->mu);
    f->lim = lim;
    int rc = rld_redis_quota_sync(f->redis, lim, skipped, err);
    pthread_mutex_unlock(&f->mu);
    if (rc != RL_OK)
        __atomic_store_n(&f->resync, 1, __ATOMIC_RELEASE);
    else
        __atomic_add_fetch(&f->applied, 1, __ATOMIC_RELAXED);
    return rc;
}

/* A message of the quota channel: the key whose quota changed. */
static void on_message(void *arg, const char *key)
{
    apply_key(arg, key);
}

/* One subscription: returns when the connection fails (0) or the follower stops (1). */
static int follow_once(rld_quota_follower *f, rld_rconn *c, const char *channel)
{
    rld_rconn_set_timeout(c, (rl_ns)SUBSCRIBE_TIMEOUT_MS * 1000000);
    const char *argv[2] = {"SUBSCRIBE", channel};
    redisReply *r = rld_rconn_command_argv(c, 2, argv, NULL);
    if (!r)
        return 0;
    int ok = r->type == REDIS_REPLY_ARRAY;
    freeReplyObject(r);
    if (!ok)
        return 0;
    int synced = 0;
    for (;;) {
        /* in full after every subscription, until it gets through */
        if (__atomic_exchange_n(&f->resync, 0, __ATOMIC_ACQ_REL))
            synced = 0;
        if (!synced) {
            pthread_mutex_lock(&f->mu);
            synced = rld_redis_quota_sync(f->redis, f->lim, NULL, NULL) == RL_OK;
            pthread_mutex_unlock(&f->mu);
            if (synced)
                __atomic_add_fetch(&f->applied, 1, __ATOMIC_RELAXED);
        }
        int rc = rld_sub_read(c, f->wake[0], synced ? 1000 : 100, on_message, f);
        if (rc != 0)
            return rc == 1;
    }
}

static void *follow_loop(void *arg)
{
    rld_quota_follower *f = arg;
    char channel[128];
    int backoff = RETRY_MIN_MS;
    hash_name(f->redis, channel, sizeof channel);
    for (;;) {
        rld_rconn *c = rld_redis_store_connect(f->redis, channel, SUBSCRIBE_TIMEOUT_MS, NULL);
        if (c) {
            int stopped = follow_once(f, c, channel);
            rld_rconn_free(c);
            if (stopped)
                break;
            backoff = RETRY_MIN_MS;
        }
        if (nap(f, backoff))
            break;
        backoff = backoff * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : backoff * 2;
    }
    return NULL;
}

int rld_redis_quota_follow(rl_store *redis, rl_limiter *lim, rld_quota_follower **out, rl_err *err)
{
    *out = NULL;
    rld_quota_follower *f = calloc(1, sizeof *f);
    if (!f)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    f->redis = redis;
    f->lim = lim;
    if (pipe(f->wake) != 0) {
        free(f);
        return rl_errf(err, RL_EIO, "pipe: %s", strerror(errno));
    }
    pthread_mutex_init(&f->mu, NULL);
    if (pthread_create(&f->th, NULL, follow_loop, f) != 0) {
        pthread_mutex_destroy(&f->mu);
        close(f->wake[0]);
        close(f->wake[1]);
        free(f);
        return rl_errf(err, RL_ENOMEM, "cannot start the quota follower");
    }
    *out = f;
    return RL_OK;
}

void rld_redis_quota_unfollow(rld_quota_follower *f)
{
    if (!f)
        return;
    ssize_t w = write(f->wake[1], "x", 1);
    (void)w;
    pthread_join(f->th, NULL);
    close(f->wake[0]);
    close(f->wake[1]);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

uint64_t rld_redis_quota_applied(rld_quota_follower *f)
{
    return __atomic_load_n(&f->applied, __ATOMIC_RELAXED);
}
