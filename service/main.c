/*
 * main.c - ratelimitd: flags, configuration, the limiter, the app and what it is attached to
 * (the store, the HTTP and gRPC servers, the YAML matcher), signals. The composition root:
 * the only file that knows every wing.
 *
 * Only this file reads the real clock for the limiter's housekeeping thread and picks what
 * runs; everything else takes its inputs as arguments.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app/app.h"
#include "app/auth.h"
#include "app/clock.h"
#include "app/file.h"
#include "app/log.h"
#include "app/values.h"
#include "app/notify.h"
#include "config/config.h"
#include "grpc/grpc_api.h"
#include "grpc/rls_yaml_grpc.h"
#include "grpc/xds.h"
#include "http/http.h"
#include "net/net.h"
#include "redis/pool.h"
#include "redis/redis.h"
#include "redis/store.h"

/* config/default.json, embedded by the Makefile. */
extern const char rld_default_config[];
extern const size_t rld_default_config_len;

/* How long a stop waits for requests in flight. */
#define DRAIN_MS 10000

static const char usage[] =
    "usage: ratelimitd [--config PATH] [--port N] [--grpc-port N] [--manual-clock]\n"
    "       ratelimitd --check-config PATH\n"
    "\n"
    "  --config PATH        configuration file (default: the built-in config/default.json),\n"
    "                       or envoyproxy/ratelimit's YAML: a .yaml/.yml file or a directory\n"
    "  --port N             listen on port N instead of the configuration's; 0 picks a free\n"
    "                       port. The first line of stdout is \"listening on ADDRESS:PORT\".\n"
    "  --grpc-port N        serve Envoy's rate limit service (gRPC) on port N, at the\n"
    "                       configuration's grpc.listen address or else the listen address;\n"
    "                       0 picks a free port. The second line of stdout is then\n"
    "                       \"grpc listening on ADDRESS:PORT\".\n"
    "  --manual-clock       take the time from \"now\" (seconds) in the bodies of /acquire,\n"
    "                       /refund and /release, for replaying traces and tests\n"
    "  --check-config PATH  check a configuration: prints \"ok\" (exit 0) or the problem\n"
    "                       (exit 1)\n"
    "  --help               this text\n"
    "  --version            the version\n"
    "\n"
    "SIGTERM or SIGINT stop it: it stops accepting, finishes requests in flight, exits 0.\n"
    "SIGHUP reloads the configuration file (as POST /admin/reload does).\n";

typedef struct opts {
    const char *config;
    const char *check;
    int port;      /* -1: the configuration's */
    int grpc_port; /* -1: the configuration's */
    int manual_clock;
} opts;

/* Returns -1 to go on, or the exit status. */
static int parse_flags(int argc, char **argv, opts *o)
{
    static const struct option longs[] = {
        {"config", required_argument, NULL, 'c'}, {"port", required_argument, NULL, 'p'},
        {"check-config", required_argument, NULL, 'k'}, {"grpc-port", required_argument, NULL, 'g'},
        {"manual-clock", no_argument, NULL, 'm'}, {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'v'},     {NULL, 0, NULL, 0}};
    int c;
    char *end;
    memset(o, 0, sizeof *o);
    o->port = -1;
    o->grpc_port = -1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'c':
            o->config = optarg;
            break;
        case 'k':
            o->check = optarg;
            break;
        case 'm':
            o->manual_clock = 1;
            break;
        case 'p':
        case 'g': {
            errno = 0;
            long v = strtol(optarg, &end, 10);
            if (errno || *end || end == optarg || v < 0 || v > 65535) {
                fprintf(stderr, "ratelimitd: --%s: must be a number from 0 to 65535\n",
                        c == 'p' ? "port" : "grpc-port");
                return 2;
            }
            *(c == 'p' ? &o->port : &o->grpc_port) = (int)v;
            break;
        }
        case 'h':
            fputs(usage, stdout);
            return 0;
        case 'v':
            printf("ratelimitd %s\n", RL_VERSION);
            return 0;
        default:
            fprintf(stderr, "ratelimitd: unknown or incomplete option %s\n\n%s",
                    argv[optind - 1], usage);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ratelimitd: unexpected argument %s\n\n%s", argv[optind], usage);
        return 2;
    }
    return -1;
}

/* Reads the certificate and key PEM files of "tls" (both NULL when it is not set). On failure
 * returns RL_EINVAL with err naming the member and nothing to free. */
static int read_tls(const rld_settings *set, char **cert, char **key, rl_err *err)
{
    *cert = *key = NULL;
    if (!set->tls_cert && !set->tls_key)
        return RL_OK;
    if (!set->tls_cert || !set->tls_key)
        return rl_errf(err, RL_EINVAL, "tls: give both cert and key");
    errno = 0;
    if (!(*cert = rld_read_file(set->tls_cert, NULL)))
        return rl_errf(err, RL_EINVAL, "tls.cert: %.200s: %s", set->tls_cert,
                       errno ? strerror(errno) : "cannot be read");
    errno = 0;
    if (!(*key = rld_read_file(set->tls_key, NULL))) {
        free(*cert);
        *cert = NULL;
        return rl_errf(err, RL_EINVAL, "tls.key: %.200s: %s", set->tls_key,
                       errno ? strerror(errno) : "cannot be read");
    }
    return RL_OK;
}

/* The gRPC port's TLS files: "grpc": {"tls": ...} of the configuration, else
 * envoyproxy/ratelimit's variables (GRPC_SERVER_USE_TLS true, GRPC_SERVER_TLS_CERT and _KEY,
 * GRPC_CLIENT_TLS_CACERT, GRPC_CLIENT_TLS_SAN), each named in messages as it was given.
 * *on is 0 when neither asks for TLS. RL_EINVAL with err naming the setting or the variable. */
static int grpc_tls_files(const rld_settings *set, rld_net_tls_files *f, int *on, rl_err *err)
{
    const char *use = getenv("GRPC_SERVER_USE_TLS");
    *on = 0;
    if (set->grpc_tls_cert || set->grpc_tls_key || set->grpc_tls_client_ca ||
        set->grpc_tls_client_san) {
        *f = (rld_net_tls_files){.cert = set->grpc_tls_cert,
                                 .cert_name = "grpc.tls.cert",
                                 .key = set->grpc_tls_key,
                                 .key_name = "grpc.tls.key",
                                 .client_ca = set->grpc_tls_client_ca,
                                 .client_ca_name = "grpc.tls.client_ca",
                                 .client_san = set->grpc_tls_client_san,
                                 .client_san_name = "grpc.tls.client_san"};
        if (!f->cert || !f->key)
            return rl_errf(err, RL_EINVAL, "grpc.tls: give both cert and key");
    } else if (use && *use) {
        int v = rld_value_go_bool(use);
        if (v < 0)
            return rl_errf(err, RL_EINVAL,
                           "GRPC_SERVER_USE_TLS: must be true or false (1, t, true, TRUE, True, "
                           "0, f, false, FALSE, False)");
        if (!v)
            return RL_OK;
        *f = (rld_net_tls_files){.cert_name = "GRPC_SERVER_TLS_CERT",
                                 .key_name = "GRPC_SERVER_TLS_KEY",
                                 .client_ca_name = "GRPC_CLIENT_TLS_CACERT",
                                 .client_san_name = "GRPC_CLIENT_TLS_SAN"};
        const char **vals[4] = {&f->cert, &f->key, &f->client_ca, &f->client_san};
        const char *names[4] = {f->cert_name, f->key_name, f->client_ca_name, f->client_san_name};
        for (int i = 0; i < 4; i++)
            *vals[i] = getenv(names[i]) && *getenv(names[i]) ? getenv(names[i]) : NULL;
        if (!f->cert || !f->key)
            return rl_errf(err, RL_EINVAL, "%s: GRPC_SERVER_USE_TLS is true: give the %s file",
                           f->cert ? f->key_name : f->cert_name, f->cert ? "key" : "certificate");
    } else {
        return RL_OK;
    }
    if (f->client_san && !f->client_ca)
        return rl_errf(err, RL_EINVAL, "%s: needs %s (a client certificate to find it in)",
                       f->client_san_name, f->client_ca_name);
    f->alpn = "h2";
    f->what = "grpc";
    *on = 1;
    return RL_OK;
}

/* The gRPC port's TLS context (*out NULL without TLS), said in the log when log is set. RL_EINVAL
 * with err naming the file. */
static int grpc_tls_open(const rld_settings *set, int log, rld_net_tls **out, rl_err *err)
{
    rld_net_tls_files f;
    int on, rc = grpc_tls_files(set, &f, &on, err);
    *out = NULL;
    if (rc != RL_OK || !on)
        return rc;
    if (!(*out = rld_net_tls_new(&f, err)))
        return RL_EINVAL;
    if (log)
        rld_log("grpc: TLS (ALPN h2) with %s%s%s%s%s", f.cert,
                f.client_ca ? ", client certificates required (mTLS), signed by " : "",
                f.client_ca ? f.client_ca : "", f.client_san ? ", with the DNS name " : "",
                f.client_san ? f.client_san : "");
    return RL_OK;
}

/* An envoyproxy/ratelimit boolean variable into *on (unset or empty: 0). */
static int env_flag(const char *name, int *on, rl_err *err)
{
    return rld_value_env_go_bool(name, 0, on, err);
}

/* A JSON configuration from its text into *set and *cfg (rld_config_parse), its text kept in
 * *json (NULL: not wanted) for the levels decided beside a YAML configuration. */
static int load_json(const char *path, rl_registry *reg, rld_settings *set, rl_config **cfg,
                     char **json, size_t *json_len, rl_err *err)
{
    size_t len;
    errno = 0;
    char *text = rld_read_file(path, &len);
    if (!text)
        return rl_errf(err, RL_EINVAL, "%s: %s", path, errno ? strerror(errno) : "cannot be read");
    int rc = rld_config_parse(text, len, reg, set, cfg, err);
    if (rc == RL_OK && json) {
        *json = text;
        *json_len = len;
    } else {
        free(text);
    }
    return rc;
}

/* Loads a configuration: JSON, or envoyproxy/ratelimit's YAML (a .yaml or .yml file or a
 * directory of them, alone with default settings or named by the JSON's "ratelimit_config"),
 * which makes *yrls, the matcher that decides rate limit requests (freed after the limiter).
 * With YAML named by JSON, *json (when json is not NULL; the caller frees it) is the JSON's
 * text, whose levels are decided beside the YAML's limits; else NULL. err names the file for
 * YAML. */
static int load_config(const char *path, rl_registry *reg, rld_settings *set, rl_config **cfg,
                       rld_yrls **yrls, char **json, size_t *json_len, rl_err *err)
{
    rld_yconf *c;
    const char *yaml = path;
    char *text = NULL;
    int rc;
    *yrls = NULL;
    *cfg = NULL;
    if (json)
        *json = NULL;
    if (!rld_yaml_is_config(path)) {
        size_t len = 0;
        if ((rc = load_json(path, reg, set, cfg, &text, &len, err)) != RL_OK ||
            !set->ratelimit_config) {
            free(text);
            return rc;
        }
        yaml = set->ratelimit_config;
        if (json_len)
            *json_len = len;
    } else if (rld_settings_defaults(set) != RL_OK) {
        return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    /* the JSON's own levels, if any, are decided beside the YAML's limits */
    rl_config *base = *cfg;
    int merge;
    if ((rc = env_flag("MERGE_DOMAIN_CONFIG", &merge, err)) != RL_OK ||
        (rc = rld_yaml_load_merging(yaml, merge, &c, err)) != RL_OK)
        rl_config_free(base);
    else if ((rc = rld_yrls_new_beside(c, reg, base, yrls, cfg, err)) == RL_OK)
        (*cfg)->reservation_ttl = set->reservation_ttl;
    if (rc != RL_OK) {
        rld_settings_clear(set);
        free(text);
    } else if (json) {
        *json = text;
    } else {
        free(text);
    }
    return rc;
}

/* rld_ybase_fn: the levels of a JSON configuration's text, its settings dropped. */
static int parse_base(const char *json, size_t len, rl_registry *reg, rl_config **base,
                      rl_err *err)
{
    rld_settings set;
    int rc = rld_config_parse(json, len, reg, &set, base, err);
    if (rc == RL_OK)
        rld_settings_clear(&set);
    return rc;
}

/* envoyproxy/ratelimit's environment variables: its response headers, turned on as there by
 * LIMIT_RESPONSE_HEADERS_ENABLED (a Go boolean) and named by LIMIT_LIMIT_HEADER,
 * LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER; its global SHADOW_MODE and QUOTA_MODE; its
 * EXTRA_TAGS (RL_EINVAL with err naming it when it does not read). MERGE_DOMAIN_CONFIG is read by
 * load_config. */
static int upstream_env(rld_yrls *yrls, rl_err *err)
{
    const char *v[3];
    static const char *const vars[3][2] = {{"LIMIT_LIMIT_HEADER", "RateLimit-Limit"},
                                           {"LIMIT_REMAINING_HEADER", "RateLimit-Remaining"},
                                           {"LIMIT_RESET_HEADER", "RateLimit-Reset"}};
    if (!yrls)
        return RL_OK;
    int on;
    if (env_flag("SHADOW_MODE", &on, err) != RL_OK)
        return RL_EINVAL;
    if (on) /* its global shadow mode */
        rld_yrls_set_global_shadow(yrls);
    if (env_flag("QUOTA_MODE", &on, err) != RL_OK)
        return RL_EINVAL;
    if (on) /* its global quota mode */
        rld_yrls_set_global_quota(yrls);
    if (env_flag("RESPONSE_DYNAMIC_METADATA", &on, err) != RL_OK)
        return RL_EINVAL;
    if (on)
        rld_yrls_set_dynamic_metadata(yrls);
    const char *tags = getenv("EXTRA_TAGS");
    if (tags && *tags && rld_yrls_set_extra_tags(yrls, tags, err) != RL_OK)
        return RL_EINVAL;
    if (env_flag("LIMIT_RESPONSE_HEADERS_ENABLED", &on, err) != RL_OK)
        return RL_EINVAL;
    if (!on)
        return RL_OK;
    for (int i = 0; i < 3; i++)
        v[i] = getenv(vars[i][0]) && *getenv(vars[i][0]) ? getenv(vars[i][0]) : vars[i][1];
    rld_yrls_set_upstream_headers(yrls, v[0], v[1], v[2]);
    return RL_OK;
}

/* Checks what starting would check, without binding or connecting: with the Redis store its
 * URL and whether it can hold every rule type the configuration uses. */
static int check_config(const char *path)
{
    rl_registry *reg = rl_registry_new();
    rld_settings set;
    rl_config *cfg = NULL;
    rld_yrls *yrls = NULL;
    rl_err err = {{0}};
    int rc = reg ? load_config(path, reg, &set, &cfg, &yrls, NULL, NULL, &err) : RL_ENOMEM;
    char *cert = NULL, *key = NULL;
    if (rc == RL_OK)
        rc = rld_auth_resolve(&set, &err);
    if (rc == RL_OK)
        rc = read_tls(&set, &cert, &key, &err);
    free(cert);
    free(key);
    rld_net_tls *gtls = NULL;
    if (rc == RL_OK)
        rc = grpc_tls_open(&set, 0, &gtls, &err);
    rld_net_tls_free(gtls);
    if (rc == RL_OK && set.store == RLD_STORE_REDIS) {
        rld_redis_addr addr;
        rld_net_client_tls_files tf;
        int tls = 0;
        if ((rc = rld_redis_store_addr(&set, &addr, &err)) == RL_OK)
            rc = rld_redis_store_check_config(cfg, set.ncluster > 0, &err);
        if (rc == RL_OK)
            rc = rld_redis_store_tls(&set, &addr, &tf, &tls, &err);
        if (rc == RL_OK && tls) { /* its files read as the store will read them */
            rld_net_client_tls *t = rld_net_client_tls_new(&tf, &err);
            rc = t ? RL_OK : RL_EINVAL;
            rld_net_client_tls_free(t);
        }
    }
    if (rc == RL_OK)
        printf("ok\n");
    else if (rld_yaml_is_config(path)) /* its messages name the file */
        printf("%s\n", reg ? err.msg : "out of memory");
    else
        printf("%s: %s\n", path, reg ? err.msg : "out of memory");
    if (cfg) {
        rl_config_free(cfg);
        rld_settings_clear(&set);
    }
    rld_yrls_free(yrls);
    rl_registry_free(reg);
    return rc == RL_OK ? 0 : 1;
}

/* ---- housekeeping ------------------------------------------------------------------------ */

typedef struct housekeeper {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    rld_app *app;
} housekeeper;

/* The real clock the decisions use: the daemon's only reading of wall-clock time. */
static rl_ns real_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (rl_ns)ts.tv_sec * RL_NS_PER_SEC + ts.tv_nsec;
}


/* Ticks the limiter ten times a second, saves a snapshot every state_interval seconds, and
 * tells systemd's watchdog that the daemon lives when the unit asks for it (WatchdogSec=). */
static void *housekeeping(void *arg)
{
    housekeeper *hk = arg;
    int interval =
        hk->app->set->state_file && !hk->app->store.ops ? hk->app->set->state_interval : 0;
    rl_ns next_save = rld_mono_ns() + interval * RL_NS_PER_SEC;
    rl_ns watchdog = rld_notify_watchdog_ns(), next_watchdog = rld_mono_ns() + watchdog;
    pthread_mutex_lock(&hk->mu);
    while (!hk->stop) {
        rl_ns t = rld_mono_ns() + RL_NS_PER_SEC / 10; /* the condition's clock is CLOCK_MONOTONIC */
        struct timespec until = {.tv_sec = t / RL_NS_PER_SEC, .tv_nsec = t % RL_NS_PER_SEC};
        pthread_cond_timedwait(&hk->cv, &hk->mu, &until);
        if (hk->stop)
            break;
        pthread_mutex_unlock(&hk->mu);
        rld_app_tick(hk->app);
        if (watchdog > 0 && rld_mono_ns() >= next_watchdog) {
            rld_notify("WATCHDOG=1");
            next_watchdog += watchdog; /* on schedule: a late tick does not push the next one */
            if (next_watchdog < rld_mono_ns())
                next_watchdog = rld_mono_ns() + watchdog;
        }
        if (interval > 0 && rld_mono_ns() >= next_save) {
            rld_app_save_state(hk->app);
            next_save = rld_mono_ns() + interval * RL_NS_PER_SEC;
        }
        pthread_mutex_lock(&hk->mu);
    }
    pthread_mutex_unlock(&hk->mu);
    return NULL;
}

static int housekeeper_start(housekeeper *hk, rld_app *app)
{
    pthread_condattr_t ca;
    hk->stop = 0;
    hk->app = app;
    pthread_mutex_init(&hk->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&hk->cv, &ca);
    pthread_condattr_destroy(&ca);
    return pthread_create(&hk->thread, NULL, housekeeping, hk);
}

static void housekeeper_stop(housekeeper *hk)
{
    pthread_mutex_lock(&hk->mu);
    hk->stop = 1;
    pthread_cond_signal(&hk->cv);
    pthread_mutex_unlock(&hk->mu);
    pthread_join(hk->thread, NULL);
    pthread_cond_destroy(&hk->cv);
    pthread_mutex_destroy(&hk->mu);
}

/* ---- the daemon ------------------------------------------------------------------------- */

/* Whether the configuration or --grpc-port asks for the gRPC server. */
static int grpc_wanted(const opts *o, const rld_settings *set)
{
    return set->grpc_listen || o->grpc_port >= 0;
}

/* Starts the gRPC server when it is wanted and prints the second line of stdout. Returns 0
 * (*out NULL when none is wanted) or -1 (logged). */
static int grpc_start(const opts *o, const rld_settings *set, rld_grpc_api *api, int threads,
                      rld_net_tls *tls, rld_grpc **out)
{
    char addr[64];
    int port = 0;
    rl_err err = {{0}};
    *out = NULL;
    if (!grpc_wanted(o, set))
        return 0;
    if (set->grpc_listen)
        rld_listen_parse(set->grpc_listen, addr, sizeof addr, &port); /* checked when loaded */
    else
        snprintf(addr, sizeof addr, "%s", set->address);
    rld_grpc_config gc = {.address = addr,
                          .port = o->grpc_port >= 0 ? o->grpc_port : port,
                          .threads = threads,
                          .max_message = (size_t)set->grpc_max_message,
                          .max_connections = (unsigned)set->max_connections,
                          .idle_timeout_ms = (unsigned)set->connection_timeout * 1000u,
                          .observe = rld_grpc_observe,
                          .methods = rld_grpc_methods,
                          .nmethods = rld_grpc_nmethods,
                          .app = api,
                          .tls = tls};
    if (!(*out = rld_grpc_start(&gc, &err))) {
        rld_log("error: %s", err.msg);
        return -1;
    }
    int v6 = strchr(addr, ':') != NULL;
    printf("grpc listening on %s%s%s:%d\n", v6 ? "[" : "", addr, v6 ? "]" : "",
           rld_grpc_port(*out));

    fflush(stdout);
    return 0;
}

/* Worker threads: as configured, else one per CPU; with the Redis store at least 8 per pooled
 * connection, since a worker waits on Redis for each decision, and the calls of the workers
 * waiting go to Redis together on a shared connection (Redis spends least per call when many
 * come in one read). */
static int threads_for(const rld_settings *set)
{
    if (set->threads > 0)
        return set->threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (set->store == RLD_STORE_REDIS && n < 8L * set->redis_pool)
        n = 8L * set->redis_pool;
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* Everything the daemon runs, from its configuration to its listeners; what is NULL (or not
 * ready) was not made. */
typedef struct daemon_parts {
    const opts *o;
    const char *source; /* where the configuration came from, for the log */
    rl_registry *reg;
    rld_settings set;
    int set_loaded;
    char *tls_cert, *tls_key; /* PEM text of "tls" */
    rld_yrls *yrls;           /* with a YAML configuration, until ysvc holds it */
    char *yjson;              /* the JSON text beside it, until ysvc holds it */
    size_t yjson_len;
    rld_yservice *ysvc;       /* the YAML configuration in force, with a YAML configuration */
    rld_redis *fleet;         /* with the Redis store */
    rld_app_store store;      /* the fleet as the app's store; ops NULL without it */
    rl_limiter *lim;
    rld_app app;
    int app_ready;
    rld_grpc_api grpc_api; /* the gRPC methods' app, when gRPC is wanted */
    rld_net_tls *grpc_tls; /* the gRPC port's certificates, with TLS */
    char store_name[400];
    rld_http_config hc;
    rld_http *http;
    housekeeper hk;
    rld_grpc *grpc;
    /* CONFIG_TYPE=GRPC_XDS_SOTW: the YAML configuration comes from an xDS management server */
    int xds_mode;
    rld_xds_settings xds_set;
    rld_xds *xds;
    pthread_mutex_t xds_mu; /* held by a push being applied, and by the start until serving */
    int xds_serving;        /* the app is up: a push is applied to it */
    rld_yrls *xds_first;    /* a push received before the start, built; with its configuration */
    rl_config *xds_first_cfg;
} daemon_parts;

/* Signals are taken by sigwait: they are blocked before any thread starts (the quota follower
 * is the first), SIGHUP too (a reload, not a stop). */
static void block_signals(sigset_t *sigs)
{
    sigemptyset(sigs);
    sigaddset(sigs, SIGTERM);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The configuration (*cfg, for open_limiter) and the daemon's settings. 0, or 1 (logged). */
static int open_settings(daemon_parts *dp, rl_config **cfg)
{
    const opts *o = dp->o;
    rl_err err = {{0}};
    int rc;
    if (!(dp->reg = rl_registry_new())) {
        rld_log("error: out of memory");
        return 1;
    }
    if (dp->xds_mode) /* the limits come from xDS, the levels (if any) from --config */
        rc = o->config ? load_json(o->config, dp->reg, &dp->set, cfg, &dp->yjson,
                                   &dp->yjson_len, &err)
             : rld_settings_defaults(&dp->set) == RL_OK ? RL_OK
                                                        : rl_errf(&err, RL_ENOMEM, "out of memory");
    else
        rc = o->config ? load_config(o->config, dp->reg, &dp->set, cfg, &dp->yrls, &dp->yjson,
                                     &dp->yjson_len, &err)
                       : rld_config_parse(rld_default_config, rld_default_config_len, dp->reg,
                                          &dp->set, cfg, &err);
    if (rc != RL_OK) { /* the loaders free what they made */
        rld_log("error: configuration %s: %s", dp->source, err.msg);
        return 1;
    }
    dp->set_loaded = 1;
    rld_log_configure(dp->set.log_level, dp->set.log_format);
    if ((rc = rld_auth_resolve(&dp->set, &err)) != RL_OK ||
        (rc = read_tls(&dp->set, &dp->tls_cert, &dp->tls_key, &err)) != RL_OK) {
        rld_log("error: configuration %s: %s", dp->source, err.msg);
        rl_config_free(*cfg);
        return 1;
    }
    if (o->port >= 0)
        dp->set.port = o->port;
    return 0;
}

/* The store (the fleet's with Redis), the limiter over it, and the fleet's threads. Takes cfg
 * in every case. 0, or 1 (logged). */
static int open_limiter(daemon_parts *dp, rl_config *cfg)
{
    const rld_settings *set = &dp->set;
    rl_store *store = NULL; /* NULL: the memory store */
    rl_err err = {{0}};
    if (set->store == RLD_STORE_REDIS) {
        if (rld_redis_open(set, dp->o->manual_clock, &store, &dp->fleet, &err) != RL_OK) {
            rld_log("error: configuration %s: %s", dp->source, err.msg);
            rl_config_free(cfg);
            return 1;
        }
        dp->store = (rld_app_store){&rld_redis_store_ops, dp->fleet};
        dp->store.ops->describe(dp->store.self, dp->store_name, sizeof dp->store_name);
        if (set->quota_file || set->state_file)
            rld_log("note: %s%s%s not used with the Redis store, which keeps quotas and state "
                    "for the whole fleet",
                    set->quota_file ? "quota_file" : "",
                    set->quota_file && set->state_file ? " and " : "",
                    set->state_file ? "state_file" : "");
    }
    if (!store && set->max_keys && !(store = rl_memory_store_new_bounded((uint64_t)set->max_keys))) {
        rld_log("error: out of memory");
        rl_config_free(cfg);
        return 1;
    }
    if (rl_limiter_new(cfg, store, &dp->lim, &err) != RL_OK) {
        rld_log("error: configuration %s: %s", dp->source, err.msg);
        return 1;
    }
    if (dp->fleet && rld_redis_start(dp->fleet, dp->lim, &err) != RL_OK) {
        rld_log("error: %s", err.msg);
        return 1;
    }
    return 0;
}

/* The sender of the rules' alerts when "alert_webhook" names one (claimed in Redis with the
 * Redis store). 0, or 1 (logged). */
static int open_alerts(daemon_parts *dp)
{
    const rld_settings *set = &dp->set;
    rl_err err = {{0}};
    char *token = NULL;
    if (!set->alert_url)
        return 0;
    if (set->alert_token_file) {
        size_t len;
        errno = 0;
        if (!(token = rld_read_file(set->alert_token_file, &len))) {
            rld_log("error: configuration %s: alert_webhook.token_file: %.200s: %s", dp->source,
                    set->alert_token_file, errno ? strerror(errno) : "cannot be read");
            return 1;
        }
        while (len && (token[len - 1] == '\n' || token[len - 1] == '\r'))
            token[--len] = '\0';
    }
    rld_alerts_config c = {.url = set->alert_url,
                           .token = token,
                           .queue = (unsigned)set->alert_queue,
                           .attempts = (unsigned)set->alert_attempts,
                           .timeout_ms = (unsigned)set->alert_timeout_ms,
                           .claim = dp->fleet ? rld_redis_alert_claim : NULL,
                           .claim_self = dp->fleet,
                           .clock = dp->o->manual_clock ? NULL : real_clock};
    dp->app.alerts = rld_alerts_new(&c, &err);
    free(token);
    if (!dp->app.alerts) {
        rld_log("error: %s", err.msg);
        return 1;
    }
    return 0;
}

/* rld_app_load_fn of a reload (cls the daemon): the file read again as at start; the matcher
 * of its YAML configuration handed to the service, which puts it in force with the limiter. */
static int reload_config(void *cls, const char *path, rl_registry *reg, rld_settings *set,
                         rl_config **cfg, rl_err *err)
{
    daemon_parts *dp = cls;
    rld_yrls *y;
    char *json;
    size_t len = 0;
    if (dp->xds_mode)
        return rl_errf(err, RL_EINVAL, "CONFIG_TYPE=GRPC_XDS_SOTW: the configuration changes by "
                       "the management server's pushes; a restart reads --config again");
    int rc = load_config(path, reg, set, cfg, &y, &json, &len, err);
    if (rc != RL_OK)
        return rc;
    if (!y != !dp->ysvc)
        rc = rl_errf(err, RL_EINVAL, dp->ysvc ? "ratelimit_config: the daemon serves a YAML "
                                                "configuration, which a reload keeps; a restart "
                                                "drops it"
                                              : "ratelimit_config: the daemon started without a "
                                                "YAML configuration; a restart applies one");
    else if (y)
        rc = rld_yservice_stage(dp->ysvc, y, json, len, err);
    free(json);
    if (rc != RL_OK) {
        rl_config_free(*cfg);
        *cfg = NULL;
        if (!dp->ysvc)
            rld_yrls_free(y);
        rld_settings_clear(set);
    }
    return rc;
}

/* The application the protocols serve, over the limiter, with the store and the parts that
 * follow its reloads attached: the YAML matcher, and the gRPC methods when gRPC is wanted
 * (before /metrics can be asked: their series are read without a lock). 0, or 1 (logged). */
static int open_app(daemon_parts *dp)
{
    const char *endpoints[RLD_APP_MAX_ENDPOINTS];
    rl_err err = {{0}};
    for (size_t i = 0; i < rld_nroutes && i < RLD_APP_MAX_ENDPOINTS; i++)
        endpoints[i] = rld_routes[i].endpoint;
    rld_app_config c = {.reg = dp->reg,
                        .lim = dp->lim,
                        .set = &dp->set,
                        .clock = dp->o->manual_clock ? NULL : real_clock,
                        .store = dp->fleet ? &dp->store : NULL,
                        .endpoints = endpoints,
                        .nendpoints = rld_nroutes,
                        .config_path = dp->o->config,
                        .load = reload_config,
                        .load_cls = dp};
    if (rld_app_init(&dp->app, &c, &err) != RL_OK) {
        rld_log("error: %s", err.msg);
        return 1;
    }
    dp->app_ready = 1;
    if (open_alerts(dp) != 0)
        return 1;
    if (upstream_env(dp->yrls, &err) != RL_OK) {
        rld_log("error: %s", err.msg);
        return 1;
    }
    if (dp->yrls) { /* the service takes the matcher over */
        dp->ysvc = rld_yservice_new(dp->yrls, dp->reg, dp->yjson, dp->yjson_len, parse_base);
        dp->yrls = NULL;
        if (!dp->ysvc) {
            rld_log("error: out of memory");
            return 1;
        }
    }
    /* a reload over Redis: the quota follower moves to the new limiter */
    if (dp->fleet && rld_app_attach(&dp->app, &rld_redis_part_ops, dp->fleet) != RL_OK) {
        rld_log("error: the app holds no more parts");
        return 1;
    }
    if (dp->ysvc && rld_app_attach(&dp->app, &rld_yrls_part_ops, dp->ysvc) != RL_OK) {
        rld_log("error: the app holds no more parts");
        return 1;
    }
    if (grpc_wanted(dp->o, &dp->set)) {
        if (rld_grpc_api_init(&dp->grpc_api, &dp->app, &err) != RL_OK) {
            rld_log("error: %s", err.msg);
            return 1;
        }
        if (grpc_tls_open(&dp->set, 1, &dp->grpc_tls, &err) != RL_OK) {
            rld_log("error: configuration %s: %s", dp->source, err.msg);
            return 1;
        }
        /* a reload reads the certificates again */
        if (dp->grpc_tls && rld_app_attach(&dp->app, &rld_net_tls_part_ops, dp->grpc_tls) != RL_OK) {
            rld_log("error: the app holds no more parts");
            return 1;
        }
        if (dp->ysvc) { /* ShouldRateLimit is decided by the YAML configuration's matcher */
            dp->grpc_api.rls.decide = rld_yservice_decide_rls;
            dp->grpc_api.rls.cls = dp->ysvc;
            dp->grpc_api.rls.failed = rld_yservice_failed;
        }
    }
    return 0;
}

/* RATELIMITD_HTTP_SERVER=libmicrohttpd serves plain HTTP with libmicrohttpd, the server that
 * our own HTTP/1.1 server replaced (for comparisons; HTTPS always uses it). */
static int http_server_is_mhd(void)
{
    const char *v = getenv("RATELIMITD_HTTP_SERVER");
    return v && strcmp(v, "libmicrohttpd") == 0;
}

/* The HTTP listener (its address on stdout's first line), the housekeeping thread and the gRPC
 * listener. 0, or 1 (logged) with none of them running. */
static int start_serving(daemon_parts *dp)
{
    const rld_settings *set = &dp->set;
    rl_err err = {{0}};
    dp->hc = (rld_http_config){.address = set->address,
                               .port = set->port,
                               .threads = threads_for(set),
                               .max_connections = (unsigned)set->max_connections,
                               .connection_timeout = (unsigned)set->connection_timeout,
                               .admin_token = set->admin_token,
                               .admin_closed = rld_auth_admin_closed(set),
                               .acquire_token = set->acquire_token,
                               .metrics_token = set->metrics_token,
                               .tls_cert_pem = dp->tls_cert,
                               .tls_key_pem = dp->tls_key,
                               .libmicrohttpd = http_server_is_mhd(),
                               .routes = rld_routes,
                               .nroutes = rld_nroutes,
                               .app = &dp->app,
                               .gate = &dp->app.gate,
                               .on_done = rld_app_on_done,
                               .access_log = set->log_access};
    if (!(dp->http = rld_http_start(&dp->hc, &err))) {
        rld_log("error: %s", err.msg);
        return 1;
    }
    if (housekeeper_start(&dp->hk, &dp->app) != 0) {
        rld_log("error: cannot start the housekeeping thread");
        rld_http_stop(dp->http, 0);
        return 1;
    }
    int port = rld_http_port(dp->http), v6 = strchr(set->address, ':') != NULL;
    /* logged before "listening on": whoever waits for that line finds the warning written */
    if (rld_auth_admin_closed(set))
        rld_log("note: the admin endpoints (/quota, /admin/reload) answer 403: listening on %s, "
                "not on loopback, without admin_token",
                set->address);
    else if (rld_auth_admin_exposed(set))
        rld_log("warn: the admin endpoints (/quota, /admin/reload) are open to anyone who "
                "reaches %s%s%s:%d: \"admin_open\": true and no admin_token",
                v6 ? "[" : "", set->address, v6 ? "]" : "", port);
    printf("listening on %s%s%s:%d\n", v6 ? "[" : "", set->address, v6 ? "]" : "", port);
    fflush(stdout);
    if (grpc_start(dp->o, set, &dp->grpc_api, dp->hc.threads, dp->grpc_tls, &dp->grpc) != 0) {
        housekeeper_stop(&dp->hk);
        rld_http_stop(dp->http, 0);
        return 1;
    }
    rld_log("started: listening on %s%s%s:%d, %d threads, %s, %s clock, configuration %s",
            v6 ? "[" : "", set->address, v6 ? "]" : "", port, dp->hc.threads, dp->store_name,
            dp->o->manual_clock ? "manual" : "real", dp->source);
    return 0;
}

static void xds_end(daemon_parts *dp);

/* Reloads on SIGHUP until SIGTERM or SIGINT; then stops accepting, lets the calls in flight
 * finish (DRAIN_MS at most) and saves the state. */
static void serve_until_stopped(daemon_parts *dp, sigset_t *sigs)
{
    int sig = 0;
    for (;;) {
        while (sigwait(sigs, &sig) != 0)
            ;
        if (sig != SIGHUP)
            break;
        rl_err rerr;
        rld_app_reload(&dp->app, &rerr); /* logs and counts either way */
    }
    rld_log("stopping on %s: no new connections, finishing requests in flight",
            sig == SIGTERM ? "SIGTERM" : "SIGINT");
    rld_notify("STOPPING=1");
    xds_end(dp); /* no push is applied while stopping */
    rld_app_stopping(&dp->app);
    unsigned gleft = dp->grpc ? rld_grpc_stop(dp->grpc, DRAIN_MS) : 0;
    if (gleft)
        rld_log("error: %u gRPC calls were still open after %d ms and were cut", gleft, DRAIN_MS);
    unsigned left = rld_http_stop(dp->http, DRAIN_MS);
    housekeeper_stop(&dp->hk);
    if (left)
        rld_log("error: %u requests were still in flight after %d ms and were cut", left,
                DRAIN_MS);
    if (dp->set.state_file && !dp->fleet && rld_app_save_state(&dp->app) == 0)
        rld_log("state saved to %s", dp->set.state_file);
}

/* Frees what was made, the fleet first: its follower applies quotas to the limiter. */
static void parts_free(daemon_parts *dp)
{
    if (dp->app_ready) { /* the alerts' thread claims through the fleet: stopped before it */
        rld_alerts_free(dp->app.alerts);
        dp->app.alerts = NULL;
    }
    rld_redis_free(dp->fleet);
    if (dp->app_ready) {
        dp->lim = dp->app.lim; /* another one after a reload */
        rld_app_free(&dp->app);
    }
    rl_limiter_free(dp->lim);
    rld_net_tls_free(dp->grpc_tls); /* after the gRPC server, which uses it */
    free(dp->tls_cert);
    free(dp->tls_key);
    rld_yservice_free(dp->ysvc);
    rld_yrls_free(dp->yrls);
    free(dp->yjson);
    if (dp->set_loaded)
        rld_settings_clear(&dp->set);
    rl_registry_free(dp->reg);
}

/* ---- configuration over xDS --------------------------------------------------------------- */

/* A pushed configuration c (stolen) as the start builds one from a file: the matcher and the
 * limiter's configuration, with the levels of the JSON configuration, if one was given, decided
 * beside its limits. */
static int xds_build(daemon_parts *dp, rld_yconf *c, rld_yrls **y, rl_config **cfg, rl_err *err)
{
    rl_config *base = NULL;
    if (dp->yjson) {
        int rc = parse_base(dp->yjson, dp->yjson_len, dp->reg, &base, err);
        if (rc != RL_OK) {
            rld_yconf_free(c);
            return rc;
        }
    }
    int rc = rld_yrls_new_beside(c, dp->reg, base, y, cfg, err);
    if (rc == RL_OK)
        (*cfg)->reservation_ttl = dp->set.reservation_ttl;
    return rc;
}

/* The xDS client's apply callback: before the start a push is built and kept for the start
 * (a later one replaces it); once serving it is applied as a reload. */
static int xds_apply(void *ctx, rld_yconf *c, const char *origin, rl_err *err)
{
    daemon_parts *dp = ctx;
    rld_yrls *y = NULL, *old = NULL;
    rl_config *cfg = NULL, *oldcfg = NULL;
    int rc;
    if (!c) { /* a push that did not read: counted once the daemon serves */
        pthread_mutex_lock(&dp->xds_mu);
        if (dp->xds_serving)
            rld_yrls_count_refused(&dp->app);
        pthread_mutex_unlock(&dp->xds_mu);
        return RL_EINVAL;
    }
    pthread_mutex_lock(&dp->xds_mu);
    if (dp->xds_serving) {
        rc = rld_yrls_apply(&dp->app, c, origin, err);
    } else if ((rc = xds_build(dp, c, &y, &cfg, err)) == RL_OK) {
        old = dp->xds_first;
        oldcfg = dp->xds_first_cfg;
        dp->xds_first = y;
        dp->xds_first_cfg = cfg;
    }
    pthread_mutex_unlock(&dp->xds_mu);
    rl_config_free(oldcfg);
    rld_yrls_free(old);
    return rc;
}

/* CONFIG_TYPE: FILE (the default) or GRPC_XDS_SOTW, with its variables. 0, or 1 (logged). */
static int xds_settings(daemon_parts *dp)
{
    const char *t = getenv("CONFIG_TYPE");
    rl_err err = {{0}};
    if (!t || !*t || strcmp(t, "FILE") == 0)
        return 0;
    if (strcmp(t, "GRPC_XDS_SOTW") != 0) {
        rld_log("error: CONFIG_TYPE: must be FILE or GRPC_XDS_SOTW, not '%.64s'", t);
        return 1;
    }
    dp->xds_mode = 1;
    pthread_mutex_init(&dp->xds_mu, NULL);
    if (!dp->o->config)
        dp->source = "xDS";
    if (dp->o->config && rld_yaml_is_config(dp->o->config)) {
        rld_log("error: CONFIG_TYPE=GRPC_XDS_SOTW: the YAML configuration comes from xDS; "
                "--config may name a JSON configuration only, not %.200s", dp->o->config);
        return 1;
    }
    if (rld_xds_settings_from_env(&dp->xds_set, &err) != RL_OK) {
        rld_log("error: %s", err.msg);
        return 1;
    }
    return 0;
}

/* Starts the xDS client and, unless FORCE_START_WITHOUT_INITIAL_CONFIG, waits for its first
 * configuration (SIGTERM or SIGINT ends the wait: *stopped). *cfg is replaced by the limiter's
 * configuration of what came (or of no domain at all). Returns with dp->xds_mu held until
 * the app serves. 0, or 1 (logged). */
static int xds_start(daemon_parts *dp, sigset_t *sigs, rl_config **cfg, int *stopped)
{
    rl_err err = {{0}};
    int force;
    const char *v = getenv("FORCE_START_WITHOUT_INITIAL_CONFIG");
    *stopped = 0;
    force = v && *v ? rld_value_go_bool(v) : 0;
    if (force < 0) {
        rld_log("error: FORCE_START_WITHOUT_INITIAL_CONFIG: must be true or false (1, t, true, "
                "TRUE, True, or 0, f, false, FALSE, False), not '%.64s'", v);
        return 1;
    }
    if (dp->set.ratelimit_config) {
        rld_log("error: CONFIG_TYPE=GRPC_XDS_SOTW: the YAML configuration comes from xDS, not "
                "from ratelimit_config (%.200s)", dp->set.ratelimit_config);
        return 1;
    }
    rl_config_free(*cfg);
    *cfg = NULL;
    if (!(dp->xds = rld_xds_start(&dp->xds_set, xds_apply, dp, &err))) {
        rld_log("error: %s", err.msg);
        return 1;
    }
    if (force) {
        rld_yconf *none = rld_yconf_new();
        pthread_mutex_lock(&dp->xds_mu);
        if (!dp->xds_first && (!none || xds_build(dp, none, &dp->xds_first,
                                                  &dp->xds_first_cfg, &err) != RL_OK)) {
            pthread_mutex_unlock(&dp->xds_mu);
            rld_log("error: FORCE_START_WITHOUT_INITIAL_CONFIG: %s",
                    none ? err.msg : "out of memory");
            return 1;
        }
    } else {
        rld_log("waiting for the first configuration from the xDS management server %s:%d",
                dp->xds_set.host, dp->xds_set.port);
        for (;;) {
            struct timespec ts = {0, 100 * 1000000L};
            int sig = sigtimedwait(sigs, NULL, &ts);
            if (sig == SIGTERM || sig == SIGINT) {
                rld_log("stopping on %s before the first configuration came",
                        sig == SIGTERM ? "SIGTERM" : "SIGINT");
                *stopped = 1;
                return 1;
            }
            pthread_mutex_lock(&dp->xds_mu);
            if (dp->xds_first)
                break;
            pthread_mutex_unlock(&dp->xds_mu);
        }
    }
    dp->yrls = dp->xds_first;
    *cfg = dp->xds_first_cfg;
    dp->xds_first = NULL;
    dp->xds_first_cfg = NULL;
    return 0;
}

static void xds_metrics(void *self, rld_buf *out)
{
    rld_xds_metrics(self, out);
}

/* The xDS client as a part of the app: its metrics. */
static const rld_part_ops xds_part_ops = {.name = "xds", .metrics = xds_metrics};

/* Stops the xDS client (an apply under way finishes first) and frees what it left. */
static void xds_end(daemon_parts *dp)
{
    if (!dp->xds_mode)
        return;
    rld_xds_stop(dp->xds);
    dp->xds = NULL;
    rld_yrls_free(dp->xds_first);
    rl_config_free(dp->xds_first_cfg);
    dp->xds_first = NULL;
    dp->xds_first_cfg = NULL;
}

static int serve(const opts *o)
{
    daemon_parts dp = {.o = o,
                       .source = o->config ? o->config : "built-in config/default.json",
                       .store_name = "memory store"};
    rl_config *cfg = NULL;
    sigset_t sigs;
    int stopped = 0, held = 0;
    block_signals(&sigs);
    int ok = xds_settings(&dp) == 0 && open_settings(&dp, &cfg) == 0;
    if (ok && dp.xds_mode) {
        if (xds_start(&dp, &sigs, &cfg, &stopped) != 0) {
            rl_config_free(cfg);
            ok = 0;
        } else {
            held = 1;
        }
    }
    ok = ok && open_limiter(&dp, cfg) == 0 && open_app(&dp) == 0 &&
         (!dp.xds || rld_app_attach(&dp.app, &xds_part_ops, dp.xds) == RL_OK) &&
         start_serving(&dp) == 0;
    if (held) { /* pushes are applied from now on (kept aside if the start failed) */
        dp.xds_serving = ok;
        pthread_mutex_unlock(&dp.xds_mu);
    }
    if (ok) {
        rld_notify("READY=1"); /* the listeners accept, the state is loaded */
        serve_until_stopped(&dp, &sigs);
    }
    xds_end(&dp);
    parts_free(&dp);
    if (dp.xds_mode)
        pthread_mutex_destroy(&dp.xds_mu);
    if (ok || stopped)
        rld_log("stopped");
    return ok || stopped ? 0 : 1;
}

int main(int argc, char **argv)
{
    opts o;
    int rc = parse_flags(argc, argv, &o);
    if (rc >= 0)
        return rc;
    if (o.check)
        return check_config(o.check);
    return serve(&o);
}
