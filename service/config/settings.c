/*
 * settings.c - the table of the daemon's settings, their defaults, and the docs' tables made
 * from it. How to add a setting: settings.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/settings.h"

#define OFF(field) offsetof(rld_settings, field)
#define COUNT(a) (sizeof(a) / sizeof(a)[0])

_Static_assert(sizeof(rld_on_error) == sizeof(int), "RLD_SET_ENUM fields are int-sized");
_Static_assert(sizeof(rld_store_type) == sizeof(int), "RLD_SET_ENUM fields are int-sized");
_Static_assert(sizeof(rld_log_level) == sizeof(int), "RLD_SET_ENUM fields are int-sized");
_Static_assert(sizeof(rld_log_format) == sizeof(int), "RLD_SET_ENUM fields are int-sized");

static const char *redis_url_check(const char *s)
{
    return strncmp(s, "redis://", 8) == 0 || strncmp(s, "rediss://", 9) == 0
               ? NULL
               : "must start with redis:// or rediss://";
}

const char *rld_listen_parse(const char *s, char *addr, size_t len, int *port)
{
    const char *colon = strrchr(s, ':'), *a = s, *ae = colon;
    if (!colon || colon[1] == '\0')
        return "must be ADDRESS:PORT (\"127.0.0.1:8081\", \"[::1]:8081\")";
    if (*s == '[') {
        if (colon == s || colon[-1] != ']')
            return "must be ADDRESS:PORT with an IPv6 address in brackets (\"[::1]:8081\")";
        a = s + 1;
        ae = colon - 1;
    } else if (memchr(s, ':', (size_t)(colon - s))) {
        return "must be ADDRESS:PORT with an IPv6 address in brackets (\"[::1]:8081\")";
    }
    long p = 0;
    for (const char *d = colon + 1; *d; d++) {
        if (*d < '0' || *d > '9' || (p = p * 10 + (*d - '0')) > 65535)
            return "must end in a port from 0 to 65535";
    }
    if (ae <= a || (size_t)(ae - a) >= len)
        return "must be ADDRESS:PORT (\"127.0.0.1:8081\", \"[::1]:8081\")";
    memcpy(addr, a, (size_t)(ae - a));
    addr[ae - a] = '\0';
    *port = (int)p;
    return NULL;
}

/* "host:port" of a server to connect to: as a listen address, but port 0 means nothing */
static const char *hostport_check(const char *s)
{
    char addr[256];
    int port;
    const char *why = rld_listen_parse(s, addr, sizeof addr, &port);
    return why ? why : port == 0 ? "must end in a port from 1 to 65535" : NULL;
}

static const char *grpc_listen_check(const char *s)
{
    char addr[64];
    int port;
    return rld_listen_parse(s, addr, sizeof addr, &port);
}

static const char *const store_types[] = {"memory", "redis", NULL};
static const char *const on_error_modes[] = {"open", "closed", "local", NULL};
static const char *const log_levels[] = {"error", "warn", "info", NULL};
static const char *const log_formats[] = {"text", "json", NULL};
static const char *const model_header_sets[] = {"none", "openai", "anthropic", "both", NULL};

/* clang-format off: one setting a row */
static const rld_setting listen_rows[] = {
    {.name = "address",
     .kind = RLD_SET_CHARS,
     .offset = OFF(address),
     .min = 1,
     .max = 63,
     .def_str = "127.0.0.1",
     .help = "IPv4 or IPv6 literal to listen on"},
    {.name = "port",
     .kind = RLD_SET_INT,
     .offset = OFF(port),
     .min = 0,
     .max = 65535,
     .def = 8080,
     .help = "TCP port; 0 takes a free one (the daemon prints it)"},
};

static const rld_setting store_rows[] = {
    {.name = "type",
     .kind = RLD_SET_ENUM,
     .offset = OFF(store),
     .choices = store_types,
     .required = 1,
     .help = "`\"memory\"`: state in this process; `\"redis\"`: shared by every instance "
             "on the same Redis"},
    {.name = "url",
     .kind = RLD_SET_STRING,
     .offset = OFF(redis_url),
     .min = 1,
     .max = 1024,
     .doc_default = "`\"redis://127.0.0.1:6379/0\"`",
     .check = redis_url_check,
     .help = "`redis://[[user]:password@]host[:port][/db]`, or `rediss://...` for Redis over "
             "TLS (see `tls`). Give a numeric address: resolving a name is not bounded by "
             "`timeout_ms`"},
    {.name = "prefix",
     .kind = RLD_SET_STRING,
     .offset = OFF(redis_prefix),
     .min = 0,
     .max = 64,
     .def_str = "rl:",
     .help = "put in front of every key. Instances that share limits use the same one; another "
             "prefix keeps another fleet apart on the same Redis"},
    {.name = "timeout_ms",
     .kind = RLD_SET_INT,
     .offset = OFF(redis_timeout_ms),
     .min = 1,
     .max = 60000,
     .def = 50,
     .help = "the longest a request waits on Redis: waiting for its turn on a shared "
             "connection, connecting and the call share it"},
    {.name = "pool",
     .kind = RLD_SET_INT,
     .offset = OFF(redis_pool),
     .min = 1,
     .max = 1024,
     .def = 2,
     .help = "connections to Redis per instance, shared: the calls of concurrent requests go "
             "back to back on one"},
    {.name = "fleet_size",
     .kind = RLD_SET_INT,
     .offset = OFF(fleet_size),
     .min = 1,
     .max = 100000,
     .doc_default = "the live instances",
     .help = "what the `local` mode divides the quotas by; by default the number of live "
             "instances, counted by a heartbeat each instance keeps in Redis"},
    {.name = "functions",
     .kind = RLD_SET_BOOL,
     .offset = OFF(redis_functions),
     .def = 0,
     .help = "`false`: the scripts are loaded once and called with `EVALSHA`. `true` (Redis 7): "
             "they are loaded as one Redis Functions library and called with `FCALL`, which "
             "spares Redis about a fifth of each decision (the library is set up once, not on "
             "every call) but leaves the library in Redis's data set; where Redis refuses "
             "Functions the store goes back to `EVALSHA` by itself. See "
             "[redis.md](redis.md)"},
    {.name = "deny_cache",
     .kind = RLD_SET_BOOL,
     .offset = OFF(redis_deny_cache),
     .def = 1,
     .help = "`true`: a denial Redis gave is answered again by this instance, without Redis, "
             "until its `retry_after` has passed, unless capacity is given back meanwhile (a "
             "refund, a release, a quota change, announced to every instance); `false`: every "
             "decision goes to Redis. See [redis.md](redis.md#the-cache-of-denials)"},
    {.name = "sentinel",
     .kind = RLD_SET_OBJECT,
     .sub = &rld_settings_sentinel,
     .doc_value = "object",
     .help = "Redis Sentinel instead of `url`: `{\"nodes\", \"master\"}`, see the `sentinel` "
             "table below. The store uses the primary the sentinels name and follows a failover "
             "by itself"},
    {.name = "cluster",
     .kind = RLD_SET_STRINGS,
     .offset = OFF(cluster),
     .count_offset = OFF(ncluster),
     .min = 3,
     .max = 300,
     .check = hostport_check,
     .doc_value = "list of 1 to 64 `\"host:port\"`",
     .help = "Redis Cluster instead of `url`: seed nodes (numeric addresses) to read the slot "
             "map from. Each (level, key)'s states share a slot; a request whose levels lie in "
             "several slots is decided by one script per slot in level order, what earlier ones "
             "took given back when a later one denies. See "
             "[redis.md](redis.md#redis-cluster)"},
    {.name = "username",
     .kind = RLD_SET_STRING,
     .offset = OFF(redis_username),
     .min = 1,
     .max = 127,
     .help = "with `sentinel` or `cluster`: the ACL user on the data nodes (with `url`, it is in "
             "the URL)"},
    {.name = "password",
     .kind = RLD_SET_STRING,
     .offset = OFF(redis_password),
     .min = 1,
     .max = 255,
     .help = "with `sentinel` or `cluster`: the data nodes' password (with `url`, it is in the "
             "URL)"},
    {.name = "db",
     .kind = RLD_SET_INT,
     .offset = OFF(redis_db),
     .min = 0,
     .max = 1000000,
     .def = 0,
     .help = "with `sentinel`: the database number (with `url`, it is in the URL)"},
    {.name = "tls",
     .kind = RLD_SET_OBJECT,
     .sub = &rld_settings_store_tls,
     .doc_value = "object",
     .help = "`{\"ca\", \"cert\", \"key\", \"skip_hostname_verification\", \"enabled\"}`: "
             "every connection to Redis (the data nodes, a cluster's nodes, the sentinels) over "
             "TLS; see the `store.tls` table below and [Redis over TLS](redis.md#redis-over-tls). "
             "Without it, envoyproxy/ratelimit's `REDIS_TLS` and `REDIS_TLS_*` variables apply"},
};

static const rld_setting store_tls_rows[] = {
    {.name = "enabled",
     .kind = RLD_SET_BOOL,
     .offset = OFF(redis_tls),
     .def = -1,
     .doc_default = "`true` (`tls` given)",
     .help = "`false` turns TLS off (even with `REDIS_TLS`); a `rediss://` URL turns it on "
             "without `store.tls`"},
    {.name = "ca",
     .kind = RLD_SET_STRING,
     .offset = OFF(redis_tls_ca),
     .min = 1,
     .max = 4096,
     .doc_default = "the system's CAs",
     .help = "PEM file of the CAs Redis's certificate must be signed by"},
    {.name = "cert",
     .kind = RLD_SET_STRING,
     .offset = OFF(redis_tls_cert),
     .min = 1,
     .max = 4096,
     .help = "PEM file of a client certificate, for a Redis that asks for one "
             "(`tls-auth-clients`)"},
    {.name = "key",
     .kind = RLD_SET_STRING,
     .offset = OFF(redis_tls_key),
     .min = 1,
     .max = 4096,
     .help = "PEM file of its private key (unencrypted)"},
    {.name = "skip_hostname_verification",
     .kind = RLD_SET_BOOL,
     .offset = OFF(redis_tls_skip_hostname),
     .def = -1,
     .doc_default = "`false`",
     .help = "`true`: the certificate need not name the host connected to (the URL's, a "
             "cluster node's or the primary's address); it must still be signed by a trusted CA"},
};

static const rld_setting sentinel_rows[] = {
    {.name = "nodes",
     .kind = RLD_SET_STRINGS,
     .offset = OFF(sentinels),
     .count_offset = OFF(nsentinels),
     .min = 3,
     .max = 300,
     .required = 1,
     .check = hostport_check,
     .doc_value = "list of 1 to 16 `\"host:port\"`",
     .help = "the sentinels to ask where the primary is, in turn (numeric addresses)"},
    {.name = "master",
     .kind = RLD_SET_STRING,
     .offset = OFF(sentinel_master),
     .min = 1,
     .max = 127,
     .required = 1,
     .help = "the name the sentinels monitor the primary by (`sentinel monitor <name> ...`)"},
    {.name = "username",
     .kind = RLD_SET_STRING,
     .offset = OFF(sentinel_username),
     .min = 1,
     .max = 127,
     .help = "the sentinels' ACL user, when they need one"},
    {.name = "password",
     .kind = RLD_SET_STRING,
     .offset = OFF(sentinel_password),
     .min = 1,
     .max = 255,
     .help = "the sentinels' password (`requirepass` in sentinel.conf), when they need one"},
};

static const rld_setting log_rows[] = {
    {.name = "level",
     .kind = RLD_SET_ENUM,
     .offset = OFF(log_level),
     .choices = log_levels,
     .def = 2,
     .help = "the least severe lines written to stderr: `\"error\"`, `\"warn\"` (with access "
             "lines: denials and other 4xx answers) or `\"info\"` (starts, stops, every access "
             "line)"},
    {.name = "format",
     .kind = RLD_SET_ENUM,
     .offset = OFF(log_format),
     .choices = log_formats,
     .def = 0,
     .help = "`\"text\"`: `<time> ratelimitd[<pid>]: <message>`; `\"json\"`: one object a line "
             "(`time`, `level`, `pid`, `msg` and an access line's fields)"},
    {.name = "access",
     .kind = RLD_SET_BOOL,
     .offset = OFF(log_access),
     .def = 0,
     .help = "one line per request: method, path (without the query), status, duration, client "
             "address, and for a denial the rule that blocked it and its key; never a header or "
             "a token. See [Access logs](operations.md#access-logs)"},
};

static const rld_setting tls_rows[] = {
    {.name = "cert",
     .kind = RLD_SET_STRING,
     .offset = OFF(tls_cert),
     .min = 1,
     .max = 4096,
     .help = "PEM file of the server's certificate (with its chain), relative to the working "
             "directory"},
    {.name = "key",
     .kind = RLD_SET_STRING,
     .offset = OFF(tls_key),
     .min = 1,
     .max = 4096,
     .help = "PEM file of its private key (unencrypted)"},
};

static const rld_setting grpc_rows[] = {
    {.name = "listen",
     .kind = RLD_SET_STRING,
     .offset = OFF(grpc_listen),
     .min = 3,
     .max = 80,
     .check = grpc_listen_check,
     .doc_value = "`\"ADDRESS:PORT\"`",
     .help = "serve Envoy's rate limit service over gRPC here (`\"127.0.0.1:8081\"`, "
             "`\"[::1]:8081\"`; port 0 takes a free one); `--grpc-port` overrides the port. See "
             "[Behind Envoy](envoy.md#behind-envoy)"},
    {.name = "ratelimit_headers",
     .kind = RLD_SET_BOOL,
     .offset = OFF(grpc_ratelimit_headers),
     .def = 0,
     .help = "ShouldRateLimit answers carry the IETF `RateLimit-Policy` and `RateLimit` headers "
             "in `response_headers_to_add` (Envoy adds them to the response)"},
    {.name = "hits_addend",
     .kind = RLD_SET_STRING,
     .offset = OFF(grpc_hits_addend),
     .min = 1,
     .max = 64,
     .doc_value = "dimension",
     .help = "with a native configuration, a request's `hits_addend` is its usage in this "
             "declared dimension (its cost is then 1) instead of its cost; see "
             "[Model usage](usage.md#over-grpc)"},
    {.name = "max_message",
     .kind = RLD_SET_INT,
     .offset = OFF(grpc_max_message),
     .min = 64,
     .max = 4194304,
     .def = 65536,
     .help = "bytes of the largest request message; a larger one is answered "
             "`RESOURCE_EXHAUSTED`"},
    {.name = "tls",
     .kind = RLD_SET_OBJECT,
     .sub = &rld_settings_grpc_tls,
     .doc_value = "object",
     .help = "`{\"cert\", \"key\", \"client_ca\", \"client_san\"}`: serve gRPC over TLS only "
             "(ALPN `h2`), with client certificates (mTLS) when `client_ca` is given; see the "
             "`grpc.tls` table below and [TLS and mTLS on the gRPC "
             "port](envoy.md#tls-and-mtls-on-the-grpc-port)"},
};

static const char *alert_url_check(const char *s)
{
    return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0
               ? NULL
               : "must start with http:// or https://";
}

static const rld_setting alert_rows[] = {
    {.name = "url",
     .kind = RLD_SET_STRING,
     .offset = OFF(alert_url),
     .min = 8,
     .max = 2048,
     .required = 1,
     .check = alert_url_check,
     .help = "where each alert is POSTed as JSON (see [Alerts](budgets.md#alerts-before-a-"
             "budget-runs-out))"},
    {.name = "token_file",
     .kind = RLD_SET_STRING,
     .offset = OFF(alert_token_file),
     .min = 1,
     .max = 4096,
     .help = "a file holding a token sent as `Authorization: Bearer <token>` (one trailing "
             "newline is dropped); none: no `Authorization`"},
    {.name = "queue",
     .kind = RLD_SET_INT,
     .offset = OFF(alert_queue),
     .min = 1,
     .max = 1000000,
     .def = 1024,
     .help = "alerts waiting to be sent at most; past it a new one is dropped and counted "
             "(`ratelimit_alerts_total{result=\"dropped\"}`)"},
    {.name = "attempts",
     .kind = RLD_SET_INT,
     .offset = OFF(alert_attempts),
     .min = 1,
     .max = 100,
     .def = 10,
     .help = "tries of one alert (the waits between them double from 0.1 s up to 10 s) before "
             "it is counted as failed and the next is sent"},
    {.name = "timeout_ms",
     .kind = RLD_SET_INT,
     .offset = OFF(alert_timeout_ms),
     .min = 10,
     .max = 600000,
     .def = 5000,
     .help = "milliseconds one try may take, connecting included"},
};

static const rld_setting grpc_tls_rows[] = {
    {.name = "cert",
     .kind = RLD_SET_STRING,
     .offset = OFF(grpc_tls_cert),
     .min = 1,
     .max = 4096,
     .help = "PEM file of the gRPC port's certificate (with its chain), relative to the working "
             "directory; read again at every reload (SIGHUP): new connections get the new one, "
             "open ones keep theirs"},
    {.name = "key",
     .kind = RLD_SET_STRING,
     .offset = OFF(grpc_tls_key),
     .min = 1,
     .max = 4096,
     .help = "PEM file of its private key (unencrypted)"},
    {.name = "client_ca",
     .kind = RLD_SET_STRING,
     .offset = OFF(grpc_tls_client_ca),
     .min = 1,
     .max = 4096,
     .help = "mTLS: PEM file of the CAs a client certificate must be signed by; a client without "
             "a certificate, or with one they did not sign, fails the handshake"},
    {.name = "client_san",
     .kind = RLD_SET_STRING,
     .offset = OFF(grpc_tls_client_san),
     .min = 1,
     .max = 253,
     .help = "with `client_ca`: a DNS name the client certificate's subjectAltName must hold, "
             "exactly (envoyproxy/ratelimit's `GRPC_CLIENT_TLS_SAN`)"},
};

static const rld_setting lease_rows[] = {
    {.name = "slice",
     .kind = RLD_SET_INT,
     .offset = OFF(lease_slice),
     .min = 1,
     .max = 1000000000,
     .required = 1,
     .help = "the amount (requests, or units of cost) a lease takes from the shared bucket at "
             "once and admits from locally"},
    {.name = "ttl_ms",
     .kind = RLD_SET_INT,
     .offset = OFF(lease_ttl_ms),
     .min = 10,
     .max = 60000,
     .def = 1000,
     .help = "milliseconds a lease is held at most before what is left of it goes back to the "
             "bucket (a fixed window's lease ends with its window too)"},
};

static const rld_setting_table lease_table = {"level.lease", lease_rows,
                                              sizeof lease_rows / sizeof lease_rows[0], NULL, 1};

static const rld_setting level_rows[] = {
    {.name = "name",
     .kind = RLD_SET_CONFIG,
     .required = 1,
     .doc_value = "string",
     .help = "letters, digits, `_`, `-`, `.`; the level's key is the request's descriptor of "
             "that name"},
    {.name = "compose",
     .kind = RLD_SET_CONFIG,
     .doc_value = "list of 1 to 8 names",
     .help = "the key joins these descriptors with `:` instead (`[\"user\", \"event\"]`: "
             "`alice:login`)"},
    {.name = "default_key",
     .kind = RLD_SET_CONFIG,
     .doc_value = "string",
     .help = "the key when the descriptor is absent (`\"*\"` for a global limit); without it "
             "the level is skipped then"},
    {.name = "tiered",
     .kind = RLD_SET_CONFIG,
     .doc_value = "`true` / `false`",
     .help = "take the rules from the key's tier or custom quota (at most one tiered level)"},
    {.name = "rules",
     .kind = RLD_SET_CONFIG,
     .doc_value = "list of 1 to 16 rules",
     .help = "the level's rules, unless it is tiered"},
    {.name = "shadow",
     .kind = RLD_SET_CONFIG,
     .doc_value = "`true` / `false`",
     .help = "every rule of the level is a shadow rule: evaluated and its would-be denials "
             "reported, never denying (see the rule option `shadow`)"},
    {.name = "on_store_error",
     .kind = RLD_SET_ENUM,
     .offset = OFF(on_error),
     .choices = on_error_modes,
     .help = "with the Redis store: what the level does while Redis fails, see "
             "[redis.md](redis.md#what-each-on_store_error-mode-does)"},
    {.name = "shards",
     .kind = RLD_SET_INT,
     .offset = OFF(shards),
     .min = 1,
     .max = 1024,
     .def = 1,
     .help = "with the Redis store: split each key's state into this many keys, see "
             "[redis.md](redis.md#shards-a-hot-global-key)"},
    {.name = "lease",
     .kind = RLD_SET_OBJECT,
     .sub = &lease_table,
     .doc_value = "object",
     .help = "with the Redis store, on a level with `default_key` whose rules are token buckets "
             "or fixed windows: `{\"slice\", \"ttl_ms\"}`, admit from slices of the shared "
             "bucket leased to this instance, see the `level.lease` table below and "
             "[redis.md](redis.md#hot-keys-leases)"},
};

static const rld_setting root_rows[] = {
    {.name = "listen",
     .kind = RLD_SET_OBJECT,
     .sub = &rld_settings_listen,
     .doc_value = "object",
     .help = "`{\"address\", \"port\"}`, see the `listen` table below"},
    {.name = "threads",
     .kind = RLD_SET_INT,
     .offset = OFF(threads),
     .min = 0,
     .max = 256,
     .def = 0,
     .help = "HTTP worker threads; 0 = one per CPU, and with the Redis store at least 8 per "
             "pooled connection (`pool`, 2; at most 64), since a worker waits on Redis for each "
             "decision and the calls of the workers waiting share a connection"},
    {.name = "tls",
     .kind = RLD_SET_OBJECT,
     .sub = &rld_settings_tls,
     .doc_value = "object",
     .help = "`{\"cert\", \"key\"}`: serve HTTPS only (GnuTLS, through libmicrohttpd), see the "
             "`tls` table below"},
    {.name = "max_connections",
     .kind = RLD_SET_INT,
     .offset = OFF(max_connections),
     .min = 1,
     .max = 1000000,
     .def = 4096,
     .help = "connections served at once, by the HTTP listener and by the gRPC one each; past "
             "it a new connection is answered at once and closed, not queued (HTTP: 503; gRPC: "
             "a GOAWAY with ENHANCE_YOUR_CALM)"},
    {.name = "max_keys",
     .kind = RLD_SET_INT,
     .offset = OFF(max_keys),
     .min = 0,
     .max = 1000000000,
     .def = 10000000,
     .help = "key states (one per rule of a key) the memory store holds at most; past it idle "
             "ones are dropped first, and when none is idle a decision that needs a new one is "
             "answered 503 with `Retry-After` (`ratelimit_keys_refused_total`) while keys with "
             "state keep being served. 0: no bound"},
    {.name = "connection_timeout",
     .kind = RLD_SET_INT,
     .offset = OFF(connection_timeout),
     .min = 1,
     .max = 86400,
     .def = 30,
     .help = "seconds a connection may stay idle (no request, or a request that stalls) before "
             "it is closed (gRPC: after a GOAWAY), so that slow clients cannot pin the server"},
    {.name = "store",
     .kind = RLD_SET_OBJECT,
     .sub = &rld_settings_store,
     .doc_value = "`\"memory\"`, `\"redis\"` or an object",
     .def_str = "memory",
     .help = "where the state lives: see [Several instances on one "
             "Redis](redis.md#several-instances-on-one-redis)"},
    {.name = "admin_token",
     .kind = RLD_SET_STRING,
     .offset = OFF(admin_token),
     .min = 1,
     .max = 1024,
     .help = "when set, /quota/&lt;user&gt; and /admin/reload need `Authorization: Bearer "
             "<token>`; also from `admin_token_file` or the environment variable "
             "`RATELIMITD_ADMIN_TOKEN`. Without it they are open on a loopback `listen.address` "
             "and closed (403) on any other, unless `admin_open`"},
    {.name = "admin_token_file",
     .kind = RLD_SET_STRING,
     .offset = OFF(admin_token_file),
     .min = 1,
     .max = 4096,
     .help = "a file holding `admin_token` (one trailing newline is dropped)"},
    {.name = "admin_open",
     .kind = RLD_SET_BOOL,
     .offset = OFF(admin_open),
     .def = 0,
     .help = "`true`: without `admin_token`, the admin endpoints answer anyone who reaches a "
             "`listen.address` off loopback (127.0.0.0/8, ::1), and the log warns at every "
             "start. `false`: they answer 403 there until `admin_token` is set. See [Admin "
             "endpoints off loopback](operations.md#admin-endpoints-off-loopback)"},
    {.name = "acquire_token",
     .kind = RLD_SET_STRING,
     .offset = OFF(acquire_token),
     .min = 1,
     .max = 1024,
     .help = "when set, /acquire, /check, /refund and /release need `Authorization: Bearer "
             "<token>`; also from `acquire_token_file` or `RATELIMITD_ACQUIRE_TOKEN`"},
    {.name = "acquire_token_file",
     .kind = RLD_SET_STRING,
     .offset = OFF(acquire_token_file),
     .min = 1,
     .max = 4096,
     .help = "a file holding `acquire_token`"},
    {.name = "metrics_token",
     .kind = RLD_SET_STRING,
     .offset = OFF(metrics_token),
     .min = 1,
     .max = 1024,
     .help = "when set, /metrics and /healthz need `Authorization: Bearer <token>` (open "
             "otherwise); also from `metrics_token_file` or `RATELIMITD_METRICS_TOKEN`"},
    {.name = "metrics_token_file",
     .kind = RLD_SET_STRING,
     .offset = OFF(metrics_token_file),
     .min = 1,
     .max = 4096,
     .help = "a file holding `metrics_token`"},
    {.name = "quota_file",
     .kind = RLD_SET_STRING,
     .offset = OFF(quota_file),
     .min = 1,
     .max = 4096,
     .help = "where run-time quota changes are kept (relative to the working directory; its "
             "directory is created). Without it they last until the process stops. Not used "
             "with the Redis store, which keeps them in Redis"},
    {.name = "state_file",
     .kind = RLD_SET_STRING,
     .offset = OFF(state_file),
     .min = 1,
     .max = 4096,
     .help = "where every key's state and every reservation are kept across restarts: saved "
             "every `state_interval` seconds and at stop (written to a temporary file, synced "
             "and renamed), loaded at start. Levels and rule types are matched by name, so a "
             "changed configuration keeps what still fits; a file that cannot be read is moved "
             "to `<state_file>.corrupt` and the service starts without it. Without it a restart "
             "forgets the buckets (the default configuration sets `var/state.bin`). Not used "
             "with the Redis store: Redis keeps the state, and no instance holds any of its own"},
    {.name = "state_interval",
     .kind = RLD_SET_INT,
     .offset = OFF(state_interval),
     .min = 0,
     .max = 86400,
     .def = 60,
     .help = "seconds between snapshots (0: only at stop). A crash loses at most this much"},
    {.name = "reservation_ttl",
     .kind = RLD_SET_SECONDS,
     .offset = OFF(reservation_ttl),
     .min = 0.001,
     .max = 86400,
     .def = 300,
     .help = "seconds until a reservation expires and releases its slots"},
    {.name = "log",
     .kind = RLD_SET_OBJECT,
     .sub = &rld_settings_log,
     .doc_value = "object",
     .help = "`{\"level\", \"format\", \"access\"}`, see the `log` table below"},
    {.name = "domain",
     .kind = RLD_SET_STRING,
     .offset = OFF(domain),
     .min = 1,
     .max = 255,
     .help = "the rate limit service domain this configuration answers over gRPC; a "
             "ShouldRateLimit call for another domain is answered OK with no limit. Without it "
             "every domain is served"},
    {.name = "alert_webhook",
     .kind = RLD_SET_OBJECT,
     .sub = &rld_settings_alert,
     .doc_value = "object",
     .help = "`{\"url\", \"token_file\", \"queue\", \"attempts\", \"timeout_ms\"}`: where the "
             "rules' `alerts` go, see the `alert_webhook` table below; none: alerts are not sent"},
    {.name = "grpc",
     .kind = RLD_SET_OBJECT,
     .sub = &rld_settings_grpc,
     .doc_value = "object",
     .help = "`{\"listen\", \"ratelimit_headers\", \"max_message\", \"tls\"}`, see the `grpc` "
             "table below"},
    {.name = "plugins",
     .kind = RLD_SET_STRINGS,
     .offset = OFF(plugins),
     .count_offset = OFF(nplugins),
     .min = 1,
     .max = 4096,
     .doc_value = "list of paths",
     .help = "shared objects to load that register more rule types "
             "(`include/ratelimit_rule.h`)"},
    {.name = "levels",
     .kind = RLD_SET_CONFIG,
     .required = 1,
     .doc_value = "list of levels",
     .help = "the ordered list of levels, see the `levels` table below (unless "
             "`ratelimit_config` is given)"},
    {.name = "ratelimit_config",
     .kind = RLD_SET_STRING,
     .offset = OFF(ratelimit_config),
     .min = 1,
     .max = 4096,
     .help = "envoyproxy/ratelimit's YAML configuration instead of `levels`: a `.yaml` or `.yml` "
             "file or a directory of them, relative to the working directory (see [Coming from "
             "envoyproxy/ratelimit](envoy.md#coming-from-envoyproxyratelimit))"},
    {.name = "model_headers",
     .kind = RLD_SET_ENUM,
     .offset = OFF(model_headers),
     .choices = model_header_sets,
     .help = "the rate-limit headers of model APIs that `/acquire` and `/check` add to the IETF "
             "`RateLimit` ones: `\"openai\"` (`x-ratelimit-*`), `\"anthropic\"` "
             "(`anthropic-ratelimit-*`), `\"both\"` or `\"none\"` (the default); see "
             "[Model usage](usage.md#the-headers-model-clients-read)"},
    {.name = "dimensions",
     .kind = RLD_SET_CONFIG,
     .doc_value = "list of names",
     .help = "what requests' `usage` may count besides `cost`, such as `[\"input_tokens\", "
             "\"output_tokens\"]` (at most 8): a rule's `unit` may name one (see "
             "[Model usage](usage.md))"},
    {.name = "prices",
     .kind = RLD_SET_CONFIG,
     .doc_value = "object",
     .help = "`{\"by\": \"model\", \"models\": {\"m1\": {\"input_tokens\": 3}}}`: the "
             "descriptor naming a request's model and each model's dollars per million units of "
             "each dimension (up to 6 decimals), for rules whose `unit` is `usd`"},
    {.name = "tiers",
     .kind = RLD_SET_CONFIG,
     .doc_value = "object",
     .help = "tier name to rule list (needed when a level is tiered)"},
    {.name = "default_tier",
     .kind = RLD_SET_CONFIG,
     .doc_value = "string",
     .help = "the tier of users without a quota (needed when a level is tiered)"},
    {.name = "quotas",
     .kind = RLD_SET_CONFIG,
     .doc_value = "object",
     .help = "initial quotas on the tiered level: `{\"alice\": \"enterprise\", \"bob\": "
             "{\"rules\": [...]}}`"},
};

/* clang-format on */

const rld_setting_table rld_settings_root = {"root", root_rows, COUNT(root_rows), NULL, 0};
const rld_setting_table rld_settings_listen = {"listen", listen_rows, COUNT(listen_rows), NULL, 0};
const rld_setting_table rld_settings_store = {"store", store_rows, COUNT(store_rows), "type", 0};
const rld_setting_table rld_settings_level = {"level", level_rows, COUNT(level_rows), NULL, 1};
const rld_setting_table rld_settings_log = {"log", log_rows, COUNT(log_rows), NULL, 0};
const rld_setting_table rld_settings_sentinel = {"sentinel", sentinel_rows, COUNT(sentinel_rows),
                                                 NULL, 0};
const rld_setting_table rld_settings_tls = {"tls", tls_rows, COUNT(tls_rows), NULL, 0};
const rld_setting_table rld_settings_store_tls = {"store.tls", store_tls_rows,
                                                  COUNT(store_tls_rows), NULL, 0};
const rld_setting_table rld_settings_grpc = {"grpc", grpc_rows, COUNT(grpc_rows), NULL, 0};
const rld_setting_table rld_settings_alert = {"alert_webhook", alert_rows, COUNT(alert_rows),
                                              NULL, 0};
const rld_setting_table rld_settings_grpc_tls = {"grpc.tls", grpc_tls_rows, COUNT(grpc_tls_rows),
                                                 NULL, 0};

static const rld_setting_table *const all_tables[] = {&rld_settings_root,  &rld_settings_listen,
                                                      &rld_settings_store, &rld_settings_level,
                                                      &rld_settings_log,   &rld_settings_tls,
                                                      &rld_settings_grpc,  &rld_settings_sentinel,
                                                      &rld_settings_grpc_tls,
                                                      &rld_settings_store_tls,
                                                      &rld_settings_alert, &lease_table};

const rld_setting *rld_setting_find(const rld_setting_table *t, const char *name, size_t len)
{
    for (size_t i = 0; i < t->nrows; i++)
        if (strlen(t->rows[i].name) == len && memcmp(t->rows[i].name, name, len) == 0)
            return &t->rows[i];
    return NULL;
}

void rld_setting_names(const rld_setting_table *t, char *buf, size_t len)
{
    size_t used = 0;
    if (len)
        buf[0] = '\0';
    for (size_t i = 0; i < t->nrows && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", t->rows[i].name);
}

/* ---- defaults and freeing ------------------------------------------------------------- */

static int row_default(const rld_setting *r, char *base, size_t level)
{
    char *p = base + r->offset;
    switch (r->kind) {
    case RLD_SET_INT:
    case RLD_SET_BOOL:
    case RLD_SET_ENUM:
        ((int *)p)[level] = (int)r->def;
        return RL_OK;
    case RLD_SET_SECONDS:
        *(rl_ns *)p = rl_ns_from_seconds(r->def);
        return RL_OK;
    case RLD_SET_CHARS:
        snprintf(p, (size_t)r->max + 1, "%s", r->def_str ? r->def_str : "");
        return RL_OK;
    case RLD_SET_STRING:
        if (r->def_str && !(*(char **)p = strdup(r->def_str)))
            return RL_ENOMEM;
        return RL_OK;
    case RLD_SET_OBJECT:
    case RLD_SET_STRINGS:
    case RLD_SET_CONFIG:
        return RL_OK;
    }
    return RL_OK;
}

int rld_settings_defaults(rld_settings *set)
{
    memset(set, 0, sizeof *set);
    for (size_t t = 0; t < COUNT(all_tables); t++) {
        const rld_setting_table *tab = all_tables[t];
        for (size_t l = 0; l < (tab->per_level ? RL_MAX_LEVELS : 1); l++)
            for (size_t i = 0; i < tab->nrows; i++)
                if (row_default(&tab->rows[i], (char *)set, l) != RL_OK) {
                    rld_settings_clear(set);
                    return RL_ENOMEM;
                }
    }
    return RL_OK;
}

void rld_settings_clear(rld_settings *set)
{
    for (size_t t = 0; t < COUNT(all_tables); t++)
        for (size_t i = 0; i < all_tables[t]->nrows; i++) {
            const rld_setting *r = &all_tables[t]->rows[i];
            char *p = (char *)set + r->offset;
            if (r->kind == RLD_SET_STRING)
                free(*(char **)p);
            if (r->kind == RLD_SET_STRINGS) {
                char **list = *(char ***)p;
                size_t n = *(size_t *)((char *)set + r->count_offset);
                for (size_t k = 0; k < n; k++)
                    free(list[k]);
                free(list);
            }
        }
    memset(set, 0, sizeof *set);
}

/* ---- the README tables ---------------------------------------------------------------- */

/* The value column: what a row accepts. */
static void doc_value(const rld_setting *r, char *buf, size_t len)
{
    size_t used = 0;
    if (r->doc_value) {
        snprintf(buf, len, "%s", r->doc_value);
        return;
    }
    switch (r->kind) {
    case RLD_SET_INT:
        snprintf(buf, len, "whole number, %lld to %lld", (long long)r->min, (long long)r->max);
        return;
    case RLD_SET_SECONDS:
        snprintf(buf, len, "seconds, %g to %g", r->min, r->max);
        return;
    case RLD_SET_BOOL:
        snprintf(buf, len, "`true` / `false`");
        return;
    case RLD_SET_STRING:
    case RLD_SET_CHARS:
    case RLD_SET_STRINGS:
        snprintf(buf, len, "%s, %zu to %zu characters",
                 r->kind == RLD_SET_STRINGS ? "list of strings" : "string", (size_t)r->min,
                 (size_t)r->max);
        return;
    case RLD_SET_ENUM:
        buf[0] = '\0';
        for (size_t i = 0; r->choices[i] && used < len; i++)
            used += (size_t)snprintf(buf + used, len - used, "%s`\"%s\"`", i ? ", " : "",
                                     r->choices[i]);
        return;
    case RLD_SET_OBJECT:
    case RLD_SET_CONFIG:
        snprintf(buf, len, "object");
        return;
    }
}

/* The default column. */
static void doc_default(const rld_setting *r, char *buf, size_t len)
{
    if (r->doc_default)
        snprintf(buf, len, "%s", r->doc_default);
    else if (r->required)
        snprintf(buf, len, "required");
    else if (r->kind == RLD_SET_INT || r->kind == RLD_SET_SECONDS)
        snprintf(buf, len, r->kind == RLD_SET_INT ? "%.0f" : "%g", r->def);
    else if (r->kind == RLD_SET_BOOL)
        snprintf(buf, len, "`%s`", r->def ? "true" : "false");
    else if (r->kind == RLD_SET_ENUM)
        snprintf(buf, len, "`\"%s\"`", r->choices[(int)r->def]);
    else if (r->def_str)
        snprintf(buf, len, "`\"%s\"`", r->def_str);
    else
        buf[0] = '\0';
}

static int append(char **out, size_t *used, size_t *cap, const char *s, size_t n)
{
    if (*used + n + 1 > *cap) {
        size_t ncap = (*cap + n + 1) * 2;
        char *p = realloc(*out, ncap);
        if (!p)
            return -1;
        *out = p;
        *cap = ncap;
    }
    memcpy(*out + *used, s, n);
    *used += n;
    (*out)[*used] = '\0';
    return 0;
}

/* Appends the Markdown table of t to *out (of *used bytes, *cap allocated). 0 or -1. */
static int doc_table(const rld_setting_table *t, char **out, size_t *used, size_t *cap)
{
    static const char head[] =
        "| member | value | default | meaning |\n| --- | --- | --- | --- |\n";
    if (append(out, used, cap, head, strlen(head)) != 0)
        return -1;
    for (size_t i = 0; i < t->nrows; i++) {
        const rld_setting *r = &t->rows[i];
        char value[256], def[128], line[2048];
        doc_value(r, value, sizeof value);
        doc_default(r, def, sizeof def);
        int n =
            snprintf(line, sizeof line, "| `%s` | %s | %s | %s |\n", r->name, value, def, r->help);
        if (n < 0 || (size_t)n >= sizeof line || append(out, used, cap, line, (size_t)n) != 0)
            return -1;
    }
    return 0;
}

#define DOC_BEGIN "<!-- settings: "
#define DOC_END "<!-- end of settings -->"

char *rld_settings_doc_update(const char *text, rl_err *err)
{
    char *out = NULL;
    size_t used = 0, cap = 0;
    const char *p = text, *m;
    while ((m = strstr(p, "\n" DOC_BEGIN))) {
        const char *name = m + 1 + strlen(DOC_BEGIN), *eol = strchr(name, '\n');
        const char *end = eol ? strstr(eol, "\n" DOC_END) : NULL;
        const rld_setting_table *t = NULL;
        for (size_t i = 0; i < COUNT(all_tables); i++)
            if (eol && strncmp(name, all_tables[i]->name, strlen(all_tables[i]->name)) == 0 &&
                strncmp(name + strlen(all_tables[i]->name), " -->", 4) == 0)
                t = all_tables[i];
        if (!t || !end) {
            rl_errf(err, RL_EINVAL, "%.40s: %s", m + 1,
                    !t ? "names no settings table" : "has no \"" DOC_END "\" after it");
            free(out);
            return NULL;
        }
        if (append(&out, &used, &cap, p, (size_t)(eol + 1 - p)) != 0 ||
            doc_table(t, &out, &used, &cap) != 0)
            goto nomem;
        p = end + 1;
    }
    if (append(&out, &used, &cap, p, strlen(p)) == 0)
        return out;
nomem:
    free(out);
    rl_errf(err, RL_ENOMEM, "out of memory");
    return NULL;
}
