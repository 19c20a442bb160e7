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

/* ---- RESPONSE_DYNAMIC_METADATA ------------------------------------------------------------ */

typedef Google__Protobuf__Struct pb_struct;
typedef Google__Protobuf__Value pb_value;
typedef Google__Protobuf__Struct__FieldsEntry pb_field;

static pb_value *new_value(rld_arena *a, Google__Protobuf__Value__KindCase kind)
{
    pb_value *v = rld_arena_alloc(a, sizeof *v);
    if (v) {
        google__protobuf__value__init(v);
        v->kind_case = kind;
    }
    return v;
}

static pb_value *string_value(rld_arena *a, const char *s, size_t n)
{
    pb_value *v = new_value(a, GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE);
    if (v && !(v->string_value = rld_arena_strndup(a, s, n)))
        return NULL;
    return v;
}

static pb_value *number_value(rld_arena *a, double x)
{
    pb_value *v = new_value(a, GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE);
    if (v)
        v->number_value = x;
    return v;
}

static pb_struct *new_struct(rld_arena *a)
{
    pb_struct *st = rld_arena_alloc(a, sizeof *st);
    if (st)
        google__protobuf__struct__init(st);
    return st;
}

/* Adds the field key (borrowed) to st, growing its array in the arena. */
static int put_field(pb_struct *st, const char *key, pb_value *v, rld_arena *a)
{
    pb_field **f = rld_arena_alloc(a, (st->n_fields + 1) * sizeof *f);
    pb_field *e = rld_arena_alloc(a, sizeof *e);
    if (!f || !e || !v)
        return -1;
    if (st->n_fields)
        memcpy(f, st->fields, st->n_fields * sizeof *f);
    google__protobuf__struct__fields_entry__init(e);
    e->key = (char *)key;
    e->value = v;
    f[st->n_fields++] = e;
    st->fields = f;
    return 0;
}

static pb_value *list_value(rld_arena *a, size_t n)
{
    pb_value *v = new_value(a, GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE);
    Google__Protobuf__ListValue *l = rld_arena_alloc(a, sizeof *l);
    Google__Protobuf__Value **items = rld_arena_alloc(a, (n + 1) * sizeof *items);
    if (!v || !l || !items)
        return NULL;
    google__protobuf__list_value__init(l);
    l->values = items;
    v->list_value = l;
    return v;
}

/* A configured metadata value as a google.protobuf.Value (strings borrowed). */
static pb_value *meta_value(const rld_ymeta *m, rld_arena *a);

static pb_struct *meta_struct(const rld_ymeta *m, rld_arena *a)
{
    pb_struct *st = new_struct(a);
    for (size_t i = 0; st && i < m->n; i++)
        if (put_field(st, m->keys[i], meta_value(&m->v[i], a), a) != 0)
            return NULL;
    return st;
}

static pb_value *meta_value(const rld_ymeta *m, rld_arena *a)
{
    pb_value *v;
    switch (m->type) {
    case RLD_YMETA_NULL:
        return new_value(a, GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE);
    case RLD_YMETA_BOOL:
        if ((v = new_value(a, GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE)))
            v->bool_value = m->b;
        return v;
    case RLD_YMETA_NUMBER:
        return number_value(a, m->number);
    case RLD_YMETA_STRING:
        if ((v = new_value(a, GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE)))
            v->string_value = m->s;
        return v;
    case RLD_YMETA_STRUCT:
        if ((v = new_value(a, GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE)) &&
            !(v->struct_value = meta_struct(m, a)))
            return NULL;
        return v;
    case RLD_YMETA_LIST:
        if (!(v = list_value(a, m->n)))
            return NULL;
        for (size_t i = 0; i < m->n; i++)
            if (!(v->list_value->values[v->list_value->n_values++] = meta_value(&m->v[i], a)))
                return NULL;
        return v;
    }
    return NULL;
}

/* Merges m into st as upstream does: a name st lacks is added, two structs under one name
 * are merged, and otherwise the value already there stays (the first descriptor's). */
static int merge_meta(pb_struct *st, const rld_ymeta *m, rld_arena *a)
{
    for (size_t i = 0; i < m->n; i++) {
        pb_field *have = NULL;
        for (size_t j = 0; j < st->n_fields && !have; j++)
            if (strcmp(st->fields[j]->key, m->keys[i]) == 0)
                have = st->fields[j];
        if (!have) {
            if (put_field(st, m->keys[i], meta_value(&m->v[i], a), a) != 0)
                return -1;
        } else if (have->value->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE &&
                   m->v[i].type == RLD_YMETA_STRUCT) {
            if (merge_meta(have->value->struct_value, &m->v[i], a) != 0)
                return -1;
        }
    }
    return 0;
}

/* One request descriptor as upstream writes it: entries as "key=value", its limit override
 * as protobuf's text ("requests_per_unit:10 unit:SECOND") and its hits_addend. */
static pb_value *descriptor_value(const rld_rls_descriptor *d, rld_arena *a)
{
    pb_value *v = new_value(a, GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE), *entries;
    if (!v || !(v->struct_value = new_struct(a)) || !(entries = list_value(a, d->n_entries)))
        return NULL;
    for (size_t j = 0; j < d->n_entries; j++) {
        char kv[2048];
        int n = snprintf(kv, sizeof kv, "%s=%s", d->entries[j]->key,
                         d->entries[j]->value ? d->entries[j]->value : "");
        pb_value *e = string_value(a, kv, n < (int)sizeof kv ? (size_t)n : sizeof kv - 1);
        if (!e)
            return NULL;
        entries->list_value->values[entries->list_value->n_values++] = e;
    }
    if (put_field(v->struct_value, "entries", entries, a) != 0)
        return NULL;
    if (d->limit) {
        char text[96];
        int n = 0;
        if (d->limit->requests_per_unit)
            n = snprintf(text, sizeof text, "requests_per_unit:%u", d->limit->requests_per_unit);
        if (d->limit->unit)
            n += snprintf(text + n, sizeof text - (size_t)n, "%sunit:%s", n ? " " : "",
                          rld_unit_name((int)d->limit->unit));
        if (put_field(v->struct_value, "limit", string_value(a, text, (size_t)n), a) != 0)
            return NULL;
    }
    if (d->hits_addend &&
        put_field(v->struct_value, "hitsAddend", number_value(a, d->hits_addend->value), a) != 0)
        return NULL;
    return v;
}

/* upstream's dynamic_metadata: {domain, descriptors, hitsAddend (when not 0), metadata (of the
 * limits of the descriptors that passed, merged in their order, when there is any)}. */
static pb_struct *dynamic_metadata(const rld_rls_request *req, const rld_ystatus *st,
                                   rld_arena *a)
{
    pb_struct *out = new_struct(a), *passed = new_struct(a);
    pb_value *descs = list_value(a, req->n_descriptors);
    if (!out || !passed || !descs ||
        put_field(out, "domain", string_value(a, req->domain, strlen(req->domain)), a) != 0)
        return NULL;
    for (size_t i = 0; i < req->n_descriptors; i++) {
        pb_value *d = descriptor_value(req->descriptors[i], a);
        if (!d)
            return NULL;
        descs->list_value->values[descs->list_value->n_values++] = d;
        /* passed: not unlimited and not OVER_LIMIT; the metadata is its limit's node's */
        if (!st[i].unlimited && st[i].code != RLD_YCODE_OVER_LIMIT && st[i].has_limit &&
            st[i].matched && st[i].matched->metadata &&
            merge_meta(passed, st[i].matched->metadata, a) != 0)
            return NULL;
    }
    if (put_field(out, "descriptors", descs, a) != 0)
        return NULL;
    if (req->hits_addend &&
        put_field(out, "hitsAddend", number_value(a, req->hits_addend), a) != 0)
        return NULL;
    if (passed->n_fields) {
        pb_value *m = new_value(a, GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);
        if (!m)
            return NULL;
        m->struct_value = passed;
        if (put_field(out, "metadata", m, a) != 0)
            return NULL;
    }
    return out;
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
        upstream_headers(resp, y, st, req->n_descriptors, a) != 0 ||
        (rld_yrls_dynamic_metadata(y) &&
         !(resp->dynamic_metadata = dynamic_metadata(req, st, a))))
        return rl_errf(err, RLD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    return RLD_GRPC_OK;
}

void rld_yrls_failed(void *cls, rld_grpc_code code)
{
    rld_yrls_call_error(cls, code == RLD_GRPC_UNAVAILABLE);
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
