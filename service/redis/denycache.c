/*
 * denycache.c - see denycache.h.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "denycache.h"

#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 5000
#define SUBSCRIBE_TIMEOUT_MS 2000

typedef struct dc_entry {
    uint64_t h; /* 0: empty */
    uint64_t fp;
    rl_fp need;
    rl_ns at, until;
    rld_denial dn;
    uint16_t len;
    char key[DC_KEY_MAX];
} dc_entry;

typedef struct dc_set {
    pthread_mutex_t mu;
    uint64_t gen; /* atomic: bumped by every forget and clear of the set */
    dc_entry e[DC_WAYS];
} dc_set;

struct rld_denycache {
    dc_set set[DC_SETS];
    int live;                         /* atomic */
    uint64_t answered[RL_MAX_LEVELS]; /* atomic */
    uint64_t messages;                /* atomic */
    /* the follower */
    pthread_t th;
    int running;
    int wake[2];
    rld_rconn *(*connect)(void *ctx);
    void *ctx;
    char *deny_channel, *quota_channel;
};

rld_denycache *rld_denycache_new(void)
{
    rld_denycache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    for (size_t i = 0; i < DC_SETS; i++) {
        pthread_mutex_init(&c->set[i].mu, NULL);
        c->set[i].gen = 1;
    }
    c->wake[0] = c->wake[1] = -1;
    return c;
}

void rld_denycache_free(rld_denycache *c)
{
    if (!c)
        return;
    if (c->running) {
        ssize_t w = write(c->wake[1], "x", 1);
        (void)w;
        pthread_join(c->th, NULL);
    }
    if (c->wake[0] >= 0) {
        close(c->wake[0]);
        close(c->wake[1]);
    }
    for (size_t i = 0; i < DC_SETS; i++)
        pthread_mutex_destroy(&c->set[i].mu);
    free(c->deny_channel);
    free(c->quota_channel);
    free(c);
}

int rld_denycache_live(rld_denycache *c)
{
    return __atomic_load_n(&c->live, __ATOMIC_ACQUIRE);
}

/* ---- fingerprints and hashes --------------------------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

uint64_t rld_denycache_fingerprint(const rl_rule *r)
{
    uint64_t h = 0xcbf29ce484222325ull;
    int64_t f[6] = {(int64_t)r->type_id,      (int64_t)r->unit, r->reserved,
                    r->reserved_min_priority, r->shadow,        r->charge};
    h = fnv(h, &r->type, sizeof r->type);
    h = fnv(h, f, sizeof f);
    h = fnv(h, r->params, r->type->params_size);
    return fnv(h, r->name, r->name ? strlen(r->name) : 0);
}

uint64_t rld_denycache_hash(const char *key, size_t len)
{
    uint64_t h = fnv(0xcbf29ce484222325ull, key, len);
    h ^= h >> 29;
    return h ? h : 1;
}

static dc_set *set_of(rld_denycache *c, uint64_t h)
{
    return &c->set[(h >> 7) % DC_SETS];
}

/* ---- entries ------------------------------------------------------------------------------- */

uint64_t rld_denycache_ticket(rld_denycache *c, uint64_t h)
{
    if (!rld_denycache_live(c))
        return 0;
    return __atomic_load_n(&set_of(c, h)->gen, __ATOMIC_ACQUIRE);
}

static int same(const dc_entry *e, uint64_t h, const char *key, size_t len)
{
    return e->h == h && e->len == len && memcmp(e->key, key, len) == 0;
}

void rld_denycache_insert(rld_denycache *c, uint64_t ticket, uint64_t h, const char *key,
                          size_t len, uint64_t fp, rl_fp need, rl_ns now, const rld_denial *dn)
{
    rl_ns wait = dn->wait;
    if (!ticket || len > DC_KEY_MAX || wait <= 0 || wait >= RL_WAIT_NEVER ||
        now > RL_WAIT_NEVER - wait)
        return;
    dc_set *s = set_of(c, h);
    pthread_mutex_lock(&s->mu);
    if (__atomic_load_n(&s->gen, __ATOMIC_RELAXED) == ticket && rld_denycache_live(c)) {
        dc_entry *v = NULL;
        for (size_t i = 0; i < DC_WAYS && !v; i++)
            if (same(&s->e[i], h, key, len))
                v = &s->e[i];
        for (size_t i = 0; i < DC_WAYS && !v; i++)
            if (!s->e[i].h || s->e[i].until <= now)
                v = &s->e[i];
        if (!v) { /* the entry that lapses first */
            v = &s->e[0];
            for (size_t i = 1; i < DC_WAYS; i++)
                if (s->e[i].until < v->until)
                    v = &s->e[i];
        }
        v->h = h;
        v->fp = fp;
        v->need = need;
        v->at = now;
        v->until = now + wait;
        v->dn = *dn;
        if (dn->n > DC_ITEMS)
            v->dn.sig = 0;
        v->len = (uint16_t)len;
        memcpy(v->key, key, len);
    }
    pthread_mutex_unlock(&s->mu);
}

/* A wait or time left after elapsed, not below 0 (RL_WAIT_NEVER stays). */
static rl_ns left(rl_ns v, rl_ns elapsed)
{
    return v == RL_WAIT_NEVER ? v : v > elapsed ? v - elapsed : 0;
}

static void count_down(rl_rule_status *st, rl_ns elapsed)
{
    st->reset_after = left(st->reset_after, elapsed);
    st->next = left(st->next, elapsed);
}

int rld_denycache_lookup(rld_denycache *c, uint64_t h, const char *key, size_t len, uint64_t fp,
                         rl_fp need, rl_ns now, uint64_t sig, rld_denial *out)
{
    int hit = 0;
    if (len > DC_KEY_MAX || !rld_denycache_live(c))
        return 0;
    dc_set *s = set_of(c, h);
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < DC_WAYS; i++) {
        const dc_entry *e = &s->e[i];
        if (!same(e, h, key, len))
            continue;
        /* time going back to before the denial: Redis decides */
        if (e->fp == fp && need >= e->need && now >= e->at && now < e->until) {
            hit = 1;
            *out = e->dn;
            out->wait = e->until - now;
            count_down(&out->st, now - e->at);
            if (!sig || out->sig != sig)
                out->sig = 0;
            for (size_t j = 0; out->sig && j < out->n; j++)
                count_down(&out->all[j], now - e->at);
        }
        break;
    }
    pthread_mutex_unlock(&s->mu);
    return hit;
}

void rld_denycache_forget(rld_denycache *c, const char *key, size_t len)
{
    uint64_t h = rld_denycache_hash(key, len);
    dc_set *s = set_of(c, h);
    pthread_mutex_lock(&s->mu);
    __atomic_add_fetch(&s->gen, 1, __ATOMIC_RELEASE);
    for (size_t i = 0; i < DC_WAYS; i++)
        if (same(&s->e[i], h, key, len))
            s->e[i].h = 0;
    pthread_mutex_unlock(&s->mu);
}

void rld_denycache_clear(rld_denycache *c)
{
    for (size_t i = 0; i < DC_SETS; i++) {
        dc_set *s = &c->set[i];
        pthread_mutex_lock(&s->mu);
        __atomic_add_fetch(&s->gen, 1, __ATOMIC_RELEASE);
        for (size_t j = 0; j < DC_WAYS; j++)
            s->e[j].h = 0;
        pthread_mutex_unlock(&s->mu);
    }
}

void rld_denycache_count(rld_denycache *c, size_t level)
{
    if (level < RL_MAX_LEVELS)
        __atomic_add_fetch(&c->answered[level], 1, __ATOMIC_RELAXED);
}

uint64_t rld_denycache_answered(rld_denycache *c, size_t level)
{
    return level < RL_MAX_LEVELS ? __atomic_load_n(&c->answered[level], __ATOMIC_RELAXED) : 0;
}

uint64_t rld_denycache_messages(rld_denycache *c)
{
    return __atomic_load_n(&c->messages, __ATOMIC_RELAXED);
}

/* ---- the follower -------------------------------------------------------------------------- */

/* A message of P"deny": each given-back state key as its length, ':' and the key. One that
 * cannot be read forgets everything. */
static void forget_message(rld_denycache *c, const char *m, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t len = 0, j = i;
        while (j < n && m[j] >= '0' && m[j] <= '9' && len < 100000)
            len = len * 10 + (size_t)(m[j++] - '0');
        if (j == i || j >= n || m[j] != ':' || len > n - j - 1) {
            rld_denycache_clear(c);
            return;
        }
        rld_denycache_forget(c, m + j + 1, len);
        i = j + 1 + len;
    }
}

static void on_message(rld_denycache *c, const redisReply *m)
{
    if (m->type != REDIS_REPLY_ARRAY || m->elements != 3 ||
        m->element[0]->type != REDIS_REPLY_STRING || strcmp(m->element[0]->str, "message") != 0 ||
        m->element[1]->type != REDIS_REPLY_STRING || m->element[2]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(m->element[1]->str, c->deny_channel) == 0)
        forget_message(c, m->element[2]->str, m->element[2]->len);
    else /* a quota changed: rare, and every rule of its key may have */
        rld_denycache_clear(c);
    __atomic_add_fetch(&c->messages, 1, __ATOMIC_RELAXED);
}

/* Waits ms or until stopped; 1 when stopped. */
static int nap(rld_denycache *c, int ms)
{
    struct pollfd p = {.fd = c->wake[0], .events = POLLIN};
    return poll(&p, 1, ms) > 0;
}

static void set_live(rld_denycache *c, int live)
{
    if (!live)
        __atomic_store_n(&c->live, 0, __ATOMIC_RELEASE);
    rld_denycache_clear(c);
    if (live)
        __atomic_store_n(&c->live, 1, __ATOMIC_RELEASE);
}

/* One subscription: 1 when stopped, 0 when the connection failed. */
static int follow_once(rld_denycache *c, rld_rconn *rc)
{
    rld_rconn_set_timeout(rc, (rl_ns)SUBSCRIBE_TIMEOUT_MS * 1000000);
    const char *argv[3] = {"SUBSCRIBE", c->deny_channel, c->quota_channel};
    redisReply *r = rld_rconn_command_argv(rc, 3, argv, NULL);
    int ok = r && r->type == REDIS_REPLY_ARRAY;
    if (r)
        freeReplyObject(r);
    void *second = NULL; /* the second channel's confirmation */
    if (!ok || rld_rconn_get_reply(rc, &second) != REDIS_OK || !second)
        return 0;
    freeReplyObject(second);
    set_live(c, 1);
    for (;;) {
        struct pollfd fds[2] = {{.fd = rld_rconn_fd(rc), .events = POLLIN},
                                {.fd = c->wake[0], .events = POLLIN}};
        int pending = rld_rconn_pending(rc); /* bytes TLS decrypted already */
        int n = poll(fds, 2, pending ? 0 : 1000);
        if (n < 0 && errno != EINTR)
            return 0;
        if (fds[1].revents)
            return 1;
        if (!pending && (n <= 0 || !fds[0].revents))
            continue;
        if (rld_rconn_read(rc) != REDIS_OK)
            return 0;
        void *reply;
        while (rld_rconn_next_reply(rc, &reply) == REDIS_OK && reply) {
            on_message(c, reply);
            freeReplyObject(reply);
        }
        if (rld_rconn_err(rc))
            return 0;
    }
}

static void *follow_loop(void *arg)
{
    rld_denycache *c = arg;
    int backoff = RETRY_MIN_MS;
    for (;;) {
        rld_rconn *rc = c->connect(c->ctx);
        if (rc) {
            int stopped = follow_once(c, rc);
            set_live(c, 0);
            rld_rconn_free(rc);
            if (stopped)
                break;
            backoff = RETRY_MIN_MS;
        }
        if (nap(c, backoff))
            break;
        backoff = backoff * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : backoff * 2;
    }
    return NULL;
}

int rld_denycache_follow(rld_denycache *c, rld_rconn *(*connect)(void *ctx), void *ctx,
                         const char *deny_channel, const char *quota_channel, rl_err *err)
{
    c->connect = connect;
    c->ctx = ctx;
    c->deny_channel = strdup(deny_channel);
    c->quota_channel = strdup(quota_channel);
    if (!c->deny_channel || !c->quota_channel)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    if (pipe(c->wake) != 0) {
        c->wake[0] = c->wake[1] = -1;
        return rl_errf(err, RL_ENOMEM, "deny cache: pipe: %s", strerror(errno));
    }
    if (pthread_create(&c->th, NULL, follow_loop, c) != 0)
        return rl_errf(err, RL_ENOMEM, "deny cache: cannot start its follower");
    c->running = 1;
    return RL_OK;
}
