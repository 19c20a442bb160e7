/*
 * clock.c - see clock.h.
 */
#include <time.h>

#include "clock.h"

rl_ns rld_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (rl_ns)ts.tv_sec * RL_NS_PER_SEC + ts.tv_nsec;
}
