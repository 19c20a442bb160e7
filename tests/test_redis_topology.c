/*
 * test_redis_topology.c - the Redis deployments the tests start: a primary with a replica and
 * three sentinels, and a cluster of three primaries with a replica each. Each starts ready for
 * a failover, fails over as Redis does when a primary is killed, and stops completely.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "testutil.h"

static rl_ns mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (rl_ns)ts.tv_sec * RL_NS_PER_SEC + ts.tv_nsec;
}

static int gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

/* "master" or "slave": the first element of ROLE. */
static void check_role(const rt_redis *r, const char *want)
{
    redisReply *rep = rt_redis_read(r, "ROLE");
    ck_assert_int_eq(rep->type, REDIS_REPLY_ARRAY);
    ck_assert_str_eq(rep->element[0]->str, want);
    freeReplyObject(rep);
}

START_TEST(sentinels_promote_the_replica)
{
    rt_sentinel_group g;
    rt_sentinel_start(&g, 1000, 2000);
    ck_assert_int_eq(rt_sentinel_primary(&g), g.data[0].port);
    check_role(&g.data[0], "master");
    check_role(&g.data[1], "slave");
    redisReply *rep = rt_redis_cmd(&g.data[0], "SET k v");
    freeReplyObject(rep);

    rl_ns t0 = mono();
    rt_redis_kill(&g.data[0]);
    while (rt_sentinel_primary(&g) != g.data[1].port && mono() - t0 < S(60))
        usleep(20000);
    rl_ns took = mono() - t0;
    ck_assert_int_eq(rt_sentinel_primary(&g), g.data[1].port);
    /* down-after-milliseconds 1000, then the vote and the promotion */
    ck_assert_int_ge(took, S(1));
    fprintf(stderr, "sentinel failover: %lld ms\n", (long long)(took / 1000000));
    rep = rt_redis_read(&g.data[1], "GET k"); /* promoted meanwhile */
    ck_assert_str_eq(rep->str, "v");
    freeReplyObject(rep);
    for (int i = 0; i < 50; i++) { /* the replica stops replicating at the promotion */
        rep = rt_redis_read(&g.data[1], "ROLE");
        int master = strcmp(rep->element[0]->str, "master") == 0;
        freeReplyObject(rep);
        if (master)
            break;
        usleep(100000);
    }
    check_role(&g.data[1], "master");

    pid_t pids[RT_SENTINELS + 1] = {g.data[1].pid};
    for (int i = 0; i < RT_SENTINELS; i++)
        pids[i + 1] = g.sent[i].pid;
    rt_sentinel_stop(&g);
    for (int i = 0; i < RT_SENTINELS + 1; i++)
        ck_assert(gone(pids[i]));
    rt_sentinel_stop(&g);
}
END_TEST

START_TEST(cluster_of_three_primaries_fails_over)
{
    rt_cluster c;
    rt_cluster_start(&c, 1000);
    for (int i = 0; i < 3; i++)
        check_role(&c.node[i], "master");
    for (int i = 3; i < RT_CLUSTER_NODES; i++)
        check_role(&c.node[i], "slave");
    /* every slot served, by the three primaries only, each holding a third */
    int count[RT_CLUSTER_NODES] = {0};
    for (int slot = 0; slot < 16384; slot += 97)
        count[rt_cluster_owner(&c, slot) < 0 ? 0 : rt_cluster_owner(&c, slot)] += 1;
    ck_assert_int_eq(rt_cluster_owner(&c, 16383) >= 0 && rt_cluster_owner(&c, 16383) < 3, 1);
    for (int i = 0; i < 3; i++)
        ck_assert_int_gt(count[i], 169 / 3 - 10);
    ck_assert_int_eq(count[0] + count[1] + count[2], 169);

    /* the replica of the primary serving slot 0 takes over when it is killed */
    int owner = rt_cluster_owner(&c, 0);
    redisReply *rep = rt_redis_cmd(&c.node[owner], "CLUSTER NODES");
    ck_assert_int_eq(rep->type, REDIS_REPLY_STRING);
    freeReplyObject(rep);
    rl_ns t0 = mono();
    rt_redis_kill(&c.node[owner]);
    int now = owner;
    while ((now = rt_cluster_owner(&c, 0)) == owner && mono() - t0 < S(20))
        usleep(50000);
    ck_assert_int_ge(now, 3);
    fprintf(stderr, "cluster failover: %lld ms\n", (long long)((mono() - t0) / 1000000));
    check_role(&c.node[now], "master");

    pid_t pids[RT_CLUSTER_NODES];
    for (int i = 0; i < RT_CLUSTER_NODES; i++)
        pids[i] = c.node[i].pid;
    rt_cluster_stop(&c);
    for (int i = 0; i < RT_CLUSTER_NODES; i++)
        ck_assert(pids[i] == 0 || gone(pids[i]));
}
END_TEST

Suite *redis_topology_suite(void);
Suite *redis_topology_suite(void)
{
    Suite *s = suite_create("redis_topology");
    TCase *tc = tcase_create("topology");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, sentinels_promote_the_replica);
    tcase_add_test(tc, cluster_of_three_primaries_fails_over);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(redis_topology_suite()) ? 1 : 0; }
