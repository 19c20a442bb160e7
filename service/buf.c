/*
 * buf.c - see buf.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void rld_buf_json_str(rld_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    /* worst case every byte becomes \u00XX */
    if (rld_buf_reserve(b, n * 6 + 2) != 0)
        return;
    char *o = b->p + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"':
            *o++ = '"';
            break;
        case '\\':
            *o++ = '\\';
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
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
}

size_t rld_dec_len(uint64_t v)
{
    size_t n = 1;
    for (; v >= 10000; v /= 10000)
        n += 4;
    return n + (v >= 10) + (v >= 100) + (v >= 1000);
}

/* Writes v in decimal at out, two digits at a time from the end; returns the length. */
static size_t put_u64(char *out, uint64_t v)
{
    static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930"
                                "31323334353637383940414243444546474849505152535455565758596061"
                                "62636465666768697071727374757677787980818283848586878889909192"
                                "93949596979899";
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

size_t rld_fmt_fixed(char *out, int64_t v, uint64_t one, int digits)
{
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    uint64_t whole = mag / one, frac = mag % one;
    size_t n = 0;
    if (v < 0)
        out[n++] = '-';
    n += put_u64(out + n, whole);
    if (frac) {
        char f[20];
        for (int i = digits - 1; i >= 0; i--) {
            f[i] = (char)('0' + frac % 10);
            frac /= 10;
        }
        int last = digits - 1;
        while (last > 0 && f[last] == '0')
            last--;
        out[n++] = '.';
        memcpy(out + n, f, (size_t)last + 1);
        n += (size_t)last + 1;
    }
    out[n] = '\0';
    return n;
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
    b->len += rld_fmt_fixed(b->p + b->len, v, (uint64_t)RL_FP_ONE, 6);
}

void rld_buf_seconds(rld_buf *b, rl_ns v)
{
    if (rld_buf_reserve(b, 32) != 0)
        return;
    b->len += rld_fmt_fixed(b->p + b->len, v, (uint64_t)RL_NS_PER_SEC, 9);
}
