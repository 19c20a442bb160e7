/*
 * soak.c - many clients far past capacity for a bounded time: CLIENTS threads, each with one
 * keep-alive connection, send POST /acquire for one of KEYS users (one request at a time) for
 * SECONDS, and time every answer. A 200 or a 429 is an answer; anything else, a connection that
 * fails or a malformed reply is an error (the client reconnects and goes on).
 *
 * Usage: soak PORT CLIENTS SECONDS KEYS
 * Prints: soak_requests, soak_allowed, soak_denied, soak_errors, soak_rps, soak_p50_us,
 *         soak_p99_us, soak_max_us.
 */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Latency histogram: 1 us buckets up to 10 ms, then 100 us buckets up to 10 s. */
#define FINE 10000
#define COARSE 100000
#define NBUCKET (FINE + COARSE)

typedef struct client {
    int port, id;
    double until;
    unsigned long keys, requests, allowed, denied, errors;
    unsigned long long max_us;
    unsigned *hist;
} client;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* One request and its whole answer; returns the status, or -1. */
static int exchange(int fd, const char *req, size_t len)
{
    char buf[16384];
    size_t n = 0;
    if (write(fd, req, len) != (ssize_t)len)
        return -1;
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
        if (r <= 0)
            return -1;
        n += (size_t)r;
        buf[n] = '\0';
        char *end = strstr(buf, "\r\n\r\n"), *cl = strcasestr(buf, "\r\nContent-Length:");
        if (end && cl && n >= (size_t)(end + 4 - buf) + strtoul(cl + 17, NULL, 10))
            break;
        if (n == sizeof buf - 1)
            return -1;
    }
    return strncmp(buf, "HTTP/1.1 ", 9) == 0 ? atoi(buf + 9) : -1;
}

static void record(client *c, double seconds)
{
    unsigned long long us = (unsigned long long)(seconds * 1e6);
    size_t b = us < FINE ? us : FINE + (us - FINE) / 100;
    c->hist[b < NBUCKET ? b : NBUCKET - 1]++;
    if (us > c->max_us)
        c->max_us = us;
}

static void *run(void *arg)
{
    client *c = arg;
    char body[128], req[512];
    int fd = -1;
    unsigned long i = (unsigned long)c->id;
    while (now_s() < c->until) {
        if (fd < 0 && (fd = connect_to(c->port)) < 0) {
            c->errors++;
            usleep(1000);
            continue;
        }
        int bl = snprintf(body, sizeof body, "{\"keys\": {\"user\": \"soak-%lu\"}}", i % c->keys);
        int rl = snprintf(req, sizeof req,
                          "POST /acquire HTTP/1.1\r\nHost: soak\r\nContent-Type: "
                          "application/json\r\nContent-Length: %d\r\n\r\n%s",
                          bl, body);
        double t0 = now_s();
        int st = exchange(fd, req, (size_t)rl);
        record(c, now_s() - t0);
        c->requests++;
        if (st == 200)
            c->allowed++;
        else if (st == 429)
            c->denied++;
        else
            c->errors++;
        if (st != 200 && st != 429) {
            close(fd);
            fd = -1;
        }
        i += 7919;
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static double percentile(const unsigned *h, unsigned long total, double p)
{
    unsigned long want = (unsigned long)(p * (double)total), seen = 0;
    for (size_t b = 0; b < NBUCKET; b++) {
        seen += h[b];
        if (seen > want)
            return b < FINE ? (double)b : (double)(FINE + (b - FINE) * 100);
    }
    return -1;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: soak PORT CLIENTS SECONDS KEYS\n");
        return 2;
    }
    int port = atoi(argv[1]), n = atoi(argv[2]);
    double secs = atof(argv[3]);
    unsigned long keys = strtoul(argv[4], NULL, 10);
    if (n < 1 || n > 4096 || secs <= 0 || keys < 1) {
        fprintf(stderr, "soak: bad arguments\n");
        return 2;
    }
    client *cs = calloc((size_t)n, sizeof *cs);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    unsigned *hist = calloc(NBUCKET, sizeof *hist);
    double start = now_s();
    for (int i = 0; i < n; i++) {
        cs[i] = (client){.port = port, .id = i, .until = start + secs, .keys = keys};
        cs[i].hist = calloc(NBUCKET, sizeof *hist);
        pthread_create(&th[i], NULL, run, &cs[i]);
    }
    unsigned long req = 0, ok = 0, den = 0, err = 0;
    unsigned long long mx = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        req += cs[i].requests;
        ok += cs[i].allowed;
        den += cs[i].denied;
        err += cs[i].errors;
        mx = cs[i].max_us > mx ? cs[i].max_us : mx;
        for (size_t b = 0; b < NBUCKET; b++)
            hist[b] += cs[i].hist[b];
        free(cs[i].hist);
    }
    double took = now_s() - start;
    printf("soak_requests: %lu\nsoak_allowed: %lu\nsoak_denied: %lu\nsoak_errors: %lu\n", req, ok,
           den, err);
    printf("soak_rps: %.0f\nsoak_p50_us: %.0f\nsoak_p99_us: %.0f\nsoak_max_us: %llu\n",
           (double)req / took, percentile(hist, req, 0.50), percentile(hist, req, 0.99), mx);
    free(hist);
    free(cs);
    free(th);
    return 0;
}
