/*
 * scripts.h - the Lua of the Redis store, embedded at build time (see the Makefile):
 * the pieces that lua.c puts together into the scripts and the Functions library.
 */
#ifndef RLD_REDIS_SCRIPTS_H
#define RLD_REDIS_SCRIPTS_H

/* service/redis/bigint.lua and lib.lua after it, as one chunk. */
extern const char rld_lua_lib[];
/* Every built-in rule type's port (service/core/rules/<type>.lua) and the tag it registers,
 * then {NULL, NULL}. */
typedef struct rld_lua_port {
    const char *tag, *text;
} rld_lua_port;
extern const rld_lua_port rld_lua_ports[];
/* The bodies of the scripts that use the lib: each its Lua argument offsets (args.def) and
 * its own file. */
extern const char rld_lua_body_decide[];
extern const char rld_lua_body_settle[];
extern const char rld_lua_body_release[];
extern const char rld_lua_body_due[];
extern const char rld_lua_body_undo[];
/* The decision script's fast path (fast.lua) with its argument offsets: lua.c puts it in front
 * of the decision's lib and body. */
extern const char rld_lua_fast_decide[];
/* Scripts on their own. */
extern const char rld_lua_heartbeat[];
extern const char rld_lua_quota[];
extern const char rld_lua_duty[];

#endif
