/*
 * bench_core.c - the decision cost of the core in process, against a bare baseline.
 *
 * Three levels (user, team, global token buckets), random users out of N, 1,000 teams. Prints
 * one "name: value" line per figure:
 *   core_ns_per_decision_<N>_keys        single thread, no status read (the decision alone:
 *                                        allowed, retry_after, blocked_by)
 *   core_status_ns_per_decision_<N>_keys single thread, every rule's status read as well (what
 *                                        an answer with limits or RateLimit headers reads)
 *   core_ns_per_decision_2threads        two threads on one limiter (the global key shared)
 *   baseline_ns_per_decision_<N>_keys    a bare open-addressing table, three lookups, two
 *                                        doubles per key (the floor a decision cannot beat)
 *   core_bytes_per_key                   resident memory growth / keys, after N users
 *   core_keys_after_idle, core_bytes_before_idle, core_bytes_after_idle
 *                                        resident growth before and after every key went
 *                                        idle and tick ran
 *
 * Usage: bench_core [max_keys]   (default 10000000)
 * BENCH_SINGLE_THREAD=1 skips the two-thread and memory figures; BENCH_CORE_OPS sets the
 * decisions timed per key count (default 2,000,000, or the key count when larger): with few,
 * bench/callgrind_core.sh counts instructions per decision under callgrind.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "ratelimit.h"

static const char *config =
    "{\"levels\": ["
    "{\"name\": \"user\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 1000000, "
    "\"per_second\": 1000000}]},"
    "{\"name\": \"team\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 1000000000, "
    "\"per_second\": 1000000000}]},"
    "{\"name\": \"global\", \"default_key\": \"*\", \"rules\": [{\"type\": \"token_bucket\", "
    "\"capacity\": 1000000000000, \"per_second\": 1000000000000}]}]}";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return rss * 4096;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static rl_limiter *make_limiter(rl_registry **reg)
{
    rld_settings set;
    rl_config *cfg;
    rl_limiter *lim;
    rl_err err;
    *reg = rl_registry_new();
    if (rld_config_parse(config, strlen(config), *reg, &set, &cfg, &err) != RL_OK ||
        rl_limiter_new(cfg, NULL, &lim, &err) != RL_OK) {
        fprintf(stderr, "config: %s\n", err.msg);
        exit(1);
    }
    rld_settings_clear(&set);
    return lim;
}

/* Keys are written on the fly, as a server finds them in the request it just read (in cache):
 * a table of ten million key strings would add a cache miss that no server pays. */
static size_t fmt_key(char *buf, const char *prefix, size_t plen, size_t n)
{
    char tmp[24];
    size_t k = 0;
    memcpy(buf, prefix, plen);
    do
        tmp[k++] = (char)('0' + n % 10);
    while ((n /= 10));
    for (size_t i = 0; i < k; i++)
        buf[plen + i] = tmp[k - 1 - i];
    buf[plen + k] = '\0';
    return plen + k;
}

typedef struct keyset {
    size_t n;
} keyset;

/* One decision for user u; with statuses, every rule's status is read too. */
static inline __attribute__((always_inline)) int decide_one(rl_limiter *lim, size_t u, rl_ns now,
                                                            int statuses)
{
    char user[32], team[16];
    size_t ul = fmt_key(user, "user-", 5, u), tl = fmt_key(team, "t", 1, u % 1000);
    rl_descriptor ds[2] = {{"user", 4, user, ul}, {"team", 4, team, tl}};
    rl_request req = {.desc = ds, .ndesc = 2, .cost = RL_FP_ONE, .now = now};
    rl_decision d;
    rl_err err;
    if (rl_acquire(lim, &req, &d, &err) != RL_OK) {
        fprintf(stderr, "acquire: %s\n", err.msg);
        exit(1);
    }
    int sink = d.allowed;
    for (size_t i = 0; statuses && i < d.napplied; i++) {
        const rl_rule_status *st = rl_decision_status(&d, i);
        sink += st && st->remaining + st->reset_after + st->next + st->window < 0;
    }
    rl_decision_done(&d);
    return sink;
}

/* Not inlined, so that callgrind can count a decision: bench/callgrind_core.sh. */
__attribute__((noinline)) static int decide(rl_limiter *lim, const keyset *ks, size_t u,
                                            rl_ns now)
{
    (void)ks;
    return decide_one(lim, u, now, 0);
}

__attribute__((noinline)) static int decide_statuses(rl_limiter *lim, const keyset *ks, size_t u,
                                                     rl_ns now)
{
    (void)ks;
    return decide_one(lim, u, now, 1);
}

/* ---- the baseline: open addressing, key copy inline, two doubles ---------------------- */

typedef struct bslot {
    uint64_t h;
    char key[16];
    double tokens, last;
} bslot;

typedef struct btable {
    size_t mask;
    bslot *s;
} btable;

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h | 1;
}



static bslot *bfind(btable *t, const char *key)
{
    uint64_t h = fnv(key);
    for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
        bslot *s = &t->s[i];
        if (s->h == h && strcmp(s->key, key) == 0)
            return s;
        if (!s->h) {
            s->h = h;
            snprintf(s->key, sizeof s->key, "%s", key);
            s->tokens = 1e9;
            return s;
        }
    }
}

static int bdecide(btable *t, const char *const keys[3], double now)
{
    bslot *s[3];
    for (int i = 0; i < 3; i++) {
        s[i] = bfind(t, keys[i]);
        s[i]->tokens += (now - s[i]->last) * 1e6;
        s[i]->last = now;
    }
    for (int i = 0; i < 3; i++)
        if (s[i]->tokens < 1)
            return 0;
    for (int i = 0; i < 3; i++)
        s[i]->tokens -= 1;
    return 1;
}

__attribute__((noinline)) static int bdecide_keys(btable *t, size_t u, double now)
{
    char user[32], team[16];
    fmt_key(user, "user-", 5, u);
    fmt_key(team, "t", 1, u % 1000);
    const char *k[3] = {user, team, "*"};
    return bdecide(t, k, now);
}

static double baseline(const keyset *ks, size_t nkeys, size_t ops)
{
    btable t;
    size_t cap = 1;
    while (cap < (nkeys + 1001) * 2)
        cap *= 2;
    t.mask = cap - 1;
    t.s = calloc(cap, sizeof *t.s);
    (void)ks;
    for (size_t i = 0; i < nkeys; i++)
        bdecide_keys(&t, i, 0);
    int sink = 0;
    double t0 = now_s();
    for (size_t i = 0; i < ops; i++)
        sink += bdecide_keys(&t, rnd() % nkeys, (double)i * 1e-9);
    double ns = (now_s() - t0) * 1e9 / (double)ops;
    free(t.s);
    return sink >= 0 ? ns : 0;
}

/* ---- runs ------------------------------------------------------------------------------ */

static double run_core(rl_limiter *lim, const keyset *ks, size_t nkeys, size_t ops, rl_ns *now,
                       int statuses)
{
    int sink = 0;
    double t0 = now_s();
    for (size_t i = 0; i < ops; i++)
        sink += statuses ? decide_statuses(lim, ks, rnd() % nkeys, (*now)++)
                         : decide(lim, ks, rnd() % nkeys, (*now)++);
    double ns = (now_s() - t0) * 1e9 / (double)ops;
    return sink >= 0 ? ns : 0;
}

typedef struct targ {
    rl_limiter *lim;
    const keyset *ks;
    size_t nkeys, ops;
    uint64_t seed;
    rl_ns now;
} targ;

static void *thread_run(void *p)
{
    targ *a = p;
    uint64_t x = a->seed;
    for (size_t i = 0; i < a->ops; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        decide(a->lim, a->ks, x % a->nkeys, a->now + (rl_ns)i);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    size_t max = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    const size_t sizes[] = {1000, 100000, 1000000, 10000000};
    keyset ks = {max};

    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0] && sizes[si] <= max; si++) {
        size_t n = sizes[si];
        rl_registry *reg;
        rl_limiter *lim = make_limiter(&reg);
        rl_ns now = 1;
        long before = rss_bytes();
        for (size_t i = 0; i < n; i++)
            decide(lim, &ks, i, now++);
        long after = rss_bytes();
        size_t ops = n < 2000000 ? 2000000 : n;
        if (getenv("BENCH_CORE_OPS"))
            ops = strtoull(getenv("BENCH_CORE_OPS"), NULL, 10);
        run_core(lim, &ks, n, ops / 4, &now, 0); /* warm up */
        double ns = run_core(lim, &ks, n, ops, &now, 0);
        printf("core_ns_per_decision_%zu_keys: %.1f\n", n, ns);
        printf("core_status_ns_per_decision_%zu_keys: %.1f\n", n,
               run_core(lim, &ks, n, ops, &now, 1));
        printf("baseline_ns_per_decision_%zu_keys: %.1f\n", n, baseline(&ks, n, ops));
        if ((n == 1000000 || n == max) && !getenv("BENCH_SINGLE_THREAD")) {
            printf("core_bytes_per_key_%zu_keys: %.1f\n", n, (double)(after - before) / (double)n);
            /* two threads on one limiter, the global key shared */
            pthread_t th[2];
            targ a[2];
            double t0 = now_s();
            for (int t = 0; t < 2; t++) {
                a[t] = (targ){lim, &ks, n, ops, 0x1234567ull * (uint64_t)(t + 1), now};
                pthread_create(&th[t], NULL, thread_run, &a[t]);
            }
            for (int t = 0; t < 2; t++)
                pthread_join(th[t], NULL);
            now += (rl_ns)ops;
            printf("core_ns_per_decision_2threads_%zu_keys: %.1f\n", n,
                   (now_s() - t0) * 1e9 / (double)(2 * ops));
            /* every bucket refills within a second: after that all state is idle */
            now += 2 * RL_NS_PER_SEC;
            for (int i = 0; i < 100000 && (rl_limiter_keys(lim, 0) || rl_limiter_keys(lim, 1) ||
                                            rl_limiter_keys(lim, 2));
                 i++)
                rl_limiter_tick(lim, now);
            printf("core_keys_after_idle_%zu_keys: %zu\n", n,
                   rl_limiter_keys(lim, 0) + rl_limiter_keys(lim, 1) + rl_limiter_keys(lim, 2));
            /* resident growth over the start, in bytes, before and after the keys went idle */
            printf("core_bytes_before_idle_%zu_keys: %ld\n", n, after - before);
            printf("core_bytes_after_idle_%zu_keys: %ld\n", n, rss_bytes() - before);
        }
        rl_limiter_free(lim);
        rl_registry_free(reg);
    }
    return 0;
}
