/*
 * log.h - one line per event on stderr: "2024-05-01T12:00:00.123Z ratelimitd[42]: message".
 * Each line is written with a single write(2), so lines of concurrent threads never mix.
 */
#ifndef RLD_LOG_H
#define RLD_LOG_H

#include <stdarg.h>

void rld_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void rld_vlog(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

#endif
