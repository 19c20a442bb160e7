/* the core: sees include/ only */
#include "ratelimit.h"
#include "app/app.h" /* bad: the core sees no wing */
