/*
 * keytable.c - open-addressing segments of per-key records (see keytable.h).
 *
 * Robin Hood probing: a record never sits further from its home slot than the record it
 * displaced, so a lookup stops as soon as it meets a record closer to home than itself, and
 * removal shifts the following records back by one. Segments grow by a fifth when 90% full
 * and shrink when below 3/8 (and not grown since the sweep's last pass), so a growing segment
 * stays between 75% and 90% full: 53 to 64 bytes per key with 48-byte records.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "keytable.h"

#define MIN_CAP 8u
#define HUGE_BYTES (2u << 20) /* arrays at least this large ask for huge pages */

void rl__spin_wait(rl__spin *l)
{
    for (unsigned spins = 0;;) {
        while (__atomic_load_n(&l->v, __ATOMIC_RELAXED)) {
            if (++spins % 128 == 0)
                sched_yield(); /* the holder may have been preempted */
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
        if (!__atomic_exchange_n(&l->v, 1, __ATOMIC_ACQUIRE))
            return;
    }
}

/* A zeroed array of *cap records. A large one is mapped on a 2 MiB boundary so that the kernel
 * can back every whole 2 MiB of it with a huge page (one TLB entry instead of 512); the tail
 * uses ordinary pages, so no memory is spent on rounding. */
static rl__rec *array_new(uint32_t *cap)
{
    size_t bytes = (size_t)*cap * sizeof(rl__rec);
    if (bytes < HUGE_BYTES)
        return calloc(*cap, sizeof(rl__rec));
    char *p = mmap(NULL, bytes + HUGE_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    size_t head = (HUGE_BYTES - (uintptr_t)p % HUGE_BYTES) % HUGE_BYTES;
    size_t page = 4096, end = (bytes + page - 1) / page * page;
    if (head)
        munmap(p, head);
    munmap(p + head + end, HUGE_BYTES - head + bytes - end);
    p += head;
#ifdef MADV_HUGEPAGE
    madvise(p, end, MADV_HUGEPAGE);
#endif
    return (rl__rec *)(void *)p;
}

static void array_free(rl__rec *r, uint32_t cap)
{
    size_t bytes = (size_t)cap * sizeof(rl__rec), page = 4096;
    if (!r)
        return;
    if (bytes < HUGE_BYTES)
        free(r);
    else
        munmap(r, (bytes + page - 1) / page * page);
}

rl__rec *rl__seg_lookup_long(const rl__seg *s, uint32_t h, unsigned slot, const char *key,
                             size_t klen)
{
    return rl__seg_lookup_in(s, h, slot, key, klen, 0);
}

/* Places e (moved in, not copied) into r of capacity cap; returns where e itself landed.
 * *far grows to the distance of every record it puts down. */
static uint32_t place(rl__rec *r, uint32_t cap, rl__rec e, uint32_t *far)
{
    uint32_t i = rl__home(e.hash, cap), landed = RL__NONE;
    for (uint32_t dist = 0;; dist++) {
        if (!r[i].type) {
            r[i] = e;
            *far = dist > *far ? dist : *far;
            return landed == RL__NONE ? i : landed;
        }
        uint32_t d = rl__distance(r[i].hash, i, cap);
        if (d < dist) {
            rl__rec t = r[i];
            r[i] = e;
            e = t;
            *far = dist > *far ? dist : *far;
            dist = d;
            if (landed == RL__NONE)
                landed = i;
        }
        i = i + 1 == cap ? 0 : i + 1;
    }
}

/* Publishes a new array: rl__seg_prefetch reads r and cap without the lock. */
static void set_array(rl__seg *s, rl__rec *r, uint32_t cap)
{
    __atomic_store_n(&s->r, r, __ATOMIC_RELAXED);
    __atomic_store_n(&s->cap, cap, __ATOMIC_RELAXED);
    s->sweep = 0;
    s->far = 0;
}

static int resize(rl__seg *s, uint32_t cap)
{
    rl__rec *r = array_new(&cap);
    uint32_t far = 0;
    if (!r)
        return -1;
    for (uint32_t i = 0; i < s->cap; i++)
        if (s->r[i].type)
            place(r, cap, s->r[i], &far);
    array_free(s->r, s->cap);
    set_array(s, r, cap);
    s->far = far;
    return 0;
}

uint32_t rl__seg_insert(rl__seg *s, uint32_t h, unsigned slot, const char *key, size_t klen,
                        uint8_t type, size_t ext_size)
{
    if ((uint64_t)(s->count + 1) * 10 > (uint64_t)s->cap * 9) {
        uint32_t cap = s->cap + s->cap / 5;
        if (resize(s, cap < MIN_CAP ? MIN_CAP : cap) != 0)
            return RL__NONE;
        s->grew = 1;
    }
    rl__rec e;
    memset(&e, 0, sizeof e);
    e.hash = h;
    e.klen = (uint16_t)klen;
    e.type = type;
    e.slot = (uint8_t)slot;
    if (klen > RL__KEY_INLINE) {
        if (!(e.key.out = rl__strndup(key, klen)))
            return RL__NONE;
    } else {
        memcpy(e.key.in, key, klen);
    }
    if (ext_size && !(e.st.ext = calloc(1, ext_size))) {
        if (klen > RL__KEY_INLINE)
            free(e.key.out);
        return RL__NONE;
    }
    uint32_t i = place(s->r, s->cap, e, &s->far);
    __atomic_store_n(&s->count, s->count + 1, __ATOMIC_RELAXED);
    return i;
}

void rl__seg_remove(rl__seg *s, uint32_t i)
{
    uint32_t cap = s->cap;
    if (s->r[i].klen > RL__KEY_INLINE)
        free(s->r[i].key.out);
    for (;;) {
        uint32_t j = i + 1 == cap ? 0 : i + 1;
        if (!s->r[j].type || rl__distance(s->r[j].hash, j, cap) == 0)
            break;
        s->r[i] = s->r[j];
        i = j;
    }
    memset(&s->r[i], 0, sizeof s->r[i]);
    __atomic_store_n(&s->count, s->count - 1, __ATOMIC_RELAXED);
}

int rl__seg_shrink(rl__seg *s)
{
    int grew = s->grew;
    s->grew = 0;
    if (s->cap <= 64 || (uint64_t)s->count * 8 >= (uint64_t)s->cap * 3 || (grew && s->count))
        return 0;
    uint32_t cap = s->count + s->count / 3 + 1;
    if (s->count == 0) {
        array_free(s->r, s->cap);
        set_array(s, NULL, 0);
        return 1;
    }
    return resize(s, cap < MIN_CAP ? MIN_CAP : cap) == 0;
}

void rl__seg_free(rl__seg *s)
{
    for (uint32_t i = 0; i < s->cap; i++)
        if (s->r[i].type && s->r[i].klen > RL__KEY_INLINE)
            free(s->r[i].key.out);
    array_free(s->r, s->cap);
    set_array(s, NULL, 0);
    s->count = 0;
}
