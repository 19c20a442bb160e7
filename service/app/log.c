/*
 * log.c - see log.h.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "log.h"

#define LINE_MAX_BYTES 2048

/* Set once, before threads start. */
static rld_log_level min_level = RLD_LOG_INFO;
static rld_log_format format = RLD_LOG_TEXT;

static const char *const level_names[] = {"error", "warn", "info"};
/* syslog's priorities of the levels: LOG_ERR, LOG_WARNING, LOG_INFO */
static const int level_priorities[] = {3, 4, 6};

/* Whether stderr is the journal: set once, at the first line. */
static pthread_once_t journal_once = PTHREAD_ONCE_INIT;
static int journal;

/* systemd sets JOURNAL_STREAM to the device and inode ("dev:ino") of the stream it connects to
 * stderr; stderr is still that stream unless it was redirected since. */
static void journal_detect(void)
{
    const char *v = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    char extra;
    struct stat st;
    journal = v && sscanf(v, "%llu:%llu%c", &dev, &ino, &extra) == 2 &&
              fstat(STDERR_FILENO, &st) == 0 && (unsigned long long)st.st_dev == dev &&
              (unsigned long long)st.st_ino == ino;
}

void rld_log_configure(rld_log_level level, rld_log_format fmt)
{
    min_level = level;
    format = fmt;
}

/* Starts a line: the time, and in JSON the level and the pid as well. To the journal, the
 * level's syslog priority ("<3>") first, and in text nothing else: the journal keeps the time,
 * the name and the pid of every line itself. */
static void line_start(rld_buf *o, rld_log_level level)
{
    char t[40];
    struct timespec ts;
    struct tm tm;
    pthread_once(&journal_once, journal_detect);
    if (journal) {
        rld_buf_printf(o, "<%d>", level_priorities[level]);
        if (format == RLD_LOG_TEXT)
            return;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(t, sizeof t, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(t + n, sizeof t - n, ".%03ldZ", ts.tv_nsec / 1000000);
    if (format == RLD_LOG_JSON)
        rld_buf_printf(o, "{\"time\":\"%s\",\"level\":\"%s\",\"pid\":%ld,\"msg\":", t,
                       level_names[level], (long)getpid());
    else
        rld_buf_printf(o, "%s ratelimitd[%ld]: ", t, (long)getpid());
}

/* Ends the line (one line: newlines inside become spaces) and writes it at once. */
static void line_write(rld_buf *o)
{
    const char *s = rld_buf_cstr(o);
    size_t n = o->len;
    char *p = o->p;
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    for (size_t i = 0; i < n; i++)
        if (p[i] == '\n' || p[i] == '\r')
            p[i] = ' ';
    o->len = n;
    rld_buf_putc(o, '\n');
    ssize_t w = write(STDERR_FILENO, o->p, o->len);
    (void)w;
    rld_buf_reset(o);
}

void rld_vlog(const char *fmt, va_list ap)
{
    char msg[1024], storage[LINE_MAX_BYTES];
    rld_buf o;
    rld_log_level level = strncmp(fmt, "error: ", 7) == 0  ? RLD_LOG_ERROR
                          : strncmp(fmt, "warn: ", 6) == 0 ? RLD_LOG_WARN
                                                            : RLD_LOG_INFO;
    if (level > min_level)
        return;
    vsnprintf(msg, sizeof msg, fmt, ap);
    rld_buf_init(&o, storage, sizeof storage);
    line_start(&o, level);
    if (format == RLD_LOG_JSON) {
        rld_buf_json_str(&o, msg, strlen(msg));
        rld_buf_putc(&o, '}');
    } else {
        rld_buf_puts(&o, msg);
    }
    line_write(&o);
}

void rld_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rld_vlog(fmt, ap);
    va_end(ap);
}

/* A path as text: bytes that are not printable or are spaces become '?'. */
static void put_path(rld_buf *o, const char *p)
{
    for (; *p; p++)
        rld_buf_putc(o, (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f ? *p : '?');
}

void rld_log_access(const rld_access *a)
{
    char storage[LINE_MAX_BYTES];
    rld_buf o;
    rld_log_level level = a->status >= 500 ? RLD_LOG_ERROR
                          : a->status >= 400 ? RLD_LOG_WARN
                                             : RLD_LOG_INFO;
    if (level > min_level)
        return;
    rld_buf_init(&o, storage, sizeof storage);
    line_start(&o, level);
    double ms = (double)a->duration / 1e6;
    if (format == RLD_LOG_JSON) {
        rld_buf_puts(&o, "\"access\",\"method\":");
        rld_buf_json_str(&o, a->method, strlen(a->method));
        rld_buf_puts(&o, ",\"path\":");
        rld_buf_json_str(&o, a->path, strlen(a->path));
        rld_buf_printf(&o, ",\"status\":%d,\"duration_ms\":%.3f,\"client\":", a->status, ms);
        rld_buf_json_str(&o, a->client, strlen(a->client));
    } else {
        rld_buf_puts(&o, "access: ");
        put_path(&o, a->method);
        rld_buf_putc(&o, ' ');
        put_path(&o, a->path);
        rld_buf_printf(&o, " %d %.3f ms client=%s", a->status, ms, a->client);
    }
    if (a->blocked_by) {
        rld_buf_puts(&o, format == RLD_LOG_JSON ? ",\"blocked_by\":" : " blocked_by=");
        rld_buf_json_str(&o, a->blocked_by, strlen(a->blocked_by));
        rld_buf_puts(&o, format == RLD_LOG_JSON ? ",\"key\":" : " key=");
        rld_buf_json_str(&o, a->key, a->keylen);
    }
    if (format == RLD_LOG_JSON)
        rld_buf_putc(&o, '}');
    line_write(&o);
}
