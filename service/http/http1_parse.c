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

/* tchar of RFC 9110, 5.6.2, what a method and a field name are made of: DIGIT, ALPHA and
 * "!#$%&'*+-.^_`|~", one row per 16 bytes from 0x00 to 0xff. */
static const char tchars[257] = "0000000000000000" /* 00 */
                                "0000000000000000" /* 10 */
                                "0101111100110110" /* 20 */
                                "1111111111000000" /* 30 */
                                "0111111111111111" /* 40 */
                                "1111111111100011" /* 50 */
                                "1111111111111111" /* 60 */
                                "1111111111101010" /* 70 */
                                "0000000000000000" /* 80 */
                                "0000000000000000" /* 90 */
                                "0000000000000000" /* a0 */
                                "0000000000000000" /* b0 */
                                "0000000000000000" /* c0 */
                                "0000000000000000" /* d0 */
                                "0000000000000000" /* e0 */
                                "0000000000000000" /* f0 */;

static int is_tchar(unsigned char c)
{
    return tchars[c] == '1';
}

static int is_ctl(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

/* The length of the run of tchars at the start of s[0, n). */
static size_t tchar_run(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)s[i]))
        i++;
    return i;
}

/* 1 when s[0, n) holds a control character other than HTAB. Eight bytes at a time: a word
 * with none below 0x20 and no DEL has nothing to look at (both tests are exact for the word as
 * a whole: a borrow only spreads from a byte that is a match itself). */
static int has_ctl(const char *s, size_t n)
{
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w, del;
        memcpy(&w, s + i, 8);
        del = w ^ (ones * 0x7f);
        if ((((w - ones * 0x20) & ~w) | ((del - ones) & ~del)) & highs)
            for (size_t k = i; k < i + 8; k++)
                if (is_ctl((unsigned char)s[k]) && s[k] != '\t')
                    return 1;
    }
    for (; i < n; i++)
        if (is_ctl((unsigned char)s[i]) && s[i] != '\t')
            return 1;
    return 0;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Case-insensitive comparison of n bytes of tchars with a literal of lowercase letters and
 * '-': a tchar OR 0x20 is that literal's byte only when it is the byte or its capital. */
static int ieq(const char *s, size_t n, const char *lit)
{
    if (strlen(lit) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((s[i] | 0x20) != lit[i])
            return 0;
    return 1;
}

/* The same for any bytes (a value). */
static int ieq_any(const char *s, size_t n, const char *lit)
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
    if (!memchr(s, '%', n)) { /* nearly every path */
        s[n] = '\0';
        return (long)n;
    }
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

/* A line refused before anything was written into it: a CR or a NUL in it is what is
 * reported, whatever else is wrong (as if the line had been looked at for them first). Every
 * line that parses has neither, since each of its bytes is checked for what it may be. */
static int fail_line(rld_h1_req *req, const char *line, size_t n, int status, const char *error)
{
    if (memchr(line, '\r', n) || memchr(line, '\0', n))
        return fail(req, 400, "headers: a stray CR or NUL byte");
    return fail(req, status, error);
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

/* The version at v[0, vl): sets req->minor, or fails. */
static int parse_version(rld_h1_req *req, const char *line, size_t n, const char *v, size_t vl)
{
    if (vl == 8 && memcmp(v, "HTTP/1.", 7) == 0 && (v[7] == '0' || v[7] == '1')) {
        req->minor = v[7] - '0';
        return 0;
    }
    if (vl == 8 && memcmp(v, "HTTP/", 5) == 0 && v[5] >= '0' && v[5] <= '9' && v[6] == '.' &&
        v[7] >= '0' && v[7] <= '9')
        return fail_line(req, line, n, 505, "version: only HTTP/1.0 and HTTP/1.1 are served here");
    return fail_line(req, line, n, 400, "request line: expected \"METHOD /path HTTP/1.1\"");
}

/* "METHOD SP target SP HTTP/1.x" in line[0, n), the line ending excluded. */
static int parse_request_line(rld_h1_req *req, char *line, size_t n)
{
    static const char expected[] = "request line: expected \"METHOD /path HTTP/1.1\"";
    if (n + 2 > RLD_H1_MAX_LINE)
        return fail_line(req, line, n, 414, "request line: longer than 8192 bytes");
    size_t i = tchar_run(line, n);
    if (i == 0 || i == n || line[i] != ' ')
        return fail_line(req, line, n, 400, expected);
    char *t = line + i + 1, *end = line + n;
    char *sp = memchr(t, ' ', (size_t)(end - t));
    if (!sp || sp == t)
        return fail_line(req, line, n, 400, expected);
    if (has_ctl(t, (size_t)(sp - t)) || memchr(t, '\t', (size_t)(sp - t)))
        return fail_line(req, line, n, 400, "request line: the target has a control character");
    int rc = parse_version(req, line, n, sp + 1, (size_t)(end - sp - 1));
    if (rc)
        return rc;
    line[i] = '\0';
    req->method = line;
    char *q = memchr(t, '?', (size_t)(sp - t));
    size_t pl = (size_t)((q ? q : sp) - t);
    req->nargs = 0;
    if (q && (rc = parse_query(req, q + 1, (size_t)(sp - q - 1))) != 0)
        return rc;
    if (pct_decode(t, pl) < 0)
        return fail(req, 400, "path: %00 is not allowed");
    req->path = t;
    return 0;
}

/* ---- header fields ---------------------------------------------------------------------- */

static int content_length(rld_h1_req *req, const char *v, size_t vl)
{
    int64_t n = 0;
    if (vl == 0 || vl > 18)
        return fail(req, 400, "Content-Length: must be a number of bytes");
    for (size_t i = 0; i < vl; i++) {
        if (v[i] < '0' || v[i] > '9')
            return fail(req, 400, "Content-Length: must be a number of bytes");
        n = n * 10 + (v[i] - '0');
    }
    if (req->content_length >= 0 && req->content_length != n)
        return fail(req, 400, "Content-Length: given twice with different values");
    req->content_length = n;
    return 0;
}

/* The tokens of Connection: close, and keep-alive for HTTP/1.0. */
static void connection(rld_h1_req *req, const char *v, size_t vl)
{
    for (size_t i = 0; i < vl;) {
        size_t j = i;
        while (j < vl && v[j] != ',')
            j++;
        size_t a = i, b = j;
        while (a < b && (v[a] == ' ' || v[a] == '\t'))
            a++;
        while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
            b--;
        if (ieq_any(v + a, b - a, "close"))
            req->keep_alive = 0;
        else if (ieq_any(v + a, b - a, "keep-alive") && req->minor == 0)
            req->keep_alive = 1;
        i = j + 1;
    }
}

/* Notes what the server itself reads of a field: framing, persistence, Expect, Authorization.
 * The name's length picks the one name it may be. */
static int note_field(rld_h1_req *req, const rld_h1_field *f, int *host)
{
    const char *v = f->value;
    switch (f->nl) {
    case 4:
        *host |= ieq(f->name, 4, "host");
        break;
    case 6:
        if (ieq(f->name, 6, "expect"))
            req->expect_continue = ieq_any(v, f->vl, "100-continue");
        break;
    case 10:
        if (ieq(f->name, 10, "connection"))
            connection(req, v, f->vl);
        break;
    case 13:
        if (ieq(f->name, 13, "authorization"))
            req->authorization = v;
        break;
    case 14:
        if (ieq(f->name, 14, "content-length"))
            return content_length(req, v, f->vl);
        break;
    case 17:
        if (!ieq(f->name, 17, "transfer-encoding"))
            break;
        if (!ieq_any(v, f->vl, "chunked") || req->chunked)
            return fail(req, 501, "Transfer-Encoding: only chunked is supported");
        req->chunked = 1;
        break;
    }
    return 0;
}

/* One "name: value" line[0, n), the line ending excluded, into req->h. */
static int parse_field(rld_h1_req *req, char *line, size_t n, int *host)
{
    if (line[0] == ' ' || line[0] == '\t')
        return fail_line(req, line, n, 400, "headers: a field folded over lines");
    size_t i = tchar_run(line, n);
    if (i == 0 || i == n || line[i] != ':')
        return fail_line(req, line, n, 400, "headers: expected \"Name: value\"");
    if (req->nh == RLD_H1_MAX_HEADERS)
        return fail_line(req, line, n, 431, "headers: more than 100 fields");
    size_t a = i + 1, b = n;
    while (a < b && (line[a] == ' ' || line[a] == '\t'))
        a++;
    while (b > a && (line[b - 1] == ' ' || line[b - 1] == '\t'))
        b--;
    if (has_ctl(line + a, b - a))
        return fail_line(req, line, n, 400, "headers: a value has a control character");
    line[i] = '\0';
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
