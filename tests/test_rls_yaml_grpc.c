/*
 * test_rls_yaml_grpc.c - ShouldRateLimit over a YAML configuration without a socket: serialized
 * RateLimitRequests in, serialized RateLimitResponses out, through rld_rls_call (the function
 * the gRPC server calls) with the YAML matcher as the decision; answers worked out by hand.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/rls_yaml_grpc.h"
#include "testutil.h"
#include "yamlutil.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse resp_t;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry entry_t;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__RateLimitOverride ovr_t;

#define OK_CODE ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
#define OVER ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
#define UNIT(u) ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__##u

static const char *conf = "domain: messaging\n"
                          "descriptors:\n"
                          "  - key: message_type\n"
                          "    value: marketing\n"
                          "    descriptors:\n"
                          "      - key: to_number\n"
                          "        rate_limit:\n"
                          "          name: marketing\n"
                          "          unit: day\n"
                          "          requests_per_unit: 5\n"
                          "  - key: to_number\n"
                          "    rate_limit:\n"
                          "      unit: day\n"
                          "      requests_per_unit: 100\n";

/* Packs a request: descriptors separated by '|', entries "key=value" separated by ',', a
 * descriptor's own hits_addend as a trailing "#N", a limit override as "!N/UNIT" (unit as the
 * enum's number). */
static size_t pack(const char *domain, uint32_t hits, const char *spec, uint8_t *out)
{
    rld_rls_descriptor ds[8], *dp[8];
    entry_t es[8][8], *ep[8][8];
    Google__Protobuf__UInt64Value hv[8];
    ovr_t ov[8];
    char text[512], *save = NULL;
    size_t nd = 0;
    rld_rls_request req = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    snprintf(text, sizeof text, "%s", spec);
    for (char *d = strtok_r(text, "|", &save); d && nd < 8; d = strtok_r(NULL, "|", &save)) {
        envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__init(&ds[nd]);
        char *bang = strchr(d, '!'), *hash = strchr(d, '#'), *s2 = NULL;
        if (bang) {
            *bang = '\0';
            envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__rate_limit_override__init(
                &ov[nd]);
            unsigned rpu, unit;
            ck_assert_int_eq(sscanf(bang + 1, "%u/%u", &rpu, &unit), 2);
            ov[nd].requests_per_unit = rpu;
            ov[nd].unit = (Envoy__Type__V3__RateLimitUnit)unit;
            ds[nd].limit = &ov[nd];
        }
        if (hash) {
            *hash = '\0';
            google__protobuf__uint64_value__init(&hv[nd]);
            hv[nd].value = strtoull(hash + 1, NULL, 10);
            ds[nd].hits_addend = &hv[nd];
        }
        size_t ne = 0;
        for (char *e = strtok_r(d, ",", &s2); e && ne < 8; e = strtok_r(NULL, ",", &s2)) {
            char *eq = strchr(e, '=');
            envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__entry__init(
                &es[nd][ne]);
            *eq = '\0';
            es[nd][ne].key = e;
            es[nd][ne].value = eq + 1;
            ep[nd][ne] = &es[nd][ne];
            ne++;
        }
        ds[nd].n_entries = ne;
        ds[nd].entries = ep[nd];
        dp[nd] = &ds[nd];
        nd++;
    }
    req.domain = (char *)domain;
    req.hits_addend = hits;
    req.n_descriptors = nd;
    req.descriptors = dp;
    return envoy__service__ratelimit__v3__rate_limit_request__pack(&req, out);
}

static yt t;
static rld_rls rls;
static rld_arena arena;
static rl_err err;

static void setup(void)
{
    yt_open(&t, conf, NULL);
    memset(&rls, 0, sizeof rls);
    rls.lim = t.lim;
    rls.decide = rld_yrls_decide_rls;
    rls.cls = t.y;
    rld_arena_init(&arena, 1 << 20);
}

static void teardown(void)
{
    rld_arena_reset(&arena);
    yt_close(&t);
}

/* Calls ShouldRateLimit at now (seconds); returns the unpacked response (free with
 * envoy__service__ratelimit__v3__rate_limit_response__free_unpacked). */
static resp_t *call(const char *domain, uint32_t hits, const char *spec, double now)
{
    uint8_t msg[2048];
    size_t len = pack(domain, hits, spec, msg);
    rld_buf out;
    rld_buf_init(&out, NULL, 0);
    rld_grpc_code code = rld_rls_call(&rls, msg, len, (rl_ns)(now * 1e9), &arena, &out, &err);
    ck_assert_msg(code == RLD_GRPC_OK, "code %d: %s", code, err.msg);
    resp_t *r = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, out.len,
                                                                           (const uint8_t *)out.p);
    ck_assert_ptr_nonnull(r);
    rld_buf_reset(&out);
    rld_arena_reset(&arena);
    return r;
}

START_TEST(statuses_in_order)
{
    const char *both = "message_type=marketing,to_number=1|to_number=1";
    resp_t *r = NULL;
    /* at t = 1000.5 the day ends in 85400 s */
    for (int i = 0; i < 5; i++) {
        if (r)
            envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
        r = call("messaging", 0, both, 1000.5);
    }
    ck_assert_int_eq(r->overall_code, OK_CODE);
    ck_assert_uint_eq(r->n_statuses, 2);
    ck_assert_int_eq(r->statuses[0]->code, OK_CODE);
    ck_assert_str_eq(r->statuses[0]->current_limit->name, "marketing");
    ck_assert_uint_eq(r->statuses[0]->current_limit->requests_per_unit, 5);
    ck_assert_int_eq(r->statuses[0]->current_limit->unit, UNIT(DAY));
    ck_assert_uint_eq(r->statuses[0]->limit_remaining, 0);
    ck_assert_int_eq(r->statuses[0]->duration_until_reset->seconds, 85400);
    ck_assert_int_eq(r->statuses[0]->duration_until_reset->nanos, 0);
    ck_assert_str_eq(r->statuses[1]->current_limit->name, "");
    ck_assert_uint_eq(r->statuses[1]->limit_remaining, 95);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    /* over: nothing counted; a descriptor that matches nothing has no current_limit */
    r = call("messaging", 0, both, 1000.5);
    ck_assert_int_eq(r->overall_code, OVER);
    ck_assert_int_eq(r->statuses[0]->code, OVER);
    ck_assert_int_eq(r->statuses[1]->code, OK_CODE);
    ck_assert_uint_eq(r->statuses[1]->limit_remaining, 95);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    r = call("messaging", 0, "nothing=here", 1000.5);
    ck_assert_int_eq(r->overall_code, OK_CODE);
    ck_assert_ptr_null(r->statuses[0]->current_limit);
    ck_assert_ptr_null(r->statuses[0]->duration_until_reset);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
}
END_TEST

START_TEST(override_and_hits_wrapper)
{
    /* 3 a minute (MINUTE is 2) for this descriptor; at t = 10 the minute ends in 50 s */
    resp_t *r = call("messaging", 0, "to_number=2!3/2", 10);
    ck_assert_uint_eq(r->statuses[0]->current_limit->requests_per_unit, 3);
    ck_assert_int_eq(r->statuses[0]->current_limit->unit, UNIT(MINUTE));
    ck_assert_uint_eq(r->statuses[0]->limit_remaining, 2);
    ck_assert_int_eq(r->statuses[0]->duration_until_reset->seconds, 50);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    /* a present hits_addend of 0 checks only; the request's 7 applies where none is given */
    r = call("messaging", 7, "to_number=3#0|to_number=4", 10);
    ck_assert_uint_eq(r->statuses[0]->limit_remaining, 100);
    ck_assert_uint_eq(r->statuses[1]->limit_remaining, 93);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
}
END_TEST

START_TEST(headers)
{
    rls.ratelimit_headers = 1;
    rld_yrls_set_upstream_headers(t.y, "X-RateLimit-Limit", "X-RateLimit-Remaining",
                                  "X-RateLimit-Reset");
    resp_t *r = call("messaging", 2, "message_type=marketing,to_number=1|to_number=1", 86399);
    ck_assert_uint_eq(r->n_response_headers_to_add, 5);
    ck_assert_str_eq(r->response_headers_to_add[0]->key, "ratelimit-policy");
    ck_assert_str_eq(r->response_headers_to_add[0]->value,
                     "\"marketing\";q=5;w=86400, \"to_number\";q=100;w=86400");
    ck_assert_str_eq(r->response_headers_to_add[1]->key, "ratelimit");
    ck_assert_str_eq(r->response_headers_to_add[1]->value,
                     "\"marketing\";r=3;t=1, \"to_number\";r=98;t=1");
    /* upstream's three: the descriptor nearest its limit, marketing with 3 left */
    ck_assert_str_eq(r->response_headers_to_add[2]->key, "X-RateLimit-Limit");
    ck_assert_str_eq(r->response_headers_to_add[2]->value, "5");
    ck_assert_str_eq(r->response_headers_to_add[3]->value, "3");
    ck_assert_str_eq(r->response_headers_to_add[4]->key, "X-RateLimit-Reset");
    ck_assert_str_eq(r->response_headers_to_add[4]->value, "1");
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
}
END_TEST

START_TEST(bad_request)
{
    uint8_t msg[256];
    size_t len = pack("messaging", 0, "to_number=a\tb", msg);
    rld_buf out;
    rld_buf_init(&out, NULL, 0);
    ck_assert_int_eq(rld_rls_call(&rls, msg, len, 0, &arena, &out, &err),
                     RLD_GRPC_INVALID_ARGUMENT);
    ck_assert_str_eq(err.msg, "descriptors[0].entries[0].value: must not hold control characters");
    rld_buf_reset(&out);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("rls_yaml_grpc");
    TCase *tc = tcase_create("rls_yaml_grpc");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, statuses_in_order);
    tcase_add_test(tc, override_and_hits_wrapper);
    tcase_add_test(tc, headers);
    tcase_add_test(tc, bad_request);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
