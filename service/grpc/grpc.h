/*
 * grpc.h - a gRPC server for unary methods: HTTP/2 over cleartext with prior knowledge (what
 * Envoy speaks to a cluster with http2_protocol_options) or over TLS with ALPN h2 (and client
 * certificates, mTLS: the connection layer's, net/net.h), libnghttp2 sessions fed from the
 * connection layer's loop (net/net.h: one epoll per worker thread, new connections handed
 * round-robin by one accepting thread, the same as HTTP's), many concurrent streams per
 * connection, nghttp2's flow control.
 *
 * gRPC as its HTTP/2 protocol document says: a request is POST with content-type
 * application/grpc, its body one length-prefixed message (1 byte compressed flag, 4 bytes
 * big-endian length, the message); the answer is HEADERS (:status 200), one length-prefixed
 * message and trailers with grpc-status and grpc-message (percent-encoded), or only trailers
 * for an error. grpc-timeout is honoured: a call whose deadline passes before it is answered
 * gets DEADLINE_EXCEEDED, never a late answer. A message larger than the limit gets
 * RESOURCE_EXHAUSTED, a compressed one UNIMPLEMENTED with grpc-accept-encoding: identity (no
 * compression is supported), an unknown path UNIMPLEMENTED. Stopping sends GOAWAY, finishes
 * the streams already opened and then closes.
 */
#ifndef RLD_GRPC_H
#define RLD_GRPC_H

#include <stddef.h>
#include <stdint.h>

#include "app/buf.h"
#include "ratelimit.h"
#include "rls.h"

/* The largest request message accepted by default. */
#define RLD_GRPC_MAX_MESSAGE 65536

/* What a method sees of its call. */
typedef struct rld_grpc_call {
    const uint8_t *msg; /* the request message (not the 5-byte prefix) */
    size_t len;
    const char *now;  /* the "ratelimitd-now" metadata (seconds), or NULL */
    const char *authorization; /* the "authorization" metadata, or NULL */
    rld_arena *arena; /* for the call's memory, reset after the answer */
} rld_grpc_call;

/* A unary method: reads call, appends the serialized answer to out and returns RLD_GRPC_OK,
 * or another code with a message in err (sent as grpc-message). Runs on a worker thread. */
typedef rld_grpc_code (*rld_grpc_method_fn)(void *app, const rld_grpc_call *call, rld_buf *out,
                                            rl_err *err);

typedef struct rld_grpc_method {
    const char *path; /* "/package.Service/Method" */
    rld_grpc_method_fn fn;
} rld_grpc_method;

typedef struct rld_grpc_config {
    const char *address; /* IPv4 or IPv6 literal */
    int port;            /* 0: any free port */
    int threads;         /* worker threads (1 to 64) */
    size_t max_message;  /* 0: RLD_GRPC_MAX_MESSAGE */
    /* Connections open at once (0: no bound): past it a new one gets a GOAWAY
     * (ENHANCE_YOUR_CALM, saying why) and is closed at once. */
    unsigned max_connections;
    /* A connection that sent nothing for this long (idle, or a call whose body stalls) gets
     * a GOAWAY and is closed (0: never). */
    unsigned idle_timeout_ms;
    /* Called for every call answered with a gRPC status: the method's index (-1: unknown),
     * the status and the time since its headers began; NULL: none. */
    void (*observe)(void *app, int method, rld_grpc_code code, rl_ns duration);
    const rld_grpc_method *methods;
    size_t nmethods;
    void *app; /* handed to the methods */
    /* NULL: HTTP/2 in cleartext with prior knowledge. Else TLS with these certificates (ALPN
     * h2; net/net.h's rld_net_tls_new, borrowed, outliving the server), done by net/ before
     * the first byte of HTTP/2: the methods never see it. */
    struct rld_net_tls *tls;
} rld_grpc_config;

typedef struct rld_grpc rld_grpc;

/* Binds and starts the workers. NULL with the reason in err on failure. */
rld_grpc *rld_grpc_start(const rld_grpc_config *cfg, rl_err *err);
/* The port bound. */
int rld_grpc_port(const rld_grpc *g);
/* Stops: closes the listening socket, sends GOAWAY on every connection, lets the streams
 * already opened finish for up to drain_ms, then closes everything and frees g. Returns the
 * number of streams still open when it gave up. */
unsigned rld_grpc_stop(rld_grpc *g, unsigned drain_ms);

/* Parses a grpc-timeout value ("100m", "20S", "1H": 1 to 8 digits and a unit H, M, S, m, u
 * or n) into nanoseconds; -1 when malformed. */
rl_ns rld_grpc_timeout_parse(const char *v, size_t len);
/* Percent-encodes a grpc-message (bytes outside 0x20..0x7e and '%' as %XX) into out. */
void rld_grpc_message_encode(rld_buf *out, const char *msg);

#endif
