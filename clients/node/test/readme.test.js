// The ```js blocks of clients/node/README.md, each run as shown (127.0.0.1:8080 replaced by a
// real daemon's address) as a module of this package, and then exercised: every block must be
// exercised by one check below, so an example cannot go untested.
//
// The daemon's `user` level counts tokens: token_bucket "tokens", capacity 100000, 1000/s.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { startDaemon } from './daemon.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const README = path.join(HERE, '..', 'README.md');
const CONFIG = {
  listen: { address: '127.0.0.1', port: 0 },
  levels: [{ name: 'user', rules: [{ type: 'token_bucket', name: 'tokens', capacity: 100000, per_second: 1000 }] }],
};
// Stand-ins for the tokenizer and the model: a prompt of 200 tokens, a reply of 734.
const PRELUDE = 'const countTokens = (prompt) => 200;\n' +
  'const callModel = async (prompt, { maxTokens }) => ({ text: "...", usage: { input_tokens: 200, output_tokens: 734 } });\n';

let d, dir;
before(async () => {
  d = await startDaemon(CONFIG);
  // inside the package, so that 'ratelimitd-client' and 'express' resolve as for a user
  dir = fs.mkdtempSync(path.join(HERE, '.readme-'));
});
after(async () => {
  fs.rmSync(dir, { recursive: true, force: true });
  assert.equal(await d.stop(), 0);
});

test('every example of the README runs', async () => {
  const blocks = [...fs.readFileSync(README, 'utf8').matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
  assert.ok(blocks.length >= 2, "the README's examples are missing");
  for (const [i, code] of blocks.entries()) {
    const file = path.join(dir, `block-${i}.mjs`);
    fs.writeFileSync(file, PRELUDE + code.replaceAll('127.0.0.1:8080', d.addr));
    const m = await import(pathToFileURL(file));
    if (m.complete) {
      const reply = await m.complete('alice', 'Say hello.', 1000);
      assert.equal(reply.usage.output_tokens, 734);
      // reserved 200 + 1000, used 200 + 734: 266 came back, none is held any more
      assert.equal(await d.metric('ratelimit_cost_total'), 1200);
      assert.equal(await d.metric('ratelimit_refunded_cost_total'), 266);
      assert.equal(await d.metric('ratelimit_reservations_active'), 0);
    } else if (m.app) {
      const server = await new Promise((resolve) => {
        const s = m.app.listen(0, '127.0.0.1', () => resolve(s));
      });
      try {
        const r = await fetch(`http://127.0.0.1:${server.address().port}/`, { headers: { 'X-User': 'express' } });
        assert.equal(r.status, 200);
        assert.equal(await r.text(), 'hello');
        assert.match(r.headers.get('ratelimit'), /^"user\.tokens";r=99999;t=\d+$/);
      } finally {
        server.closeAllConnections();
        await new Promise((r) => server.close(r));
      }
    } else {
      assert.fail(`README block ${i} is not exercised by this test:\n${code}`);
    }
  }
});
