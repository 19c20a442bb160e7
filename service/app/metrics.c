/*
 * metrics.c - see metrics.h.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "rules_json.h"
#include "ratelimit_store.h"
#include "render.h"

/* Status codes the service answers with; anything else is counted as code="other". */
static const int codes[] = {200, 400, 401, 404, 405, 409, 413, 429, 500, 503};
#define NCODES (sizeof codes / sizeof codes[0] + 1)

/* Upper bounds of the duration histogram, in nanoseconds and as printed. */
static const rl_ns bounds[] = {100000,   250000,   500000,    1000000,   2500000,
                               5000000,  10000000, 25000000,  50000000,  100000000,
                               250000000, 500000000, 1000000000, 2500000000};
static const char *const bound_names[] = {"0.0001", "0.00025", "0.0005", "0.001", "0.0025",
                                          "0.005",  "0.01",    "0.025",  "0.05",  "0.1",
                                          "0.25",   "0.5",     "1",      "2.5"};
#define NBOUNDS (sizeof bounds / sizeof bounds[0])

/* gRPC status codes by number (0 to 16); anything else is counted as code="other". */
static const char *const grpc_codes[] = {
    "OK",           "CANCELLED",         "UNKNOWN",        "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED", "NOT_FOUND",    "ALREADY_EXISTS", "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
    "UNIMPLEMENTED", "INTERNAL",         "UNAVAILABLE",    "DATA_LOSS",
    "UNAUTHENTICATED"};
#define NGRPC_CODES (sizeof grpc_codes / sizeof grpc_codes[0] + 1)
#define MAX_CODES (NGRPC_CODES > NCODES ? NGRPC_CODES : NCODES)

#define MAX_ENDPOINTS 16
#define MAX_GRPC 8 /* gRPC methods, and one more for unknown ones */
#define NSLOTS 64
#define MAX_DENIED 1024

/* Calls of one endpoint or method: by status code (an index of codes or grpc_codes, the last
 * for any other) and by duration. */
typedef struct call_counts {
    uint64_t code[MAX_CODES];
    uint64_t bucket[NBOUNDS + 1]; /* not cumulative; the last is above every bound */
    uint64_t sum_ns;
} call_counts;

/* One thread's counters; all updates are relaxed atomic adds, so a slot may be shared. */
typedef struct slot {
    uint64_t allowed, denied;
    uint64_t cost, refunded, charged; /* fixed point */
    /* fixed point, by level and unit: what allowed requests took in dollars (nano-dollars:
     * RL_USD_SCALE) and each dimension */
    uint64_t taken[RL_MAX_LEVELS][RL_UNITS];
    call_counts ep[MAX_ENDPOINTS];
    call_counts grpc[MAX_GRPC + 1];
} __attribute__((aligned(64))) slot;

typedef struct rule_entry {
    uint64_t count;
    uint16_t level;
    uint8_t unit; /* the rule's unit (denied amounts; 0 in the other tables) */
    char rule[129]; /* "" marks an empty entry */
} rule_entry;

/* Counts by (level, rule name): an open-addressing table under a mutex (the slow path: only
 * denials are counted), with one "other" count per level once it is three quarters full. */
typedef struct rule_counts {
    pthread_mutex_t mu;
    size_t n;
    rule_entry *e; /* MAX_DENIED entries */
    uint64_t other[RL_MAX_LEVELS];
} rule_counts;

/* The rules whose limit moves (RL_RULE_RESERVE_FRACTION): by (level, rule name), the limit and
 * the slots in flight of the key a decision last read, under mu. */
#define MAX_MOVING 64
typedef struct moving_entry {
    uint16_t level;
    char rule[129]; /* "" marks an empty entry */
    rl_fp limit, in_flight;
} moving_entry;

typedef struct moving_rules {
    pthread_mutex_t mu;
    size_t n;
    moving_entry e[MAX_MOVING];
} moving_rules;

struct rld_metrics {
    moving_rules moving;
    size_t nendpoints;
    const char *const *names;
    size_t ngrpc; /* gRPC methods named, 0: no gRPC */
    const char *grpc_names[MAX_GRPC];
    unsigned nslots; /* atomic: slots handed out */
    slot *slots;
    rule_counts denied; /* by the rule that blocked */
    rule_counts shadow; /* by the shadow rule that would have denied */
    rule_counts denied_amount; /* fixed point: what the blocking rules were asked, by unit */
    uint64_t snapshots_corrupt; /* atomic */
    uint64_t keys_refused;      /* atomic */
    uint64_t reloads[2];        /* atomic: refused, ok */
};

static _Thread_local struct {
    const rld_metrics *owner;
    slot *s;
} mine;

void rld_metrics_reload(rld_metrics *m, int ok)
{
    __atomic_add_fetch(&m->reloads[ok != 0], 1, __ATOMIC_RELAXED);
}

void rld_metrics_keys_refused(rld_metrics *m)
{
    __atomic_add_fetch(&m->keys_refused, 1, __ATOMIC_RELAXED);
}

void rld_metrics_snapshot_corrupt(rld_metrics *m)
{
    __atomic_add_fetch(&m->snapshots_corrupt, 1, __ATOMIC_RELAXED);
}

rld_metrics *rld_metrics_new(size_t nendpoints, const char *const *names)
{
    if (nendpoints > MAX_ENDPOINTS)
        return NULL;
    rld_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->nendpoints = nendpoints;
    m->names = names;
    m->slots = aligned_alloc(64, sizeof(slot) * NSLOTS);
    rule_counts *t[3] = {&m->denied, &m->shadow, &m->denied_amount};
    int ok = m->slots != NULL;
    for (int i = 0; i < 3; i++)
        ok &= (t[i]->e = calloc(MAX_DENIED, sizeof *t[i]->e)) != NULL;
    if (!ok) {
        free(m->slots);
        for (int i = 0; i < 3; i++)
            free(t[i]->e);
        free(m);
        return NULL;
    }
    memset(m->slots, 0, sizeof(slot) * NSLOTS);
    for (int i = 0; i < 3; i++)
        pthread_mutex_init(&t[i]->mu, NULL);
    pthread_mutex_init(&m->moving.mu, NULL);
    return m;
}

void rld_metrics_free(rld_metrics *m)
{
    if (!m)
        return;
    rule_counts *t[3] = {&m->denied, &m->shadow, &m->denied_amount};
    for (int i = 0; i < 3; i++) {
        pthread_mutex_destroy(&t[i]->mu);
        free(t[i]->e);
    }
    pthread_mutex_destroy(&m->moving.mu);
    free(m->slots);
    free(m);
}

/* The calling thread's slot; threads beyond NSLOTS share the last one. */
static slot *my_slot(rld_metrics *m)
{
    if (mine.owner != m) {
        unsigned i = __atomic_fetch_add(&m->nslots, 1, __ATOMIC_RELAXED);
        mine.owner = m;
        mine.s = &m->slots[i < NSLOTS ? i : NSLOTS - 1];
    }
    return mine.s;
}

static void add(uint64_t *c, uint64_t v)
{
    __atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}

static uint64_t get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

static void count_call(call_counts *e, size_t ci, rl_ns duration)
{
    size_t bi = 0;
    while (bi < NBOUNDS && duration > bounds[bi])
        bi++;
    add(&e->code[ci], 1);
    add(&e->bucket[bi], 1);
    add(&e->sum_ns, duration > 0 ? (uint64_t)duration : 0);
}

void rld_metrics_http(rld_metrics *m, size_t endpoint, int code, rl_ns duration)
{
    if (endpoint >= m->nendpoints)
        return;
    size_t ci = 0;
    while (ci < NCODES - 1 && codes[ci] != code)
        ci++;
    count_call(&my_slot(m)->ep[endpoint], ci, duration);
}

int rld_metrics_grpc_methods(rld_metrics *m, size_t n, const char *const *paths)
{
    if (n > MAX_GRPC)
        return -1;
    for (size_t i = 0; i < n; i++)
        m->grpc_names[i] = paths[i];
    m->ngrpc = n;
    return 0;
}

void rld_metrics_grpc(rld_metrics *m, int method, int code, rl_ns duration)
{
    size_t mi = method >= 0 && (size_t)method < m->ngrpc ? (size_t)method : m->ngrpc;
    size_t ci = code >= 0 && (size_t)code < NGRPC_CODES - 1 ? (size_t)code : NGRPC_CODES - 1;
    if (m->ngrpc)
        count_call(&my_slot(m)->grpc[mi], ci, duration);
}

/* Adds count to (level, rule) in t, under t->mu; past the table's room to the level's
 * "other". */
static void add_rule_count(rule_counts *t, size_t level, unsigned unit, const char *rule,
                           uint64_t count)
{
    size_t n = strlen(rule), h = level * 31 + unit;
    if (n >= sizeof t->e[0].rule)
        n = sizeof t->e[0].rule - 1;
    for (size_t i = 0; i < n; i++)
        h = h * 131 + (unsigned char)rule[i];
    for (size_t probe = 0; probe < MAX_DENIED; probe++) {
        rule_entry *e = &t->e[(h + probe) % MAX_DENIED];
        if (e->rule[0] == '\0') {
            /* keep a quarter free so that probing stays short */
            if (t->n >= MAX_DENIED * 3 / 4)
                break;
            e->level = (uint16_t)level;
            e->unit = (uint8_t)unit;
            memcpy(e->rule, rule, n);
            e->rule[n] = '\0';
            e->count = count;
            t->n++;
            return;
        }
        if (e->level == level && e->unit == unit && strncmp(e->rule, rule, n) == 0 &&
            e->rule[n] == '\0') {
            e->count += count;
            return;
        }
    }
    t->other[level] += count;
}

static void count_rule(rule_counts *t, size_t level, unsigned unit, const char *rule,
                       uint64_t count)
{
    pthread_mutex_lock(&t->mu);
    add_rule_count(t, level, unit, rule, count);
    pthread_mutex_unlock(&t->mu);
}

/* What allowed request d took in dollars and each dimension, by level: once per level and
 * unit however many of the level's rules count it. */
static void count_taken(slot *s, const rl_decision *d)
{
    uint32_t seen[RL_MAX_LEVELS] = {0};
    for (size_t i = 0; i < d->napplied; i++) {
        const rl_applied *a = &d->applied[i];
        unsigned u = a->rule->unit;
        if (u < RL_UNIT_USD || !d->amt[u] || (seen[a->level] >> u & 1u) || a->shadow_denied)
            continue;
        seen[a->level] |= 1u << u;
        add(&s->taken[a->level][u], (uint64_t)d->amt[u]);
    }
}

/* A rule whose limit moves, as decision d left it: its (level, rule) entry takes the values
 * (past MAX_MOVING entries, new ones are not kept). */
static void note_moving(rld_metrics *m, const rl_decision *d, size_t i)
{
    const rl_applied *a = &d->applied[i];
    const rl_rule_status *st = rl_decision_status(d, i);
    if (!st)
        return;
    moving_rules *t = &m->moving;
    pthread_mutex_lock(&t->mu);
    size_t k = 0;
    while (k < t->n && !(t->e[k].level == a->level && strcmp(t->e[k].rule, a->rule->name) == 0))
        k++;
    if (k == t->n && t->n < MAX_MOVING) {
        t->e[k].level = a->level;
        snprintf(t->e[k].rule, sizeof t->e[k].rule, "%s", a->rule->name);
        t->n++;
    }
    if (k < t->n) {
        t->e[k].limit = st->limit;
        t->e[k].in_flight = st->limit - st->remaining;
    }
    pthread_mutex_unlock(&t->mu);
}

void rld_metrics_decision(rld_metrics *m, const rl_decision *d, int dry_run, rl_fp cost)
{
    slot *s = my_slot(m);
    for (size_t i = 0; i < d->napplied; i++) {
        if (d->applied[i].rule->type->flags & RL_RULE_RESERVE_FRACTION)
            note_moving(m, d, i);
        if (d->applied[i].shadow_denied)
            count_rule(&m->shadow, d->applied[i].level, 0, d->applied[i].rule->name, 1);
    }
    if (d->allowed) {
        add(&s->allowed, 1);
        if (!dry_run) {
            add(&s->cost, (uint64_t)cost);
            if (d->has_amt)
                count_taken(s, d);
        }
        return;
    }
    add(&s->denied, 1);
    if (d->blocked >= 0) {
        const rl_applied *a = &d->applied[d->blocked];
        int closed = a->fallback == RL_FALLBACK_CLOSED;
        count_rule(&m->denied, a->level, 0, closed ? RLD_STORE_UNAVAILABLE : a->rule->name, 1);
        rl_fp asked = rl_unit_amount(a->rule->unit, cost, d->has_amt ? d->amt : NULL);
        if (!closed && asked > 0)
            count_rule(&m->denied_amount, a->level, a->rule->unit, a->rule->name,
                       (uint64_t)asked);
    }
}

void rld_metrics_settle(rld_metrics *m, const rl_settlement *st)
{
    slot *s = my_slot(m);
    add(&s->refunded, (uint64_t)st->refunded);
    add(&s->charged, (uint64_t)st->charged);
}

/* ---- exposition -------------------------------------------------------------------------- */

static void family(rld_buf *o, const char *name, const char *type, const char *help)
{
    rld_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with '\\', '"' and newlines escaped. */
static void label(rld_buf *o, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            rld_buf_putc(o, '\\');
        if (*v == '\n')
            rld_buf_puts(o, "\\n");
        else
            rld_buf_putc(o, *v);
    }
}

static void u64_line(rld_buf *o, uint64_t v)
{
    rld_buf_printf(o, " %llu\n", (unsigned long long)v);
}

/* One series per (level, rule) of a table, and the levels' "other" counts. */
/* Moves a table's counts from the levels of from to those of the same name in to; the counts
 * of a level that to does not have are dropped (its series end). */
static void remap_rule_counts(rule_counts *t, const rl_config *from, const rl_config *to)
{
    long map[RL_MAX_LEVELS];
    uint64_t other[RL_MAX_LEVELS] = {0};
    for (size_t l = 0; l < from->nlevels && l < RL_MAX_LEVELS; l++) {
        map[l] = -1;
        for (size_t k = 0; k < to->nlevels; k++)
            if (strcmp(from->levels[l].name, to->levels[k].name) == 0)
                map[l] = (long)k;
    }
    rule_entry *old = malloc(MAX_DENIED * sizeof *old);
    if (!old)
        return; /* out of memory: the counts stay by position */
    pthread_mutex_lock(&t->mu);
    memcpy(old, t->e, MAX_DENIED * sizeof *old);
    memset(t->e, 0, MAX_DENIED * sizeof *old);
    t->n = 0;
    for (size_t l = 0; l < from->nlevels && l < RL_MAX_LEVELS; l++)
        if (map[l] >= 0)
            other[map[l]] += t->other[l];
    memcpy(t->other, other, sizeof other);
    for (size_t i = 0; i < MAX_DENIED; i++)
        if (old[i].rule[0] && old[i].level < from->nlevels && map[old[i].level] >= 0)
            add_rule_count(t, (size_t)map[old[i].level], old[i].unit, old[i].rule,
                           old[i].count);
    pthread_mutex_unlock(&t->mu);
    free(old);
}

void rld_metrics_levels_changed(rld_metrics *m, const rl_config *from, const rl_config *to)
{
    remap_rule_counts(&m->denied, from, to);
    remap_rule_counts(&m->shadow, from, to);
    remap_rule_counts(&m->denied_amount, from, to);
    pthread_mutex_lock(&m->moving.mu); /* the next decisions fill it again */
    m->moving.n = 0;
    pthread_mutex_unlock(&m->moving.mu);
}

/* An amount of unit u as a sample value: fixed point, dollars for usd. */
static void amount_line(rld_buf *o, unsigned u, uint64_t v)
{
    rld_buf_putc(o, ' ');
    rld_buf_fp(o, (rl_fp)(u == RL_UNIT_USD ? v / RL_USD_SCALE : v));
    rld_buf_putc(o, '\n');
}

/* amounts: t counts amounts (with a unit label) rather than decisions. */
static void render_rule_counts(rld_buf *o, const char *name, rule_counts *t, const rl_config *cfg,
                               int amounts)
{
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < MAX_DENIED; i++) {
        const rule_entry *e = &t->e[i];
        if (!e->rule[0] || e->level >= cfg->nlevels)
            continue;
        rld_buf_printf(o, "%s{level=\"", name);
        label(o, cfg->levels[e->level].name);
        rld_buf_puts(o, "\",rule=\"");
        label(o, e->rule);
        if (amounts) {
            rld_buf_puts(o, "\",unit=\"");
            label(o, rld_amount_unit_name(cfg, e->unit));
            rld_buf_puts(o, "\"}");
            amount_line(o, e->unit, e->count);
            continue;
        }
        rld_buf_puts(o, "\"}");
        u64_line(o, e->count);
    }
    for (size_t l = 0; l < cfg->nlevels; l++)
        if (t->other[l]) {
            rld_buf_printf(o, "%s{level=\"", name);
            label(o, cfg->levels[l].name);
            rld_buf_puts(o, "\",rule=\"other\"}");
            u64_line(o, t->other[l]);
        }
    pthread_mutex_unlock(&t->mu);
}

/* ---- calls by endpoint or method ---------------------------------------------------------- */

typedef struct call_table {
    const char *requests, *requests_help; /* the counter family */
    const char *duration, *duration_help; /* the histogram family */
    size_t (*rows)(const rld_metrics *m);
    call_counts *(*row)(slot *s, size_t r);
    void (*labels)(rld_buf *o, const rld_metrics *m, size_t r); /* without braces */
    size_t ncodes;
    void (*code)(rld_buf *o, size_t c);
} call_table;

static size_t http_rows(const rld_metrics *m)
{
    return m->nendpoints;
}

static call_counts *http_row(slot *s, size_t r)
{
    return &s->ep[r];
}

static void http_labels(rld_buf *o, const rld_metrics *m, size_t r)
{
    rld_buf_puts(o, "endpoint=\"");
    label(o, m->names[r]);
    rld_buf_putc(o, '"');
}

static void http_code(rld_buf *o, size_t c)
{
    if (c < NCODES - 1)
        rld_buf_printf(o, "%d", codes[c]);
    else
        rld_buf_puts(o, "other");
}

static size_t grpc_rows(const rld_metrics *m)
{
    return m->ngrpc + 1;
}

static call_counts *grpc_row(slot *s, size_t r)
{
    return &s->grpc[r];
}

/* "/package.Service/Method" as service="package.Service",method="Method" */
static void grpc_labels(rld_buf *o, const rld_metrics *m, size_t r)
{
    const char *path = r < m->ngrpc ? m->grpc_names[r] : NULL;
    const char *slash = path ? strrchr(path, '/') : NULL;
    if (!slash || slash == path) {
        rld_buf_puts(o, "service=\"other\",method=\"other\"");
        return;
    }
    rld_buf_puts(o, "service=\"");
    rld_buf_printf(o, "%.*s", (int)(slash - path - 1), path + 1);
    rld_buf_puts(o, "\",method=\"");
    label(o, slash + 1);
    rld_buf_putc(o, '"');
}

static void grpc_code(rld_buf *o, size_t c)
{
    rld_buf_puts(o, c < NGRPC_CODES - 1 ? grpc_codes[c] : "other");
}

static const call_table http_calls = {
    "ratelimit_http_requests_total", "HTTP requests answered, by endpoint and status code.",
    "ratelimit_http_request_duration_seconds",
    "Time from a request's headers to its answer, by endpoint.",
    http_rows, http_row, http_labels, NCODES, http_code};

static const call_table grpc_calls = {
    "ratelimit_grpc_requests_total", "gRPC calls answered, by service, method and status code.",
    "ratelimit_grpc_request_duration_seconds",
    "Time from a call's headers to its answer, by service and method.",
    grpc_rows, grpc_row, grpc_labels, NGRPC_CODES, grpc_code};

static void series(rld_buf *o, const char *name, const char *suffix, const call_table *t,
                   const rld_metrics *m, size_t r)
{
    rld_buf_printf(o, "%s%s{", name, suffix);
    t->labels(o, m, r);
}

/* The counter (series with a count only) and the histogram of a table of calls. */
static void render_calls(rld_buf *o, rld_metrics *m, unsigned used, const call_table *t)
{
    family(o, t->requests, "counter", t->requests_help);
    for (size_t r = 0; r < t->rows(m); r++)
        for (size_t c = 0; c < t->ncodes; c++) {
            uint64_t n = 0;
            for (unsigned i = 0; i < used; i++)
                n += get(&t->row(&m->slots[i], r)->code[c]);
            if (!n)
                continue;
            series(o, t->requests, "", t, m, r);
            rld_buf_puts(o, ",code=\"");
            t->code(o, c);
            rld_buf_puts(o, "\"}");
            u64_line(o, n);
        }
    family(o, t->duration, "histogram", t->duration_help);
    for (size_t r = 0; r < t->rows(m); r++) {
        uint64_t cum = 0, sum = 0;
        for (size_t b = 0; b <= NBOUNDS; b++) {
            for (unsigned i = 0; i < used; i++)
                cum += get(&t->row(&m->slots[i], r)->bucket[b]);
            series(o, t->duration, "_bucket", t, m, r);
            rld_buf_printf(o, ",le=\"%s\"}", b < NBOUNDS ? bound_names[b] : "+Inf");
            u64_line(o, cum);
        }
        for (unsigned i = 0; i < used; i++)
            sum += get(&t->row(&m->slots[i], r)->sum_ns);
        series(o, t->duration, "_sum", t, m, r);
        rld_buf_puts(o, "} ");
        rld_buf_seconds(o, (rl_ns)sum);
        rld_buf_putc(o, '\n');
        series(o, t->duration, "_count", t, m, r);
        rld_buf_putc(o, '}');
        u64_line(o, cum);
    }
}

/* One series of a value (its labels written out): a family's first series carries its HELP
 * and TYPE. */
typedef struct scalar {
    const char *family;
    const char *type; /* NULL: another series of the family above */
    const char *help;
    const char *labels; /* "{...}" or "" */
    uint64_t value;
    int fp; /* value is an rl_fp amount */
} scalar;

static void render_scalars(rld_buf *o, const scalar *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i].type)
            family(o, s[i].family, s[i].type, s[i].help);
        rld_buf_puts(o, s[i].family);
        rld_buf_puts(o, s[i].labels);
        if (!s[i].fp) {
            u64_line(o, s[i].value);
            continue;
        }
        rld_buf_putc(o, ' ');
        rld_buf_fp(o, (rl_fp)s[i].value);
        rld_buf_putc(o, '\n');
    }
}

static uint64_t load_u64(const uint64_t *v)
{
    return __atomic_load_n(v, __ATOMIC_RELAXED);
}

/* What allowed requests took in dollars and each dimension by level (series with a value
 * only), and what denied ones asked of the rule that blocked them. */
static void render_units(rld_buf *o, rld_metrics *m, unsigned used, const rl_config *cfg)
{
    if (!cfg->ndims && !cfg->price_by)
        return;
    family(o, "ratelimit_taken_total", "counter",
           "Amounts taken by allowed requests of POST /acquire and GET /check in dollars and "
           "each dimension, by level (dry runs excluded).");
    for (size_t l = 0; l < cfg->nlevels; l++)
        for (unsigned u = RL_UNIT_USD; u < RL_UNIT_DIM0 + cfg->ndims; u++) {
            uint64_t v = 0;
            for (unsigned i = 0; i < used; i++)
                v += get(&m->slots[i].taken[l][u]);
            if (!v)
                continue;
            rld_buf_puts(o, "ratelimit_taken_total{level=\"");
            label(o, cfg->levels[l].name);
            rld_buf_puts(o, "\",unit=\"");
            label(o, rld_amount_unit_name(cfg, u));
            rld_buf_puts(o, "\"}");
            amount_line(o, u, v);
        }
    family(o, "ratelimit_denied_amount_total", "counter",
           "Amounts denied requests asked of the rule that blocked them, by level, rule and "
           "unit.");
    render_rule_counts(o, "ratelimit_denied_amount_total", &m->denied_amount, cfg, 1);
}

/* The decisions' outcomes and amounts, summed over the slots in use. */
static void render_decisions(rld_buf *o, rld_metrics *m, unsigned used, const rl_config *cfg)
{
    uint64_t allowed = 0, denied = 0, cost = 0, refunded = 0, charged = 0;
    for (unsigned i = 0; i < used; i++) {
        allowed += get(&m->slots[i].allowed);
        denied += get(&m->slots[i].denied);
        cost += get(&m->slots[i].cost);
        refunded += get(&m->slots[i].refunded);
        charged += get(&m->slots[i].charged);
    }
    const scalar outcomes[] = {
        {"ratelimit_acquire_total", "counter",
         "Decisions made by POST /acquire, by outcome (dry runs included).",
         "{decision=\"allowed\"}", allowed, 0},
        {"ratelimit_acquire_total", NULL, NULL, "{decision=\"denied\"}", denied, 0}};
    const scalar amounts[] = {
        {"ratelimit_cost_total", "counter",
         "Cost taken by allowed requests of POST /acquire (dry runs excluded).", "", cost, 1},
        {"ratelimit_refunded_cost_total", "counter",
         "Cost given back by POST /refund (reserved minus actual).", "", refunded, 1},
        {"ratelimit_charged_cost_total", "counter",
         "Cost charged by POST /refund beyond the reservation (actual minus reserved).", "",
         charged, 1}};
    render_scalars(o, outcomes, sizeof outcomes / sizeof outcomes[0]);
    family(o, "ratelimit_denied_total", "counter",
           "Denied decisions by the level and rule that blocked them.");
    render_rule_counts(o, "ratelimit_denied_total", &m->denied, cfg, 0);
    family(o, "ratelimit_shadow_denied_total", "counter",
           "Decisions a shadow rule would have denied (it never denies), by level and rule.");
    render_rule_counts(o, "ratelimit_shadow_denied_total", &m->shadow, cfg, 0);
    render_scalars(o, amounts, sizeof amounts / sizeof amounts[0]);
    render_units(o, m, used, cfg);
}

/* What the store holds and what the daemon has done besides deciding. */
static void render_state(rld_buf *o, rld_metrics *m, rl_limiter *lim)
{
    rl_stats st;
    rl_limiter_stats(lim, &st);
    const scalar keys[] = {
        {"ratelimit_key_states", "gauge",
         "Key states (one per rule of a key) the memory store holds, against max_keys.", "",
         st.key_states, 0},
        {"ratelimit_key_states_max", "gauge",
         "max_keys: the key states the memory store holds at most.", "", st.key_states_max, 0}};
    const scalar rest[] = {
        {"ratelimit_snapshot_corrupt_total", "counter",
         "State files found corrupt or truncated at start and moved aside unloaded.", "",
         load_u64(&m->snapshots_corrupt), 0},
        {"ratelimit_config_reloads_total", "counter",
         "Configuration reloads (SIGHUP, POST /admin/reload), by result.", "{result=\"ok\"}",
         load_u64(&m->reloads[1]), 0},
        {"ratelimit_config_reloads_total", NULL, NULL, "{result=\"error\"}",
         load_u64(&m->reloads[0]), 0},
        {"ratelimit_keys_refused_total", "counter",
         "Decisions refused (503) because the store held max_keys key states, none idle.", "",
         load_u64(&m->keys_refused), 0}};
    const scalar resv[] = {
        {"ratelimit_reservations_active", "gauge", "Reservations not yet released or expired.",
         "", st.reservations_active, 0},
        {"ratelimit_reservations_expired_total", "counter",
         "Reservations that reached reservation_ttl before the client finished them.", "",
         st.reservations_expired, 0}};
    render_scalars(o, resv, sizeof resv / sizeof resv[0]);
    if (st.key_states_max) /* only a store bounded by max_keys counts its states */
        render_scalars(o, keys, sizeof keys / sizeof keys[0]);
    render_scalars(o, rest, sizeof rest / sizeof rest[0]);
}

/* The rules whose limit moves: their families only when the configuration has one. */
static void render_moving(rld_buf *o, rld_metrics *m, const rl_config *cfg)
{
    static const struct {
        const char *name, *help;
    } fam[] = {{"ratelimit_adaptive_limit",
                "The current limit of a rule whose limit moves, for the key a decision last "
                "read, by level and rule."},
               {"ratelimit_adaptive_in_flight",
                "Slots held under a rule whose limit moves, for the key a decision last read, "
                "by level and rule."}};
    moving_rules *t = &m->moving;
    pthread_mutex_lock(&t->mu);
    for (size_t f = 0; f < 2 && t->n > 0; f++) {
        family(o, fam[f].name, "gauge", fam[f].help);
        for (size_t k = 0; k < t->n; k++) {
            if (t->e[k].level >= cfg->nlevels)
                continue;
            rld_buf_printf(o, "%s{level=\"", fam[f].name);
            label(o, cfg->levels[t->e[k].level].name);
            rld_buf_puts(o, "\",rule=\"");
            label(o, t->e[k].rule);
            rl_fp v = f == 0 ? t->e[k].limit : t->e[k].in_flight;
            rld_buf_printf(o, "\"} %g\n", rl_fp_to_double(v));
        }
    }
    pthread_mutex_unlock(&t->mu);
}

void rld_metrics_render(rld_metrics *m, rl_limiter *lim, rld_buf *o)
{
    const rl_config *cfg = rl_limiter_config(lim);
    unsigned used = __atomic_load_n(&m->nslots, __ATOMIC_RELAXED);
    used = used < NSLOTS ? used : NSLOTS;
    render_decisions(o, m, used, cfg);
    render_state(o, m, lim);
    family(o, "ratelimit_keys", "gauge", "Keys with state held in the store, by level.");
    for (size_t l = 0; l < cfg->nlevels; l++) {
        rld_buf_puts(o, "ratelimit_keys{level=\"");
        label(o, cfg->levels[l].name);
        rld_buf_puts(o, "\"}");
        u64_line(o, rl_limiter_keys(lim, l));
    }
    render_calls(o, m, used, &http_calls);
    if (m->ngrpc)
        render_calls(o, m, used, &grpc_calls);
    render_moving(o, m, cfg);
}
