/*
 * test_service.c - the service's own pieces, white-box: the two /acquire body parsers agree,
 * numbers and strings are written exactly, the RateLimit headers and body of a decision,
 * metrics labels, and the OpenAPI document lists every route of the server.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/acquire_req.h"
#include "app/buf.h"
#include "app/metrics.h"
#include "app/render.h"
#include "testutil.h"
#include "app/values.h"
#include "http/http.h"

/* ---- the two parsers agree ---------------------------------------------------------------- */

static const char *const seeds[] = {
    "{\"keys\":{\"user\":\"u1\",\"team\":\"acme\"},\"cost\":1,\"priority\":0,\"reserve\":false,"
    "\"dry_run\":false}",
    "{ \"keys\" : { \"user\" : \"u1\" } }\n",
    "\t{\"cost\": 2.5, \"keys\": {\"user\": \"a\"}, \"now\": 1e3, \"reserve\": true}\r\n",
    "{\"keys\":{}}",
    "{\"keys\":{\"a\":\"b\",\"c\":\"d\"},\"priority\":-7,\"cost\":0.000001,\"dry_run\":true}",
    "{\"keys\":{\"user\":\"x\"},\"cost\":123456789012345678901}",
    "{\"keys\":{\"user\":\"x\"},\"cost\":1E400}",
    "{\"keys\":{\"user\":\"x\"},\"cost\":-0,\"now\":0.5E-3}",
    "{\"keys\":{\"user\":\"x\"},\"priority\":9223372036854775807}",
    "{\"keys\":{\"user\":\"x\"},\"priority\":-9223372036854775808}",
    "{\"keys\":{\"user\":\"x\\\"y\"}}",
    "{\"keys\":{\"user\":\"\xc3\xa9t\xc3\xa9\"}}",
    "{\"keys\":{\"user\":\"x\"},\"cost\":1,\"cost\":2}",
    "{}",
    "[]",
};

static int same_request(const rld_acquire_req *a, const rld_acquire_req *b)
{
    if (a->ndesc != b->ndesc || a->has_keys != b->has_keys || a->cost != b->cost ||
        a->priority != b->priority || a->reserve != b->reserve || a->dry_run != b->dry_run ||
        a->has_now != b->has_now || (a->has_now && a->now != b->now))
        return 0;
    for (size_t i = 0; i < a->ndesc; i++) {
        size_t k = 0;
        while (k < b->ndesc && !(b->desc[k].name_len == a->desc[i].name_len &&
                                 memcmp(b->desc[k].name, a->desc[i].name, a->desc[i].name_len) ==
                                     0))
            k++;
        if (k == b->ndesc || b->desc[k].value_len != a->desc[i].value_len ||
            memcmp(b->desc[k].value, a->desc[i].value, a->desc[i].value_len) != 0)
            return 0;
    }
    return 1;
}

/* Whenever the fast parser takes a body, jansson must read the same request from it. */
static void compare(const char *body, size_t len, int *fast_count)
{
    rld_acquire_req f, j;
    rl_err err;
    char *copy = malloc(len + 1);
    memcpy(copy, body, len);
    copy[len] = '\0';
    if (rld__acquire_parse_fast(copy, len, &f)) {
        (*fast_count)++;
        ck_assert_msg(rld__acquire_parse_json(copy, len, &j, &err) == 0,
                      "fast parser took \"%.*s\", jansson refused it: %s", (int)len, copy,
                      err.msg);
        ck_assert_msg(same_request(&f, &j), "parsers disagree on \"%.*s\"", (int)len, copy);
        rld_acquire_req_clear(&j);
    }
    free(copy);
}

START_TEST(fast_parser_agrees_with_jansson)
{
    static const char alphabet[] = "{}[]\",:0123456789-+.eE tfnul\\ax\x01\x80";
    int fast = 0, seeded = 0;
    char buf[512];
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        const char *b = seeds[s];
        size_t n = strlen(b);
        int before = fast;
        compare(b, n, &fast);
        seeded += fast > before;
        for (size_t i = 0; i < n; i++) {
            /* drop a byte */
            memcpy(buf, b, i);
            memcpy(buf + i, b + i + 1, n - i - 1);
            compare(buf, n - 1, &fast);
            for (size_t a = 0; a < sizeof alphabet - 1; a++) {
                /* replace a byte, insert a byte */
                memcpy(buf, b, n);
                buf[i] = alphabet[a];
                compare(buf, n, &fast);
                memcpy(buf, b, i);
                buf[i] = alphabet[a];
                memcpy(buf + i + 1, b + i, n - i);
                compare(buf, n + 1, &fast);
            }
        }
    }
    /* the usual bodies do take the fast path: seeds 0-4, 8, 9 and {} (seed 7's cost -0 is
     * out of range, so jansson's side answers it with the message) */
    ck_assert_int_eq(seeded, 8);
    ck_assert_int_gt(fast, 1000);
}
END_TEST

START_TEST(parse_values_and_errors)
{
    rld_acquire_req q;
    rl_err err;
    char body[256];
    snprintf(body, sizeof body, "{\"keys\":{\"user\":\"u1\"},\"cost\":2.5,\"priority\":3,"
                                "\"reserve\":true,\"now\":7}");
    ck_assert_int_eq(rld_acquire_parse(body, strlen(body), &q, &err), 0);
    ck_assert_ptr_null(q.root); /* the fast path */
    ck_assert_int_eq(q.ndesc, 1);
    ck_assert_int_eq(q.desc[0].value_len, 2);
    ck_assert(memcmp(q.desc[0].value, "u1", 2) == 0);
    ck_assert_int_eq(q.cost, 2500000);
    ck_assert_int_eq(q.priority, 3);
    ck_assert(q.reserve && !q.dry_run && q.has_now);
    ck_assert_int_eq(q.now, 7000000000);
    rld_acquire_req_clear(&q);

    /* escapes go through jansson, decoded */
    snprintf(body, sizeof body, "{\"keys\":{\"user\":\"a\\\"b\\u00e9\"}}");
    ck_assert_int_eq(rld_acquire_parse(body, strlen(body), &q, &err), 0);
    ck_assert_ptr_nonnull(q.root);
    ck_assert_int_eq(q.desc[0].value_len, 5);
    ck_assert(memcmp(q.desc[0].value, "a\"b\xc3\xa9", 5) == 0);
    ck_assert_int_eq(q.cost, 1000000); /* 1 when not given */
    rld_acquire_req_clear(&q);

    /* converted once, exactly: 0.0000015 rounds to 2 millionths, 1e3 s is 10^12 ns */
    snprintf(body, sizeof body, "{\"keys\":{\"user\":\"u\"},\"cost\":0.0000015,\"now\":1e3}");
    ck_assert_int_eq(rld_acquire_parse(body, strlen(body), &q, &err), 0);
    ck_assert_int_eq(q.cost, 2);
    ck_assert_int_eq(q.now, 1000000000000);
    rld_acquire_req_clear(&q);
    /* a bad value has the same message from both parsers' sides */
    snprintf(body, sizeof body, "{\"keys\":{\"user\":\"u\"},\"cost\":\"2\"}");
    ck_assert_int_eq(rld_acquire_parse(body, strlen(body), &q, &err), -1);
    ck_assert_str_eq(err.msg, "cost: must be a positive number from 0.000001 to 1000000000000");
    snprintf(body, sizeof body, "{\"keys\":{\"user\":\"\\u0075\"},\"cost\":1e13}");
    ck_assert_int_eq(rld_acquire_parse(body, strlen(body), &q, &err), -1);
    ck_assert_str_eq(err.msg, "cost: must be a positive number from 0.000001 to 1000000000000");

    snprintf(body, sizeof body, "{\"keys\":{\"user\":\"u\"},\"cost\":0.0000004}");
    ck_assert_int_eq(rld_acquire_parse(body, strlen(body), &q, &err), -1);
    ck_assert_str_eq(err.msg, "cost: must be a positive number from 0.000001 to 1000000000000");
    snprintf(body, sizeof body, "{\"keys\":{\"user\":\"u\"},\"now\":-1}");
    ck_assert_int_eq(rld_acquire_parse(body, strlen(body), &q, &err), -1);
    ck_assert_str_eq(err.msg, "now: must be a number of seconds from 0 to 9200000000");
    snprintf(body, sizeof body, "{\"keys\":{\"user\":\"u\"},\"now\":\"soon\"}");
    ck_assert_int_eq(rld_acquire_parse(body, strlen(body), &q, &err), -1);
    ck_assert_str_eq(err.msg, "now: must be a number of seconds from 0 to 9200000000");
}
END_TEST

/* ---- values converted at the edge ---------------------------------------------------------- */

START_TEST(values_in_the_core_units)
{
    rl_fp fp = 7;
    rl_ns ns = 7;
    rl_err err;
    /* cost: rounded to millionths, then (0, 10^12] */
    ck_assert_int_eq(rld_value_cost("cost", 2.5, &fp, &err), 0);
    ck_assert_int_eq(fp, 2500000);
    ck_assert_int_eq(rld_value_cost("cost", 0.0000005, &fp, &err), 0); /* half rounds up */
    ck_assert_int_eq(fp, 1);
    ck_assert_int_eq(rld_value_cost("cost", 1e12, &fp, &err), 0);
    ck_assert_int_eq(fp, 1000000000000000000);
    const double bad_cost[] = {0, -0.0, 0.0000004, -1, 1e12 + 0.001, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad_cost / sizeof bad_cost[0]; i++) {
        fp = 7;
        ck_assert_int_eq(rld_value_cost("hits_addend", bad_cost[i], &fp, &err), -1);
        ck_assert_str_eq(err.msg, "hits_addend: must be a positive number from 0.000001 to "
                                  "1000000000000");
        ck_assert_int_eq(fp, 7); /* untouched */
    }
    ck_assert_int_eq(rld_value_cost("cost", 0, &fp, NULL), -1); /* err may be NULL */

    /* the same as decimal text, exactly */
    static const struct {
        const char *s;
        rl_fp v; /* -1: refused */
    } text[] = {{"3", 3000000},        {"2.5", 2500000}, {"0.000001", 1}, {"00.5", 500000},
                {"1000000000000", 1000000000000000000},   {"1.", 1000000}, {"0.0000001", -1},
                {"1000000000000.000001", -1},              {"0", -1},       {"", -1},
                {".", -1},         {"-1", -1},      {"1e3", -1},      {" 1", -1},
                {"99999999999999999999", -1}};
    for (size_t i = 0; i < sizeof text / sizeof text[0]; i++) {
        fp = 7;
        int rc = rld_value_cost_text("X-RateLimit-Cost", text[i].s, strlen(text[i].s), &fp, &err);
        ck_assert_msg(rc == (text[i].v < 0 ? -1 : 0), "\"%s\"", text[i].s);
        ck_assert_int_eq(fp, text[i].v < 0 ? 7 : text[i].v);
        if (rc)
            ck_assert_str_eq(err.msg, "X-RateLimit-Cost: must be a positive number from 0.000001 "
                                      "to 1000000000000 (at most 6 decimals)");
    }

    /* whole units */
    ck_assert_int_eq(rld_value_cost_units("hits_addend", 3, &fp, &err), 0);
    ck_assert_int_eq(fp, 3000000);
    ck_assert_int_eq(rld_value_cost_units("hits_addend", 1000000000000, &fp, &err), 0);
    ck_assert_int_eq(fp, 1000000000000000000);
    ck_assert_int_eq(rld_value_cost_units("hits_addend", 1000000000001, &fp, &err), -1);
    ck_assert_str_eq(err.msg, "hits_addend: must be a whole number from 1 to 1000000000000");
    ck_assert_int_eq(rld_value_cost_units("hits_addend", 0, &fp, &err), -1);

    /* an amount may be 0 */
    ck_assert_int_eq(rld_value_amount("actual_cost", 0, &fp, &err), 0);
    ck_assert_int_eq(fp, 0);
    ck_assert_int_eq(rld_value_amount("actual_cost", 1e12, &fp, &err), 0);
    ck_assert_int_eq(fp, 1000000000000000000);
    ck_assert_int_eq(rld_value_amount("actual_cost", -0.000001, &fp, &err), -1);
    ck_assert_str_eq(err.msg, "actual_cost: must be a number from 0 to 1000000000000");
    ck_assert_int_eq(rld_value_amount("actual_cost", NAN, &fp, &err), -1);

    /* seconds to nanoseconds */
    ck_assert_int_eq(rld_value_seconds("now", 1.5, &ns, &err), 0);
    ck_assert_int_eq(ns, 1500000000);
    ck_assert_int_eq(rld_value_seconds("now", 9.2e9, &ns, &err), 0);
    ck_assert_int_eq(ns, 9200000000000000000);
    ck_assert_int_eq(rld_value_seconds("now", 0, &ns, &err), 0);
    ck_assert_int_eq(ns, 0);
    ns = 7;
    ck_assert_int_eq(rld_value_seconds("now", -0.5, &ns, &err), -1);
    ck_assert_str_eq(err.msg, "now: must be a number of seconds from 0 to 9200000000");
    ck_assert_int_eq(rld_value_seconds("now", 9.3e9, &ns, &err), -1);
    ck_assert_int_eq(rld_value_seconds("now", NAN, &ns, &err), -1);
    ck_assert_int_eq(ns, 7);
}
END_TEST

/* ---- exact output ------------------------------------------------------------------------- */

START_TEST(fixed_point_text_matches_the_core)
{
    const int64_t v[] = {0,          1,         -1,        999999,     1000000,   1000001,
                         9,          10,        99,        9999,       10000,     INT64_MIN,
                         -1500000,   250000,    100,       INT64_MAX,  INT64_MIN + 1,
                         1234567890, -999999999, 10000000000, 5,       7000000000000000000};
    char a[64], b[64];
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 10000; i++) {
        int64_t val = i < (int)(sizeof v / sizeof v[0]) ? v[i] : 0;
        if (i >= (int)(sizeof v / sizeof v[0])) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            val = (int64_t)(x >> (x % 50));
            if (x & 1)
                val = -val;
        }
        rl_fmt_fp(a, sizeof a, val);
        rld_fmt_fp(b, val);
        ck_assert_str_eq(a, b);
        rl_fmt_ns(a, sizeof a, val);
        rld_fmt_seconds(b, val);
        ck_assert_str_eq(a, b);
        snprintf(a, sizeof a, "%lld", (long long)val);
        b[rld_fmt_i64(b, val)] = '\0';
        ck_assert_str_eq(a, b);
        ck_assert_uint_eq(rld_dec_len(val < 0 ? 0 - (uint64_t)val : (uint64_t)val),
                          strlen(a) - (val < 0));
    }
}
END_TEST

START_TEST(json_strings_round_trip)
{
    char s[300];
    size_t n = 0;
    for (int c = 1; c < 128; c++)
        s[n++] = (char)c;
    memcpy(s + n, "\xc3\xa9\xe2\x82\xac", 5); /* é € */
    n += 5;
    char store[16];
    rld_buf b;
    rld_buf_init(&b, store, sizeof store); /* starts inline, must move to the heap */
    rld_buf_putc(&b, '[');
    rld_buf_json_str(&b, s, n);
    rld_buf_putc(&b, ']');
    ck_assert(rld_buf_on_heap(&b));
    json_error_t jerr;
    json_t *arr = json_loads(rld_buf_cstr(&b), 0, &jerr);
    ck_assert_msg(arr != NULL, "%s: %s", rld_buf_cstr(&b), jerr.text);
    ck_assert_int_eq(json_string_length(json_array_get(arr, 0)), n);
    ck_assert(memcmp(json_string_value(json_array_get(arr, 0)), s, n) == 0);
    json_decref(arr);
    rld_buf_reset(&b);
    ck_assert(!rld_buf_on_heap(&b));
    rld_buf_fp(&b, -2500000);
    rld_buf_putc(&b, ' ');
    rld_buf_seconds(&b, 1500000001);
    rld_buf_putc(&b, ' ');
    rld_buf_i64(&b, INT64_MIN);
    ck_assert_str_eq(rld_buf_cstr(&b), "-2.5 1.500000001 -9223372036854775808");
    rld_buf_reset(&b);
}
END_TEST

START_TEST(decision_body_and_headers)
{
    /* a deny list reports no status: it is left out of limits and headers */
    rl_limiter *lim = tu_limiter(
        "{\"levels\": [{\"name\": \"ip\", \"rules\": ["
        "{\"type\": \"deny_list\", \"keys\": [\"6.6.6.6\"]},"
        "{\"type\": \"gcra\", \"name\": \"smooth\", \"per_second\": 4, \"burst\": 2}]}]}");
    rl_decision d;
    tu_acquire(lim, "ip=1.2.3.4", 1, S(0), &d);
    rld_buf body, pol, st;
    rld_buf_init(&body, NULL, 0);
    rld_buf_init(&pol, NULL, 0);
    rld_buf_init(&st, NULL, 0);
    rld_render_decision(&body, rl_limiter_config(lim), &d);
    /* gcra 4/s burst 2: one cell used, 1 left; back to full in 0.25 s; 2 cells refill in 0.5 s */
    ck_assert_str_eq(rld_buf_cstr(&body),
                     "{\"allowed\":true,\"retry_after\":0,\"blocked_by\":null,\"limits\":["
                     "{\"level\":\"ip\",\"key\":\"1.2.3.4\",\"rule\":\"smooth\",\"limit\":2,"
                     "\"remaining\":1,\"reset_after\":0.25}]}");
    ck_assert_uint_eq(rld_render_ratelimit(&pol, &st, rl_limiter_config(lim), &d), 1);
    ck_assert_str_eq(rld_buf_cstr(&pol), "\"ip.smooth\";q=2;w=1");
    ck_assert_str_eq(rld_buf_cstr(&st), "\"ip.smooth\";r=1;t=1");
    rld_buf_reset(&body);
    rld_buf_reset(&pol);
    rld_buf_reset(&st);
    /* the denied key: never fits, blocked by the deny list's default name */
    tu_acquire(lim, "ip=6.6.6.6", 1, S(0), &d);
    rld_render_decision(&body, rl_limiter_config(lim), &d);
    ck_assert_ptr_nonnull(strstr(rld_buf_cstr(&body),
                                 "{\"allowed\":false,\"retry_after\":null,\"blocked_by\":\"ip: "
                                 "deny_list(1 key)\""));
    rld_buf_reset(&body);
    ck_assert_int_eq(rld_retry_after_seconds(1), 1);
    ck_assert_int_eq(rld_retry_after_seconds(S(2)), 2);
    ck_assert_int_eq(rld_retry_after_seconds(S(2) + 1), 3);
    tu_free(lim);
}
END_TEST

/* Renders d's body and both headers into the three strings (freed by the caller). */
static void render_all(const rl_limiter *lim, const rl_decision *d, char **body, char **pol,
                       char **st)
{
    char small[8]; /* inline storage too small for anything: every append grows the buffer */
    rld_buf b, p, s;
    rld_buf_init(&b, small, sizeof small);
    rld_buf_init(&p, NULL, 0);
    rld_buf_init(&s, NULL, 0);
    rld_render_decision(&b, rl_limiter_config(lim), d);
    ck_assert_uint_eq(rld_render_ratelimit(&p, &s, rl_limiter_config(lim), d), 3);
    *body = rld_buf_steal(&b);
    *pol = rld_buf_steal(&p);
    *st = rld_buf_steal(&s);
}

/* Three rules: a token bucket, a gcra rule, and a concurrency rule (qu=, no w). */
static rl_limiter *three_rules(void)
{
    return tu_limiter(
        "{\"levels\": ["
        "{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"free\","
        " \"capacity\": 10, \"per_second\": 4}]},"
        "{\"name\": \"ip\", \"rules\": [{\"type\": \"gcra\", \"name\": \"smooth\","
        " \"per_second\": 1000, \"burst\": 1000000}]},"
        "{\"name\": \"slots\", \"rules\": [{\"type\": \"concurrency\", \"limit\": 2}]}]}");
}

/* The user's key has '"' and '\\', which JSON escapes. */
#define THREE_KEYS "user=a\"b\\c,ip=1.2.3.4,slots=k"

START_TEST(answer_of_three_rules_by_hand)
{
    rl_limiter *lim = three_rules();
    rl_decision d;
    char *body, *pol, *st, want[1024];
    /* cost 3 at 0 s. user: 10 - 3 = 7 left; full again after 3 / 4 = 0.75 s; 10 refill in
     * 2.5 s (w=3); one more whole unit (8) in 0.25 s (t=1). ip: gcra 1000/s, burst 1000000:
     * 999997 left, back to full in 3 / 1000 = 0.003 s, 1000000 cells in 1000 s (w=1000),
     * one more in 0.001 s (t=1). slots: one slot of 2 held (a request counts once), 1 left;
     * slots come back on release only, so the rule reports no reset_after (0) and no window
     * (no w), and t is its retry hint, 1 s. */
    ck_assert(tu_acquire(lim, THREE_KEYS, 3, S(0), &d));
    ck_assert(d.reservation[0]); /* a concurrency rule's slot is held by a reservation */
    render_all(lim, &d, &body, &pol, &st);
    snprintf(want, sizeof want,
             "{\"allowed\":true,\"retry_after\":0,\"blocked_by\":null,\"reservation\":\"%s\","
             "\"limits\":["
             "{\"level\":\"user\",\"key\":\"a\\\"b\\\\c\",\"rule\":\"free\","
             "\"limit\":10,\"remaining\":7,\"reset_after\":0.75},"
             "{\"level\":\"ip\",\"key\":\"1.2.3.4\",\"rule\":\"smooth\","
             "\"limit\":1000000,\"remaining\":999997,\"reset_after\":0.003},"
             "{\"level\":\"slots\",\"key\":\"k\",\"rule\":\"concurrency(2)\","
             "\"limit\":2,\"remaining\":1,\"reset_after\":0}]}",
             d.reservation);
    ck_assert_str_eq(body, want);
    ck_assert_str_eq(pol, "\"user.free\";q=10;w=3, \"ip.smooth\";q=1000000;w=1000, "
                          "\"slots.concurrency(2)\";q=2;qu=\"concurrent-requests\"");
    ck_assert_str_eq(st, "\"user.free\";r=7;t=1, \"ip.smooth\";r=999997;t=1, "
                         "\"slots.concurrency(2)\";r=1;t=1");
    free(body);
    free(pol);
    free(st);
    tu_free(lim);
}
END_TEST

START_TEST(denial_with_an_odd_rule_name_by_hand)
{
    rl_limiter *lim = three_rules();
    rl_decision d;
    char *body, *pol, *st;
    /* cost 3, then cost 8 at 0 s: user has 7, the 8th unit comes in 0.25 s: denied by user,
     * nothing taken anywhere (no reservation), the balances of the first answer. The user
     * rule is given a name the configuration would refuse, with '"', '\\' and UTF-8 (a
     * plug-in's could be): JSON escapes the first two and keeps the UTF-8, the sf-string
     * escapes them and writes '?' for each byte outside ASCII. */
    ck_assert(tu_acquire(lim, THREE_KEYS, 3, S(0), &d));
    ck_assert(!tu_acquire(lim, THREE_KEYS, 8, S(0), &d));
    rl_rule odd = *d.applied[0].rule;
    odd.name = "say \"hi\"\\\xc3\xa9";
    d.applied[0].rule = &odd;
    render_all(lim, &d, &body, &pol, &st);
    ck_assert_str_eq(body,
                     "{\"allowed\":false,\"retry_after\":0.25,"
                     "\"blocked_by\":\"user: say \\\"hi\\\"\\\\\xc3\xa9\",\"limits\":["
                     "{\"level\":\"user\",\"key\":\"a\\\"b\\\\c\",\"rule\":\"say \\\"hi\\\"\\\\"
                     "\xc3\xa9\",\"limit\":10,\"remaining\":7,\"reset_after\":0.75},"
                     "{\"level\":\"ip\",\"key\":\"1.2.3.4\",\"rule\":\"smooth\","
                     "\"limit\":1000000,\"remaining\":999997,\"reset_after\":0.003},"
                     "{\"level\":\"slots\",\"key\":\"k\",\"rule\":\"concurrency(2)\","
                     "\"limit\":2,\"remaining\":1,\"reset_after\":0}]}");
    ck_assert_str_eq(pol, "\"user.say \\\"hi\\\"\\\\??\";q=10;w=3, \"ip.smooth\";q=1000000;w=1000, "
                          "\"slots.concurrency(2)\";q=2;qu=\"concurrent-requests\"");
    ck_assert_str_eq(st, "\"user.say \\\"hi\\\"\\\\??\";r=7;t=1, \"ip.smooth\";r=999997;t=1, "
                         "\"slots.concurrency(2)\";r=1;t=1");
    free(body);
    free(pol);
    free(st);
    tu_free(lim);
}
END_TEST

/* One token bucket at level "user" with the name, capacity and rate given. */
static rl_limiter *user_bucket(const char *rule, int capacity, int per_second)
{
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\","
             " \"name\": \"%s\", \"capacity\": %d, \"per_second\": %d}]}]}",
             rule, capacity, per_second);
    return tu_limiter(cfg);
}

/* d rendered into the three strings (freed by the caller). */
static void render_one(const rl_limiter *lim, const rl_decision *d, char **body, char **pol,
                       char **st)
{
    rld_buf b, p, s;
    rld_buf_init(&b, NULL, 0);
    rld_buf_init(&p, NULL, 0);
    rld_buf_init(&s, NULL, 0);
    ck_assert_uint_eq(rld_render_answer(&b, &p, &s, rl_limiter_config(lim), d), 1);
    *body = rld_buf_steal(&b);
    *pol = rld_buf_steal(&p);
    *st = rld_buf_steal(&s);
}

START_TEST(kept_text_follows_the_rule)
{
    /* cost 1 of 10 at 1/s: 9 left, 10 s to fill (w=10), the next unit in 1 s */
    rl_limiter *lim = user_bucket("free", 10, 1);
    rl_decision d;
    char *body, *pol, *st;
    ck_assert(tu_acquire(lim, "user=u", 1, S(0), &d));
    rl_rule *rule = (rl_rule *)d.applied[0].rule; /* renamed in place: found at its place */
    char *name = rule->name;
    for (int step = 0; step < 4; step++) {
        rl_rule_status *rs = (rl_rule_status *)rl_decision_status(&d, 0);
        /* the same rule with another limit (a tier's), then another window, then another
         * name: the text kept for it is not used for what differs */
        if (step == 1)
            rs->limit = 20 * RL_FP_ONE;
        else if (step == 2)
            rs->window = S(5);
        else if (step == 3)
            rule->name = "gold";
        render_one(lim, &d, &body, &pol, &st);
        static const char *const policies[] = {
            "\"user.free\";q=10;w=10", "\"user.free\";q=20;w=10", "\"user.free\";q=20;w=5",
            "\"user.gold\";q=20;w=5"};
        ck_assert_str_eq(pol, policies[step]);
        ck_assert_str_eq(st, step == 3 ? "\"user.gold\";r=9;t=1" : "\"user.free\";r=9;t=1");
        ck_assert_ptr_nonnull(strstr(body, step == 0   ? "\"rule\":\"free\",\"limit\":10,"
                                           : step < 3 ? "\"rule\":\"free\",\"limit\":20,"
                                                      : "\"rule\":\"gold\",\"limit\":20,"));
        free(body);
        free(pol);
        free(st);
    }
    rule->name = name;
    tu_free(lim);
}
END_TEST

START_TEST(long_names_written_each_time)
{
    /* a name longer than what is kept (48 bytes with its NUL: 60 here): the same text */
    const char *rule = "a-rule-name-of-sixty-bytes-which-is-longer-than-what-is-kept";
    ck_assert_uint_eq(strlen(rule), 60);
    rl_limiter *lim = user_bucket(rule, 10, 1);
    rl_decision d;
    char *body, *pol, *st;
    ck_assert(tu_acquire(lim, "user=u", 1, S(0), &d));
    for (int again = 0; again < 2; again++) {
        render_one(lim, &d, &body, &pol, &st);
        ck_assert_str_eq(body, "{\"allowed\":true,\"retry_after\":0,\"blocked_by\":null,"
                               "\"limits\":[{\"level\":\"user\",\"key\":\"u\",\"rule\":"
                               "\"a-rule-name-of-sixty-bytes-which-is-longer-than-what-is-kept\","
                               "\"limit\":10,\"remaining\":9,\"reset_after\":1}]}");
        ck_assert_str_eq(pol, "\"user.a-rule-name-of-sixty-bytes-which-is-longer-than-what-is-"
                              "kept\";q=10;w=10");
        ck_assert_str_eq(st, "\"user.a-rule-name-of-sixty-bytes-which-is-longer-than-what-is-"
                             "kept\";r=9;t=1");
        free(body);
        free(pol);
        free(st);
    }
    tu_free(lim);
}
END_TEST

START_TEST(metrics_codes_and_buckets)
{
    static const char *const names[] = {"/a", "other"};
    rld_metrics *m = rld_metrics_new(2, names);
    rl_limiter *lim = tu_limiter("{\"levels\": [{\"name\": \"l.x\", \"rules\": [{\"type\": "
                                 "\"token_bucket\", \"capacity\": 1, \"per_second\": 1}]}]}");
    rld_metrics_http(m, 0, 200, 100000); /* exactly on the first bound: counted in it */
    rld_metrics_http(m, 0, 418, 100001);
    rld_metrics_http(m, 1, 404, 5000000000);
    rld_buf o;
    rld_buf_init(&o, NULL, 0);
    rld_metrics_render(m, lim, &o);
    const char *t = rld_buf_cstr(&o);
    ck_assert_ptr_nonnull(strstr(t, "{endpoint=\"/a\",code=\"200\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "{endpoint=\"/a\",code=\"other\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "_bucket{endpoint=\"/a\",le=\"0.0001\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "_bucket{endpoint=\"/a\",le=\"0.00025\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "_bucket{endpoint=\"other\",le=\"2.5\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(t, "_bucket{endpoint=\"other\",le=\"+Inf\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "_sum{endpoint=\"/a\"} 0.000200001\n"));
    ck_assert_ptr_nonnull(strstr(t, "ratelimit_keys{level=\"l.x\"} 0\n"));
    rld_buf_reset(&o);
    rld_metrics_free(m);
    tu_free(lim);
}
END_TEST

/* ---- the OpenAPI document and the route table ---------------------------------------------- */

/* The block of a path in openapi.yaml ("  /acquire:" up to the next path), or NULL. */
static const char *path_block(const char *doc, const char *path, size_t *len)
{
    char key[160];
    snprintf(key, sizeof key, "\n  %s:\n", path);
    const char *p = strstr(doc, key);
    if (!p)
        return NULL;
    p += strlen(key);
    const char *end = p;
    while (*end && !(end[0] == '\n' && end[1] == ' ' && end[2] == ' ' && end[3] != ' '))
        end++;
    *len = (size_t)(end - p);
    return p;
}

START_TEST(openapi_lists_every_route)
{
    FILE *f = fopen("api/openapi.yaml", "r");
    ck_assert_msg(f != NULL, "api/openapi.yaml (tests run from the repository root)");
    static char doc[200000];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[n] = '\0';
    ck_assert(strncmp(doc, "openapi: 3.", 11) == 0);
    size_t documented = 0;
    for (size_t i = 0; i < rld_nroutes; i++) {
        const rld_route *rt = &rld_routes[i];
        char path[128];
        size_t len;
        /* a prefix route takes its tail as parameters: /quota/ is /quota/{user}, /usage/ is
         * /usage/{level}/{key}: the document's path that starts with the prefix and a '{' */
        snprintf(path, sizeof path, "%s", rt->path);
        if (rt->path[strlen(rt->path) - 1] == '/') {
            char at[160];
            snprintf(at, sizeof at, "\n  %s{", rt->path);
            const char *p = strstr(doc, at), *colon = p ? strstr(p, ":\n") : NULL;
            ck_assert_msg(colon != NULL, "openapi.yaml lacks a path %s{...}", rt->path);
            snprintf(path, sizeof path, "%.*s", (int)(colon - p - 3), p + 3);
        }
        const char *block = path_block(doc, path, &len);
        ck_assert_msg(block != NULL, "openapi.yaml lacks the path %s", path);
        for (const rld_method *m = rt->methods; m->name; m++) {
            char key[32];
            size_t k = (size_t)snprintf(key, sizeof key, "\n    ");
            for (const char *c = m->name; *c; c++)
                key[k++] = (char)(*c - 'A' + 'a');
            snprintf(key + k, sizeof key - k, ":\n");
            char *copy = strndup(block - 1, len + 1);
            ck_assert_msg(strstr(copy, key) != NULL, "openapi.yaml lacks %s %s", m->name, path);
            /* every method documents 405 (the route table answers it for the others) */
            ck_assert_msg(strstr(copy, "'405'") != NULL, "%s documents no 405", path);
            free(copy);
            documented++;
        }
    }
    ck_assert_uint_eq(documented, 13);
    /* and nothing more: every documented path is a route */
    size_t paths = 0;
    for (const char *p = strstr(doc, "\npaths:\n"); p && (p = strstr(p + 1, "\n  /"));) {
        if (p > strstr(doc, "\ncomponents:"))
            break;
        paths++;
    }
    ck_assert_uint_eq(paths, rld_nroutes);
}
END_TEST

static Suite *service_suite(void)
{
    Suite *s = suite_create("service");
    TCase *tc = tcase_create("pieces");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, fast_parser_agrees_with_jansson);
    tcase_add_test(tc, parse_values_and_errors);
    tcase_add_test(tc, values_in_the_core_units);
    tcase_add_test(tc, fixed_point_text_matches_the_core);
    tcase_add_test(tc, json_strings_round_trip);
    tcase_add_test(tc, decision_body_and_headers);
    tcase_add_test(tc, answer_of_three_rules_by_hand);
    tcase_add_test(tc, denial_with_an_odd_rule_name_by_hand);
    tcase_add_test(tc, kept_text_follows_the_rule);
    tcase_add_test(tc, long_names_written_each_time);
    tcase_add_test(tc, metrics_codes_and_buckets);
    tcase_add_test(tc, openapi_lists_every_route);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(service_suite()) ? 1 : 0;
}
