/*
 * net.h - the one connection layer under every protocol: the listening socket (its options
 * set here only), the accepting thread that hands new connections round-robin to the workers,
 * the connection cap, a worker's epoll loop, idle and stalled timeouts, and the drain on stop.
 * Protocols (HTTP/1.1, HTTP/2 + gRPC) are peers on top: they parse and answer through an ops
 * table, the way h2o's http1 and http2 sit on one socket layer. libmicrohttpd keeps its own
 * event handling: it takes the listening socket, the accepting thread and the cap (ops.hand).
 *
 * Why one accepting thread and not all workers accepting from one socket: a burst of new
 * connections (a client opening its pool) goes to whichever worker wakes first; measured here,
 * 64 connections opened at once often landed 50 or more on one of two workers, which then did
 * nearly all the work. Round-robin shares them evenly.
 *
 * TLS is net's too (GnuTLS, tls.c): with a TLS context in the configuration every connection
 * does its handshake on its worker's loop before the protocol hears of it, and the protocol
 * reads and writes plaintext through rld_net_read and rld_net_write, the same calls as over
 * cleartext; it never sees TLS. The certificates are read again by rld_net_tls_reload (the
 * part rld_net_tls_part_ops does it at every reload): new connections get the new ones, open
 * connections keep theirs.
 *
 * A connection is the protocol's struct with rld_net_conn as its first member. It is made on
 * the accepting thread (ops.open, off the workers), then belongs to its worker alone: every
 * other callback runs there. Sockets are watched edge-triggered for reading and writing
 * (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET): a protocol reads until a short read or EAGAIN
 * and writes until EAGAIN, and the next bytes or room bring a new event.
 */
#ifndef RLD_NET_H
#define RLD_NET_H

#include <sys/socket.h>
#include <sys/types.h>

#include "app/parts.h"
#include "ratelimit.h"

/* Most workers of one server. */
#define RLD_NET_MAX_WORKERS 64

typedef struct rld_net rld_net;
typedef struct rld_net_worker rld_net_worker;
typedef struct rld_net_tls rld_net_tls;
typedef struct rld_net_tls_conn rld_net_tls_conn;

typedef struct rld_net_conn {
    int fd;
    rld_net_worker *w;
    struct rld_net_conn *prev, *next; /* the worker's connections (net's) */
    /* CLOCK_MONOTONIC: accepted, or bytes last moved; the protocol sets it (to w->now) when
     * bytes move that keep the connection alive. */
    rl_ns last;
    /* 0: the server's idle timeout; else this one (a shorter linger after the last answer). */
    rl_ns timeout;
    rld_net_tls_conn *tls; /* net's: the TLS session, NULL over cleartext */
} rld_net_conn;

struct rld_net_worker {
    rld_net *net;
    void *proto;    /* the protocol's state of this worker (set before rld_net_run) */
    unsigned index; /* 0 to workers - 1 */
    rl_ns now;      /* CLOCK_MONOTONIC at the loop's last wake-up */
    /* Work in flight, which the drain waits for; written by this worker's thread only
     * (rld_net_busy_add), read by the one that stops. */
    _Alignas(64) long busy;
};

typedef struct rld_net_ops {
    /* On the accepting thread: the protocol's connection for fd (non-blocking, TCP_NODELAY);
     * net fills its rld_net_conn after. NULL when out of memory (net closes fd). */
    rld_net_conn *(*open)(rld_net_worker *w, int fd, const struct sockaddr *sa, socklen_t sl);
    /* The socket is readable or writable (epoll's events); may close c (rld_net_close). The
     * first event of a new connection comes at once (it is writable). */
    void (*on_event)(rld_net_conn *c, unsigned events);
    /* Optional: at each wake-up of the loop before its events (w->now is set). */
    void (*on_wake)(rld_net_worker *w);
    /* Optional: after a wake-up's events; returns the milliseconds until it wants the next
     * call (-1: no wish). */
    int (*on_turn)(rld_net_worker *w);
    /* Optional: c sent nothing for its timeout and is about to close (last words). */
    void (*on_idle)(rld_net_conn *c);
    /* Optional: the server stops (once per connection, new ones included); c may close. */
    void (*on_stop)(rld_net_conn *c);
    /* c closes: frees what the protocol holds and c itself (net closes the socket before). */
    void (*on_close)(rld_net_conn *c);
    /* On the accepting thread, past max_connections: writes a short refusal on the new socket
     * fd (which net closes after). */
    void (*refuse)(void *ctx, int fd);
    /* Instead of net's workers (libmicrohttpd): hands fd to the protocol's own worker i, which
     * calls rld_net_closed when it closes it. 0, or -1 when it could not be taken (fd closed by
     * hand). open, on_event and on_close are then unused. */
    int (*hand)(void *ctx, unsigned i, int fd, const struct sockaddr *sa, socklen_t sl);
} rld_net_ops;

typedef struct rld_net_config {
    const char *address;      /* IPv4 or IPv6 literal (an IPv6 socket is IPv6 only) */
    int port;                 /* 0: any free port */
    unsigned workers;         /* 1 to RLD_NET_MAX_WORKERS (clamped) */
    unsigned max_connections; /* open at once; past it ops.refuse (0: no bound) */
    unsigned idle_ms;         /* a connection quiet this long is closed (0: never) */
    int batch;                /* workers run as SCHED_BATCH threads */
    int drain_connections;    /* the drain waits for connections, not only for busy work */
    const char *setting;      /* names the address in a message ("grpc.listen") */
    /* NULL: cleartext. Else every connection is TLS with this context (borrowed, outlives the
     * server); past max_connections a new connection is closed without a word (a refusal in
     * cleartext would mean nothing to a TLS client). */
    rld_net_tls *tls;
    const rld_net_ops *ops;
    void *ctx; /* handed to refuse and hand */
} rld_net_config;

/* Binds and listens on address and port with the server's options (SO_REUSEADDR,
 * IPV6_V6ONLY for IPv6, non-blocking, close-on-exec, a backlog of 1024). Returns the socket,
 * with the port bound in *bound, or a negative status with err set (setting names the address
 * when it is not an IP literal). */
int rld_net_listen(const char *address, int port, const char *setting, int *bound, rl_err *err);

/* Listens and makes the workers (no thread runs yet). NULL with err set. */
rld_net *rld_net_new(const rld_net_config *cfg, rl_err *err);
/* The port bound. */
int rld_net_port(const rld_net *n);
/* The workers made (cfg.workers clamped). */
unsigned rld_net_workers(const rld_net *n);
/* Worker i, for the protocol to set its proto. */
rld_net_worker *rld_net_worker_at(rld_net *n, unsigned i);
/* Starts the workers' threads (none with ops.hand) and the accepting thread. -1 with err. */
int rld_net_run(rld_net *n, rl_err *err);
/* 1 once rld_net_drain has begun. */
int rld_net_stopping(const rld_net *n);
/* Stops accepting (the socket closes), calls on_stop on every connection, then waits up to
 * drain_ms (looking every 5 ms) for the workers' busy work (and their connections, with
 * drain_connections) to reach 0. Returns the busy work left then. */
long rld_net_drain(rld_net *n, unsigned drain_ms);
/* Stops the workers, closing every connection left (on_close), and frees n; after a drain or
 * instead of it (also after a failed rld_net_run). */
void rld_net_free(rld_net *n);

/* On c's worker: closes c (on_close; the count of open connections falls). */
void rld_net_close(rld_net_conn *c);
/* With ops.hand: a connection handed over has closed. */
void rld_net_closed(rld_net *n);

/* On c's worker: reads up to len bytes of c's plaintext. Returns the count (> 0), 0 when the
 * peer closed, or -1 with errno set (EAGAIN: nothing more now, the next bytes bring an event;
 * another: the connection is broken). It fills buf unless the socket has nothing more now, so a
 * count below len means the socket is drained (what an edge-triggered loop needs: over TLS a
 * record is smaller than the bytes waiting). */
ssize_t rld_net_read(rld_net_conn *c, void *buf, size_t len);
/* On c's worker: writes up to len bytes of plaintext. Returns the count taken (> 0), or -1
 * with errno set (EAGAIN: no room now; the next call, after the next event, must start with
 * the same bytes, at least as many: over TLS a record half sent is finished first). */
ssize_t rld_net_write(rld_net_conn *c, const void *buf, size_t len);

/* ---- TLS ---------------------------------------------------------------------------------- */

/* What a TLS context is read from. Each file is named in messages by its setting (name). */
typedef struct rld_net_tls_files {
    const char *cert, *cert_name; /* PEM: the server's certificate with its chain; required */
    const char *key, *key_name;   /* PEM: its private key, unencrypted; required */
    /* PEM: the CAs a client certificate must be signed by; NULL: no client certificate is
     * asked for. With it, a client without a certificate, or with one these CAs did not sign
     * (or whose extended key usage excludes client authentication), fails the handshake. */
    const char *client_ca, *client_ca_name;
    /* With client_ca: a DNS name the client certificate's subjectAltName must hold exactly
     * (as envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN); NULL: any. */
    const char *client_san, *client_san_name;
    const char *alpn; /* the one ALPN protocol ("h2"); a client that offers others fails */
    const char *what; /* names the server in log lines ("grpc") */
} rld_net_tls_files;

/* Reads the files and makes a TLS context (the strings are copied). NULL with err naming the
 * setting of the file at fault ("grpc.tls.cert: c.pem: No such file or directory"). */
rld_net_tls *rld_net_tls_new(const rld_net_tls_files *f, rl_err *err);
/* Reads the same files again and puts them in force for the connections accepted from now on;
 * open connections keep the certificates they began with. On failure (err names the file)
 * nothing changes. Any thread. */
int rld_net_tls_reload(rld_net_tls *t, rl_err *err);
/* Frees t, once no server uses it. NULL is fine. */
void rld_net_tls_free(rld_net_tls *t);
/* app/parts.h's part of a TLS context (self is the rld_net_tls): at every reload the files are
 * read again (rld_net_tls_reload), logged either way. */
extern const rld_part_ops rld_net_tls_part_ops;

/* ---- client connections ------------------------------------------------------------------- */

/* What a TLS client context is read from (the Redis store's connections). Each file is named in
 * messages by its setting (name). */
typedef struct rld_net_client_tls_files {
    /* PEM: the CAs the server's certificate must be signed by; NULL: the system's store */
    const char *ca, *ca_name;
    /* PEM: a client certificate and its unencrypted key, sent when the server asks; both NULL:
     * none */
    const char *cert, *cert_name, *key, *key_name;
    /* 1: the server's name is not checked against its certificate (the chain still is) */
    int skip_hostname;
    /* The name the server's certificate must hold (and sent as SNI) instead of the host
     * dialled; NULL: the host */
    const char *server_name;
    /* The one ALPN protocol offered ("h2" for gRPC); NULL: none */
    const char *alpn;
} rld_net_client_tls_files;

typedef struct rld_net_client_tls rld_net_client_tls;

/* Reads the files into a client context (shared by every connection made with it, any thread).
 * NULL with err naming the setting of the file at fault. */
rld_net_client_tls *rld_net_client_tls_new(const rld_net_client_tls_files *f, rl_err *err);
/* Frees t once no connection made with it is open. NULL is fine. */
void rld_net_client_tls_free(rld_net_client_tls *t);

/* A blocking client connection: TCP, or TLS over it, with a deadline on every wait. */
typedef struct rld_net_stream rld_net_stream;

/* Connects to host:port (a numeric address, or a name resolved without a bound) by deadline
 * (CLOCK_MONOTONIC, rld_mono_ns), then with tls does the handshake by the same deadline: the
 * server's certificate must be signed by the context's CAs and, unless skip_hostname, be for
 * host (its DNS name or IP address). NULL with why (cap bytes) saying what failed
 * ("Connection refused", "Connection timed out", "TLS handshake: The certificate is NOT
 * trusted. ..."). */
rld_net_stream *rld_net_dial(const char *host, int port, rld_net_client_tls *tls, rl_ns deadline,
                             char *why, size_t cap);
/* Writes all len bytes, waiting for room until deadline (0: not at all). Returns len, or -1 with
 * errno (EAGAIN: the deadline passed; the bytes taken so far are gone, so the connection is
 * unusable; EPIPE, ECONNRESET, ...: broken). */
ssize_t rld_net_stream_write(rld_net_stream *s, const void *buf, size_t len, rl_ns deadline);
/* Reads up to len bytes, waiting for the first until deadline (0: not at all). Returns the count
 * (> 0), 0 when the peer closed, or -1 with errno (EAGAIN: nothing came by the deadline). */
ssize_t rld_net_stream_read(rld_net_stream *s, void *buf, size_t len, rl_ns deadline);
/* The socket, to poll for reading; but first rld_net_stream_pending: 1 when bytes already
 * decrypted wait to be read (poll would not say so). */
int rld_net_stream_fd(const rld_net_stream *s);
int rld_net_stream_pending(const rld_net_stream *s);
/* After a read or write failed: what TLS said of it ("TLS: the server sent the alert ..."), or
 * NULL when the socket's errno says it all. */
const char *rld_net_stream_error(const rld_net_stream *s);
/* Closes the connection (a TLS close_notify first, if the socket takes it now) and frees s. NULL
 * is fine. */
void rld_net_stream_close(rld_net_stream *s);

/* Adds n to w's busy work (on w's thread only: a plain store the drain reads). */
static inline void rld_net_busy_add(rld_net_worker *w, long n)
{
    __atomic_store_n(&w->busy, w->busy + n, __ATOMIC_RELEASE);
}

#endif
