/*
 * test_yaml_config.c - envoyproxy/ratelimit's YAML files: what is read, and every file it
 * refuses, each with its exact message (file name and YAML path).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "grpc/yaml_reader.h"
#include "grpc/rls_yaml.h"
#include "testutil.h"
#include "yamlutil.h"

START_TEST(null_value_is_no_value)
{
    const char *yaml = "domain: d\n"
                       "descriptors:\n"
                       "  - key: a\n"
                       "    value: 50   # a number is a string here\n"
                       "    shadow_mode: yes\n"
                       "    detailed_metric: true\n"
                       "    metadata: {anything: [1, 2]}\n"
                       "    rate_limit:\n"
                       "      name: first\n"
                       "      unit: Minute\n"
                       "      requests_per_unit: 1_000\n"
                       "      replaces: [{name: other}]\n"
                       "  - key: b\n"
                       "    value: 'x*'\n"
                       "    share_threshold: true\n"
                       "    descriptors:\n"
                       "      - key: c\n"
                       "        rate_limit: {unlimited: true}\n"
                       "      - key: c\n"
                       "        value: ~\n"
                       "        rate_limit: ~\n"
                       "      - key: e\n"
                       "        value: f\n"
                       "        rate_limit: {unit: week, algorithm: gcra}\n";
    /* value: ~ is no value, so the second "c" duplicates the first */
    ck_assert_str_eq(yt_refused(yaml), "bad.yaml: descriptors[1].descriptors[1]: duplicate "
                                       "descriptor composite key 'd.b_x*.c'");
}
END_TEST

START_TEST(reads_values)
{
    const char *yaml = "domain: d\n"
                       "descriptors:\n"
                       "  - key: a\n"
                       "    value: 50\n"
                       "    shadow_mode: yes\n"
                       "    detailed_metric: true\n"
                       "    metadata: {anything: [1, 2]}\n"
                       "    rate_limit:\n"
                       "      name: first\n"
                       "      unit: Minute\n"
                       "      requests_per_unit: 1_000\n"
                       "      replaces: [{name: other}]\n"
                       "  - key: b\n"
                       "    value: 'x*'\n"
                       "    share_threshold: true\n"
                       "    descriptors:\n"
                       "      - key: c\n"
                       "        rate_limit: {unlimited: true}\n"
                       "      - key: e\n"
                       "        value: f\n"
                       "        charge: false\n"
                       "        rate_limit: {unit: week, algorithm: gcra, requests_per_unit: 7}\n";
    rl_err err;
    rld_yconf *c = rld_yconf_new();
    ck_assert_int_eq(rld_yaml_parse(c, "t.yaml", yaml, strlen(yaml), &err), 0);
    ck_assert_uint_eq(c->ndomains, 1);
    const rld_ydomain *d = rld_yconf_domain(c, "d", 1);
    ck_assert_ptr_nonnull(d);
    ck_assert_uint_eq(d->nchildren, 2);
    ck_assert_uint_eq(d->nlimits, 3);
    const rld_ydesc *a = &d->children[0];
    ck_assert_str_eq(a->key, "a");
    ck_assert_str_eq(a->value, "50");
    ck_assert(a->shadow_mode && a->detailed_metric && a->has_limit && !a->wildcard);
    ck_assert_str_eq(a->limit.name, "first");
    ck_assert_int_eq(a->limit.unit, RLD_UNIT_MINUTE);
    ck_assert_uint_eq(a->limit.requests_per_unit, 1000);
    ck_assert_uint_eq(a->limit.nreplaces, 1);
    ck_assert_str_eq(a->limit.replaces[0], "other");
    const rld_ydesc *b = &d->children[1];
    ck_assert(b->wildcard && b->share_threshold && !b->has_limit);
    ck_assert_str_eq(b->path, "descriptors[1]");
    ck_assert_uint_eq(b->nchildren, 2);
    ck_assert(b->children[0].limit.unlimited);
    ck_assert_ptr_null(b->children[0].value);
    ck_assert_str_eq(b->children[1].path, "descriptors[1].descriptors[1]");
    ck_assert_int_eq(b->children[1].limit.unit, RLD_UNIT_WEEK);
    ck_assert_str_eq(b->children[1].limit.algorithm, "gcra");
    ck_assert_uint_eq(b->children[1].id, 2);
    rld_yconf_free(c);
}
END_TEST

/* Files that are refused, with their messages. */
static const struct {
    const char *yaml, *msg;
} bad[] = {
    {"domain: \"\"\n", "bad.yaml: domain: config file cannot have empty domain"},
    {"descriptors: []\n", "bad.yaml: domain: config file cannot have empty domain"},
    {"", "bad.yaml: domain: config file cannot have empty domain"},
    {"domain: d\ndescriptors:\n  - value: v\n",
     "bad.yaml: descriptors[0]: descriptor has empty key"},
    {"domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
     "  - key: key1\n    value: value1\n",
     "bad.yaml: descriptors[1]: duplicate descriptor composite key 'test-domain.key1_value1'"},
    {"domain: d\ndescriptors:\n  - key: a\n  - key: b\n  - key: c\n    rate_limit:\n"
     "      unit: fortnight\n      requests_per_unit: 5\n",
     "bad.yaml: descriptors[2].rate_limit.unit: invalid rate limit unit 'fortnight'"},
    {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 5}\n",
     "bad.yaml: descriptors[0].rate_limit.unit: invalid rate limit unit ''"},
    {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: day}\n",
     "bad.yaml: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited"},
    {"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: x\n      unit: second\n"
     "      replaces: [{name: y}, {name: x}]\n",
     "bad.yaml: descriptors[0].rate_limit.replaces[1]: replaces should not contain name of "
     "same descriptor"},
    {"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
     "      replaces: [{name: \"\"}]\n",
     "bad.yaml: descriptors[0].rate_limit.replaces[0]: should not have an empty replaces entry"},
    {"domain: d\ndescriptors:\n  - key: a\n    ratelimit: {unit: second}\n",
     "bad.yaml: descriptors[0]: config error, unknown key 'ratelimit'"},
    {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requestsperunit: 5}\n",
     "bad.yaml: descriptors[0].rate_limit: config error, unknown key 'requestsperunit'"},
    {"domain: d\n0.25: x\n", "bad.yaml: config error, key is not of type string: 0.25"},
    {"domain: d\ndescriptors:\n  - a\n",
     "bad.yaml: descriptors[0]: config error, yaml file contains list of type other than map: a"},
    {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
     "bad.yaml: descriptors[0].rate_limit.requests_per_unit: must be a whole number from 0 to "
     "4294967295"},
    {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: "
     "4294967296}\n",
     "bad.yaml: descriptors[0].rate_limit.requests_per_unit: must be a whole number from 0 to "
     "4294967295"},
    {"domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n",
     "bad.yaml: descriptors[0].shadow_mode: must be true or false"},
    {"domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n",
     "bad.yaml: descriptors[0]: share_threshold can only be used with wildcard values "
     "(containing '*'), but found key 'a_b'"},
    {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, algorithm: leaky}\n",
     "bad.yaml: descriptors[0].rate_limit: algorithm: 'leaky' is not one of token_bucket, "
     "sliding_window, sliding_window_counter, fixed_window, gcra"},
    {"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: year, requests_per_unit: 1, "
     "algorithm: token_bucket}\n",
     "bad.yaml: descriptors[0].rate_limit: per_second: must be a positive number no larger "
     "than 1000000000000"},
    {"domain: a\ndomain: b\n", "bad.yaml: key 'domain' is given twice"},
    {"domain: [a]\n", "bad.yaml: domain: must be a string"},
    {"domain: d\ndescriptors: {key: a}\n", "bad.yaml: descriptors: must be a list"},
    {"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n"
     "        rate_limit: {unit: second, unlimited: 1}\n",
     "bad.yaml: descriptors[0].descriptors[0].rate_limit.unlimited: must be true or false"},
    {"domain: d\ndescriptors:\n  - key: a\n    metadata: [x]\n",
     "bad.yaml: descriptors[0].metadata: must be a mapping"},
    {"domain: d\ndescriptors:\n  - key: a\n    metadata: {a: {b: 1, b: 2}}\n",
     "bad.yaml: descriptors[0].metadata.a.b: key 'b' is given twice"},
    {"domain: d\ndescriptors:\n  - key: a\n    quota_mode: sometimes\n",
     "bad.yaml: descriptors[0].quota_mode: must be true or false"},
    {"domain: d\ndescriptors:\n  - key: a\n    unit: second\n",
     "bad.yaml: descriptors[0]: config error, unknown key 'unit'"},
};

START_TEST(refused_files)
{
    ck_assert_str_eq(yt_refused(bad[_i].yaml), bad[_i].msg);
}
END_TEST

START_TEST(malformed_yaml)
{
    /* the flow sequence opened on line 4 is never closed: libyaml stops at the end (line 5) */
    const char *msg = yt_refused("domain: d\ndescriptors:\n  - key: a\n    value: [b\n");
    const char *want = "bad.yaml: error loading config file: line 5, column 1: ";
    ck_assert_msg(strncmp(msg, want, strlen(want)) == 0, "got: %s", msg);
}
END_TEST

static char tmpdir[64];

static void write_file(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void make_dir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/rl-yaml-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(directory_of_files)
{
    rld_yconf *c;
    rl_err err;
    make_dir();
    write_file("b.yaml", "domain: second\n");
    write_file("a.yml", "domain: first\ndescriptors: [{key: k, rate_limit: {unit: hour}}]\n");
    write_file("notes.txt", "not: yaml: at all: [\n");
    write_file(".hidden.yaml", "domain: first\n");
    ck_assert_int_eq(rld_yaml_load(tmpdir, &c, &err), 0);
    ck_assert_uint_eq(c->ndomains, 2);
    ck_assert_str_eq(c->domains[0].domain, "first"); /* a.yml comes first */
    ck_assert_str_eq(c->domains[1].domain, "second");
    rld_yconf_free(c);
    ck_assert(rld_yaml_is_config(tmpdir));

    /* the same domain twice: the second file is named */
    write_file("c.yaml", "domain: first\n");
    ck_assert_int_ne(rld_yaml_load(tmpdir, &c, &err), 0);
    char want[256];
    snprintf(want, sizeof want, "%s/c.yaml: domain: duplicate domain 'first' in config file",
             tmpdir);
    ck_assert_str_eq(err.msg, want);

    /* one file by its name */
    char path[128];
    snprintf(path, sizeof path, "%s/c.yaml", tmpdir);
    ck_assert_int_eq(rld_yaml_load(path, &c, &err), 0);
    ck_assert_uint_eq(c->ndomains, 1);
    rld_yconf_free(c);
    remove_dir();

    ck_assert_int_ne(rld_yaml_load("/nonexistent/x.yaml", &c, &err), 0);
    ck_assert_str_eq(err.msg, "/nonexistent/x.yaml: No such file or directory");
    ck_assert(rld_yaml_is_config("x.yml"));
    ck_assert(!rld_yaml_is_config("config/default.json"));
}
END_TEST

/* MERGE_DOMAIN_CONFIG: upstream's TestDomainMerge and TestDuplicateKeyDomainMerge, with its
 * merge_domain_key1.yaml and merge_domain_key2.yaml written out again */
static const char *merge1 = "domain: test-domain\n"
                            "descriptors:\n"
                            "  - key: key1\n"
                            "    value: value1\n"
                            "    rate_limit:\n"
                            "      unit: minute\n"
                            "      requests_per_unit: 10\n";
static const char *merge2 = "domain: test-domain\n"
                            "descriptors:\n"
                            "  - key: key2\n"
                            "    value: value2\n"
                            "    descriptors:\n"
                            "      - key: sub\n"
                            "        rate_limit:\n"
                            "          unit: minute\n"
                            "          requests_per_unit: 30\n"
                            "    rate_limit:\n"
                            "      unit: minute\n"
                            "      requests_per_unit: 20\n";

START_TEST(merged_domains)
{
    rld_yconf *c;
    rl_err err;
    char want[256];
    make_dir();
    write_file("merge_domain_key1.yaml", merge1);
    write_file("merge_domain_key2.yaml", merge2);
    /* without MERGE_DOMAIN_CONFIG: refused, as upstream */
    ck_assert_int_ne(rld_yaml_load_merging(tmpdir, 0, &c, &err), 0);
    snprintf(want, sizeof want,
             "%s/merge_domain_key2.yaml: domain: duplicate domain 'test-domain' in config file",
             tmpdir);
    ck_assert_str_eq(err.msg, want);
    /* with it: one domain with both files' descriptors, limits numbered on */
    ck_assert_msg(rld_yaml_load_merging(tmpdir, 1, &c, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(c->ndomains, 1);
    const rld_ydomain *d = &c->domains[0];
    ck_assert_uint_eq(d->nchildren, 2);
    ck_assert_uint_eq(d->nlimits, 3);
    ck_assert_str_eq(d->children[0].key, "key1");
    ck_assert_uint_eq(d->children[0].limit.requests_per_unit, 10);
    ck_assert_uint_eq(d->children[0].id, 0);
    ck_assert_str_eq(d->children[1].key, "key2");
    ck_assert_uint_eq(d->children[1].limit.requests_per_unit, 20);
    ck_assert_uint_eq(d->children[1].id, 1);
    ck_assert_uint_eq(d->children[1].children[0].id, 2);
    /* the merged descriptors name their own file */
    ck_assert_msg(strstr(d->children[1].file, "merge_domain_key2.yaml"), "%s",
                  d->children[1].file);
    rld_yconf_free(c);
    /* the same top-level key and value in two files: refused naming the later one */
    write_file("merge_domain_key3.yaml", merge1);
    ck_assert_int_ne(rld_yaml_load_merging(tmpdir, 1, &c, &err), 0);
    snprintf(want, sizeof want,
             "%s/merge_domain_key3.yaml: descriptors[0]: duplicate descriptor composite key "
             "'test-domain.key1_value1'",
             tmpdir);
    ck_assert_str_eq(err.msg, want);
    remove_dir();
}
END_TEST

START_TEST(metadata_is_kept)
{
    rld_yconf *c = rld_yconf_new();
    rl_err err;
    const char *y = "domain: d\n"
                    "descriptors:\n"
                    "  - key: a\n"
                    "    metadata: {name: s1, n: 2.5, on: true, none: ~, l: [1, x]}\n";
    ck_assert_msg(rld_yaml_parse(c, "m.yaml", y, strlen(y), &err) == 0, "%s", err.msg);
    const rld_ymeta *m = c->domains[0].children[0].metadata;
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->type, RLD_YMETA_STRUCT);
    ck_assert_uint_eq(m->n, 5);
    ck_assert_str_eq(m->keys[0], "name");
    ck_assert_str_eq(m->v[0].s, "s1");
    ck_assert_int_eq(m->v[1].type, RLD_YMETA_NUMBER);
    ck_assert(m->v[1].number == 2.5);
    ck_assert_int_eq(m->v[2].type, RLD_YMETA_BOOL);
    ck_assert_int_eq(m->v[2].b, 1);
    ck_assert_int_eq(m->v[3].type, RLD_YMETA_NULL);
    ck_assert_int_eq(m->v[4].type, RLD_YMETA_LIST);
    ck_assert_uint_eq(m->v[4].n, 2);
    ck_assert_str_eq(m->v[4].v[1].s, "x");
    rld_yconf_free(c);
}
END_TEST

START_TEST(empty_directory)
{
    rld_yconf *c;
    rl_err err;
    make_dir();
    ck_assert_int_ne(rld_yaml_load(tmpdir, &c, &err), 0);
    char want[128];
    snprintf(want, sizeof want, "%s: no .yaml or .yml files", tmpdir);
    ck_assert_str_eq(err.msg, want);
    remove_dir();
}
END_TEST

START_TEST(shipped_yaml_loads)
{
    /* config/ratelimit/ (run from the repository's top), with its rules built */
    rld_yconf *c;
    rld_yrls *y;
    rl_config *cfg;
    rl_err err;
    rl_registry *reg = rl_registry_new();
    ck_assert_msg(rld_yaml_load("config/ratelimit", &c, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(c->ndomains, 2);
    ck_assert_str_eq(c->domains[0].domain, "edge");
    ck_assert_str_eq(c->domains[1].domain, "messaging");
    ck_assert_msg(rld_yrls_new(c, reg, &y, &cfg, &err) == 0, "%s", err.msg);
    rl_config_free(cfg);
    rld_yrls_free(y);
    rl_registry_free(reg);
}
END_TEST

START_TEST(units)
{
    ck_assert_int_eq(rld_unit_seconds(RLD_UNIT_SECOND), 1);
    ck_assert_int_eq(rld_unit_seconds(RLD_UNIT_MINUTE), 60);
    ck_assert_int_eq(rld_unit_seconds(RLD_UNIT_HOUR), 3600);
    ck_assert_int_eq(rld_unit_seconds(RLD_UNIT_DAY), 86400);
    ck_assert_int_eq(rld_unit_seconds(RLD_UNIT_WEEK), 604800);
    ck_assert_int_eq(rld_unit_seconds(RLD_UNIT_MONTH), 2592000);
    ck_assert_int_eq(rld_unit_seconds(RLD_UNIT_YEAR), 31536000);
    ck_assert_int_eq(rld_unit_seconds(RLD_UNIT_UNKNOWN), 0);
    ck_assert_int_eq(rld_unit_seconds(8), 0);
    ck_assert_int_eq(rld_unit_parse("hOuR"), RLD_UNIT_HOUR);
    ck_assert_int_eq(rld_unit_parse("unknown"), RLD_UNIT_UNKNOWN);
    ck_assert_str_eq(rld_unit_name(RLD_UNIT_WEEK), "WEEK");
}
END_TEST

static Suite *yaml_suite(void)
{
    Suite *s = suite_create("yaml_config");
    TCase *tc = tcase_create("yaml_config");
    tcase_add_test(tc, null_value_is_no_value);
    tcase_add_test(tc, reads_values);
    tcase_add_loop_test(tc, refused_files, 0, sizeof bad / sizeof bad[0]);
    tcase_add_test(tc, malformed_yaml);
    tcase_add_test(tc, directory_of_files);
    tcase_add_test(tc, empty_directory);
    tcase_add_test(tc, merged_domains);
    tcase_add_test(tc, metadata_is_kept);
    tcase_add_test(tc, shipped_yaml_loads);
    tcase_add_test(tc, units);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(yaml_suite()) ? EXIT_FAILURE : EXIT_SUCCESS;
}
