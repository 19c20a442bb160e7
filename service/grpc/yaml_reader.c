/*
 * yaml_reader.c - envoyproxy/ratelimit's YAML configuration read with libyaml's document API.
 *
 * Scalars are typed as its YAML library types them (YAML 1.1: "yes" and "on" are true, a
 * plain 5 is an integer, any scalar can stand for a string). Each mapping kind has its own
 * table of fields, so a misspelt or misplaced key is refused where it is; the checks on
 * values are the ones envoyproxy/ratelimit makes, with its words, prefixed by the YAML path.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "app/file.h"
#include "yaml_reader.h"

static const struct {
    const char *name;
    int64_t seconds;
} units[] = {
    [RLD_UNIT_UNKNOWN] = {"UNKNOWN", 0},     [RLD_UNIT_SECOND] = {"SECOND", 1},
    [RLD_UNIT_MINUTE] = {"MINUTE", 60},      [RLD_UNIT_HOUR] = {"HOUR", 3600},
    [RLD_UNIT_DAY] = {"DAY", 86400},         [RLD_UNIT_MONTH] = {"MONTH", 86400 * 30},
    [RLD_UNIT_YEAR] = {"YEAR", 86400 * 365}, [RLD_UNIT_WEEK] = {"WEEK", 86400 * 7},
};
#define NUNITS (sizeof units / sizeof units[0])

int64_t rld_unit_seconds(int unit)
{
    return unit > 0 && (size_t)unit < NUNITS ? units[unit].seconds : 0;
}

rld_unit rld_unit_of_limit(rl_fp limit, rl_ns window, uint32_t *per_unit)
{
    __extension__ typedef unsigned __int128 u128;
    static const rld_unit order[] = {RLD_UNIT_SECOND, RLD_UNIT_MINUTE, RLD_UNIT_HOUR,
                                     RLD_UNIT_DAY, RLD_UNIT_WEEK};
    uint64_t whole = limit > 0 ? (uint64_t)(limit / RL_FP_ONE) : 0;
    *per_unit = whole > UINT32_MAX ? UINT32_MAX : (uint32_t)whole;
    if (window <= 0 || limit <= 0)
        return RLD_UNIT_UNKNOWN;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        /* limit (fp) * unit (ns) / (window (ns) * RL_FP_ONE) */
        u128 num = (u128)limit * (uint64_t)(rld_unit_seconds(order[i]) * RL_NS_PER_SEC);
        u128 den = (u128)window * RL_FP_ONE;
        if (num % den == 0 && num / den > 0) {
            u128 q = num / den;
            *per_unit = q > UINT32_MAX ? UINT32_MAX : (uint32_t)q;
            return order[i];
        }
    }
    return RLD_UNIT_UNKNOWN;
}

const char *rld_unit_name(int unit)
{
    return unit > 0 && (size_t)unit < NUNITS ? units[unit].name : "UNKNOWN";
}

rld_unit rld_unit_parse(const char *s)
{
    for (size_t u = 1; u < NUNITS; u++)
        if (strcasecmp(s, units[u].name) == 0)
            return (rld_unit)u;
    return RLD_UNIT_UNKNOWN;
}

/* ---- scalars as YAML 1.1 types them ------------------------------------------------------ */

typedef enum stype { S_STR, S_NULL, S_BOOL, S_INT, S_FLOAT } stype;

static int in_list(const char *s, const char *const *v)
{
    for (; *v; v++)
        if (strcmp(s, *v) == 0)
            return 1;
    return 0;
}

static const char *const trues[] = {"y",    "Y",    "yes", "Yes", "YES", "true",
                                    "True", "TRUE", "on",  "On",  "ON",  NULL};
static const char *const falses[] = {"n",     "N",     "no",  "No",  "NO",  "false",
                                     "False", "FALSE", "off", "Off", "OFF", NULL};

static int is_int(const char *s)
{
    if (*s == '+' || *s == '-')
        s++;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'b' || s[1] == 'o') && s[2])
        s += 2;
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || *s == '_' || (*s >= 'a' && *s <= 'f') ||
              (*s >= 'A' && *s <= 'F')))
            return 0;
    return 1;
}

static int is_float(const char *s)
{
    static const char *const special[] = {".inf",  ".Inf", ".INF", "-.inf", "+.inf", "-.Inf",
                                          "+.Inf", ".nan", ".NaN", ".NAN",  NULL};
    if (in_list(s, special))
        return 1;
    char *end;
    errno = 0;
    (void)strtod(s, &end);
    return *s && !*end && (strchr(s, '.') || strchr(s, 'e') || strchr(s, 'E'));
}

static stype scalar_type(const yaml_node_t *n)
{
    const char *tag = (const char *)n->tag;
    const char *s = (const char *)n->data.scalar.value;
    if (tag && strcmp(tag, YAML_DEFAULT_SCALAR_TAG) != 0)
        return strcmp(tag, YAML_NULL_TAG) == 0    ? S_NULL
               : strcmp(tag, YAML_BOOL_TAG) == 0  ? S_BOOL
               : strcmp(tag, YAML_INT_TAG) == 0   ? S_INT
               : strcmp(tag, YAML_FLOAT_TAG) == 0 ? S_FLOAT
                                                  : S_STR;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return S_STR;
    if (!*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
        strcmp(s, "NULL") == 0)
        return S_NULL;
    if (in_list(s, trues) || in_list(s, falses))
        return S_BOOL;
    if (is_int(s))
        return S_INT;
    if (is_float(s))
        return S_FLOAT;
    return S_STR;
}

/* ---- the walk --------------------------------------------------------------------------- */

typedef struct walk {
    yaml_document_t *doc;
    const char *file;
    rl_err *err;
    char path[512];
    size_t plen;
} walk;

static int fail(walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(walk *w, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (w->plen)
        return rl_errf(w->err, RL_EINVAL, "%s: %s: %s", w->file, w->path, msg);
    return rl_errf(w->err, RL_EINVAL, "%s: %s", w->file, msg);
}

/* Appends ".name" or "[i]" to the path; returns the length to restore. */
static size_t push(walk *w, const char *name, long index)
{
    size_t old = w->plen;
    int n = index >= 0 ? snprintf(w->path + w->plen, sizeof w->path - w->plen, "[%ld]", index)
                       : snprintf(w->path + w->plen, sizeof w->path - w->plen, "%s%s",
                                  w->plen ? "." : "", name);
    if (n > 0)
        w->plen = w->plen + (size_t)n < sizeof w->path ? w->plen + (size_t)n : sizeof w->path - 1;
    return old;
}

static void pop(walk *w, size_t old)
{
    w->plen = old;
    w->path[old] = '\0';
}

static const char *sval(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

/* A string field: any scalar; null leaves *out NULL. */
static int get_string(walk *w, const yaml_node_t *n, char **out)
{
    if (n->type != YAML_SCALAR_NODE)
        return fail(w, "must be a string");
    if (scalar_type(n) == S_NULL)
        return 0;
    if (!(*out = strdup(sval(n))))
        return rl_errf(w->err, RL_ENOMEM, "out of memory");
    return 0;
}

static int get_bool(walk *w, const yaml_node_t *n, int *out)
{
    stype t = n->type == YAML_SCALAR_NODE ? scalar_type(n) : S_STR;
    if (t == S_NULL)
        return *out = 0;
    if (t != S_BOOL || !(in_list(sval(n), trues) || in_list(sval(n), falses)))
        return fail(w, "must be true or false");
    *out = in_list(sval(n), trues);
    return 0;
}

static int get_u32(walk *w, const yaml_node_t *n, uint32_t *out)
{
    stype t = n->type == YAML_SCALAR_NODE ? scalar_type(n) : S_STR;
    if (t == S_NULL)
        return *out = 0;
    const char *s = t == S_INT ? sval(n) : "";
    unsigned long long v = 0;
    int ok = *s != '\0';
    for (; ok && *s; s++) {
        if (*s == '_')
            continue;
        ok = *s >= '0' && *s <= '9' && (v = v * 10 + (unsigned)(*s - '0')) <= 4294967295ull;
    }
    if (!ok)
        return fail(w, "must be a whole number from 0 to 4294967295");
    *out = (uint32_t)v;
    return 0;
}

/* Calls fn for each key of a mapping with w->path extended by the key. Keys must be strings,
 * given once, and known to fields (a NULL-terminated list). */
typedef int (*field_fn)(walk *w, const char *key, const yaml_node_t *val, void *ctx);

static int each_field(walk *w, const yaml_node_t *n, const char *const *fields, field_fn fn,
                      void *ctx)
{
    if (n->type != YAML_MAPPING_NODE)
        return fail(w, "must be a mapping");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
        if (k->type != YAML_SCALAR_NODE || scalar_type(k) != S_STR)
            return fail(w, "config error, key is not of type string: %s",
                        k->type == YAML_SCALAR_NODE ? sval(k) : "(a collection)");
        if (!in_list(sval(k), fields))
            return fail(w, "config error, unknown key '%s'", sval(k));
        for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++)
            if (strcmp(sval(yaml_document_get_node(w->doc, q->key)), sval(k)) == 0)
                return fail(w, "key '%s' is given twice", sval(k));
        size_t old = push(w, sval(k), -1);
        int rc = fn(w, sval(k), v, ctx);
        if (rc)
            return rc;
        pop(w, old);
    }
    return 0;
}

/* ---- rate_limit -------------------------------------------------------------------------- */

typedef struct limit_ctx {
    rld_ylimit *l;
    char *unit;
    int unit_given;
} limit_ctx;

static int replaces_field(walk *w, const char *key, const yaml_node_t *v, void *ctx)
{
    (void)key;
    return get_string(w, v, ctx);
}

static int get_replaces(walk *w, const yaml_node_t *n, rld_ylimit *l)
{
    static const char *const fields[] = {"name", NULL};
    if (n->type == YAML_SCALAR_NODE && scalar_type(n) == S_NULL)
        return 0;
    if (n->type != YAML_SEQUENCE_NODE)
        return fail(w, "must be a list");
    size_t count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (count && !(l->replaces = calloc(count, sizeof *l->replaces)))
        return rl_errf(w->err, RL_ENOMEM, "out of memory");
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *e = yaml_document_get_node(w->doc, n->data.sequence.items.start[i]);
        size_t old = push(w, NULL, (long)i);
        char *name = NULL;
        if (e->type != YAML_MAPPING_NODE)
            return fail(w, "config error, yaml file contains list of type other than map: %s",
                        e->type == YAML_SCALAR_NODE ? sval(e) : "(a list)");
        int rc = each_field(w, e, fields, replaces_field, &name);
        l->replaces[l->nreplaces++] = name;
        if (rc)
            return rc;
        if (!name || !*name)
            return fail(w, "should not have an empty replaces entry");
        pop(w, old);
    }
    return 0;
}

static int limit_field(walk *w, const char *key, const yaml_node_t *v, void *ctx)
{
    limit_ctx *lc = ctx;
    if (strcmp(key, "requests_per_unit") == 0)
        return get_u32(w, v, &lc->l->requests_per_unit);
    if (strcmp(key, "unit") == 0)
        return get_string(w, v, &lc->unit);
    if (strcmp(key, "unlimited") == 0)
        return get_bool(w, v, &lc->l->unlimited);
    if (strcmp(key, "name") == 0)
        return get_string(w, v, &lc->l->name);
    if (strcmp(key, "algorithm") == 0)
        return get_string(w, v, &lc->l->algorithm);
    return get_replaces(w, v, lc->l);
}

static int get_limit(walk *w, const yaml_node_t *n, rld_ydesc *d)
{
    static const char *const fields[] = {"requests_per_unit", "unit",      "unlimited", "name",
                                         "replaces",          "algorithm", NULL};
    limit_ctx lc = {.l = &d->limit};
    if (n->type == YAML_SCALAR_NODE && scalar_type(n) == S_NULL)
        return 0;
    d->has_limit = 1;
    int rc = each_field(w, n, fields, limit_field, &lc);
    if (rc == 0) {
        rld_unit u = lc.unit ? rld_unit_parse(lc.unit) : RLD_UNIT_UNKNOWN;
        size_t old = push(w, "unit", -1);
        if (d->limit.unlimited && u != RLD_UNIT_UNKNOWN)
            rc = fail(w, "should not specify rate limit unit when unlimited");
        else if (!d->limit.unlimited && u == RLD_UNIT_UNKNOWN)
            rc = fail(w, "invalid rate limit unit '%s'", lc.unit ? lc.unit : "");
        pop(w, old);
        d->limit.unit = u;
    }
    for (size_t i = 0; rc == 0 && i < d->limit.nreplaces; i++)
        if (d->limit.name && strcmp(d->limit.replaces[i], d->limit.name) == 0) {
            size_t old = push(w, "replaces", -1);
            push(w, NULL, (long)i);
            rc = fail(w, "replaces should not contain name of same descriptor");
            pop(w, old);
        }
    free(lc.unit);
    return rc;
}

/* ---- descriptors ------------------------------------------------------------------------- */

typedef struct list_ctx {
    rld_ydomain *dom;
    const char *parent; /* composite key of the parent, "domain." or "domain.k_v." */
} list_ctx;

static int get_descriptors(walk *w, const yaml_node_t *n, list_ctx *lc, rld_ydesc **out,
                           size_t *nout);

static void free_meta(rld_ymeta *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free_meta(&m->v[i]);
        if (m->keys)
            free(m->keys[i]);
    }
    free(m->keys);
    free(m->v);
    free(m->s);
}

/* A YAML value as JSON would hold it: mappings (string keys) are structs, sequences lists,
 * scalars by their type (numbers as doubles, as google.protobuf.Value holds them). */
static int get_meta(walk *w, const yaml_node_t *n, rld_ymeta *m, int depth)
{
    if (depth > 32)
        return fail(w, "nested more than 32 deep");
    if (n->type == YAML_SCALAR_NODE) {
        switch (scalar_type(n)) {
        case S_NULL:
            m->type = RLD_YMETA_NULL;
            return 0;
        case S_BOOL:
            m->type = RLD_YMETA_BOOL;
            m->b = in_list(sval(n), trues);
            return 0;
        case S_INT:
        case S_FLOAT:
            m->type = RLD_YMETA_NUMBER;
            m->number = strtod(sval(n), NULL);
            return 0;
        default:
            m->type = RLD_YMETA_STRING;
            return (m->s = strdup(sval(n))) ? 0 : rl_errf(w->err, RL_ENOMEM, "out of memory");
        }
    }
    int map = n->type == YAML_MAPPING_NODE;
    size_t count = map ? (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start)
                       : (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    m->type = map ? RLD_YMETA_STRUCT : RLD_YMETA_LIST;
    if (count && (!(m->v = calloc(count, sizeof *m->v)) ||
                  (map && !(m->keys = calloc(count, sizeof *m->keys)))))
        return rl_errf(w->err, RL_ENOMEM, "out of memory");
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *k = NULL, *v;
        if (map) {
            k = yaml_document_get_node(w->doc, n->data.mapping.pairs.start[i].key);
            v = yaml_document_get_node(w->doc, n->data.mapping.pairs.start[i].value);
            if (k->type != YAML_SCALAR_NODE)
                return fail(w, "a key must be a string");
        } else {
            v = yaml_document_get_node(w->doc, n->data.sequence.items.start[i]);
        }
        size_t old = push(w, map ? sval(k) : NULL, map ? -1 : (long)i);
        m->n = i + 1;
        if (map && !(m->keys[i] = strdup(sval(k))))
            return rl_errf(w->err, RL_ENOMEM, "out of memory");
        for (size_t j = 0; map && j < i; j++)
            if (strcmp(m->keys[j], m->keys[i]) == 0)
                return fail(w, "key '%s' is given twice", m->keys[i]);
        int rc = get_meta(w, v, &m->v[i], depth + 1);
        if (rc)
            return rc;
        pop(w, old);
    }
    return 0;
}

typedef struct desc_ctx {
    rld_ydesc *d;
    const yaml_node_t *children;
    const yaml_node_t *limit;
} desc_ctx;

static int desc_field(walk *w, const char *key, const yaml_node_t *v, void *ctx)
{
    desc_ctx *dc = ctx;
    rld_ydesc *d = dc->d;
    if (strcmp(key, "key") == 0)
        return get_string(w, v, &d->key);
    if (strcmp(key, "value") == 0)
        return get_string(w, v, &d->value);
    if (strcmp(key, "shadow_mode") == 0)
        return get_bool(w, v, &d->shadow_mode);
    if (strcmp(key, "detailed_metric") == 0)
        return get_bool(w, v, &d->detailed_metric);
    if (strcmp(key, "value_to_metric") == 0)
        return get_bool(w, v, &d->value_to_metric);
    if (strcmp(key, "share_threshold") == 0)
        return get_bool(w, v, &d->share_threshold);
    if (strcmp(key, "charge") == 0)
        return get_bool(w, v, &d->charge);
    if (strcmp(key, "quota_mode") == 0)
        return get_bool(w, v, &d->quota_mode);
    if (strcmp(key, "metadata") == 0) {
        if (v->type == YAML_SCALAR_NODE && scalar_type(v) == S_NULL)
            return 0;
        if (v->type != YAML_MAPPING_NODE)
            return fail(w, "must be a mapping");
        if (!(d->metadata = calloc(1, sizeof *d->metadata)))
            return rl_errf(w->err, RL_ENOMEM, "out of memory");
        return get_meta(w, v, d->metadata, 0);
    }
    if (strcmp(key, "descriptors") == 0)
        dc->children = v; /* read once the key and value are known */
    else if (strcmp(key, "rate_limit") == 0)
        dc->limit = v;
    return 0;
}

static int get_descriptor(walk *w, const yaml_node_t *n, list_ctx *lc, rld_ydesc *d)
{
    static const char *const fields[] = {
        "key",         "value",           "rate_limit",      "descriptors",
        "shadow_mode", "detailed_metric", "value_to_metric", "share_threshold",
        "quota_mode",  "metadata",        "charge",          NULL};
    desc_ctx dc = {.d = d};
    int rc;
    d->file = lc->dom->file;
    if (!(d->path = strdup(w->path)))
        return rl_errf(w->err, RL_ENOMEM, "out of memory");
    if (n->type != YAML_MAPPING_NODE)
        return fail(w, "config error, yaml file contains list of type other than map: %s",
                    n->type == YAML_SCALAR_NODE ? sval(n) : "(a list)");
    if ((rc = each_field(w, n, fields, desc_field, &dc)))
        return rc;
    if (!d->key || !*d->key)
        return fail(w, "descriptor has empty key");
    if (d->value && !*d->value) {
        free(d->value);
        d->value = NULL; /* as upstream: an empty value is no value */
    }
    d->wildcard = d->value && strchr(d->value, '*');
    if (d->share_threshold && !d->wildcard)
        return fail(w,
                    "share_threshold can only be used with wildcard values (containing '*'), "
                    "but found key '%s%s%s'",
                    d->key, d->value ? "_" : "", d->value ? d->value : "");
    if (dc.limit) {
        size_t old = push(w, "rate_limit", -1);
        if ((rc = get_limit(w, dc.limit, d)))
            return rc;
        pop(w, old);
        if (d->has_limit)
            d->id = lc->dom->nlimits++;
    }
    if (dc.children) {
        size_t plen = strlen(lc->parent), klen = strlen(d->key);
        size_t vlen = d->value ? strlen(d->value) + 1 : 0;
        char *parent = malloc(plen + klen + vlen + 2);
        if (!parent)
            return rl_errf(w->err, RL_ENOMEM, "out of memory");
        snprintf(parent, plen + klen + vlen + 2, "%s%s%s%s.", lc->parent, d->key,
                 d->value ? "_" : "", d->value ? d->value : "");
        list_ctx sub = {.dom = lc->dom, .parent = parent};
        size_t old = push(w, "descriptors", -1);
        rc = get_descriptors(w, dc.children, &sub, &d->children, &d->nchildren);
        free(parent);
        if (rc)
            return rc;
        pop(w, old);
    }
    return 0;
}

static int same_desc(const rld_ydesc *a, const rld_ydesc *b)
{
    return strcmp(a->key, b->key) == 0 &&
           (a->value == b->value || (a->value && b->value && strcmp(a->value, b->value) == 0));
}

static int get_descriptors(walk *w, const yaml_node_t *n, list_ctx *lc, rld_ydesc **out,
                           size_t *nout)
{
    if (n->type == YAML_SCALAR_NODE && scalar_type(n) == S_NULL)
        return 0;
    if (n->type != YAML_SEQUENCE_NODE)
        return fail(w, "must be a list");
    size_t count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (count && !(*out = calloc(count, sizeof **out)))
        return rl_errf(w->err, RL_ENOMEM, "out of memory");
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *e = yaml_document_get_node(w->doc, n->data.sequence.items.start[i]);
        rld_ydesc *d = &(*out)[i];
        size_t old = push(w, NULL, (long)i);
        *nout = i + 1;
        int rc = get_descriptor(w, e, lc, d);
        if (rc)
            return rc;
        for (size_t j = 0; j < i; j++)
            if (same_desc(&(*out)[j], d))
                return fail(w, "duplicate descriptor composite key '%s%s%s%s'", lc->parent, d->key,
                            d->value ? "_" : "", d->value ? d->value : "");
        pop(w, old);
    }
    return 0;
}

/* ---- files ------------------------------------------------------------------------------- */

static void free_desc(rld_ydesc *d)
{
    for (size_t i = 0; i < d->nchildren; i++)
        free_desc(&d->children[i]);
    free(d->children);
    free(d->key);
    free(d->value);
    free(d->path);
    free(d->limit.name);
    free(d->limit.algorithm);
    for (size_t i = 0; i < d->limit.nreplaces; i++)
        free(d->limit.replaces[i]);
    free(d->limit.replaces);
    if (d->metadata)
        free_meta(d->metadata);
    free(d->metadata);
}

static void free_domain(rld_ydomain *dom)
{
    for (size_t i = 0; i < dom->nchildren; i++)
        free_desc(&dom->children[i]);
    free(dom->children);
    free(dom->domain);
    free(dom->file);
    for (size_t i = 0; i < dom->nmerged; i++)
        free(dom->merged[i]);
    free(dom->merged);
}

typedef struct root_ctx {
    rld_ydomain *dom;
    const yaml_node_t *descriptors;
} root_ctx;

static int root_field(walk *w, const char *key, const yaml_node_t *v, void *ctx)
{
    root_ctx *rc = ctx;
    if (strcmp(key, "domain") == 0)
        return get_string(w, v, &rc->dom->domain);
    rc->descriptors = v;
    return 0;
}

/* Reads one file's domain into dom; *into is the domain of an earlier file it is merged into
 * (MERGE_DOMAIN_CONFIG), else NULL. Limits of a merged file are numbered after the earlier
 * files' ones. */
static int read_root(walk *w, rld_yconf *c, rld_ydomain *dom, rld_ydomain **into)
{
    static const char *const fields[] = {"domain", "descriptors", NULL};
    const yaml_node_t *root = yaml_document_get_root_node(w->doc);
    root_ctx ctx = {.dom = dom};
    int rc;
    if (root && !(root->type == YAML_SCALAR_NODE && scalar_type(root) == S_NULL) &&
        (rc = each_field(w, root, fields, root_field, &ctx)))
        return rc;
    size_t at = push(w, "domain", -1);
    if (!dom->domain || !*dom->domain)
        return fail(w, "config file cannot have empty domain");
    *into = NULL;
    for (size_t i = 0; i < c->ndomains; i++)
        if (strcmp(c->domains[i].domain, dom->domain) == 0) {
            if (!c->merge_domains)
                return fail(w, "duplicate domain '%s' in config file", dom->domain);
            *into = &c->domains[i];
            dom->nlimits = (*into)->nlimits;
        }
    pop(w, at);
    if (!ctx.descriptors)
        return 0;
    char *parent = malloc(strlen(dom->domain) + 2);
    if (!parent)
        return rl_errf(w->err, RL_ENOMEM, "out of memory");
    sprintf(parent, "%s.", dom->domain);
    list_ctx lc = {.dom = dom, .parent = parent};
    size_t old = push(w, "descriptors", -1);
    rc = get_descriptors(w, ctx.descriptors, &lc, &dom->children, &dom->nchildren);
    /* merged, the earlier files' descriptors are siblings: the same composite key is refused */
    for (size_t i = 0; !rc && *into && i < dom->nchildren; i++)
        for (size_t j = 0; !rc && j < (*into)->nchildren; j++)
            if (same_desc(&dom->children[i], &(*into)->children[j])) {
                push(w, NULL, (long)i);
                rc = fail(w, "duplicate descriptor composite key '%s%s%s%s'", parent,
                          dom->children[i].key, dom->children[i].value ? "_" : "",
                          dom->children[i].value ? dom->children[i].value : "");
            }
    free(parent);
    if (!rc)
        pop(w, old);
    return rc;
}

/* Appends the descriptors of dom (a later file of into's domain) to into; dom is emptied. */
static int merge_domain(rld_ydomain *into, rld_ydomain *dom, rl_err *err)
{
    rld_ydesc *v = realloc(into->children, (into->nchildren + dom->nchildren + 1) * sizeof *v);
    char **f = realloc(into->merged, (into->nmerged + 1) * sizeof *f);
    if (v)
        into->children = v;
    if (f)
        into->merged = f;
    if (!v || !f)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    if (dom->nchildren)
        memcpy(v + into->nchildren, dom->children, dom->nchildren * sizeof *v);
    into->nchildren += dom->nchildren;
    into->nlimits = dom->nlimits;
    into->merged[into->nmerged++] = dom->file; /* the merged descriptors borrow it */
    free(dom->children);
    free(dom->domain);
    *dom = (rld_ydomain){0};
    return RL_OK;
}

int rld_yaml_parse(rld_yconf *c, const char *name, const char *text, size_t len, rl_err *err)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    rld_ydomain dom = {0};
    int rc;
    if (!yaml_parser_initialize(&parser))
        return rl_errf(err, RL_ENOMEM, "out of memory");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        rc = rl_errf(err, RL_EINVAL, "%s: error loading config file: line %zu, column %zu: %s%s%s",
                     name, parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                     parser.problem ? parser.problem : "malformed YAML", parser.context ? " " : "",
                     parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return rc;
    }
    walk w = {.doc = &doc, .file = name, .err = err};
    rld_ydomain *into = NULL;
    if (!(dom.file = strdup(name)))
        rc = rl_errf(err, RL_ENOMEM, "out of memory");
    else
        rc = read_root(&w, c, &dom, &into);
    if (!rc && into)
        rc = merge_domain(into, &dom, err);
    rld_ydomain *v = rc || into ? NULL : realloc(c->domains, (c->ndomains + 1) * sizeof *v);
    if (!rc && !into && !v)
        rc = rl_errf(err, RL_ENOMEM, "out of memory");
    if (rc) {
        free_domain(&dom);
    } else if (!into) {
        c->domains = v;
        c->domains[c->ndomains++] = dom;
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

static int parse_file(rld_yconf *c, const char *path, const char *name, rl_err *err)
{
    size_t len;
    char *text = rld_read_file(path, &len);
    if (!text)
        return rl_errf(err, RL_EIO, "%s: %s", name, strerror(errno));
    int rc = rld_yaml_parse(c, name, text, len, err);
    free(text);
    return rc;
}

static int yaml_name(const char *s)
{
    size_t n = strlen(s);
    return (n > 5 && strcmp(s + n - 5, ".yaml") == 0) || (n > 4 && strcmp(s + n - 4, ".yml") == 0);
}

int rld_yaml_is_config(const char *path)
{
    struct stat st;
    return yaml_name(path) || (stat(path, &st) == 0 && S_ISDIR(st.st_mode));
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int parse_dir(rld_yconf *c, const char *dir, rl_err *err)
{
    DIR *d = opendir(dir);
    char **names = NULL;
    size_t n = 0;
    int rc = 0;
    if (!d)
        return rl_errf(err, RL_EIO, "%s: %s", dir, strerror(errno));
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (e->d_name[0] == '.' || !yaml_name(e->d_name))
            continue;
        char **v = realloc(names, (n + 1) * sizeof *v);
        if (!v || !(v[n] = strdup(e->d_name)))
            rc = rl_errf(err, RL_ENOMEM, "out of memory");
        if (v) {
            names = v;
            n += rc == 0;
        }
    }
    closedir(d);
    if (rc == 0 && n == 0)
        rc = rl_errf(err, RL_EINVAL, "%s: no .yaml or .yml files", dir);
    if (n)
        qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (rc == 0)
            rc = parse_file(c, path, path, err);
        free(names[i]);
    }
    free(names);
    return rc;
}

rld_yconf *rld_yconf_new(void)
{
    return calloc(1, sizeof(rld_yconf));
}

int rld_yaml_load(const char *path, rld_yconf **out, rl_err *err)
{
    return rld_yaml_load_merging(path, 0, out, err);
}

int rld_yaml_load_merging(const char *path, int merge_domains, rld_yconf **out, rl_err *err)
{
    struct stat st;
    rld_yconf *c = rld_yconf_new();
    *out = NULL;
    if (!c)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    c->merge_domains = merge_domains;
    int rc = stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? parse_dir(c, path, err)
                                                         : parse_file(c, path, path, err);
    if (rc) {
        rld_yconf_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void rld_yconf_free(rld_yconf *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->ndomains; i++)
        free_domain(&c->domains[i]);
    free(c->domains);
    free(c);
}

const rld_ydomain *rld_yconf_domain(const rld_yconf *c, const char *name, size_t len)
{
    for (size_t i = 0; i < c->ndomains; i++)
        if (strlen(c->domains[i].domain) == len && memcmp(c->domains[i].domain, name, len) == 0)
            return &c->domains[i];
    return NULL;
}
