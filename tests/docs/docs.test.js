// The curl examples of README.md, docs/api.md, docs/usage.md, docs/adaptive.md and
// docs/budgets.md, run against a fresh daemon and their output compared with what the page
// shows, so that the docs cannot drift from the daemon.
//
//   RL_BUILD=build node --test tests/docs/      (make docs-check; make test runs it)
//
// The format, in a page (a ```sh block whose first line starts with "$ "):
//
//   ```sh
//   $ curl -s localhost:8080/quota/alice
//   {"user":"alice","tier":"free",...}
//   ```
//
// A line starting with "$ " is a command (continued on the next lines while a line ends with
// "\"); the lines after it, up to the next command or the end of the block, are its output.
// In the output, <any> stands for any text within a line (a time, a reservation id) and a line
// "..." for any number of lines. The answer's CRLFs are read as LFs, and a body without a final
// newline compares as if it had one. Commands run in order, in one shell (so R=$(curl ...) in one
// is seen by the next), with localhost:8080 replaced by the daemon's address.
//
// Each page gets a fresh daemon: build/ratelimitd --config config/default.json (as make run
// starts it) on port 0, in a temporary working directory (its quota and state files land there). A comment
// <!-- docs-check: restart ARGS --> stops it and starts a fresh one with ARGS added (for
// example --manual-clock, or --config config/examples/<file>.json, read from the repository)
// for the examples after it.
//
// Every line of a code block of those pages that calls curl must be part of such an example:
// an example that is not run fails the test.
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');

const ROOT = path.resolve(__dirname, '../..');
const BUILD = path.resolve(ROOT, process.env.RL_BUILD || 'build');
const DAEMON = path.join(BUILD, 'ratelimitd');
const PAGES = ['README.md', 'docs/api.md', 'docs/usage.md', 'docs/adaptive.md', 'docs/budgets.md'];
const CONFIG = path.join(ROOT, 'config/default.json'); // what make run serves

// ---- reading a page ---------------------------------------------------------------------------

// A restart argument naming a file of the repository's config/ (--config config/examples/x.json)
// is read from the repository, whatever the daemon's working directory.
const inRepo = (a) => (a.startsWith('config/') ? path.join(ROOT, a) : a);

// The examples of a page, in order, as sessions: [{args, examples: [{cmd, expect, line}]}], and
// the lines of its code blocks that call curl (to find examples that are not run).
function parse(text) {
  const lines = text.split('\n');
  const sessions = [{ args: [], examples: [] }];
  const curlLines = [];
  const ranLines = new Set();
  let fence = null; // the fence's info string while inside a block
  let block = []; // [lineNo, text] of the current block
  const flush = () => {
    const body = block;
    const first = body.find(([, t]) => t.trim() !== '');
    if (fence === 'sh' && first && first[1].startsWith('$ ')) {
      let cur = null;
      let cont = false;
      for (const [no, t] of body) {
        if (cont) {
          cur.cmd += '\n' + t;
          ranLines.add(no);
          cont = t.endsWith('\\');
        } else if (t.startsWith('$ ')) {
          cur = { cmd: t.slice(2), expect: [], line: no };
          sessions[sessions.length - 1].examples.push(cur);
          ranLines.add(no);
          cont = t.endsWith('\\');
        } else {
          cur.expect.push(t);
        }
      }
    }
  };
  lines.forEach((t, i) => {
    const no = i + 1;
    const m = /^```(\S*)/.exec(t);
    if (fence === null && m) {
      fence = m[1];
      block = [];
      return;
    }
    if (fence !== null && /^```\s*$/.test(t)) {
      flush();
      fence = null;
      return;
    }
    if (fence !== null) {
      block.push([no, t]);
      if (/(^|[\s($|])curl\s/.test(t)) curlLines.push(no);
      return;
    }
    const d = /^<!-- docs-check: restart(.*?)-->\s*$/.exec(t);
    if (d) sessions.push({ args: d[1].trim().split(/\s+/).filter(Boolean).map(inRepo), examples: [] });
  });
  assert.equal(fence, null, 'a code block is not closed');
  return { sessions, curlLines, ranLines };
}

// ---- comparing an output -----------------------------------------------------------------------

const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
function lineRe(pattern) {
  return new RegExp('^' + pattern.split('<any>').map(escape).join('.*?') + '$');
}

// Whether the lines got match the patterns want ("..." any number of lines).
function matches(want, got) {
  const memo = new Map();
  const go = (i, j) => {
    const k = i * (got.length + 1) + j;
    if (memo.has(k)) return memo.get(k);
    let r;
    if (i === want.length) r = j === got.length;
    else if (want[i] === '...') r = go(i + 1, j) || (j < got.length && go(i, j + 1));
    else r = j < got.length && lineRe(want[i]).test(got[j]) && go(i + 1, j + 1);
    memo.set(k, r);
    return r;
  };
  return go(0, 0);
}

const normalise = (s) => {
  const t = s.replace(/\r\n/g, '\n');
  const lines = t.split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  return lines;
};

// ---- the daemon ---------------------------------------------------------------------------------

function startDaemon(args, dir) {
  return new Promise((resolve, reject) => {
    const log = fs.openSync(path.join(dir, 'daemon.log'), 'a');
    const p = spawn(DAEMON, ['--config', CONFIG, '--port', '0', ...args], {
      cwd: dir, stdio: ['ignore', 'pipe', log],
    });
    fs.closeSync(log);
    let out = '';
    const timer = setTimeout(() => reject(new Error('the daemon did not start in 10 s')), 10000);
    p.stdout.on('data', (b) => {
      out += b;
      const m = /listening on ([\d.]+):(\d+)\n/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ p, port: Number(m[2]) });
      }
    });
    p.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the daemon exited (${code}) before listening: ` +
        fs.readFileSync(path.join(dir, 'daemon.log'), 'utf8')));
    });
  });
}

function stopDaemon(d) {
  return new Promise((resolve) => {
    if (d.p.exitCode !== null) return resolve(d.p.exitCode);
    d.p.removeAllListeners('exit');
    d.p.on('exit', (code) => resolve(code));
    d.p.kill('SIGTERM');
  });
}

// Runs the examples in one shell, each followed by a marker, and returns each one's output.
function runAll(examples, port, dir) {
  const mark = (i) => `@@docs-check ${i}@@`;
  let script = 'set +e\n';
  examples.forEach((ex, i) => {
    const cmd = ex.cmd.replace(/localhost:8080/g, `127.0.0.1:${port}`);
    script += `printf '\\n%s\\n' '${mark(i)}'\n${cmd}\n`;
  });
  script += `printf '\\n%s\\n' '${mark(examples.length)}'\n`;
  const r = spawnSync('bash', ['-c', script], { cwd: dir, encoding: 'utf8', timeout: 120000 });
  assert.equal(r.error, undefined, String(r.error));
  const outs = [];
  for (let i = 0; i < examples.length; i++) {
    const a = r.stdout.indexOf(mark(i) + '\n');
    const b = r.stdout.indexOf('\n' + mark(i + 1) + '\n');
    assert.ok(a >= 0 && b >= 0, `the output of example ${i} is missing: ${r.stderr}`);
    outs.push(r.stdout.slice(a + mark(i).length + 1, b));
  }
  return outs;
}

// ---- the tests ------------------------------------------------------------------------------------

test('the matcher', () => {
  assert.ok(matches(['{"a":<any>,"b":2}'], ['{"a":1.5,"b":2}']));
  assert.ok(!matches(['{"a":<any>,"b":2}'], ['{"a":1.5,"b":3}']));
  assert.ok(matches(['x', '...', 'z'], ['x', 'y1', 'y2', 'z']));
  assert.ok(matches(['x', '...'], ['x']));
  assert.ok(!matches(['x'], ['x', 'y']));
  assert.ok(!matches(['x.y'], ['xzy']));
  const { sessions, curlLines, ranLines } = parse(
    'a\n```sh\n$ curl -s x \\\n  -d 1\n{"ok":1}\n$ true\n```\n<!-- docs-check: restart --m -->\n' +
    '```sh\ncurl -s y\n```\n');
  assert.equal(sessions.length, 2);
  assert.deepEqual(sessions[0].examples.map((e) => [e.cmd, e.expect]),
    [['curl -s x \\\n  -d 1', ['{"ok":1}']], ['true', []]]);
  assert.deepEqual(sessions[1].args, ['--m']);
  assert.deepEqual(curlLines, [3, 10]);
  assert.deepEqual([...ranLines], [3, 4, 6]);
});

for (const page of PAGES) {
  test(`every curl example of ${page} answers as shown`, async () => {
    const text = fs.readFileSync(path.join(ROOT, page), 'utf8');
    const { sessions, curlLines, ranLines } = parse(text);
    const notRun = curlLines.filter((n) => !ranLines.has(n));
    assert.deepEqual(notRun, [], `${page}: lines calling curl that are no "$ " example`);
    const n = sessions.reduce((s, x) => s + x.examples.length, 0);
    assert.ok(n > 0, `${page}: no example`);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-docs-'));
    const failures = [];
    let ran = 0;
    try {
      for (const s of sessions) {
        if (s.examples.length === 0) continue;
        const d = await startDaemon(s.args, dir);
        try {
          const outs = runAll(s.examples, d.port, dir);
          s.examples.forEach((ex, i) => {
            ran++;
            const got = normalise(outs[i]);
            if (!matches(ex.expect, got))
              failures.push(`${page}:${ex.line}: $ ${ex.cmd}\n--- the page shows\n` +
                ex.expect.join('\n') + '\n--- the daemon answered\n' + got.join('\n'));
          });
        } finally {
          assert.equal(await stopDaemon(d), 0, 'the daemon did not stop cleanly');
        }
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    assert.equal(ran, n, `${page}: ${n} examples, ${ran} run`);
    if (failures.length) assert.fail(failures.join('\n\n'));
    console.log(`${page}: ${ran} examples run, ${curlLines.length} curl lines`);
  });
}
