"""TLS and mTLS on the gRPC port, with Debian's python3-grpcio (the gRPC C core, which insists
on ALPN h2) as the client and certificates this test makes with openssl: a server CA and its
server certificates (two, for the reload), a client CA with a client certificate that holds the
DNS name envoy.client, one of the same CA that holds another name, and one of a CA the daemon
does not trust. Configured natively ("grpc": {"tls": ...}) and by envoyproxy/ratelimit's
variables (GRPC_SERVER_USE_TLS, GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY,
GRPC_CLIENT_TLS_CACERT, GRPC_CLIENT_TLS_SAN).

One level, user: fixed_window 3 per 60 s, so alice's first call leaves 2, her second 1.

Run by make test (make grpc-tls-check) with RL_BUILD naming the build directory.
"""
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import time
import unittest

import grpc
from google.protobuf import descriptor_pb2, message_factory

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("RL_BUILD", "build"))
RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
OPENSSL = "/usr/bin/openssl"

LEVELS = ('"levels": [{"name": "user", "rules": [{"type": "fixed_window", "name": "per-user", '
          '"limit": 3, "window": 60}]}]')


def load_messages(tmp):
    out = os.path.join(tmp, "api.pb")
    subprocess.run(["protoc", "-I" + os.path.join(ROOT, "api"), "--include_imports",
                    "--descriptor_set_out=" + out, "envoy/service/ratelimit/v3/rls.proto"],
                   check=True)
    with open(out, "rb") as f:
        fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    return message_factory.GetMessages(fds.file)


def run(*args, cwd):
    subprocess.run([OPENSSL] + list(args), cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def make_ca(d, name):
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", name + ".key", "-out", name + ".pem", "-days", "2", "-subj", "/CN=" + name,
        cwd=d)


def make_leaf(d, name, ca, ext):
    with open(os.path.join(d, name + ".ext"), "w") as f:
        f.write(ext + "\n")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
        name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name, cwd=d)
    run("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
        "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", name + ".ext", cwd=d)


def read(d, name):
    with open(os.path.join(d, name), "rb") as f:
        return f.read()


class Daemon:
    def __init__(self, d, config, env=None):
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            f.write(config)
        self.log = os.path.join(d, "stderr.log")
        self.err = open(self.log, "w")
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("GRPC_"):
                del e[k]
        e.update(env or {})
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "ratelimitd"), "--config", path, "--port", "0",
             "--grpc-port", "0"],
            stdout=subprocess.PIPE, stderr=self.err, cwd=d, text=True, env=e)
        first = self.proc.stdout.readline()
        second = self.proc.stdout.readline()
        if not first.startswith("listening on ") or not second.startswith("grpc listening on "):
            self.proc.kill()
            raise RuntimeError("ratelimitd did not start: %r %r %s" % (first, second,
                                                                        self.log_text()))
        self.port = int(second.split(":")[-1])
        self.addr = "127.0.0.1:%d" % self.port

    def log_text(self):
        with open(self.log) as f:
            return f.read()

    def wait_log(self, text, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            if text in self.log_text():
                return
            time.sleep(0.05)
        raise AssertionError("not in the log within %d s: %r\n%s" % (timeout, text,
                                                                    self.log_text()))

    def stop(self):
        self.proc.terminate()
        rc = self.proc.wait(20)
        self.proc.stdout.close()
        self.err.close()
        if rc != 0:
            raise AssertionError("ratelimitd exited %d: %s" % (rc, self.log_text()))


def raw_tls(port, cafile, alpn=("h2",), cert=None):
    """A TLS connection made by hand (Python's ssl): to see the certificate the daemon sends
    and to keep one connection open across a reload."""
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.set_alpn_protocols(list(alpn))
    if cert:
        ctx.load_cert_chain(*cert)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(s, server_hostname="127.0.0.1")


def frames_until(sock, want_type, want_flags):
    """Reads HTTP/2 frames until one of want_type with want_flags; returns its payload."""
    buf = b""
    while True:
        while len(buf) < 9:
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError("connection closed")
            buf += chunk
        length = int.from_bytes(buf[0:3], "big")
        ftype, flags = buf[3], buf[4]
        while len(buf) < 9 + length:
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError("connection closed")
            buf += chunk
        payload, buf = buf[9:9 + length], buf[9 + length:]
        if ftype == want_type and flags & want_flags == want_flags:
            return payload


def h2_ping(sock, data):
    """Sends the client preface, an empty SETTINGS and a PING; returns the PING ACK's data."""
    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + struct.pack(">I", 0)[1:] + b"\x04\x00"
                 + b"\x00\x00\x00\x00" + struct.pack(">I", 8)[1:] + b"\x06\x00\x00\x00\x00\x00"
                 + data)
    return frames_until(sock, 6, 1)


class GrpcTlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.d = cls.tmp.name
        m = load_messages(d)
        cls.Req = m["envoy.service.ratelimit.v3.RateLimitRequest"]
        cls.Resp = m["envoy.service.ratelimit.v3.RateLimitResponse"]
        make_ca(d, "server-ca")
        server_ext = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth"
        make_leaf(d, "server", "server-ca", server_ext)
        make_leaf(d, "server2", "server-ca", server_ext)
        make_ca(d, "client-ca")
        make_ca(d, "other-ca")
        client_ext = "subjectAltName=DNS:%s\nextendedKeyUsage=clientAuth"
        make_leaf(d, "client", "client-ca", client_ext % "envoy.client")
        make_leaf(d, "client-other-san", "client-ca", client_ext % "someone.else")
        make_leaf(d, "client-other-ca", "other-ca", client_ext % "envoy.client")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def dir(self):
        """A folder for one daemon with the certificates in it."""
        sub = tempfile.mkdtemp(dir=self.d)
        for f in os.listdir(self.d):
            if f.endswith((".pem", ".key")):
                shutil.copy(os.path.join(self.d, f), sub)
        return sub

    def call(self, addr, client=None, user="alice", timeout=5):
        """ShouldRateLimit over TLS trusting the server CA, with the client certificate named
        client (its .pem and .key) or none."""
        creds = grpc.ssl_channel_credentials(
            root_certificates=read(self.d, "server-ca.pem"),
            private_key=read(self.d, client + ".key") if client else None,
            certificate_chain=read(self.d, client + ".pem") if client else None)
        with grpc.secure_channel(addr, creds) as ch:
            srl = ch.unary_unary(RLS, request_serializer=self.Req.SerializeToString,
                                 response_deserializer=self.Resp.FromString)
            r = self.Req(domain="edge")
            r.descriptors.add().entries.add(key="user", value=user)
            return srl(r, timeout=timeout)

    def call_many(self, addr, entries, pad):
        """One ShouldRateLimit with a descriptor per (key, value) of entries, each with a pad
        entry of pad bytes that no limit names."""
        creds = grpc.ssl_channel_credentials(root_certificates=read(self.d, "server-ca.pem"))
        with grpc.secure_channel(addr, creds) as ch:
            srl = ch.unary_unary(RLS, request_serializer=self.Req.SerializeToString,
                                 response_deserializer=self.Resp.FromString)
            r = self.Req(domain="edge")
            for k, v in entries:
                d = r.descriptors.add()
                d.entries.add(key=k, value=v)
                d.entries.add(key="pad", value="p" * pad)
            self.assertGreater(r.ByteSize(), 60000)
            return srl(r, timeout=5)

    def assert_refused(self, addr, client, why, log):
        with self.assertRaises(grpc.RpcError) as e:
            self.call(addr, client)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        log.wait_log("warn: grpc: TLS handshake with 127.0.0.1 refused: " + why)

    def test_tls_configured_natively(self):
        d = self.dir()
        dm = Daemon(d, '{"grpc": {"tls": {"cert": "server.pem", "key": "server.key"}}, %s}'
                    % LEVELS)
        try:
            r = self.call(dm.addr)
            self.assertEqual(r.overall_code, self.Resp.Code.Value("OK"))
            self.assertEqual(r.statuses[0].limit_remaining, 2)
            self.assertEqual(self.call(dm.addr).statuses[0].limit_remaining, 1)
            # a message of 60 KB comes in several TLS records, all read: bob's first call
            r = self.call_many(dm.addr, [("user", "bob")], pad=60000)
            self.assertEqual(r.overall_code, self.Resp.Code.Value("OK"))
            self.assertEqual(r.statuses[0].limit_remaining, 2)
            self.assertEqual(self.call(dm.addr, user="bob").statuses[0].limit_remaining, 1)
            # ALPN: h2 chosen; a client that offers only http/1.1 is refused
            with raw_tls(dm.port, os.path.join(d, "server-ca.pem")) as s:
                self.assertEqual(s.selected_alpn_protocol(), "h2")
            with self.assertRaises(ssl.SSLError):
                raw_tls(dm.port, os.path.join(d, "server-ca.pem"), alpn=("http/1.1",))
            # cleartext HTTP/2 on the TLS port gets no answer
            with grpc.insecure_channel(dm.addr) as ch:
                srl = ch.unary_unary(RLS, request_serializer=self.Req.SerializeToString,
                                     response_deserializer=self.Resp.FromString)
                with self.assertRaises(grpc.RpcError) as e:
                    srl(self.Req(domain="edge"), timeout=3)
                self.assertIn(e.exception.code(), (grpc.StatusCode.UNAVAILABLE,
                                                   grpc.StatusCode.DEADLINE_EXCEEDED))
            self.assertIn("grpc: TLS (ALPN h2) with server.pem", dm.log_text())
        finally:
            dm.stop()

    def test_mtls_from_upstreams_variables(self):
        d = self.dir()
        dm = Daemon(d, "{%s}" % LEVELS, env={
            "GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "server.pem",
            "GRPC_SERVER_TLS_KEY": "server.key", "GRPC_CLIENT_TLS_CACERT": "client-ca.pem",
            "GRPC_CLIENT_TLS_SAN": "envoy.client"})
        try:
            self.assert_refused(dm.addr, None, "", dm)
            self.assert_refused(dm.addr, "client-other-ca",
                                "the client certificate is not signed by a CA of the client "
                                "CA file", dm)
            self.assert_refused(dm.addr, "client-other-san",
                                "the client certificate's subjectAltName does not hold the DNS "
                                "name envoy.client", dm)
            # nothing was counted by the refusals: the right client's first call leaves 2
            r = self.call(dm.addr, "client")
            self.assertEqual(r.overall_code, self.Resp.Code.Value("OK"))
            self.assertEqual(r.statuses[0].limit_remaining, 2)
            self.assertIn("client certificates required (mTLS), signed by client-ca.pem, with "
                          "the DNS name envoy.client", dm.log_text())
        finally:
            dm.stop()

    def test_mtls_configured_natively_without_san(self):
        d = self.dir()
        dm = Daemon(d, '{"grpc": {"tls": {"cert": "server.pem", "key": "server.key", '
                    '"client_ca": "client-ca.pem"}}, %s}' % LEVELS)
        try:
            self.assert_refused(dm.addr, None, "", dm)
            self.assert_refused(dm.addr, "client-other-ca", "the client certificate is not", dm)
            # any name the client CA signed will do
            self.assertEqual(self.call(dm.addr, "client-other-san").statuses[0].limit_remaining,
                             2)
            self.assertEqual(self.call(dm.addr, "client").statuses[0].limit_remaining, 1)
        finally:
            dm.stop()

    def test_sighup_swaps_the_certificate_and_keeps_connections(self):
        d = self.dir()
        dm = Daemon(d, '{"grpc": {"tls": {"cert": "server.pem", "key": "server.key"}}, %s}'
                    % LEVELS)
        ca = os.path.join(d, "server-ca.pem")
        try:
            old = raw_tls(dm.port, ca)
            self.assertEqual(old.getpeercert(True), ssl.PEM_cert_to_DER_cert(
                read(d, "server.pem").decode()))
            self.assertEqual(h2_ping(old, b"before!!"), b"before!!")
            shutil.copy(os.path.join(d, "server2.pem"), os.path.join(d, "server.pem"))
            shutil.copy(os.path.join(d, "server2.key"), os.path.join(d, "server.key"))
            dm.proc.send_signal(signal.SIGHUP)
            dm.wait_log("grpc: certificates read again from server.pem (new connections get "
                        "them)")
            # a new connection gets the new certificate ...
            with raw_tls(dm.port, ca) as new:
                self.assertEqual(new.getpeercert(True), ssl.PEM_cert_to_DER_cert(
                    read(d, "server2.pem").decode()))
            self.assertEqual(self.call(dm.addr).statuses[0].limit_remaining, 2)
            # ... and the one opened before still answers
            old.sendall(struct.pack(">I", 8)[1:] + b"\x06\x00\x00\x00\x00\x00" + b"after!!!")
            self.assertEqual(frames_until(old, 6, 1), b"after!!!")
            old.close()
            # a certificate that cannot be read keeps the one in force
            with open(os.path.join(d, "server.key"), "w") as f:
                f.write("not a key\n")
            dm.proc.send_signal(signal.SIGHUP)
            dm.wait_log("error: grpc: certificates not read again, the ones in force stay: "
                        "grpc.tls.key: server.key:")
            self.assertEqual(self.call(dm.addr).statuses[0].limit_remaining, 1)
        finally:
            dm.stop()

    def check_config(self, d, config, env=None):
        path = os.path.join(d, "c.json")
        with open(path, "w") as f:
            f.write(config)
        e = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
        e.update(env or {})
        p = subprocess.run([os.path.join(BUILD, "ratelimitd"), "--check-config", path],
                           capture_output=True, text=True, cwd=d, env=e)
        return p.returncode, p.stdout + p.stderr

    def test_bad_settings_name_the_field(self):
        d = self.dir()
        cases = [
            ('{"grpc": {"tls": {"cert": "server.pem"}}, %s}' % LEVELS, None,
             "grpc.tls: give both cert and key"),
            ('{"grpc": {"tls": {"cert": "none.pem", "key": "server.key"}}, %s}' % LEVELS, None,
             "grpc.tls.cert: none.pem: No such file or directory"),
            ('{"grpc": {"tls": {"cert": "server.pem", "key": "server.key", "client_san": "x"}}, '
             '%s}' % LEVELS, None, "grpc.tls.client_san: needs grpc.tls.client_ca"),
            ('{"grpc": {"tls": {"cert": "server.pem", "key": "server.pem"}}, %s}' % LEVELS, None,
             "grpc.tls.key: server.pem:"),
            ('{"grpc": {"tls": {"cert": "server.pem", "key": "server.key", "client_ca": '
             '"server.key"}}, %s}' % LEVELS, None, "grpc.tls.client_ca: server.key: "),
            ('{"grpc": {"tls": {"crt": "server.pem"}}, %s}' % LEVELS, None,
             "grpc.tls.crt: unknown field (known: cert, key, client_ca, client_san)"),
            ("{%s}" % LEVELS, {"GRPC_SERVER_USE_TLS": "yes"},
             "GRPC_SERVER_USE_TLS: must be true or false"),
            ("{%s}" % LEVELS, {"GRPC_SERVER_USE_TLS": "1", "GRPC_SERVER_TLS_CERT": "server.pem"},
             "GRPC_SERVER_TLS_KEY: GRPC_SERVER_USE_TLS is true: give the key file"),
            ("{%s}" % LEVELS, {"GRPC_SERVER_USE_TLS": "True", "GRPC_SERVER_TLS_CERT": "server.pem",
                               "GRPC_SERVER_TLS_KEY": "gone.key"},
             "GRPC_SERVER_TLS_KEY: gone.key: No such file or directory"),
        ]
        for config, env, want in cases:
            rc, out = self.check_config(d, config, env)
            self.assertEqual(rc, 1, out)
            self.assertIn(want, out)
        # false leaves the port in cleartext, whatever else is set
        rc, out = self.check_config(d, "{%s}" % LEVELS, {"GRPC_SERVER_USE_TLS": "false",
                                                         "GRPC_SERVER_TLS_CERT": "gone.pem"})
        self.assertEqual((rc, out.strip()), (0, "ok"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
