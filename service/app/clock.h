/*
 * clock.h - the monotonic clock, for timeouts, durations and housekeeping intervals (never for
 * decisions: those take the wall clock that main.c passes in, or the manual clock).
 */
#ifndef RLD_APP_CLOCK_H
#define RLD_APP_CLOCK_H

#include "ratelimit.h"

/* CLOCK_MONOTONIC in nanoseconds (also the clock of condition variables made with
 * pthread_condattr_setclock(CLOCK_MONOTONIC)). */
rl_ns rld_mono_ns(void);

#endif
