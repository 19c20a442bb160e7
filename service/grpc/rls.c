/*
 * rls.c - see rls.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "yaml_reader.h"
#include "app/render.h"
#include "rls.h"
#include "rls_yaml.h"
#include "app/values.h"

/* Most entries one request may carry (all descriptors together). */
#define MAX_ENTRIES 64

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rls_limit;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry rls_entry;
typedef Envoy__Config__Core__V3__HeaderValue rls_header;

rld_grpc_code rld_grpc_code_of(int rl_rc)
{
    switch (rl_rc) {
    case RL_OK:
        return RLD_GRPC_OK;
    case RL_EINVAL:
        return RLD_GRPC_INVALID_ARGUMENT;
    case RL_ESTORE:
        return RLD_GRPC_UNAVAILABLE;
    default:
        return RLD_GRPC_INTERNAL;
    }
}

/* ---- the arena ---------------------------------------------------------------------------- */

struct rld_arena_block {
    rld_arena_block *next;
    size_t cap;
    _Alignas(16) unsigned char data[];
};

void rld_arena_init(rld_arena *a, size_t limit)
{
    a->used = 0;
    a->more = NULL;
    a->more_used = a->more_cap = 0;
    a->total = 0;
    a->limit = limit;
}

void *rld_arena_alloc(rld_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    if (a->limit && (n > a->limit || a->total > a->limit - n))
        return NULL;
    a->total += n;
    if (!a->more && n <= sizeof a->inl - a->used) {
        void *p = a->inl + a->used;
        a->used += n;
        return p;
    }
    if (a->more && n <= a->more_cap - a->more_used) {
        void *p = a->more->data + a->more_used;
        a->more_used += n;
        return p;
    }
    size_t cap = n > 16384 ? n : 16384;
    rld_arena_block *b = malloc(sizeof *b + cap);
    if (!b)
        return NULL;
    b->next = a->more;
    b->cap = cap;
    a->more = b;
    a->more_cap = cap;
    a->more_used = n;
    return b->data;
}

void rld_arena_reset(rld_arena *a)
{
    while (a->more) {
        rld_arena_block *b = a->more;
        a->more = b->next;
        free(b);
    }
    rld_arena_init(a, a->limit);
}

char *rld_arena_strndup(rld_arena *a, const char *s, size_t n)
{
    char *p = rld_arena_alloc(a, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static void *pb_alloc(void *cls, size_t n)
{
    return rld_arena_alloc(cls, n);
}

static void pb_free(void *cls, void *p)
{
    (void)cls;
    (void)p;
}

/* ---- checks every configuration shares ------------------------------------------------------ */

rld_grpc_code rld_rls_check(const rld_rls_request *req, rl_err *err)
{
    if (!req->domain || !req->domain[0])
        return rl_errf(err, RLD_GRPC_INVALID_ARGUMENT, "domain: required");
    if (req->n_descriptors == 0)
        return rl_errf(err, RLD_GRPC_INVALID_ARGUMENT, "descriptors: at least one required");
    for (size_t i = 0; i < req->n_descriptors; i++) {
        const rld_rls_descriptor *d = req->descriptors[i];
        if (d->n_entries == 0)
            return rl_errf(err, RLD_GRPC_INVALID_ARGUMENT,
                           "descriptors[%zu].entries: at least one entry required", i);
        for (size_t j = 0; j < d->n_entries; j++)
            if (!d->entries[j]->key || !d->entries[j]->key[0])
                return rl_errf(err, RLD_GRPC_INVALID_ARGUMENT,
                               "descriptors[%zu].entries[%zu].key: must not be empty", i, j);
    }
    return RLD_GRPC_OK;
}

/* ---- the response's pieces ---------------------------------------------------------------- */

int rld_rls_status_from_rule(rld_rls_status *st, const rl_rule *rule, const rl_rule_status *rs,
                             rld_arena *a)
{
    rls_limit *l = rld_arena_alloc(a, sizeof *l);
    Google__Protobuf__Duration *d = rld_arena_alloc(a, sizeof *d);
    if (!l || !d)
        return -1;
    envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(l);
    google__protobuf__duration__init(d);
    int64_t scale = rl_rule_scale(rule); /* a rule counting dollars: in dollars */
    l->name = rule->name;
    l->unit = (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)rld_unit_of_limit(
        rs->limit / scale, rs->window, &l->requests_per_unit);
    st->current_limit = l;
    rl_fp rem = rs->remaining > 0 ? rs->remaining / scale / RL_FP_ONE : 0;
    st->limit_remaining = rem > UINT32_MAX ? UINT32_MAX : (uint32_t)rem;
    rl_ns reset = rs->reset_after == RL_WAIT_NEVER ? 0 : rs->reset_after > 0 ? rs->reset_after : 0;
    d->seconds = reset / RL_NS_PER_SEC;
    d->nanos = (int32_t)(reset % RL_NS_PER_SEC);
    st->duration_until_reset = d;
    return 0;
}

/* Statuses for every request descriptor, each OK with no limit, into resp. */
static int statuses_new(rld_rls_response *resp, size_t n, rld_arena *a)
{
    resp->statuses = rld_arena_alloc(a, n * sizeof *resp->statuses);
    rld_rls_status *v = rld_arena_alloc(a, n * sizeof *v);
    if (!resp->statuses || !v)
        return -1;
    for (size_t i = 0; i < n; i++) {
        envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(&v[i]);
        v[i].code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
        resp->statuses[i] = &v[i];
    }
    resp->n_statuses = n;
    resp->overall_code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
    return 0;
}

/* ---- the native mapping ------------------------------------------------------------------ */

/* Whether a level reads the entry named key, or it names the model of the prices. */
static int any_level_reads(const rl_config *cfg, const char *key)
{
    for (size_t i = 0; i < cfg->nlevels; i++)
        if (rl_level_reads(&cfg->levels[i], key, strlen(key)))
            return 1;
    return cfg->price_by && strcmp(key, cfg->price_by) == 0;
}

/* 1 when level l's key comes from descriptor d, or from none of the request's descriptors
 * (a default key: the level applies to every descriptor). */
static int level_of_descriptor(const rl_level *l, const rld_rls_request *req, size_t d)
{
    int fed = 0;
    for (size_t i = 0; i < req->n_descriptors; i++)
        for (size_t j = 0; j < req->descriptors[i]->n_entries; j++)
            if (rl_level_reads(l, req->descriptors[i]->entries[j]->key,
                               strlen(req->descriptors[i]->entries[j]->key))) {
                if (i == d)
                    return 1;
                fed = 1;
            }
    return !fed;
}

/* The cost of the request: hits_addend (0 means 1), replaced by the descriptors' own, which
 * must all agree; *dry when that is 0 (check only). */
static rld_grpc_code request_cost(const rld_rls_request *req, rl_fp *cost, int *dry, rl_err *err)
{
    uint64_t hits = rld_request_hits(req->hits_addend);
    int set = 0;
    for (size_t i = 0; i < req->n_descriptors; i++) {
        const Google__Protobuf__UInt64Value *h = req->descriptors[i]->hits_addend;
        if (!h)
            continue;
        if (set && h->value != hits)
            return rl_errf(err, RLD_GRPC_INVALID_ARGUMENT,
                           "descriptors[%zu].hits_addend: differs from an earlier descriptor's; "
                           "with a native configuration a request is one decision at one cost",
                           i);
        hits = h->value;
        set = 1;
    }
    *dry = hits == 0;
    if (rld_value_cost_units("hits_addend", *dry ? 1 : hits, cost, err) != 0)
        return RLD_GRPC_INVALID_ARGUMENT;
    return RLD_GRPC_OK;
}

/* The request's entries as the core's descriptors: entries no level reads are left out, the
 * same entry in several descriptors is taken once, a name given two values is refused. */
static rld_grpc_code gather_entries(const rl_config *cfg, const rld_rls_request *req,
                                    rl_descriptor *out, size_t *n, rl_err *err)
{
    *n = 0;
    for (size_t i = 0; i < req->n_descriptors; i++) {
        for (size_t j = 0; j < req->descriptors[i]->n_entries; j++) {
            const rls_entry *e = req->descriptors[i]->entries[j];
            const char *v = e->value ? e->value : "";
            size_t kl = strlen(e->key), vl = strlen(v), k = 0;
            if (!any_level_reads(cfg, e->key))
                continue;
            while (k < *n && !(out[k].name_len == kl && memcmp(out[k].name, e->key, kl) == 0))
                k++;
            if (k < *n) {
                if (out[k].value_len != vl || memcmp(out[k].value, v, vl) != 0)
                    return rl_errf(err, RLD_GRPC_INVALID_ARGUMENT,
                                   "descriptors[%zu].entries[%zu].value: %.64s has another "
                                   "value in an earlier descriptor",
                                   i, j, e->key);
                continue;
            }
            if (*n == MAX_ENTRIES)
                return rl_errf(err, RLD_GRPC_INVALID_ARGUMENT,
                               "descriptors: at most %d distinct entries", MAX_ENTRIES);
            out[(*n)++] = (rl_descriptor){e->key, kl, v, vl};
        }
    }
    return RLD_GRPC_OK;
}

/* The core names a bad value "keys.<name>: ..."; the answer names the entry it came from. */
static void name_entry(const rld_rls_request *req, rl_err *err)
{
    char msg[sizeof err->msg];
    if (strncmp(err->msg, "keys.", 5) != 0)
        return;
    const char *colon = strchr(err->msg + 5, ':');
    size_t kl = colon ? (size_t)(colon - err->msg - 5) : 0;
    for (size_t i = 0; colon && i < req->n_descriptors; i++)
        for (size_t j = 0; j < req->descriptors[i]->n_entries; j++) {
            const char *k = req->descriptors[i]->entries[j]->key;
            if (strlen(k) == kl && memcmp(k, err->msg + 5, kl) == 0) {
                snprintf(msg, sizeof msg, "descriptors[%zu].entries[%zu].value%s", i, j, colon);
                memcpy(err->msg, msg, sizeof msg);
                return;
            }
        }
}

/* Fills the statuses from a decision: per descriptor the rule that blocked when it is one of
 * the descriptor's levels, else the one with the least remaining. */
static int statuses_from_decision(const rl_config *cfg, const rld_rls_request *req,
                                  const rl_decision *d, rld_rls_response *resp, rld_arena *a)
{
    for (size_t i = 0; i < req->n_descriptors; i++) {
        const rl_applied *pick = NULL;
        const rl_rule_status *pst = NULL;
        for (size_t k = 0; k < d->napplied; k++) {
            const rl_applied *ap = &d->applied[k];
            if (!ap->has_status || !level_of_descriptor(&cfg->levels[ap->level], req, i))
                continue;
            const rl_rule_status *st = rl_decision_status(d, k);
            if ((int)k == d->blocked) {
                pick = ap;
                pst = st;
                break;
            }
            if (!pick || st->remaining < pst->remaining) {
                pick = ap;
                pst = st;
            }
        }
        if (d->blocked >= 0 && pick == &d->applied[d->blocked])
            resp->statuses[i]->code =
                ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
        if (pick && rld_rls_status_from_rule(resp->statuses[i], pick->rule, pst, a) != 0)
            return -1;
    }
    if (!d->allowed)
        resp->overall_code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
    return 0;
}

/* RateLimit-Policy and RateLimit as response_headers_to_add (the same values POST /acquire
 * sends). */
static int add_ratelimit_headers(const rl_config *cfg, const rl_decision *d, rld_rls_response *resp,
                                 rld_arena *a)
{
    char pbuf[1024], sbuf[1024];
    rld_buf policy, state;
    int rc = 0;
    rld_buf_init(&policy, pbuf, sizeof pbuf);
    rld_buf_init(&state, sbuf, sizeof sbuf);
    if (rld_render_ratelimit(&policy, &state, cfg, d) > 0) {
        rls_header *h = rld_arena_alloc(a, 2 * sizeof *h);
        resp->response_headers_to_add =
            rld_arena_alloc(a, 2 * sizeof *resp->response_headers_to_add);
        if (!h || !resp->response_headers_to_add || policy.oom || state.oom) {
            rc = -1;
        } else {
            envoy__config__core__v3__header_value__init(&h[0]);
            envoy__config__core__v3__header_value__init(&h[1]);
            h[0].key = "ratelimit-policy";
            h[1].key = "ratelimit";
            h[0].value = rld_arena_strndup(a, policy.p, policy.len);
            h[1].value = rld_arena_strndup(a, state.p, state.len);
            resp->response_headers_to_add[0] = &h[0];
            resp->response_headers_to_add[1] = &h[1];
            resp->n_response_headers_to_add = 2;
            rc = h[0].value && h[1].value ? 0 : -1;
        }
    }
    rld_buf_reset(&policy);
    rld_buf_reset(&state);
    return rc;
}

rld_grpc_code rld_rls_decide_native(const rld_rls *rls, const rld_rls_request *req, rl_ns now,
                                    rld_rls_response *resp, rld_arena *a, rl_err *err)
{
    const rl_config *cfg = rl_limiter_config(rls->lim);
    rl_descriptor desc[MAX_ENTRIES];
    rl_request r = {.desc = desc, .now = now};
    rl_decision *d;
    int dry = 0;
    rld_grpc_code code;

    if (statuses_new(resp, req->n_descriptors, a) != 0)
        return rl_errf(err, RLD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    if (rls->domain && strcmp(req->domain, rls->domain) != 0)
        return RLD_GRPC_OK; /* an unknown domain: no limit */
    if ((code = request_cost(req, &r.cost, &dry, err)) != RLD_GRPC_OK ||
        (code = gather_entries(cfg, req, desc, &r.ndesc, err)) != RLD_GRPC_OK)
        return code;
    r.flags = dry ? RL_DRY_RUN : 0u;
    rl_usage usage;
    long k = rls->hits_dim ? rl_config_dimension(cfg, rls->hits_dim, strlen(rls->hits_dim)) : -1;
    if (k >= 0) { /* the hits are the usage in that dimension; the request counts 1 */
        usage.given = 1u << k;
        usage.v[k] = dry ? 0 : r.cost;
        r.cost = RL_FP_ONE;
        r.usage = &usage;
    }
    if (!(d = rld_arena_alloc(a, sizeof *d)))
        return rl_errf(err, RLD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    int rc = rl_acquire(rls->lim, &r, d, err);
    if (rc != RL_OK) {
        name_entry(req, err);
        return rld_grpc_code_of(rc);
    }
    if (rls->metrics)
        rld_metrics_decision(rls->metrics, d, dry, r.cost);
    rld_alerts_note(rls->alerts, cfg, &r, d);
    code = RLD_GRPC_OK;
    if (statuses_from_decision(cfg, req, d, resp, a) != 0 ||
        (rls->ratelimit_headers && add_ratelimit_headers(cfg, d, resp, a) != 0))
        code = rl_errf(err, RLD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    rl_decision_done(d);
    return code;
}

rld_grpc_code rld_rls_should_rate_limit(const rld_rls *rls, const rld_rls_request *req, rl_ns now,
                                        rld_rls_response *resp, rld_arena *a, rl_err *err)
{
    rld_grpc_code code = rld_rls_check(req, err);
    if (code == RLD_GRPC_OK)
        code = (rls->decide ? rls->decide : rld_rls_decide_native)(rls, req, now, resp, a, err);
    if (code != RLD_GRPC_OK && rls->failed)
        rls->failed(rls->cls, code);
    return code;
}

rld_grpc_code rld_rls_call(const rld_rls *rls, const uint8_t *msg, size_t len, rl_ns now,
                           rld_arena *a, rld_buf *out, rl_err *err)
{
    ProtobufCAllocator al = {pb_alloc, pb_free, a};
    rld_rls_request *req = envoy__service__ratelimit__v3__rate_limit_request__unpack(&al, len, msg);
    if (!req) {
        if (a->limit && a->total + len > a->limit)
            return rl_errf(err, RLD_GRPC_RESOURCE_EXHAUSTED,
                           "message: needs more than %zu bytes of memory", a->limit);
        return rl_errf(err, RLD_GRPC_INVALID_ARGUMENT, "message: not a RateLimitRequest");
    }
    rld_rls_response resp = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    rld_grpc_code code = rld_rls_should_rate_limit(rls, req, now, &resp, a, err);
    if (code != RLD_GRPC_OK)
        return code;
    size_t n = envoy__service__ratelimit__v3__rate_limit_response__get_packed_size(&resp);
    if (rld_buf_reserve(out, n) != 0)
        return rl_errf(err, RLD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    envoy__service__ratelimit__v3__rate_limit_response__pack(&resp, (uint8_t *)out->p + out->len);
    out->len += n;
    return RLD_GRPC_OK;
}
