/*
 * bench_usage.c - what counting a model call in three dimensions costs a decision, against a
 * plain request on the same levels (bench/callgrind_usage.sh counts the instructions).
 *
 * Three levels (user, team, global), one token bucket each. Plain: the buckets count cost and
 * the request is {"keys": {...}, "cost": 1}. Usage: the configuration declares input, output
 * and cached input tokens and a model's prices; the user's bucket counts dollars, the team's
 * input tokens, the global one output tokens; the request carries usage in the three
 * dimensions and its model. Each kind is decided by a function of its own (plain_run,
 * usage_run) for callgrind to count, over 1,000 users and 100 teams.
 *
 * Usage: bench_usage mem N              N decisions of each kind on the memory store
 *        bench_usage redis URL N        the same on a Redis store at URL; prints Redis's
 *                                       microseconds per call of the decision script for each
 *                                       kind too (INFO commandstats)
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "ratelimit.h"
#include "redis/store.h"

static const char *plain_cfg =
    "{\"levels\": ["
    "{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 1000000000,"
    " \"per_second\": 1000000000}]},"
    "{\"name\": \"team\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 1000000000,"
    " \"per_second\": 1000000000}]},"
    "{\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"token_bucket\","
    " \"capacity\": 1000000000000, \"per_second\": 1000000000000}]}]}";

static const char *usage_cfg =
    "{\"dimensions\": [\"input_tokens\", \"output_tokens\", \"cached_input_tokens\"],"
    " \"prices\": {\"by\": \"model\", \"models\": {\"small\": {\"input_tokens\": 0.8,"
    " \"output_tokens\": 4, \"cached_input_tokens\": 0.08}, \"large\": {\"input_tokens\": 3,"
    " \"output_tokens\": 15, \"cached_input_tokens\": 0.3}}},"
    " \"levels\": ["
    "{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 1000000,"
    " \"per_second\": 1000000, \"unit\": \"usd\"}]},"
    "{\"name\": \"team\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 1000000000,"
    " \"per_second\": 1000000000, \"unit\": \"input_tokens\"}]},"
    "{\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"token_bucket\","
    " \"capacity\": 1000000000000, \"per_second\": 1000000000000, \"unit\": \"output_tokens\"}]}]}";

static const char *redis_url;

static rl_limiter *make(rl_registry *reg, const char *json, const char *prefix)
{
    rld_settings set;
    rl_config *cfg;
    rl_limiter *lim;
    rl_store *st = NULL;
    rl_err err;
    if (rld_config_parse(json, strlen(json), reg, &set, &cfg, &err) != RL_OK) {
        fprintf(stderr, "config: %s\n", err.msg);
        exit(1);
    }
    rld_settings_clear(&set);
    if (redis_url) {
        rld_redis_options o = {.url = redis_url, .prefix = prefix, .timeout_ms = 10000, .pool = 1,
                               .manual_clock = 1, .ttl_floor_ms = 3600 * 1000};
        if (rld_redis_store_new(&o, &st, &err) != RL_OK) {
            fprintf(stderr, "redis: %s\n", err.msg);
            exit(1);
        }
    }
    if (rl_limiter_new(cfg, st, &lim, &err) != RL_OK) {
        fprintf(stderr, "limiter: %s\n", err.msg);
        exit(1);
    }
    return lim;
}

static void decide(rl_limiter *lim, const rl_request *req)
{
    rl_decision d;
    rl_err err;
    if (rl_acquire(lim, req, &d, &err) != RL_OK || !d.allowed) {
        fprintf(stderr, "acquire: %s\n", d.allowed ? err.msg : "denied");
        exit(1);
    }
    rl_decision_done(&d);
}

static void keys(size_t i, char *user, char *team)
{
    snprintf(user, 16, "u%zu", i % 1000);
    snprintf(team, 16, "t%zu", i % 100);
}

__attribute__((noinline)) static void plain_run(rl_limiter *lim, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char user[16], team[16];
        keys(i, user, team);
        rl_descriptor ds[2] = {{"user", 4, user, strlen(user)}, {"team", 4, team, strlen(team)}};
        rl_request req = {.desc = ds, .ndesc = 2, .cost = RL_FP_ONE, .now = (rl_ns)i};
        decide(lim, &req);
    }
}

__attribute__((noinline)) static void usage_run(rl_limiter *lim, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char user[16], team[16];
        keys(i, user, team);
        const char *model = i & 1 ? "large" : "small";
        rl_descriptor ds[3] = {{"user", 4, user, strlen(user)},
                               {"team", 4, team, strlen(team)},
                               {"model", 5, model, strlen(model)}};
        rl_usage u = {7u, {1200 * RL_FP_ONE, 400 * RL_FP_ONE, 300 * RL_FP_ONE}};
        rl_request req = {.desc = ds, .ndesc = 3, .cost = RL_FP_ONE, .usage = &u,
                          .now = (rl_ns)i};
        decide(lim, &req);
    }
}

/* Redis's microseconds per call of the decision script since the last reset, and a reset. */
static double script_usec(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    double us = 0;
    const char *names[] = {"cmdstat_evalsha:", "cmdstat_fcall:"};
    for (int k = 0; r && r->type == REDIS_REPLY_STRING && k < 2; k++) {
        const char *p = strstr(r->str, names[k]), *q = p ? strstr(p, "usec_per_call=") : NULL;
        if (q)
            us = strtod(q + 14, NULL);
    }
    freeReplyObject(r);
    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    return us;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "redis") == 0 && argc < 4)) {
        fprintf(stderr, "usage: bench_usage mem N | bench_usage redis URL N\n");
        return 2;
    }
    redisContext *c = NULL;
    size_t n = strtoull(argv[argc - 1], NULL, 10);
    if (strcmp(argv[1], "redis") == 0) {
        redis_url = argv[2];
        int port = atoi(strrchr(redis_url, ':') + 1);
        c = redisConnect("127.0.0.1", port);
        if (!c || c->err) {
            fprintf(stderr, "redis: cannot connect to %s\n", redis_url);
            return 1;
        }
    }
    rl_registry *reg = rl_registry_new();
    rl_limiter *plain = make(reg, plain_cfg, "bp:"), *usage = make(reg, usage_cfg, "bu:");
    plain_run(plain, 2000); /* every key made, scripts loaded */
    usage_run(usage, 2000);
    if (c)
        script_usec(c);
    plain_run(plain, n);
    if (c)
        printf("redis_usec_per_call_plain: %.3f\n", script_usec(c));
    usage_run(usage, n);
    if (c)
        printf("redis_usec_per_call_usage: %.3f\n", script_usec(c));
    rl_limiter_free(plain);
    rl_limiter_free(usage);
    rl_registry_free(reg);
    if (c)
        redisFree(c);
    return 0;
}
