/*
 * config_json.h - the configuration file: JSON read with jansson into the core's structures
 * and the daemon's settings, and rules written back as JSON.
 *
 * A bad configuration is refused as a whole with a message that names the path of the bad
 * field ("levels[1].rules[0].capacity: must be a positive number ..."); nothing is applied.
 */
#ifndef RLD_CONFIG_JSON_H
#define RLD_CONFIG_JSON_H

#include <jansson.h>

#include "ratelimit.h"

/* What a level does when the shared store fails. */
typedef enum rld_on_error {
    RLD_ON_ERROR_OPEN = 0, /* allow, and count it */
    RLD_ON_ERROR_CLOSED,   /* deny, blocked by the store */
    RLD_ON_ERROR_LOCAL     /* an in-process limiter with the rules divided by the fleet size */
} rld_on_error;

typedef enum rld_store_type { RLD_STORE_MEMORY = 0, RLD_STORE_REDIS } rld_store_type;

/* The daemon's settings besides the limiter configuration. */
typedef struct rld_settings {
    char address[64]; /* listen address, "127.0.0.1" by default */
    int port;         /* 8080 by default */
    int threads;      /* HTTP worker threads; 0 = one per CPU */
    char *admin_token; /* NULL: admin endpoints are open */
    char *quota_file;  /* NULL: quotas set at run time are not kept */
    char *state_file;  /* NULL: per-key state and reservations are not kept across restarts */
    int state_interval; /* seconds between snapshots to state_file (60); 0: only at stop */
    rld_store_type store;
    char *redis_url;    /* "redis://127.0.0.1:6379/0" */
    char *redis_prefix; /* "rl:" */
    int redis_timeout_ms; /* 50 */
    int redis_pool;       /* 8 */
    int redis_functions;  /* 0: scripts by EVALSHA; 1: as a Functions library by FCALL */
    int fleet_size;       /* 0: counted from heartbeats */
    rld_on_error on_error[RL_MAX_LEVELS];
    unsigned shards[RL_MAX_LEVELS]; /* 1: not sharded */
    size_t nplugins;
    char **plugins;
} rld_settings;

/* Parses a configuration from JSON text. Loads the plug-ins it names into reg first. On success
 * *cfg is a finished configuration the caller owns and set is filled (free with
 * rld_settings_clear); on failure nothing is returned but plug-ins loaded stay in reg. */
int rld_config_parse(const char *text, size_t len, rl_registry *reg, rld_settings *set,
                     rl_config **cfg, rl_err *err);
/* The same from a file; err names the file when it cannot be read. */
int rld_config_load(const char *path, rl_registry *reg, rld_settings *set, rl_config **cfg,
                    rl_err *err);
/* A whole file, malloc'd and NUL-terminated, its length (without the NUL) in *len (may be
 * NULL); NULL when it cannot be read (errno says why). */
char *rld_read_file(const char *path, size_t *len);
/* Creates the directory a file goes in, and its parents (like mkdir -p). 0 or -1 (errno). */
int rld_make_parent_dir(const char *path);
/* The settings of a configuration that sets none (a YAML configuration's): 127.0.0.1:8080,
 * the memory store, no quota or state file. Free with rld_settings_clear. */
void rld_settings_defaults(rld_settings *set);
/* Frees what the settings own. */
void rld_settings_clear(rld_settings *set);

/* A rule list from a JSON array of rule objects. Errors start with "[i]." (the caller adds the
 * path of the array). On success *out has one reference. */
int rld_rules_from_json(const json_t *arr, rl_registry *reg, rl_rules **out, rl_err *err);

/* A new JSON object describing a rule: type, name, unit, every parameter, reserved. */
json_t *rld_rule_to_json(const rl_rule *r);
/* A new JSON array of the rules of a list. */
json_t *rld_rules_to_json(const rl_rules *rs);
/* A new JSON object of the configuration in force, as GET /rules returns it. */
json_t *rld_config_to_json(const rl_config *cfg, const rld_settings *set);

/* A new JSON number: an integer when v is whole, a real otherwise. */
json_t *rld_json_number(double v);
/* Flags for json_dumps that keep reals short (0.1, not 0.10000000000000001). */
#define RLD_JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(15))

#endif
