// A client of ratelimitd's HTTP API for Node 20 and later, with no dependencies: POST /acquire,
// /refund and /release over persistent connections (an http.Agent with keep-alive), and a
// middleware for Express (or Connect, or a plain http server).
import http from 'node:http';
import https from 'node:https';
import { setTimeout as sleep } from 'node:timers/promises';
import { FIELDS, inner, top } from './contract.js';

export { FIELDS, PENDING } from './contract.js';

// The answer headers a decision keeps, for the middleware to pass on.
const RATE_HEADERS = ['ratelimit-policy', 'ratelimit', 'retry-after'];

// ratelimitd refused a request: `status` (400, 401, 404, 409, ...) and its `message`, which
// starts with the field at fault (`keys.usr: unknown descriptor ...`).
export class RateLimitdError extends Error {
  constructor(status, message) {
    super(status ? `${status}: ${message}` : message);
    this.name = 'RateLimitdError';
    this.status = status;
    this.rawMessage = message;
  }
}

// ratelimitd could not be reached, did not answer within the timeout, or answered 5xx.
export class Unavailable extends RateLimitdError {
  constructor(status, message) {
    super(status, message);
    this.name = 'Unavailable';
  }
}

// Thrown by Client.reserve when the request is denied; `decision` says why and how long to wait.
export class RateLimited extends RateLimitdError {
  constructor(decision) {
    super(429, `rate limited by ${decision.blocked_by}, retry after ${decision.retry_after} s`);
    this.name = 'RateLimited';
    this.decision = decision;
  }
}

function checkNumber(name, v) {
  if (v !== undefined && v !== null && (typeof v !== 'number' || !Number.isFinite(v)))
    throw new TypeError(`${name}: must be a number, not ${JSON.stringify(v)}`);
}

// The JSON body of `op` from the options given (undefined or null: not sent).
function body(op, options) {
  const out = {};
  for (const [field, option] of Object.entries(FIELDS[op].request)) {
    const v = options[option];
    if (v !== undefined && v !== null && v !== false) out[field] = v;
  }
  return out;
}

function pick(fields, obj) {
  const out = {};
  for (const f of fields) out[f] = obj[f] === undefined ? null : obj[f];
  return out;
}

// A client of one ratelimitd.
//
// url: where it serves ('http://127.0.0.1:8080', or https://; a path is kept as a prefix).
// options.timeoutMs: milliseconds to connect and answer (default 1000); past it the call
//   counts as unreachable.
// options.failOpen: what an unreachable ratelimitd means: true (default) allows (the decision
//   has `unavailable` set), false denies as ratelimitd's own closed mode does (`blocked_by`
//   'ratelimitd: unavailable', `retry_after` 1).
// options.token: sent as `Authorization: Bearer <token>` (the daemon's `acquire_token`).
// options.waitMs: how long acquire and reserve may wait by default for a denied request to fit.
// options.maxSockets: connections kept open at most (default 8).
// options.ca: for https://, the certificate authorities to trust (PEM), say the daemon's own;
//   default: Node's trusted authorities.
export class Client {
  constructor(url = 'http://127.0.0.1:8080', options = {}) {
    const { timeoutMs = 1000, failOpen = true, token, waitMs = 0, maxSockets = 8, ca } = options;
    let u;
    try {
      u = new URL(url);
    } catch {
      u = null;
    }
    if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:'))
      throw new TypeError(`url: must be http://host[:port] or https://host[:port], not ${url}`);
    checkNumber('timeoutMs', timeoutMs);
    if (!(timeoutMs > 0)) throw new RangeError(`timeoutMs: must be positive, not ${timeoutMs}`);
    checkNumber('waitMs', waitMs);
    if (!(waitMs >= 0)) throw new RangeError(`waitMs: must be 0 or more, not ${waitMs}`);
    this.url = url;
    this.timeoutMs = timeoutMs;
    this.failOpen = Boolean(failOpen);
    this.waitMs = waitMs;
    this._mod = u.protocol === 'https:' ? https : http;
    this._agent = new this._mod.Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets,
      ...(ca !== undefined ? { ca } : {}) });
    this._host = u.hostname.replace(/^\[(.*)\]$/, '$1');
    this._port = u.port || (u.protocol === 'https:' ? 443 : 80);
    this._prefix = u.pathname.replace(/\/+$/, '');
    this._headers = { 'content-type': 'application/json', accept: 'application/json' };
    if (token !== undefined) this._headers.authorization = `Bearer ${token}`;
  }

  // Closes the connections (a later call opens new ones).
  close() {
    this._agent.destroy();
  }

  // POSTs `obj` as JSON: {status, headers, body}. Throws Unavailable when the daemon cannot
  // be reached, is slower than timeoutMs or answers 5xx.
  async _post(path, obj) {
    const data = Buffer.from(JSON.stringify(obj));
    for (let attempt = 0; ; attempt++) {
      try {
        return await this._once(path, data);
      } catch (e) {
        // A kept connection the daemon closed just as it was taken: once more, anew.
        if (e.reusedSocket && attempt === 0) continue;
        if (e instanceof RateLimitdError) throw e;
        throw new Unavailable(null, `${this.url}: ${e.message || e.code}`);
      }
    }
  }

  _once(path, data) {
    return new Promise((resolve, reject) => {
      const req = this._mod.request({
        host: this._host, port: this._port, method: 'POST', path: this._prefix + path,
        agent: this._agent, headers: { ...this._headers, 'content-length': data.length },
      });
      const timer = setTimeout(
        () => req.destroy(new Error(`timed out after ${this.timeoutMs} ms`)), this.timeoutMs);
      req.on('error', (e) => {
        clearTimeout(timer);
        e.reusedSocket = req.reusedSocket && e.code === 'ECONNRESET';
        reject(e);
      });
      req.on('response', (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('error', (e) => {
          clearTimeout(timer);
          reject(e);
        });
        res.on('end', () => {
          clearTimeout(timer);
          const raw = Buffer.concat(chunks).toString('utf8');
          let parsed;
          try {
            parsed = raw ? JSON.parse(raw) : {};
          } catch {
            parsed = { error: raw.slice(0, 200) };
          }
          if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
            parsed = { error: `not a JSON object: ${raw.slice(0, 200)}` };
          if (res.statusCode >= 500) {
            reject(new Unavailable(res.statusCode,
              `${this.url}${path} answered ${res.statusCode}: ${parsed.error || ''}`));
            return;
          }
          resolve({ status: res.statusCode, headers: res.headers, body: parsed });
        });
      });
      req.end(data);
    });
  }

  // Asks whether a request may pass: POST /acquire. Resolves to a decision with the fields of
  // the answer as the API names them (allowed, retry_after, blocked_by, reservation, limits),
  // `headers` (the answer's ratelimit, ratelimit-policy and retry-after) and `unavailable`
  // (with `error`) when ratelimitd could not be reached and failOpen decided.
  //
  // keys: descriptor name to key ({user: 'alice', team: 'acme'}).
  // options: cost, priority, reserve, dryRun, now (--manual-clock seconds), usage (named
  //   dimensions, sent only when given: the daemon must count them, else it answers 400 naming
  //   `usage`), waitMs (how long to wait at most while denied: it sleeps retry_after and asks
  //   again while that fits before the deadline; a cost that can never fit returns at once).
  // Rejects with RateLimitdError for a request the daemon refuses (400, 401).
  async acquire(keys, options = {}) {
    if (keys === null || typeof keys !== 'object' || Array.isArray(keys))
      throw new TypeError(`keys: must be an object of descriptor name to key, not ${keys}`);
    checkNumber('cost', options.cost);
    checkNumber('waitMs', options.waitMs);
    const req = body('acquire', { ...options, keys });
    const deadline = Date.now() + (options.waitMs ?? this.waitMs);
    for (;;) {
      const d = await this._acquireOnce(req);
      if (d.allowed || d.unavailable || d.retry_after === null) return d;
      const pause = Math.max(d.retry_after * 1000, 1);
      if (Date.now() + pause > deadline) return d;
      await sleep(pause);
    }
  }

  async _acquireOnce(req) {
    let r;
    try {
      r = await this._post(FIELDS.acquire.path, req);
    } catch (e) {
      if (e instanceof Unavailable) return this._unreachable(e);
      throw e;
    }
    if (r.status !== 200 && r.status !== 429)
      throw new RateLimitdError(r.status, r.body.error || `status ${r.status}`);
    const fields = FIELDS.acquire.response;
    const d = pick(top(fields), r.body);
    d.limits = (r.body.limits || []).map((l) => Object.freeze(pick(inner(fields, 'limits'), l)));
    d.headers = {};
    for (const h of RATE_HEADERS) if (r.headers[h] !== undefined) d.headers[h] = r.headers[h];
    d.unavailable = false;
    d.error = null;
    return Object.freeze(d);
  }

  _unreachable(e) {
    const open = this.failOpen;
    return Object.freeze({
      allowed: open, retry_after: open ? 0 : 1,
      blocked_by: open ? null : 'ratelimitd: unavailable', reservation: null, limits: [],
      headers: open ? {} : { 'retry-after': '1' }, unavailable: true, error: e.message,
    });
  }

  // Settles a reservation with what was really used: POST /refund. Resolves to the
  // settlement (reservation, reserved_cost, actual_cost, refunded, charged). options:
  // actualUsage (named dimensions, sent only when given), now, latencyMs and outcome (as for
  // release). Rejects with RateLimitdError
  // (404 unknown or expired, 409 already settled) or Unavailable.
  async refund(reservation, actualCost, options = {}) {
    if (actualCost === undefined && options.actualUsage === undefined)
      throw new TypeError('actualCost: required (or options.actualUsage)');
    checkNumber('actualCost', actualCost);
    const r = await this._post(FIELDS.refund.path,
      body('refund', { ...options, reservation, actualCost }));
    if (r.status !== 200) throw new RateLimitdError(r.status, r.body.error || `status ${r.status}`);
    return Object.freeze(pick(FIELDS.refund.response, r.body));
  }

  // Ends a reservation and gives back its concurrency slots: POST /release (an unsettled one
  // is settled at its reserved cost). Resolves to true, or false when the daemon does not know
  // it (expired, or released already); rejects with Unavailable when it cannot be reached.
  // options: now, and how the call went, which an adaptive_concurrency rule learns its limit
  // from: latencyMs and outcome ('ok', 'error', 'timeout' or 'dropped'), sent only when given.
  async release(reservation, options = {}) {
    const r = await this._post(FIELDS.release.path, body('release', { ...options, reservation }));
    if (r.status === 404) return false;
    if (r.status !== 200) throw new RateLimitdError(r.status, r.body.error || `status ${r.status}`);
    return r.body.released === true;
  }

  // Runs fn(reservation) inside a reservation (options may be left out): acquires with reserve
  // (waiting up to options.waitMs) and rejects with RateLimited when denied; fn may call
  // `await reservation.settle(actualCost)` with what was really used; when fn returns or
  // throws, the reservation is released (an unsettled one is then settled at its reserved
  // cost). Resolves to what fn resolves to.
  async reserve(keys, options, fn) {
    if (typeof options === 'function') [options, fn] = [{}, options];
    if (typeof fn !== 'function') throw new TypeError('fn: required, the work to run inside the reservation');
    const d = await this.acquire(keys, { ...options, reserve: true });
    if (!d.allowed) throw new RateLimited(d);
    const r = new Reservation(this, d, options.now);
    let failed = false;
    try {
      return await fn(r);
    } catch (e) {
      failed = true;
      throw e;
    } finally {
      await r._end(failed);
    }
  }
}

// See Client.reserve: `decision` is the decision of /acquire, `id` its reservation (null when
// ratelimitd was unreachable and the client failed open), `settlement` what settle got back.
export class Reservation {
  constructor(client, decision, now) {
    this._client = client;
    this._now = now;
    this.decision = decision;
    this.id = decision.reservation;
    this.settlement = null;
  }

  // POST /refund with what was really used; resolves to the settlement. With failOpen, an
  // unreachable daemon resolves to null (the reservation is settled at its reserved cost when
  // it expires).
  async settle(actualCost, options = {}) {
    if (this.id === null) return null;
    try {
      this.settlement = await this._client.refund(this.id, actualCost,
        { ...options, now: this._now });
    } catch (e) {
      if (e instanceof Unavailable && this._client.failOpen) return null;
      throw e;
    }
    return this.settlement;
  }

  async _end(failed) {
    if (this.id === null) return;
    try {
      await this._client.release(this.id, { now: this._now });
    } catch (e) {
      if (failed) return; // fn's own error matters more
      // An unreachable daemon lets the reservation expire after its reservation_ttl.
      if (e instanceof Unavailable && this._client.failOpen) return;
      throw e;
    }
  }
}

// The Retry-After of a denial: the daemon's, else retry_after rounded up, else undefined (a
// cost that can never fit).
export function retryAfterHeader(d) {
  if (d.headers['retry-after'] !== undefined) return d.headers['retry-after'];
  if (d.retry_after === null) return undefined;
  return String(Math.max(1, Math.ceil(d.retry_after)));
}

const PASSED_ON = [['ratelimit-policy', 'RateLimit-Policy'], ['ratelimit', 'RateLimit']];

function send(res, status, headers, obj) {
  const b = JSON.stringify(obj);
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json');
  for (const [name, v] of headers) res.setHeader(name, v);
  res.setHeader('Content-Length', Buffer.byteLength(b));
  res.end(b);
}

const valueOf = (option, req) => (typeof option === 'function' ? option(req) : option);

// A middleware for Express (or Connect, or a plain http server's (req, res, next)): each request
// is decided by ratelimitd before the next handler; a denied one is answered 429 with
// Retry-After, RateLimit, RateLimit-Policy and {"error": "rate limited", "blocked_by", ...}; an
// allowed one gets the RateLimit headers (unless options.headers is false); a reservation the
// decision holds (a concurrency rule's slot) is released when the answer is finished or the
// connection closes.
//
// options.keys: an object of descriptor name to request header ({user: 'x-user'}; a missing
//   or empty header leaves its descriptor out, so its level is skipped), or a function of the
//   request returning the descriptors, or null to let the request through undecided.
// options.cost, options.priority: a number, or a function of the request returning one.
// A key that ratelimitd refuses (an empty, too long or control-character key from a header) is
// the request's fault: it is answered 400 with ratelimitd's message, which names the descriptor.
export function expressMiddleware(client, options = {}) {
  const { keys, cost, priority, headers = true } = options;
  if (keys === undefined) throw new TypeError('keys: required (descriptor -> header, or a function)');
  return async function ratelimitd(req, res, next) {
    let d;
    try {
      let k;
      if (typeof keys === 'function') {
        k = keys(req);
      } else {
        k = {};
        for (const [descriptor, name] of Object.entries(keys)) {
          const v = req.headers[name.toLowerCase()];
          if (v) k[descriptor] = Array.isArray(v) ? v[0] : v;
        }
      }
      if (k === null || k === undefined) return next();
      d = await client.acquire(k, { cost: valueOf(cost, req), priority: valueOf(priority, req) });
    } catch (e) {
      if (e instanceof RateLimitdError && e.status === 400) {
        send(res, 400, [], { error: e.rawMessage });
        return undefined;
      }
      return next(e);
    }
    if (!d.allowed) {
      const headers = [];
      const ra = retryAfterHeader(d);
      if (ra !== undefined) headers.push(['Retry-After', ra]);
      for (const [h, name] of PASSED_ON) if (d.headers[h] !== undefined) headers.push([name, d.headers[h]]);
      send(res, 429, headers, { error: 'rate limited', blocked_by: d.blocked_by, retry_after: d.retry_after });
      return undefined;
    }
    if (headers)
      for (const [h, name] of PASSED_ON) if (d.headers[h] !== undefined) res.setHeader(name, d.headers[h]);
    if (d.reservation) {
      let done = false;
      const release = () => {
        if (done) return;
        done = true;
        // the slot comes back by itself after the daemon's reservation_ttl if this fails
        client.release(d.reservation).catch(() => {});
      };
      res.on('finish', release);
      res.on('close', release);
    }
    return next();
  };
}
