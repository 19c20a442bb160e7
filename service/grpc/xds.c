/*
 * xds.c - see xds.h.
 *
 * One thread runs the client: connect (net/'s blocking client connection, TLS with ALPN h2
 * when asked), an HTTP/2 client session (nghttp2) with one stream, the ADS call; then a poll
 * loop feeding the session what the socket reads and writing what it has to send. Requests go
 * out as gRPC messages (a 5-byte prefix and the serialized DiscoveryRequest) through a data
 * source that defers while nothing is queued. A response is handled as it completes: its
 * resources to YAML, read, applied, answered by an ACK or a NACK.
 */
#include <errno.h>
#include <math.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app/clock.h"
#include "app/log.h"
#include "app/values.h"
#include "envoy/service/discovery/v3/discovery.pb-c.h"
#include "net/net.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb-c.h"
#include "xds.h"

#define ADS_PATH "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
#define DEFAULT_MAX_MSG (4u << 20)
#define MAX_HEADERS 16

typedef Envoy__Service__Discovery__V3__DiscoveryRequest disc_req;
typedef Envoy__Service__Discovery__V3__DiscoveryResponse disc_resp;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitConfig pb_conf;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitDescriptor pb_desc;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitPolicy pb_policy;

/* ---- settings ----------------------------------------------------------------------------- */

/* A Go duration ("10s", "500ms", "1m30s", "1.5s"; "0" alone) in whole nanoseconds (a
 * fraction below a nanosecond dropped), or -1. Integer arithmetic throughout. */
static rl_ns go_duration(const char *s)
{
    static const struct {
        const char *u;
        int64_t ns;
    } units[] = {{"ns", 1},          {"us", 1000},          {"µs", 1000}, {"ms", 1000000},
                 {"s", 1000000000}, {"m", 60000000000LL}, {"h", 3600000000000LL}};
    const rl_ns max = (rl_ns)9000000000000000000LL;
    rl_ns total = 0;
    if (strcmp(s, "0") == 0)
        return 0;
    if (!*s)
        return -1;
    while (*s) {
        uint64_t whole = 0, frac = 0, scale = 1;
        int digits = 0;
        for (; *s >= '0' && *s <= '9'; s++, digits++)
            if ((whole = whole * 10 + (uint64_t)(*s - '0')) > (uint64_t)max)
                return -1;
        if (*s == '.')
            for (s++; *s >= '0' && *s <= '9'; s++, digits++)
                if (scale < 1000000000000000000ULL) { /* digits past 18 add nothing */
                    frac = frac * 10 + (uint64_t)(*s - '0');
                    scale *= 10;
                }
        size_t best = 0, k = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
            size_t n = strlen(units[i].u);
            if (strncmp(s, units[i].u, n) == 0 && n > best) {
                best = n;
                k = i;
            }
        }
        if (!digits || !best)
            return -1;
        __extension__ typedef unsigned __int128 u128;
        u128 v = (u128)whole * (uint64_t)units[k].ns + (u128)frac * (uint64_t)units[k].ns / scale;
        if (v > (u128)(max - total))
            return -1;
        total += (rl_ns)v;
        s += best;
    }
    return total;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int env_duration(const char *name, rl_ns def, int positive, rl_ns *out, rl_err *err)
{
    const char *v = env(name);
    *out = def;
    if (!v)
        return RL_OK;
    *out = go_duration(v);
    if (*out < 0 || (positive && *out == 0))
        return rl_errf(err, RL_EINVAL, "%s: must be a %sduration such as 500ms, 10s or 1m, "
                       "not '%.64s'", name, positive ? "positive " : "", v);
    return RL_OK;
}

/* "key:value,key:value" (or '=' between them): every pair must have a key. */
static int check_pairs(const char *name, const char *v, const char *seps, rl_err *err)
{
    const char *p = v;
    while (p && *p) {
        const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p);
        size_t k = strcspn(p, seps);
        if (p + k >= end || k == 0)
            return rl_errf(err, RL_EINVAL, "%s: each entry must be key%cvalue, not '%.*s'", name,
                           seps[0], (int)(end - p > 64 ? 64 : end - p), p);
        p = comma ? comma + 1 : NULL;
    }
    return RL_OK;
}

int rld_xds_settings_from_env(rld_xds_settings *s, rl_err *err)
{
    memset(s, 0, sizeof *s);
    const char *url = env("CONFIG_GRPC_XDS_SERVER_URL");
    if (!url)
        url = "localhost:18000";
    const char *colon = strrchr(url, ':');
    char *end;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    const char *h = url;
    size_t hl = colon ? (size_t)(colon - url) : 0;
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') { /* [::1]:18000 */
        h++;
        hl -= 2;
    }
    if (!colon || hl == 0 || hl >= sizeof s->host || !colon[1] || *end || port < 1 ||
        port > 65535)
        return rl_errf(err, RL_EINVAL, "CONFIG_GRPC_XDS_SERVER_URL: must be host:port, not "
                       "'%.100s'", url);
    memcpy(s->host, h, hl);
    s->host[hl] = '\0';
    s->port = (int)port;
    s->node_id = env("CONFIG_GRPC_XDS_NODE_ID") ? env("CONFIG_GRPC_XDS_NODE_ID") : "default";
    s->node_metadata = env("CONFIG_GRPC_XDS_NODE_METADATA");
    s->headers = env("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS");
    if (s->node_metadata &&
        check_pairs("CONFIG_GRPC_XDS_NODE_METADATA", s->node_metadata, "=:", err) != RL_OK)
        return RL_EINVAL;
    if (s->headers &&
        check_pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", s->headers, ":", err) != RL_OK)
        return RL_EINVAL;
    if (rld_value_env_go_bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", 0, &s->use_tls, err) != RL_OK ||
        rld_value_env_go_bool("XDS_CLIENT_BACKOFF_JITTER", 1, &s->backoff_jitter, err) != RL_OK ||
        rld_value_env_go_bool("MERGE_DOMAIN_CONFIG", 0, &s->merge_domains, err) != RL_OK)
        return RL_EINVAL;
    s->client_cert = env("CONFIG_GRPC_XDS_CLIENT_TLS_CERT");
    s->client_key = env("CONFIG_GRPC_XDS_CLIENT_TLS_KEY");
    s->ca = env("CONFIG_GRPC_XDS_SERVER_TLS_CACERT");
    s->san = env("CONFIG_GRPC_XDS_SERVER_TLS_SAN");
    if (!s->client_cert != !s->client_key)
        return rl_errf(err, RL_EINVAL, "%s: must be set with %s",
                       s->client_cert ? "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"
                                      : "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
                       s->client_cert ? "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"
                                      : "CONFIG_GRPC_XDS_CLIENT_TLS_CERT");
    if (env_duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", 3 * RL_NS_PER_SEC, 1,
                     &s->connect_timeout, err) != RL_OK ||
        env_duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", 10 * RL_NS_PER_SEC, 1,
                     &s->backoff_initial, err) != RL_OK ||
        env_duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", 60 * RL_NS_PER_SEC, 1, &s->backoff_max,
                     err) != RL_OK)
        return RL_EINVAL;
    if (s->backoff_max < s->backoff_initial)
        return rl_errf(err, RL_EINVAL, "XDS_CLIENT_BACKOFF_MAX_INTERVAL: must not be below "
                       "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL");
    const char *v = env("XDS_CLIENT_BACKOFF_RANDOM_FACTOR");
    s->backoff_random = 0.5;
    if (v) {
        s->backoff_random = strtod(v, &end);
        if (*end || end == v || !(s->backoff_random >= 0 && s->backoff_random <= 1))
            return rl_errf(err, RL_EINVAL, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR: must be a number "
                           "from 0 to 1, not '%.64s'", v);
    }
    if ((v = env("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"))) {
        errno = 0;
        long long n = strtoll(v, &end, 10);
        if (*end || end == v || errno || n < 1 || n > (1LL << 30))
            return rl_errf(err, RL_EINVAL, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: must be a number "
                           "of bytes from 1 to 1073741824, not '%.64s'", v);
        s->max_msg = (size_t)n;
    }
    return RL_OK;
}

/* ---- a RateLimitConfig as YAML -------------------------------------------------------------- */

/* The YAML is JSON (flow style, double-quoted strings with JSON's escapes), which YAML reads
 * as it is. */

static void put_value(rld_buf *b, const Google__Protobuf__Value *v);

static void put_struct(rld_buf *b, const Google__Protobuf__Struct *st)
{
    rld_buf_putc(b, '{');
    for (size_t i = 0; i < st->n_fields; i++) {
        if (i)
            rld_buf_puts(b, ", ");
        rld_buf_json_str(b, st->fields[i]->key, strlen(st->fields[i]->key));
        rld_buf_puts(b, ": ");
        put_value(b, st->fields[i]->value);
    }
    rld_buf_putc(b, '}');
}

static void put_value(rld_buf *b, const Google__Protobuf__Value *v)
{
    if (!v) {
        rld_buf_puts(b, "null");
        return;
    }
    switch (v->kind_case) {
    case GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE:
        if (isfinite(v->number_value))
            rld_buf_printf(b, "%.17g", v->number_value);
        else
            rld_buf_puts(b, "null");
        break;
    case GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE:
        rld_buf_json_str(b, v->string_value, strlen(v->string_value));
        break;
    case GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE:
        rld_buf_puts(b, v->bool_value ? "true" : "false");
        break;
    case GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE:
        put_struct(b, v->struct_value);
        break;
    case GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE:
        rld_buf_putc(b, '[');
        for (size_t i = 0; i < v->list_value->n_values; i++) {
            if (i)
                rld_buf_puts(b, ", ");
            put_value(b, v->list_value->values[i]);
        }
        rld_buf_putc(b, ']');
        break;
    default:
        rld_buf_puts(b, "null");
    }
}

static void put_key(rld_buf *b, int *first, const char *key)
{
    rld_buf_puts(b, *first ? "" : ", ");
    *first = 0;
    rld_buf_printf(b, "\"%s\": ", key);
}

static void put_str(rld_buf *b, int *first, const char *key, const char *v)
{
    put_key(b, first, key);
    rld_buf_json_str(b, v, strlen(v));
}

/* A unit's name as the YAML reader reads it; UNKNOWN for 0 and for numbers outside the enum
 * (refused there: "invalid rate limit unit"). */
static const char *unit_name(int u)
{
    return u >= 1 && u <= 7 ? rld_unit_name(u) : "UNKNOWN";
}

static void put_policy(rld_buf *b, const pb_policy *p)
{
    int first = 1;
    rld_buf_putc(b, '{');
    /* upstream writes UNKNOWN too: an unlimited limit needs no unit, any other one is refused */
    if (p->unit || !p->unlimited)
        put_str(b, &first, "unit", unit_name((int)p->unit));
    if (p->requests_per_unit || !p->unlimited) {
        put_key(b, &first, "requests_per_unit");
        rld_buf_printf(b, "%u", p->requests_per_unit);
    }
    if (p->unlimited) {
        put_key(b, &first, "unlimited");
        rld_buf_puts(b, "true");
    }
    if (p->name && *p->name)
        put_str(b, &first, "name", p->name);
    if (p->n_replaces) {
        put_key(b, &first, "replaces");
        rld_buf_putc(b, '[');
        for (size_t i = 0; i < p->n_replaces; i++) {
            rld_buf_puts(b, i ? ", {\"name\": " : "{\"name\": ");
            const char *n = p->replaces[i]->name ? p->replaces[i]->name : "";
            rld_buf_json_str(b, n, strlen(n));
            rld_buf_putc(b, '}');
        }
        rld_buf_putc(b, ']');
    }
    rld_buf_putc(b, '}');
}

static void put_descriptors(rld_buf *b, pb_desc *const *d, size_t n)
{
    rld_buf_putc(b, '[');
    for (size_t i = 0; i < n; i++) {
        int first = 1;
        rld_buf_puts(b, i ? ", {" : "{");
        put_str(b, &first, "key", d[i]->key ? d[i]->key : "");
        if (d[i]->value && *d[i]->value)
            put_str(b, &first, "value", d[i]->value);
        if (d[i]->rate_limit) {
            put_key(b, &first, "rate_limit");
            put_policy(b, d[i]->rate_limit);
        }
        if (d[i]->shadow_mode) {
            put_key(b, &first, "shadow_mode");
            rld_buf_puts(b, "true");
        }
        if (d[i]->detailed_metric) {
            put_key(b, &first, "detailed_metric");
            rld_buf_puts(b, "true");
        }
        if (d[i]->quota_mode) {
            put_key(b, &first, "quota_mode");
            rld_buf_puts(b, "true");
        }
        if (d[i]->metadata) {
            put_key(b, &first, "metadata");
            put_struct(b, d[i]->metadata);
        }
        if (d[i]->n_descriptors) {
            put_key(b, &first, "descriptors");
            put_descriptors(b, d[i]->descriptors, d[i]->n_descriptors);
        }
        rld_buf_putc(b, '}');
    }
    rld_buf_putc(b, ']');
}

int rld_xds_resource_yaml(const void *msg, size_t len, rld_buf *out, char *name, size_t cap,
                          rl_err *err)
{
    pb_conf *c = ratelimit__config__ratelimit__v3__rate_limit_config__unpack(NULL, len, msg);
    if (!c)
        return rl_errf(err, RL_EINVAL, "not a RateLimitConfig message");
    snprintf(name, cap, "%s", c->name && *c->name ? c->name : c->domain ? c->domain : "");
    int first = 1;
    rld_buf_putc(out, '{');
    put_str(out, &first, "domain", c->domain ? c->domain : "");
    if (c->n_descriptors) {
        put_key(out, &first, "descriptors");
        put_descriptors(out, c->descriptors, c->n_descriptors);
    }
    rld_buf_puts(out, "}\n");
    ratelimit__config__ratelimit__v3__rate_limit_config__free_unpacked(c, NULL);
    return out->oom ? rl_errf(err, RL_ENOMEM, "out of memory") : RL_OK;
}

/* A response's resources as one configuration (*out), or RL_EINVAL with err naming the
 * resource at fault. */
static int response_conf(const disc_resp *r, int merge, rld_yconf **out, rl_err *err)
{
    rld_yconf *c = rld_yconf_new();
    int rc = RL_OK;
    if (!c)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    c->merge_domains = merge;
    for (size_t i = 0; i < r->n_resources && rc == RL_OK; i++) {
        const Google__Protobuf__Any *a = r->resources[i];
        char name[200], label[260];
        rld_buf b;
        if (!a->type_url || strcmp(a->type_url, RLD_XDS_TYPE_URL) != 0) {
            rc = rl_errf(err, RL_EINVAL, "resources[%zu]: type_url must be %s, not '%.100s'", i,
                         RLD_XDS_TYPE_URL, a->type_url ? a->type_url : "");
            break;
        }
        rld_buf_init(&b, NULL, 0);
        if ((rc = rld_xds_resource_yaml(a->value.data, a->value.len, &b, name, sizeof name,
                                        err)) != RL_OK) {
            if (rc == RL_EINVAL)
                rl_errf(err, RL_EINVAL, "resources[%zu]: not a RateLimitConfig message", i);
        } else {
            snprintf(label, sizeof label, "%s%sresources[%zu]", name, *name ? " " : "", i);
            rc = rld_yaml_parse(c, label, b.p, b.len, err);
        }
        rld_buf_reset(&b);
    }
    if (rc != RL_OK) {
        rld_yconf_free(c);
        return rc;
    }
    *out = c;
    return RL_OK;
}

/* ---- the client --------------------------------------------------------------------------- */

struct rld_xds {
    rld_xds_settings s;
    rld_xds_apply_fn apply;
    void *ctx;
    rld_net_client_tls *tls;
    char authority[300];
    nghttp2_nv extra[MAX_HEADERS];
    size_t nextra;
    char *headers_copy; /* the additional headers' text, cut into names and values */
    Google__Protobuf__Struct meta;
    Google__Protobuf__Struct__FieldsEntry *meta_fields;
    Google__Protobuf__Value *meta_values;
    Google__Protobuf__Struct__FieldsEntry **meta_ptrs;
    char *meta_copy;
    pthread_t th;
    pthread_mutex_t mu; /* stop and the metrics' version */
    pthread_cond_t cv;
    int stop;
    int wake[2]; /* a byte on wake[1] ends the poll when stopping */
    char version[256]; /* the version in force ("" before the first) */
    atomic_int connected;
    atomic_ulong applied, rejected, connects;
    /* the connection in progress (the thread's only) */
    rld_net_stream *conn;
    nghttp2_session *h2;
    int32_t stream_id;
    int stream_closed;
    rld_buf out;      /* queued gRPC messages not yet given to nghttp2 */
    size_t out_off;
    rld_buf in;       /* the response stream's bytes not yet a whole message */
    int bad;          /* the stream is to be given up (a message too large) */
    int got_response; /* a response came on this connection: the backoff starts over */
    char grpc_status[16], grpc_message[256];
};

/* Queues one DiscoveryRequest: version, nonce and, with a message, error_detail (a NACK). */
static void send_request(rld_xds *x, const char *version, const char *nonce, const char *error)
{
    disc_req r = ENVOY__SERVICE__DISCOVERY__V3__DISCOVERY_REQUEST__INIT;
    Envoy__Config__Core__V3__Node node = ENVOY__CONFIG__CORE__V3__NODE__INIT;
    Google__Rpc__Status st = GOOGLE__RPC__STATUS__INIT;
    node.id = (char *)x->s.node_id;
    node.user_agent_name = "ratelimitd";
    if (x->meta.n_fields)
        node.metadata = &x->meta;
    r.version_info = (char *)version;
    r.node = &node;
    r.type_url = RLD_XDS_TYPE_URL;
    r.response_nonce = (char *)nonce;
    if (error) {
        st.code = 3; /* INVALID_ARGUMENT */
        st.message = (char *)error;
        r.error_detail = &st;
    }
    size_t n = envoy__service__discovery__v3__discovery_request__get_packed_size(&r);
    if (rld_buf_reserve(&x->out, n + 5) != 0)
        return;
    uint8_t *p = (uint8_t *)x->out.p + x->out.len;
    p[0] = 0;
    p[1] = (uint8_t)(n >> 24);
    p[2] = (uint8_t)(n >> 16);
    p[3] = (uint8_t)(n >> 8);
    p[4] = (uint8_t)n;
    envoy__service__discovery__v3__discovery_request__pack(&r, p + 5);
    x->out.len += n + 5;
    if (x->h2 && x->stream_id > 0)
        nghttp2_session_resume_data(x->h2, x->stream_id);
}

/* A response: read, applied, answered. */
static void on_response(rld_xds *x, const uint8_t *msg, size_t len)
{
    disc_resp *r = envoy__service__discovery__v3__discovery_response__unpack(NULL, len, msg);
    rl_err err = {{0}};
    char origin[300];
    if (!r) {
        rld_log("error: xDS: a response from %s:%d is not a DiscoveryResponse", x->s.host,
                x->s.port);
        x->bad = 1;
        return;
    }
    x->got_response = 1;
    const char *version = r->version_info ? r->version_info : "";
    const char *nonce = r->nonce ? r->nonce : "";
    snprintf(origin, sizeof origin, "xDS version '%.200s'", version);
    rld_yconf *c = NULL;
    int rc;
    if (r->type_url && *r->type_url && strcmp(r->type_url, RLD_XDS_TYPE_URL) != 0)
        rc = rl_errf(&err, RL_EINVAL, "type_url must be %s, not '%.100s'", RLD_XDS_TYPE_URL,
                     r->type_url);
    else if ((rc = response_conf(r, x->s.merge_domains, &c, &err)) == RL_OK)
        rc = x->apply(x->ctx, c, origin, &err);
    if (rc != RL_OK && !c) /* refused before the callback saw it: told so, to count it */
        x->apply(x->ctx, NULL, origin, &err);
    if (rc == RL_OK) {
        pthread_mutex_lock(&x->mu);
        snprintf(x->version, sizeof x->version, "%s", version);
        pthread_mutex_unlock(&x->mu);
        atomic_fetch_add(&x->applied, 1);
        rld_log("xDS: %s applied (%zu resources)", origin, r->n_resources);
        send_request(x, version, nonce, NULL);
    } else {
        atomic_fetch_add(&x->rejected, 1);
        rld_log("error: xDS: %s refused, the configuration in force stays: %s", origin, err.msg);
        char keep[256];
        pthread_mutex_lock(&x->mu);
        snprintf(keep, sizeof keep, "%s", x->version);
        pthread_mutex_unlock(&x->mu);
        send_request(x, keep, nonce, err.msg);
    }
    envoy__service__discovery__v3__discovery_response__free_unpacked(r, NULL);
}

static ssize_t h2_send(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *ud)
{
    (void)s;
    (void)flags;
    rld_xds *x = ud;
    ssize_t n = rld_net_stream_write(x->conn, data, len, rld_mono_ns() + 10 * RL_NS_PER_SEC);
    return n < 0 ? NGHTTP2_ERR_CALLBACK_FAILURE : n;
}

static ssize_t body_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
                         uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    (void)s;
    (void)id;
    (void)flags;
    (void)src;
    rld_xds *x = ud;
    size_t have = x->out.len - x->out_off;
    if (!have) {
        x->out.len = x->out_off = 0;
        return NGHTTP2_ERR_DEFERRED;
    }
    if (len > have)
        len = have;
    memcpy(buf, x->out.p + x->out_off, len);
    x->out_off += len;
    return (ssize_t)len;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
                   size_t len, void *ud)
{
    (void)flags;
    rld_xds *x = ud;
    if (id != x->stream_id || x->bad)
        return 0;
    size_t max = x->s.max_msg ? x->s.max_msg : DEFAULT_MAX_MSG;
    rld_buf_put(&x->in, (const char *)data, len);
    nghttp2_session_consume(s, id, len);
    while (x->in.len >= 5 && !x->in.oom) {
        const uint8_t *p = (const uint8_t *)x->in.p;
        size_t n = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
        if (p[0] != 0 || n > max) {
            rld_log("error: xDS: a response from %s:%d is %s (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES "
                    "is %zu): the stream is closed",
                    x->s.host, x->s.port, p[0] ? "compressed" : "larger than the limit", max);
            x->bad = 1;
            return 0;
        }
        if (x->in.len < 5 + n)
            break;
        on_response(x, p + 5, n);
        memmove(x->in.p, x->in.p + 5 + n, x->in.len - 5 - n);
        x->in.len -= 5 + n;
    }
    if (x->in.oom)
        x->bad = 1;
    return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
    (void)s;
    (void)flags;
    rld_xds *x = ud;
    if (f->hd.stream_id != x->stream_id)
        return 0;
    if (nlen == 11 && memcmp(name, "grpc-status", 11) == 0)
        snprintf(x->grpc_status, sizeof x->grpc_status, "%.*s", (int)vlen, value);
    else if (nlen == 12 && memcmp(name, "grpc-message", 12) == 0)
        snprintf(x->grpc_message, sizeof x->grpc_message, "%.*s", (int)vlen, value);
    else if (nlen == 7 && memcmp(name, ":status", 7) == 0 && !(vlen == 3 && !memcmp(value, "200", 3)))
        snprintf(x->grpc_status, sizeof x->grpc_status, "HTTP %.*s", (int)(vlen > 3 ? 3 : vlen),
                 value);
    return 0;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
    (void)s;
    (void)code;
    rld_xds *x = ud;
    if (id == x->stream_id)
        x->stream_closed = 1;
    return 0;
}

/* Waits ns or until stop; returns stop. */
static int sleep_or_stop(rld_xds *x, rl_ns ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ns / RL_NS_PER_SEC;
    ts.tv_nsec += ns % RL_NS_PER_SEC;
    if (ts.tv_nsec >= RL_NS_PER_SEC) {
        ts.tv_sec++;
        ts.tv_nsec -= RL_NS_PER_SEC;
    }
    pthread_mutex_lock(&x->mu);
    while (!x->stop && pthread_cond_timedwait(&x->cv, &x->mu, &ts) == 0)
        ;
    int stop = x->stop;
    pthread_mutex_unlock(&x->mu);
    return stop;
}

static int stopping(rld_xds *x)
{
    pthread_mutex_lock(&x->mu);
    int stop = x->stop;
    pthread_mutex_unlock(&x->mu);
    return stop;
}

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}

/* One connection: connect, open the stream, ask, and answer responses until it ends or the
 * client stops. Logs why it ended. */
static void run_connection(rld_xds *x)
{
    char why[300];
    nghttp2_session_callbacks *cb = NULL;
    x->conn = rld_net_dial(x->s.host, x->s.port, x->tls, rld_mono_ns() + x->s.connect_timeout,
                           why, sizeof why);
    if (!x->conn) {
        rld_log("error: xDS: cannot connect to the management server %s:%d: %s", x->s.host,
                x->s.port, why);
        return;
    }
    atomic_fetch_add(&x->connects, 1);
    x->stream_closed = 0;
    x->bad = 0;
    x->grpc_status[0] = x->grpc_message[0] = '\0';
    x->out.len = x->out_off = 0;
    x->in.len = 0;
    if (nghttp2_session_callbacks_new(&cb) != 0 ||
        (nghttp2_session_callbacks_set_send_callback(cb, h2_send),
         nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data),
         nghttp2_session_callbacks_set_on_header_callback(cb, on_header),
         nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close),
         nghttp2_session_client_new(&x->h2, cb, x) != 0)) {
        nghttp2_session_callbacks_del(cb);
        rld_net_stream_close(x->conn);
        x->conn = NULL;
        rld_log("error: xDS: out of memory");
        return;
    }
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                   {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
    nghttp2_submit_settings(x->h2, NGHTTP2_FLAG_NONE, iv, 2);
    nghttp2_nv h[4 + 4 + MAX_HEADERS] = {
        NV(":method", "POST"), NV(":scheme", x->tls ? "https" : "http"), NV(":path", ADS_PATH),
        NV(":authority", x->authority), NV("content-type", "application/grpc"),
        NV("te", "trailers"), NV("user-agent", "ratelimitd")};
    size_t nh = 7;
    for (size_t i = 0; i < x->nextra; i++)
        h[nh++] = x->extra[i];
    nghttp2_data_provider dp = {.read_callback = body_read};
    char version[256];
    pthread_mutex_lock(&x->mu);
    snprintf(version, sizeof version, "%s", x->version);
    pthread_mutex_unlock(&x->mu);
    send_request(x, version, "", NULL); /* before the stream: nothing to resume yet */
    x->stream_id = nghttp2_submit_request(x->h2, NULL, h, nh, &dp, NULL);
    if (x->stream_id < 0) {
        rld_log("error: xDS: cannot open the stream: %s", nghttp2_strerror(x->stream_id));
        goto done;
    }
    rld_log("xDS: connected to the management server %s:%d, asking for %s as node '%s'",
            x->s.host, x->s.port, RLD_XDS_TYPE_URL, x->s.node_id);
    atomic_store(&x->connected, 1);
    const char *end = NULL;
    while (!end) {
        if (nghttp2_session_send(x->h2) != 0) {
            end = "the connection broke while sending";
            break;
        }
        if (x->stream_closed) {
            end = "the stream ended";
            break;
        }
        if (x->bad) {
            end = "a response could not be read";
            break;
        }
        if (!nghttp2_session_want_read(x->h2) && !nghttp2_session_want_write(x->h2)) {
            end = "the server closed the session";
            break;
        }
        if (!rld_net_stream_pending(x->conn)) {
            struct pollfd p[2] = {{rld_net_stream_fd(x->conn), POLLIN, 0},
                                  {x->wake[0], POLLIN, 0}};
            int k = poll(p, 2, 1000);
            if (stopping(x))
                break;
            if (k <= 0 || !(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
        }
        uint8_t buf[16384];
        ssize_t n = rld_net_stream_read(x->conn, buf, sizeof buf, 0);
        if (n == 0) {
            end = "the server closed the connection";
        } else if (n < 0 && errno != EAGAIN) {
            const char *e = rld_net_stream_error(x->conn);
            snprintf(why, sizeof why, "%s", e ? e : strerror(errno));
            end = why;
        } else if (n > 0 && nghttp2_session_mem_recv(x->h2, buf, (size_t)n) < 0) {
            end = "the server broke HTTP/2";
        }
    }
    if (end) {
        if (x->grpc_status[0] && strcmp(x->grpc_status, "0") != 0)
            rld_log("error: xDS: the stream to %s:%d ended with status %s: %s", x->s.host,
                    x->s.port, x->grpc_status, x->grpc_message);
        else
            rld_log("error: xDS: the stream to %s:%d ended: %s", x->s.host, x->s.port, end);
    }
done:
    atomic_store(&x->connected, 0);
    nghttp2_session_del(x->h2);
    x->h2 = NULL;
    x->stream_id = 0;
    rld_net_stream_close(x->conn);
    x->conn = NULL;
}

/* The next wait: initial * 2^attempt up to max, less a random part of up to random factor
 * of it with jitter, never below initial. */
static rl_ns backoff(const rld_xds_settings *s, unsigned attempt, unsigned *seed)
{
    double d = (double)s->backoff_initial * pow(2, attempt > 30 ? 30 : attempt);
    if (d > (double)s->backoff_max)
        d = (double)s->backoff_max;
    if (s->backoff_jitter)
        d -= d * s->backoff_random * ((double)rand_r(seed) / RAND_MAX);
    if (d < (double)s->backoff_initial)
        d = (double)s->backoff_initial;
    return (rl_ns)d;
}

static void *client(void *arg)
{
    rld_xds *x = arg;
    unsigned attempt = 0, seed = (unsigned)rld_mono_ns();
    while (!stopping(x)) {
        x->got_response = 0;
        run_connection(x);
        if (x->got_response)
            attempt = 0;
        rl_ns d = backoff(&x->s, attempt++, &seed);
        if (stopping(x))
            break;
        rld_log("xDS: connecting again in %lld ms", (long long)(d / 1000000));
        if (sleep_or_stop(x, d))
            break;
    }
    return NULL;
}

/* Cuts "k1=v1,k2:v2" into the node's metadata (string values). */
static int make_metadata(rld_xds *x)
{
    const char *v = x->s.node_metadata;
    if (!v)
        return 0;
    size_t n = 1;
    for (const char *p = v; *p; p++)
        n += *p == ',';
    if (!(x->meta_copy = strdup(v)) || !(x->meta_fields = calloc(n, sizeof *x->meta_fields)) ||
        !(x->meta_values = calloc(n, sizeof *x->meta_values)) ||
        !(x->meta_ptrs = calloc(n, sizeof *x->meta_ptrs)))
        return -1;
    google__protobuf__struct__init(&x->meta);
    char *save = NULL;
    for (char *e = strtok_r(x->meta_copy, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
        size_t k = strcspn(e, "=:"), i = x->meta.n_fields;
        if (!e[k])
            continue;
        e[k] = '\0';
        google__protobuf__struct__fields_entry__init(&x->meta_fields[i]);
        google__protobuf__value__init(&x->meta_values[i]);
        x->meta_values[i].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
        x->meta_values[i].string_value = e + k + 1;
        x->meta_fields[i].key = e;
        x->meta_fields[i].value = &x->meta_values[i];
        x->meta_ptrs[i] = &x->meta_fields[i];
        x->meta.n_fields++;
    }
    x->meta.fields = x->meta_ptrs;
    return 0;
}

/* Cuts "k1:v1,k2:v2" into metadata headers (names in lower case, as HTTP/2 wants). */
static int make_headers(rld_xds *x)
{
    if (!x->s.headers)
        return 0;
    if (!(x->headers_copy = strdup(x->s.headers)))
        return -1;
    char *save = NULL;
    for (char *e = strtok_r(x->headers_copy, ",", &save); e && x->nextra < MAX_HEADERS;
         e = strtok_r(NULL, ",", &save)) {
        char *c = strchr(e, ':');
        if (!c)
            continue;
        *c = '\0';
        for (char *p = e; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p - 'A' + 'a');
        x->extra[x->nextra++] = (nghttp2_nv){(uint8_t *)e, (uint8_t *)c + 1, strlen(e),
                                             strlen(c + 1), NGHTTP2_NV_FLAG_NONE};
    }
    return 0;
}

static void xds_free(rld_xds *x)
{
    rld_net_client_tls_free(x->tls);
    free(x->headers_copy);
    free(x->meta_copy);
    free(x->meta_fields);
    free(x->meta_values);
    free(x->meta_ptrs);
    rld_buf_reset(&x->out);
    rld_buf_reset(&x->in);
    if (x->wake[0] >= 0)
        close(x->wake[0]);
    if (x->wake[1] >= 0)
        close(x->wake[1]);
    free(x);
}

rld_xds *rld_xds_start(const rld_xds_settings *s, rld_xds_apply_fn apply, void *ctx,
                       rl_err *err)
{
    rld_xds *x = calloc(1, sizeof *x);
    if (!x) {
        rl_errf(err, RL_ENOMEM, "out of memory");
        return NULL;
    }
    x->s = *s;
    x->apply = apply;
    x->ctx = ctx;
    x->wake[0] = x->wake[1] = -1;
    rld_buf_init(&x->out, NULL, 0);
    rld_buf_init(&x->in, NULL, 0);
    int v6 = strchr(s->host, ':') != NULL;
    snprintf(x->authority, sizeof x->authority, "%s%s%s:%d", v6 ? "[" : "", s->host,
             v6 ? "]" : "", s->port);
    if (s->use_tls) {
        rld_net_client_tls_files f = {.ca = s->ca,
                                      .ca_name = "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
                                      .cert = s->client_cert,
                                      .cert_name = "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                                      .key = s->client_key,
                                      .key_name = "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
                                      .server_name = s->san,
                                      .alpn = "h2"};
        if (!(x->tls = rld_net_client_tls_new(&f, err))) {
            xds_free(x);
            return NULL;
        }
    }
    if (make_metadata(x) != 0 || make_headers(x) != 0 || pipe(x->wake) != 0) {
        rl_errf(err, RL_ENOMEM, "out of memory");
        xds_free(x);
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&x->th, NULL, client, x) != 0) {
        pthread_mutex_destroy(&x->mu);
        pthread_cond_destroy(&x->cv);
        xds_free(x);
        rl_errf(err, RL_ENOMEM, "cannot start the xDS client's thread");
        return NULL;
    }
    return x;
}

void rld_xds_stop(rld_xds *x)
{
    if (!x)
        return;
    pthread_mutex_lock(&x->mu);
    x->stop = 1;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    if (write(x->wake[1], "x", 1) < 0) {
        /* the poll ends within a second anyway */
    }
    pthread_join(x->th, NULL);
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->cv);
    xds_free(x);
}

void rld_xds_metrics(rld_xds *x, rld_buf *out)
{
    char version[256];
    pthread_mutex_lock(&x->mu);
    snprintf(version, sizeof version, "%s", x->version);
    pthread_mutex_unlock(&x->mu);
    rld_buf_printf(out,
                   "# HELP ratelimitd_xds_connected 1 while the stream to the xDS management "
                   "server is open\n# TYPE ratelimitd_xds_connected gauge\n"
                   "ratelimitd_xds_connected %d\n"
                   "# HELP ratelimitd_xds_connects_total Connections made to the xDS management "
                   "server\n# TYPE ratelimitd_xds_connects_total counter\n"
                   "ratelimitd_xds_connects_total %lu\n"
                   "# HELP ratelimitd_xds_applied_total xDS configurations applied (ACKed)\n"
                   "# TYPE ratelimitd_xds_applied_total counter\n"
                   "ratelimitd_xds_applied_total %lu\n"
                   "# HELP ratelimitd_xds_rejected_total xDS configurations refused (NACKed)\n"
                   "# TYPE ratelimitd_xds_rejected_total counter\n"
                   "ratelimitd_xds_rejected_total %lu\n"
                   "# HELP ratelimitd_xds_version_info The version of the xDS configuration in "
                   "force\n# TYPE ratelimitd_xds_version_info gauge\n"
                   "ratelimitd_xds_version_info{version=",
                   atomic_load(&x->connected), atomic_load(&x->connects),
                   atomic_load(&x->applied), atomic_load(&x->rejected));
    rld_buf_putc(out, '"');
    for (const char *p = version; *p; p++) {
        if (*p == '"' || *p == '\\')
            rld_buf_putc(out, '\\');
        if (*p == '\n')
            rld_buf_puts(out, "\\n");
        else
            rld_buf_putc(out, *p);
    }
    rld_buf_puts(out, "\"} 1\n");
}
