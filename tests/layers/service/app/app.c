#include "ratelimit.h"
#include "redis/redis.h" /* bad: app sees only the core */
