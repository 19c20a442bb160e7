/*
 * auth.h - the bearer tokens that guard endpoints: admin_token (quotas, reload),
 * acquire_token (/acquire, /check, /refund, /release, and any other decision service) and
 * metrics_token (/metrics, /healthz). Each comes from the configuration (X_token), a file the
 * configuration names (X_token_file: the whole file, one trailing newline dropped) or the
 * environment (RATELIMITD_X_TOKEN), in that order; unset means the endpoints are open.
 */
#ifndef RLD_APP_AUTH_H
#define RLD_APP_AUTH_H

#include "ratelimit.h"
#include "settings.h"

/* Fills admin_token, acquire_token and metrics_token of set from their files or the
 * environment when the configuration did not give them, and checks each (1 to 1024 printable
 * ASCII characters, no spaces). RL_EINVAL with err naming the setting ("acquire_token_file:
 * secret.txt: No such file or directory", "admin_token: give admin_token or admin_token_file,
 * not both"); set may then hold some of the tokens (the caller gives up on it). */
int rld_auth_resolve(rld_settings *set, rl_err *err);

/* 1 when want is NULL (no token needed) or authorization (an Authorization header's value,
 * NULL when absent) is "Bearer <want>", the scheme in any case; 0 otherwise. The time taken
 * depends on the lengths only, never on how much of the token matched. */
int rld_auth_matches(const char *want, const char *authorization);

#endif
