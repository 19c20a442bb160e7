/*
 * fuzz.h - what every fuzz target shares.
 *
 * A target is one LLVMFuzzerTestOneInput per parser. Built with clang's -fsanitize=fuzzer it
 * runs under libFuzzer (make fuzz); built with replay.c it replays its corpus folder once (make
 * test), so an input that once crashed fails the suite. Invariants are checked inside the
 * target with FZ_CHECK, which aborts: a sanitizer's report and a broken invariant both end the
 * run with the input that caused them.
 */
#ifndef RLD_FUZZ_H
#define RLD_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ratelimit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_CHECK(cond, ...)                                                                  \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: invariant broken: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

/* A malloc'd NUL-terminated copy of the input with one spare byte (parsers that write
 * body[len]); aborts when out of memory. */
char *fz_copy(const uint8_t *data, size_t size);

/* A limiter over a configuration that must load (aborts otherwise), on its own registry. */
rl_limiter *fz_limiter(const char *json);
/* Frees a limiter made by fz_limiter and its registry. */
void fz_free(rl_limiter *lim);

/* Checks what every answer of rl_acquire must satisfy: an error has a message; a decision's
 * waits are never negative, an allowed one waits 0 and has no blocking rule, a denied one
 * names a blocking rule; no rule's balance is above its limit. */
void fz_check_decision(int rc, const rl_decision *d, const rl_err *err);

/* A path of its own under /tmp for this process's scratch file (name: "quota", "snap"). */
const char *fz_scratch(const char *name);
/* Writes the input to path (aborts when it cannot). */
void fz_write(const char *path, const uint8_t *data, size_t size);

#endif
