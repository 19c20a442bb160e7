"""The client: POST /acquire, /refund and /release over persistent HTTP/1.1 connections."""
import http.client
import json
import math
import select
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Optional

from .contract import FIELDS, inner, top

# The answer headers a decision keeps, as ratelimitd names them, for the middlewares to pass on.
RATE_HEADERS = ("RateLimit-Policy", "RateLimit", "Retry-After")


class Error(Exception):
    """ratelimitd refused a request: `status` (400, 401, 404, 409, ...) and its `message`,
    which starts with the field at fault (`keys.usr: unknown descriptor ...`)."""

    def __init__(self, status, message):
        super().__init__("%s: %s" % (status, message) if status else message)
        self.status = status
        self.message = message


class Unavailable(Error):
    """ratelimitd could not be reached, did not answer within the timeout, or answered 5xx."""


class RateLimited(Error):
    """Raised by `Client.reserve` when the request is denied; `decision` says why and how long
    to wait."""

    def __init__(self, decision):
        super().__init__(429, "rate limited by %s, retry after %s s"
                         % (decision.blocked_by, decision.retry_after))
        self.decision = decision


@dataclass(frozen=True)
class Limit:
    """One applied rule of a decision and its balance afterwards (`limits[]` of /acquire)."""
    level: str
    key: str
    rule: str
    limit: float
    remaining: float
    reset_after: Optional[float]


@dataclass(frozen=True)
class Decision:
    """The answer of POST /acquire, with its fields as the API names them, and:
    `headers`: the `RateLimit`, `RateLimit-Policy` and `Retry-After` headers of the answer;
    `unavailable`: ratelimitd could not be reached and the client decided by `fail_open`
    (then `error` says why)."""
    allowed: bool
    retry_after: Optional[float]
    blocked_by: Optional[str]
    reservation: Optional[str]
    limits: tuple
    headers: dict
    unavailable: bool = False
    error: Optional[str] = None


@dataclass(frozen=True)
class Settlement:
    """The answer of POST /refund."""
    reservation: str
    reserved_cost: float
    actual_cost: float
    refunded: float
    charged: float
    usage: dict = None  # per dimension {reserved, actual, refunded, charged}, when counted
    usd: dict = None    # the same in dollars, when the reservation had prices


def _body(op, values):
    """The JSON body of `op` from the values given (None: not sent); only fields of the table."""
    known = FIELDS[op]["request"]
    body = {}
    for name, value in values.items():
        if name not in known:
            raise AssertionError("%s: %s is not in the client's table of fields" % (op, name))
        if value is not None:
            body[name] = value
    return body


def _readable(sock):
    """Whether an idle connection has something to read: then the daemon closed it (idle
    timeout, restart). poll where there is one: select fails on descriptors past 1023."""
    if hasattr(select, "poll"):
        p = select.poll()
        p.register(sock, select.POLLIN)
        return bool(p.poll(0))
    return bool(select.select([sock], [], [], 0)[0])


def _pick(cls, fields, obj):
    return cls(**{f: obj.get(f) for f in fields})


def _check_number(name, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise TypeError("%s: must be a number, not %r" % (name, value))


class Client:
    """A client of one ratelimitd.

    url: where it serves (`http://127.0.0.1:8080`, or https://; a path is kept as a prefix).
    timeout: seconds to connect and for each answer; past it the call counts as unreachable.
    fail_open: what an unreachable ratelimitd means: True allows (Decision.unavailable is set),
        False denies as ratelimitd's own closed mode does (`blocked_by` "ratelimitd:
        unavailable", `retry_after` 1).
    token: sent as `Authorization: Bearer <token>` (the daemon's `acquire_token`).
    wait: seconds `acquire` and `reserve` may wait by default for a denied request to fit.
    pool: idle connections kept for reuse; the client is safe to share between threads.
    ssl_context: for https://, an ssl.SSLContext (say, one that trusts the daemon's own
        certificate authority); default: the system's trusted authorities.
    """

    def __init__(self, url="http://127.0.0.1:8080", timeout=1.0, fail_open=True, token=None,
                 wait=0.0, pool=8, ssl_context=None):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("url: must be http://host[:port] or https://host[:port], not %r" % url)
        _check_number("timeout", timeout)
        if timeout <= 0:
            raise ValueError("timeout: must be a positive number of seconds, not %r" % timeout)
        _check_number("wait", wait)
        if wait < 0:
            raise ValueError("wait: must be 0 or more seconds, not %r" % wait)
        self.url = url
        self.timeout = timeout
        self.fail_open = bool(fail_open)
        self.wait = wait
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._prefix = u.path.rstrip("/")
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token is not None:
            self._headers["Authorization"] = "Bearer " + token
        self._pool = pool
        self._ssl_context = ssl_context
        self._idle = []
        self._lock = threading.Lock()

    # ---- connections --------------------------------------------------------------------------

    def _connect(self):
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout,
                                               context=self._ssl_context)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)

    def _take(self):
        """An idle connection that the daemon has not closed, else a new one; and whether it
        was reused."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect(), False
            if conn.sock is not None and not _readable(conn.sock):
                return conn, True
            conn.close()

    def _give(self, conn):
        with self._lock:
            if len(self._idle) < self._pool:
                self._idle.append(conn)
                return
        conn.close()

    def close(self):
        """Closes the idle connections (a later call opens new ones)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _post(self, path, body):
        """POSTs `body` as JSON: (status, headers, parsed body). Raises Unavailable when the
        daemon cannot be reached or answers 5xx."""
        data = json.dumps(body, separators=(",", ":")).encode()
        for attempt in (0, 1):
            conn, reused = self._take() if attempt == 0 else (self._connect(), False)
            try:
                conn.request("POST", self._prefix + path, body=data, headers=self._headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                conn.close()
                if reused:
                    continue  # closed by the daemon just as it was taken: once more, anew
                raise Unavailable(None, "%s: %s" % (self.url, e or type(e).__name__)) from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise Unavailable(None, "%s: %s" % (self.url, e or type(e).__name__)) from e
            if resp.will_close:
                conn.close()
            else:
                self._give(conn)
            break
        try:
            obj = json.loads(raw) if raw else {}
        except ValueError:
            obj = {"error": raw[:200].decode("utf-8", "replace")}
        if not isinstance(obj, dict):
            obj = {"error": "not a JSON object: %r" % raw[:200]}
        if resp.status >= 500:
            raise Unavailable(resp.status, "%s%s answered %d: %s"
                              % (self.url, path, resp.status, obj.get("error", "")))
        return resp.status, resp.headers, obj

    # ---- the operations -----------------------------------------------------------------------

    def acquire(self, keys, cost=None, usage=None, priority=None, reserve=False, dry_run=False,
                wait=None, now=None):
        """Asks whether a request may pass: POST /acquire. Returns a Decision.

        keys: descriptor name to key (`{"user": "alice", "team": "acme"}`).
        cost: the request's cost (default 1 on the daemon); priority: a whole number.
        usage: named dimensions (`{"input_tokens": 1200}`), sent only when given: the daemon
            must count named dimensions, else it answers 400 naming `usage` (raised as Error).
        reserve: keep the take as a reservation to settle (`refund`) or `release`.
        dry_run: decide without taking anything.
        wait: seconds to wait at most (default the client's `wait`) while denied: the client
            sleeps `retry_after` and asks again while that fits before the deadline; a request
            that can never fit (retry_after None) returns at once.
        now: seconds, for a daemon started with --manual-clock.
        Raises Error for a request the daemon refuses (400, 401); an unreachable daemon gives
        the `fail_open` decision instead.
        """
        if not isinstance(keys, dict):
            raise TypeError("keys: must be a dict of descriptor name to key, not %r" % (keys,))
        _check_number("cost", cost)
        _check_number("wait", wait)
        body = _body("acquire", {"keys": keys, "cost": cost, "usage": usage, "priority": priority,
                                 "reserve": True if reserve else None,
                                 "dry_run": True if dry_run else None, "now": now})
        deadline = time.monotonic() + (self.wait if wait is None else wait)
        while True:
            d = self._acquire_once(body)
            if d.allowed or d.unavailable or d.retry_after is None:
                return d
            pause = max(d.retry_after, 0.001)
            if time.monotonic() + pause > deadline:
                return d
            time.sleep(pause)

    def _acquire_once(self, body):
        try:
            status, headers, obj = self._post(FIELDS["acquire"]["path"], body)
        except Unavailable as e:
            return self._unreachable(e)
        if status not in (200, 429):
            raise Error(status, obj.get("error", "status %d" % status))
        fields = FIELDS["acquire"]["response"]
        values = {f: obj.get(f) for f in top(fields)}
        values["limits"] = tuple(_pick(Limit, inner(fields, "limits"), x)
                                 for x in obj.get("limits") or ())
        values["headers"] = {h: headers[h] for h in RATE_HEADERS if headers.get(h) is not None}
        return Decision(**values)

    def _unreachable(self, e):
        if self.fail_open:
            return Decision(allowed=True, retry_after=0, blocked_by=None, reservation=None,
                            limits=(), headers={}, unavailable=True, error=str(e))
        return Decision(allowed=False, retry_after=1, blocked_by="ratelimitd: unavailable",
                        reservation=None, limits=(), headers={"Retry-After": "1"},
                        unavailable=True, error=str(e))

    def refund(self, reservation, actual_cost=None, actual_usage=None, now=None, latency_ms=None,
               outcome=None):
        """Settles a reservation with what was really used: POST /refund. Returns a Settlement.

        actual_cost: the cost really used (0 to 10^12): what was reserved beyond it comes back,
            what it exceeds is charged. actual_usage: named dimensions (sent only when given,
            as `usage` in `acquire`). latency_ms and outcome ("ok", "error", "timeout",
            "dropped"): how the call went, for an adaptive_concurrency rule (as in `release`).
            Raises Error: 404 unknown or expired, 409 already settled; Unavailable when the
            daemon cannot be reached.
        """
        if actual_cost is None and actual_usage is None:
            raise ValueError("actual_cost: required (or actual_usage)")
        _check_number("actual_cost", actual_cost)
        body = _body("refund", {"reservation": reservation, "actual_cost": actual_cost,
                                "actual_usage": actual_usage, "now": now,
                                "latency_ms": latency_ms, "outcome": outcome})
        status, _, obj = self._post(FIELDS["refund"]["path"], body)
        if status != 200:
            raise Error(status, obj.get("error", "status %d" % status))
        return _pick(Settlement, FIELDS["refund"]["response"], obj)

    def release(self, reservation, now=None, latency_ms=None, outcome=None):
        """Ends a reservation and gives back its concurrency slots: POST /release. An unsettled
        reservation is settled at its reserved cost. latency_ms and outcome ("ok", "error",
        "timeout", "dropped"; sent only when given): how the call went, which an
        adaptive_concurrency rule learns its limit from. Returns True, or False when the daemon
        does not know it (expired, or released already). Raises Unavailable when it cannot be
        reached, Error 400 for a bad latency_ms or outcome."""
        body = _body("release", {"reservation": reservation, "now": now,
                                 "latency_ms": latency_ms, "outcome": outcome})
        status, _, obj = self._post(FIELDS["release"]["path"], body)
        if status == 404:
            return False
        if status != 200:
            raise Error(status, obj.get("error", "status %d" % status))
        return obj.get("released") is True

    def reserve(self, keys, cost=None, usage=None, priority=None, wait=None, now=None):
        """A reservation as a context manager: entering it acquires `cost` with reserve=True
        (waiting up to `wait`) and raises RateLimited when denied; inside, `settle(actual_cost)`
        settles it with what was really used; leaving it releases it (an unsettled one is then
        settled at its reserved cost), on an exception too.

            with client.reserve({"user": "alice"}, cost=1200) as r:
                reply = call_model(...)
                r.settle(reply.usage.input_tokens + reply.usage.output_tokens)
        """
        return Reservation(self, keys, dict(cost=cost, usage=usage, priority=priority,
                                            wait=wait, now=now))


class Reservation:
    """See Client.reserve. `decision` is the Decision of /acquire, `id` its reservation (None
    when ratelimitd was unreachable and the client failed open), `settlement` what `settle`
    got back."""

    def __init__(self, client, keys, options):
        self._client = client
        self._keys = keys
        self._options = options
        self.decision = None
        self.id = None
        self.settlement = None
        self._released = False

    def __enter__(self):
        d = self._client.acquire(self._keys, reserve=True, **self._options)
        if not d.allowed:
            raise RateLimited(d)
        self.decision = d
        self.id = d.reservation
        return self

    def settle(self, actual_cost=None, actual_usage=None):
        """POST /refund with what was really used; returns the Settlement. With fail_open, an
        unreachable daemon returns None (the reservation is settled at its reserved cost when
        it expires)."""
        if self.id is None:
            return None
        try:
            self.settlement = self._client.refund(self.id, actual_cost, actual_usage,
                                                  now=self._options["now"])
        except Unavailable:
            if not self._client.fail_open:
                raise
            return None
        return self.settlement

    def __exit__(self, exc_type, exc, tb):
        if self.id is None or self._released:
            return False
        self._released = True
        try:
            self._client.release(self.id, now=self._options["now"])
        except Unavailable:
            # The reservation expires after the daemon's reservation_ttl by itself.
            if exc_type is None and not self._client.fail_open:
                raise
        except Error:
            if exc_type is None:
                raise  # else the body's own exception matters more
        return False


def retry_after_header(decision):
    """The Retry-After value of a denial: the daemon's, else retry_after rounded up, else None
    (a cost that can never fit)."""
    if "Retry-After" in decision.headers:
        return decision.headers["Retry-After"]
    if decision.retry_after is None:
        return None
    return str(max(1, math.ceil(decision.retry_after)))
