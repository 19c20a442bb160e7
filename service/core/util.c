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
    return rl__mix((uint64_t)ts.tv_nsec ^ 0x9e3779b97f4a7c15ull,
                   (uint64_t)ts.tv_sec ^ (uint64_t)getpid());
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
