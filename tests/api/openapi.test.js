// api/openapi.yaml against the real daemon: every documented operation is called, and each
// answer (status, headers, body) is validated against the document with ajv. An answer whose
// status the operation does not document, a body or header that does not match its schema, a
// RateLimit/Retry-After/Allow/WWW-Authenticate header the answer does not document, and a
// documented status that no request here produced (except the few listed in UNREACHABLE, which
// need a failing disk or Redis) all fail.
//
//   RL_BUILD=build node --test tests/api/      (make test runs it)
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const net = require('node:net');
const YAML = require('yaml');
const Ajv = require('ajv');
const addFormats = require('ajv-formats');
const { fromSchema } = require('@openapi-contrib/openapi-schema-to-json-schema');

const ROOT = path.resolve(__dirname, '../..');
const BUILD = path.resolve(ROOT, process.env.RL_BUILD || 'build');
const doc = YAML.parse(fs.readFileSync(path.join(ROOT, 'api/openapi.yaml'), 'utf8'));

// Statuses documented but not produced here: they need a disk that refuses a write, or a
// request landing in the moments of a stop.
const UNREACHABLE = new Set([
  'put /quota/{user} 500', 'delete /quota/{user} 500', 'get /healthz 503',
]);
const METHODS = ['get', 'put', 'post', 'delete'];

// ---- the document as JSON Schema ------------------------------------------------------------

// OpenAPI 3.0 schemas (nullable, ...) become JSON Schema in place, wherever a schema sits.
function convert(node, key) {
  if (Array.isArray(node)) return node.map((v) => convert(v));
  if (!node || typeof node !== 'object') return node;
  if (key === 'schema' || key === 'component-schema') {
    const s = fromSchema(node, { cloneSchema: true });
    delete s.$schema;
    return s;
  }
  const out = {};
  for (const [k, v] of Object.entries(node)) {
    if (key === 'schemas') out[k] = convert(v, 'component-schema');
    else if (k === 'example' || k === 'examples') out[k] = v;
    else out[k] = convert(v, k);
  }
  return out;
}
const jdoc = convert(doc);
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addSchema(jdoc, 'openapi');

const pointer = (...parts) =>
  '#/' + parts.map((p) => String(p).replace(/~/g, '~0').replace(/\//g, '~1')).join('/');
const deref = (obj) => {
  let ptr = null;
  while (obj && obj.$ref) {
    ptr = obj.$ref;
    obj = obj.$ref.slice(2).split('/').reduce((o, k) => o[k.replace(/~1/g, '/').replace(/~0/g, '~')],
      jdoc);
  }
  return { obj, ptr };
};
const compiled = new Map();
function validator(ptr) {
  if (!compiled.has(ptr)) compiled.set(ptr, ajv.compile({ $ref: 'openapi' + ptr }));
  return compiled.get(ptr);
}
function check(what, ptr, value) {
  const v = validator(ptr);
  assert.ok(v(value), `${what}: ${JSON.stringify(value)} does not match ${ptr}: ` +
    ajv.errorsText(v.errors));
}

// Every header name any answer documents: one of these on an answer must be documented there.
const OURS = new Set();
(function walk(n) {
  if (!n || typeof n !== 'object') return;
  if (n.headers && typeof n.headers === 'object' && !n.in)
    Object.keys(n.headers).forEach((h) => OURS.add(h.toLowerCase()));
  Object.values(n).forEach(walk);
})(doc.paths);
Object.keys(doc.components.responses).forEach((r) =>
  Object.keys(doc.components.responses[r].headers || {}).forEach((h) => OURS.add(h.toLowerCase())));

// ---- the daemon -----------------------------------------------------------------------------

const TOKEN = 's3cret-token';
const CONFIG = {
  admin_token: TOKEN,
  quota_file: 'var/quotas.json',
  levels: [
    { name: 'user', tiered: true },
    { name: 'team', rules: [{ type: 'token_bucket', name: 'team', capacity: 5, per_second: 1 }] },
    { name: 'slots', rules: [{ type: 'concurrency', name: 'slots', limit: 2 }] },
    { name: 'global', default_key: '*',
      rules: [{ type: 'fixed_window', name: 'global', limit: 1000, window: 10 }] },
    { name: 'budget', rules: [{ type: 'calendar', name: 'monthly', limit: 50, period: 'month',
      time_zone: 'Europe/Berlin', alerts: [0.8, 0.95] }] },
  ],
  tiers: {
    free: [{ type: 'token_bucket', name: 'free', capacity: 3, per_second: 1 }],
    pro: [{ type: 'token_bucket', name: 'pro', capacity: 30, per_second: 10 }],
  },
  default_tier: 'free',
};
let base; // the daemon the requests go to
const covered = new Set();
const started = []; // [process, directory] to stop and remove

// Starts a process and waits for a line of its stdout that matches re; returns the match.
function startProcess(cmd, args, cwd, re) {
  const proc = spawn(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'inherit'] });
  started.push(proc);
  return new Promise((resolve, reject) => {
    let out = '';
    proc.on('error', reject);
    proc.on('exit', (c) => reject(new Error(`${cmd} exited with ${c}`)));
    proc.stdout.on('data', (d) => {
      out += d;
      const m = re.exec(out);
      if (m) resolve({ proc, m });
    });
  });
}

async function startDaemon(config) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-openapi-'));
  started.push(dir);
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config));
  const { proc, m } = await startProcess(path.join(BUILD, 'ratelimitd'),
    ['--config', 'config.json', '--port', '0', '--manual-clock'], dir,
    /^listening on [^\n]*:(\d+)\n/);
  return { proc, dir, base: `http://127.0.0.1:${m[1]}` };
}

async function stop(proc, signal = 'SIGTERM') {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const done = new Promise((r) => proc.on('exit', r));
  proc.kill(signal);
  await done;
}

const freePort = () => new Promise((resolve) => {
  const srv = net.createServer().listen(0, '127.0.0.1', () => {
    const { port } = srv.address();
    srv.close(() => resolve(port));
  });
});

after(async () => {
  for (const x of started.reverse()) {
    if (typeof x === 'string') fs.rmSync(x, { recursive: true, force: true });
    else await stop(x);
  }
});

// ---- requests, validated ----------------------------------------------------------------------

// The documented operation a request goes to: its path template and method.
function operationOf(urlPath, method) {
  const p = urlPath.split('?')[0];
  for (const tmpl of Object.keys(doc.paths)) {
    const re = new RegExp('^' + tmpl.replace(/\{[^}]+\}/g, '[^/]+') + '$');
    if (re.test(p)) return { tmpl, method };
  }
  return null;
}

async function call(method, urlPath, { body, headers = {}, status } = {}) {
  const init = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  const res = await fetch(base + urlPath, init);
  const text = await res.text();
  const op = operationOf(urlPath, method.toLowerCase());
  assert.ok(op, `${method} ${urlPath}: no documented path`);
  const item = doc.paths[op.tmpl];
  const m = op.method;
  // a method the path lacks answers 405, documented on each of the path's operations
  const ops = item[m] ? [m] : METHODS.filter((x) => item[x]);
  for (const o of ops) {
    const what = `${method} ${urlPath} -> ${res.status}`;
    const responses = item[o].responses;
    assert.ok(responses[String(res.status)], `${what}: status not documented for ${o} ${op.tmpl}`);
    const { obj: resp } = deref(jdoc.paths[op.tmpl][o].responses[String(res.status)]);
    const rptr = deref(jdoc.paths[op.tmpl][o].responses[String(res.status)]).ptr ||
      pointer('paths', op.tmpl, o, 'responses', res.status);
    validateHeaders(what, resp, rptr, res.headers);
    validateBody(what, resp, rptr, res.headers.get('content-type'), text);
    covered.add(`${o} ${op.tmpl} ${res.status}`);
  }
  if (status !== undefined) assert.equal(res.status, status, `${method} ${urlPath}: ${text}`);
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

const unescape = (k) => k.replace(/~1/g, '/').replace(/~0/g, '~');
const parts = (ptr) => ptr.slice(2).split('/').map(unescape);

function validateHeaders(what, resp, rptr, headers) {
  const documented = Object.keys(resp.headers || {}).map((h) => h.toLowerCase());
  for (const [name] of headers) {
    if (OURS.has(name) && !documented.includes(name))
      assert.fail(`${what}: header ${name} is not documented for this answer`);
  }
  for (const h of Object.keys(resp.headers || {})) {
    const value = headers.get(h);
    if (value === null) continue;
    const { obj: hdr, ptr } = deref(resp.headers[h]);
    const hptr = ptr || pointer(...parts(rptr), 'headers', h);
    const type = hdr.schema && [].concat(hdr.schema.type)[0];
    // a header is text: a number's schema is checked against the number it spells
    const v = (type === 'integer' || type === 'number') && /^-?\d+(\.\d+)?$/.test(value)
      ? Number(value) : value;
    check(`${what}: header ${h}`, hptr + '/schema', v);
  }
}

function validateBody(what, resp, rptr, ctype, text) {
  if (!resp.content) {
    assert.equal(text, '', `${what}: documented without a body, got ${text}`);
    return;
  }
  const types = Object.keys(resp.content);
  assert.ok(types.includes(ctype), `${what}: Content-Type ${ctype} is not one of ${types}`);
  const sptr = pointer(...parts(rptr), 'content', ctype, 'schema');
  check(`${what}: body`, sptr, ctype === 'application/json' ? JSON.parse(text) : text);
}

const auth = { Authorization: `Bearer ${TOKEN}` };
const big = JSON.stringify({ keys: { user: 'x'.repeat(70000) } });

test('every documented operation, each answer valid against the document', async () => {
  const mem = await startDaemon(CONFIG);
  base = mem.base;
  // POST /acquire: allowed, reserved, denied, never fits, bad, wrong method, too large
  let r = await call('POST', '/acquire', { body: { keys: { user: 'alice', team: 'acme' }, now: 1 }, status: 200 });
  assert.equal(r.json.allowed, true);
  r = await call('POST', '/acquire', { body: { keys: { user: 'alice' }, cost: 2, reserve: true }, status: 200 });
  const reservation = r.json.reservation;
  assert.match(reservation, /^r-[0-9a-f]{16}$/);
  r = await call('POST', '/acquire', { body: { keys: { user: 'alice' } }, status: 429 });
  assert.equal(r.headers.get('retry-after'), '1');
  r = await call('POST', '/acquire', { body: { keys: { user: 'bob' }, cost: 4 }, status: 429 });
  assert.equal(r.json.retry_after, null);
  await call('POST', '/acquire', { body: { keys: { usr: 'x' } }, status: 400 });
  await call('GET', '/acquire', { status: 405 });
  await call('POST', '/acquire', { body: big, status: 413 });

  // GET /check
  await call('GET', '/check', { headers: { 'X-RateLimit-User': 'carol' }, status: 200 });
  await call('GET', '/check', { headers: { 'X-RateLimit-User': 'carol', 'X-RateLimit-Cost': '3' }, status: 429 });
  r = await call('GET', '/check?deny_status=403', { headers: { 'X-RateLimit-User': 'alice' } });
  assert.equal(r.status, 403);
  await call('GET', '/check', { headers: { 'X-RateLimit-Usr': 'x' }, status: 400 });
  await call('POST', '/check', { body: {}, status: 405 });

  // POST /refund: settled, again (409), unknown (404), bad, wrong method, too large
  await call('POST', '/refund', { body: { reservation, actual_cost: 1 }, status: 200 });
  await call('POST', '/refund', { body: { reservation, actual_cost: 1 }, status: 409 });
  await call('POST', '/refund', { body: { reservation: 'r-0000000000000000', actual_cost: 1 }, status: 404 });
  await call('POST', '/refund', { body: { reservation }, status: 400 });
  await call('GET', '/refund', { status: 405 });
  await call('POST', '/refund', { body: big, status: 413 });

  // POST /release: a concurrency slot held by a reservation
  r = await call('POST', '/acquire', { body: { keys: { slots: 'pool' } }, status: 200 });
  await call('POST', '/release', { body: { reservation: r.json.reservation }, status: 200 });
  await call('POST', '/release', { body: { reservation: r.json.reservation }, status: 404 });
  await call('POST', '/release', { body: { reservation: 5 }, status: 400 });
  await call('PUT', '/release', { body: {}, status: 405 });
  await call('POST', '/release', { body: big, status: 413 });

  // GET /rules
  r = await call('GET', '/rules', { status: 200 });
  assert.equal(r.json.default_tier, 'free');
  await call('DELETE', '/rules', { status: 405 });

  // /quota/{user}: with and without the admin token
  await call('GET', '/quota/alice', { status: 401 });
  await call('PUT', '/quota/alice', { body: { tier: 'pro' }, status: 401 });
  await call('DELETE', '/quota/alice', { status: 401 });
  r = await call('GET', '/quota/alice', { headers: auth, status: 200 });
  assert.equal(r.json.tier, 'free');
  r = await call('PUT', '/quota/alice', { headers: auth, body: { tier: 'pro' }, status: 200 });
  assert.equal(r.json.tier, 'pro');
  r = await call('PUT', '/quota/dave', { headers: auth, status: 200,
    body: { rules: [{ type: 'token_bucket', name: 'dave', capacity: 50, per_second: 5 }] } });
  assert.equal(r.json.tier, null);
  await call('PUT', '/quota/alice', { headers: auth, body: { tier: 'platinum' }, status: 400 });
  await call('PUT', '/quota/alice', { headers: auth, body: big, status: 413 });
  await call('GET', '/quota/%01', { headers: auth, status: 400 });
  await call('DELETE', '/quota/%01', { headers: auth, status: 400 });
  r = await call('DELETE', '/quota/alice', { headers: auth, status: 200 });
  assert.equal(r.json.tier, 'free');
  await call('POST', '/quota/alice', { headers: auth, body: {}, status: 405 });

  // /usage/{level}/{key}: alice has used 1 of her 20 (her /acquire above, refilled at 10/s
  // since: whatever it says, used + remaining is the limit)
  await call('GET', '/usage/user/alice', { status: 401 });
  await call('DELETE', '/usage/user/alice', { status: 401 });
  r = await call('GET', '/usage/user/alice', { headers: auth, status: 200 });
  assert.equal(r.json.rules[0].used + r.json.rules[0].remaining, r.json.rules[0].limit);
  r = await call('DELETE', '/usage/user/alice', { headers: auth, status: 200 });
  assert.equal(r.json.level, 'user');
  await call('GET', '/usage/nope/x', { headers: auth, status: 404 });
  await call('DELETE', '/usage/nope/x', { headers: auth, status: 404 });
  await call('GET', '/usage/user/%01', { headers: auth, status: 400 });
  await call('DELETE', '/usage/user/%01', { headers: auth, status: 400 });
  await call('POST', '/usage/user/alice', { headers: auth, body: {}, status: 405 });
  // a calendar rule shows its period: the daemon's last time seen is within the first second
  // of 1970, so the month of Berlin (UTC+1 then) from 1 January 1970 00:00 local, which is
  // before time 0, counted from 0, to 1 February 00:00 local (31 January 23:00 UTC)
  r = await call('GET', '/usage/budget/acme', { headers: auth, status: 200 });
  assert.equal(r.json.rules[0].period_start, '1970-01-01T00:00:00Z');
  assert.equal(r.json.rules[0].period_end, '1970-01-31T23:00:00Z');

  // GET /metrics, GET /healthz
  r = await call('GET', '/metrics', { status: 200 });
  assert.match(r.text, /^# HELP /);
  await call('POST', '/metrics', { body: {}, status: 405 });
  r = await call('GET', '/healthz', { status: 200 });
  assert.deepEqual(r.json, { status: 'ok' });
  await call('PUT', '/healthz', { body: {}, status: 405 });

  // POST /admin/reload: the same file again (state kept), then one that does not load
  await call('POST', '/admin/reload', { status: 401 });
  r = await call('POST', '/admin/reload', { headers: auth, status: 200 });
  assert.deepEqual(r.json, { reloaded: true });
  const cfgPath = path.join(mem.dir, 'config.json');
  const good = fs.readFileSync(cfgPath, 'utf8');
  fs.writeFileSync(cfgPath, '{"levels": []}');
  r = await call('POST', '/admin/reload', { headers: auth, status: 400 });
  assert.match(r.json.error, /^levels: /);
  fs.writeFileSync(cfgPath, good);
  await call('GET', '/admin/reload', { status: 405 });

});

test('the Redis store: its health, metrics and 503s while Redis is down', async () => {
  const port = await freePort();
  const rdir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-openapi-redis-'));
  started.push(rdir);
  const { proc: redis } = await startProcess('redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], rdir,
    /Ready to accept connections/);
  let d;
  ({ proc: d, base } = await startDaemon({
    ...CONFIG, quota_file: undefined,
    store: { type: 'redis', url: `redis://127.0.0.1:${port}/0`, timeout_ms: 200 },
  }));
  let r = await call('GET', '/healthz', { status: 200 });
  assert.equal(r.json.store, 'redis');
  assert.equal(r.json.store_up, true);
  r = await call('GET', '/metrics', { status: 200 });
  assert.match(r.text, /^ratelimit_store_up 1$/m);
  r = await call('POST', '/acquire', { body: { keys: { user: 'erin' }, reserve: true, now: 1 }, status: 200 });
  const reservation = r.json.reservation;
  await call('PUT', '/quota/erin', { headers: auth, body: { tier: 'pro' }, status: 200 });

  await stop(redis, 'SIGKILL');
  await call('POST', '/refund', { body: { reservation, actual_cost: 1 }, status: 503 });
  await call('POST', '/release', { body: { reservation }, status: 503 });
  await call('PUT', '/quota/erin', { headers: auth, body: { tier: 'free' }, status: 503 });
  await call('DELETE', '/quota/erin', { headers: auth, status: 503 });
  r = await call('GET', '/healthz', { status: 200 });
  assert.equal(r.json.status, 'degraded');
  assert.equal(r.json.store_up, false);
  // the user level is open while Redis is down (on_store_error's default)
  r = await call('POST', '/acquire', { body: { keys: { user: 'erin' } }, status: 200 });
  await stop(d);
});

test('off loopback without admin_token: the admin endpoints answer 403', async () => {
  let d;
  ({ proc: d, base } = await startDaemon({
    ...CONFIG, admin_token: undefined, listen: { address: '0.0.0.0' },
  }));
  for (const [method, p, body] of [['GET', '/quota/alice'], ['PUT', '/quota/alice', { tier: 'pro' }],
    ['DELETE', '/quota/alice'], ['POST', '/admin/reload'], ['GET', '/usage/user/alice'],
    ['DELETE', '/usage/user/alice']]) {
    const r = await call(method, p, { body, headers: auth, status: 403 });
    assert.match(r.json.error, /^admin_token: the admin endpoints are closed: ratelimitd listens on 0\.0\.0\.0/);
  }
  await stop(d);
});

test('every documented answer was produced and validated', () => {
  const missing = [];
  for (const [p, item] of Object.entries(doc.paths))
    for (const m of METHODS.filter((x) => item[x]))
      for (const st of Object.keys(item[m].responses)) {
        const k = `${m} ${p} ${st}`;
        if (!covered.has(k) && !UNREACHABLE.has(k)) missing.push(k);
      }
  assert.deepEqual(missing, [], 'documented answers no request produced');
});
