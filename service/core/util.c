/*
 * util.c - errors, hashing, number formatting and conversions for the core.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

const char *rl_strerror(int code)
{
    switch (code) {
    case RL_OK:
        return "success";
#define RL__ERR_CASE(name, value, msg)                                                             \
    case value:                                                                                    \
        return msg;
        RL_ERRORS(RL__ERR_CASE)
#undef RL__ERR_CASE
    default:
        return "unknown error";
    }
}

int rl_errf(rl_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void rl__err_prefix(rl_err *err, const char *fmt, ...)
{
    char prefix[256], rest[sizeof err->msg];
    va_list ap;

    if (!err)
        return;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(rest, err->msg, sizeof rest);
    rest[sizeof rest - 1] = '\0';
    /* the message is cut at the buffer's end when the two do not fit */
    size_t pl = strlen(prefix), rl = strlen(rest);
    if (pl > sizeof err->msg - 1)
        pl = sizeof err->msg - 1;
    if (rl > sizeof err->msg - 1 - pl)
        rl = sizeof err->msg - 1 - pl;
    memcpy(err->msg, prefix, pl);
    memcpy(err->msg + pl, rest, rl);
    err->msg[pl + rl] = '\0';
}

char *rl__strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* The hash multiplies 64-bit words into 128 bits and folds the halves, 16 bytes a round. */
static inline uint64_t mix(uint64_t a, uint64_t b)
{
    rl__u128 r = (rl__u128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t read64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t read32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Keys are mostly short: up to 16 bytes are read as loads from both ends that overlap in the
 * middle (no byte-by-byte tail); the length, mixed in first, tells the overlaps apart. */
uint64_t rl__hash(const void *data, size_t n, uint64_t seed)
{
    const uint64_t k0 = 0xa0761d6478bd642full, k1 = 0xe7037ed1a0b428dbull,
                   k2 = 0x8ebc6af09c88c6e3ull;
    const unsigned char *p = data;
    uint64_t h = seed ^ mix(seed ^ k0, (uint64_t)n ^ k1);
    uint64_t a, b;

    if (n <= 16) {
        if (n >= 8) {
            a = read64(p);
            b = read64(p + n - 8);
        } else if (n >= 4) {
            a = read32(p);
            b = read32(p + n - 4);
        } else {
            a = n ? ((uint64_t)p[0] << 16) | ((uint64_t)p[n >> 1] << 8) | p[n - 1] : 0;
            b = 0;
        }
    } else {
        size_t left = n;
        while (left > 16) {
            h = mix(read64(p) ^ k1, read64(p + 8) ^ h);
            p += 16;
            left -= 16;
        }
        a = read64(p + left - 16);
        b = read64(p + left - 8);
    }
    return mix(k2 ^ (uint64_t)n, mix(a ^ k1, b ^ h));
}

uint64_t rl_random64(void)
{
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r = read(fd, &v, sizeof v);
        close(fd);
        if (r == (ssize_t)sizeof v)
            return v;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return mix((uint64_t)ts.tv_nsec ^ 0x9e3779b97f4a7c15ull, (uint64_t)ts.tv_sec ^ (uint64_t)getpid());
}

/* Writes whole.frac with frac of 'digits' decimals, trailing zeros removed. */
static void fmt_fixed(char *buf, size_t len, int64_t v, int64_t one, int digits)
{
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    uint64_t whole = mag / (uint64_t)one, frac = mag % (uint64_t)one;
    if (frac == 0) {
        snprintf(buf, len, "%s%llu", v < 0 ? "-" : "", (unsigned long long)whole);
        return;
    }
    char fr[24];
    snprintf(fr, sizeof fr, "%0*llu", digits, (unsigned long long)frac);
    for (int i = digits - 1; i > 0 && fr[i] == '0'; i--)
        fr[i] = '\0';
    snprintf(buf, len, "%s%llu.%s", v < 0 ? "-" : "", (unsigned long long)whole, fr);
}

void rl_fmt_fp(char *buf, size_t len, rl_fp v)
{
    fmt_fixed(buf, len, v, RL_FP_ONE, 6);
}

void rl_fmt_ns(char *buf, size_t len, rl_ns v)
{
    fmt_fixed(buf, len, v, RL_NS_PER_SEC, 9);
}

rl_ns rl_ns_from_seconds(double s)
{
    /* 9.2e9 s keeps s * 1e9 inside int64 with room to spare. */
    if (!isfinite(s) || s < 0 || s > 9.2e9)
        return -1;
    return (rl_ns)llround(s * 1e9);
}

rl_fp rl_fp_from_double(double v)
{
    if (!isfinite(v) || v < 0 || v > 1e12)
        return -1;
    return (rl_fp)llround(v * 1e6);
}

double rl_fp_to_double(rl_fp v)
{
    return (double)(v / RL_FP_ONE) + (double)(v % RL_FP_ONE) / 1e6;
}

double rl_ns_to_seconds(rl_ns v)
{
    return (double)(v / RL_NS_PER_SEC) + (double)(v % RL_NS_PER_SEC) / 1e9;
}
