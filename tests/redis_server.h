/*
 * redis_server.h - a private redis-server for the tests: started on a free loopback port with no
 * persistence, in a temporary directory that is removed when it stops.
 *
 * A test that needs Redis fails (never skips) when redis-server is missing: `make deps` installs
 * it. Servers die with the process that started them (PR_SET_PDEATHSIG) and are stopped at
 * exit; the directory of a test that failed (Check leaves it through _exit) is removed by the
 * next start, once its owning process is gone.
 */
#ifndef RL_REDIS_SERVER_H
#define RL_REDIS_SERVER_H

#include <sys/types.h>

#include <hiredis/hiredis.h>

typedef struct rt_redis {
    pid_t pid; /* 0 when not running */
    int port;
    char dir[64];
    char url[64]; /* redis://127.0.0.1:<port>/0 */
} rt_redis;

/* Starts a server and waits until it answers; fails the test if it cannot. */
void rt_redis_start(rt_redis *r);
/* Kills the server at once (SIGKILL), keeping its port and directory for rt_redis_restart. */
void rt_redis_kill(rt_redis *r);
/* Starts a killed server again on the same port (empty: nothing was persisted). */
void rt_redis_restart(rt_redis *r);
/* Freezes and thaws the server (SIGSTOP, SIGCONT): connections stay open but nothing answers. */
void rt_redis_pause(rt_redis *r);
void rt_redis_resume(rt_redis *r);
/* Stops the server and removes its directory. Safe to call twice. */
void rt_redis_stop(rt_redis *r);

/* A connection to the server; fails the test if it cannot connect. Free with redisFree. */
redisContext *rt_redis_connect(const rt_redis *r);
/* Runs a command (redisCommand format) on a new connection and returns its reply (free with
 * freeReplyObject); fails the test on a connection error. */
redisReply *rt_redis_cmd(const rt_redis *r, const char *fmt, ...);

#endif
