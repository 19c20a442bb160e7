// The package installs as a user installs it: `npm pack`, then `npm install` of the tarball
// into a project of its own (no network: the package has no dependencies), imported by name.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const PKG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

test('npm pack, npm install the tarball, import it by name', () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-client-node-pkg-'));
  try {
    const npm = (args, cwd) => execFileSync('npm', [...args, '--no-audit', '--no-fund',
      '--loglevel=error'], { cwd, encoding: 'utf8' });
    const tgz = npm(['pack', '--pack-destination', tmp], PKG).trim().split('\n').pop();
    assert.equal(tgz, 'ratelimitd-client-0.1.0.tgz');
    const project = path.join(tmp, 'project');
    fs.mkdirSync(project);
    fs.writeFileSync(path.join(project, 'package.json'), '{"name": "app", "private": true, "type": "module"}');
    npm(['install', '--offline', path.join(tmp, tgz)], project);
    const files = fs.readdirSync(path.join(project, 'node_modules', 'ratelimitd-client')).sort();
    assert.deepEqual(files, ['README.md', 'contract.js', 'index.js', 'package.json']);
    const out = execFileSync('node', ['--input-type=module', '-e',
      "import * as m from 'ratelimitd-client'; console.log(Object.keys(m).sort().join(' '))"],
    { cwd: project, encoding: 'utf8' });
    assert.equal(out.trim(), 'Client FIELDS PENDING RateLimitdError RateLimited Reservation ' +
      'Unavailable expressMiddleware retryAfterHeader');
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
