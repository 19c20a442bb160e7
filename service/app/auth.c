/*
 * auth.c - see auth.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "file.h"
#include "auth.h"

#define TOKEN_MAX 1024

typedef struct token_source {
    const char *name;     /* "admin_token" */
    const char *env;      /* "RATELIMITD_ADMIN_TOKEN" */
    size_t value, file;   /* offsets of the char * fields in rld_settings */
} token_source;

static const token_source sources[] = {
    {"admin_token", "RATELIMITD_ADMIN_TOKEN", offsetof(rld_settings, admin_token),
     offsetof(rld_settings, admin_token_file)},
    {"acquire_token", "RATELIMITD_ACQUIRE_TOKEN", offsetof(rld_settings, acquire_token),
     offsetof(rld_settings, acquire_token_file)},
    {"metrics_token", "RATELIMITD_METRICS_TOKEN", offsetof(rld_settings, metrics_token),
     offsetof(rld_settings, metrics_token_file)},
};

static const char *token_problem(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > TOKEN_MAX)
        return "must be 1 to 1024 characters";
    for (size_t i = 0; i < n; i++)
        if (t[i] <= ' ' || t[i] > '~')
            return "must be printable ASCII without spaces";
    return NULL;
}

/* The token of one source into *value (malloc'd), or NULL when it has none. */
static int resolve_one(const token_source *s, char **value, const char *file, rl_err *err)
{
    char from[300];
    snprintf(from, sizeof from, "%s", s->name);
    if (*value && file)
        return rl_errf(err, RL_EINVAL, "%s: give %s or %s_file, not both", s->name, s->name,
                       s->name);
    if (file) {
        size_t len;
        errno = 0;
        char *text = rld_read_file(file, &len);
        if (!text)
            return rl_errf(err, RL_EINVAL, "%s_file: %.200s: %s", s->name, file,
                           errno ? strerror(errno) : "cannot be read");
        if (len && text[len - 1] == '\n')
            text[--len] = '\0';
        if (len && text[len - 1] == '\r')
            text[--len] = '\0';
        if (strlen(text) != len) {
            free(text);
            return rl_errf(err, RL_EINVAL, "%s_file: %.200s: holds a NUL byte", s->name, file);
        }
        *value = text;
        snprintf(from, sizeof from, "%s_file: %.200s", s->name, file);
    } else if (!*value && getenv(s->env) && *getenv(s->env)) {
        if (!(*value = strdup(getenv(s->env))))
            return rl_errf(err, RL_ENOMEM, "out of memory");
        snprintf(from, sizeof from, "%s", s->env);
    }
    const char *why = *value ? token_problem(*value) : NULL;
    if (why)
        return rl_errf(err, RL_EINVAL, "%s: %s", from, why);
    return RL_OK;
}

int rld_auth_resolve(rld_settings *set, rl_err *err)
{
    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) {
        const token_source *s = &sources[i];
        char **value = (char **)((char *)set + s->value);
        const char *file = *(char **)((char *)set + s->file);
        int rc = resolve_one(s, value, file, err);
        if (rc != RL_OK)
            return rc;
    }
    return RL_OK;
}

int rld_auth_matches(const char *want, const char *authorization)
{
    if (!want)
        return 1;
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return 0;
    const char *got = authorization + 7;
    size_t gl = strlen(got), wl = strlen(want);
    /* every byte of what was sent is compared, against the token or (past its end) against
     * its first byte, so the time says nothing of where a difference is */
    unsigned diff = (unsigned)(gl ^ wl);
    for (size_t i = 0; i < gl; i++)
        diff |= (unsigned char)got[i] ^ (unsigned char)want[i < wl ? i : 0];
    return diff == 0;
}

int rld_auth_loopback(const char *address)
{
    unsigned char a[16];
    static const unsigned char v6_loopback[16] = {[15] = 1};
    static const unsigned char v4_mapped[12] = {[10] = 0xff, [11] = 0xff};
    if (inet_pton(AF_INET, address, a) == 1)
        return a[0] == 127;
    if (inet_pton(AF_INET6, address, a) != 1)
        return 0;
    return memcmp(a, v6_loopback, 16) == 0 || (memcmp(a, v4_mapped, 12) == 0 && a[12] == 127);
}

int rld_auth_admin_closed(const rld_settings *set)
{
    return !set->admin_token && !set->admin_open && !rld_auth_loopback(set->address);
}

int rld_auth_admin_exposed(const rld_settings *set)
{
    return !set->admin_token && set->admin_open && !rld_auth_loopback(set->address);
}
