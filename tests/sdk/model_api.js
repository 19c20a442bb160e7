// A small model API in front of ratelimitd, the way a platform that resells model access puts
// one: OpenAI's POST /v1/chat/completions and Anthropic's POST /v1/messages, each asking
// ratelimitd's POST /acquire before answering, with
//
//   keys    {"user": <the API key>, "model": <the body's model>}
//   usage   {"input_tokens": <the prompt's characters / 4, rounded up>,
//            "output_tokens": <max_tokens>}
//
// and passing its x-ratelimit-*, anthropic-ratelimit-* and retry-after headers on. Allowed: a
// small fake completion in the provider's shape. Denied: 429 with the provider's error body.
// A denial that no wait can cure adds x-should-retry: false, which both SDKs obey. ratelimitd's
// 400 (say, a model without a price) is the provider's invalid_request_error.
// Every answer is recorded in `attempts` ({api, user, model, usage, status, headers, at}, `at`
// from performance.now()) so that a test sees the denied attempt and the retry.
'use strict';
const http = require('node:http');
const { performance } = require('node:perf_hooks');

const PASSED_ON = /^(x-ratelimit-|anthropic-ratelimit-|retry-after$)/;

// The input tokens of a prompt, estimated: a token for every 4 characters, rounded up.
function estimateTokens(texts) {
  const chars = texts.reduce((n, t) => n + t.length, 0);
  return Math.ceil(chars / 4);
}

// The texts of a message's content: a string, or a list of blocks of which the text ones count.
function contentTexts(content) {
  if (typeof content === 'string') return [content];
  if (Array.isArray(content)) return content.filter((b) => b && typeof b.text === 'string').map((b) => b.text);
  return [];
}

const openai = {
  name: 'openai',
  user: (req) => (req.headers.authorization || '').replace(/^Bearer\s+/i, ''),
  usage(body) {
    const texts = (body.messages || []).flatMap((m) => contentTexts(m.content));
    return { input_tokens: estimateTokens(texts),
      output_tokens: body.max_completion_tokens ?? body.max_tokens ?? 256 };
  },
  ok(body, usage, n) {
    return {
      id: `chatcmpl-${n}`, object: 'chat.completion', created: Math.floor(Date.now() / 1000),
      model: body.model,
      choices: [{ index: 0, message: { role: 'assistant', content: 'Hello!', refusal: null },
        logprobs: null, finish_reason: 'stop' }],
      usage: { prompt_tokens: usage.input_tokens, completion_tokens: 2,
        total_tokens: usage.input_tokens + 2 },
    };
  },
  error(status, message, blockedBy) {
    if (status === 429) {
      return { error: { message, type: blockedBy && /request/.test(blockedBy) ? 'requests' : 'tokens',
        param: null, code: 'rate_limit_exceeded' } };
    }
    const type = status === 401 ? 'invalid_request_error' : status === 400 ? 'invalid_request_error' : 'api_error';
    return { error: { message, type, param: status === 400 ? 'model' : null,
      code: status === 401 ? 'invalid_api_key' : null } };
  },
  idHeader: 'x-request-id',
};

const anthropic = {
  name: 'anthropic',
  // x-api-key, or Authorization: Bearer, which the SDK sends its apiKey as since its 1.x
  user: (req) => req.headers['x-api-key'] || (req.headers.authorization || '').replace(/^Bearer\s+/i, ''),
  usage(body) {
    const texts = [...contentTexts(body.system),
      ...(body.messages || []).flatMap((m) => contentTexts(m.content))];
    return { input_tokens: estimateTokens(texts), output_tokens: body.max_tokens ?? 0 };
  },
  ok(body, usage, n) {
    return {
      id: `msg_${n}`, type: 'message', role: 'assistant', model: body.model,
      content: [{ type: 'text', text: 'Hello!' }], stop_reason: 'end_turn', stop_sequence: null,
      usage: { input_tokens: usage.input_tokens, output_tokens: 2 },
    };
  },
  error(status, message) {
    const type = { 400: 'invalid_request_error', 401: 'authentication_error',
      429: 'rate_limit_error' }[status] || 'api_error';
    return { type: 'error', error: { type, message } };
  },
  idHeader: 'request-id',
};

const ROUTES = { '/v1/chat/completions': openai, '/v1/messages': anthropic };

// Starts the API on a free loopback port in front of ratelimitd at `ratelimitd` (its base URL);
// resolves to {url, attempts, close()}.
async function startModelApi(ratelimitd) {
  const attempts = [];
  let n = 0;
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      handle(req, Buffer.concat(chunks).toString('utf8')).then(({ status, headers, body }) => {
        res.writeHead(status, { 'content-type': 'application/json', ...headers });
        res.end(JSON.stringify(body));
      }, (e) => {
        res.writeHead(500, { 'content-type': 'application/json' });
        const why = e && e.cause ? `${e} (${e.cause.code || e.cause.message || e.cause})` : String(e);
        res.end(JSON.stringify({ error: { message: why, type: 'api_error' } }));
      });
    });
  });

  async function handle(req, text) {
    const api = ROUTES[req.url];
    n += 1;
    if (!api || req.method !== 'POST') {
      return { status: 404, headers: {}, body: { error: { message: `no route ${req.method} ${req.url}` } } };
    }
    const id = { [api.idHeader]: `req_${n}` };
    let body;
    try {
      body = JSON.parse(text);
    } catch {
      return { status: 400, headers: id, body: api.error(400, 'the body is not JSON') };
    }
    const user = api.user(req);
    if (!user) return { status: 401, headers: id, body: api.error(401, 'no API key') };
    const usage = api.usage(body);
    const asked = await fetch(`${ratelimitd}/acquire`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ keys: { user, model: body.model }, usage }),
    });
    const decision = await asked.json();
    const headers = { ...id };
    for (const [k, v] of asked.headers) if (PASSED_ON.test(k)) headers[k] = v;
    let status, answer;
    if (asked.status === 200) {
      status = 200;
      answer = api.ok(body, usage, n);
    } else if (asked.status === 429) {
      status = 429;
      const wait = decision.retry_after == null ? 'never' : `${decision.retry_after}s`;
      // a request that can never fit (retry_after null, no retry-after): the SDKs' own
      // backoff would only ask again in vain, so tell them not to
      if (decision.retry_after == null) headers['x-should-retry'] = 'false';
      answer = api.error(429, `Rate limit reached (${decision.blocked_by}); retry after ${wait}`,
        decision.blocked_by);
    } else if (asked.status === 400) {
      status = 400;
      answer = api.error(400, decision.error);
    } else {
      status = 500;
      answer = api.error(500, `ratelimitd answered ${asked.status}`);
    }
    attempts.push({ api: api.name, user, model: body.model, usage, status, headers,
      at: performance.now() });
    return { status, headers, body: answer };
  }

  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    attempts,
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(resolve);
    }),
  };
}

module.exports = { startModelApi, estimateTokens };
