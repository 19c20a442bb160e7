/*
 * test_log.c - the "log" setting: access lines read back from the daemon's stderr (text and
 * JSON), a denial naming its rule and key, the level filter, no token ever written, and no
 * access line when access logging is off.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srvutil.h"

#define TOKEN "admin-s3cret-token"

/* A token bucket of 1 per user refilling so slowly that the second request is denied. */
static void start(su_server *s, const char *log)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{%s \"admin_token\": \"" TOKEN "\", \"levels\": ["
             "{\"name\": \"user\", \"tiered\": true}],"
             " \"tiers\": {\"free\": [{\"type\": \"token_bucket\", \"name\": \"free\", "
             "\"capacity\": 1, \"per_second\": 0.001}]}, \"default_tier\": \"free\"}",
             log);
    su_tmpdir(s);
    su_start(s, cfg, NULL);
}

/* The same few requests each time: allowed, denied (a key with a quote), an admin call with the
 * token (also in the query), an unknown path. Returns the daemon's stderr after it stopped. */
static char *traffic_and_log(su_server *s)
{
    const char *auth[] = {"Authorization: Bearer " TOKEN, NULL};
    const char *body = "{\"keys\": {\"user\": \"al\\\"ice\"}}";
    su_resp r = su_req(s, "POST", "/acquire", body, NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    r = su_req(s, "POST", "/acquire", body, NULL);
    ck_assert_int_eq(r.status, 429);
    su_resp_free(&r);
    r = su_req(s, "GET", "/quota/bob?token=" TOKEN, NULL, auth);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    r = su_req(s, "GET", "/nowhere", NULL, NULL);
    ck_assert_int_eq(r.status, 404);
    su_resp_free(&r);
    ck_assert_int_eq(su_stop(s), 0);
    char *log = su_read(s->log);
    ck_assert_ptr_nonnull(log);
    ck_assert_msg(strstr(log, TOKEN) == NULL, "the token is in the log:\n%s", log);
    ck_assert_msg(strstr(log, "Bearer") == NULL, "a header is in the log:\n%s", log);
    return log;
}

/* The line that contains all of the parts (each in order), or NULL. */
static const char *line_with(const char *log, const char *a, const char *b)
{
    for (const char *p = log; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char *line = strndup(p, n + (nl != NULL)); /* with its newline: "x\n" ends a line */
        const char *x = strstr(line, a);
        int ok = x && (!b || strstr(x, b));
        free(line);
        if (ok)
            return p;
        p += n + (nl != NULL);
    }
    return NULL;
}

static size_t count(const char *log, const char *s)
{
    size_t n = 0;
    for (const char *p = log; (p = strstr(p, s)) != NULL; p += strlen(s))
        n++;
    return n;
}

START_TEST(text_access_lines)
{
    su_server s;
    start(&s, "\"log\": {\"access\": true},");
    char *log = traffic_and_log(&s);
    ck_assert_msg(line_with(log, "ratelimitd[", ": access: POST /acquire 200 ") != NULL, "%s", log);
    ck_assert_ptr_nonnull(line_with(log, ": access: POST /acquire 429 ",
                                    " ms client=127.0.0.1 blocked_by=\"user: free\" "
                                    "key=\"al\\\"ice\"\n"));
    /* the path without its query, and no blocked_by on what was not denied */
    ck_assert_ptr_nonnull(line_with(log, ": access: GET /quota/bob 200 ", "client=127.0.0.1\n"));
    ck_assert_ptr_nonnull(line_with(log, ": access: GET /nowhere 404 ", "client=127.0.0.1\n"));
    ck_assert_uint_eq(count(log, ": access: "), 4);
    ck_assert_ptr_nonnull(strstr(log, ": started: listening on"));
    free(log);
}
END_TEST

START_TEST(json_lines)
{
    su_server s;
    start(&s, "\"log\": {\"format\": \"json\", \"access\": true},");
    char *log = traffic_and_log(&s);
    size_t lines = 0, access = 0;
    for (char *p = log, *nl; *p; p = nl + 1) {
        nl = strchr(p, '\n');
        ck_assert_ptr_nonnull(nl);
        *nl = '\0';
        json_error_t e;
        json_t *j = json_loads(p, 0, &e);
        ck_assert_msg(j != NULL, "not JSON: %s (%s)", p, e.text);
        ck_assert(json_is_string(json_object_get(j, "time")));
        ck_assert(json_is_integer(json_object_get(j, "pid")));
        const char *msg = json_string_value(json_object_get(j, "msg"));
        const char *level = json_string_value(json_object_get(j, "level"));
        ck_assert_ptr_nonnull(msg);
        if (strcmp(msg, "access") == 0) {
            int status = (int)json_integer_value(json_object_get(j, "status"));
            const char *path = json_string_value(json_object_get(j, "path"));
            ck_assert_str_eq(json_string_value(json_object_get(j, "client")), "127.0.0.1");
            ck_assert(json_is_real(json_object_get(j, "duration_ms")));
            ck_assert_str_eq(level, status == 200 ? "info" : "warn");
            if (status == 429) {
                ck_assert_str_eq(path, "/acquire");
                ck_assert_str_eq(json_string_value(json_object_get(j, "blocked_by")),
                                 "user: free");
                ck_assert_str_eq(json_string_value(json_object_get(j, "key")), "al\"ice");
            } else {
                ck_assert_ptr_null(json_object_get(j, "blocked_by"));
            }
            access++;
        } else {
            ck_assert_str_eq(level, "info"); /* started, stopping, stopped */
        }
        json_decref(j);
        lines++;
    }
    ck_assert_uint_eq(access, 4);
    ck_assert_uint_eq(lines, 7);
    free(log);
}
END_TEST

START_TEST(warn_level_keeps_denials_and_errors)
{
    su_server s;
    start(&s, "\"log\": {\"level\": \"warn\", \"access\": true},");
    char *log = traffic_and_log(&s);
    /* the denial and the 404, nothing at info (the start line and the two 200s) */
    ck_assert_uint_eq(count(log, "\n"), 2);
    ck_assert_ptr_nonnull(line_with(log, ": access: POST /acquire 429 ", "key=\"al\\\"ice\""));
    ck_assert_ptr_nonnull(line_with(log, ": access: GET /nowhere 404 ", NULL));
    free(log);
}
END_TEST

START_TEST(no_access_lines_by_default)
{
    su_server s;
    start(&s, "");
    char *log = traffic_and_log(&s);
    ck_assert_uint_eq(count(log, "access"), 0);
    ck_assert_uint_eq(count(log, "\n"), 3); /* started, stopping, stopped */
    free(log);
}
END_TEST

static Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("log");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, text_access_lines);
    tcase_add_test(tc, json_lines);
    tcase_add_test(tc, warn_level_keeps_denials_and_errors);
    tcase_add_test(tc, no_access_lines_by_default);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(log_suite());
}
