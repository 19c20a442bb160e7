"""Configuration over xDS (CONFIG_TYPE=GRPC_XDS_SOTW): the daemon is the client of a small ADS
management server written here with Debian's python3-grpcio, on a free loopback port, which
pushes RateLimitConfig resources (messages loaded from api/*.proto through protoc) and records
every DiscoveryRequest the daemon sends.

The configuration pushed: domain "d", descriptor key "k" at 3 per minute, then 5 per minute.
The daemon runs with --manual-clock: each call carries its time, each step in its own minute
(1000.5 s is in the minute [960, 1020), 2000.5 in [1980, 2040), ...), so the counts are by
hand: 3 calls OK and the 4th OVER_LIMIT at 3 per minute; 5 and the 6th at 5 per minute.

Run by make test (make xds-check) with RL_BUILD naming the build directory.
"""
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
from concurrent import futures

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_grpc import BUILD, RLS  # noqa: E402
from test_grpc_tls import make_ca, make_leaf, read  # noqa: E402
from google.protobuf import descriptor_pb2, message_factory  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TYPE_URL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
ADS = "envoy.service.discovery.v3.AggregatedDiscoveryService"


def load_messages(tmp):
    out = os.path.join(tmp, "xds.pb")
    subprocess.run(["protoc", "-I" + os.path.join(ROOT, "api"), "--include_imports",
                    "--descriptor_set_out=" + out, "envoy/service/discovery/v3/discovery.proto",
                    "ratelimit/config/ratelimit/v3/rls_conf.proto",
                    "envoy/service/ratelimit/v3/rls.proto"], check=True)
    with open(out, "rb") as f:
        fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    return message_factory.GetMessages(fds.file)


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Management:
    """An ADS server: every stream gets what push() queues; every request is recorded."""

    def __init__(self, m, port, creds=None):
        self.m = m
        self.port = port
        self.creds = creds
        self.cv = threading.Condition()
        self.requests = []
        self.streams = []
        self.nonce = 0
        self.server = None
        self.start()

    def start(self):
        Req = self.m["envoy.service.discovery.v3.DiscoveryRequest"]
        Resp = self.m["envoy.service.discovery.v3.DiscoveryResponse"]
        h = grpc.stream_stream_rpc_method_handler(self.stream, Req.FromString,
                                                  Resp.SerializeToString)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(ADS, {"StreamAggregatedResources": h}),))
        addr = "127.0.0.1:%d" % self.port
        if self.creds:
            self.server.add_secure_port(addr, self.creds)
        else:
            self.server.add_insecure_port(addr)
        self.server.start()

    def stop(self):
        with self.cv:
            for q in self.streams:
                q.put(None)
            self.streams = []
        self.server.stop(0).wait()

    def stream(self, requests, context):
        q = queue.Queue()
        meta = dict(context.invocation_metadata())
        with self.cv:
            self.streams.append(q)
            self.metadata = meta
            self.cv.notify_all()

        def reader():
            try:
                for r in requests:
                    with self.cv:
                        self.requests.append(r)
                        self.cv.notify_all()
            except Exception:
                pass
            q.put(None)

        threading.Thread(target=reader, daemon=True).start()
        while True:
            item = q.get()
            if item is None:
                return
            yield item

    def wait(self, pred, what, timeout=15):
        """The first request (from now on or recorded before) for which pred holds."""
        end = time.time() + timeout
        with self.cv:
            while True:
                for r in self.requests:
                    if pred(r):
                        return r
                left = end - time.time()
                if left <= 0:
                    raise AssertionError("no request %s; got %r" % (what, self.requests))
                self.cv.wait(left)

    def wait_stream(self, n, timeout=15):
        end = time.time() + timeout
        with self.cv:
            while len(self.streams) < n:
                left = end - time.time()
                if left <= 0:
                    raise AssertionError("no stream opened")
                self.cv.wait(left)

    def config(self, domain, rpu, unit="MINUTE", name=""):
        c = self.m["ratelimit.config.ratelimit.v3.RateLimitConfig"](name=name, domain=domain)
        d = c.descriptors.add(key="k")
        units = d.rate_limit.DESCRIPTOR.fields_by_name["unit"].enum_type.values_by_name
        d.rate_limit.unit = units[unit].number
        d.rate_limit.requests_per_unit = rpu
        return c

    def push(self, version, configs):
        """Sends a response with configs to the newest stream; returns its nonce."""
        Resp = self.m["envoy.service.discovery.v3.DiscoveryResponse"]
        with self.cv:
            self.nonce += 1
            nonce = "n%d" % self.nonce
            r = Resp(version_info=version, type_url=TYPE_URL, nonce=nonce)
            for c in configs:
                a = r.resources.add()
                a.type_url = TYPE_URL
                a.value = c.SerializeToString()
            self.streams[-1].put(r)
        return nonce


class Daemon:
    def __init__(self, tmp, env, config=None):
        self.log = os.path.join(tmp, "stderr.log")
        self.err = open(self.log, "w")
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("CONFIG_", "XDS_", "FORCE_START"))}
        e.update(env)
        args = []
        if config:
            args = ["--config", os.path.join(tmp, "config.json")]
            with open(args[1], "w") as f:
                f.write(config)
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "ratelimitd")] + args + ["--port", "0",
             "--grpc-port", "0", "--manual-clock"],
            stdout=subprocess.PIPE, stderr=self.err, cwd=tmp, text=True, env=e)

    def printed(self, timeout):
        """Whether stdout has a line within timeout seconds."""
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return bool(r)

    def serving(self):
        first = self.proc.stdout.readline()
        second = self.proc.stdout.readline()
        if not first.startswith("listening on ") or not second.startswith("grpc listening on "):
            raise RuntimeError("ratelimitd did not start: %r %r %s" % (first, second,
                                                                       self.stderr()))
        self.http_addr = first.split()[-1]
        self.grpc_addr = second.split()[-1]

    def stderr(self):
        with open(self.log) as f:
            return f.read()

    def stop(self):
        self.proc.terminate()
        rc = self.proc.wait(20)
        self.proc.stdout.close()
        self.err.close()
        return rc


FAST = {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "200ms",
        "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "400ms",
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "2s"}


class XdsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.m = load_messages(cls.tmp.name)
        cls.Req = cls.m["envoy.service.ratelimit.v3.RateLimitRequest"]
        cls.Resp = cls.m["envoy.service.ratelimit.v3.RateLimitResponse"]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def start(self, env, creds=None, config=None):
        self.port = free_port()
        self.mgmt = Management(self.m, self.port, creds)
        e = {"CONFIG_TYPE": "GRPC_XDS_SOTW",
             "CONFIG_GRPC_XDS_SERVER_URL": "127.0.0.1:%d" % self.port,
             "CONFIG_GRPC_XDS_NODE_ID": "node-7"}
        e.update(FAST)
        e.update(env)
        self.d = Daemon(self.tmp.name, e, config)
        self.addCleanup(self.finish)

    def finish(self):
        if self.d.proc.poll() is None:
            self.assertEqual(self.d.stop(), 0)
        self.mgmt.stop()

    def call(self, now, domain="d", value="v"):
        ch = grpc.insecure_channel(self.d.grpc_addr)
        srl = ch.unary_unary(RLS, request_serializer=self.Req.SerializeToString,
                             response_deserializer=self.Resp.FromString)
        r = self.Req(domain=domain)
        r.descriptors.add().entries.add(key="k", value=value)
        out = srl(r, timeout=5, metadata=[("ratelimitd-now", str(now))])
        ch.close()
        return self.Resp.Code.Name(out.overall_code)

    def expect(self, now, allowed):
        """allowed calls OK, then one OVER_LIMIT, at now."""
        self.assertEqual([self.call(now) for _ in range(allowed + 1)],
                         ["OK"] * allowed + ["OVER_LIMIT"])

    def ack(self, version, nonce):
        return self.mgmt.wait(lambda r: r.response_nonce == nonce and r.version_info == version
                              and not r.HasField("error_detail"),
                              "acking version %s nonce %s" % (version, nonce))

    def nack(self, kept, nonce):
        return self.mgmt.wait(lambda r: r.response_nonce == nonce and r.HasField("error_detail"),
                              "nacking nonce %s" % nonce)

    def test_push_update_bad_push_reconnect(self):
        self.start({"CONFIG_GRPC_XDS_NODE_METADATA": "zone=a,team:edge",
                    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "X-Tenant:blue"})
        # the first request: the node, the type, no version, no nonce
        first = self.mgmt.wait(lambda r: True, "at all")
        self.assertEqual(first.node.id, "node-7")
        self.assertEqual(first.type_url, TYPE_URL)
        self.assertEqual(first.version_info, "")
        self.assertEqual(first.response_nonce, "")
        self.assertEqual(dict((k, v.string_value) for k, v in first.node.metadata.fields.items()),
                         {"zone": "a", "team": "edge"})
        self.assertEqual(self.mgmt.metadata.get("x-tenant"), "blue")
        # before the first configuration the daemon does not listen
        self.assertFalse(self.d.printed(1.0))
        nonce = self.mgmt.push("1", [self.mgmt.config("d", 3)])
        self.ack("1", nonce)
        self.d.serving()
        self.expect(1000.5, 3)

        # an update: 5 per minute
        nonce = self.mgmt.push("2", [self.mgmt.config("d", 5)])
        self.ack("2", nonce)
        self.expect(2000.5, 5)

        # a bad push: a limit without a unit; NACKed with version 2 kept, 5 per minute decides
        nonce = self.mgmt.push("3", [self.mgmt.config("d", 7, unit="UNKNOWN")])
        r = self.nack("2", nonce)
        self.assertEqual(r.version_info, "2")
        self.assertEqual(r.error_detail.code, 3)
        self.assertIn("descriptors[0].rate_limit.unit", r.error_detail.message)
        self.assertIn("UNKNOWN", r.error_detail.message)
        self.expect(3000.5, 5)
        # a domain twice in one push
        nonce = self.mgmt.push("4", [self.mgmt.config("d", 1), self.mgmt.config("d", 2)])
        r = self.nack("2", nonce)
        self.assertEqual(r.version_info, "2")
        self.assertIn("duplicate domain", r.error_detail.message)
        self.expect(4000.5, 5)

        # SIGHUP reads no file: the pushed configuration stays in force
        self.d.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        refused = "the daemon runs on the built-in configuration"
        while refused not in self.d.stderr() and time.time() < deadline:
            time.sleep(0.05)
        self.assertIn(refused, self.d.stderr())
        self.expect(4500.5, 5)

        # the server goes away and comes back on the same port: the client connects again,
        # asks with the version it has, and a new push applies
        self.mgmt.stop()
        self.mgmt.requests = []
        self.mgmt.start()
        self.mgmt.wait_stream(1)
        again = self.mgmt.wait(lambda r: r.response_nonce == "", "after reconnecting")
        self.assertEqual(again.version_info, "2")
        nonce = self.mgmt.push("5", [self.mgmt.config("d", 2)])
        self.ack("5", nonce)
        self.expect(5000.5, 2)

        with urllib.request.urlopen("http://%s/metrics" % self.d.http_addr, timeout=5) as r:
            metrics = r.read().decode()
        self.assertIn("ratelimitd_xds_connected 1", metrics)
        self.assertIn('ratelimitd_xds_version_info{version="5"} 1', metrics)
        self.assertIn("ratelimitd_xds_rejected_total 2", metrics)
        self.assertIn("ratelimitd_xds_applied_total 3", metrics)
        # the start's configuration, the update and the push after reconnecting; the two bad ones
        self.assertIn("\nratelimit_service_config_load_success 3\n", metrics)
        self.assertIn("\nratelimit_service_config_load_error 2\n", metrics)

    def test_bad_first_push_keeps_waiting(self):
        self.start({})
        self.mgmt.wait(lambda r: True, "at all")
        # a resource of another type: NACKed, nothing listens yet
        Resp = self.m["envoy.service.discovery.v3.DiscoveryResponse"]
        with self.mgmt.cv:
            r = Resp(version_info="1", type_url=TYPE_URL, nonce="other")
            a = r.resources.add()
            a.type_url = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
            self.mgmt.streams[-1].put(r)
        r = self.nack("", "other")
        self.assertEqual(r.version_info, "")
        self.assertIn("resources[0]: type_url must be " + TYPE_URL, r.error_detail.message)
        self.assertFalse(self.d.printed(0.5))
        nonce = self.mgmt.push("2", [self.mgmt.config("d", 3)])
        self.ack("2", nonce)
        self.d.serving()
        self.expect(1000.5, 3)

    def test_force_start_without_initial_config(self):
        self.start({"FORCE_START_WITHOUT_INITIAL_CONFIG": "true"})
        self.d.serving()
        # no domain yet: OK with no limit
        self.assertEqual([self.call(1000.5) for _ in range(5)], ["OK"] * 5)
        nonce = self.mgmt.push("1", [self.mgmt.config("d", 3)])
        self.ack("1", nonce)
        self.expect(2000.5, 3)

    def test_json_levels_beside(self):
        # --config: its settings, and its level k (2 per 60 s) decided beside the pushed limit
        self.start({}, config='{"listen": {"address": "127.0.0.1", "port": 0}, "levels": '
                   '[{"name": "k", "rules": [{"type": "fixed_window", "name": "per-k", '
                   '"limit": 2, "window": 60}]}]}')
        self.mgmt.wait(lambda r: True, "at all")
        nonce = self.mgmt.push("1", [self.mgmt.config("d", 3)])
        self.ack("1", nonce)
        self.d.serving()
        self.expect(1000.5, 2)
        nonce = self.mgmt.push("2", [self.mgmt.config("d", 1)])
        self.ack("2", nonce)
        self.expect(2000.5, 1)
        self.d.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        refused = ("CONFIG_TYPE=GRPC_XDS_SOTW: the configuration changes by the management "
                   "server's pushes")
        while refused not in self.d.stderr() and time.time() < deadline:
            time.sleep(0.05)
        self.assertIn(refused, self.d.stderr())

    def test_redis_store(self):
        # the same pushes on the Redis store: an update is put in force over the same store,
        # so the counts Redis holds go on under the new limit (3 taken at 3 per minute, then 2
        # more in the same minute at 5 per minute)
        rtmp = tempfile.TemporaryDirectory()
        self.addCleanup(rtmp.cleanup)
        port = free_port()
        redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--dir", rtmp.name],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def stop_redis():
            redis.terminate()
            redis.wait(10)
        self.addCleanup(stop_redis)
        import socket
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("redis-server did not start")
        # (a JSON level beside the pushed limits, which these calls do not name)
        self.start({}, config='{"listen": {"address": "127.0.0.1", "port": 0}, "store": '
                   '{"type": "redis", "url": "redis://127.0.0.1:%d/0", "prefix": "xds:"}, '
                   '"levels": [{"name": "other", "rules": [{"type": "fixed_window", '
                   '"limit": 1, "window": 60}]}]}' % port)
        self.mgmt.wait(lambda r: True, "at all")
        nonce = self.mgmt.push("1", [self.mgmt.config("d", 3)])
        self.ack("1", nonce)
        self.d.serving()
        self.expect(1000.5, 3)
        nonce = self.mgmt.push("2", [self.mgmt.config("d", 5)])
        self.ack("2", nonce)
        self.expect(1000.5, 2)
        self.expect(2000.5, 5)
        # a bad push is refused and 5 per minute decides on
        nonce = self.mgmt.push("3", [self.mgmt.config("d", 7, unit="UNKNOWN")])
        self.assertEqual(self.nack("2", nonce).version_info, "2")
        self.expect(3000.5, 5)
        keys = subprocess.run(["redis-cli", "-p", str(port), "--scan"], capture_output=True,
                              text=True, check=True).stdout.split()
        self.assertTrue(keys)
        self.assertTrue(all(k.startswith("xds:") for k in keys), keys)
        with urllib.request.urlopen("http://%s/metrics" % self.d.http_addr, timeout=5) as r:
            metrics = r.read().decode()
        self.assertIn("ratelimitd_xds_applied_total 2", metrics)
        self.assertIn("ratelimitd_xds_rejected_total 1", metrics)

    def test_max_message_size(self):
        # a response over XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES closes the stream; the client
        # connects again and takes a smaller one
        self.start({"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "200"})
        self.mgmt.wait_stream(1)
        self.mgmt.push("1", [self.mgmt.config("d" * 300, 3)])
        self.mgmt.wait_stream(2)
        self.assertIn("larger than the limit (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES is 200)",
                      self.d.stderr())
        self.mgmt.wait(lambda r: r.response_nonce == "", "again")
        nonce = self.mgmt.push("2", [self.mgmt.config("d", 3)])
        self.ack("2", nonce)
        self.d.serving()
        self.expect(1000.5, 3)

    def test_sigterm_before_the_first_configuration(self):
        self.start({})
        self.mgmt.wait(lambda r: True, "at all")
        self.assertFalse(self.d.printed(0.5))
        self.assertEqual(self.d.stop(), 0)

    def test_bad_variables(self):
        for var, value in [("CONFIG_TYPE", "GRPC"), ("CONFIG_GRPC_XDS_SERVER_URL", "nohost"),
                           ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10"),
                           ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "-1"),
                           ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "maybe"),
                           ("FORCE_START_WITHOUT_INITIAL_CONFIG", "sometimes")]:
            e = {k: v for k, v in os.environ.items() if not k.startswith(("CONFIG_", "XDS_"))}
            e.update({"CONFIG_TYPE": "GRPC_XDS_SOTW",
                      "CONFIG_GRPC_XDS_SERVER_URL": "127.0.0.1:1", var: value})
            p = subprocess.run([os.path.join(BUILD, "ratelimitd"), "--port", "0"], env=e,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=20)
            self.assertEqual(p.returncode, 1, var)
            self.assertIn(var, p.stderr)
            self.assertEqual(p.stdout, "")

    def test_tls(self):
        d = self.tmp.name
        make_ca(d, "xca")
        make_leaf(d, "xserver", "xca", "subjectAltName=DNS:xds.test")
        make_ca(d, "other")
        creds = grpc.ssl_server_credentials([(read(d, "xserver.key"), read(d, "xserver.pem"))])
        # the wrong CA: refused, nothing asked
        self.start({"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
                    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": os.path.join(d, "other.pem"),
                    "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "xds.test"}, creds)
        deadline = time.time() + 10
        while "certificate" not in self.d.stderr() and time.time() < deadline:
            time.sleep(0.1)
        self.assertIn("TLS handshake: the server's certificate", self.d.stderr())
        self.assertEqual(self.mgmt.requests, [])
        self.finish()
        self.assertEqual(self.d.proc.wait(), 0)
        # the right CA and the certificate's name
        self.start({"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
                    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": os.path.join(d, "xca.pem"),
                    "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "xds.test"}, creds)
        self.mgmt.wait(lambda r: True, "over TLS")
        nonce = self.mgmt.push("1", [self.mgmt.config("d", 3)])
        self.ack("1", nonce)
        self.d.serving()
        self.expect(1000.5, 3)
        self.finish()
        # mTLS: the server asks for a client certificate signed by xca; the daemon sends its own
        make_leaf(d, "xclient", "xca", "extendedKeyUsage=clientAuth")
        mtls = grpc.ssl_server_credentials([(read(d, "xserver.key"), read(d, "xserver.pem"))],
                                           root_certificates=read(d, "xca.pem"),
                                           require_client_auth=True)
        self.start({"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
                    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": os.path.join(d, "xca.pem"),
                    "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "xds.test",
                    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": os.path.join(d, "xclient.pem"),
                    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": os.path.join(d, "xclient.key")}, mtls)
        self.mgmt.wait(lambda r: True, "over mTLS")
        nonce = self.mgmt.push("1", [self.mgmt.config("d", 2)])
        self.ack("1", nonce)
        self.d.serving()
        self.expect(1000.5, 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
