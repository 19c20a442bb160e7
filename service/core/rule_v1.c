/*
 * rule_v1.c - rule types written against version 1 of the rule API, answering through
 * version 2.
 *
 * A version 1 type brings the state to now in each of wait, take and status. The registry
 * registers in its place a version 2 type whose evaluate, commit and report call those, so
 * that the stores know only version 2. Its functions need the version 1 type, and version 2
 * functions are handed only the parameters: so an adapted rule's parameters start with a
 * header naming the version 1 type, and the parameter table's offsets are moved past it. The
 * version 1 functions are handed the parameters after the header, as they were written for.
 *
 * The evaluation keeps a pointer to the state (RL_RULE_EVAL_IN_STATE): report runs while the
 * store still holds the key, and calls status and then wait for the next whole unit, as the
 * stores did for every type before version 2.
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"

typedef struct v1_head {
    const rl_rule_type *v1;
    int64_t pad; /* keeps the version 1 parameters as aligned as calloc made them */
} v1_head;

#define HEAD sizeof(v1_head)

typedef struct v1_adapted {
    rl_rule_type t; /* first: what the registry hands out */
    const rl_rule_type *v1;
    rl_param_def params[];
} v1_adapted;

typedef struct v1_ev {
    void *state; /* the state evaluate read, or the one commit took from */
    const char *key;
    size_t keylen;
    rl_ns now;
} v1_ev;

_Static_assert(sizeof(v1_ev) <= RL_EVAL_MAX, "version 1 evaluation fits");

static const rl_rule_type *v1_of(const void *params)
{
    return ((const v1_head *)params)->v1;
}

static void *inner(void *params)
{
    return (char *)params + HEAD;
}

static const void *cinner(const void *params)
{
    return (const char *)params + HEAD;
}

static int v1_prepare(void *pp, char *err, size_t errlen)
{
    return v1_of(pp)->prepare(inner(pp), err, errlen);
}

static void v1_params_free(void *pp)
{
    v1_of(pp)->params_free(inner(pp));
}

static void v1_default_name(const void *pp, char *buf, size_t len)
{
    v1_of(pp)->default_name(cinner(pp), buf, len);
}

static rl_fp v1_capacity(const void *pp)
{
    return v1_of(pp)->capacity(cinner(pp));
}

static void v1_refund(const void *pp, void *st, rl_ns now, rl_ns taken_at, rl_fp amount)
{
    v1_of(pp)->refund(cinner(pp), st, now, taken_at, amount);
}

static void v1_release(const void *pp, void *st, rl_ns now, rl_fp amount)
{
    v1_of(pp)->release(cinner(pp), st, now, amount);
}

static rl_ns v1_idle_at(const void *pp, const void *st)
{
    return v1_of(pp)->idle_at(cinner(pp), st);
}

static void v1_state_free(const void *pp, void *st)
{
    v1_of(pp)->state_free(cinner(pp), st);
}

static size_t v1_state_save(const void *pp, const void *st, void *buf, size_t len)
{
    return v1_of(pp)->state_save(cinner(pp), st, buf, len);
}

static int v1_state_load(const void *pp, void *st, const void *buf, size_t len)
{
    return v1_of(pp)->state_load(cinner(pp), st, buf, len);
}

static rl_ns v1_evaluate(const void *pp, const void *st, const char *key, size_t keylen,
                         rl_ns now, rl_fp cost, rl_eval *ev)
{
    v1_ev *e = (v1_ev *)(void *)ev;
    e->state = (void *)(uintptr_t)st; /* written only through commit's own pointer */
    e->key = key;
    e->keylen = keylen;
    e->now = now;
    return v1_of(pp)->wait(cinner(pp), st, key, keylen, now, cost);
}

static void v1_commit(const void *pp, void *st, rl_eval *ev, rl_fp cost)
{
    v1_ev *e = (v1_ev *)(void *)ev;
    v1_of(pp)->take(cinner(pp), st, e->now, cost);
    e->state = st;
}

static void v1_report(const void *pp, const rl_eval *ev, rl_ns now, rl_rule_status *st)
{
    const rl_rule_type *v1 = v1_of(pp);
    const v1_ev *e = (const v1_ev *)(const void *)ev;
    v1->status(cinner(pp), e->state, now, st);
    st->next = st->remaining < st->limit
                   ? v1->wait(cinner(pp), e->state, e->key, e->keylen, now,
                              rl_status_want(st->limit, st->remaining))
                   : 0;
}

static int v1_wellformed(const rl_rule_type *t)
{
    return t->wait && (t->state_size == 0 || t->take);
}

const rl_rule_type *rl__rule_v1_adapt(const rl_rule_type *v1)
{
    if (!v1_wellformed(v1) || v1->params_size > SIZE_MAX - HEAD)
        return NULL;
    v1_adapted *a = calloc(1, sizeof *a + v1->nparams * sizeof(rl_param_def));
    if (!a)
        return NULL;
    /* a version 1 struct is the prefix of version 2 up to eval_size */
    memcpy(&a->t, v1, offsetof(rl_rule_type, eval_size));
    a->v1 = v1;
    for (size_t i = 0; i < v1->nparams; i++) {
        a->params[i] = v1->params[i];
        a->params[i].offset += HEAD;
    }
    rl_rule_type *t = &a->t;
    t->api_version = RL_RULE_API_VERSION;
    t->params = v1->nparams ? a->params : NULL;
    t->params_size = v1->params_size + HEAD;
    t->flags |= RL_RULE_EVAL_IN_STATE;
    t->prepare = v1->prepare ? v1_prepare : NULL;
    t->params_free = v1->params_free ? v1_params_free : NULL;
    t->default_name = v1_default_name;
    t->capacity = v1->capacity ? v1_capacity : NULL;
    t->wait = NULL;
    t->take = NULL;
    t->status = NULL;
    t->refund = v1->refund ? v1_refund : NULL;
    t->release = v1->release ? v1_release : NULL;
    t->idle_at = v1->idle_at ? v1_idle_at : NULL;
    t->state_free = v1->state_free ? v1_state_free : NULL;
    t->state_save = v1->state_save ? v1_state_save : NULL;
    t->state_load = v1->state_load ? v1_state_load : NULL;
    t->eval_size = sizeof(v1_ev);
    t->evaluate = v1_evaluate;
    t->commit = v1->take ? v1_commit : NULL;
    t->report = v1->status ? v1_report : NULL;
    return t;
}

void rl__rule_v1_params_init(const rl_rule_type *t, void *params)
{
    if (t->evaluate == v1_evaluate)
        ((v1_head *)params)->v1 = ((const v1_adapted *)(const void *)t)->v1;
}

void rl__rule_v1_free(const rl_rule_type *t)
{
    if (t && t->evaluate == v1_evaluate)
        free((void *)(uintptr_t)t);
}
