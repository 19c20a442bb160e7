/*
 * redis_scripts.h - the Lua scripts of the Redis store, embedded at build time from
 * the files in service/redis (each is lib.lua followed by its own file; see the Makefile).
 */
#ifndef RLD_REDIS_SCRIPTS_H
#define RLD_REDIS_SCRIPTS_H

extern const char rld_lua_decide[];
extern const char rld_lua_settle[];
extern const char rld_lua_release[];
extern const char rld_lua_due[];
extern const char rld_lua_heartbeat[];
extern const char rld_lua_quota[];
/* decide, settle, release and due as a Functions library (without its first line, #!lua
 * name=..., nor the local V holding the version that the function names carry). */
extern const char rld_lua_library[];

#endif
