/*
 * http.h - the HTTP wing's face: a route table that answers 404 for an unknown path and 405
 * (with Allow) for a wrong method, request bodies buffered up to a cap (413 beyond it), the
 * tokens (401), and replies, over net/'s connections (its accepting thread hands them to the
 * workers round-robin). Plain HTTP is served by our own HTTP/1.1 server (http1.c, on net/'s
 * epoll loop per worker); HTTPS by libmicrohttpd (mhd.c, one epoll daemon per worker, fed from
 * net/'s listening socket). Both give handlers the same contract; the endpoints are api.c's.
 *
 * A handler runs once per request, after the whole body has arrived, on a worker thread. It
 * must answer exactly once with one of the rld_reply* functions (each queues the response; a
 * helper that already replied says so by returning -1). Per-request state lives in
 * per-connection storage that keep-alive requests reuse; nothing is allocated per request
 * unless a body or an answer outgrows the inline buffers.
 */
#ifndef RLD_HTTP_H
#define RLD_HTTP_H

#include <pthread.h>
#include <stddef.h>

#include "app/buf.h"
#include "ratelimit.h"

/* Largest request body accepted. */
#define RLD_MAX_BODY 65536
/* Most worker threads. */
#define RLD_MAX_WORKERS 64

typedef struct rld_req rld_req;
typedef void (*rld_handler)(void *app, rld_req *r);
/* Answers n requests of one route row at once, each as its rld_handler would; n is at most
 * RLD_MANY_MAX. */
#define RLD_MANY_MAX 16
typedef void (*rld_many_handler)(void *app, rld_req **rs, size_t n);

#define RLD_ADMIN 0x1u   /* needs "Authorization: Bearer <admin_token>" when a token is set */
#define RLD_ACQUIRE 0x2u /* the same with acquire_token */
#define RLD_METRICS 0x4u /* the same with metrics_token */
#define RLD_UNGATED 0x8u /* runs without holding the gate (a handler that takes it to write) */

typedef struct rld_method {
    const char *name; /* "GET", "POST", ...; NULL ends the list */
    rld_handler fn;
    unsigned flags;
    /* Optional: the HTTP/1.1 server hands it the requests of this row whose bodies complete in
     * the same turn of a worker's loop, so that their decisions share round trips to Redis;
     * libmicrohttpd calls fn for each. */
    rld_many_handler many;
} rld_method;

/* One row of the route table: an exact path, or a prefix when it ends with '/' (the rest of
 * the path is the request's tail, for example the user of /quota/<user>). */
typedef struct rld_route {
    const char *path;
    const char *endpoint; /* metrics label */
    const char *allow;    /* the Allow header: the methods below, comma separated */
    rld_method methods[4];
} rld_route;

/* Finds the route of url and the method's row in it: returns 0 with *route, *tail (what follows
 * a prefix route's path, pointing into url; "" otherwise) and *m set; 404 when no route
 * matches (*route is n); 405 when the route has no such method (*m is NULL). */
int rld_route_find(const rld_route *routes, size_t n, const char *url, const char *method,
                   size_t *route, const char **tail, const rld_method **m);
/* ratelimitd's endpoints (api.c), whose handlers take an rld_app (app/app.h) as their app:
 * for rld_http_config, the app's metrics labels and the tests that hold api/openapi.yaml to
 * them. */
extern const rld_route rld_routes[];
extern const size_t rld_nroutes;

typedef struct rld_http_config {
    const char *address; /* IPv4 or IPv6 literal */
    int port;            /* 0: any free port */
    int threads;         /* worker threads (1 to RLD_MAX_WORKERS) */
    unsigned max_connections;    /* open at once; past it a new one gets 503 and is closed (0:
                                    no limit) */
    unsigned connection_timeout; /* seconds idle before a connection is closed (0: 30) */
    const char *admin_token;   /* NULL: admin routes are open (unless admin_closed) */
    int admin_closed; /* 1: admin routes answer 403, whatever the request carries (off loopback
                         without a token: app/auth.h's rld_auth_admin_closed) */
    const char *acquire_token; /* NULL: RLD_ACQUIRE routes are open */
    const char *metrics_token; /* NULL: RLD_METRICS routes are open */
    const char *tls_cert_pem;  /* both set: HTTPS only, with this certificate and key (PEM */
    const char *tls_key_pem;   /* text that outlives the server); both NULL: plain HTTP */
    int libmicrohttpd; /* 1: plain HTTP through libmicrohttpd too (the server it replaced,
                          kept for comparisons) */
    const rld_route *routes;
    size_t nroutes;
    void *app; /* handed to handlers */
    /* Handlers run holding it for reading, so that whoever holds it for writing (a reload)
     * sees no request in flight; NULL: no gate. */
    pthread_rwlock_t *gate;
    /* Called for each answer as it is queued (before it is sent) with the route index
     * (nroutes for an unknown path), the status and the time since the request's headers
     * arrived. May be NULL. */
    void (*on_done)(void *app, size_t route, int status, rl_ns duration);
    int access_log; /* one access line per request (log.h), written as its answer is queued */
} rld_http_config;

typedef struct rld_http rld_http;

/* Binds and starts serving. On failure returns NULL with the reason in err. */
rld_http *rld_http_start(const rld_http_config *cfg, rl_err *err);
/* The port bound (useful with port 0). */
int rld_http_port(const rld_http *h);
/* Stops gracefully: stops accepting, lets requests in flight finish (answers carry
 * "Connection: close" from now on), waits up to drain_ms for them, then closes every
 * connection and frees h. Returns the number of requests still in flight when it gave up. */
unsigned rld_http_stop(rld_http *h, unsigned drain_ms);
/* 1 once rld_http_stop has begun (the handlers' view, for /healthz). */
int rld_http_stopping(const rld_http *h);

/* ---- for handlers ------------------------------------------------------------------------ */

/* The body, NUL-terminated and writable up to len (inclusive of the NUL); "" when none. */
char *rld_req_body(rld_req *r, size_t *len);
/* What follows a prefix route's path ("bob" for /quota/bob), URL-decoded; "" otherwise. */
const char *rld_req_tail(const rld_req *r);
/* The per-request output buffer, empty at the start of the handler. */
rld_buf *rld_req_out(rld_req *r);
/* The http layer the request came through. */
rld_http *rld_req_http(rld_req *r);
/* 1 when the request's access line will be written (worth calling rld_req_note for). */
int rld_req_access_logged(const rld_req *r);
/* For the access line of a denial: the rule that blocked ("user: free") and its key (keylen
 * bytes). Both are borrowed until the reply is queued. */
void rld_req_note(rld_req *r, const char *blocked_by, const char *key, size_t keylen);
/* Calls fn with each request header's name and value (lengths given, both NUL-terminated,
 * borrowed for the request's life) in the order received, until fn returns nonzero; returns
 * that value, or 0 when fn saw every header. */
typedef int (*rld_header_fn)(void *ctx, const char *name, size_t nl, const char *value,
                             size_t vl);
int rld_req_each_header(rld_req *r, rld_header_fn fn, void *ctx);
/* The value of a query-string argument ("403" for ?deny_status=403), URL-decoded, borrowed
 * for the request's life; NULL when absent ("" when given without a value). */
const char *rld_req_query(rld_req *r, const char *name);

typedef struct rld_header {
    const char *name;
    const char *value;
} rld_header;

/* Sends the output buffer as the body with a content type (NULL: no Content-Type, for an
 * empty body) and extra headers. */
void rld_reply(rld_req *r, int status, const char *ctype, const rld_header *h, size_t nh);
/* Sends the output buffer as JSON. */
void rld_reply_json(rld_req *r, int status);
/* Sends {"error": "<message>"}; returns -1 so that helpers can "return rld_reply_error(...)". */
int rld_reply_error(rld_req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same with extra headers. */
int rld_reply_error_with(rld_req *r, int status, const rld_header *h, size_t nh,
                         const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Sends a malloc'd JSON text (taken over, freed by libmicrohttpd); NULL answers 500. */
void rld_reply_text(rld_req *r, int status, const char *ctype, char *text);

#endif
