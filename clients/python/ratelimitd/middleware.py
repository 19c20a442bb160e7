"""ASGI and WSGI middlewares: each request is decided by ratelimitd before the application sees
it; a denied one is answered 429 with `Retry-After` and the `RateLimit` headers, an allowed one
gets the `RateLimit` headers added to its answer, and a reservation the decision holds (a
`concurrency` rule's slot) is released when the answer is done.

keys: how to key a request: a dict of descriptor name to request header
    (`{"user": "X-User", "team": "X-Team"}`; a missing or empty header leaves its descriptor out,
    so its level is skipped), or a function of the request (the ASGI scope or the WSGI environ)
    returning the descriptors, or None to let the request through undecided.
cost, priority: a number, or a function of the request returning one (None: the daemon's
    default).
headers: whether allowed answers get the `RateLimit` headers too (denials always do).

A key that ratelimitd refuses (an empty, too long or control-character key from a header) is
the request's fault: it is answered 400 with ratelimitd's message, which names the descriptor.
"""
import asyncio
import json

from .client import Error, retry_after_header

_PASSED_ON = ("RateLimit-Policy", "RateLimit")


def _value(option, request):
    return option(request) if callable(option) else option


def _keys(option, request, header):
    if callable(option):
        return option(request)
    keys = {}
    for descriptor, name in option.items():
        v = header(request, name)
        if v:
            keys[descriptor] = v
    return keys


def denial(decision):
    """The answer to a denied request: (headers as (name, value) pairs, JSON body bytes)."""
    headers = [("Content-Type", "application/json")]
    ra = retry_after_header(decision)
    if ra is not None:
        headers.append(("Retry-After", ra))
    headers += [(h, decision.headers[h]) for h in _PASSED_ON if h in decision.headers]
    body = {"error": "rate limited", "blocked_by": decision.blocked_by,
            "retry_after": decision.retry_after}
    return headers, json.dumps(body, separators=(",", ":")).encode()


def refusal(error):
    """The answer to a request whose keys ratelimitd refused with 400: (headers, body)."""
    body = json.dumps({"error": error.message}, separators=(",", ":")).encode()
    return [("Content-Type", "application/json")], body


def _allowed_headers(decision, on):
    return [(h, decision.headers[h]) for h in _PASSED_ON if on and h in decision.headers]


def _release(client, reservation):
    try:
        client.release(reservation)
    except Exception:  # the slot comes back by itself after the daemon's reservation_ttl
        pass


class ASGIMiddleware:
    """Wraps an ASGI application (Starlette, FastAPI, ...): `ASGIMiddleware(app, client,
    keys={"user": "X-User"})`, or with Starlette `app.add_middleware(ASGIMiddleware,
    client=client, keys=...)`. The client's blocking calls run in a worker thread, so the
    event loop never waits on ratelimitd."""

    def __init__(self, app, client, keys, cost=None, priority=None, headers=True):
        self.app = app
        self.client = client
        self.keys = keys
        self.cost = cost
        self.priority = priority
        self.headers = headers

    @staticmethod
    def _header(scope, name):
        want = name.lower().encode("latin-1")
        for k, v in scope.get("headers") or ():
            if k.lower() == want:
                return v.decode("latin-1")
        return None

    @staticmethod
    async def _answer(send, status, headers, body):
        await send({"type": "http.response.start", "status": status,
                    "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                                for k, v in headers]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        keys = _keys(self.keys, scope, self._header)
        if keys is None:
            return await self.app(scope, receive, send)
        try:
            d = await asyncio.to_thread(self.client.acquire, keys,
                                        cost=_value(self.cost, scope),
                                        priority=_value(self.priority, scope))
        except Error as e:
            if e.status != 400:
                raise
            return await self._answer(send, 400, *refusal(e))
        if not d.allowed:
            return await self._answer(send, 429, *denial(d))
        extra = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                 for k, v in _allowed_headers(d, self.headers)]

        async def send_with_headers(message):
            if message["type"] == "http.response.start" and extra:
                message = dict(message)
                message["headers"] = list(message.get("headers") or ()) + extra
            await send(message)

        try:
            return await self.app(scope, receive, send_with_headers)
        finally:
            if d.reservation:
                await asyncio.to_thread(_release, self.client, d.reservation)


class WSGIMiddleware:
    """Wraps a WSGI application (Flask: `app.wsgi_app = WSGIMiddleware(app.wsgi_app, client,
    keys={"user": "X-User"})`). A reservation is released when the server closes the answer."""

    def __init__(self, app, client, keys, cost=None, priority=None, headers=True):
        self.app = app
        self.client = client
        self.keys = keys
        self.cost = cost
        self.priority = priority
        self.headers = headers

    @staticmethod
    def _header(environ, name):
        return environ.get("HTTP_" + name.upper().replace("-", "_"))

    def __call__(self, environ, start_response):
        keys = _keys(self.keys, environ, self._header)
        if keys is None:
            return self.app(environ, start_response)
        try:
            d = self.client.acquire(keys, cost=_value(self.cost, environ),
                                    priority=_value(self.priority, environ))
        except Error as e:
            if e.status != 400:
                raise
            headers, body = refusal(e)
            start_response("400 Bad Request", headers + [("Content-Length", str(len(body)))])
            return [body]
        if not d.allowed:
            headers, body = denial(d)
            start_response("429 Too Many Requests", headers + [("Content-Length", str(len(body)))])
            return [body]
        extra = _allowed_headers(d, self.headers)

        def start_with_headers(status, headers, exc_info=None):
            return start_response(status, list(headers) + extra, exc_info)

        if not d.reservation:
            return self.app(environ, start_with_headers)
        try:
            result = self.app(environ, start_with_headers)
        except BaseException:
            _release(self.client, d.reservation)
            raise
        return _ClosingIterable(result, lambda: _release(self.client, d.reservation))


class _ClosingIterable:
    """An answer's iterable that calls `done` once when the server closes it (PEP 3333)."""

    def __init__(self, result, done):
        self._result = result
        self._done = done

    def __iter__(self):
        return iter(self._result)

    def close(self):
        try:
            if hasattr(self._result, "close"):
                self._result.close()
        finally:
            done, self._done = self._done, None
            if done:
                done()
