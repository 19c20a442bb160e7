/*
 * conn.c - see conn.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/clock.h"
#include "conn.h"

#define NO_LIMIT ((rl_ns)1 << 62)

struct rld_rconn {
    rld_net_stream *s;
    redisReader *reader;
    char *out; /* appended, not written yet */
    size_t olen, ocap;
    rl_ns tmo;
    int err;    /* 0 or a REDIS_ERR_* */
    int errnum; /* the errno of an I/O failure */
    char errstr[200];
    char host[256];
    int port;
};

rld_rconn *rld_rconn_open(const char *host, int port, rld_net_client_tls *tls, rl_ns deadline,
                          char *why, size_t cap)
{
    rld_rconn *c = calloc(1, sizeof *c);
    if (!c || !(c->reader = redisReaderCreate())) {
        free(c);
        snprintf(why, cap, "out of memory");
        return NULL;
    }
    if (!(c->s = rld_net_dial(host, port, tls, deadline, why, cap))) {
        redisReaderFree(c->reader);
        free(c);
        return NULL;
    }
    snprintf(c->host, sizeof c->host, "%s", host);
    c->port = port;
    return c;
}

void rld_rconn_free(rld_rconn *c)
{
    if (!c)
        return;
    rld_net_stream_close(c->s);
    redisReaderFree(c->reader);
    free(c->out);
    free(c);
}

void rld_rconn_set_timeout(rld_rconn *c, rl_ns tmo)
{
    c->tmo = tmo;
}

static rl_ns deadline_of(const rld_rconn *c)
{
    return c->tmo > 0 ? rld_mono_ns() + c->tmo : rld_mono_ns() + NO_LIMIT;
}

static void fail(rld_rconn *c, int type, const char *why)
{
    c->err = type;
    snprintf(c->errstr, sizeof c->errstr, "%s", why);
}

/* An I/O failure with errno set, in hiredis's words; what TLS said of it names the server
 * (a refusal of the client's certificate comes after the handshake, at the first read). */
static void fail_io(rld_rconn *c)
{
    const char *tls = rld_net_stream_error(c->s);
    c->errnum = errno;
    if (!tls) {
        fail(c, REDIS_ERR_IO, strerror(c->errnum));
        return;
    }
    c->err = REDIS_ERR_IO;
    snprintf(c->errstr, sizeof c->errstr, "%.64s:%d: %s", c->host, c->port, tls);
}

int rld_rconn_append(rld_rconn *c, const char *cmd, size_t len)
{
    if (c->err)
        return REDIS_ERR;
    if (c->olen + len > c->ocap) {
        size_t cap = c->ocap ? c->ocap : 4096;
        while (cap < c->olen + len)
            cap *= 2;
        char *p = realloc(c->out, cap);
        if (!p) {
            fail(c, REDIS_ERR_OOM, "Out of memory");
            return REDIS_ERR;
        }
        c->out = p;
        c->ocap = cap;
    }
    memcpy(c->out + c->olen, cmd, len);
    c->olen += len;
    return REDIS_OK;
}

int rld_rconn_append_argv(rld_rconn *c, int argc, const char **argv, const size_t *len)
{
    char *cmd;
    int n = redisFormatCommandArgv(&cmd, argc, argv, len);
    if (n < 0) {
        fail(c, REDIS_ERR_OOM, "Out of memory");
        return REDIS_ERR;
    }
    int rc = rld_rconn_append(c, cmd, (size_t)n);
    redisFreeCommand(cmd);
    return rc;
}

int rld_rconn_flush(rld_rconn *c)
{
    if (c->err)
        return REDIS_ERR;
    if (c->olen && rld_net_stream_write(c->s, c->out, c->olen, deadline_of(c)) < 0) {
        fail_io(c);
        return REDIS_ERR;
    }
    c->olen = 0;
    return REDIS_OK;
}

/* Reads once into the reader, waiting until deadline (0: not at all). 1 bytes came, 0 none
 * now (only without a wait), -1 c failed. */
static int read_once(rld_rconn *c, rl_ns deadline)
{
    char buf[16384];
    ssize_t n = rld_net_stream_read(c->s, buf, sizeof buf, deadline);
    if (n < 0 && errno == EAGAIN && deadline == 0)
        return 0;
    if (n < 0) {
        fail_io(c);
        return -1;
    }
    if (n == 0) {
        fail(c, REDIS_ERR_EOF, "Server closed the connection");
        return -1;
    }
    if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
        fail(c, c->reader->err, c->reader->errstr);
        return -1;
    }
    return 1;
}

int rld_rconn_next_reply(rld_rconn *c, void **reply)
{
    *reply = NULL;
    if (c->err)
        return REDIS_ERR;
    if (redisReaderGetReply(c->reader, reply) != REDIS_OK) {
        fail(c, c->reader->err, c->reader->errstr);
        return REDIS_ERR;
    }
    return REDIS_OK;
}

int rld_rconn_get_reply(rld_rconn *c, void **reply)
{
    *reply = NULL;
    if (rld_rconn_next_reply(c, reply) != REDIS_OK)
        return REDIS_ERR;
    if (*reply)
        return REDIS_OK;
    if (rld_rconn_flush(c) != REDIS_OK)
        return REDIS_ERR;
    while (!*reply) {
        if (read_once(c, deadline_of(c)) < 0 || rld_rconn_next_reply(c, reply) != REDIS_OK)
            return REDIS_ERR;
    }
    return REDIS_OK;
}

redisReply *rld_rconn_command_argv(rld_rconn *c, int argc, const char **argv, const size_t *len)
{
    void *r;
    if (rld_rconn_append_argv(c, argc, argv, len) != REDIS_OK ||
        rld_rconn_get_reply(c, &r) != REDIS_OK)
        return NULL;
    return r;
}

int rld_rconn_read(rld_rconn *c)
{
    if (c->err)
        return REDIS_ERR;
    /* what poll announced, and what TLS decrypted beyond it, up to a bound per call */
    for (int i = 0; i < 64; i++) {
        int r = read_once(c, 0);
        if (r < 0)
            return REDIS_ERR;
        if (r == 0 || !rld_net_stream_pending(c->s))
            break;
    }
    return REDIS_OK;
}

int rld_rconn_fd(const rld_rconn *c)
{
    return rld_net_stream_fd(c->s);
}

int rld_rconn_pending(const rld_rconn *c)
{
    return rld_net_stream_pending(c->s);
}

int rld_rconn_err(const rld_rconn *c)
{
    return c->err;
}

const char *rld_rconn_errstr(const rld_rconn *c)
{
    return c->errstr;
}

int rld_rconn_timed_out(const rld_rconn *c)
{
    return c->err == REDIS_ERR_IO && (c->errnum == EAGAIN || c->errnum == EWOULDBLOCK);
}

int rld_rconn_reset(const rld_rconn *c)
{
    return c->err == REDIS_ERR_EOF ||
           (c->err == REDIS_ERR_IO && (c->errnum == ECONNRESET || c->errnum == EPIPE));
}

const char *rld_rconn_host(const rld_rconn *c)
{
    return c->host;
}

int rld_rconn_port(const rld_rconn *c)
{
    return c->port;
}
