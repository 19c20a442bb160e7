"""ShouldRateLimit and Health over a real connection, with Debian's python3-grpcio (the gRPC C
core) as the client and the messages loaded from the project's .proto files (protoc builds a
descriptor set, no generated code). The daemon runs with --manual-clock; every call carries its
time in the ratelimitd-now metadata, so the numbers below are worked out by hand:

  user    fixed_window 3 per 60 s (windows from 0)       -> 3 per MINUTE
  ip      token_bucket capacity 20, 10/s (full in 2 s)   -> 10 per SECOND
  burst   fixed_window 60 per 3600 s                     -> 60 per HOUR
  global  fixed_window 1000 per 3600 s, every request     -> 1000 per HOUR

Run by make test (make grpc-check) with RL_BUILD naming the build directory.
"""
import os
import subprocess
import sys
import tempfile
import unittest
import urllib.request

import grpc
from google.protobuf import descriptor_pb2, message_factory

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("RL_BUILD", "build"))
RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
HEALTH = "/grpc.health.v1.Health/Check"

CONFIG = """{
  "listen": {"address": "127.0.0.1", "port": 0},
  "domain": "edge",
  "grpc": {"max_message": 1024},
  "levels": [
    {"name": "user", "rules": [{"type": "fixed_window", "name": "per-user", "limit": 3, "window": 60}]},
    {"name": "ip", "rules": [{"type": "token_bucket", "name": "per-ip", "capacity": 20, "per_second": 10}]},
    {"name": "burst", "rules": [{"type": "fixed_window", "name": "burst", "limit": 60, "window": 3600}]},
    {"name": "global", "default_key": "*", "rules": [{"type": "fixed_window", "name": "global", "limit": 1000, "window": 3600}]}
  ]
}"""


def load_messages(tmp):
    protos = []
    for top in ("envoy", "grpc"):
        for d, _, files in os.walk(os.path.join(ROOT, "api", top)):
            protos += [os.path.relpath(os.path.join(d, f), os.path.join(ROOT, "api"))
                       for f in files if f.endswith(".proto")]
    out = os.path.join(tmp, "api.pb")
    subprocess.run(["protoc", "-I" + os.path.join(ROOT, "api"), "--include_imports",
                    "--descriptor_set_out=" + out] + sorted(protos), check=True)
    with open(out, "rb") as f:
        fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    return message_factory.GetMessages(fds.file)


class Daemon:
    def __init__(self, tmp, config):
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            f.write(config)
        self.err = open(os.path.join(tmp, "stderr.log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "ratelimitd"), "--config", path, "--port", "0",
             "--grpc-port", "0", "--manual-clock"],
            stdout=subprocess.PIPE, stderr=self.err, cwd=tmp, text=True)
        first = self.proc.stdout.readline()
        second = self.proc.stdout.readline()
        if not first.startswith("listening on ") or not second.startswith("grpc listening on "):
            self.proc.kill()
            raise RuntimeError("ratelimitd did not start: %r %r" % (first, second))
        self.grpc_addr = second.split()[-1]
        self.http_addr = first.split()[-1]

    def stop(self):
        self.proc.terminate()
        rc = self.proc.wait(20)
        self.proc.stdout.close()
        self.err.close()
        return rc


def stop(cls):
    """Closes cls's channel, stops its daemon (which must exit 0) and removes its folder."""
    cls.ch.close()
    rc = cls.d.stop()
    cls.tmp.cleanup()
    if rc != 0:
        raise AssertionError("ratelimitd exited %d" % rc)


class GrpcTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        m = load_messages(cls.tmp.name)
        cls.Req = m["envoy.service.ratelimit.v3.RateLimitRequest"]
        cls.Resp = m["envoy.service.ratelimit.v3.RateLimitResponse"]
        cls.HReq = m["grpc.health.v1.HealthCheckRequest"]
        cls.HResp = m["grpc.health.v1.HealthCheckResponse"]
        cls.d = Daemon(cls.tmp.name, CONFIG)
        cls.ch = grpc.insecure_channel(cls.d.grpc_addr)
        cls.srl = cls.ch.unary_unary(RLS, request_serializer=cls.Req.SerializeToString,
                                     response_deserializer=cls.Resp.FromString)
        cls.raw = cls.ch.unary_unary(RLS, request_serializer=lambda b: b,
                                     response_deserializer=cls.Resp.FromString)
        cls.health = cls.ch.unary_unary(HEALTH, request_serializer=cls.HReq.SerializeToString,
                                        response_deserializer=cls.HResp.FromString)

    @classmethod
    def tearDownClass(cls):
        stop(cls)

    def req(self, descriptors, hits=0, domain="edge"):
        """descriptors: a list of (entries dict, own hits_addend or None)."""
        r = self.Req(domain=domain, hits_addend=hits)
        for entries, own in descriptors:
            d = r.descriptors.add()
            for k, v in entries.items():
                d.entries.add(key=k, value=v)
            if own is not None:
                d.hits_addend.value = own
        return r

    def call(self, descriptors, now, hits=0, domain="edge"):
        return self.srl(self.req(descriptors, hits, domain), timeout=5,
                        metadata=[("ratelimitd-now", str(now))])

    def status(self, st, code, name, rpu, unit, remaining, reset_s):
        self.assertEqual(st.code, self.Resp.Code.Value(code))
        self.assertEqual(st.current_limit.name, name)
        self.assertEqual(st.current_limit.requests_per_unit, rpu)
        units = self.Resp.DESCRIPTOR.nested_types_by_name["RateLimit"].enum_types_by_name["Unit"]
        self.assertEqual(st.current_limit.unit, units.values_by_name[unit].number)
        self.assertEqual(st.limit_remaining, remaining)
        self.assertAlmostEqual(st.duration_until_reset.ToTimedelta().total_seconds(), reset_s)

    def code_of(self, fn, *args, **kw):
        with self.assertRaises(grpc.RpcError) as cm:
            fn(*args, **kw)
        return cm.exception.code(), cm.exception.details()

    def test_health_serving(self):
        self.assertEqual(self.health(self.HReq(), timeout=5).status,
                         self.HResp.ServingStatus.Value("SERVING"))
        svc = self.HReq(service="envoy.service.ratelimit.v3.RateLimitService")
        self.assertEqual(self.health(svc, timeout=5).status,
                         self.HResp.ServingStatus.Value("SERVING"))
        code, _ = self.code_of(self.health, self.HReq(service="nope"), timeout=5)
        self.assertEqual(code, grpc.StatusCode.NOT_FOUND)

    def test_decisions_by_hand(self):
        # t=10: alice 1 of 3 in the window [0, 60), 50 s to its end
        r = self.call([({"user": "alice"}, None)], 10)
        self.assertEqual(r.overall_code, self.Resp.Code.Value("OK"))
        self.status(r.statuses[0], "OK", "per-user", 3, "MINUTE", 2, 50)
        # hits 2: alice 3 of 3; the ip bucket 18 of 20, full again in 0.2 s
        r = self.call([({"user": "alice"}, None), ({"ip": "10.0.0.1"}, None)], 10, hits=2)
        self.assertEqual(r.overall_code, self.Resp.Code.Value("OK"))
        self.status(r.statuses[0], "OK", "per-user", 3, "MINUTE", 0, 50)
        self.status(r.statuses[1], "OK", "per-ip", 10, "SECOND", 18, 0.2)
        # alice is full: denied, and the ip bucket keeps its 18 (t=10 still)
        r = self.call([({"user": "alice"}, None), ({"ip": "10.0.0.1"}, None)], 10)
        self.assertEqual(r.overall_code, self.Resp.Code.Value("OVER_LIMIT"))
        self.status(r.statuses[0], "OVER_LIMIT", "per-user", 3, "MINUTE", 0, 50)
        self.status(r.statuses[1], "OK", "per-ip", 10, "SECOND", 18, 0.2)
        # t=60.5: a new window for alice (59.5 s to its end); the bucket is full again
        r = self.call([({"user": "alice"}, None), ({"ip": "10.0.0.1"}, None)], 60.5)
        self.assertEqual(r.overall_code, self.Resp.Code.Value("OK"))
        self.status(r.statuses[0], "OK", "per-user", 3, "MINUTE", 2, 59.5)
        self.status(r.statuses[1], "OK", "per-ip", 10, "SECOND", 19, 0.1)

    def test_check_only_counts_nothing(self):
        for _ in range(3):
            r = self.call([({"user": "bob"}, 0)], 100)
            self.assertEqual(r.overall_code, self.Resp.Code.Value("OK"))
            self.status(r.statuses[0], "OK", "per-user", 3, "MINUTE", 3, 0)
        r = self.call([({"user": "bob"}, 3)], 100)
        self.status(r.statuses[0], "OK", "per-user", 3, "MINUTE", 0, 20)
        r = self.call([({"user": "bob"}, 0)], 100)
        self.assertEqual(r.overall_code, self.Resp.Code.Value("OVER_LIMIT"))

    def test_unknown_domain_no_limit(self):
        r = self.call([({"user": "carol"}, None)], 200, hits=5, domain="elsewhere")
        self.assertEqual(r.overall_code, self.Resp.Code.Value("OK"))
        self.assertEqual(len(r.statuses), 1)
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        r = self.call([({"user": "carol"}, None)], 200)
        self.status(r.statuses[0], "OK", "per-user", 3, "MINUTE", 2, 40)

    def test_invalid_argument(self):
        code, msg = self.code_of(self.srl, self.req([({"user": "x"}, None)], domain=""),
                                 timeout=5)
        self.assertEqual((code, msg), (grpc.StatusCode.INVALID_ARGUMENT, "domain: required"))
        code, msg = self.code_of(self.srl, self.req([]), timeout=5)
        self.assertEqual((code, msg), (grpc.StatusCode.INVALID_ARGUMENT,
                                       "descriptors: at least one required"))
        code, msg = self.code_of(self.raw, b"\x0a\x05ed", timeout=5)
        self.assertEqual((code, msg), (grpc.StatusCode.INVALID_ARGUMENT,
                                       "message: not a RateLimitRequest"))

    def test_unknown_method(self):
        other = self.ch.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/Other",
                                    request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
        code, _ = self.code_of(other, b"", timeout=5)
        self.assertEqual(code, grpc.StatusCode.UNIMPLEMENTED)

    def test_oversized_message(self):
        code, _ = self.code_of(self.srl, self.req([({"user": "y" * 2000}, None)]), timeout=5)
        self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED)

    def test_compressed_message_refused(self):
        # large enough that the client really compresses it (it sends small ones as they are)
        code, _ = self.code_of(self.srl, self.req([({"user": "z" * 600}, None)]), timeout=5,
                               compression=grpc.Compression.Gzip)
        self.assertEqual(code, grpc.StatusCode.UNIMPLEMENTED)

    def allowed_total(self):
        url = "http://%s/metrics" % self.d.http_addr
        with urllib.request.urlopen(url, timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith('ratelimit_acquire_total{decision="allowed"}'):
                    return int(line.split()[-1])
        raise AssertionError("no ratelimit_acquire_total in /metrics")

    def test_decisions_counted_in_metrics(self):
        before = self.allowed_total()
        self.call([({"user": "metrics"}, None)], 400)
        self.assertEqual(self.allowed_total(), before + 1)

    def test_100_concurrent_calls(self):
        # 100 calls at once on the channel's connection: exactly 60 fit the burst limit
        req = self.req([({"burst": "b1"}, None)])
        fs = [self.srl.future(req, timeout=10, metadata=[("ratelimitd-now", "300")])
              for _ in range(100)]
        codes = [f.result().overall_code for f in fs]
        self.assertEqual(codes.count(self.Resp.Code.Value("OK")), 60)
        self.assertEqual(codes.count(self.Resp.Code.Value("OVER_LIMIT")), 40)


TOKEN_CONFIG = """{
  "domain": "edge", "acquire_token": "acq-1", "metrics_token": "met-1",
  "levels": [{"name": "user", "rules": [{"type": "fixed_window", "name": "per-user", "limit": 3, "window": 60}]}]
}"""
UNAUTH = 'authorization: this method needs "authorization: Bearer <token>" with a valid token'


class GrpcTokenTest(unittest.TestCase):
    """acquire_token guards ShouldRateLimit and metrics_token Health, as they guard /acquire and
    /healthz: one UNAUTHENTICATED answer whatever was wrong."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        m = load_messages(cls.tmp.name)
        cls.Req = m["envoy.service.ratelimit.v3.RateLimitRequest"]
        cls.Resp = m["envoy.service.ratelimit.v3.RateLimitResponse"]
        cls.HReq = m["grpc.health.v1.HealthCheckRequest"]
        cls.HResp = m["grpc.health.v1.HealthCheckResponse"]
        cls.d = Daemon(cls.tmp.name, TOKEN_CONFIG)
        cls.ch = grpc.insecure_channel(cls.d.grpc_addr)
        cls.srl = cls.ch.unary_unary(RLS, request_serializer=cls.Req.SerializeToString,
                                     response_deserializer=cls.Resp.FromString)
        cls.health = cls.ch.unary_unary(HEALTH, request_serializer=cls.HReq.SerializeToString,
                                        response_deserializer=cls.HResp.FromString)

    @classmethod
    def tearDownClass(cls):
        stop(cls)

    def refused(self, fn, req, metadata):
        with self.assertRaises(grpc.RpcError) as cm:
            fn(req, timeout=5, metadata=metadata)
        self.assertEqual((cm.exception.code(), cm.exception.details()),
                         (grpc.StatusCode.UNAUTHENTICATED, UNAUTH))

    def test_tokens(self):
        req = self.Req(domain="edge")
        d = req.descriptors.add()
        d.entries.add(key="user", value="u")
        now = ("ratelimitd-now", "10")
        for md in ([now], [now, ("authorization", "Bearer acq-2")],
                   [now, ("authorization", "Bearer met-1")], [now, ("authorization", "acq-1")]):
            self.refused(self.srl, req, md)
        # nothing was counted by the refusals: 3 of 3 left, this takes 1
        r = self.srl(req, timeout=5, metadata=[now, ("authorization", "Bearer acq-1")])
        self.assertEqual(r.overall_code, self.Resp.Code.Value("OK"))
        self.assertEqual(r.statuses[0].limit_remaining, 2)
        for md in ([], [("authorization", "Bearer acq-1")]):
            self.refused(self.health, self.HReq(), md)
        h = self.health(self.HReq(), timeout=5, metadata=[("authorization", "Bearer met-1")])
        self.assertEqual(h.status, self.HResp.ServingStatus.Value("SERVING"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
