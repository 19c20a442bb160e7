/*
 * test_xds.c - the xDS client's pieces without a server: a pushed RateLimitConfig as the YAML
 * text of its file (the text worked out by hand, then read by the YAML reader), and the
 * environment variables (values and the messages of bad ones). The protocol itself is tested
 * against a management server by tests/grpc/test_xds.py.
 */
#include <stdlib.h>
#include <string.h>

#include "grpc/xds.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb-c.h"
#include "testutil.h"

typedef Ratelimit__Config__Ratelimit__V3__RateLimitConfig pb_conf;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitDescriptor pb_desc;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitPolicy pb_policy;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitReplace pb_replace;

/* domain "api" (resource "r1"): user (any value) -> path "/a\"b" 10 per MINUTE named "ab"
 * replacing "old", shadow_mode, metadata {tier: "gold", n: 2}; and key ldap unlimited. */
START_TEST(config_as_yaml)
{
    pb_conf c = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_CONFIG__INIT;
    pb_desc user = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT,
            path = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT,
            ldap = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
    pb_policy p1 = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_POLICY__INIT,
              p2 = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_POLICY__INIT;
    pb_replace old = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_REPLACE__INIT, *olds[] = {&old};
    Google__Protobuf__Struct meta = GOOGLE__PROTOBUF__STRUCT__INIT;
    Google__Protobuf__Struct__FieldsEntry f1 = GOOGLE__PROTOBUF__STRUCT__FIELDS_ENTRY__INIT,
                                          f2 = GOOGLE__PROTOBUF__STRUCT__FIELDS_ENTRY__INIT,
                                          *fs[] = {&f1, &f2};
    Google__Protobuf__Value v1 = GOOGLE__PROTOBUF__VALUE__INIT, v2 = GOOGLE__PROTOBUF__VALUE__INIT;
    pb_desc *top[] = {&user, &ldap}, *under[] = {&path};
    c.name = "r1";
    c.domain = "api";
    c.descriptors = top;
    c.n_descriptors = 2;
    user.key = "user";
    user.descriptors = under;
    user.n_descriptors = 1;
    path.key = "path";
    path.value = "/a\"b";
    path.rate_limit = &p1;
    path.shadow_mode = 1;
    path.metadata = &meta;
    p1.unit = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_UNIT__MINUTE;
    p1.requests_per_unit = 10;
    p1.name = "ab";
    old.name = "old";
    p1.replaces = olds;
    p1.n_replaces = 1;
    meta.fields = fs;
    meta.n_fields = 2;
    f1.key = "tier";
    f1.value = &v1;
    v1.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
    v1.string_value = "gold";
    f2.key = "n";
    f2.value = &v2;
    v2.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
    v2.number_value = 2;
    ldap.key = "ldap";
    ldap.rate_limit = &p2;
    p2.unlimited = 1;

    size_t n = ratelimit__config__ratelimit__v3__rate_limit_config__get_packed_size(&c);
    uint8_t *bytes = malloc(n);
    ratelimit__config__ratelimit__v3__rate_limit_config__pack(&c, bytes);
    rld_buf b;
    char name[64];
    rl_err err = {{0}};
    rld_buf_init(&b, NULL, 0);
    ck_assert_int_eq(rld_xds_resource_yaml(bytes, n, &b, name, sizeof name, &err), RL_OK);
    ck_assert_str_eq(name, "r1");
    ck_assert_str_eq(rld_buf_cstr(&b),
                     "{\"domain\": \"api\", \"descriptors\": [{\"key\": \"user\", \"descriptors\": "
                     "[{\"key\": \"path\", \"value\": \"/a\\\"b\", \"rate_limit\": {\"unit\": "
                     "\"MINUTE\", \"requests_per_unit\": 10, \"name\": \"ab\", \"replaces\": "
                     "[{\"name\": \"old\"}]}, \"shadow_mode\": true, \"metadata\": {\"tier\": "
                     "\"gold\", \"n\": 2}}]}, {\"key\": \"ldap\", \"rate_limit\": {\"unlimited\": "
                     "true}}]}\n");
    /* and the reader takes it as the file it is */
    rld_yconf *y = rld_yconf_new();
    ck_assert_int_eq(rld_yaml_parse(y, name, b.p, b.len, &err), RL_OK);
    const rld_ydomain *d = rld_yconf_domain(y, "api", 3);
    ck_assert_ptr_nonnull(d);
    ck_assert_uint_eq(d->nchildren, 2);
    const rld_ydesc *p = &d->children[0].children[0];
    ck_assert_str_eq(p->value, "/a\"b");
    ck_assert_uint_eq(p->limit.requests_per_unit, 10);
    ck_assert_int_eq(p->limit.unit, RLD_UNIT_MINUTE);
    ck_assert_str_eq(p->limit.name, "ab");
    ck_assert_str_eq(p->limit.replaces[0], "old");
    ck_assert_int_eq(p->shadow_mode, 1);
    ck_assert_int_eq(p->metadata->n, 2);
    ck_assert_int_eq(d->children[1].limit.unlimited, 1);
    rld_yconf_free(y);

    /* a limit with requests but no unit: written UNKNOWN, refused by the reader */
    p2.unlimited = 0;
    p2.requests_per_unit = 7;
    n = ratelimit__config__ratelimit__v3__rate_limit_config__get_packed_size(&c);
    bytes = realloc(bytes, n);
    ratelimit__config__ratelimit__v3__rate_limit_config__pack(&c, bytes);
    rld_buf_reset(&b);
    ck_assert_int_eq(rld_xds_resource_yaml(bytes, n, &b, name, sizeof name, &err), RL_OK);
    y = rld_yconf_new();
    ck_assert_int_ne(rld_yaml_parse(y, name, b.p, b.len, &err), RL_OK);
    ck_assert_msg(strstr(err.msg, "r1: descriptors[1].rate_limit.unit") &&
                      strstr(err.msg, "UNKNOWN"),
                  "%s", err.msg);
    rld_yconf_free(y);
    /* bytes that are no such message */
    ck_assert_int_eq(rld_xds_resource_yaml("\xff\xff", 2, &b, name, sizeof name, &err),
                     RL_EINVAL);
    rld_buf_reset(&b);
    free(bytes);
}
END_TEST

static const char *const vars[] = {
    "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    "XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

START_TEST(settings_defaults_and_values)
{
    rld_xds_settings s;
    rl_err err = {{0}};
    clear_env();
    ck_assert_int_eq(rld_xds_settings_from_env(&s, &err), RL_OK);
    ck_assert_str_eq(s.host, "localhost");
    ck_assert_int_eq(s.port, 18000);
    ck_assert_str_eq(s.node_id, "default");
    ck_assert_int_eq(s.use_tls, 0);
    ck_assert_int_eq(s.connect_timeout, 3 * RL_NS_PER_SEC);
    ck_assert_int_eq(s.backoff_initial, 10 * RL_NS_PER_SEC);
    ck_assert_int_eq(s.backoff_max, 60 * RL_NS_PER_SEC);
    ck_assert(s.backoff_random == 0.5);
    ck_assert_int_eq(s.backoff_jitter, 1);
    ck_assert_uint_eq(s.max_msg, 0);
    setenv("CONFIG_GRPC_XDS_SERVER_URL", "[::1]:9", 1);
    setenv("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "1m30.5s", 1);
    setenv("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "2h", 1);
    setenv("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "1.005s", 1);
    setenv("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1024", 1);
    setenv("XDS_CLIENT_BACKOFF_JITTER", "f", 1);
    ck_assert_int_eq(rld_xds_settings_from_env(&s, &err), RL_OK);
    ck_assert_str_eq(s.host, "::1");
    ck_assert_int_eq(s.port, 9);
    ck_assert_int_eq(s.backoff_initial, 90500 * (rl_ns)1000000);
    ck_assert_int_eq(s.backoff_max, 7200 * RL_NS_PER_SEC);
    /* exactly: 1.005 x 1e9 in doubles is 1004999999.99... */
    ck_assert_int_eq(s.connect_timeout, 1005000000);
    ck_assert_uint_eq(s.max_msg, 1024);
    ck_assert_int_eq(s.backoff_jitter, 0);
    clear_env();
}
END_TEST

static const struct {
    const char *var, *value, *msg;
} bad[] = {
    {"CONFIG_GRPC_XDS_SERVER_URL", "localhost", "CONFIG_GRPC_XDS_SERVER_URL: must be host:port, "
                                                "not 'localhost'"},
    {"CONFIG_GRPC_XDS_SERVER_URL", "h:70000", "CONFIG_GRPC_XDS_SERVER_URL: must be host:port, "
                                              "not 'h:70000'"},
    {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: must be "
                                                  "a positive duration such as 500ms, 10s or 1m, "
                                                  "not '10'"},
    {"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL: must not be "
                                              "below XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"},
    {"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "1.5", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR: must be a "
                                                "number from 0 to 1, not '1.5'"},
    {"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "0", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: must be a "
                                              "number of bytes from 1 to 1073741824, not '0'"},
    {"CONFIG_GRPC_XDS_SERVER_USE_TLS", "yes", "CONFIG_GRPC_XDS_SERVER_USE_TLS: must be true or "
                                              "false"},
    {"CONFIG_GRPC_XDS_NODE_METADATA", "a=1,b", "CONFIG_GRPC_XDS_NODE_METADATA: each entry must "
                                               "be key=value, not 'b'"},
    {"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x=1", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_"
                                                         "HEADERS: each entry must be key:value, "
                                                         "not 'x=1'"},
    {"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "c.pem", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT: must be set "
                                                 "with CONFIG_GRPC_XDS_CLIENT_TLS_KEY"},
};

START_TEST(bad_settings)
{
    rld_xds_settings s;
    rl_err err = {{0}};
    clear_env();
    setenv(bad[_i].var, bad[_i].value, 1);
    ck_assert_int_eq(rld_xds_settings_from_env(&s, &err), RL_EINVAL);
    ck_assert_msg(strncmp(err.msg, bad[_i].msg, strlen(bad[_i].msg)) == 0, "%s", err.msg);
    clear_env();
}
END_TEST

static Suite *xds_suite(void)
{
    Suite *s = suite_create("xds");
    TCase *tc = tcase_create("xds");
    tcase_add_test(tc, config_as_yaml);
    tcase_add_test(tc, settings_defaults_and_values);
    tcase_add_loop_test(tc, bad_settings, 0, sizeof bad / sizeof bad[0]);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(xds_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
