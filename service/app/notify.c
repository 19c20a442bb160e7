/*
 * notify.c - see notify.h. The few lines of sd_notify the daemon needs, without libsystemd.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "notify.h"

int rld_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa;
    size_t n = path ? strlen(path) : 0;
    if (!path || !*path)
        return 0;
    /* a path, or '@' and an abstract name; sun_path need not end in a NUL */
    if ((path[0] != '/' && path[0] != '@') || n < 2 || n > sizeof sa.sun_path) {
        errno = EINVAL;
        return -1;
    }
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    ssize_t w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
    int e = errno;
    close(fd);
    errno = e;
    return w == (ssize_t)strlen(state) ? 1 : -1;
}

int rld_notifyf(const char *fmt, ...)
{
    char state[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(state, sizeof state, fmt, ap);
    va_end(ap);
    return rld_notify(state);
}

/* A whole positive decimal number, or 0. */
static unsigned long long env_number(const char *name)
{
    const char *v = getenv(name);
    char *end;
    if (!v || *v < '0' || *v > '9')
        return 0;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    return errno || *end ? 0 : n;
}

rl_ns rld_notify_watchdog_ns(void)
{
    unsigned long long usec = env_number("WATCHDOG_USEC");
    const char *pid = getenv("WATCHDOG_PID");
    if (pid && env_number("WATCHDOG_PID") != (unsigned long long)getpid())
        return 0;
    if (usec == 0 || usec > (unsigned long long)INT64_MAX / 1000)
        return 0;
    return (rl_ns)(usec * 1000 / 2);
}
