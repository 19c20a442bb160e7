/*
 * fuzz_route.c - the URL path router over the daemon's route table: the input is
 * "METHOD URL". rld_route_find answers 404 exactly when no route's path matches, 405 when the
 * route has not the method, and otherwise the first matching route, the method's row and a
 * tail that is the rest of the URL after a prefix route. A quota route's tail then goes
 * through the user check.
 */
#include <string.h>

#include "http/http.h"
#include "fuzz.h"
#include "app/quotas.h"

static int matches(const rld_route *rt, const char *url)
{
    size_t n = strlen(rt->path);
    return rt->path[n - 1] == '/' ? strncmp(url, rt->path, n) == 0 : strcmp(url, rt->path) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *in = fz_copy(data, size), *sp = strchr(in, ' ');
    const char *method = in, *url = sp ? sp + 1 : "";
    if (sp)
        *sp = '\0';
    size_t route;
    const char *tail;
    const rld_method *m;
    int rc = rld_route_find(rld_routes, rld_nroutes, url, method, &route, &tail, &m);
    size_t first = rld_nroutes;
    for (size_t i = rld_nroutes; i-- > 0;)
        if (matches(&rld_routes[i], url))
            first = i;
    FZ_CHECK(rc == 0 || rc == 404 || rc == 405, "answer %d", rc);
    FZ_CHECK(route == first, "route %zu, first match %zu", route, first);
    FZ_CHECK((rc == 404) == (first == rld_nroutes), "answer %d, route %zu", rc, route);
    if (rc == 0) {
        FZ_CHECK(m && strcmp(m->name, method) == 0 && m->fn, "method row");
        const rld_route *rt = &rld_routes[route];
        size_t pl = strlen(rt->path);
        FZ_CHECK(rt->path[pl - 1] == '/' ? tail == url + pl : *tail == '\0', "tail");
        if (rt->path[pl - 1] == '/') {
            const char *why = rld_user_problem(tail);
            FZ_CHECK(why || (strlen(tail) >= 1 && strlen(tail) <= RL_KEY_MAX),
                     "user of %zu bytes accepted", strlen(tail));
        }
    } else if (rc == 405) {
        FZ_CHECK(m == NULL, "405 with a method");
        for (const rld_method *mm = rld_routes[route].methods; mm->name; mm++)
            FZ_CHECK(strcmp(mm->name, method) != 0, "405 for an allowed method %s", method);
        FZ_CHECK(strstr(rld_routes[route].allow, rld_routes[route].methods[0].name) != NULL,
                 "Allow");
    }
    free(in);
    return 0;
}
