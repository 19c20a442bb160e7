/*
 * pool.c - see pool.h.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app/buf.h"
#include "pool.h"
#include "conn.h"
#include "lua.h"
#include "sentinel.h"
#include "app/settings.h"

#define BACKOFF_MIN (50 * 1000000LL)
#define BACKOFF_MAX (2000 * 1000000LL)

typedef struct pcall pcall;

/* A call's arguments kept on the stack; more are allocated. */
#define ARGS_INLINE 160

/* One exchange on a shared connection: a caller's commands, formatted, and what came of them.
 * The caller owns it; the connection's leader fills in the outcome and then, under the
 * connection's lock, sets done. */
struct pcall {
    pcall *next;
    char *cmd; /* nreplies commands back to back: the call, or ASKING and the call */
    size_t len;
    int nreplies;
    rl_ns deadline;
    pthread_cond_t cv;
    int done, lead; /* under the connection's lock: answered or failed; to lead the next batch */
    int fresh;      /* to go on a connection opened for it (a retry after a reset) */
    int link_failed; /* the outcome: Redis could not be reached */
    redisReply *reply; /* the last command's reply; NULL: the link failed, *err says why */
    redisReply **replies; /* not NULL: every command's reply goes here, got of them arrived */
    int got;
    int reset;         /* the connection was found closed (EOF or reset) rather than slow */
    int opened;        /* the connection was opened for this batch */
    unsigned gen;      /* the link generation of the connection */
    rl_err *err;
};

/* A connection that concurrent calls share. Callers queue their commands; the one that finds
 * nobody doing I/O on it becomes the leader: it writes every queued command in one write,
 * reads the replies in order, hands each to its caller and makes the first caller queued
 * meanwhile the next leader. Only the leader touches c and gen. */
typedef struct pconn {
    pthread_mutex_t mu;
    rld_rconn *c;
    unsigned gen; /* the link generation it was opened in */
    int leading;  /* under mu (read without it as a hint): a leader owns the I/O */
    int queued;   /* likewise: calls waiting in head..tail */
    pcall *head, **tail;
} pconn;

struct rld_pool {
    rld_redis_addr addr;
    rl_ns timeout;
    pthread_mutex_t mu;
    size_t n;
    pconn *conns;
    uint64_t calls, writes; /* atomics: calls written, and the writes (batches) that carried them */
    /* health, under mu */
    int up;
    unsigned gen; /* bumped each time the link goes down: older connections are reopened */
    rl_ns retry_at, backoff;
    int probing;
    uint64_t errors;
    char last_error[256];
    char sha[RLD_NSCRIPTS][41];
    /* the scripts and the Functions library (set before the first call), and whether to use
     * Functions: 1 yes (until Redis refuses), 0 no (EVALSHA only), an atomic */
    rld_lua lua;
    int functions;
    /* the primary: addr's without sentinels; with, the one they named last (under mu) */
    char host[256];
    int port;
    int resolved;         /* 0: ask the sentinels before opening the next connection */
    char bad_host[256];   /* the primary last found unreachable or not a primary */
    int bad_port;
    size_t next_sentinel; /* the one to ask first: the last that answered */
    uint64_t switches;
    rld_watch *watch; /* with sentinels: the thread that follows them (sentinel.h) */
};

static pthread_condattr_t mono_attr;
static pthread_once_t mono_once = PTHREAD_ONCE_INIT;

static void mono_attr_init(void)
{
    pthread_condattr_init(&mono_attr);
    pthread_condattr_setclock(&mono_attr, CLOCK_MONOTONIC);
}

/* ---- URLs ---------------------------------------------------------------------------------- */

static int copy_part(char *dst, size_t cap, const char *s, size_t n)
{
    if (n >= cap)
        return -1;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return 0;
}

static int parse_int(const char *s, size_t n, long lo, long hi, int *out)
{
    long v = 0;
    if (n == 0 || n > 9)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

int rld_redis_parse_url(const char *url, rld_redis_addr *out, rl_err *err)
{
    memset(out, 0, sizeof *out);
    out->port = 6379;
    out->tls_url = strncmp(url, "rediss://", 9) == 0;
    if (strncmp(url, "redis://", 8) != 0 && !out->tls_url)
        return rl_errf(err, RL_EINVAL, "store.url: must start with redis:// or rediss://");
    const char *s = url + (out->tls_url ? 9 : 8), *end = s + strlen(s);
    const char *slash = strchr(s, '/');
    const char *hostpart_end = slash ? slash : end;
    const char *at = NULL;
    for (const char *q = s; q < hostpart_end; q++)
        if (*q == '@')
            at = q;
    if (at) {
        const char *colon = memchr(s, ':', (size_t)(at - s));
        if (!colon)
            return rl_errf(err, RL_EINVAL, "store.url: credentials must be [user]:password@");
        if (copy_part(out->user, sizeof out->user, s, (size_t)(colon - s)) != 0 ||
            copy_part(out->pass, sizeof out->pass, colon + 1, (size_t)(at - colon - 1)) != 0)
            return rl_errf(err, RL_EINVAL, "store.url: user or password too long");
        s = at + 1;
    }
    const char *hend = hostpart_end;
    if (*s == '[') { /* [v6 address] */
        const char *rb = memchr(s, ']', (size_t)(hostpart_end - s));
        if (!rb)
            return rl_errf(err, RL_EINVAL, "store.url: unterminated [address]");
        if (copy_part(out->host, sizeof out->host, s + 1, (size_t)(rb - s - 1)) != 0)
            return rl_errf(err, RL_EINVAL, "store.url: host too long");
        s = rb + 1;
    } else {
        const char *colon = memchr(s, ':', (size_t)(hostpart_end - s));
        hend = colon ? colon : hostpart_end;
        if (copy_part(out->host, sizeof out->host, s, (size_t)(hend - s)) != 0)
            return rl_errf(err, RL_EINVAL, "store.url: host too long");
        s = hend;
    }
    if (!out->host[0])
        return rl_errf(err, RL_EINVAL, "store.url: no host");
    if (*s == ':' && parse_int(s + 1, (size_t)(hostpart_end - s - 1), 1, 65535, &out->port) != 0)
        return rl_errf(err, RL_EINVAL, "store.url: port must be a number from 1 to 65535");
    if (*s != ':' && s != hostpart_end)
        return rl_errf(err, RL_EINVAL, "store.url: unexpected text after the host");
    if (slash && slash + 1 < end &&
        parse_int(slash + 1, (size_t)(end - slash - 1), 0, 1000000, &out->db) != 0)
        return rl_errf(err, RL_EINVAL, "store.url: the database must be a number");
    return RL_OK;
}

int rld_redis_parse_hostport(const char *s, const char *what, char *host, size_t cap, int *port,
                             rl_err *err)
{
    const char *why = rld_listen_parse(s, host, cap, port);
    if (!why && *port == 0)
        why = "must end in a port from 1 to 65535";
    return why ? rl_errf(err, RL_EINVAL, "%s: %s", what, why) : RL_OK;
}

/* ---- the pool ------------------------------------------------------------------------------ */

static int start_watch(rld_pool *p, rl_err *err);

int rld_pool_new(const rld_redis_addr *addr, int timeout_ms, int size, rld_pool **out, rl_err *err)
{
    *out = NULL;
    if (size < 1 || size > 1024 || timeout_ms < 1)
        return rl_errf(err, RL_EINVAL, "store: pool must be 1 to 1024 and timeout_ms positive");
    rld_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->conns = calloc((size_t)size, sizeof *p->conns))) {
        free(p);
        return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    if (rld_lua_build(NULL, &p->lua) != RL_OK) {
        free(p->conns);
        free(p);
        return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    p->functions = 0;
    p->addr = *addr;
    if (addr->sentinel.n == 0) {
        snprintf(p->host, sizeof p->host, "%s", addr->host);
        p->port = addr->port;
        p->resolved = 1;
    }
    p->timeout = (rl_ns)timeout_ms * 1000000;
    p->n = (size_t)size;
    p->up = 1; /* until a call says otherwise */
    pthread_mutex_init(&p->mu, NULL);
    for (size_t i = 0; i < p->n; i++) {
        pthread_mutex_init(&p->conns[i].mu, NULL);
        p->conns[i].tail = &p->conns[i].head;
    }
    pthread_once(&mono_once, mono_attr_init);
    if (addr->sentinel.n > 0 && start_watch(p, err) != RL_OK) {
        rld_pool_free(p);
        return RL_ENOMEM;
    }
    *out = p;
    return RL_OK;
}

void rld_pool_free(rld_pool *p)
{
    if (!p)
        return;
    rld__watch_stop(p->watch);
    for (size_t i = 0; i < p->n; i++) {
        if (p->conns[i].c)
            rld_rconn_free(p->conns[i].c);
        pthread_mutex_destroy(&p->conns[i].mu);
    }
    free(p->conns);
    rld_lua_free(&p->lua);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* A flag on its own, read on every call: an atomic rather than the pool's lock. */
void rld_pool_use_functions(rld_pool *p, int on)
{
    __atomic_store_n(&p->functions, on != 0, __ATOMIC_RELAXED);
}

int rld_pool_functions(rld_pool *p)
{
    return __atomic_load_n(&p->functions, __ATOMIC_RELAXED);
}

int rld_pool_set_ports(rld_pool *p, const char *ports, rl_err *err)
{
    rld_lua l;
    if (rld_lua_build(ports, &l) != RL_OK)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    pthread_mutex_lock(&p->mu);
    rld_lua_free(&p->lua);
    p->lua = l;
    memset(p->sha, 0, sizeof p->sha); /* other texts, other SHA1s */
    pthread_mutex_unlock(&p->mu);
    return RL_OK;
}

int rld_pool_up(rld_pool *p)
{
    pthread_mutex_lock(&p->mu);
    int up = p->up;
    pthread_mutex_unlock(&p->mu);
    return up;
}

void rld_pool_last_error(rld_pool *p, char *buf, size_t len)
{
    pthread_mutex_lock(&p->mu);
    snprintf(buf, len, "%s", p->last_error);
    pthread_mutex_unlock(&p->mu);
}

uint64_t rld_pool_errors(rld_pool *p)
{
    pthread_mutex_lock(&p->mu);
    uint64_t n = p->errors;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void rld_pool_counts(rld_pool *p, uint64_t *calls, uint64_t *writes)
{
    *calls = __atomic_load_n(&p->calls, __ATOMIC_RELAXED);
    *writes = __atomic_load_n(&p->writes, __ATOMIC_RELAXED);
}

/* Lets a call through or fails it at once: while the link is down only one probe at a time
 * goes through, once its backoff has passed; *probe says this call is it. */
static int admit(rld_pool *p, int *probe, rl_err *err)
{
    *probe = 0;
    pthread_mutex_lock(&p->mu);
    if (!p->up) {
        rl_ns now = rld_mono_ns();
        if (p->probing || now < p->retry_at) {
            long long ms = (p->retry_at - now) / 1000000;
            p->errors++;
            pthread_mutex_unlock(&p->mu);
            return rl_errf(err, RL_ESTORE, "redis: unreachable (next attempt in %lld ms)",
                           ms > 0 ? ms : 0);
        }
        p->probing = 1;
        *probe = 1;
    }
    pthread_mutex_unlock(&p->mu);
    return RL_OK;
}

/* What came of a call on the link: Redis could not be reached, it answered (even with an
 * error reply), or the call gave up before it was sent. */
enum { LINK_FAILED = 1, LINK_ANSWERED = 0, LINK_UNSENT = -1 };

/* Counts a call's outcome into the link's health; gen is the link generation of the connection
 * a failed call went on. */
static void account(rld_pool *p, int probe, int link, unsigned gen, int failed,
                    const rl_err *err)
{
    pthread_mutex_lock(&p->mu);
    if (failed) {
        p->errors++;
        if (err)
            snprintf(p->last_error, sizeof p->last_error, "%.255s", err->msg);
    }
    if (link == LINK_FAILED && gen != p->gen) {
        /* it went to a primary that has been replaced meanwhile (a failover followed), or the
         * link went down already (another call of the same batch): that says nothing new */
    } else if (link == LINK_FAILED) {
        rl_ns now = rld_mono_ns();
        if (p->addr.sentinel.n) { /* the primary may have moved: ask the sentinels */
            p->resolved = 0;
            memcpy(p->bad_host, p->host, sizeof p->bad_host);
            p->bad_port = p->port;
        }
        if (p->up) {
            p->up = 0;
            p->gen++;
            p->backoff = 0;
            p->retry_at = now;
        } else if (probe) {
            p->backoff = p->backoff ? p->backoff * 2 : BACKOFF_MIN;
            if (p->backoff > BACKOFF_MAX)
                p->backoff = BACKOFF_MAX;
            p->retry_at = now + p->backoff;
        }
    } else if (link == LINK_ANSWERED && !p->up) {
        p->up = 1;
        p->backoff = 0;
    }
    if (probe)
        p->probing = 0;
    pthread_mutex_unlock(&p->mu);
}

/* At least a millisecond: what is left until deadline, as a connection's timeout. */
static rl_ns left_of(rl_ns deadline)
{
    rl_ns left = deadline - rld_mono_ns();
    return left < 1000000 ? 1000000 : left;
}

/* Sends a command on c with what is left until deadline. NULL: the link failed (rld_rconn_err). */
static redisReply *send_argv(rld_rconn *c, rl_ns deadline, int argc, const char **argv,
                             const size_t *len)
{
    rld_rconn_set_timeout(c, left_of(deadline));
    return rld_rconn_command_argv(c, argc, argv, len);
}

static int link_error(rld_rconn *c, rl_err *err)
{
    return rl_errf(err, RL_ESTORE, "redis: %s",
                   rld_rconn_timed_out(c) ? "timed out" : rld_rconn_errstr(c));
}

/* Opens a connection to host:port within deadline (over TLS with tls), with AUTH (when pass
 * is not "") and SELECT (when db is not 0). NULL with err set on failure. */
static rld_rconn *open_conn(const char *host, int port, rld_net_client_tls *tls,
                            const char *user, const char *pass, int dbn, rl_ns deadline,
                            rl_err *err)
{
    char why[256];
    if (deadline - rld_mono_ns() <= 0) {
        rl_errf(err, RL_ESTORE, "redis: timed out");
        return NULL;
    }
    rld_rconn *c = rld_rconn_open(host, port, tls, deadline, why, sizeof why);
    if (!c) {
        rl_errf(err, RL_ESTORE, "redis: %s:%d: %s", host, port, why);
        return NULL;
    }
    char db[16];
    snprintf(db, sizeof db, "%d", dbn);
    const char *auth[3] = {"AUTH", user[0] ? user : pass, pass};
    const char *sel[2] = {"SELECT", db};
    int steps[2] = {pass[0] != 0, dbn != 0};
    for (int i = 0; i < 2; i++) {
        if (!steps[i])
            continue;
        redisReply *r = i == 0 ? send_argv(c, deadline, user[0] ? 3 : 2, auth, NULL)
                               : send_argv(c, deadline, 2, sel, NULL);
        if (!r) {
            link_error(c, err);
            rld_rconn_free(c);
            return NULL;
        }
        int bad = r->type == REDIS_REPLY_ERROR;
        if (bad)
            rl_errf(err, RL_ESTORE, "redis: %s: %.200s", i == 0 ? "AUTH" : "SELECT", r->str);
        freeReplyObject(r);
        if (bad) {
            rld_rconn_free(c);
            return NULL;
        }
    }
    return c;
}

/* ---- Sentinel ------------------------------------------------------------------------------ */

/* Makes host:port the primary. A change moves every connection there (a new generation).
 * While the link is down, a change, or the news of a switch (announced: +switch-master, which
 * may name the primary a probe found already and failed on), lets the next call try it at once
 * instead of waiting out the backoff. */
static void set_primary(rld_pool *p, const char *host, int port, int announced)
{
    pthread_mutex_lock(&p->mu);
    int changed = strcmp(p->host, host) != 0 || p->port != port;
    if (changed) {
        if (p->host[0])
            p->switches++;
        snprintf(p->host, sizeof p->host, "%s", host);
        p->port = port;
        p->gen++;
    }
    if ((changed || announced) && !p->up) {
        p->backoff = 0;
        p->retry_at = rld_mono_ns();
    }
    p->resolved = 1;
    pthread_mutex_unlock(&p->mu);
}

/* The next connection asks the sentinels first; moved: the primary is known to have changed
 * role, so the connections open now go too. */
static void forget_primary(rld_pool *p, int moved)
{
    if (!p->addr.sentinel.n)
        return;
    pthread_mutex_lock(&p->mu);
    p->resolved = 0;
    if (moved)
        p->gen++;
    pthread_mutex_unlock(&p->mu);
}

/* SENTINEL get-master-addr-by-name on c: RL_OK with the address, else RL_ESTORE. */
static int ask_master(rld_pool *p, rld_rconn *c, rl_ns deadline, char *host, size_t cap,
                      int *port, rl_err *err)
{
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", p->addr.sentinel.master};
    redisReply *r = send_argv(c, deadline, 3, argv, NULL);
    if (!r)
        return link_error(c, err);
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             r->element[0]->type == REDIS_REPLY_STRING &&
             r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->len < cap;
    if (ok) {
        snprintf(host, cap, "%s", r->element[0]->str);
        *port = atoi(r->element[1]->str);
        ok = *port > 0 && *port < 65536;
    }
    if (!ok)
        rl_errf(err, RL_ESTORE, "redis: sentinel %s:%d knows no primary %s%s%.200s", rld_rconn_host(c),
                rld_rconn_port(c), p->addr.sentinel.master, r->type == REDIS_REPLY_ERROR ? ": " : "",
                r->type == REDIS_REPLY_ERROR ? r->str : "");
    freeReplyObject(r);
    return ok ? RL_OK : RL_ESTORE;
}

static rld_rconn *open_sentinel(rld_pool *p, size_t i, rl_ns deadline, rl_err *err)
{
    const rld_sentinel *s = &p->addr.sentinel;
    return open_conn(s->host[i], s->port[i], p->addr.tls, s->user, s->pass, 0, deadline, err);
}

/* Asks the sentinels in turn, from the one that answered last, where the primary is. A
 * sentinel that still names the primary just found failed may not have heard of the failover
 * yet (they tell each other every 2 s): the others are asked too, and that answer is taken
 * only when none names another. Each sentinel gets an equal share of the time left, so one
 * that does not answer (stopped, or blocked writing its configuration to disk, as sentinels do
 * at every step of a failover) costs its share rather than the whole call, and the next
 * resolve starts with the one that answered. */
static int resolve(rld_pool *p, rl_ns deadline, rl_err *err)
{
    size_t n = p->addr.sentinel.n;
    char bad[256], found[256] = "";
    int bad_port, found_port = 0;
    pthread_mutex_lock(&p->mu);
    size_t first = p->next_sentinel, found_at = first;
    memcpy(bad, p->bad_host, sizeof bad);
    bad_port = p->bad_port;
    pthread_mutex_unlock(&p->mu);
    int rc = rl_errf(err, RL_ESTORE, "redis: no sentinel answered within the timeout");
    rl_ns now;
    for (size_t k = 0; k < n && (now = rld_mono_ns()) < deadline; k++) {
        size_t i = (first + k) % n;
        rl_ns until = now + (deadline - now) / (rl_ns)(n - k);
        char host[256];
        int port = 0;
        rld_rconn *c = open_sentinel(p, i, until, err);
        if (!c || ask_master(p, c, until, host, sizeof host, &port, err) != RL_OK) {
            if (c)
                rld_rconn_free(c);
            continue;
        }
        rld_rconn_free(c);
        if (!found[0] || !(port == bad_port && strcmp(host, bad) == 0)) {
            memcpy(found, host, sizeof found);
            found_port = port;
            found_at = i;
        }
        if (!(port == bad_port && strcmp(host, bad) == 0))
            break;
    }
    if (!found[0])
        return rc;
    pthread_mutex_lock(&p->mu);
    p->next_sentinel = found_at;
    pthread_mutex_unlock(&p->mu);
    set_primary(p, found, found_port, 0);
    return RL_OK;
}

/* ROLE on a node the sentinels named: RL_OK when it is a primary. *answered (when not NULL)
 * says whether the node answered at all. */
static int check_primary(rld_rconn *c, rl_ns deadline, int *answered, rl_err *err)
{
    const char *argv[1] = {"ROLE"};
    redisReply *r = send_argv(c, deadline, 1, argv, NULL);
    if (answered)
        *answered = r != NULL;
    if (!r)
        return link_error(c, err);
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;
    if (!ok)
        rl_errf(err, RL_ESTORE, "redis: %s:%d is not a primary (ROLE: %.40s)", rld_rconn_host(c),
                rld_rconn_port(c),
                r->type == REDIS_REPLY_ARRAY && r->elements && r->element[0]->str
                    ? r->element[0]->str
                    : "?");
    freeReplyObject(r);
    return ok ? RL_OK : RL_ESTORE;
}

/* A connection to the primary: with sentinels, the one they name (asked when not known) once
 * ROLE confirms it. The sentinels get half the time left; when none answers in it, the primary
 * they named last is tried all the same (ROLE still keeps replicas out), so that sentinels busy
 * or unreachable never keep the pool from a primary that works. *gen is the generation of the
 * address used. */
static rld_rconn *open_primary(rld_pool *p, rl_ns deadline, unsigned *gen, rl_err *err)
{
    int sentinel = p->addr.sentinel.n > 0;
    pthread_mutex_lock(&p->mu);
    int known = p->resolved, named = p->host[0] != 0;
    *gen = p->gen;
    pthread_mutex_unlock(&p->mu);
    rl_ns now = rld_mono_ns();
    if (sentinel && !known && resolve(p, now + (deadline - now) / 2, err) != RL_OK && !named)
        return NULL;
    char host[256];
    pthread_mutex_lock(&p->mu);
    memcpy(host, p->host, sizeof host);
    int port = p->port;
    *gen = p->gen;
    pthread_mutex_unlock(&p->mu);
    rld_rconn *c =
        open_conn(host, port, p->addr.tls, p->addr.user, p->addr.pass, p->addr.db, deadline, err);
    if (c && sentinel && check_primary(c, deadline, NULL, err) != RL_OK) {
        rld_rconn_free(c);
        c = NULL;
        /* that sentinel has not heard of the failover yet: ask the next one first */
        forget_primary(p, 0);
        pthread_mutex_lock(&p->mu);
        p->next_sentinel = (p->next_sentinel + 1) % p->addr.sentinel.n;
        memcpy(p->bad_host, host, sizeof p->bad_host);
        p->bad_port = port;
        pthread_mutex_unlock(&p->mu);
    }
    return c;
}

int rld_sub_read(rld_rconn *c, int wake_fd, int ms, void (*fn)(void *arg, const char *msg),
                 void *arg)
{
    struct pollfd fds[2] = {{.fd = rld_rconn_fd(c), .events = POLLIN},
                            {.fd = wake_fd, .events = POLLIN}};
    int n = poll(fds, 2, rld_rconn_pending(c) ? 0 : ms);
    if (n < 0 && errno != EINTR)
        return -1;
    if (fds[1].revents)
        return 1;
    if (!rld_rconn_pending(c) && (n <= 0 || !fds[0].revents))
        return 0;
    if (rld_rconn_read(c) != REDIS_OK)
        return -1;
    void *reply;
    while (rld_rconn_next_reply(c, &reply) == REDIS_OK && reply) {
        redisReply *m = reply;
        if (m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
            m->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(m->element[0]->str, "message") == 0 &&
            m->element[2]->type == REDIS_REPLY_STRING)
            fn(arg, m->element[2]->str);
        freeReplyObject(m);
    }
    return rld_rconn_err(c) ? -1 : 0;
}

/* ---- what the watcher (sentinel.c) asks of the pool ----------------------------------- */

static int watch_down(void *cls)
{
    return !rld_pool_up(cls);
}

static void watch_current(void *cls, char *host, size_t cap, int *port)
{
    rld_pool *p = cls;
    pthread_mutex_lock(&p->mu);
    snprintf(host, cap, "%s", p->host);
    *port = p->port;
    pthread_mutex_unlock(&p->mu);
}

static int watch_is_primary(void *cls, const char *host, int port, rl_ns deadline)
{
    rld_pool *p = cls;
    rl_err e;
    rld_rconn *c = open_conn(host, port, p->addr.tls, p->addr.user, p->addr.pass, p->addr.db,
                             deadline, &e);
    int answered = 0, rc = c ? check_primary(c, deadline, &answered, &e) : RL_ESTORE;
    if (c)
        rld_rconn_free(c);
    return rc == RL_OK ? 1 : answered ? 0 : -1;
}

static void watch_follow(void *cls, const char *host, int port)
{
    set_primary(cls, host, port, 1);
}

static int start_watch(rld_pool *p, rl_err *err)
{
    rld_watch_ops ops = {.cls = p, .down = watch_down, .current = watch_current,
                         .is_primary = watch_is_primary, .follow = watch_follow};
    rld_sentinel s = p->addr.sentinel;
    s.tls = p->addr.tls; /* the sentinels are reached as the data nodes are */
    return rld__watch_start(&s, &ops, &p->watch, err);
}

void rld_pool_primary(rld_pool *p, char *buf, size_t len)
{
    pthread_mutex_lock(&p->mu);
    int v6 = strchr(p->host, ':') != NULL;
    if (p->host[0])
        snprintf(buf, len, "%s%s%s:%d", v6 ? "[" : "", p->host, v6 ? "]" : "", p->port);
    else
        snprintf(buf, len, "%s", "");
    pthread_mutex_unlock(&p->mu);
}

uint64_t rld_pool_switches(rld_pool *p)
{
    pthread_mutex_lock(&p->mu);
    uint64_t n = p->switches;
    pthread_mutex_unlock(&p->mu);
    return n;
}

rld_rconn *rld_pool_connect(rld_pool *p, int timeout_ms, rl_err *err)
{
    unsigned gen;
    return open_primary(p, rld_mono_ns() + (rl_ns)timeout_ms * 1000000, &gen, err);
}

/* ---- shared connections -------------------------------------------------------------------- */

/* Bounds pc's next waits by deadline: what is left, rounded down to the millisecond, less one
 * (at least a millisecond), so that no wait outlasts it. */
static void set_tmo(pconn *pc, rl_ns deadline)
{
    const rl_ns ms = 1000000;
    rl_ns left = deadline - rld_mono_ns();
    rld_rconn_set_timeout(pc->c, left > 2 * ms ? left / ms * ms - ms : ms);
}

/* Makes sure pc is open in the current link generation; *opened says it was opened now. */
static int ensure_open(rld_pool *p, pconn *pc, rl_ns deadline, int *opened, rl_err *err)
{
    pthread_mutex_lock(&p->mu);
    unsigned gen = p->gen;
    pthread_mutex_unlock(&p->mu);
    *opened = 0;
    if (pc->c && pc->gen == gen && !rld_rconn_err(pc->c))
        return RL_OK;
    if (pc->c)
        rld_rconn_free(pc->c);
    pc->c = open_primary(p, deadline, &pc->gen, err);
    *opened = 1;
    return pc->c ? RL_OK : RL_ESTORE;
}

static rl_ns earliest(const pcall *k)
{
    rl_ns d = k->deadline;
    for (; k; k = k->next)
        if (k->deadline < d)
            d = k->deadline;
    return d;
}

/* k and the calls after it fail: the link failed (or the connection could not be opened). */
static void fail_from(pcall *k, const rl_err *e, int reset)
{
    for (; k; k = k->next) {
        k->link_failed = 1;
        k->reset = reset;
        if (k->err)
            *k->err = *e;
    }
}

/* The leader's I/O: opens pc when needed (anew when a call asks for a fresh connection),
 * writes the batch b in one write and reads the replies in order into each call's outcome.
 * When the link fails, or a reply has not come by the earliest deadline of the calls still
 * owed, the connection is closed (replies owed must not be read by a later batch) and every
 * call still owed fails. */
static void batch(rld_pool *p, pconn *pc, pcall *b)
{
    int opened = 0, fresh = 0, n = 0;
    rl_err e;
    for (pcall *k = b; k; k = k->next)
        fresh |= k->fresh;
    if (fresh && pc->c) {
        rld_rconn_free(pc->c);
        pc->c = NULL;
    }
    int rc = ensure_open(p, pc, earliest(b), &opened, &e);
    for (pcall *k = b; k; n += k->replies ? k->nreplies : 1, k = k->next) {
        k->opened = opened;
        k->gen = pc->gen;
        if (rc == RL_OK && rld_rconn_append(pc->c, k->cmd, k->len) != REDIS_OK)
            rc = rl_errf(&e, RL_ESTORE, "redis: out of memory");
    }
    if (rc != RL_OK) {
        fail_from(b, &e, 0);
        return;
    }
    __atomic_fetch_add(&p->calls, (uint64_t)n, __ATOMIC_RELAXED);
    __atomic_fetch_add(&p->writes, 1, __ATOMIC_RELAXED);
    for (pcall *k = b; k; k = k->next) {
        for (int i = 0; i < k->nreplies; i++) {
            void *r;
            set_tmo(pc, earliest(k)); /* the first read writes the batch */
            if (rld_rconn_get_reply(pc->c, &r) != REDIS_OK) {
                int reset = rld_rconn_reset(pc->c);
                link_error(pc->c, &e);
                rld_rconn_free(pc->c);
                pc->c = NULL;
                fail_from(k, &e, reset);
                return;
            }
            if (k->replies)
                k->replies[k->got++] = r;
            else if (i + 1 < k->nreplies)
                freeReplyObject(r); /* ASKING's OK */
            else
                k->reply = r;
        }
    }
}

/* Leads one batch (pc->mu held, and held again on return): takes every call queued, fails
 * those whose deadline has passed unsent, does the I/O of the others without the lock, hands
 * each its outcome, and makes the first call queued meanwhile the next leader. */
static void lead(rld_pool *p, pconn *pc)
{
    pcall *b = pc->head, **pp = &b;
    pc->head = NULL;
    pc->tail = &pc->head;
    __atomic_store_n(&pc->queued, 0, __ATOMIC_RELAXED);
    rl_ns now = rld_mono_ns();
    while (*pp) {
        pcall *k = *pp;
        k->lead = 0;
        if (k->deadline > now) {
            pp = &k->next;
            continue;
        }
        *pp = k->next;
        rl_errf(k->err, RL_ESTORE, "redis: timed out waiting for a connection");
        k->done = 1;
        pthread_cond_signal(&k->cv);
    }
    if (b) {
        pthread_mutex_unlock(&pc->mu);
        batch(p, pc, b);
        pthread_mutex_lock(&pc->mu);
    }
    while (b) {
        pcall *next = b->next;
        b->done = 1;
        pthread_cond_signal(&b->cv);
        b = next;
    }
    if (pc->head) {
        pc->head->lead = 1;
        pthread_cond_signal(&pc->head->cv);
    } else {
        __atomic_store_n(&pc->leading, 0, __ATOMIC_RELAXED);
    }
}

/* Takes k out of pc's queue: 1 when it was there (not sent yet). */
static int unqueue(pconn *pc, pcall *k)
{
    for (pcall **pp = &pc->head; *pp; pp = &(*pp)->next) {
        if (*pp != k)
            continue;
        *pp = k->next;
        if (pc->tail == &k->next)
            pc->tail = pp;
        __atomic_store_n(&pc->queued, pc->queued - 1, __ATOMIC_RELAXED);
        return 1;
    }
    return 0;
}

/* Runs k on pc: as the leader of a batch, or waiting for the leader to answer it or to make it
 * the next leader. A call still queued at its deadline leaves the queue and fails; one that is
 * sent is answered or failed by its leader, whose reads end by the earliest deadline of the
 * calls owed. */
static void run_on(rld_pool *p, pconn *pc, pcall *k)
{
    int bounded = 1;
    struct timespec ts = {.tv_sec = k->deadline / RL_NS_PER_SEC,
                          .tv_nsec = k->deadline % RL_NS_PER_SEC};
    pthread_mutex_lock(&pc->mu);
    *pc->tail = k;
    pc->tail = &k->next;
    __atomic_store_n(&pc->queued, pc->queued + 1, __ATOMIC_RELAXED);
    if (!pc->leading) {
        __atomic_store_n(&pc->leading, 1, __ATOMIC_RELAXED);
        k->lead = 1;
    }
    while (!k->done) {
        if (k->lead) {
            lead(p, pc);
        } else if (!bounded) {
            pthread_cond_wait(&k->cv, &pc->mu);
        } else if (pthread_cond_timedwait(&k->cv, &pc->mu, &ts) == ETIMEDOUT && !k->done &&
                   !k->lead) {
            bounded = 0; /* sent: its leader answers it */
            if (unqueue(pc, k)) {
                rl_errf(k->err, RL_ESTORE, "redis: timed out waiting for a connection");
                k->done = 1;
            }
        }
    }
    pthread_mutex_unlock(&pc->mu);
}

/* The connection for a call: the first on which nobody does I/O, else the one with the fewest
 * calls queued. So calls share a connection when every one is busy, and the later ones open
 * only under load. A hint, read without the locks. */
static pconn *pick(rld_pool *p)
{
    pconn *best = &p->conns[0];
    int least = INT32_MAX;
    for (size_t i = 0; i < p->n; i++) {
        pconn *pc = &p->conns[i];
        if (!__atomic_load_n(&pc->leading, __ATOMIC_RELAXED))
            return pc;
        int q = __atomic_load_n(&pc->queued, __ATOMIC_RELAXED);
        if (q < least) {
            least = q;
            best = pc;
        }
    }
    return best;
}

/* What came of a call's exchanges (see account). */
typedef struct outcome {
    int link;      /* LINK_FAILED, LINK_ANSWERED or LINK_UNSENT (of the last exchange) */
    int reset;     /* the connection was found closed rather than slow */
    int opened;    /* a connection was opened for one of them */
    int fresh;     /* the next exchange asks for a connection opened for it */
    unsigned gen;  /* the link generation of the last exchange's connection */
} outcome;

long rld_resp_format(char *out, size_t cap, char **heap, const char *pre, size_t plen,
                     int argc, const char **argv, const size_t *len)
{
    size_t total = plen + 3 + rld_dec_len((uint64_t)argc);
    for (int i = 0; i < argc; i++) {
        size_t l = len ? len[i] : strlen(argv[i]);
        total += 5 + rld_dec_len(l) + l;
    }
    *heap = NULL;
    if (total > cap && !(out = *heap = malloc(total)))
        return -1;
    char *o = out;
    memcpy(o, pre, plen);
    o += plen;
    *o++ = '*';
    o += rld_fmt_i64(o, argc);
    *o++ = '\r', *o++ = '\n';
    for (int i = 0; i < argc; i++) {
        size_t l = len ? len[i] : strlen(argv[i]);
        *o++ = '$';
        o += rld_fmt_i64(o, (int64_t)l);
        *o++ = '\r', *o++ = '\n';
        memcpy(o, argv[i], l);
        o += l;
        *o++ = '\r', *o++ = '\n';
    }
    return (long)(o - out);
}

/* Sends a command (after ASKING on the same connection when asking) on a shared connection and
 * returns its reply, within deadline. NULL when it failed: err says why, o how. */
static redisReply *exchange(rld_pool *p, rl_ns deadline, int asking, int argc, const char **argv,
                            const size_t *len, outcome *o, rl_err *err)
{
    static const char ask[] = "*1\r\n$6\r\nASKING\r\n";
    char inl[2048], *heap;
    long n = rld_resp_format(inl, sizeof inl, &heap, ask, asking ? sizeof ask - 1 : 0, argc,
                             argv, len);
    pcall k = {.nreplies = asking ? 2 : 1, .deadline = deadline, .fresh = o->fresh, .err = err};
    if (n < 0) {
        o->link = LINK_UNSENT;
        rl_errf(err, RL_ENOMEM, "redis: out of memory");
        return NULL;
    }
    k.cmd = heap ? heap : inl;
    k.len = (size_t)n;
    pthread_cond_init(&k.cv, &mono_attr);
    run_on(p, pick(p), &k);
    pthread_cond_destroy(&k.cv);
    free(heap);
    o->fresh = 0;
    o->link = k.link_failed ? LINK_FAILED : k.reply ? LINK_ANSWERED : LINK_UNSENT;
    o->reset = k.reset;
    o->opened |= k.opened;
    o->gen = k.gen;
    return k.reply;
}

static void sha_get(rld_pool *p, rld_script s, char out[41])
{
    pthread_mutex_lock(&p->mu);
    memcpy(out, p->sha[s], 41);
    pthread_mutex_unlock(&p->mu);
}

/* SCRIPT LOAD; RL_OK with its SHA1 in sha, else RL_ESTORE (o says whether the link failed). */
static int load_script(rld_pool *p, rld_script s, rl_ns deadline, char sha[41], outcome *o,
                       rl_err *err)
{
    const char *argv[3] = {"SCRIPT", "LOAD", p->lua.script[s]};
    redisReply *r = exchange(p, deadline, 0, 3, argv, NULL, o, err);
    if (!r)
        return RL_ESTORE;
    int ok = r->type == REDIS_REPLY_STRING && r->len == 40;
    if (ok) {
        memcpy(sha, r->str, 40);
        sha[40] = '\0';
        pthread_mutex_lock(&p->mu);
        memcpy(p->sha[s], sha, 41);
        pthread_mutex_unlock(&p->mu);
    } else {
        rl_errf(err, RL_ESTORE, "redis: SCRIPT LOAD: %.200s",
             r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    freeReplyObject(r);
    return ok ? RL_OK : RL_ESTORE;
}

/* FUNCTION LOAD of the library. RL_OK when it is there now (loaded, or loaded already by
 * another instance) or when Redis refused it (no Functions before Redis 7, or not permitted):
 * then the pool turns to EVALSHA for good. Otherwise the exchange failed. */
static int load_library(rld_pool *p, rl_ns deadline, outcome *o, rl_err *err)
{
    const char *argv[3] = {"FUNCTION", "LOAD", p->lua.library};
    redisReply *r = exchange(p, deadline, 0, 3, argv, NULL, o, err);
    if (!r)
        return RL_ESTORE;
    if (r->type == REDIS_REPLY_ERROR && !strstr(r->str, "already exists"))
        rld_pool_use_functions(p, 0);
    freeReplyObject(r);
    return RL_OK;
}

/* Whether an error reply to FCALL says that Redis cannot run Functions for us (Redis before 7
 * knows no FCALL; a user may not be permitted it) rather than that the function failed. */
static int functions_refused(const char *e)
{
    return strncmp(e, "ERR unknown command", 19) == 0 || strncmp(e, "NOPERM", 6) == 0;
}

/* Fills av[0..1] (and al) with FCALL <function> or EVALSHA <sha> for script s, loading the
 * script first when its SHA1 is not known; after NOSCRIPT (reloaded) with EVAL <text>, which
 * runs the script and puts it in Redis's cache again in one round trip, so that a flush
 * between a load and its call cannot strike twice. *fn says FCALL. */
static int script_head(rld_pool *p, int s, const char **av, size_t *al, char sha[41],
                       int reloaded, rl_ns deadline, int *fn, outcome *o, rl_err *err)
{
    *fn = p->lua.fname[s][0] && rld_pool_functions(p);
    if (*fn) {
        av[0] = "FCALL";
        av[1] = p->lua.fname[s];
        al[0] = 5;
        al[1] = strlen(p->lua.fname[s]);
        return RL_OK;
    }
    if (reloaded) {
        av[0] = "EVAL";
        av[1] = p->lua.script[s];
        al[0] = 4;
        al[1] = strlen(p->lua.script[s]);
        return RL_OK;
    }
    if (!sha[0])
        sha_get(p, (rld_script)s, sha);
    if (!sha[0] && load_script(p, (rld_script)s, deadline, sha, o, err) != RL_OK)
        return RL_ESTORE;
    av[0] = "EVALSHA";
    av[1] = sha;
    al[0] = 7;
    al[1] = 40;
    return RL_OK;
}

/* Sends one command or script (s >= 0; av and al then hold 3 slots for FCALL <name> <nkeys>
 * or EVALSHA <sha> <nkeys>, and the arguments; otherwise al is NULL and len the lengths, or
 * NULL) on a shared connection. A script of the library goes as FCALL while
 * Redis takes Functions, loading the library when Redis does not have it (first use, restart,
 * FUNCTION FLUSH); otherwise, and for the other scripts, as EVALSHA, loading the script when
 * needed and again after NOSCRIPT. o says what came of it for the link's health. */
static int run(rld_pool *p, int s, int argc, const char **av, size_t *al, const size_t *len,
               unsigned flags, rl_ns deadline, redisReply **reply, outcome *o, rl_err *err)
{
    char sha[41] = "";
    int rc = RL_ESTORE, loaded = 0, reloaded = 0, fn = 0;
    redisReply *r = NULL;
    *reply = NULL;
    for (int attempt = 0; attempt < 4; attempt++) {
        if (s >= 0 && script_head(p, s, av, al, sha, reloaded, deadline, &fn, o, err) != RL_OK)
            break;
        r = exchange(p, deadline, (flags & RLD_POOL_ASKING) != 0, argc, av, al ? al : len, o,
                     err);
        if (!r)
            break;
        if (r->type != REDIS_REPLY_ERROR) {
            rc = RL_OK;
            break;
        }
        if (strncmp(r->str, "READONLY", 8) == 0) {
            /* a primary demoted to a replica: never answer from it, find the new one */
            char at[300];
            rld_pool_primary(p, at, sizeof at);
            forget_primary(p, 1);
            rc = rl_errf(err, RL_ESTORE, "redis: %s is a replica now (READONLY)", at);
            o->link = LINK_FAILED;
            o->reset = 1;
            break;
        }
        int retry = 0;
        if (fn && !loaded && strncmp(r->str, "ERR Function not found", 22) == 0) {
            /* Redis restarted, flushed its functions, or never had this library */
            loaded = retry = 1;
            freeReplyObject(r);
            r = NULL;
            if (load_library(p, deadline, o, err) != RL_OK)
                break;
        } else if (fn && functions_refused(r->str)) {
            rld_pool_use_functions(p, 0);
            retry = 1;
        } else if (!fn && s >= 0 && !reloaded && strncmp(r->str, "NOSCRIPT", 8) == 0) {
            /* Redis restarted or its script cache was flushed */
            reloaded = retry = 1;
        } else if (flags & RLD_POOL_REPLY_ERRORS) {
            rc = RL_OK;
            break;
        }
        if (!retry) {
            rc = rl_errf(err, RL_ESTORE, "redis: %.400s", r->str);
            break;
        }
        if (r)
            freeReplyObject(r);
        r = NULL;
    }
    if (rc != RL_OK && r) {
        freeReplyObject(r);
        r = NULL;
    }
    *reply = r;
    return rc;
}

/* A call's arguments with lengths for each, and for a script three slots in front: its command,
 * its name or SHA1 (both set by whoever sends it) and nkeys. Inline up to ARGS_INLINE. */
typedef struct vecs {
    const char **av;
    size_t *al;
    int n;
    char nk[24];
    const char *av_inl[ARGS_INLINE];
    size_t al_inl[ARGS_INLINE];
} vecs;

static void vecs_free(vecs *v)
{
    if (v->av != v->av_inl)
        free(v->av);
    if (v->al != v->al_inl)
        free(v->al);
}

static int vecs_make(vecs *v, int script, int nkeys, int argc, const char **argv,
                     const size_t *len)
{
    int extra = script ? 3 : 0;
    v->n = argc + extra;
    v->av = v->av_inl, v->al = v->al_inl;
    if (v->n > ARGS_INLINE) {
        v->av = malloc((size_t)v->n * sizeof *v->av);
        v->al = malloc((size_t)v->n * sizeof *v->al);
        if (!v->av || !v->al) {
            vecs_free(v);
            return -1;
        }
    }
    if (script) {
        v->av[0] = v->av[1] = "";
        v->al[0] = v->al[1] = 0;
        v->av[2] = v->nk;
        v->al[2] = rld_fmt_i64(v->nk, nkeys);
    }
    for (int i = 0; i < argc; i++) {
        v->av[i + extra] = argv[i];
        v->al[i + extra] = len ? len[i] : strlen(argv[i]);
    }
    return 0;
}

/* One call: a script (s >= 0) or a plain command. */
static int call(rld_pool *p, int s, int nkeys, int argc, const char **argv, const size_t *len,
                unsigned flags, redisReply **reply, rl_err *err)
{
    rl_ns deadline = rld_mono_ns() + p->timeout;
    vecs v;
    int probe, rc, own_vecs = s >= 0 || !len; /* a script's head, or lengths, are needed */
    outcome o = {.link = LINK_UNSENT};
    rl_err own;
    *reply = NULL;
    if (!err) /* the message is kept for rld_pool_last_error all the same */
        err = &own;
    if (own_vecs && vecs_make(&v, s >= 0, nkeys, argc, argv, len) != 0)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    const char **av = own_vecs ? v.av : argv;
    size_t *al = own_vecs ? v.al : NULL;
    argc = own_vecs ? v.n : argc;
    if ((rc = admit(p, &probe, err)) != RL_OK) {
        if (own_vecs)
            vecs_free(&v);
        return rc;
    }
    for (int round = 0; round < 2; round++) {
        rc = run(p, s, argc, av, al, len, flags, deadline, reply, &o, err);
        if (rc == RL_OK || o.link != LINK_FAILED || !o.reset || o.opened ||
            rld_mono_ns() >= deadline)
            break;
        /* a connection opened earlier was closed under us (Redis restarted, or dropped it as
         * idle, or a failover) before the command got through: once more on a new one */
        forget_primary(p, 0);
        o = (outcome){.link = LINK_UNSENT, .fresh = 1};
    }
    if (own_vecs)
        vecs_free(&v);
    account(p, probe, o.link, o.gen, rc != RL_OK, err);
    return rc;
}

/* ---- many calls at once ------------------------------------------------------------------ */

/* An error reply that says the call did not run, so that it may be made again on its own,
 * where call() recovers: the script or the library not loaded, Functions refused, or a
 * primary demoted to a replica. */
static int did_not_run(const char *e)
{
    return strncmp(e, "NOSCRIPT", 8) == 0 || strncmp(e, "ERR Function not found", 22) == 0 ||
           functions_refused(e) || strncmp(e, "READONLY", 8) == 0;
}

/* Appends call c, formatted with the script's head (FCALL <name> or EVALSHA <sha>), to b. */
static int append_call(rld_buf *b, const char *const head[2], const size_t hl[2],
                       const rld_call *c)
{
    vecs v;
    char *heap;
    if (rld_buf_reserve(b, 2048) != 0 || vecs_make(&v, 1, c->nkeys, c->argc, c->argv, c->len))
        return -1;
    v.av[0] = head[0], v.al[0] = hl[0];
    v.av[1] = head[1], v.al[1] = hl[1];
    long n = rld_resp_format(b->p + b->len, b->cap - b->len - 1, &heap, "", 0, v.n, v.av, v.al);
    vecs_free(&v);
    if (n < 0)
        return -1;
    if (heap) {
        rld_buf_put(b, heap, (size_t)n);
        free(heap);
    } else {
        b->len += (size_t)n;
    }
    return b->oom ? -1 : 0;
}

static void run_alone(rld_pool *p, int s, rld_call *c)
{
    c->rc = call(p, s, c->nkeys, c->argc, c->argv, c->len, 0, &c->reply, &c->err);
}

/* What came of call i of a batch whose replies arrived up to got. */
static void many_outcome(rld_pool *p, int s, rld_call *c, size_t i, const pcall *k,
                         redisReply *r, int redo, const rl_err *e)
{
    if ((int)i >= k->got) {
        if (redo) /* the connection was found closed before it got through */
            run_alone(p, s, c);
        else
            c->rc = RL_ESTORE, c->err = *e;
    } else if (r->type != REDIS_REPLY_ERROR) {
        c->reply = r;
        c->rc = RL_OK;
    } else if (did_not_run(r->str)) {
        freeReplyObject(r);
        run_alone(p, s, c);
    } else {
        c->rc = rl_errf(&c->err, RL_ESTORE, "redis: %.400s", r->str);
        freeReplyObject(r);
    }
}

void rld_pool_exec_many(rld_pool *p, rld_script s, rld_call *calls, size_t n)
{
    rl_ns deadline = rld_mono_ns() + p->timeout;
    const char *head[2];
    size_t hl[2];
    char sha[41] = "", inl[16384];
    int probe = 0, fn, rc;
    outcome o = {.link = LINK_UNSENT};
    rl_err e = {{0}};
    redisReply *rep_inl[64], **rep = n <= 64 ? rep_inl : malloc(n * sizeof *rep);
    rld_buf b;
    rld_buf_init(&b, inl, sizeof inl);
    for (size_t i = 0; i < n; i++)
        calls[i].reply = NULL, calls[i].rc = RL_ESTORE;
    if (n < 2 || !rep) {
        for (size_t i = 0; i < n; i++)
            run_alone(p, s, &calls[i]);
        if (rep != rep_inl)
            free(rep);
        return;
    }
    if ((rc = admit(p, &probe, &e)) == RL_OK)
        rc = script_head(p, s, head, hl, sha, 0, deadline, &fn, &o, &e);
    for (size_t i = 0; rc == RL_OK && i < n; i++)
        if (append_call(&b, head, hl, &calls[i]) != 0)
            rc = rl_errf(&e, RL_ENOMEM, "redis: out of memory");
    pcall k = {.nreplies = (int)n, .replies = rep, .deadline = deadline, .err = &e,
               .cmd = b.p, .len = b.len};
    if (rc == RL_OK) {
        pthread_cond_init(&k.cv, &mono_attr);
        run_on(p, pick(p), &k);
        pthread_cond_destroy(&k.cv);
        o = (outcome){.link = k.link_failed ? LINK_FAILED : k.got ? LINK_ANSWERED : LINK_UNSENT,
                      .reset = k.reset, .opened = k.opened, .gen = k.gen};
        account(p, probe, o.link, o.gen, k.link_failed, &e);
    } else if (probe || o.link != LINK_UNSENT) {
        account(p, probe, o.link, o.gen, 1, &e);
    }
    int redo = k.link_failed && k.reset && !k.opened;
    for (size_t i = 0; i < n; i++) {
        if (rc != RL_OK)
            calls[i].rc = rc, calls[i].err = e;
        else
            many_outcome(p, s, &calls[i], i, &k, (int)i < k.got ? rep[i] : NULL, redo, &e);
    }
    rld_buf_reset(&b);
    if (rep != rep_inl)
        free(rep);
}

int rld_pool_eval(rld_pool *p, rld_script s, int nkeys, int argc, const char **argv,
                  const size_t *argvlen, redisReply **reply, rl_err *err)
{
    return call(p, (int)s, nkeys, argc, argv, argvlen, 0, reply, err);
}

int rld_pool_exec(rld_pool *p, int s, int nkeys, int argc, const char **argv,
                  const size_t *argvlen, unsigned flags, redisReply **reply, rl_err *err)
{
    return call(p, s < 0 ? -1 : s, nkeys, argc, argv, argvlen, flags, reply, err);
}

int rld_pool_command(rld_pool *p, int argc, const char **argv, const size_t *argvlen,
                     redisReply **reply, rl_err *err)
{
    return call(p, -1, 0, argc, argv, argvlen, 0, reply, err);
}

int rld_pool_probe(rld_pool *p)
{
    pthread_mutex_lock(&p->mu);
    int due = !p->up && !p->probing && rld_mono_ns() >= p->retry_at;
    pthread_mutex_unlock(&p->mu);
    if (due) {
        const char *ping[1] = {"PING"};
        redisReply *r;
        if (rld_pool_command(p, 1, ping, NULL, &r, NULL) == RL_OK)
            freeReplyObject(r);
    }
    return rld_pool_up(p);
}
