/*
 * fuzz_rls.c - a gRPC ShouldRateLimit request message: rld_rls_call unpacks it (protobuf-c,
 * into an arena with the server's cap), decides it on a limiter with the native mapping and
 * packs the answer. A refusal has a message; an answer unpacks as a RateLimitResponse with
 * one status per descriptor, each OK or OVER_LIMIT and never a negative time until reset.
 */
#include <string.h>

#include "fuzz.h"
#include "grpc/rls.h"

static const char config[] =
    "{\"domain\": \"edge\", \"levels\": ["
    "{\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\", \"limit\": 3, \"window\": 60}]},"
    "{\"name\": \"ip\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 20,"
    " \"per_second\": 10}]},"
    "{\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"gcra\","
    " \"per_second\": 100, \"burst\": 50}]}]}";

static rld_arena arena;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rl_limiter *lim = fz_limiter(config);
    rld_rls rls = {.lim = lim, .domain = "edge", .ratelimit_headers = 1};
    char inl[512];
    rld_buf out;
    rl_err err = {{0}};
    rld_buf_init(&out, inl, sizeof inl);
    rld_arena_init(&arena, 65536);
    rld_grpc_code code = rld_rls_call(&rls, data, size, 10 * RL_NS_PER_SEC, &arena, &out, &err);
    if (code != RLD_GRPC_OK) {
        FZ_CHECK(err.msg[0] != '\0', "code %d without a message", (int)code);
    } else {
        rld_rls_request *req = envoy__service__ratelimit__v3__rate_limit_request__unpack(
            NULL, size, data);
        rld_rls_response *resp = envoy__service__ratelimit__v3__rate_limit_response__unpack(
            NULL, out.len, (const uint8_t *)out.p);
        FZ_CHECK(req != NULL, "an answer to what does not unpack");
        FZ_CHECK(resp != NULL, "the answer does not unpack");
        FZ_CHECK(resp->n_statuses == req->n_descriptors, "%zu statuses for %zu descriptors",
                 resp->n_statuses, req->n_descriptors);
        for (size_t i = 0; i < resp->n_statuses; i++) {
            const rld_rls_status *st = resp->statuses[i];
            FZ_CHECK(!st->duration_until_reset || (st->duration_until_reset->seconds >= 0 &&
                                                   st->duration_until_reset->nanos >= 0),
                     "status %zu: a negative duration until reset", i);
            FZ_CHECK(st->code == ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK ||
                         st->code ==
                             ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT,
                     "status %zu: code %d", i, (int)st->code);
        }
        envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(resp, NULL);
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(req, NULL);
    }
    rld_arena_reset(&arena);
    rld_buf_reset(&out);
    fz_free(lim);
    return 0;
}
