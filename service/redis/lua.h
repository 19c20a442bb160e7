/*
 * lua.h - the Redis store's scripts, put together from the Lua embedded at build time
 * (redis_scripts.h) and the plug-ins' ports of their rule types.
 *
 * A script that uses the lib is the lib (lib.lua and the built-in rule types' ports), the
 * plug-ins' ports, then its body. The Functions library holds the same: the lib and the ports
 * made once, on its first call, and each script a function named rld_<version>_<script>,
 * <version> being a hash of the library's text, so that builds (or plug-in sets) with different
 * scripts sharing one Redis each call their own.
 */
#ifndef RLD_REDIS_LUA_H
#define RLD_REDIS_LUA_H

#include "pool.h"

typedef struct rld_lua {
    char *script[RLD_NSCRIPTS];   /* each script's text, for SCRIPT LOAD */
    char *library;                /* the Functions library's text, for FUNCTION LOAD */
    char fname[RLD_NSCRIPTS][40]; /* the library's function of each script; "" when outside it */
} rld_lua;

/* Builds every script with ports (Lua text: rule type ports that call register_rule; "" or NULL
 * for none) after the lib. Returns RL_OK, or RL_ENOMEM with *out zeroed. */
int rld_lua_build(const char *ports, rld_lua *out);
/* The lib with the built-in ports and ports (as for rld_lua_build) followed by body, in a new
 * string the caller frees; NULL when out of memory. */
char *rld_lua_with_lib(const char *ports, const char *body);
/* Frees what rld_lua_build made; a zeroed one is ok. */
void rld_lua_free(rld_lua *l);

#endif
