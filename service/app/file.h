/*
 * file.h - whole files read and their directories made: the configuration, the quota file,
 * token files and TLS keys are read through here.
 */
#ifndef RLD_APP_FILE_H
#define RLD_APP_FILE_H

#include <stddef.h>

/* A whole file, malloc'd and NUL-terminated, its length (without the NUL) in *len (may be
 * NULL); NULL when it cannot be read (errno says why). The caller frees it. */
char *rld_read_file(const char *path, size_t *len);
/* Creates the directory a file goes in, and its parents (like mkdir -p). 0 or -1 (errno). */
int rld_make_parent_dir(const char *path);

#endif
