/*
 * server.h - what the two HTTP servers behind http.h share: the request every handler
 * sees, the server's common part, and the steps of a request that do not depend on how bytes
 * travel (routing, tokens, the body's cap, the early answers, the bookkeeping of an answer, the
 * access line).
 *
 * Plain HTTP is served by http1.c (on net.h's epoll loop per worker); HTTPS by mhd.c
 * (libmicrohttpd on net.h's listening socket, accepting thread and cap). A server embeds
 * rld_http as its first member and rld_req in its own per-connection state, and supplies the
 * few operations that touch the connection.
 */
#ifndef RLD_HTTP_SERVER_H
#define RLD_HTTP_SERVER_H

#include <sys/socket.h>

#include "http.h"

#define RLD_BODY_INLINE 2048
#define RLD_OUT_INLINE 4096
/* A body that passed the cap is read and dropped (to answer 413 on a chunked upload) only up
 * to this much; past it the connection is closed. */
#define RLD_DISCARD_MAX (16 * RLD_MAX_BODY)

typedef struct rld_http_ops {
    /* Calls fn for each request header (see rld_req_each_header). */
    int (*each_header)(rld_req *r, rld_header_fn fn, void *ctx);
    /* A query argument (see rld_req_query). */
    const char *(*query)(rld_req *r, const char *name);
    /* Prepares the answer: the output buffer as the body, with its headers. Returns the status
     * that will go out (500 when out of memory). */
    int (*prepare)(rld_req *r, int status, const char *ctype, const rld_header *h, size_t nh);
    /* Queues the prepared answer (after it has been counted and logged). */
    void (*commit)(rld_req *r);
    /* The peer's address, for the access line. */
    const struct sockaddr *(*client)(const rld_req *r);
    /* Stops the server (rld_http_stop once stopping is set) and frees it. */
    unsigned (*stop)(rld_http *h, unsigned drain_ms);
} rld_http_ops;

struct rld_http {
    rld_http_config cfg;
    const rld_http_ops *ops;
    char *token[3]; /* admin, acquire and metrics tokens (copies), NULL when not needed */
    int port;
    int stopping; /* atomic */
};

struct rld_req {
    rld_http *h;
    size_t route; /* index in the table; nroutes for an unknown path */
    const rld_method *m;
    const char *tail;
    const char *method, *url; /* for the access line */
    char *body;
    size_t len, cap, seen;
    int too_big, body_oom;
    int early; /* an answer decided from the headers (404, 405, 401), sent after the body */
    const char *note_by, *note_key; /* a denial's rule and key, for the access line */
    size_t note_keylen;
    rl_ns t0;
    int status; /* 0 until answered */
    rld_buf out;
    char body_inl[RLD_BODY_INLINE + 1];
    char out_inl[RLD_OUT_INLINE];
};

/* Fills the common part of a server (copies of the tokens) after it was zeroed. -1 with err
 * set when out of memory. */
int rld__http_init(rld_http *h, const rld_http_config *cfg, const rld_http_ops *ops,
                   rl_err *err);
/* Frees what rld__http_init made (not h itself). */
void rld__http_fini(rld_http *h);
/* The two servers: start on h (zeroed, then filled by rld__http_init), NULL with err set. */
rld_http *rld__http1_start(const rld_http_config *cfg, rl_err *err);
rld_http *rld__http_mhd_start(const rld_http_config *cfg, rl_err *err);

/* How many workers a server starts for cfg.threads: 1 to RLD_MAX_WORKERS. */
static inline unsigned rld__http_workers(const rld_http_config *cfg)
{
    return cfg->threads < 1 ? 1u
           : cfg->threads > RLD_MAX_WORKERS ? (unsigned)RLD_MAX_WORKERS
                                            : (unsigned)cfg->threads;
}

/* net.h's refusal past max_connections (http is the rld_http): 503 with a JSON error. */
void rld__http_refuse(void *http, int fd);

/* Starts a request on r (its storage reused) at t0 (CLOCK_MONOTONIC: when its bytes were
 * seen): no route yet, empty body and output. */
void rld__req_begin(rld_http *h, rld_req *r, rl_ns t0);
/* Frees what the request allocated (a grown body or output); r can be begun again. */
void rld__req_end(rld_req *r);
/* Routes method and url (url stays borrowed until the answer) and decides what the headers
 * decide: sets r->early to 404, 405, 413 (declared length past the cap: answer at once), 403
 * (an admin route while admin_closed) or 401 (authorization is the Authorization header's
 * value, NULL when absent). */
void rld__req_route(rld_req *r, const char *method, const char *url,
                    unsigned long long length, const char *authorization);
/* Appends a piece of the body (kept up to the cap; counted in r->seen). */
void rld__req_body_append(rld_req *r, const char *data, size_t n);
/* The whole body is in: answers it (an early answer, 413, or the handler under the gate). */
void rld__req_run(rld_req *r);
/* 1 when r is to be run with others of its row (its method has many, and nothing answered it
 * before its handler). */
int rld__req_batchable(const rld_req *r);
/* Runs n batchable requests of one row through its many handler, under the gate as
 * rld__req_run runs one. */
void rld__req_run_many(rld_req **rs, size_t n);
/* Sends the answer decided from the headers (r->early). */
void rld__req_reply_early(rld_req *r);

#endif
