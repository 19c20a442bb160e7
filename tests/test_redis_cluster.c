/*
 * test_redis_cluster.c - the Redis Cluster routing module (service/redis/cluster.c): CRC16 and
 * hash tags against known values and against CLUSTER KEYSLOT of a real cluster (three primaries
 * with a replica each, tests/redis_server.h); every key sent to the node that serves its slot;
 * a slot migrated by hand (CLUSTER SETSLOT ... MIGRATING / IMPORTING, MIGRATE, SETSLOT NODE)
 * while keys are written, which answers ASK and then MOVED; and a primary killed, whose slots
 * are followed to the promoted replica.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis/cluster.h"
#include "redis_server.h"
#include "testutil.h"

/* ---- slots, without a cluster ---------------------------------------------------------------- */

START_TEST(crc16_known_values)
{
    /* the check value of CRC-16/XMODEM, and the examples of the Redis Cluster specification */
    ck_assert_uint_eq(rld_crc16("123456789", 9), 0x31C3);
    ck_assert_uint_eq(rld_crc16("", 0), 0);
    ck_assert_uint_eq(rld_crc16("A", 1), 0x58E5);
    /* CLUSTER KEYSLOT answers on Redis 7.0: foo 12182, bar 5061, hello 866 */
    ck_assert_uint_eq(rld_cluster_slot("foo", 3), 12182);
    ck_assert_uint_eq(rld_cluster_slot("bar", 3), 5061);
    ck_assert_uint_eq(rld_cluster_slot("hello", 5), 866);
    /* hash tags: the first {...} that is not empty */
    ck_assert_uint_eq(rld_cluster_slot("{user1000}.following", 20), rld_cluster_slot("user1000", 8));
    ck_assert_uint_eq(rld_cluster_slot("foo{bar}{zap}", 13), rld_cluster_slot("bar", 3));
    ck_assert_uint_eq(rld_cluster_slot("foo{{bar}}zap", 13), rld_cluster_slot("{bar", 4));
    ck_assert_uint_eq(rld_cluster_slot("foo{}{bar}", 10), rld_cluster_slot("foo{}{bar}", 10));
    ck_assert_uint_ne(rld_cluster_slot("foo{}{bar}", 10), rld_cluster_slot("bar", 3));
    ck_assert_uint_eq(rld_cluster_slot("{", 1), rld_crc16("{", 1) & 16383);
    ck_assert_uint_eq(rld_cluster_slot("a{b", 3), rld_crc16("a{b", 3) & 16383);
}
END_TEST

/* ---- on a real cluster ----------------------------------------------------------------------- */

static rt_cluster cl;

static void cl_up(void) { rt_cluster_start(&cl, 1000); }

static void cl_down(void) { rt_cluster_stop(&cl); }

static rld_cluster *router(void)
{
    rld_redis_addr seeds[2];
    rl_err err;
    rld_cluster *c;
    memset(seeds, 0, sizeof seeds);
    for (int i = 0; i < 2; i++) {
        snprintf(seeds[i].host, sizeof seeds[i].host, "127.0.0.1");
        seeds[i].port = cl.node[i].port;
    }
    ck_assert_int_eq(rld_cluster_new(seeds, 2, 200, 2, &c, &err), RL_OK);
    return c;
}

static redisReply *cmd(rld_cluster *c, const char *key, const char *verb, const char *value)
{
    const char *argv[3] = {verb, key, value};
    redisReply *r = NULL;
    rl_err err = {{0}};
    int rc = rld_cluster_exec(c, rld_cluster_slot(key, strlen(key)), -1, 1, value ? 3 : 2, argv,
                              NULL, 0, &r, &err);
    ck_assert_msg(rc == RL_OK, "%s %s: %s", verb, key, err.msg);
    return r;
}

/* The index of the node whose port is in "host:port". */
static int node_of(const char *hostport)
{
    const char *colon = strrchr(hostport, ':');
    int port = colon ? atoi(colon + 1) : 0;
    for (int i = 0; i < RT_CLUSTER_NODES; i++)
        if (cl.node[i].port == port)
            return i;
    return -1;
}

/* The same slots as CLUSTER KEYSLOT, and every key on the primary the map names. */
START_TEST(keys_go_where_the_cluster_says)
{
    rld_cluster *c = router();
    int per_node[RT_CLUSTER_NODES] = {0};
    for (int i = 0; i < 300; i++) {
        char key[64];
        snprintf(key, sizeof key, i % 3 == 0 ? "{tag%d}.x" : i % 3 == 1 ? "k%d" : "a{}b%d", i);
        redisReply *r = rt_redis_cmd(&cl.node[0], "CLUSTER KEYSLOT %s", key);
        ck_assert_uint_eq(r->integer, rld_cluster_slot(key, strlen(key)));
        freeReplyObject(r);
        r = cmd(c, key, "SET", "v");
        freeReplyObject(r);
        char owner[300];
        unsigned slot = rld_cluster_slot(key, strlen(key));
        rld_cluster_owner(c, slot, owner, sizeof owner);
        int n = node_of(owner);
        ck_assert_int_eq(n, rt_cluster_owner(&cl, (int)slot));
        per_node[n]++;
        /* the key is there, read without the router */
        r = rt_redis_cmd(&cl.node[n], "GET %s", key);
        ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
        freeReplyObject(r);
    }
    for (int i = 0; i < 3; i++)
        ck_assert_int_gt(per_node[i], 50);
    ck_assert_uint_eq(rld_cluster_redirects(c, 0), 0);
    ck_assert_uint_eq(rld_cluster_refreshes(c), 1);
    rld_cluster_free(c);
}
END_TEST

/* A key of slot, "m<n>" for the first n that hashes there. */
static void key_in(unsigned slot, int from, char *key, size_t len)
{
    for (int n = from;; n++) {
        snprintf(key, len, "m%d", n);
        if (rld_cluster_slot(key, strlen(key)) == slot)
            return;
    }
}

static char *node_id(const rt_redis *r)
{
    static char id[2][64];
    static int k;
    redisReply *rep = rt_redis_cmd(r, "CLUSTER MYID");
    k ^= 1;
    snprintf(id[k], sizeof id[k], "%s", rep->str);
    freeReplyObject(rep);
    return id[k];
}

/* A slot under migration: a key of it (key, written as value through c) stays on its primary
 * *a, which is MIGRATING it to *b, IMPORTING it; b_id is b's node id. */
static void begin_migration(rld_cluster *c, unsigned slot, const char *value, char *key,
                            size_t klen, int *a, int *b, char b_id[64])
{
    char a_id[64];
    key_in(slot, 0, key, klen);
    redisReply *r = cmd(c, key, "SET", value);
    freeReplyObject(r);
    *a = rt_cluster_owner(&cl, (int)slot);
    *b = (*a + 1) % 3;
    snprintf(a_id, sizeof a_id, "%s", node_id(&cl.node[*a]));
    snprintf(b_id, 64, "%s", node_id(&cl.node[*b]));
    r = rt_redis_cmd(&cl.node[*b], "CLUSTER SETSLOT %u IMPORTING %s", slot, a_id);
    ck_assert_str_eq(r->str, "OK");
    freeReplyObject(r);
    r = rt_redis_cmd(&cl.node[*a], "CLUSTER SETSLOT %u MIGRATING %s", slot, b_id);
    ck_assert_str_eq(r->str, "OK");
    freeReplyObject(r);
}

/* Slot 0 moves from its primary A to B by hand while keys are written through the router:
 * during the migration a key not yet on A is answered ASK (sent to B with ASKING, the map
 * unchanged); after it, MOVED (the map follows). */
START_TEST(follows_ask_and_moved_during_a_migration)
{
    rld_cluster *c = router();
    const unsigned slot = 0;
    char key[32], b_id[64];
    int a, b;
    begin_migration(c, slot, "before", key, sizeof key, &a, &b, b_id);
    redisReply *r;

    /* the key still on A is answered by A; a new key goes to B after ASK */
    r = cmd(c, key, "GET", NULL);
    ck_assert_str_eq(r->str, "before");
    freeReplyObject(r);
    char fresh[32];
    key_in(slot, atoi(key + 1) + 1, fresh, sizeof fresh);
    r = cmd(c, fresh, "SET", "during");
    freeReplyObject(r);
    ck_assert_uint_eq(rld_cluster_redirects(c, 1), 1);
    ck_assert_uint_eq(rld_cluster_redirects(c, 0), 0);
    r = rt_redis_cmd(&cl.node[b], "CLUSTER COUNTKEYSINSLOT %u", slot);
    ck_assert_int_eq(r->integer, 1);
    freeReplyObject(r);
    r = cmd(c, fresh, "GET", NULL); /* ASK again: the map still names A */
    ck_assert_str_eq(r->str, "during");
    freeReplyObject(r);
    ck_assert_uint_eq(rld_cluster_redirects(c, 1), 2);

    /* the old key moves, the slot is B's for good */
    r = rt_redis_cmd(&cl.node[a], "MIGRATE 127.0.0.1 %d %s 0 5000", cl.node[b].port, key);
    ck_assert_str_eq(r->str, "OK");
    freeReplyObject(r);
    for (int i = 0; i < 3; i++) {
        r = rt_redis_cmd(&cl.node[i], "CLUSTER SETSLOT %u NODE %s", slot, b_id);
        ck_assert_int_ne(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
    }
    r = cmd(c, key, "GET", NULL);
    ck_assert_str_eq(r->str, "before");
    freeReplyObject(r);
    ck_assert_uint_eq(rld_cluster_redirects(c, 0), 1);
    char owner[300];
    rld_cluster_owner(c, slot, owner, sizeof owner);
    ck_assert_int_eq(node_of(owner), b);
    r = cmd(c, fresh, "GET", NULL); /* no redirection now */
    ck_assert_str_eq(r->str, "during");
    freeReplyObject(r);
    ck_assert_uint_eq(rld_cluster_redirects(c, 0), 1);
    ck_assert_uint_eq(rld_cluster_redirects(c, 1), 2);
    rld_cluster_free(c);
}
END_TEST

/* What a call through the router got, made on a thread of its own. */
typedef struct pending {
    rld_cluster *c;
    const char *key;
    int rc;
    char reply[64];
    rl_err err;
} pending;

static void *get_later(void *arg)
{
    pending *w = arg;
    const char *argv[2] = {"GET", w->key};
    redisReply *r = NULL;
    w->rc = rld_cluster_exec(w->c, rld_cluster_slot(w->key, strlen(w->key)), -1, 1, 2, argv, NULL,
                             0, &r, &w->err);
    if (r && r->type == REDIS_REPLY_STRING)
        snprintf(w->reply, sizeof w->reply, "%s", r->str);
    if (r)
        freeReplyObject(r);
    return NULL;
}

static rl_ns mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (rl_ns)ts.tv_sec * RL_NS_PER_SEC + ts.tv_nsec;
}

/* The router naps 1 ms, 2 ms, ... at its redirections back and forth, 136 ms over its 16: a
 * call still gets its answer when the nodes agree within AGREE_MS of its start (three or more
 * redirections left), on any machine. They are made to agree no sooner than WAIT_MS after it,
 * by when a router that did not nap would have spent its 16 redirections (a round trip each). */
#define AGREE_MS 80
#define WAIT_MS 40

/* The source of a migrated slot is told first that the target owns it, the other nodes once
 * the call is seen passed back and forth (A to B, B to A) and WAIT_MS have passed, the target
 * last. The call waits
 * longer at each turn and gets its answer once the target owns the slot, instead of failing
 * after a few redirections. Returns 1 when it did; 0 when it failed with the nodes agreeing
 * more than AGREE_MS after it started (the machine stalled this test: the round says nothing
 * of the router); fails the test when it failed though they agreed in time. */
static int disagreement_waited_out(rld_cluster *c, unsigned slot)
{
    char key[32], b_id[64];
    int a, b;
    begin_migration(c, slot, "kept", key, sizeof key, &a, &b, b_id);
    redisReply *r;
    r = rt_redis_cmd(&cl.node[a], "MIGRATE 127.0.0.1 %d %s 0 5000", cl.node[b].port, key);
    ck_assert_str_eq(r->str, "OK");
    freeReplyObject(r);
    r = rt_redis_cmd(&cl.node[a], "CLUSTER SETSLOT %u NODE %s", slot, b_id);
    ck_assert_int_ne(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    r = rt_redis_cmd(&cl.node[b], "GET %s", key); /* B, still importing, sends it back to A */
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    ck_assert_msg(strncmp(r->str, "MOVED", 5) == 0, "%s", r->str);
    freeReplyObject(r);
    redisContext *told[2]; /* connected beforehand: one round trip each once the call is seen */
    for (int i = 0, n = 0; i < 3; i++)
        if (i != a && i != b)
            told[n++] = rt_redis_connect(&cl.node[i]);
    told[1] = rt_redis_connect(&cl.node[b]); /* the target last */
    pending w = {.c = c, .key = key, .rc = -100};
    pthread_t t;
    uint64_t moved = rld_cluster_redirects(c, 0);
    rl_ns start = mono();
    ck_assert_int_eq(pthread_create(&t, NULL, get_later, &w), 0);
    for (int i = 0; i < 5000 && (rld_cluster_redirects(c, 0) < moved + 2 ||
                                 mono() - start < (rl_ns)WAIT_MS * 1000000); i++)
        usleep(1000);
    ck_assert_uint_ge(rld_cluster_redirects(c, 0), moved + 2);
    for (int i = 0; i < 2; i++) {
        r = redisCommand(told[i], "CLUSTER SETSLOT %u NODE %s", slot, b_id);
        ck_assert_msg(r && r->type != REDIS_REPLY_ERROR, "SETSLOT: %s", r ? r->str : "no reply");
        freeReplyObject(r);
    }
    rl_ns agreed = mono() - start;
    for (int i = 0; i < 2; i++)
        redisFree(told[i]);
    pthread_join(t, NULL);
    if (w.rc != RL_OK) {
        ck_assert_msg(agreed > (rl_ns)AGREE_MS * 1000000,
                      "slot %u: the nodes agreed %.1f ms after the call started, yet it failed: %s",
                      slot, (double)agreed / 1e6, w.err.msg);
        fprintf(stderr, "waits_out_nodes_that_disagree: slot %u: the nodes agreed only %.1f ms "
                "after the call started (it failed: %s); another slot\n",
                slot, (double)agreed / 1e6, w.err.msg);
        return 0;
    }
    ck_assert_str_eq(w.reply, "kept");
    ck_assert_uint_ge(rld_cluster_redirects(c, 0), moved + 3); /* and to B once more */
    return 1;
}

START_TEST(waits_out_nodes_that_disagree)
{
    rld_cluster *c = router();
    unsigned slot = 1;
    while (!disagreement_waited_out(c, slot))
        ck_assert_msg(++slot <= 10, "the nodes never agreed within %d ms of a call's start "
                      "in 10 rounds", AGREE_MS);
    rld_cluster_free(c);
}
END_TEST

/* A primary is killed: its calls fail until its replica is promoted, then go to the replica. */
START_TEST(follows_a_failover)
{
    rld_cluster *c = router();
    char key[32];
    key_in(100, 0, key, sizeof key);
    redisReply *r = cmd(c, key, "SET", "before");
    freeReplyObject(r);
    int a = rt_cluster_owner(&cl, 100);
    rt_redis_kill(&cl.node[a]);
    const char *argv[3] = {"SET", key, "after"};
    int ok = 0;
    for (int i = 0; i < 200 && !ok; i++) {
        rl_err err;
        ok = rld_cluster_exec(c, 100, -1, 1, 3, argv, NULL, 0, &r, &err) == RL_OK;
        if (ok)
            freeReplyObject(r);
        else
            usleep(50000);
    }
    ck_assert(ok);
    r = cmd(c, key, "GET", NULL);
    ck_assert_str_eq(r->str, "after");
    freeReplyObject(r);
    char owner[300];
    rld_cluster_owner(c, 100, owner, sizeof owner);
    ck_assert_int_ge(node_of(owner), 3); /* a replica at start */
    ck_assert_int_eq(node_of(owner), rt_cluster_owner(&cl, 100));
    ck_assert_uint_ge(rld_cluster_refreshes(c), 2);
    rld_cluster_free(c);
}
END_TEST

Suite *redis_cluster_suite(void);
Suite *redis_cluster_suite(void)
{
    Suite *s = suite_create("redis_cluster");
    TCase *tc = tcase_create("slots");
    tcase_add_test(tc, crc16_known_values);
    suite_add_tcase(s, tc);
    tc = tcase_create("cluster");
    tcase_add_checked_fixture(tc, cl_up, cl_down);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, keys_go_where_the_cluster_says);
    tcase_add_test(tc, follows_ask_and_moved_during_a_migration);
    tcase_add_test(tc, waits_out_nodes_that_disagree);
    tcase_add_test(tc, follows_a_failover);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(redis_cluster_suite()) ? 1 : 0; }
