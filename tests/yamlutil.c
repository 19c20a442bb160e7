/*
 * yamlutil.c - see yamlutil.h.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "yamlutil.h"

void yt_open(yt *t, const char *yaml, rl_store *store)
{
    yt_open_beside(t, yaml, NULL, store);
}

void yt_open_beside(yt *t, const char *yaml, const char *json, rl_store *store)
{
    rl_err err = {{0}};
    rl_config *cfg, *base = NULL;
    rld_yconf *c = rld_yconf_new();
    memset(t, 0, sizeof *t);
    t->reg = rl_registry_new();
    ck_assert_ptr_nonnull(c);
    if (json) {
        rld_settings set;
        int jrc = rld_config_parse(json, strlen(json), t->reg, &set, &base, &err);
        ck_assert_msg(jrc == RL_OK, "JSON refused: %s", err.msg);
        rld_settings_clear(&set);
    }
    int rc = rld_yaml_parse(c, "test.yaml", yaml, strlen(yaml), &err);
    ck_assert_msg(rc == RL_OK, "refused: %s", err.msg);
    rc = rld_yrls_new_beside(c, t->reg, base, &t->y, &cfg, &err);
    ck_assert_msg(rc == RL_OK, "refused: %s", err.msg);
    rc = rl_limiter_new(cfg, store, &t->lim, &err);
    ck_assert_msg(rc == RL_OK, "limiter refused: %s", err.msg);
}

void yt_close(yt *t)
{
    rl_limiter_free(t->lim);
    rld_yrls_free(t->y);
    rl_registry_free(t->reg);
}

const char *yt_refused(const char *yaml)
{
    static _Thread_local rl_err err;
    rld_yconf *c = rld_yconf_new();
    rl_registry *reg = rl_registry_new();
    int rc = rld_yaml_parse(c, "bad.yaml", yaml, strlen(yaml), &err);
    if (rc == RL_OK) {
        rld_yrls *y;
        rl_config *cfg;
        rc = rld_yrls_new(c, reg, &y, &cfg, &err);
        if (rc == RL_OK) {
            rl_config_free(cfg);
            rld_yrls_free(y);
        }
        c = NULL;
    }
    rld_yconf_free(c);
    rl_registry_free(reg);
    ck_assert_msg(rc != RL_OK, "accepted: %s", yaml);
    return err.msg;
}

typedef struct parsed {
    char text[2048];
    rld_yentry e[16][8];
    rld_ydescreq d[16];
    size_t n;
} parsed;

/* Splits spec in place into descriptors (see yt_ask). */
static void parse(parsed *p, const char *spec)
{
    char *save1, *save2;
    snprintf(p->text, sizeof p->text, "%s", spec);
    memset(p->d, 0, sizeof p->d);
    p->n = 0;
    for (char *ds = strtok_r(p->text, ";", &save1); ds; ds = strtok_r(NULL, ";", &save1)) {
        rld_ydescreq *d = &p->d[p->n];
        d->entries = p->e[p->n];
        char *opt;
        while ((opt = strrchr(ds, '@'))) {
            *opt++ = '\0';
            if (opt[0] == 'h') {
                d->has_hits = 1;
                d->hits = strtoull(opt + 1, NULL, 10);
            } else if (opt[0] == 'o') {
                char unit[16];
                d->has_override = 1;
                ck_assert_int_eq(sscanf(opt + 1, "%u/%15s", &d->override_rpu, unit), 2);
                d->override_unit = rld_unit_parse(unit);
            }
        }
        for (char *es = strtok_r(ds, ",", &save2); es; es = strtok_r(NULL, ",", &save2)) {
            while (*es == ' ')
                es++;
            char *end = es + strlen(es);
            while (end > es && end[-1] == ' ')
                *--end = '\0';
            char *eq = strchr(es, '=');
            ck_assert_ptr_nonnull(eq);
            *eq = '\0';
            p->e[p->n][d->nentries++] = (rld_yentry){es, strlen(es), eq + 1, strlen(eq + 1)};
        }
        p->n++;
    }
}

rld_ycode yt_ask(yt *t, const char *domain, double now, unsigned hits_addend, const char *spec)
{
    static _Thread_local parsed p;
    rl_err err = {{0}};
    parse(&p, spec);
    rld_yreq r = {.domain = domain,
                  .domain_len = strlen(domain),
                  .desc = p.d,
                  .ndesc = p.n,
                  .hits_addend = hits_addend,
                  .now = (rl_ns)(now * 1e9 + 0.5)};
    int rc = rld_yrls_decide(t->y, t->lim, &r, t->st, &t->overall, &err);
    ck_assert_msg(rc == RL_OK, "refused: %s", err.msg);
    return t->overall;
}

const char *yt_ask_err(yt *t, const char *domain, const char *spec)
{
    static _Thread_local parsed p;
    static _Thread_local rl_err err;
    parse(&p, spec);
    rld_yreq r = {.domain = domain, .domain_len = strlen(domain), .desc = p.d, .ndesc = p.n};
    int rc = rld_yrls_decide(t->y, t->lim, &r, t->st, &t->overall, &err);
    ck_assert_int_ne(rc, RL_OK);
    return err.msg;
}
