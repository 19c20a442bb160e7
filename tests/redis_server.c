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

#define MAX_SERVERS 32
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

/* Binds port on loopback (0: any); returns the port bound, or 0 when it is taken. */
static int try_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)port)};
    socklen_t len = sizeof a;
    ck_assert_int_ge(fd, 0);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
             getsockname(fd, (struct sockaddr *)&a, &len) == 0;
    close(fd);
    return ok ? ntohs(a.sin_port) : 0;
}

/* A free loopback port; for a cluster node, one whose bus port (+ 10000) is free as well. */
static int free_port(rt_redis_kind kind)
{
    for (int i = 0; i < 100; i++) {
        int port = try_port(0);
        ck_assert_int_gt(port, 0);
        if (kind != RT_REDIS_CLUSTER || (port + 10000 <= 65535 && try_port(port + 10000)))
            return port;
    }
    ck_abort_msg("no free port pair for a cluster node");
    return 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Runs the server r describes (in the child: returns only when exec failed). */
static void exec_kind(const rt_redis *r, const char *port)
{
    char primary[16], tmo[16], conf[96];
    snprintf(primary, sizeof primary, "%d", r->replica_of);
    snprintf(tmo, sizeof tmo, "%d", r->node_timeout_ms);
    snprintf(conf, sizeof conf, "%s/sentinel.conf", r->dir);
    switch (r->kind) {
    case RT_REDIS_SENTINEL:
        execlp("redis-sentinel", "redis-sentinel", conf, "--port", port, "--bind", "127.0.0.1",
               "--dir", r->dir, "--daemonize", "no", "--loglevel", "notice", (char *)NULL);
        break;
    case RT_REDIS_REPLICA:
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", r->dir, "--daemonize", "no", "--loglevel",
               "warning", "--replicaof", "127.0.0.1", primary, (char *)NULL);
        break;
    case RT_REDIS_CLUSTER:
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", r->dir, "--daemonize", "no", "--loglevel",
               "warning", "--repl-diskless-sync-delay", "0", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
               "--cluster-node-timeout", tmo, (char *)NULL);
        break;
    default:
        if (r->tls_port) {
            char tport[16], cert[96], key[96], ca[96];
            snprintf(tport, sizeof tport, "%d", r->tls_port);
            snprintf(cert, sizeof cert, "%s/redis.pem", r->tls_dir);
            snprintf(key, sizeof key, "%s/redis.key", r->tls_dir);
            snprintf(ca, sizeof ca, "%s/ca.pem", r->tls_dir);
            execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--dir", r->dir, "--daemonize", "no",
                   "--loglevel", "warning", "--repl-diskless-sync-delay", "0", "--tls-port",
                   tport, "--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file",
                   ca, "--tls-auth-clients", "no", (char *)NULL);
        }
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", r->dir, "--daemonize", "no", "--loglevel",
               "warning", "--repl-diskless-sync-delay", "0", (char *)NULL);
    }
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
        exec_kind(r, port);
        _exit(127);
    }
    r->pid = pid;
    for (int i = 0; i < 500; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            r->pid = 0;
            ck_assert_msg(!(WIFEXITED(st) && WEXITSTATUS(st) == 127),
                          "%s could not be run: install it with `make deps`",
                          r->kind == RT_REDIS_SENTINEL ? "redis-sentinel" : "redis-server");
            return -1;
        }
        struct timeval tv = {0, 200000};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
        if (c && !c->err) {
            /* the server on the port must be ours: while another test's server holds the
             * port, it would answer until ours has failed to bind and exited */
            redisReply *rep = redisCommand(c, "INFO server");
            char *id = rep && rep->type == REDIS_REPLY_STRING ? strstr(rep->str, "process_id:")
                                                              : NULL;
            long who = id ? strtol(id + 11, NULL, 10) : 0;
            if (rep)
                freeReplyObject(rep);
            redisFree(c);
            if (who == (long)pid)
                return 0;
            if (who > 0) { /* another's: ours exits, and another port is tried */
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                r->pid = 0;
                return -1;
            }
        } else if (c) {
            redisFree(c);
        }
        sleep_ms(10);
    }
    ck_abort_msg("redis-server on port %d did not answer within 5 s", r->port);
    return -1;
}

/* Removes dir and the files in it (a server writes no subdirectories). */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[600];
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
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

/* Makes r's directory and tracks r; r->kind and r->replica_of are set. */
static void prepare(rt_redis *r)
{
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
}

/* Picks a free port and starts r there (prepared); conf, when not NULL, writes the sentinel's
 * configuration for that port first. */
static void start_prepared(rt_redis *r, void (*conf)(rt_redis *r, void *arg), void *arg)
{
    for (int attempt = 0; attempt < 5; attempt++) {
        r->port = free_port(r->kind);
        if (r->tls_dir[0])
            while ((r->tls_port = free_port(r->kind)) == r->port)
                ;
        if (conf)
            conf(r, arg);
        if (spawn(r) == 0) {
            if (r->tls_port)
                snprintf(r->url, sizeof r->url, "rediss://127.0.0.1:%d/0", r->tls_port);
            else
                snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d/0", r->port);
            return;
        }
    }
    ck_abort_msg("redis did not start (see %s/redis.log)", r->dir);
}

void rt_redis_start(rt_redis *r)
{
    memset(r, 0, sizeof *r);
    prepare(r);
    start_prepared(r, NULL, NULL);
}

void rt_redis_start_tls(rt_redis *r, const char *tls_dir)
{
    memset(r, 0, sizeof *r);
    snprintf(r->tls_dir, sizeof r->tls_dir, "%s", tls_dir);
    prepare(r);
    start_prepared(r, NULL, NULL);
}

/* openssl with args in dir, its output in dir/openssl.log; fails the test if it fails. */
static void openssl_in(const char *dir, const char *const *args)
{
    const char *argv[32] = {"openssl"};
    char log[96];
    size_t n = 1;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    snprintf(log, sizeof log, "%s/openssl.log", dir);
    char cwd[512];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(dir), 0);
    int rc = rt_run(argv, log, 30);
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_msg(rc == 0, "openssl failed (see %s)", log);
}

void rt_tls_certs(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/rl-tls-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    FILE *f;
    char ext[96];
    snprintf(ext, sizeof ext, "%s/redis.ext", dir);
    ck_assert_ptr_nonnull(f = fopen(ext, "w"));
    fputs("subjectAltName=IP:127.0.0.1\n", f);
    fclose(f);
    const char *ca[] = {"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj",
                        "/CN=test-ca", NULL};
    const char *csr[] = {"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                         "-nodes", "-keyout", "redis.key", "-out", "redis.csr", "-subj",
                         "/CN=redis", NULL};
    const char *sign[] = {"x509", "-req", "-in", "redis.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                          "-CAcreateserial", "-out", "redis.pem", "-days", "2", "-extfile",
                          "redis.ext", NULL};
    openssl_in(dir, ca);
    openssl_in(dir, csr);
    openssl_in(dir, sign);
}

void rt_tls_remove(const char *dir)
{
    if (dir[0])
        remove_dir(dir);
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
    ck_abort_msg("redis did not restart on port %d (see %s/redis.log)", r->port, r->dir);
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

redisReply *rt_redis_read(const rt_redis *r, const char *fmt, ...)
{
    char why[128] = "";
    for (int i = 0; i < 250; i++) {
        if (i)
            sleep_ms(20);
        redisContext *c = rt_redis_connect(r);
        va_list ap;
        va_start(ap, fmt);
        redisReply *rep = redisvCommand(c, fmt, ap);
        va_end(ap);
        snprintf(why, sizeof why, "%s", c->errstr);
        redisFree(c);
        if (rep)
            return rep;
    }
    ck_abort_msg("redis command failed for 5 s: %s", why);
    return NULL;
}

/* ---- groups -------------------------------------------------------------------------------- */

/* A command on a new connection to port (1 s timeout); NULL when it cannot connect or the
 * connection fails. */
static redisReply *port_cmd(int port, const char *fmt, ...)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return rep;
}

/* Whether INFO <section> (CLUSTER INFO for "cluster") of port has the line "<field>:<value>". */
static int info_has(int port, const char *section, const char *line)
{
    redisReply *rep = strcmp(section, "cluster") == 0 ? port_cmd(port, "CLUSTER INFO")
                                                      : port_cmd(port, "INFO %s", section);
    int yes = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, line) != NULL;
    if (rep)
        freeReplyObject(rep);
    return yes;
}

/* The number of elements of an array reply to a command, -1 for anything else. */
static long array_len(int port, const char *fmt, const char *arg)
{
    redisReply *rep = port_cmd(port, fmt, arg);
    long n = rep && rep->type == REDIS_REPLY_ARRAY ? (long)rep->elements : -1;
    if (rep)
        freeReplyObject(rep);
    return n;
}

int rt_run(const char *const *argv, const char *log, int timeout_s)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    for (int i = 0; i < timeout_s * 100; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 127,
                          "%s could not be run: install it with `make deps`", argv[0]);
            return WEXITSTATUS(st);
        }
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ck_abort_msg("%s did not finish within %d s (see %s)", argv[0], timeout_s, log);
    return -1;
}

typedef struct sentinel_conf {
    int primary, down_after_ms, failover_timeout_ms;
} sentinel_conf;

/* Writes r->dir/sentinel.conf (a sentinel rewrites its file, so it must be its own). */
static void write_sentinel_conf(rt_redis *r, void *arg)
{
    const sentinel_conf *sc = arg;
    char path[96];
    snprintf(path, sizeof path, "%s/sentinel.conf", r->dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "sentinel monitor " RT_MASTER_NAME " 127.0.0.1 %d 2\n"
            "sentinel down-after-milliseconds " RT_MASTER_NAME " %d\n"
            "sentinel failover-timeout " RT_MASTER_NAME " %d\n"
            "sentinel parallel-syncs " RT_MASTER_NAME " 1\n",
            sc->primary, sc->down_after_ms, sc->failover_timeout_ms);
    fclose(f);
}

static void start_kind(rt_redis *r, rt_redis_kind kind, int replica_of,
                       void (*conf)(rt_redis *r, void *arg), void *arg)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->replica_of = replica_of;
    prepare(r);
    start_prepared(r, conf, arg);
}

/* Polls cond(arg) every 50 ms for up to timeout_s; fails the test with what when it never holds. */
static void wait_for(int (*cond)(void *arg), void *arg, int timeout_s, const char *what)
{
    for (int i = 0; i < timeout_s * 20; i++) {
        if (cond(arg))
            return;
        sleep_ms(50);
    }
    ck_abort_msg("%s: not within %d s", what, timeout_s);
}

static int replica_synced(void *arg)
{
    return info_has(((rt_redis *)arg)->port, "replication", "master_link_status:up");
}

/* Every sentinel knows the replica and the two other sentinels, and says the quorum can
 * authorise a failover. */
static int sentinels_ready(void *arg)
{
    rt_sentinel_group *g = arg;
    for (int i = 0; i < RT_SENTINELS; i++) {
        int port = g->sent[i].port;
        if (array_len(port, "SENTINEL replicas %s", RT_MASTER_NAME) != 1 ||
            array_len(port, "SENTINEL sentinels %s", RT_MASTER_NAME) != RT_SENTINELS - 1)
            return 0;
        redisReply *rep = port_cmd(port, "SENTINEL ckquorum %s", RT_MASTER_NAME);
        int ok = rep && rep->type == REDIS_REPLY_STATUS;
        if (rep)
            freeReplyObject(rep);
        if (!ok)
            return 0;
    }
    return 1;
}

void rt_sentinel_start(rt_sentinel_group *g, int down_after_ms, int failover_timeout_ms)
{
    memset(g, 0, sizeof *g);
    start_kind(&g->data[0], RT_REDIS_PLAIN, 0, NULL, NULL);
    start_kind(&g->data[1], RT_REDIS_REPLICA, g->data[0].port, NULL, NULL);
    wait_for(replica_synced, &g->data[1], 10, "the replica in sync");
    sentinel_conf sc = {g->data[0].port, down_after_ms, failover_timeout_ms};
    for (int i = 0; i < RT_SENTINELS; i++) {
        start_kind(&g->sent[i], RT_REDIS_SENTINEL, 0, write_sentinel_conf, &sc);
        snprintf(g->nodes[i], sizeof g->nodes[i], "127.0.0.1:%d", g->sent[i].port);
    }
    wait_for(sentinels_ready, g, 30, "the sentinels aware of the replica and of each other");
}

int rt_sentinel_primary(const rt_sentinel_group *g)
{
    for (int i = 0; i < RT_SENTINELS; i++) {
        if (g->sent[i].pid <= 0)
            continue;
        redisReply *rep = port_cmd(g->sent[i].port, "SENTINEL get-master-addr-by-name %s",
                                   RT_MASTER_NAME);
        int port = 0;
        if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
            rep->element[1]->type == REDIS_REPLY_STRING)
            port = atoi(rep->element[1]->str);
        if (rep)
            freeReplyObject(rep);
        if (port)
            return port;
    }
    return 0;
}

void rt_sentinel_stop(rt_sentinel_group *g)
{
    for (int i = 0; i < RT_SENTINELS; i++)
        rt_redis_stop(&g->sent[i]);
    for (int i = 0; i < 2; i++)
        rt_redis_stop(&g->data[i]);
}

/* Every node says the cluster is ok, knows all six nodes, and its replicas are in sync. */
static int cluster_ready(void *arg)
{
    rt_cluster *c = arg;
    for (int i = 0; i < RT_CLUSTER_NODES; i++) {
        int port = c->node[i].port;
        if (!info_has(port, "cluster", "cluster_state:ok") ||
            !info_has(port, "cluster", "cluster_known_nodes:6") ||
            !info_has(port, "cluster", "cluster_size:3"))
            return 0;
        if (info_has(port, "replication", "role:slave") &&
            !info_has(port, "replication", "master_link_status:up"))
            return 0;
    }
    return 1;
}

void rt_cluster_start(rt_cluster *c, int node_timeout_ms)
{
    memset(c, 0, sizeof *c);
    const char *argv[RT_CLUSTER_NODES + 8] = {"redis-cli", "--cluster", "create"};
    int n = 3;
    for (int i = 0; i < RT_CLUSTER_NODES; i++) {
        rt_redis *r = &c->node[i];
        memset(r, 0, sizeof *r);
        r->kind = RT_REDIS_CLUSTER;
        r->node_timeout_ms = node_timeout_ms;
        prepare(r);
        start_prepared(r, NULL, NULL);
        snprintf(c->seeds[i], sizeof c->seeds[i], "127.0.0.1:%d", r->port);
        argv[n++] = c->seeds[i];
    }
    argv[n++] = "--cluster-replicas";
    argv[n++] = "1";
    argv[n++] = "--cluster-yes";
    argv[n] = NULL;
    char log[96];
    snprintf(log, sizeof log, "%s/create.log", c->node[0].dir);
    int rc = rt_run(argv, log, 60);
    ck_assert_msg(rc == 0, "redis-cli --cluster create failed (%d, see %s)", rc, log);
    wait_for(cluster_ready, c, 30, "the cluster ok on every node");
    /* the primaries first: redis-cli chose them */
    for (int i = 0, j = 0; i < RT_CLUSTER_NODES; i++)
        if (info_has(c->node[i].port, "replication", "role:master")) {
            if (i != j) {
                rt_redis t = c->node[i];
                c->node[i] = c->node[j];
                c->node[j] = t;
                char s[32];
                memcpy(s, c->seeds[i], sizeof s);
                memcpy(c->seeds[i], c->seeds[j], sizeof s);
                memcpy(c->seeds[j], s, sizeof s);
            }
            j++;
        }
}

int rt_cluster_owner(const rt_cluster *c, int slot)
{
    for (int i = 0; i < RT_CLUSTER_NODES; i++) {
        if (c->node[i].pid <= 0)
            continue;
        redisReply *rep = port_cmd(c->node[i].port, "CLUSTER SLOTS");
        int port = 0;
        for (size_t k = 0; rep && rep->type == REDIS_REPLY_ARRAY && k < rep->elements; k++) {
            redisReply *e = rep->element[k];
            if (e->type == REDIS_REPLY_ARRAY && e->elements >= 3 &&
                e->element[0]->integer <= slot && slot <= e->element[1]->integer)
                port = (int)e->element[2]->element[1]->integer;
        }
        if (rep)
            freeReplyObject(rep);
        for (int k = 0; port && k < RT_CLUSTER_NODES; k++)
            if (c->node[k].port == port)
                return k;
    }
    return -1;
}

void rt_cluster_stop(rt_cluster *c)
{
    for (int i = 0; i < RT_CLUSTER_NODES; i++)
        rt_redis_stop(&c->node[i]);
}
