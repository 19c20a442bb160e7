/*
 * test_fleet_cluster.c - two real ratelimitd processes on a Redis Cluster (three primaries with
 * a replica each, created by redis-cli --cluster create), over HTTP, with a manual clock held
 * at 0 so that nothing refills and every count can be worked out by hand.
 *
 * Four levels in this order: user (3 tokens, 4 an hour), team (20), global (100), job (one
 * slot at a time). 48 users in 6 teams of 8 ask 5 times each through both daemons from four
 * clients at once (240 requests): no user gets more than 3, no team more than 20, and exactly
 * 100 get through (the teams could take 120, the users 144; a request is only denied for
 * want of room, and a take given back after a denial by a later level happens only once global
 * is full, so global fills). Afterwards every bucket's remaining is its capacity less what was
 * admitted through it: a denied request consumed nothing at any level. Every key is on the
 * primary the cluster's map names for its slot, the states of one (level, key) share a slot,
 * and states lie on all three primaries.
 *
 * Then reservations settle and slots release through the other daemon; a primary is killed
 * (SIGKILL) and its replica promoted, the daemons follow; and one slot is moved by hand under
 * load (CLUSTER SETSLOT IMPORTING / MIGRATING, MIGRATE, SETSLOT NODE): the daemons follow ASK
 * and MOVED without failing a request, and the moved user's bucket admits exactly its 3.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis_server.h"
#include "srvutil.h"

static const char *const manual[] = {"--manual-clock", NULL};

#define USERS 48
#define TEAMS 6
#define ASKS 5
#define USER_CAP 3
#define HOURLY 4
#define TEAM_CAP 20
#define GLOBAL_CAP 100
#define CLIENTS 4

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

static const char *levels =
    "\"reservation_ttl\": 30, \"levels\": ["
    "{\"name\": \"user\", \"on_store_error\": \"closed\", \"rules\": [{\"type\": "
    "\"token_bucket\", \"name\": \"tokens\", \"capacity\": 3, \"per_second\": 1}, {\"type\": "
    "\"fixed_window\", \"name\": \"hourly\", \"limit\": 4, \"window\": 3600}]},"
    "{\"name\": \"team\", \"on_store_error\": \"closed\", \"rules\": [{\"type\": "
    "\"token_bucket\", \"name\": \"team\", \"capacity\": 20, \"per_second\": 1}]},"
    "{\"name\": \"global\", \"on_store_error\": \"closed\", \"rules\": [{\"type\": "
    "\"token_bucket\", \"name\": \"global\", \"capacity\": 100, \"per_second\": 1}]},"
    "{\"name\": \"job\", \"on_store_error\": \"closed\", \"rules\": [{\"type\": "
    "\"concurrency\", \"name\": \"slots\", \"limit\": 1}]}]";

static rt_cluster cl;
static su_server d[2];

/* Every decision reaches the cluster (no cache of denials): the slot moved under load is seen
 * by the denied requests too. */
static void start_daemons(void)
{
    char cfg[4096];
    snprintf(cfg, sizeof cfg,
             "{\"store\": {\"type\": \"redis\", \"cluster\": [\"%s\", \"%s\", \"%s\"], "
             "\"prefix\": \"cl:\", \"timeout_ms\": 2000, \"pool\": 4, \"fleet_size\": 2, "
             "\"deny_cache\": false}, %s}",
             cl.seeds[0], cl.seeds[1], cl.seeds[2], levels);
    for (int i = 0; i < 2; i++) {
        su_tmpdir(&d[i]);
        su_start(&d[i], cfg, manual);
    }
}

static void stop_daemons(void)
{
    for (int i = 0; i < 2; i++) {
        su_resp h = su_req(&d[i], "GET", "/healthz", NULL, NULL);
        ck_assert_msg(strcmp(su_str(&h, "status"), "ok") == 0, "daemon %d: %s", i, h.body);
        su_resp_free(&h);
        ck_assert_msg(su_stop(&d[i]) == 0, "ratelimitd %d did not exit 0", i);
    }
}

static su_resp post(int i, const char *path, const char *body)
{
    return su_req(&d[i], "POST", path, body, NULL);
}

/* The remaining of limits[k] of a dry run of keys (a JSON object's members) on daemon i. */
static double remaining(int i, const char *keys, size_t k)
{
    char body[512];
    snprintf(body, sizeof body, "{\"keys\": {%s}, \"dry_run\": true, \"now\": 0}", keys);
    su_resp r = post(i, "/acquire", body);
    json_t *l = json_array_get(json_object_get(r.json, "limits"), k);
    ck_assert_msg(l != NULL, "%s: no limits[%zu] in %s", keys, k, r.body);
    double v = json_number_value(json_object_get(l, "remaining"));
    su_resp_free(&r);
    return v;
}

/* ---- a client: POST /acquire in a loop, without Check in its thread ------------------------ */

typedef struct answer {
    long status;
    char blocked[128]; /* blocked_by, "" when null */
    size_t nlimits;
} answer;

static size_t collect(char *data, size_t size, size_t n, void *arg)
{
    char *buf = arg;
    size_t k = size * n, have = strlen(buf);
    if (have + k < 4096) {
        memcpy(buf + have, data, k);
        buf[have + k] = '\0';
    }
    return k;
}

/* One /acquire on port with a curl handle of the caller's; status 0 when curl failed. */
static answer acquire_on(CURL *h, int port, const char *body)
{
    char url[96], buf[4096] = "";
    answer a = {0};
    snprintf(url, sizeof url, "http://127.0.0.1:%d/acquire", port);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, buf);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    if (curl_easy_perform(h) != CURLE_OK)
        return a;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &a.status);
    json_t *j = json_loads(buf, 0, NULL);
    json_t *b = json_object_get(j, "blocked_by");
    snprintf(a.blocked, sizeof a.blocked, "%s", json_is_string(b) ? json_string_value(b) : "");
    a.nlimits = json_array_size(json_object_get(j, "limits"));
    json_decref(j);
    return a;
}

static CURL *handle(struct curl_slist **hl)
{
    *hl = curl_slist_append(NULL, "Content-Type: application/json");
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hl);
    return h;
}

/* Whether an answer came from Redis: allowed with every limit, or denied by a rule (never
 * "store unavailable"). n: the limits a request of those levels reports. */
static int from_redis(const answer *a, size_t n)
{
    if (a->status == 200)
        return a->nlimits == n;
    return a->status == 429 && a->blocked[0] && !strstr(a->blocked, "store unavailable");
}

/* ---- many users, three levels ------------------------------------------------------------- */

typedef struct load {
    int next; /* atomic: the next request of the shuffled list */
    int order[USERS * ASKS];
    int admitted[USERS];
    int wrong;
} load;

static void *load_run(void *arg)
{
    load *l = arg;
    struct curl_slist *hl;
    CURL *h = handle(&hl);
    for (;;) {
        int k = __atomic_fetch_add(&l->next, 1, __ATOMIC_RELAXED);
        if (k >= USERS * ASKS)
            break;
        int u = l->order[k];
        char body[256];
        snprintf(body, sizeof body,
                 "{\"keys\": {\"user\": \"u%d\", \"team\": \"t%d\", \"global\": \"all\"}, "
                 "\"now\": 0}",
                 u, u % TEAMS);
        answer a = acquire_on(h, d[k % 2].port, body);
        if (!from_redis(&a, 4))
            __atomic_add_fetch(&l->wrong, 1, __ATOMIC_RELAXED);
        else if (a.status == 200)
            __atomic_add_fetch(&l->admitted[u], 1, __ATOMIC_RELAXED);
    }
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    return NULL;
}

static void many_users(void)
{
    static load l;
    memset(&l, 0, sizeof l);
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int k = 0; k < USERS * ASKS; k++)
        l.order[k] = k % USERS;
    for (int k = USERS * ASKS - 1; k > 0; k--) { /* a fixed shuffle */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int j = (int)(x % (uint64_t)(k + 1)), t = l.order[k];
        l.order[k] = l.order[j];
        l.order[j] = t;
    }
    pthread_t t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, load_run, &l), 0);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(l.wrong, 0);
    int team[TEAMS] = {0}, total = 0;
    for (int u = 0; u < USERS; u++) {
        ck_assert_msg(l.admitted[u] <= USER_CAP, "user u%d admitted %d", u, l.admitted[u]);
        team[u % TEAMS] += l.admitted[u];
        total += l.admitted[u];
    }
    for (int k = 0; k < TEAMS; k++)
        ck_assert_msg(team[k] <= TEAM_CAP, "team t%d admitted %d", k, team[k]);
    ck_assert_int_eq(total, GLOBAL_CAP);
    fprintf(stderr, "many_users: %d of %d requests admitted; per team", total, USERS * ASKS);
    for (int k = 0; k < TEAMS; k++)
        fprintf(stderr, " %d", team[k]);
    fprintf(stderr, "\n");

    /* once settled, each bucket holds exactly what was admitted through it, read through the
     * daemon that did not ask last */
    char keys[128];
    for (int u = 0; u < USERS; u++) {
        snprintf(keys, sizeof keys, "\"user\": \"u%d\"", u);
        ck_assert_double_eq(remaining(u % 2, keys, 0), USER_CAP - l.admitted[u]);
        ck_assert_double_eq(remaining(u % 2, keys, 1), HOURLY - l.admitted[u]);
    }
    for (int k = 0; k < TEAMS; k++) {
        snprintf(keys, sizeof keys, "\"team\": \"t%d\"", k);
        ck_assert_double_eq(remaining(k % 2, keys, 0), TEAM_CAP - team[k]);
    }
    ck_assert_double_eq(remaining(1, "\"global\": \"all\"", 0), 0);
}

/* The slot of a key, as the cluster computes it (asked of a node that runs). */
static int keyslot(const char *key)
{
    int n = 0;
    while (cl.node[n].pid <= 0)
        n++;
    redisReply *r = rt_redis_cmd(&cl.node[n], "CLUSTER KEYSLOT %s", key);
    int slot = (int)r->integer;
    freeReplyObject(r);
    return slot;
}

/* Every key of the daemons is on the primary the map names for its slot; keys with one hash
 * tag share a slot; every primary holds states. */
static void keys_where_the_map_says(void)
{
    char tags[256][64];
    int tag_slot[256], ntags = 0, per_node[3] = {0}, users = 0;
    for (int n = 0; n < 3; n++) {
        char cursor[32] = "0";
        do {
            redisReply *r = rt_redis_cmd(&cl.node[n], "SCAN %s MATCH cl:* COUNT 1000", cursor);
            ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
            snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
            for (size_t i = 0; i < r->element[1]->elements; i++) {
                const char *key = r->element[1]->element[i]->str;
                int slot = keyslot(key);
                ck_assert_msg(rt_cluster_owner(&cl, slot) == n, "%s (slot %d) on node %d", key,
                              slot, n);
                const char *open = strchr(key, '{'), *close = open ? strchr(open, '}') : NULL;
                if (!open || !close || strncmp(key, "cl:r:", 5) == 0 ||
                    strncmp(key, "cl:resv", 7) == 0)
                    continue; /* fleet, quotas, reservations */
                per_node[n]++;
                char tag[64];
                snprintf(tag, sizeof tag, "%.*s", (int)(close - open - 1), open + 1);
                users += strncmp(tag, "user:", 5) == 0;
                int t = 0;
                while (t < ntags && strcmp(tags[t], tag) != 0)
                    t++;
                if (t == ntags && ntags < 256) {
                    snprintf(tags[ntags], sizeof tags[ntags], "%s", tag);
                    tag_slot[ntags++] = slot;
                } else if (t < ntags) {
                    ck_assert_msg(tag_slot[t] == slot, "%s: slot %d, others of {%s} %d", key,
                                  slot, tag, tag_slot[t]);
                }
            }
            freeReplyObject(r);
        } while (strcmp(cursor, "0") != 0);
    }
    /* each user admitted at least once has its two states (tokens, hourly) */
    ck_assert_int_ge(users, 2 * (GLOBAL_CAP / USER_CAP));
    ck_assert_int_eq(users % 2, 0);
    for (int n = 0; n < 3; n++)
        ck_assert_msg(per_node[n] > 0, "no state on primary %d", n);
    fprintf(stderr, "keys: states per primary %d %d %d, %d tags\n", per_node[0], per_node[1],
            per_node[2], ntags);
}

/* A reservation made through one daemon is settled through the other; a slot held through one
 * is released through the other; a request denied by its last level (job) took nothing from
 * its first (user), whose state lies elsewhere. */
static void reservations_across_daemons(void)
{
    char body[256], id[64];
    /* r1 reserves 2: tokens 3 - 2, hourly 4 - 2, team rt 20 - 2; settled at 1 through B */
    su_resp a = post(0, "/acquire",
                     "{\"keys\": {\"user\": \"r1\", \"team\": \"rt\"}, \"cost\": 2, \"reserve\": "
                     "true, \"now\": 0}");
    ck_assert_msg(a.status == 200, "%s", a.body);
    snprintf(id, sizeof id, "%s", su_str(&a, "reservation"));
    su_resp_free(&a);
    ck_assert_double_eq(remaining(1, "\"user\": \"r1\"", 0), 1);
    ck_assert_double_eq(remaining(1, "\"team\": \"rt\"", 0), 18);
    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"actual_cost\": 1, \"now\": 0}", id);
    su_resp b = post(1, "/refund", body);
    ck_assert_msg(b.status == 200, "%s", b.body);
    ck_assert_double_eq(su_num(&b, "refunded"), 1);
    su_resp_free(&b);
    ck_assert_double_eq(remaining(0, "\"user\": \"r1\"", 0), 2);
    ck_assert_double_eq(remaining(0, "\"user\": \"r1\"", 1), 3);
    ck_assert_double_eq(remaining(0, "\"team\": \"rt\"", 0), 19);
    a = post(0, "/refund", body);
    ck_assert_int_eq(a.status, 409);
    su_resp_free(&a);

    /* j1 takes job j's one slot through A; j2 through B is denied by job and keeps its 3 */
    a = post(0, "/acquire", "{\"keys\": {\"user\": \"j1\", \"job\": \"j\"}, \"now\": 0}");
    ck_assert_msg(a.status == 200, "%s", a.body);
    snprintf(body, sizeof body, "{\"reservation\": \"%s\", \"now\": 0}", su_str(&a, "reservation"));
    su_resp_free(&a);
    b = post(1, "/acquire", "{\"keys\": {\"user\": \"j2\", \"job\": \"j\"}, \"now\": 0}");
    ck_assert_msg(b.status == 429, "%s", b.body);
    ck_assert_str_eq(su_str(&b, "blocked_by"), "job: slots");
    su_resp_free(&b);
    ck_assert_double_eq(remaining(1, "\"user\": \"j2\"", 0), 3);
    ck_assert_double_eq(remaining(1, "\"user\": \"j2\"", 1), 4);
    ck_assert_double_eq(remaining(0, "\"job\": \"j\"", 0), 0);
    /* released through B: the slot is free for j2 */
    b = post(1, "/release", body);
    ck_assert_msg(b.status == 200, "%s", b.body);
    su_resp_free(&b);
    ck_assert_double_eq(remaining(0, "\"job\": \"j\"", 0), 1);
    b = post(1, "/acquire", "{\"keys\": {\"user\": \"j2\", \"job\": \"j\"}, \"now\": 0}");
    ck_assert_msg(b.status == 200, "%s", b.body);
    su_resp_free(&b);
    ck_assert_double_eq(remaining(0, "\"user\": \"j2\"", 0), 2);
}

/* ---- failover ------------------------------------------------------------------------------- */

/* A user whose states lie on primary n ("<p><k>" for the first k). */
static void user_on(int n, const char *p, char *user, size_t len)
{
    for (int k = 0;; k++) {
        char key[96];
        snprintf(user, len, "%s%d", p, k);
        snprintf(key, sizeof key, "cl:user:0:{user:%s}", user);
        if (rt_cluster_owner(&cl, keyslot(key)) == n)
            return;
    }
}

/* Asks for user through daemon i until the answer comes from Redis; the seconds it took. */
static double until_from_redis(CURL *h, int i, const char *user, double limit_s)
{
    char body[128];
    double t0 = mono_s();
    snprintf(body, sizeof body, "{\"keys\": {\"user\": \"%s\"}, \"now\": 0}", user);
    for (;;) {
        answer a = acquire_on(h, d[i].port, body);
        if (from_redis(&a, 2))
            return mono_s() - t0;
        ck_assert_msg(mono_s() - t0 < limit_s, "%s not from Redis within %g s (status %ld, %s)",
                      user, limit_s, a.status, a.blocked);
        sleep_ms(20);
    }
}

static void primary_killed(void)
{
    char lost[32], kept[32];
    user_on(0, "f", lost, sizeof lost);
    user_on(1, "g", kept, sizeof kept);
    struct curl_slist *hl;
    CURL *h = handle(&hl);
    for (int i = 0; i < 2; i++) {
        until_from_redis(h, i, lost, 5);
        until_from_redis(h, i, kept, 5);
    }
    double killed = mono_s();
    rt_redis_kill(&cl.node[0]);
    /* the other primaries answer throughout */
    for (int i = 0; i < 2; i++)
        ck_assert_double_lt(until_from_redis(h, i, kept, 5), 1);
    double back[2];
    for (int i = 0; i < 2; i++) {
        until_from_redis(h, i, lost, 60);
        back[i] = mono_s() - killed;
    }
    char key[96];
    snprintf(key, sizeof key, "cl:user:0:{user:%s}", lost);
    ck_assert_int_ge(rt_cluster_owner(&cl, keyslot(key)), 3); /* a replica at start, promoted */
    fprintf(stderr,
            "primary_killed: %s answered from Redis again %.3f s after the kill (daemon A), "
            "%.3f s (B); the other primaries answered throughout\n",
            lost, back[0], back[1]);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
}

/* ---- resharding one slot under load --------------------------------------------------------- */

typedef struct mover {
    const char *user;
    volatile int stop;
    long calls, wrong, admitted;
} mover;

static void *move_load(void *arg)
{
    mover *m = arg;
    struct curl_slist *hl;
    CURL *h = handle(&hl);
    char body[128];
    snprintf(body, sizeof body, "{\"keys\": {\"user\": \"%s\"}, \"now\": 0}", m->user);
    for (long k = 0; !__atomic_load_n(&m->stop, __ATOMIC_ACQUIRE); k++) {
        answer a = acquire_on(h, d[k % 2].port, body);
        m->calls++;
        if (!from_redis(&a, 2))
            m->wrong++;
        else if (a.status == 200)
            m->admitted++;
        sleep_ms(2);
    }
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    return NULL;
}

static long asking_calls(const rt_redis *n)
{
    redisReply *r = rt_redis_cmd(n, "INFO commandstats");
    const char *p = strstr(r->str, "cmdstat_asking:calls=");
    long v = p ? atol(p + strlen("cmdstat_asking:calls=")) : 0;
    freeReplyObject(r);
    return v;
}

static void slot_moved_under_load(void)
{
    /* the live primaries now: two of node[1..2], and the promoted replica */
    int prim[3], np = 0;
    for (int n = 0; n < RT_CLUSTER_NODES; n++) {
        if (cl.node[n].pid <= 0)
            continue;
        redisReply *r = rt_redis_cmd(&cl.node[n], "ROLE");
        if (strcmp(r->element[0]->str, "master") == 0 && np < 3)
            prim[np++] = n;
        freeReplyObject(r);
    }
    ck_assert_int_eq(np, 3);
    char user[32], key[96];
    user_on(prim[1], "m", user, sizeof user);
    snprintf(key, sizeof key, "cl:user:0:{user:%s}", user);
    int slot = keyslot(key), from = prim[1], to = prim[2];
    redisReply *r;
    char from_id[64], to_id[64];
    r = rt_redis_cmd(&cl.node[from], "CLUSTER MYID");
    snprintf(from_id, sizeof from_id, "%s", r->str);
    freeReplyObject(r);
    r = rt_redis_cmd(&cl.node[to], "CLUSTER MYID");
    snprintf(to_id, sizeof to_id, "%s", r->str);
    freeReplyObject(r);
    long asked = asking_calls(&cl.node[to]);

    mover m[2] = {{.user = user}, {.user = user}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, move_load, &m[i]), 0);
    sleep_ms(300); /* the user's states are made (3 admitted, then denials) */
    r = rt_redis_cmd(&cl.node[to], "CLUSTER SETSLOT %d IMPORTING %s", slot, from_id);
    ck_assert_str_eq(r->str, "OK");
    freeReplyObject(r);
    r = rt_redis_cmd(&cl.node[from], "CLUSTER SETSLOT %d MIGRATING %s", slot, to_id);
    ck_assert_str_eq(r->str, "OK");
    freeReplyObject(r);
    sleep_ms(300);
    /* every key of the slot in one MIGRATE: the user's two states move together */
    r = rt_redis_cmd(&cl.node[from], "CLUSTER GETKEYSINSLOT %d 100", slot);
    ck_assert_int_ge(r->elements, 2);
    const char *argv[112];
    char port[16];
    size_t argc = 0;
    snprintf(port, sizeof port, "%d", cl.node[to].port);
    argv[argc++] = "MIGRATE";
    argv[argc++] = "127.0.0.1";
    argv[argc++] = port;
    argv[argc++] = "";
    argv[argc++] = "0";
    argv[argc++] = "5000";
    argv[argc++] = "KEYS";
    for (size_t i = 0; i < r->elements && argc < 112; i++)
        argv[argc++] = r->element[i]->str;
    redisContext *c = rt_redis_connect(&cl.node[from]);
    redisReply *mr = redisCommandArgv(c, (int)argc, argv, NULL);
    ck_assert_msg(mr && mr->type == REDIS_REPLY_STATUS, "MIGRATE: %s", mr ? mr->str : c->errstr);
    freeReplyObject(mr);
    redisFree(c);
    freeReplyObject(r);
    sleep_ms(500); /* the keys are on the target, the slot still the source's: ASK */
    for (int i = 0; i < np; i++) {
        r = rt_redis_cmd(&cl.node[prim[i]], "CLUSTER SETSLOT %d NODE %s", slot, to_id);
        ck_assert_msg(r->type != REDIS_REPLY_ERROR, "SETSLOT NODE: %s", r->str);
        freeReplyObject(r);
    }
    sleep_ms(500); /* now MOVED, then the map */
    for (int i = 0; i < 2; i++) {
        __atomic_store_n(&m[i].stop, 1, __ATOMIC_RELEASE);
        pthread_join(t[i], NULL);
    }
    long calls = m[0].calls + m[1].calls, wrong = m[0].wrong + m[1].wrong;
    long admitted = m[0].admitted + m[1].admitted;
    long asks = asking_calls(&cl.node[to]) - asked;
    fprintf(stderr, "slot_moved_under_load: slot %d moved with %ld requests on it, %ld ASKING\n",
            slot, calls, asks);
    ck_assert_int_eq(wrong, 0);
    ck_assert_int_eq(admitted, USER_CAP);
    ck_assert_int_gt(asks, 0);
    ck_assert_int_eq(rt_cluster_owner(&cl, slot), to);
    snprintf(key, sizeof key, "\"user\": \"%s\"", user);
    ck_assert_double_eq(remaining(0, key, 0), 0);
    ck_assert_double_eq(remaining(1, key, 1), HOURLY - USER_CAP);
}

START_TEST(daemons_on_a_cluster)
{
    rt_cluster_start(&cl, 1000);
    start_daemons();
    many_users();
    keys_where_the_map_says();
    reservations_across_daemons();
    primary_killed();
    slot_moved_under_load();
    stop_daemons();
    rt_cluster_stop(&cl);
}
END_TEST

static Suite *fleet_cluster_suite(void)
{
    Suite *s = suite_create("fleet_cluster");
    TCase *tc = tcase_create("cluster");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, daemons_on_a_cluster);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return su_main(fleet_cluster_suite()); }
