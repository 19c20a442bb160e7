/*
 * replay.c - runs a fuzz target once over every file of the folders (or files) given, for
 * builds without libFuzzer (make test). Exits 1 when a folder cannot be read or holds no
 * input, so that a missing corpus fails rather than passes silently.
 */
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t n = 0, cap = 4096;
    uint8_t *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", path);
        return -1;
    }
    /* an exact-size copy, so that AddressSanitizer sees a read past the end */
    uint8_t *exact = malloc(n ? n : 1);
    if (n)
        memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int run_dir(const char *dir, size_t *count)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[4096];
    if (!d) {
        perror(dir);
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (run_file(path) != 0) {
            closedir(d);
            return -1;
        }
        ++*count;
    }
    closedir(d);
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        struct stat st;
        size_t count = 0;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (S_ISDIR(st.st_mode) ? run_dir(argv[i], &count) : (count = 1, run_file(argv[i])))
            return 1;
        if (count == 0) {
            fprintf(stderr, "%s: no inputs\n", argv[i]);
            return 1;
        }
        printf("%s: %zu inputs replayed\n", argv[i], count);
    }
    return argc > 1 ? 0 : (fprintf(stderr, "usage: %s CORPUS...\n", argv[0]), 1);
}
