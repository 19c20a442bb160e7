/*
 * config.h - the configuration file: JSON read with jansson into the core's structures
 * and the daemon's settings (read by the table of settings.h), and rules written back as JSON.
 *
 * A bad configuration is refused as a whole with a message that names the path of the bad
 * field ("levels[1].rules[0].capacity: must be a positive number ..."); nothing is applied.
 */
#ifndef RLD_CONFIG_JSON_H
#define RLD_CONFIG_JSON_H

#include <jansson.h>

#include "ratelimit.h"
#include "app/settings.h"

/* Parses a configuration from JSON text. Loads the plug-ins it names into reg first. On success
 * *cfg is a finished configuration the caller owns and set is filled (free with
 * rld_settings_clear). With "ratelimit_config" the caller reads the limits from
 * set->ratelimit_config: *cfg is then NULL, or the configuration of the levels given beside it
 * (rld_yrls_new_beside); on failure nothing is returned but plug-ins loaded
 * stay in reg. */
int rld_config_parse(const char *text, size_t len, rl_registry *reg, rld_settings *set,
                     rl_config **cfg, rl_err *err);
/* The same from a file; err names the file when it cannot be read. */
int rld_config_load(const char *path, rl_registry *reg, rld_settings *set, rl_config **cfg,
                    rl_err *err);

/* A rule list from a JSON array of rule objects. Errors start with "[i]." (the caller adds the
 * path of the array). On success *out has one reference. */
int rld_rules_from_json(const json_t *arr, rl_registry *reg, rl_rules **out, rl_err *err);

/* A new JSON object describing a rule: type, name, unit, every parameter, reserved. */
json_t *rld_rule_to_json(const rl_rule *r);
/* A new JSON array of the rules of a list. */
json_t *rld_rules_to_json(const rl_rules *rs);
/* A new JSON object of the configuration in force, as GET /rules returns it. */
json_t *rld_config_to_json(const rl_config *cfg, const rld_settings *set);

/* A new JSON number: an integer when v is whole, a real otherwise. */
json_t *rld_json_number(double v);
/* Flags for json_dumps that keep reals short (0.1, not 0.10000000000000001). */
#define RLD_JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(15))

#endif
