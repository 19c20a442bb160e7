/*
 * usage.c - see usage.h.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "usage.h"
#include "values.h"

int rld_usage_read(const rl_config *cfg, const json_t *o, const char *field, rl_usage *out,
                   rl_err *err)
{
    const char *k;
    json_t *v;
    memset(out, 0, sizeof *out);
    json_object_foreach((json_t *)o, k, v)
    {
        char path[160];
        long d = rl_config_dimension(cfg, k, strlen(k));
        if (d < 0) {
            char known[RL_MAX_DIMS * 66] = "";
            size_t n = 0;
            for (size_t i = 0; i < cfg->ndims && n < sizeof known; i++)
                n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "",
                                      cfg->dims[i]);
            return rl_errf(err, -1, "%s.%.64s: unknown dimension (declared: %s)", field, k,
                           cfg->ndims ? known : "none");
        }
        snprintf(path, sizeof path, "%s.%.64s", field, k);
        double num = json_is_number(v) ? json_number_value(v) : NAN;
        if (rld_value_amount(path, num, &out->v[d], err) != 0)
            return -1;
        out->given |= 1u << d;
    }
    return 0;
}
