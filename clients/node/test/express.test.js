// The Express middleware with a real express (pinned by package-lock.json) serving on a free
// loopback port, against a real ratelimitd on the real clock:
//
//   user     token_bucket "per-user", capacity 2, 0.001/s: two requests, then one every 1000 s
//   backend  concurrency "slots", 1 in flight, retry hint 3 s
//
// Run by make clients-check with RL_BUILD naming the build directory.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import express from 'express';
import { Client, expressMiddleware } from '../index.js';
import { startDaemon } from './daemon.js';

const CONFIG = {
  listen: { address: '127.0.0.1', port: 0 },
  levels: [
    { name: 'user', rules: [{ type: 'token_bucket', name: 'per-user', capacity: 2, per_second: 0.001 }] },
    { name: 'backend', rules: [{ type: 'concurrency', name: 'slots', limit: 1, retry: 3 }] },
  ],
};
const POLICY = '"user.per-user";q=2;w=2000';

let d, client;
const servers = [];

before(async () => {
  d = await startDaemon(CONFIG);
  client = new Client(d.url, { timeoutMs: 5000 });
});

after(async () => {
  client.close();
  for (const s of servers) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
  assert.equal(await d.stop(), 0);
});

// An express app behind the middleware, serving on a free port: its base URL.
async function serve(middleware) {
  const app = express();
  app.use(middleware);
  app.get(['/', '/health'], (req, res) => res.send('hello'));
  app.get('/slow', async (req, res) => {
    // the slot is held while this runs: a dry run is denied
    const r = await client.acquire({ backend: 'gpu' }, { dryRun: true });
    res.json({ held: !r.allowed });
  });
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  servers.push(server);
  return `http://127.0.0.1:${server.address().port}`;
}

async function get(url, headers = {}) {
  const r = await fetch(url, { headers });
  return { status: r.status, headers: r.headers, body: await r.text() };
}

test('keyed by headers: allowed, then denied with Retry-After and RateLimit', async () => {
  const base = await serve(expressMiddleware(client, { keys: { user: 'X-User' } }));
  let r = await get(base, { 'X-User': 'ann' });
  assert.equal(r.status, 200);
  assert.equal(r.body, 'hello');
  assert.equal(r.headers.get('ratelimit-policy'), POLICY);
  assert.match(r.headers.get('ratelimit'), /^"user\.per-user";r=1;t=\d+$/);
  r = await get(base, { 'X-User': 'ann' });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('ratelimit'), /^"user\.per-user";r=0;t=\d+$/);
  // the third waits for one token at 0.001/s: 1000 s, less the few ms since
  r = await get(base, { 'X-User': 'ann' });
  assert.equal(r.status, 429);
  assert.equal(r.headers.get('retry-after'), '1000');
  assert.equal(r.headers.get('ratelimit-policy'), POLICY);
  assert.equal(r.headers.get('ratelimit'), '"user.per-user";r=0;t=1000');
  assert.equal(r.headers.get('content-type'), 'application/json');
  assert.match(r.body, /^\{"error":"rate limited","blocked_by":"user: per-user","retry_after":99\d\.\d+\}$/);
  // another user, and a request without the header (no level applies)
  assert.equal((await get(base, { 'X-User': 'bob' })).status, 200);
  r = await get(base);
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('ratelimit'), null);
});

test('cost from a function', async () => {
  const base = await serve(expressMiddleware(client, { keys: { user: 'x-user' }, cost: () => 2 }));
  assert.equal((await get(base, { 'X-User': 'cat' })).status, 200);
  assert.equal((await get(base, { 'X-User': 'cat' })).status, 429);
});

test('keyed by a function: the slot is held while a request runs, then released', async () => {
  const keys = (req) => {
    if (req.path === '/health') return null;
    if (req.path === '/slow') return { backend: 'gpu' };
    return {};
  };
  const base = await serve(expressMiddleware(client, { keys }));
  for (let i = 0; i < 3; i++) {
    const r = await get(`${base}/slow`);
    assert.equal(r.status, 200);
    assert.equal(r.body, '{"held":true}');
    // released once the answer is finished (the release is sent then, not awaited by it)
    for (let n = 0; (await d.metric('ratelimit_reservations_active')) !== 0; n++) {
      assert.ok(n < 100, 'the slot was not released');
      await sleep(20);
    }
  }
  const r = await get(`${base}/health`);
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('ratelimit'), null);
});

test("a refused key is the request's fault: 400 naming it", async () => {
  const base = await serve(expressMiddleware(client, { keys: { user: 'x-user' } }));
  const r = await get(base, { 'X-User': 'x'.repeat(300) });
  assert.equal(r.status, 400);
  assert.equal(r.headers.get('content-type'), 'application/json');
  assert.match(r.body, /^\{"error":"keys\.user: [^"]+"\}$/);
});

test('unreachable: fail open lets through, fail closed answers 429', async () => {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${s.address().port}`;
  await new Promise((r) => s.close(r));
  const open = new Client(url, { failOpen: true });
  let base = await serve(expressMiddleware(open, { keys: { user: 'x-user' } }));
  assert.equal((await get(base, { 'X-User': 'dee' })).status, 200);
  const closed = new Client(url, { failOpen: false });
  base = await serve(expressMiddleware(closed, { keys: { user: 'x-user' } }));
  const r = await get(base, { 'X-User': 'dee' });
  assert.equal(r.status, 429);
  assert.equal(r.headers.get('retry-after'), '1');
  assert.equal(r.body, '{"error":"rate limited","blocked_by":"ratelimitd: unavailable","retry_after":1}');
  open.close();
  closed.close();
});
