// The real daemon (real clock) on a free loopback port, and the model API in front of it.
'use strict';
const assert = require('node:assert');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');
const { startModelApi } = require('./model_api');

const ROOT = path.resolve(__dirname, '..', '..');
const BUILD = process.env.RL_BUILD || path.join(ROOT, 'build');

// The configuration of both test files. Worked out by hand (a prompt of 40 characters is 10
// input tokens, max_tokens 16 is 16 output tokens):
//
//   global.requests  token_bucket 1, 1/s (requests)   1 call, then full again 1 s after it
//   user.input       token_bucket 30000, 500/s        10 tokens take 20 ms to come back
//   user.output      token_bucket 60000, 100/s        16 tokens take 160 ms; 36000 take 6 min
//   user.dollars     token_bucket $5, $0.0001/s       (counted, in no header)
//
// The global rule says "unit": "requests": without it a rule counts `cost`, which no
// requests header reads in a configuration that declares dimensions.
const CONFIG = {
  listen: { address: '127.0.0.1', port: 0 },
  model_headers: 'both',
  dimensions: ['input_tokens', 'output_tokens'],
  prices: {
    by: 'model',
    models: {
      'gpt-4o-mini': { input_tokens: 0.15, output_tokens: 0.6 },
      'claude-sonnet-4-5': { input_tokens: 3, output_tokens: 15 },
    },
  },
  levels: [
    { name: 'user', rules: [
      { type: 'token_bucket', name: 'input', unit: 'input_tokens', capacity: 30000, per_second: 500 },
      { type: 'token_bucket', name: 'output', unit: 'output_tokens', capacity: 60000, per_second: 100 },
      { type: 'token_bucket', name: 'dollars', unit: 'usd', capacity: 5, per_second: 0.0001 },
    ] },
    { name: 'global', default_key: '*', rules: [
      { type: 'token_bucket', name: 'requests', unit: 'requests', capacity: 1, per_second: 1 },
    ] },
  ],
};

// A prompt of 40 characters: 10 input tokens.
const PROMPT = 'Say hello to the rate limiter, politely.';

// Starts ratelimitd with CONFIG and the model API before it; resolves to {daemon, api, stop()}.
async function startStack() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-sdk-'));
  const cfg = path.join(tmp, 'config.json');
  fs.writeFileSync(cfg, JSON.stringify(CONFIG));
  const daemon = spawn(path.join(BUILD, 'ratelimitd'), ['--config', cfg, '--port', '0'],
    { cwd: tmp, stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((resolve) => daemon.on('exit', (c) => resolve(c)));
  const lines = readline.createInterface({ input: daemon.stdout });
  const first = (await lines[Symbol.asyncIterator]().next()).value || '';
  assert.match(first, /^listening on 127\.0\.0\.1:\d+$/);
  const api = await startModelApi(`http://${first.split(' ').pop()}`);
  return {
    api,
    async stop() {
      await api.close();
      daemon.kill('SIGTERM');
      const code = await exited;
      fs.rmSync(tmp, { recursive: true, force: true });
      assert.strictEqual(code, 0);
    },
  };
}

module.exports = { CONFIG, PROMPT, startStack };
