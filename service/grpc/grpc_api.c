/*
 * grpc_api.c - see grpc_api.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/health/v1/health.pb-c.h"
#include "grpc_api.h"
#include "app/auth.h"
#include "app/values.h"

#define RLS_SERVICE "envoy.service.ratelimit.v3.RateLimitService"
/* the same whatever was wrong, as the HTTP 401 */
#define UNAUTHENTICATED_MSG                                                                        \
    "authorization: this method needs \"authorization: Bearer <token>\" with a valid token"

/* The call's time: the clock, or with --manual-clock its ratelimitd-now metadata. */
static rld_grpc_code call_time(rld_app *app, const rld_grpc_call *call, rl_ns *now, rl_err *err)
{
    char *end;
    rl_ns t;
    if (!call->now) {
        *now = rld_app_time(app, 0, 0);
        return RLD_GRPC_OK;
    }
    if (!app->manual_clock)
        return rl_errf(err, RLD_GRPC_INVALID_ARGUMENT,
                       "ratelimitd-now: only accepted when ratelimitd runs with --manual-clock");
    double s = strtod(call->now, &end);
    if (rld_value_seconds("ratelimitd-now", end == call->now || *end ? NAN : s, &t, err) != 0)
        return RLD_GRPC_INVALID_ARGUMENT;
    *now = rld_app_time(app, 1, t);
    return RLD_GRPC_OK;
}

static rld_grpc_code m_should_rate_limit(void *ctx, const rld_grpc_call *call, rld_buf *out,
                                         rl_err *err)
{
    rld_grpc_api *api = ctx;
    rld_app *app = api->app;
    rl_ns now = 0;
    if (!rld_auth_matches(app->set->acquire_token, call->authorization))
        return rl_errf(err, RLD_GRPC_UNAUTHENTICATED, UNAUTHENTICATED_MSG);
    rld_grpc_code code = call_time(app, call, &now, err);
    if (code != RLD_GRPC_OK)
        return code;
    /* as an HTTP request does: a reload waits for it, and it sees one configuration */
    pthread_rwlock_rdlock(&app->gate);
    code = rld_rls_call(&api->rls, call->msg, call->len, now, call->arena, out, err);
    pthread_rwlock_unlock(&app->gate);
    return code;
}

/* 1 when the service cannot answer as configured: stopping, or the store unreachable while a
 * level would deny for it. */
static int not_serving(rld_grpc_api *api)
{
    rld_app *app = api->app;
    char scratch[512];
    rld_buf b;
    int down = 0;
    if (__atomic_load_n(&api->stopping, __ATOMIC_ACQUIRE))
        return 1;
    rld_buf_init(&b, scratch, sizeof scratch);
    if (rld_app_store_health(app, &b) == 0) {
        const rl_config *cfg = rl_limiter_config(app->lim);
        for (size_t i = 0; i < cfg->nlevels; i++)
            if (app->set->on_error[i] == RLD_ON_ERROR_CLOSED)
                down = 1;
    }
    rld_buf_reset(&b);
    return down;
}

static rld_grpc_code m_health_check(void *ctx, const rld_grpc_call *call, rld_buf *out, rl_err *err)
{
    Grpc__Health__V1__HealthCheckRequest *req;
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    if (!rld_auth_matches(((rld_grpc_api *)ctx)->app->set->metrics_token, call->authorization))
        return rl_errf(err, RLD_GRPC_UNAUTHENTICATED, UNAUTHENTICATED_MSG);
    if (!(req = grpc__health__v1__health_check_request__unpack(NULL, call->len, call->msg)))
        return rl_errf(err, RLD_GRPC_INVALID_ARGUMENT, "message: not a HealthCheckRequest");
    /* "ratelimit": the name envoyproxy/ratelimit registers its health under, which probes
     * written for it ask */
    int known = !req->service[0] || strcmp(req->service, RLS_SERVICE) == 0 ||
                strcmp(req->service, "ratelimit") == 0;
    grpc__health__v1__health_check_request__free_unpacked(req, NULL);
    if (!known)
        return rl_errf(err, RLD_GRPC_NOT_FOUND,
                       "service: unknown (known: \"\", " RLS_SERVICE ", ratelimit)");
    resp.status = not_serving(ctx)
                      ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                      : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    size_t n = grpc__health__v1__health_check_response__get_packed_size(&resp);
    if (rld_buf_reserve(out, n) != 0)
        return rl_errf(err, RLD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    grpc__health__v1__health_check_response__pack(&resp, (uint8_t *)out->p + out->len);
    out->len += n;
    return RLD_GRPC_OK;
}

void rld_grpc_observe(void *ctx, int method, rld_grpc_code code, rl_ns duration)
{
    rld_metrics_grpc(((rld_grpc_api *)ctx)->app->metrics, method, (int)code, duration);
}

const rld_grpc_method rld_grpc_methods[] = {
    {"/" RLS_SERVICE "/ShouldRateLimit", m_should_rate_limit},
    {"/grpc.health.v1.Health/Check", m_health_check},
};
const size_t rld_grpc_nmethods = sizeof rld_grpc_methods / sizeof rld_grpc_methods[0];

/* ---- the part the app reloads ------------------------------------------------------------ */

static void part_reload(void *self, rl_limiter *lim)
{
    ((rld_grpc_api *)self)->rls.lim = lim;
}

static void part_stopping(void *self)
{
    __atomic_store_n(&((rld_grpc_api *)self)->stopping, 1, __ATOMIC_RELEASE);
}

static const rld_part_ops grpc_part = {
    .name = "grpc", .reload = part_reload, .stopping = part_stopping};

int rld_grpc_api_init(rld_grpc_api *api, rld_app *app, rl_err *err)
{
    static const char *paths[sizeof rld_grpc_methods / sizeof rld_grpc_methods[0]];
    memset(api, 0, sizeof *api);
    api->app = app;
    api->rls = (rld_rls){.lim = app->lim,
                         .domain = app->set->domain,
                         .ratelimit_headers = app->set->grpc_ratelimit_headers,
                         .hits_dim = app->set->grpc_hits_addend,
                         .metrics = app->metrics,
                         .alerts = app->alerts};
    if (rld_app_attach(app, &grpc_part, api) != RL_OK)
        return rl_errf(err, RL_EFULL, "grpc: the app holds no more parts");
    for (size_t i = 0; i < rld_grpc_nmethods; i++)
        paths[i] = rld_grpc_methods[i].path;
    rld_metrics_grpc_methods(app->metrics, rld_grpc_nmethods, paths);
    return RL_OK;
}
