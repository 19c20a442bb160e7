/*
 * reload.c - rld_app_reload (app.h): the configuration file read again while serving.
 *
 * Everything that can fail happens before the swap, on a limiter nobody uses yet: the file
 * (or what rld_app_reload_with's caller makes), the limiter over a new memory store, the quota
 * file. The state moves over while the gate
 * is held for writing (no request in flight), as a snapshot (what a restart would keep is
 * kept), and the limiters are swapped there, every attached part told of the new one
 * (parts.h); the old one is freed after the gate opens.
 *
 * With a shared store (Redis) the state is the store's and stays there: the new configuration
 * is checked against the store first (check_config), and the new limiter is made under the
 * gate over the same store, which the old one gives up (rl_limiter_new_over); should that
 * fail, the store is back on the configuration in force, which stays.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "clock.h"
#include "log.h"
#include "notify.h"
#include "ratelimit_store.h"
#include "rules_json.h"

/* What a reload swaps: a limiter with its quota file and its GET /rules text. */
typedef struct generation {
    rl_config *cfg; /* with a shared store: the configuration, made into lim under the gate */
    rl_limiter *lim;
    rld_quotas quotas;
    char *rules_json;
} generation;

/* The parts' word before a reload prepares anything. */
static int parts_agree(rld_app *app, rl_err *err)
{
    int rc;
    for (size_t i = 0; i < app->nparts; i++) {
        const rld_part *p = &app->parts[i];
        if (p->ops->reload_check && (rc = p->ops->reload_check(p->self, err)) != RL_OK)
            return rc;
    }
    return RL_OK;
}

/* With a shared store, what the store was opened with for each level (by position: on_store_error,
 * shards, lease) stays until a restart: a file that changes it is refused. */
static int same_store_levels(const rld_settings *now, const rld_settings *ns, const rl_config *cfg,
                             rl_err *err)
{
    for (size_t l = 0; l < RL_MAX_LEVELS; l++) {
        const char *what = now->on_error[l] != ns->on_error[l] ? "on_store_error"
                           : now->shards[l] != ns->shards[l]   ? "shards"
                           : now->lease_slice[l] != ns->lease_slice[l] ||
                                   now->lease_ttl_ms[l] != ns->lease_ttl_ms[l]
                               ? "lease"
                               : NULL;
        if (what)
            return rl_errf(err, RL_EINVAL,
                           "levels[%zu].%s: a reload over the Redis store keeps each level's "
                           "on_store_error, shards and lease as the store was opened with them "
                           "(by the level's position%s%s); a restart applies a change",
                           l, what, l < cfg->nlevels ? ", here " : "",
                           l < cfg->nlevels ? cfg->levels[l].name : "");
    }
    return RL_OK;
}

/* The configuration file read again: make's function for rld_app_reload. */
static int from_file(void *cls, rld_app *app, rl_config **cfg, uint64_t *max_keys, rl_err *err)
{
    rld_settings ns;
    (void)cls;
    int rc = app->load(app->load_cls, app->config_path, app->reg, &ns, cfg, err);
    if (rc != RL_OK)
        return rc;
    if ((ns.store != RLD_STORE_MEMORY) != (app->store.ops != NULL))
        rc = rl_errf(err, RL_EINVAL, "store: a reload keeps the store in force (%s); a restart "
                                     "applies another one",
                     app->store.ops ? "redis" : "memory");
    else if (app->store.ops)
        rc = same_store_levels(app->set, &ns, *cfg, err);
    if (rc != RL_OK) {
        rl_config_free(*cfg);
        *cfg = NULL;
    }
    *max_keys = ns.max_keys > 0 ? (uint64_t)ns.max_keys : 0;
    rld_settings_clear(&ns);
    return rc;
}

/* Builds the new generation from what make makes; nothing in force changes. */
static int prepare(rld_app *app, rld_app_make_fn make, void *cls, generation *g,
                   uint64_t *max_keys, rl_err *err)
{
    rl_config *cfg = NULL;
    int rc;
    memset(g, 0, sizeof *g);
    *max_keys = app->max_keys;
    if ((rc = make(cls, app, &cfg, max_keys, err)) != RL_OK)
        return rc;
    if (app->store.ops) { /* the limiter is made over the store under the gate (swap) */
        *max_keys = app->max_keys; /* the memory store's bound: none in use */
        g->cfg = cfg;
        if (app->store.ops->check_config &&
            (rc = app->store.ops->check_config(app->store.self, cfg, err)) != RL_OK)
            return rc;
        json_t *rules = rld_config_to_json(cfg, app->set);
        g->rules_json = rules ? json_dumps(rules, RLD_JSON_FLAGS) : NULL;
        json_decref(rules);
        return g->rules_json ? RL_OK : rl_errf(err, RL_ENOMEM, "out of memory");
    }
    rl_store *st = rl_memory_store_new_bounded(*max_keys);
    rc = st ? rl_limiter_new(cfg, st, &g->lim, err) : rl_errf(err, RL_ENOMEM, "out of memory");
    if (!st)
        rl_config_free(cfg);
    if (rc == RL_OK)
        rc = rld_quotas_open(&g->quotas, app->set->quota_file, g->lim, app->reg, err);
    if (rc == RL_OK && !app->set->quota_file) /* no file to read them back from */
        rc = rld_quotas_carry(&g->quotas, &app->quotas, g->lim, app->reg, err);
    json_t *rules = rc == RL_OK ? rld_config_to_json(rl_limiter_config(g->lim), app->set) : NULL;
    g->rules_json = rules ? json_dumps(rules, RLD_JSON_FLAGS) : NULL;
    json_decref(rules);
    if (rc == RL_OK && !g->rules_json)
        rc = rl_errf(err, RL_ENOMEM, "out of memory");
    return rc;
}

static void drop(generation *g)
{
    rl_config_free(g->cfg);
    if (g->quotas.overrides)
        rld_quotas_close(&g->quotas);
    rl_limiter_free(g->lim);
    free(g->rules_json);
}

/* The state of app's limiter into g's, through a snapshot in a temporary file. */
static int carry_state(rld_app *app, generation *g, rl_err *err)
{
    char path[] = "/tmp/ratelimitd-reload-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return rl_errf(err, RL_EIO, "reload: no temporary file: %s", strerror(errno));
    close(fd);
    int rc = rl_limiter_save(app->lim, path, err);
    if (rc == RL_OK)
        rc = rl_limiter_load(g->lim, path, rld_app_time(app, 0, 0), NULL, err);
    unlink(path);
    return rc;
}

/* Under the gate: the state carried into g, g put in force, every part told; g then holds
 * the old generation. */
static int swap(rld_app *app, generation *g, rl_err *err)
{
    int rc;
    if (g->cfg) { /* a shared store keeps the state: the new limiter takes it over */
        rl_config *cfg = g->cfg;
        g->cfg = NULL;
        rc = rl_limiter_new_over(cfg, app->lim, &g->lim, err);
    } else {
        rc = carry_state(app, g, err);
    }
    if (rc != RL_OK)
        return rc;
    /* the quota file's contents change hands; each keeps its own mutex */
    rl_limiter *lim = app->lim;
    json_t *overrides = app->quotas.overrides;
    char *rules = app->rules_json;
    app->lim = g->lim;
    for (size_t i = 0; i < app->nparts; i++)
        if (app->parts[i].ops->reload)
            app->parts[i].ops->reload(app->parts[i].self, g->lim);
    rld_metrics_levels_changed(app->metrics, rl_limiter_config(lim), rl_limiter_config(g->lim));
    app->quotas.overrides = g->quotas.overrides;
    app->rules_json = g->rules_json;
    app->rules_len = strlen(g->rules_json);
    g->lim = lim;
    g->quotas.overrides = overrides;
    g->rules_json = rules;
    return RL_OK;
}

static void logged(rld_app *app, int rc, const char *origin, const char *detail, rl_err *err)
{
    rld_metrics_reload(app->metrics, rc == RL_OK);
    if (rc == RL_OK) {
        rld_log("configuration reloaded from %s%s", origin, detail);
        rld_notifyf("READY=1\nSTATUS=configuration reloaded from %.900s", origin);
    } else if (!detail[0]) { /* not the file: the log names what was refused */
        rld_log("error: reload of %s refused, the configuration in force stays: %s", origin,
                err->msg);
        rld_notifyf("READY=1\nSTATUS=reload of %.200s refused, the configuration in force "
                    "stays: %.700s", origin, err->msg);
    } else {
        rld_log("error: reload refused, the configuration in force stays: %s", err->msg);
        rld_notifyf("READY=1\nSTATUS=reload refused, the configuration in force stays: %.900s",
                    err->msg);
    }
}

/* One reload, holding reload_mu; detail "" for anything but the file. */
static int reload(rld_app *app, rld_app_make_fn make, void *cls, const char *origin,
                  const char *detail, rl_err *err)
{
    generation g;
    uint64_t max_keys = 0;
    memset(&g, 0, sizeof g);
    int rc = parts_agree(app, err);
    if (rc != RL_OK) {
        logged(app, rc, origin, detail, err);
        return rc;
    }
    rc = prepare(app, make, cls, &g, &max_keys, err);
    if (rc == RL_OK) {
        pthread_rwlock_wrlock(&app->gate);
        rc = swap(app, &g, err);
        pthread_rwlock_unlock(&app->gate);
    }
    drop(&g);
    if (rc == RL_OK)
        app->max_keys = max_keys;
    for (size_t i = 0; i < app->nparts; i++)
        if (app->parts[i].ops->reload_end)
            app->parts[i].ops->reload_end(app->parts[i].self, rc == RL_OK);
    logged(app, rc, origin, detail, err);
    return rc;
}

int rld_app_reload_with(rld_app *app, rld_app_make_fn make, void *cls, const char *origin,
                        rl_err *err)
{
    pthread_mutex_lock(&app->reload_mu);
    rld_notifyf("RELOADING=1\nMONOTONIC_USEC=%lld", (long long)(rld_mono_ns() / 1000));
    int rc = reload(app, make, cls, origin, "", err);
    pthread_mutex_unlock(&app->reload_mu);
    return rc;
}

int rld_app_reload(rld_app *app, rl_err *err)
{
    pthread_mutex_lock(&app->reload_mu);
    /* systemd: reloading from now until READY=1, the configuration in force either way */
    rld_notifyf("RELOADING=1\nMONOTONIC_USEC=%lld", (long long)(rld_mono_ns() / 1000));
    for (size_t i = 0; i < app->nparts; i++)
        if (app->parts[i].ops->refresh)
            app->parts[i].ops->refresh(app->parts[i].self);
    int rc;
    if (!app->config_path || !app->load) {
        rc = rl_errf(err, RL_EINVAL, "reload: the daemon runs on the built-in configuration; "
                                     "start it with --config to reload one");
        logged(app, rc, "", "-", err);
    } else {
        rc = reload(app, from_file, NULL, app->config_path,
                    " (levels, tiers, quotas, reservation_ttl and max_keys; other settings "
                    "apply at the next start)",
                    err);
    }
    pthread_mutex_unlock(&app->reload_mu);
    return rc;
}
