/*
 * rls_yaml_grpc.c - see rls_yaml_grpc.h.
 */
#include <stdio.h>
#include <string.h>

#include "rls_yaml_grpc.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rls_limit;
typedef Envoy__Config__Core__V3__HeaderValue rls_header;

#define MAX_DESC 64
#define MAX_ENTRIES 64

/* The request as the matcher reads it (pointers into the protobuf request). */
typedef struct yreq {
    rld_yentry entries[MAX_ENTRIES];
    rld_ydescreq desc[MAX_DESC];
    rld_yreq r;
} yreq;

static rld_grpc_code read_request(const rld_rls_request *req, rl_ns now, yreq *y, rl_err *err)
{
    size_t used = 0;
    if (req->n_descriptors > MAX_DESC)
        return rl_errf(err, RLD_GRPC_INVALID_ARGUMENT, "descriptors: at most %d", MAX_DESC);
    for (size_t i = 0; i < req->n_descriptors; i++) {
        const rld_rls_descriptor *d = req->descriptors[i];
        rld_ydescreq *o = &y->desc[i];
        memset(o, 0, sizeof *o);
        if (d->n_entries > MAX_ENTRIES - used)
            return rl_errf(err, RLD_GRPC_INVALID_ARGUMENT, "descriptors: at most %d entries in all",
                           MAX_ENTRIES);
        o->entries = &y->entries[used];
        for (size_t j = 0; j < d->n_entries; j++) {
            const char *k = d->entries[j]->key,
                       *v = d->entries[j]->value ? d->entries[j]->value : "";
            y->entries[used++] = (rld_yentry){k, strlen(k), v, strlen(v)};
        }
        o->nentries = d->n_entries;
        if (d->limit) {
            o->has_override = 1;
            o->override_rpu = d->limit->requests_per_unit;
            o->override_unit = (int)d->limit->unit;
        }
        if (d->hits_addend) {
            o->has_hits = 1;
            o->hits = d->hits_addend->value;
        }
    }
    y->r = (rld_yreq){.domain = req->domain,
                      .domain_len = strlen(req->domain),
                      .desc = y->desc,
                      .ndesc = req->n_descriptors,
                      .hits_addend = req->hits_addend,
                      .now = now};
    return RLD_GRPC_OK;
}

/* One status as DescriptorStatus. */
static int put_status(rld_rls_status *out, const rld_ystatus *st, rld_arena *a)
{
    out->code = st->code == RLD_YCODE_OVER_LIMIT
                    ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
                    : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
    out->limit_remaining = st->remaining;
    if (!st->has_limit)
        return 0;
    rls_limit *l = rld_arena_alloc(a, sizeof *l);
    Google__Protobuf__Duration *d = rld_arena_alloc(a, sizeof *d);
    if (!l || !d)
        return -1;
    envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(l);
    l->name = (char *)st->name;
    l->requests_per_unit = st->requests_per_unit;
    l->unit = (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)st->unit;
    out->current_limit = l;
    if (st->has_reset) {
        google__protobuf__duration__init(d);
        d->seconds = st->reset / RL_NS_PER_SEC;
        d->nanos = (int32_t)(st->reset % RL_NS_PER_SEC);
        out->duration_until_reset = d;
    }
    return 0;
}

/* Appends a header to the response (value copied into the arena). */
static int add_header(rld_rls_response *resp, const char *key, const char *value, size_t n,
                      rld_arena *a)
{
    size_t k = resp->n_response_headers_to_add;
    rls_header **v = rld_arena_alloc(a, (k + 1) * sizeof *v);
    rls_header *h = rld_arena_alloc(a, sizeof *h);
    if (!v || !h)
        return -1;
    if (k)
        memcpy(v, resp->response_headers_to_add, k * sizeof *v);
    envoy__config__core__v3__header_value__init(h);
    h->key = (char *)key;
    if (!(h->value = rld_arena_strndup(a, value, n)))
        return -1;
    v[k] = h;
    resp->response_headers_to_add = v;
    resp->n_response_headers_to_add = k + 1;
    return 0;
}

/* The IETF headers: a member per limited descriptor, named by the limit's name or its
 * descriptor's entries: "<name>";q=<requests_per_unit>;w=<unit in seconds> and
 * "<name>";r=<remaining>;t=<seconds until the window ends>. */
static int ietf_headers(rld_rls_response *resp, const rld_ystatus *st, size_t n,
                        const rld_rls_request *req, rld_arena *a)
{
    char pbuf[2048], sbuf[2048];
    rld_buf policy, state;
    int rc = 0;
    rld_buf_init(&policy, pbuf, sizeof pbuf);
    rld_buf_init(&state, sbuf, sizeof sbuf);
    for (size_t i = 0; i < n; i++) {
        if (!st[i].has_limit)
            continue;
        char name[200];
        size_t m = 0;
        if (st[i].name[0]) {
            m = (size_t)snprintf(name, sizeof name, "%s", st[i].name);
        } else {
            for (size_t j = 0; j < req->descriptors[i]->n_entries && m < sizeof name; j++)
                m += (size_t)snprintf(name + m, sizeof name - m, "%s%s", j ? "." : "",
                                      req->descriptors[i]->entries[j]->key);
        }
        for (size_t c = 0; c < m && c < sizeof name; c++)
            if (name[c] == '"' || name[c] == '\\' || (unsigned char)name[c] < 0x20)
                name[c] = '_';
        int64_t w = rld_unit_seconds(st[i].unit);
        rld_buf_printf(&policy, "%s\"%s\";q=%u;w=%lld", policy.len ? ", " : "", name,
                       st[i].requests_per_unit, (long long)w);
        rld_buf_printf(&state, "%s\"%s\";r=%u;t=%lld", state.len ? ", " : "", name, st[i].remaining,
                       (long long)(st[i].reset / RL_NS_PER_SEC));
    }
    if (policy.len && (policy.oom || state.oom ||
                       add_header(resp, "ratelimit-policy", policy.p, policy.len, a) != 0 ||
                       add_header(resp, "ratelimit", state.p, state.len, a) != 0))
        rc = -1;
    rld_buf_reset(&policy);
    rld_buf_reset(&state);
    return rc;
}

/* envoyproxy/ratelimit's headers: limit, remaining and reset of the descriptor nearest its
 * limit (one over it first). */
static int upstream_headers(rld_rls_response *resp, const rld_yrls *y, const rld_ystatus *st,
                            size_t n, rld_arena *a)
{
    const char *names[3];
    const rld_ystatus *pick = NULL;
    char v[32];
    if (!rld_yrls_upstream_headers(y, names))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (st[i].has_limit &&
            (!pick || (st[i].code == RLD_YCODE_OVER_LIMIT && pick->code != RLD_YCODE_OVER_LIMIT) ||
             (pick->code != RLD_YCODE_OVER_LIMIT && st[i].remaining < pick->remaining)))
            pick = &st[i];
    if (!pick)
        return 0;
    int k = snprintf(v, sizeof v, "%u", pick->requests_per_unit);
    if (add_header(resp, names[0], v, (size_t)k, a) != 0)
        return -1;
    k = snprintf(v, sizeof v, "%u", pick->remaining);
    if (add_header(resp, names[1], v, (size_t)k, a) != 0)
        return -1;
    k = snprintf(v, sizeof v, "%lld", (long long)(pick->reset / RL_NS_PER_SEC));
    return add_header(resp, names[2], v, (size_t)k, a);
}

rld_grpc_code rld_yrls_decide_rls(const rld_rls *rls, const rld_rls_request *req, rl_ns now,
                                  rld_rls_response *resp, rld_arena *a, rl_err *err)
{
    rld_yrls *y = rls->cls;
    yreq *q = rld_arena_alloc(a, sizeof *q);
    rld_ystatus *st = rld_arena_alloc(a, (req->n_descriptors + 1) * sizeof *st);
    rld_rls_status *v = rld_arena_alloc(a, (req->n_descriptors + 1) * sizeof *v);
    resp->statuses = rld_arena_alloc(a, (req->n_descriptors + 1) * sizeof *resp->statuses);
    rld_ycode overall;
    rld_grpc_code code;
    if (!q || !st || !v || !resp->statuses)
        return rl_errf(err, RLD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    if ((code = read_request(req, now, q, err)) != RLD_GRPC_OK)
        return code;
    int rc = rld_yrls_decide(y, rls->lim, &q->r, st, &overall, err);
    if (rc != RL_OK)
        return rld_grpc_code_of(rc);
    resp->overall_code = overall == RLD_YCODE_OVER_LIMIT
                             ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
                             : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
    resp->n_statuses = req->n_descriptors;
    for (size_t i = 0; i < req->n_descriptors; i++) {
        envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(&v[i]);
        resp->statuses[i] = &v[i];
        if (put_status(&v[i], &st[i], a) != 0)
            return rl_errf(err, RLD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    }
    if ((rls->ratelimit_headers && ietf_headers(resp, st, req->n_descriptors, req, a) != 0) ||
        upstream_headers(resp, y, st, req->n_descriptors, a) != 0)
        return rl_errf(err, RLD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    return RLD_GRPC_OK;
}

/* ---- the part the app reloads ------------------------------------------------------------ */

static int part_reload_check(void *self, rl_err *err)
{
    rld_yrls_load_error(self);
    return rl_errf(err, RL_EINVAL, "reload: a configuration with envoyproxy/ratelimit's "
                                   "YAML is applied at the next start");
}

static void part_metrics(void *self, rld_buf *out)
{
    rld_yrls_metrics(self, out);
}

const rld_part_ops rld_yrls_part_ops = {
    .name = "yaml configuration", .reload_check = part_reload_check, .metrics = part_metrics};
