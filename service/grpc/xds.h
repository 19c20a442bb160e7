/*
 * xds.h - envoyproxy/ratelimit's configuration over xDS (its CONFIG_TYPE=GRPC_XDS_SOTW): a
 * client of a management server's aggregated discovery service (ADS, State of the World) on
 * its own thread, over HTTP/2 (libnghttp2's client session) in cleartext or TLS (net/'s client
 * connections), asking for every resource of type
 * type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig.
 *
 * Each response carries the whole set: its resources become one YAML configuration (each
 * RateLimitConfig written as the YAML file of its domain and read by yaml_reader.h, so a
 * pushed configuration is checked exactly as a file is; a domain twice is refused as in
 * files), handed to the apply callback. Applied: the client ACKs (a request with the
 * response's version_info and nonce). Refused (a resource that does not read, or the callback
 * failed): it NACKs (the version it keeps, the nonce, and error_detail with the message) and
 * the configuration in force stays. When the stream or the connection ends, it connects
 * again after a backoff (exponential from XDS_CLIENT_BACKOFF_INITIAL_INTERVAL up to
 * XDS_CLIENT_BACKOFF_MAX_INTERVAL, with jitter) and asks again with the version it has.
 */
#ifndef RLD_GRPC_XDS_H
#define RLD_GRPC_XDS_H

#include <stddef.h>

#include "app/buf.h"
#include "yaml_reader.h"
#include "ratelimit.h"

/* The type of the resources asked for. */
#define RLD_XDS_TYPE_URL "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

/* Puts c (stolen, also on failure) in force: RL_OK, or an error with err saying why (the
 * configuration in force stays). origin names the push in messages ("xDS version '3'"). c is
 * NULL for a push that did not read, err saying why: the callback counts the refusal and
 * returns RL_EINVAL. Called on the client's thread. */
typedef int (*rld_xds_apply_fn)(void *ctx, rld_yconf *c, const char *origin, rl_err *err);

/* The client's settings, from envoyproxy/ratelimit's environment variables. */
typedef struct rld_xds_settings {
    char host[256];
    int port;              /* CONFIG_GRPC_XDS_SERVER_URL host:port (localhost:18000) */
    const char *node_id;   /* CONFIG_GRPC_XDS_NODE_ID ("default") */
    const char *node_metadata; /* CONFIG_GRPC_XDS_NODE_METADATA "k1=v1,k2=v2" (or k1:v1) */
    const char *headers;   /* CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS "k1:v1,k2:v2" */
    int use_tls;           /* CONFIG_GRPC_XDS_SERVER_USE_TLS */
    const char *client_cert, *client_key; /* CONFIG_GRPC_XDS_CLIENT_TLS_CERT, _KEY */
    const char *ca;        /* CONFIG_GRPC_XDS_SERVER_TLS_CACERT (NULL: the system's CAs) */
    const char *san;       /* CONFIG_GRPC_XDS_SERVER_TLS_SAN: the name the server's
                              certificate must hold (NULL: the host dialled) */
    rl_ns connect_timeout; /* CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL (3 s) */
    rl_ns backoff_initial; /* XDS_CLIENT_BACKOFF_INITIAL_INTERVAL (10 s) */
    rl_ns backoff_max;     /* XDS_CLIENT_BACKOFF_MAX_INTERVAL (60 s) */
    double backoff_random; /* XDS_CLIENT_BACKOFF_RANDOM_FACTOR (0.5) */
    int backoff_jitter;    /* XDS_CLIENT_BACKOFF_JITTER (true) */
    size_t max_msg;        /* XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES (0: 4 MiB, gRPC's default) */
    int merge_domains;     /* MERGE_DOMAIN_CONFIG */
} rld_xds_settings;

/* Reads the variables into s (strings borrowed from the environment). RL_EINVAL with err
 * naming the variable for a value that does not read. */
int rld_xds_settings_from_env(rld_xds_settings *s, rl_err *err);

typedef struct rld_xds rld_xds;

/* Starts the client's thread (the TLS files read first: NULL with err naming the variable of
 * a file at fault). apply is called for each response, never two at once. */
rld_xds *rld_xds_start(const rld_xds_settings *s, rld_xds_apply_fn apply, void *ctx,
                       rl_err *err);
/* Stops the thread (closing its connection; an apply under way finishes first) and frees x.
 * NULL is fine. */
void rld_xds_stop(rld_xds *x);
/* Appends the client's metric families (ratelimitd_xds_connected, _applied_total,
 * _rejected_total, _connects_total, and _version_info with the version in force). */
void rld_xds_metrics(rld_xds *x, rld_buf *out);

/* One RateLimitConfig resource (its serialized bytes) written as the YAML text of its file
 * into out, and its name (the resource's name, or its domain) into name. RL_EINVAL when the
 * bytes are not such a message. Exposed for the tests. */
int rld_xds_resource_yaml(const void *msg, size_t len, rld_buf *out, char *name, size_t cap,
                          rl_err *err);

#endif
