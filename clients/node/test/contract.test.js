// The client's table of fields (contract.js) against api/openapi.yaml, read with the `yaml`
// package (pinned by package-lock.json): every request and answer field of /acquire, /refund and
// /release in the document must be in the table, every field of the table in the document (but
// those PENDING, which must not be there yet), and the client must read and send exactly them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import http from 'node:http';
import { FIELDS, PENDING, top } from '../contract.js';
import { Client } from '../index.js';
import { ROOT } from './daemon.js';

const load = () => YAML.parse(fs.readFileSync(path.join(ROOT, 'api', 'openapi.yaml'), 'utf8'));

function resolve(doc, node) {
  while (node && node.$ref) {
    assert.ok(node.$ref.startsWith('#/'), `only local $ref are read: ${node.$ref}`);
    node = node.$ref.slice(2).split('/').reduce((n, p) => n[p], doc);
  }
  return node;
}

// The field paths of a JSON schema: `name`, and `name[].field` for a list of objects.
function fields(doc, schema, prefix = '') {
  schema = resolve(doc, schema);
  for (const word of ['allOf', 'oneOf', 'anyOf'])
    assert.ok(!(word in schema), `the contract test does not read ${word}: teach it`);
  const out = [];
  for (const [name, s] of Object.entries(schema.properties || {})) {
    out.push(prefix + name);
    const sub = resolve(doc, s);
    if (sub.type === 'array' && sub.items) out.push(...fields(doc, sub.items, `${prefix}${name}[].`));
    else if (sub.type === 'object' && sub.properties) out.push(...fields(doc, sub, `${prefix}${name}.`));
  }
  return out;
}

// [request fields, answer fields] of POST `p`: the answers are those of 2xx and 429.
function documented(doc, p) {
  const op = doc.paths[p].post;
  const req = fields(doc, op.requestBody.content['application/json'].schema);
  const resp = [];
  for (const [code, a] of Object.entries(op.responses)) {
    const answer = resolve(doc, a);
    if (code.startsWith('2') || code === '429')
      resp.push(...fields(doc, answer.content['application/json'].schema));
  }
  return [new Set(req), new Set(resp)];
}

// What the document and the table disagree on, as messages.
export function differences(doc) {
  const out = [];
  for (const [op, t] of Object.entries(FIELDS)) {
    const [req, resp] = documented(doc, t.path);
    const pending = new Set(PENDING[op] || []);
    for (const [kind, inDoc, mine] of [['request', req, new Set(Object.keys(t.request))],
      ['answer', resp, new Set(t.response)]]) {
      for (const f of [...inDoc].filter((x) => !mine.has(x)).sort())
        out.push(`${t.path} ${kind} field ${f} is in api/openapi.yaml but not in the client's table (contract.js)`);
      for (const f of [...mine].filter((x) => !inDoc.has(x) && !pending.has(x)).sort())
        out.push(`${t.path} ${kind} field ${f} is in the client's table but not in api/openapi.yaml`);
      for (const f of [...inDoc].filter((x) => pending.has(x)).sort())
        out.push(`${t.path} ${kind} field ${f} is in api/openapi.yaml now: drop it from PENDING`);
    }
  }
  return out;
}

test('the table follows the document', () => {
  assert.deepEqual(differences(load()), []);
});

test('a field added to the document fails', () => {
  let doc = load();
  doc.components.schemas.Decision.properties.quota_left = { type: 'number' };
  doc.components.schemas.Limit.properties.window = { type: 'number' };
  doc.components.schemas.RefundRequest.properties.reason = { type: 'string' };
  assert.deepEqual(differences(doc), [
    "/acquire answer field limits[].window is in api/openapi.yaml but not in the client's table (contract.js)",
    "/acquire answer field quota_left is in api/openapi.yaml but not in the client's table (contract.js)",
    "/refund request field reason is in api/openapi.yaml but not in the client's table (contract.js)",
  ]);
  doc = load();
  delete doc.components.schemas.Settlement.properties.charged;
  PENDING.acquire = ['usage'];
  try {
    assert.deepEqual(differences(doc), [
      '/acquire request field usage is in api/openapi.yaml now: drop it from PENDING',
      "/refund answer field charged is in the client's table but not in api/openapi.yaml",
    ]);
  } finally {
    delete PENDING.acquire;
  }
});

test('the client sends every request field of the table and reads every answer field', async () => {
  // A stand-in daemon that records each body and answers with every field of the table.
  const seen = {};
  const answers = {
    '/acquire': { allowed: true, retry_after: 0, blocked_by: null, reservation: 'r-0123456789abcdef',
      limits: [{ level: 'u', key: 'k', rule: 'r', limit: 1, remaining: 0, reset_after: 1 }] },
    '/refund': { reservation: 'r-0123456789abcdef', reserved_cost: 2, actual_cost: 1, refunded: 1, charged: 0 },
    '/release': { released: true },
  };
  const server = http.createServer((req, res) => {
    let b = '';
    req.on('data', (c) => { b += c; });
    req.on('end', () => {
      seen[req.url] = JSON.parse(b);
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(answers[req.url]));
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const c = new Client(`http://127.0.0.1:${server.address().port}`);
  try {
    const d = await c.acquire({ user: 'a' }, { cost: 2, usage: { input_tokens: 1 }, priority: 1,
      reserve: true, dryRun: true, now: 5 });
    await c.refund('r-0123456789abcdef', 1,
      { actualUsage: { input_tokens: 1 }, now: 5, latencyMs: 120, outcome: 'ok' });
    await c.release('r-0123456789abcdef', { now: 5, latencyMs: 120, outcome: 'error' });
    for (const op of Object.values(FIELDS))
      assert.deepEqual(Object.keys(seen[op.path]).sort(), Object.keys(op.request).sort(), op.path);
    assert.deepEqual(Object.keys(d).sort(),
      [...top(FIELDS.acquire.response), 'headers', 'unavailable', 'error'].sort());
    assert.deepEqual(d.limits, answers['/acquire'].limits);
  } finally {
    c.close();
    await new Promise((r) => server.close(r));
  }
});
