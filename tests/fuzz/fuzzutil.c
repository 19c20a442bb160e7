/*
 * fuzzutil.c - see fuzz.h.
 */
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "fuzz.h"

char *fz_copy(const uint8_t *data, size_t size)
{
    char *p = malloc(size + 1);
    FZ_CHECK(p != NULL, "out of memory");
    if (size)
        memcpy(p, data, size);
    p[size] = '\0';
    return p;
}

#define MAX_MADE 8
static struct {
    rl_limiter *lim;
    rl_registry *reg;
} made[MAX_MADE];

rl_limiter *fz_limiter(const char *json)
{
    rl_registry *reg = rl_registry_new();
    rld_settings set;
    rl_config *cfg;
    rl_limiter *lim = NULL;
    rl_err err = {{0}};
    FZ_CHECK(reg != NULL, "out of memory");
    int rc = rld_config_parse(json, strlen(json), reg, &set, &cfg, &err);
    FZ_CHECK(rc == RL_OK, "the target's configuration: %s", err.msg);
    rld_settings_clear(&set);
    rc = rl_limiter_new(cfg, NULL, &lim, &err);
    FZ_CHECK(rc == RL_OK, "the target's limiter: %s", err.msg);
    for (int i = 0; i < MAX_MADE; i++)
        if (!made[i].lim) {
            made[i].lim = lim;
            made[i].reg = reg;
            return lim;
        }
    FZ_CHECK(0, "more than %d limiters at once", MAX_MADE);
    return NULL;
}

void fz_free(rl_limiter *lim)
{
    for (int i = 0; i < MAX_MADE; i++)
        if (made[i].lim == lim && lim) {
            rl_limiter_free(lim);
            rl_registry_free(made[i].reg);
            made[i].lim = NULL;
            made[i].reg = NULL;
        }
}

void fz_check_decision(int rc, const rl_decision *d, const rl_err *err)
{
    if (rc != RL_OK) {
        FZ_CHECK(err->msg[0] != '\0', "error %d without a message", rc);
        return;
    }
    FZ_CHECK(d->retry_after >= 0, "retry_after %lld", (long long)d->retry_after);
    if (d->allowed)
        FZ_CHECK(d->retry_after == 0 && d->blocked == -1, "allowed with retry_after %lld, "
                 "blocked %d", (long long)d->retry_after, d->blocked);
    else
        FZ_CHECK(d->blocked >= 0 && (size_t)d->blocked < d->napplied,
                 "denied, blocked %d of %zu", d->blocked, d->napplied);
    FZ_CHECK(d->napplied <= RL_MAX_APPLIED, "%zu applied", d->napplied);
    for (size_t i = 0; i < d->napplied; i++) {
        const rl_applied *a = &d->applied[i];
        FZ_CHECK(a->wait >= 0, "%s: wait %lld", a->rule->name, (long long)a->wait);
        const rl_rule_status *st = rl_decision_status(d, i);
        FZ_CHECK(!st == !a->has_status, "%s: has_status %d, status %p", a->rule->name,
                 a->has_status, (const void *)st);
        if (!st)
            continue;
        FZ_CHECK(st->remaining <= st->limit, "%s: remaining %lld above the limit %lld",
                 a->rule->name, (long long)st->remaining, (long long)st->limit);
        FZ_CHECK(st->reset_after >= 0 && st->next >= 0 && st->window >= 0,
                 "%s: reset_after %lld, next %lld, window %lld", a->rule->name,
                 (long long)st->reset_after, (long long)st->next, (long long)st->window);
    }
}

static char scratch[256];

static void scratch_remove(void)
{
    unlink(scratch);
}

const char *fz_scratch(const char *name)
{
    if (!scratch[0]) {
        snprintf(scratch, sizeof scratch, "/tmp/rl-fuzz-%s.%ld", name, (long)getpid());
        atexit(scratch_remove);
    }
    return scratch;
}

void fz_write(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    FZ_CHECK(f != NULL, "cannot write %s", path);
    FZ_CHECK(fwrite(data, 1, size, f) == size && fclose(f) == 0, "cannot write %s", path);
}
