/*
 * test_calendar.c - the calendar rule type and the time zones under it: traces on the manual
 * clock, each worked out by hand from the zone's published changes (zdump -v shows them), run
 * through the in-memory store and through the Redis store (its own redis-server) with the same
 * expected answers; the TZif reader on zones whose changes happen at midnight and after the
 * last transition of the file; an unknown zone refused by name.
 */
#define _GNU_SOURCE /* timegm: UTC, independent of TZ */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/tz.h"
#include "redis/fallback.h"
#include "redis/store.h"
#include "redis_server.h"
#include "testutil.h"

/* "2026-03-28T22:59:59" (UTC) in seconds since the epoch. */
static int64_t utc(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    ck_assert_int_eq(sscanf(s, "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                            &tm.tm_hour, &tm.tm_min, &tm.tm_sec),
                     6);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm);
}

/* ---- the zones ------------------------------------------------------------------------------ */

static rl_tz *zone(const char *name)
{
    char err[256];
    rl_tz *tz = rl__tz_load(name, err, sizeof err);
    ck_assert_msg(tz != NULL, "%s: %s", name, err);
    return tz;
}

static int64_t day_of(const char *ymd)
{
    int y, m, d;
    ck_assert_int_eq(sscanf(ymd, "%d-%d-%d", &y, &m, &d), 3);
    return rl__days_from_civil(y, (unsigned)m, (unsigned)d);
}

START_TEST(civil_dates)
{
    ck_assert_int_eq(rl__days_from_civil(1970, 1, 1), 0);
    ck_assert_int_eq(rl__days_from_civil(2000, 3, 1), 11017);
    /* 2028 is a leap year: February has 29 days */
    ck_assert_int_eq(rl__days_from_civil(2028, 3, 1) - rl__days_from_civil(2028, 2, 1), 29);
    ck_assert_int_eq(rl__days_from_civil(2100, 3, 1) - rl__days_from_civil(2100, 2, 1), 28);
    int64_t y;
    unsigned m, d;
    rl__civil_from_days(rl__days_from_civil(2028, 2, 29), &y, &m, &d);
    ck_assert(y == 2028 && m == 2 && d == 29);
    rl__civil_from_days(-1, &y, &m, &d);
    ck_assert(y == 1969 && m == 12 && d == 31);
    ck_assert_uint_eq(rl__weekday(day_of("2026-03-04")), 3); /* a Wednesday */
    ck_assert_uint_eq(rl__weekday(day_of("2026-03-29")), 0); /* a Sunday */
}
END_TEST

START_TEST(berlin_midnights)
{
    rl_tz *tz = zone("Europe/Berlin");
    ck_assert_int_eq(rl__tz_offset(tz, utc("2026-03-29T00:59:59")), 3600);
    ck_assert_int_eq(rl__tz_offset(tz, utc("2026-03-29T01:00:00")), 7200);
    ck_assert_int_eq(rl__tz_offset(tz, utc("2026-10-25T00:59:59")), 7200);
    ck_assert_int_eq(rl__tz_offset(tz, utc("2026-10-25T01:00:00")), 3600);
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2026-03-29")), utc("2026-03-28T23:00:00"));
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2026-03-30")), utc("2026-03-29T22:00:00"));
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2026-10-25")), utc("2026-10-24T22:00:00"));
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2026-10-26")), utc("2026-10-25T23:00:00"));
    /* past the file's last transition the footer's rule (CET-1CEST,M3.5.0,M10.5.0/3) holds:
     * 2040-03-25 is the last Sunday of March */
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2040-03-25")), utc("2040-03-24T23:00:00"));
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2040-03-26")), utc("2040-03-25T22:00:00"));
    ck_assert_int_eq(rl__tz_offset(tz, utc("2240-07-01T00:00:00")), 7200);
    ck_assert_int_eq(rl__tz_offset(tz, utc("2240-12-01T00:00:00")), 3600);
    rl__tz_free(tz);
}
END_TEST

/* Asia/Beirut changes at midnight (EET-2EEST,M3.5.0/0,M10.5.0/0): on 2026-03-29 local time goes
 * from 23:59:59 to 01:00 at 22:00 UTC, so that day has no midnight and starts with the change;
 * on 2026-10-24 it goes from 23:59:59 back to 23:00 at 21:00 UTC, so 2026-10-24 lasts 25 hours
 * and midnight happens once, at 22:00 UTC. */
START_TEST(midnight_skipped_or_repeated)
{
    rl_tz *tz = zone("Asia/Beirut");
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2026-03-28")), utc("2026-03-27T22:00:00"));
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2026-03-29")), utc("2026-03-28T22:00:00"));
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2026-03-30")), utc("2026-03-29T21:00:00"));
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2026-10-24")), utc("2026-10-23T21:00:00"));
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2026-10-25")), utc("2026-10-24T22:00:00"));
    rl__tz_free(tz);
}
END_TEST

/* A TZif file of version 2 without transitions: one local time type (offset off) and the
 * footer tz, so that every time follows the footer's rule. */
static rl_tz *footer_zone(int32_t off, const char *tz)
{
    unsigned char b[512];
    size_t n = 0;
    for (int part = 0; part < 2; part++) {
        memcpy(b + n, "TZif2", 5);
        memset(b + n + 5, 0, 15);
        n += 20;
        const uint32_t counts[6] = {0, 0, 0, 0, 1, 4}; /* isut isstd leap time type char */
        for (int i = 0; i < 6; i++, n += 4) {
            b[n] = (unsigned char)(counts[i] >> 24);
            b[n + 1] = (unsigned char)(counts[i] >> 16);
            b[n + 2] = (unsigned char)(counts[i] >> 8);
            b[n + 3] = (unsigned char)counts[i];
        }
        uint32_t u = (uint32_t)off;
        unsigned char tt[6] = {(unsigned char)(u >> 24),
                               (unsigned char)(u >> 16),
                               (unsigned char)(u >> 8),
                               (unsigned char)u,
                               0,
                               0};
        memcpy(b + n, tt, 6);
        memcpy(b + n + 6, "STD", 4);
        n += 10;
    }
    n += (size_t)snprintf((char *)b + n, sizeof b - n, "\n%s\n", tz);
    char err[128];
    rl_tz *z = rl__tz_parse(b, n, err, sizeof err);
    ck_assert_msg(z != NULL, "%s: %s", tz, err);
    return z;
}

START_TEST(footer_rules)
{
    /* Sydney's rule, in the southern hemisphere: summer time from the first Sunday of October
     * at 02:00 to the first Sunday of April at 03:00 */
    rl_tz *tz = footer_zone(36000, "AEST-10AEDT,M10.1.0,M4.1.0/3");
    ck_assert_int_eq(rl__tz_offset(tz, utc("2027-01-15T00:00:00")), 39600);
    ck_assert_int_eq(rl__tz_offset(tz, utc("2027-07-15T00:00:00")), 36000);
    /* 2027-04-04 03:00 AEDT is 2027-04-03 16:00 UTC */
    ck_assert_int_eq(rl__tz_offset(tz, utc("2027-04-03T15:59:59")), 39600);
    ck_assert_int_eq(rl__tz_offset(tz, utc("2027-04-03T16:00:00")), 36000);
    /* the day of 2027-04-04 lasts 25 hours: from 13:00 UTC the day before to 14:00 UTC */
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2027-04-04")), utc("2027-04-03T13:00:00"));
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2027-04-05")), utc("2027-04-04T14:00:00"));
    rl__tz_free(tz);

    /* a change back at 00:30 to 23:30 the day before: 2026-10-25 00:00 local first happens at
     * 21:00 UTC (summer time, +3), and 21:45 UTC reads 23:45 on the 24th again */
    tz = footer_zone(7200, "STD-2DST,M3.5.0,M10.5.0/0:30");
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2026-10-25")), utc("2026-10-24T21:00:00"));
    ck_assert_int_eq(rl__tz_offset(tz, utc("2026-10-24T21:29:59")), 10800);
    ck_assert_int_eq(rl__tz_offset(tz, utc("2026-10-24T21:45:00")), 7200);
    ck_assert_int_eq(rl__tz_midnight(tz, day_of("2026-10-26")), utc("2026-10-25T22:00:00"));
    rl__tz_free(tz);

    /* a fixed offset, and the POSIX defaults: one hour of summer time, on the United States'
     * dates (second Sunday of March, first of November, at 02:00) */
    tz = footer_zone(-18000, "<-05>5");
    ck_assert_int_eq(rl__tz_offset(tz, utc("2026-07-01T00:00:00")), -18000);
    rl__tz_free(tz);
    tz = footer_zone(-18000, "EST5EDT");
    ck_assert_int_eq(rl__tz_offset(tz, utc("2026-03-08T06:59:59")), -18000);
    ck_assert_int_eq(rl__tz_offset(tz, utc("2026-03-08T07:00:00")), -14400);
    rl__tz_free(tz);
}
END_TEST

START_TEST(malformed_files_refused)
{
    char err[128];
    static const unsigned char v1[44] = "TZif";
    ck_assert_ptr_null(rl__tz_parse((const unsigned char *)"TZif2", 5, err, sizeof err));
    ck_assert_ptr_null(rl__tz_parse(v1, sizeof v1, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "version 1"));
    ck_assert_ptr_null(rl__tz_parse((const unsigned char *)"not a zone file at all, not at all, "
                                                           "no, not at all",
                                    50, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "not a TZif file"));
}
END_TEST

START_TEST(zone_names_refused)
{
    static const char *const bad[] = {
        "Mars/Base", "../etc/passwd",           "/etc/passwd",        "Europe",
        "",          "Europe/../Europe/Berlin", "right/Europe/Berlin"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256];
        rl_tz *tz = rl__tz_load(bad[i], err, sizeof err);
        ck_assert_msg(tz == NULL, "%s loaded", bad[i]);
        ck_assert_msg(strstr(err, "unknown time zone") != NULL, "%s: %s", bad[i], err);
    }
    const char *msg = tu_config_error(
        "{\"levels\": [{\"name\": \"k\", \"rules\": [{\"type\": \"calendar\", \"limit\": 5, "
        "\"period\": \"day\", \"time_zone\": \"Mars/Base\"}]}]}");
    ck_assert_msg(strstr(msg, "time_zone: unknown time zone \"Mars/Base\"") != NULL, "%s", msg);
    msg = tu_config_error("{\"levels\": [{\"name\": \"k\", \"rules\": [{\"type\": \"calendar\", "
                          "\"limit\": 5, \"period\": \"fortnight\", \"time_zone\": \"UTC\"}]}]}");
    ck_assert_msg(strstr(msg, "period: must be") != NULL, "%s", msg);
    msg = tu_config_error("{\"levels\": [{\"name\": \"k\", \"rules\": [{\"type\": \"calendar\", "
                          "\"limit\": 5, \"period\": \"day\", \"month_day\": 15, "
                          "\"time_zone\": \"UTC\"}]}]}");
    ck_assert_msg(strstr(msg, "month_day: only for period \"month\"") != NULL, "%s", msg);
    msg = tu_config_error("{\"levels\": [{\"name\": \"k\", \"rules\": [{\"type\": \"calendar\", "
                          "\"limit\": 5, \"period\": \"month\", \"month_day\": 29, "
                          "\"time_zone\": \"UTC\"}]}]}");
    ck_assert_msg(strstr(msg, "month_day: must be a whole number from 1 to 28") != NULL, "%s", msg);
}
END_TEST

/* ---- traces through both stores ------------------------------------------------------------- */

typedef struct crow {
    const char *at; /* UTC */
    double cost;
    int allowed;
    double wait;      /* retry_after, seconds */
    double remaining; /* after the decision */
    double window;    /* the period's length, seconds */
} crow;

typedef struct ccase {
    const char *name;
    const char *rule;
    crow rows[8];
} ccase;

#define H 3600.0
#define D 86400.0

static const ccase cases[] = {
    {"Europe/Berlin: 2026-03-29 lasts 23 hours",
     "{\"type\": \"calendar\", \"limit\": 2, \"period\": \"day\", \"time_zone\": "
     "\"Europe/Berlin\"}",
     {/* 23:59:59 CET on the 28th: the 28th's day, from 23:00 UTC on the 27th */
      {"2026-03-28T22:59:59", 2, 1, 0, 0, 24 * H},
      /* midnight CET: the 29th starts, and ends at midnight CEST, 22:00 UTC */
      {"2026-03-28T23:00:00", 2, 1, 0, 0, 23 * H},
      {"2026-03-29T12:00:00", 1, 0, 10 * H, 0, 23 * H},
      /* retry_after is exactly the time to the next local midnight */
      {"2026-03-29T21:59:59", 1, 0, 1, 0, 23 * H},
      {"2026-03-29T22:00:00", 1, 1, 0, 1, 24 * H},
      {NULL, 0, 0, 0, 0, 0}}},
    {"Europe/Berlin: 2026-10-25 lasts 25 hours",
     "{\"type\": \"calendar\", \"limit\": 2, \"period\": \"day\", \"time_zone\": "
     "\"Europe/Berlin\"}",
     {{"2026-10-24T21:59:59", 2, 1, 0, 0, 24 * H},
      /* midnight CEST, 22:00 UTC, to midnight CET, 23:00 UTC the next day */
      {"2026-10-24T22:00:00", 2, 1, 0, 0, 25 * H},
      /* 23:30 CET: half an hour to go */
      {"2026-10-25T22:30:00", 1, 0, 0.5 * H, 0, 25 * H},
      {"2026-10-25T23:00:00", 1, 1, 0, 1, 24 * H},
      {NULL, 0, 0, 0, 0, 0}}},
    {"month_day 15 across February 2028 (29 days) in Europe/Berlin",
     "{\"type\": \"calendar\", \"limit\": 10, \"period\": \"month\", \"month_day\": 15, "
     "\"time_zone\": \"Europe/Berlin\"}",
     {/* 2028-01-15 to 2028-02-15 local: 31 days */
      {"2028-02-14T22:59:59", 10, 1, 0, 0, 31 * D},
      /* 2028-02-15 00:00 CET to 2028-03-15 00:00 CET: 29 days */
      {"2028-02-14T23:00:00", 10, 1, 0, 0, 29 * D},
      /* from 2028-02-29 12:00 UTC to 2028-03-14 23:00 UTC: 14 days 11 hours */
      {"2028-02-29T12:00:00", 1, 0, 14 * D + 11 * H, 0, 29 * D},
      /* 2028-03-15 to 2028-04-15: 31 days less the hour of 2028-03-26's change */
      {"2028-03-14T23:00:00", 1, 1, 0, 9, 31 * D - H},
      {NULL, 0, 0, 0, 0, 0}}},
    {"America/Los_Angeles: 2027 starts at 08:00 UTC",
     "{\"type\": \"calendar\", \"limit\": 5, \"period\": \"year\", \"time_zone\": "
     "\"America/Los_Angeles\"}",
     {{"2026-12-31T23:30:00", 5, 1, 0, 0, 365 * D},
      /* a new year in UTC, still 2026-12-31 16:30 PST */
      {"2027-01-01T00:30:00", 1, 0, 7.5 * H, 0, 365 * D},
      {"2027-01-01T08:00:00", 1, 1, 0, 4, 365 * D},
      {NULL, 0, 0, 0, 0, 0}}},
    {"UTC: 2027 starts at 00:00 UTC",
     "{\"type\": \"calendar\", \"limit\": 5, \"period\": \"year\", \"time_zone\": \"UTC\"}",
     {{"2026-12-31T23:30:00", 5, 1, 0, 0, 365 * D},
      {"2027-01-01T00:30:00", 1, 1, 0, 4, 365 * D},
      {"2027-01-01T08:00:00", 1, 1, 0, 3, 365 * D},
      {NULL, 0, 0, 0, 0, 0}}},
    {"weeks from Monday in Europe/Berlin",
     "{\"type\": \"calendar\", \"limit\": 1, \"period\": \"week\", \"time_zone\": "
     "\"Europe/Berlin\"}",
     {/* Wednesday 2026-03-04: the week of Monday 2026-03-02 00:00 CET (03-01 23:00 UTC) */
      {"2026-03-04T12:00:00", 1, 1, 0, 0, 7 * D},
      /* Sunday 12:00 UTC: 11 hours to Monday 00:00 CET */
      {"2026-03-08T12:00:00", 1, 0, 11 * H, 0, 7 * D},
      {"2026-03-08T23:00:00", 1, 1, 0, 0, 7 * D},
      /* the week of 2026-03-23 holds the change to summer time: 7 days less an hour */
      {"2026-03-25T12:00:00", 1, 1, 0, 0, 7 * D - H},
      {NULL, 0, 0, 0, 0, 0}}},
    {"weeks from Sunday in Europe/Berlin",
     "{\"type\": \"calendar\", \"limit\": 1, \"period\": \"week\", \"week_start\": "
     "\"sunday\", \"time_zone\": \"Europe/Berlin\"}",
     {{"2026-03-04T12:00:00", 1, 1, 0, 0, 7 * D},
      /* Saturday 23:59:59 CET */
      {"2026-03-07T22:59:59", 1, 0, 1, 0, 7 * D},
      {"2026-03-07T23:00:00", 1, 1, 0, 0, 7 * D},
      {NULL, 0, 0, 0, 0, 0}}},
    {"Asia/Beirut: 2026-03-29 starts with the change at 22:00 UTC, its midnight skipped",
     "{\"type\": \"calendar\", \"limit\": 1, \"period\": \"day\", \"time_zone\": "
     "\"Asia/Beirut\"}",
     {{"2026-03-28T21:59:59", 1, 1, 0, 0, 24 * H},
      {"2026-03-28T21:59:59", 1, 0, 1, 0, 24 * H},
      {"2026-03-28T22:00:00", 1, 1, 0, 0, 23 * H},
      {NULL, 0, 0, 0, 0, 0}}},
    {"a denied request takes nothing; a cost above the limit never fits",
     "{\"type\": \"calendar\", \"limit\": 3, \"period\": \"day\", \"time_zone\": \"UTC\"}",
     {{"2026-06-01T10:00:00", 2, 1, 0, 1, D},
      {"2026-06-01T11:00:00", 2, 0, 13 * H, 1, D},
      {"2026-06-01T12:00:00", 1, 1, 0, 0, D},
      {NULL, 0, 0, 0, 0, 0}}},
};

static rt_redis srv;

static rl_limiter *redis_limiter_clock(rl_registry *reg, const char *json, const char *prefix,
                                       int manual)
{
    rld_settings set;
    rl_config *cfg;
    rl_err err = {{0}};
    ck_assert_int_eq(rld_config_parse(json, strlen(json), reg, &set, &cfg, &err), RL_OK);
    rld_settings_clear(&set);
    rld_redis_options o = {.url = srv.url,
                           .prefix = prefix,
                           .timeout_ms = 10000,
                           .pool = 2,
                           .manual_clock = manual,
                           .ttl_floor_ms = 3600 * 1000};
    rl_store *st;
    rl_limiter *lim;
    ck_assert_int_eq(rld_redis_store_new(&o, &st, &err), RL_OK);
    int rc = rl_limiter_new(cfg, st, &lim, &err);
    ck_assert_msg(rc == RL_OK, "limiter refused: %s", err.msg);
    return lim;
}

static rl_limiter *redis_limiter(rl_registry *reg, const char *json, const char *prefix)
{
    return redis_limiter_clock(reg, json, prefix, 1);
}

static void run_case(const ccase *c, int redis, int idx)
{
    char json[512];
    snprintf(json, sizeof json, "{\"levels\": [{\"name\": \"k\", \"rules\": [%s]}]}", c->rule);
    rl_limiter *lim;
    rl_registry *reg = NULL;
    if (redis) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "cal%d:", idx);
        reg = rl_registry_new();
        lim = redis_limiter(reg, json, prefix);
    } else {
        lim = tu_limiter(json);
    }
    const char *store = redis ? "redis" : "memory";
    for (int i = 0; c->rows[i].at; i++) {
        const crow *r = &c->rows[i];
        rl_decision d;
        rl_ns now = (rl_ns)utc(r->at) * RL_NS_PER_SEC;
        int ok = tu_acquire_ex(lim, "k=x", r->cost, now, 0, 0, &d);
        ck_assert_msg(ok == r->allowed, "%s store, %s, row %d: allowed %d", store, c->name, i, ok);
        ck_assert_msg(d.retry_after == S(r->wait), "%s store, %s, row %d: wait %lld", store,
                      c->name, i, (long long)d.retry_after);
        const rl_rule_status *st = tu_status(&d, 0);
        ck_assert_msg(st->remaining == FP(r->remaining), "%s store, %s, row %d: remaining %lld",
                      store, c->name, i, (long long)st->remaining);
        ck_assert_msg(st->window == S(r->window), "%s store, %s, row %d: window %lld", store,
                      c->name, i, (long long)st->window);
    }
    if (redis) {
        rl_limiter_free(lim);
        rl_registry_free(reg);
    } else {
        tu_free(lim);
    }
}

START_TEST(trace_in_memory)
{
    run_case(&cases[_i], 0, _i);
}
END_TEST

START_TEST(trace_on_redis)
{
    run_case(&cases[_i], 1, _i);
}
END_TEST

/* reset_after counts to the next period's start; it is 0 for a key with nothing counted. */
START_TEST(reset_after_to_the_next_start)
{
    rl_limiter *lim = tu_limiter("{\"levels\": [{\"name\": \"k\", \"rules\": [{\"type\": "
                                 "\"calendar\", \"limit\": 2, \"period\": \"day\", "
                                 "\"time_zone\": \"Europe/Berlin\"}]}]}");
    rl_decision d;
    rl_ns now = (rl_ns)utc("2026-03-29T12:00:00") * RL_NS_PER_SEC;
    ck_assert_int_eq(tu_acquire_ex(lim, "k=x", 1, now, RL_DRY_RUN, 0, &d), 1);
    ck_assert_int_eq(tu_status(&d, 0)->reset_after, 0);
    ck_assert_int_eq(tu_acquire_ex(lim, "k=x", 1, now, 0, 0, &d), 1);
    ck_assert_int_eq(tu_status(&d, 0)->reset_after, S(10 * H));
    /* the clock going back keeps the period and its count */
    ck_assert_int_eq(tu_acquire_ex(lim, "k=x", 2, now - S(20 * H), 0, 0, &d), 0);
    ck_assert_int_eq(d.retry_after, S(30 * H));
    tu_free(lim);
}
END_TEST

static const char *berlin5 =
    "{\"reservation_ttl\": 600, \"levels\": [{\"name\": \"k\", \"rules\": [{\"type\": "
    "\"calendar\", \"limit\": 5, \"period\": \"day\", \"time_zone\": \"Europe/Berlin\"}]}]}";

/* A snapshot keeps the period and its count: 3 of 5 taken at 12:00 UTC on 2026-03-29 (a day
 * ending at 22:00 UTC); after a restart at 13:00, 2 fit and a 3rd waits 9 hours. */
START_TEST(snapshot_keeps_the_period)
{
    rl_limiter *a = tu_limiter(berlin5);
    rl_decision d;
    rl_err err;
    char path[256];
    const char *b = getenv("RL_BUILD");
    snprintf(path, sizeof path, "%s/cal-snap-%d.bin", b ? b : "build", (int)getpid());
    rl_ns noon = (rl_ns)utc("2026-03-29T12:00:00") * RL_NS_PER_SEC;
    ck_assert_int_eq(tu_acquire(a, "k=x", 3, noon, &d), 1);
    ck_assert_int_eq(rl_limiter_save(a, path, &err), RL_OK);
    rl_limiter *c = tu_limiter(berlin5);
    size_t loaded = 0;
    ck_assert_int_eq(rl_limiter_load(c, path, noon + S(H), &loaded, &err), RL_OK);
    ck_assert_uint_eq(loaded, 1);
    ck_assert_int_eq(tu_acquire_ex(c, "k=x", 3, noon + S(H), RL_DRY_RUN, 0, &d), 0);
    ck_assert_int_eq(d.retry_after, S(9 * H));
    ck_assert_int_eq(tu_acquire(c, "k=x", 2, noon + S(H), &d), 1);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, 0);
    unlink(path);
    tu_free(a);
    tu_free(c);
}
END_TEST

/* A reservation of 3 settled at 1 gives 2 back within the period; one made before midnight
 * and settled after it gives nothing back to the new day: on both stores alike. */
START_TEST(settle_within_and_across_periods)
{
    rl_registry *reg = NULL;
    rl_limiter *lim;
    if (_i) {
        reg = rl_registry_new();
        lim = redis_limiter(reg, berlin5, "calsettle:");
    } else {
        lim = tu_limiter(berlin5);
    }
    rl_decision d;
    rl_err err;
    rl_settlement st;
    char id[RL_RESERVATION_ID];
    rl_ns noon = (rl_ns)utc("2026-03-29T12:00:00") * RL_NS_PER_SEC;
    ck_assert_int_eq(tu_acquire_ex(lim, "k=x", 3, noon, RL_RESERVE, 0, &d), 1);
    memcpy(id, d.reservation, sizeof id);
    ck_assert_int_eq(rl_settle(lim, id, FP(1), noon + S(60), &st, &err), RL_OK);
    ck_assert_int_eq(st.refunded, FP(2));
    ck_assert_int_eq(tu_acquire_ex(lim, "k=x", 4, noon + S(60), RL_DRY_RUN, 0, &d), 1);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(4));
    /* 4 reserved at 21:59, settled at 0 at 22:01, in the new day: nothing comes back */
    rl_ns late = (rl_ns)utc("2026-03-29T21:59:00") * RL_NS_PER_SEC;
    ck_assert_int_eq(tu_acquire_ex(lim, "k=x", 4, late, RL_RESERVE, 0, &d), 1);
    memcpy(id, d.reservation, sizeof id);
    ck_assert_int_eq(tu_acquire(lim, "k=x", 1, late + S(120), &d), 1);
    ck_assert_int_eq(rl_settle(lim, id, 0, late + S(120), &st, &err), RL_OK);
    ck_assert_int_eq(tu_acquire_ex(lim, "k=x", 1, late + S(120), RL_DRY_RUN, 0, &d), 1);
    ck_assert_int_eq(tu_status(&d, 0)->remaining, FP(4));
    if (_i) {
        rl_limiter_free(lim);
        rl_registry_free(reg);
    } else {
        tu_free(lim);
    }
}
END_TEST

/* On Redis's own clock, Redis decides the period: an instance whose clock says last week still
 * counts in Redis's week (the bounds it sends cover the week before and after its own), and
 * one whose clock is years away gets an error instead of a wrong period. */
START_TEST(redis_clock_decides_the_period)
{
    static const char *cfg = "{\"levels\": [{\"name\": \"k\", \"rules\": [{\"type\": "
                             "\"calendar\", \"limit\": 1, \"period\": \"week\", "
                             "\"time_zone\": \"UTC\"}]}]}";
    /* weeks from Monday 00:00 UTC; 1970-01-05 was a Monday */
    int64_t into = ((int64_t)time(NULL) - 4 * 86400) % (7 * 86400);
    if (into > 7 * 86400 - 30) /* not across a week's end while the test runs */
        sleep((unsigned)(7 * 86400 - into + 1));
    rl_registry *reg = rl_registry_new();
    rl_limiter *lim = redis_limiter_clock(reg, cfg, "calclock:", 0);
    rl_ns wall = (rl_ns)time(NULL) * RL_NS_PER_SEC;
    rl_decision d;
    ck_assert_int_eq(tu_acquire_ex(lim, "k=x", 1, wall - S(7 * D), 0, 0, &d), 1); /* last week */
    /* counted in Redis's week: it resets within 7 days of the wall clock */
    ck_assert_int_le(tu_status(&d, 0)->reset_after, S(7 * D));
    ck_assert_int_eq(tu_status(&d, 0)->window, S(7 * D));
    ck_assert_int_eq(tu_acquire_ex(lim, "k=x", 1, wall, 0, 0, &d), 0);
    ck_assert_int_le(d.retry_after, S(7 * D));
    rl_err err;
    ck_assert_int_ne(tu_acquire_err(lim, "k=y", 1, (rl_ns)946684800 * RL_NS_PER_SEC, &err), RL_OK);
    ck_assert_msg(strstr(err.msg, "clock of Redis is more than a period away") != NULL, "%s",
                  err.msg);
    rl_limiter_free(lim);
    rl_registry_free(reg);
}
END_TEST

/* With Redis down and on_store_error "local", the level is decided in memory with its limit
 * divided by the fleet: 4 a day on a fleet of 2 is 2 a day here, to the same midnight. */
START_TEST(local_fallback_keeps_the_calendar)
{
    const char *json = "{\"levels\": [{\"name\": \"k\", \"rules\": [{\"type\": \"calendar\", "
                       "\"limit\": 4, \"period\": \"day\", \"time_zone\": \"Europe/Berlin\"}]}]}";
    rl_registry *reg = rl_registry_new();
    rld_settings set;
    rl_config *cfg;
    rl_err err;
    ck_assert_int_eq(rld_config_parse(json, strlen(json), reg, &set, &cfg, &err), RL_OK);
    rld_settings_clear(&set);
    rld_redis_options o = {.url = "redis://127.0.0.1:1/0", .prefix = "x:", .timeout_ms = 200,
                           .pool = 1, .manual_clock = 1};
    rl_store *red, *fb;
    ck_assert_int_eq(rld_redis_store_new(&o, &red, &err), RL_OK);
    rld_fallback_options opt = {.mode = {RLD_ON_ERROR_LOCAL}, .fleet_size = 2};
    ck_assert_int_eq(rld_fallback_store_new(red, &opt, &fb, &err), RL_OK);
    rl_limiter *lim;
    ck_assert_int_eq(rl_limiter_new(cfg, fb, &lim, &err), RL_OK);
    rl_decision d;
    rl_ns noon = (rl_ns)utc("2026-03-29T12:00:00") * RL_NS_PER_SEC;
    ck_assert_int_eq(tu_acquire(lim, "k=x", 2, noon, &d), 1);
    ck_assert_int_eq(d.applied[0].fallback, RL_FALLBACK_LOCAL);
    ck_assert_int_eq(tu_status(&d, 0)->limit, FP(2));
    ck_assert_int_eq(tu_acquire(lim, "k=x", 1, noon, &d), 0);
    ck_assert_int_eq(d.retry_after, S(10 * H));
    rl_limiter_free(lim);
    rl_registry_free(reg);
}
END_TEST

static void srv_up(void)
{
    rt_redis_start(&srv);
}
static void srv_down(void)
{
    rt_redis_stop(&srv);
}

Suite *calendar_suite(void);
Suite *calendar_suite(void)
{
    Suite *s = suite_create("calendar");
    TCase *tc = tcase_create("zones");
    tcase_add_test(tc, civil_dates);
    tcase_add_test(tc, berlin_midnights);
    tcase_add_test(tc, midnight_skipped_or_repeated);
    tcase_add_test(tc, zone_names_refused);
    tcase_add_test(tc, footer_rules);
    tcase_add_test(tc, malformed_files_refused);
    suite_add_tcase(s, tc);

    int n = (int)(sizeof cases / sizeof cases[0]);
    tc = tcase_create("memory");
    tcase_add_loop_test(tc, trace_in_memory, 0, n);
    tcase_add_test(tc, reset_after_to_the_next_start);
    tcase_add_test(tc, snapshot_keeps_the_period);
    tcase_add_loop_test(tc, settle_within_and_across_periods, 0, 1);
    suite_add_tcase(s, tc);

    tc = tcase_create("redis");
    tcase_add_checked_fixture(tc, srv_up, srv_down);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, trace_on_redis, 0, n);
    tcase_add_loop_test(tc, settle_within_and_across_periods, 1, 2);
    tcase_add_test(tc, redis_clock_decides_the_period);
    tcase_add_test(tc, local_fallback_keeps_the_calendar);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(calendar_suite()) ? 1 : 0;
}
