/*
 * test_notify.c - the daemon under systemd: the notify protocol (app/notify.c) and the journal's
 * priority prefixes (app/log.c), against the real daemon started the way systemd starts it.
 * The test opens the notify socket itself (a path, or an abstract name) and reads the
 * datagrams with their sender's credentials, as systemd does:
 *
 *   READY=1 only once the port accepts (the test connects the moment it arrives, on a port it
 *   chose, without reading stdout first) and the state file is loaded; RELOADING=1 with
 *   MONOTONIC_USEC, then READY=1, around SIGHUP, POST /admin/reload and a refused reload;
 *   STOPPING=1 at SIGTERM; WATCHDOG=1 every WATCHDOG_USEC/2, and none for another
 *   WATCHDOG_PID; every datagram from the daemon's own pid. With JOURNAL_STREAM naming its
 *   stderr, every line starts with <3>, <4> or <6> and carries no time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "app/notify.h"
#include "srvutil.h"

/* One limit of 5 a year: what was taken stays taken for the length of the test. */
static const char config[] =
    "{\"state_file\": \"var/state.bin\", \"state_interval\": 0,"
    " \"log\": {\"access\": true},"
    " \"levels\": [{\"name\": \"user\", \"rules\": [{\"type\": \"fixed_window\","
    " \"name\": \"yearly\", \"limit\": 5, \"window\": 31622400}]}]}";

typedef struct listener {
    int fd;
    char name[108]; /* what NOTIFY_SOCKET says: a path, or "@" and the abstract name */
} listener;

/* A datagram socket as systemd's: bound to a path in dir, or to an abstract name; it receives
 * the sender's credentials with each datagram. */
static void listener_open(listener *l, const char *dir, int abstract)
{
    static int seq;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int one = 1;
    socklen_t len;
    if (abstract)
        snprintf(l->name, sizeof l->name, "@rld-test-notify-%ld-%d", (long)getpid(), seq++);
    else
        snprintf(l->name, sizeof l->name, "%s/notify.sock", dir);
    ck_assert_int_lt(strlen(l->name), sizeof sa.sun_path);
    memcpy(sa.sun_path, l->name, strlen(l->name));
    if (abstract)
        sa.sun_path[0] = '\0';
    len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(l->name));
    l->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(l->fd, 0);
    ck_assert_int_eq(setsockopt(l->fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one), 0);
    ck_assert_msg(bind(l->fd, (struct sockaddr *)&sa, len) == 0, "bind %s: %s", l->name,
                  strerror(errno));
}

/* The next datagram within ms milliseconds into buf (NUL-terminated), its sender's pid into
 * *pid. 1, or 0 when none came. */
static int listener_recv(const listener *l, int ms, char *buf, size_t len, pid_t *pid)
{
    struct pollfd p = {.fd = l->fd, .events = POLLIN};
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(struct ucred))];
    } control;
    struct iovec iov = {.iov_base = buf, .iov_len = len - 1};
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = &control,
                       .msg_controllen = sizeof control};
    if (poll(&p, 1, ms) != 1)
        return 0;
    ssize_t n = recvmsg(l->fd, &m, 0);
    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    *pid = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS)
            *pid = ((struct ucred *)(void *)CMSG_DATA(c))->pid;
    return 1;
}

/* A daemon started as systemd starts one: its environment, its stderr, no waiting for stdout. */
typedef struct daemon_run {
    su_server s;                              /* dir, port, pid; its stderr in s.log */
    const char *notify;                       /* NOTIFY_SOCKET, or NULL */
    const char *watchdog_usec, *watchdog_pid; /* NULL: unset; watchdog_pid "self": its own */
    int journal; /* 1: JOURNAL_STREAM names its stderr; -1: names another file */
} daemon_run;

/* Starts the daemon in d->s.dir on a free port, with config written there (NULL: the built-in
 * one), and returns at once. */
static void daemon_start(daemon_run *d, const char *cfg)
{
    char port[16], cfgpath[400];
    const char *bin = su_binary(); /* before chdir: it may be relative to here */
    d->s.port = su_free_port();
    snprintf(port, sizeof port, "%d", d->s.port);
    snprintf(cfgpath, sizeof cfgpath, "%s/config.json", d->s.dir);
    snprintf(d->s.log, sizeof d->s.log, "%s/stderr.log", d->s.dir);
    if (cfg)
        su_write(d->s.dir, "config.json", cfg);
    fflush(NULL);
    d->s.pid = fork();
    ck_assert_int_ge(d->s.pid, 0);
    if (d->s.pid > 0)
        return;
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    int out = open("/dev/null", O_WRONLY),
        err = open(d->s.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    struct stat st;
    char v[64];
    if (out < 0 || err < 0 || chdir(d->s.dir) != 0 || fstat(err, &st) != 0)
        _exit(127);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    unsetenv("JOURNAL_STREAM");
    if (d->notify)
        setenv("NOTIFY_SOCKET", d->notify, 1);
    if (d->watchdog_usec)
        setenv("WATCHDOG_USEC", d->watchdog_usec, 1);
    if (d->watchdog_pid && strcmp(d->watchdog_pid, "self") == 0) {
        snprintf(v, sizeof v, "%ld", (long)getpid()); /* exec keeps the pid */
        setenv("WATCHDOG_PID", v, 1);
    } else if (d->watchdog_pid) {
        setenv("WATCHDOG_PID", d->watchdog_pid, 1);
    }
    if (d->journal) {
        snprintf(v, sizeof v, "%llu:%llu", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino + (d->journal < 0 ? 1 : 0));
        setenv("JOURNAL_STREAM", v, 1);
    }
    dup2(out, 1);
    dup2(err, 2);
    if (cfg)
        execl(bin, bin, "--config", cfgpath, "--port", port, (char *)NULL);
    else
        execl(bin, bin, "--port", port, (char *)NULL);
    _exit(127);
}

/* Whether a TCP connection to 127.0.0.1:port is accepted now (one try, no waiting). */
static int port_accepts(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* The next datagram, which must come from the daemon within 10 s; returned in a static buffer. */
static const char *expect_msg(const listener *l, const daemon_run *d, const char *what)
{
    static char buf[2048];
    pid_t pid;
    if (!listener_recv(l, 10000, buf, sizeof buf, &pid)) {
        char *log = su_read(d->s.log);
        ck_abort_msg("no datagram (waiting for %s) in 10 s; stderr: %s", what, log ? log : "");
    }
    ck_assert_msg(pid == d->s.pid, "datagram \"%s\" sent by pid %ld, not the daemon's %ld", buf,
                  (long)pid, (long)d->s.pid);
    return buf;
}

/* Whether a datagram is exactly the given state lines (in this order). */
static void expect_state(const listener *l, const daemon_run *d, const char *want)
{
    const char *got = expect_msg(l, d, want);
    ck_assert_msg(strcmp(got, want) == 0, "datagram \"%s\", expected \"%s\"", got, want);
}

/* RELOADING=1 with MONOTONIC_USEC: the monotonic clock's microseconds, between before and now. */
static void expect_reloading(const listener *l, const daemon_run *d, long long before)
{
    const char *got = expect_msg(l, d, "RELOADING=1");
    long long usec = -1;
    char extra;
    ck_assert_msg(sscanf(got, "RELOADING=1\nMONOTONIC_USEC=%lld%c", &usec, &extra) == 1,
                  "datagram \"%s\", expected RELOADING=1 and MONOTONIC_USEC", got);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now = (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    ck_assert_msg(usec >= before && usec <= now, "MONOTONIC_USEC=%lld outside [%lld, %lld]", usec,
                  before, now);
}

static long long mono_usec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* SIGTERM, STOPPING=1, and exit status 0. */
static void stop_expecting_stopping(const listener *l, daemon_run *d)
{
    kill(d->s.pid, SIGTERM);
    expect_state(l, d, "STOPPING=1");
    ck_assert_int_eq(su_stop(&d->s), 0); /* a second SIGTERM changes nothing; it reaps it */
}

static double remaining_after_one(const daemon_run *d)
{
    su_resp r = su_req(&d->s, "POST", "/acquire", "{\"keys\": {\"user\": \"alice\"}}", NULL);
    ck_assert_int_eq(r.status, 200);
    json_t *limits = json_object_get(r.json, "limits");
    double rem = json_number_value(json_object_get(json_array_get(limits, 0), "remaining"));
    su_resp_free(&r);
    return rem;
}

/* ---- readiness ---------------------------------------------------------------------------- */

/* READY=1 is the first datagram, and the port accepts the moment it arrives; the second start
 * is READY=1 with the first one's state loaded: alice took 3 of 5 then, 1 more leaves 1. */
START_TEST(ready_once_listening_and_loaded)
{
    daemon_run d = {0};
    listener l;
    su_tmpdir(&d.s);
    listener_open(&l, d.s.dir, _i);
    d.notify = l.name;
    daemon_start(&d, config);
    expect_state(&l, &d, "READY=1");
    ck_assert_msg(port_accepts(d.s.port), "READY=1 came before port %d accepted", d.s.port);
    ck_assert_double_eq(remaining_after_one(&d), 4);
    ck_assert_double_eq(remaining_after_one(&d), 3);
    ck_assert_double_eq(remaining_after_one(&d), 2);
    stop_expecting_stopping(&l, &d);

    daemon_start(&d, config);
    expect_state(&l, &d, "READY=1");
    ck_assert_msg(port_accepts(d.s.port), "READY=1 came before port %d accepted", d.s.port);
    ck_assert_double_eq(remaining_after_one(&d), 1);
    stop_expecting_stopping(&l, &d);
    close(l.fd);
}
END_TEST

/* A NOTIFY_SOCKET nobody listens on, or that is no socket name at all, changes nothing. */
START_TEST(no_listener_no_harm)
{
    static const char *const sockets[] = {"/nonexistent/notify.sock", "@rld-test-nobody-here",
                                          "relative/notify.sock"};
    daemon_run d = {0};
    su_tmpdir(&d.s);
    d.notify = sockets[_i];
    daemon_start(&d, config);
    for (int i = 0; i < 100 && !port_accepts(d.s.port); i++)
        usleep(50 * 1000);
    ck_assert_double_eq(remaining_after_one(&d), 4);
    ck_assert_int_eq(su_stop(&d.s), 0);
}
END_TEST

/* ---- reload and stop ---------------------------------------------------------------------- */

START_TEST(reloading_then_ready)
{
    daemon_run d = {0};
    listener l;
    su_tmpdir(&d.s);
    listener_open(&l, d.s.dir, 1);
    d.notify = l.name;
    daemon_start(&d, config);
    expect_state(&l, &d, "READY=1");
    char reloaded[512];
    snprintf(reloaded, sizeof reloaded,
             "READY=1\nSTATUS=configuration reloaded from %s/config.json", d.s.dir);

    long long before = mono_usec();
    kill(d.s.pid, SIGHUP);
    expect_reloading(&l, &d, before);
    expect_state(&l, &d, reloaded);

    before = mono_usec();
    su_resp r = su_req(&d.s, "POST", "/admin/reload", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    expect_reloading(&l, &d, before);
    expect_state(&l, &d, reloaded);

    /* refused: the configuration in force stays, and the daemon is ready again */
    su_write(d.s.dir, "config.json", "{\"levels\": 7}");
    before = mono_usec();
    kill(d.s.pid, SIGHUP);
    expect_reloading(&l, &d, before);
    const char *got = expect_msg(&l, &d, "READY=1 after a refused reload");
    const char *refused = "READY=1\nSTATUS=reload refused, the configuration in force stays: ";
    ck_assert_msg(strncmp(got, refused, strlen(refused)) == 0 && strstr(got, "levels"),
                  "datagram \"%s\"", got);
    ck_assert_double_eq(remaining_after_one(&d), 4);

    stop_expecting_stopping(&l, &d);
    pid_t pid;
    char buf[256];
    ck_assert_msg(!listener_recv(&l, 200, buf, sizeof buf, &pid), "after STOPPING=1: \"%s\"", buf);
    close(l.fd);
}
END_TEST

/* SIGINT stops as SIGTERM does. */
START_TEST(stopping_on_sigint)
{
    daemon_run d = {0};
    listener l;
    su_tmpdir(&d.s);
    listener_open(&l, d.s.dir, 0);
    d.notify = l.name;
    daemon_start(&d, NULL);
    expect_state(&l, &d, "READY=1");
    kill(d.s.pid, SIGINT);
    expect_state(&l, &d, "STOPPING=1");
    ck_assert_int_eq(su_stop(&d.s), 0);
    close(l.fd);
}
END_TEST

/* ---- the watchdog ------------------------------------------------------------------------- */

/* WATCHDOG_USEC=400000: every 200 ms (on the housekeeping thread's tenths of a second), from
 * its start just before READY=1; in the 1.5 s after READY=1 that is 7, 5 to 8 allowing for a
 * late tick. Every 400 ms (the whole interval) would be 3. */
static int count_watchdog(const listener *l, const daemon_run *d, int ms)
{
    long long end = mono_usec() + ms * 1000LL;
    int n = 0;
    char buf[256];
    pid_t pid;
    for (long long now; (now = mono_usec()) < end;) {
        if (!listener_recv(l, (int)((end - now) / 1000) + 1, buf, sizeof buf, &pid))
            break;
        ck_assert_msg(strcmp(buf, "WATCHDOG=1") == 0, "datagram \"%s\"", buf);
        ck_assert_int_eq(pid, d->s.pid);
        n++;
    }
    return n;
}

START_TEST(watchdog_every_half_interval)
{
    static const struct {
        const char *usec, *pid;
        int min, max;
    } cases[] = {{"400000", NULL, 5, 8}, {"400000", "self", 5, 8}, {"400000", "1", 0, 0},
                 {NULL, NULL, 0, 0},     {"0", NULL, 0, 0},        {"x400000", NULL, 0, 0}};
    daemon_run d = {0};
    listener l;
    su_tmpdir(&d.s);
    listener_open(&l, d.s.dir, 1);
    d.notify = l.name;
    d.watchdog_usec = cases[_i].usec;
    d.watchdog_pid = cases[_i].pid;
    daemon_start(&d, NULL);
    expect_state(&l, &d, "READY=1");
    int n = count_watchdog(&l, &d, 1500);
    ck_assert_msg(n >= cases[_i].min && n <= cases[_i].max,
                  "WATCHDOG_USEC=%s WATCHDOG_PID=%s: %d WATCHDOG=1 in 1.5 s, expected %d to %d",
                  cases[_i].usec ? cases[_i].usec : "(unset)",
                  cases[_i].pid ? cases[_i].pid : "(unset)", n, cases[_i].min, cases[_i].max);
    stop_expecting_stopping(&l, &d);
    close(l.fd);
}
END_TEST

/* ---- rld_notify itself -------------------------------------------------------------------- */

START_TEST(notify_in_process)
{
    listener l;
    char buf[256], dir[] = "/tmp/rl-notify-XXXXXX";
    pid_t pid;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    unsetenv("NOTIFY_SOCKET");
    ck_assert_int_eq(rld_notify("READY=1"), 0);
    setenv("NOTIFY_SOCKET", "", 1);
    ck_assert_int_eq(rld_notify("READY=1"), 0);
    setenv("NOTIFY_SOCKET", "notify.sock", 1); /* neither a path from / nor an abstract name */
    errno = 0;
    ck_assert_int_eq(rld_notify("READY=1"), -1);
    ck_assert_int_eq(errno, EINVAL);
    for (int abstract = 0; abstract < 2; abstract++) {
        listener_open(&l, dir, abstract);
        setenv("NOTIFY_SOCKET", l.name, 1);
        ck_assert_int_eq(rld_notify("READY=1\nSTATUS=up"), 1);
        ck_assert_int_eq(listener_recv(&l, 1000, buf, sizeof buf, &pid), 1);
        ck_assert_str_eq(buf, "READY=1\nSTATUS=up");
        ck_assert_int_eq(pid, getpid());
        ck_assert_int_eq(rld_notifyf("STATUS=%d keys", 42), 1);
        ck_assert_int_eq(listener_recv(&l, 1000, buf, sizeof buf, &pid), 1);
        ck_assert_str_eq(buf, "STATUS=42 keys");
        close(l.fd);
    }
    snprintf(buf, sizeof buf, "%s/notify.sock", dir);
    unlink(buf);
    rmdir(dir);
    setenv("NOTIFY_SOCKET", "/nonexistent/notify.sock", 1);
    ck_assert_int_eq(rld_notify("READY=1"), -1);
    unsetenv("NOTIFY_SOCKET");

    /* half of WATCHDOG_USEC, in nanoseconds; only for this pid when WATCHDOG_PID is set */
    unsetenv("WATCHDOG_PID");
    unsetenv("WATCHDOG_USEC");
    ck_assert_int_eq(rld_notify_watchdog_ns(), 0);
    setenv("WATCHDOG_USEC", "30000000", 1);
    ck_assert_int_eq(rld_notify_watchdog_ns(), 15000000000LL);
    setenv("WATCHDOG_USEC", "1", 1);
    ck_assert_int_eq(rld_notify_watchdog_ns(), 500);
    snprintf(buf, sizeof buf, "%ld", (long)getpid());
    setenv("WATCHDOG_PID", buf, 1);
    ck_assert_int_eq(rld_notify_watchdog_ns(), 500);
    snprintf(buf, sizeof buf, "%ld", (long)getpid() + 1);
    setenv("WATCHDOG_PID", buf, 1);
    ck_assert_int_eq(rld_notify_watchdog_ns(), 0);
    unsetenv("WATCHDOG_PID");
    static const char *const bad[] = {"", "0", "-5", "12s", " 12", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("WATCHDOG_USEC", bad[i], 1);
        ck_assert_msg(rld_notify_watchdog_ns() == 0, "WATCHDOG_USEC=\"%s\"", bad[i]);
    }
    unsetenv("WATCHDOG_USEC");
}
END_TEST

/* ---- the journal -------------------------------------------------------------------------- */

/* Every line of the log: "<P>" and the message alone when JOURNAL_STREAM names stderr (a
 * started line <6>, an allowed request's access line <6>, a denied one's <4>, a refused
 * reload <3>); the time and "ratelimitd[pid]: " when it names another file. */
START_TEST(journal_priorities)
{
    int to_journal = _i == 0;
    daemon_run d = {0};
    listener l;
    su_tmpdir(&d.s);
    listener_open(&l, d.s.dir, 1);
    d.notify = l.name;
    d.journal = to_journal ? 1 : -1;
    daemon_start(&d, "{\"log\": {\"access\": true}, \"levels\": [{\"name\": \"user\","
                     " \"rules\": [{\"type\": \"fixed_window\", \"name\": \"once\", \"limit\": 1,"
                     " \"window\": 31622400}]}]}");
    expect_state(&l, &d, "READY=1");
    const char *body = "{\"keys\": {\"user\": \"alice\"}}";
    su_resp r = su_req(&d.s, "POST", "/acquire", body, NULL);
    ck_assert_int_eq(r.status, 200);
    su_resp_free(&r);
    r = su_req(&d.s, "POST", "/acquire", body, NULL);
    ck_assert_int_eq(r.status, 429);
    su_resp_free(&r);
    su_write(d.s.dir, "config.json", "{\"levels\": 7}");
    kill(d.s.pid, SIGHUP);
    expect_msg(&l, &d, "RELOADING=1");
    expect_msg(&l, &d, "READY=1");
    stop_expecting_stopping(&l, &d);
    close(l.fd);

    char *log = su_read(d.s.log);
    ck_assert_ptr_nonnull(log);
    static const char *const want_journal[] = {
        "\n<6>started: listening on 127.0.0.1:",
        "\n<6>access: POST /acquire 200 ",
        "\n<4>access: POST /acquire 429 ",
        "\n<3>error: reload refused, the configuration in force stays: ",
        "\n<6>stopping on SIGTERM",
        "\n<6>stopped\n"};
    static const char *const want_text[] = {
        " ratelimitd[", "]: started: listening on 127.0.0.1:", "]: access: POST /acquire 429 ",
        "]: error: reload refused"};
    char *text = malloc(strlen(log) + 2);
    ck_assert_ptr_nonnull(text);
    text[0] = '\n'; /* so that every line, the first too, follows a newline */
    strcpy(text + 1, log);
    if (to_journal) {
        for (size_t i = 0; i < sizeof want_journal / sizeof want_journal[0]; i++)
            ck_assert_msg(strstr(text, want_journal[i]), "no \"%s\" in the log:\n%s",
                          want_journal[i] + 1, log);
        for (const char *p = text + 1; *p; p = strchr(p, '\n') + 1) {
            ck_assert_msg((p[0] == '<' && strchr("346", p[1]) && p[2] == '>' &&
                           !(p[3] >= '0' && p[3] <= '9')),
                          "a line without its priority, or with a time: %.80s", p);
            if (!strchr(p, '\n'))
                break;
        }
        ck_assert_ptr_null(strstr(log, "ratelimitd["));
    } else {
        for (size_t i = 0; i < sizeof want_text / sizeof want_text[0]; i++)
            ck_assert_msg(strstr(text, want_text[i]), "no \"%s\" in the log:\n%s", want_text[i],
                          log);
        ck_assert_msg(log[0] == '2' && log[4] == '-' && log[10] == 'T',
                      "the first line has no time: %.80s", log);
        ck_assert_ptr_null(strstr(text, "\n<"));
    }
    free(text);
    free(log);
}
END_TEST

/* JSON lines to the journal keep their fields, after the priority. */
START_TEST(journal_json)
{
    daemon_run d = {0};
    listener l;
    su_tmpdir(&d.s);
    listener_open(&l, d.s.dir, 1);
    d.notify = l.name;
    d.journal = 1;
    daemon_start(&d, "{\"log\": {\"format\": \"json\"}, \"levels\": [{\"name\": \"user\","
                     " \"rules\": [{\"type\": \"fixed_window\", \"limit\": 1, \"window\": 60}]}]}");
    expect_state(&l, &d, "READY=1");
    stop_expecting_stopping(&l, &d);
    close(l.fd);
    char *log = su_read(d.s.log);
    ck_assert_ptr_nonnull(log);
    ck_assert_msg(strncmp(log, "<6>{\"time\":\"", 12) == 0, "first line: %.80s", log);
    ck_assert_msg(strstr(log, "\"level\":\"info\",\"pid\":") &&
                      strstr(log, "\"msg\":\"stopped\"}\n"),
                  "log: %s", log);
    free(log);
}
END_TEST

static Suite *notify_suite(void)
{
    Suite *s = suite_create("notify");
    TCase *tc = tcase_create("readiness");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, ready_once_listening_and_loaded, 0, 2); /* path, abstract */
    tcase_add_loop_test(tc, no_listener_no_harm, 0, 3);
    suite_add_tcase(s, tc);
    tc = tcase_create("reload and stop");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, reloading_then_ready);
    tcase_add_test(tc, stopping_on_sigint);
    suite_add_tcase(s, tc);
    tc = tcase_create("watchdog");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, watchdog_every_half_interval, 0, 6);
    tcase_add_test(tc, notify_in_process);
    suite_add_tcase(s, tc);
    tc = tcase_create("journal");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, journal_priorities, 0, 2); /* stderr is the journal, or is not */
    tcase_add_test(tc, journal_json);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(notify_suite());
}
