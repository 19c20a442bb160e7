/*
 * net.c - see net.h.
 *
 * The accepting thread counts a connection open before it hands it over; the count falls when
 * the connection closes (rld_net_close, or rld_net_closed for libmicrohttpd's). A hand-over is
 * a list under the worker's mutex and a byte in its eventfd, written only when the list was
 * empty: the worker takes the whole list at once.
 */
#define _GNU_SOURCE /* accept4, pipe2 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "app/clock.h"
#include "app/log.h"
#include "net.h"
#include "tls.h"

#define MS ((rl_ns)1000000)

typedef struct worker {
    rld_net_worker pub;
    int ep, ev; /* epoll; eventfd: new connections, the stop */
    pthread_t thread;
    int running;
    int stop_seen; /* on_stop was called on the connections */
    rld_net_conn *conns;
    pthread_mutex_t mu;
    rld_net_conn *incoming; /* handed over, not yet watched (under mu) */
    rl_ns idle_check;       /* when idle connections are looked for next */
} worker;

struct rld_net {
    rld_net_config cfg;
    const rld_net_ops *ops;
    int lfd, port;
    int wake[2]; /* the accepting thread's stop */
    pthread_t acceptor;
    int accepting;
    int stopping; /* atomic */
    int quit;     /* atomic: workers close everything and return */
    long open;    /* atomic: connections counted open */
    unsigned nw;
    worker w[RLD_NET_MAX_WORKERS];
};

/* ---- the listening socket ---------------------------------------------------------------- */

int rld_net_listen(const char *address, int port, const char *setting, int *bound, rl_err *err)
{
    struct sockaddr_storage ss;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    socklen_t sl;
    memset(&ss, 0, sizeof ss);
    if (inet_pton(AF_INET, address, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        sl = sizeof *a4;
    } else if (inet_pton(AF_INET6, address, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        sl = sizeof *a6;
    } else {
        return rl_errf(err, RL_EINVAL, "%s: \"%.64s\" is not an IP address", setting, address);
    }
    int one = 1, fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return rl_errf(err, RL_EIO, "socket: %s", strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* "::" serves IPv6 only, as "0.0.0.0" serves IPv4 only, whatever the system's default */
    if (ss.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0) {
        int e = errno;
        close(fd);
        return rl_errf(err, RL_EIO, "cannot listen on %s port %d: %s", address, port, strerror(e));
    }
    sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *bound = ntohs(ss.ss_family == AF_INET6 ? a6->sin6_port : a4->sin_port);
    return fd;
}

/* ---- connections ----------------------------------------------------------------------- */

static void unlink_conn(worker *w, rld_net_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
}

void rld_net_close(rld_net_conn *c)
{
    worker *w = (worker *)c->w;
    rld_net *n = w->pub.net;
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
    rld__tls_close(c);
    close(c->fd);
    unlink_conn(w, c);
    if (n->cfg.drain_connections)
        rld_net_busy_add(&w->pub, -1);
    n->ops->on_close(c);
    __atomic_sub_fetch(&n->open, 1, __ATOMIC_RELAXED);
}

void rld_net_closed(rld_net *n)
{
    __atomic_sub_fetch(&n->open, 1, __ATOMIC_RELAXED);
}

ssize_t rld_net_read(rld_net_conn *c, void *buf, size_t len)
{
    if (c->tls)
        return rld__tls_read(c, buf, len);
    for (;;) {
        ssize_t n = recv(c->fd, buf, len, 0);
        if (n >= 0 || errno != EINTR)
            return n;
    }
}

ssize_t rld_net_write(rld_net_conn *c, const void *buf, size_t len)
{
    if (c->tls)
        return rld__tls_write(c, buf, len);
    for (;;) {
        ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
        if (n >= 0 || errno != EINTR)
            return n;
    }
}

/* ---- the accepting thread ---------------------------------------------------------------- */

/* The connection's memory is made here, off the worker. */
static int hand_over(rld_net *n, unsigned i, int fd, const struct sockaddr *sa, socklen_t sl)
{
    if (n->ops->hand)
        return n->ops->hand(n->cfg.ctx, i, fd, sa, sl);
    worker *w = &n->w[i];
    rld_net_conn *c = n->ops->open(&w->pub, fd, sa, sl);
    if (!c) {
        close(fd);
        return -1;
    }
    c->fd = fd;
    c->w = &w->pub;
    c->prev = NULL;
    c->timeout = 0;
    c->tls = NULL;
    if (n->cfg.tls && rld__tls_open(n->cfg.tls, c, sa, sl) != 0) {
        n->ops->on_close(c);
        close(fd);
        errno = ENOMEM;
        return -1;
    }
    pthread_mutex_lock(&w->mu);
    int was_empty = w->incoming == NULL;
    c->next = w->incoming;
    w->incoming = c;
    pthread_mutex_unlock(&w->mu);
    uint64_t one = 1;
    if (was_empty && write(w->ev, &one, sizeof one) < 0)
        rld_log("error: cannot wake a worker: %s", strerror(errno));
    return 0;
}

static void accept_ready(rld_net *n, unsigned *next)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(n->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                /* out of descriptors or memory: let connections finish, then retry */
                const struct timespec pause = {0, 10000000};
                rld_log("error: accept: %s", strerror(errno));
                nanosleep(&pause, NULL);
            }
            return;
        }
        int one = 1;
        if (n->cfg.max_connections &&
            __atomic_load_n(&n->open, __ATOMIC_RELAXED) >= (long)n->cfg.max_connections) {
            /* the client learns at once that the server is full rather than waiting (over
             * TLS from the closed connection alone) */
            if (!n->cfg.tls)
                n->ops->refuse(n->cfg.ctx, fd);
            close(fd);
            continue;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        __atomic_add_fetch(&n->open, 1, __ATOMIC_RELAXED);
        if (hand_over(n, *next, fd, (struct sockaddr *)&ss, sl) != 0) {
            __atomic_sub_fetch(&n->open, 1, __ATOMIC_RELAXED);
            rld_log("error: a new connection could not be taken: %s", strerror(errno));
        }
        *next = *next + 1 == n->nw ? 0 : *next + 1;
    }
}

static void *accept_loop(void *arg)
{
    rld_net *n = arg;
    struct pollfd pf[2] = {{n->lfd, POLLIN, 0}, {n->wake[0], POLLIN, 0}};
    unsigned next = 0;
    for (;;) {
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            rld_log("error: poll on the listening socket: %s", strerror(errno));
            return NULL;
        }
        if (pf[1].revents)
            return NULL; /* stopped */
        accept_ready(n, &next);
    }
}

/* Stops the accepting thread and closes the listening socket; safe to call again. */
static void accept_stop(rld_net *n)
{
    if (n->accepting) {
        char c = 1;
        while (write(n->wake[1], &c, 1) < 0 && errno == EINTR)
            ;
        pthread_join(n->acceptor, NULL);
        n->accepting = 0;
    }
    if (n->lfd >= 0)
        close(n->lfd);
    n->lfd = -1;
}

/* ---- a worker ---------------------------------------------------------------------------- */

static void wake(worker *w)
{
    uint64_t one = 1;
    if (write(w->ev, &one, sizeof one) < 0)
        rld_log("error: cannot wake a worker: %s", strerror(errno));
}

/* Watches the connections the accepting thread handed over. */
static void take_incoming(worker *w)
{
    rld_net *n = w->pub.net;
    uint64_t v;
    if (read(w->ev, &v, sizeof v) < 0) {
        /* nothing new: a wake-up for the stop */
    }
    pthread_mutex_lock(&w->mu);
    rld_net_conn *list = w->incoming;
    w->incoming = NULL;
    pthread_mutex_unlock(&w->mu);
    for (rld_net_conn *c = list, *nx; c; c = nx) {
        nx = c->next;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                                 .data.ptr = c};
        c->last = w->pub.now;
        c->prev = NULL;
        c->next = w->conns;
        if (w->conns)
            w->conns->prev = c;
        w->conns = c;
        if (n->cfg.drain_connections)
            rld_net_busy_add(&w->pub, 1);
        if (epoll_ctl(w->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
            rld_net_close(c);
            continue;
        }
        if (w->stop_seen && n->ops->on_stop)
            n->ops->on_stop(c); /* may close c */
    }
}

/* An event of c: the handshake's first, then the protocol's (told of both directions when the
 * handshake ends: what arrived with it is waiting). */
static void deliver(const rld_net_ops *ops, rld_net_conn *c, unsigned events)
{
    if (c->tls && !rld__tls_ready(c)) {
        int r = rld__tls_handshake(c);
        if (r < 0)
            rld_net_close(c);
        if (r <= 0)
            return;
        c->last = c->w->now;
        events |= EPOLLIN | EPOLLOUT;
    }
    ops->on_event(c, events); /* may close it */
}

/* Closes the connections quiet for their timeout (idle, stalled in a request, or not reading
 * their answers); looks every `every` ns. */
static void close_idle(worker *w, rl_ns idle, rl_ns every)
{
    rld_net *n = w->pub.net;
    rl_ns now = w->pub.now;
    if (now < w->idle_check)
        return;
    w->idle_check = now + every;
    for (rld_net_conn *c = w->conns, *nx; c; c = nx) {
        nx = c->next;
        rl_ns limit = c->timeout && (!idle || c->timeout < idle) ? c->timeout : idle;
        if (limit && now - c->last >= limit) {
            if (n->ops->on_idle)
                n->ops->on_idle(c);
            rld_net_close(c);
        }
    }
}

static void begin_stop(worker *w)
{
    rld_net *n = w->pub.net;
    w->stop_seen = 1;
    if (!n->ops->on_stop)
        return;
    for (rld_net_conn *c = w->conns, *nx; c; c = nx) {
        nx = c->next;
        n->ops->on_stop(c); /* may close c */
    }
}

/* A batch thread (SCHED_BATCH, same nice level): its wake-up on a client's bytes does not
 * preempt the thread that sent them, so the client goes on sending and the worker, when it
 * runs, finds more requests ready for one epoll_wait. Under the HTTP benchmark's load this
 * halves the worker's context switches a request. A refusal is harmless: the worker then runs
 * as a normal thread. */
static void worker_sched(void)
{
    struct sched_param sp = {0};
    (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp); /* refused: SCHED_OTHER */
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    rld_net *n = w->pub.net;
    const rld_net_ops *ops = n->ops;
    rl_ns idle = (rl_ns)n->cfg.idle_ms * MS;
    /* timeouts are looked at four times per the idle timeout, at least every 250 ms */
    rl_ns every = idle && idle / 4 < 250 * MS ? idle / 4 : 250 * MS;
    struct epoll_event evs[64];
    if (n->cfg.batch)
        worker_sched();
    int timeout = -1;
    while (!__atomic_load_n(&n->quit, __ATOMIC_ACQUIRE)) {
        int wait = w->conns ? (int)(every / MS) + 1 : -1;
        if (timeout >= 0 && (wait < 0 || timeout < wait))
            wait = timeout;
        /* before a wait, not after: a connection it closes has no event waiting */
        if (!w->stop_seen && __atomic_load_n(&n->stopping, __ATOMIC_ACQUIRE))
            begin_stop(w);
        int k = epoll_wait(w->ep, evs, 64, wait);
        w->pub.now = rld_mono_ns();
        if (ops->on_wake)
            ops->on_wake(&w->pub);
        for (int i = 0; i < k; i++) {
            if (evs[i].data.ptr == w)
                take_incoming(w);
            else
                deliver(ops, evs[i].data.ptr, evs[i].events); /* may close it */
        }
        timeout = ops->on_turn ? ops->on_turn(&w->pub) : -1;
        if (w->conns)
            close_idle(w, idle, every);
    }
    while (w->conns)
        rld_net_close(w->conns);
    take_incoming(w); /* handed over during the stop */
    while (w->conns)
        rld_net_close(w->conns);
    return NULL;
}

/* ---- the server -------------------------------------------------------------------------- */

rld_net *rld_net_new(const rld_net_config *cfg, rl_err *err)
{
    rld_net *n = calloc(1, sizeof *n);
    if (!n) {
        rl_errf(err, RL_ENOMEM, "out of memory");
        return NULL;
    }
    n->cfg = *cfg;
    n->ops = cfg->ops;
    n->wake[0] = n->wake[1] = -1;
    n->nw = cfg->workers < 1                     ? 1u
            : cfg->workers > RLD_NET_MAX_WORKERS ? (unsigned)RLD_NET_MAX_WORKERS
                                                 : cfg->workers;
    for (unsigned i = 0; i < n->nw; i++) {
        n->w[i].pub.net = n;
        n->w[i].pub.index = i;
        n->w[i].ep = n->w[i].ev = -1;
    }
    if ((n->lfd = rld_net_listen(cfg->address, cfg->port, cfg->setting, &n->port, err)) < 0) {
        free(n);
        return NULL;
    }
    return n;
}

int rld_net_port(const rld_net *n)
{
    return n->port;
}

unsigned rld_net_workers(const rld_net *n)
{
    return n->nw;
}

rld_net_worker *rld_net_worker_at(rld_net *n, unsigned i)
{
    return &n->w[i].pub;
}

int rld_net_stopping(const rld_net *n)
{
    return __atomic_load_n(&n->stopping, __ATOMIC_ACQUIRE);
}

static int start_worker(worker *w)
{
    w->pub.now = rld_mono_ns();
    w->ep = epoll_create1(EPOLL_CLOEXEC);
    w->ev = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ee = {.events = EPOLLIN, .data.ptr = w};
    if (w->ep < 0 || w->ev < 0 || epoll_ctl(w->ep, EPOLL_CTL_ADD, w->ev, &ee) != 0 ||
        pthread_mutex_init(&w->mu, NULL) != 0)
        return -1;
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        return -1;
    }
    w->running = 1;
    return 0;
}

int rld_net_run(rld_net *n, rl_err *err)
{
    if (!n->ops->hand)
        for (unsigned i = 0; i < n->nw; i++)
            if (start_worker(&n->w[i]) != 0)
                return rl_errf(err, RL_EIO, "cannot start the worker threads");
    if (pipe2(n->wake, O_CLOEXEC) != 0 || pthread_create(&n->acceptor, NULL, accept_loop, n))
        return rl_errf(err, RL_EIO, "cannot start the accepting thread");
    n->accepting = 1;
    return 0;
}

static long busy(const rld_net *n)
{
    long b = 0;
    for (unsigned i = 0; i < n->nw; i++)
        b += __atomic_load_n(&n->w[i].pub.busy, __ATOMIC_ACQUIRE);
    return b;
}

long rld_net_drain(rld_net *n, unsigned drain_ms)
{
    accept_stop(n);
    __atomic_store_n(&n->stopping, 1, __ATOMIC_RELEASE);
    for (unsigned i = 0; i < n->nw; i++)
        if (n->w[i].running)
            wake(&n->w[i]);
    const struct timespec step = {0, 5000000};
    for (unsigned waited = 0; busy(n) > 0 && waited < drain_ms; waited += 5)
        nanosleep(&step, NULL);
    return busy(n);
}

void rld_net_free(rld_net *n)
{
    accept_stop(n);
    __atomic_store_n(&n->quit, 1, __ATOMIC_RELEASE);
    for (unsigned i = 0; i < n->nw; i++) {
        worker *w = &n->w[i];
        if (w->running) {
            wake(w);
            pthread_join(w->thread, NULL);
            pthread_mutex_destroy(&w->mu);
        }
        if (w->ep >= 0)
            close(w->ep);
        if (w->ev >= 0)
            close(w->ev);
    }
    if (n->wake[0] >= 0) {
        close(n->wake[0]);
        close(n->wake[1]);
    }
    free(n);
}
