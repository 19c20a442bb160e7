/*
 * acquire_req.c - see acquire_req.h.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acquire_req.h"
#include "buf.h"
#include "values.h"

#define KNOWN "keys, cost, usage, priority, reserve, dry_run, now"

enum { F_KEYS = 1, F_COST = 2, F_PRIORITY = 4, F_RESERVE = 8, F_DRY_RUN = 16, F_NOW = 32, F_USAGE = 64 };

#define fail(err, ...) rl_errf(err, -1, __VA_ARGS__)

static void req_zero(rld_acquire_req *req)
{
    req->ndesc = 0;
    req->has_keys = 0;
    req->cost = RL_FP_ONE;
    req->priority = 0;
    req->reserve = 0;
    req->dry_run = 0;
    req->has_now = 0;
    req->now = 0;
    req->usage = NULL;
    req->root = NULL;
}

/* Which member a name is (0 for none). */
static int field_of(const char *s, size_t n)
{
    switch (n) {
    case 3:
        return memcmp(s, "now", 3) == 0 ? F_NOW : 0;
    case 4:
        return memcmp(s, "keys", 4) == 0 ? F_KEYS : memcmp(s, "cost", 4) == 0 ? F_COST : 0;
    case 5:
        return memcmp(s, "usage", 5) == 0 ? F_USAGE : 0;
    case 7:
        return memcmp(s, "reserve", 7) == 0   ? F_RESERVE
               : memcmp(s, "dry_run", 7) == 0 ? F_DRY_RUN
                                              : 0;
    case 8:
        return memcmp(s, "priority", 8) == 0 ? F_PRIORITY : 0;
    default:
        return 0;
    }
}

/* ---- the fast parser ------------------------------------------------------------------ */

typedef struct cur {
    const char *p, *end;
} cur;

static void skip_ws(cur *c)
{
    if (c->p < c->end && (unsigned char)*c->p > ' ')
        return; /* most tokens follow the last one at once */
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

static int eat(cur *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A string at c->p, borrowed from the body. Steps aside on escapes, control characters and
 * bytes outside ASCII, which jansson decodes and checks (UTF-8, NUL). */
static int fast_str(cur *c, const char **s, size_t *n)
{
    skip_ws(c);
    if (c->p >= c->end || *c->p != '"')
        return 0;
    const char *in = ++c->p;
    *s = in;
    for (; in < c->end; in++) {
        unsigned char ch = (unsigned char)*in;
        if (rld_text_class[ch] == '.' || ch == 0x7f) /* what a JSON string holds as it is */
            continue;
        if (ch != '"')
            return 0; /* an escape, a control character, or a byte outside ASCII */
        *n = (size_t)(in - *s);
        c->p = in + 1;
        return 1;
    }
    return 0;
}

static int is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

/* A JSON number. *is_int tells the integer form (no fraction, no exponent), which jansson
 * reads with strtoll and the rest with strtod; out-of-range values step aside. */
static int fast_num(cur *c, double *v, int64_t *iv, int *is_int)
{
    skip_ws(c);
    const char *s = c->p, *q = s;
    int integer = 1;
    if (q < c->end && *q == '-')
        q++;
    if (q >= c->end)
        return 0;
    if (*q == '0')
        q++;
    else if (*q >= '1' && *q <= '9')
        while (q < c->end && is_digit(*q))
            q++;
    else
        return 0;
    if (q < c->end && *q == '.') {
        integer = 0;
        if (++q >= c->end || !is_digit(*q))
            return 0;
        while (q < c->end && is_digit(*q))
            q++;
    }
    if (q < c->end && (*q == 'e' || *q == 'E')) {
        integer = 0;
        q++;
        if (q < c->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= c->end || !is_digit(*q))
            return 0;
        while (q < c->end && is_digit(*q))
            q++;
    }
    size_t n = (size_t)(q - s);
    int neg = *s == '-';
    if (integer && n - (size_t)neg <= 18) {
        int64_t x = 0;
        for (const char *d = s + neg; d < q; d++)
            x = x * 10 + (*d - '0');
        *iv = neg ? -x : x;
        *v = (double)*iv;
    } else {
        char tmp[64], *end;
        if (n >= sizeof tmp)
            return 0;
        memcpy(tmp, s, n);
        tmp[n] = '\0';
        errno = 0;
        if (integer) {
            long long x = strtoll(tmp, &end, 10);
            if (errno == ERANGE)
                return 0;
            *iv = x;
            *v = (double)x;
        } else {
            *v = strtod(tmp, &end);
            if (errno == ERANGE)
                return 0;
        }
    }
    *is_int = integer;
    c->p = q;
    return 1;
}

static int fast_bool(cur *c, int *out)
{
    skip_ws(c);
    if (c->end - c->p >= 4 && memcmp(c->p, "true", 4) == 0) {
        *out = 1;
        c->p += 4;
        return 1;
    }
    if (c->end - c->p >= 5 && memcmp(c->p, "false", 5) == 0) {
        *out = 0;
        c->p += 5;
        return 1;
    }
    return 0;
}

static int fast_keys(cur *c, rld_acquire_req *req)
{
    if (!eat(c, '{'))
        return 0;
    req->has_keys = 1;
    if (eat(c, '}'))
        return 1;
    do {
        const char *name, *val;
        size_t nl, vl;
        if (req->ndesc == RLD_MAX_KEYS || !fast_str(c, &name, &nl) || !eat(c, ':') ||
            !fast_str(c, &val, &vl))
            return 0;
        for (size_t i = 0; i < req->ndesc; i++)
            if (req->desc[i].name_len == nl && memcmp(req->desc[i].name, name, nl) == 0)
                return 0;
        rl_descriptor *d = &req->desc[req->ndesc++];
        d->name = name;
        d->name_len = nl;
        d->value = val;
        d->value_len = vl;
    } while (eat(c, ','));
    return eat(c, '}');
}

int rld__acquire_parse_fast(const char *body, size_t len, rld_acquire_req *req)
{
    cur c = {body, body + len};
    unsigned seen = 0;
    req_zero(req);
    if (!eat(&c, '{'))
        return 0;
    if (!eat(&c, '}')) {
        do {
            const char *name;
            size_t nl;
            int64_t iv;
            int is_int;
            double v;
            if (!fast_str(&c, &name, &nl) || !eat(&c, ':'))
                return 0;
            int f = field_of(name, nl);
            if (!f || (seen & (unsigned)f))
                return 0;
            seen |= (unsigned)f;
            int ok = 0;
            switch (f) {
            case F_KEYS:
                ok = fast_keys(&c, req);
                break;
            case F_COST:
                ok = fast_num(&c, &v, &iv, &is_int) &&
                     rld_value_cost("cost", v, &req->cost, NULL) == 0;
                break;
            case F_PRIORITY: {
                double ignored;
                ok = fast_num(&c, &ignored, &req->priority, &is_int) && is_int;
                break;
            }
            case F_RESERVE:
                ok = fast_bool(&c, &req->reserve);
                break;
            case F_DRY_RUN:
                ok = fast_bool(&c, &req->dry_run);
                break;
            case F_NOW:
                ok = fast_num(&c, &v, &iv, &is_int) &&
                     rld_value_seconds("now", v, &req->now, NULL) == 0;
                req->has_now = 1;
                break;
            }
            if (!ok)
                return 0;
        } while (eat(&c, ','));
        if (!eat(&c, '}'))
            return 0;
    }
    skip_ws(&c);
    return c.p == c.end;
}

/* ---- the jansson parser --------------------------------------------------------------- */

/* "keys": an object of descriptor names to their keys. */
static int json_keys(json_t *v, rld_acquire_req *req, rl_err *err)
{
    const char *dk;
    json_t *dv;
    if (!json_is_object(v))
        return fail(err, "keys: must be an object of descriptor names to keys");
    if (json_object_size(v) > RLD_MAX_KEYS)
        return fail(err, "keys: at most %d descriptors", RLD_MAX_KEYS);
    req->has_keys = 1;
    json_object_foreach(v, dk, dv)
    {
        if (!json_is_string(dv))
            return fail(err, "keys.%.64s: must be a string", dk);
        rl_descriptor *d = &req->desc[req->ndesc++];
        d->name = dk;
        d->name_len = strlen(dk);
        d->value = json_string_value(dv);
        d->value_len = json_string_length(dv);
    }
    return 0;
}

/* One member k of the body's object. */
static int json_field(const char *k, json_t *v, rld_acquire_req *req, rl_err *err)
{
    double num = json_is_number(v) ? json_number_value(v) : NAN;
    int f = field_of(k, strlen(k));
    switch (f) {
    case F_KEYS:
        return json_keys(v, req, err);
    case F_COST:
        return rld_value_cost("cost", num, &req->cost, err);
    case F_PRIORITY:
        if (!json_is_integer(v))
            return fail(err, "priority: must be a whole number");
        req->priority = (int64_t)json_integer_value(v);
        return 0;
    case F_RESERVE:
    case F_DRY_RUN:
        if (!json_is_boolean(v))
            return fail(err, "%s: must be true or false", k);
        *(f == F_RESERVE ? &req->reserve : &req->dry_run) = json_is_true(v);
        return 0;
    case F_NOW:
        req->has_now = 1;
        return rld_value_seconds("now", num, &req->now, err);
    case F_USAGE:
        if (!json_is_object(v))
            return fail(err, "usage: must be an object of dimension names to amounts");
        req->usage = v; /* its names are the configuration's: read where it is known */
        return 0;
    default:
        return fail(err, "%.64s: unknown field (known: " KNOWN ")", k);
    }
}

int rld__acquire_parse_json(const char *body, size_t len, rld_acquire_req *req, rl_err *err)
{
    json_error_t jerr;
    const char *k;
    json_t *v;
    req_zero(req);
    if (len == 0)
        return fail(err, "body: required, a JSON object");
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root)
        return fail(err, "body: malformed JSON at line %d, column %d: %s", jerr.line, jerr.column,
                    jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return fail(err, "body: must be a JSON object");
    }
    req->root = root;
    json_object_foreach(root, k, v)
    {
        if (json_field(k, v, req, err) != 0) {
            json_decref(root);
            req->root = NULL;
            return -1;
        }
    }
    return 0;
}

/* ---- both ------------------------------------------------------------------------------ */

int rld_acquire_parse(char *body, size_t len, rld_acquire_req *req, rl_err *err)
{
    body[len] = '\0';
    int fast = rld__acquire_parse_fast(body, len, req);
    if (!fast && rld__acquire_parse_json(body, len, req, err) != 0)
        return -1;
    if (!req->has_keys) {
        fail(err, "keys: required, an object of descriptor names to keys");
        rld_acquire_req_clear(req);
        return -1;
    }
    return 0;
}

void rld_acquire_req_clear(rld_acquire_req *req)
{
    json_decref(req->root);
    req->root = NULL;
}
