"""ShouldRateLimit over a real connection (Debian's python3-grpcio) with envoyproxy/ratelimit's
YAML configuration: the JSON names it with ratelimit_config, the daemon runs with --manual-clock
and every call carries its time in the ratelimitd-now metadata. The numbers are worked out by
hand from the YAML below (day windows from 0: at t = 1000.5 the day ends in 85400 s).

Run by make test (make grpc-check) with RL_BUILD naming the build directory.
"""
import json
import os
import signal
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_grpc import RLS, Daemon, load_messages, stop  # noqa: E402

YAML = """domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          name: marketing
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
  - key: ldap
    rate_limit:
      unlimited: true
"""

CONFIG = """{
  "listen": {"address": "127.0.0.1", "port": 0},
  "grpc": {"ratelimit_headers": true},
  "ratelimit_config": "ratelimit"
}"""


def start(cls, files, config, env=None):
    """Writes files (path: text) into a new folder, starts the daemon there on config with
    the environment variables env set, and opens a ShouldRateLimit stub on cls."""
    cls.tmp = tempfile.TemporaryDirectory()
    m = load_messages(cls.tmp.name)
    cls.Req = m["envoy.service.ratelimit.v3.RateLimitRequest"]
    cls.Resp = m["envoy.service.ratelimit.v3.RateLimitResponse"]
    for name, text in files.items():
        path = os.path.join(cls.tmp.name, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    os.environ.update(env or {})
    try:
        cls.d = Daemon(cls.tmp.name, config)
    finally:
        for k in env or {}:
            del os.environ[k]
    cls.ch = grpc.insecure_channel(cls.d.grpc_addr)
    cls.srl = cls.ch.unary_unary(RLS, request_serializer=cls.Req.SerializeToString,
                                 response_deserializer=cls.Resp.FromString)


class GrpcYamlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # envoyproxy/ratelimit's own header option, read from the same variables
        start(cls, {"ratelimit/messaging.yaml": YAML}, CONFIG,
              {"LIMIT_RESPONSE_HEADERS_ENABLED": "true",
               "LIMIT_REMAINING_HEADER": "X-RateLimit-Remaining"})

    @classmethod
    def tearDownClass(cls):
        stop(cls)

    def call(self, descriptors, now, hits=0, domain="messaging"):
        """descriptors: a list of (entries as (key, value) pairs, own hits_addend or None,
        limit override (requests_per_unit, unit name) or None)."""
        r = self.Req(domain=domain, hits_addend=hits)
        for entries, own, override in descriptors:
            d = r.descriptors.add()
            for k, v in entries:
                d.entries.add(key=k, value=v)
            if own is not None:
                d.hits_addend.value = own
            if override is not None:
                d.limit.requests_per_unit = override[0]
                d.limit.unit = d.limit.DESCRIPTOR.fields_by_name["unit"].enum_type \
                    .values_by_name[override[1]].number
        return self.srl(r, timeout=5, metadata=[("ratelimitd-now", str(now))])

    def status(self, st, code, name, rpu, unit, remaining, reset_s):
        self.assertEqual(st.code, self.Resp.Code.Value(code))
        self.assertEqual(st.current_limit.name, name)
        self.assertEqual(st.current_limit.requests_per_unit, rpu)
        units = self.Resp.DESCRIPTOR.nested_types_by_name["RateLimit"].enum_types_by_name["Unit"]
        self.assertEqual(st.current_limit.unit, units.values_by_name[unit].number)
        self.assertEqual(st.limit_remaining, remaining)
        self.assertEqual(st.duration_until_reset.seconds, reset_s)

    def test_nested_descriptors_one_decision(self):
        both = [([("message_type", "marketing"), ("to_number", "1")], None, None),
                ([("to_number", "1")], None, None)]
        for i in range(1, 6):
            r = self.call(both, 1000.5)
            self.assertEqual(r.overall_code, self.Resp.Code.Value("OK"))
            self.status(r.statuses[0], "OK", "marketing", 5, "DAY", 5 - i, 85400)
            self.status(r.statuses[1], "OK", "", 100, "DAY", 100 - i, 85400)
        # the sixth: over, and the number's 100 is not counted (95 left, not 94)
        r = self.call(both, 1000.5)
        self.assertEqual(r.overall_code, self.Resp.Code.Value("OVER_LIMIT"))
        self.status(r.statuses[0], "OVER_LIMIT", "marketing", 5, "DAY", 0, 85400)
        self.status(r.statuses[1], "OK", "", 100, "DAY", 95, 85400)
        headers = {h.key: h.value for h in r.response_headers_to_add}
        self.assertEqual(headers["ratelimit-policy"],
                         '"marketing";q=5;w=86400, "to_number";q=100;w=86400')
        self.assertEqual(headers["ratelimit"], '"marketing";r=0;t=85400, "to_number";r=95;t=85400')
        # upstream's headers: the descriptor over its limit, its remaining under the given name
        self.assertEqual(headers["RateLimit-Limit"], "5")
        self.assertEqual(headers["X-RateLimit-Remaining"], "0")
        self.assertEqual(headers["RateLimit-Reset"], "85400")

    def test_override_unlimited_unmatched(self):
        r = self.call([([("to_number", "2")], None, (3, "MINUTE")),
                       ([("ldap", "x")], None, None),
                       ([("nothing", "here")], None, None)], 10, hits=2)
        self.assertEqual(r.overall_code, self.Resp.Code.Value("OK"))
        self.status(r.statuses[0], "OK", "", 3, "MINUTE", 1, 50)
        self.assertFalse(r.statuses[1].HasField("current_limit"))
        self.assertEqual(r.statuses[1].limit_remaining, 4294967295)
        self.assertFalse(r.statuses[2].HasField("current_limit"))
        self.assertEqual(r.statuses[2].limit_remaining, 0)

    def test_check_only(self):
        r = self.call([([("to_number", "3")], 0, None)], 20)
        self.status(r.statuses[0], "OK", "", 100, "DAY", 100, 86380)
        r = self.call([([("to_number", "3")], 100, None)], 20)
        self.status(r.statuses[0], "OK", "", 100, "DAY", 0, 86380)
        r = self.call([([("to_number", "3")], 0, None)], 20)
        self.assertEqual(r.overall_code, self.Resp.Code.Value("OK"))  # used up, not over
        r = self.call([([("to_number", "3")], None, None)], 20)
        self.assertEqual(r.overall_code, self.Resp.Code.Value("OVER_LIMIT"))


TIERS_YAML = """domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 3}
"""

TIERS_CONFIG = """{
  "listen": {"address": "127.0.0.1", "port": 0},
  "ratelimit_config": "api.yaml",
  "levels": [{"name": "api_key", "tiered": true}],
  "tiers": {
    "free": [{"type": "fixed_window", "name": "free", "limit": 2, "window": 60}],
    "enterprise": [{"type": "fixed_window", "name": "enterprise", "limit": 5, "window": 60}]
  },
  "default_tier": "free"
}"""


class GrpcYamlTiersTest(unittest.TestCase):
    """The JSON's tiered level decided beside the YAML's limits: the api_key entry is the key
    of both; an admin's PUT /quota changes the tier at run time."""

    @classmethod
    def setUpClass(cls):
        start(cls, {"api.yaml": TIERS_YAML}, TIERS_CONFIG)

    @classmethod
    def tearDownClass(cls):
        stop(cls)

    def call(self, key, now):
        r = self.Req(domain="api", hits_addend=1)
        r.descriptors.add().entries.add(key="api_key", value=key)
        return self.srl(r, timeout=5, metadata=[("ratelimitd-now", str(now))])

    def test_tier_changed_at_run_time(self):
        ok, over = self.Resp.Code.Value("OK"), self.Resp.Code.Value("OVER_LIMIT")
        # free: 2 a minute, the YAML's 3 counting down beside it (at t = 10 the minute ends
        # in 50 s)
        for left in (2, 1):
            r = self.call("alice", 10)
            self.assertEqual(r.overall_code, ok)
            self.assertEqual(r.statuses[0].limit_remaining, left)
            self.assertEqual(r.statuses[0].current_limit.requests_per_unit, 3)
            self.assertEqual(r.statuses[0].duration_until_reset.seconds, 50)
        r = self.call("alice", 10)
        self.assertEqual(r.overall_code, over)
        self.assertEqual(r.statuses[0].code, over)
        # the admin moves alice to enterprise (5): her request fits, and it is only the YAML's
        # third, as the denied one took nothing; the fourth is over the YAML's 3
        req = urllib.request.Request("http://%s/quota/alice" % self.d.http_addr, method="PUT",
                                     data=json.dumps({"tier": "enterprise"}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            self.assertEqual(resp.status, 200)
        r = self.call("alice", 11)
        self.assertEqual(r.overall_code, ok)
        self.assertEqual(r.statuses[0].limit_remaining, 0)
        r = self.call("alice", 11)
        self.assertEqual(r.overall_code, over)
        # bob stays free
        self.assertEqual(self.call("bob", 11).overall_code, ok)
        self.assertEqual(self.call("bob", 11).overall_code, ok)
        self.assertEqual(self.call("bob", 11).overall_code, over)


QUOTA_A = """domain: quota-domain
descriptors:
  - key: regular
    value: limit
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata:
      name: service_1
      nested: {a: 1}
  - key: quota
    value: limit
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      name: service_2
"""

QUOTA_B = """domain: quota-domain
descriptors:
  - key: other
    value: limit
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata:
      some_other_name: service_3
      nested: {a: 2, b: true}
      list: [x, 2, null]
"""

UPSTREAM_CONFIG = """{
  "listen": {"address": "127.0.0.1", "port": 0},
  "ratelimit_config": "ratelimit"
}"""


def to_py(v):
    """A google.protobuf.Value (or Struct) as the Python value it holds."""
    if v.DESCRIPTOR.name == "Struct":
        return {k: to_py(x) for k, x in v.fields.items()}
    kind = v.WhichOneof("kind")
    if kind == "struct_value":
        return to_py(v.struct_value)
    if kind == "list_value":
        return [to_py(x) for x in v.list_value.values]
    if kind == "null_value":
        return None
    return getattr(v, kind)


def metrics(d):
    with urllib.request.urlopen("http://%s/metrics" % d.http_addr, timeout=5) as resp:
        return resp.read().decode()


class GrpcYamlUpstreamVariablesTest(unittest.TestCase):
    """envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA, MERGE_DOMAIN_CONFIG and EXTRA_TAGS, with
    quota_mode descriptors (the scenarios of its TestMetadataReturnedForPassedDescriptors,
    TestMetadataReturnedForAllPassedDescriptors and TestOverlappingMetadataReturnsTheFirstValue,
    with the limits written as YAML)."""

    @classmethod
    def setUpClass(cls):
        start(cls, {"ratelimit/a.yaml": QUOTA_A, "ratelimit/b.yaml": QUOTA_B}, UPSTREAM_CONFIG,
              {"RESPONSE_DYNAMIC_METADATA": "true", "MERGE_DOMAIN_CONFIG": "true",
               "EXTRA_TAGS": "region:us,zone:a"})

    @classmethod
    def tearDownClass(cls):
        stop(cls)

    def call(self, descriptors, now, hits=1):
        r = self.Req(domain="quota-domain", hits_addend=hits)
        for key, own, override in descriptors:
            d = r.descriptors.add()
            d.entries.add(key=key, value="limit")
            if own is not None:
                d.hits_addend.value = own
            if override is not None:
                d.limit.requests_per_unit = override
                d.limit.unit = 2  # MINUTE
        return self.srl(r, timeout=5, metadata=[("ratelimitd-now", str(now))])

    def test_metadata_quota_and_merge(self):
        ok, over = self.Resp.Code.Value("OK"), self.Resp.Code.Value("OVER_LIMIT")
        # at t = 200, a minute no other test uses (the clock does not go back)
        three = [("regular", None, None), ("quota", None, None), ("other", None, None)]
        # all pass: every limit's metadata, the first descriptor's value where names meet
        # and structs merged
        r = self.call(three, 200)
        self.assertEqual(r.overall_code, ok)
        self.assertEqual(to_py(r.dynamic_metadata), {
            "domain": "quota-domain",
            "descriptors": [{"entries": ["regular=limit"]}, {"entries": ["quota=limit"]},
                            {"entries": ["other=limit"]}],
            "hitsAddend": 1.0,
            "metadata": {"name": "service_1", "nested": {"a": 1.0, "b": True},
                         "some_other_name": "service_3", "list": ["x", 2.0, None]}})
        # quota (1 a minute) over, other (a quota mode limit of b.yaml, merged) with room: the
        # request is OK, quota is OVER_LIMIT, and its metadata is left out
        r = self.call(three, 200)
        self.assertEqual(r.overall_code, ok)
        self.assertEqual([s.code for s in r.statuses], [ok, over, ok])
        self.assertEqual(r.statuses[2].current_limit.requests_per_unit, 5)
        self.assertEqual(r.statuses[2].limit_remaining, 3)
        self.assertEqual(to_py(r.dynamic_metadata)["metadata"]["name"], "service_1")
        # every quota mode limit over: OVER_LIMIT, nothing counted
        r = self.call([("regular", None, None), ("quota", None, None)], 200)
        self.assertEqual(r.overall_code, over)
        self.assertEqual([s.code for s in r.statuses], [ok, over])
        self.assertEqual(r.statuses[0].limit_remaining, 8)
        r = self.call([("regular", None, None)], 200)
        self.assertEqual(r.statuses[0].limit_remaining, 7)
        # a descriptor's own hits_addend and limit override, the request's hits_addend 0
        r = self.call([("regular", 2, 7)], 200, hits=0)
        self.assertEqual(to_py(r.dynamic_metadata), {
            "domain": "quota-domain",
            "descriptors": [{"entries": ["regular=limit"], "hitsAddend": 2.0,
                             "limit": "requests_per_unit:7 unit:MINUTE"}]})

    def test_extra_tags_and_counters(self):
        self.call([("other", None, None)], 100)  # a minute of its own
        m = metrics(self.d)
        self.assertIn('ratelimit_service_rate_limit_total_hits{domain="quota-domain",'
                      'key1="other_limit",region="us",zone="a"} ', m)
        self.assertIn('\nratelimit_service_config_load_success{region="us",zone="a"} 1\n', m)
        self.assertIn('\nratelimit_service_config_load_error{region="us",zone="a"} 0\n', m)
        self.assertNotIn('key1="other_limit"} ', m)


SHADOW_YAML = """domain: shadow
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
"""


class GrpcYamlGlobalShadowTest(unittest.TestCase):
    """SHADOW_MODE=true as upstream answers it (its TestServiceGlobalShadowMode): the
    descriptor stays OVER_LIMIT, the overall code is OK, global_shadow_mode counts."""

    @classmethod
    def setUpClass(cls):
        start(cls, {"ratelimit/shadow.yaml": SHADOW_YAML}, UPSTREAM_CONFIG,
              {"SHADOW_MODE": "true"})

    @classmethod
    def tearDownClass(cls):
        stop(cls)

    def test_overall_ok_status_over(self):
        ok, over = self.Resp.Code.Value("OK"), self.Resp.Code.Value("OVER_LIMIT")
        codes = []
        for _ in range(2):
            r = self.Req(domain="shadow", hits_addend=1)
            r.descriptors.add().entries.add(key="user", value="u")
            r.descriptors.add().entries.add(key="hello", value="world")
            a = self.srl(r, timeout=5, metadata=[("ratelimitd-now", "10")])
            codes.append((a.overall_code, a.statuses[0].code, a.statuses[1].code))
            self.assertFalse(a.HasField("dynamic_metadata"))
        self.assertEqual(codes, [(ok, ok, ok), (ok, over, ok)])
        m = metrics(self.d)
        self.assertIn("\nratelimit_service_global_shadow_mode 1\n", m)
        # a reload of the same files: a load that succeeds, the counters and SHADOW_MODE stay
        self.assertIn("\nratelimit_service_config_load_success 1\n", m)
        req = urllib.request.Request("http://%s/admin/reload" % self.d.http_addr, method="POST",
                                     data=b"")
        with urllib.request.urlopen(req, timeout=5) as resp:
            self.assertEqual(resp.read(), b'{"reloaded":true}')
        m = metrics(self.d)
        self.assertIn("\nratelimit_service_config_load_error 0\n", m)
        self.assertIn("\nratelimit_service_config_load_success 2\n", m)
        self.assertIn("\nratelimit_service_global_shadow_mode 1\n", m)
        self.assertIn('\nratelimit_service_rate_limit_over_limit{domain="shadow",key1="user"} 1\n',
                      m)
        r = self.Req(domain="shadow", hits_addend=1)
        r.descriptors.add().entries.add(key="user", value="u")
        a = self.srl(r, timeout=5, metadata=[("ratelimitd-now", "11")])
        self.assertEqual((a.overall_code, a.statuses[0].code), (ok, over))


RELOAD_A = """domain: reload
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: %d}
"""
RELOAD_B = """domain: reload
descriptors:
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 2}
"""
RELOAD_C = """domain: reload
descriptors:
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 3}
"""
RELOAD_BAD = """domain: reload
descriptors:
  - key: zone
    rate_limit: {unit: fortnight, requests_per_unit: 3}
"""


class GrpcYamlReloadTest(unittest.TestCase):
    """A directory of YAML files merged into one domain (MERGE_DOMAIN_CONFIG), read again by
    POST /admin/reload and SIGHUP while serving: counts of unchanged limits carry over, a
    raised limit counts on from its count, a bad file is refused and the configuration in force
    stays. Windows of a minute from 0: every call is at t = 10."""

    @classmethod
    def setUpClass(cls):
        start(cls, {"ratelimit/a.yaml": RELOAD_A % 5, "ratelimit/b.yaml": RELOAD_B}, CONFIG,
              {"MERGE_DOMAIN_CONFIG": "true"})

    @classmethod
    def tearDownClass(cls):
        stop(cls)

    def remaining(self, key, value):
        r = self.Req(domain="reload")
        r.descriptors.add().entries.add(key=key, value=value)
        a = self.srl(r, timeout=5, metadata=[("ratelimitd-now", "10")])
        return a.statuses[0].current_limit.requests_per_unit, a.statuses[0].limit_remaining

    def write(self, name, text):
        with open(os.path.join(self.tmp.name, "ratelimit", name), "w") as f:
            f.write(text)

    def reload(self):
        req = urllib.request.Request("http://%s/admin/reload" % self.d.http_addr, method="POST",
                                     data=b"")
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def test_reloads(self):
        self.assertEqual([self.remaining("user", "u") for _ in range(3)],
                         [(5, 4), (5, 3), (5, 2)])
        self.assertEqual(self.remaining("path", "/p"), (2, 1))
        # a file added to the domain: the user's 3 of 5 and the path's 1 of 2 carry over
        self.write("c.yaml", RELOAD_C)
        self.assertEqual(self.reload(), (200, '{"reloaded":true}'))
        self.assertEqual(self.remaining("user", "u"), (5, 1))
        self.assertEqual(self.remaining("path", "/p"), (2, 0))
        self.assertEqual(self.remaining("team", "t"), (3, 2))
        # the user's limit raised, by SIGHUP: 4 used of 10, the 5th leaves 5
        self.write("a.yaml", RELOAD_A % 10)
        self.d.proc.send_signal(signal.SIGHUP)
        for _ in range(100):
            if "\nratelimit_service_config_load_success 3\n" in metrics(self.d):
                break
            time.sleep(0.05)
        self.assertEqual(self.remaining("user", "u"), (10, 5))
        # a bad file: refused naming it and the field, the configuration in force stays
        self.write("d.yaml", RELOAD_BAD)
        code, body = self.reload()
        self.assertEqual(code, 400)
        self.assertIn("ratelimit/d.yaml: descriptors[0].rate_limit.unit: invalid rate limit "
                      "unit 'fortnight'", body)
        self.assertEqual(self.remaining("user", "u"), (10, 4))
        m = metrics(self.d)
        self.assertIn("\nratelimit_service_config_load_success 3\n", m)
        self.assertIn("\nratelimit_service_config_load_error 1\n", m)
        self.assertIn('\nratelimit_service_rate_limit_total_hits{domain="reload",key1="user"} 6\n',
                      m)
        with open(os.path.join(self.tmp.name, "stderr.log")) as f:
            log = f.read()
        self.assertIn("error: reload refused, the configuration in force stays: ", log)
        self.assertIn("ratelimit/d.yaml: descriptors[0].rate_limit.unit", log)


class GrpcYamlRefusedTest(unittest.TestCase):
    def test_two_files_of_a_domain_without_merge(self):
        # upstream's default: refused, naming the later file
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "ratelimit"))
            for name, text in (("a.yaml", QUOTA_A), ("b.yaml", QUOTA_B)):
                with open(os.path.join(tmp, "ratelimit", name), "w") as f:
                    f.write(text)
            with self.assertRaises(RuntimeError):
                Daemon(tmp, UPSTREAM_CONFIG)
            with open(os.path.join(tmp, "stderr.log")) as f:
                self.assertIn("ratelimit/b.yaml: domain: duplicate domain 'quota-domain' in "
                              "config file", f.read())

    def test_bad_extra_tags(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "shadow.yaml"), "w") as f:
                f.write(SHADOW_YAML)
            os.environ["EXTRA_TAGS"] = "region"
            try:
                with self.assertRaises(RuntimeError):
                    Daemon(tmp, UPSTREAM_CONFIG.replace('"ratelimit"', '"shadow.yaml"'))
            finally:
                del os.environ["EXTRA_TAGS"]
            with open(os.path.join(tmp, "stderr.log")) as f:
                self.assertIn("EXTRA_TAGS: 'region' is not <name>:<value>", f.read())


if __name__ == "__main__":
    unittest.main(verbosity=2)
