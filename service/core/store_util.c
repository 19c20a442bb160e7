/*
 * store_util.c - what every store does the same way (ratelimit_store.h): reservation ids and
 * the shares of a divided rule.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ratelimit_store.h"

uint64_t rl_store_permute(uint64_t x)
{
    /* the splitmix64 finaliser, a bijection */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

void rl_store_id_format(char id[RL_RESERVATION_ID], uint64_t v)
{
    snprintf(id, RL_RESERVATION_ID, "r-%016" PRIx64, v);
}

int rl_store_id_parse(const char *id, uint64_t *out)
{
    uint64_t v = 0;
    if (strlen(id) != RL_RESERVATION_ID - 1 || id[0] != 'r' || id[1] != '-')
        return -1;
    for (int i = 2; i < RL_RESERVATION_ID - 1; i++) {
        char c = id[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

int64_t rl_param_share(const rl_param_def *d, int64_t v, unsigned n)
{
    if (n <= 1 || v <= 0 || (d->kind != RL_PARAM_AMOUNT && d->kind != RL_PARAM_RATE))
        return v;
    int64_t least = rl_fp_from_double(d->min);
    if (least < 1)
        least = 1;
    int64_t share = v / (int64_t)n;
    return share < least ? least : share;
}
