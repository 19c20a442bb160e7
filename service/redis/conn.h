/*
 * conn.h - one blocking connection to Redis, cleartext or TLS: the store's transport.
 *
 * Commands are formatted by hiredis (redisFormatCommandArgv, or already formatted by the
 * caller) and replies parsed by its reader (redisReader); the bytes go through net's client
 * stream (net.h: a socket, or a GnuTLS session over it), so cleartext and TLS take the same path.
 * It has the shape of hiredis's blocking redisContext: append commands, then read replies in
 * order (the first read writes what was appended), every wait bounded by the timeout set, and
 * once it has failed it stays failed (err and errstr say why).
 */
#ifndef RLD_REDIS_CONN_H
#define RLD_REDIS_CONN_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "net/net.h"
#include "ratelimit.h"

typedef struct rld_rconn rld_rconn;

/* Connects to host:port by deadline (CLOCK_MONOTONIC), over TLS when tls is not NULL (the
 * server's certificate checked as rld_net_dial says). NULL with why (cap bytes) saying what
 * failed, as hiredis words it ("Connection refused"). */
rld_rconn *rld_rconn_open(const char *host, int port, rld_net_client_tls *tls, rl_ns deadline,
                          char *why, size_t cap);
/* Closes c and frees it. NULL is fine. */
void rld_rconn_free(rld_rconn *c);

/* Every wait from now on (for room to write, for a reply) lasts at most tmo (0: no bound). */
void rld_rconn_set_timeout(rld_rconn *c, rl_ns tmo);

/* Appends len bytes of commands already in Redis's protocol, or one command from argv (lengths
 * from len, or strlen when len is NULL), to what the next read writes first. REDIS_OK, or
 * REDIS_ERR when out of memory (c failed). */
int rld_rconn_append(rld_rconn *c, const char *cmd, size_t len);
int rld_rconn_append_argv(rld_rconn *c, int argc, const char **argv, const size_t *len);

/* The next reply (redisGetReply): writes what was appended, then waits for a whole reply.
 * REDIS_OK with *reply (freeReplyObject), or REDIS_ERR when c failed (err says why). */
int rld_rconn_get_reply(rld_rconn *c, void **reply);
/* One command and its reply; NULL when c failed. */
redisReply *rld_rconn_command_argv(rld_rconn *c, int argc, const char **argv, const size_t *len);
/* Writes what was appended, waiting for room. REDIS_OK or REDIS_ERR (c failed). */
int rld_rconn_flush(rld_rconn *c);

/* For a loop that polls: reads what has come without waiting (redisBufferRead), then hands the
 * replies complete so far one at a time (redisGetReplyFromReader: REDIS_OK with *reply NULL
 * when none is complete). REDIS_ERR when c failed. */
int rld_rconn_read(rld_rconn *c);
int rld_rconn_next_reply(rld_rconn *c, void **reply);
/* The socket to poll for reading, and whether bytes already wait (then do not poll). */
int rld_rconn_fd(const rld_rconn *c);
int rld_rconn_pending(const rld_rconn *c);

/* 0 while c works; else REDIS_ERR_IO, REDIS_ERR_EOF, REDIS_ERR_PROTOCOL or REDIS_ERR_OOM. */
int rld_rconn_err(const rld_rconn *c);
/* Why c failed ("Server closed the connection", "Connection reset by peer", a TLS alert). */
const char *rld_rconn_errstr(const rld_rconn *c);
/* 1 when c failed because a wait outlasted its timeout. */
int rld_rconn_timed_out(const rld_rconn *c);
/* 1 when c failed because the peer closed or reset it (rather than being slow). */
int rld_rconn_reset(const rld_rconn *c);
/* The host and port dialled. */
const char *rld_rconn_host(const rld_rconn *c);
int rld_rconn_port(const rld_rconn *c);

#endif
