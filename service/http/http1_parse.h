/*
 * http1_parse.h - the HTTP/1.1 request parser of the plain HTTP server: a request's head (the
 * request line and the header fields, RFC 9112) parsed in place, and a chunked body decoded in
 * place. Pure functions over a buffer: no allocation, no I/O, so that they can be fuzzed.
 *
 *   "POST /quota/b%6Fb?x=1&flag HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}"
 *   rld_h1_head_end -> 66 (the head, blank line included); rld_h1_parse_head -> 0 with
 *   method "POST", path "/quota/bob", args {x: "1", flag: ""}, content_length 2, keep_alive 1.
 */
#ifndef RLD_HTTP_HTTP1_PARSE_H
#define RLD_HTTP_HTTP1_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define RLD_H1_MAX_LINE 8192     /* the request line, its line ending included */
#define RLD_H1_MAX_HEAD 16384    /* the request line and every header field */
#define RLD_H1_MAX_HEADERS 100   /* header fields */
#define RLD_H1_MAX_ARGS 32       /* query-string arguments */

typedef struct rld_h1_field {
    const char *name, *value; /* NUL-terminated, inside the parsed buffer */
    size_t nl, vl;
} rld_h1_field;

typedef struct rld_h1_req {
    const char *method; /* NUL-terminated, inside the buffer */
    const char *path;   /* the target's path, URL-decoded, without the query string */
    int minor;          /* HTTP/1.<minor>: 0 or 1 */
    unsigned nh;
    rld_h1_field h[RLD_H1_MAX_HEADERS];
    unsigned nargs;
    rld_h1_field args[RLD_H1_MAX_ARGS]; /* URL-decoded; value "" when given without one */
    int64_t content_length;             /* -1 when absent */
    int chunked;                        /* Transfer-Encoding: chunked */
    int keep_alive;      /* HTTP/1.1 without "Connection: close", or HTTP/1.0 with keep-alive */
    int expect_continue; /* Expect: 100-continue */
    const char *authorization; /* the Authorization field's value, NULL when absent */
    const char *error;         /* after a failed parse: what was wrong, naming the part */
} rld_h1_req;

/* The number of CR and LF bytes at the start of buf (empty lines before a request line, which
 * a server ignores: RFC 9112, 2.2). */
size_t rld_h1_skip_empty(const char *buf, size_t len);

/* Looks for the blank line that ends a head starting at buf. Returns the head's length, blank
 * line included, or 0 when it is not complete in len bytes. *scan is where to look from (0 at
 * first; updated so that bytes arriving one at a time are not looked at again). Lines end with
 * LF, CRLF preferred. */
size_t rld_h1_head_end(const char *buf, size_t len, size_t *scan);

/* For a head not complete in len bytes: 414 when its request line has no end within
 * RLD_H1_MAX_LINE bytes, 431 when len reached RLD_H1_MAX_HEAD, 0 while it may still complete
 * (*error is then untouched). */
int rld_h1_head_too_long(const char *buf, size_t len, const char **error);

/* Parses the head of len bytes (from rld_h1_head_end) in place: writes NULs after the method,
 * the path, names and values, and decodes the path and the arguments. Returns 0 with req
 * filled, or the status to answer (400, 414, 431, 501, 505) with req->error set; req's other
 * fields are then unspecified. Every pointer in req points into buf. */
int rld_h1_parse_head(char *buf, size_t len, rld_h1_req *req);

/* A chunked body's decoder (RFC 9112, 7.1); zero it to start. */
typedef struct rld_h1_chunked {
    int state;
    unsigned digits;
    uint64_t left; /* of the current chunk */
} rld_h1_chunked;

/* Decodes what of a chunked body is in buf[0, len): moves the data it carries to the front of
 * buf (*out bytes of it) and sets *used to the bytes consumed. Returns 1 when the body ended
 * (last chunk and trailer fields consumed; bytes after it are left), 0 when more is needed,
 * -1 on a malformed body (*used and *out are then unspecified). */
int rld_h1_unchunk(rld_h1_chunked *c, char *buf, size_t len, size_t *used, size_t *out);

#endif
