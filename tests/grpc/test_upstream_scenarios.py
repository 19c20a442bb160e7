"""envoyproxy/ratelimit's own test scenarios, run against ratelimitd as a user moving over would
run them: its test/config, test/integration and test/service cases re-expressed as YAML files
(written here from what each scenario needs), ShouldRateLimit calls over a real connection
(Debian's python3-grpcio), GET /metrics and --check-config. The expected answers are worked out
from upstream's test expectations and its README; where ratelimitd answers otherwise on
purpose, the test asserts ratelimitd's answer and docs/envoy.md ("What differs, on purpose")
says why. The daemon runs with --manual-clock: every call carries its time in the
ratelimitd-now metadata, so windows and resets are exact (at t = 1000 a minute ends in 20 s, an
hour in 2600 s).

Every upstream case looked at (a test function, or each t.Run subtest where it has them), by
file: same / deliberate (a documented difference, docs/envoy.md) / n.a. (not applicable:
Memcached, per-second Redis pools, its local cache, its internals; and reloading the files and
xDS, which docs/envoy.md gives as not supported yet) / gap. 115 cases: 69 same, 15 deliberate,
31 n.a., 0 gaps.

test/config/config_test.go: 44 same
  TestBasicConfig ............................ same        ConfigAnswers.test_basic_config
  TestDomainMerge ............................ same        ConfigAnswers.test_domain_merge
  TestConfigLimitOverride .................... same        ConfigAnswers.test_limit_override
  TestEmptyDomain, TestDuplicateDomain, TestEmptyKey, TestDuplicateKey,
  TestDuplicateKeyDomainMerge, TestBadLimitUnit, TestReplacesSelf, TestReplacesEmpty,
  TestBadYaml, TestMisspelledKey, TestNonStringKey, TestNonMapList,
  TestUnlimitedWithRateLimitUnit ............. same (13)   ConfigErrors: upstream's message
                                                           after the file, plus the YAML path
                                                           (bad YAML in libyaml's words)
  TestShadowModeConfig ....................... same        ConfigAnswers.test_shadow_mode
  TestWildcardConfig ......................... same        ConfigAnswers.test_wildcard
  TestDetailedMetric (7 rows) ................ same        Stats
  TestValueToMetric_* ........................ same (9)    Stats
  TestShareThreshold (8 subtests) ............ same (8)    Stats
  TestWildcardStatsBehavior (7 subtests) ..... same (7)    Stats
  TestMetadata ............................... same        Metadata
test/integration/integration_test.go: 6 same, 10 deliberate, 30 n.a.
  TestBasicConfig/WithoutPerSecondRedis ...... deliberate  Integration, IntegrationRedis: a
                                                           request denied by key3 does not count
                                                           key2 (upstream's 20 - (i + 1) left)
  TestBasicConfig/WithoutPerSecondRedisWithCachePrefix .. deliberate (the same; store.prefix)
  TestBasicConfig/WithoutPerSecondRedisWithstopCacheKeyIncrementWhenOverlimitConfig .. same
  TestBasicConfig, its other 6 (per-second Redis, local cache) .. n.a.
  TestXdsProviderBasicConfig (4) ............. n.a.
  TestBasicConfig_ExtraTags .................. same        ExtraTags
  TestBasicTLSConfig/WithoutPerSecondRedisTLS, .../WithoutPerSecondRedisTLSWithClientCert
                                           .... deliberate (2) IntegrationRedisTLS (REDIS_TLS_*
                                                           and a client certificate): the same
                                                           scenario, hence the same difference
  TestBasicTLSConfig, its other 3 ............ n.a.
  TestBasicAuthConfig/WithoutPerSecondRedisAuth  deliberate IntegrationRedisAuth (the same
                                                           difference); its other 3 n.a.
  TestBasicAuthConfigWithRedisCluster/WithoutPerSecondRedisAuth,
  TestBasicAuthConfigWithRedisSentinel/WithoutPerSecondRedisAuth
                                           .... deliberate (2) IntegrationCluster,
                                                           IntegrationSentinel (over TLS, the
                                                           password by IntegrationRedisAuth):
                                                           the same scenario and difference;
                                                           their other 6 n.a.
  TestBasicReloadConfig/BasicWithoutWatchRoot  deliberate  the basic scenario again (files are
                                                           never watched here)
  TestBasicReloadConfig/ReloadWithoutWatchRoot, TestXdsProviderBasicConfigReload .. n.a. (2)
  TestBasicConfigMemcache (3), TestConfigMemcacheWithMaxIdleConns (2),
  TestMultiNodeMemcache ...................... n.a. (6)
  Test_mTLS .................................. same        tests/grpc/test_grpc_tls.py
  TestReloadGRPCServerCerts/WithInitialCert, .../WithNewCertFail .. same (2) test_grpc_tls.py
  TestReloadGRPCServerCerts/WithNewCertOK, .../WithInitialCertFail
                                           .... deliberate (2) new files are read at SIGHUP,
                                                           not when they change
                                                           (test_grpc_tls.py swaps them so)
  TestShareThreshold/WithoutPerSecondRedis ... same        Integration*.test_share_threshold
test/service/ratelimit_test.go: 19 same, 5 deliberate, 1 n.a.
  TestService ................................ same        Service.test_service (its reload
                                                           steps left out)
  TestServiceGlobalShadowMode ................ same        GlobalShadow
  TestRuleShadowMode, TestMixedRuleShadowMode  same (2)    Service.test_rule_shadow_mode
  TestServiceWithCustomRatelimitHeaders,
  TestServiceWithDefaultRatelimitHeaders ..... same (2)    Headers, DefaultHeaders
  TestEmptyDomain, TestEmptyDescriptors ...... deliberate (2) INVALID_ARGUMENT naming the field,
                                                           where upstream answers UNKNOWN; both
                                                           count service_error as there
  TestCacheError ............................. deliberate  CacheError: the store's failure mode
                                                           answers (open), not an error
  TestInitialLoadError ....................... deliberate  Service.test_initial_load_error: a
                                                           configuration that does not load
                                                           stops the start
  TestUnlimited .............................. same        Service.test_unlimited
  TestServiceTracer .......................... n.a.        OpenTelemetry spans inside the process
  TestServiceHealthStatus .................... same        Service.test_health
  TestServiceHealthStatusAtLeastOneConfigLoaded  deliberate serving only once configured, the
                                                           unconfigured state is never seen
  TestServiceGlobalQuotaMode ................. same        GlobalQuota.test_global_quota_mode
  TestMetadataReturnedForPassedDescriptors, ...ForAllPassedDescriptors,
  TestOverlappingMetadataReturnsTheFirstValue  same (3)    GlobalQuota.test_metadata_*
  TestServicePerDescriptorQuotaMode, TestServiceMixedPerDescriptorModes,
  ...MixedPerDescriptorModesUnderLimit, TestServiceQuotaModeOnlyAllOverTheLimit,
  ...QuotaModeOnlySomeOverTheLimit ........... same (5)    Service.test_quota_mode_per_descriptor
  TestServiceQuotaModeWithShadowMode, TestServiceMixedModeWithShadowMode
                                           .... same (2)    GlobalShadow.test_quota_with_shadow_mode

Run by make test (make upstream-scenarios-check) with RL_BUILD naming the build directory.
"""
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "redis_tls"))
from test_grpc import BUILD, stop  # noqa: E402
from test_grpc_yaml import start, to_py  # noqa: E402
from test_redis_tls import Redis as TlsRedis, Sentinel, make_ca, make_leaf  # noqa: E402

CONFIG = """{"listen": {"address": "127.0.0.1", "port": 0}, "ratelimit_config": "ratelimit"}"""


def metrics(d):
    with urllib.request.urlopen("http://%s/metrics" % d.http_addr, timeout=5) as resp:
        return resp.read().decode()


def series(text, name, **labels):
    """The value of the series name{labels} in /metrics text (labels in the order given), or
    None when it is not there."""
    lab = ",".join('%s="%s"' % (k, v) for k, v in labels.items())
    head = "%s{%s} " % (name, lab) if lab else name + " "
    for line in text.splitlines():
        if line.startswith(head):
            return int(float(line[len(head):]))
    return None


class Base(unittest.TestCase):
    FILES = {}
    ENV = {}
    CONFIG = CONFIG

    @classmethod
    def setUpClass(cls):
        start(cls, {"ratelimit/" + k: v for k, v in cls.FILES.items()}, cls.config(), cls.ENV)
        cls.OK = cls.Resp.Code.Value("OK")
        cls.OVER = cls.Resp.Code.Value("OVER_LIMIT")

    @classmethod
    def tearDownClass(cls):
        stop(cls)

    @classmethod
    def config(cls):
        return cls.CONFIG

    def call(self, domain, descriptors, now, hits=1):
        """descriptors: each a list of (key, value) entries, or a pair (entries, override)
        with the override as (requests_per_unit, unit name)."""
        r = self.Req(domain=domain, hits_addend=hits)
        for d in descriptors:
            entries, override = (d, None) if isinstance(d, list) else d
            x = r.descriptors.add()
            for k, v in entries:
                x.entries.add(key=k, value=v)
            if override:
                x.limit.requests_per_unit = override[0]
                x.limit.unit = self.unit(override[1])
        return self.srl(r, timeout=5, metadata=[("ratelimitd-now", str(now))])

    def unit(self, name):
        units = self.Resp.DESCRIPTOR.nested_types_by_name["RateLimit"].enum_types_by_name["Unit"]
        return units.values_by_name[name].number

    def limit(self, st, rpu, unit, name=""):
        """Asserts the status's current_limit."""
        self.assertTrue(st.HasField("current_limit"))
        self.assertEqual((st.current_limit.requests_per_unit, st.current_limit.unit,
                          st.current_limit.name), (rpu, self.unit(unit), name))

    def codes(self, r):
        return [r.overall_code] + [s.code for s in r.statuses]


# ---- test/config: files that load, and their answers ---------------------------------------

BASIC = """domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: key1
    value: value2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
    descriptors:
      - key: subkey2
        value: subvalue1
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: key4
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: key6
    rate_limit: {unlimited: true}
  - key: key7
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: key8
        rate_limit: {unit: second, requests_per_unit: 1, name: key8_name}
"""

MERGE_A = """domain: merge-domain
descriptors:
  - key: key1
    value: value1
    rate_limit: {unit: minute, requests_per_unit: 10}
"""

MERGE_B = """domain: merge-domain
descriptors:
  - key: key2
    value: value2
    rate_limit: {unit: minute, requests_per_unit: 20}
"""

SHADOW = """domain: shadow-domain
descriptors:
  - key: key1
    value: value1
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: key2
    value: value2
    rate_limit: {unit: minute, requests_per_unit: 1}
"""

WILDCARD = """domain: wildcard-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: wild
    value: foo1
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: nestedwild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit: {unit: minute, requests_per_unit: 30}
  - key: midwild
    value: a*b
    rate_limit: {unit: minute, requests_per_unit: 40}
"""

METADATA = """domain: metadata-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
        metadata: {name: service_1}
      - key: subkey1
        value: subvalue1
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
    metadata:
      service_with_quota: {name: service_2}
"""


class ConfigAnswers(Base):
    """The files of test/config that load, and what GetLimit finds for its descriptors, seen
    from outside: the limit in the answer, or none."""
    FILES = {"basic.yaml": BASIC, "merge_a.yaml": MERGE_A, "merge_b.yaml": MERGE_B,
             "shadow.yaml": SHADOW, "wildcard.yaml": WILDCARD}
    ENV = {"MERGE_DOMAIN_CONFIG": "true"}

    def test_basic_config(self):
        # an unknown domain and an unknown key: no limit
        r = self.call("foo", [[("key", "value")]], 1000)
        self.assertEqual(self.codes(r), [self.OK, self.OK])
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        r = self.call("test-domain", [[("key", "value")]], 1000)
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        # key1=value1 has no limit of its own; its subkey1 does, whatever the value
        r = self.call("test-domain", [[("key1", "value1")]], 1000)
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        r = self.call("test-domain", [[("key1", "value1"), ("subkey1", "something")]], 1000)
        self.limit(r.statuses[0], 5, "SECOND")
        self.assertEqual(r.statuses[0].limit_remaining, 4)
        r = self.call("test-domain", [[("key1", "value2")]], 1000)
        self.limit(r.statuses[0], 20, "MINUTE")
        self.assertEqual(r.statuses[0].duration_until_reset.seconds, 20)
        # key2 with any value, its subkey2=subvalue1 below it, and a value it does not know
        r = self.call("test-domain", [[("key2", "value2")]], 1000)
        self.limit(r.statuses[0], 20, "MINUTE")
        r = self.call("test-domain", [[("key2", "value2"), ("subkey2", "subvalue1")]], 1000)
        self.limit(r.statuses[0], 10, "MINUTE")
        r = self.call("test-domain", [[("key2", "value2"), ("subkey2", "other")]], 1000)
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        r = self.call("test-domain", [[("key3", "foo")], [("key4", "foo")]], 1000)
        self.limit(r.statuses[0], 1, "HOUR")
        self.limit(r.statuses[1], 1, "DAY")
        self.assertEqual(r.statuses[0].duration_until_reset.seconds, 2600)
        self.assertEqual(r.statuses[1].duration_until_reset.seconds, 85400)
        # unlimited: no limit, remaining the largest uint32
        r = self.call("test-domain", [[("key6", "foo")]], 1000)
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        self.assertEqual(r.statuses[0].limit_remaining, 4294967295)
        # a named limit: its name in the answer
        r = self.call("test-domain", [[("key7", "x"), ("key8", "y")]], 1000)
        self.limit(r.statuses[0], 1, "SECOND", "key8_name")
        # its stats, under upstream's Prometheus names
        m = metrics(self.d)
        self.assertEqual(series(m, "ratelimit_service_rate_limit_total_hits",
                                domain="test-domain", key1="key1_value1", key2="subkey1"), 1)
        self.assertEqual(series(m, "ratelimit_service_rate_limit_within_limit",
                                domain="test-domain", key1="key3"), 1)

    def test_limit_override(self):
        # a descriptor's own limit replaces the configured one, and counts on its own
        r = self.call("test-domain", [([("key1", "value1"), ("subkey1", "something")],
                                       (42, "HOUR"))], 1010)
        self.limit(r.statuses[0], 42, "HOUR")
        self.assertEqual(r.statuses[0].limit_remaining, 41)
        r = self.call("test-domain", [([("key1", "value1"), ("subkey1", "something")],
                                       (42, "HOUR"))], 1010)
        self.assertEqual(r.statuses[0].limit_remaining, 40)
        # also where the file has no limit
        r = self.call("test-domain", [([("key5", "x")], (10, "DAY"))], 1010)
        self.limit(r.statuses[0], 10, "DAY")

    def test_domain_merge(self):
        r = self.call("merge-domain", [[("key1", "value1")], [("key2", "value2")]], 1000)
        self.limit(r.statuses[0], 10, "MINUTE")
        self.limit(r.statuses[1], 20, "MINUTE")

    def test_shadow_mode(self):
        for _ in range(2):
            r = self.call("shadow-domain", [[("key1", "value1")]], 2000)
        self.assertEqual(self.codes(r), [self.OK, self.OK])  # over, but a shadow limit
        self.limit(r.statuses[0], 1, "MINUTE")
        for _ in range(2):
            r = self.call("shadow-domain", [[("key2", "value2")]], 2000)
        self.assertEqual(self.codes(r), [self.OVER, self.OVER])
        m = metrics(self.d)
        self.assertEqual(series(m, "ratelimit_service_rate_limit_shadow_mode",
                                domain="shadow-domain", key1="key1_value1"), 1)
        self.assertEqual(series(m, "ratelimit_service_rate_limit_over_limit",
                                domain="shadow-domain", key1="key1_value1"), 1)

    def test_wildcard(self):
        def rpu(entries):
            st = self.call("wildcard-domain", [entries], 3000).statuses[0]
            return st.current_limit.requests_per_unit if st.HasField("current_limit") else None
        self.assertEqual(rpu([("wild", "foo1")]), 10)  # the exact value first
        self.assertEqual(rpu([("wild", "foo2")]), 20)
        self.assertEqual(rpu([("wild", "foo")]), 20)  # * matches nothing too
        self.assertEqual(rpu([("wild", "bar")]), None)
        self.assertEqual(rpu([("nestedwild", "val1"), ("wild", "goo2")]), 30)
        self.assertEqual(rpu([("nestedwild", "val1"), ("wild", "foo2")]), None)
        self.assertEqual(rpu([("midwild", "axyzb")]), 40)
        self.assertEqual(rpu([("midwild", "axyzc")]), None)


class Metadata(Base):
    """TestMetadata: a limit's metadata, seen from outside in dynamic_metadata."""
    FILES = {"metadata.yaml": METADATA}
    ENV = {"RESPONSE_DYNAMIC_METADATA": "true"}

    def test_metadata(self):
        r = self.call("metadata-domain", [[("key1", "value1"), ("subkey1", "something")]], 1000)
        self.limit(r.statuses[0], 5, "SECOND")
        self.assertEqual(to_py(r.dynamic_metadata)["metadata"], {"name": "service_1"})
        r = self.call("metadata-domain", [[("key2", "something")]], 1000)
        self.limit(r.statuses[0], 20, "MINUTE")
        self.assertEqual(to_py(r.dynamic_metadata)["metadata"],
                         {"service_with_quota": {"name": "service_2"}})
        m = metrics(self.d)
        self.assertEqual(series(m, "ratelimit_service_rate_limit_total_hits",
                                domain="metadata-domain", key1="key1_value1", key2="subkey1"), 1)
        self.assertEqual(series(m, "ratelimit_service_rate_limit_within_limit",
                                domain="metadata-domain", key1="key2"), 1)


# ---- test/config: files refused --------------------------------------------------------------

REFUSED = {
    # upstream's file name: (its text, the message upstream gives after "<file>: ")
    "bad_limit_unit.yaml": ("domain: test-domain\ndescriptors:\n  - key: key1\n    value: "
                            "value1\n    rate_limit:\n      unit: foo\n      "
                            "requests_per_unit: 5\n", "invalid rate limit unit 'foo'"),
    "bad_yaml.yaml": ("'''\n", "error loading config file: line 2"),
    "duplicate_key.yaml": ("domain: test-domain\ndescriptors:\n  - key: key1\n    value: "
                           "value1\n\n  - key: key1\n    value: value1\n",
                           "duplicate descriptor composite key 'test-domain.key1_value1'"),
    "empty_domain.yaml": ("descriptors:\n", "config file cannot have empty domain"),
    "empty_key.yaml": ("domain: test-domain\ndescriptors:\n  - value: value1\n",
                       "descriptor has empty key"),
    "misspelled_key.yaml": ("domain: test-domain\ndescriptors:\n  - key: key1\n    value: "
                            "value1\n    ratelimit:\n      unit: day\n      "
                            "requests_per_unit: 5\n", "config error, unknown key 'ratelimit'"),
    "misspelled_key2.yaml": ("domain: test-domain\ndescriptors:\n  - key: key1\n    value: "
                             "value1\n    rate_limit:\n      unit: day\n      "
                             "requestsperunit: 5\n",
                             "config error, unknown key 'requestsperunit'"),
    "non_map_list.yaml": ("domain: test-domain\ndescriptors:\n  - a\n  - b\n  - c\n",
                          "config error, yaml file contains list of type other than map: a"),
    "non_string_key.yaml": ("0.25: test-domain\ndescriptors:\n  - key: key1\n    value: "
                            "value1\n    rate_limit:\n      unit: day\n      "
                            "requests_per_unit: 5\n",
                            "config error, key is not of type string: 0.25"),
    "replaces_empty.yaml": ("domain: test-domain\ndescriptors:\n  - key: key1\n    value: "
                            "value1\n    descriptors:\n      - key: subkey1\n        "
                            "rate_limit:\n          name: self\n          replaces:\n"
                            "            - name:\n          unit: second\n          "
                            "requests_per_unit: 5\n",
                            "should not have an empty replaces entry"),
    "replaces_self.yaml": ("domain: test-domain\ndescriptors:\n  - key: key1\n    value: "
                           "value1\n    descriptors:\n      - key: subkey1\n        "
                           "rate_limit:\n          name: self\n          replaces:\n"
                           "            - name: self\n          unit: second\n          "
                           "requests_per_unit: 5\n",
                           "replaces should not contain name of same descriptor"),
    "unlimited_with_unit.yaml": ("domain: test-domain\ndescriptors:\n  - key: foo\n    "
                                 "rate_limit:\n      unlimited: true\n      unit: day\n      "
                                 "requests_per_unit: 25\n",
                                 "should not specify rate limit unit when unlimited"),
}


def check_config(path, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([os.path.join(BUILD, "ratelimitd"), "--check-config", path],
                       capture_output=True, text=True, env=e, timeout=20)
    return p.returncode, p.stdout + p.stderr


class ConfigErrors(unittest.TestCase):
    """Each refused file of test/config: refused by --check-config (as at start), with upstream's
    message after the file's name and the YAML path of the fault."""

    def test_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            for name, (text, message) in sorted(REFUSED.items()):
                with self.subTest(name):
                    path = os.path.join(tmp, name)
                    with open(path, "w") as f:
                        f.write(text)
                    rc, out = check_config(path)
                    self.assertEqual(rc, 1, out)
                    self.assertTrue(out.startswith(path + ": "), out)
                    self.assertIn(message, out)

    def test_duplicate_domain(self):
        with tempfile.TemporaryDirectory() as tmp:
            for name, text in (("basic_config.yaml", BASIC),
                               ("duplicate_domain.yaml", "domain: test-domain\ndescriptors:\n")):
                with open(os.path.join(tmp, name), "w") as f:
                    f.write(text)
            rc, out = check_config(tmp)
            self.assertEqual(rc, 1)
            self.assertIn("duplicate_domain.yaml: domain: duplicate domain 'test-domain' in "
                          "config file", out)

    def test_duplicate_key_domain_merge(self):
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("a.yaml", "b.yaml"):
                with open(os.path.join(tmp, name), "w") as f:
                    f.write(MERGE_A)
            rc, out = check_config(tmp, {"MERGE_DOMAIN_CONFIG": "true"})
            self.assertEqual(rc, 1)
            self.assertIn("b.yaml: descriptors[0]: duplicate descriptor composite key "
                          "'merge-domain.key1_value1'", out)


# ---- test/service ---------------------------------------------------------------------------

SERVICE = """domain: different-domain
descriptors:
  - key: foo
    value: bar
    rate_limit: {unit: minute, requests_per_unit: 10, name: key_name}
  - key: shadow1
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shadow2
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: regular
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
"""

UNLIMITED = """domain: some-domain
descriptors:
  - key: foo
    value: bar
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: baz
    value: qux
    rate_limit: {unlimited: true}
"""


class Service(Base):
    FILES = {"service.yaml": SERVICE, "unlimited.yaml": UNLIMITED}

    def fill(self, key, value, now, n=1):
        """Uses up n hits of key=value's limit at now."""
        self.call("different-domain", [[(key, value)]], now, hits=n)

    def test_service(self):
        r = self.call("test-domain", [[("hello", "world")]], 100)
        self.assertEqual(self.codes(r), [self.OK, self.OK])
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        self.assertEqual(r.statuses[0].limit_remaining, 0)
        self.fill("foo", "bar", 100, 10)
        r = self.call("different-domain", [[("foo", "bar")], [("hello", "world")]], 100)
        self.assertEqual(self.codes(r), [self.OVER, self.OVER, self.OK])
        self.limit(r.statuses[0], 10, "MINUTE", "key_name")
        self.assertEqual(r.statuses[0].limit_remaining, 0)
        self.assertFalse(r.statuses[1].HasField("current_limit"))
        # the order of the descriptors does not matter
        r = self.call("different-domain", [[("hello", "world")], [("foo", "bar")]], 100)
        self.assertEqual(self.codes(r), [self.OVER, self.OK, self.OVER])
        m = metrics(self.d)
        self.assertIn("\nratelimit_service_config_load_success 1\n", m)
        self.assertIn("\nratelimit_service_global_shadow_mode 0\n", m)

    def test_rule_shadow_mode(self):
        # both shadow limits over: OK
        self.fill("shadow1", "a", 200)
        self.fill("shadow2", "a", 200)
        r = self.call("different-domain", [[("shadow1", "a")], [("shadow2", "a")]], 200)
        self.assertEqual(self.codes(r), [self.OK, self.OK, self.OK])
        # a shadow limit and a regular one, both over: the regular one decides
        self.fill("regular", "a", 200)
        r = self.call("different-domain", [[("shadow1", "a")], [("regular", "a")]], 200)
        self.assertEqual(self.codes(r), [self.OVER, self.OK, self.OVER])

    def test_quota_mode_per_descriptor(self):
        # TestServicePerDescriptorQuotaMode: the regular limit over, the quota one not
        self.fill("regular", "q1", 300)
        r = self.call("different-domain", [[("regular", "q1")], [("quota", "q1")]], 300)
        self.assertEqual(self.codes(r), [self.OVER, self.OVER, self.OK])
        # TestServiceMixedPerDescriptorModes: the only quota limit over: OVER_LIMIT
        self.fill("quota", "q2", 300)
        r = self.call("different-domain", [[("regular", "q2")], [("quota", "q2")]], 300)
        self.assertEqual(self.codes(r), [self.OVER, self.OK, self.OVER])
        # ...UnderLimit: neither over
        r = self.call("different-domain", [[("regular", "q3")], [("quota", "q3")]], 300)
        self.assertEqual(self.codes(r), [self.OK, self.OK, self.OK])
        # TestServiceQuotaModeOnlyAllOverTheLimit
        self.fill("quota", "q4", 300)
        self.fill("quota2", "q4", 300)
        r = self.call("different-domain", [[("quota", "q4")], [("quota2", "q4")]], 300)
        self.assertEqual(self.codes(r), [self.OVER, self.OVER, self.OVER])
        # TestServiceQuotaModeOnlySomeOverTheLimit
        r = self.call("different-domain", [[("quota", "q4")], [("quota2", "q5")]], 300)
        self.assertEqual(self.codes(r), [self.OK, self.OVER, self.OK])

    def test_unlimited(self):
        r = self.call("some-domain", [[("foo", "bar")], [("hello", "world")], [("baz", "qux")]],
                      100)
        self.assertEqual(self.codes(r), [self.OK] * 4)
        self.limit(r.statuses[0], 10, "MINUTE")
        self.assertEqual(r.statuses[0].limit_remaining, 9)
        self.assertFalse(r.statuses[1].HasField("current_limit"))
        self.assertEqual(r.statuses[1].limit_remaining, 0)
        self.assertFalse(r.statuses[2].HasField("current_limit"))
        self.assertEqual(r.statuses[2].limit_remaining, 4294967295)

    def test_empty_domain_and_descriptors(self):
        # upstream answers these with UNKNOWN ("rate limit domain must not be empty", "rate
        # limit descriptor list must not be empty": a panic of its service); ratelimitd with
        # INVALID_ARGUMENT naming the field, as gRPC means that code
        for domain, descriptors, message in (
                ("", [[("hello", "world")]], "domain: required"),
                ("test-domain", [], "descriptors: at least one required")):
            with self.assertRaises(grpc.RpcError) as e:
                self.call(domain, descriptors, 100)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(message, e.exception.details())
        # each counted as upstream's service_error
        self.assertEqual(series(metrics(self.d), "ratelimit_service_should_rate_limit_error",
                                err_type="service_error"), 2)

    def test_health(self):
        from test_grpc import HEALTH, load_messages
        m = load_messages(self.tmp.name)
        hreq = m["grpc.health.v1.HealthCheckRequest"]
        hresp = m["grpc.health.v1.HealthCheckResponse"]
        check = self.ch.unary_unary(HEALTH, request_serializer=hreq.SerializeToString,
                                    response_deserializer=hresp.FromString)
        r = check(hreq(service="ratelimit"), timeout=5)
        self.assertEqual(r.status, hresp.ServingStatus.Value("SERVING"))

    def test_initial_load_error(self):
        # upstream starts and answers "no rate limit configuration loaded"; ratelimitd does not
        # start on a configuration that does not load
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "bad.yaml"), "w") as f:
                f.write("domain: d\ndescriptors:\n  - value: v\n")
            p = subprocess.run([os.path.join(BUILD, "ratelimitd"), "--config",
                                os.path.join(tmp, "bad.yaml"), "--port", "0"],
                               capture_output=True, text=True, timeout=20)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("descriptor has empty key", p.stderr)


QUOTA = """domain: quota-domain
descriptors:
  - key: foo
    value: bar
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: hello
    value: world
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: regular
    value: limit
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {name: service_1}
  - key: quota
    value: limit
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {name: service_2}
  - key: other
    value: limit
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {some_other_name: service_2}
  - key: unlimited
    rate_limit: {unlimited: true}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
"""


class GlobalQuota(Base):
    """QUOTA_MODE=true (upstream's global quota mode): every descriptor is in quota mode, so a
    request is OVER_LIMIT only when all of its descriptors are over."""
    FILES = {"quota.yaml": QUOTA}
    ENV = {"QUOTA_MODE": "true", "RESPONSE_DYNAMIC_METADATA": "true"}

    def test_global_quota_mode(self):
        # TestServiceGlobalQuotaMode: both over, OVER_LIMIT
        self.call("quota-domain", [[("foo", "bar")]], 100, hits=10)
        self.call("quota-domain", [[("hello", "world")]], 100, hits=5)
        r = self.call("quota-domain", [[("foo", "bar")], [("hello", "world")]], 100)
        self.assertEqual(self.codes(r), [self.OVER, self.OVER, self.OVER])
        self.assertEqual([s.limit_remaining for s in r.statuses], [0, 0])
        # the next minute: one over, the other not: OK, and the one with room counts the hit
        self.call("quota-domain", [[("hello", "world")]], 160, hits=5)
        r = self.call("quota-domain", [[("foo", "bar")], [("hello", "world")]], 160)
        self.assertEqual(self.codes(r), [self.OK, self.OK, self.OVER])
        self.assertEqual([s.limit_remaining for s in r.statuses], [9, 0])
        # an over descriptor beside one that matches no limit (a quota descriptor that
        # passed), or beside an unlimited one (which does not count)
        self.call("quota-domain", [[("foo", "bar")]], 220, hits=10)
        r = self.call("quota-domain", [[("foo", "bar")], [("no", "limit")]], 220)
        self.assertEqual(self.codes(r), [self.OK, self.OVER, self.OK])
        r = self.call("quota-domain", [[("foo", "bar")], [("unlimited", "x")]], 220)
        self.assertEqual(self.codes(r), [self.OVER, self.OVER, self.OK])

    def test_override_and_shadow(self):
        # (at t = 700, after the tests before it by name) a descriptor's own limit is in quota
        # mode too: over alone, OVER_LIMIT
        ov = ([("ov", "x")], (1, "MINUTE"))
        self.assertEqual(self.codes(self.call("quota-domain", [ov], 700)), [self.OK, self.OK])
        self.assertEqual(self.codes(self.call("quota-domain", [ov], 700)),
                         [self.OVER, self.OVER])
        # a shadow_mode limit answers OK over its limit, so it passes: the request is OK
        self.call("quota-domain", [[("shadowed", "y")]], 700)
        r = self.call("quota-domain", [ov, [("shadowed", "y")]], 700)
        self.assertEqual(self.codes(r), [self.OK, self.OVER, self.OK])

    def test_metadata_passed_descriptors(self):
        # TestMetadataReturnedForPassedDescriptors: quota over, regular with room: OK, the
        # metadata of the one that passed
        # (at t = 600: the tests run in name order and the clock does not go back)
        self.call("quota-domain", [[("quota", "limit")]], 600, hits=5)
        r = self.call("quota-domain", [[("regular", "limit")], [("quota", "limit")]], 600)
        self.assertEqual(self.codes(r), [self.OK, self.OK, self.OVER])
        self.assertEqual(to_py(r.dynamic_metadata)["metadata"], {"name": "service_1"})

    def test_metadata_all_passed_and_overlapping(self):
        # TestMetadataReturnedForAllPassedDescriptors and ...OverlappingMetadataReturnsTheFirst
        r = self.call("quota-domain", [[("regular", "limit")], [("other", "limit")]], 500)
        self.assertEqual(to_py(r.dynamic_metadata)["metadata"],
                         {"name": "service_1", "some_other_name": "service_2"})
        r = self.call("quota-domain", [[("regular", "limit")], [("quota", "limit")]], 500)
        self.assertEqual(self.codes(r), [self.OK, self.OK, self.OK])
        self.assertEqual(to_py(r.dynamic_metadata)["metadata"], {"name": "service_1"})


class GlobalShadow(Base):
    """SHADOW_MODE=true: TestServiceGlobalShadowMode, TestServiceQuotaModeWithShadowMode and
    TestServiceMixedModeWithShadowMode."""
    FILES = {"service.yaml": SERVICE}
    ENV = {"SHADOW_MODE": "true"}

    def test_global_shadow_mode(self):
        self.call("different-domain", [[("foo", "bar")]], 100, hits=10)
        r = self.call("different-domain", [[("foo", "bar")], [("hello", "world")]], 100)
        self.assertEqual(self.codes(r), [self.OK, self.OVER, self.OK])
        self.assertIn("\nratelimit_service_global_shadow_mode 1\n", metrics(self.d))

    def test_quota_with_shadow_mode(self):
        # a regular and a quota mode limit, both over: OK overall, each OVER_LIMIT
        for k in ("regular", "quota", "quota2"):
            self.call("different-domain", [[(k, "s")]], 200)
        r = self.call("different-domain", [[("regular", "s")], [("quota", "s")]], 200)
        self.assertEqual(self.codes(r), [self.OK, self.OVER, self.OVER])
        r = self.call("different-domain", [[("quota", "s")], [("quota2", "s")]], 200)
        self.assertEqual(self.codes(r), [self.OK, self.OVER, self.OVER])


HEADERS = """domain: different-domain
descriptors:
  - key: foo
    value: bar
    rate_limit: {unit: minute, requests_per_unit: 10}
"""


class Headers(Base):
    """TestServiceWithCustomRatelimitHeaders: the limit, remaining and reset of the descriptor
    nearest its limit, under the names given (at t = 62 the minute ends in 58 s)."""
    FILES = {"headers.yaml": HEADERS}
    ENV = {"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "A-Ratelimit-Limit",
           "LIMIT_REMAINING_HEADER": "A-Ratelimit-Remaining",
           "LIMIT_RESET_HEADER": "A-Ratelimit-Reset"}
    NAMES = ("A-Ratelimit-Limit", "A-Ratelimit-Remaining", "A-Ratelimit-Reset")

    def test_headers(self):
        self.call("different-domain", [[("foo", "bar")]], 62, hits=10)
        r = self.call("different-domain", [[("foo", "bar")], [("hello", "world")]], 62)
        self.assertEqual(self.codes(r), [self.OVER, self.OVER, self.OK])
        self.assertEqual([(h.key, h.value) for h in r.response_headers_to_add],
                         list(zip(self.NAMES, ("10", "0", "58"))))


class DefaultHeaders(Headers):
    """TestServiceWithDefaultRatelimitHeaders."""
    ENV = {"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}
    NAMES = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")


# ---- test/config: the stats a limit is counted under -----------------------------------------

STATS_FILES = {
    # TestDetailedMetric: four small configurations and its "realistic" one
    "nested1.yaml": """domain: nested1
descriptors:
  - key: key-1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: key-2
        rate_limit: {unit: minute, requests_per_unit: 5}
""",
    "nested2.yaml": """domain: nested2
descriptors:
  - key: key-1
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: key-2
        rate_limit: {unit: minute, requests_per_unit: 5}
""",
    "nested3.yaml": """domain: nested3
descriptors:
  - key: key-1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: key-2
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
""",
    "nested.yaml": """domain: nested
descriptors:
  - key: key_1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: key_1
    value: some-value-for-key-1
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: key_2
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5000}
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: key_2
    value: specific-id
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 50000}
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 100}
""",
    # TestValueToMetric_*
    "v2m.yaml": """domain: v2m
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
""",
    "v2m-level.yaml": """domain: v2m-level
descriptors:
  - key: k1
    value_to_metric: true
    descriptors:
      - key: k2
        rate_limit: {unit: second, requests_per_unit: 1}
""",
    "v2m-mid.yaml": """domain: v2m-mid
descriptors:
  - key: k1
    descriptors:
      - key: k2
        value_to_metric: true
        descriptors:
          - key: k3
            rate_limit: {unit: second, requests_per_unit: 1}
""",
    "v2m-none.yaml": """domain: v2m-none
descriptors:
  - key: k1
    descriptors:
      - key: k2
        rate_limit: {unit: second, requests_per_unit: 1}
""",
    "v2m-detailed.yaml": """domain: v2m-detailed
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            detailed_metric: true
            rate_limit: {unit: minute, requests_per_unit: 60}
""",
    "v2m-configured.yaml": """domain: v2m-configured
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value: GET
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
      - key: http_method
        value: POST
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 30}
""",
    "v2m-wild.yaml": """domain: v2m-wild
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 100}
""",
    # TestShareThreshold (its share_threshold.yaml)
    "share.yaml": """domain: share
descriptors:
  - {key: files, value: files/*, share_threshold: true,
     rate_limit: {unit: minute, requests_per_unit: 100}}
  - key: nested
    value: parent
    descriptors:
      - {key: files, value: nested/*, share_threshold: true,
         rate_limit: {unit: minute, requests_per_unit: 200}}
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - {key: files, value: nested/*, share_threshold: true,
         rate_limit: {unit: minute, requests_per_unit: 300}}
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - {key: method, rate_limit: {unit: minute, requests_per_unit: 60}}
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - {key: endpoint, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 80}}
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        share_threshold: false
        descriptors:
          - {key: type, rate_limit: {unit: minute, requests_per_unit: 120}}
  - key: user
    value: user/*
    share_threshold: true
    descriptors:
      - key: resource
        value: res/*
        share_threshold: true
        descriptors:
          - {key: action, rate_limit: {unit: minute, requests_per_unit: 150}}
  - {key: file, value: test1, rate_limit: {unit: minute, requests_per_unit: 50}}
  - {key: file, value: test*, share_threshold: true,
     rate_limit: {unit: minute, requests_per_unit: 100}}
  - {key: midpath, value: /api*v1, share_threshold: true,
     rate_limit: {unit: minute, requests_per_unit: 100}}
  - {key: multiroute, value: svc*ep*rpc, share_threshold: true,
     rate_limit: {unit: minute, requests_per_unit: 50}}
  - {key: midroute, value: /api*v2, share_threshold: true, value_to_metric: true,
     rate_limit: {unit: minute, requests_per_unit: 80}}
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors:
      - {key: resource, value: res*v2, share_threshold: true,
         rate_limit: {unit: minute, requests_per_unit: 60}}
""",
    # TestWildcardStatsBehavior: one domain per sub-test
    "w1.yaml": "domain: w1\ndescriptors:\n  - {key: wild, value: foo*, "
               "rate_limit: {unit: minute, requests_per_unit: 20}}\n",
    "w2.yaml": "domain: w2\ndescriptors:\n  - {key: wild, value: foo*, value_to_metric: true, "
               "rate_limit: {unit: minute, requests_per_unit: 20}}\n",
    "w3.yaml": "domain: w3\ndescriptors:\n  - {key: wild, value: foo*, share_threshold: true, "
               "rate_limit: {unit: minute, requests_per_unit: 20}}\n",
    "w4.yaml": "domain: w4\ndescriptors:\n  - {key: wild, value: foo*, share_threshold: true, "
               "value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 20}}\n",
    "w5.yaml": """domain: w5
descriptors:
  - key: wild
    value: foo*
    descriptors:
      - key: other
        value_to_metric: true
        descriptors:
          - {key: limit, rate_limit: {unit: minute, requests_per_unit: 20}}
""",
    "w6.yaml": "domain: w6\ndescriptors:\n  - {key: wild, value: foo*bar*, "
               "rate_limit: {unit: minute, requests_per_unit: 20}}\n",
    "w7.yaml": "domain: w7\ndescriptors:\n  - {key: wild, value: foo*bar*, value_to_metric: true, "
               "rate_limit: {unit: minute, requests_per_unit: 20}}\n",
}

# (upstream's case, the request's entries, the limit's requests_per_unit, the stats key upstream
# gives: domain.key1.key2...)
STATS_CASES = [
    ("detailed: top-level key requested", [("key-1", "value-1")], 100, "nested1.key-1_value-1"),
    ("detailed: top-level, no detailed_metric", [("key-1", "value-1")], 100, "nested2.key-1"),
    ("detailed: fully nested", [("key-1", "value-1"), ("key-2", "value-2")], 5,
     "nested3.key-1_value-1.key-2_value-2"),
    ("detailed: fully nested, no detailed_metric", [("key-1", "value-1"), ("key-2", "value-2")],
     5, "nested2.key-1.key-2"),
    ("detailed: simple request", [("key_1", "value-for-key-1")], 500,
     "nested.key_1_value-for-key-1"),
    ("detailed: second descriptor not nested", [("key_2", "key-2-value")], 5000,
     "nested.key_2_key-2-value"),
    ("detailed: nested request", [("key_2", "key-2-value"), ("key_3", "requested-key3-value")],
     5, "nested.key_2_key-2-value.key_3_requested-key3-value"),
    ("v2m: runtime values", [("route", "draw"), ("http_method", "GET"), ("subject_id", "123")],
     60, "v2m.route_draw.http_method_GET.subject_id"),
    ("v2m: default key includes value at that level", [("k1", "A"), ("k2", "foo")], 1,
     "v2m-level.k1_A.k2"),
    ("v2m: mid level only", [("k1", "X"), ("k2", "Y"), ("k3", "Z")], 1, "v2m-mid.k1.k2_Y.k3"),
    ("v2m: no flag", [("k1", "X"), ("k2", "Y")], 1, "v2m-none.k1.k2"),
    ("v2m: detailed_metric wins", [("route", "draw"), ("http_method", "GET"),
                                   ("subject_id", "123")], 60,
     "v2m-detailed.route_draw.http_method_GET.subject_id_123"),
    ("v2m: configured values GET", [("route", "api"), ("http_method", "GET"),
                                    ("subject_id", "user123")], 60,
     "v2m-configured.route_api.http_method_GET.subject_id"),
    ("v2m: configured values POST", [("route", "api"), ("http_method", "POST"),
                                     ("subject_id", "user456")], 30,
     "v2m-configured.route_api.http_method_POST.subject_id"),
    ("v2m: wildcard alice", [("user", "alice"), ("action", "readfile"),
                             ("resource", "documents")], 100,
     "v2m-wild.user_alice.action_readfile.resource"),
    ("v2m: wildcard bob", [("user", "bob"), ("action", "readdata"), ("resource", "database")],
     100, "v2m-wild.user_bob.action_readdata.resource"),
    ("v2m: empty route", [("route", ""), ("http_method", "GET"), ("subject_id", "123")], 60,
     "v2m.route.http_method_GET.subject_id"),
    ("v2m: empty method", [("route", "draw"), ("http_method", ""), ("subject_id", "123")], 60,
     "v2m.route_draw.http_method.subject_id"),
    ("v2m: both empty", [("route", ""), ("http_method", ""), ("subject_id", "123")], 60,
     "v2m.route.http_method.subject_id"),
    ("v2m: full key matches stats key", [("route", "api"), ("http_method", "GET"),
                                         ("subject_id", "user123")], 60,
     "v2m.route_api.http_method_GET.subject_id"),
    ("share: basic a.pdf", [("files", "files/a.pdf")], 100, "share.files_files/*"),
    ("share: basic b.csv", [("files", "files/b.csv")], 100, "share.files_files/*"),
    ("share: with value_to_metric", [("route", "api/v1"), ("method", "GET")], 60,
     "share.route_api/*.method"),
    ("share: with detailed_metric", [("service", "svc/user"), ("endpoint", "get")], 80,
     "share.service_svc/*.endpoint_get"),
    ("share: nested", [("nested", "parent"), ("files", "nested/file1.txt")], 200,
     "share.nested_parent.files_nested/*"),
    ("share: multiple", [("files", "top/file1.txt"), ("files", "nested/file1.txt")], 300,
     "share.files_top/*.files_nested/*"),
    ("share: parent only", [("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")], 120,
     "share.path_path/*.file_file/*.type"),
    ("share: parent and child", [("user", "user/alice"), ("resource", "res/file1"),
                                 ("action", "read")], 150,
     "share.user_user/*.resource_res/*.action"),
    ("share: explicit value first", [("file", "test1")], 50, "share.file_test1"),
    ("share: wildcard test2", [("file", "test2")], 100, "share.file_test*"),
    ("share: wildcard test123", [("file", "test123")], 100, "share.file_test*"),
    ("share: middle wildcard", [("midpath", "/api-beta-v1")], 100, "share.midpath_/api*v1"),
    ("share: middle wildcard, no match", [("midpath", "/api/v2")], None, None),
    ("share: multi wildcard", [("multiroute", "svcXXXepYYYrpc")], 50,
     "share.multiroute_svc*ep*rpc"),
    ("share: multi wildcard, no match", [("multiroute", "svcABCrpc")], None, None),
    ("share: priority over value_to_metric", [("midroute", "/api-beta-v2")], 80,
     "share.midroute_/api*v2"),
    ("share: nested middle wildcards", [("tenant", "t99prod"), ("resource", "resBBBv2")], 60,
     "share.tenant_t*prod.resource_res*v2"),
    ("wildcard: no flags", [("wild", "foo1")], 20, "w1.wild_foo*"),
    ("wildcard: value_to_metric", [("wild", "foo1")], 20, "w2.wild_foo1"),
    ("wildcard: share_threshold", [("wild", "foo1")], 20, "w3.wild_foo*"),
    ("wildcard: share_threshold with value_to_metric", [("wild", "foo1")], 20, "w4.wild_foo*"),
    ("wildcard: value_to_metric in another descriptor", [("wild", "foo1"), ("other", "bar"),
                                                         ("limit", "X")], 20,
     "w5.wild_foo*.other_bar.limit"),
    ("wildcard: middle+trailing, no flags", [("wild", "foo1bar2")], 20, "w6.wild_foo*bar*"),
    ("wildcard: middle+trailing, other value", [("wild", "fooXbarYZ")], 20, "w6.wild_foo*bar*"),
    ("wildcard: middle+trailing, value_to_metric", [("wild", "foo123bar456")], 20,
     "w7.wild_foo123bar456"),
]


class Stats(Base):
    """The series upstream counts a limit under, for each case of TestDetailedMetric,
    TestValueToMetric_*, TestShareThreshold and TestWildcardStatsBehavior: the stats key
    domain.k1.k2 is ratelimit_service_rate_limit_total_hits{domain, key1, key2}, one hit each."""
    FILES = STATS_FILES

    def test_stats_keys(self):
        for name, entries, rpu, key in STATS_CASES:
            with self.subTest(name):
                domain, _, rest = (key or "share.").partition(".")
                labels = {"domain": domain}
                labels.update({"key%d" % (i + 1): k for i, k in enumerate(rest.split("."))})
                before = series(metrics(self.d), "ratelimit_service_rate_limit_total_hits",
                                **labels) if key else None
                r = self.call(domain, [entries], 5000)
                if rpu is None:
                    self.assertFalse(r.statuses[0].HasField("current_limit"))
                    continue
                self.assertEqual(r.statuses[0].current_limit.requests_per_unit, rpu)
                after = series(metrics(self.d), "ratelimit_service_rate_limit_total_hits",
                               **labels)
                self.assertEqual(after, (before or 0) + 1, metrics(self.d) if after is None
                                 else None)


class CacheError(Base):
    """TestCacheError: the store fails. Upstream answers the call with an error (UNKNOWN,
    "cache error") and counts redis_error; ratelimitd applies the store's failure mode."""

    @classmethod
    def config(cls):
        return ('{"listen": {"address": "127.0.0.1", "port": 0}, "ratelimit_config": '
                '"ratelimit", "store": {"type": "redis", "url": "redis://127.0.0.1:%d/0"}}'
                % free_port())
    FILES = {"service.yaml": SERVICE}

    def test_cache_error(self):
        # Redis unreachable: the YAML's limits fail open (their on_store_error), so the call
        # is answered OK with no limit and the fallback is counted; no call failed
        r = self.call("different-domain", [[("foo", "bar")]], 100)
        self.assertEqual(self.codes(r), [self.OK, self.OK])
        m = metrics(self.d)
        self.assertEqual(series(m, "ratelimit_store_fallback_total", level="rls", mode="open"), 1)
        self.assertEqual(series(m, "ratelimit_service_should_rate_limit_error",
                                err_type="redis_error"), 0)

# ---- test/integration -----------------------------------------------------------------------

BASIC_RT = """domain: basic
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: one_per_minute
    rate_limit: {unit: minute, requests_per_unit: 1}
"""

ANOTHER_RT = """domain: another
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: key4
    rate_limit: {unit: day, requests_per_unit: 20}
"""

SHARE_RT = """domain: share-threshold-test
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    rate_limit: {unit: hour, requests_per_unit: 10}
"""


class Integration(Base):
    """testBasicBaseConfig and testShareThreshold of its integration test, on the memory store
    (the subclass runs them on Redis). Its runtime files basic.yaml, another.yaml and
    share_threshold.yaml, without the _local keys of its local cache."""
    FILES = {"basic.yaml": BASIC_RT, "another.yaml": ANOTHER_RT, "share.yaml": SHARE_RT}

    def total(self, m, stat, domain, key):
        return series(m, "ratelimit_service_rate_limit_" + stat, domain=domain, key1=key) or 0

    def test_basic(self):
        r = self.call("foo", [[("hello", "world")]], 1000)
        self.assertEqual(self.codes(r), [self.OK, self.OK])
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        r = self.call("basic", [[("key1", "foo")]], 1000)
        self.assertEqual(self.codes(r), [self.OK, self.OK])
        self.limit(r.statuses[0], 50, "SECOND")
        self.assertEqual(r.statuses[0].limit_remaining, 49)
        self.assertEqual(r.statuses[0].duration_until_reset.seconds, 1)
        self.assertEqual(self.total(metrics(self.d), "total_hits", "basic", "key1"), 1)
        # 25 requests against a minute's 20
        for i in range(25):
            r = self.call("another", [[("key2", "random1")]], 1000)
            code = self.OK if i < 20 else self.OVER
            self.assertEqual(self.codes(r), [code, code])
            self.limit(r.statuses[0], 20, "MINUTE")
            self.assertEqual(r.statuses[0].limit_remaining, max(0, 20 - (i + 1)))
            self.assertEqual(r.statuses[0].duration_until_reset.seconds, 20)
            m = metrics(self.d)
            self.assertEqual(self.total(m, "total_hits", "another", "key2"), i + 1)
            self.assertEqual(self.total(m, "over_limit", "another", "key2"), max(0, i - 19))
        # two keys of the domain in one request: key3's hour of 10 runs out first. Upstream
        # counts key2 in the requests key3 denies (20 - (i + 1) left); ratelimitd counts a
        # denied request against neither, as upstream does with
        # STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: key2 keeps 10
        for i in range(15):
            r = self.call("another", [[("key2", "random2")], [("key3", "random2")]], 1000)
            code = self.OK if i < 10 else self.OVER
            self.assertEqual(self.codes(r), [code, self.OK, code])
            self.limit(r.statuses[0], 20, "MINUTE")
            self.limit(r.statuses[1], 10, "HOUR")
            self.assertEqual(r.statuses[0].limit_remaining, 20 - (i + 1) if i < 10 else 10)
            self.assertEqual(r.statuses[1].limit_remaining, max(0, 10 - (i + 1)))
            self.assertEqual(r.statuses[1].duration_until_reset.seconds, 2600)
            m = metrics(self.d)
            # total_hits counts every hit asked for, as upstream's
            self.assertEqual(self.total(m, "total_hits", "another", "key2"), i + 26)
            self.assertEqual(self.total(m, "over_limit", "another", "key2"), 5)
            self.assertEqual(self.total(m, "total_hits", "another", "key3"), i + 1)
            self.assertEqual(self.total(m, "over_limit", "another", "key3"), max(0, i - 9))
        # DurationUntilReset ticks down
        r1 = self.call("another", [[("key4", "durTest")]], 1000)
        r2 = self.call("another", [[("key4", "durTest")]], 1002)
        self.assertEqual(r1.statuses[0].duration_until_reset.seconds, 85400)
        self.assertEqual(r2.statuses[0].duration_until_reset.seconds, 85398)

    def test_share_threshold(self):
        # files/*: ten requests over any values use up one shared hour of 10
        for i in range(10):
            r = self.call("share-threshold-test", [[("files", "files/a.pdf")]], 5000)
            self.assertEqual(r.overall_code, self.OK)
        r = self.call("share-threshold-test", [[("files", "files/b.csv")]], 5000)
        self.assertEqual(self.codes(r), [self.OVER, self.OVER])
        self.limit(r.statuses[0], 10, "HOUR")
        # files_no_share/*: each value has its own 10
        for i in range(10):
            r = self.call("share-threshold-test", [[("files_no_share", "files_no_share/a.pdf")]],
                          5000)
            self.assertEqual(r.overall_code, self.OK)
        r = self.call("share-threshold-test", [[("files_no_share", "files_no_share/b.csv")]],
                      5000)
        self.assertEqual(self.codes(r), [self.OK, self.OK])
        self.assertEqual(r.statuses[0].limit_remaining, 9)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class IntegrationRedis(Integration):
    """The same on Redis (upstream's WithoutPerSecondRedis and WithCachePrefix): Debian's
    redis-server on a free port, the store's keys under a prefix of the test's."""
    REDIS_ARGS = []
    URL = "redis://127.0.0.1:%d/0"
    CLI_ARGS = []

    @classmethod
    def setUpClass(cls):
        cls.rtmp = tempfile.TemporaryDirectory()
        cls.port = free_port()
        cls.redis = subprocess.Popen(["redis-server", "--port", str(cls.port), "--bind",
                                      "127.0.0.1", "--save", "", "--appendonly", "no",
                                      "--dir", cls.rtmp.name] + cls.REDIS_ARGS,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", cls.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            cls.redis.kill()
            raise RuntimeError("redis-server did not start")
        try:
            super().setUpClass()
        except Exception:
            cls.redis.kill()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.redis.terminate()
            cls.redis.wait(10)
            cls.rtmp.cleanup()

    @classmethod
    def config(cls):
        return ('{"listen": {"address": "127.0.0.1", "port": 0}, "ratelimit_config": '
                '"ratelimit", "store": {"type": "redis", "url": "%s", '
                '"prefix": "upstream-prefix:"}}' % (cls.URL % cls.port))

    def test_keys_under_prefix(self):
        self.call("basic", [[("one_per_minute", "x")]], 1000)
        keys = subprocess.run(["redis-cli", "-p", str(self.port)] + self.CLI_ARGS + ["--scan"],
                              capture_output=True, text=True, check=True).stdout.split()
        self.assertTrue(keys)
        self.assertTrue(all(k.startswith("upstream-prefix:") for k in keys), keys)


class IntegrationRedisAuth(IntegrationRedis):
    """TestBasicAuthConfig/WithoutPerSecondRedisAuth: the same on a Redis that wants a
    password (upstream's REDIS_AUTH, here the URL's)."""
    REDIS_ARGS = ["--requirepass", "password123"]
    URL = "redis://:password123@127.0.0.1:%d/0"
    CLI_ARGS = ["--no-auth-warning", "-a", "password123"]


class IntegrationRedisTLS(IntegrationRedis):
    """TestBasicTLSConfig/WithoutPerSecondRedisTLSWithClientCert (and so its
    WithoutPerSecondRedisTLS): the same on a redis-server that speaks TLS only to clients with a
    certificate of its CA, configured by upstream's REDIS_TLS variables."""

    @classmethod
    def setUpClass(cls):
        cls.rtmp = tempfile.TemporaryDirectory()
        d = cls.rtmp.name
        tls_certs(d)
        cls.tls_redis = TlsRedis(d, auth_clients=True)
        cls.port = cls.tls_redis.port  # cleartext, for redis-cli
        cls.ENV = {"REDIS_TLS": "true", "REDIS_TLS_CACERT": os.path.join(d, "ca.pem"),
                   "REDIS_TLS_CLIENT_CERT": os.path.join(d, "client.pem"),
                   "REDIS_TLS_CLIENT_KEY": os.path.join(d, "client.key")}
        try:
            Base.setUpClass.__func__(cls)
        except Exception:
            cls.tls_redis.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            Base.tearDownClass.__func__(cls)
        finally:
            cls.tls_redis.stop()
            cls.rtmp.cleanup()

    @classmethod
    def config(cls):
        return ('{"listen": {"address": "127.0.0.1", "port": 0}, "ratelimit_config": '
                '"ratelimit", "store": {"type": "redis", "url": "redis://127.0.0.1:%d/0", '
                '"timeout_ms": 2000, "prefix": "upstream-prefix:"}}' % cls.tls_redis.tls_port)


def tls_certs(d):
    """The CA, redis-server's certificate and a client's, in d."""
    make_ca(d, "ca")
    make_leaf(d, "redis", "ca", "subjectAltName=IP:127.0.0.1")
    make_leaf(d, "client", "ca", "subjectAltName=DNS:ratelimitd\nextendedKeyUsage=clientAuth")


class IntegrationSentinel(IntegrationRedis):
    """TestBasicAuthConfigWithRedisSentinel/WithoutPerSecondRedisAuth: the same through a
    sentinel (upstream's REDIS_TYPE=SENTINEL), here over TLS (the nodes of this test's helpers
    speak TLS)."""

    @classmethod
    def setUpClass(cls):
        cls.rtmp = tempfile.TemporaryDirectory()
        d = cls.rtmp.name
        tls_certs(d)
        cls.primary = TlsRedis(d)
        cls.port = cls.primary.port  # cleartext, for redis-cli
        cls.sentinel = Sentinel(d, cls.primary.tls_port)
        try:
            Base.setUpClass.__func__(cls)
        except Exception:
            cls.sentinel.stop()
            cls.primary.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            Base.tearDownClass.__func__(cls)
        finally:
            cls.sentinel.stop()
            cls.primary.stop()
            cls.rtmp.cleanup()

    @classmethod
    def config(cls):
        return ('{"listen": {"address": "127.0.0.1", "port": 0}, "ratelimit_config": '
                '"ratelimit", "store": {"type": "redis", "timeout_ms": 2000, "prefix": '
                '"upstream-prefix:", "tls": {"ca": "%s"}, "sentinel": {"nodes": '
                '["127.0.0.1:%d"], "master": "mymaster"}}}'
                % (os.path.join(cls.rtmp.name, "ca.pem"), cls.sentinel.tls_port))


class IntegrationCluster(IntegrationRedis):
    """TestBasicAuthConfigWithRedisCluster/WithoutPerSecondRedisAuth: the same on a Redis
    Cluster of three primaries (upstream's REDIS_TYPE=CLUSTER), here over TLS."""

    @classmethod
    def setUpClass(cls):
        cls.rtmp = tempfile.TemporaryDirectory()
        d = cls.rtmp.name
        tls_certs(d)
        cls.nodes = [TlsRedis(d, cluster=True) for _ in range(3)]
        try:
            seeds = ["127.0.0.1:%d" % n.tls_port for n in cls.nodes]
            subprocess.run(["redis-cli", "--tls", "--cacert", os.path.join(d, "ca.pem"),
                            "--cert", os.path.join(d, "client.pem"), "--key",
                            os.path.join(d, "client.key"), "--cluster", "create"] + seeds +
                           ["--cluster-yes"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60, check=True)
            end = time.time() + 20
            while not all("cluster_state:ok" in n.cmd("CLUSTER", "INFO") for n in cls.nodes):
                if time.time() > end:
                    raise RuntimeError("the cluster did not come up")
                time.sleep(0.1)
            cls.seed = seeds[0]
            Base.setUpClass.__func__(cls)
        except Exception:
            for n in cls.nodes:
                n.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            Base.tearDownClass.__func__(cls)
        finally:
            for n in cls.nodes:
                n.stop()
            cls.rtmp.cleanup()

    @classmethod
    def config(cls):
        return ('{"listen": {"address": "127.0.0.1", "port": 0}, "ratelimit_config": '
                '"ratelimit", "store": {"type": "redis", "timeout_ms": 2000, "prefix": '
                '"upstream-prefix:", "tls": {"ca": "%s"}, "cluster": ["%s"]}}'
                % (os.path.join(cls.rtmp.name, "ca.pem"), cls.seed))

    def test_keys_under_prefix(self):
        self.call("basic", [[("one_per_minute", "x")]], 1000)
        keys = [k for n in self.nodes for k in n.cmd("KEYS", "*")]
        self.assertTrue(keys)
        self.assertTrue(all(k.startswith("upstream-prefix:") for k in keys), keys)


class ExtraTags(Base):
    """TestBasicConfig_ExtraTags: EXTRA_TAGS on the limit's series and on config_load_success."""
    FILES = {"basic.yaml": BASIC_RT}
    ENV = {"EXTRA_TAGS": "foo:bar,a:b"}

    def test_extra_tags(self):
        self.call("basic", [[("key1", "foo")]], 1000)
        m = metrics(self.d)
        self.assertEqual(series(m, "ratelimit_service_rate_limit_total_hits", domain="basic",
                                key1="key1", foo="bar", a="b"), 1)
        self.assertEqual(series(m, "ratelimit_service_config_load_success", foo="bar", a="b"),
                         1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
