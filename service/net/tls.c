/*
 * tls.c - TLS for net.h's connections, with GnuTLS (the library libmicrohttpd serves HTTPS
 * with: one TLS library for the daemon). See net.h and tls.h.
 *
 * The certificates in force are one credentials object with a count of the sessions that use
 * it. A reload makes a new one and puts it in place under the context's mutex; a connection
 * accepted after that takes the new one, and the old one is freed when the last connection
 * that began with it closes. A client certificate is checked during the handshake (GnuTLS's
 * verify callback): signed by client_ca, fit for client authentication, and, with client_san,
 * holding that DNS name in its subjectAltName; so a refusal is a TLS alert, before any byte of
 * the protocol.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/file.h"
#include "app/log.h"
#include "tls.h"

/* The certificates in force, shared by the sessions that began with them. */
typedef struct creds {
    gnutls_certificate_credentials_t cred;
    long refs; /* atomic: the context's own, plus one per session */
} creds;

struct rld_net_tls {
    pthread_mutex_t mu;
    creds *cur; /* under mu */
    char *cert, *cert_name, *key, *key_name, *ca, *ca_name, *san, *san_name, *alpn, *what;
    gnutls_priority_t prio;
};

struct rld_net_tls_conn {
    gnutls_session_t s;
    creds *cr;
    const rld_net_tls *t;
    int ready;
    const char *why; /* the verify callback's reason for a refusal */
    char why_buf[320];
    char peer[64];
};

/* ---- credentials ---------------------------------------------------------------------- */

static void creds_release(creds *c)
{
    if (c && __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        gnutls_certificate_free_credentials(c->cred);
        free(c);
    }
}

/* Reads a PEM file into d (freed with free(d->data)). */
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

/* Checks the client certificate during the handshake: 0 to go on, -1 to refuse (why kept). */
static int verify_client(gnutls_session_t s)
{
    rld_net_tls_conn *tc = gnutls_session_get_ptr(s);
    const rld_net_tls *t = tc->t;
    unsigned status = 0;
    gnutls_typed_vdata_st purpose = {.type = GNUTLS_DT_KEY_PURPOSE_OID,
                                     .data = (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT};
    if (gnutls_certificate_verify_peers(s, &purpose, 1, &status) < 0 || status != 0) {
        tc->why = "the client certificate is not signed by a CA of the client CA file, or is "
                  "not fit for client authentication";
        return -1;
    }
    if (!t->san)
        return 0;
    unsigned n = 0;
    const gnutls_datum_t *chain = gnutls_certificate_get_peers(s, &n);
    gnutls_x509_crt_t crt;
    int found = 0;
    if (!chain || n == 0 || gnutls_x509_crt_init(&crt) < 0) {
        tc->why = "no client certificate";
        return -1;
    }
    if (gnutls_x509_crt_import(crt, &chain[0], GNUTLS_X509_FMT_DER) == 0) {
        for (unsigned i = 0; !found; i++) {
            char name[256];
            size_t size = sizeof name - 1;
            int type = gnutls_x509_crt_get_subject_alt_name(crt, i, name, &size, NULL);
            if (type < 0 && type != GNUTLS_E_SHORT_MEMORY_BUFFER)
                break; /* no more names */
            if (type == GNUTLS_SAN_DNSNAME && size == strlen(t->san) &&
                memcmp(name, t->san, size) == 0)
                found = 1;
        }
    }
    gnutls_x509_crt_deinit(crt);
    if (!found) {
        snprintf(tc->why_buf, sizeof tc->why_buf,
                 "the client certificate's subjectAltName does not hold the DNS name %.250s",
                 t->san);
        tc->why = tc->why_buf;
    }
    return found ? 0 : -1;
}

/* New credentials from t's files. */
static int creds_load(const rld_net_tls *t, creds **out, rl_err *err)
{
    gnutls_datum_t cert = {0}, key = {0}, ca = {0};
    creds *c = calloc(1, sizeof *c);
    int rc = RL_OK, g;
    *out = NULL;
    if (!c || gnutls_certificate_allocate_credentials(&c->cred) < 0) {
        free(c);
        return rl_errf(err, RL_ENOMEM, "out of memory");
    }
    c->refs = 1;
    if ((rc = read_pem(t->cert, t->cert_name, &cert, err)) != RL_OK ||
        (rc = read_pem(t->key, t->key_name, &key, err)) != RL_OK ||
        (t->ca && (rc = read_pem(t->ca, t->ca_name, &ca, err)) != RL_OK))
        goto done;
    if ((g = gnutls_certificate_set_x509_key_mem2(c->cred, &cert, &key, GNUTLS_X509_FMT_PEM, NULL,
                                                  0)) < 0) {
        /* which file is at fault: the certificate when it does not parse alone */
        gnutls_x509_crt_t crt = NULL;
        int cert_bad = gnutls_x509_crt_init(&crt) < 0 ||
                       gnutls_x509_crt_import(crt, &cert, GNUTLS_X509_FMT_PEM) < 0;
        if (crt)
            gnutls_x509_crt_deinit(crt);
        rc = rl_errf(err, RL_EINVAL, "%s: %.200s: %s", cert_bad ? t->cert_name : t->key_name,
                     cert_bad ? t->cert : t->key, gnutls_strerror(g));
        goto done;
    }
    if (t->ca) {
        g = gnutls_certificate_set_x509_trust_mem(c->cred, &ca, GNUTLS_X509_FMT_PEM);
        if (g <= 0) {
            rc = rl_errf(err, RL_EINVAL, "%s: %.200s: %s", t->ca_name, t->ca,
                         g == 0 ? "holds no certificate" : gnutls_strerror(g));
            goto done;
        }
        gnutls_certificate_set_verify_function(c->cred, verify_client);
    }
done:
    free(cert.data);
    free(key.data);
    free(ca.data);
    if (rc != RL_OK)
        creds_release(c);
    else
        *out = c;
    return rc;
}

/* ---- the context ------------------------------------------------------------------------ */

static int dup_or_null(char **dst, const char *src)
{
    *dst = NULL;
    return src && !(*dst = strdup(src)) ? -1 : 0;
}

rld_net_tls *rld_net_tls_new(const rld_net_tls_files *f, rl_err *err)
{
    rld_net_tls *t = calloc(1, sizeof *t);
    if (!t) {
        rl_errf(err, RL_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&t->mu, NULL);
    if (dup_or_null(&t->cert, f->cert) || dup_or_null(&t->cert_name, f->cert_name) ||
        dup_or_null(&t->key, f->key) || dup_or_null(&t->key_name, f->key_name) ||
        dup_or_null(&t->ca, f->client_ca) || dup_or_null(&t->ca_name, f->client_ca_name) ||
        dup_or_null(&t->san, f->client_san) || dup_or_null(&t->san_name, f->client_san_name) ||
        dup_or_null(&t->alpn, f->alpn) || dup_or_null(&t->what, f->what ? f->what : "tls") ||
        gnutls_priority_init(&t->prio, NULL, NULL) < 0) {
        rl_errf(err, RL_ENOMEM, "out of memory");
        rld_net_tls_free(t);
        return NULL;
    }
    if (creds_load(t, &t->cur, err) != RL_OK) {
        rld_net_tls_free(t);
        return NULL;
    }
    return t;
}

int rld_net_tls_reload(rld_net_tls *t, rl_err *err)
{
    creds *c, *old;
    int rc = creds_load(t, &c, err);
    if (rc != RL_OK)
        return rc;
    pthread_mutex_lock(&t->mu);
    old = t->cur;
    t->cur = c;
    pthread_mutex_unlock(&t->mu);
    creds_release(old); /* freed now, or by the last connection that began with it */
    return RL_OK;
}

void rld_net_tls_free(rld_net_tls *t)
{
    if (!t)
        return;
    creds_release(t->cur);
    if (t->prio)
        gnutls_priority_deinit(t->prio);
    char *strs[] = {t->cert,    t->cert_name, t->key,      t->key_name, t->ca,
                    t->ca_name, t->san,       t->san_name, t->alpn,     t->what};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        free(strs[i]);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static void part_refresh(void *self)
{
    rld_net_tls *t = self;
    rl_err err = {{0}};
    if (rld_net_tls_reload(t, &err) == RL_OK)
        rld_log("%s: certificates read again from %s (new connections get them)", t->what, t->cert);
    else
        rld_log("error: %s: certificates not read again, the ones in force stay: %s", t->what,
                err.msg);
}

const rld_part_ops rld_net_tls_part_ops = {.name = "tls", .refresh = part_refresh};

/* ---- a connection ----------------------------------------------------------------------- */

int rld__tls_open(rld_net_tls *t, rld_net_conn *c, const struct sockaddr *sa, socklen_t sl)
{
    rld_net_tls_conn *tc = calloc(1, sizeof *tc);
    if (!tc)
        return -1;
    tc->t = t;
    if (sa && sa->sa_family == AF_INET && sl >= sizeof(struct sockaddr_in))
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, tc->peer, sizeof tc->peer);
    else if (sa && sa->sa_family == AF_INET6 && sl >= sizeof(struct sockaddr_in6))
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, tc->peer,
                  sizeof tc->peer);
    if (gnutls_init(&tc->s, GNUTLS_SERVER | GNUTLS_NONBLOCK) < 0) {
        free(tc);
        return -1;
    }
    pthread_mutex_lock(&t->mu);
    tc->cr = t->cur;
    __atomic_add_fetch(&tc->cr->refs, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&t->mu);
    int bad = gnutls_priority_set(tc->s, t->prio) < 0 ||
              gnutls_credentials_set(tc->s, GNUTLS_CRD_CERTIFICATE, tc->cr->cred) < 0;
    if (!bad && t->alpn) {
        gnutls_datum_t proto = {(unsigned char *)t->alpn, (unsigned)strlen(t->alpn)};
        bad = gnutls_alpn_set_protocols(tc->s, &proto, 1, GNUTLS_ALPN_MANDATORY) < 0;
    }
    if (bad) {
        gnutls_deinit(tc->s);
        creds_release(tc->cr);
        free(tc);
        return -1;
    }
    if (t->ca)
        gnutls_certificate_server_set_request(tc->s, GNUTLS_CERT_REQUIRE);
    gnutls_session_set_ptr(tc->s, tc);
    gnutls_transport_set_int(tc->s, c->fd);
    c->tls = tc;
    return 0;
}

int rld__tls_ready(const rld_net_conn *c)
{
    return c->tls->ready;
}

int rld__tls_handshake(rld_net_conn *c)
{
    rld_net_tls_conn *tc = c->tls;
    int r;
    do
        r = gnutls_handshake(tc->s);
    while (r == GNUTLS_E_INTERRUPTED);
    if (r == GNUTLS_E_AGAIN)
        return 0;
    if (r < 0) {
        /* a client gone before its first byte (a port probe) is not worth a line */
        if (r != GNUTLS_E_PREMATURE_TERMINATION && r != GNUTLS_E_PULL_ERROR)
            rld_log("warn: %s: TLS handshake with %s refused: %s", tc->t->what, tc->peer,
                    tc->why ? tc->why : gnutls_strerror(r));
        return -1;
    }
    tc->ready = 1;
    return 1;
}

ssize_t rld__tls_read(rld_net_conn *c, void *buf, size_t len)
{
    rld_net_tls_conn *tc = c->tls;
    size_t got = 0;
    if (!tc->ready) {
        errno = EAGAIN;
        return -1;
    }
    while (got < len) {
        ssize_t r = gnutls_record_recv(tc->s, (char *)buf + got, len - got);
        if (r > 0) {
            got += (size_t)r;
            continue;
        }
        if (r == GNUTLS_E_INTERRUPTED)
            continue;
        if (got)
            break; /* the error, if it lasts, comes back at the next read */
        if (r == 0 || r == GNUTLS_E_PREMATURE_TERMINATION)
            return 0;
        errno = r == GNUTLS_E_AGAIN ? EAGAIN : ECONNRESET;
        return -1;
    }
    return (ssize_t)got;
}

ssize_t rld__tls_write(rld_net_conn *c, const void *buf, size_t len)
{
    rld_net_tls_conn *tc = c->tls;
    if (!tc->ready) {
        errno = EAGAIN;
        return -1;
    }
    for (;;) {
        ssize_t r = gnutls_record_send(tc->s, buf, len);
        if (r >= 0)
            return r;
        if (r == GNUTLS_E_INTERRUPTED)
            continue;
        errno = r == GNUTLS_E_AGAIN ? EAGAIN : EPIPE;
        return -1;
    }
}

void rld__tls_close(rld_net_conn *c)
{
    rld_net_tls_conn *tc = c->tls;
    if (!tc)
        return;
    if (tc->ready)
        gnutls_bye(tc->s, GNUTLS_SHUT_WR); /* non-blocking: sent if the socket takes it */
    gnutls_deinit(tc->s);
    creds_release(tc->cr);
    free(tc);
    c->tls = NULL;
}
