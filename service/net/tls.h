/*
 * tls.h - what net.c asks of tls.c (GnuTLS), inside the net wing only: a connection's TLS
 * session, its handshake on the worker's loop, and its plaintext reads and writes.
 */
#ifndef RLD_NET_TLS_H
#define RLD_NET_TLS_H

#include <sys/socket.h>
#include <sys/types.h>

#include "net.h"

/* On the accepting thread: c->tls, a server session on c->fd with t's certificates in force
 * now (sa is the peer, for log lines). 0, or -1 when out of memory (c->tls stays NULL). */
int rld__tls_open(rld_net_tls *t, rld_net_conn *c, const struct sockaddr *sa, socklen_t sl);
/* 1 once c's handshake is done. */
int rld__tls_ready(const rld_net_conn *c);
/* Goes on with c's handshake: 1 done, 0 waiting for the socket (its next event), -1 failed
 * (logged with the peer and why; the caller closes c). */
int rld__tls_handshake(rld_net_conn *c);
/* rld_net_read and rld_net_write over c's session (-1 with EAGAIN before the handshake is
 * done). */
ssize_t rld__tls_read(rld_net_conn *c, void *buf, size_t len);
ssize_t rld__tls_write(rld_net_conn *c, const void *buf, size_t len);
/* Frees c's session (a close_notify first when the handshake was done, if the socket takes
 * it now), before the socket closes. */
void rld__tls_close(rld_net_conn *c);

#endif
