/*
 * srvutil.h - helpers for integration tests: start the real build/ratelimitd (from $RL_BUILD)
 * on a free port in a temporary directory, talk to it with libcurl, stop it with SIGTERM.
 */
#ifndef RL_SRVUTIL_H
#define RL_SRVUTIL_H

#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <sys/types.h>

typedef struct su_server {
    pid_t pid;
    int port;
    int grpc_port;    /* with --grpc-port in extra: from the second line of stdout */
    char dir[256];    /* working directory of the server: config.json, stderr.log, var/ */
    char log[300];    /* its stderr */
} su_server;

/* Makes the run's temporary directory (call once in main, before the tests fork) and removes
 * it with everything in it (at the end of main). */
void su_init(void);
void su_cleanup(void);
/* main of a suite of server tests: libcurl and the run's temporary directory set up around
 * it. Returns the process exit status (1 when a test failed). */
int su_main(Suite *s);
/* Makes a new temporary directory for a server (in s->dir), inside the run's. */
void su_tmpdir(su_server *s);
/* Writes text to dir/name. Returns the path in a static buffer. */
const char *su_write(const char *dir, const char *name, const char *text);
/* Reads a whole file (malloc'd, NUL-terminated), or NULL when it cannot be read. */
char *su_read(const char *path);

/* Starts the server in s->dir (su_tmpdir first, or reuse a stopped server's dir) with
 * config (NULL: no --config, the built-in default) and extra flags (NULL-terminated, may be
 * NULL), on --port 0, and reads the port from its first line of stdout (whatever address it
 * listens on; requests go to 127.0.0.1). Fails the test when it does not come up. */
void su_start(su_server *s, const char *config, const char *const *extra);
/* With "--grpc-port" among the extra flags the second line of stdout ("grpc listening on
 * 127.0.0.1:PORT") is read too, into s->grpc_port. */
/* Sends SIGTERM and waits. Returns the exit status, or 128 + the signal that killed it. */
int su_stop(su_server *s);
/* A loopback TCP port nobody listens on now (bound and closed at once): for a server a test
 * starts that cannot be told to bind port 0 (nginx, Caddy, Prometheus). */
int su_free_port(void);
/* 1 when a TCP connection to the loopback port is accepted now (and closed again), else 0. */
int su_port_accepts(int port);
/* text (malloc'd, freed here) with its one occurrence of from replaced by to, malloc'd; fails
 * the test, naming what (the file the text came from), when from is not in it exactly once. */
char *su_replace_once(char *text, const char *from, const char *to, const char *what);

typedef struct su_resp {
    long status;
    char *body;    /* NUL-terminated */
    char *headers; /* raw header lines */
    json_t *json;  /* body parsed, when it is JSON */
} su_resp;

/* One request on a fresh handle. headers: NULL-terminated "Name: value" lines, may be NULL. */
su_resp su_req(const su_server *s, const char *method, const char *path, const char *body,
               const char *const *headers);
/* The same on a given easy handle (kept alive between calls). */
su_resp su_req_on(CURL *h, const su_server *s, const char *method, const char *path,
                  const char *body, const char *const *headers);
void su_resp_free(su_resp *r);
/* The value of a response header (case-insensitive name), in a static buffer; NULL if absent. */
const char *su_header(const su_resp *r, const char *name);
/* A member of the JSON body: integer, real, string; fails the test when absent. */
double su_num(const su_resp *r, const char *key);
const char *su_str(const su_resp *r, const char *key);
/* The error message of an error body. */
const char *su_error(const su_resp *r);

/* Runs argv, captures stdout (and stderr, appended), returns the exit status. */
int su_run(const char *const *argv, char **output);
/* The path of the ratelimitd binary. */
const char *su_binary(void);

#endif
