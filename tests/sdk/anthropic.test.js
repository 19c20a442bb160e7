// The official @anthropic-ai/sdk package against the model API in front of ratelimitd
// (harness.js has the configuration and the numbers): its retry logic waits as the 429 says
// and then succeeds, and the anthropic-ratelimit-* headers it receives read as Anthropic
// documents them: limits and remaining amounts whole numbers, resets RFC 3339 times in UTC.
//
// Run by make sdk-check with RL_BUILD naming the build directory.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const { performance } = require('node:perf_hooks');
const { Anthropic } = require('@anthropic-ai/sdk');
const { PROMPT, startStack } = require('./harness');
const { integer, rfc3339Ms, ceilSecond, pick } = require('./formats');

let stack, api;

before(async () => {
  stack = await startStack();
  api = stack.api;
});

after(async () => {
  await stack.stop();
});

const client = (apiKey, maxRetries) => new Anthropic({ apiKey, baseURL: api.url, maxRetries });

const ask = (c, model = 'claude-sonnet-4-5', max = 16, options = undefined) =>
  c.messages.create({ model, max_tokens: max, messages: [{ role: 'user', content: PROMPT }] }, options);

const ANTHROPIC = /^anthropic-ratelimit-/;

// Checks the headers h against the limits and remaining amounts in want and the resets
// (ms after the decision) in resets: the decision was made between t0 and t1 (Date.now()),
// and a reset is that time plus the wait, rounded up to the second.
function check(h, want, resets, t0, t1) {
  const got = pick(h, ANTHROPIC);
  const names = [...Object.keys(want), ...Object.keys(resets).map((f) => `anthropic-ratelimit-${f}-reset`)];
  assert.deepStrictEqual(Object.keys(got).sort(), names.sort());
  for (const [k, v] of Object.entries(want)) {
    integer(got[k]);
    if (Array.isArray(v)) assert.ok(Number(got[k]) >= v[0] && Number(got[k]) <= v[1], `${k}: ${got[k]}`);
    else assert.strictEqual(got[k], v, k);
  }
  for (const [family, [lo, hi]] of Object.entries(resets)) {
    const k = `anthropic-ratelimit-${family}-reset`;
    const at = rfc3339Ms(got[k]);
    assert.ok(at >= ceilSecond(t0 + lo) && at <= ceilSecond(t1 + 1 + hi),
      `${k}: ${got[k]}, decided between ${new Date(t0).toISOString()} and ${new Date(t1).toISOString()}`);
  }
}

// After a call of 10 input and 16 output tokens on full buckets: requests 1 of 1 taken (full
// again in 1 s); input 29990 of 30000 (back in 20 ms), output 59984 of 60000 (160 ms); tokens:
// the one with the least left, the input rule.
const AFTER_ONE = {
  'anthropic-ratelimit-requests-limit': '1',
  'anthropic-ratelimit-requests-remaining': '0',
  'anthropic-ratelimit-tokens-limit': '30000',
  'anthropic-ratelimit-tokens-remaining': '29990',
  'anthropic-ratelimit-input-tokens-limit': '30000',
  'anthropic-ratelimit-input-tokens-remaining': '29990',
  'anthropic-ratelimit-output-tokens-limit': '60000',
  'anthropic-ratelimit-output-tokens-remaining': '59984',
};
const RESETS_ONE = { requests: [1000, 1000], tokens: [20, 20], 'input-tokens': [20, 20],
  'output-tokens': [160, 160] };

test('two calls in a row: the second is denied, the SDK waits as told, then succeeds', async () => {
  const sdk = client('sk-ant-alice', 2);
  let t0 = Date.now();
  const first = await ask(sdk).withResponse();
  check(first.response.headers, AFTER_ONE, RESETS_ONE, t0, Date.now());
  assert.strictEqual(first.response.status, 200);
  assert.deepStrictEqual(first.data.content, [{ type: 'text', text: 'Hello!' }]);
  assert.strictEqual(first.request_id, `req_${api.attempts.length}`);

  const seen = api.attempts.length;
  const p0 = performance.now();
  t0 = Date.now();
  const second = await ask(sdk).withResponse();
  const elapsed = performance.now() - p0;
  const tries = api.attempts.slice(seen);
  assert.deepStrictEqual(tries.map((a) => [a.user, a.status]), [['sk-ant-alice', 429], ['sk-ant-alice', 200]]);
  assert.deepStrictEqual(tries[0].usage, { input_tokens: 10, output_tokens: 16 });
  const retryAfter = tries[0].headers['retry-after'];
  assert.strictEqual(retryAfter, '1');
  assert.ok(elapsed >= 1000 * Number(retryAfter), `the call took ${elapsed} ms`);
  assert.ok(tries[1].at - tries[0].at >= 1000 * Number(retryAfter) - 1,
    `retried ${tries[1].at - tries[0].at} ms after the 429`);
  assert.strictEqual(second.response.status, 200);
  assert.strictEqual(second.data.type, 'message');
  // the retry's decision came at least 1 s after t0, every bucket full again by then
  check(second.response.headers, AFTER_ONE, RESETS_ONE, t0 + 1000, Date.now());
});

async function denied(sdk) {
  for (let i = 0; i < 5; i++) {
    try {
      await ask(sdk);
    } catch (e) {
      return e;
    }
  }
  return assert.fail('five calls in a row were all allowed');
}

test('the 429 as the SDK reports it: RateLimitError, retry-after and anthropic-ratelimit-*', async () => {
  const t0 = Date.now();
  const err = await denied(client('sk-ant-alice', 0));
  const t1 = Date.now();
  assert.ok(err instanceof Anthropic.RateLimitError, String(err));
  assert.strictEqual(err.status, 429);
  assert.strictEqual(err.type, 'rate_limit_error');
  assert.deepStrictEqual(Object.keys(err.error), ['type', 'error']);
  assert.strictEqual(err.error.type, 'error');
  assert.strictEqual(err.apiMessage, err.error.error.message);
  assert.match(err.apiMessage, /^Rate limit reached \(global: requests\); retry after 0\.\d+s$/);
  assert.strictEqual(err.requestID, `req_${api.attempts.length}`);
  assert.strictEqual(err.headers.get('retry-after'), '1');
  // the request slot comes back within 1 s; the buckets of tokens are between 10 and 16 tokens
  // short at most, back within 20 and 160 ms
  check(err.headers, {
    'anthropic-ratelimit-requests-limit': '1',
    'anthropic-ratelimit-requests-remaining': '0',
    'anthropic-ratelimit-tokens-limit': '30000',
    'anthropic-ratelimit-tokens-remaining': [29990, 30000],
    'anthropic-ratelimit-input-tokens-limit': '30000',
    'anthropic-ratelimit-input-tokens-remaining': [29990, 30000],
    'anthropic-ratelimit-output-tokens-limit': '60000',
    'anthropic-ratelimit-output-tokens-remaining': [59984, 60000],
  }, { requests: [0, 1000], tokens: [0, 20], 'input-tokens': [0, 20], 'output-tokens': [0, 160] },
  t0, t1);
});

test('a long answer: the output tokens reset minutes later', async () => {
  // max_tokens 21000 of the output rule's 60000 at 100/s: 39000 left, full in 210 s; tokens
  // stay the input rule's (29990 left is fewer). The global slot may be taken: the SDK retries.
  const t0 = Date.now();
  const { data, response } = await ask(client('sk-ant-bob', 2), 'claude-sonnet-4-5', 21000).withResponse();
  assert.deepStrictEqual(data.usage, { input_tokens: 10, output_tokens: 2 });
  // the allowed attempt is the last one the server answered
  const at = api.attempts.at(-1);
  assert.strictEqual(at.status, 200);
  check(response.headers, { ...AFTER_ONE, 'anthropic-ratelimit-output-tokens-remaining': '39000' },
    { ...RESETS_ONE, 'output-tokens': [210000, 210000] }, t0, Date.now());
});

test('a call that can never fit: 429 without retry-after, x-should-retry: false, no retry', async () => {
  // max_tokens 70000 is more than the output rule's 60000 ever holds (with a timeout: the SDK
  // refuses a call this long without one unless it is streamed)
  const before = api.attempts.length;
  await assert.rejects(ask(client('sk-ant-dave', 2), 'claude-sonnet-4-5', 70000, { timeout: 60000 }), (e) => {
    assert.ok(e instanceof Anthropic.RateLimitError, String(e));
    assert.strictEqual(e.headers.get('retry-after'), null);
    assert.strictEqual(e.headers.get('x-should-retry'), 'false');
    assert.match(e.apiMessage, /^Rate limit reached \(user: output\); retry after never$/);
    return true;
  });
  assert.deepStrictEqual(api.attempts.slice(before).map((a) => a.status), [429]);
});

test('a model without a price: BadRequestError naming it, not retried', async () => {
  const before = api.attempts.length;
  await assert.rejects(ask(client('sk-ant-carol', 2), 'claude-unknown'), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError, String(e));
    assert.strictEqual(e.status, 400);
    assert.strictEqual(e.type, 'invalid_request_error');
    assert.strictEqual(e.apiMessage, 'keys.model: no prices for "claude-unknown"');
    return true;
  });
  assert.deepStrictEqual(api.attempts.slice(before).map((a) => a.status), [400]);
});
