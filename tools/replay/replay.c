/*
 * replay.c - ratelimit-replay: a trace of requests run through the same core as the server,
 * for trying a configuration on recorded traffic before rolling it out.
 *
 *   ratelimit-replay --config C [--store memory|redis] [--compare C2] < trace.jsonl
 *
 * Input, one JSON object a line (blank lines skipped):
 *   {"now": 12.5, "keys": {"user": "alice"}, "cost": 3}       a request: POST /acquire's body
 *   {"refund": 4, "actual_cost": 1, "now": 13}                settles the reservation made by
 *   {"release": 4, "now": 14}                                 the request on line 4 (or by id)
 * Times are the manual clock's: "now" in seconds, kept from line to line when left out.
 *
 * Output, one line per input line: the body POST /acquire (or /refund, /release) would answer,
 * {"line": N, "error": "..."} for a line the server would refuse; and last a line
 * {"summary": {...}}: requests, allowed, denied, errors, per level and rule how often it was
 * applied to an allowed request and how often it blocked one, the keys denied most often and
 * the longest wait. With --compare only the requests the two configurations decide differently
 * are written, as {"line": N, "a": <decision>, "b": <decision>}, and the summary has both.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/acquire_req.h"
#include "config/config.h"
#include "redis/redis.h"
#include "app/render.h"
#include "summary.h"
#include "app/usage.h"
#include "app/values.h"

static const char usage[] =
    "usage: ratelimit-replay --config PATH [--store memory|redis] [--compare PATH] < trace.jsonl\n"
    "\n"
    "  --config PATH    the configuration to decide with\n"
    "  --store S        memory (default) or redis: the configuration's Redis store (its\n"
    "                   store settings; state already in Redis is used, and changed)\n"
    "  --compare PATH   a second configuration: only the requests the two decide differently\n"
    "                   are written, and the summary has both\n";

/* One configuration and what it has decided. */
typedef struct side {
    rl_registry *reg;
    rld_settings set;
    rl_limiter *lim;
    rld_redis *fleet;
    rl_ns ticked;
    rld_summary sum;
    char (*res)[RL_RESERVATION_ID]; /* the reservation made by each line, "" for none */
    size_t nres;
} side;

static int side_open(side *s, const char *path, int redis, rl_err *err)
{
    rl_config *cfg = NULL;
    rl_store *store = NULL;
    memset(s, 0, sizeof *s);
    if (!(s->reg = rl_registry_new()))
        return rl_errf(err, RL_ENOMEM, "out of memory");
    int rc = rld_config_load(path, s->reg, &s->set, &cfg, err);
    if (rc != RL_OK)
        return rc;
    if (s->set.ratelimit_config) {
        rl_config_free(cfg);
        return rl_errf(err, RL_EINVAL, "%s: ratelimit_config: the replay reads the native "
                       "configuration only (its requests are /acquire bodies)", path);
    }
    if (redis && s->set.store != RLD_STORE_REDIS) {
        rl_config_free(cfg);
        return rl_errf(err, RL_EINVAL, "%s: --store redis needs a configuration with "
                       "\"store\": {\"type\": \"redis\", ...}", path);
    }
    if (redis && (rc = rld_redis_open(&s->set, 1, &store, &s->fleet, err)) != RL_OK) {
        rl_config_free(cfg);
        return rc;
    }
    if ((rc = rl_limiter_new(cfg, store, &s->lim, err)) != RL_OK)
        return rc;
    if (s->fleet && (rc = rld_redis_start(s->fleet, s->lim, err)) != RL_OK)
        return rc;
    return rld_summary_init(&s->sum, rl_limiter_config(s->lim), err);
}

static void side_close(side *s)
{
    rld_redis_free(s->fleet);
    rl_limiter_free(s->lim);
    rld_summary_free(&s->sum);
    if (s->reg)
        rld_settings_clear(&s->set);
    rl_registry_free(s->reg);
    free(s->res);
}

/* The server's manual clock: a time that moves forward ticks first (reservations expire). */
static void side_tick(side *s, rl_ns now)
{
    if (now > s->ticked) {
        rl_limiter_tick(s->lim, now);
        s->ticked = now;
    }
}

static void side_remember(side *s, size_t line, const char *id)
{
    if (line >= s->nres) {
        size_t n = s->nres ? s->nres : 1024;
        while (n <= line)
            n *= 2;
        char(*p)[RL_RESERVATION_ID] = realloc(s->res, n * sizeof *p);
        if (!p)
            return; /* out of memory: the reservation cannot be named by its line */
        memset(p + s->nres, 0, (n - s->nres) * sizeof *p);
        s->res = p;
        s->nres = n;
    }
    snprintf(s->res[line], sizeof s->res[line], "%s", id);
}

/* ---- one line ---------------------------------------------------------------------------- */

typedef struct replay {
    side a, b;
    int compare;
    rl_ns now;
    size_t line;
    uint64_t errors;    /* lines refused */
    uint64_t differing; /* --compare: requests decided differently */
    rld_buf out;
} replay;

/* What --compare compares: the decision and the rule that blocked it. */
typedef struct outcome {
    int allowed;
    char by[300];
} outcome;

static void put_line_error(replay *rp, const char *msg)
{
    rld_buf *o = &rp->out;
    rld_buf_puts(o, "{\"line\":");
    rld_buf_i64(o, (int64_t)rp->line);
    rld_buf_puts(o, ",\"error\":");
    rld_buf_json_str(o, msg, strlen(msg));
    rld_buf_puts(o, "}\n");
    rp->errors++;
}

/* Decides one request on one side; appends the decision's body to o. -1 with err on an error
 * the server answers with 4xx or 5xx. */
static int decide(replay *rp, side *s, const rld_acquire_req *q, rld_buf *o, outcome *oc,
                  rl_err *err)
{
    rl_decision d;
    rl_usage u;
    if (q->usage &&
        rld_usage_read(rl_limiter_config(s->lim), q->usage, "usage", &u, err) != 0)
        return -1;
    rl_request req = {.desc = q->desc,
                      .ndesc = q->ndesc,
                      .cost = q->cost,
                      .usage = q->usage ? &u : NULL,
                      .priority = q->priority,
                      .flags = (q->dry_run ? RL_DRY_RUN : 0u) | (q->reserve ? RL_RESERVE : 0u),
                      .now = rp->now};
    side_tick(s, rp->now);
    if (rl_acquire(s->lim, &req, &d, err) != RL_OK)
        return -1;
    const rl_config *cfg = rl_limiter_config(s->lim);
    rld_render_decision(o, cfg, &d);
    rld_summary_add(&s->sum, &d, rp->line);
    oc->allowed = d.allowed;
    oc->by[0] = '\0';
    if (!d.allowed)
        rld_render_blocked_by(oc->by, sizeof oc->by, cfg, &d);
    if (d.reservation[0])
        side_remember(s, rp->line, d.reservation);
    rl_decision_done(&d);
    return 0;
}

static void request_line(replay *rp, char *text, size_t len)
{
    rld_acquire_req q;
    rl_err err;
    outcome oa, ob;
    if (rld_acquire_parse(text, len, &q, &err) != 0) {
        put_line_error(rp, err.msg);
        return;
    }
    if (q.has_now)
        rp->now = q.now;
    if (!rp->compare) {
        size_t mark = rp->out.len;
        if (decide(rp, &rp->a, &q, &rp->out, &oa, &err) != 0) {
            rp->out.len = mark;
            put_line_error(rp, err.msg);
        } else {
            rld_buf_putc(&rp->out, '\n');
        }
        rld_acquire_req_clear(&q);
        return;
    }
    char abuf[4096], bbuf[4096];
    rld_buf da, db;
    rld_buf_init(&da, abuf, sizeof abuf);
    rld_buf_init(&db, bbuf, sizeof bbuf);
    int ra = decide(rp, &rp->a, &q, &da, &oa, &err);
    int rb = ra == 0 ? decide(rp, &rp->b, &q, &db, &ob, &err) : -1;
    if (ra != 0 || rb != 0) {
        put_line_error(rp, err.msg);
    } else if (oa.allowed != ob.allowed || strcmp(oa.by, ob.by) != 0) {
        rld_buf_puts(&rp->out, "{\"line\":");
        rld_buf_i64(&rp->out, (int64_t)rp->line);
        rld_buf_puts(&rp->out, ",\"a\":");
        rld_buf_put(&rp->out, da.p, da.len);
        rld_buf_puts(&rp->out, ",\"b\":");
        rld_buf_put(&rp->out, db.p, db.len);
        rld_buf_puts(&rp->out, "}\n");
        rp->differing++;
    }
    rld_buf_reset(&da);
    rld_buf_reset(&db);
    rld_acquire_req_clear(&q);
}

/* The reservation a refund or release names: a line number or an id. NULL when unknown. */
static const char *reservation_of(const side *s, const json_t *v, char *buf, size_t n)
{
    if (json_is_string(v))
        return json_string_value(v);
    json_int_t l = json_integer_value(v);
    if (!json_is_integer(v) || l < 1 || (size_t)l >= s->nres || !s->res[l][0])
        return NULL;
    snprintf(buf, n, "%s", s->res[l]);
    return buf;
}

/* {"refund": R, "actual_cost": x, "now": t} or {"release": R, "now": t} on one side. */
static int settle(replay *rp, side *s, json_t *root, int refund, rld_buf *o, rl_err *err)
{
    char idbuf[RL_RESERVATION_ID];
    const char *id = reservation_of(s, json_object_get(root, refund ? "refund" : "release"),
                                    idbuf, sizeof idbuf);
    if (!id)
        return rl_errf(err, -1, "%s: must be the line of a request that made a reservation, "
                       "or its id", refund ? "refund" : "release");
    side_tick(s, rp->now);
    if (!refund) {
        if (rl_release(s->lim, id, rp->now, err) != RL_OK)
            return -1;
        rld_buf_puts(o, "{\"released\":true}");
        return 0;
    }
    json_t *ac = json_object_get(root, "actual_cost"), *au = json_object_get(root, "actual_usage");
    const rl_config *cfg = rl_limiter_config(s->lim);
    rl_actual act = {.has_cost = ac != NULL, .cost = 0, .usage = {0, {0}}};
    rl_settlement st;
    if (!ac && !au)
        return rl_errf(err, -1, "actual_cost: required (or actual_usage), a number from 0 to "
                       "1000000000000");
    if (ac && rld_value_amount("actual_cost", json_is_number(ac) ? json_number_value(ac) : NAN,
                               &act.cost, err) != 0)
        return -1;
    if (au && (!json_is_object(au) ||
               rld_usage_read(cfg, au, "actual_usage", &act.usage, err) != 0))
        return json_is_object(au) ? -1 : rl_errf(err, -1, "actual_usage: must be an object");
    if (rl_settle_usage(s->lim, id, &act, rp->now, NULL, &st, err) != RL_OK)
        return -1;
    rld_render_settlement(o, cfg, id, &st);
    return 0;
}

static void settle_line(replay *rp, json_t *root, int refund)
{
    rl_err err;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        if (strcmp(k, refund ? "refund" : "release") != 0 && strcmp(k, "now") != 0 &&
            !(refund && (strcmp(k, "actual_cost") == 0 || strcmp(k, "actual_usage") == 0))) {
            snprintf(err.msg, sizeof err.msg, "%.64s: unknown field (known: %s)", k,
                     refund ? "refund, actual_cost, actual_usage, now" : "release, now");
            put_line_error(rp, err.msg);
            return;
        }
    }
    json_t *now = json_object_get(root, "now");
    if (now &&
        rld_value_seconds("now", json_is_number(now) ? json_number_value(now) : NAN, &rp->now,
                          &err) != 0) {
        put_line_error(rp, err.msg);
        return;
    }
    size_t mark = rp->out.len;
    int rc = settle(rp, &rp->a, root, refund, &rp->out, &err);
    if (rp->compare) {
        /* a reservation one configuration denied exists on the other side only: settled
         * where it exists, an error only when neither side has it */
        rl_err berr;
        rld_buf ignored;
        char ib[512];
        rld_buf_init(&ignored, ib, sizeof ib);
        int rb = settle(rp, &rp->b, root, refund, &ignored, &berr);
        rld_buf_reset(&ignored);
        rp->out.len = mark; /* --compare writes only the requests decided differently */
        if (rc == 0 || rb == 0)
            return;
    }
    if (rc != 0) {
        rp->out.len = mark;
        put_line_error(rp, err.msg);
    } else {
        rld_buf_putc(&rp->out, '\n');
    }
}

static void one_line(replay *rp, char *text, size_t len)
{
    json_t *root = NULL;
    /* a refund or release names itself first; anything else is a request */
    if (strstr(text, "\"refund\"") || strstr(text, "\"release\""))
        root = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    if (root && json_is_object(root) &&
        (json_object_get(root, "refund") || json_object_get(root, "release")))
        settle_line(rp, root, json_object_get(root, "refund") != NULL);
    else
        request_line(rp, text, len);
    json_decref(root);
}

/* ---- main -------------------------------------------------------------------------------- */

static int run(replay *rp, FILE *in)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    char obuf[65536];
    rld_buf_init(&rp->out, obuf, sizeof obuf);
    while ((n = getline(&line, &cap, in)) >= 0) {
        rp->line++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (strspn(line, " \t") == (size_t)n)
            continue;
        one_line(rp, line, (size_t)n);
        if (rp->out.len > sizeof obuf / 2) {
            fwrite(rp->out.p, 1, rp->out.len, stdout);
            rp->out.len = 0;
        }
    }
    free(line);
    rld_summary_write(&rp->out, &rp->a.sum, rp->compare ? &rp->b.sum : NULL, rp->errors,
                      rp->differing);
    fwrite(rp->out.p, 1, rp->out.len, stdout);
    rld_buf_reset(&rp->out);
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {{"config", required_argument, NULL, 'c'},
                                          {"store", required_argument, NULL, 's'},
                                          {"compare", required_argument, NULL, 'x'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    const char *config = NULL, *compare = NULL, *storename = "memory";
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        if (c == 'c')
            config = optarg;
        else if (c == 's')
            storename = optarg;
        else if (c == 'x')
            compare = optarg;
        else if (c == 'h')
            return fputs(usage, stdout) < 0;
        else {
            fprintf(stderr, "ratelimit-replay: unknown or incomplete option %s\n\n%s",
                    argv[optind - 1], usage);
            return 2;
        }
    }
    int redis = strcmp(storename, "redis") == 0;
    if (!config || optind < argc || (!redis && strcmp(storename, "memory") != 0)) {
        fprintf(stderr, "ratelimit-replay: %s\n\n%s",
                !config ? "--config is required" : optind < argc ? "unexpected argument"
                                                                 : "--store: memory or redis",
                usage);
        return 2;
    }
    static replay rp;
    rl_err err = {{0}};
    int rc = side_open(&rp.a, config, redis, &err);
    if (rc == RL_OK && compare) {
        rp.compare = 1;
        rc = side_open(&rp.b, compare, redis, &err);
    }
    if (rc != RL_OK) {
        fprintf(stderr, "ratelimit-replay: %s\n", err.msg);
        side_close(&rp.a);
        side_close(&rp.b);
        return 1;
    }
    rc = run(&rp, stdin);
    side_close(&rp.a);
    side_close(&rp.b);
    return rc;
}
