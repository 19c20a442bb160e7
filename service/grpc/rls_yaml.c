/*
 * rls_yaml.c - the YAML configuration's matcher and its decisions over one keyed level.
 *
 * A key names what is counted, readable in Redis and parsed back when a store asks for the
 * rules of a stored key: "<domain>|<key>=<value>|<key>=<value>[#<rpu>/<UNIT>]", with '%', '|',
 * '=' and '#' inside names and values written as %XX; the "#" part marks a limit override,
 * which counts on its own (a fixed window of the override's numbers).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rls_yaml.h"

#define MAX_OVERRIDES 256
#define KEY_MAX RL_COMPOSED_MAX

typedef struct override {
    uint32_t rpu;
    int unit;
    rl_rules *rules;
} override;

/* envoyproxy/ratelimit's statistics of a limit, as it counts them. */
enum { ST_TOTAL, ST_OVER, ST_NEAR, ST_WITHIN, ST_SHADOW, NSTATS };
static const char *const stat_names[NSTATS] = {"total_hits", "over_limit", "near_limit",
                                               "within_limit", "shadow_mode"};
static const char *const stat_help[NSTATS] = {
    "Hits on the limit (its hits_addend summed)", "Hits over the limit",
    "Hits over 80% of the limit and within it",   "Hits within the limit",
    "Hits over a shadow_mode limit, let through",
};

typedef struct ystat {
    uint64_t v[NSTATS];
} ystat;

/* Statistics of keys made per request (detailed_metric, value_to_metric, overrides): a
 * bounded table; past it they count under the configured key, or "overflow" for overrides. */
#define DYN_MAX 1024
typedef struct dynstat {
    size_t dom;
    char *key;
    ystat s;
} dynstat;

typedef struct ydom {
    rl_rules **rules; /* by rld_ydesc.id; NULL for an unlimited one */
    char **stat_key;  /* by id: the configured key, "message_type_marketing.to_number" */
    ystat *stats;     /* by id */
    ystat overflow;   /* overrides past DYN_MAX */
} ydom;

struct rld_yrls {
    size_t level; /* the keyed level's index: after the native levels decided beside */
    rld_yconf *conf;
    rl_registry *reg;
    ydom *doms; /* parallel to conf->domains */
    pthread_mutex_t mu;
    size_t ndyn;
    dynstat dyn[DYN_MAX];
    size_t noverrides;
    override overrides[MAX_OVERRIDES];
    int global_shadow;
    int global_quota; /* QUOTA_MODE: every limit in quota mode */
    uint64_t global_shadow_hits; /* requests whose OVER_LIMIT the global shadow mode let pass */
    uint64_t load_errors;        /* reloads refused (a YAML configuration loads at start only) */
    uint64_t call_errors[2];     /* calls answered with an error: the store's, any other */
    char *extra;                 /* EXTRA_TAGS as labels: ",region=\"us\",zone=\"a\"", or NULL */
    int upstream_headers;
    int dynamic_metadata; /* RESPONSE_DYNAMIC_METADATA */
    char header[3][64]; /* envoyproxy/ratelimit's limit, remaining and reset header names */
};

void rld_yrls_set_upstream_headers(rld_yrls *y, const char *limit, const char *remaining,
                                   const char *reset)
{
    const char *v[3] = {limit, remaining, reset};
    y->upstream_headers = 1;
    for (int i = 0; i < 3; i++)
        snprintf(y->header[i], sizeof y->header[i], "%s", v[i]);
}

void rld_yrls_set_global_shadow(rld_yrls *y)
{
    y->global_shadow = 1;
    for (size_t i = 0; i < y->conf->ndomains; i++)
        for (size_t k = 0; k < y->conf->domains[i].nlimits; k++)
            if (y->doms[i].rules[k])
                y->doms[i].rules[k]->v[0].shadow = 1;
}

void rld_yrls_set_global_quota(rld_yrls *y)
{
    y->global_quota = 1;
    for (size_t i = 0; i < y->conf->ndomains; i++)
        for (size_t k = 0; k < y->conf->domains[i].nlimits; k++)
            if (y->doms[i].rules[k])
                y->doms[i].rules[k]->v[0].shadow = 1;
}

static int label_name_ok(const char *s, size_t n)
{
    if (n == 0 || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9')))
            return 0;
    return 1;
}

static int reserved_label(const char *s, size_t n)
{
    if (n == 6 && memcmp(s, "domain", 6) == 0)
        return 1;
    if (n < 4 || memcmp(s, "key", 3) != 0)
        return 0;
    for (size_t i = 3; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

static void label_value(rld_buf *out, const char *s, size_t n);

int rld_yrls_set_extra_tags(rld_yrls *y, const char *spec, rl_err *err)
{
    char buf[4096];
    rld_buf b;
    int rc = RL_OK;
    rld_buf_init(&b, buf, sizeof buf);
    for (const char *p = spec; p && rc == RL_OK;) {
        const char *end = strchr(p, ','), *colon;
        size_t n = end ? (size_t)(end - p) : strlen(p);
        colon = memchr(p, ':', n);
        if (!colon)
            rc = rl_errf(err, RL_EINVAL, "EXTRA_TAGS: '%.*s' is not <name>:<value>", (int)n, p);
        else if (!label_name_ok(p, (size_t)(colon - p)))
            rc = rl_errf(err, RL_EINVAL, "EXTRA_TAGS: '%.*s' is not a Prometheus label name "
                         "([a-zA-Z_][a-zA-Z0-9_]*)", (int)(colon - p), p);
        else if (reserved_label(p, (size_t)(colon - p)))
            rc = rl_errf(err, RL_EINVAL, "EXTRA_TAGS: '%.*s' is a label of the statistics "
                         "themselves (domain, key1, key2, ...)", (int)(colon - p), p);
        for (const char *q = spec; rc == RL_OK && colon && q < p;) {
            const char *qe = strchr(q, ','), *qc = strchr(q, ':');
            if ((size_t)(qc - q) == (size_t)(colon - p) && memcmp(q, p, (size_t)(qc - q)) == 0)
                rc = rl_errf(err, RL_EINVAL, "EXTRA_TAGS: '%.*s' is given twice",
                             (int)(colon - p), p);
            q = qe + 1;
        }
        if (rc == RL_OK) {
            rld_buf_printf(&b, ",%.*s=\"", (int)(colon - p), p);
            label_value(&b, colon + 1, n - (size_t)(colon - p) - 1);
            rld_buf_putc(&b, '"');
        }
        p = end ? end + 1 : NULL;
    }
    if (rc == RL_OK && b.oom)
        rc = rl_errf(err, RL_EINVAL, "EXTRA_TAGS: longer than %zu bytes", sizeof buf / 2);
    if (rc == RL_OK && b.len) {
        free(y->extra);
        if (!(y->extra = strndup(b.p, b.len)))
            rc = rl_errf(err, RL_ENOMEM, "out of memory");
    }
    rld_buf_reset(&b);
    return rc;
}

void rld_yrls_set_dynamic_metadata(rld_yrls *y)
{
    y->dynamic_metadata = 1;
}

int rld_yrls_dynamic_metadata(const rld_yrls *y)
{
    return y->dynamic_metadata;
}

void rld_yrls_load_error(rld_yrls *y)
{
    __atomic_add_fetch(&y->load_errors, 1, __ATOMIC_RELAXED);
}

int rld_yrls_upstream_headers(const rld_yrls *y, const char *names[3])
{
    for (int i = 0; y->upstream_headers && i < 3; i++)
        names[i] = y->header[i];
    return y->upstream_headers;
}

/* ---- rules from limits --------------------------------------------------------------------- */

/* The rule type a limit names in its algorithm (NULL: the first registered type whose windows
 * are aligned as upstream's, envoyproxy/ratelimit's own algorithm): one that takes a limit of n
 * per unit (rl_rule_per_unit); NULL when there is none, with err naming those there are. */
static const rl_rule_type *per_unit_type(const rl_registry *reg, const char *algorithm, rl_err *err)
{
    char names[512];
    size_t used = 0;
    names[0] = '\0';
    for (size_t i = 0; i < rl_registry_count(reg); i++) {
        const rl_rule_type *t = rl_registry_at(reg, i);
        const rl_rule_per_unit *pu = rl_rule_type_per_unit(t);
        if (!pu)
            continue;
        if (algorithm ? strcmp(t->name, algorithm) == 0 : pu->aligned)
            return t;
        if (used < sizeof names)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "",
                                     t->name);
    }
    if (!algorithm)
        rl_errf(err, RL_EINVAL, "algorithm: no rule type counts in aligned windows");
    else
        rl_errf(err, RL_EINVAL, "algorithm: '%s' is not one of %s", algorithm, names);
    return NULL;
}

/* A readable rule name from the composite key ("messaging.message_type_marketing.to_number"):
 * printable, without '"' or '\\', at most 128 bytes. */
static void rule_name(char *out, size_t len, const char *composite)
{
    size_t n = 0;
    for (const char *p = composite; *p && n + 1 < len && n < 128; p++)
        out[n++] = (*p < 0x20 || *p == 0x7f || *p == '"' || *p == '\\') ? '_' : *p;
    out[n] = '\0';
}

/* One rule of n per unit with the given algorithm; a limit of 0 denies every hit (the default
 * type holding one millionth of a hit: any whole hit is too large for it). */
static int make_rules(rl_registry *reg, const char *algorithm, uint32_t n, int unit,
                      const char *name, rl_rules **out, rl_err *err)
{
    const rl_rule_type *t = per_unit_type(reg, algorithm, err);
    int64_t secs = rld_unit_seconds(unit);
    rl_rules *rs;
    rl_rule *r;
    int rc;
    if (t && n == 0)
        t = per_unit_type(reg, NULL, err);
    if (!t)
        return RL_EINVAL;
    const rl_rule_per_unit *pu = rl_rule_type_per_unit(t);
    if (!(rs = rl_rules_new(1)))
        return rl_errf(err, RL_ENOMEM, "out of memory");
    r = &rs->v[0];
    double amount = n ? (double)n : 1e-6;
    if ((rc = rl_rule_init(r, reg, t->name, err)) == RL_OK &&
        (rc = rl_rule_set_number(r, pu->amount, amount, err)) == RL_OK && pu->window)
        rc = rl_rule_set_number(r, pu->window, (double)secs, err);
    if (rc == RL_OK && pu->rate)
        rc = rl_rule_set_number(r, pu->rate, amount / (double)secs, err);
    if (rc == RL_OK)
        rc = rl_rule_set_unit(r, "cost", err);
    if (rc == RL_OK && name)
        rc = rl_rule_set_name(r, name, err);
    if (rc == RL_OK)
        rc = rl_rule_finish(r, err);
    if (rc != RL_OK) {
        rl_rules_unref(rs);
        return rc;
    }
    *out = rs;
    return RL_OK;
}

/* Puts "<file>: <path>.rate_limit: " in front of err's message. */
static int prefix(rl_err *err, int rc, const char *file, const char *path)
{
    char msg[sizeof err->msg];
    memcpy(msg, err->msg, sizeof msg);
    int n = snprintf(err->msg, sizeof err->msg, "%.200s: %.80s.rate_limit: ", file, path);
    if (n > 0 && (size_t)n < sizeof err->msg)
        snprintf(err->msg + n, sizeof err->msg - (size_t)n, "%.200s", msg);
    return rc;
}

typedef struct build {
    rld_yrls *y;
    ydom *dom;
    const char *domain;
    rl_err *err;
} build;

static int build_tree(build *b, const rld_ydesc *v, size_t n, const char *parent)
{
    for (size_t i = 0; i < n; i++) {
        const rld_ydesc *d = &v[i];
        char composite[1024], name[160];
        snprintf(composite, sizeof composite, "%s.%s%s%s", parent, d->key, d->value ? "_" : "",
                 d->value ? d->value : "");
        if (d->has_limit && !(b->dom->stat_key[d->id] = strdup(composite + strlen(b->domain) + 1)))
            return rl_errf(b->err, RL_ENOMEM, "out of memory");
        if (d->has_limit && !d->limit.unlimited) {
            rule_name(name, sizeof name, composite);
            int rc = make_rules(b->y->reg, d->limit.algorithm, d->limit.requests_per_unit,
                                d->limit.unit, name, &b->dom->rules[d->id], b->err);
            if (rc != RL_OK)
                return prefix(b->err, rc, d->file, d->path);
            /* charged after the fact: hits always count, checks wait out a negative balance */
            b->dom->rules[d->id]->v[0].charge = d->charge;
            /* shadow_mode, quota_mode: the core's shadow rule (counted when it fits, never
             * denying); a quota mode limit over reports OVER_LIMIT and denies the request
             * only with every other quota mode limit of it (rld_yrls_decide) */
            b->dom->rules[d->id]->v[0].shadow = d->shadow_mode || d->quota_mode;
        }
        int rc = build_tree(b, d->children, d->nchildren, composite);
        if (rc != RL_OK)
            return rc;
    }
    return RL_OK;
}

/* ---- the keyed level ----------------------------------------------------------------------- */

/* Rules resolved for the keys of the decision being made on this thread, so that the limiter's
 * call back for them costs no second match. */
static _Thread_local struct {
    size_t n;
    const char *key[RL_MAX_APPLIED];
    rl_rules *rules[RL_MAX_APPLIED];
} hint;

static const rl_rules *rules_of_key(rld_yrls *y, const char *key, size_t keylen);

static const rl_rules *key_rules(void *ctx, const char *key, size_t keylen, rl_rules **ref)
{
    rl_rules *rs = NULL;
    for (size_t i = 0; i < hint.n && !rs; i++)
        if (hint.key[i] == key)
            rs = hint.rules[i];
    if (!rs)
        rs = (rl_rules *)rules_of_key(ctx, key, keylen);
    rl_rules_ref(rs); /* counted, so that a store may scale it (the local fallback) */
    *ref = rs;
    return rs;
}

int rld_yrls_new(rld_yconf *c, rl_registry *reg, rld_yrls **out, rl_config **cfg, rl_err *err)
{
    return rld_yrls_new_beside(c, reg, NULL, out, cfg, err);
}

int rld_yrls_new_beside(rld_yconf *c, rl_registry *reg, rl_config *base, rld_yrls **out,
                        rl_config **cfg, rl_err *err)
{
    rld_yrls *y = calloc(1, sizeof *y);
    rl_config *conf = base;
    int rc = RL_OK;
    *out = NULL;
    *cfg = NULL;
    if (!y || !(y->doms = calloc(c->ndomains ? c->ndomains : 1, sizeof *y->doms))) {
        free(y);
        rld_yconf_free(c);
        rl_config_free(base);
        return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    y->conf = c;
    y->reg = reg;
    pthread_mutex_init(&y->mu, NULL);
    for (size_t i = 0; rc == RL_OK && i < c->ndomains; i++) {
        const rld_ydomain *dom = &c->domains[i];
        build b = {.y = y, .dom = &y->doms[i], .domain = dom->domain, .err = err};
        size_t n = dom->nlimits ? dom->nlimits : 1;
        y->doms[i].stat_key = calloc(n, sizeof(char *));
        y->doms[i].stats = calloc(n, sizeof(ystat));
        if (!(y->doms[i].rules = calloc(n, sizeof(rl_rules *))) || !y->doms[i].stat_key ||
            !y->doms[i].stats)
            rc = rl_errf(err, RL_ENOMEM, "out of memory");
        else
            rc = build_tree(&b, dom->children, dom->nchildren, dom->domain);
    }
    if (rc == RL_OK && !conf && !(conf = rl_config_new(reg)))
        rc = rl_errf(err, RL_ENOMEM, "out of memory");
    if (rc == RL_OK) {
        y->level = conf->nlevels;
        rc = rl_config_add_keyed_level(conf, "rls", key_rules, y, err);
        if (rc != RL_OK && conf == base) {
            char why[sizeof err->msg];
            memcpy(why, err->msg, sizeof why);
            rc = rl_errf(err, rc, "%s (the YAML's limits are the level \"rls\")", why);
        }
    }
    if (rc == RL_OK && conf != base) /* a base was finished by its loader */
        rc = rl_config_finish(conf, NULL, err);
    if (rc != RL_OK) {
        rl_config_free(conf);
        rld_yrls_free(y);
        return rc;
    }
    *out = y;
    *cfg = conf;
    return RL_OK;
}

void rld_yrls_free(rld_yrls *y)
{
    if (!y)
        return;
    for (size_t i = 0; i < y->conf->ndomains; i++) {
        for (size_t k = 0; y->doms[i].rules && k < y->conf->domains[i].nlimits; k++)
            rl_rules_unref(y->doms[i].rules[k]);
        for (size_t k = 0; y->doms[i].stat_key && k < y->conf->domains[i].nlimits; k++)
            free(y->doms[i].stat_key[k]);
        free(y->doms[i].rules);
        free(y->doms[i].stat_key);
        free(y->doms[i].stats);
    }
    for (size_t i = 0; i < y->noverrides; i++)
        rl_rules_unref(y->overrides[i].rules);
    for (size_t i = 0; i < y->ndyn; i++)
        free(y->dyn[i].key);
    free(y->doms);
    free(y->extra);
    pthread_mutex_destroy(&y->mu);
    rld_yconf_free(y->conf);
    free(y);
}

const rld_yconf *rld_yrls_conf(const rld_yrls *y)
{
    return y->conf;
}

/* The rules of a limit override, made once per (requests_per_unit, unit) and kept; NULL when
 * out of memory or when MAX_OVERRIDES different ones exist already. */
static rl_rules *override_rules(rld_yrls *y, uint32_t rpu, int unit)
{
    rl_rules *rs = NULL;
    pthread_mutex_lock(&y->mu);
    for (size_t i = 0; i < y->noverrides && !rs; i++)
        if (y->overrides[i].rpu == rpu && y->overrides[i].unit == unit)
            rs = y->overrides[i].rules;
    if (!rs && y->noverrides < MAX_OVERRIDES) {
        char name[64];
        rl_err err;
        snprintf(name, sizeof name, "override %u/%s", rpu, rld_unit_name(unit));
        if (make_rules(y->reg, NULL, rpu, unit, name, &rs, &err) == RL_OK) {
            rs->v[0].shadow = y->global_shadow || y->global_quota;
            y->overrides[y->noverrides++] = (override){rpu, unit, rs};
        }
    }
    pthread_mutex_unlock(&y->mu);
    return rs;
}

/* ---- matching ------------------------------------------------------------------------------ */

/* Whether value matches pattern, each '*' of which stands for any run of bytes. */
static int wildcard_match(const char *pat, const char *v, size_t vlen)
{
    const char *star = strchr(pat, '*');
    size_t head = (size_t)(star - pat);
    if (vlen < head || memcmp(pat, v, head) != 0)
        return 0;
    v += head;
    vlen -= head;
    for (pat = star + 1;;) {
        const char *next = strchr(pat, '*');
        size_t seg = next ? (size_t)(next - pat) : strlen(pat);
        if (!next) /* the last segment ends the value */
            return vlen >= seg && memcmp(v + vlen - seg, pat, seg) == 0;
        const char *hit = NULL;
        for (size_t i = 0; seg && i + seg <= vlen && !hit; i++)
            if (memcmp(v + i, pat, seg) == 0)
                hit = v + i;
        if (seg && !hit)
            return 0;
        if (hit) {
            vlen -= (size_t)(hit - v) + seg;
            v = hit + seg;
        }
        pat = next + 1;
    }
}

static int eq(const char *s, const char *p, size_t n)
{
    return strlen(s) == n && memcmp(s, p, n) == 0;
}

/* The configured descriptor an entry selects among v[0..n-1]: key and value, then a wildcard
 * value (in file order), then the key alone. */
static const rld_ydesc *select_one(const rld_ydesc *v, size_t n, const rld_yentry *e)
{
    const rld_ydesc *any = NULL, *wild = NULL;
    for (size_t i = 0; i < n; i++) {
        const rld_ydesc *d = &v[i];
        if (!eq(d->key, e->key, e->key_len))
            continue;
        if (!d->value)
            any = any ? any : d;
        else if (!d->wildcard && eq(d->value, e->value, e->value_len))
            return d;
        else if (d->wildcard && !wild && wildcard_match(d->value, e->value, e->value_len))
            wild = d;
    }
    return wild ? wild : any;
}

/* The descriptor whose limit applies to these entries, or NULL: the node the last entry
 * reaches, when it has a limit. path[i] receives the node entry i selected. */
static const rld_ydesc *match(const rld_ydomain *dom, const rld_yentry *e, size_t n,
                              const rld_ydesc **path)
{
    const rld_ydesc *v = dom->children, *d = NULL;
    size_t nv = dom->nchildren;
    for (size_t i = 0; i < n; i++) {
        if (!(d = select_one(v, nv, &e[i])))
            return NULL;
        path[i] = d;
        if (i + 1 < n && d->nchildren == 0)
            return NULL; /* the request goes deeper than the configuration */
        v = d->children;
        nv = d->nchildren;
    }
    return d && d->has_limit ? d : NULL;
}

/* ---- keys ---------------------------------------------------------------------------------- */

typedef struct kbuf {
    char *p;
    size_t n, cap;
    int full;
} kbuf;

static void put(kbuf *k, const char *s, size_t n, int escape)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int esc = escape && (c == '%' || c == '|' || c == '=' || c == '#');
        if (k->n + (esc ? 3 : 1) > k->cap) {
            k->full = 1;
            return;
        }
        if (esc) {
            k->p[k->n++] = '%';
            k->p[k->n++] = hex[c >> 4];
            k->p[k->n++] = hex[c & 15];
        } else {
            k->p[k->n++] = (char)c;
        }
    }
}

/* The key of a descriptor's counter. share[i], when set, stands for entry i's value (a wildcard
 * that shares its threshold). Returns its length, 0 when it does not fit. */
static size_t make_key(char *out, size_t cap, const rld_ydomain *dom, const rld_ydescreq *d,
                       const rld_ydesc *const *share)
{
    kbuf k = {.p = out, .cap = cap};
    put(&k, dom->domain, strlen(dom->domain), 1);
    for (size_t i = 0; i < d->nentries; i++) {
        const rld_yentry *e = &d->entries[i];
        put(&k, "|", 1, 0);
        put(&k, e->key, e->key_len, 1);
        put(&k, "=", 1, 0);
        if (share && share[i])
            put(&k, share[i]->value, strlen(share[i]->value), 1);
        else
            put(&k, e->value, e->value_len, 1);
    }
    if (d->has_override) {
        char o[48];
        int n = snprintf(o, sizeof o, "#%u/%s", d->override_rpu, rld_unit_name(d->override_unit));
        put(&k, o, (size_t)n, 0);
    }
    return k.full ? 0 : k.n;
}

static int unhex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Undoes put's escapes of s[0..n-1] into out (at least n bytes); returns the length or -1. */
static long unescape(const char *s, size_t n, char *out)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            out[m++] = s[i];
            continue;
        }
        if (i + 2 >= n || unhex(s[i + 1]) < 0 || unhex(s[i + 2]) < 0)
            return -1;
        out[m++] = (char)(unhex(s[i + 1]) << 4 | unhex(s[i + 2]));
        i += 2;
    }
    return (long)m;
}

/* The rules of a stored key, found again from the key alone (a store sweeping or settling). */
static const rl_rules *rules_of_key(rld_yrls *y, const char *key, size_t keylen)
{
    char buf[KEY_MAX];
    rld_yentry e[64];
    rld_ydescreq d = {.entries = e};
    const char *end = key + keylen, *hash = memchr(key, '#', keylen);
    if (keylen > sizeof buf)
        return NULL;
    if (hash) {
        char unit[16] = "";
        if (sscanf(hash, "#%u/%15s", &d.override_rpu, unit) != 2)
            return NULL;
        return override_rules(y, d.override_rpu, rld_unit_parse(unit));
    }
    const char *bar = memchr(key, '|', keylen);
    long dl = unescape(key, (size_t)((bar ? bar : end) - key), buf);
    const rld_ydomain *dom = dl > 0 ? rld_yconf_domain(y->conf, buf, (size_t)dl) : NULL;
    size_t used = dl > 0 ? (size_t)dl : 0;
    for (const char *p = bar; dom && p && p < end && d.nentries < 64;) {
        const char *next = memchr(p + 1, '|', (size_t)(end - p - 1));
        const char *stop = next ? next : end, *eqs = memchr(p + 1, '=', (size_t)(stop - p - 1));
        if (!eqs)
            return NULL;
        long kl = unescape(p + 1, (size_t)(eqs - p - 1), buf + used);
        long vl = kl < 0 ? -1 : unescape(eqs + 1, (size_t)(stop - eqs - 1), buf + used + kl);
        if (vl < 0)
            return NULL;
        e[d.nentries++] = (rld_yentry){buf + used, (size_t)kl, buf + used + kl, (size_t)vl};
        used += (size_t)(kl + vl);
        p = next;
    }
    const rld_ydesc *path[64];
    const rld_ydesc *m = dom && d.nentries ? match(dom, e, d.nentries, path) : NULL;
    return m ? y->doms[dom - y->conf->domains].rules[m->id] : NULL;
}

/* ---- decisions ----------------------------------------------------------------------------- */

#define HITS_MAX 1000000000000ull

/* Checks what the core cannot: entries the key format can hold, hits it can count. */
static int check_desc(const rld_ydescreq *d, size_t i, rl_err *err)
{
    for (size_t j = 0; j < d->nentries; j++) {
        const rld_yentry *e = &d->entries[j];
        for (size_t k = 0; k < e->key_len + e->value_len; k++) {
            unsigned char c =
                (unsigned char)(k < e->key_len ? e->key[k] : e->value[k - e->key_len]);
            if (c < 0x20 || c == 0x7f)
                return rl_errf(err, RL_EINVAL,
                               "descriptors[%zu].entries[%zu].%s: must not hold control "
                               "characters",
                               i, j, k < e->key_len ? "key" : "value");
        }
    }
    if (d->has_hits && d->hits > HITS_MAX)
        return rl_errf(err, RL_EINVAL, "descriptors[%zu].hits_addend: at most 1000000000000", i);
    if (d->has_override && rld_unit_seconds(d->override_unit) == 0)
        return rl_errf(err, RL_EINVAL, "descriptors[%zu].limit.unit: unknown unit %d", i,
                       d->override_unit);
    return RL_OK;
}

/* What each descriptor is decided by, before the decision. */
typedef struct plan {
    rl_rules *rules[RL_MAX_APPLIED]; /* by descriptor; NULL: nothing to count */
    int item[RL_MAX_APPLIED];        /* its item in main */
    rl_item main[RL_MAX_APPLIED];
    rl_rules *main_rules[RL_MAX_APPLIED];
    size_t nmain;
    size_t level;    /* the keyed level */
    size_t nyaml;    /* main items of the YAML's limits; the native levels' follow */
    char nkeys[RL_MAX_LEVELS][KEY_MAX];
    char keys[RL_MAX_APPLIED][KEY_MAX];
    const rld_ydesc *path[RL_MAX_APPLIED][64]; /* the node each entry selected */
} plan;

/* Matches descriptor i and fills st[i] with what is known before counting. */
static void resolve(rld_yrls *y, const rld_ydomain *dom, const rld_yreq *req, size_t i,
                    rld_ystatus *st, plan *p, const rld_ydesc **share)
{
    const rld_ydescreq *d = &req->desc[i];
    const rld_ydesc **path = p->path[i];
    st->code = RLD_YCODE_OK;
    st->hits = d->has_hits ? d->hits : rld_request_hits(req->hits_addend);
    st->name = "";
    p->rules[i] = NULL;
    for (size_t j = 0; j < d->nentries; j++)
        share[j] = NULL;
    if (d->has_override) {
        p->rules[i] = override_rules(y, d->override_rpu, d->override_unit);
        st->has_limit = p->rules[i] != NULL;
        st->requests_per_unit = d->override_rpu;
        st->unit = d->override_unit;
        return;
    }
    const rld_ydesc *m = d->nentries <= 64 ? match(dom, d->entries, d->nentries, path) : NULL;
    st->matched = m;
    if (!m)
        return;
    for (size_t j = 0; j < d->nentries; j++)
        share[j] = path[j]->share_threshold ? path[j] : NULL;
    if (m->limit.unlimited) {
        st->unlimited = 1;
        st->remaining = UINT32_MAX;
        return;
    }
    p->rules[i] = y->doms[dom - y->conf->domains].rules[m->id];
    st->has_limit = 1;
    st->requests_per_unit = m->limit.requests_per_unit;
    st->unit = m->limit.unit;
    st->name = m->limit.name ? m->limit.name : "";
}

/* Upstream's replaces: a named limit that another matched limit replaces is not applied. */
static void apply_replaces(const rld_yreq *req, rld_ystatus *st, plan *p)
{
    for (size_t i = 0; i < req->ndesc; i++) {
        const char *name = st[i].matched && p->rules[i] ? st[i].matched->limit.name : NULL;
        int replaced = 0;
        for (size_t j = 0; name && j < req->ndesc && !replaced; j++) {
            const rld_ydesc *o = st[j].matched;
            for (size_t k = 0; o && j != i && k < o->limit.nreplaces && !replaced; k++)
                replaced = strcmp(o->limit.replaces[k], name) == 0;
        }
        if (replaced) {
            p->rules[i] = NULL;
            st[i].has_limit = 0;
            st[i].name = "";
        }
    }
}

/* Adds descriptor i's counter to the items; descriptors with the same key share one item and
 * its cost (they are one counter). */
static int add_item(const rld_ydomain *dom, const rld_yreq *req, size_t i, rld_ystatus *st, plan *p,
                    const rld_ydesc *const *share, rl_err *err)
{
    rl_item *v = p->main;
    size_t *n = &p->nmain;
    char *key = p->keys[i];
    size_t klen = make_key(key, KEY_MAX, dom, &req->desc[i], share);
    if (!klen)
        return rl_errf(err, RL_EINVAL, "descriptors[%zu].entries: longer than %d bytes together", i,
                       KEY_MAX - 64);
    for (size_t k = 0; k < *n; k++)
        if (v[k].keylen == klen && memcmp(v[k].key, key, klen) == 0) {
            v[k].cost += (rl_fp)st[i].hits * RL_FP_ONE;
            if (v[k].cost > RL_FP_MAX)
                return rl_errf(err, RL_EINVAL, "hits_addend: at most 1000000000000 a counter");
            p->item[i] = (int)k;
            return RL_OK;
        }
    p->item[i] = (int)*n;
    p->main_rules[*n] = p->rules[i];
    v[(*n)++] =
        (rl_item){.level = p->level, .key = key, .keylen = klen, .cost = (rl_fp)st[i].hits * RL_FP_ONE};
    return RL_OK;
}

/* ---- native levels beside the YAML ---------------------------------------------------------- */

/* The first entry named name in the request (*e, NULL when none, its descriptor *from);
 * RL_EINVAL when a later entry gives the name another value. */
static int find_entry(const rld_yreq *req, const char *name, const rld_yentry **e, size_t *from,
                      rl_err *err)
{
    size_t n = strlen(name);
    *e = NULL;
    for (size_t i = 0; i < req->ndesc; i++)
        for (size_t j = 0; j < req->desc[i].nentries; j++) {
            const rld_yentry *x = &req->desc[i].entries[j];
            if (x->key_len != n || memcmp(x->key, name, n) != 0)
                continue;
            if (!*e) {
                *e = x;
                *from = i;
            } else if (x->value_len != (*e)->value_len ||
                       memcmp(x->value, (*e)->value, x->value_len) != 0) {
                return rl_errf(err, RL_EINVAL,
                               "descriptors[%zu].entries[%zu].value: %.64s has another value in "
                               "an earlier descriptor",
                               i, j, name);
            }
        }
    return RL_OK;
}

/* Level li's key from the request's entries (joined with ':' when the level composes several)
 * into p->nkeys[li]: its length, 0 when an entry is missing; *from is the descriptor of the
 * first entry. */
static int native_key(const rl_level *l, size_t li, const rld_yreq *req, plan *p, size_t *len,
                      size_t *from, rl_err *err)
{
    size_t parts = l->ncompose ? l->ncompose : 1, n = 0;
    char *key = p->nkeys[li];
    *len = 0;
    for (size_t k = 0; k < parts; k++) {
        const rld_yentry *e;
        size_t at;
        int rc = find_entry(req, l->ncompose ? l->compose[k] : l->name, &e, &at, err);
        if (rc != RL_OK || !e)
            return rc;
        if (e->value_len == 0)
            return rl_errf(err, RL_EINVAL, "descriptors[%zu]: %.64s: a value is required (the "
                           "level %.64s reads it)", at, e->key, l->name);
        if (n + (k > 0) + e->value_len > KEY_MAX)
            return rl_errf(err, RL_EINVAL, "descriptors: the key of level %.64s is longer than "
                           "%d bytes", l->name, KEY_MAX);
        if (k == 0)
            *from = at;
        if (k > 0)
            key[n++] = ':';
        memcpy(key + n, e->value, e->value_len);
        n += e->value_len;
    }
    *len = n;
    return RL_OK;
}

/* Appends an item for every native level the request keys (or its default key does), with
 * the hits of the descriptor of its first entry (the request's for a default key). */
static int add_native(const rl_config *cfg, const rld_yreq *req, const rld_ystatus *st, plan *p,
                      rl_err *err)
{
    for (size_t li = 0; li < cfg->nlevels; li++) {
        const rl_level *l = &cfg->levels[li];
        size_t n, from = 0;
        uint64_t hits = rld_request_hits(req->hits_addend);
        int rc;
        if (li == p->level)
            continue;
        if ((rc = native_key(l, li, req, p, &n, &from, err)) != RL_OK)
            return rc;
        if (n)
            hits = st[from].hits;
        else if (l->default_key)
            memcpy(p->nkeys[li], l->default_key, n = strlen(l->default_key));
        else
            continue;
        if (p->nmain == RL_MAX_APPLIED)
            return rl_errf(err, RL_EINVAL, "descriptors: more than %d limits would apply",
                           RL_MAX_APPLIED);
        p->main_rules[p->nmain] = NULL;
        p->main[p->nmain++] = (rl_item){
            .level = li, .key = p->nkeys[li], .keylen = n, .cost = (rl_fp)hits * RL_FP_ONE};
    }
    return RL_OK;
}

/* A native level that denied marks the descriptors with its entries OVER_LIMIT, and gives
 * its rule's limit to those without a YAML limit of their own. */
static void native_status(const rl_config *cfg, const rld_yreq *req, const rl_decision *d,
                          const plan *p, rld_ystatus *st, rld_ycode *overall)
{
    if (d->allowed || d->blocked < (int)p->nyaml)
        return;
    const rl_applied *a = &d->applied[d->blocked];
    const rl_level *l = &cfg->levels[a->level];
    *overall = RLD_YCODE_OVER_LIMIT;
    for (size_t i = 0; i < req->ndesc; i++) {
        int feeds = 0;
        for (size_t j = 0; j < req->desc[i].nentries; j++)
            feeds |= rl_level_reads(l, req->desc[i].entries[j].key,
                                    req->desc[i].entries[j].key_len);
        if (!feeds)
            continue;
        st[i].code = RLD_YCODE_OVER_LIMIT;
        st[i].remaining = 0;
        if (st[i].has_limit || !a->has_status)
            continue;
        st[i].has_limit = st[i].has_reset = 1;
        st[i].rule = a->rule;
        st[i].st = *rl_decision_status(d, (size_t)d->blocked);
        st[i].name = a->rule->name ? a->rule->name : "";
        st[i].unit =
            (int)rld_unit_of_limit(st[i].st.limit, st[i].st.window, &st[i].requests_per_unit);
        st[i].reset = (a->wait + RL_NS_PER_SEC - 1) / RL_NS_PER_SEC * RL_NS_PER_SEC;
    }
}

/* One decision over items; the hints let the keyed level skip matching again. */
static int acquire(rl_limiter *lim, const rl_item *items, rl_rules *const *rules, size_t n,
                   unsigned flags, rl_ns now, rl_decision *d, rl_err *err)
{
    rl_request r = {.items = items, .nitems = n, .flags = flags, .now = now};
    hint.n = n;
    for (size_t i = 0; i < n; i++) {
        hint.key[i] = items[i].key;
        hint.rules[i] = rules[i];
    }
    int rc = rl_acquire(lim, &r, d, err);
    hint.n = 0;
    return rc; /* the caller reads d, then rl_decision_done */
}

/* Fills the counted parts of a status from the rule's status rs after the decision. */
static void status_from(rld_ystatus *st, const rl_applied *a, const rl_rule_status *rs, int over,
                        rl_ns now)
{
    int64_t secs = rld_unit_seconds(st->unit);
    st->rule = a->rule;
    st->st = *rs;
    st->code = over ? RLD_YCODE_OVER_LIMIT : RLD_YCODE_OK;
    rl_fp left = rs->remaining / RL_FP_ONE;
    st->remaining = over || left <= 0 ? 0 : left > UINT32_MAX ? UINT32_MAX : (uint32_t)left;
    st->has_reset = 1;
    /* upstream's arithmetic on whole seconds: the window of now ends in secs - now % secs */
    const rl_rule_per_unit *pu = rl_rule_type_per_unit(a->rule->type);
    if (pu && pu->aligned && secs > 0)
        st->reset = (secs - (now / RL_NS_PER_SEC) % secs) * RL_NS_PER_SEC;
    else
        st->reset = (rs->reset_after + RL_NS_PER_SEC - 1) / RL_NS_PER_SEC * RL_NS_PER_SEC;
}

/* ---- statistics ---------------------------------------------------------------------------- */

static void put_entry(kbuf *k, const rld_yentry *e, const char *value, size_t vlen, int first)
{
    if (!first)
        put(k, ".", 1, 0);
    put(k, e->key, e->key_len, 0);
    if (vlen) {
        put(k, "_", 1, 0);
        put(k, value, vlen, 0);
    }
}

/* The statistics key of a descriptor when it is one of its own (detailed_metric,
 * value_to_metric, an override) as upstream names it; 0 when it counts under the configured
 * key. */
static size_t own_stat_key(const rld_ydescreq *d, const rld_ystatus *st,
                           const rld_ydesc *const *path, char *out, size_t cap)
{
    kbuf k = {.p = out, .cap = cap - 1};
    int own = !st->matched || st->matched->detailed_metric;
    for (size_t j = 0; !own && j < d->nentries; j++)
        own = path[j]->value_to_metric;
    if (!own)
        return 0;
    for (size_t j = 0; j < d->nentries; j++) {
        const rld_yentry *e = &d->entries[j];
        const rld_ydesc *n = st->matched ? path[j] : NULL;
        /* share_threshold: the values a wildcard shares a counter for share a series, named by
         * the pattern, whatever detailed_metric and value_to_metric say (as upstream) */
        if (!n || ((st->matched->detailed_metric || n->value_to_metric) && !n->share_threshold))
            put_entry(&k, e, e->value, e->value_len, j == 0);
        else
            put_entry(&k, e, n->value ? n->value : "", n->value ? strlen(n->value) : 0, j == 0);
    }
    out[k.n] = '\0';
    return k.full ? 0 : k.n;
}

/* The statistics a descriptor counts under: its own key's (made on first use, while the table
 * has room) or the configured key's. */
static ystat *stat_of(rld_yrls *y, size_t di, const rld_ydescreq *d, const rld_ystatus *st,
                      const rld_ydesc *const *path)
{
    char key[KEY_MAX];
    ydom *yd = &y->doms[di];
    ystat *fallback = st->matched ? &yd->stats[st->matched->id] : &yd->overflow;
    size_t n = own_stat_key(d, st, path, key, sizeof key);
    if (!n)
        return fallback;
    /* one series per label set: a key that names a configured limit's series (an empty value
     * under value_to_metric, a shared wildcard) counts in that series, as upstream's counters
     * of one name are one counter */
    for (size_t k = 0; k < y->conf->domains[di].nlimits; k++)
        if (yd->stat_key[k] && strcmp(yd->stat_key[k], key) == 0)
            return &yd->stats[k];
    ystat *found = NULL;
    pthread_mutex_lock(&y->mu);
    for (size_t i = 0; i < y->ndyn && !found; i++)
        if (y->dyn[i].dom == di && strcmp(y->dyn[i].key, key) == 0)
            found = &y->dyn[i].s;
    if (!found && y->ndyn < DYN_MAX && (y->dyn[y->ndyn].key = strdup(key))) {
        y->dyn[y->ndyn].dom = di;
        found = &y->dyn[y->ndyn++].s;
    }
    pthread_mutex_unlock(&y->mu);
    return found ? found : fallback;
}

static void add(ystat *s, int which, uint64_t v)
{
    if (v)
        __atomic_add_fetch(&s->v[which], v, __ATOMIC_RELAXED);
}

/* Counts a decided descriptor as envoyproxy/ratelimit counts its hits (base_limiter.go): from
 * the counter before and after its hits, over 100% and near (over 80%) of the limit. */
static void count(ystat *s, const rld_ystatus *st, int taken, int shadow)
{
    uint64_t hits = st->hits, lim = st->requests_per_unit, near = lim * 4 / 5;
    rl_fp used_fp = st->st.limit - st->st.remaining;
    uint64_t used = used_fp > 0 ? (uint64_t)(used_fp / RL_FP_ONE) : 0;
    uint64_t before = taken ? (used > hits ? used - hits : 0) : used, after = before + hits;
    add(s, ST_TOTAL, hits);
    if (after > lim) {
        add(s, ST_OVER, before >= lim ? hits : after - lim);
        if (before < lim)
            add(s, ST_NEAR, lim - (near > before ? near : before));
        if (shadow)
            add(s, ST_SHADOW, before >= lim ? hits : after - lim);
    } else {
        if (after > near)
            add(s, ST_NEAR, before >= near ? hits : after - near);
        add(s, ST_WITHIN, hits);
    }
}

/* Writes a label value with Prometheus's escapes. */
static void label_value(rld_buf *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\' || c == '"')
            rld_buf_putc(out, '\\');
        if (c == '\n')
            rld_buf_puts(out, "\\n");
        else
            rld_buf_putc(out, c);
    }
}

/* domain="messaging",key1="message_type_marketing",key2="to_number" and EXTRA_TAGS */
static void labels(rld_buf *out, const rld_yrls *y, const char *domain, const char *key)
{
    rld_buf_puts(out, "{domain=\"");
    label_value(out, domain, strlen(domain));
    rld_buf_putc(out, '"');
    for (unsigned n = 1; *key; n++) {
        const char *dot = strchr(key, '.');
        size_t len = dot ? (size_t)(dot - key) : strlen(key);
        rld_buf_printf(out, ",key%u=\"", n);
        label_value(out, key, len);
        rld_buf_putc(out, '"');
        key += len + (dot != NULL);
    }
    if (y->extra)
        rld_buf_puts(out, y->extra);
    rld_buf_putc(out, '}');
}

void rld_yrls_metrics(rld_yrls *y, rld_buf *out)
{
    for (int f = 0; f < NSTATS; f++) {
        rld_buf_printf(out,
                       "# HELP ratelimit_service_rate_limit_%s %s, per limit of the YAML "
                       "configuration (envoyproxy/ratelimit's stat of that name).\n"
                       "# TYPE ratelimit_service_rate_limit_%s counter\n",
                       stat_names[f], stat_help[f], stat_names[f]);
        for (size_t d = 0; d < y->conf->ndomains; d++) {
            const rld_ydomain *dom = &y->conf->domains[d];
            for (size_t k = 0; k < dom->nlimits; k++) {
                rld_buf_printf(out, "ratelimit_service_rate_limit_%s", stat_names[f]);
                labels(out, y, dom->domain, y->doms[d].stat_key[k]);
                rld_buf_printf(out, " %llu\n",
                               (unsigned long long)__atomic_load_n(&y->doms[d].stats[k].v[f],
                                                                   __ATOMIC_RELAXED));
            }
        }
        for (size_t d = 0; d < y->conf->ndomains; d++) {
            uint64_t v = __atomic_load_n(&y->doms[d].overflow.v[f], __ATOMIC_RELAXED);
            if (__atomic_load_n(&y->doms[d].overflow.v[ST_TOTAL], __ATOMIC_RELAXED) == 0)
                continue;
            rld_buf_printf(out, "ratelimit_service_rate_limit_%s", stat_names[f]);
            labels(out, y, y->conf->domains[d].domain, "overflow");
            rld_buf_printf(out, " %llu\n", (unsigned long long)v);
        }
        pthread_mutex_lock(&y->mu);
        for (size_t i = 0; i < y->ndyn; i++) {
            rld_buf_printf(out, "ratelimit_service_rate_limit_%s", stat_names[f]);
            labels(out, y, y->conf->domains[y->dyn[i].dom].domain, y->dyn[i].key);
            rld_buf_printf(
                out, " %llu\n",
                (unsigned long long)__atomic_load_n(&y->dyn[i].s.v[f], __ATOMIC_RELAXED));
        }
        pthread_mutex_unlock(&y->mu);
    }
    /* the service's own counters, named by upstream's Prometheus mapping */
    const struct {
        const char *name, *help;
        uint64_t v;
    } svc[] = {
        {"ratelimit_service_config_load_success",
         "Configurations loaded (envoyproxy/ratelimit's config_load_success): the one read at "
         "start", 1},
        {"ratelimit_service_config_load_error",
         "Configuration loads that failed (envoyproxy/ratelimit's config_load_error): reloads "
         "refused, the configuration in force stays",
         __atomic_load_n(&y->load_errors, __ATOMIC_RELAXED)},
        {"ratelimit_service_global_shadow_mode",
         "Requests over a limit answered OK by the global shadow mode (SHADOW_MODE; "
         "envoyproxy/ratelimit's global_shadow_mode)",
         __atomic_load_n(&y->global_shadow_hits, __ATOMIC_RELAXED)}};
    for (size_t i = 0; i < sizeof svc / sizeof svc[0]; i++)
        rld_buf_printf(out, "# HELP %s %s.\n# TYPE %s counter\n%s%s%s%s %llu\n", svc[i].name,
                       svc[i].help, svc[i].name, svc[i].name, y->extra ? "{" : "",
                       y->extra ? y->extra + 1 : "", y->extra ? "}" : "",
                       (unsigned long long)svc[i].v);
    static const char *const err_type[2] = {"redis_error", "service_error"};
    rld_buf_printf(out, "# HELP ratelimit_service_should_rate_limit_error ShouldRateLimit calls "
                        "answered with an error (envoyproxy/ratelimit's should_rate_limit "
                        "errors): redis_error when the store failed, service_error for the "
                        "others.\n# TYPE ratelimit_service_should_rate_limit_error counter\n");
    for (int i = 0; i < 2; i++)
        rld_buf_printf(out, "ratelimit_service_should_rate_limit_error{err_type=\"%s\"%s} %llu\n",
                       err_type[i], y->extra ? y->extra : "",
                       (unsigned long long)__atomic_load_n(&y->call_errors[i], __ATOMIC_RELAXED));
}

void rld_yrls_call_error(rld_yrls *y, int store)
{
    __atomic_add_fetch(&y->call_errors[store ? 0 : 1], 1, __ATOMIC_RELAXED);
}

/* How a request's descriptors stand, for its overall code as upstream makes it: OVER_LIMIT
 * when a limit not in quota mode is over, or when every quota mode limit is. */
typedef struct tally {
    size_t over, quota, quota_over;
} tally;

/* Whether a descriptor is in quota mode: its limit's quota_mode, or QUOTA_MODE for all. */
static int in_quota(const rld_yrls *y, const rld_ystatus *st)
{
    return y->global_quota || (st->matched && st->matched->quota_mode);
}

/* Descriptor i's status and statistics from its rule, applied rule k of the decision (taken:
 * the decision counted). A shadow_mode limit (a core shadow rule) is counted when the request
 * passes and its hits fit, never denies, and answers OK; a quota_mode limit too, but answers
 * OVER_LIMIT when over; under the global shadow mode every limit is a shadow rule and answers
 * as it would without it. A charge rule blocks only a check (hits 0). */
static void decided(rld_yrls *y, size_t di, const rld_yreq *req, size_t i, const rl_decision *d,
                    int taken, size_t k, rl_fp cost, const rld_ydesc *const *path,
                    rld_ystatus *st, tally *t)
{
    static const rl_rule_status none;
    const rl_applied *a = &d->applied[k];
    const rl_rule_status *rs = rl_decision_status(d, k);
    int over = a->shadow ? a->shadow_denied : a->wait > 0 && !(a->charge && cost > 0);
    int own_shadow = a->shadow && st->matched && st->matched->shadow_mode;
    int quota = in_quota(y, st);
    status_from(st, a, rs ? rs : &none, over, req->now);
    if (own_shadow) {
        st->code = RLD_YCODE_OK; /* upstream's shadow_mode: over, yet OK */
        st->shadow_denied = over;
    }
    t->quota += quota;
    if (over && !own_shadow)
        quota ? t->quota_over++ : t->over++;
    count(stat_of(y, di, &req->desc[i], st, path), st, taken && d->allowed && !over, own_shadow);
}

/* Whether a request's plan holds a quota mode limit. */
static int has_quota(const rld_yrls *y, const rld_yreq *req, const rld_ystatus *st,
                     const plan *p)
{
    for (size_t i = 0; i < req->ndesc; i++)
        if (p->rules[i] && in_quota(y, &st[i]))
            return 1;
    return 0;
}

/* Under QUOTA_MODE, upstream counts a descriptor without a limit to apply (none matched, or
 * replaced), unless unlimited, as a quota mode descriptor that passed: the request is then
 * never OVER_LIMIT by its quota mode limits alone. */
static size_t quota_without_limit(const rld_yrls *y, const rld_yreq *req, const rld_ystatus *st,
                                  const plan *p)
{
    size_t n = 0;
    for (size_t i = 0; y->global_quota && i < req->ndesc; i++)
        n += !p->rules[i] && !st[i].unlimited;
    return n;
}

int rld_yrls_decide(rld_yrls *y, rl_limiter *lim, const rld_yreq *req, rld_ystatus *st,
                    rld_ycode *overall, rl_err *err)
{
    static _Thread_local plan p;
    const rld_ydesc *share[RL_MAX_APPLIED][64];
    rl_decision d;
    int rc;
    *overall = RLD_YCODE_OK;
    if (req->ndesc > RL_MAX_APPLIED)
        return rl_errf(err, RL_EINVAL, "descriptors: at most %d", RL_MAX_APPLIED);
    for (size_t i = 0; i < req->ndesc; i++) {
        memset(&st[i], 0, sizeof st[i]);
        st[i].code = RLD_YCODE_OK;
        st[i].name = "";
        if ((rc = check_desc(&req->desc[i], i, err)) != RL_OK)
            return rc;
        if (req->desc[i].nentries > 64)
            return rl_errf(err, RL_EINVAL, "descriptors[%zu].entries: at most 64", i);
    }
    const rld_ydomain *dom = rld_yconf_domain(y->conf, req->domain, req->domain_len);
    if (!dom)
        return RL_OK; /* an unknown domain limits nothing, as upstream */
    size_t di = (size_t)(dom - y->conf->domains);
    p.nmain = 0;
    p.level = y->level;
    for (size_t i = 0; i < req->ndesc; i++)
        resolve(y, dom, req, i, &st[i], &p, share[i]);
    apply_replaces(req, st, &p);
    for (size_t i = 0; i < req->ndesc; i++)
        if (p.rules[i] &&
            (rc = add_item(dom, req, i, st, &p, share[i], err)) != RL_OK)
            return rc;
    p.nyaml = p.nmain;
    if ((rc = add_native(rl_limiter_config(lim), req, st, &p, err)) != RL_OK)
        return rc;

    /* Quota mode limits never deny on their own, so the core counts the others even when
     * every quota mode limit is over, which makes the answer OVER_LIMIT. A denied request
     * counts nothing here: a dry run first finds that case, and it is answered from the dry
     * run. (Between the two a concurrent request can fill the last quota; that request is
     * then answered OVER_LIMIT and counted.) */
    size_t open = quota_without_limit(y, req, st, &p);
    int dry = !y->global_shadow && !open && p.nmain && has_quota(y, req, st, &p);
    tally t;
    for (int pass = 0; pass < 2; pass++) {
        unsigned flags = dry && pass == 0 ? RL_DRY_RUN : 0;
        d.allowed = 1;
        d.napplied = 0;
        t = (tally){0};
        if (p.nmain &&
            (rc = acquire(lim, p.main, p.main_rules, p.nmain, flags, req->now, &d, err)) != RL_OK)
            return rc;
        int all_quota_over = 0;
        if (flags) {
            for (size_t i = 0; i < req->ndesc; i++)
                if (p.rules[i] && in_quota(y, &st[i])) {
                    const rl_applied *a = &d.applied[p.item[i]];
                    t.quota++;
                    /* a shadow_mode limit is never over (decided), whatever its quota mode */
                    t.quota_over += a->shadow && a->shadow_denied &&
                                    !(st[i].matched && st[i].matched->shadow_mode);
                }
            all_quota_over = d.allowed && t.quota && t.quota == t.quota_over;
            t = (tally){0};
            if (!all_quota_over) {
                rl_decision_done(&d);
                continue; /* decided for real */
            }
        }
        for (size_t i = 0; i < req->ndesc; i++)
            if (p.rules[i])
                decided(y, di, req, i, &d, !flags, p.item[i], p.main[p.item[i]].cost, p.path[i],
                        &st[i], &t);
        break;
    }
    t.quota += open;
    if (t.over || (t.quota && t.quota == t.quota_over)) {
        if (y->global_shadow) /* upstream's SHADOW_MODE: only the overall code is OK */
            __atomic_add_fetch(&y->global_shadow_hits, 1, __ATOMIC_RELAXED);
        else
            *overall = RLD_YCODE_OVER_LIMIT;
    }
    /* native levels beside the YAML are ratelimitd's own: SHADOW_MODE does not reach them */
    native_status(rl_limiter_config(lim), req, &d, &p, st, overall);
    if (p.nmain)
        rl_decision_done(&d);
    return RL_OK;
}
