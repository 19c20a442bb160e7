/*
 * test_config.c - the configuration loader: bad configurations are refused as a whole with a
 * message naming the path of the bad field; rules are written back as JSON.
 */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/file.h"
#include "redis/store.h"
#include "testutil.h"

#define TB "{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": 1}"

static const struct {
    const char *json, *error;
} bad[] = {
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}, {\"name\": \"team\", \"rules\": "
     "[{\"type\": \"token_bucket\", \"capacity\": -5, \"per_second\": 1}]}]}",
     "levels[1].rules[0].capacity: must be a positive number no larger than 1000000000000"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_buckt\"}]}]}",
     "levels[0].rules[0].type: unknown rule type \"token_buckt\" (known: token_bucket, "
     "sliding_window, sliding_window_counter, fixed_window, gcra, concurrency, deny_list, "
     "adaptive_concurrency, calendar)"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capcity\": "
     "10, \"per_second\": 1}]}]}",
     "levels[0].rules[0].capcity: unknown parameter of token_bucket (known: type, name, unit, "
     "shadow, charge, reserved, capacity, per_second)"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": "
     "10, \"per_second\": 1, \"shadow\": 1}]}]}",
     "levels[0].rules[0].shadow: must be true or false"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": "
     "10, \"per_second\": 1, \"charge\": \"yes\"}]}]}",
     "levels[0].rules[0].charge: must be true or false"},
    {"{\"levels\": [{\"name\": \"user\", \"shadow\": null, \"rules\": [{\"type\": "
     "\"token_bucket\", \"capacity\": 10, \"per_second\": 1}]}]}",
     "levels[0].shadow: must be true or false"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": "
     "10}]}]}",
     "levels[0].rules[0].per_second: required by token_bucket"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": "
     "\"10\", \"per_second\": 1}]}]}",
     "levels[0].rules[0].capacity: must be a number"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\", \"limit\": 5, "
     "\"window\": 0}]}]}",
     "levels[0].rules[0].window: must be a number from 0.001 to 31622400"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}, {\"name\": \"user\", \"rules\": "
     "[" TB "]}]}",
     "levels[1].name: level \"user\" is defined twice"},
    {"{\"levels\": [{\"name\": \"user\", \"tiered\": true}]}",
     "tiers: required by the tiered level"},
    {"{\"levels\": [{\"name\": \"user\", \"tiered\": true}], \"tiers\": {\"free\": [" TB "]}, "
     "\"default_tier\": \"gold\"}",
     "default_tier: unknown tier \"gold\""},
    {"{\"levels\": [{\"name\": \"user\", \"tiered\": true}], \"tiers\": {\"free\": [{\"type\": "
     "\"gcra\", \"per_second\": 0}]}, \"default_tier\": \"free\"}",
     "tiers.free[0].per_second: must be a positive number no larger than 1000000000000"},
    {"{\"levels\": [{\"name\": \"user\", \"tiered\": true}], \"tiers\": {\"free\": [" TB "]}, "
     "\"default_tier\": \"free\", \"quotas\": {\"bob\": \"gold\"}}",
     "quotas.bob: unknown tier \"gold\""},
    {"{\"colour\": 1, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "colour: unknown field (known: listen, threads, tls, max_connections, max_keys, "
     "connection_timeout, store, admin_token, admin_token_file, admin_open, acquire_token, "
     "acquire_token_file, metrics_token, metrics_token_file, quota_file, state_file, "
     "state_interval, reservation_ttl, log, domain, alert_webhook, grpc, plugins, levels, "
     "ratelimit_config, model_headers, dimensions, prices, tiers, default_tier, quotas)"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"deny_list\", \"keys\": [], "
     "\"reserved\": {\"fraction\": 0.2}}]}]}",
     "levels[0].rules[0].reserved: deny_list has no quota to reserve a share of"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": "
     "10, \"per_second\": 1, \"reserved\": {\"fraction\": 1.5}}]}]}",
     "levels[0].rules[0].reserved.fraction: must be a number between 0 and 1"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": "
     "10, \"per_second\": 1, \"unit\": \"tokens\"}]}]}",
     "levels[0].rules[0].unit: must be \"cost\", \"requests\" or \"usd\" (not \"tokens\"); other "
     "units are declared in \"dimensions\""},
    {"{\"dimensions\": [\"in\", \"out\"], \"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": "
     "\"token_bucket\", \"capacity\": 10, \"per_second\": 1, \"unit\": \"tokens\"}]}]}",
     "levels[0].rules[0].unit: must be \"cost\", \"requests\", \"usd\" or a declared dimension "
     "(\"in\", \"out\") (not \"tokens\")"},
    {"{\"dimensions\": [\"in\", \"in\"], \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "dimensions: \"in\" is declared twice"},
    {"{\"dimensions\": [\"usd\"], \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "dimensions: \"usd\" is a unit of its own"},
    {"{\"dimensions\": [\"in\"], \"prices\": {\"by\": \"model\", \"models\": {\"m\": {\"in\": "
     "0.0000001}}}, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "prices.models.m.in: must be a number of dollars from 0 to 1000000 with at most 6 "
     "decimals"},
    {"{\"dimensions\": [\"in\"], \"prices\": {\"by\": \"model\", \"models\": {\"m\": {\"out\": "
     "1}}}, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "prices.models.m.out: not a declared dimension"},
    {"{\"prices\": {\"models\": {}}, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "prices.by: required, the descriptor naming a request's model"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\", \"limit\": "
     "2000000000, \"window\": 60, \"unit\": \"usd\"}]}]}",
     "levels[0].rules[0].limit: must be at most 1000000000 dollars"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [" TB ", " TB "]}]}",
     "levels[0].rules[1].name: \"token_bucket(10, 1/s)\" is used by rule 0 of the same list; "
     "give one of them another \"name\""},
    {"{\"levels\": [{\"name\": \"user\", \"compose\": [\"user\", \"ev ent\"], \"rules\": [" TB
     "]}]}",
     "levels[0].compose[1]: may hold only letters, digits, '_', '-' and '.'"},
    {"{\"levels\": [{\"name\": \"user\", \"default_key\": \"\", \"rules\": [" TB "]}]}",
     "levels[0].default_key: must not be empty"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": []}]}",
     "levels[0].rules: must be a list of 1 to 16 rules"},
    {"{\"levels\": [{\"name\": \"user\"}]}", "levels[0].rules: required (or set \"tiered\": true)"},
    {"{\"levels\": []}", "levels: required, a list of at least one level"},
    {"{\"levels\": [{\"name\": \"a\", \"tiered\": true}, {\"name\": \"b\", \"tiered\": true}], "
     "\"tiers\": {\"free\": [" TB "]}, \"default_tier\": \"free\"}",
     "levels: at most one level may be tiered"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"deny_list\", \"keys\": "
     "[\"\"]}]}]}",
     "levels[0].rules[0].keys[0]: must be 1 to 256 bytes"},
    {"{\"reservation_ttl\": 0, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "reservation_ttl: must be a number of seconds from 0.001 to 86400"},
    {"{\"listen\": {\"port\": 70000}, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "listen.port: must be a whole number from 0 to 65535"},
    {"{\"store\": {\"type\": \"redis\", \"url\": \"http://x\"}, \"levels\": [{\"name\": "
     "\"user\", \"rules\": [" TB "]}]}",
     "store.url: must start with redis:// or rediss://"},
    {"{\"store\": {\"type\": \"redis\", \"functions\": 1}, \"levels\": [{\"name\": "
     "\"user\", \"rules\": [" TB "]}]}",
     "store.functions: must be true or false"},
    {"{\"levels\": [{\"name\": \"user\", \"on_store_error\": \"maybe\", \"rules\": [" TB "]}]}",
     "levels[0].on_store_error: must be \"open\", \"closed\" or \"local\""},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}], \"levels\": []}",
     "line 1, column 109: duplicate object key near '\"levels\"'"},
    {"{\"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]",
     "line 1, column 99: '}' expected near end of file"},
    {"{\"plugins\": [\"/nonexistent/librule.so\"], \"levels\": [{\"name\": \"user\", \"rules\": "
     "[" TB "]}]}",
     "plugins[0]: /nonexistent/librule.so: /nonexistent/librule.so: cannot open shared object "
     "file: No such file or directory"},
    {"{\"store\": {\"type\": \"redis\", \"colour\": 1}, \"levels\": [{\"name\": \"user\", "
     "\"rules\": [" TB "]}]}",
     "store.colour: unknown field (known: type, url, prefix, timeout_ms, pool, "
     "fleet_size, functions, deny_cache, sentinel, cluster, username, password, db, tls)"},
    {"{\"store\": {\"url\": \"redis://x\"}, \"levels\": [{\"name\": \"user\", \"rules\": [" TB
     "]}]}",
     "store.type: must be \"memory\" or \"redis\""},
    {"{\"store\": \"disk\", \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "store: must be \"memory\", \"redis\" or an object with a \"type\""},
    {"{\"store\": 1, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "store: must be \"memory\", \"redis\" or an object with a \"type\""},
    {"{\"store\": {\"type\": \"redis\", \"prefix\": "
     "\"ppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp\"}, \"levels\": "
     "[{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "store.prefix: must be a string of at most 64 characters"},
    {"{\"store\": {\"type\": \"redis\", \"pool\": 0}, \"levels\": [{\"name\": \"user\", \"rules\": "
     "[" TB "]}]}",
     "store.pool: must be a whole number from 1 to 1024"},
    {"{\"listen\": [8080], \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "listen: must be an object {\"address\", \"port\"}"},
    {"{\"listen\": {\"address\": "
     "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}, \"levels\": "
     "[{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "listen.address: must be a string of 1 to 63 characters"},
    {"{\"listen\": {\"host\": \"x\"}, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "listen.host: unknown field (known: address, port)"},
    {"{\"threads\": 257, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "threads: must be a whole number from 0 to 256"},
    {"{\"threads\": 2.5, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "threads: must be a whole number from 0 to 256"},
    {"{\"admin_token\": \"\", \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "admin_token: must be a string of 1 to 1024 characters"},
    {"{\"reservation_ttl\": \"5\", \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "reservation_ttl: must be a number of seconds from 0.001 to 86400"},
    {"{\"reservation_ttl\": 86400.5, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "reservation_ttl: must be a number of seconds from 0.001 to 86400"},
    {"{\"plugins\": \"lib.so\", \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "plugins: must be a list of strings"},
    {"{\"plugins\": [\"\"], \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "plugins[0]: must be a string of 1 to 4096 characters"},
    {"{\"default_tier\": 5, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "default_tier: must be a string"},
    {"{\"levels\": [{\"name\": \"user\", \"colour\": 1, \"rules\": [" TB "]}]}",
     "levels[0].colour: unknown field (known: name, compose, default_key, tiered, rules, "
     "shadow, on_store_error, shards, lease)"},
    {"{\"levels\": [{\"name\": \"g\", \"lease\": {\"slice\": 50}, \"rules\": [" TB "]}]}",
     "levels[0].lease: needs a default_key (a lease is a slice of the level's one shared key)"},
    {"{\"levels\": [{\"name\": \"g\", \"default_key\": \"*\", \"lease\": {\"slice\": 0}, "
     "\"rules\": [" TB "]}]}",
     "levels[0].lease.slice: must be a whole number from 1 to 1000000000"},
    {"{\"levels\": [{\"name\": \"g\", \"default_key\": \"*\", \"lease\": {\"ttl_ms\": 100}, "
     "\"rules\": [" TB "]}]}",
     "levels[0].lease.slice: must be a whole number from 1 to 1000000000"},
    {"{\"levels\": [{\"name\": \"g\", \"default_key\": \"*\", \"shards\": 2, "
     "\"lease\": {\"slice\": 50}, \"rules\": [" TB "]}]}",
     "levels[0].lease: a level is either sharded or leased, not both"},
    {"{\"levels\": [{\"name\": \"g\", \"default_key\": \"*\", \"lease\": {\"slice\": 50}, "
     "\"rules\": [" TB ", {\"type\": \"gcra\", \"per_second\": 10, \"burst\": 5}]}]}",
     "levels[0].rules[1].type: gcra cannot be leased (lease: only token_bucket, fixed_window "
     "rules)"},
    {"{\"levels\": [{\"name\": \"user\", \"shards\": 0, \"rules\": [" TB "]}]}",
     "levels[0].shards: must be a whole number from 1 to 1024"},
    {"{\"levels\": [{\"name\": \"user\", \"tiered\": 1}]}",
     "levels[0].tiered: must be true or false"},
    {"{\"levels\": [{\"rules\": [" TB "]}]}", "levels[0].name: required"},
    {"{\"grpc\": {\"listen\": \"8081\"}, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "grpc.listen: must be ADDRESS:PORT (\"127.0.0.1:8081\", \"[::1]:8081\")"},
    {"{\"grpc\": {\"listen\": \"::1:8081\"}, \"levels\": [{\"name\": \"user\", \"rules\": [" TB
     "]}]}",
     "grpc.listen: must be ADDRESS:PORT with an IPv6 address in brackets (\"[::1]:8081\")"},
    {"{\"grpc\": {\"listen\": \"127.0.0.1:65536\"}, \"levels\": [{\"name\": \"user\", "
     "\"rules\": [" TB "]}]}",
     "grpc.listen: must end in a port from 0 to 65535"},
    {"{\"grpc\": {\"max_message\": 10}, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "grpc.max_message: must be a whole number from 64 to 4194304"},
    {"{\"grpc\": {\"port\": 1}, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "grpc.port: unknown field (known: listen, ratelimit_headers, hits_addend, max_message, tls)"},
    {"{\"domain\": \"\", \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
     "domain: must be a string of 1 to 255 characters"},
};

START_TEST(bad_config_names_the_field)
{
    const char *msg = tu_config_error(bad[_i].json);
    ck_assert_msg(strcmp(msg, bad[_i].error) == 0, "config %d:\n got:  %s\n want: %s", _i, msg,
                  bad[_i].error);
}
END_TEST

START_TEST(settings_and_defaults)
{
    const char *json =
        "{\"listen\": {\"address\": \"0.0.0.0\", \"port\": 9000}, \"threads\": 3, "
        "\"admin_token\": \"s3cret\", \"quota_file\": \"q.json\", \"reservation_ttl\": 12.5, "
        "\"_comment\": \"ignored\", "
        "\"store\": {\"type\": \"redis\", \"url\": \"redis://10.0.0.1:6380/2\", \"timeout_ms\": "
        "20, \"pool\": 4, \"functions\": true}, "
        "\"levels\": [{\"name\": \"user\", \"on_store_error\": \"open\", \"rules\": [" TB "]}, "
        "{\"name\": \"global\", \"default_key\": \"*\", \"on_store_error\": \"local\", "
        "\"shards\": 4, \"rules\": [" TB "]}]}";
    rl_registry *reg = rl_registry_new();
    rld_settings set;
    rl_config *cfg;
    rl_err err;
    ck_assert_int_eq(rld_config_parse(json, strlen(json), reg, &set, &cfg, &err), RL_OK);
    ck_assert_str_eq(set.address, "0.0.0.0");
    ck_assert_int_eq(set.port, 9000);
    ck_assert_int_eq(set.threads, 3);
    ck_assert_str_eq(set.admin_token, "s3cret");
    ck_assert_str_eq(set.quota_file, "q.json");
    ck_assert_int_eq(set.store, RLD_STORE_REDIS);
    ck_assert_str_eq(set.redis_url, "redis://10.0.0.1:6380/2");
    ck_assert_str_eq(set.redis_prefix, "rl:");
    ck_assert_int_eq(set.redis_timeout_ms, 20);
    ck_assert_int_eq(set.redis_pool, 4);
    ck_assert_int_eq(set.redis_functions, 1);
    ck_assert_int_eq(set.on_error[0], RLD_ON_ERROR_OPEN);
    ck_assert_int_eq(set.on_error[1], RLD_ON_ERROR_LOCAL);
    ck_assert_int_eq(set.shards[0], 1);
    ck_assert_int_eq(set.shards[1], 4);
    ck_assert_int_eq(cfg->reservation_ttl, S(12.5));
    ck_assert_str_eq(cfg->levels[1].default_key, "*");
    rld_settings_clear(&set);
    rl_config_free(cfg);
    rl_registry_free(reg);
}
END_TEST

START_TEST(defaults_from_the_table)
{
    /* the defaults the settings tables list, for a configuration that sets none of them */
    const char *json = "{\"store\": \"redis\", \"levels\": [{\"name\": \"user\", "
                       "\"rules\": [" TB "]}]}";
    rl_registry *reg = rl_registry_new();
    rld_settings set;
    rl_config *cfg;
    rl_err err;
    ck_assert_int_eq(rld_config_parse(json, strlen(json), reg, &set, &cfg, &err), RL_OK);
    ck_assert_str_eq(set.address, "127.0.0.1");
    ck_assert_int_eq(set.port, 8080);
    ck_assert_int_eq(set.threads, 0);
    ck_assert_ptr_null(set.admin_token);
    ck_assert_ptr_null(set.quota_file);
    ck_assert_ptr_null(set.state_file);
    ck_assert_int_eq(set.state_interval, 60);
    ck_assert_int_eq(set.store, RLD_STORE_REDIS);
    ck_assert_ptr_null(set.redis_url); /* the store's default, below */
    rld_redis_addr addr;
    ck_assert_int_eq(rld_redis_store_addr(&set, &addr, &err), RL_OK);
    ck_assert_str_eq(addr.host, "127.0.0.1");
    ck_assert_int_eq(addr.port, 6379);
    ck_assert_int_eq(addr.db, 0);
    ck_assert_uint_eq(addr.sentinel.n, 0);
    ck_assert_str_eq(set.redis_prefix, "rl:");
    ck_assert_int_eq(set.redis_timeout_ms, 50);
    ck_assert_int_eq(set.redis_pool, 2);
    ck_assert_int_eq(set.redis_functions, 0);
    ck_assert_int_eq(set.fleet_size, 0);
    ck_assert_uint_eq(set.nplugins, 0);
    for (size_t i = 0; i < RL_MAX_LEVELS; i++) {
        ck_assert_int_eq(set.on_error[i], RLD_ON_ERROR_OPEN);
        ck_assert_uint_eq(set.shards[i], 1);
    }
    ck_assert_int_eq(cfg->reservation_ttl, 300 * RL_NS_PER_SEC);
    rld_settings_clear(&set);
    rl_config_free(cfg);
    rl_registry_free(reg);
}
END_TEST

START_TEST(an_empty_cluster_is_refused)
{
    /* "cluster": [] is a list given empty, not a list left out: the store refuses it rather
     * than run on the default URL's one node; a list of one node is a cluster */
    static const struct {
        const char *store, *msg;
    } cases[] = {
        {"{\"type\": \"redis\", \"cluster\": []}", "store.cluster: must list 1 to 64 nodes"},
        {"{\"type\": \"redis\", \"cluster\": [], \"password\": \"p\"}",
         "store.cluster: must list 1 to 64 nodes"},
        {"{\"type\": \"redis\", \"cluster\": [\"127.0.0.1:7000\"]}", NULL},
        {"{\"type\": \"redis\"}", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"store\": %s, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
                 cases[i].store);
        rl_registry *reg = rl_registry_new();
        rld_settings set;
        rl_config *cfg;
        rl_err err = {0};
        rld_redis_addr addr;
        ck_assert_int_eq(rld_config_parse(json, strlen(json), reg, &set, &cfg, &err), RL_OK);
        int rc = rld_redis_store_addr(&set, &addr, &err);
        if (cases[i].msg) {
            ck_assert_msg(rc == RL_EINVAL, "case %zu: %d", i, rc);
            ck_assert_str_eq(err.msg, cases[i].msg);
        } else {
            ck_assert_msg(rc == RL_OK, "case %zu: %s", i, err.msg);
            ck_assert_int_eq(addr.port, i == 2 ? 7000 : 6379);
        }
        rld_settings_clear(&set);
        rl_config_free(cfg);
        rl_registry_free(reg);
    }
}
END_TEST

/* Whether the store speaks TLS and with which files: store.tls, else envoyproxy/ratelimit's
 * REDIS_TLS_* variables; a rediss:// URL turns it on either way. */
START_TEST(redis_tls_from_settings_and_variables)
{
    static const struct {
        const char *store;
        const char *env[3][2]; /* REDIS_TLS, REDIS_TLS_CACERT, ..._SKIP_HOSTNAME_VERIFICATION */
        int rc, on, skip;
        const char *ca, *ca_name, *msg;
    } cases[] = {
        {"{\"type\": \"redis\"}", {{0}}, RL_OK, 0, 0, NULL, "REDIS_TLS_CACERT", NULL},
        {"{\"type\": \"redis\", \"url\": \"rediss://u:p@10.0.0.5:6380/2\"}", {{0}}, RL_OK, 1, 0,
         NULL, "REDIS_TLS_CACERT", NULL},
        {"{\"type\": \"redis\", \"tls\": {\"ca\": \"ca.pem\", \"skip_hostname_verification\": "
         "true}}",
         {{0}}, RL_OK, 1, 1, "ca.pem", "store.tls.ca", NULL},
        {"{\"type\": \"redis\"}",
         {{"REDIS_TLS", "1"}, {"REDIS_TLS_CACERT", "/x.pem"},
          {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "True"}},
         RL_OK, 1, 1, "/x.pem", "REDIS_TLS_CACERT", NULL},
        {"{\"type\": \"redis\", \"tls\": {\"enabled\": false}}",
         {{"REDIS_TLS", "true"}, {"REDIS_TLS_CACERT", "/x.pem"}}, RL_OK, 0, 0, NULL,
         "store.tls.ca", NULL},
        {"{\"type\": \"redis\", \"url\": \"rediss://10.0.0.5\"}", {{"REDIS_TLS", "false"}}, RL_OK,
         1, 0, NULL, "REDIS_TLS_CACERT", NULL},
        {"{\"type\": \"redis\", \"url\": \"rediss://10.0.0.5\", \"tls\": {\"enabled\": false}}",
         {{0}}, RL_EINVAL, 0, 0, NULL, NULL,
         "store.tls.enabled: false, but store.url starts with rediss://"},
        {"{\"type\": \"redis\"}", {{"REDIS_TLS", "on"}}, RL_EINVAL, 0, 0, NULL, NULL,
         "REDIS_TLS: must be true or false (1, t, true, TRUE, True, 0, f, false, FALSE, False)"},
    };
    static const char *const vars[] = {"REDIS_TLS", "REDIS_TLS_CACERT",
                                       "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"store\": %s, \"levels\": [{\"name\": \"user\", \"rules\": [" TB "]}]}",
                 cases[i].store);
        for (size_t v = 0; v < 3; v++)
            unsetenv(vars[v]);
        for (size_t v = 0; v < 3 && cases[i].env[v][0]; v++)
            setenv(cases[i].env[v][0], cases[i].env[v][1], 1);
        rl_registry *reg = rl_registry_new();
        rld_settings set;
        rl_config *cfg;
        rl_err err = {0};
        rld_redis_addr addr;
        rld_net_client_tls_files f;
        int on = -1;
        ck_assert_int_eq(rld_config_parse(json, strlen(json), reg, &set, &cfg, &err), RL_OK);
        ck_assert_int_eq(rld_redis_store_addr(&set, &addr, &err), RL_OK);
        int rc = rld_redis_store_tls(&set, &addr, &f, &on, &err);
        ck_assert_msg(rc == cases[i].rc, "case %zu: %d %s", i, rc, err.msg);
        if (rc != RL_OK) {
            ck_assert_str_eq(err.msg, cases[i].msg);
        } else {
            ck_assert_msg(on == cases[i].on, "case %zu: on %d", i, on);
            ck_assert_int_eq(f.skip_hostname, cases[i].skip);
            ck_assert_str_eq(f.ca_name, cases[i].ca_name);
            if (cases[i].ca)
                ck_assert_str_eq(f.ca, cases[i].ca);
            else
                ck_assert_ptr_null(f.ca);
        }
        if (i == 1) { /* rediss:// is redis:// with TLS */
            ck_assert_str_eq(addr.host, "10.0.0.5");
            ck_assert_int_eq(addr.port, 6380);
            ck_assert_int_eq(addr.db, 2);
            ck_assert_str_eq(addr.user, "u");
            ck_assert_str_eq(addr.pass, "p");
            ck_assert_int_eq(addr.tls_url, 1);
        }
        rld_settings_clear(&set);
        rl_config_free(cfg);
        rl_registry_free(reg);
    }
    for (size_t v = 0; v < 3; v++)
        unsetenv(vars[v]);
}
END_TEST

START_TEST(doc_tables_follow_the_table)
{
    /* docs/configuration.md's settings tables are generated (make settings-doc): no drift */
    char *text = rld_read_file("docs/configuration.md", NULL);
    ck_assert_msg(text, "docs/configuration.md: run from the repository's top");
    ck_assert_ptr_nonnull(strstr(text, "<!-- settings: root -->\n| member |"));
    ck_assert_ptr_nonnull(strstr(text, "| `fleet_size` | whole number, 1 to 100000 |"));
    rl_err err;
    char *made = rld_settings_doc_update(text, &err);
    ck_assert_msg(made, "%s", err.msg);
    ck_assert_msg(strcmp(made, text) == 0,
                  "docs/configuration.md differs from the settings table: run make settings-doc");
    free(made);
    free(text);
    /* a marker naming no table, or without its end, is an error rather than skipped */
    ck_assert_ptr_null(rld_settings_doc_update("x\n<!-- settings: nope -->\n", &err));
    ck_assert_ptr_nonnull(strstr(err.msg, "names no settings table"));
    ck_assert_ptr_null(rld_settings_doc_update("x\n<!-- settings: store -->\n| a |\n", &err));
    ck_assert_ptr_nonnull(strstr(err.msg, "has no"));
    /* and the text between the markers is what is replaced */
    char *one = rld_settings_doc_update("a\n<!-- settings: listen -->\nold\n"
                                        "<!-- end of settings -->\nb\n",
                                        &err);
    ck_assert_str_eq(one, "a\n<!-- settings: listen -->\n| member | value | default | meaning |\n"
                          "| --- | --- | --- | --- |\n| `address` | string, 1 to 63 characters | "
                          "`\"127.0.0.1\"` | IPv4 or IPv6 literal to listen on |\n| `port` | whole "
                          "number, 0 to 65535 | 8080 | TCP port; 0 takes a free one (the daemon "
                          "prints it) |\n<!-- end of settings -->\nb\n");
    free(one);
}
END_TEST

START_TEST(rules_written_back)
{
    rl_limiter *lim = tu_limiter(
        "{\"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", "
        "\"capacity\": 100, \"per_second\": 0.5, \"reserved\": {\"fraction\": 0.25, "
        "\"min_priority\": 2}}, {\"type\": \"deny_list\", \"keys\": [\"b\", \"a\", \"b\"]}]}]}");
    json_t *j = rld_rules_to_json(rl_limiter_config(lim)->levels[0].rules, NULL);
    char *text = json_dumps(j, RLD_JSON_FLAGS | JSON_SORT_KEYS);
    ck_assert_str_eq(text,
                     "[{\"capacity\":100,\"name\":\"token_bucket(100, 0.5/s)\",\"per_second\":0.5,"
                     "\"reserved\":{\"fraction\":0.25,\"min_priority\":2},\"type\":"
                     "\"token_bucket\",\"unit\":\"cost\"},{\"keys\":[\"a\",\"b\"],\"name\":"
                     "\"deny_list(2 keys)\",\"type\":\"deny_list\",\"unit\":\"requests\"}]");
    /* and what is written reads back to the same rules */
    rl_rules *again;
    rl_err err;
    ck_assert_int_eq(rld_rules_from_json(j, rl_limiter_config(lim)->reg, NULL, &again, &err), RL_OK);
    json_t *j2 = rld_rules_to_json(again, NULL);
    char *text2 = json_dumps(j2, RLD_JSON_FLAGS | JSON_SORT_KEYS);
    ck_assert_str_eq(text, text2);
    free(text);
    free(text2);
    json_decref(j);
    json_decref(j2);
    rl_rules_unref(again);
    tu_free(lim);
}
END_TEST

START_TEST(shipped_configs_load)
{
    /* every configuration in config/ and config/examples/ (run from the repository's top) */
    glob_t g;
    int rc = glob("config/*.json", 0, NULL, &g);
    ck_assert_msg(rc == 0, "no config/*.json: run from the repository's top");
    ck_assert_int_eq(glob("config/examples/*.json", GLOB_APPEND, NULL, &g), 0);
    int found_default = 0, found_container = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *f = g.gl_pathv[i];
        rld_settings set;
        rl_config *cfg;
        rl_err err;
        rl_registry *reg = rl_registry_new();
        ck_assert_msg(rld_config_load(f, reg, &set, &cfg, &err) == RL_OK, "%s: %s", f, err.msg);
        found_default |= strcmp(f, "config/default.json") == 0;
        found_container |= strcmp(f, "config/container.json") == 0;
        rld_settings_clear(&set);
        rl_config_free(cfg);
        rl_registry_free(reg);
    }
    ck_assert(found_default && found_container);
    ck_assert_uint_ge(g.gl_pathc, 6);
    globfree(&g);
}
END_TEST

Suite *config_suite(void);
Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_loop_test(tc, bad_config_names_the_field, 0, (int)(sizeof bad / sizeof bad[0]));
    tcase_add_test(tc, settings_and_defaults);
    tcase_add_test(tc, defaults_from_the_table);
    tcase_add_test(tc, doc_tables_follow_the_table);
    tcase_add_test(tc, an_empty_cluster_is_refused);
    tcase_add_test(tc, redis_tls_from_settings_and_variables);
    tcase_add_test(tc, rules_written_back);
    tcase_add_test(tc, shipped_configs_load);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(config_suite()) ? 1 : 0;
}
