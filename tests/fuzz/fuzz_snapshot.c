/*
 * fuzz_snapshot.c - the state file read at start: rl_limiter_load over the input, at a fixed
 * now, into a limiter with every built-in rule type. A refusal has a message and leaves the
 * limiter empty (never half-loaded). Every built-in type with state has a rule here (the calendar's
 * state is its period's bounds and count). A snapshot that loads saves and loads again with as many
 * states and reservations (once idle ones are dropped), and decisions on the keys of the seed snapshots keep the invariants
 * of fz_check_decision (a balance read from the file is never above its capacity).
 */
#include <string.h>
#include <unistd.h>

#include "fuzz.h"

static const char config[] =
    "{\"levels\": ["
    "{\"name\": \"user\", \"tiered\": true},"
    "{\"name\": \"team\", \"rules\": [{\"type\": \"gcra\", \"per_second\": 4, \"burst\": 3},"
    " {\"type\": \"fixed_window\", \"limit\": 8, \"window\": 2},"
    " {\"type\": \"sliding_window_counter\", \"limit\": 6, \"window\": 1.5},"
    " {\"type\": \"calendar\", \"limit\": 5, \"period\": \"day\","
    " \"time_zone\": \"Europe/Berlin\", \"alerts\": [0.5, 1]}]},"
    "{\"name\": \"job\", \"rules\": [{\"type\": \"concurrency\", \"limit\": 2},"
    " {\"type\": \"sliding_window\", \"limit\": 5, \"window\": 3}]}],"
    " \"tiers\": {\"free\": [{\"type\": \"token_bucket\", \"capacity\": 10, \"per_second\": 2}],"
    " \"pro\": [{\"type\": \"sliding_window\", \"limit\": 4, \"window\": 10}]},"
    " \"default_tier\": \"free\", \"quotas\": {\"p\": \"pro\"}}";

/* The time of the seed snapshots (made at 100 s) plus one second. */
#define NOW (101 * RL_NS_PER_SEC)

static size_t held(rl_limiter *lim)
{
    rl_stats st;
    size_t n = 0;
    for (size_t l = 0; l < rl_limiter_config(lim)->nlevels; l++)
        n += rl_limiter_keys(lim, l);
    rl_limiter_stats(lim, &st);
    return n + st.reservations_active;
}

static void decide_seed_keys(rl_limiter *lim)
{
    static const char *const keys[] = {"a", "b", "p"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        rl_descriptor desc[3] = {
            {"user", 4, keys[k], 1}, {"team", 4, keys[k], 1}, {"job", 3, keys[k], 1}};
        rl_request req = {.desc = desc, .ndesc = 3, .cost = RL_FP_ONE, .now = NOW,
                          .flags = RL_DRY_RUN};
        rl_decision d;
        rl_err err = {{0}};
        int rc = rl_acquire(lim, &req, &d, &err);
        fz_check_decision(rc, &d, &err);
        if (rc == RL_OK)
            rl_decision_done(&d);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_scratch("snap");
    char again[300];
    fz_write(path, data, size);
    rl_limiter *lim = fz_limiter(config);
    rl_err err = {{0}};
    size_t loaded = 0, loaded2 = 0;
    if (rl_limiter_load(lim, path, NOW, &loaded, &err) != RL_OK) {
        FZ_CHECK(err.msg[0] != '\0', "a refusal without a message");
        FZ_CHECK(held(lim) == 0, "a refused snapshot left %zu states and reservations",
                 held(lim));
        fz_free(lim);
        return 0;
    }
    FZ_CHECK(held(lim) == loaded, "%zu loaded, %zu held", loaded, held(lim));
    snprintf(again, sizeof again, "%s.again", path);
    FZ_CHECK(rl_limiter_save(lim, again, &err) == RL_OK, "save: %s", err.msg);
    rl_limiter *lim2 = fz_limiter(config);
    FZ_CHECK(rl_limiter_load(lim2, again, NOW, &loaded2, &err) == RL_OK, "reload: %s", err.msg);
    /* a reservation that expired while the daemon was down gives its slots back as it loads,
     * which can leave a state idle that was loaded (and counted) before it: saved, that one is
     * skipped. Once housekeeping drops idle states both hold the same. */
    rl_limiter_tick(lim, NOW);
    rl_limiter_tick(lim2, NOW);
    FZ_CHECK(held(lim) == held(lim2), "%zu held, %zu after a round trip (%zu and %zu loaded)",
             held(lim), held(lim2), loaded, loaded2);
    unlink(again);
    decide_seed_keys(lim);
    fz_free(lim2);
    fz_free(lim);
    return 0;
}
