/*
 * config.h - the configuration file: JSON read with jansson into the core's structures
 * and the daemon's settings (read by the table of app/settings.h, kept in settings.c). Rules
 * as JSON, both ways, are app/rules_json.h.
 *
 * A bad configuration is refused as a whole with a message that names the path of the bad
 * field ("levels[1].rules[0].capacity: must be a positive number ..."); nothing is applied.
 */
#ifndef RLD_CONFIG_H
#define RLD_CONFIG_H

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

#endif
