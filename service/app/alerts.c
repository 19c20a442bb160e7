/*
 * alerts.c - see alerts.h.
 *
 * Worked example: a rule of 100 a day with alerts [0.8, 0.95]. Used 70, a request of
 * 15 is allowed: before 70, after 85, and 80 (0.8 * 100) lies in (70, 85]: one record for 0.8.
 * A request of 15 more: before 85, after 100, 95 in (85, 100]: one for 0.95. The next day
 * starts from 0, so 80 is crossed again there, in a new period: a new alert.
 */
#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alerts.h"
#include "log.h"
#include "rules_json.h"

/* What a decision hands the sender: everything copied, nothing borrowed. */
typedef struct alert_rec {
    char level[128];
    char rule[129];
    char unit[65];
    char key[RL_COMPOSED_MAX + 1];
    rl_fp used, limit;  /* in the rule's unit, RL_FP_ONE per unit (dollars for usd) */
    double threshold;
    rl_ns start, end;   /* the period */
    rl_ns now;          /* the decision's time */
} alert_rec;

/* An alert sent (or claimed elsewhere) in a period that has not ended: its identity's hash. */
typedef struct seen_ent {
    uint64_t h;
    rl_ns end; /* 0: a free slot */
} seen_ent;

struct rld_alerts {
    char *url;
    char *auth; /* "Authorization: Bearer ..." or NULL */
    unsigned attempts, timeout_ms;
    rld_alerts_claim_fn claim;
    void *claim_self;
    rl_ns (*clock)(void);

    pthread_mutex_t mu; /* the queue and stop; held only to copy a record in or out */
    pthread_cond_t cv;  /* a record queued, or stop */
    alert_rec *q;
    size_t cap, head, n;
    int stop;
    atomic_int stopping; /* stop, read by a try in progress without the lock */
    pthread_t th;

    seen_ent *seen; /* the sender's alone */
    size_t seen_cap, seen_n;

    atomic_uint_fast64_t sent, dropped, failed, duplicate;
};

/* ---- noting a crossing (the decision's thread) ------------------------------------------ */

/* What the decision took from applied rule ap, in the rule's unit as its status counts. */
static rl_fp taken_by(const rl_applied *ap, const rl_request *req, const rl_decision *d)
{
    rl_fp cost = req->cost;
    for (size_t i = 0; i < req->nitems; i++)
        if (req->items[i].level == ap->level && req->items[i].keylen == ap->keylen &&
            memcmp(req->items[i].key, ap->key, ap->keylen) == 0)
            cost = req->items[i].cost;
    switch (ap->rule->unit) {
    case RL_UNIT_COST:
        return cost;
    case RL_UNIT_REQUESTS:
        return cost > 0 ? RL_FP_ONE : 0;
    default:
        return d->has_amt ? d->amt[ap->rule->unit] : 0;
    }
}

static void copy_str(char *dst, size_t cap, const char *s, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
}

/* Queues r, or drops and counts it when the queue is full. */
static void enqueue(rld_alerts *a, const alert_rec *r)
{
    pthread_mutex_lock(&a->mu);
    if (a->n == a->cap || a->stop) {
        pthread_mutex_unlock(&a->mu);
        atomic_fetch_add(&a->dropped, 1);
        return;
    }
    a->q[(a->head + a->n) % a->cap] = *r;
    a->n++;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void rld_alerts_note(rld_alerts *a, const rl_config *cfg, const rl_request *req,
                     const rl_decision *d)
{
    if (!a || !d->allowed || (req->flags & RL_DRY_RUN))
        return;
    for (size_t i = 0; i < d->napplied; i++) {
        const rl_applied *ap = &d->applied[i];
        const rl_rule *rule = ap->rule;
        if (!rule->nalerts || ap->shadow_denied || ap->fallback != RL_FALLBACK_NONE ||
            !ap->has_status)
            continue;
        rl_fp taken = taken_by(ap, req, d);
        if (taken <= 0)
            continue;
        const rl_rule_status *st = rl_decision_status(d, i);
        if (!st || st->limit <= 0)
            continue;
        rl_fp after = st->limit - st->remaining, before = after - taken;
        alert_rec r;
        int filled = 0;
        for (unsigned k = 0; k < rule->nalerts; k++) {
            rl_fp mark = (rl_fp)llround(rule->alerts[k] * (double)st->limit);
            if (!(before < mark && after >= mark))
                continue;
            if (!filled) {
                int64_t scale = rl_rule_scale(rule);
                const char *lname = cfg && ap->level < cfg->nlevels ? cfg->levels[ap->level].name
                                                                    : "";
                const char *unit = rld_amount_unit_name(cfg, rule->unit);
                copy_str(r.level, sizeof r.level, lname, strlen(lname));
                copy_str(r.rule, sizeof r.rule, rule->name, strlen(rule->name));
                copy_str(r.unit, sizeof r.unit, unit, strlen(unit));
                copy_str(r.key, sizeof r.key, ap->key, ap->keylen);
                r.used = after / scale;
                r.limit = st->limit / scale;
                /* a periodic type's reset_after runs to its period's end once it counted */
                r.end = d->now + st->reset_after;
                r.start = r.end - st->window;
                r.now = d->now;
                filled = 1;
            }
            r.threshold = rule->alerts[k];
            enqueue(a, &r);
        }
    }
}

/* ---- the sender's thread ------------------------------------------------------------------ */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t identity(const alert_rec *r)
{
    uint64_t h = 1469598103934665603ull;
    h = fnv(h, r->level, strlen(r->level) + 1);
    h = fnv(h, r->key, strlen(r->key) + 1);
    h = fnv(h, r->rule, strlen(r->rule) + 1);
    h = fnv(h, &r->start, sizeof r->start);
    h = fnv(h, &r->threshold, sizeof r->threshold);
    return h ? h : 1;
}

/* The slot of h in the table (open addressing), or the free slot where it would go. */
static seen_ent *seen_slot(seen_ent *t, size_t cap, uint64_t h)
{
    size_t i = (size_t)(h & (cap - 1));
    while (t[i].end != 0 && t[i].h != h)
        i = (i + 1) & (cap - 1);
    return &t[i];
}

/* Whether h was sent in a period that has not ended by now. */
static int seen_has(rld_alerts *a, uint64_t h, rl_ns now)
{
    if (!a->seen_cap)
        return 0;
    seen_ent *e = seen_slot(a->seen, a->seen_cap, h);
    return e->end != 0 && e->end > now;
}

/* Remembers h until end, dropping what ended by now when the table fills. */
static void seen_add(rld_alerts *a, uint64_t h, rl_ns end, rl_ns now)
{
    if (a->seen_n * 2 >= a->seen_cap) {
        size_t live = 0;
        for (size_t i = 0; i < a->seen_cap; i++)
            live += a->seen[i].end > now;
        size_t cap = 64;
        while (cap < live * 4 + 4)
            cap *= 2;
        seen_ent *t = calloc(cap, sizeof *t);
        if (!t)
            return; /* not remembered: at worst a duplicate */
        for (size_t i = 0; i < a->seen_cap; i++)
            if (a->seen[i].end > now)
                *seen_slot(t, cap, a->seen[i].h) = a->seen[i];
        free(a->seen);
        a->seen = t;
        a->seen_cap = cap;
        a->seen_n = live;
    }
    seen_ent *e = seen_slot(a->seen, a->seen_cap, h);
    if (e->end == 0)
        a->seen_n++;
    e->h = h;
    e->end = end;
}

static void body_of(const alert_rec *r, rld_buf *b)
{
    rld_buf_puts(b, "{\"level\":");
    rld_buf_json_str(b, r->level, strlen(r->level));
    rld_buf_puts(b, ",\"key\":");
    rld_buf_json_str(b, r->key, strlen(r->key));
    rld_buf_puts(b, ",\"rule\":");
    rld_buf_json_str(b, r->rule, strlen(r->rule));
    rld_buf_puts(b, ",\"unit\":");
    rld_buf_json_str(b, r->unit, strlen(r->unit));
    rld_buf_puts(b, ",\"used\":");
    rld_buf_fp(b, r->used);
    rld_buf_puts(b, ",\"limit\":");
    rld_buf_fp(b, r->limit);
    rld_buf_printf(b, ",\"threshold\":%g,\"period_start\":", r->threshold);
    rld_buf_rfc3339(b, r->start);
    rld_buf_puts(b, ",\"period_end\":");
    rld_buf_rfc3339(b, r->end);
    rld_buf_putc(b, '}');
}

static size_t discard(char *p, size_t size, size_t n, void *u)
{
    (void)p;
    (void)u;
    return size * n;
}

/* Ends a try in progress (connecting, or waiting on a receiver that hangs) once the daemon
 * stops: libcurl calls it at least about once a second. */
static int progress(void *u, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                    curl_off_t ulnow)
{
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    return atomic_load(&((rld_alerts *)u)->stopping) != 0;
}

/* One try: 1 when the receiver answered 2xx. */
static int post_once(rld_alerts *a, CURL *c, const char *body, size_t len)
{
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (a->auth)
        h = curl_slist_append(h, a->auth);
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, a->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)len);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)a->timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, a);
    long code = 0;
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    return rc == CURLE_OK && code >= 200 && code < 300;
}

/* Waits ms milliseconds or until stop; returns stop. */
static int nap(rld_alerts *a, unsigned ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&a->mu);
    while (!a->stop && pthread_cond_timedwait(&a->cv, &a->mu, &ts) == 0)
        ;
    int stop = a->stop;
    pthread_mutex_unlock(&a->mu);
    return stop;
}

/* Sends r once for the fleet (claimed first when there is a claim), retrying. */
static void deliver(rld_alerts *a, CURL *c, const alert_rec *r)
{
    uint64_t h = identity(r);
    rl_ns now = a->clock ? a->clock() : r->now;
    if (seen_has(a, h, r->now)) {
        atomic_fetch_add(&a->duplicate, 1);
        return;
    }
    seen_add(a, h, r->end, r->now);
    if (a->claim) {
        char name[sizeof r->level + sizeof r->rule + sizeof r->key + 80];
        int64_t ttl = (r->end - now) / 1000000;
        snprintf(name, sizeof name, "%s:%s:%s:%lld:%g", r->level, r->key, r->rule,
                 (long long)(r->start / RL_NS_PER_SEC), r->threshold);
        if (a->claim(a->claim_self, name, ttl > 1000 ? ttl : 1000) == 0) {
            atomic_fetch_add(&a->duplicate, 1);
            return;
        }
    }
    char store[1024];
    rld_buf b;
    rld_buf_init(&b, store, sizeof store);
    body_of(r, &b);
    const char *body = rld_buf_cstr(&b);
    unsigned wait = 100;
    for (unsigned i = 0; i < a->attempts; i++) {
        if (i > 0) {
            if (nap(a, wait))
                break;
            wait = wait < 5000 ? wait * 2 : 10000;
        }
        if (post_once(a, c, body, strlen(body))) {
            atomic_fetch_add(&a->sent, 1);
            rld_buf_reset(&b);
            return;
        }
    }
    rld_log("warn: alert for %s %s %s at %g not delivered to %s after %u tries", r->level,
            r->key, r->rule, r->threshold, a->url, a->attempts);
    atomic_fetch_add(&a->failed, 1);
    rld_buf_reset(&b);
}

static void *sender(void *arg)
{
    rld_alerts *a = arg;
    CURL *c = curl_easy_init();
    alert_rec *r = malloc(sizeof *r);
    for (;;) {
        pthread_mutex_lock(&a->mu);
        while (!a->stop && a->n == 0)
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->stop) {
            pthread_mutex_unlock(&a->mu);
            break;
        }
        if (r)
            *r = a->q[a->head];
        a->head = (a->head + 1) % a->cap;
        a->n--;
        pthread_mutex_unlock(&a->mu);
        if (c && r)
            deliver(a, c, r);
        else
            atomic_fetch_add(&a->failed, 1);
    }
    free(r);
    if (c)
        curl_easy_cleanup(c);
    return NULL;
}

/* ---- life ------------------------------------------------------------------------------- */

rld_alerts *rld_alerts_new(const rld_alerts_config *c, rl_err *err)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        rl_errf(err, RL_EIO, "alert_webhook: libcurl cannot start");
        return NULL;
    }
    rld_alerts *a = calloc(1, sizeof *a);
    if (!a || !(a->url = strdup(c->url)) || !(a->q = calloc(c->queue, sizeof *a->q)))
        goto oom;
    if (c->token) {
        size_t n = strlen(c->token) + 32;
        if (!(a->auth = malloc(n)))
            goto oom;
        snprintf(a->auth, n, "Authorization: Bearer %s", c->token);
    }
    a->cap = c->queue;
    a->attempts = c->attempts;
    a->timeout_ms = c->timeout_ms;
    a->claim = c->claim;
    a->claim_self = c->claim_self;
    a->clock = c->clock;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&a->th, NULL, sender, a) != 0) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        rl_errf(err, RL_EIO, "alert_webhook: cannot start the alerts' thread");
        goto fail;
    }
    return a;
oom:
    rl_errf(err, RL_ENOMEM, "out of memory");
fail:
    if (a) {
        free(a->url);
        free(a->auth);
        free(a->q);
        free(a);
    }
    curl_global_cleanup();
    return NULL;
}

void rld_alerts_metrics(rld_alerts *a, rld_buf *out)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    size_t queued = a->n;
    pthread_mutex_unlock(&a->mu);
    rld_buf_printf(out,
                   "# HELP ratelimit_alerts_total Alerts of the rules' \"alerts\" by what came "
                   "of them (duplicate: already sent in that period, here or by another "
                   "instance).\n"
                   "# TYPE ratelimit_alerts_total counter\n"
                   "ratelimit_alerts_total{result=\"sent\"} %llu\n"
                   "ratelimit_alerts_total{result=\"dropped\"} %llu\n"
                   "ratelimit_alerts_total{result=\"failed\"} %llu\n"
                   "ratelimit_alerts_total{result=\"duplicate\"} %llu\n"
                   "# HELP ratelimit_alerts_queued Alerts waiting to be sent.\n"
                   "# TYPE ratelimit_alerts_queued gauge\n"
                   "ratelimit_alerts_queued %zu\n",
                   (unsigned long long)atomic_load(&a->sent),
                   (unsigned long long)atomic_load(&a->dropped),
                   (unsigned long long)atomic_load(&a->failed),
                   (unsigned long long)atomic_load(&a->duplicate), queued);
}

void rld_alerts_free(rld_alerts *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    atomic_store(&a->stopping, 1);
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->th, NULL);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->url);
    free(a->auth);
    free(a->q);
    free(a->seen);
    free(a);
    curl_global_cleanup();
}
