/*
 * summary.c - see summary.h.
 */
#include <stdlib.h>
#include <string.h>

#include "app/render.h"
#include "summary.h"

#define MAX_RULES 4096 /* (level, rule) pairs counted; custom quota rules beyond are "other" */
#define TOP_KEYS 10

int rld_summary_init(rld_summary *s, const rl_config *cfg, rl_err *err)
{
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->peak_wait = -1;
    s->capkeys = 1024;
    if (!(s->keys = calloc(s->capkeys, sizeof *s->keys)))
        return rl_errf(err, RL_ENOMEM, "out of memory");
    return RL_OK;
}

void rld_summary_free(rld_summary *s)
{
    for (size_t i = 0; i < s->nrules; i++)
        free(s->rules[i].rule);
    for (size_t i = 0; i < s->capkeys && s->keys; i++)
        free(s->keys[i].key);
    free(s->rules);
    free(s->keys);
    memset(s, 0, sizeof *s);
}

static const char *rule_name(const rl_applied *a)
{
    return a->fallback == RL_FALLBACK_CLOSED ? RLD_STORE_UNAVAILABLE : a->rule->name;
}

static rld_summary_rule *rule_entry(rld_summary *s, uint16_t level, const char *name)
{
    for (size_t i = 0; i < s->nrules; i++)
        if (s->rules[i].level == level && strcmp(s->rules[i].rule, name) == 0)
            return &s->rules[i];
    if (s->nrules == MAX_RULES)
        return strcmp(name, "other") == 0 ? NULL : rule_entry(s, level, "other");
    if (s->nrules == s->caprules) {
        size_t n = s->caprules ? s->caprules * 2 : 16;
        rld_summary_rule *p = realloc(s->rules, n * sizeof *p);
        if (!p)
            return NULL;
        s->rules = p;
        s->caprules = n;
    }
    rld_summary_rule *r = &s->rules[s->nrules];
    if (!(r->rule = strdup(name)))
        return NULL;
    r->level = level;
    r->allowed = r->denied = r->shadow_denied = 0;
    s->nrules++;
    return r;
}

static uint64_t hash_key(uint16_t level, const char *k, size_t n)
{
    uint64_t h = 1469598103934665603ull ^ level;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
    return h;
}

static rld_summary_key *key_slot(rld_summary_key *t, size_t cap, uint16_t level, const char *k,
                                 size_t n)
{
    for (size_t i = hash_key(level, k, n) & (cap - 1);; i = (i + 1) & (cap - 1))
        if (!t[i].key || (t[i].level == level && t[i].len == n && memcmp(t[i].key, k, n) == 0))
            return &t[i];
}

static void count_key(rld_summary *s, uint16_t level, const char *k, size_t n)
{
    if ((s->nkeys + 1) * 2 > s->capkeys) {
        size_t cap = s->capkeys * 2;
        rld_summary_key *t = calloc(cap, sizeof *t);
        if (!t)
            return;
        for (size_t i = 0; i < s->capkeys; i++)
            if (s->keys[i].key)
                *key_slot(t, cap, s->keys[i].level, s->keys[i].key, s->keys[i].len) = s->keys[i];
        free(s->keys);
        s->keys = t;
        s->capkeys = cap;
    }
    rld_summary_key *e = key_slot(s->keys, s->capkeys, level, k, n);
    if (!e->key) {
        if (!(e->key = malloc(n ? n : 1)))
            return;
        memcpy(e->key, k, n);
        e->len = n;
        e->level = level;
        s->nkeys++;
    }
    e->denied++;
}

void rld_summary_add(rld_summary *s, const rl_decision *d, size_t line)
{
    s->requests++;
    for (size_t i = 0; i < d->napplied; i++) {
        rld_summary_rule *r = d->applied[i].shadow_denied
                                  ? rule_entry(s, d->applied[i].level, d->applied[i].rule->name)
                                  : NULL;
        if (r)
            r->shadow_denied++;
    }
    if (!d->allowed) {
        const rl_applied *a = &d->applied[d->blocked];
        rld_summary_rule *r = rule_entry(s, a->level, rule_name(a));
        s->denied++;
        if (r)
            r->denied++;
        count_key(s, a->level, a->key, a->keylen);
        if (d->retry_after != RL_WAIT_NEVER && d->retry_after > s->peak_wait) {
            s->peak_wait = d->retry_after;
            s->peak_line = line;
        }
        return;
    }
    s->allowed++;
    for (size_t i = 0; i < d->napplied; i++) {
        rld_summary_rule *r = rule_entry(s, d->applied[i].level, rule_name(&d->applied[i]));
        if (r)
            r->allowed++;
    }
}

/* Orders keys by denials (most first), then level and key. */
static int by_denials(const void *x, const void *y)
{
    const rld_summary_key *a = *(const rld_summary_key *const *)x,
                          *b = *(const rld_summary_key *const *)y;
    if (a->denied != b->denied)
        return a->denied > b->denied ? -1 : 1;
    if (a->level != b->level)
        return a->level < b->level ? -1 : 1;
    int c = memcmp(a->key, b->key, a->len < b->len ? a->len : b->len);
    return c ? c : a->len < b->len ? -1 : a->len > b->len;
}

static void put_count(rld_buf *o, const char *name, uint64_t v)
{
    rld_buf_puts(o, name);
    rld_buf_i64(o, (int64_t)v);
}

static void put_level(rld_buf *o, const rld_summary *s, uint16_t level)
{
    const char *name = s->cfg->levels[level].name;
    rld_buf_puts(o, "{\"level\":");
    rld_buf_json_str(o, name, strlen(name));
}

/* One configuration's summary; errors (NULL: left out) goes inside. */
static void write_one(rld_buf *o, const rld_summary *s, const uint64_t *errors)
{
    put_count(o, "{\"requests\":", s->requests);
    put_count(o, ",\"allowed\":", s->allowed);
    put_count(o, ",\"denied\":", s->denied);
    if (errors)
        put_count(o, ",\"errors\":", *errors);
    rld_buf_puts(o, ",\"rules\":[");
    for (size_t i = 0; i < s->nrules; i++) {
        const rld_summary_rule *r = &s->rules[i];
        if (i)
            rld_buf_putc(o, ',');
        put_level(o, s, r->level);
        rld_buf_puts(o, ",\"rule\":");
        rld_buf_json_str(o, r->rule, strlen(r->rule));
        put_count(o, ",\"allowed\":", r->allowed);
        put_count(o, ",\"denied\":", r->denied);
        put_count(o, ",\"shadow_denied\":", r->shadow_denied);
        rld_buf_putc(o, '}');
    }
    rld_buf_puts(o, "],\"top_denied_keys\":[");
    const rld_summary_key **top = malloc((s->nkeys ? s->nkeys : 1) * sizeof *top);
    size_t n = 0;
    for (size_t i = 0; top && i < s->capkeys; i++)
        if (s->keys[i].key)
            top[n++] = &s->keys[i];
    if (top)
        qsort(top, n, sizeof *top, by_denials);
    for (size_t i = 0; i < n && i < TOP_KEYS; i++) {
        if (i)
            rld_buf_putc(o, ',');
        put_level(o, s, top[i]->level);
        rld_buf_puts(o, ",\"key\":");
        rld_buf_json_str(o, top[i]->key, top[i]->len);
        put_count(o, ",\"denied\":", top[i]->denied);
        rld_buf_putc(o, '}');
    }
    free(top);
    rld_buf_puts(o, "],\"peak_wait\":");
    if (s->peak_wait < 0) {
        rld_buf_puts(o, "null}");
        return;
    }
    rld_buf_puts(o, "{\"seconds\":");
    rld_buf_seconds(o, s->peak_wait);
    put_count(o, ",\"line\":", s->peak_line);
    rld_buf_puts(o, "}}");
}

void rld_summary_write(rld_buf *o, const rld_summary *a, const rld_summary *b, uint64_t errors,
                       uint64_t differing)
{
    rld_buf_puts(o, "{\"summary\":");
    if (!b) {
        write_one(o, a, &errors);
        rld_buf_puts(o, "}\n");
        return;
    }
    put_count(o, "{\"differing\":", differing);
    put_count(o, ",\"errors\":", errors);
    rld_buf_puts(o, ",\"a\":");
    write_one(o, a, NULL);
    rld_buf_puts(o, ",\"b\":");
    write_one(o, b, NULL);
    rld_buf_puts(o, "}}\n");
}
