/*
 * fuzz_yaml.c - envoyproxy/ratelimit's YAML configuration: rld_yaml_parse refuses with a
 * message naming the file, or gives domains whose rules build; a limiter over them then
 * decides, for every configured descriptor, a request of its key and value (invariants: one
 * status per descriptor, remaining never above requests_per_unit, a fixed window's reset at
 * most its unit).
 */
#include <string.h>

#include "fuzz.h"
#include "grpc/rls_yaml.h"

static void ask_all(rld_yrls *y, rl_limiter *lim, const rld_ydomain *dom)
{
    for (size_t i = 0; i < dom->nchildren && i < 16; i++) {
        const rld_ydesc *d = &dom->children[i];
        rld_yentry e = {d->key, strlen(d->key), d->value ? d->value : "v",
                        d->value ? strlen(d->value) : 1};
        rld_ydescreq dr = {.entries = &e, .nentries = 1};
        rld_yreq req = {.domain = dom->domain, .domain_len = strlen(dom->domain), .desc = &dr,
                        .ndesc = 1, .hits_addend = 1, .now = (rl_ns)i * RL_NS_PER_SEC};
        rld_ystatus st;
        rld_ycode overall;
        rl_err err = {{0}};
        int rc = rld_yrls_decide(y, lim, &req, &st, &overall, &err);
        FZ_CHECK(rc == RL_OK || err.msg[0], "error %d without a message", rc);
        if (rc != RL_OK)
            continue;
        FZ_CHECK(st.code == RLD_YCODE_OK || st.code == RLD_YCODE_OVER_LIMIT, "code %d", st.code);
        FZ_CHECK(!st.has_limit || st.remaining <= st.requests_per_unit, "remaining %u of %u",
                 st.remaining, st.requests_per_unit);
        FZ_CHECK(!st.has_reset || st.reset <= rld_unit_seconds(st.unit) * RL_NS_PER_SEC ||
                     d->limit.algorithm,
                 "reset %lld", (long long)st.reset);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rl_registry *reg = rl_registry_new();
    rld_yconf *c = rld_yconf_new();
    rl_err err = {{0}};
    FZ_CHECK(reg && c, "out of memory");
    if (rld_yaml_parse(c, "fuzz.yaml", (const char *)data, size, &err) != RL_OK) {
        FZ_CHECK(strncmp(err.msg, "fuzz.yaml: ", 11) == 0, "a message without the file: %s",
                 err.msg);
        FZ_CHECK(c->ndomains == 0, "a refusal that kept a domain");
        rld_yconf_free(c);
    } else {
        rld_yrls *y;
        rl_config *cfg;
        rl_limiter *lim;
        FZ_CHECK(c->ndomains == 1, "%zu domains from one file", c->ndomains);
        if (rld_yrls_new(c, reg, &y, &cfg, &err) == RL_OK) {
            FZ_CHECK(rl_limiter_new(cfg, NULL, &lim, &err) == RL_OK, "%s", err.msg);
            ask_all(y, lim, &rld_yrls_conf(y)->domains[0]);
            rl_limiter_free(lim);
            rld_yrls_free(y);
        } else {
            FZ_CHECK(strncmp(err.msg, "fuzz.yaml: ", 11) == 0, "a message without the file: %s",
                     err.msg);
        }
    }
    rl_registry_free(reg);
    return 0;
}
