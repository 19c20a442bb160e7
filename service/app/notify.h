/*
 * notify.h - the daemon's state told to its service manager (systemd's notify protocol, as
 * sd_notify(3) describes it): one datagram of "VAR=value" lines to the AF_UNIX socket named
 * by $NOTIFY_SOCKET, a path, or an abstract name when it starts with '@'. Without
 * $NOTIFY_SOCKET nothing is sent, so the daemon runs the same outside systemd.
 *
 * What ratelimitd sends: READY=1 once its listeners accept and its state is loaded;
 * RELOADING=1 (with MONOTONIC_USEC) and READY=1 around a reload, whether it was taken or
 * refused; STOPPING=1 at SIGTERM or SIGINT; WATCHDOG=1 every rld_notify_watchdog_ns() when
 * the unit has WatchdogSec=.
 */
#ifndef RLD_APP_NOTIFY_H
#define RLD_APP_NOTIFY_H

#include "ratelimit.h"

/* Sends state (one or more "VAR=value" lines separated by '\n') in one datagram. Returns 1
 * when sent, 0 when $NOTIFY_SOCKET is not set, -1 when it names no usable socket or the send
 * fails (errno says why). Safe from any thread; nothing stays open between calls. */
int rld_notify(const char *state);

/* rld_notify of a formatted state; the text is cut at 1024 bytes. */
int rld_notifyf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* How often to send WATCHDOG=1: half of $WATCHDOG_USEC, in nanoseconds, when it is set and
 * $WATCHDOG_PID is unset or this process's pid; otherwise 0 (no watchdog asked for). */
rl_ns rld_notify_watchdog_ns(void);

#endif
