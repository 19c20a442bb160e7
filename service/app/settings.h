/*
 * settings.h - the daemon's settings (everything in the configuration file that is not the
 * limiter's levels, tiers and quotas), described by one table.
 *
 * Each member of the configuration file is a row of a table (rld_setting): its name, kind,
 * offsetof its field in rld_settings, bounds, default and help. The JSON loader
 * (config/config.c) reads and checks every value from its row, the "unknown field (known: ...)"
 * message lists the rows, the defaults are set from the rows, and the settings tables of
 * docs/configuration.md are generated from them (make settings-doc; test_config fails when
 * the page differs).
 * Tables: rld_settings_root (the top level), rld_settings_listen and rld_settings_store (the
 * "listen" and "store" objects) and rld_settings_level (each member of "levels").
 *
 * Adding a setting is one row:
 *   1. a field in rld_settings below (char * for a string: it is malloc'd, and freed by
 *      rld_settings_clear with no more code);
 *   2. a row in the table of settings.c where it belongs, e.g. at the end of root_rows:
 *        {.name = "max_connections", .kind = RLD_SET_INT, .offset = OFF(max_connections),
 *         .min = 1, .max = 1000000, .def = 1024, .help = "connections served at once"},
 *   3. make settings-doc (rewrites docs/configuration.md's tables from the rows).
 * A value that needs more than its bounds (a URL scheme, say) names a check function in its
 * row. A new nested object is a new table plus a row {.kind = RLD_SET_OBJECT, .sub = &table};
 * its rows' offsets are still into rld_settings. Rows of rld_settings_level hold one value per
 * level: their offset is that of an array of RL_MAX_LEVELS ints (or an enum), level i's at [i].
 */
#ifndef RLD_APP_SETTINGS_H
#define RLD_APP_SETTINGS_H

#include <stddef.h>

#include "ratelimit.h"

/* What a level does when the shared store fails. */
typedef enum rld_on_error {
    RLD_ON_ERROR_OPEN = 0, /* allow, and count it */
    RLD_ON_ERROR_CLOSED,   /* deny, blocked by the store */
    RLD_ON_ERROR_LOCAL     /* an in-process limiter with the rules divided by the fleet size */
} rld_on_error;

typedef enum rld_store_type { RLD_STORE_MEMORY = 0, RLD_STORE_REDIS } rld_store_type;

/* The least severe lines logged; an access line is info when the answer is 2xx, warn for
 * another 4xx (429 included), error for 5xx. */
typedef enum rld_log_level { RLD_LOG_ERROR = 0, RLD_LOG_WARN, RLD_LOG_INFO } rld_log_level;
typedef enum rld_log_format { RLD_LOG_TEXT = 0, RLD_LOG_JSON } rld_log_format;

/* The daemon's settings; the table rows in settings.c describe every field. */
typedef struct rld_settings {
    char address[64]; /* listen address */
    int port;
    int threads;           /* HTTP worker threads; 0 = one per CPU */
    char *tls_cert;        /* PEM files; both NULL: plain HTTP */
    char *tls_key;
    int max_connections;   /* connections served at once */
    int max_keys;          /* key states the memory store holds at most; 0: no bound */
    int connection_timeout; /* seconds a connection may stay idle */
    char *admin_token;     /* NULL: admin endpoints are open on loopback, closed off it */
    int admin_open;        /* off loopback without admin_token: the admin endpoints open anyway */
    char *admin_token_file;   /* where admin_token is read from (auth.h) */
    char *acquire_token;      /* NULL: the decision endpoints are open */
    char *acquire_token_file;
    char *metrics_token;      /* NULL: /metrics and /healthz are open */
    char *metrics_token_file;
    char *quota_file;      /* NULL: quotas set at run time are not kept */
    char *state_file;      /* NULL: per-key state and reservations are not kept across restarts */
    int state_interval;    /* seconds between snapshots to state_file; 0: only at stop */
    rl_ns reservation_ttl; /* copied into the limiter configuration */
    rld_store_type store;
    char *redis_url;
    char *redis_prefix;
    int redis_timeout_ms;
    int redis_pool;
    int redis_functions; /* 0: scripts by EVALSHA; 1: as a Functions library by FCALL */
    int redis_deny_cache; /* 1: denials answered again here until they lapse (store.deny_cache) */
    char *redis_username; /* with sentinels or a cluster: the data nodes' credentials (and,
                             with sentinels, the database) */
    char *redis_password;
    int redis_db;
    int redis_tls;        /* store.tls.enabled: -1 not given, 0 or 1 */
    char *redis_tls_ca;   /* store.tls's PEM files, NULL when not given */
    char *redis_tls_cert;
    char *redis_tls_key;
    int redis_tls_skip_hostname; /* -1 not given, 0 or 1 */
    size_t nsentinels;   /* Redis Sentinel instead of redis_url: 0 for none */
    char **sentinels;    /* "host:port" each */
    char *sentinel_master;
    char *sentinel_username; /* the sentinels' own credentials */
    char *sentinel_password;
    size_t ncluster;     /* Redis Cluster seed nodes instead of redis_url: 0 for none */
    char **cluster;      /* "host:port" each */
    int fleet_size;      /* 0: counted from heartbeats */
    rld_on_error on_error[RL_MAX_LEVELS];
    unsigned shards[RL_MAX_LEVELS]; /* 1: not sharded */
    int lease_slice[RL_MAX_LEVELS];    /* "lease": {"slice"}: amount a lease takes; 0: none */
    int lease_ttl_ms[RL_MAX_LEVELS];   /* "lease": {"ttl_ms"}: how long a lease may be held */
    size_t nplugins;
    char **plugins;
    rld_log_level log_level;
    rld_log_format log_format;
    int log_access;             /* one line per request */
    char *domain;               /* the RLS domain a native configuration answers; NULL: any */
    char *grpc_listen;          /* "ADDR:PORT" of the gRPC server; NULL: no gRPC server */
    int grpc_ratelimit_headers; /* RateLimit headers in ShouldRateLimit's answers */
    int grpc_max_message;       /* bytes of the largest request message */
    char *grpc_hits_addend;     /* a dimension hits_addend counts in; NULL: the cost */
    char *grpc_tls_cert;        /* PEM files of "grpc": {"tls"}; cert NULL: cleartext */
    char *grpc_tls_key;
    char *grpc_tls_client_ca;   /* NULL: no client certificate asked */
    char *grpc_tls_client_san;  /* NULL: any client certificate the CA signed */
    char *ratelimit_config; /* envoyproxy/ratelimit's YAML instead of levels; NULL: none */
    int model_headers;      /* RLD_MODEL_HEADERS_* bits (model_headers.h): 0, 1, 2 or 3 */
    char *alert_url;        /* "alert_webhook": where alerts go; NULL: none are sent */
    char *alert_token_file; /* NULL: no Authorization */
    int alert_queue;        /* alerts waiting at most */
    int alert_attempts;     /* tries of one alert */
    int alert_timeout_ms;   /* one try's limit */
} rld_settings;

typedef enum rld_setting_kind {
    RLD_SET_INT,     /* int (or unsigned): a whole number from min to max */
    RLD_SET_BOOL,    /* int: true or false, kept as 1 or 0 */
    RLD_SET_STRING,  /* char *, malloc'd, NULL when unset: min to max characters, no NUL */
    RLD_SET_CHARS,   /* char[max + 1] inside the struct: 1 to max characters, no NUL */
    RLD_SET_ENUM,    /* an enum (int-sized): one of choices, kept as its index */
    RLD_SET_SECONDS, /* rl_ns: a number of seconds from min to max */
    RLD_SET_STRINGS, /* char ** with its count (size_t) at count_offset: a list of strings of
                        1 to max characters */
    RLD_SET_OBJECT,  /* an object whose members are the rows of sub */
    RLD_SET_CONFIG   /* a member of the limiter configuration, read by its own parser; the row
                        is here so that the known list and the documentation include it */
} rld_setting_kind;

typedef struct rld_setting_table rld_setting_table;

typedef struct rld_setting {
    const char *name;
    rld_setting_kind kind;
    size_t offset;   /* offsetof(rld_settings, field); unused for RLD_SET_OBJECT, RLD_SET_CONFIG */
    double min, max; /* bounds (characters for strings) */
    double def;      /* default of a number, a boolean (0, 1) or an enum (index) */
    const char *def_str;          /* default of a string; NULL: unset */
    const char *const *choices;   /* RLD_SET_ENUM: the names, NULL-terminated */
    const rld_setting_table *sub; /* RLD_SET_OBJECT */
    size_t count_offset;          /* RLD_SET_STRINGS */
    int required;                 /* the member must be present in its object */
    /* RLD_SET_STRING: NULL when s is acceptable, else why not ("must start with redis://").
     * May be NULL. */
    const char *(*check)(const char *s);
    const char *doc_value;   /* what docs/configuration.md shows as the value; NULL: made from the kind */
    const char *doc_default; /* what it shows as the default; NULL: made from def, def_str */
    const char *help;        /* Markdown, one line: the docs' "meaning" column */
} rld_setting;

struct rld_setting_table {
    const char *name; /* "root", "listen", "store", "level": names the docs' table */
    const rld_setting *rows;
    size_t nrows;
    /* When not NULL, a string value stands for an object with only this member
     * ("store": "redis" is {"type": "redis"}). */
    const char *shorthand;
    int per_level; /* the rows are per level (see the comment at the top) */
};

extern const rld_setting_table rld_settings_root, rld_settings_listen, rld_settings_store,
    rld_settings_level, rld_settings_log, rld_settings_tls, rld_settings_grpc,
    rld_settings_grpc_tls, rld_settings_sentinel, rld_settings_store_tls, rld_settings_alert;

/* Splits "ADDR:PORT" ("127.0.0.1:8081", "[::1]:8081"; PORT 0 to 65535) into addr (len bytes)
 * and *port. NULL on success, else why not ("must be ADDRESS:PORT"). */
const char *rld_listen_parse(const char *s, char *addr, size_t len, int *port);

/* The row of t named name (length len), or NULL. */
const rld_setting *rld_setting_find(const rld_setting_table *t, const char *name, size_t len);
/* Writes "a, b, c", the names of t's rows, into buf (truncated to len). */
void rld_setting_names(const rld_setting_table *t, char *buf, size_t len);

/* Fills set with every row's default (zeroing it first). RL_OK, or RL_ENOMEM (then set holds
 * nothing that needs freeing beyond rld_settings_clear). */
int rld_settings_defaults(rld_settings *set);
/* Frees what the settings own (every string and list row) and zeroes them. */
void rld_settings_clear(rld_settings *set);

/* Regenerates the settings tables of a Markdown text. Every "<!-- settings: NAME -->" line is
 * followed by the table of the rows of the table NAME, up to the line "<!-- end of settings
 * -->", which the new text keeps. Returns a malloc'd NUL-terminated text the caller frees, or
 * NULL when out of memory or when a marker names no table or has no end (why in err). */
char *rld_settings_doc_update(const char *text, rl_err *err);

#endif
