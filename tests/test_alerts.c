/*
 * test_alerts.c - the rules' alerts against a real HTTP receiver: a thread of this test
 * listening on a free loopback port, which records every request (its body and its
 * Authorization) and answers 200 (or another status it is told), or, while told to hang, reads
 * requests and never answers. gRPC calls are made with libcurl over h2c.
 * Real ratelimitd processes on the manual clock send to it; with Redis, two of them on one
 * private redis-server. Expected bodies are worked out by hand in the comments.
 */
#define _GNU_SOURCE /* strcasestr */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "redis_server.h"
#include "srvutil.h"

/* 2026-12-03T10:00:00Z and a day later */
#define T0 1796292000LL
#define DAY 86400LL

static const char *const manual[] = {"--manual-clock", NULL};

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* ---- the receiver ------------------------------------------------------------------------ */

#define RX_MAX 256

typedef struct rx {
    int port;
    int lfd;
    pthread_t th;
    pthread_mutex_t mu;
    int hang;         /* read requests, answer none (their connections stay open) */
    int stop;
    int code;         /* the status answered when not hanging (0: 200) */
    int n;            /* requests read */
    char *body[RX_MAX];
    char *auth[RX_MAX];
    int held[RX_MAX]; /* connections left hanging */
    int nheld;
} rx;

/* Reads one request from fd: its Authorization value and its body (malloc'd). 0 or -1. */
static int rx_read(int fd, char **auth, char **body)
{
    char buf[16384];
    size_t len = 0;
    char *end = NULL;
    while (!end) {
        ssize_t k = read(fd, buf + len, sizeof buf - 1 - len);
        if (k <= 0)
            return -1;
        len += (size_t)k;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
        if (!end && len == sizeof buf - 1)
            return -1;
    }
    size_t head = (size_t)(end - buf) + 4, clen = 0;
    const char *cl = strcasestr(buf, "\r\nContent-Length:");
    if (cl)
        clen = (size_t)strtoul(cl + 17, NULL, 10);
    while (len < head + clen) {
        ssize_t k = read(fd, buf + len, sizeof buf - 1 - len);
        if (k <= 0)
            return -1;
        len += (size_t)k;
    }
    buf[head + clen] = '\0';
    *body = strdup(buf + head);
    *auth = NULL;
    const char *a = strcasestr(buf, "\r\nAuthorization:");
    if (a && a < end) {
        a += 16;
        while (*a == ' ')
            a++;
        const char *e = strstr(a, "\r\n");
        *auth = strndup(a, (size_t)(e - a));
    }
    return 0;
}

static void *rx_main(void *arg)
{
    rx *x = arg;
    for (;;) {
        pthread_mutex_lock(&x->mu);
        int stop = x->stop;
        pthread_mutex_unlock(&x->mu);
        if (stop)
            break;
        struct pollfd p = {x->lfd, POLLIN, 0};
        if (poll(&p, 1, 20) <= 0)
            continue;
        int fd = accept(x->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        char *auth, *body;
        if (rx_read(fd, &auth, &body) != 0) {
            close(fd);
            continue;
        }
        pthread_mutex_lock(&x->mu);
        int hang = x->hang, code = x->code ? x->code : 200;
        if (x->n < RX_MAX) {
            x->auth[x->n] = auth;
            x->body[x->n] = body;
            x->n++;
        } else {
            free(auth);
            free(body);
        }
        if (hang && x->nheld < RX_MAX)
            x->held[x->nheld++] = fd;
        pthread_mutex_unlock(&x->mu);
        if (!hang) {
            char ans[128];
            int k = snprintf(ans, sizeof ans,
                             "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                             code, code == 200 ? "OK" : "Error");
            ck_assert_int_eq(write(fd, ans, (size_t)k), (ssize_t)k);
            close(fd);
        }
    }
    return NULL;
}

/* Starts listening on port (0: any free one), answering (hang 0) or not. */
static void rx_start(rx *x, int port, int hang)
{
    memset(x, 0, sizeof *x);
    pthread_mutex_init(&x->mu, NULL);
    x->hang = hang;
    x->lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(x->lfd, 0);
    int one = 1;
    setsockopt(x->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_msg(bind(x->lfd, (struct sockaddr *)&a, sizeof a) == 0, "bind: %s", strerror(errno));
    ck_assert_int_eq(listen(x->lfd, 64), 0);
    socklen_t sl = sizeof a;
    getsockname(x->lfd, (struct sockaddr *)&a, &sl);
    x->port = ntohs(a.sin_port);
    ck_assert_int_eq(pthread_create(&x->th, NULL, rx_main, x), 0);
}

/* From now on the receiver answers: the requests left hanging are closed unanswered. */
static void rx_answer(rx *x)
{
    pthread_mutex_lock(&x->mu);
    x->hang = 0;
    for (int i = 0; i < x->nheld; i++)
        close(x->held[i]);
    x->nheld = 0;
    pthread_mutex_unlock(&x->mu);
}

/* From now on the receiver answers code. */
static void rx_code(rx *x, int code)
{
    pthread_mutex_lock(&x->mu);
    x->code = code;
    pthread_mutex_unlock(&x->mu);
}

static int rx_count(rx *x)
{
    pthread_mutex_lock(&x->mu);
    int n = x->n;
    pthread_mutex_unlock(&x->mu);
    return n;
}

/* Waits until n requests came (or ms passed); returns how many came. */
static int rx_wait(rx *x, int n, int ms)
{
    double until = mono_s() + ms / 1000.0;
    while (rx_count(x) < n && mono_s() < until)
        sleep_ms(10);
    return rx_count(x);
}

static void rx_stop(rx *x)
{
    pthread_mutex_lock(&x->mu);
    x->stop = 1;
    pthread_mutex_unlock(&x->mu);
    pthread_join(x->th, NULL);
    close(x->lfd);
    for (int i = 0; i < x->nheld; i++)
        close(x->held[i]);
    for (int i = 0; i < x->n; i++) {
        free(x->body[i]);
        free(x->auth[i]);
    }
    pthread_mutex_destroy(&x->mu);
}

/* ---- the daemon ------------------------------------------------------------------------- */

/* A configuration whose alerts go to port, with webhook members after "url" and levels. */
static const char *config_for(int port, const char *webhook, const char *levels)
{
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"alert_webhook\": {\"url\": \"http://127.0.0.1:%d/hook\"%s}, \"levels\": [%s]}",
             port, webhook, levels);
    return buf;
}

/* A team level with a calendar rule of 100 a day in UTC, alerting at 80% and 95%. */
static const char team_daily[] =
    "{\"name\": \"team\", \"rules\": [{\"type\": \"calendar\", \"name\": \"daily\", \"limit\": "
    "100, \"period\": \"day\", \"time_zone\": \"UTC\", \"alerts\": [0.8, 0.95]}]}";

/* POST /acquire for team key of cost at time t (seconds); returns the status. */
static long take(const su_server *s, const char *key, int cost, long long t)
{
    char body[256];
    snprintf(body, sizeof body, "{\"keys\": {\"team\": \"%s\"}, \"cost\": %d, \"now\": %lld}", key,
             cost, t);
    su_resp r = su_req(s, "POST", "/acquire", body, NULL);
    long st = r.status;
    su_resp_free(&r);
    return st;
}

/* The value of a metric line "name value" in /metrics, -1 when absent. */
static double metric(const su_server *s, const char *name)
{
    su_resp r = su_req(s, "GET", "/metrics", NULL, NULL);
    ck_assert_int_eq(r.status, 200);
    double v = -1;
    size_t n = strlen(name);
    for (const char *p = r.body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            v = strtod(p + n + 1, NULL);
    su_resp_free(&r);
    return v;
}

/* ---- gRPC ------------------------------------------------------------------------------- */

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

/* ShouldRateLimit on port for one descriptor {team: key} of hits at time t (seconds), one unary
 * call over h2c (libcurl's HTTP/2 with prior knowledge); returns the answer's overall_code
 * after checking that grpc-status is 0. */
static int should_rate_limit(int port, const char *key, uint32_t hits, long long t)
{
    uint8_t msg[256], body[261];
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry e =
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor d =
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry *ep = &e;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *dp = &d;
    Envoy__Service__Ratelimit__V3__RateLimitRequest r =
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    e.key = "team";
    e.value = (char *)key;
    d.n_entries = 1;
    d.entries = &ep;
    r.domain = "edge";
    r.n_descriptors = 1;
    r.descriptors = &dp;
    r.hits_addend = hits;
    ck_assert_uint_le(envoy__service__ratelimit__v3__rate_limit_request__get_packed_size(&r),
                      sizeof msg);
    size_t n = envoy__service__ratelimit__v3__rate_limit_request__pack(&r, msg);
    body[0] = 0;
    body[1] = (uint8_t)(n >> 24);
    body[2] = (uint8_t)(n >> 16);
    body[3] = (uint8_t)(n >> 8);
    body[4] = (uint8_t)n;
    memcpy(body + 5, msg, n);
    char url[128], now[64];
    snprintf(url, sizeof url,
             "http://127.0.0.1:%d/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
             port);
    snprintf(now, sizeof now, "ratelimitd-now: %lld", t);
    struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/grpc");
    hl = curl_slist_append(hl, "TE: trailers");
    hl = curl_slist_append(hl, now);
    grow hd = {calloc(1, 1), 0}, b = {calloc(1, 1), 0};
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)(n + 5));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &hd);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    CURLcode rc = curl_easy_perform(h);
    ck_assert_msg(rc == CURLE_OK, "ShouldRateLimit: %s", curl_easy_strerror(rc));
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    const char *st = strcasestr(hd.p, "grpc-status:");
    ck_assert_msg(st && atoi(st + 12) == 0, "ShouldRateLimit answered: %s", hd.p);
    ck_assert_uint_ge(b.len, 5);
    Envoy__Service__Ratelimit__V3__RateLimitResponse *resp =
        envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, b.len - 5,
                                                                   (uint8_t *)b.p + 5);
    ck_assert_ptr_nonnull(resp);
    int code = (int)resp->overall_code;
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(resp, NULL);
    free(hd.p);
    free(b.p);
    return code;
}

/* ---- tests ------------------------------------------------------------------------------ */

START_TEST(crossing_sends_once_a_period_in_order)
{
    rx x;
    rx_start(&x, 0, 0);
    su_server s;
    su_tmpdir(&s);
    const char *tok = su_write(s.dir, "alert.token", "s3cret\n");
    char webhook[400];
    snprintf(webhook, sizeof webhook, ", \"token_file\": \"%s\"", tok);
    su_start(&s, config_for(x.port, webhook, team_daily), manual);
    /* used 70, then 85: 80 lies in (70, 85]: one alert at 0.8 */
    ck_assert_int_eq(take(&s, "acme", 70, T0), 200);
    sleep_ms(200);
    ck_assert_int_eq(rx_count(&x), 0);
    ck_assert_int_eq(take(&s, "acme", 15, T0 + 60), 200);
    ck_assert_int_eq(rx_wait(&x, 1, 5000), 1);
    ck_assert_str_eq(x.body[0], "{\"level\":\"team\",\"key\":\"acme\",\"rule\":\"daily\","
                                "\"unit\":\"cost\",\"used\":85,\"limit\":100,\"threshold\":0.8,"
                                "\"period_start\":\"2026-12-03T00:00:00Z\","
                                "\"period_end\":\"2026-12-04T00:00:00Z\"}");
    ck_assert_ptr_nonnull(x.auth[0]);
    ck_assert_str_eq(x.auth[0], "Bearer s3cret");
    /* 90: no threshold crossed; reset and 85 again in the same day: 0.8 crossed again, but
     * that alert was sent in this period (a duplicate, not sent) */
    ck_assert_int_eq(take(&s, "acme", 5, T0 + 120), 200);
    su_resp d = su_req(&s, "DELETE", "/usage/team/acme", NULL, NULL);
    ck_assert_int_eq(d.status, 200);
    su_resp_free(&d);
    ck_assert_int_eq(take(&s, "acme", 85, T0 + 180), 200);
    sleep_ms(300);
    ck_assert_int_eq(rx_count(&x), 1);
    ck_assert_double_eq(metric(&s, "ratelimit_alerts_total{result=\"duplicate\"}"), 1);
    /* 85 + 10 = 95: 0.95 */
    ck_assert_int_eq(take(&s, "acme", 10, T0 + 240), 200);
    ck_assert_int_eq(rx_wait(&x, 2, 5000), 2);
    ck_assert_ptr_nonnull(strstr(x.body[1], "\"used\":95,\"limit\":100,\"threshold\":0.95,"));
    /* a denied request takes nothing and alerts nothing */
    ck_assert_int_eq(take(&s, "acme", 10, T0 + 300), 429);
    /* the next day starts from 0: 96 crosses both, sent in order */
    ck_assert_int_eq(take(&s, "acme", 96, T0 + DAY), 200);
    ck_assert_int_eq(rx_wait(&x, 4, 5000), 4);
    ck_assert_str_eq(x.body[2], "{\"level\":\"team\",\"key\":\"acme\",\"rule\":\"daily\","
                                "\"unit\":\"cost\",\"used\":96,\"limit\":100,\"threshold\":0.8,"
                                "\"period_start\":\"2026-12-04T00:00:00Z\","
                                "\"period_end\":\"2026-12-05T00:00:00Z\"}");
    ck_assert_ptr_nonnull(strstr(x.body[3], "\"used\":96,\"limit\":100,\"threshold\":0.95,"
                                            "\"period_start\":\"2026-12-04T00:00:00Z\""));
    sleep_ms(300);
    ck_assert_int_eq(rx_count(&x), 4);
    ck_assert_double_eq(metric(&s, "ratelimit_alerts_total{result=\"sent\"}"), 4);
    ck_assert_double_eq(metric(&s, "ratelimit_alerts_total{result=\"dropped\"}"), 0);
    /* GET /usage at the last time seen, 2026-12-04T10:00Z: 96 used, 14 h to midnight UTC; a
     * key never seen shows the same day */
    su_resp u = su_req(&s, "GET", "/usage/team/acme", NULL, NULL);
    ck_assert_int_eq(u.status, 200);
    ck_assert_str_eq(u.body, "{\"level\":\"team\",\"key\":\"acme\",\"rules\":[{\"rule\":"
                             "\"daily\",\"unit\":\"cost\",\"limit\":100,\"used\":96,"
                             "\"remaining\":4,\"reset_after\":50400,"
                             "\"period_start\":\"2026-12-04T00:00:00Z\","
                             "\"period_end\":\"2026-12-05T00:00:00Z\"}]}");
    su_resp_free(&u);
    u = su_req(&s, "GET", "/usage/team/nobody", NULL, NULL);
    ck_assert_int_eq(u.status, 200);
    ck_assert_ptr_nonnull(strstr(u.body, "\"used\":0,\"remaining\":100,\"reset_after\":0,"
                                         "\"period_start\":\"2026-12-04T00:00:00Z\","));
    su_resp_free(&u);
    /* GET /check decides too (at the last time seen): 90 of 100 crosses 0.8 */
    static const char *const check_headers[] = {"X-RateLimit-Team: gate", "X-RateLimit-Cost: 90",
                                                NULL};
    u = su_req(&s, "GET", "/check", NULL, check_headers);
    ck_assert_int_eq(u.status, 200);
    su_resp_free(&u);
    ck_assert_int_eq(rx_wait(&x, 5, 5000), 5);
    ck_assert_ptr_nonnull(strstr(x.body[4], "\"key\":\"gate\",\"rule\":\"daily\",\"unit\":"
                                            "\"cost\",\"used\":90,\"limit\":100,\"threshold\":0.8,"
                                            "\"period_start\":\"2026-12-04T00:00:00Z\""));
    ck_assert_int_eq(su_stop(&s), 0);
    rx_stop(&x);
}
END_TEST

START_TEST(dead_receiver_retried_and_decisions_not_slowed)
{
    /* nothing listens on the port at first: the first alert's tries are refused */
    int port = su_free_port();
    su_server s;
    su_tmpdir(&s);
    su_start(&s, config_for(port, ", \"timeout_ms\": 1000, \"attempts\": 30", team_daily),
             manual);
    ck_assert_int_eq(take(&s, "k0", 80, T0), 200);
    sleep_ms(400);
    /* then it listens and hangs: every try waits out its 1 s timeout */
    rx x;
    rx_start(&x, port, 1);
    ck_assert_int_ge(rx_wait(&x, 1, 5000), 1); /* a try of k0's alert is hanging */
    /* 50 decisions, each crossing 80% on a key of its own (50 alerts queued behind the hanging
     * one): were they made on the sender's path, they would take 50 s at least */
    double t = mono_s();
    for (int i = 1; i <= 50; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        ck_assert_int_eq(take(&s, key, 80, T0 + i), 200);
    }
    double took = mono_s() - t;
    ck_assert_msg(took < 10.0, "50 decisions took %.3f s while the receiver hung", took);
    /* it comes up: k0's alert is tried again and delivered, then the 50 in order */
    rx_answer(&x);
    double until = mono_s() + 30;
    int last = -1;
    while (mono_s() < until) {
        pthread_mutex_lock(&x.mu);
        int n = x.n;
        pthread_mutex_unlock(&x.mu);
        if (n > 0 && strstr(x.body[n - 1], "\"key\":\"k50\""))
            break;
        sleep_ms(20);
    }
    /* the requests answered are the last 51 received, k0 to k50 in order (k0 may have been
     * received more than once: the tries that hung) */
    int n = rx_count(&x);
    ck_assert_int_ge(n, 51);
    for (int i = 0; i <= 50; i++) {
        char want[32];
        snprintf(want, sizeof want, "\"key\":\"k%d\"", i);
        ck_assert_msg(strstr(x.body[n - 51 + i], want), "request %d: %s, not k%d", n - 51 + i,
                      x.body[n - 51 + i], i);
        last = i;
    }
    ck_assert_int_eq(last, 50);
    ck_assert_double_eq(metric(&s, "ratelimit_alerts_total{result=\"sent\"}"), 51);
    ck_assert_double_eq(metric(&s, "ratelimit_alerts_total{result=\"failed\"}"), 0);
    ck_assert_int_eq(su_stop(&s), 0);
    rx_stop(&x);
}
END_TEST

START_TEST(full_queue_drops_and_counts)
{
    rx x;
    rx_start(&x, 0, 1);
    su_server s;
    su_tmpdir(&s);
    su_start(&s,
             config_for(x.port, ", \"queue\": 2, \"timeout_ms\": 20000, \"attempts\": 1",
                        team_daily),
             manual);
    /* the first alert is taken by the sender, whose try hangs */
    ck_assert_int_eq(take(&s, "q0", 80, T0), 200);
    ck_assert_int_eq(rx_wait(&x, 1, 5000), 1);
    /* 9 more: 2 wait in the queue, 7 are dropped */
    for (int i = 1; i <= 9; i++) {
        char key[16];
        snprintf(key, sizeof key, "q%d", i);
        ck_assert_int_eq(take(&s, key, 80, T0), 200);
    }
    ck_assert_double_eq(metric(&s, "ratelimit_alerts_total{result=\"dropped\"}"), 7);
    ck_assert_double_eq(metric(&s, "ratelimit_alerts_queued"), 2);
    ck_assert_int_eq(su_stop(&s), 0);
    rx_stop(&x);
}
END_TEST

START_TEST(two_instances_on_one_redis_send_each_alert_once)
{
    rt_redis r;
    rt_redis_start(&r);
    rx x;
    rx_start(&x, 0, 0);
    char cfg[8192];
    snprintf(cfg, sizeof cfg,
             "{\"store\": {\"type\": \"redis\", \"url\": \"%s\", \"prefix\": \"al:\"}, "
             "\"alert_webhook\": {\"url\": \"http://127.0.0.1:%d/hook\"}, \"levels\": [%s]}",
             r.url, x.port, team_daily);
    su_server s[2];
    for (int i = 0; i < 2; i++) {
        su_tmpdir(&s[i]);
        su_start(&s[i], cfg, manual);
    }
    /* instance 0 crosses 80%; the key is reset through instance 1, which crosses it again in
     * the same period: its claim finds instance 0's, so it sends nothing */
    ck_assert_int_eq(take(&s[0], "acme", 85, T0), 200);
    ck_assert_int_eq(rx_wait(&x, 1, 5000), 1);
    ck_assert_str_eq(x.body[0], "{\"level\":\"team\",\"key\":\"acme\",\"rule\":\"daily\","
                                "\"unit\":\"cost\",\"used\":85,\"limit\":100,\"threshold\":0.8,"
                                "\"period_start\":\"2026-12-03T00:00:00Z\","
                                "\"period_end\":\"2026-12-04T00:00:00Z\"}");
    su_resp d = su_req(&s[1], "DELETE", "/usage/team/acme", NULL, NULL);
    ck_assert_int_eq(d.status, 200);
    su_resp_free(&d);
    ck_assert_int_eq(take(&s[1], "acme", 85, T0 + 10), 200);
    double until = mono_s() + 5;
    while (metric(&s[1], "ratelimit_alerts_total{result=\"duplicate\"}") < 1 && mono_s() < until)
        sleep_ms(20);
    ck_assert_double_eq(metric(&s[1], "ratelimit_alerts_total{result=\"duplicate\"}"), 1);
    sleep_ms(200);
    ck_assert_int_eq(rx_count(&x), 1);
    /* the claim is in Redis until the period's end */
    redisReply *rep = rt_redis_cmd(&r, "KEYS al:alert:*");
    ck_assert_int_eq((int)rep->elements, 1);
    ck_assert_str_eq(rep->element[0]->str, "al:alert:team:acme:daily:1796256000:0.8");
    freeReplyObject(rep);
    /* 95% crossed through instance 1: sent by it, once */
    ck_assert_int_eq(take(&s[1], "acme", 10, T0 + 20), 200);
    ck_assert_int_eq(rx_wait(&x, 2, 5000), 2);
    ck_assert_ptr_nonnull(strstr(x.body[1], "\"used\":95,\"limit\":100,\"threshold\":0.95,"));
    sleep_ms(200);
    ck_assert_int_eq(rx_count(&x), 2);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(su_stop(&s[i]), 0);
    rx_stop(&x);
    rt_redis_stop(&r);
}
END_TEST

START_TEST(grpc_decisions_alert_too)
{
    rx x;
    rx_start(&x, 0, 0);
    su_server s;
    su_tmpdir(&s);
    static const char *const flags[] = {"--grpc-port", "0", "--manual-clock", NULL};
    su_start(&s, config_for(x.port, "", team_daily), flags);
    ck_assert_int_gt(s.grpc_port, 0);
    enum { OK = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK };
    /* hits_addend 70: used 70 of 100, below 80: nothing */
    ck_assert_int_eq(should_rate_limit(s.grpc_port, "edge", 70, T0), OK);
    sleep_ms(200);
    ck_assert_int_eq(rx_count(&x), 0);
    /* 15 more a minute later: 85, and 80 lies in (70, 85]: one alert at 0.8 for the day of
     * 2026-12-03 in UTC */
    ck_assert_int_eq(should_rate_limit(s.grpc_port, "edge", 15, T0 + 60), OK);
    ck_assert_int_eq(rx_wait(&x, 1, 5000), 1);
    ck_assert_str_eq(x.body[0], "{\"level\":\"team\",\"key\":\"edge\",\"rule\":\"daily\","
                                "\"unit\":\"cost\",\"used\":85,\"limit\":100,\"threshold\":0.8,"
                                "\"period_start\":\"2026-12-03T00:00:00Z\","
                                "\"period_end\":\"2026-12-04T00:00:00Z\"}");
    /* 5 more: 90, no threshold in (85, 90]: nothing more */
    ck_assert_int_eq(should_rate_limit(s.grpc_port, "edge", 5, T0 + 120), OK);
    sleep_ms(300);
    ck_assert_int_eq(rx_count(&x), 1);
    ck_assert_double_eq(metric(&s, "ratelimit_alerts_total{result=\"sent\"}"), 1);
    ck_assert_int_eq(su_stop(&s), 0);
    rx_stop(&x);
}
END_TEST

/* Waits until metric name reaches want (or ms passed); returns its value. */
static double metric_wait(const su_server *s, const char *name, double want, int ms)
{
    double until = mono_s() + ms / 1000.0, v;
    while ((v = metric(s, name)) < want && mono_s() < until)
        sleep_ms(20);
    return v;
}

START_TEST(every_try_refused_counts_failed_then_the_next_is_sent)
{
    rx x;
    rx_start(&x, 0, 0);
    rx_code(&x, 500);
    su_server s;
    su_tmpdir(&s);
    su_start(&s, config_for(x.port, ", \"attempts\": 3, \"timeout_ms\": 1000", team_daily),
             manual);
    static const char at80[] = "{\"level\":\"team\",\"key\":\"acme\",\"rule\":\"daily\","
                               "\"unit\":\"cost\",\"used\":85,\"limit\":100,\"threshold\":0.8,"
                               "\"period_start\":\"2026-12-03T00:00:00Z\","
                               "\"period_end\":\"2026-12-04T00:00:00Z\"}";
    /* 85 crosses 0.8; every try is answered 500: 3 tries (0.1 s, then 0.2 s apart) */
    ck_assert_int_eq(take(&s, "acme", 85, T0), 200);
    ck_assert_int_eq(rx_wait(&x, 3, 5000), 3);
    ck_assert_double_eq(metric_wait(&s, "ratelimit_alerts_total{result=\"failed\"}", 1, 5000), 1);
    /* no fourth try: it would have come 0.4 s after the third */
    sleep_ms(800);
    ck_assert_int_eq(rx_count(&x), 3);
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(x.body[i], at80);
    ck_assert_double_eq(metric(&s, "ratelimit_alerts_total{result=\"failed\"}"), 1);
    ck_assert_double_eq(metric(&s, "ratelimit_alerts_total{result=\"sent\"}"), 0);
    /* the receiver recovers: 10 more, 95, crosses 0.95, sent at the first try */
    rx_code(&x, 200);
    ck_assert_int_eq(take(&s, "acme", 10, T0 + 60), 200);
    ck_assert_int_eq(rx_wait(&x, 4, 5000), 4);
    ck_assert_str_eq(x.body[3], "{\"level\":\"team\",\"key\":\"acme\",\"rule\":\"daily\","
                                "\"unit\":\"cost\",\"used\":95,\"limit\":100,\"threshold\":0.95,"
                                "\"period_start\":\"2026-12-03T00:00:00Z\","
                                "\"period_end\":\"2026-12-04T00:00:00Z\"}");
    ck_assert_double_eq(metric_wait(&s, "ratelimit_alerts_total{result=\"sent\"}", 1, 5000), 1);
    ck_assert_double_eq(metric(&s, "ratelimit_alerts_total{result=\"failed\"}"), 1);
    sleep_ms(300);
    ck_assert_int_eq(rx_count(&x), 4);
    ck_assert_int_eq(su_stop(&s), 0);
    rx_stop(&x);
}
END_TEST

START_TEST(stops_promptly_while_a_try_hangs_or_waits)
{
    /* a receiver that hangs, tries of 60 s: SIGTERM ends the try in progress */
    rx x;
    rx_start(&x, 0, 1);
    su_server s;
    su_tmpdir(&s);
    su_start(&s, config_for(x.port, ", \"attempts\": 10, \"timeout_ms\": 60000", team_daily),
             manual);
    ck_assert_int_eq(take(&s, "acme", 85, T0), 200);
    ck_assert_int_eq(rx_wait(&x, 1, 5000), 1);
    double t = mono_s();
    ck_assert_int_eq(su_stop(&s), 0);
    double took = mono_s() - t;
    ck_assert_msg(took < 3.0, "stopping took %.3f s while a try hung", took);
    rx_stop(&x);
    /* a receiver answering 500, 100 tries: 5 tries come within 0.1 + 0.2 + 0.4 + 0.8 s, then
     * the sender waits 1.6 s before the sixth; SIGTERM ends the wait */
    rx_start(&x, 0, 0);
    rx_code(&x, 500);
    su_tmpdir(&s);
    su_start(&s, config_for(x.port, ", \"attempts\": 100", team_daily), manual);
    ck_assert_int_eq(take(&s, "acme", 85, T0), 200);
    ck_assert_int_eq(rx_wait(&x, 5, 5000), 5);
    t = mono_s();
    ck_assert_int_eq(su_stop(&s), 0);
    took = mono_s() - t;
    ck_assert_msg(took < 1.0, "stopping took %.3f s while the sender waited to retry", took);
    rx_stop(&x);
}
END_TEST

/* A bad value is refused by --check-config naming the field. */
static void refused(const char *levels, const char *want)
{
    su_server s;
    su_tmpdir(&s);
    const char *path = su_write(s.dir, "bad.json", config_for(1, "", levels));
    const char *argv[] = {su_binary(), "--check-config", path, NULL};
    char *out = NULL;
    int st = su_run(argv, &out);
    ck_assert_int_ne(st, 0);
    ck_assert_msg(strstr(out, want), "wanted \"%s\" in: %s", want, out);
    free(out);
}

START_TEST(bad_alerts_are_refused_naming_the_field)
{
    refused("{\"name\": \"t\", \"rules\": [{\"type\": \"fixed_window\", \"limit\": 5, \"window\": "
            "60}, {\"type\": \"calendar\", \"limit\": 9, \"period\": \"day\", \"time_zone\": "
            "\"UTC\", \"alerts\": [0.5, 0.9, 0.9]}]}",
            "levels[0].rules[1].alerts[2]: must be above alerts[1] (0.9)");
    refused("{\"name\": \"t\", \"rules\": [{\"type\": \"fixed_window\", \"limit\": 5, \"window\": "
            "60, \"alerts\": [0.5, 1.5]}]}",
            "levels[0].rules[0].alerts[1]: must be a number above 0 and at most 1");
    refused("{\"name\": \"t\", \"rules\": [{\"type\": \"token_bucket\", \"capacity\": 5, "
            "\"per_second\": 1, \"alerts\": [0.5]}]}",
            "levels[0].rules[0].alerts: a token_bucket rule has no period to alert in");
    refused("{\"name\": \"t\", \"rules\": [{\"type\": \"fixed_window\", \"limit\": 5, \"window\": "
            "60, \"alerts\": []}]}",
            "levels[0].rules[0].alerts: must be a list of 1 to 4 fractions");
}
END_TEST

static Suite *alerts_suite(void)
{
    Suite *s = suite_create("alerts");
    TCase *tc = tcase_create("webhook");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, crossing_sends_once_a_period_in_order);
    tcase_add_test(tc, dead_receiver_retried_and_decisions_not_slowed);
    tcase_add_test(tc, full_queue_drops_and_counts);
    tcase_add_test(tc, two_instances_on_one_redis_send_each_alert_once);
    tcase_add_test(tc, bad_alerts_are_refused_naming_the_field);
    suite_add_tcase(s, tc);
    /* cases of their own, to be run alone with CK_RUN_CASE */
    TCase *g = tcase_create("grpc");
    tcase_set_timeout(g, 60);
    tcase_add_test(g, grpc_decisions_alert_too);
    suite_add_tcase(s, g);
    TCase *f = tcase_create("failed");
    tcase_set_timeout(f, 60);
    tcase_add_test(f, every_try_refused_counts_failed_then_the_next_is_sent);
    suite_add_tcase(s, f);
    TCase *st = tcase_create("shutdown");
    tcase_set_timeout(st, 120);
    tcase_add_test(st, stops_promptly_while_a_try_hangs_or_waits);
    suite_add_tcase(s, st);
    return s;
}

int main(void)
{
    return su_main(alerts_suite());
}
