/*
 * log.h - one line per event on stderr, written with a single write(2) so that lines of
 * concurrent threads never mix:
 *
 *   text: 2024-05-01T12:00:00.123Z ratelimitd[42]: message
 *   json: {"time":"2024-05-01T12:00:00.123Z","level":"info","pid":42,"msg":"message"}
 *
 * A message's level is error when it starts with "error: ", warn with "warn: ", info
 * otherwise; lines less severe than the configured level are not written. Access lines (one per
 * request, when the "log" setting has "access": true) carry the request's fields:
 *
 *   ... ratelimitd[42]: access: GET /check 429 0.215 ms client=127.0.0.1 blocked_by="user: free" key="alice"
 *   {"time":...,"level":"warn","pid":42,"msg":"access","method":"GET","path":"/check",
 *    "status":429,"duration_ms":0.215,"client":"127.0.0.1","blocked_by":"user: free","key":"alice"}
 *
 * When stderr is the journal (systemd's JOURNAL_STREAM names it), a line starts with its
 * level's syslog priority, <3> error, <4> warn, <6> info, which the journal takes off and keeps
 * as the entry's priority; a text line is then only the message (the journal records the time
 * and the pid itself), a JSON line is kept whole:
 *
 *   text: <6>message
 *   json: <6>{"time":"2024-05-01T12:00:00.123Z","level":"info","pid":42,"msg":"message"}
 */
#ifndef RLD_APP_LOG_H
#define RLD_APP_LOG_H

#include <stdarg.h>
#include <stddef.h>

#include "ratelimit.h"
#include "settings.h"

/* Sets the level and the format (text and info until called). Call before threads start. */
void rld_log_configure(rld_log_level level, rld_log_format format);

void rld_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void rld_vlog(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/* One request as its access line shows it. Strings are borrowed; blocked_by and key are NULL
 * unless the request was denied; key is keylen bytes, not NUL-terminated. */
typedef struct rld_access {
    const char *method;
    const char *path; /* without the query string */
    int status;
    rl_ns duration;
    const char *client; /* the peer's address, "" when unknown */
    const char *blocked_by;
    const char *key;
    size_t keylen;
} rld_access;

/* Writes the access line of a request (info for 1xx to 3xx, warn for 4xx, error for 5xx),
 * unless its level is below the configured one. */
void rld_log_access(const rld_access *a);

#endif
