/*
 * rls_yaml.h - envoyproxy/ratelimit's matching and counting over the limiter: a YAML
 * configuration (yaml_reader.h) becomes one keyed level of the core, and a rate limit request
 * becomes one decision of it.
 *
 * Each request descriptor is matched as upstream matches it (the entries walk the tree: a
 * key and value first, then wildcard values in file order, then the key alone; the limit is
 * the one of the node the last entry reaches). A matched limit counts in a state keyed by the
 * domain and the descriptor's entries, a fixed window aligned to its unit by default, so the
 * numbers are upstream's. Unlike upstream, the request's descriptors are decided together:
 * the request is allowed only if every descriptor has room, and a denied request counts
 * against none of them.
 *
 *   domain messaging, [(message_type, marketing), (to_number, 2061111111)] hits 1
 *     -> item key "messaging|message_type=marketing|to_number=2061111111", cost 1, rules:
 *        fixed_window(5, 86400 s) of descriptors[0].descriptors[0]
 */
#ifndef RLD_GRPC_RLS_YAML_H
#define RLD_GRPC_RLS_YAML_H

#include <stddef.h>
#include <stdint.h>

#include "app/buf.h"
#include "yaml_reader.h"
#include "ratelimit.h"

typedef struct rld_yrls rld_yrls;

/* Builds the rules of every limit of c (stolen, also on failure) over reg and a finished
 * configuration of one keyed level, "rls", for the limiter. The matcher must outlive the
 * limiter made from *cfg. Errors name the file and the YAML path
 * ("api.yaml: descriptors[0].rate_limit.algorithm: unknown rule type \"leaky\""). */
int rld_yrls_new(rld_yconf *c, rl_registry *reg, rld_yrls **out, rl_config **cfg, rl_err *err);
/* The same with the levels of base (a finished configuration, stolen also on failure; NULL:
 * none) decided beside the YAML's limits: *cfg is base with the level "rls" added. A request's
 * entries key those levels as the native mapping does (rls.h), so tiers and quotas apply to
 * YAML-configured traffic: the decision is one, allowed only if every YAML limit and every
 * level has room. */
int rld_yrls_new_beside(rld_yconf *c, rl_registry *reg, rl_config *base, rld_yrls **out,
                        rl_config **cfg, rl_err *err);
/* Frees the matcher (after the limiter). NULL is ok. */
void rld_yrls_free(rld_yrls *y);
/* The configuration it reads (borrowed). */
const rld_yconf *rld_yrls_conf(const rld_yrls *y);

/* Turns on envoyproxy/ratelimit's response headers (its LIMIT_RESPONSE_HEADERS_ENABLED) with
 * these names (its defaults: RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset): the
 * limit, what remains and the seconds until the window ends, of the descriptor nearest its
 * limit. Names are copied (up to 63 bytes). Before the matcher decides anything. */
void rld_yrls_set_upstream_headers(rld_yrls *y, const char *limit, const char *remaining,
                                   const char *reset);
/* envoyproxy/ratelimit's global shadow mode (its SHADOW_MODE): every limit is decided as a
 * shadow rule (counted when it fits, so nothing is ever denied by the YAML's limits) and
 * answers as it would without it (OVER_LIMIT when over); only the overall code becomes OK,
 * counted in ratelimit_service_global_shadow_mode. Before the matcher decides anything. */
void rld_yrls_set_global_shadow(rld_yrls *y);
/* envoyproxy/ratelimit's global quota mode (its QUOTA_MODE): every descriptor is in quota mode,
 * as if each limit said quota_mode: true (over its limit it answers OVER_LIMIT, and the
 * request is OVER_LIMIT only when every descriptor is over, one without a limit counting as
 * passed). Before the matcher decides anything. */
void rld_yrls_set_global_quota(rld_yrls *y);
/* envoyproxy/ratelimit's EXTRA_TAGS ("region:us,zone:a"): each tag a label, in that order,
 * after the others of every ratelimit_service_* series of rld_yrls_metrics. RL_EINVAL naming
 * EXTRA_TAGS for a tag without ':', a name that is no Prometheus label name, one given twice
 * or one of the series' own labels (domain, key<n>). Before the metrics are read. */
int rld_yrls_set_extra_tags(rld_yrls *y, const char *spec, rl_err *err);
/* envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA: every answer carries dynamic_metadata
 * (rls_yaml_grpc.h). Before the matcher decides anything. */
void rld_yrls_set_dynamic_metadata(rld_yrls *y);
/* 1 when it is on. */
int rld_yrls_dynamic_metadata(const rld_yrls *y);
/* Counts a ShouldRateLimit call answered with an error, as upstream's should_rate_limit errors
 * (ratelimit_service_should_rate_limit_error{err_type}): redis_error when store, else
 * service_error. */
void rld_yrls_call_error(rld_yrls *y, int store);
/* Counts a failed configuration load (ratelimit_service_config_load_error). */
void rld_yrls_load_error(rld_yrls *y);
/* 1 and the three names when they are on, else 0. */
int rld_yrls_upstream_headers(const rld_yrls *y, const char *names[3]);

/* ---- one request ------------------------------------------------------------------------- */

typedef struct rld_yentry {
    const char *key;
    size_t key_len;
    const char *value;
    size_t value_len;
} rld_yentry;

typedef struct rld_ydescreq {
    const rld_yentry *entries;
    size_t nentries;
    int has_override; /* the descriptor's limit: its own counter, a fixed window */
    uint32_t override_rpu;
    int override_unit; /* rld_unit */
    int has_hits;      /* the descriptor's own hits_addend (0: check only) */
    uint64_t hits;
} rld_ydescreq;

typedef struct rld_yreq {
    const char *domain;
    size_t domain_len;
    const rld_ydescreq *desc;
    size_t ndesc;
    uint32_t hits_addend; /* 0 means 1: rld_request_hits */
    rl_ns now;
} rld_yreq;

/* What a request counts by envoyproxy/ratelimit's rule: its hits_addend, and 1 when that is 0
 * (a descriptor's own hits_addend replaces it, and there 0 counts nothing: a check). The one
 * statement of the rule, for the YAML and the native mappings alike. */
static inline uint64_t rld_request_hits(uint64_t hits_addend)
{
    return hits_addend ? hits_addend : 1;
}

typedef enum rld_ycode {
    RLD_YCODE_UNKNOWN = 0,
    RLD_YCODE_OK = 1,
    RLD_YCODE_OVER_LIMIT = 2
} rld_ycode;

/* The answer for one request descriptor, as DescriptorStatus carries it. */
typedef struct rld_ystatus {
    rld_ycode code;
    int has_limit; /* current_limit is set */
    uint32_t requests_per_unit;
    int unit;           /* rld_unit */
    const char *name;   /* "" when the limit has none; borrowed from the configuration */
    uint32_t remaining; /* limit_remaining */
    int has_reset;      /* duration_until_reset is set */
    rl_ns reset;        /* whole seconds for a fixed window, as upstream */
    /* besides the wire fields, for statistics and headers */
    const rld_ydesc *matched; /* the configured descriptor, NULL for none or an override */
    const rl_rule *rule;      /* the rule that decided, NULL when none */
    rl_rule_status st;        /* its status after the decision */
    int shadow_denied;        /* a shadow_mode limit that would have denied */
    int unlimited;
    uint64_t hits;
} rld_ystatus;

/* Decides req: fills st[0..req->ndesc-1] and *overall. Returns RL_OK, RL_EINVAL for a bad
 * request (err names the field: "descriptors[1].entries[0].value: must not hold control
 * characters"), RL_ESTORE when the store failed; nothing is counted on an error. */
int rld_yrls_decide(rld_yrls *y, rl_limiter *lim, const rld_yreq *req, rld_ystatus *st,
                    rld_ycode *overall, rl_err *err);

/* Appends envoyproxy/ratelimit's statistics per limit as Prometheus counters
 * (ratelimit_service_rate_limit_total_hits{domain,key1,key2,...}, over_limit, near_limit,
 * within_limit, shadow_mode): one series per configured limit, plus the keys of
 * detailed_metric, value_to_metric and limit overrides, at most 1024 of them; past that they
 * count under the configured limit, overrides under key1="overflow" of their domain. Then
 * the service's ratelimit_service_config_load_success, _config_load_error and
 * _global_shadow_mode. */
void rld_yrls_metrics(rld_yrls *y, rld_buf *out);

#endif
