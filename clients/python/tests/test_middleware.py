"""The ASGI middleware under Starlette (Debian's python3-starlette, its TestClient) and the WSGI
middleware under Flask (python3-flask, its test client), against a real ratelimitd on the real
clock:

  user     token_bucket "per-user", capacity 2, 0.001/s: two requests, then one every 1000 s
  backend  concurrency "slots", 1 in flight, retry hint 3 s

Run by make clients-check with RL_BUILD naming the build directory.
"""
import asyncio
import socket
import unittest

import flask
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from daemon import Daemon
from ratelimitd import ASGIMiddleware, Client, WSGIMiddleware

CONFIG = {
    "listen": {"address": "127.0.0.1", "port": 0},
    "levels": [
        {"name": "user", "rules": [
            {"type": "token_bucket", "name": "per-user", "capacity": 2, "per_second": 0.001}]},
        {"name": "backend", "rules": [
            {"type": "concurrency", "name": "slots", "limit": 1, "retry": 3}]},
    ],
}

POLICY = '"user.per-user";q=2;w=2000'


def by_path(path, user):
    """Keys by a function: /slow holds the backend's slot, /health is not limited."""
    if path == "/health":
        return None
    if path == "/slow":
        return {"backend": "gpu"}
    return {"user": user} if user else {}


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Checks:
    """The same cases for both middlewares; a subclass gives get(app, path, user) ->
    (status, headers, body text) and the apps."""

    def test_headers_keyed_allowed_then_denied(self):
        app = self.header_app(self.client)
        status, h, body = self.get(app, "/", self.user("ann"))
        self.assertEqual((status, body), (200, "hello"))
        self.assertEqual(h["ratelimit-policy"], POLICY)
        self.assertRegex(h["ratelimit"], r'^"user\.per-user";r=1;t=\d+$')
        status, h, _ = self.get(app, "/", self.user("ann"))
        self.assertEqual(status, 200)
        self.assertRegex(h["ratelimit"], r'^"user\.per-user";r=0;t=\d+$')
        # the third waits for one token at 0.001/s: 1000 s, less the few ms since
        status, h, body = self.get(app, "/", self.user("ann"))
        self.assertEqual(status, 429)
        self.assertEqual(h["retry-after"], "1000")
        self.assertEqual(h["ratelimit-policy"], POLICY)
        self.assertRegex(h["ratelimit"], r'^"user\.per-user";r=0;t=1000$')
        self.assertEqual(h["content-type"], "application/json")
        self.assertRegex(body, r'^\{"error":"rate limited","blocked_by":"user: per-user",'
                               r'"retry_after":99\d\.\d+\}$')
        # another user, and a request without the header (no level applies)
        self.assertEqual(self.get(app, "/", self.user("bob"))[0], 200)
        status, h, _ = self.get(app, "/", {})
        self.assertEqual(status, 200)
        self.assertNotIn("ratelimit", h)

    def test_cost_from_a_function(self):
        app = self.header_app(self.client, cost=lambda request: 2)
        self.assertEqual(self.get(app, "/", self.user("cat"))[0], 200)
        self.assertEqual(self.get(app, "/", self.user("cat"))[0], 429)

    def test_function_keyed_holds_and_releases_the_slot(self):
        app = self.function_app(self.client)
        for _ in range(3):  # each request finds the slot free again
            status, h, body = self.get(app, "/slow", {})
            self.assertEqual(status, 200)
            self.assertEqual(body, '{"held":true}')  # while it ran, a dry run was denied
        status, h, body = self.get(app, "/health", {})
        self.assertEqual((status, body), (200, "hello"))
        self.assertNotIn("ratelimit", h)

    def test_a_refused_key_is_the_requests_fault(self):
        app = self.header_app(self.client)
        status, h, body = self.get(app, "/", {"X-User": "x" * 300})
        self.assertEqual(status, 400)
        self.assertEqual(h["content-type"], "application/json")
        self.assertRegex(body, r'^\{"error":"keys\.user: [^"]+"\}$')

    def test_unreachable(self):
        url = "http://127.0.0.1:%d" % closed_port()
        app = self.header_app(Client(url, timeout=1, fail_open=True))
        self.assertEqual(self.get(app, "/", self.user("dee"))[0], 200)
        app = self.header_app(Client(url, timeout=1, fail_open=False))
        status, h, body = self.get(app, "/", self.user("dee"))
        self.assertEqual(status, 429)
        self.assertEqual(h["retry-after"], "1")
        self.assertEqual(body, '{"error":"rate limited","blocked_by":"ratelimitd: unavailable",'
                               '"retry_after":1}')


def setUpDaemon(cls):
    cls.d = Daemon(CONFIG)
    cls.client = Client(cls.d.url, timeout=5)


def tearDownDaemon(cls):
    cls.client.close()
    cls.d.stop()


class ASGI(Checks, unittest.TestCase):
    setUpClass = classmethod(setUpDaemon)
    tearDownClass = classmethod(tearDownDaemon)

    def user(self, name):
        return {"X-User": "asgi-" + name}

    @staticmethod
    def routes(client):
        async def home(request):
            return PlainTextResponse("hello")

        async def slow(request):
            d = await asyncio.to_thread(client.acquire, {"backend": "gpu"}, dry_run=True)
            return JSONResponse({"held": not d.allowed}, media_type="application/json")

        return [Route("/", home), Route("/health", home), Route("/slow", slow)]

    def header_app(self, client, cost=None):
        app = Starlette(routes=self.routes(self.client))
        app.add_middleware(ASGIMiddleware, client=client, keys={"user": "X-User"}, cost=cost)
        return app

    def function_app(self, client):
        def keys(scope):
            user = dict(scope["headers"]).get(b"x-user")
            return by_path(scope["path"], user and user.decode())
        return ASGIMiddleware(Starlette(routes=self.routes(client)), client, keys=keys)

    def get(self, app, path, headers):
        with TestClient(app) as tc:
            r = tc.get(path, headers=headers)
        return r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.text


class WSGI(Checks, unittest.TestCase):
    setUpClass = classmethod(setUpDaemon)
    tearDownClass = classmethod(tearDownDaemon)

    def user(self, name):
        return {"X-User": "wsgi-" + name}

    @staticmethod
    def flask_app(client):
        app = flask.Flask(__name__)

        @app.get("/")
        @app.get("/health")
        def home():
            return "hello"

        @app.get("/slow")
        def slow():
            d = client.acquire({"backend": "gpu"}, dry_run=True)
            return flask.Response('{"held":%s}' % ("true" if not d.allowed else "false"),
                                  mimetype="application/json")

        return app

    def header_app(self, client, cost=None):
        app = self.flask_app(self.client)
        app.wsgi_app = WSGIMiddleware(app.wsgi_app, client, keys={"user": "X-User"}, cost=cost)
        return app

    def function_app(self, client):
        app = self.flask_app(client)
        app.wsgi_app = WSGIMiddleware(
            app.wsgi_app, client,
            keys=lambda environ: by_path(environ["PATH_INFO"], environ.get("HTTP_X_USER")))
        return app

    def get(self, app, path, headers):
        # buffered: the test client closes the answer as a server does after sending it
        r = app.test_client().get(path, headers=headers, buffered=True)
        return r.status_code, {k.lower(): v for k, v in r.headers.items()}, \
            r.get_data(as_text=True)


if __name__ == "__main__":
    unittest.main()
