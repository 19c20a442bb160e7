/*
 * buf.c - see buf.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"

void rld_buf_init(rld_buf *b, char *storage, size_t cap)
{
    b->inl = cap ? storage : NULL;
    b->inlcap = b->inl ? cap : 0;
    b->p = b->inl;
    b->cap = b->inlcap;
    b->len = 0;
    b->oom = 0;
}

int rld_buf_on_heap(const rld_buf *b)
{
    return b->p && b->p != b->inl;
}

void rld_buf_reset(rld_buf *b)
{
    if (rld_buf_on_heap(b))
        free(b->p);
    rld_buf_init(b, b->inl, b->inlcap);
}

int rld__buf_grow(rld_buf *b, size_t n)
{
    if (b->oom)
        return -1;
    if (b->len + n + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *p = rld_buf_on_heap(b) ? realloc(b->p, cap) : malloc(cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    if (!rld_buf_on_heap(b) && b->len)
        memcpy(p, b->p, b->len);
    b->p = p;
    b->cap = cap;
    return 0;
}

char *rld_buf_steal(rld_buf *b)
{
    char *p;
    if (b->oom)
        return NULL;
    if (rld_buf_on_heap(b)) {
        p = b->p;
        p[b->len] = '\0';
        b->p = NULL;
    } else if ((p = malloc(b->len + 1)) != NULL) {
        if (b->len)
            memcpy(p, b->p, b->len);
        p[b->len] = '\0';
    }
    rld_buf_init(b, b->inl, b->inlcap);
    return p;
}

const char *rld_buf_cstr(rld_buf *b)
{
    if (rld_buf_reserve(b, 0) != 0)
        return "";
    b->p[b->len] = '\0';
    return b->p;
}

void rld_buf_vprintf(rld_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0 || rld_buf_reserve(b, (size_t)n) != 0)
        return;
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void rld_buf_printf(rld_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rld_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

/* One row per 16 bytes from 0x00 to 0xff. */
const char rld_text_class[257] = "jjjjjjjjjjjjjjjj" /* 00 */
                                 "jjjjjjjjjjjjjjjj" /* 10 */
                                 "..j............." /* 20: '"' */
                                 "................" /* 30 */
                                 "................" /* 40 */
                                 "............j..." /* 50: '\\' */
                                 "................" /* 60 */
                                 "...............s" /* 70: DEL */
                                 "ssssssssssssssss" /* 80 */
                                 "ssssssssssssssss" /* 90 */
                                 "ssssssssssssssss" /* a0 */
                                 "ssssssssssssssss" /* b0 */
                                 "ssssssssssssssss" /* c0 */
                                 "ssssssssssssssss" /* d0 */
                                 "ssssssssssssssss" /* e0 */
                                 "ssssssssssssssss" /* f0 */;

/* The escape of a byte that a JSON string cannot hold as it is, at o; returns the end. */
static char *json_escape(char *o, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";
    *o++ = '\\';
    switch (c) {
    case '"':
    case '\\':
        *o++ = (char)c;
        break;
    case '\n':
        *o++ = 'n';
        break;
    case '\r':
        *o++ = 'r';
        break;
    case '\t':
        *o++ = 't';
        break;
    default:
        *o++ = 'u';
        *o++ = '0';
        *o++ = '0';
        *o++ = hex[c >> 4];
        *o++ = hex[c & 15];
    }
    return o;
}

char *rld_put_json_str(char *o, const char *s, size_t n)
{
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (rld_text_class[c] != 'j')
            *o++ = (char)c; /* byte by byte: the strings are short (names, keys) */
        else
            o = json_escape(o, c);
    }
    *o++ = '"';
    return o;
}

void rld_buf_json_str(rld_buf *b, const char *s, size_t n)
{
    /* worst case every byte becomes \u00XX */
    if (rld_buf_reserve(b, RLD_JSON_STR_MAX(n)) != 0)
        return;
    b->len = (size_t)(rld_put_json_str(b->p + b->len, s, n) - b->p);
}

size_t rld_dec_len(uint64_t v)
{
    size_t n = 1;
    for (; v >= 10000; v /= 10000)
        n += 4;
    return n + (v >= 10) + (v >= 100) + (v >= 1000);
}

static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930"
                            "31323334353637383940414243444546474849505152535455565758596061"
                            "62636465666768697071727374757677787980818283848586878889909192"
                            "93949596979899";

/* Writes v in decimal at out, two digits at a time from the end; returns the length. */
static size_t put_u64(char *out, uint64_t v)
{
    if (v < 10) { /* most header values: t=0, t=1, w=1 */
        out[0] = (char)('0' + v);
        return 1;
    }
    size_t n = rld_dec_len(v), i = n;
    for (; v >= 100; v /= 100) {
        i -= 2;
        memcpy(out + i, pairs + (v % 100) * 2, 2);
    }
    if (v >= 10)
        memcpy(out + i - 2, pairs + v * 2, 2);
    else
        out[i - 1] = (char)('0' + v);
    return n;
}

/* Writes frac (1 to 10^digits - 1) as `digits` decimals without the trailing zeros; returns
 * the length. The zeros go first, by hundreds, so that only the digits written are divided. */
static size_t put_frac(char *out, uint64_t frac, int digits)
{
    for (; frac % 100 == 0; frac /= 100)
        digits -= 2;
    if (frac % 10 == 0) {
        frac /= 10;
        digits--;
    }
    size_t n = (size_t)digits;
    char *p = out + n;
    for (; digits >= 2; digits -= 2, frac /= 100) {
        p -= 2;
        memcpy(p, pairs + (frac % 100) * 2, 2);
    }
    if (digits)
        p[-1] = (char)('0' + frac);
    return n;
}

/* v / one with `digits` decimals, trailing zeros removed; inlined into its two users so that
 * one is a constant there: a division by a constant is a multiplication, by a variable a slow
 * instruction. */
static inline __attribute__((always_inline)) size_t fmt_fixed(char *out, int64_t v, uint64_t one,
                                                              int digits)
{
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    uint64_t whole = mag / one, frac = mag % one;
    size_t n = 0;
    if (v < 0)
        out[n++] = '-';
    n += put_u64(out + n, whole);
    if (frac) {
        out[n++] = '.';
        n += put_frac(out + n, frac, digits);
    }
    out[n] = '\0';
    return n;
}

size_t rld_fmt_fp(char *out, rl_fp v)
{
    return fmt_fixed(out, v, (uint64_t)RL_FP_ONE, 6);
}

size_t rld_fmt_seconds(char *out, rl_ns v)
{
    return fmt_fixed(out, v, (uint64_t)RL_NS_PER_SEC, 9);
}

size_t rld_fmt_i64(char *out, int64_t v)
{
    size_t n = 0;
    if (v < 0)
        out[n++] = '-';
    return n + put_u64(out + n, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
}

void rld_buf_i64(rld_buf *b, int64_t v)
{
    if (rld_buf_reserve(b, 21) != 0)
        return;
    b->len += rld_fmt_i64(b->p + b->len, v);
}

void rld_buf_fp(rld_buf *b, rl_fp v)
{
    if (rld_buf_reserve(b, 32) != 0)
        return;
    b->len += rld_fmt_fp(b->p + b->len, v);
}

void rld_buf_rfc3339(rld_buf *b, rl_ns t)
{
    time_t s = (time_t)(t / RL_NS_PER_SEC);
    struct tm tm;
    char text[40];
    if (!gmtime_r(&s, &tm) || !strftime(text, sizeof text, "\"%Y-%m-%dT%H:%M:%SZ\"", &tm))
        snprintf(text, sizeof text, "null");
    rld_buf_puts(b, text);
}

void rld_buf_seconds(rld_buf *b, rl_ns v)
{
    if (rld_buf_reserve(b, 32) != 0)
        return;
    b->len += rld_fmt_seconds(b->p + b->len, v);
}
