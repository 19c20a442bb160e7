/*
 * usage.c - a configuration's dimensions and prices, a request's dollars, and what a
 * settlement gives back in each unit (ratelimit.h, ratelimit_store.h).
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"

int rl_config_add_dimension(rl_config *cfg, const char *name, rl_err *err)
{
    const char *why = rl__name_problem(name);
    if (why)
        return rl_errf(err, RL_EINVAL, "dimensions: \"%s\" %s", name, why);
    if (!strcmp(name, "cost") || !strcmp(name, "requests") || !strcmp(name, "usd"))
        return rl_errf(err, RL_EINVAL, "dimensions: \"%s\" is a unit of its own", name);
    if (rl_config_dimension(cfg, name, strlen(name)) >= 0)
        return rl_errf(err, RL_EINVAL, "dimensions: \"%s\" is declared twice", name);
    if (cfg->ndims == RL_MAX_DIMS)
        return rl_errf(err, RL_EINVAL, "dimensions: at most %d", RL_MAX_DIMS);
    char *copy = rl__strndup(name, strlen(name));
    if (!copy)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    cfg->dims[cfg->ndims++] = copy;
    return RL_OK;
}

long rl_config_dimension(const rl_config *cfg, const char *name, size_t len)
{
    for (size_t k = 0; k < cfg->ndims; k++)
        if (strlen(cfg->dims[k]) == len && memcmp(cfg->dims[k], name, len) == 0)
            return (long)k;
    return -1;
}

int rl_config_set_price_by(rl_config *cfg, const char *descriptor, rl_err *err)
{
    const char *why = rl__name_problem(descriptor);
    if (why)
        return rl_errf(err, RL_EINVAL, "prices.by: %s", why);
    if (cfg->price_by)
        return rl_errf(err, RL_EINVAL, "prices.by: set twice");
    if (!(cfg->price_by = rl__strndup(descriptor, strlen(descriptor))))
        return rl_errf(err, RL_ENOMEM, "out of memory");
    return RL_OK;
}

int rl_config_add_price(rl_config *cfg, const char *model, const rl_fp *per_million,
                        rl_err *err)
{
    size_t n = strlen(model);
    if (n == 0 || n > RL_KEY_MAX)
        return rl_errf(err, RL_EINVAL, "prices: a model name must be 1 to %d bytes", RL_KEY_MAX);
    if (rl_config_price(cfg, model, n))
        return rl_errf(err, RL_EINVAL, "prices.%s: given twice", model);
    for (size_t k = 0; k < RL_MAX_DIMS; k++)
        if (per_million[k] < 0 || per_million[k] > RL_PRICE_MAX)
            return rl_errf(err, RL_EINVAL, "prices.%s: must be from 0 to 1000000 dollars", model);
    rl_price *v = realloc(cfg->prices, (cfg->nprices + 1) * sizeof *v);
    if (!v)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    cfg->prices = v;
    rl_price *p = &v[cfg->nprices];
    if (!(p->model = rl__strndup(model, n)))
        return rl_errf(err, RL_ENOMEM, "out of memory");
    memcpy(p->per_million, per_million, sizeof p->per_million);
    cfg->nprices++;
    return RL_OK;
}

const rl_price *rl_config_price(const rl_config *cfg, const char *model, size_t len)
{
    for (size_t i = 0; i < cfg->nprices; i++)
        if (strlen(cfg->prices[i].model) == len && memcmp(cfg->prices[i].model, model, len) == 0)
            return &cfg->prices[i];
    return NULL;
}

void rl__config_free_usage(rl_config *cfg)
{
    for (size_t k = 0; k < cfg->ndims; k++)
        free(cfg->dims[k]);
    for (size_t i = 0; i < cfg->nprices; i++)
        free(cfg->prices[i].model);
    free(cfg->prices);
    free(cfg->price_by);
}

/* amount (1e-6 units) x price (1e-6 dollars per million units) is 1e-18 dollars: the sum is
 * exact in 128 bits (at most 8 x 1e18 x 1e12), then divided by 1e9 into nano-dollars, which
 * a rule counting dollars keeps as rl_fp units (RL_USD_SCALE). */
rl_fp rl_usage_usd(const rl_usage *u, const rl_price *p)
{
    rl__u128 sum = 0;
    for (unsigned k = 0; k < RL_MAX_DIMS; k++)
        if (u->given >> k & 1u)
            sum += (rl__u128)(uint64_t)u->v[k] * (uint64_t)p->per_million[k];
    const rl__u128 nano = 1000000000u;
    rl__u128 usd = (sum + nano - 1) / nano;
    return usd > (rl__u128)RL_FP_MAX ? RL_FP_MAX : (rl_fp)usd;
}

static void settled(rl_settlement *out, unsigned u, rl_fp reserved, rl_fp actual)
{
    rl_settled *s = &out->unit[u];
    s->reserved = reserved;
    s->actual = actual;
    s->refunded = actual < reserved ? reserved - actual : 0;
    s->charged = actual > reserved ? actual - reserved : 0;
    out->units |= 1u << u;
}

void rl_settle_amounts(rl_fp cost, const rl_fp *amt, const rl_price *price, const rl_actual *a,
                       rl_settlement *out, rl_fp act[RL_UNITS])
{
    memset(out, 0, sizeof *out);
    act[RL_UNIT_COST] = a->has_cost ? a->cost : cost;
    act[RL_UNIT_REQUESTS] = 0;
    settled(out, RL_UNIT_COST, cost, act[RL_UNIT_COST]);
    out->units = 0; /* cost has fields of its own */
    out->reserved = out->unit[RL_UNIT_COST].reserved;
    out->actual = out->unit[RL_UNIT_COST].actual;
    out->refunded = out->unit[RL_UNIT_COST].refunded;
    out->charged = out->unit[RL_UNIT_COST].charged;
    rl_usage used = {0, {0}};
    for (unsigned k = 0; k < RL_MAX_DIMS; k++) {
        unsigned u = RL_UNIT_DIM0 + k;
        rl_fp r = amt ? amt[u] : 0;
        int given = a->usage.given >> k & 1u;
        act[u] = given ? a->usage.v[k] : r;
        used.v[k] = act[u];
        used.given |= 1u << k;
        if (r || given)
            settled(out, u, r, act[u]);
    }
    rl_fp r = amt ? amt[RL_UNIT_USD] : 0;
    act[RL_UNIT_USD] = price ? rl_usage_usd(&used, price) : r;
    if (price || r)
        settled(out, RL_UNIT_USD, r, act[RL_UNIT_USD]);
}
