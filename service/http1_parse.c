/*
 * http1_parse.c - see http1_parse.h.
 */
#include <string.h>

#include "http1_parse.h"

size_t rld_h1_skip_empty(const char *buf, size_t len)
{
    size_t i = 0;
    while (i < len && (buf[i] == '\r' || buf[i] == '\n'))
        i++;
    return i;
}

size_t rld_h1_head_end(const char *buf, size_t len, size_t *scan)
{
    size_t i = *scan;
    while (i < len) {
        const char *lf = memchr(buf + i, '\n', len - i);
        if (!lf)
            break;
        size_t at = (size_t)(lf - buf);
        /* a blank line: LF right after the previous LF, or after a CR that follows one */
        if (at > 0 &&
            (buf[at - 1] == '\n' || (buf[at - 1] == '\r' && at > 1 && buf[at - 2] == '\n')))
            return at + 1;
        i = at + 1;
    }
    *scan = i; /* the start of the line not ended yet: the blank-line test looks back from LF */
    return 0;
}

int rld_h1_head_too_long(const char *buf, size_t len, const char **error)
{
    size_t line = len < RLD_H1_MAX_LINE ? len : RLD_H1_MAX_LINE;
    if (len >= RLD_H1_MAX_LINE && !memchr(buf, '\n', line)) {
        *error = "request line: longer than 8192 bytes";
        return 414;
    }
    if (len >= RLD_H1_MAX_HEAD) {
        *error = "headers: longer than 16384 bytes in all";
        return 431;
    }
    return 0;
}

/* ---- characters ------------------------------------------------------------------------- */

/* tchar of RFC 9110, 5.6.2: what a method and a field name are made of */
static int is_tchar(unsigned char c)
{
    static const char extra[] = "!#$%&'*+-.^_`|~";
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
           (c && memchr(extra, c, sizeof extra - 1));
}

static int is_ctl(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Case-insensitive comparison of n bytes with a lowercase literal. */
static int ieq(const char *s, size_t n, const char *lit)
{
    if (strlen(lit) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((s[i] >= 'A' && s[i] <= 'Z' ? s[i] | 0x20 : s[i]) != lit[i])
            return 0;
    return 1;
}

/* Decodes %HH in place over s[0, n) and NUL-terminates; a '%' not followed by two hex digits
 * stays as it is. Returns the new length, or -1 when a %00 would cut the text short. */
static long pct_decode(char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < n && (hi = hexval((unsigned char)s[i + 1])) >= 0 &&
            (lo = hexval((unsigned char)s[i + 2])) >= 0) {
            if (!hi && !lo)
                return -1;
            s[o++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            s[o++] = s[i];
        }
    }
    s[o] = '\0';
    return (long)o;
}

/* ---- the request line ------------------------------------------------------------------- */

static int fail(rld_h1_req *req, int status, const char *error)
{
    req->error = error;
    return status;
}

/* The query string s[0, n) into req->args, split and decoded in place. */
static int parse_query(rld_h1_req *req, char *s, size_t n)
{
    size_t i = 0;
    req->nargs = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] != '&')
            j++;
        if (j > i) {
            if (req->nargs == RLD_H1_MAX_ARGS)
                return fail(req, 400, "query: more than 32 arguments");
            char *eq = memchr(s + i, '=', j - i);
            rld_h1_field *a = &req->args[req->nargs++];
            size_t nl = eq ? (size_t)(eq - (s + i)) : j - i;
            long dn = pct_decode(s + i, nl);
            long dv = eq ? pct_decode(eq + 1, j - i - nl - 1) : 0;
            if (dn < 0 || dv < 0)
                return fail(req, 400, "query: %00 is not allowed");
            a->name = s + i;
            a->nl = (size_t)dn;
            a->value = eq ? eq + 1 : "";
            a->vl = (size_t)dv;
        }
        s[j < n ? j : n] = '\0'; /* the '&' (or the byte after the target, a space) */
        i = j + 1;
    }
    return 0;
}

/* "METHOD SP target SP HTTP/1.x" in line[0, n), the line ending excluded. */
static int parse_request_line(rld_h1_req *req, char *line, size_t n)
{
    size_t i = 0;
    if (n + 2 > RLD_H1_MAX_LINE)
        return fail(req, 414, "request line: longer than 8192 bytes");
    while (i < n && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0 || i == n || line[i] != ' ')
        return fail(req, 400, "request line: expected \"METHOD /path HTTP/1.1\"");
    line[i] = '\0';
    req->method = line;
    char *t = line + i + 1, *end = line + n;
    char *sp = memchr(t, ' ', (size_t)(end - t));
    if (!sp || sp == t)
        return fail(req, 400, "request line: expected \"METHOD /path HTTP/1.1\"");
    for (char *p = t; p < sp; p++)
        if (is_ctl((unsigned char)*p))
            return fail(req, 400, "request line: the target has a control character");
    const char *v = sp + 1;
    size_t vl = (size_t)(end - v);
    if (vl == 8 && memcmp(v, "HTTP/1.", 7) == 0 && (v[7] == '0' || v[7] == '1'))
        req->minor = v[7] - '0';
    else if (vl == 8 && memcmp(v, "HTTP/", 5) == 0 && v[5] >= '0' && v[5] <= '9' && v[6] == '.' &&
             v[7] >= '0' && v[7] <= '9')
        return fail(req, 505, "version: only HTTP/1.0 and HTTP/1.1 are served here");
    else
        return fail(req, 400, "request line: expected \"METHOD /path HTTP/1.1\"");
    char *q = memchr(t, '?', (size_t)(sp - t));
    size_t pl = (size_t)((q ? q : sp) - t);
    req->nargs = 0;
    if (q) {
        int rc = parse_query(req, q + 1, (size_t)(sp - q - 1));
        if (rc)
            return rc;
    }
    if (pct_decode(t, pl) < 0)
        return fail(req, 400, "path: %00 is not allowed");
    req->path = t;
    return 0;
}

/* ---- header fields ---------------------------------------------------------------------- */

/* Notes what the server itself reads of a field: framing, persistence, Expect, Authorization. */
static int note_field(rld_h1_req *req, const rld_h1_field *f, int *host)
{
    const char *v = f->value;
    if (ieq(f->name, f->nl, "content-length")) {
        int64_t n = 0;
        if (f->vl == 0 || f->vl > 18)
            return fail(req, 400, "Content-Length: must be a number of bytes");
        for (size_t i = 0; i < f->vl; i++) {
            if (v[i] < '0' || v[i] > '9')
                return fail(req, 400, "Content-Length: must be a number of bytes");
            n = n * 10 + (v[i] - '0');
        }
        if (req->content_length >= 0 && req->content_length != n)
            return fail(req, 400, "Content-Length: given twice with different values");
        req->content_length = n;
    } else if (ieq(f->name, f->nl, "transfer-encoding")) {
        if (!ieq(v, f->vl, "chunked") || req->chunked)
            return fail(req, 501, "Transfer-Encoding: only chunked is supported");
        req->chunked = 1;
    } else if (ieq(f->name, f->nl, "connection")) {
        for (size_t i = 0; i < f->vl;) {
            size_t j = i;
            while (j < f->vl && v[j] != ',')
                j++;
            size_t a = i, b = j;
            while (a < b && (v[a] == ' ' || v[a] == '\t'))
                a++;
            while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
                b--;
            if (ieq(v + a, b - a, "close"))
                req->keep_alive = 0;
            else if (ieq(v + a, b - a, "keep-alive") && req->minor == 0)
                req->keep_alive = 1;
            i = j + 1;
        }
    } else if (ieq(f->name, f->nl, "expect")) {
        req->expect_continue = ieq(v, f->vl, "100-continue");
    } else if (ieq(f->name, f->nl, "authorization")) {
        req->authorization = v;
    } else if (ieq(f->name, f->nl, "host")) {
        *host = 1;
    }
    return 0;
}

/* One "name: value" line[0, n), the line ending excluded, into req->h. */
static int parse_field(rld_h1_req *req, char *line, size_t n, int *host)
{
    size_t i = 0;
    if (line[0] == ' ' || line[0] == '\t')
        return fail(req, 400, "headers: a field folded over lines");
    while (i < n && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0 || i == n || line[i] != ':')
        return fail(req, 400, "headers: expected \"Name: value\"");
    if (req->nh == RLD_H1_MAX_HEADERS)
        return fail(req, 431, "headers: more than 100 fields");
    line[i] = '\0';
    size_t a = i + 1, b = n;
    while (a < b && (line[a] == ' ' || line[a] == '\t'))
        a++;
    while (b > a && (line[b - 1] == ' ' || line[b - 1] == '\t'))
        b--;
    for (size_t k = a; k < b; k++)
        if (is_ctl((unsigned char)line[k]) && line[k] != '\t')
            return fail(req, 400, "headers: a value has a control character");
    line[b] = '\0';
    rld_h1_field *f = &req->h[req->nh++];
    *f = (rld_h1_field){line, line + a, i, b - a};
    return note_field(req, f, host);
}

int rld_h1_parse_head(char *buf, size_t len, rld_h1_req *req)
{
    int host = 0, rc;
    req->nh = 0;
    req->nargs = 0;
    req->content_length = -1;
    req->chunked = req->expect_continue = 0;
    req->authorization = NULL;
    req->error = NULL;
    if (len > RLD_H1_MAX_HEAD)
        return fail(req, 431, "headers: longer than 16384 bytes in all");
    for (size_t i = 0, first = 1; i < len; first = 0) {
        char *lf = memchr(buf + i, '\n', len - i);
        if (!lf)
            return fail(req, 400, "headers: the head does not end with a blank line");
        size_t end = (size_t)(lf - buf), n = end - i;
        if (n && buf[end - 1] == '\r')
            n--;
        if (memchr(buf + i, '\r', n) || memchr(buf + i, '\0', n))
            return fail(req, 400, "headers: a stray CR or NUL byte");
        if (first) {
            if ((rc = parse_request_line(req, buf + i, n)) != 0)
                return rc;
            req->keep_alive = req->minor == 1;
        } else if (n == 0) {
            break;
        } else if ((rc = parse_field(req, buf + i, n, &host)) != 0) {
            return rc;
        }
        i = end + 1;
    }
    if (!req->path)
        return fail(req, 400, "request line: expected \"METHOD /path HTTP/1.1\"");
    if (req->chunked && req->content_length >= 0)
        return fail(req, 400, "Content-Length: not allowed with Transfer-Encoding");
    if (req->minor == 1 && !host)
        return fail(req, 400, "Host: an HTTP/1.1 request must have one");
    return 0;
}

/* ---- chunked bodies --------------------------------------------------------------------- */

enum { C_SIZE, C_SIZE_WS, C_EXT, C_SIZE_LF, C_DATA, C_DATA_CR, C_DATA_LF, C_TRAILER, C_LINE,
       C_LINE_LF, C_END_LF };

/* The state after a byte that follows a chunk's size (whitespace, an extension, the end). */
static int after_size(unsigned char b)
{
    return b == ' ' || b == '\t' ? C_SIZE_WS
           : b == ';'            ? C_EXT
           : b == '\r'           ? C_SIZE_LF
           : b == '\n'           ? C_DATA
                                 : -1;
}

/* One byte of the framing (anything but chunk data). Returns 1 at the body's end, 0 to go on,
 * -1 when it is malformed. */
static int chunk_byte(rld_h1_chunked *c, unsigned char b)
{
    int h;
    switch (c->state) {
    case C_SIZE:
        if ((h = hexval(b)) >= 0) {
            if (++c->digits > 15)
                return -1;
            c->left = c->left << 4 | (uint64_t)h;
            return 0;
        }
        if (!c->digits)
            return -1;
        c->state = after_size(b);
        break;
    case C_SIZE_WS:
        c->state = after_size(b);
        break;
    case C_EXT:
        c->state = b == '\n' ? C_DATA : C_EXT;
        break;
    case C_SIZE_LF:
        c->state = b == '\n' ? C_DATA : -1;
        break;
    case C_DATA_CR:
        c->state = b == '\r' ? C_DATA_LF : b == '\n' ? C_SIZE : -1;
        break;
    case C_DATA_LF:
        c->state = b == '\n' ? C_SIZE : -1;
        break;
    case C_TRAILER: /* the start of a trailer line, or of the blank line that ends the body */
        c->state = b == '\r' ? C_END_LF : b == '\n' ? -2 : C_LINE;
        break;
    case C_LINE:
        c->state = b == '\n' ? C_TRAILER : C_LINE;
        break;
    case C_END_LF:
        c->state = b == '\n' ? -2 : -1;
        break;
    default:
        return -1;
    }
    if (c->state == -2)
        return 1;
    if (c->state == -1)
        return -1;
    if (c->state == C_DATA) {
        c->digits = 0;
        if (c->left == 0)
            c->state = C_TRAILER; /* the last chunk */
    } else if (c->state == C_SIZE) {
        c->left = 0;
        c->digits = 0;
    }
    return 0;
}

int rld_h1_unchunk(rld_h1_chunked *c, char *buf, size_t len, size_t *used, size_t *out)
{
    size_t i = 0, o = 0;
    while (i < len) {
        if (c->state == C_DATA) {
            size_t n = len - i < c->left ? len - i : (size_t)c->left;
            memmove(buf + o, buf + i, n);
            o += n;
            i += n;
            c->left -= n;
            if (c->left == 0)
                c->state = C_DATA_CR;
            continue;
        }
        int rc = chunk_byte(c, (unsigned char)buf[i++]);
        if (rc) {
            *used = i;
            *out = o;
            return rc;
        }
    }
    *used = i;
    *out = o;
    return 0;
}
