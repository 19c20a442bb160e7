/*
 * registry.c - the table of rule types: built-ins first, then plug-ins loaded with dlopen.
 * Every type in the table answers through version 2 of the rule API: a version 1 type is
 * registered as its adapter (rule_v1.c).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

rl_registry *rl_registry_new(void)
{
    rl_registry *reg = calloc(1, sizeof *reg);
    if (reg && rl__register_builtins(reg) != 0) {
        free(reg);
        return NULL;
    }
    return reg;
}

/* Drops the types registered from index n on (a plug-in that failed, or the whole table). */
static void truncate_to(rl_registry *reg, size_t n)
{
    while (reg->n > n)
        rl__rule_v1_free(reg->types[--reg->n]);
}

void rl_registry_free(rl_registry *reg)
{
    if (!reg)
        return;
    truncate_to(reg, 0);
    for (size_t i = 0; i < reg->nplugins; i++)
        dlclose(reg->plugins[i]);
    free(reg);
}

const rl_rule_type *rl_registry_find(const rl_registry *reg, const char *name)
{
    for (size_t i = 0; i < reg->n; i++)
        if (strcmp(reg->types[i]->name, name) == 0)
            return reg->types[i];
    return NULL;
}

size_t rl_registry_count(const rl_registry *reg)
{
    return reg->n;
}

const rl_rule_type *rl_registry_at(const rl_registry *reg, size_t i)
{
    return i < reg->n ? reg->types[i] : NULL;
}

/* The Redis port of a type of version 2 or later, or NULL. */
static const rl_rule_redis *redis_of(const rl_rule_type *t)
{
    return t->api_version >= 2 ? t->redis : NULL;
}

/* A Redis port's tag is [a-z0-9_]+ and each of its parameters one of the type's, held in 64
 * bits. */
static int redis_is_wellformed(const rl_rule_type *t, const rl_rule_redis *r)
{
    if (!r->tag || !*r->tag || strlen(r->tag) > 32 || (r->nparams > 0 && !r->params))
        return 0;
    if (t->api_version >= 6 && (r->nargs > RL_REDIS_ARGS_MAX || (r->nargs > 0) != !!r->args))
        return 0;
    for (const char *c = r->tag; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
            return 0;
    for (size_t i = 0; i < r->nparams; i++) {
        size_t j = 0;
        while (j < t->nparams && (!r->params[i] || strcmp(t->params[j].name, r->params[i]) != 0))
            j++;
        if (j == t->nparams || t->params[j].kind == RL_PARAM_STRINGS)
            return 0;
    }
    return 1;
}

/* What both versions require (a version 1 type's struct is read only up to its own end). */
static int common_wellformed(const rl_rule_type *t)
{
    if (!t->name || !*t->name || !t->default_name)
        return 0;
    if (t->state_size > RL_STATE_MAX || (t->nparams > 0 && !t->params))
        return 0;
    for (size_t i = 0; i < t->nparams; i++) {
        const rl_param_def *d = &t->params[i];
        size_t width = d->kind == RL_PARAM_STRINGS ? sizeof(rl_strings) : sizeof(int64_t);
        if (!d->name || d->offset + width > t->params_size)
            return 0;
    }
    return 1;
}

/* Whether another type already has t's Redis tag. */
static int tag_taken(const rl_registry *reg, const rl_rule_type *t)
{
    const rl_rule_redis *r = redis_of(t);
    for (size_t i = 0; r && i < reg->n; i++) {
        const rl_rule_redis *o = redis_of(reg->types[i]);
        if (o && strcmp(o->tag, r->tag) == 0)
            return 1;
    }
    return 0;
}

const rl_rule_per_unit *rl_rule_type_per_unit(const rl_rule_type *t)
{
    return t->api_version >= 4 ? t->per_unit : NULL;
}

void (*rl_rule_type_period(const rl_rule_type *t))(const void *, rl_ns, rl_ns *, rl_ns *)
{
    return t->api_version >= 7 ? t->period : NULL;
}

void (*rl_rule_release_outcome(const rl_rule_type *t))(const void *, void *, rl_ns, rl_ns, rl_fp,
                                                        const rl_outcome *)
{
    return t->api_version >= 5 ? t->release_outcome : NULL;
}

/* Whether name is NULL (when it may be) or one of t's parameters of kind k. */
static int param_is(const rl_rule_type *t, const char *name, rl_param_kind k, int may_be_null)
{
    if (!name)
        return may_be_null;
    for (size_t i = 0; i < t->nparams; i++)
        if (strcmp(t->params[i].name, name) == 0)
            return t->params[i].kind == k;
    return 0;
}

static int v2_wellformed(const rl_rule_type *t)
{
    const rl_rule_per_unit *pu = rl_rule_type_per_unit(t);
    return t->evaluate && t->eval_size <= RL_EVAL_MAX && (t->state_size == 0 || t->commit) &&
           (!t->redis || redis_is_wellformed(t, t->redis)) &&
           (!pu || (param_is(t, pu->amount, RL_PARAM_AMOUNT, 0) &&
                    param_is(t, pu->window, RL_PARAM_DURATION, 1) &&
                    param_is(t, pu->rate, RL_PARAM_RATE, 1)));
}

int rl_register_rule_type(rl_registry *reg, const rl_rule_type *type)
{
    if (!reg || !type || reg->n >= RL__MAX_TYPES || type->api_version < 1 ||
        type->api_version > RL_RULE_API_VERSION || !common_wellformed(type))
        return -1;
    if (rl_registry_find(reg, type->name) || tag_taken(reg, type))
        return -1;
    if (type->api_version == 1)
        type = rl__rule_v1_adapt(type);
    else if (!v2_wellformed(type))
        return -1;
    if (!type)
        return -1;
    reg->types[reg->n++] = type;
    return 0;
}

int rl_registry_load_plugin(rl_registry *reg, const char *path, rl_err *err)
{
    if (reg->nplugins >= RL__MAX_PLUGINS)
        return rl_errf(err, RL_EPLUGIN, "%s: too many plug-ins (at most %d)", path,
                        RL__MAX_PLUGINS);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return rl_errf(err, RL_EPLUGIN, "%s: %s", path, dlerror());
    for (size_t i = 0; i < reg->nplugins; i++)
        if (reg->plugins[i] == h) {
            /* loaded already (a configuration read again): its types are registered */
            dlclose(h);
            return RL_OK;
        }

    rl_plugin_init_fn init;
    void *sym = dlsym(h, "rl_plugin_init");
    /* ISO C does not convert object pointers to function pointers; copy the bits. */
    memcpy(&init, &sym, sizeof init);
    if (!sym) {
        dlclose(h);
        return rl_errf(err, RL_EPLUGIN, "%s: no rl_plugin_init symbol", path);
    }
    size_t before = reg->n;
    if (init(reg, RL_RULE_API_VERSION) != 0 || reg->n == before) {
        truncate_to(reg, before);
        dlclose(h);
        return rl_errf(err, RL_EPLUGIN,
                        "%s: the plug-in registered no rule type (refused API version %d, a "
                        "duplicate name or a malformed type)",
                        path, RL_RULE_API_VERSION);
    }
    reg->plugins[reg->nplugins++] = h;
    return RL_OK;
}

int rl_strings_find(const rl_strings *s, const char *key, size_t keylen)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        size_t ml = s->len[mid];
        int c = memcmp(s->v[mid], key, ml < keylen ? ml : keylen);
        if (c == 0)
            c = ml < keylen ? -1 : ml > keylen;
        if (c == 0)
            return 1;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}
