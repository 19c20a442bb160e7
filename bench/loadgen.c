/*
 * loadgen.c - sends an exact number of POST /acquire requests over keep-alive connections,
 * for the memory benchmarks: request i names user "user-<(first + i) % users>".
 *
 * Usage: loadgen PORT USERS FIRST COUNT CONNECTIONS
 * Prints: loadgen_requests, loadgen_allowed, loadgen_denied, loadgen_errors, loadgen_rps.
 */
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

typedef struct job {
    int port;
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

/* Reads one response; returns its status code or -1. */
static int read_response(int fd, char *buf, size_t cap)
{
    size_t have = 0;
    char *end = NULL;
    while (!end) {
        ssize_t r = read(fd, buf + have, cap - have - 1);
        if (r <= 0)
            return -1;
        have += (size_t)r;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
        if (!end && have >= cap - 1)
            return -1;
    }
    int status = atoi(buf + 9);
    const char *cl = strcasestr(buf, "content-length:");
    size_t body = cl ? strtoul(cl + 15, NULL, 10) : 0;
    size_t got = have - (size_t)(end + 4 - buf);
    while (got < body) {
        ssize_t r = read(fd, buf, cap < body - got ? cap : body - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return status;
}

static void *run(void *p)
{
    job *j = p;
    char req[512], buf[16384];
    int fd = connect_to(j->port);
    for (unsigned long i = j->offset; i < j->count; i += j->step) {
        if (fd < 0 && (fd = connect_to(j->port)) < 0) {
            j->errors++;
            continue;
        }
        char body[128];
        int bl = snprintf(body, sizeof body, "{\"keys\": {\"user\": \"user-%lu\"}}",
                          (j->first + i) % j->users);
        int rl = snprintf(req, sizeof req,
                          "POST /acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                          "application/json\r\nContent-Length: %d\r\n\r\n%s",
                          bl, body);
        int status = write(fd, req, (size_t)rl) == rl ? read_response(fd, buf, sizeof buf) : -1;
        if (status == 200)
            j->allowed++;
        else if (status == 429)
            j->denied++;
        else {
            j->errors++;
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
    if (argc != 6) {
        fprintf(stderr, "usage: loadgen PORT USERS FIRST COUNT CONNECTIONS\n");
        return 2;
    }
    int port = atoi(argv[1]), nc = atoi(argv[5]);
    unsigned long users = strtoul(argv[2], NULL, 10), first = strtoul(argv[3], NULL, 10),
                  count = strtoul(argv[4], NULL, 10);
    if (nc < 1 || nc > 256 || users == 0)
        return 2;
    pthread_t th[256];
    job jobs[256];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < nc; i++) {
        jobs[i] = (job){port, users, first, count, (unsigned long)nc, (unsigned long)i, 0, 0, 0};
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
