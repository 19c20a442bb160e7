/*
 * adaptive.c - goodput of an adaptive_concurrency rule against fixed concurrency limits, on the
 * manual clock against a simulated backend whose capacity halves and comes back
 * (bench/run.sh's "adaptive" section; prints "name: value" lines).
 *
 *   adaptive [SECONDS_PER_PHASE]      (default 60)
 *
 * The backend (as tests/test_adaptive.c's): a call that starts with n calls in flight takes
 * 100 ms while n <= capacity, 100 ms * (1 + n - capacity) beyond; its client gives up at
 * 250 ms (a timeout); past 1.5 * capacity calls fail at once (an error after 10 ms). Capacity
 * is 40, then 20, then 40 again, one phase each. Clients always want more calls than the limit
 * lets through: every 10 ms they acquire until denied, and release each call with its latency
 * and outcome when it ends. Goodput: calls that ended ok (within the deadline) per second.
 * Each limiter runs the same schedule: aimd and gradient (initial limit 20), and a fixed
 * concurrency limit of 10 to 80.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/rules_json.h"
#include "config/config.h"
#include "ratelimit.h"

#define STEP ((rl_ns)10000000)
#define BASE ((rl_ns)100000000)
#define DEADLINE ((rl_ns)250000000)
#define MAX_CALLS 4096

typedef struct call {
    char id[RL_RESERVATION_ID];
    rl_ns end;
    rl_outcome o;
} call;

static call calls[MAX_CALLS];

/* A limiter over the memory store with one level and rule; *reg is its registry, for the
 * caller to free after the limiter. */
static rl_limiter *limiter(const char *rule, rl_registry **regp)
{
    char json[512];
    snprintf(json, sizeof json,
             "{\"reservation_ttl\": 60, \"levels\": [{\"name\": \"backend\", \"default_key\": "
             "\"llm\", \"rules\": [%s]}]}",
             rule);
    rl_registry *reg = rl_registry_new();
    rld_settings set;
    rl_config *cfg;
    rl_limiter *lim;
    rl_err err;
    if (!reg || rld_config_parse(json, strlen(json), reg, &set, &cfg, &err) != RL_OK ||
        rl_limiter_new(cfg, NULL, &lim, &err) != RL_OK) {
        fprintf(stderr, "adaptive: %s\n", err.msg);
        exit(1);
    }
    rld_settings_clear(&set);
    *regp = reg;
    return lim;
}

/* Goodput (ok calls per second) of a limiter through the three phases. */
static double run(rl_limiter *lim, int phase_s)
{
    size_t n = 0;
    uint64_t good = 0;
    rl_ns end = (rl_ns)phase_s * 3 * RL_NS_PER_SEC;
    rl_err err;
    for (rl_ns now = 0; now < end; now += STEP) {
        int cap = now / ((rl_ns)phase_s * RL_NS_PER_SEC) == 1 ? 20 : 40;
        for (size_t i = 0; i < n;) {
            if (calls[i].end <= now) {
                good += calls[i].o.kind == RL_OUTCOME_OK;
                if (rl_release_outcome(lim, calls[i].id, now, &calls[i].o, &err) != RL_OK) {
                    fprintf(stderr, "adaptive: %s\n", err.msg);
                    exit(1);
                }
                calls[i] = calls[--n];
                continue;
            }
            i++;
        }
        for (;;) {
            rl_request rq = {.cost = RL_FP_ONE, .now = now};
            rl_decision d;
            if (rl_acquire(lim, &rq, &d, &err) != RL_OK) {
                fprintf(stderr, "adaptive: %s\n", err.msg);
                exit(1);
            }
            int ok = d.allowed && n < MAX_CALLS;
            if (ok) {
                call *c = &calls[n++];
                memcpy(c->id, d.reservation, sizeof c->id);
                int k = (int)n;
                if (k * 2 > cap * 3) {
                    c->o = (rl_outcome){RL_OUTCOME_ERROR, 10000000};
                } else {
                    rl_ns lat = BASE * (1 + (k > cap ? k - cap : 0));
                    c->o = lat > DEADLINE ? (rl_outcome){RL_OUTCOME_TIMEOUT, DEADLINE}
                                          : (rl_outcome){RL_OUTCOME_OK, lat};
                }
                c->end = now + c->o.latency;
            }
            rl_decision_done(&d);
            if (!ok)
                break;
        }
    }
    return (double)good / (3.0 * phase_s);
}

int main(int argc, char **argv)
{
    int phase = argc > 1 ? atoi(argv[1]) : 60;
    if (phase < 1) {
        fprintf(stderr, "usage: adaptive [SECONDS_PER_PHASE]\n");
        return 2;
    }
    static const char *const algos[] = {"aimd", "gradient"};
    for (int a = 0; a < 2; a++) {
        char rule[256];
        snprintf(rule, sizeof rule,
                 "{\"type\": \"adaptive_concurrency\", \"algorithm\": \"%s\", "
                 "\"initial_limit\": 20, \"min_limit\": 1, \"max_limit\": 1000}",
                 algos[a]);
        rl_registry *reg;
        rl_limiter *lim = limiter(rule, &reg);
        printf("adaptive_goodput_%s: %.1f\n", algos[a], run(lim, phase));
        rl_limiter_free(lim);
        rl_registry_free(reg);
    }
    double best = -1, worst = -1;
    int best_l = 0, worst_l = 0;
    for (int l = 10; l <= 80; l += 5) {
        char rule[128];
        snprintf(rule, sizeof rule, "{\"type\": \"concurrency\", \"limit\": %d}", l);
        rl_registry *reg;
        rl_limiter *lim = limiter(rule, &reg);
        double g = run(lim, phase);
        rl_limiter_free(lim);
        rl_registry_free(reg);
        fprintf(stderr, "# fixed limit %d: goodput %.1f\n", l, g);
        if (best < 0 || g > best)
            best = g, best_l = l;
        if (worst < 0 || g < worst)
            worst = g, worst_l = l;
    }
    printf("adaptive_goodput_best_fixed: %.1f\n", best);
    printf("adaptive_best_fixed_limit: %d\n", best_l);
    printf("adaptive_goodput_worst_fixed: %.1f\n", worst);
    printf("adaptive_worst_fixed_limit: %d\n", worst_l);
    return 0;
}
