/*
 * fuzz_acquire_diff.c - the two parsers of the POST /acquire body against each other: whenever
 * the fast one parses a body, jansson must accept it too and find the same values (the same
 * descriptors in the same order, cost, priority, flags, now). The value checks after parsing
 * are shared, so equal values mean equal answers.
 */
#include <string.h>

#include "app/acquire_req.h"
#include "fuzz.h"

static int same_str(const char *a, size_t al, const char *b, size_t bl)
{
    return al == bl && memcmp(a, b, al) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *body = fz_copy(data, size);
    rld_acquire_req f, j;
    rl_err err = {{0}};
    int fast = rld__acquire_parse_fast(body, size, &f);
    int slow = rld__acquire_parse_json(body, size, &j, &err);
    FZ_CHECK(slow == 0 || err.msg[0], "jansson refused without a message");
    if (fast) {
        FZ_CHECK(slow == 0, "the fast parser accepted what jansson refuses: %s", err.msg);
        FZ_CHECK(f.root == NULL, "the fast parser made a document");
        FZ_CHECK(f.has_keys == j.has_keys && f.ndesc == j.ndesc, "keys %d/%d, %zu/%zu",
                 f.has_keys, j.has_keys, f.ndesc, j.ndesc);
        for (size_t i = 0; i < f.ndesc; i++)
            FZ_CHECK(same_str(f.desc[i].name, f.desc[i].name_len, j.desc[i].name,
                              j.desc[i].name_len) &&
                         same_str(f.desc[i].value, f.desc[i].value_len, j.desc[i].value,
                                  j.desc[i].value_len),
                     "descriptor %zu differs", i);
        FZ_CHECK(f.cost == j.cost, "cost %lld / %lld", (long long)f.cost, (long long)j.cost);
        FZ_CHECK(f.priority == j.priority, "priority %lld / %lld", (long long)f.priority,
                 (long long)j.priority);
        FZ_CHECK(f.reserve == j.reserve && f.dry_run == j.dry_run, "reserve %d/%d dry_run %d/%d",
                 f.reserve, j.reserve, f.dry_run, j.dry_run);
        FZ_CHECK(f.has_now == j.has_now && (!f.has_now || f.now == j.now),
                 "now %d %lld / %d %lld", f.has_now, (long long)f.now, j.has_now,
                 (long long)j.now);
    }
    if (slow == 0)
        rld_acquire_req_clear(&j);
    free(body);
    return 0;
}
