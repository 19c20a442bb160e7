/*
 * yaml_reader.h - envoyproxy/ratelimit's configuration files (YAML, read with libyaml) as a
 * tree of domains and descriptors.
 *
 *     domain: messaging
 *     descriptors:
 *       - key: message_type
 *         value: marketing
 *         descriptors:
 *           - key: to_number
 *             rate_limit: {unit: day, requests_per_unit: 5}
 *
 * Every field of that format is read (domain, descriptors, key, value, rate_limit with unit,
 * requests_per_unit, unlimited, name and replaces, shadow_mode, detailed_metric,
 * value_to_metric, share_threshold, quota_mode, metadata), plus two extensions: "algorithm" in rate_limit
 * (a native rule type instead of the fixed window) and "charge: true" beside rate_limit. A
 * file is refused as a whole with a message naming the file and the YAML path of the fault:
 * "api.yaml: descriptors[2].rate_limit.unit: invalid rate limit unit 'fortnight'".
 */
#ifndef RLD_GRPC_YAML_READER_H
#define RLD_GRPC_YAML_READER_H

#include <stddef.h>
#include <stdint.h>

#include "ratelimit.h"

/* Units of envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit (the wire values). */
typedef enum rld_unit {
    RLD_UNIT_UNKNOWN = 0,
    RLD_UNIT_SECOND = 1,
    RLD_UNIT_MINUTE = 2,
    RLD_UNIT_HOUR = 3,
    RLD_UNIT_DAY = 4,
    RLD_UNIT_MONTH = 5,
    RLD_UNIT_YEAR = 6,
    RLD_UNIT_WEEK = 7
} rld_unit;

/* Seconds in a unit as envoyproxy/ratelimit counts them (a month is 30 days, a year 365), or
 * 0 for RLD_UNIT_UNKNOWN and values outside the enum. */
int64_t rld_unit_seconds(int unit);
/* A rule's limit per window as requests_per_unit (*per_unit) and the unit returned: the
 * smallest of second, minute, hour, day, week for which limit * unit / window is a whole
 * number (100 per 60 s: 100 per MINUTE; capacity 20 refilled in 2 s: 10 per SECOND), exact in
 * 128 bits. RLD_UNIT_UNKNOWN and the whole limit when none fits. Saturates at UINT32_MAX. */
rld_unit rld_unit_of_limit(rl_fp limit, rl_ns window, uint32_t *per_unit);
/* The unit's name in capitals ("MINUTE"), "UNKNOWN" for others. */
const char *rld_unit_name(int unit);
/* The unit named (any case: "minute", "MINUTE"), or RLD_UNIT_UNKNOWN. */
rld_unit rld_unit_parse(const char *s);

typedef struct rld_ylimit {
    uint32_t requests_per_unit;
    rld_unit unit; /* RLD_UNIT_UNKNOWN when unlimited */
    int unlimited;
    char *name; /* NULL when not named */
    size_t nreplaces;
    char **replaces; /* names of the limits this one replaces */
    char *algorithm; /* extension: a native rule type; NULL: the fixed window */
} rld_ylimit;

/* A descriptor's metadata, a JSON value as YAML wrote it (upstream's google.protobuf.Struct
 * of the limit): its mapping's keys in file order. */
typedef enum rld_ymeta_type {
    RLD_YMETA_NULL,
    RLD_YMETA_BOOL,
    RLD_YMETA_NUMBER,
    RLD_YMETA_STRING,
    RLD_YMETA_STRUCT,
    RLD_YMETA_LIST
} rld_ymeta_type;

typedef struct rld_ymeta {
    rld_ymeta_type type;
    int b;
    double number;
    char *s;               /* RLD_YMETA_STRING */
    size_t n;              /* members of a struct or list */
    char **keys;           /* RLD_YMETA_STRUCT: n names */
    struct rld_ymeta *v;   /* n values */
} rld_ymeta;

typedef struct rld_ydesc {
    char *key;
    char *value;      /* NULL: every value counted on its own */
    int wildcard;     /* value holds '*' */
    char *path;       /* YAML path, "descriptors[0].descriptors[1]" */
    const char *file; /* borrowed from the domain */
    int has_limit;
    rld_ylimit limit;
    int shadow_mode, detailed_metric, value_to_metric, share_threshold, charge, quota_mode;
    rld_ymeta *metadata; /* NULL when none; a RLD_YMETA_STRUCT */
    size_t nchildren;
    struct rld_ydesc *children;
    size_t id; /* index of a descriptor with a limit among its domain's, from 0 */
} rld_ydesc;

typedef struct rld_ydomain {
    char *domain;
    char *file; /* the file's name as given, for messages */
    size_t nchildren;
    rld_ydesc *children;
    size_t nlimits; /* descriptors with a rate_limit (their ids are 0..nlimits-1) */
    size_t nmerged;
    char **merged; /* names of later files merged into this domain (MERGE_DOMAIN_CONFIG) */
} rld_ydomain;

typedef struct rld_yconf {
    size_t ndomains;
    rld_ydomain *domains;
    int merge_domains; /* a later file of a domain adds its descriptors, as upstream's
                          MERGE_DOMAIN_CONFIG; 0: refused ("duplicate domain") */
} rld_yconf;

/* Whether path names a YAML configuration: a name ending in .yaml or .yml, or a directory. */
int rld_yaml_is_config(const char *path);

/* Reads a file, or every *.yaml and *.yml file of a directory (in name order; names starting
 * with '.' are skipped), each with one domain. On success *out is a new configuration the
 * caller frees with rld_yconf_free; on failure nothing is returned and err names the file and
 * the YAML path. */
int rld_yaml_load(const char *path, rld_yconf **out, rl_err *err);
/* The same; with merge_domains, files of one domain are merged as envoyproxy/ratelimit's
 * MERGE_DOMAIN_CONFIG merges them: a later file's descriptors join the earlier ones (the same
 * key and value at the top twice is refused: "duplicate descriptor composite key"). */
int rld_yaml_load_merging(const char *path, int merge_domains, rld_yconf **out, rl_err *err);
/* Adds the domain of one file's text to c; name is used in messages. On failure c is as it
 * was. */
int rld_yaml_parse(rld_yconf *c, const char *name, const char *text, size_t len, rl_err *err);
/* An empty configuration, or NULL when out of memory. */
rld_yconf *rld_yconf_new(void);
/* Frees c and all it owns. NULL is ok. */
void rld_yconf_free(rld_yconf *c);
/* The domain named, or NULL. */
const rld_ydomain *rld_yconf_domain(const rld_yconf *c, const char *name, size_t len);

#endif
