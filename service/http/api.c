/*
 * api.c - the HTTP endpoints of ratelimitd (http.h's rld_routes) over the app (app/app.h):
 *
 *   POST /acquire   decide a request                 POST /refund   settle a reservation
 *   POST /release   give back a reservation's slots  GET  /rules    the configuration
 *   GET|PUT|DELETE /quota/<user>  a user's quota     GET  /metrics  Prometheus text
 *   GET|DELETE /usage/<level>/<key>  a key's usage, and its reset
 *   GET  /healthz   readiness                        GET  /check    /acquire from headers
 *   POST /admin/reload  the configuration file read again
 *
 * api/openapi.yaml is the contract; the handlers stay thin: parse, call the core or the app,
 * answer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/acquire_req.h"
#include "app/app.h"
#include "app/log.h"
#include "app/render.h"
#include "app/rules_json.h"
#include "app/model_headers.h"
#include "app/settle_req.h"
#include "app/alerts.h"
#include "app/usage.h"
#include "check_req.h"
#include "http.h"

/* The HTTP status of a failed core call. */
static int status_of(int rc)
{
    switch (rc) {
    case RL_EINVAL:
        return 400;
    case RL_ENOTFOUND:
        return 404;
    case RL_ESETTLED:
        return 409;
    case RL_ESTORE:
    case RL_EFULL:
        return 503;
    default:
        return 500;
    }
}

/* Answers a failed core call with its message; server-side failures are logged. */
static void reply_rc(rld_req *r, int rc, const rl_err *err)
{
    int status = status_of(rc);
    if (rc == RL_EFULL) {
        /* not logged: a flood of new keys would flood the log; the metric counts it */
        rld_header retry = {"Retry-After", "1"};
        rld_reply_error_with(r, status, &retry, 1, "%s", err->msg);
        return;
    }
    /* the store's own messages name Redis; the answer names the field, as every error does */
    const char *field = rc == RL_ESTORE && strncmp(err->msg, "store: ", 7) != 0 ? "store: " : "";
    if (status >= 500)
        rld_log("error: %s%s", field, err->msg);
    rld_reply_error(r, status, "%s%s", field, err->msg);
}

/* ---- the request's time ---------------------------------------------------------------- */

/* "now" in a body is for --manual-clock only; replies 400 itself otherwise. */
static int check_now_or_reply(const rld_app *app, rld_req *r, int has_now)
{
    if (has_now && !app->manual_clock)
        return rld_reply_error(r, 400,
                               "now: only accepted when ratelimitd runs with --manual-clock");
    return 0;
}

/* ---- POST /acquire ---------------------------------------------------------------------- */

/* Answers a decision, with its JSON body or (with_body 0) none: 200 or deny_status, the
 * RateLimit headers, and Retry-After on a denial with a finite wait. */
static void reply_decision(rld_req *r, const rld_app *app, const rl_config *cfg,
                           const rl_decision *d, int deny_status, int with_body)
{
    char pbuf[1024], sbuf[1024], retry[24], by[256];
    rld_buf policy, state;
    rld_header hs[3 + RLD_MODEL_FIELDS];
    rld_field model[RLD_MODEL_FIELDS];
    size_t nh = 0;
    if (!d->allowed && rld_req_access_logged(r)) {
        rld_render_blocked_by(by, sizeof by, cfg, d);
        rld_req_note(r, by, d->applied[d->blocked].key, d->applied[d->blocked].keylen);
    }
    rld_buf_init(&policy, pbuf, sizeof pbuf);
    rld_buf_init(&state, sbuf, sizeof sbuf);
    if (rld_render_answer(with_body ? rld_req_out(r) : NULL, &policy, &state, cfg, d) > 0) {
        hs[nh++] = (rld_header){"RateLimit-Policy", rld_buf_cstr(&policy)};
        hs[nh++] = (rld_header){"RateLimit", rld_buf_cstr(&state)};
    }
    if (!d->allowed && d->retry_after != RL_WAIT_NEVER) {
        snprintf(retry, sizeof retry, "%lld",
                 (long long)rld_retry_after_seconds(d->retry_after));
        hs[nh++] = (rld_header){"Retry-After", retry};
    }
    if (app->set->model_headers) {
        size_t nm = rld_model_headers((unsigned)app->set->model_headers, cfg, d, model);
        for (size_t i = 0; i < nm; i++)
            hs[nh++] = (rld_header){model[i].name, model[i].value};
    }
    rld_reply(r, d->allowed ? 200 : deny_status, with_body ? "application/json" : NULL, hs, nh);
    rld_buf_reset(&policy);
    rld_buf_reset(&state);
}

/* One request of POST /acquire's batch. */
typedef struct acq {
    rld_acquire_req q;
    rl_usage usage;
    rl_request req;
    rl_decision d;
    rl_err err;
} acq;

/* Parses r into a (replying 400 itself to a bad body): 0 when it is to be decided, at now
 * unless the manual clock gives the time. */
static int acquire_parse(rld_app *app, rld_req *r, acq *a, rl_ns now)
{
    size_t len;
    char *body = rld_req_body(r, &len);
    if (rld_acquire_parse(body, len, &a->q, &a->err) != 0)
        return rld_reply_error(r, 400, "%s", a->err.msg);
    if (check_now_or_reply(app, r, a->q.has_now) != 0) {
        rld_acquire_req_clear(&a->q);
        return -1;
    }
    if (a->q.usage &&
        rld_usage_read(rl_limiter_config(app->lim), a->q.usage, "usage", &a->usage, &a->err)) {
        rld_acquire_req_clear(&a->q);
        return rld_reply_error(r, 400, "%s", a->err.msg);
    }
    a->req = (rl_request){.desc = a->q.desc,
                          .ndesc = a->q.ndesc,
                          .cost = a->q.cost,
                          .usage = a->q.usage ? &a->usage : NULL,
                          .priority = a->q.priority,
                          .flags = (a->q.dry_run ? RL_DRY_RUN : 0u) |
                                   (a->q.reserve ? RL_RESERVE : 0u),
                          .now = app->manual_clock ? rld_app_time(app, a->q.has_now, a->q.now)
                                                   : now};
    return 0;
}

/* Answers a's decision (or its error, rc) on r. */
static void acquire_answer(rld_app *app, rld_req *r, acq *a, int rc)
{
    if (rc == RL_EFULL)
        rld_metrics_keys_refused(app->metrics);
    if (rc != RL_OK) {
        rld_acquire_req_clear(&a->q);
        reply_rc(r, rc, &a->err);
        return;
    }
    const rl_config *cfg = rl_limiter_config(app->lim);
    rld_metrics_decision(app->metrics, &a->d, a->q.dry_run, a->req.cost);
    rld_alerts_note(app->alerts, cfg, &a->req, &a->d);
    reply_decision(r, app, cfg, &a->d, 429, 1);
    rl_decision_done(&a->d);
    rld_acquire_req_clear(&a->q); /* the decision's keys may point into the request */
}

/* POST /acquire for n requests that arrived together (rld_method.many, at most RLD_MANY_MAX):
 * the decisions of those whose bodies parse are made in one rl_acquire_many, so that on Redis
 * they share a round trip; each is answered as on its own. */
static void h_acquire_many(void *ctx, rld_req **rs, size_t n)
{
    rld_app *app = ctx;
    acq a[RLD_MANY_MAX];
    rl_acquisition x[RLD_MANY_MAX];
    rld_req *ok[RLD_MANY_MAX];
    size_t m = 0;
    /* the requests of a batch are decided together: the clock is read once for them */
    rl_ns now = app->manual_clock ? 0 : rld_app_time(app, 0, 0);
    for (size_t i = 0; i < n && i < RLD_MANY_MAX; i++) {
        if (acquire_parse(app, rs[i], &a[m], now) != 0)
            continue;
        x[m] = (rl_acquisition){&a[m].req, &a[m].d, &a[m].err, 0};
        ok[m++] = rs[i];
    }
    if (m == 1)
        x[0].rc = rl_acquire(app->lim, x[0].req, x[0].d, x[0].err);
    else if (m > 1)
        rl_acquire_many(app->lim, x, m);
    for (size_t i = 0; i < m; i++)
        acquire_answer(app, ok[i], &a[i], x[i].rc);
}

static void h_acquire(void *ctx, rld_req *r)
{
    h_acquire_many(ctx, &r, 1);
}

/* ---- GET /check ------------------------------------------------------------------------- */

typedef struct check_ctx {
    rld_check_req q;
    const rl_config *cfg;
    rl_err err;
} check_ctx;

static int check_header(void *ctx, const char *name, size_t nl, const char *value, size_t vl)
{
    check_ctx *c = ctx;
    return rld_check_header(&c->q, c->cfg, name, nl, value, vl, &c->err) != 0;
}

/* POST /acquire for gateways whose sub-request has no body: the request from the headers
 * (check_req.h), the answer in the status and the headers alone. */
static void h_check(void *ctx, rld_req *r)
{
    rld_app *app = ctx;
    check_ctx c;
    rl_decision d;
    int deny;
    c.cfg = rl_limiter_config(app->lim);
    rld_check_req_init(&c.q);
    if (rld_check_deny_status(rld_req_query(r, "deny_status"), &deny, &c.err) != 0 ||
        rld_req_each_header(r, check_header, &c) != 0) {
        rld_reply_error(r, 400, "%s", c.err.msg);
        return;
    }
    rl_request req = {.desc = c.q.desc,
                      .ndesc = c.q.ndesc,
                      .cost = c.q.cost,
                      .usage = c.q.usage.given ? &c.q.usage : NULL,
                      .priority = c.q.priority,
                      .flags = 0,
                      .now = rld_app_time(app, 0, 0)};
    int rc = rl_acquire(app->lim, &req, &d, &c.err);
    if (rc == RL_EFULL)
        rld_metrics_keys_refused(app->metrics);
    if (rc != RL_OK) {
        rld_check_error_to_header(&c.err);
        reply_rc(r, rc, &c.err);
        return;
    }
    rld_metrics_decision(app->metrics, &d, 0, req.cost);
    rld_alerts_note(app->alerts, c.cfg, &req, &d);
    reply_decision(r, app, c.cfg, &d, deny, 0);
    rl_decision_done(&d);
}

/* ---- POST /refund, POST /release -------------------------------------------------------- */

/* Parses a /refund or /release body; replies 400 itself on a bad one. */
static int settle_body_or_reply(rld_app *app, rld_req *r, int with_actual, rld_settle_req *b)
{
    rl_err err;
    size_t len;
    const char *body = rld_req_body(r, &len);
    if (rld_settle_parse(body, len, with_actual, b, &err) != 0)
        return rld_reply_error(r, 400, "%s", err.msg);
    return check_now_or_reply(app, r, b->has_now);
}

static void h_refund(void *ctx, rld_req *r)
{
    rld_app *app = ctx;
    rld_settle_req b;
    rl_settlement s;
    rl_err err;
    if (settle_body_or_reply(app, r, 1, &b) == 0) {
        rl_ns now = rld_app_time(app, b.has_now, b.now);
        const rl_config *cfg = rl_limiter_config(app->lim);
        rl_actual act = {.has_cost = b.has_actual, .cost = b.actual, .usage = {0, {0}}};
        int rc = b.actual_usage &&
                         rld_usage_read(cfg, b.actual_usage, "actual_usage", &act.usage, &err)
                     ? RL_EINVAL
                     : rl_settle_usage(app->lim, b.reservation, &act, now, &b.outcome, &s, &err);
        if (rc != RL_OK) {
            reply_rc(r, rc, &err);
        } else {
            rld_buf *o = rld_req_out(r);
            rld_metrics_settle(app->metrics, &s);
            rld_render_settlement(o, cfg, b.reservation, &s);
            rld_reply_json(r, 200);
        }
    }
    rld_settle_req_clear(&b);
}

static void h_release(void *ctx, rld_req *r)
{
    rld_app *app = ctx;
    rld_settle_req b;
    rl_err err;
    if (settle_body_or_reply(app, r, 0, &b) == 0) {
        rl_ns now = rld_app_time(app, b.has_now, b.now);
        int rc = rl_release_outcome(app->lim, b.reservation, now, &b.outcome, &err);
        if (rc != RL_OK) {
            reply_rc(r, rc, &err);
        } else {
            rld_buf_puts(rld_req_out(r), "{\"released\":true}");
            rld_reply_json(r, 200);
        }
    }
    rld_settle_req_clear(&b);
}

/* ---- GET /rules, GET /metrics, GET /healthz -------------------------------------------- */

static void h_rules(void *ctx, rld_req *r)
{
    rld_app *app = ctx;
    rld_buf_put(rld_req_out(r), app->rules_json, app->rules_len);
    rld_reply_json(r, 200);
}

static void h_metrics(void *ctx, rld_req *r)
{
    rld_app *app = ctx;
    rld_app_metrics(app, rld_req_out(r));
    rld_reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, 0);
}

static void h_reload(void *ctx, rld_req *r)
{
    rl_err err;
    if (rld_app_reload(ctx, &err) != RL_OK) {
        rld_reply_error(r, 400, "%s", err.msg);
        return;
    }
    rld_buf_puts(rld_req_out(r), "{\"reloaded\":true}");
    rld_reply_json(r, 200);
}

static void h_healthz(void *ctx, rld_req *r)
{
    rld_app *app = ctx;
    int stopping = rld_http_stopping(rld_req_http(r));
    /* 200 while the levels' fallbacks answer for a store that is down: still serving */
    if (!stopping && rld_app_store_health(app, rld_req_out(r)) >= 0) {
        rld_reply_json(r, 200);
        return;
    }
    rld_buf_puts(rld_req_out(r), stopping ? "{\"status\":\"stopping\"}" : "{\"status\":\"ok\"}");
    rld_reply_json(r, stopping ? 503 : 200);
}

/* ---- /quota/<user> ---------------------------------------------------------------------- */

static void reply_quota(rld_app *app, rld_req *r, const char *user)
{
    json_t *o = rld_quota_to_json(app->lim, user);
    rld_reply_text(r, 200, "application/json", o ? json_dumps(o, RLD_JSON_FLAGS) : NULL);
    json_decref(o);
}

static int user_or_reply(rld_app *app, rld_req *r, const char **user)
{
    const char *why = rld_user_problem(*user = rld_req_tail(r));
    if (why)
        return rld_reply_error(r, 400, "user: %s", why);
    if (rl_config_tiered_level(rl_limiter_config(app->lim)) < 0)
        return rld_reply_error(r, 400, "user: no level is tiered, so there are no quotas");
    return 0;
}

static void h_quota_get(void *ctx, rld_req *r)
{
    const char *user;
    if (user_or_reply(ctx, r, &user) == 0)
        reply_quota(ctx, r, user);
}

static void h_quota_put(void *ctx, rld_req *r)
{
    rld_app *app = ctx;
    const char *user;
    rl_err err;
    size_t len;
    const char *body = rld_req_body(r, &len);
    if (user_or_reply(app, r, &user) != 0)
        return;
    int rc = rld_app_quota_put(app, user, body, len, &err);
    if (rc != RL_OK)
        reply_rc(r, rc, &err);
    else
        reply_quota(app, r, user);
}

static void h_quota_delete(void *ctx, rld_req *r)
{
    rld_app *app = ctx;
    const char *user;
    rl_err err;
    if (user_or_reply(app, r, &user) != 0)
        return;
    int rc = rld_app_quota_delete(app, user, &err);
    if (rc != RL_OK)
        reply_rc(r, rc, &err);
    else
        reply_quota(app, r, user);
}

/* ---- /usage/<level>/<key> ---------------------------------------------------------------- */

/* The level and key of /usage/<level>/<key> (the key is the rest, '/' included); replies 400
 * itself on a bad one. */
static int level_key_or_reply(rld_app *app, rld_req *r, size_t *level, const char **key)
{
    const char *tail = rld_req_tail(r), *slash = strchr(tail, '/');
    const rl_config *cfg = rl_limiter_config(app->lim);
    size_t n = slash ? (size_t)(slash - tail) : strlen(tail);
    for (*level = 0; *level < cfg->nlevels; (*level)++)
        if (strlen(cfg->levels[*level].name) == n &&
            memcmp(cfg->levels[*level].name, tail, n) == 0)
            break;
    if (*level == cfg->nlevels)
        return rld_reply_error(r, 404, "level: no level named \"%.*s\"", (int)(n > 64 ? 64 : n),
                               tail);
    if (!slash || !slash[1])
        return rld_reply_error(r, 400, "key: required: /usage/<level>/<key>");
    *key = slash + 1;
    size_t kl = strlen(*key);
    for (size_t i = 0; i < kl; i++)
        if ((unsigned char)(*key)[i] < 0x20 || (*key)[i] == 0x7f)
            return rld_reply_error(r, 400, "key: must not hold control characters");
    if (kl > RL_COMPOSED_MAX)
        return rld_reply_error(r, 400, "key: at most %d bytes", RL_COMPOSED_MAX);
    return 0;
}

/* The start of both answers: {"level":..,"key":.. */
static void put_level_key(rld_buf *o, const rl_config *cfg, size_t level, const char *key)
{
    rld_buf_puts(o, "{\"level\":");
    rld_buf_json_str(o, cfg->levels[level].name, strlen(cfg->levels[level].name));
    rld_buf_puts(o, ",\"key\":");
    rld_buf_json_str(o, key, strlen(key));
}

/* {"level", "key", "rules": [{"rule", "unit", "limit", "used", "remaining", "reset_after"}]}:
 * what each rule of the level has used at the key, from a check that takes nothing. */
static void h_usage_get(void *ctx, rld_req *r)
{
    rld_app *app = ctx;
    size_t level;
    const char *key;
    rl_decision d;
    rl_err err;
    if (level_key_or_reply(app, r, &level, &key) != 0)
        return;
    const rl_config *cfg = rl_limiter_config(app->lim);
    rl_item it = {.level = level, .key = key, .keylen = strlen(key), .cost = 0};
    rl_request req = {.items = &it, .nitems = 1, .flags = RL_DRY_RUN,
                      .now = rld_app_time(app, 0, 0)};
    int rc = rl_acquire(app->lim, &req, &d, &err);
    if (rc != RL_OK) {
        reply_rc(r, rc, &err);
        return;
    }
    rld_buf *o = rld_req_out(r);
    put_level_key(o, cfg, level, key);
    rld_buf_puts(o, ",\"rules\":[");
    for (size_t i = 0, n = 0; i < d.napplied; i++) {
        const rl_rule_status *st = rl_decision_status(&d, i);
        if (st)
            rld_render_usage_rule(o, cfg, d.applied[i].rule, st, d.now, n++ == 0);
    }
    rld_buf_puts(o, "]}");
    rl_decision_done(&d);
    rld_reply_json(r, 200);
}

/* Forgets what the key has used at the level (on every instance, with a shared store). */
static void h_usage_delete(void *ctx, rld_req *r)
{
    rld_app *app = ctx;
    size_t level, cleared = 0;
    const char *key;
    rl_err err;
    if (level_key_or_reply(app, r, &level, &key) != 0)
        return;
    const rl_config *cfg = rl_limiter_config(app->lim);
    int rc = rl_limiter_reset(app->lim, level, key, strlen(key), &cleared, &err);
    if (rc != RL_OK) {
        reply_rc(r, rc, &err);
        return;
    }
    rld_buf *o = rld_req_out(r);
    put_level_key(o, cfg, level, key);
    rld_buf_printf(o, ",\"cleared\":%zu}", cleared);
    rld_reply_json(r, 200);
}

/* ---- the table ---------------------------------------------------------------------------- */

const rld_route rld_routes[] = {
    {"/acquire",
     "/acquire",
     "POST",
     {{"POST", h_acquire, RLD_ACQUIRE, h_acquire_many},
      {NULL, NULL, 0, NULL}}},
    {"/check", "/check", "GET", {{"GET", h_check, RLD_ACQUIRE, NULL}, {NULL, NULL, 0, NULL}}},
    {"/refund", "/refund", "POST", {{"POST", h_refund, RLD_ACQUIRE, NULL}, {NULL, NULL, 0, NULL}}},
    {"/release",
     "/release",
     "POST",
     {{"POST", h_release, RLD_ACQUIRE, NULL},
      {NULL, NULL, 0, NULL}}},
    {"/rules", "/rules", "GET", {{"GET", h_rules, 0, NULL}, {NULL, NULL, 0, NULL}}},
    {"/quota/",
     "/quota",
     "GET, PUT, DELETE",
     {{"GET", h_quota_get, RLD_ADMIN, NULL},
      {"PUT", h_quota_put, RLD_ADMIN, NULL},
      {"DELETE", h_quota_delete, RLD_ADMIN, NULL},
      {NULL, NULL, 0, NULL}}},
    {"/usage/",
     "/usage",
     "GET, DELETE",
     {{"GET", h_usage_get, RLD_ADMIN, NULL},
      {"DELETE", h_usage_delete, RLD_ADMIN, NULL},
      {NULL, NULL, 0, NULL}}},
    {"/metrics", "/metrics", "GET", {{"GET", h_metrics, RLD_METRICS, NULL}, {NULL, NULL, 0, NULL}}},
    {"/healthz", "/healthz", "GET", {{"GET", h_healthz, RLD_METRICS, NULL}, {NULL, NULL, 0, NULL}}},
    {"/admin/reload",
     "/admin/reload",
     "POST",
     {{"POST", h_reload, RLD_ADMIN | RLD_UNGATED, NULL}, {NULL, NULL, 0, NULL}}},
};
const size_t rld_nroutes = sizeof rld_routes / sizeof rld_routes[0];
