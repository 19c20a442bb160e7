/*
 * quotas.c - see quotas.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "quotas.h"
#include "rules_json.h"


const char *rld_user_problem(const char *user)
{
    size_t n = strlen(user);
    if (n == 0)
        return "must not be empty";
    if (n > RL_KEY_MAX)
        return "must be at most 256 bytes";
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)user[i] < 0x20 || user[i] == 0x7f)
            return "must not hold control characters";
    json_t *s = json_string(user); /* NULL for text that is not UTF-8 */
    json_decref(s);
    return s ? NULL : "must be UTF-8 text";
}

static char *dir_of(const char *path)
{
    char *copy = strdup(path), *d;
    if (!copy)
        return NULL;
    d = strdup(dirname(copy));
    free(copy);
    return d;
}

/* Writes the overrides to the file atomically. */
static int save(rld_quotas *q, rl_err *err)
{
    if (!q->path)
        return RL_OK;
    char *dir = dir_of(q->path), tmp[4200];
    if (!dir)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", q->path);
    int fd = mkstemp(tmp), rc = RL_OK;
    char *text = json_dumps(q->overrides, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (fd < 0) {
        rc = rl_errf(err, RL_EIO, "quota_file: cannot create %s: %s", tmp, strerror(errno));
    } else {
        size_t n = text ? strlen(text) : 0, off = 0;
        while (text && off < n) {
            ssize_t w = write(fd, text + off, n - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                break;
            off += (size_t)w;
        }
        if (!text || off < n || write(fd, "\n", 1) != 1 || fsync(fd) != 0)
            rc = rl_errf(err, RL_EIO, "quota_file: cannot write %s: %s", tmp, strerror(errno));
        if (close(fd) != 0 && rc == RL_OK)
            rc = rl_errf(err, RL_EIO, "quota_file: cannot write %s: %s", tmp, strerror(errno));
        if (rc == RL_OK && rename(tmp, q->path) != 0)
            rc = rl_errf(err, RL_EIO, "quota_file: cannot rename %s to %s: %s", tmp, q->path,
                      strerror(errno));
        if (rc != RL_OK)
            unlink(tmp);
    }
    if (rc == RL_OK) {
        /* the rename itself is durable once the directory is synced */
        int dfd = open(dir, O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    free(text);
    free(dir);
    return rc;
}

/* Checks one override and makes what rl_quota_set needs: a tier name or rules. */
static int parse_override(const json_t *v, rl_limiter *lim, rl_registry *reg, const char **tier,
                          rl_rules **rules, rl_err *err)
{
    const rl_config *cfg = rl_limiter_config(lim);
    *tier = NULL;
    *rules = NULL;
    if (json_is_string(v)) {
        if (rl_config_tier(cfg, json_string_value(v)) < 0)
            return rl_errf(err, RL_EINVAL, "unknown tier \"%.64s\"", json_string_value(v));
        *tier = json_string_value(v);
        return RL_OK;
    }
    const json_t *rs = json_is_object(v) && json_object_size(v) == 1
                           ? json_object_get(v, "rules")
                           : NULL;
    if (!rs)
        return rl_errf(err, RL_EINVAL, "must be a tier name, {\"rules\": [...]} or null");
    int rc = rld_rules_from_json(rs, reg, cfg, rules, err);
    if (rc != RL_OK) {
        char rest[sizeof err->msg];
        snprintf(rest, sizeof rest, "%s", err->msg);
        rl_errf(err, rc, "rules%s", rest);
    }
    return rc;
}

/* Applies every user's override of root (an object) to lim; err names what and the user. */
static int apply(json_t *root, const char *what, rl_limiter *lim, rl_registry *reg, rl_err *err)
{
    const char *user;
    json_t *v;
    int rc = RL_OK;
    json_object_foreach(root, user, v)
    {
        const char *tier, *why = rld_user_problem(user);
        rl_rules *rules;
        if (why) {
            rc = rl_errf(err, RL_EINVAL, "%s: \"%.64s\": %s", what, user, why);
            break;
        }
        if (json_is_null(v)) {
            rl_quota_clear(lim, user);
            continue;
        }
        if ((rc = parse_override(v, lim, reg, &tier, &rules, err)) == RL_OK)
            rc = rl_quota_set(lim, user, tier, rules, err);
        if (rc != RL_OK) {
            char rest[sizeof err->msg];
            snprintf(rest, sizeof rest, "%s", err->msg);
            rl_errf(err, rc, "%s: %.256s: %s", what, user, rest);
            break;
        }
    }
    return rc;
}

/* Applies root (stolen) to lim; on success it becomes q's overrides. */
static int adopt(rld_quotas *q, json_t *root, const char *what, rl_limiter *lim,
                 rl_registry *reg, rl_err *err)
{
    int rc = apply(root, what, lim, reg, err);
    if (rc == RL_OK) {
        json_decref(q->overrides);
        q->overrides = root;
    } else {
        json_decref(root);
    }
    return rc;
}

int rld_quotas_open(rld_quotas *q, const char *path, rl_limiter *lim, rl_registry *reg,
                    rl_err *err)
{
    json_error_t jerr;
    memset(q, 0, sizeof *q);
    pthread_mutex_init(&q->mu, NULL);
    q->overrides = json_object();
    if (!q->overrides)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    if (!path)
        return RL_OK;
    if (!(q->path = strdup(path)))
        return rl_errf(err, RL_ENOMEM, "out of memory");
    if (rld_make_parent_dir(path) != 0)
        return rl_errf(err, RL_EIO, "quota_file %s: cannot create its directory: %s", path,
                    strerror(errno));
    if (access(path, F_OK) != 0 && errno == ENOENT)
        return RL_OK;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return rl_errf(err, RL_EINVAL, "quota_file %s: line %d, column %d: %s", path, jerr.line,
                    jerr.column, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return rl_errf(err, RL_EINVAL, "quota_file %s: must be a JSON object of users", path);
    }
    char what[300];
    snprintf(what, sizeof what, "quota_file %.280s", path);
    return adopt(q, root, what, lim, reg, err);
}

int rld_quotas_carry(rld_quotas *q, const rld_quotas *from, rl_limiter *lim, rl_registry *reg,
                     rl_err *err)
{
    pthread_mutex_lock((pthread_mutex_t *)&from->mu);
    json_t *copy = json_deep_copy(from->overrides);
    pthread_mutex_unlock((pthread_mutex_t *)&from->mu);
    if (!copy)
        return rl_errf(err, RL_ENOMEM, "out of memory");
    return adopt(q, copy, "quotas set at run time", lim, reg, err);
}


void rld_quotas_close(rld_quotas *q)
{
    json_decref(q->overrides);
    free(q->path);
    pthread_mutex_destroy(&q->mu);
    memset(q, 0, sizeof *q);
}

/* Records v (stolen; NULL removes the entry) as user's override and saves the file; puts the
 * old entry back when the file could not be written. */
static int record(rld_quotas *q, const char *user, json_t *v, rl_err *err)
{
    json_t *old = json_object_get(q->overrides, user);
    json_incref(old);
    if (v)
        json_object_set_new(q->overrides, user, v);
    else
        json_object_del(q->overrides, user);
    int rc = save(q, err);
    if (rc != RL_OK) {
        if (old)
            json_object_set(q->overrides, user, old);
        else
            json_object_del(q->overrides, user);
    }
    json_decref(old);
    return rc;
}

static int check_user(rl_limiter *lim, const char *user, rl_err *err)
{
    const char *why = rld_user_problem(user);
    if (why)
        return rl_errf(err, RL_EINVAL, "user: %s", why);
    if (rl_config_tiered_level(rl_limiter_config(lim)) < 0)
        return rl_errf(err, RL_EINVAL, "user: no level is tiered, so there are no quotas");
    return RL_OK;
}

void rld_quota_body_clear(rld_quota_body *b)
{
    json_decref(b->value);
    rl_rules_unref(b->rules);
    memset(b, 0, sizeof *b);
}

int rld_quota_body_parse(rl_limiter *lim, rl_registry *reg, const char *user, const char *body,
                         size_t len, rld_quota_body *out, rl_err *err)
{
    json_error_t jerr;
    const char *k;
    json_t *v, *tier_json = NULL, *rules_json = NULL;
    int rc;

    memset(out, 0, sizeof *out);
    if ((rc = check_user(lim, user, err)) != RL_OK)
        return rc;
    if (len == 0)
        return rl_errf(err, RL_EINVAL, "body: required, {\"tier\": ...} or {\"rules\": [...]}");
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root)
        return rl_errf(err, RL_EINVAL, "body: malformed JSON at line %d, column %d: %s",
                    jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) {
        rc = rl_errf(err, RL_EINVAL, "body: must be a JSON object");
        goto out;
    }
    json_object_foreach(root, k, v)
    {
        if (strcmp(k, "tier") == 0)
            tier_json = v;
        else if (strcmp(k, "rules") == 0)
            rules_json = v;
        else {
            rc = rl_errf(err, RL_EINVAL, "%.64s: unknown field (known: tier, rules)", k);
            goto out;
        }
    }
    if (!tier_json == !rules_json) {
        rc = rl_errf(err, RL_EINVAL, "body: give either \"tier\" or \"rules\"");
        goto out;
    }
    if (tier_json) {
        if (!json_is_string(tier_json)) {
            rc = rl_errf(err, RL_EINVAL, "tier: must be a string");
            goto out;
        }
        const char *tier = json_string_value(tier_json);
        if (rl_config_tier(rl_limiter_config(lim), tier) < 0) {
            rc = rl_errf(err, RL_EINVAL, "tier: unknown tier \"%.64s\"", tier);
            goto out;
        }
        out->value = json_string(tier);
        out->tier = json_string_value(out->value);
    } else {
        if ((rc = rld_rules_from_json(rules_json, reg, rl_limiter_config(lim), &out->rules, err)) != RL_OK) {
            char rest[sizeof err->msg];
            snprintf(rest, sizeof rest, "%s", err->msg);
            rl_errf(err, rc, "rules%s", rest);
            goto out;
        }
        out->value = json_pack("{s:o}", "rules", rld_rules_to_json(out->rules, rl_limiter_config(lim)));
    }
    if (!out->value)
        rc = rl_errf(err, RL_ENOMEM, "out of memory");
out:
    if (rc != RL_OK)
        rld_quota_body_clear(out);
    json_decref(root);
    return rc;
}

int rld_quotas_put(rld_quotas *q, rl_limiter *lim, rl_registry *reg, const char *user,
                   const char *body, size_t len, rl_err *err)
{
    rld_quota_body b;
    int rc = rld_quota_body_parse(lim, reg, user, body, len, &b, err);
    if (rc != RL_OK)
        return rc;
    pthread_mutex_lock(&q->mu);
    json_t *prev = json_incref(json_object_get(q->overrides, user));
    rc = record(q, user, json_incref(b.value), err);
    if (rc == RL_OK) {
        rc = rl_quota_set(lim, user, b.tier, b.rules, err);
        b.rules = NULL; /* stolen */
        if (rc != RL_OK) {
            rl_err ignored;
            record(q, user, prev, &ignored); /* the file follows the limiter back */
            prev = NULL;
        }
    }
    json_decref(prev);
    pthread_mutex_unlock(&q->mu);
    rld_quota_body_clear(&b);
    return rc;
}

int rld_quotas_delete(rld_quotas *q, rl_limiter *lim, const char *user, rl_err *err)
{
    const rl_config *cfg = rl_limiter_config(lim);
    int rc, in_config = 0;
    if ((rc = check_user(lim, user, err)) != RL_OK)
        return rc;
    for (size_t i = 0; i < cfg->nquotas; i++)
        in_config |= strcmp(cfg->quota_keys[i], user) == 0;
    pthread_mutex_lock(&q->mu);
    /* null is needed only to override a quota the configuration gives */
    rc = record(q, user, in_config ? json_null() : NULL, err);
    if (rc == RL_OK)
        rl_quota_clear(lim, user);
    pthread_mutex_unlock(&q->mu);
    return rc;
}

json_t *rld_quota_to_json(rl_limiter *lim, const char *user)
{
    const char *tier;
    rl_rules *rules;
    if (rl_quota_get(lim, user, &tier, &rules) != RL_OK)
        return NULL;
    json_t *o = json_pack("{s:s, s:o, s:o}", "user", user, "tier",
                          tier ? json_string(tier) : json_null(), "rules",
                          rld_rules_to_json(rules, rl_limiter_config(lim)));
    rl_rules_unref(rules);
    return o;
}
