/*
 * settings_doc.c - rewrites the settings tables of a document from the settings table
 * (service/config/settings.c):
 *
 *   settings_doc [FILE]       the Markdown tables of FILE (docs/configuration.md by default)
 *                             between "<!-- settings: NAME -->" and "<!-- end of settings -->"
 *   settings_doc --man FILE   the same rows as roff (.TP paragraphs) in a manual page, between
 *                             ".\" settings: NAME" and ".\" end of settings"
 * (docs/man/ratelimitd.8)
 *
 * make settings-doc runs both. test_config fails while docs/configuration.md differs from what
 * this writes, make deb-check while docs/man/ratelimitd.8 does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/settings.h"

#define MAN_BEGIN ".\\\" settings: "
#define MAN_END ".\\\" end of settings"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n)
        buf[n] = '\0';
    else {
        free(buf);
        buf = NULL;
    }
    if (f)
        fclose(f);
    return buf;
}

/* A growing text; on running out of memory the program stops. */
typedef struct growing {
    char *p;
    size_t len, cap;
} growing;

static void put(growing *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        if (!(t->p = realloc(t->p, t->cap))) {
            fputs("settings_doc: out of memory\n", stderr);
            exit(1);
        }
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

static void puts_(growing *t, const char *s)
{
    put(t, s, strlen(s));
}

/* One Markdown cell (s, n bytes) as roff text: `code` in bold, [text](link) as its text,
 * the HTML entities of the tables as characters, backslashes and minus signs escaped. */
static void man_inline(growing *t, const char *s, size_t n)
{
    int code = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        const char *close, *paren;
        if (c == '`') {
            puts_(t, (code = !code) ? "\\fB" : "\\fR");
        } else if (!code && c == '[' && (close = memchr(s + i, ']', n - i)) && close + 1 < s + n &&
                   close[1] == '(' && (paren = memchr(close, ')', (size_t)(s + n - close)))) {
            man_inline(t, s + i + 1, (size_t)(close - s - i - 1)); /* the text, not the link */
            i = (size_t)(paren - s);
        } else if (c == '&' && n - i >= 4 && strncmp(s + i, "&lt;", 4) == 0) {
            put(t, "<", 1);
            i += 3;
        } else if (c == '&' && n - i >= 4 && strncmp(s + i, "&gt;", 4) == 0) {
            put(t, ">", 1);
            i += 3;
        } else if (c == '&' && n - i >= 5 && strncmp(s + i, "&amp;", 5) == 0) {
            put(t, "&", 1);
            i += 4;
        } else if (c == '\\') {
            puts_(t, "\\e");
        } else if (c == '-' && code) {
            puts_(t, "\\-");
        } else {
            put(t, &c, 1);
        }
    }
    if (code)
        puts_(t, "\\fR");
}

/* A cell at the start of an output line: as man_inline, and guarded by \& when it starts
 * with a character roff would take for a request. */
static void man_cell(growing *t, const char *s, size_t n)
{
    growing c = {0};
    man_inline(&c, s, n);
    if (c.len && (c.p[0] == '.' || c.p[0] == '\''))
        puts_(t, "\\&");
    if (c.len)
        put(t, c.p, c.len);
    free(c.p);
}

/* The rows of the settings table name (n bytes) as .TP paragraphs: the member in bold, then
 * its value and default, then its meaning. 0, or -1 when name is no table (why in err). */
static int man_table(growing *out, const char *name, size_t n, rl_err *err)
{
    growing marker = {0};
    puts_(&marker, "\n<!-- settings: ");
    put(&marker, name, n);
    puts_(&marker, " -->\n<!-- end of settings -->\n");
    char *md = rld_settings_doc_update(marker.p, err);
    free(marker.p);
    if (!md) {
        if (strcmp(err->msg, "out of memory") != 0) /* named in the man page's own words */
            rl_errf(err, RL_EINVAL, "%s%.*s: names no settings table", MAN_BEGIN, (int)n, name);
        return -1;
    }
    for (const char *line = md, *eol; *line; line = eol + 1) {
        const char *cell[5];
        size_t k = 0;
        if (!(eol = strchr(line, '\n')))
            eol = line + strlen(line);
        if (strncmp(line, "| `", 3) != 0) /* the head and its rule */
            continue;
        /* | member | value | default | meaning |: no cell holds a '|' */
        for (const char *p = line; p < eol && k < 5; p++)
            if (*p == '|')
                cell[k++] = p;
        if (k < 5)
            continue;
        const char *member = cell[0] + 3, *member_end = memchr(member, '`', (size_t)(eol - member));
        if (!member_end)
            continue;
        puts_(out, ".TP\n.B ");
        put(out, member, (size_t)(member_end - member));
        puts_(out, "\n");
        man_cell(out, cell[1] + 2, (size_t)(cell[2] - cell[1] - 3));
        size_t deflen = cell[3] - cell[2] > 3 ? (size_t)(cell[3] - cell[2] - 3) : 0;
        if (deflen == 8 && strncmp(cell[2] + 2, "required", 8) == 0) {
            puts_(out, "; required");
        } else if (deflen) {
            puts_(out, "; default ");
            man_inline(out, cell[2] + 2, deflen);
        }
        puts_(out, ".\n");
        man_cell(out, cell[3] + 2, (size_t)(cell[4] - cell[3] - 3));
        puts_(out, "\n");
        if (!*eol)
            break;
    }
    free(md);
    return 0;
}

/* The manual page's text with every settings block made again. NULL when a marker names no
 * table or has no end (why in err). */
static char *man_update(const char *in, rl_err *err)
{
    growing out = {0};
    const char *line = in, *eol;
    puts_(&out, "");
    while (*line) {
        eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol + 1 - line) : strlen(line);
        put(&out, line, n);
        if (strncmp(line, MAN_BEGIN, strlen(MAN_BEGIN)) == 0) {
            const char *name = line + strlen(MAN_BEGIN);
            const char *end = strstr(line, "\n" MAN_END);
            size_t namelen = (size_t)(line + n - name) - (eol ? 1 : 0);
            if (!end) {
                rl_errf(err, RL_EINVAL, "%.*s: has no \"%s\" after it", (int)(n - (eol ? 1 : 0)),
                        line, MAN_END);
                free(out.p);
                return NULL;
            }
            if (man_table(&out, name, namelen, err) != 0) {
                free(out.p);
                return NULL;
            }
            n = (size_t)(end + 1 - line);
        }
        line += n;
    }
    return out.p;
}

int main(int argc, char **argv)
{
    int man = argc > 1 && strcmp(argv[1], "--man") == 0;
    const char *path = argc > 1 + man ? argv[1 + man] : man ? NULL : "docs/configuration.md";
    char tmp[4096];
    rl_err err;
    if (!path) {
        fputs("usage: settings_doc [FILE.md] | settings_doc --man FILE\n", stderr);
        return 2;
    }
    char *text = slurp(path);
    char *out = !text ? NULL : man ? man_update(text, &err) : rld_settings_doc_update(text, &err);
    if (!text || !out) {
        fprintf(stderr, "settings_doc: %s: %s\n", path, text ? err.msg : "cannot be read");
        free(text);
        return 1;
    }
    if (strcmp(text, out) != 0) {
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (!f || fputs(out, f) == EOF || fclose(f) != 0 || rename(tmp, path) != 0) {
            perror(tmp);
            return 1;
        }
        printf("%s: settings tables rewritten\n", path);
    }
    free(text);
    free(out);
    return 0;
}
