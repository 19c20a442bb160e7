// The official openai package against the model API in front of ratelimitd (harness.js has
// the configuration and the numbers): its retry logic waits as the 429 says and then succeeds,
// and the x-ratelimit-* headers it receives read as OpenAI documents them.
//
// Run by make sdk-check with RL_BUILD naming the build directory.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const { performance } = require('node:perf_hooks');
const { OpenAI } = require('openai');
const { PROMPT, startStack } = require('./harness');
const { goDurationMs, integer, pick } = require('./formats');

let stack, api;

before(async () => {
  stack = await startStack();
  api = stack.api;
});

after(async () => {
  await stack.stop();
});

const client = (apiKey, maxRetries) =>
  new OpenAI({ apiKey, baseURL: `${api.url}/v1`, maxRetries });

const ask = (c, model = 'gpt-4o-mini', max = 16) =>
  c.chat.completions.create({ model, max_tokens: max, messages: [{ role: 'user', content: PROMPT }] });

const OPENAI = /^x-ratelimit-/;

test('two calls in a row: the second is denied, the SDK waits as told, then succeeds', async () => {
  const sdk = client('sk-alice', 2);
  const first = await ask(sdk).withResponse();
  assert.strictEqual(first.response.status, 200);
  assert.strictEqual(first.data.choices[0].message.content, 'Hello!');
  assert.strictEqual(first.request_id, `req_${api.attempts.length}`);
  // requests: 1 of 1 taken, full again 1 s later; tokens: the input rule (29990 left of 30000,
  // fewer than the output rule's 59984 of 60000), its 10 tokens back in 10 / 500 s = 20 ms
  const expected = {
    'x-ratelimit-limit-requests': '1',
    'x-ratelimit-remaining-requests': '0',
    'x-ratelimit-reset-requests': '1s',
    'x-ratelimit-limit-tokens': '30000',
    'x-ratelimit-remaining-tokens': '29990',
    'x-ratelimit-reset-tokens': '20ms',
  };
  assert.deepStrictEqual(pick(first.response.headers, OPENAI), expected);

  const seen = api.attempts.length;
  const t0 = performance.now();
  const second = await ask(sdk).withResponse();
  const elapsed = performance.now() - t0;
  const tries = api.attempts.slice(seen);
  assert.deepStrictEqual(tries.map((a) => [a.user, a.status]), [['sk-alice', 429], ['sk-alice', 200]]);
  assert.deepStrictEqual(tries[0].usage, { input_tokens: 10, output_tokens: 16 });
  // denied a few ms after the first call: 1 s less those ms, rounded up to whole seconds
  const retryAfter = tries[0].headers['retry-after'];
  assert.strictEqual(retryAfter, '1');
  assert.ok(elapsed >= 1000 * Number(retryAfter), `the call took ${elapsed} ms`);
  // the server's own clock, from the 429 to the retry (timers count whole milliseconds)
  assert.ok(tries[1].at - tries[0].at >= 1000 * Number(retryAfter) - 1,
    `retried ${tries[1].at - tries[0].at} ms after the 429`);
  assert.strictEqual(second.response.status, 200);
  assert.strictEqual(second.data.object, 'chat.completion');
  // a second later every bucket is full again: the same numbers as after the first call
  assert.deepStrictEqual(pick(second.response.headers, OPENAI), expected);
});

// A denial reaches the caller when no retry is left: the error carries the headers.
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

test('the 429 as the SDK reports it: RateLimitError, retry-after and x-ratelimit-*', async () => {
  const before = api.attempts.length;
  const err = await denied(client('sk-alice', 0));
  assert.ok(err instanceof OpenAI.RateLimitError, String(err));
  assert.strictEqual(err.status, 429);
  assert.strictEqual(err.code, 'rate_limit_exceeded');
  assert.strictEqual(err.type, 'requests');
  assert.match(err.message, /^429 Rate limit reached \(global: requests\); retry after 0\.\d+s$/);
  assert.strictEqual(api.attempts.at(-1).status, 429);
  assert.ok(api.attempts.length - before >= 1);
  const h = pick(err.headers, /^(x-ratelimit-|retry-after$)/);
  assert.deepStrictEqual(Object.keys(h).sort(), [
    'retry-after', 'x-ratelimit-limit-requests', 'x-ratelimit-limit-tokens',
    'x-ratelimit-remaining-requests', 'x-ratelimit-remaining-tokens',
    'x-ratelimit-reset-requests', 'x-ratelimit-reset-tokens',
  ]);
  assert.strictEqual(h['retry-after'], '1');
  assert.strictEqual(h['x-ratelimit-limit-requests'], '1');
  assert.strictEqual(h['x-ratelimit-remaining-requests'], '0');
  // less than 1 s to wait for the request slot: in ms, at most 1 s
  const reset = goDurationMs(h['x-ratelimit-reset-requests']);
  assert.ok(reset > 0 && reset <= 1000, h['x-ratelimit-reset-requests']);
  assert.strictEqual(h['x-ratelimit-limit-tokens'], '30000');
  // the input rule, 10 tokens short at most and coming back at 500/s
  const remaining = integer(h['x-ratelimit-remaining-tokens']);
  assert.ok(remaining >= 29990 && remaining <= 30000, String(remaining));
  assert.ok(goDurationMs(h['x-ratelimit-reset-tokens']) <= 20, h['x-ratelimit-reset-tokens']);
});

test('a long answer: the token headers come from the output rule, reset in minutes', async () => {
  // max_tokens 36000 of the output rule's 60000 at 100/s: 24000 left, full in 360 s = 6m0s,
  // now fewer than the input rule's 29990. The global slot may be taken: the SDK retries.
  const { data, response } = await ask(client('sk-bob', 2), 'gpt-4o-mini', 36000).withResponse();
  assert.strictEqual(data.usage.prompt_tokens, 10);
  assert.deepStrictEqual(pick(response.headers, OPENAI), {
    'x-ratelimit-limit-requests': '1',
    'x-ratelimit-remaining-requests': '0',
    'x-ratelimit-reset-requests': '1s',
    'x-ratelimit-limit-tokens': '60000',
    'x-ratelimit-remaining-tokens': '24000',
    'x-ratelimit-reset-tokens': '6m0s',
  });
  assert.deepStrictEqual(api.attempts.at(-1).usage, { input_tokens: 10, output_tokens: 36000 });
});

test('a call that can never fit: 429 without retry-after, x-should-retry: false, no retry', async () => {
  // max_tokens 70000 is more than the output rule's 60000 ever holds
  const before = api.attempts.length;
  await assert.rejects(ask(client('sk-dave', 2), 'gpt-4o-mini', 70000), (e) => {
    assert.ok(e instanceof OpenAI.RateLimitError, String(e));
    assert.strictEqual(e.headers.get('retry-after'), null);
    assert.strictEqual(e.headers.get('x-should-retry'), 'false');
    assert.match(e.message, /^429 Rate limit reached \(user: output\); retry after never$/);
    return true;
  });
  assert.deepStrictEqual(api.attempts.slice(before).map((a) => a.status), [429]);
});

test('a model without a price: BadRequestError naming it, not retried', async () => {
  const before = api.attempts.length;
  await assert.rejects(ask(client('sk-carol', 2), 'gpt-5'), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.strictEqual(e.status, 400);
    assert.strictEqual(e.type, 'invalid_request_error');
    assert.strictEqual(e.param, 'model');
    assert.match(e.message, /^400 keys\.model: no prices for "gpt-5"$/);
    return true;
  });
  assert.deepStrictEqual(api.attempts.slice(before).map((a) => a.status), [400]);
});
