// A real ratelimitd for the tests: build/ratelimitd (RL_BUILD names the build directory) on a
// free loopback port, with a configuration of the test's own, in a temporary directory.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const BUILD = path.resolve(ROOT, process.env.RL_BUILD || 'build');

export async function startDaemon(config, args = []) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-client-node-'));
  const cfg = path.join(tmp, 'config.json');
  fs.writeFileSync(cfg, JSON.stringify(config));
  const log = fs.openSync(path.join(tmp, 'stderr.log'), 'a');
  const p = spawn(path.join(BUILD, 'ratelimitd'), ['--config', cfg, '--port', '0', ...args],
    { cwd: tmp, stdio: ['ignore', 'pipe', log] });
  fs.closeSync(log);
  const lines = readline.createInterface({ input: p.stdout });
  const first = (await lines[Symbol.asyncIterator]().next()).value || '';
  if (!first.startsWith('listening on ')) {
    p.kill();
    throw new Error(`ratelimitd did not start: ${first}`);
  }
  const addr = first.split(' ').pop();
  return {
    addr,
    url: `http://${addr}`,
    // The value of a series of /metrics: a family without labels, or with them as shown.
    async metric(name) {
      const text = await (await fetch(`http://${addr}/metrics`)).text();
      const line = text.split('\n').find((l) => l.startsWith(name + ' '));
      if (!line) throw new Error(`no ${name} in /metrics`);
      return Number(line.split(' ')[1]);
    },
    // Stops the daemon and removes its folder; resolves to its exit code (0 when clean).
    stop() {
      return new Promise((resolve) => {
        p.on('exit', (code) => {
          fs.rmSync(tmp, { recursive: true, force: true });
          resolve(code);
        });
        p.kill('SIGTERM');
      });
    },
  };
}
