/*
 * lua_scripts.c - prints the Redis store's scripts as the store sends them (with no plug-in
 * ports), for bench/lua_cost.sh.
 *
 *   lua_scripts decide|settle|release|due    the script's text (SCRIPT LOAD)
 *   lua_scripts library                      the Functions library's text (FUNCTION LOAD)
 *   lua_scripts fname                        the library's name of the decision function
 *   lua_scripts lib                          the lib alone (bigint.lua, lib.lua, the ports)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/lua.h"
#include "redis/scripts.h"

int main(int argc, char **argv)
{
    static const char *const names[RLD_NSCRIPTS] = {[RLD_SCRIPT_DECIDE] = "decide",
                                                    [RLD_SCRIPT_SETTLE] = "settle",
                                                    [RLD_SCRIPT_RELEASE] = "release",
                                                    [RLD_SCRIPT_DUE] = "due",
                                                    [RLD_SCRIPT_UNDO] = "undo"};
    rld_lua l;
    if (argc != 2 || rld_lua_build(NULL, &l) != RL_OK) {
        fprintf(stderr, "usage: lua_scripts decide|settle|release|due|library|fname|lib\n");
        return 2;
    }
    int rc = 0;
    if (strcmp(argv[1], "library") == 0) {
        fputs(l.library, stdout);
    } else if (strcmp(argv[1], "fname") == 0) {
        printf("%s\n", l.fname[RLD_SCRIPT_DECIDE]);
    } else if (strcmp(argv[1], "lib") == 0) {
        char *lib = rld_lua_with_lib(NULL, "");
        fputs(lib ? lib : "", stdout);
        free(lib);
    } else {
        rc = 2;
        for (int s = 0; s < RLD_NSCRIPTS; s++)
            if (names[s] && strcmp(argv[1], names[s]) == 0) {
                fputs(l.script[s], stdout);
                rc = 0;
            }
        if (rc)
            fprintf(stderr, "lua_scripts: no script %s\n", argv[1]);
    }
    rld_lua_free(&l);
    return rc;
}
