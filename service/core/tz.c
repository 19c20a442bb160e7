/*
 * tz.c - see tz.h. The TZif layout is RFC 8536's: a header, a version 1 data block (skipped),
 * a second header and data block with 64-bit times (version 2 and later), then a footer
 * "\n<POSIX TZ string>\n" for the times after the last transition.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tz.h"

#define TZ_FILE_MAX (1 << 16) /* the largest zone file is under 4 KiB */
#define DAY 86400

/* A date of a POSIX TZ rule and the local time on it when the change happens. */
typedef struct tz_date {
    char kind; /* 'J': Jn, 1..365 without February 29; 'D': n, 0..365; 'M': Mm.w.d */
    int n, m, w, d;
    int64_t time; /* seconds after local midnight (may be negative or past 24 h) */
} tz_date;

struct rl_tz {
    size_t n;     /* transitions */
    int64_t *at;  /* their times, increasing */
    int32_t *off; /* the UT offset from each on */
    int32_t off0; /* before the first (local time type 0) */
    int footer;   /* the footer rule applies from the last transition on */
    int dst;      /* the footer has daylight saving time */
    int32_t std_off, dst_off;
    tz_date start, end; /* when daylight saving time starts and ends */
};

int64_t rl__days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

void rl__civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (unsigned)(doy - (153 * mp + 2) / 5 + 1);
    *m = (unsigned)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

unsigned rl__weekday(int64_t day)
{
    int64_t w = (day + 4) % 7; /* 1970-01-01 was a Thursday */
    return (unsigned)(w < 0 ? w + 7 : w);
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return q - ((a % b) != 0 && ((a < 0) != (b < 0)));
}

/* ---- the POSIX TZ string of the footer --------------------------------------------------- */

static int parse_name(const char **p)
{
    const char *s = *p;
    if (*s == '<') {
        const char *e = strchr(s, '>');
        if (!e || e - s < 4)
            return -1;
        *p = e + 1;
        return 0;
    }
    while ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z'))
        s++;
    if (s - *p < 3)
        return -1;
    *p = s;
    return 0;
}

static int parse_num(const char **p, int max, int *out)
{
    const char *s = *p;
    int v = 0;
    if (*s < '0' || *s > '9')
        return -1;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (*s++ - '0');
        if (v > max)
            return -1;
    }
    *p = s;
    *out = v;
    return 0;
}

/* [+-]hh[:mm[:ss]] in seconds, hours up to max_h. */
static int parse_hms(const char **p, int max_h, int64_t *out)
{
    int sign = 1, h, m = 0, sec = 0;
    if (**p == '+' || **p == '-')
        sign = *(*p)++ == '-' ? -1 : 1;
    if (parse_num(p, max_h, &h) != 0)
        return -1;
    if (**p == ':') {
        (*p)++;
        if (parse_num(p, 59, &m) != 0)
            return -1;
        if (**p == ':') {
            (*p)++;
            if (parse_num(p, 59, &sec) != 0)
                return -1;
        }
    }
    *out = sign * ((int64_t)h * 3600 + m * 60 + sec);
    return 0;
}

static int parse_date(const char **p, tz_date *d)
{
    memset(d, 0, sizeof *d);
    d->time = 7200;
    if (**p == 'J') {
        (*p)++;
        d->kind = 'J';
        if (parse_num(p, 365, &d->n) != 0 || d->n < 1)
            return -1;
    } else if (**p == 'M') {
        (*p)++;
        d->kind = 'M';
        if (parse_num(p, 12, &d->m) != 0 || d->m < 1 || *(*p)++ != '.' ||
            parse_num(p, 5, &d->w) != 0 || d->w < 1 || *(*p)++ != '.' ||
            parse_num(p, 6, &d->d) != 0)
            return -1;
    } else {
        d->kind = 'D';
        if (parse_num(p, 365, &d->n) != 0)
            return -1;
    }
    if (**p == '/') {
        (*p)++;
        if (parse_hms(p, 167, &d->time) != 0)
            return -1;
    }
    return 0;
}

static int parse_footer(rl_tz *tz, const char *s)
{
    int64_t off;
    if (parse_name(&s) != 0 || parse_hms(&s, 24, &off) != 0)
        return -1;
    tz->std_off = (int32_t)-off;
    tz->footer = 1;
    if (*s == '\0')
        return 0;
    if (parse_name(&s) != 0)
        return -1;
    tz->dst = 1;
    tz->dst_off = tz->std_off + 3600;
    if (*s != ',' && *s != '\0') {
        if (parse_hms(&s, 24, &off) != 0)
            return -1;
        tz->dst_off = (int32_t)-off;
    }
    if (*s == '\0') { /* POSIX leaves it to the implementation: the United States' rule */
        const char *us = ",M3.2.0,M11.1.0";
        s = us;
    }
    if (*s++ != ',' || parse_date(&s, &tz->start) != 0 || *s++ != ',' ||
        parse_date(&s, &tz->end) != 0 || *s != '\0')
        return -1;
    return 0;
}

static int is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* The date of rule date d in year y, in days since the epoch. */
static int64_t rule_day(const tz_date *d, int64_t y)
{
    int64_t jan1 = rl__days_from_civil(y, 1, 1);
    if (d->kind == 'J')
        return jan1 + d->n - 1 + (is_leap(y) && d->n >= 60);
    if (d->kind == 'D')
        return jan1 + d->n;
    int64_t first = rl__days_from_civil(y, (unsigned)d->m, 1);
    int64_t next = d->m == 12 ? rl__days_from_civil(y + 1, 1, 1)
                              : rl__days_from_civil(y, (unsigned)d->m + 1, 1);
    int64_t day = first + (d->d - (int)rl__weekday(first) + 7) % 7 + (int64_t)(d->w - 1) * 7;
    while (day >= next)
        day -= 7;
    return day;
}

/* The footer's offset at t, and the changes around it: [*start, *end) holds t. */
static int32_t footer_seg(const rl_tz *tz, int64_t t, int64_t *start, int64_t *end)
{
    *start = INT64_MIN;
    *end = INT64_MAX;
    if (!tz->dst)
        return tz->std_off;
    int64_t y;
    unsigned m, d;
    rl__civil_from_days(floor_div(t, DAY), &y, &m, &d);
    int64_t ev[6];
    int32_t to[6];
    for (int k = 0; k < 3; k++) {
        int64_t yy = y - 1 + k;
        ev[2 * k] = rule_day(&tz->start, yy) * DAY + tz->start.time - tz->std_off;
        to[2 * k] = tz->dst_off;
        ev[2 * k + 1] = rule_day(&tz->end, yy) * DAY + tz->end.time - tz->dst_off;
        to[2 * k + 1] = tz->std_off;
    }
    for (int i = 1; i < 6; i++) /* in time order (southern zones end before they start) */
        for (int j = i; j > 0 && ev[j - 1] > ev[j]; j--) {
            int64_t te = ev[j];
            int32_t tt = to[j];
            ev[j] = ev[j - 1];
            to[j] = to[j - 1];
            ev[j - 1] = te;
            to[j - 1] = tt;
        }
    int32_t off = to[5] == tz->dst_off ? tz->std_off : tz->dst_off; /* before the first */
    for (int i = 0; i < 6; i++) {
        if (ev[i] > t) {
            *end = ev[i];
            return off;
        }
        *start = ev[i];
        off = to[i];
    }
    return off;
}

/* The offset at t and the segment [*start, *end) around t during which it holds. */
static int32_t seg(const rl_tz *tz, int64_t t, int64_t *start, int64_t *end)
{
    size_t n = tz->n;
    if (n == 0 || t >= tz->at[n - 1]) {
        int64_t last = n ? tz->at[n - 1] : INT64_MIN;
        if (!tz->footer) {
            *start = last;
            *end = INT64_MAX;
            return n ? tz->off[n - 1] : tz->off0;
        }
        int32_t off = footer_seg(tz, t, start, end);
        if (*start < last)
            *start = last;
        return off;
    }
    if (t < tz->at[0]) {
        *start = INT64_MIN;
        *end = tz->at[0];
        return tz->off0;
    }
    size_t lo = 0, hi = n - 1; /* at[lo] <= t < at[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (tz->at[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    *start = tz->at[lo];
    *end = tz->at[hi];
    return tz->off[lo];
}

int64_t rl__tz_offset(const rl_tz *tz, int64_t t)
{
    int64_t s, e;
    return seg(tz, t, &s, &e);
}

int64_t rl__tz_midnight(const rl_tz *tz, int64_t day)
{
    int64_t local = day * DAY;
    /* every offset is within 30 hours, so before t the local time is before midnight; walk
     * the segments from there to the first instant whose local time reaches it */
    int64_t t = local - 30 * 3600;
    for (int i = 0; i < 64; i++) {
        int64_t s, e;
        int32_t off = seg(tz, t, &s, &e);
        int64_t c = local - off > t ? local - off : t;
        if (c < e)
            return c;
        t = e;
    }
    return t;
}

/* ---- TZif --------------------------------------------------------------------------------- */

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

void rl__tz_free(rl_tz *tz)
{
    if (!tz)
        return;
    free(tz->at);
    free(tz->off);
    free(tz);
}

static rl_tz *bad(rl_tz *tz, char *err, size_t errlen, const char *why)
{
    rl__tz_free(tz);
    snprintf(err, errlen, "%s", why);
    return NULL;
}

rl_tz *rl__tz_parse(const unsigned char *b, size_t len, char *err, size_t errlen)
{
    rl_tz *tz = calloc(1, sizeof *tz);
    if (!tz)
        return bad(NULL, err, errlen, "out of memory");
    if (len < 44 || memcmp(b, "TZif", 4) != 0)
        return bad(tz, err, errlen, "not a TZif file");
    if (b[4] < '2')
        return bad(tz, err, errlen, "a TZif file of version 1 (without 64-bit times)");
    /* skip the version 1 block */
    uint32_t c[6];
    for (int i = 0; i < 6; i++)
        c[i] = be32(b + 20 + 4 * i);
    uint64_t v1 = (uint64_t)c[3] * 5 + (uint64_t)c[4] * 6 + c[5] + (uint64_t)c[2] * 8 + c[1] + c[0];
    if (v1 > len - 44 || len - 44 - v1 < 44 || memcmp(b + 44 + v1, "TZif", 4) != 0)
        return bad(tz, err, errlen, "truncated TZif file");
    const unsigned char *h = b + 44 + v1, *end = b + len;
    for (int i = 0; i < 6; i++)
        c[i] = be32(h + 20 + 4 * i);
    uint32_t isut = c[0], isstd = c[1], leap = c[2], timecnt = c[3], typecnt = c[4], chars = c[5];
    if (leap)
        return bad(tz, err, errlen, "a zone with leap seconds (\"right/\"), not POSIX time");
    if (typecnt == 0 || typecnt > 256 || timecnt > 100000 || chars > 100000 || isut > typecnt ||
        isstd > typecnt)
        return bad(tz, err, errlen, "malformed TZif header");
    const unsigned char *p = h + 44;
    size_t need = (size_t)timecnt * 9 + (size_t)typecnt * 6 + chars + isstd + isut;
    if ((size_t)(end - p) < need)
        return bad(tz, err, errlen, "truncated TZif file");
    tz->n = timecnt;
    tz->at = malloc((timecnt ? timecnt : 1) * sizeof *tz->at);
    tz->off = malloc((timecnt ? timecnt : 1) * sizeof *tz->off);
    if (!tz->at || !tz->off)
        return bad(tz, err, errlen, "out of memory");
    const unsigned char *types = p + (size_t)timecnt * 9;
    for (uint32_t i = 0; i < timecnt; i++) {
        tz->at[i] = be64(p + 8 * (size_t)i);
        unsigned idx = p[(size_t)timecnt * 8 + i];
        if (idx >= typecnt || (i > 0 && tz->at[i] <= tz->at[i - 1]))
            return bad(tz, err, errlen, "malformed TZif transitions");
        tz->off[i] = (int32_t)be32(types + 6 * idx);
    }
    tz->off0 = (int32_t)be32(types);
    for (uint32_t i = 0; i < typecnt; i++) {
        int32_t o = (int32_t)be32(types + 6 * (size_t)i);
        if (o <= -25 * 3600 || o >= 26 * 3600)
            return bad(tz, err, errlen, "a UT offset beyond 25 hours");
    }
    p += need;
    if (p < end) { /* the footer: "\n" TZ string "\n" */
        const unsigned char *nl = p + 1 < end ? memchr(p + 1, '\n', (size_t)(end - p - 1)) : NULL;
        if (*p != '\n' || !nl || nl - p > 256)
            return bad(tz, err, errlen, "malformed TZif footer");
        char s[257];
        memcpy(s, p + 1, (size_t)(nl - p - 1));
        s[nl - p - 1] = '\0';
        if (s[0] && parse_footer(tz, s) != 0)
            return bad(tz, err, errlen, "a TZ string in the footer that is not understood");
    }
    return tz;
}

/* An IANA zone name: components of [A-Za-z0-9_+-], not starting with '.', joined by '/'. */
static int name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 128)
        return 0;
    for (const char *s = name; *s; s++) {
        int start = s == name || s[-1] == '/';
        if (start && (*s == '/' || *s == '.' || *s == '-'))
            return 0;
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '+' || *s == '-' || *s == '/' || *s == '.'))
            return 0;
    }
    return name[n - 1] != '/';
}

rl_tz *rl__tz_load(const char *name, char *err, size_t errlen)
{
    char path[256];
    if (!name_ok(name)) {
        snprintf(err, errlen, "unknown time zone \"%.128s\"", name);
        return NULL;
    }
    snprintf(path, sizeof path, "%s/%s", RL_TZ_DIR, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT || errno == ENOTDIR)
            snprintf(err, errlen, "unknown time zone \"%.128s\"", name);
        else
            snprintf(err, errlen, "time zone \"%.128s\": %s: %s", name, path, strerror(errno));
        return NULL;
    }
    unsigned char *buf = malloc(TZ_FILE_MAX);
    errno = 0;
    size_t len = buf ? fread(buf, 1, TZ_FILE_MAX, f) : 0;
    int rerr = ferror(f) ? errno : 0;
    fclose(f);
    if (!buf || rerr) {
        free(buf);
        if (rerr == EISDIR) /* a region ("Europe"), not a zone */
            snprintf(err, errlen, "unknown time zone \"%.128s\"", name);
        else
            snprintf(err, errlen, "time zone \"%.128s\": cannot read %s", name, path);
        return NULL;
    }
    char why[128];
    rl_tz *tz = rl__tz_parse(buf, len, why, sizeof why);
    free(buf);
    if (!tz)
        snprintf(err, errlen, "unknown time zone \"%.128s\" (%s: %s)", name, path, why);
    return tz;
}
