/*
 * lua.c - see lua.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ratelimit.h"
#include "lua.h"
#include "scripts.h"

/* The scripts made of the lib and a body; the others stand alone. */
static const struct {
    const char *name, *body;
} with_lib[RLD_NSCRIPTS] = {
    [RLD_SCRIPT_DECIDE] = {"decide", rld_lua_body_decide},
    [RLD_SCRIPT_SETTLE] = {"settle", rld_lua_body_settle},
    [RLD_SCRIPT_RELEASE] = {"release", rld_lua_body_release},
    [RLD_SCRIPT_DUE] = {"due", rld_lua_body_due},
    [RLD_SCRIPT_UNDO] = {"undo", rld_lua_body_undo},
};
static const char *const alone[RLD_NSCRIPTS] = {
    [RLD_SCRIPT_HEARTBEAT] = rld_lua_heartbeat,
    [RLD_SCRIPT_QUOTA] = rld_lua_quota,
    [RLD_SCRIPT_DUTY] = rld_lua_duty,
};

/* A growing string; oom set once an allocation failed. */
typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s)
{
    size_t n = strlen(s);
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->n + n + 1 > cap)
            cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) {
            b->oom = 1;
            return;
        }
        b->s = t;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n + 1);
    b->n += n;
}

/* The lib, then the ports in the functions of port_loaders, which the lib runs for a tag it
 * does not know yet: the built-in ones, each behind its tag (so that a call makes only the
 * closures of the types it uses: a script's top level runs on every EVALSHA), then ports. */
static void put_lib(sbuf *b, const char *ports)
{
    put(b, rld_lua_lib);
    put(b, "\nport_loaders[1] = function(tag)\n");
    for (size_t i = 0; rld_lua_ports[i].tag; i++) {
        put(b, i ? "elseif tag == '" : "if tag == '");
        put(b, rld_lua_ports[i].tag);
        put(b, "' then\n");
        put(b, rld_lua_ports[i].text);
    }
    put(b, rld_lua_ports[0].tag ? "end\nend\n" : "end\n");
    if (ports && ports[0]) {
        put(b, "port_loaders[2] = function()\n");
        put(b, ports);
        put(b, "\nend\n");
    }
}

char *rld_lua_with_lib(const char *ports, const char *body)
{
    sbuf b = {0};
    put_lib(&b, ports);
    put(&b, body);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* The library after its two header lines: the scripts' functions, the lib made on first call. */
static void put_library_body(sbuf *b, const char *ports)
{
    put(b, "local ");
    for (int s = 0, first = 1; s < RLD_NSCRIPTS; s++)
        if (with_lib[s].name) {
            put(b, first ? "" : ", ");
            put(b, with_lib[s].name);
            first = 0;
        }
    put(b, "\nlocal function init()\n");
    put_lib(b, ports);
    for (int s = 0; s < RLD_NSCRIPTS; s++)
        if (with_lib[s].name) {
            put(b, with_lib[s].name);
            put(b, " = function(KEYS, ARGV)\n");
            if (s == RLD_SCRIPT_DECIDE) {
                put(b, rld_lua_fast_decide);
                put(b, "\n");
            }
            put(b, with_lib[s].body);
            put(b, "\nend\n");
        }
    put(b, "end\n");
    for (int s = 0; s < RLD_NSCRIPTS; s++)
        if (with_lib[s].name) {
            char line[256];
            snprintf(line, sizeof line,
                     "redis.register_function('rld_' .. V .. '_%s', function(KEYS, ARGV)\n"
                     "    if not %s then init() end\n    return %s(KEYS, ARGV)\nend)\n",
                     with_lib[s].name, with_lib[s].name, with_lib[s].name);
            put(b, line);
        }
}

int rld_lua_build(const char *ports, rld_lua *out)
{
    memset(out, 0, sizeof *out);
    int oom = 0;
    for (int s = 0; s < RLD_NSCRIPTS; s++) {
        sbuf b = {0};
        if (s == RLD_SCRIPT_DECIDE) {
            /* the fast path at the top level, and the lib made only when it declines (a
             * script's top level runs on every call) */
            char *general = rld_lua_with_lib(ports, with_lib[s].body);
            put(&b, rld_lua_fast_decide);
            put(&b, "\nreturn (function()\n");
            put(&b, general ? general : "");
            put(&b, "\nend)()\n");
            b.oom |= !general;
            free(general);
        } else if (with_lib[s].name) {
            free(b.s);
            b.s = rld_lua_with_lib(ports, with_lib[s].body);
            b.oom = !b.s;
        } else {
            put(&b, alone[s]);
        }
        out->script[s] = b.s;
        oom |= b.oom;
    }
    sbuf body = {0}, lib = {0};
    put_library_body(&body, ports);
    if (!body.oom) {
        /* the version: FNV-1a of the text */
        uint64_t h = 0xcbf29ce484222325ull;
        for (const char *c = body.s; *c; c++)
            h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
        char head[128];
        snprintf(head, sizeof head, "#!lua name=ratelimitd_%016llx\nlocal V = '%016llx'\n",
                 (unsigned long long)h, (unsigned long long)h);
        put(&lib, head);
        put(&lib, body.s);
        for (int s = 0; s < RLD_NSCRIPTS; s++)
            if (with_lib[s].name)
                snprintf(out->fname[s], sizeof out->fname[s], "rld_%016llx_%s",
                         (unsigned long long)h, with_lib[s].name);
    }
    free(body.s);
    out->library = lib.s;
    if (oom || body.oom || lib.oom) {
        rld_lua_free(out);
        return RL_ENOMEM;
    }
    return RL_OK;
}

void rld_lua_free(rld_lua *l)
{
    for (int s = 0; s < RLD_NSCRIPTS; s++)
        free(l->script[s]);
    free(l->library);
    memset(l, 0, sizeof *l);
}
