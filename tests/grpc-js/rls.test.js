// ShouldRateLimit and Health over a real connection with @grpc/grpc-js, the messages loaded
// from the project's api/*.proto by @grpc/proto-loader. The daemon runs with --manual-clock and
// each call carries its time in the ratelimitd-now metadata; the numbers are worked out by hand:
//
//   user    fixed_window 3 per 60 s (windows from 0)       -> 3 per MINUTE
//   ip      token_bucket capacity 20, 10/s (full in 2 s)   -> 10 per SECOND
//   burst   fixed_window 60 per 3600 s                     -> 60 per HOUR
//
// Run by make test (make grpc-check) with RL_BUILD naming the build directory.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const ROOT = path.resolve(__dirname, '..', '..');
const BUILD = process.env.RL_BUILD || path.join(ROOT, 'build');
const CONFIG = {
  listen: { address: '127.0.0.1', port: 0 },
  domain: 'edge',
  levels: [
    { name: 'user', rules: [{ type: 'fixed_window', name: 'per-user', limit: 3, window: 60 }] },
    { name: 'ip', rules: [{ type: 'token_bucket', name: 'per-ip', capacity: 20, per_second: 10 }] },
    { name: 'burst', rules: [{ type: 'fixed_window', name: 'burst', limit: 60, window: 3600 }] },
  ],
};

let daemon, rls, health, generic, tmp;

before(async () => {
  const def = protoLoader.loadSync(
    ['envoy/service/ratelimit/v3/rls.proto', 'grpc/health/v1/health.proto'],
    { includeDirs: [path.join(ROOT, 'api')], keepCase: true, longs: Number, enums: String,
      defaults: true });
  const pkg = grpc.loadPackageDefinition(def);
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-grpc-js-'));
  const cfg = path.join(tmp, 'config.json');
  fs.writeFileSync(cfg, JSON.stringify(CONFIG));
  daemon = spawn(path.join(BUILD, 'ratelimitd'),
    ['--config', cfg, '--port', '0', '--grpc-port', '0', '--manual-clock'],
    { cwd: tmp, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: daemon.stdout });
  const it = lines[Symbol.asyncIterator]();
  const first = (await it.next()).value || '';
  const second = (await it.next()).value || '';
  assert.match(first, /^listening on /);
  assert.match(second, /^grpc listening on 127\.0\.0\.1:\d+$/);
  const addr = second.split(' ').pop();
  const creds = grpc.credentials.createInsecure();
  rls = new pkg.envoy.service.ratelimit.v3.RateLimitService(addr, creds);
  health = new pkg.grpc.health.v1.Health(addr, creds, { channelOverride: rls.getChannel() });
  generic = new grpc.Client(addr, creds, { channelOverride: rls.getChannel() });
});

after(async () => {
  rls.close();
  const code = await new Promise((resolve) => {
    daemon.on('exit', (c) => resolve(c));
    daemon.kill('SIGTERM');
  });
  fs.rmSync(tmp, { recursive: true, force: true });
  assert.strictEqual(code, 0);
});

function call(descriptors, now, hits = 0, domain = 'edge') {
  const md = new grpc.Metadata();
  md.set('ratelimitd-now', String(now));
  const req = {
    domain, hits_addend: hits,
    descriptors: descriptors.map(([entries, own]) => ({
      entries: Object.entries(entries).map(([key, value]) => ({ key, value })),
      hits_addend: own === undefined ? null : { value: own },
    })),
  };
  return new Promise((resolve, reject) =>
    rls.ShouldRateLimit(req, md, { deadline: Date.now() + 5000 },
      (err, resp) => (err ? reject(err) : resolve(resp))));
}

function status(st, code, name, rpu, unit, remaining, resetMs) {
  assert.strictEqual(st.code, code);
  assert.strictEqual(st.current_limit.name, name);
  assert.strictEqual(st.current_limit.requests_per_unit, rpu);
  assert.strictEqual(st.current_limit.unit, unit);
  assert.strictEqual(st.limit_remaining, remaining);
  const d = st.duration_until_reset;
  assert.strictEqual(d.seconds * 1000 + d.nanos / 1e6, resetMs);
}

test('Health answers SERVING', async () => {
  const r = await new Promise((resolve, reject) =>
    health.Check({ service: '' }, (e, v) => (e ? reject(e) : resolve(v))));
  assert.strictEqual(r.status, 'SERVING');
});

test('decisions worked out by hand', async () => {
  let r = await call([[{ user: 'alice' }]], 10);
  assert.strictEqual(r.overall_code, 'OK');
  status(r.statuses[0], 'OK', 'per-user', 3, 'MINUTE', 2, 50000);
  r = await call([[{ user: 'alice' }], [{ ip: '10.0.0.1' }]], 10, 2);
  status(r.statuses[0], 'OK', 'per-user', 3, 'MINUTE', 0, 50000);
  status(r.statuses[1], 'OK', 'per-ip', 10, 'SECOND', 18, 200);
  r = await call([[{ user: 'alice' }], [{ ip: '10.0.0.1' }]], 10);
  assert.strictEqual(r.overall_code, 'OVER_LIMIT');
  status(r.statuses[0], 'OVER_LIMIT', 'per-user', 3, 'MINUTE', 0, 50000);
  status(r.statuses[1], 'OK', 'per-ip', 10, 'SECOND', 18, 200);
});

test('a descriptor hits_addend of 0 checks without counting', async () => {
  for (let i = 0; i < 3; i++) {
    const r = await call([[{ user: 'bob' }, 0]], 20);
    status(r.statuses[0], 'OK', 'per-user', 3, 'MINUTE', 3, 0);
  }
  const r = await call([[{ user: 'bob' }, 1]], 20);
  status(r.statuses[0], 'OK', 'per-user', 3, 'MINUTE', 2, 40000);
});

test('INVALID_ARGUMENT names the field', async () => {
  await assert.rejects(call([], 10), (e) =>
    e.code === grpc.status.INVALID_ARGUMENT && e.details === 'descriptors: at least one required');
  await assert.rejects(call([[{ user: 'x' }]], 10, 0, ''), (e) =>
    e.code === grpc.status.INVALID_ARGUMENT && e.details === 'domain: required');
});

test('an unknown method is UNIMPLEMENTED', async () => {
  await assert.rejects(new Promise((resolve, reject) =>
    generic.makeUnaryRequest('/envoy.service.ratelimit.v3.RateLimitService/Nope',
      (b) => b, (b) => b, Buffer.alloc(0), (e, v) => (e ? reject(e) : resolve(v)))),
  (e) => e.code === grpc.status.UNIMPLEMENTED);
});

test('100 calls at once on one channel: exactly 60 fit', async () => {
  const all = await Promise.all(Array.from({ length: 100 }, () => call([[{ burst: 'b1' }]], 30)));
  const codes = all.map((r) => r.overall_code);
  assert.strictEqual(codes.filter((c) => c === 'OK').length, 60);
  assert.strictEqual(codes.filter((c) => c === 'OVER_LIMIT').length, 40);
});
