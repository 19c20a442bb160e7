/*
 * settings_doc.c - rewrites the settings tables of a Markdown file (docs/configuration.md by
 * default) from the settings table (service/config/settings.c): make settings-doc. test_config
 * fails while docs/configuration.md differs from what this writes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/settings.h"

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

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "docs/configuration.md";
    char tmp[4096];
    rl_err err;
    char *text = slurp(path), *out = text ? rld_settings_doc_update(text, &err) : NULL;
    if (!text || !out) {
        fprintf(stderr, "settings_doc: %s: %s\n", path, text ? err.msg : "cannot be read");
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
