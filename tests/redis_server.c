/*
 * redis_server.c - see redis_server.h.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "redis_server.h"

#define MAX_SERVERS 8
static rt_redis *running[MAX_SERVERS];
static int hooked;

static void stop_all(void)
{
    for (int i = 0; i < MAX_SERVERS; i++)
        if (running[i])
            rt_redis_stop(running[i]);
}

static void track(rt_redis *r, int on)
{
    for (int i = 0; i < MAX_SERVERS; i++)
        if (on ? running[i] == NULL || running[i] == r : running[i] == r) {
            running[i] = on ? r : NULL;
            break;
        }
    if (!hooked) {
        atexit(stop_all);
        hooked = 1;
    }
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Forks redis-server on r->port; returns 0 when it answers PING, -1 when it exited (port
 * taken). Fails the test when redis-server cannot be run. */
static int spawn(rt_redis *r)
{
    char port[16], log[128];
    snprintf(port, sizeof port, "%d", r->port);
    snprintf(log, sizeof log, "%s/redis.log", r->dir);
    pid_t parent = getpid();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", r->dir, "--daemonize", "no", "--loglevel", "warning",
               (char *)NULL);
        _exit(127);
    }
    r->pid = pid;
    for (int i = 0; i < 500; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            r->pid = 0;
            ck_assert_msg(!(WIFEXITED(st) && WEXITSTATUS(st) == 127),
                          "redis-server could not be run: install it with `make deps`");
            return -1;
        }
        struct timeval tv = {0, 200000};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
        if (c && !c->err) {
            redisReply *rep = redisCommand(c, "PING");
            int ok = rep && rep->type == REDIS_REPLY_STATUS;
            if (rep)
                freeReplyObject(rep);
            redisFree(c);
            if (ok)
                return 0;
        } else if (c) {
            redisFree(c);
        }
        sleep_ms(10);
    }
    ck_abort_msg("redis-server on port %d did not answer within 5 s", r->port);
    return -1;
}

static void remove_dir(const char *dir)
{
    static const char *const files[] = {"redis.log", "dump.rdb", "owner"};
    char path[400];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* A test that fails leaves through _exit, past any clean-up: its directory stays behind (its
 * server died with it). Directories whose owning process is gone are removed here. */
static void sweep_stale(void)
{
    DIR *d = opendir("/tmp");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char dir[300], path[320];
        struct stat st;
        if (strncmp(e->d_name, "rl-redis-", 9) != 0)
            continue;
        snprintf(dir, sizeof dir, "/tmp/%s", e->d_name);
        snprintf(path, sizeof path, "%s/owner", dir);
        FILE *f = fopen(path, "r");
        long pid = 0;
        if (f) {
            if (fscanf(f, "%ld", &pid) != 1)
                pid = 0;
            fclose(f);
        }
        int gone = pid > 0 ? kill((pid_t)pid, 0) != 0 && errno == ESRCH
                           : stat(dir, &st) == 0 && st.st_mtime < time(NULL) - 600;
        if (gone)
            remove_dir(dir);
    }
    if (d)
        closedir(d);
}

void rt_redis_start(rt_redis *r)
{
    memset(r, 0, sizeof *r);
    sweep_stale();
    snprintf(r->dir, sizeof r->dir, "/tmp/rl-redis-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(r->dir));
    char owner[96];
    snprintf(owner, sizeof owner, "%s/owner", r->dir);
    FILE *f = fopen(owner, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%ld\n", (long)getpid());
    fclose(f);
    track(r, 1);
    for (int attempt = 0; attempt < 5; attempt++) {
        r->port = free_port();
        if (spawn(r) == 0) {
            snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d/0", r->port);
            return;
        }
    }
    ck_abort_msg("redis-server did not start (see %s/redis.log)", r->dir);
}

void rt_redis_kill(rt_redis *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
}

void rt_redis_restart(rt_redis *r)
{
    for (int i = 0; i < 200; i++) { /* the port may linger a moment */
        if (spawn(r) == 0)
            return;
        sleep_ms(25);
    }
    ck_abort_msg("redis-server did not restart on port %d", r->port);
}

void rt_redis_pause(rt_redis *r)
{
    ck_assert_int_gt(r->pid, 0);
    kill(r->pid, SIGSTOP);
}

void rt_redis_resume(rt_redis *r)
{
    ck_assert_int_gt(r->pid, 0);
    kill(r->pid, SIGCONT);
}

void rt_redis_stop(rt_redis *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGCONT);
        kill(r->pid, SIGTERM);
        for (int i = 0; i < 200 && waitpid(r->pid, NULL, WNOHANG) == 0; i++)
            sleep_ms(10);
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
    if (r->dir[0]) {
        remove_dir(r->dir);
        r->dir[0] = '\0';
    }
    track(r, 0);
}

redisContext *rt_redis_connect(const rt_redis *r)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    ck_assert_msg(c && !c->err, "cannot connect to redis on port %d", r->port);
    return c;
}

redisReply *rt_redis_cmd(const rt_redis *r, const char *fmt, ...)
{
    redisContext *c = rt_redis_connect(r);
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    ck_assert_msg(rep != NULL, "redis command failed: %s", c->errstr);
    redisFree(c);
    return rep;
}
