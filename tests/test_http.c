/*
 * test_http.c - the real ratelimitd over HTTP: every endpoint, every status code, the headers,
 * a reservation's whole life, quotas surviving a restart, the flags, a graceful stop, and many
 * keep-alive clients on one key. Each test starts the servers it needs on a free port.
 * Expected numbers are worked out by hand in the comments.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "srvutil.h"

static const char *const manual[] = {"--manual-clock", NULL};

/* A JSON body member of limits[i]. */
static json_t *limit_at(const su_resp *r, size_t i, const char *key)
{
    json_t *l = json_array_get(json_object_get(r->json, "limits"), i);
    ck_assert_msg(l != NULL, "no limits[%zu] in %.2000s", i, r->body);
    json_t *v = json_object_get(l, key);
    ck_assert_msg(v != NULL, "no limits[%zu].%s in %.2000s", i, key, r->body);
    return v;
}

static double limit_num(const su_resp *r, size_t i, const char *key)
{
    json_t *v = limit_at(r, i, key);
    ck_assert_msg(json_is_number(v), "limits[%zu].%s is not a number in %.2000s", i, key, r->body);
    return json_number_value(v);
}

static su_resp acquire(const su_server *s, const char *body)
{
    return su_req(s, "POST", "/acquire", body, NULL);
}

/* ---- /acquire: decisions, body and headers ------------------------------------------------ */

static const char *bucket_cfg =
    "{\"levels\": ["
    " {\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"per-user\", "
    "\"capacity\": 3, \"per_second\": 1}]},"
    " {\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"fixed_window\", "
    "\"name\": \"g\", \"limit\": 100, \"window\": 10}]}]}";

/* Model usage over HTTP (docs/usage.md): OpenAI's and Anthropic's headers on a denial, and
 * the amounts in /metrics. A team's output bucket of 1000 (10 a second) and a user's $1 a day;
 * model m at $2 and $10 per million input and output tokens. At t = 100: {100 in, 900 out}
 * passes ($0.0002 + $0.009 = $0.0092); {0 in, 200 out} is denied: 100 left, 100 missing at 10
 * a second is 10 s (Retry-After 10), the bucket is full again in 90 s; requests (a window of
 * 10 a minute) have 9 left, full at t = 120. */
START_TEST(model_headers_and_usage_metrics)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s,
             "{\"model_headers\": \"both\", \"dimensions\": [\"input_tokens\", \"output_tokens\"],"
             " \"prices\": {\"by\": \"model\", \"models\": {\"m\": {\"input_tokens\": 2,"
             " \"output_tokens\": 10}}}, \"levels\": ["
             " {\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\", \"name\": \"usd\","
             " \"limit\": 1, \"window\": 86400, \"unit\": \"usd\"}]},"
             " {\"name\": \"team\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"otpm\","
             " \"capacity\": 1000, \"per_second\": 10, \"unit\": \"output_tokens\"}]},"
             " {\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"fixed_window\","
             " \"name\": \"rpm\", \"limit\": 10, \"window\": 60, \"unit\": \"requests\"}]}]}",
             manual);
    su_resp r = acquire(&s, "{\"keys\": {\"user\": \"u\", \"team\": \"t\", \"model\": \"m\"},"
                            " \"usage\": {\"input_tokens\": 100, \"output_tokens\": 900}, \"now\": 100}");
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    r = acquire(&s, "{\"keys\": {\"user\": \"u\", \"team\": \"t\", \"model\": \"m\"},"
                    " \"usage\": {\"output_tokens\": 200}, \"now\": 100}");
    ck_assert_int_eq(r.status, 429);
    ck_assert_str_eq(su_header(&r, "Retry-After"), "10");
    ck_assert_str_eq(su_header(&r, "x-ratelimit-limit-tokens"), "1000");
    ck_assert_str_eq(su_header(&r, "x-ratelimit-remaining-tokens"), "100");
    ck_assert_str_eq(su_header(&r, "x-ratelimit-reset-tokens"), "1m30s");
    ck_assert_str_eq(su_header(&r, "x-ratelimit-limit-requests"), "10");
    ck_assert_str_eq(su_header(&r, "x-ratelimit-remaining-requests"), "9");
    ck_assert_str_eq(su_header(&r, "x-ratelimit-reset-requests"), "20s");
    ck_assert_str_eq(su_header(&r, "anthropic-ratelimit-output-tokens-remaining"), "100");
    ck_assert_str_eq(su_header(&r, "anthropic-ratelimit-output-tokens-reset"),
                     "1970-01-01T00:03:10Z");
    ck_assert_str_eq(su_header(&r, "anthropic-ratelimit-requests-reset"), "1970-01-01T00:02:00Z");
    ck_assert_ptr_null(su_header(&r, "anthropic-ratelimit-input-tokens-limit"));
    su_resp_free(&r);
    r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_ptr_nonnull(strstr(r.body, "\nratelimit_taken_total{level=\"user\",unit=\"usd\"} 0.0092\n"));
    ck_assert_ptr_nonnull(
        strstr(r.body, "\nratelimit_taken_total{level=\"team\",unit=\"output_tokens\"} 900\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nratelimit_denied_amount_total{level=\"team\","
                                         "rule=\"otpm\",unit=\"output_tokens\"} 200\n"));
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(acquire_body_and_headers)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, bucket_cfg, manual);

    /* a new key starts full (3); one taken leaves 2, back to full after 1 s at 1/s; the
     * window of 100 per 10 s counts 1 and resets at the window's end, 10 s after t = 0 */
    su_resp r = acquire(&s, "{\"keys\": {\"user\": \"u1\"}, \"now\": 0}");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body,
                     "{\"allowed\":true,\"retry_after\":0,\"blocked_by\":null,\"limits\":["
                     "{\"level\":\"user\",\"key\":\"u1\",\"rule\":\"per-user\",\"limit\":3,"
                     "\"remaining\":2,\"reset_after\":1},"
                     "{\"level\":\"global\",\"key\":\"*\",\"rule\":\"g\",\"limit\":100,"
                     "\"remaining\":99,\"reset_after\":10}]}");
    ck_assert_str_eq(su_header(&r, "Content-Type"), "application/json");
    /* w: 3 tokens refill in 3 s; the window is 10 s */
    ck_assert_str_eq(su_header(&r, "RateLimit-Policy"),
                     "\"user.per-user\";q=3;w=3, \"global.g\";q=100;w=10");
    ck_assert_str_eq(su_header(&r, "RateLimit"),
                     "\"user.per-user\";r=2;t=1, \"global.g\";r=99;t=10");
    ck_assert_ptr_null(su_header(&r, "Retry-After"));
    ck_assert_ptr_null(su_header(&r, "X-RateLimit-Limit"));
    su_resp_free(&r);

    r = acquire(&s, "{\"keys\": {\"user\": \"u1\"}, \"cost\": 2}"); /* last now: 0 */
    ck_assert_int_eq(r.status, 200);
    ck_assert_double_eq(limit_num(&r, 0, "remaining"), 0);
    ck_assert_double_eq(limit_num(&r, 0, "reset_after"), 3);
    su_resp_free(&r);

    /* empty at t = 0.5: half a token back, one more needs 0.5 s; Retry-After rounds up */
    r = acquire(&s, "{\"keys\": {\"user\": \"u1\"}, \"now\": 0.5}");
    ck_assert_int_eq(r.status, 429);
    ck_assert_str_eq(r.body,
                     "{\"allowed\":false,\"retry_after\":0.5,\"blocked_by\":\"user: per-user\","
                     "\"limits\":[{\"level\":\"user\",\"key\":\"u1\",\"rule\":\"per-user\","
                     "\"limit\":3,\"remaining\":0.5,\"reset_after\":2.5},"
                     "{\"level\":\"global\",\"key\":\"*\",\"rule\":\"g\",\"limit\":100,"
                     "\"remaining\":97,\"reset_after\":9.5}]}");
    ck_assert_str_eq(su_header(&r, "Retry-After"), "1");
    /* r rounds down (0.5 -> 0); t is until r grows: the next whole token in 0.5 s, rounded
     * up to 1; the window gives more only when it ends, 9.5 -> 10 */
    ck_assert_str_eq(su_header(&r, "RateLimit"),
                     "\"user.per-user\";r=0;t=1, \"global.g\";r=97;t=10");
    su_resp_free(&r);

    /* at t = 1 one token is back: allowed */
    r = acquire(&s, "{\"keys\": {\"user\": \"u1\"}, \"now\": 1}");
    ck_assert_int_eq(r.status, 200);
    ck_assert_double_eq(limit_num(&r, 0, "remaining"), 0);
    su_resp_free(&r);

    /* a cost above the capacity can never fit: retry_after null, no Retry-After */
    r = acquire(&s, "{\"keys\": {\"user\": \"u2\"}, \"cost\": 4}");
    ck_assert_int_eq(r.status, 429);
    ck_assert(json_is_null(json_object_get(r.json, "retry_after")));
    ck_assert_str_eq(su_str(&r, "blocked_by"), "user: per-user");
    ck_assert_ptr_null(su_header(&r, "Retry-After"));
    ck_assert_double_eq(limit_num(&r, 0, "remaining"), 3);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

/* A key with an escape is parsed by jansson rather than in place; the decision's keys point
 * into the parsed request, which must live until the answer is written. */
START_TEST(escaped_keys_come_back_intact)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, bucket_cfg, manual);
    su_resp r = acquire(&s, "{\"keys\": {\"user\": \"b\\u00f6b \\\"the\\\" builder\"}, \"now\": 0}");
    ck_assert_int_eq(r.status, 200);
    json_t *l0 = json_array_get(json_object_get(r.json, "limits"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(l0, "key")), "b\xc3\xb6" "b \"the\" builder");
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(acquire_dry_run_priority_composed_keys)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s,
             "{\"levels\": ["
             " {\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"b\", "
             "\"capacity\": 10, \"per_second\": 1, \"reserved\": {\"fraction\": 0.5, "
             "\"min_priority\": 1}}]},"
             " {\"name\": \"per_event\", \"compose\": [\"user\", \"event\"], "
             "\"rules\": [{\"type\": \"fixed_window\", \"name\": \"once\", \"limit\": 1, "
             "\"window\": 60}]}]}",
             manual);
    /* a dry run takes nothing: the status still shows the full 10 */
    su_resp r = acquire(&s, "{\"keys\": {\"user\": \"p\"}, \"cost\": 3, \"dry_run\": true, "
                            "\"now\": 0}");
    ck_assert_int_eq(r.status, 200);
    ck_assert_double_eq(limit_num(&r, 0, "remaining"), 10);
    su_resp_free(&r);
    /* priority 0 keeps out of the reserved half: 10 -> 5 in five requests, the sixth denied */
    for (int i = 0; i < 5; i++) {
        r = acquire(&s, "{\"keys\": {\"user\": \"p\"}}");
        ck_assert_int_eq(r.status, 200);
        ck_assert_double_eq(limit_num(&r, 0, "remaining"), 9 - i);
        su_resp_free(&r);
    }
    r = acquire(&s, "{\"keys\": {\"user\": \"p\"}, \"priority\": 0}");
    ck_assert_int_eq(r.status, 429);
    su_resp_free(&r);
    r = acquire(&s, "{\"keys\": {\"user\": \"p\"}, \"priority\": 1, \"cost\": 5}");
    ck_assert_int_eq(r.status, 200);
    ck_assert_double_eq(limit_num(&r, 0, "remaining"), 0);
    su_resp_free(&r);

    /* the composed level keys on "user:event"; without an event it is skipped */
    r = acquire(&s, "{\"keys\": {\"user\": \"q\", \"event\": \"login\"}}");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(json_string_value(limit_at(&r, 1, "key")), "q:login");
    su_resp_free(&r);
    r = acquire(&s, "{\"keys\": {\"user\": \"q\", \"event\": \"login\"}}");
    ck_assert_int_eq(r.status, 429);
    ck_assert_str_eq(su_str(&r, "blocked_by"), "per_event: once");
    su_resp_free(&r);
    r = acquire(&s, "{\"keys\": {\"user\": \"q\", \"event\": \"logout\"}}");
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    r = acquire(&s, "{\"keys\": {\"user\": \"q\"}}");
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(json_array_size(json_object_get(r.json, "limits")), 1);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(manual_clock_uses_last_now)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s,
             "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", "
             "\"capacity\": 1, \"per_second\": 1}]}]}",
             manual);
    su_resp r = acquire(&s, "{\"keys\": {\"user\": \"a\"}, \"now\": 0}");
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    /* another key moves the clock to 10; a request without now then runs at 10, when a has
     * refilled (at time 0 it would be denied) */
    r = acquire(&s, "{\"keys\": {\"user\": \"b\"}, \"now\": 10}");
    su_resp_free(&r);
    r = acquire(&s, "{\"keys\": {\"user\": \"a\"}}");
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    /* a has just been emptied at 10: at 9.5 (before its last update) its state stays as it
     * was, empty, and the wait is counted from 10 */
    r = acquire(&s, "{\"keys\": {\"user\": \"a\"}, \"now\": 9.5}");
    ck_assert_int_eq(r.status, 429);
    su_resp_free(&r);
    r = acquire(&s, "{\"keys\": {\"user\": \"a\"}, \"now\": 11}");
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

/* ---- 400: bad requests name the field and change nothing ---------------------------------- */

static const char *three_levels =
    "{\"levels\": ["
    " {\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 3, "
    "\"per_second\": 0.000001}]},"
    " {\"name\": \"team\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 3, "
    "\"per_second\": 0.000001}]},"
    " {\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"token_bucket\", "
    "\"capacity\": 1000, \"per_second\": 0.000001}]}]}";

static const struct {
    const char *body;
    const char *error; /* the message, or its start when it ends with '*' */
} bad_acquire[] = {
    {"", "body: required, a JSON object"},
    {"{\"keys\": {\"user\": \"v\"}", "body: malformed JSON at line 1*"},
    {"{\"keys\": {\"user\": \"v\"}} x", "body: malformed JSON*"},
    {"{\"keys\": {\"user\": \"v\", \"user\": \"w\"}}", "body: malformed JSON*"},
    {"[1]", "body: must be a JSON object"},
    {"{}", "keys: required, an object of descriptor names to keys"},
    {"{\"cost\": 1}", "keys: required, an object of descriptor names to keys"},
    {"{\"keys\": [\"v\"]}", "keys: must be an object of descriptor names to keys"},
    {"{\"keys\": {\"user\": 1}}", "keys.user: must be a string"},
    {"{\"keys\": {\"user\": \"\"}}", "keys.user: must not be empty"},
    {"{\"keys\": {\"user\": \"v\", \"team\": \"\"}}", "keys.team: must not be empty"},
    {"{\"keys\": {\"user\": \"a\\u0001b\"}}", "keys.user: must not hold control characters"},
    {"{\"keys\": {\"user\": \"v\", \"usr\": \"v\"}}",
     "keys.usr: unknown descriptor (levels use: user, team, global)"},
    {"{\"keys\": {\"user\": \"v\"}, \"cost\": 0}",
     "cost: must be a positive number from 0.000001 to 1000000000000"},
    {"{\"keys\": {\"user\": \"v\"}, \"cost\": -1}",
     "cost: must be a positive number from 0.000001 to 1000000000000"},
    {"{\"keys\": {\"user\": \"v\"}, \"cost\": 1e13}",
     "cost: must be a positive number from 0.000001 to 1000000000000"},
    {"{\"keys\": {\"user\": \"v\"}, \"cost\": \"1\"}",
     "cost: must be a positive number from 0.000001 to 1000000000000"},
    {"{\"keys\": {\"user\": \"v\"}, \"cost\": null}",
     "cost: must be a positive number from 0.000001 to 1000000000000"},
    {"{\"keys\": {\"user\": \"v\"}, \"priority\": 1.5}", "priority: must be a whole number"},
    {"{\"keys\": {\"user\": \"v\"}, \"reserve\": \"yes\"}", "reserve: must be true or false"},
    {"{\"keys\": {\"user\": \"v\"}, \"dry_run\": 1}", "dry_run: must be true or false"},
    {"{\"keys\": {\"user\": \"v\"}, \"now\": 1}",
     "now: only accepted when ratelimitd runs with --manual-clock"},
    {"{\"keys\": {\"user\": \"v\"}, \"bogus\": 1}",
     "bogus: unknown field (known: keys, cost, usage, priority, reserve, dry_run, now)"},
};

static void check_error(const su_resp *r, int status, const char *want)
{
    ck_assert_msg(r->status == status, "status %ld, want %d: %.2000s", r->status, status, r->body);
    ck_assert_str_eq(su_header(r, "Content-Type"), "application/json");
    const char *got = su_error(r);
    size_t n = strlen(want);
    if (n && want[n - 1] == '*')
        ck_assert_msg(strncmp(got, want, n - 1) == 0, "error \"%s\", want \"%s\"", got, want);
    else
        ck_assert_str_eq(got, want);
}

START_TEST(acquire_bad_requests)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, three_levels, NULL);
    /* a key of 257 bytes, and 65 descriptors */
    char longkey[400], many[4096];
    snprintf(longkey, sizeof longkey, "{\"keys\": {\"user\": \"%0257d\"}}", 0);
    size_t n = (size_t)snprintf(many, sizeof many, "{\"keys\": {");
    for (int i = 0; i < 65; i++)
        n += (size_t)snprintf(many + n, sizeof many - n, "%s\"d%d\": \"v\"", i ? ", " : "", i);
    snprintf(many + n, sizeof many - n, "}}");

    for (size_t i = 0; i < sizeof bad_acquire / sizeof bad_acquire[0]; i++) {
        su_resp r = acquire(&s, bad_acquire[i].body);
        check_error(&r, 400, bad_acquire[i].error);
        su_resp_free(&r);
    }
    su_resp r = acquire(&s, longkey);
    check_error(&r, 400, "keys.user: must be at most 256 bytes");
    su_resp_free(&r);
    r = acquire(&s, many);
    check_error(&r, 400, "keys: at most 64 descriptors");
    su_resp_free(&r);

    /* none of them took anything: v, its team and the global bucket are full, so a cost of
     * 3 fits v and team t exactly (a single earlier take would make it a 429) */
    r = acquire(&s, "{\"keys\": {\"user\": \"v\", \"team\": \"t\"}, \"cost\": 3}");
    ck_assert_int_eq(r.status, 200);
    ck_assert_double_eq(limit_num(&r, 0, "remaining"), 0);
    ck_assert_double_eq(limit_num(&r, 1, "remaining"), 0);
    ck_assert_double_eq(limit_num(&r, 2, "remaining"), 997);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

/* ---- 404, 405, 413 ------------------------------------------------------------------------ */

START_TEST(unknown_paths_and_methods)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, three_levels, NULL);
    static const struct {
        const char *method, *path, *allow;
    } wrong[] = {
        {"GET", "/acquire", "POST"},          {"PUT", "/refund", "POST"},
        {"GET", "/release", "POST"},          {"POST", "/rules", "GET"},
        {"POST", "/quota/bob", "GET, PUT, DELETE"}, {"DELETE", "/metrics", "GET"},
        {"POST", "/healthz", "GET"},
    };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        su_resp r = su_req(&s, wrong[i].method, wrong[i].path, NULL, NULL);
        char want[128];
        snprintf(want, sizeof want, "method: %s is not allowed on %s*", wrong[i].method,
                 strcmp(wrong[i].path, "/quota/bob") == 0 ? "/quota/" : wrong[i].path);
        check_error(&r, 405, want);
        ck_assert_str_eq(su_header(&r, "Allow"), wrong[i].allow);
        su_resp_free(&r);
    }
    const char *missing[] = {"/", "/acquire/x", "/quota", "/nope", "/metricsx"};
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        su_resp r = su_req(&s, "GET", missing[i], NULL, NULL);
        char want[128];
        snprintf(want, sizeof want, "path: no such endpoint: %s", missing[i]);
        check_error(&r, 404, want);
        su_resp_free(&r);
    }
    su_resp r = su_req(&s, "GET", "/healthz", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"status\":\"ok\"}");
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

/* A body of exactly len bytes: a valid request padded with spaces. */
static char *padded(size_t len)
{
    const char *head = "{\"keys\": {\"user\": \"big\"}";
    char *b = malloc(len + 1);
    memset(b, ' ', len);
    memcpy(b, head, strlen(head));
    b[len - 1] = '}';
    b[len] = '\0';
    return b;
}

START_TEST(body_size_cap)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, three_levels, NULL);
    char *ok = padded(65536), *big = padded(65537);
    su_resp r = acquire(&s, ok);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    r = acquire(&s, big);
    check_error(&r, 413, "body: larger than 65536 bytes");
    su_resp_free(&r);
    /* without a declared length (chunked), the cap holds while reading */
    const char *chunked[] = {"Transfer-Encoding: chunked", NULL};
    r = su_req(&s, "POST", "/acquire", big, chunked);
    check_error(&r, 413, "body: larger than 65536 bytes");
    su_resp_free(&r);
    r = su_req(&s, "POST", "/acquire", "{\"keys\": {\"user\": \"chunk\"}}", chunked);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    free(ok);
    free(big);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

/* libmicrohttpd's per-connection memory is kept small (it is zeroed between two requests of a
 * connection): request headers of several KiB, as gateways with long tokens send, still fit,
 * and so do the headers of an answer with many rules. */
START_TEST(large_request_headers_fit)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, three_levels, NULL);
    size_t n = 10 * 1024;
    char *h = malloc(n + 16);
    memcpy(h, "X-Padding: ", 11);
    memset(h + 11, 'a', n);
    h[11 + n] = '\0';
    const char *headers[] = {h, "X-Other: 1", NULL};
    CURL *c = curl_easy_init();
    for (int i = 0; i < 3; i++) { /* one keep-alive connection: its pool is reset in between */
        su_resp r =
            su_req_on(c, &s, "POST", "/acquire", "{\"keys\": {\"user\": \"hdr\"}}", headers);
        ck_assert_msg(r.status == 200, "%ld %.200s", r.status, r.body);
        ck_assert_ptr_nonnull(strstr(r.headers, "RateLimit-Policy: "));
        su_resp_free(&r);
    }
    curl_easy_cleanup(c);
    free(h);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

/* ---- reservations ------------------------------------------------------------------------- */

static char *reserve(const su_server *s, const char *body, double remaining)
{
    su_resp r = acquire(s, body);
    ck_assert_msg(r.status == 200, "%.2000s", r.body);
    char *id = strdup(su_str(&r, "reservation"));
    ck_assert_int_eq(strlen(id), 18);
    ck_assert(strncmp(id, "r-", 2) == 0);
    ck_assert_double_eq(limit_num(&r, 0, "remaining"), remaining);
    su_resp_free(&r);
    return id;
}

START_TEST(reserve_refund_charge_release)
{
    su_server s;
    char body[256];
    su_tmpdir(&s);
    su_start(&s,
             "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", "
             "\"name\": \"tokens\", \"capacity\": 1000, \"per_second\": 1}]}]}",
             manual);
    /* a model call reserves 1000 tokens, uses 734: 266 come back */
    char *id = reserve(&s, "{\"keys\": {\"user\": \"m\"}, \"cost\": 1000, \"reserve\": true, "
                           "\"now\": 0}",
                       0);
    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"actual_cost\": 734}", id);
    su_resp r = su_req(&s, "POST", "/refund", body, NULL);
    ck_assert_int_eq(r.status, 200);
    char want[256];
    snprintf(want, sizeof want,
             "{\"reservation\":\"%s\",\"reserved_cost\":1000,\"actual_cost\":734,"
             "\"refunded\":266,\"charged\":0}",
             id);
    ck_assert_str_eq(r.body, want);
    su_resp_free(&r);
    r = acquire(&s, "{\"keys\": {\"user\": \"m\"}, \"cost\": 266, \"dry_run\": true}");
    ck_assert_int_eq(r.status, 200);
    ck_assert_double_eq(limit_num(&r, 0, "remaining"), 266);
    su_resp_free(&r);
    /* settled once only */
    r = su_req(&s, "POST", "/refund", body, NULL);
    check_error(&r, 409, "reservation: already settled");
    su_resp_free(&r);

    /* reserve 100 of the 266 (166 left), use 500: 400 charged, the balance goes to -234 */
    char *id2 = reserve(&s, "{\"keys\": {\"user\": \"m\"}, \"cost\": 100, \"reserve\": true}",
                        166);
    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"actual_cost\": 500}", id2);
    r = su_req(&s, "POST", "/refund", body, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_double_eq(su_num(&r, "refunded"), 0);
    ck_assert_double_eq(su_num(&r, "charged"), 400);
    su_resp_free(&r);
    /* one more token needs 235 tokens of refill at 1/s */
    r = acquire(&s, "{\"keys\": {\"user\": \"m\"}, \"dry_run\": true}");
    ck_assert_int_eq(r.status, 429);
    ck_assert_double_eq(su_num(&r, "retry_after"), 235);
    ck_assert_str_eq(su_header(&r, "Retry-After"), "235");
    ck_assert_double_eq(limit_num(&r, 0, "remaining"), -234);
    /* r grows again when the balance reaches 1: 235 s; back to full takes 1234 s */
    ck_assert_str_eq(su_header(&r, "RateLimit"), "\"user.tokens\";r=0;t=235");
    ck_assert_double_eq(limit_num(&r, 0, "reset_after"), 1234);
    su_resp_free(&r);

    /* release ends a reservation (settled or not); a second release finds nothing */
    snprintf(body, sizeof body, "{\"reservation\": \"%s\"}", id);
    r = su_req(&s, "POST", "/release", body, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"released\":true}");
    su_resp_free(&r);
    r = su_req(&s, "POST", "/release", body, NULL);
    check_error(&r, 404, "reservation: unknown, expired or released");
    su_resp_free(&r);
    r = su_req(&s, "POST", "/refund",
               "{\"reservation\": \"r-ffffffffffffffff\", \"actual_cost\": 1}", NULL);
    check_error(&r, 404, "reservation: unknown or expired");
    su_resp_free(&r);
    r = su_req(&s, "POST", "/refund", "{\"reservation\": \"nonsense\", \"actual_cost\": 1}",
               NULL);
    check_error(&r, 404, "reservation: unknown or expired");
    su_resp_free(&r);

    /* the metrics add the settlements up */
    r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_ptr_nonnull(strstr(r.body, "\nratelimit_refunded_cost_total 266\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nratelimit_charged_cost_total 400\n"));
    /* 1000 + 100 taken; dry runs take nothing */
    ck_assert_ptr_nonnull(strstr(r.body, "\nratelimit_cost_total 1100\n"));
    su_resp_free(&r);
    free(id);
    free(id2);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(settle_bad_requests)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, three_levels, NULL);
    static const struct {
        const char *path, *body, *error;
    } bad[] = {
        {"/refund", "", "body: required, a JSON object"},
        {"/refund", "{", "body: malformed JSON*"},
        {"/refund", "\"r-1\"", "body: must be a JSON object"},
        {"/refund", "{\"actual_cost\": 1}", "reservation: required"},
        {"/refund", "{\"reservation\": 7, \"actual_cost\": 1}", "reservation: must be a string"},
        {"/refund", "{\"reservation\": \"r-1\"}", "actual_cost: required (or actual_usage)"},
        {"/refund", "{\"reservation\": \"r-1\", \"actual_cost\": -1}",
         "actual_cost: must be a number from 0 to 1000000000000"},
        {"/refund", "{\"reservation\": \"r-1\", \"actual_cost\": \"5\"}",
         "actual_cost: must be a number from 0 to 1000000000000"},
        {"/refund", "{\"reservation\": \"r-1\", \"actual_cost\": 1, \"now\": 3}",
         "now: only accepted when ratelimitd runs with --manual-clock"},
        {"/refund", "{\"reservation\": \"r-1\", \"actual_cost\": 1, \"cost\": 3}",
         "cost: unknown field (known: reservation, actual_cost, actual_usage, now, latency_ms, "
         "outcome)"},
        {"/release", "{}", "reservation: required"},
        {"/release", "{\"reservation\": \"r-1\", \"actual_cost\": 1}",
         "actual_cost: unknown field (known: reservation, now, latency_ms, outcome)"},
        {"/release", "{\"reservation\": [\"r-1\"]}", "reservation: must be a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        su_resp r = su_req(&s, "POST", bad[i].path, bad[i].body, NULL);
        check_error(&r, 400, bad[i].error);
        su_resp_free(&r);
    }
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(concurrency_release_and_expiry)
{
    su_server s;
    char body[128];
    su_tmpdir(&s);
    su_start(&s,
             "{\"reservation_ttl\": 10, \"levels\": [{\"name\": \"client\", \"rules\": "
             "[{\"type\": \"concurrency\", \"name\": \"inflight\", \"limit\": 2}]}]}",
             manual);
    /* a slot taken makes a reservation by itself */
    char *a = reserve(&s, "{\"keys\": {\"client\": \"c\"}, \"now\": 0}", 1);
    su_resp r = acquire(&s, "{\"keys\": {\"client\": \"c\"}, \"now\": 1}");
    ck_assert_int_eq(r.status, 200);
    char *b = strdup(su_str(&r, "reservation"));
    /* no window: w is left out; the unit is concurrent requests */
    ck_assert_str_eq(su_header(&r, "RateLimit-Policy"),
                     "\"client.inflight\";q=2;qu=\"concurrent-requests\"");
    /* slots come back on release, not with time: t is the rule's retry hint */
    ck_assert_str_eq(su_header(&r, "RateLimit"), "\"client.inflight\";r=0;t=1");
    su_resp_free(&r);
    /* full: denied with the rule's retry hint (1 s), and no reservation */
    r = acquire(&s, "{\"keys\": {\"client\": \"c\"}, \"now\": 2}");
    ck_assert_int_eq(r.status, 429);
    ck_assert_double_eq(su_num(&r, "retry_after"), 1);
    ck_assert_str_eq(su_str(&r, "blocked_by"), "client: inflight");
    ck_assert_ptr_null(json_object_get(r.json, "reservation"));
    su_resp_free(&r);
    /* releasing a frees its slot, once */
    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"now\": 3}", a);
    r = su_req(&s, "POST", "/release", body, NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    r = su_req(&s, "POST", "/release", body, NULL);
    ck_assert_int_eq(r.status, 404);
    su_resp_free(&r);
    char *c = reserve(&s, "{\"keys\": {\"client\": \"c\"}, \"now\": 3}", 0);
    /* b, taken at 1, expires at 11 and gives its slot back by itself */
    r = acquire(&s, "{\"keys\": {\"client\": \"c\"}, \"now\": 10.999}");
    ck_assert_int_eq(r.status, 429);
    su_resp_free(&r);
    char *d = reserve(&s, "{\"keys\": {\"client\": \"c\"}, \"now\": 11}", 0);
    snprintf(body, sizeof body, "{\"reservation\": \"%s\"}", b);
    r = su_req(&s, "POST", "/release", body, NULL);
    check_error(&r, 404, "reservation: unknown, expired or released");
    su_resp_free(&r);
    /* c, taken at 3, is gone at 13 */
    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"actual_cost\": 1, \"now\": 13}", c);
    r = su_req(&s, "POST", "/refund", body, NULL);
    check_error(&r, 404, "reservation: unknown or expired");
    su_resp_free(&r);
    /* expired: b and c; active: d */
    r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_ptr_nonnull(strstr(r.body, "\nratelimit_reservations_expired_total 2\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nratelimit_reservations_active 1\n"));
    su_resp_free(&r);
    free(a);
    free(b);
    free(c);
    free(d);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

/* ---- quotas, the admin token, restarts ----------------------------------------------------- */

static const char *tier_cfg =
    "{\"admin_token\": \"s3cret\", \"quota_file\": \"var/q.json\","
    " \"levels\": [{\"name\": \"user\", \"tiered\": true}],"
    " \"tiers\": {\"free\": [{\"type\": \"token_bucket\", \"name\": \"free\", \"capacity\": 2, "
    "\"per_second\": 0.000001}],"
    "            \"gold\": [{\"type\": \"token_bucket\", \"name\": \"gold\", \"capacity\": 5, "
    "\"per_second\": 0.000001}]},"
    " \"default_tier\": \"free\", \"quotas\": {\"alice\": \"gold\"}}";

static const char *const auth[] = {"Authorization: Bearer s3cret", NULL};

static void expect_tier(const su_server *s, const char *user, const char *tier, const char *rule)
{
    char path[128];
    snprintf(path, sizeof path, "/quota/%s", user);
    su_resp r = su_req(s, "GET", path, NULL, auth);
    ck_assert_msg(r.status == 200, "%.2000s", r.body);
    ck_assert_str_eq(su_str(&r, "user"), user);
    if (tier)
        ck_assert_str_eq(su_str(&r, "tier"), tier);
    else
        ck_assert(json_is_null(json_object_get(r.json, "tier")));
    json_t *r0 = json_array_get(json_object_get(r.json, "rules"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(r0, "name")), rule);
    su_resp_free(&r);
}

START_TEST(quotas_need_the_token)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, tier_cfg, NULL);
    const char *const wrong[] = {"Authorization: Bearer s3cre", NULL};
    const char *const basic[] = {"Authorization: Basic czNjcmV0", NULL};
    const char *const *bad[] = {NULL, wrong, basic};
    for (size_t i = 0; i < 3; i++) {
        su_resp r = su_req(&s, "GET", "/quota/bob", NULL, bad[i]);
        check_error(&r, 401, "authorization: this endpoint needs \"Authorization: Bearer "
                             "<token>\" with a valid token");
        ck_assert_str_eq(su_header(&r, "WWW-Authenticate"), "Bearer realm=\"ratelimitd\"");
        su_resp_free(&r);
        r = su_req(&s, "PUT", "/quota/bob", "{\"tier\": \"gold\"}", bad[i]);
        ck_assert_int_eq(r.status, 401);
        su_resp_free(&r);
        r = su_req(&s, "DELETE", "/quota/alice", NULL, bad[i]);
        ck_assert_int_eq(r.status, 401);
        su_resp_free(&r);
    }
    /* nothing changed */
    expect_tier(&s, "bob", "free", "free");
    expect_tier(&s, "alice", "gold", "gold");
    /* the other endpoints need no token */
    su_resp r = acquire(&s, "{\"keys\": {\"user\": \"bob\"}}");
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(quotas_survive_a_restart)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, tier_cfg, NULL);
    expect_tier(&s, "bob", "free", "free");
    expect_tier(&s, "alice", "gold", "gold");

    su_resp r = su_req(&s, "PUT", "/quota/bob", "{\"tier\": \"gold\"}", auth);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(su_str(&r, "tier"), "gold");
    su_resp_free(&r);
    r = su_req(&s, "PUT", "/quota/carol",
               "{\"rules\": [{\"type\": \"fixed_window\", \"name\": \"carol-fw\", \"limit\": 7, "
               "\"window\": 60}]}",
               auth);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "{\"user\":\"carol\",\"tier\":null,\"rules\":[{\"type\":"
                             "\"fixed_window\",\"name\":\"carol-fw\",\"limit\":7,\"window\":60,"
                             "\"unit\":\"cost\"}]}");
    su_resp_free(&r);
    r = su_req(&s, "DELETE", "/quota/alice", NULL, auth);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(su_str(&r, "tier"), "free");
    su_resp_free(&r);

    /* bad changes: 400 naming the field, nothing changed */
    static const struct {
        const char *body, *error;
    } bad[] = {
        {"{\"tier\": \"platinum\"}", "tier: unknown tier \"platinum\""},
        {"{\"tier\": 3}", "tier: must be a string"},
        {"{}", "body: give either \"tier\" or \"rules\""},
        {"{\"tier\": \"gold\", \"rules\": []}", "body: give either \"tier\" or \"rules\""},
        {"{\"tier\": \"gold\", \"level\": 1}", "level: unknown field (known: tier, rules)"},
        {"{\"rules\": [{\"type\": \"token_bucket\", \"capacity\": -1, \"per_second\": 1}]}",
         "rules[0].capacity: *"},
        {"{\"rules\": [{\"type\": \"no_such_rule\"}]}", "rules[0].type: *"},
        {"{\"rules\": []}", "rules: must be a list of 1 to 16 rules"},
        {"not json", "body: malformed JSON*"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = su_req(&s, "PUT", "/quota/bob", bad[i].body, auth);
        check_error(&r, 400, bad[i].error);
        su_resp_free(&r);
    }
    char longuser[300] = "/quota/";
    memset(longuser + 7, 'x', 257);
    longuser[7 + 257] = '\0';
    r = su_req(&s, "GET", longuser, NULL, auth);
    check_error(&r, 400, "user: must be at most 256 bytes");
    su_resp_free(&r);
    r = su_req(&s, "GET", "/quota/", NULL, auth);
    check_error(&r, 400, "user: must not be empty");
    su_resp_free(&r);
    expect_tier(&s, "bob", "gold", "gold");

    /* the decisions follow: bob's bucket holds 5 now */
    r = acquire(&s, "{\"keys\": {\"user\": \"bob\"}, \"cost\": 5}");
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(json_string_value(limit_at(&r, 0, "rule")), "gold");
    su_resp_free(&r);

    /* the file holds the overrides: alice's null undoes the configuration's gold */
    char path[400];
    snprintf(path, sizeof path, "%s/var/q.json", s.dir);
    json_t *file = json_load_file(path, 0, NULL);
    ck_assert_ptr_nonnull(file);
    ck_assert_int_eq(json_object_size(file), 3);
    ck_assert(json_is_null(json_object_get(file, "alice")));
    ck_assert_str_eq(json_string_value(json_object_get(file, "bob")), "gold");
    ck_assert(json_is_array(json_object_get(json_object_get(file, "carol"), "rules")));
    json_decref(file);
    /* written atomically: no temporary file left behind */
    snprintf(path, sizeof path, "%s/var", s.dir);
    DIR *dir = opendir(path);
    ck_assert_ptr_nonnull(dir);
    int files = 0;
    for (struct dirent *e; (e = readdir(dir));)
        files += e->d_name[0] != '.';
    closedir(dir);
    ck_assert_int_eq(files, 1);

    ck_assert_int_eq(su_stop(&s), 0);
    su_start(&s, tier_cfg, NULL);
    expect_tier(&s, "bob", "gold", "gold");
    expect_tier(&s, "alice", "free", "free");
    expect_tier(&s, "carol", NULL, "carol-fw");
    expect_tier(&s, "dave", "free", "free");
    /* bob's used tokens are not kept across a restart (in-memory store), his tier is */
    r = acquire(&s, "{\"keys\": {\"user\": \"bob\"}, \"cost\": 5}");
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    /* DELETE of a user the configuration never named leaves no entry */
    r = su_req(&s, "DELETE", "/quota/bob", NULL, auth);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
    snprintf(path, sizeof path, "%s/var/q.json", s.dir);
    file = json_load_file(path, 0, NULL);
    ck_assert_int_eq(json_object_size(file), 2);
    ck_assert_ptr_null(json_object_get(file, "bob"));
    json_decref(file);
}
END_TEST

/* Per-key state and reservations survive a restart through the state file: a drained bucket
 * stays drained (and keeps refilling by the clock), a reservation made before the restart
 * can be refunded and released after it, and its slot is still held until then. */
START_TEST(state_survives_a_restart)
{
    su_server s;
    char body[256];
    const char *cfg =
        "{\"state_file\": \"var/state.bin\", \"levels\": ["
        " {\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"b\", "
        "\"capacity\": 10, \"per_second\": 1}, {\"type\": \"concurrency\", \"name\": \"c\", "
        "\"limit\": 1}]}]}";
    su_tmpdir(&s);
    su_start(&s, cfg, manual);
    char *id = reserve(&s, "{\"keys\": {\"user\": \"u\"}, \"cost\": 8, \"reserve\": true, "
                           "\"now\": 100}",
                       2);
    ck_assert_int_eq(su_stop(&s), 0);
    char *log = su_read(s.log);
    ck_assert_ptr_nonnull(strstr(log, "state saved to var/state.bin"));
    free(log);

    su_start(&s, cfg, manual);
    /* the bucket and the slot of u, and the reservation */
    log = su_read(s.log);
    ck_assert_ptr_nonnull(strstr(log, "state: loaded 3 key states and reservations"));
    free(log);
    /* 2 left at t = 100, 1 s later 3: 4 do not fit, and the slot is still held */
    su_resp r = acquire(&s, "{\"keys\": {\"user\": \"u\"}, \"cost\": 4, \"dry_run\": true, "
                            "\"now\": 101}");
    ck_assert_int_eq(r.status, 429);
    ck_assert_double_eq(limit_num(&r, 0, "remaining"), 3);
    ck_assert_double_eq(limit_num(&r, 1, "remaining"), 0);
    su_resp_free(&r);
    /* the reservation of the first run: 8 reserved, 5 used, 3 back */
    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"actual_cost\": 5}", id);
    r = su_req(&s, "POST", "/refund", body, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_double_eq(su_num(&r, "refunded"), 3);
    su_resp_free(&r);
    snprintf(body, sizeof body, "{\"reservation\": \"%s\"}", id);
    r = su_req(&s, "POST", "/release", body, NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    r = acquire(&s, "{\"keys\": {\"user\": \"u\"}, \"cost\": 6}");
    ck_assert_int_eq(r.status, 200);
    ck_assert_double_eq(limit_num(&r, 0, "remaining"), 0);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);

    /* a damaged file is moved aside and the service starts without it */
    FILE *f = fopen(strcat(strcpy(body, s.dir), "/var/state.bin"), "wb");
    fputs("garbage", f);
    fclose(f);
    su_start(&s, cfg, manual);
    log = su_read(s.log);
    ck_assert_ptr_nonnull(strstr(log, "not a ratelimitd snapshot; moved to var/state.bin.corrupt"));
    free(log);
    r = acquire(&s, "{\"keys\": {\"user\": \"u\"}, \"cost\": 10, \"now\": 0}");
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
    free(id);
}
END_TEST

START_TEST(bad_quota_file_refuses_to_start)
{
    su_server s;
    char *out, path[400], cmd[1200];
    su_tmpdir(&s);
    snprintf(path, sizeof path, "%s/var", s.dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    su_write(s.dir, "var/q.json", "{\"bob\": \"platinum\"}");
    su_write(s.dir, "config.json", tier_cfg);
    /* run from its directory, so that var/q.json resolves there */
    snprintf(cmd, sizeof cmd, "cd %s && exec %s --config config.json --port 0", s.dir,
             su_binary());
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    ck_assert_int_eq(su_run(argv, &out), 1);
    ck_assert_msg(strstr(out, "error: quota_file var/q.json: bob: unknown tier \"platinum\""),
                  "%s", out);
    free(out);
}
END_TEST

/* ---- GET /rules, the built-in configuration ---------------------------------------------- */

START_TEST(rules_show_the_configuration)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s,
             "{\"reservation_ttl\": 30, \"levels\": ["
             " {\"name\": \"ue\", \"compose\": [\"user\", \"event\"], \"rules\": [{\"type\": "
             "\"sliding_window\", \"limit\": 5, \"window\": 60}]},"
             " {\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"gcra\", "
             "\"name\": \"smooth\", \"per_second\": 2.5, \"burst\": 4, \"unit\": \"requests\"}]},"
             " {\"name\": \"team\", \"shadow\": true, \"rules\": [{\"type\": \"fixed_window\", "
             "\"limit\": 3, \"window\": 1, \"charge\": true}, {\"type\": \"fixed_window\", "
             "\"limit\": 2, \"window\": 1, \"shadow\": false}]}]}",
             NULL);
    su_resp r = su_req(&s, "GET", "/rules", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(
        r.body,
        "{\"levels\":[{\"name\":\"ue\",\"compose\":[\"user\",\"event\"],\"tiered\":false,"
        "\"rules\":[{\"type\":\"sliding_window\",\"name\":\"sliding_window(5, 60s)\",\"limit\":5,"
        "\"window\":60,\"unit\":\"cost\"}]},{\"name\":\"global\",\"default_key\":\"*\","
        "\"tiered\":false,\"rules\":[{\"type\":\"gcra\",\"name\":\"smooth\",\"per_second\":2.5,"
        "\"burst\":4,\"unit\":\"requests\"}]},{\"name\":\"team\",\"tiered\":false,"
        "\"shadow\":true,\"rules\":[{\"type\":\"fixed_window\",\"name\":\"fixed_window(3, 1s)\","
        "\"limit\":3,\"window\":1,\"unit\":\"cost\",\"charge\":true},{\"type\":\"fixed_window\","
        "\"name\":\"fixed_window(2, 1s)\",\"limit\":2,\"window\":1,\"unit\":\"cost\"}]}],"
        "\"tiers\":{},\"default_tier\":null,"
        "\"reservation_ttl\":30,\"store\":\"memory\"}");
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(builtin_config_is_default_json)
{
    su_server a, b;
    su_tmpdir(&a);
    su_tmpdir(&b);
    su_start(&a, NULL, NULL);
    char *text = su_read("config/default.json");
    ck_assert_ptr_nonnull(text);
    su_start(&b, text, NULL);
    su_resp ra = su_req(&a, "GET", "/rules", NULL, NULL);
    su_resp rb = su_req(&b, "GET", "/rules", NULL, NULL);
    ck_assert_str_eq(ra.body, rb.body);
    /* the three levels and tiers of the issue: free 10/s, standard 100/s, enterprise 10000/s */
    json_t *levels = json_object_get(ra.json, "levels");
    ck_assert_int_eq(json_array_size(levels), 3);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(levels, 0), "name")),
                     "user");
    ck_assert(json_is_true(json_object_get(json_array_get(levels, 0), "tiered")));
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(levels, 2), "default_key")),
                     "*");
    json_t *tiers = json_object_get(ra.json, "tiers");
    const char *names[] = {"free", "standard", "enterprise"};
    const double rates[] = {10, 100, 10000};
    for (int i = 0; i < 3; i++) {
        json_t *r0 = json_array_get(json_object_get(tiers, names[i]), 0);
        ck_assert_double_eq(json_number_value(json_object_get(r0, "per_second")), rates[i]);
    }
    ck_assert_str_eq(su_str(&ra, "default_tier"), "free");
    su_resp_free(&ra);
    su_resp_free(&rb);
    /* its quota file is var/quotas.json under the working directory, directory created */
    char path[400];
    snprintf(path, sizeof path, "%s/var", a.dir);
    ck_assert_int_eq(access(path, F_OK), 0);
    free(text);
    ck_assert_int_eq(su_stop(&a), 0);
    ck_assert_int_eq(su_stop(&b), 0);
}
END_TEST

/* ---- flags -------------------------------------------------------------------------------- */

START_TEST(check_config_flag)
{
    su_server s;
    char *out;
    su_tmpdir(&s);
    char good[400], bad[400], badjson[400];
    snprintf(good, sizeof good, "%s", su_write(s.dir, "good.json", three_levels));
    snprintf(bad, sizeof bad, "%s",
             su_write(s.dir, "bad.json",
                      "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
                      "\"token_bucket\", \"capacity\": -5, \"per_second\": 1}]}]}"));
    snprintf(badjson, sizeof badjson, "%s", su_write(s.dir, "badjson.json", "{\"levels\": ["));
    const char *a1[] = {su_binary(), "--check-config", good, NULL};
    ck_assert_int_eq(su_run(a1, &out), 0);
    ck_assert_str_eq(out, "ok\n");
    free(out);
    const char *a2[] = {su_binary(), "--check-config", bad, NULL};
    ck_assert_int_eq(su_run(a2, &out), 1);
    char want[600];
    snprintf(want, sizeof want, "%s: levels[0].rules[0].capacity: ", bad);
    ck_assert_msg(strncmp(out, want, strlen(want)) == 0, "%s", out);
    free(out);
    const char *a3[] = {su_binary(), "--check-config", badjson, NULL};
    ck_assert_int_eq(su_run(a3, &out), 1);
    snprintf(want, sizeof want, "%s: line 1, column ", badjson);
    ck_assert_msg(strncmp(out, want, strlen(want)) == 0, "%s", out);
    free(out);
    const char *a4[] = {su_binary(), "--check-config", "/nonexistent/x.json", NULL};
    ck_assert_int_eq(su_run(a4, &out), 1);
    ck_assert_str_eq(out, "/nonexistent/x.json: /nonexistent/x.json: No such file or directory\n");
    free(out);
    const char *a5[] = {su_binary(), "--version", NULL};
    ck_assert_int_eq(su_run(a5, &out), 0);
    ck_assert_str_eq(out, "ratelimitd 1.0.0\n");
    free(out);
    const char *a6[] = {su_binary(), "--help", NULL};
    ck_assert_int_eq(su_run(a6, &out), 0);
    ck_assert_ptr_nonnull(strstr(out, "--check-config PATH"));
    ck_assert_ptr_nonnull(strstr(out, "--manual-clock"));
    free(out);
    const char *a7[] = {su_binary(), "--bogus", NULL};
    ck_assert_int_eq(su_run(a7, &out), 2);
    free(out);
    const char *a8[] = {su_binary(), "--port", "70000", NULL};
    ck_assert_int_eq(su_run(a8, &out), 2);
    free(out);
}
END_TEST

START_TEST(example_configs_pass_check)
{
    char *out;
    const char *dirs[] = {"config", "config/examples"};
    int checked = 0;
    for (int d = 0; d < 2; d++) {
        DIR *dir = opendir(dirs[d]);
        ck_assert_ptr_nonnull(dir);
        for (struct dirent *e; (e = readdir(dir));) {
            size_t n = strlen(e->d_name);
            if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0)
                continue;
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
            const char *argv[] = {su_binary(), "--check-config", path, NULL};
            int rc = su_run(argv, &out);
            ck_assert_msg(rc == 0 && strcmp(out, "ok\n") == 0, "%s: %s", path, out);
            free(out);
            checked++;
        }
        closedir(dir);
    }
    /* default.json and at least four worked examples */
    ck_assert_int_ge(checked, 5);
}
END_TEST

START_TEST(port_in_use_fails)
{
    su_server a;
    char *out, port[16];
    su_tmpdir(&a);
    su_start(&a, three_levels, NULL);
    snprintf(port, sizeof port, "%d", a.port);
    const char *cfg = su_write(a.dir, "same.json", three_levels);
    const char *argv[] = {su_binary(), "--config", cfg, "--port", port, NULL};
    ck_assert_int_eq(su_run(argv, &out), 1);
    ck_assert_ptr_nonnull(strstr(out, "error: cannot listen on 127.0.0.1 port"));
    free(out);
    ck_assert_int_eq(su_stop(&a), 0);
}
END_TEST

/* ---- stopping ----------------------------------------------------------------------------- */

static int connect_to(int port)
{
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads until the peer closes or want appears. */
static void read_until(int fd, char *buf, size_t cap, const char *want)
{
    size_t len = 0;
    buf[0] = '\0';
    while (len < cap - 1 && !(want && strstr(buf, want))) {
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
        buf[len] = '\0';
    }
}

START_TEST(sigterm_finishes_requests_in_flight)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, three_levels, NULL);
    const char *body = "{\"keys\": {\"user\": \"late\"}}";
    char head[256], buf[4096];
    snprintf(head, sizeof head,
             "POST /acquire HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nExpect: 100-continue\r\n\r\n",
             strlen(body));
    int fd = connect_to(s.port);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, head, strlen(head)), (ssize_t)strlen(head));
    /* "100 Continue" means the server has begun this request */
    read_until(fd, buf, sizeof buf, "\r\n\r\n");
    ck_assert_msg(strncmp(buf, "HTTP/1.1 100", 12) == 0, "%s", buf);

    kill(s.pid, SIGTERM);
    /* the server stops accepting: wait until a new connection is refused */
    for (;;) {
        int probe = connect_to(s.port);
        if (probe < 0)
            break;
        close(probe);
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    /* the request in flight still gets its answer */
    ck_assert_int_eq(write(fd, body, strlen(body)), (ssize_t)strlen(body));
    read_until(fd, buf, sizeof buf, "]}");
    close(fd);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 200", 12) == 0, "%s", buf);
    ck_assert_ptr_nonnull(strstr(buf, "Connection: close"));
    ck_assert_ptr_nonnull(strstr(buf, "\"allowed\":true"));

    int st;
    ck_assert_int_eq(waitpid(s.pid, &st, 0), s.pid);
    s.pid = 0;
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    char *log = su_read(s.log);
    ck_assert_ptr_nonnull(strstr(log, "started: listening on 127.0.0.1:"));
    ck_assert_ptr_nonnull(strstr(log, "stopping on SIGTERM"));
    ck_assert_ptr_nonnull(strstr(log, "]: stopped\n"));
    ck_assert_ptr_null(strstr(log, "error"));
    free(log);
}
END_TEST

START_TEST(sigint_exits_zero)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, three_levels, NULL);
    kill(s.pid, SIGINT);
    int st;
    ck_assert_int_eq(waitpid(s.pid, &st, 0), s.pid);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    char *log = su_read(s.log);
    ck_assert_ptr_nonnull(strstr(log, "stopping on SIGINT"));
    free(log);
}
END_TEST

/* ---- many keep-alive clients on one key --------------------------------------------------- */

#define CLIENTS 16
#define PER_CLIENT 50

typedef struct client {
    const su_server *s;
    int allowed, denied, other;
    long connects;
} client;

static void *client_run(void *arg)
{
    client *c = arg;
    CURL *h = curl_easy_init();
    for (int i = 0; i < PER_CLIENT; i++) {
        su_resp r = su_req_on(h, c->s, "POST", "/acquire", "{\"keys\": {\"user\": \"shared\"}}",
                              NULL);
        if (r.status == 200)
            c->allowed++;
        else if (r.status == 429)
            c->denied++;
        else
            c->other++;
        long n = 0;
        curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &n);
        c->connects += n;
        su_resp_free(&r);
    }
    curl_easy_cleanup(h);
    return NULL;
}

/* The sockets each worker's epoll watches, from /proc (one epoll per worker); returns how many
 * workers were found. */
static int watched_per_worker(pid_t pid, int *count, int max)
{
    char path[64], link[64], line[256];
    int n = 0;
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *dir = opendir(path);
    ck_assert_ptr_nonnull(dir);
    for (struct dirent *e; (e = readdir(dir)) != NULL && n < max;) {
        char fd[600];
        snprintf(fd, sizeof fd, "%s/%s", path, e->d_name);
        ssize_t l = readlink(fd, link, sizeof link - 1);
        if (l < 0)
            continue;
        link[l] = '\0';
        if (strcmp(link, "anon_inode:[eventpoll]") != 0)
            continue;
        snprintf(fd, sizeof fd, "/proc/%d/fdinfo/%s", (int)pid, e->d_name);
        FILE *f = fopen(fd, "r");
        ck_assert_ptr_nonnull(f);
        count[n] = 0;
        while (fgets(line, sizeof line, f))
            count[n] += strncmp(line, "tfd:", 4) == 0;
        fclose(f);
        n++;
    }
    closedir(dir);
    return n;
}

/* New connections go round-robin to the workers: a client that opens its whole pool at once
 * (as load balancers and wrk do) gets it spread evenly, not piled on one worker. */
START_TEST(connections_are_spread_over_the_workers)
{
    enum { CONNS = 12 };
    su_server s;
    su_tmpdir(&s);
    su_start(&s, "{\"threads\": 3, \"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
                 "\"token_bucket\", \"capacity\": 100, \"per_second\": 1}]}]}",
             NULL);
    CURL *h[CONNS];
    for (int i = 0; i < CONNS; i++) {
        h[i] = curl_easy_init();
        su_resp r = su_req_on(h[i], &s, "GET", "/healthz", NULL, NULL);
        ck_assert_int_eq(r.status, 200);
        su_resp_free(&r);
    }
    /* each worker watches its share of the connections (and its own wake-up descriptor). A
     * connection the client closed, such as the start's readiness probe, stays watched until
     * its worker reads the end of it, which a sanitized build may do a moment later: wait for
     * that, up to 5 s */
    int count[8], even = 0;
    for (int tries = 0; tries < 250 && !even; tries++) {
        if (tries)
            usleep(20000);
        ck_assert_int_eq(watched_per_worker(s.pid, count, 8), 3);
        even = count[1] == count[0] && count[2] == count[0];
    }
    for (int i = 0; i < 3; i++)
        ck_assert_msg(count[i] == count[0], "worker %d watches %d, worker 0 %d", i, count[i],
                      count[0]);
    ck_assert_int_ge(count[0], CONNS / 3);
    for (int i = 0; i < CONNS; i++)
        curl_easy_cleanup(h[i]);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

START_TEST(concurrent_clients_get_exactly_the_limit)
{
    su_server s;
    su_tmpdir(&s);
    /* 100 tokens and a refill of one token per 10^6 s: exactly 100 of 800 get in */
    su_start(&s,
             "{\"threads\": 4, \"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
             "\"token_bucket\", \"capacity\": 100, \"per_second\": 0.000001}]}]}",
             NULL);
    client c[CLIENTS];
    pthread_t t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        c[i] = (client){&s, 0, 0, 0, 0};
        ck_assert_int_eq(pthread_create(&t[i], NULL, client_run, &c[i]), 0);
    }
    int allowed = 0, denied = 0, other = 0;
    long connects = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(t[i], NULL);
        allowed += c[i].allowed;
        denied += c[i].denied;
        other += c[i].other;
        connects += c[i].connects;
    }
    ck_assert_int_eq(allowed, 100);
    ck_assert_int_eq(denied, CLIENTS * PER_CLIENT - 100);
    ck_assert_int_eq(other, 0);
    /* keep-alive: one connection per client for all its requests */
    ck_assert_int_eq(connects, CLIENTS);

    su_resp r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_ptr_nonnull(strstr(r.body, "\nratelimit_acquire_total{decision=\"allowed\"} 100\n"));
    ck_assert_ptr_nonnull(strstr(r.body, "\nratelimit_acquire_total{decision=\"denied\"} 700\n"));
    ck_assert_ptr_nonnull(strstr(
        r.body, "\nratelimit_http_requests_total{endpoint=\"/acquire\",code=\"200\"} 100\n"));
    ck_assert_ptr_nonnull(strstr(
        r.body, "\nratelimit_http_requests_total{endpoint=\"/acquire\",code=\"429\"} 700\n"));
    ck_assert_ptr_nonnull(strstr(
        r.body, "\nratelimit_http_request_duration_seconds_count{endpoint=\"/acquire\"} 800\n"));
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

/* ---- metrics ------------------------------------------------------------------------------ */

static const char *const families[] = {
    "ratelimit_acquire_total",       "ratelimit_denied_total",
    "ratelimit_cost_total",          "ratelimit_refunded_cost_total",
    "ratelimit_charged_cost_total",  "ratelimit_reservations_active",
    "ratelimit_reservations_expired_total", "ratelimit_keys",
    "ratelimit_http_requests_total", "ratelimit_http_request_duration_seconds",
    "ratelimit_config_reloads_total", "ratelimit_keys_refused_total",
    "ratelimit_snapshot_corrupt_total", "ratelimit_key_states",
    "ratelimit_key_states_max",
};

START_TEST(metrics_exposition)
{
    su_server s;
    su_tmpdir(&s);
    su_start(&s, three_levels, NULL);
    /* user-secret-1: 3 allowed of cost 1, then a denial by the user level */
    for (int i = 0; i < 4; i++) {
        su_resp r = acquire(&s, "{\"keys\": {\"user\": \"user-secret-1\", \"team\": \"t\"}, "
                                "\"cost\": 1}");
        ck_assert_int_eq(r.status, i < 3 ? 200 : 429);
        su_resp_free(&r);
    }
    su_resp bad = acquire(&s, "{}");
    su_resp_free(&bad);
    su_resp nf = su_req(&s, "GET", "/nowhere", NULL, NULL);
    su_resp_free(&nf);

    su_resp r = su_req(&s, "GET", "/metrics", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(su_header(&r, "Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        char want[200];
        snprintf(want, sizeof want, "# HELP %s ", families[i]);
        ck_assert_msg(strstr(r.body, want), "no HELP for %s", families[i]);
        snprintf(want, sizeof want, "# TYPE %s %s\n", families[i],
                 strstr(families[i], "duration") ? "histogram"
                 : strcmp(families[i], "ratelimit_keys") == 0 ||
                         strncmp(families[i], "ratelimit_key_states", 20) == 0 ||
                         strcmp(families[i], "ratelimit_reservations_active") == 0
                     ? "gauge"
                     : "counter");
        ck_assert_msg(strstr(r.body, want), "no TYPE for %s", families[i]);
    }
    /* every sample line belongs to a family with HELP and TYPE */
    for (char *line = r.body; *line;) {
        char *end = strchr(line, '\n');
        ck_assert_ptr_nonnull(end);
        if (*line != '#') {
            int known = 0;
            for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
                known |= strncmp(line, families[i], strlen(families[i])) == 0;
            ck_assert_msg(known, "sample of an undeclared family: %.*s", (int)(end - line),
                          line);
        }
        line = end + 1;
    }
    const char *want[] = {
        "\nratelimit_acquire_total{decision=\"allowed\"} 3\n",
        "\nratelimit_acquire_total{decision=\"denied\"} 1\n",
        "\nratelimit_denied_total{level=\"user\",rule=\"token_bucket(3, 0.000001/s)\"} 1\n",
        "\nratelimit_cost_total 3\n",
        "\nratelimit_keys{level=\"user\"} 1\n",
        "\nratelimit_keys{level=\"team\"} 1\n",
        "\nratelimit_keys{level=\"global\"} 1\n",
        /* one rule at each of the three levels, one key each; max_keys' default */
        "\nratelimit_key_states 3\n",
        "\nratelimit_key_states_max 10000000\n",
        "\nratelimit_http_requests_total{endpoint=\"/acquire\",code=\"400\"} 1\n",
        "\nratelimit_http_requests_total{endpoint=\"other\",code=\"404\"} 1\n",
        "\nratelimit_http_request_duration_seconds_bucket{endpoint=\"/acquire\",le=\"+Inf\"} 5\n",
        "\nratelimit_http_request_duration_seconds_count{endpoint=\"/acquire\"} 5\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(r.body, want[i]), "missing %s in\n%.3000s", want[i], r.body);
    /* no per-user label */
    ck_assert_ptr_null(strstr(r.body, "user-secret-1"));
    /* histogram buckets never decrease */
    uint64_t prev = 0;
    for (char *p = r.body;
         (p = strstr(p, "ratelimit_http_request_duration_seconds_bucket{endpoint=\"/acquire\""));
         p++) {
        uint64_t v = strtoull(strchr(p, '}') + 1, NULL, 10);
        ck_assert_uint_ge(v, prev);
        prev = v;
    }
    su_resp_free(&r);

    /* a large answer (moved out of the connection's inline buffer) and then small ones on
     * the same keep-alive connection */
    CURL *h = curl_easy_init();
    for (int i = 0; i < 3; i++) {
        r = su_req_on(h, &s, "GET", "/metrics", NULL, NULL);
        ck_assert_int_gt(strlen(r.body), 4096);
        su_resp_free(&r);
        r = su_req_on(h, &s, "GET", "/healthz", NULL, NULL);
        ck_assert_str_eq(r.body, "{\"status\":\"ok\"}");
        su_resp_free(&r);
        r = su_req_on(h, &s, "POST", "/acquire", "{}", NULL);
        check_error(&r, 400, "keys: required, an object of descriptor names to keys");
        su_resp_free(&r);
    }
    long connects = 0;
    curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &connects);
    ck_assert_int_eq(connects, 0); /* the last request reused the connection */
    curl_easy_cleanup(h);
    ck_assert_int_eq(su_stop(&s), 0);
}
END_TEST

static Suite *http_suite(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("server");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, acquire_body_and_headers);
    tcase_add_test(tc, escaped_keys_come_back_intact);
    tcase_add_test(tc, acquire_dry_run_priority_composed_keys);
    tcase_add_test(tc, manual_clock_uses_last_now);
    tcase_add_test(tc, acquire_bad_requests);
    tcase_add_test(tc, unknown_paths_and_methods);
    tcase_add_test(tc, body_size_cap);
    tcase_add_test(tc, large_request_headers_fit);
    tcase_add_test(tc, reserve_refund_charge_release);
    tcase_add_test(tc, settle_bad_requests);
    tcase_add_test(tc, concurrency_release_and_expiry);
    tcase_add_test(tc, quotas_need_the_token);
    tcase_add_test(tc, quotas_survive_a_restart);
    tcase_add_test(tc, state_survives_a_restart);
    tcase_add_test(tc, bad_quota_file_refuses_to_start);
    tcase_add_test(tc, rules_show_the_configuration);
    tcase_add_test(tc, builtin_config_is_default_json);
    tcase_add_test(tc, check_config_flag);
    tcase_add_test(tc, example_configs_pass_check);
    tcase_add_test(tc, port_in_use_fails);
    tcase_add_test(tc, sigterm_finishes_requests_in_flight);
    tcase_add_test(tc, sigint_exits_zero);
    tcase_add_test(tc, concurrent_clients_get_exactly_the_limit);
    tcase_add_test(tc, connections_are_spread_over_the_workers);
    tcase_add_test(tc, metrics_exposition);
    tcase_add_test(tc, model_headers_and_usage_metrics);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(http_suite());
}
