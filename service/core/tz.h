/*
 * tz.h - time zones from the system's tz database, read once into an immutable table.
 *
 * A zone is read from its TZif file (RFC 8536) under RL_TZ_DIR: the 64-bit transition times
 * of a version 2 or later file, the UT offset of each local time type, and the POSIX TZ string
 * of its footer ("CET-1CEST,M3.5.0,M10.5.0/3"), which gives the offsets after the last
 * transition. Nothing is read from the environment (no TZ, no tzset, no localtime): once
 * loaded, a zone is read-only, and every function below is pure arithmetic on it, safe from
 * any number of threads. Times are whole seconds since the epoch (UTC); dates are days since
 * 1970-01-01.
 */
#ifndef RL_TZ_H
#define RL_TZ_H

#include <stddef.h>
#include <stdint.h>

#define RL_TZ_DIR "/usr/share/zoneinfo"

typedef struct rl_tz rl_tz;

/* Reads zone name (an IANA name such as "Europe/Berlin", or "UTC") from RL_TZ_DIR. Returns the
 * zone, or NULL with a message in err ("unknown time zone \"Mars/Base\""). */
rl_tz *rl__tz_load(const char *name, char *err, size_t errlen);
/* Builds a zone from the bytes of a TZif file; NULL with a message in err when malformed. */
rl_tz *rl__tz_parse(const unsigned char *buf, size_t len, char *err, size_t errlen);
void rl__tz_free(rl_tz *tz);

/* The UT offset in seconds (local time - UTC) at the instant t. */
int64_t rl__tz_offset(const rl_tz *tz, int64_t t);
/* The first instant whose local time is at or after 00:00 of the local date day: local
 * midnight, or, when that midnight does not exist (a change of offset skips it), the instant
 * the change happens; when a change back repeats it, its first occurrence. */
int64_t rl__tz_midnight(const rl_tz *tz, int64_t day);

/* Civil dates (proleptic Gregorian): days since 1970-01-01 of y-m-d, and back. */
int64_t rl__days_from_civil(int64_t y, unsigned m, unsigned d);
void rl__civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d);
/* The day of the week of a date, 0 = Sunday. */
unsigned rl__weekday(int64_t day);

#endif
