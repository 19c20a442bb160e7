/*
 * buf.h - a growable output buffer that starts in caller-supplied storage, with appenders for
 * JSON strings and the core's exact decimals. Used to write responses without a JSON tree.
 *
 * A buffer never fails loudly: when memory runs out it stops growing and sets oom, which the
 * caller checks once before sending. Text is always NUL-terminated after rld_buf_cstr().
 */
#ifndef RLD_APP_BUF_H
#define RLD_APP_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ratelimit.h"

typedef struct rld_buf {
    char *p;
    size_t len, cap;
    char *inl;     /* the caller's storage, or NULL */
    size_t inlcap; /* its size */
    int oom;   /* an append did not fit and memory ran out */
} rld_buf;

/* Starts an empty buffer over storage (cap bytes, may be NULL with cap 0: heap only). */
void rld_buf_init(rld_buf *b, char *storage, size_t cap);
/* Frees what the buffer allocated and empties it (the storage is kept for reuse). */
void rld_buf_reset(rld_buf *b);
/* rld_buf_reserve's slow path: grows the buffer. */
int rld__buf_grow(rld_buf *b, size_t n);
/* Makes room for n more bytes (plus a NUL). Returns 0, or -1 (and sets oom) when out of memory.
 * Inline: the appenders below run a few dozen times per response. */
static inline int rld_buf_reserve(rld_buf *b, size_t n)
{
    return !b->oom && b->len + n + 1 <= b->cap ? 0 : rld__buf_grow(b, n);
}
/* 1 when the text lives in allocated memory rather than in the caller's storage. */
int rld_buf_on_heap(const rld_buf *b);
/* Hands over the allocated text (malloc'd, NUL-terminated, the caller frees it) and empties
 * the buffer; copies from the storage when the text is there. NULL when out of memory. */
char *rld_buf_steal(rld_buf *b);
/* The text so far, NUL-terminated. */
const char *rld_buf_cstr(rld_buf *b);

/* Writes the string literal s at the cursor p (char *, room made before) and moves p past it. */
#define RLD_PUT_LIT(p, s) (memcpy((p), (s), sizeof(s) - 1), (p) += sizeof(s) - 1)

static inline void rld_buf_put(rld_buf *b, const char *s, size_t n)
{
    if (rld_buf_reserve(b, n) != 0)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static inline void rld_buf_puts(rld_buf *b, const char *s)
{
    rld_buf_put(b, s, strlen(s));
}

static inline void rld_buf_putc(rld_buf *b, char c)
{
    if (rld_buf_reserve(b, 1) != 0)
        return;
    b->p[b->len++] = c;
}
void rld_buf_printf(rld_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rld_buf_vprintf(rld_buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* A JSON string literal with its quotes; escapes '"', '\\' and control characters. Bytes of
 * 0x80 and above are copied as they are (the caller passes UTF-8). */
void rld_buf_json_str(rld_buf *b, const char *s, size_t n);
/* What a byte of text is, by its value: 'j' when a JSON string cannot hold it as it is (a
 * control character, '"', '\\'), 's' when only a structured-field string cannot (DEL and the
 * bytes from 0x80), '.' when both can. */
extern const char rld_text_class[257];
/* The most bytes rld_put_json_str writes for n bytes of text. */
#define RLD_JSON_STR_MAX(n) ((n) * 6 + 2)
/* rld_buf_json_str at o, which has room for RLD_JSON_STR_MAX(n) bytes; returns the end. */
char *rld_put_json_str(char *o, const char *s, size_t n);
/* A signed integer in decimal. */
void rld_buf_i64(rld_buf *b, int64_t v);
/* An amount as an exact short decimal, like rl_fmt_fp ("10", "0.4", "-3.25"). */
void rld_buf_fp(rld_buf *b, rl_fp v);
/* A duration in seconds as an exact short decimal, like rl_fmt_ns ("1", "0.000000001"). */
void rld_buf_seconds(rld_buf *b, rl_ns v);
/* A time (ns since the epoch) as a JSON string in RFC 3339 UTC, to the second
 * ("2026-12-01T00:00:00Z"). */
void rld_buf_rfc3339(rld_buf *b, rl_ns t);

/* Write an amount (the text of rl_fmt_fp: "10", "0.4", "-3.25") and a duration in seconds
 * (rl_fmt_ns's: "1", "0.000000001") as exact short decimals into out (at least 32 bytes),
 * NUL-terminated, without snprintf; return the length. */
size_t rld_fmt_fp(char *out, rl_fp v);
size_t rld_fmt_seconds(char *out, rl_ns v);
/* The number of decimal digits of v. */
size_t rld_dec_len(uint64_t v);
/* Writes v in decimal into out (at least 20 bytes; no NUL); returns the length. */
size_t rld_fmt_i64(char *out, int64_t v);

#endif
