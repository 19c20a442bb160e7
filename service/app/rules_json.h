/*
 * rules_json.h - rules and the configuration in force as JSON, both ways: what the
 * configuration file (config/), the quota bodies and file (quotas.h) and the fleet's quotas in
 * Redis (redis/) write a rule list as, converted here once.
 *
 *   [{"type": "token_bucket", "capacity": 10, "rate": 5}]  <->  an rl_rules of one rule
 *
 * Errors name the path of the bad field relative to the value given ("[1].capacity: must be
 * ..."); the caller puts its own path in front (rld_err_at).
 */
#ifndef RLD_APP_RULES_JSON_H
#define RLD_APP_RULES_JSON_H

#include <jansson.h>

#include "ratelimit.h"
#include "settings.h"

/* Flags for json_dumps that keep reals short (0.1, not 0.10000000000000001). */
#define RLD_JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(15))

/* A rule list from a JSON array of 1 to RL_MAX_RULES rule objects, their types looked up in
 * reg, their units among cfg's dimensions (cfg may be NULL: no dimensions). Errors (RL_EINVAL,
 * RL_ENOMEM) start with "[i]." or ":" (the caller adds the path of the array) and return
 * nothing. On success *out has one reference, the caller's. */
int rld_rules_from_json(const json_t *arr, rl_registry *reg, const rl_config *cfg, rl_rules **out,
                        rl_err *err);

/* The names of reg's rule types that have every flag of flags (RL_RULE_*), ", "-separated,
 * into buf (cut at n bytes): for errors that say which types a field is for. Returns buf. */
const char *rld_rule_types_with(const rl_registry *reg, unsigned flags, char *buf, size_t n);

/* The name of unit u (rl_unit) in cfg: "cost", "requests", "usd" or one of cfg's dimensions
 * ("?" for none of them; cfg may be NULL). */
const char *rld_amount_unit_name(const rl_config *cfg, unsigned u);
/* A new JSON object describing a rule: type, name, unit, every parameter (a rule counting
 * dollars in dollars), and shadow, charge and reserved when set. rld_rules_from_json reads it
 * back to the same rule. */
json_t *rld_rule_to_json(const rl_rule *r, const rl_config *cfg);
/* A new JSON array of the rules of a list (empty for NULL). */
json_t *rld_rules_to_json(const rl_rules *rs, const rl_config *cfg);
/* A new JSON object of the configuration in force, as GET /rules returns it: levels (a tiered
 * level with the default tier's rules), tiers, default_tier, reservation_ttl, store, and with
 * the Redis store each level's on_store_error and shards. set may be NULL (the memory store). */
json_t *rld_config_to_json(const rl_config *cfg, const rld_settings *set);

/* A new JSON number: an integer when v is whole (and exact in a double), a real otherwise. */
json_t *rld_json_number(double v);

/* Puts path and sep in front of the message already in err (path cut at 200 characters, the
 * whole cut to fit err); returns rc, so that "return rld_err_at_sep(...)" passes it on. */
int rld_err_at_sep(rl_err *err, int rc, const char *path, const char *sep);
/* Puts the path of a container in front of a message relative to it: "[0].capacity: ..." and
 * ": must be ..." are joined as they are, "capacity: ..." after a '.'. Returns rc. */
int rld_err_at(rl_err *err, int rc, const char *path);

#endif
