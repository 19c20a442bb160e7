/*
 * fallback.c - see fallback.h.
 *
 * The local store is an ordinary memory store that sees scaled copies of the rules: one copy of
 * every level's and tier's list per fleet size (rebuilt by tick when the size changes), and a
 * copy made on the spot for a key's custom quota. Its resolver maps the limiter's rule to the
 * copy, so settling and idle sweeps use the scaled rules too.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fallback.h"

typedef struct fb_store {
    rl_store base;
    rl_store *inner, *local;
    rld_fallback_options opt;
    const rl_config *cfg;
    const rl_resolver *res; /* the limiter's */
    rl_resolver local_res;  /* the same rules, scaled */
    pthread_mutex_t mu;     /* guards fleet and the scaled lists */
    unsigned fleet;
    rl_rules *level_rules[RL_MAX_LEVELS]; /* NULL for the tiered level */
    rl_rules **tier_rules;
    uint64_t count[RL_MAX_LEVELS][3];
} fb_store;

static int oom(rl_err *err)
{
    if (err)
        snprintf(err->msg, sizeof err->msg, "out of memory");
    return RL_ENOMEM;
}

/* A copy of src with every amount and rate divided by n (rl_param_share: rounded down, so the
 * fleet's shares never add up to more than the rule). The copy has one reference. NULL when out of memory or a parameter is refused. */
static rl_rules *scale_rules(const rl_registry *reg, const rl_rules *src, unsigned n)
{
    rl_err err;
    rl_rules *rs = rl_rules_new(src->n);
    int rc = rs ? RL_OK : RL_ENOMEM;
    for (size_t i = 0; rc == RL_OK && i < src->n; i++) {
        const rl_rule *o = &src->v[i];
        rl_rule *r = &rs->v[i];
        rc = rl_rule_init(r, reg, o->type->name, &err);
        for (size_t k = 0; rc == RL_OK && k < o->type->nparams; k++) {
            const rl_param_def *d = &o->type->params[k];
            if (d->kind == RL_PARAM_STRINGS) {
                const rl_strings *s = rl_rule_get_strings(o, d);
                if (!o->given[k]) /* an optional list not given stays so ("week_start") */
                    continue;
                rc = rl_rule_set_strings(r, d->name, (const char *const *)s->v, s->len, s->n, &err);
                continue;
            }
            double v = rl_rule_get_number(o, d);
            if (d->kind == RL_PARAM_AMOUNT || d->kind == RL_PARAM_RATE)
                v = rl_fp_to_double(rl_param_share(d, rl_fp_from_double(v), n));
            rc = rl_rule_set_number(r, d->name, v, &err);
        }
        r->unit = o->unit; /* a rule counting dollars is scaled again when finished */
        if (rc == RL_OK && o->reserved_fraction > 0)
            rc = rl_rule_set_reserved(r, o->reserved_fraction, o->reserved_min_priority, &err);
        if (rc == RL_OK)
            rc = rl_rule_set_name(r, o->name, &err);
        r->shadow = o->shadow;
        r->charge = o->charge;
        if (rc == RL_OK)
            rc = rl_rule_finish(r, &err);
    }
    if (rc != RL_OK) {
        rl_rules_unref(rs);
        return NULL;
    }
    return rs;
}

/* Rebuilds the scaled lists for fleet size n (mu held). Keeps the old ones on failure. */
static int rescale(fb_store *fs, unsigned n)
{
    const rl_config *cfg = fs->cfg;
    rl_rules *lv[RL_MAX_LEVELS] = {0}, **tv = calloc(cfg->ntiers ? cfg->ntiers : 1, sizeof *tv);
    int ok = tv != NULL;
    for (size_t l = 0; ok && l < cfg->nlevels; l++)
        if (cfg->levels[l].rules)
            ok = (lv[l] = scale_rules(cfg->reg, cfg->levels[l].rules, n)) != NULL;
    for (size_t t = 0; ok && t < cfg->ntiers; t++)
        ok = (tv[t] = scale_rules(cfg->reg, cfg->tiers[t].rules, n)) != NULL;
    if (!ok) {
        for (size_t l = 0; l < RL_MAX_LEVELS; l++)
            rl_rules_unref(lv[l]);
        for (size_t t = 0; tv && t < cfg->ntiers; t++)
            rl_rules_unref(tv[t]);
        free(tv);
        return -1;
    }
    for (size_t l = 0; l < RL_MAX_LEVELS; l++) {
        rl_rules_unref(fs->level_rules[l]);
        fs->level_rules[l] = lv[l];
    }
    for (size_t t = 0; fs->tier_rules && t < cfg->ntiers; t++)
        rl_rules_unref(fs->tier_rules[t]);
    free(fs->tier_rules);
    fs->tier_rules = tv;
    fs->fleet = n;
    return 0;
}

static unsigned fleet_now(const fb_store *fs)
{
    if (fs->opt.fleet_size)
        return fs->opt.fleet_size;
    unsigned n = fs->opt.peers ? fs->opt.peers(fs->opt.peers_ctx) : 0;
    return n ? n : 1;
}

/* The scaled list that holds the counterpart of rule r of level l (not a custom list), with a
 * reference; NULL when r is in none of the configuration's lists. */
static rl_rules *scaled_list(fb_store *fs, size_t l, const rl_rule *r)
{
    const rl_config *cfg = fs->cfg;
    rl_rules *rs = NULL;
    pthread_mutex_lock(&fs->mu);
    if (!cfg->levels[l].tiered) {
        rs = fs->level_rules[l];
    } else {
        for (size_t t = 0; t < cfg->ntiers && !rs; t++) {
            const rl_rules *o = cfg->tiers[t].rules;
            if (r >= o->v && r < o->v + o->n)
                rs = fs->tier_rules[t];
        }
    }
    rl_rules_ref(rs);
    pthread_mutex_unlock(&fs->mu);
    return rs;
}

static const rl_rule *local_rule_at(void *ctx, size_t level, size_t slot, const char *key,
                                    size_t keylen, rl_rules **ref)
{
    fb_store *fs = ctx;
    rl_rules *oref = NULL, *rs;
    *ref = NULL;
    const rl_rule *r = fs->res->rule_at(fs->res->ctx, level, slot, key, keylen, &oref);
    if (!r)
        return NULL;
    if (oref) {
        pthread_mutex_lock(&fs->mu);
        unsigned n = fs->fleet;
        pthread_mutex_unlock(&fs->mu);
        rs = scale_rules(fs->cfg->reg, oref, n);
        rl_rules_unref(oref);
    } else {
        rs = scaled_list(fs, level, r);
    }
    if (!rs || slot >= rs->n) {
        rl_rules_unref(rs);
        return NULL;
    }
    *ref = rs;
    return &rs->v[slot];
}

/* ---- methods ------------------------------------------------------------------------------- */

/* Drops the scaled lists of the configuration attached (fs->cfg's). */
static void drop_scaled(fb_store *fs)
{
    for (size_t l = 0; l < RL_MAX_LEVELS; l++) {
        rl_rules_unref(fs->level_rules[l]);
        fs->level_rules[l] = NULL;
    }
    for (size_t t = 0; fs->tier_rules && t < fs->cfg->ntiers; t++)
        rl_rules_unref(fs->tier_rules[t]);
    free(fs->tier_rules);
    fs->tier_rules = NULL;
}

/* Attached again (a reload taking the store over): the inner store follows cfg, and the local
 * store starts afresh over it (what it held was for the levels of the configuration before). */
static int fb_attach(void *cls, const rl_config *cfg, const rl_resolver *res, rl_err *err)
{
    fb_store *fs = cls;
    int again = fs->cfg != NULL;
    int rc = fs->inner->ops->attach(fs->inner->cls, cfg, res, err);
    if (rc != RL_OK)
        return rc;
    rl_store *local = again ? rl_memory_store_new() : fs->local;
    if (!local)
        return oom(err);
    pthread_mutex_lock(&fs->mu);
    if (again)
        drop_scaled(fs);
    fs->cfg = cfg;
    fs->res = res;
    int bad = rescale(fs, fleet_now(fs));
    pthread_mutex_unlock(&fs->mu);
    fs->local_res.rule_at = local_rule_at;
    fs->local_res.ctx = fs;
    rc = bad ? oom(err) : local->ops->attach(local->cls, cfg, &fs->local_res, err);
    if (again && rc == RL_OK) {
        fs->local->ops->destroy(fs->local->cls);
        fs->local = local;
    } else if (again) {
        local->ops->destroy(local->cls);
    }
    return rc;
}

/* Decides every level by its mode, the store being unavailable. */
static int fall_back(fb_store *fs, const rl_plan *plan, rl_decision *d, rl_err *err)
{
    rl_ns retry = fs->opt.closed_retry > 0 ? fs->opt.closed_retry : RL_NS_PER_SEC;
    int closed = 0, seen[RL_MAX_LEVELS] = {0};
    size_t nlocal = 0;

    for (size_t i = 0; i < plan->n; i++) {
        rl_applied *a = &d->applied[i];
        rld_on_error m = fs->opt.mode[a->level];
        if (!seen[a->level]) {
            seen[a->level] = 1;
            __atomic_add_fetch(&fs->count[a->level][m], 1, __ATOMIC_RELAXED);
        }
        a->has_status = 0;
        if (m == RLD_ON_ERROR_OPEN) {
            a->wait = 0;
            a->fallback = RL_FALLBACK_OPEN;
        } else if (m == RLD_ON_ERROR_CLOSED) {
            a->wait = retry;
            a->fallback = RL_FALLBACK_CLOSED;
            closed = 1;
        } else {
            nlocal++;
        }
    }
    if (nlocal == 0 && !(plan->flags & RL_RESERVE))
        return RL_OK;

    /* the local levels, with scaled rules, in a plan of their own */
    rl_plan *lp = malloc(sizeof *lp);
    rl_decision *ld = malloc(sizeof *ld);
    rl_rules *refs[RL_MAX_APPLIED], *custom = NULL;
    size_t nrefs = 0, map[RL_MAX_APPLIED];
    int rc = lp && ld ? RL_OK : RL_ENOMEM;
    if (rc == RL_OK) {
        memset(ld, 0, offsetof(rl_decision, keybuf));
        ld->blocked = -1;
        ld->now = plan->now;
    }
    for (size_t i = 0; rc == RL_OK && i < plan->n; i++) {
        const rl_applied *a = &d->applied[i];
        if (fs->opt.mode[a->level] != RLD_ON_ERROR_LOCAL)
            continue;
        rl_rules *list;
        if (d->held && a->rule >= d->held->v && a->rule < d->held->v + d->held->n) {
            if (!custom) {
                pthread_mutex_lock(&fs->mu);
                unsigned n = fs->fleet;
                pthread_mutex_unlock(&fs->mu);
                custom = scale_rules(fs->cfg->reg, d->held, n);
            }
            list = custom;
            rl_rules_ref(list);
        } else {
            list = scaled_list(fs, a->level, a->rule);
        }
        if (!list || a->slot >= list->n) {
            rl_rules_unref(list);
            rc = RL_ENOMEM;
            break;
        }
        refs[nrefs++] = list;
        size_t j = ld->napplied++;
        const rl_rule *r = &list->v[a->slot];
        map[j] = i;
        ld->applied[j] = *a;
        ld->applied[j].rule = r;
        lp->items[j] = plan->items[i];
        if (plan->items[i].need > plan->items[i].cost) /* the reserved headroom applies */
            lp->items[j].need = plan->items[i].cost + r->reserved;
    }
    if (rc == RL_OK) {
        lp->n = ld->napplied;
        lp->cost = plan->cost;
        lp->amt = plan->amt;
        lp->price = plan->price;
        lp->flags = plan->flags | (closed ? RL_DRY_RUN : 0);
        lp->now = plan->now;
        rc = fs->local->ops->decide(fs->local->cls, lp, ld, err);
    } else {
        oom(err);
    }
    if (rc == RL_OK) {
        for (size_t j = 0; j < ld->napplied; j++) {
            rl_applied *a = &d->applied[map[j]];
            a->wait = ld->applied[j].wait;
            a->has_status = ld->applied[j].has_status;
            if (a->has_status) /* worked out now: ld and its rules go */
                rl_applied_set_status(a, rl_decision_status(ld, j));
            a->shadow_denied = ld->applied[j].shadow_denied;
            a->fallback = RL_FALLBACK_LOCAL;
        }
        memcpy(d->reservation, ld->reservation, sizeof d->reservation);
    }
    while (nrefs > 0)
        rl_rules_unref(refs[--nrefs]);
    rl_rules_unref(custom);
    free(lp);
    free(ld);
    return rc;
}

static int fb_decide(void *cls, const rl_plan *plan, rl_decision *d, rl_err *err)
{
    fb_store *fs = cls;
    int rc = fs->inner->ops->decide(fs->inner->cls, plan, d, err);
    return rc == RL_ESTORE ? fall_back(fs, plan, d, err) : rc;
}

static void fb_decide_many(void *cls, const rl_plan *const *plans, rl_decision *const *ds,
                           size_t n, int *rc, rl_err *errs)
{
    fb_store *fs = cls;
    rl_store *in = fs->inner;
    if (in->ops->decide_many)
        in->ops->decide_many(in->cls, plans, ds, n, rc, errs);
    for (size_t i = 0; i < n; i++) {
        if (!in->ops->decide_many)
            rc[i] = in->ops->decide(in->cls, plans[i], ds[i], &errs[i]);
        if (rc[i] == RL_ESTORE)
            rc[i] = fall_back(fs, plans[i], ds[i], &errs[i]);
    }
}

static int fb_settle(void *cls, const char *id, const rl_actual *actual, rl_ns now,
                     const rl_outcome *o,
                     rl_settlement *out, rl_err *err)
{
    fb_store *fs = cls;
    int rc = fs->local->ops->settle(fs->local->cls, id, actual, now, o, out, err);
    return rc == RL_ENOTFOUND
               ? fs->inner->ops->settle(fs->inner->cls, id, actual, now, o, out, err)
               : rc;
}

static int fb_reset(void *cls, size_t level, const char *key, size_t keylen, size_t *cleared,
                    rl_err *err)
{
    fb_store *fs = cls;
    size_t local = 0;
    if (fs->local->ops->reset)
        fs->local->ops->reset(fs->local->cls, level, key, keylen, &local, NULL);
    int rc = fs->inner->ops->reset ? fs->inner->ops->reset(fs->inner->cls, level, key, keylen,
                                                           cleared, err)
                                   : rl_errf(err, RL_EINVAL, "store: cannot reset a key");
    if (rc == RL_OK)
        *cleared += local;
    return rc;
}

static int fb_release(void *cls, const char *id, rl_ns now, const rl_outcome *o, rl_err *err)
{
    fb_store *fs = cls;
    int rc = fs->local->ops->release(fs->local->cls, id, now, o, err);
    return rc == RL_ENOTFOUND ? fs->inner->ops->release(fs->inner->cls, id, now, o, err) : rc;
}

static void fb_tick(void *cls, rl_ns now)
{
    fb_store *fs = cls;
    fs->inner->ops->tick(fs->inner->cls, now);
    unsigned n = fleet_now(fs);
    pthread_mutex_lock(&fs->mu);
    if (n != fs->fleet)
        rescale(fs, n);
    pthread_mutex_unlock(&fs->mu);
    fs->local->ops->tick(fs->local->cls, now);
}

static size_t fb_keys(void *cls, size_t level)
{
    fb_store *fs = cls;
    return fs->inner->ops->keys(fs->inner->cls, level);
}

static void fb_stats(void *cls, rl_stats *out)
{
    fb_store *fs = cls;
    rl_stats a = {0}, b = {0};
    fs->inner->ops->stats(fs->inner->cls, &a);
    fs->local->ops->stats(fs->local->cls, &b);
    out->reservations_active = a.reservations_active + b.reservations_active;
    out->reservations_expired = a.reservations_expired + b.reservations_expired;
    out->key_states = a.key_states; /* the bound is the inner store's */
    out->key_states_max = a.key_states_max;
}

static void fb_destroy(void *cls)
{
    fb_store *fs = cls;
    fs->inner->ops->destroy(fs->inner->cls);
    fs->local->ops->destroy(fs->local->cls);
    if (fs->cfg)
        drop_scaled(fs);
    pthread_mutex_destroy(&fs->mu);
    free(fs);
}

static const rl_store_ops fallback_ops = {
    .name = "fallback",
    .attach = fb_attach,
    .decide = fb_decide,
    .decide_many = fb_decide_many,
    .settle = fb_settle,
    .reset = fb_reset,
    .release = fb_release,
    .tick = fb_tick,
    .keys = fb_keys,
    .stats = fb_stats,
    .destroy = fb_destroy,
};

int rld_fallback_store_new(rl_store *inner, const rld_fallback_options *opt, rl_store **out,
                           rl_err *err)
{
    *out = NULL;
    fb_store *fs = calloc(1, sizeof *fs);
    rl_store *local = rl_memory_store_new();
    if (!fs || !local) {
        free(fs);
        if (local)
            local->ops->destroy(local->cls);
        inner->ops->destroy(inner->cls);
        return oom(err);
    }
    fs->inner = inner;
    fs->local = local;
    fs->opt = *opt;
    fs->fleet = 1;
    pthread_mutex_init(&fs->mu, NULL);
    fs->base.ops = &fallback_ops;
    fs->base.cls = fs;
    *out = &fs->base;
    return RL_OK;
}

uint64_t rld_fallback_count(rl_store *st, size_t level, rld_on_error mode)
{
    fb_store *fs = st->cls;
    if (level >= RL_MAX_LEVELS || (unsigned)mode > RLD_ON_ERROR_LOCAL)
        return 0;
    return __atomic_load_n(&fs->count[level][mode], __ATOMIC_RELAXED);
}

unsigned rld_fallback_fleet(rl_store *st)
{
    fb_store *fs = st->cls;
    pthread_mutex_lock(&fs->mu);
    unsigned n = fs->fleet;
    pthread_mutex_unlock(&fs->mu);
    return n;
}
