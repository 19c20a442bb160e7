/*
 * test_replay.c - build/ratelimit-replay: its decisions are the server's on the same trace (the
 * daemon with --manual-clock, sent the same lines), with the memory and the Redis store; the
 * summary and --compare on a small trace worked out by hand; its errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_server.h"
#include "srvutil.h"

static const char *cfg_a =
    "{\"reservation_ttl\": 5, \"levels\": ["
    " {\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"per-user\", "
    "\"capacity\": 3, \"per_second\": 1}]},"
    " {\"name\": \"pool\", \"rules\": [{\"type\": \"concurrency\", \"name\": \"slots\", "
    "\"limit\": 1}]},"
    " {\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"fixed_window\", "
    "\"name\": \"g\", \"limit\": 100, \"window\": 10}]}]}";

/* The same with two tokens per user instead of three. */
static const char *cfg_b =
    "{\"reservation_ttl\": 5, \"levels\": ["
    " {\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"name\": \"per-user\", "
    "\"capacity\": 2, \"per_second\": 1}]},"
    " {\"name\": \"pool\", \"rules\": [{\"type\": \"concurrency\", \"name\": \"slots\", "
    "\"limit\": 1}]},"
    " {\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"fixed_window\", "
    "\"name\": \"g\", \"limit\": 100, \"window\": 10}]}]}";

/* Worked by hand for cfg_a (user: 3 tokens, 1/s; pool: 1 slot; reservations live 5 s):
 *  1  t=0    alice        allowed, 2 left
 *  2  t=0    alice cost 2 reserve   allowed, 0 left, a reservation
 *  3  t=0.5  alice        denied: 0.5 tokens, 0.5 s to wait (peak wait)
 *  4  refund line 2 with 1: one token back, 1.5
 *  5  alice               allowed, 0.5 left
 *  6  an unknown descriptor: an error
 *  7  (blank)
 *  8  t=1    bob cost 5   denied, never fits (no wait)
 *  9  release line 2      released
 * 10  pool p1             allowed: takes the slot, a reservation
 * 11  pool p1             denied by the slot (held)
 * 12  t=7    pool p1      the reservation of line 10 expired at 6: allowed again
 * 13  release line 10     an error: it expired
 * 14  dry run alice       allowed, nothing taken (alice has 3 again by t=7)
 */
static const char *trace =
    "{\"now\": 0, \"keys\": {\"user\": \"alice\"}}\n"
    "{\"keys\": {\"user\": \"alice\"}, \"cost\": 2, \"reserve\": true}\n"
    "{\"now\": 0.5, \"keys\": {\"user\": \"alice\"}}\n"
    "{\"refund\": 2, \"actual_cost\": 1}\n"
    "{\"keys\": {\"user\": \"alice\"}}\n"
    "{\"keys\": {\"usr\": \"x\"}}\n"
    "\n"
    "{\"now\": 1, \"keys\": {\"user\": \"bob\"}, \"cost\": 5}\n"
    "{\"release\": 2}\n"
    "{\"keys\": {\"pool\": \"p1\"}}\n"
    "{\"keys\": {\"pool\": \"p1\"}}\n"
    "{\"now\": 7, \"keys\": {\"pool\": \"p1\"}}\n"
    "{\"release\": 10}\n"
    "{\"keys\": {\"user\": \"alice\"}, \"dry_run\": true}\n";

/* Writes a file in dir; returns its path, in one of 8 buffers used in turn (su_write's own
 * buffer is reused by its next call). */
static const char *put(const char *dir, const char *name, const char *text)
{
    static char paths[8][400];
    static unsigned next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s", su_write(dir, name, text));
    return p;
}

/* Runs the replay tool with a trace on stdin; returns its exit status and its stdout (its
 * stderr too when it fails: its messages). */
static int replay(const char *dir, const char *const *args, const char *input, char **out)
{
    const char *path = su_write(dir, "trace.jsonl", input);
    char cmd[2048], bin[600];
    snprintf(bin, sizeof bin, "%s", su_binary());
    char *slash = strrchr(bin, '/');
    snprintf(slash + 1, sizeof bin - (size_t)(slash + 1 - bin), "ratelimit-replay");
    int n = snprintf(cmd, sizeof cmd, "'%s'", bin);
    for (int i = 0; args[i]; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " '%s'", args[i]);
    snprintf(cmd + n, sizeof cmd - (size_t)n,
             " < '%s' 2>'%s/replay.err' || { rc=$?; cat '%s/replay.err'; exit $rc; }", path, dir,
             dir);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    return su_run(argv, out);
}

/* Reservation ids are random: each becomes "r-*". */
static void mask_ids(char *s)
{
    for (char *p = s; (p = strstr(p, "\"r-")) != NULL;) {
        size_t n = strspn(p + 3, "0123456789abcdef");
        if (n == 16) {
            memmove(p + 4, p + 3 + n, strlen(p + 3 + n) + 1);
            p[3] = '*';
        }
        p += 3;
    }
}

/* The trace sent to the server line by line (refund and release with the ids the server
 * gave), each answer's body written as the replay tool writes it. */
static char *server_answers(const su_server *s, const char *text)
{
    char ids[64][24] = {{0}}, line[1024], body[1200], *out = calloc(1, 65536);
    size_t no = 0;
    for (const char *p = text; *p; no++) {
        const char *nl = strchr(p, '\n');
        size_t n = (size_t)(nl - p);
        memcpy(line, p, n);
        line[n] = '\0';
        p = nl + 1;
        if (n == 0)
            continue;
        json_t *j = json_loads(line, 0, NULL);
        const char *path = "/acquire";
        snprintf(body, sizeof body, "%s", line);
        if (j && (json_object_get(j, "refund") || json_object_get(j, "release"))) {
            int refund = json_object_get(j, "refund") != NULL;
            json_int_t of = json_integer_value(json_object_get(j, refund ? "refund" : "release"));
            json_object_set_new(j, "reservation", json_string(ids[of]));
            json_object_del(j, refund ? "refund" : "release");
            char *d = json_dumps(j, JSON_COMPACT);
            snprintf(body, sizeof body, "%s", d);
            free(d);
            path = refund ? "/refund" : "/release";
        }
        json_decref(j);
        su_resp r = su_req(s, "POST", path, body, NULL);
        json_t *res = json_object_get(r.json, "reservation");
        if (json_is_string(res))
            snprintf(ids[no + 1], sizeof ids[0], "%s", json_string_value(res));
        size_t used = strlen(out);
        if (r.status >= 400 && r.status != 429) {
            json_t *e = json_pack("{s:I,s:s}", "line", (json_int_t)(no + 1), "error",
                                  su_error(&r));
            char *d = json_dumps(e, JSON_COMPACT | JSON_PRESERVE_ORDER);
            snprintf(out + used, 65536 - used, "%s\n", d);
            free(d);
            json_decref(e);
        } else {
            snprintf(out + used, 65536 - used, "%s\n", r.body);
        }
        su_resp_free(&r);
    }
    return out;
}

START_TEST(replay_decides_as_the_server_does)
{
    su_server s;
    char *out = NULL;
    su_tmpdir(&s);
    const char *cfg = put(s.dir, "a.json", cfg_a);
    const char *args[] = {"--config", cfg, NULL};
    ck_assert_int_eq(replay(s.dir, args, trace, &out), 0);

    const char *manual[] = {"--manual-clock", NULL};
    su_start(&s, cfg_a, manual);
    char *server = server_answers(&s, trace);
    ck_assert_int_eq(su_stop(&s), 0);

    /* the replay's lines up to its summary are the server's answers */
    char *summary = strstr(out, "{\"summary\":");
    ck_assert_ptr_nonnull(summary);
    *summary = '\0';
    mask_ids(out);
    mask_ids(server);
    ck_assert_str_eq(out, server);
    /* and a few of them by hand */
    ck_assert_ptr_nonnull(strstr(out, "{\"allowed\":false,\"retry_after\":0.5,\"blocked_by\":"
                                      "\"user: per-user\""));
    ck_assert_ptr_nonnull(strstr(out, "\"reserved_cost\":2,\"actual_cost\":1,\"refunded\":1"));
    ck_assert_ptr_nonnull(strstr(out, "{\"line\":6,\"error\":\"keys.usr: unknown descriptor"));
    ck_assert_ptr_nonnull(strstr(out, "{\"line\":13,\"error\":\"reservation: "));
    free(server);
    free(out);
}
END_TEST

/* A trace with usage: a reservation of {2000 input, 8000 output} tokens of a model at $3 and
 * $15 per million ($0.126), settled with 1200 output tokens ($0.024): as the server answers,
 * and $0.102 back by hand. */
START_TEST(replay_with_usage)
{
    static const char cfg[] =
        "{\"dimensions\": [\"input_tokens\", \"output_tokens\"], \"prices\": {\"by\": \"model\","
        " \"models\": {\"m\": {\"input_tokens\": 3, \"output_tokens\": 15}}}, \"levels\": ["
        " {\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\", \"name\": \"usd\", \"limit\": 50,"
        " \"window\": 86400, \"unit\": \"usd\"}, {\"type\": \"token_bucket\", \"name\": \"out\","
        " \"capacity\": 100000, \"per_second\": 1, \"unit\": \"output_tokens\"}]}]}";
    static const char usage_trace[] =
        "{\"now\": 1, \"keys\": {\"user\": \"a\", \"model\": \"m\"}, \"usage\": {\"input_tokens\":"
        " 2000, \"output_tokens\": 8000}, \"reserve\": true}\n"
        "{\"refund\": 1, \"actual_usage\": {\"output_tokens\": 1200}, \"now\": 1}\n"
        "{\"now\": 1, \"keys\": {\"user\": \"a\", \"model\": \"m\"}, \"usage\": {\"tokens\": 1}}\n";
    su_server s;
    char *out = NULL;
    su_tmpdir(&s);
    const char *args[] = {"--config", put(s.dir, "m.json", cfg), NULL};
    ck_assert_int_eq(replay(s.dir, args, usage_trace, &out), 0);
    const char *manual[] = {"--manual-clock", NULL};
    su_start(&s, cfg, manual);
    char *server = server_answers(&s, usage_trace);
    ck_assert_int_eq(su_stop(&s), 0);
    char *summary = strstr(out, "{\"summary\":");
    ck_assert_ptr_nonnull(summary);
    *summary = '\0';
    mask_ids(out);
    mask_ids(server);
    ck_assert_str_eq(out, server);
    ck_assert_ptr_nonnull(strstr(out, "\"usd\":{\"reserved\":0.126,\"actual\":0.024,"
                                      "\"refunded\":0.102,\"charged\":0}"));
    ck_assert_ptr_nonnull(strstr(out, "\"error\":\"usage.tokens: unknown dimension"));
    free(server);
    free(out);
}
END_TEST

START_TEST(replay_summary_by_hand)
{
    su_server s;
    char *out = NULL;
    su_tmpdir(&s);
    const char *args[] = {"--config", put(s.dir, "a.json", cfg_a), NULL};
    ck_assert_int_eq(replay(s.dir, args, trace, &out), 0);
    /* 9 requests (lines 1 2 3 5 8 10 11 12 14; 6 is an error): 1 2 5 10 12 14 allowed, 3 8 11
     * denied. per-user applied to the allowed 1 2 5 14, blocked 3 and 8; slots applied to 10
     * and 12, blocked 11; g applied to all six allowed. Denied keys: alice, bob, p1 once each
     * (by level, then key). The longest finite wait: 1 s on line 11 (the slot's retry hint,
     * 1 s by default; 3 waits 0.5 s, 8 never fits). Errors: lines 6 and 13. */
    const char *want =
        "{\"summary\":{\"requests\":9,\"allowed\":6,\"denied\":3,\"errors\":2,\"rules\":["
        "{\"level\":\"user\",\"rule\":\"per-user\",\"allowed\":4,\"denied\":2,\"shadow_denied\":0},"
        "{\"level\":\"global\",\"rule\":\"g\",\"allowed\":6,\"denied\":0,\"shadow_denied\":0},"
        "{\"level\":\"pool\",\"rule\":\"slots\",\"allowed\":2,\"denied\":1,\"shadow_denied\":0}],"
        "\"top_denied_keys\":[{\"level\":\"user\",\"key\":\"alice\",\"denied\":1},"
        "{\"level\":\"user\",\"key\":\"bob\",\"denied\":1},"
        "{\"level\":\"pool\",\"key\":\"p1\",\"denied\":1}],"
        "\"peak_wait\":{\"seconds\":1,\"line\":11}}}\n";
    char *summary = strstr(out, "{\"summary\":");
    ck_assert_ptr_nonnull(summary);
    ck_assert_str_eq(summary, want);
    free(out);
}
END_TEST

START_TEST(replay_compare_shows_where_configurations_differ)
{
    su_server s;
    char *out = NULL;
    su_tmpdir(&s);
    const char *a = put(s.dir, "a.json", cfg_a);
    const char *b = put(s.dir, "b.json", cfg_b);
    const char *args[] = {"--config", a, "--compare", b, NULL};
    /* with 2 tokens: line 2 (cost 2 after 1) is denied in b, so 3 (0.5 s later: 1.5 tokens) is
     * allowed there, and 5 (0.5 left) is denied; the refund of line 2 is settled in a alone.
     * Everything after decides the same. */
    ck_assert_int_eq(replay(s.dir, args, trace, &out), 0);
    const char *p = out;
    int lines[3] = {2, 3, 5}, allowed_a[3] = {1, 0, 1};
    for (int i = 0; i < 3; i++) {
        char want[64];
        snprintf(want, sizeof want, "{\"line\":%d,\"a\":{\"allowed\":%s", lines[i],
                 allowed_a[i] ? "true" : "false");
        ck_assert_msg(strncmp(p, want, strlen(want)) == 0, "line %d: %.200s", lines[i], p);
        ck_assert_ptr_nonnull(strstr(p, allowed_a[i] ? "\"b\":{\"allowed\":false"
                                                     : "\"b\":{\"allowed\":true"));
        p = strchr(p, '\n') + 1;
    }
    ck_assert(strncmp(p, "{\"line\":6,\"error\":", 18) == 0);
    p = strchr(p, '\n') + 1;
    ck_assert(strncmp(p, "{\"line\":13,\"error\":", 19) == 0);
    p = strchr(p, '\n') + 1;
    const char *sum = "{\"summary\":{\"differing\":3,\"errors\":2,\"a\":{\"requests\":9,"
                      "\"allowed\":6,\"denied\":3,";
    ck_assert_msg(strncmp(p, sum, strlen(sum)) == 0, "%s", p);
    ck_assert_ptr_nonnull(strstr(p, "\"b\":{\"requests\":9,\"allowed\":5,\"denied\":4,"));
    free(out);
}
END_TEST

START_TEST(replay_redis_store_decides_the_same)
{
    su_server s;
    rt_redis r;
    char *mem = NULL, *red = NULL, cfg[2048];
    su_tmpdir(&s);
    rt_redis_start(&r);
    const char *args[] = {"--config", put(s.dir, "a.json", cfg_a), NULL};
    ck_assert_int_eq(replay(s.dir, args, trace, &mem), 0);
    snprintf(cfg, sizeof cfg, "{\"store\": {\"type\": \"redis\", \"url\": \"%s\"}, %s", r.url,
             cfg_a + 1);
    const char *rargs[] = {"--config", put(s.dir, "r.json", cfg), "--store", "redis", NULL};
    ck_assert_int_eq(replay(s.dir, rargs, trace, &red), 0);
    rt_redis_stop(&r);
    mask_ids(mem);
    mask_ids(red);
    ck_assert_str_eq(red, mem);
    free(mem);
    free(red);
}
END_TEST

START_TEST(replay_refuses_bad_arguments)
{
    su_server s;
    char *out = NULL;
    su_tmpdir(&s);
    const char *none[] = {NULL};
    ck_assert_int_eq(replay(s.dir, none, "", &out), 2);
    ck_assert_ptr_nonnull(strstr(out, "--config is required"));
    free(out);
    const char *bad[] = {"--config", put(s.dir, "bad.json", "{\"levels\": []}"), NULL};
    ck_assert_int_eq(replay(s.dir, bad, "", &out), 1);
    ck_assert_ptr_nonnull(strstr(out, "ratelimit-replay: "));
    free(out);
    const char *store[] = {"--config", put(s.dir, "a.json", cfg_a), "--store", "disk",
                           NULL};
    ck_assert_int_eq(replay(s.dir, store, "", &out), 2);
    ck_assert_ptr_nonnull(strstr(out, "--store: memory or redis"));
    free(out);
    const char *mem[] = {"--config", put(s.dir, "a.json", cfg_a), "--store", "redis",
                         NULL};
    ck_assert_int_eq(replay(s.dir, mem, "", &out), 1);
    ck_assert_ptr_nonnull(strstr(out, "--store redis needs a configuration with"));
    free(out);
}
END_TEST

static Suite *replay_suite(void)
{
    Suite *s = suite_create("replay");
    TCase *tc = tcase_create("replay");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, replay_decides_as_the_server_does);
    tcase_add_test(tc, replay_summary_by_hand);
    tcase_add_test(tc, replay_with_usage);
    tcase_add_test(tc, replay_compare_shows_where_configurations_differ);
    tcase_add_test(tc, replay_redis_store_decides_the_same);
    tcase_add_test(tc, replay_refuses_bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(replay_suite());
}
