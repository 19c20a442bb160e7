/*
 * loadgen.c - sends an exact number of POST /acquire requests over keep-alive connections,
 * for the memory benchmarks: request i names user "user-<(first + i) % users>". Each
 * connection keeps up to DEPTH requests in flight (HTTP/1.1 pipelining), so that ten million
 * requests take a minute rather than several.
 *
 * Usage: loadgen PORT USERS FIRST COUNT CONNECTIONS [DEPTH]
 *        loadgen --free-port      prints a loopback TCP port that was free a moment ago
 * Prints: loadgen_requests, loadgen_allowed, loadgen_denied, loadgen_errors, loadgen_rps.
 */
#define _GNU_SOURCE /* strcasestr, memmem */
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

#define MAX_DEPTH 64
#define RBUF (256 * 1024)

typedef struct job {
    int port, depth;
    unsigned long users, first, count, step, offset;
    unsigned long allowed, denied, errors;
} job;

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

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof a;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* Appends request i to out; returns its length. */
static size_t format_request(const job *j, unsigned long i, char *out, size_t cap)
{
    char body[128];
    int bl = snprintf(body, sizeof body, "{\"keys\": {\"user\": \"user-%lu\"}}",
                      (j->first + i) % j->users);
    int rl = snprintf(out, cap,
                      "POST /acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                      "application/json\r\nContent-Length: %d\r\n\r\n%s",
                      bl, body);
    return rl > 0 && (size_t)rl < cap ? (size_t)rl : 0;
}

/* Reads n whole responses from fd, counting their statuses; returns 0, or -1 when the
 * connection failed or an answer could not be parsed. */
static int read_responses(job *j, int fd, char *buf, int n)
{
    size_t have = 0, pos = 0;
    while (n > 0) {
        char *end = have > pos ? memmem(buf + pos, have - pos, "\r\n\r\n", 4) : NULL;
        if (end) {
            size_t hdr = (size_t)(end + 4 - buf);
            char save = *end;
            *end = '\0';
            int status = atoi(buf + pos + 9);
            const char *cl = strcasestr(buf + pos, "\r\ncontent-length:");
            size_t body = cl ? strtoul(cl + 17, NULL, 10) : 0;
            *end = save;
            if (hdr + body <= have) {
                if (status == 200)
                    j->allowed++;
                else if (status == 429)
                    j->denied++;
                else
                    j->errors++;
                pos = hdr + body;
                n--;
                continue;
            }
        }
        if (pos > 0) { /* keep the unparsed tail at the front */
            memmove(buf, buf + pos, have - pos);
            have -= pos;
            pos = 0;
        }
        if (have >= RBUF - 1)
            return -1;
        ssize_t r = read(fd, buf + have, RBUF - 1 - have);
        if (r <= 0)
            return -1;
        have += (size_t)r;
    }
    return 0;
}

static void *run(void *p)
{
    job *j = p;
    char *out = malloc((size_t)j->depth * 256), *buf = malloc(RBUF);
    int fd = connect_to(j->port);
    unsigned long i = j->offset;
    while (out && buf && i < j->count) {
        if (fd < 0 && (fd = connect_to(j->port)) < 0) {
            j->errors++;
            i += j->step;
            continue;
        }
        size_t len = 0;
        int n = 0;
        for (; n < j->depth && i < j->count; n++, i += j->step)
            len += format_request(j, i, out + len, 256);
        if (write(fd, out, len) != (ssize_t)len || read_responses(j, fd, buf, n) != 0) {
            j->errors += (unsigned long)n; /* at most: some may have been counted */
            close(fd);
            fd = -1;
        }
    }
    if (fd >= 0)
        close(fd);
    free(out);
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--free-port") == 0) {
        int port = free_port();
        if (port < 0)
            return 1;
        printf("%d\n", port);
        return 0;
    }
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: loadgen PORT USERS FIRST COUNT CONNECTIONS [DEPTH]\n"
                        "       loadgen --free-port\n");
        return 2;
    }
    int port = atoi(argv[1]), nc = atoi(argv[5]), depth = argc == 7 ? atoi(argv[6]) : 1;
    unsigned long users = strtoul(argv[2], NULL, 10), first = strtoul(argv[3], NULL, 10),
                  count = strtoul(argv[4], NULL, 10);
    if (nc < 1 || nc > 256 || users == 0 || depth < 1 || depth > MAX_DEPTH)
        return 2;
    pthread_t th[256];
    job jobs[256];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < nc; i++) {
        jobs[i] = (job){port, depth, users, first, count, (unsigned long)nc, (unsigned long)i,
                        0, 0, 0};
        pthread_create(&th[i], NULL, run, &jobs[i]);
    }
    unsigned long allowed = 0, denied = 0, errors = 0;
    for (int i = 0; i < nc; i++) {
        pthread_join(th[i], NULL);
        allowed += jobs[i].allowed;
        denied += jobs[i].denied;
        errors += jobs[i].errors;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("loadgen_requests: %lu\nloadgen_allowed: %lu\nloadgen_denied: %lu\n"
           "loadgen_errors: %lu\nloadgen_rps: %.0f\n",
           count, allowed, denied, errors, (double)count / s);
    return errors ? 1 : 0;
}
