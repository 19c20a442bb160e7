/*
 * srvutil.c - see srvutil.h.
 */
#define _XOPEN_SOURCE 700
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/file.h"
#include "config/config.h"
#include "srvutil.h"

const char *su_binary(void)
{
    static char path[PATH_MAX];
    char rel[512];
    const char *b = getenv("RL_BUILD");
    snprintf(rel, sizeof rel, "%s/ratelimitd", b && *b ? b : "build");
    /* absolute, since servers run in their own directory */
    if (!realpath(rel, path))
        snprintf(path, sizeof path, "%s", rel);
    return path;
}

static char root[200];

void su_init(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/rl-test-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        exit(1);
    }
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void su_cleanup(void)
{
    if (root[0])
        nftw(root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

int su_main(Suite *s)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    su_init();
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    su_cleanup();
    curl_global_cleanup();
    return failed ? 1 : 0;
}

void su_tmpdir(su_server *s)
{
    if (!root[0])
        su_init();
    snprintf(s->dir, sizeof s->dir, "%s/s-XXXXXX", root);
    ck_assert_ptr_nonnull(mkdtemp(s->dir));
}

const char *su_write(const char *dir, const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    return path;
}

char *su_read(const char *path)
{
    return rld_read_file(path, NULL);
}

/* One line of fd (without its newline); "" at EOF. Fails the test after 60 s of silence. */
static void read_line(int fd, char *line, size_t cap)
{
    size_t len = 0;
    while (len < cap - 1) {
        struct pollfd p = {fd, POLLIN, 0};
        int pr = poll(&p, 1, 60000);
        ck_assert_msg(pr > 0, "ratelimitd printed nothing within 60 s");
        ssize_t r = read(fd, line + len, 1);
        if (r <= 0 || line[len] == '\n')
            break;
        len++;
    }
    line[len] = '\0';
}

void su_start(su_server *s, const char *config, const char *const *extra)
{
    char cfgpath[400];
    const char *argv[32];
    int n = 0, out[2];
    argv[n++] = su_binary();
    if (config) {
        snprintf(cfgpath, sizeof cfgpath, "%s/config.json", s->dir);
        su_write(s->dir, "config.json", config);
        argv[n++] = "--config";
        argv[n++] = cfgpath;
    }
    argv[n++] = "--port";
    argv[n++] = "0";
    for (int i = 0; extra && extra[i] && n < 30; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    snprintf(s->log, sizeof s->log, "%s/stderr.log", s->dir);

    ck_assert_int_eq(pipe(out), 0);
    fflush(NULL);
    s->pid = fork();
    ck_assert_int_ge(s->pid, 0);
    if (s->pid == 0) {
        /* a test that fails leaves through _exit: its servers stop with it */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        int err = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (chdir(s->dir) != 0 || err < 0)
            _exit(127);
        dup2(out[1], 1);
        dup2(err, 2);
        close(out[0]);
        close(out[1]);
        close(err);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    /* the first line of stdout names the port; EOF means it did not start */
    int grpc = 0;
    for (int i = 0; extra && extra[i]; i++)
        grpc |= strcmp(extra[i], "--grpc-port") == 0;
    char line[256];
    read_line(out[0], line, sizeof line);
    /* "listening on 127.0.0.1:PORT", or another address a configuration names */
    const char *colon = strrchr(line, ':');
    if (strncmp(line, "listening on ", 13) != 0 || !colon) {
        char *log = su_read(s->log);
        ck_abort_msg("ratelimitd did not start: stdout \"%s\", stderr: %s", line,
                     log ? log : "(none)");
    }
    s->port = atoi(colon + 1);
    s->grpc_port = 0;
    if (grpc) {
        char second[256];
        read_line(out[0], second, sizeof second);
        ck_assert_msg(strncmp(second, "grpc listening on 127.0.0.1:", 28) == 0,
                      "no gRPC line: stdout \"%s\"", second);
        s->grpc_port = atoi(second + 28);
    }
    close(out[0]);
    ck_assert_int_gt(s->port, 0);
}

int su_stop(su_server *s)
{
    int st = 0;
    if (s->pid <= 0)
        return -1;
    kill(s->pid, SIGTERM);
    while (waitpid(s->pid, &st, 0) < 0 && errno == EINTR)
        ;
    s->pid = 0;
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (rc != 0) {
        /* show why: a sanitizer's report, an error line */
        char *log = su_read(s->log);
        fprintf(stderr, "ratelimitd exited with %d; its stderr:\n%s\n", rc, log ? log : "(none)");
        free(log);
    }
    return rc;
}

/* ---- requests ----------------------------------------------------------------------------- */

typedef struct grow {
    char *p;
    size_t len;
} grow;

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
    grow *g = arg;
    size_t add = size * n;
    char *p = realloc(g->p, g->len + add + 1);
    if (!p)
        return 0;
    memcpy(p + g->len, data, add);
    g->p = p;
    g->len += add;
    g->p[g->len] = '\0';
    return add;
}

su_resp su_req_on(CURL *h, const su_server *s, const char *method, const char *path,
                  const char *body, const char *const *headers)
{
    char url[1024];
    grow b = {calloc(1, 1), 0}, hd = {calloc(1, 1), 0};
    struct curl_slist *hl = NULL;
    su_resp r = {0, NULL, NULL, NULL};
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_NOBODY, 0L);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    } else {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    }
    hl = curl_slist_append(hl, "Content-Type: application/json");
    hl = curl_slist_append(hl, "Expect:");
    for (int i = 0; headers && headers[i]; i++)
        hl = curl_slist_append(hl, headers[i]);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &hd);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    CURLcode rc = curl_easy_perform(h);
    curl_slist_free_all(hl);
    ck_assert_msg(rc == CURLE_OK, "%s %s: %s", method, path, curl_easy_strerror(rc));
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    r.body = b.p;
    r.headers = hd.p;
    r.json = json_loads(r.body, 0, NULL);
    return r;
}

su_resp su_req(const su_server *s, const char *method, const char *path, const char *body,
               const char *const *headers)
{
    CURL *h = curl_easy_init();
    ck_assert_ptr_nonnull(h);
    su_resp r = su_req_on(h, s, method, path, body, headers);
    curl_easy_cleanup(h);
    return r;
}

void su_resp_free(su_resp *r)
{
    free(r->body);
    free(r->headers);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

const char *su_header(const su_resp *r, const char *name)
{
    static char value[4096];
    size_t n = strlen(name);
    for (const char *line = r->headers; line && *line;) {
        const char *end = strstr(line, "\r\n");
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > n && strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1;
            while (*v == ' ')
                v++;
            size_t vl = len - (size_t)(v - line);
            if (vl >= sizeof value)
                vl = sizeof value - 1;
            memcpy(value, v, vl);
            value[vl] = '\0';
            return value;
        }
        line = end ? end + 2 : line + len;
    }
    return NULL;
}

double su_num(const su_resp *r, const char *key)
{
    json_t *v = json_object_get(r->json, key);
    ck_assert_msg(json_is_number(v), "no number \"%s\" in %.2000s", key, r->body);
    return json_number_value(v);
}

const char *su_str(const su_resp *r, const char *key)
{
    json_t *v = json_object_get(r->json, key);
    ck_assert_msg(json_is_string(v), "no string \"%s\" in %.2000s", key, r->body);
    return json_string_value(v);
}

const char *su_error(const su_resp *r)
{
    return su_str(r, "error");
}

int su_run(const char *const *argv, char **output)
{
    int p[2], st = 0;
    ck_assert_int_eq(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    grow g = {calloc(1, 1), 0};
    char buf[4096];
    ssize_t r;
    while ((r = read(p[0], buf, sizeof buf)) > 0)
        collect(buf, 1, (size_t)r, &g);
    close(p[0]);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    *output = g.p;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int su_free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

char *su_replace_once(char *text, const char *from, const char *to, const char *what)
{
    char *at = strstr(text, from);
    ck_assert_msg(at != NULL, "%s lacks \"%s\"", what, from);
    ck_assert_msg(strstr(at + 1, from) == NULL, "%s has \"%s\" twice", what, from);
    size_t n = strlen(text) - strlen(from) + strlen(to) + 1, head = (size_t)(at - text);
    char *out = malloc(n);
    ck_assert_ptr_nonnull(out);
    memcpy(out, text, head);
    snprintf(out + head, n - head, "%s%s", to, at + strlen(from));
    free(text);
    return out;
}

int su_port_accepts(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}
