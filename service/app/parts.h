/*
 * parts.h - what the app asks of the wings attached to it, each through a table it defines
 * here and the wing implements; main.c attaches them, and the app never names a protocol or a
 * store.
 *
 *   a part   anything that follows the configuration in force (the gRPC service's limiter, the
 *            YAML matcher): told of each reload, asked for metrics, told when the daemon stops
 *   a store  the shared store that keeps quotas for a fleet (Redis): PUT and DELETE /quota go
 *            to it instead of the quota file, and /healthz and /metrics report on it
 *
 * Every method takes the part's or store's own state (self) first.
 */
#ifndef RLD_APP_PARTS_H
#define RLD_APP_PARTS_H

#include <stddef.h>

#include "buf.h"
#include "ratelimit.h"

typedef struct rld_part_ops {
    const char *name; /* for messages: "grpc", "yaml configuration" */
    /* At every reload, first, whatever comes of the configuration: the part reads its own
     * files again (a certificate) and logs what came of it; a failure keeps what it had and
     * does not stop the reload. NULL: no files. */
    void (*refresh)(void *self);
    /* Before a reload prepares anything: RL_OK to let it go on, or an error with err saying
     * why this part cannot follow one (the configuration in force then stays). NULL: always
     * RL_OK. */
    int (*reload_check)(void *self, rl_err *err);
    /* A reload put lim in force (the old limiter is freed once this returns): called with no
     * request in flight, so the part switches without a lock. NULL: nothing to switch. */
    void (*reload)(void *self, rl_limiter *lim);
    /* Every reload that got past reload_check ends here, once no limiter but the one in force
     * is left: ok 1 when it put a new one in force. The part frees what only the configuration
     * no longer in force needed (ok), or what it had made for the one refused (!ok), and counts
     * the outcome. NULL: nothing to do. */
    void (*reload_end)(void *self, int ok);
    /* Appends the part's metric families in the Prometheus text format. NULL: none. */
    void (*metrics)(void *self, rld_buf *out);
    /* The daemon is stopping: from now on the part answers health checks as not serving.
     * NULL: nothing to do. */
    void (*stopping)(void *self);
} rld_part_ops;

/* The most parts an app holds. */
#define RLD_APP_MAX_PARTS 8

typedef struct rld_part {
    const rld_part_ops *ops;
    void *self; /* borrowed: outlives the app */
} rld_part;

typedef struct rld_app_store_ops {
    /* Before a reload puts cfg in force over the store (rl_limiter_new_over): RL_OK when the
     * store can hold it, else RL_EINVAL naming the field (a rule type it cannot keep). */
    int (*check_config)(void *self, const rl_config *cfg, rl_err *err);
    /* PUT /quota/<user>: checks body (rld_quota_body_parse), stores it for the whole fleet and
     * has it in force in this instance before returning. RL_EINVAL naming the field, RL_ESTORE
     * when the store cannot take it; nothing changes then. */
    int (*quota_put)(void *self, rl_registry *reg, const char *user, const char *body, size_t len,
                     rl_err *err);
    /* DELETE /quota/<user>: returns user to the default tier for the whole fleet. RL_EINVAL
     * for a bad user or no tiered level, RL_ESTORE when the store cannot take it. */
    int (*quota_delete)(void *self, const char *user, rl_err *err);
    /* Appends the /healthz body (a JSON object with "status": "ok" or "degraded"). Returns 1
     * while the store answers, 0 while the levels run on their fallbacks. */
    int (*health)(void *self, rld_buf *out);
    /* Appends the store's metric families in the Prometheus text format. */
    void (*metrics)(void *self, rld_buf *out);
    /* Where the store is, for the start line (never a password), into buf (len bytes). */
    void (*describe)(const void *self, char *buf, size_t len);
} rld_app_store_ops;

typedef struct rld_app_store {
    const rld_app_store_ops *ops; /* NULL: no shared store (the memory store) */
    void *self;                   /* borrowed: outlives the app */
} rld_app_store;

#endif
