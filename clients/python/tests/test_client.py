"""The client against a real ratelimitd. Most cases run on a daemon with --manual-clock, each
call carrying its time in `now`, so every number below is worked out by hand:

  user     token_bucket "per-user", capacity 100, 10/s (full from empty in 10 s)
  backend  concurrency "slots", 1 in flight, retry hint 2 s

The waiting and the idle connections need time to pass: they run on a second daemon on the
real clock (a bucket of 1 refilled at 5/s: one more every 0.2 s; idle connections closed after
1 s). Run by make clients-check with RL_BUILD naming the build directory.
"""
import os
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

from daemon import Daemon
from ratelimitd import Client, Error, Limit, RateLimited, Settlement, Unavailable

MANUAL = {
    "listen": {"address": "127.0.0.1", "port": 0},
    "reservation_ttl": 60,
    "levels": [
        {"name": "user", "rules": [
            {"type": "token_bucket", "name": "per-user", "capacity": 100, "per_second": 10}]},
        {"name": "backend", "rules": [
            {"type": "concurrency", "name": "slots", "limit": 1, "retry": 2}]},
    ],
}

REAL = {
    "listen": {"address": "127.0.0.1", "port": 0},
    "connection_timeout": 1,
    "levels": [
        {"name": "user", "rules": [
            {"type": "token_bucket", "name": "per-user", "capacity": 1, "per_second": 5}]},
    ],
}

DENIED = 'ratelimit_acquire_total{decision="denied"}'


def free_port():
    """A loopback port nothing listens on."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class ManualClock(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(MANUAL, "--manual-clock")
        cls.c = Client(cls.d.url, timeout=5)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.d.stop()

    def balance(self, user, now):
        """What `user` has left at `now` (a dry run takes nothing)."""
        d = self.c.acquire({"user": user}, dry_run=True, now=now)
        return d.limits[0].remaining

    def test_allowed_then_denied_then_allowed(self):
        d = self.c.acquire({"user": "ann"}, cost=30, now=0)
        self.assertTrue(d.allowed)
        self.assertEqual(d.retry_after, 0)
        self.assertIsNone(d.blocked_by)
        self.assertIsNone(d.reservation)
        # 100 - 30 = 70 left, full again in 30 / 10 = 3 s
        self.assertEqual(d.limits, (Limit("user", "ann", "per-user", 100, 70, 3),))
        self.assertEqual(d.headers["RateLimit-Policy"], '"user.per-user";q=100;w=10')
        self.assertEqual(d.headers["RateLimit"], '"user.per-user";r=70;t=1')
        self.assertNotIn("Retry-After", d.headers)
        self.assertFalse(d.unavailable)

        # 80 needs 10 more than the 70 left: 1 s at 10/s; nothing is taken
        d = self.c.acquire({"user": "ann"}, cost=80, now=0)
        self.assertFalse(d.allowed)
        self.assertEqual(d.retry_after, 1)
        self.assertEqual(d.blocked_by, "user: per-user")
        self.assertEqual(d.limits[0].remaining, 70)
        self.assertEqual(d.headers["Retry-After"], "1")

        d = self.c.acquire({"user": "ann"}, cost=80, now=1)
        self.assertTrue(d.allowed)
        self.assertEqual(d.limits[0].remaining, 0)

    def test_does_not_wait_past_the_deadline(self):
        # 10 more need 1 s at 10/s: past a deadline of 0.5 s, so it answers at once, asked once
        c = Client(self.d.url, timeout=5, wait=0.5)
        self.assertTrue(c.acquire({"user": "wes"}, cost=100, now=0).allowed)
        denied = self.d.metric(DENIED)
        t = time.monotonic()
        d = c.acquire({"user": "wes"}, cost=10, now=0)
        self.assertLess(time.monotonic() - t, 0.5)
        self.assertFalse(d.allowed)
        self.assertEqual(d.retry_after, 1)
        self.assertEqual(self.d.metric(DENIED), denied + 1)
        c.close()

    def test_a_cost_that_never_fits(self):
        d = self.c.acquire({"user": "abe"}, cost=101, now=0)
        self.assertFalse(d.allowed)
        self.assertIsNone(d.retry_after)
        self.assertNotIn("Retry-After", d.headers)
        # and waiting does not help: it answers at once
        t = time.monotonic()
        d = self.c.acquire({"user": "abe"}, cost=101, now=0, wait=5)
        self.assertFalse(d.allowed)
        self.assertLess(time.monotonic() - t, 1)

    def test_reserve_and_settle_below(self):
        with self.c.reserve({"user": "bea"}, cost=50, now=0) as r:
            self.assertRegex(r.id, r"^r-[0-9a-f]{16}$")
            self.assertEqual(r.decision.limits[0].remaining, 50)
            s = r.settle(20)
        self.assertEqual(s, Settlement(r.id, 50, 20, 30, 0))
        self.assertEqual(r.settlement, s)
        self.assertEqual(self.balance("bea", 0), 80)  # 100 - 50 + 30
        self.assertFalse(self.c.release(r.id))  # left the block: released

    def test_reserve_and_settle_above(self):
        with self.c.reserve({"user": "cid"}, cost=50, now=0) as r:
            s = r.settle(70)
        self.assertEqual((s.refunded, s.charged), (0, 20))
        self.assertEqual(self.balance("cid", 0), 30)  # 100 - 50 - 20

    def test_reserve_releases_on_an_exception(self):
        active = self.d.metric("ratelimit_reservations_active")
        with self.assertRaises(ZeroDivisionError):
            with self.c.reserve({"user": "dan"}, cost=50, now=0) as r:
                self.assertEqual(self.d.metric("ratelimit_reservations_active"), active + 1)
                1 / 0
        self.assertEqual(self.d.metric("ratelimit_reservations_active"), active)
        self.assertFalse(self.c.release(r.id))
        self.assertEqual(self.balance("dan", 0), 50)  # released unsettled: the reserved cost

    def test_reserve_denied(self):
        with self.assertRaises(RateLimited) as e:
            with self.c.reserve({"user": "eve"}, cost=150, now=0):
                self.fail("entered a denied reservation")
        self.assertIsNone(e.exception.decision.retry_after)
        self.assertEqual(e.exception.decision.blocked_by, "user: per-user")
        self.assertEqual(e.exception.status, 429)
        self.assertEqual(self.balance("eve", 0), 100)

    def test_settle_twice_and_unknown(self):
        with self.c.reserve({"user": "fay"}, cost=10, now=0) as r:
            r.settle(5)
            with self.assertRaises(Error) as e:
                r.settle(5)
            self.assertEqual((e.exception.status, e.exception.message),
                             (409, "reservation: already settled"))
        with self.assertRaises(Error) as e:
            self.c.refund("r-0000000000000000", 1)
        self.assertEqual((e.exception.status, e.exception.message),
                         (404, "reservation: unknown or expired"))
        with self.assertRaises(ValueError):
            self.c.refund(r.id)

    def test_concurrency_slot(self):
        d = self.c.acquire({"backend": "gpu"}, now=0)
        self.assertTrue(d.allowed)
        self.assertRegex(d.reservation, r"^r-[0-9a-f]{16}$")
        self.assertEqual(d.limits[0].remaining, 0)
        held = self.c.acquire({"backend": "gpu"}, now=0)
        self.assertFalse(held.allowed)
        self.assertEqual((held.retry_after, held.blocked_by), (2, "backend: slots"))
        self.assertTrue(self.c.release(d.reservation))
        self.assertFalse(self.c.release(d.reservation))
        again = self.c.acquire({"backend": "gpu"}, now=0)
        self.assertTrue(again.allowed)
        self.assertTrue(self.c.release(again.reservation))

    def test_release_says_how_the_call_went(self):
        d = self.c.acquire({"backend": "gpu"}, now=0)
        with self.assertRaises(Error) as e:
            self.c.release(d.reservation, outcome="slow")
        self.assertEqual((e.exception.status, e.exception.message),
                         (400, 'outcome: must be "ok", "error", "timeout" or "dropped"'))
        self.assertTrue(self.c.release(d.reservation, latency_ms=120, outcome="ok"))

    def test_refused_requests_raise_with_the_field(self):
        with self.assertRaises(Error) as e:
            self.c.acquire({"usr": "x"}, now=0)
        self.assertEqual(e.exception.status, 400)
        self.assertTrue(e.exception.message.startswith("keys.usr: "), e.exception.message)
        with self.assertRaises(Error) as e:
            self.c.acquire({"user": "x"}, cost=0, now=0)
        self.assertTrue(e.exception.message.startswith("cost: "), e.exception.message)
        with self.assertRaises(TypeError):
            self.c.acquire("alice")
        with self.assertRaises(TypeError):
            self.c.acquire({"user": "x"}, cost="1")
        with self.assertRaises(ValueError):
            Client("localhost:8080")
        with self.assertRaises(ValueError):
            Client(self.d.url, timeout=0)

    def test_usage_needs_a_daemon_with_named_dimensions(self):
        # Sent as given; this daemon does not count named dimensions and names the field.
        with self.assertRaises(Error) as e:
            self.c.acquire({"user": "gil"}, usage={"input_tokens": 5}, now=0)
        self.assertEqual(e.exception.status, 400)
        self.assertTrue(e.exception.message.startswith("usage"), e.exception.message)

    def test_one_connection_is_reused(self):
        c = Client(self.d.url, timeout=5)
        c.acquire({"user": "hal"}, dry_run=True, now=0)
        self.assertEqual(len(c._idle), 1)
        first = c._idle[0].sock.getsockname()
        for _ in range(5):
            c.acquire({"user": "hal"}, dry_run=True, now=0)
        self.assertEqual(len(c._idle), 1)
        self.assertEqual(c._idle[0].sock.getsockname(), first)
        c.close()
        self.assertEqual(c._idle, [])


class Unreachable(unittest.TestCase):
    def test_fail_open(self):
        c = Client("http://127.0.0.1:%d" % free_port(), timeout=1, fail_open=True)
        d = c.acquire({"user": "ann"}, cost=5)
        self.assertTrue(d.allowed)
        self.assertTrue(d.unavailable)
        self.assertIn("refused", d.error.lower())
        with c.reserve({"user": "ann"}, cost=5) as r:
            self.assertIsNone(r.id)
            self.assertIsNone(r.settle(3))
        with self.assertRaises(Unavailable):
            c.refund("r-0000000000000000", 1)
        with self.assertRaises(Unavailable):
            c.release("r-0000000000000000")

    def test_fail_closed(self):
        c = Client("http://127.0.0.1:%d" % free_port(), timeout=1, fail_open=False)
        d = c.acquire({"user": "ann"}, wait=5)
        self.assertFalse(d.allowed)
        self.assertTrue(d.unavailable)
        self.assertEqual((d.retry_after, d.blocked_by), (1, "ratelimitd: unavailable"))
        with self.assertRaises(RateLimited):
            with c.reserve({"user": "ann"}, cost=5):
                self.fail("entered")

    def test_timeout(self):
        # A socket that listens and never answers: connections complete, answers never come.
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        try:
            c = Client("http://127.0.0.1:%d" % s.getsockname()[1], timeout=0.3)
            t = time.monotonic()
            d = c.acquire({"user": "ann"})
            took = time.monotonic() - t
            self.assertTrue(d.allowed and d.unavailable)
            self.assertIn("timed out", d.error)
            self.assertGreaterEqual(took, 0.25)
            self.assertLess(took, 2)
        finally:
            s.close()

    def test_a_5xx_counts_as_unavailable(self):
        # max_keys 1: a second key finds the store full, none idle, and gets 503.
        d = Daemon({"listen": {"address": "127.0.0.1", "port": 0}, "max_keys": 1,
                    "levels": [{"name": "user", "rules": [
                        {"type": "token_bucket", "name": "u", "capacity": 10,
                         "per_second": 0.001}]}]})
        try:
            c = Client(d.url, fail_open=False)
            self.assertTrue(c.acquire({"user": "a"}).allowed)
            r = c.acquire({"user": "b"})
            self.assertFalse(r.allowed)
            self.assertTrue(r.unavailable)
            self.assertIn("503", r.error)
            c.close()
        finally:
            d.stop()


class RealClock(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(REAL)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_waits_for_retry_after(self):
        c = Client(self.d.url)
        self.assertTrue(c.acquire({"user": "w1"}).allowed)
        denied = self.d.metric(DENIED)
        t = time.monotonic()
        d = c.acquire({"user": "w1"}, wait=5)
        took = time.monotonic() - t
        self.assertTrue(d.allowed)
        self.assertGreaterEqual(took, 0.15)  # one token comes back in 0.2 s
        self.assertLess(took, 3)
        self.assertEqual(self.d.metric(DENIED), denied + 1)  # asked, slept, asked again
        c.close()

    def test_a_connection_closed_while_idle_is_replaced(self):
        c = Client(self.d.url)
        c.acquire({"user": "i1"}, dry_run=True)
        first = c._idle[0].sock.getsockname()
        time.sleep(2)  # the daemon closes connections idle for 1 s, looking every 0.25 s
        self.assertTrue(c.acquire({"user": "i1"}, dry_run=True).allowed)
        self.assertNotEqual(c._idle[0].sock.getsockname(), first)
        c.close()


class TlsAndToken(unittest.TestCase):
    """HTTPS with a certificate made here (openssl), and the daemon's acquire_token."""

    @classmethod
    def setUpClass(cls):
        cls.certs = tempfile.TemporaryDirectory(prefix="rl-client-py-tls-")
        cls.cert = os.path.join(cls.certs.name, "cert.pem")
        key = os.path.join(cls.certs.name, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                        "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cls.cert],
                       check=True, capture_output=True)
        cls.d = Daemon({"listen": {"address": "127.0.0.1", "port": 0},
                        "tls": {"cert": cls.cert, "key": key}, "acquire_token": "t0k3n",
                        "levels": MANUAL["levels"]})
        cls.url = "https://" + cls.d.addr

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()
        cls.certs.cleanup()

    def test_https_with_the_token(self):
        c = Client(self.url, token="t0k3n", ssl_context=ssl.create_default_context(cafile=self.cert))
        d = c.acquire({"user": "tls"}, cost=30)
        self.assertTrue(d.allowed)
        self.assertEqual(d.limits[0].remaining, 70)
        with c.reserve({"user": "tls"}, cost=10) as r:
            self.assertEqual(r.settle(4).refunded, 6)
        c.close()

    def test_without_the_token_is_refused_not_failed_open(self):
        c = Client(self.url, ssl_context=ssl.create_default_context(cafile=self.cert))
        with self.assertRaises(Error) as e:
            c.acquire({"user": "tls"})
        self.assertEqual(e.exception.status, 401)
        c.close()

    def test_an_untrusted_certificate_is_unreachable(self):
        c = Client(self.url, token="t0k3n", fail_open=False)
        d = c.acquire({"user": "tls"})
        self.assertFalse(d.allowed)
        self.assertTrue(d.unavailable)
        self.assertIn("CERTIFICATE_VERIFY_FAILED", d.error)


if __name__ == "__main__":
    unittest.main()
