/*
 * fuzz_http1.c - the plain HTTP server's request parser over a stream of bytes, read the way
 * the server reads it: empty lines skipped, the head's end looked for as the bytes arrive one
 * at a time (it must be found where a look at the whole finds it), the head parsed in place
 * (0 or a status the server answers, every field NUL-terminated inside the head, lengths that
 * match), then a chunked body decoded at once and byte by byte (the same data and the same
 * end either way, never more data than bytes consumed).
 */
#include <string.h>

#include "fuzz.h"
#include "http/http1_parse.h"

static int inside(const char *p, const char *buf, size_t len)
{
    return p >= buf && p < buf + len;
}

static void check_head(char *head, size_t len)
{
    rld_h1_req q;
    int st = rld_h1_parse_head(head, len, &q);
    FZ_CHECK(st == 0 || st == 400 || st == 414 || st == 431 || st == 501 || st == 505,
             "status %d", st);
    if (st) {
        FZ_CHECK(q.error && *q.error, "status %d without a message", st);
        return;
    }
    FZ_CHECK(inside(q.method, head, len) && *q.method, "method");
    FZ_CHECK(inside(q.path, head, len), "path");
    FZ_CHECK(q.minor == 0 || q.minor == 1, "minor %d", q.minor);
    FZ_CHECK(q.nh <= RLD_H1_MAX_HEADERS && q.nargs <= RLD_H1_MAX_ARGS, "counts");
    for (unsigned i = 0; i < q.nh; i++) {
        FZ_CHECK(inside(q.h[i].name, head, len) && strlen(q.h[i].name) == q.h[i].nl &&
                     q.h[i].nl > 0,
                 "header %u name", i);
        FZ_CHECK(inside(q.h[i].value, head, len) && strlen(q.h[i].value) == q.h[i].vl,
                 "header %u value", i);
    }
    for (unsigned i = 0; i < q.nargs; i++)
        FZ_CHECK(strlen(q.args[i].name) == q.args[i].nl &&
                     strlen(q.args[i].value) == q.args[i].vl,
                 "argument %u", i);
    FZ_CHECK(q.content_length >= -1 && !(q.chunked && q.content_length >= 0), "framing");
}

static void check_chunked(const char *data, size_t len)
{
    char *all = fz_copy((const uint8_t *)data, len), *one = fz_copy((const uint8_t *)data, len);
    rld_h1_chunked a = {0}, b = {0};
    size_t used, out, gl = 0;
    int ra = rld_h1_unchunk(&a, all, len, &used, &out), rb = 0;
    FZ_CHECK(ra < 0 || (used <= len && out <= used), "used %zu, out %zu of %zu", used, out, len);
    size_t i = 0;
    for (; i < len && rb == 0; i++) {
        char c = data[i];
        size_t u, o;
        rb = rld_h1_unchunk(&b, &c, 1, &u, &o);
        if (rb >= 0) {
            FZ_CHECK(u == 1 && o <= 1, "one byte: used %zu, out %zu", u, o);
            if (o)
                one[gl++] = c;
        }
    }
    FZ_CHECK(ra == rb, "at once %d, byte by byte %d", ra, rb);
    if (ra == 1)
        FZ_CHECK(used == i && out == gl && memcmp(all, one, out) == 0, "different bodies");
    free(all);
    free(one);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = fz_copy(data, size);
    size_t off = rld_h1_skip_empty(buf, size), scan = 0, whole_scan = 0, end = 0;
    size_t whole = rld_h1_head_end(buf + off, size - off, &whole_scan);
    for (size_t n = 1; n <= size - off && !end; n++)
        end = rld_h1_head_end(buf + off, n, &scan);
    FZ_CHECK(end == whole, "found at %zu byte by byte, %zu at once", end, whole);
    if (!end) {
        const char *why = NULL;
        int st = rld_h1_head_too_long(buf + off, size - off, &why);
        FZ_CHECK(st == 0 || ((st == 414 || st == 431) && why), "incomplete head: %d", st);
    } else {
        FZ_CHECK(buf[off + end - 1] == '\n', "a head ends with LF");
        check_head(buf + off, end);
        check_chunked((const char *)data + off + end, size - off - end);
    }
    free(buf);
    return 0;
}
