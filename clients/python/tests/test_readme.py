"""The ```python blocks of clients/python/README.md, each run as shown (127.0.0.1:8080 replaced by
a real daemon's address) and then exercised: every block must be exercised by one check below,
so an example cannot go untested.

The daemon's `user` level counts tokens: token_bucket "tokens", capacity 100000, 1000/s.
"""
import os
import re
import unittest

import flask
from starlette.applications import Starlette
from starlette.testclient import TestClient

from daemon import Daemon
from ratelimitd import Client

README = os.path.join(os.path.dirname(__file__), "..", "README.md")
CONFIG = {
    "listen": {"address": "127.0.0.1", "port": 0},
    "levels": [{"name": "user", "rules": [
        {"type": "token_bucket", "name": "tokens", "capacity": 100000, "per_second": 1000}]}],
}


def blocks():
    with open(README) as f:
        return re.findall(r"^```python\n(.*?)^```$", f.read(), re.M | re.S)


# Stand-ins for the tokenizer and the model: a prompt of 200 tokens, a reply of 734.
def count_tokens(prompt):
    return 200


def call_model(prompt, max_tokens):
    return {"text": "...", "usage": {"input_tokens": 200, "output_tokens": 734}}


def clients(ns):
    """The Clients an example made: its own, and those its middlewares hold."""
    for v in ns.values():
        if isinstance(v, Client):
            yield v
        elif isinstance(v, flask.Flask) and isinstance(getattr(v.wsgi_app, "client", None), Client):
            yield v.wsgi_app.client
        elif isinstance(v, Starlette):
            for m in v.user_middleware:
                if isinstance(m.options.get("client"), Client):
                    yield m.options["client"]


class Readme(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(CONFIG)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def check_reserve_and_settle(self, ns):
        reply = ns["complete"]("alice", "Say hello.", max_tokens=1000)
        self.assertEqual(reply["usage"]["output_tokens"], 734)
        # reserved 200 + 1000, used 200 + 734: 266 came back, none is held any more
        self.assertEqual(self.d.metric("ratelimit_cost_total"), 1200)
        self.assertEqual(self.d.metric("ratelimit_refunded_cost_total"), 266)
        self.assertEqual(self.d.metric("ratelimit_reservations_active"), 0)

    def check_middleware(self, status_headers):
        status, headers = status_headers
        self.assertEqual(status, 200)
        self.assertRegex(headers["ratelimit"], r'^"user\.tokens";r=99999;t=\d+$')

    def test_every_example_runs(self):
        found = blocks()
        self.assertGreaterEqual(len(found), 3, "the README's examples are missing")
        for i, code in enumerate(found):
            with self.subTest(block=i):
                ns = {"count_tokens": count_tokens, "call_model": call_model,
                      "__name__": "readme_example"}
                exec(compile(code.replace("127.0.0.1:8080", self.d.addr), "README.md[%d]" % i,
                             "exec"), ns)
                app = ns.get("app")
                if "complete" in ns:
                    self.check_reserve_and_settle(ns)
                elif isinstance(app, flask.Flask):
                    r = app.test_client().get("/", headers={"X-User": "wsgi"}, buffered=True)
                    self.check_middleware(
                        (r.status_code, {k.lower(): v for k, v in r.headers.items()}))
                elif isinstance(app, Starlette):
                    with TestClient(app) as tc:
                        r = tc.get("/", headers={"X-User": "asgi"})
                    self.check_middleware(
                        (r.status_code, {k.lower(): v for k, v in r.headers.items()}))
                else:
                    self.fail("README block %d is not exercised by this test:\n%s" % (i, code))
                for c in clients(ns):
                    c.close()


if __name__ == "__main__":
    unittest.main()
