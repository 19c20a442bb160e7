/*
 * test_dashboard.c - the Grafana dashboard config/grafana/ratelimitd.json against a real
 * Prometheus (Debian's prometheus) that scrapes two real daemons under a short load, as a
 * fleet of one job: one on the memory store (max_keys, reservations that expire, gRPC calls)
 * and one on the Redis store, whose Redis is killed halfway so that it counts store errors and
 * fallback decisions. Every panel's query, with the dashboard's variables resolved the way
 * Grafana resolves them (the variables' own label_values queries asked of Prometheus), is run
 * through Prometheus's HTTP API and must return data: a non-empty result of numbers, no NaN.
 * The JSON's shape is checked too: a data source variable that every panel and target uses,
 * no hard-coded instance, a title and targets on every panel.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "redis_server.h"
#include "srvutil.h"

#define DASHBOARD "config/grafana/ratelimitd.json"
#define PROMETHEUS "/usr/bin/prometheus"
#define JOB "ratelimitd" /* the job of config/prometheus/prometheus.yml */
#define DS "${datasource}"

static void pause_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

static json_t *load_dashboard(void)
{
    json_error_t e;
    json_t *d = json_load_file(DASHBOARD, 0, &e);
    ck_assert_msg(d != NULL, "%s: line %d: %s (tests run from the repository)", DASHBOARD, e.line,
                  e.text);
    return d;
}

/* "${datasource}" as a panel's or target's data source: {"type": "prometheus", "uid": ...}. */
static void assert_datasource(json_t *ds, const char *what)
{
    ck_assert_msg(json_is_object(ds), "%s: no datasource", what);
    const char *type = json_string_value(json_object_get(ds, "type"));
    const char *uid = json_string_value(json_object_get(ds, "uid"));
    ck_assert_msg(type && strcmp(type, "prometheus") == 0, "%s: datasource type %s", what,
                  type ? type : "(none)");
    ck_assert_msg(uid && strcmp(uid, DS) == 0, "%s: datasource uid %s, not " DS, what,
                  uid ? uid : "(none)");
}

/* The variable of templating.list named name (borrowed), failing the test when absent. */
static json_t *variable(json_t *d, const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(json_object_get(d, "templating"), "list"), i, v)
    {
        const char *n = json_string_value(json_object_get(v, "name"));
        if (n && strcmp(n, name) == 0)
            return v;
    }
    ck_abort_msg("the dashboard has no variable \"%s\"", name);
    return NULL;
}

/* The text of a query variable's query: {"query": "..."} or a plain string. */
static const char *variable_query(json_t *v)
{
    json_t *q = json_object_get(v, "query");
    const char *s =
        json_is_object(q) ? json_string_value(json_object_get(q, "query")) : json_string_value(q);
    ck_assert_msg(s != NULL, "variable %s: no query",
                  json_string_value(json_object_get(v, "name")));
    return s;
}

/* The metric families a dashboard about ratelimitd must show (issue's list of panels). */
static const char *const required[] = {
    "ratelimit_acquire_total", /* decisions a second by outcome */
    "ratelimit_denied_total",  /* denials by level and rule */
    "histogram_quantile(0.5, sum by (le) (rate(ratelimit_http_request_duration_seconds_bucket",
    "histogram_quantile(0.99, sum by (le) (rate(ratelimit_http_request_duration_seconds_bucket",
    "ratelimit_reservations_active", /* reservations open */
    "ratelimit_reservations_expired_total",
    "ratelimit_store_errors_total",   /* store errors */
    "ratelimit_store_fallback_total", /* fallback decisions */
    "ratelimit_key_states{",          /* the key table's fill */
    "ratelimit_key_states_max",       /* against max_keys */
    "ratelimit_grpc_requests_total",  /* gRPC calls by code */
};

START_TEST(dashboard_has_grafanas_shape)
{
    json_t *d = load_dashboard();
    json_int_t schema = json_integer_value(json_object_get(d, "schemaVersion"));
    ck_assert_msg(schema >= 39, "schemaVersion %lld: a current Grafana writes 39 and up",
                  (long long)schema);
    ck_assert_ptr_nonnull(json_string_value(json_object_get(d, "title")));
    ck_assert_ptr_nonnull(json_string_value(json_object_get(d, "uid")));

    /* the data source is a variable: type datasource, of Prometheus's kind */
    json_t *ds = variable(d, "datasource");
    ck_assert_str_eq(json_string_value(json_object_get(ds, "type")), "datasource");
    ck_assert_str_eq(json_string_value(json_object_get(ds, "query")), "prometheus");
    /* job and instance come from label_values over that data source; instance can be All */
    json_t *job = variable(d, "job"), *inst = variable(d, "instance");
    assert_datasource(json_object_get(job, "datasource"), "variable job");
    assert_datasource(json_object_get(inst, "datasource"), "variable instance");
    ck_assert_str_eq(json_string_value(json_object_get(job, "type")), "query");
    ck_assert_str_eq(json_string_value(json_object_get(inst, "type")), "query");
    ck_assert_str_eq(variable_query(job), "label_values(ratelimit_acquire_total, job)");
    ck_assert_str_eq(variable_query(inst),
                     "label_values(ratelimit_acquire_total{job=~\"$job\"}, instance)");
    ck_assert(json_is_true(json_object_get(inst, "multi")));
    ck_assert(json_is_true(json_object_get(inst, "includeAll")));

    /* every panel: an id of its own, a title, the data source variable, targets that use it,
     * each filtered by $job and $instance and naming no instance of its own */
    json_t *panels = json_object_get(d, "panels"), *p;
    size_t i, ntargets = 0;
    ck_assert_uint_ge(json_array_size(panels), 8);
    char found[sizeof required / sizeof required[0]] = {0};
    json_array_foreach(panels, i, p)
    {
        char what[160];
        const char *title = json_string_value(json_object_get(p, "title"));
        ck_assert_msg(title && *title, "panel %zu has no title", i);
        snprintf(what, sizeof what, "panel \"%s\"", title);
        ck_assert_msg(json_is_integer(json_object_get(p, "id")), "%s: no id", what);
        for (size_t k = 0; k < i; k++)
            ck_assert_msg(json_integer_value(json_object_get(json_array_get(panels, k), "id")) !=
                              json_integer_value(json_object_get(p, "id")),
                          "%s: its id is another panel's", what);
        ck_assert_msg(json_is_object(json_object_get(p, "gridPos")), "%s: no gridPos", what);
        assert_datasource(json_object_get(p, "datasource"), what);
        json_t *targets = json_object_get(p, "targets"), *t;
        size_t k;
        ck_assert_msg(json_array_size(targets) > 0, "%s: no targets", what);
        json_array_foreach(targets, k, t)
        {
            const char *expr = json_string_value(json_object_get(t, "expr"));
            ck_assert_msg(expr && *expr, "%s: target %zu has no expr", what, k);
            ck_assert_msg(json_string_value(json_object_get(t, "refId")), "%s: no refId", what);
            assert_datasource(json_object_get(t, "datasource"), what);
            ck_assert_msg(strstr(expr, "job=~\"$job\"") && strstr(expr, "instance=~\"$instance\""),
                          "%s: %s is not filtered by $job and $instance", what, expr);
            ck_assert_msg(!strstr(expr, "127.0.0.1") && !strstr(expr, "instance=\"") &&
                              !strstr(expr, "job=\""),
                          "%s: %s names an instance or job of its own", what, expr);
            for (size_t r = 0; r < sizeof required / sizeof required[0]; r++)
                found[r] |= strstr(expr, required[r]) != NULL;
            ntargets++;
        }
    }
    for (size_t r = 0; r < sizeof required / sizeof required[0]; r++)
        ck_assert_msg(found[r], "no panel shows %s", required[r]);
    ck_assert_uint_ge(ntargets, 12);
    json_decref(d);
}
END_TEST

/* ---- a real Prometheus ---------------------------------------------------------------------- */

/* Replaces every occurrence of from in text (at least one: fails the test otherwise). */
static char *replace_all(char *text, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to), n = 0;
    for (const char *p = text; (p = strstr(p, from)) != NULL; p += fl)
        n++;
    ck_assert_msg(n > 0, "\"%s\" is not in the text", from);
    char *out = malloc(strlen(text) + n * tl + 1), *o = out;
    const char *p = text, *at;
    while ((at = strstr(p, from)) != NULL) {
        memcpy(o, p, (size_t)(at - p));
        o += at - p;
        memcpy(o, to, tl);
        o += tl;
        p = at + fl;
    }
    strcpy(o, p);
    free(text);
    return out;
}

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

/* GET http://127.0.0.1:port<path>: the status (0 when nothing answers) and the body
 * (malloc'd). */
static long http_get(int port, const char *path, char **body)
{
    char url[8192];
    long status = 0;
    grow b = {calloc(1, 1), 0};
    CURL *h = curl_easy_init();
    ck_assert_ptr_nonnull(h);
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    *body = b.p;
    return status;
}

typedef struct prom {
    pid_t pid;
    int port;
    char dir[256];
} prom;

/* Starts Prometheus on the shipped config/prometheus/prometheus.yml (its rules included),
 * scraping every second the daemons on ports a and b, and waits until it is ready. */
static void prom_start(prom *p, int a, int b)
{
    su_server tmp;
    char targets[128], rules[600], path[400], cwd[400];
    char *conf = su_read("config/prometheus/prometheus.yml");
    ck_assert_msg(conf != NULL, "config/prometheus/prometheus.yml (tests run from the repository)");
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    su_tmpdir(&tmp);
    snprintf(p->dir, sizeof p->dir, "%s", tmp.dir);
    snprintf(targets, sizeof targets, "['127.0.0.1:%d', '127.0.0.1:%d']", a, b);
    conf = replace_all(conf, "['127.0.0.1:8080']", targets);
    conf = replace_all(conf, "15s", "1s");
    snprintf(rules, sizeof rules, "- %s/config/prometheus/rules.yml", cwd);
    conf = replace_all(conf, "- rules.yml", rules);
    snprintf(path, sizeof path, "%s", su_write(p->dir, "prometheus.yml", conf));
    free(conf);
    p->port = su_free_port();

    fflush(NULL);
    p->pid = fork();
    ck_assert_int_ge(p->pid, 0);
    if (p->pid == 0) {
        char log[300], cfg[420], data[300], listen[64];
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        snprintf(log, sizeof log, "%s/prometheus.log", p->dir);
        if (!freopen(log, "w", stderr) || !freopen(log, "a", stdout))
            _exit(126);
        snprintf(cfg, sizeof cfg, "--config.file=%s", path);
        snprintf(data, sizeof data, "--storage.tsdb.path=%s/data", p->dir);
        snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%d", p->port);
        execl(PROMETHEUS, "prometheus", cfg, data, listen, "--log.level=warn", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 600; i++) {
        int st;
        char *body;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            snprintf(path, sizeof path, "%s/prometheus.log", p->dir);
            char *log = su_read(path);
            ck_abort_msg("prometheus did not start (exit %d; is it installed? make deps): %s",
                         WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st),
                         log ? log : "(no log)");
        }
        long status = http_get(p->port, "/-/ready", &body);
        free(body);
        if (status == 200)
            return;
        pause_ms(50);
    }
    ck_abort_msg("prometheus was not ready on port %d within 30 s", p->port);
}

static void prom_stop(prom *p)
{
    int st;
    kill(p->pid, SIGTERM);
    while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR)
        ;
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "prometheus exited with %d", st);
}

/* Prometheus's answer to GET path (an API call), parsed; fails the test unless it is 200
 * with "status": "success". New reference. */
static json_t *prom_api(const prom *p, const char *path)
{
    char *body;
    long status = http_get(p->port, path, &body);
    json_t *j = json_loads(body, 0, NULL);
    const char *st = json_string_value(json_object_get(j, "status"));
    ck_assert_msg(status == 200 && st && strcmp(st, "success") == 0, "GET %s: %ld %s", path, status,
                  body);
    free(body);
    return j;
}

static char *escape(const char *s)
{
    CURL *h = curl_easy_init();
    char *e = curl_easy_escape(h, s, 0), *out = strdup(e);
    curl_free(e);
    curl_easy_cleanup(h);
    return out;
}

/* Grafana's label_values(<selector>, <label>) through Prometheus's label API: 1 when want is
 * among the values. */
static int label_values_have(const prom *p, const char *query, const char *want)
{
    char sel[512], label[64], path[1200];
    const char *open = strchr(query, '('), *comma = strrchr(query, ',');
    ck_assert_msg(strncmp(query, "label_values(", 13) == 0 && comma && open,
                  "not label_values(selector, label): %s", query);
    snprintf(sel, sizeof sel, "%.*s", (int)(comma - open - 1), open + 1);
    ck_assert_int_eq(sscanf(comma + 1, " %63[a-z_])", label), 1);
    char *e = escape(sel);
    snprintf(path, sizeof path, "/api/v1/label/%s/values?match%%5B%%5D=%s", label, e);
    free(e);
    json_t *j = prom_api(p, path), *v;
    size_t i;
    int found = 0;
    json_array_foreach(json_object_get(j, "data"), i, v) found |=
        strcmp(json_string_value(v), want) == 0;
    json_decref(j);
    return found;
}

/* ---- load ------------------------------------------------------------------------------------ */

/* One unary gRPC call over h2c (libcurl's HTTP/2 with prior knowledge); returns its
 * grpc-status (from the trailers), -1 when there is none. */
static int grpc_call(int port, const char *method, const uint8_t *msg, size_t len)
{
    char url[256];
    uint8_t body[512];
    grow hd = {calloc(1, 1), 0}, b = {calloc(1, 1), 0};
    struct curl_slist *hl = NULL;
    ck_assert_uint_le(len, sizeof body - 5);
    body[0] = 0;
    body[1] = (uint8_t)(len >> 24);
    body[2] = (uint8_t)(len >> 16);
    body[3] = (uint8_t)(len >> 8);
    body[4] = (uint8_t)len;
    if (len)
        memcpy(body + 5, msg, len);
    CURL *h = curl_easy_init();
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, method);
    hl = curl_slist_append(hl, "Content-Type: application/grpc");
    hl = curl_slist_append(hl, "TE: trailers");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)(len + 5));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &hd);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    CURLcode rc = curl_easy_perform(h);
    ck_assert_msg(rc == CURLE_OK, "gRPC %s: %s", method, curl_easy_strerror(rc));
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    const char *st = strcasestr(hd.p, "grpc-status:");
    int code = st ? atoi(st + 12) : -1;
    free(hd.p);
    free(b.p);
    return code;
}

/* ShouldRateLimit for one descriptor {user: value}. */
static int should_rate_limit(int port, const char *value)
{
    uint8_t msg[256];
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry e =
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor d =
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry *ep = &e;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *dp = &d;
    Envoy__Service__Ratelimit__V3__RateLimitRequest r =
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    e.key = "user";
    e.value = (char *)value;
    d.n_entries = 1;
    d.entries = &ep;
    r.domain = "dashboard";
    r.n_descriptors = 1;
    r.descriptors = &dp;
    ck_assert_uint_le(envoy__service__ratelimit__v3__rate_limit_request__get_packed_size(&r),
                      sizeof msg);
    size_t n = envoy__service__ratelimit__v3__rate_limit_request__pack(&r, msg);
    return grpc_call(port, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", msg, n);
}

static void post(const su_server *s, const char *body)
{
    su_resp r = su_req(s, "POST", "/acquire", body, NULL);
    ck_assert_msg(r.status == 200 || r.status == 429, "POST /acquire %s: %ld %s", body, r.status,
                  r.body);
    su_resp_free(&r);
}

/* One round of traffic on a daemon: a hot user past its 5 tokens (denials), a new user with a
 * reservation left to expire, a /check. */
static void round_of(const su_server *s, int i)
{
    char body[128], hdr[64];
    post(s, "{\"keys\": {\"user\": \"hot\"}}");
    snprintf(body, sizeof body, "{\"keys\": {\"user\": \"u%d\"}, \"reserve\": true}", i);
    post(s, body);
    snprintf(hdr, sizeof hdr, "X-RateLimit-User: c%d", i);
    const char *hs[] = {hdr, NULL};
    su_resp r = su_req(s, "GET", "/check", NULL, hs);
    ck_assert(r.status == 200 || r.status == 429);
    su_resp_free(&r);
}

/* user: 5 tokens, one a second; global: every request, a fixed window far from full. */
#define LEVELS(user_extra, global_extra)                                                           \
    "\"levels\": [{\"name\": \"user\"" user_extra ", \"rules\": [{\"type\": \"token_bucket\", "    \
    "\"name\": \"per-user\", \"capacity\": 5, \"per_second\": 1}]}, {\"name\": \"global\", "       \
    "\"default_key\": \"*\"" global_extra ", \"rules\": [{\"type\": \"fixed_window\", \"name\": "  \
    "\"g\", \"limit\": 1000000, \"window\": 60}]}]"

/* $job, $instance (All: Grafana's regex of every value, dots escaped) and $__rate_interval
 * in expr replaced. malloc'd. */
static char *substitute(const char *expr, int a, int b)
{
    char inst[128];
    snprintf(inst, sizeof inst, "(127\\\\.0\\\\.0\\\\.1:%d|127\\\\.0\\\\.0\\\\.1:%d)", a, b);
    char *q = strdup(expr);
    if (strstr(q, "$job"))
        q = replace_all(q, "$job", JOB);
    if (strstr(q, "$instance"))
        q = replace_all(q, "$instance", inst);
    if (strstr(q, "$__rate_interval"))
        q = replace_all(q, "$__rate_interval", "1m");
    ck_assert_msg(!strchr(q, '$'), "a variable the test does not know: %s", q);
    return q;
}

/* Runs query until it returns a non-empty vector of numbers, none NaN, at least one above 0
 * (the panel shows the traffic, not only that the series exist), for up to 20 s; returns the
 * series' count, fails the test with the last answer otherwise. */
static size_t query_has_data(const prom *p, const char *title, const char *query)
{
    char *e = escape(query), path[8192], *last = NULL;
    snprintf(path, sizeof path, "/api/v1/query?query=%s", e);
    free(e);
    for (int attempt = 0; attempt < 40; attempt++) {
        json_t *j = prom_api(p, path), *data = json_object_get(j, "data"), *s;
        json_t *result = json_object_get(data, "result");
        size_t i, n = json_array_size(result);
        int numbers = n > 0, positive = 0;
        json_array_foreach(result, i, s)
        {
            const char *v = json_string_value(json_array_get(json_object_get(s, "value"), 1));
            numbers &= v && isfinite(strtod(v, NULL));
            positive |= v && strtod(v, NULL) > 0;
        }
        numbers &= positive;
        free(last);
        last = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        if (numbers) {
            free(last);
            return n;
        }
        pause_ms(500);
    }
    ck_abort_msg("panel \"%s\": %s returns no data above 0: %s", title, query, last);
    return 0;
}

START_TEST(every_panel_has_data_on_a_real_prometheus)
{
    su_server mem, red;
    rt_redis redis;
    prom p;
    char cfg[2048];
    static const char *const grpc[] = {"--grpc-port", "0", NULL};

    /* the memory store: max_keys, reservations expiring after 2 s (some still open when the
     * traffic stops), gRPC served */
    su_tmpdir(&mem);
    snprintf(cfg, sizeof cfg, "{\"max_keys\": 1000, \"reservation_ttl\": 2, %s}", LEVELS("", ""));
    su_start(&mem, cfg, grpc);
    /* the Redis store: the user level decides locally while Redis is down, global fails
     * closed */
    rt_redis_start(&redis);
    su_tmpdir(&red);
    snprintf(cfg, sizeof cfg, "{\"store\": {\"type\": \"redis\", \"url\": \"%s\"}, %s}", redis.url,
             LEVELS(", \"on_store_error\": \"local\"", ", \"on_store_error\": \"closed\""));
    su_start(&red, cfg, NULL);
    prom_start(&p, mem.port, red.port);
    /* Prometheus starts scraping a few seconds after it is ready: the traffic begins once it
     * has scraped both daemons, so that the scrapes see the counters grow */
    int up = 0;
    for (int i = 0; i < 60 && up < 2; i++) {
        json_t *j = prom_api(&p, "/api/v1/query?query=up%7Bjob%3D%22" JOB "%22%7D%3D%3D1");
        up = (int)json_array_size(json_object_get(json_object_get(j, "data"), "result"));
        json_decref(j);
        if (up < 2)
            pause_ms(500);
    }
    ck_assert_msg(up == 2, "prometheus did not scrape both daemons within 30 s");

    /* 6 s of traffic, a round every 200 ms; Redis killed halfway */
    for (int i = 0; i < 30; i++) {
        char user[32];
        round_of(&mem, i);
        round_of(&red, i);
        snprintf(user, sizeof user, "g%d", i % 3);
        ck_assert_int_eq(should_rate_limit(mem.grpc_port, user), 0);
        ck_assert_int_eq(grpc_call(mem.grpc_port, "/grpc.health.v1.Health/Check", NULL, 0), 0);
        if (i % 5 == 0) /* UNIMPLEMENTED */
            ck_assert_int_eq(grpc_call(mem.grpc_port, "/no.Such/Method", NULL, 0), 12);
        if (i == 15)
            rt_redis_kill(&redis);
        pause_ms(200);
    }

    /* the variables as Grafana resolves them: the job, then both instances in it */
    json_t *d = load_dashboard();
    char want[64];
    ck_assert_msg(label_values_have(&p, variable_query(variable(d, "job")), JOB),
                  "label_values of $job lacks %s", JOB);
    char *iq = substitute(variable_query(variable(d, "instance")), 0, 0);
    snprintf(want, sizeof want, "127.0.0.1:%d", mem.port);
    ck_assert_msg(label_values_have(&p, iq, want), "label_values of $instance lacks %s", want);
    snprintf(want, sizeof want, "127.0.0.1:%d", red.port);
    ck_assert_msg(label_values_have(&p, iq, want), "label_values of $instance lacks %s", want);
    free(iq);

    /* every panel's every query, with $instance = All */
    json_t *panel, *t;
    size_t i, k, queries = 0;
    json_array_foreach(json_object_get(d, "panels"), i, panel)
    {
        const char *title = json_string_value(json_object_get(panel, "title"));
        json_array_foreach(json_object_get(panel, "targets"), k, t)
        {
            char *q = substitute(json_string_value(json_object_get(t, "expr")), mem.port, red.port);
            ck_assert_uint_gt(query_has_data(&p, title, q), 0);
            free(q);
            queries++;
        }
    }
    ck_assert_uint_ge(queries, 12);
    json_decref(d);

    prom_stop(&p);
    ck_assert_int_eq(su_stop(&mem), 0);
    ck_assert_int_eq(su_stop(&red), 0);
    rt_redis_stop(&redis);
}
END_TEST

static Suite *dashboard_suite(void)
{
    Suite *s = suite_create("dashboard");
    TCase *tc = tcase_create("shape");
    tcase_add_test(tc, dashboard_has_grafanas_shape);
    suite_add_tcase(s, tc);
    tc = tcase_create("prometheus");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, every_panel_has_data_on_a_real_prometheus);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return su_main(dashboard_suite());
}
