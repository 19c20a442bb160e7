/*
 * client.c - blocking client connections, cleartext or TLS (GnuTLS, the library of tls.c): the
 * Redis store's transport. See net.h.
 *
 * The socket is non-blocking and every wait is a poll bounded by the caller's deadline, so a
 * TLS record half read or half written never outlasts it. The server's certificate is checked
 * during the handshake (gnutls_session_set_verify_cert): its chain against the context's CAs
 * (or the system's), and its name against the host dialled, DNS name or IP address.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "app/clock.h"
#include "app/file.h"
#include "net.h"

struct rld_net_client_tls {
    gnutls_certificate_credentials_t cred;
    int skip_hostname;
    char server_name[256]; /* checked instead of the host dialled; "" for none */
    char alpn[16];         /* offered in the handshake; "" for none */
};

struct rld_net_stream {
    int fd;
    gnutls_session_t tls; /* NULL over cleartext */
    char why[200];        /* what TLS said of the last failure, "" if nothing */
};

/* ---- the context ------------------------------------------------------------------------ */

static int read_pem(const char *path, const char *name, gnutls_datum_t *d, rl_err *err)
{
    size_t len;
    errno = 0;
    char *text = rld_read_file(path, &len);
    if (!text)
        return rl_errf(err, RL_EINVAL, "%s: %.200s: %s", name, path,
                       errno ? strerror(errno) : "cannot be read");
    d->data = (unsigned char *)text;
    d->size = (unsigned)len;
    return RL_OK;
}

rld_net_client_tls *rld_net_client_tls_new(const rld_net_client_tls_files *f, rl_err *err)
{
    gnutls_datum_t ca = {0}, cert = {0}, key = {0};
    rld_net_client_tls *t = calloc(1, sizeof *t);
    int rc = RL_OK, g;
    if (!t || gnutls_certificate_allocate_credentials(&t->cred) < 0) {
        free(t);
        rl_errf(err, RL_ENOMEM, "out of memory");
        return NULL;
    }
    t->skip_hostname = f->skip_hostname;
    if (f->server_name)
        snprintf(t->server_name, sizeof t->server_name, "%s", f->server_name);
    if (f->alpn)
        snprintf(t->alpn, sizeof t->alpn, "%s", f->alpn);
    if (!f->cert != !f->key) {
        rc = rl_errf(err, RL_EINVAL, "%s: give both %s and %s",
                     f->cert ? f->key_name : f->cert_name, f->cert_name, f->key_name);
        goto done;
    }
    if (f->ca) {
        if ((rc = read_pem(f->ca, f->ca_name, &ca, err)) != RL_OK)
            goto done;
        g = gnutls_certificate_set_x509_trust_mem(t->cred, &ca, GNUTLS_X509_FMT_PEM);
        if (g <= 0) {
            rc = rl_errf(err, RL_EINVAL, "%s: %.200s: %s", f->ca_name, f->ca,
                         g == 0 ? "holds no certificate" : gnutls_strerror(g));
            goto done;
        }
    } else if ((g = gnutls_certificate_set_x509_system_trust(t->cred)) < 0) {
        rc = rl_errf(err, RL_EINVAL, "%s: not given, and the system's CAs cannot be read: %s",
                     f->ca_name, gnutls_strerror(g));
        goto done;
    }
    if (f->cert) {
        if ((rc = read_pem(f->cert, f->cert_name, &cert, err)) != RL_OK ||
            (rc = read_pem(f->key, f->key_name, &key, err)) != RL_OK)
            goto done;
        g = gnutls_certificate_set_x509_key_mem2(t->cred, &cert, &key, GNUTLS_X509_FMT_PEM, NULL,
                                                 0);
        if (g < 0) {
            gnutls_x509_crt_t crt = NULL;
            int cert_bad = gnutls_x509_crt_init(&crt) < 0 ||
                           gnutls_x509_crt_import(crt, &cert, GNUTLS_X509_FMT_PEM) < 0;
            if (crt)
                gnutls_x509_crt_deinit(crt);
            rc = rl_errf(err, RL_EINVAL, "%s: %.200s: %s", cert_bad ? f->cert_name : f->key_name,
                         cert_bad ? f->cert : f->key, gnutls_strerror(g));
        }
    }
done:
    free(ca.data);
    free(cert.data);
    free(key.data);
    if (rc != RL_OK) {
        rld_net_client_tls_free(t);
        return NULL;
    }
    return t;
}

void rld_net_client_tls_free(rld_net_client_tls *t)
{
    if (!t)
        return;
    gnutls_certificate_free_credentials(t->cred);
    free(t);
}

/* ---- waiting ----------------------------------------------------------------------------- */

/* Waits until fd is ready for events or deadline passes: 1 ready, 0 deadline, -1 error. */
static int wait_fd(int fd, short events, rl_ns deadline)
{
    for (;;) {
        rl_ns left = deadline - rld_mono_ns();
        if (deadline == 0 || left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        rl_ns ms = (left + 999999) / 1000000;
        int n = poll(&p, 1, ms > 86400000 ? 86400000 : (int)ms);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* The events a TLS call that said GNUTLS_E_AGAIN waits for. */
static short tls_events(gnutls_session_t s)
{
    return gnutls_record_get_direction(s) ? POLLOUT : POLLIN;
}

/* ---- connecting -------------------------------------------------------------------------- */

/* A TCP connection to one address by deadline: the socket, or -1 with errno. */
static int connect_one(const struct addrinfo *ai, rl_ns deadline)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1, e = 0;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            e = errno;
        } else {
            int w = wait_fd(fd, POLLOUT, deadline);
            socklen_t el = sizeof e;
            if (w == 0)
                e = ETIMEDOUT;
            else if (w < 0)
                e = errno;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0)
                e = errno;
        }
    }
    if (e) {
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* The TLS handshake on s by deadline: 0, or -1 with why. */
static int handshake(rld_net_stream *s, rld_net_client_tls *t, const char *host, rl_ns deadline,
                     char *why, size_t cap)
{
    unsigned char ip[16];
    if (t->server_name[0])
        host = t->server_name;
    int literal = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    if (gnutls_init(&s->tls, GNUTLS_CLIENT | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL) < 0) {
        s->tls = NULL;
        snprintf(why, cap, "out of memory");
        return -1;
    }
    if (gnutls_set_default_priority(s->tls) < 0 ||
        gnutls_credentials_set(s->tls, GNUTLS_CRD_CERTIFICATE, t->cred) < 0 ||
        (!literal && gnutls_server_name_set(s->tls, GNUTLS_NAME_DNS, host, strlen(host)) < 0)) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    if (t->alpn[0]) {
        gnutls_datum_t p = {(unsigned char *)t->alpn, (unsigned)strlen(t->alpn)};
        if (gnutls_alpn_set_protocols(s->tls, &p, 1, 0) < 0) {
            snprintf(why, cap, "out of memory");
            return -1;
        }
    }
    gnutls_session_set_verify_cert(s->tls, t->skip_hostname ? NULL : host, 0);
    gnutls_transport_set_int(s->tls, s->fd);
    for (;;) {
        int r = gnutls_handshake(s->tls);
        if (r == GNUTLS_E_SUCCESS)
            return 0;
        if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
            int w = wait_fd(s->fd, tls_events(s->tls), deadline);
            if (w > 0)
                continue;
            snprintf(why, cap, "TLS handshake: %s", strerror(w == 0 ? ETIMEDOUT : errno));
            return -1;
        }
        if (r == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
            gnutls_datum_t out = {0};
            unsigned st = gnutls_session_get_verify_cert_status(s->tls);
            if (gnutls_certificate_verification_status_print(st, GNUTLS_CRT_X509, &out, 0) == 0) {
                size_t n = strlen((const char *)out.data);
                while (n && out.data[n - 1] == ' ') /* GnuTLS ends each sentence with one */
                    n--;
                snprintf(why, cap, "TLS handshake: the server's certificate: %.*s", (int)n,
                         (const char *)out.data);
            } else
                snprintf(why, cap, "TLS handshake: %s", gnutls_strerror(r));
            gnutls_free(out.data);
        } else if (r == GNUTLS_E_FATAL_ALERT_RECEIVED) {
            snprintf(why, cap, "TLS handshake: the server sent the alert \"%s\"",
                     gnutls_alert_get_name(gnutls_alert_get(s->tls)));
        } else {
            snprintf(why, cap, "TLS handshake: %s", gnutls_strerror(r));
        }
        return -1;
    }
}

rld_net_stream *rld_net_dial(const char *host, int port, rld_net_client_tls *tls, rl_ns deadline,
                             char *why, size_t cap)
{
    char ps[16];
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0) {
        snprintf(why, cap, "%s", g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        return NULL;
    }
    int fd = -1, e = 0;
    for (ai = res; ai && fd < 0; ai = ai->ai_next)
        if ((fd = connect_one(ai, deadline)) < 0)
            e = errno;
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(why, cap, "%s", strerror(e ? e : ECONNREFUSED));
        return NULL;
    }
    rld_net_stream *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        snprintf(why, cap, "out of memory");
        return NULL;
    }
    s->fd = fd;
    if (tls && handshake(s, tls, host, deadline, why, cap) != 0) {
        if (s->tls)
            gnutls_deinit(s->tls);
        close(fd);
        free(s);
        return NULL;
    }
    return s;
}

/* ---- reading and writing ----------------------------------------------------------------- */

/* A TLS failure r into errno and why. */
static void tls_failed(rld_net_stream *s, ssize_t r)
{
    if (r == GNUTLS_E_FATAL_ALERT_RECEIVED)
        snprintf(s->why, sizeof s->why, "TLS: the server sent the alert \"%s\"",
                 gnutls_alert_get_name(gnutls_alert_get(s->tls)));
    else
        snprintf(s->why, sizeof s->why, "TLS: %s", gnutls_strerror((int)r));
    errno = ECONNRESET;
}

ssize_t rld_net_stream_read(rld_net_stream *s, void *buf, size_t len, rl_ns deadline)
{
    s->why[0] = '\0';
    for (;;) {
        ssize_t r;
        short ev = POLLIN;
        if (s->tls) {
            r = gnutls_record_recv(s->tls, buf, len);
            if (r >= 0)
                return r;
            if (r == GNUTLS_E_PREMATURE_TERMINATION)
                return 0;
            if (r != GNUTLS_E_AGAIN && r != GNUTLS_E_INTERRUPTED) {
                tls_failed(s, r);
                return -1;
            }
            ev = tls_events(s->tls);
        } else {
            r = recv(s->fd, buf, len, 0);
            if (r >= 0)
                return r;
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return -1;
        }
        int w = wait_fd(s->fd, ev, deadline);
        if (w <= 0) {
            if (w == 0)
                errno = EAGAIN;
            return -1;
        }
    }
}

ssize_t rld_net_stream_write(rld_net_stream *s, const void *buf, size_t len, rl_ns deadline)
{
    size_t off = 0;
    s->why[0] = '\0';
    while (off < len) {
        ssize_t r;
        short ev = POLLOUT;
        if (s->tls) {
            r = gnutls_record_send(s->tls, (const char *)buf + off, len - off);
            if (r >= 0) {
                off += (size_t)r;
                continue;
            }
            if (r != GNUTLS_E_AGAIN && r != GNUTLS_E_INTERRUPTED) {
                tls_failed(s, r);
                errno = EPIPE;
                return -1;
            }
            ev = tls_events(s->tls);
        } else {
            r = send(s->fd, (const char *)buf + off, len - off, MSG_NOSIGNAL);
            if (r >= 0) {
                off += (size_t)r;
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return -1;
        }
        int w = wait_fd(s->fd, ev, deadline);
        if (w <= 0) {
            if (w == 0)
                errno = EAGAIN;
            return -1;
        }
    }
    return (ssize_t)len;
}

int rld_net_stream_fd(const rld_net_stream *s)
{
    return s->fd;
}

int rld_net_stream_pending(const rld_net_stream *s)
{
    return s->tls && gnutls_record_check_pending(s->tls) > 0;
}

const char *rld_net_stream_error(const rld_net_stream *s)
{
    return s->why[0] ? s->why : NULL;
}

void rld_net_stream_close(rld_net_stream *s)
{
    if (!s)
        return;
    if (s->tls) {
        gnutls_bye(s->tls, GNUTLS_SHUT_WR); /* non-blocking: sent if the socket takes it */
        gnutls_deinit(s->tls);
    }
    close(s->fd);
    free(s);
}
