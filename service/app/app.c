/*
 * app.c - see app.h: the app's lifecycle, its clock, and what requests ask of it beyond the
 * core (quotas through the store or the quota file, health, metrics).
 */
#define _GNU_SOURCE /* pthread_rwlockattr_setkind_np */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "file.h"
#include "log.h"
#include "rules_json.h"

/* ---- the clock ------------------------------------------------------------------------- */

static void tick_to(rld_app *app, rl_ns t)
{
    pthread_mutex_lock(&app->tick_mu);
    if (t >= __atomic_load_n(&app->ticked, __ATOMIC_ACQUIRE)) {
        rl_limiter_tick(app->lim, t);
        __atomic_store_n(&app->ticked, t, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&app->tick_mu);
}

/* A manual time that moves forward ticks first, so that reservations expire exactly when a
 * test says. */
rl_ns rld_app_time(rld_app *app, int has_now, rl_ns now)
{
    if (!app->manual_clock)
        return app->clock();
    if (!has_now)
        return __atomic_load_n(&app->manual_now, __ATOMIC_ACQUIRE);
    rl_ns t = now;
    __atomic_store_n(&app->manual_now, t, __ATOMIC_RELEASE);
    if (t > __atomic_load_n(&app->ticked, __ATOMIC_ACQUIRE))
        tick_to(app, t);
    return t;
}

void rld_app_tick(rld_app *app)
{
    pthread_rwlock_rdlock(&app->gate);
    tick_to(app, rld_app_time(app, 0, 0));
    pthread_rwlock_unlock(&app->gate);
}

/* Loads the snapshot of state_file at start. A file that cannot be read is moved aside (kept
 * for inspection) and the service starts without it rather than not at all. */
static void load_state(rld_app *app)
{
    const char *path = app->set->state_file;
    size_t loaded = 0;
    rl_err err = {{0}};
    if (!path)
        return;
    if (rld_make_parent_dir(path) != 0)
        rld_log("error: state_file %s: cannot create its directory: %s", path, strerror(errno));
    if (rl_limiter_load(app->lim, path, rld_app_time(app, 0, 0), &loaded, &err) == RL_OK) {
        if (loaded)
            rld_log("state: loaded %zu key states and reservations from %s", loaded, path);
        return;
    }
    char aside[4200];
    snprintf(aside, sizeof aside, "%s.corrupt", path);
    rld_metrics_snapshot_corrupt(app->metrics);
    rld_log("error: state_file %s; moved to %s, starting without it", err.msg,
            rename(path, aside) == 0 ? aside : "(could not move it)");
}

int rld_app_init(rld_app *app, const rld_app_config *c, rl_err *err)
{
    const rld_settings *set = c->set;
    memset(app, 0, sizeof *app);
    if (c->nendpoints > RLD_APP_MAX_ENDPOINTS)
        return rl_errf(err, RL_EINVAL, "app: %zu endpoints, at most %d", c->nendpoints,
                       RLD_APP_MAX_ENDPOINTS);
    if (c->store)
        app->store = *c->store;
    app->reg = c->reg;
    app->lim = c->lim;
    app->set = set;
    app->clock = c->clock;
    app->manual_clock = c->clock == NULL;
    app->config_path = c->config_path;
    app->load = c->load;
    app->load_cls = c->load_cls;
    app->max_keys = set->max_keys > 0 ? (uint64_t)set->max_keys : 0;
    pthread_mutex_init(&app->reload_mu, NULL);
    for (size_t i = 0; i < c->nendpoints; i++)
        app->endpoints[i] = c->endpoints[i];
    app->endpoints[c->nendpoints] = "other";
    pthread_mutex_init(&app->tick_mu, NULL);
    pthread_rwlockattr_t ga;
    pthread_rwlockattr_init(&ga);
    /* a reload waits for the requests in flight, not for every request that comes after */
    pthread_rwlockattr_setkind_np(&ga, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&app->gate, &ga);
    pthread_rwlockattr_destroy(&ga);
    json_t *rules = rld_config_to_json(rl_limiter_config(app->lim), set);
    app->rules_json = rules ? json_dumps(rules, RLD_JSON_FLAGS) : NULL;
    json_decref(rules);
    app->metrics = rld_metrics_new(c->nendpoints + 1, app->endpoints);
    if (!app->rules_json || !app->metrics) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        rld_metrics_free(app->metrics);
        free(app->rules_json);
        pthread_mutex_destroy(&app->tick_mu);
        pthread_mutex_destroy(&app->reload_mu);
        pthread_rwlock_destroy(&app->gate);
        return RL_ENOMEM;
    }
    app->rules_len = strlen(app->rules_json);
    int rc = rld_quotas_open(&app->quotas, app->store.ops ? NULL : set->quota_file, app->lim,
                             app->reg, err);
    if (rc != RL_OK) {
        rld_quotas_close(&app->quotas);
        rld_metrics_free(app->metrics);
        free(app->rules_json);
        pthread_mutex_destroy(&app->tick_mu);
        pthread_mutex_destroy(&app->reload_mu);
        pthread_rwlock_destroy(&app->gate);
        return rc;
    }
    if (!app->store.ops)
        load_state(app); /* after the quotas, so that keys find their tiers */
    return RL_OK;
}

int rld_app_attach(rld_app *app, const rld_part_ops *ops, void *self)
{
    if (app->nparts == RLD_APP_MAX_PARTS)
        return RL_EFULL;
    app->parts[app->nparts++] = (rld_part){ops, self};
    return RL_OK;
}

void rld_app_stopping(rld_app *app)
{
    for (size_t i = 0; i < app->nparts; i++)
        if (app->parts[i].ops->stopping)
            app->parts[i].ops->stopping(app->parts[i].self);
}

int rld_app_save_state(rld_app *app)
{
    rl_err err = {{0}};
    if (!app->set->state_file)
        return 0;
    pthread_rwlock_rdlock(&app->gate);
    int rc = rl_limiter_save(app->lim, app->set->state_file, &err);
    pthread_rwlock_unlock(&app->gate);
    if (rc != RL_OK) {
        rld_log("error: state_file %s", err.msg);
        return -1;
    }
    return 0;
}

void rld_app_free(rld_app *app)
{
    rld_quotas_close(&app->quotas);
    rld_metrics_free(app->metrics);
    free(app->rules_json);
    pthread_mutex_destroy(&app->tick_mu);
    pthread_mutex_destroy(&app->reload_mu);
    pthread_rwlock_destroy(&app->gate);
}

void rld_app_on_done(void *ctx, size_t route, int status, rl_ns duration)
{
    rld_app *app = ctx;
    rld_metrics_http(app->metrics, route, status, duration);
}

/* ---- what requests ask of the app ------------------------------------------------------ */

int rld_app_quota_put(rld_app *app, const char *user, const char *body, size_t len,
                      rl_err *err)
{
    if (app->store.ops)
        return app->store.ops->quota_put(app->store.self, app->reg, user, body, len, err);
    return rld_quotas_put(&app->quotas, app->lim, app->reg, user, body, len, err);
}

int rld_app_quota_delete(rld_app *app, const char *user, rl_err *err)
{
    if (app->store.ops)
        return app->store.ops->quota_delete(app->store.self, user, err);
    return rld_quotas_delete(&app->quotas, app->lim, user, err);
}

int rld_app_store_health(rld_app *app, rld_buf *out)
{
    return app->store.ops ? app->store.ops->health(app->store.self, out) : -1;
}

void rld_app_metrics(rld_app *app, rld_buf *out)
{
    rld_metrics_render(app->metrics, app->lim, out);
    rld_alerts_metrics(app->alerts, out);
    if (app->store.ops)
        app->store.ops->metrics(app->store.self, out);
    for (size_t i = 0; i < app->nparts; i++)
        if (app->parts[i].ops->metrics)
            app->parts[i].ops->metrics(app->parts[i].self, out);
}
