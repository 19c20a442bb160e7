/*
 * log.c - see log.h.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

void rld_vlog(const char *fmt, va_list ap)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ ratelimitd[%ld]: ",
                          ts.tv_nsec / 1000000, (long)getpid());
    int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
    n = m < 0 ? n : n + (size_t)m < sizeof line - 1 ? n + (size_t)m : sizeof line - 2;
    /* one line: drop the trailing newlines some callers (libmicrohttpd) add, flatten others */
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        n--;
    for (size_t i = 0; i < n; i++)
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

void rld_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rld_vlog(fmt, ap);
    va_end(ap);
}
