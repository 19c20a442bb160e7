/*
 * flood.c - one request body sent at a steady rate to one or more ratelimitd instances, for the
 * cache of denials (tests/test_deny_cache.c and bench/run.sh's flood section): the rate is
 * shared evenly by the ports, each over CONNS keep-alive connections, request k of a
 * connection sent at start + k * its interval (at once when behind).
 *
 * Usage: flood RATE SECONDS BODY PORT [PORT...]
 * Prints: flood_requests, flood_allowed, flood_denied, flood_errors, flood_seconds, flood_rps,
 * flood_allowed_<i> and flood_last_denied_ms_<i> for the i-th port (ms after the start of the
 * last 429 it answered, -1 for none) and flood_allowed_per_100ms (a comma-separated count per
 * tenth of a second from the start).
 */
#define _GNU_SOURCE
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

#define CONNS 2
#define MAX_PORTS 8
#define SLOTS 6000 /* tenths of a second */

typedef struct conn {
    int port, index;
    double interval, seconds;
    const char *req;
    size_t reqlen;
    unsigned long requests, allowed, denied, errors;
    double last_denied; /* seconds after start, -1: none */
} conn;

static double t0;
static unsigned long slots[SLOTS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_until(double t)
{
    double d = t - now_s();
    if (d <= 0)
        return;
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    nanosleep(&ts, NULL);
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

/* One answer's status from fd, the whole answer read (Content-Length); -1 on failure. */
static int read_answer(int fd)
{
    char buf[8192];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n <= 0)
            return -1;
        have += (size_t)n;
        buf[have] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (!end) {
            if (have == sizeof buf - 1)
                return -1;
            continue;
        }
        char *cl = strcasestr(buf, "\r\nContent-Length:");
        size_t body = cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0;
        size_t want = (size_t)(end + 4 - buf) + body;
        while (have < want) {
            char sink[4096];
            size_t room = want - have < sizeof sink ? want - have : sizeof sink;
            n = read(fd, sink, room);
            if (n <= 0)
                return -1;
            have += (size_t)n;
        }
        return have > 12 ? atoi(buf + 9) : -1;
    }
}

static void *run(void *arg)
{
    conn *c = arg;
    int fd = connect_to(c->port);
    c->last_denied = -1;
    for (unsigned long k = 0;; k++) {
        double at = t0 + (double)k * c->interval;
        if (at - t0 >= c->seconds)
            break;
        sleep_until(at);
        if (fd < 0 && (fd = connect_to(c->port)) < 0) {
            c->errors++;
            continue;
        }
        c->requests++;
        int status = -1;
        if (write(fd, c->req, c->reqlen) == (ssize_t)c->reqlen)
            status = read_answer(fd);
        double t = now_s() - t0;
        if (status == 200) {
            c->allowed++;
            size_t s = (size_t)(t * 10);
            pthread_mutex_lock(&mu);
            if (s < SLOTS)
                slots[s]++;
            pthread_mutex_unlock(&mu);
        } else if (status == 429) {
            c->denied++;
            c->last_denied = t;
        } else {
            c->errors++;
            if (fd >= 0)
                close(fd);
            fd = -1;
        }
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 5 || argc - 4 > MAX_PORTS) {
        fprintf(stderr, "usage: flood RATE SECONDS BODY PORT [PORT...] (at most %d ports)\n",
                MAX_PORTS);
        return 2;
    }
    double rate = atof(argv[1]), seconds = atof(argv[2]);
    const char *body = argv[3];
    int nports = argc - 4, n = nports * CONNS;
    if (rate <= 0 || seconds <= 0 || seconds * 10 > SLOTS) {
        fprintf(stderr, "flood: RATE must be > 0 and SECONDS from 0 to %d\n", SLOTS / 10);
        return 2;
    }
    char req[4096];
    int len = snprintf(req, sizeof req,
                       "POST /acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                       "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                       strlen(body), body);
    if (len <= 0 || (size_t)len >= sizeof req) {
        fprintf(stderr, "flood: BODY too long\n");
        return 2;
    }
    conn c[MAX_PORTS * CONNS];
    pthread_t th[MAX_PORTS * CONNS];
    memset(c, 0, sizeof c);
    t0 = now_s() + 0.05;
    for (int i = 0; i < n; i++) {
        c[i].port = atoi(argv[4 + i / CONNS]);
        c[i].index = i / CONNS;
        c[i].interval = (double)n / rate;
        c[i].seconds = seconds;
        c[i].req = req;
        c[i].reqlen = (size_t)len;
        pthread_create(&th[i], NULL, run, &c[i]);
    }
    unsigned long req_n = 0, ok = 0, no = 0, err = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        req_n += c[i].requests;
        ok += c[i].allowed;
        no += c[i].denied;
        err += c[i].errors;
    }
    double took = now_s() - t0;
    printf("flood_requests: %lu\nflood_allowed: %lu\nflood_denied: %lu\nflood_errors: %lu\n", req_n,
           ok, no, err);
    printf("flood_seconds: %.3f\nflood_rps: %.0f\n", took, (double)req_n / took);
    for (int p = 0; p < nports; p++) {
        unsigned long a = 0;
        double last = -1;
        for (int i = p * CONNS; i < (p + 1) * CONNS; i++) {
            a += c[i].allowed;
            if (c[i].last_denied > last)
                last = c[i].last_denied;
        }
        printf("flood_allowed_%d: %lu\nflood_last_denied_ms_%d: %.0f\n", p, a, p,
               last < 0 ? -1 : last * 1000);
    }
    printf("flood_allowed_per_100ms: ");
    for (size_t s = 0; s < (size_t)(seconds * 10 + 0.999); s++)
        printf("%s%lu", s ? "," : "", slots[s]);
    printf("\n");
    return 0;
}
