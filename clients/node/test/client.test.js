// The client against a real ratelimitd. Most cases run on a daemon with --manual-clock, each
// call carrying its time in `now`, so every number below is worked out by hand:
//
//   user     token_bucket "per-user", capacity 100, 10/s (full from empty in 10 s)
//   backend  concurrency "slots", 1 in flight, retry hint 2 s
//
// The waiting and the idle connections need time to pass: they run on a second daemon on the
// real clock (a bucket of 1 refilled at 5/s: one more every 0.2 s; idle connections closed
// after 1 s). Run by make clients-check with RL_BUILD naming the build directory.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, RateLimited, RateLimitdError, Unavailable } from '../index.js';
import { startDaemon } from './daemon.js';

const MANUAL = {
  listen: { address: '127.0.0.1', port: 0 },
  reservation_ttl: 60,
  levels: [
    { name: 'user', rules: [{ type: 'token_bucket', name: 'per-user', capacity: 100, per_second: 10 }] },
    { name: 'backend', rules: [{ type: 'concurrency', name: 'slots', limit: 1, retry: 2 }] },
  ],
};

const REAL = {
  listen: { address: '127.0.0.1', port: 0 },
  connection_timeout: 1,
  levels: [
    { name: 'user', rules: [{ type: 'token_bucket', name: 'per-user', capacity: 1, per_second: 5 }] },
  ],
};

const DENIED = 'ratelimit_acquire_total{decision="denied"}';

// A loopback port nothing listens on.
async function closedPort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

describe('on the manual clock', () => {
  let d, c;
  before(async () => {
    d = await startDaemon(MANUAL, ['--manual-clock']);
    c = new Client(d.url, { timeoutMs: 5000 });
  });
  after(async () => {
    c.close();
    assert.equal(await d.stop(), 0);
  });
  // What `user` has left at `now` (a dry run takes nothing).
  const balance = async (user, now) =>
    (await c.acquire({ user }, { dryRun: true, now })).limits[0].remaining;

  test('allowed, then denied, then allowed', async () => {
    let r = await c.acquire({ user: 'ann' }, { cost: 30, now: 0 });
    assert.equal(r.allowed, true);
    assert.equal(r.retry_after, 0);
    assert.equal(r.blocked_by, null);
    assert.equal(r.reservation, null);
    // 100 - 30 = 70 left, full again in 30 / 10 = 3 s
    assert.deepEqual(r.limits,
      [{ level: 'user', key: 'ann', rule: 'per-user', limit: 100, remaining: 70, reset_after: 3 }]);
    assert.equal(r.headers['ratelimit-policy'], '"user.per-user";q=100;w=10');
    assert.equal(r.headers.ratelimit, '"user.per-user";r=70;t=1');
    assert.equal(r.headers['retry-after'], undefined);
    assert.equal(r.unavailable, false);

    // 80 needs 10 more than the 70 left: 1 s at 10/s; nothing is taken
    r = await c.acquire({ user: 'ann' }, { cost: 80, now: 0 });
    assert.equal(r.allowed, false);
    assert.equal(r.retry_after, 1);
    assert.equal(r.blocked_by, 'user: per-user');
    assert.equal(r.limits[0].remaining, 70);
    assert.equal(r.headers['retry-after'], '1');

    r = await c.acquire({ user: 'ann' }, { cost: 80, now: 1 });
    assert.equal(r.allowed, true);
    assert.equal(r.limits[0].remaining, 0);
  });

  test('does not wait past the deadline', async () => {
    // 10 more need 1 s at 10/s: past a deadline of 0.5 s, so it answers at once, asked once
    const c1 = new Client(d.url, { timeoutMs: 5000, waitMs: 500 });
    assert.equal((await c1.acquire({ user: 'wes' }, { cost: 100, now: 0 })).allowed, true);
    const denied = await d.metric(DENIED);
    const t = Date.now();
    const r = await c1.acquire({ user: 'wes' }, { cost: 10, now: 0 });
    assert.ok(Date.now() - t < 500);
    assert.equal(r.allowed, false);
    assert.equal(r.retry_after, 1);
    assert.equal(await d.metric(DENIED), denied + 1);
    c1.close();
  });

  test('a cost that never fits answers at once, waiting or not', async () => {
    const t = Date.now();
    const r = await c.acquire({ user: 'abe' }, { cost: 101, now: 0, waitMs: 5000 });
    assert.equal(r.allowed, false);
    assert.equal(r.retry_after, null);
    assert.equal(r.headers['retry-after'], undefined);
    assert.ok(Date.now() - t < 1000);
  });

  test('reserve and settle below the reservation', async () => {
    let id;
    const s = await c.reserve({ user: 'bea' }, { cost: 50, now: 0 }, async (r) => {
      id = r.id;
      assert.match(r.id, /^r-[0-9a-f]{16}$/);
      assert.equal(r.decision.limits[0].remaining, 50);
      return r.settle(20);
    });
    assert.deepEqual(s, { reservation: id, reserved_cost: 50, actual_cost: 20, refunded: 30, charged: 0,
      usage: null, usd: null });
    assert.equal(await balance('bea', 0), 80); // 100 - 50 + 30
    assert.equal(await c.release(id), false); // released when fn returned
  });

  test('reserve and settle above the reservation', async () => {
    const s = await c.reserve({ user: 'cid' }, { cost: 50, now: 0 }, (r) => r.settle(70));
    assert.equal(s.refunded, 0);
    assert.equal(s.charged, 20);
    assert.equal(await balance('cid', 0), 30); // 100 - 50 - 20
  });

  test('reserve releases when fn throws', async () => {
    const active = await d.metric('ratelimit_reservations_active');
    let id;
    await assert.rejects(c.reserve({ user: 'dan' }, { cost: 50, now: 0 }, async (r) => {
      id = r.id;
      assert.equal(await d.metric('ratelimit_reservations_active'), active + 1);
      throw new Error('the model failed');
    }), /the model failed/);
    assert.equal(await d.metric('ratelimit_reservations_active'), active);
    assert.equal(await c.release(id), false);
    assert.equal(await balance('dan', 0), 50); // released unsettled: the reserved cost
  });

  test('reserve without options takes the default cost, 1', async () => {
    const s = await c.reserve({ user: 'ivy' }, (r) => r.settle(0));
    assert.equal(s.reserved_cost, 1);
    assert.equal(s.refunded, 1);
    await assert.rejects(c.reserve({ user: 'ivy' }, { cost: 1 }), TypeError);
  });

  test('reserve denied', async () => {
    await assert.rejects(
      c.reserve({ user: 'eve' }, { cost: 150, now: 0 }, () => assert.fail('ran a denied reservation')),
      (e) => e instanceof RateLimited && e.status === 429 && e.decision.retry_after === null &&
        e.decision.blocked_by === 'user: per-user');
    assert.equal(await balance('eve', 0), 100);
  });

  test('settled twice, unknown reservations', async () => {
    await c.reserve({ user: 'fay' }, { cost: 10, now: 0 }, async (r) => {
      await r.settle(5);
      await assert.rejects(r.settle(5), (e) => e instanceof RateLimitdError && e.status === 409 &&
        e.rawMessage === 'reservation: already settled');
    });
    await assert.rejects(c.refund('r-0000000000000000', 1),
      (e) => e.status === 404 && e.rawMessage === 'reservation: unknown or expired');
    await assert.rejects(c.refund('r-0000000000000000'), TypeError);
  });

  test('a concurrency slot is held until released', async () => {
    const r = await c.acquire({ backend: 'gpu' }, { now: 0 });
    assert.equal(r.allowed, true);
    assert.match(r.reservation, /^r-[0-9a-f]{16}$/);
    assert.equal(r.limits[0].remaining, 0);
    const held = await c.acquire({ backend: 'gpu' }, { now: 0 });
    assert.equal(held.allowed, false);
    assert.equal(held.retry_after, 2);
    assert.equal(held.blocked_by, 'backend: slots');
    assert.equal(await c.release(r.reservation), true);
    assert.equal(await c.release(r.reservation), false);
    const again = await c.acquire({ backend: 'gpu' }, { now: 0 });
    assert.equal(again.allowed, true);
    assert.equal(await c.release(again.reservation), true);
  });

  test('a release says how the call went', async () => {
    const r = await c.acquire({ backend: 'gpu' }, { now: 0 });
    await assert.rejects(c.release(r.reservation, { outcome: 'slow' }),
      (e) => e instanceof RateLimitdError && e.status === 400 &&
        e.rawMessage === 'outcome: must be "ok", "error", "timeout" or "dropped"');
    assert.equal(await c.release(r.reservation, { latencyMs: 120, outcome: 'ok' }), true);
  });

  test('refused requests reject with the field', async () => {
    await assert.rejects(c.acquire({ usr: 'x' }, { now: 0 }),
      (e) => e instanceof RateLimitdError && e.status === 400 && e.rawMessage.startsWith('keys.usr: '));
    await assert.rejects(c.acquire({ user: 'x' }, { cost: 0, now: 0 }),
      (e) => e.status === 400 && e.rawMessage.startsWith('cost: '));
    await assert.rejects(c.acquire('alice'), TypeError);
    await assert.rejects(c.acquire({ user: 'x' }, { cost: '1' }), TypeError);
    assert.throws(() => new Client('localhost:8080'), TypeError);
    assert.throws(() => new Client(d.url, { timeoutMs: 0 }), RangeError);
  });

  test('usage needs a daemon with named dimensions', async () => {
    // Sent as given; this daemon does not count named dimensions and names the field.
    await assert.rejects(c.acquire({ user: 'gil' }, { usage: { input_tokens: 5 }, now: 0 }),
      (e) => e.status === 400 && e.rawMessage.startsWith('usage'));
  });

  test('one connection is reused', async () => {
    const c1 = new Client(d.url, { timeoutMs: 5000 });
    const ports = new Set();
    c1._agent.on('free', (socket) => ports.add(socket.localPort));
    for (let i = 0; i < 6; i++) await c1.acquire({ user: 'hal' }, { dryRun: true, now: 0 });
    assert.equal(ports.size, 1);
    c1.close();
  });
});

describe('when ratelimitd cannot be reached', () => {
  test('fail open', async () => {
    const c = new Client(`http://127.0.0.1:${await closedPort()}`, { failOpen: true });
    const r = await c.acquire({ user: 'ann' }, { cost: 5 });
    assert.equal(r.allowed, true);
    assert.equal(r.unavailable, true);
    assert.match(r.error, /ECONNREFUSED/);
    const got = await c.reserve({ user: 'ann' }, { cost: 5 }, async (res) => {
      assert.equal(res.id, null);
      assert.equal(await res.settle(3), null);
      return 'ran';
    });
    assert.equal(got, 'ran');
    await assert.rejects(c.refund('r-0000000000000000', 1), Unavailable);
    await assert.rejects(c.release('r-0000000000000000'), Unavailable);
    c.close();
  });

  test('fail closed', async () => {
    const c = new Client(`http://127.0.0.1:${await closedPort()}`, { failOpen: false });
    const r = await c.acquire({ user: 'ann' }, { waitMs: 5000 });
    assert.equal(r.allowed, false);
    assert.equal(r.unavailable, true);
    assert.equal(r.retry_after, 1);
    assert.equal(r.blocked_by, 'ratelimitd: unavailable');
    await assert.rejects(c.reserve({ user: 'ann' }, { cost: 5 }, () => assert.fail('ran')), RateLimited);
    c.close();
  });

  test('timeout', async () => {
    // A server that accepts connections and never answers.
    const sockets = [];
    const s = net.createServer((sock) => sockets.push(sock));
    await new Promise((r) => s.listen(0, '127.0.0.1', r));
    const c = new Client(`http://127.0.0.1:${s.address().port}`, { timeoutMs: 300 });
    const t = Date.now();
    const r = await c.acquire({ user: 'ann' });
    const took = Date.now() - t;
    assert.equal(r.allowed, true);
    assert.equal(r.unavailable, true);
    assert.match(r.error, /timed out after 300 ms/);
    assert.ok(took >= 250 && took < 2000, `took ${took} ms`);
    c.close();
    sockets.forEach((x) => x.destroy());
    await new Promise((r2) => s.close(r2));
  });

  test('a 5xx counts as unavailable', async () => {
    // max_keys 1: a second key finds the store full, none idle, and gets 503.
    const d = await startDaemon({ listen: { address: '127.0.0.1', port: 0 }, max_keys: 1,
      levels: [{ name: 'user', rules: [{ type: 'token_bucket', name: 'u', capacity: 10, per_second: 0.001 }] }] });
    const c = new Client(d.url, { failOpen: false });
    try {
      assert.equal((await c.acquire({ user: 'a' })).allowed, true);
      const r = await c.acquire({ user: 'b' });
      assert.equal(r.allowed, false);
      assert.equal(r.unavailable, true);
      assert.match(r.error, /503/);
    } finally {
      c.close();
      assert.equal(await d.stop(), 0);
    }
  });
});

describe('on the real clock', () => {
  let d;
  before(async () => {
    d = await startDaemon(REAL);
  });
  after(async () => {
    assert.equal(await d.stop(), 0);
  });

  test('waits for retry_after', async () => {
    const c = new Client(d.url);
    assert.equal((await c.acquire({ user: 'w1' })).allowed, true);
    const denied = await d.metric(DENIED);
    const t = Date.now();
    const r = await c.acquire({ user: 'w1' }, { waitMs: 5000 });
    const took = Date.now() - t;
    assert.equal(r.allowed, true);
    assert.ok(took >= 150 && took < 3000, `took ${took} ms`); // one token in 0.2 s
    assert.equal(await d.metric(DENIED), denied + 1); // asked, slept, asked again
    c.close();
  });

  test('a connection closed while idle is replaced', async () => {
    const c = new Client(d.url);
    const ports = [];
    c._agent.on('free', (socket) => ports.push(socket.localPort));
    await c.acquire({ user: 'i1' }, { dryRun: true });
    await sleep(2000); // the daemon closes connections idle for 1 s, looking every 0.25 s
    assert.equal((await c.acquire({ user: 'i1' }, { dryRun: true })).allowed, true);
    assert.equal(ports.length, 2);
    assert.notEqual(ports[0], ports[1]);
    c.close();
  });
});

describe('HTTPS with a certificate made here (openssl), and the acquire token', () => {
  let d, dir, ca, url;
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-client-node-tls-'));
    const cert = path.join(dir, 'cert.pem');
    const key = path.join(dir, 'key.pem');
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt',
      'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=localhost',
      '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', key, '-out', cert], { stdio: 'ignore' });
    ca = fs.readFileSync(cert);
    d = await startDaemon({ listen: { address: '127.0.0.1', port: 0 }, tls: { cert, key },
      acquire_token: 't0k3n', levels: MANUAL.levels });
    url = `https://${d.addr}`;
  });
  after(async () => {
    assert.equal(await d.stop(), 0);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('https with the token', async () => {
    const c = new Client(url, { token: 't0k3n', ca });
    const r = await c.acquire({ user: 'tls' }, { cost: 30 });
    assert.equal(r.allowed, true);
    assert.equal(r.limits[0].remaining, 70);
    const s = await c.reserve({ user: 'tls' }, { cost: 10 }, (res) => res.settle(4));
    assert.equal(s.refunded, 6);
    c.close();
  });

  test('without the token is refused, not failed open', async () => {
    const c = new Client(url, { ca });
    await assert.rejects(c.acquire({ user: 'tls' }), (e) => e instanceof RateLimitdError && e.status === 401);
    c.close();
  });

  test('an untrusted certificate is unreachable', async () => {
    const c = new Client(url, { token: 't0k3n', failOpen: false });
    const r = await c.acquire({ user: 'tls' });
    assert.equal(r.allowed, false);
    assert.equal(r.unavailable, true);
    assert.match(r.error, /self[- ]signed certificate/);
    c.close();
  });
});
