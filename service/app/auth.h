/*
 * auth.h - the bearer tokens that guard endpoints: admin_token (quotas, reload),
 * acquire_token (/acquire, /check, /refund, /release, and any other decision service) and
 * metrics_token (/metrics, /healthz). Each comes from the configuration (X_token), a file the
 * configuration names (X_token_file: the whole file, one trailing newline dropped) or the
 * environment (RATELIMITD_X_TOKEN), in that order; unset means the endpoints are open, except
 * the admin endpoints of a daemon that listens off loopback: those stay closed without
 * admin_token unless the configuration says "admin_open": true.
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

/* 1 when address (an IPv4 or IPv6 literal) is a loopback address: 127.0.0.0/8, ::1, or an
 * IPv4-mapped 127.0.0.0/8 (::ffff:127.0.0.1); 0 otherwise, a wildcard (0.0.0.0, ::) or text
 * that is no address included. */
int rld_auth_loopback(const char *address);

/* 1 when the admin endpoints must answer 403: the HTTP port listens off loopback
 * (set->address), no admin_token is set and admin_open is not true. Call after
 * rld_auth_resolve. */
int rld_auth_admin_closed(const rld_settings *set);

/* 1 when the admin endpoints are open to anyone who reaches a port off loopback: no
 * admin_token, and admin_open says so (the daemon warns at every start). */
int rld_auth_admin_exposed(const rld_settings *set);

#endif
