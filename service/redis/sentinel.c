/*
 * sentinel.c - see sentinel.h.
 *
 * The thread owns two connections per sentinel: one subscribed to +switch-master, one for the
 * rounds of questions. Connecting is blocking (at most CONNECT_MS, a TLS handshake included);
 * everything after it is written at once and read when poll says so, so a sentinel that stops
 * answering never holds the thread: its replies are simply owed, until DEAD_MS closes the
 * connection.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "conn.h"
#include "sentinel.h"

#define MS 1000000LL
#define TICK_MS 200    /* while the link is down, a round this often */
#define CONNECT_MS 250 /* connecting to a sentinel */
#define PING_MS 1000   /* a subscription silent this long is pinged */
#define DEAD_MS 3000   /* a reply owed this long: the connection is closed */
#define CHECK_MS 300   /* ROLE on the node an answer or a message names */
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 1000

/* One connection to a sentinel. */
typedef struct wconn {
    rld_rconn *c; /* NULL: closed, to be opened from retry_at */
    int owed;     /* replies owed */
    int auth;     /* the first reply owed is AUTH's */
    rl_ns since;  /* when the oldest reply owed was asked for */
    rl_ns heard;  /* the last reply or message */
    rl_ns retry_at;
    int retry_ms; /* the wait before the next attempt, 0 after a success */
} wconn;

struct rld_watch {
    rld_sentinel s;
    rld_watch_ops ops;
    pthread_t th;
    int wake[2];
    wconn sub[RLD_MAX_SENTINELS], cmd[RLD_MAX_SENTINELS];
    rld_watch_answer ans[RLD_MAX_SENTINELS];
    unsigned round; /* the last round asked */
    rl_ns round_at;
    int open;   /* the last round's answers are still to be weighed */
    int wanted; /* a round is due even while the link is up */
};

static void conn_close(wconn *k, rl_ns now)
{
    if (k->c)
        rld_rconn_free(k->c);
    k->c = NULL;
    k->owed = k->auth = 0;
    k->retry_ms = k->retry_ms ? k->retry_ms * 2 : RETRY_MIN_MS;
    if (k->retry_ms > RETRY_MAX_MS)
        k->retry_ms = RETRY_MAX_MS;
    k->retry_at = now + k->retry_ms * MS;
}

/* Appends a command to what k owes and writes it out (small: it never waits for room). */
static int conn_send(wconn *k, int argc, const char **argv, rl_ns now)
{
    if (rld_rconn_append_argv(k->c, argc, argv, NULL) != REDIS_OK ||
        rld_rconn_flush(k->c) != REDIS_OK)
        return -1;
    if (!k->owed++)
        k->since = now;
    return 0;
}

/* Opens k to sentinel i when due, with AUTH first when the sentinels need it. */
static int conn_open(rld_watch *w, wconn *k, size_t i, rl_ns now)
{
    if (k->c || now < k->retry_at)
        return k->c ? 0 : -1;
    char why[256];
    k->c = rld_rconn_open(w->s.host[i], w->s.port[i], w->s.tls, now + CONNECT_MS * MS, why,
                          sizeof why);
    if (!k->c) {
        conn_close(k, now);
        return -1;
    }
    rld_rconn_set_timeout(k->c, CONNECT_MS * MS); /* writing a command never waits longer */
    k->heard = now;
    if (w->s.pass[0]) {
        const char *auth[3] = {"AUTH", w->s.user[0] ? w->s.user : w->s.pass, w->s.pass};
        if (conn_send(k, w->s.user[0] ? 3 : 2, auth, now) != 0) {
            conn_close(k, now);
            return -1;
        }
        k->auth = 1;
    }
    return 0;
}

/* ---- what to follow ------------------------------------------------------------------------ */

int rld__watch_best(const rld_watch_answer *a, size_t n, unsigned round)
{
    int best = -1;
    for (size_t i = 0; i < n; i++)
        if (a[i].round == round && a[i].got == 2 && a[i].ok &&
            (best < 0 || a[i].epoch > a[best].epoch))
            best = (int)i;
    return best;
}

/* host:port, named by a message (+switch-master) or by the best answer of a round: followed
 * when the pool does not use it yet, or while the link is down (so that the next call tries
 * at once), once ROLE says it is a primary. A message is followed also when ROLE cannot be
 * asked (the node too busy to answer at once), not when the node denies; then the sentinels
 * are asked again. */
static void consider(rld_watch *w, const char *host, int port, int message)
{
    char cur[256];
    int cur_port;
    w->ops.current(w->ops.cls, cur, sizeof cur, &cur_port);
    int down = w->ops.down(w->ops.cls);
    if (!down && cur_port == port && strcmp(cur, host) == 0)
        return;
    int role = w->ops.is_primary(w->ops.cls, host, port, rld_mono_ns() + CHECK_MS * MS);
    if (role == 1 || (message && role < 0))
        w->ops.follow(w->ops.cls, host, port);
    else if (message)
        w->wanted = 1;
}

/* A +switch-master message: "<master> <old ip> <old port> <new ip> <new port>". */
static void on_switch(rld_watch *w, const char *msg)
{
    char name[128], oh[256], nh[256];
    int op, np;
    if (sscanf(msg, "%127s %255s %d %255s %d", name, oh, &op, nh, &np) == 5 &&
        strcmp(name, w->s.master) == 0 && np > 0 && np < 65536)
        consider(w, nh, np, 1);
}

/* Weighs the last round once every sentinel asked has answered (or failed), or TICK_MS after
 * it was asked, with the answers that came. */
static void weigh(rld_watch *w, rl_ns now)
{
    if (!w->open)
        return;
    for (size_t i = 0; i < w->s.n && now < w->round_at + TICK_MS * MS; i++)
        if (w->ans[i].round == w->round && w->ans[i].got < 2 && w->cmd[i].c)
            return;
    w->open = 0;
    int b = rld__watch_best(w->ans, w->s.n, w->round);
    if (b >= 0)
        consider(w, w->ans[b].host, w->ans[b].port, 0);
}

/* ---- rounds and subscriptions -------------------------------------------------------------- */

/* Asks every sentinel that owes nothing where the primary is. */
static void ask_all(rld_watch *w, rl_ns now)
{
    const char *addr[3] = {"SENTINEL", "get-master-addr-by-name", w->s.master};
    const char *info[3] = {"SENTINEL", "master", w->s.master};
    w->round++;
    w->round_at = now;
    w->open = 1;
    w->wanted = 0;
    for (size_t i = 0; i < w->s.n; i++) {
        wconn *k = &w->cmd[i];
        if (conn_open(w, k, i, now) != 0 || k->owed > k->auth)
            continue;
        if (conn_send(k, 3, addr, now) != 0 || conn_send(k, 3, info, now) != 0) {
            conn_close(k, now);
            continue;
        }
        w->ans[i] = (rld_watch_answer){.round = w->round, .epoch = -1};
    }
}

/* The epoch in a SENTINEL master reply (a flat list of names and values), -1 if none. */
static long long epoch_of(const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    for (size_t j = 0; j + 1 < r->elements; j += 2)
        if (r->element[j]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[j]->str, "config-epoch") == 0 &&
            r->element[j + 1]->type == REDIS_REPLY_STRING)
            return atoll(r->element[j + 1]->str);
    return -1;
}

/* A reply on sentinel i's question connection: AUTH's, then each round's two in order. An
 * error to AUTH closes it (-1); an error to a question is an answer naming nothing. */
static int on_answer(rld_watch *w, size_t i, redisReply *r)
{
    wconn *k = &w->cmd[i];
    rld_watch_answer *a = &w->ans[i];
    if (k->owed <= 0)
        return -1;
    k->owed--;
    if (k->auth) {
        k->auth = 0;
        return r->type == REDIS_REPLY_ERROR ? -1 : 0;
    }
    k->retry_ms = 0;
    if (a->got++ == 0) {
        a->ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                r->element[0]->type == REDIS_REPLY_STRING &&
                r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->len < sizeof a->host;
        if (a->ok) {
            memcpy(a->host, r->element[0]->str, r->element[0]->len + 1);
            a->port = atoi(r->element[1]->str);
            a->ok = a->port > 0 && a->port < 65536;
        }
    } else {
        a->epoch = epoch_of(r);
    }
    return 0;
}

/* A reply or message on sentinel i's subscription. An error (AUTH refused, the channel not
 * permitted) closes it (-1). */
static int on_pushed(rld_watch *w, size_t i, redisReply *r)
{
    wconn *k = &w->sub[i];
    int arr = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
              r->element[0]->type == REDIS_REPLY_STRING;
    if (r->type == REDIS_REPLY_ERROR)
        return -1;
    if (arr && r->elements == 3 && strcmp(r->element[0]->str, "message") == 0 &&
        r->element[2]->type == REDIS_REPLY_STRING) {
        on_switch(w, r->element[2]->str);
        return 0;
    }
    if (k->owed > 0) /* AUTH's OK, the subscription, a PING's pong */
        k->owed--;
    k->auth = 0;
    if (arr && strcmp(r->element[0]->str, "subscribe") == 0) {
        k->retry_ms = 0;
        w->wanted = 1; /* a failover may have happened while not subscribed */
    }
    return 0;
}

/* Reads what came on k (poll said so) and hands each reply to on_reply; closes k on failure. */
static void conn_read(rld_watch *w, wconn *k, size_t i,
                      int (*on_reply)(rld_watch *, size_t, redisReply *))
{
    rl_ns now = rld_mono_ns();
    void *reply;
    int bad = rld_rconn_read(k->c) != REDIS_OK;
    while (!bad && rld_rconn_next_reply(k->c, &reply) == REDIS_OK && reply) {
        k->heard = now;
        bad = on_reply(w, i, reply) != 0;
        freeReplyObject(reply);
    }
    if (bad || rld_rconn_err(k->c))
        conn_close(k, now);
    else if (!k->owed)
        k->since = 0;
    else if (k->since == 0)
        k->since = now;
}

/* Opens the subscriptions that are due, pings the silent ones, and closes connections that
 * owe a reply for DEAD_MS. */
static void tend(rld_watch *w, rl_ns now)
{
    const char *sub[2] = {"SUBSCRIBE", "+switch-master"};
    const char *ping[1] = {"PING"};
    for (size_t i = 0; i < w->s.n; i++) {
        wconn *k = &w->sub[i];
        if (!k->c && conn_open(w, k, i, now) == 0 && conn_send(k, 2, sub, now) != 0)
            conn_close(k, now);
        if (k->c && !k->owed && now - k->heard >= PING_MS * MS && conn_send(k, 1, ping, now))
            conn_close(k, now);
        for (int j = 0; j < 2; j++) {
            wconn *q = j ? &w->cmd[i] : k;
            if (q->c && q->owed && now - q->since >= DEAD_MS * MS)
                conn_close(q, now);
        }
    }
}

/* How long to wait for replies: until the round is to be weighed or the next one asked. */
static int wait_ms(const rld_watch *w, int due)
{
    rl_ns left = w->round_at + TICK_MS * MS - rld_mono_ns();
    if (!due && !w->open)
        return TICK_MS;
    return left <= 0 ? 1 : left >= TICK_MS * MS ? TICK_MS : (int)(left / MS) + 1;
}

static void *watch_run(void *arg)
{
    rld_watch *w = arg;
    for (;;) {
        rl_ns now = rld_mono_ns();
        tend(w, now);
        weigh(w, now); /* the last round, before the next replaces it */
        int due = w->wanted || w->ops.down(w->ops.cls);
        if (due && now - w->round_at >= TICK_MS * MS)
            ask_all(w, now);
        struct pollfd fds[1 + 2 * RLD_MAX_SENTINELS];
        wconn *of[2 * RLD_MAX_SENTINELS];
        size_t at[2 * RLD_MAX_SENTINELS], nf = 1;
        int pending = 0; /* bytes TLS decrypted already: poll would not say so */
        fds[0] = (struct pollfd){.fd = w->wake[0], .events = POLLIN};
        for (size_t i = 0; i < w->s.n; i++)
            for (int j = 0; j < 2; j++) {
                wconn *k = j ? &w->cmd[i] : &w->sub[i];
                if (k->c) {
                    of[nf - 1] = k, at[nf - 1] = i;
                    fds[nf++] = (struct pollfd){.fd = rld_rconn_fd(k->c), .events = POLLIN};
                    pending |= rld_rconn_pending(k->c);
                }
            }
        int n = poll(fds, (nfds_t)nf, pending ? 0 : wait_ms(w, due));
        if (n < 0 && errno != EINTR)
            break;
        if (fds[0].revents)
            break;
        for (size_t f = 1; (n > 0 || pending) && f < nf; f++)
            if (fds[f].revents || (of[f - 1]->c && rld_rconn_pending(of[f - 1]->c)))
                conn_read(w, of[f - 1], at[f - 1],
                          of[f - 1] == &w->cmd[at[f - 1]] ? on_answer : on_pushed);
        weigh(w, rld_mono_ns());
    }
    for (size_t i = 0; i < w->s.n; i++) {
        conn_close(&w->sub[i], 0);
        conn_close(&w->cmd[i], 0);
    }
    return NULL;
}

int rld__watch_start(const rld_sentinel *s, const rld_watch_ops *ops, rld_watch **out, rl_err *err)
{
    rld_watch *w = calloc(1, sizeof *w);
    *out = NULL;
    if (!w)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    w->s = *s;
    w->ops = *ops;
    w->round_at = rld_mono_ns() - TICK_MS * MS;
    if (pipe(w->wake) != 0) {
        free(w);
        return rl_errf(err, RL_ENOMEM, "store.sentinel: cannot start watching the sentinels");
    }
    if (pthread_create(&w->th, NULL, watch_run, w) != 0) {
        close(w->wake[0]);
        close(w->wake[1]);
        free(w);
        return rl_errf(err, RL_ENOMEM, "store.sentinel: cannot start watching the sentinels");
    }
    *out = w;
    return RL_OK;
}

void rld__watch_stop(rld_watch *w)
{
    if (!w)
        return;
    ssize_t n = write(w->wake[1], "x", 1);
    (void)n;
    pthread_join(w->th, NULL);
    close(w->wake[0]);
    close(w->wake[1]);
    free(w);
}
