/*
 * test_rls.c - RLS requests (envoy.service.ratelimit.v3) decided through the native mapping
 * without a socket: serialized requests in, serialized responses out, numbers worked out by
 * hand from the configuration below.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/rls.h"
#include "testutil.h"

/* user: 3 per minute (fixed windows from 0); ip: a bucket of 20 refilled at 10/s (full from
 * empty in 2 s, so 10 per second); global: 100 per hour, for every request. */
static const char config[] =
    "{\"levels\": ["
    " {\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\", \"name\": \"per-user\","
    "  \"limit\": 3, \"window\": 60}]},"
    " {\"name\": \"ip\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"per-ip\","
    "  \"capacity\": 20, \"per_second\": 10}]},"
    " {\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"fixed_window\","
    "  \"name\": \"global\", \"limit\": 100, \"window\": 3600}]}]}";

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse resp_t;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry entry_t;

#define OK_CODE ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
#define OVER ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
#define UNIT(u) ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__##u

/* Packs a request: descriptors separated by '|', entries "key=value" separated by ',', and a
 * descriptor's own hits_addend as a trailing "#N". Returns the length written to out. */
static size_t pack(const char *domain, uint32_t hits, const char *spec, uint8_t *out)
{
    rld_rls_descriptor ds[8], *dp[8];
    entry_t es[8][8], *ep[8][8];
    Google__Protobuf__UInt64Value hv[8];
    char text[512], *save = NULL;
    size_t nd = 0;
    rld_rls_request req = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    snprintf(text, sizeof text, "%s", spec);
    for (char *d = strtok_r(text, "|", &save); d && nd < 8; d = strtok_r(NULL, "|", &save)) {
        envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__init(&ds[nd]);
        char *hash = strchr(d, '#'), *s2 = NULL;
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

static rl_limiter *lim;
static rld_rls rls;
static rld_arena arena;
static rl_err err;

static void setup(void)
{
    lim = tu_limiter(config);
    rls = (rld_rls){.lim = lim, .domain = "edge"};
    rld_arena_init(&arena, 0);
}

static void teardown(void)
{
    rld_arena_reset(&arena);
    tu_free(lim);
}

/* Calls ShouldRateLimit; returns the unpacked response (free with resp_free) or NULL with the
 * code in *code. */
static resp_t *call(const char *domain, uint32_t hits, const char *spec, double now, int *code)
{
    uint8_t msg[2048];
    char ob[4096];
    rld_buf out;
    size_t n = pack(domain, hits, spec, msg);
    rld_buf_init(&out, ob, sizeof ob);
    rld_arena_reset(&arena);
    *code = rld_rls_call(&rls, msg, n, S(now), &arena, &out, &err);
    resp_t *r = *code == RLD_GRPC_OK ? envoy__service__ratelimit__v3__rate_limit_response__unpack(
                                           NULL, out.len, (const uint8_t *)out.p)
                                     : NULL;
    rld_buf_reset(&out);
    return r;
}

static resp_t *call_ok(const char *domain, uint32_t hits, const char *spec, double now)
{
    int code;
    resp_t *r = call(domain, hits, spec, now, &code);
    ck_assert_msg(code == RLD_GRPC_OK, "code %d: %s", code, err.msg);
    ck_assert_ptr_nonnull(r);
    return r;
}

static void resp_free(resp_t *r)
{
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
}

/* Checks statuses[i]: code, the limit's name, requests_per_unit and unit, what remains and the
 * time until reset in milliseconds. */
static void status_is(const resp_t *r, size_t i, int code, const char *name, uint32_t rpu, int unit,
                      uint32_t remaining, int64_t reset_ms)
{
    ck_assert_uint_gt(r->n_statuses, i);
    const rld_rls_status *st = r->statuses[i];
    ck_assert_int_eq(st->code, code);
    ck_assert_ptr_nonnull(st->current_limit);
    ck_assert_str_eq(st->current_limit->name, name);
    ck_assert_uint_eq(st->current_limit->requests_per_unit, rpu);
    ck_assert_int_eq(st->current_limit->unit, unit);
    ck_assert_uint_eq(st->limit_remaining, remaining);
    ck_assert_ptr_nonnull(st->duration_until_reset);
    ck_assert_int_eq(st->duration_until_reset->seconds * 1000 +
                         st->duration_until_reset->nanos / 1000000,
                     reset_ms);
}

START_TEST(one_decision_over_every_descriptor)
{
    /* alice at t=10: per-user 1 of 3 (window [0, 60) ends in 50 s); global 1 of 100 */
    resp_t *r = call_ok("edge", 0, "user=alice", 10);
    ck_assert_int_eq(r->overall_code, OK_CODE);
    ck_assert_uint_eq(r->n_statuses, 1);
    status_is(r, 0, OK_CODE, "per-user", 3, UNIT(MINUTE), 2, 50000);
    resp_free(r);

    /* hits 2: alice 3 of 3, ip 2 of 20 (refilled to full in 0.2 s), global 3 of 100 */
    r = call_ok("edge", 2, "user=alice|ip=10.0.0.1", 10);
    ck_assert_int_eq(r->overall_code, OK_CODE);
    ck_assert_uint_eq(r->n_statuses, 2);
    status_is(r, 0, OK_CODE, "per-user", 3, UNIT(MINUTE), 0, 50000);
    status_is(r, 1, OK_CODE, "per-ip", 10, UNIT(SECOND), 18, 200);
    resp_free(r);

    /* one more for alice does not fit: denied, and the ip bucket keeps its 18 (at t=10 still,
     * nothing refilled); the global count stays 3 */
    r = call_ok("edge", 1, "user=alice|ip=10.0.0.1", 10);
    ck_assert_int_eq(r->overall_code, OVER);
    status_is(r, 0, OVER, "per-user", 3, UNIT(MINUTE), 0, 50000);
    status_is(r, 1, OK_CODE, "per-ip", 10, UNIT(SECOND), 18, 200);
    resp_free(r);

    /* the global level (a default key) belongs to every descriptor: 97 of 100 left, its
     * window [0, 3600) ends in 3590 s; "path" is read by no level and ignored */
    r = call_ok("edge", 1, "path=/x", 10);
    ck_assert_int_eq(r->overall_code, OK_CODE);
    status_is(r, 0, OK_CODE, "global", 100, UNIT(HOUR), 96, 3590000);
    resp_free(r);

    /* a new window at t=60 */
    r = call_ok("edge", 1, "user=alice", 60);
    status_is(r, 0, OK_CODE, "per-user", 3, UNIT(MINUTE), 2, 60000);
    resp_free(r);
}
END_TEST

START_TEST(check_only_and_hits)
{
    /* a descriptor's hits_addend 0: decide whether one more fits, take nothing */
    for (int i = 0; i < 3; i++) {
        resp_t *r = call_ok("edge", 0, "user=bob#0", 10);
        ck_assert_int_eq(r->overall_code, OK_CODE);
        status_is(r, 0, OK_CODE, "per-user", 3, UNIT(MINUTE), 3, 0);
        resp_free(r);
    }
    /* a descriptor's own hits_addend replaces the request's: 3 of 3 */
    resp_t *r = call_ok("edge", 1, "user=bob#3", 10);
    status_is(r, 0, OK_CODE, "per-user", 3, UNIT(MINUTE), 0, 50000);
    resp_free(r);
    /* now check only is denied, and stays denied */
    r = call_ok("edge", 0, "user=bob#0", 10);
    ck_assert_int_eq(r->overall_code, OVER);
    status_is(r, 0, OVER, "per-user", 3, UNIT(MINUTE), 0, 50000);
    resp_free(r);
    /* 4 never fits a limit of 3 */
    r = call_ok("edge", 4, "user=carl", 10);
    ck_assert_int_eq(r->overall_code, OVER);
    status_is(r, 0, OVER, "per-user", 3, UNIT(MINUTE), 3, 0);
    resp_free(r);
}
END_TEST

START_TEST(unknown_domain_counts_nothing)
{
    for (int i = 0; i < 5; i++) {
        resp_t *r = call_ok("other", 1, "user=dave|ip=10.0.0.2", 10);
        ck_assert_int_eq(r->overall_code, OK_CODE);
        ck_assert_uint_eq(r->n_statuses, 2);
        ck_assert_int_eq(r->statuses[0]->code, OK_CODE);
        ck_assert_ptr_null(r->statuses[0]->current_limit);
        ck_assert_int_eq(r->statuses[1]->code, OK_CODE);
        resp_free(r);
    }
    resp_t *r = call_ok("edge", 1, "user=dave", 10);
    status_is(r, 0, OK_CODE, "per-user", 3, UNIT(MINUTE), 2, 50000);
    resp_free(r);
    /* without a configured domain any domain is served */
    rls.domain = NULL;
    r = call_ok("other", 1, "user=dave", 10);
    status_is(r, 0, OK_CODE, "per-user", 3, UNIT(MINUTE), 1, 50000);
    resp_free(r);
}
END_TEST

static const struct {
    const char *domain;
    uint32_t hits;
    const char *spec;
    const char *msg;
} bad[] = {
    {"", 1, "user=a", "domain: required"},
    {"edge", 1, "", "descriptors: at least one required"},
    {"edge", 1, "user=a|#2", "descriptors[1].entries: at least one entry required"},
    {"edge", 1, "user=a,=b", "descriptors[0].entries[1].key: must not be empty"},
    {"edge", 1, "user=a|user=b",
     "descriptors[1].entries[0].value: user has another value in an "
     "earlier descriptor"},
    {"edge", 1, "user=a#1|ip=b#2",
     "descriptors[1].hits_addend: differs from an earlier "
     "descriptor's; with a native configuration a request is one "
     "decision at one cost"},
    {"edge", 1, "ip=10.0.0.1|user=", "descriptors[1].entries[0].value: must not be empty"},
    {"edge", 1, "user=a#1000000000001",
     "hits_addend: must be a whole number from 1 to 1000000000000"},
};

START_TEST(bad_requests_name_the_field)
{
    int code;
    resp_t *r = call(bad[_i].domain, bad[_i].hits, bad[_i].spec, 10, &code);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(code, RLD_GRPC_INVALID_ARGUMENT);
    ck_assert_str_eq(err.msg, bad[_i].msg);
    /* and nothing was taken: a fresh user a still has 3 - 1 left after one hit */
    r = call_ok("edge", 1, "user=a|ip=10.0.0.1", 10);
    status_is(r, 0, OK_CODE, "per-user", 3, UNIT(MINUTE), 2, 50000);
    status_is(r, 1, OK_CODE, "per-ip", 10, UNIT(SECOND), 19, 100);
    resp_free(r);
}
END_TEST

START_TEST(malformed_and_oversized_messages)
{
    static const uint8_t junk[] = {0x0a, 0x05, 'e', 'd'}; /* a string longer than the message */
    char ob[256];
    rld_buf out;
    rld_buf_init(&out, ob, sizeof ob);
    ck_assert_int_eq(rld_rls_call(&rls, junk, sizeof junk, S(10), &arena, &out, &err),
                     RLD_GRPC_INVALID_ARGUMENT);
    ck_assert_str_eq(err.msg, "message: not a RateLimitRequest");
    ck_assert_uint_eq(out.len, 0);

    /* 40 descriptors need more than an arena of 1 KiB */
    uint8_t msg[4096];
    char spec[1024] = "user=a";
    for (int i = 1; i < 40; i++)
        strcat(spec, "|ip=10.0.0.1");
    size_t n = pack("edge", 1, spec, msg);
    rld_arena small;
    rld_arena_init(&small, 1024);
    ck_assert_int_eq(rld_rls_call(&rls, msg, n, S(10), &small, &out, &err),
                     RLD_GRPC_RESOURCE_EXHAUSTED);
    rld_arena_reset(&small);
    rld_buf_reset(&out);
}
END_TEST

START_TEST(ratelimit_headers_when_asked)
{
    rls.ratelimit_headers = 1;
    resp_t *r = call_ok("edge", 1, "user=erin", 10);
    ck_assert_uint_eq(r->n_response_headers_to_add, 2);
    ck_assert_str_eq(r->response_headers_to_add[0]->key, "ratelimit-policy");
    ck_assert_str_eq(r->response_headers_to_add[0]->value,
                     "\"user.per-user\";q=3;w=60, \"global.global\";q=100;w=3600");
    ck_assert_str_eq(r->response_headers_to_add[1]->key, "ratelimit");
    ck_assert_str_eq(r->response_headers_to_add[1]->value,
                     "\"user.per-user\";r=2;t=50, \"global.global\";r=99;t=3590");
    resp_free(r);
    rls.ratelimit_headers = 0;
    r = call_ok("edge", 1, "user=erin", 10);
    ck_assert_uint_eq(r->n_response_headers_to_add, 0);
    resp_free(r);
}
END_TEST

/* grpc.hits_addend names a dimension: a request's hits are its usage there and its cost is 1.
 * Team t's output bucket holds 1000; user u's window counts requests (3 a minute); prices turn
 * 400 output tokens of model m at $10 per million into $0.004 of u's $0.01 a day. Calls of 400
 * and 400 pass (200 tokens, 2 requests and $0.002 left), a third of 400 is denied by the
 * bucket and takes nothing: one of 200 passes and leaves 0 tokens, 0 requests. */
START_TEST(hits_addend_counts_a_dimension)
{
    rl_limiter *ul = tu_limiter(
        "{\"dimensions\": [\"output_tokens\"], \"prices\": {\"by\": \"model\", \"models\": {\"m\":"
        " {\"output_tokens\": 10}}}, \"levels\": ["
        " {\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\", \"name\": \"rpm\", \"limit\": 3,"
        "  \"window\": 60, \"unit\": \"requests\"}, {\"type\": \"fixed_window\", \"name\": \"usd\","
        "  \"limit\": 0.01, \"window\": 86400, \"unit\": \"usd\"}]},"
        " {\"name\": \"team\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"otpm\","
        "  \"capacity\": 1000, \"per_second\": 0.000001, \"unit\": \"output_tokens\"}]}]}");
    rl_limiter *saved = rls.lim;
    rls.lim = ul;
    rls.hits_dim = "output_tokens";
    static const struct {
        uint32_t hits;
        int code;
        uint32_t team_left, user_left;
    } rows[] = {{400, OK_CODE, 600, 2}, {400, OK_CODE, 200, 1}, {400, OVER, 200, 1},
                {200, OK_CODE, 0, 0}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        resp_t *r = call_ok("edge", rows[i].hits, "user=u|team=t|model=m", 0);
        ck_assert_int_eq(r->overall_code, rows[i].code);
        ck_assert_int_eq(r->statuses[1]->limit_remaining, rows[i].team_left);
        ck_assert_int_eq(r->statuses[0]->limit_remaining, rows[i].user_left);
        resp_free(r);
    }
    rls.lim = saved;
    rls.hits_dim = NULL;
    tu_free(ul);
}
END_TEST

static Suite *rls_suite(void)
{
    Suite *s = suite_create("rls");
    TCase *tc = tcase_create("native");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, one_decision_over_every_descriptor);
    tcase_add_test(tc, check_only_and_hits);
    tcase_add_test(tc, unknown_domain_counts_nothing);
    tcase_add_loop_test(tc, bad_requests_name_the_field, 0, sizeof bad / sizeof bad[0]);
    tcase_add_test(tc, malformed_and_oversized_messages);
    tcase_add_test(tc, ratelimit_headers_when_asked);
    tcase_add_test(tc, hits_addend_counts_a_dimension);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(rls_suite()) ? 1 : 0;
}
